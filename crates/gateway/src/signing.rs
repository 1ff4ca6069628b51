//! The keyed hashes of AWS signatures, shared by the POST-form checks (`s3post.rs`) and the load
//! generator's SigV4 signer: HMAC-SHA256, SigV4's derived signing key, and SigV2's HMAC-SHA1.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// HMAC-SHA256 of `data` under `key`.
pub fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC accepts keys of any length.
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// HMAC-SHA1 of `data` under `key` (SigV2).
pub fn hmac_sha1(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<sha1::Sha1>::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// SigV4's signing key for `secret` on `date` (`YYYYMMDD`) in `region` for `service`.
pub fn sigv4_key(secret: &str, date: &str, region: &str, service: &str) -> Vec<u8> {
    let mut key = hmac_sha256(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    for part in [region, service, "aws4_request"] {
        key = hmac_sha256(&key, part.as_bytes());
    }
    key
}

/// Whether two signatures are equal, in time that does not depend on where they differ.
pub fn same_signature(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::hex;

    #[test]
    fn keyed_hashes_match_published_vectors() {
        // RFC 4231 test case 2 and RFC 2202 test case 2.
        assert_eq!(
            hex(&hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex(&hmac_sha1(b"Jefe", b"what do ya want for nothing?")),
            "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"
        );
        // AWS's documented example of a derived signing key.
        assert_eq!(
            hex(&sigv4_key("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20120215", "us-east-1", "iam")),
            "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"
        );
        assert!(same_signature(b"abc", b"abc") && !same_signature(b"abc", b"abd") && !same_signature(b"ab", b"abc"));
    }
}
