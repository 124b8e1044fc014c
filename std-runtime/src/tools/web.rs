//! `web_fetch`: fetches one http(s) URL and returns it as readable text.
//!
//! The request is one blocking exchange on the process's shared HTTP agent
//! ([`crate::http`]), on the loop's own thread: connections are pooled
//! across calls (and with the provider's), an interrupt stops the download
//! within a tick, redirects are followed up to five times, and the whole
//! request is bounded by a timeout. The body is read in chunks and download
//! stops at `max_bytes`. HTML is reduced to text by a small hand-written
//! reducer ([`html_to_text`]); other text types are returned as they are;
//! binary content is an error. Non-UTF-8 bodies are decoded lossily.

use crate::tools::html_scan::decode_entities;
use std::io::Read;
use std::time::Duration;

use hermes_core::{Tool, ToolContext, ToolError, ToolSpec};
use serde::Deserialize;
use serde_json::json;
use ureq::ResponseExt;

use super::{failed, parse_args};
use crate::http::{self, Wake};
use crate::spill::cap_result;
use crate::text::floor_char_boundary;

const DEFAULT_MAX_BYTES: usize = 1024 * 1024;
const MAX_MAX_BYTES: usize = 10 * 1024 * 1024;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_REDIRECTS: u32 = 5;

const WEB_FETCH_DESCRIPTION: &str = if cfg!(feature = "documents") {
    "Fetch an http(s) URL and return its content as text (HTML and PDF reduced to text). Other \
     binary content is refused."
} else {
    "Fetch an http(s) URL and return its content as text (HTML is reduced to readable text). \
     Binary content (images, PDFs, archives) is refused."
};

/// Fetches web pages.
#[derive(Debug)]
pub struct WebFetchTool {
    spec: ToolSpec,
    cap: usize,
}

#[derive(Deserialize)]
pub(super) struct FetchArgs {
    url: String,
    #[serde(default)]
    max_bytes: Option<usize>,
}

impl WebFetchTool {
    pub(crate) fn new(cap: usize) -> Self {
        WebFetchTool {
            spec: ToolSpec::new(
                "web_fetch",
                WEB_FETCH_DESCRIPTION,
                json!({
                    "type": "object",
                    "properties": {
                        "url": {"type": "string", "description": "An http:// or https:// URL."},
                        "max_bytes": {"type": "integer", "minimum": 1, "maximum": MAX_MAX_BYTES, "description": "Stop downloading after this many bytes. Default 1048576."}
                    },
                    "required": ["url"]
                }),
            ),
            cap,
        }
    }
}

/// The scheme of an absolute URL (`http` in `http://…`), lower-cased, if
/// `url` starts with one (RFC 3986: a letter, then letters, digits, `+`,
/// `-`, `.`, then `:`).
fn scheme_of(url: &str) -> Option<String> {
    let (scheme, _) = url.split_once(':')?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then(|| scheme.to_ascii_lowercase())
}

/// Checks the URL a model gave and makes it sendable: http(s) only, and the
/// characters HTTP cannot carry (non-ASCII text in a path, spaces) are
/// percent-encoded the way a browser would.
fn parse_url(raw: &str) -> Result<ureq::http::Uri, ToolError> {
    let raw = raw.trim();
    match scheme_of(raw).as_deref() {
        Some("http" | "https") => {}
        Some(other) => {
            return Err(failed(format!(
                "Error: only http and https URLs can be fetched (got scheme '{other}')."
            )));
        }
        None => {
            return Err(failed(
                "Error: 'url' is not a valid URL (it must start with http:// or https://).",
            ));
        }
    }
    let mut encoded = String::with_capacity(raw.len());
    for c in raw.chars() {
        if c.is_ascii_graphic()
            && !matches!(c, '"' | '<' | '>' | '`' | '{' | '}' | '|' | '\\' | '^')
        {
            encoded.push(c);
        } else {
            let mut utf8 = [0u8; 4];
            for b in c.encode_utf8(&mut utf8).bytes() {
                encoded.push_str(&format!("%{b:02X}"));
            }
        }
    }
    let uri: ureq::http::Uri = encoded
        .parse()
        .map_err(|e| failed(format!("Error: 'url' is not a valid URL ({e}).")))?;
    if uri.host().is_none_or(str::is_empty) {
        return Err(failed(
            "Error: 'url' is not a valid URL (it names no host).",
        ));
    }
    Ok(uri)
}

