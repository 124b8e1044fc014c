//! `web_search`: a query in, a short numbered list out (title, URL,
//! snippet), which the model follows up with `web_fetch`.
//!
//! Backends (`[web] search_backend`):
//! - `searxng` — a SearXNG instance's JSON API (`[web] searxng_url`, or
//!   `SEARXNG_URL`): self-hosted, no key; fits small boards. The instance
//!   must allow `json` in `search.formats`.
//! - `brave` — the Brave Search API (`BRAVE_API_KEY`).
//! - `tavily` — the Tavily search API (`TAVILY_API_KEY`).
//! - `duckduckgo` — DuckDuckGo's keyless HTML endpoint, parsed with a
//!   WHATWG tokenizer (`html5gum`). Needs nothing; may be rate-limited.
//!
//! Unset (or `auto`): the first of searxng, brave, tavily that is
//! configured, else duckduckgo.
//!
//! One blocking ureq request per call (the tool runs on the loop's thread;
//! no async needed), bounded in time ([`REQUEST_TIMEOUT`]) and size
//! ([`MAX_BODY`]). API keys travel in headers only and appear in no error
//! or log line.

use crate::tools::html_scan::{Piece, scan};
use std::fmt;
use std::time::Duration;

use hermes_core::{Tool, ToolContext, ToolError, ToolSpec, schema_text};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{bounded_spec, failed, parse_args};
use crate::http;
use crate::secret::Secret;
use crate::spill::cap_result;

/// The whole request, connect to last byte.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// The largest response body read.
pub const MAX_BODY: u64 = 2 * 1024 * 1024;
const DEFAULT_RESULTS: usize = 5;
const MAX_RESULTS: usize = 20;
/// Longest snippet shown per result, in characters.
const SNIPPET_CHARS: usize = 300;

/// Brave's public endpoint.
pub const BRAVE_URL: &str = "https://api.search.brave.com/res/v1/web/search";
/// Tavily's public endpoint.
pub const TAVILY_URL: &str = "https://api.tavily.com/search";
/// DuckDuckGo's keyless HTML endpoint.
pub const DUCKDUCKGO_URL: &str = "https://html.duckduckgo.com/html/";

/// Which service answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SearchBackend {
    /// A SearXNG instance (JSON API).
    Searxng,
    /// The Brave Search API.
    Brave,
    /// The Tavily API.
    Tavily,
    /// DuckDuckGo's HTML endpoint.
    DuckDuckGo,
}

/// A `[web] search_backend` value that names no backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown search backend '{0}'")]
pub struct UnknownBackend(pub String);

impl SearchBackend {
    /// Parses `[web] search_backend` (`None` for `auto`).
    pub fn parse(value: &str) -> Result<Option<SearchBackend>, UnknownBackend> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(None),
            "searxng" => Ok(Some(SearchBackend::Searxng)),
            "brave" => Ok(Some(SearchBackend::Brave)),
            "tavily" => Ok(Some(SearchBackend::Tavily)),
            "duckduckgo" | "ddg" => Ok(Some(SearchBackend::DuckDuckGo)),
            _ => Err(UnknownBackend(value.to_owned())),
        }
    }

    /// Its name in configuration and results.
    pub fn name(self) -> &'static str {
        match self {
            SearchBackend::Searxng => "searxng",
            SearchBackend::Brave => "brave",
            SearchBackend::Tavily => "tavily",
            SearchBackend::DuckDuckGo => "duckduckgo",
        }
    }
}

/// How searches are made. Keys are [`Secret`]s: `Debug` masks them.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct WebSearchSettings {
    /// The chosen backend; `None`: pick from what is configured.
    pub backend: Option<SearchBackend>,
    /// The SearXNG instance, e.g. `http://127.0.0.1:8888`.
    pub searxng_url: Option<String>,
    /// `BRAVE_API_KEY`.
    pub brave_api_key: Option<Secret>,
    /// `TAVILY_API_KEY`.
    pub tavily_api_key: Option<Secret>,
    /// Endpoint overrides (a proxy, a test server); `None`: the public one.
    pub brave_url: Option<String>,
    /// See `brave_url`.
    pub tavily_url: Option<String>,
    /// See `brave_url`.
    pub duckduckgo_url: Option<String>,
}

