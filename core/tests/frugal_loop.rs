//! SPEC Y6, the frugal loop, driven by scripted models: the repeat guard,
//! the tool-less answer at the end of the wallet, read-only batches.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use hermes_core::*;
use serde_json::json;

/// What the model saw on one call.
#[derive(Clone, Debug)]
struct Seen {
    tool_choice: ToolChoice,
    /// The request as the OpenAI encoder writes it.
    wire: serde_json::Value,
    last_tool_result: Option<String>,
}

type Script = dyn Fn(usize, &ChatRequest<'_>) -> Completion + Send + Sync;

/// A model whose answer to call `n` (0-based) is `script(n, request)`.
struct ScriptedModel {
    script: Box<Script>,
    seen: Mutex<Vec<Seen>>,
}

impl ScriptedModel {
    fn new(
        script: impl Fn(usize, &ChatRequest<'_>) -> Completion + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(ScriptedModel {
            script: Box::new(script),
            seen: Mutex::default(),
        })
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Model for ScriptedModel {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        _sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let mut body = Vec::new();
        codec::encode_request(&codec::RequestOptions::new("m"), request, &mut body).unwrap();
        let last_tool_result = request.messages.last().and_then(|e| match &e.message {
            Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        });
        let n = {
            let mut seen = self.seen.lock().unwrap();
            seen.push(Seen {
                tool_choice: request.tool_choice,
                wire: serde_json::from_slice(&body).unwrap(),
                last_tool_result,
            });
            seen.len() - 1
        };
        Ok((self.script)(n, request))
    }
}

fn answer(text: &str) -> Completion {
    Completion {
        content: Some(text.into()),
        finish_reason: Some(FinishReason::Stop),
        ..Completion::default()
    }
}

fn tool_calls(calls: Vec<ToolCall>) -> Completion {
    Completion {
        tool_calls: calls,
        finish_reason: Some(FinishReason::ToolCalls),
        ..Completion::default()
    }
}

fn call(id: &str, name: &str, args: &str) -> ToolCall {
    ToolCall::new(id, name, args)
}

/// A model that asks for `calls(n)` whenever it may call tools and
/// answers when it may not: a model stuck in a loop, but obedient.
fn looping(calls: impl Fn(usize) -> Vec<ToolCall> + Send + Sync + 'static) -> Arc<ScriptedModel> {
    ScriptedModel::new(move |n, req| match req.tool_choice {
        ToolChoice::None => answer("here is what I have"),
        ToolChoice::Auto => tool_calls(calls(n)),
    })
}

/// A tool with a fixed result (or the call count, when `varying`),
/// counting its calls.
struct Fixed {
    spec: ToolSpec,
    read_only: bool,
    varying: bool,
    calls: Arc<AtomicUsize>,
}

fn fixed(name: &str) -> Fixed {
    Fixed {
        spec: ToolSpec::new(name, "a tool", json!({"type": "object"})),
        read_only: false,
        varying: false,
        calls: Arc::new(AtomicUsize::new(0)),
    }
}

impl Tool for Fixed {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, _arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(if self.varying {
            format!("{} result {n}", self.spec.name)
        } else {
            format!("{} result", self.spec.name)
        })
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
}

/// Every tool call answered once, in order, right after its message.
fn assert_valid_for_api(messages: &[LedgerEntry]) {
    let mut i = 0;
    while i < messages.len() {
        if let Message::Assistant { tool_calls, .. } = &messages[i].message {
            for (k, c) in tool_calls.iter().enumerate() {
                match &messages[i + 1 + k].message {
                    Message::Tool { tool_call_id, .. } => assert_eq!(tool_call_id, &c.id),
                    other => panic!("call {} unanswered, found {other:?}", c.id),
                }
            }
            i += 1 + tool_calls.len();
        } else {
            i += 1;
        }
    }
}

fn tool_results(out: &RunOutcome) -> Vec<String> {
    out.new_messages()
        .iter()
        .filter_map(|e| match &e.message {
            Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .collect()
}

/// Runs with an observer that records the repeat guard's events.
fn run_recording(agent: &Agent, budget: &IterationBudget) -> (RunOutcome, Vec<(String, u32)>) {
    let mut stopped = Vec::new();
    let out = agent.run(
        "do the thing",
        vec![],
        budget,
        &mut FnObserver(|e: &AgentEvent<'_>| {
            if let AgentEvent::RepeatsStopped { tool, count } = e {
                stopped.push(((*tool).to_owned(), *count));
            }
        }),
    );
    (out, stopped)
}

#[test]
fn the_same_call_is_noted_from_the_third_time_and_answered_without_tools_after_the_fifth() {
    // Key order and spacing do not make a call new.
    let model = looping(|n| {
        let args = if n % 2 == 0 {
            r#"{"action":"list","all":true}"#
        } else {
            r#"{ "all": true, "action": "list" }"#
        };
        vec![call(&format!("c{n}"), "todo", args)]
    });
    let todo = fixed("todo");
    let count = todo.calls.clone();
    let agent = Agent::new(
        model.clone(),
        Arc::new(ToolRegistry::new().with(todo)),
        "sys",
    )
    .with_repeat_guard(Some(RepeatGuard::DEFAULT));
    let (out, stopped) = run_recording(&agent, &IterationBudget::new(90));

    assert_eq!(out.stop, StopReason::Completed);
    assert_eq!(out.final_text, "here is what I have");
    assert_eq!(out.iterations, 6);
    assert_eq!(count.load(Ordering::SeqCst), 5);
    assert_eq!(stopped, [("todo".to_owned(), 5)]);
    let results = tool_results(&out);
    assert_eq!(results[0], "todo result");
    assert_eq!(results[1], "todo result");
    assert!(results[2].starts_with("todo result\n\n[hermes: this is call 3 of `todo`"));
    assert!(results[3].contains("this is call 4 of `todo`"));
    assert!(results[4].contains("`todo` was called 5 times"));
    assert!(results[4].contains("Tools are off for your next reply"));
    let seen = model.seen();
    assert!(seen[..5].iter().all(|s| s.tool_choice == ToolChoice::Auto));
    assert!(
        seen[..5]
            .iter()
            .all(|s| s.wire.get("tool_choice").is_none())
    );
    assert_eq!(seen[5].tool_choice, ToolChoice::None);
    assert_eq!(seen[5].wire["tool_choice"], "none");
    // The definitions stay: the ledger holds calls of them.
    assert_eq!(seen[5].wire["tools"][0]["function"]["name"], "todo");
    assert_valid_for_api(&out.messages);
}

#[test]
fn a_cycle_of_two_calls_is_stopped_too() {
    // A, B, A, B, …: A's fifth call is the model's ninth.
    let model = looping(|n| {
        let name = if n % 2 == 0 { "a" } else { "b" };
        vec![call(&format!("c{n}"), name, "{}")]
    });
    let tools = ToolRegistry::new().with(fixed("a")).with(fixed("b"));
    let agent = Agent::new(model.clone(), Arc::new(tools), "sys")
        .with_repeat_guard(Some(RepeatGuard::DEFAULT));
    let (out, stopped) = run_recording(&agent, &IterationBudget::new(90));
    assert_eq!(out.final_text, "here is what I have");
    assert_eq!(out.iterations, 10);
    assert_eq!(stopped, [("a".to_owned(), 5)]);
    let results = tool_results(&out);
    assert!(results[4].contains("this is call 3 of `a`"));
    assert!(results[5].contains("this is call 3 of `b`"));
    assert_eq!(model.seen()[9].tool_choice, ToolChoice::None);
}

#[test]
fn calls_whose_results_change_are_not_repeats_and_the_guard_can_be_off() {
    let same_args = |n: usize| vec![call(&format!("c{n}"), "poll", "{}")];
    let mut poll = fixed("poll");
    poll.varying = true;
    let agent = Agent::new(
        looping(same_args),
        Arc::new(ToolRegistry::new().with(poll)),
        "s",
    )
    .with_repeat_guard(Some(RepeatGuard::DEFAULT));
    let (out, stopped) = run_recording(&agent, &IterationBudget::new(12));
    assert!(stopped.is_empty());
    assert_eq!(out.iterations, 12);
    assert!(
        tool_results(&out)
            .iter()
            .all(|r| !r.contains("this is call"))
    );

    let agent = Agent::new(
        looping(same_args),
        Arc::new(ToolRegistry::new().with(fixed("poll"))),
        "s",
    );
    assert_eq!(agent.repeat_guard(), None);
    let (out, stopped) = run_recording(&agent, &IterationBudget::new(12));
    assert!(stopped.is_empty());
    assert_eq!(out.iterations, 12);
    assert_eq!(out.stop, StopReason::BudgetExhausted);
}

#[test]
fn the_wallets_last_call_is_made_without_tools_and_its_answer_is_kept() {
    let model = looping(|n| {
        vec![call(
            &format!("c{n}"),
            "fetch",
            &format!(r#"{{"page":{n}}}"#),
        )]
    });
    let mut fetch = fixed("fetch");
    fetch.varying = true;
    let agent = Agent::new(
        model.clone(),
        Arc::new(ToolRegistry::new().with(fetch)),
        "sys",
    )
    .with_max_iterations(6)
    .with_repeat_guard(Some(RepeatGuard::DEFAULT));
    let out = agent.run_conversation("read everything", vec![]);

    assert_eq!(out.stop, StopReason::BudgetExhausted);
    assert_eq!(out.final_text, "here is what I have");
    assert_eq!(out.iterations, 6);
    let seen = model.seen();
    assert_eq!(seen.len(), 6, "the cap is kept: no call past it");
    assert!(seen[..5].iter().all(|s| s.tool_choice == ToolChoice::Auto));
    assert_eq!(seen[5].tool_choice, ToolChoice::None);
    // The model is told before its last call, where it reads last.
    let told = seen[5].last_tool_result.as_deref().unwrap();
    assert!(told.starts_with("fetch result 4\n\n[hermes: the iteration budget is spent."));
    assert!(seen[..5].iter().all(|s| {
        !s.last_tool_result
            .as_deref()
            .unwrap_or("")
            .contains("budget is spent")
    }));
    let notice = out.stop.notice(6).unwrap();
    assert!(
        notice.contains("maximum iteration count (6 model calls)"),
        "{notice}"
    );
    assert_valid_for_api(&out.messages);
}

#[test]
fn tool_calls_a_provider_sends_despite_tool_choice_none_are_not_run() {
    // This model ignores tool_choice.
    let model = ScriptedModel::new(|n, _| tool_calls(vec![call(&format!("c{n}"), "t", "{}")]));
    let mut t = fixed("t");
    t.varying = true;
    let count = t.calls.clone();
    let agent =
        Agent::new(model, Arc::new(ToolRegistry::new().with(t)), "sys").with_max_iterations(3);
    let out = agent.run_conversation("go", vec![]);
    assert_eq!(out.stop, StopReason::BudgetExhausted);
    // Asked once more without the tools list (issue 38); this model calls
    // tools even then, and those calls are not run either.
    assert_eq!(out.iterations, 4);
    assert!(agent.ignores_tool_choice());
    assert_eq!(count.load(Ordering::SeqCst), 2);
    match &out.messages.last().unwrap().message {
        Message::Assistant { tool_calls, .. } => assert!(tool_calls.is_empty()),
        other => panic!("{other:?}"),
    }
    assert_valid_for_api(&out.messages);
}

#[test]
fn a_wallet_of_one_that_answers_has_simply_answered() {
    let model = looping(|_| vec![]);
    let agent = Agent::new(
        model.clone(),
        Arc::new(ToolRegistry::new().with(fixed("t"))),
        "s",
    )
    .with_max_iterations(1);
    let out = agent.run_conversation("hi", vec![]);
    assert_eq!(out.stop, StopReason::Completed);
    assert_eq!(out.final_text, "here is what I have");
}

/// A sub-agent on the parent's wallet that loops until the wallet is gone.
struct Delegate {
    spec: ToolSpec,
    child_model: Arc<ScriptedModel>,
}

impl Tool for Delegate {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, _args: &str, ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let mut t = fixed("t");
        t.varying = true;
        let child = Agent::new(
            self.child_model.clone(),
            Arc::new(ToolRegistry::new().with(t)),
            "child",
        );
        let out = child.run("sub task", vec![], ctx.budget, &mut NoObserver);
        Ok(format!("child said: {} ({:?})", out.final_text, out.stop))
    }
}

#[test]
fn a_child_that_spends_the_wallet_answers_and_so_does_its_parent_within_the_wallet() {
    let child_model = looping(|n| vec![call(&format!("k{n}"), "t", &format!(r#"{{"n":{n}}}"#))]);
    let parent_model = looping(|n| vec![call(&format!("d{n}"), "delegate", "{}")]);
    let tools = ToolRegistry::new().with(Delegate {
        spec: ToolSpec::new("delegate", "runs a child", json!({})),
        child_model: child_model.clone(),
    });
    let parent = Agent::new(parent_model.clone(), Arc::new(tools), "parent");
    let budget = IterationBudget::new(5);
    let out = parent.run("research", vec![], &budget, &mut NoObserver);

    // The parent reserves one unit for its answer and its first call takes
    // another, leaving 3: the child reserves one for its own answer, makes
    // 2 calls with tools and its last without; the parent then answers
    // from its reserve, without tools. 5 calls in all, as the wallet says.
    let child_seen = child_model.seen();
    assert_eq!(child_seen.len(), 3);
    assert_eq!(child_seen[2].tool_choice, ToolChoice::None);
    let parent_seen = parent_model.seen();
    assert_eq!(parent_seen.len(), 2);
    assert_eq!(parent_seen[1].tool_choice, ToolChoice::None);
    assert!(
        parent_seen[1]
            .last_tool_result
            .as_deref()
            .unwrap()
            .starts_with("child said: here is what I have (BudgetExhausted)")
    );
    assert_eq!(out.stop, StopReason::BudgetExhausted);
    assert_eq!(out.final_text, "here is what I have");
    assert_eq!(budget.remaining(), 0);
    assert_valid_for_api(&out.messages);
}

/// A batch runner that records what it was given, runs the calls in
/// reverse order (as a concurrent runner may finish them) and can set the
/// interrupt flag after the first call it runs.
#[derive(Default)]
struct RecordingRunner {
    batches: Mutex<Vec<Vec<String>>>,
    interrupt_after_first: bool,
}

impl ToolBatchRunner for RecordingRunner {
    fn run_batch(
        &self,
        tools: &ToolRegistry,
        calls: &[BatchCall<'_>],
        budget: &IterationBudget,
        interrupt: &InterruptFlag,
    ) -> Vec<BatchResult> {
        self.batches
            .lock()
            .unwrap()
            .push(calls.iter().map(|c| c.tool_call_id.to_owned()).collect());
        let mut out: Vec<BatchResult> = vec![None; calls.len()];
        for (i, c) in calls.iter().enumerate().rev() {
            out[i] = hermes_core::tool::batch::run_one(tools, c, budget, interrupt);
            if self.interrupt_after_first {
                interrupt.interrupt();
            }
        }
        out
    }
}

fn read_only(name: &str) -> Fixed {
    let mut t = fixed(name);
    t.read_only = true;
    t
}

#[test]
fn a_turn_of_read_only_calls_is_one_batch_with_results_in_call_order() {
    let runner = Arc::new(RecordingRunner::default());
    let model = ScriptedModel::new(|n, _| match n {
        0 => tool_calls(vec![
            call("r1", "read", "{}"),
            call("r2", "grep", "{}"),
            call("r3", "read", r#"{"x":1}"#),
        ]),
        1 => tool_calls(vec![call("w1", "read", "{}"), call("w2", "write", "{}")]),
        _ => answer("done"),
    });
    let tools = ToolRegistry::new()
        .with(read_only("read"))
        .with(read_only("grep"))
        .with(fixed("write"));
    assert!(tools.is_read_only("read"));
    assert!(!tools.is_read_only("write"));
    assert!(!tools.is_read_only("missing"));
    let agent = Agent::new(model, Arc::new(tools), "s").with_batch_runner(runner.clone());
    let out = agent.run_conversation("go", vec![]);
    assert_eq!(out.stop, StopReason::Completed);
    // Only the all-read-only turn went to the runner.
    assert_eq!(*runner.batches.lock().unwrap(), [vec!["r1", "r2", "r3"]]);
    let ids: Vec<_> = out
        .new_messages()
        .iter()
        .filter_map(|e| match &e.message {
            Message::Tool {
                tool_call_id,
                content,
            } => Some((tool_call_id.clone(), content.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        ids,
        [
            ("r1".into(), "read result".into()),
            ("r2".into(), "grep result".into()),
            ("r3".into(), "read result".into()),
            ("w1".into(), "read result".into()),
            ("w2".into(), "write result".into()),
        ]
    );
    assert_valid_for_api(&out.messages);
}

#[test]
fn an_interrupt_during_a_batch_skips_the_calls_not_started() {
    let runner = Arc::new(RecordingRunner {
        interrupt_after_first: true,
        ..RecordingRunner::default()
    });
    let model = ScriptedModel::new(|_, _| {
        tool_calls(vec![
            call("r1", "read", "{}"),
            call("r2", "read", "{}"),
            call("r3", "read", "{}"),
        ])
    });
    let agent = Agent::new(
        model,
        Arc::new(ToolRegistry::new().with(read_only("read"))),
        "s",
    )
    .with_batch_runner(runner);
    let out = agent.run_conversation("go", vec![]);
    assert_eq!(out.stop, StopReason::Interrupted);
    let results = tool_results(&out);
    // The runner ran r3 first, then the flag stopped r2 and r1.
    assert_eq!(
        results,
        [SKIPPED_TOOL_RESULT, SKIPPED_TOOL_RESULT, "read result"]
    );
    assert_valid_for_api(&out.messages);
}

#[test]
fn the_default_runner_runs_a_batch_in_order() {
    let log = Arc::new(Mutex::new(Vec::new()));
    struct Logged(ToolSpec, Arc<Mutex<Vec<String>>>);
    impl Tool for Logged {
        fn spec(&self) -> &ToolSpec {
            &self.0
        }
        fn call(&self, arguments: &str, _: &ToolContext<'_>) -> Result<String, ToolError> {
            self.1.lock().unwrap().push(arguments.to_owned());
            Ok(arguments.to_owned())
        }
        fn read_only(&self) -> bool {
            true
        }
    }
    let model = ScriptedModel::new(|n, _| match n {
        0 => tool_calls(vec![
            call("a", "l", r#"{"i":1}"#),
            call("b", "l", r#"{"i":2}"#),
        ]),
        _ => answer("ok"),
    });
    let tool = Logged(ToolSpec::new("l", "logs", json!({})), log.clone());
    let out = Agent::new(model, Arc::new(ToolRegistry::new().with(tool)), "s")
        .run_conversation("go", vec![]);
    assert_eq!(out.stop, StopReason::Completed);
    assert_eq!(*log.lock().unwrap(), [r#"{"i":1}"#, r#"{"i":2}"#]);
}

/// What one thread does to a shared wallet in the interleaving test.
#[derive(Clone, Debug)]
enum WalletOp {
    /// One call paid straight from the wallet.
    Consume,
    /// A unit reserved, then spent on a call.
    ReserveSpend,
    /// A unit reserved, then given back unspent.
    ReserveGiveBack,
    /// A run as the loop makes it: reserve its answer, make up to `n`
    /// calls from the wallet, then answer from the reserve if the wallet
    /// ran dry (else give the reserve back).
    Run(u8),
}

fn wallet_op() -> impl proptest::strategy::Strategy<Value = WalletOp> {
    use proptest::prelude::*;
    prop_oneof![
        Just(WalletOp::Consume),
        Just(WalletOp::ReserveSpend),
        Just(WalletOp::ReserveGiveBack),
        (0u8..12).prop_map(WalletOp::Run),
    ]
}

/// Plays `ops` on `budget`; returns the calls made (units spent).
fn play(budget: &IterationBudget, ops: &[WalletOp]) -> u32 {
    let mut made = 0;
    for op in ops {
        match op {
            WalletOp::Consume => made += u32::from(budget.try_consume()),
            WalletOp::ReserveSpend => {
                if let Some(unit) = budget.reserve() {
                    unit.spend();
                    made += 1;
                }
            }
            WalletOp::ReserveGiveBack => drop(budget.reserve()),
            WalletOp::Run(n) => {
                let Some(answer) = budget.reserve() else {
                    continue;
                };
                let mut dry = false;
                for _ in 0..*n {
                    if budget.try_consume() {
                        made += 1;
                    } else {
                        dry = true;
                        break;
                    }
                }
                if dry {
                    answer.spend();
                    made += 1;
                }
            }
        }
    }
    made
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(96))]

    /// Threads racing on one wallet: whatever the interleaving, it never
    /// goes below zero or above its size, and once every thread is done
    /// the calls made are exactly what left it (nothing counted twice,
    /// nothing lost by a reserve given back).
    #[test]
    fn the_wallet_is_exact_whatever_the_interleaving(
        total in 0u32..48,
        plans in proptest::collection::vec(proptest::collection::vec(wallet_op(), 0..24), 1..6),
    ) {
        let budget = IterationBudget::new(total);
        let start = std::sync::Barrier::new(plans.len() + 1);
        let done = std::sync::atomic::AtomicBool::new(false);
        let (made, watched_ok) = std::thread::scope(|s| {
            let workers: Vec<_> = plans
                .iter()
                .map(|ops| {
                    let (budget, start) = (budget.clone(), &start);
                    s.spawn(move || {
                        start.wait();
                        play(&budget, ops)
                    })
                })
                .collect();
            let watcher = s.spawn(|| {
                start.wait();
                let mut ok = true;
                while !done.load(Ordering::Acquire) {
                    ok &= budget.remaining() <= total;
                }
                ok
            });
            let made: u32 = workers.into_iter().map(|w| w.join().unwrap()).sum();
            done.store(true, Ordering::Release);
            (made, watcher.join().unwrap())
        });
        proptest::prop_assert!(watched_ok, "the wallet went above its size (or wrapped below zero)");
        proptest::prop_assert!(made <= total);
        proptest::prop_assert_eq!(made, budget.used());
        proptest::prop_assert_eq!(budget.remaining() + made, total);
    }
}

/// Runs three children at once on the parent's wallet, each on its own
/// thread with its own model, looping until the wallet is dry.
struct ParallelDelegate {
    spec: ToolSpec,
    children: Vec<Arc<ScriptedModel>>,
    outcomes: Mutex<Vec<(u32, StopReason)>>,
}

impl Tool for ParallelDelegate {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, _args: &str, ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let outcomes: Vec<(u32, StopReason)> = std::thread::scope(|s| {
            let runs: Vec<_> = self
                .children
                .iter()
                .map(|model| {
                    s.spawn(move || {
                        let mut t = fixed("t");
                        t.varying = true;
                        let child = Agent::new(
                            model.clone(),
                            Arc::new(ToolRegistry::new().with(t)),
                            "child",
                        );
                        let out = child.run("sub task", vec![], ctx.budget, &mut NoObserver);
                        (out.iterations, out.stop)
                    })
                })
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        let report = format!("children: {outcomes:?}");
        *self.outcomes.lock().unwrap() = outcomes;
        Ok(report)
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// `--max-iterations N` bounds the parent and all its children together,
    /// the parent's answer after its children included: three children
    /// racing for the wallet spend it exactly, each that started answers
    /// without tools, and the parent answers from the unit it reserved.
    #[test]
    fn three_children_in_parallel_spend_the_parents_wallet_exactly(total in 2u32..40) {
        let children: Vec<_> = (0..3)
            .map(|_| looping(|n| vec![call(&format!("k{n}"), "t", &format!(r#"{{"n":{n}}}"#))]))
            .collect();
        let parent_model = looping(|n| vec![call(&format!("d{n}"), "delegate", "{}")]);
        let tool = Arc::new(ParallelDelegate {
            spec: ToolSpec::new("delegate", "runs three children", json!({})),
            children: children.clone(),
            outcomes: Mutex::default(),
        });
        let tools = ToolRegistry::new().with(SharedTool(tool.clone()));
        let parent = Agent::new(parent_model.clone(), Arc::new(tools), "parent");
        let budget = IterationBudget::new(total);
        let out = parent.run("research", vec![], &budget, &mut NoObserver);

        let child_calls: usize = children.iter().map(|c| c.seen().len()).sum();
        let parent_seen = parent_model.seen();
        proptest::prop_assert_eq!(parent_seen.len(), 2);
        proptest::prop_assert_eq!(parent_seen[1].tool_choice, ToolChoice::None);
        proptest::prop_assert_eq!(out.final_text.as_str(), "here is what I have");
        // Exact: every unit of the wallet went to one call, no call past it.
        proptest::prop_assert_eq!(child_calls + 2, total as usize);
        proptest::prop_assert_eq!(budget.remaining(), 0);
        for (child, (iterations, stop)) in children.iter().zip(tool.outcomes.lock().unwrap().iter()) {
            let seen = child.seen();
            proptest::prop_assert_eq!(seen.len(), *iterations as usize);
            if let Some(last) = seen.last() {
                // A child that started ends with an answer made without tools.
                proptest::prop_assert_eq!(last.tool_choice, ToolChoice::None);
            } else {
                proptest::prop_assert_eq!(stop, &StopReason::BudgetExhausted);
            }
        }
        assert_valid_for_api(&out.messages);
    }
}

/// Lets a test keep a handle on a tool it registers.
struct SharedTool<T>(Arc<T>);

impl<T: Tool> Tool for SharedTool<T> {
    fn spec(&self) -> &ToolSpec {
        self.0.spec()
    }
    fn call(&self, arguments: &str, ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        self.0.call(arguments, ctx)
    }
}
