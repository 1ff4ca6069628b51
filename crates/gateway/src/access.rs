//! Who may do what. Every request to a bucket looks the bucket up first (a missing bucket is
//! `NoSuchBucket` to anyone, signed or not), then its requester, then asks the bucket policy and
//! the ACLs: an explicit Deny in the policy refuses, an Allow allows, and when the policy is
//! silent the bucket's or the object's ACL decides. Owners keep the right to read and change
//! their resources' ACLs whatever the ACL says, so nobody can lock themselves out for good.

use std::net::SocketAddr;
use std::time::Duration;

use s3s::{S3Error, S3Request, S3Result, s3_error};

use crate::acl::{self, Party, Requester};
use crate::cache::TtlCache;
use crate::error::GatewayError;
use crate::layout::{BucketRecord, Grant, ObjectMeta, Ownership, Permission, UserRecord};
use crate::meta;
use crate::policy::{self, Decision, Policy, Who};
use crate::s3impl::Gateway;

/// How long a bucket or user record is trusted: changes made through another gateway (an ACL,
/// a policy, a deleted bucket) take effect here within this time; changes made through this
/// gateway take effect at once.
pub const RECORD_TTL: Duration = Duration::from_secs(2);
/// Most bucket and user records cached, each.
const MAX_CACHED_RECORDS: usize = 10_000;

/// The owner recorded for objects written by anonymous requests (S3's anonymous principal).
pub const ANONYMOUS_ID: &str = "anonymous";

/// Where a request came from, put into its extensions by the server (policies' `aws:SourceIp`
/// and `aws:SecureTransport`).
#[derive(Debug, Clone, Copy)]
pub struct Transport {
    pub peer: SocketAddr,
    pub secure: bool,
}

/// The cached records access decisions read.
pub struct Records {
    users: TtlCache<UserRecord>,
    buckets: TtlCache<BucketRecord>,
}

impl Records {
    pub fn new() -> Records {
        Records {
            users: TtlCache::new(RECORD_TTL, MAX_CACHED_RECORDS),
            buckets: TtlCache::new(RECORD_TTL, MAX_CACHED_RECORDS),
        }
    }
}

impl Default for Records {
    fn default() -> Records {
        Records::new()
    }
}

