//! A loopback fake of Slack for the adapter tests, written from Slack's
//! documentation of Socket Mode and the Web API (not from what the
//! adapter sends): the Web API (hyper, [`web`]) and the Socket Mode
//! WebSocket (tokio-tungstenite, [`socket`]) on two 127.0.0.1 ports.
//!
//! - Web API: `POST /api/METHOD`, arguments as JSON, form or query; the
//!   token in `Authorization: Bearer`. Errors are HTTP 200 with
//!   `{"ok": false, "error"}`: `not_authed` without a token,
//!   `invalid_auth` for an unknown one, `token_revoked` once revoked,
//!   `not_allowed_token_type` for the wrong kind (`apps.connections.open`
//!   takes only the app-level `xapp-` token, the rest only the bot's).
//!   `auth.test`; `chat.postMessage` (`no_text`, `channel_not_found`,
//!   `msg_too_long` over 40 000 characters); `reactions.add`
//!   (`already_reacted`); the external upload:
//!   `files.getUploadURLExternal` (`filename`, `length`) → an upload URL →
//!   `files.completeUploadExternal` (`file_not_found` before the bytes
//!   arrived). A rate limit answers HTTP 429 with `Retry-After` (seconds)
//!   and `{"ok": false, "error": "ratelimited"}`, and the call did nothing.
//!   Files of users are served at `url_private_download` only with the bot
//!   token; without it Slack answers its sign-in page (HTML, 200).
//! - Socket Mode: `apps.connections.open` gives a one-use `wss` URL
//!   (`ws://` here); a connection gets `hello` first. Every event goes in
//!   an `events_api` envelope with its own `envelope_id`; one not
//!   acknowledged within [`Behaviour::ack_timeout`] (Slack: 3 s) is sent
//!   again with `retry_attempt` + 1 and `retry_reason: "timeout"`, at most
//!   3 retries; an event waiting while no socket is open goes to the next
//!   one. `disconnect` (`refresh_requested`, `warning`) asks the client to
//!   reconnect; the old socket closes after a grace period.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

mod socket;
mod web;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

pub const BOT_TOKEN: &str = "xoxb-1111-2222-fakebotsecret";
pub const APP_TOKEN: &str = "xapp-1-A0FAKEAPP-3333-fakeappsecret";
pub const BOT_USER: &str = "UBOT0001";
pub const TEAM: &str = "T0FAKE";

/// How the fake behaves; tests change what they need.
#[derive(Clone, Debug)]
pub struct Behaviour {
    /// Slack waits 3 s for an acknowledgement before retrying.
    pub ack_timeout: Duration,
    /// Retries after the first delivery (Slack: 3).
    pub max_retries: u32,
    /// How long an old socket stays open after `disconnect`.
    pub disconnect_grace: Duration,
    /// This many acknowledgements get lost on the way (Slack then sends
    /// the envelope again).
    pub lose_acks: usize,
    /// Every socket is cut right after its `hello` (a broken link).
    pub cut_after_hello: bool,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            ack_timeout: Duration::from_millis(1500),
            max_retries: 3,
            disconnect_grace: Duration::from_millis(300),
            lose_acks: 0,
            cut_after_hello: false,
        }
    }
}

/// An event waiting to be acknowledged.
#[derive(Debug, Clone)]
pub struct Pending {
    /// `events_api`, or `slash_commands` (whose `event` is the payload).
    pub kind: &'static str,
    pub event_id: String,
    pub event: Value,
    /// Deliveries so far.
    pub attempts: u32,
    /// The envelope id and when it was last sent, while in flight.
    pub in_flight: Option<(String, Instant)>,
}

/// One Web API call as the fake received it.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub token: String,
    pub args: Value,
    /// The HTTP status answered and Slack's `error`, if any.
    pub status: u16,
    pub error: Option<String>,
    pub at: Instant,
}

/// A message the bot posted (or a file it shared).
#[derive(Debug, Clone)]
pub struct BotMessage {
    pub channel: String,
    pub ts: String,
    pub thread_ts: Option<String>,
    pub text: String,
    /// `(file name, bytes)` for a shared file.
    pub file: Option<(String, Vec<u8>)>,
    pub at: Instant,
}

