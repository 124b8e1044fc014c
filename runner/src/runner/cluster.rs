//! Several gateways on one database (SPEC X8): who serves which bot, who
//! runs which session's turn, and taking over from a gateway that died.
//!
//! - **Bot leases** ([`Inner::serve_bot`]): each adapter's bot is served by
//!   the holder of its lease. The others stand by, retrying every
//!   `retry_every` (and at once when a holder says it released one), and
//!   take over within a lease time of the holder's death. A holder that
//!   loses its lease — renewal refused, or not renewed in time by its own
//!   clock (it was stopped, or cut off from the database) — disconnects at
//!   once: the adapter checks the lease before every poll, so a gateway
//!   woken from SIGSTOP polls nothing more.
//! - **The bot's holder runs that bot's turns.** Each turn also holds its
//!   session's lease, so at most one turn of a session runs across all
//!   gateways (G6), and every write of the turn carries that lease's fence.
//!   A gateway that finds the session lease held elsewhere asks the holder
//!   to interrupt its turn ([`INTERRUPT_CHANNEL`], `LISTEN`/`NOTIFY`; in
//!   queue mode it does not ask) and waits for the release (notified on
//!   [`RELEASED_CHANNEL`]) or for the lease to lapse. Notifications are not
//!   durable, so both are polled as a safety net: the lease every
//!   `retry_every`, and the request is repeated every `renew_every` while
//!   the same holder keeps the lease.
//! - **Taking over** ([`Inner::take_over_platform`]): the new holder of a
//!   bot suspends the sessions of turns that were killed midway (their turn
//!   marker is still there and their session lease lapsed; G11 by lease
//!   expiry), owes each user one notice, and answers the messages earlier
//!   holders accepted but never started.
//!
//! Host-local state — `MEMORY.md`, the working directory the tools see —
//! stays consistent because one gateway at a time runs a bot's turns.
//! Running one bot's turns on several gateways at once would need that
//! state shared too (memory in the database, a shared or per-session
//! working directory), the inbox routed to the gateway that holds a
//! session's lease (or any gateway pulling work from it), and a reply path
//! that any gateway can use (the holder of the bot's connection sending on
//! behalf of others); the session leases and fences here are already what
//! such a design needs to keep one turn per session.
//!
//! On SQLite one gateway holds the home's lock; leases are acquired with
//! `take_over` and never lapse by the clock, so the same code runs there.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use hermes_runtime::store::{Fence, KvWrite, Listener, Notification, SessionStatus, Store};
use tokio::sync::{Notify, oneshot, watch};

use super::{Inner, NOTICE_SEND_TIMEOUT, RESTART_NOTICE, StartError, Work, lock};
use crate::adapter::{EventHandler, PlatformAdapter};
use crate::config::BusyMode;
use crate::inbox::{Pending, TURN_KV_PREFIX, TurnMarker, already_transcribed, turn_key};
use crate::lease::{
    Acquired, Held, INTERRUPT_CHANNEL, LeaseTiming, RELEASED_CHANNEL, bot_lease, interrupt_request,
    parse_interrupt_request, session_lease, try_acquire,
};

/// The runner's part in a group of gateways sharing a database.
pub(super) struct Cluster {
    /// This process, as lease rows name it.
    pub(super) owner: String,
    pub(super) timing: LeaseTiming,
    /// SQLite: this process holds the home's one-gateway lock, so a lease
    /// naming another holder is a previous process's — taken over at once.
    pub(super) exclusive: bool,
    /// The leases' own connection (a renewal never waits behind a turn's
    /// writes); the runner's store itself for an in-memory database.
    pub(super) store: OnceLock<Arc<Mutex<Store>>>,
    /// The bot leases held now, by platform.
    pub(super) bots: Mutex<HashMap<&'static str, Held>>,
    /// Woken when another gateway says it released a lease (or the
    /// listener reconnected and may have missed that).
    pub(super) released: Notify,
    /// Set when shutdown begins: the bot loops stop.
    pub(super) stop: watch::Sender<bool>,
    /// Session leases of killed turns taken over, held until their users
    /// were told.
    pub(super) orphans: Mutex<HashMap<String, Held>>,
    pub(super) listener: Mutex<Option<Listener>>,
    /// An in-memory store: nothing is durable, so nothing is fenced (and
    /// there is no other gateway).
    pub(super) volatile: AtomicBool,
    /// Why an adapter stopped for good ([`PlatformAdapter::gave_up`]): the
    /// gateway exits non-zero ([`super::GatewayRunner::gave_up`]).
    pub(super) gave_up: watch::Sender<Option<String>>,
}

