//! `hermes-wecom-callback`: WeCom's second integration mode, the HTTP
//! callback of a self-built app ("自建应用", SPEC G8, G1, G7). Platform name
//! `wecom_callback`.
//!
//! WeCom POSTs each user message, AES-encrypted inside a small XML envelope,
//! to a public URL; the adapter answers at once and the reply goes out later
//! through the REST API (`message/send`). Unlike the AI-bot WebSocket mode
//! (the gateway's `wecom` adapter) this reaches every member of the corp the app is
//! visible to, but needs a URL WeCom can reach and a trusted IP for the
//! API calls.
//!
//! Inbound, per request ([`endpoint`], the kit's `webhook` server): signature (SHA-1,
//! constant-time) → timestamp within the replay window → AES-256-CBC
//! decryption and corp id check ([`crypto`]) → message XML ([`xml`]) →
//! duplicate `MsgId`s dropped (WeCom retries a callback it got no answer to
//! within ~5 s) → one [`MessageEvent`] to the runner's handler, which makes
//! it durable and queues it → `200 success`. The turn runs in the
//! background; anything refused is logged and answered 4xx, never passed on.
//!
//! Outbound ([`api`]): the text is split into ≤ 2048-byte pieces
//! (`hermes_platform_kit::split`, counting bytes, never cut) and each is sent with
//! `message/send`, with the cached access token.
//!
//! The corp secret, the token and the EncodingAESKey never reach a log line,
//! an error or a `Debug` output.

pub mod api;
pub mod config;
pub mod crypto;
pub mod descriptor;
pub mod endpoint;
pub mod transport;
pub mod xml;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use hermes_runtime::sync::lock;

pub use api::{ApiError, Media, MessageFormat, QyApi};
pub use config::{WecomCallbackConfig, WecomCallbackConfigError};
use endpoint::Endpoint;
pub use endpoint::{fuzz_callback_body, fuzz_decrypt, fuzz_message_xml};
use hermes_platform_kit::adapter::{AdapterError, EventHandler, FetchedMedia, PlatformAdapter};
use hermes_platform_kit::dedup::Dedup;
use hermes_platform_kit::event::MediaRef;
use hermes_platform_kit::event::{ChatType, MessageEvent, SessionSource};
use hermes_platform_kit::lease::LeaseGate;
use hermes_platform_kit::split::{LengthUnit, split_message};
use hermes_platform_kit::webhook::{Handler, Post, Reply, WebhookConfig, WebhookServer};
use transport::{HttpTransport, UreqTransport};
use xml::Inbound;

/// The platform name in session keys and allow-lists
/// (`WECOM_CALLBACK_ALLOWED_USERS`).
pub const PLATFORM: &str = "wecom_callback";
/// `message/send`'s limit for text and markdown content, in UTF-8 bytes.
pub const MAX_MESSAGE_BYTES: usize = 2048;
/// What WeCom expects as the answer to a callback it should not retry.
const ACK: &str = "success";
/// How long `connect` waits for the first access token before going on
/// without one (replies fetch it again).
const FIRST_TOKEN_WAIT: Duration = Duration::from_secs(10);

/// The callback adapter. Cheap to share.
#[derive(Clone)]
pub struct WecomCallbackAdapter {
    inner: Arc<Inner>,
}

struct Inner {
    config: WecomCallbackConfig,
    /// Whether this process serves the app's callbacks (SPEC X8).
    gate: LeaseGate,
    endpoint: Endpoint,
    api: QyApi,
    server: tokio::sync::Mutex<Option<WebhookServer>>,
    addr: Mutex<Option<SocketAddr>>,
}

impl std::fmt::Debug for WecomCallbackAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WecomCallbackAdapter")
            .field("config", &self.inner.config)
            .field("listening", &self.local_addr())
            .finish()
    }
}

impl WecomCallbackAdapter {
    /// An adapter for `config`, replying through the shared HTTP agent.
    /// Nothing listens until `connect`.
    pub fn new(config: WecomCallbackConfig) -> Result<Self, WecomCallbackConfigError> {
        Self::with_transport(config, Arc::new(UreqTransport))
    }

