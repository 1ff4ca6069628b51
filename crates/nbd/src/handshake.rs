//! The fixed newstyle handshake: the server's greeting, then options until the client picks
//! an export (EXPORT_NAME or GO) or aborts.
//!
//! Bounds: at most [`MAX_OPTIONS`] options per connection and [`MAX_OPTION_BYTES`] of data per
//! option (names are at most 4 KiB by the protocol); beyond either the connection ends.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::proto::*;
use crate::{BlockDevice, Exports};

pub const MAX_OPTIONS: usize = 1024;
pub const MAX_OPTION_BYTES: u32 = 64 << 10;
/// The longest string (name, query) read from an option.
const MAX_STRING_BYTES: u32 = 4096;

#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("protocol: {0}")]
    Protocol(String),
}

/// What the handshake agreed on.
#[derive(Debug, Clone)]
pub struct Session {
    pub export: usize,
    pub export_name: String,
    pub structured: bool,
    /// Whether the last SET_META_CONTEXT selected `base:allocation` on this export
    /// (BLOCK_STATUS allowed).
    pub allocation_context: bool,
    /// The transmission flags sent to the client: what it may ask for.
    pub flags: u16,
}

/// The transmission flags of an export. DF ("don't fragment" a read's reply) is offered only
/// with structured replies, as the protocol requires: a simple reply has no fragments.
fn transmission_flags<D: BlockDevice>(device: &D, structured: bool) -> u16 {
    let mut f = TF_HAS_FLAGS
        | TF_SEND_FLUSH
        | TF_SEND_FUA
        | TF_SEND_TRIM
        | TF_SEND_WRITE_ZEROES
        | TF_SEND_FAST_ZERO
        | TF_SEND_CACHE
        | TF_CAN_MULTI_CONN;
    if structured {
        f |= TF_SEND_DF;
    }
    if device.read_only() {
        f |= TF_READ_ONLY;
    }
    f
}

async fn reply<W: AsyncWrite + Unpin>(w: &mut W, option: u32, kind: u32, data: &[u8]) -> std::io::Result<()> {
    let mut out = Vec::with_capacity(20 + data.len());
    out.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    w.write_all(&out).await
}

async fn error_reply<W: AsyncWrite + Unpin>(w: &mut W, option: u32, kind: u32, message: &str) -> std::io::Result<()> {
    reply(w, option, kind, message.as_bytes()).await
}

/// A cursor over an option's data that fails cleanly on truncation.
struct Data<'a>(&'a [u8]);

impl<'a> Data<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn string(&mut self) -> Option<String> {
        let n = self.u32()?;
        if n > MAX_STRING_BYTES {
            return None;
        }
        String::from_utf8(self.take(n as usize)?.to_vec()).ok()
    }
}

/// Where a connection stands with TLS while it negotiates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsPhase {
    /// The server has no TLS identity: STARTTLS is refused, everything else served in clear.
    Unavailable,
    /// The server requires TLS and the client has not started it: only STARTTLS and ABORT are
    /// served, every other option is refused with `TLS_REQD` (and EXPORT_NAME, which cannot be
    /// refused, ends the connection), so that no export is named or served in clear.
    Required,
    /// The connection runs over TLS.
    Active,
}

/// How an option phase ended.
#[derive(Debug)]
pub enum Negotiated {
    /// The client picked an export: transmission starts.
    Session(Session),
    /// The client aborted or went away without picking one.
    Aborted,
    /// The client asked for TLS and was acknowledged: the caller runs the TLS handshake on the
    /// stream and then a new option phase over it, which starts from nothing — whatever was
    /// negotiated in clear (structured replies, meta contexts) is forgotten, as the protocol
    /// requires (keeping it was nbdkit's CVE-2021-3716).
    StartTls,
}

/// Sends the server's greeting and reads the client's flags; returns whether the client asked
/// for no zero padding after EXPORT_NAME.
pub async fn greet<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> Result<bool, HandshakeError> {
    let mut greeting = Vec::with_capacity(18);
    greeting.extend_from_slice(&NBDMAGIC.to_be_bytes());
    greeting.extend_from_slice(&IHAVEOPT.to_be_bytes());
    greeting.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    s.write_all(&greeting).await?;
    let client_flags = s.read_u32().await?;
    if client_flags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(HandshakeError::Protocol(format!("unknown client flags {client_flags:#x}")));
    }
    Ok(client_flags & FLAG_C_NO_ZEROES != 0)
}

