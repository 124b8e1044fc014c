//! The process's MCP servers ([`McpManager`]) and their tools as hermes
//! tools ([`McpTool`]).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_core::{Tool, ToolContext, ToolError, ToolSpec};

use super::config::ServerConfig;
use super::render;
use super::server::Server;
use crate::bridge::AsyncBridge;

/// A server that failed to start is tried again (when a registry is built)
/// at most this often.
const RETRY_FAILED_AFTER: Duration = Duration::from_secs(60);

/// Where a server stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerState {
    /// Never started.
    NotStarted,
    /// Starting now.
    Starting,
    /// Connected and initialized.
    Running,
    /// Could not be started (why).
    Failed(String),
    /// Was running and stopped (why); the next call restarts it.
    Stopped(String),
}

impl std::fmt::Display for ServerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerState::NotStarted => f.write_str("not started"),
            ServerState::Starting => f.write_str("starting"),
            ServerState::Running => f.write_str("running"),
            ServerState::Failed(why) => write!(f, "failed: {why}"),
            ServerState::Stopped(why) => write!(f, "stopped ({why}); restarts on next use"),
        }
    }
}

/// One tool a server offers.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolInfo {
    /// The server's own name for it.
    pub name: String,
    /// Its description (or title).
    pub description: String,
    /// The JSON schema of its arguments, as the server gave it.
    pub input_schema: serde_json::Value,
    /// The server marks it read-only (`annotations.readOnlyHint`): its
    /// calls may run alongside other read-only calls (SPEC Y6).
    pub read_only: bool,
}

/// What `hermes mcp list` shows of a server. No secrets.
#[derive(Clone, Debug)]
pub struct ServerStatus {
    /// Its configured name.
    pub name: String,
    /// The command line or URL.
    pub target: String,
    /// Its state.
    pub state: ServerState,
    /// The tools of the last successful start.
    pub tools: Vec<ToolInfo>,
    /// The process id of a running stdio server.
    pub pid: Option<u32>,
    /// How many times it was started successfully (1 = never restarted).
    pub starts: u32,
    /// The server's name and version, from the handshake.
    pub server_info: Option<String>,
    /// The last lines of its stderr when it failed (secrets replaced).
    pub stderr: Vec<String>,
    /// When a start was last attempted.
    pub last_attempt: Option<Instant>,
}

/// The process's MCP servers.
pub struct McpManager {
    servers: Vec<Arc<Server>>,
    bridge: Arc<AsyncBridge>,
}

impl std::fmt::Debug for McpManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpManager")
            .field("servers", &self.servers)
            .finish_non_exhaustive()
    }
}

impl McpManager {
    /// A manager for `configs`; stdio servers without a `cwd` run in
    /// `workdir`. Nothing starts until [`start`](Self::start) or first use.
    pub fn new(configs: Vec<ServerConfig>, workdir: &Path, bridge: Arc<AsyncBridge>) -> Self {
        McpManager {
            servers: configs
                .into_iter()
                .map(|c| Arc::new(Server::new(c, workdir.to_owned())))
                .collect(),
            bridge,
        }
    }

    /// Whether no server is configured.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Starts every server that is not running, all at once, and waits until
    /// each has started or failed (each within its `startup_timeout`).
    /// Failures are logged and shown by [`status`](Self::status); they do not
    /// stop the others.
    pub fn start(&self) {
        self.start_where(|_| true);
    }

    fn start_where(&self, pick: impl Fn(&ServerStatus) -> bool) {
        let servers: Vec<Arc<Server>> = self
            .servers
            .iter()
            .filter(|s| {
                let st = s.status();
                st.state != ServerState::Running && pick(&st)
            })
            .cloned()
            .collect();
        if servers.is_empty() {
            return;
        }
        let started = self.bridge.block_on(async move {
            let tasks: Vec<_> = servers
                .into_iter()
                .map(|s| crate::task::spawn(async move { s.connected().await.map(|_| ()) }))
                .collect();
            for t in tasks {
                let _ = t.await;
            }
        });
        if let Err(e) = started {
            tracing::warn!("starting the MCP servers did not finish: {e}");
        }
    }

    /// The servers' states, in configuration (name) order.
    pub fn status(&self) -> Vec<ServerStatus> {
        self.servers.iter().map(|s| s.status()).collect()
    }

