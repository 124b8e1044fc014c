//! `terminal`: runs a shell command in the working directory, in the
//! sandbox (see [`crate::sandbox`]).
//!
//! - **One output stream.** stdout and stderr are the same pipe, so the
//!   model sees them interleaved in the order the command wrote them.
//! - **Bounded memory.** Output is kept as head + tail (the start shows what
//!   ran, the end usually holds the error); the middle of a huge output is
//!   dropped with a visible marker while it streams, never buffered whole.
//! - **Nothing outlives the command**: not its timeout, not an interrupt,
//!   not hermes's own exit or SIGKILL. Background jobs, `setsid` and `nohup`
//!   children are killed when the command ends, and the result says so
//!   when there were any. Where this system only allows the weaker
//!   process-group containment, the result says what may survive.
//! - **Confined** (Linux, Landlock): see [`crate::sandbox`]. Where the
//!   sandbox is unavailable, commands are refused unless the user opted out.
//! - **No secrets in the child**: an allow-listed environment.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::Read;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hermes_core::{Tool, ToolContext, ToolError, ToolSpec, schema_text};
use serde::Deserialize;

use super::approval::ApprovalGate;
use super::background::BackgroundScope;
use super::{Workdir, bounded_spec, failed, parse_args};
use crate::sandbox::{SandboxMode, child_env, unavailable_reason};
use crate::spill::Spill;

const DEFAULT_TIMEOUT_S: u64 = 60;
const MAX_TIMEOUT_S: u64 = 600;
/// How long to wait for the output pipe to close after the command ended.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// How commands run: the user's sandbox settings.
#[derive(Clone, Debug, Default)]
pub(crate) struct TerminalSettings {
    pub(crate) mode: SandboxMode,
    pub(crate) env_passthrough: Vec<String>,
    pub(crate) extra_read: Vec<PathBuf>,
    pub(crate) extra_write: Vec<PathBuf>,
    /// Dangerous commands need the user's approval (see [`super::approval`]).
    pub(crate) approval: ApprovalGate,
}

/// Runs shell commands.
#[derive(Debug)]
pub struct TerminalTool {
    spec: ToolSpec,
    workdir: Workdir,
    settings: TerminalSettings,
    cap: usize,
    /// Where `background: true` starts processes; `None`: refused.
    background: Option<BackgroundScope>,
}

#[derive(Deserialize)]
pub(super) struct TerminalArgs {
    command: String,
    #[serde(default)]
    timeout: Option<u64>,
    #[serde(default)]
    workdir: Option<String>,
    #[serde(default)]
    background: bool,
    #[serde(default)]
    notify_on_complete: bool,
}

impl TerminalTool {
    pub(crate) fn new(
        workdir: Workdir,
        settings: TerminalSettings,
        cap: usize,
        background: Option<BackgroundScope>,
    ) -> Self {
        let (bg_text, bg_hint) = match &background {
            Some(_) => (
                "With background=true the command starts in the same sandbox and the call \
                 returns its id at once; manage it with the process tool, and with \
                 notify_on_complete=true its end is posted to this chat. ",
                "run long jobs with background=true, or in the foreground with a larger timeout",
            ),
            None => ("", "run long jobs in the foreground with a larger timeout"),
        };
        let confinement = match settings.mode {
            SandboxMode::On => {
                "It runs in a sandbox: it can read and run the system's programs, but read and \
                 write only the working directory and $TMPDIR (a private temp dir); HOME is the \
                 working directory. "
            }
            SandboxMode::Off => "",
        };
        let approval = match settings.approval.mode {
            super::approval::ApprovalMode::Ask => {
                "Dangerous commands (recursive deletes, disk writes, curl | sh, force pushes, \
                 reboots, ...) run only once the user approves them; if one is denied, do not try \
                 to reach the same effect another way. "
            }
            super::approval::ApprovalMode::Off => "",
        };
        TerminalTool {
            spec: bounded_spec(
                "terminal",
                format!(
                    "Run a shell command (sh -c) in the working directory and return its \
                     combined stdout/stderr and exit code. Non-interactive: stdin is empty. \
                     {confinement}{approval}Everything it starts (background jobs too) is killed when it \
                     ends or times out; {bg_hint}. {bg_text}\
                     Long outputs are cut in the middle (the whole output is kept in a file \
                     read_file can read in ranges); pipe through head/tail/grep to focus. \
                     Everything it prints goes into the conversation: never print secrets."
                ),
                schema_text!(
                    r#"{
                    "type": "object",
                    "properties": {
                        "command": {"type": "string", "description": "The shell command."},
                        "timeout": {"type": "integer", "minimum": 1, "maximum": 600, "description": "Seconds before the command is killed. Default 60, max 600."},
                        "workdir": {"type": "string", "description": "Directory to run in, relative to the working directory. Default: the working directory."},
                        "background": {"type": "boolean", "description": "Start it and return its id without waiting (see the process tool). Default false."},
                        "notify_on_complete": {"type": "boolean", "description": "With background: post its exit status and last lines to this chat when it ends. Default false."}
                    },
                    "required": ["command"]
                }"#,
                ),
                &[("timeout", "maximum", MAX_TIMEOUT_S)],
            ),
            workdir,
            settings,
            cap,
            background,
        }
    }
}

