//! Shoal's messenger: the connections every daemon and client talks over.
//!
//! A connection carries [`Frame`]s (see `shoal_proto::frame`). It starts with a mutual
//! challenge-response handshake keyed by a per-entity secret ([`Key`], kept in a [`Keyring`]);
//! after it, the client sends requests with [`Connection::call`], many at a time, and the
//! server answers each with a frame carrying the same request id, in any order. The server may
//! also push frames with request id 0 (map updates, for example), which the client reads from
//! [`Connection::take_pushes`]. The server side is [`serve`] plus a [`Handler`].
//!
//! Message types 1..=15 belong to the messenger ([`MSG_CHALLENGE`], [`MSG_AUTH`],
//! [`MSG_AUTH_OK`], [`MSG_ERROR`], [`MSG_KEEPALIVE`]); upper layers use
//! [`FIRST_USER_MSG_TYPE`] and above.
//!
//! Every queue is bounded: calls in flight per connection, replies queued per server connection,
//! and pushes buffered per client connection. Nothing read from the network can make either side
//! panic; a peer that breaks the protocol loses its own connection and nothing else.

mod auth;
mod client;
mod error;
mod keyring;
pub mod ports;
mod server;
mod stream;
pub mod tls;
mod wire;

pub use client::{ClientConfig, Connection, PendingReply};
pub use error::NetError;
pub use keyring::{Key, Keyring};
pub use server::{Handler, ServerConfig, ServerConn, TrySendError, serve};
pub use shoal_proto::{Frame, FrameError};
pub use stream::{Listeners, MAX_LOCAL_NAME_BYTES, PeerAddr, bind_local};
pub use wire::{
    FIRST_USER_MSG_TYPE, HANDSHAKE_TIMEOUT, MSG_AUTH, MSG_AUTH_OK, MSG_CHALLENGE, MSG_ERROR, MSG_KEEPALIVE,
    PUSH_QUEUE_FRAMES, error_frame,
};
