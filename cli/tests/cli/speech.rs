//! `hermes doctor` asks a configured speech service (`[tts]`) for one
//! short sentence: the loopback speech service of the gateway's tests
//! answers real Ogg/Opus; a service that is down is a problem with its fix.

use hermes_tests::{FakeProvider, Reply};

use super::speech_support::SpeechService;
use super::support::*;

#[test]
fn doctor_checks_the_speech_service() {
    let env = Env::new();
    let provider = FakeProvider::start(vec![]).unwrap();
    let speech = SpeechService::start();
    env.write_home(
        "config.toml",
        &format!(
            "[tts]\nbase_url = \"{}\"\napi_key = \"sk-tts-0123456789\"\n",
            speech.base_url
        ),
    );
    let o = env.run(&provider.base_url(), &["doctor"]);
    assert!(
        stdout(&o).contains("✓ speech service at http://127.0.0.1:")
            && stdout(&o).contains("bytes of opus"),
        "{}",
        stdout(&o)
    );
    assert!(!stdout(&o).contains("sk-tts-0123456789") && !stderr(&o).contains("sk-tts-0123456789"));
    assert_eq!(speech.requests()[0]["input"], "Hermes speech check.");
    let o = env.run(&provider.base_url(), &["config", "show"]);
    assert!(
        stdout(&o).contains(&format!(
            "speech           {}  (model tts-1, voice alloy, opus; key sk-…6789)",
            speech.base_url
        )) && !stdout(&o).contains("sk-tts-0123456789"),
        "{}",
        stdout(&o)
    );

    env.write_home(
        "config.toml",
        &format!("[tts]\nbase_url = \"{}\"\n", SpeechService::down()),
    );
    let o = env.run(&provider.base_url(), &["doctor"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("✗ the speech service at")
            && stdout(&o).contains("check [tts] base_url"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn send_file_in_the_terminal_prints_the_files_path() {
    let env = Env::new();
    std::fs::write(env.work.path().join("chart.png"), b"\x89PNG\r\n\x1a\nrest").unwrap();
    let provider = FakeProvider::start(vec![
        Reply::tool(
            "c1",
            "send_file",
            r#"{"path":"chart.png","caption":"The chart"}"#,
        ),
        Reply::tool("c2", "send_file", r#"{"path":"/etc/hostname"}"#),
        Reply::text("Here it is."),
    ])
    .unwrap();
    let o = env.run(
        &provider.base_url(),
        &["-z", "send me the chart", "--toolsets", "send_file"],
    );
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(stdout(&o), "Here it is.\n");
    let real = std::fs::canonicalize(env.work.path().join("chart.png")).unwrap();
    assert!(
        stderr(&o).contains(&format!("📎 {} — The chart", real.display())),
        "{}",
        stderr(&o)
    );
    let results: Vec<String> = provider.requests()[2]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        results[0].starts_with("Sent 'chart.png' (12 bytes) as a photo"),
        "{results:?}"
    );
    assert!(
        results[1].contains("outside the working directory"),
        "{results:?}"
    );
}
