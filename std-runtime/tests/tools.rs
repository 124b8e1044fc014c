//! The built-in tools, through the registry the agent loop uses: happy paths,
//! error paths, confinement, truncation, real processes and a loopback HTTP
//! server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hermes_core::{
    ChatRequest, Completion, FinishReason, InterruptFlag, IterationBudget, Model, ModelError,
    StreamSink, ToolCall, ToolContext, ToolError, ToolRegistry,
};
use hermes_runtime::tools::{
    TOOLSETS, ToolEnv, ToolsError, build_registry, child_env, html_to_text,
};
use serde_json::{Value, json};
use tempfile::TempDir;

struct Fx {
    work: TempDir,
    home: TempDir,
    reg: ToolRegistry,
    budget: IterationBudget,
    interrupt: InterruptFlag,
}

impl Fx {
    fn with(configure: impl FnOnce(&mut ToolEnv), toolsets: Option<&[&str]>) -> Fx {
        let work = TempDir::new().unwrap();
        let home = TempDir::new().unwrap();
        let mut env = ToolEnv::new(work.path(), home.path());
        configure(&mut env);
        let sets: Option<Vec<String>> = toolsets.map(|s| s.iter().map(|x| x.to_string()).collect());
        let reg = build_registry(&env, sets.as_deref()).unwrap();
        Fx {
            work,
            home,
            reg,
            budget: IterationBudget::new(90),
            interrupt: InterruptFlag::new(),
        }
    }

    fn new() -> Fx {
        Fx::with(|_| {}, None)
    }

    fn call(&self, name: &str, args: Value) -> Result<String, ToolError> {
        let ctx = ToolContext {
            budget: &self.budget,
            interrupt: &self.interrupt,
            tool_call_id: "call_1",
        };
        self.reg.dispatch(name, &args.to_string(), &ctx)
    }

    fn ok(&self, name: &str, args: Value) -> String {
        match self.call(name, args) {
            Ok(s) => s,
            Err(e) => panic!("{name} failed: {e}"),
        }
    }

    fn err(&self, name: &str, args: Value) -> String {
        match self.call(name, args) {
            Ok(s) => panic!("{name} unexpectedly succeeded: {s}"),
            Err(ToolError::Failed(m)) => m,
            Err(ToolError::Abort(m)) => panic!("{name} aborted: {m}"),
        }
    }

    fn path(&self, rel: &str) -> std::path::PathBuf {
        self.work.path().join(rel)
    }

    fn write(&self, rel: &str, content: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
}

// ---------------------------------------------------------------- registry

#[test]
fn registry_holds_every_toolset_it_can_support() {
    let fx = Fx::new();
    let names: Vec<&str> = fx.reg.names().collect();
    // No delegate model: delegate is left out (web needs no async bridge).
    assert_eq!(
        names,
        [
            "read_file",
            "write_file",
            "patch",
            "search_files",
            "terminal",
            "web_fetch",
            "web_search",
            "memory",
            "todo"
        ]
    );
    for (set, tools) in TOOLSETS {
        for t in *tools {
            if *set != "delegate" {
                assert!(names.contains(t), "{t} of {set} missing");
            }
        }
    }
    for spec in fx.reg.specs() {
        assert_eq!(spec.parameters["type"], "object", "{}", spec.name);
        assert!(!spec.description.is_empty());
    }
}

#[test]
fn unknown_toolset_is_an_error_listing_valid_ones() {
    let work = TempDir::new().unwrap();
    let env = ToolEnv::new(work.path(), work.path());
    let err = build_registry(&env, Some(&["file".into(), "browser".into()])).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ToolsError::UnknownToolset { .. }));
    assert!(msg.contains("browser"), "{msg}");
    assert!(
        msg.contains("file, terminal, web, memory, todo, delegate"),
        "{msg}"
    );
}

#[test]
fn explicit_delegate_without_model_is_an_error_and_web_needs_no_bridge() {
    let work = TempDir::new().unwrap();
    let env = ToolEnv::new(work.path(), work.path());
    let err = build_registry(&env, Some(&["delegate".into()])).unwrap_err();
    assert!(matches!(err, ToolsError::Unavailable { .. }), "{err}");
    assert!(err.to_string().contains("delegate"), "{err}");
    // web_fetch is a blocking exchange on the shared HTTP agent: no async
    // runtime needed.
    let registry = build_registry(&env, Some(&["web".into()])).unwrap();
    assert!(registry.get("web_fetch").is_some());
}

#[test]
fn missing_workdir_is_an_error() {
    let work = TempDir::new().unwrap();
    let env = ToolEnv::new(work.path().join("nope"), work.path());
    let err = build_registry(&env, None).unwrap_err();
    assert!(matches!(err, ToolsError::Workdir { .. }), "{err}");
}

#[test]
fn selected_toolsets_only() {
    let fx = Fx::with(|_| {}, Some(&["todo", "memory", "todo"]));
    let names: Vec<&str> = fx.reg.names().collect();
    assert_eq!(names, ["todo", "memory"]);
}

#[test]
fn bad_arguments_name_the_field() {
    let fx = Fx::new();
    let m = fx.err("read_file", json!({}));
    assert!(m.contains("path"), "{m}");
    let m = fx.err("read_file", json!({"path": "a", "offset": "ten"}));
    assert!(m.contains("offset"), "{m}");
    let m = fx.err("terminal", json!({"command": 5}));
    assert!(m.contains("command"), "{m}");
    let m = fx.err(
        "search_files",
        json!({"pattern": "x", "target": "everything"}),
    );
    assert!(m.contains("target"), "{m}");
    let m = fx.err("memory", json!({"action": "forget"}));
    assert!(m.contains("action"), "{m}");
}

// ---------------------------------------------------------------- read_file

#[test]
fn read_file_numbers_lines_and_pages() {
    let fx = Fx::new();
    let body: String = (1..=30).map(|i| format!("line {i}\n")).collect();
    fx.write("a.txt", &body);
    let out = fx.ok(
        "read_file",
        json!({"path": "a.txt", "offset": 12, "limit": 3}),
    );
    assert!(
        out.starts_with("    12|line 12\n    13|line 13\n    14|line 14\n"),
        "{out}"
    );
    assert!(
        out.contains("[showing lines 12-14 of 30; use offset=15 to read more]"),
        "{out}"
    );
    let all = fx.ok("read_file", json!({"path": "a.txt"}));
    assert!(all.contains("     1|line 1\n"));
    assert!(all.contains("    30|line 30\n"));
    assert!(!all.contains("showing lines"));
}

#[test]
fn read_file_errors_are_clear() {
    let fx = Fx::new();
    let m = fx.err("read_file", json!({"path": "missing.txt"}));
    assert!(
        m.contains("missing.txt") && m.contains("no such file"),
        "{m}"
    );
    std::fs::write(fx.path("bin.dat"), [0x89, b'P', b'N', b'G', 0, 0, 1, 2]).unwrap();
    let m = fx.err("read_file", json!({"path": "bin.dat"}));
    assert!(m.contains("binary file"), "{m}");
    std::fs::create_dir(fx.path("dir")).unwrap();
    let m = fx.err("read_file", json!({"path": "dir"}));
    assert!(m.contains("is a directory"), "{m}");
    fx.write("short.txt", "one\ntwo\n");
    let m = fx.err("read_file", json!({"path": "short.txt", "offset": 9}));
    assert!(m.contains("has 2 lines"), "{m}");
    let m = fx.err("read_file", json!({"path": "short.txt", "offset": 0}));
    assert!(m.contains("1-based"), "{m}");
}

