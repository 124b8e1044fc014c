//! `hermes-whatsapp`: WhatsApp through Meta's official Cloud API (issue 42
//! §1). Platform name `whatsapp`.
//!
//! Inbound ([`server`], [`webhook`]): Meta POSTs notifications to
//! `/whatsapp` (behind the user's reverse proxy or tunnel). Each POST's
//! `X-Hub-Signature-256` is checked against the raw body first (else 401:
//! nothing read, nothing stored); the JSON is read (else 400); a message id
//! seen before is dropped (Meta retries a webhook it got no 200 for); each
//! new message becomes one `MessageEvent` handed to the runner, which makes
//! it durable in the gateway's inbox before the handler returns — only then
//! is 200 answered. The user's message is marked read. `GET /whatsapp`
//! answers Meta's verification handshake.
//!
//! Outbound ([`api`]): text split into ≤ 4096-character messages, files
//! uploaded to `/{phone-number-id}/media` and sent by id; rate limits
//! (130429) retried with backoff.
//!
//! The 24-hour rule: a free-form message to a user who has not written in
//! 24 hours is refused with error 131047, at once or later in a `failed`
//! status webhook. The first is [`AdapterError::Undeliverable`]. For the
//! second, a send to a user this process has not heard from within 24 hours
//! (a scheduled job's delivery, typically) waits up to
//! `WhatsAppConfig::status_wait` for the message's status: `failed` makes
//! the send fail the same way; `sent`, `delivered` or `read` lets it pass.
//! A `failed` status arriving later is logged with its error, counted
//! ([`WhatsAppAdapter::failed_deliveries`]) and reported to the runner as a
//! late failure (the kit's `delivery`): each accepted message's wamid is
//! noted for the send that made it, so the scheduler records its job's
//! delivery as failed after all.
//!
//! The access token, the app secret and the verify token never reach a log
//! line, an error or a `Debug` output.

pub mod api;
pub mod config;
pub mod descriptor;
pub mod webhook;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use hermes_platform_kit::adapter::{
    AdapterError, EventHandler, FetchedMedia, FileKind, OutgoingFile, PlatformAdapter,
};
use hermes_platform_kit::dedup::Dedup;
use hermes_platform_kit::delivery::{self, LateFailure, LateFailureHandler};
use hermes_platform_kit::event::{ChatType, MediaRef, MessageEvent, SessionSource};
use hermes_platform_kit::lease::{Held, LeaseGate};
use hermes_platform_kit::split::{LengthUnit, split_message};
use hermes_platform_kit::webhook::{self as webhook_server, Reply, WebhookConfig, WebhookServer};
use hermes_runtime::sync::lock;
use serde_json::{Value, json};
use subtle::ConstantTimeEq;
use tokio::sync::oneshot;

pub use api::{ApiError, Graph, GraphError};
pub use config::{WhatsAppConfig, WhatsAppConfigError};
use webhook::{Notification, Read, Status};

/// The platform name in session keys, targets and allow-lists.
pub const PLATFORM: &str = "whatsapp";
/// The Cloud API's limit for a text message's body, in characters.
pub const MAX_MESSAGE_CHARS: usize = 4096;
/// The customer-service window.
pub const WINDOW: Duration = Duration::from_secs(24 * 3600);
/// What a user who sent something the adapter cannot read is told.
pub const UNREADABLE_NOTICE: &str = "I can't read that kind of WhatsApp message yet. \
Please send text, a photo, a voice note or a document.";
/// Statuses remembered for sends that have not registered yet.
const RECENT_STATUSES: usize = 1024;

/// What a status webhook said about one of our messages.
#[derive(Clone, Debug)]
enum Outcome {
    Accepted,
    Failed(GraphError),
}

/// The adapter. Cheap to share.
#[derive(Clone)]
pub struct WhatsAppAdapter {
    inner: Arc<Inner>,
}

