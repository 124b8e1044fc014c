//! Questions with choices from the agent to a chat (issue 46, `clarify`):
//! the gateway's [`Clarifier`].
//!
//! The tool runs on the turn's thread; the hub knows the session's chat
//! because the runner [binds](ClarifyHub::bind) the session to it for the
//! length of a turn, as it does for approvals ([`crate::approval`]). The
//! question goes out through the adapter's `ask` (an inline keyboard on
//! Telegram, numbered options on the platforms without buttons), and the
//! runner's intake [offers](ClarifyHub::offer) every message of that chat to
//! the hub before anything else:
//!
//! - a number (or a button press) picks its choice; a number that matches
//!   no choice is answered with the range and the question keeps waiting;
//! - other text is the user's own answer ("other");
//! - a command or a message with files is not an answer: the wait ends (the
//!   model is told the user did not answer) and the message is handled as
//!   the busy mode says.
//!
//! No answer within `[agent] clarify_timeout` ends the wait too, and so
//! does an interrupt. A session outside a turn (a cron run, a webhook, the
//! API server) has nobody to ask: those are not offered the tool at all.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use hermes_core::InterruptFlag;
use hermes_runtime::sync::lock;
use hermes_runtime::tools::{Answer, Clarifier, NoAnswer, Question};

use crate::approval::Route;
use crate::event::{MessageEvent, MessageType};

/// How often a waiting question looks at the interrupt flag.
const POLL: Duration = Duration::from_millis(100);

/// What sends a question to a chat (the runner, through the adapter).
pub trait QuestionSender: Send + Sync {
    /// Sends `question` to the route's chat, waiting for the platform.
    fn ask(&self, route: &Route, question: &Question) -> Result<(), String>;

    /// Sends a short note to the route's chat (the timeout), not waiting.
    fn notify(&self, route: &Route, text: String);

    /// The question sent to the route's chat no longer waits; not waiting.
    fn closed(&self, route: &Route) {
        let _ = route;
    }
}

/// What the intake does with a message ([`ClarifyHub::offer`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Offer {
    /// No question waits in this chat: handle the message as usual (a
    /// stale button press excepted, see [`Offer::Stale`]).
    NotWaiting,
    /// A button press with no question waiting: tell the user, drop it.
    Stale,
    /// It answered the waiting question: nothing more to do.
    Answered,
    /// A number that matches no choice: send this text, keep waiting.
    Invalid(String),
    /// Not an answer: the wait ended; handle the message as usual.
    Ended,
}

enum Reply {
    Answer(Answer),
    NotAnswer,
}

struct Waiting {
    id: u64,
    question: Question,
    tx: SyncSender<Reply>,
}

/// The process's `clarify` questions: which sessions are in a turn (and
/// where their chat is), and which chats wait for an answer.
pub struct ClarifyHub {
    timeout: Duration,
    routes: Mutex<HashMap<String, Route>>,
    /// Session key → the waiting question.
    waiting: Mutex<HashMap<String, Waiting>>,
    next_question: AtomicU64,
    sender: OnceLock<Arc<dyn QuestionSender>>,
}

impl std::fmt::Debug for ClarifyHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClarifyHub")
            .field("timeout", &self.timeout)
            .field("waiting", &lock(&self.waiting).len())
            .finish_non_exhaustive()
    }
}

/// Unbinds a session from its chat when its turn ends.
#[derive(Debug)]
pub struct ClarifyGuard {
    hub: Arc<ClarifyHub>,
    session_id: String,
}

impl Drop for ClarifyGuard {
    fn drop(&mut self) {
        lock(&self.hub.routes).remove(&self.session_id);
    }
}

impl ClarifyHub {
    /// A hub whose questions wait at most `timeout`.
    pub fn new(timeout: Duration) -> Arc<Self> {
        Arc::new(ClarifyHub {
            timeout,
            routes: Mutex::default(),
            waiting: Mutex::default(),
            next_question: AtomicU64::new(1),
            sender: OnceLock::new(),
        })
    }

    /// Sets how questions are sent (the runner does, once, at start).
    pub fn set_sender(&self, sender: Arc<dyn QuestionSender>) {
        let _ = self.sender.set(sender);
    }

    /// Binds `session_id` to `route` until the guard is dropped.
    pub fn bind(self: &Arc<Self>, session_id: &str, route: Route) -> ClarifyGuard {
        lock(&self.routes).insert(session_id.to_owned(), route);
        ClarifyGuard {
            hub: Arc::clone(self),
            session_id: session_id.to_owned(),
        }
    }

