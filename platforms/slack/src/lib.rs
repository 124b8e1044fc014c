//! `hermes-slack`: Slack for the Hermes gateway over Socket Mode (issue 41
//! §2) — no public URL needed, so it serves from a board behind NAT.
//!
//! - **In** ([`socket`]): `apps.connections.open` (the app-level token)
//!   gives a WebSocket URL; `hello` means connected. Every envelope is
//!   acknowledged (`{"envelope_id"}`) as soon as the message it carries is
//!   durable in the runner's inbox, before its turn runs. A `disconnect`
//!   (`refresh_requested`, `warning`) or a broken socket opens a new one;
//!   what Slack did not see acknowledged it sends again (`retry_attempt`
//!   > 0), and the inbox answers a message once however often it came.
//! - **Which events** ([`inbound`]): DMs, `app_mention`, channel messages
//!   when mentions are not required; files (`file_share`) too; the bot's
//!   own and edited messages never. Slash commands registered for the app
//!   (`/new`, `/sethome`, …; Slack's client sends `/…` nowhere else) reach
//!   the runner as the command typed.
//! - **Out** ([`web`]): `chat.postMessage` in `mrkdwn` ([`mrkdwn`]), split
//!   at 4000 characters, into the thread of the message answered (a
//!   top-level message starts one, so every answer points at its
//!   question, also after a restart); a 429's
//!   `Retry-After` is waited out. Files go out through
//!   `files.getUploadURLExternal` → upload → `files.completeUploadExternal`
//!   and come in with the bot token. "Typing" is an 👀 reaction on the
//!   message being answered.
//! - **Fatal**: a refused token (`invalid_auth`, `token_revoked`, …) stops
//!   the adapter with one line naming the token to fix; the gateway exits
//!   and `hermes gateway status` shows why.
//! - The tokens never reach a log line, an error or a `Debug` output.

pub mod descriptor;
pub mod inbound;
pub mod mrkdwn;
pub mod settings;
mod socket;
pub mod web;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use hermes_platform_kit::adapter::{
    AdapterError, EventHandler, FetchedMedia, FileKind, OutgoingFile, PlatformAdapter,
};
use hermes_platform_kit::event::MediaRef;
use hermes_platform_kit::lease::{Held, LeaseGate};
use hermes_platform_kit::split::{LengthUnit, split_message};
use hermes_runtime::sync::lock;
use serde_json::{Value, json};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

pub use settings::{DEFAULT_API_URL, SlackConfig, SlackConfigError};
use web::{Body, Token, Web, WebError};

/// The platform name in session keys.
pub const PLATFORM: &str = "slack";
/// The longest message sent, in characters: Slack advises at most 4000
/// (and truncates at 40 000).
pub const MAX_MESSAGE_CHARS: usize = 4000;
/// The largest file uploaded (Slack's limit is 1 GB; a chat reply never
/// needs that much).
pub const MAX_UPLOAD_BYTES: u64 = 100 * 1024 * 1024;
/// The reaction shown on a message while its answer is written.
pub const TYPING_REACTION: &str = "eyes";

/// Where the adapter stands.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlackState {
    /// `connect` was not called (or `disconnect` finished).
    Idle,
    /// Opening Socket Mode.
    Connecting,
    /// `hello` arrived: envelopes flow.
    Connected,
    /// The socket was lost (or Slack asked for a new one).
    Reconnecting {
        /// Attempts since the last `hello`.
        attempt: u32,
    },
    /// Stopped for good; the error says what to fix.
    Stopped(String),
}

/// State shared by the adapter handle and the connection task.
pub(crate) struct Inner {
    config: SlackConfig,
    web: Web,
    gate: LeaseGate,
    state: watch::Sender<SlackState>,
    fatal: Mutex<Option<String>>,
    bot_user: Mutex<String>,
    /// Chat → the newest message handed on there (the typing reaction).
    last: Mutex<HashMap<String, String>>,
    /// Messages that already carry the typing reaction.
    reacted: Mutex<HashSet<String>>,
}

impl Inner {
    fn set_state(&self, s: SlackState) {
        self.state.send_replace(s);
    }