impl fmt::Debug for WebSearchSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The endpoint overrides are left out: a proxy's URL may carry a
        // password. The keys are `Secret`s, shown masked.
        f.debug_struct("WebSearchSettings")
            .field("backend", &self.backend)
            .field("searxng_url", &self.searxng_url)
            .field("brave_api_key", &self.brave_api_key)
            .field("tavily_api_key", &self.tavily_api_key)
            .finish_non_exhaustive()
    }
}

impl WebSearchSettings {
    /// The backend a search uses: the configured one, or the first that is
    /// set up (searxng, brave, tavily), else duckduckgo.
    pub fn effective_backend(&self) -> SearchBackend {
        if let Some(b) = self.backend {
            return b;
        }
        if self.searxng_url.is_some() {
            SearchBackend::Searxng
        } else if self.brave_api_key.is_some() {
            SearchBackend::Brave
        } else if self.tavily_api_key.is_some() {
            SearchBackend::Tavily
        } else {
            SearchBackend::DuckDuckGo
        }
    }

    /// What a configured backend still lacks, if anything.
    pub fn missing(&self) -> Option<&'static str> {
        match self.effective_backend() {
            SearchBackend::Searxng if self.searxng_url.is_none() => {
                Some("[web] searxng_url (or SEARXNG_URL)")
            }
            SearchBackend::Brave if self.brave_api_key.is_none() => Some("BRAVE_API_KEY"),
            SearchBackend::Tavily if self.tavily_api_key.is_none() => Some("TAVILY_API_KEY"),
            _ => None,
        }
    }
}

/// One hit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchHit {
    /// The page title.
    pub title: String,
    /// Where it is.
    pub url: String,
    /// What the engine quoted from it.
    pub snippet: String,
}

/// Searches the web.
#[derive(Debug)]
pub struct WebSearchTool {
    spec: ToolSpec,
    settings: WebSearchSettings,
    cap: usize,
}

#[derive(Deserialize)]
pub(crate) struct WebSearchArgs {
    query: String,
    #[serde(default)]
    max_results: Option<usize>,
}

/// One search's limits on the process's shared HTTP agent (one pool, one
/// TLS stack; see `crate::http`).
fn limits<B>(request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
    request
        .config()
        .timeout_global(Some(REQUEST_TIMEOUT))
        .max_redirects(3)
        .build()
}

impl WebSearchTool {
    /// A tool searching with `settings`; results capped at `cap` bytes.
    pub fn new(settings: WebSearchSettings, cap: usize) -> Self {
        WebSearchTool {
            spec: bounded_spec(
                "web_search",
                "Search the web. Returns a numbered list of results (title, URL, snippet); read \
                 a result in full with web_fetch on its URL.",
                schema_text!(
                    r#"{
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "description": "What to search for."},
                        "max_results": {"type": "integer", "minimum": 1, "maximum": 20, "description": "How many results (default 5)."}
                    },
                    "required": ["query"]
                }"#,
                ),
                &[("max_results", "maximum", MAX_RESULTS as u64)],
            ),
            settings,
            cap,
        }
    }
}

impl Tool for WebSearchTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn read_only(&self) -> bool {
        true
    }

    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let args: WebSearchArgs = parse_args("web_search", arguments)?;
        let query = args.query.trim();
        if query.is_empty() {
            return Err(failed("Error: 'query' is empty."));
        }
        let count = args.max_results.unwrap_or(DEFAULT_RESULTS);
        if count == 0 || count > MAX_RESULTS {
            return Err(failed(format!(
                "Error: 'max_results' must be between 1 and {MAX_RESULTS} (got {count})."
            )));
        }
        let backend = self.settings.effective_backend();
        if let Some(missing) = self.settings.missing() {
            return Err(failed(format!(
                "Error: web search is set to {} but {missing} is not set; tell the user.",
                backend.name()
            )));
        }
        let hits = self.search(backend, query, count)?;
        Ok(cap_result(
            format_hits(query, backend, &hits, count),
            self.cap,
            "ask for fewer results",
        ))
    }
}

