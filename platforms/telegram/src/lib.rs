//! The Telegram Bot API adapter (SPEC G9, G1, G7).
//!
//! Inbound: long polling with `getUpdates` (`offset` = last handled
//! `update_id` + 1, persisted through an [`OffsetStore`] after each batch has
//! been handed to the handler, so a restart neither loses nor repeats
//! updates). Messages become [`MessageEvent`]s; in groups only messages that
//! mention the bot, reply to it or carry a command are passed on
//! ([`GroupPolicy`]). Bots, edits, channel posts and service messages are
//! skipped; repeats are dropped by `(chat, message_id)` in a bounded window.
//!
//! Outbound: `sendMessage`, split at 4096 UTF-16 code units, formatted as
//! Telegram HTML converted from the reply's Markdown ([`format`]); a chunk
//! Telegram refuses with 400 is resent as plain text, never dropped. Files
//! (the rest of a reply too long for messages, [`hermes_platform_kit::overflow`]) go as
//! `sendDocument` with a `multipart/form-data` body.
//!
//! Faults: 429 waits out `retry_after`; 5xx and network errors are retried
//! with backoff (bounded per send, unbounded but capped in the poll loop so
//! an outage does not kill the gateway); 401/404 stop the adapter with
//! [`AdapterError::Auth`], 409 with [`AdapterError::Conflict`]. The token
//! never appears in errors or logs.
//!
//! Some servers (the `telegram-test-api` emulator) ignore `timeout` and
//! answer empty polls at once; the loop then pauses
//! [`TelegramConfig::empty_poll_pause`] between polls instead of spinning.

// Numbers in this module tree come from Telegram (ids, offsets, error
// codes, retry_after): arithmetic on them must be checked or saturating,
// never wrap or panic.
#![warn(clippy::arithmetic_side_effects)]

mod api;
mod check;
mod choices;
pub mod descriptor;
pub mod format;
#[doc(hidden)]
pub mod fuzz_entry;
mod inbound;
mod media;
mod offsets;
mod poll;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use hermes_runtime::http;
use hermes_runtime::secret::Secret;
use hermes_runtime::sync::lock;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use hermes_platform_kit::adapter::{
    AdapterError, EventHandler, FetchedMedia, FileKind, OutgoingFile, PlatformAdapter, ReplyStream,
};
use hermes_platform_kit::event::MediaRef;
use hermes_platform_kit::lease::{Held, LeaseGate};
use hermes_platform_kit::split::{LengthUnit, split_message};

pub use api::RetryPolicy;
pub(crate) use api::read_answer;
use api::{Api, CallError, PLATFORM};
pub use check::{allow_list_problems, check_env, token_problem};
use inbound::Recent;
pub(crate) use inbound::translate;
pub use inbound::{BotIdentity, GroupPolicy};
pub use offsets::{MemoryOffsets, OffsetStore};
pub(crate) use poll::take_batch;
pub use poll::{OFFSET_KEY, StoreOffsets};

/// Telegram's limit for one message, in UTF-16 code units.
pub const MAX_MESSAGE_UTF16: usize = 4096;

/// Telegram's limit for a document caption, in characters.
const MAX_CAPTION_CHARS: usize = 1024;
/// The largest photo the Bot API takes by upload.
const MAX_PHOTO_BYTES: u64 = 10 * 1000 * 1000;
/// The largest other file the Bot API takes by upload.
const MAX_UPLOAD_BYTES: u64 = 50 * 1000 * 1000;

/// The public Bot API endpoint.
pub const DEFAULT_API_URL: &str = "https://api.telegram.org";