#[derive(Default)]
pub(crate) struct State {
    pub behaviour: Behaviour,
    pub bot_revoked: bool,
    pub next: u64,
    /// Tickets `apps.connections.open` handed out and not used yet.
    pub tickets: Vec<String>,
    /// Live sockets: number → control channel.
    pub live: Vec<(usize, mpsc::UnboundedSender<Control>)>,
    pub connections: usize,
    pub pending: VecDeque<Pending>,
    /// Every envelope sent: (connection, envelope).
    pub envelopes: Vec<(usize, Value)>,
    /// Every acknowledgement: (connection, envelope id, when).
    pub acks: Vec<(usize, String, Instant)>,
    pub calls: Vec<Call>,
    pub posted: Vec<BotMessage>,
    pub reactions: Vec<(String, String, String)>,
    /// Scripted 429s: method → Retry-After seconds of each.
    pub limits: HashMap<String, VecDeque<u64>>,
    pub throttled: usize,
    /// Uploads: file id → (file name, declared length, bytes once sent).
    pub uploads: HashMap<String, (String, usize, Option<Vec<u8>>)>,
    /// Users' files: path → (content type, bytes).
    pub files: HashMap<String, (String, Vec<u8>)>,
    /// Every file download: (path, whether it carried the bot token).
    pub downloads: Vec<(String, bool)>,
}

/// A control message to one live socket.
#[derive(Debug)]
pub(crate) enum Control {
    Send(Value),
    /// A frame as it is (a broken one, for the bad-input tests).
    Raw(String),
    /// Close after this long.
    CloseAfter(Duration),
    /// Drop the TCP connection at once.
    Drop,
}

pub(crate) struct Shared {
    pub state: Mutex<State>,
    pub changed: Notify,
    pub ws_base: String,
    pub api_url: String,
    pub base: String,
}

