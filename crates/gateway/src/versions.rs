//! Versions of keys (decision 0015): each key's version records in its index partition, the key
//! state every change to them serializes on, and the entry that mirrors the newest version for
//! ordinary listings. Changes are planned from one read of the key and applied in one guarded
//! request, like every other index change (decision 0014).

use shoal_client::Client;
use shoal_proto::osd::{ObjOp, OpOutput};

use crate::error::GatewayError;
use crate::index::{self, Completed, Completion};
use crate::layout::{
    self, BucketRecord, ENTRY_PREFIX, GcRecord, IndexEntry, KeyState, LIVE_VALUE, LIVE_XATTR, Slot, TOMBS_XATTR,
    Tombstone, VERSION_PREFIX, Versioning, entry_key, key_state_key, tomb_key, version_key, version_key_prefix,
};
use crate::objects::WriteCondition;
use crate::partition::{Part, RangeReader};

/// Most attempts at one change before giving up (each lost one means another change to the
/// same key got there first).
const ATTEMPTS: usize = 64;

/// A change to a key's versions.
#[derive(Debug, Clone)]
pub(crate) enum Change {
    /// A version or delete marker becomes the newest. A null delete marker (`null`) replaces the
    /// key's null version, which must itself be a delete marker (a null version with data is
    /// removed through its head first).
    Add(IndexEntry),
    /// The version at this slot goes (a null version with data goes through its head instead).
    Remove(Slot),
    /// The key's head (the null version) is now this, as a head-path completion found it.
    NullHead(Option<IndexEntry>),
}

/// What a change did.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// The slot the change recorded.
    pub added: Option<Slot>,
    /// The record the change removed.
    pub removed: Option<IndexEntry>,
}

/// How an applied change ended.
#[derive(Debug)]
pub(crate) enum Applied {
    Done(Outcome),
    /// The change needs the key's null version to have no data, and it has (remove it through
    /// the head first).
    NullHasData,
    /// The write's condition does not hold for the key's current version.
    Refused,
    /// Another completion removed the pending record first (collector completions only).
    PendingGone,
    /// The partition's liveness is not what the change expected.
    Dead,
}

/// A key as one read of its partition found it.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeyView {
    pub entry_raw: Option<Vec<u8>>,
    pub entry: Option<IndexEntry>,
    pub state_raw: Option<Vec<u8>>,
    pub state: Option<KeyState>,
    /// The key's tombstone: its entry and key state went since it last had either.
    pub tomb_raw: Option<Vec<u8>>,
    /// The partition's tombstone generation ([`layout::TOMBS_XATTR`]) at the same instant.
    pub tombs_generation: Option<Vec<u8>>,
}

impl KeyView {
    /// Nothing is recorded for the key: no entry, no key state, no tombstone. The one view of a
    /// key that can come back after it changed (a tombstone's removal brings it back), which is
    /// why a change planned on it also asserts the partition's tombstone generation.
    pub(crate) fn is_nothing(&self) -> bool {
        self.entry_raw.is_none() && self.state_raw.is_none() && self.tomb_raw.is_none()
    }

    /// The guards of a change planned on this view: the key's entry, key state and tombstone are
    /// still what was read, and, for a view of nothing, so is the partition's tombstone
    /// generation. Every other view holds something that is never made twice (an entry's random
    /// tag, a key state's newest slot and change count, a tombstone's random tag) and so never
    /// recurs once it changed: a guard that holds means nothing changed in between, which is what
    /// the completion argument of decision 0014 needs.
    pub(crate) fn guards(&self, key: &str) -> Vec<ObjOp> {
        let mut ops = vec![
            ObjOp::AssertOmap { key: entry_key(key), value: self.entry_raw.clone() },
            ObjOp::AssertOmap { key: key_state_key(key), value: self.state_raw.clone() },
            ObjOp::AssertOmap { key: tomb_key(key), value: self.tomb_raw.clone() },
        ];
        if self.is_nothing() {
            ops.push(ObjOp::AssertXattr { name: TOMBS_XATTR.into(), value: self.tombs_generation.clone() });
        }
        ops
    }

    /// The operations that keep the key's tombstone true after a change planned on this view
    /// that leaves the key with an entry or key state (`left_something`) or with neither: a key
    /// that gets one loses its tombstone; a key left with neither gets a **new** tombstone, even
    /// if it had none before the change or already had a tombstone.
    ///
    /// The new tombstone is what makes a change to "no head" visible to every guard: "no head" is
    /// the one head state that recurs, so a completion that installs it over a view already
    /// showing no entry would otherwise leave the view as it was, and a completion holding that
    /// view from *before* the head was last removed (a writer's view read beside its prepare)
    /// would pass its guard and list a head that is gone (decision 0014, "a completion always
    /// changes the view").
    pub(crate) fn tomb_ops(&self, key: &str, left_something: bool) -> Result<Vec<ObjOp>, GatewayError> {
        Ok(if left_something {
            if self.tomb_raw.is_some() { vec![ObjOp::OmapRemove { keys: vec![tomb_key(key)] }] } else { Vec::new() }
        } else {
            vec![ObjOp::OmapSet { entries: vec![(tomb_key(key), layout::encode(&Tombstone::fresh()?))] }]
        })
    }
}

