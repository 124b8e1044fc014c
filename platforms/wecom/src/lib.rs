//! The WeCom ("企业微信") AI-bot adapter over the long-lived WebSocket (SPEC G8,
//! G1, G7).
//!
//! The bot keeps one outbound WebSocket to WeCom (no public IP needed),
//! authenticates with `aibot_subscribe`, keeps it alive with `ping` frames and
//! receives user messages as `aibot_msg_callback` frames. Replies reuse the
//! callback's `req_id` (`aibot_respond_msg`); anything else is sent
//! proactively (`aibot_send_msg`). Files (the rest of a reply too long for
//! messages, [`crate::overflow`]) are uploaded in 512 KiB base64 chunks over
//! the same socket (`aibot_upload_media_init` / `_chunk` / `_finish`, as
//! WeCom's SDKs do) and sent as a `file` message.
//!
//! Guarantees:
//! - Every frame that expects an answer waits for its ack (matched by
//!   `req_id`, [`WecomConfig::ack_timeout`]); frames for one `req_id` are sent
//!   one at a time, as WeCom's own SDK does.
//! - A message is delivered once per `msgid` (G7), long texts that WeCom cut
//!   into pieces are joined first ([`merge`]), pieces of different chats never
//!   mix.
//! - A dead connection (two unanswered pings, or a closed socket) is
//!   reopened with backoff (1 s doubling to 30 s) and subscribed again;
//!   refused credentials and `disconnected_event` (another connection took
//!   over) stop the adapter for good, visible in [`WecomAdapter::state`].
//! - Images and files arrive encrypted and are decrypted with their message's
//!   key; replies stream as WeCom `stream` messages ([`media`], SPEC X6).
//! - The secret never reaches a log line or a `Debug` output.

mod bounded;
mod conn;
pub mod descriptor;
#[doc(hidden)]
pub mod fuzz_entry;
pub mod media;
pub mod merge;
pub mod staging;
pub mod wire;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use hermes_runtime::secret::Secret;
use hermes_runtime::sync::lock;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use bounded::BoundedMap;
use hermes_platform_kit::adapter::{
    AdapterError, EventHandler, FetchedMedia, FileKind, OutgoingFile, PlatformAdapter, ReplyStream,
};
use hermes_platform_kit::event::MediaRef;
use hermes_platform_kit::split::{LengthUnit, split_message};

/// The platform name in session keys.
pub const PLATFORM: &str = "wecom";
/// WeCom's limit for one markdown message, in characters.
pub const MAX_MESSAGE_CHARS: usize = 4000;
/// The production endpoint.
pub const DEFAULT_WS_URL: &str = "wss://openws.work.weixin.qq.com";

/// How many message ids are remembered for dedup and for replies.
const REMEMBERED_MESSAGES: usize = 2048;

/// Settings of the adapter. Durations are fields (not constants) so tests can
/// run the heartbeat and the merge on short clocks.
#[derive(Clone)]
pub struct WecomConfig {
    /// The bot id (`WECOM_BOT_ID`).
    pub bot_id: String,
    /// The bot secret (`WECOM_SECRET`). Never logged (a [`Secret`]).
    pub secret: Secret,
    /// The WebSocket endpoint (`WECOM_WS_URL`), `ws://` or `wss://`.
    pub ws_url: String,
    /// Time between `ping` frames; two unanswered pings mean a dead connection.
    pub heartbeat_interval: Duration,
    /// How long a frame waits for its ack (subscribe, replies, sends).
    pub ack_timeout: Duration,
    /// How long opening the socket may take.
    pub connect_timeout: Duration,
    /// First reconnect delay; doubles on each failure.
    pub reconnect_base: Duration,
    /// Cap of the reconnect delay.
    pub reconnect_max: Duration,
    /// Wait for another piece after an ordinary piece (G8).
    pub fragment_wait: Duration,
    /// Wait for another piece after a piece close to the limit (G8).
    pub fragment_max_wait: Duration,
    /// A piece this long (characters) is "close to the limit".
    pub fragment_near_limit: usize,
    /// Sent (as `aibot_respond_welcome_msg`) when a user opens the chat.
    pub welcome_text: Option<String>,
}

