//! The Discord bot adapter: the Gateway (WebSocket, v10, JSON) for
//! messages in, the REST API for replies (SPEC Y3, G1, G7).
//!
//! - **Connection** ([`conn`]): the Gateway URL from `GET /gateway/bot`;
//!   HELLO → heartbeats at the given interval (the first after a random
//!   part of it) carrying the last sequence number; a heartbeat not
//!   acknowledged before the next is due means a zombie connection, which is
//!   dropped and resumed. IDENTIFY asks for GUILD_MESSAGES, DIRECT_MESSAGES
//!   and MESSAGE_CONTENT; READY gives the session id, the resume URL and the
//!   bot's user id.
//! - **Resume**: after op 7 RECONNECT, a dropped socket or a resumable close
//!   code the adapter RESUMEs on `resume_gateway_url` with the session id
//!   and the last sequence, and Discord replays what was missed. Op 9
//!   INVALID_SESSION (`d: false`), close codes 4007/4009 or a refused resume
//!   start a new session (IDENTIFY after Discord's 1–5 s). A replayed
//!   message is answered once: the runner's durable inbox remembers every
//!   accepted message id (SPEC X5).
//! - **Catch-up** ([`catchup`]): a new session (a restart, op 9) reads, in
//!   the channels the bot has served, what was written since the newest
//!   message it handled there (kept in the store), which Discord does not
//!   replay; answered once like a replay.
//! - **Fatal**: close code 4004 (the token), 4013/4014 (intents) and the
//!   other non-recoverable codes stop the adapter with one error line that
//!   says what to fix — no reconnect storm. Failed connections back off
//!   (doubling, with jitter).
//! - **Messages** ([`inbound`]): DMs always, server channels when mentioned
//!   (or replied to, or in a free-response channel); bots never.
//! - **Questions** ([`choices`]): `clarify`'s choices as buttons; a press
//!   (INTERACTION_CREATE) is answered through the interaction callback and
//!   becomes a choice event.
//! - **Replies** ([`rest`]): `POST /channels/{id}/messages`, split at 2000
//!   characters ([`hermes_platform_kit::split`]), the first piece a reply to the user's
//!   message; the rate limits are waited out, and every piece carries an
//!   enforced nonce so a retry never posts it twice.
//! - The token never reaches a log line, an error or a `Debug` output.

mod catchup;
mod check;
mod choices;
mod conn;
pub mod descriptor;
mod inbound;
mod rest;
mod settings;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use hermes_runtime::sync::lock;
use serde_json::{Value, json};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use hermes_platform_kit::adapter::{
    AdapterError, EventHandler, FetchedMedia, FileKind, OutgoingFile, PlatformAdapter,
};
use hermes_platform_kit::event::MediaRef;
use hermes_platform_kit::lease::LeaseGate;
use hermes_platform_kit::split::{LengthUnit, split_message};
use rest::{Rest, RestError};

pub use catchup::MARK_KV_PREFIX;
pub use check::{BotCheck, ENABLE_INTENT, check_bot};
pub use choices::STALE_NOTE;
pub use settings::{DEFAULT_API_URL, DiscordConfig, DiscordConfigError};

/// The platform name in session keys.
pub const PLATFORM: &str = "discord";
/// Discord's limit for one message's `content`, in characters.
pub const MAX_MESSAGE_CHARS: usize = 2000;
/// The largest attachment a bot uploads (10 MiB without server boosts).
pub const MAX_UPLOAD_BYTES: u64 = 10 * 1024 * 1024;
/// GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT.
pub const INTENTS: u64 = (1 << 9) | (1 << 12) | (1 << 15);

/// Where the adapter stands.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DiscordState {
    /// `connect` was not called (or `disconnect` finished).
    Idle,
    /// Opening the Gateway, identifying or resuming.
    Connecting,
    /// READY (or RESUMED): messages flow.
    Connected,
    /// The connection was lost; the next attempt is on its way.
    Reconnecting {
        /// Attempts since the last READY/RESUMED.
        attempt: u32,
    },
    /// Stopped for good; the error says what to fix.
    Stopped(String),
}

