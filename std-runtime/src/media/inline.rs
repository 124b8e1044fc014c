//! The images a request carries: the request encoder's
//! [`AttachmentResolver`] for a model that accepts images.
//!
//! Only the images of the current turn ([`current_turn_start`]) are read and
//! sent, as data URLs; images of earlier turns go as their one-line text
//! references. So a conversation about a photo pays for the photo while the
//! turn that brought it runs (every model call of its tool loop), and a few
//! tokens in every request after that (SPEC X6: keep requests small). An
//! image that cannot be read (deleted, too large) goes as its reference too,
//! and the reason is logged.

use std::collections::HashMap;

use hermes_core::{
    Attachment, AttachmentKind, AttachmentResolver, LedgerEntry, current_turn_start,
};

use super::{MAX_IMAGE_BYTES, MediaDir, data_url};

/// Data URLs of the current turn's images, by attachment path.
#[derive(Debug, Default)]
pub struct InlineImages {
    urls: HashMap<String, String>,
}

impl InlineImages {
    /// Reads the images of the current turn of `entries` from `dir`.
    pub fn for_request(dir: &MediaDir, entries: &[LedgerEntry]) -> Self {
        let mut urls = HashMap::new();
        let turn = entries
            .get(current_turn_start(entries)..)
            .unwrap_or_default();
        for attachment in turn.iter().flat_map(|e| e.message.attachments()) {
            if attachment.kind != AttachmentKind::Image || urls.contains_key(&attachment.path) {
                continue;
            }
            match dir.read(attachment, MAX_IMAGE_BYTES) {
                Ok(bytes) => {
                    urls.insert(
                        attachment.path.clone(),
                        data_url(&attachment.media_type, &bytes),
                    );
                }
                Err(e) => tracing::warn!(
                    path = %attachment.path,
                    error = %e,
                    "an image of this turn cannot be read; the model gets its text reference"
                ),
            }
        }
        InlineImages { urls }
    }

    /// How many images are inlined.
    pub fn len(&self) -> usize {
        self.urls.len()
    }

    /// Whether no image is inlined.
    pub fn is_empty(&self) -> bool {
        self.urls.is_empty()
    }
}

impl AttachmentResolver for InlineImages {
    fn image_url(&self, attachment: &Attachment) -> Option<&str> {
        self.urls.get(&attachment.path).map(String::as_str)
    }
}
