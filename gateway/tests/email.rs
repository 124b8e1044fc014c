//! The Email adapter against a real mail system on loopback
//! (`hermes_tests::dovecot`: Dovecot for IMAP and delivery, aiosmtpd as the
//! SMTP server that delivers into it), the whole gateway behind it: the
//! production agent factory over a real store, the loopback `FakeProvider`
//! as the model. The other side writes mail through the SMTP server and
//! reads the bot's answers from its own mailbox.
#![cfg(feature = "email")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hermes_email::{EmailAdapter, EmailConfig};
use hermes_gateway::app::RuntimeAgentFactory;
use hermes_gateway::config::GatewayConfig;
use hermes_gateway::runner::{GatewayRunner, RunnerDeps};
use hermes_runtime::config::{Environment, Overrides, Settings};
use hermes_runtime::store::{Store, SystemClock};
use hermes_tests::dovecot::{self, MailUser, header};
use hermes_tests::{FakeProvider, Reply, Responder};

const WAIT: Duration = Duration::from_secs(60);

struct Bot {
    home: tempfile::TempDir,
    work: tempfile::TempDir,
    settings: Settings,
    provider: FakeProvider,
    bot: MailUser,
    allowed: Vec<String>,
    idle: bool,
    /// IMAP host, port and security instead of plain 127.0.0.1.
    imap: Option<(&'static str, u16, &'static str)>,
    /// Trust the mail server's self-signed certificate.
    trust: bool,
    runner: Option<GatewayRunner>,
    store: Option<Arc<Mutex<Store>>>,
}

fn answer(text: &'static str) -> Responder {
    Arc::new(move |_| Reply::text(text))
}

impl Bot {
    fn new(allowed: &[&MailUser], responder: Responder) -> Bot {
        Bot::with_toolsets(allowed, responder, "todo")
    }

