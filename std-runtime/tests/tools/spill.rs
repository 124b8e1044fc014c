//! Huge outputs kept whole (SPEC Y6): a 2 MB command output is cut for the
//! model but saved under `$HERMES_HOME/tool-output/<scope>/`, and
//! `read_file` reads it in ranges through the confinement, while nothing
//! else in the home becomes readable.

use serde_json::json;

use super::support::Fx;

/// A fixture whose outputs are kept in `$HERMES_HOME/tool-output/s1`.
fn keeping() -> Fx {
    Fx::with(
        |e| {
            e.result_cap_bytes = 4000;
            e.tool_output_dir = Some(e.hermes_home.join("tool-output").join("s1"));
        },
        None,
    )
}

/// The path the note names.
fn kept_path(out: &str) -> String {
    let start = out.find(" is saved in ").expect(out) + " is saved in ".len();
    let rest = &out[start..];
    rest[..rest.find(": read any part").expect(out)].to_owned()
}

#[test]
fn a_two_megabyte_output_is_kept_and_read_in_ranges() {
    let fx = keeping();
    // 320 000 lines, 2 128 895 bytes.
    let out = fx.ok("terminal", json!({"command": "seq 1 320000"}));
    assert!(out.len() <= 4000, "{} bytes", out.len());
    assert!(out.starts_with("1\n2\n3\n"), "{out}");
    assert!(out.ends_with("319999\n320000\n[exit code: 0]"), "{out}");
    assert!(out.contains("(2128895 bytes, 320000 lines)"), "{out}");
    let path = kept_path(&out);
    assert!(
        path.starts_with(&fx.home.path().join("tool-output/s1").display().to_string())
            || path.contains("/tool-output/s1/"),
        "{path}"
    );
    let saved = std::fs::read_to_string(&path).unwrap();
    assert_eq!(saved.len(), 2_128_895);
    assert!(saved.starts_with("1\n2\n") && saved.ends_with("320000\n"));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    // The middle, which the model did not see, through read_file.
    let middle = fx.ok(
        "read_file",
        json!({"path": path, "offset": 150000, "limit": 3}),
    );
    assert!(middle.contains("150000"), "{middle}");
    assert!(middle.contains("150002"), "{middle}");
    assert!(!middle.contains("150003|"), "{middle}");
    // Writing there is still refused.
    let err = fx.err("write_file", json!({"path": path, "content": "x"}));
    assert!(err.contains("refused"), "{err}");
}

#[test]
fn a_short_output_keeps_nothing() {
    let fx = keeping();
    let out = fx.ok("terminal", json!({"command": "echo hi"}));
    assert_eq!(out, "hi\n[exit code: 0]");
    assert!(!fx.home.path().join("tool-output").exists());
}

#[test]
fn nothing_else_in_the_home_becomes_readable() {
    let fx = keeping();
    let home = fx.home.path();
    std::fs::write(home.join("config.toml"), "api_key = \"sk-SECRET\"\n").unwrap();
    let other = home.join("tool-output/other-session");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("out.txt"), "another session's output\n").unwrap();
    let own = home.join("tool-output/s1");
    std::fs::create_dir_all(&own).unwrap();
    std::os::unix::fs::symlink(home.join("config.toml"), own.join("link.txt")).unwrap();
    for path in [
        home.join("config.toml"),
        other.join("out.txt"),
        // Lexically inside the own directory, really elsewhere.
        own.join("../other-session/out.txt"),
        own.join("../../config.toml"),
        own.join("link.txt"),
    ] {
        let err = fx.err("read_file", json!({"path": path}));
        assert!(
            err.contains("refused") || err.contains("outside"),
            "{}: {err}",
            path.display()
        );
        assert!(!err.contains("sk-SECRET") && !err.contains("another session"));
    }
}
