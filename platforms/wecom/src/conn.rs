//! The connection task: one socket at a time, reconnecting until told to
//! stop or until WeCom says stop (bad credentials, `disconnected_event`).
//!
//! Everything that touches the socket lives in one `select!` loop per
//! connection: inbound frames, the outgoing queue, the heartbeat, the
//! subscribe deadline and the merge deadline. Senders never touch the socket;
//! they queue a frame and wait for its ack (see `Inner::request`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use hermes_platform_kit::websocket;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Instant, sleep_until};
use tokio_tungstenite::tungstenite::Message;

use super::merge::{FragmentMerger, Merged};
use super::staging::Staging;
use super::wire::{self, EventKind, Inbound};
use super::{Ack, Inner, PLATFORM, WecomState, lock};
use hermes_platform_kit::adapter::{AdapterError, EventHandler};
use hermes_platform_kit::event::{MessageEvent, SessionSource};

/// The largest frame (and message) read from WeCom. Callbacks are small
/// JSON objects (a user text is at most ~4000 characters); tungstenite's
/// defaults (16 MiB frames, 64 MiB messages) would let a broken or hostile
/// server make the adapter buffer far more. A bigger frame ends the
/// connection with an error, and the adapter reconnects.
pub(crate) const MAX_FRAME_BYTES: usize = 1024 * 1024;

/// How one connection ended.
enum End {
    /// `disconnect()` was called.
    Stopped,
    /// Credentials refused: stop for good.
    AuthFailed(String),
    /// `disconnected_event`: another connection took over; stop for good.
    Replaced(String),
    /// The socket died or never opened; reconnect. `subscribed` tells
    /// whether this connection had got as far as a subscribe ack.
    Lost { reason: String, subscribed: bool },
}

/// What outlives a single socket: the merger (pieces survive a reconnect),
/// the store rows of the pieces it holds ([`super::staging`]), the handler
/// and the clock origin for the merger.
struct Session {
    inner: Arc<Inner>,
    handler: EventHandler,
    merger: FragmentMerger,
    staging: Option<Staging>,
    origin: Instant,
}

impl Session {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// Holds a piece for its merge — in the store first, when there is one,
    /// so it is durable before the next frame is read.
    fn hold(&mut self, event: MessageEvent) {
        let now = self.now();
        match &mut self.staging {
            Some(staging) => {
                let tag = staging.next_tag();
                let group = self.merger.push_tagged(now, event.clone(), tag);
                staging.stage(tag, group, &event);
            }
            None => self.merger.push(now, event),
        }
    }

    fn deliver_due(&mut self) {
        let now = self.now();
        for merged in self.merger.poll_tagged(now) {
            self.deliver(merged);
        }
    }

    fn deliver_all(&mut self) {
        for merged in self.merger.flush_tagged() {
            self.deliver(merged);
        }
    }

    /// Hands the pieces a gateway killed before it could hand them on left
    /// in the store to the runner, joined again.
    fn deliver_recovered(&mut self) {
        let Some(staging) = &mut self.staging else {
            return;
        };
        let recovered = staging.recover(PLATFORM, self.inner.config.merge_config());
        if !recovered.is_empty() {
            tracing::info!(
                messages = recovered.len(),
                "wecom: handing on text a stopped gateway had held for its merge"
            );
        }
        for merged in recovered {
            self.deliver(merged);
        }
    }

    /// Hands `merged` on, unless the bot's lease is gone: another gateway
    /// holds the bot's socket now, and WeCom delivers there. Its store rows
    /// go once the handler (which makes it durable in the inbox) returned.
    fn deliver(&mut self, merged: Merged) {
        let Merged { event, tags } = merged;
        if self.inner.gate.is_open() {
            (self.handler)(event);
            if let Some(staging) = &mut self.staging {
                staging.remove(&tags);
            }
        } else {
            tracing::info!(id = %event.message_id, "wecom: the bot's lease is gone; frame left to the gateway that holds it");
        }
    }

    fn merge_deadline(&self) -> Option<Instant> {
        self.merger.next_deadline().map(|d| self.origin + d)
    }
}

