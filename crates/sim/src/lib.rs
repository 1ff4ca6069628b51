//! A deterministic simulation of a Shoal cluster: the real OSD logic ([`shoal_osd::OsdCore`])
//! and the real map logic ([`shoal_map::ClusterMap`]) driven by one seeded event queue, with a
//! simulated network that delays every message by a random amount (so messages on different
//! connections overtake each other, while each connection stays FIFO as TCP is).
//!
//! Everything that varies comes from the seed: message delays, the order clients issue
//! operations, the moment map changes happen. Two runs with the same seed and configuration
//! produce the same [`Outcome`], including a hash of every delivered message in delivery
//! order — so a failure found by a random seed replays exactly. Faults come from the same queue:
//! lost client messages, lost replication messages (the primary times out), and the scheduled
//! [`Fault`]s: OSDs crashed (in-memory state lost, store kept, peers' calls to them failing) and
//! restarted on their store or on an empty one, marked down, out and in, cut off from their
//! peers, from the monitors, or from both, links between two OSDs cut; and disk faults (a flipped bit, a block that fails to
//! read).
//!
//! The simulated monitor is the real monitor logic ([`shoal_mon::MonCore`], standalone: one
//! monitor whose proposals commit at once; Raft itself is tested in `shoal-mon`). Every OSD and
//! client subscribes to it, and each map update it pushes reaches each subscriber after its own
//! random delay.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;

use shoal_map::{ClusterMap, Command, MonInfo, OsdId, Weight};
use shoal_mon::{Action as MonAction, CoreConfig, Event as MonEvent, MonCore, ReplyTo};
use shoal_osd::{Action, Event, OsdCore};
use shoal_proto::mon::MapUpdate;
use shoal_proto::osd::{ObjOp, OpOutput, OsdOp, OsdOpReply, PgActivate, PgPush, RepOp, RepOpReply, ReqId};
use shoal_proto::{ErrorCode, Frame, Message, RemoteError, decode, encode};
use shoal_store::ObjectStore;
use shoal_store::engine::MemEngine;

/// A small, fast, seeded generator (xorshift64*): the simulation's only source of randomness.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // splitmix64 of the seed, so that nearby seeds give unrelated streams.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)).max(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// What to simulate.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub seed: u64,
    pub osds: u32,
    pub hosts: u32,
    pub pool_size: u32,
    /// The pool's `min_size`: a PG with fewer complete members refuses I/O.
    pub min_size: u32,
    pub pg_num: u32,
    pub clients: u32,
    /// Objects each client owns (a client keeps at most one operation in flight per object,
    /// so the expected content of every object is known).
    pub objects_per_client: u32,
    /// Writes each client issues in total, spread over its objects.
    pub writes_per_client: u32,
    /// Message delay range in microseconds of simulated time.
    pub min_delay_us: u64,
    pub max_delay_us: u64,
    /// Writes append a small piece instead of replacing the object, so that a write applied
    /// twice shows in the content.
    pub appends: bool,
    /// Messages between clients and OSDs lost, per thousand (a connection reset: the client
    /// reconnects and resends with the same request id).
    pub drop_client_per_mille: u64,
    /// A client resends a request with no answer after this long.
    pub client_timeout_us: u64,
    /// Replicated writes and their answers lost between OSDs, per thousand. A primary that hears
    /// nothing back within `replication_timeout_us` fails the write, as the daemon does.
    pub drop_replication_per_mille: u64,
    pub replication_timeout_us: u64,
    /// Faults at simulated times (microseconds), in addition to the two above.
    pub faults: Vec<(u64, Fault)>,
    /// OSD ticks (peering retries, background recovery) every this many microseconds.
    pub tick_us: u64,
    /// Safety mechanisms switched off in every OSD (mutation tests: a run must then fail).
    pub mutations: shoal_osd::Mutations,
    /// An object to follow (`--watch NAME`): after every event that changed it, what each OSD
    /// holds of it (head, snapshot state, companions) is logged at `info`. For replaying one
    /// seed; it changes nothing in the run.
    pub watch: Option<String>,
    /// The cluster's `osd_backfill_chunk_bytes` (`None`: the default). Below the objects' size
    /// (512 bytes, or a few appends) backfill sends them in parts.
    pub backfill_chunk_bytes: Option<u64>,
    /// The cluster's `osd_backfill_chunk_objects` (`None`: the default, 8). At 1, a PG's few
    /// objects are backfilled one push at a time, so that peering often meets a member part-way
    /// through its backfill (and resumes it, decision 0048).
    pub backfill_chunk_objects: Option<u64>,
    /// OSDs run client reads beside their workers, as `block` OSDs do (the read runs, and is
    /// answered, a delivery later).
    pub read_offload: bool,
    /// Every write also sets omap entries of its object (a few of [`OMAP_KEYS`] keys), and the
    /// owner's reads check the object's omap against the model: with small backfill chunks
    /// (`--parts`) objects then recover and backfill with their omap in parts (decision 0044).
    pub omap: bool,
    /// Bytes of each whole-object write (`--value-bytes`; appends stay [`APPEND_BYTES`]). The
    /// default is small, the simulation being about ordering; 4096 and more make writes carry
    /// whole blocks, whose checksums the OSDs are handed with the data and store (decision 0094).
    pub value_bytes: usize,
    /// Clients that only read the writers' objects, while their owners write them, as many reads
    /// each as a writer writes. What they read is checked against the order of the writes: no
    /// value that no write wrote, none older than the last write acknowledged before the read
    /// was sent, none newer than the write in flight, and never older than what a read that
    /// finished before this one began returned (a write seen must not be lost later).
    pub observers: u32,
    /// PG logs keep this many entries (and trim half as many at once) instead of the OSD's
    /// default of hundreds, so that members meet logs trimmed past each other: activation from
    /// a log that no longer reaches a member's, backfill, rollbacks against a trimmed history.
    /// Use it without `appends`: the log is also what recognises a resent write (at most once
    /// within the log's length), and a log this short forgets a write before its resend comes,
    /// so an append would then be applied twice — as it would in a cluster whose PG took more
    /// than the log's length of writes between a write and its resend.
    pub log_keep: Option<usize>,
    /// Dups objects the OSDs keep beyond short logs (`log_keep`), instead of the default
    /// [`shoal_osd::pglog::DUPS_OBJECTS`]: a resend is recognised for about `dups_objects ×
    /// log_keep` writes to its PG, so logs of one entry with the default forget a resend eight
    /// writes later — a cluster's documented limit, not a bug, but one that the simulation's
    /// resends (which may come a dozen writes late) would report as one. Without `log_keep`,
    /// ignored.
    pub dups_objects: Option<u64>,
    /// Backfill and recovery pushes that bring data refused by their target, per thousand, as a
    /// target past its backfillfull share (or its failsafe share, for recovery) refuses them
    /// (decision 0046): the push is not applied and the target answers `NoSpace` on the ordered
    /// link back, after whatever it got before. The cluster's retry interval is then
    /// [`TOOFULL_RETRY_MS`], so that recovery goes on within a run.
    pub refuse_push_per_mille: u64,
    /// Self-managed snapshots, as block images use them: every write carries the snapshot
    /// context of the moment it was issued, snapshots are taken and removed at random times (a
    /// removal queues a trim of every object), some writes remove the head or roll it back to a
    /// live snapshot, and some reads read at a live snapshot. The model knows each snapshot's
    /// content (per object, the state after its last write issued before the snapshot was
    /// taken); reads at a snapshot are checked against it, and at the end every acting member's
    /// store is checked at every live snapshot. Not with observers.
    pub snaps: bool,
    /// `ReplaceWhenClean` faults wait only for every OSD to report the PGs it leads clean, as an
    /// impatient operator reading each OSD's report would, not for the monitors' map to settle
    /// (a PG between primaries then counts as clean): a disk may be replaced that holds the only
    /// copy of a PG's newest entry, which leaves objects unfound.
    pub early_replacement: bool,
    /// The operator reverts unfound objects (`shoal pg mark-unfound-lost PGID revert`): on each
    /// tick, every PG whose primary reports it `+unfound` is sent the command. The run must then
    /// end with every acknowledged write readable, resends of writes the revert gave up
    /// included.
    pub revert_unfound: bool,
    /// OSDs ping the peers they share PGs with and report those that stop answering
    /// (decision 0062); the monitor gets every report and a tick with each OSD tick, and marks
    /// down an OSD that peers on two hosts report (its silence is left to the nemesis, as in
    /// every run). An OSD marked down while it runs boots again only once it reaches its peers.
    pub peer_heartbeats: bool,
}

/// Peer heartbeats in [`SimConfig::peer_heartbeats`] runs: a ping each OSD tick, a peer reported
/// after 40 ms of silence (eight ticks, beyond the replication timeout).
pub const SIM_HEARTBEAT: shoal_osd::HeartbeatConfig = shoal_osd::HeartbeatConfig { interval_ms: 5, grace_ms: 40 };

/// Ticks a PG stays unfound under the operator's reverts, with every OSD up and reachable,
/// before the operator gives its unfound objects up ([`SimConfig::revert_unfound`]): far longer
/// than a revert's pull of a copy takes.
pub const DELETE_AFTER_TICKS: u32 = 200;

/// Backfill pushes refused in [`SimConfig::toofull`] runs, per thousand.
pub const TOOFULL_REFUSED_PER_MILLE: u64 = 250;

/// `osd_backfill_retry_interval_ms` in runs that refuse backfill pushes.
pub const TOOFULL_RETRY_MS: u64 = 20;

/// Something the nemesis does to the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The OSD process dies: its in-memory state is gone, its store stays.
    Crash(OsdId),
    /// The OSD starts again on its store and boots (a new interval for its PGs).
    Restart(OsdId),
    /// The OSD starts again on a new, empty store (a replaced disk).
    RestartEmpty(OsdId),
    /// The monitors mark the OSD down (as they do after its grace).
    MarkDown(OsdId),
    Out(OsdId),
    In(OsdId),
    /// The OSD's disk is replaced: it crashes and starts again at once on an empty store. Applied
    /// only when every PG is active and clean (delayed until then), so that the pool's size still
    /// covers every other fault: one store is lost only while every write is on all its members.
    ReplaceWhenClean(OsdId),
    /// `BitRotWhenClean`, and at the same moment the disk of another member of the damaged
    /// object's PG is replaced (crash, then at once a start on an empty store), before the
    /// monitors or the primary notice.
    RotAndReplacePeerWhenClean(OsdId),
    /// The OSD is cut off from its peers (messages both ways are lost; the monitors still hear
    /// it, so it stays up in the map) until `Heal`.
    Isolate(OsdId),
    Heal(OsdId),
    /// Silent damage on the OSD's disk: one bit of one object copy it holds flips (the store's
    /// checksums catch it on the next read). Applied only when every PG is active and clean, and
    /// only to an object with no write in flight, so the other members hold good copies; reads
    /// must still return the right bytes (repaired from a member), and at the end a deep scrub
    /// with repair of every PG must restore it.
    BitRotWhenClean(OsdId),
    /// A medium error on the OSD's disk: one block of one object copy it holds fails every read
    /// with EIO until rewritten. Same rules and expectations as `BitRotWhenClean`.
    ReadErrorWhenClean(OsdId),
    /// Silent damage to the one copy of an unacknowledged write: one bit flips in the OSD's copy
    /// of an object it leads with a write in flight, when that copy is newer than every other
    /// member's (the write reached no other member yet). Retried each tick until such a copy
    /// exists, the clients are done, or the simulated time passes the second field (µs). If the
    /// write then reaches no other member either, the object's newest version is lost and it is
    /// unfound; the operator's revert ([`SimConfig::revert_unfound`], required) keeps the newest
    /// copy of its history another member holds (decision 0066), or with none gives the object
    /// up, and the writer's resend of the write is applied again.
    BitRotUnacked(OsdId, u64),
    /// The OSD is cut off from the monitors: map updates stop reaching it and its commands to
    /// them fail, while it keeps serving clients and peers with the map it has. The monitors
    /// notice by its silence (a `MarkDown` the nemesis schedules after the grace).
    CutFromMons(OsdId),
    /// The OSD reaches the monitors again: it gets the current map, and if that map says it is
    /// down it boots again (as the daemon does), starting a new interval for its PGs.
    HealMons(OsdId),
    /// The link between two OSDs is cut (messages both ways are lost) while each still reaches
    /// every other OSD, the clients and the monitors, so both stay up in the map: a partial
    /// partition, until `HealLink` of the same pair.
    CutLink(OsdId, OsdId),
    HealLink(OsdId, OsdId),
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 1,
            osds: 5,
            hosts: 5,
            pool_size: 3,
            min_size: 1,
            pg_num: 16,
            clients: 3,
            objects_per_client: 8,
            writes_per_client: 60,
            min_delay_us: 10,
            max_delay_us: 2_000,
            appends: false,
            drop_client_per_mille: 0,
            client_timeout_us: 50_000,
            drop_replication_per_mille: 0,
            replication_timeout_us: 30_000,
            faults: Vec::new(),
            tick_us: 5_000,
            mutations: shoal_osd::Mutations::default(),
            backfill_chunk_bytes: None,
            backfill_chunk_objects: None,
            read_offload: false,
            omap: false,
            value_bytes: VALUE_BYTES,
            observers: 0,
            log_keep: None,
            dups_objects: None,
            refuse_push_per_mille: 0,
            snaps: false,
            early_replacement: false,
            revert_unfound: false,
            peer_heartbeats: false,
            watch: None,
        }
    }
}

