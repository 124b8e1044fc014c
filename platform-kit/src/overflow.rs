//! Replies too long for a chat: at most the gateway's `max_reply_messages`
//! platform messages per reply.
//!
//! A model can answer with a megabyte (a file dump, a runaway list); split
//! at 4096 characters that is 257 Telegram messages, a flood no user wants
//! and a rate-limit hazard. So a reply that would need more than `N`
//! messages is sent as its beginning in at most `N - 1` messages, the last
//! of them ending with a note, and **the rest as a file** (`reply.md`) — `N`
//! platform messages in all. Where the platform takes no files the beginning
//! takes all `N` messages and the note says the reply was cut and how much
//! was left out (and if sending the file fails, that notice follows it).
//! Nothing is lost either way: the whole reply is in the transcript.
//!
//! The cut falls at a line break when one is near (else a space, else any
//! character), and a code block open at the cut is closed in the messages
//! and reopened at the top of the file, so both render.
//!

use crate::split::{LengthUnit, fence_state_after, split_message};
use hermes_runtime::text::floor_char_boundary;

/// The name of the file holding the rest of a long reply.
pub const REPLY_FILE_NAME: &str = "reply.md";

/// The caption of that file, where the platform shows one.
pub const REPLY_FILE_CAPTION: &str = "The rest of the reply above.";

/// How one reply goes out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// It fits: send it as it is (the adapter splits it).
    Whole,
    /// Too long: `head` in messages, then `rest` as a file.
    Overflow {
        /// The beginning, fitting in `max_messages - 1` messages.
        head: String,
        /// Everything after it (a code block open at the cut reopened).
        rest: String,
    },
}

