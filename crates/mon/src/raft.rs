//! The Raft side: openraft's type configuration, the replicated state machine (the map) and the
//! network between monitors (shoal-net frames of types 24..=31).

use std::collections::BTreeMap;
use std::io::Cursor;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::storage::RaftStateMachine;
use openraft::{
    AnyError, BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, Snapshot, SnapshotMeta,
    StorageError, StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};
use shoal_map::{Change, ClusterMap, CommandSession};
use shoal_net::{ClientConfig, Connection, NetError};
use shoal_proto::Frame;

use crate::daemon::Shared;
use crate::error::MonError;
use crate::sessions::SessionTable;
use crate::store::{self, SnapshotFile};

/// What a committed entry yields to the proposer: the map epoch after applying it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    pub epoch: u64,
}

/// One entry of the monitors' log: a map change, and the session of the client command it was
/// prepared from (decision 0072), recorded when the entry is applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    pub change: Change,
    pub session: Option<CommandSession>,
}

/// The replicated state a snapshot holds: the map and the applied commands' sessions.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotState {
    pub map: ClusterMap,
    pub sessions: SessionTable,
}

openraft::declare_raft_types!(
    /// The monitors' Raft: entries are [`Proposal`]s, nodes are ranks with their address.
    pub TypeConfig:
        D = Proposal,
        R = Applied,
        NodeId = u64,
        Node = BasicNode,
        SnapshotData = Cursor<Vec<u8>>,
);

/// A running monitor's Raft handle.
pub type MonRaft = openraft::Raft<TypeConfig>;

/// Raft RPCs between monitors and their replies.
pub const MSG_APPEND: u16 = 24;
pub const MSG_APPEND_REPLY: u16 = 25;
pub const MSG_VOTE: u16 = 26;
pub const MSG_VOTE_REPLY: u16 = 27;
pub const MSG_SNAPSHOT: u16 = 28;
pub const MSG_SNAPSHOT_REPLY: u16 = 29;
/// A client's `MonCommand` forwarded by a follower to the leader; answered with a
/// `MonCommandReply`. The leader never forwards it again.
pub const MSG_FORWARD: u16 = 30;

/// Timings chosen so a lone monitor elects itself within tens of milliseconds and three on
/// loopback or a LAN fail over well under a second.
pub(crate) fn raft_config() -> Result<Arc<openraft::Config>, MonError> {
    let cfg = openraft::Config {
        cluster_name: "shoal-mon".into(),
        heartbeat_interval: 50,
        election_timeout_min: 150,
        election_timeout_max: 300,
        install_snapshot_timeout: 2000,
        // Snapshots bound the log (and so the memory holding it and the replay on restart).
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(256),
        max_in_snapshot_log_to_keep: 64,
        purge_batch_size: 64,
        ..Default::default()
    };
    Ok(Arc::new(cfg.validate().map_err(|e| MonError::Config(format!("Raft configuration: {e}")))?))
}

fn sm_err(e: impl std::fmt::Display) -> StorageError<u64> {
    StorageIOError::write_state_machine(AnyError::error(e.to_string())).into()
}

struct SmState {
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
}

/// The replicated state machine: the map, held by the monitor core. Applying an entry feeds it
/// to the core (which pushes it to subscribers and answers the proposer).
///
/// Durability: the applied map itself lives in memory; what is on disk is the latest snapshot
/// (written atomically by [`RaftSnapshotBuilder::build_snapshot`] and
/// [`RaftStateMachine::install_snapshot`] before they return) plus the Raft log, from which
/// openraft re-applies the entries after the snapshot on restart.
pub(crate) struct StateMachine {
    dir: PathBuf,
    shared: Arc<Shared>,
    state: Arc<Mutex<SmState>>,
}

