//! The kill -9 soak on Discord (SPEC E3, X5), on the shared driver
//! (`soak_support`): real `hermes gateway run` processes against the
//! loopback fake Discord, which outlives them, killed with SIGKILL (now and
//! then stopped with SIGTERM) at random moments — mid-turn, while sending,
//! while catching up.
//!
//! Each round some users write while no gateway runs (a new process
//! IDENTIFYs a new session, to which Discord replays nothing: only the
//! adapter's catch-up from its stored marks finds these), then a gateway
//! starts, more users write once it is READY, and it is killed. The checks
//! (0 lost, 0 duplicated, 0 transcribed twice, …) are the driver's.
//!
//! 8 rounds by default; `HERMES_SOAK_ROUNDS`, `HERMES_SOAK_SEED` as for the
//! Telegram soak.
#![cfg(feature = "discord")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod discord_support;
mod soak_support;

use std::time::{Duration, Instant};

use discord_support::{FakeDiscord, TOKEN};
use soak_support::{Plan, Platform, Posted, Said};

const USERS: [&str; 3] = ["101", "102", "103"];

struct Discord(FakeDiscord);

impl Platform for Discord {
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("DISCORD_BOT_TOKEN", TOKEN.to_owned()),
            ("DISCORD_API_URL", self.0.api_url()),
            ("DISCORD_ALLOWED_USERS", USERS.join(",")),
        ]
    }

    fn send(&mut self, user: usize, text: &str) -> Posted {
        let user = USERS[user];
        Posted {
            id: self.0.dm(user, text),
            chat: self.0.dm_channel(user),
        }
    }

    fn said(&self) -> Vec<Said> {
        self.0
            .posted()
            .into_iter()
            .map(|p| Said {
                chat: p.channel,
                reply_to: p.reply_to,
                text: p.content,
            })
            .collect()
    }

    fn mark(&self) -> usize {
        self.0.client_ops(2).len()
    }

    /// READY: a gateway newer than the `identified` IDENTIFYs so far is
    /// live on the fake.
    fn wait_up(&self, identified: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !(self.0.client_ops(2).len() > identified && self.0.is_live()) {
            assert!(Instant::now() < deadline, "the gateway never became READY");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

#[test]
fn discord_kill_9_soak_loses_nothing_and_duplicates_nothing() {
    let plan = Plan {
        test: "discord_kill_9_soak_loses_nothing_and_duplicates_nothing",
        name: "discord",
        rounds: 8,
        users: USERS.len(),
        // From the second round on: before the first gateway the bot has
        // served no channel yet, and Discord itself would not deliver those.
        while_down: 2,
        down_in_first_round: false,
        while_up: 2,
        // The first gateway lives long enough to see every user once; a DM
        // channel the bot never saw a message in is not caught up in.
        first_round_extra: (1, Duration::from_millis(300)),
        kill_within: Duration::from_millis(700),
        graceful_every: 5,
        // And some more while down, for the last gateway's catch-up.
        before_last: 2,
        settle: Duration::from_millis(500),
    };
    soak_support::run(&plan, |rt| {
        Discord(rt.block_on(FakeDiscord::start(discord_support::Behaviour {
            bucket_limit: 1000,
            ..Default::default()
        })))
    });
}
