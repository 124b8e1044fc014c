//! The `GatewayRunner`: event → session key → agent → reply (SPEC G3–G7,
//! G10–G12, E1, E3, E4).
//!
//! # How a message travels
//! 1. An adapter calls the one handler ([`GatewayRunner::handle_event`]).
//!    It deduplicates on (platform, chat, message id) (G7), checks the
//!    allow-list (E1), recognises commands (G12), makes a message durable in
//!    the inbox ([`crate::inbox`]; the only IO it does, a short SQLite write,
//!    so that a message the adapter acknowledges survives a kill, E3) and
//!    puts it into its session's queue.
//! 2. Each session with work has exactly one *worker* task, which takes the
//!    queue in order — so one run per session key (G6) and commands such as
//!    `/new` or `/model` apply exactly between the messages around them.
//! 3. A turn runs on tokio's blocking pool (the agent loop is synchronous),
//!    at most `max_workers` at once across all sessions. It resolves the
//!    session (expiry G10, crash recovery G11), loads the transcript (G5),
//!    **moves the user message from the inbox into the transcript before
//!    calling the model** (E3), takes an agent from the cache (G4), runs
//!    while appending each step as it happens (an assistant message with
//!    tool calls together with its results), and the worker sends the reply
//!    through the adapter.
//!
//! # Busy sessions (G6)
//! A message for a session whose turn is running is buffered. In
//! `interrupt` mode only the newest buffered message is kept, the running
//! turn is interrupted (L11), its partial reply is sent, and the buffered
//! message then runs on history freshly loaded from the store. A replaced
//! message was accepted, so it is not lost: it is transcribed just before
//! the message that replaced it (two consecutive user messages) and is not
//! answered on its own. The user hears
//! "interrupting…" at most once per 30 s. In `queue` mode messages wait in
//! order instead. Different sessions run in parallel.
//!
//! # Commands while a turn runs
//! `/status`, `/stop` and `/help` answer at once. `/new` interrupts the
//! running turn, drops waiting messages, and resets once the turn has saved
//! its output (to the old session). `/model` and `/undo` take their place in
//! the session's queue: they apply after the running turn, so `/undo` then
//! removes that turn.
//!
//! # Failure
//! A failing store, model or agent build is reported to that user and
//! logged; the runner goes on serving everyone else (E4). A panic inside a
//! turn is contained by the blocking pool and reported the same way.
//!
//! **Invariant:** nothing here branches on a platform name; adapters are
//! looked up by the name they report.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use hermes_core::{
    Agent, AgentEvent, AgentObserver, Clock, InterruptFlag, IterationBudget, LedgerEntry, Message,
    StopReason,
};
use hermes_runtime::persist::TurnWriter;
use hermes_runtime::store::{NewSession, SessionRecord, SessionStatus, Store, StoreError};
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::{Notify, Semaphore};

use crate::adapter::{EventHandler, PlatformAdapter};
use crate::cache::{AgentCache, CacheStats};
use crate::command::{Command, HELP, parse_command};
use crate::config::{BusyMode, GatewayConfig};
use crate::dedup::Dedup;
use crate::event::{ChatType, MessageEvent, SessionSource};
use crate::inbox::{Inbox, InboxError, Pending, already_transcribed};
use crate::session::session_key;

/// How long crash recovery looks back (SPEC G11).
pub const CRASH_WINDOW: Duration = Duration::from_secs(120);
/// The "interrupting" notice is sent at most this often per session (G6).
pub const NOTICE_INTERVAL: Duration = Duration::from_secs(30);
/// Graceful stop finishes within this (SPEC G3 / issue 5).
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// An unknown user is told "no" at most this often.
const REFUSAL_INTERVAL: Duration = Duration::from_secs(600);

/// The reply to a user who is not on the allow-list.
pub fn refusal_text(user_id: &str) -> String {
    format!(
        "Sorry, you are not allowed to use this bot. Ask its operator to add your user id ({user_id}) to the allow-list."
    )
}
/// Sent once when a session had to be suspended by crash recovery.
pub const CRASH_NOTICE: &str = "(The gateway restarted while your last message was being handled; starting a new conversation.)";
/// Sent when a message arrives for a busy session in interrupt mode.
pub const INTERRUPT_NOTICE: &str = "⏳ Interrupting the current reply to answer your new message…";
/// Sent when a message arrives for a busy session in queue mode.
pub const QUEUE_NOTICE: &str = "⏳ Your message is queued; I'll answer it after the current reply.";

/// Why an agent could not be built for a session. Reported to the user and
/// logged; the user's message is already stored.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct FactoryError(pub String);

/// Builds agents for sessions. The real one (`hermes gateway run`) uses the
/// provider client, the built-in tools and the assembled system prompt;
/// tests use a scripted model.
pub trait AgentFactory: Send + Sync {
    /// The model a new session starts with.
    fn default_model(&self) -> String;

    /// The config signature of an agent on `model` (SPEC G4): everything that
    /// makes two agents differ — model, provider, base URL, a hash of the API
    /// key, toolsets. Never the key itself.
    fn signature(&self, model: &str) -> String;

    /// Assembles the system prompt of a new session (once per session; it is
    /// stored and reused byte-for-byte afterwards, SPEC L6).
    fn system_prompt(&self, source: &SessionSource) -> Result<String, FactoryError>;

    /// Builds an agent for the stored session `session_id`. It must hold no
    /// transcript; per-session tool state (the todo list) is keyed by the
    /// session id outside the agent, so dropping the agent loses nothing.
    fn build(
        &self,
        session_id: &str,
        model: &str,
        system_prompt: &str,
    ) -> Result<Agent, FactoryError>;
}

/// Local-time offset from UTC, in seconds, at a given instant (ms since the
/// epoch). Injectable so tests do not depend on the machine's time zone.
pub type LocalOffset = Arc<dyn Fn(u64) -> i64 + Send + Sync>;

/// Why the runner could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Crash recovery could not read or update the store.
    #[error("session store: {0}")]
    Store(#[from] StoreError),
    /// No adapter connected.
    #[error("no platform adapter could connect: {0}")]
    NoAdapter(String),
    /// `start` was called twice.
    #[error("the gateway runner is already started")]
    AlreadyStarted,
    /// Messages accepted by a previous process could not be read back.
    #[error("gateway inbox: {0}")]
    Inbox(#[from] InboxError),
}

/// What a graceful stop achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Every running turn finished and was persisted in time.
    pub all_turns_finished: bool,
    /// The store recorded a clean shutdown (so the next start suspends nothing).
    pub marked_clean: bool,
}

