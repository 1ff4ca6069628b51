//! TLS identities of the servers that speak standard protocols (the S3 gateway's HTTPS, the NBD
//! server's STARTTLS): the certificate chain and private key given with `--tls-cert` and
//! `--tls-key`, read once at start into a rustls acceptor.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::{self, ServerConfig};

/// Why an identity cannot be served with; the message names the file and the problem.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsError(pub String);

/// The PEM files of a TLS identity.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The leaf's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Most bytes a certificate or key file may have: PEM identities are a few KiB, and a bounded
/// read keeps a wrong path (a device, a huge file) from being swallowed whole.
const MAX_PEM_BYTES: u64 = 1 << 20;

/// Reads the identity and builds an acceptor that speaks TLS 1.2 and 1.3 and offers the
/// `alpn` protocols (none: no ALPN). Every failure names the file and what is wrong with it.
pub fn acceptor(files: &TlsFiles, alpn: &[&[u8]]) -> Result<TlsAcceptor, TlsError> {
    let cert_pem = read_pem(&files.cert, "certificate")?;
    let key_pem = read_pem(&files.key, "private key")?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| bad(&files.cert, &format!("is not a PEM certificate chain: {e}")))?;
    if certs.is_empty() {
        return Err(bad(&files.cert, "holds no CERTIFICATE block"));
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| bad(&files.key, &format!("holds no usable private key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(format!("TLS setup: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            TlsError(format!("{} and {} are not a usable identity: {e}", files.cert.display(), files.key.display()))
        })?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn read_pem(path: &Path, what: &str) -> Result<Vec<u8>, TlsError> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| bad(path, &format!("cannot be opened as the TLS {what}: {e}")))?;
    let mut bytes = Vec::new();
    file.take(MAX_PEM_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| bad(path, &format!("cannot be read as the TLS {what}: {e}")))?;
    if bytes.len() as u64 > MAX_PEM_BYTES {
        return Err(bad(path, &format!("is larger than {MAX_PEM_BYTES} bytes: not a TLS {what}")));
    }
    Ok(bytes)
}

fn bad(path: &Path, what: &str) -> TlsError {
    TlsError(format!("{} {what}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn errors_name_the_file_and_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let missing = TlsFiles { cert: dir.path().join("nope.pem"), key: dir.path().join("nope.key") };
        let e = acceptor(&missing, &[]).err().unwrap().to_string();
        assert!(e.contains("nope.pem") && e.contains("cannot be opened"), "{e}");

        let empty = write(dir.path(), "empty.pem", "not pem at all\n");
        let files = TlsFiles { cert: empty.clone(), key: empty };
        let e = acceptor(&files, &[]).err().unwrap().to_string();
        assert!(e.contains("empty.pem") && e.contains("no CERTIFICATE"), "{e}");
    }
}
