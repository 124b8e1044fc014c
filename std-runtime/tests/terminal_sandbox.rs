//! Attacks on the terminal tool (issue 10, items 2 and 3), run for real: a
//! command runs under Landlock (it can read and execute the system and read
//! and write only the working directory and a private temp dir), with an
//! allow-listed environment, in its own PID namespace, so it can neither
//! read secrets nor leave anything running behind it.
//!
//! Tests that need Landlock print why they skip where the kernel lacks it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use hermes_core::{InterruptFlag, IterationBudget, ToolContext, ToolError, ToolRegistry};
use hermes_runtime::tools::{SandboxMode, ToolEnv, build_registry, landlock_abi};
use serde_json::json;
use tempfile::TempDir;

const SECRET: &str = "sk-SECRET-terminal-51c9";

struct Shell {
    work: TempDir,
    home: TempDir,
    outside: TempDir,
    reg: ToolRegistry,
    interrupt: InterruptFlag,
}

impl Shell {
    fn with(configure: impl FnOnce(&mut ToolEnv)) -> Shell {
        let work = TempDir::new().unwrap();
        let home = TempDir::new().unwrap();
        let outside = TempDir::new().unwrap();
        std::fs::write(
            home.path().join(".env"),
            format!("OPENAI_API_KEY={SECRET}\n"),
        )
        .unwrap();
        std::fs::write(outside.path().join("secret.txt"), format!("{SECRET}\n")).unwrap();
        let mut env = ToolEnv::new(work.path(), home.path());
        configure(&mut env);
        let reg = build_registry(&env, Some(&["terminal".into()])).unwrap();
        Shell {
            work,
            home,
            outside,
            reg,
            interrupt: InterruptFlag::new(),
        }
    }

    fn new() -> Shell {
        Shell::with(|_| {})
    }

    fn run_with(&self, command: &str, timeout: u64) -> String {
        let budget = IterationBudget::new(1);
        let ctx = ToolContext {
            budget: &budget,
            interrupt: &self.interrupt,
            tool_call_id: "t",
        };
        let args = json!({"command": command, "timeout": timeout}).to_string();
        match self.reg.dispatch("terminal", &args, &ctx) {
            Ok(out) => out,
            Err(ToolError::Failed(m)) | Err(ToolError::Abort(m)) => panic!("{command}: {m}"),
        }
    }

    fn run(&self, command: &str) -> String {
        self.run_with(command, 60)
    }
}

/// Whether the kernel enforces Landlock; prints why a test skips if not.
/// With `HERMES_REQUIRE_LANDLOCK` set (`.ci/run` sets it) a missing
/// Landlock fails the test instead: CI must not go green having checked no
/// confinement at all.
fn landlock_or_skip(test: &str) -> bool {
    match landlock_abi() {
        Some(abi) if abi >= 2 => true,
        other => {
            let why =
                format!("the kernel has no usable Landlock (ABI {other:?}; 2 or newer needed)");
            assert!(
                std::env::var_os("HERMES_REQUIRE_LANDLOCK").is_none(),
                "{test}: {why}, and HERMES_REQUIRE_LANDLOCK is set"
            );
            println!("SKIP {test}: {why}");
            false
        }
    }
}

fn q(p: &Path) -> String {
    format!("'{}'", p.display())
}

#[test]
fn a_command_cannot_read_the_hermes_home_or_outside_files() {
    if !landlock_or_skip("a_command_cannot_read_the_hermes_home_or_outside_files") {
        return;
    }
    let sh = Shell::new();
    for cmd in [
        format!("cat {}/.env", q(sh.home.path())),
        format!("ls -la {}", q(sh.home.path())),
        format!("cat {}/secret.txt", q(sh.outside.path())),
        format!("grep -r sk- {}", q(sh.outside.path())),
        format!(
            "cat /proc/self/root{}/secret.txt",
            sh.outside.path().display()
        ),
    ] {
        let out = sh.run(&cmd);
        assert!(!out.contains(SECRET), "{cmd} leaked: {out}");
        assert!(!out.ends_with("[exit code: 0]"), "{cmd} succeeded: {out}");
        assert!(out.contains("ermission denied"), "{cmd}: {out}");
    }
}

#[test]
fn a_command_cannot_write_outside_the_workdir() {
    if !landlock_or_skip("a_command_cannot_write_outside_the_workdir") {
        return;
    }
    let sh = Shell::new();
    let planted = sh.outside.path().join("planted");
    for cmd in [
        format!("echo x > {}", q(&planted)),
        format!("touch {}", q(&planted)),
        format!("mkdir {}", q(&planted)),
        format!("echo evil > {}/SOUL.md", q(sh.home.path())),
        format!("rm -f {}/secret.txt", q(sh.outside.path())),
        format!("truncate -s 0 {}/secret.txt", q(sh.outside.path())),
    ] {
        let out = sh.run(&cmd);
        assert!(!out.ends_with("[exit code: 0]"), "{cmd} succeeded: {out}");
    }
    assert!(!planted.exists());
    assert!(!sh.home.path().join("SOUL.md").exists());
    assert_eq!(
        std::fs::read_to_string(sh.outside.path().join("secret.txt")).unwrap(),
        format!("{SECRET}\n")
    );
}

