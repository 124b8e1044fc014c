//! Building an agent from [`Settings`]: the one recipe the CLI and the
//! gateway share, so a conversation behaves the same in both.

use std::sync::Arc;

use hermes_core::{Agent, ContextConfig, Model, ToolRegistry, ToolSpec};

use crate::bridge::AsyncBridge;
use crate::client::{ClientError, ClientOptions, OpenAiClient};
use crate::config::Settings;
use crate::media::MediaDir;
use crate::prompt::{PromptSources, assemble_system_prompt};
use crate::store::SystemClock;
use crate::tools::{TodoState, ToolEnv, ToolsError, build_registry};

/// The provider client for `settings`, talking to `model`. A model that
/// sees images ([`crate::media::vision::sees_images`]) is sent the current
/// turn's images from `$HERMES_HOME/media` (SPEC X6).
pub fn provider_client(settings: &Settings, model: &str) -> Result<OpenAiClient, ClientError> {
    let p = &settings.provider;
    let images = crate::media::vision::sees_images(&settings.media, model)
        .then(|| MediaDir::in_home(&settings.home));
    OpenAiClient::new(ClientOptions {
        base_url: p.base_url.clone(),
        api_key: p.api_key.clone(),
        model: model.to_owned(),
        first_byte_timeout: p.first_byte_timeout,
        call_timeout: p.call_timeout,
        images,
        ..ClientOptions::default()
    })
}

/// The client of `[provider] vision_model`, which describes images for a
/// chat model that cannot see them (SPEC X6): on the same provider, always
/// sent images, not streaming. `None` when no vision model is configured.
pub fn vision_client(settings: &Settings) -> Option<Result<OpenAiClient, ClientError>> {
    let model = settings.media.vision_model.as_deref()?;
    let p = &settings.provider;
    Some(OpenAiClient::new(ClientOptions {
        base_url: p.base_url.clone(),
        api_key: p.api_key.clone(),
        model: model.to_owned(),
        stream: false,
        first_byte_timeout: p.first_byte_timeout.max(p.call_timeout),
        call_timeout: p.call_timeout,
        images: Some(MediaDir::in_home(&settings.home)),
        ..ClientOptions::default()
    }))
}

/// The tools of one session: the configured toolsets, confined to the
/// configured working directory; sub-agents (`delegate_task`) run on
/// `model`, network tools on `bridge`. `todo` is the session's task list,
/// kept outside the registry so it survives rebuilds (a cached agent may be
/// dropped at any time, SPEC G4).
/// `context`, when given, is the window policy sub-agents compact under.
pub fn session_tools(
    settings: &Settings,
    bridge: Option<Arc<AsyncBridge>>,
    model: Arc<dyn Model>,
    todo: Option<Arc<TodoState>>,
    context: Option<ContextConfig>,
) -> Result<ToolRegistry, ToolsError> {
    let mut env = ToolEnv::new(&settings.workdir, &settings.home);
    env.allow_outside_workdir = settings.allow_outside_workdir;
    env.sandbox = settings.sandbox;
    env.env_passthrough = settings.env_passthrough.clone();
    env.sandbox_read = settings.sandbox_read.clone();
    env.sandbox_write = settings.sandbox_write.clone();
    env.bridge = bridge;
    env.delegate_model = Some(model);
    env.todo_state = todo;
    env.context = context;
    build_registry(&env, settings.toolsets.as_deref())
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