impl WecomConfig {
    /// The production defaults for `bot_id` and `secret`.
    pub fn new(bot_id: impl Into<String>, secret: impl Into<String>) -> Self {
        Self {
            bot_id: bot_id.into(),
            secret: Secret::new(secret),
            ..Self::default()
        }
    }

    fn merge_config(&self) -> merge::MergeConfig {
        merge::MergeConfig {
            wait: self.fragment_wait,
            max_wait: self.fragment_max_wait,
            near_limit: self.fragment_near_limit,
            ..merge::MergeConfig::default()
        }
    }
}

impl Default for WecomConfig {
    fn default() -> Self {
        Self {
            bot_id: String::new(),
            secret: Secret::default(),
            ws_url: DEFAULT_WS_URL.to_owned(),
            heartbeat_interval: Duration::from_secs(30),
            ack_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
            reconnect_base: Duration::from_secs(1),
            reconnect_max: Duration::from_secs(30),
            fragment_wait: Duration::from_millis(600),
            fragment_max_wait: Duration::from_secs(2),
            fragment_near_limit: 3900,
            welcome_text: None,
        }
    }
}

impl fmt::Debug for WecomConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WecomConfig")
            .field("bot_id", &self.bot_id)
            .field("secret", &self.secret)
            .field("ws_url", &self.ws_url)
            .field("heartbeat_interval", &self.heartbeat_interval)
            .field("ack_timeout", &self.ack_timeout)
            .field("fragment_wait", &self.fragment_wait)
            .field("fragment_max_wait", &self.fragment_max_wait)
            .field("fragment_near_limit", &self.fragment_near_limit)
            .field("welcome_text", &self.welcome_text)
            .finish_non_exhaustive()
    }
}

/// Bad WeCom settings, found before connecting. Not retryable: fix the
/// environment.
#[derive(Debug, thiserror::Error)]
pub enum WecomConfigError {
    /// One of the two credentials is set, the other is not.
    #[error("wecom: {0} is not set (WECOM_BOT_ID and WECOM_SECRET are both needed)")]
    Missing(&'static str),
    /// `WECOM_WS_URL` is not a WebSocket URL.
    #[error("wecom: WECOM_WS_URL must start with ws:// or wss://, got {0:?}")]
    BadUrl(String),
}

/// Where the adapter's connection stands.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WecomState {
    /// `connect` was not called (or `disconnect` finished).
    Idle,
    /// Opening the socket or waiting for the subscribe ack.
    Connecting,
    /// Subscribed; messages flow.
    Connected,
    /// The connection died; waiting `delay` before attempt `attempt`.
    Reconnecting {
        /// The reconnect attempt about to be made (1-based).
        attempt: u32,
        /// The backoff before it.
        delay: Duration,
    },
    /// WeCom refused the credentials; stopped for good.
    AuthFailed(String),
    /// A newer connection for this bot took over (`disconnected_event`);
    /// stopped for good.
    Replaced(String),
    /// The first connection could not be opened; stopped.
    Failed(String),
}

/// The WeCom AI-bot adapter. Cheap to share: all state is behind an `Arc`.
#[derive(Clone)]
pub struct WecomAdapter {
    inner: Arc<Inner>,
}

impl fmt::Debug for WecomAdapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WecomAdapter")
            .field("config", &self.inner.config)
            .field("state", &self.state())
            .finish()
    }
}

/// Where a reply to a message goes.
#[derive(Debug)]
struct ReplyTarget {
    req_id: String,
    chat_id: String,
    /// WeCom accepts one answer per callback `req_id`; later pieces and
    /// later replies go out as proactive messages.
    used: bool,
}

/// An ack as the connection task hands it to the waiting sender.
#[derive(Debug)]
struct Ack {
    errcode: i64,
    errmsg: String,
    body: serde_json::Value,
}

