//! `terminal`: runs a shell command in the working directory.
//!
//! - **One output stream.** stdout and stderr are the same pipe, so the
//!   model sees them interleaved in the order the command wrote them.
//! - **Bounded memory.** Output is kept as head + tail (the start shows what
//!   ran, the end usually holds the error); the middle of a huge output is
//!   dropped with a visible marker while it streams, never buffered whole.
//! - **Timeouts kill everything.** The command runs in its own process group;
//!   on timeout or interrupt the whole group gets SIGKILL, so `make -j` or a
//!   pipeline cannot outlive the call.
//! - **No secrets in the child.** The environment is copied without any
//!   variable whose name looks like a credential (SPEC E2), so a command
//!   like `env` cannot leak the provider key into the transcript.
//! - **Confinement is of the start directory only.** `workdir` must resolve
//!   inside the working directory (SPEC E1), but a shell can `cd` anywhere
//!   the process user may go; real isolation needs an OS sandbox (a
//!   container, a dedicated user), which is the deployment's job.
//! - **Background jobs that hold the output are killed.** When the shell
//!   exits while a background job still holds the pipe, the tool waits
//!   briefly for the output to end, then kills the command's process group
//!   (so neither the job nor the reader thread outlives the call) and says
//!   so. A job whose output goes to a file (`cmd > log 2>&1 &`) does not hold
//!   the pipe and keeps running. The shell is left unreaped until then, so
//!   its pid (the group's id) cannot be reused by an unrelated process group.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hermes_core::{Tool, ToolContext, ToolError, ToolSpec};
use serde::Deserialize;
use serde_json::json;

use super::{Workdir, failed, parse_args};

const DEFAULT_TIMEOUT_S: u64 = 60;
const MAX_TIMEOUT_S: u64 = 600;
/// How often the child's state and the interrupt flag are checked.
const POLL: Duration = Duration::from_millis(20);
/// How long to wait for the output pipe to close after the shell exited.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// Name fragments that mark a variable as a credential (matched on the
/// upper-cased name).
const SECRET_FRAGMENTS: &[&str] = &[
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "PRIVATE",
];

/// Exact names that are always removed (some do not contain a fragment).
const SECRET_NAMES: &[&str] = &[
    "HERMES_API_KEY",
    "OPENAI_API_KEY",
    "OPENROUTER_API_KEY",
    "ANTHROPIC_API_KEY",
    "TELEGRAM_BOT_TOKEN",
    "WECOM_SECRET",
    "WECOM_BOT_ID",
    "DATABASE_URL",
    "GITHUB_PAT",
];

/// Whether an environment variable name looks like a credential.
pub fn is_secret_env_name(name: &OsStr) -> bool {
    let upper = name.to_string_lossy().to_uppercase();
    SECRET_NAMES.contains(&upper.as_str()) || SECRET_FRAGMENTS.iter().any(|f| upper.contains(f))
}

/// The environment a command runs with: `parent` without credentials.
pub fn child_env(
    parent: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    parent
        .into_iter()
        .filter(|(name, _)| !is_secret_env_name(name))
        .collect()
}

/// Runs shell commands.
#[derive(Debug)]
pub struct TerminalTool {
    spec: ToolSpec,
    sandbox: Workdir,
    cap: usize,
}

#[derive(Deserialize)]
struct TerminalArgs {
    command: String,
    #[serde(default)]
    timeout: Option<u64>,
    #[serde(default)]
    workdir: Option<String>,
}

impl TerminalTool {
    pub(crate) fn new(sandbox: Workdir, cap: usize) -> Self {
        TerminalTool {
            spec: ToolSpec::new(
                "terminal",
                "Run a shell command (sh -c) in the working directory and return its combined \
                 stdout/stderr and exit code. Non-interactive: stdin is empty. Long outputs are \
                 cut in the middle; pipe through head/tail/grep to focus. Everything it prints \
                 goes into the conversation: never print secrets (API keys, tokens, the \
                 .env, config.toml or state.db files of the Hermes home directory).",
                json!({
                    "type": "object",
                    "properties": {
                        "command": {"type": "string", "description": "The shell command."},
                        "timeout": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_S, "description": "Seconds before the command is killed. Default 60, max 600."},
                        "workdir": {"type": "string", "description": "Directory to run in, relative to the working directory. Default: the working directory."}
                    },
                    "required": ["command"]
                }),
            ),
            sandbox,
            cap,
        }
    }
}

/// Keeps the first and last bytes of a stream, counting what falls between.
#[derive(Debug)]
struct HeadTail {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    dropped: u64,
}