/// How a body should be turned into text.
#[derive(Debug, PartialEq, Eq)]
enum Kind {
    Html,
    Text,
    Binary,
}

fn classify(content_type: &str, body: &[u8]) -> Kind {
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let sniff = &body[..body.len().min(8192)];
    if sniff.contains(&0) {
        return Kind::Binary;
    }
    if mime == "text/html" || mime == "application/xhtml+xml" {
        return Kind::Html;
    }
    let textual = mime.starts_with("text/")
        || mime.ends_with("+json")
        || mime.ends_with("+xml")
        || matches!(
            mime.as_str(),
            "application/json"
                | "application/xml"
                | "application/javascript"
                | "application/x-javascript"
                | "application/ecmascript"
                | "application/x-yaml"
                | "application/yaml"
                | "application/toml"
                | "application/x-sh"
                | "application/sql"
                | "application/graphql"
        );
    if textual {
        return Kind::Text;
    }
    if mime.is_empty() {
        let head = String::from_utf8_lossy(&sniff[..sniff.len().min(512)]).to_ascii_lowercase();
        let head = head.trim_start();
        if head.starts_with("<!doctype html") || head.starts_with("<html") {
            return Kind::Html;
        }
        return if std::str::from_utf8(sniff).is_ok() || sniff.len() == 8192 {
            Kind::Text
        } else {
            Kind::Binary
        };
    }
    Kind::Binary
}

/// Reads up to `max_bytes` of `body`; whether more was coming.
fn read_up_to(body: ureq::Body, max_bytes: usize) -> std::io::Result<(Vec<u8>, bool)> {
    let mut reader = body.into_reader();
    let mut bytes = Vec::new();
    let limit = u64::try_from(max_bytes).unwrap_or(u64::MAX);
    (&mut reader).take(limit).read_to_end(&mut bytes)?;
    // Find out whether more was coming without keeping it.
    let mut probe = [0u8; 1];
    let cut = bytes.len() == max_bytes && matches!(reader.read(&mut probe), Ok(n) if n > 0);
    Ok((bytes, cut))
}

