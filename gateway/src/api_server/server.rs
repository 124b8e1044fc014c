//! The listener: the gateway's one accept loop ([`crate::http_server`]:
//! a cap on open connections, a deadline for each request head, graceful
//! stop) with the API server's routes.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::http_server::{self, Limits};

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
        let task = hermes_runtime::task::spawn(accept_loop(listener, state, stop_rx));
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

async fn accept_loop(listener: TcpListener, state: Arc<State>, stop: watch::Receiver<bool>) {
    let config = &state.config;
    let limits = Limits {
        name: "api_server",
        max_connections: config.max_connections,
        header_timeout: config.header_timeout,
        max_buf_size: 64 * 1024,
        shutdown_grace: config.shutdown_grace,
    };
    let handler = move |req, peer| handle(Arc::clone(&state), req, peer);
    http_server::serve(listener, limits, handler, stop).await;
}
