//! Bucket policies: the JSON document S3 defines (statements of Effect, Principal, Action,
//! Resource and Condition), checked when it is set and evaluated on every request to its
//! bucket. Pure: the caller supplies who asks, the action, the resource and the request's
//! condition keys.
//!
//! Evaluation follows IAM's rule: an explicit Deny wins; otherwise an Allow allows; otherwise
//! the policy says nothing and the ACLs decide (see `access.rs`).
//!
//! Shoal has no accounts: each user is its own account, so a principal names a user as
//! `arn:aws:iam::NAME:root`, `arn:aws:iam::ACCOUNT:user/NAME` (any account), `{"CanonicalUser":
//! ID}`, or everyone as `"*"` / `{"AWS": "*"}` (decision 0014).

use std::collections::HashMap;
use std::net::IpAddr;

use serde_json::Value;

/// Longest policy document accepted, in bytes (S3's limit is 20 KiB).
pub const MAX_POLICY_BYTES: usize = 20 * 1024;
/// Most statements in one policy (a bound on evaluation work).
const MAX_STATEMENTS: usize = 100;

/// Why a policy document is refused (S3's `MalformedPolicy`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Malformed(pub String);

fn bad(msg: impl Into<String>) -> Malformed {
    Malformed(msg.into())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    Allow,
    Deny,
}

/// Who a statement is about.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Principal {
    Everyone,
    /// User names (from IAM ARNs) and canonical ids.
    Users {
        names: Vec<String>,
        ids: Vec<String>,
    },
}

#[derive(Debug, Clone)]
struct Condition {
    operator: String,
    if_exists: bool,
    key: String,
    values: Vec<String>,
}

#[derive(Debug, Clone)]
struct Statement {
    effect: Effect,
    /// `(principal, negated)`: `NotPrincipal` matches everyone it does not name.
    principal: (Principal, bool),
    actions: (Vec<String>, bool),
    resources: (Vec<String>, bool),
    conditions: Vec<Condition>,
}

/// A parsed bucket policy.
#[derive(Debug, Clone)]
pub struct Policy {
    statements: Vec<Statement>,
}

/// What a policy says about a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny,
    /// No statement applies.
    Silent,
}

/// The requester as policies see it.
#[derive(Debug, Clone, Copy)]
pub enum Who<'a> {
    Anonymous,
    User { name: &'a str, canonical_id: &'a str },
}

/// A request's condition keys (lower-case names, e.g. `aws:sourceip`, `s3:prefix`) and values.
#[derive(Debug, Clone, Default)]
pub struct Context {
    values: HashMap<String, Vec<String>>,
}

impl Context {
    pub fn set(&mut self, key: &str, value: impl Into<String>) {
        self.values.insert(key.to_ascii_lowercase(), vec![value.into()]);
    }

    fn get(&self, key: &str) -> Option<&[String]> {
        self.values.get(&key.to_ascii_lowercase()).map(Vec::as_slice)
    }
}

const OPERATORS: [&str; 19] = [
    "StringEquals",
    "StringNotEquals",
    "StringEqualsIgnoreCase",
    "StringNotEqualsIgnoreCase",
    "StringLike",
    "StringNotLike",
    "NumericEquals",
    "NumericNotEquals",
    "NumericLessThan",
    "NumericLessThanEquals",
    "NumericGreaterThan",
    "NumericGreaterThanEquals",
    "Bool",
    "IpAddress",
    "NotIpAddress",
    "Null",
    "ArnEquals",
    "ArnLike",
    "ArnNotLike",
];

