//! The cluster configuration file (`shoal.toml`) that `shoal up` writes and every command,
//! daemon and client reads to find the cluster.
//!
//! ```toml
//! fsid = "6f1c..."
//! mons = ["127.0.0.1:6790"]
//! keyring = "keyring"        # relative to this file's directory
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use shoal_net::{Key, Keyring};

use crate::error::ClientError;

/// Where `shoal up` puts a cluster when no `--dir` is given, and where commands look for it
/// when neither `--conf` nor `SHOAL_CONF` names a file: `$XDG_RUNTIME_DIR/shoal`, else
/// `/tmp/shoal-$USER`.
pub fn default_cluster_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR") {
        return PathBuf::from(dir).join("shoal");
    }
    let user = std::env::var("USER").unwrap_or_else(|_| "user".into());
    PathBuf::from(format!("/tmp/shoal-{user}"))
}

/// The contents of `shoal.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfFile {
    pub fsid: String,
    /// Monitor addresses by rank order.
    pub mons: Vec<SocketAddr>,
    /// Keyring path; relative paths are relative to the conf file's directory.
    pub keyring: PathBuf,
}

impl ConfFile {
    /// Reads and checks a conf file. Errors name the file and the problem.
    pub fn load(path: &Path) -> Result<ConfFile, ClientError> {
        let bad = |reason: String| ClientError::Config { path: path.to_path_buf(), reason };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let mut conf: ConfFile = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
        if conf.mons.is_empty() {
            return Err(bad("no monitor addresses (`mons`)".into()));
        }
        if conf.keyring.is_relative() {
            let dir = path.parent().unwrap_or(Path::new("."));
            conf.keyring = dir.join(&conf.keyring);
        }
        Ok(conf)
    }

    /// Writes the conf file (atomically: a temporary file renamed over `path`).
    pub fn save(&self, path: &Path) -> Result<(), ClientError> {
        let bad = |reason: String| ClientError::Config { path: path.to_path_buf(), reason };
        let text = toml::to_string(self).map_err(|e| bad(e.to_string()))?;
        let tmp = path.with_extension("toml.tmp");
        std::fs::write(&tmp, text).map_err(|e| bad(e.to_string()))?;
        std::fs::rename(&tmp, path).map_err(|e| bad(e.to_string()))
    }
}

/// Everything needed to talk to a cluster as one entity.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub fsid: String,
    pub mons: Vec<SocketAddr>,
    /// Who we are, e.g. `client.admin` or `osd.3`.
    pub entity: String,
    pub key: Key,
    /// How long one operation may take, resends included, before it fails with `Timeout`.
    pub op_timeout_ms: u64,
    /// Bound on requests in flight per connection.
    pub max_in_flight: usize,
    /// Whether OSDs on this host are reached over their local sockets ([`crate::local`]);
    /// on unless `SHOAL_LOCAL_SOCKETS=0`.
    pub local_sockets: bool,
}

impl ClusterConfig {
    /// The config for `entity` from a conf file and its keyring. Errors name the file, or the
    /// entity missing from the keyring.
    pub fn from_conf_file(path: &Path, entity: &str) -> Result<ClusterConfig, ClientError> {
        let conf = ConfFile::load(path)?;
        let keyring = Keyring::load(&conf.keyring)?;
        let key = keyring.get(entity).ok_or_else(|| ClientError::Config {
            path: conf.keyring.clone(),
            reason: format!("no key for {entity}"),
        })?;
        Ok(ClusterConfig {
            fsid: conf.fsid,
            mons: conf.mons,
            entity: entity.to_string(),
            key: Key(key.0),
            op_timeout_ms: 30_000,
            max_in_flight: 256,
            local_sockets: crate::local::local_sockets_enabled(),
        })
    }

    /// The local socket of `osd` in this cluster, or `None` when this process does not use
    /// local sockets ([`crate::local`]). The one place that decides, for OSDs binding their
    /// socket and for everyone connecting to one. (A conf file naming another cluster's fsid
    /// finds no such socket, and its connections go over TCP.)
    #[must_use]
    pub fn local_osd_socket(&self, osd: shoal_map::OsdId) -> Option<String> {
        if self.local_sockets { crate::local::osd_socket_name(&self.fsid, osd) } else { None }
    }

    /// The messenger's settings for this entity.
    #[must_use]
    pub fn net(&self) -> shoal_net::ClientConfig {
        shoal_net::ClientConfig {
            entity: self.entity.clone(),
            key: Key(self.key.0),
            connect_timeout_ms: 3_000,
            max_in_flight: self.max_in_flight,
        }
    }
}
