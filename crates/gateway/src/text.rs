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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_round_trip_and_escape_what_s3_escapes() {
        assert_eq!(hex(&[0, 0xab, 0xff]), "00abff");
        assert_eq!(hex_decode("00abff"), Some(vec![0, 0xab, 0xff]));
        assert_eq!(hex_decode("abc"), None);
        assert_eq!(hex_decode("zz"), None);
        assert_eq!(uri_encode("a b/c~d+é"), "a%20b/c~d%2B%C3%A9");
    }
}
