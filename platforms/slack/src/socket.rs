//! The Socket Mode connection task: `apps.connections.open` → one
//! WebSocket at a time, every envelope acknowledged once the message it
//! carries is durable, reconnecting when Slack asks (`disconnect`) or the
//! socket breaks, until told to stop or until a token is refused.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use hermes_platform_kit::websocket;
use serde_json::{Value, json};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

use hermes_platform_kit::adapter::{AdapterError, EventHandler};

use crate::inbound::{self, Envelope, Rules};
use crate::web::{Body, Token, WebError};
use crate::{Inner, PLATFORM, SlackState};

/// The largest frame read; envelopes are small JSON objects.
const MAX_FRAME_BYTES: usize = 4 * 1024 * 1024;
/// A ping goes out this often; a socket silent for three of these is dead
/// (a half-open TCP connection never says so).
const PING_EVERY: Duration = Duration::from_secs(30);

/// A socket that lived this long was a working connection.
const STABLE_AFTER: Duration = Duration::from_secs(30);

/// How one socket ended.
enum End {
    Stopped,
    Fatal(AdapterError),
    /// Open a new socket (at once when Slack asked for it).
    Again {
        reason: String,
        asked: bool,
        hello: bool,
    },
}

/// The connection task's body.
pub(crate) async fn run(
    inner: Arc<Inner>,
    handler: EventHandler,
    mut stop: watch::Receiver<bool>,
    first: oneshot::Sender<Result<(), AdapterError>>,
) {
    let mut first = Some(first);
    let mut attempt: u32 = 0;
    loop {
        let began = Instant::now();
        let end = match identify(&inner).await {
            Err(e) => e,
            Ok(()) => match open_url(&inner).await {
            Err(e) if e.is_auth() => End::Fatal(inner.token_refused("SLACK_APP_TOKEN", &e)),
            Err(WebError::Api { error, .. }) if error == "not_allowed_token_type" => {
                End::Fatal(AdapterError::Auth {
                    platform: PLATFORM,
                    message: "SLACK_APP_TOKEN is not an app-level token (Basic Information → App-Level Tokens, scope connections:write)".to_owned(),
                })
            }
            Err(e) => End::Again {
                reason: format!("apps.connections.open failed: {e}"),
                asked: false,
                hello: false,
            },
            Ok(url) => connect_once(&inner, &handler, &url, &mut stop, &mut first).await,
            },
        };
        match end {
            End::Stopped => return,
            End::Fatal(e) => return inner.stop_for_good(&mut first, e),
            End::Again {
                reason,
                asked,
                hello,
            } => {
                if first.is_some() && !hello {
                    let e = AdapterError::Network {
                        platform: PLATFORM,
                        message: format!("cannot open Socket Mode: {reason}"),
                    };
                    return inner.stop_for_good(&mut first, e);
                }
                // A socket that served a while resets the backoff; one that
                // Slack accepted and dropped at once does not, so a link
                // that keeps failing is not retried in a storm.
                attempt = if hello && began.elapsed() >= STABLE_AFTER {
                    1
                } else {
                    attempt + 1
                };
                inner.set_state(SlackState::Reconnecting { attempt });
                let delay = if asked && attempt <= 2 || attempt <= 1 {
                    Duration::ZERO
                } else {
                    let base = inner.config.reconnect_base;
                    base.saturating_mul(1u32 << (attempt - 2).min(10))
                        .min(inner.config.reconnect_max)
                };
                tracing::warn!("slack: {reason}; reconnecting in {delay:?}");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    _ = stop.changed() => return,
                }
            }
        }
    }
}

/// `auth.test` with the bot token, once: the bot's user id (mentions, its
/// own messages). A refused token is fatal.
async fn identify(inner: &Inner) -> Result<(), End> {
    if !inner.bot_user().is_empty() {
        return Ok(());
    }
    match inner
        .web
        .call(Token::Bot, "auth.test", Body::Form(Vec::new()))
        .await
    {
        Ok(v) => {
            let user = v.get("user_id").and_then(Value::as_str).unwrap_or_default();
            if user.is_empty() {
                return Err(End::Again {
                    reason: "auth.test gave no user_id".to_owned(),
                    asked: false,
                    hello: false,
                });
            }
            inner.set_bot_user(user);
            Ok(())
        }
        Err(e) if e.is_auth() => Err(End::Fatal(inner.token_refused("SLACK_BOT_TOKEN", &e))),
        Err(e) => Err(End::Again {
            reason: format!("auth.test failed: {e}"),
            asked: false,
            hello: false,
        }),
    }
}

/// `apps.connections.open` with the app-level token: a fresh WebSocket URL.
async fn open_url(inner: &Inner) -> Result<String, WebError> {
    let v = inner
        .web
        .call(Token::App, "apps.connections.open", Body::Form(Vec::new()))
        .await?;
    v.get("url")
        .and_then(Value::as_str)
        .filter(|u| u.starts_with("wss://") || u.starts_with("ws://"))
        .map(str::to_owned)
        .ok_or_else(|| WebError::Network("apps.connections.open gave no WebSocket URL".to_owned()))
}

