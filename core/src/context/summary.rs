//! What the summary call asks, and how its answer is framed in the ledger.
//!
//! The summariser sees its own system prompt ([`SUMMARIZER_PROMPT`], never
//! the session's: that one stays byte-identical on every call of the
//! conversation) and one user message: the instructions, an optional focus
//! (`/compress FOCUS`), and the replaced messages rendered as plain text.
//! Each rendered message is cut to a share of the input budget (tool results
//! to half of it), and when the whole still does not fit, the oldest
//! messages are left out with a visible note, never an earlier summary.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write as _;
use core::ops::Range;

use crate::message::{LedgerEntry, Message};

use super::estimate::{prefix_within, text_tokens};

/// The summariser's system prompt.
pub const SUMMARIZER_PROMPT: &str = "You condense part of a conversation between a user and an AI \
assistant that works with tools. Your summary replaces those messages in the assistant's context, \
so it must keep everything the assistant needs to carry on: the user's goals and requests (quote \
short ones exactly), facts, names, numbers, file paths, commands, decisions, results of tool \
calls, and what is still open. Drop chit-chat and repetition. Write plain, dense text. Do not \
address the user, do not answer anything, do not invent anything.";

/// The first line of every summary in the ledger; recognisable for people
/// reading a transcript and for the model.
pub const SUMMARY_HEADER: &str = "[Context summary]";

/// The line that ends a summary block.
pub const SUMMARY_FOOTER: &str = "[End of context summary]";

/// Smallest share of the input budget one message may take when rendered.
const MIN_ENTRY_TOKENS: u64 = 200;

/// Cap on one tool call's rendered arguments.
const MAX_ARGUMENT_TOKENS: u64 = 200;

/// The user message of the summary request for `view[middle]`: at most
/// `input_budget` estimated tokens of conversation, asking for at most
/// `target_tokens` of summary, steered toward `focus` if given.
pub fn request_text(
    view: &[LedgerEntry],
    middle: Range<usize>,
    input_budget: u64,
    target_tokens: u64,
    focus: Option<&str>,
) -> String {
    let entries = &view[middle];
    let per_entry = (input_budget / 6).max(MIN_ENTRY_TOKENS);
    let rendered: Vec<String> = entries.iter().map(|e| render(e, per_entry)).collect();
    // Keep an earlier summary (first in the middle) whole, then the newest
    // messages that fit.
    let keep_first = entries.first().is_some_and(|e| e.meta.compaction.is_some());
    let mut used: u64 = 0;
    let mut kept = alloc::vec![false; rendered.len()];
    if keep_first {
        used += text_tokens(&rendered[0]);
        kept[0] = true;
    }
    for i in (usize::from(keep_first)..rendered.len()).rev() {
        let t = text_tokens(&rendered[i]);
        if used + t > input_budget && used > 0 {
            break;
        }
        used += t;
        kept[i] = true;
    }
    let left_out = kept.iter().filter(|k| !**k).count();

    let words = target_tokens * 3 / 4;
    let mut out = String::with_capacity(usize::try_from(used * 4).unwrap_or(0) + 1024);
    let _ = write!(
        out,
        "Summarise the conversation excerpt below in at most {target_tokens} tokens (about {words} words)."
    );
    if let Some(focus) = focus.map(str::trim).filter(|f| !f.is_empty()) {
        let _ = write!(
            out,
            "\nThe user asked to focus on: {focus}. Keep every detail about it; be brief about the rest."
        );
    }
    out.push_str(
        "\nUse these headings, leaving out any that would be empty:\n\
         Goal: what the user wants.\n\
         Facts and decisions: names, numbers, paths, settings, answers already given.\n\
         Work done: tools used and what they showed or changed.\n\
         Open items: requests not yet answered, tasks not yet done.\n\
         If the excerpt starts with an earlier context summary, merge it in and keep what still matters.\n\n\
         <conversation>\n",
    );
    let mut noted = false;
    for (piece, keep) in rendered.iter().zip(&kept) {
        if *keep {
            out.push_str(piece);
            out.push('\n');
        } else if !noted {
            let _ = writeln!(
                out,
                "[… {left_out} older message{} left out to fit …]",
                if left_out == 1 { "" } else { "s" }
            );
            noted = true;
        }
    }
    out.push_str("</conversation>");
    out
}

/// One entry as the summariser reads it.
fn render(entry: &LedgerEntry, budget: u64) -> String {
    let mut out = String::new();
    match &entry.message {
        Message::User {
            content,
            attachments,
        } => {
            out.push_str(if entry.meta.compaction.is_some() {
                "[earlier summary and user] "
            } else {
                "[user] "
            });
            push_cut(&mut out, content, budget);
            // The summariser reads text only: images are named (and
            // described, when a vision model described them).
            for attachment in attachments {
                out.push(' ');
                push_cut(&mut out, &attachment.reference(), MAX_ARGUMENT_TOKENS);
            }
        }
        Message::Assistant {
            content,
            tool_calls,
        } => {
            out.push_str("[assistant] ");
            if let Some(text) = content.as_deref().filter(|t| !t.is_empty()) {
                push_cut(&mut out, text, budget);
            }
            for call in tool_calls {
                let _ = write!(out, "\n[assistant calls {}(", call.function.name);
                push_cut(&mut out, &call.function.arguments, MAX_ARGUMENT_TOKENS);
                out.push_str(")]");
            }
        }
        Message::Tool { content, .. } => {
            out.push_str("[tool result] ");
            push_cut(&mut out, content, (budget / 2).max(MIN_ENTRY_TOKENS / 2));
        }
    }
    out
}

/// Appends `text`, cut to `budget` estimated tokens with a note.
fn push_cut(out: &mut String, text: &str, budget: u64) {
    let cut = prefix_within(text, budget);
    out.push_str(&text[..cut]);
    if cut < text.len() {
        let _ = write!(out, " […{} more bytes]", text.len() - cut);
    }
}

/// The summary as it stands in the ledger: framed, so neither a reader of
/// the transcript nor the model takes it for something the user wrote.
pub fn block(summary: &str, replaced: usize) -> String {
    format!(
        "{SUMMARY_HEADER} {replaced} earlier message{} of this conversation were replaced by this \
         summary to fit the model's context window; the originals are kept in the session history. \
         It is background, not a new request: answer the latest user message.\n\n{}\n{SUMMARY_FOOTER}",
        if replaced == 1 { "" } else { "s" },
        summary.trim()
    )
}

/// The text of a user message with a summary placed before it.
pub fn merged(block: &str, original: &str) -> String {
    format!("{block}\n\n{original}")
}

/// The text the user wrote, for an entry of a compacted ledger: a user
/// message with a summary placed before it gives back only what follows
/// the summary (what `/retry` must send again); any other entry its
/// content.
pub fn original_text(entry: &LedgerEntry) -> Option<&str> {
    let content = entry.message.content()?;
    let merged = entry
        .meta
        .compaction
        .is_some_and(|m| m.placement == crate::message::SummaryPlacement::BeforeNext);
    if !merged {
        return Some(content);
    }
    Some(
        content
            .split_once(&format!("{SUMMARY_FOOTER}\n\n"))
            .map_or(content, |(_, original)| original),
    )
}

/// Cuts an over-long summary to `max_tokens`, on a char boundary, with a note.
pub fn clip(summary: &str, max_tokens: u64) -> String {
    let cut = prefix_within(summary, max_tokens);
    if cut == summary.len() {
        return String::from(summary);
    }
    format!("{} […summary cut at {max_tokens} tokens]", &summary[..cut])
}
