//! Media (SPEC X6) in the runtime: image files under `$HERMES_HOME/media`,
//! documents in the working directory, the images a request carries
//! (against the scripted server, which checks every image part, and the
//! published request schema), descriptions from a vision model and
//! transcription — against our scripted server (which parses the multipart
//! upload) and the third-party `@copilotkit/aimock` emulator.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use hermes_core::{Attachment, ChatRequest, LedgerEntry, Message, Model, NullSink};
use hermes_runtime::client::{ClientOptions, OpenAiClient};
use hermes_runtime::media::TranscriptionSettings;
use hermes_runtime::media::documents::save_document;
use hermes_runtime::media::transcribe::{TranscribeError, Transcriber};
use hermes_runtime::media::vision::describe;
use hermes_runtime::media::{MAX_IMAGE_BYTES, MediaDir, MediaError};
use hermes_runtime::store::{NewSession, Store};
use hermes_tests::aimock::Aimock;
use serde_json::{Value, json};
use support::{Reply, ScriptedServer, closed_port, multipart_fields, within};

/// A real 1×1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1F, 0x15, 0xC4,
    0x89, 0x00, 0x00, 0x00, 0x0A, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9C, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0D, 0x0A, 0x2D, 0xB4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4E, 0x44, 0xAE,
    0x42, 0x60, 0x82,
];

const GUARD: Duration = Duration::from_secs(90);

const REQUEST_SCHEMA: &str =
    include_str!("../../tests/fixtures/openai-schemas/chat_completion_request.schema.json");
const REQUEST_STREAMING_SCHEMA: &str = include_str!(
    "../../tests/fixtures/openai-schemas/chat_completion_request_streaming.schema.json"
);

fn assert_valid_request(body: &Value) {
    let schema = if body["stream"] == json!(true) {
        REQUEST_STREAMING_SCHEMA
    } else {
        REQUEST_SCHEMA
    };
    let schema: Value = serde_json::from_str(schema).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(body)
        .map(|e| format!("{e} at {}", e.instance_path))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}\n{body:#}");
}

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn images_are_stored_private_beneath_the_media_directory_and_read_back() {
    let home = tempfile::tempdir().unwrap();
    let media = MediaDir::in_home(home.path());
    let a = media.store_image("sess-1", "m42-0", PNG).unwrap();
    assert_eq!(a.path, "sess-1/m42-0.png");
    assert_eq!(a.media_type, "image/png");
    assert_eq!(a.bytes, PNG.len() as u64);
    let file = home.path().join("media/sess-1/m42-0.png");
    assert_eq!(mode(&file), 0o600);
    assert_eq!(mode(&home.path().join("media/sess-1")), 0o700);
    assert_eq!(mode(&home.path().join("media")), 0o700);
    assert_eq!(media.read(&a, MAX_IMAGE_BYTES).unwrap(), PNG);
    // Stored again (a message processed again after a restart): one file.
    media.store_image("sess-1", "m42-0", PNG).unwrap();
    let names: Vec<_> = std::fs::read_dir(home.path().join("media/sess-1"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["m42-0.png"]);
    // Hostile parts of a name become one harmless component.
    let b = media.store_image("../../etc", "../x", PNG).unwrap();
    assert_eq!(b.path, "_.._etc/_x.png");
    assert!(home.path().join("media/_.._etc/_x.png").is_file());
}

#[test]
fn what_is_not_an_image_or_is_too_large_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let media = MediaDir::in_home(home.path());
    let err = media
        .store_image("s", "m", b"<html>error page</html>")
        .unwrap_err();
    assert!(matches!(err, MediaError::NotAnImage), "{err}");
    assert!(err.to_string().contains("not a JPEG, PNG, GIF or WebP"));
    let mut huge = vec![0u8; MAX_IMAGE_BYTES as usize + 1];
    huge[..3].copy_from_slice(&[0xFF, 0xD8, 0xFF]);
    let err = media.store_image("s", "m", &huge).unwrap_err();
    assert!(matches!(err, MediaError::TooLarge { .. }), "{err}");
    assert!(
        !home.path().join("media/s").exists()
            || std::fs::read_dir(home.path().join("media/s"))
                .unwrap()
                .next()
                .is_none()
    );
}

