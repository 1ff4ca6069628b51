//! Shoal's wire protocol, with no I/O: the frame format that every connection between daemons
//! and clients carries. The messenger (a later layer) reads bytes from sockets and feeds them
//! to a [`frame::FrameDecoder`]; everything about what a valid frame is lives here, so it can be
//! tested exhaustively without a network.

pub mod frame;

pub use frame::{Frame, FrameDecoder, FrameError, HEADER_BYTES, MAX_PAYLOAD_BYTES};
