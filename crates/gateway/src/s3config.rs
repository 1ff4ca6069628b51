//! Bucket configuration and tags in the S3 API: public access blocks, object ownership
//! controls, bucket tagging and object tagging. The `S3` trait's methods in `s3impl.rs` call
//! these; the settings themselves take effect in `access.rs` and `s3access.rs`.

use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};

use crate::access::Action;
use crate::error::GatewayError;
use crate::layout::{self, BucketRecord, Ownership};
use crate::meta;
use crate::objects;
use crate::s3impl::Gateway;
use crate::text::uri_decode;

/// Most tags on one object, and on one bucket (S3's limits).
const MAX_OBJECT_TAGS: usize = 10;
const MAX_BUCKET_TAGS: usize = 50;
/// Longest tag key and value, in characters (S3's limits).
const MAX_TAG_KEY_CHARS: usize = 128;
const MAX_TAG_VALUE_CHARS: usize = 256;

/// Checks a tag set and puts it in key order (a set has no order of its own; S3 servers return
/// tags sorted).
fn check_tags(tags: &mut [(String, String)], max: usize) -> S3Result<()> {
    if tags.len() > max {
        return Err(s3_error!(InvalidTag, "at most {max} tags, not {}", tags.len()));
    }
    for (i, (k, v)) in tags.iter().enumerate() {
        if k.is_empty() || k.chars().count() > MAX_TAG_KEY_CHARS {
            return Err(s3_error!(InvalidTag, "tag keys are 1 to {MAX_TAG_KEY_CHARS} characters"));
        }
        if v.chars().count() > MAX_TAG_VALUE_CHARS {
            return Err(s3_error!(InvalidTag, "tag values are at most {MAX_TAG_VALUE_CHARS} characters"));
        }
        if tags[..i].iter().any(|(other, _)| other == k) {
            return Err(s3_error!(InvalidTag, "tag key {k:?} appears twice"));
        }
    }
    tags.sort();
    Ok(())
}

/// The tags of an `x-amz-tagging` header (a URL-encoded query string), checked.
pub(crate) fn request_tags(header: Option<&str>) -> S3Result<Vec<(String, String)>> {
    let Some(text) = header else {
        return Ok(Vec::new());
    };
    let mut tags: Vec<(String, String)> = text
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (uri_decode(k), uri_decode(v))
        })
        .collect();
    check_tags(&mut tags, MAX_OBJECT_TAGS)?;
    Ok(tags)
}

fn tags_of(tagging: Tagging, max: usize) -> S3Result<Vec<(String, String)>> {
    let mut tags: Vec<(String, String)> =
        tagging.tag_set.into_iter().map(|t| (t.key.unwrap_or_default(), t.value.unwrap_or_default())).collect();
    check_tags(&mut tags, max)?;
    Ok(tags)
}

fn tag_set(tags: &[(String, String)]) -> TagSet {
    tags.iter().map(|(k, v)| Tag { key: Some(k.clone()), value: Some(v.clone()) }).collect()
}

pub(crate) fn custom_error(code: &'static str, status: u16, message: String) -> S3Error {
    let mut e = S3Error::with_message(S3ErrorCode::Custom(code.into()), message);
    if let Ok(s) = hyper::StatusCode::from_u16(status) {
        e.set_status_code(s);
    }
    e
}

fn ownership_name(o: Ownership) -> &'static str {
    match o {
        Ownership::ObjectWriter => ObjectOwnership::OBJECT_WRITER,
        Ownership::BucketOwnerPreferred => ObjectOwnership::BUCKET_OWNER_PREFERRED,
        Ownership::BucketOwnerEnforced => ObjectOwnership::BUCKET_OWNER_ENFORCED,
    }
}

/// The ownership setting S3 names `name`.
pub(crate) fn ownership_of(name: &str) -> S3Result<Ownership> {
    match name {
        ObjectOwnership::OBJECT_WRITER => Ok(Ownership::ObjectWriter),
        ObjectOwnership::BUCKET_OWNER_PREFERRED => Ok(Ownership::BucketOwnerPreferred),
        ObjectOwnership::BUCKET_OWNER_ENFORCED => Ok(Ownership::BucketOwnerEnforced),
        other => Err(s3_error!(MalformedXML, "unknown object ownership {other:?}")),
    }
}

/// Refuses `BucketOwnerEnforced` on a bucket whose ACL grants anything beyond its owner (S3
/// would silently stop honouring those grants).
pub(crate) fn check_ownership_with_acl(
    ownership: Option<Ownership>,
    owner_id: &str,
    grants: &[layout::Grant],
) -> S3Result<()> {
    let beyond_owner = grants.iter().any(|g| match &g.grantee {
        layout::Grantee::User { id, .. } => id != owner_id,
        _ => true,
    });
    if ownership == Some(Ownership::BucketOwnerEnforced) && beyond_owner {
        return Err(custom_error(
            "InvalidBucketAclWithObjectOwnership",
            400,
            "BucketOwnerEnforced disables ACLs: make the bucket's ACL private first".into(),
        ));
    }
    Ok(())
}

