//! Where the gateway's state lives in the cluster (decision 0014): pool and object names, omap
//! keys of the bucket index, and the records stored in them. Pure data, no I/O.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use shoal_client::objecter::MAX_OBJECT_NAME_BYTES;

use crate::error::GatewayError;

/// Users, access keys, bucket records.
pub const META_POOL: &str = ".gw.meta";
/// Bucket index partitions (omap only).
pub const INDEX_POOL: &str = ".gw.index";
/// Object heads and tails.
pub const DATA_POOL: &str = ".gw.data";
/// The gateway's pools, in creation order.
pub const POOLS: [&str; 3] = [META_POOL, INDEX_POOL, DATA_POOL];

/// Bytes of object data per RADOS object: the head holds the first chunk, each tail one more.
pub const CHUNK_BYTES: u64 = 4 << 20;

/// The object whose omap lists every user (name → empty).
pub const USERS_OBJECT: &str = "users";

/// Longest S3 object key, in bytes (S3's limit).
pub const MAX_KEY_BYTES: usize = 1024;
/// Longest user name, in bytes (it is part of object names).
pub const MAX_USER_NAME_BYTES: usize = 64;

pub fn user_object(name: &str) -> String {
    format!("user.{name}")
}

pub fn key_object(access_key: &str) -> String {
    format!("key.{access_key}")
}

pub fn bucket_object(name: &str) -> String {
    format!("bucket.{name}")
}

/// The record naming the user whose canonical id is `canonical_id` ([`IdRecord`]).
pub fn id_object(canonical_id: &str) -> String {
    format!("id.{canonical_id}")
}

/// The head of `key` in bucket `bucket_id`: the key itself when the name fits the cluster's
/// limit, else its 128-bit hash (the key is then kept in the head's metadata and checked).
pub fn head_object(bucket_id: u64, key: &str) -> String {
    let direct = format!("h.{bucket_id:016x}.{key}");
    if direct.len() <= MAX_OBJECT_NAME_BYTES && !key.contains('\0') {
        return direct;
    }
    format!("H.{bucket_id:016x}.{:032x}", xxhash_rust::xxh3::xxh3_128(key.as_bytes()))
}

/// Chunk `n` of the write tagged `tag`: an object's tails are chunks 1.. (chunk 0 is in its
/// head); a multipart part's chunks are 0.. .
pub fn tail_object(bucket_id: u64, tag: u128, n: u32) -> String {
    format!("t.{bucket_id:016x}.{tag:032x}.{n}")
}

/// Version object of the write tagged `tag` in a versioning-enabled bucket: the head (first
/// chunk, metadata, manifest) of one version, written once and never changed but for its ACL
/// and tags (decision 0015). A bucket's *null* version lives at [`head_object`] instead.
pub fn version_object(bucket_id: u64, tag: u128) -> String {
    format!("v.{bucket_id:016x}.{tag:032x}")
}

/// Index partition `partition` of bucket `bucket_id`.
pub fn partition_object(bucket_id: u64, partition: u32) -> String {
    format!("i.{bucket_id:016x}.{partition}")
}

/// The xattr of an index partition that makes it *live*: its bucket exists and takes writes.
/// Every index write asserts it (value [`LIVE_VALUE`]); deleting the bucket removes it first, so
/// no write can land in a partition whose bucket is going away (decision 0014).
pub const LIVE_XATTR: &str = "live";
pub const LIVE_VALUE: &[u8] = b"1";
/// The xattr of a dead index partition holding when it died (nanoseconds since the epoch, 8
/// bytes little-endian), set in the request that removes [`LIVE_XATTR`]: the collector leaves a
/// deletion alone for a lease after it, so it never races a deleter that is still working.
pub const DEAD_XATTR: &str = "dead";
/// The xattr of an index partition naming its bucket ([`PartitionLabel`]), so the collector can
/// tell a partition whose bucket record never got written (a crashed create) from a live one.
pub const LABEL_XATTR: &str = "bucket";

/// Which bucket an index partition belongs to, and since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionLabel {
    pub bucket: String,
    pub created_ns: u64,
    /// The partition a split made this one from (`None`: made with its bucket). Until the split
    /// is published this partition holds only copies, and the collector removes it if the
    /// split was given up.
    pub split_from: Option<u32>,
}

/// The xattr of an index partition holding its key range ([`PartitionBounds`]). Every index
/// write asserts the range its writer's partition table gives, so a writer whose table is older
/// than a split is refused and looks again (decision 0014).
pub const BOUNDS_XATTR: &str = "bounds";

/// The keys an index partition is responsible for: `start` (inclusive) to `end` (exclusive;
/// `None`: every key above).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionBounds {
    pub start: String,
    pub end: Option<String>,
}

