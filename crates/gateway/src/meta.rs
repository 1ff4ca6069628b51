//! Users, access keys and bucket records in the `.gw.meta` pool, and the gateway's pools.
//! Every function here is safe to run from any number of gateways at once: records are created
//! with exclusive creates, and lists (a user's buckets, all users) are omaps that are written
//! before the record they list and filtered by it when read, so a crash between the two leaves
//! a stale list entry that readers skip, never a record no list can reach.

use std::collections::BTreeMap;

use shoal_client::Client;
use shoal_map::Command;
use shoal_proto::osd::ObjOp;

use crate::error::GatewayError;
use crate::layout::{
    self, BucketRecord, KeyRecord, MAX_USER_NAME_BYTES, META_POOL, POOLS, Partition, USERS_OBJECT, UserRecord,
};
use crate::{index, rados};

/// Creates the gateway's pools that do not exist yet, with `size` replicas, and waits until the
/// map holds them.
pub async fn ensure_pools(client: &Client, size: u32, pg_num: u32, timeout_ms: u64) -> Result<(), GatewayError> {
    for name in POOLS {
        if client.mon().map().pool_by_name(name).is_ok() {
            continue;
        }
        let pg_num = if name == layout::DATA_POOL { pg_num } else { pg_num.div_ceil(4).max(8) };
        let cmd = Command::CreatePool { name: name.into(), size, min_size: None, pg_num, max_object_bytes: None };
        match client.mon().command(cmd).await {
            Ok(epoch) => {
                client.mon().wait_for_epoch(epoch, timeout_ms).await?;
            }
            // Another gateway created it first.
            Err(e) if e.code() == Some(shoal_proto::ErrorCode::Exists) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn check_user_name(name: &str) -> Result<(), GatewayError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_USER_NAME_BYTES
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(GatewayError::InvalidArgument(format!(
            "invalid user name {name:?}: use 1 to {MAX_USER_NAME_BYTES} letters, digits or -_.@"
        )))
    }
}

fn random_text(alphabet: &[u8], len: usize) -> Result<String, GatewayError> {
    let mut bytes = vec![0u8; len];
    getrandom::fill(&mut bytes).map_err(|e| GatewayError::Internal(format!("no randomness: {e}")))?;
    // 256 is a multiple of neither alphabet's size; the bias (under 1%) is harmless for ids.
    Ok(bytes.iter().map(|b| alphabet[*b as usize % alphabet.len()] as char).collect())
}

/// A new access key id (20 upper-case letters and digits, as AWS's) and secret (40 characters).
pub fn new_key_pair() -> Result<(String, String), GatewayError> {
    let access = random_text(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 20)?;
    let secret = random_text(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", 40)?;
    Ok((access, secret))
}

/// Creates user `name` with one access key (given, or drawn when `None`). Returns the user and
/// the key's secret.
pub async fn create_user(
    client: &Client,
    name: &str,
    display_name: Option<&str>,
    key: Option<(String, String)>,
) -> Result<(UserRecord, String, String), GatewayError> {
    check_user_name(name)?;
    let (access, secret) = match key {
        Some(k) => k,
        None => new_key_pair()?,
    };
    check_access_key(&access)?;
    let canonical_id = random_text(b"0123456789abcdef", 64)?;
    let user = UserRecord {
        name: name.to_string(),
        canonical_id,
        display_name: display_name.unwrap_or(name).to_string(),
        created_ns: layout::now_ns(),
        access_keys: vec![access.clone()],
    };
    // The id record first, so every user's canonical id resolves; a crash leaves at worst an
    // id record naming no user, which resolves to nothing.
    let id_record = layout::IdRecord { user: name.to_string() };
    rados::write_record(client, META_POOL, &layout::id_object(&user.canonical_id), layout::encode(&id_record), true)
        .await?;
    // Listed first, so a crash leaves at worst a list entry without a record.
    rados::write_ops(
        client,
        META_POOL,
        USERS_OBJECT,
        vec![ObjOp::OmapSet { entries: vec![(name.as_bytes().to_vec(), Vec::new())] }],
    )
    .await?;
    match rados::write_record(client, META_POOL, &layout::user_object(name), layout::encode(&user), true).await {
        Err(e) if e.is_exists() => return Err(GatewayError::UserExists(name.to_string())),
        r => r?,
    }
    let record = KeyRecord { user: name.to_string(), secret: secret.clone() };
    rados::write_record(client, META_POOL, &layout::key_object(&access), layout::encode(&record), true).await?;
    Ok((user, access, secret))
}

fn check_access_key(access: &str) -> Result<(), GatewayError> {
    if access.len() < 3 || access.len() > 128 || !access.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(GatewayError::InvalidArgument(format!(
            "invalid access key {access:?}: use 3 to 128 letters and digits"
        )));
    }
    Ok(())
}

pub async fn get_user(client: &Client, name: &str) -> Result<UserRecord, GatewayError> {
    check_user_name(name)?;
    match rados::read_all(client, META_POOL, &layout::user_object(name)).await? {
        Some(bytes) => layout::decode(&bytes, "user record"),
        None => Err(GatewayError::NoSuchUser(name.to_string())),
    }
}

/// Every user, in name order.
pub async fn list_users(client: &Client) -> Result<Vec<UserRecord>, GatewayError> {
    let names = rados::omap_prefix(client, META_POOL, USERS_OBJECT, &[], 1_000_000).await?;
    let mut users = Vec::with_capacity(names.len());
    for (name, _) in names {
        let name = String::from_utf8_lossy(&name).into_owned();
        match get_user(client, &name).await {
            Ok(u) => users.push(u),
            Err(GatewayError::NoSuchUser(_) | GatewayError::InvalidArgument(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(users)
}

/// Removes a user and its keys; refused while it owns buckets.
pub async fn remove_user(client: &Client, name: &str) -> Result<(), GatewayError> {
    let user = get_user(client, name).await?;
    let buckets = list_buckets(client, &user).await?;
    if !buckets.is_empty() {
        return Err(GatewayError::UserHasBuckets { user: name.to_string(), buckets: buckets.len() });
    }
    for access in &user.access_keys {
        rados::remove(client, META_POOL, &layout::key_object(access)).await?;
    }
    rados::remove(client, META_POOL, &layout::user_object(name)).await?;
    rados::remove(client, META_POOL, &layout::id_object(&user.canonical_id)).await?;
    rados::write_ops(client, META_POOL, USERS_OBJECT, vec![ObjOp::OmapRemove { keys: vec![name.as_bytes().to_vec()] }])
        .await
}

/// Changes the record in `object` (kind `what`) with a compare-and-swap on its bytes, retried
/// on conflict; `missing` is the error when there is no record.
async fn update_record<T: serde::Serialize + serde::de::DeserializeOwned>(
    client: &Client,
    object: &str,
    what: &str,
    missing: impl Fn() -> GatewayError,
    change: impl Fn(&mut T) -> Result<(), GatewayError>,
) -> Result<T, GatewayError> {
    const ATTEMPTS: usize = 16;
    for _ in 0..ATTEMPTS {
        let Some(old) = rados::read_all(client, META_POOL, object).await? else {
            return Err(missing());
        };
        let mut record: T = layout::decode(&old, what)?;
        change(&mut record)?;
        match rados::replace_record(client, META_POOL, object, &old, layout::encode(&record)).await {
            Ok(()) => return Ok(record),
            Err(e) if e.is_conflict() => continue,
            Err(e) => return Err(e),
        }
    }
    Err(GatewayError::Internal(format!("{what} {object:?} kept changing under {ATTEMPTS} updates")))
}

/// Changes a user record (see [`update_record`]).
async fn update_user(
    client: &Client,
    name: &str,
    change: impl Fn(&mut UserRecord) -> Result<(), GatewayError>,
) -> Result<UserRecord, GatewayError> {
    let missing = || GatewayError::NoSuchUser(name.to_string());
    update_record(client, &layout::user_object(name), "user record", missing, change).await
}

/// Adds an access key to a user. Returns (access key, secret).
pub async fn create_key(client: &Client, user: &str) -> Result<(String, String), GatewayError> {
    const MAX_KEYS: usize = 16;
    let (access, secret) = new_key_pair()?;
    let record = KeyRecord { user: user.to_string(), secret: secret.clone() };
    get_user(client, user).await?;
    rados::write_record(client, META_POOL, &layout::key_object(&access), layout::encode(&record), true).await?;
    let added = update_user(client, user, |u| {
        if u.access_keys.len() >= MAX_KEYS {
            return Err(GatewayError::InvalidArgument(format!("user {user:?} already has {MAX_KEYS} keys")));
        }
        u.access_keys.push(access.clone());
        Ok(())
    })
    .await;
    if let Err(e) = added {
        rados::remove(client, META_POOL, &layout::key_object(&access)).await?;
        return Err(e);
    }
    Ok((access, secret))
}

/// Removes an access key (of any user).
pub async fn remove_key(client: &Client, access: &str) -> Result<String, GatewayError> {
    check_access_key(access)?;
    let record = lookup_key(client, access).await?;
    rados::remove(client, META_POOL, &layout::key_object(access)).await?;
    update_user(client, &record.user, |u| {
        u.access_keys.retain(|k| k != access);
        Ok(())
    })
    .await?;
    Ok(record.user)
}

/// The key record of `access`.
pub async fn lookup_key(client: &Client, access: &str) -> Result<KeyRecord, GatewayError> {
    if check_access_key(access).is_err() {
        return Err(GatewayError::NoSuchAccessKey(access.to_string()));
    }
    match rados::read_all(client, META_POOL, &layout::key_object(access)).await? {
        Some(bytes) => layout::decode(&bytes, "key record"),
        None => Err(GatewayError::NoSuchAccessKey(access.to_string())),
    }
}

/// The user whose canonical id is `canonical_id`.
pub async fn user_by_id(client: &Client, canonical_id: &str) -> Result<UserRecord, GatewayError> {
    let ok = !canonical_id.is_empty()
        && canonical_id.len() <= 128
        && canonical_id.bytes().all(|b| b.is_ascii_alphanumeric());
    let missing = || GatewayError::InvalidArgument(format!("no user has canonical id {canonical_id:?}"));
    if !ok {
        return Err(missing());
    }
    let Some(bytes) = rados::read_all(client, META_POOL, &layout::id_object(canonical_id)).await? else {
        return Err(missing());
    };
    let record: layout::IdRecord = layout::decode(&bytes, "id record")?;
    match get_user(client, &record.user).await {
        Ok(u) if u.canonical_id == canonical_id => Ok(u),
        Ok(_) | Err(GatewayError::NoSuchUser(_)) => Err(missing()),
        Err(e) => Err(e),
    }
}

pub async fn get_bucket(client: &Client, name: &str) -> Result<BucketRecord, GatewayError> {
    match rados::read_all(client, META_POOL, &layout::bucket_object(name)).await? {
        Some(bytes) => layout::decode(&bytes, "bucket record"),
        None => Err(GatewayError::NoSuchBucket(name.to_string())),
    }
}

/// Creates bucket `name` owned by `owner` with ACL `grants`, with one index partition.
pub async fn create_bucket(
    client: &Client,
    owner: &UserRecord,
    name: &str,
    region: &str,
    grants: Vec<layout::Grant>,
    ownership: Option<layout::Ownership>,
    object_lock: bool,
) -> Result<BucketRecord, GatewayError> {
    let mut id_bytes = [0u8; 8];
    getrandom::fill(&mut id_bytes).map_err(|e| GatewayError::Internal(format!("no randomness: {e}")))?;
    let bucket = BucketRecord {
        name: name.to_string(),
        id: u64::from_le_bytes(id_bytes),
        owner: owner.name.clone(),
        owner_id: owner.canonical_id.clone(),
        owner_display: owner.display_name.clone(),
        created_ns: layout::now_ns(),
        region: region.to_string(),
        partitions: vec![Partition { start: String::new(), id: 0 }],
        grants,
        policy: None,
        public_access_block: None,
        ownership,
        tags: Vec::new(),
        versioning: if object_lock { layout::Versioning::Enabled } else { layout::Versioning::Unversioned },
        object_lock: object_lock.then(layout::ObjectLock::default),
        lifecycle: Vec::new(),
        cors: Vec::new(),
    };
    let user_obj = layout::user_object(&owner.name);
    let listed = vec![ObjOp::OmapSet { entries: vec![(name.as_bytes().to_vec(), Vec::new())] }];
    rados::write_ops(client, META_POOL, &user_obj, listed).await?;
    // The partitions exist before the record that names them; a crash in between leaves live
    // partitions without a record, which the collector retires after a lease.
    index::create_partitions(client, &bucket).await?;
    match rados::write_record(client, META_POOL, &layout::bucket_object(name), layout::encode(&bucket), true).await {
        Ok(()) => Ok(bucket),
        Err(e) if e.is_exists() => {
            for p in &bucket.partitions {
                rados::remove(client, layout::INDEX_POOL, &layout::partition_object(bucket.id, p.id)).await?;
            }
            let existing = get_bucket(client, name).await?;
            let by_you = existing.owner == owner.name;
            if !by_you {
                let unlist = vec![ObjOp::OmapRemove { keys: vec![name.as_bytes().to_vec()] }];
                rados::write_ops(client, META_POOL, &user_obj, unlist).await?;
            }
            Err(GatewayError::BucketExists { name: name.to_string(), by_you })
        }
        Err(e) => Err(e),
    }
}

/// Changes bucket record `name` (see [`update_record`]); a bucket deleted meanwhile is
/// `NoSuchBucket`, and one re-created under the name (another id) is left alone.
pub async fn update_bucket(
    client: &Client,
    name: &str,
    id: u64,
    change: impl Fn(&mut BucketRecord) -> Result<(), GatewayError>,
) -> Result<BucketRecord, GatewayError> {
    let missing = || GatewayError::NoSuchBucket(name.to_string());
    update_record(client, &layout::bucket_object(name), "bucket record", missing, |b: &mut BucketRecord| {
        if b.id != id {
            return Err(missing());
        }
        change(b)
    })
    .await
}

/// The buckets `owner` owns, in name order.
pub async fn list_buckets(client: &Client, owner: &UserRecord) -> Result<Vec<BucketRecord>, GatewayError> {
    // A user owns at most a bounded number of buckets (S3's default quota is 100; this is a
    // hard ceiling on what one listing holds).
    const MAX_BUCKETS: usize = 100_000;
    let names = rados::omap_prefix(client, META_POOL, &layout::user_object(&owner.name), &[], MAX_BUCKETS).await?;
    let mut out = BTreeMap::new();
    for (name, _) in names {
        let name = String::from_utf8_lossy(&name).into_owned();
        match get_bucket(client, &name).await {
            Ok(b) if b.owner == owner.name => {
                out.insert(name, b);
            }
            Ok(_) | Err(GatewayError::NoSuchBucket(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out.into_values().collect())
}

/// Deletes bucket `bucket` if it holds no object (decision 0014): its partitions stop taking
/// index writes first, then the emptiness check is repeated (an entry completed in between
/// makes the bucket live again and the delete fail), then the record goes. Pending writes and
/// GC records left in the partitions are finished by the collector, which removes each
/// partition once nothing is left in it. Any step may crash: the collector, a lease after the
/// partitions died, runs [`finish_deletion`].
pub async fn delete_bucket(client: &Client, bucket: &BucketRecord) -> Result<(), GatewayError> {
    match deletion(client, bucket, true).await? {
        Deletion::Removed | Deletion::Gone { killed: true } => Ok(()),
        Deletion::Gone { killed: false } => Err(GatewayError::NoSuchBucket(bucket.name.clone())),
        Deletion::NotEmpty => Err(GatewayError::BucketNotEmpty(bucket.name.clone())),
    }
}

/// Finishes the deletion of `bucket` that the collector found with dead partitions a lease
/// after they died (its deleter crashed, or is too slow to be trusted): every partition made
/// dead, and then either the record removed (no entry anywhere) or every partition made live
/// again. Deciding for the whole table, never for one partition, is what keeps a deletion that
/// died between two partitions from removing a record whose other partitions hold entries.
/// Returns whether the record was removed.
pub async fn finish_deletion(client: &Client, bucket: &BucketRecord) -> Result<bool, GatewayError> {
    Ok(matches!(deletion(client, bucket, false).await?, Deletion::Removed))
}

/// How a deletion ended.
enum Deletion {
    Removed,
    /// The record was gone or named another bucket; `killed`: after this deletion made the
    /// partitions dead (someone else finished it).
    Gone {
        killed: bool,
    },
    /// Entries were found; the partitions are live.
    NotEmpty,
}

async fn deletion(client: &Client, bucket: &BucketRecord, check_first: bool) -> Result<Deletion, GatewayError> {
    /// Each attempt lost to a change of the record (a split published, a configuration
    /// change) is retried this many times.
    const ATTEMPTS: usize = 8;
    let object = layout::bucket_object(&bucket.name);
    let mut killed: Option<BucketRecord> = None;
    for _ in 0..ATTEMPTS {
        // The record as it is now: its table names every partition that must die.
        let Some(bytes) = rados::read_all(client, META_POOL, &object).await? else {
            return Ok(Deletion::Gone { killed: killed.is_some() });
        };
        let current: BucketRecord = layout::decode(&bytes, "bucket record")?;
        if current.id != bucket.id {
            return Ok(Deletion::Gone { killed: killed.is_some() });
        }
        if check_first && killed.is_none() && !index::is_empty(client, &current).await? {
            return Ok(Deletion::NotEmpty);
        }
        index::set_live(client, &current, false).await?;
        killed = Some(current.clone());
        if !index::is_empty(client, &current).await? {
            index::set_live(client, &current, true).await?;
            return Ok(Deletion::NotEmpty);
        }
        // Removed only if it is still the record whose partitions were made dead: a split
        // published in between named a partition that is still live.
        if rados::remove_record(client, META_POOL, &object, &bytes).await? {
            unlist_bucket(client, &current).await?;
            return Ok(Deletion::Removed);
        }
    }
    if let Some(k) = killed {
        index::set_live(client, &k, true).await?;
    }
    Err(GatewayError::Conflict(format!("bucket {:?} kept changing while being deleted", bucket.name)))
}

/// Removes removed bucket `bucket` from its owner's list.
async fn unlist_bucket(client: &Client, bucket: &BucketRecord) -> Result<(), GatewayError> {
    let object = layout::bucket_object(&bucket.name);
    let user_obj = layout::user_object(&bucket.owner);
    let unlist = vec![ObjOp::OmapRemove { keys: vec![bucket.name.as_bytes().to_vec()] }];
    rados::write_ops(client, META_POOL, &user_obj, unlist).await?;
    // The owner may have created the name again between the removal and the unlisting (its
    // listing came first); list it again then, since lists must cover every record.
    if let Some(bytes) = rados::read_all(client, META_POOL, &object).await? {
        let again: BucketRecord = layout::decode(&bytes, "bucket record")?;
        let listed = vec![ObjOp::OmapSet { entries: vec![(bucket.name.as_bytes().to_vec(), Vec::new())] }];
        rados::write_ops(client, META_POOL, &layout::user_object(&again.owner), listed).await?;
    }
    Ok(())
}
