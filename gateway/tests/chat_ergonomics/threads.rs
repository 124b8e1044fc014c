//! Topics are sessions, and replies carry their quote (SPEC Y5).

use hermes_gateway::event::QUOTE_MAX_CHARS;
use hermes_runtime::store::Store;
use serde_json::json;

use super::{push, sent};
use crate::telegram_gateway::{Setup, USER, gateway};
use crate::telegram_support::BOT_ID;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forum_topic_has_its_own_history_and_replies_stay_in_it() {
    let gw = gateway(Setup::default()).await;
    let forum = json!({"id": -100, "type": "supergroup", "is_forum": true});
    let in_topic = |id: i64, topic: i64, text: &str| {
        push(
            &gw,
            id,
            USER,
            forum.clone(),
            json!({"text": text, "message_thread_id": topic, "is_topic_message": true}),
        );
    };
    in_topic(1, 77, "@fake_bot first words in seventy-seven");
    sent(&gw, 1).await;
    in_topic(2, 88, "@fake_bot first words in eighty-eight");
    sent(&gw, 2).await;
    in_topic(3, 77, "@fake_bot more in seventy-seven");
    sent(&gw, 3).await;

    let requests = gw.provider.requests();
    assert_eq!(requests.len(), 3);
    let third = requests[2]["messages"].to_string();
    assert!(third.contains("first words in seventy-seven"), "{third}");
    assert!(
        !third.contains("eighty-eight"),
        "another topic's history leaked: {third}"
    );
    let second = requests[1]["messages"].to_string();
    assert!(!second.contains("seventy-seven"), "{second}");

    let threads: Vec<_> = gw
        .fake
        .requests("sendMessage")
        .iter()
        .map(|r| r.body["message_thread_id"].clone())
        .collect();
    assert_eq!(threads, vec![json!(77), json!(88), json!(77)]);

    let store = Store::open(&gw.settings.state_db()).unwrap();
    let mut keys: Vec<String> = store
        .list_sessions(10)
        .unwrap()
        .into_iter()
        .filter_map(|s| s.session_key)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        vec![
            format!("agent:main:telegram:group:-100:{USER}:77"),
            format!("agent:main:telegram:group:-100:{USER}:88"),
        ]
    );
    gw.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replys_quote_reaches_the_model_cut_and_marked() {
    let gw = gateway(Setup::default()).await;
    let chat = json!({"id": USER, "type": "private"});
    let bot_said = |id: i64, text: &str| {
        json!({
            "message_id": id, "date": 0, "chat": chat.clone(), "text": text,
            "from": {"id": BOT_ID, "is_bot": true, "first_name": "Fake"},
        })
    };
    push(
        &gw,
        10,
        USER,
        chat.clone(),
        json!({"text": "why?", "reply_to_message": bot_said(5, "The capital of France is Paris.")}),
    );
    sent(&gw, 1).await;
    let long = "word ".repeat(400);
    push(
        &gw,
        11,
        USER,
        chat.clone(),
        json!({"text": "too long", "reply_to_message": bot_said(6, &long)}),
    );
    sent(&gw, 2).await;
    // Telegram's partial quote wins over the whole message.
    push(
        &gw,
        12,
        USER,
        chat.clone(),
        json!({
            "text": "this part",
            "reply_to_message": bot_said(7, "one. two. three."),
            "quote": {"text": "two.", "position": 5},
        }),
    );
    sent(&gw, 3).await;

    let users = gw.last_user_contents();
    assert_eq!(users[0], json!("> The capital of France is Paris.\n\nwhy?"));
    let cut = users[1].as_str().unwrap();
    assert!(cut.ends_with("…\n\ntoo long"), "{cut}");
    assert!(cut.len() < QUOTE_MAX_CHARS + 200, "{}", cut.len());
    assert_eq!(users[2], json!("> two.\n\nthis part"));
    gw.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_made_in_a_forum_topic_is_delivered_into_that_topic() {
    use std::sync::{Arc, Mutex};

    use hermes_gateway::app::RuntimeAgentFactory;
    use hermes_gateway::cron::{Scheduler, SchedulerDeps, SchedulerTiming};
    use hermes_runtime::cron::{self, CronContext, CronSettings, JobSpec, Origin};
    use hermes_runtime::store::SystemClock;

    let gw = gateway(Setup::default()).await;
    let store = Arc::new(Mutex::new(Store::open(&gw.settings.state_db()).unwrap()));
    let settings = CronSettings::load(&gw.settings).unwrap();
    let origin = Origin {
        platform: "telegram".into(),
        chat: "-100".into(),
        thread: Some("77".into()),
    };
    let ctx = CronContext {
        now_ms: hermes_core::Clock::now_ms(&SystemClock),
        tz: settings.tz.clone(),
        platforms: Some(vec!["telegram".into()]),
        scripts_dir: None,
    };
    let spec = JobSpec {
        schedule: Some("1s".into()),
        prompt: Some("the topic's reminder".into()),
        ..JobSpec::default()
    };
    let job = cron::create(&mut store.lock().unwrap(), &spec, Some(&origin), &ctx).unwrap();
    assert_eq!(job.deliver, "origin");
    let scheduler = Scheduler::start(SchedulerDeps {
        runner: gw.runner.clone(),
        factory: Arc::new(RuntimeAgentFactory::new(&gw.settings, None).unwrap()),
        store,
        clock: Arc::new(SystemClock),
        settings,
        timing: SchedulerTiming::default(),
        scripts: None,
    });
    let texts = sent(&gw, 1).await;
    assert_eq!(texts, vec!["I read your message.".to_owned()]);
    let sends = gw.fake.requests("sendMessage");
    assert_eq!(sends[0].body["chat_id"], json!(-100));
    assert_eq!(
        sends[0].body["message_thread_id"],
        json!(77),
        "{:?}",
        sends[0].body
    );
    assert!(sends[0].body.get("reply_parameters").is_none());
    scheduler.stop(std::time::Duration::from_secs(5)).await;
    gw.assert_clean();
}