/// Settings for [`TelegramAdapter`].
#[derive(Clone, Debug)]
pub struct TelegramConfig {
    /// The bot token from @BotFather. Never logged (a [`Secret`]).
    pub token: Secret,
    /// The API base; requests go to `{api_url}/bot{token}/{method}`.
    pub api_url: String,
    /// The `getUpdates` long-poll timeout in seconds (Telegram holds the
    /// request this long when there is nothing to deliver).
    pub poll_timeout_s: u64,
    /// When to answer in groups.
    pub group_policy: GroupPolicy,
    /// The pause after a poll that came back empty well before its timeout
    /// (servers that ignore `timeout`), so the loop never spins.
    pub empty_poll_pause: Duration,
    /// Retries for 5xx and network errors.
    pub retry: RetryPolicy,
    /// How many recent `(chat, message_id)` pairs are remembered for dedup.
    pub dedup_window: usize,
}

impl TelegramConfig {
    /// Defaults for everything but the token: the public API, 30 s polls,
    /// triggered-only groups.
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            token: Secret::new(token),
            api_url: DEFAULT_API_URL.to_owned(),
            poll_timeout_s: 30,
            group_policy: GroupPolicy::default(),
            empty_poll_pause: Duration::from_millis(300),
            retry: RetryPolicy::default(),
            dedup_window: 2048,
        }
    }
}

/// A Telegram setting that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum TelegramConfigError {
    /// The token is empty or contains characters that cannot be in a token.
    #[error("TELEGRAM_BOT_TOKEN is malformed (empty, or contains whitespace, '/', '?' or '#')")]
    BadToken,
    /// The API base is not an http(s) URL.
    #[error("TELEGRAM_API_URL must start with http:// or https://, got {0:?}")]
    BadApiUrl(String),
    /// `TELEGRAM_POLL_TIMEOUT` is not a number of seconds.
    #[error("TELEGRAM_POLL_TIMEOUT must be whole seconds (0..=600), got {0:?}")]
    BadPollTimeout(String),
    /// `TELEGRAM_GROUP_POLICY` is not understood.
    #[error(
        "TELEGRAM_GROUP_POLICY must be \"all\", \"triggered\" or a comma list of mention,reply,command; got {0:?}"
    )]
    BadGroupPolicy(String),
}

/// Where the poll loop is.
#[derive(Clone, Debug)]
enum Status {
    Idle,
    Polling,
    Stopped(Option<Arc<AdapterError>>),
}

struct Inner {
    config: TelegramConfig,
    api: Api,
    offsets: Arc<dyn OffsetStore>,
    bot: Mutex<Option<BotIdentity>>,
    recent: Mutex<Recent>,
    /// Whether this process may poll the bot (SPEC X8): checked before
    /// every `getUpdates` and before a batch is handed on.
    gate: LeaseGate,
}

struct Running {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// The Telegram Bot API adapter. See the module docs.
pub struct TelegramAdapter {
    inner: Arc<Inner>,
    running: tokio::sync::Mutex<Option<Running>>,
    status: Arc<watch::Sender<Status>>,
}

impl std::fmt::Debug for TelegramAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelegramAdapter")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// `@username (bot id N)`, as the log and `--check` name the bot.
fn bot_name(bot: &BotIdentity) -> String {
    match &bot.username {
        Some(u) => format!("@{u} (bot id {})", bot.id),
        None => format!("bot id {}", bot.id),
    }
}

impl TelegramAdapter {
    /// Fills the bot's command menu (`setMyCommands`) from the gateway's
    /// commands. Best effort: without it the commands still work, so a
    /// refusal is a warning, never a failed connection.
    async fn publish_command_menu(&self) {
        let commands: Vec<Value> = hermes_platform_kit::command::menu()
            .into_iter()
            .map(|(command, description)| json!({"command": command, "description": description}))
            .collect();
        let set = self
            .inner
            .api
            .call_once(
                "setMyCommands",
                &json!({ "commands": commands }),
                Duration::from_secs(10),
            )
            .await;
        if let Err(e) = set {
            tracing::warn!(
                error = %e.into_adapter_error(),
                "telegram: cannot fill the command menu (setMyCommands); the commands still work"
            );
        }
    }