/// Reads `key`'s entry, key state and tombstone, and its partition's tombstone generation, in
/// one request.
pub(crate) async fn read_view(client: &Client, part: &Part<'_>, key: &str) -> Result<KeyView, GatewayError> {
    let Some(outputs) = part.read(client, view_ops(key)).await? else { return Ok(KeyView::default()) };
    view_from_outputs(key, outputs)
}

/// The reads of `key`'s view, for [`view_from_outputs`]; they may also ride in a write request.
pub(crate) fn view_ops(key: &str) -> Vec<ObjOp> {
    let keys = vec![entry_key(key), key_state_key(key), tomb_key(key)];
    vec![ObjOp::OmapGet { keys }, ObjOp::GetXattr { name: TOMBS_XATTR.into() }]
}

/// `key`'s view from the outputs of [`view_ops`].
pub(crate) fn view_from_outputs(key: &str, outputs: Vec<OpOutput>) -> Result<KeyView, GatewayError> {
    let keys = [entry_key(key), key_state_key(key), tomb_key(key)];
    let mut out = outputs.into_iter();
    let mut found = crate::rados::omap_values(&keys, out.next())?.into_iter();
    let tombs_generation = match out.next() {
        Some(OpOutput::Xattr(v)) => v,
        other => return Err(GatewayError::Internal(format!("xattr get answered {other:?}"))),
    };
    let (entry_raw, state_raw, tomb_raw) = (found.next().flatten(), found.next().flatten(), found.next().flatten());
    let entry = entry_raw.as_deref().map(|b| layout::decode(b, "index entry")).transpose()?;
    let state = state_raw.as_deref().map(|b| layout::decode(b, "key state")).transpose()?;
    Ok(KeyView { entry_raw, entry, state_raw, state, tomb_raw, tombs_generation })
}

/// The version record of `key` at `slot`.
pub(crate) async fn record(
    client: &Client,
    part: &Part<'_>,
    key: &str,
    slot: Slot,
) -> Result<Option<IndexEntry>, GatewayError> {
    match part.omap_get(client, &version_key(key, slot)).await? {
        Some(bytes) => Ok(Some(layout::decode(&bytes, "version record")?)),
        None => Ok(None),
    }
}

/// The newest version of `key` older than `slot`.
async fn next_after(
    client: &Client,
    part: &Part<'_>,
    key: &str,
    slot: Slot,
) -> Result<Option<(Slot, IndexEntry)>, GatewayError> {
    let batch = part.omap_list(client, Some(version_key(key, slot)), 1).await?;
    match batch.into_iter().next() {
        Some((k, v)) => match layout::parse_version_key(&k) {
            Some((other, s)) if other == key => Ok(Some((s, layout::decode(&v, "version record")?))),
            _ => Ok(None),
        },
        None => Ok(None),
    }
}

/// A slot newer than `newest` (and than now's clock reading).
fn new_slot(newest: Option<Slot>) -> Result<Slot, GatewayError> {
    let by_clock = u64::MAX - layout::now_ns();
    let inv_ns = match newest {
        Some(n) => by_clock.min(n.inv_ns.saturating_sub(1)),
        None => by_clock,
    };
    let salt = (layout::random_tag()? & u128::from(u32::MAX)) as u32;
    Ok(Slot { inv_ns, salt })
}

/// Whether `condition` holds for the key's current version `current`.
fn condition_holds(condition: &WriteCondition, current: Option<&IndexEntry>) -> bool {
    match condition {
        WriteCondition::None => true,
        WriteCondition::Absent => current.is_none(),
        WriteCondition::Exists => current.is_some(),
        WriteCondition::ETag(etag) => current.is_some_and(|c| c.etag == *etag),
        WriteCondition::Tag(tag) => current.is_some_and(|c| c.tag == *tag),
        WriteCondition::NotETag(etag) => current.is_none_or(|c| c.etag != *etag),
    }
}

/// A planned change: the operations (guards on what was read first), what GC gets, and what the
/// change did.
pub(crate) struct Plan {
    pub ops: Vec<ObjOp>,
    pub gc: Vec<GcRecord>,
    pub outcome: Outcome,
}

/// What GC deletes once version record `r` is gone (its head is a version object).
fn version_garbage(r: &IndexEntry) -> Option<GcRecord> {
    (!r.delete_marker && !r.null).then(|| GcRecord::Version { tag: r.tag, then: r.garbage().map(Box::new) })
}

