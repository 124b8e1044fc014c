//! The loop's side of two local-server habits (issue 38): tool calls written
//! as text, and `tool_choice: "none"` ignored.
//!
//! **Text calls.** When an answer carries no native `tool_calls`, its
//! content is given to [`crate::codec::text_calls::parse`] with the names of
//! the offered tools. A message that is wholly calls becomes a native call
//! in the ledger (content dropped, a leading think block kept as the
//! entry's reasoning), so the next request carries `tool_calls` and `tool`
//! results as the provider expects, and the calls run like any other. While
//! an answer streams, text that may still turn out to be a call is held
//! back ([`Held`]) and shown only once it cannot be one — a call is never
//! shown to the user as the answer. [`Agent::with_text_tool_calls`] turns
//! this off.
//!
//! **`tool_choice` ignored.** A call meant to answer without tools (the
//! wallet's last, the repeat guard's) that comes back with tool calls is
//! asked once more *without the tools list*, which every server honours.
//! The agent's [`Agent::with_tool_choice_memory`] flag remembers it, so
//! later final calls of any run sharing the flag go without tools at once.

use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};

use super::{Agent, AgentEvent, Run};
use crate::codec::text_calls::{may_be_call, parse};
use crate::message::ToolCall;
use crate::model::{Completion, ModelError, ToolChoice};

/// Answer text held back while it may still be a text tool call.
#[derive(Debug, Default)]
pub(super) struct Held {
    /// The text received and not shown yet.
    pub(super) text: String,
    /// Whether text is still being held (undecided).
    pub(super) open: bool,
}

impl Held {
    /// A fresh hold for one model call; `gate` says whether to hold at all.
    pub(super) fn new(gate: bool) -> Self {
        Held {
            text: String::new(),
            open: gate,
        }
    }

    /// Takes a streamed piece and gives `show` what the user may see now:
    /// the piece itself, all the held text once it cannot be a call, or
    /// nothing while it still may be.
    pub(super) fn take(&mut self, piece: &str, show: impl FnOnce(&str)) {
        if !self.open {
            show(piece);
            return;
        }
        self.text.push_str(piece);
        if !may_be_call(&self.text) {
            self.open = false;
            show(&core::mem::take(&mut self.text));
        }
    }
}

impl Agent {
    /// Parses tool calls a model wrote as text (`true`, the default) or
    /// treats every answer without native calls as the answer (`false`).
    pub fn with_text_tool_calls(mut self, on: bool) -> Self {
        self.text_tool_calls = on;
        self
    }

    /// Whether text tool calls are parsed.
    pub fn text_tool_calls(&self) -> bool {
        self.text_tool_calls
    }

    /// Shares `flag` as the memory that this provider ignores
    /// `tool_choice: "none"` (set by the loop when it finds out; a set flag
    /// makes final calls go without the tools list at once).
    pub fn with_tool_choice_memory(mut self, flag: Arc<AtomicBool>) -> Self {
        self.ignores_tool_choice = flag;
        self
    }

    /// Whether this agent's provider is known to ignore `tool_choice`.
    pub fn ignores_tool_choice(&self) -> bool {
        self.ignores_tool_choice.load(Ordering::Relaxed)
    }
}

impl Run<'_> {
    /// Whether this call's streamed text is held back (see [`Held`]).
    pub(super) fn gates_text(&self, offer_tools: bool) -> bool {
        offer_tools && self.agent.text_tool_calls && !self.agent.tools.is_empty()
    }

    /// Shows the text still held back (the answer was not a call).
    pub(super) fn release_held(&mut self) {
        let text = core::mem::take(&mut self.held.text);
        self.held.open = false;
        if !text.is_empty() {
            self.observer.on_event(&AgentEvent::TextDelta(&text));
        }
    }

    /// Turns an answer that is wholly text tool calls into native calls;
    /// shows held text of any other answer.
    pub(super) fn adopt_text_calls(&mut self, completion: &mut Completion, offered_tools: bool) {
        let content = completion.content.as_deref().unwrap_or("");
        let parsed = if completion.tool_calls.is_empty()
            && self.gates_text(offered_tools)
            && !content.is_empty()
        {
            let names: Vec<&str> = self.agent.tools.names().collect();
            parse(content, &names)
        } else {
            None
        };
        let Some(parsed) = parsed else {
            self.release_held();
            return;
        };
        self.held = Held::default();
        completion.tool_calls = parsed
            .calls
            .into_iter()
            .map(|c| ToolCall::new("", c.name, c.arguments))
            .collect();
        completion.content = None;
        if completion.reasoning.is_none() {
            completion.reasoning = parsed.thinking;
        }
    }

    /// The answer to a final call that came back with tool calls: asked
    /// once more without the tools list, the provider remembered as one
    /// that ignores `tool_choice`. On failure the first answer is kept
    /// (its calls are not run) with the error.
    ///
    /// The call is paid from the wallet when it holds a unit. When it does
    /// not (the run's reserved answer was the call that misbehaved), it is
    /// made anyway: the one call past `--max-iterations`, once per provider
    /// and process, that a turn needs to end with an answer (issue 38);
    /// later final calls go without the tools list at once.
    pub(super) fn answer_without_tools(
        &mut self,
        first: Completion,
    ) -> (Completion, Option<ModelError>) {
        self.agent
            .ignores_tool_choice
            .store(true, Ordering::Relaxed);
        let _paid = self.budget.try_consume();
        self.iterations += 1;
        self.observer.on_event(&AgentEvent::ModelCall {
            iteration: self.iterations,
            remaining: self.left(),
        });
        match self.call_model(ToolChoice::None, false) {
            Ok(mut again) => {
                if let Some(u) = &again.usage {
                    self.usage.add(u);
                }
                self.release_held();
                again.tool_calls.clear();
                (again, None)
            }
            Err(err) => {
                self.release_held();
                (first, Some(err))
            }
        }
    }
}
