//! The adapter conformance kit (issue 41 §1, B14): one suite of promises
//! every chat platform of the gateway must keep, run against real
//! `hermes gateway run` processes (the test binary re-run as a child that
//! does exactly what the command does), a platform peer (a protocol-faithful
//! fake, or the real server) and the scripted provider
//! [`hermes_tests::FakeProvider`], all on loopback.
//!
//! # How a platform plugs in
//!
//! 1. Write a harness: a type implementing [`Harness`] in
//!    `gateway/tests/conformance/NAME.rs` — how to start the platform's peer
//!    ([`Harness::start`]), the env that points a gateway at it
//!    ([`Harness::env`]), how a user writes ([`Harness::send`],
//!    [`Harness::send_media`]), what the bot sent ([`Harness::said`]), when a
//!    freshly started gateway is up ([`Harness::mark`] /
//!    [`Harness::wait_up`]). Its peer (fake server) lives in
//!    `gateway/tests/NAME_support/` or in `hermes-tests`.
//! 2. Declare what the platform has in [`Harness::capabilities`]. A
//!    capability declared absent is reported by the suite as
//!    "not applicable" (printed, never counted as passed); a capability
//!    declared present must be backed by the harness's methods (the
//!    defaults panic, naming the method to write) — or listed in
//!    [`Harness::uncovered`] while it is not: reported "NOT CHECKED".
//!    `said()` may read messages back per chat (the suite compares
//!    snapshots); every text the suite writes carries a token `[qN]` the
//!    harness passes through unchanged.
//! 3. Add to `gateway/tests/conformance.rs`, each behind the platform's
//!    cargo feature: the harness module (`mod conformance { pub mod NAME; }`
//!    and its peer's support module), `conformance_tests!(NAME,
//!    conformance::NAME::Harness)`, which makes the tests `NAME::promises`
//!    (every promise but the soak) and `NAME::kill_9_soak`, and a line in
//!    `columns()` (README's table of what each platform supports is checked
//!    against it: `HERMES_BLESS=1 cargo test -p hermes-gateway --test
//!    all conformance::readme -- --nocapture` prints the table to paste). A soak
//!    that cannot pass yet is `conformance_tests!(NAME, H, soak_ignored =
//!    "why")` plus `soak_note` in its column — visible, never dropped.
//!
//! Run one platform: `cargo test -p hermes-gateway --test all
//! conformance::NAME::`. Knobs: `HERMES_SOAK_ROUNDS` (the soak's rounds),
//! `HERMES_SOAK_SEED` (replay a soak's kill timings; each run prints its
//! seed).
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

pub mod gateway;
pub mod measure;
pub mod soak;
pub mod suite;
pub mod table;

use std::collections::HashMap;
use std::time::Duration;

pub use soak::Plan;

/// Who writes a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sender {
    /// The `n`-th allowed user (`n < Capabilities::users`): the harness's
    /// env lets exactly these users in.
    User(usize),
    /// Someone the settings do not allow (not in the allow-list, not paired).
    Stranger,
}

/// Where a message is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Place {
    /// The sender's direct chat with the bot.
    Dm,
    /// The one group chat (channel, room) every user and the bot are in.
    /// The harness writes whatever the platform needs for the bot to take
    /// the message (a mention, …) or sets the env so none is needed.
    Group,
    /// Thread (or topic) `k` of [`Place::Group`]: each `k` is its own
    /// thread, started by the harness the first time it is used.
    Thread(usize),
}

/// Where a user's message landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posted {
    /// The platform's id of the message (what a reply points at, as
    /// [`Said::reply_to`] reports it).
    pub id: String,
    /// The chat it is in, in the form [`Said::chat`] reports (a thread may
    /// be its own chat id or the group's — the harness decides, the suite
    /// only compares).
    pub chat: String,
}

/// A file the bot sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentFile {
    pub name: String,
    pub bytes: Vec<u8>,
}

/// A message the bot sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Said {
    /// The chat, in the form of [`Posted::chat`].
    pub chat: String,
    /// The id of the user message it replies to, where the platform says
    /// (a platform without replies: `None`, and
    /// [`Capabilities::replies_point_back`] is false).
    pub reply_to: Option<String>,
    /// The text (a caption, for a file).
    pub text: String,
    /// The file it carries, if any.
    pub file: Option<SentFile>,
}

/// How far a poller has read what the bot said ([`Harness::said_since`]).
#[derive(Debug, Clone, Default)]
pub struct SaidMark {
    /// Sends read, in all.
    seen: usize,
    /// Sends read per chat.
    per_chat: HashMap<String, usize>,
}

