//! Files a user sent with a message, by reference (SPEC X6).
//!
//! A photo sent to the gateway becomes an [`Attachment`] on the user
//! [`Message`](crate::Message): its media type, where the runtime keeps the bytes (a path
//! relative to the runtime's media directory), its size and, for models that
//! cannot see images, a text description written by a vision model. The
//! ledger never holds the bytes: a resumed session, a compaction or an export
//! carries the reference only.
//!
//! # What the model is sent
//! The request encoder asks an [`AttachmentResolver`] for each image: a URL
//! (the runtime's data URL of the file) becomes an `image_url` content part;
//! no URL becomes a short text reference ([`Attachment::reference`]) — with
//! the description when there is one. The runtime resolves only the images of
//! the current turn ([`current_turn_start`]) and only for models that accept
//! images, so older images cost a line of text, not their bytes, in every
//! later request.
//!
//! The core does no IO: the resolver is the runtime's, and it hands out
//! borrowed strings it prepared before the request was encoded.

use alloc::format;
use alloc::string::String;

use serde::{Deserialize, Serialize};

/// What kind of file an [`Attachment`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum AttachmentKind {
    /// A picture (`image/jpeg`, `image/png`, `image/gif`, `image/webp`).
    Image,
}

/// A file sent with a user message, by reference.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// What it is.
    pub kind: AttachmentKind,
    /// The MIME type of the stored bytes (`image/jpeg`).
    pub media_type: String,
    /// Where the runtime keeps the bytes, relative to its media directory
    /// (`<session id>/<name>.jpg`). Never an absolute path: the store may move.
    pub path: String,
    /// The size of the stored file in bytes.
    pub bytes: u64,
    /// A text description of the image, for models that cannot see it
    /// (written by the configured vision model when the file arrived).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl Attachment {
    /// An image stored at `path` (relative to the media directory).
    pub fn image(media_type: impl Into<String>, path: impl Into<String>, bytes: u64) -> Self {
        Attachment {
            kind: AttachmentKind::Image,
            media_type: media_type.into(),
            path: path.into(),
            bytes,
            description: None,
        }
    }

    /// The file name part of [`Attachment::path`].
    pub fn file_name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }

    /// The text sent in place of the image when it is not sent as an image:
    /// the description when there is one, otherwise a short note that the
    /// image is not part of this request.
    pub fn reference(&self) -> String {
        match self.description.as_deref().map(str::trim) {
            Some(d) if !d.is_empty() => format!("[Image {}: {d}]", self.file_name()),
            _ => format!(
                "[Image {} ({}): not included in this request]",
                self.file_name(),
                self.media_type
            ),
        }
    }
}

/// Tells the request encoder how to send each image attachment.
///
/// Implemented by the runtime, which loads the files it wants sent before
/// the request is encoded and lends the encoder their URLs: the encoder
/// writes them straight into the body, without another copy.
pub trait AttachmentResolver {
    /// The URL to send `attachment` as (an `image_url` part), or `None` to
    /// send its [`Attachment::reference`] as text instead.
    fn image_url(&self, attachment: &Attachment) -> Option<&str>;
}

/// Resolves nothing: every attachment travels as its text reference. What
/// [`encode_request`](crate::codec::request::encode_request) uses.
#[derive(Clone, Copy, Debug, Default)]
pub struct TextReferences;

impl AttachmentResolver for TextReferences {
    fn image_url(&self, _attachment: &Attachment) -> Option<&str> {
        None
    }
}
