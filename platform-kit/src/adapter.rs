//! The contract between the runner and a platform adapter (SPEC G1, G3).

use std::sync::Arc;

use async_trait::async_trait;

use crate::delivery::LateFailureHandler;
use crate::event::{MediaRef, MessageEvent};
use crate::lease::Held;
use crate::split::LengthUnit;

/// The one callback every adapter delivers inbound events to. It returns
/// quickly: the runner queues the work.
pub type EventHandler = Arc<dyn Fn(MessageEvent) + Send + Sync>;

/// Why an adapter operation failed.
#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    /// Credentials were refused (bad token, bad secret). Not retryable: the
    /// adapter stops and the message says which setting to fix.
    #[error("{platform}: authentication failed: {message}")]
    Auth {
        /// The platform.
        platform: &'static str,
        /// What the platform said, and what to check.
        message: String,
    },
    /// Another client took over the connection or the poll (Telegram 409,
    /// WeCom `disconnected_event`). Not retried.
    #[error("{platform}: {message}")]
    Conflict {
        /// The platform.
        platform: &'static str,
        /// What happened.
        message: String,
    },
    /// The platform rejected this request (after the adapter's own retries).
    #[error("{platform}: request failed: {message}")]
    Rejected {
        /// The platform.
        platform: &'static str,
        /// The platform's message.
        message: String,
    },
    /// The platform refused this message for a reason sending it again
    /// will not change (WhatsApp's 24-hour window, error 131047). Whoever
    /// retries deliveries (the scheduler) records it as failed at once.
    /// The message names the reason and the platform's code.
    #[error("{message}")]
    Undeliverable {
        /// The platform.
        platform: &'static str,
        /// Why, in words, with the platform's code.
        message: String,
    },
    /// Network trouble that outlasted the adapter's retries.
    #[error("{platform}: network error: {message}")]
    Network {
        /// The platform.
        platform: &'static str,
        /// What failed.
        message: String,
    },
    /// The adapter is not connected.
    #[error("{platform}: not connected")]
    NotConnected {
        /// The platform.
        platform: &'static str,
    },
    /// The platform (or this adapter) cannot do that, e.g. send files.
    #[error("{platform}: {what} not supported")]
    Unsupported {
        /// The platform.
        platform: &'static str,
        /// What was asked for.
        what: &'static str,
    },
}

pub use hermes_runtime::tools::FileKind;
pub use hermes_runtime::tools::Question;

/// A file to send to a chat: the part of a reply too long for messages
/// ([`crate::overflow`]), a spoken reply (the gateway's `voice`), a file the
/// agent sends (`send_file`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutgoingFile {
    /// The file name the user sees (`reply.md`).
    pub file_name: String,
    /// The bytes.
    pub content: Vec<u8>,
    /// A short text shown with the file where the platform has captions.
    pub caption: String,
    /// How the chat shows it (a document unless said otherwise).
    pub kind: FileKind,
    /// Its MIME type; empty: `application/octet-stream`.
    pub media_type: String,
}

impl OutgoingFile {
    /// The MIME type to upload with.
    pub fn content_type(&self) -> &str {
        if self.media_type.trim().is_empty() {
            "application/octet-stream"
        } else {
            &self.media_type
        }
    }
}

/// A file downloaded from a platform ([`PlatformAdapter::fetch_media`]).
#[derive(Clone, PartialEq, Eq)]
pub struct FetchedMedia {
    /// The bytes (decrypted, where the platform encrypts them).
    pub bytes: Vec<u8>,
    /// The MIME type the platform gave with the download, if any.
    pub mime_type: Option<String>,
    /// The file name the platform gave with the download, if any.
    pub file_name: Option<String>,
}

impl std::fmt::Debug for FetchedMedia {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FetchedMedia")
            .field("bytes", &self.bytes.len())
            .field("mime_type", &self.mime_type)
            .field("file_name", &self.file_name)
            .finish()
    }
}

