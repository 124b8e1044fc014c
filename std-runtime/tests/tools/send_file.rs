//! `send_file` over a recording outbox: the chat's size limit is checked
//! before anything is read or sent, images go as photos and audio as
//! audio, and `allow_outside_workdir` does not reach this tool.

use std::sync::{Arc, Mutex};

use hermes_core::{InterruptFlag, IterationBudget, ToolContext, ToolError, ToolRegistry};
use hermes_runtime::tools::{FileKind, FileOutbox, OutboundFile, SendFileTool, ToolEnv};
use serde_json::json;
use tempfile::TempDir;

/// Takes files of at most `limit` bytes and keeps them.
struct Recording {
    limit: u64,
    sent: Mutex<Vec<OutboundFile>>,
}

impl FileOutbox for Recording {
    fn limit(&self, _kind: FileKind) -> Result<u64, String> {
        Ok(self.limit)
    }

    fn send(&self, file: OutboundFile) -> Result<String, String> {
        self.sent.lock().unwrap().push(file);
        Ok("to the test".into())
    }
}

fn tool(work: &TempDir, allow_outside: bool, limit: u64) -> (ToolRegistry, Arc<Recording>) {
    let home = TempDir::new().unwrap();
    let mut env = ToolEnv::new(work.path(), home.path());
    env.allow_outside_workdir = allow_outside;
    let outbox = Arc::new(Recording {
        limit,
        sent: Mutex::new(Vec::new()),
    });
    let mut reg = ToolRegistry::new();
    reg.register(Box::new(SendFileTool::new(&env, outbox.clone()).unwrap()));
    (reg, outbox)
}

fn call(reg: &ToolRegistry, args: serde_json::Value) -> Result<String, ToolError> {
    let budget = IterationBudget::new(10);
    let interrupt = InterruptFlag::new();
    let ctx = ToolContext {
        budget: &budget,
        interrupt: &interrupt,
        tool_call_id: "call_1",
    };
    reg.dispatch("send_file", &args.to_string(), &ctx)
}

#[test]
fn a_file_over_the_chats_limit_is_refused_before_it_is_sent() {
    let work = TempDir::new().unwrap();
    std::fs::write(work.path().join("big.bin"), vec![7u8; 2000]).unwrap();
    let (reg, outbox) = tool(&work, false, 1000);
    let Err(ToolError::Failed(m)) = call(&reg, json!({"path": "big.bin"})) else {
        panic!("sent a file over the limit");
    };
    assert!(
        m.contains("2000 bytes")
            && m.contains("at most 1000 bytes")
            && m.contains("Nothing was sent"),
        "{m}"
    );
    assert!(outbox.sent.lock().unwrap().is_empty());
}

#[test]
fn images_go_as_photos_audio_as_audio_and_the_rest_as_documents() {
    let work = TempDir::new().unwrap();
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    std::fs::write(work.path().join("chart.png"), &png).unwrap();
    std::fs::write(work.path().join("song.mp3"), b"ID3\x03 music").unwrap();
    std::fs::write(work.path().join("notes.pdf"), b"%PDF-1.4 x").unwrap();
    let (reg, outbox) = tool(&work, false, 1 << 20);
    let r = call(&reg, json!({"path": "chart.png", "caption": "Sales"})).unwrap();
    assert_eq!(
        r,
        format!(
            "Sent 'chart.png' ({} bytes) as a photo named chart.png with the caption \"Sales\" to the test.",
            png.len()
        )
    );
    call(&reg, json!({"path": "song.mp3"})).unwrap();
    call(&reg, json!({"path": "notes.pdf"})).unwrap();
    let sent = outbox.sent.lock().unwrap();
    let kinds: Vec<(FileKind, &str)> = sent
        .iter()
        .map(|f| (f.kind, f.media_type.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            (FileKind::Photo, "image/png"),
            (FileKind::Audio, "audio/mpeg"),
            (FileKind::Document, "application/pdf")
        ]
    );
    assert_eq!(sent[0].bytes, png);
}

#[test]
fn allow_outside_workdir_does_not_reach_send_file() {
    let work = TempDir::new().unwrap();
    let (reg, outbox) = tool(&work, true, 1 << 20);
    let Err(ToolError::Failed(m)) = call(&reg, json!({"path": "/etc/hostname"})) else {
        panic!("sent /etc/hostname");
    };
    assert!(m.contains("outside the working directory"), "{m}");
    let Err(ToolError::Failed(m)) = call(&reg, json!({"path": "."})) else {
        panic!("sent a directory");
    };
    assert!(m.contains("not a regular file"), "{m}");
    assert!(outbox.sent.lock().unwrap().is_empty());
}
