//! The listener (hyper 1 `http1` + hyper-util, the project's one server
//! stack, as in `wecom_callback::server`): a cap on open connections, a
//! deadline for each request head, graceful stop.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::{JoinHandle, JoinSet};

use super::handler::{State, handle};

/// A running API server.
#[derive(Debug)]
pub struct ApiServer {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl ApiServer {
    /// Serves `listener` in a background task of the current runtime.
    pub(super) fn start(listener: TcpListener, state: Arc<State>) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(accept_loop(listener, state, stop_rx));
        Ok(Self { addr, stop, task })
    }

    /// The address it listens on (the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, lets requests in flight finish (up to the grace
    /// period; a run whose connection is then dropped is interrupted) and
    /// returns once the listener is closed.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let abort = self.task.abort_handle();
        if self.task.await.is_err() {
            abort.abort();
        }
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>, mut stop: watch::Receiver<bool>) {
    let config = &state.config;
    let slots = Arc::new(Semaphore::new(config.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    loop {
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
                    tracing::warn!(error = %e, "api_server: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let _ = stream.set_nodelay(true);
        let conn_state = Arc::clone(&state);
        let service = service_fn(move |req| {
            let state = Arc::clone(&conn_state);
            async move { Ok::<_, Infallible>(handle(state, req, peer).await) }
        });
        // half_close stays off: a client that closes its side mid-request
        // closes the connection, which drops the request's future and so
        // interrupts its run.
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(config.header_timeout)
            .max_buf_size(64 * 1024)
            .serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        connections.spawn(async move {
            let _permit = permit;
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "api_server: connection ended with an error");
            }
        });
    }
    drop(listener);
    let grace = config.shutdown_grace;
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?grace,
            "api_server: connections still open after the grace period; dropping them"
        );
        connections.abort_all();
    }
    while connections.join_next().await.is_some() {}
}
