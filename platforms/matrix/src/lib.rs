//! `hermes-matrix`: the Matrix adapter (SPEC Y3) — the client-server API of
//! any homeserver.
//!
//! Inbound: `/sync` long polls with an inline filter that keeps the payload
//! to room messages, membership and encryption state. The `next_batch`
//! token is saved in the store after each batch has been handed to the
//! runner (whose inbox has made every message durable by then), so a restart
//! answers what came while it was down and nothing twice; a replayed event
//! is dropped by the inbox's identity check. The first sync of a new login
//! only takes the token: history is never answered. A timeline the server
//! cut (`limited`) is filled in from `/messages` back to the saved token.
//! Invites from allowed users are accepted, others declined.
//!
//! Outbound: `m.text` events with the Markdown rendered to `formatted_body`
//! and the plain `body` kept, the first piece a rich reply to the user's
//! message, each piece sent under its own transaction id so a retried send
//! cannot post twice; pieces are cut below the homeserver's 64 KiB event
//! limit. `M_LIMIT_EXCEEDED` waits out `retry_after_ms`.
//!
//! End-to-end encrypted rooms are not supported: the bot says so once in
//! such a room and leaves it, instead of sitting there unable to read.
//!
//! Session keys follow G2 with the room as the chat: a room of two members
//! (the user and the bot) is a DM; larger rooms are groups, where the bot
//! answers only when mentioned or replied to (`MATRIX_REQUIRE_MENTION`).

mod api;
mod config;
pub mod descriptor;
mod format;
mod sync;
mod translate;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use hermes_runtime::store::Store;
use hermes_runtime::sync::lock;
use serde_json::{Value, json};
use tokio::sync::watch;

use hermes_platform_kit::adapter::{AdapterError, EventHandler, FetchedMedia, PlatformAdapter};
use hermes_platform_kit::event::MediaRef;
use hermes_platform_kit::lease::{Held, LeaseGate};
use hermes_platform_kit::running::RunningLoop;
use hermes_platform_kit::split::{LengthUnit, split_message};

use api::{Api, CallError, PLATFORM, seg};
pub use config::{MatrixConfig, MatrixConfigError};

/// The longest message body sent in one event, in UTF-8 bytes. A Matrix
/// event may be 65 536 bytes in all; the HTML rendering and the JSON
/// escaping of the same text must fit beside the body.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// How many of the bot's own event ids are remembered, so a reply to one of
/// them counts as addressing the bot in a group room.
const SENT_REMEMBERED: usize = 512;

/// Who the bot is, once logged in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BotAccount {
    /// The full user id (`@hermes:example.org`).
    pub user_id: String,
    /// The device the access token belongs to.
    pub device_id: Option<String>,
}

/// State shared by the adapter and its sync task.
struct Inner {
    config: MatrixConfig,
    api: Api,
    store: Option<Arc<Mutex<Store>>>,
    account: Mutex<Option<BotAccount>>,
    /// Joined members per room, from the sync summaries (DM or group).
    members: Mutex<HashMap<String, u64>>,
    /// The bot's recent event ids (replies to them address the bot).
    sent: Mutex<VecDeque<String>>,
    /// Encrypted rooms already told and left.
    encrypted_told: Mutex<HashSet<String>>,
    gate: LeaseGate,
}

impl Inner {
    fn me(&self) -> String {
        lock(&self.account)
            .as_ref()
            .map(|a| a.user_id.clone())
            .unwrap_or_default()
    }

    fn remember_sent(&self, event_id: &str) {
        let mut sent = lock(&self.sent);
        if sent.len() >= SENT_REMEMBERED {
            sent.pop_front();
        }
        sent.push_back(event_id.to_owned());
    }

    fn is_ours(&self, event_id: &str) -> bool {
        lock(&self.sent).iter().any(|e| e == event_id)
    }

    /// A transaction id never used before by this login: the process's
    /// start time keeps a restarted process's ids apart, and the counter is
    /// the process's, not the adapter's — a second adapter in one process
    /// (a reconnect, the tests' restarts) reusing `.0` had its first
    /// message swallowed by the homeserver as a repeat of an old one.
    fn next_txn(&self) -> String {
        static TXN_COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = TXN_COUNTER.fetch_add(1, Ordering::Relaxed);
        format!("hermes.{}.{n}", process_start_ms())
    }

