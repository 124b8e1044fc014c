//! The fallback chain (SPEC X2): a [`Model`] over several provider clients,
//! tried in order.
//!
//! Each client retries what is worth retrying on its own (SPEC L12); what
//! reaches this module is a failure *after* those retries. [`classify`], a
//! pure function of the error, decides whether another provider may do
//! better:
//!
//! | failure | falls back |
//! |---|---|
//! | 429 rate limit (after the retries, or at once when `Retry-After` is longer than the client waits) | yes |
//! | 5xx, overload (503, 529), timeouts, unreachable server, a broken answer | yes, after the retries |
//! | 401 / 403 (auth), 402 and quota or credit messages (billing) | yes, at once (the client does not retry them) |
//! | 404 or "model not found" (this provider does not serve the model) | yes |
//! | 400 and other 4xx (the request itself is wrong), context overflow, a request that cannot be built | no |
//! | anything after answer text reached the user | no (a second answer would follow half of the first) |
//!
//! **Turns.** Once a call fell back, the rest of the turn stays on the
//! provider that answered (the primary is not asked again for each tool
//! step). A call whose ledger ends in a user message opens a new turn, and
//! starts on the primary again (so does a sub-agent's run, which begins
//! with its task as a user message; the parent's next step then continues
//! wherever the child's chain stood). Every switch is reported to the sink
//! ([`StreamSink::on_fallback`]), which the loop turns into
//! [`AgentEvent::Fallback`](hermes_core::AgentEvent::Fallback): the CLI
//! prints it, the gateway tells the user and drops the cached agent (G4).

use std::sync::{Arc, Mutex};

use hermes_core::{
    ChatRequest, Completion, Fallback, Flow, Message, Model, ModelError, ModelErrorKind, StreamSink,
};

use crate::client::ShownTracker;
use crate::sync::lock;

/// Why a provider failed, for the user and the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureClass {
    /// 429.
    RateLimit,
    /// 503, 529 or an "overloaded" message.
    Overloaded,
    /// Another 5xx.
    ServerError,
    /// No answer in time.
    Timeout,
    /// The server could not be reached, or the connection broke.
    Unreachable,
    /// 401 / 403: the key is wrong or not allowed.
    Auth,
    /// 402 or a quota/credit message: the account cannot pay.
    Billing,
    /// 404 or a "model not found" message.
    ModelNotFound,
    /// The answer could not be understood.
    BrokenAnswer,
}

impl FailureClass {
    /// A few words for the user.
    pub fn describe(self) -> &'static str {
        match self {
            FailureClass::RateLimit => "rate limited",
            FailureClass::Overloaded => "overloaded",
            FailureClass::ServerError => "server error",
            FailureClass::Timeout => "timed out",
            FailureClass::Unreachable => "unreachable",
            FailureClass::Auth => "authentication failed",
            FailureClass::Billing => "out of credit or quota",
            FailureClass::ModelNotFound => "model not available",
            FailureClass::BrokenAnswer => "broken answer",
        }
    }
}

/// What to do with a failed call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// Another provider may succeed: run the same call on the next one.
    FallBack(FailureClass),
    /// Another provider would fail the same way (or the user already saw
    /// part of this answer): report the error.
    Final,
}

/// Provider wordings of billing failures, whatever the status.
const BILLING: [&str; 12] = [
    "insufficient_quota",
    "insufficient credits",
    "insufficient balance",
    "credit balance",
    "exceeded your current quota",
    "billing",
    "payment required",
    "out of credits",
    "credits have been exhausted",
    "top up your credits",
    "balance is too low",
    "no credits",
];

/// Provider wordings of a model this provider does not serve.
const MODEL_NOT_FOUND: [&str; 7] = [
    "model not found",
    "model_not_found",
    "no such model",
    "is not a valid model",
    "invalid model",
    "unknown model",
    "does not exist",
];

/// Provider wordings of a request too long for the model (handled by
/// context compaction, never by a fallback).
const CONTEXT_OVERFLOW: [&str; 6] = [
    "context length",
    "context window",
    "maximum context",
    "prompt is too long",
    "too many tokens",
    "context_length_exceeded",
];

fn mentions(message: &str, words: &[&str]) -> bool {
    let lower = message.to_ascii_lowercase();
    words.iter().any(|w| lower.contains(w))
}

