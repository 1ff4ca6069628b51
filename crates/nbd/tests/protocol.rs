//! The server against the rules of the NBD protocol (the NBD project's `doc/proto.md`) that real
//! clients rarely exercise, byte by byte: which transmission flags are offered with which
//! negotiation, which command flags each command takes, the errors for ranges past the end,
//! and how metadata contexts are selected. Each test names the rule it checks.

mod common;

use common::*;
use shoal_nbd::proto::*;

const SIZE_BYTES: usize = 1 << 20;

fn pattern(i: usize) -> u8 {
    (i % 251) as u8
}

/// One export "disk" of `SIZE_BYTES` holding `pattern`.
fn one_disk() -> std::sync::Arc<shoal_nbd::Exports<Ram>> {
    exports(vec![("disk", Ram::new(SIZE_BYTES, false, pattern))])
}

async fn structured<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(s: &mut S) {
    let replies = option_replies(s, OPT_STRUCTURED_REPLY, &[]).await;
    assert_eq!(replies, vec![(OPT_STRUCTURED_REPLY, REP_ACK, vec![])]);
}

/// "NBD_FLAG_SEND_DF ... MUST leave this flag clear if structured replies have not been
/// negotiated": offered after STRUCTURED_REPLY, on INFO, GO and EXPORT_NAME alike, never before.
#[tokio::test]
async fn dont_fragment_is_offered_only_with_structured_replies() {
    let exports = one_disk();

    let mut c = connect(&exports).await;
    let info = option_replies(&mut c, OPT_INFO, &[0, 0, 0, 4, b'd', b'i', b's', b'k', 0, 0]).await;
    assert_eq!(export_flags(&info) & TF_SEND_DF, 0, "DF offered by INFO without structured replies");
    let replies = go(&mut c, "disk").await;
    assert_eq!(replies.last().unwrap().1, REP_ACK);
    assert_eq!(export_flags(&replies) & TF_SEND_DF, 0, "DF offered by GO without structured replies");

    let mut c = connect(&exports).await;
    send_option(&mut c, OPT_EXPORT_NAME, b"disk").await;
    let _size = tokio::io::AsyncReadExt::read_u64(&mut c).await.unwrap();
    let flags = tokio::io::AsyncReadExt::read_u16(&mut c).await.unwrap();
    assert_eq!(flags & TF_SEND_DF, 0, "DF offered by EXPORT_NAME without structured replies");

    let mut c = connect(&exports).await;
    structured(&mut c).await;
    let replies = go(&mut c, "disk").await;
    assert_ne!(export_flags(&replies) & TF_SEND_DF, 0, "DF not offered with structured replies");
}

/// "Clients MUST NOT set the NBD_CMD_FLAG_DF request flag unless this transmission flag is set":
/// a read with DF on a connection that was not offered it is refused (EINVAL) and the connection
/// goes on; with structured replies, a read with DF comes back in exactly one data chunk.
#[tokio::test]
async fn a_read_with_dont_fragment_is_refused_unless_offered_and_comes_whole_when_it_is() {
    let exports = one_disk();

    let mut c = connect(&exports).await;
    assert_eq!(go(&mut c, "disk").await.last().unwrap().1, REP_ACK);
    send_request(&mut c, CMD_FLAG_DF, CMD_READ, 1, 4096, 512, &[]).await;
    assert_eq!(read_simple_reply(&mut c, 512).await, (EINVAL, 1, vec![]));
    send_request(&mut c, 0, CMD_READ, 2, 4096, 512, &[]).await;
    let want: Vec<u8> = (4096..4096 + 512).map(pattern).collect();
    assert_eq!(read_simple_reply(&mut c, 512).await, (0, 2, want.clone()));

    let mut c = connect(&exports).await;
    structured(&mut c).await;
    assert_eq!(go(&mut c, "disk").await.last().unwrap().1, REP_ACK);
    let length = 256 << 10;
    send_request(&mut c, CMD_FLAG_DF, CMD_READ, 3, 4096, length, &[]).await;
    let reply = read_chunk(&mut c).await;
    assert_eq!((reply.flags, reply.kind, reply.cookie), (REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, 3));
    assert_eq!(reply.payload[..8], 4096u64.to_be_bytes(), "the chunk's offset");
    let want: Vec<u8> = (4096..4096 + length as usize).map(pattern).collect();
    assert!(reply.payload[8..] == want[..], "the read's data");
}