    /// [`Self::new`] with another HTTP client for the qyapi calls.
    pub fn with_transport(
        config: WecomCallbackConfig,
        http: Arc<dyn HttpTransport>,
    ) -> Result<Self, WecomCallbackConfigError> {
        config.validate()?;
        let crypto = crypto::CallbackCrypto::new(
            config.token.expose(),
            config.encoding_aes_key.expose(),
            &config.corp_id,
        )
        .map_err(WecomCallbackConfigError::Key)?;
        let endpoint = Endpoint::new(
            crypto,
            Some(config.agent_id.to_string()),
            config.replay_window.map(|w| w.as_secs()),
        );
        let api = QyApi::new(
            api::ApiConfig {
                base_url: config.api_url.clone(),
                corp_id: config.corp_id.clone(),
                corp_secret: config.corp_secret.clone(),
                agent_id: config.agent_id,
                timeout: config.api_timeout,
                max_attempts: config.api_max_attempts,
                backoff: config.api_backoff,
                max_media_bytes: config.max_media_bytes,
            },
            http,
            Arc::clone(&config.clock),
        );
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                gate: LeaseGate::default(),
                endpoint,
                api,
                server: tokio::sync::Mutex::new(None),
                addr: Mutex::new(None),
            }),
        })
    }

    /// The adapter configured from the environment (see [`config::from_env`]
    /// for the variables), or `None` when WeCom callback mode is not set up.
    pub fn from_env(
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Option<Result<Self, WecomCallbackConfigError>> {
        Some(config::from_env(env)?.and_then(Self::new))
    }

    /// The settings in use.
    pub fn config(&self) -> &WecomCallbackConfig {
        &self.inner.config
    }

    /// Where the callback server listens, while connected (the real port
    /// when configured with port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        *lock(&self.inner.addr)
    }

    /// Downloads the media of an image, voice, video or file message
    /// (`media/get`, at most [`WecomCallbackConfig::max_media_bytes`]).
    pub async fn fetch_media(&self, media_id: &str) -> Result<Media, AdapterError> {
        self.inner
            .api
            .media(media_id)
            .await
            .map_err(ApiError::into_adapter_error)
    }
}

/// The callback URL's behaviour while connected.
struct Callbacks {
    inner: Arc<Inner>,
    handler: EventHandler,
    seen: Mutex<Dedup>,
}

impl Callbacks {
    fn now_ms(&self) -> u64 {
        self.inner.config.clock.now_ms()
    }

    fn refused(what: &str, e: &endpoint::Refusal, peer: SocketAddr) -> Reply {
        tracing::warn!(%peer, reason = %e, "wecom_callback: refused a {what}");
        Reply {
            status: e.status(),
            body: e.to_string(),
        }
    }
}

impl Handler for Callbacks {
    fn get(&self, query: &str, peer: SocketAddr) -> Reply {
        match self.inner.endpoint.verify_url(query, self.now_ms() / 1000) {
            Ok(echo) => {
                tracing::info!(%peer, "wecom_callback: callback URL verified");
                Reply::ok(echo)
            }
            Err(e) => Self::refused("URL verification", &e, peer),
        }
    }

    fn post(&self, post: &Post<'_>, peer: SocketAddr) -> Reply {
        let (query, body) = (post.query, post.body);
        let now_ms = self.now_ms();
        let message = match self.inner.endpoint.receive(query, body, now_ms / 1000) {
            Ok(Inbound::Message(m)) => m,
            Ok(Inbound::Event { user_id, event }) => {
                tracing::debug!(%user_id, %event, "wecom_callback: event acknowledged");
                return Reply::ok(ACK);
            }
            Err(e) => return Self::refused("callback", &e, peer),
        };
        // Another gateway serves this app now (this one lost its lease, or
        // was stopped and has just woken): not accepted here, so WeCom
        // retries it — towards the gateway that serves it.
        if !self.inner.gate.is_open() {
            tracing::info!(msg_id = %message.msg_id, "wecom_callback: not serving this app (lease gone); 503");
            return Reply {
                status: 503,
                body: "not serving".to_owned(),
            };
        }
        // WeCom retries a callback it got no answer to in time; the retry
        // carries the same MsgId (G7).
        if !lock(&self.seen).first_sighting(PLATFORM, &message.user_id, &message.msg_id, now_ms) {
            tracing::debug!(msg_id = %message.msg_id, "wecom_callback: duplicate MsgId dropped");
            return Reply::ok(ACK);
        }
        let event = MessageEvent {
            message_id: message.msg_id,
            text: message.text,
            source: SessionSource {
                platform: PLATFORM.to_owned(),
                // A self-built app's callbacks are one-to-one: the chat is
                // the user.
                chat_id: message.user_id.clone(),
                chat_type: ChatType::Dm,
                user_id: message.user_id,
                user_name: None,
                thread_id: None,
            },
            message_type: message.message_type,
            media: message.media,
        };
        // The runner makes the message durable before this returns, so the
        // acknowledgement below loses nothing (E3).
        (self.handler)(event);
        Reply::ok(ACK)
    }
}