#[test]
fn read_file_cuts_visibly_on_a_char_boundary() {
    let fx = Fx::with(|e| e.result_cap_bytes = 1000, None);
    let body: String = (1..=500).map(|i| format!("é€ line {i}\n")).collect();
    fx.write("big.txt", &body);
    let out = fx.ok("read_file", json!({"path": "big.txt"}));
    assert!(out.len() <= 1000, "{} bytes", out.len());
    assert!(out.contains("…\n[output truncated: "), "{out}");
    assert!(out.contains("more bytes; use offset/limit"), "{out}");
    assert!(out.starts_with("     1|é€ line 1\n"));
}

// ---------------------------------------------------------------- write_file / patch

#[test]
fn write_file_creates_parents_and_reports_bytes() {
    let fx = Fx::new();
    let out = fx.ok(
        "write_file",
        json!({"path": "deep/er/x.txt", "content": "héllo\nworld\n"}),
    );
    assert!(out.contains("Created 'deep/er/x.txt'"), "{out}");
    assert!(out.contains("wrote 13 bytes"), "{out}");
    assert_eq!(
        std::fs::read_to_string(fx.path("deep/er/x.txt")).unwrap(),
        "héllo\nworld\n"
    );
    let out = fx.ok(
        "write_file",
        json!({"path": "deep/er/x.txt", "content": "new"}),
    );
    assert!(out.starts_with("Replaced"), "{out}");
    assert_eq!(
        std::fs::read_to_string(fx.path("deep/er/x.txt")).unwrap(),
        "new"
    );
    let m = fx.err("write_file", json!({"path": "deep"}));
    assert!(m.contains("content"), "{m}");
}

#[test]
fn patch_replaces_unique_text() {
    let fx = Fx::new();
    fx.write("src.rs", "fn a() {}\nfn b() {\n    old();\n}\n");
    let out = fx.ok(
        "patch",
        json!({"path": "src.rs", "old_string": "    old();", "new_string": "    new();"}),
    );
    assert!(
        out.contains("replaced 1 occurrence (first at line 3)"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(fx.path("src.rs")).unwrap(),
        "fn a() {}\nfn b() {\n    new();\n}\n"
    );
}

#[test]
fn patch_absent_text_gives_a_hint() {
    let fx = Fx::new();
    fx.write("src.rs", "fn main() {\n\tprintln!(\"hi\");\n}\n");
    let m = fx.err(
        "patch",
        json!({"path": "src.rs", "old_string": "    println!(\"hi\");", "new_string": "x"}),
    );
    assert!(m.contains("not found"), "{m}");
    assert!(m.contains("whitespace is ignored (near line 2)"), "{m}");
    let m = fx.err(
        "patch",
        json!({"path": "src.rs", "old_string": "fn mian() {", "new_string": "x"}),
    );
    assert!(m.contains("Nearest line: 1: fn main() {"), "{m}");
    // Nothing was written.
    assert_eq!(
        std::fs::read_to_string(fx.path("src.rs")).unwrap(),
        "fn main() {\n\tprintln!(\"hi\");\n}\n"
    );
}

#[test]
fn patch_ambiguous_needs_replace_all() {
    let fx = Fx::new();
    fx.write("t.txt", "x = 1\ny = 2\nx = 1\nx = 1\n");
    let m = fx.err(
        "patch",
        json!({"path": "t.txt", "old_string": "x = 1", "new_string": "x = 9"}),
    );
    assert!(m.contains("occurs 3 times"), "{m}");
    assert!(m.contains("lines 1, 3, 4"), "{m}");
    assert!(m.contains("replace_all"), "{m}");
    let out = fx.ok(
        "patch",
        json!({"path": "t.txt", "old_string": "x = 1", "new_string": "x = 9", "replace_all": true}),
    );
    assert!(out.contains("replaced 3 occurrences"), "{out}");
    assert_eq!(
        std::fs::read_to_string(fx.path("t.txt")).unwrap(),
        "x = 9\ny = 2\nx = 9\nx = 9\n"
    );
    let m = fx.err(
        "patch",
        json!({"path": "t.txt", "old_string": "", "new_string": "a"}),
    );
    assert!(m.contains("old_string' is empty"), "{m}");
}

// ---------------------------------------------------------------- confinement

#[test]
fn confinement_refuses_dotdot_absolute_and_symlink_escapes() {
    let outside = TempDir::new().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "top secret\n").unwrap();
    let fx = Fx::new();
    let rel_escape = format!(
        "../{}/secret.txt",
        outside.path().file_name().unwrap().to_string_lossy()
    );

    let m = fx.err("read_file", json!({"path": rel_escape}));
    assert!(m.contains("outside the working directory"), "{m}");
    assert!(m.contains("allow_outside_workdir"), "{m}");

    let abs = outside.path().join("secret.txt");
    let m = fx.err("read_file", json!({"path": abs}));
    assert!(m.contains("outside the working directory"), "{m}");

    std::os::unix::fs::symlink(outside.path(), fx.path("link")).unwrap();
    let m = fx.err("read_file", json!({"path": "link/secret.txt"}));
    assert!(m.contains("outside the working directory"), "{m}");

    // Writing a new file through the symlinked directory is refused and
    // creates nothing.
    let m = fx.err(
        "write_file",
        json!({"path": "link/new/evil.txt", "content": "x"}),
    );
    assert!(m.contains("outside the working directory"), "{m}");
    assert!(!outside.path().join("new").exists());

    // A new path whose `..` climbs out before existing is refused too.
    let m = fx.err(
        "write_file",
        json!({"path": "fresh/../../evil.txt", "content": "x"}),
    );
    assert!(m.contains("outside the working directory"), "{m}");

    let m = fx.err(
        "patch",
        json!({"path": abs, "old_string": "top", "new_string": "x"}),
    );
    assert!(m.contains("outside"), "{m}");
    let m = fx.err("search_files", json!({"pattern": "secret", "path": "link"}));
    assert!(m.contains("outside"), "{m}");
    let m = fx.err("terminal", json!({"command": "ls", "workdir": ".."}));
    assert!(m.contains("outside"), "{m}");
    assert_eq!(std::fs::read_to_string(&abs).unwrap(), "top secret\n");
}

#[test]
fn confinement_refuses_a_dangling_symlink() {
    let outside = TempDir::new().unwrap();
    let fx = Fx::new();
    let target = outside.path().join("not-yet.txt");
    std::os::unix::fs::symlink(&target, fx.path("dangling")).unwrap();
    let m = fx.err("write_file", json!({"path": "dangling", "content": "x"}));
    assert!(m.contains("symbolic link") || m.contains("outside"), "{m}");
    assert!(!target.exists());
}

#[test]
fn paths_inside_the_workdir_are_fine() {
    let fx = Fx::new();
    fx.write("sub/a.txt", "inside\n");
    let out = fx.ok("read_file", json!({"path": "sub/../sub/a.txt"}));
    assert!(out.contains("|inside"), "{out}");
    let abs = fx.path("sub/a.txt");
    let out = fx.ok("read_file", json!({"path": abs}));
    assert!(out.contains("|inside"), "{out}");
    fx.ok(
        "write_file",
        json!({"path": "new/../b.txt", "content": "b"}),
    );
    assert_eq!(std::fs::read_to_string(fx.path("b.txt")).unwrap(), "b");
    std::os::unix::fs::symlink(fx.path("sub"), fx.path("inner-link")).unwrap();
    let out = fx.ok("read_file", json!({"path": "inner-link/a.txt"}));
    assert!(out.contains("|inside"), "{out}");
}

