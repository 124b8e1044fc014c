//! What every command needs: settings, the store, the provider client, the
//! tools and the system prompt — and the errors that map to exit codes.

use std::sync::{Arc, Mutex};

use hermes_core::{Agent, ContextConfig, Model, ModelError, ModelErrorKind, ToolRegistry};
use hermes_runtime::assemble;
use hermes_runtime::bridge::AsyncBridge;
use hermes_runtime::client::OpenAiClient;
use hermes_runtime::config::{self, Environment, Origin, Overrides, Settings};
use hermes_runtime::context::{self, WindowInfo, Windows};
use hermes_runtime::fallback::FallbackModel;
#[cfg(feature = "mcp")]
use hermes_runtime::mcp::McpManager;
use hermes_runtime::store::{SessionRecord, Store, StoreError, SystemClock};
use hermes_runtime::sync::lock;
use hermes_runtime::tools::{
    Approver, BackgroundLimits, BackgroundProcesses, BackgroundSink, FinishedProcess,
    SessionApprovals, StartedProcess, TodoState,
};

use crate::args::ProviderArgs;

/// A failure, sorted by the exit code it deserves.
#[derive(Debug)]
pub enum CliError {
    /// Bad usage or configuration: exit 2.
    Config(String),
    /// The run failed (provider unreachable, model error, storage): exit 1.
    Runtime(String),
}

impl CliError {
    /// The process exit code.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Config(_) => 2,
            CliError::Runtime(_) => 1,
        }
    }

    /// The one-line reason.
    pub fn message(&self) -> &str {
        match self {
            CliError::Config(m) | CliError::Runtime(m) => m,
        }
    }
}

/// Shorthand for a runtime failure.
pub fn runtime(e: impl std::fmt::Display) -> CliError {
    CliError::Runtime(e.to_string())
}

/// Loads settings from flags, the environment and `$HERMES_HOME`.
pub fn load_settings(args: &ProviderArgs) -> Result<Settings, CliError> {
    load_config(args).map_err(|e| CliError::Config(e.to_string()))
}

/// Like [`load_settings`], keeping the configuration error's detail.
pub fn load_config(args: &ProviderArgs) -> Result<Settings, config::ConfigError> {
    let overrides = Overrides {
        base_url: args.base_url.clone(),
        api_key: args.api_key.clone().map(Into::into),
        model: args.model.clone(),
        max_iterations: args.max_iterations,
        toolsets: args.toolsets.clone(),
        workdir: args.cwd.clone(),
        allow_outside_workdir: args.allow_outside_workdir.then_some(true),
        sandbox: args
            .no_sandbox
            .then_some(hermes_runtime::tools::SandboxMode::Off),
    };
    config::load(&overrides, &Environment::from_process())
}

/// Opens the session database: `$HERMES_HOME/state.db` (created, mode 0600,
/// if needed), or the PostgreSQL database of `HERMES_DATABASE_URL` /
/// `[store] url`.
pub fn open_store(settings: &Settings) -> Result<Store, CliError> {
    let target = settings.store_target();
    let cannot = |e: StoreError| {
        CliError::Runtime(format!(
            "cannot open the session database {}: {e}",
            target.shown()
        ))
    };
    let mut store = Store::open_target(&target)
        .map(|s| s.with_clock(Arc::new(SystemClock)))
        .map_err(cannot)?;
    store
        .set_wal_autocheckpoint(CLI_WAL_AUTOCHECKPOINT_PAGES)
        .map_err(cannot)?;
    store.set_cache_pages(CLI_CACHE_PAGES).map_err(cannot)?;
    Ok(store)
}

/// Database pages a CLI process keeps cached. Each cached page costs
/// ≈ 4.4 KB of fresh memory, a page fault apiece, and a one-shot reads most
/// pages once: on a home grown by 40 runs, a 0-turn one-shot took 304 page
/// faults with SQLite's default cache, 290 with 8 pages, with CPU and
/// instructions unchanged; a 20-turn one-shot ran 0.1 % more instructions
/// and 3 more `pread`s of pages the kernel held (issue 39). At 4 pages it
/// re-read 150 pages. The gateway, open for days, keeps SQLite's default.
const CLI_CACHE_PAGES: u32 = 8;

