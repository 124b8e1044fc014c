//! The agent a turn runs (SPEC G4): the cached one of its session key and
//! signature, or a new one — with the chat's settings (`/reasoning`,
//! `/personality`, [`super::chat_prefs`]).

use std::sync::Arc;

use hermes_core::Agent;
use hermes_runtime::store::SessionRecord;

use super::{FactoryError, Inner, lock};
use crate::event::SessionSource;

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
            .unwrap_or_else(|| self.factory.default_model());
        let prefs = self.chat_prefs(key);
        let signature = format!("{}{}", self.factory.signature(&model), prefs.signature());
        let now = self.now();
        if let Some(agent) = lock(&self.state)
            .cache
            .get(key, &session.id, &signature, now)
        {
            return Ok(agent);
        }
        let prompt = match &session.system_prompt {
            Some(p) => p.clone(),
            None => {
                let p = self.factory.system_prompt(source)?;
                self.store()
                    .set_system_prompt(&session.id, &p)
                    .map_err(|e| FactoryError(format!("could not store the system prompt: {e}")))?;
                p
            }
        };
        let prompt = prefs.prompt(&prompt, &self.factory.personalities());
        let agent = Arc::new(self.factory.build_with(
            &session.id,
            &model,
            &prompt,
            &prefs.build_options(),
        )?);
        lock(&self.state)
            .cache
            .insert(key, &session.id, &signature, Arc::clone(&agent), now);
        Ok(agent)
    }
}