impl SimConfig {
    /// A cluster under a nemesis, everything drawn from `seed`: 5 or 6 OSDs on as many hosts, a
    /// size-3 pool with `min_size` 2, three clients doing whole-object writes or appends, lost
    /// messages on every link, and two to seven faults in the first 250 ms: single crashes (some
    /// long enough for the monitors to mark the OSD down), two OSDs crashed together (so some PGs
    /// fall below `min_size` or lose every member and must stop serving), out/in, an OSD cut off
    /// from its peers, from the monitors or from both (then marked down by the monitors), at most
    /// one disk replaced by an empty one and at most one damaged (a flipped bit or an unreadable
    /// block).
    ///
    /// The faults stay within what the pool's size covers: every crashed or isolated OSD comes
    /// back, and the one store that is ever lost is lost while every write is on all its members.
    /// Within that, every acknowledged write must survive and never roll back.
    pub fn nemesis(seed: u64) -> SimConfig {
        let mut r = Rng::new(seed ^ 0x6e65_6d65_7369_7321);
        let osds = r.range(5, 6) as u32;
        let mut faults = Vec::new();
        // Per OSD: the time until which a fault already holds it (faults on one OSD never overlap).
        let mut busy_until = vec![0u64; osds as usize];
        let mut replaced = false;
        let mut rotted = false;
        let mut kept_out = false;
        let mut t = r.range(1_000, 20_000);
        for _ in 0..r.range(2, 7) {
            let free: Vec<u32> = (0..osds).filter(|i| busy_until[*i as usize] <= t).collect();
            if free.len() < 2 {
                t += 20_000;
                continue;
            }
            let pick = |r: &mut Rng, not: Option<u32>| loop {
                let o = free[r.range(0, free.len() as u64 - 1) as usize];
                if Some(o) != not {
                    return o;
                }
            };
            let x = pick(&mut r, None);
            let span = r.range(5_000, 80_000);
            match r.range(0, 13) {
                0..=2 => {
                    faults.push((t, Fault::Crash(OsdId(x))));
                    // Half the time the monitors notice first (a new interval without it).
                    if r.range(0, 1) == 0 {
                        faults.push((t + r.range(1_000, span - 1_000), Fault::MarkDown(OsdId(x))));
                    }
                    faults.push((t + span, Fault::Restart(OsdId(x))));
                    busy_until[x as usize] = t + span;
                }
                3 | 4 => {
                    let y = pick(&mut r, Some(x));
                    let gap = r.range(0, 3_000);
                    faults.push((t, Fault::Crash(OsdId(x))));
                    faults.push((t + gap, Fault::Crash(OsdId(y))));
                    faults.push((t + gap + 1_000, Fault::MarkDown(OsdId(x))));
                    if r.range(0, 1) == 0 {
                        faults.push((t + gap + 1_000, Fault::MarkDown(OsdId(y))));
                    }
                    let back_y = t + gap + span;
                    let back_x = t + r.range(span / 2, span * 2);
                    faults.push((back_x, Fault::Restart(OsdId(x))));
                    faults.push((back_y, Fault::Restart(OsdId(y))));
                    busy_until[x as usize] = back_x;
                    busy_until[y as usize] = back_y;
                }
                5 | 6 => {
                    faults.push((t, Fault::Out(OsdId(x))));
                    if kept_out || r.range(0, 3) != 0 {
                        faults.push((t + span, Fault::In(OsdId(x))));
                        busy_until[x as usize] = t + span;
                    } else {
                        kept_out = true;
                        busy_until[x as usize] = u64::MAX;
                    }
                }
                7 | 8 => {
                    faults.push((t, Fault::Isolate(OsdId(x))));
                    faults.push((t + span, Fault::Heal(OsdId(x))));
                    busy_until[x as usize] = t + span;
                }
                // A replaced disk and silent damage together exceed what three copies cover once
                // a crash leaves divergent writes on the third (the damaged copy, unnoticed by
                // "clean", may be the last of the acknowledged state): the replacement is drawn
                // only before any damage, and damage waits until it has happened (see `apply`).
                9 if !replaced && !rotted => {
                    replaced = true;
                    faults.push((t, Fault::ReplaceWhenClean(OsdId(x))));
                    busy_until[x as usize] = u64::MAX;
                }
                10 | 11 if !rotted => {
                    rotted = true;
                    if r.range(0, 1) == 0 {
                        faults.push((t, Fault::BitRotWhenClean(OsdId(x))));
                    } else {
                        faults.push((t, Fault::ReadErrorWhenClean(OsdId(x))));
                    }
                }
                12 | 13 => {
                    // Cut off from the monitors (and half the time from its peers too); the
                    // monitors mark it down once its grace has passed, most of the time before it
                    // is back.
                    let both = r.range(0, 1) == 0;
                    faults.push((t, Fault::CutFromMons(OsdId(x))));
                    if both {
                        faults.push((t, Fault::Isolate(OsdId(x))));
                    }
                    if r.range(0, 3) != 0 {
                        faults.push((t + r.range(1_000, span - 1_000), Fault::MarkDown(OsdId(x))));
                    }
                    faults.push((t + span, Fault::HealMons(OsdId(x))));
                    if both {
                        faults.push((t + span, Fault::Heal(OsdId(x))));
                    }
                    busy_until[x as usize] = t + span;
                }
                _ => {}
            }
            t += r.range(2_000, 40_000);
        }
        faults.sort_by_key(|(at, _)| *at);
        SimConfig {
            seed,
            osds,
            hosts: osds,
            pool_size: 3,
            min_size: 2,
            pg_num: 8,
            clients: 3,
            objects_per_client: 6,
            writes_per_client: 40,
            appends: r.range(0, 1) == 0,
            drop_client_per_mille: r.range(0, 30),
            client_timeout_us: 20_000,
            drop_replication_per_mille: r.range(0, 20),
            replication_timeout_us: 10_000,
            faults,
            // Drawn apart from the faults (which earlier seeds keep): half the seeds backfill
            // one object per push.
            backfill_chunk_objects: (Rng::new(seed ^ 0x006f_626a_6563_7473).range(0, 1) == 0).then_some(1),
            ..SimConfig::default()
        }
    }

    /// The OSDs' PG log bounds for `log_keep` (half as many trimmed at once) and `dups_objects`,
    /// if set.
    fn log_bounds(&self) -> Option<shoal_osd::pglog::LogBounds> {
        self.log_keep.map(|keep| {
            let bounds = shoal_osd::pglog::LogBounds::new(keep, (keep / 2).max(1));
            match self.dups_objects {
                Some(n) => bounds.with_dups_objects(n),
                None => bounds,
            }
        })
    }

    /// Sets up a new OSD core (at start, and at each restart) as this configuration asks.
    fn configure(&self, core: &mut OsdCore) {
        core.set_mutations(self.mutations);
        core.set_read_offload(self.read_offload);
        if let Some(bounds) = self.log_bounds() {
            core.set_log_bounds(bounds);
        }
        if self.peer_heartbeats {
            core.set_heartbeats(SIM_HEARTBEAT);
        }
    }

    /// [`SimConfig::nemesis`] with backfill in parts of 64 or 200 bytes (drawn from `seed`), so
    /// that the simulated objects (512 bytes, or a few appends) are sent in parts and writes land
    /// between them.
    pub fn nemesis_in_parts(seed: u64) -> SimConfig {
        let bytes = if Rng::new(seed ^ 0x7061_7274_7321).range(0, 1) == 0 { 64 } else { 200 };
        SimConfig { backfill_chunk_bytes: Some(bytes), ..SimConfig::nemesis(seed) }
    }

    /// [`SimConfig::nemesis_in_parts`] with a quarter of the pushes that bring data refused as
    /// too full: for backfill the primary rolls its target's cursor back while writes to the
    /// refused range are on their way to it; for recovery the objects stay missing and writes to
    /// them wait; both try again after [`TOOFULL_RETRY_MS`].
    pub fn toofull(seed: u64) -> SimConfig {
        SimConfig { refuse_push_per_mille: TOOFULL_REFUSED_PER_MILLE, ..SimConfig::nemesis_in_parts(seed) }
    }

    /// A damaged copy and a replaced disk at the same moment: once every PG is clean, one bit of
    /// a copy on one OSD flips (preferably a primary's copy of an object in use) and another
    /// member of its PG gets an empty disk, while the clients keep going (the rest as
    /// [`SimConfig::nemesis`] draws it for `seed`, without its faults). The primary repairs from
    /// members whose stores it knew before the replacement: the restarted member must not pass
    /// off its empty store as the PG's content.
    pub fn rot_and_replace(seed: u64) -> SimConfig {
        let base = SimConfig::nemesis(seed);
        let mut r = Rng::new(seed ^ 0x726f_7421);
        let x = r.range(0, u64::from(base.osds) - 1) as u32;
        let t = r.range(5_000, 60_000);
        let faults = vec![(t, Fault::RotAndReplacePeerWhenClean(OsdId(x)))];
        SimConfig { faults, ..base }
    }

    /// [`SimConfig::nemesis`] (its faults too) with three `BitRotUnacked` faults at times drawn
    /// from `seed` (each tried for 50 ms), and the operator's revert on: the shape of decision
    /// 0066, where the newest copy of an object's history is on an OSD other than its primary.
    pub fn rot_unacked(seed: u64) -> SimConfig {
        let base = SimConfig::nemesis(seed);
        let mut r = Rng::new(seed ^ 0x756e_6163_6b21);
        let mut faults = base.faults.clone();
        for _ in 0..3 {
            let x = r.range(0, u64::from(base.osds) - 1) as u32;
            let t = r.range(5_000, 60_000);
            faults.push((t, Fault::BitRotUnacked(OsdId(x), t + 50_000)));
        }
        faults.sort_by_key(|(t, _)| *t);
        SimConfig { faults, revert_unfound: true, ..base }
    }

    /// This configuration without the faults that lose or damage a store (a replaced disk, a
    /// flipped bit, an unreadable block), for a pool of one copy, which no code could keep
    /// through them: what is left (crashes on kept stores, OSDs marked down, out and in, cut off
    /// from peers or monitors) must still lose no acknowledged write. A pool of one copy is the
    /// transient HPC cluster's shape (seed 004), where every PG has a single member, peering has
    /// no one to compare with, and an OSD taken out hands its only copy to another by backfill.
    #[must_use]
    pub fn without_store_loss(mut self) -> SimConfig {
        self.faults.retain(|(_, f)| {
            !matches!(
                f,
                Fault::ReplaceWhenClean(_)
                    | Fault::RotAndReplacePeerWhenClean(_)
                    | Fault::BitRotWhenClean(_)
                    | Fault::ReadErrorWhenClean(_)
                    | Fault::BitRotUnacked(..)
                    | Fault::RestartEmpty(_)
            )
        });
        self
    }

    /// This configuration with writes of `value_bytes` each, and a backfill part size (if it
    /// sends in parts) grown with them, so that an object takes as many parts as at
    /// [`VALUE_BYTES`]: about 3 to 8. The simulation loses single messages on links that stay
    /// up, which TCP never does (a real peer call fails only with its connection), and an
    /// unanswered push makes its primary peer again, which starts a partly sent object over
    /// (decision 0095). An object of `n` parts then needs about `(1 - p)^(-2n)` tries at a loss
    /// rate of `p` per message: at the nemesis' rates of up to 2%, an object of 12 KiB in parts
    /// of 64 bytes (192 parts) is never sent whole, the PG never gets clean, and the run cannot
    /// finish. An explicit part size (`--chunk`) is applied after this and wins.
    #[must_use]
    pub fn with_value_bytes(mut self, value_bytes: usize) -> SimConfig {
        if let Some(part_bytes) = self.backfill_chunk_bytes
            && value_bytes > self.value_bytes
        {
            let grown = part_bytes.saturating_mul(value_bytes as u64) / self.value_bytes.max(1) as u64;
            self.backfill_chunk_bytes = Some(grown.min(shoal_map::config::BACKFILL_CHUNK_BYTES_MAX));
        }
        self.value_bytes = value_bytes;
        self
    }

    /// This configuration with one to three links between two OSDs cut for 5 to 80 ms each
    /// (drawn from the seed, apart from the faults) in the first 250 ms: partial partitions, in
    /// which both OSDs stay up and reach everyone else. Nothing is lost, so every acknowledged
    /// write must survive, whatever else the nemesis does meanwhile.
    #[must_use]
    pub fn with_link_cuts(mut self) -> SimConfig {
        let mut r = Rng::new(self.seed ^ 0x6c69_6e6b_7321);
        if self.osds < 2 {
            return self;
        }
        for _ in 0..r.range(1, 3) {
            let a = r.range(0, u64::from(self.osds) - 1) as u32;
            let b = (a + r.range(1, u64::from(self.osds) - 1) as u32) % self.osds;
            let (a, b) = (OsdId(a.min(b)), OsdId(a.max(b)));
            let at = r.range(1_000, 250_000);
            self.faults.push((at, Fault::CutLink(a, b)));
            self.faults.push((at + r.range(5_000, 80_000), Fault::HealLink(a, b)));
        }
        self.faults.sort_by_key(|(at, _)| *at);
        self
    }

    /// This configuration with peer heartbeats ([`SimConfig::peer_heartbeats`]) and one OSD
    /// (drawn from the seed, apart from the faults) cut off from its peers, but not from the
    /// monitors, for 100 to 400 ms from some time in the first 150 ms: far longer than the peer
    /// grace ([`SIM_HEARTBEAT`]), so its peers report it and it is marked down while the cut
    /// lasts, and it boots again once the cut heals. Every acknowledged write must survive.
    #[must_use]
    pub fn with_peer_heartbeats(mut self) -> SimConfig {
        self.peer_heartbeats = true;
        if self.osds < 3 {
            return self;
        }
        let mut r = Rng::new(self.seed ^ 0x6865_6172_7462);
        let osd = OsdId(r.range(0, u64::from(self.osds) - 1) as u32);
        let at = r.range(1_000, 150_000);
        self.faults.push((at, Fault::Isolate(osd)));
        self.faults.push((at + r.range(100_000, 400_000), Fault::Heal(osd)));
        self.faults.sort_by_key(|(at, _)| *at);
        self
    }

    /// This configuration with its crashes widened to whole hosts, as a power cut takes every
    /// OSD of a machine at once: half the crashes (drawn from the seed, apart from the faults)
    /// also crash every other OSD of the crashed one's host (OSD `i` lives on host `i % hosts`)
    /// that the nemesis leaves alone meanwhile, mark it down when the first is marked down, and
    /// restart it when the first restarts. OSDs with a fault that loses or damages their store,
    /// or that are kept out for good, are left out: a host crash keeps every store, so the pool's
    /// size still covers it, and every acknowledged write must survive it.
    #[must_use]
    pub fn with_host_crashes(mut self) -> SimConfig {
        let mut r = Rng::new(self.seed ^ 0x686f_7374_7321);
        let hosts = self.hosts.max(1);
        // OSDs whose store a fault replaces or damages, or that go out and never come back in.
        let spared: Vec<u32> = (0..self.osds)
            .filter(|&z| {
                let outs = self.faults.iter().filter(|(_, f)| *f == Fault::Out(OsdId(z))).count();
                let ins = self.faults.iter().filter(|(_, f)| *f == Fault::In(OsdId(z))).count();
                outs > ins
                    || self.faults.iter().any(|(_, f)| {
                        matches!(f,
                            Fault::ReplaceWhenClean(o) | Fault::RotAndReplacePeerWhenClean(o)
                            | Fault::BitRotWhenClean(o) | Fault::ReadErrorWhenClean(o) | Fault::RestartEmpty(o)
                            | Fault::BitRotUnacked(o, _)
                            if o.0 == z)
                    })
            })
            .collect();
        let mut added = Vec::new();
        for (i, &(at, fault)) in self.faults.iter().enumerate() {
            let Fault::Crash(x) = fault else { continue };
            if r.range(0, 1) == 1 {
                continue;
            }
            // The first crash's restart and (if any) its mark-down before that.
            let Some(back) = self.faults[i..].iter().find(|(_, f)| *f == Fault::Restart(x)).map(|(t, _)| *t) else {
                continue;
            };
            let down = self.faults[i..].iter().find(|(t, f)| *f == Fault::MarkDown(x) && *t <= back).map(|(t, _)| *t);
            for z in (0..self.osds).filter(|&z| z != x.0 && z % hosts == x.0 % hosts && !spared.contains(&z)) {
                // Left alone from a little before the crash to a little after the restart, by
                // the nemesis and by host crashes added already.
                let (from, to) = (at.saturating_sub(5_000), back + 5_000);
                let busy = |list: &[(u64, Fault)]| {
                    list.iter().any(|(t, f)| (from..=to).contains(t) && fault_osd(f) == Some(OsdId(z)))
                };
                if busy(&self.faults) || busy(&added) {
                    continue;
                }
                added.push((at, Fault::Crash(OsdId(z))));
                if let Some(t) = down {
                    added.push((t, Fault::MarkDown(OsdId(z))));
                }
                added.push((back, Fault::Restart(OsdId(z))));
            }
        }
        self.faults.extend(added);
        // Stable: a host's crashes stay after the fault they widen at the same moment.
        self.faults.sort_by_key(|(at, _)| *at);
        self
    }
}

