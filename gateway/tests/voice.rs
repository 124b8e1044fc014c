//! Spoken replies and `send_file` through the whole gateway on Telegram:
//! the Bot API fake (`telegram_support`, which keeps multipart uploads
//! byte for byte and checks `sendVoice` carries Ogg/Opus), the production
//! agent factory over the real store, the loopback `FakeProvider` as the
//! model and transcription service, and a loopback speech service
//! (`speech_support`) answering real Ogg/Opus bytes.
#![cfg(feature = "telegram")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::speech_support;
use crate::telegram_gateway;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hermes_gateway::voice::VOICE_FAILED;
use hermes_tests::{Reply, Responder};
use serde_json::{Value, json};
use speech_support::{SPEECH, SpeechService};
use telegram_gateway::{Gateway, OGG, Setup, WAIT, gateway};

const ANSWER: &str =
    "The lights are **on** now. Details: https://example.com/lights\n\n```sh\nlights --on\n```";

fn voice(file_id: &str) -> Value {
    json!({"voice": {"file_id": file_id, "file_unique_id": "v", "duration": 2,
        "mime_type": "audio/ogg", "file_size": OGG.len()}})
}

fn config(tts_url: &str) -> String {
    format!(
        "[transcription]\nbase_url = \"{{provider}}\"\n[tts]\nbase_url = \"{tts_url}\"\nvoice = \"nova\"\n"
    )
}

async fn speaking_gateway(tts_url: &str) -> Gateway {
    let gw = gateway(Setup {
        config_toml: config(tts_url),
        responder: Arc::new(|_| Reply::text(ANSWER)),
        ..Setup::default()
    })
    .await;
    gw.provider
        .set_transcription(Reply::text("Please turn on the lights."));
    gw
}

