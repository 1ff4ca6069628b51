//! The monitor daemon: the core behind a lock, openraft, and a shoal-net server.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, ServerState};
use serde::Serialize;
use serde::de::DeserializeOwned;
use shoal_map::{Change, ClusterMap, CommandSession, MonInfo};
use shoal_net::{ClientConfig, Handler, Keyring, ServerConfig, ServerConn, error_frame, serve};
use shoal_proto::mon::{GetMap, GetStatus, MonCommand, MonCommandReply, OsdStats, StatusReply};
use shoal_proto::{ErrorCode, Frame, Message, RemoteError};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use crate::core::{Action, CoreConfig, Event, MonCore, Reply, ReplyTo};
use crate::error::MonError;
use crate::raft::{
    MSG_APPEND, MSG_APPEND_REPLY, MSG_FORWARD, MSG_SNAPSHOT, MSG_SNAPSHOT_REPLY, MSG_VOTE, MSG_VOTE_REPLY, MonRaft,
    Network, Peers, Proposal, SnapshotState, StateMachine, raft_config,
};
use crate::sessions::SessionTable;
use crate::store::{self, LogStore, Meta};

/// How long a follower waits for the leader to answer a forwarded command.
const FORWARD_TIMEOUT_MS: u64 = 5000;
/// How long a follower waits for the leader to take a forwarded OSD report.
const FORWARD_STATS_TIMEOUT_MS: u64 = 1000;
/// How often the core gets a tick (heartbeat grace, command deadlines) and leadership is checked
/// even without a Raft metrics change.
const TICK_MS: u64 = 100;
/// A peer that answered within this window counts as in the quorum in `StatusReply`.
const QUORUM_WINDOW_MS: u64 = 1000;
/// Forwards to the leader waiting for an answer at once; beyond it a command is refused as busy
/// and an OSD report is dropped (the next one replaces it).
const MAX_FORWARDS: usize = 1024;

/// How to run one monitor.
#[derive(Clone)]
pub struct MonConfig {
    pub rank: u32,
    /// Created by [`mkfs`].
    pub data_dir: PathBuf,
    /// Where to listen (ignored by [`run_with_listener`]).
    pub listen: SocketAddr,
    /// Where every monitor (this one included) listens, by rank. Empty: the addresses given to
    /// [`mkfs`].
    pub mons: BTreeMap<u32, SocketAddr>,
    /// Must hold `mon.<rank>` (used to connect to peers) and every entity allowed to connect.
    pub keyring: Arc<Keyring>,
}

impl MonConfig {
    #[must_use]
    pub fn new(
        rank: u32,
        data_dir: impl Into<PathBuf>,
        listen: SocketAddr,
        mons: BTreeMap<u32, SocketAddr>,
        keyring: Arc<Keyring>,
    ) -> MonConfig {
        MonConfig { rank, data_dir: data_dir.into(), listen, mons, keyring }
    }
}

/// Creates a monitor's data directory for cluster `fsid` whose monitors are `mons` (this one is
/// `rank`). Every monitor of a new cluster is created with the same `fsid` and `mons`, which
/// become the initial map (epoch 1, no OSDs, no pools) and the Raft membership.
///
/// Durability: the identity file and the directory entry are synced when this returns. Fails if
/// the directory already holds a monitor, or if `rank` is not in `mons`.
pub fn mkfs(data_dir: &Path, rank: u32, fsid: &str, mons: &BTreeMap<u32, SocketAddr>) -> Result<(), MonError> {
    if !mons.contains_key(&rank) {
        return Err(MonError::Config(format!("mon.{rank} is not among the monitors {:?}", mons.keys())));
    }
    if fsid.is_empty() {
        return Err(MonError::Config("empty fsid".into()));
    }
    store::write_meta(data_dir, &Meta::new(fsid.to_string(), rank, mons.clone()))
}

/// The map every monitor of a new cluster starts from.
fn genesis(meta: &Meta) -> ClusterMap {
    ClusterMap::new(meta.fsid.clone(), meta.mons.iter().map(|(r, a)| (*r, MonInfo { addr: *a })).collect())
}

/// Binds `cfg.listen` and runs the monitor until `shutdown` resolves; see [`run_with_listener`].
pub async fn run(cfg: MonConfig, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
    let listener =
        TcpListener::bind(cfg.listen).await.with_context(|| format!("mon.{}: binding {}", cfg.rank, cfg.listen))?;
    run_with_listener(cfg, listener, shutdown).await
}

