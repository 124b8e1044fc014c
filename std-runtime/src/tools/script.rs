//! A scheduled job's script (SPEC Y1, `hermes cron create --script`): a
//! file of `$HERMES_HOME/scripts/`, run the way the terminal runs a
//! command — in the sandbox, with the allow-listed environment, in the
//! working directory, nothing it starts outliving it — with a timeout.
//!
//! The script is *copied* into the run's private temp dir and run from
//! there: the sandbox never grants the home (where `.env` and the store
//! live), and covers it when the working directory contains it. Its stdout
//! and stderr are kept apart: stdout is what the job is about (context for
//! the agent, or the answer itself), stderr says why it failed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hermes_core::InterruptFlag;

use super::ToolEnv;
pub use crate::cron::script::{SCRIPTS_DIR, check_script, scripts_dir};

/// How long a script may run unless told otherwise.
pub const DEFAULT_SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);
/// The most of its stdout kept (head and tail, the middle marked).
const STDOUT_CAP: usize = 64 * 1024;
/// The most of its stderr kept.
const STDERR_CAP: usize = 4 * 1024;

/// How a script ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScriptEnd {
    /// It exited with this code.
    Exit(i32),
    /// A signal killed it.
    Signal(i32),
    /// Its timeout passed; it and everything it started were killed.
    TimedOut(Duration),
    /// The run was interrupted (the gateway stopping).
    Interrupted,
    /// Nobody could tell.
    Unknown,
}

/// What a script printed, and how it ended.
#[derive(Clone, Debug)]
pub struct ScriptRun {
    /// Its stdout (cut in the middle past 64 KiB, visibly).
    pub stdout: String,
    /// Its stderr (cut past 4 KiB).
    pub stderr: String,
    /// How it ended.
    pub end: ScriptEnd,
}

impl ScriptRun {
    /// Exit code 0.
    pub fn succeeded(&self) -> bool {
        self.end == ScriptEnd::Exit(0)
    }

    /// Why it did not succeed, in one sentence with its stderr (or stdout)
    /// for the run's record; `None` when it succeeded.
    pub fn failure(&self) -> Option<String> {
        let why = match &self.end {
            ScriptEnd::Exit(0) => return None,
            ScriptEnd::Exit(code) => format!("the script exited with code {code}"),
            ScriptEnd::Signal(sig) => format!("the script was killed by signal {sig}"),
            ScriptEnd::TimedOut(after) => format!(
                "the script timed out after {} s; it and everything it started were killed",
                after.as_secs()
            ),
            ScriptEnd::Interrupted => "the script was interrupted".to_owned(),
            ScriptEnd::Unknown => "the script's exit status is unknown".to_owned(),
        };
        let said = [self.stderr.trim(), self.stdout.trim()]
            .into_iter()
            .find(|s| !s.is_empty());
        Some(match said {
            Some(said) => format!("{why}: {said}"),
            None => why,
        })
    }
}

/// Runs the script `given` (a path [`check_script`] accepts, checked again
/// now) in `env`'s sandbox and working directory. `Err` is a sentence: the
/// script could not be started at all.
pub fn run_script(
    env: &ToolEnv,
    given: &str,
    timeout: Duration,
    interrupt: &InterruptFlag,
) -> Result<ScriptRun, String> {
    let scripts = scripts_dir(&env.hermes_home);
    let relative = check_script(&scripts, given)?;
    let source = scripts.join(relative);
    let workdir = super::Workdir::new(env).map_err(|e| e.to_string())?;
    if env.sandbox == super::SandboxMode::On
        && let Some(why) = crate::sandbox::unavailable_reason()
    {
        return Err(format!(
            "the sandbox is unavailable ({why}); scripts are not run unconfined. The user can \
             opt out with [agent] sandbox = \"off\""
        ));
    }
    // The copy the shell executes was just written by this process; a
    // process another thread forks in that moment holds the write handle
    // until its own exec, and executing a file open for writing fails with
    // ETXTBSY ("Text file busy", the shell's exit 126) — the script never
    // started. Seen in CI with jobs launched side by side. Such a start is
    // tried again, a few times; anything else is the script's own outcome.
    let mut attempt = 0;
    loop {
        let (run, copy) = launch(env, &workdir, &source, timeout, interrupt)?;
        attempt += 1;
        if attempt >= EXEC_ATTEMPTS || !never_started(&run, &copy) {
            return Ok(run);
        }
        std::thread::sleep(Duration::from_millis(20 * attempt));
    }
}

/// How often a script whose copy was busy is started before its failure
/// stands.
const EXEC_ATTEMPTS: u64 = 5;

/// Whether `run` is the shell's refusal to execute the fresh `copy` because
/// a writer still held it (see [`run_script`]): exit 126 and the shell's
/// message naming the copy's private path.
fn never_started(run: &ScriptRun, copy: &Path) -> bool {
    matches!(run.end, ScriptEnd::Exit(126))
        && run.stderr.contains("Text file busy")
        && run.stderr.contains(&*copy.to_string_lossy())
}

