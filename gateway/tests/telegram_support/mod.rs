//! A loopback fake of the Telegram Bot API, shared by the adapter tests and
//! the kill -9 soak test.
//!
//! It speaks plain HTTP/1.1 with keep-alive, like the real API behind its
//! TLS: `POST /bot{token}/{method}` with a JSON (or, for `sendDocument`,
//! `sendPhoto`, `sendAudio` and `sendVoice`, `multipart/form-data`) body, a
//! JSON envelope back. Uploads are kept byte for byte ([`Fake::uploads`]). Its `getUpdates`
//! follows Telegram's documented rules: updates below `offset` are
//! forgotten, and with nothing pending the request is held for `timeout`
//! seconds (unless the test turns holding off, as the npm emulator does).
//!
//! Like Telegram, it lets one poller at a time wait: a `getUpdates` that
//! arrives while another is held ends that one with `409 Conflict:
//! terminated by other getUpdates request`. The fake can listen on several
//! ports ("doors", [`Fake::open_door`]) sharing one bot, so a test can tell
//! which of several gateways sent each request ([`Request::door`], and the
//! poll log [`Fake::polls`]).
//!
//! Files and edits follow the Bot API too: `getFile` answers a file added
//! with [`Fake::add_file`] with its `file_path` (none for a file over 20 MB,
//! as Telegram does), and `GET /file/bot{token}/{file_path}` serves its
//! bytes; `editMessageText` and `deleteMessage` act on messages the bot
//! sent — an unknown message is "message to edit not found", an edit to the
//! same text "message is not modified" (both 400), as Telegram answers.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// The token the fake accepts (`/bot{TOKEN}/…`).
pub const TOKEN: &str = "123456:SECRET-token_value";
/// The bot's user id (`getMe`).
pub const BOT_ID: i64 = 4242;

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Request {
    /// The Bot API method.
    pub method: String,
    /// The JSON body; a `multipart/form-data` body as an object of its
    /// fields, files as `{"filename": …, "content": …}`.
    pub body: Value,
    /// When it arrived.
    pub at: Instant,
    /// Which port it came through (0 for [`Fake::base`]).
    pub door: usize,
}

/// How one `getUpdates` went.
#[derive(Debug, Clone)]
pub struct Poll {
    /// The port it came through.
    pub door: usize,
    /// When it arrived.
    pub at: Instant,
    /// When it was answered.
    pub answered: Instant,
    /// Updates it returned (none for a 409).
    pub updates: Vec<i64>,
    /// Ended by a newer poll (409 Conflict).
    pub conflict: bool,
}

#[derive(Default)]
struct State {
    pending: Vec<Value>,
    requests: Vec<Request>,
    /// Canned answers, used (once each) for the first request of that method.
    script: VecDeque<(String, u16, Value)>,
    hold_polls: bool,
    next_message_id: i64,
    /// Bumped by every `getUpdates`; a held poll whose number is no longer
    /// the latest was terminated by a newer one.
    poll_generation: u64,
    polls: Vec<Poll>,
    /// Requests whose client hung up before the answer (a dropped poll).
    abandoned: usize,
    /// Files by `file_id`: (the `file_path` `getFile` gives, bytes).
    files: HashMap<String, (String, Vec<u8>)>,
    /// What the file server serves, by path.
    served: HashMap<String, Vec<u8>>,
    /// What each message the bot sent shows now, by message id.
    shown: HashMap<i64, String>,
    /// File downloads served (their paths).
    downloads: Vec<String>,
    /// Multipart uploads, byte for byte: (method, parts).
    uploads: Vec<(String, Vec<hermes_tests::multipart::FormField>)>,
}

/// Telegram's limit on the files a bot may download.
pub const BOT_DOWNLOAD_LIMIT: usize = 20 * 1024 * 1024;

/// The fake Bot API; clones share the server.
#[derive(Clone)]
pub struct Fake {
    /// `http://127.0.0.1:PORT`, the `TELEGRAM_API_URL`.
    pub base: String,
    state: Arc<Mutex<State>>,
    notify: Arc<Notify>,
    doors: Arc<Mutex<Vec<String>>>,
}

