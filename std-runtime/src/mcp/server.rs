//! One configured MCP server: its connection, kept alive between calls on
//! the persistent runtime, and what happens when it fails.
//!
//! - **One session per server per process.** The first use starts the
//!   server (or opens the HTTP session) and runs the `initialize`
//!   handshake; every later call reuses it, so state a server keeps
//!   between calls survives (SPEC L9). Concurrent calls share it.
//! - **A server that died while idle** (it exited, or the HTTP session
//!   broke) is restarted by the next call, whose result then starts with
//!   a note that earlier state is gone.
//! - **A server that dies during a call** fails that call with a clear
//!   error (the call's outcome is unknown, so it is not retried); the next
//!   call restarts it.
//! - **A call that outlives its timeout** (no progress for `timeout`, or
//!   more than `max_call_time` in all) is cancelled (`notifications/
//!   cancelled`). The server is then pinged: an answer means it is alive
//!   and just slow (the error says how to raise the timeout); silence means
//!   it hangs, so it is stopped and restarted on the next call.
//! - **Generations**: every connection has a number, so a failure seen by
//!   a call that started on an old connection never tears down a newer one.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hermes_core::ToolError;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientCapabilities,
    ClientConfig, ClientRequest, Implementation, JsonObject, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RunningService, ServiceError};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use tokio::sync::oneshot;

use super::config::{ServerConfig, Transport};
use super::stdio::{self, ServerProcess, describe_exit, redact};
use super::{ServerState, ServerStatus, ToolInfo};
use crate::sync::lock;

/// The longest JSON-RPC line accepted from a stdio server (a tool result
/// bigger than this is refused, not buffered).
const MAX_LINE: usize = 8 * 1024 * 1024;
/// How long a ping may take when deciding whether a slow server hangs.
const PING_TIMEOUT: Duration = Duration::from_secs(5);
/// Lines of stderr quoted when a server fails to start.
const STDERR_LINES_SHOWN: usize = 6;

