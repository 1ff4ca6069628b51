//! The OSD daemon: the I/O around [`OsdCore`].
//!
//! Threads: a tokio runtime serves connections (the messenger), follows the map and talks to
//! peers; one worker owns the core and the store. Connection handlers decode frames into
//! [`Event`]s and queue them to the worker (a bounded queue, so a flood of requests pushes back
//! on the sockets). The worker takes every event that is queued, handles them, syncs the store
//! once if any resulting action waits for durability (group commit), then performs the actions.
//! The worker is a thread of its own when the store's calls block on a device, and a task of the
//! runtime when they never block (the `mem` store; decision 0024).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use shoal_client::local::connect_osd;
use shoal_client::{ClusterConfig, MonClient};
use shoal_map::{Command, OsdId, Weight};
use shoal_net::{Connection, Handler, Keyring, Listeners, ServerConfig, ServerConn, error_frame};
use shoal_proto::osd::{OsdOp, PgList, PgQuery, RepOp, RepOpReply};
use shoal_proto::{ErrorCode, Frame, Message, RemoteError, decode, decode_bytes, encode};
use shoal_store::{BackendKind, MkfsOptions, ObjectStore};
use shoal_util::SummedBytes;
use tokio::sync::mpsc;

use crate::core::{Action, Event, OsdCore, PeerCall, ReadJob, Token};
use crate::lanes::{Lane, Lanes};
use crate::pacing::Pacer;

/// Events queued to the worker before handlers wait.
const WORKER_QUEUE_EVENTS: usize = 1024;
/// Events the worker handles before it syncs and acts (bounds the latency a batch adds).
const WORKER_BATCH_EVENTS: usize = 256;
/// Object data the worker handles before it syncs and acts. Group commit pays off for small
/// writes, whose cost is the sync; large writes cost their copy, and holding the first one's
/// reply until the last one of a batch is stored only stalls the client's pipeline (measured:
/// 4 MiB writes with 16 in flight ran at half speed with count-only batches).
const WORKER_BATCH_BYTES: usize = 4 << 20;
/// How long a worker run inline keeps the runtime thread at most before it lets the tasks it
/// woke run (see the end of `worker_loop`).
const INLINE_YIELD_AFTER: Duration = Duration::from_millis(1);
/// Replicated writes queued per peer OSD.
const PEER_QUEUE_OPS: usize = 1024;

/// Everything an OSD needs to start.
pub struct OsdConfig {
    pub id: OsdId,
    /// The host bucket of the map this OSD sits in.
    pub host: String,
    pub weight: Weight,
    pub backend: BackendKind,
    /// The engine store's directory (`block`, `posix`); unused for `mem`.
    pub store_dir: PathBuf,
    /// Capacity of a store created at first start (and of a `mem` store).
    pub size_bytes: u64,
    /// Where to listen; port 0 picks a free one (the map records the real address).
    pub listen: SocketAddr,
    /// How to reach the monitors, as `osd.N`.
    pub cluster: ClusterConfig,
    /// Keys of the entities allowed to connect (clients and peers).
    pub keyring: Arc<Keyring>,
    pub stats_interval_ms: u64,
    /// Pings to the OSDs this one shares PGs with, and when to report them unreachable
    /// (decision 0062).
    pub heartbeat: crate::HeartbeatConfig,
    /// How much a disk store's device caches (decision 0030); unused for `mem`.
    pub block_cache: shoal_store::CacheSizes,
}

fn open_store(cfg: &OsdConfig) -> Result<Arc<dyn ObjectStore>> {
    if cfg.backend == BackendKind::Mem {
        let store = shoal_store::engine::MemEngine::new_mem(cfg.size_bytes).context("creating the mem store")?;
        return Ok(Arc::new(store));
    }
    if !cfg.store_dir.join("SHOAL_STORE").exists() {
        // Made, then mounted below like an existing store (with this OSD's cache sizes).
        let opts = MkfsOptions { backend: cfg.backend, size_bytes: cfg.size_bytes, device: None, force: false };
        drop(
            shoal_store::mkfs(&cfg.store_dir, &opts)
                .with_context(|| format!("creating the store at {}", cfg.store_dir.display()))?,
        );
    }
    let store = shoal_store::open_with(&cfg.store_dir, cfg.block_cache)
        .with_context(|| format!("opening the store at {}", cfg.store_dir.display()))?;
    Ok(Arc::from(store))
}

/// Open client connections by token: the handler registers them, the worker replies on them.
type Conns = Arc<Mutex<HashMap<Token, ServerConn>>>;

struct Shared {
    events: mpsc::Sender<Event>,
    conns: Conns,
    /// The origin of the tick clock: requests are stamped on it as they arrive.
    started: Instant,
}

struct OsdHandler {
    shared: Arc<Shared>,
}

