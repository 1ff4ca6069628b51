//! Object operations: compute the PG and its primary from the map, send the request there,
//! and resend transparently when the map changes under it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;

use shoal_map::{ClusterMap, OsdId, Pool};
use shoal_net::Connection;
use shoal_proto::osd::{ObjOp, OpOutput, OsdOp, OsdOpReply, PgInfo, PgList, PgListReply, PgQuery, PgQueryReply, ReqId};
use shoal_proto::{ErrorCode, Message, decode_frame, encode};
use tokio::sync::Mutex;

use crate::config::ClusterConfig;
use crate::error::ClientError;
use crate::local::connect_osd;
use crate::monc::MonClient;

/// Longest object name, in bytes (the local store's limit).
pub const MAX_OBJECT_NAME_BYTES: usize = 255;

/// Checks an object name against the cluster's rules. Errors say what is wrong.
pub fn validate_object_name(name: &str) -> Result<(), ClientError> {
    let bad = |reason| Err(ClientError::InvalidName { name: name.to_string(), reason });
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_OBJECT_NAME_BYTES {
        return bad("longer than 255 bytes");
    }
    if name.contains('\0') {
        return bad("contains a NUL byte");
    }
    if name.contains('\u{1}') {
        return bad("contains U+0001, reserved for the OSDs' snapshot clones");
    }
    Ok(())
}

/// Most bytes a request's operations and object name may take encoded: the limit of a client's
/// request header less room for the request's other fields.
pub const OPS_MAX_HEADER_BYTES: usize = shoal_proto::msg::CLIENT_HEADER_MAX_BYTES - 4096;

/// Most bytes a request may take whole, its data and its header: what one message carries less
/// the same room as [`OPS_MAX_HEADER_BYTES`] leaves, for the request's other fields and for the
/// fields a primary's replication of a write adds.
pub const REQUEST_MAX_BYTES: u64 = shoal_proto::MAX_PAYLOAD_BYTES as u64 - 4096;

/// Bytes `ops` on `object` take in a request's header (an upper bound within a few bytes).
pub fn ops_header_bytes(object: &str, ops: &[ObjOp]) -> usize {
    shoal_proto::encoded_len(&ops).saturating_add(object.len() + 8)
}

/// How one attempt of an operation ended.
enum Attempt {
    /// The primary answered (or the connection failed).
    Answered(Result<shoal_net::Frame, ClientError>),
    /// The map moved the PG to another primary while the attempt waited: resend there.
    Moved,
    /// The operation's deadline or expiry passed while the attempt waited.
    GaveUp,
}

/// A connected client: a monitor subscription plus connections to the OSDs it talks to.
#[derive(Clone)]
pub struct Client {
    mon: MonClient,
    osds: Arc<Mutex<HashMap<OsdId, (u64, Connection)>>>,
    client_id: u64,
    next_tid: Arc<AtomicU64>,
    /// Requests waiting to share a trip to their object ([`Client::op_combined`]).
    pub(crate) combiner: Arc<crate::combine::Combiner>,
}

/// The outcome of a successful request: one output per operation and the bytes of its reads.
#[derive(Debug, Clone)]
pub struct OpResult {
    pub outputs: Vec<OpOutput>,
    pub data: Vec<u8>,
}

impl Client {
    pub async fn connect(cfg: ClusterConfig) -> Result<Client, ClientError> {
        let mon = MonClient::connect(cfg).await?;
        let mut id = [0u8; 8];
        getrandom::fill(&mut id).map_err(|e| ClientError::BadReply(format!("no randomness: {e}")))?;
        Ok(Client {
            mon,
            osds: Arc::new(Mutex::new(HashMap::new())),
            client_id: u64::from_le_bytes(id),
            next_tid: Arc::new(AtomicU64::new(1)),
            combiner: Arc::default(),
        })
    }

    /// This client instance's id: the `client` of every request id it sends, random per
    /// [`Client::connect`] and shared by its clones. It is what the map's blocklist names to
    /// fence the instance off (decision 0092).
    #[must_use]
    pub fn instance_id(&self) -> u64 {
        self.client_id
    }

    pub fn mon(&self) -> &MonClient {
        &self.mon
    }

    /// The pool named `name` in the current map.
    pub fn pool(&self, name: &str) -> Result<Pool, ClientError> {
        let map = self.mon.map();
        map.pool_by_name(name).cloned().map_err(|_| ClientError::UnknownPool(name.to_string()))
    }

