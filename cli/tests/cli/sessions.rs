//! Sessions: resuming (`-c` per directory, `-r ID|PREFIX`), the session
//! commands, titles and statuses, and what failures leave behind.

use hermes_tests::{FakeProvider, Reply};
use serde_json::Value;

use super::support::*;

#[test]
fn continue_and_resume_carry_history_and_the_stored_system_prompt() {
    let env = Env::new();
    env.write_home("SOUL.md", "You are a pirate.");
    let provider = FakeProvider::start(vec![
        Reply::text("Arr, first."),
        Reply::text("Arr, second."),
        Reply::text("Arr, third."),
    ])
    .unwrap();
    let url = provider.base_url();
    let o = env.run(&url, &["chat", "-q", "first question"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    // The persona changes on disk; a resumed session must keep its prompt.
    env.write_home("SOUL.md", "You are a librarian.");
    let o = env.run(&url, &["-c", "-z", "second question"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "Arr, second.\n");

    let ids = env.session_ids();
    assert_eq!(ids.len(), 1);
    // A unique prefix is enough.
    let prefix = &ids[0][..ids[0].len() - 3];
    let o = env.run(&url, &["--resume", prefix, "-z", "third question"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let reqs = provider.requests();
    assert_eq!(reqs.len(), 3);
    assert!(system_prompt(&reqs[0]).contains("pirate"));
    assert_eq!(system_prompt(&reqs[1]), system_prompt(&reqs[0]));
    assert_eq!(system_prompt(&reqs[2]), system_prompt(&reqs[0]));
    assert_eq!(
        roles(&reqs[2]),
        ["system", "user", "assistant", "user", "assistant", "user"]
    );
    assert_eq!(reqs[2]["messages"][1]["content"], "first question");
    assert_eq!(reqs[2]["messages"][4]["content"], "Arr, second.");

    // A new session assembles the new persona.
    let provider2 = FakeProvider::start(vec![Reply::text("Shh.")]).unwrap();
    let o = env.run(&provider2.base_url(), &["chat", "-q", "new"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(system_prompt(&provider2.requests()[0]).contains("librarian"));
}

#[test]
fn continue_picks_the_latest_session_of_the_current_directory() {
    let env = Env::new();
    let other = tempfile::tempdir().unwrap();
    let provider = FakeProvider::start(vec![
        Reply::text("in work"),
        Reply::text("in other"),
        Reply::text("back in work"),
    ])
    .unwrap();
    let url = provider.base_url();
    assert_eq!(env.run(&url, &["-z", "here"]).status.code(), Some(0));
    let o = env
        .cmd(&url)
        .current_dir(other.path())
        .args(["-z", "there"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The other directory's session is newer, but -c here continues this one.
    let o = env.run(&url, &["-c", "-z", "again here"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let third = &provider.requests()[2];
    assert_eq!(third["messages"][1]["content"], "here");

    // A directory without sessions says where the latest one is.
    let empty = tempfile::tempdir().unwrap();
    let o = env
        .cmd(&url)
        .current_dir(empty.path())
        .args(["-c", "-z", "x"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("hermes -r"), "{}", stderr(&o));
}

#[test]
fn sessions_list_is_a_table_with_titles_times_counts_directories_and_statuses() {
    let env = Env::new();
    let provider = FakeProvider::start(vec![Reply::text("done")]).unwrap();
    let o = env.run(
        &provider.base_url(),
        &["-z", "Refactor the parser module\nand add tests"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = env.run(&provider.base_url(), &["sessions", "list"]);
    assert_eq!(o.status.code(), Some(0));
    let out = stdout(&o);
    let mut lines = out.lines();
    let header = lines.next().unwrap();
    for col in ["ID", "TITLE", "WHEN", "MSGS", "STATUS", "DIRECTORY"] {
        assert!(header.contains(col), "{header}");
    }
    let row = lines.next().unwrap();
    assert!(
        row.contains("Refactor the parser module"),
        "title from the first line: {row}"
    );
    assert!(row.contains("just now"), "{row}");
    assert!(row.contains(" 2 "), "two messages: {row}");
    assert!(
        row.contains("ended"),
        "a finished one-shot is not left active: {row}"
    );
    let work = env.work.path().display().to_string();
    let shown_dir = row.split_whitespace().last().unwrap();
    assert!(
        work.ends_with(shown_dir.trim_start_matches('~')),
        "{row} vs {work}"
    );
}

#[test]
fn show_export_rename_and_delete_take_an_id_or_a_prefix() {
    let env = Env::new();
    std::fs::write(env.work.path().join("a.txt"), "alpha\n").unwrap();
    let provider = FakeProvider::start(vec![
        Reply::tool("c1", "read_file", r#"{"path":"a.txt"}"#),
        Reply::text("It says **alpha**."),
        Reply::text("second session"),
    ])
    .unwrap();
    let url = provider.base_url();
    assert_eq!(env.run(&url, &["-z", "read a.txt"]).status.code(), Some(0));
    let id = env.session_ids()[0].clone();
    let prefix = &id[..id.len() - 2];

    let o = env.run(&url, &["sessions", "show", prefix]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    for part in [
        "read a.txt",
        "── you",
        "── hermes",
        "It says **alpha**.",
        "read_file",
        "alpha",
    ] {
        assert!(out.contains(part), "show lacks {part:?}: {out}");
    }

    let o = env.run(&url, &["sessions", "export", prefix, "--format", "md"]);
    assert_eq!(o.status.code(), Some(0));
    let md = stdout(&o);
    assert!(md.starts_with("# read a.txt\n"), "{md}");
    assert!(
        md.contains("## You\n\nread a.txt") && md.contains("## Hermes\n\nIt says **alpha**."),
        "{md}"
    );
    assert!(md.contains("**Tool call** `read_file`"), "{md}");

    let out_file = env.work.path().join("s.json");
    let o = env.run(
        &url,
        &[
            "sessions",
            "export",
            &id,
            "-f",
            "json",
            "-o",
            out_file.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    assert_eq!(doc["id"], id.as_str());
    let messages = doc["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4);
    assert_eq!(
        messages[1]["tool_calls"][0]["function"]["name"],
        "read_file"
    );
    assert_eq!(messages[2]["role"], "tool");

    let o = env.run(&url, &["sessions", "rename", prefix, "Alpha", "reading"]);
    assert_eq!(o.status.code(), Some(0));
    let list = stdout(&env.run(&url, &["sessions", "list"]));
    assert!(list.contains("Alpha reading"), "{list}");

    // Two sessions share the date prefix: ambiguous, and nothing is deleted.
    assert_eq!(env.run(&url, &["-z", "another"]).status.code(), Some(0));
    let o = env.run(&url, &["sessions", "delete", &id[..4]]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("several sessions"), "{}", stderr(&o));
    assert_eq!(env.session_ids().len(), 2);

    let o = env.run(&url, &["sessions", "delete", prefix]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("Deleted session"), "{}", stdout(&o));
    assert_eq!(env.session_ids().len(), 1);
    let o = env.run(&url, &["sessions", "search", "alpha"]);
    assert!(
        !stdout(&o).contains(&id),
        "deleted messages are not found: {}",
        stdout(&o)
    );
    let o = env.run(&url, &["sessions", "show", &id]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn a_failed_turn_leaves_no_empty_session_and_no_two_user_messages_in_a_row() {
    let env = Env::new();
    let provider = FakeProvider::start(vec![
        Reply::Status(400, "bad request".into()),
        Reply::text("first answer"),
        Reply::Status(400, "bad again".into()),
        Reply::text("second answer"),
    ])
    .unwrap();
    let url = provider.base_url();
    let o = env.run(&url, &["-z", "fails"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        env.session_ids().is_empty(),
        "no 1-message session left behind"
    );

    assert_eq!(env.run(&url, &["-z", "works"]).status.code(), Some(0));
    let o = env.run(&url, &["-c", "-z", "fails in a session"]);
    assert_eq!(o.status.code(), Some(1));
    let o = env.run(&url, &["-c", "-z", "resumed"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let last = provider.requests().pop().unwrap();
    assert_eq!(roles(&last), ["system", "user", "assistant", "user"]);
    assert_eq!(last["messages"][3]["content"], "resumed");
}
