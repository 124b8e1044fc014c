//! The production [`AgentFactory`]: how the gateway builds the agent of a
//! turn — the provider's client and fallbacks, the built-in tools with each
//! session's state, the MCP servers, media and the assembled system prompt.

use std::fmt;
use std::sync::{Arc, Mutex};

use hermes_core::{Agent, ContextConfig, Model};
use hermes_runtime::assemble;
use hermes_runtime::bridge::AsyncBridge;
use hermes_runtime::client::OpenAiClient;
use hermes_runtime::config::Settings;
use hermes_runtime::context::{self, Windows};
use hermes_runtime::fallback::FallbackModel;
#[cfg(feature = "mcp")]
use hermes_runtime::mcp::McpManager;
use hermes_runtime::memory_scope::MemorySettings;
use hermes_runtime::pricing::PriceList;
use hermes_runtime::store::Store;
use hermes_runtime::sync::lock;
use hermes_runtime::tools::{ApprovalMode, SessionApprovals, TodoState};

use crate::approval::ApprovalHub;
use crate::error::GatewayError;
use crate::event::SessionSource;
use crate::media::MediaServices;
use crate::runner::{AgentFactory, BuildOptions, FactoryError};

/// The production [`AgentFactory`]: the OpenAI-compatible client, the
/// built-in tools and the assembled system prompt.
pub struct RuntimeAgentFactory {
    settings: Settings,
    bridge: Option<Arc<AsyncBridge>>,
    key_hash: u64,
    /// Per-session tool state — the todo list and the "always" approvals —
    /// most recently used last.
    todo_lists: Mutex<Vec<(String, SessionToolState)>>,
    /// The process's MCP servers: one set for every chat (their state is
    /// shared; see `hermes_runtime::mcp`).
    #[cfg(feature = "mcp")]
    mcp: Option<Arc<McpManager>>,
    /// Approval questions for dangerous commands (`None` with approvals off).
    approvals: Option<Arc<ApprovalHub>>,
    /// The tool definitions every session's prompt lists: the toolsets are
    /// fixed for the process, so they are read once, not rebuilt (with a
    /// client and a registry) for each new session.
    tool_specs: Vec<hermes_core::ToolSpec>,
    /// The context window of each model, resolved once (SPEC X1).
    windows: Windows,
    /// Photos, voice and files (SPEC X6).
    media: Arc<MediaServices>,
    /// The `cronjob` tool for chat sessions (SPEC Y1), once the store is open.
    cron: std::sync::OnceLock<crate::cron::CronOffer>,
    /// The store `session_search` searches (SPEC Y6), once it is open.
    session_store: std::sync::OnceLock<Arc<Mutex<Store>>>,
    /// Background processes of chat sessions (issue 43 §4).
    background: std::sync::OnceLock<Arc<hermes_runtime::tools::BackgroundProcesses>>,
    /// Spoken replies (`[tts]`), when configured.
    speech: Option<Arc<hermes_runtime::media::tts::Speaker>>,
    /// Where `send_file` sends: each turn's chat.
    files: Arc<crate::outbox::FileHub>,
    /// Whose memory is whose (`[memory]`, issue 44).
    memory: MemorySettings,
    /// Where `clarify` asks: each turn's chat.
    clarify: Arc<crate::clarify::ClarifyHub>,
}

impl fmt::Debug for RuntimeAgentFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuntimeAgentFactory")
            .field("provider", &self.settings.provider)
            .finish_non_exhaustive()
    }
}

/// What one session's tools keep between agent builds.
#[derive(Clone, Debug, Default)]
struct SessionToolState {
    todo: Arc<TodoState>,
    approvals: Arc<SessionApprovals>,
}

/// FNV-1a: a stable, dependency-free hash, so the signature carries a
/// fingerprint of the API key and never the key itself (SPEC E2).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// How many sessions' todo lists the factory keeps; the oldest is dropped
/// beyond that (an idle session's list is the cheapest state to lose).
const TODO_LISTS_KEPT: usize = 1024;

