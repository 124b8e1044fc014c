//! The file tools inside the working directory: `read_file` (paging, cuts,
//! errors), `write_file`, `patch` and `search_files`.

use serde_json::json;

use super::support::Fx;

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