    /// An adapter for `config`, saving its poll offset in `offset_store`.
    pub fn new(
        config: TelegramConfig,
        offset_store: Arc<dyn OffsetStore>,
    ) -> Result<Self, TelegramConfigError> {
        let token = config.token.expose().trim();
        if token.is_empty()
            || token.contains(|c: char| c.is_whitespace() || matches!(c, '/' | '?' | '#'))
        {
            return Err(TelegramConfigError::BadToken);
        }
        if !(config.api_url.starts_with("http://") || config.api_url.starts_with("https://")) {
            return Err(TelegramConfigError::BadApiUrl(config.api_url.clone()));
        }
        let api = Api::new(&config.api_url, token, config.retry.clone());
        let (status, _) = watch::channel(Status::Idle);
        Ok(Self {
            inner: Arc::new(Inner {
                recent: Mutex::new(Recent::new(config.dedup_window)),
                config,
                api,
                offsets: offset_store,
                bot: Mutex::new(None),
                gate: LeaseGate::default(),
            }),
            running: tokio::sync::Mutex::new(None),
            status: Arc::new(status),
        })
    }

    /// The adapter configured from the environment, or `None` when
    /// `TELEGRAM_BOT_TOKEN` is unset or blank (Telegram disabled).
    ///
    /// Reads `TELEGRAM_BOT_TOKEN`, `TELEGRAM_API_URL` (default
    /// [`DEFAULT_API_URL`]), `TELEGRAM_POLL_TIMEOUT` (seconds, default 30) and
    /// `TELEGRAM_GROUP_POLICY` (`triggered` (default), `all`, or a comma list
    /// of `mention`, `reply`, `command`).
    pub fn from_env(
        env: &dyn Fn(&str) -> Option<String>,
        offset_store: Arc<dyn OffsetStore>,
    ) -> Option<Result<Self, TelegramConfigError>> {
        let token = env("TELEGRAM_BOT_TOKEN").filter(|t| !t.trim().is_empty())?;
        let build = || {
            let mut config = TelegramConfig::new(token.trim());
            if let Some(url) = env("TELEGRAM_API_URL").filter(|u| !u.trim().is_empty()) {
                config.api_url = url.trim().to_owned();
            }
            if let Some(t) = env("TELEGRAM_POLL_TIMEOUT").filter(|t| !t.trim().is_empty()) {
                config.poll_timeout_s = t
                    .trim()
                    .parse()
                    .ok()
                    .filter(|s| *s <= 600)
                    .ok_or(TelegramConfigError::BadPollTimeout(t))?;
            }
            if let Some(p) = env("TELEGRAM_GROUP_POLICY").filter(|p| !p.trim().is_empty()) {
                config.group_policy = parse_group_policy(&p)?;
            }
            Self::new(config, offset_store)
        };
        Some(build())
    }

    /// The bot's identity, known after a successful [`PlatformAdapter::connect`].
    pub fn bot(&self) -> Option<BotIdentity> {
        lock(&self.inner.bot).clone()
    }

    /// Waits until the poll loop has ended. `Some(error)` when it stopped on
    /// its own for a reason that needs an operator (bad token, another
    /// poller); `None` after [`PlatformAdapter::disconnect`] or if it never
    /// ran.
    pub async fn wait_stopped(&self) -> Option<Arc<AdapterError>> {
        let mut rx = self.status.subscribe();
        loop {
            match &*rx.borrow_and_update() {
                Status::Stopped(e) => return e.clone(),
                Status::Idle => return None,
                Status::Polling => {}
            }
            if rx.changed().await.is_err() {
                return None;
            }
        }
    }

    /// The error the poll loop stopped on, if it did.
    pub fn fatal_error(&self) -> Option<Arc<AdapterError>> {
        match &*self.status.borrow() {
            Status::Stopped(e) => e.clone(),
            _ => None,
        }
    }

    /// `text` in as many messages as it takes, the first replying to `reply`.
    async fn send_split(
        &self,
        chat: i64,
        text: &str,
        reply: Option<i64>,
        thread: Option<i64>,
    ) -> Result<(), AdapterError> {
        let mut first = true;
        for chunk in split_message(text, MAX_MESSAGE_UTF16, LengthUnit::Utf16) {
            // Telegram refuses empty texts; a blank piece carries nothing visible.
            if chunk.trim().is_empty() {
                continue;
            }
            self.send_chunk(chat, &chunk, reply.filter(|_| first), thread)
                .await?;
            first = false;
        }
        Ok(())
    }