/// Whether another provider may succeed where `error` failed. Pure: the
/// error's kind (status), its message and whether text was shown.
pub fn classify(error: &ModelError) -> Disposition {
    use Disposition::{FallBack, Final};
    if error.partial_text.as_deref().is_some_and(|t| !t.is_empty()) {
        return Final;
    }
    let message = error.message.as_str();
    if mentions(message, &CONTEXT_OVERFLOW) {
        return Final;
    }
    match error.kind {
        ModelErrorKind::Status(status) => match status {
            401 | 403 => FallBack(FailureClass::Auth),
            402 => FallBack(FailureClass::Billing),
            429 if mentions(message, &BILLING) => FallBack(FailureClass::Billing),
            429 => FallBack(FailureClass::RateLimit),
            404 => FallBack(FailureClass::ModelNotFound),
            408 => FallBack(FailureClass::Timeout),
            503 | 529 => FallBack(FailureClass::Overloaded),
            500..=599 if mentions(message, &["overloaded", "over capacity"]) => {
                FallBack(FailureClass::Overloaded)
            }
            500..=599 => FallBack(FailureClass::ServerError),
            // Anthropic answers a low credit balance with 400; OpenRouter
            // an unknown model id.
            400..=499 if mentions(message, &BILLING) => FallBack(FailureClass::Billing),
            400..=499 if mentions(message, &MODEL_NOT_FOUND) => {
                FallBack(FailureClass::ModelNotFound)
            }
            _ => Final,
        },
        ModelErrorKind::Timeout => FallBack(FailureClass::Timeout),
        ModelErrorKind::Transport => FallBack(FailureClass::Unreachable),
        ModelErrorKind::Protocol if mentions(message, &["overloaded"]) => {
            FallBack(FailureClass::Overloaded)
        }
        ModelErrorKind::Protocol => FallBack(FailureClass::BrokenAnswer),
        // The request itself, a context overflow, or a kind added later.
        _ => Final,
    }
}

/// One provider of the chain.
pub struct Link {
    /// The configured model name (shown to the user, used for prices).
    pub name: String,
    /// The client.
    pub model: Arc<dyn Model>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The chain: the primary first, then each fallback. See the module docs.
#[derive(Debug)]
pub struct FallbackModel {
    links: Vec<Link>,
    /// The link the current turn runs on.
    active: Mutex<usize>,
}

impl FallbackModel {
    /// A chain of `primary` then `fallbacks`, in order.
    pub fn new(primary: Link, fallbacks: Vec<Link>) -> Self {
        let mut links = Vec::with_capacity(1 + fallbacks.len());
        links.push(primary);
        links.extend(fallbacks);
        FallbackModel {
            links,
            active: Mutex::new(0),
        }
    }

    /// The links, primary first.
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// The name of the model the current turn runs on.
    pub fn active_name(&self) -> &str {
        let at = *lock(&self.active);
        self.links.get(at).map_or("", |l| l.name.as_str())
    }
}

impl Model for FallbackModel {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let new_turn = matches!(
            request.messages.last().map(|e| &e.message),
            Some(Message::User { .. }) | None
        );
        let start = {
            let mut active = lock(&self.active);
            if new_turn {
                *active = 0;
            }
            *active
        };
        let mut first_failure: Option<(String, String)> = None;
        let mut at = start;
        loop {
            let Some(link) = self.links.get(at) else {
                // Unreachable: the loop returns at the last link.
                return Err(ModelError::new(
                    ModelErrorKind::Request,
                    "no provider configured",
                ));
            };
            let mut shown = ShownTracker {
                inner: &mut *sink,
                shown: false,
            };
            let error = match link.model.complete(request, &mut shown) {
                Ok(completion) => {
                    *lock(&self.active) = at;
                    return Ok(completion);
                }
                Err(error) => error,
            };
            let was_shown = shown.shown;
            let next = self.links.get(at + 1);
            let class = match classify(&error) {
                Disposition::FallBack(class) if !was_shown => class,
                _ => return Err(with_history(error, first_failure.as_ref())),
            };
            let Some(next) = next else {
                return Err(with_history(error, first_failure.as_ref()));
            };
            tracing::warn!(
                failed = %link.name,
                answering = %next.name,
                reason = class.describe(),
                error = %error.message,
                "provider failed, falling back"
            );
            let reason = format!("{}: {}", class.describe(), error.message);
            first_failure.get_or_insert_with(|| (link.name.clone(), reason.clone()));
            let flow = sink.on_fallback(&Fallback {
                failed: &link.name,
                reason: &reason,
                answering: &next.name,
            });
            *lock(&self.active) = at + 1;
            if flow == Flow::Stop {
                // Interrupted between providers: nothing was received.
                return Ok(Completion::default());
            }
            at += 1;
        }
    }
}

