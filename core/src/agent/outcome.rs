//! How a run ended: [`StopReason`] and everything it produced,
//! [`RunOutcome`].

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::context::Compaction;
use crate::message::{LedgerEntry, Message, Usage};
use crate::model::{ModelError, ModelErrorKind};

/// What to do when a request does not fit: the fixed part (system prompt
/// and tool definitions) is the usual cause with a small window, not the
/// user's message (issue 38).
pub const OVERFLOW_FIXES: &str = "Every request also carries the system prompt and the tool \
definitions: offer fewer tools (--toolsets file,terminal) or give the model a larger context on \
the server (Ollama: num_ctx; llama.cpp: -c). Otherwise send a shorter message (or a smaller \
file), or start a new session.";

/// Why a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model answered without calling tools.
    Completed,
    /// The iteration wallet ran dry before the model finished (SPEC L3).
    BudgetExhausted,
    /// The interrupt flag was set (SPEC L11).
    Interrupted,
    /// The wallet was halted ([`IterationBudget::halt`]): a spending cap
    /// was reached, so no further model call was made. The front-end that
    /// halted it says why.
    Halted,
    /// The model's output was cut by the token limit (SPEC L4).
    Truncated,
    /// The model call failed after the transport's retries (SPEC L12).
    ModelError(ModelError),
    /// The request does not fit in the model's context window, even after
    /// compacting the ledger (SPEC X1). Carries the provider's error.
    ContextOverflow(ModelError),
    /// A tool aborted the turn.
    ToolAborted {
        /// The tool that aborted.
        tool: String,
        /// Its reason.
        message: String,
    },
}

impl StopReason {
    /// A one-line explanation for the user, `None` for a normal completion.
    pub fn notice(&self, budget_total: u32) -> Option<String> {
        match self {
            StopReason::Completed => None,
            StopReason::BudgetExhausted => Some(format!(
                "Reached the maximum iteration count ({budget_total} model calls): the last call \
                 was made without tools, so the answer is what was gathered until then and the \
                 task may be unfinished."
            )),
            StopReason::Interrupted => Some("Interrupted.".into()),
            StopReason::Halted => Some("Stopped before the next model call.".into()),
            StopReason::Truncated => Some(
                "The answer was cut off by the model's output-token limit (finish_reason = length)."
                    .into(),
            ),
            StopReason::ModelError(e) => Some(format!("Model error: {e}")),
            StopReason::ContextOverflow(e) => Some(match e.kind {
                ModelErrorKind::ContextOverflow {
                    window: Some(window),
                } => format!(
                    "The conversation does not fit in the model's context window ({window} tokens), even after compacting it. {OVERFLOW_FIXES} The provider said: {e}"
                ),
                _ => format!(
                    "The conversation does not fit in the model's context window, even after compacting it. {OVERFLOW_FIXES} The provider said: {e}"
                ),
            }),
            StopReason::ToolAborted { tool, message } => {
                Some(format!("Tool '{tool}' aborted the turn: {message}"))
            }
        }
    }
}

/// Everything a run produced.
#[derive(Clone, Debug)]
pub struct RunOutcome {
    /// The text of the last assistant message (possibly partial); empty if
    /// the model produced none.
    pub final_text: String,
    /// The complete ledger: the history passed in, then everything this run
    /// added; compacted if the run compacted it (SPEC X1).
    pub messages: Vec<LedgerEntry>,
    /// Index in `messages` of the first entry this run added (the user
    /// message). If a compaction summarised it away, the first entry after
    /// the summary.
    pub first_new: usize,
    /// The compactions this run made, in order.
    pub compactions: Vec<Compaction>,
    /// Why the run ended.
    pub stop: StopReason,
    /// Token usage summed over this run's model calls.
    pub usage: Usage,
    /// Model calls made by this run (not counting sub-agents).
    pub iterations: u32,
}

impl RunOutcome {
    /// The entries this run added (starting with the user message).
    pub fn new_messages(&self) -> &[LedgerEntry] {
        &self.messages[self.first_new..]
    }

    /// Whether the run added an answer: text, a tool call or a tool
    /// result. A run interrupted before the first token, or whose model
    /// failed at once, added nothing but the user's message (and perhaps an
    /// empty assistant entry) — a turn its front end may take back.
    pub fn answered(&self) -> bool {
        self.new_messages().iter().any(|e| match &e.message {
            Message::User { .. } => false,
            Message::Assistant {
                content,
                tool_calls,
            } => !tool_calls.is_empty() || content.as_deref().is_some_and(|c| !c.is_empty()),
            Message::Tool { .. } => true,
        })
    }
}
