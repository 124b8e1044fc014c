//! Reasoning blocks that providers want back: OpenRouter's
//! `reasoning_details`, the common form the ledger keeps them in.
//!
//! A detail is a JSON object with a `type` (`reasoning.text`,
//! `reasoning.summary`, `reasoning.encrypted`) and, by type, `text` (with an
//! optional `signature`), `summary` or `data`, plus `id`, `format` and
//! `index`. Streams send them in pieces: each delta's elements carry the
//! `index` of the block they extend. [`Details`] joins them — the text
//! fields are appended, every other field keeps its last non-null value — and
//! [`Details::to_json`] gives the array the ledger stores
//! ([`EntryMeta::reasoning_details`](crate::EntryMeta::reasoning_details)).

use alloc::string::String;
use alloc::vec::Vec;

use serde_json::{Map, Value};

/// Fields whose string pieces are concatenated across deltas.
const APPENDED: [&str; 3] = ["text", "summary", "data"];

/// At most this many blocks are kept (no provider sends more than a few).
const MAX_BLOCKS: usize = 64;

/// Reasoning details being assembled from stream deltas.
#[derive(Clone, Debug, Default)]
pub(crate) struct Details {
    blocks: Vec<Map<String, Value>>,
}

impl Details {
    /// Merges one delta's `reasoning_details` value (an array of objects;
    /// anything else is ignored).
    pub(crate) fn merge(&mut self, delta: Value) {
        let Value::Array(items) = delta else {
            return;
        };
        for item in items {
            let Value::Object(piece) = item else {
                continue;
            };
            let index = piece.get("index").and_then(Value::as_u64);
            let at = index.and_then(|i| {
                self.blocks
                    .iter()
                    .position(|b| b.get("index").and_then(Value::as_u64) == Some(i))
            });
            if let Some(block) = at.and_then(|at| self.blocks.get_mut(at)) {
                merge_into(block, piece);
            } else if self.blocks.len() < MAX_BLOCKS {
                self.blocks.push(piece);
            }
        }
    }

    /// Adds one complete block.
    pub(crate) fn push(&mut self, block: Map<String, Value>) {
        if self.blocks.len() < MAX_BLOCKS {
            self.blocks.push(block);
        }
    }

    /// The JSON array to store, `None` when there is nothing.
    pub(crate) fn to_json(&self) -> Option<String> {
        if self.blocks.is_empty() {
            return None;
        }
        let array: Vec<&Map<String, Value>> = self.blocks.iter().collect();
        serde_json::to_string(&array).ok()
    }
}

fn merge_into(block: &mut Map<String, Value>, piece: Map<String, Value>) {
    for (key, value) in piece {
        if value.is_null() {
            continue;
        }
        match (APPENDED.contains(&key.as_str()), block.get_mut(&key), value) {
            (true, Some(Value::String(have)), Value::String(more)) => have.push_str(&more),
            (_, _, value) => {
                block.insert(key, value);
            }
        }
    }
}

/// Keeps a non-streaming body's `reasoning_details` when it is a non-empty
/// array (its JSON text, verbatim).
pub(crate) fn keep_array(raw: Option<&serde_json::value::RawValue>) -> Option<String> {
    let raw = raw?.get().trim();
    let inner = raw.strip_prefix('[')?.strip_suffix(']')?;
    (!inner.trim().is_empty()).then(|| String::from(raw))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn stream_pieces_join_by_index() {
        let mut d = Details::default();
        d.merge(json!([{"type": "reasoning.text", "text": "Let me ", "index": 0, "format": "anthropic-claude-v1", "signature": null}]));
        d.merge(json!([{"type": "reasoning.text", "text": "think.", "index": 0}]));
        d.merge(json!([{"type": "reasoning.text", "signature": "sig-1", "index": 0}]));
        d.merge(json!([{"type": "reasoning.encrypted", "data": "eyJ", "index": 1}]));
        d.merge(json!("not an array"));
        let stored: Value = serde_json::from_str(&d.to_json().unwrap()).unwrap();
        assert_eq!(
            stored,
            json!([
                {"type": "reasoning.text", "text": "Let me think.", "index": 0,
                 "format": "anthropic-claude-v1", "signature": "sig-1"},
                {"type": "reasoning.encrypted", "data": "eyJ", "index": 1}
            ])
        );
    }

    #[test]
    fn empty_arrays_are_not_kept() {
        assert_eq!(Details::default().to_json(), None);
        let raw: &serde_json::value::RawValue = serde_json::from_str(" [ ] ").unwrap();
        assert_eq!(keep_array(Some(raw)), None);
        let raw: &serde_json::value::RawValue =
            serde_json::from_str(r#"[{"type":"reasoning.text","text":"x"}]"#).unwrap();
        assert_eq!(
            keep_array(Some(raw)).as_deref(),
            Some(r#"[{"type":"reasoning.text","text":"x"}]"#)
        );
    }
}
