//! STARTTLS at the protocol level, with a client that sends what real clients never do: a
//! server with a TLS identity answers nothing but STARTTLS in clear, and the option phase over
//! TLS starts from nothing (what nbdkit's CVE-2021-3716 got wrong).

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use shoal_nbd::proto::*;
use shoal_nbd::{BlockDevice, DeviceError, Export, Exports, Extent, Limits};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

/// A RAM device of fixed size.
struct Ram(Mutex<Vec<u8>>);

impl BlockDevice for Ram {
    fn size_bytes(&self) -> u64 {
        self.0.lock().unwrap().len() as u64
    }
    fn read_only(&self) -> bool {
        false
    }
    async fn read(&self, offset: u64, len_bytes: u32) -> Result<bytes::Bytes, DeviceError> {
        let d = self.0.lock().unwrap();
        Ok(bytes::Bytes::copy_from_slice(&d[offset as usize..offset as usize + len_bytes as usize]))
    }
    async fn write(&self, offset: u64, data: Vec<u8>) -> Result<(), DeviceError> {
        self.0.lock().unwrap()[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
        Ok(())
    }
    async fn zero(&self, offset: u64, len_bytes: u64) -> Result<(), DeviceError> {
        self.0.lock().unwrap()[offset as usize..(offset + len_bytes) as usize].fill(0);
        Ok(())
    }
    async fn flush(&self) -> Result<(), DeviceError> {
        Ok(())
    }
    async fn allocation(&self, offset: u64, len_bytes: u64) -> Result<Vec<Extent>, DeviceError> {
        Ok(vec![Extent { offset, len_bytes, hole: false }])
    }
}

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

async fn send_option<S: AsyncWrite + Unpin>(s: &mut S, option: u32, data: &[u8]) {
    let mut out = Vec::new();
    out.extend_from_slice(&IHAVEOPT.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    s.write_all(&out).await.unwrap();
}

/// Reads one option reply: (option, reply type, data).
async fn option_reply<S: AsyncRead + Unpin>(s: &mut S) -> (u32, u32, Vec<u8>) {
    assert_eq!(s.read_u64().await.unwrap(), OPTION_REPLY_MAGIC);
    let option = s.read_u32().await.unwrap();
    let kind = s.read_u32().await.unwrap();
    let mut data = vec![0u8; s.read_u32().await.unwrap() as usize];
    s.read_exact(&mut data).await.unwrap();
    (option, kind, data)
}

/// GO for `name` with no information requests; returns the replies up to the final one.
async fn go<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, name: &str) -> Vec<(u32, u32, Vec<u8>)> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&0u16.to_be_bytes());
    send_option(s, OPT_GO, &d).await;
    let mut replies = Vec::new();
    loop {
        let r = option_reply(s).await;
        let last = r.1 != REP_INFO;
        replies.push(r);
        if last {
            return replies;
        }
    }
}

fn server(tls: bool, dir: &Path) -> Arc<Exports<Ram>> {
    let tls = tls.then(|| {
        let (cert, key) = identity(dir);
        shoal_net::tls::acceptor(&shoal_net::tls::TlsFiles { cert, key }, &[]).unwrap()
    });
    let device = Arc::new(Ram(Mutex::new((0..1u32 << 20).map(|i| (i % 251) as u8).collect())));
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

/// Connects a client to a fresh connection of `exports`; reads the greeting, sends the flags.
async fn connect(exports: &Arc<Exports<Ram>>) -> tokio::io::DuplexStream {
    let (mut client, server_side) = tokio::io::duplex(1 << 20);
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let exports = exports.clone();
    tokio::spawn(async move {
        shoal_nbd::serve_connection(exports, server_side, "test".into(), stop).await;
        drop(stop_tx);
    });
    assert_eq!(client.read_u64().await.unwrap(), NBDMAGIC);
    assert_eq!(client.read_u64().await.unwrap(), IHAVEOPT);
    let _flags = client.read_u16().await.unwrap();
    client.write_u32(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).await.unwrap();
    client
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