/// State shared by the adapter handle and the connection task.
struct Inner {
    config: DiscordConfig,
    rest: Rest,
    gate: LeaseGate,
    state: watch::Sender<DiscordState>,
    /// Why the adapter stopped for good, as the runner reports errors.
    fatal: Mutex<Option<AdapterError>>,
    /// The bot's user id, from READY.
    bot_id: Mutex<Option<String>>,
    /// User id → the DM channel to answer them in.
    dm_channels: Mutex<HashMap<String, String>>,
    nonces: AtomicU64,
    nonce_seed: u64,
    /// The newest handled message per channel, for the catch-up.
    marks: catchup::Marks,
    /// `clarify` questions with live buttons (see [`choices`]).
    questions: Mutex<choices::Questions>,
}

impl Inner {
    fn set_state(&self, s: DiscordState) {
        self.state.send_replace(s);
    }

    /// A message nonce (≤ 25 characters) unique to this process's sends.
    fn nonce(&self) -> String {
        let n = self.nonces.fetch_add(1, Ordering::Relaxed);
        format!("{:x}{n:x}", self.nonce_seed & 0xffff_ffff_ffff)
    }

    /// The channel that answers reach `chat_id` in: a DM's remembered
    /// channel, else the chat id itself (a server channel or thread).
    fn channel_for(&self, chat_id: &str) -> String {
        lock(&self.dm_channels)
            .get(chat_id)
            .cloned()
            .unwrap_or_else(|| chat_id.to_owned())
    }

    /// Opens (or finds) the DM channel with `user_id`.
    async fn open_dm(&self, user_id: &str) -> Result<String, RestError> {
        let body = json!({ "recipient_id": user_id });
        let channel = self
            .rest
            .request("POST", "/users/@me/channels", Some(&body))
            .await?;
        let id = channel
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| RestError::Network("the DM channel has no id".to_owned()))?
            .to_owned();
        lock(&self.dm_channels).insert(user_id.to_owned(), id.clone());
        Ok(id)
    }
}

/// The running connection task and its stop switch.
type Task = Option<(watch::Sender<bool>, JoinHandle<()>)>;

/// The Discord adapter. Cheap to clone: all state is behind an `Arc`.
#[derive(Clone)]
pub struct DiscordAdapter {
    inner: Arc<Inner>,
    task: Arc<Mutex<Task>>,
}

impl fmt::Debug for DiscordAdapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiscordAdapter")
            .field("config", &self.inner.config)
            .field("state", &self.state())
            .finish()
    }
}

impl DiscordAdapter {
    /// An adapter with `config`; nothing happens until `connect`. It
    /// catches up on what it missed while the connection was down only
    /// within this process: see [`DiscordAdapter::with_store`].
    pub fn new(config: DiscordConfig) -> Self {
        Self::with_store(config, None)
    }

    /// An adapter that keeps, in `store`, the newest message it handled in
    /// each channel, and after a restart reads what was written there
    /// since (messages Discord does not replay to a new session).
    pub fn with_store(
        config: DiscordConfig,
        store: Option<Arc<Mutex<hermes_runtime::store::Store>>>,
    ) -> Self {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        let (state, _) = watch::channel(DiscordState::Idle);
        DiscordAdapter {
            inner: Arc::new(Inner {
                rest: Rest::new(&config),
                marks: catchup::Marks::new(store, &application_id(config.token.expose())),
                config,
                gate: LeaseGate::default(),
                state,
                fatal: Mutex::new(None),
                bot_id: Mutex::new(None),
                dm_channels: Mutex::new(HashMap::new()),
                nonces: AtomicU64::new(0),
                nonce_seed: h.finish(),
                questions: Mutex::default(),
            }),
            task: Arc::default(),
        }
    }

    /// The settings in use.
    pub fn config(&self) -> &DiscordConfig {
        &self.inner.config
    }

    /// Where the connection stands.
    pub fn state(&self) -> DiscordState {
        self.inner.state.borrow().clone()
    }

    /// The bot's user id, once READY.
    pub fn bot_user_id(&self) -> Option<String> {
        lock(&self.inner.bot_id).clone()
    }

    /// Why the adapter stopped for good, if it did (a refused token,
    /// intents not enabled).
    pub fn stop_error(&self) -> Option<String> {
        lock(&self.inner.fatal).as_ref().map(ToString::to_string)
    }

    /// Waits until the adapter has stopped for good; returns why.
    pub async fn wait_stopped(&self) -> String {
        let mut rx = self.inner.state.subscribe();
        loop {
            if let DiscordState::Stopped(why) = &*rx.borrow_and_update() {
                return why.clone();
            }
            if rx.changed().await.is_err() {
                return String::new();
            }
        }
    }

