//! Every tool's output over the loop's cap is kept (SPEC Y6), not only the
//! terminal's: the registry's keeper writes it whole to
//! `$HERMES_HOME/tool-output/<session id>/` before the core cuts it, and
//! `read_file` reads it back in ranges — in that session only.

use std::sync::Arc;

use hermes_core::context::{ContextConfig, ContextWindow, WindowSource};
use hermes_core::*;
use hermes_runtime::spill::session_dir;
use hermes_runtime::tools::{ToolEnv, build_registry};
use serde_json::json;

use super::support::Fx;

const SESSION_A: &str = "20261202_054300_aaaaaa";
const SESSION_B: &str = "20261202_054301_bbbbbb";

/// Reads `big.txt` once, then answers.
struct ReadThenAnswer;

impl Model for ReadThenAnswer {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        _sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let called = request
            .messages
            .iter()
            .any(|e| matches!(e.message, Message::Tool { .. }));
        Ok(if called {
            Completion {
                content: Some("done".into()),
                finish_reason: Some(FinishReason::Stop),
                ..Completion::default()
            }
        } else {
            Completion {
                tool_calls: vec![ToolCall::new(
                    "c1",
                    "read_file",
                    r#"{"path": "big.txt", "limit": 1500}"#,
                )],
                finish_reason: Some(FinishReason::ToolCalls),
                ..Completion::default()
            }
        })
    }
}

fn session_fixture(session: &'static str) -> Fx {
    Fx::with(
        move |e| e.tool_output_dir = Some(session_dir(&e.hermes_home, session)),
        Some(&["file"]),
    )
}

/// The path the note names.
fn kept_path(out: &str) -> String {
    let start = out.find(" is saved in ").expect(out) + " is saved in ".len();
    let rest = &out[start..];
    rest[..rest.find(": read any part").expect(out)].to_owned()
}

#[test]
fn a_read_file_result_over_the_window_cap_is_kept_in_the_sessions_folder() {
    let fx = session_fixture(SESSION_A);
    let big: String = (1..=1500)
        .map(|n| format!("row {n:05} of the file\n"))
        .collect();
    fx.write("big.txt", &big);
    let mut env = ToolEnv::new(fx.work.path(), fx.home.path());
    env.tool_output_dir = Some(session_dir(fx.home.path(), SESSION_A));
    let tools = build_registry(&env, Some(&["file".to_owned()])).unwrap();
    // A 4k window: one result may take about 1000 tokens.
    let agent = Agent::new(Arc::new(ReadThenAnswer), Arc::new(tools), "sys").with_context(
        ContextConfig::new(Arc::new(ContextWindow::new(
            4_000,
            WindowSource::Configured,
        ))),
    );
    let out = agent.run_conversation("read it", Vec::new());
    assert_eq!(out.stop, StopReason::Completed);
    let result = out
        .messages
        .iter()
        .find_map(|e| match &e.message {
            Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap();
    assert!(result.len() < 6_000, "{} bytes", result.len());
    assert!(result.contains("row 00001"), "the head: {result}");
    assert!(result.contains("row 01500"), "the tail: {result}");
    assert!(!result.contains("row 01000"), "the middle is out: {result}");
    let path = kept_path(&result);
    let folder = fx
        .home
        .path()
        .canonicalize()
        .unwrap()
        .join("tool-output")
        .join(SESSION_A);
    assert!(
        std::path::Path::new(&path).starts_with(&folder),
        "{path} in {}",
        folder.display()
    );
    assert!(path.contains("/read_file-"), "{path}");
    let saved = std::fs::read_to_string(&path).unwrap();
    assert!(saved.contains("row 01000 of the file"), "kept whole");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let dir_mode = std::fs::metadata(&folder).unwrap().permissions().mode();
    assert_eq!(dir_mode & 0o777, 0o700);

    // The same session reads the middle back in ranges.
    let middle = fx.ok(
        "read_file",
        json!({"path": path, "offset": 1000, "limit": 2}),
    );
    assert!(middle.contains("row 01000"), "{middle}");
    assert!(!middle.contains("row 01003"), "{middle}");

    // Another session (another registry over the same home) may not.
    let other = Fx::with(
        |e| {
            e.hermes_home = fx.home.path().to_path_buf();
            e.tool_output_dir = Some(session_dir(fx.home.path(), SESSION_B));
        },
        Some(&["file"]),
    );
    let folder_b = fx.home.path().join("tool-output").join(SESSION_B);
    // B has kept outputs of its own, so the `..` below resolves.
    std::fs::create_dir_all(&folder_b).unwrap();
    for attack in [
        path.clone(),
        // Lexically in B's folder, really in A's.
        format!("{}/../{SESSION_A}/{}", folder_b.display(), {
            std::path::Path::new(&path)
                .file_name()
                .unwrap()
                .to_string_lossy()
        }),
    ] {
        let err = other.err("read_file", json!({"path": attack}));
        assert!(
            err.contains("refused") || err.contains("outside"),
            "{attack}: {err}"
        );
        assert!(!err.contains("row 0"), "{err}");
    }
    let err = other.err(
        "search_files",
        json!({"pattern": "row 01000", "path": folder.display().to_string()}),
    );
    assert!(!err.contains("row 01000 of"), "{err}");
}

#[test]
fn a_session_id_cannot_lead_out_of_tool_output() {
    let home = std::path::Path::new("/h");
    for (id, want) in [
        (SESSION_A, SESSION_A),
        ("../../etc", "______etc"),
        ("a/b", "a_b"),
        ("", "_"),
        ("..", "__"),
    ] {
        assert_eq!(
            session_dir(home, id),
            home.join("tool-output").join(want),
            "{id}"
        );
    }
}

#[test]
fn a_tools_own_cap_keeps_the_whole_result_too() {
    // search_files cuts at the tool result cap (4000 bytes here), before
    // the loop sees the result: the whole of it is kept all the same.
    let fx = Fx::with(
        |e| {
            e.result_cap_bytes = 4_000;
            e.tool_output_dir = Some(session_dir(&e.hermes_home, SESSION_A));
        },
        Some(&["file"]),
    );
    let lines: String = (1..=1000).map(|n| format!("needle {n:05}\n")).collect();
    fx.write("hay.txt", &lines);
    let out = fx.ok("search_files", json!({"pattern": "needle", "limit": 1000}));
    assert!(out.len() <= 4_000, "{} bytes", out.len());
    assert!(out.contains("needle 00001"), "{out}");
    assert!(out.contains("needle 01000"), "the tail: {out}");
    let path = kept_path(&out);
    assert!(
        path.contains(&format!("/tool-output/{SESSION_A}/search_files-")),
        "{path}"
    );
    let saved = std::fs::read_to_string(&path).unwrap();
    assert!(saved.contains("needle 00500"), "kept whole");
    // Without a folder, the cut is the marker alone, as before.
    let plain = Fx::with(|e| e.result_cap_bytes = 4_000, Some(&["file"]));
    plain.write("hay.txt", &lines);
    let out = plain.ok("search_files", json!({"pattern": "needle", "limit": 1000}));
    assert!(out.contains("[output truncated: "), "{out}");
    assert!(!out.contains("is saved in"), "{out}");
}