impl PartitionBounds {
    pub fn contains(&self, key: &str) -> bool {
        key >= self.start.as_str() && self.end.as_deref().is_none_or(|e| key < e)
    }
}

/// The xattr of an index partition being split ([`Reshard`]).
pub const RESHARD_XATTR: &str = "reshard";

/// A split of an index partition in progress, recorded on the partition split (decision 0014).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reshard {
    /// Keys from `cut` up go to partition `new_id`.
    pub cut: String,
    pub new_id: u32,
    /// The partition's range before the split.
    pub was: PartitionBounds,
    pub state: ReshardState,
    /// When the state last changed; a split stuck past its deadline is given up or finished by
    /// whoever finds it.
    pub since_ns: u64,
}

/// The steps of a split, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReshardState {
    /// The new partition is being filled with copies while writes continue to this one.
    Copying,
    /// This partition's range is cut down: writes above the cut wait while the last changes are
    /// copied. Still the authority for reads of its whole former range.
    Fenced,
    /// The copy is exact: the split will be published (by anyone who finds it so).
    Committed,
    /// The bucket record names the new partition; the copied records are being removed here.
    Published,
}

/// The xattr of both index partitions of a merge in progress ([`Merge`]).
pub const MERGE_XATTR: &str = "merge";

/// An index partition's tombstone generation: a random token, set when the partition is made
/// and replaced in every request that removes tombstones ([`TOMB_PREFIX`]) or brings keys in from
/// another partition (a merge's commit). A completion whose view of its key was "nothing at all"
/// (no entry, no key state, no tombstone) asserts it, so that "nothing" coming back after a
/// tombstone's removal is seen as a change (decision 0014).
pub const TOMBS_XATTR: &str = "tombs";

/// A fresh value for [`TOMBS_XATTR`].
pub fn fresh_tombs_generation() -> Result<Vec<u8>, GatewayError> {
    Ok(random_tag()?.to_le_bytes()[..8].to_vec())
}

/// A merge of two neighbouring index partitions in progress (decision 0014): partition `from`
/// (the right one) is absorbed by partition `into` (the left one), which ends up with both
/// ranges. The same record is kept on both; the one on `into` decides the merge (commit and
/// give-up both assert it), the one on `from` fences it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Merge {
    pub into: u32,
    /// `into`'s range before the merge.
    pub into_was: PartitionBounds,
    pub from: u32,
    /// `from`'s range before the merge: it starts where `into_was` ends.
    pub from_was: PartitionBounds,
    pub state: MergeState,
    /// When the state last changed; a merge stuck past its deadline is given up or finished by
    /// whoever finds it.
    pub since_ns: u64,
}

impl Merge {
    /// The range of the merged partition.
    pub fn merged(&self) -> PartitionBounds {
        PartitionBounds { start: self.into_was.start.clone(), end: self.from_was.end.clone() }
    }
}

/// The steps of a merge. On `into`: Copying, then Committed and Published, or Abandoned. On
/// `from`: Copying, then Fenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MergeState {
    /// `from`'s records are being copied into `into` while writes go on in both.
    Copying,
    /// `from` takes no request: its last changes are being copied.
    Fenced,
    /// `into` holds both ranges (its bounds say so): the merge will be published by anyone who
    /// finds it so.
    Committed,
    /// The bucket record no longer names `from`, which is being removed.
    Published,
    /// Given up: `from` is restored and the copies in `into` are being removed.
    Abandoned,
}

/// Parses an index partition's object name into (bucket id, partition id).
pub fn parse_partition_object(name: &str) -> Option<(u64, u32)> {
    let rest = name.strip_prefix("i.")?;
    let (id, part) = rest.split_once('.')?;
    if id.len() != 16 {
        return None;
    }
    Some((u64::from_str_radix(id, 16).ok()?, part.parse().ok()?))
}

/// Omap key prefixes in an index partition.
pub const ENTRY_PREFIX: u8 = 0x01;
pub const PENDING_PREFIX: u8 = 0x02;
pub const GC_PREFIX: u8 = 0x03;
/// Multipart uploads in progress, by key then upload id; then their parts, by upload and number.
pub const UPLOAD_PREFIX: u8 = 0x04;
pub const PART_PREFIX: u8 = 0x05;
/// Versions of keys in a bucket that has had versioning enabled: by key, then newest first.
pub const VERSION_PREFIX: u8 = 0x06;
/// Per key with versions: the newest version's and the null version's slots ([`KeyState`]).
pub const KEY_STATE_PREFIX: u8 = 0x07;
/// Per key whose entry and key state went (a delete's completion): a [`Tombstone`], so that the
/// key's "no entry" is never the same twice while a completion may still compare against it.
/// A later entry or key state removes it; so does the collector, once it is old (decision 0014).
pub const TOMB_PREFIX: u8 = 0x08;

