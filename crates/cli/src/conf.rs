//! Finding the cluster: `--conf PATH`, else `SHOAL_CONF`, else the default cluster directory
//! that `shoal up` uses without `--dir`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use shoal_client::blocking::BlockingClient;
use shoal_client::{ClusterConfig, default_cluster_dir};

/// Where the cluster is and who we are: the top-level `--conf` and `--name` options (global, so
/// they may come before or after the subcommand). Set once by `main`.
#[derive(Clone, Debug)]
pub struct Identity {
    pub conf: Option<PathBuf>,
    pub entity: String,
}

static IDENTITY: std::sync::OnceLock<Identity> = std::sync::OnceLock::new();

/// Records the global options; called once by `main` before any command runs.
pub fn set_identity(identity: Identity) {
    let _ = IDENTITY.set(identity);
}

/// Flattened into every command that talks to a cluster; it reads the global options.
#[derive(Args, Clone, Debug, Default)]
pub struct ConfArgs {}

impl ConfArgs {
    fn identity(&self) -> Identity {
        IDENTITY.get().cloned().unwrap_or(Identity { conf: None, entity: "client.admin".into() })
    }

    pub fn path(&self) -> PathBuf {
        self.identity().conf.unwrap_or_else(|| default_cluster_dir().join("shoal.toml"))
    }

    /// The directory of the conf file (where `shoal up` put the daemons' data and logs).
    pub fn dir(&self) -> PathBuf {
        let path = self.path();
        path.parent().map(std::path::Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."))
    }

    pub fn cluster(&self) -> Result<ClusterConfig> {
        Ok(ClusterConfig::from_conf_file(&self.path(), &self.identity().entity)?)
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