impl Handler for OsdHandler {
    async fn on_frame(&self, conn: &ServerConn, mut frame: Frame) {
        let token = conn.id();
        {
            let mut conns = self.shared.conns.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            conns.entry(token).or_insert_with(|| conn.clone());
        }
        let request_id = frame.request_id;
        let msg_type = frame.msg_type;
        let prefix_crc = frame.prefix_crc;
        // Block checksums the reader computed as a large payload arrived (decision 0094): the
        // bulk data at the payload's start keeps them all the way to the store.
        let block_crcs = frame.block_crcs.take();
        // The payload whole, as it was read: a large one in block-aligned memory, which the bulk
        // data of a write keeps all the way to the store (see `shoal_net::Payloads`).
        let payload = frame.into_bytes();
        // Clients' requests keep to the client bound (decision 0043): a primary replicates a
        // write's operations in a message of its own, which must stay within the header bound.
        let from_client =
            matches!(msg_type, OsdOp::TYPE | PgList::TYPE | PgQuery::TYPE | shoal_proto::osd::PgCommand::TYPE);
        if from_client
            && let Some(n) = shoal_proto::msg::header_len(&payload)
            && n > shoal_proto::msg::CLIENT_HEADER_MAX_BYTES
        {
            let why = format!(
                "request header of {n} bytes exceeds the limit of {} bytes for a client's operations",
                shoal_proto::msg::CLIENT_HEADER_MAX_BYTES
            );
            let _ = conn.send(error_frame(request_id, &why)).await;
            return;
        }
        let event = match msg_type {
            OsdOp::TYPE => decode_bytes::<OsdOp>(payload).map(|(op, data)| {
                // The checksum the reader computed over exactly these bytes, if it did.
                let data_crc = prefix_crc.filter(|(n, _)| *n == data.len()).map(|(_, crc)| crc);
                let arrived_ms = self.shared.started.elapsed().as_millis() as u64;
                let data = SummedBytes::new(data, block_crcs);
                Event::ClientOp { from: token, request_id, op, data, data_crc, arrived_ms }
            }),
            RepOp::TYPE => decode_bytes::<RepOp>(payload).map(|(op, data)| {
                let data = SummedBytes::new(data, block_crcs);
                Event::RepOp { from: token, request_id, op, data }
            }),
            PgList::TYPE => {
                decode_bytes::<PgList>(payload).map(|(req, _)| Event::PgList { from: token, request_id, req })
            }
            PgQuery::TYPE => {
                decode_bytes::<PgQuery>(payload).map(|(req, _)| Event::PgQuery { from: token, request_id, req })
            }
            shoal_proto::osd::PgCommand::TYPE => decode_bytes::<shoal_proto::osd::PgCommand>(payload)
                .map(|(req, _)| Event::PgCommand { from: token, request_id, req }),
            // Peering, recovery and scrub: the core decodes them.
            40..=49 | shoal_proto::osd::PgScanVersions::TYPE | shoal_proto::osd::PeerPing::TYPE
                if conn.peer_entity().starts_with("osd.") =>
            {
                Ok(Event::PeerMsg { from: token, request_id, msg_type, payload })
            }
            other => {
                let _ =
                    conn.send(error_frame(request_id, &format!("an OSD does not handle message type {other}"))).await;
                return;
            }
        };
        match event {
            Ok(event) => {
                if self.shared.events.send(event).await.is_err() {
                    let _ = conn.send(error_frame(request_id, "OSD is shutting down")).await;
                }
            }
            Err(e) => {
                let _ = conn.send(error_frame(request_id, &format!("malformed message: {e}"))).await;
            }
        }
    }

    fn on_close(&self, conn: &ServerConn) {
        self.shared.conns.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&conn.id());
    }
}

