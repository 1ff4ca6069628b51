//! POST object: uploads from HTML forms (`multipart/form-data` to a bucket's URL), answered
//! here rather than by s3s, which would collect the whole file in memory before its handler
//! runs. The form's fields are read first (bounded in count and bytes), the policy's signature
//! (SigV4 or SigV2) and conditions are checked (`postpolicy.rs`), and only then is the file field
//! streamed into an ordinary PUT through [`Gateway::put_object`], with the policy's
//! `content-length-range` enforced while it streams: the object becomes visible only if the
//! whole file arrived within bounds. Fields after the file are ignored, as S3 does.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use base64_simd::STANDARD as B64;
use bytes::Bytes;
use futures::Stream;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use s3s::auth::{Credentials, SecretKey};
use s3s::dto::{PutObjectInput, StreamingBlob, Tagging};
use s3s::{S3, S3Error, S3Request, S3Result, s3_error};

use crate::access::Transport;
use crate::error::GatewayError;
use crate::postpolicy::{self, PolicyError, PostPolicy};
use crate::s3impl::Gateway;
use crate::signing::{hmac_sha1, hmac_sha256, same_signature, sigv4_key};
use crate::text::{hex, uri_encode};

/// Bytes all non-file fields together may hold.
const MAX_FIELD_BYTES: usize = 64 * 1024;
/// Most fields before the file.
const MAX_FIELDS: usize = 128;
/// The largest file a form may upload (S3's limit for a single PUT).
const MAX_FILE_BYTES: u64 = 5 << 30;

/// The bucket a request uploads a form to, if it is one: `POST` with a `multipart/form-data`
/// body to a bucket's URL (`/BUCKET` path style, `/` under a `--domain`). Its query plays no
/// part: s3s would take any such request for a form too, and collect its file in memory.
pub fn form_upload_bucket(
    method: &hyper::Method,
    uri: &hyper::Uri,
    headers: &HeaderMap,
    domains: &[String],
) -> Option<String> {
    if method != hyper::Method::POST {
        return None;
    }
    let content_type = headers.get(hyper::header::CONTENT_TYPE)?.to_str().ok()?;
    if !content_type.trim_start().to_ascii_lowercase().starts_with("multipart/form-data") {
        return None;
    }
    let host = headers.get(hyper::header::HOST).and_then(|h| h.to_str().ok());
    let bucket = crate::cors::bucket_of(uri.path(), host, domains)?;
    let path = uri.path().trim_matches('/');
    let addressed = path.is_empty() || crate::text::uri_decode(path) == bucket;
    addressed.then_some(bucket)
}

/// How the file compared with its bounds, when it broke them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bounds {
    TooLarge,
    TooSmall,
}

/// The file field as a body stream that ends in an error once it passes `max_bytes`, or at its
/// end when it stayed under `min_bytes`, so that the write it feeds never commits.
struct CappedFile {
    field: multer::Field<'static>,
    seen_bytes: u64,
    min_bytes: u64,
    max_bytes: u64,
    broken: Arc<Mutex<Option<Bounds>>>,
    done: bool,
}

impl CappedFile {
    fn fail(&mut self, why: Bounds) -> Poll<Option<Result<Bytes, std::io::Error>>> {
        self.done = true;
        if let Ok(mut b) = self.broken.lock() {
            *b = Some(why);
        }
        Poll::Ready(Some(Err(std::io::Error::other(format!(
            "the file is {why:?} for the policy's content-length-range"
        )))))
    }
}

impl Stream for CappedFile {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        match std::pin::Pin::new(&mut self.field).poll_next(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(chunk))) => {
                self.seen_bytes += chunk.len() as u64;
                if self.seen_bytes > self.max_bytes {
                    return self.fail(Bounds::TooLarge);
                }
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(Some(Err(e))) => {
                self.done = true;
                Poll::Ready(Some(Err(std::io::Error::other(format!("the form's file field is malformed: {e}")))))
            }
            Poll::Ready(None) if self.seen_bytes < self.min_bytes => self.fail(Bounds::TooSmall),
            Poll::Ready(None) => {
                self.done = true;
                Poll::Ready(None)
            }
        }
    }
}

