//! `shoal nbd serve POOL/IMAGE...`: block images over NBD, in the foreground (a service manager
//! runs it). Export names are `POOL/IMAGE`; the first image is also the default export.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use shoal_nbd::{BlockDevice, DeviceError, Export, Exports, Extent, Limits};

use shoal_rbd::{Fence, Image, RbdError, lock, snap};

use crate::conf::ConfArgs;

#[derive(Subcommand)]
pub enum NbdCommand {
    /// Serve images over NBD until SIGTERM or SIGINT.
    Serve(ServeArgs),
}

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    conf: ConfArgs,
    /// Images to export, as POOL/IMAGE.
    #[arg(required = true)]
    images: Vec<String>,
    /// TCP address to listen on.
    #[arg(long, conflicts_with = "socket")]
    listen: Option<std::net::SocketAddr>,
    /// Unix socket to listen on (removed first if it is a stale socket).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Export every image read-only.
    #[arg(long)]
    read_only: bool,
    /// Certificate chain (PEM) to serve TLS with; with it every client must start TLS
    /// (STARTTLS) before it can list or pick an export.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// Private key (PEM) of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// How long a request waits for an unavailable cluster (a PG peering, an OSD down) before
    /// failing with EIO.
    #[arg(long, default_value_t = 600)]
    io_wait_s: u64,
    /// Read-ahead for sequential readers, per export: once a client reads in order, the units
    /// after its reads (4 MiB, an object of the default layout) are fetched in the background
    /// from several OSDs at once, up to this many bytes held (e.g. 16M; 0: off). Only on
    /// exports nobody else can change: snapshots, and writable images while this server holds
    /// their lock.
    #[arg(long, env = "SHOAL_NBD_READAHEAD", default_value = "16M", value_parser = crate::conf::parse_size_arg)]
    readahead: u64,
    /// Lease of the exclusive lock a writable export holds on its image: renewed every third of
    /// it; a server that stops renewing loses the lock after it.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..))]
    lock_lease_s: u64,
    /// How long to wait for another holder's lock to lapse (a server killed without releasing
    /// it) before giving up (default: one lease and a second).
    #[arg(long)]
    lock_wait_s: Option<u64>,
    /// Threads serving connections. One (the default) runs every connection on the thread that
    /// accepts them: a request's steps (reading it, its cluster operations, writing its reply)
    /// wake each other several times, and on one thread a wake is a function call instead of a
    /// futex wake and a context switch on another core. More threads pay off only when several
    /// busy connections (multi-conn clients, several exports) have cores of their own.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: u16,
    /// Clients served at once; more wait to be accepted until one disconnects. Each connection
    /// holds at most 64 requests and 64 MiB of their data, so this bounds the server's memory
    /// (qemu's multi-conn and nbdcopy open 4 to 16 connections).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096))]
    max_connections: u32,
}

pub fn run(cmd: &NbdCommand) -> Result<ExitCode> {
    match cmd {
        NbdCommand::Serve(args) => serve(args),
    }
}

/// A block image as an NBD device.
struct ImageDevice(Image);

fn device_error(e: RbdError) -> DeviceError {
    DeviceError { errno: e.errno(), message: e.to_string() }
}

impl BlockDevice for ImageDevice {
    fn size_bytes(&self) -> u64 {
        self.0.size_bytes()
    }
    fn read_only(&self) -> bool {
        self.0.is_read_only()
    }
    async fn read(&self, offset: u64, len_bytes: u32) -> Result<bytes::Bytes, DeviceError> {
        self.0.read(offset, u64::from(len_bytes)).await.map_err(device_error)
    }
    async fn write(&self, offset: u64, data: Vec<u8>) -> Result<(), DeviceError> {
        self.0.write(offset, bytes::Bytes::from(data)).await.map_err(device_error)
    }
    async fn zero(&self, offset: u64, len_bytes: u64) -> Result<(), DeviceError> {
        self.0.zero(offset, len_bytes).await.map_err(device_error)
    }
    async fn flush(&self) -> Result<(), DeviceError> {
        self.0.flush().await.map_err(device_error)
    }
    async fn allocation(&self, offset: u64, len_bytes: u64) -> Result<Vec<Extent>, DeviceError> {
        let runs = self.0.allocation(offset, len_bytes).await.map_err(device_error)?;
        Ok(runs.into_iter().map(|r| Extent { offset: r.offset, len_bytes: r.len_bytes, hole: !r.allocated }).collect())
    }
}

