//! `send_message` (hermes-agent's schema: `action` send/list, `target`,
//! `message`): the agent sends text to a home channel or an allowed chat.
//!
//! A message is a one-off job with `no_agent` (its text is the answer),
//! due now: the scheduler delivers it through its outbox — stored before it
//! is sent, the delivery recorded after, retried with backoff on a
//! transient failure — so it is delivered once like a scheduled answer.
//! The call waits a little for the outcome and reports it; a failure is
//! the tool's error, for the model to tell the user.
//!
//! Files go with it as `MEDIA:<path>` tokens in the message (hermes-agent's
//! convention; `[[as_document]]` sends images as documents): read under
//! the file tools' confinement and copied into the outbox at the call,
//! delivered by the same job (`super::send_files`).
//!
//! Only targets the owner allowed: the home channels (`telegram` alone, or
//! the home chat spelled out) and `[agent] send_message_targets`; never an
//! id the model made up.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hermes_core::{Clock, Tool, ToolContext, ToolError, ToolSpec};
use hermes_runtime::cron::{MAX_PROMPT_BYTES, TARGET_FORMS, Target};
use hermes_runtime::store::{JobRecord, JobState, RunState, Store};
use hermes_runtime::sync::lock;
use hermes_runtime::tools::ConfinedFiles;
use serde::Deserialize;
use serde_json::json;

use super::{home, send_files};

/// The tool's name.
pub const NAME: &str = "send_message";
/// Job ids of sent messages start with this.
pub const MESSAGE_JOB_PREFIX: &str = "m";
/// How long a call waits for the delivery's outcome before it reports the
/// message as queued.
const WAIT_FOR_OUTCOME: Duration = Duration::from_secs(15);

/// Reads `[agent] send_message_targets` (a list, or one comma-separated
/// string) from the configuration file.
pub fn allowed_targets(file: &toml::Table) -> Vec<String> {
    let value = file
        .get("agent")
        .and_then(|a| a.get("send_message_targets"));
    let items: Vec<String> = match value {
        Some(toml::Value::Array(items)) => items
            .iter()
            .filter_map(toml::Value::as_str)
            .map(str::to_owned)
            .collect(),
        Some(toml::Value::String(s)) => s.split(',').map(str::to_owned).collect(),
        _ => Vec::new(),
    };
    items
        .into_iter()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
        .collect()
}

/// The tool, over the scheduler's store.
#[derive(Clone)]
pub struct SendMessageTool {
    spec: ToolSpec,
    store: Arc<Mutex<Store>>,
    clock: Arc<dyn Clock>,
    platforms: Vec<String>,
    home_channels: BTreeMap<String, String>,
    allowed: Vec<String>,
    wait: Duration,
    /// Where `MEDIA:` files are read from (`None`: no files), and the
    /// outbox directory they are copied to.
    files: Option<(ConfinedFiles, PathBuf)>,
}

#[derive(Deserialize)]
struct Args {
    #[serde(default)]
    action: Option<String>,
    #[serde(default)]
    target: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

impl std::fmt::Debug for SendMessageTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendMessageTool")
            .field("platforms", &self.platforms)
            .field("allowed", &self.allowed)
            .finish_non_exhaustive()
    }
}

