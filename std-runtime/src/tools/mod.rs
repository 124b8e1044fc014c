//! The built-in tools (SPEC E1, L3, L9) and the registry builder.
//!
//! Every tool implements [`hermes_core::Tool`]: a JSON-schema definition and a
//! synchronous `call`. The guarantees shared by all of them:
//!
//! - **Arguments are parsed with serde.** A missing or mistyped argument is a
//!   [`ToolError::Failed`] that names the field, so the model can retry.
//! - **Results are capped** at [`ToolEnv::result_cap_bytes`]. An over-long
//!   result is cut on a char boundary with a visible marker that says how much
//!   was left out and how to get it; nothing is dropped silently. With a
//!   [`ToolEnv::tool_output_dir`] the whole result is kept there first and
//!   the model gets its head, its tail and the file's path ([`crate::spill`]).
//! - **File tools stay inside the working directory** (SPEC E1): every path
//!   is opened by the kernel beneath a handle to the working directory, and
//!   `$HERMES_HOME`'s secrets stay refused even when the working directory
//!   contains the home (see [`workdir`](self::workdir) for the rules and
//!   the one escape hatch, [`ToolEnv::allow_outside_workdir`]).
//! - **The terminal runs in a sandbox** (SPEC E1, E2; see
//!   [`sandbox`](crate::sandbox)): Landlock limits what a command may read
//!   and write, an allow-listed environment keeps secrets out of it, and a
//!   PID namespace makes sure nothing it starts outlives it.
//! - **One registry per session.** Stateful tools (`todo`) keep their state in
//!   the tool instance unless [`ToolEnv::todo_state`] hands them a per-session
//!   [`TodoState`], so [`build_registry`] must be called once per session.
//!
//! Tools are grouped into toolsets ([`TOOLSETS`]) that a configuration enables
//! by name.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hermes_core::{Model, SchemaText, Tool, ToolError, ToolRegistry, ToolSpec};
use serde::de::DeserializeOwned;

use crate::bridge::AsyncBridge;
#[cfg(feature = "mcp")]
use crate::mcp::McpManager;
use crate::spill;

pub mod approval;
pub(crate) mod arguments;
pub mod background;
pub mod clarify;
pub mod cronjob;
#[cfg(feature = "delegate")]
mod delegate;
mod fs;
pub(crate) mod html_scan;
pub(crate) mod html_text;
mod memory;
#[cfg(feature = "documents")]
mod scan;
pub mod script;
mod search;
pub mod send_file;
pub mod session_search;
mod skills;
mod terminal;
mod todo;
mod vision;
#[cfg(feature = "web")]
pub(crate) mod web;
pub(crate) mod web_search;
mod workdir;

pub use crate::sandbox::{SandboxMode, SandboxStatus, child_env, forbid_inspection, landlock_abi};
pub use approval::{
    ApprovalGate, ApprovalMode, ApprovalRequest, Approver, DANGERS, Decision, SessionApprovals,
};
pub use background::{
    BackgroundLimits, BackgroundProcesses, BackgroundScope, BackgroundSink, FinishedProcess,
    ProcessTool, StartedProcess,
};
pub use clarify::{Answer, Clarifier, ClarifyTool, NoAnswer, Question};
pub use cronjob::CronjobTool;
#[cfg(feature = "delegate")]
pub use delegate::DelegateTool;
pub use fs::{PatchTool, ReadFileTool, WriteFileTool};
pub use html_text::html_to_text;
pub use memory::{DEFAULT_MEMORY_CAP_BYTES, MEMORY_ENTRY_SEPARATOR, MemoryTool};
pub use search::SearchFilesTool;
pub use send_file::{ConfinedFiles, FileKind, FileOutbox, OutboundFile, ReadFile, SendFileTool};
pub use session_search::{SearchSource, SessionSearchTool};
pub use skills::{SkillManageTool, SkillViewTool, SkillsListTool};
pub use terminal::TerminalTool;
pub use todo::{TodoState, TodoTool};
pub use vision::{VisionAnalyzeTool, VisionSource, is_public};
#[cfg(feature = "web")]
pub use web::WebFetchTool;
pub use web_search::{SearchBackend, WebSearchSettings, WebSearchTool};

pub(crate) use workdir::{Access, Workdir};

/// Default cap on one tool result, in bytes (about 12k tokens).
pub const DEFAULT_RESULT_CAP_BYTES: usize = 50_000;

