//! An open image: reads, writes, zeroing and allocation queries over its data objects.
//!
//! Every call maps its range to object extents ([`Layout::extents`]) and runs one cluster
//! operation per extent, at most [`EXTENTS_IN_FLIGHT`] at once. Durability: when a write or
//! zero returns, its bytes are on stable storage on every replica of every object it touched
//! (the OSDs acknowledge only after their group commit); there is no cache in between, so
//! [`Image::flush`] only has to wait for writes still in flight.
//!
//! While the cluster cannot serve an operation (a PG peering, an OSD down and not yet marked
//! so), the operation waits and is resent, up to the image's wait limit, rather than failing:
//! a file system on the device must not see an I/O error because of a failover.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use shoal_client::{Client, ClientError};
use shoal_proto::ErrorCode;
use shoal_proto::osd::{ObjOp, OpOutput};
use tokio::sync::RwLock;

use crate::error::RbdError;
use crate::fence::{Fence, Refused};
use crate::header::{self, ImageInfo, data_object};
use crate::readahead::Readahead;
use crate::striping::Extent;

/// Cluster operations one image call keeps in flight.
pub const EXTENTS_IN_FLIGHT: usize = 16;
/// How long an operation waits for the cluster by default before failing (10 minutes).
pub const DEFAULT_WAIT_MS: u64 = 600_000;

/// An allocation run of an image range: `len_bytes` from `offset` either hold data objects
/// (`allocated`) or read as zeros because no object backs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    pub offset: u64,
    pub len_bytes: u64,
    pub allocated: bool,
}

/// An open image (or a snapshot of one). Cloning shares it.
#[derive(Clone)]
pub struct Image {
    client: Client,
    pool: String,
    info: ImageInfo,
    read_only: bool,
    wait_ms: u64,
    /// The snapshot this handle reads (read-only), if any.
    at_snap: Option<u64>,
    /// The snapshot context writes carry (seq, live ids newest first), replaced by
    /// [`Image::refresh_snaps`] while no write runs.
    snapc: Arc<std::sync::RwLock<(u64, u64, Vec<u64>)>>,
    /// A clone's parent (opened at its snapshot) and the overlap that reads through to it.
    parent: Option<(Arc<Image>, u64)>,
    /// Object numbers of a clone known to exist in the child (copied up or written), so that
    /// only the first write to each object pays for the check. Bounded by the object count.
    copied_up: Arc<std::sync::Mutex<std::collections::HashSet<u64>>>,
    /// Set when this writer lost the image's exclusive lock: writes are refused from then on.
    fence: Option<Arc<Fence>>,
    /// Held shared by every write and zero while it runs, exclusively by a flush: a flush thus
    /// returns only after every write that started before it has completed.
    writes: Arc<RwLock<()>>,
    /// Read-ahead for sequential readers, where this handle may keep it
    /// ([`Image::with_readahead`]).
    readahead: Option<Arc<Readahead>>,
}

fn transient(e: &ClientError) -> bool {
    match e {
        ClientError::Timeout(_) | ClientError::Net(_) | ClientError::NoActing { .. } => true,
        ClientError::Remote(r) => matches!(r.code, ErrorCode::Timeout | ErrorCode::Degraded),
        _ => false,
    }
}

impl Image {
    /// Opens image `name` of `pool` (read-only: writes are refused).
    pub async fn open(client: &Client, pool: &str, name: &str, read_only: bool) -> Result<Image, RbdError> {
        let info = header::open(client, pool, name).await?;
        Image::from_info(client, pool, info, read_only, None).await
    }

    /// Opens snapshot `snap` of image `name` (read-only; its size is the image's size then).
    pub async fn open_snap(client: &Client, pool: &str, name: &str, snap: &str) -> Result<Image, RbdError> {
        let info = header::open(client, pool, name).await?;
        let id = info.snap(snap)?.id;
        Image::from_info(client, pool, info, true, Some(id)).await
    }

