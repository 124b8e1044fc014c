//! A fake of Meta's WhatsApp Cloud API, written from Meta's documentation
//! (Cloud API reference: Messages, Media, Webhooks; error codes), not from
//! what the adapter sends:
//!
//! - Graph endpoints under `/v21.0`: `POST /{phone-number-id}/messages`
//!   (text, image, audio, document, and `status: read`), `GET /{media-id}`
//!   (a download URL, its MIME type, size and sha256), the download itself
//!   (bearer token required), `POST /{phone-number-id}/media` (multipart),
//!   `GET /{phone-number-id}`. Every call needs `Authorization: Bearer`
//!   (else 401, code 190); `messaging_product` must be `whatsapp`; a text
//!   body longer than 4096 characters is refused (code 100).
//! - Errors as Meta sends them: HTTP 400 with `{"error": {"message",
//!   "type": "OAuthException", "code", "error_data": {"messaging_product",
//!   "details"}, "fbtrace_id"}}` — the rate limit 130429 without
//!   `Retry-After`, the 24-hour rule 131047.
//! - The 24-hour rule: a free-form message to a user whose last message is
//!   older than 24 hours (or who never wrote) is refused — at once (HTTP
//!   400, 131047) or accepted and then reported in a `failed` status
//!   webhook, as [`WindowMode`] says.
//! - Webhooks it POSTs to the adapter: user messages and the statuses of
//!   what it accepted (`sent`, `delivered`, `failed`), each signed with
//!   `X-Hub-Signature-256: sha256=HMAC-SHA256(app secret, raw body)`;
//!   retried with backoff while the answer is not 200, as Meta does.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

mod payloads;

pub use payloads::*;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, KeyInit, Mac};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

pub const TOKEN: &str = "EAAG-access-token-NOT-FOR-LOGS";
pub const PHONE_ID: &str = "106540352242922";
pub const DISPLAY_NUMBER: &str = "15550783881";
pub const APP_SECRET: &str = "app-secret-NOT-FOR-LOGS";
pub const VERIFY_TOKEN: &str = "verify-token-123";
pub const WABA_ID: &str = "102290129340398";
pub const VERSION: &str = "v21.0";
/// Meta's limit for a text body.
pub const MAX_TEXT: usize = 4096;

/// How the fake reports a message outside the 24-hour window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowMode {
    /// HTTP 400, code 131047, in the send's answer.
    Immediate,
    /// Accepted (a wamid), then a `failed` status webhook with 131047.
    Late,
}

/// One message the fake accepted.
#[derive(Clone, Debug, PartialEq)]
pub struct Sent {
    pub wamid: String,
    pub to: String,
    /// `text`, `image`, `audio`, `document`.
    pub kind: String,
    /// The text body, or the caption.
    pub text: String,
    /// The media id of a media message.
    pub media_id: Option<String>,
    pub filename: Option<String>,
    pub context: Option<String>,
}

/// One upload.
#[derive(Clone, Debug)]
pub struct Upload {
    pub id: String,
    pub mime: String,
    pub file_name: String,
    pub bytes: Vec<u8>,
}

/// One webhook POST the fake made, and the adapter's answer.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub body: String,
    pub status: u16,
}

#[derive(Debug)]
struct State {
    webhook: Option<SocketAddr>,
    sent: Vec<Sent>,
    refused: Vec<(String, i64)>,
    read_marks: Vec<String>,
    uploads: Vec<Upload>,
    media: HashMap<String, (String, Vec<u8>)>,
    downloads: usize,
    last_user_message: HashMap<String, SystemTime>,
    window_mode: WindowMode,
    rate_limit_next: usize,
    rate_limited: usize,
    server_errors_next: usize,
    deliveries: Vec<Delivery>,
    violations: Vec<String>,
    next_id: u64,
    statuses: bool,
}

/// The fake Cloud API.
#[derive(Clone)]
pub struct FakeCloudApi {
    /// The Graph base with its version, as `WHATSAPP_API_URL` takes it.
    pub url: String,
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// `sha256=` + hex HMAC-SHA256 of `body` with `secret`, as Meta signs.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256={hex}")
}

fn graph_error(status: u16, code: i64, message: &str, details: &str) -> (u16, Value) {
    (
        status,
        json!({"error": {
            "message": message,
            "type": "OAuthException",
            "code": code,
            "error_data": {"messaging_product": "whatsapp", "details": details},
            "fbtrace_id": "AbCdEfGhIjKlMnOp"
        }}),
    )
}