impl RuntimeAgentFactory {
    /// A factory for `settings`; `bridge` enables the async tools (`web`,
    /// and the MCP servers, which are started here).
    /// Validates the provider URL and the toolsets now, so a bad setting is
    /// a start-up error rather than a failure on the first message.
    pub fn new(
        settings: &Settings,
        bridge: Option<Arc<AsyncBridge>>,
    ) -> Result<Self, GatewayError> {
        assemble::warn_if_mcp_left_out(settings);
        let mut factory = RuntimeAgentFactory {
            key_hash: fnv1a(
                settings
                    .provider
                    .api_key
                    .as_ref()
                    .map_or("", hermes_runtime::secret::Secret::expose)
                    .as_bytes(),
            ),
            settings: settings.clone(),
            #[cfg(feature = "mcp")]
            mcp: bridge
                .as_ref()
                .and_then(|b| assemble::mcp_servers(settings, b)),
            bridge,
            todo_lists: Mutex::default(),
            approvals: (settings.approvals == ApprovalMode::Ask)
                .then(|| ApprovalHub::new(settings.approval_timeout)),
            tool_specs: Vec::new(),
            windows: Windows::new(),
            media: Arc::new(
                MediaServices::from_settings(settings).map_err(GatewayError::Provider)?,
            ),
            cron: std::sync::OnceLock::new(),
            session_store: std::sync::OnceLock::new(),
            background: std::sync::OnceLock::new(),
            speech: settings
                .media
                .tts
                .clone()
                .map(|tts| Arc::new(hermes_runtime::media::tts::Speaker::new(tts))),
            files: crate::outbox::FileHub::new(),
            clarify: crate::clarify::ClarifyHub::new(settings.clarify_timeout),
            memory: MemorySettings::from_config(
                &settings.file,
                settings.var("HERMES_MEMORY_OWNER"),
            )
            .map_err(|e| GatewayError::Provider(e.to_string()))?,
        };
        let client = factory.client(&settings.provider.model)?;
        let tools = factory.registry(client, None, None)?;
        factory.tool_specs = tools.specs().to_vec();
        Ok(factory)
    }

    /// Keeps the resolved context windows in `store` (SPEC X1): a window
    /// resolved by an earlier run within a day is read from it instead of
    /// probing the provider again, as the CLI does.
    pub fn with_window_cache(mut self, store: Arc<Mutex<Store>>) -> Self {
        self.windows = Windows::with_store(store);
        self
    }

    /// Offers the `cronjob` tool to every chat session from now on (never
    /// to a cron run's session).
    pub fn offer_cron(&self, offer: crate::cron::CronOffer) {
        let _ = self.cron.set(offer);
    }

    /// Lets `terminal` start background processes, and offers `process`,
    /// to every session from now on.
    pub fn offer_background(&self, procs: Arc<hermes_runtime::tools::BackgroundProcesses>) {
        let _ = self.background.set(procs);
    }

    /// Offers `session_search` over `store` to every session from now on
    /// (each searches its own user's sessions, SPEC Y6).
    pub fn offer_session_search(&self, store: Arc<Mutex<Store>>) {
        let _ = self.session_store.set(store);
    }

    /// The model chain of one agent: the primary on `model`, then the
    /// fallbacks (SPEC X2). One per agent, since it remembers which link
    /// the running turn is on.
    fn client(&self, model: &str) -> Result<Arc<FallbackModel>, GatewayError> {
        assemble::provider_model(&self.settings, model)
            .map_err(|e| GatewayError::Provider(e.to_string()))
    }

    /// The primary's own client: where the context window is learned from.
    fn primary_client(&self, model: &str) -> Result<OpenAiClient, GatewayError> {
        assemble::provider_client(&self.settings, model)
            .map_err(|e| GatewayError::Provider(e.to_string()))
    }

