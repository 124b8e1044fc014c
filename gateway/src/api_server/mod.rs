//! An OpenAI-compatible API server (platform `api_server`, hermes-agent's
//! settings): every chat front end that speaks OpenAI's API — Open WebUI,
//! LibreChat, phone apps, the `openai` client libraries — becomes a hermes
//! front end, with the agent's tools, memory and sandbox behind it.
//!
//! - `GET /v1/models` lists one model (`API_SERVER_MODEL_NAME`),
//!   `GET /v1/health` answers without a key.
//! - `POST /v1/chat/completions`, plain or `stream: true` ([`stream`]): the
//!   client's messages are the conversation (OpenAI's semantics: the client
//!   holds the history; its system messages are added to the agent's
//!   prompt); the agent runs its loop with its tools and the final answer
//!   is the assistant message. Tool calls and results are never sent as
//!   text. Each request runs in a stored session whose id the response
//!   names in `X-Hermes-Session-Id`; sending that header continues the
//!   stored session instead (its transcript is the history, only the
//!   client's last message is new).
//! - Every request but the health check needs `Authorization: Bearer
//!   API_SERVER_KEY` (compared in constant time, never logged). Errors are
//!   OpenAI's error shape: 400 bad body (before any model call), 401, 404
//!   unknown model/session, 409 session busy, 413 body too large, 429 at
//!   `API_SERVER_MAX_CONCURRENT` runs, 502 the provider failed.
//! - A client that disconnects interrupts its run (the agent's
//!   [`hermes_core::InterruptFlag`]).

pub mod config;
pub mod descriptor;
mod handler;
mod run;
mod server;
mod spend;
mod stream;
pub mod wire;

use std::sync::{Arc, Mutex};

use hermes_runtime::store::Store;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

pub use config::{ApiServerConfig, ApiServerConfigError};
pub use handler::SESSION_HEADER;
pub use run::PLATFORM;
pub use server::ApiServer;

use crate::runner::AgentFactory;

/// The server's settings from the configuration (`[api_server]` under the
/// `API_SERVER_*` variables); `Ok(None)` when it is not enabled.
pub fn settings(
    settings: &hermes_runtime::config::Settings,
) -> Result<Option<ApiServerConfig>, ApiServerConfigError> {
    let mut config = ApiServerConfig::from_sources(&settings.file, &|name| {
        settings.var(name).map(str::to_owned)
    })?;
    if let Some(config) = &mut config {
        config.limits = settings
            .spending_limits()
            .map_err(|e| ApiServerConfigError(e.to_string()))?;
    }
    Ok(config)
}

impl ApiServer {
    /// Binds `config.listen` and serves on the current tokio runtime; the
    /// agents come from `factory` (the gateway's, so a request gets the same
    /// tools and prompt as a chat), the sessions live in `store`.
    pub async fn bind(
        config: ApiServerConfig,
        factory: Arc<dyn AgentFactory>,
        store: Arc<Mutex<Store>>,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(config.listen).await?;
        let state = handler::State {
            runs: Arc::new(Semaphore::new(config.max_concurrent.max(1))),
            services: Arc::new(run::Services {
                factory,
                store,
                busy: Mutex::default(),
                limits: config.limits.clone(),
                call_sizes: Arc::default(),
            }),
            config,
        };
        let server = Self::start(listener, Arc::new(state))?;
        tracing::info!(addr = %server.local_addr(), "api_server: listening");
        Ok(server)
    }
}
