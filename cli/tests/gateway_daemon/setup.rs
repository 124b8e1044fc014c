//! `hermes gateway setup`: the token verified live, the settings a platform
//! needs asked for, everything written to a private `.env`.

use super::*;

/// `hermes gateway setup` on `home`, with `env` on top of a clean
/// environment and `answers` on stdin.
fn run_setup(home: &Path, env: &[(&str, &str)], answers: &str) -> Output {
    use std::io::Write;
    let mut command = Command::new(HERMES);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("HERMES_HOME", home);
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command
        .args(["gateway", "setup"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(answers.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The number `gateway setup`'s menu gives the platform labelled `label`.
fn menu_pick(home: &Path, env: &[(&str, &str)], label: &str) -> String {
    let menu = text(&run_setup(home, env, "1\n"));
    menu.lines()
        .find_map(|l| l.trim().strip_suffix(&format!(") {label}")))
        .unwrap_or_else(|| panic!("{label} is not offered: {menu}"))
        .to_owned()
}

/// `hermes gateway setup` with `answers` on stdin, Telegram at `telegram`.
fn setup(home: &Path, telegram: &str, answers: &str) -> Output {
    run_setup(home, &[("TELEGRAM_API_URL", telegram)], answers)
}

/// Issue 31, item 9: `hermes gateway setup` verifies the token live (a
/// refused one is retried, nothing saved meanwhile), checks the allow-list
/// and writes `.env` with mode 0600; `gateway run --check` then passes on
/// what it wrote alone.
#[test]
fn gateway_setup_verifies_the_token_and_writes_a_private_env() {
    use std::os::unix::fs::PermissionsExt;
    let rt = runtime();
    let fake = rt.block_on(Fake::start(true));
    let home = tempfile::tempdir().unwrap();
    let dotenv = home.path().join(".env");

    // A refused token, then quit: nothing is written.
    let o = setup(home.path(), &fake.base, "1\n999:not-the-token\nq\n");
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("TELEGRAM_BOT_TOKEN"), "{out}");
    assert!(
        out.contains("bot token") && out.contains("(input hidden)"),
        "{out}"
    );
    assert!(!dotenv.exists(), "nothing saved: {out}");

    // Refused, retried with the right one; a non-numeric id is asked again.
    let answers = format!("1\n999:not-the-token\nr\n{TOKEN}\n7, @ann\n7, 8\n");
    let o = setup(home.path(), &fake.base, &answers);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("@fake_bot"), "{out}");
    assert!(out.contains("`@ann` is not a numeric user id"), "{out}");
    assert!(!out.contains(TOKEN), "the token is never echoed: {out}");
    let written = std::fs::read_to_string(&dotenv).unwrap();
    assert_eq!(
        written,
        format!("TELEGRAM_BOT_TOKEN={TOKEN}\nTELEGRAM_ALLOWED_USERS=7,8\n")
    );
    let mode = std::fs::metadata(&dotenv).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    let provider = provider();
    let o = gateway_cmd(home.path(), &fake.base, TOKEN, &provider.base_url())
        .env_remove("TELEGRAM_BOT_TOKEN")
        .env_remove("TELEGRAM_ALLOWED_USERS")
        .args(["gateway", "run", "--check"])
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("allowed users: telegram: 7, 8"), "{out}");
}

/// A one-endpoint stand-in for Meta's Graph API: `GET /v21.0/{id}` (the
/// phone number) with the right bearer token answers the number, anything
/// else Meta's 401 with code 190. Serves until the test ends.
fn fake_graph(token: &'static str) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v21.0", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut authorized = false;
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                if line.to_ascii_lowercase().starts_with("authorization:") {
                    authorized = line.trim_end().ends_with(&format!("Bearer {token}"));
                }
                if line == "\r\n" {
                    break;
                }
                line.clear();
            }
            let (status, body) = if authorized {
                (
                    "200 OK",
                    json!({"display_phone_number": "15550783881", "verified_name": "Hermes Test",
                           "id": "106540352242922"}),
                )
            } else {
                (
                    "401 Unauthorized",
                    json!({"error": {"message": "Invalid OAuth access token", "type": "OAuthException",
                                     "code": 190, "fbtrace_id": "x"}}),
                )
            };
            let body = body.to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

/// Issue 42: `hermes gateway setup` sets WhatsApp up — the phone number id,
/// the app secret and the verify token besides the token, checked live
/// together, secrets never echoed, all saved to `.env`.
#[test]
fn gateway_setup_asks_whatsapp_for_every_setting_it_needs() {
    const WA_TOKEN: &str = "EAAG-setup-token";
    let graph = fake_graph(WA_TOKEN);
    let home = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let port = port.to_string();
    let env = [
        ("WHATSAPP_API_URL", graph.as_str()),
        ("WHATSAPP_WEBHOOK_PORT", port.as_str()),
    ];
    let run = |answers: &str| run_setup(home.path(), &env, answers);
    let pick = menu_pick(home.path(), &env, "WhatsApp");
    let answers = format!(
        "{pick}\n106540352242922\napp-secret-X\nverify-Y\nwrong-token\nr\n{WA_TOKEN}\n4915112345678\n"
    );
    let o = run(&answers);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("WHATSAPP_ACCESS_TOKEN"), "{out}");
    assert!(out.contains("Hermes Test"), "{out}");
    for secret in [WA_TOKEN, "app-secret-X", "verify-Y"] {
        assert!(!out.contains(secret), "{secret} echoed: {out}");
    }
    let written = std::fs::read_to_string(home.path().join(".env")).unwrap();
    for line in [
        format!("WHATSAPP_ACCESS_TOKEN={WA_TOKEN}"),
        "WHATSAPP_PHONE_NUMBER_ID=106540352242922".to_owned(),
        "WHATSAPP_APP_SECRET=app-secret-X".to_owned(),
        "WHATSAPP_VERIFY_TOKEN=verify-Y".to_owned(),
        "WHATSAPP_ALLOWED_USERS=4915112345678".to_owned(),
    ] {
        assert!(
            written.lines().any(|l| l == line),
            "{line} missing: {written}"
        );
    }
}