struct Inner {
    config: WhatsAppConfig,
    graph: Graph,
    gate: LeaseGate,
    server: tokio::sync::Mutex<Option<WebhookServer>>,
    addr: Mutex<Option<SocketAddr>>,
    /// When each user last wrote, as seen by this process.
    last_inbound: Mutex<HashMap<String, Instant>>,
    /// Sends waiting for their message's status.
    waiting: Mutex<HashMap<String, oneshot::Sender<Outcome>>>,
    /// Statuses that came before their send was waiting (the webhook can
    /// beat the API's answer).
    recent: Mutex<VecDeque<(String, Outcome)>>,
    failed: AtomicU64,
    /// Where a `failed` status no send waits for is reported.
    late: Mutex<Option<LateFailureHandler>>,
}

impl std::fmt::Debug for WhatsAppAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhatsAppAdapter")
            .field("config", &self.inner.config)
            .field("listening", &self.local_addr())
            .finish()
    }
}

impl WhatsAppAdapter {
    /// An adapter for `config`; nothing listens until `connect`.
    pub fn new(config: WhatsAppConfig) -> Self {
        let graph = Graph::new(api::ApiConfig {
            base_url: config.api_url.clone(),
            phone_number_id: config.phone_number_id.clone(),
            access_token: config.access_token.clone(),
            timeout: config.api_timeout,
            backoff: config.backoff,
            max_backoff: config.max_backoff,
            rate_limit_patience: config.rate_limit_patience,
            max_attempts: config.max_attempts,
        });
        WhatsAppAdapter {
            inner: Arc::new(Inner {
                config,
                graph,
                gate: LeaseGate::default(),
                server: tokio::sync::Mutex::new(None),
                addr: Mutex::new(None),
                last_inbound: Mutex::new(HashMap::new()),
                waiting: Mutex::new(HashMap::new()),
                recent: Mutex::new(VecDeque::new()),
                failed: AtomicU64::new(0),
                late: Mutex::new(None),
            }),
        }
    }

    /// The settings in use.
    pub fn config(&self) -> &WhatsAppConfig {
        &self.inner.config
    }

    /// Where the webhook listens, while connected.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        *lock(&self.inner.addr)
    }

    /// `failed` statuses received for our messages since start.
    pub fn failed_deliveries(&self) -> u64 {
        self.inner.failed.load(Ordering::Relaxed)
    }

    /// Whether `chat` wrote to us within the last 24 hours (as far as this
    /// process saw).
    fn window_open(&self, chat: &str) -> bool {
        lock(&self.inner.last_inbound)
            .get(chat)
            .is_some_and(|t| t.elapsed() < WINDOW)
    }

    /// After a send the API accepted: outside the known window, waits for
    /// the message's status so a 131047 reported there fails the send.
    async fn confirm(&self, chat: &str, wamid: &str) -> Result<(), AdapterError> {
        if self.window_open(chat) || self.inner.config.status_wait.is_zero() {
            return Ok(());
        }
        let (tx, rx) = oneshot::channel();
        let early = {
            let mut recent = lock(&self.inner.recent);
            let found = recent.iter().position(|(id, _)| id == wamid);
            match found.and_then(|i| recent.remove(i)) {
                Some((_, outcome)) => Some(outcome),
                None => {
                    lock(&self.inner.waiting).insert(wamid.to_owned(), tx);
                    None
                }
            }
        };
        let outcome = match early {
            Some(o) => Some(o),
            None => {
                let got = tokio::time::timeout(self.inner.config.status_wait, rx).await;
                lock(&self.inner.waiting).remove(wamid);
                got.ok().and_then(Result::ok)
            }
        };
        match outcome {
            Some(Outcome::Failed(e)) => Err(failed_status_error(e)),
            Some(Outcome::Accepted) => Ok(()),
            None => {
                tracing::debug!(
                    wamid,
                    "whatsapp: no status for a message yet; counted as sent"
                );
                Ok(())
            }
        }
    }

    async fn send_one(
        &self,
        chat_id: &str,
        message: Value,
        reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        let wamid = self
            .inner
            .graph
            .send_message(chat_id, message, reply_to)
            .await
            .map_err(ApiError::into_adapter_error)?;
        delivery::note_accepted(&wamid);
        self.confirm(chat_id, &wamid).await
    }
}