    /// The clarifier of the tools of session `session_id`.
    pub fn clarifier(self: &Arc<Self>, session_id: &str) -> Arc<dyn Clarifier> {
        Arc::new(ChatClarifier {
            hub: Arc::clone(self),
            session_id: session_id.to_owned(),
        })
    }

    /// Whether a question waits in the chat of session key `key`.
    pub fn is_waiting(&self, key: &str) -> bool {
        lock(&self.waiting).contains_key(key)
    }

    /// Offers `event`, a message of session key `key`, to the question
    /// waiting there, if any.
    pub fn offer(&self, key: &str, event: &MessageEvent) -> Offer {
        let mut waiting = lock(&self.waiting);
        let Some(question) = waiting.get(key).map(|w| &w.question) else {
            return if event.message_type == MessageType::Choice {
                Offer::Stale
            } else {
                Offer::NotWaiting
            };
        };
        let text = event.text.trim();
        let not_an_answer = !event.media.is_empty() || text.starts_with('/') || text.is_empty();
        let reply = if not_an_answer {
            Reply::NotAnswer
        } else {
            match question.interpret(text) {
                Ok(answer) => Reply::Answer(answer),
                Err(why) => return Offer::Invalid(why),
            }
        };
        let offer = match reply {
            Reply::Answer(_) => Offer::Answered,
            Reply::NotAnswer => Offer::Ended,
        };
        if let Some(w) = waiting.remove(key) {
            // The asker may have just given up (timeout): then the message
            // is handled as usual.
            if w.tx.try_send(reply).is_err() && offer == Offer::Answered {
                return Offer::NotWaiting;
            }
        }
        offer
    }

    fn ask(
        &self,
        session_id: &str,
        question: &Question,
        interrupt: &InterruptFlag,
    ) -> Result<Answer, NoAnswer> {
        let Some(route) = lock(&self.routes).get(session_id).cloned() else {
            return Err(NoAnswer::NobodyToAsk(
                "there is no chat to ask outside a conversation turn".into(),
            ));
        };
        let Some(sender) = self.sender.get().cloned() else {
            return Err(NoAnswer::NobodyToAsk(
                "the gateway is not serving yet".into(),
            ));
        };
        let id = self.next_question.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::sync_channel(1);
        // Waiting before the question goes out, so a quick answer finds it.
        lock(&self.waiting).insert(
            route.key.clone(),
            Waiting {
                id,
                question: question.clone(),
                tx,
            },
        );
        let outcome = match sender.ask(&route, question) {
            Err(e) => Err(NoAnswer::Ended(format!(
                "the question could not be sent: {e}"
            ))),
            Ok(()) => self.wait(&route, &rx, interrupt, sender.as_ref()),
        };
        {
            let mut waiting = lock(&self.waiting);
            if waiting.get(&route.key).is_some_and(|w| w.id == id) {
                waiting.remove(&route.key);
            }
        }
        // Buttons still showing stop answering: a later press is stale.
        sender.closed(&route);
        outcome
    }

