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

mod files;
mod rules;
mod server;

// Each test binary that includes this module uses a part of it.
#[allow(unused_imports)]
pub use files::{aeskey, encrypt_file};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};
use tokio_tungstenite::tungstenite::Message;

use files::serve_file_request;
use server::serve;

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
