//! What runs in the clone: the init (pid 1 of the command's namespace, or
//! a subreaper) and the command's own setup before `execve`. It runs in a
//! fork-like child of a multi-threaded process, so everything here is
//! async-signal-safe: plain system calls on data the parent prepared
//! ([`Raw`]), no allocation, no locks.

use std::ffi::CStr;
use std::os::fd::RawFd;

use super::{Raw, Stage, TAG_KILLED_AFTER, TAG_READY, TAG_STATUS, clone_process, errno};

/// Writes one report message (async-signal-safe).
unsafe fn report(fd: RawFd, tag: i32, value: i32) {
    let mut msg = [0u8; 8];
    let t = tag.to_ne_bytes();
    let v = value.to_ne_bytes();
    msg[0] = t[0];
    msg[1] = t[1];
    msg[2] = t[2];
    msg[3] = t[3];
    msg[4] = v[0];
    msg[5] = v[1];
    msg[6] = v[2];
    msg[7] = v[3];
    // SAFETY: `msg` is 8 readable bytes; a short or failed write loses a
    // report, which the parent treats as an unknown ending.
    unsafe {
        libc::write(fd, msg.as_ptr().cast(), 8);
    }
}

/// Reports a failed setup step and exits (async-signal-safe).
unsafe fn fail(r: &Raw, stage: Stage) -> ! {
    let e = errno();
    // SAFETY: async-signal-safe calls only.
    unsafe {
        report(r.report, stage.code(), e);
        libc::_exit(125)
    }
}

/// Writes `len` bytes at `data` to the file `path` (async-signal-safe).
unsafe fn write_file(path: &CStr, data: *const libc::c_char, len: usize) -> bool {
    // SAFETY: `path` is NUL-terminated; `data` points to `len` bytes.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let n = libc::write(fd, data.cast(), len);
        libc::close(fd);
        n == len as isize
    }
}

/// Sets every catchable signal to its default action and unblocks all
/// (async-signal-safe): hermes's handlers must not run in its children.
unsafe fn reset_signals() {
    // SAFETY: sigaction and sigprocmask on valid, zero-initialised structs.
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        let mut sig = 1;
        while sig < 65 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
            sig += 1;
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
}

/// The init: pid 1 of the command's namespace (see the module docs).
///
/// # Safety
/// Runs in a fork-like child of a multi-threaded process: async-signal-safe
/// system calls only, on data prepared by the parent.
pub(super) unsafe fn init_main(r: &Raw) -> ! {
    // SAFETY: every call below is a plain system call on prepared data.
    unsafe {
        reset_signals();
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        if r.hermes_pidfd >= 0 {
            let mut pfd = libc::pollfd {
                fd: r.hermes_pidfd,
                events: libc::POLLIN,
                revents: 0,
            };
            // Readable: hermes has already exited.
            if libc::poll(&mut pfd, 1, 0) > 0 {
                libc::_exit(1);
            }
        }
        // Its own session: no controlling terminal (nothing can prompt on
        // the user's), no terminal signals.
        libc::setsid();
        if r.user_ns {
            // hermes made itself non-dumpable, which makes /proc/self/*
            // root's; the maps must be written by this process before the
            // command exists, then it is made non-dumpable again.
            libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
            let ok = write_file(c"/proc/self/setgroups", c"deny".as_ptr(), 4)
                && write_file(c"/proc/self/uid_map", r.uid_map, r.uid_map_len)
                && write_file(c"/proc/self/gid_map", r.gid_map, r.gid_map_len);
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
            if !ok {
                fail(r, Stage::IdMap);
            }
        }
        if !r.hide.is_null() {
            // Private first, so nothing propagates back to the host.
            if libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) != 0
                || libc::mount(
                    c"tmpfs".as_ptr(),
                    r.hide,
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    c"size=4k,mode=0500".as_ptr().cast(),
                ) != 0
            {
                fail(r, Stage::Mount);
            }
        }
        if !r.pid_ns {
            // Orphans of the command become this process's children, so it
            // can kill them when the command ends.
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        }
        let mut waited: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut waited);
        libc::sigaddset(&mut waited, libc::SIGCHLD);
        libc::sigaddset(&mut waited, libc::SIGTERM);
        libc::sigprocmask(libc::SIG_BLOCK, &waited, std::ptr::null_mut());

        report(r.report, TAG_READY, 0);
        let child = clone_process(0);
        if child == 0 {
            command_main(r);
        }
        if child < 0 {
            fail(r, Stage::Fork);
        }
        let child = child as libc::pid_t;
        // The init keeps nothing open but its report pipe (hermes's files,
        // sockets and locks must not stay open in it).
        close_all_but(r.report);

        let started = monotonic_ms();
        let mut status: libc::c_int = 0;
        let mut command_done = false;
        loop {
            let got = libc::waitpid(-1, &mut status, libc::WNOHANG);
            if got == child {
                report(r.report, TAG_STATUS, status);
                command_done = true;
                break;
            }
            if got > 0 {
                continue; // an orphan reaped
            }
            if got < 0 && errno() == libc::ECHILD {
                break;
            }
            let left = r
                .backstop_ms
                .wrapping_sub(monotonic_ms().wrapping_sub(started));
            if left <= 0 {
                break;
            }
            let wait_ms = left.min(1000);
            // `time_t` and `c_long` are 32 bits on armv7 (found by the cross
            // build); `wait_ms` is at most 1000, so the casts are exact. The
            // field types are inferred: naming `libc::time_t` warns on musl
            // (a deprecated alias there; the static builds, issue 39).
            #[allow(clippy::unnecessary_cast)]
            let ts = libc::timespec {
                tv_sec: (wait_ms / 1000) as _,
                tv_nsec: ((wait_ms % 1000) * 1_000_000) as libc::c_long,
            };
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let sig = libc::sigtimedwait(&waited, &mut info, &ts);
            if sig == libc::SIGTERM {
                // hermes (or the command itself) asks for the end.
                break;
            }
        }
        // In a namespace only counted (its end kills them); otherwise
        // killed one by one.
        let killed = kill_descendants(child, command_done, !r.pid_ns);
        report(r.report, TAG_KILLED_AFTER, killed);
        // In a PID namespace, this exit kills everything left in it.
        libc::_exit(0)
    }
}

