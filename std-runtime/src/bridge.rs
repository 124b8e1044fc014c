//! The async bridge: ONE persistent tokio runtime that runs async tool bodies
//! for the synchronous agent loop (SPEC L9).
//!
//! The loop never becomes async. A tool that needs async IO (a WebSocket, a
//! browser-like session, a pooled HTTP client) keeps an `Arc<AsyncBridge>` and
//! calls [`AsyncBridge::run_tool`] from its synchronous `Tool::call`. The
//! future is spawned on the bridge's runtime and the calling thread waits on a
//! std channel for the result.
//!
//! # Guarantees
//! - **One runtime for the whole process lifetime of the bridge.** It is
//!   created once by [`AsyncBridge::new`] (or borrowed through
//!   [`AsyncBridge::from_handle`]) and reused by every call, so sockets,
//!   sessions and background tasks created in one tool call are still alive in
//!   the next.
//! - **No `Runtime::block_on` anywhere.** Waiting is a std channel receive, so
//!   the bridge may be used from a plain thread, from a `spawn_blocking` thread
//!   of the same runtime, and — through `block_in_place` — from a worker of a
//!   multi-thread runtime. Calling it from inside a *current-thread* runtime's
//!   own task cannot make progress; [`AsyncBridge::run_tool`] then fails at its
//!   timeout instead of hanging, [`AsyncBridge::block_on`] would hang (it has no
//!   timeout), so don't.
//! - **Panics and timeouts are contained.** A panicking tool body becomes
//!   `ToolError::Failed("tool panicked: …")`; a body that exceeds its timeout is
//!   aborted (at its next `.await`) and becomes
//!   `ToolError::Failed("async tool timed out after …")`. The loop goes on.

use std::any::Any;
use std::future::Future;
use std::sync::mpsc;
use std::time::Duration;

use hermes_core::ToolError;
use tokio::runtime::{Handle, Runtime, RuntimeFlavor};
use tokio::task::JoinError;

/// Worker threads of the runtime the bridge creates. Async tools are IO-bound
/// and the machine may have only two cores: two workers keep one worker free
/// when a tool body blocks a little, without idle threads everywhere.
const WORKER_THREADS: usize = 2;

/// How often [`AsyncBridge::run_tool_interruptible`] looks at the
/// interrupt flag: the longest a user waits for an interrupt to register.
pub const INTERRUPT_POLL: Duration = Duration::from_millis(50);
/// How long an interrupted body may take to stop cleanly before it is
/// aborted.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// Why [`AsyncBridge::block_on`] (or the machinery under `run_tool`) did not
/// produce the future's output. None of these is retryable by the bridge; the
/// caller decides.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BridgeError {
    /// The future panicked; the payload's message is kept. The runtime itself
    /// is unaffected and keeps serving other calls.
    #[error("task panicked: {0}")]
    Panicked(String),
    /// The future did not finish in time and was aborted.
    #[error("timed out after {0:?}")]
    TimedOut(Duration),
    /// The runtime shut down (or the task was cancelled) before the future
    /// finished. Happens only while the process is stopping.
    #[error("the async runtime shut down before the task finished")]
    ShutDown,
}

/// The persistent async runtime shared by every async tool (SPEC L9).
///
/// Cheap to share: wrap it in an `Arc` and hand clones to the tools.
#[derive(Debug)]
pub struct AsyncBridge {
    handle: Handle,
    /// `Some` when the bridge created (and therefore owns) the runtime.
    owned: Option<Runtime>,
}

