//! Approving dangerous commands from a chat (SPEC X7): the gateway's
//! [`Approver`].
//!
//! When a session's terminal wants to run a command that needs approval
//! (`hermes_runtime::tools::approval`), the turn's thread sends the chat an
//! approval message and waits. The user answers `/approve` (once),
//! `/approve always` (this danger, for the rest of the conversation) or
//! `/deny`; those commands are answered at once by the runner's intake, not
//! queued behind the waiting turn. No answer within `[agent]
//! approval_timeout` (default 5 min) denies; so does an interrupt (a new
//! message in interrupt mode, `/stop`, `/new`, shutdown). The model is told
//! the command was not run.
//!
//! The hub knows where to send a session's question because the runner
//! [binds](ApprovalHub::bind) the session to its chat for the length of a
//! turn; an approver built for a session outside a turn has nobody to ask
//! and denies.

use std::collections::HashMap;
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use hermes_core::InterruptFlag;
use hermes_runtime::sync::lock;
use hermes_runtime::tools::{ApprovalRequest, Approver, Decision};

/// How often a waiting approval looks at the interrupt flag.
const POLL: Duration = Duration::from_millis(100);

/// Where a session's approval question goes: its chat, during a turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The session key (`/approve` arrives under it).
    pub key: String,
    /// The platform of the chat.
    pub platform: String,
    /// The chat.
    pub chat_id: String,
    /// The user message the turn answers (the question replies to it).
    pub reply_to: String,
}

/// A user's answer to an approval question.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// `/approve`: run it once.
    Approve,
    /// `/approve always`: run it, and the same kind unasked from now on.
    ApproveAlways,
    /// `/deny`.
    Deny,
}

type Notifier = Box<dyn Fn(&Route, String) + Send + Sync>;

/// The process's approval questions: which sessions are in a turn (and
/// where their chat is), and which are waiting for an answer.
pub struct ApprovalHub {
    timeout: Duration,
    routes: Mutex<HashMap<String, Route>>,
    /// Session key → the waiting question's answer channel.
    waiting: Mutex<HashMap<String, (u64, SyncSender<Verdict>)>>,
    next_question: std::sync::atomic::AtomicU64,
    notifier: OnceLock<Notifier>,
}

impl std::fmt::Debug for ApprovalHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalHub")
            .field("timeout", &self.timeout)
            .field("waiting", &lock(&self.waiting).len())
            .finish_non_exhaustive()
    }
}

/// Unbinds a session from its chat when its turn ends.
#[derive(Debug)]
pub struct RouteGuard {
    hub: Arc<ApprovalHub>,
    session_id: String,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        lock(&self.hub.routes).remove(&self.session_id);
    }
}

impl ApprovalHub {
    /// A hub whose questions expire after `timeout`.
    pub fn new(timeout: Duration) -> Arc<Self> {
        Arc::new(ApprovalHub {
            timeout,
            routes: Mutex::default(),
            waiting: Mutex::default(),
            next_question: std::sync::atomic::AtomicU64::new(1),
            notifier: OnceLock::new(),
        })
    }

    /// How long a question waits.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The approver for the tools of session `session_id`.
    pub fn approver(self: &Arc<Self>, session_id: &str) -> Arc<dyn Approver> {
        Arc::new(ChatApprover {
            hub: Arc::clone(self),
            session_id: session_id.to_owned(),
        })
    }

    /// Sets how questions are sent (the runner does, once, at start).
    pub fn set_notifier(&self, notify: Notifier) {
        let _ = self.notifier.set(notify);
    }

    /// Binds `session_id` to `route` until the guard is dropped.
    pub fn bind(self: &Arc<Self>, session_id: &str, route: Route) -> RouteGuard {
        lock(&self.routes).insert(session_id.to_owned(), route);
        RouteGuard {
            hub: Arc::clone(self),
            session_id: session_id.to_owned(),
        }
    }

    /// Delivers the user's answer for session `key`; `false` when nothing
    /// was waiting.
    pub fn answer(&self, key: &str, verdict: Verdict) -> bool {
        match lock(&self.waiting).remove(key) {
            Some((_, tx)) => tx.try_send(verdict).is_ok(),
            None => false,
        }
    }

    /// Whether session `key` waits for an answer.
    pub fn is_waiting(&self, key: &str) -> bool {
        lock(&self.waiting).contains_key(key)
    }

    fn notify(&self, route: &Route, text: String) {
        match self.notifier.get() {
            Some(n) => n(route, text),
            None => tracing::error!("approval question not sent: the runner has not started"),
        }
    }

