//! S3 object lock (decision 0015): a bucket's lock configuration and default retention, each
//! version's retention and legal hold, and the rule that a protected version is not deleted.

use s3s::dto::*;
use s3s::{S3Error, S3Request, S3Response, S3Result, s3_error};

use crate::access::{Access, Action};
use crate::layout::{BucketRecord, DefaultPeriod, Lock, LockMode, ObjectLock, Retention, Versioning};
use crate::objects;
use crate::s3impl::{Gateway, timestamp};

const NANOS_PER_DAY: u64 = 86_400 * 1_000_000_000;
/// Longest default retention (S3 caps it at 100 years).
const MAX_DEFAULT_DAYS: u32 = 36_500;

fn mode_of(text: &str) -> S3Result<LockMode> {
    match text {
        ObjectLockRetentionMode::GOVERNANCE => Ok(LockMode::Governance),
        ObjectLockRetentionMode::COMPLIANCE => Ok(LockMode::Compliance),
        other => Err(s3_error!(MalformedXML, "the lock mode {other:?} is not GOVERNANCE or COMPLIANCE")),
    }
}

fn mode_dto(mode: LockMode) -> &'static str {
    match mode {
        LockMode::Governance => ObjectLockRetentionMode::GOVERNANCE,
        LockMode::Compliance => ObjectLockRetentionMode::COMPLIANCE,
    }
}

fn ns_of(t: &Timestamp) -> u64 {
    let odt: time::OffsetDateTime = t.clone().into();
    u64::try_from(odt.unix_timestamp_nanos()).unwrap_or(0)
}

fn missing_lock_configuration(bucket: &BucketRecord) -> S3Error {
    s3_error!(InvalidRequest, "bucket {:?} is missing its object lock configuration", bucket.name)
}

/// [`new_version_lock`] from a write request's input (PUT, multipart creation and copy name the
/// `x-amz-object-lock-*` headers alike).
macro_rules! version_lock {
    ($bucket:expr, $input:expr) => {
        $crate::s3lock::new_version_lock(
            $bucket,
            $input.object_lock_mode.as_ref().map(|m| m.as_str()),
            $input.object_lock_retain_until_date.as_ref(),
            $input.object_lock_legal_hold_status.as_ref().map(|s| s.as_str()),
        )
    };
}
pub(crate) use version_lock;

/// The lock state a new version gets: what the request names (`x-amz-object-lock-*`), else the
/// bucket's default retention.
pub(crate) fn new_version_lock(
    bucket: &BucketRecord,
    mode: Option<&str>,
    until: Option<&Timestamp>,
    legal_hold: Option<&str>,
) -> S3Result<Lock> {
    let named = mode.is_some() || until.is_some() || legal_hold.is_some();
    let Some(conf) = bucket.object_lock else {
        return if named { Err(missing_lock_configuration(bucket)) } else { Ok(Lock::default()) };
    };
    let legal_hold = match legal_hold {
        None | Some(ObjectLockLegalHoldStatus::OFF) => false,
        Some(ObjectLockLegalHoldStatus::ON) => true,
        Some(other) => return Err(s3_error!(InvalidArgument, "legal hold status {other:?} is not ON or OFF")),
    };
    let retention = match (mode, until) {
        (Some(m), Some(u)) => {
            let until_ns = ns_of(u);
            if until_ns <= crate::layout::now_ns() {
                return Err(s3_error!(InvalidArgument, "the retain-until date must be in the future"));
            }
            Some(Retention {
                mode: mode_of(m).map_err(|_| s3_error!(InvalidArgument, "unknown lock mode {m:?}"))?,
                until_ns,
            })
        }
        (Some(_), None) | (None, Some(_)) => {
            return Err(s3_error!(
                InvalidArgument,
                "x-amz-object-lock-mode and x-amz-object-lock-retain-until-date go together"
            ));
        }
        (None, None) => conf.default.map(|(mode, period)| {
            let days = match period {
                DefaultPeriod::Days(d) => u64::from(d),
                DefaultPeriod::Years(y) => u64::from(y) * 365,
            };
            Retention { mode, until_ns: crate::layout::now_ns() + days * NANOS_PER_DAY }
        }),
    };
    Ok(Lock { retention, legal_hold })
}