/// Milliseconds of a monotonic clock (async-signal-safe).
unsafe fn monotonic_ms() -> i64 {
    // SAFETY: clock_gettime fills the valid timespec.
    unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
        // Widened: both fields are 32 bits on armv7 (identity on 64-bit).
        #[allow(clippy::useless_conversion)]
        let ms = i64::from(ts.tv_sec)
            .wrapping_mul(1000)
            .wrapping_add(i64::from(ts.tv_nsec) / 1_000_000);
        ms
    }
}

/// Closes every descriptor but `keep` (async-signal-safe).
unsafe fn close_all_but(keep: RawFd) {
    // SAFETY: closing descriptors has no memory-safety preconditions here:
    // this process runs no Rust code that owns them any more.
    unsafe {
        let max = libc::c_uint::MAX;
        let below = if keep > 0 {
            keep as libc::c_uint - 1
        } else {
            0
        };
        let ok_low = keep <= 0 || libc::syscall(libc::SYS_close_range, 0u32, below, 0u32) == 0;
        let ok_high =
            libc::syscall(libc::SYS_close_range, keep as libc::c_uint + 1, max, 0u32) == 0;
        if !(ok_low && ok_high) {
            // Kernels before 5.9.
            let mut fd = 0;
            while fd < 4096 {
                if fd != keep {
                    libc::close(fd);
                }
                fd += 1;
            }
        }
    }
}

/// Kills the command's group and every process this subreaper inherits,
/// until none is left; returns how many were left besides the shell. With
/// `kill` false, only counts this process's children (in a PID namespace,
/// where the init's exit kills them all).
unsafe fn kill_descendants(child: libc::pid_t, child_reaped: bool, kill: bool) -> i32 {
    // SAFETY: kill, waitpid, open and read on a stack buffer.
    unsafe {
        let mut killed: i32 = 0;
        if kill {
            libc::kill(-child, libc::SIGKILL);
            if !child_reaped {
                libc::kill(child, libc::SIGKILL);
            }
        }
        let mut buf = [0u8; 4096];
        let mut rounds = 0;
        while rounds < 10_000 {
            rounds += 1;
            let mut status = 0;
            while libc::waitpid(-1, &mut status, libc::WNOHANG) > 0 {}
            let fd = libc::open(
                c"/proc/thread-self/children".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            );
            if fd < 0 {
                break;
            }
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            libc::close(fd);
            if n <= 0 {
                // No children left (or unreadable: then wait for the group).
                if libc::waitpid(-1, &mut status, libc::WNOHANG) < 0 {
                    break;
                }
                continue;
            }
            let mut pid: libc::pid_t = 0;
            let mut i = 0usize;
            let end = n as usize;
            while i < end && i < buf.len() {
                let b = *buf.as_ptr().add(i);
                if b.is_ascii_digit() {
                    pid = pid
                        .wrapping_mul(10)
                        .wrapping_add(libc::pid_t::from(b - b'0'));
                } else if pid > 0 {
                    if pid != child {
                        killed = killed.wrapping_add(1);
                    }
                    if kill {
                        libc::kill(pid, libc::SIGKILL);
                    }
                    pid = 0;
                }
                i += 1;
            }
            if pid > 0 {
                if pid != child {
                    killed = killed.wrapping_add(1);
                }
                if kill {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
            if !kill {
                break;
            }
            // Wait for one to die, so its orphans are ours to see.
            libc::waitpid(-1, &mut status, 0);
        }
        killed
    }
}

/// The command's process: `sh -c COMMAND` under Landlock.
///
/// # Safety
/// As [`init_main`].
unsafe fn command_main(r: &Raw) -> ! {
    // SAFETY: plain system calls on prepared data.
    unsafe {
        // The init blocked these for itself.
        reset_signals();
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        // Its own group: the process-group containment kills it whole.
        libc::setpgid(0, 0);
        if libc::dup2(r.stdin, 0) < 0 || libc::dup2(r.output, 1) < 0 || libc::dup2(r.errors, 2) < 0
        {
            fail(r, Stage::Exec);
        }
        if libc::chdir(r.cwd) != 0 {
            fail(r, Stage::Chdir);
        }
        if r.ruleset >= 0
            && (libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::syscall(libc::SYS_landlock_restrict_self, r.ruleset, 0u32) != 0)
        {
            fail(r, Stage::Landlock);
        }
        // Nothing of hermes's is inherited past the exec (the report pipe,
        // close-on-exec itself, stays until then).
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
        libc::execve(r.program, r.argv, r.envp);
        fail(r, Stage::Exec);
    }
}
