//! Whole-image operations: resize, remove, usage. Each walks the image's object numbers in
//! bounded parallel batches and reports progress through a callback.

use futures::StreamExt;
use shoal_client::Client;
use shoal_proto::osd::{ObjOp, OpOutput};

use crate::error::RbdError;
use crate::header::{self, ImageInfo, data_object};
use crate::image::{EXTENTS_IN_FLIGHT, Image};

/// Progress of a long operation: `done` of `total` units.
pub type Progress<'a> = &'a (dyn Fn(u64, u64) + Sync);

/// Resizes image `name` to `to_bytes`. Growing only changes the size (the new range has no
/// objects: a shrink removed them before it lowered the size). Shrinking needs `allow_shrink`
/// and first makes everything past the new end read as zeros (objects removed or truncated),
/// then lowers the size, so a crash in between leaves the old size with zeros at its end,
/// never old data inside a later grow. A shrink is refused while a live server holds the
/// image's lock: its zeroing would be a second writer beside the lock holder, which keeps its old
/// size (and may hold what it read ahead) until it reopens the image. A grow only raises the size.
pub async fn resize(
    client: &Client,
    pool: &str,
    name: &str,
    to_bytes: u64,
    allow_shrink: bool,
) -> Result<ImageInfo, RbdError> {
    let mut image = Image::open(client, pool, name, false).await?;
    let info = image.info().clone();
    if to_bytes < info.size_bytes {
        if !allow_shrink {
            return Err(RbdError::Invalid(format!(
                "shrinking {name} from {} to {to_bytes} bytes discards data: pass --allow-shrink",
                info.size_bytes
            )));
        }
        crate::lock::check_unlocked(client, pool, name).await?;
        if info.parent.as_ref().is_some_and(|p| p.overlap_bytes > to_bytes) {
            // A clone stops reading through past the new end first: a later grow must read zeros.
            crate::snap::clip_overlap(client, pool, &info, to_bytes).await?;
            image = Image::open(client, pool, name, false).await?;
        }
        image.zero(to_bytes, info.size_bytes - to_bytes).await?;
    }
    header::set_size(client, pool, &info, to_bytes).await?;
    Ok(ImageInfo { size_bytes: to_bytes, ..info })
}

/// Removes image `name`: its data objects, then its header, then its directory entry, so an
/// interrupted removal can be run again. `progress` gets objects done of objects to visit. Its
/// requests are made to free space, so a full cluster takes them (decision 0045). Refused while a
/// live server holds the image's lock (it would go on serving an image whose data is being
/// removed under it), as Ceph refuses to remove an image that still has watchers; a server that
/// starts after this check and before the header goes finds data missing, the same window Ceph
/// leaves.
pub async fn remove(client: &Client, pool: &str, name: &str, progress: Progress<'_>) -> Result<(), RbdError> {
    shoal_client::freeing_space(remove_image(client, pool, name, progress)).await
}

async fn remove_image(client: &Client, pool: &str, name: &str, progress: Progress<'_>) -> Result<(), RbdError> {
    let id = header::lookup(client, pool, name).await?;
    match header::open(client, pool, name).await {
        Ok(info) => {
            if !info.snaps.is_empty() {
                return Err(RbdError::Busy(format!(
                    "image {name:?} has {} snapshot(s): remove them first (`shoal rbd snap rm`)",
                    info.snaps.len()
                )));
            }
            crate::lock::check_unlocked(client, pool, name).await?;
            // Clones an interrupted snapshot removal left behind go first (the removals below
            // would keep them).
            crate::snap::trim(client, pool, name, progress).await?;
            let count = info.spec.layout.object_count(info.size_bytes);
            let remove = |object: String| async move {
                match client.op(pool, &object, vec![ObjOp::Remove], Vec::new()).await {
                    Ok(_) => Ok(()),
                    Err(e) if e.is_not_found() => Ok(()),
                    Err(e) => Err(RbdError::from(e)),
                }
            };
            for_each_data_object(client, pool, &id, count, false, progress, remove).await?;
        }
        // A create or remove interrupted before the header existed or after it went: the
        // data objects are already gone (none is written before the header exists).
        Err(RbdError::Corrupt { .. }) => {}
        Err(e) => return Err(e),
    }
    header::remove(client, pool, name, &id).await
}

