//! Duplicate-delivery filter (SPEC G7).
//!
//! Platforms redeliver (webhook retries, a long poll replayed after a
//! reconnect). A `message_id` seen within the window on the same platform is
//! dropped. Memory is bounded twice: entries older than the window are
//! forgotten, and at most `capacity` ids are remembered per platform (the
//! oldest go first), so a flood cannot grow the table without limit.

use std::collections::{HashMap, HashSet, VecDeque};

/// Remembers recent `(platform, message_id)` pairs.
#[derive(Debug)]
pub struct Dedup {
    window_ms: u64,
    capacity: usize,
    platforms: HashMap<String, Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    ids: HashSet<String>,
    /// Arrival order, for expiry and the capacity bound.
    order: VecDeque<(u64, String)>,
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

    /// Records the id and says whether it is new. An empty id cannot be
    /// deduplicated and always counts as new.
    pub fn first_sighting(&mut self, platform: &str, message_id: &str, now_ms: u64) -> bool {
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
        if seen.ids.contains(message_id) {
            return false;
        }
        seen.ids.insert(message_id.to_owned());
        seen.order.push_back((now_ms, message_id.to_owned()));
        true
    }

    /// Ids remembered for `platform` (for tests and `/status`-like views).
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
        assert!(d.first_sighting("tg", "1", 0));
        assert!(!d.first_sighting("tg", "1", 10));
        assert!(d.first_sighting("wecom", "1", 10));
        // After the window the id is forgotten.
        assert!(d.first_sighting("tg", "1", 2000));
        assert!(d.first_sighting("tg", "", 0));
        assert!(d.first_sighting("tg", "", 0));
    }

    #[test]
    fn memory_is_bounded() {
        let mut d = Dedup::new(u64::MAX, 3);
        for i in 0..100 {
            assert!(d.first_sighting("tg", &i.to_string(), 0));
        }
        assert_eq!(d.len("tg"), 3);
        assert!(!d.first_sighting("tg", "99", 0));
    }
}
