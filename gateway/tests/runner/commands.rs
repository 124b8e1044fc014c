//! The slash commands, each one, and while a turn runs.

use hermes_gateway_testing::Pace;
use hermes_runtime::store::SessionStatus;

use super::support::{dm_key, harness, user_texts};

#[test]
fn every_command() {
    let h = harness(Pace::Instant, |_| {});
    let ask = |text: &str| h.ask("alice", text);

    assert!(ask("/help").contains("/model NAME"));
    assert!(ask("/help@hermes_bot").contains("/undo"));
    assert!(ask("/frobnicate").contains("Unknown command /frobnicate"));
    assert!(ask("/status").contains("No conversation yet"));
    assert_eq!(ask("/stop"), "Nothing is running.");
    assert_eq!(ask("/undo"), "Nothing to undo.");

    assert_eq!(
        ask("/usr/bin/x is a path"),
        "reply to: /usr/bin/x is a path"
    );
    assert_eq!(ask("second"), "reply to: second");
    let status = ask("/status");
    assert!(status.contains("Messages: 4"), "{status}");
    assert!(status.contains("Model: test-model"), "{status}");
    assert!(status.contains("Busy mode: interrupt"), "{status}");

    assert_eq!(ask("/undo"), "Removed the last exchange (2 messages).");
    assert_eq!(h.transcript(&dm_key("alice")).len(), 2);

    assert!(ask("/model@hermes_bot fancy-model").contains("Model set to fancy-model"));
    assert_eq!(
        ask("/model"),
        "Model: fancy-model. Switch with /model NAME."
    );
    assert_eq!(ask("third"), "reply to: third");
    assert_eq!(h.factory.built_models().last().unwrap(), "fancy-model");
    assert!(ask("/model two words").contains("one word"));

    let old_id = {
        let store = h.store.lock().unwrap();
        store
            .active_session_for_key(&dm_key("alice"))
            .unwrap()
            .unwrap()
            .id
    };
    assert_eq!(ask("/reset"), "Started a new conversation.");
    assert_eq!(ask("fresh"), "reply to: fresh");
    let calls = h.model.calls();
    assert_eq!(user_texts(calls.last().unwrap()), vec!["fresh"]);
    // The chosen model survives /new; the old session is ended, not deleted.
    assert_eq!(h.factory.built_models().last().unwrap(), "fancy-model");
    let store = h.store.lock().unwrap();
    let old = store.session(&old_id).unwrap().unwrap();
    assert_eq!(old.status, SessionStatus::Ended);
    assert_eq!(old.message_count, 4);
    drop(store);
    assert!(ask("/new").contains("new conversation"));
    // Commands never reached the model.
    let all: Vec<String> = h.model.calls().iter().flat_map(|c| user_texts(c)).collect();
    assert!(
        all.iter()
            .all(|t| !t.starts_with("/help") && !t.starts_with("/model")),
        "{all:?}"
    );
}

#[test]
fn commands_work_while_a_turn_runs() {
    let h = harness(Pace::Gated, |_| {});
    h.dm("alice", "long task");
    h.wait_model_waiting(1);
    h.dm("alice", "/status");
    let texts = h.wait_text("dm-alice", |t| t.contains("Running: yes"));
    assert_eq!(texts.len(), 1);
    h.dm("alice", "/stop");
    let texts = h.wait_text("dm-alice", |t| t == "partial reply to: long task");
    assert!(
        texts.contains(&"Stopping the current reply.".to_owned()),
        "{texts:?}"
    );
    assert_eq!(h.model.call_count(), 1);
    // /new during a turn: the turn stops, the next message starts fresh.
    h.dm("alice", "another long task");
    h.wait_model_waiting(2);
    h.dm("alice", "/new");
    h.wait_text("dm-alice", |t| t == "Started a new conversation.");
    h.dm("alice", "hello");
    h.wait_model_waiting(3);
    h.model.release(1);
    h.wait_text("dm-alice", |t| t == "reply to: hello");
    assert_eq!(user_texts(&h.model.calls()[2]), vec!["hello"]);
}

/// `/skills` lists the saved skills by name and description (SPEC Y8).
#[test]
fn skills_lists_the_saved_skills() {
    let h = harness(Pace::Instant, |_| {});
    assert!(h.ask("alice", "/skills").starts_with("No skills yet."));
    let home = tempfile::tempdir().unwrap();
    h.factory.set_skills_home(home.path());
    let skills = hermes_runtime::skills::SkillsHome::new(home.path());
    skills
        .create(
            "deploy-notes",
            "---\nname: deploy-notes\ndescription: Deploys the site.\n---\n1. make deploy\n",
        )
        .unwrap();
    assert_eq!(
        h.ask("alice", "/skills@hermes_bot"),
        "Skills (1):\n- deploy-notes: Deploys the site."
    );
    assert!(h.ask("alice", "/help").contains("/skills"));
    // The command never reached the model.
    assert!(h.model.calls().is_empty());
}
