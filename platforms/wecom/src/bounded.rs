//! A map that forgets its oldest entries: dedup keys and reply targets must
//! not grow without bound on a bot that runs for months.

use std::collections::{HashMap, VecDeque};

/// Insertion-ordered map with a capacity; inserting past it evicts the
/// oldest key.
#[derive(Debug)]
pub(crate) struct BoundedMap<V> {
    cap: usize,
    map: HashMap<String, V>,
    order: VecDeque<String>,
}

impl<V> BoundedMap<V> {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            map: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Inserts `key`; returns `false` (and keeps the old value) if it was
    /// already present.
    pub(crate) fn insert_new(&mut self, key: &str, value: V) -> bool {
        if self.map.contains_key(key) {
            return false;
        }
        self.map.insert(key.to_owned(), value);
        self.order.push_back(key.to_owned());
        while self.order.len() > self.cap {
            if let Some(old) = self.order.pop_front() {
                self.map.remove(&old);
            }
        }
        true
    }

    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.map.get_mut(key)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_oldest_and_rejects_repeats() {
        let mut m = BoundedMap::new(2);
        assert!(m.insert_new("a", 1));
        assert!(!m.insert_new("a", 9));
        assert!(m.insert_new("b", 2));
        assert!(m.insert_new("c", 3));
        assert_eq!(m.len(), 2);
        assert!(m.get_mut("a").is_none());
        assert_eq!(m.get_mut("b").copied(), Some(2));
    }
}