/// POSTs `body` to `addr` with the given signature header; the status.
pub async fn post_raw(addr: SocketAddr, body: &[u8], signature: Option<&str>) -> (u16, String) {
    let mut head = format!(
        "POST /whatsapp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(sig) = signature {
        head.push_str(&format!("X-Hub-Signature-256: {sig}\r\n"));
    }
    head.push_str("\r\n");
    request(addr, head.as_bytes(), body).await
}

/// `GET path` on `addr`.
pub async fn get(addr: SocketAddr, path_and_query: &str) -> (u16, String) {
    let head =
        format!("GET {path_and_query} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    request(addr, head.as_bytes(), b"").await
}

async fn request(addr: SocketAddr, head: &[u8], body: &[u8]) -> (u16, String) {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return (0, String::new());
    };
    if stream.write_all(head).await.is_err() || stream.write_all(body).await.is_err() {
        return (0, String::new());
    }
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// The parts of a `multipart/form-data` body: name → (filename, type, data).
fn multipart(
    content_type: &str,
    body: &[u8],
) -> HashMap<String, (Option<String>, String, Vec<u8>)> {
    let mut parts = HashMap::new();
    let Some(boundary) = content_type.split("boundary=").nth(1) else {
        return parts;
    };
    let boundary = boundary.trim_matches('"');
    let delim = format!("--{boundary}");
    let text = body;
    let mut starts = Vec::new();
    let needle = delim.as_bytes();
    let mut i = 0;
    while i + needle.len() <= text.len() {
        if &text[i..i + needle.len()] == needle {
            starts.push(i);
            i += needle.len();
        } else {
            i += 1;
        }
    }
    for w in starts.windows(2) {
        let part = &text[w[0] + needle.len()..w[1]];
        let part = part.strip_prefix(b"\r\n").unwrap_or(part);
        let part = part.strip_suffix(b"\r\n").unwrap_or(part);
        let Some(split) = part.windows(4).position(|x| x == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&part[..split]).into_owned();
        let data = part[split + 4..].to_vec();
        let attr = |key: &str| {
            head.split(&format!("{key}=\""))
                .nth(1)
                .and_then(|r| r.split('"').next())
                .map(str::to_owned)
        };
        let name = attr("name").unwrap_or_default();
        let filename = attr("filename");
        let ctype = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Type: "))
            .unwrap_or("text/plain")
            .to_owned();
        parts.insert(name, (filename, ctype, data));
    }
    parts
}

impl FakeCloudApi {
    pub async fn start() -> FakeCloudApi {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let fake = FakeCloudApi {
            url: format!("http://{addr}/{VERSION}"),
            addr,
            state: Arc::new(Mutex::new(State {
                webhook: None,
                sent: Vec::new(),
                refused: Vec::new(),
                read_marks: Vec::new(),
                uploads: Vec::new(),
                media: HashMap::new(),
                downloads: 0,
                last_user_message: HashMap::new(),
                window_mode: WindowMode::Immediate,
                rate_limit_next: 0,
                rate_limited: 0,
                server_errors_next: 0,
                deliveries: Vec::new(),
                violations: Vec::new(),
                next_id: 1,
                statuses: true,
            })),
            changed: Arc::new(Notify::new()),
        };
        let f = fake.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let f = f.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| {
                        let f = f.clone();
                        async move { Ok::<_, Infallible>(f.serve(req).await) }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        fake
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Where the adapter's webhook listens (Meta's "Callback URL").
    pub fn set_webhook(&self, addr: SocketAddr) {
        self.state().webhook = Some(addr);
    }

    pub fn set_window_mode(&self, mode: WindowMode) {
        self.state().window_mode = mode;
    }

    /// Whether accepted messages get `sent`/`delivered` status webhooks.
    pub fn set_statuses(&self, on: bool) {
        self.state().statuses = on;
    }

    /// Answers the next `n` sends with 130429.
    pub fn rate_limit_next(&self, n: usize) {
        self.state().rate_limit_next = n;
    }

    /// Answers the next `n` sends with HTTP 500, Meta's transient
    /// "An unexpected error has occurred" (code 2).
    pub fn server_errors_next(&self, n: usize) {
        self.state().server_errors_next = n;
    }

    pub fn rate_limited(&self) -> usize {
        self.state().rate_limited
    }

    /// Marks `user` as having written at `when` (the window's start).
    pub fn user_wrote_at(&self, user: &str, when: SystemTime) {
        self.state().last_user_message.insert(user.to_owned(), when);
    }

    pub fn add_media(&self, id: &str, mime: &str, bytes: &[u8]) {
        self.state()
            .media
            .insert(id.to_owned(), (mime.to_owned(), bytes.to_vec()));
    }

    pub fn sent(&self) -> Vec<Sent> {
        self.state().sent.clone()
    }

    /// What the fake accepted after the first `n`, in order.
    pub fn sent_since(&self, n: usize) -> Vec<Sent> {
        let s = self.state();
        s.sent.get(n..).unwrap_or_default().to_vec()
    }

    pub fn sent_to(&self, to: &str) -> Vec<Sent> {
        self.sent().into_iter().filter(|s| s.to == to).collect()
    }

    pub fn refused(&self) -> Vec<(String, i64)> {
        self.state().refused.clone()
    }

    pub fn read_marks(&self) -> Vec<String> {
        self.state().read_marks.clone()
    }

    pub fn uploads(&self) -> Vec<Upload> {
        self.state().uploads.clone()
    }

    pub fn downloads(&self) -> usize {
        self.state().downloads
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        self.state().deliveries.clone()
    }

    /// Fails the test if any request broke Meta's rules.
    pub fn assert_clean(&self) {
        let v = self.state().violations.clone();
        assert!(v.is_empty(), "requests broke the Cloud API's rules: {v:#?}");
    }

    /// Waits until `done(sent)` holds (20 s at most).
    pub async fn wait_sent(&self, done: impl Fn(&[Sent]) -> bool) -> Vec<Sent> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let notified = self.changed.notified();
            {
                let s = self.state();
                if done(&s.sent) {
                    return s.sent.clone();
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "timed out; sent so far: {:#?}",
                self.sent()
            );
            let _ = tokio::time::timeout(left.min(Duration::from_millis(200)), notified).await;
        }
    }

    /// Sends a signed webhook carrying `notification`, retried with
    /// backoff while the adapter does not answer 200 (Meta retries for
    /// days; the fake five times). Returns the answers' statuses.
    pub async fn deliver(&self, notification: &Value) -> Vec<u16> {
        self.open_windows(notification);
        let body = serde_json::to_vec(notification).unwrap();
        let sig = sign(APP_SECRET, &body);
        let addr = self.state().webhook.expect("set_webhook first");
        let mut statuses = Vec::new();
        let mut wait = Duration::from_millis(100);
        for _ in 0..5 {
            let (status, _) = post_raw(addr, &body, Some(&sig)).await;
            statuses.push(status);
            self.state().deliveries.push(Delivery {
                body: String::from_utf8_lossy(&body).into_owned(),
                status,
            });
            if status == 200 {
                break;
            }
            tokio::time::sleep(wait).await;
            wait *= 2;
        }
        statuses
    }

    /// Sends a signed webhook in the background, retried until the adapter
    /// answers 200 — as Meta keeps retrying (for days) while an endpoint is
    /// down or failing. The wait between attempts doubles up to `cap`.
    pub fn deliver_until_accepted(&self, notification: Value, cap: Duration) {
        self.open_windows(&notification);
        let f = self.clone();
        tokio::spawn(async move {
            let body = serde_json::to_vec(&notification).unwrap();
            let sig = sign(APP_SECRET, &body);
            let mut wait = Duration::from_millis(20);
            loop {
                let addr = f.state().webhook.expect("set_webhook first");
                let (status, _) = post_raw(addr, &body, Some(&sig)).await;
                f.state().deliveries.push(Delivery {
                    body: String::from_utf8_lossy(&body).into_owned(),
                    status,
                });
                if status == 200 {
                    return;
                }
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(cap);
            }
        });
    }

    /// A user's message opens their 24-hour window, whatever becomes of
    /// the webhook.
    fn open_windows(&self, notification: &Value) {
        for change in notification["entry"][0]["changes"]
            .as_array()
            .into_iter()
            .flatten()
        {
            for m in change["value"]["messages"].as_array().into_iter().flatten() {
                if let Some(from) = m["from"].as_str() {
                    self.user_wrote_at(from, SystemTime::now());
                }
            }
        }
    }

    /// What was uploaded as `media_id`: (file name, bytes).
    pub fn upload_of(&self, media_id: &str) -> Option<(String, Vec<u8>)> {
        self.state()
            .uploads
            .iter()
            .find(|u| u.id == media_id)
            .map(|u| (u.file_name.clone(), u.bytes.clone()))
    }

    /// A user writes: the 24-hour window opens, and the webhook goes out.
    pub async fn user_says(&self, from: &str, message: Value) -> Vec<u16> {
        self.deliver(&user_message(from, "Test User", message))
            .await
    }

    fn next_wamid(&self) -> String {
        let mut s = self.state();
        s.next_id += 1;
        format!("wamid.HBgL{:012}FQIAERgS", s.next_id)
    }

    fn status_later(&self, wamid: String, status: &'static str, to: String, errors: Option<Value>) {
        let f = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if f.state().webhook.is_some() {
                f.deliver(&status_value(&wamid, status, &to, errors)).await;
            }
        });
    }

    async fn serve(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let (status, body, ctype) = self.route(req).await;
        let mut resp = Response::new(Full::new(Bytes::from(body)));
        *resp.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
        resp.headers_mut()
            .insert("content-type", ctype.parse().unwrap());
        self.changed.notify_waiters();
        resp
    }

    async fn route(&self, req: Request<Incoming>) -> (u16, Vec<u8>, String) {
        let json_answer = |(status, v): (u16, Value)| {
            (
                status,
                serde_json::to_vec(&v).unwrap(),
                "application/json".to_owned(),
            )
        };
        let auth = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if auth.as_deref() != Some(&format!("Bearer {TOKEN}")) {
            self.state()
                .violations
                .push(format!("{} without the bearer token", req.uri().path()));
            return json_answer(graph_error(
                401,
                190,
                "Invalid OAuth access token - Cannot parse access token",
                "",
            ));
        }
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        let ctype = req
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let body = req.into_body().collect().await.unwrap().to_bytes().to_vec();
        if let Some(id) = path.strip_prefix("/download/") {
            let media = self.state().media.get(id).cloned();
            self.state().downloads += 1;
            return match media {
                Some((mime, bytes)) => (200, bytes, mime),
                None => (404, b"gone".to_vec(), "text/plain".to_owned()),
            };
        }
        let Some(rest) = path.strip_prefix(&format!("/{VERSION}/")) else {
            self.state()
                .violations
                .push(format!("{path}: no API version"));
            return json_answer(graph_error(400, 2500, "Unknown path components", ""));
        };
        let segments: Vec<&str> = rest.split('/').collect();
        match (method.as_str(), segments.as_slice()) {
            ("POST", [id, "messages"]) if *id == PHONE_ID => json_answer(self.message(&body)),
            ("POST", [id, "media"]) if *id == PHONE_ID => json_answer(self.upload(&ctype, &body)),
            ("GET", [id]) if *id == PHONE_ID => json_answer((
                200,
                json!({"display_phone_number": DISPLAY_NUMBER, "verified_name": "Hermes Test",
                       "id": PHONE_ID}),
            )),
            ("GET", [media_id]) => {
                let media = self.state().media.get(*media_id).cloned();
                match media {
                    Some((mime, bytes)) => json_answer((
                        200,
                        json!({"messaging_product": "whatsapp",
                               "url": format!("http://{}/download/{media_id}", self.addr),
                               "mime_type": mime, "sha256": "0f0f",
                               "file_size": bytes.len(), "id": media_id}),
                    )),
                    None => json_answer(graph_error(
                        400,
                        100,
                        "Unsupported get request. Object with ID does not exist",
                        "",
                    )),
                }
            }
            _ => {
                self.state()
                    .violations
                    .push(format!("{method} {path}: no such endpoint"));
                json_answer(graph_error(400, 100, "Unsupported request", ""))
            }
        }
    }

    fn upload(&self, ctype: &str, body: &[u8]) -> (u16, Value) {
        let parts = multipart(ctype, body);
        let product = parts.get("messaging_product").map(|p| p.2.clone());
        let Some((Some(file_name), mime, bytes)) = parts.get("file").cloned() else {
            self.state()
                .violations
                .push("upload without a file part".into());
            return graph_error(400, 100, "Param file is required", "");
        };
        if product.as_deref() != Some(b"whatsapp".as_slice()) || !parts.contains_key("type") {
            self.state()
                .violations
                .push("upload without messaging_product or type".into());
            return graph_error(400, 100, "Param messaging_product is required", "");
        }
        let id = format!("{}", 900_000 + self.state().uploads.len());
        self.state().uploads.push(Upload {
            id: id.clone(),
            mime: mime.clone(),
            file_name,
            bytes: bytes.clone(),
        });
        self.state().media.insert(id.clone(), (mime, bytes));
        (200, json!({"id": id}))
    }

    fn message(&self, body: &[u8]) -> (u16, Value) {
        let Ok(v) = serde_json::from_slice::<Value>(body) else {
            self.state()
                .violations
                .push("a message that is not JSON".into());
            return graph_error(400, 100, "Invalid parameter", "body is not JSON");
        };
        if v["messaging_product"] != "whatsapp" {
            self.state()
                .violations
                .push(format!("no messaging_product: {v}"));
            return graph_error(400, 100, "Invalid parameter", "messaging_product");
        }
        // Marking a message read.
        if v["status"] == "read" {
            let id = v["message_id"].as_str().unwrap_or("").to_owned();
            if !id.starts_with("wamid.") {
                self.state()
                    .violations
                    .push(format!("read mark for {id:?}"));
            }
            self.state().read_marks.push(id);
            return (200, json!({"success": true}));
        }
        let to = v["to"].as_str().unwrap_or("").to_owned();
        if to.is_empty() || !to.bytes().all(|b| b.is_ascii_digit()) {
            self.state()
                .violations
                .push(format!("bad recipient {to:?}"));
            return graph_error(400, 131_009, "Parameter value is not valid", "to");
        }
        let kind = v["type"].as_str().unwrap_or("").to_owned();
        let (text, media_id, filename) = match kind.as_str() {
            "text" => {
                let body = v["text"]["body"].as_str().unwrap_or("").to_owned();
                if body.chars().count() > MAX_TEXT || body.is_empty() {
                    self.state()
                        .violations
                        .push(format!("text body of {} chars", body.chars().count()));
                    return graph_error(400, 100, "Invalid parameter", "text.body too long");
                }
                (body, None, None)
            }
            "image" | "audio" | "document" | "video" => {
                let obj = &v[&kind];
                let id = obj["id"].as_str().map(str::to_owned);
                if id
                    .as_deref()
                    .is_none_or(|id| !self.state().media.contains_key(id))
                {
                    self.state()
                        .violations
                        .push(format!("{kind} with unknown media id: {obj}"));
                    return graph_error(400, 131_053, "Media upload error", "unknown media id");
                }
                if kind == "audio" && obj.get("caption").is_some() {
                    self.state().violations.push("audio with a caption".into());
                }
                (
                    obj["caption"].as_str().unwrap_or("").to_owned(),
                    id,
                    obj["filename"].as_str().map(str::to_owned),
                )
            }
            other => {
                self.state()
                    .violations
                    .push(format!("message type {other:?}"));
                return graph_error(400, 100, "Invalid parameter", "type");
            }
        };
        {
            let mut s = self.state();
            if s.server_errors_next > 0 {
                s.server_errors_next -= 1;
                return graph_error(
                    500,
                    2,
                    "An unexpected error has occurred. Please retry your request later.",
                    "",
                );
            }
            if s.rate_limit_next > 0 {
                s.rate_limit_next -= 1;
                s.rate_limited += 1;
                return graph_error(
                    400,
                    130_429,
                    "(#130429) Rate limit hit",
                    "Cloud API message throughput has been reached.",
                );
            }
        }
        let window_open = self
            .state()
            .last_user_message
            .get(&to)
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age < Duration::from_secs(24 * 3600));
        let mode = self.state().window_mode;
        let details = "Message failed to send because more than 24 hours have passed since \
                       the customer last replied to this number.";
        if !window_open && mode == WindowMode::Immediate {
            self.state().refused.push((to, 131_047));
            return graph_error(400, 131_047, "Re-engagement message", details);
        }
        let wamid = self.next_wamid();
        let context = v["context"]["message_id"].as_str().map(str::to_owned);
        if !window_open {
            // Accepted, then reported failed, as Meta may do.
            self.state().refused.push((to.clone(), 131_047));
            let errors = json!([{"code": 131047, "title": "Re-engagement message",
                                 "message": "Re-engagement message",
                                 "error_data": {"details": details}}]);
            self.status_later(wamid.clone(), "failed", to.clone(), Some(errors));
        } else {
            self.state().sent.push(Sent {
                wamid: wamid.clone(),
                to: to.clone(),
                kind,
                text,
                media_id,
                filename,
                context,
            });
            if self.state().statuses {
                self.status_later(wamid.clone(), "sent", to.clone(), None);
            }
        }
        (
            200,
            json!({"messaging_product": "whatsapp",
                   "contacts": [{"input": to, "wa_id": to}],
                   "messages": [{"id": wamid}]}),
        )
    }
}

/// Every text the fake accepted for `to`, joined (split replies).
pub fn joined(sent: &[Sent]) -> String {
    sent.iter().map(|s| s.text.as_str()).collect()
}
