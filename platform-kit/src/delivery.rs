//! Messages a platform accepted and reported not delivered later — in a
//! status callback, after the send had returned `Ok` (a messaging window
//! that had closed, reported in a `failed` status webhook, issue 42).
//!
//! Two halves, both generic:
//! - Whoever must know what became of a send (the scheduler delivering a
//!   job's answer) runs it inside [`accepted_during`] and gets the ids of
//!   the messages the platform accepted meanwhile; adapters whose platform
//!   reports failures later call [`note_accepted`] with each id, on the
//!   send's own task.
//! - When the platform later says one of those messages failed, the adapter
//!   calls the handler the runner gave it
//!   ([`crate::adapter::PlatformAdapter::set_late_failures`]) with a
//!   [`LateFailure`]; the sender recognises its message by the id.

use std::future::Future;
use std::sync::{Arc, Mutex};

use hermes_runtime::sync::lock;

use crate::adapter::AdapterError;

/// A message the platform accepted, then reported not delivered.
#[derive(Debug)]
pub struct LateFailure {
    /// The platform ([`crate::adapter::PlatformAdapter::platform`]).
    pub platform: &'static str,
    /// The platform's id of the message, as given to [`note_accepted`].
    pub message_id: String,
    /// Why, with the platform's code: [`AdapterError::Undeliverable`] for a
    /// refusal sending again will not change, else the error it is.
    pub error: AdapterError,
}

/// What an adapter calls with each late failure. It returns quickly.
pub type LateFailureHandler = Arc<dyn Fn(LateFailure) + Send + Sync>;

tokio::task_local! {
    static ACCEPTED: Arc<Mutex<Vec<String>>>;
}

/// Runs `send` and returns its output with the ids of the messages the
/// platform accepted while it ran ([`note_accepted`], in order). Empty for
/// adapters that report no late failures.
pub async fn accepted_during<F: Future>(send: F) -> (F::Output, Vec<String>) {
    let ids = Arc::new(Mutex::new(Vec::new()));
    let output = ACCEPTED.scope(Arc::clone(&ids), send).await;
    let ids = std::mem::take(&mut *lock(&ids));
    (output, ids)
}

/// Called by an adapter, on the task of the send, once the platform
/// accepted a message it may later report failed. Outside
/// [`accepted_during`] it does nothing.
pub fn note_accepted(message_id: &str) {
    let _ = ACCEPTED.try_with(|ids| lock(ids).push(message_id.to_owned()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ids_noted_during_a_send_are_returned_and_nothing_leaks_outside() {
        note_accepted("before");
        let (out, ids) = accepted_during(async {
            note_accepted("m1");
            tokio::task::yield_now().await;
            note_accepted("m2");
            7
        })
        .await;
        assert_eq!(out, 7);
        assert_eq!(ids, ["m1", "m2"]);
        let (_, none) = accepted_during(async {}).await;
        assert!(none.is_empty());
        // Two sends at once keep their own ids.
        let a = accepted_during(async {
            tokio::task::yield_now().await;
            note_accepted("a");
        });
        let b = accepted_during(async { note_accepted("b") });
        let ((_, a), (_, b)) = tokio::join!(a, b);
        assert_eq!((a, b), (vec!["a".to_owned()], vec!["b".to_owned()]));
    }
}
