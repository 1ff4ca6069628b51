//! The policy document of a browser-form upload (POST object): its parsing and its checks
//! against the form's fields. Pure functions; `s3post.rs` reads the form and acts on the result.
//!
//! A policy is base64 of a JSON document: `{"expiration": "2030-01-01T00:00:00Z", "conditions":
//! [...]}` where a condition is `{"field": "value"}`, `["eq", "$field", "value"]`,
//! `["starts-with", "$field", "prefix"]` or `["content-length-range", MIN, MAX]`. A form passes
//! when the policy has not expired, every condition holds (a field the form lacks counts as the
//! empty string), and every field the form sends is named by some condition, except the fields
//! that carry the policy and signature themselves, `x-ignore-*` fields and checksum fields.

use base64_simd::STANDARD as B64;
use serde_json::Value;

/// Longest policy document accepted, decoded (S3's form fields are bounded the same way).
pub const MAX_POLICY_BYTES: usize = 20 * 1024;
/// Most conditions one policy may hold.
const MAX_CONDITIONS: usize = 256;

/// Why a form was refused: a malformed policy is the client's error (400
/// `InvalidPolicyDocument`); a policy the form does not satisfy is a refusal (403 `AccessDenied`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("{0}")]
    Malformed(String),
    #[error("Invalid according to Policy: {0}")]
    Denied(String),
}

fn malformed(m: impl Into<String>) -> PolicyError {
    PolicyError::Malformed(m.into())
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Condition {
    /// The field's value equals this (a missing field is "").
    Eq { field: String, value: String },
    /// The field's value starts with this; for Content-Type, each comma-separated value does.
    StartsWith { field: String, prefix: String },
}

/// A parsed policy document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostPolicy {
    /// When the policy stops being valid, in seconds since the epoch.
    pub expiration_unix_s: i64,
    conditions: Vec<Condition>,
    /// The bounds `content-length-range` puts on the file, inclusive.
    pub length_range: Option<(u64, u64)>,
}

/// The form fields, as names in lower case and their values, in the order sent.
pub type Fields = [(String, String)];

/// Fields a policy need not name: the policy and its signature, and fields S3 documents as
/// outside the policy.
fn exempt(name: &str) -> bool {
    matches!(name, "policy" | "signature" | "awsaccesskeyid" | "x-amz-signature" | "file")
        || name.starts_with("x-ignore-")
        || name.starts_with("x-amz-checksum-")
}

/// The value of field `name` (lower case), if the form sends it.
pub fn field<'a>(fields: &'a Fields, name: &str) -> Option<&'a str> {
    fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

fn field_name(text: &str) -> Result<String, PolicyError> {
    let name =
        text.strip_prefix('$').ok_or_else(|| malformed(format!("condition field {text:?} does not start with $")))?;
    if name.is_empty() {
        return Err(malformed("a condition names an empty field"));
    }
    Ok(name.to_ascii_lowercase())
}

fn string(v: &Value, what: &str) -> Result<String, PolicyError> {
    v.as_str().map(str::to_string).ok_or_else(|| malformed(format!("{what} is not a string")))
}

fn length(v: &Value) -> Result<u64, PolicyError> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .ok_or_else(|| malformed(format!("content-length-range bound {v} is not a non-negative integer")))
}