#[cfg(target_os = "linux")]
fn launch(
    env: &ToolEnv,
    workdir: &super::Workdir,
    source: &Path,
    timeout: Duration,
    interrupt: &InterruptFlag,
) -> Result<(ScriptRun, PathBuf), String> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    use std::time::Instant;

    use super::terminal::{PrivateTemp, collect_output, rendered};
    use crate::sandbox::rules;
    use crate::sandbox::spawn::{self, Containment, Plan, Stop};
    use crate::sandbox::{SandboxMode, child_env};

    let setup = |what: &str, e: &dyn std::fmt::Display| format!("cannot {what}: {e}");
    let tmp = PrivateTemp::create().map_err(|e| setup("create a temp dir for the script", &e))?;
    let name = source
        .file_name()
        .map_or_else(|| "script".into(), |n| n.to_owned());
    let copy = tmp.0.join(name);
    std::fs::copy(source, &copy).map_err(|e| setup("copy the script", &e))?;
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| setup("make the script executable", &e))?;
    let confined = env.sandbox == SandboxMode::On;
    let rules::Confinement { ruleset, hide } = rules::confinement(
        confined,
        workdir.root(),
        &tmp.0,
        workdir.home(),
        &env.sandbox_read,
        &env.sandbox_write,
    )
    .map_err(|(what, e)| setup(what, &e))?;
    let (out_r, out_w) = std::io::pipe().map_err(|e| setup("create a pipe", &e))?;
    let (err_r, err_w) = std::io::pipe().map_err(|e| setup("create a pipe", &e))?;
    let plan = Plan {
        program: c"/bin/sh".to_owned(),
        // `sh` runs a file without a `#!` line as a shell script.
        args: vec![
            c"sh".to_owned(),
            c"-c".to_owned(),
            c"\"$0\"".to_owned(),
            CString::new(copy.as_os_str().as_bytes()).map_err(|e| setup("name the script", &e))?,
        ],
        env: child_env(
            std::env::vars_os(),
            &env.env_passthrough,
            workdir.root(),
            Some(&tmp.0),
        ),
        cwd: CString::new(workdir.root().as_os_str().as_bytes())
            .map_err(|e| setup("enter the working directory", &e))?,
        ruleset,
        hide: hide.clone(),
        output: out_w.into(),
        errors: Some(err_w.into()),
        backstop: timeout + Duration::from_secs(30),
    };
    let mut launched = spawn::launch(plan).map_err(|e| setup("start a sandboxed process", &e))?;
    if hide.is_some() && launched.containment == Containment::ProcessGroup {
        return Err(setup("hide the Hermes home", &"no mount namespace"));
    }
    let (stdout, out_done) = collect_output(out_r, STDOUT_CAP, None);
    let (stderr, err_done) = collect_output(err_r, STDERR_CAP, None);
    let (outcome, stopped) = launched.wait(Instant::now() + timeout, &|| interrupt.is_set());
    let grace = Duration::from_secs(2);
    let _ = (out_done.recv_timeout(grace), err_done.recv_timeout(grace));
    drop(tmp);
    if let Some((stage, errno)) = outcome.setup_failure {
        return Err(format!(
            "cannot {}: {}",
            stage.describe(),
            std::io::Error::from_raw_os_error(errno)
        ));
    }
    let end = match (stopped, outcome.status) {
        (Some(Stop::TimedOut), _) => ScriptEnd::TimedOut(timeout),
        (Some(Stop::Interrupted), _) => ScriptEnd::Interrupted,
        (None, Some(st)) if libc::WIFEXITED(st) => ScriptEnd::Exit(libc::WEXITSTATUS(st)),
        (None, Some(st)) if libc::WIFSIGNALED(st) => ScriptEnd::Signal(libc::WTERMSIG(st)),
        (None, _) => ScriptEnd::Unknown,
    };
    Ok((
        ScriptRun {
            stdout: rendered(&stdout),
            stderr: rendered(&stderr),
            end,
        },
        copy,
    ))
}

#[cfg(not(target_os = "linux"))]
fn launch(
    _env: &ToolEnv,
    _workdir: &super::Workdir,
    _source: &Path,
    _timeout: Duration,
    _interrupt: &InterruptFlag,
) -> Result<(ScriptRun, PathBuf), String> {
    Err("scheduled scripts run only on Linux (in its sandbox)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(end: ScriptEnd, stderr: &str) -> ScriptRun {
        ScriptRun {
            stdout: String::new(),
            stderr: stderr.to_owned(),
            end,
        }
    }

    #[test]
    fn only_the_shells_busy_refusal_of_this_copy_is_started_again() {
        let copy = Path::new("/tmp/hermes-cmd-0123456789abcdef/check.sh");
        // dash's words when execve fails with ETXTBSY (seen in CI).
        let busy = "/tmp/hermes-cmd-0123456789abcdef/check.sh: 1: \
                    /tmp/hermes-cmd-0123456789abcdef/check.sh: Text file busy\n";
        assert!(never_started(&run(ScriptEnd::Exit(126), busy), copy));
        // The script's own exit 126, or its own words: its outcome stands.
        assert!(!never_started(
            &run(ScriptEnd::Exit(126), "permission denied"),
            copy
        ));
        assert!(!never_started(
            &run(ScriptEnd::Exit(126), "Text file busy"),
            copy
        ));
        assert!(!never_started(&run(ScriptEnd::Exit(1), busy), copy));
        let other = Path::new("/tmp/hermes-cmd-fedcba9876543210/check.sh");
        assert!(!never_started(&run(ScriptEnd::Exit(126), busy), other));
    }
}
