//! AWS Signature Version 4 for the load generator's requests: header auth with an unsigned
//! payload, as S3 clients send over TLS-less loopback benchmarks.

use sha2::{Digest, Sha256};

use crate::signing::{hmac_sha256, sigv4_key};
use crate::text::{hex, uri_encode};

/// `YYYYMMDDTHHMMSSZ` for `unix_s` seconds since the epoch (UTC).
pub fn amz_date(unix_s: u64) -> String {
    let days = (unix_s / 86_400) as i64;
    let secs = unix_s % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z", secs / 3600, secs / 60 % 60, secs % 60)
}

/// Who signs, and for which region.
pub struct Signer<'a> {
    pub access: &'a str,
    pub secret: &'a str,
    pub region: &'a str,
}

/// The headers to add to a request: `x-amz-date`, `x-amz-content-sha256` and `Authorization`.
/// `query` is the canonical (sorted, encoded) query string.
pub fn sign(
    method: &str,
    host: &str,
    path: &str,
    query: &str,
    signer: &Signer<'_>,
    unix_s: u64,
) -> Vec<(String, String)> {
    let Signer { access, secret, region } = *signer;
    let date_time = amz_date(unix_s);
    let date = &date_time[..8];
    let payload = "UNSIGNED-PAYLOAD";
    let canonical = format!(
        "{method}\n{}\n{query}\nhost:{host}\nx-amz-content-sha256:{payload}\nx-amz-date:{date_time}\n\nhost;x-amz-content-sha256;x-amz-date\n{payload}",
        uri_encode(path)
    );
    let scope = format!("{date}/{region}/s3/aws4_request");
    let to_sign = format!("AWS4-HMAC-SHA256\n{date_time}\n{scope}\n{}", hex(&Sha256::digest(canonical.as_bytes())));
    let signature = hex(&hmac_sha256(&sigv4_key(secret, date, region, "s3"), to_sign.as_bytes()));
    vec![
        ("x-amz-date".into(), date_time.clone()),
        ("x-amz-content-sha256".into(), payload.into()),
        (
            "authorization".into(),
            format!(
                "AWS4-HMAC-SHA256 Credential={access}/{scope}, SignedHeaders=host;x-amz-content-sha256;x-amz-date, \
                 Signature={signature}"
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(amz_date(0), "19700101T000000Z");
        assert_eq!(amz_date(951_782_400), "20000229T000000Z");
        assert_eq!(amz_date(1_798_761_599), "20261231T235959Z");
    }

    /// Signatures are deterministic and change with the path and the secret; that a server
    /// accepts them is proven end to end by the load generator's test against the gateway.
    #[test]
    fn signatures_are_stable_and_depend_on_every_input() {
        let one = Signer { access: "AK", secret: "SK", region: "us-east-1" };
        let two = Signer { access: "AK", secret: "SK2", region: "us-east-1" };
        let a = sign("GET", "h:1", "/b/k", "", &one, 1_700_000_000);
        let b = sign("GET", "h:1", "/b/k2", "", &one, 1_700_000_000);
        let c = sign("GET", "h:1", "/b/k", "", &two, 1_700_000_000);
        assert_eq!(a, sign("GET", "h:1", "/b/k", "", &one, 1_700_000_000));
        assert_ne!(a[2], b[2]);
        assert_ne!(a[2], c[2]);
        assert!(a[2].1.starts_with("AWS4-HMAC-SHA256 Credential=AK/20231114/us-east-1/s3/aws4_request"));
    }
}
