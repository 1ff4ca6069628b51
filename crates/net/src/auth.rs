//! The mutual challenge-response handshake that opens every connection.
//!
//! ```text
//! server -> client  MSG_CHALLENGE  server challenge (32) || server entity
//! client -> server  MSG_AUTH       HMAC(key, server challenge || client entity) (32)
//!                                  || client challenge (32) || client entity
//! server -> client  MSG_AUTH_OK    HMAC(key, client challenge || server entity) (32)
//!            or     MSG_ERROR      reason, then the server closes
//! ```
//!
//! `key` is the client entity's key, which both sides hold. The client proves it holds the key
//! by answering a challenge it could not predict; the server proves the same by answering the
//! client's challenge, so a client never talks to an impostor that merely accepted its
//! connection. MACs are compared in constant time.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use shoal_proto::{Frame, HEADER_BYTES};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::wire::{
    HANDSHAKE_MAX_PAYLOAD, MSG_AUTH, MSG_AUTH_OK, MSG_CHALLENGE, MSG_ERROR, Payloads, error_reason, read_frame,
    write_frame,
};
use crate::{Key, Keyring, NetError};

type HmacSha256 = Hmac<Sha256>;

const CHALLENGE_BYTES: usize = 32;
const MAC_BYTES: usize = 32;
/// Longest entity name accepted; names are short identifiers like "osd.12".
pub(crate) const MAX_ENTITY_BYTES: usize = 256;

fn challenge() -> [u8; CHALLENGE_BYTES] {
    let mut c = [0u8; CHALLENGE_BYTES];
    getrandom::fill(&mut c).expect("the operating system's random source failed");
    c
}

fn mac(key: &Key, challenge: &[u8], entity: &str) -> HmacSha256 {
    // HMAC accepts keys of any length, so this cannot fail for a 32-byte key.
    let mut m = <HmacSha256 as KeyInit>::new_from_slice(&key.0).expect("HMAC takes any key length");
    m.update(challenge);
    m.update(entity.as_bytes());
    m
}

/// Client side. Returns the server's entity name once both sides are authenticated.
pub(crate) async fn client<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    entity: &str,
    key: &Key,
) -> Result<String, NetError> {
    let mut header = [0u8; HEADER_BYTES];
    let first = read_frame(s, &mut header, HANDSHAKE_MAX_PAYLOAD, Payloads::Plain).await?.ok_or(NetError::Closed)?;
    if first.msg_type == MSG_ERROR {
        return Err(NetError::AuthRefused { reason: error_reason(&first) });
    }
    if first.msg_type != MSG_CHALLENGE || first.payload.len() < CHALLENGE_BYTES {
        return Err(NetError::AuthFailed {
            reason: format!("expected a challenge, got message type {}", first.msg_type),
        });
    }
    let (server_challenge, server_entity) = first.payload.split_at(CHALLENGE_BYTES);
    let server_entity = std::str::from_utf8(server_entity)
        .map_err(|_| NetError::AuthFailed { reason: "server entity name is not UTF-8".into() })?
        .to_owned();

    let my_challenge = challenge();
    let proof = mac(key, server_challenge, entity).finalize().into_bytes();
    let mut payload = Vec::with_capacity(MAC_BYTES + CHALLENGE_BYTES + entity.len());
    payload.extend_from_slice(&proof);
    payload.extend_from_slice(&my_challenge);
    payload.extend_from_slice(entity.as_bytes());
    write_frame(s, &Frame::new(MSG_AUTH, 0, payload)).await?;

    let answer = read_frame(s, &mut header, HANDSHAKE_MAX_PAYLOAD, Payloads::Plain).await?.ok_or(NetError::Closed)?;
    match answer.msg_type {
        MSG_ERROR => Err(NetError::AuthRefused { reason: error_reason(&answer) }),
        MSG_AUTH_OK => {
            mac(key, &my_challenge, &server_entity).verify_slice(&answer.payload).map_err(|_| {
                NetError::AuthFailed { reason: format!("{server_entity} does not know the key of {entity}") }
            })?;
            Ok(server_entity)
        }
        t => Err(NetError::AuthFailed { reason: format!("expected an answer to the handshake, got message type {t}") }),
    }
}

/// Server side. Returns the authenticated client entity name. On refusal the client has been sent
/// an error frame naming the problem, and the error returned says the same.
pub(crate) async fn server<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    keyring: &Keyring,
    server_entity: &str,
) -> Result<String, NetError> {
    let my_challenge = challenge();
    let mut payload = Vec::with_capacity(CHALLENGE_BYTES + server_entity.len());
    payload.extend_from_slice(&my_challenge);
    payload.extend_from_slice(server_entity.as_bytes());
    write_frame(s, &Frame::new(MSG_CHALLENGE, 0, payload)).await?;

    let mut header = [0u8; HEADER_BYTES];
    let auth = match read_frame(s, &mut header, HANDSHAKE_MAX_PAYLOAD, Payloads::Plain).await {
        Ok(Some(f)) => f,
        Ok(None) => return Err(NetError::Closed),
        Err(NetError::Frame(e)) => {
            // Tell a confused peer what is wrong; it may already be gone, so this is best effort.
            let _ = write_frame(s, &crate::error_frame(0, &e.to_string())).await;
            return Err(NetError::Frame(e));
        }
        Err(e) => return Err(e),
    };
    let refused = match check_auth(&auth, keyring, &my_challenge) {
        Ok((entity, key)) => {
            let client_challenge = &auth.payload[MAC_BYTES..MAC_BYTES + CHALLENGE_BYTES];
            let proof = mac(&key, client_challenge, server_entity).finalize().into_bytes();
            write_frame(s, &Frame::new(MSG_AUTH_OK, 0, proof.to_vec())).await?;
            return Ok(entity);
        }
        Err(reason) => reason,
    };
    // The refusal is best effort: the peer may already be gone, and the error is returned anyway.
    let _ = write_frame(s, &crate::error_frame(0, &refused)).await;
    Err(NetError::AuthRefused { reason: refused })
}

/// Checks a client's MSG_AUTH frame; the error is the reason sent back to the client.
fn check_auth(auth: &Frame, keyring: &Keyring, my_challenge: &[u8]) -> Result<(String, Key), String> {
    if auth.msg_type != MSG_AUTH {
        return Err(format!("expected authentication, got message type {}", auth.msg_type));
    }
    if auth.payload.len() <= MAC_BYTES + CHALLENGE_BYTES {
        return Err("authentication message too short".into());
    }
    let (proof, rest) = auth.payload.split_at(MAC_BYTES);
    let entity = &rest[CHALLENGE_BYTES..];
    if entity.len() > MAX_ENTITY_BYTES {
        return Err("entity name too long".into());
    }
    let entity = std::str::from_utf8(entity).map_err(|_| "entity name is not UTF-8".to_owned())?;
    let key = keyring.lookup(entity).ok_or_else(|| format!("unknown entity {entity}"))?;
    mac(&key, my_challenge, entity).verify_slice(proof).map_err(|_| format!("bad key for {entity}"))?;
    Ok((entity.to_owned(), key))
}
