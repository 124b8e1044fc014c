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

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_tests::{FakeProvider, Reply};
use serde_json::Value;

use super::gateway::{Gateway, serve_if_child};
use super::{ANSWER_WITHIN, Capabilities, Harness, Place, Posted, Said, Sender, Verdict};

/// One promise: its name and its check.
type Promise<H> = (&'static str, fn(&mut World<H>) -> Verdict);

/// Runs every promise on `H` (the test `test`, by its full name) and prints
/// the report. Panics on the first broken promise.
pub fn run<H: Harness>(test: &str) {
    serve_if_child();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let mut world = World::<H>::new(test, &rt);
    let promises: Vec<Promise<H>> = vec![
        ("a DM is answered once", dm_answered_once),
        ("two users in one group get separate sessions", unchecked),
        ("a thread or topic keeps its own session", unchecked),
        (
            "a message written while the gateway is down is answered after it starts",
            answered_after_start,
        ),
        (
            "nothing is answered twice after a restart",
            nothing_answered_twice_after_restart,
        ),
        ("a reply longer than the limit arrives whole", unchecked),
        ("the rate limit is waited out, nothing dropped", unchecked),
        (
            "an unknown user gets no model call (or a pairing code)",
            unchecked,
        ),
        ("a photo reaches vision", unchecked),
        ("a voice note reaches the model as a transcript", unchecked),
        ("send_file delivers a file", unchecked),
        (
            "the home channel gets a scheduled job's answer once",
            unchecked,
        ),
    ];
    let mut report = Vec::new();
    for (name, promise) in promises {
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
    next_token: u64,
}

impl<H: Harness> World<H> {
    fn new(test: &str, rt: &tokio::runtime::Runtime) -> Self {
        let harness = H::start(rt);
        let provider = FakeProvider::start_with(Vec::new(), None, Some(Arc::new(respond))).unwrap();
        World {
            test: test.to_owned(),
            harness,
            caps: H::capabilities(),
            provider,
            home: tempfile::tempdir().unwrap(),
            gateway: None,
            next_token: 0,
        }
    }

    pub fn home(&self) -> &Path {
        self.home.path()
    }

    /// Starts a gateway (if none runs) and waits until it is up.
    pub fn start(&mut self) {
        if self.gateway.is_some() {
            return;
        }
        let mark = self.harness.mark();
        let env = self.harness.env();
        self.gateway = Some(Gateway::spawn(
            &self.test,
            &env,
            self.home.path(),
            &self.provider.base_url(),
        ));
        self.harness.wait_up(mark);
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

    /// Waits until `token` has an answer; checks it went to `posted`'s chat
    /// and, where replies point back, at `posted`.
    pub fn await_answer(&self, token: &str, posted: &Posted) -> Said {
        let deadline = Instant::now() + ANSWER_WITHIN;
        loop {
            if let Some(said) = self.answers(token).into_iter().next() {
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

/// The text of the answer to `token`.
pub fn answer(token: &str) -> String {
    format!("answer to {token}")
}

/// The token `[qN]` in the last user message of a request.
fn asked(request: &Value) -> Option<String> {
    let content = request["messages"]
        .as_array()?
        .iter()
        .rev()
        .find(|m| m["role"] == "user")?;
    let text = match &content["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(" "),
        _ => return None,
    };
    let start = text.find("[q")?;
    let end = start + text[start..].find(']')?;
    Some(text[start..=end].to_owned())
}

/// The scripted provider's answers.
fn respond(request: &Value) -> Reply {
    match asked(request) {
        Some(token) => Reply::text(answer(&token)),
        None => Reply::text("(no question)"),
    }
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

/// A promise the kit does not check yet.
fn unchecked<H: Harness>(_: &mut World<H>) -> Verdict {
    Verdict::Unchecked("the kit has no check for it yet")
}