/// The numbered list the model reads.
pub fn format_hits(
    query: &str,
    backend: SearchBackend,
    hits: &[SearchHit],
    count: usize,
) -> String {
    if hits.is_empty() {
        return format!(
            "No results for \"{query}\" (via {}). Try other words.",
            backend.name()
        );
    }
    let mut out = format!("Results for \"{query}\" (via {}):\n", backend.name());
    for (i, hit) in hits.iter().take(count).enumerate() {
        out.push_str(&format!("{}. {}\n   {}\n", i + 1, hit.title, hit.url));
        if !hit.snippet.is_empty() {
            out.push_str(&format!("   {}\n", hit.snippet));
        }
    }
    out.push_str("Read a page with web_fetch on its URL.");
    out
}

impl WebSearchTool {
    fn search(
        &self,
        backend: SearchBackend,
        query: &str,
        count: usize,
    ) -> Result<Vec<SearchHit>, ToolError> {
        let s = &self.settings;
        // A pooled connection the service closed meanwhile is sent on
        // again, fresh (`http::send_fresh_if_stale`).
        let response = http::send_fresh_if_stale(|| match backend {
            SearchBackend::Searxng => {
                let base = s.searxng_url.as_deref().unwrap_or_default();
                let url = format!(
                    "{}/search?{}",
                    base.trim_end_matches('/'),
                    form_urlencoded::Serializer::new(String::new())
                        .append_pair("q", query)
                        .append_pair("format", "json")
                        .finish()
                );
                limits(http::agent().get(&url))
                    .header("Accept", "application/json")
                    .call()
            }
            SearchBackend::Brave => {
                let url = format!(
                    "{}?{}",
                    s.brave_url.as_deref().unwrap_or(BRAVE_URL),
                    form_urlencoded::Serializer::new(String::new())
                        .append_pair("q", query)
                        .append_pair("count", &count.to_string())
                        .finish()
                );
                limits(http::agent().get(&url))
                    .header("Accept", "application/json")
                    .header(
                        "X-Subscription-Token",
                        s.brave_api_key.as_ref().map_or("", Secret::expose),
                    )
                    .call()
            }
            SearchBackend::Tavily => {
                limits(http::agent().post(s.tavily_url.as_deref().unwrap_or(TAVILY_URL)))
                    .header("Accept", "application/json")
                    .header(
                        "Authorization",
                        &format!(
                            "Bearer {}",
                            s.tavily_api_key.as_ref().map_or("", Secret::expose)
                        ),
                    )
                    .send_json(
                        json!({"query": query, "max_results": count, "search_depth": "basic"}),
                    )
            }
            SearchBackend::DuckDuckGo => {
                limits(http::agent().post(s.duckduckgo_url.as_deref().unwrap_or(DUCKDUCKGO_URL)))
                    .header("Accept", "text/html")
                    .send_form([("q", query)])
            }
        });
        let name = backend.name();
        let mut response = response.map_err(|e| {
            let why = match e {
                ureq::Error::Timeout(_) => format!("no answer within {REQUEST_TIMEOUT:?}"),
                ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => {
                    format!("could not connect ({e})")
                }
                other => other.to_string(),
            };
            failed(format!("Error: searching with {name} failed: {why}."))
        })?;
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_vec()
            .map_err(|e| failed(format!("Error: reading {name}'s answer failed: {e}.")))?;
        if !(200..300).contains(&status) {
            return Err(failed(status_error(backend, status, &body)));
        }
        let hits = match backend {
            SearchBackend::Searxng => parse_searxng(&body),
            SearchBackend::Brave => parse_brave(&body),
            SearchBackend::Tavily => parse_tavily(&body),
            SearchBackend::DuckDuckGo => Ok(parse_duckduckgo(&body)),
        }
        .map_err(|e| {
            failed(format!(
                "Error: {name} answered something that is not a search result: {e}."
            ))
        })?;
        if hits.is_empty()
            && backend == SearchBackend::DuckDuckGo
            && String::from_utf8_lossy(&body).contains("anomaly")
        {
            return Err(failed(
                "Error: DuckDuckGo refused the search (its bot check). Try again later, or ask the \
                 user to configure SearXNG, Brave or Tavily ([web] search_backend).",
            ));
        }
        Ok(hits)
    }
}

