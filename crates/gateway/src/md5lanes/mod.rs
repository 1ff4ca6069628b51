//! MD5 for many uploads at once, in the lanes of one vector unit.
//!
//! S3 names an object by the MD5 of its bytes (its ETag), so the gateway hashes every byte it
//! is sent, and MD5 cannot be made faster for one stream: its steps form a serial chain. On a
//! 2-core machine that chain was a third of all CPU time under 16 concurrent 4 MiB PUTs
//! (docs/BENCHMARKS.md). Concurrent uploads are independent streams, though, and a vector unit
//! advances 8 (AVX2) or 16 (AVX-512) of them in about the time one takes ([`kernel`]).
//!
//! The [`Lanes`] thread advances the pieces uploads hand it together; a [`StreamMd5`] is one
//! upload's hash. A round costs the same however few lanes it fills, so lanes must be kept full:
//!
//! - an upload never waits for its previous hand-off before taking in more body: what arrives
//!   meanwhile is kept (by reference, cut at block boundaries) and handed off as one piece once
//!   the previous one is answered, so a busy upload's lane is never left idle for want of data;
//! - the thread waits a little for more pieces before a round that would fill fewer than three
//!   quarters of its lanes, while no upload is waiting for an answer (an upload waits only at
//!   its end, or when it holds [`BACKLOG_MAX_BYTES`]): the waits add latency no one sees.
//!
//! Small amounts are hashed where they are (a hand-off costs more than hashing a few blocks), as
//! is everything on machines without a vector unit to share.

pub mod kernel;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use kernel::BLOCK_BYTES;

/// Less than this is hashed by the caller rather than handed to the lanes thread.
pub const HAND_OFF_MIN_BYTES: usize = 16 * 1024;

/// Bytes an upload keeps waiting for the thread, at most, before it waits for the thread's
/// answer instead of taking in more (they are the upload's own body pieces, held by reference).
pub const BACKLOG_MAX_BYTES: usize = 1 << 20;

/// Blocks one lane advances before the thread looks for newly submitted pieces: a short piece
/// joins the lanes within about this much work (8 KiB of every lane) rather than after the
/// longest piece in them ends.
const ROUND_BLOCKS: usize = 128;

/// Pieces waiting for a lane, at most; submitters wait beyond it.
const QUEUE_PIECES: usize = 64;

/// How long the thread sleeps, per step, to let more pieces arrive before a round that would
/// fill fewer than three quarters of the lanes (the kernel adds its timer slack, 50 µs by
/// default). A full round of [`ROUND_BLOCKS`] takes about 16 µs.
const GATHER_STEP: Duration = Duration::from_micros(50);

/// Steps the thread sleeps at most before one round.
const GATHER_STEPS: usize = 4;

/// One submitted piece: a state to advance over the blocks of `segments` in order (each a
/// whole number of blocks), and where its result goes.
struct Piece {
    state: [u32; 4],
    segments: Vec<Bytes>,
    done: oneshot::Sender<[u32; 4]>,
}