#[test]
fn allow_outside_workdir_permits_escapes() {
    let outside = TempDir::new().unwrap();
    std::fs::write(outside.path().join("f.txt"), "out there\n").unwrap();
    let fx = Fx::with(|e| e.allow_outside_workdir = true, None);
    let out = fx.ok("read_file", json!({"path": outside.path().join("f.txt")}));
    assert!(out.contains("|out there"), "{out}");
}

// ---------------------------------------------------------------- search_files

#[test]
fn search_content_with_regex_glob_and_gitignore() {
    let fx = Fx::new();
    fx.write("src/main.rs", "fn main() {\n    let answer = 42;\n}\n");
    fx.write("src/lib.rs", "pub fn answer() -> u32 { 42 }\n");
    fx.write("notes.md", "the answer is 42\n");
    fx.write("ignored.log", "answer 42\n");
    fx.write(".gitignore", "ignored.log\n");
    std::fs::write(fx.path("blob.bin"), b"answer\0\x01\x02 42").unwrap();

    let out = fx.ok("search_files", json!({"pattern": r"answer\D*42"}));
    assert!(out.contains("notes.md:1: the answer is 42"), "{out}");
    assert!(out.contains("src/main.rs:2:     let answer = 42;"), "{out}");
    assert!(!out.contains("ignored.log"), "{out}");
    assert!(!out.contains("blob.bin"), "{out}");

    let out = fx.ok(
        "search_files",
        json!({"pattern": "answer", "file_glob": "*.rs"}),
    );
    assert!(out.contains("src/lib.rs:1:"), "{out}");
    assert!(out.contains("src/main.rs:2:"), "{out}");
    assert!(!out.contains("notes.md"), "{out}");

    let out = fx.ok("search_files", json!({"pattern": "answer", "path": "src"}));
    assert!(!out.contains("notes.md"), "{out}");

    let out = fx.ok("search_files", json!({"pattern": "nothing-like-this"}));
    assert!(out.starts_with("No matches"), "{out}");

    let m = fx.err("search_files", json!({"pattern": "(unclosed"}));
    assert!(m.contains("not a valid regular expression"), "{m}");
}

#[test]
fn search_file_names_and_limits() {
    let fx = Fx::new();
    for i in 0..12 {
        fx.write(&format!("d/f{i:02}.py"), "x\n");
    }
    fx.write("d/readme.md", "x\n");
    let out = fx.ok(
        "search_files",
        json!({"pattern": "*.py", "target": "files", "limit": 5}),
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        &lines[..5],
        ["d/f00.py", "d/f01.py", "d/f02.py", "d/f03.py", "d/f04.py"]
    );
    assert!(out.contains("[7 more files not shown"), "{out}");
    let out = fx.ok(
        "search_files",
        json!({"pattern": "d/*.md", "target": "files"}),
    );
    assert_eq!(out.trim(), "d/readme.md");
    let m = fx.err("search_files", json!({"pattern": "[", "target": "files"}));
    assert!(m.contains("not a valid glob"), "{m}");
}

// ---------------------------------------------------------------- terminal

#[test]
fn terminal_merges_output_and_reports_exit_code() {
    let fx = Fx::new();
    let out = fx.ok(
        "terminal",
        json!({"command": "echo one; echo two >&2; echo three; exit 3"}),
    );
    assert_eq!(out, "one\ntwo\nthree\n[exit code: 3]");
    std::fs::create_dir(fx.path("sub")).unwrap();
    let out = fx.ok("terminal", json!({"command": "pwd", "workdir": "sub"}));
    assert!(
        out.trim_end_matches("[exit code: 0]")
            .trim()
            .ends_with("/sub"),
        "{out}"
    );
    let out = fx.ok("terminal", json!({"command": "true"}));
    assert_eq!(out, "[exit code: 0]");
    let m = fx.err("terminal", json!({"command": "ls", "timeout": 601}));
    assert!(m.contains("between 1 and 600"), "{m}");
    let m = fx.err("terminal", json!({"command": "  "}));
    assert!(m.contains("empty"), "{m}");
}

#[test]
fn terminal_interrupt_kills_the_command() {
    let fx = Fx::new();
    let flag = fx.interrupt.clone();
    let setter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        flag.interrupt();
    });
    let out = fx.ok("terminal", json!({"command": "sleep 300", "timeout": 600}));
    setter.join().unwrap();
    assert!(
        out.contains("[interrupted; it and every process it started were killed]"),
        "{out}"
    );
}

#[test]
fn terminal_caps_output_keeping_head_and_tail() {
    let fx = Fx::with(|e| e.result_cap_bytes = 2000, None);
    let out = fx.ok("terminal", json!({"command": "seq 1 100000"}));
    assert!(out.len() <= 2000, "{} bytes", out.len());
    assert!(out.starts_with("1\n2\n3\n"), "{out}");
    assert!(out.contains("[output truncated: "), "{out}");
    assert!(out.contains("bytes omitted from the middle"), "{out}");
    assert!(out.ends_with("99999\n100000\n[exit code: 0]"), "{out}");
}

#[test]
fn child_env_is_an_allow_list_plus_home_tmpdir_and_pass_through() {
    let parent: Vec<(std::ffi::OsString, std::ffi::OsString)> = vec![
        ("PATH".into(), "/bin".into()),
        ("FOO_API_KEY".into(), "sekrit".into()),
        ("MYSQL_PWD".into(), "hunter2".into()),
        ("PGPASSWORD".into(), "pg".into()),
        ("HTTPS_PROXY".into(), "http://u:p@proxy:3128".into()),
        ("HOME".into(), "/root".into()),
        ("LANG".into(), "C.UTF-8".into()),
        ("LC_ALL".into(), "C".into()),
        ("CARGO_HOME".into(), "/c".into()),
        ("CARGO_TARGET_DIR".into(), "/t".into()),
        ("EDITOR".into(), "vi".into()),
    ];
    let env = child_env(
        parent,
        &["EDITOR".into(), "CARGO_*".into()],
        Path::new("/work"),
        Some(Path::new("/tmp/x")),
    );
    let names: Vec<String> = env
        .iter()
        .map(|(n, v)| format!("{}={}", n.to_string_lossy(), v.to_string_lossy()))
        .collect();
    assert_eq!(
        names,
        [
            "CARGO_HOME=/c",
            "CARGO_TARGET_DIR=/t",
            "EDITOR=vi",
            "HOME=/work",
            "LANG=C.UTF-8",
            "LC_ALL=C",
            "PATH=/bin",
            "TMPDIR=/tmp/x"
        ]
    );
}

// ---------------------------------------------------------------- web_fetch

