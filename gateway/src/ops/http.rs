//! `GET /healthz` and `GET /metrics` on a loopback port (issue 31, item 9),
//! served with hyper 1 like the API server. Off unless
//! `[gateway] metrics_port` / `GATEWAY_METRICS_PORT` is set; always bound
//! to 127.0.0.1 — a scraper elsewhere goes through the operator's own
//! proxy. No request reads a body; nothing here changes the gateway.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

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
        let task = tokio::spawn(accept_loop(listener, stop_rx));
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

async fn accept_loop(listener: TcpListener, mut stop: watch::Receiver<bool>) {
    // A scrape is one small request: a few at a time is plenty.
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(8));
    loop {
        let permit = tokio::select! {
            p = std::sync::Arc::clone(&slots).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            _ = stop.changed() => return,
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics endpoint: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(Duration::from_secs(5))
            .max_buf_size(16 * 1024)
            .serve_connection(
                TokioIo::new(stream),
                service_fn(|req| async move { Ok::<_, Infallible>(respond(&req)) }),
            );
        tokio::spawn(async move {
            let _permit = permit;
            let _ = tokio::time::timeout(Duration::from_secs(30), conn).await;
        });
    }
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
