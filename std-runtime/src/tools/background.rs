//! Background processes: `terminal` with `background: true` and the
//! `process` tool (hermes-agent's schema: `action` list/poll/log/wait/kill,
//! `session_id` naming the process).
//!
//! - **Same confinement** as a foreground command: the plan is built by
//!   the terminal ([`super::terminal`]) and launched by the same
//!   `sandbox::spawn::launch`.
//! - **Outlives the turn, not hermes.** Each process is launched and
//!   waited for by a thread of its own: the init's `PR_SET_PDEATHSIG`
//!   follows the thread that created it, so the process ends when hermes
//!   does (also on SIGKILL), never when the turn's thread is done.
//! - **Bounded**: at most [`BackgroundLimits::per_session`] running per
//!   session, killed at [`BackgroundLimits::wall_clock`], its output kept in
//!   a file on disk up to [`BackgroundLimits::output_cap`] bytes (the rest is
//!   counted and dropped; the last lines are kept in memory for the notice).
//! - **Only the session's own**: a session sees and kills only the
//!   processes it started; another session's id is refused.
//! - **The front-end hears of it** through a [`BackgroundSink`]: the gateway
//!   records each process durably and turns its end into one message to
//!   the chat (`hermes_gateway::cron::background`).

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use hermes_core::{Tool, ToolContext, ToolError, ToolSpec, schema_text};
use serde::Deserialize;

use super::{bounded_spec, failed, parse_args};
use crate::sync::lock;

/// Lines of output a completion notice carries.
pub const NOTICE_LINES: usize = 10;
/// Bytes of the output's end kept in memory for the notice.
const TAIL_BYTES: usize = 4096;
/// Finished processes remembered per session (for `list` and `log`).
const FINISHED_KEPT: usize = 16;
/// The longest `wait` of one `process` call.
const MAX_WAIT_S: u64 = 600;
/// The most a `log` returns at once.
const MAX_LOG_BYTES: u64 = 16 * 1024;

/// Limits of background processes (`[agent] background_max`,
/// `background_timeout`, `background_output_cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackgroundLimits {
    /// Running processes per session at most.
    pub per_session: usize,
    /// A process still running after this long is killed.
    pub wall_clock: Duration,
    /// Bytes of output kept on disk per process.
    pub output_cap: u64,
}

impl Default for BackgroundLimits {
    fn default() -> Self {
        BackgroundLimits {
            per_session: 4,
            wall_clock: Duration::from_secs(3600),
            output_cap: 1024 * 1024,
        }
    }
}

impl BackgroundLimits {
    /// Reads `[agent] background_max`, `background_timeout` (seconds) and
    /// `background_output_cap` (bytes) of the configuration file; a
    /// missing value keeps its default (the loader refuses invalid ones).
    pub fn from_config(file: &toml::Table) -> Self {
        let mut limits = BackgroundLimits::default();
        let int = |key: &str| -> Option<u64> {
            file.get("agent")?
                .get(key)?
                .as_integer()
                .and_then(|v| u64::try_from(v).ok())
                .filter(|v| *v > 0)
        };
        if let Some(n) = int("background_max") {
            limits.per_session = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(s) = int("background_timeout") {
            limits.wall_clock = Duration::from_secs(s);
        }
        if let Some(b) = int("background_output_cap") {
            limits.output_cap = b;
        }
        limits
    }
}

/// A process as the front-end records it when it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartedProcess {
    /// Its id (`bg…`), unique across restarts.
    pub id: String,
    /// The session that started it.
    pub session_id: String,
    /// The command line.
    pub command: String,
    /// Whether its end is announced to the session's chat.
    pub notify: bool,
}

/// How a process ended, for its notice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinishedProcess {
    /// The process.
    pub process: StartedProcess,
    /// How it ended ("exit code 0", "killed at the wall-clock limit …").
    pub status: String,
    /// The last lines of its output.
    pub tail: String,
}

impl FinishedProcess {
    /// The message that tells the session's chat the process ended.
    pub fn notice(&self) -> String {
        let mut text = format!(
            "Background process {} ({}) finished: {}.",
            self.process.id,
            short(&self.process.command),
            self.status
        );
        if !self.tail.trim().is_empty() {
            text.push_str("\nLast output:\n");
            text.push_str(self.tail.trim_end());
        }
        text
    }
}

