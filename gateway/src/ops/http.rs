//! `GET /healthz` and `GET /metrics` on a loopback port (issue 31, item 9),
//! served by the gateway's one accept loop ([`crate::http_server`]). Off unless
//! `[gateway] metrics_port` / `GATEWAY_METRICS_PORT` is set; always bound
//! to 127.0.0.1 — a scraper elsewhere goes through the operator's own
//! proxy. No request reads a body; nothing here changes the gateway.

use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::http_server::{self, Limits};

/// The running endpoint.
#[derive(Debug)]
pub struct OpsServer {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl OpsServer {
    /// Binds 127.0.0.1:`port` and serves in the current runtime.
    pub async fn bind(port: u16) -> std::io::Result<Self> {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, port)).await?;
        let addr = listener.local_addr()?;
        let (stop, stop_rx) = watch::channel(false);
        let task = hermes_runtime::task::spawn(accept_loop(listener, stop_rx));
        Ok(OpsServer { addr, stop, task })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops listening.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let abort = self.task.abort_handle();
        if tokio::time::timeout(Duration::from_secs(2), self.task)
            .await
            .is_err()
        {
            abort.abort();
        }
    }
}

async fn accept_loop(listener: TcpListener, stop: watch::Receiver<bool>) {
    let limits = Limits {
        name: "metrics endpoint",
        // A scrape is one small request: a few at a time is plenty.
        max_connections: 8,
        header_timeout: Duration::from_secs(5),
        max_buf_size: 16 * 1024,
        shutdown_grace: Duration::from_secs(1),
    };
    let answer = |req: Request<Incoming>, _peer| async move { respond(&req) };
    http_server::serve(listener, limits, answer, stop).await;
}

fn respond(req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, content_type: &'static str, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        r
    };
    const TEXT: &str = "text/plain; charset=utf-8";
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            TEXT,
            "only GET\n".to_owned(),
        );
    }
    match req.uri().path() {
        "/healthz" => match super::ops().health() {
            Ok(()) => reply(StatusCode::OK, TEXT, "ok\n".to_owned()),
            Err(why) => reply(StatusCode::SERVICE_UNAVAILABLE, TEXT, format!("{why}\n")),
        },
        "/metrics" => reply(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            super::ops().render_prometheus(),
        ),
        _ => reply(
            StatusCode::NOT_FOUND,
            TEXT,
            "not found: GET /healthz or /metrics\n".to_owned(),
        ),
    }
}
