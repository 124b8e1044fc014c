//! Discord's harness: the loopback Gateway + REST fake (`discord_support`).
//! DMs are DM channels; the group is a server channel where the bot needs
//! no mention (`DISCORD_FREE_RESPONSE_CHANNELS`); a thread is a channel of
//! its own, as on Discord; the home channel is a server channel.

use std::time::{Duration, Instant};

use crate::conformance_kit::{
    Access, Capabilities, Harness, Media, Place, Plan, Posted, Said, SaidMark, Sender, SentFile,
};
use crate::discord_support::{Behaviour, FakeDiscord, TOKEN};

/// One message the bot posted, as the suite reads it.
fn said_of(p: crate::discord_support::Posted) -> Said {
    Said {
        file: p.body["files"]
            .as_array()
            .and_then(|f| f.first())
            .map(|f| SentFile {
                name: f["filename"].as_str().unwrap_or("").to_owned(),
                bytes: hex(f["hex"].as_str().unwrap_or("")),
            }),
        chat: p.channel,
        reply_to: p.reply_to,
        text: p.content,
    }
}

const USERS: [&str; 3] = ["101", "102", "103"];
const STRANGER: &str = "666";
const GROUP: &str = "7000";
const HOME: &str = "8000";

/// The channel of thread `k`.
fn thread_channel(k: usize) -> String {
    format!("{}", 7100 + k)
}

pub struct Discord(FakeDiscord);

fn user_id(from: Sender) -> &'static str {
    match from {
        Sender::User(n) => USERS[n],
        Sender::Stranger => STRANGER,
    }
}

impl Harness for Discord {
    const NAME: &'static str = "discord";

    fn capabilities() -> Capabilities {
        Capabilities {
            users: USERS.len(),
            groups: true,
            threads: true,
            answers_while_down: true,
            replies_point_back: true,
            reply_limit: Some(2000),
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
            rounds: 8,
            users: USERS.len(),
            // From the second round on: before the first gateway the bot
            // has served no channel yet, and Discord itself would not
            // deliver those.
            while_down: 2,
            down_in_first_round: false,
            while_up: 2,
            // The first gateway lives long enough to see every user once; a
            // DM channel the bot never saw a message in is not caught up in.
            first_round_extra: (1, Duration::from_millis(300)),
            kill_within: Duration::from_millis(700),
            graceful_every: 5,
            // And some more while down, for the last gateway's catch-up.
            before_last: 2,
            settle: Duration::from_millis(500),
        }
    }

    fn start(rt: &tokio::runtime::Runtime) -> Self {
        let fake = rt.block_on(FakeDiscord::start(Behaviour {
            bucket_limit: 1000,
            ..Default::default()
        }));
        fake.add_channel(HOME);
        Discord(fake)
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        let free: Vec<String> = std::iter::once(GROUP.to_owned())
            .chain((0..4).map(thread_channel))
            .collect();
        vec![
            ("DISCORD_BOT_TOKEN", TOKEN.to_owned()),
            ("DISCORD_API_URL", self.0.api_url()),
            ("DISCORD_ALLOWED_USERS", USERS.join(",")),
            ("DISCORD_FREE_RESPONSE_CHANNELS", free.join(",")),
            ("DISCORD_HOME_CHANNEL", HOME.to_owned()),
        ]
    }

    fn send(&mut self, from: Sender, place: Place, text: &str) -> Posted {
        let user = user_id(from);
        match place {
            Place::Dm => Posted {
                id: self.0.dm(user, text),
                chat: self.0.dm_channel(user),
            },
            Place::Group => Posted {
                id: self.0.guild_message(GROUP, user, text, false),
                chat: GROUP.to_owned(),
            },
            Place::Thread(k) => {
                let channel = thread_channel(k);
                Posted {
                    id: self.0.guild_message(&channel, user, text, false),
                    chat: channel,
                }
            }
        }
    }

    fn send_media(&mut self, from: Sender, place: Place, media: &Media) -> Posted {
        assert_eq!(place, Place::Dm, "discord's harness sends media in DMs");
        let user = user_id(from);
        let id = match media {
            Media::Photo { png, caption } => self.0.dm_with_attachment(
                user,
                caption,
                ("photo.png", "image/png", png.clone()),
                png.len(),
            ),
            Media::Voice { ogg } => self.0.dm_voice_message(user, ogg.clone()),
        };
        Posted {
            id,
            chat: self.0.dm_channel(user),
        }
    }

    fn said(&self) -> Vec<Said> {
        self.0.posted().into_iter().map(said_of).collect()
    }

    /// The fake keeps one log of what the bot posted, in order.
    fn said_since(&self, mark: &mut SaidMark) -> Vec<Said> {
        let new = self.0.posted_since(mark.seen());
        mark.advance_append(new.into_iter().map(said_of).collect())
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

    /// Discord's 429 with `retry_after: 1` on the next message creations.
    fn throttle(&mut self, sends: usize) {
        self.0.rate_limit_next(sends, 1.0, false);
    }

    fn throttled(&self) -> usize {
        self.0
            .rest_calls()
            .iter()
            .filter(|c| c.status == 429)
            .count()
    }

    fn home_chat(&self) -> String {
        HOME.to_owned()
    }
}

/// Bytes from lowercase hex.
fn hex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .filter_map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok())
        .collect()
}
