//! The agent loop, driven by a scripted in-memory model.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use expect_test::{Expect, expect};
use hermes_core::*;

/// One scripted model reply.
enum Step {
    /// Stream `pieces` as text deltas, then finish with these tool calls and reason.
    Reply {
        pieces: Vec<&'static str>,
        calls: Vec<ToolCall>,
        finish: Option<FinishReason>,
    },
    /// Fail the call.
    Fail(ModelError),
}

fn text(s: &'static str) -> Step {
    Step::Reply {
        pieces: vec![s],
        calls: vec![],
        finish: Some(FinishReason::Stop),
    }
}

fn calls(calls: Vec<ToolCall>) -> Step {
    Step::Reply {
        pieces: vec![],
        calls,
        finish: Some(FinishReason::ToolCalls),
    }
}

/// What the model saw on one call.
#[derive(Debug, Clone)]
struct Seen {
    system_prompt: String,
    messages: Vec<Message>,
    tools: Vec<String>,
    /// The request as the provider client would send it.
    wire: serde_json::Value,
}

#[derive(Default)]
struct ScriptedModel {
    steps: Mutex<Vec<Step>>,
    seen: Mutex<Vec<Seen>>,
}

impl ScriptedModel {
    fn new(mut steps: Vec<Step>) -> Arc<Self> {
        steps.reverse();
        Arc::new(ScriptedModel {
            steps: Mutex::new(steps),
            seen: Mutex::default(),
        })
    }
    fn calls(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

impl Model for ScriptedModel {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let mut body = Vec::new();
        codec::encode_request(&codec::RequestOptions::new("m"), request, &mut body).unwrap();
        self.seen.lock().unwrap().push(Seen {
            system_prompt: request.system_prompt.to_owned(),
            messages: request.messages.iter().map(|e| e.message.clone()).collect(),
            tools: request.tools.iter().map(|t| t.name.clone()).collect(),
            wire: serde_json::from_slice(&body).unwrap(),
        });
        let step = self
            .steps
            .lock()
            .unwrap()
            .pop()
            .unwrap_or_else(|| text("(script exhausted)"));
        match step {
            Step::Fail(e) => Err(e),
            Step::Reply {
                pieces,
                calls,
                finish,
            } => {
                let mut content = String::new();
                for p in &pieces {
                    content.push_str(p);
                    if sink.on_text(p) == Flow::Stop {
                        return Ok(Completion {
                            content: Some(content),
                            tool_calls: calls,
                            finish_reason: None,
                            ..Completion::default()
                        });
                    }
                }
                Ok(Completion {
                    content: (!pieces.is_empty()).then_some(content),
                    tool_calls: calls,
                    reasoning: Some("private chain of thought".into()),
                    finish_reason: finish,
                    usage: Some(Usage {
                        prompt_tokens: 10,
                        completion_tokens: 5,
                        total_tokens: 15,
                        ..Usage::default()
                    }),
                    ..Completion::default()
                })
            }
        }
    }
}

/// A tool that echoes its arguments, counts calls, and can act on the run.
struct Echo {
    name: &'static str,
    spec: ToolSpec,
    calls: Arc<AtomicUsize>,
    interrupt_after: Option<InterruptFlag>,
}

fn echo(name: &'static str) -> Echo {
    Echo {
        name,
        spec: ToolSpec::new(name, "echoes", serde_json::json!({"type": "object"})),
        calls: Arc::default(),
        interrupt_after: None,
    }
}

impl Tool for Echo {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if let Some(flag) = &self.interrupt_after {
            flag.interrupt();
        }
        Ok(format!("{} got {arguments}", self.name))
    }
}

struct Failing(ToolSpec);
impl Tool for Failing {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn call(&self, _: &str, _: &ToolContext<'_>) -> Result<String, ToolError> {
        Err(ToolError::Failed("Error: disk on fire".into()))
    }
}

fn call(id: &str, name: &str, args: &str) -> ToolCall {
    ToolCall::new(id, name, args)
}