/// The command, shortened for a one-line mention.
pub fn short(command: &str) -> String {
    let line = command.lines().next().unwrap_or_default();
    let mut out: String = line.chars().take(80).collect();
    if out.len() < command.len() {
        out.push('…');
    }
    out
}

/// What the front-end does when a process starts and ends.
pub trait BackgroundSink: Send + Sync {
    /// Records `process` durably before it runs; an error refuses the start.
    fn started(&self, process: &StartedProcess) -> Result<(), String>;
    /// `finished.process` ended: announce it (when asked to) and forget
    /// the record, exactly once.
    fn finished(&self, finished: &FinishedProcess);
}

/// The background processes of one hermes process, all sessions.
pub struct BackgroundProcesses {
    limits: BackgroundLimits,
    dir: PathBuf,
    sink: Option<Arc<dyn BackgroundSink>>,
    procs: Mutex<Vec<Arc<Entry>>>,
}

impl std::fmt::Debug for BackgroundProcesses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackgroundProcesses")
            .field("limits", &self.limits)
            .field("dir", &self.dir)
            .field("running", &lock(&self.procs).len())
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Entry {
    process: StartedProcess,
    started: Instant,
    output: PathBuf,
    kill: AtomicBool,
    /// `None` while it runs; then how it ended.
    state: Mutex<Option<String>>,
    ended: Condvar,
    /// The last bytes of output (for the notice and `poll`).
    tail: Mutex<VecDeque<u8>>,
}

impl Entry {
    fn status(&self) -> Option<String> {
        lock(&self.state).clone()
    }

    fn tail_lines(&self, n: usize) -> String {
        let bytes: Vec<u8> = lock(&self.tail).iter().copied().collect();
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

/// What the terminal hands over to start a process: a function run on the
/// process's own thread that launches it and returns a waiter, and the
/// reading end of its output.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) type Launch =
    Box<dyn FnOnce() -> Result<(Box<dyn Waiter>, std::io::PipeReader), String> + Send>;

/// Waits for a launched process until `deadline` or `stop()`; returns its
/// status line.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) trait Waiter {
    fn wait(self: Box<Self>, deadline: Instant, stop: &dyn Fn() -> bool) -> String;
}

impl BackgroundProcesses {
    /// Processes whose output files live in `dir`, reported to `sink`.
    pub fn new(
        limits: BackgroundLimits,
        dir: impl Into<PathBuf>,
        sink: Option<Arc<dyn BackgroundSink>>,
    ) -> Arc<Self> {
        Arc::new(BackgroundProcesses {
            limits,
            dir: dir.into(),
            sink,
            procs: Mutex::new(Vec::new()),
        })
    }

    /// The limits.
    pub fn limits(&self) -> BackgroundLimits {
        self.limits
    }

    /// The tools' view for `session_id`.
    pub fn scope(self: &Arc<Self>, session_id: &str) -> BackgroundScope {
        BackgroundScope {
            procs: Arc::clone(self),
            session_id: session_id.to_owned(),
        }
    }

    /// Kills every running process (the CLI, when its session ends).
    pub fn kill_all(&self) {
        for entry in lock(&self.procs).iter() {
            entry.kill.store(true, Ordering::SeqCst);
        }
    }

    /// Ids of the processes still running.
    pub fn running(&self) -> Vec<String> {
        lock(&self.procs)
            .iter()
            .filter(|e| e.status().is_none())
            .map(|e| e.process.id.clone())
            .collect()
    }

