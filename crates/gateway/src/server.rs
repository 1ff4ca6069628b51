//! The gateway daemon's HTTP side: a listener, HTTP/1.1 keep-alive connections (plain or TLS)
//! served by s3s, and `x-amz-request-id` on every response.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use s3s::service::S3ServiceBuilder;
use shoal_client::Client;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::access::Transport;
use crate::auth::ClusterAuth;
use crate::collector::{self, CollectorSettings};
use crate::cors::CorsAsk;
use crate::error::GatewayError;
use crate::expiry::LifecycleSettings;
use crate::idle;
use crate::meta;
use crate::objects::MemoryBudget;
use crate::precheck;
use crate::s3impl::{Gateway, ServiceSettings};
use crate::unread;
use shoal_net::tls::{self, TlsFiles};

/// What the gateway's memory limit keeps for the process itself rather than request data: its
/// code and runtime (about 11 MiB idle), connection buffers, cached records, and what the
/// allocator holds beyond live data (measured: 64 uploads at once held 60-75 MiB more than the
/// request budget counted; raised from 64 MiB when requests stopped reserving room for the
/// frame copies the client library no longer makes, which had been slack for the rest:
/// docs/BENCHMARKS.md).
pub const PROCESS_RESERVE_BYTES: u64 = 96 << 20;

/// Largest read buffer of one connection (hyper's minimum is 8 KiB).
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Most connections served at once; more wait in the listen backlog.
const MAX_CONNECTIONS: usize = 4096;

/// How long the gateway waits on a client by default: as long as common HTTP servers do
/// (nginx's header, body and send timeouts are 60 s; radosgw's request timeout 65 s).
pub const CLIENT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// How a gateway runs.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub listen: SocketAddr,
    /// Domains for virtual-host-style requests (`BUCKET.DOMAIN`); empty: path style only.
    pub domains: Vec<String>,
    pub region: String,
    /// Bytes the gateway may hold in memory: [`PROCESS_RESERVE_BYTES`] of it for the process
    /// itself, the rest for request data (bodies and replies in flight).
    pub inflight_bytes: u64,
    pub gc_delay: Duration,
    /// How old a pending write must be before the collector decides it from its head.
    pub lease: Duration,
    /// Replicas of the pools the gateway creates when they do not exist.
    pub pool_size: u32,
    /// PGs of the data pool it creates (the others get a quarter).
    pub pg_num: u32,
    /// The length of a lifecycle day (a real day; shortened only for tests).
    pub lifecycle_day: Duration,
    /// Serve HTTPS with this identity instead of HTTP.
    pub tls: Option<TlsFiles>,
    /// Entries an index partition may hold before it is split (decision 0014).
    pub split_entries: u64,
    /// Neighbouring index partitions holding fewer entries and versions than this together are
    /// merged (`None`: a quarter of `split_entries`; 0: never).
    pub merge_entries: Option<u64>,
    /// The longest the gateway waits on a client: for a request's headers (also for the next
    /// request on a kept-alive connection), for the next bytes of a body, and for the client to
    /// read the answer ([`crate::idle`]). Past it the connection is closed.
    pub client_idle_timeout: Duration,
}

impl Default for GatewayConfig {
    fn default() -> GatewayConfig {
        GatewayConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 7480)),
            domains: Vec::new(),
            region: "us-east-1".into(),
            inflight_bytes: 256 << 20,
            gc_delay: Duration::from_secs(2 * 3600),
            lease: Duration::from_secs(3600),
            pool_size: 3,
            pg_num: 64,
            lifecycle_day: Duration::from_secs(86_400),
            tls: None,
            split_entries: 50_000,
            merge_entries: None,
            client_idle_timeout: CLIENT_IDLE_TIMEOUT,
        }
    }
}

