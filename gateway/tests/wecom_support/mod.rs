//! A loopback fake of WeCom's AI-bot WebSocket server.
//!
//! It speaks the protocol as WeCom's official SDK expects it and checks the
//! shape of every frame the client sends. Anything off is recorded as a
//! violation; tests end with [`FakeWecom::assert_clean`].
//!
//! Checked once by hand (not in CI: it needs PyPI), 2026-11-30, with
//! `wecom-aibot-python-sdk` 1.0.2 as the client: `python3 -m venv /tmp/wecomsdk
//! && /tmp/wecomsdk/bin/pip install wecom-aibot-python-sdk`, then a throwaway
//! test that started this fake and ran a script using `aibot.WSClient`
//! (`aibot.ws._SSL_CONTEXT = None` for ws://, `heartbeat_interval=400`). The
//! SDK subscribed ("Authentication successful"), received a text callback and
//! an `enter_chat` event, and its `reply` (markdown, callback req_id),
//! `send_message` (fresh `aibot_send_msg_…` req_id, `chatid`),
//! `reply_welcome` and four pings were all acked with errcode 0 — with no
//! violation recorded. The frame shapes checked below are the SDK's
//! (`aibot/ws.py`, `aibot/client.py`).
//!
//! Rules checked on every client frame:
//! - one JSON text frame with `cmd` and a non-empty string `headers.req_id`;
//! - the first frame of a connection is `aibot_subscribe` with string
//!   `body.bot_id` and `body.secret`; nothing else is accepted before it is
//!   acked;
//! - `ping` has no body;
//! - `aibot_respond_msg` reuses the `req_id` of a callback this server sent on
//!   this connection, body `{msgtype: markdown, markdown: {content}}`,
//!   content at most 4000 characters;
//! - `aibot_send_msg` uses a fresh `req_id` (never a callback's, never
//!   repeated), body `{chatid, msgtype: markdown, markdown: {content}}`;
//! - `aibot_respond_welcome_msg` reuses an event's `req_id`, body
//!   `{msgtype: text, text: {content}}`;
//! - file uploads as WeCom's SDKs make them: `aibot_upload_media_init`
//!   (`type`, `filename`, `total_size`, `total_chunks` ≤ 100, 32-hex `md5`;
//!   acked with a fresh `upload_id`), one `aibot_upload_media_chunk` per
//!   chunk (`upload_id`, `chunk_index`, `base64_data` of at most 512 KiB),
//!   `aibot_upload_media_finish` (every chunk there, size and MD5 matching;
//!   acked with a `media_id`), then `aibot_send_msg` with
//!   `{chatid, msgtype: file, file: {media_id}}` naming a finished upload;
//! - no frame for a `req_id` arrives while an earlier frame for the same
//!   `req_id` is still unacked;
//! - streamed replies as WeCom's SDKs send them (`replyStream`):
//!   `aibot_respond_msg` with `{msgtype: stream, stream: {id, finish,
//!   content}}` on a callback's `req_id`, one non-empty `stream.id` for every
//!   frame of that `req_id`, `content` at most 20480 bytes, nothing after the
//!   frame with `finish: true`, and no markdown reply on a `req_id` that
//!   streams (nor a stream on one already answered).
//!
//! Files: an HTTP file server on another loopback port serves what a test
//! puts there ([`FakeWecom::serve_file`]) — an image or file message carries
//! the URL of its file encrypted with AES-256-CBC under the message's
//! `aeskey` ([`encrypt_file`], as WeCom does), or a failure to test with.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};
use tokio_tungstenite::tungstenite::Message;

/// How the fake behaves; change it between steps with [`FakeWecom::set`].
#[derive(Clone, Debug)]
pub struct Behaviour {
    /// The credentials it accepts.
    pub bot_id: String,
    pub secret: String,
    /// Answer pings (turn off to simulate a dead connection).
    pub ack_pings: bool,
    /// Leave the pings of this one connection unanswered (a connection that
    /// died silently), answer those of later ones.
    pub mute_pings_on: Option<usize>,
    /// Answer replies and sends.
    pub ack_replies: bool,
    /// Delay before each reply/send ack.
    pub ack_delay: Duration,
    /// Refuse `aibot_respond_msg` with this errcode (an expired req_id).
    pub refuse_respond: Option<i64>,
}

