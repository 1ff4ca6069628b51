//! Object data: a head (the first chunk, the metadata and the manifest) plus tails, the head
//! written last as the commit (decision 0014); reads stream chunk by chunk.

use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use shoal_client::Client;
use shoal_proto::osd::{ObjOp, OpOutput};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::GatewayError;
use crate::index;
use crate::layout::{self, BucketRecord, Checksums, DATA_POOL, ETAG_XATTR, META_XATTR, Manifest, ObjectMeta};
use crate::rados;

/// Most tail writes of one request in flight at once (also how far the collector probes past a
/// missing tail of a write whose tail count is unknown).
pub const TAILS_IN_FLIGHT: usize = 2;

/// Most bytes one request's write holds: the head chunk, the one filling, and each tail in
/// flight (sent from the chunk itself, which stays here until the write is answered, for a
/// resend: decision 0023).
pub const MAX_REQUEST_BYTES: u64 = (TAILS_IN_FLIGHT as u64 + 2) * layout::CHUNK_BYTES;

/// Most bytes a copy's reading side holds: the chunk waiting to be written and the one being
/// read (see [`read_stream`]).
pub const COPY_READ_AHEAD_BYTES: u64 = 2 * layout::CHUNK_BYTES;

/// Most bytes one request reserves: a copy, which reads and writes at once.
pub const MAX_RESERVE_BYTES: u64 = MAX_REQUEST_BYTES + COPY_READ_AHEAD_BYTES;

/// The gateway-wide bound on bytes held by requests; a request waits for room.
#[derive(Clone)]
pub struct MemoryBudget {
    permits: Arc<Semaphore>,
    limit_kib: u32,
}

impl MemoryBudget {
    pub fn new(limit_bytes: u64) -> MemoryBudget {
        // At least one request of the largest need must fit, or it would wait forever.
        let limit_kib = (limit_bytes / 1024).clamp(MAX_REQUEST_KIB as u64, u32::MAX as u64 >> 3) as u32;
        MemoryBudget { permits: Arc::new(Semaphore::new(limit_kib as usize)), limit_kib }
    }

    /// Waits until `bytes` (rounded up to KiB, at most [`MAX_RESERVE_BYTES`]) may be held. A
    /// caller reserves all it will hold at once, never more while holding some.
    pub async fn reserve(&self, bytes: u64) -> OwnedSemaphorePermit {
        let kib = (bytes.div_ceil(1024).min(u64::from(MAX_REQUEST_KIB)) as u32).max(1);
        // The semaphore is never closed, so acquiring cannot fail.
        match self.permits.clone().acquire_many_owned(kib).await {
            Ok(p) => p,
            Err(_) => unreachable!("the memory budget's semaphore is never closed"),
        }
    }

    /// Bytes held by requests now.
    pub fn in_use_bytes(&self) -> u64 {
        u64::from(self.limit_kib - self.permits.available_permits() as u32) * 1024
    }
}

const MAX_REQUEST_KIB: u32 = (MAX_RESERVE_BYTES / 1024) as u32;

/// The metadata of `key`'s head, or `None` if it has none.
pub async fn head_meta(client: &Client, bucket_id: u64, key: &str) -> Result<Option<ObjectMeta>, GatewayError> {
    head_meta_at(client, &layout::head_object(bucket_id, key), key).await
}

/// The metadata of `key`'s version whose head is object `name`, or `None` if it has none.
pub async fn head_meta_at(client: &Client, name: &str, key: &str) -> Result<Option<ObjectMeta>, GatewayError> {
    match rados::get_xattr(client, DATA_POOL, name, META_XATTR).await? {
        Some(bytes) => checked(layout::decode(&bytes, "object metadata")?, key),
        None => Ok(None),
    }
}