/// Decides how `text` goes out on a platform whose messages hold `limit`
/// `unit`s, at most `max_messages` messages per reply. When it does not fit,
/// the head is chosen so that it, followed by a blank line and `note` (at
/// most as long as `note`: the caller's final note), takes at most
/// `head_messages` messages.
pub fn plan(
    text: &str,
    limit: usize,
    unit: LengthUnit,
    max_messages: usize,
    head_messages: usize,
    note: &str,
) -> Delivery {
    if pieces(text, limit, unit) <= max_messages.max(1) {
        return Delivery::Whole;
    }
    let budget = head_messages.max(1);
    let fits = |cut: usize| {
        let head = with_note(&head_at(text, cut), note);
        pieces(&head, limit, unit) <= budget
    };
    // The longest prefix (at a char boundary) whose head fits. Splitting is
    // monotone enough for a binary search; the result is checked anyway.
    let (mut lo, mut hi) = (0usize, text.len());
    while lo < hi {
        let mid = floor_char_boundary(text, lo + (hi - lo).div_ceil(2));
        if mid <= lo {
            break;
        }
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let mut cut = floor_char_boundary(text, lo);
    while cut > 0 && !fits(cut) {
        cut = floor_char_boundary(text, cut - 1);
    }
    // Prefer ending at a line break (else a space) within the last message's
    // worth of text, so the file starts on a fresh line.
    let window_start = text[..cut]
        .char_indices()
        .rev()
        .nth(limit.max(1))
        .map_or(0, |(i, _)| i);
    let nicer = match text[window_start..cut].rfind('\n') {
        Some(nl) => Some(window_start + nl + 1),
        None => text[window_start..cut]
            .rfind(' ')
            .map(|sp| window_start + sp + 1),
    };
    // (Moving the cut can open or close a code block; keep it only if the
    // head, closer included, still fits.)
    if let Some(nicer) = nicer.filter(|&c| c > 0 && fits(c)) {
        cut = nicer;
    }
    let fence = fence_state_after(None, &text[..cut]);
    let rest = match &fence {
        Some(opener) => format!("{opener}\n{}", &text[cut..]),
        None => text[cut..].to_owned(),
    };
    Delivery::Overflow {
        head: head_at(text, cut),
        rest,
    }
}

/// The note ending the head when the rest goes as a file.
pub fn file_note(max_messages: usize) -> String {
    format!(
        "📎 This reply is longer than {max_messages} messages; the rest is in the attached file {REPLY_FILE_NAME}."
    )
}

/// The note ending the head when the rest cannot be sent.
pub fn cut_notice(max_messages: usize, rest_chars: usize) -> String {
    format!(
        "✂️ This reply was too long for {max_messages} messages; the remaining {rest_chars} characters were not sent."
    )
}

/// `head`, a blank line, `note`.
pub fn with_note(head: &str, note: &str) -> String {
    let sep = if head.ends_with("\n\n") {
        ""
    } else if head.ends_with('\n') {
        "\n"
    } else {
        "\n\n"
    };
    format!("{head}{sep}{note}")
}

/// `text[..cut]`, with a code block still open at the cut closed.
fn head_at(text: &str, cut: usize) -> String {
    let head = &text[..cut];
    if fence_state_after(None, head).is_some() {
        let sep = if head.ends_with('\n') { "" } else { "\n" };
        format!("{head}{sep}```")
    } else {
        head.to_owned()
    }
}

/// How many messages `text` takes; blank pieces are not sent, so not counted.
fn pieces(text: &str, limit: usize, unit: LengthUnit) -> usize {
    if text.trim().is_empty() {
        return 0;
    }
    split_message(text, limit, unit)
        .iter()
        .filter(|p| !p.trim().is_empty())
        .count()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const NOTE: &str =
        "📎 This reply is longer than 10 messages; the rest is in the attached file reply.md.";

    fn paragraphs(n: usize) -> String {
        (0..n)
            .map(|i| format!("Paragraph {i}: {}\n\n", "lorem ipsum dolor ".repeat(8)))
            .collect()
    }

    #[test]
    fn a_reply_that_fits_goes_whole() {
        let text = paragraphs(5);
        assert_eq!(
            plan(&text, 4096, LengthUnit::Utf16, 10, 9, NOTE),
            Delivery::Whole
        );
        // Exactly the limit still fits.
        let pieces_needed = split_message(&text, 200, LengthUnit::Chars).len();
        assert_eq!(
            plan(&text, 200, LengthUnit::Chars, pieces_needed, 1, NOTE),
            Delivery::Whole
        );
    }

    #[test]
    fn a_reply_longer_than_the_limit_is_head_plus_rest_and_nothing_is_lost() {
        // 1 MB: 257 Telegram messages before this change.
        let text = "x".repeat(60) + "\n" + &"All work and no play. ".repeat(48_000);
        for (limit, unit) in [(4096, LengthUnit::Utf16), (4000, LengthUnit::Chars)] {
            let Delivery::Overflow { head, rest } = plan(&text, limit, unit, 10, 9, NOTE) else {
                panic!("must overflow");
            };
            let sent = with_note(&head, NOTE);
            assert!(pieces(&sent, limit, unit) <= 9);
            assert!(
                pieces(&sent, limit, unit) >= 8,
                "the head uses the room it has"
            );
            assert_eq!(format!("{head}{rest}"), text, "head + rest is the reply");
        }
    }

    #[test]
    fn the_cut_prefers_a_line_break() {
        let text = paragraphs(200);
        let Delivery::Overflow { head, rest } = plan(&text, 500, LengthUnit::Chars, 3, 2, NOTE)
        else {
            panic!("must overflow");
        };
        assert!(head.ends_with('\n'), "{:?}", &head[head.len() - 20..]);
        assert!(
            rest.starts_with("Paragraph") || rest.starts_with('\n'),
            "{:?}",
            &rest[..20]
        );
        assert_eq!(format!("{head}{rest}"), text);
    }

    #[test]
    fn a_code_block_open_at_the_cut_is_closed_and_reopened() {
        let code: String = (0..2000).map(|i| format!("let x{i} = {i};\n")).collect();
        let text = format!("Here:\n```rust\n{code}```\nDone.\n");
        let Delivery::Overflow { head, rest } = plan(&text, 1000, LengthUnit::Chars, 4, 3, NOTE)
        else {
            panic!("must overflow");
        };
        assert!(head.ends_with("```"), "{:?}", &head[head.len() - 30..]);
        assert!(rest.starts_with("```rust\n"), "{:?}", &rest[..30]);
        assert!(pieces(&with_note(&head, NOTE), 1000, LengthUnit::Chars) <= 3);
        assert!(rest.ends_with("```\nDone.\n"));
    }

    #[test]
    fn one_enormous_line_without_spaces_is_still_cut() {
        let text = "é".repeat(50_000);
        let Delivery::Overflow { head, rest } = plan(&text, 4096, LengthUnit::Utf16, 2, 1, NOTE)
        else {
            panic!("must overflow");
        };
        assert_eq!(pieces(&with_note(&head, NOTE), 4096, LengthUnit::Utf16), 1);
        assert_eq!(head.chars().count() + rest.chars().count(), 50_000);
    }

    #[test]
    fn notices_say_what_happened() {
        assert!(file_note(10).contains("longer than 10 messages"));
        assert!(cut_notice(10, 3).contains("too long for 10 messages"));
        assert!(cut_notice(10, 3).contains("3 characters"));
        assert_eq!(with_note("a", "n"), "a\n\nn");
        assert_eq!(with_note("a\n", "n"), "a\n\nn");
    }
}
