//! A webhook endpoint over the loopback server ([`crate::http_server`]):
//! `GET <path>` and `POST <path>` go to a platform's [`Handler`], `GET
//! /health` answers `ok`, anything else is 404 or 405.
//!
//! The limits are there because a webhook URL is public and answers before
//! anything is authenticated: the body is capped (`Content-Length` first,
//! then while reading, the connection closed after a refusal) and must
//! arrive within a deadline; the server caps connections and the time for
//! a request head. Platforms that receive webhooks (WhatsApp, the WeCom
//! app's callback URL) bring only their handler.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::http_server::{self, Limits};

/// Limits and routing of a webhook server.
#[derive(Clone, Debug)]
pub struct WebhookConfig {
    /// Who serves, for the log lines (`"whatsapp"`, `"wecom_callback"`).
    pub name: &'static str,
    /// The webhook path, e.g. `/whatsapp`.
    pub path: String,
    /// The largest accepted request body.
    pub max_body: usize,
    /// Deadline for the request line and headers.
    pub header_timeout: Duration,
    /// Deadline for reading the body.
    pub body_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// How long stopping waits for requests in flight.
    pub shutdown_grace: Duration,
}

/// What a handler answers (`text/plain`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The HTTP status.
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

    /// `200` with `body`.
    pub fn ok(body: impl Into<String>) -> Self {
        Self::new(200, body)
    }
}

/// A `POST` to the webhook path, its body read whole.
#[derive(Debug)]
pub struct Post<'r> {
    /// The query string, without `?` (empty when there is none).
    pub query: &'r str,
    /// The body.
    pub body: &'r [u8],
    headers: &'r HeaderMap,
}

impl Post<'_> {
    /// The header `name` (lower case), when present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// A platform's webhook behaviour, called for each request on the path.
/// Returns quickly: platforms retry slow answers.
pub trait Handler: Send + Sync + 'static {
    /// `GET <path>?<query>` (verification handshakes).
    fn get(&self, query: &str, peer: SocketAddr) -> Reply;
    /// `POST <path>` (notifications).
    fn post(&self, post: &Post<'_>, peer: SocketAddr) -> Reply;
}

/// A running webhook server.
#[derive(Debug)]
pub struct WebhookServer {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl WebhookServer {
    /// Starts serving `listener` in a background task.
    pub fn start(
        listener: TcpListener,
        config: WebhookConfig,
        handler: Arc<dyn Handler>,
    ) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        let (stop, stop_rx) = watch::channel(false);
        let limits = Limits {
            name: config.name,
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
        let task =
            hermes_runtime::task::spawn(http_server::serve(listener, limits, serve_one, stop_rx));
        Ok(Self { addr, stop, task })
    }

    /// The address it listens on (the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, waits for requests in flight (up to the grace
    /// period) and returns once the listener is closed.
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

/// A refusal after which the rest of the request is not read: the
/// connection is closed.
fn respond_and_close(status: u16, body: &str) -> Response<Full<Bytes>> {
    let mut resp = respond(status, body);
    resp.headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    resp
}

async fn serve(
    config: &WebhookConfig,
    handler: &dyn Handler,
    req: Request<Incoming>,
    peer: SocketAddr,
) -> Response<Full<Bytes>> {
    let name = config.name;
    let path = req.uri().path();
    if path == "/health" && req.method() == Method::GET {
        return respond(200, "ok");
    }
    if path != config.path {
        return respond(404, "not found");
    }
    let query = req.uri().query().unwrap_or("").to_owned();
    match *req.method() {
        Method::GET => {
            let reply = handler.get(&query, peer);
            respond(reply.status, reply.body)
        }
        Method::POST => {
            let declared = req
                .headers()
                .get(CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            let max = config.max_body;
            if declared.is_some_and(|n| n > max as u64) {
                tracing::warn!(%peer, declared, max, "{name}: refused an oversized webhook body");
                return respond_and_close(413, "payload too large");
            }
            let (parts, body) = req.into_parts();
            let body = Limited::new(body, max).collect();
            let body = match tokio::time::timeout(config.body_timeout, body).await {
                Ok(Ok(collected)) => collected.to_bytes(),
                Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
                    tracing::warn!(%peer, max, "{name}: refused an oversized webhook body");
                    return respond_and_close(413, "payload too large");
                }
                Ok(Err(e)) => {
                    tracing::warn!(%peer, error = %e, "{name}: could not read the webhook body");
                    return respond_and_close(400, "unreadable body");
                }
                Err(_) => {
                    tracing::warn!(%peer, "{name}: webhook body not received in time");
                    return respond_and_close(408, "body not received in time");
                }
            };
            let post = Post {
                query: &query,
                body: &body,
                headers: &parts.headers,
            };
            let reply = handler.post(&post, peer);
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
