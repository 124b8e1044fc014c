//! The callback URL's HTTP/1.1 server (hyper 1 + hyper-util).
//!
//! Routing: `GET <path>` (URL verification), `POST <path>` (callbacks),
//! `GET /health`; anything else is 404 or 405. Limits, because the URL is
//! public and answers before any authentication: a body cap (checked against
//! `Content-Length` first, then while reading), a deadline for the request
//! head and for the body, and a cap on open connections (the next accept
//! waits). Stopping closes the listener, lets requests in flight finish
//! (bounded by a grace period) and closes idle keep-alive connections.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::http_server::{self, Limits};

/// Limits and routing of the server.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The callback path, e.g. `/wecom/callback`.
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

/// What a handler answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The `text/plain` body.
    pub body: String,
}

impl Reply {
    /// `200` with `body`.
    pub fn ok(body: impl Into<String>) -> Self {
        Self {
            status: 200,
            body: body.into(),
        }
    }
}

/// The callback URL's behaviour, called by the server for each request on
/// the callback path. Must return quickly: WeCom retries after ~5 s.
pub trait Handler: Send + Sync + 'static {
    /// `GET <path>?<query>`.
    fn get(&self, query: &str, peer: SocketAddr) -> Reply;
    /// `POST <path>?<query>` with the whole body.
    fn post(&self, query: &str, body: &[u8], peer: SocketAddr) -> Reply;
}

/// A running server.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Server {
    /// Starts serving `listener` in a background task.
    pub fn start(
        listener: TcpListener,
        config: ServerConfig,
        handler: Arc<dyn Handler>,
    ) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(accept_loop(listener, Arc::new(config), handler, stop_rx));
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

async fn accept_loop(
    listener: TcpListener,
    config: Arc<ServerConfig>,
    handler: Arc<dyn Handler>,
    stop: watch::Receiver<bool>,
) {
    let limits = Limits {
        name: "wecom_callback",
        max_connections: config.max_connections,
        header_timeout: config.header_timeout,
        max_buf_size: 16 * 1024,
        shutdown_grace: config.shutdown_grace,
    };
    let serve_one = move |req, peer| {
        let (config, handler) = (Arc::clone(&config), Arc::clone(&handler));
        async move { serve(&config, handler.as_ref(), req, peer).await }
    };
    http_server::serve(listener, limits, serve_one, stop).await;
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
    config: &ServerConfig,
    handler: &dyn Handler,
    req: Request<Incoming>,
    peer: SocketAddr,
) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    let query = req.uri().query().unwrap_or("").to_owned();
    if path == "/health" && req.method() == Method::GET {
        return respond(200, "ok");
    }
    if path != config.path {
        return respond(404, "not found");
    }
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
            if declared.is_some_and(|n| n > config.max_body as u64) {
                tracing::warn!(%peer, declared, max = config.max_body, "wecom_callback: refused an oversized body");
                return respond_and_close(413, "payload too large");
            }
            let body = Limited::new(req.into_body(), config.max_body).collect();
            let body = match tokio::time::timeout(config.body_timeout, body).await {
                Ok(Ok(collected)) => collected.to_bytes(),
                Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
                    tracing::warn!(%peer, max = config.max_body, "wecom_callback: refused an oversized body");
                    return respond_and_close(413, "payload too large");
                }
                Ok(Err(e)) => {
                    tracing::warn!(%peer, error = %e, "wecom_callback: could not read the body");
                    return respond_and_close(400, "unreadable body");
                }
                Err(_) => {
                    tracing::warn!(%peer, "wecom_callback: body not received in time");
                    return respond_and_close(408, "body not received in time");
                }
            };
            let reply = handler.post(&query, &body, peer);
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
