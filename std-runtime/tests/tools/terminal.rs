//! The terminal tool as a real process: merged output and exit codes,
//! interrupts, output caps, and the child's allow-listed environment.

use std::path::Path;
use std::time::Duration;

use hermes_runtime::tools::child_env;
use serde_json::json;

use super::support::Fx;

#[test]
fn terminal_merges_output_and_reports_exit_code() {
    let fx = Fx::new();
    let out = fx.ok(
        "terminal",
        json!({"command": "echo one; echo two >&2; echo three; exit 3"}),
    );
    assert_eq!(out, "one\ntwo\nthree\n[exit code: 3]");
    std::fs::create_dir(fx.path("sub")).unwrap();
    let out = fx.ok("terminal", json!({"command": "pwd", "workdir": "sub"}));
    assert!(
        out.trim_end_matches("[exit code: 0]")
            .trim()
            .ends_with("/sub"),
        "{out}"
    );
    let out = fx.ok("terminal", json!({"command": "true"}));
    assert_eq!(out, "[exit code: 0]");
    let m = fx.err("terminal", json!({"command": "ls", "timeout": 601}));
    assert!(m.contains("between 1 and 600"), "{m}");
    let m = fx.err("terminal", json!({"command": "  "}));
    assert!(m.contains("empty"), "{m}");
}

#[test]
fn terminal_interrupt_kills_the_command() {
    let fx = Fx::new();
    let flag = fx.interrupt.clone();
    let setter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        flag.interrupt();
    });
    let out = fx.ok("terminal", json!({"command": "sleep 300", "timeout": 600}));
    setter.join().unwrap();
    assert!(
        out.contains("[interrupted; it and every process it started were killed]"),
        "{out}"
    );
}

#[test]
fn terminal_caps_output_keeping_head_and_tail() {
    let fx = Fx::with(|e| e.result_cap_bytes = 2000, None);
    let out = fx.ok("terminal", json!({"command": "seq 1 100000"}));
    assert!(out.len() <= 2000, "{} bytes", out.len());
    assert!(out.starts_with("1\n2\n3\n"), "{out}");
    assert!(out.contains("[output truncated: "), "{out}");
    assert!(out.contains("bytes omitted from the middle"), "{out}");
    assert!(out.ends_with("99999\n100000\n[exit code: 0]"), "{out}");
}

#[test]
fn child_env_is_an_allow_list_plus_home_tmpdir_and_pass_through() {
    let parent: Vec<(std::ffi::OsString, std::ffi::OsString)> = vec![
        ("PATH".into(), "/bin".into()),
        ("FOO_API_KEY".into(), "sekrit".into()),
        ("MYSQL_PWD".into(), "hunter2".into()),
        ("PGPASSWORD".into(), "pg".into()),
        ("HTTPS_PROXY".into(), "http://u:p@proxy:3128".into()),
        ("HOME".into(), "/root".into()),
        ("LANG".into(), "C.UTF-8".into()),
        ("LC_ALL".into(), "C".into()),
        ("CARGO_HOME".into(), "/c".into()),
        ("CARGO_TARGET_DIR".into(), "/t".into()),
        ("EDITOR".into(), "vi".into()),
    ];
    let env = child_env(
        parent,
        &["EDITOR".into(), "CARGO_*".into()],
        Path::new("/work"),
        Some(Path::new("/tmp/x")),
    );
    let names: Vec<String> = env
        .iter()
        .map(|(n, v)| format!("{}={}", n.to_string_lossy(), v.to_string_lossy()))
        .collect();
    assert_eq!(
        names,
        [
            "CARGO_HOME=/c",
            "CARGO_TARGET_DIR=/t",
            "EDITOR=vi",
            "HOME=/work",
            "LANG=C.UTF-8",
            "LC_ALL=C",
            "PATH=/bin",
            "TMPDIR=/tmp/x"
        ]
    );
}

/// Records what a front-end hears of background processes.
#[derive(Default)]
struct Heard(std::sync::Mutex<Vec<hermes_runtime::tools::FinishedProcess>>);

impl hermes_runtime::tools::BackgroundSink for Heard {
    fn started(&self, _: &hermes_runtime::tools::StartedProcess) -> Result<(), String> {
        Ok(())
    }
    fn finished(&self, f: &hermes_runtime::tools::FinishedProcess) {
        self.0.lock().unwrap().push(f.clone());
    }
}

/// Background commands: the per-session limit, `process` wait/kill/log,
/// one report of each end, and the same confinement as the foreground.
#[test]
fn background_commands_are_limited_confined_and_reported_once() {
    use hermes_runtime::tools::{BackgroundLimits, BackgroundProcesses};
    use std::sync::Arc;
    let heard = Arc::new(Heard::default());
    let outside = tempfile::tempdir().unwrap();
    let procs = BackgroundProcesses::new(
        BackgroundLimits {
            per_session: 2,
            wall_clock: Duration::from_secs(60),
            output_cap: 1 << 20,
        },
        outside.path().join("bg"),
        Some(heard.clone() as Arc<dyn hermes_runtime::tools::BackgroundSink>),
    );
    let fx = Fx::with(|e| e.background = Some(procs.scope("s1")), None);
    let id_of = |out: &str| {
        let i = out.find("process bg").unwrap() + "process ".len();
        out[i..i + 14].to_owned()
    };
    let a = id_of(&fx.ok(
        "terminal",
        json!({"command": "sleep 30", "background": true}),
    ));
    let _b = fx.ok(
        "terminal",
        json!({"command": "sleep 30", "background": true}),
    );
    let m = fx.err("terminal", json!({"command": "true", "background": true}));
    assert!(m.contains("the limit is 2"), "{m}");
    let killed = fx.ok("process", json!({"action": "kill", "session_id": a}));
    assert!(killed.contains("killed (process kill)"), "{killed}");
    // Room again; the same sandbox: no write outside the working directory.
    let escape = outside.path().join("escaped.txt");
    let c = id_of(&fx.ok(
        "terminal",
        json!({"command": format!("echo x > {}; echo tried", escape.display()),
               "background": true, "notify_on_complete": true}),
    ));
    let waited = fx.ok(
        "process",
        json!({"action": "wait", "session_id": c, "timeout": 30}),
    );
    assert!(
        waited.contains("exit code 0") && waited.contains("Permission denied"),
        "{waited}"
    );
    assert!(!escape.exists(), "confined like a foreground command");
    let log = fx.ok("process", json!({"action": "log", "session_id": c}));
    assert!(log.starts_with("sh: "), "{log}");
    let list = fx.ok("process", json!({"action": "list"}));
    assert_eq!(list.lines().count(), 3, "{list}");
    procs.kill_all();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while heard.0.lock().unwrap().len() < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    let heard = heard.0.lock().unwrap();
    assert_eq!(heard.len(), 3, "each end reported once: {heard:#?}");
    assert_eq!(heard.iter().filter(|f| f.process.notify).count(), 1);
}