/// Runs an OSD until `shutdown` resolves: opens (or creates) its store, registers with the
/// monitors, serves, and on shutdown marks itself down and unmounts the store cleanly.
pub async fn run(cfg: OsdConfig, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<()> {
    let store = open_store(&cfg)?;
    let monc = connect_monitors(&cfg.cluster).await?;
    if !monc.map().osds.contains_key(&cfg.id) {
        let cmd = Command::CreateOsd { id: Some(cfg.id), host: cfg.host.clone(), weight: cfg.weight };
        match monc.command(cmd).await {
            Ok(_) => {}
            // Another start of the same OSD raced us: fine.
            Err(e) if e.code() == Some(ErrorCode::Exists) => {}
            Err(e) => return Err(e).context("registering the OSD"),
        }
    }
    let listener =
        tokio::net::TcpListener::bind(cfg.listen).await.with_context(|| format!("binding {}", cfg.listen))?;
    let addr = advertised_addr(listener.local_addr()?, &cfg.cluster.mons);

    let (tx, rx) = mpsc::channel(WORKER_QUEUE_EVENTS);
    let conns: Conns = Arc::new(Mutex::new(HashMap::new()));
    let started = Instant::now();
    let shared = Arc::new(Shared { events: tx.clone(), conns: conns.clone(), started });
    let mut core = OsdCore::new(cfg.id, store.clone(), monc.map()).context("loading the store's collections")?;
    core.set_heartbeats(cfg.heartbeat);
    // Whether the OSD reaches its peers, as of its latest tick: an OSD marked down while it
    // runs boots again only then (decision 0062).
    let reachable = Arc::new(AtomicBool::new(true));
    let runtime = tokio::runtime::Handle::current();
    // Peers hold a weak sender: the worker (which owns them) must see its queue close once the
    // server and the tasks feeding it are gone, or it would never end.
    let peers = Peers::new(tx.downgrade(), cfg.cluster.clone());
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel::<()>();
    let mode = WorkerMode::for_backend(cfg.backend);
    // A store whose reads wait on a device reads beside the worker, so that one slow read holds
    // no other request of the OSD (a RAM store's reads are quicker than the hand-off).
    let reads = match mode {
        WorkerMode::Thread => {
            core.set_read_offload(true);
            Some(ReadPool::start(store.clone(), tx.downgrade(), READ_THREADS, &cfg.id.to_string())?)
        }
        WorkerMode::Inline => None,
    };
    let worker = {
        let monc = monc.clone();
        // The worker gets the connections but no sender of its own queue, so that the queue
        // closes (and the worker ends) once the server and the feeding tasks are gone.
        let ended = WorkerEnded(Some(ended_tx));
        let reachable = reachable.clone();
        let work = async move {
            let _ended = ended;
            let io = WorkerIo { conns, peers, monc, runtime, reachable };
            worker_loop(core, rx, io, mode, started, reads).await;
        };
        match mode {
            WorkerMode::Thread => {
                let runtime = tokio::runtime::Handle::current();
                let thread = std::thread::Builder::new()
                    .name(format!("{}-worker", cfg.id))
                    .spawn(move || runtime.block_on(work))
                    .context("starting the worker thread")?;
                Worker::Thread(thread)
            }
            WorkerMode::Inline => Worker::Task(tokio::spawn(work)),
        }
    };

    // Follow the map, and accept the clients its auth table lists (besides the keyring file).
    cfg.keyring.set_learned(monc.map().auth.clone());
    let mut watch = monc.watch();
    let map_tx = tx.clone();
    let keyring = cfg.keyring.clone();
    let follow = tokio::spawn(async move {
        while watch.changed().await.is_ok() {
            let map = watch.borrow_and_update().clone();
            if let Some(map) = map {
                keyring.set_learned(map.auth.clone());
                if map_tx.send(Event::Map(map)).await.is_err() {
                    return;
                }
            }
        }
    });
    // Peer heartbeats, at their own interval (decision 0062).
    let beat_tx = tx.clone();
    let beat_ms = cfg.heartbeat.interval_ms.max(1);
    let beats = tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(beat_ms));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let now_ms = started.elapsed().as_millis() as u64;
            if beat_tx.send(Event::Heartbeat { now_ms }).await.is_err() {
                return;
            }
        }
    });
    // Report statistics (also the OSD's heartbeat to the monitors).
    let tick_tx = tx.clone();
    let interval_ms = cfg.stats_interval_ms.max(100);
    let ticker = tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(interval_ms));
        loop {
            every.tick().await;
            let now_ms = started.elapsed().as_millis() as u64;
            if tick_tx.send(Event::Tick { now_ms }).await.is_err() {
                return;
            }
        }
    });

    let server_cfg =
        ServerConfig { keyring: cfg.keyring.clone(), entity: cfg.id.to_string(), max_queued_replies: 1024 };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let listeners = with_local_socket(Listeners::tcp(listener), cfg.cluster.local_osd_socket(cfg.id), cfg.id);
    let server =
        tokio::spawn(shoal_net::serve(listeners, server_cfg, Arc::new(OsdHandler { shared: shared.clone() }), async {
            let _ = stop_rx.await;
        }));
    // An earlier run of this OSD that the monitors have not marked down yet, at this same address
    // (a fixed `--addr`, or the kernel handing out the same port again), would make the boot
    // below change nothing: no new interval, so peers would go on with the state they had with
    // the old process, and `shoal up` would wait for a boot that never shows. Marked down first,
    // the boot is a new incarnation.
    if monc.map().osds.get(&cfg.id).is_some_and(|o| o.up && o.addr == Some(addr)) {
        tracing::info!(osd = %cfg.id, %addr, "the map shows an earlier run of this OSD up at this address: marking it down first");
        monc.command(Command::OsdDown { id: cfg.id }).await.context("marking the OSD's earlier run down")?;
    }
    let epoch =
        monc.command(Command::OsdBoot { id: cfg.id, addr }).await.context("announcing the OSD to the monitors")?;
    tracing::info!(
        osd = %cfg.id, %addr, host = %cfg.host, backend = cfg.backend.name(), store = %cfg.store_dir.display(),
        epoch, "up and serving"
    );
    let reboot = tokio::spawn(boot_again_when_marked_down(monc.clone(), cfg.id, addr, epoch, reachable));

    // A worker that ended before shutdown (a panic: a broken invariant) takes the daemon down
    // with it: an OSD that answers heartbeats but handles nothing would hold its PGs hostage.
    let worker_died = tokio::select! {
        () = shutdown => false,
        _ = ended_rx => true,
    };
    // First, so that the down mark below is not answered with a boot.
    reboot.abort();
    if worker_died {
        tracing::error!(osd = %cfg.id, "the worker ended unexpectedly: stopping the OSD");
    }
    tracing::info!(osd = %cfg.id, "stopping: marking down, draining, unmounting");
    // Tell the monitors first, so clients stop sending here while we close.
    let _ = tokio::time::timeout(Duration::from_millis(500), monc.command(Command::OsdDown { id: cfg.id })).await;
    let _ = stop_tx.send(());
    ticker.abort();
    beats.abort();
    follow.abort();
    let _ = server.await;
    drop(shared);
    drop(tx);
    // The worker ends when every sender is gone; it then syncs and drops its store handle.
    let joined_ok = match worker {
        Worker::Thread(thread) => matches!(tokio::task::spawn_blocking(move || thread.join()).await, Ok(Ok(()))),
        Worker::Task(task) => task.await.is_ok(),
    };
    if worker_died || !joined_ok {
        bail!("the OSD worker failed");
    }
    store.flush().context("flushing the store at shutdown")?;
    tracing::info!(osd = %cfg.id, "stopped");
    Ok(())
}