    /// Runs `ops` on one object atomically at its PG's primary. Write data for the operations
    /// (in operation order) is `data`. Resends with the same request id after a map change or a
    /// lost connection, so a write is applied once; when a replica fails (`Timeout`,
    /// `Degraded`), waits for the map that routes around it and resends, unless the request
    /// appends. Fails after the operation timeout.
    pub async fn op(&self, pool: &str, object: &str, ops: Vec<ObjOp>, data: Vec<u8>) -> Result<OpResult, ClientError> {
        self.op_bytes(pool, object, ops, Bytes::from(data)).await
    }

    /// [`Client::op`] with shared data: every attempt writes `data` to the socket from where it
    /// is, never copying it into a frame.
    pub async fn op_bytes(
        &self,
        pool: &str,
        object: &str,
        ops: Vec<ObjOp>,
        data: Bytes,
    ) -> Result<OpResult, ClientError> {
        self.op_parts(pool, object, ops, vec![data]).await
    }

    /// [`Client::op_bytes`] with the data in several `parts` (in order): a body that arrived
    /// in pieces is sent as those pieces, never gathered into one buffer.
    pub async fn op_parts(
        &self,
        pool: &str,
        object: &str,
        ops: Vec<ObjOp>,
        parts: Vec<Bytes>,
    ) -> Result<OpResult, ClientError> {
        self.op_parts_before(pool, object, ops, parts, None).await
    }

