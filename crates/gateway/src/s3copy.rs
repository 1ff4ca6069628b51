//! Server-side copies of the S3 API: CopyObject and UploadPartCopy. The source is read chunk by
//! chunk and streamed into an ordinary write (a PUT's or a part's), so a copy commits exactly
//! like one: tails first, the head last, nothing visible before. One memory reservation covers
//! both sides (decision 0014, "Copies").

use s3s::dto::*;
use s3s::{S3Error, S3Request, S3Response, S3Result, s3_error};

use crate::access::{Access, Action};
use crate::layout::{self, ContentHeaders};
use crate::layout::{BucketRecord, Checksums, Manifest};
use crate::multipart;
use crate::objects::{self, BodyCheck, BodyShape, COPY_READ_AHEAD_BYTES, OpenObject, WriteArgs};
use crate::s3impl::{
    CHECKSUM_ALGORITHMS, Gateway, check_read_conditions, checksum_name, content_headers, enable_checksum, etag_of,
    http_date, timestamp, user_meta_of, write_condition, write_error,
};

/// The largest source CopyObject copies, and the largest range UploadPartCopy copies (S3's
/// limit: bigger objects are copied part by part).
pub const MAX_COPY_BYTES: u64 = 5 << 30;

/// Copies running at once per gateway; more wait. A copy opens its source (reading the head's
/// first chunk, up to 4 MiB, with the metadata so that the bytes and the metadata are of one
/// version) before its write reserves memory, so that chunk is held outside the memory budget;
/// this bounds those bytes to `COPIES_AT_ONCE` × 4 MiB.
pub const COPIES_AT_ONCE: usize = 8;

/// Waits for a copy slot ([`COPIES_AT_ONCE`]).
async fn copy_slot(copies: &std::sync::Arc<tokio::sync::Semaphore>) -> tokio::sync::OwnedSemaphorePermit {
    // The semaphore is never closed.
    match copies.clone().acquire_owned().await {
        Ok(p) => p,
        Err(_) => unreachable!("the copy semaphore is never closed"),
    }
}

/// The source of a copy, opened: its bucket, its head, its parts, and the bytes to copy.
struct Source {
    bucket: BucketRecord,
    /// The source's version id (`None` in a bucket never versioned).
    version_id: Option<String>,
    obj: OpenObject,
    manifest: Option<Manifest>,
    range: std::ops::Range<u64>,
}

/// The `x-amz-copy-source-if-*` conditions of a copy.
struct SourceConditions<'a> {
    if_match: Option<&'a ETagCondition>,
    if_none_match: Option<&'a ETagCondition>,
    if_modified_since: Option<&'a Timestamp>,
    if_unmodified_since: Option<&'a Timestamp>,
}

/// Parses `x-amz-copy-source-range`: exactly `bytes=FIRST-LAST`, FIRST ≤ LAST (inclusive).
fn parse_copy_range(text: &str) -> S3Result<(u64, u64)> {
    let bad = || s3_error!(InvalidArgument, "the copy source range {text:?} is not bytes=FIRST-LAST");
    let spec = text.strip_prefix("bytes=").ok_or_else(bad)?;
    let (first, last) = spec.split_once('-').ok_or_else(bad)?;
    let first: u64 = first.parse().map_err(|_| bad())?;
    let last: u64 = last.parse().map_err(|_| bad())?;
    if first > last {
        return Err(bad());
    }
    Ok((first, last))
}

/// Hashes the copied bytes for the destination's checksums and, when the whole source is
/// copied, checks them against what the source recorded: a copy never silently propagates
/// damaged data.
struct CopyCheck {
    hasher: s3s::checksum::ChecksumHasher,
    /// The source's MD5 (hex) when the whole of a simple object is copied.
    source_md5: Option<String>,
    /// The source's stored checksums when the whole object is copied.
    source_sums: Checksums,
}

impl CopyCheck {
    fn new(algorithms: &[&'static str], source_md5: Option<String>, source_sums: Checksums) -> CopyCheck {
        let mut hasher = s3s::checksum::ChecksumHasher::default();
        for a in algorithms {
            enable_checksum(&mut hasher, a);
        }
        CopyCheck { hasher, source_md5, source_sums }
    }
}

/// The checksums of `sums` that the copied bytes can be checked against: a composite checksum
/// (of a multipart object's parts) is not a checksum of the bytes, so none.
fn checkable(sums: &Checksums) -> Checksums {
    if sums.composite { Checksums::default() } else { sums.clone() }
}

/// The algorithms of the checksums `sums` holds.
fn algorithms_of(sums: &Checksums) -> Vec<&'static str> {
    let present = [
        sums.crc32.is_some(),
        sums.crc32c.is_some(),
        sums.sha1.is_some(),
        sums.sha256.is_some(),
        sums.crc64nvme.is_some(),
    ];
    CHECKSUM_ALGORITHMS.into_iter().zip(present).filter_map(|(name, p)| p.then_some(name)).collect()
}

