//! The monitor's logic without I/O: events in, actions out.
//!
//! [`MonCore`] owns the applied [`ClusterMap`], a bounded history of recent [`Incremental`]s, the
//! latest [`OsdStats`] of every OSD and the subscriber list, and decides what to do about each
//! [`Event`]. It never touches a socket, a disk or a clock (time arrives as `now_ms` in events),
//! so the daemon ([`crate::run`]) and a deterministic whole-cluster simulation drive the same
//! code.
//!
//! # Driving it without Raft
//!
//! Build it with [`MonCore::standalone`] (it is the leader from the start). Every
//! [`Action::Propose`] it returns is "committed" by feeding the same change back as
//! [`Event::Applied`]: the core then replies to the command that caused it with the new epoch and
//! pushes the incremental to subscribers. A proposal that cannot be committed is reported with
//! [`Event::ProposalFailed`].
//!
//! # Proposals are serialized
//!
//! The leader keeps at most one proposal in flight and queues the rest (bounded by
//! [`CoreConfig::max_queued_commands`]). A command is prepared against the map with every
//! earlier change applied, so two commands can never be resolved against the same epoch (two
//! `CreatePool` would otherwise pick the same pool id). A new leader proposes nothing until it has
//! applied every entry of earlier terms (`ready` in [`Event::Leadership`]), for the same reason.
//! One proposal per Raft round costs little: map changes are rare and small.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use shoal_map::{
    Change, ClusterMap, Command, CommandSession, FULL_CLEAR_PERMILLE, FULL_PERMILLE, Incremental, MapError, OsdId,
    PgId, used_permille,
};
use shoal_proto::mon::{MapUpdate, OsdStats, StatusReply};
use shoal_proto::{ErrorCode, RemoteError};

use crate::failures::FailureReports;
use crate::sessions::{Seen, SessionTable};

/// Identifies one client connection of the monitor (the messenger's connection id in the daemon).
pub type ConnId = u64;

/// Where a reply goes: a connection and the request id to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReplyTo {
    pub conn: ConnId,
    pub request_id: u64,
}

/// Tunables of [`MonCore`].
#[derive(Debug, Clone)]
pub struct CoreConfig {
    /// This monitor's rank.
    pub rank: u32,
    /// An up OSD that has not reported for this long is marked down by the leader.
    pub osd_grace_ms: u64,
    /// Incrementals kept for subscribers that are behind; one further behind gets the full map.
    pub history_len: usize,
    /// Commands waiting for the in-flight proposal (or for a leader); more are refused.
    pub max_queued_commands: usize,
    /// How long a command waits for a leader to be elected before it is refused with
    /// [`ErrorCode::NoQuorum`]. Waiting briefly lets daemons started together with the monitor
    /// register without a retry loop.
    pub no_leader_wait_ms: u64,
    /// Connections subscribed to map updates; further subscriptions get the map but no pushes.
    pub max_subscribers: usize,
    /// An up OSD is marked down once OSDs on at least this many distinct hosts report that they
    /// cannot reach it (decision 0062, [`crate::failures`]).
    pub min_down_reporter_hosts: usize,
    /// A peer's failure report counts for this long after it arrived (OSDs report every second;
    /// one that stops reporting is marked down by its own silence).
    pub failure_report_window_ms: u64,
}

impl CoreConfig {
    /// The defaults: 5 s OSD grace, 500 incrementals of history, 1024 queued commands, 2 s wait
    /// for a leader, 65536 subscribers, failure reports from two hosts within 5 s.
    #[must_use]
    pub fn new(rank: u32) -> CoreConfig {
        CoreConfig {
            rank,
            osd_grace_ms: 5000,
            history_len: 500,
            max_queued_commands: 1024,
            no_leader_wait_ms: 2000,
            max_subscribers: 65536,
            min_down_reporter_hosts: 2,
            failure_report_window_ms: 5000,
        }
    }
}

