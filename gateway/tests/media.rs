//! Photos, voice notes and files through the whole gateway on Telegram
//! (SPEC X6): the Bot API fake (`telegram_support`: `getFile`, file
//! downloads), the production agent factory over the real store, and as the
//! provider the loopback `FakeProvider` (which checks every request, image
//! parts and transcription uploads included) or the third-party aimock
//! emulator. Every recorded chat request is also checked against the
//! published OpenAI request schema.
#![cfg(feature = "telegram")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::openai_schema;
use crate::telegram_gateway;
use crate::telegram_support;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_gateway::app::RuntimeAgentFactory;
use hermes_gateway::config::GatewayConfig;
use hermes_gateway::media::{NO_TRANSCRIPTION_NOTICE, NO_VISION_NOTICE};
use hermes_gateway::runner::{GatewayRunner, RunnerDeps};
use hermes_runtime::config::{Environment, Overrides};
use hermes_runtime::media::data_url;
use hermes_runtime::store::{Store, SystemClock};
use hermes_telegram::format::markdown_to_html;
use hermes_telegram::{MemoryOffsets, TelegramAdapter, TelegramConfig};
use hermes_tests::aimock::Aimock;
use hermes_tests::{Reply, Responder};
use openai_schema::assert_valid_requests;
use serde_json::{Value, json};
use telegram_gateway::{OGG, PNG, Setup, USER, WAIT, gateway, retry};
use telegram_support::{Fake, TOKEN};