pub fn tomb_key(key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + key.len());
    k.push(TOMB_PREFIX);
    k.extend_from_slice(key.as_bytes());
    k
}

/// The exclusive omap cursor after which tombstones start: above every key state, since UTF-8
/// keys never contain 0xFF.
pub fn tombs_cursor() -> Vec<u8> {
    vec![KEY_STATE_PREFIX, 0xFF]
}

/// What a tombstone holds: a random tag (what makes it unique) and when it was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tombstone {
    pub tag: u128,
    pub made_ns: u64,
}

impl Tombstone {
    /// A new tombstone, made now.
    pub fn fresh() -> Result<Tombstone, GatewayError> {
        Ok(Tombstone { tag: random_tag()?, made_ns: now_ns() })
    }
}

/// The omap key of `key`'s version at `slot`: the key, a zero byte, then the slot, so that a
/// key's versions are contiguous and newest first. Parsed from the end (the slot has a fixed
/// length), so a key holding a zero byte still parses; versioned writes refuse such keys, whose
/// versions would interleave with another key's.
pub fn version_key(key: &str, slot: Slot) -> Vec<u8> {
    let mut k = version_key_prefix(key);
    k.extend_from_slice(&slot.bytes());
    k
}

/// The omap key every version of `key` starts with.
pub fn version_key_prefix(key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + key.len() + Slot::BYTES);
    k.push(VERSION_PREFIX);
    k.extend_from_slice(key.as_bytes());
    k.push(0);
    k
}

/// The key and slot of a version record's omap key.
pub fn parse_version_key(k: &[u8]) -> Option<(&str, Slot)> {
    let rest = k.strip_prefix(&[VERSION_PREFIX])?;
    let split = rest.len().checked_sub(Slot::BYTES + 1)?;
    if rest[split] != 0 {
        return None;
    }
    let key = std::str::from_utf8(&rest[..split]).ok()?;
    Some((key, Slot::from_bytes(&rest[split + 1..])?))
}

pub fn key_state_key(key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + key.len());
    k.push(KEY_STATE_PREFIX);
    k.extend_from_slice(key.as_bytes());
    k
}

pub fn upload_key(key: &str, upload: u128) -> Vec<u8> {
    let mut k = Vec::with_capacity(18 + key.len());
    k.push(UPLOAD_PREFIX);
    k.extend_from_slice(key.as_bytes());
    k.push(0);
    k.extend_from_slice(&upload.to_be_bytes());
    k
}

/// The omap key of part `part` of upload `upload`; the parts of one upload are contiguous and in
/// number order.
pub fn part_key(upload: u128, part: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(21);
    k.push(PART_PREFIX);
    k.extend_from_slice(&upload.to_be_bytes());
    k.extend_from_slice(&part.to_be_bytes());
    k
}

/// The manifest of the multipart object made by the completion tagged `tag`: its parts.
pub fn manifest_object(bucket_id: u64, tag: u128) -> String {
    format!("M.{bucket_id:016x}.{tag:032x}")
}

/// An upload id as clients see it (32 hex digits), and back.
pub fn upload_id_text(upload: u128) -> String {
    format!("{upload:032x}")
}

pub fn parse_upload_id(text: &str) -> Option<u128> {
    if text.len() != 32 {
        return None;
    }
    u128::from_str_radix(text, 16).ok()
}

pub fn entry_key(key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + key.len());
    k.push(ENTRY_PREFIX);
    k.extend_from_slice(key.as_bytes());
    k
}

pub fn pending_key(tag: u128) -> Vec<u8> {
    let mut k = vec![PENDING_PREFIX];
    k.extend_from_slice(&tag.to_be_bytes());
    k
}

/// GC records sort by due time, so a collector reads only the ones that are due.
pub fn gc_key(due_ns: u64, tag: u128) -> Vec<u8> {
    let mut k = vec![GC_PREFIX];
    k.extend_from_slice(&due_ns.to_be_bytes());
    k.extend_from_slice(&tag.to_be_bytes());
    k
}

/// The exclusive omap cursor after which an index partition's records (pending, GC) start:
/// above every entry key, since UTF-8 keys never contain 0xFF.
pub fn records_cursor() -> Vec<u8> {
    vec![ENTRY_PREFIX, 0xFF]
}

/// The exclusive omap cursor after which version records start: above every part record.
pub fn versions_cursor() -> Vec<u8> {
    let mut k = vec![PART_PREFIX];
    k.extend_from_slice(&[0xFF; 21]);
    k
}