/// Something that happened to the monitor.
#[derive(Debug, Clone)]
pub enum Event {
    /// A client (or, with `forwarded`, another monitor on a client's behalf) asks for a map
    /// change. `to: None` is an internal command with nobody to answer. `session`: the client's
    /// name for a non-repeatable command, so that a resend is applied at most once (decision
    /// 0072).
    Command { to: Option<ReplyTo>, command: Command, session: Option<CommandSession>, forwarded: bool, now_ms: u64 },
    /// Raft committed a change and it must be applied now (entries arrive in log order, each
    /// exactly once per process lifetime after the snapshot the core was built from), with the
    /// session of the command it came from, if any.
    Applied { index: u64, change: Change, session: Option<CommandSession> },
    /// Proposal `id` could not be committed (lost leadership, Raft shut down). Ignored if that
    /// proposal is no longer in flight.
    ProposalFailed { id: u64, error: RemoteError },
    /// The state was replaced by a snapshot received from the leader, taken at Raft `index`.
    MapInstalled { index: u64, map: Box<ClusterMap>, sessions: Box<SessionTable> },
    /// An OSD's periodic report (also its heartbeat). `forwarded`: relayed by another monitor.
    OsdStats { stats: OsdStats, now_ms: u64, forwarded: bool },
    /// A client asks for the map newer than `have_epoch` and maybe to subscribe.
    GetMap { to: ReplyTo, have_epoch: u64, subscribe: bool },
    /// A connection closed: drop its subscription.
    Closed { conn: ConnId },
    /// A status request. `from_mon`: asked by another monitor (answered here, never forwarded:
    /// one hop only).
    GetStatus { to: ReplyTo, from_mon: bool },
    /// What Raft says about leadership. `ready`: this monitor is the leader and has applied
    /// every entry of earlier terms, so it may propose. `quorum`: ranks the leader hears from.
    Leadership { leader: Option<u32>, ready: bool, quorum: Vec<u32>, now_ms: u64 },
    /// Time passes: heartbeat grace and command deadlines are checked.
    Tick { now_ms: u64 },
}

/// The answer to one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// For a map command: the epoch at which the change is in the map.
    Command(Result<u64, RemoteError>),
    /// Boxed: a full map is much larger than the other replies.
    Map(Box<MapUpdate>),
    Status(StatusReply),
}

/// Something the caller must do.
#[derive(Debug, Clone)]
pub enum Action {
    /// Replicate `change` and `session` through Raft; feed them back as [`Event::Applied`] once
    /// committed, or report [`Event::ProposalFailed`] with the same `id`.
    Propose {
        id: u64,
        change: Change,
        session: Option<CommandSession>,
    },
    Reply {
        to: ReplyTo,
        reply: Reply,
    },
    /// Push `update` (request id 0) to every connection in `conns`; a connection whose queue is
    /// full should be closed (it re-subscribes), and reported with [`Event::Closed`].
    Push {
        conns: Vec<ConnId>,
        update: Arc<MapUpdate>,
    },
    /// Send `command` (with its session) to the leader and relay its answer to `to`.
    Forward {
        to: ReplyTo,
        leader: u32,
        command: Command,
        session: Option<CommandSession>,
    },
    /// Ask the leader for the status (it alone holds every OSD's latest report: a follower hears
    /// only the OSDs connected to it) and relay its answer to `to`; `local`, this monitor's own
    /// view, if the leader does not answer.
    ForwardStatus {
        to: ReplyTo,
        leader: u32,
        local: Box<StatusReply>,
    },
    /// Relay an OSD's report to the leader, which runs the heartbeat check.
    ForwardStats {
        leader: u32,
        stats: OsdStats,
    },
}