/// A loopback HTTP/1.1 server with canned answers; one request per
/// connection. Returns the base URL.
fn serve() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                stream
                    .set_read_timeout(Some(Duration::from_secs(30)))
                    .unwrap();
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let req = String::from_utf8_lossy(&req);
                let path = req.split_whitespace().nth(1).unwrap_or("/").to_string();
                if path == "/silent" {
                    // Answers nothing until the client goes away.
                    let _ = stream.read(&mut buf);
                    return;
                }
                let (status, ctype, body): (&str, &str, Vec<u8>) = match path.as_str() {
                    "/page.html" => (
                        "200 OK",
                        "text/html; charset=utf-8",
                        br#"<!DOCTYPE html><html><head><title>Test &amp; Page</title>
<style>body { color: red; }</style><script>var x = "<p>not text</p>";</script></head>
<body><h1>Hello   World</h1><p>Caf&eacute; &lt;3 &#8212; &#x263A;</p>
<!-- a comment --><ul><li>one</li><li>two</li></ul>
<p>a<br>b</p></body></html>"#
                            .to_vec(),
                    ),
                    "/plain.txt" => (
                        "200 OK",
                        "text/plain",
                        b"just   text\n  kept as is\n".to_vec(),
                    ),
                    "/image.png" => (
                        "200 OK",
                        "image/png",
                        vec![0x89, b'P', b'N', b'G', 0, 0, 0, 13],
                    ),
                    "/big.txt" => ("200 OK", "text/plain", vec![b'a'; 200_000]),
                    "/redirect" | "/loop" => ("302 Found", "text/plain", Vec::new()),
                    "/caf%C3%A9%20menu" => ("200 OK", "text/plain", b"encoded".to_vec()),
                    _ => ("404 Not Found", "text/plain", b"no such page".to_vec()),
                };
                let mut head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n",
                    body.len()
                );
                if path == "/redirect" {
                    head.push_str("Location: /plain.txt\r\n");
                }
                if path == "/loop" {
                    head.push_str("Location: /loop\r\n");
                }
                head.push_str("\r\n");
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(&body);
            });
        }
    });
    format!("http://{addr}")
}

fn web_fx() -> Fx {
    Fx::with(|_| {}, Some(&["web"]))
}

#[test]
fn web_fetch_reduces_html() {
    let base = serve();
    let fx = web_fx();
    let out = fx.ok("web_fetch", json!({"url": format!("{base}/page.html")}));
    assert!(
        out.starts_with(&format!("URL: {base}/page.html\n")),
        "{out}"
    );
    let text = out.split_once("\n\n").unwrap().1;
    assert_eq!(
        text,
        "Test & Page\n\nHello World\n\nCafé <3 — ☺\n\n- one\n- two\n\na\nb"
    );
    assert!(!out.contains("color: red"));
    assert!(!out.contains("not text"));
}

#[test]
fn web_fetch_text_redirects_and_errors() {
    let base = serve();
    let fx = web_fx();
    let out = fx.ok("web_fetch", json!({"url": format!("{base}/plain.txt")}));
    assert!(out.ends_with("\n\njust   text\n  kept as is\n"), "{out}");
    let out = fx.ok("web_fetch", json!({"url": format!("{base}/redirect")}));
    assert!(
        out.starts_with(&format!("URL: {base}/plain.txt\n")),
        "{out}"
    );

    let m = fx.err("web_fetch", json!({"url": format!("{base}/image.png")}));
    assert!(m.contains("binary content (image/png"), "{m}");
    let m = fx.err("web_fetch", json!({"url": format!("{base}/missing")}));
    assert!(m.contains("HTTP 404") && m.contains("no such page"), "{m}");
    let m = fx.err("web_fetch", json!({"url": "file:///etc/passwd"}));
    assert!(m.contains("only http and https"), "{m}");
    let m = fx.err("web_fetch", json!({"url": "ftp://example.invalid/x"}));
    assert!(m.contains("only http and https"), "{m}");
    let m = fx.err("web_fetch", json!({"url": "not a url"}));
    assert!(m.contains("not a valid URL"), "{m}");
}

#[test]
fn web_fetch_size_caps() {
    let base = serve();
    let fx = web_fx();
    let out = fx.ok(
        "web_fetch",
        json!({"url": format!("{base}/big.txt"), "max_bytes": 1000}),
    );
    assert!(
        out.contains("[download stopped at 1000 bytes (max_bytes); the page is longer]"),
        "{out}"
    );
    let body = out.split_once("\n\n").unwrap().1;
    assert!(
        body.starts_with(&format!("{}\n[download stopped", "a".repeat(1000))),
        "{body}"
    );

    // Without max_bytes the result cap cuts it, visibly.
    let out = fx.ok("web_fetch", json!({"url": format!("{base}/big.txt")}));
    assert!(out.len() <= hermes_runtime::tools::DEFAULT_RESULT_CAP_BYTES);
    assert!(
        out.contains("[output truncated: "),
        "{}",
        &out[out.len() - 200..]
    );
}

#[test]
fn web_fetch_gives_up_on_a_redirect_loop() {
    let base = serve();
    let fx = web_fx();
    let m = fx.err("web_fetch", json!({"url": format!("{base}/loop")}));
    assert!(m.contains("too many redirects"), "{m}");
}

#[test]
fn web_fetch_encodes_what_http_cannot_carry() {
    let base = serve();
    let fx = web_fx();
    let out = fx.ok("web_fetch", json!({"url": format!("{base}/café menu")}));
    assert!(out.ends_with("\n\nencoded"), "{out}");
}

#[test]
fn web_fetch_stops_within_a_tick_of_an_interrupt() {
    let base = serve();
    let fx = web_fx();
    let flag = fx.interrupt.clone();
    let setter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        flag.interrupt();
    });
    let started = std::time::Instant::now();
    let m = fx.err("web_fetch", json!({"url": format!("{base}/silent")}));
    setter.join().unwrap();
    assert!(m.contains("interrupted"), "{m}");
    // The server never answers; without the interrupt this is the 30 s
    // request timeout.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn web_fetch_unreachable_port_is_a_clear_error() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let fx = web_fx();
    let m = fx.err(
        "web_fetch",
        json!({"url": format!("http://127.0.0.1:{port}/")}),
    );
    assert!(m.contains("fetching") && m.contains("failed"), "{m}");
}

#[test]
fn html_reducer_handles_odd_markup() {
    assert_eq!(html_to_text("a < b and c > d"), "a < b and c > d");
    assert_eq!(html_to_text("<p>unclosed <b>bold"), "unclosed bold");
    assert_eq!(
        html_to_text("<a href=\"x>y\">link</a> &unknown; &amp"),
        "link &unknown; &amp"
    );
    assert_eq!(
        html_to_text("<table><tr><td>a</td><td>b</td></tr></table>"),
        "a | b"
    );
    assert_eq!(html_to_text("<pre>  x\n    y</pre>"), "  x\n    y");
}

// ---------------------------------------------------------------- memory

#[test]
fn memory_add_replace_remove() {
    let fx = Fx::new();
    let out = fx.ok(
        "memory",
        json!({"action": "add", "content": "User prefers tabs."}),
    );
    assert!(
        out.contains("Added the entry in MEMORY.md (1 entries"),
        "{out}"
    );
    fx.ok(
        "memory",
        json!({"action": "add", "content": "Build with `make ci`.\nTests need docker."}),
    );
    let file = fx.home.path().join("MEMORY.md");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "User prefers tabs.\n§\nBuild with `make ci`.\nTests need docker.\n"
    );
    let out = fx.ok(
        "memory",
        json!({"action": "replace", "old_text": "tabs", "content": "User prefers spaces."}),
    );
    assert!(out.contains("Replaced"), "{out}");
    fx.ok("memory", json!({"action": "remove", "old_text": "docker"}));
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "User prefers spaces.\n"
    );
    // No temp files left behind by the atomic writes.
    let names: Vec<String> = std::fs::read_dir(fx.home.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["MEMORY.md"]);

    fx.ok(
        "memory",
        json!({"action": "add", "target": "user", "content": "Name: Ada."}),
    );
    assert_eq!(
        std::fs::read_to_string(fx.home.path().join("USER.md")).unwrap(),
        "Name: Ada.\n"
    );
}