impl SaidMark {
    /// Sends read so far: where a harness with one ordered log of sends
    /// starts reading.
    pub fn seen(&self) -> usize {
        self.seen
    }

    /// Everything said (in order within each chat; chats may interleave
    /// differently from one reading to the next): what is beyond this mark
    /// in its chat, in the order given. The mark moves past it.
    pub fn advance_over(&mut self, said: Vec<Said>) -> Vec<Said> {
        let mut counted: HashMap<String, usize> = HashMap::new();
        let mut new = Vec::new();
        for s in said {
            let n = counted.entry(s.chat.clone()).or_default();
            *n += 1;
            if *n > self.per_chat.get(&s.chat).copied().unwrap_or(0) {
                new.push(s);
            }
        }
        self.seen = counted.values().sum();
        self.per_chat = counted;
        new
    }

    /// The sends after [`SaidMark::seen`] of one ordered log: all new. The
    /// mark moves past them.
    pub fn advance_append(&mut self, new: Vec<Said>) -> Vec<Said> {
        self.seen += new.len();
        for s in &new {
            *self.per_chat.entry(s.chat.clone()).or_default() += 1;
        }
        new
    }
}

/// Media a user sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Media {
    /// A PNG photo, with a caption.
    Photo { png: Vec<u8>, caption: String },
    /// A voice note (Ogg/Opus bytes).
    Voice { ogg: Vec<u8> },
}

/// How the settings treat a user they do not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Only the allow-list: a stranger causes no model call and no answer.
    AllowList,
    /// A stranger gets a pairing code (and no model call).
    Pairing,
    /// Every caller with the credential is served (the API server): the
    /// unknown-user promise does not apply.
    Open,
}

/// What a platform has. A `false`/`None` is printed as "not applicable"
/// for the promises that need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// How many allowed users [`Sender::User`] may name (at least 2).
    pub users: usize,
    /// A group chat several users write in ([`Place::Group`]).
    pub groups: bool,
    /// Threads or topics in a group ([`Place::Thread`]).
    pub threads: bool,
    /// The platform keeps what users wrote while no gateway ran and the
    /// next gateway answers it.
    pub answers_while_down: bool,
    /// Replies name the message they answer ([`Said::reply_to`]).
    pub replies_point_back: bool,
    /// The longest text one message may carry (characters); `None`: no
    /// limit.
    pub reply_limit: Option<usize>,
    /// The peer can answer with the platform's rate-limit response
    /// ([`Harness::throttle`]).
    pub rate_limit: bool,
    pub access: Access,
    /// A photo reaches the model as an image ([`Media::Photo`]).
    pub photo_in: bool,
    /// A voice note reaches the model as a transcript ([`Media::Voice`]).
    pub voice_in: bool,
    /// `send_file` delivers a file ([`Said::file`]).
    pub file_out: bool,
    /// A home channel receives scheduled jobs' answers
    /// ([`Harness::home_chat`]).
    pub home_channel: bool,
}

/// A capability by name, for [`Harness::uncovered`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    Groups,
    Threads,
    AnswersWhileDown,
    ReplyLimit,
    RateLimit,
    Access,
    PhotoIn,
    VoiceIn,
    FileOut,
    HomeChannel,
}

/// One platform as the suite drives it. All methods block; a harness that
/// needs async work uses the runtime [`Harness::start`] was given.
pub trait Harness: Sized {
    /// The platform's name, for reports ("telegram").
    const NAME: &'static str;

    /// What the platform has (static: the README table is built from it).
    fn capabilities() -> Capabilities;

