//! The kill -9 soak on Telegram (SPEC E3, G11, X5), on the shared driver
//! (`soak_support`): real `hermes gateway run` processes killed with
//! SIGKILL (now and then stopped with SIGTERM) at random moments against
//! the loopback Telegram fake, which outlives them.
//!
//! Each round queues new user messages at the fake, starts a gateway, and
//! kills it after a random delay — before it polled, between accepting a
//! message and saving the offset, in the middle of a turn (between its tool
//! call and its answer), while it sends. The checks (0 lost, 0 duplicated,
//! 0 transcribed twice, every tool call answered, a sound store) are the
//! driver's.
//!
//! 30 rounds by default (what CI runs); `HERMES_SOAK_ROUNDS=300` for a
//! longer soak, `HERMES_SOAK_SEED=…` to replay the kill timings of a run
//! (each run prints its seed).
#![cfg(feature = "telegram")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod soak_support;
mod telegram_support;

use std::time::{Duration, Instant};

use serde_json::json;
use soak_support::{Plan, Platform, Posted, Said};
use telegram_support::{Fake, TOKEN};

const USERS: [i64; 3] = [101, 102, 103];

struct Telegram {
    fake: Fake,
    /// The last update (and message) id pushed.
    last_id: i64,
}

impl Platform for Telegram {
    fn env(&self) -> Vec<(&'static str, String)> {
        let users: Vec<String> = USERS.iter().map(i64::to_string).collect();
        vec![
            ("TELEGRAM_BOT_TOKEN", TOKEN.to_owned()),
            ("TELEGRAM_API_URL", self.fake.base.clone()),
            ("TELEGRAM_POLL_TIMEOUT", "1".to_owned()),
            ("TELEGRAM_ALLOWED_USERS", users.join(",")),
        ]
    }

    fn send(&mut self, user: usize, text: &str) -> Posted {
        self.last_id += 1;
        let (id, user) = (self.last_id, USERS[user]);
        self.fake.push_update(json!({"update_id": id, "message": {
            "message_id": id, "date": 0, "text": text,
            "from": {"id": user, "is_bot": false, "first_name": "Soak"},
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

#[test]
fn kill_9_soak_loses_nothing_and_duplicates_nothing() {
    let plan = Plan {
        test: "kill_9_soak_loses_nothing_and_duplicates_nothing",
        name: "telegram",
        rounds: 30,
        users: USERS.len(),
        // Queued at the fake before each gateway starts; it may be killed
        // before it even polled.
        while_down: 2,
        down_in_first_round: true,
        while_up: 0,
        first_round_extra: (0, Duration::ZERO),
        kill_within: Duration::from_millis(900),
        graceful_every: 7,
        before_last: 0,
        settle: Duration::ZERO,
    };
    soak_support::run(&plan, |rt| Telegram {
        fake: rt.block_on(Fake::start(true)),
        last_id: 0,
    });
}