    async fn send_chunk(
        &self,
        chat: i64,
        chunk: &str,
        reply_to: Option<i64>,
        thread: Option<i64>,
    ) -> Result<(), AdapterError> {
        let api = &self.inner.api;
        let mut body = json!({ "chat_id": chat, "text": format::markdown_to_html(chunk), "parse_mode": "HTML" });
        if let Some(t) = thread {
            body["message_thread_id"] = json!(t);
        }
        if let Some(r) = reply_to {
            // If the user deleted their message, still deliver the answer.
            body["reply_parameters"] =
                json!({ "message_id": r, "allow_sending_without_reply": true });
        }
        match api
            .call("sendMessage", &body, Duration::from_secs(30))
            .await
        {
            Ok(_) => Ok(()),
            Err(CallError::Api {
                status: 400,
                description,
                ..
            }) => {
                tracing::warn!(%description, "telegram: formatted message refused, resending as plain text");
                body["text"] = json!(chunk);
                if let Some(obj) = body.as_object_mut() {
                    obj.remove("parse_mode");
                }
                api.call("sendMessage", &body, Duration::from_secs(30))
                    .await
                    .map(|_| ())
                    .map_err(CallError::into_adapter_error)
            }
            Err(e) => Err(e.into_adapter_error()),
        }
    }
}

fn parse_group_policy(s: &str) -> Result<GroupPolicy, TelegramConfigError> {
    let s = s.trim().to_ascii_lowercase();
    match s.as_str() {
        "all" => {
            return Ok(GroupPolicy {
                respond_to_all: true,
                ..GroupPolicy::default()
            });
        }
        "triggered" => return Ok(GroupPolicy::default()),
        _ => {}
    }
    let mut p = GroupPolicy {
        respond_to_all: false,
        on_mention: false,
        on_reply: false,
        on_command: false,
    };
    for part in s.split(',').map(str::trim) {
        match part {
            "mention" => p.on_mention = true,
            "reply" => p.on_reply = true,
            "command" => p.on_command = true,
            _ => return Err(TelegramConfigError::BadGroupPolicy(s.clone())),
        }
    }
    Ok(p)
}

#[async_trait]
impl PlatformAdapter for TelegramAdapter {
    fn platform(&self) -> &'static str {
        PLATFORM
    }

    /// The bot's numeric id: the part of the token before `:` (public —
    /// it is the bot's user id — unlike the rest).
    fn bot_id(&self) -> String {
        let id = self
            .inner
            .config
            .token
            .expose()
            .trim()
            .split(':')
            .next()
            .unwrap_or_default();
        if id.is_empty() {
            "default".to_owned()
        } else {
            id.to_owned()
        }
    }

    fn set_lease(&self, lease: Option<Held>) {
        self.inner.gate.set(lease);
    }

    fn max_message_len(&self) -> usize {
        MAX_MESSAGE_UTF16
    }

    fn length_unit(&self) -> LengthUnit {
        LengthUnit::Utf16
    }

    fn can_send_files(&self) -> bool {
        true
    }

    fn can_send_voice(&self) -> bool {
        true
    }

    /// The Bot API's upload limits: photos 10 MB, other files 50 MB.
    fn max_upload_bytes(&self, kind: FileKind) -> u64 {
        match kind {
            FileKind::Photo => MAX_PHOTO_BYTES,
            FileKind::Audio | FileKind::Voice | FileKind::Document => MAX_UPLOAD_BYTES,
        }
    }