/// The client side of the MCP session: who we are. Server notifications
/// take rmcp's defaults (ignored; progress resets a call's timeout inside
/// rmcp), and requests from the server (sampling, elicitation) are refused:
/// hermes does not declare those capabilities.
#[derive(Debug, Clone)]
pub(crate) struct Handler;

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("hermes", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// A live session.
struct Live {
    generation: u64,
    service: RunningService<RoleClient, Handler>,
    /// The server's process (stdio servers only).
    process: Option<ServerProcess>,
}

impl Live {
    /// Why this session can no longer be used, if it cannot.
    fn gone(&self) -> Option<String> {
        if let Some(p) = &self.process
            && let Some(status) = p.exit_status()
        {
            return Some(describe_exit(status));
        }
        (self.service.is_closed() || self.service.peer().is_transport_closed())
            .then(|| "its connection closed".to_owned())
    }
}

/// One server and its (re)connections.
pub(crate) struct Server {
    pub(crate) config: ServerConfig,
    workdir: PathBuf,
    secrets: Vec<String>,
    /// The session; the async lock also serialises (re)starts.
    live: tokio::sync::Mutex<Option<Live>>,
    /// What `hermes mcp list` and the registry read, without the async lock.
    status: Mutex<ServerStatus>,
    generations: AtomicU64,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A call's outcome before it becomes a tool result.
type CallResult = Result<String, ToolError>;

fn failed(msg: impl Into<String>) -> ToolError {
    ToolError::Failed(msg.into())
}

impl Server {
    pub(crate) fn new(config: ServerConfig, workdir: PathBuf) -> Self {
        let status = ServerStatus {
            name: config.name.clone(),
            target: config.describe(),
            state: ServerState::NotStarted,
            tools: Vec::new(),
            pid: None,
            starts: 0,
            server_info: None,
            stderr: Vec::new(),
            last_attempt: None,
        };
        Server {
            secrets: config.secrets(),
            config,
            workdir,
            live: tokio::sync::Mutex::new(None),
            status: Mutex::new(status),
            generations: AtomicU64::new(0),
        }
    }

    pub(crate) fn status(&self) -> ServerStatus {
        lock(&self.status).clone()
    }

    fn name(&self) -> &str {
        &self.config.name
    }

    /// Starts the server (if it is not running) and returns its peer, the
    /// connection's generation, and a note when it had to be restarted.
    pub(crate) async fn connected(
        &self,
    ) -> Result<(Peer<RoleClient>, u64, Option<String>), String> {
        let mut live = self.live.lock().await;
        let mut note = None;
        if let Some(current) = live.as_ref() {
            match current.gone() {
                None => {
                    return Ok((current.service.peer().clone(), current.generation, None));
                }
                Some(why) => {
                    tracing::warn!(server = %self.name(), "MCP server had stopped ({why}); restarting it");
                    note = Some(format!(
                        "[note: MCP server '{}' had stopped ({why}) and was restarted; anything it \
                         kept from earlier calls is gone]\n",
                        self.name()
                    ));
                    *live = None;
                }
            }
        }
        {
            let mut status = lock(&self.status);
            status.last_attempt = Some(Instant::now());
            status.state = ServerState::Starting;
        }
        let started = tokio::time::timeout(self.config.startup_timeout, self.start()).await;
        let result = match started {
            Ok(Ok(session)) => Ok(session),
            Ok(Err((why, process))) => Err((why, process)),
            Err(_) => Err((
                format!(
                    "it did not finish starting within {:?} (raise [mcp.servers.{}] startup_timeout)",
                    self.config.startup_timeout,
                    self.name()
                ),
                None,
            )),
        };
        match result {
            Ok((service, process, tools)) => {
                let generation = self.generations.fetch_add(1, Ordering::SeqCst) + 1;
                let peer = service.peer().clone();
                {
                    let mut status = lock(&self.status);
                    status.state = ServerState::Running;
                    status.starts += 1;
                    status.tools = tools;
                    status.pid = process.as_ref().map(ServerProcess::pid);
                    status.server_info = peer.peer_info().and_then(|info| {
                        info.server_info
                            .as_ref()
                            .map(|i| format!("{} {}", i.name, i.version))
                    });
                }
                *live = Some(Live {
                    generation,
                    service,
                    process,
                });
                Ok((peer, generation, note))
            }
            Err((why, process)) => {
                let stderr = process
                    .as_ref()
                    .map(|p| lock(&p.stderr).last(STDERR_LINES_SHOWN))
                    .unwrap_or_default();
                drop(process);
                tracing::warn!(server = %self.name(), stderr = ?stderr, "MCP server failed to start: {why}");
                let mut status = lock(&self.status);
                status.state = ServerState::Failed(why.clone());
                status.pid = None;
                status.stderr = stderr;
                Err(why)
            }
        }
    }

    /// Starts the process or opens the HTTP session, handshakes, lists tools.
    async fn start(
        &self,
    ) -> Result<
        (
            RunningService<RoleClient, Handler>,
            Option<ServerProcess>,
            Vec<ToolInfo>,
        ),
        (String, Option<ServerProcess>),
    > {
        let handler = Handler;
        let (service, process) = match &self.config.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let cwd = cwd.clone().unwrap_or_else(|| self.workdir.clone());
                let env = stdio::server_env(std::env::vars_os(), env);
                let (process, stdout, stdin) =
                    stdio::start(command, args, &cwd, env, self.secrets.clone(), self.name())
                        .await
                        .map_err(|e| (format!("cannot run '{command}': {e}"), None))?;
                let transport =
                    rmcp::transport::async_rw::AsyncRwTransport::new_client(stdout, stdin)
                        .with_max_line_length(MAX_LINE);
                match handler.serve(transport).await {
                    Ok(service) => (service, Some(process)),
                    Err(e) => {
                        let mut process = process;
                        // Let a crashing server finish writing why.
                        let _ =
                            tokio::time::timeout(Duration::from_millis(500), process.wait_exit())
                                .await;
                        process.wait_stderr(Duration::from_millis(500)).await;
                        let how = process
                            .exit_status()
                            .map(|s| format!(" ({})", describe_exit(s)))
                            .unwrap_or_default();
                        return Err((
                            format!(
                                "the MCP handshake failed{how}: {}",
                                redact(&e.to_string(), &self.secrets)
                            ),
                            Some(process),
                        ));
                    }
                }
            }
            Transport::Http { url, headers } => {
                use rmcp::transport::streamable_http_client::{
                    StreamableHttpClientTransport, StreamableHttpClientTransportConfig,
                };
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                for (k, v) in headers {
                    if let (Ok(name), Ok(mut value)) = (
                        http::HeaderName::from_bytes(k.as_bytes()),
                        http::HeaderValue::from_str(v),
                    ) {
                        value.set_sensitive(true);
                        config.custom_headers.insert(name, value);
                    }
                }
                let client = super::http::UreqHttpClient::new(self.config.startup_timeout);
                let transport = StreamableHttpClientTransport::with_client(client, config);
                let service = handler.serve(transport).await.map_err(|e| {
                    (
                        format!(
                            "the MCP handshake with {url} failed: {}",
                            redact(&e.to_string(), &self.secrets)
                        ),
                        None,
                    )
                })?;
                (service, None)
            }
        };
        let tools = match service.peer().list_all_tools().await {
            Ok(tools) => tools,
            Err(e) => return Err((format!("listing its tools failed: {e}"), process)),
        };
        let wanted = self.config.tools.as_ref();
        let tools = tools
            .into_iter()
            .filter(|t| wanted.is_none_or(|w| w.iter().any(|n| n == t.name.as_ref())))
            .map(|t| ToolInfo {
                name: t.name.to_string(),
                description: t
                    .description
                    .as_deref()
                    .map(str::to_owned)
                    .or_else(|| t.title.clone())
                    .unwrap_or_default(),
                input_schema: serde_json::Value::Object((*t.input_schema).clone()),
                read_only: t
                    .annotations
                    .as_ref()
                    .and_then(|a| a.read_only_hint)
                    .unwrap_or(false),
            })
            .collect();
        Ok((service, process, tools))
    }

    /// Tears down connection `generation` (if it is still the current one)
    /// and records why. Returns how its process ended, when known.
    async fn mark_dead(&self, generation: u64, why: &str) -> Option<String> {
        let mut live = self.live.lock().await;
        if live.as_ref().is_none_or(|l| l.generation != generation) {
            return None;
        }
        let mut old = live.take()?;
        let mut ended = None;
        if let Some(process) = old.process.as_mut() {
            // A crash is usually already over; give it a moment to be reaped.
            let _ = tokio::time::timeout(Duration::from_millis(500), process.wait_exit()).await;
            if process.exit_status().is_some() {
                process.wait_stderr(Duration::from_millis(500)).await;
            }
            ended = process.exit_status().map(describe_exit);
            let stderr = lock(&process.stderr).last(STDERR_LINES_SHOWN);
            lock(&self.status).stderr = stderr;
        }
        let reason = ended.clone().unwrap_or_else(|| why.to_owned());
        tracing::warn!(server = %self.name(), "MCP server stopped: {reason}");
        {
            let mut status = lock(&self.status);
            status.state = ServerState::Stopped(reason);
            status.pid = None;
        }
        // Dropping the session closes the transport; dropping the process
        // kills its group.
        drop(old);
        ended
    }

    /// Calls `tool` with `arguments`; `stop` fires when the user interrupts.
    pub(crate) async fn call(
        &self,
        tool: &str,
        arguments: JsonObject,
        stop: oneshot::Receiver<()>,
    ) -> CallResult {
        let name = self.name().to_owned();
        let (peer, generation, note) = self.connected().await.map_err(|why| {
            failed(format!(
                "Error: MCP server '{name}' is not available: {why}. It will be tried again on the next call."
            ))
        })?;
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let mut options = PeerRequestOptions::with_timeout(self.config.call_timeout);
        options.reset_timeout_on_progress = true;
        options.max_total_timeout = Some(self.config.max_call_time);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let handle = match peer.send_request_with_option(request, options).await {
            Ok(h) => h,
            Err(e) => return Err(self.transport_failure(generation, tool, &e, false).await),
        };
        let id = handle.id.clone();
        let outcome = tokio::select! {
            r = handle.await_response() => r,
            _ = stop => {
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(
                        Some(id),
                        Some("the user interrupted the call".to_owned()),
                    ))
                    .await;
                return Err(failed(format!("[interrupted: the call of {tool} on MCP server '{name}' was cancelled]")));
            }
        };
        let text = match outcome {
            Ok(ServerResult::CallToolResult(result)) => {
                // A server may echo what it was configured with (its env,
                // a header): configured secrets never reach the model.
                let text = redact(&super::render::render(&result), &self.secrets);
                if result.is_error == Some(true) {
                    return Err(failed(format!(
                        "Error from MCP tool {tool} (server '{name}'): {text}"
                    )));
                }
                text
            }
            Ok(ServerResult::EmptyResult(_)) => "(the tool returned no content)".to_owned(),
            Ok(other) => {
                return Err(failed(format!(
                    "Error: MCP server '{name}' answered {tool} with a result hermes cannot use ({}); \
                     it may need protocol features (tasks, input requests) hermes does not offer.",
                    result_kind(&other)
                )));
            }
            Err(ServiceError::McpError(e)) => {
                return Err(failed(format!(
                    "Error: MCP server '{name}' refused the call of {tool}: {} (JSON-RPC error {}). \
                     Check the arguments against the tool's schema.",
                    e.message, e.code.0
                )));
            }
            Err(ServiceError::Timeout { timeout }) => {
                return Err(self.timed_out(&peer, generation, tool, timeout).await);
            }
            Err(e) => return Err(self.transport_failure(generation, tool, &e, true).await),
        };
        Ok(match note {
            Some(note) => format!("{note}{text}"),
            None => text,
        })
    }

    async fn timed_out(
        &self,
        peer: &Peer<RoleClient>,
        generation: u64,
        tool: &str,
        timeout: Duration,
    ) -> ToolError {
        let name = self.name();
        let ping = peer
            .send_request_with_option(
                ClientRequest::PingRequest(Default::default()),
                PeerRequestOptions::with_timeout(PING_TIMEOUT),
            )
            .await;
        let alive = match ping {
            Ok(handle) => handle.await_response().await.is_ok(),
            Err(_) => false,
        };
        if alive {
            let which = if timeout >= self.config.max_call_time {
                "max_call_time"
            } else {
                "timeout"
            };
            return failed(format!(
                "Error: the call of {tool} on MCP server '{name}' timed out after {timeout:?} \
                 (without progress) and was cancelled. The server is still running; if the tool \
                 needs longer, raise [mcp.servers.{name}] {which}."
            ));
        }
        self.mark_dead(generation, "it stopped answering").await;
        failed(format!(
            "Error: MCP server '{name}' stopped answering: no reply to {tool} within {timeout:?} \
             and none to a ping. It was stopped and will be restarted on the next call."
        ))
    }

    async fn transport_failure(
        &self,
        generation: u64,
        tool: &str,
        error: &ServiceError,
        sent: bool,
    ) -> ToolError {
        let name = self.name();
        let why = redact(&error.to_string(), &self.secrets);
        let ended = self
            .mark_dead(generation, &format!("its connection failed: {why}"))
            .await;
        let how = ended.unwrap_or_else(|| format!("connection lost: {why}"));
        let outcome = if sent {
            " while running it; the call's outcome is unknown"
        } else {
            " before the call could be sent"
        };
        failed(format!(
            "Error: MCP server '{name}' stopped ({how}){outcome} ({tool}). It will be restarted on the next call."
        ))
    }

    /// Closes the session and stops the process.
    pub(crate) async fn shutdown(&self) {
        let mut live = self.live.lock().await;
        if let Some(mut old) = live.take() {
            let _ = old.service.close_with_timeout(Duration::from_secs(2)).await;
            drop(old);
        }
        let mut status = lock(&self.status);
        status.state = ServerState::Stopped("hermes stopped it".into());
        status.pid = None;
    }
}

fn result_kind(result: &ServerResult) -> &'static str {
    match result {
        ServerResult::CreateTaskResult(_) => "a task",
        ServerResult::InputRequiredResult(_) => "a request for input",
        _ => "an unexpected result type",
    }
}
