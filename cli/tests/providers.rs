//! The `hermes` binary on a fallback chain and with `/usage` (issue 11),
//! against the project's loopback provider.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

use hermes_tests::{FakeProvider, Reply};
use serde_json::json;

const HERMES: &str = env!("CARGO_BIN_EXE_hermes");

fn cmd(home: &std::path::Path, base_url: &str) -> Command {
    let mut c = Command::new(HERMES);
    c.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("HERMES_HOME", home)
        .env("HERMES_BASE_URL", base_url)
        .env("HERMES_MODEL", "primary-model")
        .current_dir(home);
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_oneshot_answered_by_the_fallback_says_so_once_on_stderr() {
    let home = tempfile::tempdir().unwrap();
    let primary =
        FakeProvider::start(vec![Reply::Status(402, "Insufficient credits".into())]).unwrap();
    let fallback = FakeProvider::start(vec![Reply::text("The fallback answered.")]).unwrap();
    let o: Output = cmd(home.path(), &primary.base_url())
        .env("HERMES_FALLBACK_BASE_URL", fallback.base_url())
        .env("HERMES_FALLBACK_MODEL", "fallback-model")
        .args(["-z", "hello", "--toolsets", "todo"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout),
        "The fallback answered.\n",
        "only the answer on stdout"
    );
    let err = text(&o.stderr);
    assert_eq!(
        err.matches("fallback-model answers this turn").count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("primary-model failed (out of credit or quota"),
        "{err}"
    );
    assert_eq!(primary.requests().len(), 1, "402 is not retried");
    assert_eq!(fallback.requests().len(), 1);
}

#[test]
fn usage_and_status_report_tokens_cache_share_and_cost() {
    let home = tempfile::tempdir().unwrap();
    let usage = json!({"prompt_tokens": 4000, "completion_tokens": 100, "total_tokens": 4100,
                       "prompt_tokens_details": {"cached_tokens": 3000}});
    let provider = FakeProvider::start(vec![Reply::text("Hi.").with_usage(usage)]).unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        "[provider]\nprice = { input = 3.0, output = 15.0, cache_read = 0.3 }\n",
    )
    .unwrap();
    let mut child = cmd(home.path(), &provider.base_url())
        .args(["chat", "--toolsets", "todo"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello\n/usage\n/status\n/exit\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", text(&o.stderr));
    assert!(
        out.contains("last turn: 4000 prompt + 100 completion tokens"),
        "{out}"
    );
    assert!(
        out.contains("75 % of prompt tokens read from the cache (3000 of 4000)"),
        "{out}"
    );
    // 1000 × 3 + 3000 × 0.3 + 100 × 15, per million.
    assert!(out.contains("cost: $0.0054"), "{out}");
    assert!(
        out.contains("tokens: 4000 prompt + 100 completion = 4100\ncache: 75 %"),
        "{out}"
    );
    assert_eq!(out.matches("cache: 75 %").count(), 3, "{out}");
}

#[test]
fn config_shows_the_fallback_chain_with_keys_masked() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        "[provider]\nreasoning_effort = \"low\"\n\
         [[provider.fallback]]\nbase_url = \"https://llm.example.com/v1\"\n\
         api_key = \"sk-fallback-secret-123456\"\nmodel = \"backup-model\"\n",
    )
    .unwrap();
    let o = cmd(home.path(), "http://127.0.0.1:9/v1")
        .arg("config")
        .output()
        .unwrap();
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    assert!(out.contains("fallback 1"), "{out}");
    assert!(
        out.contains("backup-model at https://llm.example.com/v1"),
        "{out}"
    );
    assert!(out.contains("reasoning_effort low"), "{out}");
    assert!(!out.contains("fallback-secret"), "the key is masked: {out}");
}