/// Plans `change` on the key `view` shows. `Err(Applied)` when the change cannot be made as
/// asked (the null version has data, a condition fails).
pub(crate) async fn plan(
    client: &Client,
    part: &Part<'_>,
    key: &str,
    view: &KeyView,
    change: Change,
    condition: &WriteCondition,
) -> Result<Result<Plan, Applied>, GatewayError> {
    let mut ops = view.guards(key);
    let mut gc = Vec::new();
    let mut outcome = Outcome::default();
    let mut newest = view.state.map(|s| s.newest);
    let mut null = view.state.and_then(|s| s.null);
    let mut current = view.entry.clone();
    // Records set (slot → record) and removed in this change.
    let mut set: Vec<(Slot, IndexEntry)> = Vec::new();
    let mut removed: Vec<Slot> = Vec::new();
    if !condition_holds(condition, view.entry.as_ref()) {
        return Ok(Err(Applied::Refused));
    }
    // An entry without a version record (written before versioning, or since the key's last
    // version went) becomes the null version's record before anything is added beside it.
    let legacy = match (&view.state, &view.entry) {
        (None, Some(e)) if e.version.is_none() => Some(e.clone()),
        _ => None,
    };
    let adopt = |set: &mut Vec<(Slot, IndexEntry)>| -> Option<(Slot, IndexEntry)> {
        let mut e = legacy.clone()?;
        let slot = Slot::of_legacy(e.mtime_ns);
        e.version = Some(slot);
        e.null = true;
        set.push((slot, e.clone()));
        Some((slot, e))
    };
    match change {
        Change::Add(mut e) => {
            if let Some((slot, _)) = adopt(&mut set) {
                newest = Some(slot);
                null = Some(slot);
            }
            if e.null
                && let Some(ns) = null
            {
                let old = match set.iter().find(|(s, _)| *s == ns) {
                    Some((_, r)) => Some(r.clone()),
                    None => record(client, part, key, ns).await?,
                };
                if old.as_ref().is_some_and(|o| !o.delete_marker) {
                    return Ok(Err(Applied::NullHasData));
                }
                set.retain(|(s, _)| *s != ns);
                removed.push(ns);
            }
            let slot = new_slot(newest)?;
            e.version = Some(slot);
            newest = Some(slot);
            if e.null {
                null = Some(slot);
            }
            current = (!e.delete_marker).then(|| e.clone());
            set.push((slot, e));
            outcome.added = Some(slot);
        }
        Change::Remove(slot) => {
            let Some(r) = record(client, part, key, slot).await? else {
                // Removing a version that is not there is done (S3's deletes are idempotent).
                return Ok(Ok(Plan { ops, gc, outcome }));
            };
            if r.null && !r.delete_marker {
                return Ok(Err(Applied::NullHasData));
            }
            removed.push(slot);
            gc.extend(version_garbage(&r));
            if null == Some(slot) {
                null = None;
            }
            if newest == Some(slot) {
                let next = next_after(client, part, key, slot).await?;
                newest = next.as_ref().map(|(s, _)| *s);
                current = next.and_then(|(_, e)| (!e.delete_marker).then_some(e));
            }
            outcome.removed = Some(r);
        }
        Change::NullHead(head) => {
            let old = match null {
                Some(ns) => record(client, part, key, ns).await?.map(|r| (ns, r)),
                None => None,
            };
            match (head, old) {
                (Some(h), Some((_, o))) if !o.delete_marker && o.tag == h.tag => {}
                (Some(mut h), old) => {
                    if let Some((ns, o)) = old {
                        removed.push(ns);
                        // The head was overwritten by this one: only the old one's tails remain.
                        gc.extend(o.garbage().filter(|_| !o.delete_marker));
                    }
                    let slot = new_slot(newest)?;
                    h.version = Some(slot);
                    h.null = true;
                    newest = Some(slot);
                    null = Some(slot);
                    current = Some(h.clone());
                    set.push((slot, h));
                    outcome.added = Some(slot);
                }
                (None, Some((ns, o))) if !o.delete_marker => {
                    removed.push(ns);
                    gc.extend(o.garbage());
                    null = None;
                    if newest == Some(ns) {
                        let next = next_after(client, part, key, ns).await?;
                        newest = next.as_ref().map(|(s, _)| *s);
                        current = next.and_then(|(_, e)| (!e.delete_marker).then_some(e));
                    }
                    outcome.removed = Some(o);
                }
                (None, _) => {}
            }
        }
    }
    if !removed.is_empty() {
        ops.push(ObjOp::OmapRemove { keys: removed.iter().map(|s| version_key(key, *s)).collect() });
    }
    if !set.is_empty() {
        ops.push(ObjOp::OmapSet {
            entries: set.iter().map(|(s, r)| (version_key(key, *s), layout::encode(r))).collect(),
        });
    }
    match newest {
        Some(n) => {
            let state = KeyState { newest: n, null, seq: view.state.map_or(0, |s| s.seq.wrapping_add(1)) };
            ops.push(ObjOp::OmapSet { entries: vec![(key_state_key(key), layout::encode(&state))] });
        }
        None if view.state.is_some() => ops.push(ObjOp::OmapRemove { keys: vec![key_state_key(key)] }),
        None => {}
    }
    match &current {
        Some(c) => {
            let bytes = layout::encode(c);
            if view.entry_raw.as_ref() != Some(&bytes) {
                ops.push(ObjOp::OmapSet { entries: vec![(entry_key(key), bytes)] });
            }
        }
        None if view.entry_raw.is_some() => ops.push(ObjOp::OmapRemove { keys: vec![entry_key(key)] }),
        None => {}
    }
    ops.extend(view.tomb_ops(key, current.is_some() || newest.is_some())?);
    Ok(Ok(Plan { ops, gc, outcome }))
}

