//! The long-poll loop, where the `getUpdates` offset is kept, and the lease
//! gate that says whether this process may poll at all (SPEC X8).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hermes_runtime::store::{Fence, KvWrite, Store, StoreError};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::api::CallError;
use super::inbound::{Update, translate};
use super::{Inner, OffsetStore, lock};
use hermes_platform_kit::adapter::{AdapterError, EventHandler};

impl Inner {
    /// Hands `update` on; returns the id of a button press to answer.
    fn deliver(&self, update: Update, handler: &EventHandler) -> Option<String> {
        let press = update.callback_query.as_ref().map(|q| q.id.clone());
        let Some(bot) = lock(&self.bot).clone() else {
            return press;
        };
        match translate(update, &bot, &self.config.group_policy) {
            Ok(inb) => {
                if lock(&self.recent).first_time((inb.chat_id, inb.message_id), inb.thread_id) {
                    handler(inb.event);
                } else {
                    tracing::debug!(
                        chat = inb.chat_id,
                        message = inb.message_id,
                        "telegram: duplicate dropped"
                    );
                }
            }
            Err(skip) => tracing::debug!(?skip, "telegram: update skipped"),
        }
        press
    }

    /// Sleeps `d` unless asked to stop first. `false` means stop.
    async fn pause(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(d) => true,
            _ = stop.wait_for(|s| *s) => false,
        }
    }

    /// Reads the saved offset on the blocking pool: an [`OffsetStore`] may do
    /// IO under a lock (the SQLite store behind [`StoreOffsets`] is shared
    /// with the runner's turns), which must not stall a runtime worker.
    async fn load_offset(&self) -> Option<i64> {
        let offsets = Arc::clone(&self.offsets);
        match hermes_runtime::task::spawn_blocking(move || offsets.load()).await {
            Ok(o) => o,
            Err(e) => {
                tracing::error!(error = %e, "telegram: reading the saved offset panicked; starting from the oldest update");
                None
            }
        }
    }

    /// Saves the offset on the blocking pool (see [`Inner::load_offset`]),
    /// and waits for it: the next poll acknowledges the batch to Telegram,
    /// so the save comes first. Under a lease the save carries its fence: a
    /// gateway that lost the bot cannot move its successor's offset back.
    async fn save_offset(&self, offset: i64) {
        let offsets = Arc::clone(&self.offsets);
        let lease = self.gate.lease();
        let saved = hermes_runtime::task::spawn_blocking(move || match &lease {
            Some(held) => {
                let fenced = offsets.save_fenced(offset, held.fence());
                if !fenced {
                    held.lose();
                }
            }
            None => offsets.save(offset),
        });
        if let Err(e) = saved.await {
            tracing::error!(error = %e, "telegram: saving the offset panicked; a restart may repeat updates");
        }
    }

    /// Whether this process may poll the bot now (its lease, when it has
    /// one, is valid by its own clock).
    fn may_poll(&self) -> bool {
        self.gate.is_open()
    }

    /// The long-poll loop. Returns the fatal error it stopped on, or `None`
    /// when asked to stop.
    pub(super) async fn poll_loop(
        self: Arc<Self>,
        handler: EventHandler,
        mut stop: watch::Receiver<bool>,
    ) -> Option<AdapterError> {
        let mut offset = self.load_offset().await;
        let poll = Duration::from_secs(self.config.poll_timeout_s);
        // A configured timeout is not bounded by the type: saturate.
        let http_timeout = poll.saturating_add(Duration::from_secs(15));
        let mut failures = 0u32;
        let mut conflicts = ConflictLog::default();
        loop {
            // First of all, every time — also right after waking from a
            // SIGSTOP that outlasted the lease: is the bot still ours?
            if !self.may_poll() {
                tracing::info!("telegram: the bot's lease is gone; polling stopped");
                return None;
            }
            let mut body = json!({ "timeout": self.config.poll_timeout_s });
            if let Some(o) = offset {
                body["offset"] = json!(o);
            }
            let started = Instant::now();
            let result = tokio::select! {
                r = self.api.call_once("getUpdates", &body, http_timeout) => r,
                _ = stop.wait_for(|s| *s) => return None,
            };
            // A response that arrives after the lease ran out (the process
            // was stopped meanwhile) is another gateway's business now: not
            // handed on, offset not saved.
            if !self.may_poll() {
                tracing::info!(
                    "telegram: the bot's lease ran out during the poll; its answer is left to the next holder"
                );
                return None;
            }
            let wait = match result {
                Ok(value) => {
                    failures = 0;
                    conflicts.resolved();
                    let batch = take_batch(value, offset);
                    let empty = batch.updates.is_empty();
                    for (id, update) in batch.updates {
                        match update {
                            Ok(update) => {
                                if let Some(id) = self.deliver(update, &handler) {
                                    // Ends the button's spinner; the answer
                                    // itself is the chat's business.
                                    let body = json!({ "callback_query_id": id });
                                    if let Err(e) = self
                                        .api
                                        .call("answerCallbackQuery", &body, Duration::from_secs(10))
                                        .await
                                    {
                                        tracing::debug!(error = %e.into_adapter_error(), "telegram: answerCallbackQuery failed");
                                    }
                                }
                            }
                            Err(e) => {
                                tracing::warn!(update_id = id, error = %e, "telegram: unreadable update skipped")
                            }
                        }
                    }
                    if batch.next != offset {
                        if let Some(n) = batch.next {
                            self.save_offset(n).await;
                        }
                        offset = batch.next;
                    }
                    let early = started.elapsed().saturating_mul(2) < poll || poll.is_zero();
                    (empty && early).then_some(self.config.empty_poll_pause)
                }
                Err(CallError::Api {
                    status: 429,
                    retry_after,
                    ..
                }) => {
                    // The server's number: polling must resume, so the wait
                    // is capped like a send's (`retry_after: u64::MAX` once
                    // stopped polling for good).
                    let wait = Duration::from_secs(retry_after.unwrap_or(1).max(1))
                        .min(self.config.retry.max_retry_after);
                    tracing::warn!(
                        wait_s = wait.as_secs(),
                        "telegram: getUpdates rate limited (429), waiting"
                    );
                    Some(wait)
                }
                Err(CallError::Api {
                    status: 409,
                    description,
                    ..
                }) => {
                    // Another poller of this token (an admin's shell beside
                    // the service, a laptop beside the board): a condition
                    // to wait out, never the end of polling — once it
                    // leaves, this gateway serves again.
                    Some(conflicts.seen(&description, &self.config.retry))
                }
                Err(
                    e @ CallError::Api {
                        status: 401 | 404, ..
                    },
                ) => {
                    return Some(e.into_adapter_error());
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let wait = self.config.retry.backoff(failures);
                    tracing::warn!(error = ?e, attempt = failures, "telegram: getUpdates failed, retrying");
                    Some(wait)
                }
            };
            if let Some(d) = wait
                && !Self::pause(d, &mut stop).await
            {
                return None;
            }
        }
    }
}