/// Every tool call answered exactly once, in order, directly after its message.
fn assert_valid_for_api(messages: &[LedgerEntry]) {
    let mut i = 0;
    while i < messages.len() {
        let calls = messages[i].message.tool_calls();
        for (k, c) in calls.iter().enumerate() {
            match &messages.get(i + 1 + k).map(|e| &e.message) {
                Some(Message::Tool { tool_call_id, .. }) => {
                    assert_eq!(tool_call_id, &c.id, "result {k} answers the wrong call")
                }
                other => panic!("call {} unanswered, found {other:?}", c.id),
            }
        }
        if let Message::Tool { tool_call_id, .. } = &messages[i].message {
            let answered = messages[..i]
                .iter()
                .rev()
                .find_map(|e| (!e.message.tool_calls().is_empty()).then(|| e.message.tool_calls()));
            assert!(
                answered
                    .into_iter()
                    .flatten()
                    .any(|c| &c.id == tool_call_id),
                "orphan tool result {tool_call_id}"
            );
        }
        i += 1 + calls.len();
    }
}

/// A compact transcript for snapshot comparison.
fn render(out: &RunOutcome) -> String {
    let mut s = format!("stop: {:?}, iterations: {}\n", out.stop, out.iterations);
    for e in out.new_messages() {
        let m = &e.message;
        s.push_str(&format!("{}:", m.role()));
        if let Some(c) = m.content() {
            s.push_str(&format!(" {c:?}"));
        }
        for c in m.tool_calls() {
            s.push_str(&format!(
                " [{} {}({})]",
                c.id, c.function.name, c.function.arguments
            ));
        }
        if let Message::Tool { tool_call_id, .. } = m {
            s.push_str(&format!(" <- {tool_call_id}"));
        }
        if e.meta.interrupted {
            s.push_str(" (interrupted)");
        }
        if let Some(f) = &e.meta.finish_reason {
            s.push_str(&format!(" ({})", f.as_str()));
        }
        s.push('\n');
    }
    s
}

fn agent(model: Arc<ScriptedModel>, tools: ToolRegistry) -> Agent {
    Agent::new(model, Arc::new(tools), "You are Hermes.")
}

fn check(out: &RunOutcome, expect: Expect) {
    assert_valid_for_api(&out.messages);
    expect.assert_eq(&render(out));
}

