//! Choosing a loopback port for a daemon before it starts (a cluster's conf names its monitors'
//! addresses, so they are chosen first).

use std::net::{Ipv4Addr, SocketAddr, TcpListener};

/// The lowest port chosen: below it are the ports services are usually configured on.
const FLOOR_PORT: u16 = 10_000;
/// Candidates tried before falling back to a port the kernel chooses.
const ATTEMPTS: usize = 64;

/// A loopback port that nothing listens on now, released for a daemon to take.
///
/// It is chosen **below the kernel's ephemeral range** (`ip_local_port_range`): a port that the
/// kernel handed out for `bind(0)` is also a port it hands out for outgoing connections, so
/// between its release and the daemon's bind any connection on the machine could take it (a
/// test suite starting clusters while others run lost monitors to this). Only another explicit
/// bind can take a port below the range. Falls back to `bind(0)` when the range leaves no room.
pub fn unused_loopback_port() -> std::io::Result<SocketAddr> {
    let ephemeral_lo = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    if ephemeral_lo > FLOOR_PORT {
        let span = ephemeral_lo - FLOOR_PORT;
        for _ in 0..ATTEMPTS {
            let mut b = [0u8; 2];
            getrandom::fill(&mut b).map_err(std::io::Error::other)?;
            let port = FLOOR_PORT + u16::from_le_bytes(b) % span;
            if let Ok(l) = TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
                return l.local_addr();
            }
        }
    }
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chosen_port_is_free_and_below_the_ephemeral_range() {
        let a = unused_loopback_port().unwrap();
        assert!(a.ip().is_loopback());
        // Free: it can be bound now.
        let l = TcpListener::bind(a).unwrap();
        drop(l);
        let lo: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .map(|r| r.split_whitespace().next().unwrap().parse().unwrap())
            .unwrap_or(32_768);
        if lo > FLOOR_PORT {
            assert!((FLOOR_PORT..lo).contains(&a.port()), "{a} is outside {FLOOR_PORT}..{lo}");
        }
    }
}
