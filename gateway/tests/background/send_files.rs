//! `send_message` with files (issue 43 §2; hermes-agent's `MEDIA:<path>`
//! and `[[as_document]]`), through a real `hermes gateway run` child and
//! the Telegram fake: paths outside the working directory, a symlink out
//! of it, a missing file, a directory and an over-size file are refused
//! with nothing sent; allowed files are uploaded once each with the text,
//! a transient upload failure retried without sending again what went.

use super::*;

const TARGET: &str = "telegram:1000";

/// Texts to Alice that are the model's echo of a tool result.
fn results(fake: &Fake) -> Vec<String> {
    sent_to(fake, ALICE)
        .into_iter()
        .filter(|t| t.starts_with("tool said: "))
        .collect()
}

/// The file names uploaded with `method`.
fn uploaded(fake: &Fake, method: &str) -> Vec<String> {
    fake.uploads(method)
        .into_iter()
        .flat_map(|parts| parts.into_iter().filter_map(|p| p.file_name))
        .collect()
}

#[test]
fn send_message_files_are_confined_like_the_file_tools_and_delivered_once() {
    if child_gateway() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let work = dir.path().join("work");
    std::fs::create_dir_all(work.join("sub")).unwrap();
    std::fs::write(dir.path().join("secret.txt"), "outside").unwrap();
    std::os::unix::fs::symlink(dir.path().join("secret.txt"), work.join("escape.txt")).unwrap();
    std::fs::write(work.join("report.txt"), "the report").unwrap();
    let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    png.extend_from_slice(&[0u8; 64]);
    std::fs::write(work.join("chart.png"), &png).unwrap();
    std::fs::File::create(work.join("big.bin"))
        .unwrap()
        .set_len(51 * 1024 * 1024)
        .unwrap();
    let rt = runtime();
    let fake = rt.block_on(Fake::start(false));
    let provider = provider();
    let test = "background::send_files::send_message_files_are_confined_like_the_file_tools_and_delivered_once";
    let agent = format!(
        "workdir = {:?}\nsend_message_targets = [{TARGET:?}]\n",
        work.to_string_lossy()
    );
    let _gateway = spawn(test, &home, &fake.base, &provider, &agent);

    // The attacks first: each refused, nothing uploaded, no text sent.
    let attacks = [
        ("/etc/passwd", "outside"),
        ("../secret.txt", "outside"),
        ("escape.txt", "outside"),
        ("nope.txt", "No such file"),
        ("sub", "not a regular file"),
        ("big.bin", "at most 52428800 bytes"),
    ];
    for (n, (path, why)) in attacks.iter().enumerate() {
        let n = i64::try_from(n).unwrap() + 1;
        say(
            &fake,
            n,
            ALICE,
            &format!("SEND: {TARGET} | hi MEDIA:{path}"),
        );
        wait_for("the refusal", &home, 60, || {
            results(&fake).len() == usize::try_from(n).unwrap()
        });
        let said = results(&fake).pop().unwrap();
        assert!(
            said.contains(&format!("MEDIA:{path} refused"))
                && said.contains("Nothing was sent")
                && said.to_lowercase().contains(&why.to_lowercase()),
            "{path}: {said}"
        );
    }
    assert!(
        uploaded(&fake, "sendDocument").is_empty() && uploaded(&fake, "sendPhoto").is_empty(),
        "nothing uploaded"
    );
    assert!(
        !sent_to(&fake, ALICE).iter().any(|t| t == "hi"),
        "no text either"
    );

    // Two files and a text. The photo's uploads fail (500) until the
    // adapter's own retries are spent: the scheduler's retry, 5 s later,
    // sends the photo — not the report again — then the text.
    for _ in 0..5 {
        fake.script(
            "sendPhoto",
            500,
            json!({"ok": false, "error_code": 500, "description": "Internal Server Error"}),
        );
    }
    say(
        &fake,
        10,
        ALICE,
        &format!("SEND: {TARGET} | Here you go MEDIA:report.txt MEDIA:chart.png"),
    );
    wait_for("the delivery", &home, 90, || {
        count(&sent_to(&fake, ALICE), "Here you go") == 1
    });
    wait_for("the tool's result", &home, 30, || {
        results(&fake).len() == attacks.len() + 1
    });
    let said = results(&fake).pop().unwrap();
    assert!(
        said == format!("tool said: Delivered to {TARGET} (with report.txt, chart.png).")
            || said.contains("delivery is being retried"),
        "{said}"
    );
    assert_eq!(uploaded(&fake, "sendDocument"), ["report.txt"], "once");
    assert_eq!(
        uploaded(&fake, "sendPhoto").len(),
        6,
        "five failed, then sent"
    );
    let report = &fake.uploads("sendDocument")[0];
    let part = report.iter().find(|p| p.file_name.is_some()).unwrap();
    assert_eq!(part.data, b"the report");

    // `[[as_document]]`: the picture as a document, no empty text.
    say(
        &fake,
        11,
        ALICE,
        &format!("SEND: {TARGET} | [[as_document]] MEDIA:chart.png"),
    );
    wait_for("the document", &home, 60, || {
        results(&fake).len() == attacks.len() + 2
    });
    assert_eq!(
        results(&fake).pop().unwrap(),
        format!("tool said: Delivered to {TARGET} (with chart.png).")
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(uploaded(&fake, "sendDocument"), ["report.txt", "chart.png"]);
    assert_eq!(uploaded(&fake, "sendPhoto").len(), 6);
    assert!(
        !home.join("outbox").read_dir().unwrap().any(|_| true),
        "the outbox copies are gone once delivered"
    );
}
