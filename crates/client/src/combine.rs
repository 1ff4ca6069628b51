//! Small requests on one object combined into one while an earlier one is on its way (decision
//! 0042): the group commit of index-like objects that many writers update at once.
//!
//! A bucket index partition takes two small requests per S3 write (a pending record, then the
//! guarded swap of the entry). Sent one by one, each costs the primary a request, a PG log entry,
//! a store transaction and, on a replicated pool, a replication round and a sync on every member.
//! [`Client::op_combined`] keeps at most one request per object on its way: what arrives for the
//! object meanwhile waits, and goes out as one request (operations concatenated) as soon as the
//! one before is answered. Under one writer nothing waits; under many, one round trip carries
//! them all.
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
//! then sent alone and gets its own answer. A combined request that failed without a definite
//! answer (the operation timeout) may have been applied: every request in it gets that failure,
//! exactly as each would have alone.

use std::collections::hash_map::Entry;
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

/// The objects with a combined request on its way, and what waits for each.
#[derive(Default)]
pub(crate) struct Combiner {
    objects: Mutex<HashMap<(String, String), VecDeque<Waiting>>>,
    combined_sent: AtomicU64,
    combined_requests: AtomicU64,
    combined_refused: AtomicU64,
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

/// A request waiting for its object's next round.
struct Waiting {
    ops: Vec<ObjOp>,
    /// Bytes the operations take encoded.
    size_bytes: usize,
    footprint: Footprint,
    answer: oneshot::Sender<Result<OpResult, ClientError>>,
}

/// The xattr names and omap keys a request reads or asserts, and those it writes.
#[derive(Default, Debug)]
struct Footprint {
    xattrs_read: HashSet<String>,
    xattrs_written: HashSet<String>,
    keys_read: HashSet<Vec<u8>>,
    keys_written: HashSet<Vec<u8>>,
}

impl Footprint {
    /// The footprint of `ops`, or `None` if they may not be combined: an operation other than
    /// guards, xattr and omap reads and writes of named keys, or no write at all.
    fn of(ops: &[ObjOp]) -> Option<Footprint> {
        let mut f = Footprint::default();
        let mut writes = false;
        for op in ops {
            match op {
                ObjOp::AssertXattr { name, .. } | ObjOp::GetXattr { name } => {
                    f.xattrs_read.insert(name.clone());
                }
                ObjOp::SetXattr { name, .. } | ObjOp::RemoveXattr { name } => {
                    f.xattrs_written.insert(name.clone());
                    writes = true;
                }
                ObjOp::AssertOmap { key, .. } => {
                    f.keys_read.insert(key.clone());
                }
                ObjOp::OmapGet { keys } => f.keys_read.extend(keys.iter().cloned()),
                ObjOp::OmapSet { entries } => {
                    f.keys_written.extend(entries.iter().map(|(k, _)| k.clone()));
                    writes = true;
                }
                ObjOp::OmapRemove { keys } => {
                    f.keys_written.extend(keys.iter().cloned());
                    writes = true;
                }
                _ => return None,
            }
        }
        writes.then_some(f)
    }

    /// Whether a request with this footprint and one with `other` may go in one request: neither
    /// writes what the other reads, asserts or writes.
    fn independent_of(&self, other: &Footprint) -> bool {
        let meets = |written: &HashSet<String>, f: &Footprint| {
            written.iter().any(|n| f.xattrs_read.contains(n) || f.xattrs_written.contains(n))
        };
        let meets_keys = |written: &HashSet<Vec<u8>>, f: &Footprint| {
            written.iter().any(|k| f.keys_read.contains(k) || f.keys_written.contains(k))
        };
        !meets(&self.xattrs_written, other)
            && !meets(&other.xattrs_written, self)
            && !meets_keys(&self.keys_written, other)
            && !meets_keys(&other.keys_written, self)
    }