fn malformed_form(e: impl std::fmt::Display) -> S3Error {
    s3_error!(MalformedPOSTRequest, "the body of the POST request is not well-formed multipart/form-data: {e}")
}

fn policy_error(e: PolicyError) -> S3Error {
    match e {
        PolicyError::Malformed(m) => s3_error!(InvalidPolicyDocument, "{m}"),
        PolicyError::Denied(_) => s3_error!(AccessDenied, "{e}"),
    }
}

/// How a form's signature is recomputed from its signer's secret.
type Recompute = Box<dyn Fn(&str) -> Vec<u8> + Send>;

/// The form's fields before the file, and the file field itself.
struct Form {
    fields: Vec<(String, String)>,
    file: multer::Field<'static>,
}

/// Reads fields up to the file field, bounded in count and bytes.
async fn read_form(body: s3s::Body, content_type: &str) -> S3Result<Form> {
    let boundary = multer::parse_boundary(content_type).map_err(malformed_form)?;
    let mut form = multer::Multipart::new(body, boundary);
    let mut fields: Vec<(String, String)> = Vec::new();
    let mut field_bytes = 0usize;
    loop {
        let Some(mut field) = form.next_field().await.map_err(malformed_form)? else {
            return Err(s3_error!(InvalidArgument, "POST requires exactly one file upload per request"));
        };
        let name = field.name().unwrap_or("").to_ascii_lowercase();
        if name == "file" {
            return Ok(Form { fields, file: field });
        }
        if fields.len() >= MAX_FIELDS {
            return Err(s3_error!(
                MaxPostPreDataLengthExceededError,
                "a form has at most {MAX_FIELDS} fields before its file"
            ));
        }
        if fields.iter().any(|(n, _)| *n == name) {
            return Err(s3_error!(InvalidArgument, "the form sends field {name:?} twice"));
        }
        let mut value = Vec::new();
        while let Some(chunk) = field.chunk().await.map_err(malformed_form)? {
            field_bytes += chunk.len();
            if field_bytes > MAX_FIELD_BYTES {
                return Err(s3_error!(
                    MaxPostPreDataLengthExceededError,
                    "the form's fields before its file are over {MAX_FIELD_BYTES} bytes"
                ));
            }
            value.extend_from_slice(&chunk);
        }
        let value = String::from_utf8(value).map_err(|_| s3_error!(InvalidArgument, "field {name:?} is not UTF-8"))?;
        fields.push((name, value));
    }
}

/// The `x-amz-tagging` form of a `tagging` field's XML document.
fn tagging_query(xml: &str) -> S3Result<String> {
    let mut d = s3s::xml::Deserializer::new(xml.as_bytes());
    let tagging: Tagging = s3s::xml::Deserialize::deserialize(&mut d)
        .map_err(|e| s3_error!(MalformedXML, "the tagging field is not a Tagging document: {e:?}"))?;
    let pairs: Vec<String> = tagging
        .tag_set
        .iter()
        .map(|t| {
            format!("{}={}", uri_encode(t.key.as_deref().unwrap_or("")), uri_encode(t.value.as_deref().unwrap_or("")))
        })
        .collect();
    Ok(pairs.join("&"))
}

fn header(name: &'static str, value: &str) -> S3Result<(HeaderName, HeaderValue)> {
    let v = HeaderValue::from_str(value)
        .map_err(|_| s3_error!(InvalidArgument, "field {name} is not a valid header value"))?;
    Ok((HeaderName::from_static(name), v))
}

