//! Starting a stdio MCP server: the user's own program, so not sandboxed,
//! but with an explicit environment and a lifetime bound to hermes.
//!
//! - **Environment**: built from nothing — the shell basics the terminal's
//!   commands get too (`PATH`, locale, `TERM`, `TZ`; see
//!   [`child_env`]), plus `HOME`, `USER`, `LOGNAME` and `TMPDIR` (a
//!   program such as `npx` needs its real home for its cache), plus the
//!   server's `env` table. Never a provider key or a platform token.
//! - **Its own process group**, so Ctrl-C in the terminal (SIGINT to the
//!   foreground group) does not reach it, and stopping it kills everything
//!   it started (`npx` → `node`).
//! - **It dies with hermes**: `PR_SET_PDEATHSIG(SIGKILL)`, checked against
//!   hermes's pid right after it is set. The death signal fires when the
//!   *thread* that forked exits, so every server is forked by one spawner
//!   thread that lives as long as the process. A SIGKILLed hermes thus
//!   kills the server process itself; what *it* started sees its stdin
//!   close, which ends a well-behaved MCP server.
//! - **stderr** is kept as a bounded tail (secrets replaced by `***`) for
//!   `hermes mcp list` and the log when the server fails.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};

use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

use crate::sandbox::child_env;
use crate::sync::lock;

/// How much of a server's stderr is kept.
const STDERR_TAIL_BYTES: usize = 8 * 1024;
/// The longest stderr line kept whole.
const STDERR_LINE_MAX: usize = 1024;

/// The last lines a server wrote to stderr, secrets replaced.
#[derive(Debug, Default)]
pub(crate) struct StderrTail {
    lines: VecDeque<String>,
    bytes: usize,
}

impl StderrTail {
    fn push(&mut self, line: String) {
        self.bytes += line.len();
        self.lines.push_back(line);
        while self.bytes > STDERR_TAIL_BYTES {
            match self.lines.pop_front() {
                Some(old) => self.bytes -= old.len(),
                None => break,
            }
        }
    }

    /// The last `n` lines, oldest first.
    pub(crate) fn last(&self, n: usize) -> Vec<String> {
        let skip = self.lines.len().saturating_sub(n);
        self.lines.iter().skip(skip).cloned().collect()
    }
}

/// Replaces every secret in `line` with `***`.
pub(crate) fn redact(line: &str, secrets: &[String]) -> String {
    let mut out = line.to_owned();
    for s in secrets {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), "***");
        }
    }
    out
}

/// A running server process. Dropping it kills its whole process group.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    pid: u32,
    /// Filled in when the process exits.
    exit: Arc<Mutex<Option<ExitStatus>>>,
    /// Fires when the process exits.
    exited: Option<oneshot::Receiver<()>>,
    /// Fires when its stderr reaches end of file (everything it wrote is
    /// in the tail).
    stderr_closed: Option<oneshot::Receiver<()>>,
    pub(crate) stderr: Arc<Mutex<StderrTail>>,
}

impl ServerProcess {
    /// The server's pid (also its process group id).
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// How it ended, once it has.
    pub(crate) fn exit_status(&self) -> Option<ExitStatus> {
        *lock(&self.exit)
    }

    /// Waits until the process has exited.
    pub(crate) async fn wait_exit(&mut self) {
        if let Some(rx) = self.exited.take() {
            let _ = rx.await;
        }
    }

    /// Waits (at most `limit`) until everything the process wrote to
    /// stderr is in the tail: after it exited, so the tail explains why.
    pub(crate) async fn wait_stderr(&mut self, limit: std::time::Duration) {
        if let Some(rx) = self.stderr_closed.take() {
            let _ = tokio::time::timeout(limit, rx).await;
        }
    }