/// The thread that advances submitted pieces together.
pub struct Lanes {
    tx: mpsc::Sender<Piece>,
    /// Rounds that advanced more than one piece at once.
    shared_rounds: Arc<AtomicU64>,
    /// Submitters blocked on an answer right now: while any is, the thread does not wait for
    /// more pieces.
    waiting: Arc<AtomicUsize>,
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
        let waiting = Arc::new(AtomicUsize::new(0));
        let counted = shared_rounds.clone();
        let watched = waiting.clone();
        let spawned =
            std::thread::Builder::new().name("md5-lanes".into()).spawn(move || run(rx, width, &counted, &watched));
        match spawned {
            Ok(_) => Some(Lanes { tx, shared_rounds, waiting }),
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

/// A piece in a lane: its state so far and where in its segments it is.
struct Active {
    piece: Piece,
    segment: usize,
    at_bytes: usize,
}

impl Active {
    fn new(piece: Piece) -> Active {
        let mut a = Active { piece, segment: 0, at_bytes: 0 };
        a.skip_empty();
        a
    }

    /// Moves past exhausted (or empty) segments.
    fn skip_empty(&mut self) {
        while self.piece.segments.get(self.segment).is_some_and(|s| self.at_bytes == s.len()) {
            self.segment += 1;
            self.at_bytes = 0;
        }
    }

    fn ended(&self) -> bool {
        self.segment == self.piece.segments.len()
    }

    /// Whole blocks left in the current segment.
    fn blocks_in_segment(&self) -> usize {
        self.piece.segments.get(self.segment).map_or(0, |s| (s.len() - self.at_bytes) / BLOCK_BYTES)
    }
}

/// The lanes thread: takes pieces into up to `width` lanes (waiting a little for more, see
/// [`gather`]), advances every lane by the same number of blocks (the shortest remainder of a
/// current segment, at most [`ROUND_BLOCKS`]), answers the pieces that ended, and takes more.
/// Ends when every submitter is gone.
fn run(mut rx: mpsc::Receiver<Piece>, width: usize, shared_rounds: &AtomicU64, waiting: &AtomicUsize) {
    let mut active: Vec<Active> = Vec::with_capacity(width);
    let mut states: Vec<[u32; 4]> = Vec::with_capacity(width);
    loop {
        if active.is_empty() {
            match rx.blocking_recv() {
                Some(piece) => active.push(Active::new(piece)),
                None => return,
            }
        }
        gather(&mut rx, &mut active, width, waiting);
        answer_ended(&mut active);
        if active.is_empty() {
            continue;
        }
        debug_assert!(active.len() <= width, "a round has at most `width` pieces");
        let round = active.iter().map(Active::blocks_in_segment).min().unwrap_or(0).min(ROUND_BLOCKS);
        debug_assert!(round > 0, "every active piece has a block left in its current segment");
        let len = round * BLOCK_BYTES;
        states.clear();
        states.extend(active.iter().map(|a| a.piece.state));
        let slices: Vec<&[u8]> =
            active.iter().map(|a| &a.piece.segments[a.segment][a.at_bytes..a.at_bytes + len]).collect();
        kernel::compress_lanes(&mut states, &slices);
        if active.len() > 1 {
            shared_rounds.fetch_add(1, Ordering::Relaxed);
        }
        for (a, s) in active.iter_mut().zip(&states) {
            a.piece.state = *s;
            a.at_bytes += len;
            a.skip_empty();
        }
        answer_ended(&mut active);
    }
}

/// Answers the pieces that ended (a submitter that went away no longer wants its answer).
fn answer_ended(active: &mut Vec<Active>) {
    let mut i = 0;
    while i < active.len() {
        if active[i].ended() {
            let done = active.swap_remove(i);
            let _ = done.piece.done.send(done.piece.state);
        } else {
            i += 1;
        }
    }
}

/// Fills `active` from the queue, and while fewer than three quarters of the lanes would be used
/// and no submitter waits for an answer, sleeps up to [`GATHER_STEPS`] steps for more.
fn gather(rx: &mut mpsc::Receiver<Piece>, active: &mut Vec<Active>, width: usize, waiting: &AtomicUsize) {
    let take = |rx: &mut mpsc::Receiver<Piece>, active: &mut Vec<Active>| {
        while active.len() < width {
            match rx.try_recv() {
                Ok(piece) => active.push(Active::new(piece)),
                Err(_) => break,
            }
        }
    };
    take(rx, active);
    for _ in 0..GATHER_STEPS {
        if active.len() * 4 >= width * 3 || waiting.load(Ordering::Acquire) > 0 {
            return;
        }
        std::thread::sleep(GATHER_STEP);
        take(rx, active);
    }
}

/// Counts one submitter among the waiting while it lives.
struct WaitingGuard<'a>(&'a AtomicUsize);

impl<'a> WaitingGuard<'a> {
    fn new(count: &'a AtomicUsize) -> WaitingGuard<'a> {
        count.fetch_add(1, Ordering::AcqRel);
        WaitingGuard(count)
    }
}

impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The MD5 of one stream, fed piece by piece. Whole blocks are kept by reference (a block that
/// straddles two pieces is copied) and handed to the lanes thread as one piece whenever it has
/// answered the previous one; what is left at the end, and everything where there is no lanes
/// thread, is hashed here.
pub struct StreamMd5 {
    lanes: Option<&'static Lanes>,
    /// The state after everything handed off and answered (stale while `pending`).
    state: [u32; 4],
    /// The previous hand-off, not answered yet when last looked at.
    pending: Option<oneshot::Receiver<[u32; 4]>>,
    /// Whole blocks taken in and not handed off yet, in order.
    backlog: Vec<Bytes>,
    /// Bytes after the last whole block (fewer than a block).
    carry: Vec<u8>,
    len_bytes: u64,
}

impl Default for StreamMd5 {
    fn default() -> Self {
        StreamMd5::new()
    }
}

const ANSWERS: &str = "the MD5 lanes thread answers every piece it takes";

impl StreamMd5 {
    /// A hash over the shared lanes thread (or in place where there is none).
    pub fn new() -> StreamMd5 {
        StreamMd5::with_lanes(Lanes::shared())
    }

    /// A hash over `lanes`, or in place with `None`.
    pub fn with_lanes(lanes: Option<&'static Lanes>) -> StreamMd5 {
        StreamMd5 {
            lanes,
            state: kernel::INIT,
            pending: None,
            backlog: Vec::new(),
            carry: Vec::with_capacity(BLOCK_BYTES),
            len_bytes: 0,
        }
    }

    /// Adds `piece` to the stream. Returns at once unless the stream holds
    /// [`BACKLOG_MAX_BYTES`] for the lanes thread, which is then waited for.
    pub async fn update(&mut self, piece: &Bytes) {
        self.len_bytes += piece.len() as u64;
        let mut rest = piece.clone();
        if !self.carry.is_empty() {
            let room = (BLOCK_BYTES - self.carry.len()).min(rest.len());
            self.carry.extend_from_slice(&rest.split_to(room));
            if self.carry.len() < BLOCK_BYTES {
                return;
            }
            let bridge = Bytes::copy_from_slice(&self.carry);
            self.carry.clear();
            self.push_blocks(bridge);
        }
        let whole = rest.len() / BLOCK_BYTES * BLOCK_BYTES;
        self.carry.extend_from_slice(&rest[whole..]);
        rest.truncate(whole);
        self.push_blocks(rest);
        let Some(lanes) = self.lanes else {
            self.hash_backlog_here();
            return;
        };
        if self.poll_pending() {
            if self.backlog_bytes() >= HAND_OFF_MIN_BYTES {
                self.hand_off(lanes).await;
            }
        } else if self.backlog_bytes() >= BACKLOG_MAX_BYTES {
            self.settle().await;
            self.hand_off(lanes).await;
        }
    }

    /// The digest of everything added.
    pub async fn finish(mut self) -> [u8; 16] {
        self.settle().await;
        if let Some(lanes) = self.lanes
            && self.backlog_bytes() >= HAND_OFF_MIN_BYTES
        {
            self.hand_off(lanes).await;
            self.settle().await;
        }
        self.hash_backlog_here();
        kernel::finish(self.state, &self.carry, self.len_bytes)
    }

    fn push_blocks(&mut self, blocks: Bytes) {
        debug_assert!(blocks.len().is_multiple_of(BLOCK_BYTES), "the backlog holds whole blocks");
        if !blocks.is_empty() {
            self.backlog.push(blocks);
        }
    }

    /// Bytes in the backlog (summed each time: it is handed off by 1 MiB, a few hundred segments at
    /// most, one body piece and one bridge each).
    fn backlog_bytes(&self) -> usize {
        self.backlog.iter().map(Bytes::len).sum()
    }

    /// Hashes the backlog here (the state must be current: nothing pending).
    fn hash_backlog_here(&mut self) {
        debug_assert!(self.pending.is_none(), "hashing here needs the current state");
        for segment in self.backlog.drain(..) {
            kernel::compress(&mut self.state, &segment);
        }
    }

    /// Whether nothing is pending any more (taking the answer if it has come).
    fn poll_pending(&mut self) -> bool {
        let Some(answer) = self.pending.as_mut() else {
            return true;
        };
        match answer.try_recv() {
            Ok(state) => {
                self.state = state;
                self.pending = None;
                true
            }
            Err(oneshot::error::TryRecvError::Empty) => false,
            Err(oneshot::error::TryRecvError::Closed) => panic!("{ANSWERS}"),
        }
    }

    /// Hands the backlog to the lanes thread as one piece (nothing may be pending).
    async fn hand_off(&mut self, lanes: &'static Lanes) {
        debug_assert!(self.pending.is_none(), "one hand-off at a time");
        let (done, answer) = oneshot::channel();
        let segments = std::mem::take(&mut self.backlog);
        let handed = Piece { state: self.state, segments, done };
        match lanes.tx.send(handed).await {
            Ok(()) => self.pending = Some(answer),
            // The thread is gone (it never ends while a sender lives): hash here.
            Err(mpsc::error::SendError(p)) => {
                self.backlog = p.segments;
                self.hash_backlog_here();
            }
        }
    }

    /// Takes the state back from the lanes thread, counted among the waiting submitters while
    /// the answer is not there yet (so the thread does not hold a round back for company).
    async fn settle(&mut self) {
        if self.poll_pending() {
            return;
        }
        let Some(answer) = self.pending.take() else { return };
        let waiting = self.lanes.map(|l| WaitingGuard::new(&l.waiting));
        self.state = answer.await.expect(ANSWERS);
        drop(waiting);
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

    /// One stream through the lanes thread in pieces of every awkward size — single bytes,
    /// around a block, around the hand-off size, and large ones that pile up past the backlog
    /// bound while the thread works — is MD5 of its bytes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn awkward_piece_sizes_and_a_full_backlog_hash_right() {
        let lanes = Lanes::start().map(|l| &*Box::leak(Box::new(l)));
        let sizes = [1usize, 63, 64, 65, 127, 16 * 1024 - 1, 16 * 1024, 16 * 1024 + 1, 300 * 1024, 1 << 20, 3];
        let total: usize = sizes.iter().sum::<usize>() * 3;
        let data = bytes(total, 99);
        let mut md5 = StreamMd5::with_lanes(lanes);
        let mut at = 0;
        for size in sizes.iter().cycle().take(sizes.len() * 3) {
            md5.update(&Bytes::copy_from_slice(&data[at..at + size])).await;
            at += size;
        }
        assert_eq!(at, total);
        assert_eq!(md5.finish().await, <[u8; 16]>::from(md5::Md5::digest(&data)));
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
