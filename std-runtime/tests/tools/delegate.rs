//! `delegate_task`: a child agent that draws from the parent's iteration
//! wallet, sees the parent's interrupts (before it starts and mid-call), and
//! keeps its own todo list.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hermes_core::{
    ChatRequest, Completion, FinishReason, InterruptFlag, IterationBudget, Model, ModelError,
    StreamSink, ToolCall, ToolContext,
};
use hermes_runtime::tools::{ToolEnv, build_registry};
use serde_json::json;
use tempfile::TempDir;

use super::support::Fx;

/// A model that calls `todo list` until it has made `steps - 1` calls, then
/// answers. It records what every call offered, and may interrupt at a call.
struct Scripted {
    steps: u32,
    calls: AtomicU32,
    seen: Mutex<Vec<(String, Vec<String>)>>,
    interrupt_at: Option<(u32, InterruptFlag)>,
}

impl Scripted {
    fn new(steps: u32) -> Scripted {
        Scripted {
            steps,
            calls: AtomicU32::new(0),
            seen: Mutex::new(Vec::new()),
            interrupt_at: None,
        }
    }
}

impl Model for Scripted {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        _sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        self.seen.lock().unwrap().push((
            request.system_prompt.to_string(),
            request.tools.iter().map(|t| t.name.clone()).collect(),
        ));
        if let Some((at, flag)) = &self.interrupt_at
            && n == *at
        {
            flag.interrupt();
        }
        if n < self.steps {
            Ok(Completion {
                tool_calls: vec![ToolCall::new(
                    format!("c{n}"),
                    "todo",
                    r#"{"action":"list"}"#,
                )],
                finish_reason: Some(FinishReason::ToolCalls),
                ..Completion::default()
            })
        } else {
            Ok(Completion {
                content: Some("child report: all done".into()),
                finish_reason: Some(FinishReason::Stop),
                ..Completion::default()
            })
        }
    }
}

fn delegate_fx(model: Arc<Scripted>) -> Fx {
    Fx::with(
        move |e| e.delegate_model = Some(model),
        Some(&["todo", "delegate"]),
    )
}

#[test]
fn delegate_draws_from_the_parent_wallet() {
    let model = Arc::new(Scripted::new(15));
    let mut fx = delegate_fx(model.clone());
    fx.budget = IterationBudget::new(100);
    for _ in 0..20 {
        assert!(fx.budget.try_consume());
    }
    assert_eq!(fx.budget.remaining(), 80);

    let out = fx.ok(
        "delegate_task",
        json!({"goal": "Tidy the task list", "context": "Only the todo tool matters."}),
    );
    assert_eq!(
        fx.budget.remaining(),
        65,
        "parent with 80 left, child spent 15"
    );
    assert!(out.starts_with("child report: all done"), "{out}");
    assert!(out.ends_with("[sub-agent used 15 model calls]"), "{out}");

    let seen = model.seen.lock().unwrap();
    assert_eq!(seen.len(), 15);
    for (prompt, tools) in seen.iter() {
        // No recursion: the child cannot delegate.
        assert_eq!(tools, &["todo"]);
        assert!(prompt.contains("sub-agent"), "{prompt}");
    }
}

#[test]
fn delegate_reports_an_exhausted_wallet() {
    let model = Arc::new(Scripted::new(50));
    let mut fx = delegate_fx(model);
    fx.budget = IterationBudget::new(10);
    let out = fx.ok("delegate_task", json!({"goal": "loop forever"}));
    assert_eq!(fx.budget.remaining(), 0);
    // Ten from the wallet, and one more without the tools list: this
    // scripted model calls tools despite `tool_choice: "none"` (issue 38).
    assert!(
        out.contains(
            "[sub-agent used 11 model calls; it stopped early: Reached the maximum iteration count (10"
        ),
        "{out}"
    );
    let m = fx.err("delegate_task", json!({"goal": "again"}));
    assert!(m.contains("budget is used up"), "{m}");
}

