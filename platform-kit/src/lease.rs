//! Who may act, across processes: bot leases and session leases (SPEC X8).
//!
//! Several gateways may share one PostgreSQL database. A *bot lease*
//! (`bot:<platform>:<bot id>`) says which of them polls a Telegram bot,
//! holds a WeCom socket or serves a WeCom callback; the others stand by and
//! acquire it when it lapses. A *session lease* (`session:<session key>`)
//! says which one runs a turn of that session (G6 across processes). Both
//! are rows in the store ([`Store::lease_acquire`]) with a fencing epoch:
//! every write made for a lease carries its [`Fence`] and is refused once
//! someone else acquired it.
//!
//! A holder also fences *itself*, by its own monotonic clock: a lease is
//! [`Held::is_valid`] only until `ttl` after the start of its last
//! successful renewal. The database's copy lapses no earlier than that (it
//! was extended from a later instant), so when another gateway can take the
//! lease over, this one has already stopped acting — also when it was
//! stopped (SIGSTOP) or cut off from the database and wakes up later: the
//! monotonic clock went on, and the first thing it checks is this.
//!
//! On SQLite one gateway holds `$HERMES_HOME/gateway.lock`; it acquires
//! leases with `take_over` (whatever holder a lease names is a previous
//! process of this home, gone), so the same code runs there unchanged.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hermes_runtime::store::{Fence, LeaseGrant, Store, StoreError};
use hermes_runtime::sync::lock;
use tokio::sync::watch;

/// How leases are timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseTiming {
    /// A lease not renewed for this long lapses (and may be taken over).
    pub ttl: Duration,
    /// How often a holder renews (a third of `ttl`: two renewals may fail
    /// before the lease is at risk).
    pub renew_every: Duration,
    /// How often a standby tries to acquire a lease it does not hold.
    pub retry_every: Duration,
}

impl LeaseTiming {
    /// Timing for leases lapsing after `ttl`.
    pub fn with_ttl(ttl: Duration) -> Self {
        let ttl = ttl.max(Duration::from_millis(300));
        LeaseTiming {
            ttl,
            renew_every: ttl / 3,
            retry_every: (ttl / 5).clamp(Duration::from_millis(50), Duration::from_secs(1)),
        }
    }
}

impl Default for LeaseTiming {
    /// 10 s: a dead gateway's bot is taken over within about 11 s.
    fn default() -> Self {
        Self::with_ttl(Duration::from_secs(10))
    }
}

/// The notification channel on which a gateway asks the holder of a session
/// lease to interrupt its turn (payload: [`interrupt_request`]).
pub const INTERRUPT_CHANNEL: &str = "hermes_interrupt";
/// The channel on which a holder says it released a lease (payload: its
/// name), so waiters need not wait for their next poll.
pub const RELEASED_CHANNEL: &str = "hermes_released";

/// What a gateway sends on [`INTERRUPT_CHANNEL`] to ask `holder` to
/// interrupt the turn holding `lease`. Every gateway hears it — the asker
/// too, whose own turn of that session is waiting — so it names whom it is
/// for. Instance ids contain no space ([`instance_id`]).
pub fn interrupt_request(holder: &str, lease: &str) -> String {
    format!("{holder} {lease}")
}

/// The holder and lease named by an [`interrupt_request`].
pub fn parse_interrupt_request(payload: &str) -> Option<(&str, &str)> {
    payload.split_once(' ')
}

/// The lease name of a platform bot.
pub fn bot_lease(platform: &str, bot: &str) -> String {
    format!("bot:{platform}:{bot}")
}

/// The lease name of a session key.
pub fn session_lease(session_key: &str) -> String {
    format!("session:{session_key}")
}

/// This process's name in lease rows: `host:pid:random`, unique per run.
pub fn instance_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().replace(char::is_whitespace, "-"))
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}:{}:{:04x}", std::process::id(), rand_u16())
}

fn rand_u16() -> u16 {
    let mut buf = [0u8; 2];
    // SAFETY: getrandom writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n == 2 {
        u16::from_ne_bytes(buf)
    } else {
        // No randomness: the pid and host still make the id unique enough
        // for one machine's processes.
        0
    }
}

struct HeldInner {
    fence: Fence,
    ttl: Duration,
    /// `false` when nobody else can take the lease over (SQLite's file
    /// lock): then only a refused write or renewal ends it.
    bounded: bool,
    valid_until: Mutex<Instant>,
    lost: AtomicBool,
    changed: watch::Sender<()>,
}