/// What the runner needs.
pub struct RunnerDeps {
    /// Every enabled adapter.
    pub adapters: Vec<Arc<dyn PlatformAdapter>>,
    /// Builds agents.
    pub factory: Arc<dyn AgentFactory>,
    /// The session store, shared (a `Store` is `Send` but not `Sync`).
    pub store: Arc<Mutex<Store>>,
    /// "Now", for expiry, dedup and the cache. Give the store the same clock.
    pub clock: Arc<dyn Clock>,
    /// The validated gateway settings.
    pub config: GatewayConfig,
}

impl std::fmt::Debug for RunnerDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerDeps")
            .field(
                "adapters",
                &self
                    .adapters
                    .iter()
                    .map(|a| a.platform())
                    .collect::<Vec<_>>(),
            )
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The gateway: routes events from every adapter to per-session agent turns.
#[derive(Clone)]
pub struct GatewayRunner {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for GatewayRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayRunner").finish_non_exhaustive()
    }
}

struct Inner {
    adapters: HashMap<&'static str, Arc<dyn PlatformAdapter>>,
    factory: Arc<dyn AgentFactory>,
    store: Arc<Mutex<Store>>,
    clock: Arc<dyn Clock>,
    config: GatewayConfig,
    local_offset: LocalOffset,
    state: Mutex<State>,
    workers: Arc<Semaphore>,
    handle: OnceLock<Handle>,
    /// Shutdown began: waiting messages are stored, not run.
    stopping: AtomicBool,
    /// Shutdown drained the workers: events are no longer accepted.
    closed: AtomicBool,
    /// Woken whenever a session worker exits (for graceful stop).
    idle: Notify,
    /// Accepted messages not yet in a transcript (E3; see [`crate::inbox`]).
    /// Lock order: store, then inbox, then state.
    inbox: Mutex<Inbox>,
    /// Arrival numbers of accepted messages (and the position of commands
    /// among them).
    next_pending: AtomicU64,
}

/// Routing state. Held only for short, non-blocking sections, and never
/// while taking the store or inbox lock (lock order: store, inbox, state).
struct State {
    dedup: Dedup,
    sessions: HashMap<String, Slot>,
    cache: AgentCache,
    /// Session keys suspended by crash recovery that still owe the user a notice.
    suspended_keys: HashSet<String>,
    /// When each busy session last got the interrupting/queued notice.
    last_notice: HashMap<String, u64>,
    /// When each unknown user was last refused.
    last_refusal: HashMap<(String, String), u64>,
    active_workers: usize,
}

/// A session with work: its queue and its running turn.
#[derive(Default)]
struct Slot {
    queue: VecDeque<Work>,
    /// The running turn, if a turn (not a command) is in progress.
    turn: Option<Arc<TurnCtl>>,
}

enum Work {
    /// An accepted message and its inbox id.
    Message(MessageEvent, u64),
    /// A command, and the inbox id the next accepted message would get (so
    /// `/new` knows which waiting messages came before it).
    Command(Command, MessageEvent, u64),
}

/// Interrupt control of one turn.
///
/// The agent clears its interrupt flag when a run starts (so an old
/// interrupt cannot stop a new run); an interrupt that arrives between
/// dispatch and that clear would be lost. So the request is also latched
/// here, and the run's observer re-applies it on every event — the first
/// being the user message, right after the clear.
#[derive(Default)]
struct TurnCtl {
    requested: AtomicBool,
    flag: Mutex<Option<InterruptFlag>>,
}

impl TurnCtl {
    fn interrupt(&self) {
        self.requested.store(true, Ordering::SeqCst);
        if let Some(flag) = lock(&self.flag).as_ref() {
            flag.interrupt();
        }
    }

    fn attach(&self, flag: InterruptFlag) {
        *lock(&self.flag) = Some(flag);
    }

    fn is_requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }
}

/// The observer of one run: re-applies a latched interrupt (see
/// [`TurnCtl`]) and persists the run as it goes.
struct TurnObserver<'a> {
    ctl: &'a TurnCtl,
    flag: &'a InterruptFlag,
    persist: TurnWriter<'a>,
}