/// Applies `change` to `key`'s versions in `how`'s partition, removing pending record `tag` (if
/// any) in the same request, with `extra` operations. Repeats on conflicts with other changes.
pub(crate) async fn apply(
    client: &Client,
    how: &Completion<'_>,
    key: &str,
    tag: Option<u128>,
    change: Change,
    condition: &WriteCondition,
    extra: Vec<ObjOp>,
) -> Result<Applied, GatewayError> {
    for _ in 0..ATTEMPTS {
        let view = read_view(client, how.part, key).await?;
        let plan = match plan(client, how.part, key, &view, change.clone(), condition).await? {
            Ok(p) => p,
            Err(refusal) => return Ok(refusal),
        };
        let live_value = how.live.then(|| LIVE_VALUE.to_vec());
        let mut ops = vec![ObjOp::AssertXattr { name: LIVE_XATTR.into(), value: live_value }];
        if let (Some(p), Some(t)) = (&how.pending, tag) {
            ops.push(ObjOp::AssertOmap { key: layout::pending_key(t), value: Some(p.clone()) });
        }
        ops.extend(plan.ops);
        if let Some(t) = tag {
            ops.push(ObjOp::OmapRemove { keys: vec![layout::pending_key(t)] });
        }
        if !plan.gc.is_empty() {
            ops.push(index::gc_set(layout::now_ns() + how.gc_delay_ns, plan.gc));
        }
        ops.extend(extra.iter().cloned());
        match how.part.write(client, ops).await {
            Ok(()) => return Ok(Applied::Done(plan.outcome)),
            Err(e) if e.is_conflict() => match index::conflict_reason(client, how, tag).await? {
                Some(Completed::Dead) => return Ok(Applied::Dead),
                Some(_) => return Ok(Applied::PendingGone),
                None => {}
            },
            Err(e) => return Err(e),
        }
    }
    Err(GatewayError::Internal(format!("the versions of {key:?} kept changing over {ATTEMPTS} attempts")))
}

/// The rest of a versioned write whose gateway died (the collector, after the lease): its
/// version object decides. If it was written (and the bucket is live), it is recorded as the
/// newest version with `committed` operations; if not, the pending record goes, `garbage` to GC,
/// with `abandoned` operations.
pub(crate) async fn finish(
    client: &Client,
    how: &Completion<'_>,
    key: &str,
    tag: u128,
    committed: Vec<ObjOp>,
    abandoned: Vec<ObjOp>,
    garbage: GcRecord,
) -> Result<Completed, GatewayError> {
    let name = layout::version_object(how.bucket_id, tag);
    if how.live
        && let Some(meta) = crate::objects::head_meta_at(client, &name, key).await?
    {
        let entry = IndexEntry { null: false, ..IndexEntry::of(&meta) };
        return Ok(
            match apply(client, how, key, Some(tag), Change::Add(entry), &WriteCondition::None, committed).await? {
                Applied::Done(_) => Completed::Head(None),
                Applied::PendingGone => Completed::PendingGone,
                Applied::Dead => Completed::Dead,
                other => return Err(GatewayError::Internal(format!("recording a version answered {other:?}"))),
            },
        );
    }
    let live_value = how.live.then(|| LIVE_VALUE.to_vec());
    let mut ops = vec![ObjOp::AssertXattr { name: LIVE_XATTR.into(), value: live_value }];
    if let Some(p) = &how.pending {
        ops.push(ObjOp::AssertOmap { key: layout::pending_key(tag), value: Some(p.clone()) });
    }
    ops.push(ObjOp::OmapRemove { keys: vec![layout::pending_key(tag)] });
    ops.push(index::gc_set(layout::now_ns() + how.gc_delay_ns, vec![garbage]));
    ops.extend(abandoned);
    match how.part.write(client, ops).await {
        Ok(()) => Ok(Completed::Head(None)),
        Err(e) if e.is_conflict() => {
            Ok(index::conflict_reason(client, how, Some(tag)).await?.unwrap_or(Completed::PendingGone))
        }
        Err(e) => Err(e),
    }
}

/// What a delete did.
#[derive(Debug, Default)]
pub struct Deleted {
    /// The version removed or the delete marker made (`None` in a bucket never versioned).
    pub version_id: Option<String>,
    /// A delete marker was made, or the version removed was one.
    pub delete_marker: bool,
    /// The delete's condition did not hold: nothing was changed.
    pub refused: bool,
}

