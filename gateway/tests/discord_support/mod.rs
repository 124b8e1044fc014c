//! A loopback fake of Discord for the adapter tests: the REST API (hyper,
//! [`rest`]) and the Gateway (tokio-tungstenite, [`gateway`]) on two
//! 127.0.0.1 ports, with the real protocol's semantics:
//!
//! - REST: `Authorization: Bot TOKEN` or 401; `GET /gateway/bot`,
//!   `/users/@me`, `/applications/@me`; `POST /channels/{id}/messages`
//!   refuses an unknown channel (404, code 10003), more than 2000
//!   characters (400, code 50035) and an empty message (400, code 50006),
//!   honours `enforce_nonce` (a repeated nonce answers the message already
//!   created); every channel is a rate-limit bucket of
//!   [`Behaviour::bucket_limit`] messages per [`Behaviour::bucket_window`]
//!   (`X-RateLimit-*` headers; the next message is a 429 with
//!   `retry_after` in the body and `Retry-After`), and a test can add
//!   429s of its own ([`FakeDiscord::rate_limit_next`]).
//! - Gateway: HELLO with [`Behaviour::heartbeat_ms`]; heartbeats answered
//!   with ACKs (unless turned off); IDENTIFY checks the token (close 4004)
//!   and the privileged MESSAGE_CONTENT intent (close 4014 unless enabled);
//!   READY gives a session id and a `resume_gateway_url` on its own path;
//!   every dispatch of the session gets the next sequence number and is
//!   kept, so RESUME (session id + seq) replays what the client missed,
//!   then RESUMED; an unknown session or seq is answered with op 9
//!   `d: false`. Without MESSAGE_CONTENT, guild messages that do not
//!   mention the bot arrive with empty content, as on Discord.
//! - Buttons and interactions ([`interactions`]): message components
//!   checked, a press dispatched as INTERACTION_CREATE, the callback
//!   answered once within 3 s.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

mod gateway;
mod interactions;
mod rest;

pub use interactions::Pressed;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

pub const TOKEN: &str = "OTAw.fake.bot-token_value";
pub const BOT_ID: &str = "900";
pub const GUILD: &str = "500";
pub const MESSAGE_CONTENT: u64 = 1 << 15;

/// How the fake behaves; tests change what they need.
#[derive(Clone, Debug)]
pub struct Behaviour {
    pub heartbeat_ms: u64,
    /// The Developer Portal's MESSAGE CONTENT switch.
    pub message_content_enabled: bool,
    pub bucket_limit: u32,
    pub bucket_window: Duration,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            heartbeat_ms: 1000,
            message_content_enabled: true,
            bucket_limit: 5,
            bucket_window: Duration::from_millis(400),
        }
    }
}

/// A control message to the live Gateway connection.
#[derive(Debug)]
pub(crate) enum Control {
    Send(Value),
    Close(u16),
    /// Drop the TCP connection without a close frame.
    Drop,
}

/// One REST request.
#[derive(Debug, Clone)]
pub struct RestCall {
    pub method: String,
    pub path: String,
    pub body: Value,
    pub status: u16,
    pub at: Instant,
}

/// A message the bot created.
#[derive(Debug, Clone)]
pub struct Posted {
    pub id: String,
    pub channel: String,
    pub content: String,
    pub reply_to: Option<String>,
    pub body: Value,
}

/// A Gateway frame the client sent.
#[derive(Debug, Clone)]
pub struct FromClient {
    pub connection: usize,
    pub payload: Value,
    pub at: Instant,
}

#[derive(Default)]
pub(crate) struct SessionLog {
    pub events: Vec<Value>,
    pub seq: u64,
}