    async fn from_info(
        client: &Client,
        pool: &str,
        mut info: ImageInfo,
        read_only: bool,
        at_snap: Option<u64>,
    ) -> Result<Image, RbdError> {
        let mut overlap = info.parent.as_ref().map_or(0, |p| p.overlap_bytes);
        if let Some(id) = at_snap {
            let snap = info
                .snaps
                .iter()
                .find(|s| s.id == id)
                .cloned()
                .ok_or_else(|| RbdError::Invalid(format!("image {:?} has no snapshot {id}", info.spec.name)))?;
            info.size_bytes = snap.size_bytes;
            overlap = snap.parent_overlap_bytes;
        }
        let parent = match &info.parent {
            Some(p) if overlap > 0 => {
                let pinfo = header::read_header(client, pool, &p.image_name, &p.image_id).await?;
                let parent = Box::pin(Image::from_info(client, pool, pinfo, true, Some(p.snap_id))).await?;
                let overlap = overlap.min(parent.size_bytes());
                Some((Arc::new(parent), overlap))
            }
            _ => None,
        };
        let (seq, ids) = info.snap_context();
        Ok(Image {
            client: client.clone(),
            pool: pool.to_string(),
            snapc: Arc::new(std::sync::RwLock::new((info.snap_gen, seq, ids))),
            info,
            read_only: read_only || at_snap.is_some(),
            wait_ms: DEFAULT_WAIT_MS,
            at_snap,
            parent,
            copied_up: Arc::default(),
            fence: None,
            writes: Arc::new(RwLock::new(())),
            readahead: None,
        })
    }

    /// Re-reads the image's snapshots; if they changed, adopts the new snapshot context once
    /// every write in flight has completed (writes started after carry the new one). Returns the
    /// snapshot generation now in use. A writer calls this when a snapshot is taken or removed
    /// (see [`crate::snap`]), so that the first write after a snapshot clones what it changes.
    pub async fn refresh_snaps(&self) -> Result<u64, RbdError> {
        let fresh = header::read_header(&self.client, &self.pool, &self.info.spec.name, &self.info.spec.id).await?;
        let current = self.snapc.read().map(|c| c.0).unwrap_or(0);
        if fresh.snap_gen == current {
            return Ok(current);
        }
        let _barrier = self.writes.write().await;
        let (seq, ids) = fresh.snap_context();
        if let Ok(mut c) = self.snapc.write() {
            *c = (fresh.snap_gen, seq, ids);
        }
        Ok(fresh.snap_gen)
    }

    /// The snapshot context modifier for a write, if the image has ever had a snapshot.
    fn snap_op(&self) -> Option<ObjOp> {
        let c = self.snapc.read().ok()?;
        (c.1 > 0).then(|| ObjOp::SnapContext { seq: c.1, snaps: c.2.clone() })
    }

    /// `ops` as sent: a write with the snapshot context first, a read at this handle's snapshot.
    fn with_snap(&self, mut ops: Vec<ObjOp>) -> Vec<ObjOp> {
        let modifier = if ops.iter().all(|o| !o.is_write()) {
            self.at_snap.map(|snap| ObjOp::ReadSnap { snap })
        } else {
            self.snap_op()
        };
        if let Some(m) = modifier {
            ops.insert(0, m);
        }
        ops
    }

    /// Sets how long an operation waits for an unavailable cluster before failing.
    pub fn with_wait_ms(mut self, wait_ms: u64) -> Image {
        self.wait_ms = wait_ms;
        self
    }

    /// Lets writes through only while `fence` is open (its state is set by the holder of the
    /// image's lock, see [`crate::fence`]): they wait while it is suspended, up to the handle's
    /// wait limit, and fail once it is closed.
    pub fn with_fence(mut self, fence: Arc<Fence>) -> Image {
        self.fence = Some(fence);
        self
    }

