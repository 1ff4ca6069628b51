//! Peering: after every change of a PG's acting set (an interval), its primary establishes what
//! the PG holds before serving anything (decision 0009).
//!
//! 1. **Query** every acting member and every member of the PG's last activation record (the map's
//!    [`shoal_map::PgActivation`]) that is up, for its [`PeerState`]: log, missing set, backfill
//!    cursor, last activation. If no member of the record is up, the PG is `down`; if all of them
//!    answered and none may serve as the authority (store replaced, still backfilling), it is
//!    `incomplete`. Either way it serves nothing, so an acknowledged write is never rolled back.
//! 2. **Choose** the authority: the eligible member with the newest log. Plan every other member
//!    against it ([`crate::merge::plan_member`]): the objects it lacks (log recovery) or a
//!    backfill. A primary that would need a backfill itself asks the monitors for a temporary
//!    acting set led by the authority instead, and the PG keeps serving from complete members.
//! 3. **Activate**: every acting member durably replaces its log with the authority's and records
//!    its missing set (or backfill) and `last_epoch_started`; then the primary has the monitors
//!    record the activation (compare-and-set on the previous record), and only once that record
//!    is in its map does it serve I/O.
//!
//! Replicas accept replicated writes only from the primary that activated them in the current
//! interval and only in order (each carries the version it follows), so a replaced primary cannot
//! add to a PG behind its successor's back.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use shoal_map::{ActivationProposal, ActivationRequest, ClusterMap, Command, OsdId, PgActivation, PgId};
use shoal_proto::osd::{Eversion, PEER_QUERY_VERSIONS_MAX, PeerInfo, PeerQuery, PeerState, PgActivate, PgLogEntry};
use shoal_proto::{ErrorCode, Message, RemoteError, decode_bytes, encode, peek};
use shoal_store::Transaction;

use super::recovery::PulledCopies;
use super::{Action, Event, OsdCore, PeerCall, reply_frame};
use crate::merge::{MemberPlan, choose_authority, plan_member};
use crate::pglog::log_collection;
use crate::pgmeta::PgMeta;

/// Ticks a peering step may wait for answers before it starts over.
pub const PEERING_RETRY_TICKS: u32 = 5;
/// Client operations queued per PG while it peers; more are refused as busy.
pub const MAX_QUEUED_OPS_PER_PG: usize = 1024;
/// Client operations of one PG waiting for their objects (recovery, reads beside the worker,
/// unacknowledged writes); more are refused with `Timeout`, which clients retry.
pub const MAX_BLOCKED_OPS_PER_PG: usize = 1024;

/// The members of an interval: the acting set in order, with each member's boot epoch (an OSD
/// that restarted starts a new interval even if the acting set looks the same).
pub(crate) type Interval = Vec<(OsdId, u64)>;

/// Where a primary is in bringing its PG to service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    Querying,
    /// Waiting for the monitors to set a temporary acting set led by a complete member.
    WaitingTemp,
    Activating {
        waiting: BTreeSet<OsdId>,
    },
    /// Waiting for the monitors to record the activation.
    Recording,
    Active,
    /// No member of the last activation is up.
    Down,
    /// Every member of the last activation answered; none holds the PG whole.
    Incomplete,
    /// Fewer complete members than the pool's `min_size`.
    Undersized,
}

/// What the primary knows of one acting replica while the PG is active.
#[derive(Debug, Clone, Default)]
pub(crate) struct PeerPlan {
    pub missing: BTreeMap<String, shoal_proto::osd::Eversion>,
    /// `Some(cursor)` while backfilling: objects after the cursor are not on it yet ("" : none).
    pub backfill: Option<String>,
    /// The large object being backfilled to it in parts, if one is.
    pub part: Option<PartPush>,
    /// While a backfill push to it is unanswered: its cursor before that push, to go back to if
    /// the push is refused (the cursor moves when the push is sent, see `send_backfill_chunk`).
    pub unacked_from: Option<String>,
    /// While a part of a large object (not its last) is unanswered: that part, to resume from if
    /// the push is refused (a refusal says nothing about the parts before it, which the target
    /// holds).
    pub unacked_part: Option<PartPush>,
    /// The object being recovered to it in parts and where its unanswered part starts, with the
    /// version the primary's copy had when that part was read: a recovery push refused as too
    /// full resumes there after the retry interval (the target holds the parts before it, and
    /// writes to the object wait for its recovery), instead of starting the object over, which
    /// an object of many parts could never finish while some pushes are refused.
    pub recovery_part: Option<(String, shoal_proto::osd::PartCursor, Option<shoal_proto::osd::Eversion>)>,
    /// Set when it refused a backfill or recovery push as too full (`backfill_toofull`,
    /// `recovery_toofull`): no push goes to it before this time (the tick clock, ms); cleared by
    /// the next push it takes.
    pub toofull_until_ms: Option<u64>,
    /// Backfill compares versions (decision 0049): the member held the PG before (its answer had
    /// a history), so objects past its cursor may already be there at the right version. Cleared
    /// if a scan fails (backfill then sends everything, as for a new disk).
    pub compare: bool,
    /// What scans found past the cursor: objects the member holds, at these versions.
    pub held: BTreeMap<String, shoal_proto::osd::Eversion>,
    /// The last name the scans so far covered (`held` is complete up to it); `None`: none yet.
    pub scanned_upto: Option<String>,
    /// Objects this backfill has sent to it and kept on it (decision 0049) since the PG's
    /// activation, for the line logged when the backfill finishes.
    pub backfill_sent: u64,
    pub backfill_kept: u64,
    /// The member's newest log entry when it answered this attempt's query: the snapshot clones
    /// of an object it lacks that were made up to that version are on it already, and a recovery
    /// push leaves them out (decision 0065; the member checks and refuses otherwise). `None`: no
    /// guess (every clone is sent).
    pub last_update: Option<shoal_proto::osd::Eversion>,
    /// Objects whose last recovery push to it left clones out and was refused: they go whole.
    /// At most the objects it lacks.
    pub push_whole: BTreeSet<String>,
}

/// A large object a backfill target is being sent in parts (`shoal_proto::osd::PushPart`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartPush {
    pub object: String,
    /// Where the next part starts.
    pub at: shoal_proto::osd::PartCursor,
    /// A write reached a name in `(cursor, object]` after the first part was read: the parts
    /// sent may be stale, or the range may now hold an object the target lacks. The object is
    /// started over (listing again from the cursor).
    pub dirty: bool,
    /// Times the object was started over; past `MAX_PART_RESTARTS` it is sent whole.
    pub restarts: u32,
}

impl PeerPlan {
    /// Whether it refused a push as too full and its retry time (`now_ms`, the tick clock) has not
    /// come yet: nothing is pushed to it until then.
    pub fn waits_as_toofull(&self, now_ms: u64) -> bool {
        self.toofull_until_ms.is_some_and(|until| now_ms < until)
    }

    /// Whether a write to `object` reaches this member as a log entry only (a backfill target
    /// that has not been sent the object yet). A write between the cursor and an object being
    /// sent in parts marks that object for a restart (unless `keep_stale_parts`, a mutation).
    pub fn log_only(&mut self, object: &str, keep_stale_parts: bool) -> bool {
        let Some(cursor) = self.backfill.as_deref() else { return false };
        if object <= cursor {
            return false;
        }
        if let Some(part) = self.part.as_mut()
            && object <= part.object.as_str()
            && !keep_stale_parts
        {
            part.dirty = true;
        }
        true
    }
}