/// WAL pages after which a CLI commit checkpoints. Each CLI process reads
/// the whole WAL before its first query (≈ 2 k instructions and a `pread`
/// per page), and a one-shot turn without tools writes 18 pages: at the
/// store's 256 a start read 128 pages on average, at 64 it reads 32, for a
/// checkpoint (two `fsync`s) every third or fourth run (issue 39). The
/// gateway, open for days, keeps the store's 256.
const CLI_WAL_AUTOCHECKPOINT_PAGES: u32 = 64;

/// The provider client for `settings`, using `model`.
pub fn client(settings: &Settings, model: &str) -> Result<OpenAiClient, CliError> {
    assemble::provider_client(settings, model).map_err(|e| CliError::Config(e.to_string()))
}

/// The model chain for `settings`: the primary on `model`, then the
/// configured fallbacks (SPEC X2).
pub fn chain(settings: &Settings, model: &str) -> Result<Arc<FallbackModel>, CliError> {
    assemble::provider_model(settings, model).map_err(|e| CliError::Config(e.to_string()))
}

/// A session's tools, fitted to the window, with the system prompt
/// rendered for them and the fixed part's estimate.
struct FittedTools {
    tools: Arc<ToolRegistry>,
    measured: assemble::fixed::Measured,
}

/// Everything one conversation needs; rebuilt when the model changes.
pub struct Workbench {
    /// Resolved settings.
    pub settings: Settings,
    /// The session store, shared with the observer that persists as the run goes.
    pub store: Arc<Mutex<Store>>,
    /// The current model name.
    pub model: String,
    /// The primary's own client (model listings, the context window).
    pub client: Arc<OpenAiClient>,
    /// The model chain the agent talks to: the primary, then the fallbacks
    /// (SPEC X2).
    pub chain: Arc<FallbackModel>,
    /// The tools, built when first needed (see [`Workbench::tools`]).
    tools: Mutex<Option<FittedTools>>,
    /// The session's task list (survives tool rebuilds such as `/model`).
    pub todo: Arc<TodoState>,
    /// The context window of each model used, resolved once (SPEC X1).
    pub windows: Windows,
    /// The current model's context configuration.
    pub context: ContextConfig,
    /// The async runtime MCP servers run on (`None`: none configured).
    pub bridge: Option<Arc<AsyncBridge>>,
    /// The MCP servers, started once for the process.
    #[cfg(feature = "mcp")]
    pub mcp: Option<Arc<McpManager>>,
    /// Asks the user about dangerous commands (`None` without a terminal:
    /// such commands are denied).
    pub approver: Option<Arc<dyn Approver>>,
    /// The session's "always" approvals (fresh for `/new`).
    pub approvals: Arc<SessionApprovals>,
    /// The session the tools serve, once there is one ([`Workbench::bind_session`]).
    pub session_id: Option<String>,
    /// The last line said about tools shrunk for a small window, so a
    /// rebuild of the same tools does not say it again.
    fit_notice: Mutex<Option<String>>,
    /// Background processes (`terminal` with `background: true`); they
    /// end with the CLI.
    pub background: Arc<BackgroundProcesses>,
    /// Their completion notices, printed at the next prompt.
    pub background_notices: Arc<HeldNotices>,
}

/// Completion notices of the CLI's background processes, held until the
/// prompt shows them (printing while the line editor draws would garble it).
#[derive(Debug, Default)]
pub struct HeldNotices(Mutex<Vec<String>>);

impl HeldNotices {
    /// The notices so far, once each.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.0))
    }
}

impl BackgroundSink for HeldNotices {
    fn started(&self, _process: &StartedProcess) -> Result<(), String> {
        Ok(())
    }

    fn finished(&self, finished: &FinishedProcess) {
        if finished.process.notify {
            lock(&self.0).push(finished.notice());
        }
    }
}