/// Format version of every record below, its first byte.
const RECORD_VERSION: u8 = 1;

/// Encodes a record: its version byte, then postcard.
pub fn encode<T: Serialize>(record: &T) -> Vec<u8> {
    let mut out = vec![RECORD_VERSION];
    // Serializing plain structs of owned data into a Vec cannot fail.
    out.extend_from_slice(&postcard::to_allocvec(record).unwrap_or_default());
    out
}

/// Decodes a record written by [`encode`]; `what` names it in the error.
pub fn decode<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, GatewayError> {
    match bytes.split_first() {
        Some((&RECORD_VERSION, body)) => {
            postcard::from_bytes(body).map_err(|e| GatewayError::Corrupt(format!("{what}: {e}")))
        }
        Some((v, _)) => Err(GatewayError::Corrupt(format!("{what}: unknown record version {v}"))),
        None => Err(GatewayError::Corrupt(format!("{what}: empty record"))),
    }
}

/// A user (object `user.NAME`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRecord {
    pub name: String,
    /// 64 hex digits, drawn at creation; S3's canonical user id.
    pub canonical_id: String,
    pub display_name: String,
    pub created_ns: u64,
    pub access_keys: Vec<String>,
}

/// An access key (object `key.ACCESS`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    pub user: String,
    pub secret: String,
}

/// A canonical id's user (object `id.CANONICAL_ID`), so that grants naming an id resolve.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdRecord {
    pub user: String,
}

/// One range of a bucket's index: keys from `start` (inclusive) up to the next partition's start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    pub start: String,
    pub id: u32,
}

/// A bucket's versioning state (S3's: never enabled, enabled, suspended).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Versioning {
    /// Never enabled: every object is the null version, and the index holds no version records.
    #[default]
    Unversioned,
    /// Every write makes a new version; a delete adds a delete marker.
    Enabled,
    /// Writes replace the null version; a delete makes the null version a delete marker.
    Suspended,
}

/// How a retention period protects an object version (S3 object lock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockMode {
    /// No one shortens it or deletes the version before it ends, except a request that bypasses
    /// governance retention.
    Governance,
    /// No one shortens it or deletes the version before it ends.
    Compliance,
}

/// A version's retention: protected in `mode` until `until_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    pub mode: LockMode,
    pub until_ns: u64,
}

/// A version's object lock state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lock {
    pub retention: Option<Retention>,
    /// A legal hold: no deletion of the version while on, whatever the retention.
    pub legal_hold: bool,
}

/// The retention every new version of an object-lock bucket gets unless its write names one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DefaultPeriod {
    Days(u32),
    Years(u32),
}

/// A bucket's object lock configuration (only buckets created with object lock, or versioned
/// buckets it was enabled on, have one; it is never removed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectLock {
    pub default: Option<(LockMode, DefaultPeriod)>,
}

/// A bucket (object `bucket.NAME`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketRecord {
    pub name: String,
    pub id: u64,
    /// The owner's user name and canonical id.
    pub owner: String,
    pub owner_id: String,
    pub owner_display: String,
    pub created_ns: u64,
    pub region: String,
    /// Sorted by `start`; the first starts at "".
    pub partitions: Vec<Partition>,
    /// The bucket's access control list (the owner is the bucket's).
    pub grants: Vec<Grant>,
    /// The bucket policy, as the JSON text the owner sent (checked when it was set).
    pub policy: Option<String>,
    pub public_access_block: Option<PublicAccessBlock>,
    pub ownership: Option<Ownership>,
    /// The bucket's tags, in the order set.
    pub tags: Vec<(String, String)>,
    pub versioning: Versioning,
    pub object_lock: Option<ObjectLock>,
    /// The lifecycle rules, in the order set (none: no lifecycle configuration).
    pub lifecycle: Vec<LifecycleRule>,
    /// The CORS rules, in the order set (none: no CORS configuration).
    pub cors: Vec<CorsRule>,
}

/// One CORS rule (S3's `CORSRule`, checked when it was set; see `cors.rs`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorsRule {
    pub id: Option<String>,
    /// HTTP methods, upper case.
    pub methods: Vec<String>,
    /// Origins, each with at most one `*` wildcard.
    pub origins: Vec<String>,
    /// Headers a preflight may ask for, each with at most one `*` wildcard.
    pub headers: Vec<String>,
    /// Response headers a browser script may read.
    pub expose_headers: Vec<String>,
    pub max_age_s: Option<u32>,
}

