//! `hermes backup` / `hermes restore` (issue 45): backup → wipe → restore
//! gives back the same sessions, memories, skills and configuration; a
//! truncated, a tampered and a too-new archive are refused with the home
//! left exactly as it was; a home that is not empty needs `--force`, and
//! then nothing of it is deleted.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use hermes_tests::{FakeProvider, Reply};

use super::support::{Env, stderr, stdout, system_prompt};

/// Every file under `dir` (but the live store's) with its bytes.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if rel.starts_with("state.db") {
                continue;
            }
            if entry.file_type().unwrap().is_dir() {
                walk(root, &path, out);
            } else {
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    if dir.exists() {
        walk(dir, dir, &mut out);
    }
    out
}

/// Every file under `dir`, the store's included (not its `-shm` index,
/// which any reader may touch), as SHA-256 digests: what a refused restore
/// must leave exactly as it was.
fn whole_tree(dir: &Path) -> BTreeMap<String, String> {
    let mut out = tree(dir);
    for name in ["state.db", "state.db-wal"] {
        if let Ok(bytes) = std::fs::read(dir.join(name)) {
            out.insert(name.to_owned(), bytes);
        }
    }
    out.into_iter()
        .map(|(name, bytes)| {
            let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
            (name, format!("{:?}", digest.as_ref()))
        })
        .collect()
}

fn hermes(env: &Env, args: &[&str]) -> std::process::Output {
    env.bare().args(args).output().unwrap()
}

/// Each session exported as JSON, by id.
fn sessions(env: &Env) -> BTreeMap<String, String> {
    env.session_ids()
        .into_iter()
        .map(|id| {
            let o = hermes(env, &["sessions", "export", &id, "--format", "json"]);
            assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
            (id, stdout(&o))
        })
        .collect()
}