impl Workbench {
    /// Builds the workbench from settings.
    pub fn new(settings: Settings) -> Result<Self, CliError> {
        let store = Arc::new(Mutex::new(open_store(&settings)?));
        let model = settings.provider.model.clone();
        let client = Arc::new(client(&settings, &model)?);
        let windows = Windows::with_store(Arc::clone(&store));
        let window = windows.get(&settings, &client, &model);
        let context = context::context_config(&settings, window, &client);
        // No built-in tool is async (the network tools are blocking
        // exchanges on the shared HTTP agent): the CLI starts an async
        // runtime only for MCP servers, and a one-shot without them runs on
        // one thread.
        assemble::warn_if_mcp_left_out(&settings);
        let bridge = if assemble::wants_mcp(&settings) {
            Some(Arc::new(AsyncBridge::new().map_err(|e| {
                runtime(format!("cannot start the async runtime: {e}"))
            })?))
        } else {
            None
        };
        #[cfg(feature = "mcp")]
        let mcp = bridge
            .as_ref()
            .and_then(|b| assemble::mcp_servers(&settings, b));
        let chain = chain(&settings, &model)?;
        let background_notices = Arc::new(HeldNotices::default());
        let background = BackgroundProcesses::new(
            BackgroundLimits::from_config(&settings.file),
            settings
                .home
                .join("background-cli")
                .join(std::process::id().to_string()),
            Some(Arc::clone(&background_notices) as Arc<dyn BackgroundSink>),
        );
        let bench = Workbench {
            settings,
            store,
            model,
            client,
            chain: chain.clone(),
            tools: Mutex::new(None),
            todo: Arc::new(TodoState::new()),
            windows,
            context,
            bridge,
            #[cfg(feature = "mcp")]
            mcp,
            approver: crate::approval::terminal_approver(),
            approvals: Arc::new(SessionApprovals::new()),
            session_id: None,
            fit_notice: Mutex::new(None),
            background,
            background_notices,
        };
        Ok(bench)
    }

    /// The session's tools, built on first use: a new session binds its id
    /// before anything asks for them, so they are built once, for it — a
    /// one-shot built them twice, once without a session and once with
    /// it (≈ 1.3 M instructions, a fifth of a 0-turn one-shot; issue 39).
    pub fn tools(&self) -> Result<Arc<ToolRegistry>, CliError> {
        self.with_fitted(|t| Arc::clone(&t.tools))
    }

    /// `read` of the session's fitted tools, built first if need be.
    fn with_fitted<R>(&self, read: impl FnOnce(&FittedTools) -> R) -> Result<R, CliError> {
        let mut tools = lock(&self.tools);
        if let Some(t) = tools.as_ref() {
            return Ok(read(t));
        }
        let built = self.build_tools(self.chain.clone())?;
        let answer = read(&built);
        *tools = Some(built);
        Ok(answer)
    }

    fn build_tools(&self, model: Arc<dyn Model>) -> Result<FittedTools, CliError> {
        self.build_tools_with(model, self.tool_deps(), true)
    }

    /// What the tools of the interactive session get.
    fn tool_deps(&self) -> assemble::ToolDeps {
        assemble::ToolDeps {
            bridge: self.bridge.clone(),
            todo: Some(self.todo.clone()),
            #[cfg(feature = "mcp")]
            mcp: self.mcp.clone(),
            approver: self.approver.clone(),
            approvals: Some(self.approvals.clone()),
            context: Some(self.context.clone()),
            session_id: self.session_id.clone(),
            store: Some(Arc::clone(&self.store)),
            // Only when asked for by name: in a terminal the file is at
            // hand already, and every offered tool costs request tokens.
            outbox: self
                .settings
                .toolsets
                .as_ref()
                .is_some_and(|t| t.iter().any(|n| n == "send_file"))
                .then(|| {
                    Arc::new(crate::display::PrintedFiles)
                        as Arc<dyn hermes_runtime::tools::FileOutbox>
                }),
            // The CLI is the owner's: `$HERMES_HOME`'s memory, as always.
            memory: None,
            // The terminal's picker; without a terminal the tool says that
            // no one can answer.
            clarifier: Some(crate::clarify::terminal_clarifier()),
            background: Some(Arc::clone(&self.background)),
        }
    }

