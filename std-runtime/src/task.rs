//! Spawning on tokio with one task type per output, not per future.
//!
//! tokio makes its task machinery (the harness's poll, shutdown, join and
//! abort paths, ≈ 1 KB of code) once for every future type it spawns, and
//! again for each scheduler kind it is spawned on. The gateway spawns
//! some 170 distinct futures and blocking closures, which came to ≈ 0.2 MB
//! of the binary (issue 39's size anatomy, BENCHMARKS.md "Size"). Boxed
//! here first, every spawn of a given output type shares one instance;
//! the cost is one allocation per spawn, against the task's own.
//!
//! Everything above the runtime spawns through these; the tidy test
//! `layering` holds the rest of the tree to it.

use std::future::Future;
use std::pin::Pin;

use tokio::runtime::Handle;
use tokio::task::{JoinHandle, JoinSet};

/// A spawned future, boxed: the one future type of each output.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A blocking job, boxed: the one closure type of each output.
type BoxJob<T> = Box<dyn FnOnce() -> T + Send + 'static>;

fn boxed<F>(fut: F) -> BoxFuture<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    Box::pin(fut)
}

/// [`tokio::spawn`], boxed.
#[track_caller]
pub fn spawn<F>(fut: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(boxed(fut))
}

/// [`Handle::spawn`], boxed.
#[track_caller]
pub fn spawn_on<F>(handle: &Handle, fut: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    handle.spawn(boxed(fut))
}

/// [`JoinSet::spawn`], boxed.
#[track_caller]
pub fn spawn_in<F>(set: &mut JoinSet<F::Output>, fut: F)
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    set.spawn(boxed(fut));
}

/// [`tokio::task::spawn_blocking`], boxed.
#[track_caller]
pub fn spawn_blocking<F, T>(job: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(Box::new(job) as BoxJob<T>)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn boxed_spawns_run_and_report_their_output_and_panics() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            assert_eq!(spawn(async { 6 * 7 }).await.unwrap(), 42);
            assert_eq!(spawn_blocking(|| "done").await.unwrap(), "done");
            let mut set = JoinSet::new();
            for i in 0..3u32 {
                spawn_in(&mut set, async move { i });
            }
            let mut got: Vec<u32> = set.join_all().await;
            got.sort_unstable();
            assert_eq!(got, [0, 1, 2]);
            // A panic stays the task's, as with an unboxed spawn.
            let failed = spawn(async { panic!("boom") }).await.unwrap_err();
            assert!(failed.is_panic());
        });
        let on = spawn_on(rt.handle(), async { "on a handle" });
        assert_eq!(rt.block_on(on).unwrap(), "on a handle");
    }
}