/// Waits until `method` was uploaded `n` times.
async fn uploads(
    gw: &Gateway,
    method: &str,
    n: usize,
) -> Vec<Vec<hermes_tests::multipart::FormField>> {
    let deadline = Instant::now() + WAIT;
    loop {
        let up = gw.fake.uploads(method);
        if up.len() >= n {
            return up;
        }
        assert!(Instant::now() < deadline, "no {method} within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn part<'a>(
    parts: &'a [hermes_tests::multipart::FormField],
    name: &str,
) -> &'a hermes_tests::multipart::FormField {
    parts
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no {name} part"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voice_note_is_answered_in_text_and_with_the_services_audio() {
    let speech = SpeechService::start();
    let gw = speaking_gateway(&speech.base_url).await;
    gw.fake.add_file("vo1", "voice/file_1.oga", OGG.to_vec());
    gw.send(41, voice("vo1"));
    let sent = uploads(&gw, "sendVoice", 1).await;
    let parts = &sent[0];
    let audio = part(parts, "voice");
    assert_eq!(audio.data, SPEECH, "the service's bytes, byte for byte");
    assert_eq!(audio.file_name.as_deref(), Some("reply.ogg"));
    assert_eq!(audio.content_type.as_deref(), Some("audio/ogg"));
    assert_eq!(part(parts, "chat_id").data, b"7");
    let reply: Value = serde_json::from_slice(&part(parts, "reply_parameters").data).unwrap();
    assert_eq!(
        reply["message_id"], 41,
        "the voice note answers the voice note"
    );
    // The text went out too, before the voice note.
    let texts = gw.replies(1).await;
    assert!(
        texts
            .last()
            .unwrap()
            .contains("The lights are <b>on</b> now."),
        "{texts:?}"
    );
    let text_at = gw.fake.requests("sendMessage")[0].at;
    assert!(text_at < gw.fake.requests("sendVoice")[0].at, "text first");
    // What was spoken: no code, no URL, no Markdown.
    let asked = speech.requests();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["input"], "The lights are on now. Details:");
    assert_eq!(asked[0]["voice"], "nova");
    assert_eq!(asked[0]["model"], "tts-1");
    gw.assert_clean();
    gw.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_message_gets_text_only_and_voice_always_speaks_it() {
    let speech = SpeechService::start();
    let gw = speaking_gateway(&speech.base_url).await;
    gw.send(51, json!({"text": "are the lights on?"}));
    gw.replies(1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        gw.fake.uploads("sendVoice").is_empty(),
        "auto: text for text"
    );
    assert!(speech.requests().is_empty());

    gw.send(52, json!({"text": "/voice always"}));
    let texts = gw.replies(2).await;
    assert!(
        texts[1].contains("Every answer in this chat is spoken"),
        "{texts:?}"
    );
    gw.send(53, json!({"text": "and now?"}));
    let sent = uploads(&gw, "sendVoice", 1).await;
    assert_eq!(part(&sent[0], "voice").data, SPEECH);
    assert_eq!(gw.replies(3).await.len(), 3, "the text as well");
    // The choice is stored: it outlives the conversation.
    gw.send(54, json!({"text": "/new"}));
    gw.replies(4).await;
    gw.send(55, json!({"text": "still?"}));
    uploads(&gw, "sendVoice", 2).await;
    gw.send(56, json!({"text": "/voice off"}));
    gw.replies(6).await;
    gw.send(57, json!({"text": "quiet now"}));
    gw.replies(7).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(gw.fake.uploads("sendVoice").len(), 2, "/voice off");
    gw.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_speech_service_down_still_delivers_the_text_and_one_line() {
    let gw = speaking_gateway(&SpeechService::down()).await;
    gw.fake.add_file("vo2", "voice/file_2.oga", OGG.to_vec());
    gw.send(61, voice("vo2"));
    let texts = gw.replies(2).await;
    assert!(
        texts[0].contains("The lights are <b>on</b> now."),
        "{texts:?}"
    );
    assert_eq!(texts[1], VOICE_FAILED);
    assert!(!texts[1].contains("127.0.0.1"), "one short line, no detail");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(gw.fake.requests("sendMessage").len(), 2);
    assert!(gw.fake.uploads("sendVoice").is_empty());
    gw.runner.shutdown().await;
}

/// A model that makes tool calls in turn (one a step), then says `done`.
fn calls(steps: Vec<(&'static str, String)>) -> Responder {
    calls_from(Arc::new(Mutex::new(steps)))
}

/// [`calls`] over a script the test may still fill in.
fn calls_from(steps: Arc<Mutex<Vec<(&'static str, String)>>>) -> Responder {
    Arc::new(move |request: &Value| {
        let steps = steps.lock().unwrap().clone();
        let done = request["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .count();
        match steps.get(done) {
            Some((name, args)) => Reply::tool(&format!("call_{done}"), name, args),
            None => Reply::text("done"),
        }
    })
}

/// The tool results the model was given, in order.
fn tool_results(gw: &Gateway) -> Vec<String> {
    let requests = gw.provider.requests();
    let last = requests.last().unwrap();
    last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_file_sends_a_file_the_agent_wrote_as_a_document() {
    let gw = gateway(Setup {
        toolsets: "file,send_file",
        responder: calls(vec![
            (
                "write_file",
                json!({"path": "out/report.csv", "content": "a,b\n1,2\n"}).to_string(),
            ),
            (
                "send_file",
                json!({"path": "out/report.csv", "caption": "The report"}).to_string(),
            ),
        ]),
        ..Setup::default()
    })
    .await;
    gw.send(71, json!({"text": "make me the report"}));
    let sent = uploads(&gw, "sendDocument", 1).await;
    let document = part(&sent[0], "document");
    assert_eq!(document.file_name.as_deref(), Some("report.csv"));
    assert_eq!(document.data, b"a,b\n1,2\n");
    assert_eq!(
        document.content_type.as_deref(),
        Some("text/csv; charset=utf-8")
    );
    assert_eq!(part(&sent[0], "caption").data, b"The report");
    assert_eq!(gw.replies(1).await[0], "done");
    let results = tool_results(&gw);
    assert_eq!(
        results[1],
        "Sent 'out/report.csv' (8 bytes) as a document named report.csv with the caption \
         \"The report\" to this telegram chat."
    );
    gw.assert_clean();
    gw.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_file_refuses_what_is_outside_the_workspace_and_sends_nothing() {
    // The home's path is known once the gateway exists: the script is
    // filled in then.
    let steps = Arc::new(Mutex::new(Vec::new()));
    let gw = gateway(Setup {
        toolsets: "file,send_file",
        responder: calls_from(Arc::clone(&steps)),
        ..Setup::default()
    })
    .await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "not yours").unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        gw.work.path().join("link.txt"),
    )
    .unwrap();
    let env = gw.home.path().join(".env");
    std::fs::write(&env, "OPENAI_API_KEY=sk-never-sent\n").unwrap();
    for path in [
        "/etc/hostname".to_owned(),
        "../x".to_owned(),
        "link.txt".to_owned(),
        env.display().to_string(),
    ] {
        steps
            .lock()
            .unwrap()
            .push(("send_file", json!({ "path": path }).to_string()));
    }
    gw.send(81, json!({"text": "send me those"}));
    assert_eq!(gw.replies(1).await[0], "done");
    let results = tool_results(&gw);
    assert_eq!(results.len(), 4, "{results:#?}");
    for (result, path) in results
        .iter()
        .zip(["/etc/hostname", "../x", "link.txt", ".env"])
    {
        assert!(
            result.starts_with("Error:") && result.contains("outside the working directory"),
            "{path}: {result}"
        );
        assert!(!result.contains("sk-never-sent") && !result.contains("not yours"));
    }
    for method in ["sendDocument", "sendPhoto", "sendAudio", "sendVoice"] {
        assert!(gw.fake.uploads(method).is_empty(), "{method} was sent");
    }
    gw.assert_clean();
    gw.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_file_refuses_the_homes_secrets_even_from_a_workdir_holding_the_home() {
    let steps = Arc::new(Mutex::new(Vec::new()));
    let gw = gateway(Setup {
        toolsets: "file,send_file",
        responder: calls_from(Arc::clone(&steps)),
        home_in_workdir: true,
        ..Setup::default()
    })
    .await;
    std::fs::write(
        gw.home.path().join(".env"),
        "OPENAI_API_KEY=sk-never-sent\n",
    )
    .unwrap();
    let name = gw
        .home
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    steps.lock().unwrap().push((
        "send_file",
        json!({ "path": format!("{name}/.env") }).to_string(),
    ));
    gw.send(91, json!({"text": "send the env"}));
    assert_eq!(gw.replies(1).await[0], "done");
    let result = &tool_results(&gw)[0];
    assert!(
        result.starts_with("Error:") && result.contains("Hermes home directory"),
        "{result}"
    );
    assert!(gw.fake.uploads("sendDocument").is_empty());
    gw.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn voice_text_false_sends_the_voice_alone_unless_the_answer_was_cut() {
    let speech = SpeechService::start();
    let long = "This answer has many sentences. ".repeat(20);
    let answer_for = long.clone();
    let gw = gateway(Setup {
        config_toml: format!(
            "[tts]\nbase_url = \"{}\"\nmax_chars = 100\n[gateway]\nvoice_replies = \"always\"\nvoice_text = false\n",
            speech.base_url
        ),
        responder: Arc::new(move |request: &Value| {
            let text = request.to_string();
            if text.contains("tell me everything") {
                Reply::text(answer_for.clone())
            } else {
                Reply::text("Short and sweet.")
            }
        }),
        ..Setup::default()
    })
    .await;
    gw.send(101, json!({"text": "hi"}));
    let sent = uploads(&gw, "sendVoice", 1).await;
    assert_eq!(part(&sent[0], "voice").data, SPEECH);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        gw.fake.requests("sendMessage").is_empty(),
        "the voice alone"
    );
    assert_eq!(speech.requests()[0]["input"], "Short and sweet.");

    gw.send(102, json!({"text": "tell me everything"}));
    uploads(&gw, "sendVoice", 2).await;
    let texts = gw.replies(1).await;
    assert_eq!(
        texts[0].trim(),
        long.trim(),
        "cut short aloud: the text too"
    );
    let spoken = speech.requests()[1]["input"].as_str().unwrap().to_owned();
    assert!(
        spoken.len() <= 100 && spoken.ends_with("sentences."),
        "{spoken}"
    );
    gw.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_photo_over_telegrams_limit_is_refused_before_the_upload() {
    let gw = gateway(Setup {
        toolsets: "send_file",
        responder: calls(vec![("send_file", json!({"path": "huge.png"}).to_string())]),
        ..Setup::default()
    })
    .await;
    let mut png = telegram_gateway::PNG.to_vec();
    png.resize(10_000_001, 0);
    std::fs::write(gw.work.path().join("huge.png"), &png).unwrap();
    gw.send(111, json!({"text": "send the picture"}));
    assert_eq!(gw.replies(1).await[0], "done");
    let result = &tool_results(&gw)[0];
    assert!(
        result.contains("10000001 bytes") && result.contains("a photo of at most 10000000 bytes"),
        "{result}"
    );
    assert!(gw.fake.uploads("sendPhoto").is_empty());
    gw.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn voice_only_with_the_speech_service_down_sends_the_text_and_one_line() {
    let gw = gateway(Setup {
        config_toml: format!(
            "[tts]\nbase_url = \"{}\"\n[gateway]\nvoice_replies = \"always\"\nvoice_text = false\n",
            SpeechService::down()
        ),
        ..Setup::default()
    })
    .await;
    gw.send(121, json!({"text": "hi"}));
    let texts = gw.replies(2).await;
    assert_eq!(texts, ["I read your message.", VOICE_FAILED]);
    assert!(gw.fake.uploads("sendVoice").is_empty());
    gw.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_reply_is_finished_before_the_voice_note_follows() {
    let speech = SpeechService::start();
    let gw = gateway(Setup {
        config_toml: config(&speech.base_url),
        stream: true,
        responder: Arc::new(|_| Reply::text("Streamed, then spoken.")),
        ..Setup::default()
    })
    .await;
    gw.provider.set_transcription(Reply::text("Say it."));
    gw.fake.add_file("vo3", "voice/file_3.oga", OGG.to_vec());
    gw.send(131, voice("vo3"));
    let sent = uploads(&gw, "sendVoice", 1).await;
    assert_eq!(part(&sent[0], "voice").data, SPEECH);
    let voice_at = gw.fake.requests("sendVoice")[0].at;
    let texts: Vec<_> = gw
        .fake
        .requests("sendMessage")
        .into_iter()
        .chain(gw.fake.requests("editMessageText"))
        .collect();
    assert!(
        texts.iter().any(|r| r.body["text"]
            .as_str()
            .unwrap_or("")
            .contains("Streamed, then spoken.")),
        "{texts:?}"
    );
    assert!(
        texts.iter().all(|r| r.at < voice_at),
        "the text is done first"
    );
    gw.runner.shutdown().await;
}