impl Cluster {
    pub(super) fn new(owner: String, timing: LeaseTiming, exclusive: bool) -> Self {
        Cluster {
            owner,
            timing,
            exclusive,
            store: OnceLock::new(),
            bots: Mutex::new(HashMap::new()),
            released: Notify::new(),
            stop: watch::Sender::new(false),
            orphans: Mutex::new(HashMap::new()),
            listener: Mutex::new(None),
            volatile: AtomicBool::new(false),
            gave_up: watch::Sender::new(None),
        }
    }
}

impl super::GatewayRunner {
    /// Resolves, with the reason, when an adapter has stopped for good
    /// ([`PlatformAdapter::gave_up`]): `hermes gateway run` then stops and
    /// exits non-zero, so its service manager restarts it.
    pub async fn gave_up(&self) -> String {
        let mut rx = self.inner.cluster.gave_up.subscribe();
        match rx.wait_for(Option::is_some).await {
            Ok(why) => why.clone().unwrap_or_default(),
            Err(_) => std::future::pending().await,
        }
    }
}

/// How an adapter's first attempt to serve its bot went.
pub(super) enum FirstAttempt {
    /// This gateway holds the bot's lease and the adapter connected.
    Connected,
    /// Another gateway serves the bot; this one stands by.
    Standby,
    /// The adapter could not connect (its error).
    Failed(String),
}

/// What taking over a bot found.
#[derive(Default)]
pub(super) struct TakeOver {
    /// Turns killed midway: their users are owed a notice.
    pub(super) interrupted: Vec<TurnMarker>,
    /// Messages accepted by earlier holders and never started.
    pub(super) to_answer: Vec<Pending>,
}

impl Inner {
    pub(super) fn lease_store(&self) -> &Arc<Mutex<Store>> {
        self.cluster.store.get_or_init(|| Arc::clone(&self.store))
    }

    /// The bot id of `platform`'s adapter here (empty if none): what
    /// inbox rows and turn markers are tagged with, so two bots of one
    /// platform on one database take over only their own.
    pub(super) fn bot_id(&self, platform: &str) -> String {
        self.delivery
            .adapter(platform)
            .map(|a| a.bot_id())
            .unwrap_or_default()
    }

    /// The bot lease of `platform`, if this gateway holds it and may act.
    pub(super) fn bot_lease(&self, platform: &str) -> Option<Held> {
        lock(&self.cluster.bots)
            .get(platform)
            .filter(|h| h.is_valid())
            .cloned()
    }

    /// The fences a write for `platform`'s bot carries: its lease's, or —
    /// for a volatile (in-memory) store, whose inbox writes nothing — none.
    /// `None` when this gateway does not serve the bot (it must not write).
    pub(super) fn bot_fences(&self, platform: &str) -> Option<Vec<Fence>> {
        if self.cluster.volatile.load(Ordering::SeqCst) {
            return Some(Vec::new());
        }
        self.bot_lease(platform).map(|h| vec![h.fence().clone()])
    }