/// The send error of a `failed` status.
fn failed_status_error(e: GraphError) -> AdapterError {
    let details = e.details.clone().unwrap_or_else(|| e.message.clone());
    let code = e.code;
    match e.into_api_error(400) {
        window @ ApiError::OutsideWindow { .. } => window.into_adapter_error(),
        _ => AdapterError::Rejected {
            platform: PLATFORM,
            message: format!("WhatsApp reported the message failed (error {code}: {details})"),
        },
    }
}

/// Reads `hub.mode`, `hub.verify_token` and `hub.challenge`.
fn handshake(query: &str) -> HashMap<String, String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| {
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(&s.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (decode(k), decode(v))
        })
        .collect()
}

/// The webhook's behaviour while connected.
struct Callbacks {
    adapter: WhatsAppAdapter,
    handler: EventHandler,
    seen: Mutex<Dedup>,
    epoch: Instant,
}

impl Callbacks {
    fn inner(&self) -> &Inner {
        &self.adapter.inner
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn status(&self, s: Status) {
        let wamid = s.id.clone();
        let outcome = match s.status.as_str() {
            "failed" => {
                let error = s.errors.first().cloned().unwrap_or_default();
                self.inner().failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    wamid = %s.id,
                    recipient = %s.recipient,
                    code = error.code,
                    error = %error.message,
                    details = error.details.as_deref().unwrap_or(""),
                    "whatsapp: a message was NOT delivered (failed status)"
                );
                Outcome::Failed(error)
            }
            "sent" | "delivered" | "read" => {
                tracing::debug!(wamid = %s.id, status = %s.status, "whatsapp: status");
                Outcome::Accepted
            }
            other => {
                tracing::debug!(wamid = %s.id, status = other, "whatsapp: status not read");
                return;
            }
        };
        // `recent` before `waiting`, as `confirm` takes them: a send that
        // registers meanwhile finds the status in one or the other.
        let late = {
            let mut recent = lock(&self.inner().recent);
            let waiter = lock(&self.inner().waiting).remove(&s.id);
            match waiter {
                Some(tx) => {
                    let _ = tx.send(outcome);
                    None
                }
                None => {
                    if recent.len() >= RECENT_STATUSES {
                        recent.pop_front();
                    }
                    recent.push_back((s.id, outcome.clone()));
                    match outcome {
                        Outcome::Failed(e) => Some(e),
                        Outcome::Accepted => None,
                    }
                }
            }
        };
        // No send is waiting for it: whoever sent the message learns it
        // failed after all (a scheduled delivery is recorded as failed).
        let handler = lock(&self.inner().late).clone();
        if let (Some(error), Some(handler)) = (late, handler) {
            handler(LateFailure {
                platform: PLATFORM,
                message_id: wamid,
                error: failed_status_error(error),
            });
        }
    }

