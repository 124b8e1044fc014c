//! `delegate_task`: runs sub-agents on focused goals (SPEC L3).
//!
//! Each child is a fresh conversation with its own system prompt and a fresh
//! set of tools (a new `todo` list, the same confinement), built from the
//! parent's toolsets **minus `delegate`** (or the subset a task names), so
//! delegation cannot recurse. One call takes one `goal` or a list of
//! `tasks` (at most [`MAX_TASKS`]); a list runs up to
//! [`DEFAULT_PARALLEL_CHILDREN`] children at once, each on its own thread,
//! and the parent gets every report in task order, each marked DONE,
//! STOPPED EARLY or FAILED. Every child draws from the parent's wallet
//! (`ctx.budget`), exactly, whatever the interleaving (see
//! [`hermes_core::budget`]): a parent with 80 model calls left whose
//! children spend 15 continues with 65, and the parent's own answer comes
//! from the unit its run reserved, so parent and children together stay
//! within `--max-iterations`. Each child's conversation is kept within the
//! model's window like the parent's ([`ToolEnv::context`]: compaction,
//! overflow recovery, capped tool results; SPEC X1).
//!
//! **Interrupts (SPEC L11).** Each child has its own interrupt flag, because
//! `Agent::run` clears its flag when it starts: sharing the parent's flag
//! would wipe out an interrupt that lands just before the child starts,
//! for the child *and* for the parent. Instead the parent's flag is copied
//! into the child's at every event of the child's run (the first one, the
//! user message being appended, comes before the child's first check), and
//! the child's tools are handed the parent's flag directly, so a long
//! command in the child stops as soon as the parent is interrupted. So an
//! interrupt stops every running child, and a task that starts after it
//! stops before its first call. The parent's flag is never cleared here:
//! the parent's loop sees it after this tool returns. The one lag left: a
//! model call that streams nothing sees a parent interrupt only when it
//! returns.

use std::sync::Arc;

use hermes_core::{
    Agent, AgentEvent, AgentObserver, InterruptFlag, Model, StopReason, Tool, ToolContext,
    ToolError, ToolSpec, schema_text,
};
use serde::Deserialize;

use super::{ToolEnv, bounded_spec, build_wrapped, failed, parse_args};
use crate::spill::cap_result;

/// The child's system prompt (before its tool list).
const CHILD_PROMPT: &str = "You are a Hermes sub-agent. Another agent delegated one focused task \
to you. Work on it with your tools, then answer with a concise, self-contained report of what \
you found or did (files changed, commands run, results, open problems). The other agent sees \
only your final answer, not your intermediate steps.";

/// Starts sub-agents.
pub struct DelegateTool {
    spec: ToolSpec,
    model: Arc<dyn Model>,
    env: ToolEnv,
    child_toolsets: Vec<String>,
    /// How many children run at once.
    parallel: usize,
}

impl std::fmt::Debug for DelegateTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelegateTool")
            .field("child_toolsets", &self.child_toolsets)
            .finish_non_exhaustive()
    }
}

/// At most this many children run at once.
pub const DEFAULT_PARALLEL_CHILDREN: usize = 3;

/// At most this many tasks in one call: more is refused, not cut, so the
/// model learns it and nothing is dropped silently.
pub const MAX_TASKS: usize = 6;

#[derive(Deserialize)]
pub(super) struct DelegateArgs {
    #[serde(default)]
    goal: Option<String>,
    #[serde(default)]
    context: Option<String>,
    #[serde(default)]
    toolsets: Option<Vec<String>>,
    #[serde(default)]
    tasks: Option<Vec<TaskArgs>>,
}

/// One task of a batch.
#[derive(Deserialize)]
pub(super) struct TaskArgs {
    goal: String,
    #[serde(default)]
    context: Option<String>,
    #[serde(default)]
    toolsets: Option<Vec<String>>,
}