    fn ask(
        &self,
        session_id: &str,
        request: &ApprovalRequest<'_>,
        interrupt: &InterruptFlag,
    ) -> Decision {
        let Some(route) = lock(&self.routes).get(session_id).cloned() else {
            return Decision::Deny("there was no chat to ask".into());
        };
        let id = self
            .next_question
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = mpsc::sync_channel(1);
        lock(&self.waiting).insert(route.key.clone(), (id, tx));
        let limit = human(self.timeout);
        let reasons = request.reasons();
        self.notify(
            &route,
            format!(
                "⚠️ Approval needed: I want to run\n\n```\n{}\n```\n\nThis is {reasons}. Reply \
                 /approve to run it once, /approve always to also allow this kind of command for \
                 the rest of this conversation, or /deny. No answer within {limit} means no.",
                // A fence inside the command would end the block early.
                request.command.trim().replace("```", "'''")
            ),
        );
        let started = Instant::now();
        let decision = loop {
            match rx.recv_timeout(POLL) {
                Ok(Verdict::Approve) => break Decision::Once,
                Ok(Verdict::ApproveAlways) => break Decision::Always,
                Ok(Verdict::Deny) => break Decision::Deny("the user said no (/deny)".into()),
                Err(RecvTimeoutError::Disconnected) => {
                    break Decision::Deny("the question was withdrawn".into());
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            if interrupt.is_set() {
                break Decision::Deny("the turn was interrupted before the user answered".into());
            }
            if started.elapsed() >= self.timeout {
                self.notify(
                    &route,
                    format!("⌛ No answer within {limit}: the command was not run."),
                );
                break Decision::Deny(format!("no answer within {limit}"));
            }
        };
        let mut waiting = lock(&self.waiting);
        if waiting.get(&route.key).is_some_and(|(q, _)| *q == id) {
            waiting.remove(&route.key);
        }
        decision
    }
}

/// "45 s", "5 min", "1 h 30 min".
pub(crate) fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s} s"),
        60..3600 if s.is_multiple_of(60) => format!("{} min", s / 60),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        _ if s.is_multiple_of(3600) => format!("{} h", s / 3600),
        _ => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

/// The approver one session's terminal uses.
struct ChatApprover {
    hub: Arc<ApprovalHub>,
    session_id: String,
}

impl Approver for ChatApprover {
    fn decide(&self, request: &ApprovalRequest<'_>, interrupt: &InterruptFlag) -> Decision {
        self.hub.ask(&self.session_id, request, interrupt)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use hermes_runtime::tools::DANGERS;
    use hermes_runtime::tools::approval::Danger;

    static RECURSIVE_DELETE: [&Danger; 1] = [&DANGERS[0]];

    fn request(command: &str) -> ApprovalRequest<'_> {
        ApprovalRequest {
            tool: "terminal",
            command,
            dangers: &RECURSIVE_DELETE,
        }
    }

    fn hub_with_log(timeout: Duration) -> (Arc<ApprovalHub>, Arc<Mutex<Vec<String>>>) {
        let hub = ApprovalHub::new(timeout);
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        hub.set_notifier(Box::new(move |route, text| {
            lock(&sink).push(format!("{}: {text}", route.chat_id));
        }));
        (hub, log)
    }

    fn route() -> Route {
        Route {
            key: "k".into(),
            platform: "test".into(),
            chat_id: "c1".into(),
            reply_to: "m1".into(),
        }
    }

    #[test]
    fn an_answer_reaches_the_waiting_turn() {
        let (hub, log) = hub_with_log(Duration::from_secs(60));
        let _bound = hub.bind("s1", route());
        let approver = hub.approver("s1");
        let asker = std::thread::spawn(move || {
            approver.decide(&request("rm -rf x"), &InterruptFlag::new())
        });
        while !hub.is_waiting("k") {
            std::thread::yield_now();
        }
        assert!(hub.answer("k", Verdict::ApproveAlways));
        assert_eq!(asker.join().unwrap(), Decision::Always);
        assert!(!hub.answer("k", Verdict::Deny), "nothing waits any more");
        let sent = lock(&log).clone();
        assert_eq!(sent.len(), 1);
        assert!(sent[0].starts_with("c1: ⚠️ Approval needed"), "{sent:?}");
        assert!(
            sent[0].contains("rm -rf x") && sent[0].contains("/approve"),
            "{sent:?}"
        );
    }

    #[test]
    fn silence_and_interrupts_deny() {
        let (hub, log) = hub_with_log(Duration::from_millis(300));
        let _bound = hub.bind("s1", route());
        let d = hub
            .approver("s1")
            .decide(&request("reboot"), &InterruptFlag::new());
        assert!(
            matches!(d, Decision::Deny(ref why) if why.contains("no answer")),
            "{d:?}"
        );
        assert!(lock(&log).last().unwrap().contains("No answer"));
        assert!(!hub.is_waiting("k"));

        let flag = InterruptFlag::new();
        flag.interrupt();
        let d = hub.approver("s1").decide(&request("reboot"), &flag);
        assert!(
            matches!(d, Decision::Deny(ref why) if why.contains("interrupted")),
            "{d:?}"
        );
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human(Duration::from_secs(45)), "45 s");
        assert_eq!(human(Duration::from_secs(300)), "5 min");
        assert_eq!(human(Duration::from_secs(90)), "1 min 30 s");
        assert_eq!(human(Duration::from_secs(5400)), "1 h 30 min");
    }

    #[test]
    fn outside_a_turn_there_is_nobody_to_ask() {
        let (hub, log) = hub_with_log(Duration::from_secs(60));
        let d = hub
            .approver("s9")
            .decide(&request("reboot"), &InterruptFlag::new());
        assert!(matches!(d, Decision::Deny(_)));
        assert!(lock(&log).is_empty());
        {
            let _bound = hub.bind("s9", route());
        }
        let d = hub
            .approver("s9")
            .decide(&request("reboot"), &InterruptFlag::new());
        assert!(
            matches!(d, Decision::Deny(ref why) if why.contains("no chat")),
            "{d:?}"
        );
    }
}