impl AgentObserver for TurnObserver<'_> {
    fn on_event(&mut self, event: &AgentEvent<'_>) {
        if self.ctl.is_requested() && !self.flag.is_set() {
            self.flag.interrupt();
        }
        if let AgentEvent::Appended(entry) = event
            && !self.persist.append(entry)
        {
            // The transcript can no longer follow the run: stop it rather
            // than do work (tool side effects) that would go unrecorded.
            self.flag.interrupt();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic inside a turn must not take the whole gateway down (E4): the
    // state it guarded is still structurally valid, so carry on.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What one turn produced for the user.
struct TurnReply {
    texts: Vec<String>,
}

impl GatewayRunner {
    /// A runner over `deps`. Nothing happens until [`GatewayRunner::start`].
    pub fn new(deps: RunnerDeps) -> Self {
        Self::with_local_offset(deps, Arc::new(system_utc_offset))
    }

    /// Like [`GatewayRunner::new`] with an explicit local-time offset (tests,
    /// or `utc_offset_minutes` in the config, which takes precedence).
    pub fn with_local_offset(deps: RunnerDeps, local_offset: LocalOffset) -> Self {
        let RunnerDeps {
            adapters,
            factory,
            store,
            clock,
            config,
        } = deps;
        let local_offset: LocalOffset = match config.utc_offset_minutes {
            Some(min) => Arc::new(move |_| i64::from(min) * 60),
            None => local_offset,
        };
        let state = State {
            dedup: Dedup::new(duration_ms(config.dedup_window), config.dedup_capacity),
            sessions: HashMap::new(),
            cache: AgentCache::new(
                config.agent_cache_size,
                duration_ms(config.agent_cache_idle),
            ),
            suspended_keys: HashSet::new(),
            last_notice: HashMap::new(),
            last_refusal: HashMap::new(),
            active_workers: 0,
        };
        let adapters = adapters.into_iter().map(|a| (a.platform(), a)).collect();
        GatewayRunner {
            inner: Arc::new(Inner {
                adapters,
                factory,
                store,
                clock,
                workers: Arc::new(Semaphore::new(config.max_workers.max(1))),
                config,
                local_offset,
                state: Mutex::new(state),
                handle: OnceLock::new(),
                stopping: AtomicBool::new(false),
                closed: AtomicBool::new(false),
                idle: Notify::new(),
                inbox: Mutex::new(Inbox::volatile()),
                next_pending: AtomicU64::new(1),
            }),
        }
    }

    /// Starts serving: crash recovery (G11), then connects every adapter with
    /// the one handler (G3). Must be called inside the tokio runtime the
    /// runner should use. An adapter that fails to connect is logged and
    /// skipped (E4); if none connects, start fails.
    pub async fn start(&self) -> Result<(), StartError> {
        if self.inner.handle.set(Handle::current()).is_err() {
            return Err(StartError::AlreadyStarted);
        }
        let inner = Arc::clone(&self.inner);
        let suspended = tokio::task::spawn_blocking(move || {
            // Messages a previous process accepted but never transcribed go
            // into their transcripts first (E3), so the sessions they touch
            // take part in crash recovery like any other.
            inner.recover_inbox()?;
            Ok::<_, StartError>(inner.recover_crashed()?)
        })
        .await
        .map_err(|e| StartError::NoAdapter(format!("crash recovery panicked: {e}")))??;
        if !suspended.is_empty() {
            tracing::warn!(
                count = suspended.len(),
                "suspended sessions left running by an unclean stop"
            );
        }
        lock(&self.inner.state).suspended_keys.extend(suspended);

        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let handler: EventHandler = Arc::new(move |event| {
            if let Some(inner) = weak.upgrade() {
                inner.handle_event(event);
            }
        });
        let mut connected = 0;
        let mut failures = Vec::new();
        for adapter in self.inner.adapters.values() {
            match adapter.connect(Arc::clone(&handler)).await {
                Ok(()) => {
                    tracing::info!(platform = adapter.platform(), "adapter connected");
                    connected += 1;
                }
                Err(e) => {
                    tracing::error!(platform = adapter.platform(), error = %e, "adapter failed to connect");
                    failures.push(e.to_string());
                }
            }
        }
        if connected == 0 {
            return Err(StartError::NoAdapter(if failures.is_empty() {
                "no adapter is enabled".into()
            } else {
                failures.join("; ")
            }));
        }
        Ok(())
    }

    /// The handler adapters deliver to (also registered by `start`). Returns
    /// at once; the work happens on the runner's tasks.
    pub fn handle_event(&self, event: MessageEvent) {
        self.inner.handle_event(event);
    }

    /// Graceful stop, within [`SHUTDOWN_TIMEOUT`]: start no new turns,
    /// interrupt running ones (their partial output is persisted and sent),
    /// store messages still waiting — or arriving until the workers have
    /// drained — without running them (E3), then refuse further events,
    /// disconnect every adapter, and record a clean shutdown if every turn
    /// finished.
    pub async fn shutdown(&self) -> ShutdownReport {
        let started = Instant::now();
        let inner = &self.inner;
        inner.stopping.store(true, Ordering::SeqCst);
        {
            let state = lock(&inner.state);
            for slot in state.sessions.values() {
                if let Some(turn) = &slot.turn {
                    turn.interrupt();
                }
            }
        }
        // Leave a second of the budget for disconnecting.
        let deadline = started + SHUTDOWN_TIMEOUT - Duration::from_secs(1);
        let all_turns_finished = loop {
            let notified = inner.idle.notified();
            if lock(&inner.state).active_workers == 0 {
                break true;
            }
            let now = Instant::now();
            if now >= deadline
                || tokio::time::timeout(deadline - now, notified)
                    .await
                    .is_err()
            {
                break lock(&inner.state).active_workers == 0;
            }
        };
        inner.closed.store(true, Ordering::SeqCst);
        for adapter in inner.adapters.values() {
            let left = (started + SHUTDOWN_TIMEOUT)
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(100));
            if tokio::time::timeout(left, adapter.disconnect())
                .await
                .is_err()
            {
                tracing::warn!(
                    platform = adapter.platform(),
                    "adapter did not disconnect in time"
                );
            }
        }
        let marked_clean = if all_turns_finished {
            let inner = Arc::clone(inner);
            let result = tokio::task::spawn_blocking(move || {
                // Accepted messages that never got a turn (dropped by /stop,
                // replaced and not followed by another) are transcribed now:
                // a clean stop leaves the inbox empty.
                inner.flush_all_pending();
                inner.store().mark_clean_shutdown()
            })
            .await;
            match result {
                Ok(Ok(())) => true,
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "could not record the clean shutdown");
                    false
                }
                Err(e) => {
                    tracing::error!(error = %e, "recording the clean shutdown panicked");
                    false
                }
            }
        } else {
            tracing::warn!(
                "turns still running at shutdown; next start will suspend their sessions"
            );
            false
        };
        ShutdownReport {
            all_turns_finished,
            marked_clean,
        }
    }

    /// Agent-cache counters.
    pub fn cache_stats(&self) -> CacheStats {
        lock(&self.inner.state).cache.stats()
    }

    /// Whether an agent is cached for `session_key`.
    pub fn is_cached(&self, session_key: &str) -> bool {
        lock(&self.inner.state).cache.contains(session_key)
    }

    /// Agents in the cache.
    pub fn cached_agents(&self) -> usize {
        lock(&self.inner.state).cache.len()
    }

    /// Sessions with a running turn or waiting messages.
    pub fn busy_sessions(&self) -> usize {
        lock(&self.inner.state).sessions.len()
    }

    /// The session key a source maps to under this runner's settings.
    pub fn key_for(&self, source: &SessionSource) -> String {
        session_key(source, self.inner.config.group_sessions_per_user)
    }
}

