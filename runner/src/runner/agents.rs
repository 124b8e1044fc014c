//! The agent a turn runs (SPEC G4): the cached one of its session key and
//! signature, or a new one — with the chat's settings (`/reasoning`,
//! `/personality`, [`super::chat_prefs`]).

use std::sync::{Arc, Mutex};

use hermes_core::Agent;
use hermes_runtime::spending::CallSizes;
use hermes_runtime::store::SessionRecord;

use super::{AgentFactory, FactoryError, Inner, duration_ms, lock};
use crate::approval::ApprovalHub;
use crate::cache::{AgentCache, CacheStats};
use crate::config::GatewayConfig;
use crate::event::SessionSource;

/// What builds and holds the agents turns run: the factory, its approval
/// questions, the cache of agents by session key and signature (behind its
/// own short lock, never held while another is taken), and the largest
/// model call seen per identity (what a spending reservation holds, issue
/// 44).
pub(super) struct Agents {
    pub(super) factory: Arc<dyn AgentFactory>,
    /// The factory's approval questions, if it asks any.
    pub(super) approvals: Option<Arc<ApprovalHub>>,
    cache: Mutex<AgentCache>,
    pub(super) call_sizes: Arc<CallSizes>,
}

impl Agents {
    pub(super) fn new(factory: Arc<dyn AgentFactory>, config: &GatewayConfig) -> Self {
        Agents {
            approvals: factory.approvals(),
            factory,
            cache: Mutex::new(AgentCache::new(
                config.agent_cache_size,
                duration_ms(config.agent_cache_idle),
            )),
            call_sizes: Arc::default(),
        }
    }

    /// Drops the cached agent of `key`: the next turn builds a fresh one.
    pub(super) fn invalidate(&self, key: &str) {
        lock(&self.cache).invalidate(key);
    }

    /// Whether an agent is cached for `key`.
    pub(super) fn is_cached(&self, key: &str) -> bool {
        lock(&self.cache).contains(key)
    }

    /// The cache's counters.
    pub(super) fn cache_stats(&self) -> CacheStats {
        lock(&self.cache).stats()
    }

    /// Agents in the cache.
    pub(super) fn cached(&self) -> usize {
        lock(&self.cache).len()
    }
}

impl Inner {
    /// The cached agent of this session and signature, or a new one (with the
    /// session's stored system prompt, assembling and storing it once).
    pub(super) fn agent_for(
        &self,
        key: &str,
        session: &SessionRecord,
        source: &SessionSource,
    ) -> Result<Arc<Agent>, FactoryError> {
        let model = session
            .model
            .clone()
            .unwrap_or_else(|| self.agents.factory.default_model());
        let prefs = self.chat_prefs(key);
        let signature = format!(
            "{}{}",
            self.agents.factory.signature(&model),
            prefs.signature()
        );
        let now = self.now();
        if let Some(agent) = lock(&self.agents.cache).get(key, &session.id, &signature, now) {
            return Ok(agent);
        }
        let prompt = match &session.system_prompt {
            Some(p) => p.clone(),
            None => {
                let p = self.agents.factory.system_prompt(source)?;
                self.store()
                    .set_system_prompt(&session.id, &p)
                    .map_err(|e| FactoryError(format!("could not store the system prompt: {e}")))?;
                p
            }
        };
        let prompt = prefs.prompt(&prompt, &self.agents.factory.personalities());
        let agent = Arc::new(self.agents.factory.build_with(
            &session.id,
            &model,
            &prompt,
            &prefs.build_options(),
        )?);
        lock(&self.agents.cache).insert(key, &session.id, &signature, Arc::clone(&agent), now);
        Ok(agent)
    }
}