/// Each command flag is valid with its own commands only (FUA with any, DF with READ, REQ_ONE with
/// BLOCK_STATUS, NO_HOLE and FAST_ZERO with WRITE_ZEROES), as qemu-nbd and nbdkit enforce: another
/// flag, or an unknown one, is EINVAL and changes nothing, and a refused write's payload is still
/// read, so the next request is understood.
#[tokio::test]
async fn command_flags_are_taken_only_with_their_commands() {
    let disk = Ram::new(SIZE_BYTES, false, pattern);
    let exports = exports(vec![("disk", disk.clone())]);
    let mut c = connect(&exports).await;
    assert_eq!(go(&mut c, "disk").await.last().unwrap().1, REP_ACK);
    let before = disk.bytes(0, 8192);

    let refused = [
        (CMD_FLAG_NO_HOLE, CMD_WRITE),
        (CMD_FLAG_FAST_ZERO, CMD_WRITE),
        (CMD_FLAG_REQ_ONE, CMD_WRITE),
        (1 << 7, CMD_WRITE),
        (CMD_FLAG_REQ_ONE, CMD_TRIM),
        (CMD_FLAG_NO_HOLE, CMD_TRIM),
        (CMD_FLAG_REQ_ONE, CMD_WRITE_ZEROES),
        (CMD_FLAG_DF, CMD_WRITE_ZEROES),
    ];
    for (cookie, &(flags, kind)) in refused.iter().enumerate() {
        let payload = if kind == CMD_WRITE { vec![0xAB; 4096] } else { vec![] };
        send_request(&mut c, flags, kind, cookie as u64, 0, 4096, &payload).await;
        assert_eq!(
            read_simple_reply(&mut c, 0).await,
            (EINVAL, cookie as u64, vec![]),
            "flags {flags:#x} on command {kind}"
        );
    }
    send_request(&mut c, CMD_FLAG_NO_HOLE, CMD_READ, 100, 0, 16, &[]).await;
    assert_eq!(read_simple_reply(&mut c, 16).await.0, EINVAL);
    send_request(&mut c, CMD_FLAG_REQ_ONE, CMD_FLUSH, 101, 0, 0, &[]).await;
    assert_eq!(read_simple_reply(&mut c, 0).await.0, EINVAL);
    send_request(&mut c, CMD_FLAG_FAST_ZERO, CMD_CACHE, 102, 0, 4096, &[]).await;
    assert_eq!(read_simple_reply(&mut c, 0).await.0, EINVAL);
    assert!(disk.bytes(0, 8192) == before, "a refused request changed the export");

    // FUA is taken on every command (clients set it on reads and flushes too).
    send_request(&mut c, CMD_FLAG_FUA, CMD_READ, 200, 0, 16, &[]).await;
    assert_eq!(read_simple_reply(&mut c, 16).await, (0, 200, before[..16].to_vec()));
    send_request(&mut c, CMD_FLAG_FUA, CMD_FLUSH, 201, 0, 0, &[]).await;
    assert_eq!(read_simple_reply(&mut c, 0).await, (0, 201, vec![]));
    send_request(&mut c, CMD_FLAG_FUA, CMD_WRITE, 202, 0, 4096, &[0xCD; 4096]).await;
    assert_eq!(read_simple_reply(&mut c, 0).await, (0, 202, vec![]));
    send_request(&mut c, CMD_FLAG_FUA | CMD_FLAG_NO_HOLE, CMD_WRITE_ZEROES, 203, 4096, 4096, &[]).await;
    assert_eq!(read_simple_reply(&mut c, 0).await, (0, 203, vec![]));
    assert!(disk.bytes(0, 4096) == vec![0xCD; 4096] && disk.bytes(4096, 4096) == vec![0; 4096]);
    // Allocated zeros cannot be written fast: FAST_ZERO with NO_HOLE fails with ENOTSUP at once.
    send_request(&mut c, CMD_FLAG_FAST_ZERO | CMD_FLAG_NO_HOLE, CMD_WRITE_ZEROES, 204, 0, 4096, &[]).await;
    assert_eq!(read_simple_reply(&mut c, 0).await, (ENOTSUP, 204, vec![]));
    assert!(disk.bytes(0, 4096) == vec![0xCD; 4096], "a failed fast zero changed the export");
}