    /// The JSON of a message: `content`, an enforced nonce, no pings.
    fn message_body(&self, content: &str, reply_to: Option<&str>) -> Value {
        let mut body = json!({
            "content": content,
            "nonce": self.inner.nonce(),
            "enforce_nonce": true,
            // The model's text never pings @everyone, roles or users.
            "allowed_mentions": { "parse": [], "replied_user": true },
        });
        if let Some(id) = reply_to {
            // The user may have deleted their message: answer anyway.
            body["message_reference"] = json!({ "message_id": id, "fail_if_not_exists": false });
        }
        body
    }

    /// Sends one piece, a reply to `reply_to` if given.
    async fn send_piece(
        &self,
        chat_id: &str,
        channel: &str,
        piece: &str,
        reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        let body = self.message_body(piece, reply_to);
        self.post_message(chat_id, channel, &body).await.map(|_| ())
    }

    /// Creates a message in `channel`; returns the channel it went to.
    async fn post_message(
        &self,
        chat_id: &str,
        channel: &str,
        body: &Value,
    ) -> Result<(String, Value), AdapterError> {
        let path = format!("/channels/{channel}/messages");
        match self.inner.rest.request("POST", &path, Some(body)).await {
            Ok(message) => Ok((channel.to_owned(), message)),
            // A DM whose channel this process has not seen yet (the message
            // was accepted before a restart): open it and send there.
            Err(RestError::Api {
                code: Some(10003), ..
            }) if channel == chat_id => {
                let dm = self.inner.open_dm(chat_id).await.map_err(adapter_error)?;
                let path = format!("/channels/{dm}/messages");
                self.inner
                    .rest
                    .request("POST", &path, Some(body))
                    .await
                    .map(|message| (dm, message))
                    .map_err(adapter_error)
            }
            Err(e) => Err(adapter_error(e)),
        }
    }
}

/// The first part of a bot token (the application id, base64); the secret
/// part is never used.
fn application_id(token: &str) -> String {
    token
        .split('.')
        .next()
        .filter(|p| !p.is_empty() && p.len() <= 64)
        .unwrap_or("default")
        .to_owned()
}

fn adapter_error(e: RestError) -> AdapterError {
    match e {
        RestError::Api {
            status: 401,
            message,
            ..
        } => AdapterError::Auth {
            platform: PLATFORM,
            message: format!("DISCORD_BOT_TOKEN was rejected ({message})"),
        },
        RestError::Api { .. } => AdapterError::Rejected {
            platform: PLATFORM,
            message: e.to_string(),
        },
        RestError::Network(message) => AdapterError::Network {
            platform: PLATFORM,
            message,
        },
    }
}

