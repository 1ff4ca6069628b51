//! A protocol-level NBD client for the server's tests: it sends exactly the bytes a test names,
//! including what real clients never send, over an in-memory stream to one server connection.

#![allow(dead_code)] // Each test file uses its own share of these helpers.

use std::sync::{Arc, Mutex};

use shoal_nbd::proto::*;
use shoal_nbd::{BlockDevice, DeviceError, Export, Exports, Extent, Limits};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};

/// Bytes per block of [`Ram`]'s allocation map: a block of zeros is reported as a hole.
pub const RAM_BLOCK_BYTES: u64 = 4096;

/// A RAM device of fixed size, whose all-zero blocks are reported as holes.
pub struct Ram {
    bytes: Mutex<Vec<u8>>,
    read_only: bool,
}

impl Ram {
    /// A device of `size_bytes` holding `fill(i)` at byte `i`.
    pub fn new(size_bytes: usize, read_only: bool, fill: impl Fn(usize) -> u8) -> Arc<Ram> {
        Arc::new(Ram { bytes: Mutex::new((0..size_bytes).map(fill).collect()), read_only })
    }

    pub fn bytes(&self, offset: usize, len_bytes: usize) -> Vec<u8> {
        self.bytes.lock().unwrap()[offset..offset + len_bytes].to_vec()
    }
}

impl BlockDevice for Ram {
    fn size_bytes(&self) -> u64 {
        self.bytes.lock().unwrap().len() as u64
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
    async fn read(&self, offset: u64, len_bytes: u32) -> Result<bytes::Bytes, DeviceError> {
        let d = self.bytes.lock().unwrap();
        Ok(bytes::Bytes::copy_from_slice(&d[offset as usize..offset as usize + len_bytes as usize]))
    }
    async fn write(&self, offset: u64, data: Vec<u8>) -> Result<(), DeviceError> {
        self.bytes.lock().unwrap()[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
        Ok(())
    }
    async fn zero(&self, offset: u64, len_bytes: u64) -> Result<(), DeviceError> {
        self.bytes.lock().unwrap()[offset as usize..(offset + len_bytes) as usize].fill(0);
        Ok(())
    }
    async fn flush(&self) -> Result<(), DeviceError> {
        Ok(())
    }
    async fn allocation(&self, offset: u64, len_bytes: u64) -> Result<Vec<Extent>, DeviceError> {
        let d = self.bytes.lock().unwrap();
        let mut runs: Vec<Extent> = Vec::new();
        let mut at = offset;
        while at < offset + len_bytes {
            let end = ((at / RAM_BLOCK_BYTES + 1) * RAM_BLOCK_BYTES).min(offset + len_bytes);
            let hole = d[at as usize..end as usize].iter().all(|&b| b == 0);
            match runs.last_mut() {
                Some(r) if r.hole == hole => r.len_bytes += end - at,
                _ => runs.push(Extent { offset: at, len_bytes: end - at, hole }),
            }
            at = end;
        }
        Ok(runs)
    }
}

/// Exports of the devices given, by name, with the default limits and no TLS.
pub fn exports(devices: Vec<(&str, Arc<Ram>)>) -> Arc<Exports<Ram>> {
    let exports = devices
        .into_iter()
        .map(|(name, device)| Export { name: name.into(), description: format!("RAM disk {name}"), device })
        .collect();
    Arc::new(Exports { exports, limits: Limits::default(), tls: None })
}

/// Connects a client to a fresh connection of `exports`; reads the greeting, sends the flags.
pub async fn connect(exports: &Arc<Exports<Ram>>) -> DuplexStream {
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

pub async fn send_option<S: AsyncWrite + Unpin>(s: &mut S, option: u32, data: &[u8]) {
    let mut out = Vec::new();
    out.extend_from_slice(&IHAVEOPT.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    s.write_all(&out).await.unwrap();
}

/// Reads one option reply: (option, reply type, data).
pub async fn option_reply<S: AsyncRead + Unpin>(s: &mut S) -> (u32, u32, Vec<u8>) {
    assert_eq!(s.read_u64().await.unwrap(), OPTION_REPLY_MAGIC);
    let option = s.read_u32().await.unwrap();
    let kind = s.read_u32().await.unwrap();
    let mut data = vec![0u8; s.read_u32().await.unwrap() as usize];
    s.read_exact(&mut data).await.unwrap();
    (option, kind, data)
}

/// Sends `option` and reads its replies up to the final one (ACK or an error).
pub async fn option_replies<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    option: u32,
    data: &[u8],
) -> Vec<(u32, u32, Vec<u8>)> {
    send_option(s, option, data).await;
    let mut replies = Vec::new();
    loop {
        let r = option_reply(s).await;
        let last = r.1 == REP_ACK || r.1 & (1 << 31) != 0;
        replies.push(r);
        if last {
            return replies;
        }
    }
}

/// GO for `name` with no information requests; returns the replies up to the final one.
pub async fn go<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, name: &str) -> Vec<(u32, u32, Vec<u8>)> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&0u16.to_be_bytes());
    option_replies(s, OPT_GO, &d).await
}