    /// Reads ahead for sequential readers, holding at most `window_bytes` (0: never; see
    /// [`crate::readahead`]). Kept only where nobody else can change what this handle reads:
    /// a snapshot, or a writable handle fenced by the image's lock ([`Image::with_fence`]
    /// first), and dropped whenever the fence is not open. Other handles ignore it: another
    /// writer could change the image under what they fetched.
    pub fn with_readahead(mut self, window_bytes: u64) -> Image {
        let sole_reader = self.at_snap.is_some() || (!self.read_only && self.fence.is_some());
        self.readahead = (sole_reader && window_bytes > 0).then(|| {
            Arc::new(Readahead::new(self.info.size_bytes, self.info.spec.layout.object_size_bytes, window_bytes))
        });
        self
    }

    pub fn info(&self) -> &ImageInfo {
        &self.info
    }

    pub fn size_bytes(&self) -> u64 {
        self.info.size_bytes
    }

    /// The image ranges that may hold data, as sorted, disjoint `(offset, len_bytes)` runs
    /// within the image's size, or `None` when that is not known cheaply: a clone (its bytes may
    /// come from its parent), or more than `max_objects` objects held. Found as
    /// `manage::for_each_data_object` finds objects (with snapshot clones, for a handle opened
    /// at a snapshot); an object of a striped image stands for the whole object set it belongs
    /// to. Outside the runs the image reads as zeros.
    pub async fn ranges_held(&self, max_objects: usize) -> Result<Option<Vec<(u64, u64)>>, RbdError> {
        if self.parent.is_some() {
            return Ok(None);
        }
        let layout = self.info.spec.layout;
        let count = layout.object_count(self.info.size_bytes);
        let prefix = crate::header::data_prefix(&self.info.spec.id);
        let held = std::sync::Mutex::new((std::collections::BTreeSet::new(), false));
        let visit = |name: String| {
            let number = crate::header::data_object_number(&prefix, &name);
            let held = &held;
            async move {
                if let Some(no) = number {
                    let mut h = held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    if h.0.len() >= max_objects {
                        h.1 = true;
                    } else {
                        h.0.insert(no);
                    }
                }
                Ok(())
            }
        };
        let ignore = |_: u64, _: u64| {};
        crate::manage::for_each_data_object(&self.client, &self.pool, &self.info.spec.id, count, true, &ignore, visit)
            .await?;
        let (objects, overflowed) = held.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        if overflowed {
            return Ok(None);
        }
        // An object set (stripe_count objects) covers one contiguous image range.
        let set_bytes = layout.object_size_bytes.saturating_mul(layout.stripe_count.max(1));
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for set in objects.iter().map(|no| no / layout.stripe_count.max(1)) {
            let start = set.saturating_mul(set_bytes);
            if start >= self.info.size_bytes {
                continue;
            }
            let len = set_bytes.min(self.info.size_bytes - start);
            match runs.last_mut() {
                Some((o, l)) if *o + *l >= start => *l = (start + len).max(*o + *l) - *o,
                _ => runs.push((start, len)),
            }
        }
        Ok(Some(runs))
    }

    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn check_range(&self, offset: u64, len_bytes: u64) -> Result<(), RbdError> {
        match offset.checked_add(len_bytes) {
            Some(end) if end <= self.info.size_bytes => Ok(()),
            _ => Err(RbdError::OutOfRange { offset, len_bytes, size_bytes: self.info.size_bytes }),
        }
    }

    /// Refuses writes to a read-only handle, or once its fence is closed; waits while the fence
    /// is suspended (up to the wait limit).
    async fn check_writable(&self) -> Result<(), RbdError> {
        self.check_writable_within(Duration::from_millis(self.wait_ms)).await
    }

    /// [`Image::check_writable`], waiting at most `wait` for a suspended fence.
    async fn check_writable_within(&self, wait: Duration) -> Result<(), RbdError> {
        if self.read_only {
            return Err(RbdError::Invalid(format!("image {:?} is open read-only", self.info.spec.name)));
        }
        let Some(fence) = &self.fence else { return Ok(()) };
        match fence.writable(wait).await {
            Ok(()) => Ok(()),
            Err(Refused::Closed) => Err(RbdError::Fenced(self.info.spec.name.clone())),
            Err(Refused::StillSuspended { waited_ms }) => {
                Err(RbdError::LockUnrenewed { name: self.info.spec.name.clone(), waited_ms })
            }
        }
    }

