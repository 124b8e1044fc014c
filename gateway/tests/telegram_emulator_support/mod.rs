//! The third-party `telegram-test-api` emulator (npm), started per test as
//! a child process on 127.0.0.1, and the calls its client API offers: `POST
//! /sendMessage` injects a user's message, `POST /getUpdates` (`{token,
//! chatId}`) returns what the bot sent to that chat.
//!
//! Setup: `npm ci --prefix tests/emulators/telegram` (CI does this first).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_telegram::{MemoryOffsets, TelegramAdapter, TelegramConfig};
use serde_json::{Value, json};

pub const WAIT: Duration = Duration::from_secs(30);
pub const EMULATOR_BOT_ID: i64 = 666;

/// POSTs `body` as JSON to the emulator's control API.
async fn post_json(url: &str, body: &Value) -> hermes_tests::http::Answer {
    let bytes = serde_json::to_vec(body).unwrap();
    hermes_tests::http::request_async("POST", url, Some(("application/json", bytes)))
        .await
        .unwrap()
}

pub struct Emulator {
    child: Child,
    pub base: String,
}

impl Emulator {
    pub fn start() -> Emulator {
        hermes_tests::tier::expect(hermes_tests::tier::Component::Npm("telegram"));
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/emulators/telegram");
        assert!(
            dir.join("node_modules/telegram-test-api").is_dir(),
            "the telegram-test-api emulator is not installed: run `npm ci --prefix tests/emulators/telegram` \
             from the repository root"
        );
        let mut child = Command::new("node")
            .arg("start.js")
            .arg("0")
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("cannot run `node` (is Node.js installed?)");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(port) = line.strip_prefix("LISTENING ") {
                    let _ = tx.send(port.trim().to_owned());
                }
            }
        });
        let port = match rx.recv_timeout(WAIT) {
            Ok(p) => p,
            Err(_) => {
                let _ = child.kill();
                panic!("the telegram emulator did not start within {WAIT:?}");
            }
        };
        Emulator {
            child,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    pub fn adapter(&self, token: &str) -> TelegramAdapter {
        let mut c = TelegramConfig::new(token);
        c.api_url = self.base.clone();
        c.empty_poll_pause = Duration::from_millis(200);
        TelegramAdapter::new(c, Arc::new(MemoryOffsets::new())).unwrap()
    }

    /// A user's message as the emulator's client injects it.
    pub async fn user_says(
        &self,
        token: &str,
        user: (i64, &str),
        chat: (i64, &str),
        text: &str,
        extra: Value,
    ) {
        let mut msg = json!({
            "botToken": token,
            "date": 0,
            "text": text,
            "from": {"id": user.0, "first_name": user.1, "username": user.1.to_lowercase(), "is_bot": false},
            "chat": {"id": chat.0, "type": chat.1, "title": "Test chat"},
        });
        for (k, v) in extra.as_object().unwrap() {
            msg[k] = v.clone();
        }
        let resp = post_json(&format!("{}/sendMessage", self.base), &msg).await;
        assert_eq!(resp.status, 200, "{}", resp.body);
    }

    /// Waits until the bot has sent `n` messages to `chat` (new since the last call).
    pub async fn bot_messages(&self, token: &str, chat: i64, n: usize) -> Vec<Value> {
        let deadline = Instant::now() + WAIT;
        let mut got = Vec::new();
        while got.len() < n {
            assert!(
                Instant::now() < deadline,
                "only {} of {n} bot messages arrived: {got:?}",
                got.len()
            );
            let answer = post_json(
                &format!("{}/getUpdates", self.base),
                &json!({"token": token, "chatId": chat}),
            )
            .await;
            let resp: Value = serde_json::from_str(&answer.body).unwrap();
            got.extend(
                resp["result"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|u| u["message"].clone()),
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        got
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