/// The toolsets a configuration can enable, and the tools each one holds.
pub const TOOLSETS: &[(&str, &[&str])] = &[
    (
        "file",
        &["read_file", "write_file", "patch", "search_files"],
    ),
    ("terminal", &["terminal"]),
    ("web", &["web_fetch", "web_search"]),
    ("memory", &["memory"]),
    ("todo", &["todo"]),
    ("skills", &["skills_list", "skill_view", "skill_manage"]),
    ("delegate", &["delegate_task"]),
    // The tools of the configured MCP servers, `mcp_SERVER_TOOL`; which
    // ones depends on the servers.
    ("mcp", &[]),
    // Scheduled jobs (SPEC Y1): registered by the front-ends, which hold
    // the store and know the chat (`cronjob::offered`); never in a cron
    // run or a sub-agent.
    ("cronjob", &["cronjob"]),
    // The user's earlier sessions (SPEC Y6): offered when the front-end
    // hands the store and the session over (`ToolEnv::session_search`).
    ("session_search", &["session_search"]),
    // Files for the user (`send_file`): registered by the front-ends,
    // which know where a file goes (the chat; the CLI prints its path).
    ("send_file", &["send_file"]),
    // Messages to home channels and allowed chats (issue 43): the
    // gateway's, which holds the scheduler's outbox.
    ("send_message", &["send_message"]),
    // Questions about images (issue 46): offered when a model that sees
    // images is configured (`ToolEnv::vision`).
    ("vision", &["vision_analyze"]),
    // Questions with choices for the user (issue 46): registered by the
    // front-ends where someone can answer (`clarify::offered`); never in a
    // cron run, a webhook, the API server or a sub-agent.
    ("clarify", &["clarify"]),
];

/// What the tools need from the process that hosts them.
#[derive(Clone)]
pub struct ToolEnv {
    /// The directory file and shell tools work in and are confined to.
    pub workdir: PathBuf,
    /// `$HERMES_HOME`: where `MEMORY.md` and `USER.md` live.
    pub hermes_home: PathBuf,
    /// Whose memory `memory` writes (a gateway user's, issue 44); `None`:
    /// `$HERMES_HOME`'s files, as in the CLI.
    pub memory: Option<crate::memory_scope::MemoryPlace>,
    /// Lets the file tools (and the terminal's `workdir` argument) reach
    /// paths outside `workdir` (`[agent] allow_outside_workdir`,
    /// `--allow-outside-workdir`). `$HERMES_HOME` stays refused.
    pub allow_outside_workdir: bool,
    /// Whether the terminal runs commands in the sandbox (`[agent] sandbox`,
    /// `--no-sandbox`).
    pub sandbox: SandboxMode,
    /// Environment variables passed to commands besides the allow-list
    /// (`[agent] env_passthrough`; a trailing `*` matches a prefix).
    pub env_passthrough: Vec<String>,
    /// Extra paths sandboxed commands may read and execute
    /// (`[agent] sandbox_read`).
    pub sandbox_read: Vec<PathBuf>,
    /// Extra paths sandboxed commands may read and write
    /// (`[agent] sandbox_write`).
    pub sandbox_write: Vec<PathBuf>,
    /// The persistent async runtime for async tools (SPEC L9). The built-in
    /// network tools are blocking (the shared HTTP agent) and need none.
    pub bridge: Option<Arc<AsyncBridge>>,
    /// The model sub-agents run on. Without it the `delegate` toolset is
    /// unavailable.
    pub delegate_model: Option<Arc<dyn Model>>,
    /// The largest result a tool returns, in bytes; longer ones are cut
    /// visibly.
    pub result_cap_bytes: usize,
    /// The `todo` list of this session. A front-end that rebuilds the
    /// registry during one session (the gateway after evicting a cached
    /// agent) passes the same state every time, and a fresh one for a new
    /// session (`/new`), so the list follows the conversation and not the
    /// tool instance (SPEC G4). `None`: every registry gets its own list.
    pub todo_state: Option<Arc<TodoState>>,
    /// The context window policy sub-agents (`delegate_task`) compact their
    /// own conversation under (SPEC X1); `None`: they do not.
    pub context: Option<hermes_core::ContextConfig>,
    /// The repeat guard sub-agents run under (SPEC Y6); `None`: off.
    pub repeat_guard: Option<hermes_core::RepeatGuard>,
    /// Whether sub-agents run tool calls their model writes as text
    /// (`[agent] text_tool_calls`, issue 38).
    pub text_tool_calls: bool,
    /// Where outputs past the cap are kept whole
    /// (`$HERMES_HOME/tool-output/<scope>`, SPEC Y6); `None`: they are cut.
    pub tool_output_dir: Option<PathBuf>,
    /// The store and the session `session_search` searches for (the scope
    /// comes from that session's record); `None`: the tool is not offered.
    pub session_search: Option<SearchSource>,
    /// Approval of dangerous terminal commands (`[agent] approvals` and
    /// the front-end's way of asking). The default asks nobody, so
    /// dangerous commands are denied until a front-end provides an
    /// approver or the user turns approvals off.
    pub approval: ApprovalGate,
    /// `[web]`: the search backend.
    pub web_search: WebSearchSettings,
    /// The model `vision_analyze` asks and where its images go; `None`:
    /// the tool is not offered.
    pub vision: Option<VisionSource>,
    /// Where `terminal` starts background processes (this session's view
    /// of them) and what `process` manages; `None`: neither is offered.
    pub background: Option<BackgroundScope>,
    /// The process's MCP servers. Without it the `mcp` toolset is empty.
    #[cfg(feature = "mcp")]
    pub mcp: Option<Arc<McpManager>>,
}

