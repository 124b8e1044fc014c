//! A recording HTTP proxy on 127.0.0.1: forwards every request to an
//! upstream server unchanged (but with `Connection: close`, so each
//! connection carries one exchange) and keeps the request as sent.
//!
//! aimock journals its *converted* view of an Anthropic request; the tests
//! that check the raw Messages body against the Anthropic schema read it
//! here instead.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// One forwarded request.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }
}

/// The proxy; dropping it stops accepting.
pub struct RecordingProxy {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
}

impl RecordingProxy {
    /// Forwards to `upstream` (`http://127.0.0.1:PORT`).
    pub fn start(upstream: &str) -> RecordingProxy {
        let upstream: SocketAddr = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .expect("upstream host:port");
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (seen.clone(), stop.clone());
        thread::spawn(move || {
            while !st.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let s = s.clone();
                        thread::spawn(move || {
                            let _ = forward(client, upstream, &s);
                        });
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        RecordingProxy { addr, seen, stop }
    }

    /// `http://127.0.0.1:PORT` (append `/v1` for a base URL).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The requests forwarded so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for RecordingProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

fn forward(
    client: TcpStream,
    upstream: SocketAddr,
    seen: &Mutex<Vec<Seen>>,
) -> std::io::Result<()> {
    client.set_nonblocking(false)?;
    client.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut reader = BufReader::new(client.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut headers = Vec::new();
    let mut content_length = 0usize;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_owned());
            if k == "content-length" {
                content_length = v.parse().unwrap_or(0);
            }
            headers.push((k, v));
        }
    }
    let mut body = vec![0; content_length];
    reader.read_exact(&mut body)?;
    let mut parts = request_line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or("").to_owned(),
        parts.next().unwrap_or("").to_owned(),
    );
    seen.lock().unwrap().push(Seen {
        method: method.clone(),
        path: path.clone(),
        headers: headers.clone(),
        body: body.clone(),
    });

    let mut up = TcpStream::connect(upstream)?;
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    for (k, v) in &headers {
        if k != "connection" {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    head.push_str("connection: close\r\n\r\n");
    up.write_all(head.as_bytes())?;
    up.write_all(&body)?;
    up.flush()?;
    // The upstream closes after its answer; pass it through as it comes.
    let mut out = client;
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = up.read(&mut buf)?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])?;
        out.flush()?;
    }
    out.shutdown(std::net::Shutdown::Both)
}