    fn find(&self, session_id: &str, id: &str) -> Result<Arc<Entry>, ToolError> {
        let procs = lock(&self.procs);
        match procs.iter().find(|e| e.process.id == id) {
            Some(e) if e.process.session_id == session_id => Ok(Arc::clone(e)),
            Some(_) => Err(failed(format!(
                "Error: process {id} belongs to another session; a session may only see and \
                 kill its own background processes."
            ))),
            None => Err(failed(format!(
                "Error: no background process {id} in this session (see action 'list')."
            ))),
        }
    }

    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn start(
        self: &Arc<Self>,
        session_id: &str,
        command: &str,
        notify: bool,
        launch: Launch,
    ) -> Result<String, ToolError> {
        let id = format!("bg{:012x}", rand::random::<u64>() >> 16);
        let process = StartedProcess {
            id: id.clone(),
            session_id: session_id.to_owned(),
            command: command.to_owned(),
            notify,
        };
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| failed(format!("Error: cannot create {}: {e}", self.dir.display())))?;
        let output = self.dir.join(format!("{id}.log"));
        let file = std::fs::File::create(&output)
            .map_err(|e| failed(format!("Error: cannot create the output file: {e}")))?;
        let entry = Arc::new(Entry {
            process: process.clone(),
            started: Instant::now(),
            output,
            kill: AtomicBool::new(false),
            state: Mutex::new(None),
            ended: Condvar::new(),
            tail: Mutex::new(VecDeque::new()),
        });
        {
            let mut procs = lock(&self.procs);
            let running = procs
                .iter()
                .filter(|e| e.process.session_id == session_id && e.status().is_none())
                .count();
            if running >= self.limits.per_session {
                return Err(failed(format!(
                    "Error: this session already runs {running} background processes (the \
                     limit is {}); wait for one or kill one with the process tool.",
                    self.limits.per_session
                )));
            }
            forget_finished(&mut procs, session_id);
            procs.push(Arc::clone(&entry));
        }
        if let Some(sink) = &self.sink
            && let Err(e) = sink.started(&process)
        {
            lock(&self.procs).retain(|e| e.process.id != id);
            return Err(failed(format!(
                "Error: the background process could not be recorded: {e}"
            )));
        }
        let (tx, rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let this = Arc::clone(self);
        let worker = Arc::clone(&entry);
        let spawned = std::thread::Builder::new()
            .name(format!("hermes-{id}"))
            .spawn(move || this.run(worker, file, launch, tx));
        let started = match spawned {
            Ok(_) => rx
                .recv()
                .unwrap_or_else(|_| Err("its thread ended early".into())),
            Err(e) => Err(e.to_string()),
        };
        match started {
            Ok(()) => Ok(id),
            Err(e) => {
                // Never started: nothing to announce, nothing left recorded.
                lock(&self.procs).retain(|e| e.process.id != id);
                if let Some(sink) = &self.sink {
                    sink.finished(&FinishedProcess {
                        process: StartedProcess {
                            notify: false,
                            ..process
                        },
                        status: "not started".into(),
                        tail: String::new(),
                    });
                }
                Err(failed(format!(
                    "Error: cannot start the background process: {e}"
                )))
            }
        }
    }

    /// The process's thread: launches it, copies its output to disk, waits
    /// for it, then reports its end.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    fn run(
        &self,
        entry: Arc<Entry>,
        file: std::fs::File,
        launch: Launch,
        started: std::sync::mpsc::Sender<Result<(), String>>,
    ) {
        let (waiter, reader) = match launch() {
            Ok(launched) => launched,
            Err(e) => {
                let _ = started.send(Err(e));
                return;
            }
        };
        let _ = started.send(Ok(()));
        let (copied_tx, copied) = std::sync::mpsc::channel::<()>();
        {
            let entry = Arc::clone(&entry);
            let cap = self.limits.output_cap;
            std::thread::spawn(move || {
                copy_output(reader, file, cap, &entry);
                let _ = copied_tx.send(());
            });
        }
        let deadline = entry.started + self.limits.wall_clock;
        let mut status = waiter.wait(deadline, &|| entry.kill.load(Ordering::SeqCst));
        if entry.kill.load(Ordering::SeqCst) {
            status = "killed (process kill)".into();
        } else if Instant::now() >= deadline {
            status = format!(
                "killed at the wall-clock limit of {} s",
                self.limits.wall_clock.as_secs()
            );
        }
        // The pipe closes once every process of it is gone; where only a
        // process group contains it, an escaped one may hold it open, and
        // the notice does not wait for that.
        let _ = copied.recv_timeout(Duration::from_secs(2));
        *lock(&entry.state) = Some(status.clone());
        entry.ended.notify_all();
        if let Some(sink) = &self.sink {
            sink.finished(&FinishedProcess {
                process: entry.process.clone(),
                status,
                tail: entry.tail_lines(NOTICE_LINES),
            });
        }
    }
}

/// Keeps the newest finished processes of `session_id` only.
fn forget_finished(procs: &mut Vec<Arc<Entry>>, session_id: &str) {
    let finished: Vec<String> = procs
        .iter()
        .filter(|e| e.process.session_id == session_id && e.status().is_some())
        .map(|e| e.process.id.clone())
        .collect();
    if finished.len() > FINISHED_KEPT {
        let drop = &finished[..finished.len() - FINISHED_KEPT];
        procs.retain(|e| {
            let gone = drop.contains(&e.process.id);
            if gone {
                let _ = std::fs::remove_file(&e.output);
            }
            !gone
        });
    }
}

