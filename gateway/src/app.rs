//! `hermes gateway run [--check]`: settings → adapters → runner → signals.
//!
//! The CLI resolves [`Settings`] (provider settings with the same precedence
//! as every other command) and calls [`run_gateway`]. Everything that can be
//! wrong with the configuration is found before anything connects, and each
//! error names the key or variable to fix ([`GatewayError::exit_code`] is 2
//! for those). `--check` stops after that validation.
//!
//! The gateway's tokio runtime is THE runtime of the process: adapters run on
//! it, turns run on its blocking pool, and async tools reach it through an
//! [`AsyncBridge`] made from its handle (SPEC L9).

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
use hermes_runtime::store::{BackendKind, Store, StoreError, SystemClock};
use hermes_runtime::sync::lock;
use hermes_runtime::tools::{ApprovalMode, SandboxMode, SessionApprovals, TodoState};

use crate::adapter::PlatformAdapter;
use crate::approval::ApprovalHub;
use crate::config::{GatewayConfig, GatewayConfigError};
use crate::event::SessionSource;
use crate::lock::{InstanceLock, LockError};
use crate::media::MediaServices;
use crate::runner::{
    AgentFactory, BuildOptions, FactoryError, GatewayRunner, RunnerDeps, ShutdownReport, StartError,
};

/// Why the gateway did not run (or stopped).
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// A `[gateway]` key or gateway variable is invalid (exit 2).
    #[error(transparent)]
    Config(#[from] GatewayConfigError),
    /// Provider or tool settings cannot work (exit 2).
    #[error("invalid provider/tool configuration: {0}")]
    Provider(String),
    /// A platform's settings cannot work (exit 2).
    #[error("invalid platform configuration: {0}")]
    Platform(String),
    /// No platform has credentials (exit 2). The text names how to enable
    /// each platform of this build ([`crate::platform::no_platform_text`]).
    #[error("{}", crate::platform::no_platform_text())]
    NoPlatform,
    /// Another gateway runs on this `$HERMES_HOME` (exit 1).
    #[error(transparent)]
    Locked(#[from] LockError),
    /// The session store could not be opened (exit 1).
    #[error("session store: {0}")]
    Store(#[from] StoreError),
    /// The runner could not start (exit 1).
    #[error(transparent)]
    Start(#[from] StartError),
    /// The async runtime or signal handling could not be set up (exit 1).
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[from] std::io::Error),
    /// A platform adapter stopped for good while serving (exit 1, so a
    /// service manager restarts the gateway).
    #[error("stopped: {0}")]
    AdapterStopped(String),
}

impl GatewayError {
    /// The process exit code: 2 for configuration the operator must fix,
    /// 1 for everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            GatewayError::Config(_)
            | GatewayError::Provider(_)
            | GatewayError::Platform(_)
            | GatewayError::NoPlatform => 2,
            GatewayError::Locked(_)
            | GatewayError::Store(_)
            | GatewayError::Start(_)
            | GatewayError::Runtime(_)
            | GatewayError::AdapterStopped(_) => 1,
        }
    }
}

/// What `--check` found: a valid configuration, summarised (no secrets).
#[derive(Clone, Debug)]
pub struct CheckSummary {
    /// Enabled platforms.
    pub platforms: Vec<&'static str>,
    /// The validated gateway settings.
    pub config: GatewayConfig,
    /// Provider label, base URL and model.
    pub provider: String,
    /// The terminal sandbox's mode (on / off).
    pub sandbox: SandboxMode,
}

impl fmt::Display for CheckSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "gateway configuration OK")?;
        writeln!(f, "  platforms: {}", self.platforms.join(", "))?;
        writeln!(f, "  provider: {}", self.provider)?;
        writeln!(f, "  busy mode: {}", self.config.busy_mode.as_str())?;
        let hours = |d: Option<std::time::Duration>| {
            d.map_or("off".to_owned(), |d| format!("{} h", d.as_secs() / 3600))
        };
        writeln!(f, "  idle reset: {}", hours(self.config.idle_reset))?;
        let daily = self
            .config
            .daily_reset_hour
            .map_or("off".to_owned(), |h| format!("{h:02}:00"));
        writeln!(f, "  daily reset: {daily}")?;
        writeln!(f, "  max workers: {}", self.config.max_workers)?;
        write!(f, "  terminal sandbox: {}", self.sandbox)
    }
}

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

