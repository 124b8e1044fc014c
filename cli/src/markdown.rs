//! Markdown for the terminal, rendered as the answer streams.
//!
//! Rendering works line by line: a line is rendered (inline markup parsed by
//! `minimad`, wrapped at word boundaries to the terminal width) once
//! its newline has arrived. Until then the partial line is shown raw, so
//! text still appears as it streams; when the line completes, the raw echo
//! is erased (cursor up over its wrapped rows, clear to the end of the
//! screen) and the rendered line takes its place.
//!
//! Code blocks are printed verbatim — no indentation, borders or line
//! numbers — so they copy cleanly; only their colour changes. With styles
//! off (`--plain`, `NO_COLOR`, not a terminal) text passes through untouched.

use unicode_width::UnicodeWidthStr;

/// A streaming markdown renderer.
#[derive(Debug)]
pub struct Markdown {
    styled: bool,
    width: usize,
    /// The open code fence's marker (```` ``` ```` or `~~~`), if inside one.
    fence: Option<String>,
    /// The current, incomplete line.
    pending: String,
    /// Bytes of `pending` already echoed raw.
    echoed: usize,
    /// Echo incomplete lines raw while they stream (off for whole texts).
    echo_partial: bool,
}

impl Markdown {
    /// A renderer; `styled = false` passes text through unchanged.
    pub fn new(styled: bool, width: usize) -> Self {
        Markdown {
            styled,
            width: width.max(20),
            fence: None,
            pending: String::new(),
            echoed: 0,
            echo_partial: true,
        }
    }

    /// Renders a whole text at once.
    pub fn render(styled: bool, width: usize, text: &str) -> String {
        let mut md = Markdown::new(styled, width);
        md.echo_partial = false;
        let mut out = md.push(text);
        out.push_str(&md.finish());
        out
    }

    /// Takes the next streamed piece; returns what to write.
    pub fn push(&mut self, text: &str) -> String {
        if !self.styled {
            return text.to_owned();
        }
        self.pending.push_str(text);
        let mut out = String::new();
        while let Some(pos) = self.pending.find('\n') {
            let line: String = self.pending.drain(..=pos).collect();
            out.push_str(&self.erase_echo());
            out.push_str(&self.render_line(line.trim_end_matches(['\n', '\r'])));
            out.push('\n');
            self.echoed = 0;
        }
        if self.echo_partial && self.echoed < self.pending.len() {
            out.push_str(&self.pending[self.echoed..]);
            self.echoed = self.pending.len();
        }
        out
    }

    /// Renders what is left (an answer that does not end with a newline);
    /// the result does not end with one either.
    pub fn finish(&mut self) -> String {
        if !self.styled || self.pending.is_empty() {
            return String::new();
        }
        let line = std::mem::take(&mut self.pending);
        let mut out = self.erase_echo();
        out.push_str(&self.render_line(&line));
        self.echoed = 0;
        out
    }

    /// The raw echo of the pending line can no longer be erased (another
    /// line was written after it): it stays on the screen as it is, and
    /// only what was not echoed yet is still to be written.
    pub fn echo_lost(&mut self) {
        if let Some(rest) = self.pending.get(self.echoed..) {
            self.pending = rest.to_owned();
        } else {
            self.pending.clear();
        }
        self.echoed = 0;
    }

    /// Moves back over the raw echo of the pending line and clears it.
    fn erase_echo(&self) -> String {
        if self.echoed == 0 {
            return String::new();
        }
        let cols = self.pending_width();
        let rows_up = cols.saturating_sub(1) / self.width;
        let mut s = String::from("\r");
        if rows_up > 0 {
            s.push_str(&format!("\x1b[{rows_up}A"));
        }
        s.push_str("\x1b[J");
        s
    }

    fn pending_width(&self) -> usize {
        // The echoed part is exactly what is on the screen.
        let shown = self.pending.get(..self.echoed).unwrap_or(&self.pending);
        let shown = shown.split('\n').next_back().unwrap_or("");
        UnicodeWidthStr::width(shown)
    }

