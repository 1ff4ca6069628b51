//! Small requests on one object combined into one while an earlier one is on its way (decision
//! 0042): the group commit of index-like objects that many writers update at once.
//!
//! A bucket index partition takes two small requests per S3 write (a pending record, then the
//! guarded swap of the entry). Sent one by one, each costs the primary a request, a PG log entry,
//! a store transaction and, on a replicated pool, a replication round and a sync on every member.
//! [`Client::op_combined`] keeps at most one combined request per object on its way: what arrives
//! for the object once that one has been out for [`COMBINE_AFTER_US`] waits, and goes out as one
//! request (operations concatenated) as soon as the one before is answered; what arrives sooner
//! goes at once, alone, so an object whose OSD answers fast is never made to wait. Under one
//! writer nothing waits; under many on a slow trip, one round trip carries them all.
//!
//! Combining is only allowed where it cannot change what any request sees or does. The primary
//! checks a request's guards and answers its reads (xattrs and omap values) against the object as
//! it was before the request, then applies the writes in order. So two requests combined behave
//! exactly as if sent one after the other (in either order) when neither writes an xattr or omap
//! key the other reads, asserts or writes: [`Footprint`] checks that, and a request that touches
//! what one already taken writes (or the reverse) waits for the next round, in arrival order.
//! Only requests of guards, xattr and omap operations with at least one write are combined (a
//! request that only reads would see a missing object differently once another request's write
//! created it); every other request goes out alone through [`Client::op`].
//!
//! A combined request refused by the primary (a guard that does not hold, a busy OSD) changed
//! nothing, and the primary does not say whose operation refused it, so each of its requests is
//! then sent alone (all at once) and gets its own answer. A combined request that failed without a definite
//! answer (the operation timeout) may have been applied: every request in it gets that failure,
//! exactly as each would have alone.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use shoal_proto::ErrorCode;
use shoal_proto::osd::{ObjOp, OpOutput};
use tokio::sync::oneshot;

use crate::error::ClientError;
use crate::objecter::{Client, OpResult};

/// Most requests in one combined request.
pub const COMBINE_MAX_REQUESTS: usize = 64;

/// Most operations in one combined request (a request larger than this alone still goes alone).
pub const COMBINE_MAX_OPS: usize = 1024;

/// Most bytes of operations in one combined request (a request larger than this alone still goes
/// alone): far below a request's limit, so combining never makes a request the OSD refuses.
pub const COMBINE_MAX_BYTES: usize = 256 << 10;

/// Most requests waiting for one object; beyond it a request goes out alone at once (callers
/// bound their own concurrency; this only keeps a runaway caller from growing the queue).
pub const COMBINE_MAX_WAITING: usize = 4096;

/// A pool, an object in it, and whether the requests queued for it free space (decision 0045).
type ObjectKey = (String, String, bool);

/// The objects with a combined request on its way, and what waits for each.
pub(crate) struct Combiner {
    objects: Mutex<HashMap<ObjectKey, OnItsWay>>,
    /// How long a request must have been on its way before others wait for it, in microseconds.
    after_us: AtomicU64,
    combined_sent: AtomicU64,
    combined_requests: AtomicU64,
    combined_refused: AtomicU64,
}

impl Default for Combiner {
    fn default() -> Combiner {
        Combiner {
            objects: Mutex::default(),
            after_us: AtomicU64::new(default_after_us()),
            combined_sent: AtomicU64::default(),
            combined_requests: AtomicU64::default(),
            combined_refused: AtomicU64::default(),
        }
    }
}

/// What [`Client::op_combined`] did so far (since the client connected).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CombineStats {
    /// Combined requests sent (two or more requests each).
    pub combined_sent: u64,
    /// Requests answered from a combined request.
    pub combined_requests: u64,
    /// Combined requests the primary refused, whose requests were then sent alone.
    pub combined_refused: u64,
}

/// An object with a request on its way: when it was sent, and what waits for the next round.
struct OnItsWay {
    sent_at: std::time::Instant,
    waiting: VecDeque<Waiting>,
}

/// The default wait threshold: [`COMBINE_AFTER_US`], or `SHOAL_COMBINE_AFTER_US` (for measurements).
fn default_after_us() -> u64 {
    std::env::var("SHOAL_COMBINE_AFTER_US").ok().and_then(|v| v.parse().ok()).unwrap_or(COMBINE_AFTER_US)
}

/// Microseconds a request must have been on its way before later ones on its object wait for it:
/// long enough that the trip, not the wait, is the cost (measured in decision 0042: waiting
/// behind every request cost a RAM OSD's gateway more CPU than it saved the OSD).
pub const COMBINE_AFTER_US: u64 = 600;