impl StateMachine {
    /// A state machine starting from the snapshot in `dir` (if any).
    pub(crate) fn new(dir: PathBuf, shared: Arc<Shared>, snapshot: Option<&SnapshotMeta<u64, BasicNode>>) -> Self {
        let state = match snapshot {
            Some(meta) => SmState { last_applied: meta.last_log_id, membership: meta.last_membership.clone() },
            None => SmState { last_applied: None, membership: StoredMembership::default() },
        };
        StateMachine { dir, shared, state: Arc::new(Mutex::new(state)) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SmState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Builds a snapshot from the state captured when the builder was made.
pub(crate) struct SnapshotBuilder {
    dir: PathBuf,
    state: SnapshotState,
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<u64>> {
        let data = postcard::to_allocvec(&self.state).map_err(sm_err)?;
        let epoch = self.state.map.epoch;
        let snapshot_id = match self.last_applied {
            Some(l) => format!("{}-{}-{}", l.leader_id.term, l.index, epoch),
            None => format!("0-0-{epoch}"),
        };
        let meta =
            SnapshotMeta { last_log_id: self.last_applied, last_membership: self.membership.clone(), snapshot_id };
        let file = SnapshotFile { meta: meta.clone(), data: data.clone() };
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || store::write_snapshot(&dir, &file))
            .await
            .map_err(sm_err)?
            .map_err(|e| StorageIOError::write_snapshot(None, AnyError::new(&e)))?;
        Ok(Snapshot { meta, snapshot: store::snapshot_data(data) })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), StorageError<u64>> {
        let s = self.lock();
        Ok((s.last_applied, s.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut out = Vec::new();
        for entry in entries {
            let epoch = match entry.payload {
                EntryPayload::Blank => self.shared.epoch(),
                EntryPayload::Normal(p) => self.shared.apply(entry.log_id.index, p.change, p.session),
                EntryPayload::Membership(m) => {
                    self.lock().membership = StoredMembership::new(Some(entry.log_id), m);
                    self.shared.epoch()
                }
            };
            self.lock().last_applied = Some(entry.log_id);
            out.push(Applied { epoch });
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        // Captured here, in the state machine's order, so map and log position agree.
        let s = self.lock();
        SnapshotBuilder {
            dir: self.dir.clone(),
            state: self.shared.state_clone(),
            last_applied: s.last_applied,
            membership: s.membership.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        Ok(store::snapshot_data(Vec::new()))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        let data = snapshot.into_inner();
        let state: SnapshotState = postcard::from_bytes(&data)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), AnyError::error(e.to_string())))?;
        let file = SnapshotFile { meta: meta.clone(), data };
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || store::write_snapshot(&dir, &file))
            .await
            .map_err(sm_err)?
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), AnyError::new(&e)))?;
        {
            let mut s = self.lock();
            s.last_applied = meta.last_log_id;
            s.membership = meta.last_membership.clone();
        }
        self.shared.install(state, meta.last_log_id.map_or(0, |l| l.index));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError<u64>> {
        let dir = self.dir.clone();
        let file = tokio::task::spawn_blocking(move || store::read_snapshot(&dir))
            .await
            .map_err(sm_err)?
            .map_err(|e| StorageIOError::read_snapshot(None, AnyError::new(&e)))?;
        Ok(file.map(|f| Snapshot { meta: f.meta, snapshot: store::snapshot_data(f.data) }))
    }
}

/// Connections from this monitor to its peers, shared by Raft and by command forwarding.
pub(crate) struct Peers {
    addrs: BTreeMap<u32, SocketAddr>,
    client: ClientConfig,
    conns: Mutex<BTreeMap<u32, Connection>>,
    /// When each peer last answered an RPC: what "quorum" in the status means.
    last_ok: Mutex<BTreeMap<u32, Instant>>,
}

/// Why a call to a peer failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PeerError {
    #[error("mon.{0} is not in the monitor map")]
    UnknownPeer(u32),
    #[error("mon.{rank}: {source}")]
    Net { rank: u32, source: NetError },
    #[error("mon.{rank} did not answer within {timeout_ms} ms")]
    Timeout { rank: u32, timeout_ms: u64 },
    #[error("mon.{rank} sent a reply that does not decode: {reason}")]
    BadReply { rank: u32, reason: String },
    #[error("mon.{rank}: {reason}")]
    Remote { rank: u32, reason: String },
}

impl Peers {
    pub(crate) fn new(addrs: BTreeMap<u32, SocketAddr>, client: ClientConfig) -> Peers {
        Peers { addrs, client, conns: Mutex::new(BTreeMap::new()), last_ok: Mutex::new(BTreeMap::new()) }
    }