/// Deletes `key` as S3 does in `bucket`'s versioning state: without a version id, removes the
/// object (never versioned), adds a delete marker (enabled), or makes the null version a delete
/// marker (suspended), if `condition` holds for the current version (deletes take
/// [`WriteCondition::None`] or [`WriteCondition::Tag`]); with one, removes that version.
/// Removing a version that is not there succeeds. On return the change is in the index (the
/// data goes to GC).
#[allow(clippy::too_many_arguments)]
pub async fn delete(
    client: &Client,
    bucket: &BucketRecord,
    key: &str,
    version_id: Option<&VersionId>,
    condition: &WriteCondition,
    owner: (&str, &str),
    lease: std::time::Duration,
    gc_delay_ns: u64,
) -> Result<Deleted, GatewayError> {
    /// A suspended delete and a null version's removal may race writes of the null version;
    /// each lost race is retried this many times.
    const NULL_ATTEMPTS: usize = 8;
    let part = index::partition(bucket, key);
    let how = Completion { bucket_id: bucket.id, part: &part, live: true, pending: None, gc_delay_ns };
    let marker = |null: bool| -> Result<IndexEntry, GatewayError> {
        Ok(IndexEntry {
            size_bytes: 0,
            etag: String::new(),
            mtime_ns: layout::now_ns(),
            tag: layout::random_tag()?,
            tails: 0,
            owner_id: owner.0.to_string(),
            owner_display: owner.1.to_string(),
            multipart: false,
            version: None,
            null,
            delete_marker: true,
        })
    };
    let dead = || GatewayError::NoSuchBucket(bucket.name.clone());
    let unguarded = WriteCondition::None;
    let head_delete = |c| crate::objects::delete(client, bucket, key, c, lease, gc_delay_ns);
    let refused = Deleted { refused: true, ..Deleted::default() };
    // The condition the index change is guarded by: a versioned delete's own.
    let mut guard = if version_id.is_none() { condition } else { &unguarded };
    for _ in 0..NULL_ATTEMPTS {
        let change = match version_id {
            None => match bucket.versioning {
                Versioning::Unversioned => {
                    let removed = head_delete(condition).await?;
                    return Ok(if removed || *condition == WriteCondition::None {
                        Deleted::default()
                    } else {
                        refused
                    });
                }
                Versioning::Enabled => Change::Add(marker(false)?),
                Versioning::Suspended => {
                    // Removing the guarded object as the null version satisfied the guard: the
                    // marker then goes on whatever is current.
                    if head_delete(guard).await? {
                        guard = &unguarded;
                    }
                    Change::Add(marker(true)?)
                }
            },
            Some(VersionId::Null) => match read_view(client, &part, key).await?.state.and_then(|s| s.null) {
                Some(ns) => Change::Remove(ns),
                None => {
                    // No null record: the null version, if any, is a head without records.
                    head_delete(&unguarded).await?;
                    return Ok(Deleted { version_id: Some("null".into()), ..Deleted::default() });
                }
            },
            Some(VersionId::Slot(s)) => Change::Remove(*s),
        };
        match apply(client, &how, key, None, change, guard, Vec::new()).await? {
            Applied::Done(o) => {
                let version_id = match (version_id, o.added) {
                    (Some(VersionId::Slot(s)), _) => s.text(),
                    (None, Some(slot)) if bucket.versioning == Versioning::Enabled => slot.text(),
                    _ => "null".to_string(),
                };
                let delete_marker = o.added.is_some() || o.removed.is_some_and(|r| r.delete_marker);
                return Ok(Deleted { version_id: Some(version_id), delete_marker, refused: false });
            }
            Applied::NullHasData => {
                // The null version has data: it goes through its head (and a suspended delete
                // then tries its marker again).
                head_delete(&unguarded).await?;
                if version_id.is_some() {
                    return Ok(Deleted { version_id: Some("null".into()), ..Deleted::default() });
                }
            }
            Applied::Refused => return Ok(refused),
            Applied::Dead => return Err(dead()),
            other => return Err(GatewayError::Internal(format!("a delete answered {other:?}"))),
        }
    }
    Err(GatewayError::Conflict(format!("the null version of {key:?} kept changing under a delete")))
}

/// Where a request's object version is.
#[derive(Debug)]
pub(crate) enum Found {
    /// Its head object, and the version id to report (`None` in a bucket never versioned).
    Object { head: String, version_id: Option<String> },
    /// The version asked for (or the newest, when none was named) is a delete marker.
    DeleteMarker { version_id: String },
    /// No such key (no version named) or no such version.
    Missing,
}

/// A version id as a client sent it: "null" or a slot.
pub enum VersionId {
    Null,
    Slot(Slot),
}

/// Parses a client's version id; `None` if it names no version this gateway could have made.
pub(crate) fn parse_version_id(text: &str) -> Option<VersionId> {
    if text == "null" { Some(VersionId::Null) } else { Slot::parse(text).map(VersionId::Slot) }
}

