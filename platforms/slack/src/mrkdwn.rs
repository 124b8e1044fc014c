//! Markdown (what models write) → Slack's `mrkdwn`: `**bold**` →
//! `*bold*`, `*italic*`/`_italic_` → `_italic_`, `~~strike~~` → `~strike~`,
//! `[text](url)` → `<url|text>`, `# Heading` → `*Heading*`; code blocks and
//! inline code are kept as they are (Slack renders ``` and `), and `&`,
//! `<`, `>` are escaped everywhere as Slack asks, so a model's `<!channel>`
//! never pings anyone.

/// `markdown` as Slack shows it.
pub fn from_markdown(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len() + 16);
    let mut in_fence = false;
    for (i, line) in markdown.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            in_fence = !in_fence;
            // Slack ignores a language after the fence and would show it.
            out.push_str(&line[..line.len() - trimmed.len()]);
            out.push_str("```");
            out.push_str(&escape(trimmed.trim_start_matches('`').trim_start_matches(
                |c: char| c.is_alphanumeric() || c == '+' || c == '-',
            )));
            continue;
        }
        if in_fence {
            out.push_str(&escape(line));
            continue;
        }
        out.push_str(&convert_line(line));
    }
    out
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One line outside code blocks: inline code spans kept, the rest converted.
fn convert_line(line: &str) -> String {
    let heading = line
        .trim_start()
        .strip_prefix('#')
        .map(|rest| rest.trim_start_matches('#'))
        .filter(|rest| rest.starts_with(' '));
    if let Some(title) = heading {
        let title = convert_line(title.trim());
        return format!("*{}*", title.trim_matches('*'));
    }
    let mut out = String::new();
    for (i, part) in line.split('`').enumerate() {
        if i > 0 {
            out.push('`');
        }
        // Odd parts are inside `code` (an unmatched backtick leaves the
        // rest as code, as Slack shows it).
        if i % 2 == 1 {
            out.push_str(&escape(part));
        } else {
            out.push_str(&inline(part));
        }
    }
    out
}

/// Links, bold, italic and strike in text with no code.
fn inline(text: &str) -> String {
    let text = links(text);
    // Bold first, through a marker no text contains, so `*` left over is
    // italic.
    const BOLD: char = '\u{1}';
    let text = pairs(&text, "**", BOLD);
    let text = pairs(&text, "__", BOLD);
    let text = pairs(&text, "~~", '~');
    let text = italic(&text);
    text.replace(BOLD, "*")
}

/// `[label](url)` → `<url|label>`, the rest escaped.
fn links(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let parsed = after.find("](").and_then(|close| {
            let label = &after[..close];
            let tail = &after[close + 2..];
            let end = tail.find(')')?;
            let url = &tail[..end];
            let ok = !label.is_empty()
                && !url.is_empty()
                && !url.contains(char::is_whitespace)
                && (url.starts_with("http://")
                    || url.starts_with("https://")
                    || url.starts_with("mailto:"));
            ok.then(|| (label, url, open + 1 + close + 2 + end + 1))
        });
        match parsed {
            Some((label, url, used)) => {
                out.push_str(&escape(&rest[..open]));
                out.push('<');
                out.push_str(&escape(url).replace('|', "%7C"));
                out.push('|');
                out.push_str(&escape(label).replace('|', "/"));
                out.push('>');
                rest = &rest[used..];
            }
            None => {
                out.push_str(&escape(&rest[..=open]));
                rest = &rest[open + 1..];
            }
        }
    }
    out.push_str(&escape(rest));
    out
}

/// `MARKxMARK` → `WITHxWITH` where both marks are found on the line.
fn pairs(text: &str, mark: &str, with: char) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find(mark) {
        let inner = &rest[start + mark.len()..];
        match inner.find(mark) {
            Some(end) if end > 0 && !inner[..end].starts_with(' ') => {
                out.push_str(&rest[..start]);
                out.push(with);
                out.push_str(&inner[..end]);
                out.push(with);
                rest = &inner[end + mark.len()..];
            }
            _ => {
                out.push_str(&rest[..start + mark.len()]);
                rest = inner;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `*x*` → `_x_` (a `* ` bullet is left alone).
fn italic(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let closing = (chars[i] == '*' && chars.get(i + 1).is_some_and(|c| !c.is_whitespace()))
            .then(|| chars[i + 1..].iter().position(|&c| c == '*'))
            .flatten()
            .filter(|&len| len > 0 && !chars[i + len].is_whitespace());
        if let Some(len) = closing {
            let end = i + 1 + len;
            out.push('_');
            out.extend(&chars[i + 1..end]);
            out.push('_');
            i = end + 1;
            continue;
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::from_markdown;

    #[test]
    fn bold_italic_strike_links_and_headings_become_mrkdwn() {
        assert_eq!(
            from_markdown("**bold** and *it* and ~~gone~~"),
            "*bold* and _it_ and ~gone~"
        );
        assert_eq!(
            from_markdown("see [the docs](https://example.com/a?b=1&c=2)"),
            "see <https://example.com/a?b=1&amp;c=2|the docs>"
        );
        assert_eq!(from_markdown("## Plan"), "*Plan*");
        assert_eq!(from_markdown("* one\n* two"), "* one\n* two");
    }

    #[test]
    fn code_is_kept_and_nothing_can_ping() {
        let md = "run `a **b** <c>`:\n```rust\nlet x = **y** < 2;\n```\n<!channel> & <@U1>";
        assert_eq!(
            from_markdown(md),
            "run `a **b** &lt;c&gt;`:\n```\nlet x = **y** &lt; 2;\n```\n&lt;!channel&gt; &amp; &lt;@U1&gt;"
        );
    }

    #[test]
    fn a_link_that_is_not_one_stays_text() {
        assert_eq!(
            from_markdown("[x](javascript:alert)"),
            "[x](javascript:alert)"
        );
        assert_eq!(from_markdown("a [b] c"), "a [b] c");
    }
}
