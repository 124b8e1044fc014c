//! An adapter's receiving loop on its own task (Email's IMAP watch,
//! Matrix's sync, Signal's `receive`): the connect/disconnect dance every
//! such adapter does, once. `connect` on a running loop does nothing;
//! otherwise the adapter prepares (logs in, reads its first position —
//! which may fail, leaving nothing running) and spawns the loop, which
//! gets a stop signal. `disconnect` signals it, waits for it to end within
//! a grace period, and aborts it if it does not.

use std::future::Future;
use std::time::Duration;

use tokio::sync::{Mutex, MutexGuard, watch};
use tokio::task::JoinHandle;

/// How long `disconnect` waits for a loop to end by itself.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// The loop of one adapter: at most one runs.
#[derive(Debug)]
pub struct RunningLoop {
    slot: Mutex<Option<Running>>,
    grace: Duration,
}

#[derive(Debug)]
struct Running {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// A loop being started: the slot stays taken (a second `connect` waits)
/// until [`Starting::spawn`], or is left empty when this is dropped (the
/// preparation failed).
#[derive(Debug)]
pub struct Starting<'a> {
    slot: MutexGuard<'a, Option<Running>>,
}

impl Default for RunningLoop {
    fn default() -> Self {
        RunningLoop::new(DEFAULT_GRACE)
    }
}

impl RunningLoop {
    /// No loop yet; [`RunningLoop::stop`] waits `grace` before it aborts.
    pub fn new(grace: Duration) -> Self {
        RunningLoop {
            slot: Mutex::new(None),
            grace,
        }
    }

    /// Starts, unless the loop runs already (`None`: nothing to do).
    pub async fn begin(&self) -> Option<Starting<'_>> {
        let slot = self.slot.lock().await;
        slot.is_none().then_some(Starting { slot })
    }

    /// Whether a loop was started and not stopped.
    pub async fn is_running(&self) -> bool {
        self.slot.lock().await.is_some()
    }

    /// Tells the loop to stop, waits up to the grace period for it to end,
    /// then aborts it. Nothing when none runs.
    pub async fn stop(&self) {
        let Some(mut running) = self.slot.lock().await.take() else {
            return;
        };
        let _ = running.stop.send(true);
        if tokio::time::timeout(self.grace, &mut running.task)
            .await
            .is_err()
        {
            tracing::warn!(grace = ?self.grace, "a receiving loop did not stop in time; aborted");
            running.task.abort();
        }
    }
}

impl Starting<'_> {
    /// Spawns `run` with the stop signal (`true`: stop) and keeps its task.
    pub fn spawn<F, Fut>(mut self, run: F)
    where
        F: FnOnce(watch::Receiver<bool>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (stop, stop_rx) = watch::channel(false);
        let task = hermes_runtime::task::spawn(run(stop_rx));
        *self.slot = Some(Running { stop, task });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn one_loop_runs_a_failed_start_leaves_none_and_stop_ends_or_aborts_it() {
        let runs = RunningLoop::new(Duration::from_millis(200));
        // A preparation that fails: nothing runs, the next start may go.
        drop(runs.begin().await.unwrap());
        assert!(!runs.is_running().await);

        let ended = Arc::new(AtomicUsize::new(0));
        let e = Arc::clone(&ended);
        runs.begin().await.unwrap().spawn(|mut stop| async move {
            while !*stop.borrow_and_update() {
                let _ = stop.changed().await;
            }
            e.fetch_add(1, Ordering::SeqCst);
        });
        assert!(runs.is_running().await);
        assert!(runs.begin().await.is_none(), "a second loop started");
        runs.stop().await;
        assert_eq!(ended.load(Ordering::SeqCst), 1, "the loop saw the stop");
        assert!(!runs.is_running().await);
        runs.stop().await;

        // A loop that ignores the signal is aborted after the grace.
        let (alive_tx, mut alive) = tokio::sync::mpsc::channel::<()>(1);
        runs.begin().await.unwrap().spawn(|_stop| async move {
            let _held = alive_tx;
            std::future::pending::<()>().await;
        });
        let started = std::time::Instant::now();
        runs.stop().await;
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert!(alive.recv().await.is_none(), "the loop still runs");
        assert!(runs.begin().await.is_some());
    }
}