/// Threads per `block` OSD that run client reads beside its worker.
const READ_THREADS: usize = 4;

/// The environment variable of the crash test of decision 0036: `before-sync:N` makes the OSD
/// abort (no cleanup, as SIGKILL would stop it) on the Nth batch that sent replicated writes,
/// after they left and before its own sync, so that its replicas hold writes it loses.
pub const CRASH_ENV: &str = "SHOAL_OSD_CRASH";

/// How long the crash point waits for the replicated writes to leave before aborting (they are
/// sent by the network tasks, not by the worker).
const CRASH_SEND_WAIT_MS: u64 = 300;

/// Aborts the process at the configured batch (see [`CRASH_ENV`]); without the variable, one
/// atomic load per batch that replicated.
fn crash_point_before_sync() {
    static AT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    static SEEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let at = AT.get_or_init(|| {
        let spec = std::env::var(CRASH_ENV).ok()?;
        let n = spec.strip_prefix("before-sync:").and_then(|n| n.parse().ok());
        if n.is_none() {
            tracing::error!(spec, "{CRASH_ENV} is not before-sync:N: ignored");
        }
        n
    });
    let Some(at) = *at else { return };
    if SEEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1 == at {
        std::thread::sleep(Duration::from_millis(CRASH_SEND_WAIT_MS));
        eprintln!("{CRASH_ENV}: aborting before the sync of replicating batch {at}");
        std::process::abort();
    }
}

/// Threads that run client reads beside the worker ([`Action::Read`]) and feed their outcomes
/// back as [`Event::ReadDone`]. The queue of jobs is unbounded here because the core bounds the
/// reads it offloads ([`crate::core::MAX_READS_IN_FLIGHT`]); a bounded one could deadlock (the worker waiting
/// to hand a job to threads waiting to hand it an outcome).
struct ReadPool {
    jobs: std::sync::mpsc::Sender<ReadJob>,
}

impl ReadPool {
    fn start(
        store: Arc<dyn ObjectStore>,
        events: mpsc::WeakSender<Event>,
        threads: usize,
        osd: &str,
    ) -> Result<ReadPool> {
        let (jobs, queue) = std::sync::mpsc::channel::<ReadJob>();
        let queue = Arc::new(Mutex::new(queue));
        for i in 0..threads {
            let (queue, store, events) = (queue.clone(), store.clone(), events.clone());
            std::thread::Builder::new()
                .name(format!("{osd}-read{i}"))
                .spawn(move || {
                    loop {
                        // Ends when the worker (the only sender) is gone.
                        let job = match queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).recv() {
                            Ok(job) => job,
                            Err(_) => return,
                        };
                        // A read that panics must still be answered: its object's writes wait
                        // for it (decision 0034), and would otherwise wait forever.
                        let run = || crate::exec::execute_reads(&*store, &job.coll, &job.object, &job.ops);
                        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).unwrap_or_else(|_| {
                            tracing::error!(object = %job.object, "a read panicked; answering it as failed");
                            Err(RemoteError::new(ErrorCode::Io, format!("reading {:?} failed on this OSD", job.object)))
                        });
                        // A weak sender: these threads never keep the worker's queue open.
                        let Some(events) = events.upgrade() else { return };
                        if events.blocking_send(Event::ReadDone { id: job.id, result }).is_err() {
                            return;
                        }
                    }
                })
                .context("starting a read thread")?;
        }
        Ok(ReadPool { jobs })
    }

    fn submit(&self, job: ReadJob) {
        // Fails only once every thread has ended, which happens only when the worker's queue
        // is closed: the OSD is stopping and the read's answer would go nowhere.
        let _ = self.jobs.send(job);
    }
}

/// Where the worker loop runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WorkerMode {
    /// On a thread of its own: for stores whose calls block on a device (`block`, `posix`), so
    /// that a sync or a read never stalls the sockets.
    Thread,
    /// As a task of the network runtime: for the `mem` store, whose calls never block. An event
    /// then reaches the worker, and its reply the connection's writer, by waking a task on the
    /// same runtime (tokio runs a task woken by another next, on the same thread) instead of
    /// waking another thread: two cross-CPU wake-ups less per operation (measured: OSD CPU per
    /// 4 KiB read -37%, per write -15%).
    Inline,
}

impl WorkerMode {
    fn for_backend(backend: BackendKind) -> WorkerMode {
        match backend {
            BackendKind::Mem => WorkerMode::Inline,
            BackendKind::Block | BackendKind::Posix => WorkerMode::Thread,
        }
    }
}

/// The running worker.
enum Worker {
    Thread(std::thread::JoinHandle<()>),
    Task(tokio::task::JoinHandle<()>),
}

