//! `hermes pairing` against a real `hermes gateway run` (SPEC Y4): the
//! gateway process serves Telegram through the Bot API fake (shared with
//! the gateway's tests), the model is the loopback `FakeProvider` (which
//! records every request), and the operator approves, fails and revokes
//! with the real binary while the gateway runs — no restart.
#![cfg(feature = "telegram")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::telegram_support;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use hermes_tests::{FakeProvider, Reply};
use serde_json::json;
use telegram_support::{Fake, TOKEN};

const HERMES: &str = env!("CARGO_BIN_EXE_hermes");
const STRANGER: i64 = 99;
const WAIT: Duration = Duration::from_secs(60);

struct Env {
    home: tempfile::TempDir,
    provider: String,
    telegram: String,
}

impl Env {
    fn cmd(&self) -> Command {
        let mut c = Command::new(HERMES);
        c.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("HERMES_HOME", self.home.path())
            .env("HERMES_BASE_URL", &self.provider)
            .env("HERMES_MODEL", "fake-model")
            .env("HERMES_TOOLSETS", "todo")
            .env("TELEGRAM_BOT_TOKEN", TOKEN)
            .env("TELEGRAM_API_URL", &self.telegram)
            .env("TELEGRAM_POLL_TIMEOUT", "1")
            .env("TELEGRAM_ALLOWED_USERS", "1")
            .current_dir(self.home.path())
            .stdin(Stdio::null());
        c
    }

    async fn hermes(&self, args: &[&str]) -> Output {
        let mut c = self.cmd();
        c.args(args);
        tokio::task::spawn_blocking(move || c.output().unwrap())
            .await
            .unwrap()
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Sends a DM from the stranger; waits for the bot's `n`-th message to them.
async fn dm(fake: &Fake, update: i64, body: &str, n: usize) -> String {
    fake.push_update(json!({"update_id": update, "message": {
        "message_id": update, "date": 0, "text": body,
        "from": {"id": STRANGER, "is_bot": false, "first_name": "Bea"},
        "chat": {"id": STRANGER, "type": "private"},
    }}));
    let deadline = Instant::now() + WAIT;
    loop {
        let sent = fake.requests("sendMessage");
        if sent.len() >= n {
            return sent[n - 1].body["text"].as_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "no reply {n}: {sent:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn code_in(text: &str) -> String {
    text.split("pairing code is ")
        .nth(1)
        .unwrap_or_else(|| panic!("no code in {text:?}"))[..8]
        .to_owned()
}

struct Gateway(Child);

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_with_the_cli_while_the_gateway_runs_then_revoke() {
    let fake = Fake::start(true).await;
    let provider = FakeProvider::start_with(
        vec![],
        None,
        Some(std::sync::Arc::new(|_| Reply::text("Welcome in."))),
    )
    .unwrap();
    let env = Env {
        home: tempfile::tempdir().unwrap(),
        provider: provider.base_url(),
        telegram: fake.base.clone(),
    };
    let _gateway = Gateway(
        env.cmd()
            .args(["gateway", "run"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );

    let first = dm(&fake, 1, "hi, let me in", 1).await;
    let code = code_in(&first);
    assert!(
        provider.requests().is_empty(),
        "a stranger reached the model"
    );

    let listed = env.hermes(&["pairing", "list"]).await;
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed));
    let listed = text(&listed);
    assert!(
        listed.contains(&code) && listed.contains("telegram 99 (Bea)"),
        "{listed}"
    );

    let wrong = env
        .hermes(&["pairing", "approve", "telegram", "ABCDEFGH"])
        .await;
    assert_eq!(wrong.status.code(), Some(1), "{}", text(&wrong));
    assert!(
        !text(&wrong).contains("ABCDEFGH"),
        "a code in full: {}",
        text(&wrong)
    );

    let ok = env.hermes(&["pairing", "approve", "telegram", &code]).await;
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok));
    let again = env.hermes(&["pairing", "approve", "telegram", &code]).await;
    assert_eq!(
        again.status.code(),
        Some(1),
        "a used code: {}",
        text(&again)
    );

    // Served by the same gateway process, no restart.
    assert_eq!(dm(&fake, 2, "thanks!", 2).await, "Welcome in.");
    assert_eq!(provider.requests().len(), 1);

    let check = env.hermes(&["gateway", "run", "--check"]).await;
    assert!(
        text(&check).contains("telegram 99 (Bea)"),
        "{}",
        text(&check)
    );

    let revoked = env.hermes(&["pairing", "revoke", "telegram", "99"]).await;
    assert_eq!(revoked.status.code(), Some(0), "{}", text(&revoked));
    let unknown = env.hermes(&["pairing", "revoke", "telegram", "99"]).await;
    assert_eq!(unknown.status.code(), Some(1), "{}", text(&unknown));
    let third = dm(&fake, 3, "still me", 3).await;
    assert!(third.contains("pairing code is"), "{third}");
    assert_eq!(
        provider.requests().len(),
        1,
        "a revoked user reached the model"
    );

    let cleared = env.hermes(&["pairing", "clear-pending"]).await;
    assert!(text(&cleared).contains("Dropped 1"), "{}", text(&cleared));
}