/// Refuses to delete version `lock` protects (a legal hold, or a retention not yet over, which
/// a governance one lets `bypass` pass).
pub(crate) fn check_deletable(lock: &Lock, bypass: bool) -> S3Result<()> {
    if lock.legal_hold {
        return Err(s3_error!(AccessDenied, "the version is under a legal hold"));
    }
    match lock.retention {
        Some(r) if r.until_ns > crate::layout::now_ns() => match r.mode {
            LockMode::Governance if bypass => Ok(()),
            _ => Err(s3_error!(AccessDenied, "the version is retained until its retain-until date")),
        },
        _ => Ok(()),
    }
}

/// A version's lock state as GET and HEAD report it.
pub(crate) fn lock_fields(
    lock: &Lock,
) -> (Option<ObjectLockMode>, Option<Timestamp>, Option<ObjectLockLegalHoldStatus>) {
    let mode = lock.retention.map(|r| ObjectLockMode::from_static(mode_dto(r.mode)));
    let until = lock.retention.map(|r| timestamp(r.until_ns));
    let hold = lock.legal_hold.then(|| ObjectLockLegalHoldStatus::from_static(ObjectLockLegalHoldStatus::ON));
    (mode, until, hold)
}

fn header_flag(value: Option<bool>) -> bool {
    value.unwrap_or(false)
}