/// The connection task's body.
pub(super) async fn run(
    inner: Arc<Inner>,
    handler: EventHandler,
    mut stop: watch::Receiver<bool>,
    first: oneshot::Sender<Result<(), AdapterError>>,
) {
    let merger = FragmentMerger::new(inner.config.merge_config());
    let staging = inner
        .store
        .as_ref()
        .map(|store| Staging::new(Arc::clone(store), &inner.config.bot_id));
    let mut session = Session {
        inner,
        handler,
        merger,
        staging,
        origin: Instant::now(),
    };
    session.deliver_recovered();
    let mut first = Some(first);
    let mut delay = session.inner.config.reconnect_base;
    let mut attempt: u32 = 0;
    loop {
        let end = connect_once(&mut session, &mut stop, &mut first).await;
        *lock(&session.inner.out) = None;
        // Dropping the waiting senders tells each caller the connection is gone.
        lock(&session.inner.pending).clear();
        match end {
            End::Stopped => {
                session.deliver_all();
                return;
            }
            End::AuthFailed(message) => {
                tracing::error!("wecom: {message}");
                session
                    .inner
                    .set_state(WecomState::AuthFailed(message.clone()));
                session.deliver_all();
                report(
                    &mut first,
                    Err(AdapterError::Auth {
                        platform: PLATFORM,
                        message,
                    }),
                );
                return;
            }
            End::Replaced(message) => {
                tracing::error!("wecom: {message}; not reconnecting");
                session
                    .inner
                    .set_state(WecomState::Replaced(message.clone()));
                session.deliver_all();
                report(
                    &mut first,
                    Err(AdapterError::Conflict {
                        platform: PLATFORM,
                        message,
                    }),
                );
                return;
            }
            End::Lost { reason, subscribed } => {
                if first.is_some() {
                    // Never connected: the caller learns now instead of
                    // waiting on a retry loop that may never succeed.
                    let message = format!(
                        "cannot connect to {}: {reason}",
                        session.inner.config.ws_url
                    );
                    tracing::error!("wecom: {message}");
                    session.inner.set_state(WecomState::Failed(message.clone()));
                    report(
                        &mut first,
                        Err(AdapterError::Network {
                            platform: PLATFORM,
                            message,
                        }),
                    );
                    return;
                }
                if subscribed {
                    delay = session.inner.config.reconnect_base;
                    attempt = 0;
                }
                attempt += 1;
                tracing::warn!(
                    "wecom: connection lost ({reason}); reconnect #{attempt} in {delay:?}"
                );
                session
                    .inner
                    .set_state(WecomState::Reconnecting { attempt, delay });
                let wake = Instant::now() + delay;
                delay = (delay * 2).min(session.inner.config.reconnect_max);
                loop {
                    let deadline = session.merge_deadline();
                    tokio::select! {
                        _ = sleep_until(wake) => break,
                        _ = stop.changed() => {
                            session.deliver_all();
                            return;
                        }
                        _ = sleep_until(deadline.unwrap_or(wake)), if deadline.is_some() => {
                            session.deliver_due();
                        }
                    }
                }
                session.inner.set_state(WecomState::Connecting);
            }
        }
    }
}

fn report(
    first: &mut Option<oneshot::Sender<Result<(), AdapterError>>>,
    result: Result<(), AdapterError>,
) {
    if let Some(tx) = first.take() {
        let _ = tx.send(result);
    }
}