impl Fake {
    /// Starts the fake on a free port; `hold_polls` makes an empty
    /// `getUpdates` wait its `timeout` as Telegram does.
    pub async fn start(hold_polls: bool) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State {
            hold_polls,
            next_message_id: 1000,
            ..State::default()
        }));
        let fake = Fake {
            base: base.clone(),
            state,
            notify: Arc::new(Notify::new()),
            doors: Arc::new(Mutex::new(vec![base])),
        };
        fake.accept_on(listener, 0);
        fake
    }

    /// Listens on one more port, for the same bot; returns its base URL.
    /// Requests through it carry its number ([`Request::door`]).
    pub async fn open_door(&self) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let door = {
            let mut doors = self.doors.lock().unwrap();
            doors.push(base.clone());
            doors.len() - 1
        };
        self.accept_on(listener, door);
        base
    }

    fn accept_on(&self, listener: TcpListener, door: usize) {
        let f = self.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let f = f.clone();
                tokio::spawn(async move { f.serve(sock, door).await });
            }
        });
    }

    /// Every `getUpdates` so far, in arrival order.
    pub fn polls(&self) -> Vec<Poll> {
        let mut polls = self.state.lock().unwrap().polls.clone();
        polls.sort_by_key(|p| p.at);
        polls
    }

    /// Delivers these updates again (as after a lost acknowledgement).
    pub fn redeliver(&self, updates: Vec<Value>) {
        let mut st = self.state.lock().unwrap();
        st.pending.extend(updates);
        st.pending
            .sort_by_key(|u| u["update_id"].as_i64().unwrap_or_default());
        drop(st);
        self.notify.notify_waiters();
    }

    /// Queues an update for `getUpdates`.
    pub fn push_update(&self, update: Value) {
        self.state.lock().unwrap().pending.push(update);
        self.notify.notify_waiters();
    }

    /// Replaces every pending update with `updates`.
    pub fn replace_pending(&self, updates: Vec<Value>) {
        self.state.lock().unwrap().pending = updates;
        self.notify.notify_waiters();
    }

    /// The next request of `method` gets this answer (once).
    pub fn script(&self, method: &str, status: u16, body: Value) {
        self.state
            .lock()
            .unwrap()
            .script
            .push_back((method.to_owned(), status, body));
    }

    /// How many requests were abandoned by the client before their answer.
    pub fn abandoned(&self) -> usize {
        self.state.lock().unwrap().abandoned
    }

    /// Adds a file users can send: `getFile` of `file_id` gives `path`, and
    /// the download gives `bytes`.
    pub fn add_file(&self, file_id: &str, path: &str, bytes: Vec<u8>) {
        let mut st = self.state.lock().unwrap();
        st.served.insert(path.to_owned(), bytes.clone());
        st.files
            .insert(file_id.to_owned(), (path.to_owned(), bytes));
    }

    /// Makes `getFile` of `file_id` name `path`, which the file server
    /// does not serve: the download fails with 404.
    pub fn serve_file_as(&self, file_id: &str, path: &str) {
        if let Some(file) = self.state.lock().unwrap().files.get_mut(file_id) {
            file.0 = path.to_owned();
        }
    }

    /// The parts of every multipart upload of `method`, byte for byte.
    pub fn uploads(&self, method: &str) -> Vec<Vec<hermes_tests::multipart::FormField>> {
        let st = self.state.lock().unwrap();
        st.uploads
            .iter()
            .filter(|(m, _)| m == method)
            .map(|(_, parts)| parts.clone())
            .collect()
    }

    /// The file paths downloaded so far.
    pub fn downloads(&self) -> Vec<String> {
        self.state.lock().unwrap().downloads.clone()
    }

    /// What the bot's message `id` shows now (after its edits), if it
    /// exists. A request is in [`requests`](Self::requests) from its
    /// arrival, a moment before it takes effect here.
    pub fn shown(&self, id: i64) -> Option<String> {
        self.state.lock().unwrap().shown.get(&id).cloned()
    }

    /// The requests of `method` so far.
    pub fn requests(&self, method: &str) -> Vec<Request> {
        self.state
            .lock()
            .unwrap()
            .requests
            .iter()
            .filter(|r| r.method == method)
            .cloned()
            .collect()
    }

    async fn serve(&self, sock: TcpStream, door: usize) {
        let mut reader = BufReader::new(sock);
        loop {
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).await.unwrap_or(0) == 0 {
                return;
            }
            let mut content_length = 0usize;
            let mut content_type = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                    return;
                }
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                if let Some((k, v)) = line.split_once(':')
                    && k.eq_ignore_ascii_case("content-length")
                {
                    content_length = v.trim().parse().unwrap_or(0);
                }
                if let Some((k, v)) = line.split_once(':')
                    && k.eq_ignore_ascii_case("content-type")
                {
                    content_type = v.trim().to_owned();
                }
            }
            let mut body = vec![0; content_length];
            if reader.read_exact(&mut body).await.is_err() {
                return;
            }
            let path = request_line
                .split_whitespace()
                .nth(1)
                .unwrap_or("")
                .to_owned();
            let (status, kind, payload) = match path.strip_prefix(&format!("/file/bot{TOKEN}/")) {
                Some(file_path) => self.download(file_path),
                None => {
                    let body: Value = match multipart_boundary(&content_type) {
                        Some(boundary) => {
                            let method = path.rsplit('/').next().unwrap_or("").to_owned();
                            let parts = hermes_tests::multipart::fields(&content_type, &body);
                            self.state.lock().unwrap().uploads.push((method, parts));
                            parse_multipart(&body, &boundary)
                        }
                        None => serde_json::from_slice(&body).unwrap_or(Value::Null),
                    };
                    // A client that hangs up while its request is held (a
                    // poll the adapter gave up on) is noticed at once, not
                    // at the hold's end.
                    let (status, answer) = tokio::select! {
                        answer = self.answer(&path, body, door) => answer,
                        _ = reader.fill_buf() => {
                            self.state.lock().unwrap().abandoned += 1;
                            return;
                        }
                    };
                    (status, "application/json", answer.to_string().into_bytes())
                }
            };
            let head = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: keep-alive\r\n\r\n",
                payload.len()
            );
            let sock = reader.get_mut();
            if sock.write_all(head.as_bytes()).await.is_err()
                || sock.write_all(&payload).await.is_err()
            {
                return;
            }
        }
    }

    /// `GET /file/bot{token}/{file_path}`: the file's bytes, or 404.
    fn download(&self, file_path: &str) -> (u16, &'static str, Vec<u8>) {
        let mut st = self.state.lock().unwrap();
        st.downloads.push(file_path.to_owned());
        let found = st.served.get(file_path).cloned();
        match found {
            Some(bytes) => (200, "application/octet-stream", bytes),
            None => (
                404,
                "application/json",
                json!({"ok": false, "error_code": 404, "description": "Not Found"})
                    .to_string()
                    .into_bytes(),
            ),
        }
    }

    async fn answer(&self, path: &str, body: Value, door: usize) -> (u16, Value) {
        let Some(method) = path
            .strip_prefix(&format!("/bot{TOKEN}/"))
            .map(str::to_owned)
        else {
            return (
                404,
                json!({"ok": false, "error_code": 404, "description": "Not Found"}),
            );
        };
        let scripted = {
            let mut st = self.state.lock().unwrap();
            st.requests.push(Request {
                method: method.clone(),
                body: body.clone(),
                at: Instant::now(),
                door,
            });
            let pos = st.script.iter().position(|(m, _, _)| *m == method);
            pos.and_then(|p| st.script.remove(p))
        };
        if let Some((_, status, answer)) = scripted {
            return (status, answer);
        }
        let ok = |result: Value| (200, json!({"ok": true, "result": result}));
        match method.as_str() {
            "getMe" => ok(
                json!({"id": BOT_ID, "is_bot": true, "first_name": "Fake", "username": "fake_bot"}),
            ),
            "getUpdates" => {
                let timeout =
                    Duration::from_secs(body.get("timeout").and_then(Value::as_u64).unwrap_or(0));
                let deadline = tokio::time::Instant::now() + timeout;
                let arrived = Instant::now();
                let generation = {
                    let mut st = self.state.lock().unwrap();
                    st.poll_generation += 1;
                    st.poll_generation
                };
                // A newer poll terminates a held one (below).
                self.notify.notify_waiters();
                let log = |st: &mut State, updates: &[Value], conflict: bool| {
                    st.polls.push(Poll {
                        door,
                        at: arrived,
                        answered: Instant::now(),
                        updates: updates
                            .iter()
                            .filter_map(|u| u["update_id"].as_i64())
                            .collect(),
                        conflict,
                    });
                };
                loop {
                    let notified = self.notify.notified();
                    {
                        let mut st = self.state.lock().unwrap();
                        if st.poll_generation != generation {
                            log(&mut st, &[], true);
                            return (
                                409,
                                json!({"ok": false, "error_code": 409, "description":
                                    "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"}),
                            );
                        }
                        if let Some(offset) = body.get("offset").and_then(Value::as_i64) {
                            st.pending
                                .retain(|u| u["update_id"].as_i64().unwrap() >= offset);
                        }
                        if !st.pending.is_empty() || !st.hold_polls {
                            let updates = st.pending.clone();
                            log(&mut st, &updates, false);
                            return ok(Value::Array(updates));
                        }
                    }
                    if tokio::time::timeout_at(deadline, notified).await.is_err() {
                        let mut st = self.state.lock().unwrap();
                        log(&mut st, &[], false);
                        return ok(json!([]));
                    }
                }
            }
            "sendMessage" => {
                let mut st = self.state.lock().unwrap();
                st.next_message_id += 1;
                let id = st.next_message_id;
                st.shown
                    .insert(id, body["text"].as_str().unwrap_or("").to_owned());
                ok(
                    json!({"message_id": id, "chat": {"id": body["chat_id"], "type": "private"},
                          "text": body["text"]}),
                )
            }
            "getFile" => {
                let st = self.state.lock().unwrap();
                let id = body["file_id"].as_str().unwrap_or("");
                match st.files.get(id) {
                    None => (
                        400,
                        json!({"ok": false, "error_code": 400, "description": "Bad Request: invalid file_id"}),
                    ),
                    Some((path, bytes)) if bytes.len() > BOT_DOWNLOAD_LIMIT => {
                        let _ = path;
                        (
                            400,
                            json!({"ok": false, "error_code": 400, "description": "Bad Request: file is too big"}),
                        )
                    }
                    Some((path, bytes)) => ok(json!({
                        "file_id": id, "file_unique_id": format!("u-{id}"),
                        "file_size": bytes.len(), "file_path": path,
                    })),
                }
            }
            "editMessageText" => {
                let mut st = self.state.lock().unwrap();
                let id = body["message_id"].as_i64().unwrap_or(0);
                let text = body["text"].as_str().unwrap_or("").to_owned();
                match st.shown.get(&id) {
                    None => (
                        400,
                        json!({"ok": false, "error_code": 400, "description": "Bad Request: message to edit not found"}),
                    ),
                    Some(old) if *old == text => (
                        400,
                        json!({"ok": false, "error_code": 400, "description": "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message"}),
                    ),
                    Some(_) => {
                        st.shown.insert(id, text.clone());
                        ok(
                            json!({"message_id": id, "chat": {"id": body["chat_id"], "type": "private"}, "text": text}),
                        )
                    }
                }
            }
            "deleteMessage" => {
                let mut st = self.state.lock().unwrap();
                let id = body["message_id"].as_i64().unwrap_or(0);
                match st.shown.remove(&id) {
                    Some(_) => ok(json!(true)),
                    None => (
                        400,
                        json!({"ok": false, "error_code": 400, "description": "Bad Request: message to delete not found"}),
                    ),
                }
            }
            "sendDocument" => {
                let mut st = self.state.lock().unwrap();
                st.next_message_id += 1;
                if body["document"]["filename"].as_str().is_none() {
                    return (
                        400,
                        json!({"ok": false, "error_code": 400, "description": "Bad Request: there is no document in the request"}),
                    );
                }
                ok(
                    json!({"message_id": st.next_message_id, "chat": {"id": body["chat_id"], "type": "private"},
                          "document": {"file_name": body["document"]["filename"]}, "caption": body["caption"]}),
                )
            }
            // The other uploads, by Bot API rules: the file in the field
            // named after the method; a voice note must be Ogg/Opus (the
            // fake takes no MP3/M4A voice), a photo an image.
            "sendPhoto" | "sendAudio" | "sendVoice" => {
                let field = match method.as_str() {
                    "sendPhoto" => "photo",
                    "sendAudio" => "audio",
                    _ => "voice",
                };
                let mut st = self.state.lock().unwrap();
                st.next_message_id += 1;
                let parts = st
                    .uploads
                    .last()
                    .map(|(_, p)| p.clone())
                    .unwrap_or_default();
                let file = parts
                    .iter()
                    .find(|p| p.name == field && p.file_name.is_some());
                let valid = match (field, file) {
                    (_, None) => false,
                    ("voice", Some(f)) => {
                        f.data.starts_with(b"OggS") && f.data.windows(8).any(|w| w == b"OpusHead")
                    }
                    ("photo", Some(f)) => {
                        f.data.starts_with(b"\x89PNG") || f.data.starts_with(&[0xFF, 0xD8, 0xFF])
                    }
                    (_, Some(f)) => !f.data.is_empty(),
                };
                if !valid || body["chat_id"].as_str().is_none() {
                    return (
                        400,
                        json!({"ok": false, "error_code": 400, "description": format!("Bad Request: there is no {field} in the request")}),
                    );
                }
                ok(
                    json!({"message_id": st.next_message_id, "chat": {"id": body["chat_id"], "type": "private"},
                          field: {"file_id": format!("{field}-{}", st.next_message_id)}, "caption": body["caption"]}),
                )
            }
            "sendChatAction" => ok(json!(true)),
            // Ends a button's loading spinner; needs the query's id.
            "answerCallbackQuery" => {
                if body["callback_query_id"]
                    .as_str()
                    .is_some_and(|id| !id.is_empty())
                {
                    ok(json!(true))
                } else {
                    (
                        400,
                        json!({"ok": false, "error_code": 400, "description": "Bad Request: query is too old and response timeout expired or query ID is invalid"}),
                    )
                }
            }
            // Telegram's rules: 1-100 commands, each 1-32 of a-z 0-9 _,
            // a description of 1-256 characters.
            "setMyCommands" => {
                let valid = body["commands"].as_array().is_some_and(|list| {
                    (1..=100).contains(&list.len())
                        && list.iter().all(|c| {
                            let name = c["command"].as_str().unwrap_or("");
                            let description = c["description"].as_str().unwrap_or("");
                            (1..=32).contains(&name.len())
                                && name.chars().all(|ch| {
                                    ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_'
                                })
                                && (1..=256).contains(&description.chars().count())
                        })
                });
                if valid {
                    ok(json!(true))
                } else {
                    (
                        400,
                        json!({"ok": false, "error_code": 400, "description": "Bad Request: BOT_COMMAND_INVALID"}),
                    )
                }
            }
            _ => (
                404,
                json!({"ok": false, "error_code": 404, "description": "Not Found: method not found"}),
            ),
        }
    }
}

