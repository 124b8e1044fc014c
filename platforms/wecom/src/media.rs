//! The AI bot's images and files, and streamed replies (SPEC X6).
//!
//! Files: an image or file message carries the URL of the file encrypted
//! with AES-256-CBC and its key (`aeskey`, base64 without padding); the IV
//! is the key's first 16 bytes and the plaintext is PKCS#7-padded to 32
//! bytes — the rule of WeCom's SDKs (`wecom-aibot-python-sdk`'s
//! `decrypt_file`). A wrong key shows as bad padding and is reported as
//! such, never passed on as a file.
//!
//! Streamed replies: WeCom's native `stream` message, answering the
//! callback's `req_id` (`aibot_respond_msg`, `msgtype: stream`): every
//! frame carries the whole reply so far under one `stream.id`, the last one
//! `finish: true`, as the SDKs' `replyStream` does. A reply over
//! [`MAX_STREAM_BYTES`] ends the stream with a pointer to the messages that
//! follow and is sent the usual way.

use std::sync::Arc;
use std::time::Duration;

use aes::Aes256;
use async_trait::async_trait;
use base64::Engine as _;
use cbc::cipher::block_padding::NoPadding;
use cbc::cipher::{BlockModeDecrypt, KeyIvInit};

use super::wire::{self, MAX_STREAM_BYTES, MediaHandle};
use super::{Inner, PLATFORM};
use hermes_platform_kit::adapter::{AdapterError, FetchedMedia, Finished, ReplyStream};
use hermes_platform_kit::event::MediaRef;

/// One download's deadline.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(90);

/// Why a file did not decrypt.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecryptError {
    /// The key is not 32 bytes of base64.
    #[error("the file's key is not a 32-byte base64 key")]
    BadKey,
    /// The ciphertext is not whole blocks.
    #[error("the encrypted file is {0} bytes, not a whole number of AES blocks")]
    BlockLength(usize),
    /// The padding is wrong: a wrong key or a damaged file.
    #[error("the file does not decrypt with its key (wrong key or damaged file)")]
    Padding,
}

/// Decrypts an AI-bot file with its `aeskey`.
pub fn decrypt_media(encrypted: &[u8], aeskey: &str) -> Result<Vec<u8>, DecryptError> {
    let trimmed = aeskey.trim().trim_end_matches('=');
    let key = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(trimmed)
        .map_err(|_| DecryptError::BadKey)?;
    let key: [u8; 32] = key.try_into().map_err(|_| DecryptError::BadKey)?;
    if encrypted.is_empty() || !encrypted.len().is_multiple_of(16) {
        return Err(DecryptError::BlockLength(encrypted.len()));
    }
    let mut iv = [0u8; 16];
    iv.copy_from_slice(&key[..16]);
    let mut buf = encrypted.to_vec();
    let plain = cbc::Decryptor::<Aes256>::new(&key.into(), &iv.into())
        .decrypt_padded::<NoPadding>(&mut buf)
        .map_err(|_| DecryptError::BlockLength(encrypted.len()))?;
    let pad = usize::from(*plain.last().ok_or(DecryptError::Padding)?);
    if pad == 0 || pad > 32 || pad > plain.len() {
        return Err(DecryptError::Padding);
    }
    let (body, padding) = plain.split_at(plain.len() - pad);
    if padding.iter().any(|&b| usize::from(b) != pad) {
        return Err(DecryptError::Padding);
    }
    Ok(body.to_vec())
}

/// Downloads and decrypts the file of `media` (at most `max_bytes`).
pub(super) async fn fetch(media: &MediaRef, max_bytes: u64) -> Result<FetchedMedia, AdapterError> {
    let rejected = |message: String| AdapterError::Rejected {
        platform: PLATFORM,
        message,
    };
    let handle: MediaHandle = serde_json::from_str(&media.handle)
        .map_err(|_| rejected("the message names no file to download".to_owned()))?;
    // The ciphertext is the plaintext plus at most 32 bytes of padding.
    let limit = max_bytes.saturating_add(32);
    let url = handle.url.clone();
    let downloaded = hermes_runtime::task::spawn_blocking(move || {
        hermes_runtime::media::fetch::download(&url, limit, DOWNLOAD_TIMEOUT)
    })
    .await
    .map_err(|e| rejected(format!("the download task failed: {e}")))?
    .map_err(|e| AdapterError::Network {
        platform: PLATFORM,
        message: e.to_string(),
    })?;
    let bytes = if handle.aeskey.is_empty() {
        downloaded.bytes
    } else {
        decrypt_media(&downloaded.bytes, &handle.aeskey).map_err(|e| rejected(e.to_string()))?
    };
    Ok(FetchedMedia {
        bytes,
        mime_type: media.mime_type.clone(),
        file_name: downloaded.file_name.or_else(|| media.file_name.clone()),
    })
}

