//! Building an agent from [`Settings`]: the one recipe the CLI and the
//! gateway share, so a conversation behaves the same in both.

use std::sync::{Arc, Mutex};

use hermes_core::{Agent, ContextConfig, Model, ToolRegistry, ToolSpec};

use crate::bridge::AsyncBridge;
use crate::client::{
    AnthropicClient, CacheControl, ClientError, ClientOptions, OpenAiClient, ReasoningDialect,
    ReasoningEcho,
};
use crate::config::{Api, CacheMode, EchoMode, ProviderSettings, Settings};
use crate::fallback::{FallbackModel, Link};
#[cfg(feature = "mcp")]
use crate::mcp::McpManager;
use crate::media::MediaDir;
use crate::memory_scope::{MemoryPlace, MemorySettings};
use crate::prompt::{PromptSources, assemble_system_prompt};
use crate::secret::Secret;
use crate::store::{Store, SystemClock};
pub mod fixed;
mod schema_text;

use crate::tools::{
    ApprovalGate, Approver, SearchSource, SessionApprovals, TodoState, ToolEnv, ToolsError,
    build_registry,
};

/// The primary's own client on `model`: for `hermes doctor`, model
/// listings, the context window's provider metadata and the summarizer.
/// With `api = "anthropic"` it speaks the Anthropic wire (the type is the
/// shared HTTP client; [`AnthropicClient`] is the same thing as a `Model`).
pub fn provider_client(settings: &Settings, model: &str) -> Result<OpenAiClient, ClientError> {
    let p = &settings.provider;
    let opts = client_options(
        p,
        &p.base_url,
        p.api_key.as_ref().map(Secret::expose),
        model,
        p.api,
    );
    match p.api {
        Api::OpenAi => OpenAiClient::new(opts),
        Api::Anthropic => OpenAiClient::with_wire(opts, crate::client::Wire::AnthropicMessages),
    }
}

/// The model ids the primary provider offers (`GET {base_url}/models`,
/// with its API's authentication): proves the URL and the key work.
pub fn list_models(settings: &Settings) -> Result<Vec<String>, ClientError> {
    provider_client(settings, &settings.provider.model)?.list_models()
}

/// The model the loop talks to: the primary on `model`, then each
/// configured fallback (SPEC X2). Build one per agent: the chain remembers
/// which link the current turn runs on.
pub fn provider_model(settings: &Settings, model: &str) -> Result<Arc<FallbackModel>, ClientError> {
    let p = &settings.provider;
    let last = p.fallbacks.len();
    let mut links = Vec::with_capacity(last + 1);
    let mut add = |base_url: &str, key: Option<&str>, model: &str, api: Api, n: usize| {
        let mut opts = client_options(p, base_url, key, model, api);
        // A later link can take the call: a long rate limit is not waited out.
        opts.fail_fast_on_long_retry_after = n < last;
        // A model that sees images is sent the current turn's images from
        // $HERMES_HOME/media (SPEC X6); the Anthropic wire sends their
        // references.
        opts.images = (api == Api::OpenAi
            && crate::media::vision::sees_images(&settings.media, model))
        .then(|| MediaDir::in_home(&settings.home));
        let client: Arc<dyn Model> = match api {
            Api::OpenAi => Arc::new(OpenAiClient::new(opts)?),
            Api::Anthropic => Arc::new(AnthropicClient::new(opts)?),
        };
        links.push(Link {
            name: model.to_owned(),
            model: client,
        });
        Ok::<_, ClientError>(())
    };
    add(
        &p.base_url,
        p.api_key.as_ref().map(Secret::expose),
        model,
        p.api,
        0,
    )?;
    for (n, f) in p.fallbacks.iter().enumerate() {
        add(
            &f.base_url,
            f.api_key.as_ref().map(Secret::expose),
            &f.model,
            f.api,
            n + 1,
        )?;
    }
    let mut links = links.into_iter();
    let primary = links
        .next()
        .ok_or_else(|| ClientError::Config("no provider".into()))?;
    Ok(Arc::new(FallbackModel::new(primary, links.collect())))
}

