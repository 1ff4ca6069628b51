//! The two transports a connection runs over: TCP, and local sockets for peers on the same host.
//!
//! A local socket is a Unix stream socket in Linux's abstract namespace: it has a name but no
//! file, so nothing is left behind when its process dies, and it is visible only inside the
//! network namespace that bound it — exactly the peers that would otherwise reach the server
//! over loopback TCP. It carries the same frames and the same handshake; what it saves is the
//! TCP stack on both sides (segmentation, acknowledgements, the loopback device's soft
//! interrupts), which on one host is pure overhead (decision 0027).

use std::fmt;
use std::net::SocketAddr;

use tokio::net::{TcpListener, UnixListener, UnixStream};

use crate::NetError;

/// Send buffer asked for on local sockets. A Unix stream socket's send buffer bounds the bytes
/// queued to its peer, and the default (208 KiB) splits a 512 KiB or 4 MiB message into several
/// rounds of the writer waiting for the reader; TCP's buffers grow on their own, a Unix
/// socket's do not. The kernel caps it at `net.core.wmem_max`.
const LOCAL_SEND_BUFFER_BYTES: usize = 4 << 20;

/// Longest local socket name accepted: Linux's `sun_path` holds 108 bytes, one of which is the
/// abstract namespace's leading NUL.
pub const MAX_LOCAL_NAME_BYTES: usize = 107;

/// Where the other end of a connection is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerAddr {
    Tcp(SocketAddr),
    /// A local socket (the server's name; its clients have none).
    Local(String),
}

impl fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerAddr::Tcp(a) => write!(f, "{a}"),
            PeerAddr::Local(name) => write!(f, "local:{name}"),
        }
    }
}

fn check_name(name: &str) -> Result<(), NetError> {
    if name.is_empty() || name.len() > MAX_LOCAL_NAME_BYTES || name.contains('\0') {
        return Err(NetError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("local socket name {name:?} must be 1 to {MAX_LOCAL_NAME_BYTES} bytes without NUL"),
        )));
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn abstract_addr(name: &str) -> std::io::Result<std::os::unix::net::SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
}

/// Binds the local socket `name` for a server to accept on (see [`crate::Listeners`]). Fails
/// with `AddrInUse` while another process holds the name, and on systems without an abstract
/// namespace (anything but Linux).
pub fn bind_local(name: &str) -> Result<UnixListener, NetError> {
    check_name(name)?;
    #[cfg(target_os = "linux")]
    {
        let std_listener = std::os::unix::net::UnixListener::bind_addr(&abstract_addr(name)?)?;
        std_listener.set_nonblocking(true)?;
        Ok(UnixListener::from_std(std_listener)?)
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err(NetError::Io(std::io::Error::new(std::io::ErrorKind::Unsupported, "local sockets need Linux")))
    }
}

/// Connects to the local socket `name`. Fails at once (`ConnectionRefused`) when no server in
/// this network namespace has bound it.
pub(crate) async fn connect_local(name: &str) -> Result<UnixStream, NetError> {
    check_name(name)?;
    #[cfg(target_os = "linux")]
    {
        let addr = abstract_addr(name)?;
        // A Unix connect completes or fails at once unless the server's backlog is full, when
        // it would block: run it off the runtime's threads so that case cannot stall them.
        let std_stream = tokio::task::spawn_blocking(move || std::os::unix::net::UnixStream::connect_addr(&addr))
            .await
            .map_err(|e| NetError::Io(std::io::Error::other(e)))??;
        std_stream.set_nonblocking(true)?;
        let stream = UnixStream::from_std(std_stream)?;
        widen_send_buffer(&stream);
        Ok(stream)
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err(NetError::Io(std::io::Error::new(std::io::ErrorKind::Unsupported, "local sockets need Linux")))
    }
}

/// Asks for [`LOCAL_SEND_BUFFER_BYTES`] of send buffer on a local socket. Best effort: with a
/// smaller one the connection works the same, only with more wake-ups per large message.
pub(crate) fn widen_send_buffer(stream: &UnixStream) {
    let _ = rustix::net::sockopt::set_socket_send_buffer_size(stream, LOCAL_SEND_BUFFER_BYTES);
}

/// What a server accepts connections on: a TCP listener and, optionally, a local socket.
pub struct Listeners {
    pub(crate) tcp: TcpListener,
    pub(crate) local: Option<(UnixListener, String)>,
}

impl Listeners {
    /// TCP only.
    #[must_use]
    pub fn tcp(listener: TcpListener) -> Self {
        Self { tcp: listener, local: None }
    }

    /// Also accepts on `listener`, the local socket bound as `name` ([`bind_local`]).
    #[must_use]
    pub fn with_local(mut self, listener: UnixListener, name: &str) -> Self {
        self.local = Some((listener, name.to_owned()));
        self
    }
}

impl From<TcpListener> for Listeners {
    fn from(listener: TcpListener) -> Self {
        Self::tcp(listener)
    }
}
