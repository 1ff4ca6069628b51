//! Image metadata in the cluster: the pool's directory (image name → id) and each image's
//! header object, whose omap holds the image's spec and size.
//!
//! Objects, per pool:
//! - `rbd_directory`: omap `NAME` → the image's id (16 hex digits).
//! - `rbd_header.ID`: omap `spec` → [`ImageSpec`] (JSON), `size` → the size in bytes (8 bytes,
//!   little-endian). The size is a key of its own so a resize is one compare-and-swap on it.
//!   Snapshots: `snap_seq` → the newest snapshot id handed out (8 bytes LE; ids are per image),
//!   `snap_gen` → a counter bumped by every snapshot creation or removal (what a live writer
//!   acknowledges, see [`crate::snap`]), `snap.ID` (16 hex digits) → [`SnapInfo`] (JSON). A
//!   clone: `parent` → [`ParentSpec`] (JSON).
//! - `rbd_data.ID.NNNNNNNNNNNNNNNN`: data object number N (hex), created by the first write.
//!
//! Naming data by id, not name, means a removed image's leftovers never meet an image created
//! later under the same name.

use serde::{Deserialize, Serialize};
use shoal_client::Client;
use shoal_proto::osd::{ObjOp, OpOutput};

use crate::error::RbdError;
use crate::striping::Layout;

/// The pool's image directory object.
pub const DIRECTORY: &str = "rbd_directory";
const SPEC_KEY: &[u8] = b"spec";
const SIZE_KEY: &[u8] = b"size";
/// The longest image name accepted, in bytes.
pub const MAX_NAME_BYTES: usize = 128;
/// The largest image accepted, in bytes (sizes and offsets stay far from u64 overflow).
pub const MAX_IMAGE_BYTES: u64 = 1 << 60;

/// What an image is, fixed at creation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageSpec {
    pub name: String,
    pub id: String,
    pub layout: Layout,
    /// Feature names (`layering`, `striping`, ...), as `rbd info` shows them.
    pub features: Vec<String>,
    pub created_unix_s: u64,
}

/// One snapshot of an image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapInfo {
    pub id: u64,
    pub name: String,
    /// The image's size when the snapshot was taken.
    pub size_bytes: u64,
    /// A protected snapshot can be cloned and cannot be removed.
    pub protected: bool,
    /// A clone's parent overlap when the snapshot was taken (what reads through to the parent).
    #[serde(default)]
    pub parent_overlap_bytes: u64,
    pub created_unix_s: u64,
}

/// A clone's parent: a protected snapshot of an image in the same pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentSpec {
    pub image_id: String,
    pub image_name: String,
    pub snap_id: u64,
    pub snap_name: String,
    /// Bytes from the start of the child that read through to the parent where the child has
    /// no object (the parent snapshot's size, lowered by a shrink of the child).
    pub overlap_bytes: u64,
}

/// An image's spec, current size, snapshots and parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageInfo {
    pub spec: ImageSpec,
    pub size_bytes: u64,
    /// The newest snapshot id handed out (0: none ever).
    pub snap_seq: u64,
    /// Bumped by every snapshot creation and removal.
    pub snap_gen: u64,
    /// Live snapshots, oldest first.
    pub snaps: Vec<SnapInfo>,
    pub parent: Option<ParentSpec>,
}

impl ImageInfo {
    /// The snapshot named `name`.
    pub fn snap(&self, name: &str) -> Result<&SnapInfo, RbdError> {
        self.snaps
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| RbdError::Invalid(format!("image {:?} has no snapshot {name:?}", self.spec.name)))
    }

    /// The snapshot context writes carry: the newest id handed out and the live ids, newest first.
    pub fn snap_context(&self) -> (u64, Vec<u64>) {
        (self.snap_seq, self.snaps.iter().rev().map(|s| s.id).collect())
    }
}

pub(crate) const SNAP_SEQ_KEY: &[u8] = b"snap_seq";
pub(crate) const SNAP_GEN_KEY: &[u8] = b"snap_gen";
pub(crate) const PARENT_KEY: &[u8] = b"parent";
const SNAP_KEY_PREFIX: &str = "snap.";

