//! Reading and writing frames on a socket, shared by both ends of a connection.

use std::io::IoSlice;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use shoal_proto::frame::{MAGIC, decode_header};
use shoal_proto::{Frame, FrameError, HEADER_BYTES, MAX_PAYLOAD_BYTES};
use shoal_util::SUM_BLOCK_BYTES;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, mpsc};

use crate::NetError;
use shoal_splice::{SpliceSink, Splicer};

/// Server to client, first frame of a connection: a 32-byte challenge followed by the server's
/// entity name (UTF-8).
pub const MSG_CHALLENGE: u16 = 1;
/// Client to server: `HMAC-SHA256(key, server challenge || client entity)` (32 bytes), the
/// client's own 32-byte challenge, then the client's entity name (UTF-8).
pub const MSG_AUTH: u16 = 2;
/// Server to client: `HMAC-SHA256(key, client challenge || server entity)` (32 bytes).
pub const MSG_AUTH_OK: u16 = 3;
/// An error, payload a UTF-8 reason. With request id 0 it is the sender's last frame before it
/// closes the connection (handshake refused, malformed frame received); with the id of a request
/// it is that request's reply, and [`crate::Connection::call`] returns [`NetError::Remote`].
pub const MSG_ERROR: u16 = 4;
/// A liveness probe. A server answers a keepalive with a keepalive carrying the same request id
/// (without involving the handler), so `call(MSG_KEEPALIVE, vec![])` measures a round trip.
/// Keepalives with request id 0 are ignored by both sides.
pub const MSG_KEEPALIVE: u16 = 5;
/// The first message type upper layers may use; 1..=15 belong to the messenger.
pub const FIRST_USER_MSG_TYPE: u16 = 16;

/// How long a server waits for a client to complete the handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Push frames a client connection buffers (see [`crate::Connection::take_pushes`]).
pub const PUSH_QUEUE_FRAMES: usize = 256;

/// The largest payload accepted during the handshake, before the peer is known.
pub(crate) const HANDSHAKE_MAX_PAYLOAD: u32 = 4096;
/// Slices one vectored write may carry on Linux (`IOV_MAX`).
const IOV_MAX: usize = 1024;
/// Frames a writer gathers into one vectored write at most.
const BATCH_FRAMES: usize = 64;
/// Bytes a writer gathers into one vectored write before it stops adding frames; a single
/// frame may be larger.
const BATCH_BYTES: usize = 1 << 20;
/// Buffer of the read half. Small frames are read from it many at a time; a payload at least
/// this large is read straight from the socket into its own buffer.
pub(crate) const READ_BUFFER: usize = 64 << 10;

/// An error frame (type [`MSG_ERROR`]) with `reason` as its payload. A handler replies with
/// `error_frame(request.request_id, "...")` to make the caller's `call` fail with
/// [`NetError::Remote`].
#[must_use]
pub fn error_frame(request_id: u64, reason: &str) -> Frame {
    Frame::new(MSG_ERROR, request_id, reason.as_bytes().to_vec())
}

/// Refuses a frame the peer would refuse: sending it would only make the peer close the
/// connection, failing every other call on it too (and a payload over 4 GiB cannot be framed).
pub(crate) fn check_outgoing(frame: &Frame) -> Result<(), NetError> {
    if frame.payload_len() > MAX_PAYLOAD_BYTES as usize {
        let len = u32::try_from(frame.payload_len()).unwrap_or(u32::MAX);
        return Err(FrameError::TooLarge { len, max: MAX_PAYLOAD_BYTES }.into());
    }
    Ok(())
}

/// The text of an error frame. A reason that is not UTF-8 is shown lossily rather than refused:
/// it only ever ends up in an error message.
pub(crate) fn error_reason(frame: &Frame) -> String {
    let mut reason = String::new();
    for part in frame.parts() {
        reason.push_str(&String::from_utf8_lossy(part));
    }
    reason
}

/// State one connection's reader, writer and handles share: whether it is closed, and how to
/// tell the reader and the writer to stop.
pub(crate) struct Link {
    closed: AtomicBool,
    /// Wakes the writer so it flushes what is queued and shuts the socket down.
    writer_stop: Notify,
    /// Wakes the reader so it stops reading.
    reader_stop: Notify,
}

