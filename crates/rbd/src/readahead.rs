//! Read-ahead for sequential readers of an image.
//!
//! A reader that walks an image in order (a VM booting, `qemu-img convert`, `nbdcopy`, a backup,
//! fio's sequential loads) asks for one piece at a time, and every piece of an object goes to
//! that object's primary, one after the other: the other OSDs idle while one serves the stream.
//! Once a stream is seen (a few reads in a row, each starting where the last ended), the image
//! fetches the units after it — aligned `UNIT_BYTES` ranges of the image, so whole objects of
//! the default layout — in the background, several OSDs at once, and serves the stream's
//! reads from them without copying (slices of the fetched buffer).
//!
//! Coherence: a unit is served only if no write overlapping it began after its fetch was sent
//! (a write or zero removes the units it overlaps when it begins, and a fetch is kept only if no
//! write at all began between its plan and its record), and a fetch is planned only while no
//! write is running (so every write acknowledged before it is in what it reads). A read
//! concurrent with a write may see either, as NBD allows. The image keeps read-ahead only
//! where nobody else can change what it reads: a snapshot, or a writable image whose exclusive
//! lock this handle holds (and not once the lock is lost; see [`crate::Image::with_readahead`]).
//!
//! Bounded: at most `window_bytes` of units are held or being fetched (their memory), and a
//! failed fetch is forgotten (the read goes to the cluster as if there were no read-ahead).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use bytes::Bytes;
use futures::future::{BoxFuture, Shared};

/// The largest unit read ahead: an object of the default layout.
pub const UNIT_BYTES: u64 = 4 << 20;
/// The default window: the units held or being fetched ahead of the streams, at most.
pub const DEFAULT_WINDOW_BYTES: u64 = 16 << 20;
/// Reads in a row, each starting where the one before ended, that make a stream.
pub const STREAM_READS: u32 = 4;
/// Streams followed at once (several readers of one image, or one reader's several streams).
const STREAMS: usize = 8;

/// A unit's bytes as fetched, shared by every reader waiting for it; `None` if the fetch
/// failed (readers then go to the cluster themselves).
pub(crate) type Fetch = Shared<BoxFuture<'static, Option<Bytes>>>;

/// What a read should do, as the read-ahead state decided it.
pub(crate) struct Plan {
    /// The unit covering the whole read, fetched or being fetched, and where the read starts in
    /// it.
    pub serve: Option<(Fetch, usize)>,
    /// Units (their indexes) to fetch now: the caller starts them and hands them back through
    /// [`Readahead::started`], with `writes_begun`.
    pub fetch: Vec<u64>,
    /// Writes begun when the plan was made: a fetch is kept only if no write began since.
    pub writes_begun: u64,
}

pub(crate) struct Readahead {
    unit_bytes: u64,
    /// The units held at most (the window in units; at least one).
    max_units: usize,
    image_bytes: u64,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Where each followed stream's last read ended, and how many reads in a row led there;
    /// the most recent first.
    streams: VecDeque<(u64, u32)>,
    /// Units fetched or being fetched, by index (image offset / unit).
    units: BTreeMap<u64, Fetch>,
    /// Writes and zeros running now: no fetch starts while one runs.
    writes_running: u64,
    /// Writes and zeros begun so far (a fetch planned before one began is not kept).
    writes_begun: u64,
    counts: Counts,
}

/// What read-ahead did for a handle, since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Units whose fetch was started.
    pub units_fetched: u64,
    /// Reads served from a unit (no cluster operation of their own).
    pub reads_served: u64,
}

