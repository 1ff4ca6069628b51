//! The S3 API over the cluster: s3s parses, authenticates and answers in S3's wire format; this
//! file maps each operation onto users, buckets, the index and objects.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use s3s::dto::*;
use s3s::{S3, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};
use shoal_client::Client;

use crate::access::{Action, Records};
use crate::auth::KeyCache;
use crate::error::GatewayError;
use crate::index;
use crate::layout::{self, BucketRecord, Checksums, ContentHeaders, ObjectMeta, UserRecord};
use crate::meta;
use crate::objects::{self, BodyCheck, MemoryBudget, WriteArgs, WriteCondition, WriteError};
use crate::text::{hex, hex_decode, uri_encode};

/// Most keys in one listing page (S3's limit).
pub(crate) const MAX_LIST_KEYS: i32 = 1000;
/// Most bytes of user metadata on one object (S3's limit: keys and values).
const MAX_USER_META_BYTES: usize = 2048;

/// The Content-Type of objects stored without one (S3's).
const DEFAULT_CONTENT_TYPE: &str = "binary/octet-stream";

/// Settings of the S3 service.
#[derive(Debug, Clone)]
pub struct ServiceSettings {
    /// The region this gateway answers for (and checks in signatures).
    pub region: String,
    /// How long replaced data stays readable before GC deletes it.
    pub gc_delay: Duration,
    /// A pending write older than this is completed by the collector (decision 0014).
    pub lease: Duration,
}

/// The S3 service: stateless apart from caches; every gateway over one cluster serves the same
/// data.
#[derive(Clone)]
pub struct Gateway {
    pub(crate) client: Client,
    pub(crate) budget: MemoryBudget,
    pub(crate) keys: Arc<KeyCache>,
    pub(crate) settings: Arc<ServiceSettings>,
    /// Copies running at once (see [`crate::s3copy::COPIES_AT_ONCE`]).
    pub(crate) copies: Arc<tokio::sync::Semaphore>,
    /// Cached user and bucket records (see [`crate::access`]).
    pub(crate) records: Arc<Records>,
}

impl Gateway {
    pub fn new(client: Client, budget: MemoryBudget, settings: ServiceSettings) -> Gateway {
        let keys = Arc::new(KeyCache::new(client.clone()));
        let copies = Arc::new(tokio::sync::Semaphore::new(crate::s3copy::COPIES_AT_ONCE));
        Gateway { client, budget, keys, settings: Arc::new(settings), copies, records: Arc::new(Records::new()) }
    }

    pub(crate) fn gc_delay_ns(&self) -> u64 {
        self.settings.gc_delay.as_nanos() as u64
    }
}

pub(crate) fn timestamp(ns: u64) -> Timestamp {
    Timestamp::from(SystemTime::UNIX_EPOCH + Duration::from_nanos(ns))
}

fn owner_of(user: &UserRecord) -> Owner {
    Owner { display_name: Some(user.display_name.clone()), id: Some(user.canonical_id.clone()) }
}

fn entry_owner(e: &layout::IndexEntry) -> Owner {
    Owner { display_name: Some(e.owner_display.clone()), id: Some(e.owner_id.clone()) }
}

pub(crate) fn http_date(t: &Timestamp) -> Option<String> {
    let mut out = Vec::new();
    t.format(TimestampFormat::HttpDate, &mut out).ok()?;
    String::from_utf8(out).ok()
}

fn parse_http_date(s: &str) -> Option<Timestamp> {
    Timestamp::parse(TimestampFormat::HttpDate, s).ok()
}

/// The content headers a request's input carries (every input names them alike).
macro_rules! content_headers {
    ($input:expr) => {
        ContentHeaders {
            content_type: $input.content_type.as_ref().map(ToString::to_string),
            content_encoding: $crate::s3impl::stored_encoding($input.content_encoding.as_deref()),
            content_disposition: $input.content_disposition.clone(),
            content_language: $input.content_language.clone(),
            cache_control: $input.cache_control.clone(),
            expires: $input.expires.as_ref().and_then(http_date),
        }
    };
}
pub(crate) use content_headers;

/// The Content-Encoding to store: the client's, without `aws-chunked` (which describes how
/// this request's body was framed, not the object).
pub(crate) fn stored_encoding(sent: Option<&str>) -> Option<String> {
    let kept: Vec<&str> =
        sent?.split(',').map(str::trim).filter(|t| !t.is_empty() && !t.eq_ignore_ascii_case("aws-chunked")).collect();
    (!kept.is_empty()).then(|| kept.join(", "))
}

/// The `x-amz-checksum-*` values a request (or a part it lists) names, from any s3s input
/// with the five `checksum_*` fields.
macro_rules! checksums_of {
    ($input:expr) => {
        $crate::layout::Checksums {
            crc32: $input.checksum_crc32.clone(),
            crc32c: $input.checksum_crc32c.clone(),
            sha1: $input.checksum_sha1.clone(),
            sha256: $input.checksum_sha256.clone(),
            crc64nvme: $input.checksum_crc64nvme.clone(),
            composite: false,
        }
    };
}
pub(crate) use checksums_of;

/// The [`Verifier`] of a request whose body is `input.body`: its `Content-MD5`, its
/// `x-amz-checksum-*` headers, its checksum algorithm, and the trailer it announces.
macro_rules! body_verifier {
    ($req:expr, $input:expr) => {
        Verifier::new(
            // An empty Content-MD5 header is a digest that cannot match, not an absent one.
            $input.content_md5.clone().or_else(|| {
                $req.headers.get("content-md5").map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            }),
            checksums_of!($input),
            $input.checksum_algorithm.as_ref(),
            $req.trailing_headers.clone(),
            $req.headers.get("x-amz-trailer").and_then(|v| v.to_str().ok()).unwrap_or(""),
        )
    };
}
pub(crate) use body_verifier;