    fn render_line(&mut self, line: &str) -> String {
        let trimmed = line.trim_start();
        if let Some(marker) = &self.fence {
            if trimmed.starts_with(marker.as_str()) && trimmed.trim_end() == marker.as_str() {
                self.fence = None;
                return dim(line);
            }
            return code(line);
        }
        for marker in ["```", "~~~"] {
            if trimmed.starts_with(marker) {
                self.fence = Some(marker.to_owned());
                return dim(line);
            }
        }
        if trimmed.starts_with('|') {
            return line.to_owned();
        }
        let hashes = trimmed.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && trimmed[hashes..].starts_with(' ') {
            let spans = inline(trimmed[hashes..].trim());
            let bolded: Vec<Span> = spans
                .into_iter()
                .map(|mut s| {
                    s.bold = true;
                    s.underline |= hashes == 1;
                    s
                })
                .collect();
            return self.wrap(&bolded, "", "");
        }
        if is_rule(trimmed) {
            return dim(&"─".repeat(self.width.min(40)));
        }
        if let Some(rest) = trimmed
            .strip_prefix("> ")
            .or(trimmed.strip_prefix('>').filter(|r| r.is_empty()))
        {
            return self.wrap(&inline(rest), &dim("│ "), &dim("│ "));
        }
        let indent = " ".repeat(line.len() - trimmed.len());
        if let Some(rest) = ["- ", "* ", "+ "]
            .iter()
            .find_map(|m| trimmed.strip_prefix(m))
        {
            let first = format!("{indent}• ");
            let hang = " ".repeat(first.chars().count());
            return self.wrap(&inline(rest), &first, &hang);
        }
        let digits = trimmed.chars().take_while(char::is_ascii_digit).count();
        if digits > 0
            && let Some(rest) = trimmed[digits..].strip_prefix(". ")
        {
            let first = format!("{indent}{}. ", &trimmed[..digits]);
            let hang = " ".repeat(first.chars().count());
            return self.wrap(&inline(rest), &first, &hang);
        }
        if trimmed.is_empty() {
            return String::new();
        }
        self.wrap(&inline(trimmed), &indent, &indent)
    }

    /// Word-wraps `spans` to the width; `first` and `hang` prefix the first
    /// and the following rows.
    fn wrap(&self, spans: &[Span], first: &str, hang: &str) -> String {
        let mut out = String::from(first);
        let mut col = UnicodeWidthStr::width(strip_ansi(first).as_str());
        let hang_cols = UnicodeWidthStr::width(strip_ansi(hang).as_str());
        let mut at_row_start = true;
        for span in spans {
            for (i, word) in span.text.split(' ').enumerate() {
                let needs_space = i > 0 || (span.leading_space && !at_row_start);
                let w = UnicodeWidthStr::width(word);
                let space = usize::from(needs_space && !at_row_start);
                if !at_row_start && col + space + w > self.width && w > 0 {
                    out.push('\n');
                    out.push_str(hang);
                    col = hang_cols;
                    at_row_start = true;
                } else if space == 1 {
                    out.push(' ');
                    col += 1;
                }
                if w > 0 {
                    out.push_str(&span.styled(word));
                    col += w;
                    at_row_start = false;
                }
            }
        }
        out
    }
}

fn is_rule(line: &str) -> bool {
    let l = line.trim();
    l.len() >= 3
        && ['-', '*', '_']
            .iter()
            .any(|c| l.chars().all(|x| x == *c || x == ' ') && l.matches(*c).count() >= 3)
}

fn dim(t: &str) -> String {
    format!("\x1b[2m{t}\x1b[0m")
}

fn code(t: &str) -> String {
    format!("\x1b[36m{t}\x1b[0m")
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut in_escape = false;
    for c in s.chars() {
        match (in_escape, c) {
            (false, '\x1b') => in_escape = true,
            (true, c) if c.is_ascii_alphabetic() => in_escape = false,
            (true, _) => {}
            (false, c) => out.push(c),
        }
    }
    out
}

