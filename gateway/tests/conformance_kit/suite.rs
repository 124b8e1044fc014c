//! The promises every adapter keeps (issue 41 §1), but the soak (which is
//! [`super::soak`]). One test per platform runs them in order on one
//! `$HERMES_HOME`, one peer and one scripted provider, starting and
//! stopping real gateways as each promise needs, and prints a report:
//! passed, or "not applicable" where the harness declares the platform
//! lacks what a promise needs.
//!
//! Every message the suite writes carries a token `[qN]`; the provider
//! answers `answer to [qN]` (or, for the long-reply promise, a numbered
//! text longer than the platform's limit), so answers are counted per
//! message whatever the platform does to replies.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_tests::{FakeProvider, Reply};
use serde_json::Value;

use super::gateway::{Gateway, serve_if_child};

mod media;
use hermes_runtime::cron::{self, CronContext, JobSpec, TimeZone};
use hermes_runtime::media::data_url;
use hermes_runtime::store::{Store, SystemClock};

use super::{
    ANSWER_WITHIN, Access, Capabilities, Capability, Harness, Media, Place, Posted, Said, Sender,
    SentFile, Verdict,
};

/// One promise: its name, the capability it needs, its check.
type Promise<H> = (
    &'static str,
    Option<Capability>,
    fn(&mut World<H>) -> Verdict,
);

/// Why a promise is not checked on a platform that has what it needs.
fn uncovered_reason(_: Capability) -> &'static str {
    "the platform has it, but its harness does not drive it yet"
}