impl Gateway {
    /// Changes bucket `bucket`'s record (as its owner configured) and drops the cached copy.
    pub(crate) async fn configure(
        &self,
        bucket: &BucketRecord,
        change: impl Fn(&mut BucketRecord) -> Result<(), GatewayError>,
    ) -> S3Result<()> {
        let updated = meta::update_bucket(&self.client, &bucket.name, bucket.id, change).await;
        self.forget_bucket(&bucket.name);
        updated?;
        Ok(())
    }

    pub(crate) async fn put_public_access_block_op(
        &self,
        req: S3Request<PutPublicAccessBlockInput>,
    ) -> S3Result<S3Response<PutPublicAccessBlockOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::PutBucketConfig("s3:PutBucketPublicAccessBlock"), None)?;
        let c = &req.input.public_access_block_configuration;
        let block = layout::PublicAccessBlock {
            block_public_acls: c.block_public_acls.unwrap_or(false),
            ignore_public_acls: c.ignore_public_acls.unwrap_or(false),
            block_public_policy: c.block_public_policy.unwrap_or(false),
            restrict_public_buckets: c.restrict_public_buckets.unwrap_or(false),
        };
        self.configure(&access.bucket, |b| {
            b.public_access_block = Some(block);
            Ok(())
        })
        .await?;
        Ok(S3Response::new(PutPublicAccessBlockOutput {}))
    }

    pub(crate) async fn get_public_access_block_op(
        &self,
        req: S3Request<GetPublicAccessBlockInput>,
    ) -> S3Result<S3Response<GetPublicAccessBlockOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::GetBucketConfig("s3:GetBucketPublicAccessBlock"), None)?;
        let Some(b) = access.bucket.public_access_block else {
            return Err(custom_error(
                "NoSuchPublicAccessBlockConfiguration",
                404,
                format!("bucket {:?} has no public access block", access.bucket.name),
            ));
        };
        Ok(S3Response::new(GetPublicAccessBlockOutput {
            public_access_block_configuration: Some(PublicAccessBlockConfiguration {
                block_public_acls: Some(b.block_public_acls),
                ignore_public_acls: Some(b.ignore_public_acls),
                block_public_policy: Some(b.block_public_policy),
                restrict_public_buckets: Some(b.restrict_public_buckets),
            }),
        }))
    }

    pub(crate) async fn delete_public_access_block_op(
        &self,
        req: S3Request<DeletePublicAccessBlockInput>,
    ) -> S3Result<S3Response<DeletePublicAccessBlockOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::PutBucketConfig("s3:PutBucketPublicAccessBlock"), None)?;
        self.configure(&access.bucket, |b| {
            b.public_access_block = None;
            Ok(())
        })
        .await?;
        Ok(S3Response::new(DeletePublicAccessBlockOutput {}))
    }

    pub(crate) async fn put_ownership_op(
        &self,
        req: S3Request<PutBucketOwnershipControlsInput>,
    ) -> S3Result<S3Response<PutBucketOwnershipControlsOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::PutBucketConfig("s3:PutBucketOwnershipControls"), None)?;
        let rules = &req.input.ownership_controls.rules;
        let [rule] = rules.as_slice() else {
            return Err(s3_error!(MalformedXML, "ownership controls hold exactly one rule, not {}", rules.len()));
        };
        let ownership = ownership_of(rule.object_ownership.as_str())?;
        check_ownership_with_acl(Some(ownership), &access.bucket.owner_id, &access.bucket.grants)?;
        self.configure(&access.bucket, |b| {
            // Checked again on the record being replaced: its ACL may have changed since.
            check_ownership_with_acl(Some(ownership), &b.owner_id, &b.grants)
                .map_err(|e| GatewayError::InvalidArgument(e.message().unwrap_or("ACL not private").to_string()))?;
            b.ownership = Some(ownership);
            Ok(())
        })
        .await?;
        Ok(S3Response::new(PutBucketOwnershipControlsOutput {}))
    }

    pub(crate) async fn get_ownership_op(
        &self,
        req: S3Request<GetBucketOwnershipControlsInput>,
    ) -> S3Result<S3Response<GetBucketOwnershipControlsOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::GetBucketConfig("s3:GetBucketOwnershipControls"), None)?;
        let Some(o) = access.bucket.ownership else {
            return Err(s3_error!(
                OwnershipControlsNotFoundError,
                "bucket {:?} has no ownership controls",
                access.bucket.name
            ));
        };
        Ok(S3Response::new(GetBucketOwnershipControlsOutput {
            ownership_controls: Some(OwnershipControls {
                rules: vec![OwnershipControlsRule {
                    object_ownership: ObjectOwnership::from_static(ownership_name(o)),
                }],
            }),
        }))
    }

    pub(crate) async fn delete_ownership_op(
        &self,
        req: S3Request<DeleteBucketOwnershipControlsInput>,
    ) -> S3Result<S3Response<DeleteBucketOwnershipControlsOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::PutBucketConfig("s3:PutBucketOwnershipControls"), None)?;
        self.configure(&access.bucket, |b| {
            b.ownership = None;
            Ok(())
        })
        .await?;
        Ok(S3Response::new(DeleteBucketOwnershipControlsOutput {}))
    }

    pub(crate) async fn put_bucket_tagging_op(
        &self,
        req: S3Request<PutBucketTaggingInput>,
    ) -> S3Result<S3Response<PutBucketTaggingOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::PutBucketConfig("s3:PutBucketTagging"), None)?;
        let tags = tags_of(req.input.tagging, MAX_BUCKET_TAGS)?;
        self.configure(&access.bucket, |b| {
            b.tags.clone_from(&tags);
            Ok(())
        })
        .await?;
        Ok(S3Response::new(PutBucketTaggingOutput {}))
    }

    pub(crate) async fn get_bucket_tagging_op(
        &self,
        req: S3Request<GetBucketTaggingInput>,
    ) -> S3Result<S3Response<GetBucketTaggingOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::GetBucketConfig("s3:GetBucketTagging"), None)?;
        if access.bucket.tags.is_empty() {
            return Err(s3_error!(NoSuchTagSet, "bucket {:?} has no tags", access.bucket.name));
        }
        Ok(S3Response::new(GetBucketTaggingOutput { tag_set: tag_set(&access.bucket.tags) }))
    }

    pub(crate) async fn delete_bucket_tagging_op(
        &self,
        req: S3Request<DeleteBucketTaggingInput>,
    ) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::PutBucketConfig("s3:PutBucketTagging"), None)?;
        self.configure(&access.bucket, |b| {
            b.tags.clear();
            Ok(())
        })
        .await?;
        Ok(S3Response::new(DeleteBucketTaggingOutput {}))
    }

    pub(crate) async fn get_object_tagging_op(
        &self,
        req: S3Request<GetObjectTaggingInput>,
    ) -> S3Result<S3Response<GetObjectTaggingOutput>> {
        let input = &req.input;
        let access = self.access(&req, &input.bucket).await?;
        let located = self.located(&access, &input.key, input.version_id.as_deref()).await?;
        access.require_object(Action::GetObjectTagging, &input.key, &located.meta)?;
        Ok(S3Response::new(GetObjectTaggingOutput {
            tag_set: tag_set(&located.meta.tags),
            version_id: located.version_id,
        }))
    }

    /// Sets (or with `None`, removes) the tags of an object the request may tag.
    async fn set_object_tags<T>(
        &self,
        req: &S3Request<T>,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        tags: Vec<(String, String)>,
        action: Action,
    ) -> S3Result<Option<String>> {
        let access = self.access(req, bucket).await?;
        let located = self.located(&access, key, version_id).await?;
        access.require_object(action, key, &located.meta)?;
        let changed = objects::update_meta(&self.client, &located.head, key, |m| m.tags.clone_from(&tags));
        if changed.await?.is_none() {
            return Err(GatewayError::NoSuchKey(key.to_string()).into());
        }
        Ok(located.version_id)
    }

    pub(crate) async fn put_object_tagging_op(
        &self,
        req: S3Request<PutObjectTaggingInput>,
    ) -> S3Result<S3Response<PutObjectTaggingOutput>> {
        let tags = tags_of(req.input.tagging.clone(), MAX_OBJECT_TAGS)?;
        let input = &req.input;
        let action = Action::PutObjectTagging;
        let version_id =
            self.set_object_tags(&req, &input.bucket, &input.key, input.version_id.as_deref(), tags, action).await?;
        Ok(S3Response::new(PutObjectTaggingOutput { version_id }))
    }

    pub(crate) async fn delete_object_tagging_op(
        &self,
        req: S3Request<DeleteObjectTaggingInput>,
    ) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
        let input = &req.input;
        let action = Action::DeleteObjectTagging;
        let version_id = self
            .set_object_tags(&req, &input.bucket, &input.key, input.version_id.as_deref(), Vec::new(), action)
            .await?;
        Ok(S3Response::new(DeleteObjectTaggingOutput { version_id }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_headers_parse_and_limits_hold() {
        assert_eq!(
            request_tags(Some("empty=&a=1&b%20c=x%2Fy")).unwrap(),
            vec![("a".into(), "1".into()), ("b c".into(), "x/y".into()), ("empty".into(), String::new())]
        );
        assert!(request_tags(None).unwrap().is_empty());
        assert!(request_tags(Some("a=1&a=2")).is_err(), "duplicate keys");
        let eleven: Vec<String> = (0..11).map(|i| format!("k{i}=v")).collect();
        assert!(request_tags(Some(&eleven.join("&"))).is_err(), "more than ten");
        assert!(request_tags(Some(&format!("{}=v", "k".repeat(129)))).is_err(), "long key");
        assert!(request_tags(Some(&format!("k={}", "v".repeat(257)))).is_err(), "long value");
        assert!(request_tags(Some("=v")).is_err(), "empty key");
    }
}