pub(crate) fn snap_key(id: u64) -> Vec<u8> {
    format!("{SNAP_KEY_PREFIX}{id:016x}").into_bytes()
}

pub(crate) fn u64_value(v: u64) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

pub fn header_object(id: &str) -> String {
    format!("rbd_header.{id}")
}

pub fn data_object(id: &str, object_no: u64) -> String {
    format!("{}{object_no:016x}", data_prefix(id))
}

/// What the names of image `id`'s data objects start with (and no other image's: ids are fixed
/// length).
pub fn data_prefix(id: &str) -> String {
    format!("rbd_data.{id}.")
}

/// The object number of data object `name`, given its image's [`data_prefix`]; `None` for a name
/// that is not one of that image's data objects.
pub fn data_object_number(prefix: &str, name: &str) -> Option<u64> {
    name.strip_prefix(prefix).and_then(|n| u64::from_str_radix(n, 16).ok())
}

/// Checks an image name: 1 to [`MAX_NAME_BYTES`] bytes, no `/` or `@` (they separate pool,
/// image and snapshot in `POOL/IMAGE@SNAP`), no control characters.
pub fn validate_name(name: &str) -> Result<(), RbdError> {
    validate_label("image", name)
}

/// Checks an image or snapshot name (`kind` names which in the error).
pub fn validate_label(kind: &str, name: &str) -> Result<(), RbdError> {
    let bad = |why: &str| Err(RbdError::Invalid(format!("{kind} name {name:?}: {why}")));
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_NAME_BYTES {
        return bad(&format!("longer than {MAX_NAME_BYTES} bytes"));
    }
    if name.contains(['/', '@']) || name.chars().any(char::is_control) {
        return bad("must not contain '/', '@' or control characters");
    }
    Ok(())
}

fn unix_now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn random_id() -> Result<String, RbdError> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).map_err(|e| RbdError::Invalid(format!("no randomness: {e}")))?;
    Ok(format!("{:016x}", u64::from_le_bytes(b)))
}

pub(crate) fn is_conflict(e: &shoal_client::ClientError) -> bool {
    e.code() == Some(shoal_proto::ErrorCode::Conflict)
}

/// Creates image `name` of `size_bytes` in `pool`. The directory entry is claimed first (a
/// guarded write: two creators of one name cannot both win), then the header is written; both
/// are durable on every replica when this returns. A crash in between leaves a name without a
/// header, which [`open`] reports and `rm` removes.
pub async fn create(
    client: &Client,
    pool: &str,
    name: &str,
    size_bytes: u64,
    layout: Layout,
    parent: Option<ParentSpec>,
) -> Result<ImageInfo, RbdError> {
    validate_name(name)?;
    layout.validate()?;
    if size_bytes > MAX_IMAGE_BYTES {
        return Err(RbdError::Invalid(format!("size {size_bytes} is over the limit of {MAX_IMAGE_BYTES} bytes")));
    }
    let max_object_bytes = client.pool(pool)?.max_object_bytes;
    if layout.object_size_bytes > max_object_bytes {
        return Err(RbdError::Invalid(format!(
            "object size {} is over pool {pool}'s maximum object size of {max_object_bytes} bytes",
            layout.object_size_bytes
        )));
    }
    let id = random_id()?;
    let mut features = vec!["layering".to_string()];
    if layout.stripe_count > 1 || layout.stripe_unit_bytes != layout.object_size_bytes {
        features.push("striping".to_string());
    }
    let spec = ImageSpec { name: name.to_string(), id: id.clone(), layout, features, created_unix_s: unix_now_s() };
    let claim = vec![
        ObjOp::AssertOmap { key: name.as_bytes().to_vec(), value: None },
        ObjOp::OmapSet { entries: vec![(name.as_bytes().to_vec(), id.as_bytes().to_vec())] },
    ];
    match client.op(pool, DIRECTORY, claim, Vec::new()).await {
        Ok(_) => {}
        Err(e) if is_conflict(&e) => return Err(RbdError::Exists(name.to_string())),
        Err(e) => return Err(e.into()),
    }
    let spec_json = serde_json::to_vec(&spec).map_err(|e| RbdError::Invalid(e.to_string()))?;
    let mut entries = vec![(SPEC_KEY.to_vec(), spec_json), (SIZE_KEY.to_vec(), size_bytes.to_le_bytes().to_vec())];
    if let Some(p) = &parent {
        // A clone's parent is in its header from the start: the child never reads as zeros.
        entries.push((PARENT_KEY.to_vec(), serde_json::to_vec(p).map_err(|e| RbdError::Invalid(e.to_string()))?));
    }
    let header = vec![ObjOp::Create { exclusive: true }, ObjOp::OmapSet { entries }];
    client.op(pool, &header_object(&id), header, Vec::new()).await?;
    Ok(ImageInfo { spec, size_bytes, snap_seq: 0, snap_gen: 0, snaps: Vec::new(), parent })
}