    /// Sends one `m.room.message` event; returns its event id.
    async fn send_event(&self, room: &str, content: &Value) -> Result<String, CallError> {
        let txn = self.next_txn();
        let path = format!(
            "/_matrix/client/v3/rooms/{}/send/m.room.message/{}",
            seg(room),
            seg(&txn)
        );
        let answer = self
            .api
            .call("PUT", &path, Some(content), Duration::from_secs(30))
            .await?;
        let id = answer
            .get("event_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if !id.is_empty() {
            self.remember_sent(&id);
        }
        Ok(id)
    }

    async fn leave(&self, room: &str) {
        let path = format!("/_matrix/client/v3/rooms/{}/leave", seg(room));
        if let Err(e) = self
            .api
            .call("POST", &path, Some(&json!({})), Duration::from_secs(30))
            .await
        {
            tracing::warn!(room, error = %e, "matrix: cannot leave the room");
        }
    }
}

fn process_start_ms() -> u128 {
    static START: std::sync::OnceLock<u128> = std::sync::OnceLock::new();
    *START.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    })
}

/// The Matrix adapter. See the module docs.
pub struct MatrixAdapter {
    inner: Arc<Inner>,
    running: RunningLoop,
    stopped: Arc<watch::Sender<Option<Arc<AdapterError>>>>,
}

impl std::fmt::Debug for MatrixAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MatrixAdapter")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl MatrixAdapter {
    /// An adapter for `config`, keeping its login and sync token in `store`
    /// when one is given (otherwise a restart logs in and starts afresh).
    pub fn new(config: MatrixConfig, store: Option<Arc<Mutex<Store>>>) -> Self {
        let api = Api::new(&config.homeserver);
        if let Some(token) = &config.access_token {
            api.set_token(token.expose());
        }
        let (stopped, _) = watch::channel(None);
        MatrixAdapter {
            inner: Arc::new(Inner {
                config,
                api,
                store,
                account: Mutex::new(None),
                members: Mutex::default(),
                sent: Mutex::default(),
                encrypted_told: Mutex::default(),
                gate: LeaseGate::default(),
            }),
            running: RunningLoop::default(),
            stopped: Arc::new(stopped),
        }
    }

    /// The adapter configured from the environment, or `None` when
    /// `MATRIX_HOMESERVER` is unset (Matrix disabled). See [`MatrixConfig::from_env`].
    pub fn from_env(
        env: &dyn Fn(&str) -> Option<String>,
        store: Option<Arc<Mutex<Store>>>,
    ) -> Option<Result<Self, MatrixConfigError>> {
        MatrixConfig::from_env(env).map(|c| c.map(|c| Self::new(c, store)))
    }

    /// The bot's account, known after a successful connect.
    pub fn account(&self) -> Option<BotAccount> {
        lock(&self.inner.account).clone()
    }

    /// The error the sync loop stopped on, if it stopped on its own.
    pub fn fatal_error(&self) -> Option<Arc<AdapterError>> {
        self.stopped.borrow().clone()
    }

    /// Checks the credentials without syncing (`gateway run --check`): the
    /// access token with `whoami`, or a password login that is logged out
    /// again at once, so a check run by the service manager before every
    /// start does not leave a device behind each time.
    pub async fn check(&self) -> Result<BotAccount, AdapterError> {
        let account = sync::log_in(&self.inner).await?;
        if self.inner.config.access_token.is_none() && self.inner.store.is_none() {
            sync::log_out(&self.inner).await;
        }
        Ok(account)
    }
}

