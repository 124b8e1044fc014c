//! Telegram's harness: the loopback Bot API fake (`telegram_support`),
//! long polling.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::conformance_kit::{Access, Capabilities, Harness, Place, Plan, Posted, Said, Sender};
use crate::telegram_support::{Fake, TOKEN};

const USERS: [i64; 3] = [101, 102, 103];
const STRANGER: i64 = 666;

pub struct Telegram {
    fake: Fake,
    /// The last update (and message) id pushed.
    last_id: i64,
}

impl Harness for Telegram {
    const NAME: &'static str = "telegram";

    fn capabilities() -> Capabilities {
        Capabilities {
            users: USERS.len(),
            groups: false,
            threads: false,
            answers_while_down: true,
            replies_point_back: true,
            reply_limit: Some(4096),
            rate_limit: false,
            access: Access::AllowList,
            photo_in: false,
            voice_in: false,
            file_out: false,
            home_channel: false,
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
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        let users: Vec<String> = USERS.iter().map(i64::to_string).collect();
        vec![
            ("TELEGRAM_BOT_TOKEN", TOKEN.to_owned()),
            ("TELEGRAM_API_URL", self.fake.base.clone()),
            ("TELEGRAM_POLL_TIMEOUT", "1".to_owned()),
            ("TELEGRAM_ALLOWED_USERS", users.join(",")),
        ]
    }

    fn send(&mut self, from: Sender, place: Place, text: &str) -> Posted {
        assert_eq!(
            place,
            Place::Dm,
            "telegram's harness writes DMs only so far"
        );
        self.last_id += 1;
        let id = self.last_id;
        let user = match from {
            Sender::User(n) => USERS[n],
            Sender::Stranger => STRANGER,
        };
        self.fake.push_update(json!({"update_id": id, "message": {
            "message_id": id, "date": 0, "text": text,
            "from": {"id": user, "is_bot": false, "first_name": "Conformance"},
            "chat": {"id": user, "type": "private"}}}));
        Posted {
            id: id.to_string(),
            chat: user.to_string(),
        }
    }

    fn said(&self) -> Vec<Said> {
        self.fake
            .requests("sendMessage")
            .into_iter()
            .map(|r| Said {
                chat: r.body["chat_id"].as_i64().unwrap_or(0).to_string(),
                reply_to: r.body["reply_parameters"]["message_id"]
                    .as_i64()
                    .map(|id| id.to_string()),
                text: r.body["text"].as_str().unwrap_or("").to_owned(),
                file: None,
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
}