    /// Capabilities the platform has (declared in
    /// [`Harness::capabilities`]) that this harness does not drive yet: the
    /// suite reports their promises as NOT CHECKED — never passed, never
    /// "not applicable".
    fn uncovered() -> &'static [Capability] {
        &[]
    }

    /// How the soak times its messages and kills for this platform.
    fn soak_plan() -> Plan;

    /// What its peer needs outside Rust (a real server): the fast tier
    /// skips the platform's suites without it (`hermes_tests::tier`).
    fn needs() -> &'static [hermes_tests::tier::Component] {
        &[]
    }

    /// Starts the platform's peer (or connects to the real server), inside
    /// `rt` if it needs async. Called once per test.
    fn start(rt: &tokio::runtime::Runtime) -> Self;

    /// The environment that points `hermes gateway run` at the peer, lets
    /// exactly the [`Sender::User`]s in (allow-list or paired, per
    /// [`Capabilities::access`]) and names the home channel if there is one.
    fn env(&self) -> Vec<(&'static str, String)>;

    /// `from` writes `text` at `place`.
    fn send(&mut self, from: Sender, place: Place, text: &str) -> Posted;

    /// `from` sends `media` at `place` (only called for media the
    /// capabilities declare).
    fn send_media(&mut self, from: Sender, place: Place, media: &Media) -> Posted {
        let _ = (from, place, media);
        panic!(
            "{}: capabilities declare media in, but the harness has no send_media",
            Self::NAME
        )
    }

    /// Everything the bot has sent so far, in order.
    fn said(&self) -> Vec<Said>;

    /// What the bot said since `mark`, which moves past it: for polling
    /// (the measurement's), where reading everything said at every poll
    /// would make the polling itself the cost. The default reads
    /// [`Harness::said`] and keeps what is new in each chat
    /// ([`SaidMark::advance_over`]); a harness whose peer keeps one log of
    /// sends in the order taken reads only the new part of it
    /// ([`SaidMark::seen`], [`SaidMark::advance_append`]).
    fn said_since(&self, mark: &mut SaidMark) -> Vec<Said> {
        mark.advance_over(self.said())
    }

    /// A mark taken just before a gateway starts, for [`Harness::wait_up`].
    fn mark(&self) -> usize;

    /// Blocks until a gateway started after `mark` is up: it would see a
    /// message written now, and it listens for SIGTERM.
    fn wait_up(&self, mark: usize);

    /// The peer answers the bot's next `sends` attempts to send with the
    /// platform's rate-limit response (429 with `Retry-After`, or its
    /// equivalent) of about one second. Only called when
    /// [`Capabilities::rate_limit`].
    fn throttle(&mut self, sends: usize) {
        let _ = sends;
        panic!(
            "{}: capabilities declare a rate limit, but the harness has no throttle",
            Self::NAME
        )
    }

    /// How many rate-limit responses the peer has given so far.
    fn throttled(&self) -> usize {
        0
    }

    /// The home channel's chat, in the form of [`Said::chat`]. Only called
    /// when [`Capabilities::home_channel`].
    fn home_chat(&self) -> String {
        panic!(
            "{}: capabilities declare a home channel, but the harness has no home_chat",
            Self::NAME
        )
    }
}

/// The outcome of one promise on one platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Passed,
    /// The platform lacks what the promise needs (the reason).
    NotApplicable(&'static str),
    /// The kit does not check this promise on this platform yet (the
    /// reason): printed, never counted as passed.
    Unchecked(&'static str),
}

/// How long the suite waits for an answer before failing.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(60);

/// Makes the conformance tests of one platform: `$name::promises` and
/// `$name::kill_9_soak`. With `soak_ignored = "why"` the soak is
/// `#[ignore]`d with that reason (a known failure, run it with
/// `--ignored`), never silently dropped.
macro_rules! conformance_tests {
    ($name:ident, $harness:ty) => {
        mod $name {
            #[test]
            fn promises() {
                crate::conformance_kit::suite::run::<$harness>(concat!(
                    stringify!($name),
                    "::promises"
                ));
            }

            #[test]
            #[ignore = "a measurement, not a check: scripts/adapter-bench.sh runs it"]
            fn measure() {
                crate::conformance_kit::measure::run::<$harness>(concat!(
                    stringify!($name),
                    "::measure"
                ));
            }

            #[test]
            fn kill_9_soak() {
                crate::conformance_kit::soak::run::<$harness>(concat!(
                    stringify!($name),
                    "::kill_9_soak"
                ));
            }
        }
    };
    ($name:ident, $harness:ty, soak_ignored = $why:literal) => {
        mod $name {
            #[test]
            fn promises() {
                crate::conformance_kit::suite::run::<$harness>(concat!(
                    stringify!($name),
                    "::promises"
                ));
            }

            #[test]
            #[ignore = "a measurement, not a check: scripts/adapter-bench.sh runs it"]
            fn measure() {
                crate::conformance_kit::measure::run::<$harness>(concat!(
                    stringify!($name),
                    "::measure"
                ));
            }

            #[test]
            #[ignore = $why]
            fn kill_9_soak() {
                crate::conformance_kit::soak::run::<$harness>(concat!(
                    stringify!($name),
                    "::kill_9_soak"
                ));
            }
        }
    };
}
