//! The `send_file` tool: the agent hands the user a file it made (a chart,
//! a report). Offered by the front-ends, which know where the file goes:
//! the gateway uploads it to the session's chat, the CLI prints its path
//! ([`FileOutbox`]).
//!
//! The path is opened through the file tools' own confinement
//! ([`super::workdir`]: `openat2` beneath the working directory), always
//! confined — `allow_outside_workdir` does not reach this tool — and with
//! nothing of `$HERMES_HOME` allowed: a file that leaves the process can
//! never be `.env`, `config.toml` or the database. The size is checked
//! against the chat's limit before the file is read; one file per call.

use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

use hermes_core::{Tool, ToolContext, ToolError, ToolSpec, schema_text};
use serde::Deserialize;

use super::workdir::io_error;
use super::{Access, ToolEnv, ToolsError, Workdir, failed, parse_args, spec};
use crate::media::ImageFormat;

/// The tool's name (and its toolset's).
pub const NAME: &str = "send_file";

/// Whether the configured toolsets (`None`: all) include `send_file`.
pub fn offered(toolsets: Option<&[String]>) -> bool {
    toolsets.is_none_or(|t| t.iter().any(|n| n == NAME))
}

/// How a file is shown in the chat.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FileKind {
    /// A picture shown inline (Telegram `sendPhoto`).
    Photo,
    /// A music or audio file with a player (`sendAudio`).
    Audio,
    /// A voice note (`sendVoice`, Ogg/Opus): spoken replies.
    Voice,
    /// Anything else, as a file to download (`sendDocument`).
    #[default]
    Document,
}

impl FileKind {
    /// The word the tool result and errors use.
    pub fn noun(self) -> &'static str {
        match self {
            FileKind::Photo => "photo",
            FileKind::Audio => "audio file",
            FileKind::Voice => "voice note",
            FileKind::Document => "document",
        }
    }
}

/// A file on its way to the user.
#[derive(Clone, PartialEq, Eq)]
pub struct OutboundFile {
    /// Where it really is (the kernel's answer, not the model's spelling).
    pub path: PathBuf,
    /// The name the user sees.
    pub file_name: String,
    /// Its MIME type.
    pub media_type: String,
    /// How it is shown.
    pub kind: FileKind,
    /// The bytes.
    pub bytes: Vec<u8>,
    /// The text shown with it (may be empty).
    pub caption: String,
}

impl std::fmt::Debug for OutboundFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboundFile")
            .field("path", &self.path)
            .field("file_name", &self.file_name)
            .field("media_type", &self.media_type)
            .field("kind", &self.kind)
            .field("bytes", &self.bytes.len())
            .finish_non_exhaustive()
    }
}

/// Where a session's files go; the front-end's.
pub trait FileOutbox: Send + Sync {
    /// The largest file of `kind` the destination takes, in bytes; an error
    /// when there is nowhere to send to (a sentence for the model).
    fn limit(&self, kind: FileKind) -> Result<u64, String>;

    /// Sends `file`; says where it went (`"to this Telegram chat"`), or why
    /// it could not go (a sentence for the model).
    fn send(&self, file: OutboundFile) -> Result<String, String>;
}

/// The MIME type and kind of a file named `name` whose first bytes are
/// `head`: images by their signature, audio and common documents by name.
pub fn classify(name: &str, head: &[u8]) -> (String, FileKind) {
    if let Some(image) = ImageFormat::sniff(head).filter(|f| *f != ImageFormat::Gif) {
        return (image.media_type().to_owned(), FileKind::Photo);
    }
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    let audio = match ext.as_str() {
        "mp3" => Some("audio/mpeg"),
        "m4a" => Some("audio/mp4"),
        "ogg" | "oga" | "opus" => Some("audio/ogg"),
        "wav" => Some("audio/wav"),
        "flac" => Some("audio/flac"),
        "aac" => Some("audio/aac"),
        _ => None,
    };
    if let Some(t) = audio {
        return (t.to_owned(), FileKind::Audio);
    }
    let document = match ext.as_str() {
        "pdf" => "application/pdf",
        "txt" | "log" => "text/plain; charset=utf-8",
        "md" => "text/markdown; charset=utf-8",
        "csv" => "text/csv; charset=utf-8",
        "json" => "application/json",
        "html" | "htm" => "text/html; charset=utf-8",
        "svg" => "image/svg+xml",
        "gif" => "image/gif",
        "zip" => "application/zip",
        _ => "application/octet-stream",
    };
    (document.to_owned(), FileKind::Document)
}

#[derive(Deserialize)]
struct Args {
    path: String,
    #[serde(default)]
    caption: Option<String>,
}

/// The `send_file` tool of one session.
pub struct SendFileTool {
    spec: ToolSpec,
    files: ConfinedFiles,
    outbox: Arc<dyn FileOutbox>,
}

