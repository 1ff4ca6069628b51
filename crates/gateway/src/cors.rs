//! Cross-origin resource sharing: bucket CORS rules checked as S3 checks them, stored in the
//! bucket record, and applied around s3s. A browser's preflight (`OPTIONS`, never signed) is
//! answered here without reaching s3s; an actual request carrying `Origin` gets the
//! `Access-Control-*` headers of the first rule that allows it, whatever its status (a browser
//! needs them to let a script read an error too).

use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, StatusCode};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, s3_error};

use crate::access::Action;
use crate::layout::{BucketRecord, CorsRule};
use crate::s3impl::Gateway;

/// Most rules in one configuration (S3's limit).
const MAX_RULES: usize = 100;
const METHODS: [&str; 5] = ["GET", "PUT", "HEAD", "POST", "DELETE"];

/// Whether `text` matches `pattern`, whose `*` stands for any run of characters.
fn wildcard(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, tail)) => text.len() >= head.len() + tail.len() && text.starts_with(head) && text.ends_with(tail),
    }
}

/// The first rule allowing `method` from `origin` with request headers `headers`.
pub fn find<'a>(rules: &'a [CorsRule], origin: &str, method: &str, headers: &[String]) -> Option<&'a CorsRule> {
    rules.iter().find(|r| {
        r.origins.iter().any(|o| wildcard(o, origin))
            && r.methods.iter().any(|m| m == method)
            && headers.iter().all(|h| r.headers.iter().any(|a| wildcard(&a.to_ascii_lowercase(), h)))
    })
}

/// The `Access-Control-*` headers granting `origin` what `rule` allows (with the headers a
/// preflight asked for, if it was one).
pub fn grant(rule: &CorsRule, origin: &str, preflight_headers: Option<&[String]>) -> Vec<(HeaderName, String)> {
    use hyper::header as h;
    let any_origin = rule.origins.iter().any(|o| o == "*");
    let mut out = vec![
        (h::ACCESS_CONTROL_ALLOW_ORIGIN, if any_origin { "*".to_string() } else { origin.to_string() }),
        (h::ACCESS_CONTROL_ALLOW_METHODS, rule.methods.join(", ")),
    ];
    if !any_origin {
        // Credentials are allowed only with a named origin (the Fetch standard forbids "*").
        out.push((h::ACCESS_CONTROL_ALLOW_CREDENTIALS, "true".into()));
        out.push((h::VARY, "Origin, Access-Control-Request-Headers, Access-Control-Request-Method".into()));
    }
    if let Some(asked) = preflight_headers.filter(|a| !a.is_empty()) {
        out.push((h::ACCESS_CONTROL_ALLOW_HEADERS, asked.join(", ")));
    }
    if !rule.expose_headers.is_empty() {
        out.push((h::ACCESS_CONTROL_EXPOSE_HEADERS, rule.expose_headers.join(", ")));
    }
    if let Some(age) = rule.max_age_s.filter(|_| preflight_headers.is_some()) {
        out.push((h::ACCESS_CONTROL_MAX_AGE, age.to_string()));
    }
    out
}

/// The bucket a request names: the host's first label under one of `domains`, else the path's
/// first segment.
pub fn bucket_of(path: &str, host: Option<&str>, domains: &[String]) -> Option<String> {
    let host =
        host.map(|h| h.rsplit_once(':').map_or(h, |(name, port)| if port.parse::<u16>().is_ok() { name } else { h }));
    if let Some(host) = host {
        for d in domains {
            if let Some(bucket) = host.strip_suffix(d.as_str()).and_then(|b| b.strip_suffix('.')) {
                return (!bucket.is_empty()).then(|| bucket.to_string());
            }
        }
    }
    let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
    (!first.is_empty()).then(|| crate::text::uri_decode(first))
}

/// The header names a preflight asks for, lower case.
fn requested_headers(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all("access-control-request-headers")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty())
        .collect()
}

fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// What a request needs of CORS: its origin, the method it asks for, and its bucket.
pub struct CorsAsk {
    pub origin: String,
    pub method: String,
    pub bucket: String,
}

impl CorsAsk {
    /// The CORS side of an actual (not preflight) request, if it has an `Origin`.
    pub fn of(method: &Method, uri: &hyper::Uri, headers: &HeaderMap, domains: &[String]) -> Option<CorsAsk> {
        let origin = header_text(headers, "origin")?.to_string();
        let bucket = bucket_of(uri.path(), header_text(headers, "host"), domains)?;
        // A request may name the method it stands for (as a preflight does).
        let method = header_text(headers, "access-control-request-method").unwrap_or(method.as_str()).to_string();
        Some(CorsAsk { origin, method, bucket })
    }
}