impl BodyCheck for CopyCheck {
    fn update(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
    }

    fn finish(self: Box<Self>, md5_hex: &str) -> Result<Checksums, S3Error> {
        let damaged = |what: &str| {
            tracing::error!(what, "a copy's source does not match its recorded digest");
            s3_error!(InternalError, "the copy source's bytes do not match its recorded {what}")
        };
        if let Some(want) = &self.source_md5
            && want != md5_hex
        {
            return Err(damaged("MD5"));
        }
        let got = self.hasher.finalize();
        let got = Checksums {
            crc32: got.checksum_crc32,
            crc32c: got.checksum_crc32c,
            sha1: got.checksum_sha1,
            sha256: got.checksum_sha256,
            crc64nvme: got.checksum_crc64nvme,
            composite: false,
        };
        for (name, want, have) in [
            ("CRC32", &self.source_sums.crc32, &got.crc32),
            ("CRC32C", &self.source_sums.crc32c, &got.crc32c),
            ("SHA1", &self.source_sums.sha1, &got.sha1),
            ("SHA256", &self.source_sums.sha256, &got.sha256),
            ("CRC64NVME", &self.source_sums.crc64nvme, &got.crc64nvme),
        ] {
            if let (Some(w), Some(h)) = (want, have)
                && w != h
            {
                return Err(damaged(name));
            }
        }
        Ok(got)
    }
}

/// The destination's write condition from a copy's own `If-Match` / `If-None-Match` headers
/// (s3s does not parse them for copies).
fn destination_condition(headers: &hyper::HeaderMap) -> S3Result<objects::WriteCondition> {
    let parse = |name: &str| -> S3Result<Option<ETagCondition>> {
        headers
            .get(name)
            .map(|v| {
                ETagCondition::parse_http_header(v.as_bytes())
                    .map_err(|_| s3_error!(InvalidArgument, "the {name} header is not an ETag or *"))
            })
            .transpose()
    };
    write_condition(parse("if-none-match")?.as_ref(), parse("if-match")?.as_ref())
}

impl Gateway {
    /// The access of a copy's requester to the source's bucket.
    async fn source_access<T>(&self, req: &S3Request<T>, source: &CopySource) -> S3Result<Access> {
        match source {
            CopySource::Bucket { bucket, .. } => self.access(req, bucket).await,
            _ => Err(s3_error!(NotImplemented, "copies from access points are not supported")),
        }
    }

    /// Opens the source of a copy the requester may read, checks its conditions, and resolves
    /// the bytes to copy (`range`: `x-amz-copy-source-range`, else the whole object).
    async fn open_source(
        &self,
        access: Access,
        source: &CopySource,
        conditions: SourceConditions<'_>,
        range: Option<&str>,
    ) -> S3Result<Source> {
        let CopySource::Bucket { key, version_id, .. } = source else {
            return Err(s3_error!(NotImplemented, "copies from access points are not supported"));
        };
        let (head, source_version) = self.locate(&access, key, version_id.as_deref()).await?;
        let asked = range.map(parse_copy_range).transpose()?;
        // The head's share of the bytes is read with the metadata.
        let guess = match asked {
            Some((first, last)) => first..last.saturating_add(1),
            None => 0..layout::CHUNK_BYTES,
        };
        let Some(obj) = objects::open(&self.client, &head, key, Some(guess)).await? else {
            return Err(self.vanished(&access, key, version_id.as_deref()));
        };
        let meta = &obj.meta;
        let action = if version_id.is_some() { Action::GetObjectVersion } else { Action::GetObject };
        access.require_object(action, key, meta)?;
        let bucket = access.bucket;
        check_read_conditions(
            meta,
            conditions.if_match,
            conditions.if_none_match,
            conditions.if_modified_since,
            conditions.if_unmodified_since,
        )
        .map_err(|e| {
            // A copy answers every failed source condition with 412, If-None-Match included.
            if e.status_code() == Some(hyper::StatusCode::NOT_MODIFIED) {
                s3_error!(PreconditionFailed, "the copy source's If-None-Match or If-Modified-Since does not hold")
            } else {
                e
            }
        })?;
        let range = match asked {
            Some((first, last)) if last >= meta.size_bytes => {
                return Err(s3_error!(
                    InvalidRange,
                    "bytes {first}-{last} are outside the source's {} bytes",
                    meta.size_bytes
                ));
            }
            Some((first, last)) => first..last + 1,
            None => 0..meta.size_bytes,
        };
        if range.end - range.start > MAX_COPY_BYTES {
            return Err(s3_error!(
                InvalidRequest,
                "a copy takes at most {MAX_COPY_BYTES} bytes in one request; copy larger objects part by part"
            ));
        }
        let manifest = objects::manifest_of(&self.client, bucket.id, meta).await?;
        Ok(Source { bucket, version_id: source_version, obj, manifest, range })
    }

