//! The whole gateway over Telegram for the media and progress tests: the
//! Telegram adapter against the Bot API fake (`telegram_support`), the
//! production agent factory over the real store, the loopback
//! `FakeProvider` as the model; every recorded chat request checked against
//! the published OpenAI request schema.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_core::LedgerEntry;
use hermes_gateway::app::RuntimeAgentFactory;
use hermes_gateway::config::GatewayConfig;
use hermes_gateway::runner::{GatewayRunner, RunnerDeps};
use hermes_runtime::config::{Environment, Overrides, Settings};
use hermes_runtime::store::{Store, SystemClock};
use hermes_telegram::{MemoryOffsets, RetryPolicy, TelegramAdapter, TelegramConfig};
use hermes_tests::{FakeProvider, Reply, Responder};
use serde_json::{Value, json};

use crate::openai_schema::assert_valid_requests;
use crate::telegram_support::{Fake, TOKEN};

pub const WAIT: Duration = Duration::from_secs(60);
pub const USER: i64 = 7;

/// A real 1×1 PNG.
pub const PNG: &[u8] = &[
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1F, 0x15, 0xC4,
    0x89, 0x00, 0x00, 0x00, 0x0A, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9C, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0D, 0x0A, 0x2D, 0xB4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4E, 0x44, 0xAE,
    0x42, 0x60, 0x82,
];
pub const OGG: &[u8] = b"OggS\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00 a voice note";

pub struct Gateway {
    pub fake: Fake,
    pub provider: FakeProvider,
    pub home: tempfile::TempDir,
    pub work: tempfile::TempDir,
    pub settings: Settings,
    pub runner: GatewayRunner,
    pub next_update: std::sync::atomic::AtomicI64,
}

/// What a test changes in the set-up.
pub struct Setup {
    pub model: &'static str,
    pub config_toml: String,
    pub stream: bool,
    pub toolsets: &'static str,
    pub responder: Responder,
    /// `$HERMES_HOME` is a directory inside the working directory (a CLI
    /// started from `~`).
    pub home_in_workdir: bool,
    /// Telegram user ids allowed besides [`USER`].
    pub more_users: Vec<i64>,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            model: "gpt-4o",
            config_toml: String::new(),
            stream: false,
            toolsets: "todo",
            responder: Arc::new(|_| Reply::text("I read your message.")),
            home_in_workdir: false,
            more_users: Vec::new(),
        }
    }
}

pub fn retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 3,
        base_delay: Duration::from_millis(50),
        max_delay: Duration::from_millis(400),
        max_retry_after: Duration::from_secs(10),
    }
}

pub async fn gateway(setup: Setup) -> Gateway {
    let fake = Fake::start(true).await;
    let provider = FakeProvider::start_with(vec![], None, Some(setup.responder)).unwrap();
    let work = tempfile::tempdir().unwrap();
    let home = if setup.home_in_workdir {
        tempfile::tempdir_in(work.path()).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let config_toml = setup
        .config_toml
        .replace("{provider}", &provider.base_url());
    std::fs::write(home.path().join("config.toml"), config_toml).unwrap();
    let env = Environment::from_pairs([
        ("HERMES_HOME", home.path().display().to_string()),
        ("HERMES_BASE_URL", provider.base_url()),
        ("HERMES_MODEL", setup.model.to_owned()),
        ("HERMES_TOOLSETS", setup.toolsets.to_owned()),
    ]);
    let settings = hermes_runtime::config::load(
        &Overrides {
            workdir: Some(work.path().to_path_buf()),
            ..Overrides::default()
        },
        &env,
    )
    .unwrap();
    let factory = RuntimeAgentFactory::new(&settings, None).unwrap();
    let store = Arc::new(std::sync::Mutex::new(
        Store::open(&settings.state_db()).unwrap(),
    ));
    // As `app::run` does: the tools learn whose session they serve (the
    // memory of its user, `session_search` when offered) from the store.
    factory.offer_session_search(Arc::clone(&store));
    let mut config =
        GatewayConfig::from_settings(&settings, hermes_gateway::platform::platforms()).unwrap();
    config.allow.everywhere.insert(USER.to_string());
    for user in &setup.more_users {
        config.allow.everywhere.insert(user.to_string());
    }
    config.stream_replies = setup.stream;
    let mut tg = TelegramConfig::new(TOKEN);
    tg.api_url = fake.base.clone();
    tg.poll_timeout_s = 2;
    tg.empty_poll_pause = Duration::from_millis(100);
    tg.retry = retry();
    let adapter = TelegramAdapter::new(tg, Arc::new(MemoryOffsets::new())).unwrap();
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![Arc::new(adapter)],
        factory: Arc::new(factory),
        store,
        clock: Arc::new(SystemClock),
        config,
    });
    runner.start().await.unwrap();
    Gateway {
        fake,
        provider,
        home,
        work,
        settings,
        runner,
        next_update: std::sync::atomic::AtomicI64::new(1),
    }
}