/// Provisioned and used bytes of an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub provisioned_bytes: u64,
    /// Sum of the sizes of its data objects.
    pub used_bytes: u64,
    pub objects: u64,
}

/// Counts image `name`'s data objects and their bytes (see [`for_each_data_object`] for how
/// they are found).
pub async fn usage(client: &Client, pool: &str, name: &str, progress: Progress<'_>) -> Result<Usage, RbdError> {
    let info = header::open(client, pool, name).await?;
    let count = info.spec.layout.object_count(info.size_bytes);
    let usage = std::sync::Mutex::new(Usage { provisioned_bytes: info.size_bytes, used_bytes: 0, objects: 0 });
    let stat = |object: String| {
        let usage = &usage;
        async move {
            let size_bytes = match client.op(pool, &object, vec![ObjOp::Stat], Vec::new()).await {
                Ok(r) => match r.outputs.into_iter().next() {
                    Some(OpOutput::Stat { size_bytes, .. }) => size_bytes,
                    other => {
                        return Err(RbdError::Corrupt { name: object, reason: format!("stat answered {other:?}") });
                    }
                },
                Err(e) if e.is_not_found() => return Ok(()),
                Err(e) => return Err(RbdError::from(e)),
            };
            let mut u = usage.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            u.used_bytes += size_bytes;
            u.objects += 1;
            Ok(())
        }
    };
    for_each_data_object(client, pool, &info.spec.id, count, false, progress, stat).await?;
    Ok(usage.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner))
}

/// Runs `visit` on the data objects of image `id` (of `count` object numbers) that may exist,
/// at most `2 * EXTENTS_IN_FLIGHT` at once, stopping at the first error. An image of no more
/// object numbers than its pool has PGs visits every number (one request each, whether or not
/// the object exists); a larger one lists the pool's objects named with the image's data prefix
/// instead, PG by PG, so that a thin image costs what it holds and not what it could hold (a
/// 1 PiB image has 268 million object numbers). Listing also finds objects past `count` that an
/// interrupted shrink left behind; `with_clones` also finds the objects that exist only as
/// snapshot clones (what trimming or rolling back snapshots must visit), each once.
/// `progress` gets object numbers done of `count`; while listing, the share of the pool's PGs
/// listed stands for the share of the numbers (objects spread evenly over PGs).
pub(crate) async fn for_each_data_object<F, Fut>(
    client: &Client,
    pool: &str,
    id: &str,
    count: u64,
    with_clones: bool,
    progress: Progress<'_>,
    visit: F,
) -> Result<(), RbdError>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<(), RbdError>>,
{
    let pg_num = u64::from(client.pool(pool).map_err(RbdError::from)?.pg_num);
    if count <= pg_num {
        let mut visits = futures::stream::iter((0..count).map(|no| visit(data_object(id, no))))
            .buffer_unordered(EXTENTS_IN_FLIGHT * 2);
        let mut done = 0u64;
        while let Some(r) = visits.next().await {
            r?;
            done += 1;
            if done.is_multiple_of(64) || done == count {
                progress(done, count);
            }
        }
        return Ok(());
    }
    let prefix = header::data_prefix(id);
    let mut cursor = None;
    let mut last: Option<String> = None;
    loop {
        let (mut names, next) = client.list_prefix(pool, &prefix, with_clones, cursor, LIST_PAGE_OBJECTS).await?;
        // A head whose companions a page boundary split (with clones) is visited once.
        names.dedup();
        if last.is_some() && names.first() == last.as_ref() {
            names.remove(0);
        }
        if let Some(name) = names.last() {
            last = Some(name.clone());
        }
        let mut visits = futures::stream::iter(names.into_iter().map(&visit)).buffer_unordered(EXTENTS_IN_FLIGHT * 2);
        while let Some(r) = visits.next().await {
            r?;
        }
        match next {
            Some(c) => {
                progress(count.saturating_mul(u64::from(c.pg)) / pg_num, count);
                cursor = Some(c);
            }
            None => {
                progress(count, count);
                return Ok(());
            }
        }
    }
}

/// Names asked for in one listing request of an image's data objects.
const LIST_PAGE_OBJECTS: u32 = 1024;
