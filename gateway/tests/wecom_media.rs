//! Photos and streamed replies through the whole gateway on WeCom (SPEC X6):
//! the AI-bot adapter against the loopback WeCom fake (`wecom_support`:
//! images served AES-256-CBC encrypted at the message's URL, `stream`
//! reply frames checked and recorded), the callback adapter against the
//! qyapi fake (`media/get`), the production agent factory over the real
//! store, and the loopback `FakeProvider` as the model. Every recorded chat
//! request is checked against the published OpenAI request schema.
#![cfg(all(feature = "wecom", feature = "wecom_callback"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::openai_schema;
use crate::wecom_callback_support;
use crate::wecom_support;

use std::sync::Arc;
use std::time::Duration;

use hermes_gateway::adapter::PlatformAdapter;
use hermes_gateway::app::RuntimeAgentFactory;
use hermes_gateway::config::GatewayConfig;
use hermes_gateway::runner::{GatewayRunner, RunnerDeps};
use hermes_gateway_testing::ManualClock;
use hermes_runtime::config::{Environment, Overrides, Settings};
use hermes_runtime::media::data_url;
use hermes_runtime::store::{Store, SystemClock};
use hermes_tests::{FakeProvider, Reply, Responder};
use hermes_wecom::media::{CONTINUED_NOTE, decrypt_media};
use hermes_wecom::{WecomAdapter, WecomConfig};
use hermes_wecom_callback::{WecomCallbackAdapter, WecomCallbackConfig};
use openai_schema::assert_valid_requests;
use serde_json::{Value, json};
use wecom_support::{Behaviour, Chat, FakeWecom, FileReply, aeskey, encrypt_file};

/// A real 1×1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1F, 0x15, 0xC4,
    0x89, 0x00, 0x00, 0x00, 0x0A, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9C, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0D, 0x0A, 0x2D, 0xB4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4E, 0x44, 0xAE,
    0x42, 0x60, 0x82,
];

const USER: &str = "alice";
const ANSWER: &str = "I read your message.";

/// The runtime's settings over a fresh home and workdir, the model at
/// `provider`.
fn settings(
    provider: &FakeProvider,
    home: &tempfile::TempDir,
    work: &tempfile::TempDir,
) -> Settings {
    settings_with(provider, home, work, "gpt-4o", "")
}

/// The same with model `model` and `config.toml` (`{provider}`: the
/// provider's URL).
fn settings_with(
    provider: &FakeProvider,
    home: &tempfile::TempDir,
    work: &tempfile::TempDir,
    model: &str,
    config_toml: &str,
) -> Settings {
    std::fs::write(
        home.path().join("config.toml"),
        config_toml.replace("{provider}", &provider.base_url()),
    )
    .unwrap();
    let env = Environment::from_pairs([
        ("HERMES_HOME", home.path().display().to_string()),
        ("HERMES_BASE_URL", provider.base_url()),
        ("HERMES_MODEL", model.to_owned()),
        ("HERMES_TOOLSETS", "todo".to_owned()),
    ]);
    hermes_runtime::config::load(
        &Overrides {
            workdir: Some(work.path().to_path_buf()),
            ..Overrides::default()
        },
        &env,
    )
    .unwrap()
}

/// The gateway over `adapter` with the production agent factory.
async fn runner(
    settings: &Settings,
    adapter: Arc<dyn PlatformAdapter>,
    stream: bool,
) -> GatewayRunner {
    let mut config =
        GatewayConfig::from_settings(settings, hermes_gateway::platform::platforms()).unwrap();
    config.allow.everywhere.insert(USER.to_owned());
    config.stream_replies = stream;
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![adapter],
        factory: Arc::new(RuntimeAgentFactory::new(settings, None).unwrap()),
        store: Arc::new(std::sync::Mutex::new(
            Store::open(&settings.state_db()).unwrap(),
        )),
        clock: Arc::new(SystemClock),
        config,
    });
    runner.start().await.unwrap();
    runner
}

/// The AI bot through the gateway.
struct Bot {
    fake: FakeWecom,
    provider: FakeProvider,
    home: tempfile::TempDir,
    _work: tempfile::TempDir,
    settings: Settings,
    runner: GatewayRunner,
}