impl Gateway {
    pub(crate) async fn put_object_lock_configuration_op(
        &self,
        req: S3Request<PutObjectLockConfigurationInput>,
    ) -> S3Result<S3Response<PutObjectLockConfigurationOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::PutBucketConfig("s3:PutBucketObjectLockConfiguration"), None)?;
        let conf = req.input.object_lock_configuration.unwrap_or_default();
        if conf.object_lock_enabled.as_ref().map(|e| e.as_str()) != Some(ObjectLockEnabled::ENABLED) {
            return Err(s3_error!(MalformedXML, "ObjectLockEnabled must be Enabled"));
        }
        let default = match conf.rule.and_then(|r| r.default_retention) {
            None => None,
            Some(d) => {
                let mode = mode_of(d.mode.as_ref().map(|m| m.as_str()).unwrap_or_default())?;
                let period = match (d.days, d.years) {
                    (Some(days), None) => DefaultPeriod::Days(positive(days, 1)?),
                    (None, Some(years)) => DefaultPeriod::Years(positive(years, 365)?),
                    _ => return Err(s3_error!(MalformedXML, "a default retention names Days or Years, one of them")),
                };
                Some((mode, period))
            }
        };
        self.configure(&access.bucket, |b| {
            // Object lock can be enabled on a bucket that versions (S3 allows it since 2023);
            // one that does not version cannot hold it.
            if b.object_lock.is_none() && b.versioning != Versioning::Enabled {
                return Err(crate::GatewayError::InvalidBucketState(
                    "object lock needs a bucket with versioning enabled".into(),
                ));
            }
            b.object_lock = Some(ObjectLock { default });
            Ok(())
        })
        .await?;
        Ok(S3Response::new(PutObjectLockConfigurationOutput::default()))
    }

    pub(crate) async fn get_object_lock_configuration_op(
        &self,
        req: S3Request<GetObjectLockConfigurationInput>,
    ) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::GetBucketConfig("s3:GetBucketObjectLockConfiguration"), None)?;
        let Some(conf) = access.bucket.object_lock else {
            return Err(s3_error!(
                ObjectLockConfigurationNotFoundError,
                "bucket {:?} has no object lock configuration",
                access.bucket.name
            ));
        };
        let rule = conf.default.map(|(mode, period)| {
            let (days, years) = match period {
                DefaultPeriod::Days(d) => (Some(d as i32), None),
                DefaultPeriod::Years(y) => (None, Some(y as i32)),
            };
            ObjectLockRule {
                default_retention: Some(DefaultRetention {
                    days,
                    years,
                    mode: Some(ObjectLockRetentionMode::from_static(mode_dto(mode))),
                }),
            }
        });
        Ok(S3Response::new(GetObjectLockConfigurationOutput {
            object_lock_configuration: Some(ObjectLockConfiguration {
                object_lock_enabled: Some(ObjectLockEnabled::from_static(ObjectLockEnabled::ENABLED)),
                rule,
            }),
        }))
    }

    /// The version a retention or legal hold request names, in a bucket with object lock.
    async fn locked_version(
        &self,
        access: &Access,
        key: &str,
        version_id: Option<&str>,
    ) -> S3Result<crate::s3versions::Located> {
        if access.bucket.object_lock.is_none() {
            return Err(missing_lock_configuration(&access.bucket));
        }
        self.located(access, key, version_id).await
    }

    pub(crate) async fn put_object_retention_op(
        &self,
        req: S3Request<PutObjectRetentionInput>,
    ) -> S3Result<S3Response<PutObjectRetentionOutput>> {
        let input = &req.input;
        let access = self.access(&req, &input.bucket).await?;
        let located = self.locked_version(&access, &input.key, input.version_id.as_deref()).await?;
        access.require_object(Action::PutObjectRetention, &input.key, &located.meta)?;
        let retention = input.retention.clone().unwrap_or_default();
        let new = match (retention.mode, retention.retain_until_date) {
            (Some(m), Some(u)) => Some(Retention { mode: mode_of(m.as_str())?, until_ns: ns_of(&u) }),
            (None, None) => None,
            _ => return Err(s3_error!(MalformedXML, "a retention names both a Mode and a RetainUntilDate")),
        };
        let bypass = header_flag(input.bypass_governance_retention);
        let changed = objects::update_meta(&self.client, &located.head, &input.key, |m| {
            if may_change_retention(m.lock.retention, new, bypass) {
                m.lock.retention = new;
            }
        })
        .await?;
        match changed {
            Some(m) if m.lock.retention == new => Ok(S3Response::new(PutObjectRetentionOutput::default())),
            Some(_) => Err(s3_error!(AccessDenied, "a retention in force may only be extended")),
            None => Err(self.vanished(&access, &input.key, input.version_id.as_deref())),
        }
    }

    pub(crate) async fn get_object_retention_op(
        &self,
        req: S3Request<GetObjectRetentionInput>,
    ) -> S3Result<S3Response<GetObjectRetentionOutput>> {
        let input = &req.input;
        let access = self.access(&req, &input.bucket).await?;
        let located = self.locked_version(&access, &input.key, input.version_id.as_deref()).await?;
        access.require_object(Action::GetObjectRetention, &input.key, &located.meta)?;
        let Some(r) = located.meta.lock.retention else {
            return Err(s3_error!(NoSuchObjectLockConfiguration, "the version has no retention"));
        };
        Ok(S3Response::new(GetObjectRetentionOutput {
            retention: Some(ObjectLockRetention {
                mode: Some(ObjectLockRetentionMode::from_static(mode_dto(r.mode))),
                retain_until_date: Some(timestamp(r.until_ns)),
            }),
        }))
    }

    pub(crate) async fn put_object_legal_hold_op(
        &self,
        req: S3Request<PutObjectLegalHoldInput>,
    ) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
        let input = &req.input;
        let access = self.access(&req, &input.bucket).await?;
        let located = self.locked_version(&access, &input.key, input.version_id.as_deref()).await?;
        access.require_object(Action::PutObjectLegalHold, &input.key, &located.meta)?;
        let on = match input.legal_hold.as_ref().and_then(|h| h.status.as_ref()).map(|s| s.as_str()) {
            Some(ObjectLockLegalHoldStatus::ON) => true,
            Some(ObjectLockLegalHoldStatus::OFF) => false,
            _ => return Err(s3_error!(MalformedXML, "a legal hold's Status is ON or OFF")),
        };
        let changed = objects::update_meta(&self.client, &located.head, &input.key, |m| m.lock.legal_hold = on);
        if changed.await?.is_none() {
            return Err(self.vanished(&access, &input.key, input.version_id.as_deref()));
        }
        Ok(S3Response::new(PutObjectLegalHoldOutput::default()))
    }

    pub(crate) async fn get_object_legal_hold_op(
        &self,
        req: S3Request<GetObjectLegalHoldInput>,
    ) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
        let input = &req.input;
        let access = self.access(&req, &input.bucket).await?;
        let located = self.locked_version(&access, &input.key, input.version_id.as_deref()).await?;
        access.require_object(Action::GetObjectLegalHold, &input.key, &located.meta)?;
        let status =
            if located.meta.lock.legal_hold { ObjectLockLegalHoldStatus::ON } else { ObjectLockLegalHoldStatus::OFF };
        Ok(S3Response::new(GetObjectLegalHoldOutput {
            legal_hold: Some(ObjectLockLegalHold { status: Some(ObjectLockLegalHoldStatus::from_static(status)) }),
        }))
    }
}

