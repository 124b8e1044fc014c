//! WeCom AI bot's harness: the loopback WebSocket fake (`wecom_support`).
//! A DM is a `single` callback, the group a `group` chat; replies come back
//! as `aibot_respond_msg` on the callback's `req_id` (markdown, or a stream
//! whose finished frame counts), everything else as `aibot_send_msg` to a
//! `chatid` (the rest of a split reply, files, the home channel).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::conformance_kit::{
    Access, Capabilities, Harness, Media, Place, Plan, Posted, Said, Sender, SentFile,
};
use crate::wecom_support::{Behaviour, Chat, FakeWecom, FileReply, aeskey, encrypt_file};

const USERS: [&str; 3] = ["zhang", "li", "wang"];
const STRANGER: &str = "stranger";
const GROUP: &str = "group-1";
const HOME: &str = "home-chat";

pub struct Wecom {
    fake: FakeWecom,
    next: u64,
    /// Callback `req_id` → (the message's `msgid`, its chat).
    callbacks: Mutex<HashMap<String, (String, String)>>,
}

impl Wecom {
    /// A fresh (req_id, msgid) pair, remembered with its chat.
    fn ids(&mut self, chat: &str) -> (String, String) {
        self.next += 1;
        let (req_id, msgid) = (format!("cb-{}", self.next), format!("msg-{}", self.next));
        self.callbacks
            .lock()
            .unwrap()
            .insert(req_id.clone(), (msgid.clone(), chat.to_owned()));
        (req_id, msgid)
    }
}

fn user_id(from: Sender) -> &'static str {
    match from {
        Sender::User(n) => USERS[n],
        Sender::Stranger => STRANGER,
    }
}

impl Harness for Wecom {
    const NAME: &'static str = "wecom";

    fn capabilities() -> Capabilities {
        Capabilities {
            users: USERS.len(),
            groups: true,
            threads: false,
            // Callbacks go to the connected socket only.
            answers_while_down: false,
            replies_point_back: true,
            reply_limit: Some(4000),
            rate_limit: false,
            access: Access::Pairing,
            photo_in: true,
            // WeCom transcribes voice itself and sends the text.
            voice_in: false,
            file_out: true,
            home_channel: true,
        }
    }

    fn soak_plan() -> Plan {
        Plan {
            rounds: 8,
            users: USERS.len(),
            while_down: 0,
            down_in_first_round: false,
            while_up: 2,
            first_round_extra: (0, Duration::ZERO),
            kill_within: Duration::from_millis(900),
            graceful_every: 5,
            before_last: 0,
            settle: Duration::from_millis(500),
        }
    }

    fn start(rt: &tokio::runtime::Runtime) -> Self {
        Wecom {
            fake: rt.block_on(FakeWecom::start(Behaviour::default())),
            next: 0,
            callbacks: Mutex::new(HashMap::new()),
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        let defaults = Behaviour::default();
        vec![
            ("WECOM_BOT_ID", defaults.bot_id),
            ("WECOM_SECRET", defaults.secret),
            ("WECOM_WS_URL", self.fake.url.clone()),
            ("WECOM_ALLOWED_USERS", USERS.join(",")),
            ("WECOM_HOME_CHANNEL", HOME.to_owned()),
        ]
    }

    fn send(&mut self, from: Sender, place: Place, text: &str) -> Posted {
        let user = user_id(from);
        let group = match place {
            Place::Dm => None,
            Place::Group => Some(GROUP),
            Place::Thread(_) => panic!("WeCom has no threads"),
        };
        let chat = group.unwrap_or(user);
        let (req_id, msgid) = self.ids(chat);
        self.fake
            .push_text(&req_id, &msgid, Chat { user, group }, text);
        Posted {
            id: msgid,
            chat: chat.to_owned(),
        }
    }

    fn send_media(&mut self, from: Sender, place: Place, media: &Media) -> Posted {
        assert_eq!(place, Place::Dm, "wecom's harness sends media in DMs");
        let Media::Photo { png, caption } = media else {
            panic!("WeCom sends no voice audio")
        };
        let user = user_id(from);
        let (req_id, msgid) = self.ids(user);
        let key = aeskey(7);
        let url = self.fake.serve_file(
            &format!("/files/{msgid}.png"),
            FileReply::Bytes(encrypt_file(png, &key)),
        );
        self.fake.push(json!({
            "cmd": "aibot_msg_callback", "headers": {"req_id": req_id},
            "body": {"msgid": msgid, "aibotid": "bot-1", "chattype": "single",
                "from": {"userid": user}, "msgtype": "mixed",
                "mixed": {"msg_item": [
                    {"msgtype": "text", "text": {"content": caption}},
                    {"msgtype": "image", "image": {"url": url, "aeskey": key}}]}}
        }));
        Posted {
            id: msgid,
            chat: user.to_owned(),
        }
    }

    fn said(&self) -> Vec<Said> {
        let callbacks = self.callbacks.lock().unwrap();
        let mut files = self.fake.files().into_iter();
        let mut said = Vec::new();
        for frame in self.fake.received() {
            let body = &frame.frame["body"];
            match frame.cmd.as_str() {
                "aibot_respond_msg" => {
                    let text = match body["msgtype"].as_str() {
                        Some("markdown") => body["markdown"]["content"].as_str(),
                        Some("stream") if body["stream"]["finish"] == true => {
                            body["stream"]["content"].as_str()
                        }
                        _ => None,
                    };
                    let (Some(text), Some((msgid, chat))) = (text, callbacks.get(&frame.req_id))
                    else {
                        continue;
                    };
                    said.push(Said {
                        chat: chat.clone(),
                        reply_to: Some(msgid.clone()),
                        text: text.to_owned(),
                        file: None,
                    });
                }
                "aibot_send_msg" => {
                    let chat = body["chatid"].as_str().unwrap_or_default().to_owned();
                    let file = if body["msgtype"] == "file" {
                        files
                            .next()
                            .map(|(_, name, bytes)| SentFile { name, bytes })
                    } else {
                        None
                    };
                    said.push(Said {
                        chat,
                        reply_to: None,
                        text: text_of(body),
                        file,
                    });
                }
                _ => {}
            }
        }
        said
    }

    fn mark(&self) -> usize {
        self.fake.received_cmd("aibot_subscribe").len()
    }

    /// Up once a new connection has subscribed (and had its answer).
    fn wait_up(&self, subscribed: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.fake.received_cmd("aibot_subscribe").len() == subscribed {
            assert!(Instant::now() < deadline, "the gateway never subscribed");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(200));
    }

    fn home_chat(&self) -> String {
        HOME.to_owned()
    }
}

/// The text of a proactive message.
fn text_of(body: &Value) -> String {
    body["markdown"]["content"]
        .as_str()
        .or(body["text"]["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}