/// The condition a write (a PUT or a completion) is guarded by, from its `If-None-Match` and
/// `If-Match` headers.
pub(crate) fn write_condition(
    if_none_match: Option<&ETagCondition>,
    if_match: Option<&ETagCondition>,
) -> S3Result<WriteCondition> {
    match (if_none_match, if_match) {
        (Some(ETagCondition::Any), None) => Ok(WriteCondition::Absent),
        (Some(ETagCondition::ETag(e)), None) => Ok(WriteCondition::NotETag(e.value().to_string())),
        (Some(_), Some(_)) => Err(s3_error!(InvalidRequest, "a write takes If-None-Match or If-Match, not both")),
        (None, Some(ETagCondition::ETag(e))) => Ok(WriteCondition::ETag(e.value().to_string())),
        (None, Some(ETagCondition::Any)) => Ok(WriteCondition::Exists),
        (None, None) => Ok(WriteCondition::None),
    }
}

/// The checksum algorithms the gateway computes, verifies and stores.
pub(crate) const CHECKSUM_ALGORITHMS: [&str; 5] = [
    ChecksumAlgorithm::CRC32,
    ChecksumAlgorithm::CRC32C,
    ChecksumAlgorithm::SHA1,
    ChecksumAlgorithm::SHA256,
    ChecksumAlgorithm::CRC64NVME,
];

/// The name of a checksum algorithm the gateway computes, or `InvalidRequest`.
pub(crate) fn checksum_name(a: &ChecksumAlgorithm) -> S3Result<&'static str> {
    CHECKSUM_ALGORITHMS
        .into_iter()
        .find(|name| a.as_str() == *name)
        .ok_or_else(|| s3_error!(InvalidRequest, "unsupported checksum algorithm {:?}", a.as_str()))
}

/// Makes `hasher` compute algorithm `name` (one of [`CHECKSUM_ALGORITHMS`]).
pub(crate) fn enable_checksum(hasher: &mut s3s::checksum::ChecksumHasher, name: &str) {
    match name {
        ChecksumAlgorithm::CRC32 => hasher.crc32 = Some(Default::default()),
        ChecksumAlgorithm::CRC32C => hasher.crc32c = Some(Default::default()),
        ChecksumAlgorithm::SHA1 => hasher.sha1 = Some(Default::default()),
        ChecksumAlgorithm::SHA256 => hasher.sha256 = Some(Default::default()),
        ChecksumAlgorithm::CRC64NVME => hasher.crc64nvme = Some(Default::default()),
        _ => debug_assert!(false, "{name} is not a checksum algorithm the gateway computes"),
    }
}

/// Checks the body against `Content-MD5` and every `x-amz-checksum-*` the client sent, in
/// headers or in the trailer of an `aws-chunked` body.
pub(crate) struct Verifier {
    hasher: s3s::checksum::ChecksumHasher,
    content_md5: Option<String>,
    expected: Checksums,
    trailers: Option<s3s::TrailingHeaders>,
}

impl Verifier {
    pub(crate) fn new(
        content_md5: Option<String>,
        expected: Checksums,
        algorithm: Option<&ChecksumAlgorithm>,
        trailers: Option<s3s::TrailingHeaders>,
        trailer_names: &str,
    ) -> S3Result<Verifier> {
        let mut hasher = s3s::checksum::ChecksumHasher::default();
        if let Some(a) = algorithm {
            enable_checksum(&mut hasher, checksum_name(a)?);
        }
        // A trailer's checksum is announced in `x-amz-trailer` before the body: only the
        // algorithms named there or in headers are computed (hashing every body with all five,
        // SHA-256 included, would cost more CPU than the rest of a PUT).
        let announced = |header: &str| trailer_names.split(',').any(|n| n.trim().eq_ignore_ascii_case(header));
        let pairs = [
            (ChecksumAlgorithm::CRC32, "x-amz-checksum-crc32", expected.crc32.is_some()),
            (ChecksumAlgorithm::CRC32C, "x-amz-checksum-crc32c", expected.crc32c.is_some()),
            (ChecksumAlgorithm::SHA1, "x-amz-checksum-sha1", expected.sha1.is_some()),
            (ChecksumAlgorithm::SHA256, "x-amz-checksum-sha256", expected.sha256.is_some()),
            (ChecksumAlgorithm::CRC64NVME, "x-amz-checksum-crc64nvme", expected.crc64nvme.is_some()),
        ];
        for (algorithm, header, sent) in pairs {
            if sent || (trailers.is_some() && announced(header)) {
                enable_checksum(&mut hasher, algorithm);
            }
        }
        Ok(Verifier { hasher, content_md5, expected, trailers })
    }
}

impl BodyCheck for Verifier {
    fn update(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
    }

    fn finish(self: Box<Self>, md5_hex: &str) -> Result<Checksums, S3Error> {
        let Verifier { hasher, content_md5, mut expected, trailers } = *self;
        if let Some(b64) = content_md5 {
            let sent = base64_decode(&b64).ok_or_else(|| s3_error!(InvalidDigest, "Content-MD5 is not base64"))?;
            if sent.len() != 16 {
                return Err(s3_error!(InvalidDigest, "Content-MD5 is not 16 bytes"));
            }
            let sent_hex: String = sent.iter().map(|b| format!("{b:02x}")).collect();
            if sent_hex != md5_hex {
                return Err(s3_error!(BadDigest, "the body's MD5 does not match Content-MD5"));
            }
        }
        if let Some(t) = trailers
            && let Some(headers) = t.take()
        {
            let field = |name: &str| -> S3Result<Option<String>> {
                headers
                    .get(name)
                    .map(|v| {
                        v.to_str().map(str::to_string).map_err(|_| s3_error!(InvalidRequest, "bad trailer {name}"))
                    })
                    .transpose()
            };
            expected.crc32 = field("x-amz-checksum-crc32")?.or(expected.crc32);
            expected.crc32c = field("x-amz-checksum-crc32c")?.or(expected.crc32c);
            expected.sha1 = field("x-amz-checksum-sha1")?.or(expected.sha1);
            expected.sha256 = field("x-amz-checksum-sha256")?.or(expected.sha256);
            expected.crc64nvme = field("x-amz-checksum-crc64nvme")?.or(expected.crc64nvme);
        }
        let got = hasher.finalize();
        let pairs = [
            ("CRC32", &expected.crc32, &got.checksum_crc32),
            ("CRC32C", &expected.crc32c, &got.checksum_crc32c),
            ("SHA1", &expected.sha1, &got.checksum_sha1),
            ("SHA256", &expected.sha256, &got.checksum_sha256),
            ("CRC64NVME", &expected.crc64nvme, &got.checksum_crc64nvme),
        ];
        for (name, want, have) in pairs {
            if let Some(want) = want
                && Some(want) != have.as_ref()
            {
                return Err(s3_error!(BadDigest, "the body's {name} checksum does not match the one sent"));
            }
        }
        // Only the checksums the client asked for are stored and returned.
        Ok(expected)
    }
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    base64_simd::STANDARD.decode_to_vec(s).ok()
}