impl Link {
    pub(crate) fn new() -> Self {
        Self { closed: AtomicBool::new(false), writer_stop: Notify::new(), reader_stop: Notify::new() }
    }

    /// Marks the connection closed and wakes both tasks. `notify_one` keeps a permit when nobody
    /// is waiting yet, so a task that is busy right now still sees the request when it next waits.
    pub(crate) fn close(&self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            self.writer_stop.notify_one();
            self.reader_stop.notify_one();
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(crate) async fn reader_stopped(&self) {
        self.reader_stop.notified().await;
    }
}

/// Payloads at least this large are read into block-aligned memory when the reader asks for it.
pub(crate) const ALIGNED_PAYLOAD_MIN_BYTES: usize = 64 << 10;
/// The alignment of such payloads: a storage block, what direct I/O requires of memory.
pub(crate) const PAYLOAD_ALIGN_BYTES: usize = 4096;

/// How a reader lays out the payloads it receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Payloads {
    /// Every payload in the frame's `payload` vector.
    Plain,
    /// Payloads of at least [`ALIGNED_PAYLOAD_MIN_BYTES`] in the frame's `data`, starting on a
    /// [`PAYLOAD_ALIGN_BYTES`] boundary; smaller ones as with `Plain`. A server uses this: the
    /// bulk data of a write leads its payload, so a store can write it with direct I/O as it is.
    Aligned,
}

/// Reads one frame: the header into `header`, then the payload straight into a buffer of its own.
/// Returns `Ok(None)` when the peer closed the connection cleanly between two frames.
///
/// The magic is checked as soon as its four bytes arrive, so a peer speaking something else is
/// refused at once instead of after a whole header that may never come. The payload buffer is
/// allocated only after the header checksum and the size limit passed, and it is filled without
/// zeroing it first.
pub(crate) async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    header: &mut [u8; HEADER_BYTES],
    max_payload: u32,
    payloads: Payloads,
) -> Result<Option<Frame>, NetError> {
    // A clean end of stream is only possible before the first byte of a frame.
    let first = r.read(&mut header[..MAGIC.len()]).await?;
    if first == 0 {
        return Ok(None);
    }
    if first < MAGIC.len() {
        r.read_exact(&mut header[first..MAGIC.len()]).await?;
    }
    if &header[..MAGIC.len()] != MAGIC {
        return Err(FrameError::BadMagic([header[0], header[1], header[2], header[3]]).into());
    }
    r.read_exact(&mut header[MAGIC.len()..]).await?;
    let h = decode_header(header, max_payload)?;
    let len = h.len as usize;
    if payloads == Payloads::Aligned && len >= ALIGNED_PAYLOAD_MIN_BYTES {
        // Room for the payload at the first aligned address of the allocation: the bytes before
        // it are padding, and the frame keeps the allocation through a slice that skips them.
        let mut buf: Vec<u8> = Vec::with_capacity(len + PAYLOAD_ALIGN_BYTES - 1);
        let pad = buf.as_ptr().align_offset(PAYLOAD_ALIGN_BYTES);
        assert!(pad < PAYLOAD_ALIGN_BYTES, "no aligned address in an allocation of the alignment's size");
        buf.resize(pad, 0);
        let (crc, block_crcs) = read_payload_summed(r, &mut buf, pad + len).await?;
        h.check_crc(len, crc)?;
        // The bulk data's own checksum, kept so that a primary forwarding the data to replicas
        // does not read it again for their frames: the whole payload's checksum with the
        // message's header taken back off its end, or (for an unusually long header) computed.
        let payload = &buf[pad..];
        let bulk = shoal_proto::msg::bulk_len(payload).unwrap_or(0);
        let tail = &payload[bulk..];
        let bulk_crc = if tail.len() <= UNAPPEND_MAX_BYTES {
            shoal_util::crc32c_unappend(crc, tail)
        } else {
            shoal_util::crc32c(&payload[..bulk])
        };
        let data = bytes::Bytes::from(buf).slice(pad..);
        debug_assert_eq!(data.as_ptr() as usize % PAYLOAD_ALIGN_BYTES, 0);
        let mut frame = Frame::with_data(h.msg_type, h.request_id, data, Vec::new());
        frame.prefix_crc = Some((bulk, bulk_crc));
        frame.block_crcs = Some(shoal_util::BlockCrcs::new(block_crcs));
        return Ok(Some(frame));
    }
    let mut payload = Vec::with_capacity(len);
    let crc = read_payload(r, &mut payload, len).await?;
    h.check_crc(len, crc)?;
    Ok(Some(Frame::new(h.msg_type, h.request_id, payload)))
}

