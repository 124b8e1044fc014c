//! What the gateway makes of photos, voice notes and files (SPEC X6),
//! platform-neutral: the adapters only download ([`PlatformAdapter::fetch_media`]).
//!
//! When a message's turn starts, its media are fetched (at most
//! `[gateway] max_file_mb` each) and turned into the user message:
//! - a **photo** is stored under `$HERMES_HOME/media/<session>/` and
//!   attached to the message; a model that sees images gets it as an image
//!   part, one that does not gets the description a configured
//!   `[provider] vision_model` wrote when it arrived (or a note that it
//!   cannot see it). The caption is the message text.
//! - a **voice note** or **audio file** is transcribed
//!   (`[transcription]`); the transcript becomes the message text and is
//!   quoted at the top of the reply, so a mishearing shows. Without
//!   transcription configured the user gets a one-line answer saying how
//!   to enable it, and the model is not called for a message that had
//!   nothing else.
//! - a **file** is saved into the working directory (name sanitised, never
//!   overwriting) and announced to the model by name, so the file tools can
//!   read it.
//!
//! Anything that goes wrong — a download that fails, a file too large, bytes
//! that are not an image, a key that does not decrypt, a transcription or
//! description service that fails — becomes one clear line for the user at
//! the top of the reply and a note in the message for the model; the turn
//! still runs.
//!
//! [`PlatformAdapter::fetch_media`]: crate::adapter::PlatformAdapter::fetch_media

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use hermes_core::{Attachment, Message, Model};
use hermes_runtime::config::Settings;
use hermes_runtime::media::MediaSettings;
use hermes_runtime::media::documents::save_document;
use hermes_runtime::media::transcribe::Transcriber;
use hermes_runtime::media::{MediaDir, vision};

use crate::adapter::FetchedMedia;
use crate::event::{MediaKind, MediaRef};

/// The default of `[gateway] max_file_mb`: what the Telegram Bot API lets a
/// bot download, and WeCom's file limit.
pub const DEFAULT_MAX_FILE_MB: u64 = 20;

/// The answer to a voice message when no transcription is configured.
/// The operator's hint (`NO_TRANSCRIPTION_HINT`) goes to the log, never to
/// the chat (issue 31).
pub const NO_TRANSCRIPTION_NOTICE: &str =
    "🎤 I can't listen to voice messages here yet; please send your message as text.";
/// What the operator can do about [`NO_TRANSCRIPTION_NOTICE`] (logged).
const NO_TRANSCRIPTION_HINT: &str = "a voice message was not transcribed: set [transcription] base_url in config.toml to an OpenAI-compatible speech-to-text endpoint (OpenAI, or a local whisper.cpp / faster-whisper server)";

/// Told once per photo when the model cannot see it and nothing describes it.
/// The operator's hint goes to the log (issue 31).
pub const NO_VISION_NOTICE: &str =
    "🖼 This model can't see images, so I could not look at your photo.";
/// What the operator can do about [`NO_VISION_NOTICE`] (logged).
const NO_VISION_HINT: &str = "a photo was not shown to the model, which cannot see images: set [provider] vision = true in config.toml if it accepts them, or [provider] vision_model to a model that can describe them";

/// Everything the gateway needs to turn media into a user message.
pub struct MediaServices {
    media_dir: MediaDir,
    workdir: PathBuf,
    settings: MediaSettings,
    transcriber: Option<Transcriber>,
    describer: Option<Arc<dyn Model>>,
}

impl std::fmt::Debug for MediaServices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MediaServices")
            .field("media_dir", &self.media_dir)
            .field("workdir", &self.workdir)
            .field("transcription", &self.transcriber.is_some())
            .field("vision_model", &self.settings.vision_model)
            .finish()
    }
}

/// One medium of a message after its download.
#[derive(Debug)]
pub struct Download {
    /// What the platform said it is.
    pub media: MediaRef,
    /// The bytes, or why there are none (said to the user as is).
    pub result: Result<FetchedMedia, String>,
}

/// The user message a turn runs with, and what the user is told with the
/// reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepared {
    /// The message for the model (and the transcript).
    pub message: Message,
    /// One line per problem, shown at the top of the reply.
    pub notices: Vec<String>,
    /// Transcripts, quoted at the top of the reply.
    pub transcripts: Vec<String>,
    /// Whether there is anything for the model: `false` for a voice note
    /// that could not be transcribed because transcription is not
    /// configured, with no caption and nothing else.
    pub answerable: bool,
}