/// Ranges past the end: ENOSPC for writes and write-zeroes, EINVAL for reads, trims, caches and
/// block status ("SHOULD return NBD_EINVAL if it receives a read or trim request including one or
/// more sectors beyond the size of the device"), the same as a structured error chunk, and the
/// connection goes on. A request of length zero is answered too, never a disconnect.
#[tokio::test]
async fn ranges_past_the_end_get_the_errors_the_protocol_names() {
    let disk = Ram::new(SIZE_BYTES, false, pattern);
    let exports = exports(vec![("disk", disk.clone())]);
    let end = SIZE_BYTES as u64;
    let cases =
        [(CMD_WRITE, ENOSPC), (CMD_WRITE_ZEROES, ENOSPC), (CMD_READ, EINVAL), (CMD_TRIM, EINVAL), (CMD_CACHE, EINVAL)];
    let mut c = connect(&exports).await;
    assert_eq!(go(&mut c, "disk").await.last().unwrap().1, REP_ACK);
    for (cookie, &(kind, errno)) in cases.iter().enumerate() {
        let payload = if kind == CMD_WRITE { vec![0xAB; 8192] } else { vec![] };
        send_request(&mut c, 0, kind, cookie as u64, end - 4096, 8192, &payload).await;
        assert_eq!(
            read_simple_reply(&mut c, 8192).await,
            (errno, cookie as u64, vec![]),
            "command {kind} past the end"
        );
    }
    // An offset so large that offset + length wraps around is past the end too.
    send_request(&mut c, 0, CMD_READ, 50, u64::MAX - 100, 4096, &[]).await;
    assert_eq!(read_simple_reply(&mut c, 4096).await.0, EINVAL);
    for (cookie, kind) in [CMD_READ, CMD_WRITE, CMD_TRIM, CMD_WRITE_ZEROES].into_iter().enumerate() {
        send_request(&mut c, 0, kind, 60 + cookie as u64, 0, 0, &[]).await;
        assert_eq!(read_simple_reply(&mut c, 0).await.1, 60 + cookie as u64, "a zero-length command {kind}");
    }
    send_request(&mut c, 0, CMD_READ, 70, end - 16, 16, &[]).await;
    let last: Vec<u8> = (SIZE_BYTES - 16..SIZE_BYTES).map(pattern).collect();
    assert_eq!(read_simple_reply(&mut c, 16).await, (0, 70, last), "the last bytes, after the refusals");
    assert!(disk.bytes(SIZE_BYTES - 4096, 4096).iter().enumerate().all(|(i, &b)| b == pattern(SIZE_BYTES - 4096 + i)));

    let mut c = connect(&exports).await;
    structured(&mut c).await;
    let set = option_replies(&mut c, OPT_SET_META_CONTEXT, &meta_context_data("disk", &[BASE_ALLOCATION])).await;
    assert_eq!(set.last().unwrap().1, REP_ACK);
    assert_eq!(go(&mut c, "disk").await.last().unwrap().1, REP_ACK);
    for (cookie, &(kind, errno)) in cases.iter().chain(&[(CMD_BLOCK_STATUS, EINVAL)]).enumerate() {
        let payload = if kind == CMD_WRITE { vec![0xAB; 8192] } else { vec![] };
        send_request(&mut c, 0, kind, cookie as u64, end - 4096, 8192, &payload).await;
        let reply = read_chunk(&mut c).await;
        assert_eq!(
            (reply.flags, reply.cookie, reply.errno()),
            (REPLY_FLAG_DONE, cookie as u64, errno),
            "command {kind}"
        );
    }
}