/// Changes the metadata of `key`'s object in place (its ACL, its tags) with `change`, guarded
/// by the metadata it read, so an object written in between is changed itself rather than
/// given the old object's metadata (the change is retried against it). Returns the changed
/// metadata, or `None` if the key has no object. On return the change is on every replica of
/// the head.
pub async fn update_meta(
    client: &Client,
    name: &str,
    key: &str,
    change: impl Fn(&mut ObjectMeta),
) -> Result<Option<ObjectMeta>, GatewayError> {
    const ATTEMPTS: usize = 8;
    for _ in 0..ATTEMPTS {
        let Some(old) = rados::get_xattr(client, DATA_POOL, name, META_XATTR).await? else {
            return Ok(None);
        };
        let Some(mut meta) = checked(layout::decode(&old, "object metadata")?, key)? else {
            return Ok(None);
        };
        change(&mut meta);
        let ops = vec![
            ObjOp::AssertXattr { name: META_XATTR.into(), value: Some(old) },
            ObjOp::SetXattr { name: META_XATTR.into(), value: layout::encode(&meta) },
        ];
        match client.op(DATA_POOL, name, ops, Vec::new()).await {
            Ok(_) => return Ok(Some(meta)),
            Err(e) if e.code() == Some(shoal_proto::ErrorCode::Conflict) => continue,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
    Err(GatewayError::Internal(format!("object {key:?} kept changing under {ATTEMPTS} metadata updates")))
}

/// A head whose metadata names another key is a hash collision of long keys: refused.
fn checked(meta: ObjectMeta, key: &str) -> Result<Option<ObjectMeta>, GatewayError> {
    if meta.key != key {
        return Err(GatewayError::Internal(format!("keys {key:?} and {:?} share a head (hash collision)", meta.key)));
    }
    Ok(Some(meta))
}

/// The condition a write's commit is guarded by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteCondition {
    None,
    /// `If-None-Match: *`: only if the key has no object.
    Absent,
    /// `If-Match: ETAG`: only if the key's object has this ETag.
    ETag(String),
    /// `If-Match: *`: only if the key has an object, whichever.
    Exists,
    /// `If-None-Match: ETAG`: only if the key has no object or one with another ETag.
    NotETag(String),
    /// Only if the key's current object is the one the write tagged so made (the lifecycle's
    /// guard on what it judged expired; deletes only).
    Tag(u128),
}

/// What a body will make a write hold in memory.
#[derive(Debug, Clone, Copy, Default)]
pub struct BodyShape {
    /// Bytes the client announced, if it did (reserves less memory for small bodies).
    pub size_hint: Option<u64>,
    /// Bytes the body's producer holds besides the write's own (a copy's reads, which the write
    /// reserves with its own so that one reservation covers the request).
    pub read_ahead_bytes: u64,
}

/// What a write stores besides the bytes.
#[derive(Debug, Clone)]
pub struct WriteArgs {
    pub content: layout::ContentHeaders,
    pub user_meta: Vec<(String, String)>,
    pub owner_id: String,
    pub owner_display: String,
    /// The object's access control list.
    pub grants: Vec<layout::Grant>,
    pub tags: Vec<(String, String)>,
    pub lock: layout::Lock,
    pub condition: WriteCondition,
    pub shape: BodyShape,
    /// The bucket's versioning when the write began (decides where the head goes).
    pub versioning: layout::Versioning,
    pub gc_delay_ns: u64,
    /// The collector's lease: the pending record is refreshed every quarter of it while the body
    /// streams, and the head is not committed once the record is older than half of it.
    pub lease: std::time::Duration,
}

/// Computes and checks the body's digests; called once the whole body has arrived, before the
/// commit. Receives the hex MD5; returns the checksums to store, or the error to answer.
pub trait BodyCheck: Send {
    fn update(&mut self, bytes: &[u8]);
    fn finish(self: Box<Self>, md5_hex: &str) -> Result<Checksums, s3s::S3Error>;
}

/// Why a write did not commit.
#[derive(Debug)]
pub enum WriteError {
    Gateway(GatewayError),
    /// The body's check refused it.
    Refused(s3s::S3Error),
    Body(String),
}

impl From<GatewayError> for WriteError {
    fn from(e: GatewayError) -> Self {
        WriteError::Gateway(e)
    }
}

/// Pieces smaller than this are gathered (copied) into a buffer of their own before they join a
/// chunk; larger ones join it as they are. Every part of a chunk but its last is therefore at
/// least this long, which bounds a chunk to `CHUNK_BYTES / GATHER_BELOW_BYTES` parts however
/// finely a client splits its body.
const GATHER_BELOW_BYTES: usize = 16 << 10;

/// A chunk of a body held by reference: the pieces it arrived in, in order, never copied into
/// one buffer (the messenger sends them as they are), except that small pieces are gathered.
#[derive(Default)]
pub(crate) struct Pieces {
    parts: Vec<Bytes>,
    small: BytesMut,
    len_bytes: usize,
}

impl Pieces {
    fn len(&self) -> usize {
        self.len_bytes
    }

    fn push(&mut self, piece: Bytes) {
        self.len_bytes += piece.len();
        if piece.len() < GATHER_BELOW_BYTES {
            self.small.extend_from_slice(&piece);
            if self.small.len() >= GATHER_BELOW_BYTES {
                self.parts.push(self.small.split().freeze());
            }
        } else {
            if !self.small.is_empty() {
                self.parts.push(self.small.split().freeze());
            }
            self.parts.push(piece);
        }
    }

    /// The chunk's parts in order.
    fn finish(mut self) -> Vec<Bytes> {
        if !self.small.is_empty() {
            self.parts.push(self.small.split().freeze());
        }
        debug_assert_eq!(self.parts.iter().map(Bytes::len).sum::<usize>(), self.len_bytes);
        self.parts
    }
}

/// A body streamed into chunks: chunk 0 kept in memory (an object's head) or written like the
/// others (a part), every other chunk written as `t.BUCKET.TAG.N` as soon as it fills.
pub(crate) struct Streamed {
    /// Chunk 0 when it was kept (else empty), in the pieces it arrived in.
    pub first: Vec<Bytes>,
    pub size_bytes: u64,
    /// Chunks written as objects (an object's tails, or all of a part's chunks).
    pub written: u32,
    pub md5_hex: String,
    pub checksums: Checksums,
    /// The write's expiry as the body ended (see [`PendingWrite::expiry`]): its commit takes
    /// effect before it or never.
    pub expiry: Instant,
    /// The memory reserved for the request, held (until dropped) while the caller commits.
    pub _permit: OwnedSemaphorePermit,
}

/// The expiry of a write whose pending record was last written no earlier than `recorded_at`,
/// under the collectors' `lease` (see [`PendingWrite::expiry`]).
pub(crate) fn write_expiry(recorded_at: Instant, lease: std::time::Duration) -> Instant {
    recorded_at + lease / 2
}

/// The pending write a body belongs to.
pub(crate) struct PendingWrite<'a> {
    pub bucket: &'a BucketRecord,
    pub key: &'a str,
    pub tag: u128,
    pub kind: layout::PendingKind,
    pub lease: std::time::Duration,
    pub gc_delay_ns: u64,
    /// Taken just before the pending record was written: the record's time is no earlier.
    pub prepared_at: Instant,
}