    fn build_tools_with(
        &self,
        model: Arc<dyn Model>,
        deps: assemble::ToolDeps,
        announce: bool,
    ) -> Result<FittedTools, CliError> {
        let mut tools = assemble::session_tools(&self.settings, model, &deps)
            .map_err(|e| CliError::Config(e.to_string()))?;
        // Scheduled jobs (SPEC Y1): from the CLI a job has no chat of
        // origin, so it is delivered where `deliver` says.
        if hermes_runtime::tools::cronjob::offered(self.settings.toolsets.as_deref()) {
            let cron = hermes_runtime::cron::CronSettings::load(&self.settings)
                .map_err(|e| CliError::Config(e.to_string()))?;
            tools.register(Box::new(hermes_runtime::tools::CronjobTool::new(
                Arc::clone(&self.store),
                None,
                cron.tz,
                None,
                Arc::new(SystemClock),
            )));
        }
        // A small window gets shorter definitions, then fewer tools (issue 38).
        let (fitted, measured) = assemble::fixed::fit_tools_measured(
            &self.settings,
            &mut tools,
            self.context.window.tokens(),
        );
        let notice = fitted.map(|f| f.notice());
        let built = FittedTools {
            tools: Arc::new(tools),
            measured,
        };
        // A background run's tools are fitted quietly: the interactive
        // session's notice already told the user (and its own differs
        // only by the tools a background run is not given).
        if !announce {
            return Ok(built);
        }
        let mut said = lock(&self.fit_notice);
        if let Some(n) = &notice
            && *said != notice
        {
            tracing::warn!("{n}");
        }
        *said = notice;
        drop(said);
        Ok(built)
    }

    /// Binds the tools to the stored session `id` once it exists
    /// (created or resumed), keeping their state: long outputs go to its
    /// folder and `session_search` searches from it (SPEC Y6).
    pub fn bind_session(&mut self, id: &str) -> Result<(), CliError> {
        if self.session_id.as_deref() == Some(id) {
            return Ok(());
        }
        self.session_id = Some(id.to_owned());
        // Built for the session when first asked for.
        *lock(&self.tools) = None;
        Ok(())
    }

    /// Rebuilds the tools (for a new session: no tool state carries over).
    pub fn reset_tools(&mut self) -> Result<(), CliError> {
        self.session_id = None;
        self.todo = Arc::new(TodoState::new());
        self.approvals = Arc::new(SessionApprovals::new());
        let tools = self.build_tools(self.chain.clone())?;
        *lock(&self.tools) = Some(tools);
        Ok(())
    }

    /// Switches the model (`/model NAME`).
    pub fn set_model(&mut self, model: &str) -> Result<(), CliError> {
        let client = Arc::new(self.client.with_model(model));
        let window = self.windows.get(&self.settings, &client, model);
        self.context = context::context_config(&self.settings, window, &client);
        let chain = chain(&self.settings, model)?;
        let tools = self.build_tools(chain.clone())?;
        *lock(&self.tools) = Some(tools);
        self.client = client;
        self.chain = chain;
        self.model = model.to_owned();
        Ok(())
    }

    /// Assembles a fresh system prompt (once per session, SPEC L6): the
    /// one the session's tools were fitted with, rendered when they were
    /// built — for a new session, just now (`bind_session` drops the
    /// tools of the one before).
    pub fn assemble_prompt(&self) -> Result<String, CliError> {
        self.with_fitted(|t| t.measured.prompt.clone())
    }

    /// An agent for one session, with its stored system prompt.
    pub fn agent(&self, system_prompt: &str) -> Result<Agent, CliError> {
        // The estimate made while fitting, when it was made for this very
        // prompt (a resumed session's stored prompt may differ).
        let (tools, estimate) = self.with_fitted(|t| {
            let m = &t.measured;
            (
                Arc::clone(&t.tools),
                (m.prompt == system_prompt).then_some(m.fixed_tokens),
            )
        })?;
        Ok(self.agent_over(tools, system_prompt, estimate))
    }