/// Runs the monitor on an already bound listener until `shutdown` resolves.
///
/// On a fresh cluster rank 0 initializes Raft with every monitor of [`mkfs`] as a voter; the
/// others wait to be contacted. A lone monitor elects itself at once. Returns after the server
/// has closed its connections and Raft has stopped; everything Raft acknowledged is on disk
/// (see [`crate::store`]).
pub async fn run_with_listener(
    cfg: MonConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let dir = cfg.data_dir.clone();
    let meta = store::read_meta(&dir)?.ok_or_else(|| MonError::NotInitialized { path: dir.clone() })?;
    if meta.rank != cfg.rank {
        return Err(MonError::Config(format!("{} belongs to mon.{}, not mon.{}", dir.display(), meta.rank, cfg.rank)))?;
    }
    let rank = cfg.rank;
    let entity = format!("mon.{rank}");
    let key = cfg.keyring.get(&entity).ok_or_else(|| MonError::Config(format!("keyring has no key for {entity}")))?;
    let addrs = if cfg.mons.is_empty() { meta.mons.clone() } else { cfg.mons.clone() };
    let client = ClientConfig { connect_timeout_ms: 500, ..ClientConfig::new(&entity, key.clone()) };
    let peers = Arc::new(Peers::new(addrs, client));

    let snapshot = store::read_snapshot(&dir)?;
    let (state, index) = match &snapshot {
        Some(s) => {
            let state: SnapshotState = postcard::from_bytes(&s.data)
                .map_err(|e| MonError::corrupt(dir.join("snapshot"), format!("map does not decode: {e}")))?;
            (state, s.meta.last_log_id.map_or(0, |l| l.index))
        }
        None => (SnapshotState { map: genesis(&meta), sessions: SessionTable::default() }, 0),
    };
    let SnapshotState { map, sessions } = state;
    if map.fsid != meta.fsid {
        return Err(MonError::corrupt(&dir, format!("snapshot of cluster {} in cluster {}", map.fsid, meta.fsid)))?;
    }
    // OSD grace and queue bounds: the defaults of `CoreConfig::new` (5000 ms grace).
    let core_cfg = CoreConfig::new(rank);
    cfg.keyring.set_learned(map.auth.clone());
    let shared = Arc::new(Shared {
        rank,
        keyring: cfg.keyring.clone(),
        core: Mutex::new(MonCore::new(core_cfg, map, sessions, index)),
        conns: Mutex::new(HashMap::new()),
        raft: OnceLock::new(),
        peers: peers.clone(),
        start: Instant::now(),
        forwards: Arc::new(Semaphore::new(MAX_FORWARDS)),
    });

    let log = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || LogStore::open(&dir)
    })
    .await??;
    let pristine = log.is_pristine() && snapshot.is_none();
    let sm = StateMachine::new(dir.clone(), shared.clone(), snapshot.as_ref().map(|s| &s.meta));
    let raft = MonRaft::new(u64::from(rank), raft_config()?, Network { peers: peers.clone() }, log, sm)
        .await
        .context("starting Raft")?;
    let _ = shared.raft.set(raft.clone());

    if pristine && rank == 0 {
        let members: BTreeMap<u64, BasicNode> =
            meta.mons.iter().map(|(r, a)| (u64::from(*r), BasicNode { addr: a.to_string() })).collect();
        if let Err(e) = raft.initialize(members).await {
            // Already initialized (a restart between initialize and the first vote): harmless.
            tracing::info!(error = %e, "Raft initialize");
        }
    } else {
        let voters: BTreeSet<u64> = raft.metrics().borrow().membership_config.membership().voter_ids().collect();
        if voters.len() == 1 && voters.contains(&u64::from(rank)) {
            // Alone: no one to wait for, so skip the election timeout.
            let _ = raft.trigger().elect().await;
        }
    }

    let (stop_tx, stop_rx) = watch::channel(false);
    let watcher = tokio::spawn(watch_raft(shared.clone(), raft.clone(), stop_rx));
    let server_cfg = ServerConfig { max_queued_replies: 1024, ..ServerConfig::new(cfg.keyring.clone(), &entity) };
    let handler = Arc::new(MonHandler { shared: shared.clone() });
    let served = serve(listener, server_cfg, handler, shutdown).await;

    let _ = stop_tx.send(true);
    let _ = watcher.await;
    if let Err(e) = raft.shutdown().await {
        tracing::warn!(error = %e, "Raft did not shut down cleanly");
    }
    shared.peers.close();
    served.context("monitor server")?;
    Ok(())
}

