//! The Matrix adapter against a real Synapse homeserver on loopback
//! (`hermes_tests::synapse`), the whole gateway behind it: the production
//! agent factory over a real store, the loopback `FakeProvider` as the
//! model. The other side of each conversation is driven with plain
//! client-server API calls as registered users.
#![cfg(feature = "matrix")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hermes_gateway::app::RuntimeAgentFactory;
use hermes_gateway::config::GatewayConfig;
use hermes_gateway::runner::{GatewayRunner, RunnerDeps};
use hermes_matrix::{MatrixAdapter, MatrixConfig};
use hermes_runtime::config::{Environment, Overrides, Settings};
use hermes_runtime::store::{Store, SystemClock};
use hermes_tests::synapse::{self, User};
use hermes_tests::{FakeProvider, Reply, Responder};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(90);

struct Bot {
    _home: tempfile::TempDir,
    _work: tempfile::TempDir,
    settings: Settings,
    provider: FakeProvider,
    bot: User,
    allowed: Vec<String>,
    runner: Option<GatewayRunner>,
    store: Option<Arc<Mutex<Store>>>,
}

fn answer(text: &'static str) -> Responder {
    Arc::new(move |_| Reply::text(text))
}

impl Bot {
    fn new(allowed: &[&User], responder: Responder) -> Bot {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let provider = FakeProvider::start_with(vec![], None, Some(responder)).unwrap();
        let home = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        let env = Environment::from_pairs([
            ("HERMES_HOME", home.path().display().to_string()),
            ("HERMES_BASE_URL", provider.base_url()),
            ("HERMES_MODEL", "gpt-4o".to_owned()),
            ("HERMES_TOOLSETS", "todo".to_owned()),
        ]);
        let settings = hermes_runtime::config::load(
            &Overrides {
                workdir: Some(work.path().to_path_buf()),
                ..Overrides::default()
            },
            &env,
        )
        .unwrap();
        Bot {
            _home: home,
            _work: work,
            settings,
            provider,
            bot: synapse::server().user("bot"),
            allowed: allowed.iter().map(|u| u.user_id.clone()).collect(),
            runner: None,
            store: None,
        }
    }

    fn config(&self) -> MatrixConfig {
        let env = |name: &str| match name {
            "MATRIX_HOMESERVER" => Some(synapse::server().base.clone()),
            "MATRIX_USER_ID" => Some(self.bot.user_id.clone()),
            "MATRIX_PASSWORD" => Some(self.bot.password.clone()),
            "MATRIX_ALLOWED_USERS" => Some(self.allowed.join(",")),
            _ => None,
        };
        let mut config = MatrixConfig::from_env(&env).unwrap().unwrap();
        config.sync_timeout = Duration::from_secs(2);
        config
    }

    /// Starts (or restarts) the gateway over the same home and store.
    async fn start(&mut self) {
        let store = Arc::new(Mutex::new(Store::open(&self.settings.state_db()).unwrap()));
        let adapter = MatrixAdapter::new(self.config(), Some(Arc::clone(&store)));
        let mut config =
            GatewayConfig::from_settings(&self.settings, hermes_gateway::platform::platforms())
                .unwrap();
        config.allow.per_platform.insert(
            "matrix".to_owned(),
            self.allowed.iter().cloned().collect::<HashSet<_>>(),
        );
        let runner = GatewayRunner::new(RunnerDeps {
            adapters: vec![Arc::new(adapter)],
            factory: Arc::new(RuntimeAgentFactory::new(&self.settings, None).unwrap()),
            store: Arc::clone(&store),
            clock: Arc::new(SystemClock),
            config,
        });
        runner.start().await.unwrap();
        self.runner = Some(runner);
        self.store = Some(store);
    }

    async fn stop(&mut self) {
        if let Some(r) = self.runner.take() {
            r.shutdown().await;
        }
    }

    /// The last user message of every model request.
    fn asked(&self) -> Vec<String> {
        self.provider
            .requests()
            .iter()
            .map(|r| {
                let messages = r["messages"].as_array().unwrap();
                let last = messages.iter().rev().find(|m| m["role"] == "user").unwrap();
                last["content"].as_str().unwrap_or_default().to_owned()
            })
            .collect()
    }
}