/// An S3 action, by the name policies use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    ListBucket,
    ListBucketVersions,
    ListBucketMultipartUploads,
    ListMultipartUploadParts,
    GetBucketLocation,
    DeleteBucket,
    GetBucketAcl,
    PutBucketAcl,
    GetBucketPolicy,
    PutBucketPolicy,
    DeleteBucketPolicy,
    GetBucketPolicyStatus,
    /// Public access block, ownership controls, bucket tagging: the owner's configuration.
    GetBucketConfig(&'static str),
    PutBucketConfig(&'static str),
    GetObject,
    /// A read naming a version.
    GetObjectVersion,
    /// GetObjectAttributes, of the current version or of one named.
    GetObjectAttributes,
    GetObjectVersionAttributes,
    GetObjectTagging,
    PutObjectTagging,
    DeleteObjectTagging,
    GetObjectAcl,
    PutObject,
    PutObjectAcl,
    DeleteObject,
    /// A delete naming a version.
    DeleteObjectVersion,
    GetObjectRetention,
    PutObjectRetention,
    GetObjectLegalHold,
    PutObjectLegalHold,
    AbortMultipartUpload,
}

/// What an ACL must grant for an action when the policy is silent.
enum AclRule {
    Bucket(Permission),
    Object(Permission),
    /// Only the bucket's owner (bucket configuration).
    Owner,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::ListBucket => "s3:ListBucket",
            Action::ListBucketVersions => "s3:ListBucketVersions",
            Action::ListBucketMultipartUploads => "s3:ListBucketMultipartUploads",
            Action::ListMultipartUploadParts => "s3:ListMultipartUploadParts",
            Action::GetBucketLocation => "s3:GetBucketLocation",
            Action::DeleteBucket => "s3:DeleteBucket",
            Action::GetBucketAcl => "s3:GetBucketAcl",
            Action::PutBucketAcl => "s3:PutBucketAcl",
            Action::GetBucketPolicy => "s3:GetBucketPolicy",
            Action::PutBucketPolicy => "s3:PutBucketPolicy",
            Action::DeleteBucketPolicy => "s3:DeleteBucketPolicy",
            Action::GetBucketPolicyStatus => "s3:GetBucketPolicyStatus",
            Action::GetBucketConfig(name) | Action::PutBucketConfig(name) => name,
            Action::GetObject => "s3:GetObject",
            Action::GetObjectVersion => "s3:GetObjectVersion",
            Action::GetObjectAttributes => "s3:GetObjectAttributes",
            Action::GetObjectVersionAttributes => "s3:GetObjectVersionAttributes",
            Action::GetObjectTagging => "s3:GetObjectTagging",
            Action::PutObjectTagging => "s3:PutObjectTagging",
            Action::DeleteObjectTagging => "s3:DeleteObjectTagging",
            Action::GetObjectAcl => "s3:GetObjectAcl",
            Action::PutObject => "s3:PutObject",
            Action::PutObjectAcl => "s3:PutObjectAcl",
            Action::DeleteObject => "s3:DeleteObject",
            Action::DeleteObjectVersion => "s3:DeleteObjectVersion",
            Action::GetObjectRetention => "s3:GetObjectRetention",
            Action::PutObjectRetention => "s3:PutObjectRetention",
            Action::GetObjectLegalHold => "s3:GetObjectLegalHold",
            Action::PutObjectLegalHold => "s3:PutObjectLegalHold",
            Action::AbortMultipartUpload => "s3:AbortMultipartUpload",
        }
    }

    fn acl_rule(self) -> AclRule {
        use Permission::*;
        match self {
            Action::ListBucket
            | Action::ListBucketVersions
            | Action::ListBucketMultipartUploads
            | Action::ListMultipartUploadParts => AclRule::Bucket(Read),
            Action::PutObject | Action::DeleteObject | Action::DeleteObjectVersion | Action::AbortMultipartUpload => {
                AclRule::Bucket(Write)
            }
            Action::GetBucketAcl => AclRule::Bucket(ReadAcp),
            Action::PutBucketAcl => AclRule::Bucket(WriteAcp),
            Action::GetObject
            | Action::GetObjectVersion
            | Action::GetObjectAttributes
            | Action::GetObjectVersionAttributes
            | Action::GetObjectTagging
            | Action::GetObjectRetention
            | Action::GetObjectLegalHold => AclRule::Object(Read),
            Action::PutObjectRetention | Action::PutObjectLegalHold => AclRule::Object(WriteAcp),
            Action::PutObjectTagging | Action::DeleteObjectTagging => AclRule::Object(WriteAcp),
            Action::GetObjectAcl => AclRule::Object(ReadAcp),
            Action::PutObjectAcl => AclRule::Object(WriteAcp),
            Action::GetBucketLocation
            | Action::DeleteBucket
            | Action::GetBucketPolicy
            | Action::PutBucketPolicy
            | Action::DeleteBucketPolicy
            | Action::GetBucketPolicyStatus
            | Action::GetBucketConfig(_)
            | Action::PutBucketConfig(_) => AclRule::Owner,
        }
    }
}

fn denied() -> S3Error {
    s3_error!(AccessDenied, "Access Denied")
}

/// A request's bucket and requester, and what decides its access.
#[derive(Clone)]
pub struct Access {
    pub bucket: BucketRecord,
    /// `None` for an anonymous request.
    pub user: Option<UserRecord>,
    policy: Option<Policy>,
    context: policy::Context,
}