impl PostPolicy {
    /// Parses the form's `policy` field (base64 of the JSON document).
    pub fn parse(b64: &str) -> Result<PostPolicy, PolicyError> {
        let bytes = B64.decode_to_vec(b64.trim()).map_err(|_| malformed("the policy is not base64"))?;
        if bytes.len() > MAX_POLICY_BYTES {
            return Err(malformed(format!("the policy is over {MAX_POLICY_BYTES} bytes")));
        }
        let doc: Value =
            serde_json::from_slice(&bytes).map_err(|e| malformed(format!("the policy is not a JSON document: {e}")))?;
        let expiration = doc
            .get("expiration")
            .ok_or_else(|| malformed("the policy has no expiration"))
            .and_then(|v| string(v, "the expiration"))?;
        let expiration_unix_s = parse_iso8601(&expiration)
            .ok_or_else(|| malformed(format!("the expiration {expiration:?} is not an ISO 8601 UTC time")))?;
        let list = doc
            .get("conditions")
            .and_then(Value::as_array)
            .ok_or_else(|| malformed("the policy has no conditions list"))?;
        if list.len() > MAX_CONDITIONS {
            return Err(malformed(format!("the policy has over {MAX_CONDITIONS} conditions")));
        }
        let mut conditions = Vec::with_capacity(list.len());
        let mut length_range = None;
        for c in list {
            match c {
                Value::Object(map) => {
                    if map.len() != 1 {
                        return Err(malformed("a {field: value} condition names exactly one field"));
                    }
                    for (k, v) in map {
                        let field = k.trim_start_matches('$').to_ascii_lowercase();
                        conditions.push(Condition::Eq { field, value: string(v, &format!("the value of {k}"))? });
                    }
                }
                Value::Array(items) => {
                    let op = items.first().and_then(Value::as_str).map(str::to_ascii_lowercase);
                    match (op.as_deref(), items.len()) {
                        (Some("eq"), 3) => conditions.push(Condition::Eq {
                            field: field_name(&string(&items[1], "an eq condition's field")?)?,
                            value: string(&items[2], "an eq condition's value")?,
                        }),
                        (Some("starts-with"), 3) => conditions.push(Condition::StartsWith {
                            field: field_name(&string(&items[1], "a starts-with condition's field")?)?,
                            prefix: string(&items[2], "a starts-with condition's prefix")?,
                        }),
                        (Some("content-length-range"), 3) => {
                            let (min, max) = (length(&items[1])?, length(&items[2])?);
                            if min > max {
                                return Err(malformed(format!("content-length-range {min}..{max} is empty")));
                            }
                            length_range = Some((min, max));
                        }
                        _ => {
                            return Err(malformed(format!(
                                "condition {c} is not eq, starts-with or content-length-range"
                            )));
                        }
                    }
                }
                other => return Err(malformed(format!("condition {other} is neither an object nor a list"))),
            }
        }
        Ok(PostPolicy { expiration_unix_s, conditions, length_range })
    }

    /// Checks the form's `fields` against the policy at `now_s`; `bucket` is the bucket the
    /// request addresses (the `bucket` condition holds against it even when the form does not
    /// send a bucket field).
    pub fn check(&self, fields: &Fields, bucket: &str, now_s: i64) -> Result<(), PolicyError> {
        if now_s >= self.expiration_unix_s {
            return Err(PolicyError::Denied("Policy expired.".into()));
        }
        let value_of = |name: &str| -> String {
            if name == "bucket" {
                return bucket.to_string();
            }
            field(fields, name).unwrap_or("").to_string()
        };
        for c in &self.conditions {
            match c {
                Condition::Eq { field, value } => {
                    if value_of(field) != *value {
                        return Err(PolicyError::Denied(format!(
                            "Policy Condition failed: [\"eq\", \"${field}\", \"{value}\"]"
                        )));
                    }
                }
                Condition::StartsWith { field, prefix } => {
                    let got = value_of(field);
                    let holds = if field == "content-type" {
                        got.split(',').all(|v| v.trim().starts_with(prefix.as_str()))
                    } else {
                        got.starts_with(prefix.as_str())
                    };
                    if !holds {
                        return Err(PolicyError::Denied(format!(
                            "Policy Condition failed: [\"starts-with\", \"${field}\", \"{prefix}\"]"
                        )));
                    }
                }
            }
        }
        let named = |name: &str| {
            self.conditions.iter().any(|c| match c {
                Condition::Eq { field, .. } | Condition::StartsWith { field, .. } => field == name,
            })
        };
        for (name, _) in fields {
            if !exempt(name) && !named(name) {
                return Err(PolicyError::Denied(format!("Extra input fields: {name}")));
            }
        }
        Ok(())
    }
}