/// A one-method stand-in for `signal-cli daemon --http`: `POST /api/v1/rpc`
/// answers JSON-RPC `getUserStatus` as signal-cli does (`recipient`,
/// `number`, `uuid`, `isRegistered`), the account with its UUID. Serves
/// until the test ends.
fn fake_signal_daemon(account: &'static str) -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut length, mut path) = (0usize, String::new());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                if path.is_empty() {
                    path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                if line == "\r\n" {
                    break;
                }
                line.clear();
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let answer = if path == "/api/v1/rpc" && request["method"] == "getUserStatus" {
                let list: Vec<Value> = request["params"]["recipient"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|r| {
                        let uuid = (r == account).then_some("0b7c2f1e-9d3a-4c5b-8e6f-1a2b3c4d5e6f");
                        json!({"recipient": r, "number": r, "uuid": uuid, "isRegistered": uuid.is_some()})
                    })
                    .collect();
                json!({"jsonrpc": "2.0", "result": list, "id": request["id"]})
            } else {
                json!({"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not implemented"},
                       "id": request["id"]})
            };
            let body = answer.to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

/// Issue 42: `hermes gateway setup` sets Signal up — the daemon's address,
/// then the account checked live against it (a daemon that is not running
/// is said so and nothing is saved), allowed users as `+` numbers or UUIDs.
#[test]
fn gateway_setup_sets_signal_up_against_its_daemon() {
    const ACCOUNT: &str = "+4915100000001";
    let home = tempfile::tempdir().unwrap();
    let run = |answers: &str| run_setup(home.path(), &[], answers);
    let pick = menu_pick(home.path(), &[], "Signal");
    // No daemon at the address: said so, nothing saved.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let o = run(&format!("{pick}\nhttp://{closed}\n{ACCOUNT}\nq\n"));
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("signal-cli daemon is not answering"), "{out}");
    // The account is a phone number, no credential: asked by its name, in
    // plain sight.
    assert!(
        out.contains("SIGNAL_ACCOUNT (the account's number"),
        "{out}"
    );
    assert!(!out.contains("input hidden"), "{out}");
    assert!(out.contains("Nothing was saved"), "{out}");
    assert!(!home.path().join(".env").exists());
    // The daemon answers: saved.
    let daemon = fake_signal_daemon(ACCOUNT);
    let o = run(&format!(
        "{pick}\n{daemon}\n{ACCOUNT}\n+4915112345678,0b7c2f1e-9d3a-4c5b-8e6f-1a2b3c4d5e6f\n"
    ));
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("0b7c2f1e-9d3a-4c5b-8e6f-1a2b3c4d5e6f"),
        "the account's UUID, as the daemon gave it: {out}"
    );
    let written = std::fs::read_to_string(home.path().join(".env")).unwrap();
    for line in [
        format!("SIGNAL_ACCOUNT={ACCOUNT}"),
        format!("SIGNAL_HTTP_URL={daemon}"),
        "SIGNAL_ALLOWED_USERS=+4915112345678,0b7c2f1e-9d3a-4c5b-8e6f-1a2b3c4d5e6f".to_owned(),
    ] {
        assert!(
            written.lines().any(|l| l == line),
            "{line} missing: {written}"
        );
    }
}