impl PendingWrite<'_> {
    /// The instant after which nothing of this write may take effect in the cluster, given that
    /// its pending record was last written no earlier than `recorded_at`: half a lease later.
    /// The collector decides a write from its head a whole lease after its record's time, so
    /// every request that writes the write's data or commits it carries this as its expiry
    /// ([`Client::op_parts_before`]): one held back by the cluster (a PG peering, a recovery)
    /// and executed after the collector decided would publish a head whose tails are being
    /// collected, or leave a tail no GC record covers. The other half lease is the margin for
    /// the gateways' clocks and the OSDs' tick.
    pub fn expiry(&self, recorded_at: Instant) -> Instant {
        write_expiry(recorded_at, self.lease)
    }

    /// What GC deletes if the write is abandoned after `written` chunks.
    fn garbage(&self, keep_first: bool, written: u32) -> Option<layout::GcRecord> {
        (written > 0).then_some(layout::GcRecord::Chunks {
            tag: self.tag,
            first: u32::from(keep_first),
            count: Some(written),
        })
    }

    /// Abandons the write: its pending record goes, its chunks to GC.
    pub async fn abandon(&self, client: &Client, keep_first: bool, written: u32) -> Result<(), GatewayError> {
        let garbage = self.garbage(keep_first, written);
        index::abandon(client, self.bucket, self.key, self.tag, garbage, self.gc_delay_ns, Vec::new()).await
    }
}

/// Streams `body` into chunks of `w.tag` (its pending record is already written, and refreshed
/// here every quarter lease). On any failure, including the body's check refusing it and the
/// body outlasting half a lease, the write is abandoned (chunks to GC) before returning.
pub(crate) async fn stream_chunks<S, E>(
    client: &Client,
    budget: &MemoryBudget,
    w: &PendingWrite<'_>,
    mut body: S,
    mut check: Box<dyn BodyCheck>,
    shape: BodyShape,
    keep_first: bool,
) -> Result<Streamed, WriteError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let mut refreshed = w.prepared_at;
    let mut md5 = crate::md5lanes::StreamMd5::new();
    // The request's whole memory need is reserved at once: a request that held part and waited
    // for more could deadlock with others doing the same.
    let size_hint = shape.size_hint;
    let small = size_hint.is_some_and(|n| n <= layout::CHUNK_BYTES);
    // A small object is held once: its one write is sent from this buffer.
    let need = if small { size_hint.unwrap_or(0) } else { MAX_REQUEST_BYTES };
    debug_assert!(shape.read_ahead_bytes <= COPY_READ_AHEAD_BYTES, "a producer holds at most two chunks");
    let permit = budget.reserve(need + shape.read_ahead_bytes).await;
    let chunk = layout::CHUNK_BYTES as usize;
    let mut head = Pieces::default();
    let mut size: u64 = 0;
    let mut next_chunk: u32 = u32::from(keep_first);
    // The chunk being filled (after the head's, when it is kept).
    let mut current: Option<Pieces> = None;
    // Chunk writes run as tasks so that they proceed while the body keeps arriving.
    let mut in_flight = TailWrites::default();
    let result: Result<(), WriteError> = async {
        while let Some(piece) = body.next().await {
            let mut piece = piece.map_err(|e| WriteError::Body(e.to_string()))?;
            if refreshed.elapsed() > w.lease / 4 {
                let at = Instant::now();
                index::prepare(client, w.bucket, w.key, w.tag, w.kind.clone()).await?;
                refreshed = at;
            }
            md5.update(&piece).await;
            check.update(&piece);
            size += piece.len() as u64;
            if small && size_hint.is_some_and(|n| size > n) {
                return Err(WriteError::Body("the body is longer than its declared length".into()));
            }
            while !piece.is_empty() {
                if keep_first && head.len() < chunk {
                    let room = (chunk - head.len()).min(piece.len());
                    head.push(piece.split_to(room));
                    continue;
                }
                let buf = current.get_or_insert_with(Pieces::default);
                let room = (chunk - buf.len()).min(piece.len());
                buf.push(piece.split_to(room));
                if buf.len() == chunk
                    && let Some(full) = current.take()
                {
                    while in_flight.len() >= TAILS_IN_FLIGHT {
                        in_flight.next().await?;
                    }
                    in_flight.push(client, w.bucket.id, w.tag, next_chunk, full.finish(), w.expiry(refreshed));
                    next_chunk += 1;
                }
            }
        }
        if let Some(buf) = current.take() {
            in_flight.push(client, w.bucket.id, w.tag, next_chunk, buf.finish(), w.expiry(refreshed));
            next_chunk += 1;
        }
        while !in_flight.is_empty() {
            in_flight.next().await?;
        }
        if Instant::now() >= w.expiry(refreshed) {
            // The collector may already have decided this write and queued its chunks for
            // deletion: committing now could publish data that is about to go.
            return Err(WriteError::Body("the body took longer than half the collector's lease to arrive".into()));
        }
        Ok(())
    }
    .await;
    let written = next_chunk - u32::from(keep_first);
    if let Err(e) = result {
        // Every chunk write has ended before the GC record for them is made. Should recording
        // the abandonment fail too, the pending record stays and the collector takes over.
        in_flight.drain().await;
        let _ = w.abandon(client, keep_first, written).await;
        return Err(e);
    }
    let md5_hex = crate::text::hex(&md5.finish().await);
    match check.finish(&md5_hex) {
        Ok(checksums) => {
            let expiry = w.expiry(refreshed);
            Ok(Streamed {
                first: head.finish(),
                size_bytes: size,
                written,
                md5_hex,
                checksums,
                expiry,
                _permit: permit,
            })
        }
        Err(e) => {
            w.abandon(client, keep_first, written).await?;
            Err(WriteError::Refused(e))
        }
    }
}

