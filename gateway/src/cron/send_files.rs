//! Files of `send_message` (hermes-agent's convention): `MEDIA:<path>`
//! tokens in the message name files to send with it, `[[as_document]]`
//! sends images as documents (unrecompressed).
//!
//! - **Read under the file tools' rules** at the call
//!   ([`hermes_runtime::tools::ConfinedFiles`]: beneath the working
//!   directory, no symlink out, nothing of `$HERMES_HOME`, a regular file
//!   of at most [`MAX_FILE_BYTES`]). One refused file refuses the call:
//!   nothing is queued.
//! - **Copied into the outbox** (`$HERMES_HOME/outbox/<job id>/`) before
//!   the message's job is stored, with a list `sendfiles:<job id>` in the
//!   key-value table: what is delivered is what was checked, even if the
//!   file changes or goes away later, and it survives a restart.
//! - **Delivered by the scheduler** with the text (`super::run`): each
//!   file marked sent in the list as soon as the platform took it, so a
//!   retry after a transient failure sends only what is left; the copies
//!   and the list are deleted when the run is over.

use std::path::{Path, PathBuf};

use hermes_core::ToolError;
use hermes_runtime::store::{Store, StoreError};
use hermes_runtime::tools::{ConfinedFiles, FileKind, ReadFile};
use serde::{Deserialize, Serialize};

/// Keys of the lists of files waiting with a message start with this.
pub const FILES_KEY_PREFIX: &str = "sendfiles:";
/// The largest file `send_message` takes (Telegram's upload limit; the
/// platform's own, smaller limits are checked when it is sent).
pub const MAX_FILE_BYTES: u64 = 50 * 1024 * 1024;
/// At most this many files per message.
pub const MAX_FILES: usize = 10;
const AS_DOCUMENT: &str = "[[as_document]]";

/// A message split into its text and its files.
#[derive(Debug, PartialEq, Eq)]
pub struct Parsed {
    /// The text without the tokens.
    pub text: String,
    /// The paths, as written.
    pub paths: Vec<String>,
    /// `[[as_document]]` was given.
    pub as_document: bool,
}

/// Splits `message` into text, `MEDIA:<path>` paths (a path may be quoted
/// with `"`, `'` or a backtick, or runs to the next whitespace) and the
/// `[[as_document]]` directive.
pub fn parse(message: &str) -> Parsed {
    let as_document = message.contains(AS_DOCUMENT);
    let rest = message.replace(AS_DOCUMENT, "");
    let mut text = String::new();
    let mut paths = Vec::new();
    let mut rest = rest.as_str();
    while let Some(at) = rest.find("MEDIA:") {
        text.push_str(&rest[..at]);
        let after = rest[at + "MEDIA:".len()..].trim_start_matches([' ', '\t']);
        let quote = after
            .chars()
            .next()
            .filter(|c| matches!(c, '"' | '\'' | '`'));
        let (path, tail) = match quote {
            Some(q) => match after[1..].find(q) {
                Some(end) => (&after[1..1 + end], &after[end + 2..]),
                None => (&after[1..], ""),
            },
            None => {
                let end = after.find(char::is_whitespace).unwrap_or(after.len());
                (&after[..end], &after[end..])
            }
        };
        if !path.is_empty() {
            paths.push(path.to_owned());
        }
        rest = tail;
    }
    text.push_str(rest);
    let text = text
        .lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_owned();
    Parsed {
        text,
        paths,
        as_document,
    }
}

/// A file waiting in the outbox with its message.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QueuedFile {
    /// The outbox copy.
    pub path: PathBuf,
    /// The name the user sees.
    pub name: String,
    /// Its MIME type.
    pub media_type: String,
    /// `photo`, `audio` or `document`.
    pub kind: String,
    /// The platform took it.
    pub sent: bool,
}

impl QueuedFile {
    /// How the chat shows it.
    pub fn kind(&self) -> FileKind {
        match self.kind.as_str() {
            "photo" => FileKind::Photo,
            "audio" => FileKind::Audio,
            _ => FileKind::Document,
        }
    }
}

