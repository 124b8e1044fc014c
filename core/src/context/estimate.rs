//! Counting what a request sends, without a tokenizer.
//!
//! # The estimate
//! The provider's own count is the truth: every completion reports the
//! `prompt_tokens` of the request that produced it, and the ledger keeps it
//! on the assistant entry ([`EntryMeta::usage`]). So the size of the next
//! request is the last such count plus an estimate of what was added since
//! (the answer itself, tool results, the next user message). Only when no
//! trustworthy count exists (a fresh or just-compacted ledger, a provider
//! that reports no usage) is the whole request estimated: system prompt,
//! tool schemas and every message.
//!
//! The estimator for text ([`text_tokens`]) is deliberately cheap and errs
//! high: one token per 3.5 ASCII bytes (English prose runs at about 4, code
//! and JSON at about 3.3) plus one token per non-ASCII character (CJK text
//! is about one token per character; accented Latin and Vietnamese letters
//! split into one or two). Each message adds [`MESSAGE_OVERHEAD_TOKENS`] for
//! its role and delimiters, each tool call [`TOOL_CALL_OVERHEAD_TOKENS`].
//! One pass over the bytes, no allocation.
//!
//! # Which counts are trustworthy
//! A count measured before a compaction describes the longer ledger, so the
//! entries a compaction kept verbatim after its summary (the mark's
//! `kept_after`) are skipped when looking for the last count: see
//! [`fresh_from`].
//!
//! [`EntryMeta::usage`]: crate::EntryMeta::usage

use crate::message::{LedgerEntry, Message, SummaryPlacement};
use crate::tool::ToolSpec;

/// Tokens a chat template spends on one message besides its text (role,
/// start and end markers).
pub const MESSAGE_OVERHEAD_TOKENS: u64 = 4;

/// Tokens spent on one tool call besides its name and arguments (id, type,
/// JSON punctuation).
pub const TOOL_CALL_OVERHEAD_TOKENS: u64 = 8;

/// What one image attachment is counted as (SPEC X6): about what a large
/// picture costs a vision model (OpenAI bills a 1024×1024 image at 765
/// tokens in high detail), rounded up. An image sent as its text reference
/// costs far less; over-counting only compacts a little early, while
/// under-counting would let a request with pictures overflow.
pub const IMAGE_TOKENS: u64 = 1000;

/// Estimated tokens of `text` (see the module docs).
pub fn text_tokens(text: &str) -> u64 {
    let (ascii, other_chars) = count_bytes(text.as_bytes());
    // ceil(ascii / 3.5) in integers.
    (ascii * 2).div_ceil(7) + other_chars
}

/// A one in every byte of a word (the word-wide counts and tests below).
const ONES: u64 = 0x0101_0101_0101_0101;
/// The top bit of every byte of a word.
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The top bit of every byte of two words.
const HIGH_PAIR: u128 = (HIGH as u128) << 64 | HIGH as u128;

/// ASCII bytes and non-ASCII characters (UTF-8 lead bytes) of `bytes`,
/// sixteen bytes at a step (the size-optimised build does not vectorise
/// the loop, and the system prompt and tool definitions are measured at
/// every start: twice, with a small window). A step that is all ASCII, as
/// most of a prompt is, only adds 16.
fn count_bytes(bytes: &[u8]) -> (u64, u64) {
    let mut ascii = 0u64;
    let mut leads = 0u64;
    let mut add = |(a, l): (u64, u64)| {
        ascii += a;
        leads += l;
    };
    let mut rest = bytes;
    while let Some((pair, tail)) = rest.split_first_chunk::<16>() {
        let w = u128::from_le_bytes(*pair);
        if w & HIGH_PAIR == 0 {
            add((16, 0));
        } else {
            // The two halves (truncation meant).
            add(count_word(w as u64));
            add(count_word((w >> 64) as u64));
        }
        rest = tail;
    }
    if let Some((chunk, tail)) = rest.split_first_chunk::<8>() {
        add(count_word(u64::from_le_bytes(*chunk)));
        rest = tail;
    }
    for &b in rest {
        add((u64::from(b < 0x80), u64::from(b >= 0xC0)));
    }
    (ascii, leads)
}