fn status_error(backend: SearchBackend, status: u16, body: &[u8]) -> String {
    let name = backend.name();
    let hint = match (backend, status) {
        (SearchBackend::Searxng, 403) => {
            " (the SearXNG instance does not allow the JSON format: add `json` to search.formats \
             in its settings.yml)"
                .to_owned()
        }
        (_, 401 | 403) => " (the API key was refused; tell the user)".to_owned(),
        (_, 429) => " (rate limited; try again later)".to_owned(),
        _ => {
            let text = String::from_utf8_lossy(&body[..body.len().min(200)]);
            let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            if text.is_empty() {
                String::new()
            } else {
                format!(": {text}")
            }
        }
    };
    format!("Error: {name} answered HTTP {status}{hint}.")
}

/// Plain text of an HTML fragment (tags dropped, entities decoded,
/// whitespace collapsed), cut to `max` characters.
fn plain(fragment: &str, max: usize) -> String {
    let mut text = String::new();
    if fragment.contains(['<', '&']) {
        for piece in scan(fragment) {
            if let Piece::Text(s) = piece {
                text.push_str(&s);
            }
        }
    } else {
        text.push_str(fragment);
    }
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.chars().count() <= max {
        return collapsed;
    }
    let mut cut: String = collapsed.chars().take(max).collect();
    cut.push('…');
    cut
}

fn hit(title: &str, url: &str, snippet: &str) -> Option<SearchHit> {
    let url = url.trim();
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return None;
    }
    let title = plain(title, 200);
    Some(SearchHit {
        title: if title.is_empty() {
            url.to_owned()
        } else {
            title
        },
        url: url.to_owned(),
        snippet: plain(snippet, SNIPPET_CHARS),
    })
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn results_of<'a>(v: &'a Value, path: &[&str]) -> Result<&'a Vec<Value>, String> {
    let mut cur = v;
    for key in path {
        cur = cur
            .get(key)
            .ok_or_else(|| format!("no '{}' in the answer", path.join(".")))?;
    }
    cur.as_array()
        .ok_or_else(|| format!("'{}' is not a list", path.join(".")))
}

/// SearXNG's `/search?format=json`: `results[].{title, url, content}`.
pub fn parse_searxng(body: &[u8]) -> Result<Vec<SearchHit>, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    Ok(results_of(&v, &["results"])?
        .iter()
        .filter_map(|r| hit(str_of(r, "title"), str_of(r, "url"), str_of(r, "content")))
        .collect())
}

/// Brave's web search: `web.results[].{title, url, description}`
/// (HTML in titles and descriptions). No `web` at all means no results.
pub fn parse_brave(body: &[u8]) -> Result<Vec<SearchHit>, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if v.get("web").is_none() {
        return match v.get("type").and_then(Value::as_str) {
            Some("search") => Ok(Vec::new()),
            _ => Err("no 'web' results in the answer".into()),
        };
    }
    Ok(results_of(&v, &["web", "results"])?
        .iter()
        .filter_map(|r| {
            let mut snippet = str_of(r, "description").to_owned();
            if snippet.is_empty()
                && let Some(extra) = r.get("extra_snippets").and_then(Value::as_array)
            {
                snippet = extra
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(" ");
            }
            hit(str_of(r, "title"), str_of(r, "url"), &snippet)
        })
        .collect())
}

/// Tavily's `/search`: `results[].{title, url, content}`.
pub fn parse_tavily(body: &[u8]) -> Result<Vec<SearchHit>, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    Ok(results_of(&v, &["results"])?
        .iter()
        .filter_map(|r| hit(str_of(r, "title"), str_of(r, "url"), str_of(r, "content")))
        .collect())
}

/// The target of a DuckDuckGo result link: `//duckduckgo.com/l/?uddg=URL&…`
/// carries it percent-encoded; ads go through `/y.js` and are dropped.
fn ddg_target(href: &str) -> Option<String> {
    let href = href.trim();
    if href.contains("duckduckgo.com/y.js") || href.contains("ad_domain=") {
        return None;
    }
    if let Some((_, query)) = href.split_once('?')
        && href.contains("/l/")
    {
        return form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == "uddg")
            .map(|(_, v)| v.into_owned());
    }
    (href.starts_with("http://") || href.starts_with("https://")).then(|| href.to_owned())
}

