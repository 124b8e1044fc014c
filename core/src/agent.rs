//! The agent loop: `run_conversation` (SPEC L1, L3, L4, L7, L8, L11).
//!
//! One plain, synchronous function serves every front-end. It appends the
//! user message, then loops: take one unit of budget → call the model with a
//! borrowed view of the ledger → append the assistant message (always, with
//! its tool calls, SPEC L8) → answer every tool call in order (SPEC L7) → go
//! again, until the model stops calling tools, the wallet is empty, the run is
//! interrupted, the output is cut, or the model fails.
//!
//! **Invariant:** whatever the stop reason, the returned ledger is valid for
//! the API: every tool call of every assistant message is answered by exactly
//! one tool message, in order, directly after it.
//!
//! **`finish_reason = length` (SPEC L4):** the completion was cut by the
//! output-token limit. Tool calls in a cut completion may carry truncated
//! arguments, so they are never run and are not written to the ledger; the
//! partial text is kept, its entry is marked with `finish_reason = length`,
//! and the run stops with [`StopReason::Truncated`]. Front-ends say so to the
//! user (the CLI prints a warning; the gateway appends a notice). The choice
//! is to stop rather than to ask the model to continue: a continuation prompt
//! would be a message the user never wrote, and a model that keeps hitting the
//! limit would burn the budget silently.
//!
//! **The context window (SPEC X1):** an agent given a [`ContextConfig`]
//! checks, before every model call, whether the estimated request passes the
//! policy's threshold and compacts the ledger first ([`crate::context`]);
//! when the provider still answers with a context-length error it compacts
//! whatever it can and retries that call once, and if the request still does
//! not fit it stops with [`StopReason::ContextOverflow`]. Every tool result is
//! capped relative to the window. The system prompt is never touched.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::budget::{IterationBudget, Reserved};
use crate::clock::{Clock, NoClock};
use crate::context::estimate::fresh_from;
use crate::context::{Compaction, ContextConfig, Urgency};
use crate::interrupt::InterruptFlag;
use crate::message::{EntryMeta, FinishReason, LedgerEntry, Message, ToolCall, Usage};
use crate::model::{
    ChatRequest, Completion, Fallback, Flow, Model, ModelError, StreamSink, ToolChoice,
};
use crate::tool::ToolRegistry;
use crate::tool::batch::{SequentialBatch, ToolBatchRunner};

mod context;
mod outcome;
mod repeat;
mod steer;
mod text_calls;
mod tools;

pub use outcome::{OVERFLOW_FIXES, RunOutcome, StopReason};
pub use repeat::{RepeatGuard, RepeatGuardError};
pub use steer::{NoSteering, Steering};

/// The exact result given to every tool call skipped because of an interrupt.
pub const SKIPPED_TOOL_RESULT: &str = "[Tool execution skipped -- user sent a new message]";