/// Feeds leadership changes and ticks to the core until `stop`.
async fn watch_raft(shared: Arc<Shared>, raft: MonRaft, mut stop: watch::Receiver<bool>) {
    let mut metrics = raft.metrics();
    let mut tick = tokio::time::interval(Duration::from_millis(TICK_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<(Option<u32>, bool, Vec<u32>)> = None;
    loop {
        let ticked = tokio::select! {
            r = metrics.changed() => {
                if r.is_err() {
                    return;
                }
                false
            }
            _ = tick.tick() => true,
            _ = stop.wait_for(|s| *s) => return,
        };
        let (leader, ready, term) = {
            let m = metrics.borrow_and_update();
            let leader = m.current_leader.map(|l| l as u32);
            // A new leader first commits a blank entry of its term; once that is applied, every
            // entry of earlier terms is in the map and proposals can be prepared against it.
            let ready =
                m.state == ServerState::Leader && m.last_applied.is_some_and(|l| l.leader_id.term == m.current_term);
            (leader, ready, m.current_term)
        };
        // Leadership changes are rare and each stalls map changes: worth a line in the log.
        if last.as_ref().is_none_or(|(l, _, _)| *l != leader) {
            match leader {
                Some(l) => tracing::info!(rank = shared.rank, term, leader = l, "monitor leader elected"),
                None => tracing::info!(rank = shared.rank, term, "monitor leader lost: electing"),
            }
        }
        let quorum = match leader {
            Some(l) if l == shared.rank => {
                let mut q = shared.peers.heard_within(Duration::from_millis(QUORUM_WINDOW_MS));
                q.push(shared.rank);
                q.sort_unstable();
                q.dedup();
                q
            }
            // A follower only knows that it hears from the leader.
            Some(l) => {
                let mut q = vec![l, shared.rank];
                q.sort_unstable();
                q
            }
            None => Vec::new(),
        };
        let now_ms = shared.now_ms();
        let state = (leader, ready, quorum.clone());
        if last.as_ref() != Some(&state) {
            last = Some(state);
            shared.drive(Event::Leadership { leader, ready, quorum, now_ms });
        }
        if ticked {
            shared.drive(Event::Tick { now_ms });
        }
    }
}

/// What the Raft state machine, the server handler and the background tasks share.
pub(crate) struct Shared {
    rank: u32,
    /// The server's keyring: the bootstrap file plus the keys of the map's auth table.
    keyring: Arc<Keyring>,
    core: Mutex<MonCore>,
    /// Open client connections by id, to deliver replies and pushes. Entries are removed when
    /// the connection closes.
    conns: Mutex<HashMap<u64, ServerConn>>,
    raft: OnceLock<MonRaft>,
    peers: Arc<Peers>,
    start: Instant,
    forwards: Arc<Semaphore>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while these locks are held; a poisoned lock still holds consistent data.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether `entity` may receive the map's auth table: daemons (they check clients' keys) and
/// the administrator. Every other client gets maps and incrementals without keys.
fn may_see_keys(entity: &str) -> bool {
    entity.starts_with("mon.") || entity.starts_with("osd.") || entity == "client.admin"
}

/// Who may change the map: the administrator and monitors anything; an OSD only its own entry
/// (register, boot, mark itself down); other clients nothing (they read maps and do object I/O).
fn may_run(entity: &str, command: &shoal_map::Command) -> Result<(), String> {
    use shoal_map::Command as C;
    if entity == "client.admin" || entity.starts_with("mon.") {
        return Ok(());
    }
    let own = match command {
        C::CreateOsd { id: Some(id), .. }
        | C::OsdBoot { id, .. }
        | C::OsdDown { id }
        | C::PgTemp { by: id, .. }
        | C::PgActivated { by: id, .. } => Some(*id),
        _ => None,
    };
    match own {
        Some(id) if entity == id.to_string() => Ok(()),
        _ => Err(format!("permission denied: {entity} may not change the cluster map")),
    }
}

fn redacted(update: &shoal_proto::mon::MapUpdate) -> shoal_proto::mon::MapUpdate {
    shoal_proto::mon::MapUpdate {
        full: update.full.as_ref().map(ClusterMap::redacted),
        incrementals: update
            .incrementals
            .iter()
            .map(|i| shoal_map::Incremental { epoch: i.epoch, change: i.change.redacted() })
            .collect(),
    }
}

fn reply_frame(request_id: u64, reply: &Reply, peer: &str) -> Frame {
    match reply {
        Reply::Command(r) => shoal_proto::frame(request_id, &MonCommandReply { result: r.clone() }, Vec::new()),
        Reply::Map(m) if !may_see_keys(peer) => shoal_proto::frame(request_id, &redacted(m), Vec::new()),
        Reply::Map(m) => shoal_proto::frame(request_id, &**m, Vec::new()),
        Reply::Status(s) => shoal_proto::frame(request_id, s, Vec::new()),
    }
}

impl Shared {
    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Feeds one event to the core and carries out its actions. The actions are started while
    /// the core is still locked (none of them blocks), so replies and pushes leave in the order
    /// the core produced them: a subscriber never sees a push older than its map reply.
    pub(crate) fn drive(self: &Arc<Self>, event: Event) {
        let mut core = lock(&self.core);
        let actions = core.handle(event);
        for conn in self.dispatch(actions) {
            core.handle(Event::Closed { conn });
        }
    }

    /// The map epoch (for entries that do not change the map).
    pub(crate) fn epoch(&self) -> u64 {
        lock(&self.core).map().epoch
    }

    /// The replicated state, for a snapshot.
    pub(crate) fn state_clone(&self) -> SnapshotState {
        let core = lock(&self.core);
        SnapshotState { map: core.map().clone(), sessions: core.sessions().clone() }
    }

    /// Applies a committed change (from `session`'s command, if any); returns the epoch after it.
    pub(crate) fn apply(self: &Arc<Self>, index: u64, change: Change, session: Option<CommandSession>) -> u64 {
        let mut core = lock(&self.core);
        let auth_changed = matches!(change, Change::AuthSet { .. } | Change::AuthRemove { .. });
        let actions = core.handle(Event::Applied { index, change, session });
        for conn in self.dispatch(actions) {
            core.handle(Event::Closed { conn });
        }
        if auth_changed {
            self.keyring.set_learned(core.map().auth.clone());
        }
        core.map().epoch
    }

    /// Replaces the map and sessions with a snapshot's.
    pub(crate) fn install(self: &Arc<Self>, state: SnapshotState, index: u64) {
        self.keyring.set_learned(state.map.auth.clone());
        self.drive(Event::MapInstalled { index, map: Box::new(state.map), sessions: Box::new(state.sessions) });
    }

    /// Starts `actions`; returns connections that could not take a push (to unsubscribe).
    fn dispatch(self: &Arc<Self>, actions: Vec<Action>) -> Vec<u64> {
        let mut dropped = Vec::new();
        for action in actions {
            match action {
                Action::Propose { id, change, session } => self.propose(id, Proposal { change, session }),
                Action::Reply { to, reply } => {
                    if let Some(conn) = lock(&self.conns).get(&to.conn).cloned()
                        && let Err(e) = conn.try_send(reply_frame(to.request_id, &reply, conn.peer_entity()))
                    {
                        // The client stopped reading (or left); its request is lost with it.
                        tracing::warn!(conn = to.conn, peer = conn.peer_entity(), error = %e, "reply not queued");
                    }
                }
                Action::Push { conns, update } => {
                    let frame = shoal_proto::frame(0, &*update, Vec::new());
                    let mut without_keys: Option<Frame> = None;
                    let registry = lock(&self.conns);
                    for id in conns {
                        let sent = match registry.get(&id) {
                            Some(conn) if !may_see_keys(conn.peer_entity()) => {
                                let f = without_keys
                                    .get_or_insert_with(|| shoal_proto::frame(0, &redacted(&update), Vec::new()));
                                conn.try_send(f.clone())
                            }
                            Some(conn) => conn.try_send(frame.clone()),
                            None => Err(shoal_net::TrySendError::Failed(shoal_net::NetError::Closed)),
                        };
                        if let Err(e) = sent {
                            // A subscriber that does not keep up loses its connection (closed
                            // here, so it notices), reconnects and asks for what it missed.
                            tracing::warn!(conn = id, error = %e, "map push not queued: closing the subscriber");
                            if let Some(conn) = registry.get(&id) {
                                conn.close();
                            }
                            dropped.push(id);
                        }
                    }
                }
                Action::Forward { to, leader, command, session } => self.forward(to, leader, command, session),
                Action::ForwardStatus { to, leader, local } => self.forward_status(to, leader, *local),
                Action::ForwardStats { leader, stats } => {
                    let Ok(permit) = self.forwards.clone().try_acquire_owned() else {
                        tracing::debug!("too many forwards in flight: OSD report not relayed");
                        continue;
                    };
                    let peers = self.peers.clone();
                    tokio::spawn(async move {
                        let _permit = permit;
                        let timeout = Duration::from_millis(FORWARD_STATS_TIMEOUT_MS);
                        let payload = shoal_proto::encode(&stats, Vec::new());
                        if let Err(e) = peers.call(leader, OsdStats::TYPE, payload, timeout).await {
                            tracing::debug!(error = %e, "OSD report not forwarded to the leader");
                        }
                    });
                }
            }
        }
        dropped
    }

    fn propose(self: &Arc<Self>, id: u64, proposal: Proposal) {
        let Some(raft) = self.raft.get().cloned() else { return };
        let shared = self.clone();
        tokio::spawn(async move {
            // Success is reported by the state machine applying the entry; only failure is
            // reported from here.
            if let Err(e) = raft.client_write(proposal).await {
                let error = match &e {
                    RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => RemoteError::new(
                        ErrorCode::NoQuorum,
                        format!(
                            "mon.{} lost the leadership (leader now: {}); the command may or may not have been \
                             applied: check the map and retry",
                            shared.rank,
                            f.leader_id.map_or("none".to_string(), |l| format!("mon.{l}"))
                        ),
                    ),
                    e => RemoteError::new(ErrorCode::Other, format!("mon.{}: Raft: {e}", shared.rank)),
                };
                shared.drive(Event::ProposalFailed { id, error });
            }
        });
    }

    fn forward(
        self: &Arc<Self>,
        to: ReplyTo,
        leader: u32,
        command: shoal_map::Command,
        session: Option<CommandSession>,
    ) {
        let Ok(permit) = self.forwards.clone().try_acquire_owned() else {
            let e = RemoteError::new(
                ErrorCode::Other,
                format!("mon.{} busy: {MAX_FORWARDS} commands forwarded", self.rank),
            );
            self.send_reply(to, &Reply::Command(Err(e)));
            return;
        };
        let shared = self.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let timeout = Duration::from_millis(FORWARD_TIMEOUT_MS);
            let payload = shoal_proto::encode(&MonCommand { command, session }, Vec::new());
            let result = match shared.peers.call(leader, MSG_FORWARD, payload, timeout).await {
                Ok(frame) => match shoal_proto::decode_frame::<MonCommandReply>(frame) {
                    Ok((reply, _)) => reply.result,
                    Err(e) => Err(RemoteError::new(ErrorCode::Other, format!("bad reply from mon.{leader}: {e}"))),
                },
                Err(e) => Err(RemoteError::new(
                    ErrorCode::NoQuorum,
                    format!("mon.{} could not reach the leader: {e}", shared.rank),
                )),
            };
            shared.send_reply(to, &Reply::Command(result));
        });
    }

    /// Sends a reply that the core did not produce itself (a forwarded answer) to `to`, if its
    /// connection is still there; one that does not fit its queue is dropped (the client's
    /// request times out and is retried).
    fn send_reply(&self, to: ReplyTo, reply: &Reply) {
        if let Some(conn) = lock(&self.conns).get(&to.conn).cloned() {
            let _ = conn.try_send(reply_frame(to.request_id, reply, conn.peer_entity()));
        }
    }

    /// Relays the leader's status to `to`, or this monitor's own (partial) view if the leader
    /// does not answer in time or too many forwards are in flight.
    fn forward_status(self: &Arc<Self>, to: ReplyTo, leader: u32, local: StatusReply) {
        let Ok(permit) = self.forwards.clone().try_acquire_owned() else {
            self.send_reply(to, &Reply::Status(local));
            return;
        };
        let shared = self.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let timeout = Duration::from_millis(FORWARD_STATS_TIMEOUT_MS);
            let payload = shoal_proto::encode(&GetStatus, Vec::new());
            let status = match shared.peers.call(leader, GetStatus::TYPE, payload, timeout).await {
                Ok(frame) => match shoal_proto::decode_frame::<StatusReply>(frame) {
                    Ok((status, _)) => status,
                    Err(e) => {
                        tracing::debug!(error = %e, "bad status from the leader: answering with this monitor's view");
                        local
                    }
                },
                Err(e) => {
                    tracing::debug!(error = %e, "the leader did not answer a status request: answering with this monitor's view");
                    local
                }
            };
            shared.send_reply(to, &Reply::Status(status));
        });
    }
}