impl HeadTail {
    fn new(cap: usize) -> Self {
        let head_cap = cap * 2 / 5;
        HeadTail {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_cap,
            tail_cap: cap.saturating_sub(head_cap),
            dropped: 0,
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        if self.head.len() < self.head_cap {
            let n = (self.head_cap - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        self.tail.extend(bytes);
        if self.tail.len() > self.tail_cap {
            let extra = self.tail.len() - self.tail_cap;
            self.tail.drain(..extra);
            self.dropped += extra as u64;
        }
    }

    fn render(&self) -> String {
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let mut tail: &[u8] = &tail;
        if self.dropped > 0 {
            // Do not start the tail in the middle of a UTF-8 sequence.
            let skip = tail
                .iter()
                .take_while(|b| (**b & 0xC0) == 0x80)
                .count()
                .min(3);
            tail = &tail[skip..];
            out.push_str(&format!(
                "\n…\n[output truncated: {} bytes omitted from the middle; pipe through head/tail/grep to see them]\n…\n",
                self.dropped + skip as u64
            ));
        }
        out.push_str(&String::from_utf8_lossy(tail));
        out
    }
}

/// Whether child `pid` has exited, without reaping it: while it is a zombie
/// its pid, which is also its process group's id, cannot be reused, so
/// killing the group afterwards cannot hit an unrelated one.
fn exited_unreaped(pid: u32) -> std::io::Result<bool> {
    let id = libc::id_t::from(pid);
    // SAFETY: siginfo_t is plain data for which all-zero bytes are valid.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a valid, writable siginfo_t; WNOWAIT leaves the
    // child waitable, so std's `Child::wait` still reaps it later.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            id,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        // A signal landing mid-call is no news about the child.
        if err.kind() == std::io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(err);
    }
    // SAFETY: waitid succeeded, so `info` was filled in (si_pid is 0 when
    // the child has not exited yet, because of WNOHANG).
    Ok(unsafe { info.si_pid() } != 0)
}

/// Sends SIGKILL to every process in group `pgid`.
fn kill_group(pgid: u32) {
    let Ok(pgid) = i32::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill(2) has no memory-safety preconditions; a negative pid
    // addresses the process group the child leads (it was started with
    // process_group(0), so its pgid is its pid).
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

enum Ending {
    Exited(std::process::ExitStatus),
    TimedOut,
    Interrupted,
}

impl Tool for TerminalTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: &str, ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let args: TerminalArgs = parse_args("terminal", arguments)?;
        if args.command.trim().is_empty() {
            return Err(failed("Error: 'command' is empty."));
        }
        let timeout_s = args.timeout.unwrap_or(DEFAULT_TIMEOUT_S);
        if timeout_s == 0 || timeout_s > MAX_TIMEOUT_S {
            return Err(failed(format!(
                "Error: 'timeout' must be between 1 and {MAX_TIMEOUT_S} seconds (got {timeout_s})."
            )));
        }
        let dir = self
            .sandbox
            .open_dir(args.workdir.as_deref().unwrap_or("."))?
            .real;

        let (mut reader, writer) = std::io::pipe()
            .map_err(|e| failed(format!("Error: cannot create a pipe for the command: {e}")))?;
        let writer2 = writer
            .try_clone()
            .map_err(|e| failed(format!("Error: cannot create a pipe for the command: {e}")))?;
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(&args.command)
            .current_dir(&dir)
            .env_clear()
            .envs(child_env(std::env::vars_os()))
            .stdin(Stdio::null())
            .stdout(writer)
            .stderr(writer2)
            .process_group(0);
        let spawned = cmd.spawn();
        // The Command holds the pipe's write ends; drop it so the reader sees
        // end-of-file once the command (and its children) exit.
        drop(cmd);
        let mut child =
            spawned.map_err(|e| failed(format!("Error: cannot start the shell: {e}")))?;
        let pid = child.id();

        // Leave room for the status lines appended below.
        let output = Arc::new(Mutex::new(HeadTail::new(
            self.cap.saturating_sub(400).max(64),
        )));
        let (done_tx, done_rx) = mpsc::channel::<()>();
        {
            let output = output.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                loop {
                    match reader.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if let Ok(mut o) = output.lock() {
                                o.push(&buf[..n]);
                            }
                        }
                    }
                }
                let _ = done_tx.send(());
            });
        }

        let started = Instant::now();
        let limit = Duration::from_secs(timeout_s);
        let ending = loop {
            match exited_unreaped(pid) {
                Ok(true) => break None,
                Ok(false) => {}
                Err(e) => {
                    kill_group(pid);
                    let _ = child.wait();
                    return Err(failed(format!("Error: lost track of the command: {e}")));
                }
            }
            if started.elapsed() >= limit {
                kill_group(pid);
                let _ = child.wait();
                break Some(Ending::TimedOut);
            }
            if ctx.interrupt.is_set() {
                kill_group(pid);
                let _ = child.wait();
                break Some(Ending::Interrupted);
            }
            std::thread::sleep(POLL);
        };

        let mut drained = done_rx.recv_timeout(DRAIN_GRACE).is_ok();
        let mut killed_background = false;
        if !drained && ending.is_none() {
            // Background jobs still hold the pipe. The shell is a zombie, so
            // the group id is still ours.
            kill_group(pid);
            killed_background = true;
            drained = done_rx.recv_timeout(DRAIN_GRACE).is_ok();
        }
        let ending = match ending {
            Some(e) => e,
            None => match child.wait() {
                Ok(status) => Ending::Exited(status),
                Err(e) => return Err(failed(format!("Error: lost track of the command: {e}"))),
            },
        };
        let mut text = match output.lock() {
            Ok(o) => o.render(),
            Err(p) => p.into_inner().render(),
        };
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        if killed_background {
            text.push_str(
                "[background processes kept the output open after the command ended; they were \
                 killed. To keep a job running, send its output to a file: cmd > log 2>&1 &]\n",
            );
        }
        if !drained {
            text.push_str(
                "[a process outside the command's process group still holds the output; \
                 output after the command ended is not shown]\n",
            );
        }
        match ending {
            Ending::Exited(status) => match (status.code(), status.signal()) {
                (Some(code), _) => text.push_str(&format!("[exit code: {code}]")),
                (None, Some(sig)) => text.push_str(&format!("[killed by signal {sig}]")),
                (None, None) => text.push_str("[exit status unknown]"),
            },
            Ending::TimedOut => text.push_str(&format!(
                "[command timed out after {timeout_s} s; it and its child processes were killed. \
                 Raise 'timeout' (max {MAX_TIMEOUT_S}) or run it in the background with output to a file]"
            )),
            Ending::Interrupted => {
                text.push_str("[interrupted; the command and its child processes were killed]")
            }
        }
        Ok(text)
    }
}