/// Keeps the first and last bytes of a stream, counting what falls between.
#[derive(Debug)]
pub(super) struct HeadTail {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    dropped: u64,
    /// Everything, on disk, once the output passes the cap (SPEC Y6).
    spill: Option<Spill>,
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
            spill: None,
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        if let Some(spill) = &mut self.spill {
            // Nothing was dropped before the output passes the cap, so
            // head and tail hold all of it when the file opens.
            let kept = self.head.len() + self.tail.len();
            if !spill.started() && kept + bytes.len() > self.head_cap + self.tail_cap {
                spill.start();
                spill.write(&self.head);
                let (a, b) = self.tail.as_slices();
                spill.write(a);
                spill.write(b);
            }
            spill.write(bytes);
        }
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
            let omitted = self.dropped + skip as u64;
            let note = self
                .spill
                .as_ref()
                .and_then(|s| s.note(omitted))
                .unwrap_or_else(|| {
                    format!(
                        "[output truncated: {omitted} bytes omitted from the middle; pipe through head/tail/grep to see them]"
                    )
                });
            out.push_str(&format!("\n…\n{note}\n…\n"));
        }
        out.push_str(&String::from_utf8_lossy(tail));
        out
    }
}

/// A private temp dir for one command (mode 0700), removed on drop.
#[derive(Debug)]
pub(super) struct PrivateTemp(pub(super) PathBuf);

impl PrivateTemp {
    pub(super) fn create() -> std::io::Result<PrivateTemp> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir();
        let mut last = std::io::Error::other("no temp dir name was free");
        for _ in 0..16 {
            // The system's generator, not rand's thread generator: that one
            // detects its ChaCha code's CPU features first (`cpuid`, which
            // traps in a VM), once per process.
            let random = rand::TryRng::try_next_u64(&mut rand::rngs::SysRng)
                .map_err(|e| std::io::Error::other(format!("no random name: {e}")))?;
            let name = format!("hermes-cmd-{random:016x}");
            let path = base.join(name);
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(PrivateTemp(path)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }
}

impl Drop for PrivateTemp {
    fn drop(&mut self) {
        // Symlinks inside are removed, never followed.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Collects the output pipe on a thread; `done` fires at end of file.
/// Output past the cap is kept whole in `spill` when given.
pub(super) fn collect_output(
    mut reader: std::io::PipeReader,
    cap: usize,
    spill: Option<PathBuf>,
) -> (Arc<Mutex<HeadTail>>, mpsc::Receiver<()>) {
    // Leave room for the status lines appended at the end (and for the
    // longer note that names the kept file).
    let room = if spill.is_some() { 900 } else { 400 };
    let mut head_tail = HeadTail::new(cap.saturating_sub(room).max(64));
    head_tail.spill = spill.map(Spill::new);
    let output = Arc::new(Mutex::new(head_tail));
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let sink = output.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            match reader.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if let Ok(mut o) = sink.lock() {
                        o.push(&buf[..n]);
                    }
                }
            }
        }
        let _ = done_tx.send(());
    });
    (output, done_rx)
}