/// DuckDuckGo's HTML results: each result's `a.result__a` (title, link)
/// followed by its `.result__snippet`.
pub fn parse_duckduckgo(body: &[u8]) -> Vec<SearchHit> {
    #[derive(PartialEq)]
    enum In {
        Nothing,
        Title,
        Snippet,
    }
    let mut hits: Vec<SearchHit> = Vec::new();
    let mut pending: Option<(String, String)> = None; // (url, title)
    let mut text = String::new();
    let mut inside = In::Nothing;
    let mut depth = 0usize;
    let flush =
        |hits: &mut Vec<SearchHit>, pending: &mut Option<(String, String)>, snippet: &str| {
            if let Some((url, title)) = pending.take()
                && let Some(h) = hit(&title, &url, snippet)
            {
                hits.push(h);
            }
        };
    for piece in scan(&String::from_utf8_lossy(body)) {
        match piece {
            Piece::Start {
                ref name,
                self_closing,
                ..
            } => {
                if inside != In::Nothing {
                    if !self_closing && !is_void(name) {
                        depth += 1;
                    }
                    continue;
                }
                let class = piece.attribute("class").unwrap_or_default();
                let classes: Vec<&str> = class.split_whitespace().collect();
                if name == "a" && classes.contains(&"result__a") {
                    // A new result: the previous one had no snippet.
                    flush(&mut hits, &mut pending, "");
                    let href = piece.attribute("href").unwrap_or_default();
                    if let Some(url) = ddg_target(href) {
                        pending = Some((url, String::new()));
                        inside = In::Title;
                        depth = 0;
                        text.clear();
                    }
                } else if classes.contains(&"result__snippet") && pending.is_some() {
                    inside = In::Snippet;
                    depth = 0;
                    text.clear();
                }
            }
            Piece::End if inside != In::Nothing => {
                if depth > 0 {
                    depth -= 1;
                    continue;
                }
                match inside {
                    In::Title => {
                        if let Some(p) = pending.as_mut() {
                            p.1 = std::mem::take(&mut text);
                        }
                    }
                    In::Snippet => {
                        let snippet = std::mem::take(&mut text);
                        flush(&mut hits, &mut pending, &snippet);
                    }
                    In::Nothing => {}
                }
                inside = In::Nothing;
            }
            Piece::Text(s) if inside != In::Nothing => text.push_str(&s),
            _ => {}
        }
    }
    flush(&mut hits, &mut pending, "");
    hits
}

/// Elements that never have an end tag (`<br>`, `<img …>`): they open no
/// level inside a result.
fn is_void(name: &str) -> bool {
    matches!(
        name,
        "br" | "img" | "hr" | "input" | "meta" | "link" | "wbr" | "source" | "area" | "col"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_is_chosen_from_what_is_configured() {
        let mut s = WebSearchSettings::default();
        assert_eq!(s.effective_backend(), SearchBackend::DuckDuckGo);
        s.tavily_api_key = Some("tvly-123456789".into());
        assert_eq!(s.effective_backend(), SearchBackend::Tavily);
        s.brave_api_key = Some("brave-123456789".into());
        assert_eq!(s.effective_backend(), SearchBackend::Brave);
        s.searxng_url = Some("http://127.0.0.1:8888".into());
        assert_eq!(s.effective_backend(), SearchBackend::Searxng);
        let shown = format!("{s:?}");
        assert!(!shown.contains("123456789"), "{shown}");
        let brave_without_key = WebSearchSettings {
            backend: Some(SearchBackend::Brave),
            ..WebSearchSettings::default()
        };
        assert_eq!(brave_without_key.missing(), Some("BRAVE_API_KEY"));
    }

    #[test]
    fn snippets_lose_markup_and_keep_their_words() {
        assert_eq!(
            plain(
                "The <strong>Rust</strong> &amp; its   <em>book</em>&#x27;s",
                100
            ),
            "The Rust & its book's"
        );
        assert_eq!(plain("abcdef", 3), "abc…");
    }

    #[test]
    fn ddg_links_are_unwrapped_and_ads_dropped() {
        assert_eq!(
            ddg_target("//duckduckgo.com/l/?uddg=https%3A%2F%2Fwww.rust-lang.org%2F&rut=abc")
                .as_deref(),
            Some("https://www.rust-lang.org/")
        );
        assert_eq!(
            ddg_target("https://duckduckgo.com/y.js?ad_domain=x.com&u3=1"),
            None
        );
        assert_eq!(
            ddg_target("https://example.com/a").as_deref(),
            Some("https://example.com/a")
        );
    }
}