/// A primary's state for one PG.
pub(crate) struct Primary {
    pub phase: Phase,
    /// Names this peering attempt, uniquely on this OSD (the same number as `term`): answers
    /// to calls of any other attempt, this interval's or an earlier one's, are ignored.
    pub attempt: u64,
    /// Unique on this OSD for every peering attempt of every PG (`attempt` restarts with a new
    /// interval): a read handed off under one term and finishing under another may have read
    /// what a later role applied, so it is not answered from what it read.
    pub term: u64,
    pub acting: Vec<OsdId>,
    pub record: Option<PgActivation>,
    pub answers: BTreeMap<OsdId, PeerState>,
    pub waiting: BTreeSet<OsdId>,
    /// Acting replicas and what they lack.
    pub peers: BTreeMap<OsdId, PeerPlan>,
    /// Members that hold the PG's history (may serve pulls), with the objects they lack.
    pub sources: BTreeMap<OsdId, BTreeSet<String>>,
    /// Members to be backfilled and probed strays whose logs no longer meet this one's, with the
    /// objects they are known to hold at the version this primary needs
    /// (`merge::held_at_needed_version`; decision 0038): pulled from when no source has them.
    pub holders: BTreeMap<OsdId, BTreeSet<String>>,
    /// Client operations waiting for the PG to become active.
    pub queued: VecDeque<Event>,
    /// Client operations waiting for one object to be ready for them (recovered, its reads
    /// beside the worker or its unacknowledged writes done), and how many in all.
    pub blocked: BTreeMap<String, Vec<Event>>,
    pub blocked_ops: usize,
    /// Objects among `blocked` whose writes wait for a backfill target's cursor to pass their
    /// clones (`OsdCore::backfill_splits`).
    pub split_waits: BTreeSet<String>,
    /// Objects being recovered: the members whose acknowledgement is awaited (a pull waits on
    /// the source).
    pub recovering: BTreeMap<String, BTreeSet<OsdId>>,
    /// Replicas with a backfill chunk in flight.
    pub backfilling: BTreeSet<OsdId>,
    /// Bytes pushed and not yet acknowledged: per object being recovered (its size times its
    /// targets), and per replica's backfill chunk.
    pub push_bytes: BTreeMap<String, u64>,
    pub backfill_bytes: BTreeMap<OsdId, u64>,
    /// Objects missing on the primary that no member can provide.
    pub unfound: BTreeSet<String>,
    /// Objects an operator decided on (`mark-unfound-lost`) whose logged write has not been
    /// committed here yet: this primary's copy stands as the object's for that write and for
    /// the recovery pushes it waits for, while the missing record, in memory and on disk, stays
    /// until the write commits, in the same transaction as its log entry. A decision that does
    /// not get that far (refused, or dropped with its interval) leaves the object unfound.
    pub decided: BTreeSet<String>,
    /// By object, the operator's decision writes issued and not answered yet (acknowledged by
    /// every member, or failed): with `decided`, what `shoal pg list-unfound` reports as
    /// deciding, and what `mark-unfound-lost` waits for before it answers. Like `decided`, it
    /// ends with the interval.
    pub unacked_decisions: BTreeMap<String, u32>,
    /// OSDs that said they hold a stray copy of the PG (they ask whether they may remove it):
    /// where unfound objects are looked for.
    pub known_strays: BTreeSet<OsdId>,
    /// Strays queried for unfound objects and not answered yet.
    pub probing: BTreeSet<OsdId>,
    /// Strays that answered a probe this attempt (what they hold is known: a source, a holder,
    /// or nothing this primary needs).
    pub probe_answered: BTreeSet<OsdId>,
    /// Strays whose last probe failed: a failure is logged at `info` once per stray, then at
    /// `debug` while the probes that retry it keep failing.
    pub probe_failed: BTreeSet<OsdId>,
    /// Objects a stray named as held at the version needed (`holders`) but could not provide
    /// when pulled (its copy damaged, or gone): its next probes still name them, and are not
    /// believed this attempt (decision 0083).
    pub holders_failed: BTreeSet<(OsdId, String)>,
    /// The OSDs that were up (with their `up_from`) when this attempt began: a primary with
    /// unfound objects peers again on a map that changes them, not on every map (decision 0085).
    pub up_at_start: Vec<(OsdId, u64)>,
    /// Per backfilling replica: objects still to send (an estimate for `shoal status`).
    pub backfill_remaining: BTreeMap<OsdId, u64>,
    pub proposal: Option<ActivationProposal>,
    /// The activation record extended to the acting members that were backfilled since the
    /// activation (decision 0055), sent to the monitors and not yet in this OSD's map.
    pub extension: Option<ActivationProposal>,
    /// `Mutations::skip_record_extension`: the record need not name every acting member.
    pub record_members_optional: bool,
    pub phase_ticks: u32,
    /// Activated with fewer complete members than `min_size` so that backfill can bring more
    /// (Ceph's recovery below min_size): no client I/O and no activation record; once enough
    /// members are complete the PG peers again and activates for real.
    pub recovery_only: bool,
    /// The authority asked again for the stored versions of these objects, this attempt (to
    /// name needs of `0'0`: `merge::name_unnamed_needs`).
    pub versions_asked: Option<(OsdId, BTreeSet<String>)>,
    /// Damaged clones of this primary's copies, with the OSDs outside `sources` that failed to
    /// provide them at their version this attempt (`OsdCore::repair_clones_alone` asks each
    /// such OSD once; at most a PG's members and strays per clone).
    pub clone_misses: BTreeMap<String, BTreeSet<OsdId>>,
    /// Heads this primary is pulling from a member that lacks them too, perhaps only for damage
    /// to clones this primary holds whole (`OsdCore::pull_around_damaged_clones`), with the
    /// version the pulled head must carry; and the members that failed to provide one this
    /// attempt (each asked once per head; at most a PG's members per head).
    pub around_damage: BTreeMap<String, Eversion>,
    pub around_damage_misses: BTreeMap<String, BTreeSet<OsdId>>,
    /// For an operator's revert (decision 0066): the stored versions other OSDs reported for
    /// this primary's unfound objects (at most its unfound objects times the members and strays
    /// asked), the objects each OSD was asked about this attempt (an object found unfound later
    /// is asked about too: decision 0087) and the OSDs not answered yet, and the copies being
    /// pulled to be kept.
    pub elsewhere: BTreeMap<String, BTreeMap<OsdId, Eversion>>,
    pub elsewhere_asked: BTreeMap<OsdId, BTreeSet<String>>,
    pub elsewhere_waiting: BTreeSet<OsdId>,
    pub revert_pulls: BTreeMap<String, RevertPull>,
    /// Backfill targets whose next chunk waits for the writes of an object on their way to the
    /// members (`OsdCore::send_backfill_chunk`): sent again when the last of them is answered.
    /// At most one object per target.
    pub backfill_waits: BTreeMap<String, BTreeSet<OsdId>>,
}

pub(crate) enum Role {
    Primary(Box<Primary>),
    /// `activated_at`: the epoch its primary activated it at in the current interval.
    Replica {
        activated_at: Option<u64>,
    },
    /// Holds data of a PG it is not acting for.
    Stray,
}

pub(crate) struct PgState {
    pub interval: Interval,
    /// The epoch the interval began at, as the map says (`ClusterMap::pg_interval_since`; 0 for
    /// a map that does not say). It differs for an interval equal to this one that came back
    /// after one this OSD's map skipped (decision 0091).
    pub since: u64,
    pub role: Role,
}

impl Primary {
    fn new(acting: Vec<OsdId>, record: Option<PgActivation>, attempt: u64) -> Primary {
        Primary {
            phase: Phase::Querying,
            attempt,
            term: 0,
            acting,
            record,
            answers: BTreeMap::new(),
            waiting: BTreeSet::new(),
            peers: BTreeMap::new(),
            sources: BTreeMap::new(),
            holders: BTreeMap::new(),
            queued: VecDeque::new(),
            blocked: BTreeMap::new(),
            blocked_ops: 0,
            split_waits: BTreeSet::new(),
            recovering: BTreeMap::new(),
            backfilling: BTreeSet::new(),
            push_bytes: BTreeMap::new(),
            backfill_bytes: BTreeMap::new(),
            unfound: BTreeSet::new(),
            decided: BTreeSet::new(),
            unacked_decisions: BTreeMap::new(),
            known_strays: BTreeSet::new(),
            probing: BTreeSet::new(),
            probe_answered: BTreeSet::new(),
            probe_failed: BTreeSet::new(),
            holders_failed: BTreeSet::new(),
            up_at_start: Vec::new(),
            backfill_remaining: BTreeMap::new(),
            proposal: None,
            extension: None,
            record_members_optional: false,
            phase_ticks: 0,
            recovery_only: false,
            versions_asked: None,
            clone_misses: BTreeMap::new(),
            around_damage: BTreeMap::new(),
            around_damage_misses: BTreeMap::new(),
            elsewhere: BTreeMap::new(),
            elsewhere_asked: BTreeMap::new(),
            elsewhere_waiting: BTreeSet::new(),
            revert_pulls: BTreeMap::new(),
            backfill_waits: BTreeMap::new(),
        }
    }

    /// The known strays, and the acting members being backfilled, that are up in `map`, are not
    /// sources already and have no probe in flight: those a probe for unfound objects asks
    /// (again). A member being backfilled may hold past its cursor a copy at exactly the version
    /// this primary needs — one it held before its backfill, or one backfill sent — and a copy of
    /// the primary's found damaged after the activation has no other holder when the other
    /// members are away (decision 0058).
    pub fn probe_targets<'a>(&'a self, map: &'a ClusterMap) -> impl Iterator<Item = OsdId> + 'a {
        let backfilled = self.peers.iter().filter(|(_, pp)| pp.backfill.is_some()).map(|(o, _)| *o);
        self.known_strays.iter().copied().chain(backfilled).filter(move |o| {
            map.osds.get(o).is_some_and(|i| i.up) && !self.sources.contains_key(o) && !self.probing.contains(o)
        })
    }

