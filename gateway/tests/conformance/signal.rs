//! Signal's harness: the fake signal-cli daemon (`signal_support`), JSON-RPC
//! `receive` in manual receive mode. DMs are by number; the group answers
//! every message (`SIGNAL_REQUIRE_MENTION=false`; the mention rule has its
//! own tests in `signal_checks`); the home channel is a group of its own.

use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::conformance_kit::{
    Access, Capabilities, Harness, Media, Place, Plan, Posted, Said, Sender, SentFile,
};
use crate::signal_support::{ACCOUNT, Fake, Person, envelope, group_info};

const USERS: usize = 3;
const STRANGER: u32 = 666;
const GROUP: &str = "Q29uZm9ybWFuY2VHcm91cA==";
const HOME: &str = "SG9tZUdyb3VwSWQ=";

pub struct Signal {
    pub fake: Fake,
    last_ts: u64,
}

fn person(from: Sender) -> Person {
    match from {
        Sender::User(n) => Person::new(n as u32 + 101),
        Sender::Stranger => Person::new(STRANGER),
    }
}

impl Harness for Signal {
    const NAME: &'static str = "signal";

    fn capabilities() -> Capabilities {
        Capabilities {
            users: USERS,
            groups: true,
            threads: false,
            answers_while_down: true,
            replies_point_back: true,
            reply_limit: Some(signal_limit()),
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
            rounds: 20,
            users: USERS,
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
        Signal {
            fake: rt.block_on(Fake::start()),
            last_ts: 1_700_000_000_000,
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        let users: Vec<String> = (0..USERS)
            .map(|n| Person::new(n as u32 + 101).number)
            .collect();
        vec![
            ("SIGNAL_HTTP_URL", self.fake.base.clone()),
            ("SIGNAL_ACCOUNT", ACCOUNT.to_owned()),
            ("SIGNAL_ALLOWED_USERS", users.join(",")),
            ("SIGNAL_REQUIRE_MENTION", "false".to_owned()),
            ("SIGNAL_HOME_CHANNEL", format!("group.{HOME}")),
        ]
    }

    fn send(&mut self, from: Sender, place: Place, text: &str) -> Posted {
        self.push(from, place, json!({"message": text}))
    }

    fn send_media(&mut self, from: Sender, place: Place, media: &Media) -> Posted {
        let id = format!("att{}.bin", self.last_ts + 1);
        let (bytes, content_type, file_name, caption) = match media {
            Media::Photo { png, caption } => {
                (png.clone(), "image/png", json!("photo.png"), json!(caption))
            }
            Media::Voice { ogg } => (ogg.clone(), "audio/aac", Value::Null, Value::Null),
        };
        self.fake.add_attachment(&id, bytes.clone());
        let attachment = json!({"contentType": content_type, "filename": file_name, "id": id,
            "size": bytes.len(), "width": null, "height": null, "caption": null, "uploadTimestamp": 1});
        self.push(
            from,
            place,
            json!({"message": caption, "attachments": [attachment]}),
        )
    }

    fn said(&self) -> Vec<Said> {
        self.fake
            .calls("send")
            .into_iter()
            .filter(|c| c.ok)
            .map(|c| said(&c.params))
            .collect()
    }

    fn mark(&self) -> usize {
        self.fake.calls("receive").len()
    }

    fn wait_up(&self, mark: usize) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.fake.calls("receive").len() == mark {
            assert!(
                Instant::now() < deadline,
                "the gateway never called receive"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn throttle(&mut self, sends: usize) {
        self.fake.fail_next("send", -5, sends);
    }

    fn throttled(&self) -> usize {
        self.fake.calls("send").iter().filter(|c| !c.ok).count()
    }

    fn home_chat(&self) -> String {
        format!("group.{HOME}")
    }
}

/// The reply limit the suite checks, in characters: the adapter's byte
/// limit is never more characters.
fn signal_limit() -> usize {
    hermes_signal::MAX_MESSAGE_BYTES
}

/// A `send` request as what the bot said.
fn said(params: &Value) -> Said {
    let chat = match params["groupId"].as_str() {
        Some(g) => format!("group.{g}"),
        None => params["recipient"][0].as_str().unwrap_or("").to_owned(),
    };
    let file = params["attachments"][0].as_str().and_then(|uri| {
        let (meta, data) = uri.strip_prefix("data:")?.split_once(";base64,")?;
        let name = meta
            .split(';')
            .find_map(|p| p.strip_prefix("filename="))?
            .to_owned();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .ok()?;
        Some(SentFile { name, bytes })
    });
    Said {
        chat,
        reply_to: params["quoteTimestamp"].as_u64().map(|t| t.to_string()),
        text: params["message"].as_str().unwrap_or("").to_owned(),
        file,
    }
}

impl Signal {
    fn push(&mut self, from: Sender, place: Place, mut data: Value) -> Posted {
        self.last_ts += 1;
        let ts = self.last_ts;
        let who = person(from);
        let chat = match place {
            Place::Dm => who.number.clone(),
            Place::Group | Place::Thread(_) => {
                data["groupInfo"] = group_info(GROUP);
                format!("group.{GROUP}")
            }
        };
        self.fake.deliver(envelope(&who, ts, data));
        Posted {
            id: ts.to_string(),
            chat,
        }
    }
}