impl Gateway {
    /// Checks a signed form's signature and returns its signer's credentials; `None` for an
    /// unsigned (anonymous) form.
    async fn form_signer(&self, fields: &[(String, String)]) -> S3Result<Option<Credentials>> {
        let f = |name: &str| postpolicy::field(fields, name);
        let (access_key, sent, expected): (String, Vec<u8>, Recompute) = if let Some(sig) = f("x-amz-signature") {
            if f("x-amz-algorithm") != Some("AWS4-HMAC-SHA256") {
                return Err(s3_error!(InvalidArgument, "x-amz-algorithm must be AWS4-HMAC-SHA256"));
            }
            let credential =
                f("x-amz-credential").ok_or_else(|| s3_error!(InvalidArgument, "the form has no x-amz-credential"))?;
            let parts: Vec<&str> = credential.split('/').collect();
            let [access, date, region, service, "aws4_request"] = parts[..] else {
                return Err(s3_error!(
                    InvalidArgument,
                    "x-amz-credential {credential:?} is not KEY/DATE/REGION/s3/aws4_request"
                ));
            };
            if region != self.settings.region {
                return Err(s3_error!(
                    AuthorizationHeaderMalformed,
                    "the credential names region {region:?}; this gateway serves {:?}",
                    self.settings.region
                ));
            }
            let (date, region, service) = (date.to_string(), region.to_string(), service.to_string());
            let sent = sig.trim().to_ascii_lowercase().into_bytes();
            let policy = f("policy").unwrap_or("").as_bytes().to_vec();
            let expected = move |secret: &str| {
                hex(&hmac_sha256(&sigv4_key(secret, &date, &region, &service), &policy)).into_bytes()
            };
            (access.to_string(), sent, Box::new(expected))
        } else if let Some(sig) = f("signature") {
            let access =
                f("awsaccesskeyid").ok_or_else(|| s3_error!(InvalidArgument, "the form has no AWSAccessKeyId"))?;
            let sent = B64
                .decode_to_vec(sig.trim())
                .map_err(|_| s3_error!(SignatureDoesNotMatch, "the signature is not base64"))?;
            let policy = f("policy").unwrap_or("").as_bytes().to_vec();
            (access.to_string(), sent, Box::new(move |secret: &str| hmac_sha1(secret.as_bytes(), &policy)))
        } else if ["policy", "awsaccesskeyid", "x-amz-credential"].iter().any(|n| f(n).is_some()) {
            // A form that names a signer or a policy but no signature is malformed, not
            // anonymous (an anonymous form's policy would prove nothing).
            return Err(s3_error!(InvalidArgument, "the form has a policy or an access key but no signature"));
        } else {
            return Ok(None);
        };
        if f("policy").is_none() {
            return Err(s3_error!(InvalidArgument, "a signed form must have a policy field"));
        }
        let secret = match self.keys.get(&access_key).await {
            Ok(rec) => rec.secret,
            Err(GatewayError::NoSuchAccessKey(_)) => {
                return Err(s3_error!(InvalidAccessKeyId, "the access key does not exist"));
            }
            Err(e) => return Err(e.into()),
        };
        if !same_signature(&expected(&secret), &sent) {
            return Err(s3_error!(SignatureDoesNotMatch, "the form's signature does not match its policy"));
        }
        Ok(Some(Credentials { access_key, secret_key: SecretKey::from(secret) }))
    }

