//! `delegate_task`: runs a sub-agent on a focused goal (SPEC L3).
//!
//! The child is a fresh conversation with its own system prompt and a fresh
//! set of tools (a new `todo` list, the same confinement), built from the
//! parent's toolsets **minus `delegate`**, so delegation cannot recurse.
//! It draws from the parent's wallet (`ctx.budget`): a parent with 80 model
//! calls left whose child spends 15 continues with 65. Its conversation is
//! kept within the model's window like the parent's ([`ToolEnv::context`]:
//! compaction, overflow recovery, capped tool results; SPEC X1).
//!
//! **Interrupts (SPEC L11).** The child has its own interrupt flag, because
//! `Agent::run` clears its flag when it starts: sharing the parent's flag
//! would wipe out an interrupt that lands just before the child starts,
//! for the child *and* for the parent. Instead the parent's flag is copied
//! into the child's at every event of the child's run (the first one, the
//! user message being appended, comes before the child's first check), and
//! the child's tools are handed the parent's flag directly, so a long
//! command in the child stops as soon as the parent is interrupted. The
//! parent's flag is never cleared here: the parent's loop sees it after this
//! tool returns. The one lag left: a model call that streams nothing sees a
//! parent interrupt only when it returns.

use std::sync::Arc;

use hermes_core::{
    Agent, AgentEvent, AgentObserver, InterruptFlag, Model, StopReason, Tool, ToolContext,
    ToolError, ToolSpec,
};
use serde::Deserialize;
use serde_json::json;

use super::{ToolEnv, build_wrapped, failed, parse_args};
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
}

impl std::fmt::Debug for DelegateTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelegateTool")
            .field("child_toolsets", &self.child_toolsets)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
pub(super) struct DelegateArgs {
    goal: String,
    #[serde(default)]
    context: Option<String>,
}

impl DelegateTool {
    pub(crate) fn new(model: Arc<dyn Model>, env: ToolEnv, child_toolsets: Vec<String>) -> Self {
        DelegateTool {
            spec: ToolSpec::new(
                "delegate_task",
                "Hand a focused sub-task to a sub-agent with a fresh context and the same tools \
                 (except delegate_task). It returns only its final report, which keeps your own \
                 context small. It spends model calls from your iteration budget. Give a clear \
                 goal and all the context it needs: it cannot see this conversation.",
                json!({
                    "type": "object",
                    "properties": {
                        "goal": {"type": "string", "description": "What the sub-agent should achieve, and what to report back."},
                        "context": {"type": "string", "description": "Facts, file paths and constraints it needs to know."}
                    },
                    "required": ["goal"]
                }),
            ),
            model,
            env,
            child_toolsets,
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

impl Tool for DelegateTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: &str, ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let args: DelegateArgs = parse_args("delegate_task", arguments)?;
        let goal = args.goal.trim();
        if goal.is_empty() {
            return Err(failed("Error: 'goal' is empty."));
        }
        // No early look at the interrupt flag: the child run itself honours
        // one that is already set (see the module docs), which leaves no gap
        // between a check here and the child's start.
        if ctx.budget.is_exhausted() {
            return Err(failed(
                "Error: the iteration budget is used up; no model calls are left for a sub-agent.",
            ));
        }
        let workdir = super::Workdir::new(&self.env)
            .map_err(|e| failed(format!("Error: cannot set up the sub-agent's tools: {e}")))?;
        let names: Vec<&str> = self.child_toolsets.iter().map(String::as_str).collect();
        // The child plans with a todo list of its own, not the session's.
        let child_env = ToolEnv {
            todo_state: None,
            ..self.env.clone()
        };
        let parent_flag = ctx.interrupt.clone();
        let wrap = move |inner: Box<dyn Tool>| -> Box<dyn Tool> {
            Box::new(WithParentInterrupt {
                inner,
                parent: parent_flag.clone(),
            })
        };
        let tools = build_wrapped(&child_env, &workdir, &names, false, &wrap)
            .map_err(|e| failed(format!("Error: cannot set up the sub-agent's tools: {e}")))?;

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

        let mut task = format!("Goal:\n{goal}");
        if let Some(c) = args
            .context
            .as_deref()
            .map(str::trim)
            .filter(|c| !c.is_empty())
        {
            task.push_str(&format!("\n\nContext:\n{c}"));
        }

        let child_flag = InterruptFlag::new();
        // The child stops its own repeats and runs its read-only batches
        // like its parent (SPEC Y6); its last call within the shared wallet
        // is made without tools, so it reports back what it has.
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
        let outcome = agent.run(&task, Vec::new(), ctx.budget, &mut forward);
        if outcome.iterations == 0 && outcome.stop == StopReason::Interrupted {
            return Err(failed("Error: interrupted before the sub-agent started."));
        }

        let mut out = if outcome.final_text.is_empty() {
            "(the sub-agent gave no final text)".to_string()
        } else {
            outcome.final_text.clone()
        };
        out.push_str(&format!(
            "\n\n[sub-agent used {} model call{}",
            outcome.iterations,
            if outcome.iterations == 1 { "" } else { "s" }
        ));
        if outcome.stop != StopReason::Completed {
            let notice = outcome.stop.notice(ctx.budget.total()).unwrap_or_default();
            out.push_str(&format!("; it stopped early: {notice}"));
        }
        out.push(']');
        Ok(cap_result(
            out,
            self.env.result_cap_bytes.max(super::MIN_RESULT_CAP),
            "ask the sub-agent for a shorter report",
        ))
    }
}
