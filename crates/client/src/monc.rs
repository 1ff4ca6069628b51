//! The monitor client: one authenticated connection to some monitor, a subscription that keeps
//! the newest cluster map, and commands. Used by clients and by OSDs alike.

use std::sync::Arc;
use std::time::Duration;

use shoal_map::{ClusterMap, Command, CommandSession};
use shoal_net::Connection;
use shoal_proto::mon::{GetMap, GetStatus, MapUpdate, MonCommand, MonCommandReply, OsdStats, StatusReply};
use shoal_proto::{ErrorCode, Message, decode_frame, encode};
use tokio::sync::{Mutex, watch};
use tokio::task::JoinHandle;

use crate::config::ClusterConfig;
use crate::error::ClientError;

/// Pause between attempts to reach a monitor after a connection failed.
const RECONNECT_PAUSE_MS: u64 = 50;

/// Pause before resending a command the monitors could not commit for want of a leader: an
/// election takes a few hundred milliseconds.
const NO_LEADER_RETRY_PAUSE_MS: u64 = 100;

/// A handle on the monitors. Cheap to clone; the subscription task stops when the last handle
/// is dropped.
#[derive(Clone)]
pub struct MonClient {
    inner: Arc<Inner>,
}

struct Inner {
    cfg: ClusterConfig,
    /// This client's name in command sessions (decision 0072): random, so that two clients (or
    /// two runs of one) never share it.
    session_client: u64,
    /// The last sequence number given to a non-repeatable command.
    session_seq: std::sync::atomic::AtomicU64,
    conn: Mutex<Option<Connection>>,
    map_tx: watch::Sender<Option<Arc<ClusterMap>>>,
    subscriber: std::sync::Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Ok(mut task) = self.subscriber.lock()
            && let Some(task) = task.take()
        {
            task.abort();
        }
    }
}

impl MonClient {
    /// Connects to the first monitor that answers, fetches the map and subscribes to updates.
    /// Returns once a map is known.
    pub async fn connect(cfg: ClusterConfig) -> Result<MonClient, ClientError> {
        let (map_tx, _) = watch::channel(None);
        let mut b = [0u8; 8];
        getrandom::fill(&mut b).map_err(|e| ClientError::BadReply(format!("no randomness for a session id: {e}")))?;
        let inner = Arc::new(Inner {
            cfg,
            session_client: u64::from_le_bytes(b),
            session_seq: std::sync::atomic::AtomicU64::new(0),
            conn: Mutex::new(None),
            map_tx,
            subscriber: std::sync::Mutex::new(None),
        });
        let first = subscribe_once(&inner).await?;
        let weak = Arc::downgrade(&inner);
        let task = tokio::spawn(async move { follow_map(weak, first).await });
        if let Ok(mut slot) = inner.subscriber.lock() {
            *slot = Some(task);
        }
        Ok(MonClient { inner })
    }

    /// The newest map this client has seen.
    ///
    /// # Panics
    /// Never: `connect` returns only once a map is known.
    pub fn map(&self) -> Arc<ClusterMap> {
        self.inner.map_tx.borrow().clone().expect("a map is known after connect")
    }

    /// A receiver that sees every new map.
    pub fn watch(&self) -> watch::Receiver<Option<Arc<ClusterMap>>> {
        self.inner.map_tx.subscribe()
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.inner.cfg
    }

    /// Waits until the map has reached `epoch`, for at most `timeout_ms`.
    pub async fn wait_for_epoch(&self, epoch: u64, timeout_ms: u64) -> Result<Arc<ClusterMap>, ClientError> {
        let mut rx = self.watch();
        let wait = rx.wait_for(|m| m.as_ref().is_some_and(|m| m.epoch >= epoch));
        match tokio::time::timeout(Duration::from_millis(timeout_ms), wait).await {
            Ok(Ok(map)) => Ok(map.clone().expect("checked by the predicate")),
            Ok(Err(_)) => Err(ClientError::Timeout(timeout_ms)),
            Err(_) => Err(ClientError::Timeout(timeout_ms)),
        }
    }

