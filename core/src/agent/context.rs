//! The agent's side of context management (SPEC X1): configuring it, the
//! pre-call compaction, learning a limit from an error, and the cap on tool
//! results. The policy itself is in [`crate::context`].

use alloc::string::String;
use alloc::vec::Vec;

use super::{Agent, AgentContext, AgentEvent, Run};
use crate::context::estimate::{fixed_tokens, fresh_from, request_tokens, text_tokens};
use crate::context::{
    CompactError, Compaction, Compactor, ContextConfig, ContextUsage, Urgency, cap_tool_result,
    cap_tool_result_kept,
};
use crate::interrupt::InterruptFlag;
use crate::message::{LedgerEntry, Message, SummaryPlacement};
use crate::model::{Flow, ModelErrorKind, StreamSink};

/// What an older result of the current turn is cut to, in tokens (its
/// text; the marker saying so comes on top).
const CUT_RESULT_TOKENS: u64 = 120;

/// What [`cap_tool_result`] reserves for its marker.
const CUT_MARKER_TOKENS: u64 = 40;

impl Agent {
    /// Keeps conversations within the model's context window (SPEC X1):
    /// compaction before calls that would pass the threshold, recovery from
    /// context-length errors, tool results capped relative to the window.
    /// Without this the agent sends the ledger as it is.
    pub fn with_context(self, config: ContextConfig) -> Self {
        let fixed = fixed_tokens(&self.system_prompt, self.tools.specs());
        self.with_context_estimated(config, fixed)
    }

    /// [`Agent::with_context`] with the fixed part's estimate —
    /// `fixed_tokens` of this agent's system prompt and tools — already
    /// made by the caller (a front end that fitted the tools to the
    /// window measured exactly these). Checked in debug builds.
    pub fn with_context_estimated(mut self, config: ContextConfig, fixed: u64) -> Self {
        debug_assert_eq!(
            fixed,
            fixed_tokens(&self.system_prompt, self.tools.specs()),
            "the estimate given is not this agent's"
        );
        self.context = Some(AgentContext {
            config,
            fixed_tokens: fixed,
        });
        self
    }

    /// The context configuration, if the agent manages its window.
    pub fn context(&self) -> Option<&ContextConfig> {
        self.context.as_ref().map(|c| &c.config)
    }

    /// How full the window would be with `history` as the ledger
    /// (`/status`); `None` without context management.
    pub fn context_usage(&self, history: &[LedgerEntry]) -> Option<ContextUsage> {
        let ctx = self.context.as_ref()?;
        let estimate = request_tokens(ctx.fixed_tokens, history, fresh_from(history));
        Some(ContextUsage {
            used: estimate.tokens,
            window: ctx.config.window.tokens(),
            source: ctx.config.window.source(),
            anchored: estimate.anchored,
        })
    }

    /// Compacts `history` now, whatever its size (`/compress [focus]`):
    /// one summary call, steered toward `focus` if given. On error the
    /// history is unchanged. Without context management there is nothing to
    /// compact with ([`CompactError::NothingToCompact`]).
    pub fn compact(
        &self,
        history: &mut Vec<LedgerEntry>,
        focus: Option<&str>,
    ) -> Result<Compaction, CompactError> {
        let ctx = self
            .context
            .as_ref()
            .ok_or(CompactError::NothingToCompact)?;
        self.interrupt.clear();
        let mut sink = InterruptSink(&self.interrupt);
        self.compactor(ctx)
            .compact(history, Urgency::Forced, focus, &mut sink)
    }

    fn compactor<'s>(&'s self, ctx: &'s AgentContext) -> Compactor<'s> {
        Compactor {
            config: &ctx.config,
            model: match &ctx.config.summarizer {
                Some(m) => &**m,
                None => &*self.model,
            },
            fixed_tokens: ctx.fixed_tokens,
            now_ms: self.clock.now_ms(),
        }
    }
}

/// A sink for calls no one watches but the interrupt flag.
struct InterruptSink<'a>(&'a InterruptFlag);

impl StreamSink for InterruptSink<'_> {
    fn on_text(&mut self, _text: &str) -> Flow {
        self.on_progress()
    }

    fn on_progress(&mut self) -> Flow {
        if self.0.is_set() {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }
}