impl Access {
    fn requester(&self) -> Requester<'_> {
        match &self.user {
            Some(u) => Requester::User(&u.canonical_id),
            None => Requester::Anonymous,
        }
    }

    fn who(&self) -> Who<'_> {
        match &self.user {
            Some(u) => Who::User { name: &u.name, canonical_id: &u.canonical_id },
            None => Who::Anonymous,
        }
    }

    /// The requester as the owner of what it creates.
    pub fn party(&self) -> Party {
        match &self.user {
            Some(u) => Party { id: u.canonical_id.clone(), display_name: u.display_name.clone() },
            None => Party { id: ANONYMOUS_ID.into(), display_name: ANONYMOUS_ID.into() },
        }
    }

    pub fn bucket_owner(&self) -> Party {
        Party { id: self.bucket.owner_id.clone(), display_name: self.bucket.owner_display.clone() }
    }

    pub fn is_bucket_owner(&self) -> bool {
        self.user.as_ref().is_some_and(|u| u.name == self.bucket.owner)
    }

    fn resource(&self, key: Option<&str>) -> String {
        match key {
            Some(k) => format!("arn:aws:s3:::{}/{k}", self.bucket.name),
            None => format!("arn:aws:s3:::{}", self.bucket.name),
        }
    }

    fn decide(&self, action: Action, key: Option<&str>) -> Decision {
        let Some(p) = &self.policy else {
            return Decision::Silent;
        };
        let decision = p.evaluate(self.who(), action.name(), &self.resource(key), &self.context);
        // RestrictPublicBuckets: a public policy allows nothing to anyone but the owner (its
        // denials still apply).
        let restricted = self.bucket.public_access_block.is_some_and(|b| b.restrict_public_buckets)
            && p.is_public()
            && !self.is_bucket_owner();
        if restricted && decision == Decision::Allow { Decision::Silent } else { decision }
    }

    /// Whether ACLs are disabled (ownership controls `BucketOwnerEnforced`): then only the
    /// bucket owner's implicit rights and the policy decide.
    pub fn acls_disabled(&self) -> bool {
        self.bucket.ownership == Some(Ownership::BucketOwnerEnforced)
    }

    /// Whether an ACL grants `p` to the requester, as the bucket's settings let ACLs count:
    /// not at all when ACLs are disabled, without public grants under IgnorePublicAcls.
    fn acl_allows(&self, grants: &[Grant], p: Permission) -> bool {
        if self.acls_disabled() {
            return self.is_bucket_owner();
        }
        let ignore_public = self.bucket.public_access_block.is_some_and(|b| b.ignore_public_acls);
        if ignore_public {
            let private: Vec<Grant> =
                grants.iter().filter(|g| !acl::is_public(std::slice::from_ref(g))).cloned().collect();
            return acl::allows(&private, self.requester(), p);
        }
        acl::allows(grants, self.requester(), p)
    }

    /// Refuses a public ACL where the bucket blocks them (BlockPublicAcls).
    pub fn check_acl_allowed(&self, grants: &[Grant]) -> S3Result<()> {
        if self.bucket.public_access_block.is_some_and(|b| b.block_public_acls) && acl::is_public(grants) {
            return Err(s3_error!(AccessDenied, "the bucket's public access block refuses public ACLs"));
        }
        Ok(())
    }

    /// Whether the bucket's policy or ACL makes it public (GetBucketPolicyStatus).
    pub fn is_public(&self) -> bool {
        self.policy.as_ref().is_some_and(Policy::is_public) || acl::is_public(&self.bucket.grants)
    }

    /// Adds a condition key for the policy (e.g. `s3:prefix` of a listing).
    pub fn set_condition(&mut self, key: &str, value: impl Into<String>) {
        self.context.set(key, value);
    }

    /// Checks an action on the bucket, or on `key` for object writes (their ACL rule is the
    /// bucket's). Refuses object-ACL actions: those need the object ([`Access::require_object`]).
    pub fn require(&self, action: Action, key: Option<&str>) -> S3Result<()> {
        match self.decide(action, key) {
            Decision::Deny => return Err(denied()),
            Decision::Allow => return Ok(()),
            Decision::Silent => {}
        }
        let allowed = match action.acl_rule() {
            AclRule::Owner => self.is_bucket_owner(),
            AclRule::Bucket(p) => {
                let owner_keeps = self.is_bucket_owner() && matches!(p, Permission::ReadAcp | Permission::WriteAcp);
                owner_keeps || self.acl_allows(&self.bucket.grants, p)
            }
            AclRule::Object(_) => {
                debug_assert!(false, "{} needs the object's ACL", action.name());
                false
            }
        };
        if allowed { Ok(()) } else { Err(denied()) }
    }

    /// Checks an action on object `key` whose metadata is `meta` (its owner, ACL and tags: a
    /// policy may name its tags as `s3:ExistingObjectTag/KEY`).
    pub fn require_object(&self, action: Action, key: &str, meta: &ObjectMeta) -> S3Result<()> {
        let (owner_id, grants) = (meta.owner_id.as_str(), meta.grants.as_slice());
        let decision = if self.policy.is_some() && !meta.tags.is_empty() {
            let mut with_tags = self.clone();
            for (k, v) in &meta.tags {
                with_tags.set_condition(&format!("s3:ExistingObjectTag/{k}"), v.clone());
            }
            with_tags.decide(action, Some(key))
        } else {
            self.decide(action, Some(key))
        };
        match decision {
            Decision::Deny => return Err(denied()),
            Decision::Allow => return Ok(()),
            Decision::Silent => {}
        }
        let AclRule::Object(p) = action.acl_rule() else {
            return self.require(action, Some(key));
        };
        let is_owner = self.user.as_ref().is_some_and(|u| u.canonical_id == owner_id);
        let owner_keeps = is_owner && matches!(p, Permission::ReadAcp | Permission::WriteAcp);
        if owner_keeps || self.acl_allows(grants, p) { Ok(()) } else { Err(denied()) }
    }

    /// The answer for a key with no object: `NoSuchKey` to whoever may list the bucket, else
    /// `AccessDenied` (so a listing-less requester learns nothing about which keys exist).
    /// The listing permission is judged as a listing of the key itself (`s3:prefix` = key), so
    /// a policy that opens a prefix to listing answers 404 for keys under it.
    pub fn missing(&self, key: &str) -> S3Error {
        let mut asked = self.clone();
        asked.set_condition("s3:prefix", key);
        match asked.require(Action::ListBucket, None) {
            Ok(()) => GatewayError::NoSuchKey(key.to_string()).into(),
            Err(e) => e,
        }
    }
}

