//! The automatic digest: what takes a summary's place when the summariser
//! fails or answers nothing usable (SPEC X1).
//!
//! A compaction must not depend on the summariser: a small local model
//! answers with an empty string or a tool call, the compression model is
//! down, a rate limit bites. Without a fallback the conversation outgrows
//! the window and every later turn fails. The digest is made here, without
//! a model, from the replaced span: how many messages of each kind, the
//! first words of what the user asked (the continuity anchors), the tools
//! that were called and how many of their calls failed, and the last user
//! request in full (cut to a share of the cap). It is deterministic and
//! bounded: at most [`MAX_DIGEST_BYTES`] whatever the span, and it says
//! plainly that it is an automatic digest, not a summary. The originals are
//! kept in the store as for any compaction.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write as _;
use core::ops::Range;

use crate::message::{LedgerEntry, Message};

use super::summary::original_text;

/// The first line of a digest's text (inside the summary block).
pub const DIGEST_HEADER: &str = "Automatic digest (the summariser was unavailable, so this lists the replaced messages \
     instead of summarising them):";

/// The most bytes a digest takes, whatever the span.
pub const MAX_DIGEST_BYTES: usize = 4096;

/// How many user requests are quoted by their first words.
const MAX_ANCHORS: usize = 12;
/// Bytes of one quoted first line.
const ANCHOR_BYTES: usize = 160;
/// Distinct tools named.
const MAX_TOOLS: usize = 16;
/// Bytes of the last user request.
const LAST_REQUEST_BYTES: usize = 1200;

/// Calls of one tool in the span.
struct ToolTally<'a> {
    name: &'a str,
    calls: usize,
    failed: usize,
}

/// The digest of `view[middle]`, at most `max_bytes` (at least 64, and
/// never more than [`MAX_DIGEST_BYTES`]).
pub fn digest(view: &[LedgerEntry], middle: Range<usize>, max_bytes: usize) -> String {
    let max_bytes = max_bytes.clamp(64, MAX_DIGEST_BYTES);
    let entries = view.get(middle).unwrap_or(&[]);
    let (mut users, mut answers, mut earlier) = (0usize, 0usize, false);
    let mut anchors: Vec<&str> = Vec::new();
    let mut last_request: Option<&str> = None;
    let mut tools: Vec<ToolTally<'_>> = Vec::new();
    // Which tool each call id belongs to, to count failed results.
    let mut call_names: Vec<(&str, &str)> = Vec::new();
    for entry in entries {
        match &entry.message {
            Message::User { .. } => {
                earlier |= entry.meta.compaction.is_some();
                let text = original_text(entry).unwrap_or("").trim();
                users += 1;
                if anchors.len() < MAX_ANCHORS {
                    anchors.push(text);
                }
                if !text.is_empty() {
                    last_request = Some(text);
                }
            }
            Message::Assistant { tool_calls, .. } => {
                answers += 1;
                for call in tool_calls {
                    let name = call.function.name.as_str();
                    call_names.push((call.id.as_str(), name));
                    match tools.iter_mut().find(|t| t.name == name) {
                        Some(t) => t.calls += 1,
                        None => tools.push(ToolTally {
                            name,
                            calls: 1,
                            failed: 0,
                        }),
                    }
                }
            }
            Message::Tool {
                tool_call_id,
                content,
            } => {
                if looks_failed(content)
                    && let Some((_, name)) = call_names.iter().find(|(id, _)| id == tool_call_id)
                    && let Some(t) = tools.iter_mut().find(|t| t.name == *name)
                {
                    t.failed += 1;
                }
            }
        }
    }

    let mut out = String::with_capacity(max_bytes.min(1024));
    out.push_str(DIGEST_HEADER);
    let _ = write!(
        out,
        "\n{} message{}: {users} from the user, {answers} from the assistant, {} tool result{}.",
        entries.len(),
        plural(entries.len()),
        entries.len() - users - answers,
        plural(entries.len() - users - answers),
    );
    if earlier {
        out.push_str(" They began with an earlier context summary, not repeated here.");
    }
    if !anchors.is_empty() {
        out.push_str("\nThe user asked, first words of each request in order:");
        for text in &anchors {
            out.push_str("\n- ");
            push_line(&mut out, first_line(text), ANCHOR_BYTES);
        }
        if users > anchors.len() {
            let _ = write!(out, "\n- … and {} more", users - anchors.len());
        }
    }
    if !tools.is_empty() {
        out.push_str("\nTools called:");
        for (i, t) in tools.iter().take(MAX_TOOLS).enumerate() {
            out.push_str(if i == 0 { " " } else { ", " });
            push_line(&mut out, t.name, 64);
            let _ = write!(out, " ×{}", t.calls);
            if t.failed > 0 {
                let _ = write!(out, " ({} failed)", t.failed);
            }
        }
        if tools.len() > MAX_TOOLS {
            let _ = write!(out, ", and {} other tools", tools.len() - MAX_TOOLS);
        }
        out.push('.');
    }
    if let Some(text) = last_request {
        out.push_str("\nThe last user request in this part: ");
        push_line(&mut out, text, LAST_REQUEST_BYTES);
    }
    out.push_str("\nThe full messages are kept in the session history.");
    cut(out, max_bytes)
}

/// Whether a tool result reads as a failure. The ledger keeps no error
/// flag; the tool layer words every failure `Error: …` (unknown tool, bad
/// arguments, an abort), and skipped calls carry their own marker.
fn looks_failed(content: &str) -> bool {
    let head = content.trim_start();
    head.get(..6)
        .is_some_and(|h| h.eq_ignore_ascii_case("error:"))
        || head.starts_with("[Tool execution skipped")
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn first_line(text: &str) -> &str {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
}

/// Appends `text` on one line, at most `max` bytes (cut on a char boundary,
/// with `…`).
fn push_line(out: &mut String, text: &str, max: usize) {
    let end = floor_boundary(text, max);
    for ch in text[..end].chars() {
        out.push(if ch.is_control() { ' ' } else { ch });
    }
    if end < text.len() {
        out.push('…');
    }
}

/// `text` cut to at most `max` bytes on a char boundary.
fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let end = floor_boundary(&text, max.saturating_sub(3));
        text.truncate(end);
        text.push('…');
    }
    text
}

/// The largest char boundary of `text` at or below `max`.
fn floor_boundary(text: &str, max: usize) -> usize {
    if max >= text.len() {
        return text.len();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    end
}
