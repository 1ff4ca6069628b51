//! Shoal's client library: connect to a cluster with a conf file and a key, follow the map,
//! compute placement, and run object operations at the PGs' primaries — the librados of Shoal.
//!
//! [`MonClient`] keeps the newest [`shoal_map::ClusterMap`] (a subscription the monitors push
//! incrementals on) and sends commands. [`Client`] adds object operations: it computes an
//! object's PG and primary from the map ([`shoal_map::ClusterMap::locate`]), sends the request
//! there, and resends it with the same request id when the primary says its map is newer, the
//! connection breaks, or the PG has no acting OSD yet, so a write is applied once. Nothing but
//! the map stands between a client and the OSDs. [`blocking::BlockingClient`] wraps it for
//! synchronous callers such as the CLI.

pub mod blocking;
pub mod combine;
pub mod config;
pub mod error;
pub mod freeing;
pub mod local;
pub mod monc;
pub mod objecter;

pub use config::{ClusterConfig, ConfFile, default_cluster_dir};
pub use error::ClientError;
pub use freeing::{freeing_space, is_freeing_space};
pub use monc::MonClient;
pub use objecter::{Client, ListCursor, OpResult, validate_object_name};
