//! DM pairing (SPEC Y4) in the running gateway: the code, no model call,
//! the answer limit, groups, approval counted at once, revocation, and the
//! switch that turns pairing off.

use hermes_gateway::pairing::{self, CODE_ALPHABET, CODE_LEN};
use hermes_runtime::store::Store;
use serde_json::json;

use super::{dm, push, sent, settle, until};
use crate::telegram_gateway::{Setup, USER, gateway};

const STRANGER: i64 = 99;

/// The code in a pairing reply.
fn code_in(text: &str) -> String {
    let code = text
        .split("pairing code is ")
        .nth(1)
        .unwrap_or_else(|| panic!("no code in {text:?}"))[..CODE_LEN]
        .to_owned();
    assert!(code.bytes().all(|b| CODE_ALPHABET.contains(&b)), "{code}");
    code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strangers_dm_gets_a_code_and_no_model_call_and_approval_lets_them_in() {
    let gw = gateway(Setup::default()).await;
    dm(&gw, 1, STRANGER, "hello, who are you?");
    let replies = sent(&gw, 1).await;
    let code = code_in(&replies[0]);
    assert!(
        replies[0].contains(&format!("hermes pairing approve telegram {code}")),
        "{replies:?}"
    );
    assert!(
        gw.provider.requests().is_empty(),
        "no model call for a stranger"
    );

    // Approved from another connection to the same database (as the CLI
    // does), while the gateway runs: the next message is served.
    {
        let mut store = Store::open(&gw.settings.state_db()).unwrap();
        let user = pairing::approve(&mut store, "telegram", &code, now_ms()).unwrap();
        assert_eq!(user.user_id, STRANGER.to_string());
        // The same code a second time: used.
        assert!(pairing::approve(&mut store, "telegram", &code, now_ms()).is_err());
    }
    dm(&gw, 2, STRANGER, "now?");
    let replies = sent(&gw, 2).await;
    assert_eq!(replies[1], "I read your message.");
    assert_eq!(gw.provider.requests().len(), 1);

    // Revoked: a stranger again, refused without a model call.
    {
        let mut store = Store::open(&gw.settings.state_db()).unwrap();
        assert!(pairing::revoke(&mut store, "telegram", &STRANGER.to_string()).unwrap());
    }
    dm(&gw, 3, STRANGER, "still there?");
    let replies = sent(&gw, 3).await;
    assert!(replies[2].contains("pairing code is"), "{replies:?}");
    assert_ne!(
        code_in(&replies[2]),
        code,
        "a used code is never handed out again"
    );
    settle().await;
    assert_eq!(gw.provider.requests().len(), 1);
    gw.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_messages_from_a_stranger_get_at_most_two_answers_with_one_code() {
    let gw = gateway(Setup::default()).await;
    for id in 1..=6 {
        dm(&gw, id, STRANGER, &format!("hello {id}"));
    }
    // A known user's message after them: once it is answered, the six
    // were handled (updates are taken in order).
    dm(&gw, 7, USER, "and me?");
    until("the known user's answer", || {
        gw.fake
            .requests("sendMessage")
            .iter()
            .any(|r| r.body["text"] == "I read your message.")
    })
    .await;
    settle().await;
    let replies: Vec<_> = gw
        .fake
        .requests("sendMessage")
        .into_iter()
        .filter(|r| r.body["chat_id"] == STRANGER)
        .collect();
    assert!(!replies.is_empty() && replies.len() <= 2, "{replies:?}");
    let codes: Vec<String> = replies
        .iter()
        .map(|r| code_in(r.body["text"].as_str().unwrap()))
        .collect();
    assert!(
        codes.windows(2).all(|w| w[0] == w[1]),
        "one code at a time: {codes:?}"
    );
    let store = Store::open(&gw.settings.state_db()).unwrap();
    let waiting = pairing::pending(&store, now_ms()).unwrap();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert_eq!(waiting[0].code, codes[0]);
    assert_eq!(waiting[0].name.as_deref(), Some("Stranger"));
    assert_eq!(gw.provider.requests().len(), 1, "only the known user's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_never_get_codes_and_pairing_can_be_turned_off() {
    let gw = gateway(Setup {
        config_toml: "[gateway]\npairing = false\n".into(),
        ..Setup::default()
    })
    .await;
    dm(&gw, 1, STRANGER, "hello");
    let replies = sent(&gw, 1).await;
    assert!(replies[0].contains("not allowed"), "{replies:?}");
    assert!(!replies[0].contains("pairing"), "{replies:?}");

    let gw = gateway(Setup::default()).await;
    push(
        &gw,
        1,
        STRANGER,
        json!({"id": -100, "type": "group"}),
        json!({"text": "/status"}),
    );
    let replies = sent(&gw, 1).await;
    assert!(replies[0].contains("not allowed"), "{replies:?}");
    let store = Store::open(&gw.settings.state_db()).unwrap();
    assert!(pairing::pending(&store, now_ms()).unwrap().is_empty());
    assert!(gw.provider.requests().is_empty());
}

fn now_ms() -> u64 {
    hermes_core::Clock::now_ms(&hermes_runtime::store::SystemClock)
}