/// How a streamed reply ended ([`ReplyStream::finish`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finished {
    /// The whole reply is in the streamed message: nothing more to send.
    Delivered,
    /// The reply does not fit (or the stream broke): the adapter has put
    /// its preview away, and the runner sends the reply the usual way
    /// (split, at most `max_reply_messages`, the rest as a file).
    NotDelivered,
}

/// A reply shown while it is written (SPEC X6), made by
/// [`PlatformAdapter::begin_reply`]. The runner calls `update` with the
/// whole preview each time (the answer so far and a status line), no more
/// often than [`PlatformAdapter::stream_interval`], in order, then `finish`
/// once with the final text.
#[async_trait]
pub trait ReplyStream: Send {
    /// Shows `preview` in place of the previous one. An error means the
    /// platform refused; the runner stops updating and `finish` decides.
    async fn update(&mut self, preview: &str) -> Result<(), AdapterError>;

    /// Ends the reply with `text`, formatted for the platform.
    async fn finish(&mut self, text: &str) -> Result<Finished, AdapterError>;
}

/// A chat platform. Implementations translate; they make no decisions about
/// sessions, users or the agent.
#[async_trait]
pub trait PlatformAdapter: Send + Sync {
    /// The platform name used in session keys (`telegram`, `wecom`, …).
    fn platform(&self) -> &'static str;

    /// The longest single message the platform accepts, in the unit the
    /// adapter counts (see [`crate::split`]).
    fn max_message_len(&self) -> usize;

    /// Connects and starts delivering inbound events to `handler`. Returns
    /// once the connection is established (or failed for good); delivery
    /// continues on the adapter's own tasks.
    async fn connect(&self, handler: EventHandler) -> Result<(), AdapterError>;

    /// Stops delivery and closes connections gracefully.
    async fn disconnect(&self);

    /// Sends `text` to `chat_id`, optionally as a reply to `reply_to` (a
    /// [`MessageEvent::message_id`]). Text longer than the platform allows is
    /// split by the adapter ([`crate::split::split_message`]), never cut.
    async fn send(
        &self,
        chat_id: &str,
        text: &str,
        reply_to: Option<&str>,
    ) -> Result<(), AdapterError>;

    /// Sends `text` into `thread` of `chat_id` (a forum topic, a thread:
    /// [`crate::event::SessionSource::thread_id`]), where nothing is being
    /// replied to — the scheduler delivering a job created in that thread.
    /// Split as [`PlatformAdapter::send`]. Platforms whose threads are not
    /// addressed this way (the default) post in the chat.
    async fn send_to_thread(
        &self,
        chat_id: &str,
        thread: &str,
        text: &str,
    ) -> Result<(), AdapterError> {
        let _ = thread;
        self.send(chat_id, text, None).await
    }

    /// Asks `question` (the `clarify` tool, issue 46) in `chat_id`,
    /// replying to `reply_to`. The default sends the question with its
    /// choices numbered ([`Question::numbered_text`]); the user answers with
    /// a number or in their own words, as an ordinary message. Platforms
    /// with buttons override this and deliver a press as a
    /// [`crate::event::MessageType::Choice`] event whose text is the
    /// choice's number (Telegram's inline keyboard).
    async fn ask(
        &self,
        chat_id: &str,
        question: &Question,
        reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        self.send(chat_id, &question.numbered_text(), reply_to)
            .await
    }

    /// The question [`PlatformAdapter::ask`] sent in `chat_id`, replying
    /// to `reply_to`, no longer waits (answered, timed out, withdrawn).
    /// Platforms with buttons stop taking presses for it; the default does
    /// nothing (a numbered question has nothing to withdraw).
    async fn question_closed(&self, chat_id: &str, reply_to: Option<&str>) {
        let _ = (chat_id, reply_to);
    }

    /// How [`PlatformAdapter::max_message_len`] is counted.
    fn length_unit(&self) -> LengthUnit {
        LengthUnit::Chars
    }

    /// Whether [`PlatformAdapter::send_file`] works here.
    fn can_send_files(&self) -> bool {
        false
    }

    /// Whether a [`FileKind::Voice`] file goes out as something the user
    /// can play (a voice note, an audio attachment). WeCom's AI bot has no
    /// voice upload: its spoken replies stay text.
    fn can_send_voice(&self) -> bool {
        false
    }

