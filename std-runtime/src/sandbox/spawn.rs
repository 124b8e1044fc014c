//! Starting a command so that nothing it starts outlives it (Linux).
//!
//! ```text
//! hermes (the tool's thread)
//!  └─ init     clone3(CLONE_NEWUSER | CLONE_NEWPID [| CLONE_NEWNS]): pid 1 of a
//!     │        new PID namespace; PR_SET_PDEATHSIG = SIGKILL; its own session
//!     └─ sh -c COMMAND     Landlock applied, then execve
//!          └─ whatever the command starts (background jobs, setsid, nohup…)
//! ```
//!
//! - **The init is the command's lifetime.** When `sh` exits the init exits,
//!   and when the init of a PID namespace exits the kernel kills every
//!   process left in it and waits for them: background jobs, `setsid` and
//!   `nohup` children and double-forked daemons all die, and by the time
//!   hermes has reaped the init they are gone (the tool's "killed" is true).
//!   A timeout or an interrupt kills the init, with the same effect.
//! - **The init dies with hermes**: `PR_SET_PDEATHSIG(SIGKILL)`, checked
//!   against a pidfd of hermes right after it is set (hermes may already
//!   have died), so a SIGKILLed hermes or gateway leaves nothing running.
//!   The death signal follows the *thread* that created the init; that is
//!   the thread running the tool, which waits for the command.
//! - **A user namespace** makes the PID namespace possible without root,
//!   and takes the host's capabilities away from a command even when hermes
//!   runs as root (the uid and gid are mapped to themselves). Where user
//!   namespaces are refused, a PID namespace alone is tried (root), then
//!   neither: the command's process group is killed and the init, a child
//!   subreaper, kills every orphan it inherits; only a SIGKILL of hermes can
//!   then leave processes behind, and [`Containment`] says so.
//! - **A mount namespace** (only when asked for) lets the init cover
//!   `$HERMES_HOME` with an empty tmpfs when it lies beneath something the
//!   command may otherwise read (the working directory contains it).
//!
//! **Only async-signal-safe work after the clone.** hermes is
//! multi-threaded; a cloned child may find any lock (malloc's included)
//! held by a thread that does not exist in it. So everything is prepared
//! before the clone — argv and envp as C strings, the Landlock ruleset (a
//! descriptor built with the `landlock` crate), the uid/gid map lines, the
//! pipes — and the children only make system calls on it: no allocation,
//! no locks, no panics (no indexing, wrapping arithmetic). The init is not
//! a re-executed launcher binary: the library runs inside the CLI, the
//! gateway and tests, and finding a helper binary at run time (and paying
//! an extra `execve` per command) buys nothing this short, audited syscall
//! sequence does not already give.

mod child;

use std::ffi::{CString, OsString};
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

/// How a command's processes are kept from outliving it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Containment {
    /// In a PID namespace (inside a user namespace when `user_ns`): nothing
    /// outlives the command, not even a SIGKILL of hermes.
    PidNamespace {
        /// Whether a user namespace was used as well.
        user_ns: bool,
    },
    /// In a process group under a subreaper: everything is killed when the
    /// command ends, times out or is interrupted, but a SIGKILL of hermes
    /// can leave processes that left the group running.
    ProcessGroup,
}

impl Containment {
    /// A short description for `hermes doctor` and tool results.
    pub fn describe(&self) -> &'static str {
        match self {
            Containment::PidNamespace { user_ns: true } => {
                "PID namespace in a user namespace: nothing a command starts outlives it"
            }
            Containment::PidNamespace { user_ns: false } => {
                "PID namespace: nothing a command starts outlives it"
            }
            Containment::ProcessGroup => {
                "process group and subreaper (this system refuses PID namespaces): everything \
                 is killed when a command ends, but processes that left the group survive a \
                 SIGKILL of hermes"
            }
        }
    }
}

