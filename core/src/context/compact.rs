//! Running a compaction: plan, one summary call through the [`Model`]
//! trait, and the rewrite of the in-memory ledger.
//!
//! **A failing summariser does not stop a compaction:** a summary call that
//! errors, answers without text or answers with a tool call is replaced by
//! the automatic [`digest`](super::digest), and the summariser is left
//! alone for a cooldown ([`SummarizerHealth`](super::SummarizerHealth)).
//! Only an interrupt during the summary call leaves the ledger as it was.

use alloc::string::String;
use alloc::vec::Vec;

use crate::message::{CompactionMark, EntryMeta, LedgerEntry, Message, SummaryPlacement, Usage};
use crate::model::{ChatRequest, Flow, Model, StreamSink};

use super::ContextConfig;
use super::digest::digest;
use super::estimate::{entry_tokens, fresh_from, request_tokens, text_tokens};
use super::plan::{Budgets, plan};
use super::summary::{self, SUMMARIZER_PROMPT};

/// What one compaction did, for the store and for the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compaction {
    /// Entries kept at the front (the head).
    pub head: usize,
    /// Entries the summary replaced.
    pub replaced: usize,
    /// Entries kept at the end (the tail). With
    /// [`SummaryPlacement::BeforeNext`] the first of them now begins with
    /// the summary.
    pub tail: usize,
    /// How the summary sits in the ledger.
    pub placement: SummaryPlacement,
    /// The summary as it stands in the ledger (framed, see
    /// [`summary::block`]).
    pub summary: String,
    /// Estimated request tokens before.
    pub tokens_before: u64,
    /// Estimated request tokens after.
    pub tokens_after: u64,
    /// What the summary call cost, if the provider said.
    pub usage: Option<Usage>,
    /// The summary is the automatic digest, not a model's summary.
    pub digest: bool,
    /// Why the summary call of this compaction failed, when it did (then
    /// the summariser rests for its cooldown; later compactions in the
    /// cooldown make a digest without a call and leave this `None`, so a
    /// caller warns once per failure, not once per turn).
    pub summarizer_failure: Option<String>,
    /// When it was made (the timestamp of a standalone summary entry), ms
    /// since the Unix epoch as the agent's clock tells it.
    pub at_ms: u64,
}

/// Why a compaction did not happen. The ledger is unchanged in every case.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompactError {
    /// The ledger is too short to gain anything (or only holds an earlier
    /// summary between the kept head and tail).
    #[error("there is nothing to compact yet")]
    NothingToCompact,
    /// What could be compacted is too small to be worth a summary call.
    #[error("compacting would save too little to be worth it")]
    NotWorthIt,
    /// The run was interrupted during the summary call.
    #[error("interrupted while summarising")]
    Interrupted,
}

/// Whether a compaction is needed or wanted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Urgency {
    /// Before a model call: only if the estimate is over the threshold and
    /// compacting saves a worthwhile amount.
    Proactive,
    /// After a context-length error, or on request (`/compress`): compact
    /// whatever can be compacted.
    Forced,
}

/// One compaction run over a ledger.
pub struct Compactor<'a> {
    /// The window and policy.
    pub config: &'a ContextConfig,
    /// The model that writes the summary.
    pub model: &'a dyn Model,
    /// Estimated tokens of the system prompt and tool definitions.
    pub fixed_tokens: u64,
    /// Timestamp for a standalone summary entry.
    pub now_ms: u64,
}

impl core::fmt::Debug for Compactor<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Compactor")
            .field("fixed_tokens", &self.fixed_tokens)
            .finish_non_exhaustive()
    }
}

/// Passes stream events on and remembers whether the caller stopped it.
struct Watch<'a> {
    inner: &'a mut dyn StreamSink,
    stopped: bool,
}

impl Watch<'_> {
    fn note(&mut self, flow: Flow) -> Flow {
        self.stopped |= flow == Flow::Stop;
        flow
    }
}

impl StreamSink for Watch<'_> {
    // The summary's text is not the answer: it is not shown, only used to
    // give the caller (the interrupt check) a say.
    fn on_text(&mut self, _text: &str) -> Flow {
        let flow = self.inner.on_progress();
        self.note(flow)
    }

    fn on_reasoning(&mut self, _text: &str) -> Flow {
        let flow = self.inner.on_progress();
        self.note(flow)
    }

    fn on_progress(&mut self) -> Flow {
        let flow = self.inner.on_progress();
        self.note(flow)
    }
}

