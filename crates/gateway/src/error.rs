//! The gateway's errors: one variant per condition an S3 client (or the CLI) must tell apart,
//! and their S3 error codes.

use shoal_client::ClientError;
use shoal_proto::ErrorCode;

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("bucket {0:?} does not exist")]
    NoSuchBucket(String),
    #[error("key {0:?} does not exist")]
    NoSuchKey(String),
    #[error("{0}")]
    NoSuchVersion(String),
    #[error("user {0:?} does not exist")]
    NoSuchUser(String),
    #[error("access key {0:?} does not exist")]
    NoSuchAccessKey(String),
    #[error("user {0:?} already exists")]
    UserExists(String),
    /// The name is taken; `by_you` when the caller owns it.
    #[error("bucket {name:?} already exists")]
    BucketExists { name: String, by_you: bool },
    #[error("bucket {0:?} is not empty")]
    BucketNotEmpty(String),
    #[error("user {user:?} still owns {buckets} bucket(s); remove them first")]
    UserHasBuckets { user: String, buckets: usize },
    #[error("{0}")]
    InvalidArgument(String),
    /// The bucket's state does not allow the request (object lock without versioning, ...).
    #[error("{0}")]
    InvalidBucketState(String),
    #[error("upload {0} does not exist (completed, aborted or never started)")]
    NoSuchUpload(String),
    #[error("{0}")]
    InvalidPart(String),
    #[error("{0}")]
    InvalidPartOrder(String),
    #[error("{0}")]
    EntityTooSmall(String),
    #[error("{0}")]
    TooLarge(String),
    #[error("{0}")]
    MalformedXml(String),
    /// A conditional request's condition did not hold.
    #[error("precondition failed: {0}")]
    PreconditionFailed(String),
    /// A checksum the client sent does not match the data's.
    #[error("bad digest: {0}")]
    BadDigest(String),
    /// Concurrent writes kept defeating a conditional one; the client may retry.
    #[error("conflict: {0}")]
    Conflict(String),
    /// A record read from the cluster cannot be decoded.
    #[error("damaged gateway record: {0}")]
    Corrupt(String),
    #[error("cluster: {0}")]
    Cluster(#[from] ClientError),
    #[error("{0}")]
    Internal(String),
}

impl GatewayError {
    /// Whether the cluster said the object does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, GatewayError::Cluster(e) if e.is_not_found())
    }

    /// Whether a guard of the request did not hold.
    pub fn is_conflict(&self) -> bool {
        matches!(self, GatewayError::Cluster(e) if e.code() == Some(ErrorCode::Conflict))
    }

    /// Whether an exclusive create found the object.
    pub fn is_exists(&self) -> bool {
        matches!(self, GatewayError::Cluster(e) if e.code() == Some(ErrorCode::Exists))
    }
}

impl From<GatewayError> for s3s::S3Error {
    fn from(e: GatewayError) -> s3s::S3Error {
        use s3s::S3ErrorCode as C;
        let code = match &e {
            GatewayError::NoSuchBucket(_) => C::NoSuchBucket,
            GatewayError::NoSuchKey(_) => C::NoSuchKey,
            GatewayError::NoSuchVersion(_) => C::NoSuchVersion,
            GatewayError::NoSuchUser(_) | GatewayError::NoSuchAccessKey(_) => C::InvalidAccessKeyId,
            GatewayError::BucketExists { by_you: true, .. } => C::BucketAlreadyOwnedByYou,
            GatewayError::BucketExists { by_you: false, .. } => C::BucketAlreadyExists,
            GatewayError::BucketNotEmpty(_) => C::BucketNotEmpty,
            GatewayError::InvalidArgument(_) => C::InvalidArgument,
            GatewayError::InvalidBucketState(_) => C::InvalidBucketState,
            GatewayError::NoSuchUpload(_) => C::NoSuchUpload,
            GatewayError::InvalidPart(_) => C::InvalidPart,
            GatewayError::InvalidPartOrder(_) => C::InvalidPartOrder,
            GatewayError::EntityTooSmall(_) => C::EntityTooSmall,
            GatewayError::TooLarge(_) => C::EntityTooLarge,
            GatewayError::MalformedXml(_) => C::MalformedXML,
            GatewayError::PreconditionFailed(_) => C::PreconditionFailed,
            GatewayError::BadDigest(_) => C::BadDigest,
            GatewayError::Conflict(_) => C::ConditionalRequestConflict,
            GatewayError::Cluster(c) => match c.code() {
                Some(ErrorCode::NoSpace) => C::Custom("InsufficientStorage".into()),
                Some(ErrorCode::TooLarge) => C::EntityTooLarge,
                Some(ErrorCode::Conflict) => C::ConditionalRequestConflict,
                Some(ErrorCode::Timeout | ErrorCode::Degraded | ErrorCode::NoQuorum) => C::ServiceUnavailable,
                // The cluster did not answer in time, or not before the request's expiry: nothing
                // was changed that a retry would not see, so clients are told to retry.
                None if matches!(c, ClientError::Timeout(_) | ClientError::Expired) => C::ServiceUnavailable,
                _ => C::InternalError,
            },
            GatewayError::UserExists(_)
            | GatewayError::UserHasBuckets { .. }
            | GatewayError::Corrupt(_)
            | GatewayError::Internal(_) => C::InternalError,
        };
        if code == C::InternalError {
            tracing::error!(error = %e, "internal error");
        }
        let custom = matches!(code, C::Custom(_));
        let mut err = s3s::S3Error::with_message(code, e.to_string());
        if custom {
            // The one custom code: S3's answer when the store is out of space.
            err.set_status_code(hyper::StatusCode::INSUFFICIENT_STORAGE);
        }
        err
    }
}