/// One lifecycle rule (S3's `LifecycleRule`, checked when it was set; see `lifecycle.rs`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleRule {
    pub id: String,
    pub enabled: bool,
    pub filter: LifecycleFilter,
    /// Expiration of current versions: after this many days, or from this instant.
    pub expire_days: Option<u32>,
    pub expire_date_s: Option<i64>,
    /// Remove a delete marker that no other version of its key is left behind.
    pub expired_delete_marker: bool,
    /// Expiration of noncurrent versions this many days after they became noncurrent, keeping
    /// the newest `keep_noncurrent` of them.
    pub noncurrent_days: Option<u32>,
    pub keep_noncurrent: Option<u32>,
    /// Abort of multipart uploads this many days after they were created.
    pub abort_upload_days: Option<u32>,
}

/// Which objects a lifecycle rule applies to: all its conditions hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleFilter {
    pub prefix: String,
    /// The rule was given S3's old top-level `Prefix` rather than a `Filter` (kept so that the
    /// configuration reads back as it was sent).
    pub legacy_prefix: bool,
    pub tags: Vec<(String, String)>,
    pub size_greater_than: Option<u64>,
    pub size_less_than: Option<u64>,
}

/// The object naming the buckets that have lifecycle rules: an omap of bucket name to
/// [`LifecycleClaim`], which gateways swap to take a bucket's next lifecycle pass.
pub const LIFECYCLE_OBJECT: &str = "lifecycle";

/// A bucket's entry in [`LIFECYCLE_OBJECT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleClaim {
    pub bucket_id: u64,
    /// No gateway starts the bucket's next pass before this instant.
    pub next_ns: u64,
}

/// What a bucket refuses or ignores of public ACLs and policies (S3's public access block).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicAccessBlock {
    /// Refuse requests that set a public ACL.
    pub block_public_acls: bool,
    /// Judge access as if public grants were not there.
    pub ignore_public_acls: bool,
    /// Refuse a public bucket policy.
    pub block_public_policy: bool,
    /// With a public policy, only the owner gets what the policy allows.
    pub restrict_public_buckets: bool,
}

/// Who owns the objects written into a bucket (S3's object ownership controls).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ownership {
    /// The writer owns them (S3's behaviour before ownership controls).
    ObjectWriter,
    /// The bucket owner owns those written with `bucket-owner-full-control`.
    BucketOwnerPreferred,
    /// The bucket owner owns all of them, and ACLs are disabled.
    BucketOwnerEnforced,
}

/// A permission an access control list grants (S3's five).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Permission {
    Read,
    Write,
    ReadAcp,
    WriteAcp,
    FullControl,
}

/// Who a grant is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Grantee {
    /// A user, by canonical id, with the display name it had when the grant was made.
    User { id: String, display_name: String },
    /// Everyone, including anonymous requests.
    AllUsers,
    /// Every request signed by some user.
    AuthenticatedUsers,
    /// S3's log-delivery group (kept and returned; nothing here delivers logs).
    LogDelivery,
}

/// One entry of an access control list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub grantee: Grantee,
    pub permission: Permission,
}

impl BucketRecord {
    /// The partition holding `key`.
    pub fn partition_of(&self, key: &str) -> u32 {
        self.partitions[self.partition_index(key)].id
    }

    /// The index in `partitions` of the partition holding `key`.
    pub fn partition_index(&self, key: &str) -> usize {
        self.partitions.partition_point(|p| p.start.as_str() <= key).saturating_sub(1)
    }

    /// The range of the partition at index `at` of `partitions`.
    pub fn bounds_at(&self, at: usize) -> PartitionBounds {
        PartitionBounds {
            start: self.partitions[at].start.clone(),
            end: self.partitions.get(at + 1).map(|p| p.start.clone()),
        }
    }
}

/// Checksums of an object's bytes, in S3's base64 text, as the client named them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checksums {
    pub crc32: Option<String>,
    pub crc32c: Option<String>,
    pub sha1: Option<String>,
    pub sha256: Option<String>,
    pub crc64nvme: Option<String>,
    /// A multipart object's checksum of S3's `COMPOSITE` type (over its parts' checksums, shown
    /// with `-N`); otherwise it covers the whole object (`FULL_OBJECT`).
    pub composite: bool,
}

impl Checksums {
    /// The checksum of `algorithm` (an S3 algorithm name), if held.
    pub fn get(&self, algorithm: &str) -> Option<&str> {
        match algorithm {
            "CRC32" => self.crc32.as_deref(),
            "CRC32C" => self.crc32c.as_deref(),
            "SHA1" => self.sha1.as_deref(),
            "SHA256" => self.sha256.as_deref(),
            "CRC64NVME" => self.crc64nvme.as_deref(),
            _ => None,
        }
    }