/// The transmission flags in the `NBD_INFO_EXPORT` reply among `replies`.
pub fn export_flags(replies: &[(u32, u32, Vec<u8>)]) -> u16 {
    let info = replies
        .iter()
        .find(|r| r.1 == REP_INFO && r.2.len() == 12 && r.2[..2] == INFO_EXPORT.to_be_bytes())
        .expect("an NBD_INFO_EXPORT reply");
    u16::from_be_bytes([info.2[10], info.2[11]])
}

/// The data of a LIST or SET_META_CONTEXT option: an export name and queries.
pub fn meta_context_data(export: &str, queries: &[&str]) -> Vec<u8> {
    let mut d = (export.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(export.as_bytes());
    d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for q in queries {
        d.extend_from_slice(&(q.len() as u32).to_be_bytes());
        d.extend_from_slice(q.as_bytes());
    }
    d
}

/// Sends one request header, then `data` (a write's payload).
pub async fn send_request<S: AsyncWrite + Unpin>(
    s: &mut S,
    flags: u16,
    kind: u16,
    cookie: u64,
    offset: u64,
    length: u32,
    data: &[u8],
) {
    let mut out = Request { flags, kind, cookie, offset, length }.encode().to_vec();
    out.extend_from_slice(data);
    s.write_all(&out).await.unwrap();
}

/// Reads a simple reply: (error, cookie), then `data_bytes` of data if it succeeded.
pub async fn read_simple_reply<S: AsyncRead + Unpin>(s: &mut S, data_bytes: usize) -> (u32, u64, Vec<u8>) {
    assert_eq!(s.read_u32().await.unwrap(), SIMPLE_REPLY_MAGIC, "a simple reply's magic");
    let error = s.read_u32().await.unwrap();
    let cookie = s.read_u64().await.unwrap();
    let mut data = vec![0u8; if error == 0 { data_bytes } else { 0 }];
    s.read_exact(&mut data).await.unwrap();
    (error, cookie, data)
}

/// One structured reply chunk.
#[derive(Debug)]
pub struct Chunk {
    pub flags: u16,
    pub kind: u16,
    pub cookie: u64,
    pub payload: Vec<u8>,
}

impl Chunk {
    /// The error number of an error chunk.
    pub fn errno(&self) -> u32 {
        assert_eq!(self.kind, REPLY_TYPE_ERROR, "not an error chunk: {self:?}");
        u32::from_be_bytes(self.payload[..4].try_into().unwrap())
    }
}

pub async fn read_chunk<S: AsyncRead + Unpin>(s: &mut S) -> Chunk {
    assert_eq!(s.read_u32().await.unwrap(), STRUCTURED_REPLY_MAGIC, "a structured reply's magic");
    let flags = s.read_u16().await.unwrap();
    let kind = s.read_u16().await.unwrap();
    let cookie = s.read_u64().await.unwrap();
    let mut payload = vec![0u8; s.read_u32().await.unwrap() as usize];
    s.read_exact(&mut payload).await.unwrap();
    Chunk { flags, kind, cookie, payload }
}