/// Whether `f` is applied only once the cluster is clean (it is retried every tick until then).
fn waits_for_clean(f: &Fault) -> bool {
    matches!(
        f,
        Fault::ReplaceWhenClean(_)
            | Fault::RotAndReplacePeerWhenClean(_)
            | Fault::BitRotWhenClean(_)
            | Fault::ReadErrorWhenClean(_)
    )
}

/// The OSD a fault acts on.
fn fault_osd(f: &Fault) -> Option<OsdId> {
    match *f {
        Fault::Crash(o)
        | Fault::Restart(o)
        | Fault::RestartEmpty(o)
        | Fault::MarkDown(o)
        | Fault::Out(o)
        | Fault::In(o)
        | Fault::ReplaceWhenClean(o)
        | Fault::RotAndReplacePeerWhenClean(o)
        | Fault::Isolate(o)
        | Fault::Heal(o)
        | Fault::BitRotWhenClean(o)
        | Fault::ReadErrorWhenClean(o)
        | Fault::BitRotUnacked(o, _)
        | Fault::CutFromMons(o)
        | Fault::HealMons(o) => Some(o),
        // Two OSDs, neither of them stopped or damaged: nothing a host crash must keep clear of.
        Fault::CutLink(..) | Fault::HealLink(..) => None,
    }
}

/// What a run produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Hash of every delivered message, in delivery order: equal hashes mean equal runs.
    pub trace_hash: u64,
    pub delivered: u64,
    pub acked_writes: u64,
    /// Client/OSD messages the network lost.
    pub dropped: u64,
    /// Of those, messages between two OSDs whose link was cut (`Fault::CutLink`).
    pub dropped_by_link_cuts: u64,
    /// Pushes refused as too full (`refuse_push_per_mille`).
    pub pushes_refused: u64,
    /// Activations delivered that backfill a member from its first object, and that resume a
    /// member's backfill past its cursor (decision 0048).
    pub backfills_started: u64,
    pub backfills_resumed: u64,
    /// Objects backfill chunks kept on their targets instead of sending them (decision 0049).
    pub backfill_objects_kept: u64,
    /// Clones recovery pushes left out because their targets held them (decision 0065).
    pub recovery_clones_kept: u64,
    /// Clones sent beside a later part of their head, not its first (decision 0067).
    pub clones_in_later_parts: u64,
    pub verified_reads: u64,
    /// Reads at a snapshot checked against the model (`SimConfig::snaps`), by clients during the
    /// run and of every member's store at the end.
    pub snap_reads_verified: u64,
    /// Resends after `WrongPrimary` (map changes seen by clients late).
    pub resends: u64,
    /// Revert commands sent to primaries of PGs with unfound objects
    /// ([`SimConfig::revert_unfound`]).
    pub reverts_asked: u64,
    /// Pulls of a copy an operator's revert keeps from another OSD (decision 0066), whole, and
    /// of parts of one (a copy too large for one message, over a primary's copy it could not
    /// keep).
    pub revert_pulls: u64,
    pub revert_parts_pulled: u64,
    /// Copies damaged by `BitRotUnacked`.
    pub unacked_rotted: u64,
    /// PGs whose unfound objects the operator gave up as lost once reverts could do no more.
    pub unfound_deleted: u64,
    /// Needs of "whatever the authority holds" that peering named with a version (decision
    /// 0053), over every OSD incarnation.
    pub needs_named: u64,
    /// OSDs the monitor marked down on its peers' reports ([`SimConfig::peer_heartbeats`]).
    pub marked_down_by_peers: u64,
    /// Simulated time of the last answer a client accepted (a write acknowledged, a read
    /// checked), in microseconds: how long the clients' work took, faults included.
    pub last_answer_us: u64,
    /// Simulated time at the end, in microseconds.
    pub end_us: u64,
    /// Final map epoch.
    pub epoch: u64,
    /// PG logs on the final acting sets that no longer reach their PG's first write (trimmed):
    /// shows that a run with short logs peered through trimmed histories.
    pub trimmed_logs: u64,
    /// Problems found (empty on success).
    pub violations: Vec<String>,
}

/// A node of the simulated network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Node {
    Osd(u32),
    Client(u32),
    /// The operator (`shoal pg repair`): its commands go straight to a core; answers are dropped.
    Operator,
}

impl Node {
    /// The token an OSD core uses to reply to this node.
    fn token(self) -> u64 {
        match self {
            Node::Osd(i) => u64::from(i),
            Node::Client(i) => 1_000_000 + u64::from(i),
            Node::Operator => 2_000_000,
        }
    }
    fn from_token(t: u64) -> Node {
        if t >= 2_000_000 {
            Node::Operator
        } else if t >= 1_000_000 {
            Node::Client((t - 1_000_000) as u32)
        } else {
            Node::Osd(t as u32)
        }
    }
}

#[derive(Debug)]
enum Delivery {
    /// A frame on the wire from one node to another.
    Frame { from: Node, to: Node, frame: Frame },
    /// A map update pushed by the monitor reaching a node.
    Map { to: Node, update: Arc<MapUpdate> },
    /// A client wakes up to issue its next operations.
    ClientTick(u32),
    /// A client's request `tid` has waited for its answer since attempt `attempt`.
    ClientTimeout { client: u32, tid: u64, attempt: u32 },
    /// A replicated write's time to be answered is up.
    ReplicationTimeout { rid: u64 },
    /// A fault from the configuration.
    Fault(Fault),
    /// Every OSD ticks.
    Tick,
    /// The monitors answer an OSD's command.
    MonDone { osd: u32, epoch: Option<u64> },
    /// An OSD's read beside its worker runs (and is answered), if that OSD has not crashed since.
    Read { osd: u32, incarnation: u64, job: shoal_osd::ReadJob },
    /// (`SimConfig::snaps`) A snapshot is taken, or a live one removed.
    Snapshot { take: bool },
}

/// What a client operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Work {
    /// Replaces the object by the value of this seed (or appends a piece of it).
    Write(u64),
    /// Reads the object: its owner checks the model, an observer the order of its writes.
    Read,
    /// (`SimConfig::snaps`) Removes the head (its clones stay).
    Remove,
    /// (`SimConfig::snaps`) Rolls the head back to a snapshot live when it is issued (if none is,
    /// a write of the value of this seed instead).
    Rollback(u64),
    /// (`SimConfig::snaps`) Trims the clones of snapshots removed so far.
    Trim,
    /// (`SimConfig::snaps`) Reads at a snapshot live when it is issued (the head if none is).
    ReadSnap,
}

impl Work {
    /// Whether it changes the object (its snapshot state included).
    fn writes(self) -> bool {
        matches!(self, Work::Write(_) | Work::Remove | Work::Rollback(_) | Work::Trim)
    }
}

struct Client {
    map: Arc<ClusterMap>,
    /// Operations not yet sent, in order.
    queue: VecDeque<(ObjectRef, Work)>,
    /// Per object: the operation in flight (request id → what it is).
    in_flight: HashMap<u64, InFlight>,
    busy_objects: BTreeMap<ObjectRef, u64>,
    /// Requests waiting for a newer map before resending.
    parked: Vec<(u64, u64)>,
    next_tid: u64,
}

/// An object of the model: (owning client, object index).
type ObjectRef = (u32, u32);

/// (`SimConfig::snaps`) An acknowledged change of an object: the snapshot `seq` it was issued
/// under, and the object's content after it (`None`: removed).
type Change = (u64, Option<Vec<u8>>);

#[derive(Debug, Clone)]
struct InFlight {
    object: ObjectRef,
    /// When it was first sent, and how many writes of the object had been acknowledged then.
    issued_us: u64,
    acked_before: usize,
    /// Sends so far; a timeout for an older attempt is stale.
    attempt: u32,
    /// Map epoch the latest attempt was sent with.
    sent_epoch: u64,
    work: Work,
    /// (`SimConfig::snaps`) The snapshot context when it was issued (`seq`, live snapshots newest
    /// first), which every attempt carries: a write's place in the snapshots' history.
    ctx: Option<(u64, Vec<u64>)>,
    /// The snapshot a `ReadSnap` reads at or a `Rollback` restores.
    snap: Option<u64>,
    reqid: ReqId,
}

/// The simulation.
pub struct Simulation {
    cfg: SimConfig,
    rng: Rng,
    now_us: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    pending: HashMap<u64, Delivery>,
    /// Last delivery time per directed link, to keep each connection FIFO.
    link_clock: HashMap<(Node, Node), u64>,
    /// Last map push time per subscriber (pushes on one connection stay in order).
    mon_link_clock: HashMap<Node, u64>,
    mon: MonCore,
    osds: BTreeMap<u32, OsdCore>,
    clients: Vec<Client>,
    /// Model: each object's content after its acknowledged writes.
    model: BTreeMap<ObjectRef, Vec<u8>>,
    /// Model: each object's omap after its acknowledged writes (with `SimConfig::omap`).
    model_omap: BTreeMap<ObjectRef, BTreeMap<Vec<u8>, Vec<u8>>>,
    /// (`SimConfig::snaps`) The newest snapshot id taken, and the live snapshots, newest first.
    snap_seq: u64,
    live_snaps: Vec<u64>,
    /// (`SimConfig::snaps`) Per object, its acknowledged changes in order: the snapshot `seq` the
    /// change was issued under, and the content after it (`None`: removed).
    history: BTreeMap<ObjectRef, Vec<Change>>,
    /// Every object's writes (their value seeds) in the order its owner sends them, and how many
    /// of them are acknowledged.
    writes: BTreeMap<ObjectRef, Vec<u64>>,
    acked: BTreeMap<ObjectRef, usize>,
    /// Per object, the reads that finished: (when, how many of its writes they saw).
    observed: BTreeMap<ObjectRef, Vec<(u64, usize)>>,
    /// Request ids of replicated writes a primary sent, so replies can be routed back.
    /// Replicated writes in flight: request id → (write, primary, replica).
    rep_requests: BTreeMap<u64, (ReqId, u32, u32)>,
    /// Peering and recovery calls in flight: request id → (caller, callee, what for).
    peer_calls: HashMap<u64, (u32, u32, shoal_osd::PeerCall)>,
    /// Stores of crashed OSDs, until they restart.
    crashed: BTreeMap<u32, Arc<dyn ObjectStore>>,
    /// Crashes per OSD so far: a read beside a worker that crashed is never answered.
    incarnations: BTreeMap<u32, u64>,
    /// Every OSD's store as the engine it is (to damage it behind the OSD's back).
    engines: BTreeMap<u32, Arc<MemEngine>>,
    /// Object copies damaged by `BitRotWhenClean`.
    rotted: u32,
    /// What `SimConfig::watch` last logged.
    watched: String,
    /// Per PG: consecutive ticks the operator's revert left it unfound with everything up
    /// ([`Simulation::revert_unfound`]).
    unfound_ticks: BTreeMap<shoal_map::PgId, u32>,

    /// OSDs cut off from their peers.
    isolated: std::collections::BTreeSet<u32>,
    /// Links between two OSDs that are cut, as (lower id, higher id), with how many cuts of the
    /// pair are in force (cuts of one pair may overlap).
    cut_links: BTreeMap<(u32, u32), u32>,
    /// OSDs cut off from the monitors.
    mon_cut: std::collections::BTreeSet<u32>,
    /// Running OSDs marked down that wait to reach their peers before they boot again
    /// ([`SimConfig::peer_heartbeats`]).
    awaiting_peers: std::collections::BTreeSet<u32>,
    next_rep_request: u64,
    hash: xxhash_rust::xxh3::Xxh3,
    outcome: Outcome,
}

const POOL: &str = "sim";
/// Bytes of each object value by default (small: the simulation is about ordering, not
/// bandwidth; see [`SimConfig::value_bytes`]).
pub const VALUE_BYTES: usize = 512;
/// Bytes of each appended piece.
const APPEND_BYTES: usize = 48;

/// The value write `seed` writes, `len_bytes` long (a shorter one is a prefix of a longer one).
fn value(seed: u64, len_bytes: usize) -> Vec<u8> {
    let mut r = Rng::new(seed);
    (0..len_bytes).map(|_| r.next_u64() as u8).collect()
}

fn piece(seed: u64) -> Vec<u8> {
    value(seed, APPEND_BYTES)
}

/// Keys an object's omap draws from (with `SimConfig::omap`).
const OMAP_KEYS: u64 = 16;
/// Omap entries each write sets.
const OMAP_PER_WRITE: usize = 3;

/// The omap entries the write of `seed` sets: keys drawn from [`OMAP_KEYS`], values of 20 to 60
/// bytes, all from the seed.
fn omap_entries(seed: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut r = Rng::new(seed ^ 0x6f6d_6170);
    (0..OMAP_PER_WRITE)
        .map(|_| {
            let key = format!("k{:02}", r.range(0, OMAP_KEYS - 1)).into_bytes();
            let len = r.range(20, 60) as usize;
            (key, (0..len).map(|_| r.next_u64() as u8).collect())
        })
        .collect()
}

fn object_name((client, object): ObjectRef) -> String {
    format!("c{client}-o{object}")
}