#[test]
fn a_reference_that_climbs_out_of_the_media_directory_is_refused() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join(".env"), "HERMES_API_KEY=sk-secret").unwrap();
    let media = MediaDir::in_home(home.path());
    media.store_image("s", "ok", PNG).unwrap();
    std::os::unix::fs::symlink(
        home.path().join(".env"),
        home.path().join("media/s/link.png"),
    )
    .unwrap();
    for path in ["../.env", "/etc/passwd", "s/../../.env", "s/link.png", ""] {
        let tampered = Attachment::image("image/png", path, 10);
        let err = media.read(&tampered, MAX_IMAGE_BYTES).unwrap_err();
        let text = err.to_string();
        assert!(!text.contains("sk-secret"), "{text}");
        assert!(
            matches!(err, MediaError::BadReference(_) | MediaError::Io { .. }),
            "{path}: {err}"
        );
    }
}

#[test]
fn documents_are_saved_in_the_workdir_never_overwriting_and_never_outside() {
    let root = tempfile::tempdir().unwrap();
    let workdir = root.path().join("work");
    std::fs::create_dir(&workdir).unwrap();
    std::fs::write(workdir.join("report.pdf"), b"the user's own report").unwrap();
    let outside = root.path().join("outside.txt");
    std::fs::write(&outside, b"not yours").unwrap();
    std::os::unix::fs::symlink(&outside, workdir.join("notes.txt")).unwrap();

    let saved = save_document(&workdir, "report.pdf", b"%PDF-1.7 new").unwrap();
    assert_eq!(saved.name, "report (1).pdf");
    assert_eq!(
        std::fs::read(workdir.join("report.pdf")).unwrap(),
        b"the user's own report"
    );
    assert_eq!(std::fs::read(&saved.path).unwrap(), b"%PDF-1.7 new");
    assert_eq!(mode(&saved.path), 0o600);
    let again = save_document(&workdir, "report.pdf", b"%PDF third").unwrap();
    assert_eq!(again.name, "report (2).pdf");

    // A symlink already at the name is neither followed nor replaced.
    let through_link = save_document(&workdir, "notes.txt", b"sent").unwrap();
    assert_eq!(through_link.name, "notes (1).txt");
    assert_eq!(std::fs::read(&outside).unwrap(), b"not yours");

    for hostile in [
        "../../escape.txt",
        "/etc/cron.d/x",
        "..",
        ".hidden",
        "a/../../b.sh",
    ] {
        let s = save_document(&workdir, hostile, b"x").unwrap();
        assert_eq!(
            s.path.parent().unwrap(),
            std::fs::canonicalize(&workdir).unwrap()
        );
        assert!(!s.name.starts_with('.'), "{}", s.name);
    }
    assert!(!root.path().join("escape.txt").exists());
    // No temp file is left behind.
    assert!(
        std::fs::read_dir(&workdir).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains(".part-"))
    );
}

fn client(base: &str, images: Option<MediaDir>, stream: bool) -> OpenAiClient {
    OpenAiClient::new(ClientOptions {
        base_url: base.to_owned(),
        api_key: None,
        model: "gpt-4o".into(),
        stream,
        images,
        backoff_base: Duration::from_millis(5),
        ..ClientOptions::default()
    })
    .unwrap()
}

fn ask(client: &OpenAiClient, entries: &[LedgerEntry]) {
    let request = ChatRequest {
        system_prompt: "sys",
        messages: entries,
        tools: &[],
        tool_choice: hermes_core::ToolChoice::Auto,
    };
    client.complete(&request, &mut NullSink).unwrap();
}