/// One socket, from opening to its end.
async fn connect_once(
    session: &mut Session,
    stop: &mut watch::Receiver<bool>,
    first: &mut Option<oneshot::Sender<Result<(), AdapterError>>>,
) -> End {
    let inner = session.inner.clone();
    let config = &inner.config;
    let lost = |reason: String| End::Lost {
        reason,
        subscribed: false,
    };
    let connector = match websocket::tls_connector() {
        Ok(c) => c,
        Err(e) => return lost(e),
    };
    let open = websocket::connect(config.ws_url.as_str(), MAX_FRAME_BYTES, true, connector);
    let ws = tokio::select! {
        r = tokio::time::timeout(config.connect_timeout, open) => match r {
            Ok(Ok(ws)) => ws,
            Ok(Err(e)) => return lost(e.to_string()),
            Err(_) => return lost(format!("no answer within {:?}", config.connect_timeout)),
        },
        _ = stop.changed() => return End::Stopped,
    };
    let (mut sink, mut stream) = ws.split();

    let sub_req = inner.ids.next(wire::CMD_SUBSCRIBE);
    tracing::info!(url = %config.ws_url, bot_id = %config.bot_id, "wecom: connected, subscribing");
    if let Err(e) = sink
        .send(Message::text(wire::subscribe(
            &sub_req,
            &config.bot_id,
            config.secret.expose(),
        )))
        .await
    {
        return lost(format!("sending subscribe failed: {e}"));
    }
    let sub_deadline = Instant::now() + config.ack_timeout;
    let mut subscribed = false;
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<String>();
    let mut heartbeat = tokio::time::interval_at(
        Instant::now() + config.heartbeat_interval,
        config.heartbeat_interval,
    );
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut missed: u32 = 0;
    let mut pings: HashSet<String> = HashSet::new();

    let end = loop {
        let merge_at = session.merge_deadline();
        tokio::select! {
            _ = stop.changed() => {
                let _ = sink.send(Message::Close(None)).await;
                break End::Stopped;
            }
            frame = stream.next() => {
                let text = match frame {
                    None => break End::Lost { reason: "server closed the connection".into(), subscribed },
                    Some(Err(e)) => break End::Lost { reason: e.to_string(), subscribed },
                    Some(Ok(Message::Text(t))) => t.as_str().to_owned(),
                    Some(Ok(Message::Binary(b))) => match String::from_utf8(b.to_vec()) {
                        Ok(t) => t,
                        Err(_) => {
                            tracing::warn!("wecom: skipping a binary frame that is not UTF-8");
                            continue;
                        }
                    },
                    Some(Ok(Message::Close(c))) => {
                        let why = c.map(|c| format!("{} {}", c.code, c.reason)).unwrap_or_default();
                        break End::Lost { reason: format!("server closed the connection {why}").trim_end().to_owned(), subscribed };
                    }
                    // WebSocket-level ping/pong: tungstenite answers pings itself.
                    Some(Ok(_)) => continue,
                };
                let parsed = match wire::parse_frame(&text) {
                    Ok(p) => p,
                    Err(e) => {
                        tracing::warn!("wecom: skipping a frame: {e}");
                        continue;
                    }
                };
                match parsed {
                    Inbound::Ack { req_id, errcode, errmsg, body } => {
                        if req_id == sub_req {
                            if errcode != 0 {
                                break End::AuthFailed(format!(
                                    "subscribe refused (errcode={errcode}, errmsg={errmsg}); check WECOM_BOT_ID and WECOM_SECRET"
                                ));
                            }
                            subscribed = true;
                            *lock(&inner.out) = Some(out_tx.clone());
                            inner.set_state(WecomState::Connected);
                            tracing::info!("wecom: subscribed");
                            report(first, Ok(()));
                        } else if pings.remove(&req_id) {
                            if errcode == 0 {
                                missed = 0;
                                pings.clear();
                            } else {
                                tracing::warn!("wecom: ping refused: errcode={errcode}, errmsg={errmsg}");
                            }
                        } else if let Some(tx) = lock(&inner.pending).remove(&req_id) {
                            let _ = tx.send(Ack { errcode, errmsg, body });
                        } else {
                            tracing::debug!(%req_id, "wecom: ack for nothing we wait for");
                        }
                    }
                    Inbound::Message { req_id, message } => {
                        if !inner.remember(&message.msgid, &req_id, &message.chat_id) {
                            tracing::debug!(msgid = %message.msgid, "wecom: duplicate message dropped");
                            continue;
                        }
                        if message.text.trim().is_empty() && message.media.is_empty() {
                            tracing::debug!(msgid = %message.msgid, "wecom: empty message (a bare mention) ignored");
                            continue;
                        }
                        let event = MessageEvent {
                            message_id: message.msgid,
                            text: message.text,
                            source: SessionSource {
                                platform: PLATFORM.to_owned(),
                                chat_id: message.chat_id,
                                chat_type: message.chat_type,
                                user_id: message.user_id,
                                user_name: None,
                                thread_id: None,
                            },
                            message_type: message.message_type,
                            media: message.media,
                        };
                        session.hold(event);
                        // A command, or a merged message at its bound, is
                        // due at once.
                        session.deliver_due();
                    }
                    Inbound::Event { req_id, msgid, event, chat_id } => {
                        if let Some(id) = &msgid {
                            let chat = chat_id.clone().unwrap_or_default();
                            if !inner.remember(id, &req_id, &chat) {
                                tracing::debug!(msgid = %id, "wecom: duplicate event dropped");
                                continue;
                            }
                        }
                        match event {
                            EventKind::Disconnected => {
                                break End::Replaced(
                                    "another connection for this bot took over (disconnected_event)".to_owned(),
                                );
                            }
                            EventKind::EnterChat => {
                                if let Some(text) = config.welcome_text.clone() {
                                    let inner = inner.clone();
                                    hermes_runtime::task::spawn(async move {
                                        let frame = wire::welcome_text(&req_id, &text);
                                        if let Err(e) = inner.request(&req_id, wire::CMD_RESPOND_WELCOME, frame).await {
                                            tracing::warn!("wecom: welcome message failed: {e}");
                                        }
                                    });
                                }
                            }
                            EventKind::Other(kind) => {
                                tracing::debug!(%kind, "wecom: event ignored");
                            }
                        }
                    }
                    Inbound::Other { cmd } => tracing::debug!(%cmd, "wecom: frame ignored"),
                }
            }
            Some(frame) = out_rx.recv() => {
                if let Err(e) = sink.send(Message::text(frame)).await {
                    break End::Lost { reason: format!("send failed: {e}"), subscribed };
                }
            }
            _ = heartbeat.tick(), if subscribed => {
                if missed >= 2 {
                    break End::Lost { reason: format!("{missed} heartbeats unanswered"), subscribed };
                }
                missed += 1;
                let req_id = inner.ids.next(wire::CMD_PING);
                pings.insert(req_id.clone());
                if let Err(e) = sink.send(Message::text(wire::ping(&req_id))).await {
                    break End::Lost { reason: format!("heartbeat failed: {e}"), subscribed };
                }
            }
            _ = sleep_until(sub_deadline), if !subscribed => {
                break End::Lost { reason: format!("no subscribe ack within {:?}", config.ack_timeout), subscribed };
            }
            _ = sleep_until(merge_at.unwrap_or(sub_deadline)), if merge_at.is_some() => {
                session.deliver_due();
            }
        }
    };
    if !matches!(end, End::Stopped) {
        let _ = sink.close().await;
    }
    end
}