#[test]
fn memory_errors() {
    let fx = Fx::new();
    fx.ok("memory", json!({"action": "add", "content": "alpha one"}));
    fx.ok("memory", json!({"action": "add", "content": "alpha two"}));
    let m = fx.err("memory", json!({"action": "remove", "old_text": "alpha"}));
    assert!(m.contains("matches 2 entries"), "{m}");
    let m = fx.err("memory", json!({"action": "remove", "old_text": "gamma"}));
    assert!(m.contains("no entry in MEMORY.md contains 'gamma'"), "{m}");
    let m = fx.err("memory", json!({"action": "replace", "old_text": "one"}));
    assert!(m.contains("'content' is required"), "{m}");
    let m = fx.err("memory", json!({"action": "add", "content": "a\n§\nb"}));
    assert!(m.contains("separates entries"), "{m}");
    let m = fx.err("memory", json!({"action": "add"}));
    assert!(m.contains("content"), "{m}");
    let before = std::fs::read_to_string(fx.home.path().join("MEMORY.md")).unwrap();
    let big = "x".repeat(5000);
    fx.ok("memory", json!({"action": "add", "content": big}));
    let m = fx.err(
        "memory",
        json!({"action": "add", "content": "y".repeat(5000)}),
    );
    assert!(m.contains("MEMORY.md is full"), "{m}");
    assert!(m.contains("8192"), "{m}");
    // The failed add changed nothing.
    let after = std::fs::read_to_string(fx.home.path().join("MEMORY.md")).unwrap();
    assert_eq!(after, format!("{}§\n{}\n", before, "x".repeat(5000)));
}

// ---------------------------------------------------------------- todo

#[test]
fn todo_list_per_session() {
    let fx = Fx::new();
    assert_eq!(
        fx.ok("todo", json!({"action": "list"})),
        "Todo list is empty."
    );
    let out = fx.ok(
        "todo",
        json!({"action": "add", "items": ["read code", "write tests", "ship"]}),
    );
    assert_eq!(
        out,
        "Todo (0/3 done):\n[ ] 1. read code\n[ ] 2. write tests\n[ ] 3. ship"
    );
    fx.ok(
        "todo",
        json!({"action": "update", "id": 1, "status": "completed"}),
    );
    let out = fx.ok(
        "todo",
        json!({"action": "update", "id": 2, "status": "in_progress", "text": "write more tests"}),
    );
    assert_eq!(
        out,
        "Todo (1/3 done):\n[x] 1. read code\n[~] 2. write more tests\n[ ] 3. ship"
    );
    let m = fx.err(
        "todo",
        json!({"action": "update", "id": 7, "status": "completed"}),
    );
    assert!(
        m.contains("no task with id 7") && m.contains("1, 2, 3"),
        "{m}"
    );
    let m = fx.err(
        "todo",
        json!({"action": "update", "id": 1, "status": "done"}),
    );
    assert!(m.contains("status"), "{m}");
    let m = fx.err("todo", json!({"action": "add", "items": []}));
    assert!(m.contains("items"), "{m}");

    // Another session's registry has its own list.
    let other = Fx::new();
    assert_eq!(
        other.ok("todo", json!({"action": "list"})),
        "Todo list is empty."
    );
    assert_eq!(
        fx.ok("todo", json!({"action": "clear"})),
        "Todo list is empty."
    );
}

// ---------------------------------------------------------------- delegate_task

/// A model that calls `todo list` until it has made `steps - 1` calls, then
/// answers. It records what every call offered, and may interrupt at a call.
struct Scripted {
    steps: u32,
    calls: AtomicU32,
    seen: Mutex<Vec<(String, Vec<String>)>>,
    interrupt_at: Option<(u32, InterruptFlag)>,
}

impl Scripted {
    fn new(steps: u32) -> Scripted {
        Scripted {
            steps,
            calls: AtomicU32::new(0),
            seen: Mutex::new(Vec::new()),
            interrupt_at: None,
        }
    }
}

impl Model for Scripted {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        _sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        self.seen.lock().unwrap().push((
            request.system_prompt.to_string(),
            request.tools.iter().map(|t| t.name.clone()).collect(),
        ));
        if let Some((at, flag)) = &self.interrupt_at
            && n == *at
        {
            flag.interrupt();
        }
        if n < self.steps {
            Ok(Completion {
                tool_calls: vec![ToolCall::new(
                    format!("c{n}"),
                    "todo",
                    r#"{"action":"list"}"#,
                )],
                finish_reason: Some(FinishReason::ToolCalls),
                ..Completion::default()
            })
        } else {
            Ok(Completion {
                content: Some("child report: all done".into()),
                finish_reason: Some(FinishReason::Stop),
                ..Completion::default()
            })
        }
    }
}

fn delegate_fx(model: Arc<Scripted>) -> Fx {
    Fx::with(
        move |e| e.delegate_model = Some(model),
        Some(&["todo", "delegate"]),
    )
}

#[test]
fn delegate_draws_from_the_parent_wallet() {
    let model = Arc::new(Scripted::new(15));
    let mut fx = delegate_fx(model.clone());
    fx.budget = IterationBudget::new(100);
    for _ in 0..20 {
        assert!(fx.budget.try_consume());
    }
    assert_eq!(fx.budget.remaining(), 80);

    let out = fx.ok(
        "delegate_task",
        json!({"goal": "Tidy the task list", "context": "Only the todo tool matters."}),
    );
    assert_eq!(
        fx.budget.remaining(),
        65,
        "parent with 80 left, child spent 15"
    );
    assert!(out.starts_with("child report: all done"), "{out}");
    assert!(out.ends_with("[sub-agent used 15 model calls]"), "{out}");

    let seen = model.seen.lock().unwrap();
    assert_eq!(seen.len(), 15);
    for (prompt, tools) in seen.iter() {
        // No recursion: the child cannot delegate.
        assert_eq!(tools, &["todo"]);
        assert!(prompt.contains("sub-agent"), "{prompt}");
    }
}

#[test]
fn delegate_reports_an_exhausted_wallet() {
    let model = Arc::new(Scripted::new(50));
    let mut fx = delegate_fx(model);
    fx.budget = IterationBudget::new(10);
    let out = fx.ok("delegate_task", json!({"goal": "loop forever"}));
    assert_eq!(fx.budget.remaining(), 0);
    assert!(
        out.contains(
            "[sub-agent used 10 model calls; it stopped early: Reached the maximum iteration count"
        ),
        "{out}"
    );
    let m = fx.err("delegate_task", json!({"goal": "again"}));
    assert!(m.contains("budget is used up"), "{m}");
}