/// Held by the worker; dropped when it ends, by return or by panic, which tells the
/// daemon.
struct WorkerEnded(Option<tokio::sync::oneshot::Sender<()>>);

impl Drop for WorkerEnded {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

/// The monitors mark an OSD down when its reports stop reaching them (a partition, a stalled
/// host) or when its peers report that they cannot reach it (decision 0062), even if it still
/// runs. Once it sees a map saying so, it boots again (at most once per `REBOOT_INTERVAL`), which
/// starts a new interval for its PGs, as a restart would; but only once it reaches its peers
/// (`reachable`, kept by the worker), or it would be reported and marked down again for as long
/// as it is cut off from them, each boot stalling its PGs once more. An OSD marked down more
/// than `MAX_MARKDOWNS` times within `MARKDOWN_PERIOD` stays down (as Ceph's
/// `osd_max_markdown_count`): a link that fails one way only (peers cannot reach it, it reaches
/// them) would otherwise make it flap for as long as the fault lasts.
async fn boot_again_when_marked_down(
    monc: MonClient,
    id: OsdId,
    addr: SocketAddr,
    boot_epoch: u64,
    reachable: Arc<AtomicBool>,
) {
    const REBOOT_INTERVAL: Duration = Duration::from_secs(1);
    const REACHABLE_POLL: Duration = Duration::from_millis(200);
    const MAX_MARKDOWNS: usize = 5;
    const MARKDOWN_PERIOD: Duration = Duration::from_secs(600);
    let mut watch = monc.watch();
    let mut last_try: Option<Instant> = None;
    let mut markdowns: std::collections::VecDeque<Instant> = std::collections::VecDeque::new();
    // Whether the latest map seen said up: a markdown counts once, however many maps show it.
    let mut was_up = true;
    // The map as it is now counts too: a markdown that came before this task subscribed would
    // otherwise go unseen until the next map.
    loop {
        let marked_down = watch
            .borrow_and_update()
            .as_ref()
            .is_some_and(|m| m.epoch > boot_epoch && m.osds.get(&id).is_some_and(|o| !o.up));
        if marked_down {
            let now = Instant::now();
            while markdowns.front().is_some_and(|t| now.duration_since(*t) > MARKDOWN_PERIOD) {
                markdowns.pop_front();
            }
            if std::mem::replace(&mut was_up, false) {
                markdowns.push_back(now);
            }
            if markdowns.len() > MAX_MARKDOWNS {
                tracing::error!(
                    osd = %id, markdowns = markdowns.len(), period_s = MARKDOWN_PERIOD.as_secs(),
                    "marked down too often while running: staying down; restart this OSD once its network is sound"
                );
                return;
            }
            if let Some(t) = last_try {
                tokio::time::sleep(REBOOT_INTERVAL.saturating_sub(t.elapsed())).await;
            }
            if !reachable.load(Ordering::Relaxed) {
                tracing::warn!(osd = %id, "marked down and cut off from its peers: booting again once it reaches them");
                while !reachable.load(Ordering::Relaxed) {
                    tokio::time::sleep(REACHABLE_POLL).await;
                }
            }
            last_try = Some(Instant::now());
            tracing::warn!(osd = %id, "the monitors marked this OSD down while it runs: booting again");
            if let Err(e) = monc.command(Command::OsdBoot { id, addr }).await {
                tracing::warn!(osd = %id, error = %e, "booting again failed; retried with the next map");
            }
        } else {
            was_up = true;
        }
        if watch.changed().await.is_err() {
            return;
        }
    }
}

/// The address to put in the map: the bound one, unless it is a wildcard (`0.0.0.0`), which
/// clients cannot connect to; then the local address this machine uses to reach the first
/// monitor (found by connecting a UDP socket, which sends nothing).
fn advertised_addr(bound: SocketAddr, mons: &[SocketAddr]) -> SocketAddr {
    if !bound.ip().is_unspecified() {
        return bound;
    }
    let local_ip = mons.first().and_then(|mon| {
        let any: SocketAddr = if mon.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0u16; 8], 0).into() };
        let probe = std::net::UdpSocket::bind(any).ok()?;
        probe.connect(mon).ok()?;
        probe.local_addr().ok().map(|a| a.ip())
    });
    match local_ip {
        Some(ip) => SocketAddr::new(ip, bound.port()),
        None => bound,
    }
}

/// How long an OSD keeps trying to reach the monitors at start: they may be starting at the
/// same moment (as under `shoal up`) or electing a leader.
const MON_CONNECT_TIMEOUT_MS: u64 = 30_000;

async fn connect_monitors(cluster: &ClusterConfig) -> Result<MonClient> {
    let deadline = Instant::now() + Duration::from_millis(MON_CONNECT_TIMEOUT_MS);
    let mut pause_ms = 5;
    loop {
        match MonClient::connect(cluster.clone()).await {
            Ok(m) => return Ok(m),
            // A refused key will not become valid by waiting.
            Err(e @ shoal_client::ClientError::Net(shoal_net::NetError::AuthRefused { .. })) => {
                return Err(e).context("connecting to the monitors");
            }
            Err(e) if Instant::now() >= deadline => {
                return Err(e).with_context(|| format!("connecting to the monitors for {MON_CONNECT_TIMEOUT_MS} ms"));
            }
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                pause_ms = (pause_ms * 2).min(200);
            }
        }
    }
}

