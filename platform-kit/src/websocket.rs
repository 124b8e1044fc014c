//! Opening the WebSocket of a socket platform (Discord's Gateway, Slack's
//! Socket Mode, WeCom's AI bot): TLS through rustls with `ring` and the
//! webpki roots, built per connection, so no process-level
//! `CryptoProvider` is needed.
//!
//! One place for the three adapters, and one copy of the handshake's
//! generic code in the binary: each crate that called tokio-tungstenite's
//! connect instantiated it again (no shared generics on stable Rust;
//! benchmarks/runs/2026-12-05-crates-cost-generics.md).

use std::sync::Arc;

use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::{
    Connector, MaybeTlsStream, WebSocketStream, connect_async_tls_with_config,
};

pub use tokio_tungstenite::tungstenite::Error;

/// A client WebSocket, plain or TLS.
pub type WsStream = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The TLS client configuration for `wss://` URLs.
pub fn tls_connector() -> Result<Connector, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup failed: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Connector::Rustls(Arc::new(config)))
}

/// Opens `url` (`ws://` or `wss://`) through `connector`, frames and
/// messages capped at `max_bytes`; `disable_nagle` sends small frames at
/// once.
pub async fn connect(
    url: &str,
    max_bytes: usize,
    disable_nagle: bool,
    connector: Connector,
) -> Result<WsStream, Error> {
    let limits = WebSocketConfig::default()
        .max_frame_size(Some(max_bytes))
        .max_message_size(Some(max_bytes));
    let (ws, _response) =
        connect_async_tls_with_config(url, Some(limits), disable_nagle, Some(connector)).await?;
    Ok(ws)
}
