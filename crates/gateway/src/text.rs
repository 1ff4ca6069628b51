//! Text encodings the gateway and its load generator share: lower-case hex and S3's URI
//! encoding.

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The bytes of hex text, or `None` if it is not hex.
pub fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// S3's URI encoding (SigV4 canonical paths, `encoding-type=url`): every byte but unreserved
/// characters and `/` percent-encoded.
pub fn uri_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes percent-escapes (and `+` as a space, as query strings write it); invalid escapes are
/// kept as they are, and invalid UTF-8 is replaced.
pub fn uri_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => match s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok()) {
                Some(v) => {
                    out.push(v);
                    i += 3;
                    continue;
                }
                None => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `s` with XML's character references replaced by the characters they name (the five named
/// entities and numeric references; an unknown or malformed reference is kept as it is).
pub fn xml_unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let Some(end) = rest.find(';').filter(|e| *e <= 12) else {
            out.push('&');
            rest = &rest[1..];
            continue;
        };
        let name = &rest[1..end];
        let c = match name {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => name
                .strip_prefix("#x")
                .map(|h| u32::from_str_radix(h, 16))
                .or_else(|| name.strip_prefix('#').map(str::parse::<u32>))
                .and_then(Result::ok)
                .and_then(char::from_u32),
        };
        match c {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_references_are_replaced_and_anything_else_kept() {
        assert_eq!(xml_unescape("a&amp;b&lt;c&gt;&quot;&apos;"), "a&b<c>\"'");
        assert_eq!(xml_unescape("&#65;&#x42;&#x1F600;"), "AB\u{1F600}");
        assert_eq!(xml_unescape("& &unknown; &#xZZ; tail&"), "& &unknown; &#xZZ; tail&");
        assert_eq!(xml_unescape("plain/key"), "plain/key");
    }

    #[test]
    fn encodings_round_trip_and_escape_what_s3_escapes() {
        assert_eq!(hex(&[0, 0xab, 0xff]), "00abff");
        assert_eq!(hex_decode("00abff"), Some(vec![0, 0xab, 0xff]));
        assert_eq!(hex_decode("abc"), None);
        assert_eq!(hex_decode("zz"), None);
        assert_eq!(uri_encode("a b/c~d+é"), "a%20b/c~d%2B%C3%A9");
        assert_eq!(uri_decode("a%20b/c~d%2B%C3%A9+x%"), "a b/c~d+é x%");
        assert_eq!(uri_decode("%zz%4"), "%zz%4");
    }
}
