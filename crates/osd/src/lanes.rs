//! The order in which the OSD's worker handles its events: client I/O before recovery.
//!
//! The worker handles events in batches and syncs the store once per batch. In arrival order, a
//! client write that arrives behind recovery work waits for all of it: the pushes of backfill
//! chunks from every primary backfilling this OSD, the primary's own chunk reads, and the syncs
//! of all that data (measured: 4 KiB writes took 130–310 ms at the median during a backfill,
//! against 1.5 ms when quiet). So the worker takes *foreground* events (client operations,
//! replicated writes and their replies) first, and *background* events (recovery and backfill
//! pushes and pulls, and the answers to them) one per batch, each costing at most one chunk;
//! of those, first the one a waiting client event needs (its own PG's).
//!
//! What may not be reordered is not. A foreground event never passes a background event of its
//! own PG whose [`Scope`] covers its object: a backfill chunk precedes the writes to the names in
//! its range on the primary's ordered link, and a recovery push or pull the writes to its
//! objects, and the replica must apply them in that order. Writes to other names do not touch
//! what such a push touches (its objects, their companions, the range it cleans up; the PG log is
//! written by writes only), so they may go first, as they would have if the primary had sent the
//! push a moment later. Each PG's foreground events keep their order among themselves: once one
//! is held back, so are the PG's later ones. Answers to this OSD's own pushes and pulls hold
//! nothing back: no link orders them against client I/O to begin with (each is fed by its own
//! task as it completes). Ticks come from a local timer, so no order against other events was
//! ever promised: they pass background work (or a tick would make all of it go at once, unpaced,
//! ahead of the client I/O queued behind it) and go in a batch of their own. Every other event
//! (maps, peering, scrub, listings, commands) is a barrier that nothing passes and that passes
//! nothing.

use std::collections::{HashMap, HashSet, VecDeque};

use shoal_map::PgId;
use shoal_proto::Message;
use shoal_proto::osd::{PgPull, PgPush, PgPushScope};

use crate::core::{Event, PeerCall};
use crate::snaps::COMPANION_SEP;

/// Events held by the worker at most, waiting for their turn (beyond them, the bounded channel
/// in front of the worker holds senders back).
pub const PENDING_MAX_EVENTS: usize = 1024;
/// Bytes of bulk data held by the worker at most.
pub const PENDING_MAX_BYTES: usize = 64 << 20;

/// How an event is ordered against others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lane {
    /// Client I/O; `Some(pg)` keeps its order against that PG's background work in [`Scope`].
    Foreground(Option<PgId>),
    /// Recovery and backfill work of one PG, and the objects of it the PG's client I/O may not
    /// pass.
    Background(PgId, Scope),
    /// A tick: ordered only against other ticks and barriers.
    Timer,
    /// Ordered against everything.
    Barrier,
}

/// The objects of its PG a background event holds the PG's client I/O back for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// The names in `(after, upto]` (`upto` `None`: to the end), as a backfill chunk or part
    /// covers them.
    Range { after: Option<String>, upto: Option<String> },
    /// These objects and their companions (a recovery push, a pull).
    Objects(Vec<String>),
    /// None (answers to this OSD's own pushes and pulls).
    Nothing,
}

impl Scope {
    /// Whether client I/O on `object` (a head; its companions move with it) must wait for the
    /// event with this scope.
    #[must_use]
    pub fn holds_back(&self, object: &str) -> bool {
        match self {
            Scope::Nothing => false,
            Scope::Objects(names) => names.iter().any(|n| n.split(COMPANION_SEP).next() == Some(object)),
            // A companion of `object` sorts right after it: it can be in the range while the
            // object is not only when `after` is the object or one of its companions (or, more
            // widely, any name it prefixes).
            Scope::Range { after, upto } => {
                upto.as_deref().is_none_or(|u| object <= u)
                    && after.as_deref().is_none_or(|a| a < object || a.starts_with(object))
            }
        }
    }
}

