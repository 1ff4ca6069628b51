//! A minimal HTTP/1.1 client connection for the load generator: one request at a time on a
//! keep-alive TCP connection, bodies by `Content-Length` or chunked, every size bounded.

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Largest response head accepted, in bytes.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Largest request body sent in the same write as its head, in bytes.
const ONE_WRITE_BODY_BYTES: usize = 64 * 1024;

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
        use std::fmt::Write as _;
        let mut head = String::with_capacity(512);
        // Writing into a String cannot fail.
        let _ = write!(head, "{method} {target} HTTP/1.1\r\nhost: {host}\r\ncontent-length: {}\r\n", body.len());
        for (n, v) in headers {
            let _ = write!(head, "{n}: {v}\r\n");
        }
        head.push_str("\r\n");
        let s = self.stream.get_mut();
        if body.len() <= ONE_WRITE_BODY_BYTES {
            // A small request goes out in one write, as HTTP clients send it: a head and body in
            // two writes cost the generator a second system call, and the server a second
            // segment to read, on every small PUT.
            let mut request = head.into_bytes();
            request.extend_from_slice(body);
            s.write_all(&request).await?;
        } else {
            s.write_all(head.as_bytes()).await?;
            s.write_all(body).await?;
        }
        self.read_response(method == "HEAD", max_body_bytes).await
    }

    async fn read_response(&mut self, head_only: bool, max_body_bytes: usize) -> std::io::Result<Response> {
        let bad = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
        let mut buf = Vec::with_capacity(1024);
        // The head is taken from the reader's buffer a filled piece at a time, up to and
        // including its blank line; what follows stays buffered for the body.
        loop {
            let avail = self.stream.fill_buf().await?;
            if avail.is_empty() {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let searched_from = buf.len().saturating_sub(3);
            let taken = avail.len().min(MAX_HEAD_BYTES + 1 - buf.len());
            buf.extend_from_slice(&avail[..taken]);
            match buf[searched_from..].windows(4).position(|w| w == b"\r\n\r\n") {
                Some(at) => {
                    let head_len = searched_from + at + 4;
                    let used = taken - (buf.len() - head_len);
                    buf.truncate(head_len);
                    self.stream.consume(used);
                    break;
                }
                None => {
                    self.stream.consume(taken);
                    if buf.len() > MAX_HEAD_BYTES {
                        return Err(bad(format!("response head over {MAX_HEAD_BYTES} bytes")));
                    }
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// Serves one connection: reads one request whole (head and `Content-Length` body) for each
    /// of `answers`, then writes that answer in pieces of `piece_bytes`; returns the requests.
    async fn serve(answers: Vec<Vec<u8>>, piece_bytes: usize) -> (String, tokio::task::JoinHandle<Vec<Vec<u8>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind on loopback");
        let addr = listener.local_addr().expect("local address").to_string();
        let task = tokio::spawn(async move {
            let (s, _) = listener.accept().await.expect("accept");
            let mut s = BufReader::new(s);
            let mut requests = Vec::new();
            for answer in answers {
                let mut request = Vec::new();
                while !request.ends_with(b"\r\n\r\n") {
                    request.push(s.read_u8().await.expect("request head"));
                }
                let text = String::from_utf8_lossy(&request).to_ascii_lowercase();
                let len: usize = text
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .and_then(|v| v.trim().parse().ok())
                    .expect("a content-length");
                let mut body = vec![0; len];
                s.read_exact(&mut body).await.expect("request body");
                request.extend_from_slice(&body);
                requests.push(request);
                for piece in answer.chunks(piece_bytes) {
                    s.get_mut().write_all(piece).await.expect("answer");
                    s.get_mut().flush().await.expect("flush");
                    tokio::task::yield_now().await;
                }
            }
            requests
        });
        (addr, task)
    }

    #[tokio::test]
    async fn heads_split_anywhere_and_bodies_behind_them_are_read_exactly() {
        let answers = vec![
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\netag: \"x\"\r\n\r\nhello".to_vec(),
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n".to_vec(),
            b"HTTP/1.1 204 No Content\r\n\r\n".to_vec(),
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".to_vec(),
        ];
        for piece_bytes in [1, 2, 3, 5, 1024] {
            let (addr, server) = serve(answers.clone(), piece_bytes).await;
            let mut c = Connection::connect(&addr).await.expect("connect");
            let big = vec![7u8; ONE_WRITE_BODY_BYTES + 1];
            let r = c.request("PUT", "h", "/b/k", &[], b"small", 1 << 20).await.expect("first");
            assert_eq!((r.status, r.body.as_slice(), r.header("etag")), (200, &b"hello"[..], Some("\"x\"")));
            let r = c.request("PUT", "h", "/b/k", &[], &big, 1 << 20).await.expect("second");
            assert_eq!((r.status, r.body.as_slice()), (200, &b"abcde"[..]));
            let r = c.request("DELETE", "h", "/b/k", &[], b"", 1 << 20).await.expect("third");
            assert_eq!((r.status, r.body.len()), (204, 0));
            let r = c.request("GET", "h", "/b/k", &[("x-a".into(), "1".into())], b"", 1 << 20).await.expect("fourth");
            assert_eq!((r.status, r.body.len()), (200, 0));
            let requests = server.await.expect("server task");
            assert!(requests[0].starts_with(b"PUT /b/k HTTP/1.1\r\nhost: h\r\ncontent-length: 5\r\n"));
            assert!(requests[0].ends_with(b"\r\n\r\nsmall"));
            assert!(requests[1].ends_with(&big), "a large body follows its head whole");
            assert!(String::from_utf8_lossy(&requests[3]).contains("\r\nx-a: 1\r\n"));
        }
    }

    #[tokio::test]
    async fn an_endless_head_and_an_oversized_body_are_refused() {
        let endless = [b"HTTP/1.1 200 OK\r\n".to_vec(), vec![b'a'; MAX_HEAD_BYTES + 10]].concat();
        let (addr, _server) = serve(vec![endless], 4096).await;
        let mut c = Connection::connect(&addr).await.expect("connect");
        let e = c.request("GET", "h", "/", &[], b"", 1 << 20).await.err().expect("an endless head is refused");
        assert!(e.to_string().contains("response head over"), "{e}");

        let (addr, _server) = serve(vec![b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n".to_vec()], 64).await;
        let mut c = Connection::connect(&addr).await.expect("connect");
        let e = c.request("GET", "h", "/", &[], b"", 99).await.err().expect("a body over the limit is refused");
        assert!(e.to_string().contains("over 99"), "{e}");
    }
}