/// What a write made: the object's metadata and its version id (`None` in a bucket never
/// versioned).
#[derive(Debug)]
pub struct Written {
    pub meta: ObjectMeta,
    pub version_id: Option<String>,
}

/// Writes `key` from `body`: prepare, tails as the body streams, the head (guarded by the
/// condition) as the commit, then the index completion. In a versioning-enabled bucket the head
/// is a new version object and the completion records it as the newest version, the condition
/// judged there, against the current version. On any failure before the commit, the tails
/// written are left to GC and nothing is visible.
pub async fn put<S, E>(
    client: &Client,
    budget: &MemoryBudget,
    bucket: &BucketRecord,
    key: &str,
    body: S,
    check: Box<dyn BodyCheck>,
    args: WriteArgs,
) -> Result<Written, WriteError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let versioned = args.versioning == layout::Versioning::Enabled;
    if versioned && key.contains('\0') {
        return Err(GatewayError::InvalidArgument("keys of versioned objects cannot hold a zero byte".into()).into());
    }
    let tag = layout::random_tag()?;
    let kind = if versioned { layout::PendingKind::Version } else { layout::PendingKind::Write };
    let prepared_at = Instant::now();
    let w = PendingWrite { bucket, key, tag, kind, lease: args.lease, gc_delay_ns: args.gc_delay_ns, prepared_at };
    // The index view is read beside the prepare, before the head is written, so the completion
    // need not read the entry and the head again (index::Known). A versioned write's completion
    // decides against the versions as they are then, and reads them itself.
    let before = if versioned {
        index::prepare(client, bucket, key, tag, w.kind.clone()).await?;
        None
    } else {
        Some(index::prepare_reading(client, bucket, key, tag, w.kind.clone()).await?)
    };
    crate::crashpoint::jitter().await;
    let streamed = stream_chunks(client, budget, &w, body, check, args.shape, true).await?;
    let meta = ObjectMeta {
        key: key.to_string(),
        size_bytes: streamed.size_bytes,
        etag: streamed.md5_hex.clone(),
        mtime_ns: layout::now_ns(),
        tag,
        chunk_bytes: layout::CHUNK_BYTES,
        tails: streamed.written,
        content: args.content,
        user_meta: args.user_meta,
        checksums: streamed.checksums.clone(),
        owner_id: args.owner_id,
        owner_display: args.owner_display,
        grants: args.grants,
        tags: args.tags,
        parts: 0,
        lock: args.lock,
    };
    if versioned {
        commit_version_head(client, bucket.id, &meta, &streamed.first, streamed.expiry).await?;
        drop(streamed);
        crate::crashpoint::reached(crate::crashpoint::AFTER_HEAD, key);
        let Some(slot) = record_version(client, &w, &meta, &args.condition, Vec::new()).await? else {
            let entry = layout::IndexEntry::of(&meta);
            let garbage = layout::GcRecord::Version { tag, then: entry.garbage().map(Box::new) };
            index::abandon(client, bucket, key, tag, Some(garbage), args.gc_delay_ns, Vec::new()).await?;
            return Err(refused(client, bucket, key, &args.condition).await.into());
        };
        return Ok(Written { meta, version_id: Some(slot.text()) });
    }
    if !commit_head(client, &w, &meta, &streamed.first, &args.condition, streamed.expiry).await? {
        w.abandon(client, true, streamed.written).await?;
        return Err(refused(client, bucket, key, &args.condition).await.into());
    }
    drop(streamed);
    crate::crashpoint::reached(crate::crashpoint::AFTER_HEAD, key);
    crate::crashpoint::jitter().await;
    let known = before.map(|view| index::Known { view, head: Some(meta.clone()) });
    index::complete(client, bucket, key, tag, Some(meta.tails), args.gc_delay_ns, known).await?;
    // A write of the null version reports no version id (S3 and RGW do not either).
    Ok(Written { meta, version_id: None })
}