/// ASCII bytes and UTF-8 lead bytes of one word.
fn count_word(w: u64) -> (u64, u64) {
    // The number of bytes of `w` whose top bit is set.
    let tops = |w: u64| ((w & HIGH) >> 7).wrapping_mul(ONES) >> 56;
    // A lead byte is 0b11xx_xxxx: its bit 6, shifted up, meets bit 7.
    (8 - tops(w), tops(w & (w << 1)))
}

/// The byte length of the longest prefix of `text`, ending on a char
/// boundary, whose estimate is at most `tokens`.
pub fn prefix_within(text: &str, tokens: u64) -> usize {
    if text_tokens(text) <= tokens {
        return text.len();
    }
    let mut ascii = 0u64;
    let mut other = 0u64;
    for (i, ch) in text.char_indices() {
        if ch.is_ascii() {
            ascii += 1;
        } else {
            other += 1;
        }
        if (ascii * 2).div_ceil(7) + other > tokens {
            return i;
        }
    }
    text.len()
}

/// The byte offset where the longest suffix of `text` whose estimate is at
/// most `tokens` begins (a char boundary).
pub fn suffix_within(text: &str, tokens: u64) -> usize {
    let mut ascii = 0u64;
    let mut other = 0u64;
    for (i, ch) in text.char_indices().rev() {
        if ch.is_ascii() {
            ascii += 1;
        } else {
            other += 1;
        }
        if (ascii * 2).div_ceil(7) + other > tokens {
            return i + ch.len_utf8();
        }
    }
    0
}

/// Estimated tokens of one message on the wire.
pub fn message_tokens(message: &Message) -> u64 {
    let body = match message {
        Message::User {
            content,
            attachments,
        } => {
            let mut n = text_tokens(content);
            for attachment in attachments {
                n += IMAGE_TOKENS + attachment.description.as_deref().map_or(0, text_tokens);
            }
            n
        }
        Message::Tool {
            tool_call_id,
            content,
        } => text_tokens(tool_call_id) + text_tokens(content),
        Message::Assistant {
            content,
            tool_calls,
        } => {
            let mut n = content.as_deref().map_or(0, text_tokens);
            for call in tool_calls {
                n += TOOL_CALL_OVERHEAD_TOKENS
                    + text_tokens(&call.id)
                    + text_tokens(&call.function.name)
                    + text_tokens(&call.function.arguments);
            }
            n
        }
    };
    MESSAGE_OVERHEAD_TOKENS + body
}

/// Estimated tokens of one ledger entry (its wire message only).
pub fn entry_tokens(entry: &LedgerEntry) -> u64 {
    message_tokens(&entry.message)
}

/// Estimated tokens of the parts of every request that do not change within
/// a session: the system prompt and the tool definitions. Computed once per
/// agent, and by the CLI while it fits the tools to a small window. A
/// definition's schema is counted as its compact text, which is what the
/// request carries.
pub fn fixed_tokens(system_prompt: &str, tools: &[ToolSpec]) -> u64 {
    let mut n = if system_prompt.is_empty() {
        0
    } else {
        MESSAGE_OVERHEAD_TOKENS + text_tokens(system_prompt)
    };
    for spec in tools {
        n += TOOL_CALL_OVERHEAD_TOKENS
            + text_tokens(&spec.name)
            + text_tokens(&spec.description)
            + text_tokens(spec.parameters.as_str());
    }
    n
}

