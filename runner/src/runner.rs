//! The `GatewayRunner`: event → session key → agent → reply (SPEC G3–G7,
//! G10–G12, E1, E3, E4, X5).
//!
//! # How a message travels
//! 1. An adapter calls the one handler ([`GatewayRunner::handle_event`]).
//!    It deduplicates on (platform, chat, message id) (G7), checks the
//!    allow-list (E1), recognises commands (G12), makes a message durable in
//!    the inbox together with its identity ([`crate::inbox`]; the only IO it
//!    does, a short SQLite write, so that a message the adapter acknowledges
//!    survives a kill, E3, and a redelivery is recognised, X5) and puts it
//!    into its session's queue.
//! 2. Each session with work has exactly one *worker* task, which takes the
//!    queue in order — so one run per session key (G6) and commands such as
//!    `/new` or `/model` apply exactly between the messages around them.
//! 3. A turn runs on tokio's blocking pool (the agent loop is synchronous),
//!    at most `max_workers` at once across all sessions. It resolves the
//!    session (expiry G10, crash recovery G11), loads the transcript (G5),
//!    **moves the user message from the inbox into the transcript before
//!    calling the model** (E3) while marking the turn as running, takes an
//!    agent from the cache (G4), runs while appending each step as it
//!    happens (an assistant message with tool calls together with its
//!    results), and the worker sends the reply through the adapter (at most
//!    `max_reply_messages` messages, [`crate::overflow`]) and clears the mark.
//! 4. At start-up, what a previous process left is settled first
//!    ([`recovery`]): turns killed midway are told about, accepted messages
//!    never started are answered.
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
//! its output (to the old session). `/model`, `/undo` and `/compress` take
//! their place in the session's queue: they apply after the running turn, so
//! `/undo` then removes that turn.
//!
//! # The context window (SPEC X1)
//! A turn starts from the session's compacted view
//! ([`Store::load_view`]); the agent compacts before a call that would pass
//! the threshold and the observer records each compaction beside the stored
//! originals. `/compress [focus]` compacts on request and replies with the
//! sizes before and after; `/status` shows how full the window is
//! (`runner/context.rs`).
//!
//! # Failure
//! A failing store, model or agent build is reported to that user and
//! logged; the runner goes on serving everyone else (E4). A panic inside a
//! turn is contained by the blocking pool and reported the same way.
//!
//! **Invariant:** nothing here branches on a platform name; adapters are
//! looked up by the name they report.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use hermes_core::Clock;
use hermes_runtime::store::{BackendKind, Store, StoreError};
use hermes_runtime::sync::lock;
use tokio::runtime::Handle;

use crate::adapter::{EventHandler, PlatformAdapter};

use crate::cache::CacheStats;
use crate::config::GatewayConfig;
use crate::event::{MessageEvent, SessionSource};
use crate::inbox::{Inbox, InboxError};
use crate::lease::LeaseTiming;
use crate::session::session_key;

mod admission;
mod agents;
mod background;
mod chat_commands;
mod chat_prefs;
mod clarify;
mod cluster;
mod commands;
mod context;
mod delivery;
mod factory;
mod fetch;
mod intake;
mod lifecycle;
mod oneoff;
mod oplog;
mod progress;
mod queues;
mod recovery;
mod spending;
mod steer;
mod transcribe;
mod turn;
mod voice;

pub use factory::{AgentFactory, BuildOptions, FactoryError};
pub use fetch::DOWNLOAD_TIMEOUT;
pub use lifecycle::{last_daily_boundary, system_utc_offset};
pub use progress::{StreamEvent, TYPING_INTERVAL};
pub use steer::STEER_NOTICE;

use queues::{State, TurnCtl, Work};

/// The "interrupting" notice is sent at most this often per session (G6).
pub const NOTICE_INTERVAL: Duration = Duration::from_secs(30);
/// Graceful stop finishes within this (SPEC G3 / issue 5).
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// How long start-up waits for one restart notice to be sent.
const NOTICE_SEND_TIMEOUT: Duration = Duration::from_secs(15);
/// An unknown user is told "no" at most this often.
const REFUSAL_INTERVAL: Duration = Duration::from_secs(600);

/// The reply to a user who is not on the allow-list.
pub fn refusal_text(user_id: &str) -> String {
    format!(
        "Sorry, you are not allowed to use this bot. Ask its operator to add your user id ({user_id}) to the allow-list."
    )
}
/// Sent once, at start-up, for a turn the previous process was killed in the
/// middle of (as a reply to the message it was answering). The turn is not
/// resumed (G11): its session is suspended and the next message starts a
/// new conversation.
pub const RESTART_NOTICE: &str = "⚠️ The gateway restarted before it finished answering this message, so the answer is missing or incomplete. Please send it again if you still need it (a new conversation starts).";
/// Ends the partial answer of a turn that a graceful stop interrupted.
pub const STOPPED_NOTICE: &str = "⏹ The gateway was stopped before this answer was finished.";
/// Sent when a message arrives for a busy session in interrupt mode.
pub const INTERRUPT_NOTICE: &str = "⏳ Interrupting the current reply to answer your new message…";
/// Sent when a message arrives for a busy session in queue mode.
pub const QUEUE_NOTICE: &str = "⏳ Your message is queued; I'll answer it after the current reply.";

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