/// State shared by the adapter handle and the connection task.
struct Inner {
    config: WecomConfig,
    /// Whether this process holds the bot's socket (SPEC X8): frames read
    /// after the lease is gone (a process woken from SIGSTOP) are dropped.
    gate: hermes_platform_kit::lease::LeaseGate,
    state: Mutex<WecomState>,
    /// The live connection's outgoing queue; `None` while not subscribed.
    out: Mutex<Option<mpsc::UnboundedSender<String>>>,
    /// Senders waiting for an ack, by `req_id`.
    pending: Mutex<HashMap<String, oneshot::Sender<Ack>>>,
    /// message id → the callback's `req_id` and chat.
    replies: Mutex<BoundedMap<ReplyTarget>>,
    /// One async lock per `req_id` in flight, so its frames go one at a time.
    req_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Stop signal and the connection task.
    task: Mutex<Option<(watch::Sender<bool>, JoinHandle<()>)>>,
    ids: ReqIds,
    /// Where pieces of text wait durably for their merge ([`staging`]);
    /// `None`: in memory only.
    store: Option<Arc<Mutex<hermes_runtime::store::Store>>>,
}

/// `req_id`s in the SDK's shape `{prefix}_{ms}_{hex}`; unique per process by
/// a counter, hard to guess across processes by a random seed.
struct ReqIds {
    seed: u64,
    counter: AtomicU64,
}

impl ReqIds {
    fn new() -> Self {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(now_ms());
        Self {
            seed: h.finish(),
            counter: AtomicU64::new(0),
        }
    }