    /// Holds `value` as the checksum of `algorithm` (unknown names are ignored).
    pub fn set(&mut self, algorithm: &str, value: String) {
        match algorithm {
            "CRC32" => self.crc32 = Some(value),
            "CRC32C" => self.crc32c = Some(value),
            "SHA1" => self.sha1 = Some(value),
            "SHA256" => self.sha256 = Some(value),
            "CRC64NVME" => self.crc64nvme = Some(value),
            _ => {}
        }
    }

    pub fn is_empty(&self) -> bool {
        self.crc32.is_none()
            && self.crc32c.is_none()
            && self.sha1.is_none()
            && self.sha256.is_none()
            && self.crc64nvme.is_none()
    }
}

/// Content headers stored with an object and returned on GET and HEAD.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContentHeaders {
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub content_disposition: Option<String>,
    pub content_language: Option<String>,
    pub cache_control: Option<String>,
    /// RFC 7231 date text, as sent.
    pub expires: Option<String>,
}

/// An object's metadata and manifest: the head's xattr [`META_XATTR`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    pub key: String,
    pub size_bytes: u64,
    /// The ETag's value without quotes (hex MD5, or `md5-N` for multipart).
    pub etag: String,
    pub mtime_ns: u64,
    /// The write that made this head; its tails are `t.BUCKET.TAG.N`.
    pub tag: u128,
    /// Bytes per chunk: the head holds bytes `[0, chunk)`, tail `n` holds `[n*chunk, (n+1)*chunk)`.
    pub chunk_bytes: u64,
    pub tails: u32,
    pub content: ContentHeaders,
    pub user_meta: Vec<(String, String)>,
    pub checksums: Checksums,
    pub owner_id: String,
    pub owner_display: String,
    /// The object's access control list (the owner is the object's).
    pub grants: Vec<Grant>,
    /// The object's tags, in the order set.
    pub tags: Vec<(String, String)>,
    /// Parts of a multipart object (0: a simple object); its bytes are listed in the manifest
    /// object [`manifest_object`] of `tag`, and the head holds none.
    pub parts: u32,
    pub lock: Lock,
}

/// The head's xattr holding [`ObjectMeta`].
pub const META_XATTR: &str = "m";
/// The head's xattr holding the ETag alone, for `If-Match` guards.
pub const ETAG_XATTR: &str = "e";

/// Where a version sits in its key's list: the smaller, the newer (so that omap order lists a
/// key's versions newest first). A version id is its slot as 24 hex digits; the null version's
/// id is "null" whatever its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Slot {
    /// `u64::MAX` minus (about) the nanosecond the version was recorded: completions assign a
    /// slot below the newest one, so versions order by when they were recorded even when
    /// gateways' clocks disagree.
    pub inv_ns: u64,
    /// Random bits telling apart versions recorded in the same nanosecond.
    pub salt: u32,
}

impl Slot {
    pub const BYTES: usize = 12;

    pub fn bytes(self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[..8].copy_from_slice(&self.inv_ns.to_be_bytes());
        b[8..].copy_from_slice(&self.salt.to_be_bytes());
        b
    }

    pub fn from_bytes(b: &[u8]) -> Option<Slot> {
        if b.len() != Self::BYTES {
            return None;
        }
        Some(Slot {
            inv_ns: u64::from_be_bytes(b[..8].try_into().ok()?),
            salt: u32::from_be_bytes(b[8..].try_into().ok()?),
        })
    }

    /// The version id clients see.
    pub fn text(self) -> String {
        format!("{:016x}{:08x}", self.inv_ns, self.salt)
    }

    pub fn parse(text: &str) -> Option<Slot> {
        if text.len() != 24 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        Some(Slot {
            inv_ns: u64::from_str_radix(&text[..16], 16).ok()?,
            salt: u32::from_str_radix(&text[16..], 16).ok()?,
        })
    }

    /// The slot of an object written before its bucket had versioning (it has no record yet):
    /// by its modification time, so that it sorts older than versions recorded after it.
    pub fn of_legacy(mtime_ns: u64) -> Slot {
        Slot { inv_ns: u64::MAX - mtime_ns, salt: 0 }
    }
}

/// A key's version list at a glance (omap key [`key_state_key`]): every change to the key's
/// versions asserts and rewrites it, so it is what concurrent changes serialize on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyState {
    pub newest: Slot,
    /// The slot of the null version or null delete marker, if the key has one.
    pub null: Option<Slot>,
    /// Counts changes, so that every change rewrites the state (and a change planned on an
    /// older read fails its guard even when newest and null did not move).
    pub seq: u64,
}

