//! `hermes gateway run [--check]` as the CLI calls it: configuration errors
//! with exit code 2 naming the key, the single-instance lock, and a real
//! run — a child process with the Telegram adapter and the provider client
//! against a loopback fake of both — that answers a message and stops
//! gracefully on SIGTERM.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::telegram_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hermes_gateway::app::{GatewayError, check_config, run_gateway};
use hermes_gateway::check::{check_live, describe_allow};
use hermes_gateway::lock::InstanceLock;
use hermes_runtime::config::{Environment, Overrides, Settings, load};
use hermes_runtime::store::Store;

fn settings(home: &Path, toml: &str, vars: &[(&str, &str)]) -> Settings {
    std::fs::write(home.join("config.toml"), toml).unwrap();
    let mut pairs: Vec<(String, String)> = vec![
        ("HERMES_HOME".into(), home.display().to_string()),
        ("HERMES_BASE_URL".into(), "http://127.0.0.1:9/v1".into()),
        ("HERMES_MODEL".into(), "test-model".into()),
    ];
    pairs.extend(vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    let overrides = Overrides {
        workdir: Some(home.to_path_buf()),
        ..Overrides::default()
    };
    load(&overrides, &Environment::from_pairs(pairs)).unwrap()
}

const TG: (&str, &str) = ("TELEGRAM_BOT_TOKEN", "123:abc");

/// `--check` asks Telegram whether the token is good (`getMe`): the Bot API
/// fake's token and address, and the runtime the fake runs on.
fn live_telegram() -> (tokio::runtime::Runtime, [(&'static str, String); 2]) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let fake = rt.block_on(telegram_support::Fake::start(true));
    let vars = [
        ("TELEGRAM_BOT_TOKEN", telegram_support::TOKEN.to_owned()),
        ("TELEGRAM_API_URL", fake.base.clone()),
    ];
    (rt, vars)
}

fn with_live<'a>(
    live: &'a [(&'static str, String); 2],
    vars: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    let mut all: Vec<(&str, &str)> = live.iter().map(|(k, v)| (*k, v.as_str())).collect();
    all.extend(vars.iter().filter(|(k, _)| *k != TG.0));
    all
}

#[test]
fn check_accepts_a_valid_configuration_and_warns_about_an_empty_allow_list() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path(), "[gateway]\nbusy_mode = \"queue\"\n", &[TG]);
    let summary = check_config(&s).unwrap();
    assert!(summary.platforms.contains(&"telegram"));
    let text = summary.to_string();
    assert!(text.contains("busy mode: queue"), "{text}");
    let allowed = describe_allow(&summary.config.allow);
    assert!(allowed.contains("nobody is allowed"), "{allowed}");
    let (_rt, live) = live_telegram();
    let s = settings(
        dir.path(),
        "",
        &with_live(&live, &[("TELEGRAM_ALLOWED_USERS", "1,2")]),
    );
    let summary = check_config(&s).unwrap();
    assert_eq!(
        describe_allow(&summary.config.allow),
        "allowed users: telegram: 1, 2"
    );
    // --check needs no lock; it asks Telegram (here the fake) about the token.
    let report = check_live(&s).unwrap();
    assert!(report.to_string().contains("@fake_bot"), "{report}");
    run_gateway(&s, true).unwrap();
}

/// Found packaging the gateway (issue 18): `--check`, and so `run`, built the
/// tools without the async bridge and refused any explicit toolset list that
/// named `web` ("no async bridge was provided").
#[test]
fn check_accepts_an_explicit_web_toolset() {
    let dir = tempfile::tempdir().unwrap();
    let (_rt, live) = live_telegram();
    let s = settings(
        dir.path(),
        "[agent]\ntoolsets = [\"web\", \"memory\", \"todo\"]\n",
        &with_live(&live, &[("TELEGRAM_ALLOWED_USERS", "1")]),
    );
    check_config(&s).unwrap();
    run_gateway(&s, true).unwrap();
}

#[test]
fn bad_configuration_names_the_key_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(Settings, &str)> = vec![
        (
            settings(dir.path(), "[gateway]\nbusy_mode = \"sometimes\"\n", &[TG]),
            "gateway.busy_mode",
        ),
        (
            settings(dir.path(), "[gateway]\nidle_reset_hourz = 3\n", &[TG]),
            "gateway.idle_reset_hourz",
        ),
        (
            settings(dir.path(), "", &[TG, ("GATEWAY_MAX_WORKERS", "0")]),
            "GATEWAY_MAX_WORKERS",
        ),
        (settings(dir.path(), "", &[]), "TELEGRAM_BOT_TOKEN"),
        (
            settings(dir.path(), "", &[("WECOM_BOT_ID", "bot")]),
            "WECOM_SECRET",
        ),
        (
            settings(dir.path(), "", &[TG, ("TELEGRAM_API_URL", "ftp://x")]),
            "TELEGRAM_API_URL",
        ),
    ];
    for (s, key) in cases {
        let err = run_gateway(&s, true).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{err}");
        assert!(err.to_string().contains(key), "{key}: {err}");
    }
    let err = check_config(&settings(dir.path(), "", &[])).unwrap_err();
    assert!(matches!(err, GatewayError::NoPlatform));
}

#[test]
fn a_second_gateway_on_the_same_home_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path(), "", &[TG]);
    let _held = InstanceLock::acquire(dir.path()).unwrap();
    let err = run_gateway(&s, false).unwrap_err();
    assert_eq!(err.exit_code(), 1);
    assert!(err.to_string().contains("already running"), "{err}");
}

/// A loopback fake of the Telegram Bot API and an OpenAI-compatible
/// provider, on one port.
struct Fake {
    port: u16,
    sent: Arc<Mutex<Vec<String>>>,
    provider_calls: Arc<Mutex<Vec<String>>>,
}