    fn bot_user(&self) -> String {
        lock(&self.bot_user).clone()
    }

    fn set_bot_user(&self, user: &str) {
        *lock(&self.bot_user) = user.to_owned();
    }

    fn remember_last(&self, chat: &str, message_id: &str) {
        let mut last = lock(&self.last);
        if last.len() > 10_000 {
            last.clear();
        }
        last.insert(chat.to_owned(), message_id.to_owned());
    }

    fn token_refused(&self, var: &str, e: &WebError) -> AdapterError {
        AdapterError::Auth {
            platform: PLATFORM,
            message: format!(
                "{var} was refused ({e}); create a new token in the Slack app's settings \
                 (api.slack.com/apps → your app) and set {var} again"
            ),
        }
    }

    /// Stops for good: the one line the operator reads, the state that
    /// `gave_up` reports.
    fn stop_for_good(
        &self,
        first: &mut Option<oneshot::Sender<Result<(), AdapterError>>>,
        e: AdapterError,
    ) {
        tracing::error!("{e}");
        *lock(&self.fatal) = Some(e.to_string());
        self.set_state(SlackState::Stopped(e.to_string()));
        if let Some(tx) = first.take() {
            let _ = tx.send(Err(e));
        }
    }

    /// A Web API error as the runner sees it; a refused bot token stops
    /// the adapter.
    fn adapter_error(&self, e: WebError) -> AdapterError {
        if e.is_auth() {
            let err = self.token_refused("SLACK_BOT_TOKEN", &e);
            if !matches!(*self.state.borrow(), SlackState::Stopped(_)) {
                self.stop_for_good(&mut None, self.token_refused("SLACK_BOT_TOKEN", &e));
            }
            return err;
        }
        match e {
            WebError::Network(message) => AdapterError::Network {
                platform: PLATFORM,
                message,
            },
            other => AdapterError::Rejected {
                platform: PLATFORM,
                message: other.to_string(),
            },
        }
    }
}

/// The running connection task and its stop switch.
type Task = Option<(watch::Sender<bool>, JoinHandle<()>)>;

/// The Slack adapter. Cheap to clone: all state is behind an `Arc`.
#[derive(Clone)]
pub struct SlackAdapter {
    inner: Arc<Inner>,
    task: Arc<Mutex<Task>>,
}

impl std::fmt::Debug for SlackAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackAdapter")
            .field("config", &self.inner.config)
            .field("state", &self.state())
            .finish()
    }
}

impl SlackAdapter {
    /// An adapter with `config`; nothing happens until `connect`.
    pub fn new(config: SlackConfig) -> Self {
        let (state, _) = watch::channel(SlackState::Idle);
        SlackAdapter {
            inner: Arc::new(Inner {
                web: Web::new(&config),
                config,
                gate: LeaseGate::default(),
                state,
                fatal: Mutex::new(None),
                bot_user: Mutex::new(String::new()),
                last: Mutex::new(HashMap::new()),
                reacted: Mutex::new(HashSet::new()),
            }),
            task: Arc::default(),
        }
    }

    /// The settings in use.
    pub fn config(&self) -> &SlackConfig {
        &self.inner.config
    }

    /// Where the connection stands.
    pub fn state(&self) -> SlackState {
        self.inner.state.borrow().clone()
    }

    /// Why the adapter stopped for good, if it did.
    pub fn stop_error(&self) -> Option<String> {
        lock(&self.inner.fatal).clone()
    }

    /// Waits until the adapter has stopped for good; returns why.
    pub async fn wait_stopped(&self) -> String {
        let mut rx = self.inner.state.subscribe();
        loop {
            if let SlackState::Stopped(why) = &*rx.borrow_and_update() {
                return why.clone();
            }
            if rx.changed().await.is_err() {
                return String::new();
            }
        }
    }

    /// `chat.postMessage` of `text` (already mrkdwn) into `thread`.
    async fn post(
        &self,
        channel: &str,
        text: &str,
        thread: Option<&str>,
    ) -> Result<(), AdapterError> {
        let mut body = json!({
            "channel": channel,
            "text": text,
            "mrkdwn": true,
            "unfurl_links": false,
        });
        if let Some(ts) = thread {
            body["thread_ts"] = json!(ts);
        }
        self.inner
            .web
            .call(Token::Bot, "chat.postMessage", Body::Json(body))
            .await
            .map(|_| ())
            .map_err(|e| self.inner.adapter_error(e))
    }