impl Run<'_> {
    /// Compacts the ledger if `urgency` calls for it (SPEC X1); returns
    /// whether it did. A failed compaction leaves the ledger as it was (the
    /// call then goes ahead and fits, or fails on its own).
    pub(super) fn keep_within_window(&mut self, urgency: Urgency) -> bool {
        let Some(ctx) = &self.agent.context else {
            return false;
        };
        let window = u64::from(ctx.config.window.tokens());
        let threshold = ctx
            .config
            .policy
            .budgets(window, ctx.fixed_tokens)
            .threshold;
        if urgency == Urgency::Proactive {
            let estimate = request_tokens(ctx.fixed_tokens, &self.messages, self.fresh);
            if estimate.tokens <= threshold {
                return false;
            }
        }
        // Within this turn, older tool results are cut before anything is
        // summarised (issue 38): the request and the steps taken stay
        // where the model reads them.
        // The last two results stay whole if that fits, else only the
        // last; the older ones shrink further if still needed.
        let mut cut = false;
        for (keep, to) in [
            (2, CUT_RESULT_TOKENS),
            (1, CUT_RESULT_TOKENS),
            (1, CUT_RESULT_TOKENS / 4),
        ] {
            if self.cut_older_turn_results(keep, to) {
                cut = true;
                self.fresh = self.messages.len();
                let estimate = request_tokens(ctx.fixed_tokens, &self.messages, self.fresh);
                if estimate.tokens <= threshold {
                    return true;
                }
            }
        }
        let mut sink = InterruptSink(&self.agent.interrupt);
        let outcome =
            self.agent
                .compactor(ctx)
                .compact(&mut self.messages, urgency, None, &mut sink);
        let compaction = match outcome {
            Ok(c) => c,
            Err(_) => return cut,
        };
        if let Some(u) = &compaction.usage {
            self.usage.add(u);
        }
        // Every entry left predates this compaction.
        self.fresh = self.messages.len();
        let summary_entry = usize::from(compaction.placement == SummaryPlacement::Standalone);
        let tail_start = compaction.head + compaction.replaced;
        self.first_new = if self.first_new >= tail_start {
            self.first_new - compaction.replaced + summary_entry
        } else if self.first_new >= compaction.head {
            compaction.head + summary_entry
        } else {
            self.first_new
        };
        self.observer.on_event(&AgentEvent::Compacted(&compaction));
        self.compactions.push(compaction);
        true
    }

    /// Cuts the results of this turn's tool calls, all but the last
    /// `keep`, to `to` tokens; returns whether any was cut. Long
    /// outputs were kept whole on disk by the registry's keeper when there
    /// is one, and the stored transcript keeps them.
    fn cut_older_turn_results(&mut self, keep: usize, to: u64) -> bool {
        let start = self.first_new.min(self.messages.len());
        let results: Vec<usize> = (start..self.messages.len())
            .filter(|&i| matches!(self.messages[i].message, Message::Tool { .. }))
            .collect();
        let older = results.len().saturating_sub(keep);
        let mut cut = false;
        for &i in &results[..older] {
            if let Message::Tool { content, .. } = &mut self.messages[i].message
                && text_tokens(content) > to + CUT_MARKER_TOKENS
            {
                *content = cap_tool_result(core::mem::take(content), to + CUT_MARKER_TOKENS);
                cut = true;
            }
        }
        cut
    }

    /// Takes the limit a context-length error stated, if it stated one.
    pub(super) fn learn_window(&self, kind: ModelErrorKind) {
        if let (Some(ctx), ModelErrorKind::ContextOverflow { window: Some(w) }) =
            (&self.agent.context, kind)
        {
            ctx.config.window.learn(w);
        }
    }

    /// The cap on one tool result, from the window; an output over it is
    /// kept whole by the registry's [`crate::tool::OutputKeeper`] when there is one.
    pub(super) fn cap(&self, tool: &str, result: String) -> String {
        match &self.agent.context {
            Some(ctx) => {
                let window = u64::from(ctx.config.window.tokens());
                let max = ctx
                    .config
                    .policy
                    .budgets(window, ctx.fixed_tokens)
                    .tool_result;
                match self.agent.tools.output_keeper() {
                    Some(keeper) => cap_tool_result_kept(result, max, |all| keeper.keep(tool, all)),
                    None => cap_tool_result(result, max),
                }
            }
            None => result,
        }
    }
}