/// What the worker carries its actions out with.
struct WorkerIo {
    conns: Conns,
    peers: Peers,
    monc: MonClient,
    runtime: tokio::runtime::Handle,
    /// Set after each tick from [`OsdCore::peers_reachable`].
    reachable: Arc<AtomicBool>,
}

async fn worker_loop(
    mut core: OsdCore,
    mut rx: mpsc::Receiver<Event>,
    io: WorkerIo,
    mode: WorkerMode,
    clock: Instant,
    reads: Option<ReadPool>,
) {
    let WorkerIo { conns, peers, monc, runtime, reachable } = io;
    let mut actions = Vec::new();
    // What a batch does after its sync (its actions but the replicated writes and reads, which
    // start before it).
    let mut after_sync = Vec::new();
    // Client I/O goes before recovery work (`lanes`): the worker takes in what has arrived, within
    // the lanes' bounds, and handles the batch they choose.
    let mut lanes = Lanes::default();
    // While clients are busy, recovery takes at most its share of this thread's time (`pacing`).
    let mut pacer = Pacer::default();
    let mut closed = false;
    let mut batch = Vec::new();
    let mut busy_since = Instant::now();
    loop {
        if lanes.is_empty() {
            match rx.recv().await {
                Some(ev) => lanes.push(ev),
                None => break,
            }
            // Most likely the receive waited (the queue was empty after the last batch), which
            // let every woken task run.
            busy_since = Instant::now();
        }
        while lanes.has_room() {
            match rx.try_recv() {
                Ok(ev) => lanes.push(ev),
                Err(_) => break,
            }
        }
        // Pacing never holds back work when the lanes are full (what waits in the channel
        // behind them may be client I/O) or once every sender is gone (shutting down).
        let background_ok = closed || !lanes.has_room() || pacer.background_ok(Instant::now());
        lanes.next_batch(WORKER_BATCH_EVENTS, WORKER_BATCH_BYTES, background_ok, &mut batch);
        if batch.is_empty() {
            assert!(!background_ok, "the lanes chose no event while holding some and allowed to");
            // Only paced recovery work is waiting: until its turn, or until something arrives.
            let wait = pacer.wait(Instant::now());
            match tokio::time::timeout(wait, rx.recv()).await {
                Ok(Some(ev)) => lanes.push(ev),
                Ok(None) => closed = true,
                Err(_elapsed) => {}
            }
            continue;
        }
        let started = Instant::now();
        let (mut client, mut background, mut tick) = (false, false, false);
        for e in &batch {
            match crate::lanes::lane(e) {
                Lane::Foreground(_) => client = true,
                Lane::Background(..) => background = true,
                Lane::Timer => tick = true,
                Lane::Barrier => {}
            }
        }
        // The clock requests' expiries are judged on, as of this batch (a tick may be queued
        // behind the batch's requests when the worker is behind).
        core.advance_clock(clock.elapsed().as_millis() as u64);
        for ev in batch.drain(..) {
            core.handle(ev, &mut actions);
        }
        if tick {
            reachable.store(core.peers_reachable(), Ordering::Relaxed);
        }
        // Replicated writes go out before this batch's sync, so that the replicas write while
        // the primary does (one disk write and flush on the write's path instead of two in a
        // row). Safe because nothing is acknowledged before both: the client's answer waits for
        // every replica's, which the worker handles in a later batch, after this sync. A primary
        // that crashes before its sync comes back behind its replicas, which peering handles as
        // any member that missed writes (decision 0036). Reads handed to the read threads start
        // now too: their answers are sent from a later batch, after its sync, so no reader hears
        // of anything that sync could still lose.
        let mut replicated = false;
        for action in actions.drain(..) {
            match action {
                Action::Replicate { osd, op, data, data_crc } => {
                    peers.send(&runtime, osd, PeerSend::Rep(op, data, data_crc), core.map());
                    replicated = true;
                }
                Action::Read(job) => match &reads {
                    Some(pool) => pool.submit(job),
                    // The core offloads reads only when told to, which only this mode does.
                    None => unreachable!("a read offloaded by an OSD that reads on its worker"),
                },
                other => after_sync.push(other),
            }
        }
        std::mem::swap(&mut actions, &mut after_sync);
        if replicated {
            crash_point_before_sync();
        }
        // A batch that sent replicated writes syncs now, while its replicas write theirs: the
        // primary's copy must be durable before the client's answer, and making it durable
        // here, not in the later batch that handles the replicas' answers, takes the primary's
        // flush off the write's path (it ran after the replicas' flushes). The later batch then
        // finds nothing new to flush unless it wrote more.
        let needs_sync = replicated || actions.iter().any(|a| matches!(a, Action::Reply { after_sync: true, .. }));
        let mut sync_error = None;
        if needs_sync {
            if let Err(e) = core.store().sync() {
                tracing::error!(error = %e, "store sync failed: failing this batch's writes");
                sync_error = Some(RemoteError::new(ErrorCode::Io, format!("store sync failed: {e}")));
            }
        } else if let Err(e) = core.store().settle() {
            // Only writes are staged and each has an `after_sync` reply, so this batch has no
            // reply to fail; the store refuses writes from now on.
            tracing::error!(error = %e, "store failed writing staged transactions");
        }
        let share_pct = core.map().setting(shoal_map::config::RECOVERY_BUSY_SHARE_PCT).clamp(1, 100);
        pacer.record(Instant::now(), started.elapsed(), client, background, share_pct);
        for action in actions.drain(..) {
            match action {
                Action::Reply { to, frame, after_sync } => {
                    let frame = match (&sync_error, after_sync) {
                        (Some(e), true) => error_frame(frame.request_id, &e.message),
                        _ => frame,
                    };
                    let conn = conns.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&to).cloned();
                    if let Some(conn) = conn
                        && let Err(shoal_net::TrySendError::Full(frame)) = conn.try_send(frame)
                    {
                        runtime.spawn(async move {
                            let _ = conn.send(*frame).await;
                        });
                    }
                }
                Action::Replicate { .. } => unreachable!("replicated writes are sent before the sync"),
                Action::Peer { osd, msg_type, payload, call } => {
                    peers.send(&runtime, osd, PeerSend::Call(msg_type, payload, call), core.map());
                }
                Action::MonCommand(command) => {
                    let monc = monc.clone();
                    let events = peers.events.clone();
                    runtime.spawn(async move {
                        let epoch = match monc.command(command).await {
                            Ok(epoch) => {
                                // The change is in the map from `epoch`: feed the answer once the
                                // OSD's map has it too (bounded wait; the core also waits).
                                let _ = monc.wait_for_epoch(epoch, 5_000).await;
                                Some(epoch)
                            }
                            Err(e) => {
                                tracing::info!(error = %e, "monitor command failed; retried by peering");
                                None
                            }
                        };
                        if let Some(events) = events.upgrade() {
                            let _ = events.send(Event::MonCommandDone { epoch }).await;
                        }
                    });
                }
                Action::Stats(stats) => {
                    let monc = monc.clone();
                    runtime.spawn(async move {
                        let _ = monc.report_stats(&stats).await;
                    });
                }
                Action::Read(_) => unreachable!("reads are handed off before the sync"),
            }
        }
        // Run inline, the worker shares its runtime thread with the tasks it wakes, and tokio runs
        // the task woken last (typically a connection's writer with a reply) only once the
        // running task yields, which the worker does by itself only when it runs out of work. So
        // under a steady load it yields at least every `INLINE_YIELD_AFTER`, which bounds how
        // long a reply can be held back. (Yielding after every batch cost 13% of 4 KiB writes:
        // each yield is a poll of the I/O driver.)
        if mode == WorkerMode::Inline && busy_since.elapsed() >= INLINE_YIELD_AFTER {
            tokio::task::yield_now().await;
            busy_since = Instant::now();
        }
    }
}

