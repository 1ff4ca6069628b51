//! Bucket lifecycle configuration in the S3 API: rules checked as S3 checks them and stored in
//! the bucket record, read back as they were sent, and the `x-amz-expiration` header that tells
//! a client when its object expires. The background pass that applies the rules is
//! `expiry.rs`; what the rules mean is `lifecycle.rs`.

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, s3_error};

use crate::access::Action;
use crate::layout::{self, BucketRecord, LifecycleFilter, LifecycleRule, ObjectMeta};
use crate::lifecycle::{self, DAY_NS};
use crate::s3impl::{Gateway, http_date, timestamp};

/// Most rules in one configuration, and the longest rule id (S3's limits).
const MAX_RULES: usize = 1000;
const MAX_ID_CHARS: usize = 255;

fn invalid(message: String) -> s3s::S3Error {
    s3_error!(InvalidArgument, "{message}")
}

/// A count of days that must be positive.
fn positive_days(days: i32, what: &str) -> S3Result<u32> {
    match u32::try_from(days) {
        Ok(d) if d > 0 => Ok(d),
        _ => Err(invalid(format!("{what} must be a positive number of days, not {days}"))),
    }
}

fn size_bound(bytes: Option<i64>, what: &str) -> S3Result<Option<u64>> {
    bytes.map(|b| u64::try_from(b).map_err(|_| invalid(format!("{what} must not be negative, not {b}")))).transpose()
}

/// A lifecycle date: S3 takes only midnight UTC.
fn midnight_s(date: &Timestamp) -> S3Result<i64> {
    let t: time::OffsetDateTime = date.clone().into();
    let s = t.unix_timestamp();
    if s.rem_euclid(86_400) != 0 {
        return Err(invalid(format!("lifecycle dates must be at midnight UTC, not {t}")));
    }
    Ok(s)
}

fn tag_pairs(tags: Option<&TagSet>) -> Vec<(String, String)> {
    tags.map(|set| {
        set.iter().map(|t| (t.key.clone().unwrap_or_default(), t.value.clone().unwrap_or_default())).collect()
    })
    .unwrap_or_default()
}

fn filter_of(rule: &s3s::dto::LifecycleRule) -> S3Result<LifecycleFilter> {
    match (&rule.prefix, &rule.filter) {
        (Some(_), Some(_)) => Err(s3_error!(MalformedXML, "a rule has a Prefix or a Filter, not both")),
        (None, None) => Err(s3_error!(MalformedXML, "a rule needs a Filter (or the older Prefix)")),
        (Some(p), None) => Ok(LifecycleFilter { prefix: p.clone(), legacy_prefix: true, ..LifecycleFilter::default() }),
        (None, Some(f)) => {
            let plain = [
                f.prefix.is_some(),
                f.tag.is_some(),
                f.object_size_greater_than.is_some(),
                f.object_size_less_than.is_some(),
            ];
            let mut out = match &f.and {
                Some(and) => {
                    if plain.iter().any(|&set| set) {
                        return Err(s3_error!(MalformedXML, "a Filter with And has nothing beside it"));
                    }
                    LifecycleFilter {
                        prefix: and.prefix.clone().unwrap_or_default(),
                        legacy_prefix: false,
                        tags: tag_pairs(and.tags.as_ref()),
                        size_greater_than: size_bound(and.object_size_greater_than, "ObjectSizeGreaterThan")?,
                        size_less_than: size_bound(and.object_size_less_than, "ObjectSizeLessThan")?,
                    }
                }
                None => LifecycleFilter {
                    prefix: f.prefix.clone().unwrap_or_default(),
                    legacy_prefix: false,
                    tags: f
                        .tag
                        .iter()
                        .map(|t| (t.key.clone().unwrap_or_default(), t.value.clone().unwrap_or_default()))
                        .collect(),
                    size_greater_than: size_bound(f.object_size_greater_than, "ObjectSizeGreaterThan")?,
                    size_less_than: size_bound(f.object_size_less_than, "ObjectSizeLessThan")?,
                },
            };
            if let (Some(min), Some(max)) = (out.size_greater_than, out.size_less_than)
                && min >= max
            {
                return Err(invalid(format!("ObjectSizeGreaterThan {min} is not below ObjectSizeLessThan {max}")));
            }
            out.tags.sort();
            Ok(out)
        }
    }
}