/// The last error, saying which model failed first when it is not the same.
fn with_history(mut error: ModelError, first: Option<&(String, String)>) -> ModelError {
    if let Some((model, reason)) = first {
        error.message.push_str(&format!(
            " (every fallback failed too; first {model}: {reason})"
        ));
    }
    error
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn status(code: u16, message: &str) -> ModelError {
        ModelError::new(ModelErrorKind::Status(code), message)
    }

    #[test]
    fn each_failure_class() {
        use Disposition::{FallBack, Final};
        use FailureClass::*;
        let cases = [
            (
                status(
                    429,
                    "HTTP 429 Too Many Requests: slow down (gave up after 3 attempts)",
                ),
                FallBack(RateLimit),
            ),
            (
                status(
                    429,
                    "HTTP 429: You exceeded your current quota, please check your plan and billing details",
                ),
                FallBack(Billing),
            ),
            (
                status(401, "HTTP 401 Unauthorized: invalid api key"),
                FallBack(Auth),
            ),
            (status(403, "HTTP 403 Forbidden"), FallBack(Auth)),
            (status(402, "HTTP 402 Payment Required"), FallBack(Billing)),
            (
                status(
                    400,
                    "HTTP 400: Your credit balance is too low to access the Anthropic API",
                ),
                FallBack(Billing),
            ),
            (
                status(400, "HTTP 400: foo/bar is not a valid model ID"),
                FallBack(ModelNotFound),
            ),
            (status(404, "HTTP 404 Not Found"), FallBack(ModelNotFound)),
            (status(500, "HTTP 500"), FallBack(ServerError)),
            (status(502, "HTTP 502 Bad Gateway"), FallBack(ServerError)),
            (status(503, "HTTP 503"), FallBack(Overloaded)),
            (status(529, "HTTP 529: Overloaded"), FallBack(Overloaded)),
            (
                ModelError::new(ModelErrorKind::Timeout, "no data for 120s"),
                FallBack(Timeout),
            ),
            (
                ModelError::new(ModelErrorKind::Transport, "connection refused"),
                FallBack(Unreachable),
            ),
            (
                ModelError::new(ModelErrorKind::Protocol, "provider error: Overloaded"),
                FallBack(Overloaded),
            ),
            (
                ModelError::new(ModelErrorKind::Protocol, "malformed provider response"),
                FallBack(BrokenAnswer),
            ),
            (
                status(400, "HTTP 400 Bad Request: messages[3] is invalid"),
                Final,
            ),
            (status(413, "HTTP 413 Payload Too Large"), Final),
            (status(422, "HTTP 422"), Final),
            (
                status(
                    400,
                    "HTTP 400: This model's maximum context length is 8192 tokens",
                ),
                Final,
            ),
            (
                status(500, "prompt is too long: 210000 tokens > 200000 maximum"),
                Final,
            ),
            (
                ModelError::new(ModelErrorKind::Request, "could not build the request"),
                Final,
            ),
        ];
        for (error, want) in cases {
            assert_eq!(classify(&error), want, "{error:?}");
        }
    }

    /// A model that streams `shown` text, then fails with `error`, or
    /// answers `answer`; counts its calls.
    struct Scripted {
        shown: &'static str,
        error: Option<ModelError>,
        answer: &'static str,
        calls: std::sync::atomic::AtomicUsize,
    }

    impl Scripted {
        fn failing(shown: &'static str, error: ModelError) -> Arc<Self> {
            Arc::new(Scripted {
                shown,
                error: Some(error),
                answer: "",
                calls: Default::default(),
            })
        }
        fn answering(answer: &'static str) -> Arc<Self> {
            Arc::new(Scripted {
                shown: "",
                error: None,
                answer,
                calls: Default::default(),
            })
        }
        fn calls(&self) -> usize {
            self.calls.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    impl Model for Scripted {
        fn complete(
            &self,
            _request: &ChatRequest<'_>,
            sink: &mut dyn StreamSink,
        ) -> Result<Completion, ModelError> {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if !self.shown.is_empty() {
                sink.on_text(self.shown);
            }
            match &self.error {
                Some(e) => Err(e.clone()),
                None => Ok(Completion {
                    content: Some(self.answer.into()),
                    ..Completion::default()
                }),
            }
        }
    }

    fn chain(models: &[Arc<Scripted>]) -> FallbackModel {
        let mut links = models.iter().enumerate().map(|(i, m)| Link {
            name: format!("m{i}"),
            model: m.clone() as Arc<dyn Model>,
        });
        let primary = links.next().unwrap();
        FallbackModel::new(primary, links.collect())
    }

    #[derive(Default)]
    struct Told {
        switches: Vec<String>,
        stop: bool,
    }

    impl StreamSink for Told {
        fn on_text(&mut self, _: &str) -> Flow {
            Flow::Continue
        }
        fn on_fallback(&mut self, f: &Fallback<'_>) -> Flow {
            self.switches
                .push(format!("{} -> {}", f.failed, f.answering));
            if self.stop {
                Flow::Stop
            } else {
                Flow::Continue
            }
        }
    }

    fn ask(
        chain: &FallbackModel,
        last_is_user: bool,
        sink: &mut Told,
    ) -> Result<Completion, ModelError> {
        let ledger = if last_is_user {
            vec![hermes_core::LedgerEntry::new(Message::user("q"))]
        } else {
            vec![
                hermes_core::LedgerEntry::new(Message::user("q")),
                hermes_core::LedgerEntry::new(Message::tool("c", "r")),
            ]
        };
        let request = ChatRequest {
            system_prompt: "",
            messages: &ledger,
            tools: &[],
            tool_choice: hermes_core::ToolChoice::Auto,
        };
        chain.complete(&request, sink)
    }

    #[test]
    fn the_chain_walks_on_stays_for_the_turn_and_reports_every_switch() {
        let down = || Scripted::failing("", status(503, "HTTP 503"));
        let (a, b, c) = (down(), down(), Scripted::answering("from m2"));
        let chain = chain(&[a.clone(), b.clone(), c.clone()]);
        let mut told = Told::default();
        let answer = ask(&chain, true, &mut told).unwrap();
        assert_eq!(answer.content.as_deref(), Some("from m2"));
        assert_eq!(told.switches, ["m0 -> m1", "m1 -> m2"]);
        assert_eq!(chain.active_name(), "m2");
        // The same turn (the ledger ends in a tool result) stays on m2.
        ask(&chain, false, &mut told).unwrap();
        assert_eq!((a.calls(), b.calls(), c.calls()), (1, 1, 2));
        // A new turn starts on the primary again.
        ask(&chain, true, &mut told).unwrap();
        assert_eq!(a.calls(), 2);
    }

    #[test]
    fn when_every_link_fails_the_error_names_the_first_failure() {
        let chain = chain(&[
            Scripted::failing("", status(429, "HTTP 429 slow down")),
            Scripted::failing("", status(500, "HTTP 500 boom")),
        ]);
        let err = ask(&chain, true, &mut Told::default()).unwrap_err();
        assert_eq!(err.kind, ModelErrorKind::Status(500));
        assert!(err.message.starts_with("HTTP 500 boom"), "{}", err.message);
        assert!(
            err.message
                .contains("first m0: rate limited: HTTP 429 slow down"),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_failure_after_text_was_shown_does_not_fall_back() {
        let second = Scripted::answering("second answer");
        let chain = chain(&[
            Scripted::failing(
                "Half an ",
                ModelError::new(ModelErrorKind::Transport, "broke"),
            ),
            second.clone(),
        ]);
        let mut told = Told::default();
        assert!(ask(&chain, true, &mut told).is_err());
        assert!(told.switches.is_empty());
        assert_eq!(second.calls(), 0);
    }

    #[test]
    fn an_interrupt_between_providers_returns_nothing() {
        let second = Scripted::answering("unused");
        let chain = chain(&[
            Scripted::failing("", status(401, "HTTP 401")),
            second.clone(),
        ]);
        let mut told = Told {
            stop: true,
            ..Told::default()
        };
        assert_eq!(ask(&chain, true, &mut told).unwrap(), Completion::default());
        assert_eq!(second.calls(), 0);
    }

    #[test]
    fn nothing_falls_back_once_text_was_shown() {
        let mut error = ModelError::new(ModelErrorKind::Transport, "the stream broke");
        error.partial_text = Some("Half an ans".into());
        assert_eq!(classify(&error), Disposition::Final);
    }
}