/// A lease this process holds: its fence, and how long it may act on it.
#[derive(Clone)]
pub struct Held(Arc<HeldInner>);

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("fence", &self.0.fence)
            .field("valid", &self.is_valid())
            .finish()
    }
}

impl Held {
    /// A lease granted by a call that started at `asked_at`.
    pub fn new(fence: Fence, ttl: Duration, asked_at: Instant) -> Self {
        Self::build(fence, ttl, asked_at, true)
    }

    /// A lease nobody else can take over (this process holds SQLite's
    /// one-gateway lock): valid until lost, whatever the clock says.
    pub fn unbounded(fence: Fence, ttl: Duration) -> Self {
        Self::build(fence, ttl, Instant::now(), false)
    }

    fn build(fence: Fence, ttl: Duration, asked_at: Instant, bounded: bool) -> Self {
        let (changed, _) = watch::channel(());
        Held(Arc::new(HeldInner {
            fence,
            ttl,
            bounded,
            valid_until: Mutex::new(asked_at + ttl),
            lost: AtomicBool::new(false),
            changed,
        }))
    }

    /// What writes made for this lease carry.
    pub fn fence(&self) -> &Fence {
        &self.0.fence
    }

    /// Whether this process may still act for the lease: not lost, and
    /// renewed recently enough by its own clock.
    pub fn is_valid(&self) -> bool {
        !self.0.lost.load(Ordering::SeqCst)
            && (!self.0.bounded || Instant::now() < *lock(&self.0.valid_until))
    }

    /// A renewal that started at `asked_at` succeeded.
    pub fn renewed(&self, asked_at: Instant) {
        let mut until = lock(&self.0.valid_until);
        *until = (*until).max(asked_at + self.0.ttl);
        drop(until);
        self.0.changed.send_replace(());
    }

    /// The lease is gone (fenced, released, or lapsed by our clock), or is
    /// being given up; for good: a new acquisition makes a new [`Held`].
    pub fn lose(&self) {
        if !self.0.lost.swap(true, Ordering::SeqCst) {
            tracing::debug!(lease = %self.0.fence.name, epoch = self.0.fence.epoch, "lease given up");
        }
        self.0.changed.send_replace(());
    }

    /// Whether [`Held::lose`] was called.
    pub fn is_lost(&self) -> bool {
        self.0.lost.load(Ordering::SeqCst)
    }

