//! The Gateway connection task: one socket at a time, resumed or
//! re-identified as Discord's close codes and opcodes say, until told to
//! stop or until Discord says stop (see the module docs of `discord`).

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use hermes_platform_kit::websocket;
use serde_json::{Value, json};
use tokio::sync::{oneshot, watch};
use tokio::time::{Instant, sleep_until};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::catchup::{self, MAX_PAGES, PAGE};
use super::inbound::{self, Rules};
use super::rest::RestError;
use super::{DiscordState, INTENTS, Inner, PLATFORM, lock};
use hermes_platform_kit::adapter::{AdapterError, EventHandler};

/// The largest Gateway message read. Dispatches are small JSON objects; a
/// READY with many guilds stays far below this.
const MAX_FRAME_BYTES: usize = 8 * 1024 * 1024;

/// A resumable session: what RESUME needs.
#[derive(Debug, Clone)]
struct Session {
    id: String,
    resume_url: String,
}

/// How one socket ended.
#[derive(Debug)]
enum End {
    /// `disconnect()` was called.
    Stopped,
    /// Stop for good with this error.
    Fatal(AdapterError),
    /// Open a new socket: resume the session if `resume`, else identify.
    Again {
        reason: String,
        resume: bool,
        /// The Gateway answered HELLO on this socket.
        hello: bool,
        /// Wait this long first (op 9's 1–5 s), instead of the backoff.
        wait: Option<Duration>,
    },
}

/// A number in `0..1`, different on every call (jitter).
fn unit_random() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

fn between(low: Duration, high: Duration) -> Duration {
    low + high.saturating_sub(low).mul_f64(unit_random())
}

/// The connection task's body.
pub(super) async fn run(
    inner: Arc<Inner>,
    handler: EventHandler,
    mut stop: watch::Receiver<bool>,
    first: oneshot::Sender<Result<(), AdapterError>>,
) {
    let mut first = Some(first);
    let mut session: Option<Session> = None;
    let mut seq: Option<u64> = None;
    let mut gateway_url: Option<String> = None;
    let mut attempt: u32 = 0;
    loop {
        let url = match &session {
            Some(s) => s.resume_url.clone(),
            None => match &gateway_url {
                Some(u) => u.clone(),
                None => match fetch_gateway_url(&inner).await {
                    Ok(u) => {
                        gateway_url = Some(u.clone());
                        u
                    }
                    Err(End::Fatal(e)) => return stop_for_good(&inner, &mut first, e),
                    Err(_) if first.is_some() => {
                        let e = AdapterError::Network {
                            platform: PLATFORM,
                            message: format!(
                                "cannot reach {} (GET /gateway/bot)",
                                inner.config.api_url
                            ),
                        };
                        return stop_for_good(&inner, &mut first, e);
                    }
                    Err(_) => String::new(),
                },
            },
        };
        let end = if url.is_empty() {
            End::Again {
                reason: "GET /gateway/bot failed".into(),
                resume: false,
                hello: false,
                wait: None,
            }
        } else {
            let mut link = Link {
                inner: &inner,
                handler: &handler,
                session: &mut session,
                seq: &mut seq,
                first: &mut first,
                ready: false,
            };
            let end = link.connect_once(&url, &mut stop).await;
            if link.ready {
                attempt = 0;
            }
            end
        };
        match end {
            End::Stopped => return,
            End::Fatal(e) => return stop_for_good(&inner, &mut first, e),
            End::Again {
                reason,
                resume,
                hello,
                wait,
            } => {
                if first.is_some() && !hello {
                    let e = AdapterError::Network {
                        platform: PLATFORM,
                        message: format!("cannot open the Gateway at {url}: {reason}"),
                    };
                    return stop_for_good(&inner, &mut first, e);
                }
                if !resume {
                    session = None;
                    seq = None;
                }
                attempt += 1;
                inner.set_state(DiscordState::Reconnecting { attempt });
                let delay = wait.unwrap_or_else(|| backoff(&inner, attempt));
                tracing::warn!(
                    "discord: {reason}; {} in {delay:?}",
                    if resume {
                        "resuming"
                    } else {
                        "identifying again"
                    }
                );
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    _ = stop.changed() => return,
                }
            }
        }
    }
}

/// The wait before reconnect `attempt`: none for the first (Discord asks
/// for a prompt resume), then doubling from `reconnect_base` with jitter.
fn backoff(inner: &Inner, attempt: u32) -> Duration {
    if attempt <= 1 {
        return Duration::ZERO;
    }
    let base = inner.config.reconnect_base;
    let full = base
        .saturating_mul(1u32 << (attempt - 2).min(10))
        .min(inner.config.reconnect_max);
    between(full / 2, full)
}