impl DelegateTool {
    pub(crate) fn new(model: Arc<dyn Model>, env: ToolEnv, child_toolsets: Vec<String>) -> Self {
        DelegateTool {
            spec: bounded_spec(
                "delegate_task",
                "Hand focused tasks to sub-agents with fresh contexts (3 run at once); each \
                 returns only its final report. They spend your iteration budget and cannot see \
                 this conversation.",
                schema_text!(
                    r#"{
                    "type": "object",
                    "properties": {
                        "goal": {"type": "string", "description": "One task and what to report."},
                        "context": {"type": "string", "description": "Facts and paths it needs."},
                        "tasks": {
                            "type": "array",
                            "maxItems": 6,
                            "description": "Independent tasks run in parallel, instead of goal.",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "goal": {"type": "string"},
                                    "context": {"type": "string"},
                                    "toolsets": {"type": "array", "items": {"type": "string"}}
                                },
                                "required": ["goal"]
                            }
                        }
                    }
                }"#,
                ),
                &[("tasks", "maxItems", MAX_TASKS as u64)],
            ),
            model,
            env,
            child_toolsets,
            parallel: DEFAULT_PARALLEL_CHILDREN,
        }
    }
}

/// Forwards the parent's interrupt to the child at every event of the
/// child's run.
struct ForwardInterrupt<'a> {
    parent: &'a InterruptFlag,
    child: &'a InterruptFlag,
}

impl AgentObserver for ForwardInterrupt<'_> {
    fn on_event(&mut self, _event: &AgentEvent<'_>) {
        if self.parent.is_set() {
            self.child.interrupt();
        }
    }
}

/// A child's tool, run with the parent's interrupt flag in its context so
/// it can stop mid-call when the parent is interrupted. (The child's own
/// flag is only ever set from the parent's, so nothing is lost.)
struct WithParentInterrupt {
    inner: Box<dyn Tool>,
    parent: InterruptFlag,
}

impl Tool for WithParentInterrupt {
    fn spec(&self) -> &ToolSpec {
        self.inner.spec()
    }

    fn read_only(&self) -> bool {
        self.inner.read_only()
    }

    fn call(&self, arguments: &str, ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let ctx = ToolContext {
            budget: ctx.budget,
            interrupt: &self.parent,
            tool_call_id: ctx.tool_call_id,
        };
        self.inner.call(arguments, &ctx)
    }
}

/// One task, checked: what the child is told and which toolsets it gets.
struct Task {
    goal: String,
    context: Option<String>,
    toolsets: Vec<String>,
}

/// How one child's run ended.
enum ChildOutcome {
    /// It ran; its report, the calls it made, and why it stopped if early.
    Ran {
        report: String,
        iterations: u32,
        early: Option<String>,
        /// Whether it stopped on an error (not the budget or an interrupt).
        failed: bool,
    },
    /// It never made a model call.
    Failed(String),
}

impl Tool for DelegateTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: &str, ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let args: DelegateArgs = parse_args("delegate_task", arguments)?;
        let single = args.tasks.is_none();
        let tasks = self.tasks_of(args)?;
        // No early look at the interrupt flag: the child run itself honours
        // one that is already set (see the module docs), which leaves no gap
        // between a check here and the child's start.
        if ctx.budget.is_exhausted() {
            return Err(failed(
                "Error: the iteration budget is used up; no model calls are left for a sub-agent.",
            ));
        }
        let outcomes = self.run_all(&tasks, ctx);
        let cap = self.env.result_cap_bytes.max(super::MIN_RESULT_CAP);
        if single {
            let outcome = outcomes.into_iter().next();
            let out = match outcome {
                Some(ChildOutcome::Ran {
                    report,
                    iterations,
                    early,
                    ..
                }) => with_footer(report, iterations, early.as_deref()),
                Some(ChildOutcome::Failed(why)) => return Err(failed(format!("Error: {why}"))),
                None => return Err(failed("Error: no task was given.")),
            };
            return Ok(cap_result(
                out,
                cap,
                "ask the sub-agent for a shorter report",
            ));
        }
        if outcomes
            .iter()
            .all(|o| matches!(o, ChildOutcome::Failed(why) if why.starts_with("interrupted")))
        {
            return Err(failed("Error: interrupted before the sub-agents started."));
        }
        let n = tasks.len();
        let mut out = String::new();
        for (i, (task, outcome)) in tasks.iter().zip(outcomes).enumerate() {
            if i > 0 {
                out.push_str("\n\n");
            }
            let goal = crate::text::floor_char_boundary(&task.goal, 80);
            let goal = &task.goal[..goal];
            match outcome {
                ChildOutcome::Ran {
                    report,
                    iterations,
                    early,
                    failed,
                } => {
                    let status = match (&early, failed) {
                        (None, _) => "DONE",
                        (Some(_), true) => "FAILED",
                        (Some(_), false) => "STOPPED EARLY",
                    };
                    out.push_str(&format!("## Task {}/{n} ({status}): {goal}\n", i + 1));
                    out.push_str(&with_footer(report, iterations, early.as_deref()));
                }
                ChildOutcome::Failed(why) => {
                    out.push_str(&format!(
                        "## Task {}/{n} (FAILED): {goal}\nError: {why}",
                        i + 1
                    ));
                }
            }
        }
        Ok(cap_result(
            out,
            cap,
            "ask the sub-agents for shorter reports",
        ))
    }
}