/// Maps a validation failure to the code a client acts on; the message is the error's text.
#[must_use]
pub fn remote_error(e: &MapError) -> RemoteError {
    let code = match e {
        MapError::UnknownPool(_)
        | MapError::UnknownOsd(_)
        | MapError::UnknownMon(_)
        | MapError::UnknownEntity(_)
        | MapError::NotBlocklisted { .. } => ErrorCode::NotFound,
        MapError::BlocklistFull { .. } => ErrorCode::NoSpace,
        MapError::DuplicatePool(_) | MapError::DuplicateOsd(_) => ErrorCode::Exists,
        MapError::InvalidPoolName { .. }
        | MapError::SizeTooLarge { .. }
        | MapError::InvalidPoolSetting(_)
        | MapError::InvalidConfig(_)
        | MapError::OsdNotRemovable { .. }
        | MapError::PgHistory { .. }
        | MapError::InvalidEntity { .. }
        | MapError::Placement(_) => ErrorCode::Invalid,
        MapError::EpochGap { .. } => ErrorCode::Other,
    };
    RemoteError::new(code, e.to_string())
}

/// A command as it arrives: from a client (`to` answers it), forwarded by another monitor, or
/// the leader's own.
struct Request {
    to: Option<ReplyTo>,
    command: Command,
    session: Option<CommandSession>,
    forwarded: bool,
}

impl Request {
    /// A command of the leader's own, with nobody to answer.
    fn internal(command: Command) -> Request {
        Request { to: None, command, session: None, forwarded: false }
    }
}

/// A command waiting for the ready leader: answered with `NoQuorum` once `deadline_ms` passes
/// without one.
struct Queued {
    request: Request,
    deadline_ms: u64,
}

struct InFlight {
    id: u64,
    /// Everyone waiting for this change: one requester, or several whose PG activations or
    /// temporary acting sets were merged into it.
    to: Vec<ReplyTo>,
    change: Change,
}

/// Answers a command that failed validation.
fn answer_refused(to: Option<ReplyTo>, e: &MapError, out: &mut Vec<Action>) {
    if let Some(to) = to {
        out.push(Action::Reply { to, reply: Reply::Command(Err(remote_error(e))) });
    }
}

/// Queued PG commands merged into one proposal at most: bounds a change's size.
const MAX_MERGED_COMMANDS: usize = 64;

/// The monitor's state machine. See the module documentation.
pub struct MonCore {
    cfg: CoreConfig,
    map: ClusterMap,
    /// Which clients' commands were applied: replicated with the map (decision 0072).
    sessions: SessionTable,
    /// The newest incrementals, oldest first, at most `cfg.history_len`.
    history: VecDeque<Incremental>,
    applied_index: u64,
    leader: Option<u32>,
    ready: bool,
    quorum: Vec<u32>,
    now_ms: u64,
    queue: VecDeque<Queued>,
    in_flight: Option<InFlight>,
    next_proposal: u64,
    subscribers: BTreeSet<ConnId>,
    /// Soft state: the latest report of each OSD in the map, and when the leader last heard
    /// from it (its own clock).
    stats: BTreeMap<OsdId, OsdStats>,
    last_heard_ms: BTreeMap<OsdId, u64>,
    /// OSDs this leader has proposed down and not yet seen change state, so it proposes once.
    down_pending: BTreeSet<OsdId>,
    /// When this leader first saw each down OSD that is still in (the down-out clock).
    down_since_ms: BTreeMap<OsdId, u64>,
    /// OSDs this leader asked to mark out, not yet out in the map.
    out_pending: BTreeSet<OsdId>,
    /// Which OSDs peers report they cannot reach (soft state, like `stats`).
    failures: FailureReports,
}

impl MonCore {
    /// A core holding `map` and `sessions` (applied up to Raft index `applied_index`), with no
    /// known leader.
    #[must_use]
    pub fn new(cfg: CoreConfig, map: ClusterMap, sessions: SessionTable, applied_index: u64) -> MonCore {
        MonCore {
            cfg,
            map,
            sessions,
            history: VecDeque::new(),
            applied_index,
            leader: None,
            ready: false,
            quorum: Vec::new(),
            now_ms: 0,
            queue: VecDeque::new(),
            in_flight: None,
            next_proposal: 1,
            subscribers: BTreeSet::new(),
            stats: BTreeMap::new(),
            last_heard_ms: BTreeMap::new(),
            down_pending: BTreeSet::new(),
            down_since_ms: BTreeMap::new(),
            out_pending: BTreeSet::new(),
            failures: FailureReports::default(),
        }
    }

