//! `web_search` against loopback fakes of each backend, answering with the
//! response shapes the services document (`tests/fixtures/web_search/`).
//! Each fake checks the request the way the real service would (method,
//! path, parameters, the key's header) and refuses anything else.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use hermes_core::{InterruptFlag, IterationBudget, Tool, ToolContext, ToolError};
use hermes_runtime::tools::{SearchBackend, WebSearchSettings, WebSearchTool};

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/web_search")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One request as the fake saw it.
#[derive(Clone, Debug, Default)]
struct Seen {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn query(&self) -> Vec<(String, String)> {
        let q = self.target.split_once('?').map_or("", |(_, q)| q);
        form_urlencoded::parse(q.as_bytes()).into_owned().collect()
    }
}

type Check = Box<dyn Fn(&Seen) -> Result<(), String> + Send + Sync>;

/// A loopback HTTP/1.1 server: one request per connection, answered with
/// `(status, content type, body)` when `check` accepts the request, 400
/// with the reason otherwise.
struct Fake {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Fake {
    fn start(status: u16, content_type: &'static str, body: Vec<u8>, check: Check) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                let mut parts = line.split_whitespace();
                let mut req = Seen {
                    method: parts.next().unwrap_or("").to_owned(),
                    target: parts.next().unwrap_or("").to_owned(),
                    ..Seen::default()
                };
                let mut length = 0usize;
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
                        break;
                    }
                    if let Some((k, v)) = h.trim_end().split_once(':') {
                        if k.eq_ignore_ascii_case("content-length") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                        req.headers.push((k.trim().to_owned(), v.trim().to_owned()));
                    }
                }
                let mut body_in = vec![0u8; length];
                let _ = reader.read_exact(&mut body_in);
                req.body = String::from_utf8_lossy(&body_in).into_owned();
                let (status, ctype, body) = match check(&req) {
                    Ok(()) => (status, content_type, body.clone()),
                    Err(why) => (400, "text/plain", why.into_bytes()),
                };
                log.lock().unwrap().push(req);
                let head = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(&body);
            }
        });
        Fake { base, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn search(settings: WebSearchSettings, args: serde_json::Value) -> Result<String, ToolError> {
    let tool = WebSearchTool::new(settings, 50_000);
    let budget = IterationBudget::new(10);
    let interrupt = InterruptFlag::new();
    let ctx = ToolContext {
        budget: &budget,
        interrupt: &interrupt,
        tool_call_id: "c1",
    };
    tool.call(&args.to_string(), &ctx)
}

fn query() -> serde_json::Value {
    serde_json::json!({"query": "rust async runtime"})
}

#[test]
fn searxng_json_api_gives_a_numbered_list() {
    let fake = Fake::start(
        200,
        "application/json",
        fixture("searxng.json"),
        Box::new(|r| {
            let q = r.query();
            let has = |k: &str, v: &str| q.iter().any(|(a, b)| a == k && b == v);
            if r.method != "GET" || !r.target.starts_with("/search?") {
                return Err(format!("unexpected {} {}", r.method, r.target));
            }
            if !has("q", "rust async runtime") || !has("format", "json") {
                return Err(format!("bad query {q:?}"));
            }
            Ok(())
        }),
    );
    let settings = WebSearchSettings {
        backend: Some(SearchBackend::Searxng),
        searxng_url: Some(format!("{}/", fake.base)),
        ..WebSearchSettings::default()
    };
    let out = search(
        settings,
        serde_json::json!({"query": "rust async runtime", "max_results": 2}),
    )
    .unwrap();
    assert_eq!(
        out,
        "Results for \"rust async runtime\" (via searxng):\n\
         1. Tokio - An asynchronous Rust runtime\n   https://tokio.rs/\n   Tokio is an asynchronous \
         runtime for the Rust programming language. It provides the building blocks needed for \
         writing network applications.\n\
         2. Asynchronous Programming in Rust\n   https://rust-lang.github.io/async-book/\n   This \
         book aims to be a thorough guide to asynchronous programming in Rust, from beginner to \
         advanced.\n\
         Read a page with web_fetch on its URL."
    );
    assert_eq!(fake.seen().len(), 1);
}

#[test]
fn brave_sends_its_key_in_the_header_and_loses_the_markup() {
    let key = "BSA-test-key-0123456789";
    let fake = Fake::start(
        200,
        "application/json",
        fixture("brave.json"),
        Box::new(move |r| {
            if r.header("x-subscription-token") != Some(key) {
                return Err("missing or wrong X-Subscription-Token".into());
            }
            if !r.query().iter().any(|(k, v)| k == "count" && v == "5") {
                return Err("count missing".into());
            }
            if r.target.contains(key) {
                return Err("the key is in the URL".into());
            }
            Ok(())
        }),
    );
    let settings = WebSearchSettings {
        backend: Some(SearchBackend::Brave),
        brave_api_key: Some(key.into()),
        brave_url: Some(format!("{}/res/v1/web/search", fake.base)),
        ..WebSearchSettings::default()
    };
    let out = search(settings, query()).unwrap();
    assert!(
        out.contains("1. Tokio - An asynchronous Rust runtime\n   https://tokio.rs/\n"),
        "{out}"
    );
    assert!(
        out.contains("Rust programming language. It's fast & reliable."),
        "{out}"
    );
    assert!(
        !out.contains("<strong>") && !out.contains("&#x27;"),
        "{out}"
    );
    assert!(
        out.contains("2. async-std\n   https://async.rs/\n   Async version of the Rust standard library. Stable since 2019."),
        "extra snippets stand in for an empty description: {out}"
    );
    assert_eq!(fake.seen()[0].method, "GET");
}

#[test]
fn tavily_posts_the_query_with_a_bearer_key() {
    let key = "tvly-test-key-0123456789";
    let fake = Fake::start(
        200,
        "application/json",
        fixture("tavily.json"),
        Box::new(move |r| {
            if r.method != "POST" || r.target != "/search" {
                return Err(format!("unexpected {} {}", r.method, r.target));
            }
            if r.header("authorization") != Some(&format!("Bearer {key}")) {
                return Err("bad Authorization".into());
            }
            let body: serde_json::Value =
                serde_json::from_str(&r.body).map_err(|e| e.to_string())?;
            if body["query"] != "rust async runtime" || body["max_results"] != 3 {
                return Err(format!("bad body {body}"));
            }
            Ok(())
        }),
    );
    let settings = WebSearchSettings {
        tavily_api_key: Some(key.into()),
        tavily_url: Some(format!("{}/search", fake.base)),
        ..WebSearchSettings::default()
    };
    assert_eq!(
        settings.effective_backend(),
        SearchBackend::Tavily,
        "picked by its key"
    );
    let out = search(
        settings,
        serde_json::json!({"query": "rust async runtime", "max_results": 3}),
    )
    .unwrap();
    assert!(
        out.starts_with("Results for \"rust async runtime\" (via tavily):\n1. Tutorial | Tokio"),
        "{out}"
    );
    assert!(
        out.contains("2. Why async Rust?\n   https://without.boats/blog/why-async-rust/\n"),
        "{out}"
    );
}

#[test]
fn duckduckgo_html_is_parsed_without_ads() {
    let fake = Fake::start(
        200,
        "text/html; charset=UTF-8",
        fixture("duckduckgo.html"),
        Box::new(|r| {
            if r.method != "POST" {
                return Err("the HTML endpoint takes a POSTed form".into());
            }
            if !r
                .header("content-type")
                .is_some_and(|c| c.starts_with("application/x-www-form-urlencoded"))
            {
                return Err("not a form".into());
            }
            let form: Vec<(String, String)> = form_urlencoded::parse(r.body.as_bytes())
                .into_owned()
                .collect();
            if form != [("q".to_owned(), "rust async runtime".to_owned())] {
                return Err(format!("bad form {form:?}"));
            }
            Ok(())
        }),
    );
    let settings = WebSearchSettings {
        duckduckgo_url: Some(format!("{}/html/", fake.base)),
        ..WebSearchSettings::default()
    };
    assert_eq!(
        settings.effective_backend(),
        SearchBackend::DuckDuckGo,
        "the keyless default"
    );
    let out = search(settings, query()).unwrap();
    assert_eq!(
        out,
        "Results for \"rust async runtime\" (via duckduckgo):\n\
         1. Tokio - An asynchronous Rust runtime\n   https://tokio.rs/\n   Tokio is an asynchronous \
         runtime for the Rust programming language. It's fast & reliable.\n\
         2. Asynchronous Programming in Rust\n   https://rust-lang.github.io/async-book/?lang=en&v=2\n   \
         This book aims to be a thorough guide to asynchronous programming in Rust.\n\
         3. smol - Rust\n   https://docs.rs/smol/\n\
         Read a page with web_fetch on its URL."
    );
}

fn searxng_answering(status: u16, ctype: &'static str, body: Vec<u8>) -> (Fake, WebSearchSettings) {
    let fake = Fake::start(status, ctype, body, Box::new(|_| Ok(())));
    let settings = WebSearchSettings {
        searxng_url: Some(fake.base.clone()),
        ..WebSearchSettings::default()
    };
    (fake, settings)
}

#[test]
fn failures_are_clear_and_never_show_the_key() {
    let (_f, s) = searxng_answering(403, "text/html", b"<h1>Forbidden</h1>".to_vec());
    let e = search(s, query()).unwrap_err().to_string();
    assert!(
        e.contains("HTTP 403") && e.contains("search.formats"),
        "{e}"
    );

    let key = "BSA-secret-key-987654321";
    let fake = Fake::start(
        401,
        "application/json",
        br#"{"error":"bad key"}"#.to_vec(),
        Box::new(|_| Ok(())),
    );
    let s = WebSearchSettings {
        backend: Some(SearchBackend::Brave),
        brave_api_key: Some(key.into()),
        brave_url: Some(fake.base.clone()),
        ..WebSearchSettings::default()
    };
    let e = search(s, query()).unwrap_err().to_string();
    assert!(e.contains("API key was refused"), "{e}");
    assert!(!e.contains(key), "{e}");

    let (_f, s) = searxng_answering(429, "text/plain", b"slow down".to_vec());
    assert!(
        search(s, query())
            .unwrap_err()
            .to_string()
            .contains("rate limited")
    );

    let (_f, s) = searxng_answering(200, "application/json", b"<html>not json</html>".to_vec());
    let e = search(s, query()).unwrap_err().to_string();
    assert!(e.contains("not a search result"), "{e}");

    let (_f, s) = searxng_answering(200, "application/json", br#"{"results": []}"#.to_vec());
    assert_eq!(
        search(s, query()).unwrap(),
        "No results for \"rust async runtime\" (via searxng). Try other words."
    );

    let anomaly = br#"<html><body><div class="anomaly-modal__title">Unfortunately, bots use DuckDuckGo too.</div></body></html>"#;
    let fake = Fake::start(202, "text/html", anomaly.to_vec(), Box::new(|_| Ok(())));
    let s = WebSearchSettings {
        duckduckgo_url: Some(fake.base.clone()),
        ..WebSearchSettings::default()
    };
    let e = search(s, query()).unwrap_err().to_string();
    assert!(e.contains("bot check"), "{e}");

    // Nothing listens: a clear connection error.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let s = WebSearchSettings {
        searxng_url: Some(format!("http://{closed}")),
        ..WebSearchSettings::default()
    };
    let e = search(s, query()).unwrap_err().to_string();
    assert!(e.contains("searching with searxng failed"), "{e}");
}

#[test]
fn oversized_answers_and_bad_arguments_are_refused() {
    let huge = format!(
        r#"{{"results": [], "pad": "{}"}}"#,
        "x".repeat(3 * 1024 * 1024)
    );
    let (_f, s) = searxng_answering(200, "application/json", huge.into_bytes());
    let e = search(s.clone(), query()).unwrap_err().to_string();
    assert!(e.contains("reading searxng's answer failed"), "{e}");

    let e = search(s.clone(), serde_json::json!({"query": "  "}))
        .unwrap_err()
        .to_string();
    assert!(e.contains("'query' is empty"), "{e}");
    let e = search(s, serde_json::json!({"query": "x", "max_results": 50}))
        .unwrap_err()
        .to_string();
    assert!(e.contains("max_results"), "{e}");
}
