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

use std::io::Read;
use std::time::Duration;

use hermes_core::{Tool, ToolContext, ToolError, ToolSpec, schema_text};
use serde::Deserialize;
use ureq::ResponseExt;

use super::html_text::html_to_text;
use super::{bounded_spec, failed, parse_args};
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
            spec: bounded_spec(
                "web_fetch",
                WEB_FETCH_DESCRIPTION,
                schema_text!(
                    r#"{
                    "type": "object",
                    "properties": {
                        "url": {"type": "string", "description": "An http:// or https:// URL."},
                        "max_bytes": {"type": "integer", "minimum": 1, "maximum": 10485760, "description": "Stop downloading after this many bytes. Default 1048576."}
                    },
                    "required": ["url"]
                }"#,
                ),
                &[("max_bytes", "maximum", MAX_MAX_BYTES as u64)],
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
