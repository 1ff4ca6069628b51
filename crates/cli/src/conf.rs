//! Finding the cluster: `--conf PATH`, else `SHOAL_CONF`, else the default cluster directory
//! that `shoal up` uses without `--dir`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use shoal_client::blocking::BlockingClient;
use shoal_client::{ClusterConfig, default_cluster_dir};

#[derive(Args, Clone, Debug)]
pub struct ConfArgs {
    /// Cluster config file (default: $SHOAL_CONF, else the default `shoal up` directory).
    #[arg(long, env = "SHOAL_CONF", global = true)]
    pub conf: Option<PathBuf>,
    /// Who to act as (must have a key in the keyring).
    #[arg(long = "name", default_value = "client.admin", global = true)]
    pub entity: String,
}

impl ConfArgs {
    pub fn path(&self) -> PathBuf {
        self.conf.clone().unwrap_or_else(|| default_cluster_dir().join("shoal.toml"))
    }

    /// The directory of the conf file (where `shoal up` put the daemons' data and logs).
    pub fn dir(&self) -> PathBuf {
        let path = self.path();
        path.parent().map(std::path::Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."))
    }

    pub fn cluster(&self) -> Result<ClusterConfig> {
        Ok(ClusterConfig::from_conf_file(&self.path(), &self.entity)?)
    }

    pub fn connect(&self) -> Result<BlockingClient> {
        let cfg = self.cluster()?;
        Ok(BlockingClient::connect(cfg)?)
    }
}

/// A clap value parser for sizes such as `4096`, `64K` or `4G`.
pub fn parse_size_arg(s: &str) -> Result<u64, String> {
    shoal_store::parse_size(s).map_err(|e| e.to_string())
}