/// Runs blocking client calls without starving the runtime's workers.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A DM room from `user` with the bot, joined by the bot.
fn dm(user: &User, bot: &User) -> String {
    let room = user.create_room(&[&bot.user_id], true);
    wait_until("the bot to join", || {
        user.joined(&room).contains(&bot.user_id)
    });
    room
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invite_is_joined_and_a_message_answered_as_a_rich_reply() {
    hermes_tests::require!(Synapse);
    let alice = blocking(|| synapse::server().user("alice"));
    let mut bot = Bot::new(&[&alice], answer("**Hello** from hermes"));
    bot.start().await;
    blocking(|| {
        let room = dm(&alice, &bot.bot);
        let asked = alice.say(&room, "hi there");
        alice.wait_for_messages(&room, &bot.bot.user_id, 1, WAIT);
        let reply = alice
            .messages(&room)
            .into_iter()
            .find(|e| e["sender"] == bot.bot.user_id.as_str())
            .unwrap();
        let content = &reply["content"];
        assert_eq!(content["body"], "**Hello** from hermes");
        assert_eq!(content["format"], "org.matrix.custom.html");
        assert!(
            content["formatted_body"]
                .as_str()
                .unwrap()
                .contains("<strong>Hello</strong>"),
            "{content}"
        );
        assert_eq!(
            content["m.relates_to"]["m.in_reply_to"]["event_id"],
            asked.as_str()
        );
    });
    assert_eq!(bot.asked(), vec!["hi there".to_owned()]);
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_get_nothing_and_their_invites_are_declined() {
    hermes_tests::require!(Synapse);
    let (alice, mallory) = blocking(|| {
        let s = synapse::server();
        (s.user("alice"), s.user("mallory"))
    });
    let mut bot = Bot::new(&[&alice], answer("ok"));
    bot.start().await;
    blocking(|| {
        // A stranger's invite is declined.
        let theirs = mallory.create_room(&[&bot.bot.user_id], true);
        wait_until("the invite to be declined", || {
            let (_, state) = mallory.call(
                "GET",
                &format!(
                    "/rooms/{}/state/m.room.member/{}",
                    urlencode(&theirs),
                    urlencode(&bot.bot.user_id)
                ),
                None,
            );
            state["membership"] == "leave"
        });
        // In a room an allowed user made, a stranger who mentions the bot is
        // not answered; the allowed user is.
        let room = alice.create_room(&[&bot.bot.user_id, &mallory.user_id], false);
        mallory.join(&room);
        wait_until("the bot to join", || {
            alice.joined(&room).contains(&bot.bot.user_id)
        });
        mallory.send(
            &room,
            json!({"msgtype": "m.text", "body": format!("{}: tell me secrets", bot.bot.user_id),
                   "m.mentions": {"user_ids": [bot.bot.user_id]}}),
        );
        alice.send(
            &room,
            json!({"msgtype": "m.text", "body": format!("{}: hello", bot.bot.user_id),
                   "m.mentions": {"user_ids": [bot.bot.user_id]}}),
        );
        // Not addressed to the bot in a group room: ignored.
        alice.say(&room, "just chatting with mallory");
        let answered = |bodies: Vec<String>| bodies.iter().filter(|b| *b == "ok").count();
        wait_until("the answer to alice", || {
            answered(alice.wait_for_messages(&room, &bot.bot.user_id, 0, WAIT)) == 1
        });
        std::thread::sleep(Duration::from_secs(3));
        // Mallory got the runner's refusal (no model call), never an answer.
        let said = alice.wait_for_messages(&room, &bot.bot.user_id, 1, WAIT);
        assert_eq!(answered(said.clone()), 1, "{said:?}");
        assert!(
            said.iter().all(|b| b == "ok" || b.contains("not allowed")),
            "{said:?}"
        );
    });
    assert_eq!(bot.asked(), vec!["hello".to_owned()]);
    bot.stop().await;
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn long_text() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        (0..900)
            .map(|i| format!("Line {i}: the quick brown fox jumps over the lazy dog."))
            .collect::<Vec<_>>()
            .join("\n")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_answer_arrives_whole_even_when_rate_limited() {
    hermes_tests::require!(Synapse);
    let (alice, admin) = blocking(|| {
        let s = synapse::server();
        (s.user("alice"), s.admin())
    });
    let mut bot = Bot::new(&[&alice], Arc::new(|_| Reply::text(long_text())));
    // One message a second, no burst: the pieces after the first are
    // refused with M_LIMIT_EXCEEDED until the wait the server names.
    blocking(|| synapse::server().set_rate_limit(&admin, &bot.bot.user_id, 1, 1));
    bot.start().await;
    blocking(|| {
        let room = dm(&alice, &bot.bot);
        alice.say(&room, "the long one, please");
        let started = Instant::now();
        let text = long_text();
        let pieces_needed = text.len().div_ceil(hermes_matrix::MAX_BODY_BYTES);
        let pieces = alice.wait_for_messages(&room, &bot.bot.user_id, pieces_needed, WAIT);
        assert!(pieces_needed >= 3, "{pieces_needed}");
        assert!(
            pieces
                .iter()
                .all(|p| p.len() <= hermes_matrix::MAX_BODY_BYTES),
            "a piece over the limit"
        );
        let lines: Vec<&str> = pieces
            .iter()
            .flat_map(|p| p.lines())
            .filter(|l| !l.is_empty())
            .collect();
        let expected: Vec<&str> = text.lines().collect();
        assert_eq!(lines, expected, "the answer arrives whole, in order, once");
        // The server's limit was met and waited out, not dodged: at one
        // message a second, the pieces after the first took a second each.
        let min = Duration::from_millis(900 * (pieces_needed as u64 - 1));
        assert!(started.elapsed() >= min, "{:?}", started.elapsed());
        std::thread::sleep(Duration::from_secs(2));
        assert_eq!(
            alice
                .messages(&room)
                .iter()
                .filter(|e| e["sender"] == bot.bot.user_id.as_str())
                .count(),
            pieces_needed
        );
    });
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_answers_what_came_meanwhile_and_nothing_twice() {
    hermes_tests::require!(Synapse);
    let alice = blocking(|| synapse::server().user("alice"));
    let mut bot = Bot::new(&[&alice], answer("noted"));
    // History from before the bot's first login is never answered.
    let room = blocking(|| {
        let room = alice.create_room(&[&bot.bot.user_id], true);
        bot.bot.join(&room);
        alice.say(&room, "old news");
        room
    });
    bot.start().await;
    blocking(|| {
        alice.say(&room, "one");
        alice.wait_for_messages(&room, &bot.bot.user_id, 1, WAIT);
    });
    bot.stop().await;
    blocking(|| alice.say(&room, "two"));
    bot.start().await;
    blocking(|| {
        alice.wait_for_messages(&room, &bot.bot.user_id, 2, WAIT);
        std::thread::sleep(Duration::from_secs(3));
        assert_eq!(
            alice
                .wait_for_messages(&room, &bot.bot.user_id, 2, WAIT)
                .len(),
            2
        );
    });
    assert_eq!(bot.asked(), vec!["one".to_owned(), "two".to_owned()]);
    // The conversation is one stored session that kept its history.
    let store = Store::open(&bot.settings.state_db()).unwrap();
    let sessions = store.list_sessions(10).unwrap();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let texts: Vec<String> = store
        .load_transcript(&sessions[0].id)
        .unwrap()
        .iter()
        .filter_map(|e| e.message.content().map(str::to_owned))
        .collect();
    assert_eq!(texts, ["one", "noted", "two", "noted"]);
    // A restart reused the saved login: one device for the bot.
    let (_, devices) = blocking(|| bot.bot.call("GET", "/devices", None));
    let devices = devices["devices"].as_array().unwrap().len();
    assert_eq!(devices, 2, "the registration's and the gateway's login");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_room_is_told_once_and_left() {
    hermes_tests::require!(Synapse);
    let alice = blocking(|| synapse::server().user("alice"));
    let mut bot = Bot::new(&[&alice], answer("never"));
    bot.start().await;
    blocking(|| {
        let (status, created) = alice.call(
            "POST",
            "/createRoom",
            Some(json!({
                "preset": "private_chat", "invite": [bot.bot.user_id], "is_direct": true,
                "initial_state": [{"type": "m.room.encryption", "state_key": "",
                                   "content": {"algorithm": "m.megolm.v1.aes-sha2"}}],
            })),
        );
        assert_eq!(status, 200, "{created}");
        let room = created["room_id"].as_str().unwrap().to_owned();
        let told = alice.wait_for_messages(&room, &bot.bot.user_id, 1, WAIT);
        assert!(told[0].contains("end-to-end encrypted"), "{told:?}");
        wait_until("the bot to leave", || {
            !alice.joined(&room).contains(&bot.bot.user_id)
        });
    });
    assert!(bot.asked().is_empty());
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_for_matrix_goes_to_the_home_room_and_sethome_moves_it() {
    hermes_tests::require!(Synapse);
    use hermes_gateway::cron::{Scheduler, SchedulerDeps, SchedulerTiming};
    use hermes_runtime::cron::{self, CronContext, CronSettings, JobSpec};

    let alice = blocking(|| synapse::server().user("alice"));
    let mut bot = Bot::new(&[&alice], answer("the morning briefing"));
    bot.start().await;
    let (home, other) = blocking(|| (dm(&alice, &bot.bot), dm(&alice, &bot.bot)));
    // MATRIX_HOME_ROOM names the home room, as the other platforms' variables do.
    let env = Environment::from_pairs([
        ("HERMES_HOME", bot._home.path().display().to_string()),
        ("MATRIX_HOME_ROOM", home.clone()),
    ]);
    let with_home = hermes_runtime::config::load(&Overrides::default(), &env).unwrap();
    let cron_settings = CronSettings::load(&with_home).unwrap();
    assert_eq!(cron_settings.home_channels.get("matrix"), Some(&home));
    let store = bot.store.clone().unwrap();
    let scheduler = Scheduler::start(SchedulerDeps {
        runner: bot.runner.clone().unwrap(),
        factory: Arc::new(RuntimeAgentFactory::new(&bot.settings, None).unwrap()),
        store: Arc::clone(&store),
        clock: Arc::new(SystemClock),
        settings: cron_settings.clone(),
        timing: SchedulerTiming::default(),
        scripts: None,
    });
    let create = |prompt: &str| {
        let ctx = CronContext {
            now_ms: hermes_core::Clock::now_ms(&SystemClock),
            tz: cron_settings.tz.clone(),
            platforms: Some(vec!["matrix".into()]),
            scripts_dir: None,
        };
        let spec = JobSpec {
            schedule: Some("1s".into()),
            prompt: Some(prompt.into()),
            deliver: Some("matrix".into()),
            ..JobSpec::default()
        };
        cron::create(&mut store.lock().unwrap(), &spec, None, &ctx).unwrap()
    };
    let first = create("brief me");
    blocking(|| {
        let said = alice.wait_for_messages(&home, &bot.bot.user_id, 1, WAIT);
        assert_eq!(said, vec!["the morning briefing".to_owned()]);
    });
    wait_until("the run to be recorded", || {
        store.lock().unwrap().job_runs(&first.id, 1).unwrap()[0].state
            == hermes_runtime::store::RunState::Delivered
    });
    // `/sethome` in another room moves the home there (stored, it wins).
    blocking(|| {
        alice.say(&other, "/sethome");
        let said = alice.wait_for_messages(&other, &bot.bot.user_id, 1, WAIT);
        assert!(
            said[0].contains("is now the matrix home channel"),
            "{said:?}"
        );
    });
    create("brief me again");
    blocking(|| {
        let said = alice.wait_for_messages(&other, &bot.bot.user_id, 2, WAIT);
        assert_eq!(said[1], "the morning briefing");
        std::thread::sleep(Duration::from_secs(2));
        assert_eq!(
            alice
                .wait_for_messages(&home, &bot.bot.user_id, 1, WAIT)
                .len(),
            1,
            "the first home room got only the first job's answer"
        );
    });
    // Into a thread: `matrix:ROOM:$ROOT` (the room id keeps its colon).
    let root = blocking(|| alice.say(&other, "a thread about the disk"));
    let ctx = CronContext {
        now_ms: hermes_core::Clock::now_ms(&SystemClock),
        tz: cron_settings.tz.clone(),
        platforms: Some(vec!["matrix".into()]),
        scripts_dir: None,
    };
    let spec = JobSpec {
        schedule: Some("1s".into()),
        prompt: Some("in the thread".into()),
        deliver: Some(format!("matrix:{other}:{root}")),
        ..JobSpec::default()
    };
    cron::create(&mut store.lock().unwrap(), &spec, None, &ctx).unwrap();
    blocking(|| {
        // The bot answers the root message itself too (a rich reply); the
        // job's answer is the one in the thread.
        alice.wait_for_messages(&other, &bot.bot.user_id, 4, WAIT);
        let threaded: Vec<_> = alice
            .messages(&other)
            .into_iter()
            .filter(|e| {
                e["sender"] == bot.bot.user_id.as_str()
                    && e["content"]["m.relates_to"]["rel_type"] == "m.thread"
            })
            .collect();
        assert_eq!(threaded.len(), 1, "{threaded:?}");
        assert_eq!(
            threaded[0]["content"]["m.relates_to"]["event_id"],
            root.as_str()
        );
        assert_eq!(threaded[0]["content"]["body"], "the morning briefing");
    });
    scheduler.stop(Duration::from_secs(5)).await;
    bot.stop().await;
}
