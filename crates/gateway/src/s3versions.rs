//! Versioning over S3 (decision 0015): bucket versioning configuration, finding the version a
//! request names, deletes with delete markers, and ListObjectVersions.

use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};

use crate::access::{Access, Action};
use crate::layout::{ObjectMeta, Versioning};
use crate::objects;
use crate::s3impl::{Gateway, timestamp};
use crate::versions::{self, Found, VersionId};

/// Parses a client's version id (`None`: none named).
pub(crate) fn version_id_of(text: Option<&str>) -> S3Result<Option<VersionId>> {
    match text {
        None => Ok(None),
        Some(t) => versions::parse_version_id(t)
            .map(Some)
            .ok_or_else(|| s3_error!(InvalidArgument, "Invalid version id specified")),
    }
}

/// The answer to a request for a delete marker: 404 for the current version, 405 for a version
/// named; both say so in `x-amz-delete-marker` and name the marker's version.
fn delete_marker_error(version_id: &str, named: bool) -> S3Error {
    let mut e = if named {
        s3_error!(MethodNotAllowed, "the version is a delete marker")
    } else {
        s3_error!(NoSuchKey, "the key's current version is a delete marker")
    };
    let mut headers = hyper::HeaderMap::new();
    headers.insert("x-amz-delete-marker", hyper::header::HeaderValue::from_static("true"));
    if let Ok(v) = hyper::header::HeaderValue::from_str(version_id) {
        headers.insert("x-amz-version-id", v);
    }
    e.set_headers(headers);
    e
}

/// A missing key's 404 says it is not a delete marker (as RGW's does; clients probe for it).
fn not_a_marker(mut e: S3Error) -> S3Error {
    if *e.code() == S3ErrorCode::NoSuchKey {
        let mut headers = hyper::HeaderMap::new();
        headers.insert("x-amz-delete-marker", hyper::header::HeaderValue::from_static("false"));
        e.set_headers(headers);
    }
    e
}

/// A version a request found: its head object, its metadata and the id to report.
pub(crate) struct Located {
    pub head: String,
    pub meta: ObjectMeta,
    pub version_id: Option<String>,
}

impl Gateway {
    /// The head object of `key`'s version `version_id` (the current version when `None`) and
    /// the version id to report, or the S3 error for a missing key or version or a delete
    /// marker.
    pub(crate) async fn locate(
        &self,
        access: &Access,
        key: &str,
        version_id: Option<&str>,
    ) -> S3Result<(String, Option<String>)> {
        let parsed = version_id_of(version_id)?;
        match versions::find(&self.client, &access.bucket, key, parsed.as_ref()).await? {
            Found::Object { head, version_id } => Ok((head, version_id)),
            Found::DeleteMarker { version_id: v } => Err(delete_marker_error(&v, version_id.is_some())),
            Found::Missing if version_id.is_some() => {
                Err(s3_error!(NoSuchVersion, "key {key:?} has no version {:?}", version_id.unwrap_or_default()))
            }
            Found::Missing => Err(not_a_marker(access.missing(key))),
        }
    }

    /// The error for a head [`Gateway::locate`] named that is not there (removed in between).
    pub(crate) fn vanished(&self, access: &Access, key: &str, version_id: Option<&str>) -> S3Error {
        match version_id {
            Some(v) => s3_error!(NoSuchVersion, "key {key:?} has no version {v:?}"),
            None => not_a_marker(access.missing(key)),
        }
    }

    /// [`Gateway::locate`], then the version's metadata.
    pub(crate) async fn located(&self, access: &Access, key: &str, version_id: Option<&str>) -> S3Result<Located> {
        let (head, vid) = self.locate(access, key, version_id).await?;
        match objects::head_meta_at(&self.client, &head, key).await? {
            Some(meta) => Ok(Located { head, meta, version_id: vid }),
            None => Err(self.vanished(access, key, version_id)),
        }
    }