fn photo(file_id: &str, size: usize, caption: &str) -> Value {
    let mut v = json!({"photo": [
        {"file_id": format!("{file_id}-thumb"), "file_unique_id": "t", "width": 1, "height": 1, "file_size": 10},
        {"file_id": file_id, "file_unique_id": "u", "width": 1, "height": 1, "file_size": size}]});
    if !caption.is_empty() {
        v["caption"] = json!(caption);
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_photo_reaches_a_vision_model_as_an_image_part_and_later_turns_as_a_reference() {
    let gw = gateway(Setup::default()).await;
    gw.fake.add_file("ph1", "photos/file_1.jpg", PNG.to_vec());
    gw.send(11, photo("ph1", PNG.len(), "what is in this photo"));
    let replies = gw.replies(1).await;
    assert_eq!(replies[0], "I read your message.");
    assert_eq!(gw.fake.downloads(), ["photos/file_1.jpg"]);
    let first = &gw.last_user_contents()[0];
    assert_eq!(
        *first,
        json!([
            {"type": "text", "text": "what is in this photo"},
            {"type": "image_url", "image_url": {"url": data_url("image/png", PNG)}},
        ]),
        "the caption, then the image"
    );
    // The file is kept under $HERMES_HOME/media/<session>/, private.
    let transcript = gw.transcript();
    let attachment = transcript[0].message.attachments()[0].clone();
    let file = gw.home.path().join("media").join(&attachment.path);
    assert_eq!(std::fs::read(&file).unwrap(), PNG);
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        attachment.path,
        format!("{}/telegram-11-0.png", gw.store_session_id())
    );

    // The next turn carries the photo as a line of text, not its bytes.
    gw.send(12, json!({"text": "and what colour is it?"}));
    gw.replies(2).await;
    let second = gw.provider.requests()[1].clone();
    let text = second.to_string();
    assert!(
        !text.contains("data:image"),
        "no image bytes after the turn: {text}"
    );
    assert!(
        second["messages"][1]["content"]
            .as_str()
            .unwrap()
            .contains("[Image telegram-11-0.png (image/png): not included"),
        "{second:#}"
    );
    gw.assert_clean();
    gw.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_photo_for_a_model_that_cannot_see_is_described_by_the_vision_model() {
    let responder: Responder = Arc::new(|request: &Value| {
        if request["model"] == "vision-test" {
            Reply::text("A single transparent pixel.")
        } else {
            Reply::text("It is a pixel, as described.")
        }
    });
    let gw = gateway(Setup {
        model: "hermes3",
        config_toml: "[provider]\nvision_model = \"vision-test\"\n".into(),
        responder,
        ..Setup::default()
    })
    .await;
    gw.fake.add_file("ph2", "photos/file_2.png", PNG.to_vec());
    gw.send(21, photo("ph2", PNG.len(), "what is this?"));
    assert_eq!(gw.replies(1).await[0], "It is a pixel, as described.");
    let requests = gw.provider.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    assert_eq!(requests[0]["model"], "vision-test");
    let parts = requests[0]["messages"][1]["content"].as_array().unwrap();
    assert!(parts[0]["text"].as_str().unwrap().contains("what is this?"));
    assert_eq!(parts[1]["image_url"]["url"], data_url("image/png", PNG));
    assert_eq!(requests[1]["model"], "hermes3");
    assert_eq!(
        requests[1]["messages"][1]["content"],
        "what is this?\n\n[Image telegram-21-0.png: A single transparent pixel.]"
    );
    // The description is stored with the attachment: later turns reuse it.
    let stored = gw.transcript()[0].message.attachments()[0].clone();
    assert_eq!(
        stored.description.as_deref(),
        Some("A single transparent pixel.")
    );
    gw.assert_clean();
    gw.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_photo_for_a_model_that_cannot_see_without_a_vision_model_is_explained() {
    let gw = gateway(Setup {
        model: "hermes3",
        ..Setup::default()
    })
    .await;
    gw.fake.add_file("ph3", "photos/file_3.png", PNG.to_vec());
    gw.send(31, photo("ph3", PNG.len(), "look"));
    let reply = &gw.replies(1).await[0];
    assert!(
        reply.starts_with(&markdown_to_html(NO_VISION_NOTICE)),
        "{reply}"
    );
    assert!(reply.ends_with("I read your message."), "{reply}");
    let content = gw.last_user_contents()[0].as_str().unwrap().to_owned();
    assert!(content.starts_with("look\n\n"), "{content}");
    assert!(
        content.contains("this model cannot see images"),
        "{content}"
    );
    gw.assert_clean();
    gw.runner.shutdown().await;
}

fn voice(file_id: &str) -> Value {
    json!({"voice": {"file_id": file_id, "file_unique_id": "v", "duration": 2,
                     "mime_type": "audio/ogg", "file_size": OGG.len()}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voice_note_is_transcribed_quoted_in_the_reply_and_answered() {
    let gw = gateway(Setup {
        config_toml: "[transcription]\nbase_url = \"{provider}\"\nmodel = \"whisper-1\"\n".into(),
        ..Setup::default()
    })
    .await;
    gw.provider
        .set_transcription(Reply::text("Please turn on the kitchen lights."));
    gw.fake.add_file("vo1", "voice/file_4.oga", OGG.to_vec());
    gw.send(41, voice("vo1"));
    let reply = &gw.replies(1).await[0];
    assert_eq!(
        reply,
        "🎤 “Please turn on the kitchen lights.”\n\nI read your message."
    );
    assert_eq!(
        gw.last_user_contents()[0],
        "Please turn on the kitchen lights.",
        "the transcript is the message text"
    );
    let uploads = gw.provider.transcriptions();
    assert_eq!(uploads.len(), 1);
    let file = uploads[0].iter().find(|f| f.name == "file").unwrap();
    assert_eq!(file.data, OGG);
    assert_eq!(file.content_type.as_deref(), Some("audio/ogg"));
    assert_eq!(file.file_name.as_deref(), Some("file_4.oga"));
    gw.assert_clean();
    gw.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voice_note_without_transcription_gets_a_one_line_answer_and_no_model_call() {
    let gw = gateway(Setup::default()).await;
    gw.fake.add_file("vo2", "voice/file_5.oga", OGG.to_vec());
    gw.send(51, voice("vo2"));
    assert_eq!(
        gw.replies(1).await[0],
        markdown_to_html(NO_TRANSCRIPTION_NOTICE)
    );
    assert!(gw.provider.requests().is_empty(), "the model is not called");
    // The message is kept, saying what happened.
    let transcript = gw.transcript();
    assert_eq!(transcript.len(), 1);
    assert!(
        transcript[0]
            .message
            .content()
            .unwrap()
            .contains("no transcription service is configured")
    );
    // The conversation goes on.
    gw.send(52, json!({"text": "ok, in text then"}));
    assert_eq!(gw.replies(2).await[1], "I read your message.");
    gw.assert_clean();
    gw.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voice_note_through_aimock_is_transcribed_and_answered() {
    hermes_tests::require!(Npm("aimock"));
    let mock = Aimock::start("media.json");
    let fake = Fake::start(true).await;
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "[transcription]\nbase_url = \"{}\"\nmodel = \"whisper-test\"\n",
            mock.base_url()
        ),
    )
    .unwrap();
    let env = Environment::from_pairs([
        ("HERMES_HOME", home.path().display().to_string()),
        ("HERMES_BASE_URL", mock.base_url()),
        ("HERMES_API_KEY", "sk-aimock-test".to_owned()),
        ("HERMES_MODEL", "gpt-4o".to_owned()),
        ("HERMES_TOOLSETS", "none".to_owned()),
    ]);
    let settings = hermes_runtime::config::load(
        &Overrides {
            workdir: Some(home.path().to_path_buf()),
            ..Overrides::default()
        },
        &env,
    )
    .unwrap();
    let mut config = GatewayConfig::default();
    config.allow.everywhere.insert(USER.to_string());
    let mut tg = TelegramConfig::new(TOKEN);
    tg.api_url = fake.base.clone();
    tg.poll_timeout_s = 2;
    tg.retry = retry();
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![Arc::new(
            TelegramAdapter::new(tg, Arc::new(MemoryOffsets::new())).unwrap(),
        )],
        factory: Arc::new(RuntimeAgentFactory::new(&settings, None).unwrap()),
        store: Arc::new(std::sync::Mutex::new(
            Store::open(&settings.state_db()).unwrap(),
        )),
        clock: Arc::new(SystemClock),
        config,
    });
    runner.start().await.unwrap();
    fake.add_file("vo3", "voice/file_6.oga", OGG.to_vec());
    fake.push_update(json!({"update_id": 1, "message": {
        "message_id": 61, "date": 0, "voice": {"file_id": "vo3", "mime_type": "audio/ogg"},
        "from": {"id": USER, "is_bot": false, "first_name": "Ann"},
        "chat": {"id": USER, "type": "private"}}}));
    let deadline = Instant::now() + WAIT;
    while fake.requests("sendMessage").is_empty() {
        assert!(
            Instant::now() < deadline,
            "no reply; aimock log:\n{}",
            mock.log.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reply = fake.requests("sendMessage")[0].body["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        reply,
        markdown_to_html(
            "🎤 “Please turn on the kitchen lights.”\n\nDone: the kitchen lights are on."
        )
    );
    assert_eq!(mock.transcription_requests().len(), 1);
    let chats: Vec<Value> = mock
        .chat_requests()
        .into_iter()
        .map(|e| e["body"].clone())
        .collect();
    assert_eq!(chats.len(), 1);
    assert_valid_requests(&chats);
    let last = chats[0]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["content"], "Please turn on the kitchen lights.");
    runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_is_saved_in_the_workdir_and_the_file_tools_read_it() {
    // The model reads the file it is told about, then answers with it.
    let responder: Responder = Arc::new(|request: &Value| {
        let messages = request["messages"].as_array().unwrap();
        let last = messages.last().unwrap();
        if last["role"] == "tool" {
            return Reply::text(format!(
                "The file says: {}",
                last["content"].as_str().unwrap_or("")
            ));
        }
        let text = last["content"].as_str().unwrap_or("");
        let Some(at) = text.find("saved in the working directory as \"") else {
            return Reply::text("no file?");
        };
        let rest = &text[at + "saved in the working directory as \"".len()..];
        let name = &rest[..rest.find('"').unwrap()];
        Reply::tool("call_1", "read_file", &json!({ "path": name }).to_string())
    });
    let gw = gateway(Setup {
        toolsets: "file",
        responder,
        ..Setup::default()
    })
    .await;
    std::fs::write(gw.work.path().join("notes.txt"), "the user's own notes").unwrap();
    gw.fake.add_file(
        "doc1",
        "documents/file_7.txt",
        b"remember the milk".to_vec(),
    );
    gw.send(
        71,
        json!({"caption": "keep this", "document": {"file_id": "doc1", "file_unique_id": "d",
               "file_name": "notes.txt", "mime_type": "text/plain", "file_size": 17}}),
    );
    let reply = &gw.replies(1).await[0];
    assert!(reply.contains("remember the milk"), "{reply}");
    assert_eq!(
        std::fs::read_to_string(gw.work.path().join("notes.txt")).unwrap(),
        "the user's own notes",
        "an existing file is never replaced"
    );
    assert_eq!(
        std::fs::read_to_string(gw.work.path().join("notes (1).txt")).unwrap(),
        "remember the milk"
    );
    let content = gw.last_user_contents()[0].as_str().unwrap().to_owned();
    assert!(content.starts_with("keep this\n\n"), "{content}");
    assert!(
        content.contains("\"notes (1).txt\" (17 bytes)"),
        "{content}"
    );
    gw.assert_clean();
    gw.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_media_gets_a_clear_answer_and_the_turn_still_runs() {
    let gw = gateway(Setup {
        config_toml: "[gateway]\nmax_file_mb = 1\n".into(),
        ..Setup::default()
    })
    .await;
    // Announced larger than [gateway] max_file_mb: not even fetched.
    gw.send(81, photo("huge", 30 * 1024 * 1024, "huge"));
    gw.replies(1).await;
    // Not an image at all (an error page where a photo should be).
    gw.fake.add_file(
        "corrupt",
        "photos/file_9.jpg",
        b"<html>502 Bad Gateway</html>".to_vec(),
    );
    gw.send(82, photo("corrupt", 28, "corrupt"));
    gw.replies(2).await;
    // Telegram does not know the file.
    gw.send(83, photo("missing", 100, "missing"));
    let replies = gw.replies(3).await;
    assert!(
        replies[0].contains("⚠️ I could not get your photo: it is 30.0 MB, more than the 1.0 MB"),
        "{}",
        replies[0]
    );
    assert!(
        replies[1].contains("⚠️ I could not use your photo: the file is not a JPEG, PNG, GIF or WebP image (it may be corrupt)."),
        "{}",
        replies[1]
    );
    assert!(
        replies[2]
            .contains("⚠️ I could not get your photo: HTTP 400: Bad Request: invalid file_id."),
        "{}",
        replies[2]
    );
    for r in &replies {
        assert!(r.ends_with("I read your message."), "the turn ran: {r}");
    }
    assert!(
        !gw.fake.downloads().iter().any(|d| d.contains("huge")),
        "the oversized file was not downloaded"
    );
    let contents = gw.last_user_contents();
    assert_eq!(contents.len(), 3);
    assert!(
        contents[0]
            .as_str()
            .unwrap()
            .contains("could not be downloaded")
    );
    assert!(contents[1].as_str().unwrap().contains("could not be used"));
    gw.assert_clean();
    gw.runner.shutdown().await;
}

/// A download that fails at the file server: the path `getFile` gives is
/// not served (404).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_download_is_answered_without_the_token() {
    let gw = gateway(Setup::default()).await;
    gw.fake.add_file("ph9", "photos/file_11.jpg", PNG.to_vec());
    gw.fake.serve_file_as("ph9", "photos/not-there.jpg");
    gw.send(91, photo("ph9", PNG.len(), "and this?"));
    let reply = &gw.replies(1).await[0];
    assert!(
        reply.contains("⚠️ I could not get your photo: the download failed with HTTP 404."),
        "{reply}"
    );
    assert!(
        !reply.contains(TOKEN) && !reply.contains("SECRET"),
        "{reply}"
    );
    assert!(reply.ends_with("I read your message."), "{reply}");
    gw.assert_clean();
    gw.runner.shutdown().await;
}