    /// Sends a command to the monitors and returns the epoch at which its effect is in the map.
    /// Takes effect at most once however often it is sent: retried on another monitor if the
    /// connection breaks, and again (until the operation timeout) when the monitors answer that
    /// they have no leader or lost it while the command was in flight (elections happen under
    /// load). A [`Command::repeatable`] command may simply be applied again; any other carries a
    /// [`CommandSession`], the same on every resend, and the monitors answer a resend of an
    /// applied one with its first answer (decision 0072).
    pub async fn command(&self, command: Command) -> Result<u64, ClientError> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(self.inner.cfg.op_timeout_ms);
        let session = (!command.repeatable()).then(|| CommandSession {
            client: self.inner.session_client,
            seq: self.inner.session_seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1,
        });
        let msg = MonCommand { command, session };
        loop {
            let reply: MonCommandReply = self.call(&msg).await?;
            match reply.result {
                Err(e) if e.code == ErrorCode::NoQuorum && tokio::time::Instant::now() < deadline => {
                    tracing::debug!(error = %e, "monitor command retried after a leadership change");
                    tokio::time::sleep(Duration::from_millis(NO_LEADER_RETRY_PAUSE_MS)).await;
                }
                result => return result.map_err(ClientError::Remote),
            }
        }
    }

    /// The cluster's status from the monitor this client talks to.
    pub async fn status(&self) -> Result<StatusReply, ClientError> {
        self.call(&GetStatus).await
    }

    /// Reports an OSD's statistics (its heartbeat to the monitors).
    pub async fn report_stats(&self, stats: &OsdStats) -> Result<(), ClientError> {
        let conn = self.connection().await?;
        conn.call(OsdStats::TYPE, encode(stats, Vec::new())).await?;
        Ok(())
    }

    async fn call<Req: Message, Rep: Message>(&self, req: &Req) -> Result<Rep, ClientError> {
        let timeout_ms = self.inner.cfg.op_timeout_ms;
        let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
        loop {
            let result = async {
                let conn = self.connection().await?;
                let frame = conn.call(Req::TYPE, encode(req, Vec::new())).await?;
                let (reply, _): (Rep, _) = decode_frame(frame)?;
                Ok::<Rep, ClientError>(reply)
            }
            .await;
            let retry = match &result {
                Err(ClientError::Net(_)) => {
                    self.inner.conn.lock().await.take();
                    true
                }
                _ => false,
            };
            if !retry || tokio::time::Instant::now() >= deadline {
                return result;
            }
            tokio::time::sleep(Duration::from_millis(RECONNECT_PAUSE_MS)).await;
        }
    }

    async fn connection(&self) -> Result<Connection, ClientError> {
        let mut slot = self.inner.conn.lock().await;
        if let Some(conn) = slot.as_ref()
            && !conn.is_closed()
        {
            return Ok(conn.clone());
        }
        let conn = connect_any(&self.inner.cfg).await?;
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Whether a command error means "retry later" (no leader yet).
    pub fn is_transient(err: &ClientError) -> bool {
        matches!(err, ClientError::Remote(e) if e.code == ErrorCode::NoQuorum)
    }
}

/// Connects to the first monitor that accepts us, in rank order.
async fn connect_any(cfg: &ClusterConfig) -> Result<Connection, ClientError> {
    let net = cfg.net();
    let mut last = String::from("no monitors configured");
    for addr in &cfg.mons {
        match Connection::connect(*addr, &net).await {
            Ok(conn) => return Ok(conn),
            // A refused key will be refused by every monitor: say so at once.
            Err(e @ shoal_net::NetError::AuthRefused { .. }) => return Err(e.into()),
            Err(e) => last = format!("{addr}: {e}"),
        }
    }
    let addrs = cfg.mons.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    Err(ClientError::NoMonitor { addrs, last })
}

/// Opens a dedicated subscription connection, fetches the map and publishes it. Returns the
/// connection's push receiver.
async fn subscribe_once(inner: &Inner) -> Result<tokio::sync::mpsc::Receiver<shoal_net::Frame>, ClientError> {
    let conn = connect_any(&inner.cfg).await?;
    let pushes = conn.take_pushes().ok_or_else(|| ClientError::BadReply("push channel already taken".into()))?;
    let have = inner.map_tx.borrow().as_ref().map_or(0, |m| m.epoch);
    let frame = conn.call(GetMap::TYPE, encode(&GetMap { have_epoch: have, subscribe: true }, Vec::new())).await?;
    let (update, _): (MapUpdate, _) = decode_frame(frame)?;
    publish(inner, &update);
    if inner.map_tx.borrow().is_none() {
        return Err(ClientError::BadReply("the monitor sent no map".into()));
    }
    // The subscription lives as long as the connection; keep it in the shared slot so commands
    // reuse it.
    *inner.conn.lock().await = Some(conn);
    Ok(pushes)
}

fn publish(inner: &Inner, update: &MapUpdate) -> bool {
    let current = inner.map_tx.borrow().clone();
    match update.apply_to(current.as_deref()) {
        Some(map) => {
            if current.as_ref().is_none_or(|c| map.epoch > c.epoch) {
                inner.map_tx.send_replace(Some(Arc::new(map)));
            }
            true
        }
        None => false,
    }
}

/// Follows pushed map updates; on a lost connection or a gap, subscribes again (to any monitor).
async fn follow_map(inner: std::sync::Weak<Inner>, mut pushes: tokio::sync::mpsc::Receiver<shoal_net::Frame>) {
    loop {
        while let Some(frame) = pushes.recv().await {
            let Some(inner) = inner.upgrade() else { return };
            let Ok((update, _)) = decode_frame::<MapUpdate>(frame) else { continue };
            if !publish(&inner, &update) {
                // A gap: drop the connection and resubscribe, which fetches what we miss.
                break;
            }
        }
        loop {
            let Some(strong) = inner.upgrade() else { return };
            match subscribe_once(&strong).await {
                Ok(p) => {
                    pushes = p;
                    break;
                }
                Err(_) => {
                    drop(strong);
                    tokio::time::sleep(Duration::from_millis(RECONNECT_PAUSE_MS)).await;
                }
            }
        }
    }
}
