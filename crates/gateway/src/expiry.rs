//! The lifecycle's background pass, which every gateway runs: buckets with lifecycle rules are
//! registered in one object of the meta pool, and a gateway takes a bucket's pass by swapping
//! its claim there (so that, of many gateways, one walks each bucket per period). The pass
//! walks the bucket's index partitions a page at a time and expires current versions (removed,
//! or hidden under a delete marker in a versioned bucket), noncurrent versions, lone delete
//! markers and old multipart uploads, as `lifecycle.rs` judges them. Every change is guarded
//! by what was judged (a current version replaced in between is left alone), and versions
//! under object lock are never removed.

use std::time::Duration;

use shoal_client::Client;
use shoal_proto::osd::ObjOp;

use crate::error::GatewayError;
use crate::layout::{
    self, BucketRecord, ENTRY_PREFIX, IndexEntry, LIFECYCLE_OBJECT, LifecycleClaim, META_POOL, ObjectMeta,
    UPLOAD_PREFIX, VERSION_PREFIX,
};
use crate::lifecycle::{self, VersionAction, VersionJudge};
use crate::objects::{self, WriteCondition};
use crate::partition::RangeReader;
use crate::versions::{self, VersionId};
use crate::{meta, multipart, rados};

/// Omap entries read per request while walking a partition.
const PAGE: u32 = 1000;
/// Registered buckets read per request, and at most per pass.
const BUCKETS_PER_PAGE: u32 = 256;
const BUCKETS_PER_PASS: usize = 100_000;

/// How the lifecycle runs.
#[derive(Debug, Clone)]
pub struct LifecycleSettings {
    /// The length of a lifecycle day: a real day, or seconds in tests (S3's `x-amz-expiration`
    /// header keeps counting real days).
    pub day: Duration,
    /// How long removed data stays readable before it is collected.
    pub gc_delay: Duration,
    /// How often a bucket's rules are applied.
    pub period: Duration,
    /// The collectors' lease (the removals the rules make are writes under it).
    pub lease: Duration,
}

impl LifecycleSettings {
    /// Applies each bucket's rules about 24 times per lifecycle day (hourly for real days).
    pub fn new(day: Duration, gc_delay: Duration, lease: Duration) -> LifecycleSettings {
        assert!(!day.is_zero(), "a lifecycle day has a length");
        let period = (day / 24).clamp(Duration::from_secs(1), Duration::from_secs(3600));
        LifecycleSettings { day, gc_delay, period, lease }
    }

    fn day_ns(&self) -> u64 {
        u64::try_from(self.day.as_nanos()).unwrap_or(u64::MAX).max(1)
    }

    fn gc_delay_ns(&self) -> u64 {
        u64::try_from(self.gc_delay.as_nanos()).unwrap_or(u64::MAX)
    }
}

/// What passes did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LifecycleStats {
    /// Buckets whose rules were applied.
    pub buckets: u64,
    /// Current versions removed (or hidden under a delete marker).
    pub expired: u64,
    pub noncurrent_removed: u64,
    pub markers_removed: u64,
    pub uploads_aborted: u64,
    /// Versions due but kept by object lock.
    pub locked: u64,
    pub errors: u64,
}

/// Registers `bucket` for the background pass (kept if already there). Runs before its rules
/// are stored, so that a bucket with rules is always registered.
pub async fn register(client: &Client, bucket: &BucketRecord) -> Result<(), GatewayError> {
    let key = bucket.name.as_bytes().to_vec();
    let old = rados::omap_get(client, META_POOL, LIFECYCLE_OBJECT, &key).await?;
    if let Some(raw) = &old
        && layout::decode::<LifecycleClaim>(raw, "lifecycle claim").is_ok_and(|c| c.bucket_id == bucket.id)
    {
        return Ok(());
    }
    let claim = LifecycleClaim { bucket_id: bucket.id, next_ns: 0 };
    let ops = vec![
        ObjOp::AssertOmap { key: key.clone(), value: old },
        ObjOp::OmapSet { entries: vec![(key, layout::encode(&claim))] },
    ];
    match rados::write_ops(client, META_POOL, LIFECYCLE_OBJECT, ops).await {
        // Another registration got there first: it registered the same bucket or a newer one.
        Err(e) if e.is_conflict() => Ok(()),
        other => other,
    }
}

/// Runs passes forever, one every `settings.period`.
pub async fn run(client: Client, settings: LifecycleSettings) {
    loop {
        tokio::time::sleep(settings.period).await;
        // Expiring objects frees space, so a full cluster takes its requests (decision 0045).
        match shoal_client::freeing_space(pass(&client, &settings)).await {
            Ok(s) if s == LifecycleStats { buckets: s.buckets, ..LifecycleStats::default() } => {}
            Ok(s) => tracing::info!(?s, "lifecycle pass"),
            Err(e) => tracing::warn!(error = %e, "lifecycle pass failed"),
        }
    }
}