    /// Resolves once the lease is no longer valid (lost, or not renewed in
    /// time by our clock), marking it lost.
    pub async fn invalidated(&self) {
        let mut changed = self.0.changed.subscribe();
        loop {
            if self.is_lost() {
                return;
            }
            if !self.0.bounded {
                if changed.changed().await.is_err() {
                    return;
                }
                continue;
            }
            let until = *lock(&self.0.valid_until);
            if Instant::now() >= until {
                self.lose();
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(until.into()) => {}
                r = changed.changed() => {
                    if r.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// Keeps the lease renewed through `store` (on the blocking pool) until
    /// it is lost; returns then. A renewal the database refuses (someone
    /// acquired it) loses it at once; one that fails (the database is
    /// unreachable) is retried at the next tick, and the lease is lost when
    /// its time runs out meanwhile.
    pub async fn keep(self, store: Arc<Mutex<Store>>, timing: LeaseTiming) {
        loop {
            tokio::select! {
                _ = self.invalidated() => return,
                _ = tokio::time::sleep(timing.renew_every) => {}
            }
            let asked_at = Instant::now();
            let fence = self.fence().clone();
            let store = Arc::clone(&store);
            let ttl = self.0.ttl;
            let renewed =
                hermes_runtime::task::spawn_blocking(move || lock(&store).lease_renew(&fence, ttl))
                    .await;
            match renewed {
                Ok(Ok(Some(_))) => self.renewed(asked_at),
                Ok(Ok(None)) => {
                    tracing::warn!(lease = %self.fence().name, "another gateway acquired the lease");
                    self.lose();
                    return;
                }
                Ok(Err(e)) => {
                    tracing::warn!(lease = %self.fence().name, error = %e, "cannot renew the lease; retrying");
                }
                Err(e) => tracing::error!(error = %e, "renewing a lease panicked"),
            }
        }
    }
}

/// What an adapter checks before acting for its bot: no lease system at
/// all (an adapter used on its own: always open), the lease the runner
/// holds (open while [`Held::is_valid`]), or none any more (closed).
#[derive(Debug, Default)]
pub struct LeaseGate(Mutex<GateState>);

#[derive(Debug, Default)]
enum GateState {
    #[default]
    Free,
    Leased(Held),
    Closed,
}

impl LeaseGate {
    /// What [`crate::adapter::PlatformAdapter::set_lease`] was given.
    pub fn set(&self, lease: Option<Held>) {
        *lock(&self.0) = match lease {
            Some(held) => GateState::Leased(held),
            None => GateState::Closed,
        };
    }

    /// Whether the adapter may act for its bot now.
    pub fn is_open(&self) -> bool {
        match &*lock(&self.0) {
            GateState::Free => true,
            GateState::Leased(held) => held.is_valid(),
            GateState::Closed => false,
        }
    }

    /// The lease, when there is one (its fence goes with saved state).
    pub fn lease(&self) -> Option<Held> {
        match &*lock(&self.0) {
            GateState::Leased(held) => Some(held.clone()),
            _ => None,
        }
    }
}

/// What an attempt to acquire found.
#[derive(Debug)]
pub enum Acquired {
    /// Ours now; `previous_state` is what a holder that lapsed (rather than
    /// released) left — a turn that was running when it died.
    Granted {
        /// The lease.
        held: Held,
        /// The lapsed holder's note, if any.
        previous_state: Option<String>,
    },
    /// Another holder's, live.
    Busy {
        /// Who holds it.
        owner: String,
    },
}

/// Tries to acquire `name` once (blocking: call on the blocking pool);
/// `take_over` when this process alone uses the database (SQLite's lock).
/// A `bounded` lease is valid only until its time runs out by our own
/// clock (what must stop at once when we were stopped: polling a bot); an
/// unbounded one until a renewal is refused (what the database's fences
/// guard anyway: a turn's writes).
pub fn try_acquire(
    store: &Mutex<Store>,
    name: &str,
    owner: &str,
    ttl: Duration,
    take_over: bool,
    bounded: bool,
) -> Result<Acquired, StoreError> {
    let asked_at = Instant::now();
    let grant = lock(store).lease_acquire(name, owner, ttl, None, take_over)?;
    Ok(match grant {
        LeaseGrant::Granted {
            fence, previous, ..
        } => Acquired::Granted {
            // Taking over whatever holder is recorded means nobody else can
            // compete: no deadline of our own.
            held: if bounded && !take_over {
                Held::new(fence, ttl, asked_at)
            } else {
                Held::unbounded(fence, ttl)
            },
            previous_state: previous.filter(|p| p.lapsed).and_then(|p| p.state),
        },
        LeaseGrant::Held(record) => Acquired::Busy {
            owner: record.owner.unwrap_or_default(),
        },
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn fence() -> Fence {
        Fence {
            name: "bot:test:1".into(),
            owner: "me".into(),
            epoch: 1,
        }
    }

    #[tokio::test]
    async fn a_lease_not_renewed_in_time_is_invalid_by_our_own_clock() {
        let held = Held::new(fence(), Duration::from_millis(300), Instant::now());
        assert!(held.is_valid());
        let started = Instant::now();
        let waited = tokio::time::timeout(Duration::from_secs(30), held.invalidated()).await;
        assert!(waited.is_ok());
        assert!(started.elapsed() < Duration::from_secs(30));
        assert!(held.is_lost());
        assert!(!held.is_valid());
    }

    #[test]
    fn renewal_extends_and_losing_is_final() {
        let start = Instant::now();
        let held = Held::new(fence(), Duration::from_millis(200), start);
        held.renewed(start + Duration::from_secs(3600));
        assert!(held.is_valid());
        held.lose();
        assert!(!held.is_valid());
        held.renewed(Instant::now() + Duration::from_secs(3600));
        assert!(!held.is_valid(), "a lost lease stays lost");
        let ids = (instance_id(), instance_id());
        assert_ne!(ids.0, ids.1);
        assert!(
            !ids.0.contains(' '),
            "interrupt requests split at the first space"
        );
        let request = interrupt_request(&ids.0, "session:agent:main:test:group:a b");
        assert_eq!(
            parse_interrupt_request(&request),
            Some((ids.0.as_str(), "session:agent:main:test:group:a b"))
        );
        assert!(ids.0.contains(&format!(":{}:", std::process::id())));
    }
}