impl Shared {
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends every event that is due (new, or unacknowledged past the
    /// timeout) to the newest live socket.
    pub(crate) fn pump(&self) {
        let mut state = self.state();
        let Some((conn, tx)) = state.live.last().map(|(n, tx)| (*n, tx.clone())) else {
            return;
        };
        let timeout = state.behaviour.ack_timeout;
        let max = state.behaviour.max_retries;
        let now = Instant::now();
        let mut out = Vec::new();
        // Slash commands are not retried: the user sees Slack's timeout.
        let max_of = |p: &Pending| if p.kind == "slash_commands" { 0 } else { max };
        state.pending.retain(|p| {
            p.attempts <= max_of(p)
                || p.in_flight
                    .as_ref()
                    .is_some_and(|(_, at)| now.duration_since(*at) < timeout)
        });
        let mut next = state.next;
        for p in state.pending.iter_mut() {
            let due = match &p.in_flight {
                None => true,
                Some((_, at)) => now.duration_since(*at) >= timeout,
            };
            if !due || p.attempts > max_of(p) {
                continue;
            }
            next += 1;
            let envelope_id = format!("env-{next:06}");
            let retry_attempt = p.attempts;
            p.attempts += 1;
            p.in_flight = Some((envelope_id.clone(), now));
            if p.kind == "slash_commands" {
                out.push(json!({"envelope_id": envelope_id, "type": "slash_commands",
                    "accepts_response_payload": true, "payload": p.event}));
                continue;
            }
            out.push(json!({
                "envelope_id": envelope_id,
                "type": "events_api",
                "accepts_response_payload": false,
                "retry_attempt": retry_attempt,
                "retry_reason": if retry_attempt == 0 { "" } else { "timeout" },
                "payload": {
                    "token": "verification-token-unused",
                    "team_id": TEAM,
                    "api_app_id": "A0FAKEAPP",
                    "type": "event_callback",
                    "event_id": p.event_id,
                    "event_time": 1_700_000_000,
                    "event": p.event,
                },
            }));
        }
        state.next = next;
        for envelope in out {
            state.envelopes.push((conn, envelope.clone()));
            let _ = tx.send(Control::Send(envelope));
        }
    }

    pub(crate) fn ack(&self, conn: usize, envelope_id: &str) {
        let mut state = self.state();
        if state.behaviour.lose_acks > 0 {
            state.behaviour.lose_acks -= 1;
            return;
        }
        state
            .acks
            .push((conn, envelope_id.to_owned(), Instant::now()));
        state
            .pending
            .retain(|p| p.in_flight.as_ref().is_none_or(|(id, _)| id != envelope_id));
        drop(state);
        self.changed.notify_waiters();
    }
}

/// The fake Slack.
#[derive(Clone)]
pub struct FakeSlack {
    pub(crate) shared: Arc<Shared>,
}

impl FakeSlack {
    pub async fn start(behaviour: Behaviour) -> FakeSlack {
        let web_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let ws_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", web_listener.local_addr().unwrap());
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                behaviour,
                ..State::default()
            }),
            changed: Notify::new(),
            ws_base: format!("ws://{}", ws_listener.local_addr().unwrap()),
            api_url: format!("{base}/api"),
            base,
        });
        tokio::spawn(web::serve(Arc::clone(&shared), web_listener));
        tokio::spawn(socket::serve(Arc::clone(&shared), ws_listener));
        // Slack's retry clock.
        let pumping = Arc::clone(&shared);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                pumping.pump();
            }
        });
        FakeSlack { shared }
    }

    pub fn api_url(&self) -> String {
        self.shared.api_url.clone()
    }

    /// The env that points a gateway at this fake.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("SLACK_BOT_TOKEN", BOT_TOKEN.to_owned()),
            ("SLACK_APP_TOKEN", APP_TOKEN.to_owned()),
            ("SLACK_API_URL", self.api_url()),
        ]
    }

    fn next_ts(&self) -> String {
        let mut state = self.shared.state();
        state.next += 1;
        format!("1700000000.{:06}", state.next)
    }

    /// Slack emits `event` (a message is given its `ts`, returned).
    pub fn emit(&self, mut event: Value) -> String {
        let ts = event["ts"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| self.next_ts());
        event["ts"] = json!(ts);
        event["event_ts"] = json!(ts);
        let event_id = {
            let mut state = self.shared.state();
            state.next += 1;
            let id = format!("Ev{:08}", state.next);
            state.pending.push_back(Pending {
                kind: "events_api",
                event_id: id.clone(),
                event,
                attempts: 0,
                in_flight: None,
            });
            id
        };
        let _ = event_id;
        self.shared.pump();
        ts
    }

    /// A user runs the app's slash `command` in `channel`.
    pub fn slash_command(&self, user: &str, channel: &str, command: &str, text: &str) {
        let mut state = self.shared.state();
        state.next += 1;
        let n = state.next;
        state.pending.push_back(Pending {
            kind: "slash_commands",
            event_id: format!("cmd{n}"),
            event: json!({"token": "verification-token-unused", "team_id": TEAM, "team_domain": "fake",
                "channel_id": channel, "channel_name": "general", "user_id": user, "user_name": "user",
                "command": command, "text": text, "api_app_id": "A0FAKEAPP", "is_enterprise_install": "false",
                "response_url": "https://hooks.slack.com/commands/T0FAKE/1/x",
                "trigger_id": format!("{n}.1234.abcdef")}),
            attempts: 0,
            in_flight: None,
        });
        drop(state);
        self.shared.pump();
    }

    /// A user writes to the bot in their DM (`D` + user id).
    pub fn dm(&self, user: &str, text: &str) -> String {
        self.emit(
            json!({"type": "message", "channel": dm_of(user), "channel_type": "im",
            "user": user, "text": text, "team": TEAM}),
        )
    }

    /// A user writes in `channel` (in `thread`, if given). `mention` puts
    /// the bot's mention first; then Slack sends the message twice: as
    /// `message` and as `app_mention`, with the same `ts`.
    pub fn channel_message(
        &self,
        channel: &str,
        user: &str,
        text: &str,
        thread: Option<&str>,
        mention: bool,
    ) -> String {
        let text = if mention {
            format!("<@{BOT_USER}> {text}")
        } else {
            text.to_owned()
        };
        let mut message = json!({"type": "message", "channel": channel, "channel_type": "channel",
            "user": user, "text": text, "team": TEAM});
        if let Some(t) = thread {
            message["thread_ts"] = json!(t);
        }
        let ts = self.emit(message.clone());
        if mention {
            message["type"] = json!("app_mention");
            message["ts"] = json!(ts);
            message.as_object_mut().unwrap().remove("channel_type");
            self.emit(message);
        }
        ts
    }

    /// A user shares a file in their DM (`subtype: file_share`); the bytes
    /// are served at the file's `url_private_download`.
    pub fn dm_file(
        &self,
        user: &str,
        text: &str,
        name: &str,
        mimetype: &str,
        bytes: Vec<u8>,
    ) -> String {
        let id = {
            let mut s = self.shared.state();
            s.next += 1;
            format!("F{:08}", s.next)
        };
        let path = format!("/files-pri/{TEAM}-{id}/download/{name}");
        let size = bytes.len();
        self.shared
            .state()
            .files
            .insert(path.clone(), (mimetype.to_owned(), bytes));
        self.emit(
            json!({"type": "message", "subtype": "file_share", "channel": dm_of(user),
            "channel_type": "im", "user": user, "text": text, "team": TEAM,
            "files": [{"id": id, "name": name, "title": name, "mimetype": mimetype, "size": size,
                "url_private": format!("{}/files-pri/{TEAM}-{id}/{name}", self.shared.base),
                "url_private_download": format!("{}{path}", self.shared.base)}]}),
        )
    }

    /// The next `n` calls of `method` get 429 with `Retry-After: secs`.
    pub fn rate_limit_next(&self, method: &str, n: usize, secs: u64) {
        let mut state = self.shared.state();
        let q = state.limits.entry(method.to_owned()).or_default();
        for _ in 0..n {
            q.push_back(secs);
        }
    }

    pub fn throttled(&self) -> usize {
        self.shared.state().throttled
    }

    /// Slack sends `disconnect` with `reason` to every live socket.
    pub fn disconnect(&self, reason: &str) {
        let state = self.shared.state();
        let grace = state.behaviour.disconnect_grace;
        for (_, tx) in &state.live {
            let _ = tx.send(Control::Send(
                json!({"type": "disconnect", "reason": reason,
                "debug_info": {"host": "applink-fake"}}),
            ));
            let _ = tx.send(Control::CloseAfter(grace));
        }
    }

    /// `text` goes to every live socket as one frame, as it is.
    pub fn send_raw(&self, text: &str) {
        for (_, tx) in &self.shared.state().live {
            let _ = tx.send(Control::Raw(text.to_owned()));
        }
    }

    /// Every live socket is cut without a close frame.
    pub fn drop_sockets(&self) {
        for (_, tx) in &self.shared.state().live {
            let _ = tx.send(Control::Drop);
        }
    }

    /// From now on every socket is cut right after its `hello`.
    pub fn cut_after_hello(&self, on: bool) {
        self.shared.state().behaviour.cut_after_hello = on;
    }

    /// The bot token is revoked (an admin removed the app).
    pub fn revoke_bot_token(&self) {
        self.shared.state().bot_revoked = true;
        self.drop_sockets();
    }

    pub fn posted(&self) -> Vec<BotMessage> {
        self.shared.state().posted.clone()
    }

    /// What the bot posted after the first `n`, in order.
    pub fn posted_since(&self, n: usize) -> Vec<BotMessage> {
        let s = self.shared.state();
        s.posted.get(n..).unwrap_or_default().to_vec()
    }

    pub fn calls(&self, method: &str) -> Vec<Call> {
        self.shared
            .state()
            .calls
            .iter()
            .filter(|c| c.method == method)
            .cloned()
            .collect()
    }

    pub fn connections(&self) -> usize {
        self.shared.state().connections
    }

    pub fn envelopes(&self) -> Vec<(usize, Value)> {
        self.shared.state().envelopes.clone()
    }

    pub fn acks(&self) -> usize {
        self.shared.state().acks.len()
    }

    /// Events not acknowledged yet.
    pub fn unacknowledged(&self) -> usize {
        self.shared.state().pending.len()
    }

    pub fn reactions(&self) -> Vec<(String, String, String)> {
        self.shared.state().reactions.clone()
    }

    pub fn downloads(&self) -> Vec<(String, bool)> {
        self.shared.state().downloads.clone()
    }

    /// Waits (blocking) until `check` holds, or panics after `within`.
    pub fn wait_for(&self, what: &str, within: Duration, check: impl Fn(&FakeSlack) -> bool) {
        let deadline = Instant::now() + within;
        while !check(self) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

/// The DM channel of `user`.
pub fn dm_of(user: &str) -> String {
    format!("D{}", user.trim_start_matches('U'))
}