/// The longest wait between two polls while another process polls the same
/// token: the gateway serves again at most this long after it left.
pub(crate) const CONFLICT_MAX_WAIT: Duration = Duration::from_secs(10);
/// A continuing conflict is logged at most this often.
const CONFLICT_LOG_EVERY: Duration = Duration::from_secs(60);

/// The 409s of one stretch of conflict: how long to wait before the next
/// poll, and when to say so in the log (once a minute, not once a poll).
#[derive(Debug, Default)]
struct ConflictLog {
    /// 409s since the last successful poll.
    count: u32,
    /// 409s not yet reported in the log.
    unreported: u32,
    logged_at: Option<Instant>,
}

impl ConflictLog {
    /// One more 409: logs when a minute has passed since the last line and
    /// returns the pause before polling again.
    fn seen(&mut self, description: &str, retry: &super::RetryPolicy) -> Duration {
        self.count = self.count.saturating_add(1);
        self.unreported = self.unreported.saturating_add(1);
        if self
            .logged_at
            .is_none_or(|at| at.elapsed() >= CONFLICT_LOG_EVERY)
        {
            tracing::warn!(
                conflicts = self.unreported,
                telegram = description,
                "telegram: another process is polling this bot token (409 Conflict); still polling, \
                 with pauses — stop the other gateway or give it its own bot token"
            );
            self.logged_at = Some(Instant::now());
            self.unreported = 0;
        }
        retry
            .backoff(self.count)
            .clamp(Duration::from_millis(500), CONFLICT_MAX_WAIT)
    }

    /// A poll succeeded: if a conflict was going on, it is over. The time
    /// of the last warning is kept, so a conflict that comes and goes is
    /// still reported at most once a minute.
    fn resolved(&mut self) {
        if self.count > 0 {
            tracing::info!(
                conflicts = self.count,
                "telegram: polling without conflict again"
            );
            self.count = 0;
            self.unreported = 0;
        }
    }
}