/// One fetch on the calling thread; `interrupted` is asked every tick of a
/// wait.
fn fetch(
    url: &ureq::http::Uri,
    max_bytes: usize,
    explicit_max: bool,
    cap: usize,
    interrupted: &dyn Fn() -> bool,
) -> Result<String, ToolError> {
    let shown = url.to_string();
    let mut stopped = false;
    let mut probe = || {
        if interrupted() {
            stopped = true;
            Wake::Stop
        } else {
            Wake::Continue
        }
    };
    let result = http::interruptible(&mut probe, || {
        let resp = http::send_fresh_if_stale(|| {
            http::agent()
                .get(url)
                .config()
                .timeout_global(Some(REQUEST_TIMEOUT))
                .timeout_connect(Some(CONNECT_TIMEOUT))
                .timeout_resolve(Some(CONNECT_TIMEOUT))
                .max_redirects(MAX_REDIRECTS)
                .build()
                .call()
        })
        .map_err(|e| (e, None))?;
        let status = resp.status();
        let final_url = resp.get_uri().to_string();
        let content_type = resp
            .headers()
            .get(ureq::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        // A PDF is read whole or not at all (its index is at its end): the
        // default download limit is raised to the largest allowed for one.
        let max_bytes = if !explicit_max && is_pdf(&content_type) {
            MAX_MAX_BYTES
        } else {
            max_bytes
        };
        let (body, cut) = read_up_to(resp.into_body(), max_bytes)
            .map_err(|e| (ureq::Error::from(e), Some(final_url.clone())))?;
        Ok((status, final_url, content_type, body, cut))
    });
    let (status, final_url, content_type, body, cut) = match result {
        Ok(parts) => parts,
        Err(_) if stopped => {
            return Err(failed(format!("Error: fetching {shown} was interrupted.")));
        }
        Err((e, None)) => {
            return Err(failed(format!(
                "Error: fetching {shown} failed: {}",
                http::describe(&e)
            )));
        }
        Err((e, Some(final_url))) => {
            return Err(failed(format!(
                "Error: reading the body of {final_url} failed: {}",
                http::describe(&e)
            )));
        }
    };

    #[cfg(feature = "documents")]
    if status.is_success() && (is_pdf(&content_type) || body.starts_with(b"%PDF-")) {
        return fetched_pdf(&final_url, &content_type, &body, cut, cap);
    }
    let kind = classify(&content_type, &body);
    if kind == Kind::Binary {
        let ct = if content_type.is_empty() {
            "no content type".to_string()
        } else {
            content_type.clone()
        };
        return Err(failed(format!(
            "Error: {final_url} returned binary content ({ct}, {}{} bytes); web_fetch only returns text.",
            body.len(),
            if cut { "+" } else { "" }
        )));
    }
    let raw = String::from_utf8_lossy(&body);
    let text = match kind {
        Kind::Html => html_to_text(&raw),
        _ => raw.into_owned(),
    };

    if !status.is_success() {
        let cut_at = floor_char_boundary(&text, 1000);
        return Err(failed(format!(
            "Error: {final_url} answered HTTP {status}. Body starts:\n{}",
            &text[..cut_at]
        )));
    }

    let mut out = format!("URL: {final_url}\n");
    if !content_type.is_empty() {
        out.push_str(&format!("Content-Type: {content_type}\n"));
    }
    out.push('\n');
    out.push_str(&text);
    if cut {
        out.push_str(&format!(
            "\n[download stopped at {max_bytes} bytes (max_bytes); the page is longer]"
        ));
    }
    Ok(cap_result(
        out,
        cap,
        "the page is longer than the result limit",
    ))
}

fn is_pdf(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/pdf"))
}

/// The text of a fetched PDF (issue 46): its first pages, with markers.
#[cfg(feature = "documents")]
fn fetched_pdf(
    final_url: &str,
    content_type: &str,
    body: &[u8],
    cut: bool,
    cap: usize,
) -> Result<String, ToolError> {
    use crate::documents::{Kind, MAX_PAGES, Pages, extract};
    if cut {
        return Err(failed(format!(
            "Error: {final_url} is a PDF larger than {} bytes; only a whole PDF can be read.",
            body.len()
        )));
    }
    let pages = Pages {
        first: 1,
        count: MAX_PAGES,
    };
    let doc = extract(Kind::Pdf, body, pages).map_err(|e| {
        failed(format!(
            "Error: cannot read the text of the PDF at {final_url}: {e}."
        ))
    })?;
    let mut out = format!("URL: {final_url}\nContent-Type: {content_type}\n\n");
    out.push_str(&doc.text);
    if doc.next_page.is_some() {
        out.push_str(&format!(
            "[only the first {MAX_PAGES} pages are read from a URL]\n"
        ));
    }
    Ok(cap_result(
        out,
        cap,
        "the PDF's text is longer than the result limit",
    ))
}

impl Tool for WebFetchTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn read_only(&self) -> bool {
        true
    }

    fn call(&self, arguments: &str, ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let args: FetchArgs = parse_args("web_fetch", arguments)?;
        let url = parse_url(&args.url)?;
        let max_bytes = args.max_bytes.unwrap_or(DEFAULT_MAX_BYTES);
        if max_bytes == 0 || max_bytes > MAX_MAX_BYTES {
            return Err(failed(format!(
                "Error: 'max_bytes' must be between 1 and {MAX_MAX_BYTES}."
            )));
        }
        if ctx.interrupt.is_set() {
            return Err(failed("Error: interrupted before the fetch started."));
        }
        let explicit_max = args.max_bytes.is_some();
        fetch(&url, max_bytes, explicit_max, self.cap, &|| {
            ctx.interrupt.is_set()
        })
    }
}

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
