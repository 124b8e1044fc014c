//! The one HTTP/1 accept loop of the gateway's servers (the WeCom app's
//! callback endpoint, the OpenAI-compatible API server, `/healthz` and
//! `/metrics`): hyper 1
//! `http1` + hyper-util, a cap on open connections, a deadline for each
//! request head, a bounded read buffer and a graceful stop.
//!
//! Each server keeps its own routing and state; it hands this loop a
//! function from a request (and the peer's address) to a response.

use std::convert::Infallible;
use std::error::Error as StdError;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

/// The limits a server is run with.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Who serves, for the log lines (`"api_server"`, `"wecom_callback"`).
    pub name: &'static str,
    /// Connections served at once; the next accept waits for a free slot.
    pub max_connections: usize,
    /// Deadline for the request line and headers.
    pub header_timeout: Duration,
    /// hyper's read buffer cap (a longer request head is refused).
    pub max_buf_size: usize,
    /// How long stopping waits for requests in flight before dropping them.
    pub shutdown_grace: Duration,
}

/// Serves `listener` until `stop` changes, each request answered by
/// `handle(request, peer)`; returns once every connection is closed.
///
/// `half_close` stays off: a client that closes its side mid-request
/// closes the connection, which drops the request's future (the API
/// server relies on it to interrupt the client's run).
pub async fn serve<H, F, B>(
    listener: TcpListener,
    limits: Limits,
    handle: H,
    mut stop: watch::Receiver<bool>,
) where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let name = limits.name;
    let handle = Arc::new(handle);
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    loop {
        // Reap finished connections so the set stays as small as the load.
        while connections.try_join_next().is_some() {}
        let permit = tokio::select! {
            p = Arc::clone(&slots).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = stop.changed() => break,
        };
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(conn) => conn,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "{name}: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let _ = stream.set_nodelay(true);
        let handle = Arc::clone(&handle);
        let service = service_fn(move |req| {
            let answer = handle(req, peer);
            async move { Ok::<_, Infallible>(answer.await) }
        });
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .max_buf_size(limits.max_buf_size)
            .serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        hermes_runtime::task::spawn_in(&mut connections, async move {
            let _permit = permit;
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "{name}: connection ended with an error");
            }
        });
    }
    drop(listener);
    let grace = limits.shutdown_grace;
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?grace,
            "{name}: connections still open after the grace period; dropping them"
        );
        connections.abort_all();
    }
    while connections.join_next().await.is_some() {}
}