/// What goes to a peer: a replicated write, or a peering/recovery request with what it is for.
enum PeerSend {
    /// A replicated write, its data, and the data's crc32c when known.
    Rep(RepOp, bytes::Bytes, Option<u32>),
    Call(u16, Vec<u8>, PeerCall),
}

/// A message queued for one peer, with the peer's address at the epoch the core sent it.
type PeerWrite = (PeerSend, Option<SocketAddr>);

/// Connections to peer OSDs for replication: one queue and one sender task per peer, so
/// replicated writes leave in the order the primary handled them.
struct Peers {
    events: mpsc::WeakSender<Event>,
    cluster: ClusterConfig,
    queues: Mutex<HashMap<OsdId, mpsc::Sender<PeerWrite>>>,
}

impl Peers {
    fn new(events: mpsc::WeakSender<Event>, cluster: ClusterConfig) -> Peers {
        Peers { events, cluster, queues: Mutex::new(HashMap::new()) }
    }

    fn send(&self, runtime: &tokio::runtime::Handle, osd: OsdId, msg: PeerSend, map: &shoal_map::ClusterMap) {
        let addr = map.osds.get(&osd).and_then(|o| o.addr);
        let mut queues = self.queues.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let queue = queues.entry(osd).or_insert_with(|| {
            let (tx, rx) = mpsc::channel(PEER_QUEUE_OPS);
            runtime.spawn(peer_sender(osd, rx, self.events.clone(), self.cluster.clone()));
            tx
        });
        if let Err(e) = queue.try_send((msg, addr)) {
            let (reason, (msg, _)) = match e {
                mpsc::error::TrySendError::Full(m) => ("replication queue full", m),
                mpsc::error::TrySendError::Closed(m) => ("replication sender stopped", m),
            };
            let events = self.events.clone();
            let err = RemoteError::new(ErrorCode::Timeout, format!("{osd}: {reason}"));
            let event = failure_event(osd, &msg, err);
            runtime.spawn(async move {
                if let Some(events) = events.upgrade() {
                    let _ = events.send(event).await;
                }
            });
        }
    }
}

/// The event that tells the core a message to `osd` failed.
fn failure_event(osd: OsdId, msg: &PeerSend, err: RemoteError) -> Event {
    match msg {
        PeerSend::Rep(op, ..) => Event::RepReply { from: osd, reqid: op.reqid, result: Err(err) },
        PeerSend::Call(_, _, call) => Event::PeerReply { from: osd, call: call.clone(), result: Err(err) },
    }
}

