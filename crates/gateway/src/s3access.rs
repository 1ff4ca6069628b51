//! The access-control operations of the S3 API: bucket and object ACLs (canned, grant headers,
//! ACL documents) and bucket policies. The `S3` trait's methods in `s3impl.rs` call these, and
//! every write names the ACL its new object or bucket gets through [`Gateway::request_grants`].

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, s3_error};

use crate::access::{Access, Action};
use crate::acl::{self, Named, Party};
use crate::error::GatewayError;
use crate::layout::{Grant, Grantee, Ownership, Permission};
use crate::meta;
use crate::objects;
use crate::policy::Policy;
use crate::s3impl::Gateway;

fn acls_not_supported() -> s3s::S3Error {
    s3_error!(AccessControlListNotSupported, "the bucket's ownership controls disable ACLs")
}

fn owner_dto(p: &Party) -> Owner {
    Owner { display_name: Some(p.display_name.clone()), id: Some(p.id.clone()) }
}

impl Gateway {
    /// Turns named grantees into grants: canonical ids must name users (their display names are
    /// recorded), e-mail addresses resolve to nobody here.
    async fn resolve(&self, named: Vec<(Named, Permission)>) -> S3Result<Vec<Grant>> {
        if named.len() > acl::MAX_GRANTS {
            return Err(s3_error!(MalformedACLError, "an ACL holds at most {} grants", acl::MAX_GRANTS));
        }
        let mut grants = Vec::with_capacity(named.len());
        for (who, permission) in named {
            let grantee = match who {
                Named::Group(g) => g,
                Named::Id(id) => match meta::user_by_id(&self.client, &id).await {
                    Ok(u) => Grantee::User { id: u.canonical_id, display_name: u.display_name },
                    Err(GatewayError::InvalidArgument(m)) => return Err(s3_error!(InvalidArgument, "{m}")),
                    Err(e) => return Err(e.into()),
                },
                Named::Email(e) => {
                    return Err(s3_error!(
                        UnresolvableGrantByEmailAddress,
                        "no user has e-mail address {e:?} (users here have none)"
                    ));
                }
            };
            grants.push(Grant { grantee, permission });
        }
        Ok(grants)
    }

    /// The ACL a request gives what it creates or changes: its canned ACL (`x-amz-acl`), or its
    /// `x-amz-grant-*` headers, or `private` when it names neither. `bucket_owner` is `None`
    /// for a bucket itself.
    pub(crate) async fn request_grants<T>(
        &self,
        req: &S3Request<T>,
        owner: &Party,
        bucket_owner: Option<&Party>,
    ) -> S3Result<Vec<Grant>> {
        let canned = match req.headers.get("x-amz-acl") {
            Some(v) => Some(v.to_str().map_err(|_| s3_error!(InvalidArgument, "x-amz-acl is not text"))?),
            None => None,
        };
        let mut named = Vec::new();
        for (header, permission) in acl::GRANT_HEADERS {
            for value in req.headers.get_all(header) {
                let text = value.to_str().map_err(|_| s3_error!(InvalidArgument, "{header} is not text"))?;
                named.extend(acl::parse_grant_header(text)?.into_iter().map(|n| (n, permission)));
            }
        }
        match (canned, named.is_empty()) {
            (Some(_), false) => {
                Err(s3_error!(InvalidRequest, "a request names a canned ACL or grant headers, not both"))
            }
            (Some(name), true) => acl::canned(name, owner, bucket_owner),
            (None, false) => self.resolve(named).await,
            (None, true) => acl::canned("private", owner, bucket_owner),
        }
    }

