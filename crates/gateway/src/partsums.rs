//! The checksum of a multipart object from its parts' checksums, pure: S3's `COMPOSITE` type
//! (the algorithm over the concatenated binary part checksums, shown with `-N`) and its
//! `FULL_OBJECT` type for CRCs (the CRC of the whole object, combined from the parts' CRCs and
//! lengths without reading a byte, as zlib's `crc32_combine` does).

use base64_simd::STANDARD as B64;
use sha2::Digest as _;

/// How a multipart object's checksum covers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SumKind {
    Composite,
    FullObject,
}

/// A reflected CRC with all-ones initial value and final xor (CRC-32, CRC-32C, CRC-64/NVME).
struct Crc {
    /// The reflected polynomial.
    poly: u64,
    width: u32,
}

const CRC32: Crc = Crc { poly: 0xEDB8_8320, width: 32 };
const CRC32C: Crc = Crc { poly: 0x82F6_3B78, width: 32 };
const CRC64NVME: Crc = Crc { poly: 0x9A6C_9329_AC4B_C9B5, width: 64 };

impl Crc {
    /// The bit standing for x^0.
    fn one(&self) -> u64 {
        1u64 << (self.width - 1)
    }

    /// a(x) * b(x) modulo the polynomial (reflected representation).
    fn mult(&self, a: u64, mut b: u64) -> u64 {
        let mut m = self.one();
        let mut p = 0u64;
        // Each of the width bits of `a` is visited once: the loop is bounded by the width.
        for _ in 0..self.width {
            if a & m != 0 {
                p ^= b;
            }
            m >>= 1;
            b = if b & 1 != 0 { (b >> 1) ^ self.poly } else { b >> 1 };
        }
        p
    }

    /// x^(8 * bytes) modulo the polynomial, by squaring.
    fn x_pow_bytes(&self, bytes: u64) -> u64 {
        let mut result = self.one();
        // x^(2^k), starting at x^8 (k = 3).
        let mut square = self.one() >> 1;
        for _ in 0..3 {
            square = self.mult(square, square);
        }
        let mut n = bytes;
        while n != 0 {
            if n & 1 != 0 {
                result = self.mult(square, result);
            }
            square = self.mult(square, square);
            n >>= 1;
        }
        result
    }

    /// The CRC of A then B, from CRC(A), CRC(B) and B's length.
    fn combine(&self, crc_a: u64, crc_b: u64, len_b: u64) -> u64 {
        self.mult(self.x_pow_bytes(len_b), crc_a) ^ crc_b
    }
}

fn crc_of(algorithm: &str) -> Option<&'static Crc> {
    match algorithm {
        "CRC32" => Some(&CRC32),
        "CRC32C" => Some(&CRC32C),
        "CRC64NVME" => Some(&CRC64NVME),
        _ => None,
    }
}

/// The kind an upload gets when its creation names `asked` (or none) for `algorithm`, or why
/// the pair is refused.
pub fn kind_for(algorithm: &str, asked: Option<&str>) -> Result<SumKind, String> {
    match (asked, crc_of(algorithm).is_some()) {
        (None, _) if algorithm == "CRC64NVME" => Ok(SumKind::FullObject),
        (None, _) | (Some("COMPOSITE"), _) if algorithm != "CRC64NVME" => Ok(SumKind::Composite),
        (Some("FULL_OBJECT"), true) => Ok(SumKind::FullObject),
        (Some(other), _) => Err(format!("checksum type {other} is not available for {algorithm}")),
        (None, _) => Err(format!("{algorithm} has no checksum type")),
    }
}

/// The object checksum of parts with checksums `parts` (base64, and each part's length), of
/// `kind` under `algorithm`; `None` when a part's checksum is not the algorithm's.
pub fn combine(algorithm: &str, kind: SumKind, parts: &[(&str, u64)]) -> Option<String> {
    let binary: Vec<Vec<u8>> = parts.iter().map(|(b64, _)| B64.decode_to_vec(b64).ok()).collect::<Option<_>>()?;
    match kind {
        SumKind::FullObject => {
            let crc = crc_of(algorithm)?;
            let bytes = (crc.width / 8) as usize;
            let mut total: Option<u64> = None;
            for (sum, (_, len)) in binary.iter().zip(parts) {
                if sum.len() != bytes {
                    return None;
                }
                let v = sum.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
                total = Some(match total {
                    None => v,
                    Some(t) => crc.combine(t, v, *len),
                });
            }
            let t = total?;
            Some(B64.encode_to_string(&t.to_be_bytes()[8 - bytes..]))
        }
        SumKind::Composite => {
            let joined: Vec<u8> = binary.concat();
            let digest: Vec<u8> = match algorithm {
                "SHA256" => sha2::Sha256::digest(&joined).to_vec(),
                "SHA1" => sha1_of(&joined)?,
                "CRC32" | "CRC32C" => crc32_of(algorithm, &joined)?,
                _ => return None,
            };
            Some(format!("{}-{}", B64.encode_to_string(digest), parts.len()))
        }
    }
}