#[test]
fn plain_answer_completes() {
    let model = ScriptedModel::new(vec![text("Hi there")]);
    let out = agent(model.clone(), ToolRegistry::new()).run_conversation("hello", vec![]);
    assert_eq!(out.final_text, "Hi there");
    assert_eq!(out.usage.total_tokens, 15);
    check(
        &out,
        expect![[r#"
            stop: Completed, iterations: 1
            user: "hello"
            assistant: "Hi there" (stop)
        "#]],
    );
}

#[test]
fn several_tool_calls_in_one_turn_are_answered_in_order() {
    let model = ScriptedModel::new(vec![
        calls(vec![
            call("c1", "a", r#"{"x":1}"#),
            call("c2", "b", r#"{"y":2}"#),
            call("c3", "a", r#"{"z":3}"#),
        ]),
        text("done"),
    ]);
    let tools = ToolRegistry::new().with(echo("a")).with(echo("b"));
    let out = agent(model.clone(), tools).run_conversation("go", vec![]);
    check(
        &out,
        expect![[r#"
            stop: Completed, iterations: 2
            user: "go"
            assistant: [c1 a({"x":1})] [c2 b({"y":2})] [c3 a({"z":3})] (tool_calls)
            tool: "a got {\"x\":1}" <- c1
            tool: "b got {\"y\":2}" <- c2
            tool: "a got {\"z\":3}" <- c3
            assistant: "done" (stop)
        "#]],
    );
    // The second call saw the whole exchange.
    let seen = model.seen.lock().unwrap();
    assert_eq!(seen[1].messages.len(), 5);
    assert_eq!(seen[1].tools, ["a", "b"]);
}

#[test]
fn missing_and_duplicate_tool_call_ids_are_made_unique() {
    let model = ScriptedModel::new(vec![
        calls(vec![
            call("", "a", "{}"),
            call("dup", "a", "{}"),
            call("dup", "a", "{}"),
        ]),
        text("ok"),
    ]);
    let out = agent(model, ToolRegistry::new().with(echo("a"))).run_conversation("go", vec![]);
    check(
        &out,
        expect![[r#"
            stop: Completed, iterations: 2
            user: "go"
            assistant: [call_1_0 a({})] [dup a({})] [dup_1_2 a({})] (tool_calls)
            tool: "a got {}" <- call_1_0
            tool: "a got {}" <- dup
            tool: "a got {}" <- dup_1_2
            assistant: "ok" (stop)
        "#]],
    );
}

#[test]
fn invented_tool_call_ids_never_repeat_across_turns() {
    // A provider that omits ids on every turn.
    let model = ScriptedModel::new(vec![
        calls(vec![call("", "a", "{}")]),
        text("first"),
        calls(vec![call("", "a", "{}")]),
        text("second"),
    ]);
    let ag = agent(model, ToolRegistry::new().with(echo("a")));
    let first = ag.run_conversation("one", vec![]);
    let second = ag.run_conversation("two", first.messages);
    let ids: Vec<&str> = second
        .messages
        .iter()
        .flat_map(|e| e.message.tool_calls())
        .map(|c| c.id.as_str())
        .collect();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1], "ids must be unique in the conversation");
    assert_valid_for_api(&second.messages);
}

#[test]
fn bad_arguments_unknown_tools_and_failures_become_results_the_model_reads() {
    let model = ScriptedModel::new(vec![
        calls(vec![
            call("c1", "a", "{not json"),
            call("c2", "nope", "{}"),
            call("c3", "boom", "{}"),
            call("c4", "a", ""),
        ]),
        text("recovered"),
    ]);
    let tools = ToolRegistry::new()
        .with(echo("a"))
        .with(Failing(ToolSpec::new(
            "boom",
            "fails",
            serde_json::json!({}),
        )));
    let out = agent(model, tools).run_conversation("go", vec![]);
    assert_eq!(out.stop, StopReason::Completed);
    let results: Vec<&str> = out.messages[2..6]
        .iter()
        .map(|e| e.message.content().unwrap())
        .collect();
    assert!(results[0].contains("not valid JSON"), "{}", results[0]);
    assert!(
        results[0].contains("shown as {} in this conversation"),
        "the model is told why it sees {{}}: {}",
        results[0]
    );
    assert!(results[1].contains("unknown tool 'nope'") && results[1].contains("a, boom"));
    assert_eq!(results[2], "Error: disk on fire");
    assert_eq!(results[3], "a got {}", "empty arguments count as {{}}");
    assert_valid_for_api(&out.messages);
}

#[test]
fn wire_after_bad_tool_arguments_sends_an_empty_object_and_the_note() {
    let model = ScriptedModel::new(vec![
        calls(vec![call("c1", "a", r#"{"path": "cut mid-str"#)]),
        text("retried"),
    ]);
    let out =
        agent(model.clone(), ToolRegistry::new().with(echo("a"))).run_conversation("go", vec![]);
    assert_eq!(out.stop, StopReason::Completed);
    // The ledger keeps what the model wrote …
    assert_eq!(
        out.messages[1].message.tool_calls()[0].function.arguments,
        r#"{"path": "cut mid-str"#
    );
    // … the second request carries `{}` and a result that explains it.
    let seen = model.seen.lock().unwrap();
    let wire = &seen[1].wire["messages"];
    assert_eq!(wire[2]["tool_calls"][0]["function"]["arguments"], "{}");
    let note = wire[3]["content"].as_str().unwrap();
    assert!(
        note.contains("not valid JSON") && note.contains("shown as {}"),
        "{note}"
    );
}

#[test]
fn wire_after_a_cut_turn_without_text_omits_the_empty_assistant_message() {
    let model = ScriptedModel::new(vec![
        Step::Reply {
            pieces: vec![],
            calls: vec![],
            finish: Some(FinishReason::Length),
        },
        text("second answer"),
    ]);
    let ag = agent(model.clone(), ToolRegistry::new());
    let first = ag.run_conversation("one", vec![]);
    assert_eq!(first.stop, StopReason::Truncated);
    // The ledger records the empty, cut answer …
    assert_eq!(first.messages[1].message.content(), Some(""));
    let second = ag.run_conversation("two", first.messages);
    assert_eq!(second.stop, StopReason::Completed);
    // … the next request leaves it out: system, "one", "two".
    let seen = model.seen.lock().unwrap();
    let roles: Vec<&str> = seen[1].wire["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "user"]);
}

#[test]
fn budget_exhaustion_stops_and_leaves_valid_history() {
    let model = ScriptedModel::new(
        (0..10)
            .map(|i| calls(vec![call(&format!("c{i}"), "a", "{}")]))
            .collect(),
    );
    let a = echo("a");
    let count = a.calls.clone();
    let out = agent(model.clone(), ToolRegistry::new().with(a))
        .with_max_iterations(3)
        .run_conversation("loop forever", vec![]);
    assert_eq!(out.stop, StopReason::BudgetExhausted);
    // The wallet's last call is made without tools (SPEC Y6); this model
    // asks for a tool anyway, that call is not run, and it is asked once
    // more without the tools list (issue 38).
    assert_eq!(out.iterations, 4);
    assert_eq!(model.calls(), 4);
    assert_eq!(count.load(Ordering::SeqCst), 2);
    let seen = model.seen.lock().unwrap();
    assert_eq!(seen[2].wire["tool_choice"], "none");
    assert!(seen[3].wire.get("tools").is_none());
    assert!(seen[3].wire.get("tool_choice").is_none());
    drop(seen);
    assert!(
        out.stop
            .notice(3)
            .unwrap()
            .contains("maximum iteration count (3")
    );
    assert_valid_for_api(&out.messages);
}

/// Runs a sub-agent on the parent's wallet, spending what its script says.
struct Delegate {
    spec: ToolSpec,
    child_model: Arc<ScriptedModel>,
    remaining_seen_by_child: Arc<Mutex<Vec<u32>>>,
}

impl Tool for Delegate {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, _args: &str, ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let child = Agent::new(
            self.child_model.clone(),
            Arc::new(ToolRegistry::new().with(echo("a"))),
            "child",
        );
        let seen = self.remaining_seen_by_child.clone();
        let mut obs = FnObserver(move |e: &AgentEvent<'_>| {
            if let AgentEvent::ModelCall { remaining, .. } = e {
                seen.lock().unwrap().push(*remaining);
            }
        });
        let out = child.run("sub task", vec![], ctx.budget, &mut obs);
        Ok(format!(
            "child said {} after {} calls",
            out.final_text, out.iterations
        ))
    }
}

#[test]
fn a_child_agent_draws_from_the_parents_wallet() {
    // The child makes 15 model calls: 14 tool turns, then an answer.
    let mut child_steps: Vec<Step> = (0..14)
        .map(|i| calls(vec![call(&format!("k{i}"), "a", "{}")]))
        .collect();
    child_steps.push(text("found it"));
    let child_model = ScriptedModel::new(child_steps);
    let seen_by_child = Arc::new(Mutex::new(Vec::new()));
    let parent_model = ScriptedModel::new(vec![
        calls(vec![call("d1", "delegate", "{}")]),
        text("parent done"),
    ]);
    let tools = ToolRegistry::new().with(Delegate {
        spec: ToolSpec::new("delegate", "runs a child", serde_json::json!({})),
        child_model: child_model.clone(),
        remaining_seen_by_child: seen_by_child.clone(),
    });
    let parent = agent(parent_model, tools);

    // 81 in the wallet: the parent's first call leaves 80.
    let budget = IterationBudget::new(81);
    let mut parent_remaining = Vec::new();
    let out = parent.run(
        "research",
        vec![],
        &budget,
        &mut FnObserver(|e: &AgentEvent<'_>| {
            if let AgentEvent::ModelCall { remaining, .. } = e {
                parent_remaining.push(*remaining);
            }
        }),
    );
    assert_eq!(out.stop, StopReason::Completed);
    assert_eq!(child_model.calls(), 15);
    let child_seen = seen_by_child.lock().unwrap().clone();
    // The parent holds one unit for its own answer from its start, so the
    // child sees one less than the parent has.
    assert_eq!(child_seen.first(), Some(&78));
    assert_eq!(child_seen.last(), Some(&64));
    // 80 left − 15 spent by the child = 65; the parent's next call takes one more.
    assert_eq!(parent_remaining, [80, 64]);
    assert_eq!(budget.remaining(), 64);
    assert_eq!(budget.used(), 17);
    assert!(
        out.messages[2]
            .message
            .content()
            .unwrap()
            .contains("after 15 calls")
    );
}

#[test]
fn budget_handles_share_one_wallet_across_threads() {
    let budget = IterationBudget::new(1000);
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let b = budget.clone();
            std::thread::spawn(move || (0..400).filter(|_| b.try_consume()).count())
        })
        .collect();
    let taken: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(taken, 1000);
    assert_eq!(budget.remaining(), 0);
    assert!(!budget.try_consume());
    assert!(budget.clone().shares_wallet_with(&budget));
    assert!(!IterationBudget::new(5).shares_wallet_with(&budget));
    assert_eq!(IterationBudget::default().total(), 90);
}

#[test]
fn finish_reason_length_is_never_silent_and_cut_tool_calls_never_run() {
    let model = ScriptedModel::new(vec![Step::Reply {
        pieces: vec!["Here is the start of a long ans"],
        calls: vec![call("c1", "a", r#"{"path": "/et"#)],
        finish: Some(FinishReason::Length),
    }]);
    let a = echo("a");
    let count = a.calls.clone();
    let out = agent(model, ToolRegistry::new().with(a)).run_conversation("write", vec![]);
    assert_eq!(count.load(Ordering::SeqCst), 0);
    assert!(out.stop.notice(90).unwrap().contains("cut off"));
    check(
        &out,
        expect![[r#"
            stop: Truncated, iterations: 1
            user: "write"
            assistant: "Here is the start of a long ans" (length)
        "#]],
    );
    assert_eq!(out.final_text, "Here is the start of a long ans");
}

/// Sets the flag when it sees the configured event.
struct InterruptOn<F: Fn(&AgentEvent<'_>) -> bool> {
    flag: InterruptFlag,
    when: F,
}
impl<F: Fn(&AgentEvent<'_>) -> bool> AgentObserver for InterruptOn<F> {
    fn on_event(&mut self, e: &AgentEvent<'_>) {
        if (self.when)(e) {
            self.flag.interrupt();
        }
    }
}

#[test]
fn interrupt_while_streaming_keeps_the_partial_text() {
    let model = ScriptedModel::new(vec![Step::Reply {
        pieces: vec!["Hel", "lo, wor", "ld"],
        calls: vec![call("c1", "a", "{}")],
        finish: Some(FinishReason::ToolCalls),
    }]);
    let a = echo("a");
    let count = a.calls.clone();
    let ag = agent(model.clone(), ToolRegistry::new().with(a));
    let mut obs = InterruptOn {
        flag: ag.interrupt_flag().clone(),
        when: |e| matches!(e, AgentEvent::TextDelta(t) if t.contains("wor")),
    };
    let out = ag.run("hi", vec![], &IterationBudget::default(), &mut obs);
    assert_eq!(
        count.load(Ordering::SeqCst),
        0,
        "no tool runs after an interrupt"
    );
    check(
        &out,
        expect![[r#"
            stop: Interrupted, iterations: 1
            user: "hi"
            assistant: "Hello, wor" (interrupted)
        "#]],
    );
}

#[test]
fn interrupt_after_a_tool_call_skips_the_rest_with_the_placeholder() {
    let flag = InterruptFlag::new();
    let mut stopper = echo("stopper");
    stopper.interrupt_after = Some(flag.clone());
    let later = echo("a");
    let later_count = later.calls.clone();
    let model = ScriptedModel::new(vec![
        calls(vec![
            call("c1", "a", "{}"),
            call("c2", "stopper", "{}"),
            call("c3", "a", "{}"),
            call("c4", "a", "{}"),
        ]),
        text("never"),
    ]);
    let ag =
        agent(model.clone(), ToolRegistry::new().with(later).with(stopper)).with_interrupt(flag);
    let out = ag.run_conversation("go", vec![]);
    assert_eq!(later_count.load(Ordering::SeqCst), 1);
    assert_eq!(model.calls(), 1);
    check(
        &out,
        expect![[r#"
            stop: Interrupted, iterations: 1
            user: "go"
            assistant: [c1 a({})] [c2 stopper({})] [c3 a({})] [c4 a({})] (tool_calls)
            tool: "a got {}" <- c1
            tool: "stopper got {}" <- c2
            tool: "[Tool execution skipped -- user sent a new message]" <- c3
            tool: "[Tool execution skipped -- user sent a new message]" <- c4
        "#]],
    );
}

#[test]
fn interrupt_between_iterations_leaves_before_the_next_model_call() {
    let model = ScriptedModel::new(vec![calls(vec![call("c1", "a", "{}")]), text("never")]);
    let ag = agent(model.clone(), ToolRegistry::new().with(echo("a")));
    // Set the flag after check point (b) has passed: when the tool result is appended.
    let mut obs = InterruptOn {
        flag: ag.interrupt_flag().clone(),
        when: |e| matches!(e, AgentEvent::Appended(entry) if entry.message.role() == Role::Tool),
    };
    let budget = IterationBudget::default();
    let out = ag.run("go", vec![], &budget, &mut obs);
    assert_eq!(model.calls(), 1);
    assert_eq!(
        budget.used(),
        1,
        "no budget spent on a call that was not made"
    );
    check(
        &out,
        expect![[r#"
            stop: Interrupted, iterations: 1
            user: "go"
            assistant: [c1 a({})] (tool_calls)
            tool: "a got {}" <- c1
        "#]],
    );
}

#[test]
fn an_interrupt_aimed_at_an_earlier_run_does_not_stop_the_next() {
    let model = ScriptedModel::new(vec![text("fresh")]);
    let ag = agent(model, ToolRegistry::new());
    ag.interrupt();
    let out = ag.run_conversation("new message", vec![]);
    assert_eq!(out.stop, StopReason::Completed);
}

#[test]
fn model_errors_stop_the_run_and_keep_what_was_gathered() {
    let err = ModelError {
        kind: ModelErrorKind::Status(503),
        message: "provider returned 503: overloaded".into(),
        partial_text: Some("I was say".into()),
    };
    let model = ScriptedModel::new(vec![
        calls(vec![call("c1", "a", "{}")]),
        Step::Fail(err.clone()),
    ]);
    let history = vec![
        LedgerEntry::new(Message::user("earlier")),
        LedgerEntry::new(Message::assistant("earlier answer")),
    ];
    let out = agent(model, ToolRegistry::new().with(echo("a"))).run_conversation("go", history);
    assert_eq!(out.stop, StopReason::ModelError(err));
    assert_eq!(out.first_new, 2);
    assert_eq!(out.messages[0].message.content(), Some("earlier"));
    check(
        &out,
        expect![[r#"
            stop: ModelError(ModelError { kind: Status(503), message: "provider returned 503: overloaded", partial_text: Some("I was say") }), iterations: 2
            user: "go"
            assistant: [c1 a({})] (tool_calls)
            tool: "a got {}" <- c1
            assistant: "I was say" (interrupted)
        "#]],
    );
}

#[test]
fn the_system_prompt_is_sent_first_every_time_and_never_stored() {
    let model = ScriptedModel::new(vec![calls(vec![call("c1", "a", "{}")]), text("ok")]);
    let out =
        agent(model.clone(), ToolRegistry::new().with(echo("a"))).run_conversation("hi", vec![]);
    let seen = model.seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    for s in seen.iter() {
        assert_eq!(s.system_prompt, "You are Hermes.");
        assert_eq!(s.messages[0], Message::user("hi"));
    }
    assert!(
        out.messages
            .iter()
            .all(|e| e.message.content() != Some("You are Hermes."))
    );
}

#[test]
fn ledger_fields_are_recorded_but_not_shown_to_the_model() {
    let model = ScriptedModel::new(vec![calls(vec![call("c1", "a", "{}")]), text("ok")]);
    let out =
        agent(model.clone(), ToolRegistry::new().with(echo("a"))).run_conversation("hi", vec![]);
    let assistant = &out.messages[1];
    assert_eq!(
        assistant.meta.reasoning.as_deref(),
        Some("private chain of thought")
    );
    assert_eq!(assistant.meta.usage.unwrap().total_tokens, 15);
    // What the model received on its second call: wire messages only.
    let wire = serde_json::to_string(&model.seen.lock().unwrap()[1].messages).unwrap();
    assert!(!wire.contains("chain of thought"), "{wire}");
    assert!(!wire.contains("total_tokens"), "{wire}");
}

#[test]
fn history_is_extended_not_copied() {
    let history: Vec<LedgerEntry> = (0..50)
        .map(|i| LedgerEntry::new(Message::user(format!("m{i}"))))
        .collect();
    let model = ScriptedModel::new(vec![text("ok")]);
    let out = agent(model.clone(), ToolRegistry::new()).run_conversation("last", history);
    assert_eq!(out.first_new, 50);
    assert_eq!(out.messages.len(), 52);
    assert_eq!(out.new_messages().len(), 2);
    assert_eq!(model.seen.lock().unwrap()[0].messages.len(), 51);
}

#[path = "agent/halt.rs"]
mod halt;
#[path = "agent/text_calls.rs"]
mod text_calls;
