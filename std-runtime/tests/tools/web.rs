//! `web_fetch` against a loopback HTTP server with canned answers: HTML
//! reduced to text, redirects, size caps, interrupts, unreachable ports;
//! and the HTML reducer on odd markup.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use hermes_runtime::tools::html_to_text;
use serde_json::json;

use super::support::Fx;

/// A loopback HTTP/1.1 server with canned answers; one request per
/// connection. Returns the base URL.
fn serve() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                stream
                    .set_read_timeout(Some(Duration::from_secs(30)))
                    .unwrap();
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let req = String::from_utf8_lossy(&req);
                let path = req.split_whitespace().nth(1).unwrap_or("/").to_string();
                if path == "/silent" {
                    // Answers nothing until the client goes away.
                    let _ = stream.read(&mut buf);
                    return;
                }
                let (status, ctype, body): (&str, &str, Vec<u8>) = match path.as_str() {
                    "/page.html" => (
                        "200 OK",
                        "text/html; charset=utf-8",
                        br#"<!DOCTYPE html><html><head><title>Test &amp; Page</title>
<style>body { color: red; }</style><script>var x = "<p>not text</p>";</script></head>
<body><h1>Hello   World</h1><p>Caf&eacute; &lt;3 &#8212; &#x263A;</p>
<!-- a comment --><ul><li>one</li><li>two</li></ul>
<p>a<br>b</p></body></html>"#
                            .to_vec(),
                    ),
                    "/plain.txt" => (
                        "200 OK",
                        "text/plain",
                        b"just   text\n  kept as is\n".to_vec(),
                    ),
                    "/image.png" => (
                        "200 OK",
                        "image/png",
                        vec![0x89, b'P', b'N', b'G', 0, 0, 0, 13],
                    ),
                    "/big.txt" => ("200 OK", "text/plain", vec![b'a'; 200_000]),
                    "/redirect" | "/loop" => ("302 Found", "text/plain", Vec::new()),
                    "/caf%C3%A9%20menu" => ("200 OK", "text/plain", b"encoded".to_vec()),
                    _ => ("404 Not Found", "text/plain", b"no such page".to_vec()),
                };
                let mut head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n",
                    body.len()
                );
                if path == "/redirect" {
                    head.push_str("Location: /plain.txt\r\n");
                }
                if path == "/loop" {
                    head.push_str("Location: /loop\r\n");
                }
                head.push_str("\r\n");
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(&body);
            });
        }
    });
    format!("http://{addr}")
}

pub(crate) fn web_fx() -> Fx {
    Fx::with(|_| {}, Some(&["web"]))
}

#[test]
fn web_fetch_reduces_html() {
    let base = serve();
    let fx = web_fx();
    let out = fx.ok("web_fetch", json!({"url": format!("{base}/page.html")}));
    assert!(
        out.starts_with(&format!("URL: {base}/page.html\n")),
        "{out}"
    );
    let text = out.split_once("\n\n").unwrap().1;
    assert_eq!(
        text,
        "Test & Page\n\nHello World\n\nCafé <3 — ☺\n\n- one\n- two\n\na\nb"
    );
    assert!(!out.contains("color: red"));
    assert!(!out.contains("not text"));
}

#[test]
fn web_fetch_text_redirects_and_errors() {
    let base = serve();
    let fx = web_fx();
    let out = fx.ok("web_fetch", json!({"url": format!("{base}/plain.txt")}));
    assert!(out.ends_with("\n\njust   text\n  kept as is\n"), "{out}");
    let out = fx.ok("web_fetch", json!({"url": format!("{base}/redirect")}));
    assert!(
        out.starts_with(&format!("URL: {base}/plain.txt\n")),
        "{out}"
    );

    let m = fx.err("web_fetch", json!({"url": format!("{base}/image.png")}));
    assert!(m.contains("binary content (image/png"), "{m}");
    let m = fx.err("web_fetch", json!({"url": format!("{base}/missing")}));
    assert!(m.contains("HTTP 404") && m.contains("no such page"), "{m}");
    let m = fx.err("web_fetch", json!({"url": "file:///etc/passwd"}));
    assert!(m.contains("only http and https"), "{m}");
    let m = fx.err("web_fetch", json!({"url": "ftp://example.invalid/x"}));
    assert!(m.contains("only http and https"), "{m}");
    let m = fx.err("web_fetch", json!({"url": "not a url"}));
    assert!(m.contains("not a valid URL"), "{m}");
}

#[test]
fn web_fetch_size_caps() {
    let base = serve();
    let fx = web_fx();
    let out = fx.ok(
        "web_fetch",
        json!({"url": format!("{base}/big.txt"), "max_bytes": 1000}),
    );
    assert!(
        out.contains("[download stopped at 1000 bytes (max_bytes); the page is longer]"),
        "{out}"
    );
    let body = out.split_once("\n\n").unwrap().1;
    assert!(
        body.starts_with(&format!("{}\n[download stopped", "a".repeat(1000))),
        "{body}"
    );

    // Without max_bytes the result cap cuts it, visibly.
    let out = fx.ok("web_fetch", json!({"url": format!("{base}/big.txt")}));
    assert!(out.len() <= hermes_runtime::tools::DEFAULT_RESULT_CAP_BYTES);
    assert!(
        out.contains("[output truncated: "),
        "{}",
        &out[out.len() - 200..]
    );
}

#[test]
fn web_fetch_gives_up_on_a_redirect_loop() {
    let base = serve();
    let fx = web_fx();
    let m = fx.err("web_fetch", json!({"url": format!("{base}/loop")}));
    assert!(m.contains("too many redirects"), "{m}");
}

#[test]
fn web_fetch_encodes_what_http_cannot_carry() {
    let base = serve();
    let fx = web_fx();
    let out = fx.ok("web_fetch", json!({"url": format!("{base}/café menu")}));
    assert!(out.ends_with("\n\nencoded"), "{out}");
}

#[test]
fn web_fetch_stops_within_a_tick_of_an_interrupt() {
    let base = serve();
    let fx = web_fx();
    let flag = fx.interrupt.clone();
    let setter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        flag.interrupt();
    });
    let started = std::time::Instant::now();
    let m = fx.err("web_fetch", json!({"url": format!("{base}/silent")}));
    setter.join().unwrap();
    assert!(m.contains("interrupted"), "{m}");
    // The server never answers; without the interrupt this is the 30 s
    // request timeout.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn web_fetch_unreachable_port_is_a_clear_error() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let fx = web_fx();
    let m = fx.err(
        "web_fetch",
        json!({"url": format!("http://127.0.0.1:{port}/")}),
    );
    assert!(m.contains("fetching") && m.contains("failed"), "{m}");
}

#[test]
fn html_reducer_handles_odd_markup() {
    assert_eq!(html_to_text("a < b and c > d"), "a < b and c > d");
    assert_eq!(html_to_text("<p>unclosed <b>bold"), "unclosed bold");
    assert_eq!(
        html_to_text("<a href=\"x>y\">link</a> &unknown; &amp"),
        "link &unknown; &amp"
    );
    assert_eq!(
        html_to_text("<table><tr><td>a</td><td>b</td></tr></table>"),
        "a | b"
    );
    assert_eq!(html_to_text("<pre>  x\n    y</pre>"), "  x\n    y");
}