/// One pass: every registered bucket whose turn it is, if this gateway wins its claim.
pub async fn pass(client: &Client, settings: &LifecycleSettings) -> Result<LifecycleStats, GatewayError> {
    let mut stats = LifecycleStats::default();
    let mut after = None;
    let mut seen = 0;
    while seen < BUCKETS_PER_PASS {
        let page = rados::omap_list(client, META_POOL, LIFECYCLE_OBJECT, after.take(), BUCKETS_PER_PAGE).await?;
        let full = page.len() == BUCKETS_PER_PAGE as usize;
        seen += page.len();
        for (key, raw) in &page {
            let name = String::from_utf8_lossy(key).into_owned();
            if let Err(e) = visit(client, settings, &name, raw, &mut stats).await {
                stats.errors += 1;
                tracing::warn!(bucket = %name, error = %e, "lifecycle: bucket skipped this pass");
            }
        }
        match page.last() {
            Some((k, _)) if full => after = Some(k.clone()),
            _ => break,
        }
    }
    Ok(stats)
}

/// Claims registered bucket `name` (claim `raw`) if it is due, and applies its rules.
async fn visit(
    client: &Client,
    settings: &LifecycleSettings,
    name: &str,
    raw: &[u8],
    stats: &mut LifecycleStats,
) -> Result<(), GatewayError> {
    let claim: LifecycleClaim = layout::decode(raw, "lifecycle claim")?;
    let now = layout::now_ns();
    if claim.next_ns > now {
        return Ok(());
    }
    let key = name.as_bytes().to_vec();
    let period_ns = u64::try_from(settings.period.as_nanos()).unwrap_or(u64::MAX);
    let next = layout::encode(&LifecycleClaim { next_ns: now.saturating_add(period_ns), ..claim });
    let ops = vec![
        ObjOp::AssertOmap { key: key.clone(), value: Some(raw.to_vec()) },
        ObjOp::OmapSet { entries: vec![(key.clone(), next.clone())] },
    ];
    match rados::write_ops(client, META_POOL, LIFECYCLE_OBJECT, ops).await {
        Err(e) if e.is_conflict() => return Ok(()),
        other => other?,
    }
    let bucket = match meta::get_bucket(client, name).await {
        Ok(b) if b.id == claim.bucket_id => b,
        Ok(_) | Err(GatewayError::NoSuchBucket(_)) => {
            // The bucket is gone (or another took its name): its registration goes, guarded
            // so that a new registration made meanwhile stays.
            let ops =
                vec![ObjOp::AssertOmap { key: key.clone(), value: Some(next) }, ObjOp::OmapRemove { keys: vec![key] }];
            return match rados::write_ops(client, META_POOL, LIFECYCLE_OBJECT, ops).await {
                Err(e) if e.is_conflict() => Ok(()),
                other => other,
            };
        }
        Err(e) => return Err(e),
    };
    if bucket.lifecycle.is_empty() {
        return Ok(());
    }
    stats.buckets += 1;
    apply(client, settings, &bucket, now, stats).await
}