/// Everything the children need, prepared before the clone.
#[derive(Debug)]
pub struct Plan {
    /// The program (`/bin/sh`).
    pub program: CString,
    /// Its arguments, `argv[0]` first.
    pub args: Vec<CString>,
    /// Its whole environment.
    pub env: Vec<(OsString, OsString)>,
    /// The directory it starts in, as the kernel named it. A path, not a
    /// handle: in a mount namespace of its own a handle would still point
    /// into hermes's mounts, past anything mounted over the home. (Landlock
    /// decides what it may touch, wherever it starts.)
    pub cwd: CString,
    /// The Landlock ruleset to apply, when sandboxed.
    pub ruleset: Option<OwnedFd>,
    /// A directory to cover with an empty tmpfs (needs a mount namespace).
    pub hide: Option<CString>,
    /// Where the command's stdout and stderr go.
    pub output: OwnedFd,
    /// Where its stderr goes instead, when kept apart (a scheduled
    /// script's stdout is its answer; its stderr says why it failed).
    pub errors: Option<OwnedFd>,
    /// The init gives up by itself after this long (hermes enforces the
    /// real timeout; this only matters if hermes cannot).
    pub backstop: Duration,
}

/// A running command: its init's pid, and the pipe of its reports.
#[derive(Debug)]
pub struct Launched {
    pid: libc::pid_t,
    pidfd: Option<OwnedFd>,
    report: std::fs::File,
    /// How it is contained.
    pub containment: Containment,
    reaped: bool,
}

/// How a command ended, as the init saw it.
#[derive(Debug, Default)]
pub struct Outcome {
    /// `sh`'s wait status, when it exited (or was killed) on its own.
    pub status: Option<libc::c_int>,
    /// A setup step that failed, and its errno.
    pub setup_failure: Option<(Stage, i32)>,
    /// Processes the init killed after the command ended (process-group
    /// containment only; a namespace's are killed by the kernel).
    pub killed_after: u32,
    /// Whether the init finished its work (false: it was killed by hermes,
    /// or died).
    pub init_finished: bool,
}

/// The steps of the children, for error reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Writing the uid/gid maps of the user namespace.
    IdMap,
    /// Covering `$HERMES_HOME`.
    Mount,
    /// Starting the command's process.
    Fork,
    /// Entering the working directory.
    Chdir,
    /// Applying Landlock.
    Landlock,
    /// `execve` of the shell.
    Exec,
}

impl Stage {
    fn code(self) -> i32 {
        match self {
            Stage::IdMap => 2,
            Stage::Mount => 3,
            Stage::Fork => 4,
            Stage::Chdir => 5,
            Stage::Landlock => 6,
            Stage::Exec => 7,
        }
    }

    fn from_code(c: i32) -> Option<Stage> {
        Some(match c {
            2 => Stage::IdMap,
            3 => Stage::Mount,
            4 => Stage::Fork,
            5 => Stage::Chdir,
            6 => Stage::Landlock,
            7 => Stage::Exec,
            _ => return None,
        })
    }

    /// What the step does, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Stage::IdMap => "set up the user namespace",
            Stage::Mount => "hide the Hermes home directory",
            Stage::Fork => "start the command",
            Stage::Chdir => "enter the working directory",
            Stage::Landlock => "apply the Landlock sandbox",
            Stage::Exec => "run /bin/sh",
        }
    }
}

/// Report tags on the pipe from the children (8-byte messages: tag, value).
const TAG_STATUS: i32 = 1;
const TAG_READY: i32 = 9;
const TAG_KILLED_AFTER: i32 = 10;

/// The kinds of clone tried, best first; the first that works is
/// remembered for the process.
const MODES: [Mode; 3] = [Mode::UserPid, Mode::Pid, Mode::Group];
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    UserPid,
    Pid,
    Group,
}
/// Index into [`MODES`] of the first mode worth trying.
static FIRST_MODE: AtomicU8 = AtomicU8::new(0);

impl Mode {
    fn containment(self) -> Containment {
        match self {
            Mode::UserPid => Containment::PidNamespace { user_ns: true },
            Mode::Pid => Containment::PidNamespace { user_ns: false },
            Mode::Group => Containment::ProcessGroup,
        }
    }

    fn flags(self, mount_ns: bool) -> u64 {
        let ns = if mount_ns {
            libc::CLONE_NEWNS as u64
        } else {
            0
        };
        match self {
            Mode::UserPid => (libc::CLONE_NEWUSER | libc::CLONE_NEWPID) as u64 | ns,
            Mode::Pid => libc::CLONE_NEWPID as u64 | ns,
            Mode::Group => 0,
        }
    }
}

