//! Duplicate-delivery filter (SPEC G7).
//!
//! Platforms redeliver (webhook retries, a long poll replayed after a
//! reconnect). A message seen within the window is dropped. A message is
//! identified by `(platform, chat_id, message_id)`: on Telegram a
//! `message_id` is only unique *within one chat* (every DM counts from 1), so
//! keying on the id alone would drop user B's message #42 because user A's
//! #42 was seen. Memory is bounded twice: entries older than the window are
//! forgotten, and at most `capacity` ids are remembered per platform (the
//! oldest go first), so a flood cannot grow the table without limit.

use std::collections::{HashMap, HashSet, VecDeque};

/// A message's identity inside one platform: `(chat_id, message_id)`.
type MessageKey = (String, String);

/// Remembers recent `(platform, chat_id, message_id)` triples.
#[derive(Debug)]
pub struct Dedup {
    window_ms: u64,
    capacity: usize,
    platforms: HashMap<String, Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    ids: HashSet<MessageKey>,
    /// Arrival order, for expiry and the capacity bound.
    order: VecDeque<(u64, MessageKey)>,
}

impl Dedup {
    /// A filter remembering ids for `window_ms`, at most `capacity` per platform.
    pub fn new(window_ms: u64, capacity: usize) -> Self {
        Dedup {
            window_ms,
            capacity: capacity.max(1),
            platforms: HashMap::new(),
        }
    }

    /// Records the message and says whether it is new. An empty id cannot be
    /// deduplicated and always counts as new.
    pub fn first_sighting(
        &mut self,
        platform: &str,
        chat_id: &str,
        message_id: &str,
        now_ms: u64,
    ) -> bool {
        if message_id.is_empty() {
            return true;
        }
        let seen = match self.platforms.get_mut(platform) {
            Some(s) => s,
            None => self.platforms.entry(platform.to_owned()).or_default(),
        };
        while let Some((t, _)) = seen.order.front() {
            let expired = now_ms.saturating_sub(*t) >= self.window_ms;
            if !expired && seen.order.len() < self.capacity {
                break;
            }
            if let Some((_, id)) = seen.order.pop_front() {
                seen.ids.remove(&id);
            }
        }
        let key = (chat_id.to_owned(), message_id.to_owned());
        if seen.ids.contains(&key) {
            return false;
        }
        seen.ids.insert(key.clone());
        seen.order.push_back((now_ms, key));
        true
    }

    /// Messages remembered for `platform` (for tests and `/status`-like views).
    pub fn len(&self, platform: &str) -> usize {
        self.platforms.get(platform).map_or(0, |s| s.ids.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_are_dropped_per_platform_within_the_window() {
        let mut d = Dedup::new(1000, 10);
        assert!(d.first_sighting("tg", "c", "1", 0));
        assert!(!d.first_sighting("tg", "c", "1", 10));
        assert!(d.first_sighting("wecom", "c", "1", 10));
        // After the window the id is forgotten.
        assert!(d.first_sighting("tg", "c", "1", 2000));
        assert!(d.first_sighting("tg", "c", "", 0));
        assert!(d.first_sighting("tg", "c", "", 0));
    }

    #[test]
    fn dedup_same_message_id_in_two_chats_is_not_a_duplicate() {
        let mut d = Dedup::new(1000, 10);
        assert!(d.first_sighting("tg", "chat-a", "42", 0));
        assert!(d.first_sighting("tg", "chat-b", "42", 1));
        assert!(!d.first_sighting("tg", "chat-a", "42", 2));
        assert!(!d.first_sighting("tg", "chat-b", "42", 3));
    }

    #[test]
    fn memory_is_bounded() {
        let mut d = Dedup::new(u64::MAX, 3);
        for i in 0..100 {
            assert!(d.first_sighting("tg", "c", &i.to_string(), 0));
        }
        assert_eq!(d.len("tg"), 3);
        assert!(!d.first_sighting("tg", "c", "99", 0));
    }
}