impl Inner {
    fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        lock(&self.store)
    }

    fn spawn<F>(&self, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        match self.handle.get() {
            Some(h) => {
                h.spawn(fut);
            }
            None => tracing::error!("event delivered before the runner started; dropped"),
        }
    }

    /// Suspends sessions left mid-run by a crash; returns their keys.
    fn recover_crashed(&self) -> Result<Vec<String>, StoreError> {
        let mut store = self.store();
        let ids = store.suspend_recent_unclean(duration_ms(CRASH_WINDOW))?;
        let mut keys = Vec::new();
        for id in ids {
            if let Some(key) = store.session(&id)?.and_then(|s| s.session_key) {
                keys.push(key);
            }
        }
        Ok(keys)
    }

    /// Sends `text` in the background (notices, refusals, command replies).
    fn reply_later(self: &Arc<Self>, event: &MessageEvent, text: String) {
        let inner = Arc::clone(self);
        let chat = event.source.chat_id.clone();
        let platform = event.source.platform.clone();
        let reply_to = event.message_id.clone();
        self.spawn(async move {
            inner.send(&platform, &chat, &text, Some(&reply_to)).await;
        });
    }

    async fn send(&self, platform: &str, chat_id: &str, text: &str, reply_to: Option<&str>) {
        if text.is_empty() {
            return;
        }
        let Some(adapter) = self.adapters.get(platform) else {
            tracing::error!(platform, "no adapter for platform; reply dropped");
            return;
        };
        let reply_to = reply_to.filter(|r| !r.is_empty());
        if let Err(e) = adapter.send(chat_id, text, reply_to).await {
            tracing::error!(platform, chat_id, error = %e, "sending a reply failed");
        }
    }

    fn handle_event(self: &Arc<Self>, event: MessageEvent) {
        if self.closed.load(Ordering::SeqCst) {
            tracing::info!(platform = %event.source.platform, "gateway stopped; event not accepted");
            return;
        }
        let now = self.now();
        let source = &event.source;
        let mut state = lock(&self.state);
        if !state
            .dedup
            .first_sighting(&source.platform, &source.chat_id, &event.message_id, now)
        {
            tracing::debug!(platform = %source.platform, id = %event.message_id, "duplicate dropped");
            return;
        }
        if !self.config.allow.allows(&source.platform, &source.user_id) {
            tracing::warn!(platform = %source.platform, user = %source.user_id, "message from a user not on the allow-list");
            let who = (source.platform.clone(), source.user_id.clone());
            let recently = state
                .last_refusal
                .get(&who)
                .is_some_and(|t| now.saturating_sub(*t) < duration_ms(REFUSAL_INTERVAL));
            if !recently {
                if state.last_refusal.len() > 10_000 {
                    state.last_refusal.clear();
                }
                state.last_refusal.insert(who, now);
                drop(state);
                self.reply_later(&event, refusal_text(&source.user_id));
            }
            return;
        }
        let key = session_key(source, self.config.group_sessions_per_user);
        let position = self.next_pending.load(Ordering::SeqCst);
        match parse_command(&event.text) {
            None => {
                drop(state);
                self.accept_message(key, event, now);
            }
            Some(Command::Help) => {
                drop(state);
                self.reply_later(&event, HELP.to_owned());
            }
            Some(Command::Unknown(word)) => {
                drop(state);
                self.reply_later(
                    &event,
                    format!("Unknown command /{word}. Send /help for the list."),
                );
            }
            Some(Command::Stop) => {
                let text = match state.sessions.get_mut(&key) {
                    Some(slot) => {
                        let dropped = drop_queued_messages(slot);
                        match &slot.turn {
                            Some(turn) => {
                                turn.interrupt();
                                "Stopping the current reply.".to_owned()
                            }
                            None if dropped > 0 => "Dropped the waiting messages.".to_owned(),
                            None => "Nothing is running.".to_owned(),
                        }
                    }
                    None => "Nothing is running.".to_owned(),
                };
                drop(state);
                self.reply_later(&event, text);
            }
            Some(Command::Status) => {
                let (running, waiting) = state.sessions.get(&key).map_or((false, 0), |s| {
                    (
                        s.turn.is_some(),
                        s.queue
                            .iter()
                            .filter(|w| matches!(w, Work::Message(..)))
                            .count(),
                    )
                });
                let cached = state.cache.contains(&key);
                drop(state);
                self.status_later(event, key, running, waiting, cached);
            }
            Some(Command::New) => {
                // The user abandons the conversation: stop what runs for it
                // and what waits, then reset in order.
                if let Some(slot) = state.sessions.get_mut(&key) {
                    drop_queued_messages(slot);
                    if let Some(turn) = &slot.turn {
                        turn.interrupt();
                    }
                }
                self.push_work(state, key, Work::Command(Command::New, event, position));
            }
            Some(cmd @ (Command::Model(_) | Command::Undo)) => {
                self.push_work(state, key, Work::Command(cmd, event, position));
            }
        }
    }

    /// Makes a message durable (E3, [`crate::inbox`]) and then queues it,
    /// before the handler returns.
    ///
    /// This blocks briefly on SQLite. Adapters call the handler from their
    /// tokio tasks, so on a multi-thread runtime the write runs under
    /// [`tokio::task::block_in_place`]: the worker's other tasks move to
    /// another thread meanwhile instead of stalling. Elsewhere (a plain
    /// thread, a blocking-pool thread, a current-thread runtime, where
    /// `block_in_place` is not allowed) it simply runs.
    fn accept_message(self: &Arc<Self>, key: String, event: MessageEvent, now: u64) {
        let accept = || {
            let mut inbox = lock(&self.inbox);
            // Taken under the inbox lock, so inbox order is arrival order.
            let id = self.next_pending.fetch_add(1, Ordering::SeqCst);
            let source = &event.source;
            let pending = Pending {
                id,
                key: key.clone(),
                platform: source.platform.clone(),
                chat_id: source.chat_id.clone(),
                dm: source.chat_type == ChatType::Dm,
                user_id: source.user_id.clone(),
                text: event.text.clone(),
                at_ms: now,
            };
            if let Err(e) = inbox.push(pending) {
                // Still held in memory and transcribed when its turn comes;
                // only a crash before then would lose it.
                tracing::error!(key, error = %e, "could not store an accepted message durably");
            }
            let state = lock(&self.state);
            if !self.enqueue_message(state, key, event, id, now)
                && let Err(e) = inbox.remove(&[id])
            {
                tracing::error!(error = %e, "could not drop a refused message from the inbox");
            }
        };
        let multi_thread =
            Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
        if multi_thread {
            tokio::task::block_in_place(accept);
        } else {
            accept();
        }
    }

    /// Queues an accepted message; `false` when it was refused (queue full).
    fn enqueue_message(
        self: &Arc<Self>,
        mut state: MutexGuard<'_, State>,
        key: String,
        event: MessageEvent,
        id: u64,
        now: u64,
    ) -> bool {
        // While stopping, nothing is replaced or refused: every accepted
        // message is stored (E3) by the worker, in order, and none runs, so
        // the queue bound (which limits waiting *turns*) does not apply.
        let stopping = self.stopping.load(Ordering::SeqCst);
        let busy_mode = if stopping {
            BusyMode::Queue
        } else {
            self.config.busy_mode
        };
        let max_queued = self.config.max_queued;
        let Some(slot) = state.sessions.get_mut(&key) else {
            self.push_work(state, key, Work::Message(event, id));
            return true;
        };
        let notice = match busy_mode {
            BusyMode::Interrupt => {
                // One buffered slot: a newer message replaces the waiting one.
                // The replaced one stays in the inbox: it was accepted, and
                // the next turn transcribes it ahead of this one.
                drop_queued_messages(slot);
                slot.queue.push_back(Work::Message(event.clone(), id));
                match &slot.turn {
                    Some(turn) => {
                        turn.interrupt();
                        Some(INTERRUPT_NOTICE)
                    }
                    None => None,
                }
            }
            BusyMode::Queue => {
                let waiting = slot
                    .queue
                    .iter()
                    .filter(|w| matches!(w, Work::Message(..)))
                    .count();
                if waiting >= max_queued && !stopping {
                    drop(state);
                    self.reply_later(
                        &event,
                        format!(
                            "Too many messages are waiting ({waiting}); this one was not queued. Send it again later, or /stop."
                        ),
                    );
                    return false;
                }
                slot.queue.push_back(Work::Message(event.clone(), id));
                slot.turn.is_some().then_some(QUEUE_NOTICE)
            }
        };
        let Some(text) = notice else { return true };
        let last = state.last_notice.get(&key).copied();
        if last.is_some_and(|t| now.saturating_sub(t) < duration_ms(NOTICE_INTERVAL)) {
            return true;
        }
        if state.last_notice.len() > 10_000 {
            let horizon = duration_ms(NOTICE_INTERVAL);
            state
                .last_notice
                .retain(|_, t| now.saturating_sub(*t) < horizon);
        }
        state.last_notice.insert(key, now);
        drop(state);
        self.reply_later(&event, text.to_owned());
        true
    }

    /// Queues work for `key`, starting the session's worker if it has none.
    ///
    /// A slot exists exactly while its worker runs: the worker removes it,
    /// under the state lock, when it finds the queue empty.
    fn push_work(self: &Arc<Self>, mut state: MutexGuard<'_, State>, key: String, work: Work) {
        let start_worker = !state.sessions.contains_key(&key);
        let slot = state.sessions.entry(key.clone()).or_default();
        slot.queue.push_back(work);
        if start_worker {
            state.active_workers += 1;
            drop(state);
            let inner = Arc::clone(self);
            self.spawn(async move { inner.worker(key).await });
        }
    }

    /// The one worker of a session: drains its queue in order, then removes
    /// the slot (so idle sessions cost no memory here).
    async fn worker(self: Arc<Self>, key: String) {
        loop {
            let next = {
                let mut state = lock(&self.state);
                let popped = state.sessions.get_mut(&key).and_then(|slot| {
                    let work = slot.queue.pop_front()?;
                    // The turn is registered in the same critical section
                    // that takes the message, so a message arriving right
                    // after always finds it and can interrupt it.
                    if matches!(work, Work::Message(..)) {
                        slot.turn = Some(Arc::new(TurnCtl::default()));
                    }
                    Some((work, slot.turn.clone()))
                });
                if popped.is_none() {
                    state.sessions.remove(&key);
                    state.active_workers = state.active_workers.saturating_sub(1);
                    drop(state);
                    self.idle.notify_waiters();
                    return;
                }
                popped
            };
            match next {
                Some((Work::Message(event, id), Some(ctl))) => {
                    self.process_message(&key, event, id, ctl).await
                }
                Some((Work::Command(cmd, event, position), _)) => {
                    self.process_command(&key, cmd, event, position).await
                }
                Some((Work::Message(..), None)) | None => {}
            }
        }
    }

    async fn process_message(
        self: &Arc<Self>,
        key: &str,
        event: MessageEvent,
        id: u64,
        ctl: Arc<TurnCtl>,
    ) {
        if self.stopping.load(Ordering::SeqCst) {
            // Accepted but not run: keep it (E3) so nothing acknowledged is lost.
            let inner = Arc::clone(self);
            let k = key.to_owned();
            match tokio::task::spawn_blocking(move || inner.store_only(&k, &event, id)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::error!(key, error = %e, "could not store a message received while stopping")
                }
                Err(e) => tracing::error!(key, error = %e, "storing a waiting message panicked"),
            }
            if let Some(slot) = lock(&self.state).sessions.get_mut(key) {
                slot.turn = None;
            }
            return;
        }
        let permit = Arc::clone(&self.workers).acquire_owned().await;
        let platform = event.source.platform.clone();
        let chat = event.source.chat_id.clone();
        let reply_to = event.message_id.clone();
        if let Some(adapter) = self.adapters.get(platform.as_str()).cloned() {
            let chat = chat.clone();
            self.spawn(async move { adapter.typing(&chat).await });
        }
        let inner = Arc::clone(self);
        let turn_key = key.to_owned();
        let turn_ctl = Arc::clone(&ctl);
        let result =
            tokio::task::spawn_blocking(move || inner.run_turn(&turn_key, &event, id, &turn_ctl))
                .await;
        drop(permit);
        if let Some(slot) = lock(&self.state).sessions.get_mut(key) {
            slot.turn = None;
        }
        let texts = match result {
            Ok(reply) => reply.texts,
            Err(e) => {
                tracing::error!(key, error = %e, "turn panicked");
                vec!["Sorry, something went wrong while answering; your message is saved. Please try again.".into()]
            }
        };
        for text in texts {
            self.send(&platform, &chat, &text, Some(&reply_to)).await;
        }
    }

    async fn process_command(
        self: &Arc<Self>,
        key: &str,
        cmd: Command,
        event: MessageEvent,
        position: u64,
    ) {
        if self.stopping.load(Ordering::SeqCst) {
            return;
        }
        let inner = Arc::clone(self);
        let k = key.to_owned();
        let ev = event.clone();
        let result =
            tokio::task::spawn_blocking(move || inner.run_command(&k, &cmd, &ev, position)).await;
        let text = match result {
            Ok(Ok(text)) => text,
            Ok(Err(e)) => {
                tracing::error!(key, error = %e, "command failed");
                format!("Sorry, that command failed: {e}")
            }
            Err(e) => {
                tracing::error!(key, error = %e, "command panicked");
                "Sorry, that command failed.".into()
            }
        };
        self.send(
            &event.source.platform,
            &event.source.chat_id,
            &text,
            Some(&event.message_id),
        )
        .await;
    }

    fn status_later(
        self: &Arc<Self>,
        event: MessageEvent,
        key: String,
        running: bool,
        waiting: usize,
        cached: bool,
    ) {
        let inner = Arc::clone(self);
        self.spawn(async move {
            let i2 = Arc::clone(&inner);
            let k = key.clone();
            let record =
                tokio::task::spawn_blocking(move || i2.store().active_session_for_key(&k)).await;
            let mut text = String::new();
            match record {
                Ok(Ok(Some(s))) => {
                    let model = s
                        .model
                        .clone()
                        .unwrap_or_else(|| inner.factory.default_model());
                    text.push_str(&format!(
                        "Session: {}\nModel: {model}\nMessages: {}\n",
                        s.id, s.message_count
                    ));
                }
                Ok(Ok(None)) => text.push_str(&format!(
                    "No conversation yet.\nModel: {}\n",
                    inner.factory.default_model()
                )),
                Ok(Err(e)) => text.push_str(&format!("Session: unavailable ({e})\n")),
                Err(_) => text.push_str("Session: unavailable\n"),
            }
            text.push_str(&format!(
                "Running: {}\nWaiting messages: {waiting}\nBusy mode: {}\nAgent cached: {}",
                if running { "yes" } else { "no" },
                inner.config.busy_mode.as_str(),
                if cached { "yes" } else { "no" },
            ));
            inner
                .send(
                    &event.source.platform,
                    &event.source.chat_id,
                    &text,
                    Some(&event.message_id),
                )
                .await;
        });
    }

    fn new_session_spec<'a>(
        key: &'a str,
        source: &'a SessionSource,
        model: &'a str,
    ) -> NewSession<'a> {
        NewSession {
            session_key: Some(key),
            platform: Some(&source.platform),
            chat_id: Some(&source.chat_id),
            user_id: Some(&source.user_id),
            model: Some(model),
            system_prompt: None,
        }
    }

    /// `/new`, `/model`, `/undo` (blocking: touches the store).
    fn run_command(
        &self,
        key: &str,
        cmd: &Command,
        event: &MessageEvent,
        position: u64,
    ) -> Result<String, StoreError> {
        let source = &event.source;
        match cmd {
            Command::New => {
                let mut store = self.store();
                // Messages accepted before /new but never answered (it
                // dropped them) belong to the conversation it ends.
                let before = position.saturating_sub(1);
                if !lock(&self.inbox).upto(key, before).is_empty() {
                    let session = match store.active_session_for_key(key)? {
                        Some(s) => s,
                        None => store.create_session(&Self::new_session_spec(
                            key,
                            source,
                            &self.factory.default_model(),
                        ))?,
                    };
                    self.transcribe_into(&mut store, key, &session.id, before)?;
                }
                // The user's chosen model survives a new conversation.
                let model = store
                    .active_session_for_key(key)?
                    .and_then(|s| s.model)
                    .unwrap_or_else(|| self.factory.default_model());
                store.reset(key, &Self::new_session_spec(key, source, &model))?;
                drop(store);
                let mut state = lock(&self.state);
                state.cache.invalidate(key);
                state.suspended_keys.remove(key);
                Ok("Started a new conversation.".into())
            }
            Command::Model(None) => {
                let model = self
                    .store()
                    .active_session_for_key(key)?
                    .and_then(|s| s.model)
                    .unwrap_or_else(|| self.factory.default_model());
                Ok(format!("Model: {model}. Switch with /model NAME."))
            }
            Command::Model(Some(name)) => {
                if name.len() > 200 || name.chars().any(char::is_whitespace) {
                    return Ok("A model name is one word (at most 200 characters), e.g. /model gpt-4o-mini.".into());
                }
                let mut store = self.store();
                let id = match store.active_session_for_key(key)? {
                    Some(s) => s.id,
                    None => {
                        store
                            .create_session(&Self::new_session_spec(key, source, name))?
                            .id
                    }
                };
                store.set_model(&id, name)?;
                drop(store);
                lock(&self.state).cache.invalidate(key);
                Ok(format!(
                    "Model set to {name}; it answers from your next message."
                ))
            }
            Command::Undo => {
                let mut store = self.store();
                let Some(session) = store.active_session_for_key(key)? else {
                    return Ok("Nothing to undo.".into());
                };
                let removed = store.undo_last_turn(&session.id)?;
                Ok(if removed == 0 {
                    "Nothing to undo.".into()
                } else {
                    format!("Removed the last exchange ({removed} messages).")
                })
            }
            Command::Status | Command::Stop | Command::Help | Command::Unknown(_) => {
                Ok(String::new())
            }
        }
    }

    /// Transcribes `event` (inbox id `id`) without running it (shutdown).
    fn store_only(&self, key: &str, event: &MessageEvent, id: u64) -> Result<(), StoreError> {
        let now = self.now();
        let mut notices = Vec::new();
        let was_suspended = lock(&self.state).suspended_keys.remove(key);
        let mut store = self.store();
        let session = self.resolve_session(
            &mut store,
            key,
            &event.source,
            now,
            was_suspended,
            &mut notices,
        )?;
        let added = self.transcribe_into(&mut store, key, &session.id, id)?;
        if added.is_empty() {
            // Not in the inbox (cannot happen while ids are unique; kept so
            // an accepted message is never silently lost).
            store.append_messages(
                &session.id,
                &[LedgerEntry::at(Message::user(event.text.as_str()), now)],
            )?;
        }
        Ok(())
    }

    /// Moves the waiting messages of `key` that arrived up to inbox id
    /// `upto` into the transcript of `session_id`, in order, in one append;
    /// returns what was appended. They leave the inbox only once the append
    /// succeeded (a crash in between is resolved at start-up, see
    /// [`crate::inbox`]).
    fn transcribe_into(
        &self,
        store: &mut Store,
        key: &str,
        session_id: &str,
        upto: u64,
    ) -> Result<Vec<LedgerEntry>, StoreError> {
        let pending = lock(&self.inbox).upto(key, upto);
        if pending.is_empty() {
            return Ok(Vec::new());
        }
        let entries: Vec<LedgerEntry> = pending.iter().map(Pending::entry).collect();
        store.append_messages(session_id, &entries)?;
        let ids: Vec<u64> = pending.iter().map(|p| p.id).collect();
        if let Err(e) = lock(&self.inbox).remove(&ids) {
            // They are in the transcript; at worst a crash before the next
            // inbox write makes start-up check them again (and skip them).
            tracing::error!(key, error = %e, "could not update the inbox");
        }
        Ok(entries)
    }

    /// Start-up: transcribes what a previous process accepted but never
    /// transcribed, into the session each message was for.
    fn recover_inbox(&self) -> Result<(), StartError> {
        let path = self.store().path().to_path_buf();
        let mut inbox = Inbox::open(&path)?;
        let left = inbox.load_left_over()?;
        if !left.is_empty() {
            let mut store = self.store();
            let default_model = self.factory.default_model();
            let mut restored = 0usize;
            for p in &left {
                let session = match store.active_session_for_key(&p.key)? {
                    Some(s) => s,
                    None => store.create_session(&Self::new_session_spec(
                        &p.key,
                        &p.source(),
                        &default_model,
                    ))?,
                };
                let transcript = store.load_transcript(&session.id)?;
                if !already_transcribed(&transcript, p) {
                    store.append_messages(&session.id, &[p.entry()])?;
                    restored += 1;
                }
            }
            drop(store);
            inbox.clear_left_over()?;
            tracing::warn!(
                restored,
                "transcribed messages accepted by a previous run but never answered"
            );
        }
        let mut slot = lock(&self.inbox);
        if !slot.is_empty() {
            // Accepted before start (cannot happen: adapters connect after
            // this); keep them rather than drop them.
            for p in slot.all() {
                if let Err(e) = inbox.push(p) {
                    tracing::error!(error = %e, "could not store an accepted message durably");
                }
            }
        }
        *slot = inbox;
        Ok(())
    }

    /// Shutdown, after every worker finished: transcribes every message
    /// still in the inbox (accepted, never run).
    fn flush_all_pending(&self) {
        let pending = lock(&self.inbox).all();
        let mut done = HashSet::new();
        for p in pending {
            if !done.insert(p.key.clone()) {
                continue;
            }
            let now = self.now();
            let was_suspended = lock(&self.state).suspended_keys.remove(&p.key);
            let mut store = self.store();
            let result = self
                .resolve_session(
                    &mut store,
                    &p.key,
                    &p.source(),
                    now,
                    was_suspended,
                    &mut Vec::new(),
                )
                .and_then(|session| {
                    self.transcribe_into(&mut store, &p.key, &session.id, u64::MAX)
                });
            if let Err(e) = result {
                tracing::error!(key = %p.key, error = %e, "could not store a waiting message at shutdown; it stays in the inbox for the next start");
            }
        }
    }

    /// The session a message belongs to: the active one, unless it expired
    /// (G10) or was suspended by crash recovery (G11), in which case a fresh
    /// one starts and `notices` says why.
    fn resolve_session(
        &self,
        store: &mut Store,
        key: &str,
        source: &SessionSource,
        now: u64,
        was_suspended: bool,
        notices: &mut Vec<String>,
    ) -> Result<SessionRecord, StoreError> {
        if was_suspended {
            notices.push(CRASH_NOTICE.into());
        }
        let default_model = self.factory.default_model();
        match store.active_session_for_key(key)? {
            None => store.create_session(&Self::new_session_spec(key, source, &default_model)),
            Some(s) if s.status != SessionStatus::Active => {
                store.reset(key, &Self::new_session_spec(key, source, &default_model))
            }
            Some(s) => match self.expiry(s.updated_at_ms, now) {
                None => Ok(s),
                Some(why) => {
                    notices.push(why);
                    let model = s.model.clone().unwrap_or(default_model);
                    store.reset(key, &Self::new_session_spec(key, source, &model))
                }
            },
        }
    }

    /// Whether a session last active at `last_ms` has expired by `now_ms`,
    /// and the notice to give.
    fn expiry(&self, last_ms: u64, now_ms: u64) -> Option<String> {
        if let Some(idle) = self.config.idle_reset
            && now_ms.saturating_sub(last_ms) > duration_ms(idle)
        {
            let hours = idle.as_secs() / 3600;
            return Some(format!(
                "(Your previous conversation was idle for more than {hours} h; starting a new one.)"
            ));
        }
        if let Some(hour) = self.config.daily_reset_hour {
            let boundary = last_daily_boundary(now_ms, hour, (self.local_offset)(now_ms));
            if last_ms < boundary && boundary <= now_ms {
                return Some(format!(
                    "(Daily reset at {hour:02}:00: starting a new conversation.)"
                ));
            }
        }
        None
    }

    /// One turn, on the blocking pool. Returns what to send.
    fn run_turn(&self, key: &str, event: &MessageEvent, id: u64, ctl: &TurnCtl) -> TurnReply {
        let now = self.now();
        let mut texts = Vec::new();
        // 1. Session and history; the user's message (and any accepted
        //    message it replaced) moves from the inbox into the transcript
        //    before the model is called (E3).
        let was_suspended = lock(&self.state).suspended_keys.remove(key);
        let prepared = (|| {
            let mut store = self.store();
            let session = self.resolve_session(
                &mut store,
                key,
                &event.source,
                now,
                was_suspended,
                &mut texts,
            )?;
            let mut history = store.load_transcript(&session.id)?;
            let mut added = self.transcribe_into(&mut store, key, &session.id, id)?;
            // The agent appends the user message itself (in memory; the
            // observer below does not store it again), so the history it is
            // given ends just before it.
            if added.pop().is_none() {
                // Not in the inbox (cannot happen while ids are unique;
                // kept so an accepted message is never lost).
                store.append_messages(
                    &session.id,
                    &[LedgerEntry::at(Message::user(event.text.as_str()), now)],
                )?;
            }
            history.extend(added);
            Ok::<_, StoreError>((session, history))
        })();
        let (session, history) = match prepared {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(key, error = %e, "could not store the user message");
                texts.push(format!(
                    "Sorry, I could not save your message ({e}). Please send it again."
                ));
                return TurnReply { texts };
            }
        };
        // 2. The agent (G4).
        let agent = match self.agent_for(key, &session, &event.source) {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(key, error = %e, "could not build an agent");
                texts.push(format!(
                    "Sorry, the assistant is unavailable: {e}. Your message is saved."
                ));
                return TurnReply { texts };
            }
        };
        // 3. Run, interruptibly, persisting as the run goes.
        ctl.attach(agent.interrupt_flag().clone());
        let budget = IterationBudget::new(agent.max_iterations());
        let mut observer = TurnObserver {
            ctl,
            flag: agent.interrupt_flag(),
            persist: TurnWriter::new(&self.store, &session.id).skipping_stored_user_message(),
        };
        let outcome = agent.run(&event.text, history, &budget, &mut observer);
        let persist = observer.persist;
        if let Some(e) = persist.failure() {
            tracing::error!(key, error = %e, "could not store the reply; the run was stopped");
            texts.push(format!("(Warning: this reply could not be saved: {e}.)"));
        } else if persist.unfinished() > 0 {
            // The core answers every tool call before it ends a run, so this
            // does not happen; if it did, storing the call without its
            // results would make the transcript invalid for the provider.
            tracing::error!(
                key,
                entries = persist.unfinished(),
                "a tool call without all its results was not stored"
            );
        }
        // 4. What the user sees.
        let mut reply = outcome.final_text.clone();
        if let Some(notice) = match &outcome.stop {
            StopReason::Completed | StopReason::Interrupted => None,
            other => other.notice(budget.total()),
        } {
            if !reply.is_empty() {
                reply.push_str("\n\n");
            }
            reply.push_str(&notice);
        }
        texts.push(reply);
        TurnReply { texts }
    }

    /// The cached agent of this session and signature, or a new one (with the
    /// session's stored system prompt, assembling and storing it once).
    fn agent_for(
        &self,
        key: &str,
        session: &SessionRecord,
        source: &SessionSource,
    ) -> Result<Arc<Agent>, FactoryError> {
        let model = session
            .model
            .clone()
            .unwrap_or_else(|| self.factory.default_model());
        let signature = self.factory.signature(&model);
        let now = self.now();
        if let Some(agent) = lock(&self.state)
            .cache
            .get(key, &session.id, &signature, now)
        {
            return Ok(agent);
        }
        let prompt = match &session.system_prompt {
            Some(p) => p.clone(),
            None => {
                let p = self.factory.system_prompt(source)?;
                self.store()
                    .set_system_prompt(&session.id, &p)
                    .map_err(|e| FactoryError(format!("could not store the system prompt: {e}")))?;
                p
            }
        };
        let agent = Arc::new(self.factory.build(&session.id, &model, &prompt)?);
        lock(&self.state)
            .cache
            .insert(key, &session.id, &signature, Arc::clone(&agent), now);
        Ok(agent)
    }
}