/// The id the directory gives image `name`.
pub async fn lookup(client: &Client, pool: &str, name: &str) -> Result<String, RbdError> {
    validate_name(name)?;
    let r = match client
        .op(pool, DIRECTORY, vec![ObjOp::OmapGet { keys: vec![name.as_bytes().to_vec()] }], Vec::new())
        .await
    {
        Ok(r) => r,
        Err(e) if e.is_not_found() && !matches!(e, shoal_client::ClientError::UnknownPool(_)) => {
            return Err(RbdError::NoSuchImage(name.to_string()));
        }
        Err(e) => return Err(e.into()),
    };
    match r.outputs.into_iter().next() {
        Some(OpOutput::Omap(mut found)) => match found.pop().and_then(|(_, v)| v) {
            Some(id) => String::from_utf8(id).map_err(|_| corrupt(name, "a directory id that is not text")),
            None => Err(RbdError::NoSuchImage(name.to_string())),
        },
        other => Err(corrupt(name, &format!("the directory answered {other:?}"))),
    }
}

fn corrupt(name: &str, reason: &str) -> RbdError {
    RbdError::Corrupt { name: name.to_string(), reason: reason.to_string() }
}

/// Reads image `name`'s spec and size.
pub async fn open(client: &Client, pool: &str, name: &str) -> Result<ImageInfo, RbdError> {
    let id = lookup(client, pool, name).await?;
    read_header(client, pool, name, &id).await
}

pub(crate) async fn read_header(client: &Client, pool: &str, name: &str, id: &str) -> Result<ImageInfo, RbdError> {
    // One page holds every key: a spec, a size, two counters, a parent and the snapshots
    // (bounded by [`crate::snap::MAX_SNAPS`]).
    let ops = vec![ObjOp::OmapList { after: None, max: 1000 }];
    let r = match client.op(pool, &header_object(id), ops, Vec::new()).await {
        Ok(r) => r,
        Err(e) if e.is_not_found() => {
            return Err(corrupt(name, "its header is missing (a create or remove was interrupted; `rm` it)"));
        }
        Err(e) => return Err(e.into()),
    };
    let Some(OpOutput::OmapList(found)) = r.outputs.into_iter().next() else {
        return Err(corrupt(name, "the header answered no omap"));
    };
    let le = |v: &[u8], what: &str| {
        v.try_into().map(u64::from_le_bytes).map_err(|_| corrupt(name, &format!("{what} is not 8 bytes")))
    };
    let mut spec = None;
    let mut size = None;
    let (mut snap_seq, mut snap_gen, mut snaps, mut parent) = (0, 0, Vec::new(), None);
    for (k, v) in found {
        match k.as_slice() {
            SPEC_KEY => {
                spec = Some(serde_json::from_slice::<ImageSpec>(&v).map_err(|e| corrupt(name, &format!("spec: {e}")))?)
            }
            SIZE_KEY => size = Some(le(&v, "the size")?),
            SNAP_SEQ_KEY => snap_seq = le(&v, "snap_seq")?,
            SNAP_GEN_KEY => snap_gen = le(&v, "snap_gen")?,
            PARENT_KEY => {
                parent =
                    Some(serde_json::from_slice::<ParentSpec>(&v).map_err(|e| corrupt(name, &format!("parent: {e}")))?)
            }
            k if k.starts_with(SNAP_KEY_PREFIX.as_bytes()) => snaps
                .push(serde_json::from_slice::<SnapInfo>(&v).map_err(|e| corrupt(name, &format!("a snapshot: {e}")))?),
            _ => {}
        }
    }
    // Keys sort by hex id, so snapshots are oldest first already.
    match (spec, size) {
        (Some(spec), Some(size_bytes)) => Ok(ImageInfo { spec, size_bytes, snap_seq, snap_gen, snaps, parent }),
        _ => Err(corrupt(name, "the header lacks its spec or size")),
    }
}