/// One socket, from the handshake to its end.
async fn connect_once(
    inner: &Arc<Inner>,
    handler: &EventHandler,
    url: &str,
    stop: &mut watch::Receiver<bool>,
    first: &mut Option<oneshot::Sender<Result<(), AdapterError>>>,
) -> End {
    let again = |reason: String, hello: bool| End::Again {
        reason,
        asked: false,
        hello,
    };
    let connector = match websocket::tls_connector() {
        Ok(c) => c,
        Err(e) => {
            return End::Fatal(AdapterError::Network {
                platform: PLATFORM,
                message: e,
            });
        }
    };
    let connecting = websocket::connect(url, MAX_FRAME_BYTES, false, connector);
    let ws = match tokio::time::timeout(inner.config.connect_timeout, connecting).await {
        Ok(Ok(ws)) => ws,
        // The URL carries a ticket: never logged.
        Ok(Err(e)) => return again(format!("the WebSocket handshake failed: {e}"), false),
        Err(_) => return again("the WebSocket handshake timed out".to_owned(), false),
    };
    let (mut sink, mut stream) = ws.split();
    let mut hello = false;
    let mut last_heard = Instant::now();
    let mut ping = tokio::time::interval_at(Instant::now() + PING_EVERY, PING_EVERY);
    loop {
        let frame = tokio::select! {
            _ = stop.changed() => {
                let _ = sink.send(Message::Close(None)).await;
                return End::Stopped;
            }
            _ = ping.tick() => {
                if last_heard.elapsed() > PING_EVERY * 3 {
                    return again("Slack went silent (no frame for 90 s)".to_owned(), hello);
                }
                if sink.send(Message::Ping(Vec::new().into())).await.is_err() {
                    return again("the socket broke".to_owned(), hello);
                }
                continue;
            }
            frame = stream.next() => frame,
        };
        last_heard = Instant::now();
        let text = match frame {
            Some(Ok(Message::Text(t))) => t,
            Some(Ok(Message::Ping(p))) => {
                let _ = sink.send(Message::Pong(p)).await;
                continue;
            }
            Some(Ok(Message::Close(frame))) => {
                let why = frame
                    .map(|f| format!("{} {}", u16::from(f.code), f.reason))
                    .unwrap_or_default();
                return again(format!("Slack closed the socket ({})", why.trim()), hello);
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => return again(format!("the socket broke: {e}"), hello),
            None => return again("the socket closed".to_owned(), hello),
        };
        let envelope: Envelope = match serde_json::from_str(text.as_str()) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!("slack: a frame that is not an envelope was ignored ({e})");
                continue;
            }
        };
        match envelope.kind.as_str() {
            "hello" => {
                hello = true;
                inner.set_state(SlackState::Connected);
                if let Some(tx) = first.take() {
                    let _ = tx.send(Ok(()));
                }
                tracing::info!("slack: Socket Mode connected");
            }
            "disconnect" => {
                let reason = envelope.reason.unwrap_or_default();
                if reason == "link_disabled" {
                    return End::Fatal(AdapterError::Rejected {
                        platform: PLATFORM,
                        message: "Slack disabled this Socket Mode link (link_disabled): turn Socket Mode on again in the app's settings".to_owned(),
                    });
                }
                let _ = sink.send(Message::Close(None)).await;
                return End::Again {
                    reason: format!("Slack asked for a new connection ({reason})"),
                    asked: true,
                    hello,
                };
            }
            _ => {
                let Some(id) = envelope.envelope_id.clone() else {
                    tracing::warn!(kind = %envelope.kind, "slack: an envelope without an envelope_id was ignored");
                    continue;
                };
                // Only the holder of the bot's lease takes messages: left
                // unacknowledged, Slack sends the envelope again.
                if !inner.gate.is_open() {
                    continue;
                }
                match envelope.kind.as_str() {
                    "events_api" => handle_event(inner, handler, &envelope),
                    "slash_commands" => handle_command(inner, handler, &envelope),
                    _ => {}
                }
                // Acknowledged after the handler returned: the message is
                // in the inbox (or was there already).
                let ack = json!({ "envelope_id": id });
                if sink.send(Message::text(ack.to_string())).await.is_err() {
                    return again("the socket broke while acknowledging".to_owned(), hello);
                }
            }
        }
    }
}

/// Hands an `events_api` envelope's message on (or says why not).
fn handle_event(inner: &Inner, handler: &EventHandler, envelope: &Envelope) {
    let Some(event) = envelope.payload.as_ref().and_then(|p| p.get("event")) else {
        tracing::warn!("slack: an events_api envelope without an event was ignored");
        return;
    };
    let event: inbound::Event = match serde_json::from_value(event.clone()) {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!("slack: an event that cannot be read was ignored ({e})");
            return;
        }
    };
    let bot_user = inner.bot_user();
    let rules = Rules {
        bot_user: &bot_user,
        require_mention: inner.config.require_mention,
    };
    match inbound::accept(event, &rules) {
        Ok(event) => {
            if envelope.retry_attempt.unwrap_or(0) > 0 {
                tracing::debug!(id = %event.message_id, "slack: a redelivered event (the inbox answers it once)");
            }
            inner.remember_last(&event.source.chat_id, &event.message_id);
            handler(event);
        }
        Err(inbound::Skipped::Malformed(what)) => {
            tracing::warn!("slack: an event with {what} was ignored");
        }
        Err(why) => tracing::debug!(?why, "slack: event not for the bot"),
    }
}

/// Hands a `slash_commands` envelope's command on.
fn handle_command(inner: &Inner, handler: &EventHandler, envelope: &Envelope) {
    let Some(payload) = envelope.payload.clone() else {
        tracing::warn!("slack: a slash_commands envelope without a payload was ignored");
        return;
    };
    let command = serde_json::from_value(payload)
        .map_err(|_| inbound::Skipped::Malformed("a slash command that cannot be read"))
        .and_then(inbound::accept_command);
    match command {
        Ok(event) => {
            inner.remember_last(&event.source.chat_id, &event.message_id);
            handler(event);
        }
        Err(inbound::Skipped::Malformed(what)) => tracing::warn!("slack: {what} was ignored"),
        Err(why) => tracing::debug!(?why, "slack: command not taken"),
    }
}