/// A child's report with how many calls it made and why it stopped early.
fn with_footer(report: String, iterations: u32, early: Option<&str>) -> String {
    let mut out = if report.is_empty() {
        "(the sub-agent gave no final text)".to_string()
    } else {
        report
    };
    out.push_str(&format!(
        "\n\n[sub-agent used {iterations} model call{}",
        if iterations == 1 { "" } else { "s" }
    ));
    if let Some(notice) = early {
        out.push_str(&format!("; it stopped early: {notice}"));
    }
    out.push(']');
    out
}

impl DelegateTool {
    /// The tasks of a call, checked before any child starts: a goal each,
    /// at most [`MAX_TASKS`], toolsets among the parent's (minus delegate).
    fn tasks_of(&self, args: DelegateArgs) -> Result<Vec<Task>, ToolError> {
        let raw: Vec<TaskArgs> = match (args.tasks, args.goal) {
            (Some(_), Some(_)) => {
                return Err(failed(
                    "Error: give either 'goal' (one task) or 'tasks' (several), not both.",
                ));
            }
            (Some(tasks), None) => tasks,
            (None, Some(goal)) => vec![TaskArgs {
                goal,
                context: args.context,
                toolsets: args.toolsets,
            }],
            (None, None) => return Err(failed("Error: 'goal' is empty.")),
        };
        if raw.is_empty() {
            return Err(failed("Error: 'tasks' is empty."));
        }
        if raw.len() > MAX_TASKS {
            return Err(failed(format!(
                "Error: {} tasks given; at most {MAX_TASKS} per call ({} run at once). Merge \
                 related tasks, or delegate the rest in another call.",
                raw.len(),
                self.parallel
            )));
        }
        let mut tasks = Vec::with_capacity(raw.len());
        for (i, t) in raw.into_iter().enumerate() {
            let goal = t.goal.trim();
            if goal.is_empty() {
                return Err(failed(format!(
                    "Error: the goal of task {} is empty.",
                    i + 1
                )));
            }
            let toolsets = match t.toolsets {
                None => self.child_toolsets.clone(),
                Some(asked) => {
                    if let Some(bad) = asked.iter().find(|n| !self.child_toolsets.contains(n)) {
                        return Err(failed(format!(
                            "Error: toolset '{bad}' is not available to sub-agents; choose from: {}.",
                            self.child_toolsets.join(", ")
                        )));
                    }
                    asked
                }
            };
            tasks.push(Task {
                goal: goal.to_string(),
                context: t
                    .context
                    .map(|c| c.trim().to_string())
                    .filter(|c| !c.is_empty()),
                toolsets,
            });
        }
        Ok(tasks)
    }