    fn with_toolsets(allowed: &[&MailUser], responder: Responder, toolsets: &str) -> Bot {
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
            ("HERMES_TOOLSETS", toolsets.to_owned()),
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
            home,
            work,
            settings,
            provider,
            bot: dovecot::server().user("bot"),
            allowed: allowed.iter().map(|u| u.address.clone()).collect(),
            idle: true,
            imap: None,
            trust: true,
            runner: None,
            store: None,
        }
    }

    fn config(&self) -> EmailConfig {
        let server = dovecot::server();
        let env = |name: &str| match (name, self.imap) {
            ("EMAIL_IMAP_HOST", Some((host, _, _))) => Some(host.to_owned()),
            ("EMAIL_IMAP_PORT", Some((_, port, _))) => Some(port.to_string()),
            ("EMAIL_IMAP_SECURITY", Some((_, _, security))) => Some(security.to_owned()),
            _ => self.plain_env(name),
        };
        let mut config = EmailConfig::from_sources(&env, &toml::Table::new())
            .unwrap()
            .unwrap();
        config.idle = self.idle;
        if self.trust {
            config.extra_roots_pem = Some(server.cert_pem.clone());
        }
        config
    }

    fn plain_env(&self, name: &str) -> Option<String> {
        let server = dovecot::server();
        match name {
            "EMAIL_ADDRESS" => Some(self.bot.address.clone()),
            "EMAIL_PASSWORD" => Some(self.bot.password.clone()),
            "EMAIL_IMAP_HOST" | "EMAIL_SMTP_HOST" => Some("127.0.0.1".to_owned()),
            "EMAIL_IMAP_PORT" => Some(server.imap_port.to_string()),
            "EMAIL_SMTP_PORT" => Some(server.smtp_port.to_string()),
            "EMAIL_IMAP_SECURITY" | "EMAIL_SMTP_SECURITY" => Some("none".to_owned()),
            "EMAIL_ALLOWED_USERS" => Some(self.allowed.join(",")),
            "EMAIL_POLL_INTERVAL" => Some("1".to_owned()),
            _ => None,
        }
    }

    /// Starts (or restarts) the gateway over the same home and store.
    async fn start(&mut self) {
        let store = Arc::new(Mutex::new(Store::open(&self.settings.state_db()).unwrap()));
        let adapter = EmailAdapter::new(self.config(), Some(Arc::clone(&store))).unwrap();
        let mut config =
            GatewayConfig::from_settings(&self.settings, hermes_gateway::platform::platforms())
                .unwrap();
        config.allow.per_platform.insert(
            "email".to_owned(),
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

    /// The messages of every model request, as (role, text) pairs.
    fn conversations(&self) -> Vec<Vec<(String, String)>> {
        self.provider
            .requests()
            .iter()
            .map(|r| {
                r["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|m| m["role"] == "user" || m["role"] == "assistant")
                    .map(|m| {
                        let text = match &m["content"] {
                            serde_json::Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        (m["role"].as_str().unwrap().to_owned(), text)
                    })
                    .collect()
            })
            .collect()
    }

    /// The last user message of every model request.
    fn asked(&self) -> Vec<String> {
        self.conversations()
            .into_iter()
            .map(|c| {
                c.into_iter()
                    .rev()
                    .find(|(role, _)| role == "user")
                    .unwrap()
                    .1
            })
            .collect()
    }
}

/// Runs blocking calls without starving the runtime's workers.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// A plain mail from `from` to `to`.
fn mail(
    from: &MailUser,
    to: &MailUser,
    id: &str,
    subject: &str,
    extra: &str,
    body: &str,
) -> String {
    format!(
        "From: {from} <{from}>\nTo: {to}\nSubject: {subject}\nMessage-ID: <{id}>\n\
         Date: Wed, 02 Dec 2026 09:00:00 +0000\n{extra}Content-Type: text/plain; charset=utf-8\n\n{body}\n",
        from = from.address,
        to = to.address,
    )
}

fn send(from: &MailUser, to: &MailUser, message: &str) {
    dovecot::server().send(&from.address, &to.address, message);
}

fn body(mail: &str) -> &str {
    mail.split_once("\r\n\r\n")
        .or_else(|| mail.split_once("\n\n"))
        .map_or("", |(_, b)| b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_sender_is_answered_in_the_thread_which_continues_the_session() {
    hermes_tests::require!(Dovecot, Aiosmtpd);
    let alice = blocking(|| dovecot::server().user("alice"));
    let mut bot = Bot::new(&[&alice], answer("Hello from hermes"));
    bot.start().await;
    let first = blocking(|| {
        send(
            &alice,
            &bot.bot,
            &mail(
                &alice,
                &bot.bot,
                "m1@alice",
                "Plans",
                "",
                "What about today?",
            ),
        );
        alice.wait_for_mails(1, WAIT).remove(0)
    });
    assert!(
        header(&first, "From").unwrap().contains(&bot.bot.address),
        "{first}"
    );
    assert_eq!(header(&first, "Subject").as_deref(), Some("Re: Plans"));
    assert_eq!(header(&first, "In-Reply-To").as_deref(), Some("<m1@alice>"));
    assert_eq!(header(&first, "References").as_deref(), Some("<m1@alice>"));
    assert_eq!(
        header(&first, "Auto-Submitted").as_deref(),
        Some("auto-replied")
    );
    assert!(
        header(&first, "Content-Type")
            .unwrap()
            .starts_with("text/plain"),
        "{first}"
    );
    assert_eq!(body(&first).trim(), "Hello from hermes");
    let bot_id = header(&first, "Message-ID").unwrap();
    // Alice answers in the thread, quoting as mail clients do.
    let reply = format!(
        "From: {a}\nTo: {b}\nSubject: Re: Plans\nMessage-ID: <m2@alice>\nIn-Reply-To: {bot_id}\n\
         References: <m1@alice> {bot_id}\nContent-Type: text/plain\n\n\
         And tomorrow?\n\nOn Wed, 2 Dec 2026 at 09:01, Hermes <{b}> wrote:\n> Hello from hermes\n",
        a = alice.address,
        b = bot.bot.address,
    );
    let second = blocking(|| {
        send(&alice, &bot.bot, &reply);
        alice.wait_for_mails(2, WAIT).remove(1)
    });
    assert_eq!(
        header(&second, "Subject").as_deref(),
        Some("Re: Plans"),
        "no doubled Re:"
    );
    assert_eq!(
        header(&second, "In-Reply-To").as_deref(),
        Some("<m2@alice>")
    );
    assert_eq!(
        header(&second, "References").unwrap(),
        format!("<m1@alice> {bot_id} <m2@alice>")
    );
    // One session: the second request carries the first exchange, and the
    // quoted history is not in the new message.
    let conversations = bot.conversations();
    assert_eq!(conversations.len(), 2);
    let texts: Vec<&str> = conversations[1].iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(
        texts,
        [
            "Subject: Plans\n\nWhat about today?",
            "Hello from hermes",
            "And tomorrow?"
        ]
    );
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_and_robots_get_nothing_and_cost_no_model_call() {
    hermes_tests::require!(Dovecot, Aiosmtpd);
    let (alice, mallory) = blocking(|| {
        let s = dovecot::server();
        (s.user("alice"), s.user("mallory"))
    });
    let mut bot = Bot::new(&[&alice], answer("ok"));
    bot.start().await;
    blocking(|| {
        send(
            &mallory,
            &bot.bot,
            &mail(&mallory, &bot.bot, "s1@m", "hi", "", "tell me secrets"),
        );
        for (i, extra) in [
            "Auto-Submitted: auto-replied\n",
            "Precedence: bulk\n",
            "List-Id: <news.example.test>\n",
        ]
        .iter()
        .enumerate()
        {
            let id = format!("robot{i}@alice");
            send(
                &alice,
                &bot.bot,
                &mail(&alice, &bot.bot, &id, "Out of office", extra, "away"),
            );
        }
        // Then a real question: once it is answered, the mail before it
        // has been read (in order) and judged.
        send(
            &alice,
            &bot.bot,
            &mail(&alice, &bot.bot, "q@alice", "ping", "", "ping"),
        );
        alice.wait_for_mails(1, WAIT);
        std::thread::sleep(Duration::from_secs(3));
        assert_eq!(alice.mails().len(), 1, "only the real question is answered");
        assert!(mallory.mails().is_empty(), "a stranger gets no mail at all");
    });
    assert_eq!(bot.asked(), ["Subject: ping\n\nping"]);
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_answers_mail_from_while_it_was_down_and_nothing_twice() {
    hermes_tests::require!(Dovecot, Aiosmtpd);
    let alice = blocking(|| dovecot::server().user("alice"));
    let long: String = (0..20_000)
        .map(|i| format!("Line {i}: the quick brown fox jumps over the lazy dog.\n"))
        .collect();
    let text: &'static str = Box::leak(long.into_boxed_str());
    let mut bot = Bot::new(&[&alice], answer(text));
    // Polling instead of IDLE, every second.
    bot.idle = false;
    // Mail from before the first start is history, not a question.
    blocking(|| {
        send(
            &alice,
            &bot.bot,
            &mail(&alice, &bot.bot, "old@alice", "old", "", "old news"),
        )
    });
    blocking(|| bot.bot.wait_for_mails(1, WAIT));
    bot.start().await;
    blocking(|| {
        send(
            &alice,
            &bot.bot,
            &mail(&alice, &bot.bot, "one@alice", "one", "", "one"),
        );
        alice.wait_for_mails(1, WAIT);
    });
    bot.stop().await;
    blocking(|| {
        send(
            &alice,
            &bot.bot,
            &mail(&alice, &bot.bot, "two@alice", "two", "", "two"),
        );
        bot.bot.wait_for_mails(3, WAIT);
    });
    bot.start().await;
    let mails = blocking(|| {
        alice.wait_for_mails(2, WAIT);
        std::thread::sleep(Duration::from_secs(3));
        alice.mails()
    });
    assert_eq!(mails.len(), 2, "nothing answered twice");
    assert_eq!(
        header(&mails[1], "In-Reply-To").as_deref(),
        Some("<two@alice>")
    );
    assert_eq!(bot.asked(), ["Subject: one\n\none", "Subject: two\n\ntwo"]);
    // A long answer arrives whole, in one mail.
    let lines: Vec<&str> = body(&mails[1]).lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 20_000, "the whole answer");
    assert_eq!(
        lines[19_999],
        "Line 19999: the quick brown fox jumps over the lazy dog."
    );
    // The handled mail is flagged in the bot's mailbox (maildir flags:
    // `S` seen, a keyword letter for $HermesAnswered), the old one not.
    let bot_dir = dovecot::server()
        .dir
        .join("home")
        .join(&bot.bot.address)
        .join("Maildir/cur");
    let flagged = std::fs::read_dir(&bot_dir)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().contains(":2,S"))
                .count()
        })
        .unwrap_or(0);
    assert!(flagged >= 2, "handled mail is flagged seen: {bot_dir:?}");
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renumbered_mailbox_is_not_answered_again() {
    hermes_tests::require!(Dovecot, Aiosmtpd);
    let alice = blocking(|| dovecot::server().user("alice"));
    let mut bot = Bot::new(&[&alice], answer("noted"));
    blocking(|| {
        send(
            &alice,
            &bot.bot,
            &mail(&alice, &bot.bot, "old@alice", "old", "", "old news"),
        );
        bot.bot.wait_for_mails(1, WAIT);
    });
    // Delivery times count in seconds: the old mail's is before the first
    // save's.
    std::thread::sleep(Duration::from_millis(1100));
    bot.start().await;
    blocking(|| {
        send(
            &alice,
            &bot.bot,
            &mail(&alice, &bot.bot, "one@alice", "one", "", "one"),
        );
        alice.wait_for_mails(1, WAIT);
    });
    bot.stop().await;
    // The server forgets its numbering (its UID list and indexes gone, as
    // after a rebuild): the mailbox gets a new UIDVALIDITY, the messages
    // and their flags stay.
    let maildir = dovecot::server()
        .dir
        .join("home")
        .join(&bot.bot.address)
        .join("Maildir");
    for entry in std::fs::read_dir(&maildir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("dovecot-uidlist")
            || name.starts_with("dovecot.index")
            || name.starts_with("dovecot-uidvalidity")
        {
            std::fs::remove_file(entry.path()).unwrap();
        }
    }
    // One second on, so the new UIDVALIDITY (a time) differs.
    std::thread::sleep(Duration::from_millis(1100));
    blocking(|| {
        send(
            &alice,
            &bot.bot,
            &mail(&alice, &bot.bot, "two@alice", "two", "", "two"),
        );
        bot.bot.wait_for_mails(3, WAIT);
    });
    bot.start().await;
    let mails = blocking(|| {
        alice.wait_for_mails(2, WAIT);
        std::thread::sleep(Duration::from_secs(3));
        alice.mails()
    });
    let answered: Vec<Option<String>> = mails.iter().map(|m| header(m, "In-Reply-To")).collect();
    assert_eq!(
        mails.len(),
        2,
        "neither the old mail nor the answered one again: {answered:?}"
    );
    assert_eq!(
        header(&mails[1], "In-Reply-To").as_deref(),
        Some("<two@alice>")
    );
    assert_eq!(bot.asked(), ["Subject: one\n\none", "Subject: two\n\ntwo"]);
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_go_to_the_home_address_or_into_their_thread() {
    hermes_tests::require!(Dovecot, Aiosmtpd);
    use hermes_gateway::cron::{Scheduler, SchedulerDeps, SchedulerTiming};
    use hermes_runtime::cron::{self, CronContext, CronSettings, JobSpec};

    let alice = blocking(|| dovecot::server().user("alice"));
    let mut bot = Bot::new(&[&alice], answer("# Morning briefing\nAll quiet."));
    bot.start().await;
    let env = Environment::from_pairs([
        ("HERMES_HOME", bot.home.path().display().to_string()),
        ("EMAIL_HOME_ADDRESS", alice.address.clone()),
    ]);
    let with_home = hermes_runtime::config::load(&Overrides::default(), &env).unwrap();
    let cron_settings = CronSettings::load(&with_home).unwrap();
    assert_eq!(
        cron_settings.home_channels.get("email"),
        Some(&alice.address)
    );
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
    let create = |deliver: String| {
        let ctx = CronContext {
            now_ms: hermes_core::Clock::now_ms(&SystemClock),
            tz: cron_settings.tz.clone(),
            platforms: Some(vec!["email".into()]),
            scripts_dir: None,
        };
        let spec = JobSpec {
            schedule: Some("1s".into()),
            prompt: Some("brief me".into()),
            deliver: Some(deliver),
            ..JobSpec::default()
        };
        cron::create(&mut store.lock().unwrap(), &spec, None, &ctx).unwrap();
    };
    // `deliver: email`: a new mail to EMAIL_HOME_ADDRESS, its subject the
    // answer's first line.
    create("email".into());
    let mail_home = blocking(|| alice.wait_for_mails(1, WAIT).remove(0));
    assert_eq!(
        header(&mail_home, "Subject").as_deref(),
        Some("Morning briefing")
    );
    assert_eq!(header(&mail_home, "In-Reply-To"), None);
    // Into a thread: `email:ADDRESS:THREAD` answers the thread's latest mail.
    let answer_id = blocking(|| {
        send(
            &alice,
            &bot.bot,
            &mail(
                &alice,
                &bot.bot,
                "disk@alice",
                "The disk",
                "",
                "is it full?",
            ),
        );
        header(&alice.wait_for_mails(2, WAIT)[1], "Message-ID").unwrap()
    });
    let thread = hermes_email::thread_id("disk@alice");
    create(format!("email:{}:{thread}", alice.address));
    let threaded = blocking(|| alice.wait_for_mails(3, WAIT).remove(2));
    assert_eq!(
        header(&threaded, "Subject").as_deref(),
        Some("Re: The disk")
    );
    // (the thread's latest mail is the bot's answer)
    assert_eq!(header(&threaded, "In-Reply-To"), Some(answer_id.clone()));
    assert_eq!(
        header(&threaded, "References"),
        Some(format!("<disk@alice> {answer_id}"))
    );
    scheduler.stop(Duration::from_secs(5)).await;
    bot.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attachment_reaches_the_media_pipeline() {
    hermes_tests::require!(Dovecot, Aiosmtpd);
    let alice = blocking(|| dovecot::server().user("alice"));
    let mut bot = Bot::new(&[&alice], answer("got it"));
    bot.start().await;
    let message = format!(
        "From: {a}\nTo: {b}\nSubject: numbers\nMessage-ID: <att@alice>\nMIME-Version: 1.0\n\
         Content-Type: multipart/mixed; boundary=\"XX\"\n\n--XX\nContent-Type: text/plain\n\n\
         see the data\n--XX\nContent-Type: text/csv; name=\"data.csv\"\n\
         Content-Disposition: attachment; filename=\"data.csv\"\n\
         Content-Transfer-Encoding: base64\n\nYSxiCjEsMgo=\n--XX--\n",
        a = alice.address,
        b = bot.bot.address,
    );
    blocking(|| {
        send(&alice, &bot.bot, &message);
        alice.wait_for_mails(1, WAIT);
    });
    let asked = bot.asked();
    assert!(
        asked[0].starts_with("Subject: numbers\n\nsee the data"),
        "{asked:?}"
    );
    assert!(
        asked[0].contains("data.csv"),
        "the model is told of the file: {asked:?}"
    );
    let saved = find(bot.work.path(), "data.csv").expect("the file is in the working directory");
    assert_eq!(std::fs::read(saved).unwrap(), b"a,b\n1,2\n");
    bot.stop().await;
}

fn find(dir: &Path, name: &str) -> Option<std::path::PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = find(&path, name) {
                return Some(found);
            }
        } else if entry.file_name().to_string_lossy() == name {
            return Some(path);
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imap_over_tls_and_starttls_checks_the_certificate() {
    hermes_tests::require!(Dovecot, Aiosmtpd);
    use hermes_gateway::adapter::PlatformAdapter;
    let alice = blocking(|| dovecot::server().user("alice"));
    let mut bot = Bot::new(&[&alice], answer("over TLS"));
    let (imap, imaps) = (dovecot::server().imap_port, dovecot::server().imaps_port);
    for (host, port, security) in [("localhost", imaps, "tls"), ("localhost", imap, "starttls")] {
        bot.imap = Some((host, port, security));
        let adapter = EmailAdapter::new(bot.config(), None).unwrap();
        assert_eq!(
            adapter.verify().await,
            Ok(Some(bot.bot.address.clone())),
            "{security}"
        );
    }
    // A certificate nobody vouches for is refused, with or without STARTTLS.
    bot.trust = false;
    for (port, security) in [(imaps, "tls"), (imap, "starttls")] {
        bot.imap = Some(("localhost", port, security));
        let adapter = EmailAdapter::new(bot.config(), None).unwrap();
        let err = adapter.verify().await.unwrap_err();
        assert!(
            err.to_lowercase().contains("certificate"),
            "{security}: {err}"
        );
    }
    // The whole way over IMAPS.
    bot.trust = true;
    bot.imap = Some(("localhost", imaps, "tls"));
    bot.start().await;
    let answered = blocking(|| {
        send(
            &alice,
            &bot.bot,
            &mail(&alice, &bot.bot, "tls@alice", "secure", "", "hello"),
        );
        alice.wait_for_mails(1, WAIT).remove(0)
    });
    assert_eq!(body(&answered).trim(), "over TLS");
    bot.stop().await;
}

#[test]
fn no_encryption_is_refused_towards_a_remote_host() {
    let home = tempfile::tempdir().unwrap();
    let env = Environment::from_pairs([
        ("HERMES_HOME", home.path().display().to_string()),
        ("EMAIL_ADDRESS", "bot@example.org".to_owned()),
        ("EMAIL_PASSWORD", "secret-pw".to_owned()),
        ("EMAIL_IMAP_HOST", "imap.example.org".to_owned()),
        ("EMAIL_SMTP_HOST", "127.0.0.1".to_owned()),
        ("EMAIL_IMAP_SECURITY", "none".to_owned()),
        ("HERMES_BASE_URL", "http://127.0.0.1:9/v1".to_owned()),
        ("HERMES_MODEL", "m".to_owned()),
    ]);
    let settings = hermes_runtime::config::load(&Overrides::default(), &env).unwrap();
    let err = match hermes_gateway::app::build_adapters(&settings, None) {
        Ok(_) => panic!("an unencrypted connection to a remote host was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("EMAIL_IMAP_SECURITY") && err.contains("loopback"),
        "{err}"
    );
    assert!(!err.contains("secret-pw"), "{err}");
}

/// `clarify` on a platform without buttons (issue 46): the question comes
/// with its choices numbered, and a reply with a number answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clarify_question_is_answered_by_number() {
    hermes_tests::require!(Dovecot, Aiosmtpd);
    let alice = blocking(|| dovecot::server().user("alice"));
    let responder: Responder = Arc::new(|request: &serde_json::Value| {
        let last = request["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        if last["role"] == "tool" {
            let result: serde_json::Value =
                serde_json::from_str(last["content"].as_str().unwrap()).unwrap();
            return Reply::text(format!(
                "Booked: {}",
                result["user_response"].as_str().unwrap()
            ));
        }
        Reply::tool(
            "c1",
            "clarify",
            r#"{"question":"Which day?","choices":["Monday","Tuesday","Friday"]}"#,
        )
    });
    let mut bot = Bot::with_toolsets(&[&alice], responder, "todo,clarify");
    bot.start().await;
    let question = blocking(|| {
        send(
            &alice,
            &bot.bot,
            &mail(
                &alice,
                &bot.bot,
                "c1@alice",
                "Meeting",
                "",
                "Book the meeting",
            ),
        );
        alice.wait_for_mails(1, WAIT).remove(0)
    });
    let text = body(&question).replace("\r\n", "\n");
    assert!(
        text.contains("Which day?") && text.contains("1. Monday\n2. Tuesday\n3. Friday"),
        "{question}"
    );
    assert!(text.contains("Reply with a number (1"), "{question}");
    let bot_id = header(&question, "Message-ID").unwrap();
    let reply = format!(
        "From: {a}\nTo: {b}\nSubject: Re: Meeting\nMessage-ID: <c2@alice>\nIn-Reply-To: {bot_id}\n\
         References: <c1@alice> {bot_id}\nContent-Type: text/plain\n\n3\n",
        a = alice.address,
        b = bot.bot.address,
    );
    let answer = blocking(|| {
        send(&alice, &bot.bot, &reply);
        alice.wait_for_mails(2, WAIT).remove(1)
    });
    assert_eq!(body(&answer).trim(), "Booked: Friday", "{answer}");
    assert_eq!(
        bot.provider.requests().len(),
        2,
        "the answer was no new turn"
    );
    bot.stop().await;
}