/// Removes the waiting messages (not commands) of a slot; returns how many.
fn drop_queued_messages(slot: &mut Slot) -> usize {
    let before = slot.queue.len();
    slot.queue.retain(|w| !matches!(w, Work::Message(..)));
    before - slot.queue.len()
}

const DAY_MS: i64 = 86_400_000;

/// The most recent instant at or before `now_ms` whose local time (UTC +
/// `offset_s`) is `hour`:00, in ms since the epoch.
pub fn last_daily_boundary(now_ms: u64, hour: u8, offset_s: i64) -> u64 {
    let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
    let local = now.saturating_add(offset_s.saturating_mul(1000));
    let day_start = local.div_euclid(DAY_MS) * DAY_MS;
    let mut boundary = day_start + i64::from(hour) * 3_600_000;
    if boundary > local {
        boundary -= DAY_MS;
    }
    u64::try_from(boundary - offset_s.saturating_mul(1000)).unwrap_or(0)
}

/// The system time zone's UTC offset at `at_ms`, in seconds (0 if unknown).
pub fn system_utc_offset(at_ms: u64) -> i64 {
    let secs = libc::time_t::try_from(at_ms / 1000).unwrap_or(0);
    // SAFETY: `localtime_r` is the re-entrant variant; it writes only into
    // the `tm` we own and reads `secs`. A zeroed `tm` is a valid value.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&secs, &mut tm).is_null() {
            return 0;
        }
        tm.tm_gmtoff
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use hermes_core::ToolCall;

    #[test]
    fn a_failed_write_interrupts_the_run() {
        let store = Mutex::new(Store::open_in_memory().unwrap());
        let ctl = TurnCtl::default();
        let flag = InterruptFlag::new();
        let mut observer = TurnObserver {
            ctl: &ctl,
            flag: &flag,
            persist: TurnWriter::new(&store, "no-such-session").skipping_stored_user_message(),
        };
        observer.on_event(&AgentEvent::Appended(&LedgerEntry::at(
            Message::user("u"),
            0,
        )));
        assert!(!flag.is_set());
        let call = Message::Assistant {
            content: None,
            tool_calls: vec![ToolCall::new("a", "t", "{}")],
        };
        observer.on_event(&AgentEvent::Appended(&LedgerEntry::at(call, 0)));
        observer.on_event(&AgentEvent::Appended(&LedgerEntry::at(
            Message::tool("a", "r"),
            0,
        )));
        assert!(flag.is_set(), "no further tool may act unrecorded");
    }

    #[test]
    fn daily_boundary_is_the_last_local_four_oclock() {
        let h = 3_600_000u64;
        let day = 24 * h;
        // 2024-01-02 05:00 UTC, offset 0 → boundary 2024-01-02 04:00.
        let base = 19_724 * day; // 2024-01-02 00:00 UTC
        assert_eq!(last_daily_boundary(base + 5 * h, 4, 0), base + 4 * h);
        // 03:00 → yesterday's 04:00.
        assert_eq!(last_daily_boundary(base + 3 * h, 4, 0), base - day + 4 * h);
        // Exactly 04:00 counts as passed.
        assert_eq!(last_daily_boundary(base + 4 * h, 4, 0), base + 4 * h);
        // UTC+2: local 04:00 is 02:00 UTC.
        assert_eq!(last_daily_boundary(base + 3 * h, 4, 7200), base + 2 * h);
        // UTC-5: local 04:00 is 09:00 UTC.
        assert_eq!(last_daily_boundary(base + 10 * h, 4, -18_000), base + 9 * h);
        assert_eq!(
            last_daily_boundary(base + 8 * h, 4, -18_000),
            base - day + 9 * h
        );
    }
}