/// Checks `rule` as S3 does and makes it a stored rule (a missing id gets a random one).
fn rule_of(rule: &s3s::dto::LifecycleRule) -> S3Result<LifecycleRule> {
    let enabled = match rule.status.as_str() {
        ExpirationStatus::ENABLED => true,
        ExpirationStatus::DISABLED => false,
        other => return Err(s3_error!(MalformedXML, "rule status {other:?} is not Enabled or Disabled")),
    };
    let id = match &rule.id {
        Some(id) if id.chars().count() > MAX_ID_CHARS => {
            return Err(invalid(format!("rule ids are at most {MAX_ID_CHARS} characters")));
        }
        Some(id) if !id.is_empty() => id.clone(),
        _ => crate::text::hex(&layout::random_tag()?.to_be_bytes()[..10]),
    };
    let mut out = LifecycleRule { id, enabled, filter: filter_of(rule)?, ..LifecycleRule::default() };
    if let Some(e) = &rule.expiration {
        let marker = e.expired_object_delete_marker.unwrap_or(false);
        match (e.days, &e.date, e.expired_object_delete_marker.is_some()) {
            (Some(d), None, false) => out.expire_days = Some(positive_days(d, "Expiration Days")?),
            (None, Some(date), false) => out.expire_date_s = Some(midnight_s(date)?),
            (None, None, true) => out.expired_delete_marker = marker,
            _ => {
                return Err(s3_error!(
                    MalformedXML,
                    "an Expiration has exactly one of Days, Date and ExpiredObjectDeleteMarker"
                ));
            }
        }
        if marker && !out.filter.tags.is_empty() {
            return Err(invalid("ExpiredObjectDeleteMarker cannot be used with a tag filter".into()));
        }
    }
    if let Some(n) = &rule.noncurrent_version_expiration {
        let days = n
            .noncurrent_days
            .ok_or_else(|| s3_error!(MalformedXML, "NoncurrentVersionExpiration needs NoncurrentDays"))?;
        out.noncurrent_days = Some(positive_days(days, "NoncurrentDays")?);
        out.keep_noncurrent = n
            .newer_noncurrent_versions
            .map(|k| {
                u32::try_from(k)
                    .ok()
                    .filter(|&k| k > 0)
                    .ok_or_else(|| invalid(format!("NewerNoncurrentVersions {k} is not positive")))
            })
            .transpose()?;
    }
    if let Some(a) = &rule.abort_incomplete_multipart_upload {
        let days = a
            .days_after_initiation
            .ok_or_else(|| s3_error!(MalformedXML, "AbortIncompleteMultipartUpload needs DaysAfterInitiation"))?;
        out.abort_upload_days = Some(positive_days(days, "DaysAfterInitiation")?);
    }
    let transitions = rule.transitions.as_ref().is_some_and(|t| !t.is_empty())
        || rule.noncurrent_version_transitions.as_ref().is_some_and(|t| !t.is_empty());
    if transitions {
        // Dates are checked first, as S3 does, so that a malformed one is named as such.
        for t in rule.transitions.iter().flatten() {
            if let Some(d) = &t.date {
                midnight_s(d)?;
            }
        }
        return Err(s3_error!(
            InvalidStorageClass,
            "this cluster has one storage class: transitions have nowhere to go"
        ));
    }
    let acts = out.expire_days.is_some()
        || out.expire_date_s.is_some()
        || out.expired_delete_marker
        || out.noncurrent_days.is_some()
        || out.abort_upload_days.is_some();
    if !acts {
        return Err(s3_error!(MalformedXML, "rule {:?} has no action", out.id));
    }
    if out.abort_upload_days.is_some() && !out.filter.tags.is_empty() {
        return Err(invalid("AbortIncompleteMultipartUpload cannot be used with a tag filter".into()));
    }
    Ok(out)
}

/// The rules of a configuration, checked (ids unique).
pub(crate) fn rules_of(config: &BucketLifecycleConfiguration) -> S3Result<Vec<LifecycleRule>> {
    if config.rules.is_empty() || config.rules.len() > MAX_RULES {
        return Err(s3_error!(MalformedXML, "a lifecycle configuration has 1 to {MAX_RULES} rules"));
    }
    let rules = config.rules.iter().map(rule_of).collect::<S3Result<Vec<_>>>()?;
    for (i, r) in rules.iter().enumerate() {
        if rules[..i].iter().any(|o| o.id == r.id) {
            return Err(invalid(format!("rule id {:?} appears twice", r.id)));
        }
    }
    Ok(rules)
}

fn tag_dto((k, v): &(String, String)) -> Tag {
    Tag { key: Some(k.clone()), value: Some(v.clone()) }
}