async fn bot(stream: bool, responder: Responder) -> Bot {
    let fake = FakeWecom::start(Behaviour::default()).await;
    let provider = FakeProvider::start_with(vec![], None, Some(responder)).unwrap();
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let settings = settings(&provider, &home, &work);
    let adapter = WecomAdapter::new(WecomConfig {
        ws_url: fake.url.clone(),
        fragment_wait: Duration::from_millis(50),
        fragment_max_wait: Duration::from_millis(200),
        ..WecomConfig::new("bot-1", "s3cr3t-value")
    });
    let runner = runner(&settings, Arc::new(adapter), stream).await;
    Bot {
        fake,
        provider,
        home,
        _work: work,
        settings,
        runner,
    }
}

fn answer() -> Responder {
    Arc::new(|_| Reply::text(ANSWER))
}

/// The last user message's content of every chat request.
fn last_user_contents(provider: &FakeProvider) -> Vec<Value> {
    provider
        .requests()
        .iter()
        .map(|r| {
            r["messages"]
                .as_array()
                .unwrap()
                .iter()
                .rev()
                .find(|m| m["role"] == "user")
                .unwrap()["content"]
                .clone()
        })
        .collect()
}

/// The data URLs of a content's image parts.
fn image_urls(content: &Value) -> Vec<String> {
    content
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter(|p| p["type"] == "image_url")
                .map(|p| p["image_url"]["url"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

impl Bot {
    fn assert_clean(&self) {
        self.fake.assert_clean();
        assert!(
            self.provider.violations().is_empty(),
            "{:?}",
            self.provider.violations()
        );
        assert_valid_requests(&self.provider.requests());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_photo_from_the_ai_bot_reaches_the_model_as_an_image_part() {
    let b = bot(true, answer()).await;
    let key = aeskey(1);
    let encrypted = encrypt_file(PNG, &key);
    assert_ne!(encrypted, PNG);
    let url = b
        .fake
        .serve_file("/file/img-1?sign=abc", FileReply::Bytes(encrypted));
    b.fake.push_image("cb-1", "m-1", USER, &url, &key);
    assert_eq!(b.fake.reply_to("cb-1").await, ANSWER);
    assert_eq!(b.fake.downloads(), ["/file/img-1?sign=abc"]);
    let content = &last_user_contents(&b.provider)[0];
    assert_eq!(
        image_urls(content),
        [data_url("image/png", PNG)],
        "the decrypted image, as a part: {content:#}"
    );
    // Stored under $HERMES_HOME/media/<session>/, decrypted.
    let store = Store::open(&b.settings.state_db()).unwrap();
    let session = &store.list_sessions(1).unwrap()[0];
    let transcript = store.load_transcript(&session.id).unwrap();
    let attachment = transcript[0].message.attachments()[0].clone();
    assert!(attachment.path.starts_with(&format!("{}/", session.id)));
    assert_eq!(
        std::fs::read(b.home.path().join("media").join(&attachment.path)).unwrap(),
        PNG
    );

    // A mixed message: its text is the caption, its image a part.
    b.fake.push(json!({
        "cmd": "aibot_msg_callback", "headers": {"req_id": "cb-2"},
        "body": {"msgid": "m-2", "aibotid": "bot-1", "chattype": "single",
                 "from": {"userid": USER}, "msgtype": "mixed",
                 "mixed": {"msg_item": [
                     {"msgtype": "text", "text": {"content": "what is this?"}},
                     {"msgtype": "image", "image": {"url": b.fake.serve_file(
                         "/file/img-2", FileReply::Bytes(encrypt_file(PNG, &aeskey(2)))),
                         "aeskey": aeskey(2)}}]}}
    }));
    assert_eq!(b.fake.reply_to("cb-2").await, ANSWER);
    let content = &last_user_contents(&b.provider)[1];
    assert_eq!(
        content[0],
        json!({"type": "text", "text": "what is this?"}),
        "{content:#}"
    );
    assert_eq!(image_urls(content), [data_url("image/png", PNG)]);
    let text = b.provider.requests()[1].to_string();
    assert_eq!(
        text.matches("data:image").count(),
        1,
        "the first photo goes as a reference, not again as bytes: {text}"
    );
    b.assert_clean();
    b.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_ai_bot_media_gets_a_clear_answer_and_the_turn_still_runs() {
    let b = bot(true, answer()).await;
    let key = aeskey(3);
    let encrypted = encrypt_file(PNG, &key);
    let mut damaged = encrypted.clone();
    damaged[3] ^= 0x55;
    let cases: Vec<(FileReply, String, &str)> = vec![
        // Encrypted with another key than the message names.
        (
            FileReply::Bytes(encrypt_file(PNG, &aeskey(4))),
            key.clone(),
            "⚠️ I could not get your photo: the file does not decrypt with its key (wrong key or damaged file).",
        ),
        // Cut to a length no AES-CBC file has.
        (
            FileReply::Bytes(encrypted[..40].to_vec()),
            key.clone(),
            "⚠️ I could not get your photo: the encrypted file is 40 bytes, not a whole number of AES blocks.",
        ),
        // Damaged in its first block: it decrypts, to something that is
        // no image.
        (
            FileReply::Bytes(damaged),
            key.clone(),
            "⚠️ I could not use your photo:",
        ),
        // The file server fails.
        (
            FileReply::Status(500),
            key.clone(),
            "⚠️ I could not get your photo: the download failed with HTTP 500.",
        ),
        // The transfer breaks off.
        (
            FileReply::CutShort(encrypted.clone(), 20),
            key.clone(),
            "⚠️ I could not get your photo: the download failed:",
        ),
        // The key is no key.
        (
            FileReply::Bytes(encrypted.clone()),
            "not-a-key".to_owned(),
            "⚠️ I could not get your photo: the file's key is not a 32-byte base64 key.",
        ),
    ];
    for (n, (reply, key, expected)) in cases.into_iter().enumerate() {
        let url = b
            .fake
            .serve_file(&format!("/file/bad-{n}?access=SECRETSIGN"), reply);
        let req_id = format!("cb-bad-{n}");
        b.fake
            .push_image(&req_id, &format!("m-bad-{n}"), USER, &url, &key);
        let reply = b.fake.reply_to(&req_id).await;
        assert!(reply.starts_with(expected), "case {n}: {reply}");
        assert!(
            reply.ends_with(&format!("\n\n{ANSWER}")),
            "case {n}: the turn ran: {reply}"
        );
        assert!(
            !reply.contains("SECRETSIGN") && !reply.contains("127.0.0.1"),
            "case {n}: the URL leaked: {reply}"
        );
        // The model was told, and saw no image.
        let content = &last_user_contents(&b.provider)[n];
        assert!(image_urls(content).is_empty(), "case {n}: {content:#}");
        let text = content.as_str().unwrap();
        assert!(
            text.contains("[The user sent a photo") && text.contains("could not"),
            "case {n}: {text}"
        );
    }
    assert_eq!(b.provider.requests().len(), 6);
    b.assert_clean();
    b.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_reply_arrives_as_ordered_stream_frames_with_one_id_and_the_whole_text_last() {
    let pieces: Vec<String> = [
        "**Counting**:",
        " one",
        ", two",
        ", three",
        ", four",
        ", five.",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let whole = pieces.concat();
    let slow = pieces.clone();
    let b = bot(
        true,
        Arc::new(move |_| Reply::SlowText {
            pieces: slow.clone(),
            delay: Duration::from_millis(900),
        }),
    )
    .await;
    b.fake.push_text(
        "cb-s",
        "m-s",
        Chat {
            user: USER,
            group: None,
        },
        "count to five",
    );
    assert_eq!(b.fake.reply_to("cb-s").await, whole);
    let stream = b.fake.stream("cb-s").expect("the reply streamed");
    let frames = &stream.frames;
    assert!(frames.len() >= 3, "previews, then the whole: {frames:#?}");
    assert!(stream.id.starts_with("stream"), "{}", stream.id);
    let (last, previews) = frames.split_last().unwrap();
    assert!(last.finish, "the last frame finishes");
    assert_eq!(last.content, whole, "the last frame is the whole reply");
    assert!(previews.iter().all(|f| !f.finish), "{frames:#?}");
    for w in previews.windows(2) {
        assert!(
            w[1].content.starts_with(&w[0].content) && w[1].at >= w[0].at,
            "out of order: {w:#?}"
        );
    }
    for p in previews {
        assert!(
            whole.starts_with(&p.content),
            "{p:?} is no start of the reply"
        );
    }
    // One reply: nothing else went to the chat.
    assert!(b.fake.received_cmd("aibot_send_msg").is_empty());
    assert_eq!(b.fake.received_cmd("aibot_respond_msg").len(), frames.len());
    b.assert_clean();
    b.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_reply_too_long_for_one_frame_ends_its_stream_and_follows_as_messages() {
    let pieces: Vec<String> = (0..6)
        .map(|i| format!("Paragraph {i}: {}\n\n", "lorem ipsum dolor ".repeat(220)))
        .collect();
    let whole = pieces.concat();
    assert!(whole.len() > 20480);
    let slow = pieces.clone();
    let b = bot(
        true,
        Arc::new(move |_| Reply::SlowText {
            pieces: slow.clone(),
            delay: Duration::from_millis(500),
        }),
    )
    .await;
    b.fake.push_text(
        "cb-l",
        "m-l",
        Chat {
            user: USER,
            group: None,
        },
        "write a lot",
    );
    let ended = b.fake.reply_to("cb-l").await;
    assert!(ended.ends_with(CONTINUED_NOTE), "{ended}");
    let plain: String = whole.split_whitespace().collect();
    b.fake
        .wait_until("the whole reply in messages", |r| {
            let sent: String = r
                .iter()
                .filter(|f| f.cmd == "aibot_send_msg")
                .map(|f| {
                    f.frame["body"]["markdown"]["content"]
                        .as_str()
                        .unwrap_or("")
                })
                .collect::<Vec<_>>()
                .concat();
            sent.split_whitespace().collect::<String>() == plain
        })
        .await;
    let stream = b.fake.stream("cb-l").unwrap();
    assert!(stream.finished());
    assert!(stream.frames.iter().all(|f| f.content.len() <= 20480));
    b.assert_clean();
    b.runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_streaming_off_the_ai_bot_answers_with_one_markdown_reply() {
    let b = bot(
        false,
        Arc::new(|_| Reply::SlowText {
            pieces: vec!["slow".into(), " answer".into()],
            delay: Duration::from_millis(1200),
        }),
    )
    .await;
    b.fake.push_text(
        "cb-o",
        "m-o",
        Chat {
            user: USER,
            group: None,
        },
        "hi",
    );
    assert_eq!(b.fake.reply_to("cb-o").await, "slow answer");
    assert!(b.fake.stream("cb-o").is_none());
    b.assert_clean();
    b.runner.shutdown().await;
}

/// WeCom's file encryption as the fake does it is what the adapter
/// decrypts, and matches an independent implementation: Node's OpenSSL
/// AES-256-CBC with the key parsed as `@wecom/crypto` parses keys
/// (`tests/emulators/wecom-crypto/crypto.js`, op `encrypt_file`).
#[test]
fn the_fakes_file_encryption_is_wecoms_and_the_adapter_decrypts_it() {
    hermes_tests::require!(Npm("wecom-crypto"));
    use base64::Engine as _;
    hermes_tests::tier::expect(hermes_tests::tier::Component::Npm("wecom-crypto"));
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/emulators/wecom-crypto");
    assert!(
        dir.join("node_modules/@wecom/crypto").is_dir(),
        "WeCom's crypto library is not installed: run `npm ci --prefix tests/emulators/wecom-crypto` \
         (Node.js and npm needed)"
    );
    let plain: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    let key = aeskey(9);
    let request = json!({
        "op": "encrypt_file",
        "key": key,
        "data": base64::engine::general_purpose::STANDARD.encode(&plain),
    });
    let mut child = std::process::Command::new("node")
        .arg(dir.join("crypto.js"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("node runs (install Node.js)");
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "{request}").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    let node = base64::engine::general_purpose::STANDARD
        .decode(answer["encrypted"].as_str().unwrap())
        .unwrap();
    assert_eq!(
        node,
        encrypt_file(&plain, &key),
        "the fake encrypts as Node does"
    );
    assert_eq!(node.len(), 1024, "padded to a multiple of 32 bytes");
    assert_eq!(decrypt_media(&node, &key).unwrap(), plain);
}

/// The callback mode: an image message names a media id, the turn fetches
/// it with `media/get` and — `[provider] vision = true` for a model of no
/// known vision family — sends it as an image part; a media id the API
/// does not know is answered; a voice note (no WeCom transcript) is
/// fetched the same way and transcribed, and a transcription service that
/// fails is answered while the turn runs. Replies come whole: this mode
/// cannot edit messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_photo_or_voice_note_is_fetched_with_media_get_and_used() {
    use wecom_callback_support::{AES_KEY, AGENT, CORP, FakeQyApi, SECRET, TOKEN, WeCom};
    const NOW_S: u64 = 1_700_000_000;
    let api = FakeQyApi::start().await;
    let provider = FakeProvider::start_with(vec![], None, Some(answer())).unwrap();
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    assert!(!hermes_runtime::media::vision::model_sees_images("hermes3"));
    let settings = settings_with(
        &provider,
        &home,
        &work,
        "hermes3",
        "[provider]\nvision = true\n\n[transcription]\nbase_url = \"{provider}\"\n",
    );
    let adapter = Arc::new(
        WecomCallbackAdapter::new(WecomCallbackConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            api_url: api.url.clone(),
            api_backoff: Duration::from_millis(10),
            clock: ManualClock::new(NOW_S * 1000),
            ..WecomCallbackConfig::new(CORP, SECRET, AGENT, TOKEN, AES_KEY)
        })
        .unwrap(),
    );
    let runner = runner(&settings, adapter.clone(), true).await;
    let wecom = WeCom::new(adapter.local_addr().unwrap(), "/wecom/callback");
    api.add_media("MEDIA7", "image/png", PNG);
    let image = |media_id: &str, msg_id: &str| {
        format!(
            "<xml><ToUserName>{CORP}</ToUserName><FromUserName>{USER}</FromUserName><CreateTime>{NOW_S}</CreateTime><MsgType>image</MsgType><PicUrl>http://127.0.0.1:9/p.png</PicUrl><MediaId>{media_id}</MediaId><MsgId>{msg_id}</MsgId><AgentID>{AGENT}</AgentID></xml>"
        )
    };
    assert_eq!(wecom.post(&image("MEDIA7", "7001"), NOW_S).await.0, 200);
    let sent = api.wait_sent(|s| !s.is_empty()).await;
    assert_eq!(sent[0].content, ANSWER);
    assert_eq!(
        image_urls(&last_user_contents(&provider)[0]),
        [data_url("image/png", PNG)]
    );

    assert_eq!(wecom.post(&image("GONE", "7002"), NOW_S).await.0, 200);
    let sent = api.wait_sent(|s| s.len() >= 2).await;
    let reply = &sent[1].content;
    assert!(
        reply.starts_with("⚠️ I could not get your photo:") && reply.contains("40007"),
        "{reply}"
    );
    assert!(reply.ends_with(ANSWER), "the turn ran: {reply}");
    assert!(!reply.contains("access_token"), "{reply}");

    // Voice: media/get, then the transcription service.
    let voice = |media_id: &str, msg_id: &str| {
        format!(
            "<xml><ToUserName>{CORP}</ToUserName><FromUserName>{USER}</FromUserName><CreateTime>{NOW_S}</CreateTime><MsgType>voice</MsgType><MediaId>{media_id}</MediaId><Format>amr</Format><MsgId>{msg_id}</MsgId><AgentID>{AGENT}</AgentID></xml>"
        )
    };
    api.add_media("VOICE1", "audio/amr", b"#!AMR\n a voice note");
    provider.set_transcription(Reply::text("Is the kettle on?"));
    assert_eq!(wecom.post(&voice("VOICE1", "7003"), NOW_S).await.0, 200);
    let sent = api.wait_sent(|s| s.len() >= 3).await;
    assert_eq!(
        sent[2].content,
        format!("🎤 “Is the kettle on?”\n\n{ANSWER}")
    );
    assert_eq!(
        last_user_contents(&provider)[2],
        "Is the kettle on?",
        "the transcript is the message"
    );
    let upload = &provider.transcriptions()[0];
    assert!(
        upload
            .iter()
            .any(|f| f.name == "file" && f.data == b"#!AMR\n a voice note"),
        "{upload:?}"
    );
    provider.set_transcription(Reply::Status(503, "overloaded".into()));
    assert_eq!(wecom.post(&voice("VOICE1", "7004"), NOW_S).await.0, 200);
    let sent = api.wait_sent(|s| s.len() >= 4).await;
    let reply = &sent[3].content;
    assert!(
        reply.starts_with("⚠️ I could not transcribe your voice message.")
            && reply.ends_with(ANSWER)
            && !reply.contains("503")
            && !reply.contains("127.0.0.1"),
        "{reply}"
    );
    assert_eq!(sent.len(), 4, "one message per reply: {sent:?}");
    assert_eq!(provider.requests().len(), 4);
    assert!(
        provider.violations().is_empty(),
        "{:?}",
        provider.violations()
    );
    assert_valid_requests(&provider.requests());
    runner.shutdown().await;
    api.assert_clean();
}