fn fake_server() -> Fake {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let sent = Arc::new(Mutex::new(Vec::new()));
    let provider_calls = Arc::new(Mutex::new(Vec::new()));
    let delivered = Arc::new(AtomicBool::new(false));
    let (s2, p2) = (sent.clone(), provider_calls.clone());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let (s, p, d) = (s2.clone(), p2.clone(), delivered.clone());
            std::thread::spawn(move || serve(conn, &s, &p, &d));
        }
    });
    Fake {
        port,
        sent,
        provider_calls,
    }
}

fn serve(
    conn: TcpStream,
    sent: &Mutex<Vec<String>>,
    provider: &Mutex<Vec<String>>,
    delivered: &AtomicBool,
) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut out = conn;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let path = request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or("")
            .to_owned();
        let mut len = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let body = String::from_utf8_lossy(&body).into_owned();
        let method = path.rsplit('/').next().unwrap_or("");
        let (ctype, response) = if path.ends_with("/chat/completions") {
            provider.lock().unwrap().push(body.clone());
            if body.contains("\"stream\":true") {
                let chunk = |delta: &str, finish: &str| {
                    format!(
                        "data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
                    )
                };
                (
                    "text/event-stream",
                    format!(
                        "{}{}data: [DONE]\n\n",
                        chunk(r#"{"role":"assistant","content":"hello human"}"#, "null"),
                        chunk("{}", "\"stop\"")
                    ),
                )
            } else {
                (
                    "application/json",
                    r#"{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hello human"},"finish_reason":"stop"}]}"#.to_owned(),
                )
            }
        } else {
            let result = match method {
                "getMe" => {
                    r#"{"id":1,"is_bot":true,"first_name":"Hermes","username":"hermes_bot"}"#
                        .to_owned()
                }
                "getUpdates" => {
                    if delivered.swap(true, Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(200));
                        "[]".to_owned()
                    } else {
                        r#"[{"update_id":1,"message":{"message_id":10,"from":{"id":42,"is_bot":false,"first_name":"Ann"},"chat":{"id":42,"type":"private","first_name":"Ann"},"date":1700000000,"text":"hello gateway"}}]"#.to_owned()
                    }
                }
                "sendMessage" => {
                    sent.lock().unwrap().push(body.clone());
                    r#"{"message_id":11,"chat":{"id":42,"type":"private"},"date":1700000001,"text":"ok"}"#.to_owned()
                }
                _ => "true".to_owned(),
            };
            (
                "application/json",
                format!("{{\"ok\":true,\"result\":{result}}}"),
            )
        };
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n\r\n",
            response.len()
        );
        if out.write_all(head.as_bytes()).is_err() || out.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

const CHILD_ENV: &str = "HERMES_GATEWAY_TEST_RUN_CHILD";

fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

#[test]
fn run_serves_a_message_and_stops_gracefully_on_sigterm() {
    if std::env::var_os(CHILD_ENV).is_some() {
        // The child: exactly what `hermes gateway run` does.
        let settings = load(&Overrides::default(), &Environment::from_process()).unwrap();
        let code = match run_gateway(&settings, false) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("gateway error: {e}");
                e.exit_code()
            }
        };
        std::process::exit(code);
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let fake = fake_server();
    let base = format!("http://127.0.0.1:{}", fake.port);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "app::run_serves_a_message_and_stops_gracefully_on_sigterm",
            "--nocapture",
            "--test-threads=1",
        ])
        .env_clear()
        .env(CHILD_ENV, "1")
        .env("HERMES_HOME", home)
        .env("TELEGRAM_BOT_TOKEN", "123:abc")
        .env("TELEGRAM_API_URL", &base)
        .env("TELEGRAM_POLL_TIMEOUT", "1")
        .env("TELEGRAM_ALLOWED_USERS", "42")
        .env("HERMES_BASE_URL", format!("{base}/v1"))
        .env("HERMES_API_KEY", "sk-test")
        .env("HERMES_MODEL", "test-model")
        .current_dir(home)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();

    let replied = wait_for(Duration::from_secs(60), || {
        fake.sent
            .lock()
            .unwrap()
            .iter()
            .any(|b| b.contains("hello human"))
    });
    if !replied {
        let _ = child.kill();
        panic!(
            "no reply; provider calls: {:?}, sent: {:?}",
            fake.provider_calls.lock().unwrap(),
            fake.sent.lock().unwrap()
        );
    }
    // The provider saw the user's message.
    assert!(
        fake.provider_calls
            .lock()
            .unwrap()
            .iter()
            .any(|b| b.contains("hello gateway"))
    );
    // A second instance is refused while this one runs.
    assert!(InstanceLock::acquire(home).is_err());

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut exit = None;
    wait_for(Duration::from_secs(30), || {
        exit = child.try_wait().unwrap();
        exit.is_some()
    });
    let Some(exit) = exit else {
        let _ = child.kill();
        panic!("the gateway did not stop after SIGTERM");
    };
    assert!(exit.success(), "{exit:?}");

    // The exchange is stored and the stop was recorded as clean.
    let mut store = Store::open(&home.join("state.db")).unwrap();
    let session = store
        .active_session_for_key("agent:main:telegram:dm:42")
        .unwrap()
        .expect("the DM session exists");
    let transcript = store.load_transcript(&session.id).unwrap();
    let texts: Vec<&str> = transcript
        .iter()
        .filter_map(|e| e.message.content())
        .collect();
    assert_eq!(texts, vec!["hello gateway", "hello human"]);
    assert!(store.suspend_recent_unclean(120_000).unwrap().is_empty());
    drop(InstanceLock::acquire(home).unwrap());
}