impl Simulation {
    pub fn new(cfg: SimConfig) -> Simulation {
        let mut rng = Rng::new(cfg.seed);
        let mut mons = BTreeMap::new();
        mons.insert(0, MonInfo { addr: "127.0.0.1:1".parse().expect("literal address") });
        let mut map = ClusterMap::new(format!("sim-{}", cfg.seed), mons);
        let mut osds = BTreeMap::new();
        for i in 0..cfg.osds {
            let host = format!("host-{}", i % cfg.hosts.max(1));
            map.execute(&Command::CreateOsd { id: Some(OsdId(i)), host, weight: Weight::ONE }).expect("create osd");
            let addr = format!("127.0.0.1:{}", 7000 + i).parse().expect("literal address");
            map.execute(&Command::OsdBoot { id: OsdId(i), addr }).expect("boot osd");
        }
        let pool = Command::CreatePool {
            name: POOL.into(),
            size: cfg.pool_size,
            min_size: Some(cfg.min_size),
            pg_num: cfg.pg_num,
            max_object_bytes: None,
        };
        map.execute(&pool).expect("create pool");
        if let Some(bytes) = cfg.backfill_chunk_bytes {
            let key = shoal_map::config::BACKFILL_CHUNK_BYTES.to_string();
            map.execute(&Command::ConfigSet { key, value: Some(bytes) }).expect("set the backfill chunk");
        }
        if let Some(objects) = cfg.backfill_chunk_objects {
            let key = shoal_map::config::BACKFILL_CHUNK_OBJECTS.to_string();
            map.execute(&Command::ConfigSet { key, value: Some(objects) }).expect("set the backfill chunk's objects");
        }
        if cfg.refuse_push_per_mille > 0 {
            let key = shoal_map::config::BACKFILL_RETRY_INTERVAL_MS.to_string();
            map.execute(&Command::ConfigSet { key, value: Some(TOOFULL_RETRY_MS) }).expect("set the backfill retry");
        }
        let shared = Arc::new(map.clone());
        let mut mon_cfg = CoreConfig::new(0);
        if cfg.peer_heartbeats {
            // Silence stays the nemesis's to judge (`MarkDown`); reports arrive every 5 ms.
            mon_cfg.osd_grace_ms = u64::MAX / 2;
            mon_cfg.failure_report_window_ms = 20;
        }
        let mon = MonCore::standalone(mon_cfg, map);
        let mut engines = BTreeMap::new();
        for i in 0..cfg.osds {
            let engine = Arc::new(MemEngine::new_mem_without_reserve(256 << 20).expect("mem store"));
            engines.insert(i, engine.clone());
            let store: Arc<dyn ObjectStore> = engine;
            let mut core = OsdCore::new(OsdId(i), store, shared.clone()).expect("osd core");
            cfg.configure(&mut core);
            osds.insert(i, core);
        }
        let mut clients = Vec::new();
        let mut writes: BTreeMap<ObjectRef, Vec<u64>> = BTreeMap::new();
        let mut snap_rng = Rng::new(cfg.seed ^ 0x736e_6170_7321);
        let new_client = |queue| Client {
            map: shared.clone(),
            queue,
            in_flight: HashMap::new(),
            busy_objects: BTreeMap::new(),
            parked: Vec::new(),
            next_tid: 1,
        };
        for c in 0..cfg.clients {
            let mut queue = VecDeque::new();
            for _ in 0..cfg.writes_per_client {
                let object = (c, rng.range(0, u64::from(cfg.objects_per_client.max(1)) - 1) as u32);
                let seed = rng.next_u64();
                // (Snapshot runs draw their extra kinds from a generator of their own, so that
                // every other run's seeds keep their events.)
                let work = if cfg.snaps {
                    match snap_rng.range(0, 19) {
                        0 => Work::Remove,
                        1 | 2 => Work::Rollback(seed),
                        _ => Work::Write(seed),
                    }
                } else {
                    Work::Write(seed)
                };
                queue.push_back((object, work));
                if work == Work::Write(seed) {
                    writes.entry(object).or_default().push(seed);
                }
                // Read back now and then: a read must see the latest acknowledged write.
                if rng.range(0, 2) == 0 {
                    let read = if cfg.snaps && snap_rng.range(0, 1) == 0 { Work::ReadSnap } else { Work::Read };
                    queue.push_back((object, read));
                }
            }
            clients.push(new_client(queue));
        }
        for _ in 0..cfg.observers {
            let mut queue = VecDeque::new();
            for _ in 0..cfg.writes_per_client {
                let owner = rng.range(0, u64::from(cfg.clients.max(1)) - 1) as u32;
                let object = rng.range(0, u64::from(cfg.objects_per_client.max(1)) - 1) as u32;
                queue.push_back(((owner, object), Work::Read));
            }
            clients.push(new_client(queue));
        }
        let outcome = Outcome {
            trace_hash: 0,
            delivered: 0,
            acked_writes: 0,
            dropped: 0,
            dropped_by_link_cuts: 0,
            marked_down_by_peers: 0,
            last_answer_us: 0,
            pushes_refused: 0,
            backfills_started: 0,
            backfills_resumed: 0,
            backfill_objects_kept: 0,
            recovery_clones_kept: 0,
            clones_in_later_parts: 0,
            verified_reads: 0,
            snap_reads_verified: 0,
            resends: 0,
            reverts_asked: 0,
            revert_pulls: 0,
            revert_parts_pulled: 0,
            unacked_rotted: 0,
            unfound_deleted: 0,
            needs_named: 0,
            end_us: 0,
            epoch: 0,
            trimmed_logs: 0,
            violations: Vec::new(),
        };
        let mut sim = Simulation {
            cfg,
            rng,
            now_us: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            pending: HashMap::new(),
            link_clock: HashMap::new(),
            mon_link_clock: HashMap::new(),
            mon,
            osds,
            clients,
            model: BTreeMap::new(),
            model_omap: BTreeMap::new(),
            snap_seq: 0,
            live_snaps: Vec::new(),
            history: BTreeMap::new(),
            writes,
            acked: BTreeMap::new(),
            observed: BTreeMap::new(),
            rep_requests: BTreeMap::new(),
            peer_calls: HashMap::new(),
            crashed: BTreeMap::new(),
            incarnations: BTreeMap::new(),
            engines,
            rotted: 0,
            watched: String::new(),
            unfound_ticks: BTreeMap::new(),
            isolated: std::collections::BTreeSet::new(),
            cut_links: BTreeMap::new(),
            mon_cut: std::collections::BTreeSet::new(),
            awaiting_peers: std::collections::BTreeSet::new(),
            next_rep_request: 1,
            hash: xxhash_rust::xxh3::Xxh3::new(),
            outcome,
        };
        // Every node subscribes to map updates (the reply is the map it already has).
        let nodes: Vec<Node> =
            sim.osds.keys().map(|i| Node::Osd(*i)).chain((0..sim.clients.len() as u32).map(Node::Client)).collect();
        for n in nodes {
            let epoch = sim.mon.map().epoch;
            let to = ReplyTo { conn: n.token(), request_id: 0 };
            let actions = sim.mon.handle(MonEvent::GetMap { to, have_epoch: epoch, subscribe: true });
            sim.mon_actions(actions);
        }
        for c in 0..sim.clients.len() as u32 {
            let at = sim.rng.range(0, 100);
            sim.schedule(at, Delivery::ClientTick(c));
        }
        for (at, fault) in sim.cfg.faults.clone() {
            sim.schedule(at, Delivery::Fault(fault));
        }
        if sim.cfg.snaps {
            // Snapshots taken over the clients' busy time, and a few removed (each a random live
            // one: not always the oldest).
            for _ in 0..snap_rng.range(3, 6) {
                sim.schedule(snap_rng.range(500, 200_000), Delivery::Snapshot { take: true });
            }
            for _ in 0..snap_rng.range(1, 3) {
                sim.schedule(snap_rng.range(20_000, 250_000), Delivery::Snapshot { take: false });
            }
        }
        // Every OSD sees the map once at start (as the daemon's first map), which starts peering.
        let map = Arc::new(sim.mon.map().clone());
        let ids: Vec<u32> = sim.osds.keys().copied().collect();
        for i in ids {
            sim.osd_event(i, Event::Map(map.clone()));
        }
        sim.schedule(sim.cfg.tick_us, Delivery::Tick);
        sim
    }

    fn schedule(&mut self, at_us: u64, d: Delivery) {
        self.seq += 1;
        self.queue.push(Reverse((at_us, self.seq)));
        self.pending.insert(self.seq, d);
    }

    fn send(&mut self, from: Node, to: Node, frame: Frame) {
        if let (Node::Osd(a), Node::Osd(b)) = (from, to)
            && (self.isolated.contains(&a)
                || self.isolated.contains(&b)
                || self.cut_links.contains_key(&(a.min(b), a.max(b))))
        {
            // A partition: the sender finds out by its call's timeout.
            self.outcome.dropped += 1;
            if !self.isolated.contains(&a) && !self.isolated.contains(&b) {
                self.outcome.dropped_by_link_cuts += 1;
            }
            self.trace(&[format!("cut {from:?}>{to:?}:{}", frame.request_id).as_bytes()]);
            return;
        }
        let client_link = matches!(from, Node::Client(_)) || matches!(to, Node::Client(_));
        let drop_per_mille =
            if client_link { self.cfg.drop_client_per_mille } else { self.cfg.drop_replication_per_mille };
        if drop_per_mille > 0 && self.rng.range(0, 999) < drop_per_mille {
            self.outcome.dropped += 1;
            self.trace(&[format!("drop {from:?}>{to:?}:{}", frame.request_id).as_bytes()]);
            return;
        }
        let delay = self.rng.range(self.cfg.min_delay_us, self.cfg.max_delay_us);
        // FIFO per directed link, as on one TCP connection.
        let earliest = self.link_clock.get(&(from, to)).copied().unwrap_or(0);
        let at = (self.now_us + delay).max(earliest);
        self.link_clock.insert((from, to), at);
        self.schedule(at, Delivery::Frame { from, to, frame });
    }

    /// Runs until every client's operations are acknowledged or `max_events` were delivered.
    pub fn run(mut self, max_events: u64) -> Outcome {
        while let Some(Reverse((at, seq))) = self.queue.pop() {
            if self.outcome.delivered >= max_events {
                self.outcome.violations.push(format!("did not finish within {max_events} events"));
                break;
            }
            let Some(d) = self.pending.remove(&seq) else { continue };
            self.now_us = at;
            self.outcome.delivered += 1;
            self.deliver(d);
            if self.cfg.watch.is_some() {
                self.log_watched();
            }
        }
        for (c, client) in self.clients.iter().enumerate() {
            if !client.queue.is_empty() || !client.in_flight.is_empty() || !client.parked.is_empty() {
                self.outcome.violations.push(format!(
                    "client {c} has unfinished operations: queued {:?}, in flight {:?}, parked {:?}",
                    client.queue.iter().take(4).collect::<Vec<_>>(),
                    client.in_flight.iter().take(4).collect::<Vec<_>>(),
                    client.parked.iter().take(4).collect::<Vec<_>>()
                ));
            }
        }
        if self.outcome.violations.is_empty() && !self.quiescent() {
            self.outcome.violations.push("the run ended with the cluster not active+clean".into());
        }
        self.outcome.needs_named += self.osds.values().map(OsdCore::needs_named).sum::<u64>();
        self.check_replicas();
        self.check_no_temporary_sets();
        if !self.outcome.violations.is_empty() {
            self.diagnose();
        }
        self.outcome.trace_hash = self.hash.digest();
        self.outcome.end_us = self.now_us;
        self.outcome.epoch = self.mon.map().epoch;
        self.outcome
    }

    /// (`SimConfig::watch`) Logs what every OSD holds of the watched object if it changed since
    /// the last event.
    fn log_watched(&mut self) {
        let Some(name) = self.cfg.watch.clone() else { return };
        let map = self.mon.map();
        let Some(loc) = map.pool_by_name(POOL).ok().and_then(|p| map.locate(p.id, &name).ok()) else { return };
        let coll = shoal_osd::exec::pg_collection(loc.pg);
        let mut held = String::new();
        for (id, core) in &self.osds {
            let store = &**core.store();
            let head = store.exists(&coll, &name).unwrap_or(false);
            let state = shoal_osd::snaps::load(store, &coll, &name, head).map(|(s, _)| s);
            let companions = shoal_osd::snaps::companions(store, &coll, &name).unwrap_or_default();
            if head || !companions.is_empty() {
                held.push_str(&format!(" osd.{id}: head {head}, state {state:?}, companions {companions:?};"));
            }
        }
        if held != self.watched {
            tracing::info!(t_us = self.now_us, "watch {name} ({}):{held}", loc.pg);
            self.watched = held;
        }
    }

    fn trace(&mut self, parts: &[&[u8]]) {
        for p in parts {
            self.hash.update(&(p.len() as u64).to_le_bytes());
            self.hash.update(p);
        }
    }

    fn deliver(&mut self, d: Delivery) {
        match d {
            Delivery::Frame { from, to, frame } => {
                // As a socket would: the receiver gets the whole payload in one buffer.
                let frame = Frame::new(frame.msg_type, frame.request_id, frame.into_payload());
                let tag = format!("{from:?}>{to:?}:{}:{}", frame.msg_type, self.now_us);
                self.trace(&[tag.as_bytes(), &frame.payload]);
                match to {
                    Node::Osd(i) => self.deliver_to_osd(i, from, frame),
                    Node::Client(c) => self.deliver_to_client(c, from, frame),
                    // The operator's commands are repeated on every tick; their answers are only
                    // logged, for a replay.
                    Node::Operator => {
                        if let Ok((reply, _)) = decode::<shoal_proto::osd::PgCommandReply>(frame.payload.clone()) {
                            tracing::debug!(t_us = self.now_us, ?from, result = ?reply.result, "operator: answer");
                        }
                    }
                }
            }
            Delivery::Map { to, update } => {
                if let Node::Osd(i) = to
                    && self.mon_cut.contains(&i)
                {
                    // The connection to the monitors is broken: the update is lost.
                    self.trace(&[format!("map lost {to:?}").as_bytes()]);
                    return;
                }
                let current = match to {
                    Node::Osd(i) => self.osds.get(&i).map(|o| o.map().clone()),
                    Node::Client(c) => Some(self.clients[c as usize].map.clone()),
                    Node::Operator => None,
                };
                let Some(current) = current else { return };
                let Some(map) = update.apply_to(Some(&current)).map(Arc::new) else {
                    // A gap (updates were lost while cut off): the node asks for the full map,
                    // as the daemon's monitor client does.
                    self.trace(&[format!("map gap {to:?}").as_bytes()]);
                    return self.send_full_map(to);
                };
                self.trace(&[format!("map {to:?} {}", map.epoch).as_bytes()]);
                match to {
                    Node::Osd(i) => {
                        let down = map.osds.get(&OsdId(i)).is_some_and(|o| !o.up);
                        self.osd_event(i, Event::Map(map));
                        // A running OSD the monitors marked down boots again, as the daemon does.
                        let mon_says_down = self.mon.map().osds.get(&OsdId(i)).is_some_and(|o| !o.up);
                        if down && mon_says_down && self.osds.contains_key(&i) {
                            if self.osds.get(&i).is_some_and(OsdCore::peers_reachable) {
                                self.boot(OsdId(i));
                            } else {
                                // As the daemon does: not until it reaches its peers.
                                self.awaiting_peers.insert(i);
                            }
                        }
                    }
                    Node::Operator => {}
                    Node::Client(c) => {
                        let client = &mut self.clients[c as usize];
                        if map.epoch > client.map.epoch {
                            client.map = map;
                        }
                        let parked = std::mem::take(&mut self.clients[c as usize].parked);
                        for (tid, epoch) in parked {
                            if self.clients[c as usize].map.epoch >= epoch {
                                self.outcome.resends += 1;
                                self.send_op(c, tid);
                            } else {
                                self.park(c, tid, epoch);
                            }
                        }
                    }
                }
            }
            Delivery::ClientTick(c) => self.client_issue(c),
            Delivery::ClientTimeout { client, tid, attempt } => {
                let current = self.clients[client as usize].in_flight.get(&tid).map(|f| f.attempt);
                if current == Some(attempt) {
                    self.trace(&[format!("timeout c{client} t{tid} a{attempt}").as_bytes()]);
                    self.outcome.resends += 1;
                    self.send_op(client, tid);
                }
            }
            Delivery::Fault(f) => self.fault(f),
            Delivery::Tick => {
                let ids: Vec<u32> = self.osds.keys().copied().collect();
                for i in ids {
                    let now_ms = self.now_us / 1000;
                    self.osd_event(i, Event::Tick { now_ms });
                    if self.cfg.peer_heartbeats {
                        self.osd_event(i, Event::Heartbeat { now_ms });
                    }
                }
                if self.cfg.peer_heartbeats {
                    let now_ms = self.now_us / 1000;
                    let actions = self.mon.handle(MonEvent::Tick { now_ms });
                    self.outcome.marked_down_by_peers += actions
                        .iter()
                        .filter(|a| matches!(a, MonAction::Propose { change: shoal_map::Change::OsdDown { .. }, .. }))
                        .count() as u64;
                    self.mon_actions(actions);
                    self.boot_when_peers_reachable();
                }
                if self.rotted > 0 {
                    self.repair_every_pg();
                }
                if self.cfg.revert_unfound {
                    self.revert_unfound();
                }
                // Ticks go on while anything may still change: a map or message still in flight
                // can start peering again after the cluster looked clean.
                // Pings go on for ever; only they left means nothing else will change.
                let settled = self.pending.is_empty() || (self.cfg.peer_heartbeats && self.only_pings_pending());
                if !self.quiescent() || !settled {
                    self.schedule(self.now_us + self.cfg.tick_us, Delivery::Tick);
                }
            }
            Delivery::Read { osd, incarnation, job } => {
                if self.incarnations.get(&osd).copied().unwrap_or(0) != incarnation {
                    return;
                }
                let Some(core) = self.osds.get(&osd) else { return };
                let result = shoal_osd::exec::execute_reads(&**core.store(), &job.coll, &job.object, &job.ops);
                self.trace(&[format!("read done {osd} {}", job.id).as_bytes()]);
                self.osd_event(osd, Event::ReadDone { id: job.id, result });
            }
            Delivery::Snapshot { take } => self.snapshot(take),
            Delivery::MonDone { osd, epoch } => {
                self.trace(&[format!("mon done {osd} {epoch:?}").as_bytes()]);
                self.osd_event(osd, Event::MonCommandDone { epoch });
            }
            Delivery::ReplicationTimeout { rid } => {
                if let Some((reqid, primary, replica)) = self.rep_requests.remove(&rid) {
                    self.trace(&[format!("replication timeout {rid}").as_bytes()]);
                    self.fail_replication(primary, replica, reqid);
                }
                if let Some((caller, callee, call)) = self.peer_calls.remove(&rid) {
                    self.trace(&[format!("peer call timeout {rid}").as_bytes()]);
                    let err = shoal_proto::RemoteError::new(ErrorCode::Timeout, "no answer");
                    self.osd_event(caller, Event::PeerReply { from: OsdId(callee), call, result: Err(err) });
                }
            }
        }
    }