/// A bound listener, ready to serve.
pub struct Server {
    listener: TcpListener,
    service: s3s::service::S3Service,
    client: Client,
    collector: CollectorSettings,
    lifecycle: LifecycleSettings,
    /// The gateway behind s3s, for what is answered around it (CORS).
    gateway: Gateway,
    domains: Arc<Vec<String>>,
    tls: Option<TlsAcceptor>,
    client_idle_timeout: Duration,
}

/// How long a client has to finish its TLS handshake before its connection is dropped.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl Server {
    /// Creates the gateway's pools if needed and binds the listener.
    pub async fn bind(client: Client, cfg: &GatewayConfig) -> Result<Server, GatewayError> {
        if cfg.client_idle_timeout.is_zero() {
            return Err(GatewayError::InvalidArgument(
                "a client idle timeout of zero would close every connection at once".into(),
            ));
        }
        // The identity is read first, so a bad file fails the start, not a connection.
        let tls = (cfg.tls.as_ref())
            .map(|f| tls::acceptor(f, &[b"http/1.1"]))
            .transpose()
            .map_err(|e| GatewayError::InvalidArgument(e.to_string()))?;
        if cfg.split_entries < 4 {
            return Err(GatewayError::InvalidArgument("index partitions must be allowed at least 4 entries".into()));
        }
        let merge_entries = cfg.merge_entries.unwrap_or(cfg.split_entries / 4);
        if merge_entries > cfg.split_entries / 2 {
            // A merged partition must be far from its next split, or the two would alternate.
            return Err(GatewayError::InvalidArgument(format!(
                "index partitions merge below {merge_entries} entries, more than half of the {} they split at",
                cfg.split_entries
            )));
        }
        crate::reshard::set_split_entries(cfg.split_entries);
        crate::reshard::set_merge_entries(merge_entries);
        crate::reshard::set_lease(cfg.lease);
        let timeout_ms = client.mon().config().op_timeout_ms;
        meta::ensure_pools(&client, cfg.pool_size, cfg.pg_num, timeout_ms).await?;
        let settings = ServiceSettings { region: cfg.region.clone(), gc_delay: cfg.gc_delay, lease: cfg.lease };
        let collector = CollectorSettings::new(cfg.lease, cfg.gc_delay);
        if cfg.lifecycle_day.is_zero() {
            return Err(GatewayError::InvalidArgument("a lifecycle day cannot last 0 seconds".into()));
        }
        let lifecycle = LifecycleSettings::new(cfg.lifecycle_day, cfg.gc_delay, cfg.lease);
        let gateway = Gateway::new(
            client.clone(),
            MemoryBudget::new(cfg.inflight_bytes.saturating_sub(PROCESS_RESERVE_BYTES)),
            settings,
        );
        let mut builder = S3ServiceBuilder::new(gateway.clone());
        builder.set_auth(ClusterAuth(gateway.keys.clone()));
        builder.set_access(AnyoneReaches);
        if !cfg.domains.is_empty() {
            let host = s3s::host::MultiDomain::new(&cfg.domains)
                .map_err(|e| GatewayError::InvalidArgument(format!("bad --domain: {e}")))?;
            builder.set_host(host);
        }
        let listener = TcpListener::bind(cfg.listen)
            .await
            .map_err(|e| GatewayError::InvalidArgument(format!("cannot listen on {}: {e}", cfg.listen)))?;
        let domains = Arc::new(cfg.domains.clone());
        let client_idle_timeout = cfg.client_idle_timeout;
        Ok(Server {
            listener,
            service: builder.build(),
            client,
            collector,
            lifecycle,
            gateway,
            domains,
            tls,
            client_idle_timeout,
        })
    }

    /// Whether the gateway serves HTTPS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    pub fn local_addr(&self) -> SocketAddr {
        // A bound listener always has an address.
        self.listener.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// Serves until the process ends, with the collector and the lifecycle running beside.
    pub async fn run(self) -> Result<(), GatewayError> {
        tokio::spawn(collector::run(self.client.clone(), self.collector.clone()));
        tokio::spawn(crate::expiry::run(self.client.clone(), self.lifecycle.clone()));
        let conns = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        let request_ids = Arc::new(RequestIds::new());
        loop {
            let permit = conns.clone().acquire_owned().await.map_err(|e| GatewayError::Internal(e.to_string()))?;
            let (socket, peer) = match self.listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let _ = socket.set_nodelay(true);
            // Under TLS too: a client that reads nothing stalls the TCP stream's writes.
            let socket = idle::Watched::new(socket, self.client_idle_timeout);
            let conn = Connection {
                service: self.service.clone(),
                gateway: self.gateway.clone(),
                domains: self.domains.clone(),
                ids: request_ids.clone(),
                peer,
                idle: self.client_idle_timeout,
            };
            let tls = self.tls.clone();
            tokio::spawn(async move {
                match tls {
                    None => conn.serve(socket, false).await,
                    Some(acceptor) => {
                        match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(socket)).await {
                            Ok(Ok(stream)) => conn.serve(stream, true).await,
                            Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                            Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                        }
                    }
                }
                drop(permit);
            });
        }
    }
}