impl SendMessageTool {
    /// Messages go to `platforms` (this gateway's), to their home channels
    /// (`configured`, or set with `/sethome`) and to `allowed` chats.
    pub fn new(
        store: Arc<Mutex<Store>>,
        clock: Arc<dyn Clock>,
        platforms: Vec<String>,
        configured: BTreeMap<String, String>,
        allowed: Vec<String>,
    ) -> Self {
        let spec = ToolSpec::new(
            NAME,
            "Send a message to the owner's home channel (target 'telegram') or an allowed chat \
             ('platform:chat_id'); action 'list' shows the allowed targets. The result says \
             whether it was delivered.",
            json!({
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["send", "list"]},
                    "target": {"type": "string", "description": "A platform (its home channel) or platform:chat_id[:thread_id]."},
                    "message": {"type": "string", "description": "The text to send. MEDIA:<path> in it attaches a file from the working directory (one token per file); [[as_document]] sends images as documents."}
                },
                "required": []
            }),
        );
        SendMessageTool {
            spec,
            store,
            clock,
            platforms,
            home_channels: configured,
            allowed,
            wait: WAIT_FOR_OUTCOME,
            files: None,
        }
    }

    /// Takes `MEDIA:<path>` files read through `files`, copied into
    /// `outbox` until they are delivered.
    pub fn with_files(mut self, files: ConfinedFiles, outbox: PathBuf) -> Self {
        self.files = Some((files, outbox));
        self
    }

    /// Waits at most `wait` for a delivery's outcome (tests shorten it).
    pub fn with_wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The targets a message may go to, for `list` and refusals.
    fn targets(&self) -> Vec<String> {
        let store = lock(&self.store);
        let mut out: Vec<String> = self
            .platforms
            .iter()
            .filter(|p| {
                matches!(
                    home::destination(&store, &probe(p), &self.home_channels),
                    Ok(Some(_))
                )
            })
            .map(|p| format!("{p} (home channel)"))
            .collect();
        out.extend(self.allowed.iter().cloned());
        out
    }

    /// Whether `target` may be sent to; the refusal says what may.
    fn check(&self, target: &str) -> Result<(), String> {
        let refuse = |why: String| {
            let allowed = self.targets();
            let list = if allowed.is_empty() {
                "none is configured: set a home channel (/sethome) or [agent] send_message_targets"
                    .to_owned()
            } else {
                format!("allowed: {}", allowed.join(", "))
            };
            Err(format!("{why}; {list}"))
        };
        let parsed = match Target::parse(target) {
            Ok(t) => t,
            Err(_) => {
                return refuse(format!(
                    "cannot read the target {target:?} ({TARGET_FORMS})"
                ));
            }
        };
        let platform = match &parsed {
            Target::Home(p) | Target::Chat { platform: p, .. } => p.clone(),
            Target::Origin | Target::Local => {
                return refuse(format!(
                    "{target:?} is not a chat; answer in this conversation instead"
                ));
            }
        };
        if !self.platforms.contains(&platform) {
            return refuse(format!("{platform} is not connected to this gateway"));
        }
        if matches!(parsed, Target::Home(_)) || self.allowed.iter().any(|a| a == target) {
            return Ok(());
        }
        // The home chat spelled out is the home channel.
        let store = lock(&self.store);
        let home = home::destination(&store, &probe(&platform), &self.home_channels);
        let given = home::destination(&store, &probe(target), &self.home_channels);
        match (home, given) {
            (Ok(Some(h)), Ok(Some(g))) if h == g => Ok(()),
            _ => {
                drop(store);
                refuse(format!("{target} is not an allowed target"))
            }
        }
    }

    fn send(
        &self,
        target: &str,
        message: &str,
        ctx: &ToolContext<'_>,
    ) -> Result<String, ToolError> {
        let parsed = send_files::parse(message);
        if parsed.text.is_empty() && parsed.paths.is_empty() {
            return Err(ToolError::Failed("the message is empty".into()));
        }
        if message.len() > MAX_PROMPT_BYTES {
            return Err(ToolError::Failed(format!(
                "the message is {} bytes; at most {MAX_PROMPT_BYTES} can be sent",
                message.len()
            )));
        }
        self.check(target).map_err(ToolError::Failed)?;
        let now = self.clock.now_ms();
        let id = format!("{MESSAGE_JOB_PREFIX}{:016x}", rand::random::<u64>());
        let (confined, outbox) = match &self.files {
            Some((files, outbox)) => (Some(files), outbox.clone()),
            None => (None, PathBuf::new()),
        };
        let files = send_files::stage(confined, &outbox, &id, &parsed)?;
        let job = JobRecord {
            no_agent: true,
            ..JobRecord::one_off(
                id.clone(),
                NAME.into(),
                parsed.text.clone(),
                target.to_owned(),
                now,
            )
        };
        let queued = (|| {
            let mut store = lock(&self.store);
            if !files.is_empty() {
                send_files::save(&mut store, &id, &files)?;
            }
            store.job_insert(&job)
        })();
        if let Err(e) = queued {
            if let Some(dir) = files.first().and_then(|f| f.path.parent()) {
                let _ = std::fs::remove_dir_all(dir);
            }
            return Err(ToolError::Failed(format!(
                "the message could not be queued: {e}"
            )));
        }
        let target = &if files.is_empty() {
            target.to_owned()
        } else {
            let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
            format!("{target} (with {})", names.join(", "))
        };
        tracing::info!(job = %id, %target, "send_message: queued");
        let deadline = Instant::now() + self.wait;
        loop {
            let run = lock(&self.store)
                .job_runs(&id, 1)
                .ok()
                .and_then(|mut r| r.pop());
            match run {
                Some(run) if run.state == RunState::Delivered => {
                    return Ok(format!("Delivered to {target}."));
                }
                Some(run) if matches!(run.state, RunState::DeliveryFailed | RunState::Failed) => {
                    return Err(ToolError::Failed(format!(
                        "not delivered to {target}: {}",
                        run.error.unwrap_or_else(|| "unknown reason".into())
                    )));
                }
                Some(run) if Instant::now() >= deadline || ctx.interrupt.is_set() => {
                    let last = run
                        .error
                        .map(|e| format!(" (last error: {e})"))
                        .unwrap_or_default();
                    return Ok(format!(
                        "Queued for {target}; delivery is being retried{last}. It is sent once."
                    ));
                }
                None if Instant::now() >= deadline || ctx.interrupt.is_set() => {
                    return Ok(format!(
                        "Queued for {target}; it is sent once within seconds."
                    ));
                }
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}

/// A job delivering to `target`, to ask `home::destination` where that is.
fn probe(target: &str) -> JobRecord {
    JobRecord {
        id: String::new(),
        name: String::new(),
        schedule: String::new(),
        prompt: String::new(),
        deliver: target.to_owned(),
        origin_platform: None,
        origin_chat: None,
        origin_thread: None,
        repeat: None,
        runs_done: 0,
        state: JobState::Done,
        next_run_ms: None,
        last_run_ms: None,
        last_outcome: None,
        created_at_ms: 0,
        script: None,
        no_agent: true,
    }
}

impl Tool for SendMessageTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: &str, ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let args: Args = serde_json::from_str(arguments)
            .map_err(|e| ToolError::Failed(format!("bad arguments: {e}")))?;
        match args.action.as_deref().unwrap_or("send") {
            "list" => {
                let targets = self.targets();
                Ok(if targets.is_empty() {
                    "No targets are allowed: set a home channel (/sethome) or [agent] send_message_targets.".into()
                } else {
                    format!("Allowed targets: {}", targets.join(", "))
                })
            }
            "send" => match (args.target, args.message) {
                (Some(target), Some(message)) => self.send(target.trim(), &message, ctx),
                _ => Err(ToolError::Failed(
                    "action 'send' needs target and message".into(),
                )),
            },
            other => Err(ToolError::Failed(format!(
                "unknown action {other:?}; use send or list"
            ))),
        }
    }
}