/// Longest message header whose checksum is taken back off a payload's (about a nanosecond per
/// bit); a longer one has its bulk data checksummed again instead.
const UNAPPEND_MAX_BYTES: usize = 4096;

/// Reads from `r` until `buf` holds `end` bytes, into its spare capacity (no zeroing first),
/// handing each piece to `on_piece` as it arrives, while it is still in the cache the kernel's
/// copy left it in: a checksum pass over a payload read whole first would fetch a multi-megabyte
/// payload from memory again.
async fn read_pieces<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    end: usize,
    mut on_piece: impl FnMut(&[u8]),
) -> Result<(), NetError> {
    debug_assert!(buf.capacity() >= end, "the payload buffer is allocated before it is read");
    while buf.len() < end {
        let want = (end - buf.len()) as u64;
        let from = buf.len();
        // `take` keeps the read inside this frame; `read_buf` fills the spare capacity directly.
        let n = (&mut *r).take(want).read_buf(buf).await?;
        if n == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
        }
        on_piece(&buf[from..from + n]);
    }
    Ok(())
}

/// Reads the payload up to `end` (see [`read_pieces`]) and returns the crc32c of the bytes it
/// appended.
async fn read_payload<R: AsyncRead + Unpin>(r: &mut R, buf: &mut Vec<u8>, end: usize) -> Result<u32, NetError> {
    let mut crc = 0;
    read_pieces(r, buf, end, |piece| crc = shoal_util::crc32c_append(crc, piece)).await?;
    Ok(crc)
}

/// [`read_payload`] that also returns the crc32c of each whole [`SUM_BLOCK_BYTES`] block it
/// appended (block 0 at the buffer's length on entry), computed as the blocks arrive. The
/// payload's checksum is those joined (then extended over a partial last block), so the frame
/// check that follows also proves every block's: a store that checksums what it writes per block
/// takes them instead of reading the payload a second time (decision 0094).
async fn read_payload_summed<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    end: usize,
) -> Result<(u32, Vec<u32>), NetError> {
    let start = buf.len();
    let mut sums = BlockSums::with_capacity((end - start) / SUM_BLOCK_BYTES);
    read_pieces(r, buf, end, |piece| sums.update(piece)).await?;
    Ok(sums.finish(&buf[start..end]))
}

/// The block checksums of a stream of bytes fed in pieces of any size, and their join.
struct BlockSums {
    block_crcs: Vec<u32>,
    /// The checksum of the whole blocks so far.
    joined: u32,
    /// The running checksum of the block being filled, and its bytes so far.
    partial: u32,
    filled: usize,
}

impl BlockSums {
    fn with_capacity(blocks: usize) -> Self {
        Self { block_crcs: Vec::with_capacity(blocks), joined: 0, partial: 0, filled: 0 }
    }

    fn update(&mut self, mut piece: &[u8]) {
        while !piece.is_empty() {
            let take = (SUM_BLOCK_BYTES - self.filled).min(piece.len());
            let (now, later) = piece.split_at(take);
            self.partial = if self.filled == 0 && take == SUM_BLOCK_BYTES {
                shoal_util::crc32c(now)
            } else {
                shoal_util::crc32c_append(self.partial, now)
            };
            self.filled += take;
            piece = later;
            if self.filled == SUM_BLOCK_BYTES {
                self.block_crcs.push(self.partial);
                self.joined = shoal_util::block_shift().concat(self.joined, self.partial);
                (self.partial, self.filled) = (0, 0);
            }
        }
    }

