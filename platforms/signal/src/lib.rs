//! Signal for Hermes, through signal-cli's JSON-RPC daemon (issue 42 §2).
//!
//! The user runs `signal-cli -a ACCOUNT daemon --http 127.0.0.1:8080
//! --receive-mode manual`; the adapter speaks JSON-RPC 2.0 to
//! `POST /api/v1/rpc` (`man signal-cli-jsonrpc`).
//!
//! Inbound: the `receive` method, called in a loop (`maxMessages` 1, a one
//! second wait). In manual receive mode signal-cli fetches from Signal's
//! servers only while a `receive` runs, so what arrives while the gateway
//! is down waits on Signal's side and is fetched at the next start. Each
//! message is handed to the runner, whose inbox has made it durable when
//! the handler returns; the `/api/v1/events` stream was not chosen because
//! it fetches continuously and drops what arrives while no client is
//! connected or before the daemon notices a client is gone (ARCHITECTURE.md).
//!
//! Outbound: `send` with `recipient` or `groupId`, split at
//! [`MAX_MESSAGE_BYTES`], the first piece quoting the user's message;
//! files as `attachments` data URIs; `sendTyping`; a read receipt
//! (`sendReceipt`) for each message handed on. A rate-limited send (-5) is
//! retried after signal-cli's `retryAfterSeconds` until it passes; an
//! untrusted identity (-4) fails that reply with a sentence saying how to
//! trust the new key, and the adapter carries on.

mod config;
pub mod descriptor;
mod rpc;
mod translate;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use hermes_platform_kit::adapter::{
    AdapterError, EventHandler, FetchedMedia, FileKind, OutgoingFile, PlatformAdapter,
};
use hermes_platform_kit::event::MediaRef;
use hermes_platform_kit::lease::{Held, LeaseGate};
use hermes_platform_kit::running::RunningLoop;
use hermes_platform_kit::split::{LengthUnit, split_message};
use hermes_runtime::sync::lock;
use serde_json::{Value, json};
use tokio::sync::watch;

pub use config::{SignalConfig, SignalConfigError, is_number, is_uuid};
pub use rpc::{IO_ERROR, RATELIMIT_ERROR, UNTRUSTED_KEY_ERROR, USER_ERROR};
use rpc::{Rpc, RpcError, backoff};
pub use translate::{GROUP_PREFIX, Inbound, Me, translate};

/// The platform name in session keys.
pub const PLATFORM: &str = "signal";

/// The longest message body sent in one `send`, in UTF-8 bytes. Signal
/// clients show a body of up to 2 000 bytes inline (longer ones travel as a
/// "long text" attachment), so longer replies are split.
pub const MAX_MESSAGE_BYTES: usize = 2000;

/// The largest file sent (Signal's attachment limit is 100 MiB).
const MAX_UPLOAD_BYTES: u64 = 100 * 1024 * 1024;

/// How long one `receive` waits for a message, in seconds.
const RECEIVE_WAIT_SECS: f64 = 1.0;

/// How long a `send` may take (signal-cli sends to every device of every
/// recipient before answering).
const SEND_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest rate-limit wait honoured at once; a longer one is waited
/// in steps of this, logging each.
const MAX_RATE_WAIT: Duration = Duration::from_secs(300);

/// How often a send is tried while the daemon does not answer.
const SEND_ATTEMPTS: u32 = 5;

struct Inner {
    config: SignalConfig,
    rpc: Rpc,
    /// The account's UUID, learned from the daemon (`getUserStatus`).
    uuid: Mutex<Option<String>>,
    gate: LeaseGate,
}

impl Inner {
    fn daemon_hint(&self) -> String {
        format!(
            "is `signal-cli -a {} daemon --http 127.0.0.1:8080 --receive-mode manual` running at SIGNAL_HTTP_URL {}?",
            self.config.account, self.config.http_url
        )
    }

    /// Asks the daemon who the account is; remembers its UUID.
    async fn whoami(&self) -> Result<Option<String>, RpcError> {
        let answer = self
            .rpc
            .call(
                "getUserStatus",
                json!({ "recipient": [self.config.account] }),
                Duration::from_secs(30),
            )
            .await?;
        let uuid = answer
            .as_array()
            .and_then(|a| a.first())
            .and_then(|s| s.get("uuid"))
            .and_then(Value::as_str)
            .filter(|u| !u.is_empty())
            .map(str::to_owned);
        if uuid.is_some() {
            *lock(&self.uuid) = uuid.clone();
        }
        Ok(uuid)
    }