    fn message(&self, raw: &Value, names: &HashMap<String, String>) {
        let (id, from) = match webhook::read_message(raw) {
            Read::Message(m) => {
                if !lock(&self.seen).first_sighting(PLATFORM, &m.from, &m.id, self.now_ms()) {
                    tracing::debug!(wamid = %m.id, "whatsapp: a message seen before; dropped");
                    return;
                }
                lock(&self.inner().last_inbound).insert(m.from.clone(), Instant::now());
                let event = MessageEvent {
                    message_id: m.id.clone(),
                    text: m.text,
                    source: SessionSource {
                        platform: PLATFORM.to_owned(),
                        chat_id: m.from.clone(),
                        chat_type: ChatType::Dm,
                        user_id: m.from.clone(),
                        user_name: names.get(&m.from).cloned(),
                        thread_id: None,
                    },
                    message_type: m.message_type,
                    media: m.media,
                };
                // The runner makes it durable before this returns (E3), so
                // the 200 below loses nothing.
                (self.handler)(event);
                let graph = self.inner().graph.clone();
                hermes_runtime::task::spawn(async move {
                    if let Err(e) = graph.mark_read(&m.id).await {
                        tracing::debug!(error = %e, "whatsapp: marking a message read failed");
                    }
                });
                return;
            }
            Read::Reaction { id, from } => {
                tracing::info!(wamid = %id, %from, "whatsapp: a reaction; nothing to answer");
                return;
            }
            Read::Malformed => {
                tracing::warn!("whatsapp: a message without id or sender; ignored");
                return;
            }
            Read::Unreadable { id, from, kind } => {
                let allowed = &self.inner().config.allowed_users;
                if !allowed.iter().any(|u| u == "*" || *u == from) {
                    tracing::info!(wamid = %id, %from, kind = %kind, "whatsapp: a message kind the adapter does not read, from someone not in WHATSAPP_ALLOWED_USERS; not answered");
                    return;
                }
                tracing::info!(wamid = %id, %from, kind = %kind, "whatsapp: a message kind the adapter does not read; the user is told");
                (id, from)
            }
        };
        if !lock(&self.seen).first_sighting(PLATFORM, &from, &id, self.now_ms()) {
            return;
        }
        let graph = self.inner().graph.clone();
        hermes_runtime::task::spawn(async move {
            let notice = json!({ "type": "text", "text": { "body": UNREADABLE_NOTICE } });
            if let Err(e) = graph.send_message(&from, notice, Some(&id)).await {
                tracing::warn!(error = %e, "whatsapp: telling a user their message was unreadable failed");
            }
        });
    }
}

impl webhook_server::Handler for Callbacks {
    fn get(&self, query: &str, peer: SocketAddr) -> Reply {
        let q = handshake(query);
        let token = q
            .get("hub.verify_token")
            .map(String::as_bytes)
            .unwrap_or(b"");
        let expected = self.inner().config.verify_token.expose().as_bytes();
        let token_ok = !expected.is_empty() && bool::from(token.ct_eq(expected));
        match (
            q.get("hub.mode").map(String::as_str),
            q.get("hub.challenge"),
        ) {
            (Some("subscribe"), Some(challenge)) if token_ok => {
                tracing::info!(%peer, "whatsapp: webhook verified");
                Reply::new(200, challenge.clone())
            }
            _ => {
                tracing::warn!(%peer, "whatsapp: refused a webhook verification (wrong verify token or mode)");
                Reply::new(403, "verification refused")
            }
        }
    }

    fn post(&self, post: &webhook_server::Post<'_>, peer: SocketAddr) -> Reply {
        let (signature, body) = (post.header(webhook::SIGNATURE_HEADER), post.body);
        let secret = self.inner().config.app_secret.expose().as_bytes();
        if !webhook::signature_ok(secret, body, signature) {
            tracing::warn!(%peer, signed = signature.is_some(), "whatsapp: refused a webhook whose X-Hub-Signature-256 does not match (forged, or WHATSAPP_APP_SECRET is wrong)");
            return Reply::new(401, "bad signature");
        }
        // Another gateway serves this number now: not accepted here, so
        // Meta retries it — towards the gateway that serves it.
        if !self.inner().gate.is_open() {
            tracing::info!("whatsapp: not serving this number (lease gone); 503");
            return Reply::new(503, "not serving");
        }
        let note: Notification = match serde_json::from_slice(body) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(%peer, error = %e, "whatsapp: a signed webhook whose body is not a notification; refused");
                return Reply::new(400, "not a WhatsApp notification (JSON expected)");
            }
        };
        if note.object != "whatsapp_business_account" {
            tracing::info!(object = %note.object, "whatsapp: a notification for another product; ignored");
            return Reply::new(200, "ok");
        }
        let ours = &self.inner().config.phone_number_id;
        for change in note.entry.iter().flat_map(|e| &e.changes) {
            if change.field != "messages" {
                tracing::debug!(field = %change.field, "whatsapp: a notification field not read");
                continue;
            }
            let v = &change.value;
            if !v.metadata.phone_number_id.is_empty() && &v.metadata.phone_number_id != ours {
                tracing::warn!(number = %v.metadata.phone_number_id, "whatsapp: a notification for another phone number id; ignored");
                continue;
            }
            for status in v.statuses.iter().filter_map(webhook::read_status) {
                self.status(status);
            }
            let names: HashMap<String, String> = v
                .contacts
                .iter()
                .filter(|c| !c.profile.name.is_empty())
                .map(|c| (c.wa_id.clone(), c.profile.name.clone()))
                .collect();
            for raw in &v.messages {
                self.message(raw, &names);
            }
        }
        Reply::new(200, "ok")
    }
}

