//! Building an agent from [`Settings`]: the one recipe the CLI and the
//! gateway share, so a conversation behaves the same in both.

use std::sync::Arc;

use hermes_core::{Agent, ContextConfig, Model, ToolRegistry, ToolSpec};

use crate::bridge::AsyncBridge;
use crate::client::{ClientError, ClientOptions, OpenAiClient};
use crate::config::Settings;
use crate::mcp::McpManager;
use crate::prompt::{PromptSources, assemble_system_prompt};
use crate::store::SystemClock;
use crate::tools::{
    ApprovalGate, Approver, SessionApprovals, TodoState, ToolEnv, ToolsError, build_registry,
};

/// The provider client for `settings`, talking to `model`.
pub fn provider_client(settings: &Settings, model: &str) -> Result<OpenAiClient, ClientError> {
    let p = &settings.provider;
    OpenAiClient::new(ClientOptions {
        base_url: p.base_url.clone(),
        api_key: p.api_key.clone(),
        model: model.to_owned(),
        first_byte_timeout: p.first_byte_timeout,
        call_timeout: p.call_timeout,
        ..ClientOptions::default()
    })
}

/// What one session's tools share with the process and the front-end,
/// besides the settings.
#[derive(Clone, Default)]
pub struct ToolDeps {
    /// The persistent async runtime (network tools, MCP).
    pub bridge: Option<Arc<AsyncBridge>>,
    /// The session's task list, kept outside the registry so it survives
    /// rebuilds (a cached agent may be dropped at any time, SPEC G4).
    pub todo: Option<Arc<TodoState>>,
    /// The process's MCP servers ([`mcp_servers`]).
    pub mcp: Option<Arc<McpManager>>,
    /// How the front-end asks the user to approve a dangerous command;
    /// `None`: nobody can be asked, such commands are denied.
    pub approver: Option<Arc<dyn Approver>>,
    /// The session's "always" approvals (fresh per session).
    pub approvals: Option<Arc<SessionApprovals>>,
    /// The window policy sub-agents (`delegate_task`) compact under (SPEC
    /// X1); `None`: they do not.
    pub context: Option<ContextConfig>,
}

impl std::fmt::Debug for ToolDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolDeps")
            .field("bridge", &self.bridge.is_some())
            .field("mcp", &self.mcp)
            .field("approver", &self.approver.is_some())
            .finish_non_exhaustive()
    }
}

/// The tools of one session: the configured toolsets, confined to the
/// configured working directory; sub-agents (`delegate_task`) run on
/// `model`; everything else comes from `deps`.
pub fn session_tools(
    settings: &Settings,
    model: Arc<dyn Model>,
    deps: &ToolDeps,
) -> Result<ToolRegistry, ToolsError> {
    let mut env = ToolEnv::new(&settings.workdir, &settings.home);
    env.allow_outside_workdir = settings.allow_outside_workdir;
    env.sandbox = settings.sandbox;
    env.env_passthrough = settings.env_passthrough.clone();
    env.sandbox_read = settings.sandbox_read.clone();
    env.sandbox_write = settings.sandbox_write.clone();
    env.bridge = deps.bridge.clone();
    env.delegate_model = Some(model);
    env.todo_state = deps.todo.clone();
    env.approval = ApprovalGate {
        mode: settings.approvals,
        approver: deps.approver.clone(),
        session: deps.approvals.clone().unwrap_or_default(),
    };
    env.web_search = settings.web_search.clone();
    env.mcp = deps.mcp.clone();
    env.context = deps.context.clone();
    build_registry(&env, settings.toolsets.as_deref())
}

/// The process's MCP servers, started (SPEC X7): `None` when none is
/// configured or the `mcp` toolset is not enabled. Each server gets its
/// `startup_timeout`; one that fails is reported (`hermes mcp list`, the
/// log) and tried again later, and does not stop the others.
pub fn mcp_servers(settings: &Settings, bridge: &Arc<AsyncBridge>) -> Option<Arc<McpManager>> {
    let enabled = settings
        .toolsets
        .as_ref()
        .is_none_or(|t| t.iter().any(|n| n == "mcp"));
    if !enabled || settings.mcp_servers.is_empty() {
        return None;
    }
    let manager = McpManager::new(
        settings.mcp_servers.clone(),
        &settings.workdir,
        bridge.clone(),
    );
    manager.start();
    Some(Arc::new(manager))
}

/// A fresh system prompt for a new session (SPEC L6): callers store it with
/// the session and reuse the stored bytes from then on.
pub fn session_prompt(settings: &Settings, tools: &[ToolSpec]) -> String {
    let sources = PromptSources::new(&settings.home, &settings.workdir);
    assemble_system_prompt(&sources, tools)
}

/// An agent over `model` and `tools` with the session's stored prompt and
/// the configured budget, stamping ledger entries with the wall clock, and
/// keeping its conversation within the window `context` describes (SPEC
/// X1; see [`crate::context::context_config`]).
pub fn agent(
    settings: &Settings,
    model: Arc<dyn Model>,
    tools: Arc<ToolRegistry>,
    system_prompt: &str,
    context: Option<ContextConfig>,
) -> Agent {
    let agent = Agent::new(model, tools, system_prompt)
        .with_max_iterations(settings.max_iterations)
        .with_clock(Arc::new(SystemClock));
    match context {
        Some(c) => agent.with_context(c),
        None => agent,
    }
}
