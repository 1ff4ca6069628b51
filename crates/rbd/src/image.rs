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

use futures::StreamExt;
use shoal_client::{Client, ClientError};
use shoal_proto::ErrorCode;
use shoal_proto::osd::{ObjOp, OpOutput};
use tokio::sync::RwLock;

use crate::error::RbdError;
use crate::header::{self, ImageInfo, data_object};
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

/// An open image. Cloning shares it.
#[derive(Clone)]
pub struct Image {
    client: Client,
    pool: String,
    info: ImageInfo,
    read_only: bool,
    wait_ms: u64,
    /// Set when this writer lost the image's exclusive lock: writes are refused from then on.
    fenced: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// Held shared by every write and zero while it runs, exclusively by a flush: a flush thus
    /// returns only after every write that started before it has completed.
    writes: Arc<RwLock<()>>,
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
        Ok(Image {
            client: client.clone(),
            pool: pool.to_string(),
            info,
            read_only,
            wait_ms: DEFAULT_WAIT_MS,
            fenced: None,
            writes: Arc::new(RwLock::new(())),
        })
    }

    /// Sets how long an operation waits for an unavailable cluster before failing.
    pub fn with_wait_ms(mut self, wait_ms: u64) -> Image {
        self.wait_ms = wait_ms;
        self
    }

    /// Refuses writes once `fenced` is set (by the holder of the image's lock, when it loses
    /// it).
    pub fn with_fence(mut self, fenced: Arc<std::sync::atomic::AtomicBool>) -> Image {
        self.fenced = Some(fenced);
        self
    }

    pub fn info(&self) -> &ImageInfo {
        &self.info
    }

    pub fn size_bytes(&self) -> u64 {
        self.info.size_bytes
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

    fn check_writable(&self) -> Result<(), RbdError> {
        if self.read_only {
            return Err(RbdError::Invalid(format!("image {:?} is open read-only", self.info.spec.name)));
        }
        if self.fenced.as_ref().is_some_and(|f| f.load(std::sync::atomic::Ordering::Acquire)) {
            return Err(RbdError::Fenced(self.info.spec.name.clone()));
        }
        Ok(())
    }

    /// One cluster operation on data object `object_no`, resent while the cluster cannot serve
    /// it, up to the wait limit. A missing object answers `Ok(None)`.
    async fn op(
        &self,
        object_no: u64,
        ops: Vec<ObjOp>,
        data: &[u8],
    ) -> Result<Option<shoal_client::OpResult>, RbdError> {
        let object = data_object(&self.info.spec.id, object_no);
        let deadline = tokio::time::Instant::now() + Duration::from_millis(self.wait_ms);
        let mut pause_ms = 50;
        loop {
            match self.client.op_ref(&self.pool, &object, ops.clone(), data).await {
                Ok(r) => return Ok(Some(r)),
                Err(e) if e.is_not_found() && !matches!(e, ClientError::UnknownPool(_)) => return Ok(None),
                Err(e) if transient(&e) && tokio::time::Instant::now() < deadline => {
                    tracing::warn!(object, error = %e, "the cluster cannot serve an image operation yet; waiting");
                    tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                    pause_ms = (pause_ms * 2).min(1000);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Reads `len_bytes` at `offset`; ranges no object backs read as zeros.
    pub async fn read(&self, offset: u64, len_bytes: u64) -> Result<Vec<u8>, RbdError> {
        self.check_range(offset, len_bytes)?;
        let mut out = vec![0u8; len_bytes as usize];
        let extents = self.info.spec.layout.extents(offset, len_bytes);
        let mut reads = futures::stream::iter(extents.into_iter().map(|x| async move {
            let ops = vec![ObjOp::Read { offset: x.object_offset, len_bytes: x.len_bytes }];
            self.op(x.object_no, ops, &[]).await.map(|r| (x, r.map(|r| r.data)))
        }))
        .buffer_unordered(EXTENTS_IN_FLIGHT);
        while let Some(done) = reads.next().await {
            let (x, data) = done?;
            if let Some(data) = data {
                // An object shorter than the extent reads as zeros past its end.
                let at = (x.image_offset - offset) as usize;
                let n = data.len().min(x.len_bytes as usize);
                out[at..at + n].copy_from_slice(&data[..n]);
            }
        }
        Ok(out)
    }

    /// Writes `data` at `offset`; durable on every replica when it returns.
    pub async fn write(&self, offset: u64, data: &[u8]) -> Result<(), RbdError> {
        self.check_writable()?;
        self.check_range(offset, data.len() as u64)?;
        let _running = self.writes.read().await;
        let extents = self.info.spec.layout.extents(offset, data.len() as u64);
        self.each(extents, |x| {
            let at = (x.image_offset - offset) as usize;
            let piece = &data[at..at + x.len_bytes as usize];
            (vec![ObjOp::Write { offset: x.object_offset, len_bytes: x.len_bytes }], piece)
        })
        .await
    }

    /// Makes `len_bytes` at `offset` read as zeros without writing them where it can: objects
    /// covered whole are removed, ranges reaching an object's end truncate it, and only ranges
    /// inside an object are overwritten with zeros (at the OSD; no zeros cross the network).
    /// Serves both discard and write-zeroes. Durable on every replica when it returns.
    pub async fn zero(&self, offset: u64, len_bytes: u64) -> Result<(), RbdError> {
        self.check_writable()?;
        self.check_range(offset, len_bytes)?;
        let _running = self.writes.read().await;
        let object_bytes = self.info.spec.layout.object_size_bytes;
        let extents = self.info.spec.layout.extents(offset, len_bytes);
        self.each(extents, |x| {
            let op = if x.object_offset == 0 && x.len_bytes == object_bytes {
                ObjOp::Remove
            } else {
                ObjOp::Zero { offset: x.object_offset, len_bytes: x.len_bytes }
            };
            (vec![op], &[][..])
        })
        .await
    }

    async fn each<'a>(
        &'a self,
        extents: Vec<Extent>,
        make: impl Fn(&Extent) -> (Vec<ObjOp>, &'a [u8]),
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
            let r = self.op(x.object_no, vec![ObjOp::Stat], &[]).await?;
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
        for (x, size) in extents.iter().zip(object_sizes) {
            // The object's bytes below its size are data; the rest of the extent is a hole.
            let data = size.map_or(0, |s| s.saturating_sub(x.object_offset).min(x.len_bytes));
            push(x.image_offset, data, true);
            push(x.image_offset + data, x.len_bytes - data, false);
        }
        Ok(runs)
    }
}
