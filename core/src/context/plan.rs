//! Where to cut: the pure planning half of a compaction.
//!
//! A plan splits the ledger into three runs, `[head | middle | tail]`:
//!
//! - **head**: the first exchange (the first user message and everything up
//!   to the next user message), kept verbatim if it fits its budget; else
//!   the first user message with the model's first step (its answer, or its
//!   first tool calls and their results), so a long task keeps the request
//!   that started it; else nothing. Either way the head ends with a model
//!   message, so a summary after it keeps the roles alternating. It never reaches past an earlier summary, so the head of a
//!   compacted ledger is the head it was compacted with.
//! - **tail**: the most recent entries that fit the tail budget, starting at
//!   a user message when one fits (a whole exchange; up to
//!   [`Budgets::tail_max`] to keep the last exchange whole), else at an
//!   assistant message; at least the last group, even over budget.
//!   The tail never starts among the parts of the request being answered
//!   (an album: consecutive user messages with attachments): it takes all
//!   of them.
//! - **middle**: everything between, including an earlier summary; replaced
//!   by one new summary.
//!
//! **Invariant:** a cut never falls on a tool result, so an assistant
//! message with tool calls always stays with all its results (in the
//! middle, or in a kept run). Planning reads only the head and the tail
//! (their size is bounded by their budgets) plus a scan for an earlier
//! summary; it copies nothing.

use crate::message::{LedgerEntry, Message, SummaryPlacement};

use super::estimate::entry_tokens;

/// Token budgets of the kept runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budgets {
    /// Most tokens the head may hold (else it is summarised too).
    pub head: u64,
    /// Tokens of recent entries to keep verbatim.
    pub tail: u64,
    /// How far the tail may grow past `tail` to start at a user message
    /// (keep the last exchange whole) rather than at an assistant message.
    pub tail_max: u64,
}

/// A decided compaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Entries `[0, head_end)` are kept.
    pub head_end: usize,
    /// Entries `[tail_start, len)` are kept; `[head_end, tail_start)` are
    /// summarised.
    pub tail_start: usize,
    /// How the summary will sit: before the tail's first entry when that is
    /// a user message (merged into it, so roles keep alternating), else as
    /// an entry of its own.
    pub placement: SummaryPlacement,
    /// Estimated tokens of the head.
    pub head_tokens: u64,
    /// Estimated tokens of the tail.
    pub tail_tokens: u64,
}

impl Plan {
    /// How many entries the summary replaces.
    pub fn replaced(&self) -> usize {
        self.tail_start - self.head_end
    }
}

/// Why there is no plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoPlan {
    /// Fewer entries than a compaction needs (nothing between head and tail,
    /// or only an earlier summary).
    TooShort,
}

/// A cut position `i` (between `i - 1` and `i`) is valid when entry `i` is
/// not a tool result: the results of a call directly follow it, so such a
/// cut never separates them.
fn cut_ok(view: &[LedgerEntry], i: usize) -> bool {
    view.get(i)
        .is_none_or(|e| !matches!(e.message, Message::Tool { .. }))
}