impl Readahead {
    /// Read-ahead for an image of `image_bytes` whose objects hold `object_bytes`, holding at
    /// most `window_bytes` (rounded down to whole units, at least one unit).
    pub fn new(image_bytes: u64, object_bytes: u64, window_bytes: u64) -> Readahead {
        let unit_bytes = object_bytes.clamp(1, UNIT_BYTES);
        let max_units = (window_bytes / unit_bytes).max(1) as usize;
        Readahead { unit_bytes, max_units, image_bytes, state: Mutex::new(State::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is consistent after every step (a panic in between loses nothing that
        // matters: at worst a unit that is then fetched again).
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The byte range of unit `index`, within the image.
    pub fn unit_range(&self, index: u64) -> (u64, u64) {
        let start = index * self.unit_bytes;
        (start, self.unit_bytes.min(self.image_bytes.saturating_sub(start)))
    }

    /// Notes a read of `len_bytes` at `offset` and decides how it is served and what to fetch.
    pub fn plan(&self, offset: u64, len_bytes: u64) -> Plan {
        let end = offset + len_bytes;
        let mut s = self.lock();
        // Follow the stream this read continues, or start one.
        let run = match s.streams.iter().position(|(e, _)| *e == offset) {
            Some(i) => {
                let (_, run) = s.streams.remove(i).unwrap_or((0, 0));
                run.saturating_add(1)
            }
            None => 1,
        };
        s.streams.push_front((end, run));
        s.streams.truncate(STREAMS);
        let first = offset / self.unit_bytes;
        let serve = if len_bytes > 0 && (end - 1) / self.unit_bytes == first {
            s.units.get(&first).map(|f| (f.clone(), (offset - first * self.unit_bytes) as usize))
        } else {
            None
        };
        let mut fetch = Vec::new();
        if run >= STREAM_READS && s.writes_running == 0 {
            // Units behind the stream are done with (another stream's units stay until the
            // window needs their room).
            let behind: Vec<u64> = s.units.range(..first).map(|(i, _)| *i).collect();
            let last = (end + self.unit_bytes * self.max_units as u64 - 1) / self.unit_bytes;
            let units_in_image = self.image_bytes.div_ceil(self.unit_bytes);
            let mut evictable = behind.into_iter();
            for index in (end.div_ceil(self.unit_bytes).max(first + 1))..=last.min(units_in_image.saturating_sub(1)) {
                if s.units.contains_key(&index) || fetch.contains(&index) {
                    continue;
                }
                if s.units.len() + fetch.len() >= self.max_units {
                    match evictable.next() {
                        Some(old) => {
                            s.units.remove(&old);
                        }
                        None => break,
                    }
                }
                fetch.push(index);
            }
        }
        debug_assert!(s.units.len() + fetch.len() <= self.max_units, "the window holds more than its units");
        Plan { serve, fetch, writes_begun: s.writes_begun }
    }

    /// Records the fetch of unit `index` that a plan made with `writes_begun` asked for, unless
    /// a write began since (the fetch, sent after the plan, may have reached the cluster before
    /// that write's operations and hold the bytes it replaced).
    pub fn started(&self, index: u64, fetch: Fetch, writes_begun: u64) {
        let mut s = self.lock();
        if s.writes_begun == writes_begun && s.writes_running == 0 && s.units.len() < self.max_units {
            s.units.insert(index, fetch);
            s.counts.units_fetched += 1;
        }
    }

    /// A read was served from a unit.
    pub fn served(&self) {
        self.lock().counts.reads_served += 1;
    }

    pub fn counts(&self) -> Counts {
        self.lock().counts
    }

    /// A unit whose fetch failed is forgotten, so the next read of it goes to the cluster.
    pub fn failed(&self, index: u64) {
        self.lock().units.remove(&index);
    }

    /// A write or zero of `len_bytes` at `offset` begins: the units it overlaps go, and no
    /// fetch starts until the returned guard is dropped (when the write has ended, however).
    pub fn write_begins(&self, offset: u64, len_bytes: u64) -> WriteGuard<'_> {
        let mut s = self.lock();
        s.writes_running += 1;
        s.writes_begun += 1;
        if len_bytes > 0 {
            let first = offset / self.unit_bytes;
            let last = (offset + len_bytes - 1) / self.unit_bytes;
            let gone: Vec<u64> = s.units.range(first..=last).map(|(i, _)| *i).collect();
            for i in gone {
                s.units.remove(&i);
            }
        }
        WriteGuard(self)
    }

    /// Forgets every unit (the handle can no longer trust what it holds: its lock is gone).
    pub fn clear(&self) {
        let mut s = self.lock();
        s.units.clear();
        s.streams.clear();
    }

    #[cfg(test)]
    fn held(&self) -> Vec<u64> {
        self.lock().units.keys().copied().collect()
    }
}

/// Held while a write runs (see [`Readahead::write_begins`]).
pub(crate) struct WriteGuard<'a>(&'a Readahead);

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        debug_assert!(s.writes_running > 0, "a write ended that never began");
        s.writes_running = s.writes_running.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    /// A fetch that is already done.
    fn ready(bytes: Option<Bytes>) -> Fetch {
        futures::future::ready(bytes).boxed().shared()
    }

    const MIB: u64 = 1 << 20;

    fn stream(ra: &Readahead, from: u64, reads: u64, len: u64) -> Vec<Plan> {
        (0..reads).map(|i| ra.plan(from + i * len, len)).collect()
    }

    #[test]
    fn a_stream_is_seen_after_reads_in_a_row_and_fetches_the_units_after_it() {
        let ra = Readahead::new(64 * MIB, 4 * MIB, 8 * MIB);
        let plans = stream(&ra, 0, STREAM_READS as u64, 512 << 10);
        assert!(plans[..STREAM_READS as usize - 1].iter().all(|p| p.fetch.is_empty()), "not a stream yet");
        // The fourth read ends at 2 MiB inside unit 0: units 1 and 2 (the window) are fetched.
        assert_eq!(plans.last().map(|p| p.fetch.clone()), Some(vec![1, 2]));
        let begun = plans.last().map_or(0, |p| p.writes_begun);
        for i in [1, 2] {
            ra.started(i, ready(Some(Bytes::from(vec![i as u8; (4 * MIB) as usize]))), begun);
        }
        // Entering unit 1: served from it, at the offset within it.
        let p = ra.plan(4 * MIB + (512 << 10), 512 << 10);
        let (fetch, at) = p.serve.expect("served from the unit");
        assert_eq!(at, 512 << 10);
        let bytes = fetch.now_or_never().flatten().expect("fetched");
        assert_eq!(bytes[0], 1, "unit 1's bytes");
    }

    #[test]
    fn random_reads_fetch_nothing() {
        let ra = Readahead::new(1 << 30, 4 * MIB, 16 * MIB);
        for i in 0..64u64 {
            let offset = (i * 7919 % 256) * MIB;
            let p = ra.plan(offset, 4096);
            assert!(p.fetch.is_empty() && p.serve.is_none(), "read {i} at {offset}");
        }
    }

    #[test]
    fn the_window_bounds_what_is_held_and_units_behind_the_stream_make_room() {
        let ra = Readahead::new(1 << 30, 4 * MIB, 8 * MIB);
        let mut held_max = 0;
        for i in 0..256u64 {
            let p = ra.plan(i * MIB, MIB);
            for u in p.fetch {
                ra.started(u, ready(Some(Bytes::from_static(b"x"))), p.writes_begun);
            }
            held_max = held_max.max(ra.held().len());
            // Past the first unit, what is held is the stream's unit and those ahead of it.
            assert!(i < 4 || ra.held().iter().all(|u| *u >= i / 4), "{:?} at {i}", ra.held());
        }
        assert_eq!(held_max, 2, "two units of 4 MiB in an 8 MiB window");
    }

    #[test]
    fn a_write_removes_the_units_it_overlaps_and_holds_fetches_back_until_it_ends() {
        let ra = Readahead::new(64 * MIB, 4 * MIB, 16 * MIB);
        let plans = stream(&ra, 0, STREAM_READS as u64, MIB);
        let fetched = plans.last().map(|p| p.fetch.clone()).unwrap_or_default();
        assert_eq!(fetched, vec![1, 2, 3, 4]);
        let begun = plans.last().map_or(0, |p| p.writes_begun);
        for u in &fetched {
            ra.started(*u, ready(Some(Bytes::from_static(b"old"))), begun);
        }
        {
            let _w = ra.write_begins(5 * MIB, 4 * MIB);
            assert_eq!(ra.held(), vec![3, 4], "units 1 and 2 overlap the write");
            // While it runs, the stream goes on but nothing is fetched, and a fetch that was
            // asked for before it began is not kept.
            let p = ra.plan(4 * MIB, MIB);
            assert!(p.fetch.is_empty());
            ra.started(7, ready(Some(Bytes::from_static(b"stale?"))), begun);
            assert!(!ra.held().contains(&7));
        }
        // A fetch planned before the write, recorded once the write has ended: not kept either
        // (it may have been read before the write's bytes landed).
        ra.started(8, ready(Some(Bytes::from_static(b"stale?"))), begun);
        assert!(!ra.held().contains(&8), "a fetch planned before a write began was kept");
        // Ended: fetching resumes.
        let p = ra.plan(5 * MIB, MIB);
        assert!(!p.fetch.is_empty(), "fetches resume once no write runs");
        let unit = p.fetch[0];
        ra.started(unit, ready(Some(Bytes::from_static(b"new"))), p.writes_begun);
        assert!(ra.held().contains(&unit));
    }
}
