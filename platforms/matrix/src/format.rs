//! Reply Markdown → the HTML of `formatted_body` (`org.matrix.custom.html`).
//!
//! CommonMark through `pulldown-cmark`, as Matrix clients render it. Raw
//! HTML in the model's text is escaped rather than passed through: a reply
//! must not be able to inject markup (a spoofed mention, a hidden link).

use pulldown_cmark::{Event, Options, Parser, html};

/// `md` rendered to HTML, with any raw HTML in it shown as text.
pub(crate) fn markdown_to_html(md: &str) -> String {
    let parser =
        Parser::new_ext(md, Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES).map(|event| {
            match event {
                Event::Html(raw) | Event::InlineHtml(raw) => Event::Text(raw),
                other => other,
            }
        });
    let mut out = String::with_capacity(md.len() + md.len() / 4);
    html::push_html(&mut out, parser);
    out.trim_end().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_becomes_html_and_raw_html_stays_text() {
        assert_eq!(
            markdown_to_html("**bold** and `code`"),
            "<p><strong>bold</strong> and <code>code</code></p>"
        );
        let fenced = markdown_to_html("```rust\nfn main() {}\n```");
        assert!(
            fenced.contains("<pre><code class=\"language-rust\">fn main() {}"),
            "{fenced}"
        );
        let raw = markdown_to_html("<a href=\"https://evil\">x</a>");
        assert!(!raw.contains("<a href"), "{raw}");
        assert!(raw.contains("&lt;a href"), "{raw}");
    }
}