/// The runner's stages and what they share. Each stage owns its state:
/// intake (duplicates, strangers, arrival numbers: [`intake::Intake`]), the
/// queues (the sessions with work and their running turns, the workers'
/// bound, the start-up gate: [`queues::Queues`]), the
/// turns' agents ([`agents::Agents`]) and delivery (the adapters:
/// [`delivery::Delivery`]). The store, the inbox, the clock, the settings and
/// the leases are shared; the methods on `Inner` are the walk of a message
/// across the stages.
///
/// Lock order: store, then inbox, then the queues' state. The intake's and
/// the agent cache's locks are leaves: held for one lookup, never while
/// another lock is taken.
struct Inner {
    /// Duplicates, strangers and arrival numbers: the intake's own state.
    intake: intake::Intake,
    /// The adapters, and how a reply reaches a chat.
    delivery: delivery::Delivery,
    /// The factory, its approvals, the agent cache.
    agents: agents::Agents,
    store: Arc<Mutex<Store>>,
    clock: Arc<dyn Clock>,
    config: GatewayConfig,
    local_offset: LocalOffset,
    /// The sessions with work and their running turns.
    queues: queues::Queues,
    handle: OnceLock<Handle>,
    /// Shutdown began: waiting messages stay in the inbox, not run.
    stopping: AtomicBool,
    /// Shutdown drained the workers: events are no longer accepted.
    closed: AtomicBool,
    /// Accepted messages not yet in a transcript (E3; see [`crate::inbox`]).
    /// Lock order: store, then inbox, then state.
    inbox: Mutex<Inbox>,
    /// Leases: which bots and sessions this gateway may act for (SPEC X8).
    cluster: cluster::Cluster,
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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
        let delivery = delivery::Delivery::new(adapters, config.max_reply_messages);
        // Several gateways can share a PostgreSQL database; a SQLite file
        // belongs to the one holding the home's lock.
        let exclusive = lock(&store).kind() == BackendKind::Sqlite;
        let cluster = cluster::Cluster::new(
            crate::lease::instance_id(),
            LeaseTiming::with_ttl(config.lease_ttl),
            exclusive,
        );
        GatewayRunner {
            inner: Arc::new(Inner {
                intake: intake::Intake::new(&config),
                delivery,
                agents: agents::Agents::new(factory, &config),
                store,
                clock,
                queues: queues::Queues::new(config.max_workers),
                config,
                local_offset,
                handle: OnceLock::new(),
                stopping: AtomicBool::new(false),
                closed: AtomicBool::new(false),
                inbox: Mutex::new(Inbox::volatile()),
                cluster,
            }),
        }
    }

    /// Starts serving. Must be called inside the tokio runtime the runner
    /// should use.
    ///
    /// For each adapter, the bot's lease (SPEC X8; on SQLite it is this
    /// process's at once): a gateway that gets it
    /// 1. takes over ([`crate::inbox`], G11, X5): sessions of turns killed
    ///    midway are suspended; messages accepted but never started are
    ///    queued again (their workers wait for step 3);
    /// 2. connects the adapter with the one handler (G3);
    /// 3. gives the user of each interrupted turn [`RESTART_NOTICE`]; then
    ///    the queued messages run.
    ///
    /// A bot whose lease another gateway holds is stood by for, and taken
    /// over when that lease lapses. An adapter that fails to connect is
    /// logged and skipped (E4); if none connects or stands by, start fails
    /// (and the queued messages stay in the inbox for the next start).
    pub async fn start(&self) -> Result<(), StartError> {
        if self.inner.handle.set(Handle::current()).is_err() {
            return Err(StartError::AlreadyStarted);
        }
        let inner = Arc::clone(&self.inner);
        hermes_runtime::task::spawn_blocking(move || {
            inner.prepare()?;
            inner.listen();
            Ok::<_, StartError>(())
        })
        .await
        .map_err(|e| StartError::NoAdapter(format!("start-up panicked: {e}")))??;

        if let Some(hub) = &self.inner.agents.approvals {
            let weak: Weak<Inner> = Arc::downgrade(&self.inner);
            hub.set_notifier(Box::new(move |route, text| {
                if let Some(inner) = weak.upgrade() {
                    if let Some(turn) = lock(&inner.queues.state)
                        .sessions
                        .get(&route.key)
                        .and_then(|slot| slot.turn.as_ref())
                    {
                        turn.break_preview();
                    }
                    let route = route.clone();
                    let sender = Arc::clone(&inner);
                    inner.spawn(async move {
                        sender
                            .delivery
                            .send(
                                &route.platform,
                                &route.chat_id,
                                &text,
                                Some(&route.reply_to),
                            )
                            .await;
                    });
                }
            }));
        }
        if let Some(hub) = self.inner.agents.factory.files() {
            hub.set_sender(Arc::new(voice::ChatFiles(Arc::downgrade(&self.inner))));
        }
        if let Some(hub) = self.inner.agents.factory.clarify() {
            hub.set_sender(Arc::new(clarify::ChatQuestions(Arc::downgrade(
                &self.inner,
            ))));
        }
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let handler: EventHandler = Arc::new(move |event| {
            if let Some(inner) = weak.upgrade() {
                inner.handle_event(event);
            }
        });
        // One task per bot: it takes the bot's lease (or stands by), takes
        // over what earlier holders left, queues the left-over messages,
        // connects, sends the restart notices.
        let mut firsts = Vec::new();
        for adapter in self.inner.delivery.adapters() {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let inner = Arc::clone(&self.inner);
            hermes_runtime::task::spawn(inner.serve_bot(
                Arc::clone(adapter),
                Arc::clone(&handler),
                Some(tx),
            ));
            firsts.push((adapter.platform(), rx));
        }
        let mut serving = 0;
        let mut failures = Vec::new();
        for (platform, rx) in firsts {
            match rx.await {
                Ok(cluster::FirstAttempt::Connected | cluster::FirstAttempt::Standby) => {
                    serving += 1
                }
                Ok(cluster::FirstAttempt::Failed(e)) => failures.push(e),
                Err(_) => failures.push(format!("{platform}: its task ended")),
            }
        }
        if serving == 0 {
            self.inner.cluster.stop.send_replace(true);
            return Err(StartError::NoAdapter(if failures.is_empty() {
                "no adapter is enabled".into()
            } else {
                failures.join("; ")
            }));
        }
        self.inner.queues.gate.send_replace(true);
        Ok(())
    }

    /// This gateway's name in lease rows (`host:pid:random`).
    pub fn instance_id(&self) -> &str {
        &self.inner.cluster.owner
    }

    /// Whether this gateway serves `platform`'s bot now (holds its lease).
    pub fn serves(&self, platform: &str) -> bool {
        self.inner.bot_lease(platform).is_some()
    }

    /// The handler adapters deliver to (also registered by `start`). Returns
    /// at once; the work happens on the runner's tasks.
    pub fn handle_event(&self, event: MessageEvent) {
        self.inner.handle_event(event);
    }

    /// Graceful stop, within [`SHUTDOWN_TIMEOUT`]: start no new turns,
    /// interrupt running ones (their partial output is persisted and sent),
    /// keep messages still waiting — or arriving until the workers have
    /// drained — in the inbox for the next start (E3, X5), then refuse
    /// further events, disconnect every adapter, and record a clean shutdown
    /// if every turn finished.
    pub async fn shutdown(&self) -> ShutdownReport {
        let started = Instant::now();
        let inner = &self.inner;
        inner.stopping.store(true, Ordering::SeqCst);
        // Workers still waiting for start-up to finish go through their
        // queues now, without running anything.
        inner.queues.gate.send_replace(true);
        {
            let state = lock(&inner.queues.state);
            for slot in state.sessions.values() {
                if let Some(turn) = &slot.turn {
                    turn.interrupt();
                }
            }
        }
        // Leave a second of the budget for disconnecting.
        let deadline = started + SHUTDOWN_TIMEOUT - Duration::from_secs(1);
        let all_turns_finished = loop {
            let notified = inner.queues.idle.notified();
            if lock(&inner.queues.state).active_workers == 0 {
                break true;
            }
            let now = Instant::now();
            if now >= deadline
                || tokio::time::timeout(deadline - now, notified)
                    .await
                    .is_err()
            {
                break lock(&inner.queues.state).active_workers == 0;
            }
        };
        inner.closed.store(true, Ordering::SeqCst);
        inner.cluster.stop.send_replace(true);
        for adapter in inner.delivery.adapters() {
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
        // A standby gateway takes the bots over at once.
        let releasing = Arc::clone(inner);
        if let Err(e) = hermes_runtime::task::spawn_blocking(move || releasing.release_bots()).await
        {
            tracing::error!(error = %e, "releasing the bot leases panicked");
        }
        let marked_clean = if all_turns_finished {
            let inner = Arc::clone(inner);
            let result =
                hermes_runtime::task::spawn_blocking(move || inner.store().mark_clean_shutdown())
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
        self.inner.agents.cache_stats()
    }

    /// Whether an agent is cached for `session_key`.
    pub fn is_cached(&self, session_key: &str) -> bool {
        self.inner.agents.is_cached(session_key)
    }

    /// Agents in the cache.
    pub fn cached_agents(&self) -> usize {
        self.inner.agents.cached()
    }

    /// Sessions with a running turn or waiting messages.
    pub fn busy_sessions(&self) -> usize {
        lock(&self.inner.queues.state).sessions.len()
    }

    /// Whether an adapter for `platform` is configured here.
    pub fn has_platform(&self, platform: &str) -> bool {
        self.inner.delivery.adapter(platform).is_some()
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
                hermes_runtime::task::spawn_on(h, fut);
            }
            None => tracing::error!("event delivered before the runner started; dropped"),
        }
    }
}