fn stop_for_good(
    inner: &Inner,
    first: &mut Option<oneshot::Sender<Result<(), AdapterError>>>,
    e: AdapterError,
) {
    // The one line the operator reads.
    tracing::error!("{e}");
    inner.set_state(DiscordState::Stopped(e.to_string()));
    match first.take() {
        Some(tx) => {
            *lock(&inner.fatal) = Some(clone_error(&e));
            let _ = tx.send(Err(e));
        }
        None => *lock(&inner.fatal) = Some(e),
    }
}

fn clone_error(e: &AdapterError) -> AdapterError {
    let message = match e {
        AdapterError::Auth { message, .. }
        | AdapterError::Rejected { message, .. }
        | AdapterError::Network { message, .. }
        | AdapterError::Conflict { message, .. } => message.clone(),
        other => other.to_string(),
    };
    match e {
        AdapterError::Auth { .. } => AdapterError::Auth {
            platform: PLATFORM,
            message,
        },
        AdapterError::Network { .. } => AdapterError::Network {
            platform: PLATFORM,
            message,
        },
        _ => AdapterError::Rejected {
            platform: PLATFORM,
            message,
        },
    }
}

/// `GET /gateway/bot`: where to connect. A refused token is fatal.
async fn fetch_gateway_url(inner: &Inner) -> Result<String, End> {
    match inner.rest.request("GET", "/gateway/bot", None).await {
        Ok(v) => v
            .get("url")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| End::Again {
                reason: "GET /gateway/bot gave no url".into(),
                resume: false,
                hello: false,
                wait: None,
            }),
        Err(RestError::Api {
            status: 401,
            message,
            ..
        }) => Err(End::Fatal(token_refused(&format!("HTTP 401: {message}")))),
        Err(e) => Err(End::Again {
            reason: format!("GET /gateway/bot failed: {e}"),
            resume: false,
            hello: false,
            wait: None,
        }),
    }
}

fn token_refused(detail: &str) -> AdapterError {
    AdapterError::Auth {
        platform: PLATFORM,
        message: format!(
            "DISCORD_BOT_TOKEN was refused ({detail}); copy the token again from the \
             Developer Portal (Applications → your bot → Bot → Reset Token)"
        ),
    }
}

/// What a close code means (Discord's Gateway close event codes).
fn classify_close(code: u16, reason: &str) -> End {
    let again = |resume: bool| End::Again {
        reason: format!("the Gateway closed the connection ({code} {reason})").replace(" )", ")"),
        resume,
        hello: true,
        wait: None,
    };
    let intents = "enable MESSAGE CONTENT INTENT under Privileged Gateway Intents on the \
                   Developer Portal's Bot page (the adapter asks for GUILD_MESSAGES, \
                   DIRECT_MESSAGES and MESSAGE_CONTENT)";
    let fatal = |what: String| {
        End::Fatal(AdapterError::Rejected {
            platform: PLATFORM,
            message: what,
        })
    };
    match code {
        4004 => End::Fatal(token_refused(
            "Gateway close code 4004, authentication failed",
        )),
        4013 => fatal(format!(
            "the Gateway refused the intents (close code 4013, invalid intents); {intents}"
        )),
        4014 => fatal(format!(
            "the Gateway refused the intents (close code 4014, disallowed intents): {intents}"
        )),
        4010..=4012 => fatal(format!(
            "the Gateway refused the connection (close code {code} {reason}); this bot needs sharding or a newer adapter"
        )),
        // Invalid sequence, session timed out: a new session.
        4007 | 4009 => again(false),
        // 1000/1001 from Discord, 4000 unknown error, 4001–4003, 4005,
        // 4008 rate limited …: resume.
        _ => again(true),
    }
}

/// One socket's view of the state that outlives it.
struct Link<'a> {
    inner: &'a Arc<Inner>,
    handler: &'a EventHandler,
    session: &'a mut Option<Session>,
    seq: &'a mut Option<u64>,
    first: &'a mut Option<oneshot::Sender<Result<(), AdapterError>>>,
    /// READY or RESUMED arrived on this socket.
    ready: bool,
}

type Sink = futures_util::stream::SplitSink<
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
    Message,
>;

/// Closes with a code other than 1000/1001, which keeps the session
/// resumable (Discord invalidates it on a normal close).
async fn close_resumable(sink: &mut Sink) {
    let frame = CloseFrame {
        code: CloseCode::from(4000),
        reason: "reconnecting".into(),
    };
    let _ = sink.send(Message::Close(Some(frame))).await;
}

