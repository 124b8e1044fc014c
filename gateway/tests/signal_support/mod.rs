//! A fake signal-cli daemon (`signal-cli -a ACCOUNT daemon --http HOST:PORT
//! --receive-mode manual`), built from `man signal-cli-jsonrpc` and
//! signal-cli's JSON output classes: JSON-RPC 2.0 on `POST /api/v1/rpc`
//! (405 for another method, 415 without `application/json`, 404 for another
//! path), `GET /api/v1/check`.
//!
//! What the tests lean on, as signal-cli does it:
//! - `receive` (`timeout` seconds, default 3; `maxMessages`) waits for
//!   messages "on Signal's server" (the queue [`Fake::deliver`] fills) and
//!   answers them as a list of `{"envelope": …, "account": …}`. A message
//!   handed to a `receive` is gone from the queue whether or not the client
//!   is still there to read the answer — signal-cli acknowledges it to
//!   Signal's server before the HTTP answer is written ([`Fake::orphaned`]
//!   counts those answers that found no reader).
//! - `send` answers `{"timestamp", "results"}`; a scripted failure answers
//!   signal-cli's error: -5 rate limit (`RATE_LIMIT_FAILURE` with
//!   `retryAfterSeconds`), -4 untrusted identity (`IDENTITY_FAILURE`), each
//!   with `data.response.results`.
//! - `getUserStatus`, `sendTyping`, `sendReceipt`, `getAttachment` (base64
//!   of a stored attachment, -1 when it is gone); an unknown method -32601.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// The bot's account.
pub const ACCOUNT: &str = "+15550000001";
/// The bot's UUID.
pub const ACCOUNT_UUID: &str = "b0b0b0b0-0000-4000-8000-000000000001";

/// One JSON-RPC request the daemon answered.
#[derive(Clone, Debug)]
pub struct Call {
    pub method: String,
    pub params: Value,
    pub at: Instant,
    /// Answered without an error.
    pub ok: bool,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Value>,
    calls: Vec<Call>,
    /// Per method, errors to answer the next calls with (code, type).
    failures: HashMap<String, VecDeque<(i64, &'static str)>>,
    attachments: HashMap<String, Vec<u8>>,
    orphaned: usize,
    down: bool,
}

/// The daemon. Dropping it does not stop it; [`Fake::set_down`] makes it
/// refuse connections as a stopped daemon does.
#[derive(Clone)]
pub struct Fake {
    pub base: String,
    state: Arc<Mutex<State>>,
    arrived: Arc<Notify>,
}

/// A sender's address.
#[derive(Clone, Debug)]
pub struct Person {
    pub number: String,
    pub uuid: String,
    pub name: String,
}

impl Person {
    pub fn new(n: u32) -> Person {
        Person {
            number: format!("+1555000{n:04}"),
            uuid: format!("a1a1a1a1-0000-4000-8000-{n:012}"),
            name: format!("User {n}"),
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A `dataMessage` envelope from `from` as signal-cli writes it.
pub fn envelope(from: &Person, timestamp: u64, data: Value) -> Value {
    let mut data = data;
    data["timestamp"] = json!(timestamp);
    if data.get("expiresInSeconds").is_none() {
        data["expiresInSeconds"] = json!(0);
    }
    if data.get("viewOnce").is_none() {
        data["viewOnce"] = json!(false);
    }
    json!({
        "envelope": {
            "source": from.number, "sourceNumber": from.number, "sourceUuid": from.uuid,
            "sourceName": from.name, "sourceDevice": 1, "timestamp": timestamp,
            "serverReceivedTimestamp": timestamp + 5, "serverDeliveredTimestamp": timestamp + 9,
            "dataMessage": data,
        },
        "account": ACCOUNT,
    })
}

/// `groupInfo` of a group message.
pub fn group_info(group_id: &str) -> Value {
    json!({"groupId": group_id, "groupName": "Conformance", "revision": 3, "type": "DELIVER"})
}

/// A mention of the bot at `start` (by UUID, as Signal clients send it).
pub fn bot_mention(start: u64) -> Value {
    json!({"name": ACCOUNT_UUID, "number": ACCOUNT, "uuid": ACCOUNT_UUID, "start": start, "length": 1})
}

impl Fake {
    pub async fn start() -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let fake = Fake {
            base,
            state: Arc::default(),
            arrived: Arc::new(Notify::new()),
        };
        let served = fake.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let fake = served.clone();
                tokio::spawn(async move { fake.connection(stream).await });
            }
        });
        fake
    }

