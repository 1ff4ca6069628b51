//! A minimal HTTP/1.1 client connection for the load generator: one request at a time on a
//! keep-alive TCP connection, bodies by `Content-Length` or chunked, every size bounded.

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Largest response head accepted, in bytes.
const MAX_HEAD_BYTES: usize = 64 * 1024;

pub struct Connection {
    stream: BufReader<TcpStream>,
}

/// A response: status, headers (names lower-case) and body.
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

impl Connection {
    pub async fn connect(addr: &str) -> std::io::Result<Connection> {
        let s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        Ok(Connection { stream: BufReader::with_capacity(256 * 1024, s) })
    }

    /// Sends one request and reads its whole response; `max_body_bytes` bounds what is read.
    pub async fn request(
        &mut self,
        method: &str,
        host: &str,
        target: &str,
        headers: &[(String, String)],
        body: &[u8],
        max_body_bytes: usize,
    ) -> std::io::Result<Response> {
        let mut head = format!("{method} {target} HTTP/1.1\r\nhost: {host}\r\ncontent-length: {}\r\n", body.len());
        for (n, v) in headers {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let s = self.stream.get_mut();
        s.write_all(head.as_bytes()).await?;
        if !body.is_empty() {
            s.write_all(body).await?;
        }
        self.read_response(method == "HEAD", max_body_bytes).await
    }

    async fn read_response(&mut self, head_only: bool, max_body_bytes: usize) -> std::io::Result<Response> {
        let bad = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
        let mut buf = Vec::with_capacity(1024);
        loop {
            let b = self.stream.read_u8().await?;
            buf.push(b);
            if buf.ends_with(b"\r\n\r\n") {
                break;
            }
            if buf.len() > MAX_HEAD_BYTES {
                return Err(bad(format!("response head over {MAX_HEAD_BYTES} bytes")));
            }
        }
        let mut parsed = [httparse::EMPTY_HEADER; 64];
        let mut resp = httparse::Response::new(&mut parsed);
        resp.parse(&buf).map_err(|e| bad(format!("bad response head: {e}")))?;
        let status = resp.code.ok_or_else(|| bad("no status".into()))?;
        let headers: Vec<(String, String)> = resp
            .headers
            .iter()
            .map(|h| (h.name.to_ascii_lowercase(), String::from_utf8_lossy(h.value).into_owned()))
            .collect();
        let mut out = Response { status, headers, body: Vec::new() };
        if head_only || status == 204 || status == 304 {
            return Ok(out);
        }
        if out.header("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
            loop {
                let mut line = Vec::new();
                while !line.ends_with(b"\r\n") {
                    line.push(self.stream.read_u8().await?);
                    if line.len() > 1024 {
                        return Err(bad("chunk size line too long".into()));
                    }
                }
                let text = String::from_utf8_lossy(&line[..line.len() - 2]).into_owned();
                let size = usize::from_str_radix(text.split(';').next().unwrap_or("").trim(), 16)
                    .map_err(|_| bad(format!("bad chunk size {text:?}")))?;
                if size == 0 {
                    let mut end = [0u8; 2];
                    self.stream.read_exact(&mut end).await?;
                    return Ok(out);
                }
                if out.body.len() + size > max_body_bytes {
                    return Err(bad(format!("response body over {max_body_bytes} bytes")));
                }
                self.read_body(&mut out.body, size).await?;
                let mut crlf = [0u8; 2];
                self.stream.read_exact(&mut crlf).await?;
            }
        }
        let len: usize = out.header("content-length").and_then(|v| v.trim().parse().ok()).unwrap_or(0);
        if len > max_body_bytes {
            return Err(bad(format!("response body of {len} bytes over {max_body_bytes}")));
        }
        self.read_body(&mut out.body, len).await?;
        Ok(out)
    }

    /// Appends exactly `len` bytes of the stream to `body`, read straight into its spare
    /// capacity (a generator that zeroed each 4 MiB body first spent a quarter of its CPU on it).
    async fn read_body(&mut self, body: &mut Vec<u8>, len: usize) -> std::io::Result<()> {
        body.reserve_exact(len);
        let end = body.len() + len;
        while body.len() < end {
            let want = (end - body.len()) as u64;
            if (&mut self.stream).take(want).read_buf(body).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
        Ok(())
    }
}