impl fmt::Debug for ToolEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut f = f.debug_struct("ToolEnv");
        f.field("workdir", &self.workdir)
            .field("hermes_home", &self.hermes_home)
            .field("memory", &self.memory)
            .field("allow_outside_workdir", &self.allow_outside_workdir)
            .field("sandbox", &self.sandbox)
            .field("env_passthrough", &self.env_passthrough)
            .field("sandbox_read", &self.sandbox_read)
            .field("sandbox_write", &self.sandbox_write)
            .field("bridge", &self.bridge.is_some())
            .field("delegate_model", &self.delegate_model.is_some())
            .field("result_cap_bytes", &self.result_cap_bytes)
            .field("todo_state", &self.todo_state.is_some())
            .field("context", &self.context.is_some())
            .field("repeat_guard", &self.repeat_guard)
            .field("text_tool_calls", &self.text_tool_calls)
            .field("tool_output_dir", &self.tool_output_dir)
            .field("session_search", &self.session_search)
            .field("approval", &self.approval)
            .field("web_search", &self.web_search)
            .field("vision", &self.vision)
            .field("background", &self.background.is_some());
        #[cfg(feature = "mcp")]
        f.field("mcp", &self.mcp.is_some());
        f.finish()
    }
}

impl ToolEnv {
    /// An environment confined to `workdir`, with no bridge, no delegate
    /// model and the default result cap.
    pub fn new(workdir: impl Into<PathBuf>, hermes_home: impl Into<PathBuf>) -> Self {
        ToolEnv {
            workdir: workdir.into(),
            hermes_home: hermes_home.into(),
            memory: None,
            allow_outside_workdir: false,
            sandbox: SandboxMode::On,
            env_passthrough: Vec::new(),
            sandbox_read: Vec::new(),
            sandbox_write: Vec::new(),
            bridge: None,
            delegate_model: None,
            result_cap_bytes: DEFAULT_RESULT_CAP_BYTES,
            todo_state: None,
            context: None,
            repeat_guard: None,
            text_tool_calls: true,
            tool_output_dir: None,
            session_search: None,
            approval: ApprovalGate::default(),
            web_search: WebSearchSettings::default(),
            vision: None,
            background: None,
            #[cfg(feature = "mcp")]
            mcp: None,
        }
    }
}