    pub(crate) async fn put_bucket_versioning_op(
        &self,
        req: S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::PutBucketConfig("s3:PutBucketVersioning"), None)?;
        let conf = &req.input.versioning_configuration;
        if conf.mfa_delete.as_ref().is_some_and(|m| m.as_str() == MFADelete::ENABLED) {
            return Err(s3_error!(NotImplemented, "MFA delete is not supported"));
        }
        let wanted = match conf.status.as_ref().map(|s| s.as_str()) {
            Some(BucketVersioningStatus::ENABLED) => Versioning::Enabled,
            Some(BucketVersioningStatus::SUSPENDED) => Versioning::Suspended,
            Some(other) => {
                return Err(s3_error!(MalformedXML, "versioning status {other:?} is not Enabled or Suspended"));
            }
            None => return Err(s3_error!(MalformedXML, "the versioning configuration has no Status")),
        };
        // There is no way back to never versioned: a bucket's versioning is only ever enabled
        // or suspended (S3 accepts suspending a bucket that was never versioned).
        self.configure(&access.bucket, |b| {
            if b.object_lock.is_some() && wanted != Versioning::Enabled {
                return Err(crate::GatewayError::InvalidBucketState(
                    "a bucket with object lock keeps versioning enabled".into(),
                ));
            }
            b.versioning = wanted;
            Ok(())
        })
        .await?;
        Ok(S3Response::new(PutBucketVersioningOutput {}))
    }

    pub(crate) async fn get_bucket_versioning_op(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::GetBucketConfig("s3:GetBucketVersioning"), None)?;
        let status = match access.bucket.versioning {
            Versioning::Unversioned => None,
            Versioning::Enabled => Some(BucketVersioningStatus::from_static(BucketVersioningStatus::ENABLED)),
            Versioning::Suspended => Some(BucketVersioningStatus::from_static(BucketVersioningStatus::SUSPENDED)),
        };
        Ok(S3Response::new(GetBucketVersioningOutput { status, mfa_delete: None }))
    }

    /// Deletes one key (or one version of it) for DeleteObject and DeleteObjects.
    pub(crate) async fn delete_one(
        &self,
        access: &Access,
        key: &str,
        version_id: Option<&str>,
        bypass_governance: bool,
    ) -> S3Result<versions::Deleted> {
        let parsed = version_id_of(version_id)?;
        let action = if parsed.is_some() { Action::DeleteObjectVersion } else { Action::DeleteObject };
        access.require(action, Some(key))?;
        if access.bucket.object_lock.is_some() && parsed.is_some() {
            // A protected version is refused here; a delete without a version id only adds a
            // marker, which removes nothing. (A retention set between this check and the
            // removal is not seen: the removal itself does not read the version's metadata.)
            match self.located(access, key, version_id).await {
                Ok(v) => crate::s3lock::check_deletable(&v.meta.lock, bypass_governance)?,
                Err(e) if matches!(e.code(), S3ErrorCode::NoSuchVersion | S3ErrorCode::MethodNotAllowed) => {}
                Err(e) => return Err(e),
            }
        }
        let owner = access.party();
        let deleted = versions::delete(
            &self.client,
            &access.bucket,
            key,
            parsed.as_ref(),
            &crate::objects::WriteCondition::None,
            (&owner.id, &owner.display_name),
            self.settings.lease,
            self.gc_delay_ns(),
        )
        .await?;
        Ok(deleted)
    }

    pub(crate) async fn delete_object_op(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        let bypass = req.input.bypass_governance_retention.unwrap_or(false);
        let d = self.delete_one(&access, &req.input.key, req.input.version_id.as_deref(), bypass).await?;
        Ok(S3Response::new(DeleteObjectOutput {
            delete_marker: Some(d.delete_marker),
            version_id: d.version_id,
            ..Default::default()
        }))
    }

    pub(crate) async fn list_object_versions_op(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::ListBucketVersions, None)?;
        let input = req.input;
        let max =
            input.max_keys.unwrap_or(crate::s3impl::MAX_LIST_KEYS).clamp(0, crate::s3impl::MAX_LIST_KEYS) as usize;
        let prefix = input.prefix.clone().unwrap_or_default();
        if input.version_id_marker.as_deref().is_some_and(|v| !v.is_empty()) && input.key_marker.is_none() {
            return Err(s3_error!(InvalidArgument, "a version-id-marker needs a key-marker"));
        }
        let version_marker = input.version_id_marker.as_deref().filter(|v| !v.is_empty());
        if let Some(v) = version_marker {
            version_id_of(Some(v))?;
        }
        let page = versions::list(
            &self.client,
            &access.bucket,
            &prefix,
            input.delimiter.as_deref(),
            input.key_marker.as_deref(),
            version_marker,
            max,
        )
        .await?;
        let url = input.encoding_type.as_ref().is_some_and(|e| e.as_str() == EncodingType::URL);
        let enc = |s: &str| if url { crate::text::uri_encode(s) } else { s.to_string() };
        let mut versions_out = Vec::new();
        let mut markers = Vec::new();
        for v in page.versions {
            let owner =
                Some(Owner { id: Some(v.entry.owner_id.clone()), display_name: Some(v.entry.owner_display.clone()) });
            let version_id = Some(v.entry.version_id());
            let last_modified = Some(timestamp(v.entry.mtime_ns));
            if v.entry.delete_marker {
                markers.push(DeleteMarkerEntry {
                    key: Some(enc(&v.key)),
                    version_id,
                    is_latest: Some(v.is_latest),
                    last_modified,
                    owner,
                });
            } else {
                versions_out.push(ObjectVersion {
                    key: Some(enc(&v.key)),
                    version_id,
                    is_latest: Some(v.is_latest),
                    last_modified,
                    e_tag: Some(crate::s3impl::etag_of(&v.entry.etag)),
                    size: i64::try_from(v.entry.size_bytes).ok(),
                    storage_class: Some(ObjectVersionStorageClass::from_static(ObjectVersionStorageClass::STANDARD)),
                    owner,
                    ..Default::default()
                });
            }
        }
        let common_prefixes: Vec<CommonPrefix> =
            page.common_prefixes.iter().map(|p| CommonPrefix { prefix: Some(enc(p)) }).collect();
        Ok(S3Response::new(ListObjectVersionsOutput {
            name: Some(access.bucket.name.clone()),
            prefix: Some(enc(&prefix)),
            delimiter: input.delimiter.as_deref().map(enc),
            key_marker: Some(input.key_marker.as_deref().map(enc).unwrap_or_default()),
            version_id_marker: Some(input.version_id_marker.unwrap_or_default()),
            max_keys: Some(max as i32),
            is_truncated: Some(page.truncated),
            next_key_marker: page.truncated.then(|| page.next_key.as_deref().map(enc)).flatten(),
            next_version_id_marker: page.truncated.then_some(page.next_version_id).flatten(),
            versions: (!versions_out.is_empty()).then_some(versions_out),
            delete_markers: (!markers.is_empty()).then_some(markers),
            common_prefixes: (!common_prefixes.is_empty()).then_some(common_prefixes),
            encoding_type: input.encoding_type,
            ..Default::default()
        }))
    }
}