    /// A core that is the (ready) leader from the start, for driving without Raft.
    #[must_use]
    pub fn standalone(cfg: CoreConfig, map: ClusterMap) -> MonCore {
        let rank = cfg.rank;
        let mut core = MonCore::new(cfg, map, SessionTable::default(), 0);
        core.leader = Some(rank);
        core.ready = true;
        core.quorum = vec![rank];
        core
    }

    #[must_use]
    pub fn map(&self) -> &ClusterMap {
        &self.map
    }

    /// The applied commands' sessions (replicated state, saved in snapshots with the map).
    #[must_use]
    pub fn sessions(&self) -> &SessionTable {
        &self.sessions
    }

    #[must_use]
    pub fn applied_index(&self) -> u64 {
        self.applied_index
    }

    #[must_use]
    pub fn leader(&self) -> Option<u32> {
        self.leader
    }

    #[must_use]
    pub fn is_ready_leader(&self) -> bool {
        self.ready && self.leader == Some(self.cfg.rank)
    }

    #[must_use]
    pub fn subscribers(&self) -> usize {
        self.subscribers.len()
    }

    /// The latest report of `osd`, if any.
    #[must_use]
    pub fn osd_stats(&self, osd: OsdId) -> Option<&OsdStats> {
        self.stats.get(&osd)
    }

    /// Handles one event and returns what to do, in order.
    pub fn handle(&mut self, event: Event) -> Vec<Action> {
        let mut out = Vec::new();
        match event {
            Event::Command { to, command, session, forwarded, now_ms } => {
                self.advance(now_ms);
                self.on_command(Request { to, command, session, forwarded }, &mut out);
            }
            Event::Applied { index, change, session } => self.on_applied(index, change, session, &mut out),
            Event::ProposalFailed { id, error } => {
                if self.in_flight.as_ref().is_some_and(|f| f.id == id)
                    && let Some(f) = self.in_flight.take()
                {
                    for to in f.to {
                        out.push(Action::Reply { to, reply: Reply::Command(Err(error.clone())) });
                    }
                    if let Change::OsdDown { id } = f.change {
                        self.down_pending.remove(&id);
                    }
                }
                self.pump(&mut out);
            }
            Event::MapInstalled { index, map, sessions } => {
                self.applied_index = index;
                // The history no longer leads to this map: subscribers get the whole map.
                self.history.clear();
                self.map = *map;
                self.sessions = *sessions;
                let update = Arc::new(MapUpdate { full: Some(self.map.clone()), incrementals: Vec::new() });
                self.push(update, &mut out);
            }
            Event::OsdStats { stats, now_ms, forwarded } => {
                self.advance(now_ms);
                self.on_stats(stats, forwarded, &mut out);
            }
            Event::GetMap { to, have_epoch, subscribe } => {
                let update = self.update_since(have_epoch);
                if subscribe && self.subscribers.len() < self.cfg.max_subscribers {
                    self.subscribers.insert(to.conn);
                }
                out.push(Action::Reply { to, reply: Reply::Map(Box::new(update)) });
            }
            Event::Closed { conn } => {
                self.subscribers.remove(&conn);
            }
            Event::GetStatus { to, from_mon } => {
                let reply = StatusReply {
                    epoch: self.map.epoch,
                    leader: self.leader,
                    quorum: self.quorum.clone(),
                    osd_stats: self.stats.values().cloned().collect(),
                };
                match self.leader {
                    Some(leader) if leader != self.cfg.rank && !from_mon => {
                        out.push(Action::ForwardStatus { to, leader, local: Box::new(reply) });
                    }
                    _ => out.push(Action::Reply { to, reply: Reply::Status(reply) }),
                }
            }
            Event::Leadership { leader, ready, quorum, now_ms } => {
                self.advance(now_ms);
                self.on_leadership(leader, ready, quorum, &mut out);
            }
            Event::Tick { now_ms } => {
                self.advance(now_ms);
                self.on_tick(&mut out);
            }
        }
        out
    }

