//! The kill -9 soak on Matrix (SPEC E3, X5, Y3), on the shared driver
//! (`soak_support`): real `hermes gateway run` processes against a real
//! Synapse on loopback (`hermes_tests::synapse`, rate limits relaxed),
//! which outlives them, killed with SIGKILL (now and then stopped with
//! SIGTERM) at random moments — while logging in, mid-sync, mid-turn, while
//! sending.
//!
//! Three users each have a DM room with the bot, which the first gateway
//! joins on their invites. Each round two users write while no gateway runs
//! (only the stored `since` token finds these), a gateway starts, two more
//! write while it comes up, and it is killed. A last gateway runs until
//! everything is answered. The checks (0 lost, 0 duplicated, 0 transcribed
//! twice, every reply in the right room and pointing at its message, …) are
//! the driver's; the bot's messages are read back from the rooms with
//! `/messages` as the users.
//!
//! 12 rounds by default; `HERMES_SOAK_ROUNDS`, `HERMES_SOAK_SEED` as for the
//! Telegram soak.
#![cfg(feature = "matrix")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod soak_support;

use std::time::{Duration, Instant};

use hermes_tests::synapse::{self, User};
use soak_support::{Plan, Platform, Posted, Said};

struct Matrix {
    bot: User,
    /// Each user and their DM room with the bot.
    users: Vec<(User, String)>,
}

impl Matrix {
    fn start() -> Matrix {
        let server = synapse::server();
        let bot = server.user("bot");
        let users = (0..3)
            .map(|_| {
                let user = server.user("soaker");
                let room = user.create_room(&[&bot.user_id], true);
                (user, room)
            })
            .collect();
        Matrix { bot, users }
    }
}

impl Platform for Matrix {
    fn env(&self) -> Vec<(&'static str, String)> {
        let allowed: Vec<&str> = self.users.iter().map(|(u, _)| u.user_id.as_str()).collect();
        vec![
            ("MATRIX_HOMESERVER", synapse::server().base.clone()),
            ("MATRIX_USER_ID", self.bot.user_id.clone()),
            ("MATRIX_PASSWORD", self.bot.password.clone()),
            ("MATRIX_ALLOWED_USERS", allowed.join(",")),
        ]
    }

    fn send(&mut self, user: usize, text: &str) -> Posted {
        let (user, room) = &self.users[user];
        Posted {
            id: user.say(room, text),
            chat: room.clone(),
        }
    }

    fn said(&self) -> Vec<Said> {
        let mut said = Vec::new();
        for (user, room) in &self.users {
            for event in user.messages(room) {
                if event["sender"] != self.bot.user_id.as_str() {
                    continue;
                }
                let content = &event["content"];
                said.push(Said {
                    chat: room.clone(),
                    reply_to: content["m.relates_to"]["m.in_reply_to"]["event_id"]
                        .as_str()
                        .map(str::to_owned),
                    text: content["body"].as_str().unwrap_or_default().to_owned(),
                });
            }
        }
        said
    }

    fn mark(&self) -> usize {
        0
    }

    /// Once the bot has joined every room, a gateway sees whatever is
    /// written next: the first gateway joins during its first sync, whose
    /// position it stores right after (the first round's gateway lives on
    /// well past that), and later gateways resume from the stored position.
    fn wait_up(&self, _: usize) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !self
            .users
            .iter()
            .all(|(user, room)| user.joined(room).contains(&self.bot.user_id))
        {
            assert!(Instant::now() < deadline, "the bot never joined the rooms");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn matrix_kill_9_soak_loses_nothing_and_duplicates_nothing() {
    let plan = Plan {
        test: "matrix_kill_9_soak_loses_nothing_and_duplicates_nothing",
        name: "matrix",
        rounds: 12,
        users: 3,
        // From the second round on: the first sync of a new login answers
        // no history, by design.
        while_down: 2,
        down_in_first_round: false,
        // Written while the gateway logs in and syncs (after the first
        // round, up only means the rooms are joined: no real wait).
        while_up: 2,
        first_round_extra: (1, Duration::from_millis(500)),
        kill_within: Duration::from_millis(1500),
        graceful_every: 5,
        before_last: 2,
        settle: Duration::from_secs(1),
    };
    soak_support::run(&plan, |_| Matrix::start());
}