/// The lane of `event`.
#[must_use]
pub fn lane(event: &Event) -> Lane {
    match event {
        Event::ClientOp { op, .. } => Lane::Foreground(Some(PgId { pool: op.pool, seed: op.pg })),
        Event::RepOp { op, .. } => Lane::Foreground(Some(PgId { pool: op.pool, seed: op.pg })),
        Event::RepReply { .. } => Lane::Foreground(None),
        // An answer, like a replica's: it changes no object (the read ran already).
        Event::ReadDone { .. } => Lane::Foreground(None),
        Event::Tick { .. } | Event::Heartbeat { .. } => Lane::Timer,
        // A payload that does not decode is handled (and refused) in order.
        Event::PeerMsg { msg_type, payload, .. } if *msg_type == PgPush::TYPE => {
            // Read in place: names and range only (the core decodes the push in full later).
            match shoal_proto::peek::<PgPushScope<'_>>(payload) {
                Ok(p) => {
                    let scope = match p.backfill {
                        Some(r) => Scope::Range { after: r.after.map(String::from), upto: r.upto.map(String::from) },
                        None => Scope::Objects(p.objects.iter().map(|c| c.name.to_string()).collect()),
                    };
                    Lane::Background(PgId { pool: p.pool, seed: p.pg }, scope)
                }
                Err(_) => Lane::Barrier,
            }
        }
        Event::PeerMsg { msg_type, payload, .. } if *msg_type == PgPull::TYPE => {
            match shoal_proto::peek::<PgPull>(payload) {
                Ok(p) => Lane::Background(PgId { pool: p.pool, seed: p.pg }, Scope::Objects(vec![p.object])),
                Err(_) => Lane::Barrier,
            }
        }
        Event::PeerReply { call: PeerCall::Push { pg, .. } | PeerCall::Pull { pg, .. }, .. } => {
            Lane::Background(*pg, Scope::Nothing)
        }
        _ => Lane::Barrier,
    }
}

/// The object a foreground event of a PG works on.
fn object_of(event: &Event) -> Option<&str> {
    match event {
        Event::ClientOp { op, .. } => Some(&op.object),
        Event::RepOp { op, .. } => Some(&op.object),
        _ => None,
    }
}

/// The worker's waiting events and the choice of the next batch.
#[derive(Default)]
pub struct Lanes {
    pending: VecDeque<(Lane, Event)>,
    pending_bytes: usize,
}

impl Lanes {
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Whether another event may be taken in (the bounds on events and bytes held).
    #[must_use]
    pub fn has_room(&self) -> bool {
        self.pending.len() < PENDING_MAX_EVENTS && self.pending_bytes < PENDING_MAX_BYTES
    }

    pub fn push(&mut self, event: Event) {
        self.pending_bytes += event.data_len();
        self.pending.push_back((lane(&event), event));
    }

    fn take(&mut self, i: usize) -> Option<Event> {
        let (_, event) = self.pending.remove(i)?;
        self.pending_bytes -= event.data_len();
        Some(event)
    }

    /// Whether the foreground event at `i` of `pg` must wait for one of the PG's background
    /// events before it (`background`: their indexes, all below `i`).
    fn held_back(&self, i: usize, background: &[usize]) -> bool {
        let Some(object) = object_of(&self.pending[i].1) else { return true };
        background.iter().any(|&j| match &self.pending[j].0 {
            Lane::Background(_, scope) => scope.holds_back(object),
            _ => true,
        })
    }

