//! MD5 for many uploads at once, in the lanes of one vector unit.
//!
//! S3 names an object by the MD5 of its bytes (its ETag), so the gateway hashes every byte it
//! is sent, and MD5 cannot be made faster for one stream: its steps form a serial chain. On a
//! 2-core machine that chain was a third of all CPU time under 16 concurrent 4 MiB PUTs
//! (docs/BENCHMARKS.md). Concurrent uploads are independent streams, though, and a vector unit
//! advances 8 (AVX2) or 16 (AVX-512) of them in about the time one takes ([`kernel`]).
//!
//! The [`Lanes`] thread gathers the pieces uploads submit and advances them together; a
//! [`StreamMd5`] is one upload's hash, keeping at most one piece in that thread while the next
//! piece arrives. Small pieces are hashed where they are (a hand-off costs more than hashing a
//! few blocks), as is everything on machines without a vector unit to share.

pub mod kernel;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use kernel::BLOCK_BYTES;

/// Pieces smaller than this are hashed by the caller rather than handed to the lanes thread.
pub const HAND_OFF_MIN_BYTES: usize = 16 * 1024;

/// Blocks one lane advances before the thread looks for newly submitted pieces: a short piece
/// joins the lanes within about this much work (8 KiB of every lane) rather than after the
/// longest piece in them ends.
const ROUND_BLOCKS: usize = 128;

/// Pieces waiting for a lane, at most; submitters wait beyond it.
const QUEUE_PIECES: usize = 64;

/// One submitted piece: a state to advance over whole blocks, and where its result goes.
struct Piece {
    state: [u32; 4],
    data: Bytes,
    done: oneshot::Sender<[u32; 4]>,
}

/// The thread that advances submitted pieces together.
pub struct Lanes {
    tx: mpsc::Sender<Piece>,
    /// Rounds that advanced more than one piece at once.
    shared_rounds: Arc<AtomicU64>,
}

impl Lanes {
    /// The process's lanes thread, started on first use; `None` where the CPU has no vector
    /// unit to share (then callers hash in place).
    pub fn shared() -> Option<&'static Lanes> {
        static SHARED: OnceLock<Option<Lanes>> = OnceLock::new();
        SHARED.get_or_init(Lanes::start).as_ref()
    }

    fn start() -> Option<Lanes> {
        let width = kernel::lane_count();
        if width < 2 {
            return None;
        }
        let (tx, rx) = mpsc::channel(QUEUE_PIECES);
        let shared_rounds = Arc::new(AtomicU64::new(0));
        let counted = shared_rounds.clone();
        let spawned = std::thread::Builder::new().name("md5-lanes".into()).spawn(move || run(rx, width, &counted));
        match spawned {
            Ok(_) => Some(Lanes { tx, shared_rounds }),
            Err(e) => {
                tracing::warn!(error = %e, "could not start the MD5 lanes thread: hashing in place");
                None
            }
        }
    }

    /// Rounds so far that advanced more than one piece at once.
    pub fn shared_rounds(&self) -> u64 {
        self.shared_rounds.load(Ordering::Relaxed)
    }
}

/// A piece in a lane: its state so far and how far into its data it is.
struct Active {
    piece: Piece,
    at_bytes: usize,
}

/// The lanes thread: takes pieces into up to `width` lanes, advances every lane by the same
/// number of blocks (the shortest remainder, at most [`ROUND_BLOCKS`]), answers the pieces that
/// ended, and takes more. Ends when every submitter is gone.
fn run(mut rx: mpsc::Receiver<Piece>, width: usize, shared_rounds: &AtomicU64) {
    let mut active: Vec<Active> = Vec::with_capacity(width);
    let mut states: Vec<[u32; 4]> = Vec::with_capacity(width);
    loop {
        if active.is_empty() {
            match rx.blocking_recv() {
                Some(piece) => active.push(Active { piece, at_bytes: 0 }),
                None => return,
            }
        }
        while active.len() < width {
            match rx.try_recv() {
                Ok(piece) => active.push(Active { piece, at_bytes: 0 }),
                Err(_) => break,
            }
        }
        let left_blocks = |a: &Active| (a.piece.data.len() - a.at_bytes) / BLOCK_BYTES;
        let round = active.iter().map(left_blocks).min().unwrap_or(0).min(ROUND_BLOCKS);
        let len = round * BLOCK_BYTES;
        states.clear();
        states.extend(active.iter().map(|a| a.piece.state));
        let slices: Vec<&[u8]> = active.iter().map(|a| &a.piece.data[a.at_bytes..a.at_bytes + len]).collect();
        kernel::compress_lanes(&mut states, &slices);
        if active.len() > 1 {
            shared_rounds.fetch_add(1, Ordering::Relaxed);
        }
        for (a, s) in active.iter_mut().zip(&states) {
            a.piece.state = *s;
            a.at_bytes += len;
        }
        // Answer the pieces that ended (a submitter that went away no longer wants its answer).
        let mut i = 0;
        while i < active.len() {
            if active[i].at_bytes == active[i].piece.data.len() {
                let done = active.swap_remove(i);
                let _ = done.piece.done.send(done.piece.state);
            } else {
                i += 1;
            }
        }
    }
}