/// The client options of one link: its address, and the chain's cache and
/// reasoning settings resolved for its model and provider.
///
/// - **Cache breakpoints** (`cache = "auto"`): for the Anthropic API and
///   for Claude models anywhere (`claude` in the model id, e.g.
///   `anthropic/claude-sonnet-4` on OpenRouter); other providers cache a
///   stable prefix by themselves and get nothing extra.
/// - **Reasoning effort**: OpenRouter's `reasoning` object on OpenRouter,
///   `reasoning_effort` elsewhere (on the Anthropic API, extended thinking
///   with a budget that grows with the effort; `none` turns it off).
/// - **Reasoning echo** (`reasoning_echo = "auto"`): OpenRouter →
///   `reasoning_details`; DeepSeek and Kimi K2 thinking models →
///   `reasoning_content`; otherwise off (strict servers reject unknown
///   message fields).
pub fn client_options(
    p: &ProviderSettings,
    base_url: &str,
    api_key: Option<&str>,
    model: &str,
    api: Api,
) -> ClientOptions {
    let id = model.to_ascii_lowercase();
    let openrouter = base_url.contains("openrouter.ai");
    let cache = match p.cache {
        CacheMode::Off => None,
        CacheMode::Anthropic => Some(()),
        CacheMode::Auto => (api == Api::Anthropic || id.contains("claude")).then_some(()),
    }
    .map(|()| CacheControl {
        one_hour: p.cache_ttl_1h,
    });
    let reasoning_echo = match p.reasoning_echo {
        EchoMode::Off => ReasoningEcho::Off,
        EchoMode::ReasoningContent => ReasoningEcho::ReasoningContent,
        EchoMode::ReasoningDetails => ReasoningEcho::ReasoningDetails,
        EchoMode::Auto if openrouter => ReasoningEcho::ReasoningDetails,
        EchoMode::Auto
            if id.contains("deepseek") || (id.contains("kimi") && id.contains("thinking")) =>
        {
            ReasoningEcho::ReasoningContent
        }
        EchoMode::Auto => ReasoningEcho::Off,
    };
    ClientOptions {
        base_url: base_url.to_owned(),
        api_key: api_key.map(str::to_owned),
        model: model.to_owned(),
        first_byte_timeout: p.first_byte_timeout,
        call_timeout: p.call_timeout,
        cache,
        reasoning_effort: p.reasoning_effort.clone(),
        reasoning_dialect: if openrouter {
            ReasoningDialect::OpenRouter
        } else {
            ReasoningDialect::OpenAi
        },
        reasoning_echo,
        ..ClientOptions::default()
    }
}

/// The client of `[provider] vision_model`, which describes images for a
/// chat model that cannot see them (SPEC X6): on the same provider, always
/// sent images, not streaming. `None` when no vision model is configured.
pub fn vision_client(settings: &Settings) -> Option<Result<OpenAiClient, ClientError>> {
    let model = settings.media.vision_model.as_deref()?;
    let p = &settings.provider;
    Some(OpenAiClient::new(ClientOptions {
        base_url: p.base_url.clone(),
        api_key: p.api_key.as_ref().map(|k| k.expose().to_owned()),
        model: model.to_owned(),
        stream: false,
        first_byte_timeout: p.first_byte_timeout.max(p.call_timeout),
        call_timeout: p.call_timeout,
        images: Some(MediaDir::in_home(&settings.home)),
        ..ClientOptions::default()
    }))
}

/// The model `vision_analyze` asks (issue 46): the chat model `model` when
/// it sees images (on the OpenAI wire), else `[provider] vision_model`;
/// `None` when neither is there.
pub fn vision_tool_client(
    settings: &Settings,
    model: &str,
) -> Option<Result<OpenAiClient, ClientError>> {
    let p = &settings.provider;
    if p.api == Api::OpenAi && crate::media::vision::sees_images(&settings.media, model) {
        return Some(OpenAiClient::new(ClientOptions {
            base_url: p.base_url.clone(),
            api_key: p.api_key.as_ref().map(|k| k.expose().to_owned()),
            model: model.to_owned(),
            stream: false,
            first_byte_timeout: p.first_byte_timeout.max(p.call_timeout),
            call_timeout: p.call_timeout,
            images: Some(MediaDir::in_home(&settings.home)),
            ..ClientOptions::default()
        }));
    }
    vision_client(settings)
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
    #[cfg(feature = "mcp")]
    pub mcp: Option<Arc<McpManager>>,
    /// How the front-end asks the user to approve a dangerous command;
    /// `None`: nobody can be asked, such commands are denied.
    pub approver: Option<Arc<dyn Approver>>,
    /// The session's "always" approvals (fresh per session).
    pub approvals: Option<Arc<SessionApprovals>>,
    /// The window policy sub-agents (`delegate_task`) compact under (SPEC
    /// X1); `None`: they do not.
    pub context: Option<ContextConfig>,
    /// The session these tools serve: its long outputs are kept in
    /// `$HERMES_HOME/tool-output/<session id>/` (SPEC Y6); `None` (a
    /// registry built before its session exists): a folder of its own.
    pub session_id: Option<String>,
    /// The session store, for `session_search` (`None`: not offered); it
    /// searches the sessions `session_id`'s record allows.
    pub store: Option<Arc<Mutex<Store>>>,
    /// Where `send_file` sends (the chat; the CLI prints the path); `None`:
    /// the tool is not offered.
    pub outbox: Option<Arc<dyn crate::tools::FileOutbox>>,
    /// Who answers `clarify` questions (the chat; the interactive CLI's
    /// terminal); `None`: the tool is not offered.
    pub clarifier: Option<Arc<dyn crate::tools::Clarifier>>,
    /// `[memory]` of a gateway: the `memory` tool writes the memory of
    /// `session_id`'s user (issue 44); `None`: `$HERMES_HOME`'s files.
    pub memory: Option<MemorySettings>,
    /// Where `terminal` starts background processes (`session_id`'s
    /// view of them); `None`: `background: true` is refused and `process`
    /// is not offered.
    pub background: Option<Arc<crate::tools::BackgroundProcesses>>,
}

