//! Spoken replies on Discord: with `[gateway] voice_replies = "always"` a
//! DM's answer goes out as text, then as an audio attachment carrying the
//! speech service's bytes unchanged (the loopback fake Discord keeps
//! uploads byte for byte; the loopback speech service answers real
//! Ogg/Opus).
#![cfg(feature = "discord")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::discord_support;
use crate::speech_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use discord_support::{Behaviour, FakeDiscord, TOKEN};
use hermes_discord::{DiscordAdapter, DiscordConfig};
use hermes_gateway::config::GatewayConfig;
use hermes_gateway::runner::{GatewayRunner, RunnerDeps};
use hermes_gateway::voice::VoiceMode;
use hermes_gateway_testing::{EchoModel, TestAgentFactory};
use hermes_runtime::media::tts::{AudioFormat, Speaker, TtsSettings};
use hermes_runtime::store::{Store, SystemClock};
use speech_support::{SPEECH, SpeechService};

const ALICE: &str = "111";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voice_reply_goes_out_as_an_audio_attachment() {
    let speech = SpeechService::start();
    let fake = FakeDiscord::start(Behaviour::default()).await;
    let mut c = DiscordConfig::new(TOKEN);
    c.api_url = fake.api_url();
    c.connect_timeout = Duration::from_secs(5);
    let adapter = DiscordAdapter::new(c);
    let factory = TestAgentFactory::new(EchoModel::new());
    factory.set_speech(Speaker::new(TtsSettings {
        base_url: speech.base_url.clone(),
        api_key: Some("sk-tts-test-key".into()),
        model: "kokoro".into(),
        voice: "af_bella".into(),
        format: AudioFormat::Opus,
        max_chars: 500,
        timeout: Duration::from_secs(10),
    }));
    let dir = tempfile::tempdir().unwrap();
    let mut gw = GatewayConfig::default();
    gw.allow.allow_all = true;
    gw.voice.replies = VoiceMode::Always;
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![Arc::new(adapter)],
        factory,
        store: Arc::new(Mutex::new(
            Store::open(&dir.path().join("state.db")).unwrap(),
        )),
        clock: Arc::new(SystemClock),
        config: gw,
    });
    runner.start().await.unwrap();
    let asked = fake.dm(ALICE, "what time is it");
    let posted = fake.wait_posted(2).await;
    assert_eq!(posted[0].content, "reply to: what time is it");
    let voice = &posted[1];
    let file = &voice.body["files"][0];
    assert_eq!(file["filename"], "reply.ogg");
    assert_eq!(file["content_type"], "audio/ogg");
    let hex: String = SPEECH.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(file["hex"], hex, "the service's bytes, byte for byte");
    assert_eq!(voice.body["attachments"][0]["filename"], "reply.ogg");
    assert_eq!(voice.reply_to.as_deref(), Some(asked.as_str()));
    let spoken = speech.requests();
    assert_eq!(spoken.len(), 1);
    assert_eq!(spoken[0]["input"], "reply to: what time is it");
    assert_eq!(spoken[0]["voice"], "af_bella");
    runner.shutdown().await;
}