/// A two-method stand-in for Slack's Web API, as Slack documents them:
/// `POST /api/auth.test` answers who the bot token belongs to (`ok`,
/// `team`, `user`, `user_id`, `bot_id`) and `POST /api/apps.connections.open`
/// a Socket Mode URL for an app-level token; a wrong token gets HTTP 200
/// with `{"ok":false,"error":"invalid_auth"}`, a bot token where an
/// app-level one belongs `not_allowed_token_type`. Serves until the test
/// ends.
fn fake_slack(bot: &'static str, app: &'static str) -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/api", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut request, mut bearer, mut length) = (String::new(), String::new(), 0usize);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                if request.is_empty() {
                    request = line.trim_end().to_owned();
                }
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("authorization: bearer ") {
                    bearer = line.trim_end()[line.len() - v.len()..].trim().to_owned();
                }
                if let Some(v) = lower.strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                if line == "\r\n" {
                    break;
                }
                line.clear();
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let answer = if request.starts_with("POST /api/auth.test ") {
                if bearer == bot {
                    json!({"ok": true, "url": "https://acme.slack.com/", "team": "Acme",
                           "user": "hermes", "team_id": "T0ACME", "user_id": "U0HERMES",
                           "bot_id": "B0HERMES"})
                } else {
                    json!({"ok": false, "error": "invalid_auth"})
                }
            } else if request.starts_with("POST /api/apps.connections.open ") {
                if bearer == app {
                    json!({"ok": true, "url": "wss://wss-primary.slack.com/link/?ticket=t&app_id=A0"})
                } else if bearer.starts_with("xoxb-") {
                    json!({"ok": false, "error": "not_allowed_token_type"})
                } else {
                    json!({"ok": false, "error": "invalid_auth"})
                }
            } else {
                json!({"ok": false, "error": "unknown_method"})
            };
            let body = answer.to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

/// Issue 41 §2: `hermes gateway setup` sets Slack up end to end — the bot
/// token and the app-level token asked for (hidden, never echoed), both
/// checked live (`auth.test`, `apps.connections.open`), a refused token
/// retried, member ids checked, all saved to `.env`; `gateway run --check`
/// then passes on what it wrote alone.
#[test]
fn gateway_setup_sets_slack_up_with_both_tokens() {
    const BOT: &str = "xoxb-1-setup-bot-token";
    const APP: &str = "xapp-1-A0-setup-app-token";
    let slack = fake_slack(BOT, APP);
    let home = tempfile::tempdir().unwrap();
    let env = [("SLACK_API_URL", slack.as_str())];
    let pick = menu_pick(home.path(), &env, "Slack");
    // The app-level token (asked first: the bot token is checked with
    // it), a refused bot token retried, a member id with a space asked
    // again.
    let answers = format!("{pick}\n{APP}\nxoxb-1-wrong\nr\n{BOT}\nU0 ANN\nU0ANN,U0BOB\n");
    let o = run_setup(home.path(), &env, &answers);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("SLACK_BOT_TOKEN"), "{out}");
    assert!(out.contains("SLACK_APP_TOKEN"), "{out}");
    assert!(
        out.contains("refused by auth.test"),
        "the refusal says why: {out}"
    );
    assert!(out.contains("`U0 ANN` is not a user id"), "{out}");
    assert!(out.contains("hermes"), "the bot is named: {out}");
    for secret in [BOT, APP] {
        assert!(!out.contains(secret), "{secret} echoed: {out}");
    }
    let written = std::fs::read_to_string(home.path().join(".env")).unwrap();
    for line in [
        format!("SLACK_BOT_TOKEN={BOT}"),
        format!("SLACK_APP_TOKEN={APP}"),
        "SLACK_ALLOWED_USERS=U0ANN,U0BOB".to_owned(),
    ] {
        assert!(
            written.lines().any(|l| l == line),
            "{line} missing: {written}"
        );
    }
    let provider = provider();
    let o = Command::new(HERMES)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("HERMES_HOME", home.path())
        .env("SLACK_API_URL", &slack)
        .env("HERMES_BASE_URL", provider.base_url())
        .env("HERMES_MODEL", "fake-model")
        .args(["gateway", "run", "--check"])
        .output()
        .unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("U0ANN"), "{out}");
}