impl Default for Behaviour {
    fn default() -> Self {
        Self {
            bot_id: "bot-1".into(),
            secret: "s3cr3t-value".into(),
            ack_pings: true,
            mute_pings_on: None,
            ack_replies: true,
            ack_delay: Duration::ZERO,
            refuse_respond: None,
        }
    }
}

/// One frame the client sent.
#[derive(Clone, Debug)]
pub struct Received {
    /// Which connection (0-based, in accept order).
    pub conn: usize,
    pub cmd: String,
    pub req_id: String,
    pub frame: Value,
    pub at: Instant,
}

#[derive(Default)]
struct Shared {
    behaviour: Mutex<Behaviour>,
    received: Mutex<Vec<Received>>,
    violations: Mutex<Vec<String>>,
    /// Outgoing queues, one per accepted connection.
    conns: Mutex<Vec<mpsc::UnboundedSender<Message>>>,
    /// req_ids of callbacks and events this server sent, per connection.
    issued_callbacks: Mutex<HashSet<(usize, String)>>,
    issued_events: Mutex<HashSet<(usize, String)>>,
    /// Every req_id the client used for aibot_send_msg.
    send_ids: Mutex<HashSet<String>>,
    /// req_ids with a frame awaiting its ack.
    in_flight: Mutex<HashSet<String>>,
    max_in_flight: Mutex<usize>,
    /// Uploads in progress, by upload_id.
    uploads: Mutex<HashMap<String, Upload>>,
    /// Finished uploads, by media_id: (file name, bytes).
    media: Mutex<HashMap<String, (String, Vec<u8>)>>,
    /// Files sent with aibot_send_msg: (chat id, file name, bytes).
    files: Mutex<Vec<(String, String, Vec<u8>)>>,
    next_upload: Mutex<u64>,
    /// What the file server answers, by path.
    served: Mutex<HashMap<String, FileReply>>,
    /// Paths requested from the file server, in order.
    downloads: Mutex<Vec<String>>,
    /// Streamed replies, by the callback `req_id` they answer.
    streams: Mutex<BTreeMap<String, Stream>>,
    /// Callback `req_id`s answered with markdown.
    answered: Mutex<HashSet<String>>,
    changed: Notify,
}

/// What the file server answers for one path.
#[derive(Clone, Debug)]
pub enum FileReply {
    /// `200 OK` with these bytes.
    Bytes(Vec<u8>),
    /// This status and no body.
    Status(u16),
    /// Announces all of these bytes, sends the first `n`, then closes.
    CutShort(Vec<u8>, usize),
}

/// One frame of a streamed reply.
#[derive(Clone, Debug)]
pub struct StreamFrame {
    pub content: String,
    pub finish: bool,
    pub at: Instant,
}

/// A streamed reply: the frames sent on one callback `req_id`.
#[derive(Clone, Debug)]
pub struct Stream {
    pub req_id: String,
    /// The `stream.id` of the first frame.
    pub id: String,
    pub frames: Vec<StreamFrame>,
}

impl Stream {
    /// Whether the last frame said `finish: true`.
    pub fn finished(&self) -> bool {
        self.frames.last().is_some_and(|f| f.finish)
    }
}

/// A WeCom file key: 32 bytes from `seed`, base64 without padding (43
/// characters, as WeCom sends it).
pub fn aeskey(seed: u8) -> String {
    use base64::Engine as _;
    let key: Vec<u8> = (0..32u8)
        .map(|i| seed.wrapping_mul(31).wrapping_add(i))
        .collect();
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(key)
}

/// `plain` encrypted as WeCom encrypts an AI-bot file: AES-256-CBC under the
/// decoded `aeskey`, the IV its first 16 bytes, PKCS#7 padding to a multiple
/// of 32 bytes.
pub fn encrypt_file(plain: &[u8], aeskey: &str) -> Vec<u8> {
    use aes::Aes256;
    use base64::Engine as _;
    use cbc::cipher::block_padding::NoPadding;
    use cbc::cipher::{BlockModeEncrypt, KeyIvInit};
    let key: [u8; 32] = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(aeskey.trim_end_matches('='))
        .unwrap()
        .try_into()
        .unwrap();
    let pad = 32 - plain.len() % 32;
    let mut buf = plain.to_vec();
    buf.resize(plain.len() + pad, pad as u8);
    let mut iv = [0u8; 16];
    iv.copy_from_slice(&key[..16]);
    let len = buf.len();
    cbc::Encryptor::<Aes256>::new(&key.into(), &iv.into())
        .encrypt_padded::<NoPadding>(&mut buf, len)
        .unwrap()
        .to_vec()
}