#[async_trait]
impl PlatformAdapter for DiscordAdapter {
    fn platform(&self) -> &'static str {
        PLATFORM
    }

    fn max_message_len(&self) -> usize {
        MAX_MESSAGE_CHARS
    }

    fn length_unit(&self) -> LengthUnit {
        LengthUnit::Chars
    }

    /// The bot's application id is the first part of its token; the
    /// token itself is never named.
    fn bot_id(&self) -> String {
        application_id(self.inner.config.token.expose())
    }

    fn set_lease(&self, lease: Option<hermes_platform_kit::lease::Held>) {
        self.inner.gate.set(lease);
    }

    async fn connect(&self, handler: EventHandler) -> Result<(), AdapterError> {
        {
            let task = lock(&self.task);
            if task.as_ref().is_some_and(|(_, h)| !h.is_finished()) {
                return Ok(());
            }
        }
        *lock(&self.inner.fatal) = None;
        let (stop_tx, stop_rx) = watch::channel(false);
        let (first_tx, first_rx) = oneshot::channel();
        self.inner.set_state(DiscordState::Connecting);
        let handle = hermes_runtime::task::spawn(conn::run(
            Arc::clone(&self.inner),
            handler,
            stop_rx,
            first_tx,
        ));
        *lock(&self.task) = Some((stop_tx, handle));
        first_rx.await.unwrap_or_else(|_| {
            Err(AdapterError::Network {
                platform: PLATFORM,
                message: "the connection task ended before READY".to_owned(),
            })
        })
    }

    /// `GET /users/@me` and the application's MESSAGE CONTENT switch:
    /// without it the Gateway refuses the connection (close code 4014), so
    /// `--check` fails here rather than `run` in a restart loop.
    async fn verify(&self) -> Result<Option<String>, String> {
        let config = self.inner.config.clone();
        let bot = hermes_runtime::http::run_blocking(move || check_bot(&config))
            .await
            .map_err(|e| format!("discord: the check did not finish: {e}"))??;
        if bot.message_content == Some(false) {
            return Err(bot.describe());
        }
        let intents = match bot.message_content {
            Some(_) => "MESSAGE CONTENT intent enabled".to_owned(),
            None => format!("could not read the intents; make sure: {ENABLE_INTENT}"),
        };
        Ok(Some(format!("{} (bot id {}; {intents})", bot.name, bot.id)))
    }

    /// Resolves once the connection stopped for good (a token revoked
    /// mid-session, the intents switched off): only an operator can fix
    /// that, so the gateway exits non-zero for its service manager.
    async fn gave_up(&self) -> String {
        self.wait_stopped().await
    }

    async fn disconnect(&self) {
        let task = lock(&self.task).take();
        if let Some((stop, handle)) = task {
            let _ = stop.send(true);
            let abort = handle.abort_handle();
            if tokio::time::timeout(Duration::from_secs(5), handle)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        let stopped = matches!(self.state(), DiscordState::Stopped(_));
        if !stopped {
            self.inner.set_state(DiscordState::Idle);
        }
    }

    async fn send(
        &self,
        chat_id: &str,
        text: &str,
        reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        let channel = self.inner.channel_for(chat_id);
        let pieces = split_message(text, MAX_MESSAGE_CHARS, LengthUnit::Chars);
        let mut first = true;
        for piece in pieces.iter().filter(|p| !p.trim().is_empty()) {
            let reply = if first { reply_to } else { None };
            first = false;
            // A DM opened during the first piece is remembered for the rest.
            let channel = if channel == chat_id {
                self.inner.channel_for(chat_id)
            } else {
                channel.clone()
            };
            self.send_piece(chat_id, &channel, piece, reply).await?;
        }
        Ok(())
    }

    /// A question with choices as buttons (see `choices.rs`).
    async fn ask(
        &self,
        chat_id: &str,
        question: &hermes_runtime::tools::Question,
        reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        self.send_question(chat_id, question, reply_to).await
    }

    async fn question_closed(&self, chat_id: &str, reply_to: Option<&str>) {
        self.close_question(chat_id, reply_to).await;
    }

    fn can_send_files(&self) -> bool {
        true
    }

    /// A spoken reply goes as an audio attachment (Discord plays it).
    fn can_send_voice(&self) -> bool {
        true
    }

    /// Discord's attachment limit for bots in servers without boosts.
    fn max_upload_bytes(&self, _kind: FileKind) -> u64 {
        MAX_UPLOAD_BYTES
    }

    /// A message with the file attached (`multipart/form-data`: the
    /// message as `payload_json`, the file as `files[0]`).
    async fn send_file(
        &self,
        chat_id: &str,
        file: &OutgoingFile,
        reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        let caption: String = file.caption.chars().take(MAX_MESSAGE_CHARS).collect();
        let mut payload = self.message_body(&caption, reply_to);
        if caption.trim().is_empty() {
            payload["content"] = Value::Null;
        }
        payload["attachments"] = json!([{ "id": "0", "filename": file.file_name }]);
        let form = hermes_runtime::http::multipart::Form::new()
            .text("payload_json", &payload.to_string())
            .file(
                "files[0]",
                &file.file_name,
                file.content_type(),
                file.content.clone(),
            )
            .finish();
        let channel = self.inner.channel_for(chat_id);
        let path = format!("/channels/{channel}/messages");
        self.inner
            .rest
            .request_raw("POST", &path, Some((form.content_type, form.bytes)))
            .await
            .map(|_| ())
            .map_err(adapter_error)
    }

    /// `POST /channels/{id}/typing` (shows for about 10 s); best effort.
    async fn typing(&self, chat_id: &str) {
        let path = format!("/channels/{}/typing", self.inner.channel_for(chat_id));
        if let Err(e) = self.inner.rest.request("POST", &path, None).await {
            tracing::debug!(error = %e, "discord: typing indicator not shown");
        }
    }

    /// Downloads an attachment from Discord's CDN (the URL Discord gave).
    async fn fetch_media(
        &self,
        media: &MediaRef,
        max_bytes: u64,
    ) -> Result<FetchedMedia, AdapterError> {
        check::fetch(media, max_bytes, self.inner.config.connect_timeout).await
    }
}
