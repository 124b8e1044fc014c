//! The official `openai` Python client (pinned in `.ci/run`) against a real
//! `hermes gateway run` process serving only the API server — no chat
//! platform configured — with the loopback fake provider behind it:
//! `models.list()`, plain and streamed completions, a wrong key as
//! `AuthenticationError`, typed 404/400 errors, four concurrent clients
//! (`tests/python/openai_peer.py`). Then SIGTERM stops the gateway cleanly.
//!
//! `HERMES_OPENAI_PYTHON` names the venv's interpreter (`.ci/run` creates
//! it). Without it the test is skipped in the fast tier and fails in CI
//! (`hermes_tests::tier`).
#![cfg(feature = "api_server")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::api_server_support;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use api_server_support::{KEY, MODEL, call, wait_for};
use hermes_gateway::app::run_gateway;
use hermes_runtime::config::{Environment, Overrides, load};
use hermes_tests::{FakeProvider, Reply, Responder};

const CHILD_ENV: &str = "HERMES_API_SERVER_TEST_CHILD";

/// "echo: <last user message>", streamed in two pieces 300 ms apart, so
/// concurrent clients' runs overlap.
fn echo() -> Responder {
    Arc::new(|request: &serde_json::Value| {
        let last = request["messages"]
            .as_array()
            .and_then(|m| m.last())
            .and_then(|m| m["content"].as_str())
            .unwrap_or("")
            .to_owned();
        Reply::SlowText {
            pieces: vec!["echo: ".into(), last],
            delay: Duration::from_millis(300),
        }
    })
}

#[test]
fn openai_python_client_against_a_real_gateway() {
    if std::env::var_os(CHILD_ENV).is_some() {
        // The child: exactly what `hermes gateway run` does.
        let settings = load(&Overrides::default(), &Environment::from_process()).unwrap();
        let code = match run_gateway(&settings, false) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("gateway error: {e}");
                e.exit_code()
            }
        };
        std::process::exit(code);
    }
    use hermes_tests::tier::{Component, require};
    if !require(&[Component::OpenAiPython]) {
        return;
    }
    let python = std::env::var("HERMES_OPENAI_PYTHON").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let provider = FakeProvider::start_with(vec![], None, Some(echo())).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "api_server_python::openai_python_client_against_a_real_gateway",
            "--nocapture",
            "--test-threads=1",
        ])
        .env_clear()
        .env(CHILD_ENV, "1")
        .env("HERMES_HOME", home)
        .env("HERMES_BASE_URL", provider.base_url())
        .env("HERMES_API_KEY", "sk-provider")
        .env("HERMES_MODEL", "fake-model")
        .env("HERMES_TOOLSETS", "todo")
        .env("API_SERVER_ENABLED", "true")
        .env("API_SERVER_KEY", KEY)
        .env("API_SERVER_PORT", port.to_string())
        .current_dir(home)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let up = wait_for(Duration::from_secs(60), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            && call("GET", &format!("{base}/v1/health"), None, None, &[]).status == 200
    });
    if !up {
        let _ = child.kill();
        panic!("the gateway's API server did not come up");
    }
    let out = Command::new(&python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/python/openai_peer.py"
        ))
        .env("HERMES_API_BASE", format!("{base}/v1"))
        .env("HERMES_API_KEY", KEY)
        .env("HERMES_API_MODEL", MODEL)
        .output()
        .unwrap();
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut exit = None;
    wait_for(Duration::from_secs(30), || {
        exit = child.try_wait().unwrap();
        exit.is_some()
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "python peer failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("all checks passed"), "{stdout}");
    let Some(exit) = exit else {
        let _ = child.kill();
        panic!("the gateway did not stop after SIGTERM");
    };
    assert!(exit.success(), "{exit:?}");
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
    // Plain, streamed and four concurrent runs reached the model; the
    // refused requests (wrong key, unknown model, empty messages) did not.
    assert_eq!(provider.requests().len(), 6, "{:?}", provider.requests());
}