    /// [`Client::op_parts`] that must take effect before `expiry`, or never: every attempt tells
    /// the OSD how long it may still hold the request (its `expires_in_ms`), none is sent once
    /// `expiry` has passed, and the OSD refuses one it held past it. So after `expiry` the
    /// request either has been applied or never will be, whatever the cluster does (a caller
    /// that hands the decision to someone else after a deadline needs exactly that). The OSD
    /// judges as of each batch of its work, so a caller whose deadline is hard keeps a margin of
    /// that much (milliseconds) before it.
    pub async fn op_parts_before(
        &self,
        pool: &str,
        object: &str,
        ops: Vec<ObjOp>,
        parts: Vec<Bytes>,
        expiry: Option<std::time::Instant>,
    ) -> Result<OpResult, ClientError> {
        validate_object_name(object)?;
        let pool = self.pool(pool)?;
        let data_len: u64 = ops.iter().map(ObjOp::data_len).sum();
        let given: usize = parts.iter().map(Bytes::len).sum();
        if data_len != given as u64 {
            return Err(ClientError::BadReply(format!("operations name {data_len} bytes, {given} given")));
        }
        for op in &ops {
            let end = match op {
                ObjOp::WriteFull { len_bytes } => *len_bytes,
                ObjOp::Write { offset, len_bytes } => offset.saturating_add(*len_bytes),
                ObjOp::Truncate { size_bytes } => *size_bytes,
                _ => 0,
            };
            if end > pool.max_object_bytes {
                return Err(ClientError::TooLarge { size_bytes: end, max_bytes: pool.max_object_bytes });
            }
        }
        // The operations travel in the message header, whose size is bounded: a caller's oversized
        // keys or values are refused here, by name, rather than failing the encoder.
        let header_bytes = ops_header_bytes(object, &ops);
        if header_bytes > OPS_MAX_HEADER_BYTES {
            return Err(ClientError::RequestTooLarge { header_bytes, max_bytes: OPS_MAX_HEADER_BYTES });
        }
        // A request over what one message carries would be refused by the sender at every
        // attempt, and the caller would see only a timeout: refused here, by size.
        let request_bytes = header_bytes as u64 + data_len;
        if request_bytes > REQUEST_MAX_BYTES {
            return Err(ClientError::MessageTooLarge { request_bytes, max_bytes: REQUEST_MAX_BYTES });
        }
        let frees_space = crate::freeing::is_freeing_space();
        let reqid = ReqId { client: self.client_id, tid: self.next_tid.fetch_add(1, Ordering::Relaxed) };
        let timeout_ms = self.mon.config().op_timeout_ms;
        let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
        let expiry = expiry.map(tokio::time::Instant::from_std);
        let mut last_error: Option<shoal_proto::RemoteError> = None;
        // Every attempt after the first is marked as a resend: the first may have been applied
        // (its answer lost), and only a marked resend is looked for beyond the PG log.
        let mut sent = false;
        loop {
            // What is left of the request's life goes with every attempt; none is sent without.
            let expires_in_ms = match expiry {
                None => None,
                Some(e) => match e.checked_duration_since(tokio::time::Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left.as_millis() as u64),
                    _ => return Err(ClientError::Expired),
                },
            };
            let map = self.mon.map();
            // A fenced instance sends nothing: every primary would refuse it, and retrying
            // cannot help (decision 0092).
            if map.is_blocklisted(self.client_id) {
                return Err(ClientError::Remote(shoal_proto::RemoteError::new(
                    ErrorCode::Blocklisted,
                    format!(
                        "this client instance ({:016x}) is blocklisted as of epoch {}: it was fenced off the cluster",
                        self.client_id, map.epoch
                    ),
                )));
            }
            let pool_now = map.pool_by_name(&pool.name).map_err(|_| ClientError::UnknownPool(pool.name.clone()))?;
            let loc = map.locate(pool_now.id, object).map_err(|e| ClientError::BadReply(e.to_string()))?;
            let retry_epoch = match loc.osds.first() {
                None => map.epoch + 1,
                Some(&primary) => {
                    let msg = OsdOp {
                        reqid,
                        epoch: map.epoch,
                        pool: pool_now.id,
                        pg: loc.pg.seed,
                        object: object.to_string(),
                        ops: ops.clone(),
                        expires_in_ms,
                        resend: sent,
                        frees_space,
                    };
                    sent = true;
                    // Each attempt sends the shared data by reference (it stays here for a
                    // resend) followed by the encoded header. One the map moves elsewhere while
                    // it waits is resent there with the same request id (applied once).
                    let give_up = expiry.map_or(deadline, |e| e.min(deadline));
                    let payload = encode(&msg, Vec::new());
                    let attempt =
                        self.call_primary(&map, loc.pg, primary, (OsdOp::TYPE, parts.clone(), payload), give_up).await;
                    let answer = match attempt {
                        Attempt::Answered(answer) => answer,
                        // The map already says where to resend.
                        Attempt::Moved => continue,
                        Attempt::GaveUp if expiry.is_some_and(|e| e <= deadline) => return Err(ClientError::Expired),
                        Attempt::GaveUp => {
                            return Err(match last_error {
                                Some(e) => ClientError::Remote(e),
                                None => ClientError::Timeout(timeout_ms),
                            });
                        }
                    };
                    match answer {
                        Ok(frame) => {
                            let (reply, bytes): (OsdOpReply, Vec<u8>) = decode_frame(frame)?;
                            match reply.result {
                                Ok(outputs) => return Ok(OpResult { outputs, data: bytes }),
                                Err(e) if e.code == ErrorCode::WrongPrimary => reply.epoch.max(map.epoch + 1),
                                // A replica that failed the write (the primary peers again), or a
                                // PG not active or below min_size: wait for a newer map or a short
                                // pause and resend. Every request is safe to resend, appends too:
                                // the resend carries the same request id, and a write already
                                // applied is answered from the PG log, which peering makes the
                                // same on every member (never applied twice).
                                Err(e) if matches!(e.code, ErrorCode::Timeout | ErrorCode::Degraded) => {
                                    last_error = Some(e);
                                    map.epoch + 1
                                }
                                Err(e) => return Err(ClientError::Remote(e)),
                            }
                        }
                        Err(ClientError::Net(_)) => {
                            self.osds.lock().await.remove(&primary);
                            map.epoch + 1
                        }
                        Err(e) => return Err(e),
                    }
                }
            };
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(match last_error {
                    Some(e) => ClientError::Remote(e),
                    None => ClientError::Timeout(timeout_ms),
                });
            }
            // Wait for a newer map (or a short pause: the OSD may simply have restarted).
            let wait_ms = (deadline - now).as_millis().min(500) as u64;
            let _ = self.mon.wait_for_epoch(retry_epoch, wait_ms).await;
        }
    }

    /// Sends a request (`msg_type`, data `parts`, encoded header `payload`) to `primary`, the
    /// primary of `pg` in `map`, and waits for its answer. An OSD that stops answering without
    /// closing the connection (cut off, stopped, its worker stuck) would hold the call for ever,
    /// so the attempt is given up once a newer map sends the PG to another primary or another
    /// incarnation of this one ([`Attempt::Moved`]: resend where the map now says), or at
    /// `give_up` ([`Attempt::GaveUp`]). The request may still reach the OSD it was sent to and
    /// be handled there; callers resend only what is safe to (a write with the same request id).
    async fn call_primary(
        &self,
        map: &ClusterMap,
        pg: shoal_map::PgId,
        primary: OsdId,
        (msg_type, parts, payload): (u16, Vec<Bytes>, Vec<u8>),
        give_up: tokio::time::Instant,
    ) -> Attempt {
        let up_from = map.osds.get(&primary).map_or(0, |i| i.up_from);
        tokio::select! {
            answer = self.send(map, primary, msg_type, parts, payload) => Attempt::Answered(answer),
            () = self.target_moved(pg, (primary, up_from), map.epoch) => Attempt::Moved,
            () = tokio::time::sleep_until(give_up) => Attempt::GaveUp,
        }
    }

    /// [`Client::call_primary`] for a request with no data, given the operation timeout:
    /// `Ok(None)` when the map moved the PG while it waited (ask again where it now says).
    async fn ask_primary(
        &self,
        map: &ClusterMap,
        pg: shoal_map::PgId,
        primary: OsdId,
        msg_type: u16,
        payload: Vec<u8>,
    ) -> Result<Option<shoal_net::Frame>, ClientError> {
        let timeout_ms = self.mon.config().op_timeout_ms;
        let give_up = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
        match self.call_primary(map, pg, primary, (msg_type, Vec::new(), payload), give_up).await {
            Attempt::Answered(answer) => answer.map(Some),
            Attempt::Moved => Ok(None),
            Attempt::GaveUp => Err(ClientError::Timeout(timeout_ms)),
        }
    }

    /// Resolves once a map newer than `epoch` no longer names `primary` as booted at `up_from`
    /// the primary of `pg` (another primary, a new incarnation of it, or none); never otherwise.
    /// Costs a subscription per call and nothing per map until one is newer than `epoch`
    /// (placement is computed only then).
    async fn target_moved(&self, pg: shoal_map::PgId, (primary, up_from): (OsdId, u64), epoch: u64) {
        let mut watch = self.mon.watch();
        loop {
            let moved = watch.borrow_and_update().as_ref().is_some_and(|m| {
                m.epoch > epoch && {
                    let now = m.pg_osds(pg).ok().and_then(|osds| osds.first().copied());
                    now != Some(primary) || m.osds.get(&primary).map(|i| i.up_from) != Some(up_from)
                }
            });
            if moved {
                return;
            }
            if watch.changed().await.is_err() {
                // The monitor client is gone: no map will ever move it.
                return std::future::pending().await;
            }
        }
    }

    async fn send(
        &self,
        map: &ClusterMap,
        osd: OsdId,
        msg_type: u16,
        parts: Vec<Bytes>,
        payload: Vec<u8>,
    ) -> Result<shoal_net::Frame, ClientError> {
        let conn = self.osd_connection(map, osd).await?;
        Ok(conn.call_with_parts(msg_type, parts, payload).await?)
    }

    async fn osd_connection(&self, map: &ClusterMap, osd: OsdId) -> Result<Connection, ClientError> {
        let info = map.osds.get(&osd).ok_or_else(|| ClientError::BadReply(format!("{osd} not in the map")))?;
        let addr = info.addr.ok_or_else(|| ClientError::BadReply(format!("{osd} has no address")))?;
        let mut conns = self.osds.lock().await;
        if let Some((up_from, conn)) = conns.get(&osd)
            && *up_from == info.up_from
            && !conn.is_closed()
        {
            return Ok(conn.clone());
        }
        let cfg = self.mon.config();
        let conn = connect_osd(osd, addr, cfg.local_osd_socket(osd).as_deref(), &cfg.net()).await?;
        conns.insert(osd, (info.up_from, conn.clone()));
        Ok(conn)
    }

    /// One page of the objects of a pool: every PG in turn, each listed at its primary.
    /// `cursor` is `None` to start; the returned cursor is `None` at the end.
    pub async fn list(
        &self,
        pool: &str,
        cursor: Option<ListCursor>,
        max: u32,
    ) -> Result<(Vec<String>, Option<ListCursor>), ClientError> {
        self.list_prefix(pool, "", false, cursor, max).await
    }

    /// [`Client::list`] of only the objects whose names start with `prefix`: each PG's primary
    /// reads just that range of its store, so the cost is the matching objects plus one request
    /// per PG, whatever else the pool holds. Names come in name order within a PG, PGs in turn.
    /// `with_clones` also names objects that exist only as snapshot clones; a name may then
    /// come twice in a row (its companions split by a page boundary, within a call or across
    /// two).
    pub async fn list_prefix(
        &self,
        pool: &str,
        prefix: &str,
        with_clones: bool,
        cursor: Option<ListCursor>,
        max: u32,
    ) -> Result<(Vec<String>, Option<ListCursor>), ClientError> {
        let pool = self.pool(pool)?;
        let mut cursor = cursor.unwrap_or(ListCursor { pg: 0, after: None });
        let mut names = Vec::new();
        while cursor.pg < pool.pg_num && (names.len() as u32) < max {
            let map = self.mon.map();
            let pg = shoal_map::PgId { pool: pool.id, seed: cursor.pg };
            let osds = map.pg_osds(pg).map_err(|e| ClientError::BadReply(e.to_string()))?;
            let Some(&primary) = osds.first() else {
                return Err(ClientError::NoActing { pool: pool.name.clone(), pg: pg.to_string() });
            };
            let msg = PgList {
                epoch: map.epoch,
                pool: pool.id,
                pg: cursor.pg,
                cursor: cursor.after.clone(),
                max: max - names.len() as u32,
                prefix: prefix.to_string(),
                with_clones,
            };
            // Listing reads only: a PG moved meanwhile is asked at its new primary.
            let Some(frame) = self.ask_primary(&map, pg, primary, PgList::TYPE, encode(&msg, Vec::new())).await? else {
                continue;
            };
            let (reply, _): (PgListReply, _) = decode_frame(frame)?;
            match reply.result {
                Ok((page, next)) => {
                    names.extend(page);
                    match next {
                        Some(after) => cursor.after = Some(after),
                        None => cursor = ListCursor { pg: cursor.pg + 1, after: None },
                    }
                }
                Err(e) if e.code == ErrorCode::WrongPrimary => {
                    let _ = self.mon.wait_for_epoch(reply.epoch.max(map.epoch + 1), 500).await;
                }
                Err(e) => return Err(ClientError::Remote(e)),
            }
        }
        let done = cursor.pg >= pool.pg_num;
        Ok((names, if done { None } else { Some(cursor) }))
    }
}