pub(super) fn rendered(output: &Mutex<HeadTail>) -> String {
    let mut text = match output.lock() {
        Ok(o) => o.render(),
        Err(p) => p.into_inner().render(),
    };
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

impl TerminalTool {
    /// Where this call's output is kept if it passes the cap.
    fn spill_path(&self) -> Option<PathBuf> {
        self.workdir
            .spill_dir()
            .map(|dir| crate::spill::output_path(dir, "terminal"))
    }
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
            .workdir
            .open_dir(args.workdir.as_deref().unwrap_or("."))?;
        if self.settings.mode == SandboxMode::On
            && let Some(why) = unavailable_reason()
        {
            return Err(failed(format!(
                "Error: the terminal's sandbox is unavailable: {why}. Commands are refused rather \
                 than run unconfined. The user can opt out with [agent] sandbox = \"off\" in \
                 config.toml or --no-sandbox."
            )));
        }
        // Asked last, so the user is never asked about a command that would
        // be refused anyway; an approved command runs in the same sandbox.
        self.settings
            .approval
            .check("terminal", &args.command, ctx.interrupt)?;
        let env_home = self.workdir.root().to_path_buf();
        if args.background {
            let Some(scope) = &self.background else {
                return Err(failed(
                    "Error: background processes are not available here; run the command in \
                     the foreground with a larger timeout.",
                ));
            };
            return self.start_background(
                scope,
                &args.command,
                dir,
                env_home,
                args.notify_on_complete,
            );
        }
        self.run(&args.command, dir, env_home, timeout_s, ctx)
    }
}

#[cfg(target_os = "linux")]
impl TerminalTool {
    /// Everything a sandboxed `sh -c command` needs, foreground or
    /// background alike: the confinement, the environment, the directory,
    /// the output pipe and a private temp dir (kept until it ends).
    fn plan(
        &self,
        command: &str,
        dir: &super::workdir::OpenedDir,
        env_home: PathBuf,
        backstop: Duration,
    ) -> Result<
        (
            crate::sandbox::spawn::Plan,
            std::io::PipeReader,
            PrivateTemp,
        ),
        ToolError,
    > {
        use crate::sandbox::rules;
        use crate::sandbox::spawn::Plan;
        use std::ffi::CString;
        use std::os::unix::ffi::OsStrExt;

        let setup = |what: &str, e: &dyn std::fmt::Display| {
            failed(format!("Error: cannot {what} for the command: {e}"))
        };
        let tmp = PrivateTemp::create().map_err(|e| setup("create a temp dir", &e))?;
        let confined = self.settings.mode == SandboxMode::On;
        let rules::Confinement { ruleset, hide } = rules::confinement(
            confined,
            self.workdir.root(),
            &tmp.0,
            self.workdir.home(),
            &self.settings.extra_read,
            &self.settings.extra_write,
        )
        .map_err(|(what, e)| setup(what, &e))?;
        let (reader, writer) = std::io::pipe().map_err(|e| setup("create a pipe", &e))?;
        let env: Vec<(OsString, OsString)> = child_env(
            std::env::vars_os(),
            &self.settings.env_passthrough,
            &env_home,
            Some(&tmp.0),
        );
        let plan = Plan {
            program: c"/bin/sh".to_owned(),
            args: vec![
                c"sh".to_owned(),
                c"-c".to_owned(),
                CString::new(command)
                    .map_err(|_| failed("Error: 'command' contains a NUL byte."))?,
            ],
            env,
            cwd: CString::new(dir.real.as_os_str().as_bytes())
                .map_err(|e| setup("enter the working directory", &e))?,
            ruleset,
            hide,
            output: writer.into(),
            errors: None,
            backstop,
        };
        Ok((plan, reader, tmp))
    }