    /// The update that brings a holder of `have_epoch` to the current map: nothing if it is
    /// current (or ahead, which happens when this monitor lags the one it heard from), the
    /// incrementals if the history reaches back far enough, the full map otherwise.
    #[must_use]
    pub fn update_since(&self, have_epoch: u64) -> MapUpdate {
        let epoch = self.map.epoch;
        if have_epoch >= epoch {
            return MapUpdate { full: None, incrementals: Vec::new() };
        }
        let oldest = self.history.front().map(|i| i.epoch);
        match oldest {
            Some(oldest) if have_epoch > 0 && have_epoch + 1 >= oldest => MapUpdate {
                full: None,
                incrementals: self.history.iter().filter(|i| i.epoch > have_epoch).cloned().collect(),
            },
            _ => MapUpdate { full: Some(self.map.clone()), incrementals: Vec::new() },
        }
    }

    fn advance(&mut self, now_ms: u64) {
        self.now_ms = self.now_ms.max(now_ms);
    }

    /// Forwards `q` to the leader, or queues it here (its deadline starts now).
    fn on_command(&mut self, r: Request, out: &mut Vec<Action>) {
        let Request { to, command, session, forwarded } = r;
        match self.leader {
            Some(leader) if leader != self.cfg.rank => {
                match (to, forwarded) {
                    (Some(to), false) => out.push(Action::Forward { to, leader, command, session }),
                    (Some(to), true) => {
                        // One hop only: leadership moved while the command travelled; the
                        // client retries against the new leader.
                        let e = RemoteError::new(
                            ErrorCode::NoQuorum,
                            format!("mon.{} is not the leader (mon.{leader} is): retry", self.cfg.rank),
                        );
                        out.push(Action::Reply { to, reply: Reply::Command(Err(e)) });
                    }
                    // Internal commands are the leader's business.
                    (None, _) => {}
                }
                return;
            }
            _ => {}
        }
        if self.queue.len() >= self.cfg.max_queued_commands {
            if let Some(to) = to {
                let e = RemoteError::new(
                    ErrorCode::Other,
                    format!("monitor busy: {} map commands already waiting", self.queue.len()),
                );
                out.push(Action::Reply { to, reply: Reply::Command(Err(e)) });
            }
            return;
        }
        let deadline_ms = self.now_ms.saturating_add(self.cfg.no_leader_wait_ms);
        self.queue.push_back(Queued { request: Request { to, command, session, forwarded }, deadline_ms });
        self.pump(out);
    }

    /// Starts the next queued command if this is the ready leader and nothing is in flight.
    /// Commands that need no change or fail validation are answered at once, so one call may
    /// drain many of them.
    fn pump(&mut self, out: &mut Vec<Action>) {
        while self.in_flight.is_none() && self.is_ready_leader() {
            let Some(q) = self.queue.pop_front() else { return };
            // A resend of a command already applied gets the first answer; nothing is proposed.
            // Every entry of earlier terms is applied before a leader is ready, so a first
            // attempt still in the log is either in the table by now or can never commit.
            let resent = match q.request.session.map(|s| self.sessions.seen(s)) {
                Some(Seen::Applied { epoch }) => Some(Ok(epoch)),
                Some(Seen::Forgotten) => Some(Err(RemoteError::new(
                    ErrorCode::Other,
                    "a command resent after the monitors forgot whether it was applied: check the map",
                ))),
                Some(Seen::New) | None => None,
            };
            if let Some(answer) = resent {
                if let Some(to) = q.request.to {
                    out.push(Action::Reply { to, reply: Reply::Command(answer) });
                }
                continue;
            }
            match self.map.prepare(&q.request.command) {
                Ok(Some(mut change)) => {
                    let mut to: Vec<ReplyTo> = q.request.to.into_iter().collect();
                    if q.request.session.is_none() {
                        self.merge_queued(&mut change, &mut to, out);
                    }
                    let id = self.next_proposal;
                    self.next_proposal += 1;
                    out.push(Action::Propose { id, change: change.clone(), session: q.request.session });
                    self.in_flight = Some(InFlight { id, to, change });
                }
                Ok(None) => self.answer_unchanged(q.request.to, out),
                Err(e) => answer_refused(q.request.to, &e, out),
            }
        }
    }

