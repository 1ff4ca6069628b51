//! Reaching an OSD on this host over its local socket instead of loopback TCP (decision 0027).
//!
//! Every OSD also accepts on a local socket named after its cluster and id
//! ([`osd_socket_name`]). A client, or an OSD talking to a peer, tries that name first: it exists
//! only in the network namespace of an OSD process that holds it, so it is found exactly when
//! the OSD runs beside the caller, and a refusal costs one failed `connect` before TCP. The
//! handshake proves who answered, and a connection is used only if the server is the OSD asked
//! for; anything else falls back to the map's TCP address.

use std::net::SocketAddr;

use shoal_map::OsdId;
use shoal_net::{ClientConfig, Connection, MAX_LOCAL_NAME_BYTES, NetError};

/// The environment variable that turns local sockets off for a process when set to `0`
/// (everything then goes over TCP, as between hosts; for measuring the difference).
pub const LOCAL_SOCKETS_ENV: &str = "SHOAL_LOCAL_SOCKETS";

/// Whether this process may use local sockets: unless [`LOCAL_SOCKETS_ENV`] is `0`.
#[must_use]
pub fn local_sockets_enabled() -> bool {
    std::env::var(LOCAL_SOCKETS_ENV).map_or(true, |v| v.trim() != "0")
}

/// The local socket name of `osd` in the cluster `fsid`. Names longer than the socket address
/// allows (an fsid is a 36-character UUID, so only a malformed one) give `None`.
#[must_use]
pub fn osd_socket_name(fsid: &str, osd: OsdId) -> Option<String> {
    let name = format!("shoal/{fsid}/{osd}");
    (name.len() <= MAX_LOCAL_NAME_BYTES).then_some(name)
}

/// Connects to `osd`: over its local socket when `local` names one that answers as that OSD,
/// otherwise over TCP at `addr`. The TCP error is the one returned when both fail.
pub async fn connect_osd(
    osd: OsdId,
    addr: SocketAddr,
    local: Option<&str>,
    cfg: &ClientConfig,
) -> Result<Connection, NetError> {
    if let Some(name) = local
        && let Ok(conn) = Connection::connect_local(name, cfg).await
    {
        if conn.server_entity() == osd.to_string() {
            return Ok(conn);
        }
        // Something else holds the name (it cannot be this cluster's OSD under another id):
        // leave it and use the address the map gives.
        tracing::warn!(%osd, name, server = conn.server_entity(), "local socket answered as another entity");
    }
    Connection::connect(addr, cfg).await
}