    /// The tools of session `session_id` (`None`: the prompt's list only,
    /// with nobody to ask for approvals).
    fn registry(
        &self,
        model: Arc<dyn Model>,
        session_id: Option<&str>,
        context: Option<ContextConfig>,
    ) -> Result<hermes_core::ToolRegistry, GatewayError> {
        let state = session_id.map(|id| self.session_state(id));
        let deps = assemble::ToolDeps {
            bridge: self.bridge.clone(),
            todo: state.as_ref().map(|s| Arc::clone(&s.todo)),
            #[cfg(feature = "mcp")]
            mcp: self.mcp.clone(),
            approver: session_id
                .zip(self.approvals.as_ref())
                .map(|(id, hub)| hub.approver(id)),
            approvals: state.map(|s| s.approvals),
            context,
            session_id: session_id.map(str::to_owned),
            store: self.session_store.get().cloned(),
            outbox: session_id.and_then(|id| self.chat_outbox(id)),
            clarifier: session_id
                .filter(|id| self.is_chat_session(id))
                .map(|id| self.clarify.clarifier(id)),
            memory: Some(self.memory.clone()),
            background: session_id.and(self.background.get().cloned()),
        };
        assemble::session_tools(&self.settings, model, &deps)
            .map_err(|e| GatewayError::Provider(e.to_string()))
    }

    /// Where `send_file` of `session_id` sends: its chat. A session with
    /// no chat — the API server's, a scheduled job's run — is not offered
    /// the tool.
    fn chat_outbox(&self, session_id: &str) -> Option<Arc<dyn hermes_runtime::tools::FileOutbox>> {
        self.is_chat_session(session_id)
            .then(|| self.files.outbox(session_id))
    }

    /// Whether `session_id` talks with someone in a chat: not the API
    /// server's, not a scheduled job's or a webhook's run.
    fn is_chat_session(&self, session_id: &str) -> bool {
        if let Some(store) = self.session_store.get() {
            let record = store
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .session(session_id);
            if let Ok(Some(s)) = record
                && (s.platform.as_deref() == Some("api_server")
                    || hermes_runtime::cron::is_cron_session(s.session_key.as_deref()))
            {
                return false;
            }
        }
        true
    }

    /// The todo list of `session_id`.
    #[cfg(test)]
    fn todo_for(&self, session_id: &str) -> Arc<TodoState> {
        self.session_state(session_id).todo
    }

    /// The tool state of `session_id` — its todo list and its "always"
    /// approvals — kept here rather than in the cached agent so an evicted
    /// or rebuilt agent loses nothing (SPEC G4). A new session (`/new`,
    /// expiry) has a new id and so fresh state.
    fn session_state(&self, session_id: &str) -> SessionToolState {
        let mut lists = lock(&self.todo_lists);
        if let Some(pos) = lists.iter().position(|(id, _)| id == session_id) {
            let entry = lists.remove(pos);
            let state = entry.1.clone();
            lists.push(entry);
            return state;
        }
        if lists.len() >= TODO_LISTS_KEPT {
            lists.remove(0);
        }
        let state = SessionToolState::default();
        lists.push((session_id.to_owned(), state.clone()));
        state
    }
}

impl AgentFactory for RuntimeAgentFactory {
    fn approvals(&self) -> Option<Arc<ApprovalHub>> {
        self.approvals.clone()
    }

    fn clarify(&self) -> Option<Arc<crate::clarify::ClarifyHub>> {
        Some(Arc::clone(&self.clarify))
    }

    fn speech(&self) -> Option<Arc<hermes_runtime::media::tts::Speaker>> {
        self.speech.clone()
    }

    fn files(&self) -> Option<Arc<crate::outbox::FileHub>> {
        Some(Arc::clone(&self.files))
    }

    fn prices(&self, store: &Mutex<Store>, now_ms: u64) -> PriceList {
        hermes_runtime::pricing::price_book(&self.settings, store, now_ms)
    }