    /// Listens for interrupt requests and releases from other gateways
    /// (PostgreSQL; SQLite has nobody else to hear from).
    pub(super) fn listen(self: &Arc<Self>) {
        let weak: Weak<Inner> = Arc::downgrade(self);
        let sink = Arc::new(move |n: Notification| {
            let Some(inner) = weak.upgrade() else { return };
            match n.channel.as_str() {
                INTERRUPT_CHANNEL => {
                    // Only the holder named interrupts: the asker has a turn
                    // of that session waiting too, and hears its own request.
                    let key = parse_interrupt_request(&n.payload)
                        .filter(|(holder, _)| *holder == inner.cluster.owner)
                        .and_then(|(_, lease)| lease.strip_prefix("session:"));
                    if let Some(key) = key {
                        let state = lock(&inner.queues.state);
                        if let Some(turn) = state.sessions.get(key).and_then(|s| s.turn.as_ref()) {
                            tracing::info!(
                                key,
                                "another gateway needs this session: interrupting its turn"
                            );
                            turn.interrupt();
                        }
                    }
                }
                // A release, or a reconnection after which one may have
                // been missed: waiters look again.
                _ => inner.cluster.released.notify_waiters(),
            }
        });
        let listening =
            lock(self.lease_store()).listen(&[INTERRUPT_CHANNEL, RELEASED_CHANNEL], sink);
        match listening {
            Ok(listener) => *lock(&self.cluster.listener) = listener,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for other gateways; polling instead")
            }
        }
    }

    /// Serves one adapter's bot until shutdown: acquire its lease (standing
    /// by while another gateway holds it), take over what earlier holders
    /// left, connect, keep the lease renewed; on losing it, disconnect at
    /// once and stand by again. `first` hears how the first attempt went.
    pub(super) async fn serve_bot(
        self: Arc<Self>,
        adapter: Arc<dyn PlatformAdapter>,
        handler: EventHandler,
        mut first: Option<oneshot::Sender<FirstAttempt>>,
    ) {
        let platform = adapter.platform();
        let name = bot_lease(platform, &adapter.bot_id());
        let timing = self.cluster.timing;
        let mut stop = self.cluster.stop.subscribe();
        let mut standing_by_for = None::<String>;
        loop {
            if *stop.borrow() {
                return;
            }
            let released = self.cluster.released.notified();
            let inner = Arc::clone(&self);
            let lease_name = name.clone();
            let attempt = hermes_runtime::task::spawn_blocking(move || {
                try_acquire(
                    inner.lease_store(),
                    &lease_name,
                    &inner.cluster.owner,
                    inner.cluster.timing.ttl,
                    inner.cluster.exclusive,
                    true,
                )
            })
            .await;
            let held = match attempt {
                Ok(Ok(Acquired::Granted { held, .. })) => held,
                Ok(Ok(Acquired::Busy { owner })) => {
                    if standing_by_for.as_deref() != Some(&owner) {
                        tracing::info!(lease = %name, holder = %owner, "another gateway serves this bot; standing by");
                        crate::ops::ops()
                            .platform_state(platform, crate::ops::PlatformState::StandingBy);
                        standing_by_for = Some(owner);
                    }
                    if let Some(tx) = first.take() {
                        let _ = tx.send(FirstAttempt::Standby);
                    }
                    tokio::select! {
                        _ = released => {}
                        _ = tokio::time::sleep(timing.retry_every) => {}
                        _ = stopped(&mut stop) => return,
                    }
                    continue;
                }
                Ok(Err(e)) => {
                    tracing::warn!(lease = %name, error = %e, "cannot reach the database for the bot's lease; retrying");
                    if let Some(tx) = first.take() {
                        let _ = tx.send(FirstAttempt::Standby);
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(timing.retry_every.max(Duration::from_millis(500))) => {}
                        _ = stopped(&mut stop) => return,
                    }
                    continue;
                }
                Err(e) => {
                    tracing::error!(error = %e, "acquiring a lease panicked");
                    return;
                }
            };
            standing_by_for = None;
            tracing::info!(lease = %name, epoch = held.fence().epoch, "serving the bot");
            lock(&self.cluster.bots).insert(platform, held.clone());
            adapter.set_lease(Some(held.clone()));
            let keeper = hermes_runtime::task::spawn(
                held.clone().keep(Arc::clone(self.lease_store()), timing),
            );
            let inner = Arc::clone(&self);
            let taken =
                hermes_runtime::task::spawn_blocking(move || inner.take_over_platform(platform))
                    .await;
            let mut taken = match taken {
                Ok(Ok(t)) => t,
                Ok(Err(e)) => {
                    tracing::error!(lease = %name, error = %e, "cannot take over the bot's work; giving the lease up");
                    self.give_up_bot(platform, &adapter, &held, keeper).await;
                    tokio::select! {
                        _ = tokio::time::sleep(timing.ttl) => {}
                        _ = stopped(&mut stop) => return,
                    }
                    continue;
                }
                Err(e) => {
                    tracing::error!(error = %e, "taking over a bot panicked");
                    return;
                }
            };
            // Messages earlier holders accepted join their sessions' queues
            // before the adapter can deliver new ones: a turn moves every
            // earlier message of its session into the transcript, so a newer
            // message must never run first (its turn would take the older
            // one along, and the older one's own turn would store it again).
            // Their workers wait for start-up (the first time) or for the
            // session leases the notices below hold.
            for p in std::mem::take(&mut taken.to_answer) {
                let state = lock(&self.queues.state);
                self.push_work(state, p.key.clone(), Work::Message(p.event(), p.id));
            }
            match adapter.connect(Arc::clone(&handler)).await {
                Ok(()) => {
                    tracing::info!(platform, "adapter connected");
                    crate::ops::ops()
                        .platform_state(platform, crate::ops::PlatformState::Connected);
                }
                Err(e) => {
                    tracing::error!(platform, error = %e, "adapter failed to connect");
                    crate::ops::ops()
                        .platform_state(platform, crate::ops::PlatformState::Failed(e.to_string()));
                    let message = e.to_string();
                    self.give_up_bot(platform, &adapter, &held, keeper).await;
                    // What was taken over stays stored for the next holder.
                    self.drop_platform_work(platform);
                    if let Some(tx) = first.take() {
                        let _ = tx.send(FirstAttempt::Failed(message));
                        return;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(timing.ttl) => {}
                        _ = stopped(&mut stop) => return,
                    }
                    continue;
                }
            }
            // Start-up is done when the users of killed turns were told.
            self.answer_taken_over(taken).await;
            if let Some(tx) = first.take() {
                let _ = tx.send(FirstAttempt::Connected);
            }
            loop {
                tokio::select! {
                    _ = held.invalidated() => break,
                    _ = stopped(&mut stop) => {
                        keeper.abort();
                        return;
                    }
                    why = adapter.gave_up() => {
                        tracing::error!(platform, error = %why, "the adapter stopped for good; stopping the gateway so that it is restarted");
                        // `hermes gateway status` shows why (a revoked token).
                        crate::ops::ops()
                            .platform_state(platform, crate::ops::PlatformState::Failed(why.clone()));
                        self.cluster.gave_up.send_replace(Some(why));
                        return;
                    }
                    // A turn of this bot on a gateway that died later than
                    // the takeover (SQLite has no such other gateway).
                    _ = tokio::time::sleep(timing.ttl), if !self.cluster.exclusive => {
                        let inner = Arc::clone(&self);
                        let killed = hermes_runtime::task::spawn_blocking(move || inner.recover_killed_turns(platform)).await;
                        match killed {
                            Ok(Ok(interrupted)) if !interrupted.is_empty() => {
                                self.answer_taken_over(TakeOver { interrupted, to_answer: Vec::new() }).await;
                            }
                            Ok(Ok(_)) => {}
                            Ok(Err(e)) => tracing::warn!(platform, error = %e, "cannot look for turns killed elsewhere"),
                            Err(e) => tracing::error!(error = %e, "looking for killed turns panicked"),
                        }
                    }
                }
            }
            // Lost: another gateway serves the bot from now on. Stop acting
            // for it at once; what waits here is stored and becomes the new
            // holder's.
            tracing::warn!(lease = %name, "lost the bot's lease (another gateway took over); disconnecting and standing by");
            keeper.abort();
            adapter.set_lease(None);
            lock(&self.cluster.bots).remove(platform);
            adapter.disconnect().await;
            self.drop_platform_work(platform);
        }
    }

    async fn give_up_bot(
        &self,
        platform: &'static str,
        adapter: &Arc<dyn PlatformAdapter>,
        held: &Held,
        keeper: tokio::task::JoinHandle<()>,
    ) {
        keeper.abort();
        adapter.set_lease(None);
        lock(&self.cluster.bots).remove(platform);
        held.lose();
        let store = Arc::clone(self.lease_store());
        let fence = held.fence().clone();
        let _ = hermes_runtime::task::spawn_blocking(move || release(&store, &fence)).await;
    }

    /// Shutdown: gives every bot lease up, so a standby gateway takes over
    /// at once instead of after a lease time.
    pub(super) fn release_bots(&self) {
        let held: Vec<Held> = lock(&self.cluster.bots).drain().map(|(_, h)| h).collect();
        for h in held {
            h.lose();
            release(self.lease_store(), h.fence());
        }
    }

    /// Queues what a takeover found, after telling the users of killed turns.
    async fn answer_taken_over(self: &Arc<Self>, taken: TakeOver) {
        for marker in taken.interrupted {
            let send = self.delivery.send(
                &marker.platform,
                &marker.chat_id,
                RESTART_NOTICE,
                Some(&marker.message_id),
            );
            if tokio::time::timeout(NOTICE_SEND_TIMEOUT, send)
                .await
                .is_err()
            {
                tracing::warn!(platform = %marker.platform, "the restart notice could not be sent in time");
            }
            let inner = Arc::clone(self);
            let key = marker.key.clone();
            let _ =
                hermes_runtime::task::spawn_blocking(move || inner.forget_orphan_turn(&key)).await;
        }
        for p in taken.to_answer {
            let state = lock(&self.queues.state);
            self.push_work(state, p.key.clone(), Work::Message(p.event(), p.id));
        }
    }

    /// After losing a bot's lease: waiting messages of its platform leave
    /// the queues (they stay stored for the new holder); running turns go
    /// on under their session leases.
    fn drop_platform_work(&self, platform: &str) {
        let ids = lock(&self.inbox).forget_platform(platform);
        let mut state = lock(&self.queues.state);
        for slot in state.sessions.values_mut() {
            slot.queue.retain(|w| match w {
                Work::Message(event, id) => event.source.platform != platform && !ids.contains(id),
                Work::Command(..) => true,
            });
        }
    }

    /// Taking over `platform`'s bot (blocking): suspends the sessions of
    /// its turns that were killed midway — a turn marker whose session
    /// lease this gateway can acquire — and loads the messages earlier
    /// holders accepted but never started.
    pub(super) fn take_over_platform(&self, platform: &str) -> Result<TakeOver, StartError> {
        let mut taken = TakeOver {
            interrupted: self.recover_killed_turns(platform)?,
            to_answer: Vec::new(),
        };
        let mut left = lock(&self.inbox).load_left_over(platform, &self.bot_id(platform))?;
        // Inboxes written before a turn's start was one transaction can
        // hold a message its session already has.
        let mut stale = Vec::new();
        {
            let store = self.store();
            for p in &left {
                if let Some(session) = store.active_session_for_key(&p.key)?
                    && already_transcribed(&store.load_transcript(&session.id)?, p)
                {
                    stale.push(p.db_key.clone());
                }
            }
        }
        if !stale.is_empty() {
            let keys: Vec<&str> = stale.iter().map(String::as_str).collect();
            self.store().kv_delete(&keys)?;
            left.retain(|p| !stale.contains(&p.db_key));
        }
        if !left.is_empty() {
            tracing::warn!(
                platform,
                answering = left.iter().filter(|p| p.answer).count(),
                waiting = left.len(),
                "messages accepted earlier but never answered"
            );
        }
        // Arrival numbers continue after what is left: a new message must
        // never take the inbox key of an old one.
        let next = left.iter().map(|p| p.id).max().unwrap_or(0) + 1;
        self.intake
            .next_pending
            .fetch_max(next, std::sync::atomic::Ordering::SeqCst);
        taken.to_answer = left.iter().filter(|p| p.answer).cloned().collect();
        lock(&self.inbox).restore(left);
        Ok(taken)
    }

    /// Turns of `platform` killed midway (blocking): a turn marker whose
    /// session lease this gateway can acquire — it lapsed, or on SQLite
    /// belongs to a previous process. Their sessions are suspended; the
    /// leases are held until their users were told
    /// ([`Inner::forget_orphan_turn`]).
    pub(super) fn recover_killed_turns(
        &self,
        platform: &str,
    ) -> Result<Vec<TurnMarker>, hermes_runtime::store::StoreError> {
        let mut killed = Vec::new();
        let bot = self.bot_id(platform);
        let markers = self.store().kv_scan(TURN_KV_PREFIX)?;
        for (key, value) in markers {
            let marker = match serde_json::from_str::<TurnMarker>(&value) {
                Ok(m) if m.platform == platform && (m.bot.is_empty() || m.bot == bot) => m,
                Ok(_) => continue,
                Err(e) => {
                    tracing::error!(%key, error = %e, "unreadable turn marker dropped");
                    self.store().kv_delete(&[&key])?;
                    continue;
                }
            };
            if lock(&self.cluster.orphans).contains_key(&marker.key) {
                continue;
            }
            let lease = session_lease(&marker.key);
            let acquired = try_acquire(
                self.lease_store(),
                &lease,
                &self.cluster.owner,
                self.cluster.timing.ttl,
                self.cluster.exclusive,
                false,
            )?;
            let Acquired::Granted { held, .. } = acquired else {
                // A live gateway runs that turn (it will clear its marker).
                continue;
            };
            // The turn may have finished between the scan and the grant.
            if self.store().kv_get(&turn_key(&marker.key))?.is_none() {
                release(self.lease_store(), held.fence());
                continue;
            }
            self.suspend_killed_turn(&marker)?;
            lock(&self.cluster.orphans).insert(marker.key.clone(), held);
            killed.push(marker);
        }
        Ok(killed)
    }

    /// G11: the session of a turn killed midway is suspended (the next
    /// message starts fresh; the turn is not resumed, its tools may have
    /// acted).
    pub(super) fn suspend_killed_turn(
        &self,
        marker: &TurnMarker,
    ) -> Result<(), hermes_runtime::store::StoreError> {
        let mut store = self.store();
        let active = store
            .session(&marker.session_id)?
            .is_some_and(|s| s.status == SessionStatus::Active);
        if active {
            store.set_status(&marker.session_id, SessionStatus::Suspended)?;
        }
        tracing::warn!(
            key = %marker.key,
            session = %marker.session_id,
            "a turn was killed midway; its session is suspended"
        );
        Ok(())
    }

    /// Clears the marker of a killed turn whose user got the notice, and
    /// releases its session lease.
    fn forget_orphan_turn(&self, key: &str) {
        let held = lock(&self.cluster.orphans).remove(key);
        self.finish_turn(key, held.as_ref());
    }

    /// The end of a turn (its reply handed to the adapter): its marker goes
    /// — under its session lease's fence, so a gateway that lost the lease
    /// cannot remove its successor's — and the lease is released, waking
    /// whoever waits for it.
    pub(super) fn finish_turn(&self, key: &str, lease: Option<&Held>) {
        let marker = turn_key(key);
        let fences: Vec<Fence> = lease.map(|h| h.fence().clone()).into_iter().collect();
        let cleared = self
            .store()
            .kv_commit_fenced(&[KvWrite::Delete(&marker)], &fences);
        if let Err(e) = cleared {
            tracing::error!(key, error = %e, "could not clear a turn marker; the next holder will send a needless notice");
        }
        if let Some(held) = lease {
            held.lose();
            release(self.lease_store(), held.fence());
        }
    }

    /// Acquires the session lease of `key` for a turn, waiting while another
    /// gateway runs one (asking it to stop). `None` when this gateway must
    /// not run it after all: shutdown began, or it no longer serves the bot.
    pub(super) async fn acquire_session(
        self: &Arc<Self>,
        key: &str,
        platform: &str,
    ) -> Option<Held> {
        let name = session_lease(key);
        // Whom we last asked to interrupt, and when: a notification is not
        // durable (the holder's listener may have been reconnecting), so the
        // request is repeated while the lease stays busy — the polling
        // safety net under the NOTIFY wake-up.
        let mut asked: Option<(String, Instant)> = None;
        loop {
            if self.stopping.load(std::sync::atomic::Ordering::SeqCst)
                || self.bot_fences(platform).is_none()
            {
                return None;
            }
            let released = self.cluster.released.notified();
            let inner = Arc::clone(self);
            let lease_name = name.clone();
            let attempt = hermes_runtime::task::spawn_blocking(move || {
                try_acquire(
                    inner.lease_store(),
                    &lease_name,
                    &inner.cluster.owner,
                    inner.cluster.timing.ttl,
                    inner.cluster.exclusive,
                    false,
                )
            })
            .await;
            match attempt {
                Ok(Ok(Acquired::Granted { held, .. })) => return Some(held),
                // Our own (the lease of a killed turn whose user is being
                // told): it is released soon, nothing to interrupt.
                Ok(Ok(Acquired::Busy { owner })) if owner == self.cluster.owner => {}
                Ok(Ok(Acquired::Busy { owner })) => {
                    // Queue mode waits for the running turn, here as on one
                    // gateway; interrupt mode asks it to stop.
                    let due = self.config.busy_mode == BusyMode::Interrupt
                        && asked.as_ref().is_none_or(|(whom, when)| {
                            *whom != owner || when.elapsed() >= self.cluster.timing.renew_every
                        });
                    if due {
                        if asked.is_none() {
                            tracing::info!(key, holder = %owner, "the session's turn runs on another gateway; asking it to stop");
                        }
                        let inner = Arc::clone(self);
                        let request = interrupt_request(&owner, &name);
                        let sent = hermes_runtime::task::spawn_blocking(move || {
                            lock(inner.lease_store()).notify(INTERRUPT_CHANNEL, &request)
                        })
                        .await;
                        if let Ok(Err(e)) = sent {
                            tracing::debug!(key, error = %e, "interrupt request not sent; asking again later");
                        }
                        asked = Some((owner, Instant::now()));
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!(key, error = %e, "cannot acquire the session's lease; retrying")
                }
                Err(e) => {
                    tracing::error!(error = %e, "acquiring a session lease panicked");
                    return None;
                }
            }
            tokio::select! {
                _ = released => {}
                _ = tokio::time::sleep(self.cluster.timing.retry_every) => {}
            }
        }
    }
}

/// Resolves once shutdown began.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Gives `fence`'s lease up and tells waiting gateways.
fn release(store: &Arc<Mutex<Store>>, fence: &Fence) {
    let mut store = lock(store);
    match store.lease_release(fence, None) {
        Ok(true) => {
            if let Err(e) = store.notify(RELEASED_CHANNEL, &fence.name) {
                tracing::debug!(error = %e, "release notification not sent");
            }
        }
        Ok(false) => {}
        Err(e) => {
            tracing::warn!(lease = %fence.name, error = %e, "could not release a lease; it lapses instead")
        }
    }
}