impl std::fmt::Debug for SendFileTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendFileTool")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl SendFileTool {
    /// The tool over `env`'s working directory (always confined), sending
    /// to `outbox`.
    pub fn new(env: &ToolEnv, outbox: Arc<dyn FileOutbox>) -> Result<Self, ToolsError> {
        Ok(SendFileTool {
            spec: spec(
                NAME,
                "Send a file from the working directory to the user (a chart, a report, a file \
                 you made). Images are shown as photos, audio as audio, anything else as a \
                 document. One file per call.",
                schema_text!(
                    r#"{
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "The file, relative to the working directory."},
                        "caption": {"type": "string", "description": "A short text shown with the file."}
                    },
                    "required": ["path"]
                }"#,
                ),
            ),
            files: ConfinedFiles::new(env)?,
            outbox,
        })
    }
}

/// Files read for sending out of the process, under `send_file`'s rules:
/// always confined to the working directory (`openat2` beneath it, no
/// `allow_outside_workdir`), nothing of `$HERMES_HOME`, a regular file,
/// not empty, at most the destination's limit. `send_message`'s
/// `MEDIA:<path>` files are read through this too.
#[derive(Clone)]
pub struct ConfinedFiles {
    workdir: Workdir,
}

impl std::fmt::Debug for ConfinedFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfinedFiles")
            .field("workdir", &self.workdir.root())
            .finish()
    }
}

/// A file [`ConfinedFiles::read`] read.
#[derive(Debug)]
pub struct ReadFile {
    /// Its name as shown to the model (relative to the working directory).
    pub shown: String,
    /// The file, caption empty.
    pub file: OutboundFile,
}

impl ConfinedFiles {
    /// Files under `env`'s working directory, always confined.
    pub fn new(env: &ToolEnv) -> Result<Self, ToolsError> {
        Ok(ConfinedFiles {
            workdir: Workdir::new(env)?.confined(),
        })
    }

    /// Reads `path` if the rules allow it and it is at most `limit(kind)`
    /// bytes; the error says why not (nothing is read then).
    pub fn read(
        &self,
        path: &str,
        limit: impl Fn(FileKind) -> Result<u64, String>,
    ) -> Result<ReadFile, ToolError> {
        let opened = self.workdir.open_file(path, Access::Send)?;
        if !opened.meta.is_file() {
            return Err(failed(format!(
                "Error: '{path}' is not a regular file; only files can be sent."
            )));
        }
        let shown = self.workdir.display(&opened.real);
        let file_name = opened
            .real
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "file".to_owned());
        let mut file = opened.file;
        let mut head = [0u8; 16];
        let n = file
            .read(&mut head)
            .map_err(|e| io_error("read", path, &e))?;
        let (media_type, kind) = classify(&file_name, &head[..n]);
        let size = opened.meta.len();
        let limit = limit(kind).map_err(failed)?;
        if size > limit {
            return Err(failed(format!(
                "Error: '{shown}' is {size} bytes; the chat takes a {} of at most {limit} bytes. \
                 Nothing was sent; make the file smaller (compress or split it).",
                kind.noun()
            )));
        }
        if size == 0 {
            return Err(failed(format!(
                "Error: '{shown}' is empty; nothing was sent."
            )));
        }
        let mut bytes = head[..n].to_vec();
        file.take(limit.saturating_sub(n as u64).saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| io_error("read", path, &e))?;
        if bytes.len() as u64 > limit {
            return Err(failed(format!(
                "Error: '{shown}' grew past the chat's limit of {limit} bytes while being read; nothing was sent."
            )));
        }
        Ok(ReadFile {
            shown,
            file: OutboundFile {
                path: opened.real,
                file_name,
                media_type,
                kind,
                bytes,
                caption: String::new(),
            },
        })
    }
}

impl Tool for SendFileTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: &str, _ctx: &ToolContext<'_>) -> Result<String, ToolError> {
        let args: Args = parse_args(NAME, arguments)?;
        let ReadFile { shown, mut file } = self
            .files
            .read(&args.path, |kind| self.outbox.limit(kind))?;
        let caption = args.caption.unwrap_or_default().trim().to_owned();
        file.caption.clone_from(&caption);
        let (file_name, kind, sent_bytes) = (file.file_name.clone(), file.kind, file.bytes.len());
        let whereto = self
            .outbox
            .send(file)
            .map_err(|e| failed(format!("Error: '{shown}' was not sent: {e}")))?;
        let with = if caption.is_empty() {
            String::new()
        } else {
            format!(" with the caption \"{caption}\"")
        };
        Ok(format!(
            "Sent '{shown}' ({sent_bytes} bytes) as a {} named {file_name}{with} {whereto}.",
            kind.noun()
        ))
    }
}