    /// Carries out the monitor's actions: a proposal commits at once (one monitor) and is fed
    /// back as applied; pushes travel to each subscriber with their own delay.
    fn mon_actions(&mut self, actions: Vec<MonAction>) {
        let mut queue: VecDeque<MonAction> = actions.into();
        let mut index = self.mon.applied_index();
        while let Some(action) = queue.pop_front() {
            match action {
                MonAction::Propose { change, session, .. } => {
                    index += 1;
                    queue.extend(self.mon.handle(MonEvent::Applied { index, change, session }));
                }
                MonAction::Push { conns, update } => {
                    for conn in conns {
                        let delay = self.rng.range(self.cfg.min_delay_us, self.cfg.max_delay_us * 5);
                        let to = Node::from_token(conn);
                        // One connection per subscriber: updates arrive in order.
                        let earliest = self.mon_link_clock.get(&to).copied().unwrap_or(0);
                        let at = (self.now_us + delay).max(earliest);
                        self.mon_link_clock.insert(to, at);
                        self.schedule(at, Delivery::Map { to, update: update.clone() });
                    }
                }
                // Subscription replies carry the map the node already has; nothing is forwarded
                // with one monitor.
                MonAction::Reply { .. }
                | MonAction::Forward { .. }
                | MonAction::ForwardStatus { .. }
                | MonAction::ForwardStats { .. } => {}
            }
        }
    }

    fn osd_event(&mut self, osd: u32, event: Event) {
        let mut actions = Vec::new();
        let Some(core) = self.osds.get_mut(&osd) else { return };
        {
            let _span = tracing::info_span!("osd", id = osd, t_us = self.now_us).entered();
            // As the daemon's worker does before each batch: expiries are judged as of now.
            core.advance_clock(self.now_us / 1000);
            core.handle(event, &mut actions);
        }
        for action in actions {
            match action {
                // Mem stores are durable as soon as they are committed: nothing to sync.
                Action::Reply { to, frame, .. } => self.send(Node::Osd(osd), Node::from_token(to), frame),
                Action::Replicate { osd: peer, op, data, .. } => {
                    if self.crashed.contains_key(&peer.0) {
                        // Connection refused.
                        self.fail_replication(osd, peer.0, op.reqid);
                        continue;
                    }
                    let rid = self.next_rep_request;
                    self.next_rep_request += 1;
                    self.rep_requests.insert(rid, (op.reqid, osd, peer.0));
                    let frame = Frame::with_data(RepOp::TYPE, rid, data, encode(&op, Vec::new()));
                    self.send(Node::Osd(osd), Node::Osd(peer.0), frame);
                    let at = self.now_us + self.cfg.replication_timeout_us;
                    self.schedule(at, Delivery::ReplicationTimeout { rid });
                }
                Action::Peer { osd: peer, msg_type, payload, call } => {
                    if self.crashed.contains_key(&peer.0) || !self.osds.contains_key(&peer.0) {
                        let err = shoal_proto::RemoteError::new(ErrorCode::Timeout, format!("{peer} unreachable"));
                        self.osd_event(osd, Event::PeerReply { from: peer, call, result: Err(err) });
                        continue;
                    }
                    let rid = self.next_rep_request;
                    self.next_rep_request += 1;
                    self.peer_calls.insert(rid, (osd, peer.0, call));
                    self.send(Node::Osd(osd), Node::Osd(peer.0), Frame::new(msg_type, rid, payload));
                    let at = self.now_us + self.cfg.replication_timeout_us;
                    self.schedule(at, Delivery::ReplicationTimeout { rid });
                }
                Action::MonCommand(_) if self.mon_cut.contains(&osd) => {
                    // The command times out in the daemon's monitor client.
                    let at = self.now_us + self.cfg.replication_timeout_us;
                    self.schedule(at, Delivery::MonDone { osd, epoch: None });
                }
                Action::MonCommand(command) => {
                    let before = self.mon.map().epoch;
                    let cmd = MonEvent::Command {
                        to: None,
                        command,
                        session: None,
                        forwarded: false,
                        now_ms: self.now_us / 1000,
                    };
                    let actions = self.mon.handle(cmd);
                    self.mon_actions(actions);
                    let after = self.mon.map().epoch;
                    let epoch = (after > before).then_some(after);
                    let delay = self.rng.range(self.cfg.min_delay_us, self.cfg.max_delay_us * 5);
                    self.schedule(self.now_us + delay, Delivery::MonDone { osd, epoch });
                }
                Action::Stats(stats) => {
                    if self.cfg.peer_heartbeats && !self.mon_cut.contains(&osd) {
                        let now_ms = self.now_us / 1000;
                        let actions = self.mon.handle(MonEvent::OsdStats { stats, now_ms, forwarded: false });
                        self.mon_actions(actions);
                    }
                }
                Action::Read(job) => {
                    // The read runs when it is delivered, not now: writes to other objects
                    // may be applied in between, as on a real OSD's read threads.
                    let incarnation = self.incarnations.get(&osd).copied().unwrap_or(0);
                    let at = self.now_us + self.cfg.min_delay_us.max(1);
                    self.schedule(at, Delivery::Read { osd, incarnation, job });
                }
            }
        }
    }

    /// Every peer call a crashed OSD was to answer fails at its caller (the connection broke).
    fn fail_peer_calls_to(&mut self, dead: u32) {
        let mut lost: Vec<u64> =
            self.peer_calls.iter().filter(|(_, (_, callee, _))| *callee == dead).map(|(r, _)| *r).collect();
        lost.sort_unstable();
        for rid in lost {
            if let Some((caller, _, call)) = self.peer_calls.remove(&rid) {
                let err = shoal_proto::RemoteError::new(ErrorCode::Timeout, format!("osd.{dead} connection lost"));
                self.osd_event(caller, Event::PeerReply { from: OsdId(dead), call, result: Err(err) });
            }
        }
    }

    /// The OSD process dies: its in-memory state is gone, its store stays, and its peers'
    /// connections to it fail (every replicated write and peer call waiting on it fails).
    fn crash(&mut self, osd: OsdId) {
        self.trace(&[format!("crash {osd}").as_bytes()]);
        if let Some(core) = self.osds.remove(&osd.0) {
            self.outcome.needs_named += core.needs_named();
            self.crashed.insert(osd.0, core.store().clone());
        }
        *self.incarnations.entry(osd.0).or_insert(0) += 1;
        let lost: Vec<u64> =
            self.rep_requests.iter().filter(|(_, (_, _, replica))| *replica == osd.0).map(|(r, _)| *r).collect();
        for rid in lost {
            if let Some((reqid, primary, _)) = self.rep_requests.remove(&rid) {
                self.fail_replication(primary, osd.0, reqid);
            }
        }
        self.fail_peer_calls_to(osd.0);
    }

    fn restart(&mut self, osd: OsdId, empty: bool) {
        self.trace(&[format!("restart {osd} empty={empty}").as_bytes()]);
        let Some(mut store) = self.crashed.remove(&osd.0) else { return };
        if empty {
            let engine = Arc::new(MemEngine::new_mem_without_reserve(256 << 20).expect("mem store"));
            self.engines.insert(osd.0, engine.clone());
            store = engine;
        }
        let map = Arc::new(self.mon.map().clone());
        match OsdCore::new(osd, store, map.clone()) {
            Ok(mut core) => {
                self.cfg.configure(&mut core);
                self.osds.insert(osd.0, core);
                self.osd_event(osd.0, Event::Map(map));
            }
            Err(e) => return self.outcome.violations.push(format!("{osd} does not restart: {e}")),
        }
        self.boot(osd);
    }

    /// Whether every delivery still to come is a ping, its answer, its timeout, or the timeout of
    /// a call already answered.
    fn only_pings_pending(&self) -> bool {
        let ping = |rid: &u64| matches!(self.peer_calls.get(rid), Some((_, _, shoal_osd::PeerCall::Ping)));
        self.pending.values().all(|d| match d {
            Delivery::Frame { frame, .. } => {
                frame.msg_type == shoal_proto::osd::PeerPing::TYPE || ping(&frame.request_id)
            }
            // A timeout of a call already answered does nothing.
            Delivery::ReplicationTimeout { rid } => {
                ping(rid) || (!self.peer_calls.contains_key(rid) && !self.rep_requests.contains_key(rid))
            }
            _ => false,
        })
    }

    /// Boots the running OSDs that were marked down while cut off from their peers and now
    /// reach them (see [`SimConfig::peer_heartbeats`]).
    fn boot_when_peers_reachable(&mut self) {
        let waiting: Vec<u32> = self.awaiting_peers.iter().copied().collect();
        for i in waiting {
            let still_down = self.mon.map().osds.get(&OsdId(i)).is_some_and(|o| !o.up);
            let Some(core) = self.osds.get(&i) else {
                // Crashed meanwhile: its restart boots it.
                self.awaiting_peers.remove(&i);
                continue;
            };
            if !still_down {
                self.awaiting_peers.remove(&i);
            } else if core.peers_reachable() && !self.mon_cut.contains(&i) {
                self.awaiting_peers.remove(&i);
                self.boot(OsdId(i));
            }
        }
    }

    /// The OSD boots: the map records the new incarnation, a new interval for its PGs.
    fn boot(&mut self, osd: OsdId) {
        self.trace(&[format!("boot {osd}").as_bytes()]);
        let addr = format!("127.0.0.1:{}", 17000 + self.now_us % 10000).parse().expect("literal address");
        // As the daemon does before it boots: an earlier run the map still shows up at this same
        // address is marked down first, or the boot would change nothing and the OSD's peers
        // would go on with the state they had with that run (seed 1310595 of `--snaps
        // --link-cuts --peer-heartbeats`: a disk replaced right after a boot at the same
        // simulated port left four PGs clean with an empty member).
        if self.mon.map().osds.get(&osd).is_some_and(|o| o.up && o.addr == Some(addr)) {
            self.mon_command(Command::OsdDown { id: osd });
        }
        self.mon_command(Command::OsdBoot { id: osd, addr });
    }

    /// The monitor sends `to` its current map in full, on the same ordered link as its pushes.
    fn send_full_map(&mut self, to: Node) {
        let update = Arc::new(MapUpdate { full: Some(self.mon.map().clone()), incrementals: Vec::new() });
        let delay = self.rng.range(self.cfg.min_delay_us, self.cfg.max_delay_us * 5);
        let at = (self.now_us + delay).max(self.mon_link_clock.get(&to).copied().unwrap_or(0));
        self.mon_link_clock.insert(to, at);
        self.schedule(at, Delivery::Map { to, update });
    }

    fn mon_command(&mut self, command: Command) {
        let cmd = MonEvent::Command { to: None, command, session: None, forwarded: false, now_ms: self.now_us / 1000 };
        let actions = self.mon.handle(cmd);
        self.mon_actions(actions);
    }