/// A request waiting for its object's next round.
struct Waiting {
    ops: Vec<ObjOp>,
    /// Bytes the operations take encoded.
    size_bytes: usize,
    footprint: Footprint,
    answer: oneshot::Sender<Result<OpResult, ClientError>>,
}

/// The xattr names and omap keys a request reads or asserts, and those it writes, as 64-bit
/// hashes: two names that collide only make a request wait a round it need not have waited.
#[derive(Default, Debug)]
struct Footprint {
    read: Vec<u64>,
    written: Vec<u64>,
}

/// The hash of xattr `name` in a [`Footprint`] (a seed of its own, so no xattr meets an omap key).
fn xattr_id(name: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(name.as_bytes(), 1)
}

/// The hash of omap key `key` in a [`Footprint`].
fn key_id(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(key, 2)
}

impl Footprint {
    /// The footprint of `ops`, or `None` if they may not be combined: an operation other than
    /// guards, xattr and omap reads and writes of named keys, or no write at all.
    fn of(ops: &[ObjOp]) -> Option<Footprint> {
        let mut f = Footprint::default();
        for op in ops {
            match op {
                ObjOp::AssertXattr { name, .. } | ObjOp::GetXattr { name } => f.read.push(xattr_id(name)),
                ObjOp::SetXattr { name, .. } | ObjOp::RemoveXattr { name } => f.written.push(xattr_id(name)),
                ObjOp::AssertOmap { key, .. } => f.read.push(key_id(key)),
                ObjOp::OmapGet { keys } => f.read.extend(keys.iter().map(|k| key_id(k))),
                ObjOp::OmapSet { entries } => f.written.extend(entries.iter().map(|(k, _)| key_id(k))),
                ObjOp::OmapRemove { keys } => f.written.extend(keys.iter().map(|k| key_id(k))),
                _ => return None,
            }
        }
        (!f.written.is_empty()).then_some(f)
    }

    /// Whether this request may go in one request with those of `round`: it writes nothing they
    /// read, assert or write, and reads or asserts nothing they write.
    fn independent_of(&self, round: &RoundFootprint) -> bool {
        !self.written.iter().any(|h| round.read.contains(h) || round.written.contains(h))
            && !self.read.iter().any(|h| round.written.contains(h))
    }
}

/// The union of the footprints of a round's requests.
#[derive(Default)]
struct RoundFootprint {
    read: HashSet<u64, PassThrough>,
    written: HashSet<u64, PassThrough>,
}

impl RoundFootprint {
    fn absorb(&mut self, f: &Footprint) {
        self.read.extend(f.read.iter().copied());
        self.written.extend(f.written.iter().copied());
    }
}

/// Hashes a set of hashes by themselves (they are uniform already).
#[derive(Default, Clone, Copy)]
struct PassThrough;

impl std::hash::BuildHasher for PassThrough {
    type Hasher = PassThroughHasher;
    fn build_hasher(&self) -> PassThroughHasher {
        PassThroughHasher(0)
    }
}

struct PassThroughHasher(u64);

impl std::hash::Hasher for PassThroughHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only `u64`s are hashed here; anything else still hashes, just not as fast.
        self.0 = xxhash_rust::xxh3::xxh3_64_with_seed(bytes, self.0);
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Held by a request that went out alone because nothing was on its way to its object: when it
/// is answered or dropped, the requests that queued behind it are sent in rounds by a task of
/// their own, or the object's entry is removed if none did.
struct HandOn<'a> {
    client: &'a Client,
    key: Option<ObjectKey>,
}

impl Drop for HandOn<'_> {
    fn drop(&mut self) {
        let Some(key) = self.key.take() else { return };
        {
            let mut objects = self.client.combiner.objects.lock().unwrap_or_else(|p| p.into_inner());
            match objects.get(&key) {
                Some(on) if on.waiting.is_empty() => {
                    objects.remove(&key);
                    return;
                }
                Some(_) => {}
                None => return,
            }
        }
        // Only inside a runtime (a request is only ever sent from one); outside one, nothing can
        // have queued behind it either.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let client = self.client.clone();
            runtime.spawn(async move { client.run_rounds(key).await });
        }
    }
}