fn sha1_of(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut h = s3s::checksum::ChecksumHasher { sha1: Some(Default::default()), ..Default::default() };
    h.update(bytes);
    B64.decode_to_vec(h.finalize().checksum_sha1?).ok()
}

fn crc32_of(algorithm: &str, bytes: &[u8]) -> Option<Vec<u8>> {
    let mut h = s3s::checksum::ChecksumHasher::default();
    if algorithm == "CRC32" {
        h.crc32 = Some(Default::default());
    } else {
        h.crc32c = Some(Default::default());
    }
    h.update(bytes);
    let out = h.finalize();
    B64.decode_to_vec(out.checksum_crc32.or(out.checksum_crc32c)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sums(bytes: &[u8]) -> s3s::dto::Checksum {
        let mut h = s3s::checksum::ChecksumHasher {
            crc32: Some(Default::default()),
            crc32c: Some(Default::default()),
            crc64nvme: Some(Default::default()),
            ..Default::default()
        };
        h.update(bytes);
        h.finalize()
    }

    #[test]
    fn combined_crcs_equal_the_crc_of_the_whole() {
        let a: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        let b: Vec<u8> = (0..777u32).map(|i| (i * 13 % 241) as u8).collect();
        let c = b"tail".to_vec();
        let whole = sums(&[a.clone(), b.clone(), c.clone()].concat());
        let (sa, sb, sc) = (sums(&a), sums(&b), sums(&c));
        let lens = [a.len() as u64, b.len() as u64, c.len() as u64];
        let pick = |s: &s3s::dto::Checksum, alg: &str| {
            match alg {
                "CRC32" => s.checksum_crc32.clone(),
                "CRC32C" => s.checksum_crc32c.clone(),
                _ => s.checksum_crc64nvme.clone(),
            }
            .expect("computed")
        };
        for alg in ["CRC32", "CRC32C", "CRC64NVME"] {
            let parts = [pick(&sa, alg), pick(&sb, alg), pick(&sc, alg)];
            let listed: Vec<(&str, u64)> = parts.iter().map(String::as_str).zip(lens).collect();
            assert_eq!(combine(alg, SumKind::FullObject, &listed), Some(pick(&whole, alg)), "{alg}");
        }
    }

    #[test]
    fn composite_sums_match_s3s_published_values() {
        // ceph/s3-tests' three 5 MiB parts of 'A', 'B' and 'C' (SHA-256, COMPOSITE).
        let parts = [
            ("275VF5loJr1YYawit0XSHREhkFXYkkPKGuoK0x9VKxI=", 5 << 20),
            ("mrHwOfjTL5Zwfj74F05HOQGLdUb7E5szdCbxgUSq6NM=", 5 << 20),
            ("Vw7oB/nKQ5xWb3hNgbyfkvDiivl+U+/Dft48nfJfDow=", 5 << 20),
        ];
        assert_eq!(
            combine("SHA256", SumKind::Composite, &parts).as_deref(),
            Some("uWBwpe1dxI4Vw8Gf0X9ynOdw/SS6VBzfWm9giiv1sf4=-3")
        );
    }

    #[test]
    fn kinds_follow_the_algorithm() {
        assert_eq!(kind_for("SHA256", None), Ok(SumKind::Composite));
        assert_eq!(kind_for("CRC64NVME", None), Ok(SumKind::FullObject));
        assert_eq!(kind_for("CRC32", Some("FULL_OBJECT")), Ok(SumKind::FullObject));
        assert!(kind_for("SHA1", Some("FULL_OBJECT")).is_err());
        assert!(kind_for("CRC64NVME", Some("COMPOSITE")).is_err());
    }
}