/// `[agent] sandbox_read` opens a path for reading and executing only,
/// `sandbox_write` for writing too; everything else outside stays shut.
#[test]
fn sandbox_read_and_write_paths_open_exactly_what_they_say() {
    if !landlock_or_skip("sandbox_read_and_write_paths_open_exactly_what_they_say") {
        return;
    }
    let extra = TempDir::new().unwrap();
    let readable = extra.path().join("readable");
    let writable = extra.path().join("writable");
    std::fs::create_dir_all(&readable).unwrap();
    std::fs::create_dir_all(&writable).unwrap();
    std::fs::write(readable.join("notes.txt"), "read me\n").unwrap();
    let tool = readable.join("tool.sh");
    std::fs::write(&tool, "#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (r, w) = (readable.clone(), writable.clone());
    let sh = Shell::with(move |e| {
        e.sandbox_read = vec![r];
        e.sandbox_write = vec![w];
    });

    let out = sh.run(&format!("cat {}/notes.txt && {}", q(&readable), q(&tool)));
    assert_eq!(out, "read me\nran\n[exit code: 0]");
    for cmd in [
        format!("echo x > {}/new.txt", q(&readable)),
        format!("echo x >> {}/notes.txt", q(&readable)),
        format!("rm {}/notes.txt", q(&readable)),
    ] {
        let out = sh.run(&cmd);
        assert!(!out.ends_with("[exit code: 0]"), "{cmd} succeeded: {out}");
    }
    assert_eq!(
        std::fs::read_to_string(readable.join("notes.txt")).unwrap(),
        "read me\n"
    );
    assert!(!readable.join("new.txt").exists());

    let out = sh.run(&format!(
        "echo made > {w}/new.txt && mkdir {w}/d && cat {w}/new.txt",
        w = q(&writable)
    ));
    assert_eq!(out, "made\n[exit code: 0]");
    assert!(writable.join("d").is_dir());

    // The rest of the outside is still refused.
    let out = sh.run(&format!("cat {}/secret.txt", q(sh.outside.path())));
    assert!(!out.contains(SECRET), "{out}");
}

#[test]
fn links_and_renames_across_the_boundary_are_refused() {
    if !landlock_or_skip("links_and_renames_across_the_boundary_are_refused") {
        return;
    }
    let sh = Shell::new();
    std::fs::write(sh.work.path().join("mine.txt"), "mine\n").unwrap();
    let secret = sh.outside.path().join("secret.txt");
    for cmd in [
        // A hard link from outside in would make the secret readable here.
        format!("ln {} stolen && cat stolen", q(&secret)),
        // A symlink is created, but reading through it is still refused.
        format!("ln -s {} sym; cat sym", q(&secret)),
        // Moving a file out, or one in.
        format!("mv mine.txt {}/", q(sh.outside.path())),
        format!("mv {} ./taken", q(&secret)),
        format!("ln mine.txt {}/linked", q(sh.outside.path())),
    ] {
        let out = sh.run(&cmd);
        assert!(!out.contains(SECRET), "{cmd} leaked: {out}");
        assert!(!out.ends_with("[exit code: 0]"), "{cmd} succeeded: {out}");
    }
    assert!(sh.work.path().join("mine.txt").exists());
    assert!(secret.exists());
    assert!(!sh.outside.path().join("linked").exists());
    // Inside the working directory links and renames work.
    let out = sh.run("mkdir -p a b && echo hi > a/f && mv a/f b/f && ln b/f b/g && cat b/g");
    assert_eq!(out, "hi\n[exit code: 0]");
}

#[test]
fn the_system_is_readable_and_the_workdir_and_temp_dir_writable() {
    if !landlock_or_skip("the_system_is_readable_and_the_workdir_and_temp_dir_writable") {
        return;
    }
    let sh = Shell::new();
    let out = sh.run(
        "ls /usr/bin >/dev/null && head -c 0 /etc/passwd && echo hi > out.txt && cat out.txt \
         && t=$(mktemp) && echo tmp > \"$t\" && cat \"$t\" && test \"$HOME\" = \"$PWD\" \
         && printf 'ok\\n' | sed s/ok/sed-ran/",
    );
    assert_eq!(out, "hi\ntmp\nsed-ran\n[exit code: 0]");
    assert_eq!(
        std::fs::read_to_string(sh.work.path().join("out.txt")).unwrap(),
        "hi\n"
    );
    // The private temp dir is not the shared /tmp, and it is gone afterwards.
    let out = sh.run("echo \"$TMPDIR\"; touch /tmp/hermes-sandbox-probe-$$");
    let tmpdir = out.lines().next().unwrap().to_owned();
    assert_ne!(tmpdir, "/tmp");
    assert!(!out.ends_with("[exit code: 0]"), "{out}");
    assert!(!Path::new(&tmpdir).exists(), "{tmpdir} was left behind");
}

#[test]
fn a_command_cannot_read_hermes_own_environment() {
    if !landlock_or_skip("a_command_cannot_read_hermes_own_environment") {
        return;
    }
    let sh = Shell::new();
    let me = std::process::id();
    for cmd in [
        format!("tr '\\0' '\\n' < /proc/{me}/environ"),
        format!("cat /proc/{me}/task/{me}/environ"),
        format!("head -c 100 /proc/{me}/mem"),
        format!("readlink /proc/{me}/cwd"),
    ] {
        let out = sh.run(&cmd);
        assert!(!out.contains("PATH="), "{cmd} leaked: {out}");
        assert!(!out.ends_with("[exit code: 0]"), "{cmd} succeeded: {out}");
    }
    // Nor signal it.
    let out = sh.run(&format!("kill -0 {me}"));
    assert!(!out.ends_with("[exit code: 0]"), "{out}");
}

#[test]
fn a_home_inside_the_workdir_is_hidden_from_commands() {
    if !landlock_or_skip("a_home_inside_the_workdir_is_hidden_from_commands") {
        return;
    }
    let work = TempDir::new().unwrap();
    let home = work.path().join(".hermes");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(home.join(".env"), format!("KEY={SECRET}\n")).unwrap();
    let env = ToolEnv::new(work.path(), &home);
    let reg = build_registry(&env, Some(&["terminal".into()])).unwrap();
    let budget = IterationBudget::new(1);
    let flag = InterruptFlag::new();
    let ctx = ToolContext {
        budget: &budget,
        interrupt: &flag,
        tool_call_id: "t",
    };
    let out = reg
        .dispatch(
            "terminal",
            r#"{"command":"cat .hermes/.env; grep -r sk- . ; ls -A .hermes; echo done > own.txt"}"#,
            &ctx,
        )
        .unwrap();
    assert!(!out.contains(SECRET), "{out}");
    assert_eq!(
        std::fs::read_to_string(work.path().join("own.txt")).unwrap(),
        "done\n"
    );
    assert_eq!(
        std::fs::read_to_string(home.join(".env")).unwrap(),
        format!("KEY={SECRET}\n")
    );
}

/// Runs in two modes: alone (checks what it can) and as the child of
/// `the_environment_is_an_allow_list`, with credentials set.
#[test]
fn environment_probe() {
    let sh = Shell::with(|e| e.env_passthrough = vec!["HERMES_PASSED_THROUGH".into()]);
    let out = sh.run("env");
    let names: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_once('=').map(|(n, _)| n))
        .collect();
    let allowed = |n: &str| {
        [
            "PATH", "LANG", "TERM", "TZ", "HOME", "TMPDIR", "PWD", "SHLVL", "_", "OLDPWD",
        ]
        .contains(&n)
            || n.starts_with("LC_")
            || n == "HERMES_PASSED_THROUGH"
    };
    for n in &names {
        assert!(allowed(n), "{n} reached the command: {out}");
    }
    assert!(
        out.contains(&format!(
            "HOME={}",
            sh.work.path().canonicalize().unwrap().display()
        )),
        "{out}"
    );
    if std::env::var_os("HERMES_ENV_PROBE").is_some() {
        for leaked in ["hunter2", "pg-pass", "proxy-pass", "sk-probe"] {
            assert!(!out.contains(leaked), "{leaked} leaked: {out}");
        }
        assert!(out.contains("HERMES_PASSED_THROUGH=chosen"), "{out}");
        println!("environment probe ran");
    }
}

