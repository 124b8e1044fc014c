//! What the adapter remembers across restarts, in the store's key-value
//! table (in memory when it has no store): the mailbox position (its
//! UIDVALIDITY and the last UID handed on) and each thread's headers, so an
//! answer — even one sent after a restart — carries the right threading.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hermes_runtime::store::{KvWrite, Store, StoreError};
use serde::{Deserialize, Serialize};

use super::parse::Threading;
use hermes_platform_kit::lease::LeaseGate;
use hermes_runtime::sync::lock;

/// Where reading stopped: UIDs up to `last_uid` of the mailbox whose
/// UIDVALIDITY is `uid_validity` have been handed on (or skipped).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Position {
    pub uid_validity: u32,
    pub last_uid: u32,
    /// When the position was saved (Unix seconds): after a UIDVALIDITY
    /// change, mail older than this was seen under the old numbering.
    #[serde(default)]
    pub saved_at: u64,
}

/// The store, or a map when there is none.
pub(crate) struct Memory {
    store: Option<Arc<Mutex<Store>>>,
    map: Mutex<HashMap<String, String>>,
    prefix: String,
}

impl Memory {
    pub fn new(store: Option<Arc<Mutex<Store>>>, address: &str) -> Self {
        Memory {
            store,
            map: Mutex::default(),
            prefix: format!("email.{address}."),
        }
    }

    fn get(&self, key: &str) -> Option<String> {
        let key = format!("{}{key}", self.prefix);
        match &self.store {
            Some(store) => lock(store).kv_get(&key).unwrap_or_else(|e| {
                tracing::error!(error = %e, "email: cannot read the store");
                None
            }),
            None => lock(&self.map).get(&key).cloned(),
        }
    }

    /// Saves `pairs` in one commit, fenced by the bot's lease when there is
    /// one: a gateway that lost the bot cannot move its successor's
    /// position back.
    fn set(&self, gate: &LeaseGate, pairs: &[(String, String)]) {
        let pairs: Vec<(String, &str)> = pairs
            .iter()
            .map(|(k, v)| (format!("{}{k}", self.prefix), v.as_str()))
            .collect();
        let Some(store) = &self.store else {
            let mut map = lock(&self.map);
            for (k, v) in pairs {
                map.insert(k, v.to_owned());
            }
            return;
        };
        let writes: Vec<KvWrite<'_>> = pairs
            .iter()
            .map(|(key, value)| KvWrite::Set { key, value })
            .collect();
        let lease = gate.lease();
        let result = match &lease {
            Some(held) => lock(store).kv_commit_fenced(&writes, std::slice::from_ref(held.fence())),
            None => lock(store).kv_commit(&writes),
        };
        match (result, &lease) {
            (Err(StoreError::Fenced { .. }), Some(held)) => held.lose(),
            (Err(e), _) => tracing::error!(error = %e, "email: cannot save to the store"),
            (Ok(_), _) => {}
        }
    }

    pub fn position(&self) -> Option<Position> {
        serde_json::from_str(&self.get("position")?).ok()
    }

    pub fn set_position(&self, gate: &LeaseGate, position: Position) {
        if let Ok(json) = serde_json::to_string(&position) {
            self.set(gate, &[("position".to_owned(), json)]);
        }
    }

    /// The headers of mail `message_id` (one the bot received or sent).
    pub fn message(&self, message_id: &str) -> Option<Threading> {
        serde_json::from_str(&self.get(&format!("msg.{message_id}"))?).ok()
    }

    /// The latest mail of `thread`.
    pub fn thread(&self, thread: &str) -> Option<Threading> {
        serde_json::from_str(&self.get(&format!("thread.{thread}"))?).ok()
    }

    /// Remembers `mail` as the latest of its thread.
    pub fn remember(&self, gate: &LeaseGate, mail: &Threading) {
        if let Ok(json) = serde_json::to_string(mail) {
            self.set(
                gate,
                &[
                    (format!("msg.{}", mail.message_id), json.clone()),
                    (format!("thread.{}", mail.thread), json),
                ],
            );
        }
    }
}
