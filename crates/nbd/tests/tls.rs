//! STARTTLS at the protocol level, with a client that sends what real clients never do: a
//! server with a TLS identity answers nothing but STARTTLS in clear, and the option phase over
//! TLS starts from nothing (what nbdkit's CVE-2021-3716 got wrong).

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use common::{Ram, connect, go, option_reply, send_option};
use shoal_nbd::proto::*;
use shoal_nbd::{Export, Exports, Limits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

fn identity(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("running openssl");
    assert!(made.status.success(), "openssl: {}", String::from_utf8_lossy(&made.stderr));
    (cert, key)
}

fn server(tls: bool, dir: &Path) -> Arc<Exports<Ram>> {
    let tls = tls.then(|| {
        let (cert, key) = identity(dir);
        shoal_net::tls::acceptor(&shoal_net::tls::TlsFiles { cert, key }, &[]).unwrap()
    });
    let device = Ram::new(1 << 20, false, |i| (i % 251) as u8);
    let export = Export { name: "disk".into(), description: "a RAM disk".into(), device };
    Arc::new(Exports { exports: vec![export], limits: Limits::default(), tls })
}

fn connector(cert: &Path) -> tokio_rustls::TlsConnector {
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(cert).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

#[tokio::test]
async fn a_tls_server_serves_nothing_in_clear_and_starts_over_after_starttls() {
    let dir = tempfile::tempdir().unwrap();
    let exports = server(true, dir.path());

    // In clear only STARTTLS is served: a listing, structured replies and GO are refused with
    // TLS_REQD, and STARTTLS with data is invalid.
    let mut c = connect(&exports).await;
    send_option(&mut c, OPT_LIST, &[]).await;
    assert_eq!(option_reply(&mut c).await.1, REP_ERR_TLS_REQD);
    send_option(&mut c, OPT_STRUCTURED_REPLY, &[]).await;
    assert_eq!(option_reply(&mut c).await.1, REP_ERR_TLS_REQD);
    assert_eq!(go(&mut c, "disk").await.last().unwrap().1, REP_ERR_TLS_REQD);
    send_option(&mut c, OPT_STARTTLS, b"junk").await;
    assert_eq!(option_reply(&mut c).await.1, REP_ERR_INVALID);

    // STARTTLS, the TLS handshake, then a second STARTTLS is invalid.
    send_option(&mut c, OPT_STARTTLS, &[]).await;
    assert_eq!(option_reply(&mut c).await, (OPT_STARTTLS, REP_ACK, vec![]));
    let name = ServerName::try_from("localhost").unwrap();
    let mut t = connector(&dir.path().join("cert.pem")).connect(name, c).await.expect("TLS handshake");
    send_option(&mut t, OPT_STARTTLS, &[]).await;
    assert_eq!(option_reply(&mut t).await.1, REP_ERR_INVALID);

    // Over TLS the export is served, and with simple replies: structured replies were asked
    // for (and refused) in clear only, and nothing from then carries over.
    let replies = go(&mut t, "disk").await;
    assert_eq!(replies.last().unwrap().1, REP_ACK, "{replies:?}");
    let mut req = Vec::new();
    req.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
    req.extend_from_slice(&0u16.to_be_bytes());
    req.extend_from_slice(&CMD_READ.to_be_bytes());
    req.extend_from_slice(&7u64.to_be_bytes());
    req.extend_from_slice(&1000u64.to_be_bytes());
    req.extend_from_slice(&16u32.to_be_bytes());
    t.write_all(&req).await.unwrap();
    assert_eq!(t.read_u32().await.unwrap(), SIMPLE_REPLY_MAGIC, "a structured reply leaked through STARTTLS");
    assert_eq!(t.read_u32().await.unwrap(), 0);
    assert_eq!(t.read_u64().await.unwrap(), 7);
    let mut data = [0u8; 16];
    t.read_exact(&mut data).await.unwrap();
    let want: Vec<u8> = (1000..1016u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(&data[..], &want[..]);

    // EXPORT_NAME, which cannot be refused, ends a connection that has not started TLS.
    let mut c = connect(&exports).await;
    send_option(&mut c, OPT_EXPORT_NAME, b"disk").await;
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "the server answered EXPORT_NAME in clear: {rest:?}");

    // Without an identity, STARTTLS is refused by policy and the export is served in clear.
    let exports = server(false, dir.path());
    let mut c = connect(&exports).await;
    send_option(&mut c, OPT_STARTTLS, &[]).await;
    assert_eq!(option_reply(&mut c).await.1, REP_ERR_POLICY);
    assert_eq!(go(&mut c, "disk").await.last().unwrap().1, REP_ACK);
}