/// What happens during a run, for display and incremental persistence.
#[derive(Debug)]
#[non_exhaustive]
pub enum AgentEvent<'a> {
    /// A model call is about to start.
    ModelCall {
        /// 1-based count of this run's model calls.
        iteration: u32,
        /// Calls this run may still make after this one was paid for: the
        /// wallet's, plus the run's reserved answer while it holds it.
        remaining: u32,
    },
    /// Streamed answer text.
    TextDelta(&'a str),
    /// Streamed reasoning text.
    ReasoningDelta(&'a str),
    /// The model failed and another model of the fallback chain answers the
    /// same call instead (SPEC X2).
    Fallback(Fallback<'a>),
    /// A tool is about to run.
    ToolStarted {
        /// The call being answered.
        call: &'a ToolCall,
    },
    /// A tool call was answered (by the tool, an error, or a placeholder).
    ToolFinished {
        /// The call answered.
        call: &'a ToolCall,
        /// The result text given to the model.
        result: &'a str,
        /// Whether the result reports an error.
        is_error: bool,
    },
    /// An entry was appended to the ledger.
    Appended(&'a LedgerEntry),
    /// The ledger was compacted (SPEC X1): `head` entries kept, `replaced`
    /// entries replaced by the summary, `tail` entries kept after it. A
    /// persisting observer records this beside the stored originals.
    Compacted(&'a Compaction),
    /// The repeat guard stopped a loop (SPEC Y6): `tool` was called `count`
    /// times with the same arguments and the same result, so the next model
    /// call is made without tools. Sent once per run; front-ends show the
    /// user one line.
    RepeatsStopped {
        /// The tool called over and over.
        tool: &'a str,
        /// How many identical calls were made.
        count: u32,
    },
}

/// Receives [`AgentEvent`]s.
pub trait AgentObserver {
    /// Called synchronously on the loop's thread; keep it short.
    fn on_event(&mut self, event: &AgentEvent<'_>);
}

/// An observer that ignores everything.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoObserver;

impl AgentObserver for NoObserver {
    fn on_event(&mut self, _event: &AgentEvent<'_>) {}
}

/// An agent: a model, tools, a system prompt and limits. It holds no
/// transcript, so it can be cached and dropped freely (SPEC G4).
pub struct Agent {
    model: Arc<dyn Model>,
    tools: Arc<ToolRegistry>,
    system_prompt: String,
    max_iterations: u32,
    interrupt: InterruptFlag,
    clock: Arc<dyn Clock>,
    context: Option<AgentContext>,
    repeat_guard: Option<RepeatGuard>,
    batch: Arc<dyn ToolBatchRunner>,
    /// Whether tool calls written as text are parsed (issue 38).
    text_tool_calls: bool,
    /// Set once the provider was seen ignoring `tool_choice: "none"`.
    ignores_tool_choice: Arc<AtomicBool>,
}

/// An agent's context management: the configuration and the size of what
/// every request carries besides the ledger.
#[derive(Clone, Debug)]
struct AgentContext {
    config: ContextConfig,
    fixed_tokens: u64,
}

impl core::fmt::Debug for Agent {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Agent")
            .field("tools", &self.tools)
            .field("system_prompt_len", &self.system_prompt.len())
            .field("max_iterations", &self.max_iterations)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// An agent with the default budget, a fresh interrupt flag and no clock.
    pub fn new(
        model: Arc<dyn Model>,
        tools: Arc<ToolRegistry>,
        system_prompt: impl Into<String>,
    ) -> Self {
        Agent {
            model,
            tools,
            system_prompt: system_prompt.into(),
            max_iterations: crate::budget::DEFAULT_MAX_ITERATIONS,
            interrupt: InterruptFlag::new(),
            clock: Arc::new(NoClock),
            context: None,
            repeat_guard: None,
            batch: Arc::new(SequentialBatch),
            text_tool_calls: true,
            ignores_tool_choice: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Turns the repeat guard on (`Some`) or off (`None`, the default of a
    /// bare agent; the runtime's configuration turns it on).
    pub fn with_repeat_guard(mut self, guard: Option<RepeatGuard>) -> Self {
        self.repeat_guard = guard;
        self
    }

    /// The repeat guard, if on.
    pub fn repeat_guard(&self) -> Option<RepeatGuard> {
        self.repeat_guard
    }

    /// Runs the calls of all-read-only turns with `runner` (the default,
    /// [`SequentialBatch`], runs them one by one).
    pub fn with_batch_runner(mut self, runner: Arc<dyn ToolBatchRunner>) -> Self {
        self.batch = runner;
        self
    }

    /// The runner of read-only batches.
    pub fn batch_runner(&self) -> &Arc<dyn ToolBatchRunner> {
        &self.batch
    }

    /// Sets the size of the wallet a run starts with.
    pub fn with_max_iterations(mut self, n: u32) -> Self {
        self.max_iterations = n;
        self
    }

    /// Uses `clock` for ledger timestamps.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Shares an existing interrupt flag.
    pub fn with_interrupt(mut self, flag: InterruptFlag) -> Self {
        self.interrupt = flag;
        self
    }

    /// A handle to this agent's interrupt flag.
    pub fn interrupt_flag(&self) -> &InterruptFlag {
        &self.interrupt
    }

    /// Asks the running turn to stop (SPEC L11).
    pub fn interrupt(&self) {
        self.interrupt.interrupt();
    }

    /// The system prompt, byte-for-byte as sent.
    pub fn system_prompt(&self) -> &str {
        &self.system_prompt
    }

    /// The tools.
    pub fn tools(&self) -> &Arc<ToolRegistry> {
        &self.tools
    }

    /// The model.
    pub fn model(&self) -> &Arc<dyn Model> {
        &self.model
    }

    /// The wallet size of a fresh run.
    pub fn max_iterations(&self) -> u32 {
        self.max_iterations
    }

    /// Runs one user turn with a fresh wallet and no observer.
    pub fn run_conversation(&self, user_message: &str, history: Vec<LedgerEntry>) -> RunOutcome {
        let budget = IterationBudget::new(self.max_iterations);
        self.run(user_message, history, &budget, &mut NoObserver)
    }

    /// Runs one user turn drawing from `budget` (a sub-agent passes its
    /// parent's wallet here) and reporting to `observer`.
    ///
    /// The interrupt flag is cleared first: an interrupt aimed at an earlier
    /// run must not stop this one.
    pub fn run(
        &self,
        user_message: &str,
        history: Vec<LedgerEntry>,
        budget: &IterationBudget,
        observer: &mut dyn AgentObserver,
    ) -> RunOutcome {
        self.run_message(Message::user(user_message), history, budget, observer)
    }

    /// [`Agent::run`] with the user's message given whole: a
    /// [`Message::User`] with attachments (SPEC X6), as the gateway makes
    /// of a photo and its caption. Any other role is appended as given.
    pub fn run_message(
        &self,
        user_message: Message,
        history: Vec<LedgerEntry>,
        budget: &IterationBudget,
        observer: &mut dyn AgentObserver,
    ) -> RunOutcome {
        self.run_steered(user_message, history, budget, observer, &NoSteering)
    }

    /// [`Agent::run_message`] that takes text the user sends meanwhile
    /// from `steering` and gives it to the model at its next call, as user
    /// messages (SPEC Y5, see [`Steering`]).
    pub fn run_steered(
        &self,
        user_message: Message,
        history: Vec<LedgerEntry>,
        budget: &IterationBudget,
        observer: &mut dyn AgentObserver,
        steering: &dyn Steering,
    ) -> RunOutcome {
        self.interrupt.clear();
        let fresh = fresh_from(&history);
        let mut run = Run {
            agent: self,
            budget,
            observer,
            first_new: history.len(),
            messages: history,
            usage: Usage::default(),
            iterations: 0,
            fresh,
            compactions: Vec::new(),
            repeats: repeat::RepeatTracker::default(),
            tools_off: None,
            answer: budget.reserve(),
            steering,
            held: text_calls::Held::default(),
        };
        run.push(LedgerEntry::at(user_message, self.clock.now_ms()));
        let stop = run.drive();
        let first_new = run.first_new;
        let final_text = run
            .messages
            .iter()
            .skip(first_new)
            .rev()
            .find_map(|e| match &e.message {
                Message::Assistant {
                    content: Some(c), ..
                } if !c.is_empty() => Some(c.clone()),
                _ => None,
            })
            .unwrap_or_default();
        RunOutcome {
            final_text,
            messages: run.messages,
            first_new,
            stop,
            usage: run.usage,
            iterations: run.iterations,
            compactions: run.compactions,
        }
    }
}

/// The state of one run.
struct Run<'a> {
    agent: &'a Agent,
    budget: &'a IterationBudget,
    observer: &'a mut dyn AgentObserver,
    messages: Vec<LedgerEntry>,
    usage: Usage,
    iterations: u32,
    /// Where the run's first entry (the user message) now is.
    first_new: usize,
    /// The first entry whose recorded usage describes the current ledger
    /// (see [`crate::context::estimate::fresh_from`]).
    fresh: usize,
    compactions: Vec<Compaction>,
    /// The calls the repeat guard has seen.
    repeats: repeat::RepeatTracker,
    /// Set when the next model call must be made without tools.
    tools_off: Option<FinalCall>,
    /// The unit held from the run's start for its last call, made without
    /// tools (see `drive`); given back when the run ends without it.
    answer: Option<Reserved>,
    /// Text the user sent during the run (SPEC Y5).
    steering: &'a dyn Steering,
    /// Streamed text held back while it may be a text tool call.
    held: text_calls::Held,
}

/// Why a model call is the run's last, made without tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FinalCall {
    /// The repeat guard stopped a loop.
    Repeats,
    /// The wallet is spent.
    Budget,
}

/// Forwards streamed pieces to the observer and stops the stream when the
/// interrupt flag is set (check point (a) of SPEC L11).
struct LoopSink<'a, 'b> {
    observer: &'a mut dyn AgentObserver,
    interrupt: &'b InterruptFlag,
    held: &'a mut text_calls::Held,
}

impl LoopSink<'_, '_> {
    fn flow(&self) -> Flow {
        if self.interrupt.is_set() {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }
}

impl StreamSink for LoopSink<'_, '_> {
    fn on_text(&mut self, text: &str) -> Flow {
        let observer = &mut *self.observer;
        self.held.take(text, |shown| {
            observer.on_event(&AgentEvent::TextDelta(shown))
        });
        self.flow()
    }

    fn on_reasoning(&mut self, text: &str) -> Flow {
        self.observer.on_event(&AgentEvent::ReasoningDelta(text));
        self.flow()
    }

    fn on_progress(&mut self) -> Flow {
        self.flow()
    }

    fn on_fallback(&mut self, fallback: &Fallback<'_>) -> Flow {
        self.observer.on_event(&AgentEvent::Fallback(*fallback));
        self.flow()
    }
}

impl Run<'_> {
    fn push(&mut self, entry: LedgerEntry) {
        self.messages.push(entry);
        if let Some(last) = self.messages.last() {
            self.observer.on_event(&AgentEvent::Appended(last));
        }
    }

    fn now(&self) -> u64 {
        self.agent.clock.now_ms()
    }

    /// The calls this run may still make: the wallet's, and its own
    /// reserved answer.
    fn left(&self) -> u32 {
        self.budget.remaining() + u32::from(self.answer.is_some())
    }

    /// One model call over the current ledger; `offer_tools` false sends
    /// no tools list at all (and then no `tool_choice`).
    fn call_model(
        &mut self,
        tool_choice: ToolChoice,
        offer_tools: bool,
    ) -> Result<Completion, ModelError> {
        let request = ChatRequest {
            system_prompt: &self.agent.system_prompt,
            messages: &self.messages,
            tools: if offer_tools {
                self.agent.tools.specs()
            } else {
                &[]
            },
            tool_choice,
        };
        self.held = text_calls::Held::new(self.gates_text(offer_tools));
        let mut sink = LoopSink {
            observer: &mut *self.observer,
            interrupt: &self.agent.interrupt,
            held: &mut self.held,
        };
        self.agent.model.complete(&request, &mut sink)
    }

    fn drive(&mut self) -> StopReason {
        let interrupt = &self.agent.interrupt;
        loop {
            // Check point (c): the start of every iteration.
            if interrupt.is_set() {
                return StopReason::Interrupted;
            }
            // The run's last call is paid from the unit it reserved at its
            // start and made without tools, so the user gets an answer (SPEC
            // Y6), even when sub-agents spent the rest of the wallet while
            // this run waited for their tool: parent and children together
            // stay within the wallet. A run that could reserve nothing makes
            // no call.
            let final_call = if self.budget.try_consume() {
                self.tools_off
            } else if let Some(answer) = self.answer.take() {
                answer.spend();
                Some(FinalCall::Budget)
            } else {
                return StopReason::BudgetExhausted;
            };
            let spent = final_call == Some(FinalCall::Budget) || self.left() == 0;
            let tool_choice = match final_call {
                Some(_) => ToolChoice::None,
                None => ToolChoice::Auto,
            };
            // A provider known to ignore `tool_choice` gets its final calls
            // without the tools list (see `text_calls`).
            let offer_tools =
                final_call.is_none() || !self.agent.ignores_tool_choice.load(Ordering::Relaxed);
            self.iterations += 1;
            self.observer.on_event(&AgentEvent::ModelCall {
                iteration: self.iterations,
                remaining: self.left(),
            });

            // Text the user sent meanwhile joins the ledger before the call
            // (SPEC Y5); every earlier tool call is answered by now.
            self.take_steers();
            // The pre-call check (SPEC X1).
            self.keep_within_window(Urgency::Proactive);
            if interrupt.is_set() {
                return StopReason::Interrupted;
            }
            // A halt (a spending cap) ends the run before any further call;
            // the observer may have set it on the `ModelCall` event above.
            if self.budget.is_halted() {
                return StopReason::Halted;
            }
            let mut result = self.call_model(tool_choice, offer_tools);
            if let Err(err) = &result
                && err.kind.is_context_overflow()
                && self.agent.context.is_some()
            {
                // Learn the stated limit, compact what can be, ask once more.
                self.learn_window(err.kind);
                if self.keep_within_window(Urgency::Forced) {
                    if interrupt.is_set() {
                        return StopReason::Interrupted;
                    }
                    result = self.call_model(tool_choice, offer_tools);
                }
                if let Err(err) = &result
                    && err.kind.is_context_overflow()
                {
                    self.learn_window(err.kind);
                    return StopReason::ContextOverflow(err.clone());
                }
            }
            let mut completion = match result {
                Ok(c) => c,
                Err(err) => {
                    self.release_held();
                    if let Some(text) = err.partial_text.clone().filter(|t| !t.is_empty()) {
                        let mut entry = LedgerEntry::at(Message::assistant(text), self.now());
                        entry.meta.interrupted = true;
                        self.push(entry);
                    }
                    return StopReason::ModelError(err);
                }
            };
            if let Some(u) = &completion.usage {
                self.usage.add(u);
            }

            // Check point (a) fired inside the stream: keep the partial text,
            // drop tool calls (they may be incomplete and none was announced
            // as run), and leave.
            if interrupt.is_set() {
                self.release_held();
                self.push_assistant(completion, false, true);
                return StopReason::Interrupted;
            }

            if completion.finish_reason == Some(FinishReason::Length) {
                self.release_held();
                self.push_assistant(completion, false, false);
                return StopReason::Truncated;
            }

            self.adopt_text_calls(&mut completion, offer_tools);
            // A final call's answer ends the run; tool calls a provider
            // returned despite `tool_choice = none` are not run: it is asked
            // again without the tools list, so the turn ends with an answer.
            if final_call.is_some() && !completion.tool_calls.is_empty() {
                let (answer, failed) = self.answer_without_tools(completion);
                completion = answer;
                if let Some(err) = failed {
                    self.push_assistant(completion, false, false);
                    return StopReason::ModelError(err);
                }
            }
            if completion.tool_calls.is_empty() || final_call.is_some() {
                self.push_assistant(completion, false, false);
                // A first call made without tools (a wallet of one) that
                // answers has simply answered.
                return if final_call.is_some() && spent && self.iterations > 1 {
                    StopReason::BudgetExhausted
                } else {
                    StopReason::Completed
                };
            }

            let calls = self.push_assistant(completion, true, false);
            if let Some(stop) = self.answer_tool_calls(&calls) {
                return stop;
            }
        }
    }

    /// Appends the assistant message; returns the tool calls it kept (with
    /// ids made unique and non-empty so every result can be matched).
    fn push_assistant(
        &mut self,
        completion: Completion,
        keep_tool_calls: bool,
        interrupted: bool,
    ) -> Vec<ToolCall> {
        let Completion {
            content,
            mut tool_calls,
            reasoning,
            reasoning_details,
            model,
            finish_reason,
            usage,
        } = completion;
        if keep_tool_calls {
            // Ids the provider left out are named after the message's place
            // in the ledger, which no other message of this conversation has:
            // some providers reject a history that repeats a call id.
            let position = self.messages.len();
            for (n, call) in tool_calls.iter_mut().enumerate() {
                if call.id.is_empty() {
                    call.id = format!("call_{position}_{n}");
                }
            }
            dedup_ids(&mut tool_calls, position);
        } else {
            tool_calls.clear();
        }
        // An assistant message needs content or tool calls to be valid on the
        // wire; a cut or interrupted answer may have neither.
        let content = match content {
            Some(c) => Some(c),
            None if tool_calls.is_empty() => Some(String::new()),
            None => None,
        };
        let entry = LedgerEntry {
            message: Message::Assistant {
                content,
                tool_calls: tool_calls.clone(),
            },
            meta: EntryMeta {
                reasoning,
                reasoning_details,
                model,
                usage,
                timestamp_ms: self.now(),
                finish_reason,
                interrupted,
                compaction: None,
            },
        };
        self.push(entry);
        tool_calls
    }
}

/// Makes tool-call ids unique within one message (a duplicate id would make
/// two results indistinguishable for the provider).
fn dedup_ids(calls: &mut [ToolCall], position: usize) {
    for i in 1..calls.len() {
        let (before, rest) = calls.split_at_mut(i);
        let call = &mut rest[0];
        if before.iter().any(|c| c.id == call.id) {
            call.id = format!("{}_{}_{}", call.id, position, i);
        }
    }
}

/// A boxed observer that forwards to a closure.
pub struct FnObserver<F>(pub F);

impl<F> core::fmt::Debug for FnObserver<F> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("FnObserver")
    }
}

impl<F: FnMut(&AgentEvent<'_>)> AgentObserver for FnObserver<F> {
    fn on_event(&mut self, event: &AgentEvent<'_>) {
        (self.0)(event)
    }
}

#[allow(dead_code)]
fn _assert_object_safe(_: &dyn AgentObserver, _: Box<dyn Model>) {}