#[test]
fn the_environment_is_an_allow_list() {
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "terminal_sandbox::environment_probe",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("HERMES_ENV_PROBE", "1")
        .env("MYSQL_PWD", "hunter2")
        .env("PGPASSWORD", "pg-pass")
        .env("HTTPS_PROXY", "http://user:proxy-pass@proxy.invalid:3128")
        .env("http_proxy", "http://user:proxy-pass@proxy.invalid:3128")
        .env("OPENAI_API_KEY", "sk-probe")
        .env("SOMETHING_HARMLESS", "x")
        .env("HERMES_PASSED_THROUGH", "chosen")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("environment probe ran"), "{stdout}");
}

// ------------------------------------------------------- nothing outlives a command

/// Host pids of processes whose command line contains `marker`.
fn survivors(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in dir.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if !text.contains(marker) {
            continue;
        }
        // A zombie waiting for its reaper is dead already.
        let zombie = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, r)| r.trim_start().starts_with('Z'))
            })
            .unwrap_or(false);
        if !zombie {
            found.push(pid);
        }
    }
    found
}

/// Waits (generously) until no process carries `marker`.
fn assert_no_survivors(marker: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = survivors(marker);
        if left.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            for pid in &left {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            }
            panic!("{what}: processes {left:?} ({marker}) outlived the command");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A `sleep` whose argument marks it as this test's (`sleep 4321.0123`).
fn marker(test_no: u32) -> String {
    format!("{}.{:06}", 4000 + test_no, std::process::id() % 1_000_000)
}

/// Every way a command can try to stay behind, in one line.
fn escapers(m: &str) -> String {
    format!(
        "sleep {m} & setsid sleep {m} & nohup sleep {m} >/dev/null 2>&1 & \
         (setsid sh -c 'sleep {m} & sleep {m}' &) ; sleep {m} > /dev/null 2>&1 < /dev/null &"
    )
}

#[test]
fn a_timeout_leaves_nothing_running() {
    let sh = Shell::new();
    let m = marker(1);
    let out = sh.run_with(&format!("{} echo started; sleep {m}", escapers(&m)), 2);
    assert!(out.contains("started"), "{out}");
    assert!(out.contains("timed out after 2 s"), "{out}");
    assert_no_survivors(&m, "timeout");
}

#[test]
fn an_interrupt_leaves_nothing_running() {
    let sh = Shell::new();
    let m = marker(2);
    let flag = sh.interrupt.clone();
    let watch = m.clone();
    let setter = std::thread::spawn(move || {
        // Interrupt once the escapers are running.
        let deadline = Instant::now() + Duration::from_secs(30);
        while survivors(&watch).len() < 5 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        flag.interrupt();
    });
    let out = sh.run_with(&format!("{} sleep {m}", escapers(&m)), 600);
    setter.join().unwrap();
    assert!(out.contains("[interrupted;"), "{out}");
    assert_no_survivors(&m, "interrupt");
}

#[test]
fn a_finished_command_leaves_no_background_job_daemon_or_setsid_child() {
    let sh = Shell::new();
    let m = marker(3);
    let out = sh.run(&format!("{} echo done", escapers(&m)));
    assert!(out.starts_with("done\n"), "{out}");
    assert!(out.ends_with("[exit code: 0]"), "{out}");
    assert_no_survivors(&m, "normal exit");
}

/// Runs a long command through the tool, for `commands_die_with_hermes`,
/// which kills this process while the command runs.
#[test]
fn long_command_probe() {
    let Some(m) = std::env::var_os("HERMES_LONG_COMMAND_MARKER") else {
        return;
    };
    let m = m.to_string_lossy().into_owned();
    // The probe stands for a hermes that these signals end. A harness
    // started with SIGHUP ignored (`nohup`, some CI runners) passes that on
    // through exec, and a hermes run so rightly survives a hangup.
    for sig in [libc::SIGHUP, libc::SIGTERM] {
        // SAFETY: setting a signal's default action has no preconditions.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
    let sh = Shell::new();
    println!("probe running");
    sh.run_with(&format!("{} sleep {m}", escapers(&m)), 600);
}

#[test]
fn commands_die_with_hermes() {
    for (n, signal) in [(4u32, "KILL"), (5, "TERM"), (6, "HUP")] {
        let m = marker(n);
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "terminal_sandbox::long_command_probe",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("HERMES_LONG_COMMAND_MARKER", &m)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while survivors(&m).len() < 6 {
            assert!(
                Instant::now() < deadline,
                "the probe's command did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let status = Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        // Bounded: a probe that outlives its signal is a failure to report,
        // not a test that hangs.
        let deadline = Instant::now() + Duration::from_secs(20);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                let left = survivors(&m);
                for pid in &left {
                    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                }
                panic!("SIG{signal} did not end the probe (its command: {left:?})");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_no_survivors(&m, &format!("SIG{signal} of hermes"));
    }
}

// ------------------------------------------------------- opting out

#[test]
fn sandbox_off_runs_unconfined_but_still_without_secrets_or_survivors() {
    let sh = Shell::with(|e| e.sandbox = SandboxMode::Off);
    let out = sh.run(&format!("cat {}/secret.txt", q(sh.outside.path())));
    assert!(
        out.contains(SECRET),
        "opted out, the command may read anything: {out}"
    );
    let out = sh.run("env");
    assert!(!out.contains("HERMES_HOME="), "{out}");
    let m = marker(7);
    sh.run(&format!("{} echo done", escapers(&m)));
    assert_no_survivors(&m, "sandbox off");
}
