//! Splitting long replies for platforms with a message-length limit.
//!
//! A reply is never cut: it is split into pieces that each fit, preferably
//! at a paragraph break, else at a line break, else at a space, else between
//! two characters. Without code fences, the pieces concatenate back to the
//! exact original text (the break stays at the end of the earlier piece).
//! A split inside a fenced code block closes the fence at the end of the
//! piece and reopens it (with its language tag, when that is short) at the
//! start of the next, so every piece renders on its own. Fences are read the
//! way the Telegram formatter (`telegram::format`) renders them: a line whose first non-blank
//! characters are ```` ``` ````. A cut never puts an inline ```` ``` ```` at the
//! start of a piece when another cut is possible.

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

/// The smallest limit the splitter works with: room for a reopened fence
/// (```` ```\n ````), its closing (```` \n``` ````) and a few characters. A
/// smaller limit is raised to this rather than looping forever.
pub const MIN_LIMIT: usize = 16;

const FENCE: &str = "```";
const FENCE_CLOSE: &str = "\n```";
/// The longest language tag carried over to a reopened fence.
const MAX_LANG_BYTES: usize = 32;
/// How far past a cut to look for a ```` ``` ```` that the cut would put at
/// the start of the next piece.
const FENCE_LOOKAHEAD: usize = 64;
/// How many space (or between-character) cuts to try before giving up on
/// keeping a ```` ``` ```` away from the start of a piece.
const CUT_TRIES: usize = 8;

/// Whether `line` opens or closes a code fence, as the Telegram formatter
/// reads it: ```` ``` ```` after leading whitespace.
pub fn is_fence_line(line: &str) -> bool {
    line.trim_start().starts_with(FENCE)
}

/// Whether a fence is open after `body`, starting open or not. Lines are
/// read as the piece will be rendered, from its own start.
fn open_after(mut open: bool, body: &str) -> bool {
    for line in body.split('\n') {
        if is_fence_line(line) {
            open = !open;
        }
    }
    open
}

/// The opening line of the fence still open after `body`, given the one
/// open before it (`None`: none). The overflow path uses it to close and
/// reopen a fence around the cut between the messages and the file.
pub(crate) fn fence_state_after(mut open: Option<String>, body: &str) -> Option<String> {
    for line in body.split('\n') {
        if is_fence_line(line) {
            open = match open {
                Some(_) => None,
                None => Some(line.trim().to_owned()),
            };
        }
    }
    open
}

/// Splits `text` into pieces of at most `limit` units each (see the module
/// docs). For a text with ```` ``` ```` in it, a `limit` below [`MIN_LIMIT`]
/// is raised to it, unless the whole text fits; a piece is never less than
/// one character.
pub fn split_message(text: &str, limit: usize, unit: LengthUnit) -> Vec<String> {
    split_pieces(text, limit, unit)
        .iter()
        .map(Piece::render)
        .collect()
}

/// One piece of a split text: a slice of the original with the fence
/// markers added around it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Piece<'a> {
    /// The fence line reopened before the body (without its line end).
    pub(crate) reopen: Option<String>,
    /// The piece's share of the original text; the bodies concatenate back
    /// to it exactly.
    pub(crate) body: &'a str,
    /// Whether a fence is closed after the body.
    pub(crate) close: bool,
}

impl Piece<'_> {
    /// The text sent for this piece.
    pub(crate) fn render(&self) -> String {
        let mut out = String::with_capacity(self.body.len() + 16);
        if let Some(fence) = &self.reopen {
            out.push_str(fence);
            out.push('\n');
        }
        out.push_str(self.body);
        if self.close {
            if !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(FENCE);
        }
        out
    }
}