    /// The whole stream's checksum and the whole blocks' checksums; `all` is every byte fed. A
    /// partial last block (the message's header after the bulk data) joins as it is.
    fn finish(self, all: &[u8]) -> (u32, Vec<u32>) {
        debug_assert_eq!(all.len(), self.block_crcs.len() * SUM_BLOCK_BYTES + self.filled);
        let tail = &all[all.len() - self.filled..];
        let crc = if tail.is_empty() { self.joined } else { shoal_util::crc32c_append(self.joined, tail) };
        (crc, self.block_crcs)
    }
}

/// Writes one frame directly (used during the handshake, before the writer task exists).
pub(crate) async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, frame: &Frame) -> Result<(), NetError> {
    let header = frame.header();
    let mut slices: Vec<IoSlice<'_>> = std::iter::once(&header[..]).chain(frame.parts()).map(IoSlice::new).collect();
    write_all_vectored(w, &mut slices).await?;
    w.flush().await?;
    Ok(())
}

async fn write_all_vectored<W: AsyncWrite + Unpin>(w: &mut W, mut bufs: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    // Empty slices would make a zero-length write look like a stuck socket.
    while bufs.first().is_some_and(|b| b.is_empty()) {
        bufs = &mut bufs[1..];
    }
    while !bufs.is_empty() {
        // The kernel takes at most IOV_MAX slices per call (more fail the whole write).
        let at_once = bufs.len().min(IOV_MAX);
        let n = w.write_vectored(&bufs[..at_once]).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        // (Drops every slice written whole, empty ones after them included.)
        IoSlice::advance_slices(&mut bufs, n);
    }
    Ok(())
}

/// The writer task of a connection: takes frames from `rx` and writes them, as many as are
/// queued (up to a batch) per vectored write, header and payload side by side so no payload is
/// copied. Ends when every sender is gone or `link` is closed; either way it first writes what is
/// already queued (so a final error frame reaches the peer), then shuts the write side down. A
/// write error closes `link`, which stops the reader too.
///
/// On a local socket, large bulk parts are spliced instead of copied (decision 0096); the writer
/// holds them until its peer has read them, and before it ends it waits for that
/// (`Splicer::drain`).
pub(crate) async fn writer_task<W: SpliceSink>(mut w: W, mut rx: mpsc::Receiver<Frame>, link: std::sync::Arc<Link>) {
    let mut splicer = w.local().map(|_| Splicer::new());
    let mut batch: Vec<Frame> = Vec::with_capacity(BATCH_FRAMES);
    let mut headers = [[0u8; HEADER_BYTES]; BATCH_FRAMES];
    let mut stopping = false;
    loop {
        if !stopping {
            let holding = splicer.as_ref().is_some_and(Splicer::holds);
            tokio::select! {
                biased;
                f = rx.recv() => match f {
                    Some(f) => batch.push(f),
                    None => break,
                },
                () = link.writer_stop.notified() => {
                    // Refuse new frames but keep the queued ones: they are written below.
                    rx.close();
                    stopping = true;
                }
                // Nothing to write, spliced parts held: free them once the peer has read them.
                () = shoal_splice::idle_poll(), if holding => {
                    if let (Some(s), Some(sock)) = (splicer.as_mut(), w.local()) {
                        s.release_if_read(sock);
                    }
                    continue;
                }
            }
        }
        let mut bytes: usize = batch.iter().map(|f| f.payload_len() + HEADER_BYTES).sum();
        while batch.len() < BATCH_FRAMES && bytes < BATCH_BYTES {
            match rx.try_recv() {
                Ok(f) => {
                    bytes += f.payload_len() + HEADER_BYTES;
                    batch.push(f);
                }
                Err(_) => break,
            }
        }
        if batch.is_empty() {
            if stopping {
                break;
            }
            continue;
        }
        for (f, h) in batch.iter().zip(headers.iter_mut()) {
            *h = f.header();
        }
        if let (Some(s), Some(sock)) = (splicer.as_mut(), w.local()) {
            s.release_if_read(sock);
        }
        let written = write_batch(&mut w, &batch, &headers, splicer.as_mut()).await;
        batch.clear();
        if written.is_err() {
            break;
        }
    }
    link.close();
    let _ = w.shutdown().await;
    // Waiting for the peer to read what was spliced keeps the socket open, apart from the
    // connection's own end (a server's stop does not wait for it). A runtime shut down meanwhile
    // drops the held parts early; a peer reading them after their memory was reused would find
    // the frame's checksum wrong and refuse it.
    if let Some(s) = splicer.filter(Splicer::holds) {
        tokio::spawn(async move {
            if let Some(sock) = w.local() {
                s.drain(sock).await;
            }
        });
    }
}