/// Takes the next round's requests from the front of `queue`, in arrival order: as many as fit
/// the limits, up to the first that is not independent of those taken (it leads the round after).
fn take_round(queue: &mut VecDeque<Waiting>) -> Vec<Waiting> {
    let mut round: Vec<Waiting> = Vec::new();
    let mut union = RoundFootprint::default();
    let mut ops = 0usize;
    let mut size_bytes = 0usize;
    while let Some(next) = queue.front() {
        let fits = round.is_empty()
            || (round.len() < COMBINE_MAX_REQUESTS
                && ops + next.ops.len() <= COMBINE_MAX_OPS
                && size_bytes + next.size_bytes <= COMBINE_MAX_BYTES
                && next.footprint.independent_of(&union));
        if !fits {
            break;
        }
        let Some(next) = queue.pop_front() else { break };
        ops += next.ops.len();
        size_bytes += next.size_bytes;
        union.absorb(&next.footprint);
        round.push(next);
    }
    round
}

/// Whether a failure of a combined request is definite: the primary refused it, so nothing of it
/// was applied. Timeouts and degraded answers after the last resend are not (it may have been).
fn refused(e: &ClientError) -> bool {
    matches!(e, ClientError::Remote(r) if !matches!(r.code, ErrorCode::Timeout | ErrorCode::Degraded))
}

/// The failure of a combined request, for one of its requests.
fn share_failure(e: &ClientError) -> ClientError {
    match e {
        ClientError::Remote(r) => ClientError::Remote(r.clone()),
        ClientError::Timeout(ms) => ClientError::Timeout(*ms),
        ClientError::Expired => ClientError::Expired,
        ClientError::UnknownPool(p) => ClientError::UnknownPool(p.clone()),
        ClientError::NoActing { pool, pg } => ClientError::NoActing { pool: pool.clone(), pg: pg.clone() },
        other => ClientError::BadReply(format!("combined request failed: {other}")),
    }
}

impl Client {
    /// Sets how long a request must have been on its way before later ones on its object wait
    /// for it ([`COMBINE_AFTER_US`] by default); 0 makes every request wait behind the one on its
    /// way (tests use it to make combining certain).
    pub fn set_combine_after(&self, after: std::time::Duration) {
        let us = u64::try_from(after.as_micros()).unwrap_or(u64::MAX);
        self.combiner.after_us.store(us, Ordering::Relaxed);
    }

    /// Counts of what [`Client::op_combined`] combined.
    pub fn combine_stats(&self) -> CombineStats {
        let c = &self.combiner;
        CombineStats {
            combined_sent: c.combined_sent.load(Ordering::Relaxed),
            combined_requests: c.combined_requests.load(Ordering::Relaxed),
            combined_refused: c.combined_refused.load(Ordering::Relaxed),
        }
    }

    /// [`Client::op`] for a request without data that may share its trip with others on the same
    /// object (see the module's documentation for when it does). The answer, outputs included,
    /// is the one the request would have had sent alone at some moment between this call and its
    /// return; durability is [`Client::op`]'s.
    pub async fn op_combined(&self, pool: &str, object: &str, ops: Vec<ObjOp>) -> Result<OpResult, ClientError> {
        let Some(footprint) = Footprint::of(&ops) else {
            return self.op(pool, object, ops, Vec::new()).await;
        };
        // Requests made to free space (decision 0045) combine only with each other: the mark is
        // per request, and a combined request carries one.
        let key = (pool.to_string(), object.to_string(), crate::freeing::is_freeing_space());
        let after = std::time::Duration::from_micros(self.combiner.after_us.load(Ordering::Relaxed));
        // What to do is decided under the lock, and done after it is released.
        enum Then {
            Wait(oneshot::Receiver<Result<OpResult, ClientError>>),
            Lead(Vec<ObjOp>),
            Alone(Vec<ObjOp>),
        }
        let then = {
            let mut objects = self.combiner.objects.lock().unwrap_or_else(|p| p.into_inner());
            match objects.get_mut(&key) {
                Some(on) if on.waiting.len() < COMBINE_MAX_WAITING && on.sent_at.elapsed() >= after => {
                    let (answer, answered) = oneshot::channel();
                    let size_bytes = crate::objecter::ops_header_bytes(object, &ops);
                    on.waiting.push_back(Waiting { ops, size_bytes, footprint, answer });
                    Then::Wait(answered)
                }
                Some(_) => Then::Alone(ops),
                None => {
                    let on = OnItsWay { sent_at: std::time::Instant::now(), waiting: VecDeque::new() };
                    objects.insert(key.clone(), on);
                    Then::Lead(ops)
                }
            }
        };
        match then {
            Then::Wait(answered) => answered
                .await
                .unwrap_or_else(|_| Err(ClientError::BadReply("combined request dropped unanswered".into()))),
            Then::Alone(ops) => self.op(pool, object, ops, Vec::new()).await,
            Then::Lead(ops) => {
                // Nothing was on its way: this request goes at once, alone, from the caller's own
                // task. What queues meanwhile goes in rounds of a task of its own, started when
                // this one is answered — or dropped, so a caller that stops waiting (a dropped
                // HTTP request) never leaves its object's queue without a leader.
                let hand_on = HandOn { client: self, key: Some(key) };
                let result = self.op(pool, object, ops, Vec::new()).await;
                drop(hand_on);
                result
            }
        }
    }