/// Plans a compaction of `view` under `budgets`.
pub fn plan(view: &[LedgerEntry], budgets: Budgets) -> Result<Plan, NoPlan> {
    let n = view.len();
    if n < 2 {
        return Err(NoPlan::TooShort);
    }
    // The latest summary, if any (it sits right after the head).
    let marked = view.iter().rposition(|e| e.meta.compaction.is_some());

    // Head: the first exchange, up to the earlier summary, within budget.
    let head_limit = marked.unwrap_or(n);
    let mut head_end = 0;
    let mut head_tokens = 0u64;
    let mut fits = true;
    for (i, entry) in view.iter().enumerate().take(head_limit) {
        if i > 0 && matches!(entry.message, Message::User { .. }) {
            break;
        }
        head_tokens += entry_tokens(entry);
        head_end = i + 1;
        if head_tokens > budgets.head {
            fits = false;
            break;
        }
    }
    if !fits || !cut_ok(view, head_end) {
        // A first exchange too big to keep (a long task with many tool
        // calls): keep the request and the model's first step, if they fit.
        head_end = 0;
        head_tokens = 0;
        if matches!(view[0].message, Message::User { .. }) {
            let mut end = 2.min(head_limit);
            while end < head_limit && !cut_ok(view, end) {
                end += 1;
            }
            let tokens: u64 = view[..end].iter().map(entry_tokens).sum();
            if end < n && cut_ok(view, end) && tokens <= budgets.head {
                head_end = end;
                head_tokens = tokens;
            }
        }
    }

    // The smallest tail: the last entry's group (a user message, or an
    // assistant message with its tool results).
    let mut last_cut = n - 1;
    while last_cut > 0 && !cut_ok(view, last_cut) {
        last_cut -= 1;
    }
    // Grow it backwards within the budget, remembering the furthest valid
    // cut and the furthest user-message cut.
    let lower = marked.map_or(head_end, |m| m + 1).max(head_end);
    let mut acc: u64 = view[last_cut..].iter().map(entry_tokens).sum();
    let mut best_any = last_cut;
    let mut best_user = matches!(view[last_cut].message, Message::User { .. }).then_some(last_cut);
    let mut tail_tokens_any = acc;
    let mut tail_tokens_user = best_user.map(|_| acc);
    let mut i = last_cut;
    while i > lower {
        i -= 1;
        acc += entry_tokens(&view[i]);
        if acc > budgets.tail {
            break;
        }
        if cut_ok(view, i) {
            best_any = i;
            tail_tokens_any = acc;
            if matches!(view[i].message, Message::User { .. }) {
                best_user = Some(i);
                tail_tokens_user = Some(acc);
            }
        }
    }
    // No user message within the budget: the last one, if the tail may
    // grow that far, so the last exchange is kept whole.
    if best_user.is_none() {
        let mut acc = tail_tokens_any;
        let mut i = best_any;
        while i > lower {
            i -= 1;
            acc += entry_tokens(&view[i]);
            if acc > budgets.tail_max {
                break;
            }
            if matches!(view[i].message, Message::User { .. }) {
                best_user = Some(i);
                tail_tokens_user = Some(acc);
                break;
            }
        }
    }
    let (mut tail_start, mut tail_tokens) = match (best_user, tail_tokens_user) {
        (Some(u), Some(t)) => (u, t),
        _ => (best_any, tail_tokens_any),
    };
    // The request being answered may be several user messages in a row:
    // an album arrives as one message per photo, the caption on the first.
    // A cut among them would summarise part of what the user asks now, so
    // the tail takes all of them. (Only parts with attachments: a plain
    // message left unanswered by a failed turn is history, not this request.)
    if let Some(last_user) = view
        .iter()
        .rposition(|e| matches!(e.message, Message::User { .. }))
    {
        let part = |e: &LedgerEntry| matches!(&e.message, Message::User { attachments, .. } if !attachments.is_empty());
        let mut turn_start = last_user;
        if part(&view[last_user]) {
            while turn_start > 0 && part(&view[turn_start - 1]) {
                turn_start -= 1;
            }
        }
        // Nor is the request summarised when the tail would start after it
        // (a long turn, issue 38): the tail takes the whole turn. A middle
        // inside the turn (the request kept in the head) would put a summary
        // between the turn's steps, where a model reads it as a new
        // request: not done (the loop cuts the turn's older tool results
        // instead).
        if head_end > turn_start {
            return Err(NoPlan::TooShort);
        }
        if turn_start < tail_start {
            tail_tokens += view[turn_start..tail_start]
                .iter()
                .map(entry_tokens)
                .sum::<u64>();
            tail_start = turn_start;
        }
    }
    if tail_start < lower {
        return Err(NoPlan::TooShort);
    }
    let middle = head_end..tail_start;
    let only_old_summary = middle.len() == 1
        && view[middle.start]
            .meta
            .compaction
            .is_some_and(|m| m.placement == SummaryPlacement::Standalone);
    if middle.is_empty() || only_old_summary {
        return Err(NoPlan::TooShort);
    }
    // Before the current request, the summary opens its message and the
    // request follows whole, after the separator (roles keep alternating).
    let placement = if matches!(view[tail_start].message, Message::User { .. }) {
        SummaryPlacement::BeforeNext
    } else {
        SummaryPlacement::Standalone
    };
    Ok(Plan {
        head_end,
        tail_start,
        placement,
        head_tokens,
        tail_tokens,
    })
}