    /// The owner and ACL of an object a request writes into `access`'s bucket: the writer and
    /// the ACL it names, unless the bucket's ownership controls give the object to the bucket
    /// owner (always under `BucketOwnerEnforced`, where ACLs other than
    /// `bucket-owner-full-control` are refused; with `bucket-owner-full-control` under
    /// `BucketOwnerPreferred`). A public ACL is refused where the bucket blocks them.
    pub(crate) async fn new_object_acl<T>(&self, req: &S3Request<T>, access: &Access) -> S3Result<(Party, Vec<Grant>)> {
        let bucket_owner = access.bucket_owner();
        let canned = req.headers.get("x-amz-acl").and_then(|v| v.to_str().ok());
        let grant_headers = acl::GRANT_HEADERS.iter().any(|(h, _)| req.headers.contains_key(*h));
        let full_to_owner = canned == Some("bucket-owner-full-control");
        match access.bucket.ownership {
            Some(Ownership::BucketOwnerEnforced) => {
                if grant_headers || (canned.is_some() && !full_to_owner) {
                    return Err(acls_not_supported());
                }
                let grants = acl::canned("private", &bucket_owner, None)?;
                return Ok((bucket_owner, grants));
            }
            Some(Ownership::BucketOwnerPreferred) if full_to_owner && !grant_headers => {
                let grants = acl::canned("private", &bucket_owner, None)?;
                return Ok((bucket_owner, grants));
            }
            _ => {}
        }
        let writer = access.party();
        let grants = self.request_grants(req, &writer, Some(&bucket_owner)).await?;
        access.check_acl_allowed(&grants)?;
        Ok((writer, grants))
    }

    /// The grants a PutBucketAcl or PutObjectAcl sets: its document, canned ACL or headers.
    async fn new_grants<T>(
        &self,
        req: &S3Request<T>,
        document: Option<&AccessControlPolicy>,
        owner: &Party,
        bucket_owner: Option<&Party>,
    ) -> S3Result<Vec<Grant>> {
        let named_in_headers = req.headers.contains_key("x-amz-acl")
            || acl::GRANT_HEADERS.iter().any(|(h, _)| req.headers.contains_key(*h));
        match document {
            Some(_) if named_in_headers => {
                Err(s3_error!(UnexpectedContent, "a request sets an ACL by document or by headers, not both"))
            }
            Some(doc) => self.resolve(acl::parse_policy(doc, &owner.id)?).await,
            None if named_in_headers => self.request_grants(req, owner, bucket_owner).await,
            None => Err(s3_error!(MissingSecurityHeader, "the request names no ACL")),
        }
    }

