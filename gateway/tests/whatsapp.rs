//! The WhatsApp adapter (crate `hermes-whatsapp`) against a fake of Meta's
//! Cloud API (`whatsapp_support`), over real HTTP on 127.0.0.1: the fake
//! signs and POSTs webhooks to the adapter's server and takes its Graph
//! calls; the real runner, store and scheduler sit behind the adapter
//! (issue 42 §1).
#![cfg(feature = "whatsapp")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::whatsapp_support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use hermes_gateway::adapter::{AdapterError, FileKind, OutgoingFile, PlatformAdapter};
use hermes_gateway::config::GatewayConfig;
use hermes_gateway::cron::{Scheduler, SchedulerDeps, SchedulerTiming};
use hermes_gateway::event::{MediaKind, MessageType};
use hermes_gateway::runner::{GatewayRunner, RunnerDeps};
use hermes_gateway_testing::{
    ManualClock, Pace, ScriptedModel, TestAgentFactory, collector, recv_within,
};
use hermes_runtime::cron::{self, CatchUp, CronContext, CronSettings, JobSpec, TimeZone};
use hermes_runtime::store::{JobRecord, RunRecord, RunState, Store};
use hermes_whatsapp::{UNREADABLE_NOTICE, WhatsAppAdapter, WhatsAppConfig};
use serde_json::json;
use whatsapp_support::{
    APP_SECRET, FakeCloudApi, PHONE_ID, TOKEN, VERIFY_TOKEN, WindowMode, document, get, image,
    location, post_raw, reaction, sign, status_value, sticker, text, user_message, voice,
};

const ALICE: &str = "15551234567";
/// 2023-11-14 22:13:20 UTC.
const T0: u64 = 1_700_000_000_000;

fn config(fake: &FakeCloudApi) -> WhatsAppConfig {
    WhatsAppConfig {
        api_url: fake.url.clone(),
        listen: "127.0.0.1:0".parse().unwrap(),
        backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
        status_wait: Duration::from_secs(5),
        allowed_users: vec![ALICE.to_owned()],
        ..WhatsAppConfig::new(TOKEN, PHONE_ID, APP_SECRET, VERIFY_TOKEN)
    }
}

/// The adapter behind the real runner, with the scripted model
/// ("reply to: …").
struct Gateway {
    fake: FakeCloudApi,
    adapter: Arc<WhatsAppAdapter>,
    model: Arc<ScriptedModel>,
    runner: GatewayRunner,
    store: Arc<Mutex<Store>>,
    clock: Arc<ManualClock>,
    factory: Arc<TestAgentFactory>,
    _dir: tempfile::TempDir,
}

async fn gateway() -> Gateway {
    gateway_with(|c| c).await
}

/// [`gateway`] with the adapter's settings changed by `tweak`.
async fn gateway_with(tweak: impl FnOnce(WhatsAppConfig) -> WhatsAppConfig) -> Gateway {
    let fake = FakeCloudApi::start().await;
    let adapter = Arc::new(WhatsAppAdapter::new(tweak(config(&fake))));
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Arc::new(Mutex::new(
        Store::open(&dir.path().join("state.db"))
            .unwrap()
            .with_clock(clock.clone()),
    ));
    let model = ScriptedModel::new(Pace::Instant);
    let factory = TestAgentFactory::new(model.clone());
    let mut gateway = GatewayConfig::default();
    gateway.allow.everywhere = [ALICE.to_owned()].into_iter().collect();
    gateway.pairing = false;
    let runner = GatewayRunner::new(RunnerDeps {
        adapters: vec![adapter.clone()],
        factory: factory.clone(),
        store: store.clone(),
        clock: clock.clone(),
        config: gateway,
    });
    runner.start().await.unwrap();
    fake.set_webhook(adapter.local_addr().unwrap());
    Gateway {
        fake,
        adapter,
        model,
        runner,
        store,
        clock,
        factory,
        _dir: dir,
    }
}

/// A few hundred milliseconds for "nothing more happens".
async fn settle() {
    tokio::time::sleep(Duration::from_millis(400)).await;
}