/// Builds every platform adapter whose credentials are present, in the
/// registry's order ([`crate::platform::platforms`]): compiled-out
/// platforms are simply absent. Adapters keep their state (Telegram's poll
/// offset, Matrix's sync token, …) in `store` when one is given.
pub fn build_adapters(
    settings: &Settings,
    store: Option<Arc<Mutex<Store>>>,
) -> Result<Vec<Arc<dyn PlatformAdapter>>, GatewayError> {
    let env = |name: &str| settings.var(name).map(str::to_owned);
    let ctx = crate::platform::BuildContext {
        settings,
        env: &env,
        store,
    };
    let mut adapters: Vec<Arc<dyn PlatformAdapter>> = Vec::new();
    for build in crate::platform::platforms().iter().filter_map(|p| p.build) {
        if let Some(built) = build(&ctx) {
            adapters.push(built.map_err(GatewayError::Platform)?);
        }
    }
    if adapters.is_empty() {
        return Err(GatewayError::NoPlatform);
    }
    Ok(adapters)
}

/// Refuses a gateway whose terminal would run commands unconfined without
/// the operator having opted out: the sandbox is on but this kernel cannot
/// provide it (the tool would refuse every command; better to say so now).
fn check_sandbox(settings: &Settings) -> Result<(), GatewayError> {
    let terminal_on = settings
        .toolsets
        .as_ref()
        .is_none_or(|t| t.iter().any(|n| n == "terminal"));
    if !terminal_on || settings.sandbox == SandboxMode::Off {
        return Ok(());
    }
    match hermes_runtime::sandbox::unavailable_reason() {
        None => Ok(()),
        Some(why) => Err(GatewayError::Provider(format!(
            "the terminal's sandbox is unavailable: {why}. The gateway does not serve an \
             unconfined terminal: set [agent] sandbox = \"off\" (or pass --no-sandbox) to opt \
             out, or leave the terminal out of [agent] toolsets"
        ))),
    }
}

/// Validates everything `run` would use, without connecting or locking.
pub fn check_config(settings: &Settings) -> Result<CheckSummary, GatewayError> {
    let config = GatewayConfig::from_settings(settings, crate::platform::platforms())?;
    hermes_runtime::cron::CronSettings::load(settings)
        .map_err(|e| GatewayError::Provider(e.to_string()))?;
    check_sandbox(settings)?;
    #[cfg(feature = "webhooks")]
    crate::webhook::settings(settings).map_err(|e| GatewayError::Platform(e.to_string()))?;
    // The tools are built as `run` builds them: with an async bridge, or an
    // explicit `web` toolset would be refused here and `run` never start.
    let bridge = Arc::new(AsyncBridge::new()?);
    RuntimeAgentFactory::new(settings, Some(bridge))?;
    let api = api_server_settings(settings)?;
    let adapters = adapters_beside(build_adapters(settings, None), api.is_some())?;
    #[cfg_attr(not(feature = "api_server"), allow(unused_mut))]
    let mut platforms: Vec<&'static str> = adapters.iter().map(|a| a.platform()).collect();
    #[cfg(feature = "api_server")]
    if api.is_some() {
        platforms.push(crate::api_server::PLATFORM);
    }
    let p = &settings.provider;
    Ok(CheckSummary {
        platforms,
        config,
        provider: format!(
            "{} ({}), model {}",
            p.provider_name,
            p.display_url(),
            p.model
        ),
        sandbox: settings.sandbox,
    })
}