    /// `sendDocument`, `sendPhoto`, `sendAudio` or `sendVoice` (by the
    /// file's kind): the file as a multipart upload, with its caption
    /// (plain text, cut to Telegram's 1024 characters).
    async fn send_file(
        &self,
        chat_id: &str,
        file: &OutgoingFile,
        reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        let chat: i64 = chat_id.trim().parse().map_err(|_| AdapterError::Rejected {
            platform: PLATFORM,
            message: format!("not a Telegram chat id: {chat_id:?}"),
        })?;
        let reply: Option<i64> = reply_to.and_then(|r| r.trim().parse().ok());
        let thread = reply.and_then(|r| lock(&self.inner.recent).thread_of((chat, r)));
        let caption: String = file.caption.chars().take(MAX_CAPTION_CHARS).collect();
        let (method, field) = match file.kind {
            FileKind::Photo => ("sendPhoto", "photo"),
            FileKind::Audio => ("sendAudio", "audio"),
            FileKind::Voice => ("sendVoice", "voice"),
            FileKind::Document => ("sendDocument", "document"),
        };
        let mut form = http::multipart::Form::new()
            .text("chat_id", &chat.to_string())
            .file(
                field,
                &file.file_name,
                file.content_type(),
                file.content.clone(),
            );
        if !caption.is_empty() {
            form = form.text("caption", &caption);
        }
        if let Some(t) = thread {
            form = form.text("message_thread_id", &t.to_string());
        }
        if let Some(r) = reply {
            let reply = json!({ "message_id": r, "allow_sending_without_reply": true });
            form = form.text("reply_parameters", &reply.to_string());
        }
        let form = form.finish();
        self.inner
            .api
            .call_multipart(method, form, Duration::from_secs(120))
            .await
            .map(|_| ())
            .map_err(CallError::into_adapter_error)
    }

    /// Checks the token with `getMe` (which also gives the username for
    /// mentions), then starts the poll loop. A second call restarts the
    /// loop with the new handler.
    async fn connect(&self, handler: EventHandler) -> Result<(), AdapterError> {
        self.disconnect().await;
        let me = self
            .inner
            .api
            .call("getMe", &json!({}), Duration::from_secs(30))
            .await
            .map_err(CallError::into_adapter_error)?;
        let bot: BotIdentity = serde_json::from_value(me).map_err(|e| AdapterError::Rejected {
            platform: PLATFORM,
            message: format!("getMe answered something unexpected: {e}"),
        })?;
        tracing::info!(
            platform = PLATFORM,
            bot_id = bot.id,
            "telegram: connected as {}",
            bot_name(&bot)
        );
        *lock(&self.inner.bot) = Some(bot);
        self.publish_command_menu().await;

        let (stop, stop_rx) = watch::channel(false);
        let inner = Arc::clone(&self.inner);
        let status = Arc::clone(&self.status);
        status.send_replace(Status::Polling);
        let task = hermes_runtime::task::spawn(async move {
            // The loop runs in its own task so a panicking handler ends it
            // with a visible error instead of leaving "polling" forever.
            let fatal = match hermes_runtime::task::spawn(inner.poll_loop(handler, stop_rx)).await {
                Ok(fatal) => fatal,
                Err(e) => Some(AdapterError::Rejected {
                    platform: PLATFORM,
                    message: format!("the poll loop ended abnormally: {e}"),
                }),
            };
            if let Some(e) = &fatal {
                tracing::error!(error = %e, "telegram: polling stopped");
            }
            status.send_replace(Status::Stopped(fatal.map(Arc::new)));
        });
        *self.running.lock().await = Some(Running { stop, task });
        Ok(())
    }

    async fn verify(&self) -> Result<Option<String>, String> {
        let me = self
            .inner
            .api
            .call_once("getMe", &json!({}), Duration::from_secs(20))
            .await;
        let me = match me {
            Ok(me) => me,
            Err(CallError::Network(why)) => {
                return Err(format!(
                    "telegram: cannot reach the Bot API at {} (TELEGRAM_API_URL): {why}",
                    self.inner.config.api_url
                ));
            }
            Err(e) => return Err(e.into_adapter_error().to_string()),
        };
        let bot: BotIdentity = serde_json::from_value(me).map_err(|e| {
            format!(
                "telegram: getMe at {} (TELEGRAM_API_URL) answered something unexpected: {e}",
                self.inner.config.api_url
            )
        })?;
        Ok(Some(bot_name(&bot)))
    }