/// An upload announced by `aibot_upload_media_init`.
struct Upload {
    filename: String,
    total_size: u64,
    total_chunks: u64,
    md5: String,
    chunks: BTreeMap<u64, Vec<u8>>,
}

/// The running fake; dropped with the test's runtime.
pub struct FakeWecom {
    pub url: String,
    /// The file server's base URL (`http://127.0.0.1:port`).
    pub files_url: String,
    shared: Arc<Shared>,
}

impl FakeWecom {
    /// Starts listening on an ephemeral loopback port.
    pub async fn start(behaviour: Behaviour) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://{}", listener.local_addr().unwrap());
        let shared = Arc::new(Shared::default());
        *shared.behaviour.lock().unwrap() = behaviour;
        let s = shared.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let Ok(ws) = tokio_tungstenite::accept_async(tcp).await else {
                    continue;
                };
                let (tx, rx) = mpsc::unbounded_channel();
                let conn = {
                    let mut conns = s.conns.lock().unwrap();
                    conns.push(tx);
                    conns.len() - 1
                };
                s.changed.notify_waiters();
                tokio::spawn(serve(s.clone(), conn, ws, rx));
            }
        });
        let files = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let files_url = format!("http://{}", files.local_addr().unwrap());
        let s = shared.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = files.accept().await {
                tokio::spawn(serve_file_request(s.clone(), tcp));
            }
        });
        Self {
            url,
            files_url,
            shared,
        }
    }

    /// Serves `reply` at `path` on the file server; returns its URL.
    pub fn serve_file(&self, path: &str, reply: FileReply) -> String {
        self.shared
            .served
            .lock()
            .unwrap()
            .insert(path.to_owned(), reply);
        format!("{}{path}", self.files_url)
    }

    /// Paths requested from the file server, in order.
    pub fn downloads(&self) -> Vec<String> {
        self.shared.downloads.lock().unwrap().clone()
    }

    /// The streamed reply on callback `req_id`, if any.
    pub fn stream(&self, req_id: &str) -> Option<Stream> {
        self.shared.streams.lock().unwrap().get(req_id).cloned()
    }

    /// Waits until the reply on callback `req_id` is complete (a markdown
    /// reply, or a stream's `finish: true` frame) and returns its text.
    pub async fn reply_to(&self, req_id: &str) -> String {
        self.wait_until(&format!("the reply to {req_id}"), |r| {
            r.iter().any(|f| {
                f.cmd == "aibot_respond_msg"
                    && f.req_id == req_id
                    && (f.frame["body"]["msgtype"] == "markdown"
                        || f.frame["body"]["stream"]["finish"] == true)
            })
        })
        .await;
        let frame = self
            .received_cmd("aibot_respond_msg")
            .into_iter()
            .rev()
            .find(|f| f.req_id == req_id)
            .unwrap();
        let body = &frame.frame["body"];
        body["markdown"]["content"]
            .as_str()
            .or(body["stream"]["content"].as_str())
            .unwrap_or("")
            .to_owned()
    }

    pub fn set(&self, f: impl FnOnce(&mut Behaviour)) {
        f(&mut self.shared.behaviour.lock().unwrap());
    }

    pub fn connections(&self) -> usize {
        self.shared.conns.lock().unwrap().len()
    }

    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }

    pub fn received_cmd(&self, cmd: &str) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| r.cmd == cmd)
            .collect()
    }

    /// Files sent so far: (chat id, file name, bytes).
    pub fn files(&self) -> Vec<(String, String, Vec<u8>)> {
        self.shared.files.lock().unwrap().clone()
    }

    pub fn max_in_flight(&self) -> usize {
        *self.shared.max_in_flight.lock().unwrap()
    }

    /// Waits (generously) until `pred` holds over the received frames.
    pub async fn wait_until(&self, what: &str, pred: impl Fn(&[Received]) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let notified = self.shared.changed.notified();
            if pred(&self.shared.received.lock().unwrap()) {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!(
                    "timed out waiting for {what}; received: {:#?}",
                    self.received()
                        .iter()
                        .map(|r| (r.conn, &r.cmd))
                        .collect::<Vec<_>>()
                );
            }
        }
    }

    /// Waits until the `n`-th frame with `cmd` has arrived and returns it.
    pub async fn nth(&self, cmd: &str, n: usize) -> Received {
        self.wait_until(&format!("{cmd} #{n}"), |r| {
            r.iter().filter(|f| f.cmd == cmd).count() > n
        })
        .await;
        self.received_cmd(cmd).remove(n)
    }

    /// Sends `frame` to the newest connection, registering the req_id of a
    /// callback or event so replies can be checked against it.
    pub fn push(&self, frame: Value) {
        let conns = self.shared.conns.lock().unwrap();
        let conn = conns.len() - 1;
        let req_id = frame["headers"]["req_id"].as_str().unwrap_or("").to_owned();
        match frame["cmd"].as_str() {
            Some("aibot_msg_callback") => {
                self.shared
                    .issued_callbacks
                    .lock()
                    .unwrap()
                    .insert((conn, req_id));
            }
            Some("aibot_event_callback") => {
                self.shared
                    .issued_events
                    .lock()
                    .unwrap()
                    .insert((conn, req_id));
            }
            _ => {}
        }
        conns[conn].send(Message::text(frame.to_string())).unwrap();
    }

    /// Sends a text message callback and returns its req_id.
    pub fn push_text(&self, req_id: &str, msgid: &str, chat: Chat<'_>, content: &str) {
        let mut body = json!({
            "msgid": msgid,
            "aibotid": "bot-1",
            "from": {"userid": chat.user},
            "msgtype": "text",
            "text": {"content": content},
        });
        match chat.group {
            Some(g) => {
                body["chattype"] = json!("group");
                body["chatid"] = json!(g);
            }
            None => body["chattype"] = json!("single"),
        }
        self.push(
            json!({"cmd": "aibot_msg_callback", "headers": {"req_id": req_id}, "body": body}),
        );
    }

    /// Sends an image message callback whose file is at `url`, encrypted
    /// with `aeskey`.
    pub fn push_image(&self, req_id: &str, msgid: &str, user: &str, url: &str, aeskey: &str) {
        self.push(json!({
            "cmd": "aibot_msg_callback", "headers": {"req_id": req_id},
            "body": {"msgid": msgid, "aibotid": "bot-1", "chattype": "single",
                     "from": {"userid": user}, "msgtype": "image",
                     "image": {"url": url, "aeskey": aeskey}}
        }));
    }

    /// Sends an event callback.
    pub fn push_event(&self, req_id: &str, msgid: &str, user: &str, eventtype: &str) {
        self.push(json!({
            "cmd": "aibot_event_callback",
            "headers": {"req_id": req_id},
            "body": {
                "msgid": msgid, "create_time": 1_700_000_000, "aibotid": "bot-1",
                "from": {"userid": user}, "chattype": "single",
                "msgtype": "event", "event": {"eventtype": eventtype}
            }
        }));
    }

    /// Panics with every protocol violation seen.
    pub fn assert_clean(&self) {
        let v = self.shared.violations.lock().unwrap();
        assert!(v.is_empty(), "protocol violations: {v:#?}");
    }
}