    /// `recipient` or `groupId` for a chat id.
    fn address(chat_id: &str) -> Value {
        match chat_id.strip_prefix(GROUP_PREFIX) {
            Some(group) => json!({ "groupId": group }),
            None => json!({ "recipient": [chat_id] }),
        }
    }

    /// One `send`, retried through rate limits and a daemon that does not
    /// answer; an untrusted identity or another refusal ends it.
    async fn send_params(&self, params: Value) -> Result<(), AdapterError> {
        let mut failures = 0u32;
        loop {
            match self.rpc.call("send", params.clone(), SEND_TIMEOUT).await {
                Ok(_) => return Ok(()),
                Err(e) if e.code() == Some(RATELIMIT_ERROR) => {
                    failures = failures.saturating_add(1);
                    let wait = e
                        .retry_after()
                        .unwrap_or_else(|| backoff(failures))
                        .max(backoff(1))
                        .min(MAX_RATE_WAIT);
                    tracing::warn!(
                        wait_ms = wait.as_millis() as u64,
                        "signal: rate limited by Signal, sending again after the wait"
                    );
                    tokio::time::sleep(wait).await;
                }
                Err(e) if e.code() == Some(UNTRUSTED_KEY_ERROR) => {
                    let who: Vec<String> = e
                        .send_results()
                        .iter()
                        .filter(|r| {
                            r.get("type").and_then(Value::as_str) == Some("IDENTITY_FAILURE")
                        })
                        .filter_map(|r| {
                            let a = r.get("recipientAddress")?;
                            a.get("number")
                                .or(a.get("uuid"))
                                .and_then(Value::as_str)
                                .map(str::to_owned)
                        })
                        .collect();
                    let who = if who.is_empty() {
                        "the recipient".to_owned()
                    } else {
                        who.join(", ")
                    };
                    return Err(AdapterError::Rejected {
                        platform: PLATFORM,
                        message: format!(
                            "not sent: the safety number of {who} changed and is not trusted (signal-cli error -4); verify it, then run `signal-cli -a {} trust -a {who}`",
                            self.config.account
                        ),
                    });
                }
                Err(RpcError::Unreachable(m)) => {
                    failures = failures.saturating_add(1);
                    if failures >= SEND_ATTEMPTS {
                        return Err(AdapterError::Network {
                            platform: PLATFORM,
                            message: format!("{m}; {}", self.daemon_hint()),
                        });
                    }
                    tracing::warn!(error = %m, attempt = failures, "signal: the daemon did not answer a send, retrying");
                    tokio::time::sleep(backoff(failures)).await;
                }
                Err(e) => {
                    return Err(AdapterError::Rejected {
                        platform: PLATFORM,
                        message: e.to_string(),
                    });
                }
            }
        }
    }
}

/// The Signal adapter. See the crate docs.
pub struct SignalAdapter {
    inner: Arc<Inner>,
    running: RunningLoop,
}