    fn fault(&mut self, f: Fault) {
        self.trace(&[format!("fault {f:?}").as_bytes()]);
        match f {
            Fault::Crash(osd) => self.crash(osd),
            Fault::Restart(osd) => self.restart(osd, false),
            Fault::RestartEmpty(osd) => self.restart(osd, true),
            Fault::MarkDown(osd) => self.mon_command(Command::OsdDown { id: osd }),
            Fault::Out(osd) => self.mon_command(Command::OsdOut { id: osd }),
            Fault::In(osd) => self.mon_command(Command::OsdIn { id: osd }),
            Fault::ReplaceWhenClean(osd) => {
                let clean = if self.cfg.early_replacement { self.leaders_report_clean() } else { self.cluster_clean() };
                if clean {
                    self.crash(osd);
                    self.restart(osd, true);
                } else {
                    self.schedule(self.now_us + self.cfg.tick_us, Delivery::Fault(f));
                }
            }
            Fault::RotAndReplacePeerWhenClean(osd) => {
                if !self.cluster_clean() {
                    return self.schedule(self.now_us + self.cfg.tick_us, Delivery::Fault(f));
                }
                let Some(obj) = self.damage(osd, false) else { return };
                let map = self.mon.map().clone();
                let members = map.pool_by_name(POOL).and_then(|p| map.locate(p.id, &obj)).map(|l| l.osds);
                let peers: Vec<OsdId> = members.unwrap_or_default().into_iter().filter(|o| *o != osd).collect();
                if !peers.is_empty() {
                    let peer = peers[self.rng.range(0, peers.len() as u64 - 1) as usize];
                    self.crash(peer);
                    self.restart(peer, true);
                }
            }
            Fault::Isolate(osd) => {
                self.isolated.insert(osd.0);
            }
            Fault::BitRotWhenClean(osd) | Fault::ReadErrorWhenClean(osd) => {
                let replace_pending =
                    self.pending.values().any(|d| matches!(d, Delivery::Fault(Fault::ReplaceWhenClean(_))));
                if self.cluster_clean() && !replace_pending {
                    self.damage(osd, matches!(f, Fault::ReadErrorWhenClean(_)));
                } else {
                    self.schedule(self.now_us + self.cfg.tick_us, Delivery::Fault(f));
                }
            }
            Fault::BitRotUnacked(osd, until_us) => {
                let clients_done =
                    self.clients.iter().all(|c| c.queue.is_empty() && c.in_flight.is_empty() && c.parked.is_empty());
                if !clients_done && self.now_us < until_us && !self.damage_unacked(osd) {
                    self.schedule(self.now_us + self.cfg.tick_us, Delivery::Fault(f));
                }
            }
            Fault::Heal(osd) => {
                self.isolated.remove(&osd.0);
            }
            Fault::CutLink(a, b) => {
                *self.cut_links.entry((a.0.min(b.0), a.0.max(b.0))).or_insert(0) += 1;
            }
            Fault::HealLink(a, b) => {
                let key = (a.0.min(b.0), a.0.max(b.0));
                if let Some(n) = self.cut_links.get_mut(&key) {
                    *n -= 1;
                    if *n == 0 {
                        self.cut_links.remove(&key);
                    }
                }
            }
            Fault::CutFromMons(osd) => {
                self.mon_cut.insert(osd.0);
            }
            Fault::HealMons(osd) => {
                // It subscribes again and gets the current map in full.
                if self.mon_cut.remove(&osd.0) && self.osds.contains_key(&osd.0) {
                    self.send_full_map(Node::Osd(osd.0));
                }
            }
        }
    }

    /// Clients are done, no fault is still to come, every PG is active and clean, and no scrub
    /// is running or waiting (after damage: the final repair has been asked for and is done).
    fn quiescent(&self) -> bool {
        let clients_done =
            self.clients.iter().all(|c| c.queue.is_empty() && c.in_flight.is_empty() && c.parked.is_empty());
        let faults_done = self.pending.values().all(|d| !matches!(d, Delivery::Fault(_)));
        let scrubs_done = self.osds.values().all(|o| o.scrubs_pending() == 0);
        let repaired = self.rotted == 0 || self.unrepaired_pgs().is_empty();
        clients_done && faults_done && scrubs_done && repaired && self.cluster_clean()
    }

    /// After damage: PGs whose current primary has not finished a repair since it leads them
    /// (with that primary, and whether a scrub is under way there).
    fn unrepaired_pgs(&self) -> Vec<(shoal_map::PgId, u32, bool)> {
        self.last_scrubs()
            .into_iter()
            .filter(|(_, _, last, busy)| !last.as_ref().is_some_and(|l| l.repair) || *busy)
            .map(|(pg, primary, _, busy)| (pg, primary, busy))
            .collect()
    }

    /// Every PG of every pool with its current primary, and what that primary says of its last
    /// scrub there (and whether one is under way).
    fn last_scrubs(&self) -> Vec<(shoal_map::PgId, u32, Option<shoal_proto::osd::ScrubSummary>, bool)> {
        let map = self.mon.map();
        let mut out = Vec::new();
        for pool in map.pools.values() {
            for seed in 0..pool.pg_num {
                let pg = shoal_map::PgId { pool: pool.id, seed };
                let Some(primary) = map.pg_osds(pg).unwrap_or_default().first().copied() else { continue };
                let (last, busy) = self.osds.get(&primary.0).map_or((None, false), |o| o.last_scrub(pg));
                out.push((pg, primary.0, last, busy));
            }
        }
        out
    }

    /// `BitRotUnacked`: flips a bit of `osd`'s copy of an object it leads with a write in flight,
    /// newer than every other member's copy. Whether one was damaged.
    fn damage_unacked(&mut self, osd: OsdId) -> bool {
        if !self.osds.contains_key(&osd.0) {
            return false;
        }
        let Some(engine) = self.engines.get(&osd.0).cloned() else { return false };
        let map = self.mon.map().clone();
        let Ok(pool) = map.pool_by_name(POOL).map(|p| p.id) else { return false };
        let writing: std::collections::BTreeSet<String> = self
            .clients
            .iter()
            .flat_map(|c| c.in_flight.values())
            .filter(|f| f.work.writes())
            .map(|f| object_name(f.object))
            .collect();
        let mut candidates = Vec::new();
        for name in writing {
            let Ok(loc) = map.locate(pool, &name) else { continue };
            if loc.osds.first() != Some(&osd) {
                continue;
            }
            // Only in a PG its primary sees clean: every other member holds every acknowledged
            // write, so the damage loses the unacknowledged one alone (in a PG that is
            // backfilling, the one copy of an acknowledged version may be the damaged one too,
            // a double fault nothing recovers).
            let clean = self.osds.get(&osd.0).and_then(|core| core.pg_state(loc.pg));
            if !clean.as_deref().is_some_and(shoal_proto::osd::state_is_clean) {
                continue;
            }
            let coll = shoal_osd::exec::pg_collection(loc.pg);
            let Some(mine) = shoal_osd::objver::stored(&*engine, &coll, &name) else { continue };
            let newest = loc.osds[1..].iter().all(|o| {
                self.engines.get(&o.0).is_none_or(|e| shoal_osd::objver::stored(&**e, &coll, &name) < Some(mine))
            });
            if newest {
                candidates.push((coll, name));
            }
        }
        if candidates.is_empty() {
            return false;
        }
        let (coll, obj) = candidates[self.rng.range(0, candidates.len() as u64 - 1) as usize].clone();
        self.trace(&[format!("damage unacked {osd} {coll}/{obj}").as_bytes()]);
        match engine.inject_bit_rot(&coll, &obj) {
            Ok(true) => {
                // Repaired by the deep scrubs at the end like any damage, if the copy survives.
                self.rotted += 1;
                self.outcome.unacked_rotted += 1;
                tracing::info!(t_us = self.now_us, %osd, %coll, %obj, "nemesis: damaged the newest copy of an unacknowledged write");
                true
            }
            Ok(false) => false,
            Err(e) => {
                self.outcome.violations.push(format!("could not damage {coll}/{obj} on {osd}: {e}"));
                true
            }
        }
    }

    /// Damages one object copy on `osd`'s store, picked by the seed among the copies it holds:
    /// flips a bit of it, or (`unreadable`) makes a block of it fail to read.
    /// Returns the object damaged, if one was.
    fn damage(&mut self, osd: OsdId, unreadable: bool) -> Option<String> {
        let engine = self.engines.get(&osd.0).cloned()?;
        let mut copies = Vec::new();
        for coll in engine.list_collections().unwrap_or_default() {
            if !coll.starts_with("pg.") {
                continue;
            }
            if let Ok(page) = engine.list_objects(&coll, "", None, 10_000) {
                copies.extend(page.objects.into_iter().map(|o| (coll.clone(), o)));
            }
        }
        // Not an object with a write in flight: an unacknowledged write may so far be on its
        // primary alone, and damaging that copy loses a version no member can recover (the
        // object would stay unfound until an operator gives it up). Preferably one a client is
        // still using (a read in flight, operations queued behind it), so that access-time repair
        // is tried and not only the final scrub.
        let mut writing = std::collections::BTreeSet::new();
        let mut used = std::collections::BTreeSet::new();
        for client in &self.clients {
            for f in client.in_flight.values() {
                let name = object_name(f.object);
                if f.work.writes() {
                    writing.insert(name.clone());
                }
                used.insert(name);
            }
        }
        // (A clone or snapshot directory goes with its head.)
        let head = |obj: &str| shoal_osd::snaps::head_of(obj).to_string();
        copies.retain(|(_, obj)| !writing.contains(&head(obj)));
        // With snapshots, only clones: every object is trimmed after a snapshot removal, and a
        // trim keeps the head's data, so a damaged head on a primary that takes a trim reaching
        // no other member before the interval changes would be the only copy of the object's
        // newest version — the same loss as damage under a write in flight, which no system
        // recovers unaided. A clone never changes once made (trims only remove it).
        if self.cfg.snaps {
            copies.retain(|(_, obj)| {
                shoal_osd::snaps::is_companion(obj) && *obj != shoal_osd::snaps::snapdir_name(&head(obj))
            });
        }
        if copies.iter().any(|(_, obj)| used.contains(&head(obj))) {
            copies.retain(|(_, obj)| used.contains(&head(obj)));
        }
        // And preferably the copy reads are served from: the OSD's own PGs as primary.
        let map = self.mon.map().clone();
        let led = |obj: &str| {
            map.pool_by_name(POOL)
                .and_then(|p| map.locate(p.id, &head(obj)))
                .is_ok_and(|loc| loc.osds.first() == Some(&osd))
        };
        if copies.iter().any(|(_, obj)| led(obj)) {
            copies.retain(|(_, obj)| led(obj));
        }
        if copies.is_empty() {
            return None;
        }
        let (coll, obj) = copies[self.rng.range(0, copies.len() as u64 - 1) as usize].clone();
        self.trace(&[format!("damage {osd} {coll}/{obj} unreadable={unreadable}").as_bytes()]);
        let done = if unreadable { engine.inject_read_error(&coll, &obj) } else { engine.inject_bit_rot(&coll, &obj) };
        match done {
            Ok(true) => {
                self.rotted += 1;
                tracing::info!(t_us = self.now_us, %osd, %coll, %obj, unreadable, "nemesis: damaged a copy");
                Some(obj)
            }
            Ok(false) => None,
            Err(e) => {
                self.outcome.violations.push(format!("could not damage {coll}/{obj} on {osd}: {e}"));
                None
            }
        }
    }

    /// Once clients and faults are done and the cluster is clean, asks each PG's primary that
    /// has not repaired it yet for a deep scrub with repair (`shoal pg repair`), again after every
    /// change of primary, until every PG's current primary has finished one.
    fn repair_every_pg(&mut self) {
        let clients_done =
            self.clients.iter().all(|c| c.queue.is_empty() && c.in_flight.is_empty() && c.parked.is_empty());
        let faults_done = self.pending.values().all(|d| !matches!(d, Delivery::Fault(_)));
        if !clients_done || !faults_done || !self.cluster_clean() {
            return;
        }
        let epoch = self.mon.map().epoch;
        for (pg, primary, busy) in self.unrepaired_pgs() {
            if busy {
                continue;
            }
            let cmd = shoal_proto::osd::PgCmd::Scrub { deep: true, repair: true };
            let req = shoal_proto::osd::PgCommand { epoch, pool: pg.pool, pg: pg.seed, cmd };
            self.osd_event(primary, Event::PgCommand { from: Node::Operator.token(), request_id: 0, req });
        }
    }

    /// The operator's revert of every PG whose primary reports unfound objects. An object no
    /// copy of which can be kept (its one copy damaged, and no older one of its history on any
    /// OSD: an object a write the revert gives up created) stays unfound under reverts; once a
    /// PG stays so for [`DELETE_AFTER_TICKS`] ticks with every fault applied (but those waiting
    /// for a clean cluster) and every OSD running and reachable (every copy there is can be
    /// asked for), the operator gives its unfound objects up as lost, as `shoal pg mark-unfound-lost PGID delete` does. The run's
    /// checks still require every acknowledged write: a deletion that loses one fails the seed.
    fn revert_unfound(&mut self) {
        let epoch = self.mon.map().epoch;
        // Faults that wait for a clean cluster do not count: a PG stays unfound until the
        // operator gives it up, so waiting for them here would wait for ever (seed 169).
        let faults_done = self.pending.values().all(|d| !matches!(d, Delivery::Fault(f) if !waits_for_clean(f)));
        let all_reachable = self.isolated.is_empty()
            && self.mon_cut.is_empty()
            && self.cut_links.values().all(|n| *n == 0)
            && self.mon.map().osds.keys().all(|o| self.osds.contains_key(&o.0));
        let mut unfound_now = std::collections::BTreeSet::new();
        for (pg, primary, state) in self.primary_states() {
            if let (Some(primary), Some(state)) = (primary, state)
                && state.contains("unfound")
            {
                unfound_now.insert(pg);
                let ticks = self.unfound_ticks.entry(pg).or_insert(0);
                *ticks = if faults_done && all_reachable { *ticks + 1 } else { 0 };
                let cmd = if *ticks >= DELETE_AFTER_TICKS {
                    *ticks = 0;
                    self.outcome.unfound_deleted += 1;
                    self.trace(&[format!("delete unfound {pg} at {primary}").as_bytes()]);
                    tracing::info!(t_us = self.now_us, %pg, "operator: reverts kept nothing; unfound objects given up");
                    shoal_proto::osd::PgCmd::MarkUnfoundLost
                } else {
                    self.outcome.reverts_asked += 1;
                    self.trace(&[format!("revert {pg} at {primary}").as_bytes()]);
                    shoal_proto::osd::PgCmd::RevertUnfound
                };
                let req = shoal_proto::osd::PgCommand { epoch, pool: pg.pool, pg: pg.seed, cmd };
                self.osd_event(primary.0, Event::PgCommand { from: Node::Operator.token(), request_id: 0, req });
            }
        }
        self.unfound_ticks.retain(|pg, _| unfound_now.contains(pg));
    }

    /// Every PG of the monitors' map with its primary there, if any, and the state that OSD
    /// reports for it (`None` while it does not lead it).
    fn primary_states(&self) -> Vec<(shoal_map::PgId, Option<OsdId>, Option<String>)> {
        let map = self.mon.map();
        let mut out = Vec::new();
        for pool in map.pools.values() {
            for seed in 0..pool.pg_num {
                let pg = shoal_map::PgId { pool: pool.id, seed };
                let primary = map.pg_osds(pg).ok().and_then(|acting| acting.first().copied());
                let state = primary.and_then(|p| self.osds.get(&p.0)).and_then(|o| o.pg_state(pg));
                out.push((pg, primary, state));
            }
        }
        out
    }

    /// What [`SimConfig::early_replacement`] waits for: every OSD runs, reaches its peers and
    /// reports every PG it leads active and clean, with no strays left to remove.
    fn leaders_report_clean(&self) -> bool {
        self.crashed.is_empty()
            && self.isolated.is_empty()
            && self.cut_links.is_empty()
            && self.mon_cut.is_empty()
            && self.osds.values().all(|o| o.all_clean() && o.strays() == 0 && o.purge_backlog() == 0)
    }

    /// Every OSD runs, reaches its peers, has the monitors' current map, and has every PG it
    /// leads active and clean, with no strays left to remove; and every PG of that map has a
    /// primary that says so. (Asking each OSD only about the PGs it leads is not enough: while a
    /// new map is on its way, the old primary has stepped down and the new one has not yet taken
    /// over, no OSD leads the PG, and a disk replaced then could hold the only copy of a write.)
    fn cluster_clean(&self) -> bool {
        let epoch = self.mon.map().epoch;
        self.leaders_report_clean()
            && self.osds.values().all(|o| o.map().epoch == epoch)
            && self
                .primary_states()
                .iter()
                .all(|(_, _, state)| state.as_deref().is_some_and(shoal_proto::osd::state_is_clean))
    }

