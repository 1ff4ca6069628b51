//! `shoal s3 bench`: a native S3 load generator usable against any S3 server (warp cannot be
//! installed here, and Python clients measure themselves). Workers on keep-alive connections
//! send signed requests back to back for a fixed time; the report has ops/s, MB/s and latency
//! percentiles.

mod http;
pub mod sigv4;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

/// What the workers do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    Put,
    Get,
    List,
    Mixed,
    /// Deletes the keys a listing of the bucket found before the run, in key order, the
    /// workers taking them round-robin (so the run empties the key space from its start, as
    /// expiring time-ordered keys does). A worker stops when its keys run out.
    Delete,
}

/// One benchmark.
#[derive(Debug, Clone)]
pub struct BenchSpec {
    /// `http://HOST:PORT`.
    pub endpoint: String,
    pub access_key: String,
    pub secret_key: String,
    pub region: String,
    pub bucket: String,
    pub size_bytes: usize,
    pub concurrency: usize,
    pub seconds: u64,
    pub workload: Workload,
    /// `get` and `mixed` first write the objects they read (`pre/W/N`, [`PREFILL_PER_WORKER`]
    /// per worker). Without it they read those a previous run with the same bucket, size and
    /// concurrency left: a caller measuring CPU per operation excludes the writes that way.
    pub prefill: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub workload: Workload,
    pub endpoint: String,
    pub size_bytes: usize,
    pub concurrency: usize,
    pub seconds: f64,
    pub ops: u64,
    pub errors: u64,
    pub ops_per_s: f64,
    pub mb_per_s: f64,
    /// Keys listed per second (`list` only).
    pub keys_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// Most latency samples one worker keeps (a longer run keeps the first ones).
const MAX_SAMPLES_PER_WORKER: usize = 10_000_000;
/// Objects each worker writes before a `get` or `mixed` run (unless told not to), to read back.
const PREFILL_PER_WORKER: usize = 4;
/// Largest response body read (a GET of the largest object size accepted).
const MAX_BODY_BYTES: usize = 256 << 20;
/// Most keys a `delete` run lists before it starts (held in memory).
const MAX_DELETE_KEYS: usize = 4_000_000;

struct Target {
    addr: String,
    host: String,
    spec: BenchSpec,
}

impl Target {
    fn signed(&self, method: &str, path: &str, query: &str) -> Vec<(String, String)> {
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let signer =
            sigv4::Signer { access: &self.spec.access_key, secret: &self.spec.secret_key, region: &self.spec.region };
        sigv4::sign(method, &self.host, path, query, &signer, now)
    }

