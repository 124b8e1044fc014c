//! `hermes-gateway-testing`: in-process test support for the gateway and
//! its runner, kept out of the product library (issue 40): an adapter the test drives, a scripted model
//! whose speed the test controls, an agent factory that counts builds, and a
//! clock the test sets.
//!
//! These are real implementations of the gateway's traits, not mocks of the
//! runner: the runner under test does everything it does in production
//! (store, cache, interrupts, worker pool); only the platform and the model
//! are replaced by ones a test can observe and pace. The gateway's tests
//! and the routing bench use them (a dev-dependency).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use hermes_core::{
    Agent, ChatRequest, Clock, Completion, FinishReason, Flow, Message, Model, ModelError,
    StreamSink, ToolRegistry,
};
use hermes_runtime::sync::lock;

use hermes_gateway::adapter::{AdapterError, EventHandler, OutgoingFile, PlatformAdapter};
use hermes_gateway::event::{ChatType, MessageEvent, MessageType, SessionSource};
use hermes_gateway::runner::{AgentFactory, FactoryError};
use hermes_gateway::split::{LengthUnit, split_message};

/// A message the runner sent through a [`TestAdapter`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    /// The chat it went to.
    pub chat_id: String,
    /// The text.
    pub text: String,
    /// The message it replied to.
    pub reply_to: Option<String>,
    /// The thread it was sent into (`send_to_thread`).
    pub thread: Option<String>,
    /// When it was sent (for latency measurements).
    pub at: Instant,
    /// The file, when this was a document (`text` is then its caption).
    pub file: Option<OutgoingFile>,
}

/// A platform adapter living inside the test: events are injected by the
/// test, sent messages are recorded.
pub struct TestAdapter {
    platform: &'static str,
    handler: Mutex<Option<EventHandler>>,
    sent: Mutex<Vec<Sent>>,
    changed: Condvar,
    next_id: AtomicU64,
    disconnected: AtomicBool,
    /// Message length limit (characters); longer texts are split, one
    /// [`Sent`] per piece, as a real platform would show them.
    limit: AtomicUsize,
    /// Whether the platform takes files.
    files: AtomicBool,
    /// Whether the platform refuses connections (its network is down).
    refuse_connect: AtomicBool,
    /// How many of the next sends fail (the platform is down).
    failing_sends: AtomicUsize,
    /// Which bot of the platform this is (one lease per bot).
    bot_id: Mutex<String>,
}

impl std::fmt::Debug for TestAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestAdapter")
            .field("platform", &self.platform)
            .field("sent", &lock(&self.sent).len())
            .finish_non_exhaustive()
    }
}

impl TestAdapter {
    /// An adapter for the platform named `platform`.
    pub fn new(platform: &'static str) -> Arc<Self> {
        Arc::new(TestAdapter {
            platform,
            handler: Mutex::new(None),
            sent: Mutex::new(Vec::new()),
            changed: Condvar::new(),
            next_id: AtomicU64::new(1),
            disconnected: AtomicBool::new(false),
            limit: AtomicUsize::new(4096),
            files: AtomicBool::new(false),
            refuse_connect: AtomicBool::new(false),
            failing_sends: AtomicUsize::new(0),
            bot_id: Mutex::new("default".to_owned()),
        })
    }

    /// Makes this adapter another bot of its platform (two gateways then
    /// each serve one, as with two Telegram bot tokens).
    pub fn set_bot_id(&self, id: &str) {
        *lock(&self.bot_id) = id.to_owned();
    }

    /// Makes the next `n` sends fail with a network error, as when the
    /// platform is down.
    pub fn fail_next_sends(&self, n: usize) {
        self.failing_sends.store(n, Ordering::SeqCst);
    }

    /// Makes [`TestAdapter::say`] number its messages from `n` on (a
    /// platform never reuses message ids; a test that restarts a gateway
    /// on the same store must not either).
    pub fn set_next_id(&self, n: u64) {
        self.next_id.store(n, Ordering::Relaxed);
    }

    /// Sets the message length limit (characters).
    pub fn set_max_message_len(&self, limit: usize) {
        self.limit.store(limit.max(1), Ordering::Relaxed);
    }

    /// Makes the platform take files (or not).
    pub fn set_files(&self, on: bool) {
        self.files.store(on, Ordering::Relaxed);
    }

    /// Makes [`PlatformAdapter::connect`] fail (or succeed again), as when
    /// this host cannot reach the platform.
    pub fn set_refuse_connect(&self, on: bool) {
        self.refuse_connect.store(on, Ordering::Relaxed);
    }