impl Prepared {
    /// The text put before the reply: the notices, then each transcript as
    /// a quote, each a paragraph of its own (empty when there are none).
    pub fn reply_prefix(&self) -> String {
        let mut out = String::new();
        for line in &self.notices {
            let _ = write!(out, "{line}\n\n");
        }
        for t in &self.transcripts {
            let _ = write!(out, "🎤 “{t}”\n\n");
        }
        out
    }
}

/// Sizes in words: `1.2 MB`, `830 KB`, `12 bytes`.
pub fn human_size(bytes: u64) -> String {
    if bytes >= 1024 * 1024 {
        format!("{:.1} MB", bytes as f64 / (1024.0 * 1024.0))
    } else if bytes >= 1024 {
        format!("{} KB", bytes.div_ceil(1024))
    } else {
        format!("{bytes} bytes")
    }
}

impl MediaServices {
    /// Services built from the runtime's settings: media under
    /// `$HERMES_HOME/media`, documents into the configured working
    /// directory, transcription and the vision model as configured.
    pub fn from_settings(settings: &Settings) -> Result<Self, String> {
        let describer: Option<Arc<dyn Model>> =
            match hermes_runtime::assemble::vision_client(settings) {
                None => None,
                Some(Ok(client)) => Some(Arc::new(client)),
                Some(Err(e)) => return Err(format!("the vision model's client: {e}")),
            };
        Ok(MediaServices {
            media_dir: MediaDir::in_home(&settings.home),
            workdir: settings.workdir.clone(),
            settings: settings.media.clone(),
            transcriber: settings.media.transcription.clone().map(Transcriber::new),
            describer,
        })
    }

    /// Services from their parts (tests, embedders).
    pub fn new(
        media_dir: MediaDir,
        workdir: PathBuf,
        settings: MediaSettings,
        describer: Option<Arc<dyn Model>>,
    ) -> Self {
        MediaServices {
            media_dir,
            workdir,
            transcriber: settings.transcription.clone().map(Transcriber::new),
            settings,
            describer,
        }
    }

    /// Whether voice notes and audio files can be transcribed.
    pub fn can_transcribe(&self) -> bool {
        self.transcriber.is_some()
    }