    async fn call(
        &self,
        conn: &mut http::Connection,
        method: &str,
        path: &str,
        query: &str,
        body: &[u8],
    ) -> std::io::Result<http::Response> {
        let headers = self.signed(method, path, query);
        let target = if query.is_empty() {
            crate::text::uri_encode(path)
        } else {
            format!("{}?{query}", crate::text::uri_encode(path))
        };
        conn.request(method, &self.host, &target, &headers, body, MAX_BODY_BYTES).await
    }
}

/// Per-worker results.
#[derive(Default)]
struct Tally {
    ops: u64,
    errors: u64,
    bytes: u64,
    keys: u64,
    latencies_us: Vec<u32>,
    first_error: Option<String>,
}

/// Runs the benchmark; `progress(elapsed_s, ops_so_far)` is called about once a second.
pub async fn run(spec: BenchSpec, progress: impl Fn(u64, u64)) -> Result<BenchReport, String> {
    let addr = spec
        .endpoint
        .strip_prefix("http://")
        .ok_or_else(|| format!("endpoint {:?} must start with http://", spec.endpoint))?
        .trim_end_matches('/')
        .to_string();
    if spec.concurrency == 0 || spec.concurrency > 4096 {
        return Err(format!("concurrency must be 1 to 4096, got {}", spec.concurrency));
    }
    if spec.size_bytes > MAX_BODY_BYTES {
        return Err(format!("object size over {MAX_BODY_BYTES} bytes"));
    }
    let target = Arc::new(Target { host: addr.clone(), addr, spec: spec.clone() });
    let bucket_path = format!("/{}", spec.bucket);
    let mut conn =
        http::Connection::connect(&target.addr).await.map_err(|e| format!("connecting to {}: {e}", target.addr))?;
    // An existing bucket is used as it is (a full cluster refuses even a create that would
    // change nothing).
    let exists = target.call(&mut conn, "HEAD", &bucket_path, "", b"").await.map_err(|e| e.to_string())?;
    let made = if exists.status == 200 {
        exists
    } else {
        target.call(&mut conn, "PUT", &bucket_path, "", b"").await.map_err(|e| e.to_string())?
    };
    if made.status != 200 && !String::from_utf8_lossy(&made.body).contains("BucketAlreadyOwnedByYou") {
        return Err(format!(
            "creating bucket {}: HTTP {}: {}",
            spec.bucket,
            made.status,
            String::from_utf8_lossy(&made.body)
        ));
    }
    let payload: Arc<Vec<u8>> = Arc::new((0..spec.size_bytes).map(|i| (i * 31 % 251) as u8).collect());
    if spec.prefill && matches!(spec.workload, Workload::Get | Workload::Mixed) {
        for w in 0..spec.concurrency {
            for n in 0..PREFILL_PER_WORKER {
                let r = target.call(&mut conn, "PUT", &format!("{bucket_path}/pre/{w}/{n}"), "", &payload).await;
                match r {
                    Ok(r) if r.status == 200 => {}
                    Ok(r) => {
                        return Err(format!("prefill PUT: HTTP {}: {}", r.status, String::from_utf8_lossy(&r.body)));
                    }
                    Err(e) => return Err(format!("prefill PUT: {e}")),
                }
            }
        }
    }
    let doomed: Arc<Vec<String>> = Arc::new(if spec.workload == Workload::Delete {
        list_keys(&target, &mut conn, &bucket_path, MAX_DELETE_KEYS).await?
    } else {
        Vec::new()
    });
    if spec.workload == Workload::Delete && doomed.is_empty() {
        return Err(format!("bucket {} has no keys to delete: fill it first (put)", spec.bucket));
    }
    let started = Instant::now();
    let deadline = started + Duration::from_secs(spec.seconds);
    let ops_done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut workers = Vec::new();
    for w in 0..spec.concurrency {
        let target = target.clone();
        let payload = payload.clone();
        let ops_done = ops_done.clone();
        let bucket_path = bucket_path.clone();
        let doomed = doomed.clone();
        workers.push(tokio::spawn(async move {
            let mut t = Tally::default();
            let mut conn = match http::Connection::connect(&target.addr).await {
                Ok(c) => c,
                Err(e) => {
                    t.errors += 1;
                    t.first_error = Some(e.to_string());
                    return t;
                }
            };
            let mut n: u64 = 0;
            let mut token: Option<String> = None;
            while Instant::now() < deadline {
                let doomed_key = match target.spec.workload {
                    Workload::Delete => match doomed.get(w + n as usize * target.spec.concurrency) {
                        Some(k) => Some(k),
                        None => break,
                    },
                    _ => None,
                };
                let op_start = Instant::now();
                let kind = match target.spec.workload {
                    Workload::Mixed if n.is_multiple_of(2) => Workload::Get,
                    Workload::Mixed => Workload::Put,
                    k => k,
                };
                let result = match kind {
                    Workload::Put => {
                        target.call(&mut conn, "PUT", &format!("{bucket_path}/obj/{w}/{n}"), "", &payload).await
                    }
                    Workload::Get => {
                        let key = format!("{bucket_path}/pre/{w}/{}", n as usize % PREFILL_PER_WORKER);
                        target.call(&mut conn, "GET", &key, "", b"").await
                    }
                    Workload::Delete => {
                        let key = format!("{bucket_path}/{}", doomed_key.map(String::as_str).unwrap_or_default());
                        target.call(&mut conn, "DELETE", &key, "", b"").await
                    }
                    _ => {
                        let query = match &token {
                            Some(tok) => format!(
                                "continuation-token={}&list-type=2&max-keys=1000",
                                crate::text::uri_encode(tok).replace('/', "%2F")
                            ),
                            None => "list-type=2&max-keys=1000".to_string(),
                        };
                        target.call(&mut conn, "GET", &bucket_path, &query, b"").await
                    }
                };
                let elapsed_us = op_start.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
                match result {
                    Ok(r) if r.status == 200 || (kind == Workload::Delete && r.status == 204) => {
                        t.ops += 1;
                        match kind {
                            Workload::Put => t.bytes += payload.len() as u64,
                            Workload::Get => t.bytes += r.body.len() as u64,
                            Workload::Delete => {}
                            _ => {
                                let text = String::from_utf8_lossy(&r.body);
                                t.keys += text.matches("<Key>").count() as u64;
                                token = between(&text, "<NextContinuationToken>", "</NextContinuationToken>");
                            }
                        }
                        if t.latencies_us.len() < MAX_SAMPLES_PER_WORKER {
                            t.latencies_us.push(elapsed_us);
                        }
                        ops_done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    Ok(r) => {
                        t.errors += 1;
                        t.first_error.get_or_insert_with(|| {
                            format!(
                                "HTTP {}: {}",
                                r.status,
                                String::from_utf8_lossy(&r.body).chars().take(300).collect::<String>()
                            )
                        });
                    }
                    Err(e) => {
                        t.errors += 1;
                        t.first_error.get_or_insert_with(|| e.to_string());
                        // The connection may be unusable: open another.
                        match http::Connection::connect(&target.addr).await {
                            Ok(c) => conn = c,
                            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                        }
                    }
                }
                n += 1;
            }
            t
        }));
    }
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.tick().await;
    while Instant::now() < deadline {
        ticker.tick().await;
        progress(started.elapsed().as_secs(), ops_done.load(std::sync::atomic::Ordering::Relaxed));
    }
    let mut all = Tally::default();
    for w in workers {
        let t = w.await.map_err(|e| format!("a worker failed: {e}"))?;
        all.ops += t.ops;
        all.errors += t.errors;
        all.bytes += t.bytes;
        all.keys += t.keys;
        all.latencies_us.extend(t.latencies_us);
        if all.first_error.is_none() {
            all.first_error = t.first_error;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    if all.ops == 0 {
        return Err(format!("no request succeeded; first error: {}", all.first_error.unwrap_or_default()));
    }
    if spec.workload == Workload::List && all.keys == 0 {
        return Err(format!("bucket {} has no keys to list: fill it first (put)", spec.bucket));
    }
    if let Some(e) = &all.first_error {
        eprintln!("shoal: {} request(s) failed; the first: {e}", all.errors);
    }
    all.latencies_us.sort_unstable();
    let pct = |p: f64| {
        let i = ((all.latencies_us.len() as f64 * p).ceil() as usize).clamp(1, all.latencies_us.len()) - 1;
        f64::from(all.latencies_us[i]) / 1000.0
    };
    Ok(BenchReport {
        workload: spec.workload,
        endpoint: spec.endpoint.clone(),
        size_bytes: spec.size_bytes,
        concurrency: spec.concurrency,
        seconds,
        ops: all.ops,
        errors: all.errors,
        ops_per_s: all.ops as f64 / seconds,
        mb_per_s: all.bytes as f64 / seconds / 1e6,
        keys_per_s: all.keys as f64 / seconds,
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        max_ms: pct(1.0),
    })
}

/// Up to `max` keys of the bucket at `bucket_path`, in key order.
async fn list_keys(
    target: &Target,
    conn: &mut http::Connection,
    bucket_path: &str,
    max: usize,
) -> Result<Vec<String>, String> {
    let mut keys = Vec::new();
    let mut token: Option<String> = None;
    while keys.len() < max {
        let query = match &token {
            Some(tok) => format!(
                "continuation-token={}&list-type=2&max-keys=1000",
                crate::text::uri_encode(tok).replace('/', "%2F")
            ),
            None => "list-type=2&max-keys=1000".to_string(),
        };
        let r = target.call(conn, "GET", bucket_path, &query, b"").await.map_err(|e| format!("listing: {e}"))?;
        if r.status != 200 {
            return Err(format!("listing: HTTP {}: {}", r.status, String::from_utf8_lossy(&r.body)));
        }
        let text = String::from_utf8_lossy(&r.body);
        let mut rest = text.as_ref();
        while let Some(key) = between(rest, "<Key>", "</Key>") {
            rest = &rest[rest.find("</Key>").map(|i| i + 6).unwrap_or(rest.len())..];
            keys.push(crate::text::xml_unescape(&key));
        }
        token = between(&text, "<NextContinuationToken>", "</NextContinuationToken>");
        if token.is_none() {
            break;
        }
    }
    keys.truncate(max);
    Ok(keys)
}

fn between(text: &str, open: &str, close: &str) -> Option<String> {
    let start = text.find(open)? + open.len();
    let end = text[start..].find(close)? + start;
    Some(text[start..end].to_string())
}