    /// What the daemon does when its connection to a replica fails: the waiting write fails.
    fn fail_replication(&mut self, primary: u32, replica: u32, reqid: ReqId) {
        let result = Err(shoal_proto::RemoteError::new(ErrorCode::Timeout, format!("osd.{replica} connection lost")));
        self.osd_event(primary, Event::RepReply { from: OsdId(replica), reqid, result });
    }

    fn deliver_to_osd(&mut self, osd: u32, from: Node, frame: Frame) {
        if frame.msg_type == PgPush::TYPE && self.refuses_push(&frame) {
            self.outcome.pushes_refused += 1;
            let epoch = self.osds.get(&osd).map_or(0, |core| core.map().epoch);
            let why = RemoteError::new(ErrorCode::NoSpace, format!("toofull: osd.{osd} (simulated)"));
            let ack = shoal_proto::osd::PeerAck { epoch, result: Err(why) };
            let reply = Frame::new(shoal_proto::osd::PeerAck::TYPE, frame.request_id, encode(&ack, Vec::new()));
            return self.send(Node::Osd(osd), from, reply);
        }
        if frame.msg_type == PgPush::TYPE
            && let Ok((push, _)) = decode::<PgPush>(frame.payload.clone())
        {
            if push.backfill.is_some() {
                self.outcome.backfill_objects_kept += push.kept.len() as u64;
            } else {
                self.outcome.recovery_clones_kept += push.kept.len() as u64;
            }
            if push.part.as_ref().is_some_and(|p| !p.at.is_start()) {
                self.outcome.clones_in_later_parts += push.objects.len().saturating_sub(1) as u64;
            }
        }
        if frame.msg_type == shoal_proto::osd::PgPull::TYPE
            && let Ok((pull, _)) = decode::<shoal_proto::osd::PgPull>(frame.payload.clone())
            && pull.stale_at.is_some()
        {
            match pull.part {
                None => self.outcome.revert_pulls += 1,
                Some(_) => self.outcome.revert_parts_pulled += 1,
            }
        }
        if frame.msg_type == shoal_proto::osd::PgPullReply::TYPE
            && let Ok((reply, _)) = decode::<shoal_proto::osd::PgPullReply>(frame.payload.clone())
            && let (Some(part), Ok(copies)) = (&reply.part, &reply.result)
            && !part.at.is_start()
        {
            self.outcome.clones_in_later_parts += copies.len().saturating_sub(1) as u64;
        }
        if frame.msg_type == PgActivate::TYPE
            && let Ok((a, _)) = decode::<PgActivate>(frame.payload.clone())
            && a.backfill
        {
            if a.backfill_after.is_empty() {
                self.outcome.backfills_started += 1;
            } else {
                self.outcome.backfills_resumed += 1;
            }
        }
        let from_token = from.token();
        // Bulk data goes to the OSDs as a server's reader hands it over: with the checksum of
        // every whole 4 KiB block (decision 0094), which the stores keep. Values of
        // `VALUE_BYTES` hold no whole block; `--value-bytes 8192` makes writes that do.
        let event = match frame.msg_type {
            OsdOp::TYPE => match decode::<OsdOp>(frame.payload) {
                Ok((op, data)) => Event::ClientOp {
                    from: from_token,
                    request_id: frame.request_id,
                    op,
                    data: shoal_util::SummedBytes::summing(data.into()),
                    data_crc: None,
                    arrived_ms: self.now_us / 1000,
                },
                Err(e) => return self.outcome.violations.push(format!("bad OsdOp: {e}")),
            },
            RepOp::TYPE => match decode::<RepOp>(frame.payload) {
                Ok((op, data)) => Event::RepOp {
                    from: from_token,
                    request_id: frame.request_id,
                    op,
                    data: shoal_util::SummedBytes::summing(data.into()),
                },
                Err(e) => return self.outcome.violations.push(format!("bad RepOp: {e}")),
            },
            RepOpReply::TYPE => {
                let Some((reqid, _, _)) = self.rep_requests.remove(&frame.request_id) else { return };
                let Node::Osd(replica) = from else { return };
                match decode::<RepOpReply>(frame.payload) {
                    Ok((reply, _)) => Event::RepReply { from: OsdId(replica), reqid, result: Ok(reply) },
                    Err(e) => return self.outcome.violations.push(format!("bad RepOpReply: {e}")),
                }
            }
            40 | 42 | 44 | 46 | 47 | 49 | 53 | 55 => Event::PeerMsg {
                from: from_token,
                request_id: frame.request_id,
                msg_type: frame.msg_type,
                payload: frame.payload.into(),
            },
            41 | 43 | 45 | 48 | 50 | 54 => {
                let Some((_, callee, call)) = self.peer_calls.remove(&frame.request_id) else { return };
                Event::PeerReply { from: OsdId(callee), call, result: Ok(frame) }
            }
            other => return self.outcome.violations.push(format!("OSD got message type {other}")),
        };
        self.osd_event(osd, event);
    }

    /// Whether the push in `frame` is one the target refuses as too full this time: a push that
    /// brings data, drawn at `refuse_push_per_mille` (no draw otherwise, so runs without refusals
    /// keep their traces).
    fn refuses_push(&mut self, frame: &Frame) -> bool {
        if self.cfg.refuse_push_per_mille == 0 {
            return false;
        }
        let Ok((_, data)) = decode::<PgPush>(frame.payload.clone()) else { return false };
        !data.is_empty() && self.rng.range(0, 999) < self.cfg.refuse_push_per_mille
    }

    fn client_issue(&mut self, c: u32) {
        // Issue every queued operation whose object is idle, in queue order.
        let mut rest = VecDeque::new();
        let queue = std::mem::take(&mut self.clients[c as usize].queue);
        for (object, work) in queue {
            if self.clients[c as usize].busy_objects.contains_key(&object) {
                rest.push_back((object, work));
                continue;
            }
            // What a snapshot operation works on is fixed when it is issued: the context a write
            // carries on every attempt, the live snapshot a read or rollback names.
            let ctx = (self.cfg.snaps && work.writes()).then(|| (self.snap_seq, self.live_snaps.clone()));
            let (work, snap) = match work {
                Work::ReadSnap if self.live_snaps.is_empty() => (Work::Read, None),
                Work::Rollback(seed) if self.live_snaps.is_empty() => (Work::Write(seed), None),
                Work::ReadSnap | Work::Rollback(_) => {
                    let at = self.rng.range(0, self.live_snaps.len() as u64 - 1) as usize;
                    (work, Some(self.live_snaps[at]))
                }
                _ => (work, None),
            };
            let client = &mut self.clients[c as usize];
            let tid = client.next_tid;
            client.next_tid += 1;
            client.busy_objects.insert(object, tid);
            let reqid = ReqId { client: u64::from(c) + 1, tid };
            let acked_before = self.acked.get(&object).copied().unwrap_or(0);
            let issued_us = self.now_us;
            let op = InFlight { object, issued_us, acked_before, attempt: 0, sent_epoch: 0, work, ctx, snap, reqid };
            client.in_flight.insert(tid, op);
            self.send_op(c, tid);
        }
        self.clients[c as usize].queue = rest;
    }

    /// Holds request `tid` until the client's map reaches `epoch` (once per request).
    fn park(&mut self, c: u32, tid: u64, epoch: u64) {
        let parked = &mut self.clients[c as usize].parked;
        parked.retain(|(t, _)| *t != tid);
        parked.push((tid, epoch));
    }

    fn send_op(&mut self, c: u32, tid: u64) {
        let client = &self.clients[c as usize];
        let Some(op) = client.in_flight.get(&tid).cloned() else { return };
        let map = client.map.clone();
        let name = object_name(op.object);
        let Ok(pool) = map.pool_by_name(POOL) else { return };
        let Ok(loc) = map.locate(pool.id, &name) else { return };
        let Some(primary) = loc.osds.first() else {
            self.park(c, tid, map.epoch + 1);
            return;
        };
        let read_all = ObjOp::Read { offset: 0, len_bytes: u64::MAX };
        let (mut ops, data) = match op.work {
            Work::Write(seed) if self.cfg.appends => {
                (vec![ObjOp::Append { len_bytes: APPEND_BYTES as u64 }], piece(seed))
            }
            Work::Write(seed) => {
                let len_bytes = self.cfg.value_bytes;
                (vec![ObjOp::WriteFull { len_bytes: len_bytes as u64 }], value(seed, len_bytes))
            }
            Work::Read => (vec![read_all], Vec::new()),
            Work::Remove => (vec![ObjOp::Remove], Vec::new()),
            Work::Trim => (vec![ObjOp::SnapTrim], Vec::new()),
            Work::Rollback(_) => (vec![ObjOp::SnapRollback { snap: op.snap.unwrap_or_default() }], Vec::new()),
            Work::ReadSnap => (vec![ObjOp::ReadSnap { snap: op.snap.unwrap_or_default() }, read_all], Vec::new()),
        };
        if let Some((seq, snaps)) = &op.ctx {
            ops.insert(0, ObjOp::SnapContext { seq: *seq, snaps: snaps.clone() });
        }
        if self.cfg.omap {
            match op.work {
                Work::Write(seed) => ops.push(ObjOp::OmapSet { entries: omap_entries(seed) }),
                Work::Read => ops.push(ObjOp::OmapList { after: None, max: OMAP_KEYS as u32 + 1 }),
                _ => {}
            }
        }
        let mut attempt = 0;
        if let Some(f) = self.clients[c as usize].in_flight.get_mut(&tid) {
            f.sent_epoch = map.epoch;
            f.attempt += 1;
            attempt = f.attempt;
        }
        let at = self.now_us + self.cfg.client_timeout_us;
        self.schedule(at, Delivery::ClientTimeout { client: c, tid, attempt });
        let msg = OsdOp {
            reqid: op.reqid,
            epoch: map.epoch,
            pool: pool.id,
            pg: loc.pg.seed,
            object: name,
            ops,
            expires_in_ms: None,
            // The first attempt is 1.
            resend: attempt > 1,
            frees_space: false,
        };
        self.send(Node::Client(c), Node::Osd(primary.0), Frame::new(OsdOp::TYPE, tid, encode(&msg, data)));
    }

    fn deliver_to_client(&mut self, c: u32, from: Node, frame: Frame) {
        let tid = frame.request_id;
        let Some(op) = self.clients[c as usize].in_flight.get(&tid).cloned() else { return };
        let (reply, data) = match decode::<OsdOpReply>(frame.payload) {
            Ok(r) => r,
            Err(e) => return self.outcome.violations.push(format!("bad reply: {e}")),
        };
        match reply.result {
            Ok(outputs) => {
                self.outcome.last_answer_us = self.now_us;
                let key = op.object;
                if !matches!(op.work, Work::Write(_) | Work::Read) {
                    tracing::info!(
                        t_us = self.now_us,
                        object = object_name(op.object),
                        reqid = ?op.reqid,
                        work = ?op.work,
                        snap = ?op.snap,
                        ctx = ?op.ctx,
                        ?from,
                        epoch = reply.epoch,
                        "client: snapshot operation done"
                    );
                }
                match op.work {
                    Work::Write(seed) => {
                        *self.acked.entry(key).or_insert(0) += 1;
                        if self.cfg.omap {
                            self.model_omap.entry(key).or_default().extend(omap_entries(seed));
                        }
                        if self.cfg.appends {
                            self.model.entry(key).or_default().extend_from_slice(&piece(seed));
                        } else {
                            self.model.insert(key, value(seed, self.cfg.value_bytes));
                        }
                        self.outcome.acked_writes += 1;
                        self.record_change(&op);
                        tracing::info!(
                            t_us = self.now_us,
                            object = object_name(op.object),
                            reqid = ?op.reqid,
                            len = self.model.get(&key).map_or(0, Vec::len),
                            ?from,
                            epoch = reply.epoch,
                            "client: write acknowledged"
                        );
                    }
                    Work::Remove => {
                        self.model.remove(&key);
                        self.outcome.acked_writes += 1;
                        self.record_change(&op);
                    }
                    Work::Rollback(_) => {
                        match self.snapshot_content(key, op.snap.unwrap_or_default()) {
                            Some(v) => self.model.insert(key, v),
                            None => self.model.remove(&key),
                        };
                        self.outcome.acked_writes += 1;
                        self.record_change(&op);
                    }
                    Work::Trim => {}
                    Work::ReadSnap => self.check_snap_read(&op, Some(&data)),
                    Work::Read if key.0 != c => self.observe(&op, Some(&data)),
                    Work::Read => {
                        let expected = self.model.get(&key).cloned();
                        tracing::info!(
                            t_us = self.now_us,
                            object = object_name(op.object),
                            len = data.len(),
                            ?from,
                            epoch = reply.epoch,
                            "client: read"
                        );
                        if self.cfg.omap {
                            let want: Vec<(Vec<u8>, Vec<u8>)> = self
                                .model_omap
                                .get(&key)
                                .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                                .unwrap_or_default();
                            match outputs.get(1) {
                                Some(OpOutput::OmapList(got)) if *got == want => {}
                                other => self.outcome.violations.push(format!(
                                    "read of {} at {} us returned omap {:?} that is not its acknowledged writes' ({} \
                                     keys)",
                                    object_name(op.object),
                                    self.now_us,
                                    other.map(|o| match o {
                                        OpOutput::OmapList(e) => e.iter().map(|(k, v)| (k.clone(), v.len())).collect(),
                                        _ => Vec::new(),
                                    }),
                                    want.len()
                                )),
                            }
                        }
                        match expected {
                            Some(v) if v == data => {
                                self.outcome.verified_reads += 1;
                                let seen = self.acked.get(&key).copied().unwrap_or(0);
                                self.observed.entry(key).or_default().push((self.now_us, seen));
                            }
                            Some(v) => {
                                // Which write's value it was, if any (whole-object writes).
                                let seeds = self.writes.get(&key).cloned().unwrap_or_default();
                                let which = seeds.iter().position(|s| value(*s, self.cfg.value_bytes) == data);
                                self.outcome.violations.push(format!(
                                    "read of {} at {} us returned {} bytes that are not its last acknowledged \
                                     write ({} bytes; they are write {which:?} of {}, {} acknowledged)",
                                    object_name(op.object),
                                    self.now_us,
                                    data.len(),
                                    v.len(),
                                    seeds.len(),
                                    self.acked.get(&key).copied().unwrap_or(0)
                                ));
                            }
                            None => self.outcome.violations.push(format!(
                                "read of never-written {} succeeded ({outputs:?})",
                                object_name(op.object)
                            )),
                        }
                    }
                }
                self.finish(c, tid, op.object);
            }
            Err(e) if e.code == ErrorCode::WrongPrimary => {
                // Resend once the client's map is newer than the one this attempt used (it may
                // already be, if a map arrived while the reply was in flight).
                let epoch = reply.epoch.max(op.sent_epoch + 1);
                if self.clients[c as usize].map.epoch >= epoch {
                    self.outcome.resends += 1;
                    self.send_op(c, tid);
                } else {
                    self.park(c, tid, epoch);
                }
            }
            // A replica's connection failed: the real client resends idempotent writes after a
            // pause; here the request's timeout resends it.
            // A replica failed or the PG cannot serve yet: the request's timeout resends it, with
            // the same request id (appends too: the resend is answered from the PG log).
            Err(e) if matches!(e.code, ErrorCode::Timeout | ErrorCode::Degraded) => {
                self.trace(&[format!("retry later c{c} t{tid}: {}", e.message).as_bytes()]);
            }
            Err(e) if e.code == ErrorCode::NotFound && op.work == Work::Read && op.object.0 != c => {
                self.observe(&op, None);
                self.finish(c, tid, op.object);
            }
            Err(e)
                if e.code == ErrorCode::NotFound && op.work == Work::Read && !self.model.contains_key(&op.object) =>
            {
                self.outcome.verified_reads += 1;
                self.finish(c, tid, op.object);
            }
            Err(e) if e.code == ErrorCode::NotFound && op.work == Work::ReadSnap => {
                self.check_snap_read(&op, None);
                self.finish(c, tid, op.object);
            }
            // Removing a head that is not there changes nothing; so does trimming an object
            // with no state at all.
            Err(e)
                if e.code == ErrorCode::NotFound
                    && matches!(op.work, Work::Remove | Work::Trim)
                    && !self.model.contains_key(&op.object) =>
            {
                if op.work == Work::Remove {
                    self.outcome.acked_writes += 1;
                }
                self.finish(c, tid, op.object);
            }
            Err(e) => {
                self.outcome.violations.push(format!(
                    "{} failed: {e} ({:?}, client {c}'s request {tid})",
                    object_name(op.object),
                    op.work
                ));
                self.finish(c, tid, op.object);
            }
        }
    }

