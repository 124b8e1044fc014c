//! HTML reduced to the text a reader sees: what `web_fetch` returns for a
//! page and what the email adapter reads of an HTML-only mail. One reducer
//! for the program, and not behind the `web` feature: a second one (the
//! mail parser's) carried its own table of 2,125 entities, 2,125 pointers
//! relocated at every start (issue 39).

use crate::tools::html_scan::decode_entities;

/// Elements whose content is never text for a reader.
const SKIPPED_ELEMENTS: &[&str] = &[
    "script", "style", "noscript", "template", "svg", "iframe", "object", "canvas",
];
/// Elements that start a new line.
const BLOCK_ELEMENTS: &[&str] = &[
    "address",
    "article",
    "aside",
    "blockquote",
    "body",
    "dd",
    "div",
    "dl",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "header",
    "hr",
    "main",
    "nav",
    "ol",
    "section",
    "table",
    "tbody",
    "thead",
    "tfoot",
    "title",
    "tr",
    "ul",
];

/// Reduces HTML to readable text: drops comments, `<script>`, `<style>` and
/// similar, turns block elements into line breaks (list items into `- `
/// lines, paragraphs and headings into blank-line-separated blocks), decodes
/// entities and collapses whitespace. It is a reader's view, not a parser:
/// malformed markup degrades to text instead of failing.
pub fn html_to_text(html: &str) -> String {
    reduce(html).0
}

/// [`html_to_text`], and how many bytes the tag scans looked at.
pub(crate) fn reduce(html: &str) -> (String, usize) {
    let lower = html.to_ascii_lowercase();
    let mut tags = TagEnds::new(html);
    let mut out = String::with_capacity(html.len() / 2);
    let mut i = 0;
    let mut in_pre = 0usize;
    while i < html.len() {
        let rest = &html[i..];
        if rest.starts_with("<!--") {
            i = match lower[i + 4..].find("-->") {
                Some(p) => i + 4 + p + 3,
                None => html.len(),
            };
            continue;
        }
        if rest.starts_with('<') {
            // Only `<name`, `</name`, `<!…` and `<?…` can open a tag; any
            // other `<` is text, decided before scanning for its `>` (a `>`
            // found and then rejected would be scanned for again from the
            // next `<`: quadratic on `<<<<…>`).
            let after = &lower[i + 1..];
            let could_open = after
                .trim_start_matches('/')
                .starts_with(|c: char| c.is_ascii_alphanumeric())
                || after.starts_with(['!', '?']);
            if !could_open {
                out.push_str("&lt;");
                i += 1;
                continue;
            }
            let Some(end) = tags.find(i) else {
                out.push_str("&lt;");
                i += 1;
                continue;
            };
            let inner = &lower[i + 1..end];
            let closing = inner.starts_with('/');
            let name: String = inner
                .trim_start_matches('/')
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            if name.is_empty() {
                // `<!doctype …>`, `<?xml …?>` or a stray '<' in text.
                if inner.starts_with('!') || inner.starts_with('?') {
                    i = end + 1;
                } else {
                    out.push_str("&lt;");
                    i += 1;
                }
                continue;
            }
            i = end + 1;
            if !closing && SKIPPED_ELEMENTS.contains(&name.as_str()) {
                let close = format!("</{name}");
                i = match lower[i..].find(&close) {
                    Some(p) => tags.find(i + p).map_or(html.len(), |e| e + 1),
                    None => html.len(),
                };
                continue;
            }
            match name.as_str() {
                "br" => out.push('\n'),
                "p" | "h1" | "h2" | "h3" | "h4" | "h5" | "h6" => out.push_str("\n\n"),
                "li" if !closing => out.push_str("\n- "),
                "td" | "th" if !closing => out.push_str(" \u{1}"),
                "pre" => {
                    out.push('\n');
                    in_pre = if closing {
                        in_pre.saturating_sub(1)
                    } else {
                        in_pre + 1
                    };
                }
                n if BLOCK_ELEMENTS.contains(&n) => out.push('\n'),
                _ => {}
            }
            continue;
        }
        let next = rest.find('<').unwrap_or(rest.len());
        let segment = &rest[..next];
        if in_pre > 0 {
            // Keep line structure; mark leading spaces so the final pass
            // does not eat indentation.
            out.push_str(&segment.replace(' ', "\u{2}"));
        } else {
            let mut last_space = false;
            for c in segment.chars() {
                if c.is_whitespace() {
                    if !last_space {
                        out.push(' ');
                    }
                    last_space = true;
                } else {
                    out.push(c);
                    last_space = false;
                }
            }
        }
        i += next;
    }
    let decoded = decode_entities(&out);

    // Final pass: trim lines, collapse runs of blank lines, restore markers.
    let mut text = String::with_capacity(decoded.len());
    let mut blank_run = 0;
    for line in decoded.lines() {
        let line = line.trim_matches(|c: char| c == ' ' || c == '\t' || c == '\u{a0}');
        let line = line.trim_start_matches('\u{1}').trim_start();
        if line.is_empty() {
            blank_run += 1;
            continue;
        }
        if !text.is_empty() {
            text.push_str(if blank_run > 0 { "\n\n" } else { "\n" });
        }
        blank_run = 0;
        text.push_str(line);
    }
    let text = text.replace('\u{1}', "| ").replace('\u{2}', " ");
    (text, tags.steps)
}

