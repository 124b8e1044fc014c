//! `hermes gateway run [--check]` with the WeCom callback adapter, as the CLI
//! calls it: configuration errors naming the variable (exit 2), and a real
//! run — a child process with the adapter's HTTP server, a fake qyapi and a
//! scripted provider on loopback — that verifies its URL, answers a DM,
//! ignores WeCom's retry of it, and stops gracefully on SIGTERM.
#![cfg(feature = "wecom_callback")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::wecom_callback_support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hermes_gateway::app::{check_config, run_gateway};
use hermes_runtime::config::{Environment, Overrides, Settings, load};
use hermes_runtime::store::Store;
use hermes_tests::{FakeProvider, Reply};
use wecom_callback_support::{AES_KEY, AGENT, CORP, FakeQyApi, SECRET, TOKEN, WeCom, text_xml};

fn app_vars() -> Vec<(&'static str, String)> {
    vec![
        ("WECOM_CALLBACK_CORP_ID", CORP.to_owned()),
        ("WECOM_CALLBACK_CORP_SECRET", SECRET.to_owned()),
        ("WECOM_CALLBACK_AGENT_ID", AGENT.to_string()),
        ("WECOM_CALLBACK_TOKEN", TOKEN.to_owned()),
        ("WECOM_CALLBACK_ENCODING_AES_KEY", AES_KEY.to_owned()),
    ]
}

fn settings(home: &Path, vars: &[(&str, String)]) -> Settings {
    let mut pairs: Vec<(String, String)> = vec![
        ("HERMES_HOME".into(), home.display().to_string()),
        ("HERMES_BASE_URL".into(), "http://127.0.0.1:9/v1".into()),
        ("HERMES_MODEL".into(), "test-model".into()),
    ];
    pairs.extend(vars.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
    let overrides = Overrides {
        workdir: Some(home.to_path_buf()),
        ..Overrides::default()
    };
    load(&overrides, &Environment::from_pairs(pairs)).unwrap()
}

#[test]
fn check_validates_the_callback_settings() {
    let dir = tempfile::tempdir().unwrap();
    let summary = check_config(&settings(dir.path(), &app_vars())).unwrap();
    assert!(summary.platforms.contains(&"wecom_callback"), "{summary}");
    let with = |var: &'static str, value: &str| {
        let mut v: Vec<(&str, String)> =
            app_vars().into_iter().filter(|(k, _)| *k != var).collect();
        v.push((var, value.to_owned()));
        settings(dir.path(), &v)
    };
    for (s, needle) in [
        (
            with("WECOM_CALLBACK_ENCODING_AES_KEY", &AES_KEY[..42]),
            "43-character",
        ),
        (
            with("WECOM_CALLBACK_AGENT_ID", "one"),
            "WECOM_CALLBACK_AGENT_ID",
        ),
        (with("WECOM_CALLBACK_PORT", "http"), "WECOM_CALLBACK_PORT"),
        (
            settings(dir.path(), &app_vars()[..1]),
            "WECOM_CALLBACK_CORP_SECRET",
        ),
    ] {
        let err = run_gateway(&s, true).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{err}");
        assert!(err.to_string().contains(needle), "{needle}: {err}");
        assert!(
            !err.to_string().contains(SECRET),
            "the secret leaked: {err}"
        );
    }
}

const CHILD_ENV: &str = "HERMES_WECOM_CALLBACK_TEST_RUN_CHILD";

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

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[test]
fn run_answers_a_callback_and_stops_gracefully_on_sigterm() {
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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let qyapi = rt.block_on(FakeQyApi::start());
    let provider = FakeProvider::start(vec![Reply::text("你好，我是 Hermes")]).unwrap();
    // A free port for the child (bound and released; loopback only).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "wecom_callback_app::run_answers_a_callback_and_stops_gracefully_on_sigterm",
        "--nocapture",
        "--test-threads=1",
    ])
    .env_clear()
    .env(CHILD_ENV, "1")
    .env("HERMES_HOME", home)
    .env("HERMES_BASE_URL", provider.base_url())
    .env("HERMES_API_KEY", "sk-test")
    .env("HERMES_MODEL", "test-model")
    .env("WECOM_CALLBACK_HOST", "127.0.0.1")
    .env("WECOM_CALLBACK_PORT", port.to_string())
    .env("WECOM_CALLBACK_API_URL", &qyapi.url)
    .env("WECOM_CALLBACK_ALLOWED_USERS", "zhangsan")
    .current_dir(home)
    .stdout(Stdio::null())
    .stderr(Stdio::inherit());
    for (k, v) in app_vars() {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let health = format!("http://{addr}/health");
    let up = wait_for(Duration::from_secs(60), || {
        hermes_tests::http::request("GET", &health, None).is_ok_and(|r| r.status == 200)
    });
    if !up {
        let _ = child.kill();
        panic!("the callback server did not come up on {addr}");
    }
    let wecom = WeCom::new(addr, "/wecom/callback");

    let (status, echo) = rt.block_on(wecom.verify_url("8236754908", now_s(), false));
    assert_eq!((status, echo.as_str()), (200, "8236754908"));

    let (query, body) = wecom.sealed(
        &text_xml("zhangsan", "hello gateway", "900001", now_s()),
        now_s(),
    );
    assert_eq!(rt.block_on(wecom.post_raw(&query, body.clone())).0, 200);
    let sent = rt.block_on(qyapi.wait_sent(|s| s.iter().any(|m| m.touser == "zhangsan")));
    assert_eq!(sent[0].content, "你好，我是 Hermes");
    // WeCom's retry of the same callback is answered, not run again.
    assert_eq!(
        rt.block_on(wecom.post_raw(&query, body)),
        (200, "success".to_owned())
    );
    assert_eq!(provider.requests().len(), 1);
    assert!(
        provider.requests()[0].to_string().contains("hello gateway"),
        "{:?}",
        provider.requests()
    );

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
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "still listening after the stop"
    );
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
    qyapi.assert_clean();

    let mut store = Store::open(&home.join("state.db")).unwrap();
    let session = store
        .active_session_for_key("agent:main:wecom_callback:dm:zhangsan")
        .unwrap()
        .expect("the DM session exists");
    let transcript = store.load_transcript(&session.id).unwrap();
    let texts: Vec<&str> = transcript
        .iter()
        .filter_map(|e| e.message.content())
        .collect();
    assert_eq!(texts, vec!["hello gateway", "你好，我是 Hermes"]);
    assert!(store.suspend_recent_unclean(120_000).unwrap().is_empty());
}