impl Gateway {
    /// The user sends `fields` (`text`, `photo`, `voice`, …) as message
    /// `message_id`.
    pub fn send(&self, message_id: i64, fields: Value) {
        let update_id = self
            .next_update
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut message = json!({
            "message_id": message_id, "date": 0,
            "from": {"id": USER, "is_bot": false, "first_name": "Ann"},
            "chat": {"id": USER, "type": "private"},
        });
        for (k, v) in fields.as_object().unwrap() {
            message[k] = v.clone();
        }
        self.fake
            .push_update(json!({"update_id": update_id, "message": message}));
    }

    /// `user` sends `text` in `chat` (a DM when `chat == user`, else a
    /// group).
    pub fn send_as(&self, user: i64, chat: i64, message_id: i64, text: &str) {
        let update_id = self
            .next_update
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let chat_type = if chat == user { "private" } else { "group" };
        self.fake
            .push_update(json!({"update_id": update_id, "message": {
                "message_id": message_id, "date": 0, "text": text,
                "from": {"id": user, "is_bot": false, "first_name": format!("U{user}")},
                "chat": {"id": chat, "type": chat_type},
            }}));
    }

    /// Waits until the bot has sent `n` messages; returns their texts.
    pub async fn replies(&self, n: usize) -> Vec<String> {
        let deadline = Instant::now() + WAIT;
        loop {
            let sent = self.fake.requests("sendMessage");
            if sent.len() >= n {
                return sent
                    .iter()
                    .map(|r| r.body["text"].as_str().unwrap_or("").to_owned())
                    .collect();
            }
            assert!(
                Instant::now() < deadline,
                "only {} of {n} replies: {sent:?}",
                sent.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The user messages of every chat request, last one of each request.
    pub fn last_user_contents(&self) -> Vec<Value> {
        self.provider
            .requests()
            .iter()
            .map(|r| {
                r["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .rev()
                    .find(|m| m["role"] == "user")
                    .unwrap()["content"]
                    .clone()
            })
            .collect()
    }

    /// The stored transcript of the only session.
    pub fn transcript(&self) -> Vec<LedgerEntry> {
        let store = Store::open(&self.settings.state_db()).unwrap();
        let sessions = store.list_sessions(10).unwrap();
        assert_eq!(sessions.len(), 1, "{sessions:?}");
        store.load_transcript(&sessions[0].id).unwrap()
    }

    pub fn assert_clean(&self) {
        assert!(
            self.provider.violations().is_empty(),
            "{:?}",
            self.provider.violations()
        );
        assert_valid_requests(&self.provider.requests());
    }
}

impl Gateway {
    pub fn store_session_id(&self) -> String {
        let store = Store::open(&self.settings.state_db()).unwrap();
        store.list_sessions(1).unwrap()[0].id.clone()
    }
}
