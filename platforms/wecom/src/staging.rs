//! Pieces of user text made durable the moment they arrive (SPEC G8, E3).
//!
//! WeCom sends a callback once and never again, and the adapter holds each
//! piece of a long text for up to the merge window ([`super::merge`]) before
//! the joined message reaches the runner's inbox. Held only in memory, a
//! piece dies with a killed gateway. So each piece is written to the store
//! (one key-value row, `gateway.wecom.piece.<bot>.<n>`) before the next
//! frame is read, with the *group* it joined: the tag of its message's first
//! piece. When the joined message has been handed to the runner (whose
//! handler makes it durable in the inbox before returning), its rows are
//! deleted.
//!
//! After a restart the rows left are joined again, group by group, in
//! arrival order — the same pieces in the same order, so the same text and
//! the same message id (its newest piece's) — and handed to the runner at
//! once. A message the runner had already accepted before the kill (killed
//! between the inbox write and the rows' deletion) is recognised by the
//! inbox's seen key and dropped: answered once either way.
//!
//! The rows go through the runner's store, as Telegram's poll offset does;
//! without a store (`--check`, tests of the adapter alone) pieces are held
//! in memory only, as before.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hermes_runtime::store::Store;
use hermes_runtime::sync::lock;
use serde::{Deserialize, Serialize};

use super::merge::{FragmentMerger, MergeConfig, Merged};
use hermes_platform_kit::event::{ChatType, MediaRef, MessageEvent, MessageType, SessionSource};

/// The prefix of every piece row.
pub const PIECE_KV_PREFIX: &str = "gateway.wecom.piece.";

/// One stored piece.
#[derive(Debug, Serialize, Deserialize)]
struct Row {
    /// The tag (row number) of the first piece of the message it joined.
    group: u64,
    message_id: String,
    text: String,
    chat_id: String,
    dm: bool,
    user_id: String,
    kind: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    media: Vec<MediaRef>,
}

/// The piece rows of one bot.
pub struct Staging {
    store: Arc<Mutex<Store>>,
    /// `gateway.wecom.piece.<bot id, JSON-quoted>.`
    prefix: String,
    /// The next row number (rows sort by number: arrival order).
    next: u64,
}

impl std::fmt::Debug for Staging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staging")
            .field("prefix", &self.prefix)
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl Staging {
    /// The rows of bot `bot_id` in `store`. Numbering continues after the
    /// rows already there.
    pub fn new(store: Arc<Mutex<Store>>, bot_id: &str) -> Self {
        let quoted = serde_json::to_string(bot_id).unwrap_or_else(|_| bot_id.to_owned());
        let prefix = format!("{PIECE_KV_PREFIX}{quoted}.");
        Self {
            store,
            prefix,
            next: 1,
        }
    }

    fn key(&self, tag: u64) -> String {
        format!("{}{tag:020}", self.prefix)
    }

    /// A fresh tag for the next piece.
    pub fn next_tag(&mut self) -> u64 {
        let tag = self.next;
        self.next += 1;
        tag
    }

    /// Writes piece `tag` of message `group`, durably. `false` (and an error
    /// logged) when the store refused: the piece is then held in memory only.
    pub fn stage(&mut self, tag: u64, group: u64, event: &MessageEvent) -> bool {
        let row = Row {
            group,
            message_id: event.message_id.clone(),
            text: event.text.clone(),
            chat_id: event.source.chat_id.clone(),
            dm: event.source.chat_type == ChatType::Dm,
            user_id: event.source.user_id.clone(),
            kind: kind_name(event.message_type).to_owned(),
            media: event.media.clone(),
        };
        let written = serde_json::to_string(&row)
            .map_err(|e| e.to_string())
            .and_then(|value| {
                lock(&self.store)
                    .kv_set(&self.key(tag), &value)
                    .map_err(|e| e.to_string())
            });
        match written {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(msgid = %event.message_id, error = %e, "wecom: cannot store a piece of text; it is held in memory only");
                false
            }
        }
    }

    /// Deletes the rows of a message handed to the runner.
    pub fn remove(&mut self, tags: &[u64]) {
        let keys: Vec<String> = tags.iter().map(|t| self.key(*t)).collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        if let Err(e) = lock(&self.store).kv_delete(&keys) {
            // Left behind, they are joined again at the next start and the
            // inbox drops the message as one it accepted before.
            tracing::warn!(error = %e, "wecom: cannot delete stored pieces of a delivered message");
        }
    }

    /// The messages left by a gateway that stopped before handing them on:
    /// each group's pieces joined again, in arrival order of their first
    /// piece. Row numbering continues after them.
    pub fn recover(&mut self, platform: &str, config: MergeConfig) -> Vec<Merged> {
        let rows = match lock(&self.store).kv_scan(&self.prefix) {
            Ok(rows) => rows,
            Err(e) => {
                tracing::error!(error = %e, "wecom: cannot read stored pieces of text");
                return Vec::new();
            }
        };
        let mut groups: BTreeMap<u64, Vec<(u64, Row)>> = BTreeMap::new();
        let mut unreadable = Vec::new();
        for (key, value) in rows {
            let Some(tag) = key
                .strip_prefix(&self.prefix)
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            self.next = self.next.max(tag + 1);
            match serde_json::from_str::<Row>(&value) {
                Ok(row) => groups.entry(row.group).or_default().push((tag, row)),
                Err(e) => {
                    tracing::error!(%key, error = %e, "wecom: a stored piece of text is unreadable; dropped");
                    unreadable.push(tag);
                }
            }
        }
        if !unreadable.is_empty() {
            self.remove(&unreadable);
        }
        let mut merged = Vec::new();
        for (_, mut pieces) in groups {
            pieces.sort_by_key(|(tag, _)| *tag);
            // The pieces of one group were joined under the same bounds
            // once: pushed together, they join the same way again.
            let mut merger = FragmentMerger::new(config);
            for (tag, row) in pieces {
                merger.push_tagged(Duration::ZERO, row.into_event(platform), tag);
            }
            merged.extend(merger.flush_tagged());
        }
        merged
    }
}