#[async_trait]
impl PlatformAdapter for MatrixAdapter {
    fn platform(&self) -> &'static str {
        PLATFORM
    }

    /// The bot's user id when it is configured, so two gateways on one
    /// database never sync one account twice (SPEC X8).
    fn bot_id(&self) -> String {
        self.inner
            .config
            .user_id
            .clone()
            .unwrap_or_else(|| "default".to_owned())
    }

    fn set_lease(&self, lease: Option<Held>) {
        self.inner.gate.set(lease);
    }

    fn max_message_len(&self) -> usize {
        MAX_BODY_BYTES
    }

    fn length_unit(&self) -> LengthUnit {
        LengthUnit::Bytes
    }

    async fn connect(&self, handler: EventHandler) -> Result<(), AdapterError> {
        let Some(starting) = self.running.begin().await else {
            return Ok(());
        };
        let account = sync::log_in(&self.inner).await?;
        tracing::info!(user = %account.user_id, "matrix: connected");
        let since = sync::first_token(&self.inner).await?;
        let inner = Arc::clone(&self.inner);
        let stopped = Arc::clone(&self.stopped);
        starting.spawn(|stop| async move {
            let fatal = sync::sync_loop(inner, handler, since, stop).await;
            if let Some(e) = fatal {
                tracing::error!(error = %e, "matrix: syncing stopped");
                stopped.send_replace(Some(Arc::new(e)));
            }
        });
        Ok(())
    }

    async fn disconnect(&self) {
        self.running.stop().await;
    }

    async fn send(
        &self,
        chat_id: &str,
        text: &str,
        reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        let reply = reply_to.map(|event| json!({ "m.in_reply_to": { "event_id": event } }));
        self.send_related(chat_id, text, reply, None).await
    }

    /// Into the thread whose root event is `thread` (`m.thread`, with the
    /// reply fallback for clients without threads).
    async fn send_to_thread(
        &self,
        chat_id: &str,
        thread: &str,
        text: &str,
    ) -> Result<(), AdapterError> {
        let in_thread = json!({
            "rel_type": "m.thread",
            "event_id": thread,
            "is_falling_back": true,
            "m.in_reply_to": { "event_id": thread },
        });
        self.send_related(chat_id, text, None, Some(in_thread))
            .await
    }

    async fn typing(&self, chat_id: &str) {
        self.set_typing(chat_id, true).await;
    }

    async fn verify(&self) -> Result<Option<String>, String> {
        self.check()
            .await
            .map(|account| Some(account.user_id))
            .map_err(|e| format!("{e} (MATRIX_HOMESERVER {})", self.inner.config.homeserver))
    }

    async fn gave_up(&self) -> String {
        let mut rx = self.stopped.subscribe();
        loop {
            if let Some(e) = &*rx.borrow_and_update() {
                return e.to_string();
            }
            if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    async fn fetch_media(
        &self,
        media: &MediaRef,
        max_bytes: u64,
    ) -> Result<FetchedMedia, AdapterError> {
        sync::download(&self.inner, media, max_bytes).await
    }
}

impl MatrixAdapter {
    /// `text` in as many events as it takes: the first with `first` as its
    /// relation (a reply), every one with `every` (a thread).
    async fn send_related(
        &self,
        chat_id: &str,
        text: &str,
        first: Option<serde_json::Value>,
        every: Option<serde_json::Value>,
    ) -> Result<(), AdapterError> {
        let pieces = split_message(text, MAX_BODY_BYTES, LengthUnit::Bytes);
        for (i, piece) in pieces.iter().enumerate() {
            let mut content = json!({
                "msgtype": "m.text",
                "body": piece,
                "format": "org.matrix.custom.html",
                "formatted_body": format::markdown_to_html(piece),
            });
            if let Some(relation) = every.as_ref().or(first.as_ref().filter(|_| i == 0)) {
                content["m.relates_to"] = relation.clone();
            }
            self.inner
                .send_event(chat_id, &content)
                .await
                .map_err(CallError::into_adapter_error)?;
        }
        // Sending ends the typing notice in clients; say so explicitly too.
        self.set_typing(chat_id, false).await;
        Ok(())
    }

    async fn set_typing(&self, room: &str, typing: bool) {
        let me = self.inner.me();
        if me.is_empty() {
            return;
        }
        let path = format!("/_matrix/client/v3/rooms/{}/typing/{}", seg(room), seg(&me));
        let body = if typing {
            json!({ "typing": true, "timeout": 15_000 })
        } else {
            json!({ "typing": false })
        };
        if let Err(e) = self
            .inner
            .api
            .call_once("PUT", &path, Some(&body), Duration::from_secs(10))
            .await
        {
            tracing::debug!(room, error = %e, "matrix: typing notice refused");
        }
    }
}