/// Records the version object of `meta` (written) as `key`'s newest version if `condition`
/// holds for the current one, with `extra` operations in the same request. `None` when the
/// condition does not hold: nothing was changed, and the caller abandons the write.
pub(crate) async fn record_version(
    client: &Client,
    w: &PendingWrite<'_>,
    meta: &ObjectMeta,
    condition: &WriteCondition,
    extra: Vec<ObjOp>,
) -> Result<Option<layout::Slot>, GatewayError> {
    let part = index::partition(w.bucket, w.key);
    let how = index::Completion {
        bucket_id: w.bucket.id,
        part: &part,
        live: true,
        pending: None,
        gc_delay_ns: w.gc_delay_ns,
    };
    let entry = layout::IndexEntry { null: false, ..layout::IndexEntry::of(meta) };
    let change = crate::versions::Change::Add(entry);
    match crate::versions::apply(client, &how, w.key, Some(w.tag), change, condition, extra).await? {
        crate::versions::Applied::Done(o) => {
            o.added.map(Some).ok_or_else(|| GatewayError::Internal("a version was recorded without a slot".into()))
        }
        crate::versions::Applied::Refused => Ok(None),
        crate::versions::Applied::Dead => Err(GatewayError::NoSuchBucket(w.bucket.name.clone())),
        other => Err(GatewayError::Internal(format!("recording a version answered {other:?}"))),
    }
}

/// Writes the version object of `meta` (data `first`): created, never overwritten; before
/// `expiry` (the write's, [`PendingWrite::expiry`]) or never.
pub(crate) async fn commit_version_head(
    client: &Client,
    bucket_id: u64,
    meta: &ObjectMeta,
    first: &[Bytes],
    expiry: Instant,
) -> Result<(), GatewayError> {
    let ops = vec![
        ObjOp::Create { exclusive: true },
        ObjOp::WriteFull { len_bytes: parts_len(first) },
        ObjOp::SetXattr { name: META_XATTR.into(), value: layout::encode(meta) },
        ObjOp::SetXattr { name: ETAG_XATTR.into(), value: meta.etag.as_bytes().to_vec() },
    ];
    crate::crashpoint::reached(crate::crashpoint::AFTER_TAILS, &meta.key);
    let name = layout::version_object(bucket_id, meta.tag);
    client.op_parts_before(DATA_POOL, &name, ops, first.to_vec(), Some(expiry)).await?;
    Ok(())
}

/// Bytes in `parts` together.
fn parts_len(parts: &[Bytes]) -> u64 {
    parts.iter().map(|p| p.len() as u64).sum()
}

/// Why a write's condition failed, for `PreconditionFailed`.
pub(crate) fn refusal(condition: &WriteCondition) -> String {
    match condition {
        WriteCondition::Absent => "the key already has an object (If-None-Match: *)".to_string(),
        WriteCondition::ETag(etag) => format!("the object's ETag is not {etag:?} (If-Match)"),
        WriteCondition::Exists => "the key has no object (If-Match: *)".to_string(),
        WriteCondition::None => "a concurrent change".to_string(),
        WriteCondition::Tag(_) => "the object was replaced".to_string(),
        WriteCondition::NotETag(etag) => format!("the object's ETag is {etag:?} (If-None-Match)"),
    }
}

/// The error of a write whose `condition` did not hold for `key`: `NoSuchKey` when `If-Match`
/// failed for want of any object (as S3 answers), else `PreconditionFailed`.
pub(crate) async fn refused(
    client: &Client,
    bucket: &BucketRecord,
    key: &str,
    condition: &WriteCondition,
) -> GatewayError {
    if matches!(condition, WriteCondition::ETag(_) | WriteCondition::Exists) {
        // The head decides in a bucket never versioned, the index's current version otherwise.
        let exists = if bucket.versioning == layout::Versioning::Unversioned {
            rados::get_xattr(client, DATA_POOL, &layout::head_object(bucket.id, key), ETAG_XATTR)
                .await
                .map(|e| e.is_some())
        } else {
            crate::versions::read_view(client, &index::partition(bucket, key), key).await.map(|v| v.entry.is_some())
        };
        match exists {
            Ok(false) => return GatewayError::NoSuchKey(key.to_string()),
            Ok(true) => {}
            Err(e) => return e,
        }
    }
    GatewayError::PreconditionFailed(refusal(condition))
}

/// How often `If-Match: *` re-reads the ETag it guards on when the object changed in between.
const EXISTS_ATTEMPTS: usize = 8;

/// Writes the head of `meta` (data `first`) guarded by `condition`: the commit, which takes
/// effect before `expiry` (the write's, [`PendingWrite::expiry`]) or never. Returns false,
/// having written nothing, when the condition does not hold.
pub(crate) async fn commit_head(
    client: &Client,
    w: &PendingWrite<'_>,
    meta: &ObjectMeta,
    first: &[Bytes],
    condition: &WriteCondition,
    expiry: Instant,
) -> Result<bool, GatewayError> {
    if !matches!(condition, WriteCondition::Exists | WriteCondition::NotETag(_)) {
        return commit_head_once(client, w, meta, first, condition, expiry).await;
    }
    // "Any object" and "not this ETag" have no guard of their own: the head is written guarded
    // on the state it has now (its ETag, or no head), read again if another write changed it in
    // between.
    let name = layout::head_object(w.bucket.id, &meta.key);
    for _ in 0..EXISTS_ATTEMPTS {
        let now = match rados::get_xattr(client, DATA_POOL, &name, ETAG_XATTR).await? {
            Some(e) => {
                Some(String::from_utf8(e).map_err(|_| GatewayError::Internal(format!("{name}'s ETag is not text")))?)
            }
            None => None,
        };
        let guard = match (condition, now) {
            (WriteCondition::Exists, None) => return Ok(false),
            (WriteCondition::NotETag(unwanted), Some(e)) if e == *unwanted => return Ok(false),
            (_, Some(e)) => WriteCondition::ETag(e),
            (_, None) => WriteCondition::Absent,
        };
        if commit_head_once(client, w, meta, first, &guard, expiry).await? {
            return Ok(true);
        }
    }
    Err(GatewayError::Conflict(format!("{:?} kept changing under {}", meta.key, refusal(condition))))
}