    async fn send_pieces(
        &self,
        chat_id: &str,
        text: &str,
        thread: Option<&str>,
    ) -> Result<(), AdapterError> {
        let text = mrkdwn::from_markdown(text);
        for piece in split_message(&text, MAX_MESSAGE_CHARS, LengthUnit::Chars)
            .iter()
            .filter(|p| !p.trim().is_empty())
        {
            self.post(chat_id, piece, thread).await?;
        }
        Ok(())
    }
}

/// `auth.test` with `config`'s bot token: who the bot is, or a sentence
/// naming the setting to fix.
pub async fn check_bot(config: &SlackConfig) -> Result<String, String> {
    let web = Web::new(config);
    let who = match web
        .call(Token::Bot, "auth.test", Body::Form(Vec::new()))
        .await
    {
        Ok(v) => v,
        Err(e) if e.is_auth() => {
            return Err(format!(
                "slack: SLACK_BOT_TOKEN was refused by auth.test ({e})"
            ));
        }
        Err(e) => {
            return Err(format!(
                "slack: auth.test at {} failed: {e}",
                config.api_url
            ));
        }
    };
    match web
        .call(Token::App, "apps.connections.open", Body::Form(Vec::new()))
        .await
    {
        Ok(_) => {}
        Err(e)
            if e.is_auth()
                || matches!(&e, WebError::Api { error, .. } if error == "not_allowed_token_type") =>
        {
            return Err(format!(
                "slack: SLACK_APP_TOKEN was refused by apps.connections.open ({e}); it must be an app-level token with connections:write"
            ));
        }
        Err(e) => {
            return Err(format!(
                "slack: Socket Mode cannot be opened ({e}); is Socket Mode turned on for the app?"
            ));
        }
    }
    let text = |key: &str| {
        who.get(key)
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned()
    };
    Ok(format!(
        "{} in {} (bot user {}; Socket Mode opens)",
        text("user"),
        text("team"),
        text("user_id")
    ))
}