/// The index of the first entry whose recorded usage describes the ledger
/// as it is now: just after the verbatim tail of the last compaction, or 0.
pub fn fresh_from(view: &[LedgerEntry]) -> usize {
    // The mark sits right after the head, near the front; a ledger without
    // one is scanned once.
    let Some((at, mark)) = view
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, e)| e.meta.compaction.map(|m| (i, m)))
    else {
        return 0;
    };
    let first_tail = match mark.placement {
        SummaryPlacement::Standalone => at + 1,
        SummaryPlacement::BeforeNext => at,
    };
    first_tail
        .saturating_add(mark.kept_after as usize)
        .min(view.len())
}

/// An estimate of a request's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestEstimate {
    /// Estimated prompt tokens of the whole request.
    pub tokens: u64,
    /// Whether it builds on a count the provider reported (otherwise every
    /// part was estimated).
    pub anchored: bool,
}

/// The estimated size of a request made of the `fixed` parts (see
/// [`fixed_tokens`]) and `view`, using the last provider count at or after
/// `fresh` (see [`fresh_from`]) when there is one.
///
/// Cost: proportional to the entries after the last count (usually a few),
/// or to the whole ledger when there is none.
pub fn request_tokens(fixed: u64, view: &[LedgerEntry], fresh: usize) -> RequestEstimate {
    let fresh = fresh.min(view.len());
    let anchor = view[fresh..]
        .iter()
        .rposition(|e| {
            matches!(e.message, Message::Assistant { .. })
                && e.meta.usage.is_some_and(|u| u.prompt_tokens > 0)
        })
        .map(|i| i + fresh);
    match anchor {
        Some(i) => {
            // `prompt_tokens` counted everything before entry `i`; the
            // entry itself is estimated (its completion count would include
            // reasoning tokens that are not sent back).
            let counted = view[i].meta.usage.map_or(0, |u| u.prompt_tokens);
            let added: u64 = view[i..].iter().map(entry_tokens).sum();
            RequestEstimate {
                tokens: counted + added,
                anchored: true,
            }
        }
        None => RequestEstimate {
            tokens: fixed + view.iter().map(entry_tokens).sum::<u64>(),
            anchored: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Word at a time, the counts are a byte-by-byte count's.
        #[test]
        fn bytes_are_counted_as_one_by_one(bytes in proptest::prop_oneof![
            proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80),
            // Mostly ASCII, as prompts are: whole steps of it, and steps
            // with one byte that is not.
            proptest::collection::vec(
                proptest::prop_oneof![20 => 0u8..0x80, 1 => proptest::prelude::any::<u8>()],
                0..200,
            ),
        ]) {
            let ascii = bytes.iter().filter(|&&b| b < 0x80).count() as u64;
            let leads = bytes.iter().filter(|&&b| b >= 0xc0).count() as u64;
            proptest::prop_assert_eq!(count_bytes(&bytes), (ascii, leads));
        }
    }

    #[test]
    fn text_estimates_err_high_and_count_non_ascii_per_char() {
        assert_eq!(text_tokens(""), 0);
        assert_eq!(text_tokens("abcdefg"), 2);
        assert_eq!(text_tokens("日本語"), 3);
        // 4 ASCII bytes (2 tokens) and 2 accented letters.
        assert_eq!(text_tokens("Hà Nội"), 4);
        // English prose: the real count (cl100k) of this sentence is 10.
        let prose = "The quick brown fox jumps over the lazy dog again.";
        assert!(
            (10..=16).contains(&text_tokens(prose)),
            "{}",
            text_tokens(prose)
        );
    }

    #[test]
    fn prefix_within_respects_the_budget_and_char_boundaries() {
        let s = "ab日本語cdefghij";
        for budget in 0..12 {
            let cut = prefix_within(s, budget);
            assert!(s.is_char_boundary(cut));
            assert!(text_tokens(&s[..cut]) <= budget, "{budget}");
            if cut < s.len() {
                let next = s[cut..].chars().next().map_or(0, char::len_utf8);
                assert!(
                    text_tokens(&s[..cut + next]) > budget,
                    "{budget}: not maximal"
                );
            }
        }
    }
}