/// The API server's settings when the feature is built and it is enabled.
#[cfg(feature = "api_server")]
pub(crate) fn api_server_settings(
    settings: &Settings,
) -> Result<Option<crate::api_server::ApiServerConfig>, GatewayError> {
    crate::api_server::settings(settings).map_err(|e| GatewayError::Platform(e.to_string()))
}

#[cfg(not(feature = "api_server"))]
pub(crate) fn api_server_settings(_settings: &Settings) -> Result<Option<()>, GatewayError> {
    Ok(None)
}

/// The chat adapters; none at all is fine when the API server runs.
pub(crate) fn adapters_beside(
    built: Result<Vec<Arc<dyn PlatformAdapter>>, GatewayError>,
    api_server: bool,
) -> Result<Vec<Arc<dyn PlatformAdapter>>, GatewayError> {
    match built {
        Err(GatewayError::NoPlatform) if api_server => Ok(Vec::new()),
        other => other,
    }
}

/// `hermes gateway run`: with `check_only`, validates the configuration,
/// prints a summary and returns. Otherwise runs until SIGINT/SIGTERM, then
/// stops gracefully within five seconds.
pub fn run_gateway(settings: &Settings, check_only: bool) -> Result<(), GatewayError> {
    // The bot tokens and the provider key live in this process: no other
    // process (a terminal command included) may read its memory.
    hermes_runtime::tools::forbid_inspection();
    if check_only {
        println!("{}", crate::check::check_live(settings)?);
        return Ok(());
    }
    let summary = check_config(settings)?;
    #[cfg(not(feature = "webhooks"))]
    if settings.file.contains_key("webhooks") {
        tracing::warn!(
            "[webhooks] is configured, but this hermes was built without the `webhooks` feature"
        );
    }
    let api = api_server_settings(settings)?;
    if summary.config.allow.is_empty()
        && !summary.config.pairing
        && summary.platforms.len() > usize::from(api.is_some())
    {
        tracing::warn!(
            "nobody is allowed to talk to the bot; every user will be refused (see `hermes gateway run --check`)"
        );
    }
    // A SQLite file belongs to one gateway (the home's lock); gateways
    // sharing a PostgreSQL database coordinate through leases in it (X8).
    let target = settings.store_target();
    let _lock = match target.kind() {
        BackendKind::Sqlite => Some(InstanceLock::acquire(&settings.home)?),
        BackendKind::Postgres => None,
    };
    let store = Arc::new(Mutex::new(Store::open_target(&target)?));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("hermes-gateway")
        .enable_all()
        .build()?;
    let bridge = Arc::new(AsyncBridge::from_handle(rt.handle().clone()));
    let factory = Arc::new(
        RuntimeAgentFactory::new(settings, Some(bridge))?.with_window_cache(Arc::clone(&store)),
    );
    let adapters = adapters_beside(
        build_adapters(settings, Some(Arc::clone(&store))),
        api.is_some(),
    )?;
    // Scheduled jobs (SPEC Y1): the tool for chats, the scheduler below.
    let cron_settings = hermes_runtime::cron::CronSettings::load(settings)
        .map_err(|e| GatewayError::Provider(e.to_string()))?;
    let clock: Arc<dyn hermes_core::Clock> = Arc::new(SystemClock);
    factory.offer_session_search(Arc::clone(&store));
    let sendable = crate::cron::send::allowed_targets(&settings.file);
    let mut offer = crate::cron::CronOffer::new(
        Arc::clone(&store),
        cron_settings.clone(),
        adapters.iter().map(|a| a.platform().to_owned()).collect(),
        Arc::clone(&clock),
        settings.toolsets.as_deref(),
    )
    .with_send_message(sendable, settings.toolsets.as_deref());
    // `send_message`'s files come from the working directory, read as the
    // file tools read (a missing one: messages without files only).
    match hermes_runtime::tools::ConfinedFiles::new(&assemble::script_env(settings)) {
        Ok(files) => offer = offer.with_send_files(files, settings.home.join("outbox")),
        Err(e) => tracing::warn!(error = %e, "send_message: no files (the working directory)"),
    }
    factory.offer_cron(offer);
    // Background processes; those the last run left are announced lost.
    factory.offer_background(
        crate::cron::background::start(
            &settings.home,
            &settings.file,
            Arc::clone(&store),
            Arc::clone(&clock),
        )
        .map_err(|e| GatewayError::Provider(format!("background processes: {e}")))?,
    );
    let factory: Arc<dyn AgentFactory> = factory;
    // With only the API server there is no chat runner to start, and no
    // chat for the scheduler to deliver to.
    let runner = (!adapters.is_empty()).then(|| {
        GatewayRunner::new(RunnerDeps {
            adapters,
            factory: Arc::clone(&factory),
            store: Arc::clone(&store),
            clock: Arc::clone(&clock),
            config: summary.config.clone(),
        })
    });
    let report: (ShutdownReport, Option<String>) = rt.block_on(async {
        // Install the handlers before connecting, so a signal during start-up
        // still stops the gateway gracefully.
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let ops = crate::ops::start(
            &settings.home,
            &summary.platforms,
            summary.config.metrics_port,
        )
        .await?;
        let scheduler = match &runner {
            Some(runner) => {
                runner.start().await?;
                Some(crate::cron::Scheduler::start(crate::cron::SchedulerDeps {
                    runner: runner.clone(),
                    factory: Arc::clone(&factory),
                    store: Arc::clone(&store),
                    clock,
                    settings: cron_settings,
                    timing: crate::cron::SchedulerTiming::default(),
                    scripts: Some(hermes_runtime::assemble::script_env(settings)),
                }))
            }
            None => None,
        };
        // Webhooks in: events become one-off jobs of the scheduler above.
        #[cfg(feature = "webhooks")]
        let webhooks =
            crate::webhook::start(settings, Arc::clone(&store), scheduler.is_some()).await?;
        #[cfg(feature = "api_server")]
        let api_server = match api {
            Some(config) => Some(
                crate::api_server::ApiServer::bind(config, factory, Arc::clone(&store)).await?,
            ),
            None => None,
        };
        #[cfg(feature = "api_server")]
        if api_server.is_some() {
            crate::ops::ops()
                .platform_state(crate::api_server::PLATFORM, crate::ops::PlatformState::Connected);
        }
        #[cfg(not(feature = "api_server"))]
        let _ = (api, factory);
        tracing::info!(platforms = ?summary.platforms, busy_mode = summary.config.busy_mode.as_str(), "gateway running");
        let gave_up = tokio::select! {
            r = tokio::signal::ctrl_c() => { r?; None }
            _ = term.recv() => None,
            why = async {
                match &runner {
                    Some(runner) => runner.gave_up().await,
                    None => std::future::pending().await,
                }
            } => Some(why),
        };
        tracing::info!("stopping the gateway");
        #[cfg(feature = "webhooks")]
        if let Some(webhooks) = webhooks {
            webhooks.stop().await;
        }
        if let Some(scheduler) = scheduler {
            scheduler.stop(std::time::Duration::from_secs(2)).await;
        }
        #[cfg(feature = "api_server")]
        if let Some(server) = api_server {
            server.stop().await;
        }
        let report = match &runner {
            Some(runner) => runner.shutdown().await,
            None => ShutdownReport {
                all_turns_finished: true,
                marked_clean: false,
            },
        };
        ops.stop().await;
        Ok::<_, GatewayError>((report, gave_up))
    })?;
    let (report, gave_up) = report;
    // Turns still stuck in a provider call must not hold the process.
    rt.shutdown_timeout(std::time::Duration::from_millis(500));
    if !report.all_turns_finished {
        tracing::warn!(
            "some turns did not finish in time; their sessions will be suspended at the next start"
        );
    }
    match gave_up {
        Some(why) => Err(GatewayError::AdapterStopped(why)),
        None => Ok(()),
    }
}

#[cfg(test)]
#[path = "app_todo_tests.rs"]
mod todo_tests;