#[test]
fn delegate_honours_interrupts() {
    // Already interrupted: the child never starts.
    let model = Arc::new(Scripted::new(3));
    let fx = delegate_fx(model.clone());
    fx.interrupt.interrupt();
    let m = fx.err("delegate_task", json!({"goal": "x"}));
    assert!(
        m.contains("interrupted before the sub-agent started"),
        "{m}"
    );
    assert_eq!(model.calls.load(Ordering::SeqCst), 0);
    assert_eq!(fx.budget.remaining(), 90);

    // Interrupted while the child runs: the child stops and the flag stays
    // set for the parent's own check after the tool call.
    let work = TempDir::new().unwrap();
    let parent_flag = InterruptFlag::new();
    let model = Arc::new(Scripted {
        interrupt_at: Some((2, parent_flag.clone())),
        ..Scripted::new(10)
    });
    let mut env = ToolEnv::new(work.path(), work.path());
    env.delegate_model = Some(model.clone());
    let reg = build_registry(&env, Some(&["todo".into(), "delegate".into()])).unwrap();
    let budget = IterationBudget::new(90);
    let ctx = ToolContext {
        budget: &budget,
        interrupt: &parent_flag,
        tool_call_id: "p1",
    };
    let out = reg
        .dispatch("delegate_task", r#"{"goal":"long job"}"#, &ctx)
        .unwrap();
    assert!(
        out.contains("used 2 model calls; it stopped early: Interrupted."),
        "{out}"
    );
    assert!(parent_flag.is_set());
    assert_eq!(model.calls.load(Ordering::SeqCst), 2);
}

/// Parent and child on one model, told apart by their system prompts.
struct ParentChild {
    parent_calls: AtomicU32,
    child_calls: AtomicU32,
}

impl Model for ParentChild {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        _sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let is_child = request.system_prompt.contains("Hermes sub-agent");
        let (counter, tool_call) = if is_child {
            (
                &self.child_calls,
                ToolCall::new("", "todo", r#"{"action":"list"}"#),
            )
        } else {
            (
                &self.parent_calls,
                ToolCall::new("d1", "delegate_task", r#"{"goal":"count to 15"}"#),
            )
        };
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        let last = if is_child { 15 } else { 2 };
        if n < last {
            Ok(Completion {
                tool_calls: vec![tool_call],
                finish_reason: Some(FinishReason::ToolCalls),
                ..Completion::default()
            })
        } else {
            Ok(Completion {
                content: Some(if is_child { "counted" } else { "parent done" }.into()),
                finish_reason: Some(FinishReason::Stop),
                ..Completion::default()
            })
        }
    }
}

#[test]
fn delegate_inside_a_real_agent_run_shares_the_wallet() {
    let work = TempDir::new().unwrap();
    let model = Arc::new(ParentChild {
        parent_calls: AtomicU32::new(0),
        child_calls: AtomicU32::new(0),
    });
    let mut env = ToolEnv::new(work.path(), work.path());
    env.delegate_model = Some(model.clone());
    let reg = build_registry(&env, Some(&["todo".into(), "delegate".into()])).unwrap();
    let agent = hermes_core::Agent::new(model.clone(), Arc::new(reg), "You are the parent.");
    let budget = IterationBudget::new(80);
    let outcome = agent.run(
        "please delegate",
        Vec::new(),
        &budget,
        &mut hermes_core::NoObserver,
    );
    assert_eq!(outcome.stop, hermes_core::StopReason::Completed);
    assert_eq!(outcome.final_text, "parent done");
    assert_eq!(outcome.iterations, 2);
    assert_eq!(model.child_calls.load(Ordering::SeqCst), 15);
    // 80 - 1 (parent) - 15 (child) - 1 (parent) = 63.
    assert_eq!(budget.remaining(), 63);
    let tool_result = outcome
        .messages
        .iter()
        .find_map(|e| match &e.message {
            hermes_core::Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(tool_result, "counted\n\n[sub-agent used 15 model calls]");
}

/// Records the parent's tool starts and interrupts the parent as the
/// delegate call starts: the interrupt lands after the loop's own check and
/// before the child's run.
struct InterruptOnDelegateStart(InterruptFlag);

impl hermes_core::AgentObserver for InterruptOnDelegateStart {
    fn on_event(&mut self, event: &hermes_core::AgentEvent<'_>) {
        if let hermes_core::AgentEvent::ToolStarted { call } = event
            && call.function.name == "delegate_task"
        {
            self.0.interrupt();
        }
    }
}

#[test]
fn delegate_interrupt_landing_just_before_the_child_starts_is_not_lost() {
    let work = TempDir::new().unwrap();
    let home = TempDir::new().unwrap();
    let model = Arc::new(ParentChild {
        parent_calls: AtomicU32::new(0),
        child_calls: AtomicU32::new(0),
    });
    let mut env = ToolEnv::new(work.path(), home.path());
    env.delegate_model = Some(model.clone());
    let reg = build_registry(&env, Some(&["todo".into(), "delegate".into()])).unwrap();
    let flag = InterruptFlag::new();
    let agent = hermes_core::Agent::new(model.clone(), Arc::new(reg), "You are the parent.")
        .with_interrupt(flag.clone());
    let budget = IterationBudget::new(80);
    let outcome = agent.run(
        "please delegate",
        Vec::new(),
        &budget,
        &mut InterruptOnDelegateStart(flag.clone()),
    );
    // The child made no model call, and the interrupt survived the child's
    // start: the parent stopped instead of going on.
    assert_eq!(model.child_calls.load(Ordering::SeqCst), 0);
    assert_eq!(model.parent_calls.load(Ordering::SeqCst), 1);
    assert_eq!(outcome.stop, hermes_core::StopReason::Interrupted);
    assert!(flag.is_set());
    assert_eq!(budget.remaining(), 79);
    let tool_result = outcome
        .messages
        .iter()
        .find_map(|e| match &e.message {
            hermes_core::Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap();
    // Since the loop checks the flag between a call's start event and the
    // call itself (SPEC Y6's batch runner), an interrupt set by the start
    // event skips the call with the placeholder (L7); the delegate's own
    // check stays for an interrupt that lands after that.
    assert!(
        tool_result.contains("interrupted before the sub-agent started")
            || tool_result.contains("Tool execution skipped"),
        "{tool_result}"
    );
}

/// A child that runs one long terminal command, then reports.
struct LongChildCommand {
    calls: AtomicU32,
}

impl Model for LongChildCommand {
    fn complete(
        &self,
        _request: &ChatRequest<'_>,
        _sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            Ok(Completion {
                tool_calls: vec![ToolCall::new(
                    "t1",
                    "terminal",
                    r#"{"command":"sleep 300","timeout":600}"#,
                )],
                finish_reason: Some(FinishReason::ToolCalls),
                ..Completion::default()
            })
        } else {
            Ok(Completion {
                content: Some("should not get here".into()),
                finish_reason: Some(FinishReason::Stop),
                ..Completion::default()
            })
        }
    }
}

#[test]
fn delegate_child_tools_see_a_parent_interrupt_mid_call() {
    let model = Arc::new(LongChildCommand {
        calls: AtomicU32::new(0),
    });
    let fx = Fx::with(
        |e| e.delegate_model = Some(model.clone()),
        Some(&["terminal", "delegate"]),
    );
    let flag = fx.interrupt.clone();
    let setter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        flag.interrupt();
    });
    let out = fx.ok("delegate_task", json!({"goal": "run the long job"}));
    setter.join().unwrap();
    assert!(out.contains("it stopped early: Interrupted"), "{out}");
    assert_eq!(model.calls.load(Ordering::SeqCst), 1);
    assert!(fx.interrupt.is_set());
}

#[test]
fn delegate_child_does_not_share_the_session_todo_list() {
    let state = Arc::new(hermes_runtime::tools::TodoState::new());
    let model = Arc::new(Scripted::new(2));
    let shared = state.clone();
    let fx = Fx::with(
        move |e| {
            e.todo_state = Some(shared);
            e.delegate_model = Some(model);
        },
        Some(&["todo", "delegate"]),
    );
    fx.ok("todo", json!({"action": "add", "items": ["parent task"]}));
    // The child's only tool call is `todo list`; its own list is empty, so
    // the session's list is untouched and not shown to it.
    fx.ok("delegate_task", json!({"goal": "look at your list"}));
    assert_eq!(
        fx.ok("todo", json!({"action": "list"})),
        "Todo (0/1 done):\n[ ] 1. parent task"
    );
}

/// Children told apart by their goal (`task N`): each waits at its first
/// call until three children are in a call at once (or 10 s pass), makes
/// `steps` calls in all, and answers `report N`; a goal containing `fail`
/// gets a provider error. `flag` is interrupted when the third arrives.
struct ParallelChildren {
    steps: u32,
    in_flight: AtomicU32,
    max_in_flight: AtomicU32,
    arrived: AtomicU32,
    calls: AtomicU32,
    tools_seen: Mutex<Vec<(String, Vec<String>)>>,
    flag: Option<InterruptFlag>,
}

impl ParallelChildren {
    fn new(steps: u32) -> ParallelChildren {
        ParallelChildren {
            steps,
            in_flight: AtomicU32::new(0),
            max_in_flight: AtomicU32::new(0),
            arrived: AtomicU32::new(0),
            calls: AtomicU32::new(0),
            tools_seen: Mutex::new(Vec::new()),
            flag: None,
        }
    }
}

impl Model for ParallelChildren {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        _sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let goal = request.messages[0].message.content().unwrap().to_string();
        let name = goal.trim_start_matches("Goal:\n").to_string();
        let own_calls = request
            .messages
            .iter()
            .filter(|e| matches!(e.message, hermes_core::Message::Assistant { .. }))
            .count() as u32;
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        if own_calls == 0 {
            self.tools_seen.lock().unwrap().push((
                name.clone(),
                request.tools.iter().map(|t| t.name.clone()).collect(),
            ));
            if self.arrived.fetch_add(1, Ordering::SeqCst) + 1 == 3
                && let Some(flag) = &self.flag
            {
                // The user interrupts while three children are mid-call.
                flag.interrupt();
            }
            let start = std::time::Instant::now();
            while self.arrived.load(Ordering::SeqCst) < 3
                && start.elapsed() < Duration::from_secs(10)
            {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        if name.contains("fail") {
            return Err(ModelError::new(
                hermes_core::ModelErrorKind::Status(500),
                "upstream broke",
            ));
        }
        if own_calls + 1 < self.steps && request.tool_choice == hermes_core::ToolChoice::Auto {
            Ok(Completion {
                tool_calls: vec![ToolCall::new("", "todo", r#"{"action":"list"}"#)],
                finish_reason: Some(FinishReason::ToolCalls),
                ..Completion::default()
            })
        } else {
            Ok(Completion {
                content: Some(format!("report of {name}")),
                finish_reason: Some(FinishReason::Stop),
                ..Completion::default()
            })
        }
    }
}

#[test]
fn delegate_runs_a_list_of_tasks_three_at_once_in_task_order_with_the_wallet_exact() {
    let model = Arc::new(ParallelChildren::new(3));
    let mut fx = delegate_fx_any(model.clone(), &["todo", "file", "delegate"]);
    fx.budget = IterationBudget::new(100);
    let out = fx.ok(
        "delegate_task",
        json!({"tasks": [
            {"goal": "task 1"},
            {"goal": "task 2", "context": "only files", "toolsets": ["file"]},
            {"goal": "task 3 fail"},
            {"goal": "task 4", "toolsets": []},
        ]}),
    );
    // Three children were in a model call at the same moment, never four.
    assert_eq!(model.max_in_flight.load(Ordering::SeqCst), 3);
    // Exact: 3 calls for each of tasks 1, 2 and 4, one failed call for 3.
    assert_eq!(model.calls.load(Ordering::SeqCst), 10);
    assert_eq!(fx.budget.remaining(), 90);
    let positions: Vec<usize> = [
        "## Task 1/4 (DONE): task 1\nreport of task 1\n\n[sub-agent used 3 model calls]",
        "## Task 2/4 (DONE): task 2\nreport of task 2",
        "## Task 3/4 (FAILED): task 3 fail\n",
        "## Task 4/4 (DONE): task 4\nreport of task 4",
    ]
    .iter()
    .map(|part| {
        out.find(part)
            .unwrap_or_else(|| panic!("{part:?} not in {out}"))
    })
    .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{out}");
    assert!(
        out.contains("Model error") && out.contains("upstream broke"),
        "{out}"
    );
    // Each child got the toolsets its task named.
    let seen = model.tools_seen.lock().unwrap();
    let tools_of = |goal: &str| {
        seen.iter()
            .find(|(g, _)| g.starts_with(goal))
            .unwrap()
            .1
            .clone()
    };
    assert_eq!(
        tools_of("task 1"),
        ["todo", "read_file", "write_file", "patch", "search_files"]
    );
    assert_eq!(
        tools_of("task 2"),
        ["read_file", "write_file", "patch", "search_files"]
    );
    assert!(tools_of("task 4").is_empty());
}

#[test]
fn delegate_refuses_ten_tasks_and_a_toolset_it_may_not_give_before_any_call() {
    let model = Arc::new(ParallelChildren::new(2));
    let fx = delegate_fx_any(model.clone(), &["todo", "delegate"]);
    let ten: Vec<_> = (1..=10)
        .map(|i| json!({"goal": format!("task {i}")}))
        .collect();
    let m = fx.err("delegate_task", json!({ "tasks": ten }));
    assert!(m.contains("10 tasks given; at most 6 per call"), "{m}");
    let m = fx.err(
        "delegate_task",
        json!({"tasks": [{"goal": "a"}, {"goal": "b", "toolsets": ["terminal"]}]}),
    );
    assert!(
        m.contains("toolset 'terminal' is not available to sub-agents"),
        "{m}"
    );
    let m = fx.err(
        "delegate_task",
        json!({"goal": "a", "tasks": [{"goal": "b"}]}),
    );
    assert!(m.contains("not both"), "{m}");
    assert_eq!(model.calls.load(Ordering::SeqCst), 0);
    assert_eq!(fx.budget.remaining(), 90);
}

#[test]
fn delegate_interrupt_stops_every_child_and_the_tasks_not_started() {
    let work = TempDir::new().unwrap();
    let flag = InterruptFlag::new();
    let model = Arc::new(ParallelChildren {
        flag: Some(flag.clone()),
        ..ParallelChildren::new(50)
    });
    let mut env = ToolEnv::new(work.path(), work.path());
    env.delegate_model = Some(model.clone());
    let reg = build_registry(&env, Some(&["todo".into(), "delegate".into()])).unwrap();
    let budget = IterationBudget::new(90);
    let ctx = ToolContext {
        budget: &budget,
        interrupt: &flag,
        tool_call_id: "p1",
    };
    let out = reg
        .dispatch(
            "delegate_task",
            &json!({"tasks": [{"goal": "task 1"}, {"goal": "task 2"}, {"goal": "task 3"}, {"goal": "task 4"}]})
                .to_string(),
            &ctx,
        )
        .unwrap();
    // The three running children stop within a call or two of the
    // interrupt; the fourth task never starts.
    assert!(model.calls.load(Ordering::SeqCst) <= 6, "{out}");
    assert_eq!(
        out.matches("it stopped early: Interrupted.").count(),
        3,
        "{out}"
    );
    assert!(
        out.contains(
            "## Task 4/4 (FAILED): task 4\nError: interrupted before the sub-agent started."
        ),
        "{out}"
    );
    assert!(flag.is_set());
    assert_eq!(budget.used(), model.calls.load(Ordering::SeqCst));
}

fn delegate_fx_any(model: Arc<dyn Model>, toolsets: &[&str]) -> Fx {
    Fx::with(move |e| e.delegate_model = Some(model), Some(toolsets))
}

/// Parent calls cost 100 + 10 tokens, a child's 7 + 3; the parent
/// delegates once, the child makes three calls.
struct Metered {
    child_calls: AtomicU32,
    parent_calls: AtomicU32,
}

impl Model for Metered {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        _sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let is_child = request.system_prompt.contains("Hermes sub-agent");
        let (prompt, completion) = if is_child { (7, 3) } else { (100, 10) };
        let usage = Some(hermes_core::Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
            ..hermes_core::Usage::default()
        });
        let counter = if is_child {
            &self.child_calls
        } else {
            &self.parent_calls
        };
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        let call = match (is_child, n) {
            (true, 1 | 2) => Some(ToolCall::new("", "todo", r#"{"action":"list"}"#)),
            (false, 1) => Some(ToolCall::new("d1", "delegate_task", r#"{"goal":"look"}"#)),
            _ => None,
        };
        Ok(Completion {
            finish_reason: Some(if call.is_some() {
                FinishReason::ToolCalls
            } else {
                FinishReason::Stop
            }),
            content: call.is_none().then(|| "done".to_owned()),
            tool_calls: call.into_iter().collect(),
            model: Some("metered".into()),
            usage,
            ..Completion::default()
        })
    }
}

/// Issue 44: a sub-agent's model calls are the parent's spending — they
/// ride on the delegate call's result in the parent's ledger, so the
/// charge that stores the parent's turn counts them to the parent's user.
#[test]
fn a_sub_agents_calls_are_charged_to_the_parents_account() {
    let work = TempDir::new().unwrap();
    let model = Arc::new(Metered {
        child_calls: AtomicU32::new(0),
        parent_calls: AtomicU32::new(0),
    });
    let mut env = ToolEnv::new(work.path(), work.path());
    env.delegate_model = Some(model.clone());
    let reg = build_registry(&env, Some(&["todo".into(), "delegate".into()])).unwrap();
    let agent = hermes_core::Agent::new(model.clone(), Arc::new(reg), "You are the parent.");
    let outcome = agent.run(
        "please delegate",
        Vec::new(),
        &IterationBudget::new(80),
        &mut hermes_core::NoObserver,
    );
    assert_eq!(outcome.final_text, "done");
    assert_eq!(model.child_calls.load(Ordering::SeqCst), 3);
    let result = outcome
        .messages
        .iter()
        .find(|e| matches!(&e.message, hermes_core::Message::Tool { .. }))
        .unwrap();
    let usage = result.meta.usage.unwrap();
    assert_eq!((usage.prompt_tokens, usage.completion_tokens), (21, 9));
    assert_eq!(result.meta.model.as_deref(), Some("metered"));
    // The parent's account: 2 × 110 of its own + 30 of the child's.
    let limits = hermes_runtime::spending::SpendingLimits::default();
    let charge = hermes_runtime::spending::charger(
        limits.clone(),
        "telegram:7".into(),
        |_| None,
        Arc::new(hermes_core::NoClock),
    );
    let day =
        hermes_runtime::spending::account_key("tok", &limits.periods(0).day_key(), "telegram:7");
    let charged: i64 = charge(&outcome.messages)
        .iter()
        .filter(|c| c.key == day)
        .map(|c| c.amount)
        .sum();
    assert_eq!(charged, 250);
}