/// Whether a version's retention `old` may become `new`: anything once `old` is over; while it
/// is in force, only a later date in the same mode, unless governance is bypassed (a mode
/// change out of governance needs the bypass too, as RGW rules).
fn may_change_retention(old: Option<Retention>, new: Option<Retention>, bypass: bool) -> bool {
    let Some(old) = old.filter(|r| r.until_ns > crate::layout::now_ns()) else { return true };
    if old.mode == LockMode::Governance && bypass {
        return true;
    }
    match new {
        None => false,
        Some(n) => n.until_ns >= old.until_ns && n.mode == old.mode,
    }
}

/// A default retention's count, positive and within S3's 100 years (`days_each`: days per unit).
fn positive(n: i32, days_each: u32) -> S3Result<u32> {
    match u32::try_from(n) {
        Ok(n) if n > 0 && n.saturating_mul(days_each) <= MAX_DEFAULT_DAYS => Ok(n),
        _ => Err(crate::s3config::custom_error(
            "InvalidRetentionPeriod",
            400,
            format!("a default retention is 1 day to 100 years, not {n}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(mode: LockMode, in_days: i64) -> Retention {
        let now = crate::layout::now_ns() as i64;
        Retention { mode, until_ns: (now + in_days * NANOS_PER_DAY as i64) as u64 }
    }

    #[test]
    fn retention_in_force_only_grows_unless_governance_is_bypassed() {
        let (g, c) = (LockMode::Governance, LockMode::Compliance);
        assert!(may_change_retention(None, Some(r(g, 1)), false));
        assert!(may_change_retention(Some(r(g, 1)), Some(r(g, 2)), false));
        assert!(!may_change_retention(Some(r(g, 2)), Some(r(g, 1)), false));
        assert!(may_change_retention(Some(r(g, 2)), Some(r(g, 1)), true));
        assert!(!may_change_retention(Some(r(g, 2)), None, false));
        assert!(!may_change_retention(Some(r(g, 1)), Some(r(c, 2)), false), "a mode change needs the bypass");
        assert!(may_change_retention(Some(r(g, 1)), Some(r(c, 2)), true));
        assert!(!may_change_retention(Some(r(c, 1)), Some(r(g, 2)), true), "compliance never softens");
        assert!(!may_change_retention(Some(r(c, 2)), Some(r(c, 1)), true));
        assert!(may_change_retention(Some(r(c, -1)), None, false), "an expired retention binds nothing");
    }

    #[test]
    fn protected_versions_are_not_deleted() {
        assert!(check_deletable(&Lock::default(), false).is_ok());
        let held = Lock { retention: None, legal_hold: true };
        assert!(check_deletable(&held, true).is_err());
        let gov = Lock { retention: Some(r(LockMode::Governance, 1)), legal_hold: false };
        assert!(check_deletable(&gov, false).is_err());
        assert!(check_deletable(&gov, true).is_ok());
        let comp = Lock { retention: Some(r(LockMode::Compliance, 1)), legal_hold: false };
        assert!(check_deletable(&comp, true).is_err());
        let over = Lock { retention: Some(r(LockMode::Compliance, -1)), legal_hold: false };
        assert!(check_deletable(&over, false).is_ok());
    }

    #[test]
    fn default_periods_are_bounded() {
        assert_eq!(positive(1, 1).unwrap(), 1);
        assert!(positive(0, 1).is_err());
        assert!(positive(-3, 365).is_err());
        assert!(positive(101, 365).is_err());
        assert_eq!(positive(100, 365).unwrap(), 100);
    }
}