/// One value or a list of them, as strings (policy values may be JSON strings, numbers or
/// booleans).
fn strings(v: &Value, what: &str) -> Result<Vec<String>, Malformed> {
    let one = |v: &Value| match v {
        Value::String(s) => Ok(s.clone()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Number(n) => Ok(n.to_string()),
        _ => Err(bad(format!("{what} must be a string or a list of strings"))),
    };
    match v {
        Value::Array(items) if !items.is_empty() => items.iter().map(one).collect(),
        Value::Array(_) => Err(bad(format!("{what} is an empty list"))),
        other => Ok(vec![one(other)?]),
    }
}

fn parse_principal(v: &Value) -> Result<Principal, Malformed> {
    if v.as_str() == Some("*") {
        return Ok(Principal::Everyone);
    }
    let Some(map) = v.as_object() else {
        return Err(bad("Principal must be \"*\" or an object"));
    };
    let (mut names, mut ids) = (Vec::new(), Vec::new());
    for (kind, value) in map {
        for item in strings(value, "Principal")? {
            match kind.as_str() {
                "AWS" if item == "*" => return Ok(Principal::Everyone),
                "AWS" => names.push(user_of_arn(&item).ok_or_else(|| bad(format!("invalid principal {item:?}")))?),
                "CanonicalUser" => ids.push(item),
                // Services never sign requests to this gateway; a statement naming one applies
                // to nobody here.
                "Service" | "Federated" => {}
                other => return Err(bad(format!("unknown principal type {other:?}"))),
            }
        }
    }
    Ok(Principal::Users { names, ids })
}

/// The user an IAM ARN names: `arn:aws:iam::NAME:root`, `arn:aws:iam::ACCOUNT:user/NAME`, or a
/// bare user name.
fn user_of_arn(arn: &str) -> Option<String> {
    let Some(rest) = arn.strip_prefix("arn:aws:iam::") else {
        return (!arn.is_empty() && !arn.contains(':')).then(|| arn.to_string());
    };
    let (account, resource) = rest.split_once(':')?;
    match resource {
        "root" if !account.is_empty() => Some(account.to_string()),
        _ => resource.strip_prefix("user/").filter(|n| !n.is_empty()).map(|n| n.rsplit('/').next().unwrap_or(n).into()),
    }
}

impl Policy {
    /// Parses and checks a policy document for bucket `bucket`: every resource must be the
    /// bucket or objects in it.
    pub fn parse(text: &str, bucket: &str) -> Result<Policy, Malformed> {
        if text.len() > MAX_POLICY_BYTES {
            return Err(bad(format!("policies are at most {MAX_POLICY_BYTES} bytes")));
        }
        let doc: Value = serde_json::from_str(text).map_err(|e| bad(format!("the policy is not JSON: {e}")))?;
        let Some(doc) = doc.as_object() else {
            return Err(bad("the policy must be a JSON object"));
        };
        if let Some(v) = doc.get("Version")
            && !matches!(v.as_str(), Some("2012-10-17" | "2008-10-17"))
        {
            return Err(bad("Version must be 2012-10-17 or 2008-10-17"));
        }
        let raw = match doc.get("Statement") {
            Some(Value::Array(list)) => list.clone(),
            Some(one @ Value::Object(_)) => vec![one.clone()],
            _ => return Err(bad("the policy needs a Statement")),
        };
        if raw.is_empty() || raw.len() > MAX_STATEMENTS {
            return Err(bad(format!("a policy has 1 to {MAX_STATEMENTS} statements")));
        }
        let statements = raw.iter().map(|s| parse_statement(s, bucket)).collect::<Result<_, _>>()?;
        Ok(Policy { statements })
    }

    /// What the policy says about `who` doing `action` (e.g. `s3:GetObject`) on `resource`
    /// (`arn:aws:s3:::bucket` or `arn:aws:s3:::bucket/key`).
    pub fn evaluate(&self, who: Who<'_>, action: &str, resource: &str, cx: &Context) -> Decision {
        let mut allowed = false;
        for s in &self.statements {
            let principal = matches_principal(&s.principal.0, who) != s.principal.1;
            let action_hit = s.actions.0.iter().any(|a| wildcard(a, action, true)) != s.actions.1;
            let resource_hit = s.resources.0.iter().any(|r| wildcard(r, resource, false)) != s.resources.1;
            if !(principal && action_hit && resource_hit && s.conditions.iter().all(|c| holds(c, cx))) {
                continue;
            }
            match s.effect {
                Effect::Deny => return Decision::Deny,
                Effect::Allow => allowed = true,
            }
        }
        if allowed { Decision::Allow } else { Decision::Silent }
    }

    /// Whether the policy allows anything to everyone without a condition (S3's "public").
    pub fn is_public(&self) -> bool {
        self.statements.iter().any(|s| {
            s.effect == Effect::Allow && s.principal == (Principal::Everyone, false) && s.conditions.is_empty()
        })
    }
}

fn parse_statement(v: &Value, bucket: &str) -> Result<Statement, Malformed> {
    let Some(s) = v.as_object() else {
        return Err(bad("a statement must be an object"));
    };
    let effect = match s.get("Effect").and_then(Value::as_str) {
        Some("Allow") => Effect::Allow,
        Some("Deny") => Effect::Deny,
        _ => return Err(bad("Effect must be Allow or Deny")),
    };
    let either = |yes: &str, no: &str| -> Result<(&Value, bool), Malformed> {
        match (s.get(yes), s.get(no)) {
            (Some(v), None) => Ok((v, false)),
            (None, Some(v)) => Ok((v, true)),
            _ => Err(bad(format!("a statement needs exactly one of {yes} and {no}"))),
        }
    };
    let (p, not_p) = either("Principal", "NotPrincipal")?;
    if not_p && effect == Effect::Allow {
        // IAM refuses it: "everyone but X" is almost never what an Allow means.
        return Err(bad("NotPrincipal is allowed only with Effect Deny"));
    }
    let principal = (parse_principal(p)?, not_p);
    let (a, not_a) = either("Action", "NotAction")?;
    let actions = strings(a, "Action")?;
    for a in &actions {
        if a != "*" && !a.to_ascii_lowercase().starts_with("s3:") {
            return Err(bad(format!("unknown action {a:?}")));
        }
    }
    let (r, not_r) = either("Resource", "NotResource")?;
    let resources = strings(r, "Resource")?;
    for r in &resources {
        let Some(path) = r.strip_prefix("arn:aws:s3:::") else {
            return Err(bad(format!("resource {r:?} is not an S3 ARN")));
        };
        let named = path.split('/').next().unwrap_or("");
        if !wildcard(named, bucket, false) {
            return Err(bad(format!("resource {r:?} is not in bucket {bucket:?}")));
        }
    }
    let mut conditions = Vec::new();
    if let Some(c) = s.get("Condition") {
        let Some(ops) = c.as_object() else {
            return Err(bad("Condition must be an object"));
        };
        for (op, keys) in ops {
            // Set operators name how a multi-valued key is compared; every key here has one
            // value, where both reduce to the operator itself.
            let plain = op.strip_prefix("ForAnyValue:").or_else(|| op.strip_prefix("ForAllValues:")).unwrap_or(op);
            let (operator, if_exists) = match plain.strip_suffix("IfExists") {
                Some(base) => (base, true),
                None => (plain, false),
            };
            if !OPERATORS.contains(&operator) {
                return Err(bad(format!("unknown condition operator {op:?}")));
            }
            let Some(keys) = keys.as_object() else {
                return Err(bad(format!("condition {op} must map keys to values")));
            };
            for (key, values) in keys {
                let values = strings(values, "a condition value")?;
                if operator.ends_with("IpAddress") {
                    for v in &values {
                        parse_cidr(v).ok_or_else(|| bad(format!("{v:?} is not an IP address or CIDR block")))?;
                    }
                }
                conditions.push(Condition { operator: operator.to_string(), if_exists, key: key.clone(), values });
            }
        }
    }
    Ok(Statement { effect, principal, actions: (actions, not_a), resources: (resources, not_r), conditions })
}

fn matches_principal(p: &Principal, who: Who<'_>) -> bool {
    match (p, who) {
        (Principal::Everyone, _) => true,
        (Principal::Users { .. }, Who::Anonymous) => false,
        (Principal::Users { names, ids }, Who::User { name, canonical_id }) => {
            names.iter().any(|n| n == name) || ids.iter().any(|i| i == canonical_id)
        }
    }
}

/// Glob match with `*` (any run) and `?` (one character); actions compare without case.
fn wildcard(pattern: &str, text: &str, ignore_case: bool) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = if ignore_case {
        (pattern.to_lowercase().chars().collect(), text.to_lowercase().chars().collect())
    } else {
        (pattern.chars().collect(), text.chars().collect())
    };
    // Iterative matching with one backtrack point: linear in practice, bounded by |p|*|t|.
    let (mut pi, mut ti, mut star, mut mark) = (0usize, 0usize, None, 0usize);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

fn parse_cidr(text: &str) -> Option<(IpAddr, u8)> {
    let (addr, bits) = match text.split_once('/') {
        Some((a, b)) => (a.parse::<IpAddr>().ok()?, b.parse::<u8>().ok()?),
        None => {
            let a = text.parse::<IpAddr>().ok()?;
            (a, if a.is_ipv4() { 32 } else { 128 })
        }
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    (bits <= max).then_some((addr, bits))
}

fn in_cidr(ip: &str, cidr: &str) -> bool {
    let (Ok(ip), Some((net, bits))) = (ip.parse::<IpAddr>(), parse_cidr(cidr)) else {
        return false;
    };
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits) };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = if bits == 0 { 0 } else { u128::MAX << (128 - bits) };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

fn holds(c: &Condition, cx: &Context) -> bool {
    let Some(have) = cx.get(&c.key) else {
        // A missing key satisfies an ...IfExists condition and `Null: true`, and no other.
        return c.if_exists || (c.operator == "Null" && c.values.iter().any(|v| v == "true"));
    };
    let any = |f: &dyn Fn(&str, &str) -> bool| have.iter().any(|h| c.values.iter().any(|v| f(h, v)));
    let num = |f: fn(f64, f64) -> bool| {
        any(&|h, v| matches!((h.parse::<f64>(), v.parse::<f64>()), (Ok(h), Ok(v)) if f(h, v)))
    };
    match c.operator.as_str() {
        "StringEquals" | "ArnEquals" => any(&|h, v| h == v),
        "StringNotEquals" => !any(&|h, v| h == v),
        "StringEqualsIgnoreCase" => any(&|h, v| h.eq_ignore_ascii_case(v)),
        "StringNotEqualsIgnoreCase" => !any(&|h, v| h.eq_ignore_ascii_case(v)),
        "StringLike" | "ArnLike" => any(&|h, v| wildcard(v, h, false)),
        "StringNotLike" | "ArnNotLike" => !any(&|h, v| wildcard(v, h, false)),
        "NumericEquals" => num(|h, v| h == v),
        "NumericNotEquals" => !num(|h, v| h == v),
        "NumericLessThan" => num(|h, v| h < v),
        "NumericLessThanEquals" => num(|h, v| h <= v),
        "NumericGreaterThan" => num(|h, v| h > v),
        "NumericGreaterThanEquals" => num(|h, v| h >= v),
        "Bool" => any(&|h, v| h.eq_ignore_ascii_case(v)),
        "IpAddress" => any(&|h, v| in_cidr(h, v)),
        "NotIpAddress" => !any(&|h, v| in_cidr(h, v)),
        // The key is present, so `Null` holds only when it asks for "false".
        "Null" => c.values.iter().any(|v| v == "false"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALICE: Who<'static> = Who::User { name: "alice", canonical_id: "a1" };
    const BOB: Who<'static> = Who::User { name: "bob", canonical_id: "b1" };

    fn policy(statements: &str) -> Policy {
        Policy::parse(&format!(r#"{{"Version":"2012-10-17","Statement":[{statements}]}}"#), "bk").unwrap()
    }

    #[test]
    fn allow_deny_and_silence() {
        let p = policy(
            r#"{"Effect":"Allow","Principal":{"AWS":"*"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::bk/*"},
               {"Effect":"Deny","Principal":{"AWS":"arn:aws:iam::bob:root"},"Action":"s3:*","Resource":"arn:aws:s3:::bk/secret/*"}"#,
        );
        let cx = Context::default();
        assert_eq!(p.evaluate(Who::Anonymous, "s3:GetObject", "arn:aws:s3:::bk/x", &cx), Decision::Allow);
        assert_eq!(p.evaluate(ALICE, "s3:PutObject", "arn:aws:s3:::bk/x", &cx), Decision::Silent);
        assert_eq!(p.evaluate(BOB, "s3:GetObject", "arn:aws:s3:::bk/secret/k", &cx), Decision::Deny);
        assert_eq!(p.evaluate(ALICE, "s3:GetObject", "arn:aws:s3:::bk/secret/k", &cx), Decision::Allow);
        assert_eq!(p.evaluate(ALICE, "s3:ListBucket", "arn:aws:s3:::bk", &cx), Decision::Silent);
        assert!(p.is_public());
    }

    #[test]
    fn not_principal_and_user_arns() {
        let p = policy(
            r#"{"Effect":"Deny","NotPrincipal":{"AWS":"arn:aws:iam::x:user/alice"},"Action":["s3:ListBucket"],"Resource":["arn:aws:s3:::bk"]}"#,
        );
        let cx = Context::default();
        assert_eq!(p.evaluate(ALICE, "s3:ListBucket", "arn:aws:s3:::bk", &cx), Decision::Silent);
        assert_eq!(p.evaluate(BOB, "s3:ListBucket", "arn:aws:s3:::bk", &cx), Decision::Deny);
        assert_eq!(p.evaluate(Who::Anonymous, "s3:ListBucket", "arn:aws:s3:::bk", &cx), Decision::Deny);
        let allow_all_but = r#"{"Statement":[{"Effect":"Allow","NotPrincipal":{"AWS":"bob"},"Action":"s3:*","Resource":"arn:aws:s3:::bk"}]}"#;
        assert!(Policy::parse(allow_all_but, "bk").is_err(), "NotPrincipal only with Deny");
    }

    #[test]
    fn conditions() {
        let p = policy(
            r#"{"Effect":"Allow","Principal":"*","Action":"s3:ListBucket","Resource":"arn:aws:s3:::bk",
                "Condition":{"StringEquals":{"s3:prefix":["a/","b/"]},"IpAddress":{"aws:SourceIp":"127.0.0.0/8"}}}"#,
        );
        let mut cx = Context::default();
        cx.set("aws:SourceIp", "127.0.0.1");
        assert_eq!(p.evaluate(BOB, "s3:ListBucket", "arn:aws:s3:::bk", &cx), Decision::Silent, "no prefix");
        cx.set("s3:prefix", "b/");
        assert_eq!(p.evaluate(BOB, "s3:ListBucket", "arn:aws:s3:::bk", &cx), Decision::Allow);
        cx.set("aws:SourceIp", "10.1.2.3");
        assert_eq!(p.evaluate(BOB, "s3:ListBucket", "arn:aws:s3:::bk", &cx), Decision::Silent);
        assert!(!p.is_public(), "conditioned");

        let q = policy(
            r#"{"Effect":"Deny","Principal":"*","Action":"s3:PutObject","Resource":"arn:aws:s3:::bk/*",
                "Condition":{"StringNotEqualsIfExists":{"s3:x-amz-acl":"private"}}}"#,
        );
        let mut cx = Context::default();
        assert_eq!(q.evaluate(BOB, "s3:PutObject", "arn:aws:s3:::bk/k", &cx), Decision::Deny, "absent key");
        cx.set("s3:x-amz-acl", "private");
        assert_eq!(q.evaluate(BOB, "s3:PutObject", "arn:aws:s3:::bk/k", &cx), Decision::Silent);
        cx.set("s3:x-amz-acl", "public-read");
        assert_eq!(q.evaluate(BOB, "s3:PutObject", "arn:aws:s3:::bk/k", &cx), Decision::Deny);
    }

    #[test]
    fn malformed_policies_are_refused() {
        for bad_doc in [
            "not json",
            "[]",
            r#"{"Statement":[]}"#,
            r#"{"Version":"2099-01-01","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::bk"}]}"#,
            r#"{"Statement":[{"Effect":"Maybe","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::bk"}]}"#,
            r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"ec2:*","Resource":"arn:aws:s3:::bk"}]}"#,
            r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::other/*"}]}"#,
            r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::bk","Condition":{"Sometimes":{"a":"b"}}}]}"#,
            r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::bk","Condition":{"IpAddress":{"aws:SourceIp":"nope"}}}]}"#,
        ] {
            assert!(Policy::parse(bad_doc, "bk").is_err(), "{bad_doc}");
        }
        assert!(Policy::parse(&"x".repeat(MAX_POLICY_BYTES + 1), "bk").is_err());
    }

    #[test]
    fn wildcards() {
        assert!(wildcard("s3:Get*", "s3:getobject", true));
        assert!(wildcard("a*c?e", "abbbcde", false));
        assert!(!wildcard("a*c?e", "abbbce", false));
        assert!(wildcard("*", "", false));
        assert!(!wildcard("", "x", false));
    }
}
