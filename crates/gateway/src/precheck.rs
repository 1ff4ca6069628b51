//! What the HTTP side does around s3s, where S3's answers differ from what s3s gives: the date
//! of a SigV2 request is checked before its signature (S3 names a missing, malformed or skewed
//! date, not a signature mismatch), a presigned URL's validity is capped at seven days (s3s
//! does not cap it), every error body carries the request's id, like the `x-amz-request-id`
//! header, and GetObjectAttributes answers its ETag unquoted (s3s quotes every XML ETag).

use bytes::Bytes;
use hyper::StatusCode;
use hyper::header::HeaderMap;
use s3s::dto::{Timestamp, TimestampFormat};

/// How far a request's date may be from the gateway's clock (S3's limit).
pub const MAX_SKEW_S: i64 = 15 * 60;

/// Why a request was refused before s3s saw it.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

fn refuse(status: StatusCode, code: &'static str, message: String) -> Refusal {
    Refusal { status, code, message }
}

/// Checks the date a SigV2-signed request (`Authorization: AWS KEY:SIG`) carries: `x-amz-date`
/// when present (even empty), else `Date`. `now_s` is the gateway's clock in Unix seconds.
/// Requests signed otherwise pass untouched (s3s checks SigV4 dates itself).
pub fn sigv2_date(headers: &HeaderMap, now_s: i64) -> Result<(), Refusal> {
    let v2 = headers
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.starts_with("AWS ") && !a.starts_with("AWS4-"));
    if !v2 {
        return Ok(());
    }
    let raw = headers.get("x-amz-date").or_else(|| headers.get(hyper::header::DATE));
    let denied = |why: &str| {
        refuse(
            StatusCode::FORBIDDEN,
            "AccessDenied",
            format!("AWS authentication requires a valid Date or x-amz-date header: {why}"),
        )
    };
    let Some(raw) = raw else { return Err(denied("none was sent")) };
    let text = raw.to_str().map_err(|_| denied("it is not text"))?.trim();
    if text.is_empty() {
        return Err(denied("it is empty"));
    }
    let when = Timestamp::parse(TimestampFormat::HttpDate, text).map_err(|_| denied("it is not an HTTP date"))?;
    let when: time::OffsetDateTime = when.into();
    let when_s = when.unix_timestamp();
    if when_s < 0 {
        return Err(denied("it is before 1970"));
    }
    if (when_s - now_s).abs() > MAX_SKEW_S {
        return Err(refuse(
            StatusCode::FORBIDDEN,
            "RequestTimeTooSkewed",
            format!("the request's date {text} is more than {MAX_SKEW_S} s from the server's clock"),
        ));
    }
    Ok(())
}

/// The longest validity a presigned URL may ask for (S3's limit: seven days).
pub const MAX_PRESIGNED_EXPIRY_S: i64 = 7 * 24 * 3600;

/// Checks how long a presigned URL asks to be valid (`query`: the request's raw query string):
/// SigV4's `X-Amz-Expires` is a number of seconds from 1 to seven days; SigV2's `Expires` (a Unix
/// time) may not be more than seven days after `now_s`. Expiry itself is checked by s3s.
pub fn presigned_expiry(query: Option<&str>, now_s: i64) -> Result<(), Refusal> {
    let Some(query) = query else { return Ok(()) };
    let denied = |why: String| refuse(StatusCode::FORBIDDEN, "AccessDenied", why);
    let param = |name: &str| query.split('&').find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='));
    if param("AWSAccessKeyId").is_some()
        && let Some(until) = param("Expires")
    {
        let until: i64 = until.parse().map_err(|_| denied(format!("Expires {until:?} is not a Unix time")))?;
        if until - now_s > MAX_PRESIGNED_EXPIRY_S {
            return Err(denied(format!(
                "the URL expires {} s from now, over the limit of {MAX_PRESIGNED_EXPIRY_S} s (seven days)",
                until - now_s
            )));
        }
        return Ok(());
    }
    let Some(value) = param("X-Amz-Expires") else {
        return Ok(());
    };
    let secs: i64 = value.parse().map_err(|_| denied(format!("X-Amz-Expires {value:?} is not a number of seconds")))?;
    if secs <= 0 {
        return Err(denied(format!("X-Amz-Expires is {secs}: the URL was never valid")));
    }
    if secs > MAX_PRESIGNED_EXPIRY_S {
        return Err(denied(format!(
            "X-Amz-Expires is {secs} s, over the limit of {MAX_PRESIGNED_EXPIRY_S} s (seven days)"
        )));
    }
    Ok(())
}