/// Copies the output pipe to `file` up to `cap` bytes; what comes after is
/// counted, kept only in the in-memory tail, and noted at the file's end.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn copy_output(mut reader: std::io::PipeReader, mut file: std::fs::File, cap: u64, entry: &Entry) {
    let mut written: u64 = 0;
    let mut dropped: u64 = 0;
    let mut buf = [0u8; 8192];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        let room = usize::try_from(cap.saturating_sub(written)).unwrap_or(usize::MAX);
        let keep = room.min(n);
        if keep > 0 && file.write_all(&chunk[..keep]).is_ok() {
            written += keep as u64;
        }
        dropped += (n - keep) as u64;
        let mut tail = lock(&entry.tail);
        tail.extend(chunk);
        let extra = tail.len().saturating_sub(TAIL_BYTES);
        tail.drain(..extra);
    }
    if dropped > 0 {
        let _ = write!(
            file,
            "\n[output capped at {cap} bytes on disk: {dropped} more bytes were dropped]\n"
        );
    }
}

/// The background processes of one session, as its tools see them.
#[derive(Clone, Debug)]
pub struct BackgroundScope {
    procs: Arc<BackgroundProcesses>,
    session_id: String,
}

impl BackgroundScope {
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn start(
        &self,
        command: &str,
        notify: bool,
        launch: Launch,
    ) -> Result<String, ToolError> {
        self.procs.start(&self.session_id, command, notify, launch)
    }

    /// The limits.
    pub fn limits(&self) -> BackgroundLimits {
        self.procs.limits
    }
}

/// `process`: lists, reads, waits for and kills the session's background
/// processes.
#[derive(Debug)]
pub struct ProcessTool {
    spec: ToolSpec,
    scope: BackgroundScope,
}

#[derive(Deserialize)]
struct ProcessArgs {
    action: String,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    timeout: Option<u64>,
    #[serde(default)]
    offset: Option<u64>,
    #[serde(default)]
    limit: Option<u64>,
}

impl ProcessTool {
    /// The tool over `scope`.
    pub fn new(scope: BackgroundScope) -> Self {
        ProcessTool {
            spec: bounded_spec(
                "process",
                "Manage background processes started with terminal(background=true) in this \
                 session. Actions: 'list' (all of them, with status), 'poll' (status and the \
                 last lines of output), 'log' (output from the file on disk, by byte offset and \
                 limit), 'wait' (block until it ends or timeout seconds pass), 'kill' (end it \
                 and everything it started). session_id is the process id terminal returned.",
                schema_text!(
                    r#"{
                    "type": "object",
                    "properties": {
                        "action": {"type": "string", "enum": ["list", "poll", "log", "wait", "kill"]},
                        "session_id": {"type": "string", "description": "The process id (bg…) terminal returned. Required except for 'list'."},
                        "timeout": {"type": "integer", "minimum": 1, "maximum": 600, "description": "For 'wait': seconds to wait at most. Default 30."},
                        "offset": {"type": "integer", "minimum": 0, "description": "For 'log': the byte to start at. Default 0."},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 16384, "description": "For 'log': bytes to return at most. Default 16384."}
                    },
                    "required": ["action"]
                }"#,
                ),
                &[
                    ("timeout", "maximum", MAX_WAIT_S),
                    ("limit", "maximum", MAX_LOG_BYTES),
                ],
            ),
            scope,
        }
    }

    fn entry(&self, id: Option<&str>) -> Result<Arc<Entry>, ToolError> {
        let id = id.ok_or_else(|| failed("Error: this action needs 'session_id'."))?;
        self.scope.procs.find(&self.scope.session_id, id.trim())
    }
}

fn describe(e: &Entry) -> String {
    let status = e
        .status()
        .unwrap_or_else(|| format!("running for {} s", e.started.elapsed().as_secs()));
    format!(
        "{} — {} — {}",
        e.process.id,
        short(&e.process.command),
        status
    )
}