pub(crate) fn write_error(e: WriteError) -> S3Error {
    match e {
        WriteError::Gateway(g) => g.into(),
        WriteError::Refused(s) => s,
        WriteError::Body(why) => s3_error!(IncompleteBody, "the request body ended early or was malformed: {why}"),
    }
}

pub(crate) fn user_meta_of(metadata: Option<Metadata>) -> S3Result<Vec<(String, String)>> {
    let mut pairs: Vec<(String, String)> = metadata.unwrap_or_default().into_iter().collect();
    pairs.sort();
    let bytes: usize = pairs.iter().map(|(k, v)| k.len() + v.len()).sum();
    if bytes > MAX_USER_META_BYTES {
        return Err(s3_error!(
            MetadataTooLarge,
            "user metadata is {bytes} bytes, over the limit of {MAX_USER_META_BYTES}"
        ));
    }
    Ok(pairs)
}

fn parts_count(meta: &ObjectMeta) -> Option<i32> {
    (meta.parts > 0).then(|| i32::try_from(meta.parts).unwrap_or(i32::MAX))
}

/// The answer to a GET or HEAD of a part number the object does not have: 400 `InvalidPart`,
/// as ceph/s3-tests expects (RGW's answer; AWS documents 416 `InvalidPartNumber`, and clients
/// treat both as "no such part").
fn invalid_part_number(why: String) -> S3Error {
    GatewayError::InvalidPart(why).into()
}

/// The bytes of part `n` (a simple object is one part), with the Content-Range to answer.
fn part_range(
    meta: &ObjectMeta,
    manifest: Option<&layout::Manifest>,
    n: i32,
) -> S3Result<(std::ops::Range<u64>, Option<String>)> {
    let (start, len) = match manifest {
        None if n == 1 => (0, meta.size_bytes),
        None => return Err(invalid_part_number(format!("the object has one part, not {n}"))),
        Some(m) => {
            let i = usize::try_from(n).ok().filter(|i| (1..=m.parts.len()).contains(i));
            let Some(i) = i else {
                return Err(invalid_part_number(format!("the object has {} parts, not {n}", m.parts.len())));
            };
            let start: u64 = m.parts[..i - 1].iter().map(|p| p.size_bytes).sum();
            (start, m.parts[i - 1].size_bytes)
        }
    };
    let range = start..start + len;
    let content_range =
        (len > 0 && manifest.is_some()).then(|| format!("bytes {}-{}/{}", range.start, range.end - 1, meta.size_bytes));
    Ok((range, content_range))
}

pub(crate) fn etag_of(meta_etag: &str) -> ETag {
    ETag::Strong(meta_etag.to_string())
}

/// Evaluates GET/HEAD conditions (RFC 9110 order: If-Match, If-Unmodified-Since, If-None-Match,
/// If-Modified-Since).
pub(crate) fn check_read_conditions(
    meta: &ObjectMeta,
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
    if_modified_since: Option<&Timestamp>,
    if_unmodified_since: Option<&Timestamp>,
) -> S3Result<()> {
    let mtime_s = meta.mtime_ns / 1_000_000_000;
    let secs = |t: &Timestamp| {
        let odt: time::OffsetDateTime = t.clone().into();
        odt.unix_timestamp().max(0) as u64
    };
    let matches = |c: &ETagCondition| match c {
        ETagCondition::Any => true,
        ETagCondition::ETag(e) => e.value() == meta.etag,
    };
    if let Some(c) = if_match {
        if !matches(c) {
            return Err(s3_error!(PreconditionFailed, "If-Match does not hold"));
        }
    } else if let Some(t) = if_unmodified_since
        && mtime_s > secs(t)
    {
        return Err(s3_error!(PreconditionFailed, "modified since the If-Unmodified-Since date"));
    }
    if let Some(c) = if_none_match {
        if matches(c) {
            return Err(not_modified(meta));
        }
    } else if let Some(t) = if_modified_since
        && mtime_s <= secs(t)
    {
        return Err(not_modified(meta));
    }
    Ok(())
}

/// The bytes a `Range` header selects of an object of `size_bytes` (all of them without one),
/// and the `Content-Range` to answer; `InvalidRange` when it selects nothing.
fn resolve_range(range: Option<&Range>, size_bytes: u64) -> S3Result<(std::ops::Range<u64>, Option<String>)> {
    let Some(r) = range else { return Ok((0..size_bytes, None)) };
    let resolved = r
        .check(size_bytes)
        .map_err(|_| s3_error!(InvalidRange, "the range is outside the object's {size_bytes} bytes"))?;
    let header = format!("bytes {}-{}/{size_bytes}", resolved.start, resolved.end - 1);
    Ok((resolved, Some(header)))
}

/// The stored checksums to answer, with `ChecksumMode=ENABLED` only: the object's on a
/// whole-object read, part `part`'s (of the object's checksum type) on a read of a part of a
/// multipart object, none on a range.
fn returned_checksums(
    meta: &ObjectMeta,
    manifest: Option<&layout::Manifest>,
    part: Option<i32>,
    mode: Option<&ChecksumMode>,
    whole: bool,
) -> Checksums {
    if mode.is_none_or(|m| m.as_str() != ChecksumMode::ENABLED) {
        return Checksums::default();
    }
    let of_part = part.and_then(|n| manifest?.parts.iter().find(|p| i64::from(p.number) == i64::from(n)));
    match of_part {
        Some(p) => Checksums { composite: meta.checksums.composite, ..p.checksums.clone() },
        None if whole => meta.checksums.clone(),
        None => Checksums::default(),
    }
}