    /// A message waits on Signal's server for the next `receive`.
    pub fn deliver(&self, item: Value) {
        self.state.lock().unwrap().queue.push_back(item);
        self.arrived.notify_waiters();
    }

    /// The next `count` calls of `method` fail with signal-cli's error
    /// `code` (-5 rate limit, -4 untrusted identity).
    pub fn fail_next(&self, method: &str, code: i64, count: usize) {
        let kind = match code {
            -5 => "RATE_LIMIT_FAILURE",
            -4 => "IDENTITY_FAILURE",
            _ => "NETWORK_FAILURE",
        };
        let mut s = self.state.lock().unwrap();
        let q = s.failures.entry(method.to_owned()).or_default();
        for _ in 0..count {
            q.push_back((code, kind));
        }
    }

    pub fn add_attachment(&self, id: &str, bytes: Vec<u8>) {
        self.state
            .lock()
            .unwrap()
            .attachments
            .insert(id.to_owned(), bytes);
    }

    /// Whether the daemon answers (a stopped daemon closes connections).
    pub fn set_down(&self, down: bool) {
        self.state.lock().unwrap().down = down;
    }

    pub fn calls(&self, method: &str) -> Vec<Call> {
        self.state
            .lock()
            .unwrap()
            .calls
            .iter()
            .filter(|c| c.method == method)
            .cloned()
            .collect()
    }

    /// Messages still waiting on Signal's server.
    pub fn waiting(&self) -> usize {
        self.state.lock().unwrap().queue.len()
    }

    /// `receive` answers with messages that no client read.
    pub fn orphaned(&self) -> usize {
        self.state.lock().unwrap().orphaned
    }