#[async_trait]
impl PlatformAdapter for WecomCallbackAdapter {
    fn platform(&self) -> &'static str {
        PLATFORM
    }

    /// The app: corp id and agent id (public identifiers, not secrets).
    fn bot_id(&self) -> String {
        format!(
            "{}:{}",
            self.inner.config.corp_id, self.inner.config.agent_id
        )
    }

    fn set_lease(&self, lease: Option<hermes_platform_kit::lease::Held>) {
        self.inner.gate.set(lease);
    }

    fn max_message_len(&self) -> usize {
        MAX_MESSAGE_BYTES
    }

    async fn connect(&self, handler: EventHandler) -> Result<(), AdapterError> {
        let mut running = self.inner.server.lock().await;
        if running.is_some() {
            tracing::warn!("wecom_callback: connect called while already listening");
            return Ok(());
        }
        let c = &self.inner.config;
        let listener = tokio::net::TcpListener::bind(c.listen).await.map_err(|e| {
            AdapterError::Network {
                platform: PLATFORM,
                message: format!(
                    "cannot listen on {} ({e}); check WECOM_CALLBACK_HOST and WECOM_CALLBACK_PORT",
                    c.listen
                ),
            }
        })?;
        let callbacks = Arc::new(Callbacks {
            inner: Arc::clone(&self.inner),
            handler,
            seen: Mutex::new(Dedup::new(
                u64::try_from(c.dedup_window.as_millis()).unwrap_or(u64::MAX),
                c.dedup_capacity,
            )),
        });
        let server_config = WebhookConfig {
            name: "wecom_callback",
            path: c.path.clone(),
            max_body: c.max_body_bytes,
            header_timeout: c.header_timeout,
            body_timeout: c.body_timeout,
            max_connections: c.max_connections,
            shutdown_grace: c.shutdown_grace,
        };
        let server = WebhookServer::start(listener, server_config, callbacks).map_err(|e| {
            AdapterError::Network {
                platform: PLATFORM,
                message: format!("cannot start the callback server: {e}"),
            }
        })?;
        // Refused credentials will not get better: stop now, naming them.
        // Anything else (qyapi unreachable for a moment) only delays the
        // first reply, which fetches the token again.
        match tokio::time::timeout(FIRST_TOKEN_WAIT, self.inner.api.access_token()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e @ ApiError::Credentials { .. })) => {
                server.stop().await;
                return Err(e.into_adapter_error());
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "wecom_callback: no access token yet; replies will retry")
            }
            Err(_) => tracing::warn!("wecom_callback: gettoken is slow; replies will retry"),
        }
        let addr = server.local_addr();
        tracing::info!(%addr, path = %c.path, "wecom_callback: listening for callbacks");
        *lock(&self.inner.addr) = Some(addr);
        *running = Some(server);
        Ok(())
    }

    /// The port is bindable (unless this adapter already listens on it)
    /// and `gettoken` accepts the corp id and secret.
    async fn verify(&self) -> Result<Option<String>, String> {
        let c = &self.inner.config;
        if self.inner.server.lock().await.is_none() {
            tokio::net::TcpListener::bind(c.listen).await.map_err(|e| {
                format!(
                    "wecom_callback: cannot listen on {} ({e}); check WECOM_CALLBACK_HOST and WECOM_CALLBACK_PORT",
                    c.listen
                )
            })?;
        }
        match tokio::time::timeout(FIRST_TOKEN_WAIT, self.inner.api.access_token()).await {
            Ok(Ok(_)) => Ok(Some(format!(
                "app {} of corp {}, callbacks on {}",
                c.agent_id, c.corp_id, c.listen
            ))),
            Ok(Err(e)) => Err(e.into_adapter_error().to_string()),
            Err(_) => Err(format!(
                "wecom_callback: gettoken did not answer within {} s (WECOM_CALLBACK_API_URL?)",
                FIRST_TOKEN_WAIT.as_secs()
            )),
        }
    }

    async fn disconnect(&self) {
        let server = self.inner.server.lock().await.take();
        if let Some(server) = server {
            server.stop().await;
        }
        *lock(&self.inner.addr) = None;
    }

    /// `media/get` of the message's media id (SPEC X6).
    async fn fetch_media(
        &self,
        media: &MediaRef,
        max_bytes: u64,
    ) -> Result<FetchedMedia, AdapterError> {
        let fetched = self.fetch_media(&media.handle).await?;
        if fetched.bytes.len() as u64 > max_bytes {
            return Err(AdapterError::Rejected {
                platform: PLATFORM,
                message: format!(
                    "the file is {} bytes, more than the {max_bytes} accepted",
                    fetched.bytes.len()
                ),
            });
        }
        Ok(FetchedMedia {
            bytes: fetched.bytes,
            mime_type: fetched.content_type.or_else(|| media.mime_type.clone()),
            file_name: fetched.file_name.or_else(|| media.file_name.clone()),
        })
    }

    async fn send(
        &self,
        chat_id: &str,
        text: &str,
        _reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        let format = self.inner.config.message_format;
        for piece in split_message(text, MAX_MESSAGE_BYTES, LengthUnit::Bytes) {
            // WeCom refuses empty content; whitespace between pieces is not
            // worth a message.
            if piece.trim().is_empty() {
                continue;
            }
            self.inner
                .api
                .send_message(chat_id, format, &piece)
                .await
                .map_err(ApiError::into_adapter_error)?;
        }
        Ok(())
    }
}
