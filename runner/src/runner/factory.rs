//! What the runner asks of the front-end that builds agents
//! ([`AgentFactory`]): the real one is `app::RuntimeAgentFactory`, tests
//! use `testing::TestAgentFactory`.

use std::sync::{Arc, Mutex};

use hermes_core::Agent;
use hermes_runtime::pricing::PriceList;
use hermes_runtime::store::Store;

use crate::approval::ApprovalHub;
use crate::event::SessionSource;
use crate::media::MediaServices;

/// Why an agent could not be built for a session. Reported to the user and
/// logged; the user's message is already stored.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct FactoryError(pub String);

/// Builds agents for sessions. The real one (`hermes gateway run`) uses the
/// provider client, the built-in tools and the assembled system prompt;
/// tests use a scripted model.
pub trait AgentFactory: Send + Sync {
    /// The model a new session starts with.
    fn default_model(&self) -> String;

    /// The config signature of an agent on `model` (SPEC G4): everything that
    /// makes two agents differ — model, provider, base URL, a hash of the API
    /// key, toolsets. Never the key itself.
    fn signature(&self, model: &str) -> String;

    /// Assembles the system prompt of a new session (once per session; it is
    /// stored and reused byte-for-byte afterwards, SPEC L6).
    fn system_prompt(&self, source: &SessionSource) -> Result<String, FactoryError>;

    /// Builds an agent for the stored session `session_id`. It must hold no
    /// transcript; per-session tool state (the todo list) is keyed by the
    /// session id outside the agent, so dropping the agent loses nothing.
    fn build(
        &self,
        session_id: &str,
        model: &str,
        system_prompt: &str,
    ) -> Result<Agent, FactoryError>;

    /// [`AgentFactory::build`] with a chat's own settings (`/reasoning`).
    /// The default ignores them.
    fn build_with(
        &self,
        session_id: &str,
        model: &str,
        system_prompt: &str,
        _options: &BuildOptions,
    ) -> Result<Agent, FactoryError> {
        self.build(session_id, model, system_prompt)
    }

    /// The personalities `/personality` offers (the built-in ones unless
    /// overridden).
    fn personalities(&self) -> crate::personality::Personalities {
        crate::personality::Personalities::built_in()
    }

    /// Where the context window of `model` came from, for `/status`
    /// (`provider metadata (GET …/props n_ctx)`); `None` when unknown.
    fn window_detail(&self, _model: &str) -> Option<String> {
        None
    }

    /// What turns photos, voice notes and files into the user message
    /// (SPEC X6); `None`: media are not downloaded, the model reads a note
    /// that they were not processed.
    fn media(&self) -> Option<Arc<MediaServices>> {
        None
    }

    /// Where the agents' terminals ask for approval of dangerous commands
    /// (SPEC X7): the runner sends the questions to the session's chat and
    /// routes `/approve` and `/deny` to it. `None` (the default): nobody is
    /// asked; the tools decide alone (they deny such commands unless
    /// approvals are off).
    fn approvals(&self) -> Option<Arc<ApprovalHub>> {
        None
    }

    /// Where the agents' `clarify` questions go (issue 46): the runner
    /// binds each turn's session to its chat, sends the question through
    /// the adapter and offers the chat's messages as answers. `None` (the
    /// default): the tool is not offered.
    fn clarify(&self) -> Option<Arc<crate::clarify::ClarifyHub>> {
        None
    }

    /// What speaks answers aloud (`[tts]`, see [`crate::voice`]); `None`
    /// (the default): answers are never spoken.
    fn speech(&self) -> Option<Arc<hermes_runtime::media::tts::Speaker>> {
        None
    }

    /// Where the agents' `send_file` tools send: the runner binds each
    /// turn's session to its chat and uploads through the adapter. `None`
    /// (the default): the tool is not offered.
    fn files(&self) -> Option<Arc<crate::outbox::FileHub>> {
        None
    }

    /// `/memory` (`forget: false`) or `/forget` for the sender of
    /// `source` (issue 44): the answer to send. Only that user's memory is
    /// read or erased.
    fn memory_command(&self, source: &crate::event::SessionSource, forget: bool) -> String {
        let _ = (source, forget);
        "This bot keeps no memory.".to_owned()
    }

    /// The skills its agents are offered, for `/skills` (SPEC Y8; none
    /// unless overridden). Reads a few small files.
    fn skills(&self) -> Vec<hermes_runtime::skills::SkillSummary> {
        Vec::new()
    }

    /// The prices of the models its agents use, for `/usage` (none unless
    /// overridden). May fetch a price list; never called with the store
    /// locked.
    fn prices(&self, _store: &Mutex<Store>, _now_ms: u64) -> PriceList {
        PriceList::default()
    }
}

/// A chat's own settings for the agents built for it (SPEC Y5).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BuildOptions {
    /// `/reasoning EFFORT`: the reasoning effort asked of the provider
    /// instead of the configured one.
    pub reasoning_effort: Option<String>,
}