/// The MD5 of one stream, fed piece by piece: whole blocks of large pieces go to the lanes
/// thread (one piece at a time, so it hashes while the caller receives the next), the rest are
/// hashed here.
pub struct StreamMd5 {
    lanes: Option<&'static Lanes>,
    state: [u32; 4],
    /// A piece's state in the lanes thread; `state` is stale until it answers.
    pending: Option<oneshot::Receiver<[u32; 4]>>,
    /// Bytes after the last whole block (fewer than a block).
    tail: Vec<u8>,
    len_bytes: u64,
}

impl Default for StreamMd5 {
    fn default() -> Self {
        StreamMd5::new()
    }
}

impl StreamMd5 {
    /// A hash over the shared lanes thread (or in place where there is none).
    pub fn new() -> StreamMd5 {
        StreamMd5::with_lanes(Lanes::shared())
    }

    /// A hash over `lanes`, or in place with `None`.
    pub fn with_lanes(lanes: Option<&'static Lanes>) -> StreamMd5 {
        StreamMd5 { lanes, state: kernel::INIT, pending: None, tail: Vec::with_capacity(BLOCK_BYTES), len_bytes: 0 }
    }

    /// Adds `piece` to the stream. Waits for the previous piece's hashing, if it is in the lanes
    /// thread, and returns once this one is hashed or handed off.
    pub async fn update(&mut self, piece: &Bytes) {
        self.settle().await;
        self.len_bytes += piece.len() as u64;
        let mut rest = &piece[..];
        if !self.tail.is_empty() {
            let room = (BLOCK_BYTES - self.tail.len()).min(rest.len());
            self.tail.extend_from_slice(&rest[..room]);
            rest = &rest[room..];
            if self.tail.len() < BLOCK_BYTES {
                return;
            }
            kernel::compress(&mut self.state, &self.tail);
            self.tail.clear();
        }
        let whole = rest.len() / BLOCK_BYTES * BLOCK_BYTES;
        let (blocks, after) = rest.split_at(whole);
        self.tail.extend_from_slice(after);
        match self.lanes {
            Some(lanes) if whole >= HAND_OFF_MIN_BYTES => {
                let start = piece.len() - rest.len();
                let (done, answer) = oneshot::channel();
                let handed = Piece { state: self.state, data: piece.slice(start..start + whole), done };
                match lanes.tx.send(handed).await {
                    Ok(()) => self.pending = Some(answer),
                    // The thread is gone (it never ends while a sender lives): hash here.
                    Err(mpsc::error::SendError(p)) => kernel::compress(&mut self.state, &p.data),
                }
            }
            _ => kernel::compress(&mut self.state, blocks),
        }
    }

    /// The digest of everything added.
    pub async fn finish(mut self) -> [u8; 16] {
        self.settle().await;
        kernel::finish(self.state, &self.tail, self.len_bytes)
    }

    /// Takes the state back from the lanes thread.
    async fn settle(&mut self) {
        if let Some(answer) = self.pending.take() {
            // The thread answers every piece it took; it cannot drop one while it runs, and it
            // runs while this process has a sender (`Lanes` lives in a static).
            self.state = answer.await.expect("the MD5 lanes thread answers every piece it takes");
        }
    }
}

#[cfg(test)]
mod tests {
    use md5::Digest;

    use super::kernel::tests::bytes;
    use super::*;

    /// Many streams at once through one lanes thread, each cut into pieces of its own odd sizes
    /// (some below the hand-off size, some not, few on a block boundary): every digest is the
    /// MD5 of its bytes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_streams_in_odd_pieces_get_their_own_md5() {
        let lanes = Lanes::start().map(|l| &*Box::leak(Box::new(l)));
        let mut tasks = Vec::new();
        for stream in 0..40u64 {
            tasks.push(tokio::spawn(async move {
                let data = bytes((stream as usize * 37_931) % (3 << 20), stream);
                let mut md5 = StreamMd5::with_lanes(lanes);
                let mut at = 0;
                let mut cut = stream as usize;
                while at < data.len() {
                    cut = (cut * 7919 + 13) % (200 * 1024);
                    let end = (at + cut).min(data.len());
                    md5.update(&Bytes::copy_from_slice(&data[at..end])).await;
                    at = end;
                }
                let expected: [u8; 16] = md5::Md5::digest(&data).into();
                assert_eq!(md5.finish().await, expected, "stream {stream} of {} bytes", data.len());
            }));
        }
        for t in tasks {
            t.await.expect("a stream's task");
        }
        if let Some(lanes) = lanes {
            assert!(lanes.shared_rounds() > 0, "no round advanced two streams together");
        }
    }

    #[tokio::test]
    async fn in_place_hashing_is_md5_too() {
        let data = bytes(1 << 20, 7);
        let mut md5 = StreamMd5::with_lanes(None);
        for piece in data.chunks(65_537) {
            md5.update(&Bytes::copy_from_slice(piece)).await;
        }
        assert_eq!(md5.finish().await, <[u8; 16]>::from(md5::Md5::digest(&data)));
    }
}