    /// Whether every acting member holds every object.
    pub fn is_complete(&self, own: &PgMeta) -> bool {
        self.phase == Phase::Active
            && own.missing.is_empty()
            && self.peers.values().all(|p| p.missing.is_empty() && p.backfill.is_none())
    }

    /// Whether every acting member holds every object and the monitors' activation record names
    /// each of them (decision 0055): until it does, a member backfilled since the activation
    /// holds the PG whole but peering could not choose it, so the PG is not clean.
    pub fn is_clean(&self, own: &PgMeta) -> bool {
        self.is_complete(own) && self.recorded_whole()
    }

    /// Whether the activation record this primary serves under names every acting member, and no
    /// holders (decision 0060: a record naming them says some member lacks objects).
    pub fn recorded_whole(&self) -> bool {
        self.record_members_optional
            || self
                .record
                .as_ref()
                .is_some_and(|r| r.holders.is_empty() && self.acting.iter().all(|o| r.members.contains(o)))
    }
}

/// The holders an activation record names (decision 0060): while a member of the new activation
/// lacks objects, every OSD outside its members that may hold them — the previous record's
/// members and holders, and every OSD that answered this peering with a copy of the PG — still
/// in the map. Empty once every member holds every object.
fn record_holders(
    previous: Option<&PgActivation>,
    answers: &BTreeMap<OsdId, PeerState>,
    plans: &BTreeMap<OsdId, MemberPlan>,
    members: &[OsdId],
    map: &ClusterMap,
) -> Vec<OsdId> {
    let lacking =
        members.iter().any(|m| matches!(plans.get(m), Some(MemberPlan::Log { missing, .. }) if !missing.is_empty()));
    if !lacking {
        return Vec::new();
    }
    let mut holders: BTreeSet<OsdId> =
        previous.iter().flat_map(|r| r.members.iter().chain(&r.holders)).copied().collect();
    holders.extend(answers.iter().filter(|(_, s)| s.les > 0 || !s.log.is_empty()).map(|(o, _)| *o));
    holders.retain(|o| !members.contains(o) && map.osds.contains_key(o));
    holders.into_iter().collect()
}

/// The interval of `pg` in `map`: its acting OSDs with their boot epochs.
/// The OSDs up in `map`, with the epoch each came up at.
fn up_osds(map: &ClusterMap) -> Vec<(OsdId, u64)> {
    map.osds.iter().filter(|(_, i)| i.up).map(|(o, i)| (*o, i.up_from)).collect()
}

pub(crate) fn interval_of(map: &ClusterMap, pg: PgId) -> Interval {
    map.pg_interval(pg).unwrap_or_default()
}

impl OsdCore {
    /// This OSD's primary state of `pg`, if it is the PG's primary.
    pub(super) fn primary(&self, pg: PgId) -> Option<&Primary> {
        match self.pgs.get(&pg) {
            Some(PgState { role: Role::Primary(p), .. }) => Some(p),
            _ => None,
        }
    }

    /// [`OsdCore::primary`], mutable, and only while it is still in peering attempt `attempt`
    /// (answers to an older attempt are ignored).
    pub(super) fn primary_at(&mut self, pg: PgId, attempt: u64) -> Option<&mut Primary> {
        match self.pgs.get_mut(&pg) {
            Some(PgState { role: Role::Primary(p), .. }) if p.attempt == attempt => Some(p),
            _ => None,
        }
    }

    /// The refusal of a member that holds no activation of `pg` in its current interval. It
    /// restarted, or it took an interval change that its primary never saw: the primary's map
    /// skipped the epochs of an interval in between (it was cut off from the monitors), and the
    /// interval came back as it was (decision 0080).
    pub(super) fn lost_activation(&self, pg: PgId) -> RemoteError {
        RemoteError::new(
            ErrorCode::WrongPrimary,
            format!("{} is not an activated member of PG {pg} at epoch {}", self.id, self.map.epoch),
        )
    }

    /// Whether `e`, a member's answer to a request of this primary, is [`Self::lost_activation`]
    /// from a member that acknowledged the activation of the PG this primary serves. Nothing
    /// else makes such a primary peer again while its map shows no new interval, so a request
    /// that waited for the member's activation would wait for ever (decision 0080).
    pub(super) fn activation_lost(&self, pg: PgId, from: OsdId, e: &RemoteError) -> bool {
        e.code == ErrorCode::WrongPrimary
            && !self.mutations.ignore_lost_activation
            && self.primary(pg).is_some_and(|p| p.phase == Phase::Active && p.acting.contains(&from))
    }