    /// Checks what an observer's read of another client's object returned (`None`: the object
    /// does not exist) against the order of that object's writes (see
    /// [`SimConfig::observers`]), and records it.
    fn observe(&mut self, op: &InFlight, data: Option<&[u8]>) {
        let name = object_name(op.object);
        let seeds = self.writes.get(&op.object).cloned().unwrap_or_default();
        // How many of the object's writes the bytes reflect.
        let seen = match data {
            None => Some(0),
            Some(bytes) if self.cfg.appends => {
                let k = bytes.len() / APPEND_BYTES;
                let whole: Vec<u8> = seeds.iter().take(k).flat_map(|s| piece(*s)).collect();
                (bytes.len().is_multiple_of(APPEND_BYTES) && k <= seeds.len() && whole == bytes).then_some(k)
            }
            Some(bytes) => seeds.iter().position(|s| value(*s, self.cfg.value_bytes) == bytes).map(|i| i + 1),
        };
        let Some(seen) = seen else {
            return self.outcome.violations.push(format!(
                "a read of {name} at {} us returned {} bytes that no sequence of its writes wrote",
                self.now_us,
                data.map_or(0, <[u8]>::len)
            ));
        };
        let acked_now = self.acked.get(&op.object).copied().unwrap_or(0);
        if seen < op.acked_before {
            self.outcome.violations.push(format!(
                "a read of {name} sent at {} us saw {seen} of its writes, but {} were acknowledged before it was sent",
                op.issued_us, op.acked_before
            ));
        }
        if seen > acked_now + 1 {
            self.outcome.violations.push(format!(
                "a read of {name} at {} us saw {seen} of its writes, but only {acked_now} are acknowledged and one \
                is in flight",
                self.now_us
            ));
        }
        let observed = self.observed.entry(op.object).or_default();
        if let Some((at, before)) =
            observed.iter().filter(|(at, _)| *at < op.issued_us).max_by_key(|(_, k)| *k).copied()
            && seen < before
        {
            self.outcome.violations.push(format!(
                "a read of {name} sent at {} us saw {seen} of its writes, but a read that finished at {at} us, before \
                it was sent, had seen {before}: a write that was seen was lost",
                op.issued_us
            ));
        }
        observed.push((self.now_us, seen));
        self.outcome.verified_reads += 1;
    }

    /// (`SimConfig::snaps`) Takes a snapshot, or removes a random live one and queues a trim of
    /// every object that was ever changed to its owner.
    fn snapshot(&mut self, take: bool) {
        if take {
            self.snap_seq += 1;
            self.live_snaps.insert(0, self.snap_seq);
        } else if !self.live_snaps.is_empty() {
            let at = self.rng.range(0, self.live_snaps.len() as u64 - 1) as usize;
            self.live_snaps.remove(at);
            let objects: Vec<ObjectRef> = self.history.keys().copied().collect();
            for object in objects {
                self.clients[object.0 as usize].queue.push_back((object, Work::Trim));
            }
            for c in 0..self.cfg.clients {
                let at = self.now_us + self.rng.range(1, 50);
                self.schedule(at, Delivery::ClientTick(c));
            }
        }
        self.trace(&[format!("snapshots {} {:?}", self.snap_seq, self.live_snaps).as_bytes()]);
        tracing::info!(t_us = self.now_us, seq = self.snap_seq, live = ?self.live_snaps, "snapshots");
    }

    /// (`SimConfig::snaps`) Records an acknowledged change of the object under the context it
    /// was issued with, and the object's content after it.
    fn record_change(&mut self, op: &InFlight) {
        if let Some((seq, _)) = &op.ctx {
            let content = self.model.get(&op.object).cloned();
            self.history.entry(op.object).or_default().push((*seq, content));
        }
    }

    /// What `object` held at snapshot `snap`: its content after its last acknowledged change
    /// issued before the snapshot was taken (`None`: it did not exist then). Changes are issued
    /// one at a time per object and each under the context of its issue, so these are exactly the
    /// changes a write under a newer context finds in the head when it clones it.
    fn snapshot_content(&self, object: ObjectRef, snap: u64) -> Option<Vec<u8>> {
        self.history.get(&object)?.iter().rev().find(|(seq, _)| *seq < snap).and_then(|(_, c)| c.clone())
    }

    /// Checks what a read at a snapshot returned (`None`: not found). A snapshot removed since
    /// the read was issued may have been trimmed under it: nothing to check then.
    fn check_snap_read(&mut self, op: &InFlight, data: Option<&[u8]>) {
        let Some(snap) = op.snap else { return };
        if !self.live_snaps.contains(&snap) {
            return;
        }
        let want = self.snapshot_content(op.object, snap);
        if want.as_deref() == data {
            self.outcome.snap_reads_verified += 1;
        } else {
            self.outcome.violations.push(format!(
                "read of {} at snapshot {snap} at {} us returned {:?} bytes, the model says {:?}",
                object_name(op.object),
                self.now_us,
                data.map(<[u8]>::len),
                want.as_ref().map(Vec::len)
            ));
        }
    }

    fn finish(&mut self, c: u32, tid: u64, object: ObjectRef) {
        let client = &mut self.clients[c as usize];
        client.in_flight.remove(&tid);
        client.busy_objects.remove(&object);
        // A request parked for a newer map may have been answered meanwhile: its timeout resent
        // it (as the real client resends after a short wait, map or not). Nothing is left to
        // send, and a run must not wait for a map that nothing will make.
        client.parked.retain(|(t, _)| *t != tid);
        if !client.queue.is_empty() {
            let at = self.now_us + self.rng.range(1, 50);
            self.schedule(at, Delivery::ClientTick(c));
        }
    }

    /// After a failed run: each PG's acting set, activation record and state as its primary sees
    /// it, appended to the violations so that a failing seed explains itself.
    fn diagnose(&mut self) {
        let map = self.mon.map().clone();
        let epochs: Vec<String> = self.osds.iter().map(|(id, core)| format!("osd.{id}@{}", core.map().epoch)).collect();
        self.outcome.violations.push(format!("OSD maps: {}", epochs.join(" ")));
        self.outcome.violations.push(format!(
            "at {} us, epoch {}: crashed {:?}, isolated {:?}, links cut {:?}, cut from the monitors {:?}",
            self.now_us,
            map.epoch,
            self.crashed.keys().collect::<Vec<_>>(),
            self.isolated,
            self.cut_links.keys().collect::<Vec<_>>(),
            self.mon_cut
        ));
        for pool in map.pools.values() {
            for seed in 0..pool.pg_num {
                let pg = shoal_map::PgId { pool: pool.id, seed };
                let acting = map.pg_osds(pg).unwrap_or_default();
                let state = acting.first().and_then(|p| self.osds.get(&p.0)).and_then(|o| o.pg_state(pg));
                self.outcome.violations.push(format!(
                    "pg {pg}: up {:?} acting {acting:?} temp {:?} record {:?} state {state:?}",
                    map.pg_up_osds(pg).unwrap_or_default(),
                    map.pg_temp.get(&pg),
                    map.pg_active.get(&pg),
                ));
            }
        }
    }

    /// At quiescence: no temporary acting set is left. A clean cluster runs every PG on the OSDs
    /// placement names; a PG clean on a temporary set hands it back, also when placement has come
    /// to name the same OSDs meanwhile (decision 0057's amendment).
    fn check_no_temporary_sets(&mut self) {
        let map = self.mon.map().clone();
        for (pg, temp) in &map.pg_temp {
            self.outcome.violations.push(format!(
                "PG {pg} keeps the temporary acting set {temp:?} in a clean cluster (placement names {:?})",
                map.pg_up_osds(*pg).unwrap_or_default()
            ));
        }
    }

    /// At quiescence: every acknowledged object is on every OSD of its PG's acting set at the final
    /// map with its last acknowledged value, and on no other OSD (strays were removed).
    fn check_replicas(&mut self) {
        let map = self.mon.map().clone();
        let Ok(pool) = map.pool_by_name(POOL).cloned() else { return };
        // After damage, the final repair of every PG must find a good copy of every inconsistent
        // object: one it cannot repair has no good copy on any member (decision 0099's scrub
        // check names a snapshot clone lost everywhere this way).
        if self.rotted > 0 {
            for (pg, _, last, _) in self.last_scrubs() {
                if let Some(last) = last.filter(|l| l.inconsistent > l.repaired) {
                    self.outcome.violations.push(format!(
                        "PG {pg}: the final repair found {} inconsistent objects and could repair {}",
                        last.inconsistent, last.repaired
                    ));
                }
            }
        }
        for (&object, want) in &self.model {
            let name = object_name(object);
            let Ok(loc) = map.locate(pool.id, &name) else { continue };
            let coll = shoal_osd::exec::pg_collection(loc.pg);
            for (id, core) in &self.osds {
                let acting = loc.osds.contains(&OsdId(*id));
                match core.store().read_all(&coll, &name) {
                    Ok(bytes) if acting && bytes == *want => {}
                    Ok(_) if acting => self.outcome.violations.push(format!("osd.{id} holds a stale {name}")),
                    Err(e) if acting => self.outcome.violations.push(format!("osd.{id} lacks {name}: {e}")),
                    Ok(_) => {
                        self.outcome.violations.push(format!("osd.{id} still holds {name} outside its acting set"))
                    }
                    Err(_) => {}
                }
            }
        }
        if self.cfg.snaps {
            self.check_snapshots(&map, pool.id);
        }
        for pg in (0..pool.pg_num).map(|seed| shoal_map::PgId { pool: pool.id, seed }) {
            // A clean PG's activation record names every acting member (decision 0055): a
            // member it leaves out could never lead peering, though it holds every write.
            let acting = map.pg_osds(pg).unwrap_or_default();
            let named = map.pg_active.get(&pg).map(|r| r.members.clone());
            if named.as_ref().is_none_or(|m| acting.iter().any(|o| !m.contains(o))) {
                self.outcome
                    .violations
                    .push(format!("PG {pg} ends clean on {acting:?}, but its activation record names {named:?}"));
            }
            for osd in acting {
                let Some(core) = self.osds.get(&osd.0) else { continue };
                let log = shoal_osd::pglog::read_entries(&**core.store(), pg).unwrap_or_default();
                if log.first().is_some_and(|e| e.version.seq > 1) {
                    self.outcome.trimmed_logs += 1;
                }
            }
        }
        let _ = OpOutput::Done;
    }

    /// (`SimConfig::snaps`) At quiescence: every acting member's store reads every object at
    /// every live snapshot as the model says (through the snapshot state it holds, as a read at
    /// a snapshot does), a removed head is on no member, and no OSD outside the acting set keeps
    /// an object's clones or snapshot directory.
    fn check_snapshots(&mut self, map: &ClusterMap, pool: u32) {
        use shoal_osd::snaps::{SnapTarget, clone_name, companions, load, resolve_read};
        let objects: Vec<ObjectRef> = self.history.keys().copied().collect();
        for object in objects {
            let name = object_name(object);
            let Ok(loc) = map.locate(pool, &name) else { continue };
            let coll = shoal_osd::exec::pg_collection(loc.pg);
            let mut problems = Vec::new();
            let mut verified = 0;
            for (id, core) in &self.osds {
                let store = &**core.store();
                if !loc.osds.contains(&OsdId(*id)) {
                    if companions(store, &coll, &name).is_ok_and(|c| !c.is_empty()) {
                        problems.push(format!("osd.{id} still holds companions of {name} outside its acting set"));
                    }
                    continue;
                }
                let head_exists = store.exists(&coll, &name).unwrap_or(false);
                if head_exists != self.model.contains_key(&object) {
                    problems.push(format!("osd.{id} holds {name}'s head: {head_exists}, the model says otherwise"));
                }
                let set = match load(store, &coll, &name, head_exists) {
                    Ok((set, _)) => set,
                    Err(e) => {
                        problems.push(format!("osd.{id}: {name}'s snapshot state: {e}"));
                        continue;
                    }
                };
                // Every clone it holds is one its snapshot state names (none left behind by a
                // trim, a removal or a recovery).
                let named: Vec<String> = set.clones.iter().map(|c| clone_name(&name, c.id)).collect();
                let dir = shoal_osd::snaps::snapdir_name(&name);
                for held in companions(store, &coll, &name).unwrap_or_default() {
                    if held != dir && !named.contains(&held) {
                        problems
                            .push(format!("osd.{id} holds {held:?}, a clone its snapshot state {set:?} does not name"));
                    }
                }
                for &snap in &self.live_snaps {
                    let got = match resolve_read(&set, head_exists, snap) {
                        SnapTarget::Head => store.read_all(&coll, &name).ok(),
                        SnapTarget::Clone(c) => match store.read_all(&coll, &clone_name(&name, c)) {
                            Ok(bytes) => Some(bytes),
                            Err(e) => {
                                problems.push(format!("osd.{id} lacks clone {c} of {name}: {e}"));
                                continue;
                            }
                        },
                        SnapTarget::Absent => None,
                    };
                    let want = self.snapshot_content(object, snap);
                    if got == want {
                        verified += 1;
                    } else {
                        problems.push(format!(
                            "osd.{id} reads {name} at snapshot {snap} as {:?} bytes, the model says {:?} \
                             (snapshot state {set:?})",
                            got.as_ref().map(Vec::len),
                            want.as_ref().map(Vec::len)
                        ));
                    }
                }
            }
            self.outcome.snap_reads_verified += verified;
            self.outcome.violations.extend(problems);
        }
    }
}