/// Finds `key`'s version `version_id` (the current one when `None`). Costs no request in a
/// bucket never versioned, one or two otherwise.
pub(crate) async fn find(
    client: &Client,
    bucket: &BucketRecord,
    key: &str,
    version_id: Option<&VersionId>,
) -> Result<Found, GatewayError> {
    let head = || layout::head_object(bucket.id, key);
    if bucket.versioning == Versioning::Unversioned && version_id.is_none() {
        return Ok(Found::Object { head: head(), version_id: None });
    }
    let part = index::partition(bucket, key);
    match version_id {
        None => {
            let view = read_view(client, &part, key).await?;
            Ok(match (view.entry, view.state) {
                (Some(e), _) => Found::Object { head: e.head_name(bucket.id, key), version_id: Some(e.version_id()) },
                (None, Some(s)) => {
                    let version_id = if s.null == Some(s.newest) { "null".to_string() } else { s.newest.text() };
                    Found::DeleteMarker { version_id }
                }
                (None, None) => Found::Missing,
            })
        }
        Some(VersionId::Null) => {
            let view = read_view(client, &part, key).await?;
            let Some(state) = view.state else {
                // No version records: the null version, if any, is the head.
                return Ok(Found::Object { head: head(), version_id: Some("null".into()) });
            };
            let Some(ns) = state.null else { return Ok(Found::Missing) };
            Ok(match record(client, &part, key, ns).await? {
                Some(r) if r.delete_marker => Found::DeleteMarker { version_id: "null".into() },
                Some(_) => Found::Object { head: head(), version_id: Some("null".into()) },
                None => Found::Missing,
            })
        }
        Some(VersionId::Slot(slot)) => Ok(match record(client, &part, key, *slot).await? {
            Some(r) if r.delete_marker => Found::DeleteMarker { version_id: r.version_id() },
            Some(r) => Found::Object { head: r.head_name(bucket.id, key), version_id: Some(r.version_id()) },
            None => Found::Missing,
        }),
    }
}

/// One listed version.
#[derive(Debug)]
pub struct ListedVersion {
    pub key: String,
    pub entry: IndexEntry,
    pub is_latest: bool,
}

/// One page of ListObjectVersions.
#[derive(Debug, Default)]
pub struct VersionPage {
    pub versions: Vec<ListedVersion>,
    pub common_prefixes: Vec<String>,
    pub truncated: bool,
    /// Where the next page starts: after this key and (if any) this version id.
    pub next_key: Option<String>,
    pub next_version_id: Option<String>,
}

/// Omap entries of one prefix byte across a bucket's partitions, read in batches.
struct Cursor<'a> {
    reader: RangeReader<'a>,
    /// The last key read into `buf` (or skipped to).
    after: Vec<u8>,
    buf: std::collections::VecDeque<(Vec<u8>, Vec<u8>)>,
    exhausted: bool,
}

impl<'a> Cursor<'a> {
    const BATCH: u32 = 500;

