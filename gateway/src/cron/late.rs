//! A scheduled answer the platform accepted and later reported not
//! delivered (a `failed` status callback, issue 42): its run, recorded as
//! delivered, becomes "delivery failed" with the platform's reason.
//!
//! The delivery notes the ids of the messages the platform accepted
//! (`hermes_platform_kit::delivery::accepted_during`) and keeps them in the
//! store — `cron:sent:PLATFORM:MESSAGE_ID:RUN_ID`, its value the time sent
//! — so a report that comes after a restart still finds its run. Adapters
//! report through the handler the scheduler gives them
//! ([`crate::adapter::PlatformAdapter::set_late_failures`]).
//!
//! A report can beat the record (the callback arrives while the delivery is
//! still writing): a report whose message is not known yet is held, in
//! memory, and the record claims it. Both sides take this table's lock, then
//! the store's, so one of them always sees the other. The run changes only
//! from "delivered" ([`Store::run_failed_after_delivery`]): the same report
//! twice changes it once.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::delivery::{LateFailure, LateFailureHandler};
use hermes_core::Clock;
use hermes_runtime::store::{Store, StoreError};
use hermes_runtime::sync::lock;

/// Where the sent messages of deliveries are kept.
pub const SENT_PREFIX: &str = "cron:sent:";
/// How long a sent message is remembered: a platform may keep trying to
/// deliver a message for weeks (up to 30 days) before it reports failure.
pub const SENT_KEPT_MS: u64 = 30 * 86_400_000;
/// Reports held for messages not recorded yet.
const HELD_REPORTS: usize = 256;

/// The scheduler's side of late failures.
pub(crate) struct LateFailures {
    store: Arc<Mutex<Store>>,
    clock: Arc<dyn Clock>,
    /// Reports no recorded message matched yet: (platform, message, reason).
    held: Mutex<VecDeque<(String, String, String)>>,
}

fn key(platform: &str, message_id: &str, run_id: &str) -> String {
    format!("{SENT_PREFIX}{platform}:{message_id}:{run_id}")
}

impl LateFailures {
    pub(crate) fn new(store: Arc<Mutex<Store>>, clock: Arc<dyn Clock>) -> Arc<Self> {
        Arc::new(LateFailures {
            store,
            clock,
            held: Mutex::new(VecDeque::new()),
        })
    }

    /// The handler adapters report to.
    pub(crate) fn handler(self: &Arc<Self>) -> LateFailureHandler {
        let me = Arc::downgrade(self);
        Arc::new(move |failure: LateFailure| {
            if let Some(me) = me.upgrade() {
                me.report(&failure);
            }
        })
    }

    /// After the run was recorded as delivered: remembers the messages the
    /// delivery made, and applies a report that came first.
    pub(crate) fn remember(
        &self,
        platform: &str,
        run_id: &str,
        message_ids: &[String],
    ) -> Result<(), StoreError> {
        if message_ids.is_empty() {
            return Ok(());
        }
        let now = self.clock.now_ms().to_string();
        let mut held = lock(&self.held);
        let mut store = lock(&self.store);
        for id in message_ids {
            store.kv_set(&key(platform, id, run_id), &now)?;
        }
        let mut early = None;
        held.retain(|(p, id, reason)| {
            let ours = p == platform && message_ids.contains(id);
            if ours && early.is_none() {
                early = Some(reason.clone());
            }
            !ours
        });
        if let Some(reason) = early {
            apply(&mut store, platform, run_id, &reason)?;
        }
        Ok(())
    }

    /// A platform reported one of its messages failed.
    fn report(&self, failure: &LateFailure) {
        let reason = failure.error.to_string();
        let (platform, id) = (failure.platform, failure.message_id.as_str());
        let mut held = lock(&self.held);
        let mut store = lock(&self.store);
        let prefix = format!("{SENT_PREFIX}{platform}:{id}:");
        let runs: Vec<String> = match store.kv_scan(&prefix) {
            Ok(found) => found
                .into_iter()
                .filter_map(|(k, _)| k.strip_prefix(&prefix).map(str::to_owned))
                // A longer message id with this one as its prefix.
                .filter(|run| !run.contains(':'))
                .collect(),
            Err(e) => {
                tracing::warn!(platform, message = id, error = %e, "cannot look up which delivery a failed message belongs to");
                return;
            }
        };
        if runs.is_empty() {
            if held.len() >= HELD_REPORTS {
                held.pop_front();
            }
            held.push_back((platform.to_owned(), id.to_owned(), reason));
            return;
        }
        for run in runs {
            if let Err(e) = apply(&mut store, platform, &run, &reason) {
                tracing::warn!(platform, run = %run, error = %e, "cannot record a delivery that failed late");
            }
        }
    }
}

