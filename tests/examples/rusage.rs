//! Runs a command several times and reports what each run cost the kernel's
//! way: CPU time (user + system, microseconds, from `wait4`) and peak
//! resident memory (`ru_maxrss`). For `scripts/budgets.sh`; not a test.
//!
//! ```text
//! rusage [--runs N] [--fresh-home] -- COMMAND ARGS...
//! ```
//!
//! `--fresh-home` gives every run an empty `HERMES_HOME` (a new temporary
//! directory), so runs do not share a growing store. Prints one line:
//! `runs=N cpu_us_median=… cpu_us_min=… user_us_median=… sys_us_median=…
//! maxrss_kib_median=… maxrss_kib_max=… minflt_median=…` (page faults served
//! without I/O: the start-up budgets count them), and fails if any run exits
//! non-zero.

use std::process::{Command, ExitCode, Stdio};

struct Run {
    user_us: u64,
    sys_us: u64,
    maxrss_kib: u64,
    minflt: u64,
}

fn micros(t: libc::timeval) -> u64 {
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let us = u64::try_from(t.tv_usec).unwrap_or(0);
    secs * 1_000_000 + us
}

fn run_once(argv: &[String], home: Option<&std::path::Path>) -> Result<Run, String> {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    if let Some(home) = home {
        cmd.env("HERMES_HOME", home);
    }
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", argv[0]))?;
    let pid = libc::pid_t::try_from(child.id()).map_err(|e| e.to_string())?;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not yet reaped (the `Child` is never
    // waited on); `status` and `usage` are valid for writes.
    let got = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    if got != pid {
        return Err(format!("wait4: {}", std::io::Error::last_os_error()));
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(format!("{} failed (wait status {status})", argv[0]));
    }
    Ok(Run {
        user_us: micros(usage.ru_utime),
        sys_us: micros(usage.ru_stime),
        maxrss_kib: u64::try_from(usage.ru_maxrss).unwrap_or(0),
        minflt: u64::try_from(usage.ru_minflt).unwrap_or(0),
    })
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut runs = 5usize;
    let mut fresh_home = false;
    let mut argv = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--runs" => runs = args.next().and_then(|n| n.parse().ok()).unwrap_or(runs),
            "--fresh-home" => fresh_home = true,
            "--" => {
                argv.extend(args.by_ref());
            }
            other => {
                eprintln!("rusage: unknown argument {other:?}");
                return ExitCode::from(2);
            }
        }
    }
    if argv.is_empty() {
        eprintln!("usage: rusage [--runs N] [--fresh-home] -- COMMAND ARGS...");
        return ExitCode::from(2);
    }
    let mut results = Vec::new();
    for _ in 0..runs.max(1) {
        let home = if fresh_home {
            match tempfile::tempdir() {
                Ok(d) => Some(d),
                Err(e) => {
                    eprintln!("rusage: {e}");
                    return ExitCode::FAILURE;
                }
            }
        } else {
            None
        };
        match run_once(&argv, home.as_ref().map(|d| d.path())) {
            Ok(r) => results.push(r),
            Err(e) => {
                eprintln!("rusage: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let cpu: Vec<u64> = results.iter().map(|r| r.user_us + r.sys_us).collect();
    let cpu_min = cpu.iter().copied().min().unwrap_or(0);
    println!(
        "runs={} cpu_us_median={} cpu_us_min={} user_us_median={} sys_us_median={} maxrss_kib_median={} maxrss_kib_max={} minflt_median={}",
        results.len(),
        median(cpu),
        cpu_min,
        median(results.iter().map(|r| r.user_us).collect()),
        median(results.iter().map(|r| r.sys_us).collect()),
        median(results.iter().map(|r| r.maxrss_kib).collect()),
        results.iter().map(|r| r.maxrss_kib).max().unwrap_or(0),
        median(results.iter().map(|r| r.minflt).collect()),
    );
    ExitCode::SUCCESS
}