impl Row {
    fn into_event(self, platform: &str) -> MessageEvent {
        MessageEvent {
            message_id: self.message_id,
            text: self.text,
            source: SessionSource {
                platform: platform.to_owned(),
                chat_id: self.chat_id,
                chat_type: if self.dm {
                    ChatType::Dm
                } else {
                    ChatType::Group
                },
                user_id: self.user_id,
                user_name: None,
                thread_id: None,
            },
            message_type: kind_from_name(&self.kind),
            media: self.media,
        }
    }
}

fn kind_name(kind: MessageType) -> &'static str {
    match kind {
        MessageType::Text => "text",
        MessageType::Photo => "photo",
        MessageType::Voice => "voice",
        MessageType::File => "file",
        MessageType::Mixed => "mixed",
        MessageType::Choice => "choice",
    }
}

fn kind_from_name(name: &str) -> MessageType {
    match name {
        "photo" => MessageType::Photo,
        "voice" => MessageType::Voice,
        "file" => MessageType::File,
        "choice" => MessageType::Choice,
        "text" => MessageType::Text,
        _ => MessageType::Mixed,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn piece(id: &str, user: &str, text: &str) -> MessageEvent {
        MessageEvent {
            message_id: id.to_owned(),
            text: text.to_owned(),
            source: SessionSource {
                platform: "wecom".to_owned(),
                chat_id: user.to_owned(),
                chat_type: ChatType::Dm,
                user_id: user.to_owned(),
                user_name: None,
                thread_id: None,
            },
            message_type: MessageType::Text,
            media: Vec::new(),
        }
    }

    /// Pieces staged by one process and never handed on are joined again,
    /// group by group, by the next — over a real SQLite file.
    #[test]
    fn pieces_left_by_a_killed_process_are_joined_again_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let config = MergeConfig::default();
        {
            let store = Arc::new(Mutex::new(Store::open(&path).unwrap()));
            let mut staging = Staging::new(store, "bot-1");
            let mut merger = FragmentMerger::new(config);
            for (at, (id, user, text)) in [
                ("m1", "zhang", "first half "),
                ("m2", "li", "hello"),
                ("m3", "zhang", "second half"),
            ]
            .into_iter()
            .enumerate()
            {
                let tag = staging.next_tag();
                let event = piece(id, user, text);
                let now = Duration::from_millis(at as u64 * 100);
                let group = merger.push_tagged(now, event.clone(), tag);
                assert!(staging.stage(tag, group, &event));
            }
            // The process dies here: nothing was handed on.
        }
        let store = Arc::new(Mutex::new(Store::open(&path).unwrap()));
        let mut staging = Staging::new(Arc::clone(&store), "bot-1");
        let merged = staging.recover("wecom", config);
        let got: Vec<(&str, &str, &[u64])> = merged
            .iter()
            .map(|m| {
                (
                    m.event.message_id.as_str(),
                    m.event.text.as_str(),
                    m.tags.as_slice(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("m3", "first half \nsecond half", &[1, 3][..]),
                ("m2", "hello", &[2][..])
            ]
        );
        // Numbering continues after the rows left; once delivered, gone.
        assert_eq!(staging.next_tag(), 4);
        for m in &merged {
            staging.remove(&m.tags);
        }
        assert!(staging.recover("wecom", config).is_empty());
        // Another bot's rows are not this bot's.
        let mut other = Staging::new(store, "bot-2");
        assert!(other.recover("wecom", config).is_empty());
    }
}