    /// Drops every connection to peers (at shutdown).
    pub(crate) fn close(&self) {
        self.conns.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Ranks that answered within `window`.
    pub(crate) fn heard_within(&self, window: Duration) -> Vec<u32> {
        let now = Instant::now();
        let g = self.last_ok.lock().unwrap_or_else(|p| p.into_inner());
        g.iter().filter(|(_, t)| now.duration_since(**t) <= window).map(|(r, _)| *r).collect()
    }

    async fn conn(&self, rank: u32) -> Result<Connection, PeerError> {
        let existing = self.conns.lock().unwrap_or_else(|p| p.into_inner()).get(&rank).cloned();
        if let Some(c) = existing.filter(|c| !c.is_closed()) {
            return Ok(c);
        }
        let addr = *self.addrs.get(&rank).ok_or(PeerError::UnknownPeer(rank))?;
        let c = Connection::connect(addr, &self.client).await.map_err(|source| PeerError::Net { rank, source })?;
        self.conns.lock().unwrap_or_else(|p| p.into_inner()).insert(rank, c.clone());
        Ok(c)
    }

    /// Sends one request to `rank` and waits at most `timeout` for its reply frame.
    pub(crate) async fn call(
        &self,
        rank: u32,
        msg_type: u16,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Frame, PeerError> {
        let timeout_ms = timeout.as_millis() as u64;
        let fut = async {
            let c = self.conn(rank).await?;
            c.call(msg_type, payload).await.map_err(|source| match source {
                NetError::Remote { reason } => PeerError::Remote { rank, reason },
                source => PeerError::Net { rank, source },
            })
        };
        let frame = tokio::time::timeout(timeout, fut).await.map_err(|_| PeerError::Timeout { rank, timeout_ms })??;
        self.last_ok.lock().unwrap_or_else(|p| p.into_inner()).insert(rank, Instant::now());
        Ok(frame)
    }

    /// A Raft RPC: `req` out as `msg_type`, `Result<Resp, String>` back.
    async fn rpc<Req: Serialize, Resp: for<'de> Deserialize<'de>>(
        &self,
        rank: u32,
        msg_type: u16,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, PeerError> {
        let frame = self.call(rank, msg_type, shoal_proto::encode(req, Vec::new()), timeout).await?;
        let (r, _): (Result<Resp, String>, _) =
            shoal_proto::decode(frame.payload).map_err(|e| PeerError::BadReply { rank, reason: e.to_string() })?;
        r.map_err(|reason| PeerError::Remote { rank, reason })
    }
}

/// Hands openraft one [`PeerClient`] per target.
#[derive(Clone)]
pub(crate) struct Network {
    pub(crate) peers: Arc<Peers>,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: u64, _node: &BasicNode) -> PeerClient {
        PeerClient { peers: self.peers.clone(), rank: target as u32 }
    }
}

pub(crate) struct PeerClient {
    peers: Arc<Peers>,
    rank: u32,
}

fn rpc_error<E: std::error::Error>(e: PeerError) -> RPCError<u64, BasicNode, E> {
    match e {
        // The peer is down or not listening yet: openraft backs off (see `backoff`).
        PeerError::Net { .. } | PeerError::UnknownPeer(_) => RPCError::Unreachable(Unreachable::new(&e)),
        _ => RPCError::Network(NetworkError::new(&e)),
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.peers.rpc(self.rank, MSG_APPEND, &rpc, option.hard_ttl()).await.map_err(rpc_error)
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>> {
        self.peers.rpc(self.rank, MSG_SNAPSHOT, &rpc, option.hard_ttl()).await.map_err(rpc_error)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.peers.rpc(self.rank, MSG_VOTE, &rpc, option.hard_ttl()).await.map_err(rpc_error)
    }

    fn backoff(&self) -> openraft::network::Backoff {
        // A restarted peer should rejoin quickly; connecting on loopback or a LAN is cheap.
        openraft::network::Backoff::new(std::iter::repeat(Duration::from_millis(100)))
    }
}