    /// Answers a command that needs no change: the map already says what it asks for.
    fn answer_unchanged(&self, to: Option<ReplyTo>, out: &mut Vec<Action>) {
        if let Some(to) = to {
            out.push(Action::Reply { to, reply: Reply::Command(Ok(self.map.epoch)) });
        }
    }

    /// Folds the PG commands waiting right behind a PG activation (or temporary acting set)
    /// change into it, so that a burst of peering on many OSDs costs one map epoch rather than
    /// one per OSD: every activation waits for its record in the map, and each epoch is a
    /// consensus round. Merging is exact: each command is prepared against the current map as
    /// it would be alone, and a record or entry only depends on its own PG's state, so commands
    /// about different PGs give the same map together as one after the other. The scan stops at
    /// the first command of another kind (nothing is reordered across it) and at the first one
    /// that names a PG already in the change.
    fn merge_queued(&mut self, change: &mut Change, to: &mut Vec<ReplyTo>, out: &mut Vec<Action>) {
        let mut pgs: BTreeSet<PgId> = match &*change {
            Change::PgActivated { records } => records.iter().map(|r| r.pg).collect(),
            Change::PgTemp { entries } => entries.iter().map(|e| e.0).collect(),
            _ => return,
        };
        let mut merged = 0;
        while merged < MAX_MERGED_COMMANDS
            && let Some(next) = self.queue.front()
        {
            if next.request.session.is_some() {
                // A command with a session is applied alone, so its session names one change.
                return;
            }
            let next_pgs: Vec<PgId> = match (&*change, &next.request.command) {
                (Change::PgActivated { .. }, Command::PgActivated { records, .. }) => {
                    records.iter().map(|r| r.proposal.pg).collect()
                }
                (Change::PgTemp { .. }, Command::PgTemp { entries, .. }) => entries.iter().map(|e| e.0).collect(),
                _ => return,
            };
            if next_pgs.iter().any(|pg| pgs.contains(pg)) {
                return;
            }
            let Some(q) = self.queue.pop_front() else { return };
            merged += 1;
            match (self.map.prepare(&q.request.command), &mut *change) {
                (Ok(Some(Change::PgActivated { records: more })), Change::PgActivated { records }) => {
                    records.extend(more);
                    to.extend(q.request.to);
                }
                (Ok(Some(Change::PgTemp { entries: more })), Change::PgTemp { entries }) => {
                    entries.extend(more);
                    to.extend(q.request.to);
                }
                (Ok(None), _) => self.answer_unchanged(q.request.to, out),
                (Err(e), _) => answer_refused(q.request.to, &e, out),
                // A PG command prepares to a change of its own kind; should another ever appear,
                // it goes back to wait for a proposal of its own.
                (Ok(Some(_)), _) => {
                    self.queue.push_front(q);
                    return;
                }
            }
            pgs.extend(next_pgs);
        }
    }

