//! GetObjectAttributes: an object's ETag, checksums, size, storage class and (for multipart
//! objects) its parts page by page, all from its head and manifest, without reading data.

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, s3_error};

use crate::access::Action;
use crate::layout::{Checksums, ManifestPart};
use crate::objects;
use crate::s3impl::{Gateway, timestamp};

/// Parts listed per page when the request names no maximum (S3's default).
const DEFAULT_MAX_PARTS: usize = 1000;

fn checksum_of(c: &Checksums) -> Option<Checksum> {
    let any =
        c.crc32.is_some() || c.crc32c.is_some() || c.sha1.is_some() || c.sha256.is_some() || c.crc64nvme.is_some();
    any.then(|| Checksum {
        checksum_crc32: c.crc32.clone(),
        checksum_crc32c: c.crc32c.clone(),
        checksum_crc64nvme: c.crc64nvme.clone(),
        checksum_sha1: c.sha1.clone(),
        checksum_sha256: c.sha256.clone(),
        checksum_type: crate::s3multipart::checksum_type_of(c),
    })
}

fn part_of(p: &ManifestPart) -> ObjectPart {
    ObjectPart {
        checksum_crc32: p.checksums.crc32.clone(),
        checksum_crc32c: p.checksums.crc32c.clone(),
        checksum_crc64nvme: p.checksums.crc64nvme.clone(),
        checksum_sha1: p.checksums.sha1.clone(),
        checksum_sha256: p.checksums.sha256.clone(),
        part_number: i32::try_from(p.number).ok(),
        size: i64::try_from(p.size_bytes).ok(),
    }
}

/// One page of `parts`: those numbered above `marker`, at most `max`.
fn parts_page(parts: &[ManifestPart], marker: u32, max: usize) -> GetObjectAttributesParts {
    let after: Vec<&ManifestPart> = parts.iter().filter(|p| p.number > marker).collect();
    let page = &after[..after.len().min(max)];
    let truncated = after.len() > page.len();
    GetObjectAttributesParts {
        is_truncated: Some(truncated),
        max_parts: i32::try_from(max).ok(),
        next_part_number_marker: page.last().and_then(|p| i32::try_from(p.number).ok()).filter(|_| truncated),
        part_number_marker: i32::try_from(marker).ok(),
        parts: Some(page.iter().map(|p| part_of(p)).collect()),
        total_parts_count: i32::try_from(parts.len()).ok(),
    }
}

impl Gateway {
    pub(crate) async fn get_object_attributes_op(
        &self,
        req: S3Request<GetObjectAttributesInput>,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        let input = &req.input;
        let named = input.version_id.as_deref();
        let located = self.located(&access, &input.key, named).await?;
        let action = if named.is_some() { Action::GetObjectVersionAttributes } else { Action::GetObjectAttributes };
        access.require_object(action, &input.key, &located.meta)?;
        let meta = &located.meta;
        // The header is a comma-separated list, which s3s may hand over as one item.
        let wants = |a: &str| input.object_attributes.iter().flat_map(|w| w.as_str().split(',')).any(|w| w.trim() == a);
        if input.object_attributes.is_empty() {
            return Err(s3_error!(InvalidArgument, "name at least one object attribute"));
        }
        let marker = match input.part_number_marker {
            Some(m) => u32::try_from(m).map_err(|_| s3_error!(InvalidArgument, "PartNumberMarker {m} is negative"))?,
            None => 0,
        };
        let max = match input.max_parts {
            Some(m) => usize::try_from(m).map_err(|_| s3_error!(InvalidArgument, "MaxParts {m} is negative"))?,
            None => DEFAULT_MAX_PARTS,
        }
        .min(DEFAULT_MAX_PARTS);
        let object_parts = if wants(ObjectAttributes::OBJECT_PARTS) && meta.parts > 0 {
            let manifest = objects::manifest_of(&self.client, access.bucket.id, meta)
                .await?
                .ok_or_else(|| s3_error!(InternalError, "multipart object {:?} has no manifest", input.key))?;
            Some(parts_page(&manifest.parts, marker, max))
        } else {
            None
        };
        Ok(S3Response::new(GetObjectAttributesOutput {
            checksum: checksum_of(&meta.checksums).filter(|_| wants(ObjectAttributes::CHECKSUM)),
            delete_marker: None,
            // s3s quotes it; the server answers it unquoted, as S3 does (`precheck.rs`).
            e_tag: wants(ObjectAttributes::ETAG).then(|| crate::s3impl::etag_of(&meta.etag)),
            last_modified: Some(timestamp(meta.mtime_ns)),
            object_parts,
            object_size: i64::try_from(meta.size_bytes).ok().filter(|_| wants(ObjectAttributes::OBJECT_SIZE)),
            request_charged: None,
            storage_class: wants(ObjectAttributes::STORAGE_CLASS)
                .then(|| StorageClass::from_static(StorageClass::STANDARD)),
            version_id: located.version_id,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(number: u32) -> ManifestPart {
        ManifestPart {
            number,
            tag: 0,
            size_bytes: 5 << 20,
            chunks: 2,
            etag: String::new(),
            checksums: Checksums::default(),
        }
    }

    #[test]
    fn parts_page_after_the_marker() {
        let parts: Vec<ManifestPart> = (1..=6).map(part).collect();
        let p = parts_page(&parts, 3, 1);
        assert_eq!(p.parts.as_ref().map(|v| v[0].part_number), Some(Some(4)));
        assert_eq!((p.is_truncated, p.next_part_number_marker, p.total_parts_count), (Some(true), Some(4), Some(6)));
        let p = parts_page(&parts, 4, 10);
        assert_eq!(p.parts.as_ref().map(Vec::len), Some(2));
        assert_eq!((p.is_truncated, p.next_part_number_marker), (Some(false), None));
        assert_eq!(parts_page(&parts, 6, 10).parts.as_ref().map(Vec::len), Some(0));
    }
}