    async fn gave_up(&self) -> String {
        let mut rx = self.status.subscribe();
        loop {
            if let Status::Stopped(Some(e)) = &*rx.borrow_and_update() {
                return e.to_string();
            }
            if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    async fn disconnect(&self) {
        let Some(running) = self.running.lock().await.take() else {
            return;
        };
        running.stop.send_replace(true);
        if let Err(e) = running.task.await {
            tracing::error!(error = %e, "telegram: poll task ended abnormally");
            self.status.send_replace(Status::Stopped(None));
        }
        // Keep a fatal error visible; a clean stop reads as "not running".
        self.status.send_if_modified(|s| match s {
            Status::Stopped(Some(_)) => false,
            _ => {
                *s = Status::Stopped(None);
                true
            }
        });
    }

    async fn send(
        &self,
        chat_id: &str,
        text: &str,
        reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        let chat: i64 = chat_id.trim().parse().map_err(|_| AdapterError::Rejected {
            platform: PLATFORM,
            message: format!("not a Telegram chat id: {chat_id:?}"),
        })?;
        let reply: Option<i64> = reply_to.and_then(|r| r.trim().parse().ok());
        let thread = reply.and_then(|r| lock(&self.inner.recent).thread_of((chat, r)));
        self.send_split(chat, text, reply, thread).await
    }

    /// A question with choices as an inline keyboard (see `choices.rs`).
    async fn ask(
        &self,
        chat_id: &str,
        question: &hermes_runtime::tools::Question,
        reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        self.send_question(chat_id, question, reply_to).await
    }

    /// Into a forum topic (`message_thread_id`).
    async fn send_to_thread(
        &self,
        chat_id: &str,
        thread: &str,
        text: &str,
    ) -> Result<(), AdapterError> {
        let chat: i64 = chat_id.trim().parse().map_err(|_| AdapterError::Rejected {
            platform: PLATFORM,
            message: format!("not a Telegram chat id: {chat_id:?}"),
        })?;
        let thread: i64 = thread.trim().parse().map_err(|_| AdapterError::Rejected {
            platform: PLATFORM,
            message: format!("not a Telegram topic id: {thread:?}"),
        })?;
        self.send_split(chat, text, None, Some(thread)).await
    }

    /// `getFile` and the download (see `telegram/media.rs`).
    async fn fetch_media(
        &self,
        media: &MediaRef,
        max_bytes: u64,
    ) -> Result<FetchedMedia, AdapterError> {
        self.inner.fetch_file(media, max_bytes).await
    }

    /// A reply shown as it is written: one message, edited (see
    /// `telegram/media.rs`).
    async fn begin_reply(
        &self,
        chat_id: &str,
        reply_to: Option<&str>,
    ) -> Option<Box<dyn ReplyStream>> {
        let chat: i64 = chat_id.trim().parse().ok()?;
        let reply: Option<i64> = reply_to.and_then(|r| r.trim().parse().ok());
        let thread = reply.and_then(|r| lock(&self.inner.recent).thread_of((chat, r)));
        Some(Box::new(media::TelegramReply {
            inner: Arc::clone(&self.inner),
            chat,
            reply_to: reply,
            thread,
            message_id: None,
            shown: String::new(),
            quiet_until: None,
        }))
    }

    /// Edits count against Telegram's per-chat limit (about one message a
    /// second).
    fn stream_interval(&self) -> Duration {
        Duration::from_millis(1500)
    }

    /// One `sendChatAction typing` (it shows for about 5 s); best effort.
    async fn typing(&self, chat_id: &str) {
        let Ok(chat) = chat_id.trim().parse::<i64>() else {
            return;
        };
        let body = json!({ "chat_id": chat, "action": "typing" });
        if let Err(e) = self
            .inner
            .api
            .call_once("sendChatAction", &body, Duration::from_secs(10))
            .await
        {
            tracing::debug!(error = ?e, "telegram: typing indicator not shown");
        }
    }
}