    /// Serves a form upload to `bucket`; errors are S3 errors for the caller to render.
    pub(crate) async fn post_object_form(
        &self,
        req: hyper::Request<s3s::Body>,
        bucket: String,
        transport: Transport,
    ) -> S3Result<hyper::Response<s3s::Body>> {
        let (parts, body) = req.into_parts();
        let content_type = parts.headers.get(hyper::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        let Form { mut fields, file } = read_form(body, content_type).await?;
        // `${filename}` in the key stands for the name of the uploaded file.
        let filename = file.file_name().unwrap_or("").rsplit(['/', '\\']).next().unwrap_or("").to_string();
        let key = match fields.iter_mut().find(|(n, _)| n == "key") {
            Some((_, key)) => {
                *key = key.replace("${filename}", &filename);
                key.clone()
            }
            None => return Err(s3_error!(InvalidArgument, "Bucket POST must contain a field named 'key'")),
        };
        if key.is_empty() {
            return Err(s3_error!(InvalidArgument, "the key field is empty"));
        }
        if postpolicy::field(&fields, "bucket").is_some_and(|b| b != bucket) {
            return Err(s3_error!(AccessDenied, "the form's bucket field names another bucket than its URL"));
        }
        let credentials = self.form_signer(&fields).await?;
        let mut bounds = (0, MAX_FILE_BYTES);
        if let Some(text) = postpolicy::field(&fields, "policy") {
            let policy = PostPolicy::parse(text).map_err(policy_error)?;
            policy.check(&fields, &bucket, crate::layout::unix_now_s()).map_err(policy_error)?;
            if let Some((min, max)) = policy.length_range {
                bounds = (min, max.min(MAX_FILE_BYTES));
            }
        }
        let f = |name: &str| postpolicy::field(&fields, name).map(str::to_string);

        // What the form says becomes what an equivalent PUT would say in headers and input.
        let mut headers = HeaderMap::new();
        if let Some(host) = parts.headers.get(hyper::header::HOST) {
            headers.insert(hyper::header::HOST, host.clone());
        }
        for name in [hyper::header::USER_AGENT, hyper::header::REFERER] {
            if let Some(v) = parts.headers.get(&name) {
                headers.insert(name, v.clone());
            }
        }
        if let Some(acl) = f("acl") {
            let (n, v) = header("x-amz-acl", &acl)?;
            headers.insert(n, v);
        }
        let tagging = f("tagging").map(|xml| tagging_query(&xml)).transpose()?;
        if let Some(t) = &tagging {
            let (n, v) = header("x-amz-tagging", t)?;
            headers.insert(n, v);
        }
        let metadata = fields
            .iter()
            .filter_map(|(n, v)| n.strip_prefix("x-amz-meta-").map(|m| (m.to_string(), v.clone())))
            .collect::<std::collections::HashMap<_, _>>();
        let broken = Arc::new(Mutex::new(None));
        let capped = CappedFile {
            field: file,
            seen_bytes: 0,
            min_bytes: bounds.0,
            max_bytes: bounds.1,
            broken: broken.clone(),
            done: false,
        };
        let expires =
            f("expires").and_then(|e| s3s::dto::Timestamp::parse(s3s::dto::TimestampFormat::HttpDate, &e).ok());
        let input = PutObjectInput {
            bucket: bucket.clone(),
            key: key.clone(),
            body: Some(StreamingBlob::wrap(capped)),
            content_type: f("content-type"),
            cache_control: f("cache-control"),
            content_disposition: f("content-disposition"),
            content_encoding: f("content-encoding"),
            expires,
            metadata: (!metadata.is_empty()).then_some(metadata),
            tagging,
            checksum_crc32: f("x-amz-checksum-crc32"),
            checksum_crc32c: f("x-amz-checksum-crc32c"),
            checksum_crc64nvme: f("x-amz-checksum-crc64nvme"),
            checksum_sha1: f("x-amz-checksum-sha1"),
            checksum_sha256: f("x-amz-checksum-sha256"),
            ..Default::default()
        };
        let mut extensions = hyper::http::Extensions::new();
        extensions.insert(transport);
        let put = S3Request {
            input,
            method: parts.method.clone(),
            uri: parts.uri.clone(),
            headers,
            extensions,
            credentials,
            region: None,
            service: None,
            trailing_headers: None,
        };
        let written = match self.put_object(put).await {
            Ok(w) => w.output,
            Err(e) => {
                return Err(match broken.lock().ok().and_then(|b| *b) {
                    Some(Bounds::TooLarge) => s3_error!(
                        EntityTooLarge,
                        "the file is over the {} bytes the policy's content-length-range allows",
                        bounds.1
                    ),
                    Some(Bounds::TooSmall) => s3_error!(
                        EntityTooSmall,
                        "the file is under the {} bytes the policy's content-length-range requires",
                        bounds.0
                    ),
                    None => e,
                });
            }
        };
        let etag = written.e_tag.as_ref().map(|e| format!("\"{}\"", e.value())).unwrap_or_default();
        let scheme = if transport.secure { "https" } else { "http" };
        let host = parts.headers.get(hyper::header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
        let location = format!("{scheme}://{host}/{}/{}", uri_encode(&bucket), uri_encode(&key).replace("%2F", "/"));
        let redirect = f("success_action_redirect").or_else(|| f("redirect"));
        let mut resp = hyper::Response::new(s3s::Body::empty());
        match redirect
            .filter(|r| (r.starts_with("http://") || r.starts_with("https://")) && !r.chars().any(char::is_control))
        {
            Some(url) => {
                let sep = if url.contains('?') { '&' } else { '?' };
                let target = format!(
                    "{url}{sep}bucket={}&key={}&etag={}",
                    uri_encode(&bucket),
                    uri_encode(&key),
                    uri_encode(&etag)
                );
                *resp.status_mut() = hyper::StatusCode::SEE_OTHER;
                let v = HeaderValue::from_str(&target)
                    .map_err(|_| s3_error!(InvalidArgument, "the redirect URL is not a valid header"))?;
                resp.headers_mut().insert(hyper::header::LOCATION, v);
            }
            None => match f("success_action_status").as_deref() {
                Some("200") => *resp.status_mut() = hyper::StatusCode::OK,
                Some("201") => {
                    *resp.status_mut() = hyper::StatusCode::CREATED;
                    let esc = crate::precheck::xml_escape;
                    *resp.body_mut() = s3s::Body::from(format!(
                        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><PostResponse><Location>{}</Location><Bucket>{}</Bucket><Key>{}</Key><ETag>{}</ETag></PostResponse>",
                        esc(&location),
                        esc(&bucket),
                        esc(&key),
                        esc(&etag)
                    ));
                    resp.headers_mut().insert(hyper::header::CONTENT_TYPE, HeaderValue::from_static("application/xml"));
                }
                _ => *resp.status_mut() = hyper::StatusCode::NO_CONTENT,
            },
        }
        if let Ok(v) = HeaderValue::from_str(&etag) {
            resp.headers_mut().insert(hyper::header::ETAG, v);
        }
        if resp.status() != hyper::StatusCode::SEE_OTHER
            && let Ok(v) = HeaderValue::from_str(&location)
        {
            resp.headers_mut().insert(hyper::header::LOCATION, v);
        }
        if let Some(v) = written.version_id.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
            resp.headers_mut().insert("x-amz-version-id", v);
        }
        Ok(resp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(method: &str, uri: &str, host: &str, content_type: &str) -> Option<String> {
        let mut headers = HeaderMap::new();
        headers.insert(hyper::header::HOST, HeaderValue::from_str(host).unwrap());
        headers.insert(hyper::header::CONTENT_TYPE, HeaderValue::from_str(content_type).unwrap());
        let method: hyper::Method = method.parse().unwrap();
        form_upload_bucket(&method, &uri.parse().unwrap(), &headers, &["s3.test".to_string()])
    }

    #[test]
    fn only_form_posts_to_a_bucket_url_are_form_uploads() {
        let form = "multipart/form-data; boundary=x";
        assert_eq!(ask("POST", "/b", "127.0.0.1:80", form), Some("b".into()));
        assert_eq!(ask("POST", "/b/", "127.0.0.1:80", "Multipart/Form-Data; boundary=x"), Some("b".into()));
        assert_eq!(ask("POST", "/b?x=1", "127.0.0.1:80", form), Some("b".into()));
        assert_eq!(ask("POST", "/", "b.s3.test:80", form), Some("b".into()));
        assert_eq!(ask("POST", "/b/key", "127.0.0.1:80", form), None);
        assert_eq!(ask("POST", "/key", "b.s3.test", form), None);
        assert_eq!(ask("PUT", "/b", "127.0.0.1:80", form), None);
        assert_eq!(ask("POST", "/b?delete", "127.0.0.1:80", "application/xml"), None);
        assert_eq!(ask("POST", "/", "127.0.0.1:80", form), None);
    }

    #[test]
    fn tagging_fields_become_tagging_headers() {
        let xml = "<Tagging><TagSet><Tag><Key>a b</Key><Value>1&amp;2</Value></Tag><Tag><Key>c</Key><Value></Value></Tag></TagSet></Tagging>";
        assert_eq!(tagging_query(xml).unwrap(), "a%20b=1%262&c=");
        assert!(tagging_query("<Tagging>").is_err());
    }
}
