//! Shoal's wire protocol, with no I/O: the frame format that every connection between daemons
//! and clients carries ([`frame`]), and the messages inside frames ([`msg`] for the payload
//! layout, [`mon`] and [`osd`] for the messages). The messenger (`shoal-net`) reads bytes from
//! sockets and feeds them to a [`frame::FrameDecoder`]; everything about what a valid frame or
//! message is lives here, so it can be tested exhaustively without a network.
//!
//! Message types: 1..=15 belong to the messenger (handshake, errors), 16..=31 to the monitors
//! ([`mon`]), 32..=63 to the OSDs ([`osd`]).

pub mod error;
pub mod frame;
pub mod mon;
pub mod msg;
pub mod osd;

pub use error::{ErrorCode, RemoteError};
pub use frame::{Frame, FrameDecoder, FrameError, HEADER_BYTES, MAX_PAYLOAD_BYTES};
pub use msg::{
    Message, MsgError, decode, decode_bytes, decode_frame, decode_frame_bytes, encode, encoded_len, frame,
    frame_with_checked_data, frame_with_checked_parts, frame_with_data, peek,
};