struct MonHandler {
    shared: Arc<Shared>,
}

fn decode<M: DeserializeOwned>(frame: &Frame) -> Result<M, String> {
    shoal_proto::decode_bytes::<M>(frame.clone().into_bytes()).map(|(m, _)| m).map_err(|e| e.to_string())
}

fn raft_reply<T: Serialize, E: std::fmt::Display>(request_id: u64, msg_type: u16, r: Result<T, E>) -> Frame {
    let r: Result<T, String> = r.map_err(|e| e.to_string());
    Frame::new(msg_type, request_id, shoal_proto::encode(&r, Vec::new()))
}

impl MonHandler {
    fn raft(&self) -> Option<&MonRaft> {
        self.shared.raft.get()
    }

    async fn handle(&self, conn: &ServerConn, frame: Frame) -> Result<(), String> {
        let shared = &self.shared;
        let to = ReplyTo { conn: conn.id(), request_id: frame.request_id };
        let from_mon = conn.peer_entity().starts_with("mon.");
        let now_ms = shared.now_ms();
        let rid = frame.request_id;
        match frame.msg_type {
            MonCommand::TYPE | MSG_FORWARD => {
                let forwarded = frame.msg_type == MSG_FORWARD;
                if forwarded && !from_mon {
                    return Err(format!("{} may not forward monitor commands", conn.peer_entity()));
                }
                let m: MonCommand = decode(&frame)?;
                if !forwarded && let Err(reason) = may_run(conn.peer_entity(), &m.command) {
                    let e = shoal_proto::RemoteError::new(shoal_proto::ErrorCode::Invalid, reason);
                    let _ = conn.send(reply_frame(rid, &Reply::Command(Err(e)), conn.peer_entity())).await;
                    return Ok(());
                }
                shared.drive(Event::Command {
                    to: Some(to),
                    command: m.command,
                    session: m.session,
                    forwarded,
                    now_ms,
                });
            }
            GetMap::TYPE => {
                let m: GetMap = decode(&frame)?;
                shared.drive(Event::GetMap { to, have_epoch: m.have_epoch, subscribe: m.subscribe });
            }
            GetStatus::TYPE => {
                let _: GetStatus = decode(&frame)?;
                shared.drive(Event::GetStatus { to, from_mon });
            }
            OsdStats::TYPE => {
                let stats: OsdStats = decode(&frame)?;
                let entity = conn.peer_entity();
                if entity.starts_with("osd.") && entity != stats.osd.to_string() {
                    return Err(format!("{entity} may not report for {}", stats.osd));
                }
                shared.drive(Event::OsdStats { stats, now_ms, forwarded: from_mon });
                // The acknowledgement is an empty frame of the same type: reports need no answer,
                // but callers that use request/reply calls get one.
                let _ = conn.send(Frame::new(OsdStats::TYPE, rid, Vec::new())).await;
            }
            MSG_APPEND | MSG_VOTE | MSG_SNAPSHOT => {
                if !from_mon {
                    return Err(format!("{} may not send Raft messages", conn.peer_entity()));
                }
                let Some(raft) = self.raft() else { return Err("Raft is not running yet".into()) };
                let reply = match frame.msg_type {
                    MSG_APPEND => raft_reply(rid, MSG_APPEND_REPLY, raft.append_entries(decode(&frame)?).await),
                    MSG_VOTE => raft_reply(rid, MSG_VOTE_REPLY, raft.vote(decode(&frame)?).await),
                    _ => raft_reply(rid, MSG_SNAPSHOT_REPLY, raft.install_snapshot(decode(&frame)?).await),
                };
                let _ = conn.send(reply).await;
            }
            t => return Err(format!("message type {t} is not served by monitors")),
        }
        Ok(())
    }
}

impl Handler for MonHandler {
    async fn on_frame(&self, conn: &ServerConn, frame: Frame) {
        lock(&self.shared.conns).entry(conn.id()).or_insert_with(|| conn.clone());
        let rid = frame.request_id;
        let msg_type = frame.msg_type;
        if let Err(reason) = self.handle(conn, frame).await {
            tracing::debug!(peer = conn.peer_entity(), msg_type, %reason, "refused a request");
            let _ = conn.send(error_frame(rid, &reason)).await;
        }
    }

    fn on_close(&self, conn: &ServerConn) {
        lock(&self.shared.conns).remove(&conn.id());
        self.shared.drive(Event::Closed { conn: conn.id() });
    }
}