    fn on_applied(&mut self, index: u64, change: Change, session: Option<CommandSession>, out: &mut Vec<Action>) {
        self.applied_index = self.applied_index.max(index);
        if let Err(e) = self.map.apply(&change) {
            // Every monitor fails the same way on the same entry, so skipping it keeps them
            // identical. It means a change was prepared against a different map: a bug.
            tracing::error!(index, ?change, error = %e, "committed change does not apply; skipped");
            if self.in_flight.as_ref().is_some_and(|f| f.change == change)
                && let Some(f) = self.in_flight.take()
            {
                for to in f.to {
                    out.push(Action::Reply { to, reply: Reply::Command(Err(remote_error(&e))) });
                }
            }
            self.pump(out);
            return;
        }
        if let Some(session) = session {
            self.sessions.record(session, self.map.epoch);
        }
        let inc = Incremental { epoch: self.map.epoch, change };
        match &inc.change {
            Change::OsdUp { id, .. } => {
                self.down_pending.remove(id);
                // Reports about its earlier incarnation no longer apply.
                self.failures.forget(*id);
                // Grace starts at boot: the OSD's first report may still be on its way.
                self.last_heard_ms.insert(*id, self.now_ms);
            }
            Change::OsdDown { id } => {
                self.down_pending.remove(id);
                self.failures.forget(*id);
            }
            _ => {}
        }
        if self.in_flight.as_ref().is_some_and(|f| f.change == inc.change)
            && let Some(f) = self.in_flight.take()
        {
            for to in f.to {
                out.push(Action::Reply { to, reply: Reply::Command(Ok(inc.epoch)) });
            }
        }
        if self.history.len() >= self.cfg.history_len.max(1) {
            self.history.pop_front();
        }
        self.history.push_back(inc.clone());
        self.push(Arc::new(MapUpdate { full: None, incrementals: vec![inc] }), out);
        self.pump(out);
    }

    fn push(&self, update: Arc<MapUpdate>, out: &mut Vec<Action>) {
        if !self.subscribers.is_empty() {
            out.push(Action::Push { conns: self.subscribers.iter().copied().collect(), update });
        }
    }

    fn on_stats(&mut self, stats: OsdStats, forwarded: bool, out: &mut Vec<Action>) {
        let osd = stats.osd;
        // Only OSDs in the map are remembered, which bounds the soft state.
        if !self.map.osds.contains_key(&osd) {
            return;
        }
        self.last_heard_ms.insert(osd, self.now_ms);
        if !forwarded && let Some(leader) = self.leader.filter(|l| *l != self.cfg.rank) {
            out.push(Action::ForwardStats { leader, stats: stats.clone() });
        }
        self.flag_fullness(&stats, out);
        self.failures.record(&self.map, osd, stats.map_epoch, &stats.unreachable_peers, self.now_ms);
        self.stats.insert(osd, stats);
    }

    /// On the leader: flags an OSD full when its report crosses [`FULL_PERMILLE`] and clears the
    /// flag below [`FULL_CLEAR_PERMILLE`], unless such a change is already queued or in flight
    /// (reports arrive every second; one proposal per crossing is enough).
    fn flag_fullness(&mut self, stats: &OsdStats, out: &mut Vec<Action>) {
        if !self.is_ready_leader() {
            return;
        }
        let Some(info) = self.map.osds.get(&stats.osd) else { return };
        let permille = used_permille(stats.used_bytes, stats.capacity_bytes);
        let full = if info.full { permille >= FULL_CLEAR_PERMILLE } else { permille >= FULL_PERMILLE };
        if full == info.full {
            return;
        }
        let id = stats.osd;
        let is_full_change = |c: &Command| matches!(c, Command::OsdFull { id: i, .. } if *i == id);
        let in_flight =
            self.in_flight.as_ref().is_some_and(|f| matches!(f.change, Change::OsdFull { id: i, .. } if i == id));
        if in_flight || self.queue.iter().any(|q| is_full_change(&q.request.command)) {
            return;
        }
        tracing::info!(osd = %id, used_permille = permille, full, "OSD crossed the full threshold");
        self.on_command(Request::internal(Command::OsdFull { id, full }), out);
    }