    /// Delivers `event` to the runner's handler, as a platform would.
    /// Returns `false` when no handler is registered (not connected).
    pub fn inject(&self, event: MessageEvent) -> bool {
        let handler = lock(&self.handler).clone();
        match handler {
            Some(h) => {
                h(event);
                true
            }
            None => false,
        }
    }

    /// Builds an event from `user_id` in `chat_id` with a fresh message id,
    /// injects it and returns the id.
    pub fn say(&self, chat_type: ChatType, chat_id: &str, user_id: &str, text: &str) -> String {
        let id = format!("m{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        self.inject(event(self.platform, chat_type, chat_id, user_id, &id, text));
        id
    }

    /// Everything sent so far.
    pub fn sent(&self) -> Vec<Sent> {
        lock(&self.sent).clone()
    }

    /// Removes and returns everything sent so far (long runs such as the
    /// bench keep memory flat this way).
    pub fn take_sent(&self) -> Vec<Sent> {
        std::mem::take(&mut *lock(&self.sent))
    }

    /// Texts sent to `chat_id`, in order.
    pub fn texts_to(&self, chat_id: &str) -> Vec<String> {
        lock(&self.sent)
            .iter()
            .filter(|s| s.chat_id == chat_id)
            .map(|s| s.text.clone())
            .collect()
    }

    /// Number of messages sent so far.
    pub fn sent_count(&self) -> usize {
        lock(&self.sent).len()
    }

    /// Blocks until `done(sent)` holds, up to `timeout`. Returns the sent
    /// messages either way, with `Err` on timeout so a test can show them.
    pub fn wait_until(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&[Sent]) -> bool,
    ) -> Result<Vec<Sent>, Vec<Sent>> {
        let deadline = Instant::now() + timeout;
        let mut sent = lock(&self.sent);
        loop {
            if done(&sent) {
                return Ok(sent.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(sent.clone());
            }
            sent = self
                .changed
                .wait_timeout(sent, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// Whether the runner connected this adapter (and has not disconnected
    /// it since): what [`TestAdapter::say`] reaches.
    pub fn is_connected(&self) -> bool {
        lock(&self.handler).is_some()
    }

    /// Whether the runner disconnected this adapter.
    pub fn is_disconnected(&self) -> bool {
        self.disconnected.load(Ordering::Acquire)
    }
}

#[async_trait]
impl PlatformAdapter for TestAdapter {
    fn platform(&self) -> &'static str {
        self.platform
    }

    fn bot_id(&self) -> String {
        lock(&self.bot_id).clone()
    }

    fn max_message_len(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    fn can_send_files(&self) -> bool {
        self.files.load(Ordering::Relaxed)
    }

    fn can_send_voice(&self) -> bool {
        self.can_send_files()
    }

    fn max_upload_bytes(&self, _kind: hermes_gateway::adapter::FileKind) -> u64 {
        if self.can_send_files() { 1 << 20 } else { 0 }
    }

    async fn connect(&self, handler: EventHandler) -> Result<(), AdapterError> {
        if self.refuse_connect.load(Ordering::Relaxed) {
            return Err(AdapterError::Network {
                platform: self.platform,
                message: "connection refused (the test said so)".into(),
            });
        }
        *lock(&self.handler) = Some(handler);
        self.disconnected.store(false, Ordering::Release);
        Ok(())
    }

    async fn disconnect(&self) {
        *lock(&self.handler) = None;
        self.disconnected.store(true, Ordering::Release);
    }

    async fn send(
        &self,
        chat_id: &str,
        text: &str,
        reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        self.record(chat_id, None, text, reply_to)
    }

    async fn send_to_thread(
        &self,
        chat_id: &str,
        thread: &str,
        text: &str,
    ) -> Result<(), AdapterError> {
        self.record(chat_id, Some(thread), text, None)
    }

    async fn send_file(
        &self,
        chat_id: &str,
        file: &OutgoingFile,
        reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        if !self.can_send_files() {
            return Err(AdapterError::Unsupported {
                platform: self.platform,
                what: "sending files",
            });
        }
        lock(&self.sent).push(Sent {
            chat_id: chat_id.to_owned(),
            text: file.caption.clone(),
            reply_to: reply_to.map(str::to_owned),
            thread: None,
            at: Instant::now(),
            file: Some(file.clone()),
        });
        self.changed.notify_all();
        Ok(())
    }
}

impl TestAdapter {
    /// A text sent (or refused, while sends fail).
    fn record(
        &self,
        chat_id: &str,
        thread: Option<&str>,
        text: &str,
        reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        let failing = self
            .failing_sends
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if failing.is_ok() {
            return Err(AdapterError::Network {
                platform: self.platform,
                message: "the platform is down (test)".into(),
            });
        }
        let pieces = split_message(text, self.max_message_len(), LengthUnit::Chars);
        let mut sent = lock(&self.sent);
        for (i, piece) in pieces.into_iter().enumerate() {
            sent.push(Sent {
                chat_id: chat_id.to_owned(),
                text: piece,
                reply_to: reply_to.filter(|_| i == 0).map(str::to_owned),
                thread: thread.map(str::to_owned),
                at: Instant::now(),
                file: None,
            });
        }
        drop(sent);
        self.changed.notify_all();
        Ok(())
    }
}

/// A text event.
pub fn event(
    platform: &str,
    chat_type: ChatType,
    chat_id: &str,
    user_id: &str,
    message_id: &str,
    text: &str,
) -> MessageEvent {
    MessageEvent {
        message_id: message_id.to_owned(),
        text: text.to_owned(),
        source: SessionSource {
            platform: platform.to_owned(),
            chat_id: chat_id.to_owned(),
            chat_type,
            user_id: user_id.to_owned(),
            user_name: None,
            thread_id: None,
        },
        message_type: MessageType::Text,
        media: Vec::new(),
    }
}

/// How fast a [`ScriptedModel`] answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// Answers at once.
    Instant,
    /// Streams a partial answer, then waits until the test calls
    /// [`ScriptedModel::release`] (or the run is interrupted).
    Gated,
}

#[derive(Debug, Default)]
struct ModelState {
    calls: Vec<Vec<Message>>,
    released: u64,
    waiting: usize,
}

/// A model that answers `reply to: {last user text}`. Gated, it first
/// streams `partial reply to: {text}` and then blocks until released; an
/// interrupt ends the wait and returns the partial text, as a streaming
/// provider client does (SPEC L11).
#[derive(Debug)]
pub struct ScriptedModel {
    pace: Pace,
    state: Mutex<ModelState>,
    changed: Condvar,
}

impl ScriptedModel {
    /// A model with the given pace.
    pub fn new(pace: Pace) -> Arc<Self> {
        Arc::new(ScriptedModel {
            pace,
            state: Mutex::new(ModelState::default()),
            changed: Condvar::new(),
        })
    }

    /// Lets `n` waiting (or future) gated calls finish.
    pub fn release(&self, n: u64) {
        lock(&self.state).released += n;
        self.changed.notify_all();
    }

    /// The messages of every call so far (what the model saw).
    pub fn calls(&self) -> Vec<Vec<Message>> {
        lock(&self.state).calls.clone()
    }

    /// Calls made so far.
    pub fn call_count(&self) -> usize {
        lock(&self.state).calls.len()
    }

    /// Calls currently waiting for a release.
    pub fn waiting(&self) -> usize {
        lock(&self.state).waiting
    }

    /// Blocks until `done(calls, waiting)` holds, up to `timeout`.
    pub fn wait_until(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&[Vec<Message>], usize) -> bool,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = lock(&self.state);
        loop {
            if done(&st.calls, st.waiting) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            st = self
                .changed
                .wait_timeout(st, (deadline - now).min(Duration::from_millis(50)))
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }
}

/// The text of the last user message in `messages`.
pub fn last_user_text(messages: &[Message]) -> String {
    messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::User { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

impl Model for ScriptedModel {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let messages: Vec<Message> = request.messages.iter().map(|e| e.message.clone()).collect();
        let user = last_user_text(&messages);
        {
            let mut st = lock(&self.state);
            st.calls.push(messages);
        }
        self.changed.notify_all();
        let done = |text: String, finish: Option<FinishReason>| Completion {
            content: Some(text),
            finish_reason: finish,
            ..Completion::default()
        };
        if self.pace == Pace::Instant {
            return Ok(done(format!("reply to: {user}"), Some(FinishReason::Stop)));
        }
        let partial = format!("partial reply to: {user}");
        if sink.on_text(&partial) == Flow::Stop {
            return Ok(done(partial, None));
        }
        let mut st = lock(&self.state);
        st.waiting += 1;
        self.changed.notify_all();
        let outcome = loop {
            if st.released > 0 {
                st.released -= 1;
                break done(format!("reply to: {user}"), Some(FinishReason::Stop));
            }
            st = self
                .changed
                .wait_timeout(st, Duration::from_millis(5))
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
            // The stream's keep-alive: the chance to notice an interrupt.
            if sink.on_progress() == Flow::Stop {
                break done(partial.clone(), None);
            }
        };
        st.waiting -= 1;
        drop(st);
        self.changed.notify_all();
        Ok(outcome)
    }
}

/// A model that answers `reply to: {last user text}` at once and records
/// nothing but a count: for long runs (the routing bench), where keeping
/// every request would dwarf the gateway's own memory.
#[derive(Debug, Default)]
pub struct EchoModel {
    calls: AtomicU64,
}

impl EchoModel {
    /// A new model.
    pub fn new() -> Arc<Self> {
        Arc::new(EchoModel::default())
    }

    /// Calls made so far.
    pub fn call_count(&self) -> u64 {
        self.calls.load(Ordering::Acquire)
    }
}

impl Model for EchoModel {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        _sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        self.calls.fetch_add(1, Ordering::AcqRel);
        let user = request
            .messages
            .iter()
            .rev()
            .find_map(|e| match &e.message {
                Message::User { content, .. } => Some(content.as_str()),
                _ => None,
            })
            .unwrap_or_default();
        Ok(Completion {
            content: Some(format!("reply to: {user}")),
            finish_reason: Some(FinishReason::Stop),
            ..Completion::default()
        })
    }
}

/// An [`AgentFactory`] over one shared model, counting what it builds.
/// The "model name" only changes the signature (and is recorded), which is
/// what the cache keys on.
pub struct TestAgentFactory {
    model: Arc<dyn Model>,
    builds: AtomicUsize,
    prompts: AtomicUsize,
    built_models: Mutex<Vec<String>>,
    built_prompts: Mutex<Vec<String>>,
    built_efforts: Mutex<Vec<Option<String>>>,
    provider: Mutex<String>,
    cron: std::sync::OnceLock<hermes_gateway::cron::CronOffer>,
    skills_home: Mutex<Option<std::path::PathBuf>>,
    speech: std::sync::OnceLock<Arc<hermes_runtime::media::tts::Speaker>>,
    prices: Mutex<hermes_runtime::pricing::PriceList>,
}

impl std::fmt::Debug for TestAgentFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestAgentFactory")
            .field("builds", &self.builds)
            .finish_non_exhaustive()
    }
}

impl TestAgentFactory {
    /// A factory whose agents all use `model`.
    pub fn new(model: Arc<dyn Model>) -> Arc<Self> {
        Arc::new(TestAgentFactory {
            model,
            builds: AtomicUsize::new(0),
            prompts: AtomicUsize::new(0),
            built_models: Mutex::new(Vec::new()),
            built_prompts: Mutex::new(Vec::new()),
            built_efforts: Mutex::new(Vec::new()),
            provider: Mutex::new("test-provider".into()),
            cron: std::sync::OnceLock::new(),
            skills_home: Mutex::new(None),
            speech: std::sync::OnceLock::new(),
            prices: Mutex::new(hermes_runtime::pricing::PriceList::default()),
        })
    }