/// The upload type and the size Meta accepts for `kind`.
fn media_type(kind: FileKind) -> (&'static str, u64) {
    match kind {
        FileKind::Photo => ("image", 5 * 1024 * 1024),
        FileKind::Audio | FileKind::Voice => ("audio", 16 * 1024 * 1024),
        FileKind::Document => ("document", 100 * 1024 * 1024),
    }
}

#[async_trait]
impl PlatformAdapter for WhatsAppAdapter {
    fn platform(&self) -> &'static str {
        PLATFORM
    }

    fn max_message_len(&self) -> usize {
        MAX_MESSAGE_CHARS
    }

    /// The business number's id.
    fn bot_id(&self) -> String {
        self.inner.config.phone_number_id.clone()
    }

    fn set_lease(&self, lease: Option<Held>) {
        self.inner.gate.set(lease);
    }

    fn set_late_failures(&self, handler: LateFailureHandler) {
        *lock(&self.inner.late) = Some(handler);
    }

    async fn connect(&self, handler: EventHandler) -> Result<(), AdapterError> {
        let mut running = self.inner.server.lock().await;
        if running.is_some() {
            return Ok(());
        }
        let c = &self.inner.config;
        let listener = tokio::net::TcpListener::bind(c.listen).await.map_err(|e| {
            AdapterError::Network {
                platform: PLATFORM,
                message: format!(
                    "cannot listen on {} ({e}); check WHATSAPP_WEBHOOK_HOST and WHATSAPP_WEBHOOK_PORT",
                    c.listen
                ),
            }
        })?;
        let callbacks = Arc::new(Callbacks {
            adapter: self.clone(),
            handler,
            seen: Mutex::new(Dedup::new(
                u64::try_from(c.dedup_window.as_millis()).unwrap_or(u64::MAX),
                c.dedup_capacity,
            )),
            epoch: Instant::now(),
        });
        let server_config = WebhookConfig {
            name: "whatsapp",
            path: config::WEBHOOK_PATH.to_owned(),
            max_body: c.max_body_bytes,
            header_timeout: c.header_timeout,
            body_timeout: c.body_timeout,
            max_connections: c.max_connections,
            shutdown_grace: c.shutdown_grace,
        };
        let server = WebhookServer::start(listener, server_config, callbacks).map_err(|e| {
            AdapterError::Network {
                platform: PLATFORM,
                message: format!("cannot start the webhook server: {e}"),
            }
        })?;
        let addr = server.local_addr();
        tracing::info!(%addr, path = config::WEBHOOK_PATH, "whatsapp: listening for webhooks");
        *lock(&self.inner.addr) = Some(addr);
        *running = Some(server);
        Ok(())
    }

    async fn disconnect(&self) {
        let server = self.inner.server.lock().await.take();
        if let Some(server) = server {
            server.stop().await;
        }
        *lock(&self.inner.addr) = None;
    }

    /// The port is free and the token reads the phone number.
    async fn verify(&self) -> Result<Option<String>, String> {
        let c = &self.inner.config;
        if self.inner.server.lock().await.is_none() {
            tokio::net::TcpListener::bind(c.listen).await.map_err(|e| {
                format!(
                    "whatsapp: cannot listen on {} ({e}); check WHATSAPP_WEBHOOK_HOST and WHATSAPP_WEBHOOK_PORT",
                    c.listen
                )
            })?;
        }
        let number = self
            .inner
            .graph
            .phone_number()
            .await
            .map_err(|e| e.into_adapter_error().to_string())?;
        Ok(Some(format!(
            "number {number}, webhooks on http://{}{}",
            c.listen,
            config::WEBHOOK_PATH
        )))
    }

    async fn send(
        &self,
        chat_id: &str,
        text: &str,
        reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        let mut reply_to = reply_to;
        for piece in split_message(text, MAX_MESSAGE_CHARS, LengthUnit::Chars) {
            if piece.trim().is_empty() {
                continue;
            }
            let message =
                json!({ "type": "text", "text": { "preview_url": false, "body": piece } });
            self.send_one(chat_id, message, reply_to.take()).await?;
        }
        Ok(())
    }

    fn can_send_files(&self) -> bool {
        true
    }

    fn can_send_voice(&self) -> bool {
        true
    }

    fn max_upload_bytes(&self, kind: FileKind) -> u64 {
        media_type(kind).1
    }

    /// Uploads the file, then sends it by its media id: photos as `image`,
    /// voice and audio as `audio`, the rest as `document`.
    async fn send_file(
        &self,
        chat_id: &str,
        file: &OutgoingFile,
        reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        let (kind, max) = media_type(file.kind);
        if file.content.len() as u64 > max {
            return Err(AdapterError::Rejected {
                platform: PLATFORM,
                message: format!("the {kind} is larger than WhatsApp's {max} bytes"),
            });
        }
        let media_id = self
            .inner
            .graph
            .upload(&file.file_name, file.content_type(), file.content.clone())
            .await
            .map_err(ApiError::into_adapter_error)?;
        let mut object = json!({ "id": media_id });
        if kind != "audio" && !file.caption.trim().is_empty() {
            object["caption"] = json!(file.caption);
        }
        if kind == "document" {
            object["filename"] = json!(file.file_name);
        }
        let message = json!({ "type": kind, kind: object });
        self.send_one(chat_id, message, reply_to).await
    }

    async fn fetch_media(
        &self,
        media: &MediaRef,
        max_bytes: u64,
    ) -> Result<FetchedMedia, AdapterError> {
        let got = self
            .inner
            .graph
            .download(&media.handle, max_bytes)
            .await
            .map_err(ApiError::into_adapter_error)?;
        Ok(FetchedMedia {
            bytes: got.bytes,
            mime_type: got.mime_type.or_else(|| media.mime_type.clone()),
            file_name: media.file_name.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_handshake_query_is_decoded() {
        let q = handshake("hub.mode=subscribe&hub.verify_token=a%20b%2Bc&hub.challenge=1158201444");
        assert_eq!(q["hub.mode"], "subscribe");
        assert_eq!(q["hub.verify_token"], "a b+c");
        assert_eq!(q["hub.challenge"], "1158201444");
    }

    #[test]
    fn a_failed_status_with_131047_is_undeliverable_and_names_the_window() {
        let e = failed_status_error(GraphError {
            code: 131_047,
            message: "Re-engagement message".into(),
            details: Some("more than 24 hours".into()),
        });
        assert!(matches!(e, AdapterError::Undeliverable { .. }));
        let text = e.to_string();
        assert!(
            text.contains("outside WhatsApp's 24-hour window") && text.contains("131047"),
            "{text}"
        );
        let other = failed_status_error(GraphError {
            code: 131_026,
            message: "Message undeliverable".into(),
            details: None,
        });
        assert!(matches!(other, AdapterError::Rejected { .. }), "{other}");
    }
}