    async fn connection(&self, mut stream: TcpStream) {
        loop {
            let Some((method, path, headers, body)) = read_request(&mut stream).await else {
                return;
            };
            if self.state.lock().unwrap().down {
                return;
            }
            let (status, answer, taken) = if path == "/api/v1/check" {
                (if method == "GET" { 200 } else { 405 }, Vec::new(), 0)
            } else if path != "/api/v1/rpc" {
                (404, Vec::new(), 0)
            } else if method != "POST" {
                (405, Vec::new(), 0)
            } else if !headers
                .get("content-type")
                .is_some_and(|c| c.starts_with("application/json"))
            {
                (415, Vec::new(), 0)
            } else {
                let (answer, taken) = self.rpc(&body).await;
                (200, serde_json::to_vec(&answer).unwrap(), taken)
            };
            let head = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                answer.len()
            );
            let written = async {
                stream.write_all(head.as_bytes()).await?;
                stream.write_all(&answer).await?;
                stream.flush().await
            }
            .await;
            // The client was gone when its answer was written: whatever the
            // answer carried has been taken from Signal's server all the same.
            let gone = written.is_err() || peer_closed(&stream).await;
            if taken > 0 && gone {
                self.state.lock().unwrap().orphaned += taken;
            }
            if written.is_err() {
                return;
            }
        }
    }

    /// Answers one JSON-RPC request; returns the answer and how many
    /// queued messages it took.
    async fn rpc(&self, body: &[u8]) -> (Value, usize) {
        let Ok(request) = serde_json::from_slice::<Value>(body) else {
            return (
                json!({"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error", "data": null}, "id": null}),
                0,
            );
        };
        let id = request.get("id").cloned().unwrap_or(Value::Null);
        let Some(method) = request.get("method").and_then(Value::as_str) else {
            return (
                json!({"jsonrpc": "2.0", "error": {"code": -32600, "message": "method field must be set", "data": null}, "id": null}),
                0,
            );
        };
        let params = request.get("params").cloned().unwrap_or(json!({}));
        let failure = {
            let mut s = self.state.lock().unwrap();
            s.calls.push(Call {
                method: method.to_owned(),
                params: params.clone(),
                at: Instant::now(),
                ok: true,
            });
            let failure = s.failures.get_mut(method).and_then(VecDeque::pop_front);
            if failure.is_some()
                && let Some(last) = s.calls.last_mut()
            {
                last.ok = false;
            }
            failure
        };
        let ok = |result: Value| json!({"jsonrpc": "2.0", "result": result, "id": id});
        let error = |code: i64, message: &str, data: Value| json!({"jsonrpc": "2.0", "error": {"code": code, "message": message, "data": data}, "id": id});
        if let Some((code, kind)) = failure {
            let recipient = params["recipient"][0].as_str().unwrap_or(ACCOUNT);
            let mut result =
                json!({"recipientAddress": {"uuid": null, "number": recipient}, "type": kind});
            if code == -5 {
                result["retryAfterSeconds"] = json!(1);
            }
            let data = json!({"response": {"timestamp": now_ms(), "results": [result]}});
            let message = match code {
                -5 => "Failed to send message due to rate limiting",
                -4 => "Failed to send message due to untrusted identities",
                _ => "Failed to send message",
            };
            return (error(code, message, data), 0);
        }
        match method {
            "receive" => {
                let timeout = params["timeout"].as_f64().unwrap_or(3.0);
                let max = params["maxMessages"]
                    .as_u64()
                    .map_or(usize::MAX, |m| m as usize);
                let taken = self
                    .take(Duration::from_secs_f64(timeout.max(0.0)), max)
                    .await;
                let n = taken.len();
                (ok(Value::Array(taken)), n)
            }
            "send" => {
                let ts = now_ms();
                let results: Vec<Value> = match params["groupId"].as_str() {
                    Some(g) => vec![json!({"recipientAddress": {"uuid": "a1a1a1a1-0000-4000-8000-000000000001", "number": "+15550000001"}, "groupId": g, "type": "SUCCESS"})],
                    None => params["recipient"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|r| json!({"recipientAddress": {"uuid": null, "number": r}, "type": "SUCCESS"}))
                        .collect(),
                };
                (ok(json!({"timestamp": ts, "results": results})), 0)
            }
            "getUserStatus" => {
                let list: Vec<Value> = params["recipient"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|r| {
                        let uuid = if r.as_str() == Some(ACCOUNT) {
                            json!(ACCOUNT_UUID)
                        } else {
                            Value::Null
                        };
                        json!({"recipient": r, "number": r, "uuid": uuid, "isRegistered": true})
                    })
                    .collect();
                (ok(Value::Array(list)), 0)
            }
            "sendTyping" | "sendReceipt" => (ok(json!({"timestamp": now_ms(), "results": []})), 0),
            "getAttachment" => {
                let id = params["id"].as_str().unwrap_or_default();
                match self.state.lock().unwrap().attachments.get(id) {
                    Some(bytes) => (
                        ok(
                            json!({"data": base64::engine::general_purpose::STANDARD.encode(bytes)}),
                        ),
                        0,
                    ),
                    None => (
                        error(
                            -1,
                            &format!("Could not find attachment with ID: {id}"),
                            Value::Null,
                        ),
                        0,
                    ),
                }
            }
            other => (
                error(
                    -32601,
                    &format!("Method not implemented: {other}"),
                    Value::Null,
                ),
                0,
            ),
        }
    }

    /// Waits up to `timeout` for the first message, then takes up to `max`.
    async fn take(&self, timeout: Duration, max: usize) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.arrived.notified();
            {
                let mut s = self.state.lock().unwrap();
                if !s.queue.is_empty() {
                    let n = s.queue.len().min(max);
                    return s.queue.drain(..n).collect();
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Vec::new();
            }
        }
    }
}

/// Whether the client has hung up (a read sees the end at once).
async fn peer_closed(stream: &TcpStream) -> bool {
    let mut probe = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_millis(1), stream.peek(&mut probe)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

type Headers = HashMap<String, String>;

async fn read_request(stream: &mut TcpStream) -> Option<(String, String, Headers, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_owned();
    let path = first.next()?.split('?').next()?.to_owned();
    let headers: Headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some((method, path, headers, body))
}