/// Metadata contexts: a LIST names `base:allocation` with the reserved id zero; "issuing
/// [SET_META_CONTEXT] replaces all previously-set metadata contexts (including when this command
/// fails)"; and a context selected for one export does not serve BLOCK_STATUS on another (the
/// client "MUST NOT send NBD_CMD_BLOCK_STATUS unless ... [SET_META_CONTEXT] referred to the same
/// export name"). On the export it was selected for, BLOCK_STATUS carries the id SET returned and
/// describes the range from its offset, one descriptor with REQ_ONE.
#[tokio::test]
async fn metadata_contexts_are_selected_per_export_and_replaced_by_every_set() {
    // Export "a": data, then a hole of 64 KiB at 128 KiB, then data.
    let a = Ram::new(SIZE_BYTES, false, |i| if (128 << 10..192 << 10).contains(&i) { 0 } else { 1 });
    let exports = exports(vec![("a", a), ("b", Ram::new(SIZE_BYTES, false, pattern))]);

    // LIST: every context when no query is given, `base:` matches, an unknown namespace none.
    let mut c = connect(&exports).await;
    let context = |id: u32| {
        let mut d = id.to_be_bytes().to_vec();
        d.extend_from_slice(BASE_ALLOCATION.as_bytes());
        (OPT_LIST_META_CONTEXT, REP_META_CONTEXT, d)
    };
    let ack = (OPT_LIST_META_CONTEXT, REP_ACK, vec![]);
    for queries in [&[][..], &["base:"], &[BASE_ALLOCATION]] {
        let list = option_replies(&mut c, OPT_LIST_META_CONTEXT, &meta_context_data("a", queries)).await;
        assert_eq!(list, vec![context(0), ack.clone()], "LIST with {queries:?}");
    }
    let list = option_replies(&mut c, OPT_LIST_META_CONTEXT, &meta_context_data("a", &["x-other:thing"])).await;
    assert_eq!(list, vec![ack.clone()]);

    // A SET that fails (malformed) clears the selection made before it.
    structured(&mut c).await;
    let set = option_replies(&mut c, OPT_SET_META_CONTEXT, &meta_context_data("a", &[BASE_ALLOCATION])).await;
    assert_eq!(set.len(), 2);
    let mut malformed = meta_context_data("a", &[BASE_ALLOCATION]);
    malformed.truncate(malformed.len() - 3);
    let failed = option_replies(&mut c, OPT_SET_META_CONTEXT, &malformed).await;
    assert_eq!(failed.last().unwrap().1, REP_ERR_INVALID);
    assert_eq!(go(&mut c, "a").await.last().unwrap().1, REP_ACK);
    send_request(&mut c, 0, CMD_BLOCK_STATUS, 1, 0, 4096, &[]).await;
    assert_eq!(read_chunk(&mut c).await.errno(), EINVAL, "BLOCK_STATUS served after a failed SET");

    // A SET for "a" does not select a context on "b".
    let mut c = connect(&exports).await;
    structured(&mut c).await;
    option_replies(&mut c, OPT_SET_META_CONTEXT, &meta_context_data("a", &[BASE_ALLOCATION])).await;
    assert_eq!(go(&mut c, "b").await.last().unwrap().1, REP_ACK);
    send_request(&mut c, 0, CMD_BLOCK_STATUS, 2, 0, 4096, &[]).await;
    assert_eq!(read_chunk(&mut c).await.errno(), EINVAL, "BLOCK_STATUS served on an export other than the SET's");

    // On "a": the descriptors cover the range from its offset, with the id SET returned.
    let mut c = connect(&exports).await;
    structured(&mut c).await;
    let set = option_replies(&mut c, OPT_SET_META_CONTEXT, &meta_context_data("a", &[BASE_ALLOCATION])).await;
    assert_eq!(set.len(), 2, "{set:?}");
    assert_eq!((set[0].1, &set[0].2[4..]), (REP_META_CONTEXT, BASE_ALLOCATION.as_bytes()));
    let id = set[0].2[..4].to_vec();
    assert_eq!(go(&mut c, "a").await.last().unwrap().1, REP_ACK);
    let (offset, length) = (64u64 << 10, 256u32 << 10);
    send_request(&mut c, 0, CMD_BLOCK_STATUS, 3, offset, length, &[]).await;
    let reply = read_chunk(&mut c).await;
    assert_eq!((reply.flags, reply.kind, reply.cookie), (REPLY_FLAG_DONE, REPLY_TYPE_BLOCK_STATUS, 3));
    assert_eq!(reply.payload[..4], id[..]);
    let descriptors: Vec<(u32, u32)> = reply.payload[4..]
        .chunks(8)
        .map(|d| (u32::from_be_bytes(d[..4].try_into().unwrap()), u32::from_be_bytes(d[4..].try_into().unwrap())))
        .collect();
    assert_eq!(descriptors, vec![(64 << 10, 0), (64 << 10, STATE_HOLE | STATE_ZERO), (128 << 10, 0)]);
    send_request(&mut c, CMD_FLAG_REQ_ONE, CMD_BLOCK_STATUS, 4, offset, length, &[]).await;
    let reply = read_chunk(&mut c).await;
    assert_eq!(reply.payload.len(), 4 + 8, "REQ_ONE answered with more than one descriptor");
    assert_eq!(reply.payload[4..8], (64u32 << 10).to_be_bytes());
}