/// A bucket index entry (omap key [`entry_key`]) and a version record (omap key
/// [`version_key`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    pub size_bytes: u64,
    pub etag: String,
    pub mtime_ns: u64,
    pub tag: u128,
    pub tails: u32,
    pub owner_id: String,
    pub owner_display: String,
    /// The object's data is a multipart manifest (GC reads it to find the parts).
    pub multipart: bool,
    /// The version's slot; `None` for an entry written while the key had no version records
    /// (its bucket never versioned, or not since): the null version.
    pub version: Option<Slot>,
    /// The null version, whose head is the key's [`head_object`]; otherwise the version's head
    /// is [`version_object`] of `tag`.
    pub null: bool,
    /// A delete marker (no data); never an entry, only a version record.
    pub delete_marker: bool,
}

impl IndexEntry {
    pub fn of(meta: &ObjectMeta) -> IndexEntry {
        IndexEntry {
            size_bytes: meta.size_bytes,
            etag: meta.etag.clone(),
            mtime_ns: meta.mtime_ns,
            tag: meta.tag,
            tails: meta.tails,
            owner_id: meta.owner_id.clone(),
            owner_display: meta.owner_display.clone(),
            multipart: meta.parts > 0,
            version: None,
            null: true,
            delete_marker: false,
        }
    }

    /// The version id clients see ("null" for the null version).
    pub fn version_id(&self) -> String {
        match self.version {
            Some(slot) if !self.null => slot.text(),
            _ => "null".to_string(),
        }
    }

    /// The object holding this version's head.
    pub fn head_name(&self, bucket_id: u64, key: &str) -> String {
        if self.null { head_object(bucket_id, key) } else { version_object(bucket_id, self.tag) }
    }

    /// What GC deletes once this entry's object is replaced (`None`: nothing outside the head).
    pub fn garbage(&self) -> Option<GcRecord> {
        if self.multipart {
            Some(GcRecord::Manifest { tag: self.tag })
        } else if self.tails > 0 {
            Some(GcRecord::Chunks { tag: self.tag, first: 1, count: Some(self.tails) })
        } else {
            None
        }
    }
}

/// A write or delete in progress (omap key [`pending_key`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingRecord {
    pub key: String,
    pub started_ns: u64,
    pub kind: PendingKind,
}

/// What a pending record's tag is writing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PendingKind {
    /// A PUT or DELETE of the key: its head decides.
    Write,
    /// Chunks of part `part` of upload `upload`; recorded (with this record removed in the same
    /// operation) or collected.
    Part { upload: u128, part: u32 },
    /// The completion of an upload, which it claimed by removing the upload record (kept here so
    /// that a completion that never committed gives the upload back).
    Complete { upload: Box<UploadRecord> },
    /// The abort of an upload, which claimed it by removing the upload record; its parts are
    /// then removed and collected.
    Abort { upload: u128 },
    /// A new version of the key in a versioning-enabled bucket: its head is the version object
    /// of the tag, which decides (there: recorded as the newest version; absent: collected).
    Version,
    /// The completion of an upload into a new version (as `Complete`, with the version object
    /// deciding).
    CompleteVersion { upload: Box<UploadRecord> },
}

/// Data to delete (omap key [`gc_key`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum GcRecord {
    /// Chunks `first..first+count` of `tag`, or when `count` is `None` (a write that died before
    /// it recorded them) every chunk found from `first`, probing past gaps of up to
    /// [`crate::objects::TAILS_IN_FLIGHT`].
    Chunks { tag: u128, first: u32, count: Option<u32> },
    /// A multipart object: every part its manifest names, then the manifest.
    Manifest { tag: u128 },
    /// Only the manifest object (a completion that never committed: its parts go back to the
    /// upload).
    ManifestOnly { tag: u128 },
    /// A version's head object [`version_object`] of `tag`, after what `then` names (its tails or
    /// parts), so that a collection cut short is repeated whole.
    Version { tag: u128, then: Option<Box<GcRecord>> },
}

/// A multipart upload in progress (omap key [`upload_key`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadRecord {
    pub key: String,
    pub upload: u128,
    pub initiated_ns: u64,
    pub owner_id: String,
    pub owner_display: String,
    /// The access control list the object gets.
    pub grants: Vec<Grant>,
    /// The tags the object gets.
    pub tags: Vec<(String, String)>,
    pub content: ContentHeaders,
    pub user_meta: Vec<(String, String)>,
    /// The checksum algorithm named at creation, which every part must then carry.
    pub checksum_algorithm: Option<String>,
    /// The object lock state the object gets.
    pub lock: Lock,
    /// The object's checksum will be of the `FULL_OBJECT` type (else `COMPOSITE`).
    pub full_object_checksum: bool,
}

