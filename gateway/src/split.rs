//! Splitting long replies for platforms with a message-length limit.
//!
//! A reply is never cut: it is split into pieces that each fit, preferably
//! at a paragraph break, else at a line break, else at a space, else between
//! two characters. Without code fences, the pieces concatenate back to the
//! exact original text (the break stays at the end of the earlier piece).
//! A split inside a fenced code block closes the fence at the end of the
//! piece and reopens it (with its language tag) at the start of the next, so
//! every piece renders on its own.

/// How a platform counts message length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LengthUnit {
    /// Unicode scalar values (WeCom).
    Chars,
    /// UTF-16 code units (Telegram).
    Utf16,
    /// UTF-8 bytes.
    Bytes,
}

impl LengthUnit {
    /// The length of `c` in this unit.
    fn of_char(self, c: char) -> usize {
        match self {
            LengthUnit::Chars => 1,
            LengthUnit::Utf16 => c.len_utf16(),
            LengthUnit::Bytes => c.len_utf8(),
        }
    }

    /// The length of `s` in this unit.
    pub fn measure(self, s: &str) -> usize {
        match self {
            LengthUnit::Bytes => s.len(),
            LengthUnit::Chars => s.chars().count(),
            LengthUnit::Utf16 => s.encode_utf16().count(),
        }
    }
}

const FENCE_CLOSE: &str = "\n```";

/// Splits `text` into pieces of at most `limit` units each (see the module
/// docs). A `limit` too small to hold a fence marker plus one character is
/// raised to that minimum rather than looping forever.
pub fn split_message(text: &str, limit: usize, unit: LengthUnit) -> Vec<String> {
    if unit.measure(text) <= limit {
        return vec![text.to_owned()];
    }
    let mut pieces = Vec::new();
    let mut rest = text;
    // The fence (its opening line, e.g. "```rust") the previous piece was cut inside.
    let mut open_fence: Option<String> = None;
    while !rest.is_empty() {
        let prefix = open_fence
            .as_ref()
            .map(|f| format!("{f}\n"))
            .unwrap_or_default();
        let prefix_len = unit.measure(&prefix);
        if prefix_len + unit.measure(rest) <= limit {
            pieces.push(format!("{prefix}{rest}"));
            break;
        }
        // Room for the body, keeping space to close a fence we may end inside.
        let reserve = unit.measure(FENCE_CLOSE);
        let budget = limit.saturating_sub(prefix_len + reserve).max(1);
        let window_end = window_end(rest, budget, unit);
        let cut = best_cut(&rest[..window_end]);
        let (body, tail) = rest.split_at(cut);
        let fence_after = fence_state_after(open_fence.clone(), body);
        let mut piece = format!("{prefix}{body}");
        if fence_after.is_some() {
            if !piece.ends_with('\n') {
                piece.push('\n');
            }
            piece.push_str("```");
        }
        pieces.push(piece);
        open_fence = fence_after;
        rest = tail;
    }
    pieces
}

/// Byte index just past the longest prefix of `s` that fits in `budget`
/// units (at least one character, so progress is guaranteed).
fn window_end(s: &str, budget: usize, unit: LengthUnit) -> usize {
    let mut used = 0;
    for (i, c) in s.char_indices() {
        let w = unit.of_char(c);
        if used + w > budget {
            return if i == 0 { c.len_utf8() } else { i };
        }
        used += w;
    }
    s.len()
}

/// Where to cut inside `window`: after the last paragraph break, else line
/// break, else space — unless that would leave a piece shorter than a
/// quarter of the window, in which case the next kind of break is tried.
fn best_cut(window: &str) -> usize {
    let min = window.len() / 4;
    for sep in ["\n\n", "\n", " "] {
        if let Some(pos) = window.rfind(sep) {
            let cut = pos + sep.len();
            if cut > min {
                return cut;
            }
        }
    }
    window.len()
}

/// Tracks ``` fences through `body`: returns the opening line of the fence
/// still open at its end, if any.
pub(crate) fn fence_state_after(mut open: Option<String>, body: &str) -> Option<String> {
    for line in body.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            open = match open {
                Some(_) => None,
                None => Some(trimmed.trim_end().to_owned()),
            };
        }
    }
    open
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn short_text_is_one_piece() {
        assert_eq!(split_message("hi", 10, LengthUnit::Chars), vec!["hi"]);
    }

    #[test]
    fn pieces_fit_and_rejoin_exactly() {
        let para = "word ".repeat(50);
        let text = format!("{para}\n\n{para}\nline two {para}");
        for unit in [LengthUnit::Chars, LengthUnit::Utf16, LengthUnit::Bytes] {
            let pieces = split_message(&text, 64, unit);
            assert!(pieces.len() > 1);
            for p in &pieces {
                assert!(unit.measure(p) <= 64, "{p:?}");
            }
            assert_eq!(pieces.concat(), text);
        }
    }

    #[test]
    fn prefers_paragraph_then_line_breaks() {
        let text = format!("{}\n\n{}", "a".repeat(30), "b".repeat(30));
        let pieces = split_message(&text, 40, LengthUnit::Chars);
        assert_eq!(pieces[0], format!("{}\n\n", "a".repeat(30)));
    }

    #[test]
    fn utf16_counts_astral_characters_twice() {
        let text = "😀".repeat(10);
        let pieces = split_message(&text, 4, LengthUnit::Utf16);
        assert!(pieces.iter().all(|p| p.encode_utf16().count() <= 4));
        assert_eq!(pieces.concat(), text);
    }

    #[test]
    fn unbreakable_text_is_split_between_characters_not_lost() {
        let text = "é".repeat(100);
        let pieces = split_message(&text, 30, LengthUnit::Chars);
        assert_eq!(pieces.concat(), text);
        assert!(pieces.iter().all(|p| p.chars().count() <= 30));
    }

    #[test]
    fn code_fences_are_closed_and_reopened() {
        let code: String = (0..40).map(|i| format!("let x{i} = {i};\n")).collect();
        let text = format!("Intro\n```rust\n{code}```\nOutro");
        let pieces = split_message(&text, 120, LengthUnit::Chars);
        assert!(pieces.len() > 2);
        for p in &pieces {
            assert!(p.chars().count() <= 120, "{p:?}");
            assert_eq!(p.matches("```").count() % 2, 0, "unbalanced fence in {p:?}");
        }
        assert!(pieces[1].starts_with("```rust\n"));
        // Without the added markers the content is unchanged.
        let joined: String = pieces.concat();
        for i in 0..40 {
            assert!(joined.contains(&format!("let x{i} = {i};")));
        }
    }
}
