//! Reply text → Telegram HTML.
//!
//! Why HTML and not MarkdownV2: MarkdownV2 demands escaping of eighteen
//! punctuation characters anywhere outside entities, so ordinary model output
//! (`snake_case`, `1.5`, `(a)`, `-`) is rejected unless fully re-encoded, and
//! legacy `Markdown` fails on any unbalanced `_` or `*`. HTML needs only `&`,
//! `<` and `>` escaped, so converting the common Markdown the model writes
//! (fences, `code`, **bold**, *italic*, ~~strike~~, [links](url), headings)
//! is small and predictable. Anything unmatched stays literal text. If
//! Telegram still refuses the result, the adapter resends the chunk as plain
//! text (see `TelegramAdapter::send`), so formatting can never lose a reply.
//!
//! The visible text of the HTML never exceeds the Markdown source's length
//! (markers are removed, escapes decode back), so a chunk already cut to 4096
//! UTF-16 units stays within Telegram's limit after conversion.

// Only byte offsets within one string here, no number from Telegram.
#![allow(clippy::arithmetic_side_effects)]

/// Escapes text for Telegram HTML (text nodes and attribute values).
pub fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}

/// Converts Markdown-ish reply text to Telegram HTML.
pub fn markdown_to_html(md: &str) -> String {
    let mut out = String::with_capacity(md.len() + 16);
    let mut code: Option<Vec<&str>> = None; // open fence: the lines gathered so far
    let mut lang = String::new();
    for (i, line) in md.split('\n').enumerate() {
        let newline = if i > 0 { "\n" } else { "" };
        let trimmed = line.trim_start();
        if let Some(body) = code.as_mut() {
            // The splitter reads fences the same way (`split::is_fence_line`),
            // so a piece it closed renders closed.
            if hermes_platform_kit::split::is_fence_line(line) {
                push_pre(&mut out, &lang, &body.join("\n"));
                code = None;
            } else {
                body.push(line);
            }
            continue;
        }
        out.push_str(newline);
        if let Some(rest) = trimmed.strip_prefix("```") {
            lang = rest
                .trim()
                .chars()
                .filter(|c| c.is_alphanumeric() || matches!(c, '+' | '-' | '_' | '#'))
                .collect();
            code = Some(Vec::new());
            continue;
        }
        if let Some(title) = heading(line) {
            out.push_str("<b>");
            out.push_str(&inline(title));
            out.push_str("</b>");
        } else {
            out.push_str(&inline(line));
        }
    }
    if let Some(body) = code {
        // An unclosed fence: render what there is rather than drop it.
        push_pre(&mut out, &lang, &body.join("\n"));
    }
    out
}

fn push_pre(out: &mut String, lang: &str, body: &str) {
    if lang.is_empty() {
        out.push_str("<pre>");
    } else {
        out.push_str("<pre><code class=\"language-");
        out.push_str(lang);
        out.push_str("\">");
    }
    out.push_str(&escape_html(body));
    out.push_str(if lang.is_empty() {
        "</pre>"
    } else {
        "</code></pre>"
    });
}

/// `# Title` … `###### Title` → the title.
fn heading(line: &str) -> Option<&str> {
    let hashes = line.chars().take_while(|&c| c == '#').count();
    if (1..=6).contains(&hashes) {
        line[hashes..].strip_prefix(' ').map(str::trim)
    } else {
        None
    }
}

fn is_word(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric())
}

