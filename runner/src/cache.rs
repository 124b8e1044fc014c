//! The agent cache (SPEC G4).
//!
//! Building an agent means assembling its system prompt and tool registry;
//! reusing it keeps the system prompt byte-for-byte stable, which provider
//! prompt caching depends on. An entry is valid for one session id and one
//! config signature (model, provider, base URL, API-key hash, toolsets):
//! a different session (after `/new` or an expiry) or signature (after
//! `/model`) means a new agent.
//!
//! Agents hold no transcript (history comes from the store on every run), so
//! an entry can be dropped at any moment and memory does not grow with the
//! length of conversations. The cache is bounded by count (least recently
//! used goes first) and by idle time.

use std::collections::HashMap;
use std::sync::Arc;

use hermes_core::Agent;

/// Counters, for `/status`, tests and the bench.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that reused an agent.
    pub hits: u64,
    /// Lookups that found nothing usable.
    pub misses: u64,
    /// Entries dropped because the cache was full.
    pub evicted_lru: u64,
    /// Entries dropped because they were idle too long.
    pub evicted_idle: u64,
    /// Entries dropped by `/new`, `/model` or a changed signature.
    pub invalidated: u64,
}

#[derive(Debug)]
struct Entry {
    signature: String,
    session_id: String,
    agent: Arc<Agent>,
    last_used_ms: u64,
}

/// Agents by session key.
#[derive(Debug)]
pub struct AgentCache {
    capacity: usize,
    idle_ms: u64,
    entries: HashMap<String, Entry>,
    stats: CacheStats,
}

impl AgentCache {
    /// A cache of at most `capacity` agents, each dropped after `idle_ms` unused.
    pub fn new(capacity: usize, idle_ms: u64) -> Self {
        AgentCache {
            capacity: capacity.max(1),
            idle_ms,
            entries: HashMap::new(),
            stats: CacheStats::default(),
        }
    }

    /// The agent for `key`, if one was built for this session and signature.
    /// A stale entry (other session or signature) is dropped.
    pub fn get(
        &mut self,
        key: &str,
        session_id: &str,
        signature: &str,
        now_ms: u64,
    ) -> Option<Arc<Agent>> {
        self.expire_idle(now_ms);
        match self.entries.get_mut(key) {
            Some(e) if e.session_id == session_id && e.signature == signature => {
                e.last_used_ms = now_ms;
                self.stats.hits += 1;
                Some(Arc::clone(&e.agent))
            }
            Some(_) => {
                self.entries.remove(key);
                self.stats.invalidated += 1;
                self.stats.misses += 1;
                None
            }
            None => {
                self.stats.misses += 1;
                None
            }
        }
    }

    /// Caches `agent` for `key`, evicting the least recently used entry if full.
    pub fn insert(
        &mut self,
        key: &str,
        session_id: &str,
        signature: &str,
        agent: Arc<Agent>,
        now_ms: u64,
    ) {
        self.expire_idle(now_ms);
        if !self.entries.contains_key(key) && self.entries.len() >= self.capacity {
            // O(n) scan: the cache is small (tens to hundreds) and a miss
            // already costs an agent build, which dwarfs it.
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.last_used_ms)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.entries.remove(&k);
                self.stats.evicted_lru += 1;
            }
        }
        self.entries.insert(
            key.to_owned(),
            Entry {
                signature: signature.to_owned(),
                session_id: session_id.to_owned(),
                agent,
                last_used_ms: now_ms,
            },
        );
    }

    /// Drops the entry for `key` (`/new`, `/model`).
    pub fn invalidate(&mut self, key: &str) {
        if self.entries.remove(key).is_some() {
            self.stats.invalidated += 1;
        }
    }

    /// Whether an agent is cached for `key`.
    pub fn contains(&self, key: &str) -> bool {
        self.entries.contains_key(key)
    }

    /// Cached agents.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The counters so far.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    fn expire_idle(&mut self, now_ms: u64) {
        let idle_ms = self.idle_ms;
        let before = self.entries.len();
        self.entries
            .retain(|_, e| now_ms.saturating_sub(e.last_used_ms) < idle_ms);
        self.stats.evicted_idle += (before - self.entries.len()) as u64;
    }
}