/// Finds the `>` closing a tag, skipping quoted attribute values.
///
/// A `<` that never closes is text, and the scan for its `>` runs to the
/// end of the page; done afresh for every `<`, a page of unclosed `<` (or of
/// unbalanced quotes) would cost quadratic time. The scan is a small
/// automaton over (position, quote state), so once a scan from some `<`
/// fails, every state it passed through is known to fail too: those are
/// remembered and a later scan that reaches one stops at once. Each state
/// is marked at most once, so all failed scans together are linear.
struct TagEnds<'a> {
    bytes: &'a [u8],
    /// Per byte: bit `q` is set when a scan arriving at this byte in quote
    /// state `q` (see [`TagEnds::step`]) finds no `>`. Empty until a scan
    /// first fails.
    dead: Vec<u8>,
    /// Bytes looked at by all scans so far (the linear bound is tested).
    steps: usize,
}

impl<'a> TagEnds<'a> {
    fn new(html: &'a str) -> Self {
        TagEnds {
            bytes: html.as_bytes(),
            dead: Vec::new(),
            steps: 0,
        }
    }

    /// Quote states: 0 outside quotes, 1 inside `"…"`, 2 inside `'…'`.
    fn step(state: u8, b: u8) -> u8 {
        match (state, b) {
            (0, b'"') => 1,
            (0, b'\'') => 2,
            (1, b'"') | (2, b'\'') => 0,
            (s, _) => s,
        }
    }

    fn is_dead(&self, at: usize, state: u8) -> bool {
        self.dead.get(at).is_some_and(|d| d & (1 << state) != 0)
    }

    /// Index of the `>` closing the tag that starts at `start`.
    fn find(&mut self, start: usize) -> Option<usize> {
        let from = start.saturating_add(1);
        let tail = self.bytes.get(from..).unwrap_or(&[]);
        // Until a scan has failed there is nothing to look up.
        let check_dead = !self.dead.is_empty();
        let mut state = 0u8;
        let mut looked = tail.len();
        for (offset, &b) in tail.iter().enumerate() {
            if check_dead && self.is_dead(from + offset, state) {
                looked = offset + 1;
                break;
            }
            if state == 0 && b == b'>' {
                self.steps = self.steps.saturating_add(offset + 1);
                return Some(from + offset);
            }
            state = Self::step(state, b);
        }
        self.steps = self.steps.saturating_add(looked);
        // No end: remember every state this scan passed through.
        if self.dead.is_empty() {
            self.dead = vec![0; self.bytes.len()];
        }
        let mut state = 0u8;
        for (k, &b) in self.bytes.iter().enumerate().skip(from) {
            let Some(mark) = self.dead.get_mut(k) else {
                break;
            };
            if *mark & (1 << state) != 0 {
                break;
            }
            self.steps = self.steps.saturating_add(1);
            *mark |= 1 << state;
            state = Self::step(state, b);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entity_before_multibyte_text_does_not_panic() {
        // Found by fuzzing: the entity search sliced `&amp;中文中文` at byte
        // 12, inside the fourth character.
        assert_eq!(html_to_text("<p>R&amp;中文中文</p>"), "R&中文中文");
        assert_eq!(html_to_text("&中文中文中文"), "&中文中文中文");
        assert_eq!(html_to_text("é&eacute;é"), "ééé");
    }

    #[test]
    fn unclosed_angle_brackets_are_scanned_in_linear_time() {
        // Every `<` below is text: its `>` never comes (or only inside an
        // unclosed quote). Scanning to the end afresh for each one was
        // quadratic: a 1 MiB page took minutes. Each (byte, quote state) is
        // now marked once and looked at once more, plus one step per `<`.
        for page in [
            "<".repeat(20_000),
            "a<b".repeat(7_000),
            "<a x=\"".repeat(3_000) + ">",
            "<'\"".repeat(7_000),
            // Found by fuzzing: a `>` that is found but does not end a tag.
            "<".repeat(20_000) + ">",
            "</".repeat(10_000) + ">",
            "< a".repeat(7_000) + ">",
        ] {
            let (_, steps) = reduce(&page);
            assert!(
                steps <= 7 * page.len(),
                "{steps} steps for {} bytes",
                page.len()
            );
        }
        assert_eq!(reduce(&"<".repeat(5)).0, "<<<<<");
        // Closed tags are still found, and a quoted `>` still skipped.
        let mut tags = TagEnds::new("<a title=\"x>y\">t");
        assert_eq!(tags.find(0), Some(14));
    }
}
