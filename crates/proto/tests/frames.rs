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

mod messages {
    use proptest::prelude::*;
    use shoal_proto::osd::{ObjOp, OsdOp, ReqId};
    use shoal_proto::{MsgError, decode, decode_frame, encode, frame};

    fn op(object: &str) -> OsdOp {
        OsdOp {
            reqid: ReqId { client: 7, tid: 9 },
            epoch: 3,
            pool: 1,
            pg: 5,
            object: object.into(),
            ops: vec![ObjOp::WriteFull { len_bytes: 3 }, ObjOp::Stat],
            expires_in_ms: Some(1_800_000),
            resend: false,
            frees_space: false,
        }
    }

    #[test]
    fn header_and_data_round_trip_without_copying_data() {
        let payload = encode(&op("a"), vec![1, 2, 3]);
        let (msg, data): (OsdOp, Vec<u8>) = decode(payload).unwrap();
        assert_eq!(msg, op("a"));
        assert_eq!(data, vec![1, 2, 3]);
        let f = frame(11, &op("b"), Vec::new());
        assert_eq!(f.msg_type, 32);
        let (msg, data): (OsdOp, _) = decode_frame(f).unwrap();
        assert_eq!(msg.object, "b");
        assert!(data.is_empty());
    }

    #[test]
    fn wrong_version_and_short_payloads_are_refused() {
        let mut payload = encode(&op("a"), vec![]);
        *payload.last_mut().unwrap() = 99;
        assert_eq!(decode::<OsdOp>(payload).unwrap_err(), MsgError::Version { got: 99 });
        assert_eq!(decode::<OsdOp>(vec![1, 2]).unwrap_err(), MsgError::Truncated(2));
        let mut payload = encode(&op("a"), vec![]);
        let n = payload.len();
        payload[n - 5..n - 1].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode::<OsdOp>(payload), Err(MsgError::BadHeaderLength(_))));
    }

    proptest! {
        /// Arbitrary bytes never panic the decoder: they decode or give an error.
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode::<OsdOp>(bytes);
        }
    }
}