/// Takes the lock of writable image `spec`, waiting for a stale holder's lease to lapse.
async fn take_lock(
    client: &shoal_client::Client,
    pool: &str,
    name: &str,
    holder: &str,
    description: &str,
    args: &ServeArgs,
) -> Result<lock::LockRecord> {
    let lease_ms = args.lock_lease_s * 1000;
    let wait_ms = args.lock_wait_s.map_or(lease_ms + 1000, |s| s * 1000);
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(wait_ms);
    loop {
        match lock::acquire(client, pool, name, holder, description, lease_ms).await {
            Ok(held) => return Ok(held),
            Err(RbdError::Locked { holder: other, .. }) if std::time::Instant::now() < deadline => {
                tracing::warn!(
                    image = name,
                    holder = other,
                    "the image is locked; waiting for its holder's lease to lapse"
                );
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// A lock this server holds: its image, its current record, and the image's fence.
struct HeldLock {
    pool: String,
    name: String,
    rec: tokio::sync::Mutex<lock::LockRecord>,
    fence: Arc<Fence>,
    /// The exported image (shared), whose snapshot context the watcher keeps current.
    image: Image,
}

/// How often a writable export looks for snapshot changes in its image's header.
const SNAP_POLL_MS: u64 = 200;
/// How long a stopping server waits for its writes in flight, and then for the cluster to take
/// back its locks, before it exits anyway.
const STOP_WAIT_MS: u64 = 10_000;

/// Keeps each writable export's snapshot context current: when a snapshot is taken or removed,
/// adopts the new context (after the writes in flight) and acknowledges it in the header, which
/// `shoal rbd snap create` waits for (see `shoal_rbd::snap`).
async fn watch_snaps(client: shoal_client::Client, held: Vec<Arc<HeldLock>>) {
    let mut acked: Vec<Option<u64>> = vec![None; held.len()];
    loop {
        for (h, acked) in held.iter().zip(acked.iter_mut()) {
            if h.fence.is_closed() {
                continue;
            }
            let generation = match h.image.refresh_snaps().await {
                Ok(g) => g,
                Err(e) => {
                    tracing::warn!(image = %h.name, error = %e, "reading the image's snapshots failed; retrying");
                    continue;
                }
            };
            if *acked == Some(generation) {
                continue;
            }
            let holder = h.rec.lock().await.holder.clone();
            match snap::acknowledge(&client, &h.pool, &h.image.info().spec.id, &holder, generation).await {
                Ok(()) => *acked = Some(generation),
                Err(e) => {
                    tracing::warn!(image = %h.name, error = %e, "acknowledging a snapshot change failed; retrying")
                }
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(SNAP_POLL_MS)).await;
    }
}

/// Renews each lock every third of a lease until the process ends (see [`keep_lock`]), each on
/// its own task, so that a renewal waiting for the cluster holds back no other image's. Aborting
/// this task aborts them (the set is dropped).
async fn keep_locks(client: shoal_client::Client, held: Vec<Arc<HeldLock>>, lease_s: u64) {
    let mut tasks = tokio::task::JoinSet::new();
    for h in held {
        tasks.spawn(keep_lock(client.clone(), h, lease_s));
    }
    while tasks.join_next().await.is_some() {}
}

/// Renews one lock every third of a lease; each renewal moves the fence's write deadline to
/// half a lease after it started. A lock found taken or broken closes its image's fence (writes
/// refused for good). A lock whose write deadline passes before a renewal gets through — the
/// cluster cannot serve the image's header, and a renewal waits for it — suspends the fence the
/// moment it passes, whether or not a renewal is still waiting: writes wait, since another server
/// may take the lock over half a lease later. A renewal that then gets through finds the record
/// still this server's (nobody took it) and opens the fence again (decision 0061).
async fn keep_lock(client: shoal_client::Client, h: Arc<HeldLock>, lease_s: u64) {
    let every = std::time::Duration::from_millis(lease_s * 1000 / 3);
    let mut pause = every;
    loop {
        tokio::time::sleep(pause).await;
        if h.fence.is_closed() {
            return;
        }
        let suspend = || {
            if h.fence.suspend() {
                tracing::warn!(image = %h.name, "the image's lock was not renewed within half its lease: writes wait until it is");
            }
        };
        let mut rec = h.rec.lock().await;
        let last = rec.clone();
        // Set when the lock was taken and by every renewal since; none would be a deadline passed.
        let deadline = h.fence.deadline().unwrap_or_else(std::time::Instant::now);
        let result = {
            let renewal = lock::renew(&client, &h.pool, &h.name, &last);
            tokio::pin!(renewal);
            loop {
                tokio::select! {
                    r = &mut renewal => break r,
                    () = tokio::time::sleep_until(deadline.into()), if h.fence.is_open() => suspend(),
                }
            }
        };
        match result {
            Ok(Some(next)) => {
                // A renewal that waited long for the cluster wrote the time it started, which
                // may be half a lease ago already (past the write deadline it gives): it is
                // renewed again at once, and the fence opens only on a record within its deadline.
                h.fence.renewed_by(&next);
                *rec = next;
                let fresh = h.fence.before_deadline();
                pause = if fresh { every } else { std::time::Duration::ZERO };
                if !fresh {
                    suspend();
                } else if h.fence.reopen() {
                    tracing::warn!(image = %h.name, "the image's lock is renewed again: writes go on");
                }
            }
            Ok(None) => {
                h.fence.close();
                tracing::error!(image = %h.name, "the image's lock was broken or taken over; refusing writes");
                return;
            }
            Err(e) if e.is_blocklisted() => {
                h.fence.close();
                tracing::error!(image = %h.name, error = %e, "this server was fenced off the cluster (its lock was broken or taken over); refusing writes");
                return;
            }
            Err(e) => {
                pause = every;
                tracing::warn!(image = %h.name, error = %e, "renewing the image's lock failed; retrying");
            }
        }
    }
}

/// Serves one connection, holding its `slot` of `--max-connections` until it ends.
async fn serve_in_slot<S: shoal_nbd::SplitStream>(
    exports: std::sync::Arc<shoal_nbd::Exports<ImageDevice>>,
    stream: S,
    peer: String,
    stop: tokio::sync::watch::Receiver<bool>,
    _slot: tokio::sync::OwnedSemaphorePermit,
) {
    shoal_nbd::serve_connection(exports, stream, peer, stop).await;
}

/// Where a server accepts clients.
enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

fn serve(args: &ServeArgs) -> Result<ExitCode> {
    crate::daemons::init_logging();
    let cluster = args.conf.cluster()?;
    let rt = crate::daemons::serving_runtime(args.threads, || {})?;
    // A bad identity stops the start before anything is opened or locked.
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            let files = shoal_net::tls::TlsFiles { cert: cert.clone(), key: key.clone() };
            Some(shoal_net::tls::acceptor(&files, &[]).context("loading the TLS identity")?)
        }
        _ => None,
    };
    rt.block_on(async {
        let client = shoal_client::Client::connect(cluster).await.context("connecting to the cluster")?;
        let mut exports = Vec::new();
        let holder = lock::holder_id();
        let what = match (&args.socket, args.listen) {
            (Some(p), _) => format!("nbd serve {}", p.display()),
            (None, l) => format!("nbd serve {}", l.map_or("127.0.0.1:10809".to_string(), |a| a.to_string())),
        };
        let mut held = Vec::new();
        for spec in &args.images {
            let (pool, name, snap_name) = crate::rbd_cmd::parse_snap_spec(spec)?;
            let opened = match snap_name {
                // A snapshot is exported read-only and takes no lock.
                Some(snap_name) => Image::open_snap(&client, pool, name, snap_name).await,
                None => Image::open(&client, pool, name, args.read_only).await,
            };
            let mut image =
                opened.with_context(|| format!("opening {spec}"))?.with_wait_ms(args.io_wait_s.saturating_mul(1000));
            if !image.is_read_only() {
                let rec = take_lock(&client, pool, name, &holder, &what, args).await.with_context(|| format!("locking {spec}"))?;
                // The snapshot context read at open may predate the lock: a snapshot taken in
                // between found no holder to wait for, so this server must carry it before its
                // first write. (One taken after the lock waits for this server's acknowledgement.)
                image.refresh_snaps().await.with_context(|| format!("reading {spec}'s snapshots"))?;
                let fence = Arc::new(Fence::new());
                fence.renewed_by(&rec);
                image = image.with_fence(fence.clone()).with_readahead(args.readahead);
                held.push(Arc::new(HeldLock {
                    pool: pool.to_string(),
                    name: name.to_string(),
                    rec: tokio::sync::Mutex::new(rec),
                    fence,
                    image: image.clone(),
                }));
            }
            if snap_name.is_some() {
                image = image.with_readahead(args.readahead);
            }
            let description = format!("shoal image {spec} ({} bytes)", image.size_bytes());
            exports.push(Export { name: spec.clone(), description, device: Arc::new(ImageDevice(image)) });
        }
        let exports = Arc::new(Exports { exports, limits: Limits::default(), tls });
        let renewing = tokio::spawn(keep_locks(client.clone(), held.clone(), args.lock_lease_s));
        let watching = tokio::spawn(watch_snaps(client.clone(), held.clone()));
        let first = args.images[0].clone();
        let tls_suffix = if exports.tls.is_some() { "s" } else { "" };
        let listener = match &args.socket {
            Some(path) => {
                if path.exists() {
                    // Only a socket nobody answers on is replaced.
                    if std::os::unix::net::UnixStream::connect(path).is_ok() {
                        bail!("{} is in use by another server", path.display());
                    }
                    std::fs::remove_file(path).with_context(|| format!("removing stale {}", path.display()))?;
                }
                let listener =
                    tokio::net::UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
                tracing::info!(uri = %format!("nbd{}+unix:///{first}?socket={}", tls_suffix, path.display()), "NBD server serving");
                Listener::Unix(listener)
            }
            None => {
                let addr = args.listen.unwrap_or_else(|| "127.0.0.1:10809".parse().expect("a valid address"));
                let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
                tracing::info!(uri = %format!("nbd{tls_suffix}://{}/{first}", listener.local_addr()?), "NBD server serving");
                Listener::Tcp(listener)
            }
        };
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let mut connections = tokio::task::JoinSet::new();
        let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(args.max_connections as usize));
        let accept = async {
            loop {
                // Reap finished connections so that the set stays as large as the live ones.
                while connections.try_join_next().is_some() {}
                // A slot first: past the limit, clients wait in the listen backlog.
                let Ok(slot) = slots.clone().acquire_owned().await else { break };
                let stop = stop_rx.clone();
                let exports = exports.clone();
                match &listener {
                    Listener::Tcp(l) => {
                        let (stream, peer) = l.accept().await?;
                        let _ = stream.set_nodelay(true);
                        connections.spawn(serve_in_slot(exports, stream, peer.to_string(), stop, slot));
                    }
                    Listener::Unix(l) => {
                        let (stream, _) = l.accept().await?;
                        connections.spawn(serve_in_slot(exports, stream, "unix".into(), stop, slot));
                    }
                }
            }
            Ok::<(), std::io::Error>(())
        };
        tokio::select! {
            r = accept => r.context("accepting")?,
            () = crate::daemons::stop_signal() => tracing::info!("stopping on a signal"),
        }
        drop(listener);
        if let Some(path) = &args.socket {
            let _ = std::fs::remove_file(path);
        }
        // Connections read no more requests, answer those they have read, and close.
        let _ = stop_tx.send(true);
        let stop_wait = std::time::Duration::from_millis(STOP_WAIT_MS);
        if tokio::time::timeout(stop_wait, async { while connections.join_next().await.is_some() {} }).await.is_err() {
            tracing::warn!(left = connections.len(), "connections still answering requests at stop; ending them");
            connections.abort_all();
        }
        // Then the locks are released so the next server need not wait a lease. Renewals stop
        // first (a renewal that raced this leaves a record release cannot match, which lapses
        // after one lease). Writes still running (of aborted connections) end before: one that
        // landed after the release could overwrite the next holder's. Both steps are bounded,
        // so a server whose cluster is gone still stops; its locks then lapse.
        renewing.abort();
        watching.abort();
        for h in &held {
            h.fence.close();
            let stop = stop_wait;
            if tokio::time::timeout(stop, h.image.flush()).await.is_err() {
                tracing::warn!(image = %h.name, "writes still in flight at stop; the lock is left to lapse after its lease");
                continue;
            }
            let rec = h.rec.lock().await;
            match tokio::time::timeout(stop, lock::release(&client, &h.pool, &h.name, &rec)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(image = %h.name, error = %e, "releasing the image's lock failed; it lapses after its lease")
                }
                Err(_) => tracing::warn!(image = %h.name, "the cluster did not answer the lock release; it lapses after its lease"),
            }
        }
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(ExitCode::SUCCESS)
}
