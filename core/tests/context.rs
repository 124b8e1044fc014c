//! Conversations that outlive the context window (SPEC X1), driven through
//! the `Model` trait by a scripted model that enforces a window the way a
//! provider does: it counts every request with its own (stricter) rule,
//! refuses one that does not fit with OpenAI's context-length error, and
//! reports its count as `prompt_tokens`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use hermes_core::codec::{RequestOptions, encode_request};
use hermes_core::context::digest::{DIGEST_HEADER, MAX_DIGEST_BYTES, digest};
use hermes_core::context::overflow::classify;
use hermes_core::context::plan::{Budgets, plan};
use hermes_core::context::summary::{SUMMARIZER_PROMPT, SUMMARY_HEADER};
use hermes_core::context::{CompactError, ContextConfig, ContextWindow, WindowSource};
use hermes_core::*;
use proptest::prelude::*;
use serde_json::Value;

const SYSTEM: &str = "You are a test assistant. Answer briefly.";

/// A request as the model saw it.
#[derive(Clone, Debug)]
struct Seen {
    system: String,
    messages: Vec<Message>,
    tokens: u64,
}

impl Seen {
    fn is_summary(&self) -> bool {
        self.system == SUMMARIZER_PROMPT
    }
}

/// A model with a real window and its own token count (JSON bytes / 3).
struct WindowModel {
    window: u64,
    seen: Mutex<Vec<Seen>>,
    fail_summaries: AtomicBool,
    summaries: AtomicUsize,
}

