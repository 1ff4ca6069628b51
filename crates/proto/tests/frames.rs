//! Frames survive any split of the byte stream, and no corruption passes unnoticed.

use proptest::prelude::*;
use shoal_proto::{Frame, FrameDecoder, FrameError, HEADER_BYTES};

fn frame_strategy() -> impl Strategy<Value = Frame> {
    (any::<u16>(), any::<u64>(), prop::collection::vec(any::<u8>(), 0..3000))
        .prop_map(|(t, id, payload)| Frame::new(t, id, payload))
}

fn decode_all(bytes: &[u8], chunk: usize) -> Result<Vec<Frame>, FrameError> {
    let mut d = FrameDecoder::default();
    let mut out = Vec::new();
    for piece in bytes.chunks(chunk.max(1)) {
        d.push(piece);
        while let Some(f) = d.next_frame()? {
            out.push(f);
        }
    }
    assert_eq!(d.buffered_bytes(), 0, "a whole stream leaves nothing behind");
    Ok(out)
}

proptest! {
    #[test]
    fn round_trip_under_any_split(frames in prop::collection::vec(frame_strategy(), 1..8), chunk in 1usize..5000) {
        let bytes: Vec<u8> = frames.iter().flat_map(Frame::encode).collect();
        prop_assert_eq!(decode_all(&bytes, chunk).unwrap(), frames);
    }

    #[test]
    fn any_flipped_bit_is_an_error(frame in frame_strategy(), pos in any::<prop::sample::Index>(), bit in 0u8..8) {
        let mut bytes = frame.encode();
        let i = pos.index(bytes.len());
        bytes[i] ^= 1 << bit;
        let mut d = FrameDecoder::default();
        d.push(&bytes);
        // Either an error, or (a corrupted length that now asks for more bytes) a wait; never a
        // frame with different contents.
        match d.next_frame() {
            Err(_) | Ok(None) => {}
            Ok(Some(f)) => prop_assert!(false, "corrupted frame accepted: {:?}", f.request_id),
        }
    }

    #[test]
    fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let mut d = FrameDecoder::default();
        d.push(&bytes);
        let _ = d.next_frame();
    }
}

#[test]
fn oversized_length_is_refused_before_buffering() {
    let mut bytes = Frame::new(1, 7, vec![0; 100]).encode();
    let mut d = FrameDecoder::new(50);
    d.push(&bytes[..HEADER_BYTES]);
    assert_eq!(d.next_frame(), Err(FrameError::TooLarge { len: 100, max: 50 }));
    // The error sticks: the stream is no longer aligned on frames.
    bytes.truncate(HEADER_BYTES);
    d.push(&bytes);
    assert!(d.next_frame().is_err());
}

#[test]
fn bad_magic_is_named() {
    let mut d = FrameDecoder::default();
    d.push(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(matches!(d.next_frame(), Err(FrameError::BadMagic(m)) if &m == b"GET "));
}
