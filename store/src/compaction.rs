//! Compacted views of transcripts (SPEC X1): originals kept, the view
//! recorded beside them — the part every backend shares.
//!
//! A compaction never deletes or edits a message. It adds a row to
//! `compactions` (SQLite schema V4, PostgreSQL V1) saying which messages the
//! model is given from then on — the head `seq < head_end`, the summary,
//! then every message with `seq >= tail_start` — so `sessions search` and
//! exports still see every original, and [`super::Store::load_view`] gives
//! the compacted view that later turns start from. The row is computed from
//! the view the core compacted (entry counts, [`Compaction`]) and the
//! session's latest row, and is refused when the two disagree (the caller's
//! ledger was not the stored view), so a stale ledger can never corrupt the
//! mapping.

use hermes_core::context::{Compaction, summary};
use hermes_core::{CompactionMark, EntryMeta, LedgerEntry, Message, SummaryPlacement};

use super::{StoreError, StoredCompaction, from_i64};

/// The stored spelling of a placement.
pub(super) fn placement_str(p: SummaryPlacement) -> &'static str {
    match p {
        SummaryPlacement::Standalone => "standalone",
        SummaryPlacement::BeforeNext => "before_next",
    }
}

/// A `compactions` row as read: head_end, tail_start, end_seq, placement,
/// replaced, summary, tokens_before, tokens_after, created_at_ms.
pub(super) type RawRow = (i64, i64, i64, String, i64, String, i64, i64, i64);

/// Validates a row read from the database.
pub(super) fn into_stored(row: RawRow, id: &str) -> Result<StoredCompaction, StoreError> {
    let (head, tail, end, placement, replaced, summary, before, after, at) = row;
    let placement = match placement.as_str() {
        "standalone" => SummaryPlacement::Standalone,
        "before_next" => SummaryPlacement::BeforeNext,
        other => {
            return Err(StoreError::Corrupt {
                session_id: id.to_owned(),
                what: format!("compaction with unknown placement {other:?}"),
            });
        }
    };
    Ok(StoredCompaction {
        head_end: from_i64(id, "head_end", head)?,
        tail_start: from_i64(id, "tail_start", tail)?,
        end_seq: from_i64(id, "end_seq", end)?,
        placement,
        replaced: from_i64(id, "replaced", replaced)?,
        summary,
        tokens_before: from_i64(id, "tokens_before", before)?,
        tokens_after: from_i64(id, "tokens_after", after)?,
        created_at_ms: from_i64(id, "created_at_ms", at)?,
    })
}

/// The sequence number of entry `index` of the current view, or `None` for
/// a standalone summary entry. Sequence numbers are contiguous from 0 (rows
/// are only ever appended at `MAX(seq) + 1` and deleted from the end).
fn seq_of(current: Option<&StoredCompaction>, index: u64) -> Option<u64> {
    let Some(c) = current else {
        return Some(index);
    };
    if index < c.head_end {
        return Some(index);
    }
    match c.placement {
        SummaryPlacement::Standalone if index == c.head_end => None,
        SummaryPlacement::Standalone => Some(c.tail_start + (index - c.head_end - 1)),
        SummaryPlacement::BeforeNext => Some(c.tail_start + (index - c.head_end)),
    }
}

/// What the stored view of a session consists of, as counted inside the
/// recording transaction: messages before the current head end, messages
/// from the current tail start on, and one past the last sequence number.
#[derive(Clone, Copy, Debug)]
pub(super) struct ViewCounts {
    pub kept_front: i64,
    pub kept_back: i64,
    pub end_seq: i64,
}

/// The row a compaction of the stored view adds, or [`StoreError::StaleView`]
/// when the compaction describes another view.
pub(super) fn new_record(
    id: &str,
    current: Option<&StoredCompaction>,
    counts: ViewCounts,
    compaction: &Compaction,
) -> Result<StoredCompaction, StoreError> {
    let stored_len = match current {
        None => from_i64(id, "count", counts.kept_back)?,
        Some(c) => {
            from_i64(id, "count", counts.kept_front)?
                + from_i64(id, "count", counts.kept_back)?
                + u64::from(c.placement == SummaryPlacement::Standalone)
        }
    };
    let described = (compaction.head + compaction.replaced + compaction.tail) as u64;
    let stale = || StoreError::StaleView {
        session_id: id.to_owned(),
        stored: stored_len,
        described,
    };
    if described != stored_len {
        return Err(stale());
    }
    let head = compaction.head as u64;
    let first_tail = head + compaction.replaced as u64;
    let (Some(tail_start), true) = (
        seq_of(current, first_tail),
        current.is_none_or(|c| head <= c.head_end),
    ) else {
        return Err(stale());
    };
    Ok(StoredCompaction {
        head_end: head,
        tail_start,
        end_seq: from_i64(id, "end_seq", counts.end_seq)?,
        placement: compaction.placement,
        replaced: compaction.replaced as u64,
        summary: compaction.summary.clone(),
        tokens_before: compaction.tokens_before,
        tokens_after: compaction.tokens_after,
        // The timestamp the in-memory summary entry carries, so a load
        // gives back exactly the view the core made.
        created_at_ms: compaction.at_ms,
    })
}

/// Builds the view from the kept messages (in `seq` order, `out`) and the
/// latest compaction `c`; `summary_at` is the index in `out` of the first
/// message with `seq >= tail_start` (`None`: none kept after the summary).
pub(super) fn assemble_view(
    mut out: Vec<LedgerEntry>,
    summary_at: Option<usize>,
    c: &StoredCompaction,
) -> Vec<LedgerEntry> {
    let at = summary_at.unwrap_or(out.len());
    let mark = CompactionMark {
        placement: c.placement,
        replaced: u32::try_from(c.replaced).unwrap_or(u32::MAX),
        kept_after: u32::try_from(c.end_seq - c.tail_start).unwrap_or(u32::MAX),
    };
    let merged = c.placement == SummaryPlacement::BeforeNext
        && matches!(out.get(at).map(|e| &e.message), Some(Message::User { .. }));
    if merged {
        let entry = &mut out[at];
        if let Message::User { content, .. } = &mut entry.message {
            *content = summary::merged(&c.summary, content);
        }
        entry.meta.compaction = Some(mark);
    } else {
        // A standalone summary (or, should the first kept message have
        // changed by hand, one of its own rather than a merge into the
        // wrong message).
        out.insert(
            at,
            LedgerEntry {
                message: Message::user(c.summary.clone()),
                meta: EntryMeta {
                    timestamp_ms: c.created_at_ms,
                    compaction: Some(CompactionMark {
                        placement: SummaryPlacement::Standalone,
                        ..mark
                    }),
                    ..EntryMeta::default()
                },
            },
        );
    }
    out
}