    /// Re-evaluates every PG against the current map: PGs whose interval changed start peering
    /// (primary), wait for activation (replica) or become strays.
    pub(super) fn update_intervals(&mut self, out: &mut Vec<Action>) {
        self.intervals_known = true;
        let map = self.map.clone();
        let mut seen = BTreeSet::new();
        for pool in map.pools.values() {
            for seed in 0..pool.pg_num {
                let pg = PgId { pool: pool.id, seed };
                let interval = interval_of(&map, pg);
                let member = interval.iter().any(|(o, _)| *o == self.id);
                let held = self.collections.contains(&crate::exec::pg_collection(pg))
                    || self.collections.contains(&log_collection(pg));
                if !member && !held {
                    continue;
                }
                seen.insert(pg);
                // The same members can come back after an interval this OSD never saw (its map
                // jumped: it was cut off from the monitors, or updates were coalesced). If another
                // primary activated the PG in between, the monitors' record is newer than this
                // primary's activation: that is a new interval too, or this primary would serve
                // reads that miss the writes made there.
                // This primary's own extension of its record (decision 0055) is not another
                // primary's activation: it names this primary first, which no other primary's
                // record does. It is in the map once the record there is newer than the one it
                // replaces and says what it says (an extension that only drops holders, decision
                // 0060, names the same members as the record it replaces).
                if let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg)
                    && let (Some(ext), Some(rec)) = (&p.extension, map.pg_active.get(&pg))
                    && rec.epoch > ext.prior_epoch
                    && rec.activated_at == ext.activated_at
                    && rec.members == ext.members
                    && rec.holders == ext.holders
                {
                    tracing::info!(%pg, members = ?rec.members, "activation record names the backfilled members");
                    p.proposal = p.extension.take();
                    p.record = Some(rec.clone());
                }
                let overtaken = match self.pgs.get(&pg) {
                    Some(PgState { role: Role::Primary(p), .. }) => {
                        p.proposal.as_ref().zip(map.pg_active.get(&pg)).is_some_and(|(prop, rec)| {
                            rec.activated_at > prop.activated_at
                                || (rec.activated_at == prop.activated_at && rec.members != prop.members)
                        })
                    }
                    _ => false,
                };
                // An interval that went and came back while this OSD's map skipped the epochs in
                // between looks the same, but began later: a new interval (decision 0091).
                let since = map.pg_interval_since.get(&pg).copied().unwrap_or(0);
                let came_back = |s: &PgState| s.since != since && !self.mutations.ignore_interval_since;
                let changed = overtaken || self.pgs.get(&pg).is_none_or(|s| s.interval != interval || came_back(s));
                if changed {
                    self.new_interval(pg, interval, since, out);
                } else if let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get(&pg)
                    && (matches!(p.phase, Phase::Down | Phase::WaitingTemp | Phase::Incomplete)
                        || (!p.unfound.is_empty()
                            && (self.mutations.repeer_unfound_on_every_map || p.up_at_start != up_osds(&map))))
                {
                    // Another OSD came up or the monitors answered: try again. A PG with unfound
                    // objects only when an OSD came up or went down: any other map (each of its
                    // own activation records makes one) would have it peer again for ever, two
                    // such PGs taking turns, and the operator's decisions never get an attempt
                    // that lasts (decision 0085).
                    self.start_peering(pg, out);
                }
            }
        }
        let gone: Vec<PgId> = self.pgs.keys().filter(|pg| !seen.contains(pg)).copied().collect();
        for pg in gone {
            if let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.remove(&pg) {
                self.refuse_all(*p, out);
            }
        }
    }

    fn new_interval(&mut self, pg: PgId, interval: Interval, since: u64, out: &mut Vec<Action>) {
        let primary = interval.first().map(|(o, _)| *o);
        let member = interval.iter().any(|(o, _)| *o == self.id);
        let role = if primary == Some(self.id) {
            Role::Primary(Box::new(Primary::new(Vec::new(), None, 0)))
        } else if member {
            Role::Replica { activated_at: None }
        } else {
            Role::Stray
        };
        let old = self.pgs.insert(pg, PgState { interval, since, role });
        // Operations queued on a former primary role go back through the front door: they are
        // answered `WrongPrimary` (or served, if this OSD is still primary) under the new interval.
        if let Some(PgState { role: Role::Primary(p), .. }) = old {
            self.refuse_all(*p, out);
        }
        if primary == Some(self.id) {
            self.start_peering(pg, out);
        }
    }

    /// Re-handles every operation a primary role held.
    fn refuse_all(&mut self, p: Primary, out: &mut Vec<Action>) {
        let mut events: Vec<Event> = p.queued.into_iter().collect();
        for (_, evs) in p.blocked {
            events.extend(evs);
        }
        for ev in super::unfound::drop_decisions(events) {
            self.handle(ev, out);
        }
    }

    /// Starts (or restarts) peering of `pg` on this primary: queries every member that may know.
    pub(super) fn start_peering(&mut self, pg: PgId, out: &mut Vec<Action>) {
        let map = self.map.clone();
        let acting: Vec<OsdId> = map.pg_osds(pg).unwrap_or_default();
        let record = map.pg_active.get(&pg).cloned();
        self.last_term += 1;
        let term = self.last_term;
        let Some(state) = self.pgs.get_mut(&pg) else { return };
        let Role::Primary(p) = &mut state.role else { return };
        // Unique across this PG's intervals too (not a count restarting with each interval): a
        // peer's late answer to a call of an earlier interval's attempt with the same number
        // would otherwise be taken for an answer to this one — a pull answered twice, the
        // second (older) copy installed over a write made in between.
        let attempt = term;
        let queued = std::mem::take(&mut p.queued);
        let blocked = std::mem::take(&mut p.blocked);
        let mut fresh = Primary::new(acting.clone(), record.clone(), attempt);
        fresh.term = term;
        fresh.up_at_start = up_osds(&map);
        // The record's holders are asked, like strays that made themselves known, for objects
        // found unfound (decision 0060): an isolated one cannot make itself known.
        if let Some(r) = &record {
            fresh.known_strays = r.holders.iter().copied().filter(|o| !acting.contains(o)).collect();
        }
        fresh.record_members_optional = self.mutations.skip_record_extension;
        // An operator's decision does not outlive the attempt it was made in: its object's
        // state may be another once peering is done (see `Primary::decided`).
        let mut carried: Vec<Event> = queued.into_iter().collect();
        for (_, evs) in blocked {
            carried.extend(evs);
        }
        fresh.queued = super::unfound::drop_decisions(carried).into();
        **p = fresh;
        let mut targets: BTreeSet<OsdId> = acting.iter().copied().collect();
        if let Some(r) = &record {
            targets.extend(r.members.iter().copied());
        }
        targets.retain(|o| map.osds.get(o).is_some_and(|i| i.up));
        if let Some(r) = &record
            && !r.members.iter().any(|m| targets.contains(m))
            && !self.mutations.ignore_down
        {
            p.phase = Phase::Down;
            tracing::warn!(%pg, members = ?r.members, "PG down: no member of its last activation is up");
            return;
        }
        p.waiting = targets.clone();
        let epoch = map.epoch;
        let versions_of = self.versions_wanted(pg);
        for osd in targets {
            if osd == self.id {
                continue;
            }
            let q = PeerQuery { epoch, pool: pg.pool, pg: pg.seed, versions_of: versions_of.clone() };
            out.push(Action::Peer {
                osd,
                msg_type: PeerQuery::TYPE,
                payload: encode(&q, Vec::new()),
                call: PeerCall::Query { pg, attempt },
            });
        }
        // This OSD answers itself.
        match self.local_peer_state(pg, &[]) {
            Ok(own) => self.peer_answered(pg, attempt, self.id, Ok(own), out),
            Err(e) => {
                tracing::error!(%pg, error = %e, "cannot read own PG state; peering retried");
            }
        }
    }

    /// The objects of `pg` whose stored versions a query asks members for: this OSD's own
    /// missing objects needed at a known version (copies found damaged here), at most
    /// [`PEER_QUERY_VERSIONS_MAX`].
    pub(super) fn versions_wanted(&mut self, pg: PgId) -> Vec<String> {
        // (A record that cannot be read asks for nothing; peering reads it again itself.)
        self.meta_mut(pg).map_or_else(
            |_| Vec::new(),
            |m| {
                m.missing
                    .iter()
                    .filter(|(_, need)| **need != shoal_proto::osd::Eversion::default())
                    .map(|(o, _)| o.clone())
                    .take(PEER_QUERY_VERSIONS_MAX)
                    .collect()
            },
        )
    }

    /// What this OSD holds of `pg`, as a peer reports it, with the stored versions of the objects
    /// of `versions_of` it holds (at most [`PEER_QUERY_VERSIONS_MAX`] are looked at).
    pub(super) fn local_peer_state(&mut self, pg: PgId, versions_of: &[String]) -> Result<PeerState, RemoteError> {
        let meta = self.meta_mut(pg)?.clone();
        let coll = crate::exec::pg_collection(pg);
        let store = &*self.store;
        let version_of =
            if self.mutations.head_versions_only { crate::objver::stored } else { crate::objver::stored_of_name };
        let versions = versions_of
            .iter()
            .take(PEER_QUERY_VERSIONS_MAX)
            .filter_map(|o| version_of(store, &coll, o).map(|v| (o.clone(), v)))
            .collect();
        let log = crate::pglog::read_entries(&*self.store, pg).map_err(|e| crate::exec::store_error(&e))?;
        let tail = crate::pglog::read_tail(&*self.store, pg).map_err(|e| crate::exec::store_error(&e))?;
        Ok(PeerState {
            tail,
            les: meta.les,
            backfill: meta.backfill,
            log: log.into_iter().map(PgLogEntry::from).collect(),
            missing: meta.missing.into_iter().collect(),
            versions,
        })
    }

    /// A peer's (or this OSD's own) answer to a query.
    pub(super) fn peer_answered(
        &mut self,
        pg: PgId,
        attempt: u64,
        from: OsdId,
        result: Result<PeerState, RemoteError>,
        out: &mut Vec<Action>,
    ) {
        let Some(p) = self.primary_at(pg, attempt) else { return };
        if p.phase != Phase::Querying || !p.waiting.remove(&from) {
            return;
        }
        match result {
            Ok(state) => {
                p.answers.insert(from, state);
            }
            Err(e) => {
                tracing::info!(%pg, peer = %from, error = %e, "peer did not answer the query");
                // An acting member must answer: wait for the next tick (or map) and start over.
                // It stays awaited, so that the other answers cannot complete the round without
                // it (it would then be activated as if it held nothing).
                if p.acting.contains(&from) {
                    p.waiting.insert(from);
                    return;
                }
            }
        }
        if p.waiting.is_empty() {
            self.choose_and_activate(pg, out);
        }
    }

    fn choose_and_activate(&mut self, pg: PgId, out: &mut Vec<Action>) {
        let me = self.id;
        let epoch = self.map.epoch;
        let min_size = self.map.pools.get(&pg.pool).map_or(1, |p| p.min_size) as usize;
        let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) else { return };
        let record = if self.mutations.ignore_down { None } else { p.record.as_ref() };
        let chosen = if self.mutations.primary_is_authority {
            p.answers.contains_key(&me).then_some(me)
        } else {
            choose_authority(&p.answers, record, me)
        };
        let Some(auth) = chosen else {
            p.phase = Phase::Incomplete;
            tracing::warn!(%pg, "PG incomplete: no member of its last activation holds it whole");
            return;
        };
        // Every acting member answered (peer_answered waits for them); a member without an answer
        // would be activated as empty and its copy distrusted.
        if let Some(silent) = p.acting.iter().find(|o| !p.answers.contains_key(o)) {
            tracing::error!(%pg, member = %silent, "acting member did not answer; peering again at the next tick");
            return;
        }
        let mut auth_log = p.answers[&auth].log.clone();
        if self.mutations.removals_need_copies {
            auth_log.iter_mut().for_each(|e| e.empties = false);
        }
        let auth_tail = p.answers[&auth].tail;
        if tracing::enabled!(tracing::Level::DEBUG) {
            // Per answer: OSD, last_epoch_started, backfilling, newest entry, objects it lacks.
            let summary: Vec<_> = p
                .answers
                .iter()
                .map(|(o, s)| (*o, s.les, s.backfill.is_some(), s.log.last().map(|e| e.version), s.missing.len()))
                .collect();
            tracing::debug!(%pg, %auth, answers = ?summary, "peering: authority chosen");
        }
        let mut plans = BTreeMap::new();
        for (osd, state) in &p.answers {
            let mut plan = plan_member(&auth_log, auth_tail, state);
            if let MemberPlan::Resume { missing, remove, .. } = &mut plan
                && self.mutations.resume_blind
            {
                missing.clear();
                remove.clear();
            }
            plans.insert(*osd, plan);
        }
        // A primary that must be backfilled hands the PG to the authority for the time being.
        if !matches!(plans.get(&me), Some(MemberPlan::Log { .. })) {
            let mut temp = vec![auth];
            temp.extend(p.acting.iter().copied().filter(|o| *o != auth));
            p.phase = Phase::WaitingTemp;
            tracing::info!(%pg, authority = %auth, ?temp, "primary lacks the PG's history: asking for a temporary acting set");
            self.pending_temp.insert(pg, temp);
            self.flush_mon(out);
            return;
        }
        // Needs of "whatever the authority holds" get the version the authority's copy has, so
        // that a later peering can still find a copy at it when this authority is gone or is
        // itself to be backfilled (such a need matches no member's copy: the object would stay
        // unfound). A remote authority is asked once more, for those objects' stored versions.
        let unnamed = crate::merge::unnamed_needs(plans.values(), PEER_QUERY_VERSIONS_MAX);
        if !unnamed.is_empty() && !self.mutations.keep_unnamed_needs {
            let auth_versions: BTreeMap<String, Eversion> = if auth == me {
                let coll = crate::exec::pg_collection(pg);
                unnamed
                    .iter()
                    .filter_map(|o| crate::objver::stored_of_name(&*self.store, &coll, o).map(|v| (o.clone(), v)))
                    .collect()
            } else if p.versions_asked.as_ref().is_some_and(|(o, asked)| *o == auth && unnamed.is_subset(asked)) {
                p.answers[&auth].versions.iter().cloned().collect()
            } else {
                tracing::debug!(%pg, %auth, objects = unnamed.len(), "asking the authority for its copies' versions");
                let q = PeerQuery { epoch, pool: pg.pool, pg: pg.seed, versions_of: unnamed.iter().cloned().collect() };
                p.versions_asked = Some((auth, unnamed));
                p.phase = Phase::Querying;
                p.waiting = BTreeSet::from([auth]);
                p.phase_ticks = 0;
                out.push(Action::Peer {
                    osd: auth,
                    msg_type: PeerQuery::TYPE,
                    payload: encode(&q, Vec::new()),
                    call: PeerCall::Query { pg, attempt: p.attempt },
                });
                return;
            };
            self.counters.needs_named +=
                crate::merge::name_unnamed_needs(&mut plans, &p.answers[&auth], &auth_versions);
        }
        let complete: Vec<OsdId> =
            p.acting.iter().copied().filter(|o| matches!(plans.get(o), Some(MemberPlan::Log { .. }))).collect();
        let backfills = p.acting.iter().filter(|o| plans.get(o).is_some_and(MemberPlan::backfills)).count();
        if complete.len() < min_size {
            if complete.len() + backfills < min_size {
                // A temporary acting set is chosen from the OSDs up at the time, and only a clean
                // PG hands it back: one too small to activate once more of the placement is up
                // again would wait for ever. Handed back, the placement's primary peers with
                // every OSD up and asks for a temporary set again if it lacks the history.
                let up = self.map.pg_up_osds(pg).unwrap_or_default();
                if self.map.pg_temp.contains_key(&pg) && up.iter().any(|o| !p.acting.contains(o)) {
                    p.phase = Phase::WaitingTemp;
                    tracing::info!(
                        %pg, complete = complete.len(), min_size, ?up,
                        "PG undersized on its temporary acting set while more of its placement is up: handing back"
                    );
                    self.pending_temp.insert(pg, Vec::new());
                    self.flush_mon(out);
                    return;
                }
                p.phase = Phase::Undersized;
                tracing::info!(%pg, complete = complete.len(), min_size, "PG undersized: not activated");
                return;
            }
            // Backfill can bring the PG back to min_size: activate to recover, not to serve.
            tracing::info!(%pg, complete = complete.len(), min_size, "PG below min_size: backfilling without client I/O");
            p.recovery_only = true;
        }
        // Sources: every answering member whose log shares the authority's history.
        p.sources = plans
            .iter()
            .filter_map(|(o, plan)| match plan {
                MemberPlan::Log { missing, remove } => Some((*o, missing.keys().chain(remove).cloned().collect())),
                MemberPlan::Resume { .. } | MemberPlan::Backfill => None,
            })
            .collect();
        // The primary activates itself first, like any member, so that the request ids it shares
        // below include those of the entries its own replacement moved into its dups: a log that
        // overlaps the authority's drops its entries up to the authority's tail into the dups,
        // and a member backfilled from the start keeps only the dups it is sent. Sharing the
        // dups as they were before left those requests nowhere on the backfilled member, and a
        // resend of one reaching it as primary later was applied a second time (decision 0089).
        let Some(MemberPlan::Log { missing: own_missing, remove: own_remove }) = plans.get(&me).cloned() else {
            tracing::error!(%pg, "the primary's own plan is not to take the authority's log; peering retried");
            return;
        };
        let backfilling = plans.values().any(|plan| matches!(plan, MemberPlan::Backfill));
        let loaded_before = self.logs.contains_key(&pg);
        let early = (backfilling && self.mutations.share_dups_before_own_replacement)
            .then(|| self.dups_to_share(pg, loaded_before));
        let own = PgMeta { les: epoch, backfill: None, missing: own_missing.clone(), ..PgMeta::default() };
        if let Err(e) = self.activate_local(pg, (&auth_log, auth_tail), &own, &own_remove, None) {
            tracing::error!(%pg, error = %e, "activating the primary's own copy failed; peering retried");
            return;
        }
        let dups = match early {
            Some(dups) => dups,
            None if backfilling => self.dups_to_share(pg, loaded_before),
            None => Vec::new(),
        };
        let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) else { return };
        let mut waiting = BTreeSet::new();
        for osd in p.acting.clone() {
            if osd == me {
                continue;
            }
            // `backfill`: `Some(cursor)` for a member to be backfilled past `cursor` ("": all).
            let (missing, remove, backfill) = match plans.get(&osd) {
                Some(MemberPlan::Log { missing, remove }) => (missing.clone(), remove.clone(), None),
                Some(MemberPlan::Resume { after, missing, remove }) => {
                    tracing::info!(%pg, member = %osd, %after, missing = missing.len(), "backfill resumes past the member's cursor");
                    (missing.clone(), remove.clone(), Some(after.clone()))
                }
                _ => (BTreeMap::new(), BTreeSet::new(), Some(String::new())),
            };
            // A member that answered with a history held the PG before: its copies past the
            // cursor are worth comparing (a new or emptied store has neither).
            let compare = backfill.is_some()
                && p.answers.get(&osd).is_some_and(|s| s.les > 0 || !s.log.is_empty())
                && !self.mutations.no_backfill_compare;
            p.peers.insert(
                osd,
                PeerPlan {
                    missing: missing.clone(),
                    backfill: backfill.clone(),
                    compare,
                    last_update: p.answers.get(&osd).and_then(|s| s.log.last()).map(|e| e.version),
                    ..PeerPlan::default()
                },
            );
            if let Some(after) = &backfill {
                let objects = crate::copy::count_objects_after(&*self.store, &crate::exec::pg_collection(pg), after);
                p.backfill_remaining.insert(osd, objects);
            }
            let from_start = backfill.as_deref() == Some("");
            let msg = PgActivate {
                epoch,
                pool: pg.pool,
                pg: pg.seed,
                activated_at: epoch,
                interval: interval_of(&self.map, pg).into_iter().map(|(o, up_from)| (o.0, up_from)).collect(),
                log: auth_log.clone(),
                tail: auth_tail,
                missing: missing.into_iter().collect(),
                remove: remove.into_iter().collect(),
                backfill: backfill.is_some(),
                backfill_after: backfill.unwrap_or_default(),
                dups: if from_start { dups.clone() } else { Vec::new() },
            };
            waiting.insert(osd);
            out.push(Action::Peer {
                osd,
                msg_type: PgActivate::TYPE,
                payload: encode(&msg, Vec::new()),
                call: PeerCall::Activate { pg, attempt: p.attempt },
            });
        }
        // Members to be backfilled may still hold some of the primary's missing objects at the
        // versions needed (their logs were trimmed past, not their stores): until the primary has
        // them, backfill does not start, so their copies stay as they are.
        p.holders = p
            .answers
            .iter()
            .filter(|(o, _)| **o != me && plans.get(o).is_some_and(MemberPlan::backfills))
            .map(|(o, s)| (*o, crate::merge::held_at_needed_version(s, &own_missing)))
            .filter(|(_, holds)| !holds.is_empty())
            .collect();
        let holders = if self.mutations.forget_holders {
            Vec::new()
        } else {
            record_holders(p.record.as_ref(), &p.answers, &plans, &complete, &self.map)
        };
        p.proposal = Some(ActivationProposal {
            pg,
            prior_epoch: p.record.as_ref().map_or(0, |r| r.epoch),
            activated_at: epoch,
            members: complete,
            holders,
        });
        p.phase = Phase::Activating { waiting: waiting.clone() };
        p.phase_ticks = 0;
        let attempt = p.attempt;
        if waiting.is_empty() {
            self.activated(pg, attempt, me, Ok(()), out);
        }
    }

    /// The request ids kept beyond this primary's log, for the members it backfills from the
    /// start (decision 0039): shared history, since its log overlaps the authority's. Unreadable,
    /// they go without, as if none were kept. The log is loaded first if this OSD had not touched
    /// the PG since it started (`loaded_before`): taking "not loaded" for "none kept" sent the
    /// members nothing, and a resend of a trimmed write reaching one of them as primary later
    /// was applied a second time (decision 0074).
    fn dups_to_share(&mut self, pg: PgId, loaded_before: bool) -> Vec<shoal_proto::osd::DupsObject> {
        let shared = if self.mutations.share_loaded_dups_only && !loaded_before {
            Ok(Vec::new())
        } else {
            super::loaded_log(&mut self.logs, &*self.store, pg, self.log_bounds)
                .and_then(|log| log.dups_to_share(&*self.store, pg))
        };
        shared.unwrap_or_else(|e| {
            tracing::error!(%pg, error = %e, "reading the request ids kept beyond the log failed: backfilled members go without");
            Vec::new()
        })
    }

    /// Replaces this OSD's log and peering record for `pg` and removes the objects of `remove`
    /// (with their snapshot clones), in one transaction, durable once the driver syncs (the
    /// answer to the primary waits for that sync). With `dups` (a member being backfilled), its
    /// dups objects become those. The record also names, for each missing object whose copy here
    /// holds writes this replacement rolls back, those writes (decision 0063); such records of
    /// objects still missing carry over from the record replaced.
    pub(super) fn activate_local(
        &mut self,
        pg: PgId,
        (log, tail): (&[PgLogEntry], shoal_proto::osd::Eversion),
        meta: &PgMeta,
        remove: &BTreeSet<String>,
        dups: Option<&[shoal_proto::osd::DupsObject]>,
    ) -> Result<(), RemoteError> {
        tracing::debug!(
            %pg, les = meta.les, backfill = ?meta.backfill, missing = meta.missing.len(), remove = remove.len(),
            log_last = ?log.last().map(|e| e.version), "activating"
        );
        // The caller's plan never both removes an object and waits for a copy of it.
        assert!(remove.iter().all(|o| !meta.missing.contains_key(o)), "PG {pg}: an object both missing and removed");
        self.cancel_purge(pg);
        let coll = log_collection(pg);
        let mut txn = Transaction::new();
        if !self.collections.contains(&coll) {
            txn.create_collection(&coll);
        }
        let data_coll = crate::exec::pg_collection(pg);
        if !remove.is_empty() && self.collections.contains(&data_coll) {
            let objects: Vec<String> = remove.iter().cloned().collect();
            crate::copy::remove_whole(&mut txn, &*self.store, &data_coll, &objects)?;
            tracing::info!(%pg, objects = ?remove, "removing objects the PG's history never wrote (rolled back)");
        }
        let meta = &self.with_rolled_back(pg, (log, tail), meta)?;
        // Only what differs from the log this member holds (loaded from the store if need be).
        let kept_dups = self.log_mut(pg)?.write_replacement(&mut txn, pg, log, tail, dups);
        meta.write_whole(&mut txn, pg);
        self.store.commit(txn, shoal_store::Durability::Batch).map_err(|e| crate::exec::store_error(&e))?;
        self.collections.insert(coll);
        let bounds = self.log_bounds;
        self.logs.entry(pg).or_insert_with(|| crate::pglog::PgLog::empty(bounds)).replaced(log, tail, kept_dups);
        self.metas.insert(pg, meta.clone());
        Ok(())
    }

    /// `meta` with the writes each of its missing objects' copies here holds that replacing this
    /// OSD's log for `pg` by the authoritative `log` rolls back (what an operator's revert needs
    /// to keep such a copy: decision 0063), and the records of objects still missing that this
    /// OSD's current record has.
    fn with_rolled_back(
        &mut self,
        pg: PgId,
        (log, tail): (&[PgLogEntry], shoal_proto::osd::Eversion),
        meta: &PgMeta,
    ) -> Result<PgMeta, RemoteError> {
        let mut meta = meta.clone();
        // (Loaded from the store if this OSD has not read the record since it started.)
        for (object, held) in &self.meta_mut(pg)?.held_divergent {
            if meta.missing.contains_key(object) {
                meta.held_divergent.insert(object.clone(), held.clone());
            }
        }
        self.log_mut(pg)?;
        let rolled = match self.logs.get(&pg) {
            Some(own) => own.rolled_back(&*self.store, pg, log, tail).map_err(|e| crate::exec::store_error(&e))?,
            None => (shoal_proto::osd::Eversion::default(), Vec::new()),
        };
        let (common, rolled) = rolled;
        let mut by_object: BTreeMap<String, Vec<crate::pgmeta::DivergentWrite>> = BTreeMap::new();
        for e in rolled.into_iter().filter(|e| meta.missing.contains_key(&e.object)) {
            let write = crate::pgmeta::DivergentWrite { version: e.version, reqid: e.reqid, op_count: e.op_count };
            by_object.entry(e.object).or_default().push(write);
        }
        for (object, writes) in by_object {
            tracing::info!(%pg, object, %common, writes = writes.len(), "this OSD's copy holds writes the PG's history rolls back: recorded");
            meta.record_divergent(&object, common, writes);
        }
        Ok(meta)
    }

    /// A member's answer to an activation.
    pub(super) fn activated(
        &mut self,
        pg: PgId,
        attempt: u64,
        from: OsdId,
        result: Result<(), RemoteError>,
        out: &mut Vec<Action>,
    ) {
        let skip_record = self.mutations.skip_activation_record;
        let Some(p) = self.primary_at(pg, attempt) else { return };
        let Phase::Activating { waiting } = &mut p.phase else { return };
        if let Err(e) = result {
            tracing::info!(%pg, peer = %from, error = %e, "activation refused; peering again at the next tick");
            return;
        }
        waiting.remove(&from);
        if !waiting.is_empty() {
            return;
        }
        if p.recovery_only || skip_record {
            // Nothing is served, so nothing needs recording: the last record stays the PG's.
            return self.go_active(pg, out);
        }
        p.phase = Phase::Recording;
        p.phase_ticks = 0;
        if let Some(proposal) = p.proposal.clone() {
            self.queue_record(pg, proposal);
        }
        self.flush_mon(out);
    }

    /// Queues `proposal` for the monitors with the interval this OSD leads `pg` in, the one the
    /// activation was made in: the monitors record it only while the PG is still in it
    /// (decision 0079).
    pub(super) fn queue_record(&mut self, pg: PgId, proposal: ActivationProposal) {
        // A PG this OSD no longer holds sends an empty interval, which no PG it could lead has:
        // the record is dropped.
        let interval = self.pgs.get(&pg).map(|s| s.interval.clone()).unwrap_or_default();
        self.pending_records.insert(pg, ActivationRequest { proposal, interval });
    }

    /// The map may now hold this primary's activation record: go active if so.
    pub(super) fn check_records(&mut self, out: &mut Vec<Action>) {
        let ready: Vec<PgId> = self
            .pgs
            .iter()
            .filter_map(|(pg, s)| match &s.role {
                Role::Primary(p) if p.phase == Phase::Recording => {
                    let prop = p.proposal.as_ref()?;
                    let rec = self.map.pg_active.get(pg)?;
                    (rec.activated_at == prop.activated_at
                        && rec.members == prop.members
                        && rec.holders == prop.holders
                        && rec.epoch > prop.prior_epoch)
                        .then_some(*pg)
                }
                _ => None,
            })
            .collect();
        for pg in ready {
            self.go_active(pg, out);
        }
    }

    fn go_active(&mut self, pg: PgId, out: &mut Vec<Action>) {
        let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get_mut(&pg) else { return };
        p.phase = Phase::Active;
        if !p.recovery_only {
            p.record = self.map.pg_active.get(&pg).cloned();
        }
        let queued: Vec<Event> = p.queued.drain(..).collect();
        tracing::debug!(%pg, "PG active");
        for ev in queued {
            self.handle(ev, out);
        }
        self.recover(pg, out);
    }

    /// The monitors answered this OSD's command; `Some(epoch)`: it is in the map from `epoch`.
    pub(super) fn mon_command_done(&mut self, out: &mut Vec<Action>) {
        self.mon_busy = false;
        // Activations the monitors dropped (another record won, or the interval moved on) peer
        // again; the others became active when their map arrived.
        let stale: Vec<PgId> = self
            .pgs
            .iter()
            .filter_map(|(pg, s)| match &s.role {
                Role::Primary(p)
                    if (p.phase == Phase::Recording && !self.pending_records.contains_key(pg))
                        || (p.phase == Phase::WaitingTemp && !self.pending_temp.contains_key(pg)) =>
                {
                    Some(*pg)
                }
                _ => None,
            })
            .collect();
        self.check_records(out);
        for pg in stale {
            if let Some(PgState { role: Role::Primary(p), .. }) = self.pgs.get(&pg)
                && matches!(p.phase, Phase::Recording | Phase::WaitingTemp)
            {
                self.start_peering(pg, out);
            }
        }
        self.flush_mon(out);
    }

    /// Sends the next batch of activation records or temporary acting sets to the monitors (one
    /// command in flight per OSD, so a burst of peering PGs costs a few map epochs, not one each).
    pub(super) fn flush_mon(&mut self, out: &mut Vec<Action>) {
        if self.mon_busy {
            return;
        }
        if !self.pending_records.is_empty() {
            let records: Vec<ActivationRequest> = std::mem::take(&mut self.pending_records).into_values().collect();
            self.mon_busy = true;
            out.push(Action::MonCommand(Command::PgActivated { by: self.id, records }));
        } else if !self.pending_temp.is_empty() {
            let entries: Vec<(PgId, Vec<OsdId>)> = std::mem::take(&mut self.pending_temp).into_iter().collect();
            self.mon_busy = true;
            out.push(Action::MonCommand(Command::PgTemp { by: self.id, entries }));
        }
    }

    /// Ticks: peering steps that waited too long start over, and so do PGs that could not
    /// activate (down, incomplete, undersized): a member that did not answer may answer now
    /// without any map change (it was cut off from this OSD, not from the monitors).
    pub(super) fn peering_tick(&mut self, out: &mut Vec<Action>) {
        let mut restart = Vec::new();
        let mut probe_again = Vec::new();
        let retry_probes = !self.mutations.no_probe_retries;
        for (pg, s) in &mut self.pgs {
            match &mut s.role {
                Role::Primary(p) if p.phase != Phase::Active => {
                    p.phase_ticks += 1;
                    if p.phase_ticks > PEERING_RETRY_TICKS {
                        restart.push(*pg);
                    }
                }
                // A stray whose probe failed may hold the unfound objects: it is asked again, as
                // nothing else asks while the PG stays in this attempt (decision 0085 keeps it
                // there; seed 951182 waited for ever on one lost probe).
                Role::Primary(p) if retry_probes && !p.unfound.is_empty() && !p.probe_failed.is_empty() => {
                    probe_again.push(*pg);
                }
                _ => {}
            }
        }
        for pg in restart {
            self.start_peering(pg, out);
        }
        for pg in probe_again {
            self.probe_strays(pg, out);
        }
    }

    // ---- the member's side ----

    /// A query from a primary: answered with this OSD's state of the PG.
    pub(super) fn on_peer_query(&mut self, from: u64, request_id: u64, q: PeerQuery, out: &mut Vec<Action>) {
        let pg = PgId { pool: q.pool, seed: q.pg };
        let result = if self.map.pools.get(&pg.pool).is_none_or(|p| pg.seed >= p.pg_num) {
            Err(RemoteError::new(ErrorCode::NotFound, format!("PG {pg} does not exist at epoch {}", self.map.epoch)))
        } else {
            self.local_peer_state(pg, &q.versions_of)
        };
        let reply = PeerInfo { epoch: self.map.epoch, result };
        out.push(Action::Reply { to: from, frame: reply_frame(request_id, &reply, Vec::new()), after_sync: false });
    }

    /// An activation from the PG's primary: refused unless the sender is the primary in this
    /// OSD's map (which is at least as new as the sender's).
    pub(super) fn on_activate(&mut self, a: PgActivate) -> Result<(), RemoteError> {
        let pg = PgId { pool: a.pool, seed: a.pg };
        let acting = self.map.pg_osds(pg).unwrap_or_default();
        if !acting.contains(&self.id) || acting.first() == Some(&self.id) {
            return Err(RemoteError::new(
                ErrorCode::WrongPrimary,
                format!("{} is not a replica of PG {pg} at epoch {}", self.id, self.map.epoch),
            ));
        }
        if a.activated_at > self.map.epoch {
            return Err(RemoteError::new(ErrorCode::WrongPrimary, "activation from a newer map"));
        }
        // A primary of a past interval (its map is stale: it is cut off from the monitors) must
        // not activate this member in its name: its activation would lower what this member
        // recorded and let the old primary's writes in.
        let interval: Vec<(u32, u64)> = interval_of(&self.map, pg).into_iter().map(|(o, u)| (o.0, u)).collect();
        if a.interval != interval && !self.mutations.accept_stale_activation {
            return Err(RemoteError::new(
                ErrorCode::WrongPrimary,
                format!(
                    "activation of PG {pg} for interval {:?} (epoch {}), but at epoch {} its interval is {interval:?}",
                    a.interval, a.epoch, self.map.epoch
                ),
            ));
        }
        let (les, own_cursor) = {
            let meta = self.meta_mut(pg)?;
            (meta.les, meta.backfill.clone())
        };
        if a.activated_at < les && !self.mutations.accept_stale_activation {
            return Err(RemoteError::new(
                ErrorCode::WrongPrimary,
                format!(
                    "activation of PG {pg} at epoch {} is older than the one recorded here ({les})",
                    a.activated_at
                ),
            ));
        }
        let resume = a.backfill && !a.backfill_after.is_empty();
        if !a.backfill && !a.backfill_after.is_empty() {
            return Err(RemoteError::new(
                ErrorCode::Invalid,
                format!("activation of PG {pg} resumes a backfill for a member that is not backfilled"),
            ));
        }
        // What this member keeps up to the cursor must be what it holds: its own cursor must be
        // at least that far (it answered the query with it, and nothing moved it back since).
        if resume && own_cursor.as_deref().is_none_or(|own| own < a.backfill_after.as_str()) {
            return Err(RemoteError::new(
                ErrorCode::Invalid,
                format!(
                    "activation of PG {pg} resumes backfill after {:?}, but this member's cursor is {own_cursor:?}",
                    a.backfill_after
                ),
            ));
        }
        // A member backfilled from the first object is sent everything; one resuming keeps what
        // it holds up to its cursor, less `remove`, and lacks `missing` there (nothing past it).
        let keeps_objects = !a.backfill || resume;
        if !keeps_objects && (!a.missing.is_empty() || !a.remove.is_empty()) {
            return Err(RemoteError::new(
                ErrorCode::Invalid,
                format!(
                    "activation of PG {pg} names missing or removed objects for a member backfilled from the start"
                ),
            ));
        }
        if let Some((past, _)) = resume
            .then(|| a.missing.iter().map(|(o, v)| (o, Some(v))).chain(a.remove.iter().map(|o| (o, None))))
            .into_iter()
            .flatten()
            .find(|(o, _)| o.as_str() > a.backfill_after.as_str())
        {
            return Err(RemoteError::new(
                ErrorCode::Invalid,
                format!(
                    "activation of PG {pg} names {past}, past the cursor {:?} its backfill resumes after",
                    a.backfill_after
                ),
            ));
        }
        let meta = PgMeta {
            les: a.activated_at,
            backfill: a.backfill.then(|| a.backfill_after.clone()),
            missing: a.missing.into_iter().collect(),
            ..PgMeta::default()
        };
        let remove: BTreeSet<String> = a.remove.into_iter().collect();
        if keeps_objects && !a.dups.is_empty() {
            return Err(RemoteError::new(
                ErrorCode::Invalid,
                format!("activation of PG {pg} carries dups objects for a member that keeps its history"),
            ));
        }
        crate::pglog::check_dups(&a.dups, self.log_bounds).map_err(|why| {
            RemoteError::new(ErrorCode::Invalid, format!("activation of PG {pg} carries bad dups objects: {why}"))
        })?;
        if let Some(both) = remove.iter().find(|o| meta.missing.contains_key(*o)) {
            return Err(RemoteError::new(
                ErrorCode::Invalid,
                format!("activation of PG {pg} both removes {both} and names it missing"),
            ));
        }
        let dups = (!keeps_objects).then_some(a.dups.as_slice());
        self.activate_local(pg, (&a.log, a.tail), &meta, &remove, dups)?;
        let interval = interval_of(&self.map, pg);
        let since = self.map.pg_interval_since.get(&pg).copied().unwrap_or(0);
        self.pgs.insert(pg, PgState { interval, since, role: Role::Replica { activated_at: Some(a.activated_at) } });
        Ok(())
    }

    /// Decodes and handles a request from a peer OSD (peering, recovery, strays).
    pub(super) fn on_peer_msg(
        &mut self,
        from: u64,
        request_id: u64,
        msg_type: u16,
        payload: bytes::Bytes,
        out: &mut Vec<Action>,
    ) {
        let epoch = self.map.epoch;
        let ack = |result: Result<(), RemoteError>| Action::Reply {
            to: from,
            frame: reply_frame(request_id, &shoal_proto::osd::PeerAck { epoch, result }, Vec::new()),
            after_sync: true,
        };
        let bad = |e: shoal_proto::MsgError| RemoteError::new(ErrorCode::Invalid, format!("malformed message: {e}"));
        match msg_type {
            PeerQuery::TYPE => match decode_bytes::<PeerQuery>(payload) {
                Ok((q, _)) => self.on_peer_query(from, request_id, q, out),
                Err(e) => out.push(ack(Err(bad(e)))),
            },
            PgActivate::TYPE => {
                let r = decode_bytes::<PgActivate>(payload).map_err(bad).and_then(|(a, _)| self.on_activate(a));
                out.push(ack(r));
            }
            shoal_proto::osd::PgPull::TYPE => match decode_bytes::<shoal_proto::osd::PgPull>(payload) {
                Ok((p, _)) => self.on_pull(from, request_id, p, out),
                Err(e) => out.push(ack(Err(bad(e)))),
            },
            shoal_proto::osd::PgPush::TYPE => {
                let r = decode_bytes::<shoal_proto::osd::PgPush>(payload)
                    .map_err(bad)
                    .and_then(|(p, d)| self.on_push(p, d));
                out.push(ack(r));
            }
            shoal_proto::osd::PgStray::TYPE => match decode_bytes::<shoal_proto::osd::PgStray>(payload) {
                Ok((s, _)) => self.on_stray_question(from, request_id, s, out),
                Err(e) => out.push(ack(Err(bad(e)))),
            },
            // Handled at once, whatever the sender's epoch: its place on the ordered link, behind
            // the replicated writes sent before it, is what makes the answer comparable.
            shoal_proto::osd::PgScrub::TYPE => match decode_bytes::<shoal_proto::osd::PgScrub>(payload) {
                Ok((s, _)) => self.on_scrub(from, request_id, s, out),
                Err(e) => out.push(ack(Err(bad(e)))),
            },
            shoal_proto::osd::PgScanVersions::TYPE => match decode_bytes::<shoal_proto::osd::PgScanVersions>(payload) {
                Ok((scan, _)) => {
                    let result = self.on_scan_versions(&scan);
                    let reply = shoal_proto::osd::PgScanVersionsReply { epoch, result };
                    out.push(Action::Reply {
                        to: from,
                        frame: reply_frame(request_id, &reply, Vec::new()),
                        after_sync: false,
                    });
                }
                Err(e) => out.push(ack(Err(bad(e)))),
            },
            shoal_proto::osd::PeerPing::TYPE => self.on_ping(from, request_id, out),
            other => out.push(ack(Err(RemoteError::new(ErrorCode::Invalid, format!("not a peer message: {other}"))))),
        }
    }

    /// The epoch a peer message must wait for before it is handled (its sender's map).
    pub(super) fn peer_msg_epoch(msg_type: u16, payload: &[u8]) -> u64 {
        fn epoch_of<M: Message>(payload: &[u8], f: impl Fn(&M) -> u64) -> u64 {
            peek::<M>(payload).map(|m| f(&m)).unwrap_or(0)
        }
        match msg_type {
            PeerQuery::TYPE => epoch_of::<PeerQuery>(payload, |m| m.epoch),
            PgActivate::TYPE => epoch_of::<PgActivate>(payload, |m| m.epoch),
            shoal_proto::osd::PgPull::TYPE => epoch_of::<shoal_proto::osd::PgPull>(payload, |m| m.epoch),
            shoal_proto::osd::PgStray::TYPE => epoch_of::<shoal_proto::osd::PgStray>(payload, |m| m.epoch),
            shoal_proto::osd::PgScanVersions::TYPE => {
                epoch_of::<shoal_proto::osd::PgScanVersions>(payload, |m| m.epoch)
            }
            _ => 0,
        }
    }

    /// Decodes a peer's reply to one of this OSD's calls and hands it to the step that waits.
    pub(super) fn on_peer_reply(
        &mut self,
        from: OsdId,
        call: PeerCall,
        result: Result<shoal_proto::Frame, RemoteError>,
        out: &mut Vec<Action>,
    ) {
        fn payload<M: Message>(r: Result<shoal_proto::Frame, RemoteError>) -> Result<(M, Vec<u8>), RemoteError> {
            let frame = r?;
            shoal_proto::decode_frame::<M>(frame)
                .map_err(|e| RemoteError::new(ErrorCode::Io, format!("bad reply: {e}")))
        }
        match call {
            PeerCall::Query { pg, attempt } => {
                let r = payload::<PeerInfo>(result).and_then(|(m, _)| m.result);
                self.peer_answered(pg, attempt, from, r, out);
            }
            PeerCall::Activate { pg, attempt } => {
                let r = payload::<shoal_proto::osd::PeerAck>(result).and_then(|(m, _)| m.result);
                self.activated(pg, attempt, from, r, out);
            }
            PeerCall::Pull { pg, attempt, object } => {
                let r = payload::<shoal_proto::osd::PgPullReply>(result).and_then(|(m, d)| {
                    m.result.map(|c| PulledCopies { copies: c, data: d, part: m.part, kept: m.kept })
                });
                self.pulled(pg, attempt, from, object, r, out);
            }
            PeerCall::Push { pg, attempt, objects, backfill, next } => {
                let r = payload::<shoal_proto::osd::PeerAck>(result).and_then(|(m, _)| m.result);
                self.pushed(pg, attempt, from, (objects, next), backfill, r, out);
            }
            PeerCall::Stray { pg } => {
                let r = payload::<shoal_proto::osd::PgStrayReply>(result).and_then(|(m, _)| m.result);
                self.stray_answered(pg, r);
            }
            PeerCall::Probe { pg, attempt } => {
                let r = payload::<PeerInfo>(result).and_then(|(m, _)| m.result);
                self.probed(pg, attempt, from, r, out);
            }
            PeerCall::CopiesElsewhere { pg, attempt } => {
                let r = payload::<PeerInfo>(result).and_then(|(m, _)| m.result);
                self.copies_reported(pg, attempt, from, r);
            }
            PeerCall::Scrub { pg, attempt } => {
                let r = payload::<shoal_proto::osd::PgScrubReply>(result).and_then(|(m, _)| m.result);
                self.scrub_answered(pg, attempt, from, r, out);
            }
            PeerCall::Ping => {
                let r = payload::<shoal_proto::osd::PeerAck>(result).and_then(|(m, _)| m.result);
                self.pinged(from, r);
            }
            PeerCall::ScanVersions { pg, attempt, upto } => {
                let r = payload::<shoal_proto::osd::PgScanVersionsReply>(result).and_then(|(m, _)| m.result);
                self.scanned(pg, attempt, from, upto, r, out);
            }
        }
    }
}

/// A copy an operator's revert pulls to keep (decision 0066): from `source`, at exactly
/// `version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RevertPull {
    pub source: OsdId,
    pub version: Eversion,
    /// Whether the copy may come in parts, should it not fit one message. It may (decision 0066,
    /// second amendment), even over an older copy the primary could keep: the first part then
    /// replaces that copy before the last has arrived, so a source lost in between leaves the
    /// primary nothing to keep, but the newer copy holds acknowledged writes the older lacks, and
    /// keeping the older one instead would give them up every time, not only after a second
    /// failure. (A copy staged apart and swapped in whole would need neither; not built.)
    pub in_parts: bool,
    /// Whether the version is one of the PG's history for certain (named for the object by the
    /// primary's log, or trimmed into its dups): the source then sends its copy past its own
    /// backfill cursor too (decision 0082).
    pub vouched: bool,
}
