//! `clarify` through the whole gateway on Telegram (issue 46): the question
//! as an inline keyboard answered by a button press (a `callback_query`),
//! a number that matches no choice, the timeout, and a message that is not
//! an answer.

use std::sync::Arc;

use hermes_tests::{Reply, Responder};
use serde_json::{Value, json};

use super::{dm, sent, until};
use crate::telegram_gateway::{Gateway, PNG, Setup, USER, gateway};
use crate::telegram_support::BOT_ID;

const QUESTION: &str = r#"{"question":"Which colour?","choices":["red","blue"]}"#;

/// Asks the question when told "ask me"; repeats a tool result back.
fn asker() -> Responder {
    Arc::new(|request: &Value| {
        let messages = request["messages"].as_array().unwrap();
        let last = messages.last().unwrap();
        if last["role"] == "tool" {
            return Reply::text(format!("Noted: {}", last["content"].as_str().unwrap()));
        }
        if last["content"]
            .as_str()
            .is_some_and(|t| t.contains("ask me"))
        {
            return Reply::tool("c1", "clarify", QUESTION);
        }
        Reply::text("I read your message.")
    })
}

fn setup(config_toml: &str) -> Setup {
    Setup {
        toolsets: "todo,clarify",
        responder: asker(),
        config_toml: config_toml.to_owned(),
        ..Setup::default()
    }
}

/// Waits for the question; returns its message id and its request body.
async fn question(gw: &Gateway) -> (i64, Value) {
    // Shown, not only asked: the fake logs a request a moment before it
    // takes effect.
    until("the question", || {
        (1000..1100).any(|id| {
            gw.fake
                .shown(id)
                .is_some_and(|t| t.contains("Which colour?"))
        })
    })
    .await;
    let body = gw
        .fake
        .requests("sendMessage")
        .into_iter()
        .find(|r| {
            r.body["text"]
                .as_str()
                .unwrap_or("")
                .contains("Which colour?")
        })
        .unwrap()
        .body;
    let id = (1000..1100)
        .find(|id| {
            gw.fake
                .shown(*id)
                .is_some_and(|t| t.contains("Which colour?"))
        })
        .unwrap();
    (id, body)
}

fn press(gw: &Gateway, query_id: &str, message_id: i64, data: &str) {
    let update_id = gw
        .next_update
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    gw.fake
        .push_update(json!({"update_id": update_id, "callback_query": {
            "id": query_id, "chat_instance": "ci-1", "data": data,
            "from": {"id": USER, "is_bot": false, "first_name": "Ann"},
            "message": {"message_id": message_id, "date": 0, "text": "Which colour?",
                "from": {"id": BOT_ID, "is_bot": true, "first_name": "Fake"},
                "chat": {"id": USER, "type": "private"}},
        }}));
}

/// The content of the `clarify` tool result the model was given.
fn tool_result(gw: &Gateway) -> String {
    gw.provider
        .requests()
        .iter()
        .flat_map(|r| r["messages"].as_array().unwrap().clone())
        .find(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .expect("no tool result reached the model")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_button_press_answers_the_question_on_its_inline_keyboard() {
    let gw = gateway(setup("")).await;
    dm(&gw, 1, USER, "ask me");
    let (id, body) = question(&gw).await;
    assert_eq!(
        body["reply_markup"]["inline_keyboard"],
        json!([[{"text": "red", "callback_data": "clarify:1"}],
               [{"text": "blue", "callback_data": "clarify:2"}]]),
        "{body}"
    );
    assert_eq!(body["reply_parameters"]["message_id"], 1);
    press(&gw, "cq-1", id, "clarify:2");
    let replies = sent(&gw, 2).await;
    assert!(replies[1].starts_with("Noted:"), "{replies:?}");
    let result: Value = serde_json::from_str(&tool_result(&gw)).unwrap();
    assert_eq!(result["user_response"], "blue");
    assert_eq!(result["choice_number"], 2);
    assert_eq!(result["choices_offered"], json!(["red", "blue"]));
    // The button's spinner was ended.
    until("answerCallbackQuery", || {
        gw.fake
            .requests("answerCallbackQuery")
            .iter()
            .any(|r| r.body["callback_query_id"] == "cq-1")
    })
    .await;
    // A second press on the answered keyboard is not a message, and a
    // press nothing waits for is answered with a note, not run.
    press(&gw, "cq-2", id, "clarify:1");
    press(&gw, "cq-3", id + 100, "clarify:1");
    let replies = sent(&gw, 3).await;
    assert_eq!(
        replies[2], "That question is no longer waiting for an answer.",
        "{replies:?}"
    );
    super::settle().await;
    assert_eq!(gw.fake.requests("sendMessage").len(), 3);
    assert_eq!(
        gw.provider.requests().len(),
        2,
        "no press reached the model"
    );
    gw.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_number_is_told_the_range_and_silence_times_out() {
    let gw = gateway(setup("[agent]\nclarify_timeout = 2\n")).await;
    dm(&gw, 1, USER, "ask me");
    question(&gw).await;
    dm(&gw, 2, USER, "7");
    let replies = sent(&gw, 2).await;
    assert!(
        replies[1].contains("7 is not one of the options") && replies[1].contains("1 to 2"),
        "{replies:?}"
    );
    let replies = sent(&gw, 4).await;
    assert_eq!(
        replies[2],
        "⌛ No answer within 2 s: carrying on without it."
    );
    assert!(
        replies[3].starts_with("Noted:") && replies[3].contains("no answer within 2 s"),
        "{replies:?}"
    );
    assert!(tool_result(&gw).contains("did not answer"));
    gw.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_is_not_an_answer_ends_the_wait_and_is_queued() {
    let gw = gateway(setup("[gateway]\nbusy_mode = \"queue\"\n")).await;
    dm(&gw, 1, USER, "ask me");
    question(&gw).await;
    gw.fake.add_file("ph1", "photos/file_1.png", PNG.to_vec());
    gw.send(
        2,
        json!({"caption": "look at this instead", "photo": [
            {"file_id": "ph1", "file_unique_id": "u", "width": 1, "height": 1, "file_size": PNG.len()}]}),
    );
    until("two model answers", || {
        gw.fake
            .requests("sendMessage")
            .iter()
            .filter(|r| {
                let t = r.body["text"].as_str().unwrap_or("");
                t.starts_with("Noted:") || t == "I read your message."
            })
            .count()
            == 2
    })
    .await;
    assert!(
        tool_result(&gw).contains("sent another message instead of answering"),
        "{}",
        tool_result(&gw)
    );
    // The photo was handled as its own turn, after the one that asked.
    let requests = gw.provider.requests();
    assert_eq!(requests.len(), 3);
    let last = requests[2]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .to_string();
    assert!(last.contains("look at this instead"), "{last}");
    gw.assert_clean();
}