    /// The prices `/usage` and the spending caps use (none by default).
    pub fn set_prices(&self, prices: hermes_runtime::pricing::PriceList) {
        *lock(&self.prices) = prices;
    }

    /// Speaks answers with `speaker`, as the production factory does when
    /// `[tts]` is configured.
    pub fn set_speech(&self, speaker: hermes_runtime::media::tts::Speaker) {
        let _ = self.speech.set(Arc::new(speaker));
    }

    /// Offers the `cronjob` tool to chat sessions, as the production
    /// factory does (SPEC Y1).
    pub fn offer_cron(&self, offer: hermes_gateway::cron::CronOffer) {
        let _ = self.cron.set(offer);
    }

    /// Agents built so far.
    pub fn builds(&self) -> usize {
        self.builds.load(Ordering::Acquire)
    }

    /// System prompts assembled so far.
    pub fn prompts(&self) -> usize {
        self.prompts.load(Ordering::Acquire)
    }

    /// The model name of every build, in order.
    pub fn built_models(&self) -> Vec<String> {
        lock(&self.built_models).clone()
    }

    /// The system prompt of every build, in order (with any personality).
    pub fn built_prompts(&self) -> Vec<String> {
        lock(&self.built_prompts).clone()
    }

    /// The reasoning effort of every build, in order (`/reasoning`).
    pub fn built_efforts(&self) -> Vec<Option<String>> {
        lock(&self.built_efforts).clone()
    }