#[test]
fn delegate_honours_interrupts() {
    // Already interrupted: the child never starts.
    let model = Arc::new(Scripted::new(3));
    let fx = delegate_fx(model.clone());
    fx.interrupt.interrupt();
    let m = fx.err("delegate_task", json!({"goal": "x"}));
    assert!(
        m.contains("interrupted before the sub-agent started"),
        "{m}"
    );
    assert_eq!(model.calls.load(Ordering::SeqCst), 0);
    assert_eq!(fx.budget.remaining(), 90);

    // Interrupted while the child runs: the child stops and the flag stays
    // set for the parent's own check after the tool call.
    let work = TempDir::new().unwrap();
    let parent_flag = InterruptFlag::new();
    let model = Arc::new(Scripted {
        interrupt_at: Some((2, parent_flag.clone())),
        ..Scripted::new(10)
    });
    let mut env = ToolEnv::new(work.path(), work.path());
    env.delegate_model = Some(model.clone());
    let reg = build_registry(&env, Some(&["todo".into(), "delegate".into()])).unwrap();
    let budget = IterationBudget::new(90);
    let ctx = ToolContext {
        budget: &budget,
        interrupt: &parent_flag,
        tool_call_id: "p1",
    };
    let out = reg
        .dispatch("delegate_task", r#"{"goal":"long job"}"#, &ctx)
        .unwrap();
    assert!(
        out.contains("used 2 model calls; it stopped early: Interrupted."),
        "{out}"
    );
    assert!(parent_flag.is_set());
    assert_eq!(model.calls.load(Ordering::SeqCst), 2);
}

#[test]
fn confinement_applies_to_relative_paths_given_as_absolute_workdir() {
    // The workdir itself may be given through a symlink; paths are checked
    // against its canonical form.
    let real = TempDir::new().unwrap();
    let links = TempDir::new().unwrap();
    let link = links.path().join("wd");
    std::os::unix::fs::symlink(real.path(), &link).unwrap();
    std::fs::write(real.path().join("f.txt"), "via link\n").unwrap();
    let home = TempDir::new().unwrap();
    let env = ToolEnv::new(&link, home.path());
    let reg = build_registry(&env, Some(&["file".into()])).unwrap();
    let budget = IterationBudget::new(1);
    let flag = InterruptFlag::new();
    let ctx = ToolContext {
        budget: &budget,
        interrupt: &flag,
        tool_call_id: "x",
    };
    let out = reg
        .dispatch("read_file", r#"{"path":"f.txt"}"#, &ctx)
        .unwrap();
    assert!(out.contains("|via link"), "{out}");
    let abs = Path::new(&link).join("f.txt");
    let out = reg
        .dispatch("read_file", &json!({"path": abs}).to_string(), &ctx)
        .unwrap();
    assert!(out.contains("|via link"), "{out}");
}

#[test]
fn read_file_cuts_enormous_lines_without_reading_them_whole() {
    let fx = Fx::new();
    let mut body = "x".repeat(1_000_000);
    body.push_str("\nsecond\r\nthird");
    fx.write("min.js", &body);
    let out = fx.ok("read_file", json!({"path": "min.js"}));
    let expected_first = format!(
        "     1|{}… [line cut: 998000 more bytes]\n",
        "x".repeat(2000)
    );
    assert!(out.starts_with(&expected_first), "{}", &out[..100]);
    assert!(out.ends_with("     2|second\n     3|third\n"), "{out}");
}

#[test]
fn confinement_refuses_a_file_symlink_out() {
    let outside = TempDir::new().unwrap();
    std::fs::write(outside.path().join("passwd"), "root:x:0:0\n").unwrap();
    let fx = Fx::new();
    std::os::unix::fs::symlink(outside.path().join("passwd"), fx.path("innocent.txt")).unwrap();
    let m = fx.err("read_file", json!({"path": "innocent.txt"}));
    assert!(m.contains("outside the working directory"), "{m}");
    let m = fx.err(
        "patch",
        json!({"path": "innocent.txt", "old_string": "root", "new_string": "toor"}),
    );
    assert!(m.contains("outside the working directory"), "{m}");
    let m = fx.err(
        "write_file",
        json!({"path": "innocent.txt", "content": "x"}),
    );
    assert!(m.contains("outside the working directory"), "{m}");
    assert_eq!(
        std::fs::read_to_string(outside.path().join("passwd")).unwrap(),
        "root:x:0:0\n"
    );
}

/// Parent and child on one model, told apart by their system prompts.
struct ParentChild {
    parent_calls: AtomicU32,
    child_calls: AtomicU32,
}

impl Model for ParentChild {
    fn complete(
        &self,
        request: &ChatRequest<'_>,
        _sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        let is_child = request.system_prompt.contains("Hermes sub-agent");
        let (counter, tool_call) = if is_child {
            (
                &self.child_calls,
                ToolCall::new("", "todo", r#"{"action":"list"}"#),
            )
        } else {
            (
                &self.parent_calls,
                ToolCall::new("d1", "delegate_task", r#"{"goal":"count to 15"}"#),
            )
        };
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        let last = if is_child { 15 } else { 2 };
        if n < last {
            Ok(Completion {
                tool_calls: vec![tool_call],
                finish_reason: Some(FinishReason::ToolCalls),
                ..Completion::default()
            })
        } else {
            Ok(Completion {
                content: Some(if is_child { "counted" } else { "parent done" }.into()),
                finish_reason: Some(FinishReason::Stop),
                ..Completion::default()
            })
        }
    }
}

#[test]
fn delegate_inside_a_real_agent_run_shares_the_wallet() {
    let work = TempDir::new().unwrap();
    let model = Arc::new(ParentChild {
        parent_calls: AtomicU32::new(0),
        child_calls: AtomicU32::new(0),
    });
    let mut env = ToolEnv::new(work.path(), work.path());
    env.delegate_model = Some(model.clone());
    let reg = build_registry(&env, Some(&["todo".into(), "delegate".into()])).unwrap();
    let agent = hermes_core::Agent::new(model.clone(), Arc::new(reg), "You are the parent.");
    let budget = IterationBudget::new(80);
    let outcome = agent.run(
        "please delegate",
        Vec::new(),
        &budget,
        &mut hermes_core::NoObserver,
    );
    assert_eq!(outcome.stop, hermes_core::StopReason::Completed);
    assert_eq!(outcome.final_text, "parent done");
    assert_eq!(outcome.iterations, 2);
    assert_eq!(model.child_calls.load(Ordering::SeqCst), 15);
    // 80 - 1 (parent) - 15 (child) - 1 (parent) = 63.
    assert_eq!(budget.remaining(), 63);
    let tool_result = outcome
        .messages
        .iter()
        .find_map(|e| match &e.message {
            hermes_core::Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(tool_result, "counted\n\n[sub-agent used 15 model calls]");
}

// ---------------------------------------------------------------- review fixes

/// A fixture whose `$HERMES_HOME` is `work/<home_rel>` (a CLI started from
/// `~` with the default `~/.hermes`), populated like a real home.
fn fx_home_inside_work(home_rel: &str, configure: impl FnOnce(&mut ToolEnv)) -> Fx {
    let work = TempDir::new().unwrap();
    let home = work.path().join(home_rel);
    for (rel, body) in [
        (".env", "OPENAI_API_KEY=sk-SECRET-dotenv\n"),
        ("config.toml", "[provider]\napi_key = \"sk-SECRET-toml\"\n"),
        ("state.db", "SQLite format 3 sk-SECRET-db\n"),
        ("state.db-wal", "sk-SECRET-wal\n"),
        ("gateway.lock", "pid sk-SECRET-lock\n"),
        ("sessions/old.txt", "sk-SECRET-elsewhere\n"),
        ("MEMORY.md", "memory: the user likes tabs\n"),
        ("USER.md", "user: Ana\n"),
        ("SOUL.md", "soul: be kind\n"),
        ("skills/git/SKILL.md", "skill: rebase carefully\n"),
    ] {
        let p = home.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    std::fs::write(work.path().join("project.txt"), "ordinary file\n").unwrap();
    let mut env = ToolEnv::new(work.path(), &home);
    configure(&mut env);
    let reg = build_registry(&env, Some(&["file".into()])).unwrap();
    Fx {
        work,
        home: TempDir::new().unwrap(),
        reg,
        budget: IterationBudget::new(90),
        interrupt: InterruptFlag::new(),
    }
}

#[test]
fn file_tools_cannot_read_or_overwrite_hermes_home_secrets_when_workdir_contains_it() {
    for allow_outside in [false, true] {
        let fx = fx_home_inside_work(".hermes", |e| e.allow_outside_workdir = allow_outside);
        let home = fx.path(".hermes");

        for rel in [
            ".env",
            "config.toml",
            "state.db",
            "state.db-wal",
            "gateway.lock",
            "sessions/old.txt",
            "skills/../.env",
        ] {
            let m = fx.err("read_file", json!({"path": format!(".hermes/{rel}")}));
            assert!(m.contains("inside the Hermes home directory"), "{rel}: {m}");
            assert!(m.contains("MEMORY.md, USER.md, SOUL.md and skills/"), "{m}");
            assert!(!m.contains("sk-SECRET"), "{m}");
            // Absolute paths too.
            let m = fx.err("read_file", json!({"path": home.join(rel)}));
            assert!(m.contains("inside the Hermes home directory"), "{rel}: {m}");
        }
        // Through a symlink inside the working directory.
        std::os::unix::fs::symlink(home.join(".env"), fx.path("innocent.txt")).unwrap();
        let m = fx.err("read_file", json!({"path": "innocent.txt"}));
        assert!(m.contains("inside the Hermes home directory"), "{m}");

        // The prompt sources and skills may be read.
        for (rel, want) in [
            ("MEMORY.md", "likes tabs"),
            ("USER.md", "Ana"),
            ("SOUL.md", "be kind"),
            ("skills/git/SKILL.md", "rebase"),
        ] {
            let out = fx.ok("read_file", json!({"path": format!(".hermes/{rel}")}));
            assert!(out.contains(want), "{rel}: {out}");
        }

        // Nothing there may be written, secret or not, existing or new.
        for rel in [
            ".env",
            "config.toml",
            "state.db",
            "MEMORY.md",
            "SOUL.md",
            "skills/git/SKILL.md",
            "new.txt",
        ] {
            let m = fx.err(
                "write_file",
                json!({"path": format!(".hermes/{rel}"), "content": "pwned"}),
            );
            assert!(m.contains("cannot write there"), "{rel}: {m}");
            assert!(m.contains("memory tool"), "{m}");
        }
        let m = fx.err(
            "patch",
            json!({"path": ".hermes/config.toml", "old_string": "sk-SECRET-toml", "new_string": "x"}),
        );
        assert!(m.contains("cannot write there"), "{m}");
        let m = fx.err(
            "patch",
            json!({"path": ".hermes/MEMORY.md", "old_string": "tabs", "new_string": "spaces"}),
        );
        assert!(m.contains("cannot write there"), "{m}");
        assert_eq!(
            std::fs::read_to_string(home.join(".env")).unwrap(),
            "OPENAI_API_KEY=sk-SECRET-dotenv\n"
        );
        assert_eq!(
            std::fs::read_to_string(home.join("MEMORY.md")).unwrap(),
            "memory: the user likes tabs\n"
        );
        assert!(!home.join("new.txt").exists());

        // Ordinary files in the working directory are unaffected.
        let out = fx.ok("read_file", json!({"path": "project.txt"}));
        assert!(out.contains("ordinary file"), "{out}");
        fx.ok("write_file", json!({"path": "out.txt", "content": "fine"}));

        // search_files skips the refused files wherever the walk starts.
        for base in [".", ".hermes", ".hermes/sessions"] {
            let out = fx.ok(
                "search_files",
                json!({"pattern": "sk-SECRET", "path": base}),
            );
            assert!(out.starts_with("No matches"), "{base}: {out}");
            let out = fx.ok(
                "search_files",
                json!({"pattern": "*", "path": base, "target": "files"}),
            );
            assert!(!out.contains(".env") && !out.contains("state.db"), "{out}");
            assert!(
                !out.contains("config.toml") && !out.contains("old.txt"),
                "{out}"
            );
        }
        let out = fx.ok(
            "search_files",
            json!({"pattern": "tabs|rebase", "path": ".hermes"}),
        );
        assert!(out.contains(".hermes/MEMORY.md:1:"), "{out}");
        assert!(out.contains(".hermes/skills/git/SKILL.md:1:"), "{out}");
        let m = fx.err(
            "search_files",
            json!({"pattern": "sk", "path": ".hermes/.env"}),
        );
        assert!(m.contains("inside the Hermes home directory"), "{m}");
    }
}

#[test]
fn search_files_skips_a_visible_hermes_home_inside_the_workdir() {
    // A home that is not a hidden directory is walked by default.
    let fx = fx_home_inside_work("hermes-home", |_| {});
    let out = fx.ok("search_files", json!({"pattern": "sk-SECRET"}));
    assert!(out.starts_with("No matches"), "{out}");
    let out = fx.ok("search_files", json!({"pattern": "*", "target": "files"}));
    assert_eq!(
        out,
        "hermes-home/MEMORY.md\nhermes-home/SOUL.md\nhermes-home/USER.md\n\
         hermes-home/skills/git/SKILL.md\nproject.txt\n"
    );
}

#[test]
fn a_workdir_inside_the_hermes_home_owns_its_files_but_not_the_secrets() {
    let home = TempDir::new().unwrap();
    std::fs::write(home.path().join(".env"), "KEY=sk-SECRET\n").unwrap();
    let work = home.path().join("workspace");
    std::fs::create_dir(&work).unwrap();
    let mut env = ToolEnv::new(&work, home.path());
    env.allow_outside_workdir = true;
    let reg = build_registry(&env, Some(&["file".into()])).unwrap();
    let budget = IterationBudget::new(5);
    let flag = InterruptFlag::new();
    let ctx = ToolContext {
        budget: &budget,
        interrupt: &flag,
        tool_call_id: "x",
    };
    reg.dispatch("write_file", r#"{"path":"a.txt","content":"mine"}"#, &ctx)
        .unwrap();
    let out = reg
        .dispatch("read_file", r#"{"path":"a.txt"}"#, &ctx)
        .unwrap();
    assert!(out.contains("|mine"), "{out}");
    let err = reg
        .dispatch("read_file", r#"{"path":"../.env"}"#, &ctx)
        .unwrap_err();
    assert!(
        err.to_string().contains("inside the Hermes home directory"),
        "{err}"
    );

    // A working directory equal to the home gets no exception.
    let env = ToolEnv::new(home.path(), home.path());
    let reg = build_registry(&env, Some(&["file".into()])).unwrap();
    let err = reg
        .dispatch("read_file", r#"{"path":".env"}"#, &ctx)
        .unwrap_err();
    assert!(
        err.to_string().contains("inside the Hermes home directory"),
        "{err}"
    );
}

#[test]
fn read_file_offset_plus_limit_overflow_does_not_panic() {
    let fx = Fx::new();
    fx.write("a.txt", "one\ntwo\nthree\n");
    // offset + limit does not fit in usize.
    let out = fx.ok(
        "read_file",
        json!({"path": "a.txt", "offset": 2, "limit": u64::MAX}),
    );
    assert_eq!(out, "     2|two\n     3|three\n");
    let m = fx.err(
        "read_file",
        json!({"path": "a.txt", "offset": u64::MAX, "limit": u64::MAX}),
    );
    assert!(m.contains("past the end"), "{m}");
    // Past the integer range: a clear argument error naming the field.
    let m = fx.err("read_file", json!({"path": "a.txt", "limit": 1e30}));
    assert!(m.contains("limit"), "{m}");
}

#[test]
fn model_numbers_at_the_extremes_are_errors_not_panics() {
    let fx = Fx::new();
    let m = fx.err("terminal", json!({"command": "true", "timeout": u64::MAX}));
    assert!(m.contains("between 1 and 600"), "{m}");
    let m = fx.err("terminal", json!({"command": "true", "timeout": -1}));
    assert!(m.contains("timeout"), "{m}");
    let m = fx.err("search_files", json!({"pattern": "x", "limit": u64::MAX}));
    assert!(m.contains("between 1 and 1000"), "{m}");
    let m = fx.err(
        "todo",
        json!({"action": "update", "id": u64::MAX, "status": "completed"}),
    );
    assert!(m.contains("id"), "{m}");
    let m = fx.err(
        "todo",
        json!({"action": "update", "id": u32::MAX, "status": "completed"}),
    );
    assert!(m.contains("no task with id"), "{m}");

    let web = web_fx();
    let m = web.err(
        "web_fetch",
        json!({"url": "http://127.0.0.1:9/", "max_bytes": u64::MAX}),
    );
    assert!(m.contains("max_bytes"), "{m}");
}

/// Records the parent's tool starts and interrupts the parent as the
/// delegate call starts: the interrupt lands after the loop's own check and
/// before the child's run.
struct InterruptOnDelegateStart(InterruptFlag);

impl hermes_core::AgentObserver for InterruptOnDelegateStart {
    fn on_event(&mut self, event: &hermes_core::AgentEvent<'_>) {
        if let hermes_core::AgentEvent::ToolStarted { call } = event
            && call.function.name == "delegate_task"
        {
            self.0.interrupt();
        }
    }
}

#[test]
fn delegate_interrupt_landing_just_before_the_child_starts_is_not_lost() {
    let work = TempDir::new().unwrap();
    let home = TempDir::new().unwrap();
    let model = Arc::new(ParentChild {
        parent_calls: AtomicU32::new(0),
        child_calls: AtomicU32::new(0),
    });
    let mut env = ToolEnv::new(work.path(), home.path());
    env.delegate_model = Some(model.clone());
    let reg = build_registry(&env, Some(&["todo".into(), "delegate".into()])).unwrap();
    let flag = InterruptFlag::new();
    let agent = hermes_core::Agent::new(model.clone(), Arc::new(reg), "You are the parent.")
        .with_interrupt(flag.clone());
    let budget = IterationBudget::new(80);
    let outcome = agent.run(
        "please delegate",
        Vec::new(),
        &budget,
        &mut InterruptOnDelegateStart(flag.clone()),
    );
    // The child made no model call, and the interrupt survived the child's
    // start: the parent stopped instead of going on.
    assert_eq!(model.child_calls.load(Ordering::SeqCst), 0);
    assert_eq!(model.parent_calls.load(Ordering::SeqCst), 1);
    assert_eq!(outcome.stop, hermes_core::StopReason::Interrupted);
    assert!(flag.is_set());
    assert_eq!(budget.remaining(), 79);
    let tool_result = outcome
        .messages
        .iter()
        .find_map(|e| match &e.message {
            hermes_core::Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap();
    assert!(
        tool_result.contains("interrupted before the sub-agent started"),
        "{tool_result}"
    );
}

/// A child that runs one long terminal command, then reports.
struct LongChildCommand {
    calls: AtomicU32,
}

impl Model for LongChildCommand {
    fn complete(
        &self,
        _request: &ChatRequest<'_>,
        _sink: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            Ok(Completion {
                tool_calls: vec![ToolCall::new(
                    "t1",
                    "terminal",
                    r#"{"command":"sleep 300","timeout":600}"#,
                )],
                finish_reason: Some(FinishReason::ToolCalls),
                ..Completion::default()
            })
        } else {
            Ok(Completion {
                content: Some("should not get here".into()),
                finish_reason: Some(FinishReason::Stop),
                ..Completion::default()
            })
        }
    }
}

#[test]
fn delegate_child_tools_see_a_parent_interrupt_mid_call() {
    let model = Arc::new(LongChildCommand {
        calls: AtomicU32::new(0),
    });
    let fx = Fx::with(
        |e| e.delegate_model = Some(model.clone()),
        Some(&["terminal", "delegate"]),
    );
    let flag = fx.interrupt.clone();
    let setter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        flag.interrupt();
    });
    let out = fx.ok("delegate_task", json!({"goal": "run the long job"}));
    setter.join().unwrap();
    assert!(out.contains("it stopped early: Interrupted"), "{out}");
    assert_eq!(model.calls.load(Ordering::SeqCst), 1);
    assert!(fx.interrupt.is_set());
}

#[test]
fn todo_list_follows_the_session_across_registry_rebuilds() {
    let state = Arc::new(hermes_runtime::tools::TodoState::new());
    let shared = state.clone();
    let first = Fx::with(move |e| e.todo_state = Some(shared), Some(&["todo"]));
    first.ok("todo", json!({"action": "add", "items": ["plan", "do"]}));
    first.ok(
        "todo",
        json!({"action": "update", "id": 1, "status": "completed"}),
    );
    drop(first); // the gateway evicted the agent and its registry

    let shared = state.clone();
    let rebuilt = Fx::with(move |e| e.todo_state = Some(shared), Some(&["todo"]));
    assert_eq!(
        rebuilt.ok("todo", json!({"action": "list"})),
        "Todo (1/2 done):\n[x] 1. plan\n[ ] 2. do"
    );

    // A new session (/new) gets a new state and starts empty.
    let fresh = Arc::new(hermes_runtime::tools::TodoState::new());
    let after_new = Fx::with(move |e| e.todo_state = Some(fresh), Some(&["todo"]));
    assert_eq!(
        after_new.ok("todo", json!({"action": "list"})),
        "Todo list is empty."
    );
}

#[test]
fn delegate_child_does_not_share_the_session_todo_list() {
    let state = Arc::new(hermes_runtime::tools::TodoState::new());
    let model = Arc::new(Scripted::new(2));
    let shared = state.clone();
    let fx = Fx::with(
        move |e| {
            e.todo_state = Some(shared);
            e.delegate_model = Some(model);
        },
        Some(&["todo", "delegate"]),
    );
    fx.ok("todo", json!({"action": "add", "items": ["parent task"]}));
    // The child's only tool call is `todo list`; its own list is empty, so
    // the session's list is untouched and not shown to it.
    fx.ok("delegate_task", json!({"goal": "look at your list"}));
    assert_eq!(
        fx.ok("todo", json!({"action": "list"})),
        "Todo (0/1 done):\n[ ] 1. parent task"
    );
}
