//! Slack's harness: the loopback Socket Mode + Web API fake
//! (`slack_support`). DMs are `im` channels; the group is a channel where
//! users mention the bot (so every group message arrives twice, as
//! `message` and `app_mention`); threads are `thread_ts` threads of that
//! channel; the home channel is a channel of its own. A reply points at
//! the thread it is in (`thread_ts`): a top-level message's own `ts`, or
//! the root of the thread a message was written in.

use std::time::{Duration, Instant};

use crate::conformance_kit::{
    Access, Capabilities, Harness, Media, Place, Plan, Posted, Said, SaidMark, Sender, SentFile,
};
use crate::slack_support::{Behaviour, BotMessage, FakeSlack, dm_of};

/// One message the bot posted, as the suite reads it.
fn said_of(m: BotMessage) -> Said {
    Said {
        chat: m.channel,
        reply_to: m.thread_ts,
        text: m.text,
        file: m.file.map(|(name, bytes)| SentFile { name, bytes }),
    }
}

const USERS: [&str; 3] = ["U0000101", "U0000102", "U0000103"];
const STRANGER: &str = "U0000666";
const GROUP: &str = "C0GROUP01";
const HOME: &str = "C0HOME001";

pub struct Slack {
    fake: FakeSlack,
}

fn user(from: Sender) -> &'static str {
    match from {
        Sender::User(n) => USERS[n],
        Sender::Stranger => STRANGER,
    }
}

/// The root message of thread `k` (written before the test).
fn thread_root(k: usize) -> String {
    format!("1600000000.{k:06}")
}

impl Harness for Slack {
    const NAME: &'static str = "slack";

    fn capabilities() -> Capabilities {
        Capabilities {
            users: USERS.len(),
            groups: true,
            threads: true,
            answers_while_down: true,
            replies_point_back: true,
            reply_limit: Some(hermes_slack::MAX_MESSAGE_CHARS),
            rate_limit: true,
            access: Access::AllowList,
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
            // Slack keeps what no socket acknowledged and sends it to the
            // next one.
            while_down: 2,
            down_in_first_round: true,
            while_up: 1,
            first_round_extra: (0, Duration::ZERO),
            kill_within: Duration::from_millis(900),
            graceful_every: 7,
            before_last: 0,
            settle: Duration::from_secs(2),
        }
    }

    fn start(rt: &tokio::runtime::Runtime) -> Self {
        Slack {
            fake: rt.block_on(FakeSlack::start(Behaviour::default())),
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = self.fake.env();
        env.push(("SLACK_ALLOWED_USERS", USERS.join(",")));
        env.push(("SLACK_HOME_CHANNEL", HOME.to_owned()));
        env
    }

    fn send(&mut self, from: Sender, place: Place, text: &str) -> Posted {
        let who = user(from);
        match place {
            Place::Dm => Posted {
                id: self.fake.dm(who, text),
                chat: dm_of(who),
            },
            Place::Group => Posted {
                id: self.fake.channel_message(GROUP, who, text, None, true),
                chat: GROUP.to_owned(),
            },
            Place::Thread(k) => {
                let root = thread_root(k);
                self.fake
                    .channel_message(GROUP, who, text, Some(&root), true);
                Posted {
                    id: root,
                    chat: GROUP.to_owned(),
                }
            }
        }
    }

    fn send_media(&mut self, from: Sender, place: Place, media: &Media) -> Posted {
        assert_eq!(place, Place::Dm, "the suite sends media in DMs");
        let who = user(from);
        let id = match media {
            Media::Photo { png, caption } => {
                self.fake
                    .dm_file(who, caption, "photo.png", "image/png", png.clone())
            }
            Media::Voice { ogg } => {
                self.fake
                    .dm_file(who, "", "voice.ogg", "audio/ogg", ogg.clone())
            }
        };
        Posted {
            id,
            chat: dm_of(who),
        }
    }

    fn said(&self) -> Vec<Said> {
        self.fake.posted().into_iter().map(said_of).collect()
    }

    /// The fake keeps one log of what the bot posted, in order.
    fn said_since(&self, mark: &mut SaidMark) -> Vec<Said> {
        let new = self.fake.posted_since(mark.seen());
        mark.advance_append(new.into_iter().map(said_of).collect())
    }

    fn mark(&self) -> usize {
        self.fake.connections()
    }

    /// Up once it opened a socket (and so got `hello`).
    fn wait_up(&self, connections: usize) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.fake.connections() == connections {
            assert!(Instant::now() < deadline, "the gateway never connected");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The next `sends` `chat.postMessage` calls get 429 with
    /// `Retry-After: 1`.
    fn throttle(&mut self, sends: usize) {
        self.fake.rate_limit_next("chat.postMessage", sends, 1);
    }

    fn throttled(&self) -> usize {
        self.fake.throttled()
    }

    fn home_chat(&self) -> String {
        HOME.to_owned()
    }
}