    /// Starts `command` in the background: the same plan, launched and
    /// waited for on the process's own thread ([`super::background`]).
    fn start_background(
        &self,
        scope: &BackgroundScope,
        command: &str,
        dir: super::workdir::OpenedDir,
        env_home: PathBuf,
        notify: bool,
    ) -> Result<String, ToolError> {
        let backstop = scope.limits().wall_clock + Duration::from_secs(30);
        let (plan, reader, tmp) = self.plan(command, &dir, env_home, backstop)?;
        let launch: super::background::Launch = Box::new(move || {
            let launched = crate::sandbox::spawn::launch(plan)
                .map_err(|e| format!("cannot start a sandboxed process: {e}"))?;
            let waiter: Box<dyn super::background::Waiter> = Box::new(SandboxWaiter {
                launched,
                _tmp: tmp,
            });
            Ok((waiter, reader))
        });
        let id = scope.start(command, notify, launch)?;
        let limits = scope.limits();
        let notice = if notify {
            "Its end (status and last lines) will be posted to this chat once."
        } else {
            "Check on it with the process tool."
        };
        Ok(format!(
            "Started background process {id}. {notice} Output is kept on disk (first {} bytes); \
             read it with process(action='log', session_id='{id}'). It is killed after {} s, \
             and if hermes stops.",
            limits.output_cap,
            limits.wall_clock.as_secs()
        ))
    }
}

/// A launched background command; its temp dir lives as long as it runs.
#[cfg(target_os = "linux")]
struct SandboxWaiter {
    launched: crate::sandbox::spawn::Launched,
    _tmp: PrivateTemp,
}

#[cfg(target_os = "linux")]
impl super::background::Waiter for SandboxWaiter {
    fn wait(mut self: Box<Self>, deadline: Instant, stop: &dyn Fn() -> bool) -> String {
        let (outcome, stopped) = self.launched.wait(deadline, stop);
        if let Some((stage, errno)) = outcome.setup_failure {
            return format!(
                "failed: cannot {}: {}",
                stage.describe(),
                std::io::Error::from_raw_os_error(errno)
            );
        }
        match (stopped, outcome.status) {
            (Some(_), _) => "killed".into(),
            (None, Some(st)) if libc::WIFEXITED(st) => {
                format!("exit code {}", libc::WEXITSTATUS(st))
            }
            (None, Some(st)) if libc::WIFSIGNALED(st) => {
                format!("killed by signal {}", libc::WTERMSIG(st))
            }
            _ => "exit status unknown".into(),
        }
    }
}

#[cfg(not(target_os = "linux"))]
impl TerminalTool {
    fn start_background(
        &self,
        _scope: &BackgroundScope,
        _command: &str,
        _dir: super::workdir::OpenedDir,
        _env_home: PathBuf,
        _notify: bool,
    ) -> Result<String, ToolError> {
        Err(failed(
            "Error: background processes need Linux (the sandbox's process supervisor).",
        ))
    }
}