/// Image names in `pool`, in name order (bounded pages of the directory's omap).
pub async fn list(client: &Client, pool: &str) -> Result<Vec<String>, RbdError> {
    const PAGE: u32 = 1000;
    let mut names = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let ops = vec![ObjOp::OmapList { after: after.clone(), max: PAGE }];
        let r = match client.op(pool, DIRECTORY, ops, Vec::new()).await {
            Ok(r) => r,
            Err(e) if e.is_not_found() && !matches!(e, shoal_client::ClientError::UnknownPool(_)) => return Ok(names),
            Err(e) => return Err(e.into()),
        };
        let Some(OpOutput::OmapList(page)) = r.outputs.into_iter().next() else {
            return Err(corrupt(DIRECTORY, "the directory answered no listing"));
        };
        let full = page.len() as u32 == PAGE;
        for (k, _) in page {
            names.push(String::from_utf8_lossy(&k).into_owned());
            after = Some(k);
        }
        if !full {
            return Ok(names);
        }
    }
}

/// Sets image `name`'s size from `from_bytes` to `to_bytes` (compare-and-swap: a concurrent
/// resize makes this one fail with [`RbdError::Conflict`]).
pub async fn set_size(client: &Client, pool: &str, info: &ImageInfo, to_bytes: u64) -> Result<(), RbdError> {
    if to_bytes > MAX_IMAGE_BYTES {
        return Err(RbdError::Invalid(format!("size {to_bytes} is over the limit of {MAX_IMAGE_BYTES} bytes")));
    }
    let ops = vec![
        ObjOp::AssertOmap { key: SIZE_KEY.to_vec(), value: Some(info.size_bytes.to_le_bytes().to_vec()) },
        ObjOp::OmapSet { entries: vec![(SIZE_KEY.to_vec(), to_bytes.to_le_bytes().to_vec())] },
    ];
    match client.op(pool, &header_object(&info.spec.id), ops, Vec::new()).await {
        Ok(_) => Ok(()),
        Err(e) if is_conflict(&e) => Err(RbdError::Conflict(info.spec.name.clone())),
        Err(e) => Err(e.into()),
    }
}

/// Removes the header of image `id` (if present) and then its directory entry `name`.
pub async fn remove(client: &Client, pool: &str, name: &str, id: &str) -> Result<(), RbdError> {
    match client.op(pool, &header_object(id), vec![ObjOp::Remove], Vec::new()).await {
        Ok(_) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(e.into()),
    }
    let ops = vec![
        ObjOp::AssertOmap { key: name.as_bytes().to_vec(), value: Some(id.as_bytes().to_vec()) },
        ObjOp::OmapRemove { keys: vec![name.as_bytes().to_vec()] },
    ];
    match client.op(pool, DIRECTORY, ops, Vec::new()).await {
        Ok(_) => Ok(()),
        // Someone else removed it (or re-created the name) meanwhile.
        Err(e) if is_conflict(&e) || e.is_not_found() => Ok(()),
        Err(e) => Err(e.into()),
    }
}