    /// One cluster operation on data object `object_no`, resent while the cluster cannot serve
    /// it, up to the wait limit. A missing object answers `Ok(None)`.
    async fn op(
        &self,
        object_no: u64,
        ops: Vec<ObjOp>,
        data: Bytes,
    ) -> Result<Option<shoal_client::OpResult>, RbdError> {
        let object = data_object(&self.info.spec.id, object_no);
        let fenced_write = self.fence.as_ref().filter(|_| ops.iter().any(ObjOp::is_write));
        let ops = self.with_snap(ops);
        let deadline = tokio::time::Instant::now() + Duration::from_millis(self.wait_ms);
        let mut pause_ms = 50;
        loop {
            // A write under the image's lock takes effect before the lock's write deadline or
            // never (decision 0061); each attempt waits for the fence and takes its deadline then.
            let expiry = match fenced_write {
                Some(fence) => {
                    // Within what is left of the operation's wait, so that the fence and the
                    // cluster together hold it no longer than the wait limit.
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    self.check_writable_within(left).await?;
                    fence.deadline()
                }
                None => None,
            };
            match self.client.op_parts_before(&self.pool, &object, ops.clone(), vec![data.clone()], expiry).await {
                Ok(r) => return Ok(Some(r)),
                Err(e) if e.is_not_found() && !matches!(e, ClientError::UnknownPool(_)) => return Ok(None),
                // Past the write deadline: not applied, and never will be. The fence is
                // suspended by then or about to be; the next attempt waits for it.
                Err(ClientError::Expired) if fenced_write.is_some() && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                    pause_ms = (pause_ms * 2).min(1000);
                }
                Err(e) if transient(&e) && tokio::time::Instant::now() < deadline => {
                    tracing::warn!(object, error = %e, "the cluster cannot serve an image operation yet; waiting");
                    tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                    pause_ms = (pause_ms * 2).min(1000);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Reads `len_bytes` at `offset`; ranges no object backs read as zeros. A sequential
    /// reader's reads may be served from what was read ahead (see [`crate::readahead`]).
    pub async fn read(&self, offset: u64, len_bytes: u64) -> Result<Bytes, RbdError> {
        self.check_range(offset, len_bytes)?;
        if let Some(ra) = &self.readahead {
            if self.fence.as_ref().is_some_and(|f| !f.is_open()) {
                ra.clear();
            } else if let Some(bytes) = self.read_ahead(ra, offset, len_bytes).await {
                return Ok(bytes);
            }
        }
        self.read_direct(offset, len_bytes).await
    }

    /// [`Image::read`] as a boxed future of a named type: a clone reads through its parent with
    /// it, which breaks the recursion of the futures' types (and keeps them `Send`).
    fn read_boxed(&self, offset: u64, len_bytes: u64) -> futures::future::BoxFuture<'_, Result<Bytes, RbdError>> {
        Box::pin(self.read(offset, len_bytes))
    }

    /// Plans `offset..+len_bytes` with the read-ahead state: starts the fetches it asks for and
    /// returns the read's bytes if a unit read ahead holds them.
    async fn read_ahead(&self, ra: &Arc<Readahead>, offset: u64, len_bytes: u64) -> Option<Bytes> {
        use futures::FutureExt;
        let plan = ra.plan(offset, len_bytes);
        for index in plan.fetch {
            let (start, len) = ra.unit_range(index);
            let (image, ra2) = (self.clone(), ra.clone());
            // A task of its own, so that the fetch proceeds while no reader polls it.
            let task = tokio::spawn(async move {
                match image.read_direct(start, len).await {
                    Ok(bytes) => Some(bytes),
                    Err(e) => {
                        tracing::debug!(start, len, error = %e, "a read-ahead failed; readers go to the cluster");
                        ra2.failed(index);
                        None
                    }
                }
            });
            ra.started(index, task.map(|r| r.ok().flatten()).boxed().shared(), plan.writes_begun);
        }
        let (fetch, at) = plan.serve?;
        let bytes = fetch.await?;
        let end = at + len_bytes as usize;
        let served = (end <= bytes.len()).then(|| bytes.slice(at..end));
        if served.is_some() {
            ra.served();
        }
        served
    }

    /// What read-ahead did for this handle (and its clones), if it reads ahead.
    pub fn readahead_counts(&self) -> Option<crate::readahead::Counts> {
        self.readahead.as_ref().map(|ra| ra.counts())
    }

    /// Reads `len_bytes` at `offset` from the cluster.
    async fn read_direct(&self, offset: u64, len_bytes: u64) -> Result<Bytes, RbdError> {
        let extents = self.info.spec.layout.extents(offset, len_bytes);
        // A read inside one object that holds every byte of it is that object's reply as it
        // is; otherwise the pieces are copied into a zeroed buffer (holes read as zeros).
        let whole_from_one = extents.len() == 1;
        let mut out = Vec::new();
        let mut reads = futures::stream::iter(extents.into_iter().map(|x| async move {
            let ops = vec![ObjOp::Read { offset: x.object_offset, len_bytes: x.len_bytes }];
            self.op(x.object_no, ops, Bytes::new()).await.map(|r| (x, r.map(|r| r.data)))
        }))
        .buffer_unordered(EXTENTS_IN_FLIGHT);
        let mut through = Vec::new();
        while let Some(done) = reads.next().await {
            let (x, data) = done?;
            let at = (x.image_offset - offset) as usize;
            match data {
                Some(data) if whole_from_one && data.len() as u64 == len_bytes => out = data,
                Some(data) => {
                    // An object shorter than the extent reads as zeros past its end.
                    out.resize(len_bytes as usize, 0);
                    let n = data.len().min(x.len_bytes as usize);
                    out[at..at + n].copy_from_slice(&data[..n]);
                }
                // No object in a clone: the parent's bytes, up to the overlap.
                None => through.push(x),
            }
        }
        out.resize(len_bytes as usize, 0);
        if let Some((parent, overlap)) = &self.parent {
            for x in through.into_iter().filter(|x| x.image_offset < *overlap) {
                let len = x.len_bytes.min(overlap - x.image_offset);
                let bytes = parent.read_boxed(x.image_offset, len).await?;
                let at = (x.image_offset - offset) as usize;
                out[at..at + bytes.len()].copy_from_slice(&bytes);
            }
        }
        Ok(Bytes::from(out))
    }

    /// Makes sure a clone's object `object_no` exists in the child before it is changed: the
    /// first change copies the parent's bytes of the object up (within the overlap), so that
    /// the object no longer reads through. Nothing to do for an image without a parent.
    async fn copy_up(&self, object_no: u64) -> Result<(), RbdError> {
        let Some((parent, overlap)) = &self.parent else { return Ok(()) };
        if self.copied_up.lock().is_ok_and(|k| k.contains(&object_no)) {
            return Ok(());
        }
        let object_bytes = self.info.spec.layout.object_size_bytes;
        let start = object_no * object_bytes;
        if start < *overlap {
            let len = object_bytes.min(overlap - start);
            let mut bytes = parent.read_boxed(start, len).await?;
            let used = bytes.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
            bytes.truncate(used);
            // Zeros in the parent need no object in the child: an absent child object reads
            // through to the same zeros (the parent's snapshot never changes), and the write that
            // asked for this copy-up creates the object itself. So a flatten of a thin clone
            // stays thin instead of leaving an empty object per number.
            if used > 0 {
                let ops = vec![ObjOp::Create { exclusive: true }, ObjOp::Write { offset: 0, len_bytes: used as u64 }];
                match self.op(object_no, ops, bytes).await {
                    Ok(_) => {}
                    // Already in the child (written or copied up before).
                    Err(RbdError::Client(e)) if e.code() == Some(ErrorCode::Exists) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        if let Ok(mut k) = self.copied_up.lock() {
            k.insert(object_no);
        }
        Ok(())
    }

    /// Copies up every object of a clone's overlap (flatten); `progress` gets objects done. A
    /// clone of an image that is not itself a clone copies up only the object numbers its parent
    /// has objects for (heads or snapshot clones, found as `manage::for_each_data_object` finds
    /// them; parent and child share their layout): the others read as zeros and need nothing. A
    /// clone of a clone visits every number (its bytes may come from further up the chain).
    pub async fn copy_up_all(&self, progress: &(dyn Fn(u64, u64) + Sync)) -> Result<(), RbdError> {
        self.check_writable().await?;
        let Some((parent, overlap)) = &self.parent else { return Ok(()) };
        let count = overlap.div_ceil(self.info.spec.layout.object_size_bytes);
        if parent.parent.is_none() {
            let parent_id = &parent.info.spec.id;
            let prefix = crate::header::data_prefix(parent_id);
            let visit = |name: String| {
                let number = crate::header::data_object_number(&prefix, &name);
                async move {
                    match number {
                        Some(no) if no < count => self.copy_up(no).await,
                        _ => Ok(()),
                    }
                }
            };
            return crate::manage::for_each_data_object(
                &self.client,
                &self.pool,
                parent_id,
                count,
                true,
                progress,
                visit,
            )
            .await;
        }
        let mut copies =
            futures::stream::iter((0..count).map(|no| self.copy_up(no))).buffer_unordered(EXTENTS_IN_FLIGHT);
        let mut done = 0;
        while let Some(r) = copies.next().await {
            r?;
            done += 1;
            if done % 64 == 0 || done == count {
                progress(done, count);
            }
        }
        Ok(())
    }

    /// Writes `data` at `offset`; durable on every replica when it returns. Each object's piece
    /// is sent from `data` itself (no copy on the way to the cluster).
    pub async fn write(&self, offset: u64, data: Bytes) -> Result<(), RbdError> {
        self.check_writable().await?;
        self.check_range(offset, data.len() as u64)?;
        let _running = self.writes.read().await;
        let _unread = self.readahead.as_ref().map(|ra| ra.write_begins(offset, data.len() as u64));
        let extents = self.info.spec.layout.extents(offset, data.len() as u64);
        self.copy_up_extents(&extents).await?;
        self.each(extents, |x| {
            let at = (x.image_offset - offset) as usize;
            let piece = data.slice(at..at + x.len_bytes as usize);
            (vec![ObjOp::Write { offset: x.object_offset, len_bytes: x.len_bytes }], piece)
        })
        .await
    }

    /// Makes `len_bytes` at `offset` read as zeros without writing them where it can: objects
    /// covered whole are removed, ranges reaching an object's end truncate it, and only ranges
    /// inside an object are overwritten with zeros (at the OSD; no zeros cross the network).
    /// Serves both discard and write-zeroes. Durable on every replica when it returns. Its
    /// requests are made to free space, so a full cluster takes them; a clone's copy-ups write
    /// whole objects, more than that allows, and are refused like any write (decision 0045).
    pub async fn zero(&self, offset: u64, len_bytes: u64) -> Result<(), RbdError> {
        shoal_client::freeing_space(self.zero_range(offset, len_bytes)).await
    }

    async fn zero_range(&self, offset: u64, len_bytes: u64) -> Result<(), RbdError> {
        self.check_writable().await?;
        self.check_range(offset, len_bytes)?;
        let _running = self.writes.read().await;
        let _unread = self.readahead.as_ref().map(|ra| ra.write_begins(offset, len_bytes));
        let object_bytes = self.info.spec.layout.object_size_bytes;
        let extents = self.info.spec.layout.extents(offset, len_bytes);
        let overlap = self.parent.as_ref().map_or(0, |p| p.1);
        // In a clone, an object that reads through must stay (empty) rather than go, and a
        // partial zero needs the parent's bytes copied up first.
        let partial: Vec<Extent> =
            extents.iter().filter(|x| !(x.object_offset == 0 && x.len_bytes == object_bytes)).copied().collect();
        self.copy_up_extents(&partial).await?;
        self.each(extents, |x| {
            let ops = if x.object_offset == 0 && x.len_bytes == object_bytes {
                if x.image_offset < overlap {
                    vec![ObjOp::Create { exclusive: false }, ObjOp::Truncate { size_bytes: 0 }]
                } else {
                    vec![ObjOp::Remove]
                }
            } else {
                vec![ObjOp::Zero { offset: x.object_offset, len_bytes: x.len_bytes }]
            };
            (ops, Bytes::new())
        })
        .await
    }

    async fn copy_up_extents(&self, extents: &[Extent]) -> Result<(), RbdError> {
        if self.parent.is_none() {
            return Ok(());
        }
        let mut objects: Vec<u64> = extents.iter().map(|x| x.object_no).collect();
        objects.dedup();
        let mut copies =
            futures::stream::iter(objects.into_iter().map(|no| self.copy_up(no))).buffer_unordered(EXTENTS_IN_FLIGHT);
        while let Some(r) = copies.next().await {
            r?;
        }
        Ok(())
    }

    async fn each<'a>(
        &'a self,
        extents: Vec<Extent>,
        make: impl Fn(&Extent) -> (Vec<ObjOp>, Bytes) + 'a,
    ) -> Result<(), RbdError> {
        // Owned extents: a stream of closures over borrowed ones is not provably `Send`.
        let mut ops = futures::stream::iter(extents.into_iter().map(|x| {
            let (ops, data) = make(&x);
            self.op(x.object_no, ops, data)
        }))
        .buffer_unordered(EXTENTS_IN_FLIGHT);
        while let Some(done) = ops.next().await {
            done?;
        }
        Ok(())
    }

    /// Returns once every write and zero that started before this call has completed (each is
    /// then durable on every replica: there is no write-back cache to drain).
    pub async fn flush(&self) -> Result<(), RbdError> {
        drop(self.writes.write().await);
        Ok(())
    }

    /// Which parts of `len_bytes` at `offset` are backed by data objects, as runs in image
    /// order (adjacent runs of one kind merged). One stat per object touched.
    pub async fn allocation(&self, offset: u64, len_bytes: u64) -> Result<Vec<Run>, RbdError> {
        self.check_range(offset, len_bytes)?;
        let extents = self.info.spec.layout.extents(offset, len_bytes);
        let mut sizes = futures::stream::iter(extents.clone().into_iter().enumerate().map(|(i, x)| async move {
            let r = self.op(x.object_no, vec![ObjOp::Stat], Bytes::new()).await?;
            let size = match r.and_then(|r| r.outputs.into_iter().next()) {
                Some(OpOutput::Stat { size_bytes, .. }) => Some(size_bytes),
                _ => None,
            };
            Ok::<_, RbdError>((i, size))
        }))
        .buffer_unordered(EXTENTS_IN_FLIGHT);
        let mut object_sizes = vec![None; extents.len()];
        while let Some(done) = sizes.next().await {
            let (i, size) = done?;
            object_sizes[i] = size;
        }
        let mut runs: Vec<Run> = Vec::new();
        let mut push = |offset: u64, len_bytes: u64, allocated: bool| {
            if len_bytes == 0 {
                return;
            }
            match runs.last_mut() {
                Some(r) if r.allocated == allocated && r.offset + r.len_bytes == offset => r.len_bytes += len_bytes,
                _ => runs.push(Run { offset, len_bytes, allocated }),
            }
        };
        let overlap = self.parent.as_ref().map_or(0, |p| p.1);
        for (x, size) in extents.iter().zip(object_sizes) {
            // The object's bytes below its size are data; the rest of the extent is a hole —
            // except where a clone reads through to its parent, which counts as data (never a
            // hole that a copy would skip).
            let data = match size {
                Some(s) => s.saturating_sub(x.object_offset).min(x.len_bytes),
                None if x.image_offset < overlap => x.len_bytes.min(overlap - x.image_offset),
                None => 0,
            };
            push(x.image_offset, data, true);
            push(x.image_offset + data, x.len_bytes - data, false);
        }
        Ok(runs)
    }
}