#[tokio::test]
async fn the_verification_handshake_echoes_the_challenge_only_for_the_right_token() {
    let fake = FakeCloudApi::start().await;
    let adapter = WhatsAppAdapter::new(config(&fake));
    let (handler, mut rx) = collector();
    adapter.connect(handler).await.unwrap();
    let addr = adapter.local_addr().unwrap();
    let ok = format!(
        "/whatsapp?hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token={VERIFY_TOKEN}"
    );
    assert_eq!(get(addr, &ok).await, (200, "1158201444".to_owned()));
    let wrong = "/whatsapp?hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=guess";
    assert_eq!(get(addr, wrong).await.0, 403);
    let no_mode = format!("/whatsapp?hub.challenge=1&hub.verify_token={VERIFY_TOKEN}");
    assert_eq!(get(addr, &no_mode).await.0, 403);
    assert_eq!(get(addr, "/elsewhere").await.0, 404);
    assert!(rx.try_recv().is_err());
    adapter.disconnect().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_message_is_answered_once_marked_read_and_a_redelivery_adds_nothing() {
    let g = gateway().await;
    let note = user_message(ALICE, "Alice", text(ALICE, "wamid.A1", "hello agent"));
    assert_eq!(g.fake.deliver(&note).await, vec![200]);
    let sent = g.fake.wait_sent(|s| !s.is_empty()).await;
    assert_eq!(sent[0].to, ALICE);
    assert_eq!(sent[0].kind, "text");
    assert_eq!(sent[0].text, "reply to: hello agent");
    assert_eq!(sent[0].context.as_deref(), Some("wamid.A1"));
    // Meta retries a webhook it got no 200 for: the same message again.
    assert_eq!(g.fake.deliver(&note).await, vec![200]);
    settle().await;
    assert_eq!(g.model.call_count(), 1, "the redelivery reached the model");
    assert_eq!(g.fake.sent_to(ALICE).len(), 1, "answered twice");
    let marks = g.fake.read_marks();
    assert_eq!(marks, vec!["wamid.A1".to_owned()], "{marks:?}");
    g.runner.shutdown().await;
    g.fake.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_unsigned_and_non_json_webhooks_are_refused_and_reach_no_model() {
    let g = gateway().await;
    let addr = g.adapter.local_addr().unwrap();
    let body = serde_json::to_vec(&user_message(
        ALICE,
        "Alice",
        text(ALICE, "wamid.F1", "rm -rf"),
    ))
    .unwrap();
    // Signed with another secret, not signed, signed over other bytes.
    let forged = sign("not-the-app-secret", &body);
    assert_eq!(post_raw(addr, &body, Some(&forged)).await.0, 401);
    assert_eq!(post_raw(addr, &body, None).await.0, 401);
    let other = sign(APP_SECRET, b"{}");
    assert_eq!(post_raw(addr, &body, Some(&other)).await.0, 401);
    // Signed, but not JSON: refused with 400, nothing stored.
    let junk = b"object=whatsapp_business_account&entry=1";
    let (status, answer) = post_raw(addr, junk, Some(&sign(APP_SECRET, junk))).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("JSON"), "{answer}");
    settle().await;
    assert_eq!(
        g.model.call_count(),
        0,
        "a refused webhook reached the model"
    );
    assert!(g.fake.sent().is_empty());
    assert!(g.fake.read_marks().is_empty());
    // The adapter keeps serving: the genuine message is answered, once.
    g.fake.user_wrote_at(ALICE, SystemTime::now());
    assert_eq!(
        post_raw(addr, &body, Some(&sign(APP_SECRET, &body)))
            .await
            .0,
        200
    );
    g.fake.wait_sent(|s| !s.is_empty()).await;
    assert_eq!(g.model.call_count(), 1);
    g.runner.shutdown().await;
    g.fake.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reactions_locations_and_stickers_get_a_notice_or_nothing_never_the_model() {
    let g = gateway().await;
    g.fake.user_says(ALICE, location(ALICE, "wamid.L1")).await;
    g.fake.user_says(ALICE, sticker(ALICE, "wamid.S1")).await;
    g.fake
        .user_says(ALICE, reaction(ALICE, "wamid.R1", "wamid.L1"))
        .await;
    // A stranger's sticker: a log line, no answer.
    g.fake
        .user_says("15559990000", sticker("15559990000", "wamid.S2"))
        .await;
    let sent = g.fake.wait_sent(|s| s.len() >= 2).await;
    settle().await;
    let sent_now = g.fake.sent();
    assert_eq!(
        sent_now.len(),
        2,
        "a reaction is not answered: {sent_now:#?}"
    );
    let mut answered: Vec<&str> = sent.iter().filter_map(|s| s.context.as_deref()).collect();
    answered.sort_unstable();
    assert_eq!(answered, ["wamid.L1", "wamid.S1"]);
    assert!(
        sent.iter().all(|s| s.text == UNREADABLE_NOTICE),
        "{sent:#?}"
    );
    assert_eq!(g.model.call_count(), 0);
    g.runner.shutdown().await;
    g.fake.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_130429_is_retried_until_the_reply_is_sent() {
    let g = gateway().await;
    g.fake.rate_limit_next(3);
    g.fake
        .user_says(ALICE, text(ALICE, "wamid.RL1", "busy day"))
        .await;
    let sent = g.fake.wait_sent(|s| !s.is_empty()).await;
    assert_eq!(sent[0].text, "reply to: busy day");
    assert_eq!(g.fake.rate_limited(), 3);
    settle().await;
    assert_eq!(g.fake.sent().len(), 1, "sent once, after the limit");
    g.runner.shutdown().await;
    g.fake.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_server_error_is_retried_and_the_reply_sent_once() {
    let g = gateway().await;
    g.fake.server_errors_next(2);
    g.fake
        .user_says(ALICE, text(ALICE, "wamid.E1", "still there?"))
        .await;
    let sent = g.fake.wait_sent(|s| !s.is_empty()).await;
    assert_eq!(sent[0].text, "reply to: still there?");
    settle().await;
    assert_eq!(g.fake.sent().len(), 1);
    g.runner.shutdown().await;
    g.fake.assert_clean();
}

/// A message the API accepted and Meta later reports `failed` (after the
/// send stopped waiting): logged, counted, not reported delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_status_after_the_wait_is_counted() {
    let fake = FakeCloudApi::start().await;
    fake.set_window_mode(WindowMode::Late);
    let adapter = WhatsAppAdapter::new(WhatsAppConfig {
        status_wait: Duration::ZERO,
        ..config(&fake)
    });
    let (handler, _rx) = collector();
    adapter.connect(handler).await.unwrap();
    fake.set_webhook(adapter.local_addr().unwrap());
    // Accepted: without a wait the send cannot know better.
    adapter
        .send("15550009999", "late news", None)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while adapter.failed_deliveries() == 0 {
        assert!(
            Instant::now() < deadline,
            "the failed status was not counted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(adapter.failed_deliveries(), 1);
    assert!(fake.sent().is_empty());
    adapter.disconnect().await;
    fake.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_replies_are_split_below_4096_characters_and_nothing_is_cut() {
    let fake = FakeCloudApi::start().await;
    let adapter = WhatsAppAdapter::new(config(&fake));
    let (handler, _rx) = collector();
    adapter.connect(handler).await.unwrap();
    fake.set_webhook(adapter.local_addr().unwrap());
    // Alice wrote (the window is open) before this process started: each
    // piece waits for its `sent` status, which the fake sends at once.
    fake.user_wrote_at(ALICE, SystemTime::now());
    let started = Instant::now();
    let paragraph = "Ünïcode words, spread over many lines. ".repeat(40);
    let long: String = (0..8).map(|i| format!("{i}: {paragraph}\n\n")).collect();
    assert!(long.chars().count() > 3 * 4096);
    adapter.send(ALICE, &long, None).await.unwrap();
    let sent = fake.sent_to(ALICE);
    assert!(sent.len() >= 4, "{}", sent.len());
    assert!(sent.iter().all(|s| s.text.chars().count() <= 4096));
    let words = |t: &str| t.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    let joined: String = sent.iter().map(|s| format!("{} ", s.text)).collect();
    assert_eq!(words(&joined), words(&long), "something was cut");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a status wait ran out"
    );
    adapter.disconnect().await;
    fake.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn media_comes_in_by_media_id_and_goes_out_by_upload() {
    let fake = FakeCloudApi::start().await;
    let adapter = WhatsAppAdapter::new(config(&fake));
    let (handler, mut rx) = collector();
    adapter.connect(handler).await.unwrap();
    fake.set_webhook(adapter.local_addr().unwrap());
    let jpeg = b"\xff\xd8\xff\xe0 a photo".to_vec();
    fake.add_media("4001", "image/jpeg", &jpeg);
    fake.add_media("4002", "audio/ogg", b"OggS voice");
    fake.add_media("4003", "application/pdf", b"%PDF-1.7");
    fake.user_says(ALICE, image(ALICE, "wamid.M1", "4001", "what is this?"))
        .await;
    fake.user_says(ALICE, voice(ALICE, "wamid.M2", "4002"))
        .await;
    fake.user_says(ALICE, document(ALICE, "wamid.M3", "4003", "report.pdf"))
        .await;
    let mut events = Vec::new();
    for _ in 0..3 {
        events.push(recv_within(&mut rx, Duration::from_secs(20)).await.unwrap());
    }
    let photo = &events[0];
    assert_eq!(photo.message_type, MessageType::Photo);
    assert_eq!(photo.text, "what is this?");
    assert_eq!(photo.source.user_name.as_deref(), Some("Test User"));
    assert_eq!(photo.media[0].kind, MediaKind::Image);
    let got = adapter.fetch_media(&photo.media[0], 1 << 20).await.unwrap();
    assert_eq!(got.bytes, jpeg);
    assert_eq!(got.mime_type.as_deref(), Some("image/jpeg"));
    assert_eq!(events[1].message_type, MessageType::Voice);
    assert_eq!(events[1].media[0].kind, MediaKind::Voice);
    let voice_bytes = adapter
        .fetch_media(&events[1].media[0], 1 << 20)
        .await
        .unwrap();
    assert_eq!(voice_bytes.bytes, b"OggS voice");
    assert_eq!(events[2].media[0].file_name.as_deref(), Some("report.pdf"));
    // Too large for the caller's cap: refused before the download.
    let before = fake.downloads();
    let err = adapter.fetch_media(&photo.media[0], 4).await.unwrap_err();
    assert!(err.to_string().contains("larger"), "{err}");
    assert_eq!(fake.downloads(), before);
    // A media id that is gone: a clear error.
    let mut gone = photo.media[0].clone();
    gone.handle = "4999".into();
    assert!(adapter.fetch_media(&gone, 1 << 20).await.is_err());

    // Out: a photo with its caption, a voice reply as audio, a document.
    assert!(adapter.can_send_files() && adapter.can_send_voice());
    for (kind, name, mime) in [
        (FileKind::Photo, "chart.png", "image/png"),
        (FileKind::Voice, "reply.ogg", "audio/ogg"),
        (FileKind::Document, "notes.md", "text/markdown"),
    ] {
        let file = OutgoingFile {
            file_name: name.into(),
            content: format!("bytes of {name}").into_bytes(),
            caption: "here".into(),
            kind,
            media_type: mime.into(),
        };
        adapter.send_file(ALICE, &file, None).await.unwrap();
    }
    let uploads = fake.uploads();
    assert_eq!(uploads.len(), 3);
    assert_eq!(uploads[1].mime, "audio/ogg");
    assert_eq!(uploads[2].bytes, b"bytes of notes.md");
    let sent = fake.sent_to(ALICE);
    let kinds: Vec<&str> = sent.iter().map(|s| s.kind.as_str()).collect();
    assert_eq!(kinds, ["image", "audio", "document"]);
    assert_eq!(sent[0].text, "here");
    assert_eq!(sent[0].media_id.as_deref(), Some(uploads[0].id.as_str()));
    assert_eq!(sent[2].filename.as_deref(), Some("notes.md"));
    adapter.disconnect().await;
    fake.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_outside_the_24_hour_window_fails_as_undeliverable_at_once_or_from_the_status() {
    for mode in [WindowMode::Immediate, WindowMode::Late] {
        let fake = FakeCloudApi::start().await;
        fake.set_window_mode(mode);
        let adapter = WhatsAppAdapter::new(config(&fake));
        let (handler, _rx) = collector();
        adapter.connect(handler).await.unwrap();
        fake.set_webhook(adapter.local_addr().unwrap());
        let started = Instant::now();
        let err = adapter
            .send("15550009999", "your daily report", None)
            .await
            .unwrap_err();
        assert!(
            matches!(err, AdapterError::Undeliverable { .. }),
            "{mode:?}: {err}"
        );
        let text = err.to_string();
        assert!(text.contains("outside WhatsApp's 24-hour window"), "{text}");
        assert!(text.contains("131047"), "{text}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "waited out the status wait"
        );
        assert!(fake.sent().is_empty());
        if mode == WindowMode::Late {
            assert_eq!(adapter.failed_deliveries(), 1);
        }
        adapter.disconnect().await;
        fake.assert_clean();
    }
}

fn cron_settings() -> CronSettings {
    CronSettings {
        tz: TimeZone::UTC,
        catch_up: CatchUp::Once,
        home_channels: Default::default(),
        silent_marker: "[SILENT]".into(),
        limits: Default::default(),
    }
}

fn scheduler(g: &Gateway) -> Scheduler {
    Scheduler::start(SchedulerDeps {
        runner: g.runner.clone(),
        factory: g.factory.clone(),
        store: g.store.clone(),
        clock: g.clock.clone(),
        settings: cron_settings(),
        timing: SchedulerTiming {
            tick: Duration::from_millis(50),
            retry_base: Duration::from_millis(200),
            max_attempts: 3,
            ..SchedulerTiming::default()
        },
        scripts: None,
    })
}

/// A one-off job due in 90 seconds delivering to `to`.
fn schedule_report(g: &Gateway, to: &str) -> JobRecord {
    let ctx = CronContext {
        now_ms: T0,
        tz: TimeZone::UTC,
        platforms: Some(vec!["whatsapp".into()]),
        scripts_dir: None,
    };
    let spec = JobSpec {
        schedule: Some("90s".into()),
        prompt: Some(format!("the morning report for {to}")),
        deliver: Some(format!("whatsapp:{to}")),
        ..JobSpec::default()
    };
    cron::create(&mut g.store.lock().unwrap(), &spec, None, &ctx).unwrap()
}

/// The job's latest run once `done` holds for it (30 s at most).
async fn wait_run(g: &Gateway, job: &JobRecord, done: impl Fn(&RunRecord) -> bool) -> RunRecord {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let runs = g.store.lock().unwrap().job_runs(&job.id, 5).unwrap();
        if let Some(r) = runs.first().filter(|r| done(r)) {
            return r.clone();
        }
        assert!(Instant::now() < deadline, "{}: runs {runs:#?}", job.id);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_delivery_refused_by_the_24_hour_rule_is_recorded_failed_never_delivered() {
    for mode in [WindowMode::Immediate, WindowMode::Late] {
        let g = gateway().await;
        g.fake.set_window_mode(mode);
        let scheduler = scheduler(&g);
        let job = schedule_report(&g, ALICE);
        g.clock.advance(Duration::from_secs(91));
        let run = wait_run(&g, &job, |r| !r.state.is_open()).await;
        assert_eq!(run.state, RunState::DeliveryFailed, "{mode:?}: {run:#?}");
        assert_eq!(
            run.attempts, 1,
            "{mode:?}: retried a refusal that cannot pass"
        );
        let error = run.error.unwrap_or_default();
        assert!(
            error.contains("outside WhatsApp's 24-hour window"),
            "{error}"
        );
        assert!(error.contains("131047"), "{error}");
        assert!(run.answer.is_some(), "the answer is kept");
        let job = cron::find(&g.store.lock().unwrap(), &job.id).unwrap();
        let outcome = job.last_outcome.unwrap_or_default();
        assert!(
            outcome.starts_with("delivery failed: outside WhatsApp's 24-hour window"),
            "{mode:?}: {outcome}"
        );
        assert!(g.fake.sent().is_empty(), "{mode:?}");
        assert_eq!(g.fake.refused(), vec![(ALICE.to_owned(), 131_047)]);
        scheduler.stop(Duration::from_secs(2)).await;
        g.runner.shutdown().await;
        g.fake.assert_clean();
    }
}

/// Meta accepts a scheduled answer and reports it `failed` (131047) after
/// the send stopped waiting: the run recorded as delivered becomes
/// "delivery failed: outside WhatsApp's 24-hour window", once, however
/// often the status comes; `delivered` and `read` statuses of a message
/// that reached its user change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_delivery_reported_failed_later_is_recorded_failed_once() {
    const BOB: &str = "15557654321";
    // The adapter does not wait for statuses: the send returns `Ok` before
    // Meta's `failed` status comes.
    let g = gateway_with(|c| WhatsAppConfig {
        status_wait: Duration::ZERO,
        ..c
    })
    .await;
    let adapter = &g.adapter;
    g.fake.set_window_mode(WindowMode::Late);
    let scheduler = scheduler(&g);
    // Alice wrote (her window is open); Bob never did.
    g.fake.user_says(ALICE, text(ALICE, "wamid.W2", "hi")).await;
    g.fake.wait_sent(|s| !s.is_empty()).await;
    let to_alice = schedule_report(&g, ALICE);
    let to_bob = schedule_report(&g, BOB);
    g.clock.advance(Duration::from_secs(91));

    let failed = wait_run(&g, &to_bob, |r| r.state == RunState::DeliveryFailed).await;
    assert_eq!(failed.attempts, 1, "{failed:#?}");
    let error = failed.error.clone().unwrap_or_default();
    assert!(
        error.contains("outside WhatsApp's 24-hour window") && error.contains("131047"),
        "{error}"
    );
    assert!(failed.answer.is_some(), "the answer is kept");
    let outcome = cron::find(&g.store.lock().unwrap(), &to_bob.id)
        .unwrap()
        .last_outcome
        .unwrap_or_default();
    assert!(
        outcome.starts_with("delivery failed: outside WhatsApp's 24-hour window"),
        "{outcome}"
    );
    assert_eq!(g.fake.refused(), vec![(BOB.to_owned(), 131_047)]);
    assert_eq!(adapter.failed_deliveries(), 1);

    // Meta sends the same `failed` status again: nothing changes.
    let failed_status = g
        .fake
        .deliveries()
        .into_iter()
        .find(|d| d.body.contains("\"failed\""))
        .expect("the fake posted a failed status");
    let again: serde_json::Value = serde_json::from_str(&failed_status.body).unwrap();
    assert_eq!(g.fake.deliver(&again).await, vec![200]);
    assert_eq!(adapter.failed_deliveries(), 2, "the repeat was read");
    let runs = g.store.lock().unwrap().job_runs(&to_bob.id, 5).unwrap();
    assert_eq!(runs, vec![failed], "the repeated status changed the run");

    // Alice's answer reached her: `delivered` and `read` change nothing.
    let delivered = wait_run(&g, &to_alice, |r| r.state == RunState::Delivered).await;
    let wamid = g.fake.sent_to(ALICE)[1].wamid.clone();
    for status in ["delivered", "read"] {
        let note = status_value(&wamid, status, ALICE, None);
        assert_eq!(g.fake.deliver(&note).await, vec![200]);
    }
    settle().await;
    let runs = g.store.lock().unwrap().job_runs(&to_alice.id, 5).unwrap();
    assert_eq!(runs, vec![delivered]);
    scheduler.stop(Duration::from_secs(2)).await;
    g.runner.shutdown().await;
    g.fake.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_delivery_inside_the_window_is_delivered() {
    let g = gateway().await;
    g.fake.user_says(ALICE, text(ALICE, "wamid.W1", "hi")).await;
    g.fake.wait_sent(|s| !s.is_empty()).await;
    g.runner
        .send_text("whatsapp", ALICE, None, "scheduled hello")
        .await
        .unwrap();
    let sent = g.fake.wait_sent(|s| s.len() == 2).await;
    assert_eq!(sent[1].text, "scheduled hello");
    assert_eq!(json!(sent[1].context), json!(null));
    g.runner.shutdown().await;
    g.fake.assert_clean();
}

fn settings(home: &std::path::Path, vars: &[(&str, String)]) -> hermes_runtime::config::Settings {
    use hermes_runtime::config::{Environment, Overrides, load};
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

/// `hermes gateway run --check`: a wrong setting is named (exit 2) and no
/// secret is shown; right settings are asked of the Graph API live.
#[test]
fn check_names_the_setting_at_fault_and_asks_the_graph_api() {
    use hermes_gateway::app::{check_config, run_gateway};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let fake = rt.block_on(FakeCloudApi::start());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let vars = |skip: &str, extra: &[(&'static str, &str)]| {
        let mut v: Vec<(&str, String)> = vec![
            ("WHATSAPP_ACCESS_TOKEN", TOKEN.to_owned()),
            ("WHATSAPP_PHONE_NUMBER_ID", PHONE_ID.to_owned()),
            ("WHATSAPP_APP_SECRET", APP_SECRET.to_owned()),
            ("WHATSAPP_VERIFY_TOKEN", VERIFY_TOKEN.to_owned()),
            ("WHATSAPP_API_URL", fake.url.clone()),
            ("WHATSAPP_WEBHOOK_PORT", port.to_string()),
            ("WHATSAPP_ALLOWED_USERS", ALICE.to_owned()),
        ];
        v.retain(|(k, _)| *k != skip);
        v.extend(extra.iter().map(|(k, x)| (*k, (*x).to_owned())));
        v
    };
    let dir = tempfile::tempdir().unwrap();
    let summary = check_config(&settings(dir.path(), &vars("", &[]))).unwrap();
    assert!(summary.platforms.contains(&"whatsapp"), "{summary}");
    run_gateway(&settings(dir.path(), &vars("", &[])), true).unwrap();
    for (s, needle) in [
        (vars("WHATSAPP_APP_SECRET", &[]), "WHATSAPP_APP_SECRET"),
        (
            vars(
                "WHATSAPP_PHONE_NUMBER_ID",
                &[("WHATSAPP_PHONE_NUMBER_ID", "+1 555 0100")],
            ),
            "WHATSAPP_PHONE_NUMBER_ID",
        ),
        (
            vars(
                "WHATSAPP_ACCESS_TOKEN",
                &[("WHATSAPP_ACCESS_TOKEN", "revoked")],
            ),
            "WHATSAPP_ACCESS_TOKEN",
        ),
    ] {
        let err = run_gateway(&settings(dir.path(), &s), true).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{err}");
        let text = err.to_string();
        assert!(text.contains(needle), "{needle}: {text}");
        assert!(
            !text.contains(APP_SECRET) && !text.contains(TOKEN),
            "a secret leaked: {text}"
        );
    }
}

/// Records every log event (message and fields) as text.
struct Capture(Arc<Mutex<Vec<String>>>);

struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut line = format!("{}", event.metadata().level());
        event.record(&mut Fields(&mut line));
        self.0.lock().unwrap().push(line);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Forged webhooks, a wrong verify token, a body that is not JSON, the
/// rate limit, a refused send and a failed status all log — and no log
/// line, error or `Debug` carries the token, the app secret or the verify
/// token.
#[tokio::test]
async fn no_secret_reaches_a_log_line_an_error_or_debug() {
    // A current-thread runtime: the adapter's tasks log on this thread, where
    // the capturing subscriber is installed.
    let lines = Arc::new(Mutex::new(Vec::new()));
    let _guard = tracing::subscriber::set_default(Capture(lines.clone()));
    let fake = FakeCloudApi::start().await;
    fake.set_window_mode(WindowMode::Late);
    let adapter = WhatsAppAdapter::new(config(&fake));
    let (handler, _rx) = collector();
    adapter.connect(handler).await.unwrap();
    let addr = adapter.local_addr().unwrap();
    fake.set_webhook(addr);
    let body = b"{\"object\":\"whatsapp_business_account\"}";
    post_raw(addr, body, Some(&sign("forged", body))).await;
    post_raw(addr, b"not json", Some(&sign(APP_SECRET, b"not json"))).await;
    get(
        addr,
        "/whatsapp?hub.mode=subscribe&hub.challenge=1&hub.verify_token=x",
    )
    .await;
    fake.rate_limit_next(1);
    let err = adapter
        .send("15550009999", "hello", None)
        .await
        .unwrap_err();
    let unknown = adapter
        .send_file(
            "15550009999",
            &OutgoingFile {
                file_name: "a.txt".into(),
                content: b"a".to_vec(),
                ..OutgoingFile::default()
            },
            None,
        )
        .await
        .unwrap_err();
    adapter.disconnect().await;
    let lines = lines.lock().unwrap().join("\n");
    assert!(lines.contains("X-Hub-Signature-256"), "{lines}");
    assert!(lines.contains("rate limited"), "{lines}");
    assert!(lines.contains("NOT delivered"), "{lines}");
    let shown = format!("{lines}\n{err}\n{err:?}\n{unknown}\n{adapter:?}");
    for secret in [TOKEN, APP_SECRET, VERIFY_TOKEN] {
        assert!(!shown.contains(secret), "{secret} shown: {shown}");
    }
}