/// [`split_message`] before rendering: what each piece adds to its slice.
///
/// Guarantees (checked by the `split_message` fuzz target and its proptest,
/// through `crate::fuzz_entry::split_message`): every rendered piece fits
/// `limit.max(MIN_LIMIT)` (and `limit` itself, when the text has no
/// ```` ``` ```` and `limit` holds any character); the bodies concatenate to
/// `text`; every rendered piece has its fences closed, except the last one
/// when `text` itself ends inside an open fence.
pub(crate) fn split_pieces(text: &str, limit: usize, unit: LengthUnit) -> Vec<Piece<'_>> {
    if unit.measure(text) <= limit {
        return vec![Piece {
            reopen: None,
            body: text,
            close: false,
        }];
    }
    // Without a ``` anywhere no fence can open, and no room is kept for one.
    let has_backticks = text.contains(FENCE);
    let (limit, reserve) = if has_backticks {
        (limit.max(MIN_LIMIT), unit.measure(FENCE_CLOSE))
    } else {
        (limit, 0)
    };
    let fences = FenceMap::new(text);
    let text_ends_open = fences.open_at(text.len()).is_some();
    let mut pieces = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let rest = &text[start..];
        let reopen = fences
            .open_at(start)
            .map(|line| reopen_marker(line, limit, unit));
        // The marker's line end counts one unit in every unit.
        let prefix_len = reopen.as_ref().map_or(0, |r| unit.measure(r) + 1);
        let room = limit.saturating_sub(prefix_len);
        if fits(rest, room, unit) {
            // The last piece: closed unless the text itself leaves a fence
            // open (that is the author's, and is kept).
            let close = open_after(reopen.is_some(), rest) && !text_ends_open;
            if !close || fits(rest, room.saturating_sub(reserve), unit) {
                pieces.push(Piece {
                    reopen,
                    body: rest,
                    close,
                });
                break;
            }
        }
        // Room for the body, keeping space to close a fence it may end inside.
        let budget = room.saturating_sub(reserve).max(1);
        let window = window_end(rest, budget, unit);
        let cut = best_cut(text, start, window);
        let body = &rest[..cut];
        let close = open_after(reopen.is_some(), body);
        pieces.push(Piece {
            reopen,
            body,
            close,
        });
        start += cut;
    }
    pieces
}

/// Where the fences of the original text are: the fence lines (at true line
/// starts only) and, after each, the opening line of the fence then open.
struct FenceMap<'a> {
    /// `(line start, opening line of the fence open after this line)`.
    toggles: Vec<(usize, Option<&'a str>)>,
}

impl<'a> FenceMap<'a> {
    fn new(text: &'a str) -> Self {
        let mut toggles = Vec::new();
        let mut open: Option<&str> = None;
        let mut at = 0;
        for line in text.split_inclusive('\n') {
            if is_fence_line(line) {
                open = match open {
                    Some(_) => None,
                    None => Some(line.trim()),
                };
                toggles.push((at, open));
            }
            at += line.len();
        }
        FenceMap { toggles }
    }

    /// The fence open at byte `pos`: the fence lines that start before it
    /// have been read.
    fn open_at(&self, pos: usize) -> Option<&'a str> {
        let read = self.toggles.partition_point(|(start, _)| *start < pos);
        read.checked_sub(1)
            .and_then(|i| self.toggles.get(i))
            .and_then(|(_, open)| *open)
    }
}

/// The fence line that reopens `opening` in the next piece: ```` ``` ```` with
/// the language tag when it is a short tag and leaves room for the body,
/// else a bare ```` ``` ```` (a long info string repeated on every piece
/// would eat the whole budget).
fn reopen_marker(opening: &str, limit: usize, unit: LengthUnit) -> String {
    let info = opening.trim_start().trim_start_matches('`').trim();
    let lang = info.split_whitespace().next().unwrap_or("");
    let tag_ok = !lang.is_empty()
        && lang.len() <= MAX_LANG_BYTES
        && lang
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '+' | '-' | '_' | '#'));
    if tag_ok {
        let marker = format!("{FENCE}{lang}");
        if unit.measure(&marker) < limit / 4 {
            return marker;
        }
    }
    FENCE.to_owned()
}