pub fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// S3's XML error document.
pub fn error_body(code: &str, message: &str, request_id: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{}</Code><Message>{}</Message><RequestId>{}</RequestId></Error>",
        xml_escape(code),
        xml_escape(message),
        xml_escape(request_id)
    )
}

/// `body` (an XML error document) completed with what S3's error documents carry and it lacks: a
/// `<Message>` after `<Code>` (the code in words, when whoever refused gave none), the
/// `<Resource>` the request addressed, and the `<RequestId>`, before `</Error>`. `None` when
/// there is nothing to change (or `body` is not an error document).
pub fn completed_error(body: &Bytes, request_id: &str, resource: &str) -> Option<Bytes> {
    let text = std::str::from_utf8(body).ok()?;
    let end = text.rfind("</Error>")?;
    let message = if text.contains("<Message>") {
        None
    } else {
        let code_end = text.find("</Code>")? + "</Code>".len();
        let code = text[..code_end - "</Code>".len()].rsplit("<Code>").next()?;
        Some((code_end, code_in_words(code)))
    };
    let resource = (!text.contains("<Resource>")).then_some(resource);
    let request_id = (!text.contains("<RequestId>")).then_some(request_id);
    if message.is_none() && resource.is_none() && request_id.is_none() {
        return None;
    }
    let mut out = String::with_capacity(text.len() + 160);
    let mut from = 0;
    if let Some((at, words)) = &message {
        out.push_str(&text[..*at]);
        out.push_str("<Message>");
        out.push_str(&xml_escape(words));
        out.push_str("</Message>");
        from = *at;
    }
    out.push_str(&text[from..end]);
    for (name, value) in [("Resource", resource), ("RequestId", request_id)] {
        if let Some(v) = value {
            out.push_str(&format!("<{name}>{}</{name}>", xml_escape(v)));
        }
    }
    out.push_str(&text[end..]);
    Some(Bytes::from(out))
}

/// An error code as lower-case words (`InvalidBucketName` → "invalid bucket name"): the message
/// of a refusal that came without one.
fn code_in_words(code: &str) -> String {
    let mut words = String::with_capacity(code.len() + 8);
    for (i, c) in code.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            words.push(' ');
        }
        words.push(c.to_ascii_lowercase());
    }
    words
}

/// Whether a request is GetObjectAttributes (`GET ...?attributes`).
pub fn is_get_attributes(method: &hyper::Method, query: Option<&str>) -> bool {
    method == hyper::Method::GET
        && query.is_some_and(|q| q.split('&').any(|p| p == "attributes" || p.starts_with("attributes=")))
}