    /// The next batch, at most `max_events` events and about `max_bytes` of data moved
    /// ([`Event::batch_bytes`]: carried, and to be read for clients): the foreground
    /// events that may go first, if there are any; else the first background event of a PG whose
    /// client I/O waits for it (so a write waits for its own PG's chunk, not for every chunk
    /// queued before it); else a tick, alone, if one comes before any barrier; else the barriers
    /// at the front; else the one background event at the front, if `background_ok` (the
    /// worker's pacing allows background work now) or a barrier waits behind it (maps are never
    /// held back by pacing). The batch is empty only when all that is left is background work
    /// that pacing holds back.
    pub fn next_batch(&mut self, max_events: usize, max_bytes: usize, background_ok: bool, batch: &mut Vec<Event>) {
        debug_assert!(batch.is_empty());
        let mut bytes = 0;
        // PG → indexes of its background events (before any barrier), in order.
        let mut background: HashMap<PgId, Vec<usize>> = HashMap::new();
        // PGs with a foreground event held back: their later ones wait too.
        let mut held: HashSet<PgId> = HashSet::new();
        let mut awaited: Option<usize> = None;
        let mut timer: Option<usize> = None;
        let mut i = 0;
        while i < self.pending.len() && batch.len() < max_events && bytes < max_bytes {
            match &self.pending[i].0 {
                Lane::Barrier => break,
                Lane::Timer => {
                    if !batch.is_empty() {
                        break;
                    }
                    timer = timer.or(Some(i));
                    i += 1;
                }
                Lane::Background(pg, _) => {
                    background.entry(*pg).or_default().push(i);
                    i += 1;
                }
                Lane::Foreground(Some(pg))
                    if held.contains(pg) || background.get(pg).is_some_and(|b| self.held_back(i, b)) =>
                {
                    let pg = *pg;
                    held.insert(pg);
                    awaited = awaited.or(background.get(&pg).and_then(|b| b.first().copied()));
                    i += 1;
                }
                Lane::Foreground(_) => {
                    if let Some(event) = self.take(i) {
                        bytes += event.batch_bytes();
                        batch.push(event);
                    }
                }
            }
        }
        if !batch.is_empty() {
            return;
        }
        // Nothing was taken, so the indexes still hold. Background events of different PGs are
        // independent; the one taken is the first of its PG.
        if let Some(event) = awaited.and_then(|i| self.take(i)) {
            batch.push(event);
            return;
        }
        if let Some(event) = timer.and_then(|i| self.take(i)) {
            batch.push(event);
            return;
        }
        match self.pending.front().map(|(l, _)| l) {
            Some(Lane::Barrier) => {
                while batch.len() < max_events
                    && bytes < max_bytes
                    && self.pending.front().is_some_and(|(l, _)| *l == Lane::Barrier)
                {
                    if let Some(event) = self.take(0) {
                        bytes += event.batch_bytes();
                        batch.push(event);
                    }
                }
            }
            Some(_) if background_ok || self.pending.iter().any(|(l, _)| *l == Lane::Barrier) => {
                batch.extend(self.take(0));
            }
            Some(_) | None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_map::OsdId;
    use shoal_proto::encode;
    use shoal_proto::osd::{BackfillRange, ObjOp, ObjectCopy, OsdOp, PgHead, ReqId};

    fn client_on(pg: u32, tid: u64, object: &str) -> Event {
        let op = OsdOp {
            reqid: ReqId { client: 1, tid },
            epoch: 1,
            pool: 1,
            pg,
            object: object.to_string(),
            ops: vec![ObjOp::Stat],
            expires_in_ms: None,
            resend: false,
            frees_space: false,
        };
        Event::ClientOp {
            from: 0,
            request_id: tid,
            op,
            data: shoal_util::SummedBytes::default(),
            data_crc: None,
            arrived_ms: 0,
        }
    }

    fn client(pg: u32, tid: u64) -> Event {
        client_on(pg, tid, &format!("o{tid}"))
    }

    fn push_msg(p: &PgPush) -> Event {
        Event::PeerMsg { from: 0, request_id: 0, msg_type: PgPush::TYPE, payload: encode(p, vec![7; 100]).into() }
    }

    /// A backfill chunk covering every name of the PG.
    fn push(pg: u32) -> Event {
        chunk(pg, None, None)
    }

    fn chunk(pg: u32, after: Option<&str>, upto: Option<&str>) -> Event {
        let backfill = Some(BackfillRange { after: after.map(String::from), upto: upto.map(String::from) });
        push_msg(&PgPush {
            epoch: 3,
            pool: 1,
            pg,
            objects: Vec::new(),
            backfill,
            part: None,
            kept: Vec::new(),
            decided: false,
        })
    }

    fn recovery_push(pg: u32, names: &[&str]) -> Event {
        let objects = names
            .iter()
            .map(|n| ObjectCopy {
                name: (*n).to_string(),
                exists: true,
                size_bytes: 0,
                xattrs: vec![],
                omap: vec![],
                version: Default::default(),
            })
            .collect();
        push_msg(&PgPush {
            epoch: 3,
            pool: 1,
            pg,
            objects,
            backfill: None,
            part: None,
            kept: Vec::new(),
            decided: false,
        })
    }

    fn push_reply(pg: u32) -> Event {
        Event::PeerReply {
            from: OsdId(2),
            call: PeerCall::Push {
                pg: PgId { pool: 1, seed: pg },
                attempt: 1,
                objects: vec![],
                backfill: true,
                next: None,
            },
            result: Err(shoal_proto::RemoteError::new(shoal_proto::ErrorCode::Timeout, "t")),
        }
    }

    fn tids(batch: &[Event]) -> Vec<String> {
        batch
            .iter()
            .map(|e| match e {
                Event::ClientOp { op, .. } => format!("c{}", op.reqid.tid),
                Event::PeerMsg { payload, .. } => {
                    format!("push {}", shoal_proto::peek::<PgHead>(payload).map_or(0, |h| h.pg))
                }
                Event::PeerReply { call: PeerCall::Push { pg, .. }, .. } => format!("reply {}", pg.seed),
                Event::Tick { .. } => "tick".into(),
                other => format!("{other:?}"),
            })
            .collect()
    }

    fn batches(lanes: &mut Lanes) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        let mut batch = Vec::new();
        while !lanes.is_empty() {
            lanes.next_batch(256, 4 << 20, true, &mut batch);
            out.push(tids(&batch));
            batch.clear();
        }
        out
    }

    fn next(lanes: &mut Lanes, background_ok: bool) -> Vec<String> {
        let mut batch = Vec::new();
        lanes.next_batch(256, 4 << 20, background_ok, &mut batch);
        tids(&batch)
    }

    fn read(tid: u64, len_bytes: u64) -> Event {
        let mut e = client(1, tid);
        if let Event::ClientOp { op, .. } = &mut e {
            op.ops = vec![ObjOp::Read { offset: 0, len_bytes }];
        }
        e
    }

    #[test]
    fn a_batch_holds_about_its_byte_bound_of_reads_too() {
        // Sixteen 4 MiB reads go one per batch (the first reaches the bound, as a 4 MiB write's
        // data does), not all at once: a batch's replies leave only when the batch is done.
        let mut lanes = Lanes::default();
        for tid in 0..16 {
            lanes.push(read(tid, 4 << 20));
        }
        let got = batches(&mut lanes);
        assert_eq!(got.len(), 16, "{got:?}");
        assert!(got.iter().flatten().cloned().eq((0..16).map(|t| format!("c{t}"))), "order kept: {got:?}");
        // Small reads, stats and whole-object reads of unknown size batch together: 33 reads of
        // unknown size at 64 KiB and 34 of 4 KiB stay under the 4 MiB bound.
        let mut lanes = Lanes::default();
        for tid in 0..100 {
            lanes.push(match tid % 3 {
                0 => read(tid, 4096),
                1 => client(1, tid),
                _ => read(tid, u64::MAX),
            });
        }
        assert_eq!(batches(&mut lanes).iter().map(Vec::len).collect::<Vec<_>>(), vec![100]);
        // A read longer than the bound counts as the bound: a batch still takes one.
        let mut lanes = Lanes::default();
        lanes.push(read(1, 1 << 40));
        lanes.push(client(1, 2));
        assert_eq!(batches(&mut lanes), vec![vec!["c1".to_string()], vec!["c2".to_string()]]);
    }

    #[test]
    fn events_are_routed_by_their_pg_and_scope() {
        let pg = |seed| PgId { pool: 1, seed };
        let all = Scope::Range { after: None, upto: None };
        assert_eq!(lane(&push(9)), Lane::Background(pg(9), all));
        let objects = Scope::Objects(vec!["a".into(), "b".into()]);
        assert_eq!(lane(&recovery_push(9, &["a", "b"])), Lane::Background(pg(9), objects));
        let pull = PgPull {
            epoch: 3,
            pool: 1,
            pg: 5,
            object: "x".into(),
            vouched: false,
            part: None,
            kept: Vec::new(),
            stale_at: None,
        };
        let pull =
            Event::PeerMsg { from: 0, request_id: 0, msg_type: PgPull::TYPE, payload: encode(&pull, vec![]).into() };
        assert_eq!(lane(&pull), Lane::Background(pg(5), Scope::Objects(vec!["x".into()])));
        assert_eq!(lane(&client(9, 1)), Lane::Foreground(Some(pg(9))));
        assert_eq!(lane(&push_reply(4)), Lane::Background(pg(4), Scope::Nothing));
        let bad = Event::PeerMsg {
            from: 0,
            request_id: 0,
            msg_type: PgPush::TYPE,
            payload: bytes::Bytes::from_static(&[1, 2, 3]),
        };
        assert_eq!(lane(&bad), Lane::Barrier);
        assert_eq!(lane(&Event::Tick { now_ms: 1 }), Lane::Timer);
        assert_eq!(lane(&Event::MonCommandDone { epoch: None }), Lane::Barrier);
    }

    #[test]
    fn scopes_cover_their_objects_and_companions() {
        let range =
            |a: Option<&str>, u: Option<&str>| Scope::Range { after: a.map(String::from), upto: u.map(String::from) };
        let r = range(Some("b"), Some("d"));
        assert!(!r.holds_back("a"));
        assert!(r.holds_back("c"));
        assert!(r.holds_back("d"));
        assert!(!r.holds_back("d0"));
        assert!(!r.holds_back("e"));
        // The range starts after a companion of "b": other companions of "b" may be in it.
        assert!(range(Some("b\u{1}0000000000000001"), Some("d")).holds_back("b"));
        assert!(range(Some("b"), Some("d")).holds_back("b"), "b's companions sort right after b");
        assert!(range(None, Some("d")).holds_back("a"));
        assert!(range(Some("b"), None).holds_back("zzz"));
        let o = Scope::Objects(vec!["x".into(), "y\u{1}dir".into()]);
        assert!(o.holds_back("x"));
        assert!(o.holds_back("y"), "a companion in a push holds back writes to its head");
        assert!(!o.holds_back("xx"));
        assert!(!o.holds_back("z"));
        assert!(!Scope::Nothing.holds_back("x"));
    }

    #[test]
    fn client_io_goes_before_other_pgs_recovery_one_push_at_a_time() {
        let mut lanes = Lanes::default();
        for e in [push(1), push(2), client(3, 1), push(3), client(3, 2), client(1, 3), client(4, 4), push(4)] {
            lanes.push(e);
        }
        // c1 and c4 pass the pushes of other PGs; c2 waits for PG 3's push, which goes first
        // (before the pushes of PGs 1 and 2 that came earlier); c3 then waits for PG 1's push.
        assert_eq!(
            batches(&mut lanes),
            vec![
                vec!["c1", "c4"],
                vec!["push 3"],
                vec!["c2"],
                vec!["push 1"],
                vec!["c3"],
                vec!["push 2"],
                vec!["push 4"],
            ]
        );
    }

    #[test]
    fn client_io_passes_its_own_pgs_push_outside_the_push_scope_keeping_its_order() {
        let mut lanes = Lanes::default();
        for e in [
            chunk(1, Some("b"), Some("d")),
            client_on(1, 1, "a"),
            client_on(1, 2, "x"),
            client_on(1, 3, "c"),
            client_on(1, 4, "y"),
            client_on(2, 5, "c"),
            recovery_push(2, &["m"]),
            client_on(2, 6, "n"),
            client_on(2, 7, "m"),
        ] {
            lanes.push(e);
        }
        // c1 and c2 are outside (b, d] and go first; c3 is in it and waits, and c4 behind it
        // too (a PG's client I/O keeps its order); PG 2's c5 comes before its push, c6 is about
        // another object; c7 waits for the push of "m".
        assert_eq!(
            batches(&mut lanes),
            vec![vec!["c1", "c2", "c5", "c6"], vec!["push 1"], vec!["c3", "c4"], vec!["push 2"], vec!["c7"]]
        );
    }

    #[test]
    fn answers_to_own_pushes_hold_no_client_io_back() {
        let mut lanes = Lanes::default();
        for e in [push_reply(1), client(1, 1), push_reply(1)] {
            lanes.push(e);
        }
        assert_eq!(next(&mut lanes, false), vec!["c1"]);
        // Paced: the answers wait for their turn.
        assert!(next(&mut lanes, false).is_empty());
        assert_eq!(batches(&mut lanes), vec![vec!["reply 1"], vec!["reply 1"]]);
    }

    #[test]
    fn barriers_are_passed_by_nothing_and_pass_nothing() {
        let mut lanes = Lanes::default();
        let done = || Event::MonCommandDone { epoch: None };
        for e in [push(1), client(2, 1), done(), done(), client(2, 2), push(2)] {
            lanes.push(e);
        }
        let done = format!("{:?}", done());
        assert_eq!(
            batches(&mut lanes),
            vec![
                vec!["c1".to_string()],
                vec!["push 1".into()],
                vec![done.clone(), done],
                vec!["c2".into()],
                vec!["push 2".into()]
            ]
        );
        assert_eq!(lanes.pending_bytes, 0);
    }

    #[test]
    fn ticks_pass_background_work_and_go_alone() {
        let mut lanes = Lanes::default();
        for e in [push(1), client(2, 1), Event::Tick { now_ms: 1 }, client(2, 2), Event::Tick { now_ms: 2 }] {
            lanes.push(e);
        }
        // A tick ends a client batch (client I/O may pass it, as it passes the push) and goes
        // alone; it does not make the push go first: the push waits for pacing.
        assert_eq!(next(&mut lanes, false), vec!["c1"]);
        assert_eq!(next(&mut lanes, false), vec!["c2"]);
        assert_eq!(next(&mut lanes, false), vec!["tick"]);
        assert_eq!(next(&mut lanes, false), vec!["tick"]);
        assert!(next(&mut lanes, false).is_empty());
        assert_eq!(next(&mut lanes, true), vec!["push 1"]);
    }

    #[test]
    fn pacing_holds_back_only_background_work_nobody_waits_for() {
        let mut lanes = Lanes::default();
        for e in [push(1), push(2), client(2, 1)] {
            lanes.push(e);
        }
        // The client write of PG 2 waits for PG 2's push: that push goes, paced or not.
        assert_eq!(next(&mut lanes, false), vec!["push 2"]);
        assert_eq!(next(&mut lanes, false), vec!["c1"]);
        // PG 1's push waits for its turn: nothing is chosen.
        assert!(next(&mut lanes, false).is_empty());
        // A barrier behind it is never held back, so neither is the push before it.
        lanes.push(Event::MonCommandDone { epoch: None });
        assert_eq!(next(&mut lanes, false), vec!["push 1"]);
        assert_eq!(next(&mut lanes, false).len(), 1);
        // Allowed again, background work goes.
        lanes.push(push(3));
        assert_eq!(next(&mut lanes, true), vec!["push 3"]);
    }
}
