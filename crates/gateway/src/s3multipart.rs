//! The multipart operations of the S3 API, on [`crate::multipart`]: create, upload part,
//! complete, abort, list parts, list uploads. The `S3` trait's methods in `s3impl.rs` call these.

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, s3_error};

use crate::access::Action;
use crate::error::GatewayError;
use crate::layout::Checksums;
use crate::layout::{self, ContentHeaders, MAX_KEY_BYTES};
use crate::multipart::{self, MAX_PARTS, NewUpload, RequestedPart, WriteSettings};
use crate::objects::BodyShape;
use crate::partsums::{self, SumKind};
use crate::s3impl::{
    Gateway, Verifier, body_verifier, checksums_of, content_headers, etag_of, http_date, timestamp, user_meta_of,
    write_condition, write_error,
};

/// Most parts or uploads in one listing page (S3's limit).
const MAX_LIST: usize = 1000;

pub(crate) fn upload_id(text: &str) -> S3Result<u128> {
    layout::parse_upload_id(text).ok_or_else(|| GatewayError::NoSuchUpload(text.to_string()).into())
}

pub(crate) fn part_number(n: i32) -> S3Result<u32> {
    match u32::try_from(n) {
        Ok(n) if (1..=MAX_PARTS).contains(&n) => Ok(n),
        _ => Err(s3_error!(InvalidArgument, "part numbers are 1 to {MAX_PARTS}, not {n}")),
    }
}

fn type_dto(kind: SumKind) -> ChecksumType {
    ChecksumType::from_static(match kind {
        SumKind::Composite => ChecksumType::COMPOSITE,
        SumKind::FullObject => ChecksumType::FULL_OBJECT,
    })
}

/// The type of checksums `sums` (none when there are none).
pub(crate) fn checksum_type_of(sums: &Checksums) -> Option<ChecksumType> {
    let kind = if sums.composite { SumKind::Composite } else { SumKind::FullObject };
    (!sums.is_empty()).then(|| type_dto(kind))
}

fn list_max(asked: Option<i32>) -> S3Result<usize> {
    match asked {
        None => Ok(MAX_LIST),
        Some(n) if n < 0 => Err(s3_error!(InvalidArgument, "a negative maximum ({n})")),
        Some(n) => Ok((n as usize).min(MAX_LIST)),
    }
}

impl Gateway {
    pub(crate) fn write_settings(&self, bucket: &layout::BucketRecord) -> WriteSettings {
        WriteSettings { lease: self.settings.lease, gc_delay_ns: self.gc_delay_ns(), versioning: bucket.versioning }
    }