/// A part uploaded (omap key [`part_key`]); its chunks are `t.BUCKET.TAG.0..chunks`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRecord {
    pub tag: u128,
    pub size_bytes: u64,
    pub etag: String,
    pub mtime_ns: u64,
    pub chunks: u32,
    pub checksums: Checksums,
}

/// One part of a multipart object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestPart {
    pub number: u32,
    pub tag: u128,
    pub size_bytes: u64,
    pub chunks: u32,
    pub etag: String,
    pub checksums: Checksums,
}

/// A multipart object's parts, in order (object [`manifest_object`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub parts: Vec<ManifestPart>,
    /// The upload whose completion made the object (a repeated completion of it answers with
    /// the object instead of `NoSuchUpload`).
    pub upload: u128,
}

/// Nanoseconds since the Unix epoch, now.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// Seconds since the Unix epoch, now.
pub fn unix_now_s() -> i64 {
    (now_ns() / 1_000_000_000) as i64
}

/// 128 random bits (a write's tag).
pub fn random_tag() -> Result<u128, GatewayError> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| GatewayError::Internal(format!("no randomness: {e}")))?;
    Ok(u128::from_le_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_keys_get_hashed_head_names_within_the_limit() {
        let short = head_object(7, "a/b.txt");
        assert_eq!(short, "h.0000000000000007.a/b.txt");
        let long = "k".repeat(MAX_KEY_BYTES);
        let name = head_object(7, &long);
        assert!(name.starts_with("H.0000000000000007.") && name.len() <= MAX_OBJECT_NAME_BYTES, "{name}");
        assert_ne!(head_object(7, &long), head_object(7, &"k".repeat(MAX_KEY_BYTES - 1)));
    }

    #[test]
    fn partition_object_names_parse_back() {
        assert_eq!(parse_partition_object(&partition_object(0xabc, 7)), Some((0xabc, 7)));
        assert_eq!(parse_partition_object("i.12.3"), None);
        assert_eq!(parse_partition_object("h.0000000000000001.k"), None);
        assert!(records_cursor() > entry_key("\u{10FFFF}\u{10FFFF}"));
        assert!(records_cursor() < pending_key(0));
    }

    #[test]
    fn partitions_cover_every_key() {
        let mut b = BucketRecord {
            name: "b".into(),
            id: 1,
            owner: "u".into(),
            owner_id: "x".into(),
            owner_display: "U".into(),
            created_ns: 0,
            region: "us-east-1".into(),
            partitions: vec![Partition { start: String::new(), id: 0 }],
            grants: Vec::new(),
            policy: None,
            public_access_block: None,
            ownership: None,
            tags: Vec::new(),
            versioning: Versioning::Unversioned,
            object_lock: None,
            lifecycle: Vec::new(),
            cors: Vec::new(),
        };
        assert_eq!(b.partition_of(""), 0);
        assert_eq!(b.partition_of("zzz"), 0);
        b.partitions.push(Partition { start: "m".into(), id: 5 });
        assert_eq!(b.partition_of("l"), 0);
        assert_eq!(b.partition_of("m"), 5);
        assert_eq!(b.partition_of("mz"), 5);
    }

    #[test]
    fn version_keys_order_newest_first_and_parse_back() {
        let old = Slot { inv_ns: 900, salt: 7 };
        let new = Slot { inv_ns: 100, salt: 9 };
        assert!(version_key("k", new) < version_key("k", old));
        assert!(version_key("k", old) < version_key("k0", new), "a key's versions are contiguous");
        assert_eq!(parse_version_key(&version_key("a b/c", old)), Some(("a b/c", old)));
        assert_eq!(parse_version_key(&version_key("", new)), Some(("", new)));
        assert_eq!(parse_version_key(&[VERSION_PREFIX, 1, 2]), None);
        assert_eq!(Slot::parse(&old.text()), Some(old));
        assert_eq!(Slot::parse("null"), None);
        assert_eq!(Slot::parse(&"g".repeat(24)), None);
        assert!(key_state_key("k") > version_key("\u{10FFFF}", old));
    }

    #[test]
    fn records_round_trip_and_refuse_garbage() {
        let r = KeyRecord { user: "u".into(), secret: "s".into() };
        assert_eq!(decode::<KeyRecord>(&encode(&r), "key").unwrap(), r);
        assert!(matches!(decode::<KeyRecord>(&[], "key"), Err(GatewayError::Corrupt(_))));
        assert!(matches!(decode::<KeyRecord>(&[9, 1], "key"), Err(GatewayError::Corrupt(_))));
        assert!(matches!(decode::<KeyRecord>(&[1, 200], "key"), Err(GatewayError::Corrupt(_))));
    }
}