impl Link<'_> {
    async fn connect_once(&mut self, base: &str, stop: &mut watch::Receiver<bool>) -> End {
        let config = &self.inner.config;
        let lost = |reason: String, hello: bool| End::Again {
            reason,
            resume: true,
            hello,
            wait: None,
        };
        let url = format!("{}/?v=10&encoding=json", base.trim_end_matches('/'));
        let connector = match websocket::tls_connector() {
            Ok(c) => c,
            Err(e) => return lost(e, false),
        };
        let open = websocket::connect(url.as_str(), MAX_FRAME_BYTES, true, connector);
        let ws = tokio::select! {
            r = tokio::time::timeout(config.connect_timeout, open) => match r {
                Ok(Ok(ws)) => ws,
                Ok(Err(e)) => return lost(e.to_string(), false),
                Err(_) => return lost(format!("no answer within {:?}", config.connect_timeout), false),
            },
            _ = stop.changed() => return End::Stopped,
        };
        let (mut sink, mut stream) = ws.split();

        // HELLO first.
        let hello = tokio::select! {
            r = tokio::time::timeout(config.connect_timeout, stream.next()) => r,
            _ = stop.changed() => return End::Stopped,
        };
        let interval = match hello {
            Ok(Some(Ok(Message::Text(t)))) => serde_json::from_str::<Value>(t.as_str())
                .ok()
                .filter(|v| v["op"] == 10)
                .and_then(|v| v["d"]["heartbeat_interval"].as_u64())
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
            Ok(Some(Ok(Message::Close(Some(c))))) => {
                return classify_close(u16::from(c.code), c.reason.as_str());
            }
            _ => None,
        };
        let Some(interval) = interval else {
            return lost("no HELLO from the Gateway".into(), false);
        };
        let hello_frame = match self.session.as_ref() {
            Some(s) => json!({"op": 6, "d": {
                "token": config.token.expose(), "session_id": s.id, "seq": *self.seq,
            }}),
            None => json!({"op": 2, "d": {
                "token": config.token.expose(),
                "intents": INTENTS,
                "properties": {"os": std::env::consts::OS, "browser": "hermes-rs", "device": "hermes-rs"},
            }}),
        };
        if let Err(e) = sink.send(Message::text(hello_frame.to_string())).await {
            return lost(format!("sending IDENTIFY/RESUME failed: {e}"), true);
        }
        let mut next_beat = Instant::now() + interval.mul_f64(unit_random());
        let mut awaiting_ack = false;
        loop {
            let frame = tokio::select! {
                _ = stop.changed() => {
                    // A normal close: Discord ends the session (the bot
                    // shows offline at once).
                    let _ = sink.send(Message::Close(None)).await;
                    return End::Stopped;
                }
                () = sleep_until(next_beat) => {
                    if awaiting_ack {
                        close_resumable(&mut sink).await;
                        return lost("no heartbeat ACK (zombie connection)".into(), true);
                    }
                    let beat = json!({"op": 1, "d": *self.seq}).to_string();
                    if let Err(e) = sink.send(Message::text(beat)).await {
                        return lost(format!("heartbeat failed: {e}"), true);
                    }
                    awaiting_ack = true;
                    next_beat = Instant::now() + interval;
                    continue;
                }
                frame = stream.next() => frame,
            };
            let text = match frame {
                None => return lost("the Gateway closed the connection".into(), true),
                Some(Err(e)) => return lost(e.to_string(), true),
                Some(Ok(Message::Text(t))) => t.as_str().to_owned(),
                Some(Ok(Message::Close(c))) => {
                    return match c {
                        Some(c) => classify_close(u16::from(c.code), c.reason.as_str()),
                        None => lost("the Gateway closed the connection".into(), true),
                    };
                }
                Some(Ok(_)) => continue,
            };
            let Ok(payload) = serde_json::from_str::<Value>(&text) else {
                tracing::warn!("discord: skipping a Gateway frame that is not JSON");
                continue;
            };
            match payload["op"].as_u64() {
                Some(0) => {
                    if let Some(s) = payload["s"].as_u64() {
                        *self.seq = Some(s);
                    }
                    let kind = payload["t"].as_str().unwrap_or("");
                    self.dispatch(kind, &payload["d"]);
                    // A new session: read what Discord will not replay.
                    if kind == "READY" {
                        self.catch_up().await;
                    }
                }
                Some(1) => {
                    let beat = json!({"op": 1, "d": *self.seq}).to_string();
                    if let Err(e) = sink.send(Message::text(beat)).await {
                        return lost(format!("heartbeat failed: {e}"), true);
                    }
                }
                Some(7) => {
                    close_resumable(&mut sink).await;
                    return lost("the Gateway asked to reconnect (op 7)".into(), true);
                }
                Some(9) => {
                    let resumable = payload["d"].as_bool().unwrap_or(false);
                    close_resumable(&mut sink).await;
                    let (low, high) = config.invalid_session_wait;
                    return End::Again {
                        reason: format!("invalid session (op 9, resumable: {resumable})"),
                        resume: resumable && self.session.is_some(),
                        hello: true,
                        wait: Some(between(low, high)),
                    };
                }
                Some(11) => awaiting_ack = false,
                _ => {}
            }
        }
    }

    fn dispatch(&mut self, kind: &str, d: &Value) {
        match kind {
            "READY" => {
                let id = d["session_id"].as_str().unwrap_or_default().to_owned();
                let resume_url = d["resume_gateway_url"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let bot = d["user"]["id"].as_str().unwrap_or_default().to_owned();
                tracing::info!(bot_user = %bot, "discord: ready");
                *lock(&self.inner.bot_id) = Some(bot);
                *self.session = (!id.is_empty() && !resume_url.is_empty())
                    .then_some(Session { id, resume_url });
                self.now_ready();
            }
            "RESUMED" => {
                tracing::info!("discord: session resumed");
                self.now_ready();
            }
            "MESSAGE_CREATE" => self.message(d),
            "INTERACTION_CREATE" => super::choices::interaction(self.inner, self.handler, d),
            _ => {}
        }
    }

    fn now_ready(&mut self) {
        self.ready = true;
        self.inner.set_state(DiscordState::Connected);
        if let Some(tx) = self.first.take() {
            let _ = tx.send(Ok(()));
        }
    }

    /// Reads, in every channel the bot has served, the messages after the
    /// newest it handled there, and handles them like live ones (see
    /// [`super::catchup`]).
    async fn catch_up(&self) {
        for (channel, mark) in self.inner.marks.load() {
            let mut after = mark;
            for _ in 0..MAX_PAGES {
                let path = format!("/channels/{channel}/messages?after={after}&limit={PAGE}");
                let page = match self.inner.rest.request("GET", &path, None).await {
                    Ok(page) => page,
                    Err(e) => {
                        tracing::warn!(%channel, error = %e, "discord: cannot catch up in a channel");
                        break;
                    }
                };
                let full = page.as_array().is_some_and(|a| a.len() >= PAGE);
                let messages = catchup::in_order(page, after);
                if !messages.is_empty() {
                    tracing::info!(%channel, count = messages.len(), "discord: catching up on messages sent while disconnected");
                }
                for m in &messages {
                    self.message(m);
                }
                match messages.last().and_then(catchup::snowflake) {
                    Some(newest) if full => after = newest,
                    _ => break,
                }
            }
        }
    }

    fn message(&self, d: &Value) {
        let Some(bot_id) = lock(&self.inner.bot_id).clone() else {
            return;
        };
        let msg: inbound::Message = match serde_json::from_value(d.clone()) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("discord: skipping a MESSAGE_CREATE: {e}");
                return;
            }
        };
        let rules = Rules {
            bot_id: &bot_id,
            require_mention: self.inner.config.require_mention,
            free_response_channels: &self.inner.config.free_response_channels,
        };
        let channel = msg.channel_id.clone();
        let id = msg.id.parse::<u64>().ok();
        if !self.inner.gate.is_open() {
            tracing::info!(
                "discord: the bot's lease is gone; message left to the gateway that holds it"
            );
            return;
        }
        let handled = match inbound::accept(msg, &rules) {
            Ok(accepted) => {
                lock(&self.inner.questions)
                    .remember_author(&accepted.event.message_id, &accepted.event.source.user_id);
                if let Some((user, channel)) = accepted.dm_channel {
                    lock(&self.inner.dm_channels).insert(user, channel);
                }
                // A channel seen for the first time is marked just before
                // this message: a kill before it is accepted leaves it to
                // the next start's catch-up.
                if let Some(id) = id
                    && !self.inner.marks.tracks(&channel)
                {
                    self.inner
                        .marks
                        .advance(&channel, id.saturating_sub(1), &self.inner.gate);
                }
                // Returns once the runner made it durable (or dropped it
                // as seen before).
                (self.handler)(accepted.event);
                true
            }
            Err(why) => {
                tracing::debug!(?why, "discord: message not for the bot");
                self.inner.marks.tracks(&channel)
            }
        };
        if handled && let Some(id) = id {
            self.inner.marks.advance(&channel, id, &self.inner.gate);
        }
    }
}