#[derive(Default)]
pub(crate) struct State {
    pub behaviour: Option<Behaviour>,
    pub token_valid: bool,
    pub next_id: u64,
    pub sessions: HashMap<String, SessionLog>,
    /// The session the bot identified last and the intents it asked for.
    pub current: Option<(String, u64)>,
    /// The live connection: its number, its session (once READY/RESUMED),
    /// and its control channel.
    pub live: Option<(usize, Option<String>, mpsc::UnboundedSender<Control>)>,
    pub connections: Vec<String>,
    pub from_client: Vec<FromClient>,
    pub acks: bool,
    pub rest: Vec<RestCall>,
    pub posted: Vec<Posted>,
    pub nonces: HashMap<String, Value>,
    pub channels: HashSet<String>,
    pub dm_of: HashMap<String, String>,
    pub buckets: HashMap<String, (Instant, u32)>,
    pub forced_429: VecDeque<(f64, bool)>,
    pub typing: Vec<String>,
    /// Every message of every channel (users' and the bot's), whether a
    /// Gateway connection saw it or not: what `GET …/messages` reads.
    pub history: HashMap<String, Vec<Value>>,
    /// The CDN's files by path: (content type, bytes).
    pub cdn: HashMap<String, (String, Vec<u8>)>,
    /// Every CDN request: (path, its Authorization header).
    pub cdn_requests: Vec<(String, String)>,
    /// The next RESUME replays the whole session, not only what the client
    /// missed: Discord delivers at least once, and a client must cope.
    pub replay_all: bool,
    /// Every interaction dispatched, by id.
    pub interactions: HashMap<String, Pressed>,
    /// Ephemeral interaction answers: (the user who sees it, its text).
    pub ephemeral: Vec<(String, String)>,
}

pub(crate) struct Shared {
    pub state: Mutex<State>,
    pub changed: Notify,
    pub ws_url: String,
    pub api_url: String,
}

impl Shared {
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn behaviour(&self) -> Behaviour {
        self.state().behaviour.clone().unwrap()
    }

    pub(crate) fn snowflake(state: &mut State) -> String {
        state.next_id += 1;
        (1_000_000_000_000_000u64 + state.next_id).to_string()
    }

    /// Appends a dispatch to `session`'s log and sends it if that session
    /// is live.
    pub(crate) fn dispatch(&self, t: &str, d: Value) {
        let mut state = self.state();
        let Some((session, _)) = state.current.clone() else {
            return;
        };
        let log = state.sessions.get_mut(&session).unwrap();
        log.seq += 1;
        let payload = json!({"op": 0, "t": t, "s": log.seq, "d": d});
        log.events.push(payload.clone());
        if let Some((_, Some(live), tx)) = &state.live
            && *live == session
        {
            let _ = tx.send(Control::Send(payload));
        }
        drop(state);
        self.changed.notify_waiters();
    }
}

/// The fake. Dropping it leaves its tasks to the test runtime's end.
#[derive(Clone)]
pub struct FakeDiscord {
    pub(crate) shared: Arc<Shared>,
}

pub const WAIT: Duration = Duration::from_secs(20);