#[test]
fn the_client_sends_this_turns_images_as_parts_and_older_ones_as_references() {
    let home = tempfile::tempdir().unwrap();
    let media = MediaDir::in_home(home.path());
    let old = media.store_image("s", "old", PNG).unwrap();
    let new = media.store_image("s", "new", PNG).unwrap();
    let entries = vec![
        LedgerEntry::new(Message::user_with("first photo", vec![old])),
        LedgerEntry::new(Message::assistant("a pixel")),
        LedgerEntry::new(Message::user_with("and this one?", vec![new])),
    ];
    for stream in [false, true] {
        let reply = if stream {
            Reply::text_stream(&["ok"])
        } else {
            Reply::text_body("ok")
        };
        let server = ScriptedServer::openai(None, vec![reply]);
        let c = client(&server.base_url(), Some(media.clone()), stream);
        let e = entries.clone();
        within(GUARD, move || ask(&c, &e));
        server.assert_clean();
        let body = server.requests()[0].json();
        assert_valid_request(&body);
        let messages = body["messages"].as_array().unwrap();
        let first = messages[1]["content"].as_str().unwrap();
        assert!(
            first.contains("[Image old.png (image/png): not included"),
            "{first}"
        );
        let parts = messages[3]["content"].as_array().unwrap();
        assert_eq!(parts[0], json!({"type": "text", "text": "and this one?"}));
        let url = parts[1]["image_url"]["url"].as_str().unwrap();
        assert_eq!(url, hermes_runtime::media::data_url("image/png", PNG));
    }
}

#[test]
fn a_model_without_vision_gets_references_and_a_missing_file_goes_as_its_reference() {
    let home = tempfile::tempdir().unwrap();
    let media = MediaDir::in_home(home.path());
    let mut described = media.store_image("s", "cat", PNG).unwrap();
    described.description = Some("A grey cat.".into());
    let entries = vec![LedgerEntry::new(Message::user_with(
        "look",
        vec![described.clone()],
    ))];
    let server = ScriptedServer::openai(None, vec![Reply::text_body("ok")]);
    let c = client(&server.base_url(), None, false);
    let e = entries.clone();
    within(GUARD, move || ask(&c, &e));
    server.assert_clean();
    let body = server.requests()[0].json();
    assert_valid_request(&body);
    assert_eq!(
        body["messages"][1]["content"],
        "look\n\n[Image cat.png: A grey cat.]"
    );

    std::fs::remove_file(home.path().join("media/s/cat.png")).unwrap();
    let server = ScriptedServer::openai(None, vec![Reply::text_body("ok")]);
    let c = client(&server.base_url(), Some(media), false);
    within(GUARD, move || ask(&c, &entries));
    server.assert_clean();
    let body = server.requests()[0].json();
    assert_eq!(
        body["messages"][1]["content"],
        "look\n\n[Image cat.png: A grey cat.]"
    );
}

fn transcription(base_url: &str, model: &str) -> TranscriptionSettings {
    TranscriptionSettings {
        base_url: base_url.to_owned(),
        api_key: Some("sk-whisper".into()),
        model: model.to_owned(),
        language: Some("en".into()),
        timeout: Duration::from_secs(30),
    }
}