    fn default_model(&self) -> String {
        self.settings.provider.model.clone()
    }

    fn memory_command(&self, source: &SessionSource, forget: bool) -> String {
        let place = self
            .memory
            .place(&self.settings.home, &source.platform, &source.user_id);
        hermes_runtime::memory_scope::chat_command(&place, forget)
    }

    fn skills(&self) -> Vec<hermes_runtime::skills::SkillSummary> {
        hermes_runtime::skills::SkillsHome::new(&self.settings.home).list()
    }

    fn signature(&self, model: &str) -> String {
        let p = &self.settings.provider;
        let toolsets = self
            .settings
            .toolsets
            .as_ref()
            .map_or("all".to_owned(), |t| t.join(","));
        format!(
            "{model}|{}|{}|key:{:016x}|tools:{toolsets}",
            p.provider_name, p.base_url, self.key_hash
        )
    }

    fn system_prompt(&self, source: &SessionSource) -> Result<String, FactoryError> {
        let place = self
            .memory
            .place(&self.settings.home, &source.platform, &source.user_id);
        let mut prompt = assemble::session_prompt_for(&self.settings, &self.tool_specs, &place);
        prompt.push_str(&crate::prompt_context::session_context(
            source,
            jiff::Timestamp::now(),
        ));
        Ok(prompt)
    }

    fn build(
        &self,
        session_id: &str,
        model: &str,
        system_prompt: &str,
    ) -> Result<Agent, FactoryError> {
        self.build_with(session_id, model, system_prompt, &BuildOptions::default())
    }

    fn personalities(&self) -> crate::personality::Personalities {
        crate::personality::Personalities::in_home(&self.settings.home)
    }

    fn build_with(
        &self,
        session_id: &str,
        model: &str,
        system_prompt: &str,
        options: &BuildOptions,
    ) -> Result<Agent, FactoryError> {
        // The context window and the summarizer follow the primary (the
        // chain's first link); the agent talks to the whole chain.
        let primary = self
            .primary_client(model)
            .map_err(|e| FactoryError(e.to_string()))?;
        let window = self.windows.get(&self.settings, &primary, model);
        let context = context::context_config(&self.settings, window, &primary);
        let client: Arc<dyn Model> = match &options.reasoning_effort {
            // `/reasoning EFFORT` (SPEC Y5): this chat's effort, every link.
            Some(effort) => {
                let mut settings = self.settings.clone();
                settings.provider.reasoning_effort = Some(effort.clone());
                assemble::provider_model(&settings, model)
                    .map_err(|e| FactoryError(e.to_string()))?
            }
            None => self
                .client(model)
                .map_err(|e| FactoryError(e.to_string()))?,
        };
        let mut tools = self
            .registry(Arc::clone(&client), Some(session_id), Some(context.clone()))
            .map_err(|e| FactoryError(e.to_string()))?;
        if let Some(offer) = self.cron.get() {
            offer.register(&mut tools, session_id);
        }
        // A small window gets shorter definitions, then fewer tools (issue 38).
        if let Some(fitted) =
            assemble::fixed::fit_tools(&self.settings, &mut tools, context.window.tokens())
        {
            tracing::info!(session = session_id, "{}", fitted.notice());
        }
        Ok(assemble::agent(
            &self.settings,
            client,
            Arc::new(tools),
            system_prompt,
            Some(context),
        )
        .with_tool_choice_memory(self.windows.tool_choice_memory(primary.base_url())))
    }

    fn window_detail(&self, model: &str) -> Option<String> {
        let base = self.settings.provider.base_url.trim().trim_end_matches('/');
        self.windows
            .info(base, model)
            .map(|w| format!("{} ({})", w.source, w.detail))
    }

    fn media(&self) -> Option<Arc<MediaServices>> {
        Some(Arc::clone(&self.media))
    }
}

#[cfg(test)]
#[path = "factory_todo_tests.rs"]
mod todo_tests;