/// One `getUpdates` result, read: the updates to deliver (with their ids)
/// and the offset that acknowledges them.
#[derive(Debug)]
pub(crate) struct Batch {
    pub(crate) updates: Vec<(i64, Result<Update, serde_json::Error>)>,
    /// The next `offset`: one past the highest id seen, never lower than
    /// the current one.
    pub(crate) next: Option<i64>,
}

/// Reads a `getUpdates` result. Pure, for the fuzz target
/// (`crate::fuzz_entry::telegram_updates`).
pub(crate) fn take_batch(value: Value, offset: Option<i64>) -> Batch {
    let raw_updates = match value {
        Value::Array(a) => a,
        other => {
            tracing::warn!(kind = ?other, "telegram: getUpdates result is not a list; ignored");
            Vec::new()
        }
    };
    let mut next = offset;
    let mut updates = Vec::with_capacity(raw_updates.len());
    for raw in raw_updates {
        let Some(id) = raw.get("update_id").and_then(Value::as_i64) else {
            tracing::warn!("telegram: update without update_id ignored");
            continue;
        };
        // Already acknowledged: a server that ignores `offset`.
        if offset.is_some_and(|o| id < o) {
            continue;
        }
        // The id comes from the server: at i64::MAX, `+ 1` would overflow
        // (a panic in debug builds, a negative offset — "from the end" — in
        // release). Saturate; a repeat of that last update is then dropped
        // by the dedup window.
        let after = id.saturating_add(1);
        next = Some(next.map_or(after, |n: i64| n.max(after)));
        updates.push((id, serde_json::from_value::<Update>(raw)));
    }
    Batch { updates, next }
}

/// The key under which the offset of a token is stored, when the bot's id
/// is unknown (and where versions before per-bot keys stored it).
pub const OFFSET_KEY: &str = "telegram.offset";

/// [`OffsetStore`] backed by the store's key-value table: under
/// `telegram.offset.<bot id>` (several bots may share a database), falling
/// back to [`OFFSET_KEY`] when that is all there is.
#[derive(Debug, Clone)]
pub struct StoreOffsets {
    store: Arc<Mutex<Store>>,
    key: String,
}

impl StoreOffsets {
    /// Offsets under [`OFFSET_KEY`].
    pub fn new(store: Arc<Mutex<Store>>) -> Self {
        StoreOffsets {
            store,
            key: OFFSET_KEY.to_owned(),
        }
    }

    /// Offsets of the bot whose token is `token` (its id is the part before
    /// the `:`; the secret part is not used).
    pub fn for_token(store: Arc<Mutex<Store>>, token: &str) -> Self {
        let id = token.trim().split(':').next().unwrap_or_default();
        StoreOffsets {
            store,
            key: if id.is_empty() {
                OFFSET_KEY.to_owned()
            } else {
                format!("{OFFSET_KEY}.{id}")
            },
        }
    }
}

impl OffsetStore for StoreOffsets {
    fn load(&self) -> Option<i64> {
        let store = lock(&self.store);
        let value = store.kv_get(&self.key).and_then(|v| match v {
            Some(v) => Ok(Some(v)),
            None if self.key != OFFSET_KEY => store.kv_get(OFFSET_KEY),
            None => Ok(None),
        });
        match value {
            Ok(v) => v.and_then(|s| s.trim().parse().ok()),
            Err(e) => {
                tracing::error!(error = %e, "telegram: cannot read the saved offset; starting from the oldest update");
                None
            }
        }
    }

    fn save(&self, offset: i64) {
        if let Err(e) = lock(&self.store).kv_set(&self.key, &offset.to_string()) {
            tracing::error!(error = %e, "telegram: cannot save the offset; a restart may repeat updates");
        }
    }

    fn save_fenced(&self, offset: i64, fence: &Fence) -> bool {
        let value = offset.to_string();
        let written = lock(&self.store).kv_commit_fenced(
            &[KvWrite::Set {
                key: &self.key,
                value: &value,
            }],
            std::slice::from_ref(fence),
        );
        match written {
            Ok(_) => true,
            Err(e @ StoreError::Fenced { .. }) => {
                tracing::warn!(error = %e, "telegram: the bot's lease was taken over; offset left to its new holder");
                false
            }
            Err(e) => {
                tracing::error!(error = %e, "telegram: cannot save the offset; a restart may repeat updates");
                true
            }
        }
    }
}