/// Hands `event` to the worker from code that cannot wait (a connection's reader): at once when
/// the worker's queue has room, else from a task that waits for room, so the event is never lost
/// while the OSD runs. Dropped only when the OSD is shutting down.
fn feed_now(events: &mpsc::WeakSender<Event>, event: Event) {
    let Some(events) = events.upgrade() else { return };
    if let Err(mpsc::error::TrySendError::Full(event)) = events.try_send(event) {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    let _ = events.send(event).await;
                });
            }
            // Outside the runtime (the thread dropping a connection's last handle), waiting is
            // allowed.
            Err(_) => {
                let _ = events.blocking_send(event);
            }
        }
    }
}

/// Adds the OSD's local socket to `listeners`, so that clients and peers on this host skip
/// loopback TCP (decision 0027); without it (turned off, or the name is taken) the OSD serves
/// over TCP alone, which every client falls back to.
fn with_local_socket(listeners: Listeners, name: Option<String>, id: OsdId) -> Listeners {
    let Some(name) = name else {
        return listeners;
    };
    match shoal_net::bind_local(&name) {
        Ok(local) => listeners.with_local(local, &name),
        Err(e) => {
            tracing::warn!(osd = %id, name, error = %e, "no local socket: serving over TCP only");
            listeners
        }
    }
}

async fn peer_sender(
    osd: OsdId,
    mut rx: mpsc::Receiver<PeerWrite>,
    events: mpsc::WeakSender<Event>,
    cluster: ClusterConfig,
) {
    // Feeds an event back to the worker unless the OSD is shutting down.
    async fn feed(events: &mpsc::WeakSender<Event>, event: Event) {
        if let Some(events) = events.upgrade() {
            let _ = events.send(event).await;
        }
    }
    let mut conn: Option<(SocketAddr, Connection)> = None;
    let net = shoal_net::ClientConfig {
        entity: cluster.entity.clone(),
        key: shoal_net::Key(cluster.key.0),
        connect_timeout_ms: 2_000,
        max_in_flight: cluster.max_in_flight,
    };
    while let Some((msg, addr)) = rx.recv().await {
        let fail = |text: String| failure_event(osd, &msg, RemoteError::new(ErrorCode::Timeout, text));
        let Some(addr) = addr else {
            tracing::warn!(peer = %osd, "peer has no address in the map");
            feed(&events, fail(format!("{osd} has no address"))).await;
            continue;
        };
        let reuse = conn.as_ref().is_some_and(|(a, c)| *a == addr && !c.is_closed());
        if !reuse {
            match connect_osd(osd, addr, cluster.local_osd_socket(osd).as_deref(), &net).await {
                Ok(c) => conn = Some((addr, c)),
                Err(e) => {
                    conn = None;
                    tracing::warn!(peer = %osd, %addr, error = %e, "cannot reach peer");
                    feed(&events, fail(format!("connecting to {osd} at {addr}: {e}"))).await;
                    continue;
                }
            }
        }
        let Some((_, c)) = conn.as_ref() else { continue };
        // Queue the frame now (in order) and wait for the reply in a separate task, so messages to
        // this peer are pipelined but never reordered.
        let (msg_type, payload, call) = match msg {
            PeerSend::Rep(op, data, data_crc) => {
                let reqid = op.reqid;
                // The reply goes straight from the connection's reader to the worker: replicated
                // writes are the most frequent peer messages, and a task per reply was a spawn
                // and a wake-up per replica per write.
                let to_worker = events.clone();
                let then = move |reply: Result<shoal_proto::Frame, shoal_net::NetError>| {
                    let result = match reply {
                        Ok(frame) => match decode::<RepOpReply>(frame.payload) {
                            Ok((r, _)) => Ok(r),
                            Err(e) => Err(RemoteError::new(ErrorCode::Io, format!("{osd}: bad reply: {e}"))),
                        },
                        Err(e) => Err(RemoteError::new(ErrorCode::Timeout, format!("{osd}: {e}"))),
                    };
                    feed_now(&to_worker, Event::RepReply { from: osd, reqid, result });
                };
                match c.start_call_then(RepOp::TYPE, data, data_crc, encode(&op, Vec::new()), then).await {
                    Ok(()) => {}
                    Err(e) => {
                        let err = RemoteError::new(ErrorCode::Timeout, format!("{osd}: {e}"));
                        feed(&events, Event::RepReply { from: osd, reqid, result: Err(err) }).await;
                    }
                }
                continue;
            }
            PeerSend::Call(t, p, call) => (t, p, call),
        };
        match c.start_call(msg_type, payload).await {
            Ok(reply) => {
                let events = events.clone();
                tokio::spawn(async move {
                    let result = reply.await.map_err(|e| RemoteError::new(ErrorCode::Timeout, format!("{osd}: {e}")));
                    feed(&events, Event::PeerReply { from: osd, call, result }).await;
                });
            }
            Err(e) => {
                let err = RemoteError::new(ErrorCode::Timeout, format!("{osd}: {e}"));
                feed(&events, Event::PeerReply { from: osd, call, result: Err(err) }).await;
            }
        }
    }
}