impl std::fmt::Debug for ToolDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut f = f.debug_struct("ToolDeps");
        f.field("bridge", &self.bridge.is_some());
        #[cfg(feature = "mcp")]
        f.field("mcp", &self.mcp);
        f.field("approver", &self.approver.is_some())
            .finish_non_exhaustive()
    }
}

/// The environment scripts run in: the terminal's (working directory,
/// sandbox, passed-through variables, extra paths) under `settings`.
pub fn script_env(settings: &Settings) -> ToolEnv {
    let mut env = ToolEnv::new(&settings.workdir, &settings.home);
    env.allow_outside_workdir = settings.allow_outside_workdir;
    env.sandbox = settings.sandbox;
    env.env_passthrough = settings.env_passthrough.clone();
    env.sandbox_read = settings.sandbox_read.clone();
    env.sandbox_write = settings.sandbox_write.clone();
    env
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
    #[cfg(feature = "mcp")]
    {
        env.mcp = deps.mcp.clone();
    }
    env.context = deps.context.clone();
    env.repeat_guard = settings.repeat_guard;
    env.text_tool_calls = settings.text_tool_calls;
    env.tool_output_dir = Some(match &deps.session_id {
        Some(id) => crate::spill::session_dir(&settings.home, id),
        None => crate::spill::scope_dir(&settings.home),
    });
    env.memory = deps.memory.as_ref().map(|m| {
        let id = deps.session_id.as_deref().unwrap_or_default();
        m.place_of_session(&settings.home, deps.store.as_deref(), id)
    });
    env.session_search = deps.store.clone().map(|store| SearchSource {
        store,
        session_id: deps.session_id.clone(),
    });
    env.vision = match vision_tool_client(settings, &settings.provider.model) {
        Some(Ok(client)) => Some(crate::tools::VisionSource {
            model: Arc::new(client),
            media: MediaDir::in_home(&settings.home),
            session: deps
                .session_id
                .clone()
                .unwrap_or_else(|| "vision".to_owned()),
        }),
        Some(Err(e)) => {
            tracing::warn!(error = %e, "vision_analyze is not offered: its model's client failed");
            None
        }
        None => None,
    };
    env.background = deps
        .background
        .as_ref()
        .map(|procs| procs.scope(deps.session_id.as_deref().unwrap_or("local")));
    let mut tools = build_registry(&env, settings.toolsets.as_deref())?;
    if let Some(outbox) = &deps.outbox
        && crate::tools::send_file::offered(settings.toolsets.as_deref())
    {
        tools.register(Box::new(crate::tools::SendFileTool::new(
            &env,
            Arc::clone(outbox),
        )?));
    }
    if let Some(clarifier) = &deps.clarifier
        && crate::tools::clarify::offered(settings.toolsets.as_deref())
    {
        tools.register(Box::new(crate::tools::ClarifyTool::new(Arc::clone(
            clarifier,
        ))));
    }
    Ok(tools)
}

/// Whether `settings` configure MCP servers and enable the `mcp` toolset:
/// the only tools that need the async runtime (rmcp is async; the built-in
/// tools are blocking exchanges on the shared HTTP agent). Always false in
/// a build without the `mcp` feature ([`warn_if_mcp_left_out`] says so).
pub fn wants_mcp(settings: &Settings) -> bool {
    cfg!(feature = "mcp") && mcp_configured(settings)
}

/// MCP servers are configured and the `mcp` toolset is enabled.
fn mcp_configured(settings: &Settings) -> bool {
    let enabled = settings
        .toolsets
        .as_ref()
        .is_none_or(|t| t.iter().any(|n| n == "mcp"));
    enabled && !settings.mcp_servers.is_empty()
}