    /// An agent over `tools` with `system_prompt`, and `estimate` as its
    /// fixed part's when one was made for them.
    fn agent_over(
        &self,
        tools: Arc<ToolRegistry>,
        system_prompt: &str,
        estimate: Option<u64>,
    ) -> Agent {
        let agent = assemble::agent(
            &self.settings,
            self.chain.clone(),
            tools,
            system_prompt,
            None,
        )
        .with_tool_choice_memory(self.windows.tool_choice_memory(self.client.base_url()));
        let context = self.context.clone();
        match estimate {
            Some(fixed) => agent.with_context_estimated(context, fixed),
            None => agent.with_context(context),
        }
    }

    /// The agent of a background run (`/background`) in the stored session
    /// `session_id`, and its system prompt. Its tools are the session's
    /// own (a todo list, long outputs in its folder) and never ask on the
    /// terminal, where the user goes on typing: a dangerous command is
    /// refused, `clarify` and `send_file` are not offered.
    pub fn background_agent(&self, session_id: &str) -> Result<(Agent, String), CliError> {
        let mut deps = self.tool_deps();
        deps.todo = Some(Arc::new(TodoState::new()));
        deps.approver = None;
        deps.approvals = Some(Arc::new(SessionApprovals::new()));
        deps.clarifier = None;
        // `send_file` prints to the terminal: not while the user types.
        deps.outbox = None;
        deps.session_id = Some(session_id.to_owned());
        let FittedTools { tools, measured } =
            self.build_tools_with(self.chain.clone(), deps, false)?;
        let agent = self.agent_over(tools, &measured.prompt, Some(measured.fixed_tokens));
        Ok((agent, measured.prompt))
    }

    /// The current model's window and where it came from.
    pub fn window(&self) -> Option<WindowInfo> {
        self.windows.info(self.client.base_url(), &self.model)
    }

    /// Locks the store (a poisoned lock only means another thread panicked
    /// mid-write; SQLite's transaction already protected the data).
    pub fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        lock(&self.store)
    }
}

/// What to do about a failed provider call, for the line under the error.
pub fn provider_hint(settings: &Settings, error: &ModelError) -> String {
    let p = &settings.provider;
    let nothing_configured = matches!(
        settings.origins.get("base_url"),
        None | Some(Origin::Default)
    );
    match error.kind {
        ModelErrorKind::Status(401 | 403) if p.api_key.is_none() => format!(
            "{} at {} wants an API key and none is set: set HERMES_API_KEY (or --api-key), or run `hermes setup`",
            p.provider_name,
            p.display_url()
        ),
        ModelErrorKind::Status(401 | 403) => format!(
            "the key from {} was refused: check it, or run `hermes setup`",
            settings
                .origins
                .get("api_key")
                .map_or_else(|| "the configuration".to_owned(), ToString::to_string)
        ),
        ModelErrorKind::Transport | ModelErrorKind::Timeout if nothing_configured => format!(
            "nothing is configured yet and no local server answers at {}: run `hermes setup` to choose a provider \
             (Ollama, llama.cpp, LM Studio, OpenRouter, OpenAI or any OpenAI-compatible URL)",
            p.display_url()
        ),
        _ => {
            let file = settings.home.join("config.toml");
            let file = if file.exists() {
                format!(", {}", file.display())
            } else {
                String::new()
            };
            format!(
                "provider: {} at {}; change it with --base-url/--api-key/--model, HERMES_BASE_URL/HERMES_API_KEY/HERMES_MODEL{file} \
                 or `hermes setup`; `hermes doctor` checks the setup",
                p.provider_name,
                p.display_url()
            )
        }
    }
}

/// The session `id` names (an exact id or a unique prefix), or a usage error.
pub fn find_session(store: &Store, id: &str) -> Result<SessionRecord, CliError> {
    match store.find_session(id) {
        Ok(Some(s)) => Ok(s),
        Ok(None) => Err(CliError::Config(format!(
            "no session '{id}'; `hermes sessions list` shows the stored ones"
        ))),
        Err(e @ StoreError::AmbiguousId { .. }) => Err(CliError::Config(e.to_string())),
        Err(e) => Err(runtime(e)),
    }
}