/// A GetObjectAttributes document with its `<ETag>` unquoted, as S3 answers it; `None` when
/// there is nothing to change.
pub fn unquoted_attributes_etag(body: &Bytes) -> Option<Bytes> {
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find("<ETag>\"")? + "<ETag>".len();
    let end = start + text[start..].find("\"</ETag>")?;
    let mut out = String::with_capacity(text.len());
    out.push_str(&text[..start]);
    out.push_str(&text[start + 1..end]);
    out.push_str(&text[end + 1..]);
    Some(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_etags_lose_their_quotes() {
        let body = Bytes::from_static(b"<GetObjectAttributesResponse><ETag>\"abc\"</ETag><ObjectSize>3</ObjectSize></GetObjectAttributesResponse>");
        let out = unquoted_attributes_etag(&body).expect("changed");
        assert_eq!(
            &out[..],
            &b"<GetObjectAttributesResponse><ETag>abc</ETag><ObjectSize>3</ObjectSize></GetObjectAttributesResponse>"[..]
        );
        assert_eq!(unquoted_attributes_etag(&out), None);
        assert!(is_get_attributes(&hyper::Method::GET, Some("attributes")));
        assert!(!is_get_attributes(&hyper::Method::GET, Some("acl")));
    }

    fn v2(date: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(hyper::header::AUTHORIZATION, "AWS AKID:c2lnbmF0dXJl".parse().unwrap());
        if let Some(d) = date {
            h.insert("x-amz-date", d.parse().unwrap());
        }
        h
    }

    #[test]
    fn sigv2_dates_are_named_before_signatures() {
        let now = 1_795_000_000; // 2026-11
        let code = |h: &HeaderMap| sigv2_date(h, now).err().map(|r| r.code);
        assert_eq!(code(&v2(Some(""))), Some("AccessDenied"));
        assert_eq!(code(&v2(Some("Bad Date"))), Some("AccessDenied"));
        assert_eq!(code(&v2(Some("Tue, 07 Jul 1950 21:53:04 GMT"))), Some("AccessDenied"));
        assert_eq!(code(&v2(Some("Tue, 07 Jul 9999 21:53:04 GMT"))), Some("RequestTimeTooSkewed"));
        assert_eq!(code(&v2(Some("Tue, 07 Jul 2010 21:53:04 GMT"))), Some("RequestTimeTooSkewed"));
        assert_eq!(code(&v2(None)), Some("AccessDenied"));
        let fine = Timestamp::from(std::time::UNIX_EPOCH + std::time::Duration::from_secs(now as u64 + 60));
        let mut text = Vec::new();
        fine.format(TimestampFormat::HttpDate, &mut text).unwrap();
        assert_eq!(code(&v2(Some(std::str::from_utf8(&text).unwrap()))), None);
        // SigV4 and anonymous requests are not this check's business.
        let mut v4 = HeaderMap::new();
        v4.insert(hyper::header::AUTHORIZATION, "AWS4-HMAC-SHA256 Credential=x".parse().unwrap());
        assert_eq!(code(&v4), None);
        assert_eq!(code(&HeaderMap::new()), None);
    }

    #[test]
    fn presigned_urls_are_valid_for_one_second_to_seven_days() {
        let now = 1_795_000_000;
        let code = |q: &str| presigned_expiry(Some(q), now).err().map(|r| r.code);
        assert_eq!(code("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires=100000&X-Amz-Signature=ab"), None);
        assert_eq!(code("X-Amz-Expires=604800"), None);
        assert_eq!(code("X-Amz-Expires=609901"), Some("AccessDenied"));
        assert_eq!(code("X-Amz-Expires=-7"), Some("AccessDenied"));
        assert_eq!(code("X-Amz-Expires=0"), Some("AccessDenied"));
        assert_eq!(code("X-Amz-Expires=soon"), Some("AccessDenied"));
        assert_eq!(code("list-type=2"), None);
        assert_eq!(presigned_expiry(None, now), Ok(()));
        let v2 = |until: i64| format!("AWSAccessKeyId=A&Signature=x&Expires={until}");
        assert_eq!(code(&v2(now + 3600)), None);
        assert_eq!(code(&v2(now + 604_800)), None);
        assert_eq!(code(&v2(now + 604_801)), Some("AccessDenied"));
        assert_eq!(code(&v2(now - 10)), None, "an expired V2 URL is s3s's to refuse");
    }

    #[test]
    fn error_bodies_get_message_resource_and_request_id_once() {
        let body = Bytes::from_static(b"<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code></Error>");
        let got = completed_error(&body, "ABC", "/b/k&1").unwrap();
        assert_eq!(
            std::str::from_utf8(&got).unwrap(),
            "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>no such key</Message>\
             <Resource>/b/k&amp;1</Resource><RequestId>ABC</RequestId></Error>"
        );
        assert_eq!(completed_error(&got, "ABC", "/b/k&1"), None, "a complete body is left alone");
        // A message given is kept; only what is missing is added.
        let body = Bytes::from_static(
            b"<Error><Code>AccessDenied</Code><Message>no</Message><RequestId>X</RequestId></Error>",
        );
        let got = completed_error(&body, "ABC", "/b").unwrap();
        assert_eq!(
            std::str::from_utf8(&got).unwrap(),
            "<Error><Code>AccessDenied</Code><Message>no</Message><RequestId>X</RequestId><Resource>/b</Resource></Error>"
        );
        assert_eq!(completed_error(&Bytes::from_static(b"not xml"), "ABC", "/b"), None);
        assert_eq!(code_in_words("InvalidBucketName"), "invalid bucket name");
    }
}
