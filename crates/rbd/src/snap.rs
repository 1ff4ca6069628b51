//! Snapshots and clones of images.
//!
//! A snapshot is a record in the image's header ([`SnapInfo`]) plus object snapshots in the
//! cluster: writes carry the image's snapshot context, and the OSD clones an object on its first
//! change after a snapshot (decision 0019). Taking one therefore copies nothing.
//!
//! A live writer (the NBD server holding the image's lock) must carry the new context before a
//! snapshot can be said to exist: [`create`] records the snapshot and bumps `snap_gen`, then
//! waits until the lock holder acknowledges that generation in the header's `snap_ack` xattr
//! (the server polls the header, drains its writes in flight, adopts the new context, and
//! acknowledges: [`acknowledge`]). The snapshot's point in time is that adoption. With no live
//! holder there is nothing to wait for. A holder that does not acknowledge in time makes the
//! creation fail, and the record is taken back.
//!
//! A clone is an image whose header names a protected snapshot of a parent in the same pool;
//! where the child has no object, reads go through to the parent (up to the overlap), and the
//! first change to such an object copies the parent's bytes up (see [`crate::Image`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use shoal_client::Client;
use shoal_proto::osd::{ObjOp, OpOutput};

use crate::error::RbdError;
use crate::header::{
    self, ImageInfo, PARENT_KEY, ParentSpec, SNAP_GEN_KEY, SNAP_SEQ_KEY, SnapInfo, header_object, is_conflict,
    snap_key, u64_value,
};
use crate::image::Image;
use crate::lock;
use crate::manage::Progress;

/// Snapshots an image may have at most (the OSDs accept contexts of up to 256 ids).
pub const MAX_SNAPS: usize = 250;
/// How long [`create`] and [`remove`] wait for a live writer to adopt the change by default.
pub const DEFAULT_ADOPT_WAIT_MS: u64 = 30_000;
const ACK_XATTR: &str = "snap_ack";

/// A live writer's acknowledgement: it writes with the snapshot context of generation `generation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    pub holder: String,
    pub generation: u64,
}

fn now_s() -> u64 {
    lock::now_unix_ms() / 1000
}

/// A compare-and-swap guard on a counter key that is absent while 0.
fn counter_is(key: &[u8], value: u64) -> ObjOp {
    ObjOp::AssertOmap { key: key.to_vec(), value: (value != 0).then(|| u64_value(value)) }
}

async fn header_op(client: &Client, pool: &str, info: &ImageInfo, ops: Vec<ObjOp>) -> Result<(), RbdError> {
    match client.op(pool, &header_object(&info.spec.id), ops, Vec::new()).await {
        Ok(_) => Ok(()),
        Err(e) if is_conflict(&e) => Err(RbdError::Conflict(info.spec.name.clone())),
        Err(e) => Err(e.into()),
    }
}

/// Records that `holder` writes with snapshot generation `generation` (the server holding the lock
/// calls this after [`Image::refresh_snaps`]).
pub async fn acknowledge(
    client: &Client,
    pool: &str,
    image_id: &str,
    holder: &str,
    generation: u64,
) -> Result<(), RbdError> {
    let ack = serde_json::to_vec(&Ack { holder: holder.to_string(), generation }).unwrap_or_default();
    client
        .op(pool, &header_object(image_id), vec![ObjOp::SetXattr { name: ACK_XATTR.into(), value: ack }], Vec::new())
        .await?;
    Ok(())
}

