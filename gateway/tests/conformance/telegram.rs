//! Telegram's harness: the loopback Bot API fake (`telegram_support`),
//! long polling. DMs are private chats; the group is a forum supergroup
//! (topics are its threads) where the bot answers every message
//! (`TELEGRAM_GROUP_POLICY=all`); the home channel is a chat of its own.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::conformance_kit::{
    Access, Capabilities, Harness, Media, Place, Plan, Posted, Said, Sender, SentFile,
};
use crate::telegram_support::{Fake, TOKEN};

const USERS: [i64; 3] = [101, 102, 103];
const STRANGER: i64 = 666;
const GROUP: i64 = -100_777;
const HOME: i64 = -100_888;

pub struct Telegram {
    fake: Fake,
    /// The last update (and message) id pushed.
    last_id: i64,
    /// Which `sendMessage` requests (by index) the fake answered with 429.
    rejected: Mutex<BTreeSet<usize>>,
}

impl Harness for Telegram {
    const NAME: &'static str = "telegram";

    fn capabilities() -> Capabilities {
        Capabilities {
            users: USERS.len(),
            groups: true,
            threads: true,
            answers_while_down: true,
            replies_point_back: true,
            reply_limit: Some(4096),
            rate_limit: true,
            access: Access::Pairing,
            photo_in: true,
            voice_in: true,
            file_out: true,
            home_channel: true,
        }
    }

    fn soak_plan() -> Plan {
        Plan {
            rounds: 30,
            users: USERS.len(),
            // Queued at the fake before each gateway starts; it may be
            // killed before it even polled.
            while_down: 2,
            down_in_first_round: true,
            while_up: 0,
            first_round_extra: (0, Duration::ZERO),
            kill_within: Duration::from_millis(900),
            graceful_every: 7,
            before_last: 0,
            settle: Duration::ZERO,
        }
    }

    fn start(rt: &tokio::runtime::Runtime) -> Self {
        Telegram {
            fake: rt.block_on(Fake::start(true)),
            last_id: 0,
            rejected: Mutex::new(BTreeSet::new()),
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        let users: Vec<String> = USERS.iter().map(i64::to_string).collect();
        vec![
            ("TELEGRAM_BOT_TOKEN", TOKEN.to_owned()),
            ("TELEGRAM_API_URL", self.fake.base.clone()),
            ("TELEGRAM_POLL_TIMEOUT", "1".to_owned()),
            ("TELEGRAM_ALLOWED_USERS", users.join(",")),
            ("TELEGRAM_GROUP_POLICY", "all".to_owned()),
            ("TELEGRAM_HOME_CHANNEL", HOME.to_string()),
        ]
    }

    fn send(&mut self, from: Sender, place: Place, text: &str) -> Posted {
        self.push(from, place, json!({"text": text}))
    }

    fn send_media(&mut self, from: Sender, place: Place, media: &Media) -> Posted {
        let file_id = format!("file-{}", self.last_id + 1);
        match media {
            Media::Photo { png, caption } => {
                let path = format!("photos/{file_id}.jpg");
                self.fake.add_file(&file_id, &path, png.clone());
                let photo = json!([{"file_id": file_id, "file_unique_id": file_id,
                    "width": 1, "height": 1, "file_size": png.len()}]);
                self.push(from, place, json!({"photo": photo, "caption": caption}))
            }
            Media::Voice { ogg } => {
                let path = format!("voice/{file_id}.oga");
                self.fake.add_file(&file_id, &path, ogg.clone());
                let voice = json!({"file_id": file_id, "file_unique_id": file_id,
                    "duration": 1, "mime_type": "audio/ogg", "file_size": ogg.len()});
                self.push(from, place, json!({"voice": voice}))
            }
        }
    }

    fn said(&self) -> Vec<Said> {
        let rejected = self.rejected.lock().unwrap();
        let texts = self
            .fake
            .requests("sendMessage")
            .into_iter()
            .enumerate()
            .filter(|(i, _)| !rejected.contains(i))
            .map(|(_, r)| r);
        let mut sent: Vec<_> = texts.chain(self.fake.requests("sendDocument")).collect();
        sent.sort_by_key(|r| r.at);
        sent.into_iter()
            .map(|r| {
                let body = &r.body;
                let file = body["document"]["filename"].as_str().map(|name| SentFile {
                    name: name.to_owned(),
                    bytes: body["document"]["content"]
                        .as_str()
                        .unwrap_or("")
                        .as_bytes()
                        .to_vec(),
                });
                let reply_to = match &body["reply_parameters"] {
                    Value::String(s) => serde_json::from_str::<Value>(s).unwrap_or_default(),
                    other => other.clone(),
                };
                Said {
                    chat: id_text(&body["chat_id"]),
                    reply_to: reply_to["message_id"].as_i64().map(|id| id.to_string()),
                    text: body["text"]
                        .as_str()
                        .or(body["caption"].as_str())
                        .unwrap_or("")
                        .to_owned(),
                    file,
                }
            })
            .collect()
    }

    fn mark(&self) -> usize {
        self.fake.requests("getUpdates").len()
    }

    /// Up (and so listening for SIGTERM) once it polls.
    fn wait_up(&self, polls: usize) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.fake.requests("getUpdates").len() == polls {
            assert!(Instant::now() < deadline, "the gateway never polled");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The next `sends` `sendMessage` calls get Telegram's 429 with
    /// `retry_after: 1`.
    fn throttle(&mut self, sends: usize) {
        let next = self.fake.requests("sendMessage").len();
        let mut rejected = self.rejected.lock().unwrap();
        for i in 0..sends {
            rejected.insert(next + i);
            self.fake.script(
                "sendMessage",
                429,
                json!({"ok": false, "error_code": 429,
                    "description": "Too Many Requests: retry after 1",
                    "parameters": {"retry_after": 1}}),
            );
        }
    }

    fn throttled(&self) -> usize {
        let made = self.fake.requests("sendMessage").len();
        self.rejected
            .lock()
            .unwrap()
            .iter()
            .filter(|&&i| i < made)
            .count()
    }

    fn home_chat(&self) -> String {
        HOME.to_string()
    }
}

impl Telegram {
    /// Pushes an update whose message is `content` plus who and where.
    fn push(&mut self, from: Sender, place: Place, mut content: Value) -> Posted {
        self.last_id += 1;
        let id = self.last_id;
        let user = match from {
            Sender::User(n) => USERS[n],
            Sender::Stranger => STRANGER,
        };
        let chat = match place {
            Place::Dm => json!({"id": user, "type": "private"}),
            Place::Group | Place::Thread(_) => {
                json!({"id": GROUP, "type": "supergroup", "title": "Conformance", "is_forum": true})
            }
        };
        content["message_id"] = json!(id);
        content["date"] = json!(0);
        content["from"] = json!({"id": user, "is_bot": false, "first_name": "Conformance"});
        content["chat"] = chat.clone();
        if let Place::Thread(k) = place {
            content["message_thread_id"] = json!(1000 + k);
            content["is_topic_message"] = json!(true);
        }
        self.fake
            .push_update(json!({"update_id": id, "message": content}));
        Posted {
            id: id.to_string(),
            chat: chat["id"].as_i64().unwrap_or(0).to_string(),
        }
    }
}

/// A chat id as JSON number or string, as text.
fn id_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