    fn next(&self, prefix: &str) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let mix = self.seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        format!("{prefix}_{}_{:08x}{n:x}", now_ms(), mix as u32)
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl WecomAdapter {
    /// An adapter with `config`; nothing happens until `connect`.
    pub fn new(config: WecomConfig) -> Self {
        Self::build(config, None)
    }

    /// An adapter that stores each piece of text in `store` before reading
    /// the next frame, so a piece waiting for its merge survives a kill
    /// ([`staging`]). The gateway builds it this way.
    pub fn with_store(
        config: WecomConfig,
        store: Arc<Mutex<hermes_runtime::store::Store>>,
    ) -> Self {
        Self::build(config, Some(store))
    }

    fn build(config: WecomConfig, store: Option<Arc<Mutex<hermes_runtime::store::Store>>>) -> Self {
        Self {
            inner: Arc::new(Inner {
                config,
                gate: hermes_platform_kit::lease::LeaseGate::default(),
                state: Mutex::new(WecomState::Idle),
                out: Mutex::new(None),
                pending: Mutex::new(HashMap::new()),
                replies: Mutex::new(BoundedMap::new(REMEMBERED_MESSAGES)),
                req_locks: Mutex::new(HashMap::new()),
                task: Mutex::new(None),
                ids: ReqIds::new(),
                store,
            }),
        }
    }

    /// Builds the adapter from the environment: `None` when WeCom is not
    /// configured (neither `WECOM_BOT_ID` nor `WECOM_SECRET` set), an error
    /// when only one is set or `WECOM_WS_URL` is not a WebSocket URL.
    pub fn from_env(
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Option<Result<Self, WecomConfigError>> {
        let get = |k: &str| {
            env(k)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let bot_id = get("WECOM_BOT_ID");
        let secret = get("WECOM_SECRET");
        let (bot_id, secret) = match (bot_id, secret) {
            (None, None) => return None,
            (Some(_), None) => return Some(Err(WecomConfigError::Missing("WECOM_SECRET"))),
            (None, Some(_)) => return Some(Err(WecomConfigError::Missing("WECOM_BOT_ID"))),
            (Some(b), Some(s)) => (b, s),
        };
        let mut config = WecomConfig::new(bot_id, secret);
        if let Some(url) = get("WECOM_WS_URL") {
            if !(url.starts_with("ws://") || url.starts_with("wss://")) {
                return Some(Err(WecomConfigError::BadUrl(url)));
            }
            config.ws_url = url;
        }
        Some(Ok(Self::new(config)))
    }

    /// The settings in use.
    pub fn config(&self) -> &WecomConfig {
        &self.inner.config
    }

    /// Where the connection stands (see [`WecomState`]).
    pub fn state(&self) -> WecomState {
        lock(&self.inner.state).clone()
    }

    /// Why the adapter stopped for good, as the runner reports errors:
    /// refused credentials or another connection taking over.
    pub fn stop_error(&self) -> Option<AdapterError> {
        match self.state() {
            WecomState::AuthFailed(message) => Some(AdapterError::Auth {
                platform: PLATFORM,
                message,
            }),
            WecomState::Replaced(message) => Some(AdapterError::Conflict {
                platform: PLATFORM,
                message,
            }),
            WecomState::Failed(message) => Some(AdapterError::Network {
                platform: PLATFORM,
                message,
            }),
            _ => None,
        }
    }
}

impl Inner {
    fn set_state(&self, s: WecomState) {
        *lock(&self.state) = s;
    }

    /// Remembers where a reply to `message_id` goes. Returns `false` for a
    /// message id seen before (a duplicate delivery, G7).
    fn remember(&self, message_id: &str, req_id: &str, chat_id: &str) -> bool {
        lock(&self.replies).insert_new(
            message_id,
            ReplyTarget {
                req_id: req_id.to_owned(),
                chat_id: chat_id.to_owned(),
                used: false,
            },
        )
    }

    /// The callback `req_id` to answer `message_id` with, if it is still
    /// unanswered and belongs to `chat_id`; marks it used.
    fn take_reply_req_id(&self, message_id: &str, chat_id: &str) -> Option<String> {
        let mut replies = lock(&self.replies);
        let t = replies.get_mut(message_id)?;
        if t.used || t.chat_id != chat_id {
            return None;
        }
        t.used = true;
        Some(t.req_id.clone())
    }

    /// Sends one frame and waits for its ack. Frames sharing a `req_id` wait
    /// for each other.
    async fn request(&self, req_id: &str, cmd: &str, frame: String) -> Result<(), AdapterError> {
        self.request_for_body(req_id, cmd, frame).await.map(|_| ())
    }

    /// [`Inner::request`], returning the ack's body.
    async fn request_for_body(
        &self,
        req_id: &str,
        cmd: &str,
        frame: String,
    ) -> Result<serde_json::Value, AdapterError> {
        let req_lock = lock(&self.req_locks)
            .entry(req_id.to_owned())
            .or_default()
            .clone();
        let result = {
            let _turn = req_lock.lock().await;
            self.request_locked(req_id, cmd, frame).await
        };
        drop(req_lock);
        let mut locks = lock(&self.req_locks);
        if locks.get(req_id).is_some_and(|l| Arc::strong_count(l) == 1) {
            locks.remove(req_id);
        }
        result
    }

    async fn request_locked(
        &self,
        req_id: &str,
        cmd: &str,
        frame: String,
    ) -> Result<serde_json::Value, AdapterError> {
        let (tx, rx) = oneshot::channel();
        let out = lock(&self.out).clone();
        let Some(out) = out else {
            return Err(AdapterError::NotConnected { platform: PLATFORM });
        };
        lock(&self.pending).insert(req_id.to_owned(), tx);
        if out.send(frame).is_err() {
            lock(&self.pending).remove(req_id);
            return Err(AdapterError::NotConnected { platform: PLATFORM });
        }
        match tokio::time::timeout(self.config.ack_timeout, rx).await {
            Ok(Ok(Ack {
                errcode: 0, body, ..
            })) => Ok(body),
            Ok(Ok(Ack {
                errcode, errmsg, ..
            })) => Err(AdapterError::Rejected {
                platform: PLATFORM,
                message: format!("{cmd} refused: errcode={errcode}, errmsg={errmsg}"),
            }),
            Ok(Err(_)) => Err(AdapterError::Network {
                platform: PLATFORM,
                message: format!("connection lost before {cmd} was acknowledged"),
            }),
            Err(_) => {
                lock(&self.pending).remove(req_id);
                Err(AdapterError::Network {
                    platform: PLATFORM,
                    message: format!("no ack for {cmd} within {:?}", self.config.ack_timeout),
                })
            }
        }
    }

    /// Sends one piece proactively to `chat_id`.
    async fn send_proactive(&self, chat_id: &str, piece: &str) -> Result<(), AdapterError> {
        let req_id = self.ids.next(wire::CMD_SEND);
        let frame = wire::send_markdown(&req_id, chat_id, piece);
        self.request(&req_id, wire::CMD_SEND, frame).await
    }

    /// Uploads `content` as a temporary file (`aibot_upload_media_init`, a
    /// `…_chunk` per 512 KiB, `…_finish`) and returns its `media_id`.
    async fn upload(&self, file_name: &str, content: &[u8]) -> Result<String, AdapterError> {
        use base64::Engine as _;
        use md5::Digest as _;
        let rejected = |message: String| AdapterError::Rejected {
            platform: PLATFORM,
            message,
        };
        if content.len() < MIN_FILE_BYTES || content.len() > MAX_FILE_BYTES {
            return Err(rejected(format!(
                "a file of {} bytes cannot be sent (WeCom takes {MIN_FILE_BYTES} bytes to {} MiB)",
                content.len(),
                MAX_FILE_BYTES >> 20
            )));
        }
        let chunks: Vec<&[u8]> = content.chunks(wire::UPLOAD_CHUNK_BYTES).collect();
        let md5_hex: String = md5::Md5::digest(content)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let field = |body: &serde_json::Value, name: &str, cmd: &str| {
            body.get(name)
                .and_then(serde_json::Value::as_str)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| rejected(format!("the {cmd} ack carries no {name}")))
        };
        let req_id = self.ids.next(wire::CMD_UPLOAD_INIT);
        let frame = wire::upload_init(&req_id, file_name, content.len(), chunks.len(), &md5_hex);
        let body = self
            .request_for_body(&req_id, wire::CMD_UPLOAD_INIT, frame)
            .await?;
        let upload_id = field(&body, "upload_id", wire::CMD_UPLOAD_INIT)?;
        for (index, chunk) in chunks.iter().enumerate() {
            let req_id = self.ids.next(wire::CMD_UPLOAD_CHUNK);
            let data = base64::engine::general_purpose::STANDARD.encode(chunk);
            let frame = wire::upload_chunk(&req_id, &upload_id, index, &data);
            self.request(&req_id, wire::CMD_UPLOAD_CHUNK, frame).await?;
        }
        let req_id = self.ids.next(wire::CMD_UPLOAD_FINISH);
        let frame = wire::upload_finish(&req_id, &upload_id);
        let body = self
            .request_for_body(&req_id, wire::CMD_UPLOAD_FINISH, frame)
            .await?;
        field(&body, "media_id", wire::CMD_UPLOAD_FINISH)
    }
}

/// WeCom refuses files smaller than this.
const MIN_FILE_BYTES: usize = 5;
/// WeCom's limit for a file message.
const MAX_FILE_BYTES: usize = 20 * 1024 * 1024;

#[async_trait]
impl PlatformAdapter for WecomAdapter {
    fn platform(&self) -> &'static str {
        PLATFORM
    }

    /// The bot's id (`WECOM_BOT_ID`; not a secret).
    fn bot_id(&self) -> String {
        self.inner.config.bot_id.clone()
    }

    fn set_lease(&self, lease: Option<hermes_platform_kit::lease::Held>) {
        self.inner.gate.set(lease);
    }

    fn max_message_len(&self) -> usize {
        MAX_MESSAGE_CHARS
    }

    fn can_send_files(&self) -> bool {
        true
    }

    /// Every kind goes as a `file` message (the AI-bot upload has no image
    /// or voice type; spoken replies stay text: `can_send_voice` is false).
    fn max_upload_bytes(&self, _kind: FileKind) -> u64 {
        MAX_FILE_BYTES as u64
    }

    /// Uploads the file over the WebSocket (the upload commands of the
    /// AI-bot protocol) and sends it with `aibot_send_msg` as a `file`
    /// message. WeCom file messages have no caption; the runner's note in
    /// the message before says what the file is.
    async fn send_file(
        &self,
        chat_id: &str,
        file: &OutgoingFile,
        _reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        let media_id = self.inner.upload(&file.file_name, &file.content).await?;
        let req_id = self.inner.ids.next(wire::CMD_SEND);
        let frame = wire::send_file(&req_id, chat_id, &media_id);
        self.inner.request(&req_id, wire::CMD_SEND, frame).await
    }

    async fn connect(&self, handler: EventHandler) -> Result<(), AdapterError> {
        {
            let task = lock(&self.inner.task);
            if task.as_ref().is_some_and(|(_, h)| !h.is_finished()) {
                tracing::warn!("wecom: connect called while already connected");
                return Ok(());
            }
        }
        let (stop_tx, stop_rx) = watch::channel(false);
        let (first_tx, first_rx) = oneshot::channel();
        self.inner.set_state(WecomState::Connecting);
        let inner = self.inner.clone();
        let handle = hermes_runtime::task::spawn(conn::run(inner, handler, stop_rx, first_tx));
        *lock(&self.inner.task) = Some((stop_tx, handle));
        match first_rx.await {
            Ok(result) => result,
            Err(_) => Err(AdapterError::Network {
                platform: PLATFORM,
                message: "the connection task ended before connecting".to_owned(),
            }),
        }
    }

    async fn disconnect(&self) {
        let task = lock(&self.inner.task).take();
        if let Some((stop, handle)) = task {
            let _ = stop.send(true);
            // The task closes the socket and hands out held messages; if it
            // hangs on a dead peer, give up after the ack timeout.
            let abort = handle.abort_handle();
            if tokio::time::timeout(self.inner.config.ack_timeout * 2, handle)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        *lock(&self.inner.out) = None;
        lock(&self.inner.pending).clear();
        let mut state = lock(&self.inner.state);
        if matches!(
            *state,
            WecomState::Connected | WecomState::Connecting | WecomState::Reconnecting { .. }
        ) {
            *state = WecomState::Idle;
        }
    }

    /// Downloads the encrypted file and decrypts it ([`media`]).
    async fn fetch_media(
        &self,
        media: &MediaRef,
        max_bytes: u64,
    ) -> Result<FetchedMedia, AdapterError> {
        media::fetch(media, max_bytes).await
    }

    /// A `stream` reply on the callback's `req_id`, while it is unused
    /// ([`media`]); otherwise the reply is sent whole.
    async fn begin_reply(
        &self,
        chat_id: &str,
        reply_to: Option<&str>,
    ) -> Option<Box<dyn ReplyStream>> {
        let req_id = self.inner.take_reply_req_id(reply_to?, chat_id)?;
        Some(Box::new(media::WecomReply {
            inner: Arc::clone(&self.inner),
            req_id,
            stream_id: self.inner.ids.next("stream"),
            started: false,
        }))
    }

    fn stream_interval(&self) -> Duration {
        Duration::from_millis(800)
    }

    async fn gave_up(&self) -> String {
        // The state lives behind a plain mutex: looking once a second is
        // soon enough for a process that is about to exit.
        loop {
            if let Some(e) = self.stop_error() {
                return e.to_string();
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    async fn send(
        &self,
        chat_id: &str,
        text: &str,
        reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        let pieces = split_message(text, MAX_MESSAGE_CHARS, LengthUnit::Chars);
        for (i, piece) in pieces.iter().enumerate() {
            let reply_req = match (i, reply_to) {
                (0, Some(mid)) => self.inner.take_reply_req_id(mid, chat_id),
                _ => None,
            };
            match reply_req {
                Some(req_id) => {
                    let frame = wire::respond_markdown(&req_id, piece);
                    match self.inner.request(&req_id, wire::CMD_RESPOND, frame).await {
                        Ok(()) => {}
                        // The callback's req_id can expire; the text still
                        // has to reach the user.
                        Err(AdapterError::Rejected { message, .. }) => {
                            tracing::warn!(
                                "wecom: reply refused ({message}); sending it as a new message"
                            );
                            self.inner.send_proactive(chat_id, piece).await?;
                        }
                        Err(e) => return Err(e),
                    }
                }
                None => self.inner.send_proactive(chat_id, piece).await?,
            }
        }
        Ok(())
    }
}