/// A stored rule as S3 shows it, in the form it was sent.
fn rule_dto(r: &LifecycleRule) -> s3s::dto::LifecycleRule {
    let f = &r.filter;
    let (prefix, filter) = if f.legacy_prefix {
        (Some(f.prefix.clone()), None)
    } else {
        let conditions = usize::from(!f.prefix.is_empty())
            + f.tags.len()
            + usize::from(f.size_greater_than.is_some())
            + usize::from(f.size_less_than.is_some());
        let as_i64 = |b: Option<u64>| b.map(|b| i64::try_from(b).unwrap_or(i64::MAX));
        let filter = if conditions > 1 {
            LifecycleRuleFilter {
                and: Some(LifecycleRuleAndOperator {
                    prefix: (!f.prefix.is_empty()).then(|| f.prefix.clone()),
                    tags: (!f.tags.is_empty()).then(|| f.tags.iter().map(tag_dto).collect()),
                    object_size_greater_than: as_i64(f.size_greater_than),
                    object_size_less_than: as_i64(f.size_less_than),
                }),
                ..LifecycleRuleFilter::default()
            }
        } else {
            LifecycleRuleFilter {
                prefix: (!f.prefix.is_empty()).then(|| f.prefix.clone()),
                tag: f.tags.first().map(tag_dto),
                object_size_greater_than: as_i64(f.size_greater_than),
                object_size_less_than: as_i64(f.size_less_than),
                and: None,
            }
        };
        (None, Some(filter))
    };
    let days = |d: Option<u32>| d.map(|d| i32::try_from(d).unwrap_or(i32::MAX));
    let expiration = (r.expire_days.is_some() || r.expire_date_s.is_some() || r.expired_delete_marker).then(|| {
        LifecycleExpiration {
            days: days(r.expire_days),
            date: r.expire_date_s.map(|s| timestamp(u64::try_from(s).unwrap_or(0).saturating_mul(1_000_000_000))),
            expired_object_delete_marker: r.expired_delete_marker.then_some(true),
        }
    });
    s3s::dto::LifecycleRule {
        abort_incomplete_multipart_upload: r
            .abort_upload_days
            .map(|d| AbortIncompleteMultipartUpload { days_after_initiation: days(Some(d)) }),
        expiration,
        filter,
        id: Some(r.id.clone()),
        noncurrent_version_expiration: r.noncurrent_days.map(|d| NoncurrentVersionExpiration {
            noncurrent_days: days(Some(d)),
            newer_noncurrent_versions: r.keep_noncurrent.map(|k| i32::try_from(k).unwrap_or(i32::MAX)),
        }),
        noncurrent_version_transitions: None,
        prefix,
        status: ExpirationStatus::from_static(if r.enabled {
            ExpirationStatus::ENABLED
        } else {
            ExpirationStatus::DISABLED
        }),
        transitions: None,
    }
}

/// The `x-amz-expiration` header for current object `meta` in `bucket`: when its soonest rule
/// expires it, in S3's whole days (the shortened day of tests only hastens the background pass).
pub(crate) fn expiration_header(bucket: &BucketRecord, meta: &ObjectMeta) -> Option<String> {
    let candidates =
        lifecycle::current_candidates(&bucket.lifecycle, &meta.key, meta.size_bytes, meta.mtime_ns, DAY_NS);
    let (due_ns, rule) = candidates
        .into_iter()
        .find(|(_, i)| bucket.lifecycle[*i].filter.matches(&meta.key, meta.size_bytes, &meta.tags))?;
    let date = http_date(&timestamp(due_ns))?;
    Some(format!("expiry-date=\"{date}\", rule-id=\"{}\"", bucket.lifecycle[rule].id))
}

