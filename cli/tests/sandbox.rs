//! The terminal sandbox as a user meets it: the real `hermes` binary, a
//! scripted provider asking for hostile commands, and a kernel that lacks
//! Landlock simulated with a seccomp filter (`landlock_create_ruleset`
//! fails with ENOSYS, as on a kernel built without it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

/// `gateway run --check` asks Telegram about the token: the Bot API fake.
use crate::telegram_support;

use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use hermes_tests::{FakeProvider, Reply};
use serde_json::{Value, json};

/// The binary under test: this build's, or the one `HERMES_SANDBOX_EXE`
/// names — `.ci/cross` runs the suite against the static builds the
/// packages ship (issue 39).
fn hermes() -> std::path::PathBuf {
    std::env::var_os("HERMES_SANDBOX_EXE")
        .map_or_else(|| env!("CARGO_BIN_EXE_hermes").into(), Into::into)
}

/// The emulator that runs a cross-built `HERMES_SANDBOX_EXE`
/// (`HERMES_SANDBOX_RUNNER="qemu-aarch64-static"`), split on spaces.
fn runner() -> Vec<String> {
    std::env::var("HERMES_SANDBOX_RUNNER")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// `hermes`, under the runner when there is one.
fn hermes_command() -> Command {
    let runner = runner();
    match runner.split_first() {
        Some((emulator, args)) => {
            let mut c = Command::new(emulator);
            c.args(args).arg(hermes());
            c
        }
        None => Command::new(hermes()),
    }
}

/// What the sandbox gets under the runner, as the emulated hermes itself
/// reports it (`hermes doctor`): the emulator, not the kernel, decides
/// which system calls reach the kernel. qemu-user 7.2 knows no Landlock
/// calls (ENOSYS) and refuses namespace flags to `clone` (EINVAL), so
/// there hermes has neither; its process-group containment works.
struct Emulated {
    landlock: bool,
    pid_namespace: bool,
}

fn emulated() -> Emulated {
    let env = Env::new();
    let o = env
        .cmd("http://127.0.0.1:9/v1")
        .arg("doctor")
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(
        out.contains("command lifetime:"),
        "no sandbox state from doctor under {:?}: {out}",
        runner()
    );
    Emulated {
        landlock: out.contains("✓ terminal sandbox on (Landlock ABI"),
        pid_namespace: out.contains("command lifetime: PID namespace"),
    }
}
const KEY: &str = "sk-live-hermes-key-0c0ffee";

struct Env {
    home: tempfile::TempDir,
    work: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        let env = Env {
            home: tempfile::tempdir().unwrap(),
            work: tempfile::tempdir().unwrap(),
        };
        std::fs::write(
            env.home.path().join(".env"),
            format!("HERMES_API_KEY={KEY}\n"),
        )
        .unwrap();
        env
    }

    fn cmd(&self, base_url: &str) -> Command {
        let mut c = hermes_command();
        c.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("HERMES_HOME", self.home.path())
            .env("HERMES_BASE_URL", base_url)
            .env("HERMES_MODEL", "fake-model")
            .env("HERMES_API_KEY", KEY)
            .current_dir(self.work.path());
        c
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The tool results hermes sent back to the provider.
fn tool_results(requests: &[Value]) -> Vec<String> {
    requests
        .iter()
        .flat_map(|r| r["messages"].as_array().cloned().unwrap_or_default())
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Makes `landlock_create_ruleset` fail with ENOSYS in the child, as on a
/// kernel without Landlock.
fn without_landlock(cmd: &mut Command) -> &mut Command {
    #[repr(C)]
    struct SockFilter {
        code: u16,
        jt: u8,
        jf: u8,
        k: u32,
    }
    #[repr(C)]
    struct SockFprog {
        len: u16,
        filter: *const SockFilter,
    }
    // SAFETY: the closure runs between fork and exec and makes only prctl
    // calls on data that lives in the child's copy of this stack frame.
    unsafe {
        cmd.pre_exec(|| {
            let nr = libc::SYS_landlock_create_ruleset as u32;
            let filter = [
                SockFilter {
                    code: 0x20,
                    jt: 0,
                    jf: 0,
                    k: 0,
                }, // ld [nr]
                SockFilter {
                    code: 0x15,
                    jt: 0,
                    jf: 1,
                    k: nr,
                }, // jeq nr
                SockFilter {
                    code: 0x06,
                    jt: 0,
                    jf: 0,
                    k: 0x0005_0000 | libc::ENOSYS as u32,
                },
                SockFilter {
                    code: 0x06,
                    jt: 0,
                    jf: 0,
                    k: 0x7fff_0000,
                }, // allow
            ];
            let prog = SockFprog {
                len: filter.len() as u16,
                filter: filter.as_ptr(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(libc::PR_SET_SECCOMP, 2, &prog as *const SockFprog) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Refuses namespaces in the child: `clone3` fails with ENOSYS (so the
/// flags of `clone` can be inspected) and `clone`/`unshare` with a user or
/// PID namespace flag with EPERM, as on a system that forbids them.
fn without_namespaces(cmd: &mut Command) -> &mut Command {
    #[repr(C)]
    struct SockFilter {
        code: u16,
        jt: u8,
        jf: u8,
        k: u32,
    }
    #[repr(C)]
    struct SockFprog {
        len: u16,
        filter: *const SockFilter,
    }
    // SAFETY: as in `without_landlock`.
    unsafe {
        cmd.pre_exec(|| {
            let ns = (libc::CLONE_NEWUSER | libc::CLONE_NEWPID) as u32;
            let errno = |e: i32| 0x0005_0000 | e as u32;
            let filter = [
                SockFilter {
                    code: 0x20,
                    jt: 0,
                    jf: 0,
                    k: 0,
                }, // ld [nr]
                SockFilter {
                    code: 0x15,
                    jt: 0,
                    jf: 1,
                    k: libc::SYS_clone3 as u32,
                },
                SockFilter {
                    code: 0x06,
                    jt: 0,
                    jf: 0,
                    k: errno(libc::ENOSYS),
                },
                SockFilter {
                    code: 0x15,
                    jt: 1,
                    jf: 0,
                    k: libc::SYS_clone as u32,
                },
                SockFilter {
                    code: 0x15,
                    jt: 0,
                    jf: 3,
                    k: libc::SYS_unshare as u32,
                },
                SockFilter {
                    code: 0x20,
                    jt: 0,
                    jf: 0,
                    k: 16,
                }, // ld [args[0] low]
                SockFilter {
                    code: 0x45,
                    jt: 0,
                    jf: 1,
                    k: ns,
                }, // jset ns
                SockFilter {
                    code: 0x06,
                    jt: 0,
                    jf: 0,
                    k: errno(libc::EPERM),
                },
                SockFilter {
                    code: 0x06,
                    jt: 0,
                    jf: 0,
                    k: 0x7fff_0000,
                }, // allow
            ];
            let prog = SockFprog {
                len: filter.len() as u16,
                filter: filter.as_ptr(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(libc::PR_SET_SECCOMP, 2, &prog as *const SockFprog) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

#[test]
fn without_namespaces_commands_are_still_confined_and_cleaned_up() {
    if !landlock_here() {
        return;
    }
    let env = Env::new();
    let provider = FakeProvider::start(vec![]).unwrap();
    let o = without_namespaces(env.cmd(&provider.base_url()).arg("doctor"))
        .output()
        .unwrap();
    assert!(
        stdout(&o).contains("command lifetime: process group and subreaper"),
        "{}",
        stdout(&o)
    );

    let m = format!("6{}.{}", std::process::id() % 1000, 3);
    let home = env.home.path().display().to_string();
    let command = format!(
        "setsid sleep {m} & nohup sleep {m} >/dev/null 2>&1 & (setsid sh -c 'sleep {m}' &); \
         cat '{home}/.env'; echo done"
    );
    let provider = FakeProvider::start(vec![
        Reply::tool("c1", "terminal", &json!({"command": command}).to_string()),
        Reply::text("done"),
    ])
    .unwrap();
    let o = without_namespaces(env.cmd(&provider.base_url()).args(["-z", "go", "--quiet"]))
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let results = tool_results(&provider.requests());
    assert!(!results[0].contains(KEY), "{}", results[0]);
    assert!(results[0].contains("done\n"), "{}", results[0]);
    assert!(
        results[0].contains("were killed when it ended"),
        "{}",
        results[0]
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while markers(&m) > 0 {
        assert!(Instant::now() < deadline, "processes outlived the command");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Under an emulator without Landlock and namespaces (qemu-user 7.2), what
/// is left of the containment: an unconfined command (`--no-sandbox`)
/// runs, and its background jobs, which stay in its process group, are
/// killed when it ends. Processes that leave the group (`setsid`) are not
/// checked: qemu-user 7.2 does not pass `PR_SET_CHILD_SUBREAPER` on to the
/// kernel, so such orphans go to the host's init and outlive the command.
#[test]
fn under_an_emulator_a_commands_group_is_killed_when_it_ends() {
    if runner().is_empty() || emulated().landlock {
        println!("SKIP: not under an emulator without Landlock (HERMES_SANDBOX_RUNNER)");
        return;
    }
    let env = Env::new();
    let m = format!("7{}.{}", std::process::id() % 1000, 1);
    let command = format!("sleep {m} & nohup sleep {m} >/dev/null 2>&1 & echo done");
    let provider = FakeProvider::start(vec![
        Reply::tool("c1", "terminal", &json!({"command": command}).to_string()),
        Reply::text("done"),
    ])
    .unwrap();
    let o = env
        .cmd(&provider.base_url())
        .args(["-z", "go", "--quiet", "--no-sandbox"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let results = tool_results(&provider.requests());
    assert!(results[0].contains("done\n"), "{}", results[0]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while markers(&m) > 0 {
        assert!(
            Instant::now() < deadline,
            "background jobs outlived the command"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether the kernel enforces Landlock; with `HERMES_REQUIRE_LANDLOCK` set
/// (`.ci/run` sets it) a kernel without Landlock fails the test instead of
/// skipping it. Under an emulator (`HERMES_SANDBOX_RUNNER`) its absence is
/// the emulator's (qemu-user passes no Landlock call on), not the kernel's:
/// those parts skip with a line saying so, whatever the variable says.
fn landlock_here() -> bool {
    let ok = if runner().is_empty() {
        hermes_runtime::tools::landlock_abi().is_some_and(|a| a >= 2)
    } else {
        emulated().landlock
    };
    if !ok {
        assert!(
            std::env::var_os("HERMES_REQUIRE_LANDLOCK").is_none() || !runner().is_empty(),
            "the kernel has no usable Landlock, and HERMES_REQUIRE_LANDLOCK is set"
        );
        let runner = runner();
        if runner.is_empty() {
            println!("SKIP: the kernel has no usable Landlock");
        } else {
            println!("SKIP: hermes under {runner:?} gets no Landlock");
        }
    }
    ok
}

#[test]
fn the_terminal_cannot_reach_the_key_in_hermes_environment_or_home() {
    if !landlock_here() {
        return;
    }
    let env = Env::new();
    let home = env.home.path().display().to_string();
    let probe = format!(
        "cat '{home}/.env'; for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done \
         2>/dev/null | grep -c {KEY}; tr '\\0' '\\n' < /proc/$PPID/environ; env; echo end"
    );
    let provider = FakeProvider::start(vec![
        Reply::tool("c1", "terminal", &json!({"command": probe}).to_string()),
        Reply::text("done"),
    ])
    .unwrap();
    let o = env
        .cmd(&provider.base_url())
        .args(["-z", "look around", "--quiet"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let results = tool_results(&provider.requests());
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(
        !results[0].contains(KEY),
        "the key reached the transcript: {}",
        results[0]
    );
    assert!(
        results[0].contains("\n0\n"),
        "some environ held the key: {}",
        results[0]
    );
    assert!(results[0].contains("end\n"), "{}", results[0]);

    // The probe does find the key when the user opts out: it is a real test.
    let provider = FakeProvider::start(vec![
        Reply::tool("c1", "terminal", &json!({"command": probe}).to_string()),
        Reply::text("done"),
    ])
    .unwrap();
    let o = env
        .cmd(&provider.base_url())
        .args(["-z", "look around", "--quiet", "--no-sandbox"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let results = tool_results(&provider.requests());
    assert!(results[0].contains(KEY), "{}", results[0]);
}

#[test]
fn doctor_shows_the_sandbox_state() {
    let env = Env::new();
    let provider = FakeProvider::start(vec![]).unwrap();
    let o = env
        .cmd(&provider.base_url())
        .arg("doctor")
        .output()
        .unwrap();
    let out = stdout(&o);
    if landlock_here() {
        assert!(out.contains("✓ terminal sandbox on (Landlock ABI"), "{out}");
        assert!(out.contains("command lifetime: PID namespace"), "{out}");
    }
    let o = env
        .cmd(&provider.base_url())
        .args(["--no-sandbox", "doctor"])
        .output()
        .unwrap();
    assert!(
        stdout(&o).contains("terminal sandbox off (opted out"),
        "{}",
        stdout(&o)
    );

    let o = without_landlock(env.cmd(&provider.base_url()).arg("doctor"))
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(
        out.contains("✗ terminal sandbox unavailable: the kernel does not offer Landlock"),
        "{out}"
    );
    assert!(out.contains("--no-sandbox"), "{out}");
    assert_eq!(o.status.code(), Some(1), "{out}");
}

#[test]
fn without_landlock_the_terminal_refuses_and_the_gateway_does_not_start() {
    let env = Env::new();
    let provider = FakeProvider::start(vec![
        Reply::tool("c1", "terminal", r#"{"command":"echo ran > ran.txt"}"#),
        Reply::text("done"),
    ])
    .unwrap();
    let o = without_landlock(
        env.cmd(&provider.base_url())
            .args(["-z", "run it", "--quiet"]),
    )
    .output()
    .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let results = tool_results(&provider.requests());
    assert!(
        results[0].contains("the terminal's sandbox is unavailable"),
        "{results:?}"
    );
    assert!(results[0].contains("--no-sandbox"), "{results:?}");
    assert!(!env.work.path().join("ran.txt").exists(), "the command ran");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let telegram = rt.block_on(telegram_support::Fake::start(true));
    let gateway = |extra: &[&str]| {
        let mut c = env.cmd(&provider.base_url());
        c.env("TELEGRAM_BOT_TOKEN", telegram_support::TOKEN)
            .env("TELEGRAM_API_URL", &telegram.base)
            .env("TELEGRAM_ALLOWED_USERS", "1")
            .args(extra)
            .args(["gateway", "run", "--check"]);
        without_landlock(&mut c).output().unwrap()
    };
    let o = gateway(&[]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("does not serve an unconfined terminal"),
        "{err}"
    );
    let o = gateway(&["--no-sandbox"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        stdout(&o).contains("terminal sandbox: off"),
        "{}",
        stdout(&o)
    );
}

fn markers(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
        })
        .filter(|e| {
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let zombie = stat
                .rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'));
            !zombie
                && String::from_utf8_lossy(&cmd)
                    .replace('\0', " ")
                    .contains(marker)
        })
        .count()
}

#[test]
fn a_sigkilled_hermes_leaves_no_command_running() {
    // The command runs confined in a PID namespace; an emulator that offers
    // neither (qemu-user) cannot run this test — the clean-up it does
    // offer is checked by the test without namespaces.
    if !runner().is_empty() {
        let emulated = emulated();
        if !(emulated.landlock && emulated.pid_namespace) {
            println!(
                "SKIP: hermes under {:?} gets no Landlock or no PID namespace",
                runner()
            );
            return;
        }
    }
    let env = Env::new();
    let m = format!("5{}.{}", std::process::id() % 1000, 7);
    let command = format!("setsid sleep {m} & nohup sleep {m} >/dev/null 2>&1 & sleep {m}");
    let provider = FakeProvider::start(vec![
        Reply::tool(
            "c1",
            "terminal",
            &json!({"command": command, "timeout": 600}).to_string(),
        ),
        Reply::text("done"),
    ])
    .unwrap();
    let mut child = env
        .cmd(&provider.base_url())
        .args(["-z", "run it", "--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while markers(&m) < 3 {
        assert!(Instant::now() < deadline, "the command did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while markers(&m) > 0 {
        assert!(
            Instant::now() < deadline,
            "processes of the command outlived hermes"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