/// Runs every promise on `H` (the test `test`, by its full name) and prints
/// the report. Panics on the first broken promise.
pub fn run<H: Harness>(test: &str) {
    // The child serves first: it runs with a cleared environment, where
    // the components' variables are not set (`gateway.rs`).
    serve_if_child();
    if !hermes_tests::tier::require(H::needs()) {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let mut world = World::<H>::new(test, &rt);
    let promises: Vec<Promise<H>> = vec![
        ("a DM is answered once", None, dm_answered_once),
        (
            "two users in one group get separate sessions",
            Some(Capability::Groups),
            group_users_get_separate_sessions,
        ),
        (
            "a thread or topic keeps its own session",
            Some(Capability::Threads),
            thread_keeps_its_own_session,
        ),
        (
            "a message written while the gateway is down is answered after it starts",
            Some(Capability::AnswersWhileDown),
            answered_after_start,
        ),
        (
            "nothing is answered twice after a restart",
            None,
            nothing_answered_twice_after_restart,
        ),
        (
            "a reply longer than the limit arrives whole",
            Some(Capability::ReplyLimit),
            long_reply_arrives_whole,
        ),
        (
            "the rate limit is waited out, nothing dropped",
            Some(Capability::RateLimit),
            rate_limit_waited_out,
        ),
        (
            "an unknown user gets no model call (or a pairing code)",
            Some(Capability::Access),
            unknown_user_gets_no_model_call,
        ),
        (
            "a photo reaches vision",
            Some(Capability::PhotoIn),
            media::photo_reaches_vision,
        ),
        (
            "a voice note reaches the model as a transcript",
            Some(Capability::VoiceIn),
            media::voice_reaches_model_as_transcript,
        ),
        (
            "send_file delivers a file",
            Some(Capability::FileOut),
            media::send_file_delivers_a_file,
        ),
        (
            "the home channel gets a scheduled job's answer once",
            Some(Capability::HomeChannel),
            home_channel_gets_scheduled_answer_once,
        ),
    ];
    let mut report = Vec::new();
    for (name, needs, promise) in promises {
        if let Some(capability) = needs.filter(|c| H::uncovered().contains(c)) {
            report.push((name, Verdict::Unchecked(uncovered_reason(capability))));
            continue;
        }
        eprintln!("{} conformance: {name} …", H::NAME);
        report.push((name, promise(&mut world)));
    }
    world.stop();
    print_report(H::NAME, &report, started.elapsed());
}

fn print_report(platform: &str, report: &[(&str, Verdict)], took: Duration) {
    let passed = report.iter().filter(|(_, v)| *v == Verdict::Passed).count();
    eprintln!(
        "{platform} conformance: {passed} of {} promises passed ({:.1} s)",
        report.len(),
        took.as_secs_f64()
    );
    for (name, verdict) in report {
        match verdict {
            Verdict::Passed => eprintln!("  passed          {name}"),
            Verdict::NotApplicable(why) => eprintln!("  not applicable  {name}: {why}"),
            Verdict::Unchecked(why) => eprintln!("  NOT CHECKED     {name}: {why}"),
        }
    }
}

/// The suite's state: the platform, the provider, the home, the gateway
/// that runs (if one does).
pub struct World<H: Harness> {
    test: String,
    pub harness: H,
    pub caps: Capabilities,
    pub provider: FakeProvider,
    home: tempfile::TempDir,
    gateway: Option<Gateway>,
    /// Env on top of the harness's (a promise's settings).
    extra_env: Vec<(&'static str, String)>,
    next_token: u64,
}

impl<H: Harness> World<H> {
    pub(super) fn new(test: &str, rt: &tokio::runtime::Runtime) -> Self {
        let harness = H::start(rt);
        let provider = FakeProvider::start_with(Vec::new(), None, Some(Arc::new(respond))).unwrap();
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join("hermes")).unwrap();
        std::fs::create_dir_all(home.path().join("work")).unwrap();
        World {
            test: test.to_owned(),
            harness,
            caps: H::capabilities(),
            provider,
            home,
            gateway: None,
            extra_env: Vec::new(),
            next_token: 0,
        }
    }

    /// `$HERMES_HOME` of every gateway of the suite.
    pub fn home(&self) -> PathBuf {
        self.home.path().join("hermes")
    }

    /// The gateways' working directory (the file tools write there; they
    /// refuse `$HERMES_HOME`).
    pub fn work(&self) -> PathBuf {
        self.home.path().join("work")
    }

    /// Starts a gateway (if none runs) and waits until it is up.
    pub fn start(&mut self) {
        if self.gateway.is_some() {
            return;
        }
        let mark = self.harness.mark();
        let mut env = self.harness.env();
        env.extend(suite_env(&self.provider));
        env.extend(self.extra_env.iter().cloned());
        self.gateway = Some(Gateway::spawn(
            &self.test,
            &env,
            &self.home(),
            &self.work(),
            &self.provider.base_url(),
        ));
        self.harness.wait_up(mark);
    }

    /// The running gateway's process id.
    pub fn gateway_pid(&self) -> Option<u32> {
        self.gateway.as_ref().map(Gateway::pid)
    }

    /// Stops the running gateway gracefully; it must exit cleanly.
    pub fn stop(&mut self) {
        if let Some(mut gateway) = self.gateway.take() {
            let status = gateway.terminate();
            assert!(
                status.success(),
                "{}: the gateway did not stop cleanly: {status:?}",
                H::NAME
            );
        }
    }

    /// Restarts the gateway with `extra` on top of the harness's env.
    pub fn restart_with(&mut self, extra: Vec<(&'static str, String)>) {
        self.stop();
        self.extra_env = extra;
        self.start();
    }

    /// What the bot said so far, to compare with later
    /// ([`World::said_since`]).
    pub fn said_mark(&self) -> Vec<Said> {
        self.harness.said()
    }

    /// What the bot said in `chat` that is not in `mark`, in order (a
    /// harness may read messages back per chat, so new ones need not come
    /// last).
    pub fn said_since(&self, mark: &[Said], chat: &str) -> Vec<Said> {
        let mut seen = mark.to_vec();
        self.harness
            .said()
            .into_iter()
            .filter(|s| match seen.iter().position(|m| m == s) {
                Some(i) => {
                    seen.swap_remove(i);
                    false
                }
                None => true,
            })
            .filter(|s| s.chat == chat)
            .collect()
    }

    /// Waits until what the bot said in `chat` after `mark` satisfies
    /// `done`; returns it.
    pub fn await_said(
        &self,
        mark: &[Said],
        chat: &str,
        what: &str,
        done: impl Fn(&[Said]) -> bool,
    ) -> Vec<Said> {
        let deadline = Instant::now() + ANSWER_WITHIN;
        loop {
            let said = self.said_since(mark, chat);
            if done(&said) {
                return said;
            }
            assert!(
                Instant::now() < deadline,
                "{}: never saw {what} in {chat}; the bot said {said:#?}; the last model request: {}",
                H::NAME,
                self.provider
                    .requests()
                    .last()
                    .map(|r| tail(&r["messages"].to_string(), 2000).to_owned())
                    .unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last model request whose last user message carries `token`.
    pub fn request_for(&self, token: &str) -> Option<Value> {
        self.provider
            .requests()
            .into_iter()
            .rev()
            .find(|r| asked(r).as_deref() == Some(token))
    }

    /// Whether any model request ever mentioned `token`.
    pub fn model_saw(&self, token: &str) -> bool {
        self.provider
            .requests()
            .iter()
            .any(|r| r["messages"].to_string().contains(token))
    }

    /// A fresh token `[qN]` for a message.
    pub fn token(&mut self) -> String {
        self.next_token += 1;
        format!("[q{}]", self.next_token)
    }

    /// `from` writes a message carrying a fresh token at `place`: (the
    /// token, where it landed).
    pub fn ask(&mut self, from: Sender, place: Place, words: &str) -> (String, Posted) {
        let token = self.token();
        let posted = self.harness.send(from, place, &format!("{token} {words}"));
        (token, posted)
    }

    /// What the bot said that answers `token`.
    pub fn answers(&self, token: &str) -> Vec<Said> {
        let answer = answer(token);
        self.harness
            .said()
            .into_iter()
            .filter(|s| s.text.contains(&answer))
            .collect()
    }

    /// Checks that `said`, the answer to `token`, went to `posted`'s chat
    /// and, where replies point back, at `posted`.
    pub fn check_answer(&self, token: &str, posted: &Posted, said: &Said) {
        assert_eq!(
            said.chat,
            posted.chat,
            "{}: the answer to {token} went elsewhere",
            H::NAME
        );
        if self.caps.replies_point_back {
            assert_eq!(
                said.reply_to.as_deref(),
                Some(posted.id.as_str()),
                "{}: the answer to {token} points elsewhere",
                H::NAME
            );
        }
    }

    /// Waits until `token` has an answer; checks it went to `posted`'s chat
    /// and, where replies point back, at `posted`.
    pub fn await_answer(&self, token: &str, posted: &Posted) -> Said {
        let deadline = Instant::now() + ANSWER_WITHIN;
        loop {
            if let Some(said) = self.answers(token).into_iter().next() {
                self.check_answer(token, posted, &said);
                return said;
            }
            assert!(
                Instant::now() < deadline,
                "{}: {token} was never answered",
                H::NAME
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Every token written so far has at most one answer.
    pub fn check_none_answered_twice(&self) {
        for n in 1..=self.next_token {
            let token = format!("[q{n}]");
            let count = self.answers(&token).len();
            assert!(
                count <= 1,
                "{}: {token} was answered {count} times",
                H::NAME
            );
        }
    }
}

/// The last `n` bytes (or so) of `s`.
fn tail(s: &str, n: usize) -> &str {
    let mut start = s.len().saturating_sub(n);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// The text of the answer to `token`.
pub fn answer(token: &str) -> String {
    format!("answer to {token}")
}

/// The token `[qN]` in the last user message of a request.
fn asked(request: &Value) -> Option<String> {
    let text = last_user_text(request);
    let start = text.find("[q")?;
    let end = start + text[start..].find(']')?;
    Some(text[start..=end].to_owned())
}

/// What the suite adds to every gateway's env (not the soak's): whole
/// replies (no streamed previews, so each answer is one send), the tools
/// the promises call, a vision model, transcription by the provider.
fn suite_env(provider: &FakeProvider) -> Vec<(&'static str, String)> {
    vec![
        ("GATEWAY_STREAM_REPLIES", "false".to_owned()),
        ("HERMES_TOOLSETS", "todo,file,send_file".to_owned()),
        ("HERMES_MODEL", "gpt-4o".to_owned()),
        ("HERMES_TRANSCRIPTION_BASE_URL", provider.base_url()),
        ("HERMES_TRANSCRIPTION_MODEL", "whisper-1".to_owned()),
    ]
}

/// Asks for a long answer of this many numbered words: `LONG:<words>`.
const LONG: &str = "LONG:";
/// Asks for a file: `FILE`.
const FILE: &str = "FILE";

/// The text of the `n`-th word of a long answer.
fn long_word(n: usize) -> String {
    format!("w{n:05}")
}

/// The file the agent writes and sends for `token`: (path, content).
fn file_for(token: &str) -> (String, String) {
    let digits: String = token.chars().filter(char::is_ascii_digit).collect();
    (
        format!("conformance-q{digits}.txt"),
        format!("the file for {token}\n"),
    )
}

/// The last user message's text of a request.
fn last_user_text(request: &Value) -> String {
    let Some(user) = request["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
    else {
        return String::new();
    };
    match &user["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// How many tool results follow the last user message.
fn tool_results_since_user(request: &Value) -> usize {
    request["messages"].as_array().map_or(0, |m| {
        m.iter()
            .rev()
            .take_while(|m| m["role"] != "user")
            .filter(|m| m["role"] == "tool")
            .count()
    })
}

/// The scripted provider's answers: `answer to [qN]`; for `LONG:<words>`
/// that many numbered words after it; for `FILE` a file written and sent
/// first.
fn respond(request: &Value) -> Reply {
    let Some(token) = asked(request) else {
        return Reply::text("(no question)");
    };
    let text = last_user_text(request);
    if let Some(words) = text
        .split_once(LONG)
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse::<usize>().ok())
    {
        let body: Vec<String> = (1..=words).map(long_word).collect();
        return Reply::text(format!("{} {}", answer(&token), body.join(" ")));
    }
    if text.contains(FILE) {
        let (path, content) = file_for(&token);
        let id = format!("call_{}", path.replace(['.', '-'], "_"));
        return match tool_results_since_user(request) {
            0 => Reply::tool(
                &format!("{id}_write"),
                "write_file",
                &serde_json::json!({"path": path, "content": content}).to_string(),
            ),
            1 => Reply::tool(
                &format!("{id}_send"),
                "send_file",
                &serde_json::json!({"path": path}).to_string(),
            ),
            _ => Reply::text(answer(&token)),
        };
    }
    Reply::text(answer(&token))
}

fn dm_answered_once<H: Harness>(world: &mut World<H>) -> Verdict {
    world.start();
    let (token, posted) = world.ask(Sender::User(0), Place::Dm, "hello");
    world.await_answer(&token, &posted);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        world.answers(&token).len(),
        1,
        "{}: {token} answered more than once",
        H::NAME
    );
    Verdict::Passed
}

fn answered_after_start<H: Harness>(world: &mut World<H>) -> Verdict {
    if !world.caps.answers_while_down {
        return Verdict::NotApplicable(
            "the platform keeps nothing for a bot that is not connected",
        );
    }
    // Every user has been seen by a gateway first (some platforms only
    // catch up in chats the bot has served).
    world.start();
    for user in 0..world.caps.users {
        let (token, posted) = world.ask(Sender::User(user), Place::Dm, "before the stop");
        world.await_answer(&token, &posted);
    }
    world.stop();
    let asked: Vec<(String, Posted)> = (0..world.caps.users)
        .map(|user| world.ask(Sender::User(user), Place::Dm, "while down"))
        .collect();
    world.start();
    for (token, posted) in &asked {
        world.await_answer(token, posted);
    }
    Verdict::Passed
}

fn nothing_answered_twice_after_restart<H: Harness>(world: &mut World<H>) -> Verdict {
    world.start();
    let (token, posted) = world.ask(Sender::User(1), Place::Dm, "before a restart");
    world.await_answer(&token, &posted);
    world.stop();
    world.start();
    // A restart that re-delivered anything would answer it again now.
    std::thread::sleep(Duration::from_secs(2));
    world.check_none_answered_twice();
    Verdict::Passed
}

fn group_users_get_separate_sessions<H: Harness>(world: &mut World<H>) -> Verdict {
    if !world.caps.groups {
        return Verdict::NotApplicable("no group chats");
    }
    world.start();
    let (zero, posted) = world.ask(Sender::User(0), Place::Group, "I am user zero");
    world.await_answer(&zero, &posted);
    let (one, posted) = world.ask(Sender::User(1), Place::Group, "I am user one");
    world.await_answer(&one, &posted);
    let (again, posted) = world.ask(Sender::User(0), Place::Group, "me again");
    world.await_answer(&again, &posted);
    let of_one = world.request_for(&one).unwrap()["messages"].to_string();
    assert!(
        !of_one.contains(&zero),
        "{}: user one's session holds user zero's message",
        H::NAME
    );
    let of_zero = world.request_for(&again).unwrap()["messages"].to_string();
    assert!(
        of_zero.contains(&zero) && !of_zero.contains(&one),
        "{}: user zero's group session is not their own",
        H::NAME
    );
    Verdict::Passed
}

fn thread_keeps_its_own_session<H: Harness>(world: &mut World<H>) -> Verdict {
    if !world.caps.threads {
        return Verdict::NotApplicable("no threads or topics");
    }
    world.start();
    let (inside, posted) = world.ask(Sender::User(0), Place::Thread(0), "in the thread");
    world.await_answer(&inside, &posted);
    let (outside, posted) = world.ask(Sender::User(0), Place::Group, "outside the thread");
    world.await_answer(&outside, &posted);
    let (back, posted) = world.ask(Sender::User(0), Place::Thread(0), "back in the thread");
    world.await_answer(&back, &posted);
    let of_outside = world.request_for(&outside).unwrap()["messages"].to_string();
    assert!(
        !of_outside.contains(&inside),
        "{}: the group session holds the thread's message",
        H::NAME
    );
    let of_back = world.request_for(&back).unwrap()["messages"].to_string();
    assert!(
        of_back.contains(&inside) && !of_back.contains(&outside),
        "{}: the thread did not keep its own session",
        H::NAME
    );
    Verdict::Passed
}

fn long_reply_arrives_whole<H: Harness>(world: &mut World<H>) -> Verdict {
    let Some(limit) = world.caps.reply_limit else {
        return Verdict::NotApplicable("no length limit: every reply is one message");
    };
    world.start();
    // Two and a half times the limit, in 7-character numbered words.
    let words = limit * 5 / 2 / 7 + 1;
    let mark = world.said_mark();
    let (token, posted) = world.ask(Sender::User(0), Place::Dm, &format!("{LONG}{words} please"));
    let numbered = |said: &[Said]| -> Vec<String> {
        said.iter()
            .flat_map(|s| {
                let file = s
                    .file
                    .as_ref()
                    .map(|f| String::from_utf8_lossy(&f.bytes).into_owned())
                    .unwrap_or_default();
                format!("{} {file}", s.text)
                    .split(|c: char| !c.is_ascii_alphanumeric())
                    .filter(|w| {
                        w.len() == 6
                            && w.starts_with('w')
                            && w[1..].bytes().all(|b| b.is_ascii_digit())
                    })
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let last = long_word(words);
    let said = world.await_said(&mark, &posted.chat, "the whole long reply", |said| {
        numbered(said).contains(&last)
    });
    assert!(
        said[0].text.contains(&answer(&token)),
        "{}: the long reply does not start with its beginning",
        H::NAME
    );
    let expected: Vec<String> = (1..=words).map(long_word).collect();
    assert_eq!(
        numbered(&said),
        expected,
        "{}: the long reply was cut",
        H::NAME
    );
    for s in &said {
        assert!(
            s.text.chars().count() <= limit,
            "{}: a message of {} characters, over the limit of {limit}",
            H::NAME,
            s.text.chars().count()
        );
    }
    Verdict::Passed
}

fn rate_limit_waited_out<H: Harness>(world: &mut World<H>) -> Verdict {
    if !world.caps.rate_limit {
        return Verdict::NotApplicable("the peer has no rate-limit response to give");
    }
    world.start();
    let before = world.harness.throttled();
    world.harness.throttle(2);
    let (token, posted) = world.ask(Sender::User(0), Place::Dm, "while rate-limited");
    world.await_answer(&token, &posted);
    let throttled = world.harness.throttled() - before;
    assert!(
        throttled >= 2,
        "{}: the peer gave {throttled} rate-limit answers, not 2",
        H::NAME
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        world.answers(&token).len(),
        1,
        "{}: {token} answered twice",
        H::NAME
    );
    Verdict::Passed
}

/// How long a message the gateway must ignore is given.
const IGNORED_FOR: Duration = Duration::from_secs(3);

fn unknown_user_gets_no_model_call<H: Harness>(world: &mut World<H>) -> Verdict {
    if world.caps.access == Access::Open {
        return Verdict::NotApplicable("every caller with the credential is served");
    }
    // The allow-list alone: no model call, no answer (a refusal at most).
    world.restart_with(vec![("GATEWAY_PAIRING", "false".to_owned())]);
    let (token, _) = world.ask(Sender::Stranger, Place::Dm, "let me in");
    std::thread::sleep(IGNORED_FOR);
    assert!(
        !world.model_saw(&token),
        "{}: a stranger reached the model",
        H::NAME
    );
    assert!(
        world.answers(&token).is_empty(),
        "{}: a stranger was answered",
        H::NAME
    );
    world.restart_with(Vec::new());
    if world.caps.access == Access::Pairing {
        let mark = world.said_mark();
        let (token, posted) = world.ask(Sender::Stranger, Place::Dm, "let me in");
        world.await_said(&mark, &posted.chat, "a pairing code", |said| {
            said.iter().any(|s| s.text.contains("pairing code"))
        });
        assert!(
            !world.model_saw(&token),
            "{}: a stranger reached the model",
            H::NAME
        );
    }
    Verdict::Passed
}

/// A real 1×1 PNG.
pub const PNG: &[u8] = &[
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1F, 0x15, 0xC4,
    0x89, 0x00, 0x00, 0x00, 0x0A, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9C, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0D, 0x0A, 0x2D, 0xB4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4E, 0x44, 0xAE,
    0x42, 0x60, 0x82,
];

/// The first page of an Ogg stream (what the platforms' voice notes are).
pub const OGG: &[u8] = b"OggS\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00 a voice note";

fn home_channel_gets_scheduled_answer_once<H: Harness>(world: &mut World<H>) -> Verdict {
    if !world.caps.home_channel {
        return Verdict::NotApplicable("no home channel");
    }
    world.start();
    let token = world.token();
    let home = world.harness.home_chat();
    let mark = world.said_mark();
    let db = world.home().join("state.db");
    let deliver = H::NAME.to_owned();
    let prompt = format!("{token} the scheduled report");
    // The store is opened on a thread of its own, away from the harness's
    // runtime.
    std::thread::spawn(move || {
        let mut store = Store::open(&db).unwrap();
        let ctx = CronContext {
            now_ms: hermes_core::Clock::now_ms(&SystemClock),
            tz: TimeZone::UTC,
            platforms: None,
            scripts_dir: None,
        };
        let spec = JobSpec {
            schedule: Some("1s".to_owned()),
            prompt: Some(prompt),
            deliver: Some(deliver),
            ..JobSpec::default()
        };
        cron::create(&mut store, &spec, None, &ctx).unwrap();
    })
    .join()
    .unwrap();
    let answer = answer(&token);
    world.await_said(&mark, &home, "the scheduled job's answer", |said| {
        said.iter().any(|s| s.text.contains(&answer))
    });
    // Time for a second delivery, if there were to be one.
    std::thread::sleep(Duration::from_secs(3));
    let delivered = world
        .said_since(&mark, &home)
        .iter()
        .filter(|s| s.text.contains(&answer))
        .count();
    assert_eq!(
        delivered,
        1,
        "{}: the job's answer arrived {delivered} times",
        H::NAME
    );
    Verdict::Passed
}
