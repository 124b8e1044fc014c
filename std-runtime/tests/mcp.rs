//! The MCP client against the reference servers from npm
//! (`tests/emulators/mcp`): server-everything over stdio and streamable
//! HTTP, server-filesystem over stdio — through the same registry the agent
//! loop uses. Crashes, hangs and interrupts are real: the server process is
//! killed (SIGKILL), stopped (SIGSTOP), or dies mid-call.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_core::{InterruptFlag, IterationBudget, ToolContext, ToolError, ToolRegistry};
use hermes_runtime::bridge::AsyncBridge;
use hermes_runtime::mcp::{McpManager, ServerConfig, ServerState, Transport};
use hermes_runtime::tools::{ToolEnv, build_registry};
use serde_json::{Value, json};
use support::mcp_servers::{self, HttpEverything};
use tempfile::TempDir;

struct Fx {
    work: TempDir,
    _home: TempDir,
    mcp: Arc<McpManager>,
    reg: ToolRegistry,
    budget: IterationBudget,
    interrupt: InterruptFlag,
}

impl Fx {
    fn new(configs: Vec<ServerConfig>) -> Fx {
        Fx::with_cap(configs, hermes_runtime::tools::DEFAULT_RESULT_CAP_BYTES)
    }

    fn with_cap(configs: Vec<ServerConfig>, cap: usize) -> Fx {
        let work = TempDir::new().unwrap();
        let home = TempDir::new().unwrap();
        let bridge = Arc::new(AsyncBridge::new().unwrap());
        let mcp = Arc::new(McpManager::new(configs, work.path(), bridge.clone()));
        mcp.start();
        let mut env = ToolEnv::new(work.path(), home.path());
        env.bridge = Some(bridge);
        env.mcp = Some(mcp.clone());
        env.result_cap_bytes = cap;
        let reg = build_registry(&env, Some(&["mcp".to_owned()])).unwrap();
        Fx {
            work,
            _home: home,
            mcp,
            reg,
            budget: IterationBudget::new(90),
            interrupt: InterruptFlag::new(),
        }
    }

    fn call(&self, name: &str, args: Value) -> Result<String, ToolError> {
        let ctx = ToolContext {
            budget: &self.budget,
            interrupt: &self.interrupt,
            tool_call_id: "call_1",
        };
        self.reg.dispatch(name, &args.to_string(), &ctx)
    }

    fn names(&self) -> Vec<String> {
        self.reg.specs().iter().map(|s| s.name.clone()).collect()
    }

    fn pid(&self, server: usize) -> u32 {
        self.mcp.status()[server]
            .pid
            .expect("a running stdio server has a pid")
    }
}

fn text(r: Result<String, ToolError>) -> String {
    match r {
        Ok(t) => t,
        Err(e) => panic!("tool failed: {e}"),
    }
}