impl Gateway {
    pub(crate) async fn put_bucket_lifecycle_op(
        &self,
        req: S3Request<PutBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::PutBucketConfig("s3:PutLifecycleConfiguration"), None)?;
        let config = req
            .input
            .lifecycle_configuration
            .as_ref()
            .ok_or_else(|| s3_error!(MalformedXML, "the request has no lifecycle configuration"))?;
        let rules = rules_of(config)?;
        // Registered before the rules are stored, so that a bucket with rules is always one the
        // background pass visits.
        crate::expiry::register(&self.client, &access.bucket).await?;
        self.configure(&access.bucket, |b| {
            b.lifecycle.clone_from(&rules);
            Ok(())
        })
        .await?;
        Ok(S3Response::new(PutBucketLifecycleConfigurationOutput::default()))
    }

    pub(crate) async fn get_bucket_lifecycle_op(
        &self,
        req: S3Request<GetBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::GetBucketConfig("s3:GetLifecycleConfiguration"), None)?;
        if access.bucket.lifecycle.is_empty() {
            return Err(s3_error!(
                NoSuchLifecycleConfiguration,
                "bucket {:?} has no lifecycle configuration",
                access.bucket.name
            ));
        }
        Ok(S3Response::new(GetBucketLifecycleConfigurationOutput {
            rules: Some(access.bucket.lifecycle.iter().map(rule_dto).collect()),
            ..GetBucketLifecycleConfigurationOutput::default()
        }))
    }

    pub(crate) async fn delete_bucket_lifecycle_op(
        &self,
        req: S3Request<DeleteBucketLifecycleInput>,
    ) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::PutBucketConfig("s3:PutLifecycleConfiguration"), None)?;
        // The bucket stays registered: the background pass skips a bucket without rules.
        self.configure(&access.bucket, |b| {
            b.lifecycle.clear();
            Ok(())
        })
        .await?;
        Ok(S3Response::new(DeleteBucketLifecycleOutput {}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(days: Option<i32>, prefix: Option<&str>, status: &'static str) -> s3s::dto::LifecycleRule {
        s3s::dto::LifecycleRule {
            abort_incomplete_multipart_upload: None,
            expiration: days.map(|d| LifecycleExpiration { days: Some(d), ..LifecycleExpiration::default() }),
            filter: None,
            id: Some("r1".into()),
            noncurrent_version_expiration: None,
            noncurrent_version_transitions: None,
            prefix: prefix.map(str::to_string),
            status: ExpirationStatus::from_static(status),
            transitions: None,
        }
    }

    fn config(rules: Vec<s3s::dto::LifecycleRule>) -> BucketLifecycleConfiguration {
        BucketLifecycleConfiguration { rules }
    }

    #[test]
    fn rules_round_trip_in_the_form_they_were_sent() {
        let mut tagged = rule(Some(3), None, "Disabled");
        tagged.id = Some("r2".into());
        tagged.filter = Some(LifecycleRuleFilter {
            and: Some(LifecycleRuleAndOperator {
                prefix: Some("logs/".into()),
                tags: Some(vec![Tag { key: Some("k".into()), value: Some("v".into()) }]),
                object_size_greater_than: Some(10),
                object_size_less_than: None,
            }),
            ..LifecycleRuleFilter::default()
        });
        let sent = vec![rule(Some(1), Some("a/"), "Enabled"), tagged];
        let rules = rules_of(&config(sent.clone())).expect("valid rules");
        assert_eq!(rules[0].filter.prefix, "a/");
        assert!(rules[0].filter.legacy_prefix);
        assert!(!rules[1].enabled);
        assert_eq!(rules.iter().map(rule_dto).collect::<Vec<_>>(), sent);
    }

    #[test]
    fn bad_rules_are_refused_by_name() {
        let code = |rules| rules_of(&config(rules)).expect_err("refused").code().as_str().to_string();
        assert_eq!(code(vec![rule(Some(0), Some(""), "Enabled")]), "InvalidArgument");
        assert_eq!(code(vec![rule(Some(1), Some(""), "enabled")]), "MalformedXML");
        assert_eq!(code(vec![rule(Some(1), None, "Enabled")]), "MalformedXML");
        assert_eq!(code(vec![rule(None, Some(""), "Enabled")]), "MalformedXML");
        assert_eq!(
            code(vec![rule(Some(1), Some(""), "Enabled"), rule(Some(2), Some("b"), "Enabled")]),
            "InvalidArgument"
        );
        let mut long = rule(Some(1), Some(""), "Enabled");
        long.id = Some("a".repeat(256));
        assert_eq!(code(vec![long]), "InvalidArgument");
        let mut late = rule(None, Some(""), "Enabled");
        let not_midnight = time::OffsetDateTime::from_unix_timestamp(86_400 + 5).expect("a date");
        late.expiration =
            Some(LifecycleExpiration { date: Some(not_midnight.into()), ..LifecycleExpiration::default() });
        assert_eq!(code(vec![late]), "InvalidArgument");
        assert_eq!(code(vec![]), "MalformedXML");
    }

    #[test]
    fn missing_ids_are_made_up_and_distinct() {
        let mut a = rule(Some(1), Some("a"), "Enabled");
        a.id = None;
        let mut b = a.clone();
        b.prefix = Some("b".into());
        let rules = rules_of(&config(vec![a, b])).expect("valid rules");
        assert!(!rules[0].id.is_empty());
        assert_ne!(rules[0].id, rules[1].id);
    }
}