    fn new(bucket: &'a BucketRecord, prefix: u8, after: Vec<u8>) -> Cursor<'a> {
        Cursor {
            reader: RangeReader::new(bucket, prefix, after.clone()),
            after,
            buf: Default::default(),
            exhausted: false,
        }
    }

    async fn peek(&mut self, client: &Client) -> Result<Option<&(Vec<u8>, Vec<u8>)>, GatewayError> {
        if self.buf.is_empty() && !self.exhausted {
            match self.reader.next_batch(client, Self::BATCH).await? {
                Some(batch) => {
                    if let Some((k, _)) = batch.last() {
                        self.after.clone_from(k);
                    }
                    self.buf.extend(batch);
                }
                None => self.exhausted = true,
            }
        }
        Ok(self.buf.front())
    }

    fn pop(&mut self) -> Option<(Vec<u8>, Vec<u8>)> {
        self.buf.pop_front()
    }

    /// Skips every entry up to `to` (inclusive).
    fn skip_past(&mut self, to: Vec<u8>) {
        if to > self.after {
            self.buf.clear();
            self.reader.set_cursor(to.clone());
            self.after = to;
            self.exhausted = false;
        } else {
            self.buf.retain(|(k, _)| *k > to);
        }
    }
}

/// Lists up to `max` versions and common prefixes of `bucket` in key order (each key's versions
/// newest first), of keys starting with `prefix`, after key `key_marker` (its versions after
/// `version_marker` when one is named), rolling keys up to `delimiter`.
pub async fn list(
    client: &Client,
    bucket: &BucketRecord,
    prefix: &str,
    delimiter: Option<&str>,
    key_marker: Option<&str>,
    version_marker: Option<&str>,
    max: usize,
) -> Result<VersionPage, GatewayError> {
    let mut page = VersionPage::default();
    if max == 0 {
        return Ok(page);
    }
    let delimiter = delimiter.filter(|d| !d.is_empty());
    let marker = key_marker.filter(|m| !m.is_empty() && *m >= prefix);
    // The exclusive cursors: entries (for the null versions of keys without records) and
    // version records.
    let (entries_after, versions_after, resumed_key) = match marker {
        Some(k) => {
            let mut all_of_k = version_key_prefix(k);
            all_of_k.extend_from_slice(&[0xFF; Slot::BYTES]);
            let versions_after = match version_marker.and_then(parse_version_id) {
                Some(VersionId::Slot(s)) => version_key(k, s),
                Some(VersionId::Null) => {
                    let part = index::partition(bucket, k);
                    match read_view(client, &part, k).await?.state.and_then(|s| s.null) {
                        Some(ns) => version_key(k, ns),
                        None => all_of_k,
                    }
                }
                None => all_of_k,
            };
            (entry_key(k), versions_after, version_marker.map(|_| k.to_string()))
        }
        None => {
            let mut v = vec![VERSION_PREFIX];
            v.extend_from_slice(prefix.as_bytes());
            (index::just_below(&entry_key(prefix)), v, None)
        }
    };
    // The key of the last version listed (versions of a key after its first are not latest).
    let mut last_listed: Option<String> = resumed_key;
    let mut entries = Cursor::new(bucket, ENTRY_PREFIX, entries_after);
    let mut versions = Cursor::new(bucket, VERSION_PREFIX, versions_after);
    {
        loop {
            // The smaller key of the two cursors' next items.
            let e_key = match entries.peek(client).await? {
                Some((k, _)) => Some(entry_key_text(k)?),
                None => None,
            };
            let v_key = match versions.peek(client).await? {
                Some((k, _)) => Some(
                    layout::parse_version_key(k)
                        .map(|(key, _)| key.to_string())
                        .ok_or_else(|| GatewayError::Corrupt("a version record's key does not parse".into()))?,
                ),
                None => None,
            };
            let (key, from_entries) = match (e_key, v_key) {
                (None, None) => break,
                (Some(e), Some(v)) => {
                    if e <= v {
                        (e, true)
                    } else {
                        (v, false)
                    }
                }
                (Some(e), None) => (e, true),
                (None, Some(v)) => (v, false),
            };
            if !key.starts_with(prefix) {
                if key.as_str() > prefix {
                    return Ok(page);
                }
                // Below the prefix (the entries cursor starts just below it): skip.
                if from_entries {
                    entries.pop();
                } else {
                    versions.pop();
                }
                continue;
            }
            if let Some(d) = delimiter
                && let Some(pos) = key[prefix.len()..].find(d)
            {
                if page.versions.len() + page.common_prefixes.len() >= max {
                    page.truncated = true;
                    return Ok(page);
                }
                let cp = key[..prefix.len() + pos + d.len()].to_string();
                let mut e_to = entry_key(&cp);
                e_to.push(0xFF);
                let mut v_to = vec![VERSION_PREFIX];
                v_to.extend_from_slice(cp.as_bytes());
                v_to.push(0xFF);
                entries.skip_past(e_to);
                versions.skip_past(v_to);
                page.next_key = Some(cp.clone());
                page.next_version_id = None;
                page.common_prefixes.push(cp);
                continue;
            }
            let entry = if from_entries {
                let Some((_, v)) = entries.pop() else { break };
                let e: IndexEntry = layout::decode(&v, "index entry")?;
                if e.version.is_some() {
                    // The newest version's mirror: listed from its record.
                    continue;
                }
                e
            } else {
                let Some((_, v)) = versions.pop() else { break };
                layout::decode(&v, "version record")?
            };
            if page.versions.len() + page.common_prefixes.len() >= max {
                page.truncated = true;
                return Ok(page);
            }
            let is_latest = last_listed.as_deref() != Some(key.as_str());
            last_listed = Some(key.clone());
            page.next_key = Some(key.clone());
            page.next_version_id = Some(entry.version_id());
            page.versions.push(ListedVersion { key, entry, is_latest });
        }
    }
    Ok(page)
}

fn entry_key_text(k: &[u8]) -> Result<String, GatewayError> {
    std::str::from_utf8(&k[1..])
        .map(str::to_string)
        .map_err(|_| GatewayError::Corrupt(format!("index key of {} bytes is not UTF-8", k.len() - 1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(tag: u128) -> IndexEntry {
        IndexEntry {
            size_bytes: 1,
            etag: format!("e{tag}"),
            mtime_ns: 5,
            tag,
            tails: 0,
            owner_id: "o".into(),
            owner_display: "O".into(),
            multipart: false,
            version: None,
            null: false,
            delete_marker: false,
        }
    }

    #[test]
    fn conditions_judge_the_current_version() {
        let e = entry(1);
        assert!(condition_holds(&WriteCondition::None, None));
        assert!(condition_holds(&WriteCondition::Absent, None));
        assert!(!condition_holds(&WriteCondition::Absent, Some(&e)));
        assert!(condition_holds(&WriteCondition::Exists, Some(&e)));
        assert!(condition_holds(&WriteCondition::ETag("e1".into()), Some(&e)));
        assert!(!condition_holds(&WriteCondition::ETag("e2".into()), Some(&e)));
        assert!(condition_holds(&WriteCondition::NotETag("e2".into()), Some(&e)));
        assert!(!condition_holds(&WriteCondition::NotETag("e1".into()), Some(&e)));
        assert!(condition_holds(&WriteCondition::NotETag("e1".into()), None));
    }

    #[test]
    fn new_slots_are_newer_than_the_newest_whatever_the_clock() {
        let far_future = Slot { inv_ns: 10, salt: 0 };
        let s = new_slot(Some(far_future)).unwrap();
        assert!(s < far_future);
        let old = Slot::of_legacy(1);
        assert!(new_slot(Some(old)).unwrap() < old);
    }

    #[test]
    fn version_ids_parse() {
        assert!(matches!(parse_version_id("null"), Some(VersionId::Null)));
        let s = Slot { inv_ns: 42, salt: 1 };
        assert!(matches!(parse_version_id(&s.text()), Some(VersionId::Slot(x)) if x == s));
        assert!(parse_version_id("nope").is_none());
        let mut e = entry(3);
        e.version = Some(s);
        assert_eq!(e.version_id(), s.text());
        e.null = true;
        assert_eq!(e.version_id(), "null");
        assert_eq!(e.head_name(1, "k"), layout::head_object(1, "k"));
        e.null = false;
        assert_eq!(e.head_name(1, "k"), layout::version_object(1, 3));
    }

    /// One key of one partition as the OSD holds it: its omap (entry, key state, tombstone) and
    /// the partition's tombstone generation, with the operations a change sends applied to it.
    #[derive(Clone, Default, PartialEq, Debug)]
    struct ModelKey {
        omap: std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
        generation: Option<Vec<u8>>,
    }

    impl ModelKey {
        fn view(&self, key: &str) -> KeyView {
            let entry_raw = self.omap.get(&entry_key(key)).cloned();
            KeyView {
                entry: entry_raw.as_deref().map(|b| layout::decode(b, "entry").unwrap()),
                entry_raw,
                state_raw: self.omap.get(&key_state_key(key)).cloned(),
                state: None,
                tomb_raw: self.omap.get(&tomb_key(key)).cloned(),
                tombs_generation: self.generation.clone(),
            }
        }

        /// Applies `ops` all or nothing, as the OSD does; false when a guard failed.
        fn apply(&mut self, ops: &[ObjOp]) -> bool {
            let mut next = self.clone();
            for op in ops {
                match op {
                    ObjOp::AssertOmap { key, value } if next.omap.get(key) != value.as_ref() => return false,
                    ObjOp::AssertXattr { value, .. } if next.generation != *value => return false,
                    ObjOp::AssertOmap { .. } | ObjOp::AssertXattr { .. } => {}
                    ObjOp::OmapSet { entries } => next.omap.extend(entries.iter().cloned()),
                    ObjOp::OmapRemove { keys } => keys.iter().for_each(|k| drop(next.omap.remove(k))),
                    ObjOp::SetXattr { value, .. } => next.generation = Some(value.clone()),
                    other => panic!("the model does not apply {other:?}"),
                }
            }
            *self = next;
            true
        }
    }

    #[test]
    fn a_guard_holds_only_if_nothing_changed_since_its_view_under_any_sequence_of_changes() {
        // Writes and deletes of one key, completed, and collector passes that remove its
        // tombstone, in random orders. Every view ever taken is kept; after each step, a guard
        // built from a view must hold exactly when the key has been unchanged since that view
        // (no change back to what it was: that is what let a stale completion through).
        let key = "k";
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for _ in 0..200 {
            let mut k = ModelKey { generation: Some(layout::fresh_tombs_generation().unwrap()), ..Default::default() };
            // Every view taken, with the step it was taken at (before that step's change).
            let mut views: Vec<(KeyView, usize)> = Vec::new();
            // The last steps that changed the key's records, and that changed anything.
            let (mut last_key_change, mut last_change) = (0usize, 0usize);
            for step in 1..40 {
                let view = k.view(key);
                views.push((view.clone(), step));
                let mut ops = view.guards(key);
                match next() % 3 {
                    0 => {
                        let e = entry(u128::from(next() as u32));
                        ops.push(ObjOp::OmapSet { entries: vec![(entry_key(key), layout::encode(&e))] });
                        ops.extend(view.tomb_ops(key, true).unwrap());
                    }
                    1 => {
                        if view.entry_raw.is_some() {
                            ops.push(ObjOp::OmapRemove { keys: vec![entry_key(key)] });
                        }
                        ops.extend(view.tomb_ops(key, false).unwrap());
                    }
                    _ => {
                        // The collector: every tombstone goes, the generation is renewed.
                        ops = vec![
                            ObjOp::OmapRemove { keys: vec![tomb_key(key)] },
                            ObjOp::SetXattr {
                                name: TOMBS_XATTR.into(),
                                value: layout::fresh_tombs_generation().unwrap(),
                            },
                        ];
                    }
                }
                let before = k.clone();
                let completion = !matches!(ops.last(), Some(ObjOp::SetXattr { .. }));
                assert!(k.apply(&ops), "a change planned on the current view applies");
                // Every completion changes what its guards check, even one that leaves the key
                // as absent as it found it: otherwise a view taken before the head it reflects
                // (a writer's, read beside its prepare) would still pass after it.
                assert!(
                    !completion || k.omap != before.omap,
                    "a completion at step {step} left the key's records as they were"
                );
                if k.omap != before.omap {
                    last_key_change = step;
                }
                if k != before {
                    last_change = step;
                }
                for (v, at) in &views {
                    let holds = k.clone().apply(&v.guards(key));
                    // Safety: a guard that holds means the key's records never changed since.
                    assert!(!holds || *at > last_key_change, "a stale guard from step {at} held at step {step}");
                    // And no needless refusals: a view of something holds while the records are
                    // unchanged; a view of nothing while the generation is unchanged too.
                    let unchanged = if v.is_nothing() { *at > last_change } else { *at > last_key_change };
                    assert!(holds || !unchanged, "a current guard from step {at} was refused at step {step}");
                }
            }
        }
    }
}
