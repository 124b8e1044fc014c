//! Memory per user through the whole gateway on Telegram (issue 44): the
//! Bot API fake, the production agent factory over the real store, the
//! loopback provider. Every chat request the provider receives is sorted
//! by the user its session serves (the prompt's "user id N"), and checked:
//! Alice's remembered fact reaches Alice's next session and no request
//! made for Bob; in a group each turn carries its own user's memory; the
//! shared memory is labelled; the old single files are the owner's only.

use std::sync::Arc;

use hermes_runtime::memory_scope::{MemorySettings, shared_dir};
use hermes_tests::{Reply, Responder};
use serde_json::Value;

use crate::telegram_gateway::{Setup, USER, gateway};

const ALICE: i64 = 11;
const BOB: i64 = 12;
const GROUP: i64 = -100;

/// Saves what follows `remember:` with the memory tool; answers anything
/// else (and the tool's result) with a line.
fn remembering() -> Responder {
    Arc::new(|request: &Value| {
        let last = request["messages"].as_array().unwrap().last().unwrap();
        let text = last["content"].as_str().unwrap_or("");
        match text.split_once("remember: ") {
            Some((_, fact)) if last["role"] == "user" => Reply::tool(
                "m1",
                "memory",
                &serde_json::json!({"action": "add", "content": fact}).to_string(),
            ),
            _ => Reply::text("Done."),
        }
    })
}

fn setup() -> Setup {
    Setup {
        toolsets: "memory",
        // USER (7) owns the bot.
        config_toml: format!("[memory]\nowner = \"telegram:{USER}\"\n"),
        more_users: vec![ALICE, BOB],
        responder: remembering(),
        ..Setup::default()
    }
}

/// The system prompts of the requests made for `user`'s sessions.
fn prompts_for(requests: &[Value], user: i64) -> Vec<String> {
    requests
        .iter()
        .map(|r| r["messages"][0]["content"].as_str().unwrap().to_owned())
        .filter(|p| p.contains(&format!("(user id {user};")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alices_fact_reaches_her_next_session_and_no_request_for_bob() {
    let gw = gateway(setup()).await;
    let home = gw.home.path();
    // The single files of earlier versions: now the owner's memory.
    std::fs::write(home.join("MEMORY.md"), "The boiler code is 4471.\n").unwrap();
    std::fs::write(home.join("USER.md"), "The owner is called Olga.\n").unwrap();
    std::fs::create_dir_all(shared_dir(home)).unwrap();
    std::fs::write(shared_dir(home).join("MEMORY.md"), "The dog is Rex.\n").unwrap();

    gw.send_as(ALICE, ALICE, 1, "remember: Alice takes insulin at 8.");
    gw.replies(1).await;
    gw.send_as(ALICE, ALICE, 2, "/new");
    gw.replies(2).await;
    gw.send_as(ALICE, ALICE, 3, "what do I take?");
    gw.replies(3).await;
    gw.send_as(BOB, BOB, 4, "hello");
    gw.replies(4).await;
    gw.send_as(USER, USER, 5, "hi");
    gw.replies(5).await;
    // `/memory` shows a user their own memory and the shared one; `/forget`
    // erases theirs only.
    gw.send_as(BOB, BOB, 6, "/memory");
    gw.send_as(ALICE, ALICE, 7, "/memory");
    let shown = gw.replies(7).await;
    let (bob_sees, alice_sees) = if shown[5].contains("insulin") {
        (&shown[6], &shown[5])
    } else {
        (&shown[5], &shown[6])
    };
    assert!(
        alice_sees.contains("Alice takes insulin at 8.") && alice_sees.contains("Rex"),
        "{alice_sees}"
    );
    assert!(!alice_sees.contains("4471"), "{alice_sees}");
    assert!(
        !bob_sees.contains("insulin") && bob_sees.contains("Rex"),
        "{bob_sees}"
    );
    gw.send_as(ALICE, ALICE, 8, "/forget");
    let replies = gw.replies(8).await;
    assert!(replies[7].starts_with("Done: I forgot"), "{}", replies[7]);
    gw.runner.shutdown().await;

    let requests = gw.provider.requests();
    let alice = prompts_for(&requests, ALICE);
    let bob = prompts_for(&requests, BOB);
    let owner = prompts_for(&requests, USER);
    assert_eq!(alice.len() + bob.len() + owner.len(), requests.len());
    // Alice's first session: the remembered fact waits for the next one,
    // the stored prompt stays byte-stable across the tool call.
    assert_eq!(alice.len(), 3, "{alice:#?}");
    assert_eq!(alice[0], alice[1]);
    assert!(!alice[0].contains("insulin"), "{}", alice[0]);
    assert!(
        alice[2].contains("Alice takes insulin at 8."),
        "{}",
        alice[2]
    );
    for p in alice.iter().chain(&bob).chain(&owner) {
        assert!(
            p.contains("## Shared memory (every user of this bot sees it")
                && p.contains("The dog is Rex."),
            "{p}"
        );
    }
    for p in alice.iter().chain(&bob) {
        assert!(!p.contains("4471") && !p.contains("Olga"), "{p}");
    }
    assert_eq!(bob.len(), 1);
    for p in bob.iter().chain(&owner) {
        assert!(!p.contains("insulin"), "{p}");
    }
    assert!(
        owner[0].contains("The boiler code is 4471."),
        "{}",
        owner[0]
    );
    assert!(
        owner[0].contains("The owner is called Olga."),
        "{}",
        owner[0]
    );
    // Alice's fact was in her folder, now forgotten; the owner's file and
    // the shared memory are untouched.
    let alice_dir = MemorySettings::default()
        .place(home, "telegram", &ALICE.to_string())
        .dir;
    assert!(alice_dir.is_dir() && !alice_dir.join("MEMORY.md").exists());
    assert!(shared_dir(home).join("MEMORY.md").exists());
    assert_eq!(
        std::fs::read_to_string(home.join("MEMORY.md")).unwrap(),
        "The boiler code is 4471.\n"
    );
    gw.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_group_each_turn_carries_its_own_users_memory() {
    let gw = gateway(setup()).await;
    let home = gw.home.path();
    let settings = MemorySettings::default();
    for (user, fact) in [
        (ALICE, "Alice is vegetarian."),
        (BOB, "Bob is a night nurse."),
    ] {
        let dir = settings.place(home, "telegram", &user.to_string()).dir;
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("MEMORY.md"), fact).unwrap();
    }
    gw.send_as(ALICE, GROUP, 1, "@fake_bot what should I cook?");
    gw.replies(1).await;
    gw.send_as(BOB, GROUP, 2, "@fake_bot when do I sleep?");
    gw.replies(2).await;
    gw.send_as(ALICE, GROUP, 3, "@fake_bot and tomorrow?");
    gw.replies(3).await;
    gw.runner.shutdown().await;

    let requests = gw.provider.requests();
    let alice = prompts_for(&requests, ALICE);
    let bob = prompts_for(&requests, BOB);
    assert_eq!((alice.len(), bob.len()), (2, 1), "{requests:#?}");
    for p in &alice {
        assert!(
            p.contains("a group chat") && p.contains("Alice is vegetarian."),
            "{p}"
        );
        assert!(!p.contains("night nurse"), "{p}");
    }
    assert!(bob[0].contains("Bob is a night nurse."), "{}", bob[0]);
    assert!(!bob[0].contains("vegetarian"), "{}", bob[0]);
    gw.assert_clean();
}