/// Whether all of `s` fits in `budget` units.
fn fits(s: &str, budget: usize, unit: LengthUnit) -> bool {
    let mut used = 0usize;
    for c in s.chars() {
        used += unit.of_char(c);
        if used > budget {
            return false;
        }
    }
    true
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

/// Whether a cut at byte `at` of `text` would start the next piece in the
/// middle of a line with ```` ``` ```` (after spaces): rendered on its own,
/// that piece would read it as a fence (`Some words ```inline``` more`).
fn starts_fence_mid_line(text: &str, at: usize) -> bool {
    let bytes = text.as_bytes();
    if at == 0 || bytes.get(at - 1) == Some(&b'\n') {
        return false;
    }
    let mut after = bytes
        .get(at..)
        .unwrap_or(&[])
        .iter()
        .take(FENCE_LOOKAHEAD)
        .skip_while(|b| matches!(b, b' ' | b'\t'));
    after.by_ref().take(3).filter(|&&b| b == b'`').count() == 3
}

/// Where to cut the window `text[start..start + window]`: after the last
/// paragraph break, else line break, else space — unless that would leave a
/// piece shorter than a quarter of the window, in which case the next kind
/// of break is tried — else between two characters. Cuts that would put a
/// ```` ``` ```` at the start of the next piece mid-line are avoided.
fn best_cut(text: &str, start: usize, window: usize) -> usize {
    let win = &text[start..start + window];
    let min = win.len() / 4;
    for sep in ["\n\n", "\n"] {
        if let Some(pos) = win.rfind(sep) {
            let cut = pos + sep.len();
            if cut > min {
                return cut;
            }
        }
    }
    for (pos, _) in win.rmatch_indices(' ').take(CUT_TRIES) {
        let cut = pos + 1;
        if cut <= min {
            break;
        }
        if !starts_fence_mid_line(text, start + cut) {
            return cut;
        }
    }
    let mut cut = win.len();
    for _ in 0..CUT_TRIES {
        if !starts_fence_mid_line(text, start + cut) {
            return cut;
        }
        match win[..cut].char_indices().next_back() {
            Some((i, _)) if i > 0 => cut = i,
            _ => break,
        }
    }
    win.len()
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

    /// Every piece fits, the bodies rebuild the text, fences are balanced
    /// (the checks of the `split_message` fuzz target).
    fn check(text: &str, limit: usize, unit: LengthUnit) -> Vec<String> {
        let rendered = crate::fuzz_entry::split_message_with(text, limit, unit);
        assert_eq!(rendered, split_message(text, limit, unit));
        rendered
    }

    #[test]
    fn fence_line_longer_than_the_limit_does_not_explode_into_thousands_of_pieces() {
        // Found by fuzzing: the whole opening line was repeated as the prefix
        // of every later piece, leaving one character of body each: 2,112
        // pieces of 502 units, every one over the limit.
        let text = format!("```{}\n{}\n```\n", "x".repeat(600), "y".repeat(2000));
        let pieces = check(&text, 500, LengthUnit::Utf16);
        assert!(pieces.len() <= 6, "{} pieces", pieces.len());
        // The long info string is not a language tag: continuations reopen
        // a bare fence.
        assert!(pieces[1].starts_with("```\n"), "{:?}", pieces[1]);
    }

    #[test]
    fn inline_triple_backticks_are_not_taken_for_a_fence_at_a_cut() {
        // Found by fuzzing: a cut just before "```inline```" made the next
        // piece start with it, which reads as an opening fence.
        let text = "Some words here ```inline``` and more words after it";
        let pieces = check(text, 24, LengthUnit::Chars);
        for p in &pieces {
            assert!(!is_fence_line(p.lines().next().unwrap_or("")), "{pieces:?}");
            assert!(!p.contains("\n```"), "a fence was added: {pieces:?}");
        }
        assert_eq!(pieces.concat(), text);
    }

    #[test]
    fn short_language_tags_are_reopened_and_long_ones_are_not() {
        let code = "let x = 1;\n".repeat(30);
        let text = format!("```rust\n{code}```\n");
        let pieces = check(&text, 100, LengthUnit::Chars);
        assert!(pieces[1].starts_with("```rust\n"));
        let text = format!("```{} attrs\n{code}```\n", "a".repeat(40));
        let pieces = check(&text, 100, LengthUnit::Chars);
        assert!(pieces[1].starts_with("```\n"));
    }

    #[test]
    fn tiny_limits_are_raised_and_an_unclosed_fence_stays_the_authors() {
        let text = format!("```\n{}", "z".repeat(100));
        let pieces = check(&text, 3, LengthUnit::Bytes);
        assert!(pieces.iter().all(|p| p.len() <= MIN_LIMIT));
        // The author left the fence open; the last piece keeps it so.
        assert!(!pieces.last().unwrap().ends_with("```"));
        // An indented fence line cut inside its indentation still renders.
        let text = format!("{}\n    ```sh\nls\n```", "w ".repeat(10));
        for limit in 16..40 {
            check(&text, limit, LengthUnit::Chars);
        }
    }
}