impl WindowModel {
    fn new(window: u64) -> Arc<Self> {
        Arc::new(WindowModel {
            window,
            seen: Mutex::default(),
            fail_summaries: AtomicBool::new(false),
            summaries: AtomicUsize::new(0),
        })
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// The provider's count of a request: bytes of its JSON body / 3.
fn provider_count(request: &ChatRequest<'_>) -> u64 {
    let mut body = Vec::new();
    encode_request(&RequestOptions::new("m"), request, &mut body).unwrap();
    body.len() as u64 / 3
}

/// The number `N` of the last `turn N` in `text`.
fn turn_number(text: &str) -> u64 {
    let at = text.rfind("turn ").expect("a turn message");
    text[at + 5..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}

fn filler(words: usize) -> String {
    (0..words)
        .map(|i| ["alpha", "bravo", "charlie", "delta", "echo"][i % 5])
        .collect::<Vec<_>>()
        .join(" ")
}

impl Model for WindowModel {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let tokens = provider_count(request);
        self.seen.lock().unwrap().push(Seen {
            system: request.system_prompt.to_owned(),
            messages: request.messages.iter().map(|e| e.message.clone()).collect(),
            tokens,
        });
        if tokens > self.window {
            return Err(ModelError::new(
                ModelErrorKind::ContextOverflow {
                    window: u32::try_from(self.window).ok(),
                },
                format!(
                    "HTTP 400 Bad Request: This model's maximum context length is {} tokens. However, your messages resulted in {tokens} tokens. Please reduce the length of the messages.",
                    self.window
                ),
            ));
        }
        let usage = Some(Usage {
            prompt_tokens: tokens,
            completion_tokens: 40,
            total_tokens: tokens + 40,
            ..Usage::default()
        });
        if request.system_prompt == SUMMARIZER_PROMPT {
            if self.fail_summaries.load(Ordering::SeqCst) {
                return Err(ModelError::new(
                    ModelErrorKind::Status(503),
                    "HTTP 503: overloaded",
                ));
            }
            let n = self.summaries.fetch_add(1, Ordering::SeqCst) + 1;
            let input = request.messages[0].message.content().unwrap_or("");
            let users = input.matches("[user]").count();
            return Ok(Completion {
                content: Some(format!(
                    "Summary #{n}: the user sent {users} numbered turns; each was answered. {}",
                    filler(30)
                )),
                finish_reason: Some(FinishReason::Stop),
                usage,
                ..Completion::default()
            });
        }
        let last = request.messages.last().expect("a message");
        let completion = match &last.message {
            Message::User { content, .. } => {
                let n = turn_number(content);
                if n.is_multiple_of(3) {
                    Completion {
                        tool_calls: vec![ToolCall::new(
                            format!("call_{n}"),
                            "lookup",
                            format!("{{\"n\":{n}}}"),
                        )],
                        finish_reason: Some(FinishReason::ToolCalls),
                        usage,
                        ..Completion::default()
                    }
                } else {
                    let text = format!("answer {n}: {}", filler(60));
                    sink.on_text(&text);
                    Completion {
                        content: Some(text),
                        finish_reason: Some(FinishReason::Stop),
                        usage,
                        ..Completion::default()
                    }
                }
            }
            Message::Tool { tool_call_id, .. } => {
                let n = turn_number(&tool_call_id.replace("call_", "turn "));
                let text = format!("answer {n} after the lookup");
                sink.on_text(&text);
                Completion {
                    content: Some(text),
                    finish_reason: Some(FinishReason::Stop),
                    usage,
                    ..Completion::default()
                }
            }
            Message::Assistant { .. } => panic!("a request must not end with an assistant message"),
        };
        Ok(completion)
    }
}

/// A tool whose result is big: `size` bytes.
struct Lookup {
    spec: ToolSpec,
    size: usize,
}

impl Lookup {
    fn new(size: usize) -> Self {
        Lookup {
            spec: ToolSpec::new(
                "lookup",
                "Looks a number up.",
                serde_json::json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
            ),
            size,
        }
    }
}

impl Tool for Lookup {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let mut out = format!("lookup {arguments}: ");
        while out.len() < self.size {
            out.push_str("result-data ");
        }
        Ok(out)
    }
}

/// Every tool call answered by one result, in order, directly after it;
/// no result without its call; no system message in the ledger.
fn assert_valid_for_api(messages: &[Message]) {
    let mut i = 0;
    while i < messages.len() {
        let calls = messages[i].tool_calls();
        for (k, c) in calls.iter().enumerate() {
            match messages.get(i + 1 + k) {
                Some(Message::Tool { tool_call_id, .. }) => assert_eq!(tool_call_id, &c.id),
                other => panic!("call {} unanswered, found {other:?}", c.id),
            }
        }
        assert!(
            !matches!(messages[i], Message::Tool { .. }),
            "tool result at {i} answers no call: {:?}",
            messages[i]
        );
        i += 1 + calls.len();
    }
}

/// Records what a persisting front-end would: every appended entry (the
/// originals) and every compaction.
#[derive(Default)]
struct Recorder {
    originals: Vec<LedgerEntry>,
    compactions: Vec<Compaction>,
}

impl AgentObserver for Recorder {
    fn on_event(&mut self, event: &AgentEvent<'_>) {
        match event {
            AgentEvent::Appended(e) => self.originals.push((*e).clone()),
            AgentEvent::Compacted(c) => self.compactions.push((*c).clone()),
            _ => {}
        }
    }
}

fn agent(model: Arc<WindowModel>, window: u32, result_size: usize) -> Agent {
    let tools = ToolRegistry::new().with(Lookup::new(result_size));
    Agent::new(model, Arc::new(tools), SYSTEM).with_context(ContextConfig::new(Arc::new(
        ContextWindow::new(window, WindowSource::Configured),
    )))
}

fn turn_text(n: u64) -> String {
    format!("turn {n}: {}", filler(80))
}

#[test]
fn thirty_turns_through_a_window_a_third_of_their_size() {
    const WINDOW: u64 = 3_500;
    let model = WindowModel::new(WINDOW);
    let agent = agent(model.clone(), WINDOW as u32, 600);
    let mut history = Vec::new();
    let mut recorder = Recorder::default();
    for n in 1..=30 {
        let budget = IterationBudget::new(10);
        let out = agent.run(&turn_text(n), history, &budget, &mut recorder);
        assert_eq!(out.stop, StopReason::Completed, "turn {n}");
        assert!(
            out.final_text.starts_with(&format!("answer {n}")),
            "turn {n}: {}",
            out.final_text
        );
        assert_valid_for_api(
            &out.messages
                .iter()
                .map(|e| e.message.clone())
                .collect::<Vec<_>>(),
        );
        history = out.messages;
    }

    let seen = model.seen();
    // The whole conversation is three times the window.
    let all: Vec<Message> = recorder
        .originals
        .iter()
        .map(|e| e.message.clone())
        .collect();
    let whole = provider_count(&ChatRequest {
        system_prompt: SYSTEM,
        messages: &recorder.originals,
        tools: agent.tools().specs(),
        tool_choice: hermes_core::ToolChoice::Auto,
    });
    assert!(whole >= 3 * WINDOW, "the conversation is {whole} tokens");
    // Every turn's request and result reached the originals, in order.
    let users: Vec<u64> = all
        .iter()
        .filter_map(|m| match m {
            Message::User { content, .. } => Some(turn_number(content)),
            _ => None,
        })
        .collect();
    assert_eq!(users, (1..=30).collect::<Vec<_>>());
    assert_valid_for_api(&all);
    // Compaction happened several times, proactively: no call was refused.
    assert!(
        recorder.compactions.len() >= 3,
        "{}",
        recorder.compactions.len()
    );
    for s in &seen {
        assert!(
            s.tokens <= WINDOW,
            "a request of {} tokens was sent",
            s.tokens
        );
        assert_valid_for_api(&s.messages);
    }
    // The system prompt of every conversation call is byte-identical.
    for s in seen.iter().filter(|s| !s.is_summary()) {
        assert_eq!(s.system, SYSTEM);
        assert_eq!(
            s.messages.first(),
            all.first(),
            "the head (first exchange) is kept verbatim"
        );
    }
    // Later summaries fold in the earlier one.
    let summaries: Vec<&Seen> = seen.iter().filter(|s| s.is_summary()).collect();
    assert!(
        summaries[1..].iter().all(|s| s.messages[0]
            .content()
            .unwrap()
            .contains("[earlier summary")),
        "each later summary request carries the previous summary"
    );
    // The summary is marked in the ledger and framed in its text.
    let marked: Vec<&LedgerEntry> = history
        .iter()
        .filter(|e| e.meta.compaction.is_some())
        .collect();
    assert_eq!(marked.len(), 1);
    assert!(
        marked[0]
            .message
            .content()
            .unwrap()
            .starts_with(SUMMARY_HEADER)
    );
}

/// A clock the test moves.
struct TestClock(std::sync::atomic::AtomicU64);

impl Clock for TestClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[test]
fn a_failed_summary_compacts_with_a_digest_and_rests_the_summariser() {
    let model = WindowModel::new(100_000);
    let clock = Arc::new(TestClock(std::sync::atomic::AtomicU64::new(1_000_000)));
    // The agent believes the window is small, so it compacts.
    let agent = agent(model.clone(), 2_000, 100).with_clock(clock.clone());
    model.fail_summaries.store(true, Ordering::SeqCst);
    let mut history = Vec::new();
    let mut compactions = Vec::new();
    for n in 1..=12 {
        let out = agent.run_conversation(&turn_text(n * 3 + 1), history);
        assert_eq!(out.stop, StopReason::Completed, "turn {n}");
        compactions.extend(out.compactions);
        history = out.messages;
        clock.0.fetch_add(1_000, Ordering::SeqCst);
    }
    assert!(compactions.len() >= 2, "{compactions:?}");
    assert!(compactions.iter().all(|c| c.digest));
    assert!(
        compactions
            .iter()
            .all(|c| c.summary.contains(DIGEST_HEADER))
    );
    // One failure reported (one warning), then the summariser rests.
    let failures: Vec<&str> = compactions
        .iter()
        .filter_map(|c| c.summarizer_failure.as_deref())
        .collect();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(failures[0].contains("503"), "{}", failures[0]);
    let asked = || model.seen().iter().filter(|s| s.is_summary()).count();
    assert_eq!(asked(), 1, "the summariser was asked during its cooldown");
    assert!(history.len() < 24, "something was dropped");
    assert_eq!(
        history
            .iter()
            .filter(|e| e.meta.compaction.is_some())
            .count(),
        1
    );

    // After the cooldown it is asked again, and a working one is used.
    model.fail_summaries.store(false, Ordering::SeqCst);
    clock.0.fetch_add(10 * 60 * 1000, Ordering::SeqCst);
    let mut compacted = Vec::new();
    for n in 13..=20 {
        let out = agent.run_conversation(&turn_text(n * 3 + 1), history);
        assert_eq!(out.stop, StopReason::Completed, "turn {n}");
        compacted.extend(out.compactions);
        history = out.messages;
    }
    assert!(asked() >= 2);
    assert!(
        compacted
            .iter()
            .any(|c| !c.digest && c.summary.contains("Summary #"))
    );
}

#[test]
fn an_overflow_is_compacted_and_retried_once_and_the_limit_learned() {
    let model = WindowModel::new(3_000);
    // Configured far too big: the provider's error teaches the real limit.
    let agent = agent(model.clone(), 200_000, 100);
    let mut history = Vec::new();
    let mut refused = 0;
    for n in 1..=20 {
        let before = model.seen().len();
        let out = agent.run_conversation(&turn_text(n * 3 + 1), history);
        assert_eq!(out.stop, StopReason::Completed, "turn {n}");
        refused += model.seen()[before..]
            .iter()
            .filter(|s| s.tokens > 3_000)
            .count();
        history = out.messages;
    }
    let window = agent.context().unwrap().window.as_ref();
    assert_eq!(window.tokens(), 3_000);
    assert_eq!(window.source(), WindowSource::Learned);
    assert_eq!(refused, 1, "after learning the limit no request is refused");
}

#[test]
fn a_message_bigger_than_the_window_stops_clearly_and_the_next_turn_works() {
    let model = WindowModel::new(3_000);
    let agent = agent(model.clone(), 3_000, 100);
    let out = agent.run_conversation(&turn_text(1), Vec::new());
    let history = out.messages;
    let huge = format!("turn 2: {}", filler(4_000));
    let out = agent.run_conversation(&huge, history);
    let StopReason::ContextOverflow(err) = &out.stop else {
        panic!("{:?}", out.stop)
    };
    assert!(err.kind.is_context_overflow());
    let notice = out.stop.notice(90).unwrap();
    assert!(
        notice.contains("does not fit") && notice.contains("3000 tokens"),
        "{notice}"
    );
    // The message is kept (nothing accepted is lost) ...
    assert!(
        out.messages
            .iter()
            .any(|e| e.message.content() == Some(huge.as_str()))
    );
    // ... and the next turn summarises it away instead of failing again.
    let out = agent.run_conversation(&turn_text(4), out.messages);
    assert_eq!(out.stop, StopReason::Completed);
    assert!(out.final_text.starts_with("answer 4"));
    assert!(
        !out.messages
            .iter()
            .any(|e| e.message.content() == Some(huge.as_str()))
    );
}

#[test]
fn a_huge_tool_result_is_capped_relative_to_the_window() {
    let model = WindowModel::new(8_000);
    // A 1 MB tool result into an 8k window.
    let agent = agent(model.clone(), 8_000, 1 << 20);
    let out = agent.run_conversation(&turn_text(3), Vec::new());
    assert_eq!(out.stop, StopReason::Completed);
    let result = out
        .messages
        .iter()
        .find_map(|e| match &e.message {
            Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap();
    assert!(result.len() < 16_000, "{} bytes", result.len());
    assert!(result.contains("more bytes cut to fit the model's context window"));
    assert!(model.seen().iter().all(|s| s.tokens <= 8_000));
}

#[test]
fn compress_on_request_with_a_focus() {
    let model = WindowModel::new(100_000);
    let agent = agent(model.clone(), 100_000, 100);
    let mut history = Vec::new();
    for n in [1, 2, 4, 5, 7, 8] {
        history = agent.run_conversation(&turn_text(n), history).messages;
    }
    let before = history.clone();
    let c = agent
        .compact(&mut history, Some("the delta words"))
        .unwrap();
    assert!(c.tokens_after < c.tokens_before, "{c:?}");
    assert_eq!(c.head + c.replaced + c.tail, before.len());
    assert_eq!(
        history.len(),
        before.len() - c.replaced + usize::from(c.placement == SummaryPlacement::Standalone)
    );
    assert_eq!(
        &history[..c.head],
        &before[..c.head],
        "the head is untouched"
    );
    let request = model
        .seen()
        .into_iter()
        .rev()
        .find(Seen::is_summary)
        .unwrap();
    assert!(
        request.messages[0]
            .content()
            .unwrap()
            .contains("focus on: the delta words")
    );
    // The next turn does not compact again: the window is far away.
    let out = agent.run_conversation(&turn_text(10), history.clone());
    assert!(out.compactions.is_empty());
    assert_eq!(&out.messages[..history.len()], &history[..]);
    // The usage recorded before the compaction does not count any more.
    let usage = agent.context_usage(&history).unwrap();
    assert!(!usage.anchored);
    assert!(usage.used < c.tokens_before);
}

#[test]
fn an_interrupt_during_the_summary_leaves_the_ledger() {
    struct Interrupting(InterruptFlag);
    impl Model for Interrupting {
        fn complete(
            &self,
            _request: &ChatRequest<'_>,
            sink: &mut dyn StreamSink,
        ) -> Result<Completion, ModelError> {
            self.0.interrupt();
            let stopped = sink.on_text("partial summary") == Flow::Stop;
            assert!(stopped);
            Ok(Completion {
                content: Some("partial summary".into()),
                ..Completion::default()
            })
        }
    }
    let flag = InterruptFlag::new();
    let model = Arc::new(Interrupting(flag.clone()));
    let agent = Agent::new(model, Arc::new(ToolRegistry::new()), SYSTEM)
        .with_interrupt(flag)
        .with_context(ContextConfig::new(Arc::new(ContextWindow::new(
            1_000,
            WindowSource::Default,
        ))));
    let mut history: Vec<LedgerEntry> = (0..10)
        .flat_map(|n| {
            [
                LedgerEntry::new(Message::user(turn_text(n))),
                LedgerEntry::new(Message::assistant(filler(40))),
            ]
        })
        .collect();
    let before = history.clone();
    assert_eq!(
        agent.compact(&mut history, None),
        Err(CompactError::Interrupted)
    );
    assert_eq!(history, before);
}

#[test]
fn every_collected_error_body_is_recognised_with_its_limit() {
    let cases: Vec<Value> = serde_json::from_str(include_str!(
        "../../tests/fixtures/context-overflow/cases.json"
    ))
    .unwrap();
    assert!(cases.len() >= 10);
    for case in &cases {
        let body = case["body"].to_string();
        let found = classify(&body).unwrap_or_else(|| panic!("{} not recognised", case["name"]));
        assert_eq!(
            found.window.map(u64::from),
            case["window"].as_u64(),
            "{}: window",
            case["name"]
        );
        assert_eq!(
            found.requested.map(u64::from),
            case["requested"].as_u64(),
            "{}: requested",
            case["name"]
        );
    }
    for other in [
        r#"{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000.","type":"tokens","code":"rate_limit_exceeded"}}"#,
        r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}"#,
        r#"{"object":"error","message":"max_tokens must be at least 1, got -186.","type":"BadRequestError","param":null,"code":400}"#,
        r#"{"error":{"message":"The model `gpt-9` does not exist","type":"invalid_request_error","code":"model_not_found"}}"#,
        "upstream connect error or disconnect/reset before headers",
    ] {
        assert_eq!(classify(other), None, "{other}");
    }
}

/// Found on the gateway (issue 31): an album — its caption and three
/// photos, four user messages in a row — with a window that keeps only the
/// last photo in the tail. The caption and the first photos were summarised
/// as background; the request being answered is never cut.
#[test]
fn the_parts_of_the_current_request_are_never_summarised() {
    // A photo's part: its description stands for the image's tokens.
    let photo = |caption: &str, n: u32| {
        let mut image = Attachment::image("image/jpeg", format!("s/photo-{n}.jpg"), 50_000);
        image.description = Some("p".repeat(3_000));
        LedgerEntry::new(Message::user_with(caption, vec![image]))
    };
    let view = vec![
        LedgerEntry::new(Message::user("an earlier question")),
        LedgerEntry::new(Message::assistant("an earlier answer")),
        LedgerEntry::new(Message::user("and another")),
        LedgerEntry::new(Message::assistant("another answer")),
        photo("What is in these photos?", 1),
        photo("", 2),
        photo("", 3),
        photo("", 4),
    ];
    let p = plan(
        &view,
        Budgets {
            head: 100,
            tail: 1_200,
            tail_max: 1_500,
        },
    )
    .unwrap();
    assert_eq!(
        p.tail_start, 4,
        "the caption and every photo are kept: {p:?}"
    );
    assert_eq!(p.head_end, 2);
}

/// A random valid ledger: exchanges of a user message, tool rounds and an
/// answer, with random text sizes.
fn ledger_strategy() -> impl Strategy<Value = Vec<LedgerEntry>> {
    let exchange = (
        1usize..400,
        prop::collection::vec((1usize..3, 1usize..600), 0..4),
        1usize..400,
    );
    prop::collection::vec(exchange, 1..40).prop_map(|exchanges| {
        let mut out = Vec::new();
        for (x, (user, rounds, answer)) in exchanges.into_iter().enumerate() {
            out.push(LedgerEntry::new(Message::user("u".repeat(user))));
            for (r, (calls, size)) in rounds.into_iter().enumerate() {
                let calls: Vec<ToolCall> = (0..calls)
                    .map(|c| ToolCall::new(format!("c{x}_{r}_{c}"), "t", "{}"))
                    .collect();
                out.push(LedgerEntry::new(Message::Assistant {
                    content: None,
                    tool_calls: calls.clone(),
                }));
                for c in calls {
                    out.push(LedgerEntry::new(Message::tool(c.id, "r".repeat(size))));
                }
            }
            out.push(LedgerEntry::new(Message::assistant("a".repeat(answer))));
        }
        out
    })
}

proptest! {
    #[test]
    fn a_plan_never_separates_a_call_from_its_results(
        view in ledger_strategy(),
        head in 0u64..2_000,
        tail in 0u64..4_000,
    ) {
        let Ok(p) = plan(&view, Budgets { head, tail, tail_max: tail * 2 }) else { return Ok(()) };
        prop_assert!(p.head_end < p.tail_start && p.tail_start < view.len());
        for cut in [p.head_end, p.tail_start] {
            prop_assert!(!matches!(view[cut].message, Message::Tool { .. }), "cut at a tool result");
        }
        // Whatever is dropped, the kept parts are valid for the API, and
        // with the summary in its place the roles still alternate.
        let kept: Vec<Message> = view[..p.head_end]
            .iter()
            .chain(&view[p.tail_start..])
            .map(|e| e.message.clone())
            .collect();
        assert_valid_for_api(&kept);
        let mut with_summary: Vec<Message> = view[..p.head_end].iter().map(|e| e.message.clone()).collect();
        if p.placement == SummaryPlacement::Standalone {
            with_summary.push(Message::user("summary"));
        }
        with_summary.extend(view[p.tail_start..].iter().map(|e| e.message.clone()));
        for pair in with_summary.windows(2) {
            let roles = (pair[0].role(), pair[1].role());
            prop_assert!(roles != (Role::User, Role::User) && roles != (Role::Assistant, Role::Assistant), "{roles:?}");
        }
    }
}

/// Spans of any size and content for the digest: long texts, many tools,
/// failed results, multi-byte characters.
fn digest_span_strategy() -> impl Strategy<Value = Vec<LedgerEntry>> {
    let text = prop_oneof![
        "[a-z ]{0,40}",
        "[\\PC]{0,300}",
        (1usize..20_000).prop_map(|n| "é".repeat(n)),
        (1usize..50_000).prop_map(|n| "x".repeat(n)),
    ];
    let entry = (0u8..3, text, 0usize..40).prop_map(|(kind, text, tool)| match kind {
        0 => LedgerEntry::new(Message::user(text)),
        1 => LedgerEntry::new(Message::Assistant {
            tool_calls: vec![ToolCall::new(
                format!("c{tool}"),
                format!("tool_{tool}_{}", text.chars().take(50).collect::<String>()),
                "{}",
            )],
            content: Some(text),
        }),
        _ => LedgerEntry::new(Message::tool(format!("c{tool}"), format!("Error: {text}"))),
    });
    prop::collection::vec(entry, 0..400)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_digest_is_bounded_whatever_the_span(
        span in digest_span_strategy(),
        cap in 0usize..10_000,
    ) {
        let text = digest(&span, 0..span.len(), cap);
        prop_assert!(text.len() <= MAX_DIGEST_BYTES, "{} bytes", text.len());
        prop_assert!(text.len() <= cap.max(64), "{} bytes for a cap of {cap}", text.len());
        // Deterministic: the same span gives the same digest.
        prop_assert_eq!(&text, &digest(&span, 0..span.len(), cap));
    }
}

#[test]
fn the_digest_names_the_requests_the_tools_and_their_failures() {
    let span = vec![
        LedgerEntry::new(Message::user("Find the config file\nand more detail")),
        LedgerEntry::new(Message::Assistant {
            content: None,
            tool_calls: vec![
                ToolCall::new("c1", "read_file", "{\"path\":\"a\"}"),
                ToolCall::new("c2", "read_file", "{}"),
            ],
        }),
        LedgerEntry::new(Message::tool("c1", "contents")),
        LedgerEntry::new(Message::tool("c2", "Error: no such file")),
        LedgerEntry::new(Message::assistant("Found it.")),
        LedgerEntry::new(Message::user("Now rename it to b.toml")),
        LedgerEntry::new(Message::assistant("Done.")),
    ];
    let text = digest(&span, 0..span.len(), 4096);
    assert!(text.starts_with(DIGEST_HEADER), "{text}");
    assert!(
        text.contains("7 messages: 2 from the user, 3 from the assistant, 2 tool results"),
        "{text}"
    );
    assert!(text.contains("- Find the config file\n"), "{text}");
    assert!(text.contains("read_file ×2 (1 failed)"), "{text}");
    assert!(
        text.contains("The last user request in this part: Now rename it to b.toml"),
        "{text}"
    );
}

#[path = "context/small_windows.rs"]
mod small_windows;
