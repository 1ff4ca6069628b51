//! `shoal config set|get|rm|ls`: the cluster-wide settings the monitors keep in the map
//! (`shoal_map::config`). A change reaches every daemon with the next map.

use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use serde_json::json;
use shoal_map::Command;
use shoal_map::config::{SETTINGS, setting};

use crate::admin::print;
use crate::conf::ConfArgs;

#[derive(Subcommand)]
pub enum ConfigCommand {
    /// Set KEY to VALUE for the whole cluster (`shoal config ls` names the keys and bounds).
    Set {
        #[command(flatten)]
        conf: ConfArgs,
        key: String,
        value: u64,
        #[arg(long)]
        json: bool,
    },
    /// KEY's value (its default unless set).
    Get {
        #[command(flatten)]
        conf: ConfArgs,
        key: String,
        #[arg(long)]
        json: bool,
    },
    /// Put KEY back to its default.
    Rm {
        #[command(flatten)]
        conf: ConfArgs,
        key: String,
        #[arg(long)]
        json: bool,
    },
    /// Every setting with its value, default, bounds and meaning.
    Ls {
        #[command(flatten)]
        conf: ConfArgs,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: &ConfigCommand) -> Result<ExitCode> {
    match cmd {
        ConfigCommand::Set { conf, key, value, json } => {
            let client = conf.connect()?;
            let command = Command::ConfigSet { key: key.clone(), value: Some(*value) };
            let epoch = client.runtime().block_on(client.client().mon().command(command))?;
            print(*json, json!({"key": key, "value": value, "epoch": epoch}), || format!("{key} = {value}"));
        }
        ConfigCommand::Rm { conf, key, json } => {
            let s = setting(key)?;
            let client = conf.connect()?;
            let command = Command::ConfigSet { key: key.clone(), value: None };
            let epoch = client.runtime().block_on(client.client().mon().command(command))?;
            print(*json, json!({"key": key, "value": s.default, "default": true, "epoch": epoch}), || {
                format!("{key} = {} (default)", s.default)
            });
        }
        ConfigCommand::Get { conf, key, json } => {
            let s = setting(key)?;
            let client = conf.connect()?;
            let map = client.client().mon().map();
            let set = map.config.get(key).copied();
            let value = set.unwrap_or(s.default);
            print(*json, json!({"key": key, "value": value, "default": set.is_none()}), || value.to_string());
        }
        ConfigCommand::Ls { conf, json } => {
            let client = conf.connect()?;
            let map = client.client().mon().map();
            let rows: Vec<serde_json::Value> = SETTINGS
                .iter()
                .map(|s| {
                    json!({
                        "key": s.name, "value": map.setting(s.name), "default": s.default,
                        "min": s.min, "max": s.max, "help": s.help,
                    })
                })
                .collect();
            print(*json, json!(rows), || {
                SETTINGS
                    .iter()
                    .map(|s| {
                        let mark = if map.config.contains_key(s.name) { "" } else { " (default)" };
                        format!("{} = {}{mark}  [{}..={}] {}", s.name, map.setting(s.name), s.min, s.max, s.help)
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}