    pub(crate) async fn get_bucket_acl_op(
        &self,
        req: S3Request<GetBucketAclInput>,
    ) -> S3Result<S3Response<GetBucketAclOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::GetBucketAcl, None)?;
        Ok(S3Response::new(GetBucketAclOutput {
            grants: Some(acl::to_dto(&access.bucket.grants)),
            owner: Some(owner_dto(&access.bucket_owner())),
        }))
    }

    pub(crate) async fn put_bucket_acl_op(
        &self,
        req: S3Request<PutBucketAclInput>,
    ) -> S3Result<S3Response<PutBucketAclOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::PutBucketAcl, None)?;
        if access.acls_disabled() {
            return Err(acls_not_supported());
        }
        let owner = access.bucket_owner();
        let grants = self.new_grants(&req, req.input.access_control_policy.as_ref(), &owner, None).await?;
        access.check_acl_allowed(&grants)?;
        let b = &access.bucket;
        let updated = meta::update_bucket(&self.client, &b.name, b.id, |rec| {
            rec.grants.clone_from(&grants);
            Ok(())
        })
        .await;
        self.forget_bucket(&b.name);
        updated?;
        Ok(S3Response::new(PutBucketAclOutput {}))
    }

    pub(crate) async fn get_object_acl_op(
        &self,
        req: S3Request<GetObjectAclInput>,
    ) -> S3Result<S3Response<GetObjectAclOutput>> {
        let input = &req.input;
        let access = self.access(&req, &input.bucket).await?;
        let meta = self.located(&access, &input.key, input.version_id.as_deref()).await?.meta;
        access.require_object(Action::GetObjectAcl, &input.key, &meta)?;
        let owner = Party { id: meta.owner_id.clone(), display_name: meta.owner_display.clone() };
        Ok(S3Response::new(GetObjectAclOutput {
            grants: Some(acl::to_dto(&meta.grants)),
            owner: Some(owner_dto(&owner)),
            request_charged: None,
        }))
    }

    pub(crate) async fn put_object_acl_op(
        &self,
        req: S3Request<PutObjectAclInput>,
    ) -> S3Result<S3Response<PutObjectAclOutput>> {
        let input = &req.input;
        let access = self.access(&req, &input.bucket).await?;
        let located = self.located(&access, &input.key, input.version_id.as_deref()).await?;
        let meta = located.meta;
        access.require_object(Action::PutObjectAcl, &input.key, &meta)?;
        if access.acls_disabled() {
            return Err(acls_not_supported());
        }
        let owner = Party { id: meta.owner_id.clone(), display_name: meta.owner_display.clone() };
        let bucket_owner = access.bucket_owner();
        let grants = self.new_grants(&req, input.access_control_policy.as_ref(), &owner, Some(&bucket_owner)).await?;
        access.check_acl_allowed(&grants)?;
        let changed = objects::update_meta(&self.client, &located.head, &input.key, |m| m.grants.clone_from(&grants));
        if changed.await?.is_none() {
            return Err(GatewayError::NoSuchKey(input.key.clone()).into());
        }
        Ok(S3Response::new(PutObjectAclOutput { request_charged: None }))
    }

    pub(crate) async fn get_bucket_policy_op(
        &self,
        req: S3Request<GetBucketPolicyInput>,
    ) -> S3Result<S3Response<GetBucketPolicyOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::GetBucketPolicy, None)?;
        match &access.bucket.policy {
            Some(text) => Ok(S3Response::new(GetBucketPolicyOutput { policy: Some(text.clone()) })),
            None => Err(s3_error!(NoSuchBucketPolicy, "bucket {:?} has no policy", access.bucket.name)),
        }
    }

    pub(crate) async fn put_bucket_policy_op(
        &self,
        req: S3Request<PutBucketPolicyInput>,
    ) -> S3Result<S3Response<PutBucketPolicyOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::PutBucketPolicy, None)?;
        let text = req.input.policy.clone();
        let parsed = Policy::parse(&text, &access.bucket.name).map_err(|e| s3_error!(MalformedPolicy, "{e}"))?;
        if access.bucket.public_access_block.is_some_and(|b| b.block_public_policy) && parsed.is_public() {
            return Err(s3_error!(AccessDenied, "the bucket's public access block refuses public policies"));
        }
        self.set_policy(&access.bucket, Some(text)).await?;
        Ok(S3Response::new(PutBucketPolicyOutput {}))
    }

    pub(crate) async fn delete_bucket_policy_op(
        &self,
        req: S3Request<DeleteBucketPolicyInput>,
    ) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::DeleteBucketPolicy, None)?;
        self.set_policy(&access.bucket, None).await?;
        Ok(S3Response::new(DeleteBucketPolicyOutput {}))
    }

    async fn set_policy(&self, bucket: &crate::layout::BucketRecord, policy: Option<String>) -> S3Result<()> {
        let updated = meta::update_bucket(&self.client, &bucket.name, bucket.id, |rec| {
            rec.policy.clone_from(&policy);
            Ok(())
        })
        .await;
        self.forget_bucket(&bucket.name);
        updated?;
        Ok(())
    }

    pub(crate) async fn get_bucket_policy_status_op(
        &self,
        req: S3Request<GetBucketPolicyStatusInput>,
    ) -> S3Result<S3Response<GetBucketPolicyStatusOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::GetBucketPolicyStatus, None)?;
        let is_public = access.is_public();
        Ok(S3Response::new(GetBucketPolicyStatusOutput {
            policy_status: Some(PolicyStatus { is_public: Some(is_public) }),
        }))
    }
}