/// Applies `bucket`'s rules as of `now`, partition by partition.
pub async fn apply(
    client: &Client,
    settings: &LifecycleSettings,
    bucket: &BucketRecord,
    now: u64,
    stats: &mut LifecycleStats,
) -> Result<(), GatewayError> {
    let rules = &bucket.lifecycle;
    let day_ns = settings.day_ns();
    let expires_current = rules.iter().any(|r| r.enabled && (r.expire_days.is_some() || r.expire_date_s.is_some()));
    let expires_versions = rules
        .iter()
        .any(|r| r.enabled && (r.noncurrent_days.is_some() || r.expired_delete_marker || r.expire_days.is_some()));
    let aborts = rules.iter().any(|r| r.enabled && r.abort_upload_days.is_some());
    if expires_current {
        let mut pages = RangeReader::new(bucket, ENTRY_PREFIX, vec![ENTRY_PREFIX]);
        while let Some(page) = pages.next_batch(client, PAGE).await? {
            for (k, v) in page {
                let Ok(key) = std::str::from_utf8(&k[1..]) else { continue };
                let entry: IndexEntry = layout::decode(&v, "index entry")?;
                expire_current(client, settings, bucket, key, &entry, now, stats).await?;
            }
        }
    }
    if expires_versions {
        let mut judge = VersionJudge::new(rules, now, day_ns);
        let mut pages = RangeReader::new(bucket, VERSION_PREFIX, vec![VERSION_PREFIX]);
        while let Some(page) = pages.next_batch(client, PAGE).await? {
            let mut actions = Vec::new();
            for (k, v) in page {
                let Some((key, slot)) = layout::parse_version_key(&k) else { continue };
                let record: IndexEntry = layout::decode(&v, "version record")?;
                for action in judge.next(key, slot, &record) {
                    // A noncurrent action is about this record; a lone marker needs none.
                    let of = matches!(action, VersionAction::Noncurrent { .. }).then(|| record.clone());
                    actions.push((action, of));
                }
            }
            for (action, record) in actions {
                expire_version(client, settings, bucket, action, record.as_ref(), stats).await?;
            }
        }
        if let Some(action) = judge.finish() {
            expire_version(client, settings, bucket, action, None, stats).await?;
        }
    }
    if aborts {
        let mut pages = RangeReader::new(bucket, UPLOAD_PREFIX, vec![UPLOAD_PREFIX]);
        while let Some(page) = pages.next_batch(client, PAGE).await? {
            for (_, v) in page {
                let upload: layout::UploadRecord = layout::decode(&v, "upload record")?;
                let due = lifecycle::upload_due(rules, &upload.key, upload.initiated_ns, day_ns);
                if due.is_none_or(|d| d > now) {
                    continue;
                }
                match multipart::abort(client, bucket, &upload.key, upload.upload, settings.gc_delay_ns()).await {
                    Ok(()) => stats.uploads_aborted += 1,
                    Err(GatewayError::NoSuchUpload(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(())
}

/// The metadata of a version (for its tags and lock), if it has data.
async fn version_meta(
    client: &Client,
    bucket: &BucketRecord,
    key: &str,
    e: &IndexEntry,
) -> Result<Option<ObjectMeta>, GatewayError> {
    if e.delete_marker {
        return Ok(None);
    }
    let head = if e.null || e.version.is_none() {
        layout::head_object(bucket.id, key)
    } else {
        layout::version_object(bucket.id, e.tag)
    };
    // The null version's head may have been replaced since the record was read: only the
    // version judged counts.
    Ok(objects::head_meta_at(client, &head, key).await?.filter(|m| m.tag == e.tag))
}

async fn expire_current(
    client: &Client,
    settings: &LifecycleSettings,
    bucket: &BucketRecord,
    key: &str,
    entry: &IndexEntry,
    now: u64,
    stats: &mut LifecycleStats,
) -> Result<(), GatewayError> {
    let due: Vec<usize> =
        lifecycle::current_candidates(&bucket.lifecycle, key, entry.size_bytes, entry.mtime_ns, settings.day_ns())
            .into_iter()
            .filter(|(at, _)| *at <= now)
            .map(|(_, rule)| rule)
            .collect();
    if due.is_empty() {
        return Ok(());
    }
    if due.iter().all(|&r| !bucket.lifecycle[r].filter.tags.is_empty()) {
        let Some(meta) = version_meta(client, bucket, key, entry).await? else { return Ok(()) };
        if !due.iter().any(|&r| bucket.lifecycle[r].filter.matches(key, entry.size_bytes, &meta.tags)) {
            return Ok(());
        }
    }
    let owner = (bucket.owner_id.as_str(), bucket.owner_display.as_str());
    let guard = WriteCondition::Tag(entry.tag);
    let done =
        versions::delete(client, bucket, key, None, &guard, owner, settings.lease, settings.gc_delay_ns()).await?;
    if !done.refused {
        stats.expired += 1;
    }
    Ok(())
}

async fn expire_version(
    client: &Client,
    settings: &LifecycleSettings,
    bucket: &BucketRecord,
    action: VersionAction,
    record: Option<&IndexEntry>,
    stats: &mut LifecycleStats,
) -> Result<(), GatewayError> {
    let (key, slot) = match &action {
        VersionAction::Noncurrent { key, slot, rule } => {
            let record =
                record.ok_or_else(|| GatewayError::Internal("a noncurrent version without its record".into()))?;
            let filter = &bucket.lifecycle[*rule].filter;
            if !filter.tags.is_empty() || bucket.object_lock.is_some() {
                let meta = version_meta(client, bucket, key, record).await?;
                let tags = meta.as_ref().map_or(&[][..], |m| m.tags.as_slice());
                if !filter.matches(key, record.size_bytes, tags) {
                    return Ok(());
                }
                if meta.is_some_and(|m| locked(&m, layout::now_ns())) {
                    stats.locked += 1;
                    return Ok(());
                }
            }
            (key, slot)
        }
        VersionAction::LoneMarker { key, slot } => (key, slot),
    };
    let owner = (bucket.owner_id.as_str(), bucket.owner_display.as_str());
    let id = VersionId::Slot(*slot);
    versions::delete(
        client,
        bucket,
        key,
        Some(&id),
        &WriteCondition::None,
        owner,
        settings.lease,
        settings.gc_delay_ns(),
    )
    .await?;
    match action {
        VersionAction::Noncurrent { .. } => stats.noncurrent_removed += 1,
        VersionAction::LoneMarker { .. } => stats.markers_removed += 1,
    }
    Ok(())
}

/// Whether object lock keeps `meta`'s version (a legal hold, or a retention in force).
fn locked(meta: &ObjectMeta, now_ns: u64) -> bool {
    meta.lock.legal_hold || meta.lock.retention.is_some_and(|r| r.until_ns > now_ns)
}