    /// The largest file of `kind` [`PlatformAdapter::send_file`] uploads,
    /// in bytes (checked before an upload: the platform's own limit); 0
    /// where no files are sent.
    fn max_upload_bytes(&self, _kind: FileKind) -> u64 {
        0
    }

    /// Sends `file` to `chat_id`, shown as its [`OutgoingFile::kind`]
    /// says where the platform can (else as a document). Adapters of
    /// platforms that take files override this (and
    /// [`PlatformAdapter::can_send_files`]); the default says they cannot.
    async fn send_file(
        &self,
        _chat_id: &str,
        _file: &OutgoingFile,
        _reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        Err(AdapterError::Unsupported {
            platform: self.platform(),
            what: "sending files",
        })
    }

    /// Shows a "typing…" indicator where the platform has one. The runner
    /// repeats it every the runner's `TYPING_INTERVAL` while a turn
    /// runs.
    async fn typing(&self, _chat_id: &str) {}

    /// Which bot this adapter serves, as a lease name part: gateways sharing
    /// a database compete for one lease per bot (SPEC X8), so two processes
    /// never poll one Telegram token or hold one WeCom socket. Adapters of
    /// platforms with several bots name theirs (the Telegram bot's id); the
    /// default names the platform.
    fn bot_id(&self) -> String {
        "default".to_owned()
    }

    /// The bot lease the runner holds while this adapter is connected
    /// (`None` before connecting and after losing it). Adapters check
    /// [`Held::is_valid`] before every poll and before handing a batch on,
    /// and fence the state they save with it, so an adapter whose process
    /// was stopped or cut off stops acting as soon as it runs again.
    fn set_lease(&self, _lease: Option<Held>) {}

    /// Where to report a message the platform accepted and later said was
    /// not delivered (a `failed` status callback): the runner sets it
    /// before connecting. Adapters of platforms that report failures late
    /// keep it, note each accepted message's id
    /// ([`crate::delivery::note_accepted`]) and call it with each such
    /// failure; the default ignores it (the platform says at once).
    fn set_late_failures(&self, _handler: LateFailureHandler) {}

    /// Downloads `media` (at most `max_bytes`, decrypted where the platform
    /// encrypts it), for the turn that answers its message (SPEC X6). The
    /// default says the platform gives no files.
    async fn fetch_media(
        &self,
        _media: &MediaRef,
        _max_bytes: u64,
    ) -> Result<FetchedMedia, AdapterError> {
        Err(AdapterError::Unsupported {
            platform: self.platform(),
            what: "downloading files",
        })
    }

    /// Starts a reply to `reply_to` in `chat_id` that is shown as it is
    /// written (SPEC X6). The default, `None`, buffers: the runner sends the
    /// whole reply when the turn ends. Adapters of platforms that can edit
    /// a message or stream one override this.
    async fn begin_reply(
        &self,
        _chat_id: &str,
        _reply_to: Option<&str>,
    ) -> Option<Box<dyn ReplyStream>> {
        None
    }

    /// The shortest time between two [`ReplyStream::update`]s (the
    /// platform's rate limits).
    fn stream_interval(&self) -> std::time::Duration {
        std::time::Duration::from_secs(1)
    }

    /// Checks the platform's credentials live, without serving (`hermes
    /// gateway run --check`): Telegram's `getMe`, the WeCom app's token
    /// fetch and callback port. `Ok` says what answered (the bot's name),
    /// `None` when this platform has nothing to check before serving; an
    /// error is a sentence naming the setting to fix. Never a secret.
    async fn verify(&self) -> Result<Option<String>, String> {
        Ok(None)
    }

    /// Resolves, with the reason, once the connected adapter has stopped on
    /// its own for a reason only an operator can fix (a token refused while
    /// polling, a connection replaced by another client). The gateway then
    /// stops and exits non-zero, so a service manager restarts it and the
    /// failure is visible, rather than a healthy-looking process that serves
    /// nobody. The default never resolves.
    async fn gave_up(&self) -> String {
        std::future::pending().await
    }
}