/// Why a registry could not be built. The caller (CLI, gateway) reports it as
/// a configuration error; nothing is retryable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolsError {
    /// A configured toolset name does not exist.
    #[error("unknown toolset '{name}'; valid toolsets are: {valid}")]
    UnknownToolset {
        /// The name given.
        name: String,
        /// The valid names, comma-separated.
        valid: String,
    },
    /// A toolset was asked for explicitly but the environment lacks what it
    /// needs (`delegate` without a model).
    #[error("toolset '{toolset}' is unavailable: {reason}")]
    Unavailable {
        /// The toolset.
        toolset: String,
        /// What is missing.
        reason: String,
    },
    /// The working directory does not exist or cannot be resolved.
    #[error("working directory {path} is not usable: {source}")]
    Workdir {
        /// The configured directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// Builds the tools of one session. `enabled_toolsets = None` enables every
/// toolset the environment can support (`delegate` needs a model; it is
/// left out silently when that is missing). Naming a
/// toolset explicitly that cannot work is an error, as is an unknown name.
pub fn build_registry(
    env: &ToolEnv,
    enabled_toolsets: Option<&[String]>,
) -> Result<ToolRegistry, ToolsError> {
    let workdir = Workdir::new(env)?;
    let (names, explicit): (Vec<&str>, bool) = match enabled_toolsets {
        None => (TOOLSETS.iter().map(|(n, _)| *n).collect(), false),
        Some(list) => {
            let mut names = Vec::new();
            for name in list {
                let Some((known, _)) = TOOLSETS.iter().find(|(n, _)| *n == name.as_str()) else {
                    return Err(ToolsError::UnknownToolset {
                        name: name.clone(),
                        valid: TOOLSETS
                            .iter()
                            .map(|(n, _)| *n)
                            .collect::<Vec<_>>()
                            .join(", "),
                    });
                };
                if !names.contains(known) {
                    names.push(*known);
                }
            }
            (names, true)
        }
    };
    build_from(env, &workdir, &names, explicit)
}

/// Registers the tools of `toolsets` (already validated names).
fn build_from(
    env: &ToolEnv,
    workdir: &Workdir,
    toolsets: &[&str],
    explicit: bool,
) -> Result<ToolRegistry, ToolsError> {
    build_wrapped(env, workdir, toolsets, explicit, &|tool| tool)
}

/// [`build_from`], passing every tool through `wrap` before registering it
/// (a sub-agent's tools are wrapped to see the parent's interrupt flag).
fn build_wrapped(
    env: &ToolEnv,
    workdir: &Workdir,
    toolsets: &[&str],
    explicit: bool,
    wrap: &dyn Fn(Box<dyn Tool>) -> Box<dyn Tool>,
) -> Result<ToolRegistry, ToolsError> {
    let cap = env.result_cap_bytes.max(MIN_RESULT_CAP);
    let mut reg = ToolRegistry::new();
    if let Some(dir) = workdir.spill_dir() {
        reg.set_output_keeper(Arc::new(spill::DiskKeeper {
            dir: dir.to_path_buf(),
        }));
    }
    #[cfg(feature = "mcp")]
    let mut want_mcp = None;
    let keep_in = workdir.spill_dir().map(Path::to_path_buf);
    let mut add = |tool: Box<dyn Tool>| {
        let tool: Box<dyn Tool> = match &keep_in {
            Some(dir) => Box::new(spill::Keeping {
                inner: tool,
                dir: dir.clone(),
            }),
            None => tool,
        };
        reg.register(wrap(tool));
    };
    for name in toolsets {
        match *name {
            "file" => {
                add(Box::new(
                    ReadFileTool::new(workdir.clone(), cap).with_vision(env.vision.clone()),
                ));
                add(Box::new(WriteFileTool::new(workdir.clone())));
                add(Box::new(PatchTool::new(workdir.clone())));
                add(Box::new(SearchFilesTool::new(workdir.clone(), cap)));
            }
            "terminal" => {
                if let Some(scope) = &env.background {
                    add(Box::new(ProcessTool::new(scope.clone())));
                }
                add(Box::new(TerminalTool::new(
                    workdir.clone(),
                    terminal::TerminalSettings {
                        mode: env.sandbox,
                        env_passthrough: env.env_passthrough.clone(),
                        extra_read: env.sandbox_read.clone(),
                        extra_write: env.sandbox_write.clone(),
                        approval: env.approval.clone(),
                    },
                    cap,
                    env.background.clone(),
                )))
            }
            #[cfg(feature = "web")]
            "web" => {
                add(Box::new(WebFetchTool::new(cap)));
                add(Box::new(WebSearchTool::new(env.web_search.clone(), cap)));
            }
            "memory" => add(Box::new(match &env.memory {
                Some(place) => MemoryTool::for_place(place.clone(), DEFAULT_MEMORY_CAP_BYTES),
                None => MemoryTool::new(env.hermes_home.clone()),
            })),
            // Skills live in the home; without one there is nowhere to keep them.
            "skills" if env.hermes_home.as_os_str().is_empty() && explicit => {
                return Err(ToolsError::Unavailable {
                    toolset: "skills".into(),
                    reason: "no $HERMES_HOME is configured".into(),
                });
            }
            "skills" if env.hermes_home.as_os_str().is_empty() => {}
            "skills" => {
                let home = crate::skills::SkillsHome::new(&env.hermes_home);
                add(Box::new(SkillsListTool::new(home.clone())));
                add(Box::new(SkillViewTool::new(home.clone(), cap)));
                add(Box::new(SkillManageTool::new(home)));
            }
            // Registered after the built-ins, whose names they must not take.
            #[cfg(feature = "mcp")]
            "mcp" => match &env.mcp {
                Some(mcp) => want_mcp = Some(mcp),
                None if explicit => {
                    return Err(ToolsError::Unavailable {
                        toolset: "mcp".into(),
                        reason:
                            "no MCP server is configured (add [mcp.servers.NAME] to config.toml)"
                                .into(),
                    });
                }
                None => {}
            },
            "todo" => add(Box::new(match &env.todo_state {
                Some(state) => TodoTool::with_state(state.clone()),
                None => TodoTool::new(),
            })),
            #[cfg(feature = "delegate")]
            "delegate" => match &env.delegate_model {
                Some(model) => {
                    let child_toolsets: Vec<String> = toolsets
                        .iter()
                        .filter(|n| **n != "delegate")
                        .map(|n| (*n).to_string())
                        .collect();
                    add(Box::new(DelegateTool::new(
                        model.clone(),
                        env.clone(),
                        child_toolsets,
                    )));
                }
                None if explicit => {
                    return Err(ToolsError::Unavailable {
                        toolset: "delegate".into(),
                        reason: "no model for sub-agents was provided".into(),
                    });
                }
                None => {}
            },
            // The front-ends register them (see `cronjob::offered`,
            // `send_file::offered`, the gateway's `send_message`): they know the chat.
            "cronjob" | "send_file" | "send_message" | "clarify" => {}
            "vision" => {
                if let Some(source) = &env.vision {
                    add(Box::new(VisionAnalyzeTool::new(
                        workdir.clone(),
                        source.clone(),
                        cap,
                    )));
                }
            }
            // Only with the store; the session it serves scopes the search.
            "session_search" => {
                if let Some(source) = &env.session_search {
                    add(Box::new(SessionSearchTool::new(source.clone())));
                }
            }
            // Left out of this build (a cargo feature).
            other if explicit => {
                return Err(ToolsError::Unavailable {
                    toolset: other.into(),
                    reason: format!("this hermes was built without the `{other}` feature"),
                });
            }
            _ => {}
        }
    }
    #[cfg(feature = "mcp")]
    if let Some(mcp) = want_mcp {
        let taken: Vec<String> = reg.specs().iter().map(|s| s.name.clone()).collect();
        for tool in mcp.tools(cap, &taken) {
            reg.register(wrap(tool));
        }
    }
    Ok(reg)
}

/// Below this a cap would leave no room for the marker itself.
const MIN_RESULT_CAP: usize = 256;

/// Parses a tool's JSON arguments; the error names the offending field.
pub(crate) fn parse_args<T: DeserializeOwned>(tool: &str, arguments: &str) -> Result<T, ToolError> {
    let arguments = if arguments.trim().is_empty() {
        "{}"
    } else {
        arguments
    };
    let de = &mut serde_json::Deserializer::from_str(arguments);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let place = if path == "." || path.is_empty() {
            String::new()
        } else {
            format!(" (field '{path}')")
        };
        ToolError::Failed(format!(
            "Error: bad arguments for {tool}{place}: {inner}. Check the tool's schema and call it again."
        ))
    })
}