impl Gateway {
    /// The bucket record, through the cache.
    pub(crate) async fn bucket(&self, name: &str) -> S3Result<BucketRecord> {
        if let Some(b) = self.records.buckets.get(name) {
            return Ok(b);
        }
        let b = meta::get_bucket(&self.client, name).await?;
        self.records.buckets.put(name, b.clone());
        Ok(b)
    }

    /// Drops a bucket record this gateway changed or removed, so its next use reads it again.
    pub(crate) fn forget_bucket(&self, name: &str) {
        self.records.buckets.remove(name);
    }

    /// The user record, through the cache.
    async fn user(&self, name: &str) -> S3Result<UserRecord> {
        if let Some(u) = self.records.users.get(name) {
            return Ok(u);
        }
        match meta::get_user(&self.client, name).await {
            Ok(u) => {
                self.records.users.put(name, u.clone());
                Ok(u)
            }
            Err(GatewayError::NoSuchUser(_)) => Err(s3_error!(InvalidAccessKeyId, "the key's user was removed")),
            Err(e) => Err(e.into()),
        }
    }

    /// The user who signed the request (s3s has verified the signature), or `None` when it is
    /// anonymous.
    pub(crate) async fn signer<T>(&self, req: &S3Request<T>) -> S3Result<Option<UserRecord>> {
        let Some(creds) = &req.credentials else {
            return Ok(None);
        };
        let key = self.keys.get(&creds.access_key).await.map_err(S3Error::from)?;
        Ok(Some(self.user(&key.user).await?))
    }

    /// The signed requester, for operations that are never anonymous (listing one's buckets,
    /// creating a bucket).
    pub(crate) async fn requester<T>(&self, req: &S3Request<T>) -> S3Result<UserRecord> {
        self.signer(req).await?.ok_or_else(|| s3_error!(AccessDenied, "anonymous requests cannot do this"))
    }

    /// The request's bucket and requester, in that order, with the policy ready to decide.
    pub(crate) async fn access<T>(&self, req: &S3Request<T>, bucket: &str) -> S3Result<Access> {
        let bucket = self.bucket(bucket).await?;
        // A client that names the owner it expects is refused if the bucket has another, before
        // anything else is decided (S3 answers 403 whoever asks).
        if let Some(expected) = req.headers.get("x-amz-expected-bucket-owner")
            && expected.as_bytes() != bucket.owner_id.as_bytes()
        {
            return Err(s3s::s3_error!(AccessDenied, "the bucket is not owned by the expected owner"));
        }
        let user = self.signer(req).await?;
        let policy = match &bucket.policy {
            Some(text) => Some(Policy::parse(text, &bucket.name).map_err(|e| {
                S3Error::from(GatewayError::Corrupt(format!("stored policy of bucket {:?}: {e}", bucket.name)))
            })?),
            None => None,
        };
        let mut context = policy::Context::default();
        if policy.is_some() {
            fill_context(&mut context, req, user.as_ref());
        }
        Ok(Access { bucket, user, policy, context })
    }
}

/// The condition keys of a request: where it came from, who signed it, its `x-amz-*` headers
/// (as `s3:x-amz-*`) and its listing parameters.
fn fill_context<T>(cx: &mut policy::Context, req: &S3Request<T>, user: Option<&UserRecord>) {
    if let Some(t) = req.extensions.get::<Transport>() {
        cx.set("aws:SourceIp", t.peer.ip().to_string());
        cx.set("aws:SecureTransport", t.secure.to_string());
    }
    if let Some(u) = user {
        cx.set("aws:username", u.name.clone());
        cx.set("aws:userid", u.canonical_id.clone());
    }
    for (name, value) in &req.headers {
        let name = name.as_str();
        if let (true, Ok(v)) = (name.starts_with("x-amz-"), value.to_str()) {
            cx.set(&format!("s3:{name}"), v);
        }
        if let ("referer" | "user-agent", Ok(v)) = (name, value.to_str()) {
            cx.set(&format!("aws:{name}"), v);
        }
    }
    if let Some(tagging) = req.headers.get("x-amz-tagging").and_then(|v| v.to_str().ok()) {
        for pair in tagging.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            cx.set(&format!("s3:RequestObjectTag/{}", crate::text::uri_decode(k)), crate::text::uri_decode(v));
        }
    }
    if let Some(q) = req.uri.query() {
        for pair in q.split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if matches!(k, "prefix" | "delimiter" | "max-keys" | "versionId") {
                let v = crate::text::uri_decode(v);
                cx.set(&format!("s3:{k}"), v);
            }
        }
    }
}