/// Seconds since the epoch of `YYYY-MM-DDTHH:MM:SS[.fraction]Z`, the only form S3 accepts for
/// a policy's expiration.
pub fn parse_iso8601(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = text.get(r)?;
        s.bytes().all(|c| c.is_ascii_digit()).then(|| s.parse().ok())?
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let rest = &text[19..];
    let rest = match rest.strip_prefix('.') {
        Some(frac) => {
            let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return None;
            }
            &frac[digits..]
        }
        None => rest,
    };
    if rest != "Z" || !(1..=12).contains(&month) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let month_days = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if day < 1 || day > month_days[(month - 1) as usize] {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(json: &str) -> Result<PostPolicy, PolicyError> {
        PostPolicy::parse(&B64.encode_to_string(json.as_bytes()))
    }

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
    }

    const LATER: &str = "2100-01-01T00:00:00Z";

    #[test]
    fn expirations_are_strict_iso8601_utc() {
        assert_eq!(parse_iso8601("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_iso8601("2000-03-01T00:00:01.250Z"), Some(951_868_801));
        assert_eq!(parse_iso8601("2024-02-29T23:59:59Z"), Some(1_709_251_199));
        for bad in [
            "2023-02-29T00:00:00Z",
            "2026-11-24 12:00:00+00:00",
            "2026-11-24T12:00:00",
            "2026-13-01T00:00:00Z",
            "2026-11-24T12:00:00.Z",
            "x",
        ] {
            assert_eq!(parse_iso8601(bad), None, "{bad}");
        }
        let p = policy(r#"{"expiration": "2026-11-24 12:00:00.5+00:00", "conditions": []}"#);
        assert!(matches!(p, Err(PolicyError::Malformed(_))));
    }

    #[test]
    fn every_condition_must_hold_and_every_field_must_be_named() {
        let p = policy(&format!(
            r#"{{"expiration": "{LATER}", "conditions": [{{"bucket": "b"}}, ["starts-with", "$key", "foo"],
               {{"acl": "private"}}, ["starts-with", "$Content-Type", "text/"], ["content-length-range", 0, 1024]]}}"#
        ))
        .unwrap();
        assert_eq!(p.length_range, Some((0, 1024)));
        let good = fields(&[
            ("key", "foo.txt"),
            ("acl", "private"),
            ("content-type", "text/plain"),
            ("policy", "p"),
            ("signature", "s"),
            ("awsaccesskeyid", "a"),
            ("x-amz-checksum-sha256", "c"),
        ]);
        assert_eq!(p.check(&good, "b", 0), Ok(()));
        // The bucket condition holds against the bucket addressed.
        assert!(matches!(p.check(&good, "other", 0), Err(PolicyError::Denied(_))));
        let mut bad_key = good.clone();
        bad_key[0].1 = "bar.txt".into();
        assert!(matches!(p.check(&bad_key, "b", 0), Err(PolicyError::Denied(_))));
        let mut extra = good.clone();
        extra.push(("x-amz-meta-foo".into(), "x".into()));
        assert_eq!(p.check(&extra, "b", 0), Err(PolicyError::Denied("Extra input fields: x-amz-meta-foo".into())));
        let mut ignored = good.clone();
        ignored.push(("x-ignore-me".into(), "x".into()));
        assert_eq!(p.check(&ignored, "b", 0), Ok(()));
        // A missing field counts as empty, so a condition on it fails unless it allows "".
        let missing = good.iter().filter(|(n, _)| n != "acl").cloned().collect::<Vec<_>>();
        assert!(matches!(p.check(&missing, "b", 0), Err(PolicyError::Denied(_))));
        // Every Content-Type listed must start with the prefix.
        let mut two = good.clone();
        two[2].1 = "text/plain, image/png".into();
        assert!(matches!(p.check(&two, "b", 0), Err(PolicyError::Denied(_))));
        // Expired at its expiration second.
        assert_eq!(p.check(&good, "b", p.expiration_unix_s), Err(PolicyError::Denied("Policy expired.".into())));
    }

    #[test]
    fn malformed_policies_are_named() {
        for (json, why) in [
            (r#"{"conditions": []}"#, "no expiration"),
            (r#"{"expiration": "2100-01-01T00:00:00Z"}"#, "no conditions"),
            (r#"{"expiration": "2100-01-01T00:00:00Z", "conditions": [["matches", "$key", "x"]]}"#, "not eq"),
            (r#"{"expiration": "2100-01-01T00:00:00Z", "conditions": [["eq", "key", "x"]]}"#, "does not start with $"),
            (r#"{"expiration": "2100-01-01T00:00:00Z", "conditions": [["content-length-range", 5, 1]]}"#, "is empty"),
            (
                r#"{"expiration": "2100-01-01T00:00:00Z", "conditions": [["content-length-range", -1, 1]]}"#,
                "non-negative",
            ),
            ("not json", "not a JSON"),
        ] {
            match policy(json) {
                Err(PolicyError::Malformed(m)) => assert!(m.contains(why), "{json}: {m}"),
                other => panic!("{json}: {other:?}"),
            }
        }
        assert!(matches!(PostPolicy::parse("%%%"), Err(PolicyError::Malformed(_))));
    }
}