#[async_trait]
impl PlatformAdapter for SlackAdapter {
    fn platform(&self) -> &'static str {
        PLATFORM
    }

    fn max_message_len(&self) -> usize {
        MAX_MESSAGE_CHARS
    }

    fn length_unit(&self) -> LengthUnit {
        LengthUnit::Chars
    }

    /// The app token's app id (`xapp-1-APPID-…`): one lease per Slack app.
    fn bot_id(&self) -> String {
        self.inner
            .config
            .app_token
            .expose()
            .split('-')
            .nth(2)
            .filter(|id| {
                !id.is_empty() && id.len() <= 32 && id.bytes().all(|b| b.is_ascii_alphanumeric())
            })
            .unwrap_or("default")
            .to_owned()
    }

    fn set_lease(&self, lease: Option<Held>) {
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
        self.inner.set_state(SlackState::Connecting);
        let handle = hermes_runtime::task::spawn(socket::run(
            Arc::clone(&self.inner),
            handler,
            stop_rx,
            first_tx,
        ));
        *lock(&self.task) = Some((stop_tx, handle));
        first_rx.await.unwrap_or_else(|_| {
            Err(AdapterError::Network {
                platform: PLATFORM,
                message: "the connection task ended before hello".to_owned(),
            })
        })
    }

    async fn verify(&self) -> Result<Option<String>, String> {
        check_bot(&self.inner.config).await.map(Some)
    }

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
        if !matches!(self.state(), SlackState::Stopped(_)) {
            self.inner.set_state(SlackState::Idle);
        }
    }

    /// Into the thread of `reply_to`; a top-level message starts one.
    async fn send(
        &self,
        chat_id: &str,
        text: &str,
        reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        let thread = reply_to.and_then(inbound::reply_thread);
        self.send_pieces(chat_id, text, thread).await
    }

    async fn send_to_thread(
        &self,
        chat_id: &str,
        thread: &str,
        text: &str,
    ) -> Result<(), AdapterError> {
        let thread = Some(thread).filter(|t| !t.is_empty());
        self.send_pieces(chat_id, text, thread).await
    }

    fn can_send_files(&self) -> bool {
        true
    }

    fn can_send_voice(&self) -> bool {
        true
    }

    fn max_upload_bytes(&self, _kind: FileKind) -> u64 {
        MAX_UPLOAD_BYTES
    }

    /// Slack's external upload: `files.getUploadURLExternal` (name and
    /// length) → the bytes POSTed to the URL it gave →
    /// `files.completeUploadExternal` shares the file in the chat (in the
    /// thread of `reply_to`), the caption as its comment.
    async fn send_file(
        &self,
        chat_id: &str,
        file: &OutgoingFile,
        reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        let web = &self.inner.web;
        let got = web
            .call(
                Token::Bot,
                "files.getUploadURLExternal",
                Body::Form(vec![
                    ("filename".to_owned(), file.file_name.clone()),
                    ("length".to_owned(), file.content.len().to_string()),
                ]),
            )
            .await
            .map_err(|e| self.inner.adapter_error(e))?;
        let field = |key: &str| got.get(key).and_then(Value::as_str).map(str::to_owned);
        let (Some(upload_url), Some(file_id)) = (field("upload_url"), field("file_id")) else {
            return Err(AdapterError::Rejected {
                platform: PLATFORM,
                message: "files.getUploadURLExternal gave no upload_url or file_id".to_owned(),
            });
        };
        web.upload(
            &upload_url,
            &file.file_name,
            file.content_type(),
            file.content.clone(),
        )
        .await
        .map_err(|e| self.inner.adapter_error(e))?;
        let mut body = json!({
            "files": [{ "id": file_id, "title": file.file_name }],
            "channel_id": chat_id,
        });
        let caption = mrkdwn::from_markdown(&file.caption);
        if !caption.trim().is_empty() {
            body["initial_comment"] =
                json!(caption.chars().take(MAX_MESSAGE_CHARS).collect::<String>());
        }
        if let Some(thread) = reply_to.and_then(inbound::reply_thread) {
            body["thread_ts"] = json!(thread);
        }
        web.call(Token::Bot, "files.completeUploadExternal", Body::Json(body))
            .await
            .map(|_| ())
            .map_err(|e| self.inner.adapter_error(e))
    }

    /// Slack has no typing indicator for bots: an 👀 reaction on the
    /// message being answered, added once.
    async fn typing(&self, chat_id: &str) {
        let Some(message) = lock(&self.inner.last).get(chat_id).cloned() else {
            return;
        };
        // A slash command has no message to react to.
        if message.starts_with(inbound::COMMAND_PREFIX) {
            return;
        }
        let ts = inbound::ts_of(&message).to_owned();
        {
            let mut reacted = lock(&self.inner.reacted);
            // Bounded: a reaction added twice is only `already_reacted`.
            if reacted.len() > 10_000 {
                reacted.clear();
            }
            if !reacted.insert(format!("{chat_id}/{ts}")) {
                return;
            }
        }
        let body = json!({ "channel": chat_id, "timestamp": ts, "name": TYPING_REACTION });
        if let Err(e) = self
            .inner
            .web
            .call(Token::Bot, "reactions.add", Body::Json(body))
            .await
        {
            tracing::debug!(error = %e, "slack: typing reaction not shown");
        }
    }

    /// A file's `url_private_download`, fetched with the bot token.
    async fn fetch_media(
        &self,
        media: &MediaRef,
        max_bytes: u64,
    ) -> Result<FetchedMedia, AdapterError> {
        if media.size.is_some_and(|s| s > max_bytes) {
            return Err(AdapterError::Rejected {
                platform: PLATFORM,
                message: format!("the file is larger than {max_bytes} bytes"),
            });
        }
        let (bytes, mime) = self
            .inner
            .web
            .download(&media.handle, max_bytes)
            .await
            .map_err(|e| self.inner.adapter_error(e))?;
        Ok(FetchedMedia {
            bytes,
            mime_type: media.mime_type.clone().or(mime),
            file_name: media.file_name.clone(),
        })
    }
}