impl std::fmt::Debug for SignalAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignalAdapter")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl SignalAdapter {
    /// An adapter for `config`.
    pub fn new(config: SignalConfig) -> Self {
        let rpc = Rpc::new(&config.http_url);
        SignalAdapter {
            inner: Arc::new(Inner {
                config,
                rpc,
                uuid: Mutex::new(None),
                gate: LeaseGate::default(),
            }),
            running: RunningLoop::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &SignalConfig {
        &self.inner.config
    }
}

/// The receive loop: one `receive` after another until stopped or the
/// bot's lease is gone; a daemon that does not answer is logged and tried
/// again with backoff.
async fn receive_loop(inner: Arc<Inner>, handler: EventHandler, mut stop: watch::Receiver<bool>) {
    let mut failures = 0u32;
    let params = json!({ "timeout": RECEIVE_WAIT_SECS, "maxMessages": 1 });
    let http_timeout = Duration::from_secs(RECEIVE_WAIT_SECS as u64 + 30);
    loop {
        if !inner.gate.is_open() {
            tracing::info!("signal: the bot's lease is gone; receiving stopped");
            return;
        }
        if lock(&inner.uuid).is_none()
            && let Err(e) = inner.whoami().await
        {
            tracing::debug!(error = %e, "signal: the account's UUID is not known yet");
        }
        // Not abandoned when asked to stop: what this `receive` took is
        // acknowledged on Signal's side already, so it is handed on first.
        let result = inner
            .rpc
            .call("receive", params.clone(), http_timeout)
            .await;
        let wait = match result {
            Ok(items) => {
                if failures > 0 {
                    tracing::info!("signal: the signal-cli daemon answers again");
                }
                failures = 0;
                if !inner.gate.is_open() {
                    return;
                }
                for item in items.as_array().map(Vec::as_slice).unwrap_or_default() {
                    hand_on(&inner, item, &handler);
                }
                if *stop.borrow() {
                    return;
                }
                None
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let wait = backoff(failures);
                match &e {
                    RpcError::Rpc {
                        code: USER_ERROR,
                        message,
                        ..
                    } if message.contains("already") => {
                        tracing::error!(error = %e, "signal: the daemon receives on its own; start it with --receive-mode manual so nothing is lost");
                    }
                    RpcError::Unreachable(_) => {
                        tracing::warn!(error = %e, retry_ms = wait.as_millis() as u64, "signal: {}", inner.daemon_hint());
                    }
                    _ => {
                        tracing::warn!(error = %e, retry_ms = wait.as_millis() as u64, "signal: receive failed")
                    }
                }
                Some(wait)
            }
        };
        if let Some(d) = wait {
            tokio::select! {
                _ = tokio::time::sleep(d) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }
}

/// Translates one received item and hands a message to the runner; says
/// in the log why anything else was not.
fn hand_on(inner: &Arc<Inner>, item: &Value, handler: &EventHandler) {
    let uuid = lock(&inner.uuid).clone();
    let allowed = |id: &str| inner.config.allowed_users.contains(id);
    let me = Me {
        number: &inner.config.account,
        uuid: uuid.as_deref(),
        require_mention: inner.config.require_mention,
        allowed: &allowed,
    };
    match translate(item, &me) {
        Inbound::Message(event) => {
            let receipt = translate::parse_message_id(&event.message_id)
                .map(|(ts, author)| (ts, author.to_owned()));
            handler(*event);
            if let Some((ts, author)) = receipt {
                let inner = Arc::clone(inner);
                hermes_runtime::task::spawn(async move {
                    let params =
                        json!({ "recipient": author, "targetTimestamp": [ts], "type": "read" });
                    if let Err(e) = inner
                        .rpc
                        .call("sendReceipt", params, Duration::from_secs(30))
                        .await
                    {
                        tracing::debug!(error = %e, "signal: read receipt not sent");
                    }
                });
            }
        }
        Inbound::Skip(why) => tracing::debug!(why, "signal: nothing to answer"),
        Inbound::Unknown(kinds) => tracing::info!(
            kinds,
            "signal: ignored an envelope of a kind this gateway does not know"
        ),
        Inbound::Failed { source, error } => {
            tracing::warn!(
                source,
                error,
                "signal: signal-cli could not read a message (an untrusted identity is trusted with `signal-cli trust`)"
            );
        }
    }
}

#[async_trait]
impl PlatformAdapter for SignalAdapter {
    fn platform(&self) -> &'static str {
        PLATFORM
    }

    fn bot_id(&self) -> String {
        self.inner.config.account.clone()
    }

    fn set_lease(&self, lease: Option<Held>) {
        self.inner.gate.set(lease);
    }

    fn max_message_len(&self) -> usize {
        MAX_MESSAGE_BYTES
    }

    fn length_unit(&self) -> LengthUnit {
        LengthUnit::Bytes
    }

    async fn connect(&self, handler: EventHandler) -> Result<(), AdapterError> {
        let Some(starting) = self.running.begin().await else {
            return Ok(());
        };
        match self.inner.whoami().await {
            Ok(uuid) => {
                tracing::info!(account = %self.inner.config.account, uuid = uuid.as_deref().unwrap_or("?"), "signal: connected to the signal-cli daemon")
            }
            Err(e) => {
                tracing::warn!(error = %e, "signal: {} (receiving starts when it answers)", self.inner.daemon_hint())
            }
        }
        let inner = Arc::clone(&self.inner);
        starting.spawn(|stop| receive_loop(inner, handler, stop));
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
        let pieces = split_message(text, MAX_MESSAGE_BYTES, LengthUnit::Bytes);
        let quote = reply_to.and_then(translate::parse_message_id);
        for (i, piece) in pieces.iter().enumerate() {
            let mut params = Inner::address(chat_id);
            params["message"] = json!(piece);
            if i == 0
                && let Some((ts, author)) = quote
            {
                params["quoteTimestamp"] = json!(ts);
                params["quoteAuthor"] = json!(author);
            }
            self.inner.send_params(params).await?;
        }
        Ok(())
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

    /// As an attachment given as a data URI, which signal-cli accepts in
    /// place of a path (`data:<type>;filename=<name>;base64,<data>`), so
    /// the daemon need not share a file system with the gateway.
    async fn send_file(
        &self,
        chat_id: &str,
        file: &OutgoingFile,
        reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        let name: String = file
            .file_name
            .chars()
            .filter(|c| !matches!(c, ';' | ',' | '/' | '\\') && !c.is_control())
            .collect();
        let data = base64::engine::general_purpose::STANDARD.encode(&file.content);
        let uri = format!("data:{};filename={name};base64,{data}", file.content_type());
        let mut params = Inner::address(chat_id);
        params["attachments"] = json!([uri]);
        params["message"] = json!(file.caption);
        if file.kind == FileKind::Voice {
            params["voiceNote"] = json!(true);
        }
        if let Some((ts, author)) = reply_to.and_then(translate::parse_message_id) {
            params["quoteTimestamp"] = json!(ts);
            params["quoteAuthor"] = json!(author);
        }
        self.inner.send_params(params).await
    }

    async fn typing(&self, chat_id: &str) {
        if let Err(e) = self
            .inner
            .rpc
            .call(
                "sendTyping",
                Inner::address(chat_id),
                Duration::from_secs(10),
            )
            .await
        {
            tracing::debug!(error = %e, "signal: typing notice not sent");
        }
    }

    /// `getAttachment`: the file signal-cli downloaded into its data
    /// directory when it received the message, read back as base64.
    async fn fetch_media(
        &self,
        media: &MediaRef,
        max_bytes: u64,
    ) -> Result<FetchedMedia, AdapterError> {
        let refused = |message: String| AdapterError::Rejected {
            platform: PLATFORM,
            message,
        };
        let handle: Value = serde_json::from_str(&media.handle)
            .map_err(|_| refused("not a Signal attachment".to_owned()))?;
        let id = handle.get("id").and_then(Value::as_str).unwrap_or_default();
        let chat = handle
            .get("chat")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if media.size.is_some_and(|s| s > max_bytes) {
            return Err(refused(format!(
                "the attachment is larger than {max_bytes} bytes"
            )));
        }
        let mut params = match chat.strip_prefix(GROUP_PREFIX) {
            Some(group) => json!({ "groupId": group }),
            None => json!({ "recipient": chat }),
        };
        params["id"] = json!(id);
        let answer = self
            .inner
            .rpc
            .call("getAttachment", params, Duration::from_secs(120))
            .await
            .map_err(|e| match e {
                RpcError::Rpc {
                    code: USER_ERROR, ..
                } => refused(format!(
                    "the attachment is gone from signal-cli's data directory ({e})"
                )),
                RpcError::Unreachable(m) => AdapterError::Network {
                    platform: PLATFORM,
                    message: m,
                },
                e => refused(e.to_string()),
            })?;
        let data = answer
            .get("data")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if (data.len() as u64 / 4).saturating_mul(3) > max_bytes.saturating_add(3) {
            return Err(refused(format!(
                "the attachment is larger than {max_bytes} bytes"
            )));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| refused(format!("getAttachment answered with bad base64: {e}")))?;
        Ok(FetchedMedia {
            bytes,
            mime_type: media.mime_type.clone(),
            file_name: media.file_name.clone(),
        })
    }

    async fn verify(&self) -> Result<Option<String>, String> {
        match self.inner.whoami().await {
            Ok(uuid) => Ok(Some(match uuid {
                Some(u) => format!(
                    "{} ({u}) through the signal-cli daemon at {}",
                    self.inner.config.account, self.inner.config.http_url
                ),
                None => format!(
                    "{} through the signal-cli daemon at {}",
                    self.inner.config.account, self.inner.config.http_url
                ),
            })),
            Err(RpcError::Unreachable(m)) => Err(format!(
                "the signal-cli daemon is not answering ({m}); {}",
                self.inner.daemon_hint()
            )),
            Err(e) => Err(format!(
                "the signal-cli daemon at SIGNAL_HTTP_URL {} refused: {e}; check SIGNAL_ACCOUNT",
                self.inner.config.http_url
            )),
        }
    }
}