impl FakeDiscord {
    pub async fn start(behaviour: Behaviour) -> FakeDiscord {
        let rest_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let ws_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                behaviour: Some(behaviour),
                token_valid: true,
                acks: true,
                ..State::default()
            }),
            changed: Notify::new(),
            ws_url: format!("ws://{}", ws_listener.local_addr().unwrap()),
            api_url: format!("http://{}/api/v10", rest_listener.local_addr().unwrap()),
        });
        tokio::spawn(rest::serve(Arc::clone(&shared), rest_listener));
        tokio::spawn(gateway::serve(Arc::clone(&shared), ws_listener));
        FakeDiscord { shared }
    }

    pub fn api_url(&self) -> String {
        self.shared.api_url.clone()
    }

    /// Adds a server channel the bot can post in.
    pub fn add_channel(&self, id: &str) {
        self.shared.state().channels.insert(id.to_owned());
    }

    /// A user writes in a server channel. `mention` adds the bot's
    /// mention in front, as the Discord client does. Returns the message id.
    pub fn guild_message(&self, channel: &str, user: &str, text: &str, mention: bool) -> String {
        self.add_channel(channel);
        let (content, mentions) = if mention {
            (
                format!("<@{BOT_ID}> {text}"),
                json!([{"id": BOT_ID, "username": "hermes", "bot": true}]),
            )
        } else {
            (text.to_owned(), json!([]))
        };
        self.message(json!({
            "channel_id": channel, "guild_id": GUILD, "content": content, "mentions": mentions,
            "author": {"id": user, "username": format!("user{user}"), "global_name": null},
        }))
    }

    /// A user writes to the bot in a DM. Returns the message id.
    pub fn dm(&self, user: &str, text: &str) -> String {
        let channel = self.dm_channel(user);
        self.message(json!({
            "channel_id": channel, "content": text, "mentions": [],
            "author": {"id": user, "username": format!("user{user}")},
        }))
    }

    /// A user sends the bot a DM with a file: the bytes go on the fake's
    /// CDN, the message carries Discord's attachment object, whose `size`
    /// is `declared_size` (Discord's is the true size; a hostile or broken
    /// payload may say less). Returns the message id.
    pub fn dm_with_attachment(
        &self,
        user: &str,
        text: &str,
        file: (&str, &str, Vec<u8>),
        declared_size: usize,
    ) -> String {
        self.dm_attachment(user, text, file, declared_size, 0)
    }

    /// A user sends the bot a voice message in a DM: an Ogg attachment
    /// with Discord's `IS_VOICE_MESSAGE` flag (8192), as the client sends
    /// one. Returns the message id.
    pub fn dm_voice_message(&self, user: &str, ogg: Vec<u8>) -> String {
        let size = ogg.len();
        self.dm_attachment(
            user,
            "",
            ("voice-message.ogg", "audio/ogg", ogg),
            size,
            8192,
        )
    }

    fn dm_attachment(
        &self,
        user: &str,
        text: &str,
        file: (&str, &str, Vec<u8>),
        declared_size: usize,
        flags: u64,
    ) -> String {
        let (name, mime, bytes) = file;
        let channel = self.dm_channel(user);
        let base = self.shared.api_url.trim_end_matches("/api/v10").to_owned();
        let path = {
            let mut state = self.shared.state();
            let id = Shared::snowflake(&mut state);
            let path = format!("/attachments/{channel}/{id}/{name}");
            state.cdn.insert(path.clone(), (mime.to_owned(), bytes));
            path
        };
        let attachment = json!({
            "id": path.rsplit('/').nth(1), "filename": name, "size": declared_size,
            "url": format!("{base}{path}"), "proxy_url": format!("{base}{path}"),
            "content_type": mime,
        });
        self.message(json!({
            "channel_id": channel, "content": text, "mentions": [],
            "author": {"id": user, "username": format!("user{user}")},
            "attachments": [attachment], "flags": flags,
        }))
    }

    /// The CDN requests so far: (path, Authorization header).
    pub fn cdn_requests(&self) -> Vec<(String, String)> {
        self.shared.state().cdn_requests.clone()
    }

    /// A message from another bot in a server channel, mentioning ours.
    pub fn bot_message(&self, channel: &str, text: &str) -> String {
        self.add_channel(channel);
        self.message(json!({
            "channel_id": channel, "guild_id": GUILD, "content": format!("<@{BOT_ID}> {text}"),
            "mentions": [{"id": BOT_ID}],
            "author": {"id": "777", "username": "otherbot", "bot": true},
        }))
    }

    /// The DM channel between the bot and `user` (made on first use).
    pub fn dm_channel(&self, user: &str) -> String {
        let mut state = self.shared.state();
        if let Some(c) = state.dm_of.get(user) {
            return c.clone();
        }
        let id = Shared::snowflake(&mut state);
        state.dm_of.insert(user.to_owned(), id.clone());
        state.channels.insert(id.clone());
        id
    }

    /// Dispatches MESSAGE_CREATE (filled in like Discord's), applying the
    /// MESSAGE_CONTENT gating of the session's intents.
    fn message(&self, mut m: Value) -> String {
        let (id, intents) = {
            let mut state = self.shared.state();
            (
                Shared::snowflake(&mut state),
                state.current.as_ref().map_or(0, |c| c.1),
            )
        };
        m["id"] = json!(id);
        m["type"] = json!(0);
        m["timestamp"] = json!("2026-01-01T00:00:00.000000+00:00");
        if m.get("attachments").is_none() {
            m["attachments"] = json!([]);
        }
        m["embeds"] = json!([]);
        m["tts"] = json!(false);
        m["mention_everyone"] = json!(false);
        m["pinned"] = json!(false);
        let in_guild = m.get("guild_id").is_some();
        let mentions_bot = m["mentions"]
            .as_array()
            .is_some_and(|a| a.iter().any(|u| u["id"] == BOT_ID));
        {
            let mut state = self.shared.state();
            let channel = m["channel_id"].as_str().unwrap_or_default().to_owned();
            state.history.entry(channel).or_default().push(m.clone());
        }
        if intents & MESSAGE_CONTENT == 0 && in_guild && !mentions_bot {
            m["content"] = json!("");
        }
        self.shared.dispatch("MESSAGE_CREATE", m);
        id
    }

    /// Sends op 7 RECONNECT on the live connection.
    pub fn reconnect(&self) {
        self.control(Control::Send(json!({"op": 7, "d": null})));
    }

    /// Sends op 9 INVALID_SESSION, and forgets the session if not resumable.
    pub fn invalid_session(&self, resumable: bool) {
        if !resumable {
            let mut state = self.shared.state();
            if let Some((s, _)) = state.current.take() {
                state.sessions.remove(&s);
            }
        }
        self.control(Control::Send(json!({"op": 9, "d": resumable})));
    }

    /// Drops the live TCP connection without a close frame.
    pub fn drop_connection(&self) {
        self.control(Control::Drop);
    }

    /// Closes the live connection with `code`.
    pub fn close(&self, code: u16) {
        self.control(Control::Close(code));
    }

    fn control(&self, c: Control) {
        let state = self.shared.state();
        if let Some((_, _, tx)) = &state.live {
            let _ = tx.send(c);
        }
    }

    /// The next RESUME replays every dispatch of the session (a duplicate
    /// delivery of what the client has already handled).
    pub fn replay_on_next_resume(&self) {
        self.shared.state().replay_all = true;
    }

    pub fn set_acks(&self, on: bool) {
        self.shared.state().acks = on;
    }

    pub fn revoke_token(&self) {
        self.shared.state().token_valid = false;
    }

    /// The next `n` message creations answer 429 with `retry_after` seconds.
    pub fn rate_limit_next(&self, n: usize, retry_after: f64, global: bool) {
        let mut state = self.shared.state();
        for _ in 0..n {
            state.forced_429.push_back((retry_after, global));
        }
    }

    pub fn posted(&self) -> Vec<Posted> {
        self.shared.state().posted.clone()
    }

    /// What the bot posted after the first `n`, in order.
    pub fn posted_since(&self, n: usize) -> Vec<Posted> {
        let s = self.shared.state();
        s.posted.get(n..).unwrap_or_default().to_vec()
    }

    pub fn rest_calls(&self) -> Vec<RestCall> {
        self.shared.state().rest.clone()
    }

    pub fn client_frames(&self) -> Vec<FromClient> {
        self.shared.state().from_client.clone()
    }

    /// Client frames of opcode `op`.
    pub fn client_ops(&self, op: u64) -> Vec<FromClient> {
        self.client_frames()
            .into_iter()
            .filter(|f| f.payload["op"] == op)
            .collect()
    }

    /// The paths the client opened WebSockets on, in order.
    pub fn connections(&self) -> Vec<String> {
        self.shared.state().connections.clone()
    }

    pub fn typing(&self) -> Vec<String> {
        self.shared.state().typing.clone()
    }

    /// The current session's id.
    pub fn session_id(&self) -> Option<String> {
        self.shared.state().current.as_ref().map(|c| c.0.clone())
    }

    /// The last sequence number dispatched in the current session.
    pub fn last_seq(&self) -> u64 {
        let state = self.shared.state();
        state
            .current
            .as_ref()
            .and_then(|(s, _)| state.sessions.get(s))
            .map_or(0, |l| l.seq)
    }

    /// Whether a connection is live and READY (or RESUMED).
    pub fn is_live(&self) -> bool {
        matches!(&self.shared.state().live, Some((_, Some(_), _)))
    }

    /// Waits until `check` holds (re-checked on every change and every
    /// 20 ms), or panics naming `what`.
    pub async fn wait_for(&self, what: &str, check: impl Fn(&FakeDiscord) -> bool) {
        let deadline = Instant::now() + WAIT;
        while !check(self) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            let _ = tokio::time::timeout(Duration::from_millis(20), self.shared.changed.notified())
                .await;
        }
    }

    /// Waits for `n` posted messages; returns them all.
    pub async fn wait_posted(&self, n: usize) -> Vec<Posted> {
        self.wait_for(&format!("{n} posted messages"), |f| f.posted().len() >= n)
            .await;
        self.posted()
    }
}