    /// The user message for `caption` and `downloads`, in session
    /// `session_id` with model `model` (blocking: transcription and
    /// descriptions are HTTP calls). `stem` names stored files
    /// (`<stem>-<n>`), so a message processed again replaces its own.
    pub fn prepare(
        &self,
        session_id: &str,
        model: &str,
        stem: &str,
        caption: &str,
        downloads: Vec<Download>,
    ) -> Prepared {
        let mut parts: Vec<String> = Vec::new();
        if !caption.trim().is_empty() {
            parts.push(caption.to_owned());
        }
        let mut attachments: Vec<Attachment> = Vec::new();
        let mut notices = Vec::new();
        let mut transcripts = Vec::new();
        let mut notes = Vec::new();
        let mut told_no_vision = false;
        let mut untranscribed = 0;
        let sees = vision::sees_images(&self.settings, model);
        let total = downloads.len();
        for (n, Download { media, result }) in downloads.into_iter().enumerate() {
            let noun = media.kind.noun();
            let fetched = match result {
                Ok(f) => f,
                Err(reason) => {
                    tracing::warn!(kind = noun, %reason, "a medium could not be downloaded");
                    notices.push(format!("⚠️ I could not get your {noun}: {reason}."));
                    notes.push(format!(
                        "[The user sent a {noun}, but it could not be downloaded: {reason}]"
                    ));
                    continue;
                }
            };
            match media.kind {
                MediaKind::Image => {
                    let stored = self.media_dir.store_image(
                        session_id,
                        &format!("{stem}-{n}"),
                        &fetched.bytes,
                    );
                    let mut attachment = match stored {
                        Ok(a) => a,
                        Err(e) => {
                            notices.push(format!("⚠️ I could not use your photo: {e}."));
                            notes.push(format!(
                                "[The user sent a photo that could not be used: {e}]"
                            ));
                            continue;
                        }
                    };
                    if !sees {
                        match &self.describer {
                            Some(describer) => {
                                match vision::describe(&**describer, &attachment, caption) {
                                    Ok(d) => attachment.description = Some(d),
                                    Err(e) => {
                                        tracing::warn!(error = %e, "the vision model could not describe an image");
                                        // The cause (the vision model's
                                        // address, its error) is the
                                        // operator's: it is in the log.
                                        notices.push(
                                            "⚠️ I could not get a description of your photo."
                                                .to_owned(),
                                        );
                                        notes.push(
                                            "[The user sent a photo, but it could not be described]"
                                                .to_owned(),
                                        );
                                    }
                                }
                            }
                            None => {
                                if !told_no_vision {
                                    tracing::warn!("{NO_VISION_HINT}");
                                    notices.push(NO_VISION_NOTICE.to_owned());
                                    told_no_vision = true;
                                }
                                notes.push(
                                    "[The user sent a photo, but this model cannot see images]"
                                        .to_owned(),
                                );
                            }
                        }
                    }
                    attachments.push(attachment);
                }
                MediaKind::Voice | MediaKind::Audio => {
                    let Some(transcriber) = &self.transcriber else {
                        untranscribed += 1;
                        if !notices.iter().any(|l| l == NO_TRANSCRIPTION_NOTICE) {
                            tracing::warn!("{NO_TRANSCRIPTION_HINT}");
                            notices.push(NO_TRANSCRIPTION_NOTICE.to_owned());
                        }
                        notes.push(format!(
                            "[The user sent a {noun}, which could not be transcribed: no transcription service is configured]"
                        ));
                        continue;
                    };
                    let (name, mime) = audio_name(&media, &fetched);
                    match transcriber.transcribe(&fetched.bytes, &name, &mime) {
                        Ok(text) => {
                            parts.push(text.clone());
                            transcripts.push(text);
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "a voice message could not be transcribed");
                            notices.push(format!("⚠️ I could not transcribe your {noun}."));
                            notes.push(format!(
                                "[The user sent a {noun}, but it could not be transcribed]"
                            ));
                        }
                    }
                }
                MediaKind::Document => {
                    let name = fetched
                        .file_name
                        .clone()
                        .or_else(|| media.file_name.clone())
                        .unwrap_or_else(|| format!("{stem}-{n}.bin"));
                    match save_document(&self.workdir, &name, &fetched.bytes) {
                        Ok(saved) => notes.push(format!(
                            "[The user sent a file, saved in the working directory as \"{}\" ({}); read it with the file tools]",
                            saved.name,
                            human_size(saved.bytes)
                        )),
                        Err(e) => {
                            tracing::warn!(error = %e, "a document could not be saved");
                            notices.push(format!("⚠️ I could not save your file: {e}."));
                            notes.push(format!(
                                "[The user sent a file \"{name}\", but it could not be saved: {e}]"
                            ));
                        }
                    }
                }
            }
        }
        let answerable = !(caption.trim().is_empty() && total > 0 && untranscribed == total);
        parts.extend(notes);
        Prepared {
            message: Message::user_with(parts.join("\n\n"), attachments),
            notices,
            transcripts,
            answerable,
        }
    }
}

/// The user message of a message with media when the gateway has no
/// [`MediaServices`] (an embedder that gave none): the caption, and a note
/// per medium that it was not processed.
pub fn without_services(caption: &str, media: &[MediaRef]) -> Prepared {
    let mut parts = Vec::new();
    if !caption.trim().is_empty() {
        parts.push(caption.to_owned());
    }
    for m in media {
        parts.push(format!(
            "[The user sent a {}, which this gateway does not process]",
            m.kind.noun()
        ));
    }
    Prepared {
        message: Message::user(parts.join("\n\n")),
        notices: Vec::new(),
        transcripts: Vec::new(),
        answerable: true,
    }
}

/// A file name and type for the transcription upload: what the platform
/// gave, else a name servers recognise by its extension.
fn audio_name(media: &MediaRef, fetched: &FetchedMedia) -> (String, String) {
    let mime = fetched
        .mime_type
        .clone()
        .or_else(|| media.mime_type.clone())
        .map(|m| m.split(';').next().unwrap_or("").trim().to_owned())
        .filter(|m| !m.is_empty() && m != "application/octet-stream")
        .unwrap_or_else(|| "audio/ogg".to_owned());
    let name = fetched
        .file_name
        .clone()
        .or_else(|| media.file_name.clone())
        .unwrap_or_else(|| {
            let ext = match mime.as_str() {
                "audio/mpeg" | "audio/mp3" => "mp3",
                "audio/mp4" | "audio/m4a" | "audio/x-m4a" => "m4a",
                "audio/wav" | "audio/x-wav" | "audio/wave" => "wav",
                "audio/webm" => "webm",
                "audio/flac" => "flac",
                "audio/amr" => "amr",
                _ => "ogg",
            };
            format!("voice.{ext}")
        });
    (name, mime)
}