    fn on_leadership(&mut self, leader: Option<u32>, ready: bool, quorum: Vec<u32>, out: &mut Vec<Action>) {
        let was_leader = self.is_ready_leader();
        self.leader = leader;
        self.ready = ready && leader == Some(self.cfg.rank);
        self.quorum = quorum;
        let is_leader = self.is_ready_leader();
        if is_leader && !was_leader {
            // Reports went to whichever monitor led before: every OSD gets a fresh grace.
            let now = self.now_ms;
            for t in self.last_heard_ms.values_mut() {
                *t = now;
            }
            self.down_pending.clear();
            self.failures.clear();
            // The down-out clock starts over too: this monitor cannot know how long before it
            // led an OSD went down, and marking out late is safe where early is not.
            self.down_since_ms.clear();
            self.out_pending.clear();
            self.pump(out);
        }
        if !is_leader && was_leader {
            self.down_pending.clear();
        }
        if leader.is_some_and(|l| l != self.cfg.rank) {
            // Hand the waiting commands to the new leader.
            for q in std::mem::take(&mut self.queue) {
                self.on_command(q.request, out);
            }
        }
    }

    fn on_tick(&mut self, out: &mut Vec<Action>) {
        let now = self.now_ms;
        // Commands that waited too long for a leader.
        if !self.is_ready_leader() {
            let mut keep = VecDeque::with_capacity(self.queue.len());
            for q in std::mem::take(&mut self.queue) {
                if q.deadline_ms <= now {
                    if let Some(to) = q.request.to {
                        let e = RemoteError::new(
                            ErrorCode::NoQuorum,
                            format!(
                                "mon.{} has no leader after waiting {} ms: fewer than a majority of monitors \
                                 are reachable",
                                self.cfg.rank, self.cfg.no_leader_wait_ms
                            ),
                        );
                        out.push(Action::Reply { to, reply: Reply::Command(Err(e)) });
                    }
                } else {
                    keep.push_back(q);
                }
            }
            self.queue = keep;
            return;
        }
        let grace = self.cfg.osd_grace_ms;
        let mut late = Vec::new();
        for (id, osd) in &self.map.osds {
            if !osd.up {
                continue;
            }
            let heard = *self.last_heard_ms.entry(*id).or_insert(now);
            if now.saturating_sub(heard) >= grace && !self.down_pending.contains(id) {
                late.push(*id);
            }
        }
        for id in late {
            tracing::info!(osd = %id, grace_ms = grace, "no report within the grace period: marking down");
            self.down_pending.insert(id);
            self.on_command(Request::internal(Command::OsdDown { id }), out);
        }
        let reported = self.failures.due(
            &self.map,
            &self.down_pending,
            now,
            self.cfg.failure_report_window_ms,
            self.cfg.min_down_reporter_hosts,
        );
        for id in reported {
            tracing::warn!(osd = %id, "peers on distinct hosts report it unreachable: marking down");
            self.down_pending.insert(id);
            self.on_command(Request::internal(Command::OsdDown { id }), out);
        }
        self.down_out(out);
    }

    /// Marks out the OSDs that have been down and in for the map's down-out interval, unless the
    /// `noout` flag is set, so that their PGs recover elsewhere without an operator.
    fn down_out(&mut self, out: &mut Vec<Action>) {
        let now = self.now_ms;
        let down_in: BTreeSet<OsdId> =
            self.map.osds.iter().filter(|(_, o)| !o.up && o.in_cluster).map(|(id, _)| *id).collect();
        self.down_since_ms.retain(|id, _| down_in.contains(id));
        self.out_pending.retain(|id| down_in.contains(id));
        for id in &down_in {
            self.down_since_ms.entry(*id).or_insert(now);
        }
        let interval_ms = self.map.setting(shoal_map::config::DOWN_OUT_INTERVAL_SECS).saturating_mul(1000);
        if interval_ms == 0 || self.map.flag("noout") {
            return;
        }
        let due: Vec<OsdId> = self
            .down_since_ms
            .iter()
            .filter(|(id, since)| now.saturating_sub(**since) >= interval_ms && !self.out_pending.contains(id))
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            tracing::info!(osd = %id, interval_ms, "down for the down-out interval: marking out");
            self.out_pending.insert(id);
            self.on_command(Request::internal(Command::OsdOut { id }), out);
        }
    }
}
