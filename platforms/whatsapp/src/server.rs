//! The webhook's HTTP server, over the kit's loopback server
//! (`hermes_platform_kit::http_server`: connection cap, head deadline,
//! graceful stop).
//!
//! Routing: `GET /whatsapp` (the verification handshake), `POST /whatsapp`
//! (notifications), `GET /health`; anything else is 404 or 405. The body is
//! capped (`Content-Length` first, then while reading) and must arrive
//! within a deadline: the URL is public and answers before anything is
//! authenticated.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hermes_platform_kit::http_server::{self, Limits};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The signature header.
pub const SIGNATURE_HEADER: &str = "x-hub-signature-256";

/// Limits and routing.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The webhook path.
    pub path: String,
    /// The largest body.
    pub max_body: usize,
    /// Deadline for the request head.
    pub header_timeout: Duration,
    /// Deadline for the body.
    pub body_timeout: Duration,
    /// Connections at once.
    pub max_connections: usize,
    /// How long stopping waits.
    pub shutdown_grace: Duration,
}

/// An answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The status.
    pub status: u16,
    /// The `text/plain` body.
    pub body: String,
}

impl Reply {
    /// `status` with `body`.
    pub fn new(status: u16, body: impl Into<String>) -> Self {
        Reply {
            status,
            body: body.into(),
        }
    }
}

/// The webhook's behaviour. Returns quickly: Meta retries slow answers.
pub trait Handler: Send + Sync + 'static {
    /// `GET <path>?<query>`.
    fn get(&self, query: &str, peer: SocketAddr) -> Reply;
    /// `POST <path>` with the signature header and the whole body.
    fn post(&self, signature: Option<&str>, body: &[u8], peer: SocketAddr) -> Reply;
}

/// A running server.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Server {
    /// Starts serving `listener`.
    pub fn start(
        listener: TcpListener,
        config: ServerConfig,
        handler: Arc<dyn Handler>,
    ) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        let (stop, stop_rx) = watch::channel(false);
        let limits = Limits {
            name: "whatsapp",
            max_connections: config.max_connections,
            header_timeout: config.header_timeout,
            max_buf_size: 16 * 1024,
            shutdown_grace: config.shutdown_grace,
        };
        let config = Arc::new(config);
        let serve_one = move |req, peer| {
            let (config, handler) = (Arc::clone(&config), Arc::clone(&handler));
            async move { serve(&config, handler.as_ref(), req, peer).await }
        };
        let task = tokio::spawn(http_server::serve(listener, limits, serve_one, stop_rx));
        Ok(Self { addr, stop, task })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and waits for requests in flight (bounded).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let abort = self.task.abort_handle();
        if self.task.await.is_err() {
            abort.abort();
        }
    }
}

fn respond(status: u16, body: impl Into<String>) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body.into())));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

fn respond_and_close(status: u16, body: &str) -> Response<Full<Bytes>> {
    let mut resp = respond(status, body);
    resp.headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    resp
}

async fn serve(
    config: &ServerConfig,
    handler: &dyn Handler,
    req: Request<Incoming>,
    peer: SocketAddr,
) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if path == "/health" && req.method() == Method::GET {
        return respond(200, "ok");
    }
    if path != config.path {
        return respond(404, "not found");
    }
    match *req.method() {
        Method::GET => {
            let query = req.uri().query().unwrap_or("").to_owned();
            let reply = handler.get(&query, peer);
            respond(reply.status, reply.body)
        }
        Method::POST => {
            let declared = req
                .headers()
                .get(CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            if declared.is_some_and(|n| n > config.max_body as u64) {
                tracing::warn!(%peer, declared, "whatsapp: refused an oversized webhook body");
                return respond_and_close(413, "payload too large");
            }
            let signature = req
                .headers()
                .get(SIGNATURE_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let body = Limited::new(req.into_body(), config.max_body).collect();
            let body = match tokio::time::timeout(config.body_timeout, body).await {
                Ok(Ok(collected)) => collected.to_bytes(),
                Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
                    tracing::warn!(%peer, "whatsapp: refused an oversized webhook body");
                    return respond_and_close(413, "payload too large");
                }
                Ok(Err(e)) => {
                    tracing::warn!(%peer, error = %e, "whatsapp: could not read the webhook body");
                    return respond_and_close(400, "unreadable body");
                }
                Err(_) => {
                    tracing::warn!(%peer, "whatsapp: webhook body not received in time");
                    return respond_and_close(408, "body not received in time");
                }
            };
            let reply = handler.post(signature.as_deref(), &body, peer);
            respond(reply.status, reply.body)
        }
        _ => {
            let mut resp = respond(405, "method not allowed");
            resp.headers_mut()
                .insert(hyper::header::ALLOW, HeaderValue::from_static("GET, POST"));
            resp
        }
    }
}
