//! `shoal obj put|get|rm|ls|stat --pool P`: single objects through the client library.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use serde_json::json;

use crate::conf::ConfArgs;

#[derive(Args)]
pub struct PoolArg {
    #[command(flatten)]
    conf: ConfArgs,
    /// The pool.
    #[arg(long, short = 'p', default_value = "data")]
    pool: String,
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
pub enum ObjCommand {
    /// Store FILE (`-` for stdin) as object NAME, replacing it; durable on every replica when
    /// the command returns.
    Put {
        #[command(flatten)]
        p: PoolArg,
        name: String,
        file: PathBuf,
    },
    /// Write object NAME to stdout or `-o FILE`.
    Get {
        #[command(flatten)]
        p: PoolArg,
        name: String,
        #[arg(short = 'o', long)]
        output: Option<PathBuf>,
    },
    /// Remove object NAME; gone on every replica when the command returns.
    Rm {
        #[command(flatten)]
        p: PoolArg,
        name: String,
    },
    /// Size and modification time.
    Stat {
        #[command(flatten)]
        p: PoolArg,
        name: String,
    },
    /// Every object of the pool, one per line.
    Ls {
        #[command(flatten)]
        p: PoolArg,
    },
}

pub fn run(cmd: &ObjCommand) -> Result<ExitCode> {
    match cmd {
        ObjCommand::Put { p, name, file } => {
            let client = p.conf.connect()?;
            // Read at most one byte more than the pool accepts, so an oversized input is refused
            // without holding all of it in memory.
            let max_bytes = client.client().pool(&p.pool)?.max_object_bytes;
            let mut data = Vec::new();
            let what = if file.as_os_str() == "-" { "stdin".to_string() } else { file.display().to_string() };
            let input: Box<dyn Read> = if file.as_os_str() == "-" {
                Box::new(std::io::stdin())
            } else {
                Box::new(std::fs::File::open(file).with_context(|| format!("reading {what}"))?)
            };
            input.take(max_bytes + 1).read_to_end(&mut data).with_context(|| format!("reading {what}"))?;
            if data.len() as u64 > max_bytes {
                anyhow::bail!("{what} is larger than pool {}'s maximum object size of {max_bytes} bytes", p.pool);
            }
            let len = data.len();
            client.write_full(&p.pool, name, data)?;
            if p.json {
                println!("{}", json!({"pool": p.pool, "name": name, "size_bytes": len}));
            }
        }
        ObjCommand::Get { p, name, output } => {
            let client = p.conf.connect()?;
            let data = client.read(&p.pool, name)?;
            match output {
                Some(path) if path.as_os_str() != "-" => {
                    std::fs::write(path, &data).with_context(|| format!("writing {}", path.display()))?;
                }
                _ => std::io::stdout().lock().write_all(&data).context("writing stdout")?,
            }
        }
        ObjCommand::Rm { p, name } => {
            p.conf.connect()?.remove(&p.pool, name)?;
            if p.json {
                println!("{}", json!({"pool": p.pool, "removed": name}));
            }
        }
        ObjCommand::Stat { p, name } => {
            let (size, mtime_ns) = p.conf.connect()?.stat(&p.pool, name)?;
            if p.json {
                println!("{}", json!({"pool": p.pool, "name": name, "size_bytes": size, "mtime_ns": mtime_ns}));
            } else {
                println!("{}/{name} size {size} mtime_ns {mtime_ns}", p.pool);
            }
        }
        ObjCommand::Ls { p } => {
            let client = p.conf.connect()?;
            let mut cursor = None;
            let mut all = Vec::new();
            let mut out = std::io::stdout().lock();
            // Bounded pages; the loop ends when the cursor does (every PG listed once).
            loop {
                let (names, next) = client.list(&p.pool, cursor, 1000)?;
                for n in names {
                    if p.json {
                        all.push(n);
                    } else {
                        writeln!(out, "{n}")?;
                    }
                }
                match next {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
            if p.json {
                writeln!(out, "{}", json!(all))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