#[test]
fn transcription_is_a_multipart_upload_of_the_audio_and_returns_the_text() {
    let server = ScriptedServer::openai(
        Some("sk-whisper"),
        vec![Reply::json(r#"{"text": "  hello from the voice note  "}"#)],
    );
    let t = Transcriber::new(transcription(&server.base_url(), "whisper-1"));
    let text = within(GUARD, move || {
        t.transcribe(b"OggS\x00\x02voice-bytes", "voice.ogg", "audio/ogg")
    })
    .unwrap();
    server.assert_clean();
    assert_eq!(text, "hello from the voice note");
    let request = &server.requests()[0];
    assert_eq!(request.path, "/v1/audio/transcriptions");
    let fields = multipart_fields(request);
    let field = |n: &str| fields.iter().find(|f| f.name == n).unwrap();
    assert_eq!(field("file").data, b"OggS\x00\x02voice-bytes");
    assert_eq!(field("file").file_name.as_deref(), Some("voice.ogg"));
    assert_eq!(field("file").content_type.as_deref(), Some("audio/ogg"));
    assert_eq!(field("model").data, b"whisper-1");
    assert_eq!(field("response_format").data, b"json");
    assert_eq!(field("language").data, b"en");
}

#[test]
fn transcription_failures_say_what_went_wrong_without_the_key() {
    let server = ScriptedServer::openai(
        Some("sk-whisper"),
        vec![
            Reply::error(401, "Incorrect API key provided"),
            Reply::json(r#"{"text": "   "}"#),
            Reply::json("not json"),
        ],
    );
    let t = Transcriber::new(transcription(&server.base_url(), "whisper-1"));
    let results = within(GUARD, move || {
        (0..3)
            .map(|_| t.transcribe(b"RIFFxxxxWAVE", "a.wav", "audio/wav"))
            .collect::<Vec<_>>()
    });
    server.assert_clean();
    let err = results[0].as_ref().unwrap_err();
    assert!(
        matches!(err, TranscribeError::Status { status: 401, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("Incorrect API key provided"),
        "{err}"
    );
    assert!(matches!(results[1], Err(TranscribeError::Empty)));
    assert!(matches!(results[2], Err(TranscribeError::Protocol(_))));

    let port = closed_port();
    let mut settings = transcription(&format!("http://user:pw@127.0.0.1:{port}/v1"), "whisper-1");
    settings.timeout = Duration::from_secs(5);
    let t = Transcriber::new(settings);
    let err = within(GUARD, move || t.transcribe(b"x", "a.ogg", "audio/ogg")).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, TranscribeError::Network { .. }), "{text}");
    assert!(
        !text.contains("pw") && !text.contains("sk-whisper"),
        "{text}"
    );
}

#[test]
fn transcription_and_image_descriptions_through_aimock() {
    hermes_tests::require!(Npm("aimock"));
    let mock = Aimock::start("media.json");
    let t = Transcriber::new(transcription(&mock.base_url(), "whisper-test"));
    let text = within(GUARD, move || {
        t.transcribe(b"OggS\x00\x02voice", "voice.ogg", "audio/ogg")
    })
    .unwrap();
    assert_eq!(text, "Please turn on the kitchen lights.");
    let t = Transcriber::new(transcription(&mock.base_url(), "whisper-broken"));
    let err = within(GUARD, move || {
        t.transcribe(b"OggS", "voice.ogg", "audio/ogg")
    })
    .unwrap_err();
    assert!(
        matches!(err, TranscribeError::Status { status: 503, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("overloaded"), "{err}");

    let home = tempfile::tempdir().unwrap();
    let media = MediaDir::in_home(home.path());
    let image = media.store_image("s", "m1-0", PNG).unwrap();
    let vision = OpenAiClient::new(ClientOptions {
        base_url: mock.base_url(),
        api_key: Some("sk-aimock".into()),
        model: "vision-test".into(),
        stream: false,
        images: Some(media),
        ..ClientOptions::default()
    })
    .unwrap();
    let description = within(GUARD, move || {
        describe(&vision, &image, "what is in this photo")
    })
    .unwrap();
    assert_eq!(
        description,
        "A single transparent pixel on an empty background."
    );
    let requests = mock.chat_requests();
    assert_eq!(requests.len(), 1, "{requests:#?}");
    let body = &requests[0]["body"];
    assert_valid_request(body);
    let parts = body["messages"][1]["content"].as_array().unwrap();
    assert!(
        parts[0]["text"]
            .as_str()
            .unwrap()
            .contains("what is in this photo")
    );
    assert_eq!(
        parts[1]["image_url"]["url"],
        hermes_runtime::media::data_url("image/png", PNG)
    );
}

#[test]
fn attachments_are_stored_with_their_message_and_come_back_in_the_view() {
    let home = tempfile::tempdir().unwrap();
    let mut store = Store::open(&home.path().join("state.db")).unwrap();
    let id = store.create_session(&NewSession::default()).unwrap().id;
    let mut a = Attachment::image("image/png", format!("{id}/m1-0.png"), 70);
    a.description = Some("a pixel".into());
    let entries = [
        LedgerEntry::at(Message::user_with("look", vec![a]), 1),
        LedgerEntry::at(Message::assistant("nice"), 2),
        LedgerEntry::at(Message::user("plain"), 3),
    ];
    store.append_messages(&id, &entries).unwrap();
    drop(store);
    let store = Store::open(&home.path().join("state.db")).unwrap();
    assert_eq!(store.load_transcript(&id).unwrap(), entries);
    assert_eq!(store.load_view(&id).unwrap(), entries);
}