/// The containment commands get here, found by starting `true` the way
/// every command is started (for `hermes doctor`).
pub fn probe() -> Containment {
    let first = MODES[usize::from(FIRST_MODE.load(Ordering::Relaxed)).min(MODES.len() - 1)];
    if first != Mode::UserPid {
        return first.containment();
    }
    let Ok((_reader, writer)) = std::io::pipe() else {
        return first.containment();
    };
    let plan = Plan {
        program: c"/bin/sh".to_owned(),
        args: vec![c"sh".to_owned(), c"-c".to_owned(), c"true".to_owned()],
        env: Vec::new(),
        cwd: c"/".to_owned(),
        ruleset: None,
        hide: None,
        output: writer.into(),
        errors: None,
        backstop: Duration::from_secs(10),
    };
    match launch(plan) {
        Ok(mut launched) => {
            let containment = launched.containment;
            let _ = launched.wait(Instant::now() + Duration::from_secs(10), &|| false);
            containment
        }
        Err(_) => Containment::ProcessGroup,
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The bits of [`Plan`] as raw values the children can use without Rust.
struct Raw {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    ruleset: RawFd,
    hide: *const libc::c_char,
    output: RawFd,
    errors: RawFd,
    stdin: RawFd,
    report: RawFd,
    hermes_pidfd: RawFd,
    user_ns: bool,
    pid_ns: bool,
    uid_map: *const libc::c_char,
    uid_map_len: usize,
    gid_map: *const libc::c_char,
    gid_map_len: usize,
    backstop_ms: i64,
}

/// Starts `plan`'s command; see the module docs.
pub fn launch(plan: Plan) -> std::io::Result<Launched> {
    let args: Vec<*const libc::c_char> = plan
        .args
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let env_c: Vec<CString> = plan
        .env
        .iter()
        .filter_map(|(k, v)| {
            let mut kv = k.clone().into_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_encoded_bytes());
            CString::new(kv).ok()
        })
        .collect();
    let envp: Vec<*const libc::c_char> = env_c
        .iter()
        .map(|e| e.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let uid_map = format!("{uid} {uid} 1\n");
    let gid_map = format!("{gid} {gid} 1\n");
    let stdin = std::fs::File::open("/dev/null")?;
    // A pidfd of hermes itself: the init checks it after setting its death
    // signal, in case hermes died before that.
    // SAFETY: pidfd_open takes a pid and flags; no memory is passed.
    let hermes_pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
    let hermes_pidfd = (hermes_pidfd >= 0)
        // SAFETY: the call returned a new descriptor that nothing else owns.
        .then(|| unsafe { OwnedFd::from_raw_fd(hermes_pidfd as RawFd) });

    let mut last_err = std::io::Error::other("no way to start a process");
    let first = usize::from(FIRST_MODE.load(Ordering::Relaxed)).min(MODES.len() - 1);
    for (index, mode) in MODES.iter().enumerate().skip(first) {
        if *mode == Mode::Group && plan.hide.is_some() {
            // Covering the home needs a mount namespace of the command's
            // own; never mount over it in hermes's.
            last_err = std::io::Error::other(
                "the working directory (or a sandbox path) contains the Hermes home, and this \
                 system refuses the namespaces needed to hide it from commands; choose a \
                 working directory that does not contain $HERMES_HOME",
            );
            break;
        }
        let (report_r, report_w) = std::io::pipe()?;
        let raw = Raw {
            program: plan.program.as_ptr(),
            argv: args.as_ptr(),
            envp: envp.as_ptr(),
            cwd: plan.cwd.as_ptr(),
            ruleset: plan.ruleset.as_ref().map_or(-1, |f| f.as_raw_fd()),
            hide: plan.hide.as_ref().map_or(std::ptr::null(), |h| h.as_ptr()),
            output: plan.output.as_raw_fd(),
            errors: plan
                .errors
                .as_ref()
                .map_or(plan.output.as_raw_fd(), |f| f.as_raw_fd()),
            stdin: stdin.as_raw_fd(),
            report: report_w.as_raw_fd(),
            hermes_pidfd: hermes_pidfd.as_ref().map_or(-1, |f| f.as_raw_fd()),
            user_ns: *mode == Mode::UserPid,
            pid_ns: *mode != Mode::Group,
            uid_map: uid_map.as_ptr().cast(),
            uid_map_len: uid_map.len(),
            gid_map: gid_map.as_ptr().cast(),
            gid_map_len: gid_map.len(),
            backstop_ms: i64::try_from(plan.backstop.as_millis()).unwrap_or(i64::MAX),
        };
        // A mount namespace only to hide the home: without one (process
        // group mode) the caller must not ask to hide anything.
        let flags = mode.flags(plan.hide.is_some());
        // SAFETY: fork-like clone (no CLONE_VM, no new stack); the child
        // runs only `init_main`, which never returns and makes only
        // async-signal-safe system calls on `raw`, whose pointers stay
        // valid in the child's copy of memory.
        let pid = unsafe { clone_process(flags) };
        if pid == 0 {
            // SAFETY: see above; this is the child.
            unsafe { child::init_main(&raw) }
        }
        drop(report_w);
        if pid < 0 {
            last_err = std::io::Error::last_os_error();
            continue;
        }
        let pid = pid as libc::pid_t;
        // SAFETY: pidfd_open takes a pid and flags; no memory is passed.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        let pidfd = (fd >= 0)
            // SAFETY: a new descriptor that nothing else owns.
            .then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
        let mut launched = Launched {
            pid,
            pidfd,
            report: std::fs::File::from(OwnedFd::from(report_r)),
            containment: mode.containment(),
            reaped: false,
        };
        // A setup step that failed before the command ran means this mode
        // does not work here: try the next one. Nothing of the command has
        // run yet (the init reports its setup before starting it).
        if let Err(failure) = launched.await_ready() {
            last_err = match failure {
                Some((stage, e)) => std::io::Error::other(format!(
                    "cannot {}: {}",
                    stage.describe(),
                    std::io::Error::from_raw_os_error(e)
                )),
                None => std::io::Error::other("the command's init died while starting"),
            };
            continue;
        }
        FIRST_MODE.store(index as u8, Ordering::Relaxed);
        return Ok(launched);
    }
    Err(last_err)
}

/// A fork-like `clone3` (falling back to `clone` where `clone3` is
/// missing) with extra namespace `flags`. Returns 0 in the child, the pid
/// in the parent, -1 on error.
///
/// # Safety
/// Like `fork`: the child may only make async-signal-safe calls.
unsafe fn clone_process(flags: u64) -> libc::c_long {
    #[repr(C)]
    struct CloneArgs {
        flags: u64,
        pidfd: u64,
        child_tid: u64,
        parent_tid: u64,
        exit_signal: u64,
        stack: u64,
        stack_size: u64,
        tls: u64,
    }
    let mut args = CloneArgs {
        flags,
        pidfd: 0,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: libc::SIGCHLD as u64,
        stack: 0,
        stack_size: 0,
        tls: 0,
    };
    // SAFETY: `args` is a valid clone_args (version 0 size) for the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if r == -1 && errno() == libc::ENOSYS {
        // clone(flags, stack, parent_tid, child_tid, tls): the order of the
        // last three differs between architectures, but all are unused.
        // SAFETY: a fork-like clone; no pointers are passed.
        return unsafe {
            libc::syscall(
                libc::SYS_clone,
                (flags | libc::SIGCHLD as u64) as libc::c_ulong,
                0usize,
                0usize,
                0usize,
                0usize,
            )
        };
    }
    r
}

impl Launched {
    /// Reads the init's first report: `Ok(())` when its setup worked
    /// (the command is being started), `Err` with the failed step.
    fn await_ready(&mut self) -> Result<(), Option<(Stage, i32)>> {
        let mut buf = [0u8; 8];
        match self.report.read_exact(&mut buf) {
            Ok(()) => {
                let tag = i32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]);
                let value = i32::from_ne_bytes([buf[4], buf[5], buf[6], buf[7]]);
                if tag == TAG_READY {
                    return Ok(());
                }
                self.reap();
                Err(Stage::from_code(tag).map(|s| (s, value)))
            }
            Err(_) => {
                self.reap();
                Err(None)
            }
        }
    }

    /// Sends `signal` to the init.
    fn signal(&self, signal: libc::c_int) {
        if self.reaped {
            return;
        }
        match &self.pidfd {
            // SAFETY: pidfd_send_signal on our own pidfd; no siginfo.
            Some(fd) => unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    fd.as_raw_fd(),
                    signal,
                    std::ptr::null::<libc::siginfo_t>(),
                    0u32,
                );
            },
            // SAFETY: the init is our unreaped child, so its pid is ours.
            None => unsafe {
                libc::kill(self.pid, signal);
            },
        }
    }

    /// Whether the init has exited, waiting at most `timeout`.
    fn exited_within(&self, timeout: Duration) -> bool {
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        match &self.pidfd {
            Some(fd) => {
                let mut pfd = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: `pfd` is a valid pollfd.
                unsafe { libc::poll(&mut pfd, 1, ms) > 0 }
            }
            None => {
                // SAFETY: siginfo_t is plain data; WNOWAIT leaves the child
                // for `reap`.
                let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
                let rc = unsafe {
                    libc::waitid(
                        libc::P_PID,
                        self.pid as libc::id_t,
                        &mut info,
                        libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                    )
                };
                // SAFETY: filled in by a successful waitid.
                if rc == 0 && unsafe { info.si_pid() } != 0 {
                    return true;
                }
                std::thread::sleep(timeout.min(Duration::from_millis(20)));
                false
            }
        }
    }

    fn reap(&mut self) {
        if self.reaped {
            return;
        }
        let mut status = 0;
        loop {
            // SAFETY: waiting for our own child.
            let r = unsafe { libc::waitpid(self.pid, &mut status, 0) };
            if r >= 0 || errno() != libc::EINTR {
                break;
            }
        }
        self.reaped = true;
    }

    /// Waits for the command until it ends, `deadline` passes, or `stop()`
    /// says so; then makes sure every process of it is gone. Returns how it
    /// ended and why it was stopped (`None`: it ended by itself).
    pub fn wait(&mut self, deadline: Instant, stop: &dyn Fn() -> bool) -> (Outcome, Option<Stop>) {
        let poll = Duration::from_millis(20);
        let stopped = loop {
            if self.exited_within(poll) {
                break None;
            }
            if Instant::now() >= deadline {
                break Some(Stop::TimedOut);
            }
            if stop() {
                break Some(Stop::Interrupted);
            }
        };
        if stopped.is_some() {
            // Ask the init to end (it kills what it must), then make sure.
            self.signal(libc::SIGTERM);
            if !self.exited_within(Duration::from_secs(2)) {
                self.signal(libc::SIGKILL);
            }
        }
        self.reap();
        (self.read_outcome(), stopped)
    }

    fn read_outcome(&mut self) -> Outcome {
        let mut outcome = Outcome::default();
        let mut bytes = Vec::new();
        // Every writer is gone once the init is reaped: this cannot block.
        let _ = self.report.read_to_end(&mut bytes);
        for msg in bytes.chunks_exact(8) {
            let tag = i32::from_ne_bytes([msg[0], msg[1], msg[2], msg[3]]);
            let value = i32::from_ne_bytes([msg[4], msg[5], msg[6], msg[7]]);
            match tag {
                TAG_STATUS => {
                    outcome.status = Some(value);
                    outcome.init_finished = true;
                }
                TAG_KILLED_AFTER => {
                    outcome.killed_after = u32::try_from(value).unwrap_or(0);
                    outcome.init_finished = true;
                }
                other => {
                    if let Some(stage) = Stage::from_code(other) {
                        outcome.setup_failure = Some((stage, value));
                    }
                }
            }
        }
        if self.containment != Containment::ProcessGroup {
            // The namespace died with its init, whatever the init managed.
            outcome.init_finished = true;
        }
        outcome
    }
}

/// Why hermes stopped a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Its timeout passed.
    TimedOut,
    /// The turn was interrupted.
    Interrupted,
}

impl Drop for Launched {
    fn drop(&mut self) {
        if !self.reaped {
            self.signal(libc::SIGKILL);
            self.reap();
        }
    }
}