#[cfg(target_os = "linux")]
impl TerminalTool {
    fn run(
        &self,
        command: &str,
        dir: super::workdir::OpenedDir,
        env_home: PathBuf,
        timeout_s: u64,
        ctx: &ToolContext<'_>,
    ) -> Result<String, ToolError> {
        use crate::sandbox::spawn::{self, Containment, Stage, Stop};

        let (plan, reader, tmp) =
            self.plan(command, &dir, env_home, Duration::from_secs(timeout_s + 30))?;
        let hide = plan.hide.clone();
        let setup = |what: &str, e: &dyn std::fmt::Display| {
            failed(format!("Error: cannot {what} for the command: {e}"))
        };
        let mut launched =
            spawn::launch(plan).map_err(|e| setup("start a sandboxed process", &e))?;
        if hide.is_some() && launched.containment == Containment::ProcessGroup {
            // Cannot happen: hiding needs a namespace, and `launch` does not
            // fall back to the process group when asked to hide.
            return Err(setup("hide the Hermes home", &"no mount namespace"));
        }
        let (output, done) = collect_output(reader, self.cap, self.spill_path());
        let deadline = Instant::now() + Duration::from_secs(timeout_s);
        let (outcome, stopped) = launched.wait(deadline, &|| ctx.interrupt.is_set());
        let drained = done.recv_timeout(DRAIN_GRACE).is_ok();
        drop(tmp);

        if let Some((stage, errno)) = outcome.setup_failure
            && matches!(stage, Stage::Chdir | Stage::Landlock | Stage::Exec)
        {
            return Err(failed(format!(
                "Error: cannot {}: {}",
                stage.describe(),
                std::io::Error::from_raw_os_error(errno)
            )));
        }
        let mut text = rendered(&output);
        let weak = launched.containment == Containment::ProcessGroup;
        let all_gone = !weak || outcome.init_finished;
        match stopped {
            None if outcome.killed_after > 0 => text.push_str(
                "[processes the command left running (background jobs, setsid or nohup \
                 children) were killed when it ended; run long jobs in the foreground with a \
                 larger timeout]\n",
            ),
            _ => {}
        }
        if !all_gone {
            text.push_str(
                "[this system refuses PID namespaces, and the command's supervisor did not \
                 finish: processes that left its process group may still be running]\n",
            );
        } else if !drained {
            text.push_str("[output after the command ended is not shown]\n");
        }
        let killed = if all_gone {
            "it and every process it started were killed"
        } else {
            "it was killed"
        };
        match stopped {
            Some(Stop::TimedOut) => text.push_str(&format!(
                "[command timed out after {timeout_s} s; {killed}. Raise 'timeout' (max \
                 {MAX_TIMEOUT_S})]"
            )),
            Some(Stop::Interrupted) => text.push_str(&format!("[interrupted; {killed}]")),
            None => match outcome.status {
                Some(st) if libc::WIFEXITED(st) => {
                    text.push_str(&format!("[exit code: {}]", libc::WEXITSTATUS(st)))
                }
                Some(st) if libc::WIFSIGNALED(st) => {
                    text.push_str(&format!("[killed by signal {}]", libc::WTERMSIG(st)))
                }
                _ => text.push_str("[exit status unknown]"),
            },
        }
        Ok(text)
    }
}

#[cfg(not(target_os = "linux"))]
impl TerminalTool {
    /// Off Linux there is no sandbox: this runs only when the user opted
    /// out, in a process group that is killed on timeout and interrupt.
    fn run(
        &self,
        command: &str,
        _dir: super::workdir::OpenedDir,
        env_home: PathBuf,
        timeout_s: u64,
        ctx: &ToolContext<'_>,
    ) -> Result<String, ToolError> {
        use std::os::unix::process::{CommandExt, ExitStatusExt};
        let (reader, writer) = std::io::pipe()
            .map_err(|e| failed(format!("Error: cannot create a pipe for the command: {e}")))?;
        let writer2 = writer
            .try_clone()
            .map_err(|e| failed(format!("Error: cannot create a pipe for the command: {e}")))?;
        let mut cmd = std::process::Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(command)
            .current_dir(&_dir.real)
            .env_clear()
            .envs(child_env(
                std::env::vars_os(),
                &self.settings.env_passthrough,
                &env_home,
                None,
            ))
            .stdin(std::process::Stdio::null())
            .stdout(writer)
            .stderr(writer2)
            .process_group(0);
        let mut child = cmd
            .spawn()
            .map_err(|e| failed(format!("Error: cannot start the shell: {e}")))?;
        drop(cmd);
        let (output, done) = collect_output(reader, self.cap, self.spill_path());
        let pgid = child.id() as libc::pid_t;
        let started = Instant::now();
        let stopped = loop {
            if let Ok(Some(_)) = child.try_wait() {
                break None;
            }
            if started.elapsed() >= Duration::from_secs(timeout_s) {
                break Some("timed out");
            }
            if ctx.interrupt.is_set() {
                break Some("interrupted");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // SAFETY: kill(2) on the command's own process group.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
        let status = child.wait().ok();
        let _ = done.recv_timeout(DRAIN_GRACE);
        let mut text = rendered(&output);
        match (stopped, status) {
            (Some(why), _) => text.push_str(&format!(
                "[{why}; the command's process group was killed (processes that left it may \
                 still run)]"
            )),
            (None, Some(s)) => match (s.code(), s.signal()) {
                (Some(code), _) => text.push_str(&format!("[exit code: {code}]")),
                (None, Some(sig)) => text.push_str(&format!("[killed by signal {sig}]")),
                _ => text.push_str("[exit status unknown]"),
            },
            (None, None) => text.push_str("[exit status unknown]"),
        }
        Ok(text)
    }
}