    /// Lets `/skills` list the skills of `$HERMES_HOME` `home` (and
    /// `/personality` its personalities).
    pub fn set_skills_home(&self, home: &std::path::Path) {
        *lock(&self.skills_home) = Some(home.to_path_buf());
    }

    /// Changes the provider part of the signature (as a config reload that
    /// switched provider would).
    pub fn set_provider(&self, provider: &str) {
        *lock(&self.provider) = provider.to_owned();
    }
}

impl AgentFactory for TestAgentFactory {
    fn default_model(&self) -> String {
        "test-model".into()
    }

    fn prices(
        &self,
        _store: &Mutex<hermes_runtime::store::Store>,
        _now_ms: u64,
    ) -> hermes_runtime::pricing::PriceList {
        lock(&self.prices).clone()
    }

    fn speech(&self) -> Option<Arc<hermes_runtime::media::tts::Speaker>> {
        self.speech.get().cloned()
    }

    fn skills(&self) -> Vec<hermes_runtime::skills::SkillSummary> {
        lock(&self.skills_home)
            .as_ref()
            .map(|home| hermes_runtime::skills::SkillsHome::new(home).list())
            .unwrap_or_default()
    }

    fn personalities(&self) -> hermes_gateway::personality::Personalities {
        lock(&self.skills_home)
            .as_ref()
            .map(|home| hermes_gateway::personality::Personalities::in_home(home))
            .unwrap_or_default()
    }