/// One client connection and what serving its requests needs.
struct Connection {
    service: s3s::service::S3Service,
    gateway: Gateway,
    domains: Arc<Vec<String>>,
    ids: Arc<RequestIds>,
    peer: SocketAddr,
    /// How long to wait on the client ([`crate::idle`]).
    idle: Duration,
}

impl Connection {
    /// Serves HTTP/1.1 requests on `io` (a TCP stream, or a TLS stream over one when `secure`)
    /// until the client closes it.
    async fn serve<IO>(self, io: IO, secure: bool)
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let Connection { service, gateway, domains, ids, peer, idle } = self;
        let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let service = service.clone();
            let gateway = gateway.clone();
            let domains = domains.clone();
            let id = ids.next();
            let (parts, body) = req.into_parts();
            let expects_continue = unread::expects_continue(&parts.headers);
            let (body, idled) = idle::timed_body(body, idle);
            let (body, ended) = unread::track(body, expects_continue);
            let req = hyper::Request::from_parts(parts, body);
            async move {
                // A CORS preflight is not an S3 request (browsers never sign it).
                if req.method() == hyper::Method::OPTIONS {
                    let mut resp = gateway.preflight(req.uri(), req.headers(), &domains, &id).await;
                    if let Ok(v) = hyper::header::HeaderValue::from_str(&id) {
                        resp.headers_mut().insert("x-amz-request-id", v);
                    }
                    unread::close_if_unread(&mut resp, &ended);
                    return Ok(resp);
                }
                let cors = CorsAsk::of(req.method(), req.uri(), req.headers(), &domains);
                // What an error names as its resource: the path as the client sent it (the URI
                // is kept by reference, read only for an error).
                let uri = req.uri().clone();
                let attributes = precheck::is_get_attributes(req.method(), req.uri().query());
                let now_s = crate::layout::unix_now_s();
                let checked = precheck::sigv2_date(req.headers(), now_s)
                    .and_then(|()| precheck::presigned_expiry(req.uri().query(), now_s));
                let form_bucket = crate::s3post::form_upload_bucket(req.method(), req.uri(), req.headers(), &domains);
                let mut req = req.map(s3s::Body::http_body);
                let transport = Transport { peer, secure };
                req.extensions_mut().insert(transport);
                let mut resp = match (checked, form_bucket) {
                    (Err(refusal), _) => refused(&refusal, &id),
                    // A form upload streams its file; s3s would hold it whole (s3post.rs).
                    (Ok(()), Some(bucket)) => match gateway.post_object_form(req, bucket, transport).await {
                        Ok(resp) => resp,
                        Err(e) => {
                            let (status, code) = (e.status_code(), e.code().as_str().to_string());
                            let message = e.message().unwrap_or("").to_string();
                            e.to_http_response().unwrap_or_else(|_| {
                                let status = status.unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
                                hyper::Response::builder()
                                    .status(status)
                                    .body(s3s::Body::from(precheck::error_body(&code, &message, &id)))
                                    .unwrap_or_default()
                            })
                        }
                    },
                    (Ok(()), None) => service.call(req).await?,
                };
                if attributes
                    && resp.status() == hyper::StatusCode::OK
                    && let Some(body) = resp.body().bytes()
                    && let Some(unquoted) = precheck::unquoted_attributes_etag(&body)
                {
                    resp.headers_mut().remove(hyper::header::CONTENT_LENGTH);
                    *resp.body_mut() = s3s::Body::from(unquoted);
                }
                if let Some(ask) = &cors {
                    gateway.add_cors_headers(ask, &mut resp).await;
                }
                if resp.status().as_u16() >= 400
                    && let Some(body) = resp.body().bytes()
                    && let Some(completed) = precheck::completed_error(&body, &id, uri.path())
                {
                    resp.headers_mut().remove(hyper::header::CONTENT_LENGTH);
                    *resp.body_mut() = s3s::Body::from(completed);
                }
                if idled.idled() {
                    // Whatever the operation made of its body's failure, the client stalled:
                    // S3's answer for that (the connection then closes, the body unread).
                    let message = format!("the request body sent nothing for {} s", idle.as_secs());
                    resp = refused(
                        &precheck::Refusal { status: hyper::StatusCode::BAD_REQUEST, code: "RequestTimeout", message },
                        &id,
                    );
                }
                if let Ok(v) = hyper::header::HeaderValue::from_str(&id) {
                    resp.headers_mut().insert("x-amz-request-id", v);
                }
                // Read after the operation: a body it left unread ends the connection.
                unread::close_if_unread(&mut resp, &ended);
                Ok::<_, s3s::HttpError>(resp)
            }
        });
        // HTTP/1.1 only, known from the start: a builder that first reads to tell HTTP/1 from
        // HTTP/2 waits for those bytes with no limit, before any of hyper's timers runs.
        let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new()).http1_only();
        // hyper's read buffer grows to about 400 KiB per connection streaming a body, memory
        // no budget counts (64 uploads held 50 MiB of it); 64 KiB reads keep up with the
        // cluster and bound it to 4 MiB per 64 connections.
        builder.http1().max_buf_size(READ_BUFFER_BYTES);
        // A request's headers, and the next request on a kept-alive connection, come within the
        // idle limit or the connection closes (hyper's timer; without one it waits for ever).
        builder.http1().timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(idle);
        let conn = builder.serve_connection(TokioIo::new(io), svc).await;
        if let Err(e) = conn {
            tracing::debug!(%peer, error = %e, "connection ended with an error");
        }
    }
}