    /// Runs every task, up to `parallel` at once, each child on its own
    /// thread drawing from the parent's wallet; outcomes in task order.
    fn run_all(&self, tasks: &[Task], ctx: &ToolContext<'_>) -> Vec<ChildOutcome> {
        if let [task] = tasks {
            return vec![self.run_child(task, ctx)];
        }
        let next = std::sync::atomic::AtomicUsize::new(0);
        let mut slots: Vec<Option<ChildOutcome>> = tasks.iter().map(|_| None).collect();
        let workers = self.parallel.clamp(1, tasks.len());
        let finished: Vec<(usize, ChildOutcome)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    s.spawn(|| {
                        let mut done = Vec::new();
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(task) = tasks.get(i) else { break };
                            done.push((i, self.run_child(task, ctx)));
                        }
                        done
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| {
                    h.join().unwrap_or_else(|_| {
                        vec![(
                            usize::MAX,
                            ChildOutcome::Failed("the sub-agent panicked".into()),
                        )]
                    })
                })
                .collect()
        });
        for (i, outcome) in finished {
            if let Some(slot) = slots.get_mut(i) {
                *slot = Some(outcome);
            }
        }
        slots
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| ChildOutcome::Failed("the sub-agent's thread panicked".into()))
            })
            .collect()
    }

    /// Runs one child to its end.
    fn run_child(&self, task: &Task, ctx: &ToolContext<'_>) -> ChildOutcome {
        let workdir = match super::Workdir::new(&self.env) {
            Ok(w) => w,
            Err(e) => {
                return ChildOutcome::Failed(format!("cannot set up the sub-agent's tools: {e}"));
            }
        };
        let names: Vec<&str> = task.toolsets.iter().map(String::as_str).collect();
        // The child plans with a todo list of its own, not the session's.
        // ... and no background processes: their notices go to the
        // session's chat, which the child does not speak in.
        let child_env = ToolEnv {
            todo_state: None,
            background: None,
            ..self.env.clone()
        };
        let parent_flag = ctx.interrupt.clone();
        let wrap = move |inner: Box<dyn Tool>| -> Box<dyn Tool> {
            Box::new(WithParentInterrupt {
                inner,
                parent: parent_flag.clone(),
            })
        };
        let tools = match build_wrapped(&child_env, &workdir, &names, false, &wrap) {
            Ok(t) => t,
            Err(e) => {
                return ChildOutcome::Failed(format!("cannot set up the sub-agent's tools: {e}"));
            }
        };

        let mut prompt = String::from(CHILD_PROMPT);
        if !tools.is_empty() {
            prompt.push_str("\n\nYour tools: ");
            prompt.push_str(&tools.names().collect::<Vec<_>>().join(", "));
            prompt.push('.');
        }
        prompt.push_str(&format!(
            "\n\nWorking directory: {}",
            workdir.root().display()
        ));
        let mut message = format!("Goal:\n{}", task.goal);
        if let Some(c) = &task.context {
            message.push_str(&format!("\n\nContext:\n{c}"));
        }

        let child_flag = InterruptFlag::new();
        // The child stops its own repeats and runs its read-only batches
        // like its parent (SPEC Y6); its last call, paid from the unit it
        // reserves in the shared wallet, is made without tools, so it
        // reports back what it has.
        let mut agent = Agent::new(self.model.clone(), Arc::new(tools), prompt)
            .with_interrupt(child_flag.clone())
            .with_repeat_guard(self.env.repeat_guard)
            .with_text_tool_calls(self.env.text_tool_calls)
            .with_batch_runner(Arc::new(crate::parallel::ParallelBatch::default()));
        // The child keeps its own conversation within the window under the
        // same rules as its parent (SPEC X1).
        if let Some(context) = &self.env.context {
            agent = agent.with_context(context.clone());
        }
        let mut forward = ForwardInterrupt {
            parent: ctx.interrupt,
            child: &child_flag,
        };
        // The child's calls are the parent's spending: recorded on the
        // parent's handle, they ride on this tool's result in the parent's
        // ledger (and are charged to the parent's account with it).
        let outcome = agent.run(&message, Vec::new(), &ctx.budget.for_child(), &mut forward);
        ctx.budget.add_child_usage(&outcome.usage);
        match (outcome.iterations, &outcome.stop) {
            (0, StopReason::Interrupted) => {
                ChildOutcome::Failed("interrupted before the sub-agent started.".into())
            }
            (0, StopReason::BudgetExhausted) => ChildOutcome::Failed(
                "the iteration budget is used up; no model calls were left for this sub-agent."
                    .into(),
            ),
            (iterations, stop) => ChildOutcome::Ran {
                report: outcome.final_text.clone(),
                iterations,
                early: (*stop != StopReason::Completed)
                    .then(|| stop.notice(ctx.budget.total()).unwrap_or_default()),
                failed: matches!(
                    stop,
                    StopReason::ModelError(_)
                        | StopReason::ContextOverflow(_)
                        | StopReason::ToolAborted { .. }
                ),
            },
        }
    }
}