/// A run of text with one style.
#[derive(Clone, Debug, Default)]
struct Span {
    text: String,
    /// A space separates this span from the previous one.
    leading_space: bool,
    bold: bool,
    italic: bool,
    code: bool,
    strike: bool,
    underline: bool,
}

impl Span {
    fn styled(&self, word: &str) -> String {
        let mut codes = Vec::new();
        if self.bold {
            codes.push("1");
        }
        if self.italic {
            codes.push("3");
        }
        if self.underline {
            codes.push("4");
        }
        if self.strike {
            codes.push("9");
        }
        if self.code {
            codes.push("36");
        }
        if codes.is_empty() {
            word.to_owned()
        } else {
            format!("\x1b[{}m{word}\x1b[0m", codes.join(";"))
        }
    }
}

/// Parses one line's inline markup (bold, italic, `code`, ~~strike~~) into
/// spans. `minimad` (termimad's parser) reads markdown a line at a time,
/// which is exactly how a streamed answer arrives.
fn inline(text: &str) -> Vec<Span> {
    let composite = minimad::Composite::from_inline(text);
    let mut out: Vec<Span> = Vec::new();
    let mut space = false;
    for c in &composite.compounds {
        // Spaces at compound edges become separators, so wrapping sees words.
        let leading = c.src.starts_with(' ');
        let body = c.src.trim_matches(' ');
        if body.is_empty() {
            space |= !c.src.is_empty();
            continue;
        }
        out.push(Span {
            text: body.to_owned(),
            leading_space: space || leading,
            bold: c.bold,
            italic: c.italic,
            code: c.code,
            strike: c.strikeout,
            ..Span::default()
        });
        space = c.src.ends_with(' ');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(s: &str) -> String {
        strip_ansi(s)
    }

    #[test]
    fn inline_markup_is_styled_and_markers_go() {
        let out = Markdown::render(true, 80, "Use **bold**, *it* and `code`.\n");
        assert_eq!(plain(&out), "Use bold, it and code.\n");
        assert!(out.contains("\x1b[1mbold"), "{out:?}");
        assert!(out.contains("\x1b[36mcode"), "{out:?}");
    }

    #[test]
    fn code_blocks_stay_verbatim() {
        let text = "Run:\n```sh\n  cargo test --workspace  # all\n```\nDone.\n";
        let out = plain(&Markdown::render(true, 20, text));
        assert!(out.contains("\n  cargo test --workspace  # all\n"), "{out}");
    }

    #[test]
    fn paragraphs_wrap_and_list_items_hang() {
        let out = plain(&Markdown::render(
            true,
            24,
            "- one two three four five six seven\n",
        ));
        assert_eq!(out, "• one two three four\n  five six seven\n");
        let out = plain(&Markdown::render(true, 80, "## Title\n1. first\n"));
        assert_eq!(out, "Title\n1. first\n");
    }

    #[test]
    fn streaming_pieces_give_the_same_text_as_a_whole() {
        let text = "Some **bold** words and ~~struck~~ *it* here.\n```\ncode\n```\nend";
        let whole = plain(&Markdown::render(true, 80, text));
        let mut md = Markdown::new(true, 80);
        let mut streamed = String::new();
        for piece in text.as_bytes().chunks(3) {
            streamed.push_str(&md.push(std::str::from_utf8(piece).unwrap_or("")));
        }
        streamed.push_str(&md.finish());
        // The raw echo is erased before each rendered line.
        assert!(streamed.contains("\r\x1b[J"), "{streamed:?}");
        assert!(
            whole.starts_with("Some bold words and struck it here.\n"),
            "{whole}"
        );
        assert!(whole.ends_with("end"), "{whole:?}");
    }

    #[test]
    fn unstyled_text_passes_through() {
        let mut md = Markdown::new(false, 80);
        assert_eq!(md.push("**x**\n"), "**x**\n");
        assert_eq!(md.finish(), "");
    }
}