    /// Sends the rounds queued for `key`'s object, one after the other, until none is left (its
    /// entry is then removed, under the same lock that queues).
    async fn run_rounds(&self, key: ObjectKey) {
        loop {
            let round = {
                let mut objects = self.combiner.objects.lock().unwrap_or_else(|p| p.into_inner());
                let Some(on) = objects.get_mut(&key) else { return };
                let round = take_round(&mut on.waiting);
                on.sent_at = std::time::Instant::now();
                if round.is_empty() {
                    objects.remove(&key);
                    return;
                }
                round
            };
            // This task was spawned, so outside its callers' scope: it carries their mark over.
            crate::freeing::scoped(key.2, self.send_round(&key.0, &key.1, round)).await;
        }
    }

    /// Sends one round: alone if it holds one request, else combined, falling back to each
    /// request alone if the primary refused the combination.
    async fn send_round(&self, pool: &str, object: &str, round: Vec<Waiting>) {
        if round.len() == 1 {
            for w in round {
                let _ = w.answer.send(self.op(pool, object, w.ops, Vec::new()).await);
            }
            return;
        }
        let counts: Vec<usize> = round.iter().map(|w| w.ops.len()).collect();
        let total: usize = counts.iter().sum();
        // Copied, not moved: a refused combination sends each request's own operations again.
        let mut ops: Vec<ObjOp> = Vec::with_capacity(total);
        for w in &round {
            ops.extend(w.ops.iter().cloned());
        }
        self.combiner.combined_sent.fetch_add(1, Ordering::Relaxed);
        match self.op(pool, object, ops, Vec::new()).await {
            Ok(result) if result.outputs.len() == total => {
                self.combiner.combined_requests.fetch_add(round.len() as u64, Ordering::Relaxed);
                debug_assert!(result.data.is_empty(), "combined requests read no data");
                let mut outputs = result.outputs.into_iter();
                for (w, n) in round.into_iter().zip(counts) {
                    let mine: Vec<OpOutput> = outputs.by_ref().take(n).collect();
                    let _ = w.answer.send(Ok(OpResult { outputs: mine, data: Vec::new() }));
                }
            }
            Ok(result) => {
                let e =
                    ClientError::BadReply(format!("{total} operations answered with {} outputs", result.outputs.len()));
                for w in round {
                    let _ = w.answer.send(Err(share_failure(&e)));
                }
            }
            Err(e) if refused(&e) => {
                // Each alone, all at once (as they were before they were combined); the next
                // round waits for all of them, so a later request never overtakes one of these.
                self.combiner.combined_refused.fetch_add(1, Ordering::Relaxed);
                let mut alone = tokio::task::JoinSet::new();
                let marked = crate::freeing::is_freeing_space();
                for w in round {
                    let (client, pool, object) = (self.clone(), pool.to_string(), object.to_string());
                    alone.spawn(crate::freeing::scoped(marked, async move {
                        let _ = w.answer.send(client.op(&pool, &object, w.ops, Vec::new()).await);
                    }));
                }
                while alone.join_next().await.is_some() {}
            }
            Err(e) => {
                for w in round {
                    let _ = w.answer.send(Err(share_failure(&e)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(key: &[u8]) -> ObjOp {
        ObjOp::OmapSet { entries: vec![(key.to_vec(), b"v".to_vec())] }
    }

    /// Whether requests with footprints `a` and `b` may share a request (checked both ways).
    fn independent(a: &Footprint, b: &Footprint) -> bool {
        let (mut ra, mut rb) = (RoundFootprint::default(), RoundFootprint::default());
        ra.absorb(a);
        rb.absorb(b);
        let ab = a.independent_of(&rb);
        assert_eq!(ab, b.independent_of(&ra), "independence is symmetric");
        ab
    }

    fn waiting(ops: Vec<ObjOp>) -> Waiting {
        let footprint = Footprint::of(&ops).expect("combinable");
        let size_bytes = crate::objecter::ops_header_bytes("o", &ops);
        Waiting { ops, size_bytes, footprint, answer: oneshot::channel().0 }
    }

    #[test]
    fn only_requests_of_guards_and_named_keys_that_write_are_combined() {
        let cases: Vec<(Vec<ObjOp>, bool)> = vec![
            (vec![set(b"a")], true),
            (vec![ObjOp::AssertXattr { name: "x".into(), value: None }, ObjOp::RemoveXattr { name: "y".into() }], true),
            (vec![ObjOp::OmapGet { keys: vec![b"a".to_vec()] }], false),
            (vec![], false),
            (vec![set(b"a"), ObjOp::OmapList { after: None, max: 1 }], false),
            (vec![set(b"a"), ObjOp::Remove], false),
            (vec![ObjOp::WriteFull { len_bytes: 0 }], false),
        ];
        for (ops, want) in cases {
            assert_eq!(Footprint::of(&ops).is_some(), want, "{ops:?}");
        }
    }

    #[test]
    fn requests_that_touch_what_another_writes_are_not_combined() {
        let a = Footprint::of(&[ObjOp::AssertOmap { key: b"k".to_vec(), value: None }, set(b"p1")]).unwrap();
        let b = Footprint::of(&[ObjOp::OmapGet { keys: vec![b"k".to_vec()] }, set(b"p2")]).unwrap();
        assert!(independent(&a, &b), "both only read k");
        let c = Footprint::of(&[set(b"k")]).unwrap();
        assert!(!independent(&a, &c));
        assert!(!independent(&b, &c));
        let d = Footprint::of(&[ObjOp::OmapRemove { keys: vec![b"p1".to_vec()] }]).unwrap();
        assert!(!independent(&a, &d), "write meets write");
        let x = Footprint::of(&[ObjOp::AssertXattr { name: "live".into(), value: None }, set(b"q")]).unwrap();
        let y = Footprint::of(&[ObjOp::RemoveXattr { name: "live".into() }]).unwrap();
        assert!(!independent(&x, &y));
        let z = Footprint::of(&[ObjOp::AssertXattr { name: "live".into(), value: None }, set(b"r")]).unwrap();
        assert!(independent(&x, &z), "guards on one xattr do not conflict");
        let xattr_k = Footprint::of(&[ObjOp::SetXattr { name: "k".into(), value: vec![] }]).unwrap();
        assert!(independent(&xattr_k, &c), "an xattr never meets an omap key of the same name");
    }

    #[test]
    fn a_round_stops_at_the_first_request_that_conflicts_and_keeps_arrival_order() {
        let mut q: VecDeque<Waiting> = VecDeque::new();
        q.push_back(waiting(vec![set(b"a")]));
        q.push_back(waiting(vec![set(b"b")]));
        q.push_back(waiting(vec![ObjOp::AssertOmap { key: b"a".to_vec(), value: None }, set(b"c")]));
        q.push_back(waiting(vec![set(b"d")]));
        let first = take_round(&mut q);
        assert_eq!(first.len(), 2);
        assert_eq!(q.len(), 2);
        let second = take_round(&mut q);
        assert_eq!(second.len(), 2, "the conflicting one leads the next round, with what fits after it");
        assert!(q.is_empty());
        assert!(take_round(&mut q).is_empty());
    }

    #[test]
    fn a_round_is_bounded_in_requests_and_operations() {
        let mut q: VecDeque<Waiting> =
            (0..(COMBINE_MAX_REQUESTS + 5)).map(|i| waiting(vec![set(format!("k{i}").as_bytes())])).collect();
        assert_eq!(take_round(&mut q).len(), COMBINE_MAX_REQUESTS);
        assert_eq!(take_round(&mut q).len(), 5);
        let big = |i: usize| waiting((0..600).map(|j| set(format!("{i}.{j}").as_bytes())).collect());
        let mut q: VecDeque<Waiting> = (0..3).map(big).collect();
        assert_eq!(take_round(&mut q).len(), 1, "two of 600 operations exceed the limit");
        let wide = |i: usize| waiting(vec![ObjOp::OmapSet { entries: vec![(vec![i as u8], vec![0; 100 << 10])] }]);
        let mut q: VecDeque<Waiting> = (0..4).map(wide).collect();
        assert_eq!(take_round(&mut q).len(), 2, "three of 100 KiB exceed the byte limit");
        let mut lone: VecDeque<Waiting> =
            VecDeque::from(vec![waiting((0..2000).map(|j| set(&[j as u8, (j >> 8) as u8])).collect())]);
        assert_eq!(take_round(&mut lone).len(), 1, "a request over the limit alone still goes");
    }
}