/// Who sends a test message: a DM when `group` is `None`.
#[derive(Clone, Copy, Debug)]
pub struct Chat<'a> {
    pub user: &'a str,
    pub group: Option<&'a str>,
}

fn ack(req_id: &str, errcode: i64, errmsg: &str) -> Message {
    Message::text(
        json!({"headers": {"req_id": req_id}, "errcode": errcode, "errmsg": errmsg}).to_string(),
    )
}

fn ack_body(req_id: &str, body: Value) -> Message {
    Message::text(
        json!({"headers": {"req_id": req_id}, "errcode": 0, "errmsg": "ok", "body": body})
            .to_string(),
    )
}

/// Handles the three upload commands; returns the ack.
fn upload_step(
    s: &Shared,
    cmd: &str,
    body: &Value,
    req_id: &str,
    problems: &mut Vec<String>,
) -> Message {
    use base64::Engine as _;
    use md5::Digest as _;
    let refuse = |problems: &mut Vec<String>, p: String| {
        problems.push(p);
        ack(req_id, 40001, "invalid upload")
    };
    match cmd {
        "aibot_upload_media_init" => {
            let (Some(kind), Some(filename), Some(total_size), Some(total_chunks), Some(md5)) = (
                body["type"].as_str(),
                body["filename"].as_str(),
                body["total_size"].as_u64(),
                body["total_chunks"].as_u64(),
                body["md5"].as_str(),
            ) else {
                return refuse(
                    problems,
                    format!(
                        "upload init needs type, filename, total_size, total_chunks, md5: {body}"
                    ),
                );
            };
            if !["file", "image", "voice", "video"].contains(&kind)
                || filename.is_empty()
                || total_size < 5
                || !(1..=100).contains(&total_chunks)
                || total_chunks != total_size.div_ceil(512 * 1024)
                || md5.len() != 32
                || !md5.bytes().all(|b| b.is_ascii_hexdigit())
            {
                return refuse(problems, format!("bad upload init: {body}"));
            }
            let upload_id = {
                let mut n = s.next_upload.lock().unwrap();
                *n += 1;
                format!("upload-{n}")
            };
            s.uploads.lock().unwrap().insert(
                upload_id.clone(),
                Upload {
                    filename: filename.to_owned(),
                    total_size,
                    total_chunks,
                    md5: md5.to_owned(),
                    chunks: BTreeMap::new(),
                },
            );
            ack_body(req_id, json!({"upload_id": upload_id}))
        }
        "aibot_upload_media_chunk" => {
            let mut uploads = s.uploads.lock().unwrap();
            let Some(upload) = body["upload_id"]
                .as_str()
                .and_then(|id| uploads.get_mut(id))
            else {
                return refuse(problems, format!("chunk for an unknown upload: {body}"));
            };
            let (Some(index), Some(data)) =
                (body["chunk_index"].as_u64(), body["base64_data"].as_str())
            else {
                return refuse(
                    problems,
                    format!("chunk needs chunk_index and base64_data: {body}"),
                );
            };
            let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data) else {
                return refuse(problems, format!("chunk {index} is not base64"));
            };
            if index >= upload.total_chunks
                || bytes.len() > 512 * 1024
                || upload.chunks.insert(index, bytes).is_some()
            {
                return refuse(problems, format!("bad or repeated chunk {index}"));
            }
            ack(req_id, 0, "ok")
        }
        _ => {
            let Some(upload_id) = body["upload_id"].as_str() else {
                return refuse(problems, format!("finish needs upload_id: {body}"));
            };
            let Some(upload) = s.uploads.lock().unwrap().remove(upload_id) else {
                return refuse(problems, format!("finish of an unknown upload {upload_id}"));
            };
            let bytes: Vec<u8> = upload.chunks.values().flatten().copied().collect();
            let md5: String = md5::Md5::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            if upload.chunks.len() as u64 != upload.total_chunks
                || bytes.len() as u64 != upload.total_size
                || md5 != upload.md5
            {
                return refuse(
                    problems,
                    format!("upload {upload_id} incomplete or its MD5 differs"),
                );
            }
            let media_id = format!("media-{upload_id}");
            s.media
                .lock()
                .unwrap()
                .insert(media_id.clone(), (upload.filename, bytes));
            ack_body(req_id, json!({"media_id": media_id}))
        }
    }
}