    fn build_with(
        &self,
        session_id: &str,
        model: &str,
        system_prompt: &str,
        options: &hermes_gateway::runner::BuildOptions,
    ) -> Result<Agent, FactoryError> {
        let agent = self.build(session_id, model, system_prompt)?;
        lock(&self.built_prompts).push(system_prompt.to_owned());
        lock(&self.built_efforts).push(options.reasoning_effort.clone());
        Ok(agent)
    }

    fn signature(&self, model: &str) -> String {
        format!(
            "{model}|{}|http://127.0.0.1/v1|key:none|tools:none",
            lock(&self.provider)
        )
    }

    fn system_prompt(&self, source: &SessionSource) -> Result<String, FactoryError> {
        self.prompts.fetch_add(1, Ordering::AcqRel);
        Ok(format!("You are Hermes, talking on {}.", source.platform))
    }

    /// Models whose name starts with `broken` fail to build, as a
    /// misconfigured provider would.
    fn build(
        &self,
        session_id: &str,
        model: &str,
        system_prompt: &str,
    ) -> Result<Agent, FactoryError> {
        if model.starts_with("broken") {
            return Err(FactoryError(format!("model '{model}' is not available")));
        }
        self.builds.fetch_add(1, Ordering::AcqRel);
        lock(&self.built_models).push(model.to_owned());
        let mut tools = ToolRegistry::new();
        if let Some(offer) = self.cron.get() {
            offer.register(&mut tools, session_id);
        }
        Ok(Agent::new(
            Arc::clone(&self.model),
            Arc::new(tools),
            system_prompt,
        ))
    }
}

/// A clock the test sets. Share one between the runner and the store so
/// `updated_at_ms` and "now" agree.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock showing `ms` since the epoch.
    pub fn new(ms: u64) -> Arc<Self> {
        Arc::new(ManualClock(AtomicU64::new(ms)))
    }

    /// Sets the time.
    pub fn set(&self, ms: u64) {
        self.0.store(ms, Ordering::Release);
    }

    /// Moves the time forward.
    pub fn advance(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.0.fetch_add(ms, Ordering::AcqRel);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// A handler that forwards every event to a channel, for tests that drive
/// an adapter directly through [`PlatformAdapter::connect`].
pub fn collector() -> (
    EventHandler,
    tokio::sync::mpsc::UnboundedReceiver<MessageEvent>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let handler: EventHandler = Arc::new(move |ev| {
        let _ = tx.send(ev);
    });
    (handler, rx)
}

/// The next event from a [`collector`], or `None` if none arrives within
/// `within` (or the handler was dropped).
pub async fn recv_within(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<MessageEvent>,
    within: Duration,
) -> Option<MessageEvent> {
    tokio::time::timeout(within, rx.recv()).await.ok().flatten()
}