/// The `x-amz-expiration` header of a read: only the current version (no id named) has one.
fn expiration_of(bucket: &BucketRecord, meta: &ObjectMeta, version_id: Option<&str>) -> Option<String> {
    if version_id.is_some() {
        return None;
    }
    crate::s3lifecycle::expiration_header(bucket, meta)
}

/// 304 Not Modified, with the ETag and Last-Modified a cache revalidates against (RFC 9110).
fn not_modified(meta: &ObjectMeta) -> S3Error {
    let mut e = S3Error::with_message(S3ErrorCode::Custom("NotModified".into()), "Not Modified");
    e.set_status_code(hyper::StatusCode::NOT_MODIFIED);
    let mut headers = hyper::HeaderMap::new();
    if let Ok(v) = hyper::header::HeaderValue::from_str(&format!("\"{}\"", meta.etag)) {
        headers.insert(hyper::header::ETAG, v);
    }
    if let Some(date) = http_date(&timestamp(meta.mtime_ns))
        && let Ok(v) = hyper::header::HeaderValue::from_str(&date)
    {
        headers.insert(hyper::header::LAST_MODIFIED, v);
    }
    e.set_headers(headers);
    e
}

/// An object's stored content headers in s3s's types.
struct Content {
    content_type: Option<ContentType>,
    encoding: Option<String>,
    disposition: Option<String>,
    language: Option<String>,
    cache_control: Option<String>,
    expires: Option<Timestamp>,
}

fn content_of(meta: &ObjectMeta) -> Content {
    let c = &meta.content;
    Content {
        // An object stored without a type is served as S3 serves it: as opaque bytes.
        content_type: c.content_type.as_deref().unwrap_or(DEFAULT_CONTENT_TYPE).parse().ok(),
        encoding: c.content_encoding.clone(),
        disposition: c.content_disposition.clone(),
        language: c.content_language.clone(),
        cache_control: c.cache_control.clone(),
        expires: c.expires.as_deref().and_then(parse_http_date),
    }
}

fn tag_count(meta: &ObjectMeta) -> Option<i32> {
    (!meta.tags.is_empty()).then_some(meta.tags.len() as i32)
}

fn metadata_of(meta: &ObjectMeta) -> Option<Metadata> {
    if meta.user_meta.is_empty() {
        return None;
    }
    Some(meta.user_meta.iter().cloned().collect::<HashMap<_, _>>())
}

