//! Full-text search on PostgreSQL, with SQLite's word rules.
//!
//! The SQLite backend's FTS5 index uses the `unicode61` tokenizer with
//! `remove_diacritics 2`: a word is a maximal run of letters and digits,
//! folded to lower case with Latin diacritics removed. PostgreSQL's own
//! parsers cut differently (e-mail addresses, hyphenated words, decimals)
//! and fold by the server's locale (a `C`-locale database folds no accents
//! and splits CJK text into nothing). So the words are cut and folded here,
//! in Rust, and handed to the server ready-made: a `tsvector` literal of
//! `'word':position` entries when a message is stored, a `tsquery` literal
//! when one is searched. The same query then finds the same messages on
//! both backends, on any server.
//!
//! PostgreSQL's limits are respected rather than hit: a word longer than
//! 2046 bytes is not indexed (no query word is that long), positions stop
//! at 16383 (PostgreSQL's maximum, as `to_tsvector` does), a word keeps at
//! most 255 positions, and a message's vector stops growing at 512 KiB of
//! distinct words (the type's limit is 1 MiB).
//!
//! The excerpt ([`snippet`]) is built here too, the way SQLite's
//! `snippet(…, '[', ']', '…', 16)` builds it: the 16-word window with the
//! most matched words, matches in brackets, `…` where text was cut.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::ops::Range;

use unicode_normalization::char::decompose_canonical;

/// Longest word indexed, in bytes (PostgreSQL refuses 2047 and more).
const MAX_WORD_BYTES: usize = 2046;
/// Highest position PostgreSQL stores.
const MAX_POSITION: usize = 16_383;
/// Positions kept per word (PostgreSQL keeps 256 at most).
const MAX_POSITIONS_PER_WORD: usize = 255;
/// Distinct-word bytes per message vector.
const MAX_VECTOR_BYTES: usize = 512 * 1024;
/// Words in an excerpt (as SQLite's snippet call asks).
const SNIPPET_WORDS: usize = 16;

/// Whether `c` belongs to a word.
fn is_word_char(c: char) -> bool {
    c.is_alphanumeric()
}

/// The words of `text` with their byte ranges, in order.
fn words(text: &str) -> impl Iterator<Item = Range<usize>> + '_ {
    let mut chars = text.char_indices().peekable();
    std::iter::from_fn(move || {
        let start = loop {
            let (i, c) = chars.next()?;
            if is_word_char(c) {
                break i;
            }
        };
        let mut end = text.len();
        while let Some(&(i, c)) = chars.peek() {
            if !is_word_char(c) {
                end = i;
                break;
            }
            chars.next();
        }
        Some(start..end)
    })
}

/// A word folded as `unicode61` with `remove_diacritics 2` folds it: lower
/// case, combining diacritical marks (U+0300–U+036F) of the canonical
/// decomposition dropped, so `Nội` is `noi`. Other marks (the Japanese
/// sound marks, say) stay: they are not decoration there.
fn fold(word: &str) -> String {
    let mut out = String::with_capacity(word.len());
    for c in word.chars().flat_map(char::to_lowercase) {
        if c.is_ascii() {
            out.push(c);
            continue;
        }
        decompose_canonical(c, |d| {
            if !('\u{300}'..='\u{36F}').contains(&d) {
                out.push(d);
            }
        });
    }
    // Recompose what is left (`ü` without its diaeresis is `u`; Hangul and
    // kana sound marks return to their precomposed forms) so a stored word
    // and a query word always compare equal.
    unicode_normalization::UnicodeNormalization::nfc(out.as_str()).collect()
}

/// Quotes a word for a `tsvector`/`tsquery` literal. Words are letters and
/// digits only, but escaping keeps the literal valid whatever they hold.
fn quote(word: &str, out: &mut String) {
    out.push('\'');
    for c in word.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('\'');
}

/// The `tsvector` literal of `text` (possibly empty), for
/// `$n::text::tsvector`.
pub(super) fn vector(text: &str) -> String {
    let mut positions: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut bytes = 0usize;
    for (i, range) in words(text).enumerate() {
        let word = fold(&text[range]);
        if word.is_empty() || word.len() > MAX_WORD_BYTES {
            continue;
        }
        let position = (i + 1).min(MAX_POSITION);
        if let Some(list) = positions.get_mut(&word) {
            if list.len() < MAX_POSITIONS_PER_WORD && list.last() != Some(&position) {
                list.push(position);
            }
            continue;
        }
        if bytes + word.len() > MAX_VECTOR_BYTES {
            continue;
        }
        bytes += word.len();
        positions.insert(word, vec![position]);
    }
    let mut out = String::with_capacity(bytes + positions.len() * 8);
    for (word, list) in &positions {
        if !out.is_empty() {
            out.push(' ');
        }
        quote(word, &mut out);
        for (k, p) in list.iter().enumerate() {
            out.push(if k == 0 { ':' } else { ',' });
            let _ = write!(out, "{p}");
        }
    }
    out
}