fn error(r: Result<String, ToolError>) -> String {
    match r {
        Ok(t) => panic!("expected an error, got: {t}"),
        Err(e) => e.to_string(),
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// Waits until `pid` has exited and been reaped.
fn wait_gone(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(Instant::now() < deadline, "process {pid} is still there");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn with_timeouts(mut c: ServerConfig, call: u64) -> ServerConfig {
    c.call_timeout = Duration::from_secs(call);
    c
}

#[test]
fn tools_are_offered_with_the_servers_own_schemas() {
    hermes_tests::require!(Npm("mcp"));
    let fx = Fx::new(vec![mcp_servers::everything("everything")]);
    let names = fx.names();
    for want in [
        "mcp_everything_echo",
        "mcp_everything_get-sum",
        "mcp_everything_trigger-long-running-operation",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "{want} missing from {names:?}"
        );
    }
    let sum = fx
        .reg
        .specs()
        .iter()
        .find(|s| s.name == "mcp_everything_get-sum")
        .unwrap();
    assert_eq!(sum.schema()["type"], "object");
    assert_eq!(sum.schema()["properties"]["a"]["type"], "number");
    assert!(
        sum.description.starts_with("[MCP server 'everything']"),
        "{}",
        sum.description
    );
    let status = &fx.mcp.status()[0];
    assert_eq!(status.state, ServerState::Running);
    assert!(
        status
            .server_info
            .as_deref()
            .unwrap_or("")
            .contains("everything"),
        "{status:?}"
    );
}

#[test]
fn results_text_images_structured_content_and_errors() {
    hermes_tests::require!(Npm("mcp"));
    let fx = Fx::new(vec![mcp_servers::everything("everything")]);
    assert_eq!(
        text(fx.call("mcp_everything_echo", json!({"message": "hello"}))),
        "Echo: hello"
    );
    assert_eq!(
        text(fx.call("mcp_everything_get-sum", json!({"a": 2, "b": 3}))),
        "The sum of 2 and 3 is 5."
    );
    let image = text(fx.call("mcp_everything_get-tiny-image", json!({})));
    assert!(image.contains("[image: image/png,"), "{image}");
    assert!(!image.contains("iVBOR"), "no base64 for the model: {image}");
    let weather = text(fx.call(
        "mcp_everything_get-structured-content",
        json!({"location": "Chicago"}),
    ));
    assert!(weather.contains("temperature"), "{weather}");
    // A schema violation is the server's error, given to the model.
    let bad = error(fx.call("mcp_everything_get-sum", json!({"a": "two", "b": 3})));
    assert!(bad.starts_with("Error"), "{bad}");
    assert!(bad.contains("get-sum"), "{bad}");
    let not_object = error(fx.call("mcp_everything_echo", json!(["x"])));
    assert!(not_object.contains("JSON object"), "{not_object}");
}

#[test]
fn long_outputs_are_capped_with_a_marker() {
    hermes_tests::require!(Npm("mcp"));
    let fx = Fx::with_cap(vec![mcp_servers::everything("everything")], 4_000);
    let long = "x".repeat(100_000);
    let out = text(fx.call("mcp_everything_echo", json!({ "message": long })));
    assert!(out.len() <= 4_000, "{} bytes", out.len());
    assert!(
        out.contains("[output truncated"),
        "{}",
        &out[out.len() - 200..]
    );
}

#[test]
fn progress_keeps_a_long_call_alive_and_silence_times_it_out() {
    hermes_tests::require!(Npm("mcp"));
    let fx = Fx::new(vec![with_timeouts(
        mcp_servers::everything("everything"),
        2,
    )]);
    let pid = fx.pid(0);
    // 4 s in all, a progress notification every 0.4 s: longer than the
    // 2 s timeout, never silent for that long.
    let done = text(fx.call(
        "mcp_everything_trigger-long-running-operation",
        json!({"duration": 4, "steps": 10}),
    ));
    assert!(done.contains("Long running operation completed"), "{done}");
    // One step of 4 s: 4 s without a word.
    let started = Instant::now();
    let slow = error(fx.call(
        "mcp_everything_trigger-long-running-operation",
        json!({"duration": 4, "steps": 1}),
    ));
    assert!(slow.contains("timed out after 2s"), "{slow}");
    assert!(slow.contains("still running"), "{slow}");
    assert!(slow.contains("[mcp.servers.everything] timeout"), "{slow}");
    assert!(started.elapsed() < Duration::from_secs(10));
    // Slow is not dead: the same process answers the next call.
    assert_eq!(
        text(fx.call("mcp_everything_echo", json!({"message": "x"}))),
        "Echo: x"
    );
    assert_eq!(fx.pid(0), pid);
    assert_eq!(fx.mcp.status()[0].starts, 1);
}

#[test]
fn the_server_gets_an_explicit_environment_and_its_secrets_stay_out_of_results() {
    hermes_tests::require!(Npm("mcp"));
    let mut config = mcp_servers::everything("everything");
    if let Transport::Stdio { env, .. } = &mut config.transport {
        env.insert("HERMES_MCP_MARKER".into(), "on".into());
        env.insert("MY_SERVICE_TOKEN".into(), "s3cret-token-value".into());
    }
    let fx = Fx::new(vec![config]);
    let out = text(fx.call("mcp_everything_get-env", json!({})));
    assert!(!out.contains("s3cret-token-value"), "{out}");
    let env: serde_json::Map<String, Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(env["HERMES_MCP_MARKER"], "on");
    assert_eq!(env["MY_SERVICE_TOKEN"], "***");
    let allowed = [
        "PATH",
        "LANG",
        "LANGUAGE",
        "TERM",
        "TZ",
        "HOME",
        "USER",
        "LOGNAME",
        "TMPDIR",
        "HERMES_MCP_MARKER",
        "MY_SERVICE_TOKEN",
    ];
    for name in env.keys() {
        assert!(
            allowed.contains(&name.as_str()) || name.starts_with("LC_"),
            "the server inherited {name}"
        );
    }
}

#[test]
fn filesystem_server_works_inside_its_root_and_refuses_outside() {
    hermes_tests::require!(Npm("mcp"));
    let root = TempDir::new().unwrap();
    let fx = Fx::new(vec![mcp_servers::filesystem("fs", root.path())]);
    let file = root.path().join("note.txt");
    let written = fx.call(
        "mcp_fs_write_file",
        json!({"path": file.display().to_string(), "content": "from hermes"}),
    );
    text(written);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "from hermes");
    let read = text(fx.call(
        "mcp_fs_read_text_file",
        json!({"path": file.display().to_string()}),
    ));
    assert!(read.contains("from hermes"), "{read}");
    let outside = error(fx.call("mcp_fs_read_text_file", json!({"path": "/etc/hostname"})));
    assert!(outside.contains("Error"), "{outside}");
    assert!(fx.work.path().is_dir());
}

#[test]
fn streamable_http_calls_share_one_session() {
    hermes_tests::require!(Npm("mcp"));
    let server = HttpEverything::start();
    let fx = Fx::new(vec![server.config("web")]);
    assert_eq!(
        text(fx.call("mcp_web_echo", json!({"message": "over http"}))),
        "Echo: over http"
    );
    // The server keeps per-session state: the second toggle sees the first.
    let first = text(fx.call("mcp_web_toggle-simulated-logging", json!({})));
    let second = text(fx.call("mcp_web_toggle-simulated-logging", json!({})));
    assert!(first.starts_with("Started simulated"), "{first}");
    assert!(second.starts_with("Stopped simulated"), "{second}");
    let session = |s: &str| {
        s.split("for session ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .map(str::to_owned)
    };
    assert!(session(&first).is_some_and(|id| id.len() > 8), "{first}");
    assert_eq!(session(&first), session(&second), "one MCP session");
    // Progress arrives over the SSE response stream.
    let mut config = server.config("slow");
    config.call_timeout = Duration::from_secs(2);
    let fx2 = Fx::new(vec![config]);
    let done = text(fx2.call(
        "mcp_slow_trigger-long-running-operation",
        json!({"duration": 3, "steps": 6}),
    ));
    assert!(done.contains("completed"), "{done}");
    assert_eq!(fx.mcp.status()[0].starts, 1);
}

#[test]
fn a_server_killed_between_calls_is_restarted_and_the_model_is_told() {
    hermes_tests::require!(Npm("mcp"));
    let fx = Fx::new(vec![mcp_servers::everything("everything")]);
    let first = fx.pid(0);
    assert_eq!(
        text(fx.call("mcp_everything_echo", json!({"message": "a"}))),
        "Echo: a"
    );
    signal(first, "-KILL");
    wait_gone(first);
    let out = text(fx.call("mcp_everything_echo", json!({"message": "b"})));
    assert!(
        out.starts_with(
            "[note: MCP server 'everything' had stopped (killed by signal 9) and was restarted"
        ),
        "{out}"
    );
    assert!(out.ends_with("Echo: b"), "{out}");
    let status = &fx.mcp.status()[0];
    assert_eq!(status.starts, 2);
    assert_ne!(status.pid, Some(first));
    assert_eq!(status.state, ServerState::Running);
}

#[test]
fn a_server_that_dies_during_a_call_is_a_clear_error_then_recovers() {
    let proxy = mcp_servers::dir().join("crash-proxy.mjs");
    let config = mcp_servers::stdio(
        "flaky",
        "node",
        vec![proxy.display().to_string(), "get-sum".into()],
    );
    let fx = Fx::new(vec![config]);
    assert_eq!(
        text(fx.call("mcp_flaky_echo", json!({"message": "up"}))),
        "Echo: up"
    );
    let crashed = error(fx.call("mcp_flaky_get-sum", json!({"a": 1, "b": 2})));
    assert!(
        crashed.contains("MCP server 'flaky' stopped (exited with status 3)"),
        "{crashed}"
    );
    assert!(crashed.contains("outcome is unknown"), "{crashed}");
    assert!(crashed.contains("restarted on the next call"), "{crashed}");
    assert!(matches!(fx.mcp.status()[0].state, ServerState::Stopped(_)));
    // The next call starts it again; no note: the failure was reported.
    assert_eq!(
        text(fx.call("mcp_flaky_echo", json!({"message": "again"}))),
        "Echo: again"
    );
    assert_eq!(fx.mcp.status()[0].starts, 2);
}

#[test]
fn a_hung_server_is_stopped_and_restarted_on_the_next_call() {
    hermes_tests::require!(Npm("mcp"));
    let fx = Fx::new(vec![with_timeouts(
        mcp_servers::everything("everything"),
        2,
    )]);
    let first = fx.pid(0);
    signal(first, "-STOP");
    let hung = error(fx.call("mcp_everything_echo", json!({"message": "anyone?"})));
    assert!(hung.contains("stopped answering"), "{hung}");
    assert!(hung.contains("restarted on the next call"), "{hung}");
    wait_gone(first);
    assert_eq!(
        text(fx.call("mcp_everything_echo", json!({"message": "back"}))),
        "Echo: back"
    );
    assert_ne!(fx.pid(0), first);
}

#[test]
fn an_interrupt_cancels_the_call_and_keeps_the_server() {
    hermes_tests::require!(Npm("mcp"));
    let fx = Fx::new(vec![mcp_servers::everything("everything")]);
    let pid = fx.pid(0);
    fx.interrupt.interrupt();
    let started = Instant::now();
    let out = error(fx.call(
        "mcp_everything_trigger-long-running-operation",
        json!({"duration": 30, "steps": 30}),
    ));
    assert!(out.contains("interrupted"), "{out}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let fresh = InterruptFlag::new();
    let ctx = ToolContext {
        budget: &fx.budget,
        interrupt: &fresh,
        tool_call_id: "call_2",
    };
    let again = fx
        .reg
        .dispatch("mcp_everything_echo", r#"{"message":"still here"}"#, &ctx)
        .unwrap();
    assert_eq!(again, "Echo: still here");
    assert_eq!(fx.pid(0), pid);
}

#[test]
fn servers_that_cannot_start_are_reported_and_offer_no_tools() {
    hermes_tests::require!(Npm("mcp"));
    let missing = mcp_servers::stdio("missing", "/nonexistent/mcp-server", vec![]);
    let mut broken = mcp_servers::stdio(
        "broken",
        "sh",
        vec![
            "-c".into(),
            "echo \"cannot start: $BROKEN_KEY\" >&2; exit 3".into(),
        ],
    );
    if let Transport::Stdio { env, .. } = &mut broken.transport {
        env.insert("BROKEN_KEY".into(), "key-that-is-secret".into());
    }
    broken.startup_timeout = Duration::from_secs(20);
    let fx = Fx::new(vec![missing, broken, mcp_servers::everything("ok")]);
    let status = fx.mcp.status();
    match &status[0].state {
        ServerState::Failed(why) => assert!(
            why.contains("cannot run '/nonexistent/mcp-server'"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
    match &status[1].state {
        ServerState::Failed(why) => assert!(why.contains("exited with status 3"), "{why}"),
        other => panic!("{other:?}"),
    }
    let stderr = status[1].stderr.join("\n");
    assert!(stderr.contains("cannot start: ***"), "{stderr}");
    assert!(!format!("{status:?}").contains("key-that-is-secret"));
    assert_eq!(
        status[2].state,
        ServerState::Running,
        "the others still start"
    );
    let names = fx.names();
    assert!(names.iter().all(|n| n.starts_with("mcp_ok_")), "{names:?}");
}
