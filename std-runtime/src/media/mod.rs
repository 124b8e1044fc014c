//! What users send besides text (SPEC X6): the files behind
//! [`Attachment`]s, the images a request carries, the descriptions of
//! images for models that cannot see them, voice transcription, and
//! documents saved into the working directory.
//!
//! - [`MediaDir`] keeps images under `$HERMES_HOME/media/<session>/`
//!   (directories 0700, files 0600) and reads them back *beneath* that
//!   directory only (cap-std), whatever a stored reference says.
//! - [`inline::InlineImages`] is the request encoder's resolver: the images
//!   of the current turn as data URLs, for a model that accepts images.
//! - [`vision`] knows which model families see images and asks a vision
//!   model to describe a picture for one that does not.
//! - [`transcribe::Transcriber`] sends audio to an OpenAI-compatible
//!   `POST /audio/transcriptions`.
//! - [`tts::Speaker`] turns an answer into speech with an OpenAI-compatible
//!   `POST /audio/speech`.
//! - [`documents::save_document`] writes a file into the working directory:
//!   name sanitised, never overwriting, never outside.
//! - [`fetch::download`] fetches a platform's file, bounded, without ever
//!   naming its URL (which may carry a token) in an error.

pub mod documents;
pub mod fetch;
pub mod inline;
mod service;
pub mod settings;
pub mod transcribe;
pub mod tts;
pub mod vision;

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, DirBuilder, OpenOptions};
use hermes_core::Attachment;

pub use settings::{
    DEFAULT_TRANSCRIPTION_MODEL, DEFAULT_TRANSCRIPTION_TIMEOUT, MediaSettings,
    TranscriptionSettings,
};

/// The largest image sent to a model (providers refuse bigger ones: OpenAI
/// at 20 MB, Anthropic at 5 MB per image; 10 MB is what most accept).
pub const MAX_IMAGE_BYTES: u64 = 10 * 1024 * 1024;

/// An image format providers accept, recognised by its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageFormat {
    /// `image/jpeg`
    Jpeg,
    /// `image/png`
    Png,
    /// `image/gif`
    Gif,
    /// `image/webp`
    Webp,
}

impl ImageFormat {
    /// Recognises `bytes` by their signature; `None` for anything else (a
    /// corrupt download, an HTML error page, a format models do not take).
    pub fn sniff(bytes: &[u8]) -> Option<Self> {
        if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
            Some(ImageFormat::Jpeg)
        } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(ImageFormat::Png)
        } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
            Some(ImageFormat::Gif)
        } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
            Some(ImageFormat::Webp)
        } else {
            None
        }
    }

    /// The MIME type.
    pub fn media_type(self) -> &'static str {
        match self {
            ImageFormat::Jpeg => "image/jpeg",
            ImageFormat::Png => "image/png",
            ImageFormat::Gif => "image/gif",
            ImageFormat::Webp => "image/webp",
        }
    }

    /// The usual file extension.
    pub fn extension(self) -> &'static str {
        match self {
            ImageFormat::Jpeg => "jpg",
            ImageFormat::Png => "png",
            ImageFormat::Gif => "gif",
            ImageFormat::Webp => "webp",
        }
    }
}

/// `data:{media_type};base64,…` of `bytes`.
pub fn data_url(media_type: &str, bytes: &[u8]) -> String {
    use base64::Engine as _;
    let prefix = format!("data:{media_type};base64,");
    let mut out = String::with_capacity(prefix.len() + bytes.len().div_ceil(3) * 4);
    out.push_str(&prefix);
    base64::engine::general_purpose::STANDARD.encode_string(bytes, &mut out);
    out
}

/// Why a media file could not be stored or read.
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    /// The bytes are not an image a model accepts.
    #[error("the file is not a JPEG, PNG, GIF or WebP image (it may be corrupt)")]
    NotAnImage,
    /// The file is larger than allowed.
    #[error("the file is too large ({size} bytes; at most {max})")]
    TooLarge {
        /// Its size.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// A reference that does not name a file beneath the media directory.
    #[error("not a media reference: {0:?}")]
    BadReference(String),
    /// The file system refused.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: io::Error,
    },
}

fn io_error(what: impl Into<String>) -> impl FnOnce(io::Error) -> MediaError {
    let what = what.into();
    move |source| MediaError::Io { what, source }
}