    /// The source's bytes as a body stream, and the memory shape a write of it reserves.
    fn source_body(&self, source: Source) -> (objects::ObjectStream, BodyShape) {
        let len = source.range.end - source.range.start;
        let shape = BodyShape { size_hint: Some(len), read_ahead_bytes: len.min(COPY_READ_AHEAD_BYTES) };
        let stream = objects::read_stream(
            self.client.clone(),
            None,
            source.bucket.id,
            source.obj,
            source.manifest,
            source.range,
        );
        (stream, shape)
    }

    pub(crate) async fn copy(&self, req: S3Request<CopyObjectInput>) -> S3Result<S3Response<CopyObjectOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::PutObject, Some(&req.input.key))?;
        let source_access = self.source_access(&req, &req.input.copy_source).await?;
        let (owner, grants) = self.new_object_acl(&req, &access).await?;
        let replace_tags = match req.input.tagging_directive.as_ref().map(TaggingDirective::as_str) {
            None | Some(TaggingDirective::COPY) => false,
            Some(TaggingDirective::REPLACE) => true,
            Some(other) => return Err(s3_error!(InvalidArgument, "unknown tagging directive {other:?}")),
        };
        let new_tags = crate::s3config::request_tags(req.input.tagging.as_deref())?;
        let condition = destination_condition(&req.headers)?;
        let input = req.input;
        let bucket = access.bucket;
        if input.key.len() > layout::MAX_KEY_BYTES {
            return Err(s3_error!(KeyTooLongError, "keys are at most {} bytes", layout::MAX_KEY_BYTES));
        }
        let replace = match input.metadata_directive.as_ref().map(MetadataDirective::as_str) {
            None | Some(MetadataDirective::COPY) => false,
            Some(MetadataDirective::REPLACE) => true,
            Some(other) => return Err(s3_error!(InvalidArgument, "unknown metadata directive {other:?}")),
        };
        if let CopySource::Bucket { bucket: b, key: k, .. } = &input.copy_source
            && **b == *input.bucket
            && **k == *input.key
            && !replace
        {
            return Err(s3_error!(
                InvalidRequest,
                "copying an object onto itself must change something: send x-amz-metadata-directive: REPLACE"
            ));
        }
        let conditions = SourceConditions {
            if_match: input.copy_source_if_match.as_ref(),
            if_none_match: input.copy_source_if_none_match.as_ref(),
            if_modified_since: input.copy_source_if_modified_since.as_ref(),
            if_unmodified_since: input.copy_source_if_unmodified_since.as_ref(),
        };
        let _slot = copy_slot(&self.copies).await;
        let source = self.open_source(source_access, &input.copy_source, conditions, None).await?;
        let src = source.obj.meta.clone();
        let source_version_id = source.version_id.clone();
        let (content, user_meta): (ContentHeaders, _) = if replace {
            (content_headers!(input), user_meta_of(input.metadata)?)
        } else {
            (src.content.clone(), src.user_meta.clone())
        };
        let algorithms = match &input.checksum_algorithm {
            Some(a) => vec![checksum_name(a)?],
            None => algorithms_of(&src.checksums),
        };
        // A simple object's ETag is its MD5; a multipart one's is not, and is checked part by
        // part at upload instead.
        let source_md5 = (src.parts == 0).then(|| src.etag.clone());
        let check = CopyCheck::new(&algorithms, source_md5, checkable(&src.checksums));
        let lock = crate::s3lock::version_lock!(&bucket, input)?;
        let (body, shape) = self.source_body(source);
        let args = WriteArgs {
            lock,
            content,
            user_meta,
            owner_id: owner.id,
            owner_display: owner.display_name,
            grants,
            tags: if replace_tags { new_tags } else { src.tags.clone() },
            condition,
            shape,
            versioning: bucket.versioning,
            gc_delay_ns: self.gc_delay_ns(),
            lease: self.settings.lease,
        };
        let written = objects::put(&self.client, &self.budget, &bucket, &input.key, body, Box::new(check), args)
            .await
            .map_err(write_error)?;
        let meta = written.meta;
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult {
                e_tag: Some(etag_of(&meta.etag)),
                last_modified: Some(timestamp(meta.mtime_ns)),
                checksum_crc32: meta.checksums.crc32,
                checksum_crc32c: meta.checksums.crc32c,
                checksum_sha1: meta.checksums.sha1,
                checksum_sha256: meta.checksums.sha256,
                checksum_crc64nvme: meta.checksums.crc64nvme,
                ..Default::default()
            }),
            copy_source_version_id: source_version_id,
            version_id: written.version_id,
            ..Default::default()
        }))
    }

    pub(crate) async fn copy_part(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::PutObject, Some(&req.input.key))?;
        let source_access = self.source_access(&req, &req.input.copy_source).await?;
        let input = req.input;
        let bucket = access.bucket;
        let upload = crate::s3multipart::upload_id(&input.upload_id)?;
        let number = crate::s3multipart::part_number(input.part_number)?;
        let conditions = SourceConditions {
            if_match: input.copy_source_if_match.as_ref(),
            if_none_match: input.copy_source_if_none_match.as_ref(),
            if_modified_since: input.copy_source_if_modified_since.as_ref(),
            if_unmodified_since: input.copy_source_if_unmodified_since.as_ref(),
        };
        let _slot = copy_slot(&self.copies).await;
        let source =
            self.open_source(source_access, &input.copy_source, conditions, input.copy_source_range.as_deref()).await?;
        let whole = source.range.start == 0 && source.range.end == source.obj.meta.size_bytes;
        let src = &source.obj.meta;
        let source_md5 = (whole && src.parts == 0).then(|| src.etag.clone());
        let source_sums = if whole { checkable(&src.checksums) } else { Checksums::default() };
        let check = CopyCheck::new(&[], source_md5, source_sums);
        let (body, shape) = self.source_body(source);
        let part = multipart::upload_part(
            &self.client,
            &self.budget,
            &bucket,
            &input.key,
            upload,
            number,
            body,
            Box::new(check),
            shape,
            &self.write_settings(&bucket),
        )
        .await
        .map_err(write_error)?;
        Ok(S3Response::new(UploadPartCopyOutput {
            copy_part_result: Some(CopyPartResult {
                e_tag: Some(etag_of(&part.etag)),
                last_modified: Some(timestamp(part.mtime_ns)),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_ranges_are_bytes_first_dash_last_and_nothing_else() {
        assert_eq!(parse_copy_range("bytes=0-0").ok(), Some((0, 0)));
        assert_eq!(parse_copy_range("bytes=5-21").ok(), Some((5, 21)));
        for bad in ["0-2", "bytes=0", "bytes=hello-world", "bytes=0-bar", "bytes=hello-", "bytes=0-2,3-5", "bytes=3-2"]
        {
            let e = parse_copy_range(bad).expect_err(bad);
            assert_eq!(e.code(), &s3s::S3ErrorCode::InvalidArgument, "{bad}");
        }
    }

    #[test]
    fn a_copy_refuses_bytes_that_do_not_match_the_source_digests() {
        let data = b"hello copy";
        let md5 = crate::text::hex(&<md5::Md5 as md5::Digest>::digest(data));
        let good = Box::new(CopyCheck::new(&[ChecksumAlgorithm::CRC32], Some(md5.clone()), Checksums::default()));
        let mut g = good;
        g.update(data);
        let sums = g.finish(&md5).expect("matching bytes pass");
        assert!(sums.crc32.is_some(), "the wanted checksum is computed");
        let mut bad = Box::new(CopyCheck::new(&[], Some("0".repeat(32)), Checksums::default()));
        bad.update(data);
        assert!(bad.finish(&md5).is_err(), "an MD5 other than the source's is refused");
        let mut bad_crc = Box::new(CopyCheck::new(
            &[ChecksumAlgorithm::CRC32],
            None,
            Checksums { crc32: Some("AAAAAA==".into()), ..Default::default() },
        ));
        bad_crc.update(data);
        assert!(bad_crc.finish(&md5).is_err(), "a CRC32 other than the source's is refused");
    }
}