fn markdown_content<'a>(body: &'a Value, problems: &mut Vec<String>) -> Option<&'a str> {
    if body["msgtype"] != "markdown" {
        problems.push(format!("msgtype must be markdown: {body}"));
    }
    match body["markdown"]["content"].as_str() {
        Some(c) => {
            if c.chars().count() > 4000 {
                problems.push(format!(
                    "content longer than 4000 chars: {}",
                    c.chars().count()
                ));
            }
            Some(c)
        }
        None => {
            problems.push(format!("markdown.content missing: {body}"));
            None
        }
    }
}

/// Checks and records one `stream` frame answering `req_id`.
fn stream_frame(s: &Shared, req_id: &str, body: &Value, problems: &mut Vec<String>) {
    let stream = &body["stream"];
    let (Some(id), Some(finish), Some(content)) = (
        stream["id"].as_str(),
        stream["finish"].as_bool(),
        stream["content"].as_str(),
    ) else {
        problems.push(format!(
            "stream frame needs stream.id, stream.finish, stream.content: {body}"
        ));
        return;
    };
    if id.is_empty() {
        problems.push(format!("stream frame with an empty stream.id: {body}"));
    }
    if content.len() > 20480 {
        problems.push(format!(
            "stream content longer than 20480 bytes: {}",
            content.len()
        ));
    }
    if s.answered.lock().unwrap().contains(req_id) {
        problems.push(format!(
            "stream frame on {req_id}, already answered with markdown"
        ));
    }
    let mut streams = s.streams.lock().unwrap();
    let entry = streams.entry(req_id.to_owned()).or_insert_with(|| Stream {
        req_id: req_id.to_owned(),
        id: id.to_owned(),
        frames: Vec::new(),
    });
    if entry.id != id {
        problems.push(format!(
            "stream frame on {req_id} with stream.id {id}, the stream is {}",
            entry.id
        ));
    }
    if entry.finished() {
        problems.push(format!("stream frame on {req_id} after finish: true"));
    }
    entry.frames.push(StreamFrame {
        content: content.to_owned(),
        finish,
        at: Instant::now(),
    });
}