/// The folded words of a query and its `tsquery` literal: every
/// whitespace-separated word must match, as a phrase of its parts (`a-b`
/// is `a` followed by `b`), exactly like the SQLite backend's quoted
/// FTS5 terms. `None` when no word has a letter or digit.
pub(super) fn query(text: &str) -> Option<(String, HashSet<String>)> {
    let mut out = String::new();
    let mut terms = HashSet::new();
    for word in text.split_whitespace() {
        let parts: Vec<String> = words(word)
            .map(|r| fold(&word[r]))
            .filter(|w| !w.is_empty() && w.len() <= MAX_WORD_BYTES)
            .collect();
        if parts.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push_str(" & ");
        }
        out.push('(');
        for (k, part) in parts.iter().enumerate() {
            if k > 0 {
                out.push_str(" <-> ");
            }
            quote(part, &mut out);
        }
        out.push(')');
        terms.extend(parts);
    }
    (!terms.is_empty()).then_some((out, terms))
}

/// An excerpt of `text` around the words in `terms`: a window of
/// [`SNIPPET_WORDS`] words with the most matches, its first match a quarter
/// in where possible, matched words in `[` `]`, `…` where the text goes on.
pub(super) fn snippet(text: &str, terms: &HashSet<String>) -> String {
    let all: Vec<Range<usize>> = words(text).collect();
    if all.is_empty() {
        return String::new();
    }
    let matched: Vec<bool> = all
        .iter()
        .map(|r| terms.contains(&fold(&text[r.clone()])))
        .collect();
    let width = SNIPPET_WORDS.min(all.len());
    let mut best = (0usize, 0usize);
    let mut count = matched[..width].iter().filter(|m| **m).count();
    best.1 = count;
    for start in 1..=all.len() - width {
        count = count - usize::from(matched[start - 1]) + usize::from(matched[start + width - 1]);
        if count > best.1 {
            best = (start, count);
        }
    }
    // Context before the first match where the count allows: the match a
    // quarter into the window rather than at its end.
    if let Some(hit) = matched[best.0..best.0 + width].iter().position(|m| *m) {
        let shifted = (best.0 + hit)
            .saturating_sub(width / 4)
            .min(all.len() - width);
        let count = matched[shifted..shifted + width]
            .iter()
            .filter(|m| **m)
            .count();
        if count == best.1 {
            best.0 = shifted;
        }
    }
    let (first, last) = (best.0, best.0 + width - 1);
    let mut out = String::new();
    let from = if first == 0 {
        0
    } else {
        out.push('…');
        all[first].start
    };
    let to = if last == all.len() - 1 {
        text.len()
    } else {
        all[last].end
    };
    let mut at = from;
    for k in first..=last {
        let r = &all[k];
        out.push_str(&text[at..r.start]);
        if matched[k] {
            out.push('[');
            out.push_str(&text[r.clone()]);
            out.push(']');
        } else {
            out.push_str(&text[r.clone()]);
        }
        at = r.end;
    }
    out.push_str(&text[at..to]);
    if to < text.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn words_are_cut_and_folded_like_unicode61() {
        let cut: Vec<String> = words("Hà Nội, VN123 — a-b «日本語のテキスト» 🚀x")
            .map(|r| "Hà Nội, VN123 — a-b «日本語のテキスト» 🚀x"[r].to_owned())
            .collect();
        assert_eq!(
            cut,
            ["Hà", "Nội", "VN123", "a", "b", "日本語のテキスト", "x"]
        );
        assert_eq!(fold("NỘI"), "noi");
        assert_eq!(fold("Ünïcödé"), "unicode");
        // Kana sound marks are not diacritics to remove.
        assert_eq!(fold("デ"), "デ");
        assert_eq!(fold("ﬁ"), "ﬁ", "no compatibility folding, as unicode61");
    }

    #[test]
    fn vectors_and_queries_are_literals_the_server_parses() {
        assert_eq!(vector("Say hi, say HI!"), "'hi':2,4 'say':1,3");
        assert_eq!(vector("  ... "), "");
        let (q, terms) = query("content:flight Hà").unwrap();
        assert_eq!(q, "('content' <-> 'flight') & ('ha')");
        assert_eq!(terms.len(), 3);
        assert_eq!(query("* \" ( 🚀"), None);
        // A word that cannot be stored is not searched either.
        let long = "x".repeat(MAX_WORD_BYTES + 1);
        assert_eq!(vector(&long), "");
        assert_eq!(query(&long), None);
    }

    #[test]
    fn vectors_stay_within_postgres_limits() {
        let text = "w ".repeat(20_000);
        let v = vector(&text);
        assert_eq!(v.matches(',').count(), MAX_POSITIONS_PER_WORD - 1);
        let many: String = (0..200_000).map(|i| format!("word{i} ")).collect();
        let v = vector(&many);
        assert!(v.len() < 1024 * 1024, "{}", v.len());
        assert!(
            v.contains(&format!("':{MAX_POSITION}")),
            "positions stop at the maximum"
        );
    }

    #[test]
    fn snippets_bracket_the_matches_in_the_best_window() {
        let terms: HashSet<String> = ["flight".to_owned()].into();
        assert_eq!(
            snippet("Please book the flight to Hà Nội tomorrow", &terms),
            "Please book the [flight] to Hà Nội tomorrow"
        );
        let long = format!("{} flight end", "pad ".repeat(30));
        let s = snippet(&long, &terms);
        assert!(s.starts_with('…') && s.contains("[flight] end"), "{s}");
        let s = snippet(&format!("flight {}", "pad ".repeat(30)), &terms);
        assert!(s.starts_with("[flight]") && s.ends_with('…'), "{s}");
        assert_eq!(snippet("", &terms), "");
    }
}