/// Inline spans of one line. Each span is closed where it opens, so the HTML
/// is always well nested.
fn inline(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let rest = &s[i..];
        let prev = s[..i].chars().next_back();
        if let Some(after) = rest.strip_prefix('`')
            && let Some(end) = after.find('`').filter(|&e| e > 0)
        {
            out.push_str("<code>");
            out.push_str(&escape_html(&after[..end]));
            out.push_str("</code>");
            i += end + 2;
            continue;
        }
        if let Some((tag, marker)) = [("b", "**"), ("b", "__"), ("s", "~~")]
            .into_iter()
            .find(|(_, m)| rest.starts_with(m))
        {
            let after = &rest[2..];
            if let Some(end) = after
                .find(marker)
                .filter(|&e| e > 0 && !after.starts_with(' '))
            {
                out.push_str(&format!("<{tag}>{}</{tag}>", inline(&after[..end])));
                i += end + 4;
                continue;
            }
        }
        if let Some(m) = rest.chars().next().filter(|&c| c == '*' || c == '_') {
            let after = &rest[1..];
            let opens = !after.starts_with([' ', m]) && (m != '_' || !is_word(prev));
            if opens {
                // The closing marker: not followed by a word character (so
                // `snake_case_name` stays literal).
                let close = after.char_indices().find(|&(j, c)| {
                    c == m
                        && j > 0
                        && !after[..j].ends_with(' ')
                        && !is_word(after[j + 1..].chars().next())
                });
                if let Some((end, _)) = close {
                    out.push_str(&format!("<i>{}</i>", inline(&after[..end])));
                    i += end + 2;
                    continue;
                }
            }
        }
        if rest.starts_with('[')
            && let Some((text, url, used)) = link(rest)
        {
            out.push_str(&format!(
                "<a href=\"{}\">{}</a>",
                escape_html(url),
                inline(text)
            ));
            i += used;
            continue;
        }
        let c = rest.chars().next().unwrap_or(' ');
        out.push_str(&escape_html(c.encode_utf8(&mut [0; 4])));
        i += c.len_utf8().max(1);
    }
    out
}

/// `[text](url)` at the start of `s` with a URL Telegram accepts.
fn link(s: &str) -> Option<(&str, &str, usize)> {
    let close = s.find("](")?;
    let text = &s[1..close];
    if text.is_empty() || text.contains('[') {
        return None;
    }
    let after = &s[close + 2..];
    let end = after.find(')')?;
    let url = &after[..end];
    let ok = ["http://", "https://", "tg://", "mailto:"]
        .iter()
        .any(|p| url.starts_with(p));
    (ok && !url.contains(char::is_whitespace)).then_some((text, url, close + 2 + end + 1))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn escapes_html_specials() {
        assert_eq!(
            markdown_to_html("a < b && c > d"),
            "a &lt; b &amp;&amp; c &gt; d"
        );
    }

    #[test]
    fn common_markdown() {
        assert_eq!(
            markdown_to_html("**bold** and *it* and `x<y`"),
            "<b>bold</b> and <i>it</i> and <code>x&lt;y</code>"
        );
        assert_eq!(markdown_to_html("# Title\nbody"), "<b>Title</b>\nbody");
        assert_eq!(
            markdown_to_html("see [docs](https://e.x/a?b=1&c=2)"),
            "see <a href=\"https://e.x/a?b=1&amp;c=2\">docs</a>"
        );
        assert_eq!(
            markdown_to_html("~~old~~ **nested _it_**"),
            "<s>old</s> <b>nested <i>it</i></b>"
        );
    }

    #[test]
    fn unmatched_markers_and_snake_case_stay_literal() {
        assert_eq!(markdown_to_html("my_var_name is 2*3"), "my_var_name is 2*3");
        assert_eq!(markdown_to_html("**open only"), "**open only");
        assert_eq!(
            markdown_to_html("[x](javascript:alert(1))"),
            "[x](javascript:alert(1))"
        );
    }

    #[test]
    fn fences_become_pre_blocks() {
        let md = "Intro\n```rust\nlet a = b < c;\n\nfoo();\n```\nOutro";
        assert_eq!(
            markdown_to_html(md),
            "Intro\n<pre><code class=\"language-rust\">let a = b &lt; c;\n\nfoo();</code></pre>\nOutro"
        );
        assert_eq!(markdown_to_html("```\nopen"), "<pre>open</pre>");
    }
}