/// Runs one option phase (after [`greet`], and again over TLS after STARTTLS) until the client
/// picks an export, aborts, or starts TLS. `options_left` bounds the options of the whole
/// connection, across phases.
pub async fn negotiate<D, S>(
    exports: &Exports<D>,
    s: &mut S,
    no_zeroes: bool,
    tls: TlsPhase,
    options_left: &mut usize,
) -> Result<Negotiated, HandshakeError>
where
    D: BlockDevice,
    S: AsyncRead + AsyncWrite + Unpin,
{
    // Per phase, so that nothing negotiated in clear survives STARTTLS.
    let mut structured = false;
    // The export whose `base:allocation` context the last SET_META_CONTEXT selected, if it
    // selected it: BLOCK_STATUS is served only on that export.
    let mut allocation_export: Option<usize> = None;

    while *options_left > 0 {
        *options_left -= 1;
        let magic = s.read_u64().await?;
        if magic != IHAVEOPT {
            return Err(HandshakeError::Protocol(format!("option magic {magic:#x}")));
        }
        let option = s.read_u32().await?;
        let len = s.read_u32().await?;
        if len > MAX_OPTION_BYTES {
            return Err(HandshakeError::Protocol(format!("option {option} carries {len} bytes")));
        }
        let mut buf = vec![0u8; len as usize];
        s.read_exact(&mut buf).await?;
        let mut data = Data(&buf);
        // What EXPORT_NAME or GO of export `at` starts transmission with.
        let session = |at: usize| {
            let export = &exports.exports[at];
            let flags = transmission_flags(&*export.device, structured);
            let allocation_context = allocation_export == Some(at);
            Session { export: at, export_name: export.name.clone(), structured, allocation_context, flags }
        };
        if tls == TlsPhase::Required && !matches!(option, OPT_STARTTLS | OPT_ABORT) {
            if option == OPT_EXPORT_NAME {
                return Err(HandshakeError::Protocol(
                    "EXPORT_NAME before STARTTLS on a server that requires TLS".into(),
                ));
            }
            error_reply(s, option, REP_ERR_TLS_REQD, "this server requires TLS: send STARTTLS first").await?;
            continue;
        }
        match option {
            OPT_EXPORT_NAME => {
                let name = String::from_utf8_lossy(&buf).into_owned();
                let Some(at) = exports.position(&name) else {
                    // No way to refuse an EXPORT_NAME but closing the connection.
                    return Err(HandshakeError::Protocol(format!("unknown export {name:?}")));
                };
                let export = &exports.exports[at];
                let flags = transmission_flags(&*export.device, structured);
                let mut out = Vec::with_capacity(10 + 124);
                out.extend_from_slice(&export.device.size_bytes().to_be_bytes());
                out.extend_from_slice(&flags.to_be_bytes());
                if !no_zeroes {
                    out.extend_from_slice(&[0u8; 124]);
                }
                s.write_all(&out).await?;
                return Ok(Negotiated::Session(session(at)));
            }
            OPT_ABORT => {
                let _ = reply(s, option, REP_ACK, &[]).await;
                return Ok(Negotiated::Aborted);
            }
            OPT_LIST => {
                if len != 0 {
                    error_reply(s, option, REP_ERR_INVALID, "LIST takes no data").await?;
                    continue;
                }
                for e in &exports.exports {
                    let mut d = Vec::with_capacity(4 + e.name.len());
                    d.extend_from_slice(&(e.name.len() as u32).to_be_bytes());
                    d.extend_from_slice(e.name.as_bytes());
                    reply(s, option, REP_SERVER, &d).await?;
                }
                reply(s, option, REP_ACK, &[]).await?;
            }
            OPT_STARTTLS => match tls {
                _ if len != 0 => error_reply(s, option, REP_ERR_INVALID, "STARTTLS takes no data").await?,
                TlsPhase::Unavailable => {
                    error_reply(s, option, REP_ERR_POLICY, "TLS is not configured on this server").await?
                }
                TlsPhase::Active => error_reply(s, option, REP_ERR_INVALID, "TLS is already active").await?,
                TlsPhase::Required => {
                    reply(s, option, REP_ACK, &[]).await?;
                    s.flush().await?;
                    return Ok(Negotiated::StartTls);
                }
            },
            OPT_STRUCTURED_REPLY => {
                if len != 0 {
                    error_reply(s, option, REP_ERR_INVALID, "STRUCTURED_REPLY takes no data").await?;
                } else {
                    structured = true;
                    reply(s, option, REP_ACK, &[]).await?;
                }
            }
            OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
                let set = option == OPT_SET_META_CONTEXT;
                // A SET replaces the selection even when it fails.
                if set {
                    allocation_export = None;
                }
                let parsed = (|| {
                    let name = data.string()?;
                    let n = data.u32()?;
                    let mut queries = Vec::new();
                    for _ in 0..n.min(256) {
                        queries.push(data.string()?);
                    }
                    (data.0.is_empty() && n <= 256).then_some((name, queries))
                })();
                let Some((name, queries)) = parsed else {
                    error_reply(s, option, REP_ERR_INVALID, "malformed meta context request").await?;
                    continue;
                };
                if set && !structured {
                    error_reply(s, option, REP_ERR_INVALID, "SET_META_CONTEXT needs structured replies first").await?;
                    continue;
                }
                let Some(at) = exports.position(&name) else {
                    error_reply(s, option, REP_ERR_UNKNOWN, &format!("no export {name:?}")).await?;
                    continue;
                };
                // `base:allocation` is the only context: named, or matched by `base:` (LIST only),
                // or every context when LIST asks for none.
                let wanted = queries.iter().any(|q| q == BASE_ALLOCATION || (!set && q == "base:"))
                    || (!set && queries.is_empty());
                if set && wanted {
                    allocation_export = Some(at);
                }
                if wanted {
                    // A LIST's context ids are reserved (zero); a SET's is the one BLOCK_STATUS
                    // replies carry.
                    let id = if set { BASE_ALLOCATION_ID } else { 0 };
                    let mut d = Vec::with_capacity(4 + BASE_ALLOCATION.len());
                    d.extend_from_slice(&id.to_be_bytes());
                    d.extend_from_slice(BASE_ALLOCATION.as_bytes());
                    reply(s, option, REP_META_CONTEXT, &d).await?;
                }
                reply(s, option, REP_ACK, &[]).await?;
            }
            OPT_INFO | OPT_GO => {
                let parsed = (|| {
                    let name = data.string()?;
                    let n = data.u16()?;
                    let mut items = Vec::new();
                    for _ in 0..n {
                        items.push(data.u16()?);
                    }
                    data.0.is_empty().then_some((name, items))
                })();
                let Some((name, items)) = parsed else {
                    error_reply(s, option, REP_ERR_INVALID, "malformed INFO/GO request").await?;
                    continue;
                };
                let Some(at) = exports.position(&name) else {
                    error_reply(s, option, REP_ERR_UNKNOWN, &format!("no export {name:?}")).await?;
                    continue;
                };
                let export = &exports.exports[at];
                let flags = transmission_flags(&*export.device, structured);
                let mut d = Vec::with_capacity(12);
                d.extend_from_slice(&INFO_EXPORT.to_be_bytes());
                d.extend_from_slice(&export.device.size_bytes().to_be_bytes());
                d.extend_from_slice(&flags.to_be_bytes());
                reply(s, option, REP_INFO, &d).await?;
                for item in items {
                    let mut d = Vec::new();
                    d.extend_from_slice(&item.to_be_bytes());
                    match item {
                        INFO_NAME => d.extend_from_slice(export.name.as_bytes()),
                        INFO_DESCRIPTION => d.extend_from_slice(export.description.as_bytes()),
                        _ => continue,
                    }
                    reply(s, option, REP_INFO, &d).await?;
                }
                // Always sent: any byte alignment works, 4 KiB is preferred, and the maximum is
                // the largest request served.
                let mut d = Vec::with_capacity(14);
                d.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
                d.extend_from_slice(&1u32.to_be_bytes());
                d.extend_from_slice(&4096u32.to_be_bytes());
                d.extend_from_slice(&exports.limits.max_request_bytes.to_be_bytes());
                reply(s, option, REP_INFO, &d).await?;
                reply(s, option, REP_ACK, &[]).await?;
                if option == OPT_GO {
                    return Ok(Negotiated::Session(session(at)));
                }
            }
            _ => {
                error_reply(s, option, REP_ERR_UNSUP, &format!("option {option} is not supported")).await?;
            }
        }
    }
    Err(HandshakeError::Protocol(format!("more than {MAX_OPTIONS} options")))
}