#[async_trait::async_trait]
impl S3 for Gateway {
    async fn list_buckets(&self, req: S3Request<ListBucketsInput>) -> S3Result<S3Response<ListBucketsOutput>> {
        let user = self.requester(&req).await?;
        let mut buckets = meta::list_buckets(&self.client, &user).await?;
        buckets.sort_by(|a, b| a.name.cmp(&b.name));
        let prefix = req.input.prefix.clone();
        let max = match req.input.max_buckets {
            None => usize::MAX,
            Some(n @ 1..=10_000) => n as usize,
            Some(n) => return Err(s3_error!(InvalidArgument, "max-buckets is 1 to 10000, not {n}")),
        };
        // The continuation token is the last name of the previous page, hex-encoded.
        let after =
            match &req.input.continuation_token {
                Some(t) => Some(hex_decode(t).and_then(|b| String::from_utf8(b).ok()).ok_or_else(|| {
                    s3_error!(InvalidArgument, "the continuation token is not one this gateway gave")
                })?),
                None => None,
            };
        let mut matching = buckets
            .into_iter()
            .filter(|b| prefix.as_deref().is_none_or(|p| b.name.starts_with(p)))
            .filter(|b| after.as_deref().is_none_or(|a| b.name.as_str() > a))
            .peekable();
        let mut page = Vec::new();
        while page.len() < max
            && let Some(b) = matching.next()
        {
            page.push(b);
        }
        let continuation_token =
            (matching.peek().is_some()).then(|| page.last().map(|b| hex(b.name.as_bytes()))).flatten();
        let list: Vec<Bucket> = page
            .into_iter()
            .map(|b| Bucket {
                name: Some(b.name.clone()),
                creation_date: Some(timestamp(b.created_ns)),
                bucket_region: Some(b.region.clone()),
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(list),
            owner: Some(owner_of(&user)),
            prefix,
            continuation_token,
        }))
    }

    async fn create_bucket(&self, req: S3Request<CreateBucketInput>) -> S3Result<S3Response<CreateBucketOutput>> {
        let user = self.requester(&req).await?;
        let region = req
            .input
            .create_bucket_configuration
            .as_ref()
            .and_then(|c| c.location_constraint.as_ref())
            .map(|l| l.as_str().to_string());
        if let Some(r) = &region
            && r != &self.settings.region
        {
            return Err(s3_error!(
                InvalidLocationConstraint,
                "this gateway serves region {:?}, not {r:?}",
                self.settings.region
            ));
        }
        let owner = crate::acl::Party { id: user.canonical_id.clone(), display_name: user.display_name.clone() };
        let grants = self.request_grants(&req, &owner, None).await?;
        let ownership =
            req.input.object_ownership.as_ref().map(|o| crate::s3config::ownership_of(o.as_str())).transpose()?;
        let name = &req.input.bucket;
        crate::s3config::check_ownership_with_acl(ownership, &owner.id, &grants)?;
        let object_lock = req.input.object_lock_enabled_for_bucket.unwrap_or(false);
        let created = meta::create_bucket(
            &self.client,
            &user,
            name,
            &self.settings.region,
            grants.clone(),
            ownership,
            object_lock,
        );
        match created.await {
            // us-east-1 answers an owner's re-creation with success, changing nothing, as long
            // as it asks for the ACL the bucket has (else the name is taken: BucketAlreadyExists,
            // as RGW answers); every other region answers BucketAlreadyOwnedByYou.
            Err(GatewayError::BucketExists { by_you: true, .. }) if self.settings.region == "us-east-1" => {
                if meta::get_bucket(&self.client, name).await?.grants != grants {
                    return Err(GatewayError::BucketExists { name: name.to_string(), by_you: false }.into());
                }
            }
            other => {
                other?;
            }
        }
        self.forget_bucket(name);
        Ok(S3Response::new(CreateBucketOutput { location: Some(format!("/{}", req.input.bucket)) }))
    }

    async fn head_bucket(&self, req: S3Request<HeadBucketInput>) -> S3Result<S3Response<HeadBucketOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::ListBucket, None)?;
        let bucket = access.bucket;
        Ok(S3Response::new(HeadBucketOutput { bucket_region: Some(bucket.region), ..Default::default() }))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::GetBucketLocation, None)?;
        let bucket = access.bucket;
        // S3 answers an empty constraint for us-east-1.
        let location = (bucket.region != "us-east-1").then(|| BucketLocationConstraint::from(bucket.region));
        Ok(S3Response::new(GetBucketLocationOutput { location_constraint: location }))
    }

    async fn delete_bucket(&self, req: S3Request<DeleteBucketInput>) -> S3Result<S3Response<DeleteBucketOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::DeleteBucket, None)?;
        // Deletes are made to free space: a full cluster takes them (decision 0045).
        let deleted = shoal_client::freeing_space(meta::delete_bucket(&self.client, &access.bucket)).await;
        self.forget_bucket(&access.bucket.name);
        deleted?;
        Ok(S3Response::new(DeleteBucketOutput {}))
    }

    async fn put_object(&self, req: S3Request<PutObjectInput>) -> S3Result<S3Response<PutObjectOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::PutObject, Some(&req.input.key))?;
        let (owner, grants) = self.new_object_acl(&req, &access).await?;
        let tags = crate::s3config::request_tags(req.input.tagging.as_deref())?;
        let bucket = access.bucket;
        let input = req.input;
        if input.key.len() > layout::MAX_KEY_BYTES {
            return Err(s3_error!(KeyTooLongError, "keys are at most {} bytes", layout::MAX_KEY_BYTES));
        }
        let condition = write_condition(input.if_none_match.as_ref(), input.if_match.as_ref())?;
        let lock = crate::s3lock::version_lock!(&bucket, input)?;
        let verifier = body_verifier!(req, input)?;
        let args = WriteArgs {
            lock,
            content: content_headers!(input),
            user_meta: user_meta_of(input.metadata)?,
            owner_id: owner.id,
            owner_display: owner.display_name,
            grants,
            tags,
            condition,
            shape: objects::BodyShape {
                size_hint: input.content_length.and_then(|l| u64::try_from(l).ok()),
                read_ahead_bytes: 0,
            },
            versioning: bucket.versioning,
            gc_delay_ns: self.gc_delay_ns(),
            lease: self.settings.lease,
        };
        let Some(body) = input.body else {
            return Err(s3_error!(IncompleteBody, "the request has no body"));
        };
        let written = objects::put(&self.client, &self.budget, &bucket, &input.key, body, Box::new(verifier), args)
            .await
            .map_err(write_error)?;
        let meta = written.meta;
        Ok(S3Response::new(PutObjectOutput {
            expiration: crate::s3lifecycle::expiration_header(&bucket, &meta),
            version_id: written.version_id,
            e_tag: Some(etag_of(&meta.etag)),
            checksum_crc32: meta.checksums.crc32,
            checksum_crc32c: meta.checksums.crc32c,
            checksum_sha1: meta.checksums.sha1,
            checksum_sha256: meta.checksums.sha256,
            checksum_crc64nvme: meta.checksums.crc64nvme,
            size: i64::try_from(meta.size_bytes).ok(),
            ..Default::default()
        }))
    }

    async fn get_object(&self, req: S3Request<GetObjectInput>) -> S3Result<S3Response<GetObjectOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        let input = req.input;
        let bucket = &access.bucket;
        if input.part_number.is_some() && input.range.is_some() {
            return Err(s3_error!(InvalidRequest, "a GET names a Range or a partNumber, not both"));
        }
        // Read the head's share of the range with the metadata when the range does not need the
        // size to resolve (a suffix range or a part does).
        let guess = match (&input.range, input.part_number) {
            (_, Some(_)) => None,
            (None, None) => Some(0..layout::CHUNK_BYTES),
            (Some(Range::Int { first, last }), None) => Some(*first..last.map_or(u64::MAX, |l| l.saturating_add(1))),
            (Some(Range::Suffix { .. }), None) => None,
        };
        let (head, version_id) = self.locate(&access, &input.key, input.version_id.as_deref()).await?;
        let Some(mut obj) = objects::open(&self.client, &head, &input.key, guess.clone()).await? else {
            return Err(self.vanished(&access, &input.key, input.version_id.as_deref()));
        };
        let meta = obj.meta.clone();
        let action = if input.version_id.is_some() { Action::GetObjectVersion } else { Action::GetObject };
        access.require_object(action, &input.key, &meta)?;
        check_read_conditions(
            &meta,
            input.if_match.as_ref(),
            input.if_none_match.as_ref(),
            input.if_modified_since.as_ref(),
            input.if_unmodified_since.as_ref(),
        )?;
        let manifest = objects::manifest_of(&self.client, bucket.id, &meta).await?;
        let (range, content_range) = match input.part_number {
            Some(n) => part_range(&meta, manifest.as_ref(), n)?,
            None => resolve_range(input.range.as_ref(), meta.size_bytes)?,
        };
        if guess.as_ref().map(|g| g.start) != Some(range.start) {
            // The range needed the size: read the head's share now.
            obj = objects::open(&self.client, &head, &input.key, Some(range.clone()))
                .await?
                .filter(|o| o.meta.tag == meta.tag)
                .ok_or_else(|| s3_error!(NoSuchKey, "the object changed while it was read"))?;
        }
        let length = range.end - range.start;
        // A range's bytes do not match the whole object's checksums: none are returned then.
        let whole = content_range.is_none() || meta.parts == 0 && input.part_number == Some(1);
        let sums = returned_checksums(&meta, manifest.as_ref(), input.part_number, input.checksum_mode.as_ref(), whole);
        let checksum_type = crate::s3multipart::checksum_type_of(&sums);
        let stream =
            objects::read_stream(self.client.clone(), Some(self.budget.clone()), bucket.id, obj, manifest, range);
        let body = StreamingBlob::wrap(stream);
        let c = content_of(&meta);
        let (lock_mode, lock_until, legal_hold) = crate::s3lock::lock_fields(&meta.lock);
        let out = GetObjectOutput {
            expiration: expiration_of(bucket, &meta, input.version_id.as_deref()),
            body: Some(body),
            version_id,
            object_lock_mode: lock_mode,
            object_lock_retain_until_date: lock_until,
            object_lock_legal_hold_status: legal_hold,
            tag_count: tag_count(&meta),
            parts_count: parts_count(&meta),
            content_length: i64::try_from(length).ok(),
            content_range,
            accept_ranges: Some("bytes".into()),
            e_tag: Some(etag_of(&meta.etag)),
            last_modified: Some(timestamp(meta.mtime_ns)),
            metadata: metadata_of(&meta),
            content_type: input.response_content_type.or(c.content_type),
            content_encoding: input.response_content_encoding.or(c.encoding),
            content_disposition: input.response_content_disposition.or(c.disposition),
            content_language: input.response_content_language.or(c.language),
            cache_control: input.response_cache_control.or(c.cache_control),
            expires: input.response_expires.or(c.expires),
            checksum_crc32: sums.crc32,
            checksum_crc32c: sums.crc32c,
            checksum_sha1: sums.sha1,
            checksum_sha256: sums.sha256,
            checksum_crc64nvme: sums.crc64nvme,
            checksum_type,
            ..Default::default()
        };
        Ok(S3Response::new(out))
    }

    async fn head_object(&self, req: S3Request<HeadObjectInput>) -> S3Result<S3Response<HeadObjectOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        let input = req.input;
        let bucket = &access.bucket;
        let (head, version_id) = self.locate(&access, &input.key, input.version_id.as_deref()).await?;
        let Some(meta) = objects::head_meta_at(&self.client, &head, &input.key).await? else {
            return Err(self.vanished(&access, &input.key, input.version_id.as_deref()));
        };
        let action = if input.version_id.is_some() { Action::GetObjectVersion } else { Action::GetObject };
        access.require_object(action, &input.key, &meta)?;
        check_read_conditions(
            &meta,
            input.if_match.as_ref(),
            input.if_none_match.as_ref(),
            input.if_modified_since.as_ref(),
            input.if_unmodified_since.as_ref(),
        )?;
        let manifest = match input.part_number {
            Some(_) => objects::manifest_of(&self.client, bucket.id, &meta).await?,
            None => None,
        };
        let (range, content_range) = match input.part_number {
            Some(n) => part_range(&meta, manifest.as_ref(), n)?,
            None => resolve_range(input.range.as_ref(), meta.size_bytes)?,
        };
        let content_length = range.end - range.start;
        let c = content_of(&meta);
        let sums = returned_checksums(&meta, manifest.as_ref(), input.part_number, input.checksum_mode.as_ref(), true);
        let checksum_type = crate::s3multipart::checksum_type_of(&sums);
        let (lock_mode, lock_until, legal_hold) = crate::s3lock::lock_fields(&meta.lock);
        let mut resp = S3Response::new(HeadObjectOutput {
            expiration: expiration_of(bucket, &meta, input.version_id.as_deref()),
            version_id,
            object_lock_mode: lock_mode,
            object_lock_retain_until_date: lock_until,
            object_lock_legal_hold_status: legal_hold,
            parts_count: parts_count(&meta),
            content_length: i64::try_from(content_length).ok(),
            content_range,
            accept_ranges: Some("bytes".into()),
            e_tag: Some(etag_of(&meta.etag)),
            last_modified: Some(timestamp(meta.mtime_ns)),
            metadata: metadata_of(&meta),
            content_type: c.content_type,
            content_encoding: c.encoding,
            content_disposition: c.disposition,
            content_language: c.language,
            cache_control: c.cache_control,
            expires: c.expires,
            checksum_crc32: sums.crc32,
            checksum_crc32c: sums.crc32c,
            checksum_sha1: sums.sha1,
            checksum_sha256: sums.sha256,
            checksum_crc64nvme: sums.crc64nvme,
            checksum_type,
            ..Default::default()
        });
        // s3s's HEAD output has no field for it; GET's does.
        if let Some(n) = tag_count(&meta) {
            resp.headers.insert("x-amz-tagging-count", n.into());
        }
        Ok(resp)
    }

    async fn delete_object(&self, req: S3Request<DeleteObjectInput>) -> S3Result<S3Response<DeleteObjectOutput>> {
        shoal_client::freeing_space(self.delete_object_op(req)).await
    }

    async fn copy_object(&self, req: S3Request<CopyObjectInput>) -> S3Result<S3Response<CopyObjectOutput>> {
        self.copy(req).await
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        self.copy_part(req).await
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        self.mp_create(req).await
    }

    async fn upload_part(&self, req: S3Request<UploadPartInput>) -> S3Result<S3Response<UploadPartOutput>> {
        self.mp_upload_part(req).await
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        self.mp_complete(req).await
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        shoal_client::freeing_space(self.mp_abort(req)).await
    }

    async fn list_parts(&self, req: S3Request<ListPartsInput>) -> S3Result<S3Response<ListPartsOutput>> {
        self.mp_list_parts(req).await
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        self.mp_list_uploads(req).await
    }

    async fn delete_objects(&self, req: S3Request<DeleteObjectsInput>) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        let objects_in = req.input.delete.objects;
        if objects_in.len() > 1000 {
            return Err(s3_error!(MalformedXML, "at most 1000 keys per request"));
        }
        let quiet = req.input.delete.quiet.unwrap_or(false);
        let bypass = req.input.bypass_governance_retention.unwrap_or(false);
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for o in objects_in {
            let one = self.delete_one(&access, &o.key, o.version_id.as_deref(), bypass);
            match shoal_client::freeing_space(one).await {
                Ok(d) => {
                    if !quiet {
                        // A marker made answers with its id; a version removed, with the id asked.
                        let made_marker = d.delete_marker && o.version_id.is_none();
                        deleted.push(DeletedObject {
                            key: Some(o.key),
                            delete_marker: d.delete_marker.then_some(true),
                            delete_marker_version_id: made_marker.then(|| d.version_id.clone()).flatten(),
                            version_id: o.version_id,
                        });
                    }
                }
                Err(e) => errors.push(Error {
                    code: Some(e.code().as_str().to_string()),
                    key: Some(o.key),
                    message: e.message().map(str::to_string),
                    version_id: o.version_id,
                }),
            }
        }
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: (!errors.is_empty()).then_some(errors),
            ..Default::default()
        }))
    }

    async fn get_bucket_acl(&self, req: S3Request<GetBucketAclInput>) -> S3Result<S3Response<GetBucketAclOutput>> {
        self.get_bucket_acl_op(req).await
    }

    async fn put_bucket_acl(&self, req: S3Request<PutBucketAclInput>) -> S3Result<S3Response<PutBucketAclOutput>> {
        self.put_bucket_acl_op(req).await
    }

    async fn get_object_acl(&self, req: S3Request<GetObjectAclInput>) -> S3Result<S3Response<GetObjectAclOutput>> {
        self.get_object_acl_op(req).await
    }

    async fn put_object_acl(&self, req: S3Request<PutObjectAclInput>) -> S3Result<S3Response<PutObjectAclOutput>> {
        self.put_object_acl_op(req).await
    }

    async fn get_bucket_policy(
        &self,
        req: S3Request<GetBucketPolicyInput>,
    ) -> S3Result<S3Response<GetBucketPolicyOutput>> {
        self.get_bucket_policy_op(req).await
    }

    async fn put_bucket_policy(
        &self,
        req: S3Request<PutBucketPolicyInput>,
    ) -> S3Result<S3Response<PutBucketPolicyOutput>> {
        self.put_bucket_policy_op(req).await
    }

    async fn delete_bucket_policy(
        &self,
        req: S3Request<DeleteBucketPolicyInput>,
    ) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
        self.delete_bucket_policy_op(req).await
    }

    async fn get_bucket_policy_status(
        &self,
        req: S3Request<GetBucketPolicyStatusInput>,
    ) -> S3Result<S3Response<GetBucketPolicyStatusOutput>> {
        self.get_bucket_policy_status_op(req).await
    }

    async fn put_public_access_block(
        &self,
        req: S3Request<PutPublicAccessBlockInput>,
    ) -> S3Result<S3Response<PutPublicAccessBlockOutput>> {
        self.put_public_access_block_op(req).await
    }

    async fn get_public_access_block(
        &self,
        req: S3Request<GetPublicAccessBlockInput>,
    ) -> S3Result<S3Response<GetPublicAccessBlockOutput>> {
        self.get_public_access_block_op(req).await
    }

    async fn delete_public_access_block(
        &self,
        req: S3Request<DeletePublicAccessBlockInput>,
    ) -> S3Result<S3Response<DeletePublicAccessBlockOutput>> {
        self.delete_public_access_block_op(req).await
    }

    async fn put_bucket_ownership_controls(
        &self,
        req: S3Request<PutBucketOwnershipControlsInput>,
    ) -> S3Result<S3Response<PutBucketOwnershipControlsOutput>> {
        self.put_ownership_op(req).await
    }

    async fn get_bucket_ownership_controls(
        &self,
        req: S3Request<GetBucketOwnershipControlsInput>,
    ) -> S3Result<S3Response<GetBucketOwnershipControlsOutput>> {
        self.get_ownership_op(req).await
    }

    async fn delete_bucket_ownership_controls(
        &self,
        req: S3Request<DeleteBucketOwnershipControlsInput>,
    ) -> S3Result<S3Response<DeleteBucketOwnershipControlsOutput>> {
        self.delete_ownership_op(req).await
    }

    async fn put_bucket_tagging(
        &self,
        req: S3Request<PutBucketTaggingInput>,
    ) -> S3Result<S3Response<PutBucketTaggingOutput>> {
        self.put_bucket_tagging_op(req).await
    }

    async fn get_bucket_tagging(
        &self,
        req: S3Request<GetBucketTaggingInput>,
    ) -> S3Result<S3Response<GetBucketTaggingOutput>> {
        self.get_bucket_tagging_op(req).await
    }

    async fn delete_bucket_tagging(
        &self,
        req: S3Request<DeleteBucketTaggingInput>,
    ) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
        self.delete_bucket_tagging_op(req).await
    }

    async fn put_object_tagging(
        &self,
        req: S3Request<PutObjectTaggingInput>,
    ) -> S3Result<S3Response<PutObjectTaggingOutput>> {
        self.put_object_tagging_op(req).await
    }

    async fn get_object_tagging(
        &self,
        req: S3Request<GetObjectTaggingInput>,
    ) -> S3Result<S3Response<GetObjectTaggingOutput>> {
        self.get_object_tagging_op(req).await
    }

    async fn delete_object_tagging(
        &self,
        req: S3Request<DeleteObjectTaggingInput>,
    ) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
        self.delete_object_tagging_op(req).await
    }

    async fn list_objects(&self, req: S3Request<ListObjectsInput>) -> S3Result<S3Response<ListObjectsOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::ListBucket, None)?;
        let input = req.input;
        let bucket = access.bucket;
        let max = input.max_keys.unwrap_or(MAX_LIST_KEYS).clamp(0, MAX_LIST_KEYS) as usize;
        let prefix = input.prefix.clone().unwrap_or_default();
        let page =
            index::list(&self.client, &bucket, &prefix, input.delimiter.as_deref(), input.marker.as_deref(), max)
                .await?;
        let url = input.encoding_type.as_ref().is_some_and(|e| e.as_str() == EncodingType::URL);
        let enc = |s: String| if url { uri_encode(&s) } else { s };
        let next_marker = (page.truncated && input.delimiter.is_some()).then(|| page.last_key.clone()).flatten();
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(bucket.name.clone()),
            // V1 does not encode the prefix it echoes (clients decode only keys, prefixes of
            // common prefixes, the delimiter and markers).
            prefix: Some(prefix),
            marker: Some(input.marker.unwrap_or_default()),
            max_keys: Some(max as i32),
            is_truncated: Some(page.truncated),
            contents: Some(objects_of(page.entries, true, enc)),
            common_prefixes: Some(
                page.common_prefixes.into_iter().map(|p| CommonPrefix { prefix: Some(enc(p)) }).collect(),
            ),
            delimiter: input.delimiter.filter(|d| !d.is_empty()).map(enc),
            next_marker: next_marker.map(enc),
            encoding_type: input.encoding_type,
            request_charged: None,
        }))
    }

    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        self.list_object_versions_op(req).await
    }

    async fn put_object_lock_configuration(
        &self,
        req: S3Request<PutObjectLockConfigurationInput>,
    ) -> S3Result<S3Response<PutObjectLockConfigurationOutput>> {
        self.put_object_lock_configuration_op(req).await
    }

    async fn get_object_lock_configuration(
        &self,
        req: S3Request<GetObjectLockConfigurationInput>,
    ) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
        self.get_object_lock_configuration_op(req).await
    }

    async fn put_object_retention(
        &self,
        req: S3Request<PutObjectRetentionInput>,
    ) -> S3Result<S3Response<PutObjectRetentionOutput>> {
        self.put_object_retention_op(req).await
    }

    async fn get_object_retention(
        &self,
        req: S3Request<GetObjectRetentionInput>,
    ) -> S3Result<S3Response<GetObjectRetentionOutput>> {
        self.get_object_retention_op(req).await
    }

    async fn put_object_legal_hold(
        &self,
        req: S3Request<PutObjectLegalHoldInput>,
    ) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
        self.put_object_legal_hold_op(req).await
    }

    async fn get_object_legal_hold(
        &self,
        req: S3Request<GetObjectLegalHoldInput>,
    ) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
        self.get_object_legal_hold_op(req).await
    }

    async fn put_bucket_versioning(
        &self,
        req: S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        self.put_bucket_versioning_op(req).await
    }

    async fn get_object_attributes(
        &self,
        req: S3Request<GetObjectAttributesInput>,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        self.get_object_attributes_op(req).await
    }

    async fn put_bucket_cors(&self, req: S3Request<PutBucketCorsInput>) -> S3Result<S3Response<PutBucketCorsOutput>> {
        self.put_bucket_cors_op(req).await
    }

    async fn get_bucket_cors(&self, req: S3Request<GetBucketCorsInput>) -> S3Result<S3Response<GetBucketCorsOutput>> {
        self.get_bucket_cors_op(req).await
    }

    async fn delete_bucket_cors(
        &self,
        req: S3Request<DeleteBucketCorsInput>,
    ) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
        self.delete_bucket_cors_op(req).await
    }

    async fn put_bucket_lifecycle_configuration(
        &self,
        req: S3Request<PutBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
        self.put_bucket_lifecycle_op(req).await
    }

    async fn get_bucket_lifecycle_configuration(
        &self,
        req: S3Request<GetBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
        self.get_bucket_lifecycle_op(req).await
    }

    async fn delete_bucket_lifecycle(
        &self,
        req: S3Request<DeleteBucketLifecycleInput>,
    ) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
        self.delete_bucket_lifecycle_op(req).await
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        self.get_bucket_versioning_op(req).await
    }

    async fn list_objects_v2(&self, req: S3Request<ListObjectsV2Input>) -> S3Result<S3Response<ListObjectsV2Output>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::ListBucket, None)?;
        let input = req.input;
        let bucket = access.bucket;
        let max = input.max_keys.unwrap_or(MAX_LIST_KEYS).clamp(0, MAX_LIST_KEYS) as usize;
        let prefix = input.prefix.clone().unwrap_or_default();
        // The continuation token is the last key returned, hex-encoded (opaque to clients).
        let after =
            match &input.continuation_token {
                Some(t) => Some(hex_decode(t).and_then(|b| String::from_utf8(b).ok()).ok_or_else(|| {
                    s3_error!(InvalidArgument, "the continuation token is not one this gateway gave")
                })?),
                None => input.start_after.clone(),
            };
        let page =
            index::list(&self.client, &bucket, &prefix, input.delimiter.as_deref(), after.as_deref(), max).await?;
        let url = input.encoding_type.as_ref().is_some_and(|e| e.as_str() == EncodingType::URL);
        let enc = |s: String| if url { uri_encode(&s) } else { s };
        let with_owner = input.fetch_owner.unwrap_or(false);
        let key_count = (page.entries.len() + page.common_prefixes.len()) as i32;
        let next = page.truncated.then(|| page.last_key.as_deref().map(|k| hex(k.as_bytes()))).flatten();
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(bucket.name.clone()),
            prefix: Some(enc(prefix)),
            max_keys: Some(max as i32),
            key_count: Some(key_count),
            continuation_token: input.continuation_token,
            is_truncated: Some(page.truncated),
            next_continuation_token: next,
            contents: Some(objects_of(page.entries, with_owner, enc)),
            common_prefixes: Some(
                page.common_prefixes.into_iter().map(|p| CommonPrefix { prefix: Some(enc(p)) }).collect(),
            ),
            delimiter: input.delimiter.filter(|d| !d.is_empty()).map(enc),
            encoding_type: input.encoding_type,
            start_after: input.start_after.map(enc),
            request_charged: None,
        }))
    }
}

fn objects_of(
    entries: Vec<(String, layout::IndexEntry)>,
    with_owner: bool,
    enc: impl Fn(String) -> String,
) -> Vec<Object> {
    entries
        .into_iter()
        .map(|(key, e)| Object {
            key: Some(enc(key)),
            e_tag: Some(etag_of(&e.etag)),
            last_modified: Some(timestamp(e.mtime_ns)),
            size: i64::try_from(e.size_bytes).ok(),
            storage_class: Some(ObjectStorageClass::from_static(ObjectStorageClass::STANDARD)),
            owner: with_owner.then(|| entry_owner(&e)),
            ..Default::default()
        })
        .collect()
}