/// An S3 error answer made here (for preflights, which never reach s3s).
fn error(status: StatusCode, code: &str, message: &str, request_id: &str) -> hyper::Response<s3s::Body> {
    let mut resp = hyper::Response::new(s3s::Body::from(crate::precheck::error_body(code, message, request_id)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(hyper::header::CONTENT_TYPE, HeaderValue::from_static("application/xml"));
    resp
}

fn add_headers(resp: &mut hyper::Response<s3s::Body>, headers: Vec<(HeaderName, String)>) {
    for (name, value) in headers {
        if let Ok(v) = HeaderValue::from_str(&value) {
            resp.headers_mut().insert(name, v);
        }
    }
}

impl Gateway {
    /// Answers a preflight `OPTIONS` request: 200 with the grant of the first rule allowing it,
    /// 403 when none does, 400 when it is not a preflight.
    pub(crate) async fn preflight(
        &self,
        uri: &hyper::Uri,
        headers: &HeaderMap,
        domains: &[String],
        request_id: &str,
    ) -> hyper::Response<s3s::Body> {
        let bad = |m: &str| error(StatusCode::BAD_REQUEST, "BadRequest", m, request_id);
        let Some(origin) = header_text(headers, "origin") else {
            return bad("a CORS preflight request needs an Origin header");
        };
        let Some(method) = header_text(headers, "access-control-request-method") else {
            return bad("a CORS preflight request needs an Access-Control-Request-Method header");
        };
        let Some(name) = bucket_of(uri.path(), header_text(headers, "host"), domains) else {
            return bad("a CORS preflight request names a bucket");
        };
        let bucket = match self.bucket(&name).await {
            Ok(b) => b,
            Err(e) => {
                let status = e.status_code().unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                return error(status, e.code().as_str(), e.message().unwrap_or(""), request_id);
            }
        };
        let asked = requested_headers(headers);
        match find(&bucket.cors, origin, method, &asked) {
            Some(rule) => {
                let mut resp = hyper::Response::new(s3s::Body::empty());
                add_headers(&mut resp, grant(rule, origin, Some(&asked)));
                resp
            }
            None => error(
                StatusCode::FORBIDDEN,
                "AccessForbidden",
                "CORSResponse: this CORS request is not allowed",
                request_id,
            ),
        }
    }

    /// Adds to `resp` the CORS headers the bucket's rules grant `ask` (none if no rule does).
    pub(crate) async fn add_cors_headers(&self, ask: &CorsAsk, resp: &mut hyper::Response<s3s::Body>) {
        let Ok(bucket) = self.bucket(&ask.bucket).await else { return };
        if let Some(rule) = find(&bucket.cors, &ask.origin, &ask.method, &[]) {
            add_headers(resp, grant(rule, &ask.origin, None));
        }
    }

    pub(crate) async fn put_bucket_cors_op(
        &self,
        req: S3Request<PutBucketCorsInput>,
    ) -> S3Result<S3Response<PutBucketCorsOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::PutBucketConfig("s3:PutBucketCORS"), None)?;
        let rules = rules_of(&req.input.cors_configuration)?;
        self.configure(&access.bucket, |b| {
            b.cors.clone_from(&rules);
            Ok(())
        })
        .await?;
        Ok(S3Response::new(PutBucketCorsOutput {}))
    }

    pub(crate) async fn get_bucket_cors_op(
        &self,
        req: S3Request<GetBucketCorsInput>,
    ) -> S3Result<S3Response<GetBucketCorsOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::GetBucketConfig("s3:GetBucketCORS"), None)?;
        if access.bucket.cors.is_empty() {
            return Err(s3_error!(
                NoSuchCORSConfiguration,
                "bucket {:?} has no CORS configuration",
                access.bucket.name
            ));
        }
        Ok(S3Response::new(GetBucketCorsOutput { cors_rules: Some(access.bucket.cors.iter().map(rule_dto).collect()) }))
    }

    pub(crate) async fn delete_bucket_cors_op(
        &self,
        req: S3Request<DeleteBucketCorsInput>,
    ) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
        let access = self.access(&req, &req.input.bucket).await?;
        access.require(Action::PutBucketConfig("s3:PutBucketCORS"), None)?;
        self.configure(&access.bucket, |b: &mut BucketRecord| {
            b.cors.clear();
            Ok(())
        })
        .await?;
        Ok(S3Response::new(DeleteBucketCorsOutput {}))
    }
}

