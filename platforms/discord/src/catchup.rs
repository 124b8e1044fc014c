//! Catching up after a new session: what was written while no gateway ran.
//!
//! Discord replays missed events only to a RESUMEd session, and a session
//! lives for minutes; a restarted process (after a kill -9, a deploy, an
//! outage of an hour) IDENTIFYs a new one and would never see the messages
//! sent in between. So the adapter keeps, per channel it has served, the id
//! of the newest message it handled there (Discord's ids are snowflakes,
//! ordered by time) in the store's key-value table, and after every READY
//! reads `GET /channels/{id}/messages?after=<id>` for those channels and
//! hands what it finds through the same rules as a live `MESSAGE_CREATE`.
//!
//! A message is marked only after the handler returned — the runner has
//! then made it durable (or dropped it as already seen) — so a kill before
//! the mark fetches it again, and the inbox's dedup by message id keeps it
//! from being answered twice. Persisting the session for a RESUME would
//! cover only the short resume window; the catch-up covers any outage.
//! Writes carry the bot's lease fence, like Telegram's offset and Matrix's
//! `next_batch`: a gateway that lost the bot cannot move its successor's
//! marks back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hermes_runtime::bridge::wait_outside_runtime as blocking;
use hermes_runtime::store::{KvWrite, Store, StoreError};
use serde_json::Value;

use super::lock;
use hermes_platform_kit::lease::LeaseGate;

/// Store keys: `discord.last.<bot id>.<channel id>` → message id.
pub const MARK_KV_PREFIX: &str = "discord.last.";
/// Discord's largest page of `GET /channels/{id}/messages`.
pub(crate) const PAGE: usize = 100;
/// Pages read per channel after one READY (2000 messages; heartbeats wait
/// meanwhile): a channel busier than that while the gateway was down is
/// read on from its newest mark after the next READY.
pub(crate) const MAX_PAGES: usize = 20;

/// The newest handled message per channel, in memory and in the store.
pub(crate) struct Marks {
    store: Option<Arc<Mutex<Store>>>,
    prefix: String,
    last: Mutex<HashMap<String, u64>>,
}

impl Marks {
    pub(crate) fn new(store: Option<Arc<Mutex<Store>>>, bot_id: &str) -> Self {
        Marks {
            store,
            prefix: format!("{MARK_KV_PREFIX}{bot_id}."),
            last: Mutex::new(HashMap::new()),
        }
    }

    /// The channels to catch up in and their marks, oldest channel first
    /// (the saved ones merged with those of this process).
    pub(crate) fn load(&self) -> Vec<(String, u64)> {
        if let Some(store) = &self.store {
            let saved = blocking(|| lock(store).kv_scan(&self.prefix));
            match saved {
                Ok(rows) => {
                    let mut last = lock(&self.last);
                    for (key, value) in rows {
                        let (Some(channel), Ok(id)) =
                            (key.strip_prefix(&self.prefix), value.trim().parse::<u64>())
                        else {
                            continue;
                        };
                        let mark = last.entry(channel.to_owned()).or_insert(id);
                        *mark = (*mark).max(id);
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "discord: cannot read the catch-up marks; messages sent while the gateway was down may be missed");
                }
            }
        }
        let mut marks: Vec<(String, u64)> = lock(&self.last)
            .iter()
            .map(|(c, id)| (c.clone(), *id))
            .collect();
        marks.sort_by_key(|(_, id)| *id);
        marks
    }

    /// Whether the bot has served `channel` (its messages are caught up).
    pub(crate) fn tracks(&self, channel: &str) -> bool {
        lock(&self.last).contains_key(channel)
    }

    /// Records that message `id` of `channel` was handled. Never moves a
    /// mark back. Failures are logged: the live connection goes on.
    pub(crate) fn advance(&self, channel: &str, id: u64, gate: &LeaseGate) {
        {
            let mut last = lock(&self.last);
            let mark = last.entry(channel.to_owned()).or_insert(0);
            if *mark >= id {
                return;
            }
            *mark = id;
        }
        let Some(store) = &self.store else {
            return;
        };
        let key = format!("{}{channel}", self.prefix);
        let value = id.to_string();
        let writes = [KvWrite::Set {
            key: &key,
            value: &value,
        }];
        let lease = gate.lease();
        let result = blocking(|| match &lease {
            Some(held) => lock(store).kv_commit_fenced(&writes, std::slice::from_ref(held.fence())),
            None => lock(store).kv_commit(&writes),
        });
        match (result, &lease) {
            (Err(StoreError::Fenced { .. }), Some(held)) => {
                tracing::warn!(
                    "discord: the bot's lease was taken over; catch-up marks left to its new holder"
                );
                held.lose();
            }
            (Err(e), _) => {
                tracing::error!(error = %e, "discord: cannot save the catch-up mark; a restart may fetch a message again (answered once)");
            }
            (Ok(_), _) => {}
        }
    }
}

/// A message's id as a number (`None` for a malformed one).
pub(crate) fn snowflake(message: &Value) -> Option<u64> {
    message["id"].as_str()?.parse().ok()
}

/// One page of `GET /channels/{id}/messages` put in sending order (Discord
/// returns the newest first), keeping only messages after `after`.
pub(crate) fn in_order(page: Value, after: u64) -> Vec<Value> {
    let Value::Array(items) = page else {
        return Vec::new();
    };
    let mut items: Vec<(u64, Value)> = items
        .into_iter()
        .filter_map(|m| snowflake(&m).map(|id| (id, m)))
        .filter(|(id, _)| *id > after)
        .collect();
    items.sort_by_key(|(id, _)| *id);
    items.into_iter().map(|(_, m)| m).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_page_is_put_oldest_first_and_nothing_at_or_before_the_mark_kept() {
        let page = json!([{"id": "105"}, {"id": "104"}, {"id": "x"}, {"id": "101"}, {"id": "100"}]);
        let ids: Vec<u64> = in_order(page, 100).iter().filter_map(snowflake).collect();
        assert_eq!(ids, vec![101, 104, 105]);
        assert!(in_order(json!({"message": "no"}), 0).is_empty());
    }
}