fn apply(store: &mut Store, platform: &str, run_id: &str, reason: &str) -> Result<(), StoreError> {
    let outcome = format!("delivery failed: {reason}");
    if store.run_failed_after_delivery(run_id, reason, &outcome)? {
        tracing::warn!(run = %run_id, platform, %reason, "a delivered scheduled answer was reported failed by the platform; recorded as delivery failed");
    }
    Ok(())
}

/// Forgets sent messages older than [`SENT_KEPT_MS`].
pub(crate) fn prune(store: &mut Store, now_ms: u64) -> Result<usize, StoreError> {
    store.kv_prune_below(SENT_PREFIX, now_ms.saturating_sub(SENT_KEPT_MS))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::time::Duration;

    use hermes_runtime::store::{Claim, JobRecord, LeaseGrant, RunState, RunUpdate, job_lease};

    use super::*;
    use crate::adapter::AdapterError;

    /// A clock the test moves.
    struct ManualClock(std::sync::atomic::AtomicU64);

    impl ManualClock {
        fn new(ms: u64) -> Arc<Self> {
            Arc::new(Self(std::sync::atomic::AtomicU64::new(ms)))
        }

        fn advance(&self, by: Duration) {
            let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
            self.0.fetch_add(ms, std::sync::atomic::Ordering::AcqRel);
        }
    }

    impl Clock for ManualClock {
        fn now_ms(&self) -> u64 {
            self.0.load(std::sync::atomic::Ordering::Acquire)
        }
    }

    const T0: u64 = 1_700_000_000_000;

    /// A job with one run recorded as delivered.
    fn delivered_run(store: &Arc<Mutex<Store>>, job_id: &str) -> String {
        let mut s = lock(store);
        let job = JobRecord::one_off(job_id.into(), "n".into(), "p".into(), "x:1".into(), T0);
        s.job_insert(&job).unwrap();
        let run_id = format!("r{job_id}");
        assert!(
            s.job_claim(&Claim {
                job_id,
                due_ms: T0,
                next_run_ms: None,
                run_id: &run_id,
                state: RunState::Running,
                now_ms: T0,
            })
            .unwrap()
        );
        let lease = s
            .lease_acquire(
                &job_lease(job_id),
                "t",
                Duration::from_secs(60),
                None,
                false,
            )
            .unwrap();
        let LeaseGrant::Granted { fence, .. } = lease else {
            panic!("{lease:?}")
        };
        let update = RunUpdate {
            state: RunState::Delivered,
            session_id: None,
            answer: Some("a".into()),
            error: None,
            attempts: 1,
            next_attempt_ms: None,
            finished_at_ms: Some(T0),
            outcome: "delivered".into(),
        };
        s.run_update(&run_id, &update, &fence).unwrap();
        run_id
    }

    fn failure(id: &str) -> LateFailure {
        LateFailure {
            platform: "x",
            message_id: id.into(),
            error: AdapterError::Undeliverable {
                platform: "x",
                message: "outside the window (error 7)".into(),
            },
        }
    }

    fn state(store: &Arc<Mutex<Store>>, job_id: &str) -> (RunState, Option<String>) {
        let run = lock(store).job_runs(job_id, 1).unwrap().remove(0);
        (run.state, run.error)
    }

    #[test]
    fn a_report_before_the_record_and_one_after_a_restart_both_reach_their_run() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Mutex::new(Store::open(&dir.path().join("s.db")).unwrap()));
        let clock = ManualClock::new(T0);
        let late = LateFailures::new(Arc::clone(&store), clock.clone());
        let report = late.handler();

        // The status beats the record: held, then claimed by it.
        let early = delivered_run(&store, "j1");
        report(failure("m1"));
        assert_eq!(state(&store, "j1").0, RunState::Delivered);
        late.remember("x", &early, &["m1".into()]).unwrap();
        let failed = state(&store, "j1");
        assert_eq!(failed.0, RunState::DeliveryFailed);
        assert_eq!(failed.1.as_deref(), Some("outside the window (error 7)"));

        // Recorded, then the process restarts: the store still knows.
        let run = delivered_run(&store, "j2");
        late.remember("x", &run, &["m2:z".into(), "m3".into()])
            .unwrap();
        drop((late, report));
        let restarted = LateFailures::new(Arc::clone(&store), clock.clone());
        // A message id that only starts like ours is not ours.
        (restarted.handler())(failure("m2"));
        assert_eq!(state(&store, "j2").0, RunState::Delivered);
        (restarted.handler())(failure("m3"));
        assert_eq!(state(&store, "j2").0, RunState::DeliveryFailed);

        // Forgotten after 30 days.
        clock.advance(Duration::from_millis(SENT_KEPT_MS + 1));
        assert_eq!(prune(&mut lock(&store), clock.now_ms()).unwrap(), 3);
        assert!(lock(&store).kv_scan(SENT_PREFIX).unwrap().is_empty());
    }
}