    fn wait(
        &self,
        route: &Route,
        rx: &mpsc::Receiver<Reply>,
        interrupt: &InterruptFlag,
        sender: &dyn QuestionSender,
    ) -> Result<Answer, NoAnswer> {
        let started = Instant::now();
        loop {
            match rx.recv_timeout(POLL) {
                Ok(Reply::Answer(answer)) => return Ok(answer),
                Ok(Reply::NotAnswer) => {
                    return Err(NoAnswer::Ended(
                        "the user sent another message instead of answering".into(),
                    ));
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(NoAnswer::Ended("the question was withdrawn".into()));
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            if interrupt.is_set() {
                return Err(NoAnswer::Ended(
                    "the turn was interrupted before the user answered".into(),
                ));
            }
            if started.elapsed() >= self.timeout {
                let limit = crate::approval::human(self.timeout);
                sender.notify(
                    route,
                    format!("⌛ No answer within {limit}: carrying on without it."),
                );
                return Err(NoAnswer::Ended(format!("no answer within {limit}")));
            }
        }
    }
}

/// The clarifier one session's `clarify` tool uses.
struct ChatClarifier {
    hub: Arc<ClarifyHub>,
    session_id: String,
}

impl Clarifier for ChatClarifier {
    fn ask(&self, question: &Question, interrupt: &InterruptFlag) -> Result<Answer, NoAnswer> {
        self.hub.ask(&self.session_id, question, interrupt)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::event::{ChatType, SessionSource};

    #[derive(Default)]
    struct Log(Mutex<Vec<String>>);

    impl QuestionSender for Log {
        fn ask(&self, route: &Route, question: &Question) -> Result<(), String> {
            lock(&self.0).push(format!("{}: {}", route.chat_id, question.numbered_text()));
            Ok(())
        }
        fn notify(&self, route: &Route, text: String) {
            lock(&self.0).push(format!("{}: {text}", route.chat_id));
        }
    }

    fn event(text: &str, kind: MessageType) -> MessageEvent {
        MessageEvent {
            message_id: "m".into(),
            text: text.into(),
            source: SessionSource {
                platform: "test".into(),
                chat_id: "c1".into(),
                chat_type: ChatType::Dm,
                user_id: "u".into(),
                user_name: None,
                thread_id: None,
            },
            message_type: kind,
            media: Vec::new(),
        }
    }

    fn hub(timeout: Duration) -> (Arc<ClarifyHub>, Arc<Log>, ClarifyGuard) {
        let hub = ClarifyHub::new(timeout);
        let log = Arc::new(Log::default());
        hub.set_sender(log.clone());
        let guard = hub.bind(
            "s1",
            Route {
                key: "k".into(),
                platform: "test".into(),
                chat_id: "c1".into(),
                reply_to: "m1".into(),
            },
        );
        (hub, log, guard)
    }

    fn question() -> Question {
        Question {
            text: "Which one?".into(),
            choices: vec!["red".into(), "blue".into()],
        }
    }

    fn ask_on_thread(hub: &Arc<ClarifyHub>) -> std::thread::JoinHandle<Result<Answer, NoAnswer>> {
        let clarifier = hub.clarifier("s1");
        let asker = std::thread::spawn(move || clarifier.ask(&question(), &InterruptFlag::new()));
        while !hub.is_waiting("k") {
            std::thread::yield_now();
        }
        asker
    }

    #[test]
    fn a_number_answers_and_a_wrong_one_keeps_waiting() {
        let (hub, log, _g) = hub(Duration::from_secs(60));
        let asker = ask_on_thread(&hub);
        let offer = hub.offer("k", &event("3", MessageType::Text));
        assert!(
            matches!(offer, Offer::Invalid(ref t) if t.contains("1 to 2")),
            "{offer:?}"
        );
        assert_eq!(
            hub.offer("k", &event("2", MessageType::Choice)),
            Offer::Answered
        );
        assert_eq!(asker.join().unwrap(), Ok(Answer::Choice(1, "blue".into())));
        assert!(lock(&log.0)[0].contains("1. red\n2. blue"));
        // Answered: a later press is stale, a later text is a message.
        assert_eq!(
            hub.offer("k", &event("1", MessageType::Choice)),
            Offer::Stale
        );
        assert_eq!(
            hub.offer("k", &event("hi", MessageType::Text)),
            Offer::NotWaiting
        );
    }

    #[test]
    fn a_command_ends_the_wait_and_silence_times_out() {
        let (hub, log, _g) = hub(Duration::from_millis(300));
        let asker = ask_on_thread(&hub);
        assert_eq!(
            hub.offer("k", &event("/status", MessageType::Text)),
            Offer::Ended
        );
        let e = asker.join().unwrap().unwrap_err();
        assert!(
            matches!(e, NoAnswer::Ended(ref w) if w.contains("another message")),
            "{e:?}"
        );

        let e = hub
            .clarifier("s1")
            .ask(&question(), &InterruptFlag::new())
            .unwrap_err();
        assert!(
            matches!(e, NoAnswer::Ended(ref w) if w.contains("no answer")),
            "{e:?}"
        );
        assert!(lock(&log.0).last().unwrap().contains("No answer within"));
        assert!(!hub.is_waiting("k"));
    }

    #[test]
    fn outside_a_turn_nobody_is_asked() {
        let hub = ClarifyHub::new(Duration::from_secs(5));
        hub.set_sender(Arc::new(Log::default()));
        let e = hub
            .clarifier("nope")
            .ask(&question(), &InterruptFlag::new())
            .unwrap_err();
        assert!(matches!(e, NoAnswer::NobodyToAsk(_)), "{e:?}");
    }
}