fn kind_name(kind: FileKind) -> &'static str {
    match kind {
        FileKind::Photo => "photo",
        FileKind::Audio | FileKind::Voice => "audio",
        FileKind::Document => "document",
    }
}

fn refused(why: String) -> ToolError {
    ToolError::Failed(format!("{why} Nothing was sent."))
}

/// Reads every file of `paths` under `files`' rules (all of them, before
/// anything is written), then copies them into `outbox/<job_id>/`.
/// Returns the list to store; an error refuses the whole message.
pub fn stage(
    files: Option<&ConfinedFiles>,
    outbox: &Path,
    job_id: &str,
    parsed: &Parsed,
) -> Result<Vec<QueuedFile>, ToolError> {
    if parsed.paths.is_empty() {
        return Ok(Vec::new());
    }
    let Some(files) = files else {
        return Err(refused(
            "send_message cannot send files here (no working directory is set up).".into(),
        ));
    };
    if parsed.paths.len() > MAX_FILES {
        return Err(refused(format!(
            "{} files are named; at most {MAX_FILES} go with one message.",
            parsed.paths.len()
        )));
    }
    let mut read: Vec<ReadFile> = Vec::new();
    for path in &parsed.paths {
        let file = files
            .read(path, |_| Ok(MAX_FILE_BYTES))
            .map_err(|e| refused(format!("MEDIA:{path} refused: {e}.")))?;
        read.push(file);
    }
    let dir = outbox.join(job_id);
    let write = |dir: &Path| -> std::io::Result<Vec<QueuedFile>> {
        std::fs::create_dir_all(dir)?;
        let mut queued = Vec::new();
        for (i, r) in read.iter().enumerate() {
            let path = dir.join(i.to_string());
            std::fs::write(&path, &r.file.bytes)?;
            let kind = match r.file.kind {
                FileKind::Photo if parsed.as_document => FileKind::Document,
                k => k,
            };
            queued.push(QueuedFile {
                path,
                name: r.file.file_name.clone(),
                media_type: r.file.media_type.clone(),
                kind: kind_name(kind).to_owned(),
                sent: false,
            });
        }
        Ok(queued)
    };
    write(&dir).map_err(|e| {
        let _ = std::fs::remove_dir_all(&dir);
        ToolError::Failed(format!("the files could not be queued: {e}"))
    })
}

/// The key of `job_id`'s file list.
pub fn key(job_id: &str) -> String {
    format!("{FILES_KEY_PREFIX}{job_id}")
}

/// The files of `job_id`'s message (empty: none).
pub fn queued(store: &Store, job_id: &str) -> Result<Vec<QueuedFile>, StoreError> {
    Ok(store
        .kv_get(&key(job_id))?
        .and_then(|v| serde_json::from_str(&v).ok())
        .unwrap_or_default())
}

/// Stores `job_id`'s file list (as it is now).
pub fn save(store: &mut Store, job_id: &str, files: &[QueuedFile]) -> Result<(), StoreError> {
    let value = serde_json::to_string(files).unwrap_or_default();
    store.kv_set(&key(job_id), &value)
}

/// The run of `job_id` is over: its outbox copies and list go.
pub fn forget(store: &mut Store, job_id: &str) -> Result<(), StoreError> {
    let files = queued(store, job_id)?;
    if let Some(dir) = files.first().and_then(|f| f.path.parent()) {
        let _ = std::fs::remove_dir_all(dir);
    }
    store.kv_delete(&[&key(job_id)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_quoted_or_bare_are_taken_out_of_the_text() {
        let p = parse("Here [[as_document]]\nMEDIA:out/a.png and MEDIA: \"my file.pdf\" end");
        assert_eq!(p.paths, vec!["out/a.png", "my file.pdf"]);
        assert!(p.as_document);
        assert_eq!(p.text, "Here\n and  end");
        let only = parse("MEDIA:`x.txt`");
        assert_eq!(only.paths, vec!["x.txt"]);
        assert_eq!(only.text, "");
        assert!(parse("no files").paths.is_empty());
    }
}