/// The `boundary` of a `multipart/form-data` content type.
fn multipart_boundary(content_type: &str) -> Option<String> {
    let (kind, params) = content_type.split_once(';')?;
    if !kind.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    params.split(';').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| v.trim().trim_matches('"').to_owned())
    })
}

/// The fields of a `multipart/form-data` body: text fields as strings, file
/// parts as `{"filename", "content_type", "content"}` (content as UTF-8 text,
/// which is what the gateway uploads). Malformed bodies give what parsed.
fn parse_multipart(body: &[u8], boundary: &str) -> Value {
    let text = String::from_utf8_lossy(body);
    let delimiter = format!("--{boundary}");
    let mut fields = Map::new();
    for part in text.split(delimiter.as_str()).skip(1) {
        if part.starts_with("--") {
            break;
        }
        let part = part.strip_prefix("\r\n").unwrap_or(part);
        let Some((head, content)) = part.split_once("\r\n\r\n") else {
            continue;
        };
        let content = content.strip_suffix("\r\n").unwrap_or(content);
        let mut name = None;
        let mut filename = None;
        let mut content_type = None;
        for line in head.split("\r\n") {
            let lower = line.to_ascii_lowercase();
            if lower.starts_with("content-disposition:") {
                for param in line.split(';') {
                    if let Some((k, v)) = param.split_once('=') {
                        let v = v.trim().trim_matches('"').to_owned();
                        match k.trim() {
                            "name" => name = Some(v),
                            "filename" => filename = Some(v),
                            _ => {}
                        }
                    }
                }
            } else if lower.starts_with("content-type:") {
                content_type = line.split_once(':').map(|(_, v)| v.trim().to_owned());
            }
        }
        let Some(name) = name else { continue };
        let value = match filename {
            Some(filename) => json!({
                "filename": filename, "content_type": content_type, "content": content,
            }),
            None => json!(content),
        };
        fields.insert(name, value);
    }
    Value::Object(fields)
}