impl AsyncBridge {
    /// Creates the one runtime: multi-thread with two workers, IO and time
    /// drivers enabled. Call this once at start-up.
    pub fn new() -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKER_THREADS)
            .thread_name("hermes-async")
            .enable_all()
            .build()?;
        Ok(AsyncBridge {
            handle: runtime.handle().clone(),
            owned: Some(runtime),
        })
    }

    /// Uses a runtime someone else owns (a front-end that is already async,
    /// such as the gateway). The bridge never shuts it down.
    pub fn from_handle(handle: Handle) -> Self {
        AsyncBridge {
            handle,
            owned: None,
        }
    }

    /// The runtime's handle, for spawning background tasks that outlive a
    /// tool call.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Runs an async tool body to completion from the synchronous loop.
    ///
    /// Panics inside become `ToolError::Failed("tool panicked: …")`; exceeding
    /// `timeout` aborts the body and becomes
    /// `ToolError::Failed("async tool timed out after …")`. Both are errors the
    /// model can read (SPEC L8), so the loop goes on.
    pub fn run_tool<F>(&self, timeout: Duration, fut: F) -> Result<String, ToolError>
    where
        F: Future<Output = Result<String, ToolError>> + Send + 'static,
    {
        match self.wait(fut, Some(timeout)) {
            Ok(result) => result,
            Err(BridgeError::Panicked(msg)) => {
                Err(ToolError::Failed(format!("tool panicked: {msg}")))
            }
            Err(BridgeError::TimedOut(d)) => Err(ToolError::Failed(format!(
                "async tool timed out after {d:?}"
            ))),
            Err(BridgeError::ShutDown) => Err(ToolError::Failed(
                "async tool did not finish: the async runtime is shutting down".into(),
            )),
        }
    }

    /// [`run_tool`](Self::run_tool) for a body that can stop cleanly when
    /// the user interrupts (an MCP call tells its server to cancel).
    ///
    /// `body` receives a signal that fires once `interrupted()` turns true
    /// (polled every [`INTERRUPT_POLL`]); from then on the body has
    /// [`STOP_GRACE`] to finish before it is aborted and the call answers
    /// "interrupted". `timeout` bounds the whole call as in `run_tool`.
    pub fn run_tool_interruptible<B, F>(
        &self,
        timeout: Duration,
        interrupted: &dyn Fn() -> bool,
        body: B,
    ) -> Result<String, ToolError>
    where
        B: FnOnce(tokio::sync::oneshot::Receiver<()>) -> F,
        F: Future<Output = Result<String, ToolError>> + Send + 'static,
    {
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let task = crate::task::spawn_on(&self.handle, body(stop_rx));
        let abort = task.abort_handle();
        let (tx, rx) = mpsc::sync_channel::<Result<Result<String, ToolError>, JoinError>>(1);
        crate::task::spawn_on(&self.handle, async move {
            let _ = tx.send(task.await);
        });
        let deadline = std::time::Instant::now() + timeout;
        let mut stop_tx = Some(stop_tx);
        let mut stop_deadline = None;
        let received = wait_outside_runtime(|| {
            loop {
                match rx.recv_timeout(INTERRUPT_POLL) {
                    Ok(r) => return Ok(r),
                    Err(mpsc::RecvTimeoutError::Disconnected) => return Err(BridgeError::ShutDown),
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                }
                let now = std::time::Instant::now();
                if now >= deadline {
                    return Err(BridgeError::TimedOut(timeout));
                }
                if stop_deadline.is_some_and(|d| now >= d) {
                    return Err(BridgeError::ShutDown);
                }
                if stop_tx.is_some() && interrupted() {
                    if let Some(tx) = stop_tx.take() {
                        let _ = tx.send(());
                    }
                    stop_deadline = Some(now + STOP_GRACE);
                }
            }
        });
        match received {
            Ok(Ok(result)) => result,
            Ok(Err(join_error)) => match join_error_to_bridge(join_error) {
                BridgeError::Panicked(msg) => {
                    Err(ToolError::Failed(format!("tool panicked: {msg}")))
                }
                _ => Err(ToolError::Failed("[interrupted]".into())),
            },
            Err(e) => {
                abort.abort();
                match e {
                    BridgeError::TimedOut(d) => Err(ToolError::Failed(format!(
                        "async tool timed out after {d:?}"
                    ))),
                    _ if stop_deadline.is_some() => Err(ToolError::Failed("[interrupted]".into())),
                    _ => Err(ToolError::Failed(
                        "async tool did not finish: the async runtime is shutting down".into(),
                    )),
                }
            }
        }
    }

    /// Runs `fut` on the bridge's runtime and waits for its output, with no
    /// timeout. For set-up work (opening a session) outside a tool call.
    pub fn block_on<F>(&self, fut: F) -> Result<F::Output, BridgeError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.wait(fut, None)
    }

    /// Spawns `fut` and waits on a std channel. The task is `fut` itself
    /// (boxed, not wrapped in a forwarding future), so a panic is caught by
    /// tokio and reported through the `JoinHandle`, which a small
    /// forwarding task turns into a message.
    fn wait<F>(&self, fut: F, timeout: Option<Duration>) -> Result<F::Output, BridgeError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let task = crate::task::spawn_on(&self.handle, fut);
        let abort = task.abort_handle();
        let (tx, rx) = mpsc::sync_channel::<Result<F::Output, JoinError>>(1);
        crate::task::spawn_on(&self.handle, async move {
            // The receiver may be gone (timed out); nothing to do then.
            let _ = tx.send(task.await);
        });

        let received = wait_outside_runtime(|| match timeout {
            Some(t) => rx.recv_timeout(t).map_err(|e| match e {
                mpsc::RecvTimeoutError::Timeout => BridgeError::TimedOut(t),
                mpsc::RecvTimeoutError::Disconnected => BridgeError::ShutDown,
            }),
            None => rx.recv().map_err(|_| BridgeError::ShutDown),
        });
        match received {
            Ok(Ok(output)) => Ok(output),
            Ok(Err(join_error)) => Err(join_error_to_bridge(join_error)),
            Err(e) => {
                // Timed out (or shut down): make sure the body stops instead of
                // running on unobserved.
                abort.abort();
                Err(e)
            }
        }
    }
}

impl Drop for AsyncBridge {
    fn drop(&mut self) {
        if let Some(runtime) = self.owned.take() {
            // Dropping a runtime from inside an async context panics; the
            // background shutdown never blocks, so it is safe everywhere. From a
            // plain thread give running tasks a moment to finish cleanly.
            if Handle::try_current().is_ok() {
                runtime.shutdown_background();
            } else {
                runtime.shutdown_timeout(Duration::from_secs(1));
            }
        }
    }
}

/// Runs a blocking wait. On a worker thread of a multi-thread runtime the wait
/// goes through `block_in_place`, so the worker's other tasks (possibly the
/// very task being waited for) move to another thread instead of starving.
/// On a plain thread, a `spawn_blocking` thread or a current-thread
/// runtime (where `block_in_place` is not allowed) it is a plain call.
/// The gateway runs its brief store I/O from async tasks through it too.
pub fn wait_outside_runtime<R>(f: impl FnOnce() -> R) -> R {
    match Handle::try_current() {
        Ok(current) if current.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

fn join_error_to_bridge(err: JoinError) -> BridgeError {
    if err.is_panic() {
        BridgeError::Panicked(panic_message(err.into_panic()))
    } else {
        BridgeError::ShutDown
    }
}

fn panic_message(payload: Box<dyn Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