/// A home with two sessions, memories, a skill, a personality, a script,
/// config.toml and a secret.
fn populated(provider: &FakeProvider) -> Env {
    let env = Env::new();
    env.write_home("config.toml", "[agent]\nmax_iterations = 7\n");
    env.write_home(".env", "HERMES_API_KEY=sk-backup-secret-1234\n");
    env.write_home("MEMORY.md", "The user's bicycle has 11 gears.\n");
    env.write_home("USER.md", "Prefers short answers.\n");
    std::fs::create_dir_all(env.home.path().join("personalities")).unwrap();
    env.write_home("personalities/terse.md", "Answer in one line.\n");
    std::fs::create_dir_all(env.home.path().join("scripts")).unwrap();
    env.write_home("scripts/report.sh", "echo ok\n");
    let skill = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/skills/example-skill");
    let o = hermes(&env, &["skills", "install", skill.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for prompt in ["which gear climbs best", "what is a derailleur"] {
        let o = env.run(&provider.base_url(), &["-z", prompt]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    env
}

fn backup(env: &Env, archive: &Path, extra: &[&str]) {
    let mut args = vec!["backup", archive.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = hermes(env, &args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

fn wipe(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
    }
}

#[test]
fn backup_wipe_restore_gives_back_the_same_sessions_memories_skills_and_config() {
    let provider = FakeProvider::start(vec![
        Reply::text("the lowest gear"),
        Reply::text("it moves the chain"),
        Reply::text("remembered"),
    ])
    .unwrap();
    let env = populated(&provider);
    let before_sessions = sessions(&env);
    assert_eq!(before_sessions.len(), 2);
    let before_files = tree(env.home.path());
    let skills_before = stdout(&hermes(&env, &["skills", "list"]));
    let config_before = stdout(&hermes(&env, &["config", "show"]));
    let archive = env.work.path().join("home.tar");
    backup(&env, &archive, &[]);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&archive).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the archive is private");

    wipe(env.home.path());
    let o = hermes(&env, &["restore", archive.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("restored"), "{}", stdout(&o));

    assert_eq!(
        sessions(&env),
        before_sessions,
        "the same sessions and messages"
    );
    let mut expected = before_files.clone();
    expected.remove(".env");
    assert!(
        tree(env.home.path()) == expected,
        "every file back but .env"
    );
    assert_eq!(stdout(&hermes(&env, &["skills", "list"])), skills_before);
    assert!(config_before.contains("7"), "{config_before}");
    // All but the key, which stayed behind with .env.
    let without_key = |text: &str| -> String {
        text.lines()
            .filter(|l| !l.starts_with("api_key"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        without_key(&stdout(&hermes(&env, &["config", "show"]))),
        without_key(&config_before)
    );
    let hits = stdout(&hermes(&env, &["sessions", "search", "derailleur"]));
    assert!(hits.contains("derailleur"), "{hits}");
    // The memory reaches the next prompt.
    let o = env.run(&provider.base_url(), &["-z", "what do you know"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let last = provider.requests().pop().unwrap();
    assert!(
        system_prompt(&last).contains("11 gears"),
        "{}",
        system_prompt(&last)
    );
}

#[test]
fn secrets_go_in_only_with_with_secrets() {
    let provider = FakeProvider::start(vec![Reply::text("a"), Reply::text("b")]).unwrap();
    let env = populated(&provider);
    let plain = env.work.path().join("plain.tar");
    backup(&env, &plain, &[]);
    let bytes = std::fs::read(&plain).unwrap();
    assert!(
        !contains(&bytes, b"sk-backup-secret-1234"),
        "no secret without --with-secrets"
    );
    let secret = env.work.path().join("secret.tar");
    let o = hermes(
        &env,
        &["backup", secret.to_str().unwrap(), "--with-secrets"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!stdout(&o).contains("sk-backup"), "never printed");
    assert!(contains(
        &std::fs::read(&secret).unwrap(),
        b"sk-backup-secret-1234"
    ));
    wipe(env.home.path());
    let o = hermes(&env, &["restore", secret.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let restored = std::fs::read_to_string(env.home.path().join(".env")).unwrap();
    assert!(restored.contains("sk-backup-secret-1234"));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(env.home.path().join(".env"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A home with one session whose files and store are compared after a
/// refused restore, and the archive of another home to restore.
fn refused_setup() -> (Env, Env, PathBuf) {
    let provider = FakeProvider::start(vec![
        Reply::text("a"),
        Reply::text("b"),
        Reply::text("kept"),
    ])
    .unwrap();
    let source = populated(&provider);
    let archive = source.work.path().join("home.tar");
    backup(&source, &archive, &[]);
    let target = Env::new();
    target.write_home("MEMORY.md", "the target's own memory\n");
    let o = target.run(&provider.base_url(), &["-z", "keep me"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    (source, target, archive)
}

fn assert_refused(target: &Env, archive: &Path, why: &str) {
    let before = whole_tree(target.home.path());
    let o = hermes(target, &["restore", archive.to_str().unwrap(), "--force"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("refused") && err.contains(why), "{err}");
    assert!(err.contains("nothing was changed"), "{err}");
    assert_eq!(
        whole_tree(target.home.path()),
        before,
        "the home is unchanged"
    );
    let parent = target.home.path().parent().unwrap();
    let name = target
        .home
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let leftovers: Vec<_> = std::fs::read_dir(parent)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!(".{name}.restore-"))
        })
        .collect();
    assert!(leftovers.is_empty(), "the staging folder is removed");
}

#[test]
fn a_truncated_archive_is_refused_and_the_home_is_unchanged() {
    let (_source, target, archive) = refused_setup();
    let bytes = std::fs::read(&archive).unwrap();
    // Half; into the manifest, the last entry (the last 1024 bytes are
    // tar's end marker, whose loss loses nothing); inside the first header.
    for cut in [bytes.len() / 2, bytes.len() - 1024 - 100, 300] {
        let truncated = target.work.path().join(format!("cut-{cut}.tar"));
        std::fs::write(&truncated, &bytes[..cut]).unwrap();
        assert_refused(&target, &truncated, "");
    }
}

#[test]
fn a_tampered_archive_is_refused_and_the_home_is_unchanged() {
    let (_source, target, archive) = refused_setup();
    let mut bytes = std::fs::read(&archive).unwrap();
    let at = bytes
        .windows(8)
        .rposition(|w| w == b"11 gears")
        .expect("MEMORY.md's text is in the archive");
    bytes[at] = b'9';
    let tampered = target.work.path().join("tampered.tar");
    std::fs::write(&tampered, &bytes).unwrap();
    assert_refused(&target, &tampered, "MEMORY.md does not match its checksum");
}

/// Rewrites `archive` with `edit` applied to each (name, bytes) and the
/// manifest's checksums brought in line, as a newer hermes would write it.
fn rewrite(archive: &Path, out: &Path, edit: impl Fn(&str, &mut Vec<u8>)) {
    let mut entries = Vec::new();
    let mut reader = tar::Archive::new(std::fs::File::open(archive).unwrap());
    for entry in reader.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().to_string_lossy().into_owned();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).unwrap();
        edit(&name, &mut bytes);
        entries.push((name, bytes));
    }
    let sums: BTreeMap<String, String> = entries
        .iter()
        .map(|(n, b)| {
            let digest = ring::digest::digest(&ring::digest::SHA256, b);
            let hex: String = digest.as_ref().iter().map(|x| format!("{x:02x}")).collect();
            (n.trim_start_matches("home/").to_owned(), hex)
        })
        .collect();
    let mut builder = tar::Builder::new(std::fs::File::create(out).unwrap());
    for (name, mut bytes) in entries {
        if name == "hermes-backup.json" {
            let mut manifest: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            edit("manifest", &mut bytes);
            if let Ok(edited) = serde_json::from_slice::<serde_json::Value>(&bytes) {
                manifest = edited;
            }
            for file in manifest["files"].as_array_mut().unwrap() {
                let path = file["path"].as_str().unwrap().to_owned();
                file["sha256"] = sums[&path].clone().into();
            }
            bytes = serde_json::to_vec(&manifest).unwrap();
        }
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o600);
        header.set_cksum();
        builder
            .append_data(&mut header, &name, bytes.as_slice())
            .unwrap();
    }
    builder.finish().unwrap();
}

#[test]
fn an_archive_with_a_newer_schema_is_refused_as_a_downgrade() {
    let (_source, target, archive) = refused_setup();
    let newer = target.work.path().join("newer.tar");
    rewrite(&archive, &newer, |name, bytes| {
        if name == "home/state.db" {
            // PRAGMA user_version lives at offset 60 of the file header.
            let version = u32::from_be_bytes(bytes[60..64].try_into().unwrap());
            bytes[60..64].copy_from_slice(&(version + 1).to_be_bytes());
        }
        if name == "manifest" {
            let mut m: serde_json::Value = serde_json::from_slice(bytes).unwrap();
            let v = m["store_schema"].as_u64().unwrap();
            m["store_schema"] = (v + 1).into();
            *bytes = serde_json::to_vec(&m).unwrap();
        }
    });
    assert_refused(&target, &newer, "a downgrade");
    // The same file with the manifest left at the old schema: the database
    // itself is looked at before anything moves.
    let lying = target.work.path().join("lying.tar");
    rewrite(&archive, &lying, |name, bytes| {
        if name == "home/state.db" {
            let version = u32::from_be_bytes(bytes[60..64].try_into().unwrap());
            bytes[60..64].copy_from_slice(&(version + 1).to_be_bytes());
        }
    });
    assert_refused(&target, &lying, "a downgrade");
}

#[test]
fn a_home_that_is_not_empty_needs_force_and_keeps_what_was_there() {
    let (source, target, archive) = refused_setup();
    let before = whole_tree(target.home.path());
    let o = hermes(&target, &["restore", archive.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--force"), "{}", stderr(&o));
    assert_eq!(whole_tree(target.home.path()), before);

    let o = hermes(&target, &["restore", archive.to_str().unwrap(), "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(sessions(&target), sessions(&source));
    let aside = std::fs::read_dir(target.home.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(".replaced-")
        })
        .expect("the old files are kept aside");
    assert_eq!(
        std::fs::read_to_string(aside.join("MEMORY.md")).unwrap(),
        "the target's own memory\n"
    );
    assert!(aside.join("state.db").exists());
}

#[test]
fn restore_refuses_a_home_whose_gateway_runs() {
    let (_source, target, archive) = refused_setup();
    // The gateway's own lock: an exclusive flock on gateway.lock.
    let lock = std::fs::File::create(target.home.path().join("gateway.lock")).unwrap();
    lock.lock().unwrap();
    let before = whole_tree(target.home.path());
    let o = hermes(&target, &["restore", archive.to_str().unwrap(), "--force"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("a gateway is running"),
        "{}",
        stderr(&o)
    );
    assert_eq!(whole_tree(target.home.path()), before);
    lock.unlock().unwrap();
}

#[test]
fn a_backup_taken_while_another_process_writes_is_consistent() {
    use hermes_core::{LedgerEntry, Message};
    use hermes_runtime::store::{NewSession, Store};
    use std::sync::atomic::{AtomicBool, Ordering};
    let provider = FakeProvider::start(vec![Reply::text("a"), Reply::text("b")]).unwrap();
    let env = populated(&provider);
    let db = env.home.path().join("state.db");
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let writer = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut store = Store::open(&db).unwrap();
            let mut turns = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let s = store.create_session(&NewSession::default()).unwrap();
                let entries = [
                    LedgerEntry::new(Message::user(format!("busy {turns}"))),
                    LedgerEntry::new(Message::assistant("ok")),
                ];
                store.append_messages(&s.id, &entries).unwrap();
                turns += 1;
            }
            turns
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(100));
    let archive = env.work.path().join("busy.tar");
    backup(&env, &archive, &[]);
    stop.store(true, Ordering::Relaxed);
    let turns = writer.join().unwrap();
    assert!(turns > 0, "the writer wrote while the backup ran");

    let other = Env::new();
    let o = hermes(&other, &["restore", archive.to_str().unwrap(), "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Every write is in the copy whole or not at all: an append (a user
    // message with its answer, one transaction) is never cut in half. (The
    // writer creates a session and appends to it in two transactions, so
    // the newest session may have none yet.)
    let restored = sessions(&other);
    assert!(restored.len() > 2, "{}", restored.len());
    let mut busy = 0;
    for (id, export) in &restored {
        let v: serde_json::Value = serde_json::from_str(export).unwrap();
        let n = v["messages"].as_array().map_or(0, Vec::len);
        assert!(n.is_multiple_of(2), "session {id} is whole: {n} messages");
        busy += usize::from(export.contains("busy "));
    }
    assert!(busy > 0, "the copy holds the writer's sessions");
}

#[test]
fn the_default_name_is_in_the_current_directory_and_links_are_named_not_followed() {
    let provider = FakeProvider::start(vec![Reply::text("a"), Reply::text("b")]).unwrap();
    let env = populated(&provider);
    std::os::unix::fs::symlink("/etc/passwd", env.home.path().join("outside")).unwrap();
    let o = hermes(&env, &["backup"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("skipped the symbolic link outside"),
        "{}",
        stderr(&o)
    );
    let made: Vec<_> = std::fs::read_dir(env.work.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(made.len(), 1, "{made:?}");
    assert!(
        made[0].starts_with("hermes-backup-") && made[0].ends_with(".tar"),
        "{made:?}"
    );
    let bytes = std::fs::read(env.work.path().join(&made[0])).unwrap();
    assert!(!contains(&bytes, b"root:x:0:0"), "a link is not followed");
}

#[test]
fn with_postgresql_the_archive_holds_the_files_and_says_pg_dump_is_yours() {
    hermes_tests::require!(Postgres);
    let url = hermes_tests::postgres::fresh_database();
    let provider = FakeProvider::start(vec![Reply::text("in postgres")]).unwrap();
    let env = Env::new();
    env.write_home("MEMORY.md", "kept in the archive\n");
    let o = env
        .cmd(&provider.base_url())
        .env("HERMES_DATABASE_URL", &url)
        .args(["-z", "hello"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let archive = env.work.path().join("pg.tar");
    let o = env
        .bare()
        .env("HERMES_DATABASE_URL", &url)
        .args(["backup", archive.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("pg_dump"), "{}", stderr(&o));
    let mut names = Vec::new();
    let mut reader = tar::Archive::new(std::fs::File::open(&archive).unwrap());
    for entry in reader.entries().unwrap() {
        names.push(
            entry
                .unwrap()
                .path()
                .unwrap()
                .to_string_lossy()
                .into_owned(),
        );
    }
    assert!(names.contains(&"home/MEMORY.md".to_owned()), "{names:?}");
    assert!(!names.iter().any(|n| n.contains("state.db")), "{names:?}");
}