/// Waits until no live lock holder writes with a snapshot generation older than `generation`.
async fn wait_adopted(
    client: &Client,
    pool: &str,
    info: &ImageInfo,
    generation: u64,
    wait_ms: u64,
) -> Result<(), RbdError> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
    loop {
        let Some((rec, _)) = lock::read(client, pool, &info.spec.name).await? else { return Ok(()) };
        if rec.is_stale(lock::now_unix_ms()) {
            return Ok(());
        }
        let r = client
            .op(pool, &header_object(&info.spec.id), vec![ObjOp::GetXattr { name: ACK_XATTR.into() }], Vec::new())
            .await?;
        if let Some(OpOutput::Xattr(Some(bytes))) = r.outputs.into_iter().next()
            && let Ok(ack) = serde_json::from_slice::<Ack>(&bytes)
            && ack.holder == rec.holder
            && ack.generation >= generation
        {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(RbdError::Busy(format!(
                "image {:?}: its writer ({}) did not adopt the snapshot change within {} s",
                info.spec.name,
                rec.description,
                wait_ms / 1000
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Takes snapshot `snap` of image `name`. Durable on every replica, and carried by the image's
/// live writer if it has one, when it returns.
pub async fn create(client: &Client, pool: &str, name: &str, snap: &str, wait_ms: u64) -> Result<SnapInfo, RbdError> {
    header::validate_label("snapshot", snap)?;
    let info = header::open(client, pool, name).await?;
    if info.snaps.iter().any(|s| s.name == snap) {
        return Err(RbdError::SnapExists(format!("{name}@{snap}")));
    }
    if info.snaps.len() >= MAX_SNAPS {
        return Err(RbdError::Invalid(format!("image {name:?} already has the most snapshots allowed ({MAX_SNAPS})")));
    }
    let id = info.snap_seq + 1;
    let rec = SnapInfo {
        id,
        name: snap.to_string(),
        size_bytes: info.size_bytes,
        protected: false,
        parent_overlap_bytes: info.parent.as_ref().map_or(0, |p| p.overlap_bytes),
        created_unix_s: now_s(),
    };
    let generation = info.snap_gen + 1;
    let ops = vec![
        counter_is(SNAP_SEQ_KEY, info.snap_seq),
        counter_is(SNAP_GEN_KEY, info.snap_gen),
        ObjOp::OmapSet {
            entries: vec![
                (SNAP_SEQ_KEY.to_vec(), u64_value(id)),
                (SNAP_GEN_KEY.to_vec(), u64_value(generation)),
                (snap_key(id), serde_json::to_vec(&rec).unwrap_or_default()),
            ],
        },
    ];
    header_op(client, pool, &info, ops).await?;
    if let Err(e) = wait_adopted(client, pool, &info, generation, wait_ms).await {
        // Not carried by the writer: the snapshot would not hold what it claims. Taken back
        // (a later generation tells the writer to drop it).
        let undo = vec![
            ObjOp::OmapRemove { keys: vec![snap_key(id)] },
            ObjOp::OmapSet { entries: vec![(SNAP_GEN_KEY.to_vec(), u64_value(generation + 1))] },
        ];
        let _ = client.op(pool, &header_object(&info.spec.id), undo, Vec::new()).await;
        return Err(e);
    }
    Ok(rec)
}

/// Sets whether snapshot `snap` is protected. Unprotecting fails while clones use it.
pub async fn set_protected(
    client: &Client,
    pool: &str,
    name: &str,
    snap: &str,
    protected: bool,
) -> Result<(), RbdError> {
    let info = header::open(client, pool, name).await?;
    let rec = info.snap(snap)?.clone();
    if rec.protected == protected {
        return Ok(());
    }
    if !protected {
        let kids = children(client, pool, name, Some(snap)).await?;
        if !kids.is_empty() {
            return Err(RbdError::Busy(format!(
                "snapshot {name}@{snap} has clones ({}): flatten or remove them first",
                kids.join(", ")
            )));
        }
    }
    let old = serde_json::to_vec(&rec).unwrap_or_default();
    let new = serde_json::to_vec(&SnapInfo { protected, ..rec.clone() }).unwrap_or_default();
    let ops = vec![
        ObjOp::AssertOmap { key: snap_key(rec.id), value: Some(old) },
        ObjOp::OmapSet { entries: vec![(snap_key(rec.id), new)] },
    ];
    header_op(client, pool, &info, ops).await
}

/// Removes snapshot `snap`: its record first (atomically), then the clones that served only it,
/// object by object (`progress`: objects done of objects to visit). An interrupted trim leaves
/// clones that the next removal's trim (which drops every dead snapshot) takes away. Its requests
/// are made to free space, so a full cluster takes them (decision 0045).
pub async fn remove(
    client: &Client,
    pool: &str,
    name: &str,
    snap: &str,
    wait_ms: u64,
    progress: Progress<'_>,
) -> Result<(), RbdError> {
    shoal_client::freeing_space(async {
        let info = header::open(client, pool, name).await?;
        let rec = info.snap(snap)?.clone();
        if rec.protected {
            return Err(RbdError::Busy(format!("snapshot {name}@{snap} is protected: unprotect it first")));
        }
        let generation = info.snap_gen + 1;
        let ops = vec![
            ObjOp::AssertOmap { key: snap_key(rec.id), value: Some(serde_json::to_vec(&rec).unwrap_or_default()) },
            counter_is(SNAP_GEN_KEY, info.snap_gen),
            ObjOp::OmapRemove { keys: vec![snap_key(rec.id)] },
            ObjOp::OmapSet { entries: vec![(SNAP_GEN_KEY.to_vec(), u64_value(generation))] },
        ];
        header_op(client, pool, &info, ops).await?;
        if let Err(e) = wait_adopted(client, pool, &info, generation, wait_ms).await {
            // The record is gone; clones the writer still makes for it are trimmed by a later removal.
            tracing::warn!(error = %e, "trimming without the writer's acknowledgement");
        }
        trim(client, pool, name, progress).await
    })
    .await
}

/// Drops every dead snapshot's clones from image `name`'s objects.
pub async fn trim(client: &Client, pool: &str, name: &str, progress: Progress<'_>) -> Result<(), RbdError> {
    let info = header::open(client, pool, name).await?;
    let (seq, live) = info.snap_context();
    if seq == 0 {
        return Ok(());
    }
    let ops = vec![ObjOp::SnapContext { seq, snaps: live }, ObjOp::SnapTrim];
    for_each_object(client, pool, &info, ops, progress).await
}

/// Object numbers any state of the image (head or snapshot) may use.
fn object_span(info: &ImageInfo) -> u64 {
    let largest = info.snaps.iter().map(|s| s.size_bytes).fold(info.size_bytes, u64::max);
    info.spec.layout.object_count(largest)
}

/// Sends `ops` to every data object of the image, heads and objects that exist only as
/// snapshot clones (found as `manage::for_each_data_object` finds them); absent objects are
/// skipped.
async fn for_each_object(
    client: &Client,
    pool: &str,
    info: &ImageInfo,
    ops: Vec<ObjOp>,
    progress: Progress<'_>,
) -> Result<(), RbdError> {
    let send = |object: String| {
        let ops = ops.clone();
        async move {
            match client.op(pool, &object, ops, Vec::new()).await {
                Ok(_) => Ok(()),
                Err(e) if e.is_not_found() => Ok(()),
                Err(e) => Err(RbdError::from(e)),
            }
        }
    };
    let count = object_span(info);
    crate::manage::for_each_data_object(client, pool, &info.spec.id, count, true, progress, send).await
}

/// Rolls image `name` back to snapshot `snap`: every object to its state then (the current
/// state is cloned first for the other snapshots), then the size. Refused while a server holds
/// the image. Interrupted, it can be run again.
pub async fn rollback(
    client: &Client,
    pool: &str,
    name: &str,
    snap: &str,
    progress: Progress<'_>,
) -> Result<(), RbdError> {
    lock::check_unlocked(client, pool, name).await?;
    let info = header::open(client, pool, name).await?;
    let rec = info.snap(snap)?.clone();
    let (seq, live) = info.snap_context();
    let ops = vec![ObjOp::SnapContext { seq, snaps: live }, ObjOp::SnapRollback { snap: rec.id }];
    for_each_object(client, pool, &info, ops, progress).await?;
    if info.size_bytes != rec.size_bytes {
        header::set_size(client, pool, &info, rec.size_bytes).await?;
    }
    Ok(())
}

/// Creates image `child` as a clone of the protected snapshot `parent@snap` (same pool).
pub async fn clone(client: &Client, pool: &str, parent: &str, snap: &str, child: &str) -> Result<ImageInfo, RbdError> {
    let pinfo = header::open(client, pool, parent).await?;
    let rec = pinfo.snap(snap)?.clone();
    if !rec.protected {
        return Err(RbdError::Invalid(format!("snapshot {parent}@{snap} is not protected: protect it before cloning")));
    }
    let layout = pinfo.spec.layout;
    if layout.stripe_count != 1 {
        return Err(RbdError::Invalid(format!(
            "image {parent:?} is striped (stripe count {}): clones of striped images are not supported",
            layout.stripe_count
        )));
    }
    let spec = ParentSpec {
        image_id: pinfo.spec.id.clone(),
        image_name: parent.to_string(),
        snap_id: rec.id,
        snap_name: rec.name.clone(),
        overlap_bytes: rec.size_bytes,
    };
    header::create(client, pool, child, rec.size_bytes, layout, Some(spec)).await
}

/// Images of `pool` cloned from image `name` (from its snapshot `snap` only, if given).
pub async fn children(client: &Client, pool: &str, name: &str, snap: Option<&str>) -> Result<Vec<String>, RbdError> {
    let info = header::open(client, pool, name).await?;
    let mut out = Vec::new();
    for image in header::list(client, pool).await? {
        let Ok(child) = header::open(client, pool, &image).await else { continue };
        if let Some(p) = &child.parent
            && p.image_id == info.spec.id
            && snap.is_none_or(|s| s == p.snap_name)
        {
            out.push(image);
        }
    }
    Ok(out)
}

/// Copies everything a clone reads from its parent into the clone, then drops the parent link.
/// A clone with snapshots is refused (they still read through to the parent).
pub async fn flatten(client: &Client, pool: &str, name: &str, progress: Progress<'_>) -> Result<(), RbdError> {
    let info = header::open(client, pool, name).await?;
    let Some(parent) = info.parent.clone() else {
        return Err(RbdError::Invalid(format!("image {name:?} is not a clone")));
    };
    if !info.snaps.is_empty() {
        return Err(RbdError::Busy(format!(
            "image {name:?} has snapshots, which read through to its parent: remove them before flattening"
        )));
    }
    let image = Image::open(client, pool, name, false).await?;
    image.copy_up_all(progress).await?;
    let ops = vec![
        ObjOp::AssertOmap { key: PARENT_KEY.to_vec(), value: Some(serde_json::to_vec(&parent).unwrap_or_default()) },
        ObjOp::OmapRemove { keys: vec![PARENT_KEY.to_vec()] },
    ];
    header_op(client, pool, &info, ops).await
}

/// Lowers a clone's overlap to `size_bytes` (a shrink: what is cut off must not read through
/// again after a later grow).
pub(crate) async fn clip_overlap(
    client: &Client,
    pool: &str,
    info: &ImageInfo,
    size_bytes: u64,
) -> Result<(), RbdError> {
    let Some(parent) = &info.parent else { return Ok(()) };
    if parent.overlap_bytes <= size_bytes {
        return Ok(());
    }
    let new = ParentSpec { overlap_bytes: size_bytes, ..parent.clone() };
    let ops = vec![
        ObjOp::AssertOmap { key: PARENT_KEY.to_vec(), value: Some(serde_json::to_vec(parent).unwrap_or_default()) },
        ObjOp::OmapSet { entries: vec![(PARENT_KEY.to_vec(), serde_json::to_vec(&new).unwrap_or_default())] },
    ];
    header_op(client, pool, info, ops).await
}