    /// Kills the process group (SIGKILL).
    pub(crate) fn kill(&self) {
        // SAFETY: killpg(2) with our own child's process group id. The
        // group outlives its leader while any member lives, and Linux does
        // not hand out a pid that is still some group's id.
        unsafe {
            libc::killpg(self.pid as libc::pid_t, libc::SIGKILL);
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Describes an exit status the way a user reads it.
pub(crate) fn describe_exit(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "exited".to_owned(),
    }
}

/// The environment of a server: the basics plus its `env` table.
pub(crate) fn server_env(
    parent: impl IntoIterator<Item = (OsString, OsString)>,
    configured: &std::collections::BTreeMap<String, String>,
) -> Vec<(OsString, OsString)> {
    let parent: Vec<(OsString, OsString)> = parent.into_iter().collect();
    let home = parent
        .iter()
        .find(|(k, _)| k == "HOME")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| OsString::from("/"));
    let tmpdir = parent
        .iter()
        .find(|(k, _)| k == "TMPDIR")
        .map(|(_, v)| v.clone());
    let mut env = child_env(
        parent.iter().cloned(),
        &["USER".to_owned(), "LOGNAME".to_owned()],
        Path::new(&home),
        tmpdir.as_deref().map(Path::new),
    );
    for (k, v) in configured {
        env.retain(|(name, _)| name != k.as_str());
        env.push((k.into(), v.into()));
    }
    env.sort();
    env
}

/// One fork request for the spawner thread.
struct SpawnJob {
    command: Command,
    handle: Handle,
    reply: oneshot::Sender<io::Result<Child>>,
}

/// The thread every server is forked from (see the module docs: the death
/// signal follows the forking thread). It lives as long as the process.
fn spawner() -> io::Result<mpsc::Sender<SpawnJob>> {
    static SPAWNER: OnceLock<Mutex<Option<mpsc::Sender<SpawnJob>>>> = OnceLock::new();
    let slot = SPAWNER.get_or_init(|| Mutex::new(None));
    let mut slot = lock(slot);
    if let Some(tx) = slot.as_ref() {
        return Ok(tx.clone());
    }
    let (tx, rx) = mpsc::channel::<SpawnJob>();
    std::thread::Builder::new()
        .name("hermes-mcp-spawn".into())
        .spawn(move || {
            for mut job in rx {
                // tokio's child reaping needs the runtime of the caller.
                let _entered = job.handle.enter();
                let _ = job.reply.send(job.command.spawn());
            }
        })?;
    *slot = Some(tx.clone());
    Ok(tx)
}

/// Starts `program args…` in `cwd` with exactly `env`, as described in the
/// module docs. Returns the process and its stdout/stdin for the transport.
pub(crate) async fn start(
    program: &str,
    args: &[String],
    cwd: &Path,
    env: Vec<(OsString, OsString)>,
    secrets: Vec<String>,
    server_name: &str,
) -> io::Result<(ServerProcess, ChildStdout, ChildStdin)> {
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let hermes = std::process::id() as libc::pid_t;
    // SAFETY: runs between fork and exec: only prctl(2) and getppid(2),
    // async-signal-safe, and an error built from an errno (no allocation).
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // hermes may have died before the death signal was armed.
            if libc::getppid() != hermes {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    let (reply, rx) = oneshot::channel();
    spawner()?
        .send(SpawnJob {
            command,
            handle: Handle::current(),
            reply,
        })
        .map_err(|_| io::Error::other("the MCP spawner thread is gone"))?;
    let mut child = rx
        .await
        .map_err(|_| io::Error::other("the MCP spawner thread is gone"))??;
    let pid = child
        .id()
        .ok_or_else(|| io::Error::other("the server exited at once"))?;
    let (Some(stdout), Some(stdin), Some(stderr)) =
        (child.stdout.take(), child.stdin.take(), child.stderr.take())
    else {
        return Err(io::Error::other("the server's pipes were not set up"));
    };
    let tail = Arc::new(Mutex::new(StderrTail::default()));
    let sink = tail.clone();
    let name = server_name.to_owned();
    let (stderr_tx, stderr_closed) = oneshot::channel();
    crate::task::spawn(async move {
        let _closed = stderr_tx;
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut line = redact(&line, &secrets);
            if line.len() > STDERR_LINE_MAX {
                let cut = crate::text::floor_char_boundary(&line, STDERR_LINE_MAX);
                line.truncate(cut);
                line.push('…');
            }
            tracing::debug!(server = %name, "mcp stderr: {line}");
            lock(&sink).push(line);
        }
    });
    let exit = Arc::new(Mutex::new(None));
    let (exited_tx, exited) = oneshot::channel();
    let status_slot = exit.clone();
    crate::task::spawn(async move {
        if let Ok(status) = child.wait().await {
            *lock(&status_slot) = Some(status);
        }
        let _ = exited_tx.send(());
    });
    Ok((
        ServerProcess {
            pid,
            exit,
            exited: Some(exited),
            stderr_closed: Some(stderr_closed),
            stderr: tail,
        },
        stdout,
        stdin,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_is_built_from_nothing() {
        let parent: Vec<(OsString, OsString)> = [
            ("PATH", "/usr/bin"),
            ("HOME", "/home/ana"),
            ("USER", "ana"),
            ("OPENAI_API_KEY", "sk-secret"),
            ("TELEGRAM_BOT_TOKEN", "123:abc"),
            ("LC_ALL", "C.UTF-8"),
        ]
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect();
        let configured = [("TOKEN".to_owned(), "mine".to_owned())].into();
        let env = server_env(parent, &configured);
        let names: Vec<String> = env
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["HOME", "LC_ALL", "PATH", "TOKEN", "USER"]);
        assert!(env.contains(&("HOME".into(), "/home/ana".into())));
    }

    #[test]
    fn redaction_and_tail_bounds() {
        let secrets = vec!["tok-123456".to_owned()];
        assert_eq!(redact("auth tok-123456 ok", &secrets), "auth *** ok");
        let mut tail = StderrTail::default();
        for i in 0..10_000 {
            tail.push(format!("line {i}"));
        }
        assert!(tail.bytes <= STDERR_TAIL_BYTES);
        assert_eq!(tail.last(1), ["line 9999"]);
    }
}