/// Answers one HTTP/1.1 request of the file server, then closes.
async fn serve_file_request(s: Arc<Shared>, mut tcp: tokio::net::TcpStream) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match tcp.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if head.len() > 64 * 1024 {
            return;
        }
    }
    let head = String::from_utf8_lossy(&head);
    let mut words = head.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    if method != "GET" {
        s.violations
            .lock()
            .unwrap()
            .push(format!("file server: {method} {path}, downloads are GETs"));
    }
    s.downloads.lock().unwrap().push(path.to_owned());
    s.changed.notify_waiters();
    let reply = s.served.lock().unwrap().get(path).cloned();
    let (status, body, sent) = match reply {
        Some(FileReply::Bytes(b)) => {
            let n = b.len();
            (200, b, n)
        }
        Some(FileReply::Status(code)) => (code, Vec::new(), 0),
        Some(FileReply::CutShort(b, n)) => (200, b, n),
        None => (404, Vec::new(), 0),
    };
    let head = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/octet-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = tcp.write_all(head.as_bytes()).await;
    let _ = tcp.write_all(&body[..sent.min(body.len())]).await;
    let _ = tcp.shutdown().await;
}

async fn serve(
    s: Arc<Shared>,
    conn: usize,
    ws: tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
    mut rx: mpsc::UnboundedReceiver<Message>,
) {
    let (mut sink, mut stream) = ws.split();
    let (ack_tx, mut ack_rx) = mpsc::unbounded_channel::<(String, Message)>();
    let mut subscribed = false;
    let mut first = true;
    loop {
        tokio::select! {
            out = rx.recv() => match out {
                Some(m) => {
                    let close = matches!(m, Message::Close(_));
                    if sink.send(m).await.is_err() || close {
                        return;
                    }
                }
                None => return,
            },
            Some((req_id, m)) = ack_rx.recv() => {
                s.in_flight.lock().unwrap().remove(&req_id);
                if sink.send(m).await.is_err() {
                    return;
                }
            }
            msg = stream.next() => {
                let text = match msg {
                    Some(Ok(Message::Text(t))) => t.as_str().to_owned(),
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    Some(Ok(other)) => {
                        s.violations.lock().unwrap().push(format!("conn {conn}: non-text frame {other:?}"));
                        continue;
                    }
                };
                let mut problems = Vec::new();
                let frame: Value = match serde_json::from_str(&text) {
                    Ok(v) => v,
                    Err(e) => {
                        s.violations.lock().unwrap().push(format!("conn {conn}: not JSON ({e}): {text}"));
                        continue;
                    }
                };
                let cmd = frame["cmd"].as_str().unwrap_or("").to_owned();
                let req_id = frame["headers"]["req_id"].as_str().unwrap_or("").to_owned();
                if cmd.is_empty() {
                    problems.push(format!("frame without cmd: {text}"));
                }
                if req_id.is_empty() {
                    problems.push(format!("frame without headers.req_id: {text}"));
                }
                if first && cmd != "aibot_subscribe" {
                    problems.push(format!("first frame must be aibot_subscribe, got {cmd}"));
                }
                first = false;
                if cmd != "aibot_subscribe" && !subscribed {
                    problems.push(format!("{cmd} before a successful subscribe"));
                }
                let behaviour = s.behaviour.lock().unwrap().clone();
                let mut reply: Option<Message> = None;
                let mut delayed = false;
                match cmd.as_str() {
                    "aibot_subscribe" => {
                        let body = &frame["body"];
                        let (Some(bot), Some(secret)) = (body["bot_id"].as_str(), body["secret"].as_str()) else {
                            problems.push(format!("subscribe body needs bot_id and secret: {body}"));
                            continue;
                        };
                        if bot == behaviour.bot_id && secret == behaviour.secret {
                            subscribed = true;
                            reply = Some(ack(&req_id, 0, "ok"));
                        } else {
                            reply = Some(ack(&req_id, 40058, "invalid bot_id or secret"));
                        }
                    }
                    "ping" => {
                        if frame.get("body").is_some() {
                            problems.push("ping must have no body".into());
                        }
                        if behaviour.ack_pings && behaviour.mute_pings_on != Some(conn) {
                            reply = Some(ack(&req_id, 0, "ok"));
                        }
                    }
                    "aibot_respond_msg" => {
                        if !s.issued_callbacks.lock().unwrap().contains(&(conn, req_id.clone())) {
                            problems.push(format!("respond_msg with req_id {req_id} that is no callback of this connection"));
                        }
                        if frame["body"]["msgtype"] == "stream" {
                            stream_frame(&s, &req_id, &frame["body"], &mut problems);
                        } else {
                            if s.streams.lock().unwrap().contains_key(&req_id) {
                                problems.push(format!("markdown reply on {req_id}, which streams"));
                            }
                            s.answered.lock().unwrap().insert(req_id.clone());
                            markdown_content(&frame["body"], &mut problems);
                        }
                        delayed = true;
                        if behaviour.ack_replies {
                            reply = Some(match behaviour.refuse_respond {
                                Some(code) => ack(&req_id, code, "req_id expired"),
                                None => ack(&req_id, 0, "ok"),
                            });
                        }
                    }
                    "aibot_send_msg" => {
                        let body = &frame["body"];
                        if body["chatid"].as_str().is_none_or(str::is_empty) {
                            problems.push(format!("send_msg without chatid: {body}"));
                        }
                        let reused = s.issued_callbacks.lock().unwrap().iter().any(|(_, r)| *r == req_id)
                            || !s.send_ids.lock().unwrap().insert(req_id.clone());
                        if reused {
                            problems.push(format!("send_msg must use a fresh req_id, got {req_id}"));
                        }
                        if body["msgtype"] == "file" {
                            let media = body["file"]["media_id"].as_str().and_then(|id| s.media.lock().unwrap().get(id).cloned());
                            match media {
                                Some((name, bytes)) => s.files.lock().unwrap().push((
                                    body["chatid"].as_str().unwrap_or("").to_owned(),
                                    name,
                                    bytes,
                                )),
                                None => problems.push(format!("file message with an unknown media_id: {body}")),
                            }
                        } else {
                            markdown_content(body, &mut problems);
                        }
                        delayed = true;
                        if behaviour.ack_replies {
                            reply = Some(ack(&req_id, 0, "ok"));
                        }
                    }
                    "aibot_respond_welcome_msg" => {
                        if !s.issued_events.lock().unwrap().contains(&(conn, req_id.clone())) {
                            problems.push(format!("welcome with req_id {req_id} that is no event of this connection"));
                        }
                        let body = &frame["body"];
                        if body["msgtype"] != "text" || body["text"]["content"].as_str().is_none() {
                            problems.push(format!("welcome body must be text: {body}"));
                        }
                        delayed = true;
                        reply = Some(ack(&req_id, 0, "ok"));
                    }
                    "aibot_upload_media_init" | "aibot_upload_media_chunk" | "aibot_upload_media_finish" => {
                        delayed = true;
                        reply = Some(upload_step(&s, &cmd, &frame["body"], &req_id, &mut problems));
                    }
                    other => problems.push(format!("unknown cmd {other}")),
                }
                if delayed {
                    let mut in_flight = s.in_flight.lock().unwrap();
                    if !in_flight.insert(req_id.clone()) {
                        problems.push(format!("second frame for {req_id} before the first was acked"));
                    }
                    let mut max = s.max_in_flight.lock().unwrap();
                    *max = (*max).max(in_flight.len());
                }
                if !problems.is_empty() {
                    let mut v = s.violations.lock().unwrap();
                    v.extend(problems.into_iter().map(|p| format!("conn {conn}: {p}")));
                }
                s.received.lock().unwrap().push(Received { conn, cmd, req_id: req_id.clone(), frame, at: Instant::now() });
                s.changed.notify_waiters();
                if let Some(m) = reply {
                    if delayed {
                        let tx = ack_tx.clone();
                        let delay = behaviour.ack_delay;
                        tokio::spawn(async move {
                            tokio::time::sleep(delay).await;
                            let _ = tx.send((req_id, m));
                        });
                    } else if sink.send(m).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}