/// The rules of a configuration, checked.
fn rules_of(config: &CORSConfiguration) -> S3Result<Vec<CorsRule>> {
    if config.cors_rules.is_empty() || config.cors_rules.len() > MAX_RULES {
        return Err(s3_error!(MalformedXML, "a CORS configuration has 1 to {MAX_RULES} rules"));
    }
    config
        .cors_rules
        .iter()
        .map(|r| {
            for m in &r.allowed_methods {
                if !METHODS.contains(&m.as_str()) {
                    return Err(s3_error!(InvalidRequest, "unsupported HTTP method {m:?} in a CORS rule"));
                }
            }
            if r.allowed_methods.is_empty() || r.allowed_origins.is_empty() {
                return Err(s3_error!(MalformedXML, "a CORS rule names at least one method and one origin"));
            }
            let headers = r.allowed_headers.clone().unwrap_or_default();
            for pattern in r.allowed_origins.iter().chain(&headers) {
                if pattern.matches('*').count() > 1 {
                    return Err(s3_error!(InvalidRequest, "{pattern:?} has more than one wildcard"));
                }
            }
            let max_age_s = r
                .max_age_seconds
                .map(|s| u32::try_from(s).map_err(|_| s3_error!(InvalidRequest, "MaxAgeSeconds {s} is negative")))
                .transpose()?;
            Ok(CorsRule {
                id: r.id.clone(),
                methods: r.allowed_methods.clone(),
                origins: r.allowed_origins.clone(),
                headers,
                expose_headers: r.expose_headers.clone().unwrap_or_default(),
                max_age_s,
            })
        })
        .collect()
}

fn rule_dto(r: &CorsRule) -> CORSRule {
    CORSRule {
        allowed_headers: (!r.headers.is_empty()).then(|| r.headers.clone()),
        allowed_methods: r.methods.clone(),
        allowed_origins: r.origins.clone(),
        expose_headers: (!r.expose_headers.is_empty()).then(|| r.expose_headers.clone()),
        id: r.id.clone(),
        max_age_seconds: r.max_age_s.map(|s| i32::try_from(s).unwrap_or(i32::MAX)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(origins: &[&str], methods: &[&str], headers: &[&str]) -> CorsRule {
        CorsRule {
            origins: origins.iter().map(|s| s.to_string()).collect(),
            methods: methods.iter().map(|s| s.to_string()).collect(),
            headers: headers.iter().map(|s| s.to_string()).collect(),
            ..CorsRule::default()
        }
    }

    #[test]
    fn origins_match_with_one_wildcard() {
        assert!(wildcard("*suffix", "foo.suffix"));
        assert!(!wildcard("*suffix", "foo.suffix.get"));
        assert!(wildcard("start*end", "startend"));
        assert!(wildcard("start*end", "start12end"));
        assert!(!wildcard("start*end", "0start12end"));
        assert!(!wildcard("ab*ba", "aba"), "head and tail may not overlap");
        assert!(wildcard("*", "anything"));
        assert!(wildcard("exact", "exact") && !wildcard("exact", "exactly"));
    }

    #[test]
    fn the_first_rule_allowing_origin_method_and_headers_is_used() {
        let rules = [rule(&["*.get"], &["GET"], &[]), rule(&["*"], &["GET", "PUT"], &["x-amz-*"])];
        assert!(std::ptr::eq(find(&rules, "a.get", "GET", &[]).unwrap(), &rules[0]));
        assert!(std::ptr::eq(find(&rules, "a.get", "PUT", &[]).unwrap(), &rules[1]));
        assert!(find(&rules, "a.get", "DELETE", &[]).is_none());
        let asked = vec!["x-amz-meta-a".to_string()];
        assert!(std::ptr::eq(find(&rules, "a.get", "GET", &asked).unwrap(), &rules[1]));
        assert!(find(&rules, "a", "GET", &["content-type".to_string()]).is_none());
    }

    #[test]
    fn grants_name_the_origin_unless_any_is_allowed() {
        let named = grant(&rule(&["a.example"], &["GET", "PUT"], &[]), "a.example", None);
        assert!(named.contains(&(hyper::header::ACCESS_CONTROL_ALLOW_ORIGIN, "a.example".into())));
        assert!(named.contains(&(hyper::header::ACCESS_CONTROL_ALLOW_METHODS, "GET, PUT".into())));
        let any = grant(&rule(&["*"], &["GET"], &[]), "a.example", None);
        assert!(any.contains(&(hyper::header::ACCESS_CONTROL_ALLOW_ORIGIN, "*".into())));
        assert!(!any.iter().any(|(n, _)| n == hyper::header::ACCESS_CONTROL_ALLOW_CREDENTIALS));
    }

    #[test]
    fn buckets_come_from_the_host_under_a_domain_or_else_the_path() {
        let domains = vec!["s3.local".to_string()];
        assert_eq!(bucket_of("/b/key", Some("127.0.0.1:80"), &domains).as_deref(), Some("b"));
        assert_eq!(bucket_of("/key", Some("pics.s3.local:7480"), &domains).as_deref(), Some("pics"));
        assert_eq!(bucket_of("/", Some("s3.local"), &domains), None);
        assert_eq!(bucket_of("/b%20c/k", None, &[]).as_deref(), Some("b c"));
    }
}