/// The start of `text` within `max` UTF-8 bytes (a whole character last).
fn head_within(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    &text[..hermes_runtime::text::floor_char_boundary(text, max)]
}

/// The end of `text` within `max` bytes, marked as cut.
fn tail_within(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let start = hermes_runtime::text::ceil_char_boundary(
        text,
        text.len() - max.saturating_sub('…'.len_utf8()),
    );
    format!("…{}", &text[start..])
}

/// Shown as a long reply's stream ends; the reply follows in messages.
pub const CONTINUED_NOTE: &str = "(The full reply is too long for one message; it follows below.)";

/// One reply streamed as WeCom `stream` frames.
pub(super) struct WecomReply {
    pub(super) inner: Arc<Inner>,
    pub(super) req_id: String,
    pub(super) stream_id: String,
    /// A frame was sent.
    pub(super) started: bool,
}

impl WecomReply {
    async fn frame(&self, content: &str, finish: bool) -> Result<(), AdapterError> {
        let frame = wire::respond_stream(&self.req_id, &self.stream_id, content, finish);
        self.inner
            .request(&self.req_id, wire::CMD_RESPOND, frame)
            .await
    }
}

#[async_trait]
impl ReplyStream for WecomReply {
    async fn update(&mut self, preview: &str) -> Result<(), AdapterError> {
        let content = tail_within(preview.trim_end(), MAX_STREAM_BYTES);
        if content.trim().is_empty() {
            return Ok(());
        }
        self.frame(&content, false).await?;
        self.started = true;
        Ok(())
    }

    async fn finish(&mut self, text: &str) -> Result<Finished, AdapterError> {
        let whole = text.trim_end();
        if whole.trim().is_empty() {
            if self.started {
                self.frame("…", true).await?;
            }
            return Ok(Finished::NotDelivered);
        }
        if whole.len() <= MAX_STREAM_BYTES {
            self.frame(whole, true).await?;
            return Ok(Finished::Delivered);
        }
        let room = MAX_STREAM_BYTES - CONTINUED_NOTE.len() - 2;
        let head = head_within(whole, room);
        self.frame(&format!("{head}\n\n{CONTINUED_NOTE}"), true)
            .await?;
        Ok(Finished::NotDelivered)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use cbc::cipher::BlockModeEncrypt;

    fn encrypt(plain: &[u8], key: &[u8; 32]) -> Vec<u8> {
        let pad = 32 - plain.len() % 32;
        let mut buf = plain.to_vec();
        buf.resize(plain.len() + pad, pad as u8);
        let mut iv = [0u8; 16];
        iv.copy_from_slice(&key[..16]);
        let len = buf.len();
        cbc::Encryptor::<Aes256>::new(key.into(), &iv.into())
            .encrypt_padded::<NoPadding>(&mut buf, len)
            .unwrap()
            .to_vec()
    }

    #[test]
    fn files_decrypt_with_their_key_and_a_wrong_key_is_caught() {
        let key = [7u8; 32];
        let aeskey = base64::engine::general_purpose::STANDARD_NO_PAD.encode(key);
        assert_eq!(aeskey.len(), 43, "WeCom's keys carry no padding");
        let plain = b"\x89PNG\r\n\x1a\n a picture of a grey cat asleep on a red sofa";
        let encrypted = encrypt(plain, &key);
        assert_eq!(decrypt_media(&encrypted, &aeskey).unwrap(), plain);
        assert_eq!(
            decrypt_media(&encrypted, &format!("{aeskey}=")).unwrap(),
            plain
        );
        let wrong = base64::engine::general_purpose::STANDARD_NO_PAD.encode([9u8; 32]);
        assert_eq!(
            decrypt_media(&encrypted, &wrong),
            Err(DecryptError::Padding)
        );
        assert_eq!(
            decrypt_media(&encrypted, "short"),
            Err(DecryptError::BadKey)
        );
        assert_eq!(
            decrypt_media(&encrypted[..33], &aeskey),
            Err(DecryptError::BlockLength(33))
        );
        // A whole 32-byte block of padding.
        let exact = [1u8; 64];
        assert_eq!(
            decrypt_media(&encrypt(&exact, &key), &aeskey).unwrap(),
            exact
        );
    }

    #[test]
    fn stream_content_is_cut_on_character_boundaries() {
        let text = "é".repeat(20);
        assert_eq!(head_within(&text, 5), "éé");
        let tail = tail_within(&text, 9);
        assert!(tail.len() <= 9 && tail.starts_with('…'), "{tail}");
    }
}