fn read_log(path: &Path, offset: u64, limit: u64) -> Result<String, ToolError> {
    use std::io::Seek;
    let mut file = std::fs::File::open(path)
        .map_err(|e| failed(format!("Error: cannot read the output: {e}")))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    file.seek(std::io::SeekFrom::Start(offset.min(size)))
        .map_err(|e| failed(format!("Error: cannot read the output: {e}")))?;
    let mut bytes = Vec::new();
    file.take(limit)
        .read_to_end(&mut bytes)
        .map_err(|e| failed(format!("Error: cannot read the output: {e}")))?;
    let end = offset.min(size) + bytes.len() as u64;
    let more = if end < size {
        format!(
            "\n[bytes {}..{end} of {size}; continue with offset {end}]",
            offset.min(size)
        )
    } else {
        format!("\n[bytes {}..{end} of {size}]", offset.min(size))
    };
    Ok(format!("{}{more}", String::from_utf8_lossy(&bytes)))
}

impl Tool for ProcessTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: &str, ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let args: ProcessArgs = parse_args("process", arguments)?;
        match args.action.as_str() {
            "list" => {
                let procs = lock(&self.scope.procs.procs);
                let mine: Vec<String> = procs
                    .iter()
                    .filter(|e| e.process.session_id == self.scope.session_id)
                    .map(|e| describe(e))
                    .collect();
                Ok(if mine.is_empty() {
                    "No background processes in this session.".into()
                } else {
                    mine.join("\n")
                })
            }
            "poll" => {
                let e = self.entry(args.session_id.as_deref())?;
                Ok(format!(
                    "{}\nLast output:\n{}",
                    describe(&e),
                    e.tail_lines(NOTICE_LINES)
                ))
            }
            "log" => {
                let e = self.entry(args.session_id.as_deref())?;
                let limit = args.limit.unwrap_or(MAX_LOG_BYTES).clamp(1, MAX_LOG_BYTES);
                read_log(&e.output, args.offset.unwrap_or(0), limit)
            }
            "wait" => {
                let e = self.entry(args.session_id.as_deref())?;
                let timeout = Duration::from_secs(args.timeout.unwrap_or(30).clamp(1, MAX_WAIT_S));
                let deadline = Instant::now() + timeout;
                let mut state = lock(&e.state);
                while state.is_none() && Instant::now() < deadline && !ctx.interrupt.is_set() {
                    state = match e.ended.wait_timeout(state, Duration::from_millis(100)) {
                        Ok((s, _)) => s,
                        Err(p) => p.into_inner().0,
                    };
                }
                drop(state);
                Ok(format!(
                    "{}\nLast output:\n{}",
                    describe(&e),
                    e.tail_lines(NOTICE_LINES)
                ))
            }
            "kill" => {
                let e = self.entry(args.session_id.as_deref())?;
                if e.status().is_some() {
                    return Ok(format!("{} had already ended.", describe(&e)));
                }
                e.kill.store(true, Ordering::SeqCst);
                let mut state = lock(&e.state);
                let deadline = Instant::now() + Duration::from_secs(5);
                while state.is_none() && Instant::now() < deadline {
                    state = match e.ended.wait_timeout(state, Duration::from_millis(50)) {
                        Ok((s, _)) => s,
                        Err(p) => p.into_inner().0,
                    };
                }
                drop(state);
                Ok(describe(&e))
            }
            other => Err(failed(format!(
                "Error: unknown action {other:?}; use list, poll, log, wait or kill."
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn limits_come_from_the_agent_table_and_default_otherwise() {
        let file: toml::Table = toml::from_str(
            "[agent]\nbackground_max = 2\nbackground_timeout = 90\nbackground_output_cap = 5000\n",
        )
        .unwrap();
        let limits = BackgroundLimits::from_config(&file);
        assert_eq!(limits.per_session, 2);
        assert_eq!(limits.wall_clock, Duration::from_secs(90));
        assert_eq!(limits.output_cap, 5000);
        let none = BackgroundLimits::from_config(&toml::Table::new());
        assert_eq!(none, BackgroundLimits::default());
        assert_eq!(none.per_session, 4);
    }

    #[test]
    fn a_notice_names_the_process_its_status_and_last_lines() {
        let finished = FinishedProcess {
            process: StartedProcess {
                id: "bg0123456789ab".into(),
                session_id: "s".into(),
                command: "make all\nmake install".into(),
                notify: true,
            },
            status: "exit code 2".into(),
            tail: "error: x\n".into(),
        };
        assert_eq!(
            finished.notice(),
            "Background process bg0123456789ab (make all…) finished: exit code 2.\nLast output:\nerror: x"
        );
    }
}