/// In a build without the `mcp` feature, warns (naming them) when MCP
/// servers are configured and enabled, so they are not ignored silently.
/// Does nothing in a build with it.
pub fn warn_if_mcp_left_out(settings: &Settings) {
    if cfg!(feature = "mcp") || !mcp_configured(settings) {
        return;
    }
    let names: Vec<&str> = settings
        .mcp_servers
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    tracing::warn!(
        "MCP servers are configured ({}), but this hermes was built without the `mcp` \
         feature: their tools are not offered",
        names.join(", ")
    );
}

/// The process's MCP servers, started (SPEC X7): `None` when none is
/// configured or the `mcp` toolset is not enabled. Each server gets its
/// `startup_timeout`; one that fails is reported (`hermes mcp list`, the
/// log) and tried again later, and does not stop the others.
#[cfg(feature = "mcp")]
pub fn mcp_servers(settings: &Settings, bridge: &Arc<AsyncBridge>) -> Option<Arc<McpManager>> {
    if !wants_mcp(settings) {
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

/// [`session_prompt`] carrying the memory of `place` (a gateway user's and
/// the shared memory, issue 44) instead of `$HERMES_HOME`'s.
pub fn session_prompt_for(settings: &Settings, tools: &[ToolSpec], place: &MemoryPlace) -> String {
    let sources = PromptSources {
        memory: place.clone(),
        ..PromptSources::new(&settings.home, &settings.workdir)
    };
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
        .with_repeat_guard(settings.repeat_guard)
        .with_text_tool_calls(settings.text_tool_calls)
        .with_batch_runner(Arc::new(crate::parallel::ParallelBatch::default()))
        .with_clock(Arc::new(SystemClock));
    match context {
        Some(c) => agent.with_context(c),
        None => agent,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn provider(cache: CacheMode, echo: EchoMode) -> ProviderSettings {
        ProviderSettings {
            base_url: "http://127.0.0.1:11434/v1".into(),
            api_key: None,
            model: "m".into(),
            provider_name: "local".into(),
            api: Api::OpenAi,
            cache,
            cache_ttl_1h: false,
            reasoning_effort: Some("high".into()),
            reasoning_echo: echo,
            price: None,
            fallbacks: Vec::new(),
            first_byte_timeout: crate::client::DEFAULT_FIRST_BYTE_TIMEOUT,
            call_timeout: crate::client::DEFAULT_CALL_TIMEOUT,
        }
    }

    #[test]
    fn each_link_gets_its_models_cache_and_reasoning_rules() {
        let p = provider(CacheMode::Auto, EchoMode::Auto);
        let or = "https://openrouter.ai/api/v1";
        let local = "http://127.0.0.1:11434/v1";
        let o = client_options(&p, or, None, "anthropic/claude-sonnet-4", Api::OpenAi);
        assert!(o.cache.is_some());
        assert_eq!(o.reasoning_dialect, ReasoningDialect::OpenRouter);
        assert_eq!(o.reasoning_echo, ReasoningEcho::ReasoningDetails);
        let o = client_options(&p, or, None, "openai/gpt-4o", Api::OpenAi);
        assert!(o.cache.is_none(), "OpenAI caches stable prefixes by itself");
        let o = client_options(&p, local, None, "claude-sonnet-4-5", Api::Anthropic);
        assert!(o.cache.is_some());
        assert_eq!(o.reasoning_effort.as_deref(), Some("high"));
        for (model, echo) in [
            ("deepseek-chat", ReasoningEcho::ReasoningContent),
            ("DeepSeek-V3.2", ReasoningEcho::ReasoningContent),
            ("kimi-k2-thinking", ReasoningEcho::ReasoningContent),
            ("kimi-k2-instruct", ReasoningEcho::Off),
            ("gpt-4o", ReasoningEcho::Off),
            ("qwen3:8b", ReasoningEcho::Off),
        ] {
            let o = client_options(&p, local, None, model, Api::OpenAi);
            assert_eq!(o.reasoning_echo, echo, "{model}");
            assert_eq!(o.reasoning_dialect, ReasoningDialect::OpenAi);
        }
        let p = provider(CacheMode::Anthropic, EchoMode::Off);
        let o = client_options(&p, or, None, "openai/gpt-4o", Api::OpenAi);
        assert!(o.cache.is_some());
        assert_eq!(o.reasoning_echo, ReasoningEcho::Off);
        let p = provider(CacheMode::Off, EchoMode::Auto);
        assert!(
            client_options(&p, local, None, "claude-x", Api::Anthropic)
                .cache
                .is_none()
        );
    }
}