async fn commit_head_once(
    client: &Client,
    w: &PendingWrite<'_>,
    meta: &ObjectMeta,
    first: &[Bytes],
    condition: &WriteCondition,
    expiry: Instant,
) -> Result<bool, GatewayError> {
    let mut ops = Vec::with_capacity(5);
    match condition {
        WriteCondition::None => {}
        WriteCondition::Absent => ops.push(ObjOp::AssertXattr { name: ETAG_XATTR.into(), value: None }),
        WriteCondition::ETag(etag) => {
            ops.push(ObjOp::AssertXattr { name: ETAG_XATTR.into(), value: Some(etag.as_bytes().to_vec()) })
        }
        WriteCondition::Exists | WriteCondition::NotETag(_) => {
            unreachable!("commit_head resolves If-Match: * and If-None-Match: ETAG to a guard")
        }
        WriteCondition::Tag(_) => {
            return Err(GatewayError::Internal("a head write cannot be guarded by a write's tag".into()));
        }
    }
    ops.push(ObjOp::WriteFull { len_bytes: parts_len(first) });
    ops.push(ObjOp::SetXattr { name: META_XATTR.into(), value: layout::encode(meta) });
    ops.push(ObjOp::SetXattr { name: ETAG_XATTR.into(), value: meta.etag.as_bytes().to_vec() });
    let name = layout::head_object(w.bucket.id, &meta.key);
    crate::crashpoint::reached(crate::crashpoint::AFTER_TAILS, &meta.key);
    // A test's stand-in for a head request the cluster holds back (decision 0032).
    crate::crashpoint::pause(crate::crashpoint::AFTER_TAILS, &meta.key).await;
    match client.op_parts_before(DATA_POOL, &name, ops, first.to_vec(), Some(expiry)).await {
        Ok(_) => Ok(true),
        Err(e) if e.code() == Some(shoal_proto::ErrorCode::Conflict) => Ok(false),
        // The head may or may not have been written (a timeout, or its expiry passed): the
        // pending record stays for the collector, which decides from the head after the lease,
        // when the head can no longer change.
        Err(e) => Err(e.into()),
    }
}

/// Tail writes in flight, oldest first, each a task of its own.
#[derive(Default)]
struct TailWrites {
    tasks: std::collections::VecDeque<tokio::task::JoinHandle<Result<(), GatewayError>>>,
}

impl TailWrites {
    fn len(&self) -> usize {
        self.tasks.len()
    }

    fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Writes chunk `n` of write `tag`, which takes effect before `expiry` (the write's) or
    /// never: a GC record for the write's chunks, made after the expiry, finds every chunk
    /// that will ever exist.
    fn push(&mut self, client: &Client, bucket_id: u64, tag: u128, n: u32, data: Vec<Bytes>, expiry: Instant) {
        let client = client.clone();
        self.tasks.push_back(tokio::spawn(async move {
            let name = layout::tail_object(bucket_id, tag, n);
            let ops = vec![ObjOp::WriteFull { len_bytes: parts_len(&data) }];
            client.op_parts_before(DATA_POOL, &name, ops, data, Some(expiry)).await?;
            Ok(())
        }));
    }

    /// Waits for the oldest write.
    async fn next(&mut self) -> Result<(), WriteError> {
        let Some(task) = self.tasks.pop_front() else { return Ok(()) };
        match task.await {
            Ok(r) => r.map_err(WriteError::Gateway),
            Err(e) => Err(WriteError::Gateway(GatewayError::Internal(format!("a tail write failed: {e}")))),
        }
    }

    /// Waits for every write, whatever its result.
    async fn drain(&mut self) {
        while let Some(task) = self.tasks.pop_front() {
            let _ = task.await;
        }
    }
}

/// Removes `key`'s object (a missing one is not an error): prepare, remove the head, complete.
/// With `condition` [`WriteCondition::Tag`], only the head that write made is removed (another
/// is left alone); other conditions are not deletes' and are refused. Returns whether a head
/// was removed. The removal takes effect within half of `lease` or never (as a write's commit:
/// [`PendingWrite::expiry`]).
pub async fn delete(
    client: &Client,
    bucket: &BucketRecord,
    key: &str,
    condition: &WriteCondition,
    lease: std::time::Duration,
    gc_delay_ns: u64,
) -> Result<bool, GatewayError> {
    let head = layout::head_object(bucket.id, key);
    let guard = match condition {
        WriteCondition::None => None,
        WriteCondition::Tag(want) => {
            // The guard is the whole metadata read, which carries the write's tag.
            let Some(raw) = rados::get_xattr(client, DATA_POOL, &head, META_XATTR).await? else {
                return Ok(false);
            };
            let meta: ObjectMeta = layout::decode(&raw, "object metadata")?;
            if meta.tag != *want {
                return Ok(false);
            }
            Some(raw)
        }
        other => return Err(GatewayError::Internal(format!("a delete cannot be guarded by {other:?}"))),
    };
    let tag = layout::random_tag()?;
    let expiry = write_expiry(Instant::now(), lease);
    let before = index::prepare_reading(client, bucket, key, tag, layout::PendingKind::Write).await?;
    crate::crashpoint::jitter().await;
    let mut ops = Vec::with_capacity(2);
    if let Some(raw) = guard {
        ops.push(ObjOp::AssertXattr { name: META_XATTR.into(), value: Some(raw) });
    }
    ops.push(ObjOp::Remove);
    // What the removal saw of the head: none after it, or (a failed guard) some other head,
    // which the completion reads itself.
    let (removed, known) = match client.op_parts_before(DATA_POOL, &head, ops, Vec::new(), Some(expiry)).await {
        Ok(_) => (true, Some(index::Known { view: before, head: None })),
        Err(e) if e.is_not_found() => (false, Some(index::Known { view: before, head: None })),
        Err(e) if e.code() == Some(shoal_proto::ErrorCode::Conflict) => (false, None),
        Err(e) => return Err(e.into()),
    };
    crate::crashpoint::jitter().await;
    index::complete(client, bucket, key, tag, Some(0), gc_delay_ns, known).await?;
    Ok(removed)
}

/// An object opened for reading: its metadata and the bytes of the head read with it.
pub struct OpenObject {
    pub meta: ObjectMeta,
    /// Bytes `[range.start, ..)` of the head chunk that were read with the metadata.
    first: Bytes,
}

/// Reads the metadata of `key`'s version whose head is object `name` and, in the same request,
/// the head's part of `range` (bytes of the object, end exclusive; `None`: none). `None` if
/// there is no such head.
pub async fn open(
    client: &Client,
    name: &str,
    key: &str,
    range: Option<std::ops::Range<u64>>,
) -> Result<Option<OpenObject>, GatewayError> {
    let mut ops = vec![ObjOp::GetXattr { name: META_XATTR.into() }];
    if let Some(r) = &range {
        let end = r.end.min(layout::CHUNK_BYTES);
        ops.push(ObjOp::Read { offset: r.start, len_bytes: end.saturating_sub(r.start) });
    }
    let result = match client.op(DATA_POOL, name, ops, Vec::new()).await {
        Ok(r) => r,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let meta = match result.outputs.first() {
        Some(OpOutput::Xattr(Some(bytes))) => match checked(layout::decode(bytes, "object metadata")?, key)? {
            Some(m) => m,
            None => return Ok(None),
        },
        Some(OpOutput::Xattr(None)) => return Ok(None),
        other => return Err(GatewayError::Internal(format!("head read answered {other:?}"))),
    };
    Ok(Some(OpenObject { meta, first: Bytes::from(result.data) }))
}

/// The parts of multipart object `meta` (none for a simple object).
pub async fn manifest_of(client: &Client, bucket_id: u64, meta: &ObjectMeta) -> Result<Option<Manifest>, GatewayError> {
    if meta.parts == 0 {
        return Ok(None);
    }
    match rados::read_all(client, DATA_POOL, &layout::manifest_object(bucket_id, meta.tag)).await? {
        Some(bytes) => Ok(Some(layout::decode(&bytes, "manifest")?)),
        None => Err(GatewayError::Internal(format!("the manifest of {:?} is missing", meta.key))),
    }
}

/// Where byte `at` of an object lives: the chunk object, the offset in it, and how many bytes
/// from there the chunk holds.
fn locate(bucket_id: u64, meta: &ObjectMeta, manifest: Option<&Manifest>, at: u64) -> Option<(String, u64, u64)> {
    let chunk = meta.chunk_bytes.max(1);
    match manifest {
        None => {
            let n = u32::try_from(at / chunk).ok()?;
            let within = at % chunk;
            Some((layout::tail_object(bucket_id, meta.tag, n), within, chunk - within))
        }
        Some(m) => {
            let mut start = 0u64;
            for p in &m.parts {
                if at < start + p.size_bytes {
                    let off = at - start;
                    let n = u32::try_from(off / chunk).ok()?;
                    let within = off % chunk;
                    let left = (chunk - within).min(p.size_bytes - off);
                    return Some((layout::tail_object(bucket_id, p.tag, n), within, left));
                }
                start += p.size_bytes;
            }
            None
        }
    }
}

/// The bytes of a range of an object, as [`read_stream`] yields them: the part read with the
/// metadata first, then what a reading task sends, if the range needs more. Its size hint is
/// exact (the bytes still to come), which the HTTP layer uses as the body's length.
pub struct ObjectStream {
    first: Option<Bytes>,
    rx: Option<tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>>,
    remaining: u64,
}

impl futures::Stream for ObjectStream {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let p = match self.first.take() {
            Some(b) => std::task::Poll::Ready(Some(Ok(b))),
            None => match self.rx.as_mut() {
                Some(rx) => rx.poll_recv(cx),
                None => std::task::Poll::Ready(None),
            },
        };
        if let std::task::Poll::Ready(Some(Ok(b))) = &p {
            self.remaining = self.remaining.saturating_sub(b.len() as u64);
        }
        p
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.remaining).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

/// A stream of an object's bytes in `range` (end exclusive, within the object). What the head
/// read with the metadata ([`open`]) comes first; the rest is read one chunk at a time in a task
/// that stays one chunk ahead of the consumer. A range the head's share covers (every small
/// object) is served with no task and no channel, which cost every small GET a spawn and the
/// wake-ups of a channel (docs/BENCHMARKS.md, "Small GETs without a reading task").
/// `manifest` lists a multipart object's parts. Each read reserves its bytes from `budget`; with
/// `None` the caller has reserved [`COPY_READ_AHEAD_BYTES`] for them (the stream holds at most the
/// chunk waiting in the channel and the one being read).
pub fn read_stream(
    client: Client,
    budget: Option<MemoryBudget>,
    bucket_id: u64,
    mut obj: OpenObject,
    manifest: Option<Manifest>,
    range: std::ops::Range<u64>,
) -> ObjectStream {
    let remaining = range.end.saturating_sub(range.start);
    // The head's share was read for this range, so it lies within it; a head holding more than
    // its metadata says (damage) must still not make the body longer than its stated length.
    if obj.first.len() as u64 > remaining {
        tracing::warn!(key = %obj.meta.key, "the head holds more bytes than the object's size: cut to the range");
        obj.first.truncate(usize::try_from(remaining).unwrap_or(usize::MAX));
    }
    if obj.first.len() as u64 == remaining {
        let first = (!obj.first.is_empty()).then_some(obj.first);
        return ObjectStream { first, rx: None, remaining };
    }
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        let meta = obj.meta;
        let mut at = range.start;
        if !obj.first.is_empty() {
            at += obj.first.len() as u64;
            if tx.send(Ok(obj.first)).await.is_err() {
                return;
            }
        }
        while at < range.end {
            let Some((name, within, left)) = locate(bucket_id, &meta, manifest.as_ref(), at) else {
                let e = std::io::Error::other(format!("byte {at} of {:?} is in no part", meta.key));
                let _ = tx.send(Err(e)).await;
                return;
            };
            let len = (range.end - at).min(left);
            let permit = match &budget {
                Some(b) => Some(b.reserve(len).await),
                None => None,
            };
            let read =
                client.op(DATA_POOL, &name, vec![ObjOp::Read { offset: within, len_bytes: len }], Vec::new()).await;
            let item = match read {
                Ok(r) if r.data.len() as u64 == len => Ok(Bytes::from(r.data)),
                Ok(r) => Err(std::io::Error::other(format!(
                    "{name} of {:?} holds {} of the {len} bytes expected",
                    meta.key,
                    r.data.len()
                ))),
                Err(e) => Err(std::io::Error::other(format!("{name} of {:?}: {e}", meta.key))),
            };
            let failed = item.is_err();
            if let Err(e) = &item {
                tracing::error!(error = %e, "object read failed mid-stream");
            }
            if tx.send(item).await.is_err() || failed {
                return;
            }
            drop(permit);
            at += len;
        }
    });
    ObjectStream { first: None, rx: Some(rx), remaining }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_budget_fits_one_largest_request_and_makes_others_wait() {
        let budget = MemoryBudget::new(1);
        let held = budget.reserve(u64::MAX).await;
        assert_eq!(budget.in_use_bytes(), MAX_RESERVE_BYTES);
        let other = budget.clone();
        let waiter = tokio::spawn(async move {
            let _p = other.reserve(1).await;
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "a request beyond the budget waits");
        drop(held);
        waiter.await.unwrap();
        assert_eq!(budget.in_use_bytes(), 0);
    }

    #[test]
    fn a_chunk_keeps_large_pieces_by_reference_and_gathers_small_ones() {
        let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let body = Bytes::from(body);
        // Large pieces, then a run of tiny ones (as a client splitting its body finely would send).
        let mut pieces = Pieces::default();
        let cuts = [0, 100_000, 200_000, 200_010, 200_020];
        for w in cuts.windows(2) {
            pieces.push(body.slice(w[0]..w[1]));
        }
        let mut at = 200_020;
        while at < body.len() {
            let end = (at + 7).min(body.len());
            pieces.push(body.slice(at..end));
            at = end;
        }
        assert_eq!(pieces.len(), body.len());
        let parts = pieces.finish();
        // The large pieces are the body's own memory, not copies.
        assert_eq!(parts[0].as_ptr(), body.as_ptr());
        assert_eq!(parts[1].as_ptr(), body[100_000..].as_ptr());
        // Every part but the last is at least the gathering size: a bounded count.
        assert!(parts[..parts.len() - 1].iter().all(|p| p.len() >= GATHER_BELOW_BYTES));
        assert!(parts.len() <= 2 + (body.len() - 200_000) / GATHER_BELOW_BYTES + 1, "{} parts", parts.len());
        let joined: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
        assert_eq!(joined, body);
    }
}
