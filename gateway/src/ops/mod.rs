//! What an operator asks of a running gateway (issue 31, item 9): is it
//! running, which platforms are connected, when did it last serve, and the
//! counters behind `/metrics`.
//!
//! - [`metrics`]: the counters, kept in the process ([`ops`]) — one
//!   gateway per process (the home's lock), so one registry.
//! - [`status`]: the status file the gateway keeps in `$HERMES_HOME`
//!   (`gateway.status.json`, refreshed every few seconds, no secrets) and
//!   `hermes gateway status`, which reads it with the home's lock.
//! - `http` (feature `metrics`): `GET /healthz` and `GET /metrics`
//!   (Prometheus text) on a loopback port, only when
//!   `[gateway] metrics_port` / `GATEWAY_METRICS_PORT` is set.

/// The counters live with the runner that counts (`hermes_runner::ops`).
pub use hermes_runner::ops as metrics;
pub mod status;

#[cfg(feature = "metrics")]
pub mod http;

pub use metrics::{Ops, PlatformState, ops};

use std::path::Path;

use crate::error::GatewayError;

/// What `hermes gateway run` keeps running for the operator: the status
/// file's writer and, when configured, the metrics endpoint.
#[derive(Debug)]
pub struct OpsHandle {
    stop: tokio::sync::watch::Sender<bool>,
    writer: tokio::task::JoinHandle<()>,
    #[cfg(feature = "metrics")]
    server: Option<http::OpsServer>,
}

/// Starts counting for `platforms`, the status file of `home`, and the
/// endpoint on `metrics_port` (a port in use is a configuration error
/// naming the setting).
pub async fn start(
    home: &Path,
    platforms: &[&str],
    metrics_port: Option<u16>,
) -> Result<OpsHandle, GatewayError> {
    ops().started(platforms);
    #[cfg(feature = "metrics")]
    let server = match metrics_port {
        Some(port) => {
            let server = http::OpsServer::bind(port).await.map_err(|e| {
                GatewayError::Platform(format!(
                    "gateway.metrics_port / GATEWAY_METRICS_PORT: cannot listen on 127.0.0.1:{port}: {e}"
                ))
            })?;
            tracing::info!(addr = %server.local_addr(), "serving /healthz and /metrics");
            Some(server)
        }
        None => None,
    };
    #[cfg(not(feature = "metrics"))]
    if metrics_port.is_some() {
        return Err(GatewayError::Platform(
            "gateway.metrics_port / GATEWAY_METRICS_PORT is set, but this hermes was built \
             without the `metrics` feature"
                .to_owned(),
        ));
    }
    #[cfg(feature = "metrics")]
    let addr = server
        .as_ref()
        .map(|s| format!("http://{}", s.local_addr()));
    #[cfg(not(feature = "metrics"))]
    let addr = None;
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let writer =
        hermes_runtime::task::spawn(status::keep_written(home.to_path_buf(), addr, stop_rx));
    Ok(OpsHandle {
        stop,
        writer,
        #[cfg(feature = "metrics")]
        server,
    })
}

impl OpsHandle {
    /// Stops the endpoint and writes the status file a last time, marked
    /// stopped.
    pub async fn stop(self) {
        #[cfg(feature = "metrics")]
        if let Some(server) = self.server {
            server.stop().await;
        }
        let _ = self.stop.send(true);
        let _ = self.writer.await;
    }
}