/// Keeps only characters that are safe in one path component.
fn component(s: &str) -> String {
    let cleaned: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(80)
        .collect();
    let cleaned = cleaned.trim_start_matches('.');
    if cleaned.is_empty() {
        "_".to_owned()
    } else {
        cleaned.to_owned()
    }
}

/// `$HERMES_HOME/media`: where the files behind attachments live.
#[derive(Clone, Debug)]
pub struct MediaDir {
    root: PathBuf,
}

impl MediaDir {
    /// The media directory of `hermes_home` (created when first written).
    pub fn in_home(hermes_home: &Path) -> Self {
        MediaDir {
            root: hermes_home.join("media"),
        }
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Stores an image of session `session_id` as `<stem>.<ext>` (the
    /// extension from its format; an existing file of that name is
    /// replaced, so a message processed again after a restart does not
    /// leave a second copy) and returns its attachment. Refuses what is
    /// not an image or is larger than [`MAX_IMAGE_BYTES`].
    pub fn store_image(
        &self,
        session_id: &str,
        stem: &str,
        bytes: &[u8],
    ) -> Result<Attachment, MediaError> {
        let size = bytes.len() as u64;
        if size > MAX_IMAGE_BYTES {
            return Err(MediaError::TooLarge {
                size,
                max: MAX_IMAGE_BYTES,
            });
        }
        let format = ImageFormat::sniff(bytes).ok_or(MediaError::NotAnImage)?;
        let rel = format!(
            "{}/{}.{}",
            component(session_id),
            component(stem),
            format.extension()
        );
        self.write(&rel, bytes)?;
        Ok(Attachment::image(format.media_type(), rel, size))
    }

    /// Writes `bytes` at `rel` (two components) with mode 0600, through a
    /// temp file and a rename, in directories of mode 0700.
    fn write(&self, rel: &str, bytes: &[u8]) -> Result<(), MediaError> {
        use cap_std::fs::{DirBuilderExt as _, OpenOptionsExt as _};
        use std::os::unix::fs::DirBuilderExt as _;
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true).mode(0o700);
        builder
            .create(&self.root)
            .map_err(io_error(format!("create {}", self.root.display())))?;
        let root = Dir::open_ambient_dir(&self.root, ambient_authority())
            .map_err(io_error(format!("open {}", self.root.display())))?;
        let (dir_name, file_name) = rel
            .split_once('/')
            .ok_or_else(|| MediaError::BadReference(rel.to_owned()))?;
        let mut sub = DirBuilder::new();
        sub.mode(0o700);
        match root.create_dir_with(dir_name, &sub) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_error(format!("create media/{dir_name}"))(e)),
        }
        let dir = root
            .open_dir(dir_name)
            .map_err(io_error(format!("open media/{dir_name}")))?;
        let tmp = format!(".{file_name}.tmp-{}", std::process::id());
        let mut opts = OpenOptions::new();
        opts.write(true).create(true).truncate(true).mode(0o600);
        let written = (|| {
            let mut file = dir.open_with(&tmp, &opts)?;
            file.write_all(bytes)?;
            file.sync_all()?;
            dir.rename(&tmp, &dir, file_name)
        })();
        if written.is_err() {
            let _ = dir.remove_file(&tmp);
        }
        written.map_err(io_error(format!("write media/{rel}")))
    }

    /// The bytes behind `attachment`, at most `max` of them. The reference
    /// is opened beneath the media directory: a path that climbs out (a
    /// tampered database) is refused by the kernel.
    pub fn read(&self, attachment: &Attachment, max: u64) -> Result<Vec<u8>, MediaError> {
        let rel = attachment.path.as_str();
        if rel.is_empty() || rel.starts_with('/') {
            return Err(MediaError::BadReference(rel.to_owned()));
        }
        let root = Dir::open_ambient_dir(&self.root, ambient_authority())
            .map_err(io_error(format!("open {}", self.root.display())))?;
        let file = root
            .open(rel)
            .map_err(io_error(format!("read media/{rel}")))?;
        let size = file
            .metadata()
            .map_err(io_error(format!("read media/{rel}")))?
            .len();
        if size > max {
            return Err(MediaError::TooLarge { size, max });
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        file.into_std()
            .take(max.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(io_error(format!("read media/{rel}")))?;
        if bytes.len() as u64 > max {
            return Err(MediaError::TooLarge {
                size: bytes.len() as u64,
                max,
            });
        }
        Ok(bytes)
    }
}