impl Compactor<'_> {
    /// Compacts `view` if `urgency` calls for it. `focus` steers the summary
    /// (`/compress FOCUS`); `sink` is asked whether to stop while the
    /// summary streams (the summary text itself is not passed on).
    pub fn compact(
        &self,
        view: &mut Vec<LedgerEntry>,
        urgency: Urgency,
        focus: Option<&str>,
        sink: &mut dyn StreamSink,
    ) -> Result<Compaction, CompactError> {
        let window = u64::from(self.config.window.tokens());
        let policy = &self.config.policy;
        let budgets = policy.budgets(window, self.fixed_tokens);
        let before = request_tokens(self.fixed_tokens, view, fresh_from(view)).tokens;
        // Asked for explicitly, a compaction also shrinks a conversation
        // that is still far from the window: keep at most a third of it.
        let conversation = before.saturating_sub(self.fixed_tokens);
        let (head, tail) = match urgency {
            Urgency::Proactive => (budgets.head, budgets.tail),
            Urgency::Forced => (
                budgets.head.min(conversation / 5),
                budgets.tail.min(conversation / 3),
            ),
        };
        let plan = plan(
            view,
            Budgets {
                head,
                tail,
                tail_max: budgets.tail,
            },
        )
        .map_err(|_| CompactError::NothingToCompact)?;
        if urgency == Urgency::Proactive {
            let middle =
                before.saturating_sub(self.fixed_tokens + plan.head_tokens + plan.tail_tokens);
            if middle < budgets.min_gain {
                return Err(CompactError::NotWorthIt);
            }
        }

        let middle = plan.head_end..plan.tail_start;
        let (answer, usage, summarizer_failure) =
            if self.config.summarizer_health.available(self.now_ms) {
                match self.summarise(view, middle.clone(), &budgets, focus, sink)? {
                    Ok((answer, usage)) => (Some(answer), usage, None),
                    Err(why) => {
                        self.config
                            .summarizer_health
                            .failed(self.now_ms, self.config.summarizer_cooldown_ms);
                        (None, None, Some(why))
                    }
                }
            } else {
                (None, None, None)
            };
        let digest_made = answer.is_none();
        let answer = answer.unwrap_or_else(|| {
            // A digest never takes more than the summary it stands for.
            let max = usize::try_from(budgets.summary.saturating_mul(3)).unwrap_or(usize::MAX);
            digest(view, middle.clone(), max.max(256))
        });

        // The rewrite: drop the middle, place the summary — unless the
        // summary is no smaller than what it stands for: a compaction that
        // does not make the request smaller only loses the originals'
        // wording (issue 38).
        let replaced = plan.replaced();
        let tail = view.len() - plan.tail_start;
        let block = summary::block(&answer, replaced);
        let middle_tokens: u64 = view[middle.clone()].iter().map(entry_tokens).sum();
        if text_tokens(&block) >= middle_tokens {
            return Err(CompactError::NotWorthIt);
        }
        let mark = CompactionMark {
            placement: plan.placement,
            replaced: u32::try_from(replaced).unwrap_or(u32::MAX),
            kept_after: u32::try_from(tail).unwrap_or(u32::MAX),
        };
        match plan.placement {
            SummaryPlacement::Standalone => {
                let entry = LedgerEntry {
                    message: Message::user(block.clone()),
                    meta: EntryMeta {
                        timestamp_ms: self.now_ms,
                        compaction: Some(mark),
                        ..EntryMeta::default()
                    },
                };
                view.splice(plan.head_end..plan.tail_start, [entry]);
            }
            SummaryPlacement::BeforeNext => {
                view.drain(plan.head_end..plan.tail_start);
                let first = &mut view[plan.head_end];
                if let Message::User { content, .. } = &mut first.message {
                    *content = summary::merged(&block, content);
                }
                first.meta.compaction = Some(mark);
            }
        }
        let after = request_tokens(self.fixed_tokens, view, fresh_from(view)).tokens;
        Ok(Compaction {
            head: plan.head_end,
            replaced,
            tail,
            placement: plan.placement,
            summary: block,
            tokens_before: before,
            tokens_after: after,
            usage,
            at_ms: self.now_ms,
            digest: digest_made,
            summarizer_failure,
        })
    }
}

impl Compactor<'_> {
    /// One summary call for `view[middle]`: `Err` only for an interrupt;
    /// `Ok(Err(why))` when the summariser failed or answered nothing
    /// usable (no text, or a tool call instead of a summary).
    #[allow(clippy::type_complexity)]
    fn summarise(
        &self,
        view: &[LedgerEntry],
        middle: core::ops::Range<usize>,
        budgets: &super::PolicyBudgets,
        focus: Option<&str>,
        sink: &mut dyn StreamSink,
    ) -> Result<Result<(String, Option<Usage>), String>, CompactError> {
        let text =
            summary::request_text(view, middle, budgets.summary_input, budgets.summary, focus);
        let request_messages = [LedgerEntry::new(Message::user(text))];
        let request = ChatRequest {
            system_prompt: SUMMARIZER_PROMPT,
            messages: &request_messages,
            tools: &[],
            tool_choice: crate::model::ToolChoice::Auto,
        };
        let mut watch = Watch {
            inner: sink,
            stopped: false,
        };
        let outcome = self.model.complete(&request, &mut watch);
        if watch.stopped {
            return Err(CompactError::Interrupted);
        }
        let completion = match outcome {
            Ok(c) => c,
            Err(e) => return Ok(Err(alloc::format!("the summary call failed: {e}"))),
        };
        let answer = completion.content.as_deref().map(str::trim).unwrap_or("");
        if answer.is_empty() {
            return Ok(Err(if completion.tool_calls.is_empty() {
                "the summary call returned no text".into()
            } else {
                "the summary call answered with a tool call instead of a summary".into()
            }));
        }
        let answer = summary::clip(answer, budgets.summary.saturating_mul(2));
        Ok(Ok((answer, completion.usage)))
    }
}

/// Estimated tokens of the summariser's instructions around the excerpt.
pub(super) fn summary_overhead() -> u64 {
    text_tokens(SUMMARIZER_PROMPT) + 300
}