    /// Adds `other` to this footprint (the union of a round's requests).
    fn absorb(&mut self, other: &Footprint) {
        self.xattrs_read.extend(other.xattrs_read.iter().cloned());
        self.xattrs_written.extend(other.xattrs_written.iter().cloned());
        self.keys_read.extend(other.keys_read.iter().cloned());
        self.keys_written.extend(other.keys_written.iter().cloned());
    }
}

/// Takes the next round's requests from the front of `queue`, in arrival order: as many as fit
/// the limits, up to the first that is not independent of those taken (it leads the round after).
fn take_round(queue: &mut VecDeque<Waiting>) -> Vec<Waiting> {
    let mut round: Vec<Waiting> = Vec::new();
    let mut union = Footprint::default();
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
        let key = (pool.to_string(), object.to_string());
        let (answer, answered) = oneshot::channel();
        let size_bytes = crate::objecter::ops_header_bytes(object, &ops);
        let waiting = Waiting { ops, size_bytes, footprint, answer };
        // What to do is decided under the lock, and done after it is released.
        enum Then {
            Wait,
            Lead(Waiting),
            Alone(Waiting),
        }
        let then = {
            let mut objects = self.combiner.objects.lock().unwrap_or_else(|p| p.into_inner());
            match objects.entry(key.clone()) {
                Entry::Occupied(mut q) if q.get().len() < COMBINE_MAX_WAITING => {
                    q.get_mut().push_back(waiting);
                    Then::Wait
                }
                Entry::Occupied(_) => Then::Alone(waiting),
                Entry::Vacant(v) => {
                    v.insert(VecDeque::new());
                    Then::Lead(waiting)
                }
            }
        };
        let lead = match then {
            Then::Wait => None,
            Then::Lead(w) => Some(w),
            Then::Alone(w) => return self.op(pool, object, w.ops, Vec::new()).await,
        };
        if let Some(first) = lead {
            // The rounds run in a task of their own, so a caller that stops waiting (a dropped
            // HTTP request) never leaves its object's queue without a leader.
            let client = self.clone();
            tokio::spawn(async move { client.run_rounds(key, vec![first]).await });
        }
        answered.await.unwrap_or_else(|_| Err(ClientError::BadReply("combined request dropped unanswered".into())))
    }

    /// Sends `round`, answers its requests, then the rounds that queued meanwhile, until none is
    /// left for the object (its entry is then removed, under the same lock that queues).
    async fn run_rounds(&self, key: (String, String), mut round: Vec<Waiting>) {
        loop {
            self.send_round(&key.0, &key.1, round).await;
            let mut objects = self.combiner.objects.lock().unwrap_or_else(|p| p.into_inner());
            let Some(queue) = objects.get_mut(&key) else { return };
            round = take_round(queue);
            if round.is_empty() {
                objects.remove(&key);
                return;
            }
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
        let ops: Vec<ObjOp> = round.iter().flat_map(|w| w.ops.iter().cloned()).collect();
        let total = ops.len();
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
                for w in round {
                    let (client, pool, object) = (self.clone(), pool.to_string(), object.to_string());
                    alone.spawn(async move {
                        let _ = w.answer.send(client.op(&pool, &object, w.ops, Vec::new()).await);
                    });
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

    fn waiting(ops: Vec<ObjOp>) -> Waiting {
        let footprint = Footprint::of(&ops).expect("combinable");
        let size_bytes = crate::objecter::ops_header_bytes("o", &ops);
        Waiting { ops, size_bytes, footprint, answer: oneshot::channel().0 }
    }

    #[test]
    fn only_requests_of_guards_and_named_keys_that_write_are_combined() {
        assert!(Footprint::of(&[set(b"a")]).is_some());
        assert!(Footprint::of(&[ObjOp::OmapGet { keys: vec![b"a".to_vec()] }]).is_none(), "reads only");
        assert!(Footprint::of(&[]).is_none());
        assert!(Footprint::of(&[set(b"a"), ObjOp::OmapList { after: None, max: 1 }]).is_none());
        assert!(Footprint::of(&[set(b"a"), ObjOp::Remove]).is_none());
        assert!(Footprint::of(&[ObjOp::WriteFull { len_bytes: 0 }]).is_none());
    }

    #[test]
    fn requests_that_touch_what_another_writes_are_not_combined() {
        let a = Footprint::of(&[ObjOp::AssertOmap { key: b"k".to_vec(), value: None }, set(b"p1")]).unwrap();
        let b = Footprint::of(&[ObjOp::OmapGet { keys: vec![b"k".to_vec()] }, set(b"p2")]).unwrap();
        assert!(a.independent_of(&b), "both only read k");
        let c = Footprint::of(&[set(b"k")]).unwrap();
        assert!(!a.independent_of(&c) && !c.independent_of(&a));
        assert!(!b.independent_of(&c));
        let d = Footprint::of(&[ObjOp::OmapRemove { keys: vec![b"p1".to_vec()] }]).unwrap();
        assert!(!a.independent_of(&d), "write meets write");
        let x = Footprint::of(&[ObjOp::AssertXattr { name: "live".into(), value: None }, set(b"q")]).unwrap();
        let y = Footprint::of(&[ObjOp::RemoveXattr { name: "live".into() }]).unwrap();
        assert!(!x.independent_of(&y) && !y.independent_of(&x));
        let z = Footprint::of(&[ObjOp::AssertXattr { name: "live".into(), value: None }, set(b"r")]).unwrap();
        assert!(x.independent_of(&z), "guards on one xattr do not conflict");
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