    pub(crate) async fn mp_create(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::PutObject, Some(&req.input.key))?;
        let (owner, grants) = self.new_object_acl(&req, &access).await?;
        let tags = crate::s3config::request_tags(req.input.tagging.as_deref())?;
        let bucket = access.bucket;
        let input = req.input;
        if input.key.len() > MAX_KEY_BYTES {
            return Err(s3_error!(KeyTooLongError, "keys are at most {MAX_KEY_BYTES} bytes"));
        }
        let lock = crate::s3lock::version_lock!(&bucket, input)?;
        let algorithm = input.checksum_algorithm.as_ref().map(crate::s3impl::checksum_name).transpose()?;
        let kind = match (algorithm, input.checksum_type.as_ref()) {
            (Some(a), asked) => Some(
                partsums::kind_for(a, asked.map(|t| t.as_str())).map_err(|why| s3_error!(InvalidRequest, "{why}"))?,
            ),
            (None, Some(_)) => return Err(s3_error!(InvalidRequest, "a checksum type needs a checksum algorithm")),
            (None, None) => None,
        };
        let new = NewUpload {
            full_object_checksum: kind == Some(SumKind::FullObject),
            lock,
            owner_id: owner.id,
            owner_display: owner.display_name,
            grants,
            tags,
            content: content_headers!(input),
            user_meta: user_meta_of(input.metadata)?,
            checksum_algorithm: input.checksum_algorithm.as_ref().map(|a| a.as_str().to_string()),
        };
        let upload = multipart::create(&self.client, &bucket, &input.key, new).await?;
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(layout::upload_id_text(upload)),
            checksum_algorithm: input.checksum_algorithm,
            checksum_type: kind.map(type_dto),
            ..Default::default()
        }))
    }

    pub(crate) async fn mp_upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::PutObject, Some(&req.input.key))?;
        let input = req.input;
        let bucket = access.bucket;
        let upload = upload_id(&input.upload_id)?;
        let number = part_number(input.part_number)?;
        let verifier = body_verifier!(req, input)?;
        let Some(body) = input.body else {
            return Err(s3_error!(IncompleteBody, "the request has no body"));
        };
        let shape =
            BodyShape { size_hint: input.content_length.and_then(|l| u64::try_from(l).ok()), read_ahead_bytes: 0 };
        let part = multipart::upload_part(
            &self.client,
            &self.budget,
            &bucket,
            &input.key,
            upload,
            number,
            body,
            Box::new(verifier),
            shape,
            &self.write_settings(&bucket),
        )
        .await
        .map_err(write_error)?;
        Ok(S3Response::new(UploadPartOutput {
            e_tag: Some(etag_of(&part.etag)),
            checksum_crc32: part.checksums.crc32,
            checksum_crc32c: part.checksums.crc32c,
            checksum_sha1: part.checksums.sha1,
            checksum_sha256: part.checksums.sha256,
            checksum_crc64nvme: part.checksums.crc64nvme,
            ..Default::default()
        }))
    }

    pub(crate) async fn mp_complete(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::PutObject, Some(&req.input.key))?;
        let input = req.input;
        let bucket = access.bucket;
        let upload = upload_id(&input.upload_id)?;
        let mut requested = Vec::new();
        for p in input.multipart_upload.and_then(|m| m.parts).unwrap_or_default() {
            let (Some(n), Some(etag)) = (p.part_number, p.e_tag) else {
                return Err(s3_error!(MalformedXML, "every part needs a PartNumber and an ETag"));
            };
            let checksums = checksums_of!(p);
            requested.push(RequestedPart { number: part_number(n)?, etag: etag.value().to_string(), checksums });
        }
        let claimed = checksums_of!(input);
        let condition = write_condition(input.if_none_match.as_ref(), input.if_match.as_ref())?;
        let settings = self.write_settings(&bucket);
        let written =
            multipart::complete(&self.client, &bucket, &input.key, upload, &requested, &claimed, &condition, &settings)
                .await?;
        let meta = written.meta;
        let sums = &meta.checksums;
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            checksum_crc32: sums.crc32.clone(),
            checksum_crc32c: sums.crc32c.clone(),
            checksum_sha1: sums.sha1.clone(),
            checksum_sha256: sums.sha256.clone(),
            checksum_crc64nvme: sums.crc64nvme.clone(),
            checksum_type: checksum_type_of(sums),
            version_id: written.version_id,
            bucket: Some(input.bucket.clone()),
            key: Some(input.key.clone()),
            e_tag: Some(etag_of(&meta.etag)),
            location: Some(format!("/{}/{}", input.bucket, crate::text::uri_encode(&input.key))),
            ..Default::default()
        }))
    }

    pub(crate) async fn mp_abort(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::AbortMultipartUpload, Some(&req.input.key))?;
        let input = req.input;
        let bucket = access.bucket;
        let upload = upload_id(&input.upload_id)?;
        multipart::abort(&self.client, &bucket, &input.key, upload, self.gc_delay_ns()).await?;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    pub(crate) async fn mp_list_parts(&self, req: S3Request<ListPartsInput>) -> S3Result<S3Response<ListPartsOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::ListMultipartUploadParts, Some(&req.input.key))?;
        let input = req.input;
        let bucket = access.bucket;
        let upload = upload_id(&input.upload_id)?;
        let max = list_max(input.max_parts)?;
        let marker = match input.part_number_marker {
            None => 0,
            Some(m) => u32::try_from(m).map_err(|_| s3_error!(InvalidArgument, "a negative part number marker"))?,
        };
        let (rec, parts, truncated) =
            multipart::list_parts(&self.client, &bucket, &input.key, upload, marker, max).await?;
        let owner = Owner { display_name: Some(rec.owner_display.clone()), id: Some(rec.owner_id.clone()) };
        let next = parts.last().map(|(n, _)| *n as i32);
        Ok(S3Response::new(ListPartsOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(input.upload_id),
            initiator: Some(Initiator { display_name: owner.display_name.clone(), id: owner.id.clone() }),
            owner: Some(owner),
            max_parts: Some(max as i32),
            part_number_marker: input.part_number_marker,
            next_part_number_marker: next,
            is_truncated: Some(truncated),
            storage_class: Some(StorageClass::from_static(StorageClass::STANDARD)),
            checksum_algorithm: rec.checksum_algorithm.map(ChecksumAlgorithm::from),
            parts: Some(
                parts
                    .into_iter()
                    .map(|(n, p)| Part {
                        part_number: Some(n as i32),
                        e_tag: Some(etag_of(&p.etag)),
                        size: i64::try_from(p.size_bytes).ok(),
                        last_modified: Some(timestamp(p.mtime_ns)),
                        checksum_crc32: p.checksums.crc32,
                        checksum_crc32c: p.checksums.crc32c,
                        checksum_sha1: p.checksums.sha1,
                        checksum_sha256: p.checksums.sha256,
                        checksum_crc64nvme: p.checksums.crc64nvme,
                    })
                    .collect(),
            ),
            ..Default::default()
        }))
    }

    pub(crate) async fn mp_list_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::ListBucketMultipartUploads, None)?;
        let input = req.input;
        let bucket = access.bucket;
        let max = list_max(input.max_uploads)?;
        let upload_marker = match (&input.key_marker, &input.upload_id_marker) {
            (Some(_), Some(u)) if !u.is_empty() => Some(upload_id(u)?),
            _ => None,
        };
        let prefix = input.prefix.clone().unwrap_or_default();
        let page = multipart::list_uploads(
            &self.client,
            &bucket,
            &prefix,
            input.delimiter.as_deref(),
            input.key_marker.as_deref().filter(|k| !k.is_empty()),
            upload_marker,
            max,
        )
        .await?;
        let last = page.uploads.last();
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(input.bucket),
            prefix: input.prefix,
            delimiter: input.delimiter,
            key_marker: input.key_marker,
            upload_id_marker: input.upload_id_marker,
            max_uploads: Some(max as i32),
            is_truncated: Some(page.truncated),
            next_key_marker: last.map(|u| u.key.clone()),
            next_upload_id_marker: last.map(|u| layout::upload_id_text(u.upload)),
            common_prefixes: (!page.common_prefixes.is_empty())
                .then(|| page.common_prefixes.into_iter().map(|p| CommonPrefix { prefix: Some(p) }).collect()),
            uploads: Some(
                page.uploads
                    .into_iter()
                    .map(|u| {
                        let owner = Owner { display_name: Some(u.owner_display.clone()), id: Some(u.owner_id.clone()) };
                        MultipartUpload {
                            key: Some(u.key),
                            upload_id: Some(layout::upload_id_text(u.upload)),
                            initiated: Some(timestamp(u.initiated_ns)),
                            initiator: Some(Initiator {
                                display_name: owner.display_name.clone(),
                                id: owner.id.clone(),
                            }),
                            owner: Some(owner),
                            storage_class: Some(StorageClass::from_static(StorageClass::STANDARD)),
                            checksum_algorithm: u.checksum_algorithm.map(ChecksumAlgorithm::from),
                            ..Default::default()
                        }
                    })
                    .collect(),
            ),
            ..Default::default()
        }))
    }
}