/// A frame's bulk parts (sent by reference), in order.
fn bulk_parts(f: &Frame) -> impl Iterator<Item = &bytes::Bytes> {
    std::iter::once(&f.data).chain(&f.data_more)
}

/// Writes `batch` in order, header and payload side by side so no payload is copied into a
/// buffer of ours. With a splicer, the bulk parts it takes are spliced and the rest (headers,
/// small parts, the messages after the bulk data) copied: the copied slices before a spliced
/// part go out in one vectored write first, so the bytes on the wire are the same either way.
async fn write_batch<W: SpliceSink>(
    w: &mut W,
    batch: &[Frame],
    headers: &[[u8; HEADER_BYTES]],
    mut splicer: Option<&mut Splicer>,
) -> std::io::Result<()> {
    // Most frames have a header and one or two parts; bulk data in pieces has more.
    let mut copied: Vec<IoSlice<'_>> = Vec::with_capacity(3 * batch.len());
    for (f, h) in batch.iter().zip(headers.iter()) {
        copied.push(IoSlice::new(h));
        for part in bulk_parts(f).filter(|part| !part.is_empty()) {
            let Some(s) = splicer.as_deref_mut().filter(|s| s.takes(part.len())) else {
                copied.push(IoSlice::new(part));
                continue;
            };
            write_all_vectored(w, &mut copied).await?;
            copied.clear();
            let Some(sock) = w.local() else { return Err(std::io::ErrorKind::Unsupported.into()) };
            s.send(sock, part).await?;
        }
        if !f.payload.is_empty() {
            copied.push(IoSlice::new(&f.payload));
        }
    }
    write_all_vectored(w, &mut copied).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(frames: &[Frame]) -> Vec<u8> {
        frames.iter().flat_map(Frame::encode).collect()
    }

    #[tokio::test]
    async fn an_aligned_reader_puts_large_payloads_on_a_block_boundary_and_small_ones_in_place() {
        let large: Vec<u8> = (0..ALIGNED_PAYLOAD_MIN_BYTES + 12_345).map(|i| (i * 7 % 251) as u8).collect();
        let small = b"a small payload".to_vec();
        let bytes = wire(&[Frame::new(16, 1, large.clone()), Frame::new(17, 2, small.clone())]);
        let mut r = &bytes[..];
        let mut header = [0u8; HEADER_BYTES];
        let first = read_frame(&mut r, &mut header, MAX_PAYLOAD_BYTES, Payloads::Aligned).await.unwrap().unwrap();
        assert_eq!((first.msg_type, first.request_id), (16, 1));
        assert!(first.payload.is_empty());
        assert_eq!(first.data.as_ptr().addr() % PAYLOAD_ALIGN_BYTES, 0);
        // Not a message payload: its known prefix is empty.
        assert_eq!(first.prefix_crc, Some((0, 0)));
        assert_eq!(first.into_bytes(), large);
        let second = read_frame(&mut r, &mut header, MAX_PAYLOAD_BYTES, Payloads::Aligned).await.unwrap().unwrap();
        assert!(second.data.is_empty());
        assert_eq!(second.payload, small);
        assert!(read_frame(&mut r, &mut header, MAX_PAYLOAD_BYTES, Payloads::Aligned).await.unwrap().is_none());

        // A plain reader keeps every payload in the vector.
        let mut r = &bytes[..];
        let plain = read_frame(&mut r, &mut header, MAX_PAYLOAD_BYTES, Payloads::Plain).await.unwrap().unwrap();
        assert!(plain.data.is_empty());
        assert_eq!(plain.payload, large);
    }

    #[tokio::test]
    async fn an_aligned_reader_knows_the_bulk_datas_checksum_and_a_forwarder_reuses_it() {
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        struct Header {
            name: String,
        }
        impl shoal_proto::Message for Header {
            const TYPE: u16 = 30;
        }
        let bulk: Vec<u8> = (0..200_000u32).map(|i| (i % 247) as u8).collect();
        let sent = shoal_proto::frame(5, &Header { name: "obj".into() }, bulk.clone());
        let bytes = wire(std::slice::from_ref(&sent));
        let mut r = &bytes[..];
        let mut header = [0u8; HEADER_BYTES];
        let got = read_frame(&mut r, &mut header, MAX_PAYLOAD_BYTES, Payloads::Aligned).await.unwrap().unwrap();
        let crc = shoal_util::crc32c(&bulk);
        assert_eq!(got.prefix_crc, Some((bulk.len(), crc)));
        assert!(got.clone().into_bytes() == sent.into_payload(), "the payload arrives whole");
        let (msg, data): (Header, _) = shoal_proto::decode_bytes(got.into_bytes()).unwrap();
        assert_eq!(msg.name, "obj");
        // Forwarded with the known checksum: the same header as computing it from the bytes.
        let tail = shoal_proto::encode(&Header { name: "replica".into() }, Vec::new());
        let fast = Frame::with_checked_data(31, 6, data.clone(), Some(crc), tail.clone());
        let slow = Frame::with_data(31, 6, data, tail);
        assert_eq!(fast.header(), slow.header());
    }

    #[tokio::test]
    async fn payloads_arriving_in_small_pieces_are_checked_and_split_alike() {
        #[derive(serde::Serialize, serde::Deserialize)]
        struct Header {
            name: String,
        }
        // A header too long to take back off the checksum goes the other way; both must agree.
        let bulk: Vec<u8> = (0..150_000u32).map(|i| (i % 241) as u8).collect();
        let short = framed(9, &Header { name: "o".into() }, &bulk);
        let long = framed(10, &Header { name: "n".repeat(UNAPPEND_MAX_BYTES + 10) }, &bulk);
        let bytes = wire(&[short, long, Frame::new(16, 11, vec![1; 5000])]);
        // The reader gets at most 1000 bytes per read.
        let (mut tx, mut rx) = tokio::io::duplex(1000);
        let writer = tokio::spawn(async move { tx.write_all(&bytes).await });
        let mut header = [0u8; HEADER_BYTES];
        let crc = shoal_util::crc32c(&bulk);
        for _ in 0..2 {
            let f = read_frame(&mut rx, &mut header, MAX_PAYLOAD_BYTES, Payloads::Aligned).await.unwrap().unwrap();
            assert_eq!(f.prefix_crc, Some((bulk.len(), crc)), "frame {}", f.request_id);
        }
        let small = read_frame(&mut rx, &mut header, MAX_PAYLOAD_BYTES, Payloads::Aligned).await.unwrap().unwrap();
        assert_eq!(small.payload, vec![1; 5000]);
        writer.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn an_aligned_reader_hands_over_every_whole_blocks_checksum_however_the_bytes_arrive() {
        // Payloads of whole blocks and with a partial last one, read in pieces of sizes that
        // cut blocks anywhere.
        for len in [ALIGNED_PAYLOAD_MIN_BYTES, ALIGNED_PAYLOAD_MIN_BYTES + 4096 * 3 + 77, 300_001] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 13 % 253) as u8 ^ (i >> 12) as u8).collect();
            let want = shoal_util::crc32c_blocks(&payload[..len / SUM_BLOCK_BYTES * SUM_BLOCK_BYTES], SUM_BLOCK_BYTES);
            for piece in [333, 4096, 7000, 65_536, 1 << 20] {
                let bytes = wire(&[Frame::new(16, 3, payload.clone())]);
                let (mut tx, mut rx) = tokio::io::duplex(piece);
                let writer = tokio::spawn(async move { tx.write_all(&bytes).await });
                let mut header = [0u8; HEADER_BYTES];
                let f = read_frame(&mut rx, &mut header, MAX_PAYLOAD_BYTES, Payloads::Aligned).await.unwrap().unwrap();
                let got = f.block_crcs.clone().expect("a large payload's block checksums");
                assert_eq!(got.as_slice(), &want[..], "{len} bytes in pieces of {piece}");
                assert!(f.into_bytes() == payload);
                writer.await.unwrap().unwrap();
            }
        }
        // A small payload has none (the reader did not compute them).
        let bytes = wire(&[Frame::new(16, 4, vec![1; 9000])]);
        let mut r = &bytes[..];
        let mut header = [0u8; HEADER_BYTES];
        let f = read_frame(&mut r, &mut header, MAX_PAYLOAD_BYTES, Payloads::Aligned).await.unwrap().unwrap();
        assert!(f.block_crcs.is_none());
    }

    fn framed<M: serde::Serialize>(request_id: u64, msg: &M, bulk: &[u8]) -> Frame {
        Frame::new(30, request_id, shoal_proto::encode(msg, bulk.to_vec()))
    }

    #[tokio::test]
    async fn an_aligned_reader_refuses_a_corrupt_or_cut_large_payload() {
        let mut bytes = wire(&[Frame::new(16, 9, vec![5u8; ALIGNED_PAYLOAD_MIN_BYTES])]);
        let mut header = [0u8; HEADER_BYTES];
        let cut = bytes.len() - 1;
        let mut r = &bytes[..cut];
        let err = read_frame(&mut r, &mut header, MAX_PAYLOAD_BYTES, Payloads::Aligned).await.unwrap_err();
        assert!(matches!(err, NetError::Io(_)), "{err:?}");
        bytes[HEADER_BYTES + 100] ^= 1;
        let mut r = &bytes[..];
        let err = read_frame(&mut r, &mut header, MAX_PAYLOAD_BYTES, Payloads::Aligned).await.unwrap_err();
        assert!(matches!(err, NetError::Frame(FrameError::PayloadChecksum { request_id: 9 })), "{err:?}");
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
    }

    #[tokio::test]
    async fn a_writer_splices_large_parts_to_a_local_peer_and_the_wire_is_unchanged() {
        let (a, mut b) = tokio::net::UnixStream::pair().unwrap();
        let (_, wr) = a.into_split();
        let large = bytes::Bytes::from(pattern(3 * shoal_splice::PIPE_BYTES + 4_321, 1));
        let frames = vec![
            // One large part starting off a page boundary, and a message after it.
            Frame::with_data(16, 1, large.slice(7..shoal_splice::SPLICE_MIN_BYTES + 70_000), b"after".to_vec()),
            Frame::new(16, 2, pattern(shoal_splice::SPLICE_MIN_BYTES * 2, 2)),
            // In parts: a small one (copied), then two large ones (spliced), one larger than the
            // pipe.
            Frame::with_data_parts(
                16,
                3,
                vec![
                    bytes::Bytes::from(pattern(100, 3)),
                    large.clone(),
                    bytes::Bytes::from(pattern(shoal_splice::SPLICE_MIN_BYTES, 4)),
                ],
                b"tail".to_vec(),
            ),
            Frame::new(16, 4, b"small".to_vec()),
            // More than a connection holds: the part past the bound is copied.
            Frame::with_data_parts(
                16,
                5,
                vec![bytes::Bytes::from(pattern(shoal_splice::HELD_MAX_BYTES - 1, 5)); 2],
                Vec::new(),
            ),
        ];
        let expected: Vec<u8> = frames.iter().flat_map(Frame::encode).collect();
        let (tx, rx) = mpsc::channel(8);
        let writer = tokio::spawn(writer_task(wr, rx, std::sync::Arc::new(Link::new())));
        let sender = tokio::spawn(async move {
            for f in frames {
                tx.send(f).await.unwrap();
            }
        });
        let mut got = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut b, &mut got).await.unwrap();
        sender.await.unwrap();
        writer.await.unwrap();
        assert_eq!(got.len(), expected.len());
        assert!(got == expected, "the spliced stream differs from the copied one");
    }
}