/// Lets every request, anonymous ones included, reach the operation: each operation decides
/// access itself (`access.rs`), after looking its bucket up, so that a missing bucket answers
/// NoSuchBucket and ACLs or policies can open a bucket to anonymous requests.
struct AnyoneReaches;

#[async_trait::async_trait]
impl s3s::access::S3Access for AnyoneReaches {
    async fn check(&self, _cx: &mut s3s::access::S3AccessContext<'_>) -> s3s::S3Result<()> {
        Ok(())
    }
}

/// The answer to a request refused before s3s saw it.
fn refused(r: &precheck::Refusal, request_id: &str) -> hyper::Response<s3s::Body> {
    let mut resp = hyper::Response::new(s3s::Body::from(precheck::error_body(r.code, &r.message, request_id)));
    *resp.status_mut() = r.status;
    resp.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/xml"));
    resp
}

/// Request ids: this gateway's random prefix and a counter, unique across gateways.
struct RequestIds {
    prefix: u32,
    next: AtomicU64,
}

impl RequestIds {
    fn new() -> RequestIds {
        let mut b = [0u8; 4];
        let _ = getrandom::fill(&mut b);
        RequestIds { prefix: u32::from_le_bytes(b), next: AtomicU64::new(1) }
    }

    fn next(&self) -> String {
        format!("{:08X}{:016X}", self.prefix, self.next.fetch_add(1, Ordering::Relaxed))
    }
}