/// A built-in tool's definition, its schema the compact JSON text that
/// [`hermes_core::schema_text!`] made of the source's (see there why text).
///
/// The texts are the program's own, and the tests build every tool
/// (`tests/tools/registry.rs`): a debug build refuses one that is not JSON
/// ([`SchemaText::from_static`]).
pub(crate) fn spec(name: &str, description: impl Into<String>, schema: &'static str) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        description: description.into(),
        parameters: SchemaText::from_static(schema),
    }
}

/// [`spec`], for a schema that states bounds the tool enforces from
/// constants (`"maximum": 600` where the code stops at `MAX_TIMEOUT_S`):
/// each (property, keyword, constant) is checked against the text
/// whenever a debug build makes the definition, as every test that builds
/// the tool does, so the two cannot drift apart unseen.
pub(crate) fn bounded_spec(
    name: &str,
    description: impl Into<String>,
    schema: &'static str,
    bounds: &[(&str, &str, u64)],
) -> ToolSpec {
    #[cfg(debug_assertions)]
    {
        let value: serde_json::Value = serde_json::from_str(schema).unwrap_or_default();
        for &(property, keyword, bound) in bounds {
            debug_assert_eq!(
                value["properties"][property][keyword].as_u64(),
                Some(bound),
                "{name}'s schema: {property}.{keyword}"
            );
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = bounds;
    spec(name, description, schema)
}

/// Shorthand for a model-facing failure.
pub(crate) fn failed(msg: impl Into<String>) -> ToolError {
    ToolError::Failed(msg.into())
}