    /// The tools of every server that has started at least once, ready for a
    /// registry (results capped at `cap` bytes). A server that failed to
    /// start and has no known tools is tried again first, at most once a
    /// minute. A name already taken (by a built-in or an earlier server) is
    /// skipped with a warning.
    pub fn tools(&self, cap: usize, taken: &[String]) -> Vec<Box<dyn Tool>> {
        self.start_where(|st| {
            st.tools.is_empty()
                && matches!(st.state, ServerState::Failed(_) | ServerState::NotStarted)
                && st
                    .last_attempt
                    .is_none_or(|t| t.elapsed() >= RETRY_FAILED_AFTER)
        });
        let mut names: Vec<String> = taken.to_vec();
        let mut out: Vec<Box<dyn Tool>> = Vec::new();
        for server in &self.servers {
            for info in server.status().tools {
                let name = render::tool_name(&server.config.name, &info.name);
                if names.contains(&name) {
                    tracing::warn!(
                        server = %server.config.name,
                        tool = %info.name,
                        "MCP tool skipped: the name {name} is already taken"
                    );
                    continue;
                }
                names.push(name.clone());
                out.push(Box::new(McpTool::new(
                    name,
                    server.clone(),
                    info,
                    self.bridge.clone(),
                    cap,
                )));
            }
        }
        out
    }

    /// Closes every session and stops every server process.
    pub fn shutdown(&self) {
        let servers = self.servers.clone();
        let _ = self.bridge.block_on(async move {
            let tasks: Vec<_> = servers
                .into_iter()
                .map(|s| crate::task::spawn(async move { s.shutdown().await }))
                .collect();
            for t in tasks {
                let _ = t.await;
            }
        });
    }
}

/// One server tool, as a hermes tool.
struct McpTool {
    spec: ToolSpec,
    read_only: bool,
    server: Arc<Server>,
    tool: String,
    bridge: Arc<AsyncBridge>,
    cap: usize,
}

impl std::fmt::Debug for McpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTool")
            .field("name", &self.spec.name)
            .finish_non_exhaustive()
    }
}

impl McpTool {
    fn new(
        name: String,
        server: Arc<Server>,
        info: ToolInfo,
        bridge: Arc<AsyncBridge>,
        cap: usize,
    ) -> Self {
        let mut schema = info.input_schema;
        if let Some(obj) = schema.as_object_mut() {
            // Providers insist on an object schema; servers sometimes omit
            // the type (or send `{}` for "no arguments").
            obj.entry("type").or_insert_with(|| "object".into());
            if obj.get("type").and_then(|t| t.as_str()) == Some("object") {
                obj.entry("properties")
                    .or_insert_with(|| serde_json::Value::Object(Default::default()));
            }
        } else {
            schema = serde_json::json!({"type": "object", "properties": {}});
        }
        let description = if info.description.trim().is_empty() {
            format!(
                "Tool '{}' of the MCP server '{}'.",
                info.name, server.config.name
            )
        } else {
            format!("[MCP server '{}'] {}", server.config.name, info.description)
        };
        McpTool {
            spec: ToolSpec::new(name, description, schema),
            read_only: info.read_only,
            server,
            tool: info.name,
            bridge,
            cap,
        }
    }
}

impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn call(&self, arguments: &str, ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let arguments = if arguments.trim().is_empty() {
            "{}"
        } else {
            arguments
        };
        let arguments = match serde_json::from_str::<serde_json::Value>(arguments) {
            Ok(serde_json::Value::Object(map)) => map,
            Ok(_) | Err(_) => {
                return Err(ToolError::Failed(format!(
                    "Error: bad arguments for {}: they must be a JSON object matching the tool's schema.",
                    self.spec.name
                )));
            }
        };
        let server = self.server.clone();
        let tool = self.tool.clone();
        // Starting may come first; the server's own deadlines come before
        // this backstop.
        let config = &self.server.config;
        let backstop = config.startup_timeout + config.max_call_time + Duration::from_secs(15);
        let interrupt = ctx.interrupt;
        let text = self.bridge.run_tool_interruptible(
            backstop,
            &|| interrupt.is_set(),
            move |stop| async move { server.call(&tool, arguments, stop).await },
        )?;
        Ok(crate::spill::cap_result(
            text,
            self.cap,
            "the MCP tool's output was cut; ask it for less",
        ))
    }
}