impl Client {
    /// What OSD `osd` holds of PG `pg` (any OSD answers, member of the PG or not).
    pub async fn pg_query(&self, osd: shoal_map::OsdId, pg: shoal_map::PgId) -> Result<PgInfo, ClientError> {
        let map = self.mon.map();
        let msg = PgQuery { epoch: map.epoch, pool: pg.pool, pg: pg.seed };
        // Any OSD answers, so a map change does not move the question; an OSD that stopped
        // answering is given up after the operation timeout.
        let timeout_ms = self.mon.config().op_timeout_ms;
        let call = self.send(&map, osd, PgQuery::TYPE, Vec::new(), encode(&msg, Vec::new()));
        let frame = tokio::time::timeout(Duration::from_millis(timeout_ms), call)
            .await
            .map_err(|_| ClientError::Timeout(timeout_ms))??;
        let (reply, _): (PgQueryReply, _) = decode_frame(frame)?;
        reply.result.map_err(ClientError::Remote)
    }
}

impl Client {
    /// Sends an operator's command to PG `pg`'s primary (following map changes, a bounded number
    /// of times) and returns its answer.
    pub async fn pg_command(
        &self,
        pg: shoal_map::PgId,
        cmd: shoal_proto::osd::PgCmd,
    ) -> Result<shoal_proto::osd::PgCmdOutput, ClientError> {
        use shoal_proto::osd::{PgCommand, PgCommandReply};
        const ATTEMPTS: u32 = 8;
        let mut last = None;
        for _ in 0..ATTEMPTS {
            let map = self.mon.map();
            let osds = map.pg_osds(pg).map_err(|e| ClientError::BadReply(e.to_string()))?;
            let Some(&primary) = osds.first() else {
                return Err(ClientError::NoActing { pool: pg.pool.to_string(), pg: pg.to_string() });
            };
            let msg = PgCommand { epoch: map.epoch, pool: pg.pool, pg: pg.seed, cmd: cmd.clone() };
            // A PG moved meanwhile counts as an attempt: its new primary is asked next.
            let Some(frame) = self.ask_primary(&map, pg, primary, PgCommand::TYPE, encode(&msg, Vec::new())).await?
            else {
                continue;
            };
            let (reply, _): (PgCommandReply, _) = decode_frame(frame)?;
            match reply.result {
                Ok(out) => return Ok(out),
                Err(e) if e.code == ErrorCode::WrongPrimary => {
                    let _ = self.mon.wait_for_epoch(reply.epoch.max(map.epoch + 1), 500).await;
                    last = Some(e);
                }
                Err(e) => return Err(ClientError::Remote(e)),
            }
        }
        Err(ClientError::Remote(last.unwrap_or_else(|| {
            shoal_proto::RemoteError::new(ErrorCode::WrongPrimary, "the PG's primary kept changing")
        })))
    }
}

/// Where a listing stopped: the PG and the last name returned from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListCursor {
    pub pg: u32,
    pub after: Option<String>,
}
