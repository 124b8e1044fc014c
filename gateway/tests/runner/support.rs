//! The harness every runner test uses: a runner over the in-process test
//! adapter, a scripted model, a manual clock and a SQLite store in a temp
//! dir; and small helpers to read what was sent and stored.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hermes_core::Message;
use hermes_gateway::config::GatewayConfig;
use hermes_gateway::event::ChatType;
use hermes_gateway::runner::{GatewayRunner, RunnerDeps};
use hermes_gateway_testing::{
    ManualClock, Pace, ScriptedModel, Sent, TestAdapter, TestAgentFactory,
};
use hermes_runtime::store::Store;

pub(crate) const WAIT: Duration = Duration::from_secs(30);

/// 2024-01-02 05:00 UTC.
pub(crate) const T0: u64 = 19_724 * 86_400_000 + 5 * 3_600_000;

pub(crate) const HOUR: u64 = 3_600_000;

pub(crate) struct Harness {
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) _dir: Option<tempfile::TempDir>,
    pub(crate) adapter: Arc<TestAdapter>,
    pub(crate) model: Arc<ScriptedModel>,
    pub(crate) factory: Arc<TestAgentFactory>,
    pub(crate) store: Arc<Mutex<Store>>,
    pub(crate) clock: Arc<ManualClock>,
    pub(crate) runner: GatewayRunner,
}

pub(crate) fn base_config() -> GatewayConfig {
    let mut cfg = GatewayConfig::default();
    cfg.allow.everywhere = ["alice", "bob", "carol"]
        .into_iter()
        .map(String::from)
        .collect();
    cfg.utc_offset_minutes = Some(0);
    cfg
}

pub(crate) fn harness(pace: Pace, tweak: impl FnOnce(&mut GatewayConfig)) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Store::open(&dir.path().join("state.db"))
        .unwrap()
        .with_clock(clock.clone());
    build(
        Some(dir),
        Arc::new(Mutex::new(store)),
        clock,
        pace,
        tweak,
        &[],
    )
}

pub(crate) fn build(
    dir: Option<tempfile::TempDir>,
    store: Arc<Mutex<Store>>,
    clock: Arc<ManualClock>,
    pace: Pace,
    tweak: impl FnOnce(&mut GatewayConfig),
    extra: &[Arc<TestAdapter>],
) -> Harness {
    let mut config = base_config();
    tweak(&mut config);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let adapter = TestAdapter::new("test");
    let model = ScriptedModel::new(pace);
    let factory = TestAgentFactory::new(model.clone());
    let mut adapters: Vec<Arc<dyn hermes_gateway::adapter::PlatformAdapter>> =
        vec![adapter.clone()];
    adapters.extend(extra.iter().map(|a| a.clone() as _));
    let runner = GatewayRunner::new(RunnerDeps {
        adapters,
        factory: factory.clone(),
        store: store.clone(),
        clock: clock.clone(),
        config,
    });
    rt.block_on(runner.start()).unwrap();
    Harness {
        rt,
        _dir: dir,
        adapter,
        model,
        factory,
        store,
        clock,
        runner,
    }
}

impl Harness {
    pub(crate) fn dm(&self, user: &str, text: &str) -> String {
        self.adapter
            .say(ChatType::Dm, &format!("dm-{user}"), user, text)
    }

    /// Waits until `chat` has received `n` messages; returns their texts.
    pub(crate) fn wait_texts(&self, chat: &str, n: usize) -> Vec<String> {
        let res = self.adapter.wait_until(WAIT, |sent| {
            sent.iter().filter(|s| s.chat_id == chat).count() >= n
        });
        match res {
            Ok(_) => self.adapter.texts_to(chat),
            Err(sent) => panic!("timed out waiting for {n} messages to {chat}; sent: {sent:#?}"),
        }
    }

    pub(crate) fn wait_text(&self, chat: &str, pred: impl Fn(&str) -> bool) -> Vec<String> {
        let res = self.adapter.wait_until(WAIT, |sent: &[Sent]| {
            sent.iter().any(|s| s.chat_id == chat && pred(&s.text))
        });
        match res {
            Ok(_) => self.adapter.texts_to(chat),
            Err(sent) => panic!("timed out waiting for a message to {chat}; sent: {sent:#?}"),
        }
    }

    /// Sends `text` as a DM from `user`, waits for one more message to that
    /// chat and returns it.
    pub(crate) fn ask(&self, user: &str, text: &str) -> String {
        let chat = format!("dm-{user}");
        let before = self.adapter.texts_to(&chat).len();
        self.dm(user, text);
        self.wait_texts(&chat, before + 1).pop().unwrap()
    }

    pub(crate) fn wait_model_waiting(&self, calls: usize) {
        assert!(
            self.model
                .wait_until(WAIT, |c, waiting| c.len() >= calls && waiting >= 1),
            "model never reached call {calls}"
        );
    }

    /// The active transcript of `key` as (role, content) pairs.
    pub(crate) fn transcript(&self, key: &str) -> Vec<(String, String)> {
        let store = self.store.lock().unwrap();
        let Some(s) = store.active_session_for_key(key).unwrap() else {
            return Vec::new();
        };
        store
            .load_transcript(&s.id)
            .unwrap()
            .into_iter()
            .map(|e| {
                (
                    e.message.role().as_str().to_owned(),
                    e.message.content().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    pub(crate) fn shutdown(&self) -> hermes_gateway::runner::ShutdownReport {
        self.rt.block_on(self.runner.shutdown())
    }

    /// A new runner (new process, in effect) on the same store, after this
    /// one stopped; its adapter numbers messages after this one's.
    pub(crate) fn restarted(
        mut self,
        pace: Pace,
        tweak: impl FnOnce(&mut GatewayConfig),
    ) -> Harness {
        let dir = self._dir.take();
        let store = self.store.clone();
        let clock = self.clock.clone();
        drop(self);
        let h = build(dir, store, clock, pace, tweak, &[]);
        h.adapter.set_next_id(1000);
        h
    }

    /// The messages still in the inbox: (text, to be answered).
    pub(crate) fn inbox(&self) -> Vec<(String, bool)> {
        self.store
            .lock()
            .unwrap()
            .kv_scan(hermes_gateway::inbox::INBOX_KV_PREFIX)
            .unwrap()
            .into_iter()
            .map(|(_, v)| {
                let p: hermes_gateway::inbox::Pending = serde_json::from_str(&v).unwrap();
                (p.text, p.answer)
            })
            .collect()
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        // A failed assertion must not leave a gated model call blocking the
        // runtime's shutdown (the failure would become a hang).
        self.model.release(1 << 40);
    }
}

pub(crate) fn dm_key(user: &str) -> String {
    format!("agent:main:test:dm:dm-{user}")
}

pub(crate) fn user_texts(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::User { content, .. } => Some(content.clone()),
            _ => None,
        })
        .collect()
}

pub(crate) fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}
