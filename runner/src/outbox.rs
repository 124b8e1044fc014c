//! Files the agent sends to a chat (`send_file`): the gateway's
//! [`FileOutbox`].
//!
//! The tool runs on the turn's thread and knows only its session; the hub
//! knows where that session's chat is because the runner
//! [binds](FileHub::bind) the session to it for the length of a turn, as it
//! does for approval questions ([`crate::approval`]). The upload itself is
//! the runner's ([`FileSender`]): the platform adapter's `send_file`, with
//! its limits and its retry rules, waited for by the tool, so the tool
//! result says what was sent — or why not.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use hermes_runtime::sync::lock;

use hermes_runtime::tools::{FileKind, FileOutbox, OutboundFile};

use crate::adapter::OutgoingFile;

/// Where a session's files go: its chat, during a turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileRoute {
    /// The session key (whose streamed preview a file interrupts).
    pub key: String,
    /// The platform of the chat.
    pub platform: String,
    /// The chat.
    pub chat_id: String,
    /// The user message the turn answers (files reply to it).
    pub reply_to: String,
}

/// What uploads a file to a chat (the runner, through the adapter).
pub trait FileSender: Send + Sync {
    /// The largest file of `kind` the route's platform takes; an error when
    /// it takes none.
    fn limit(&self, route: &FileRoute, kind: FileKind) -> Result<u64, String>;

    /// Uploads `file`, waiting for the platform's answer.
    fn send(&self, route: &FileRoute, file: OutgoingFile) -> Result<(), String>;
}

/// The process's file routes: which sessions are in a turn, and where.
#[derive(Default)]
pub struct FileHub {
    routes: Mutex<HashMap<String, FileRoute>>,
    sender: OnceLock<Arc<dyn FileSender>>,
}

impl std::fmt::Debug for FileHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileHub")
            .field("routes", &lock(&self.routes).len())
            .finish_non_exhaustive()
    }
}

/// Unbinds a session from its chat when its turn ends.
#[derive(Debug)]
pub struct FileRouteGuard {
    hub: Arc<FileHub>,
    session_id: String,
}

impl Drop for FileRouteGuard {
    fn drop(&mut self) {
        lock(&self.hub.routes).remove(&self.session_id);
    }
}

impl FileHub {
    /// An empty hub.
    pub fn new() -> Arc<Self> {
        Arc::new(FileHub::default())
    }

    /// Sets how files are uploaded (the runner does, once, at start).
    pub fn set_sender(&self, sender: Arc<dyn FileSender>) {
        let _ = self.sender.set(sender);
    }

    /// Binds `session_id` to `route` until the guard is dropped.
    pub fn bind(self: &Arc<Self>, session_id: &str, route: FileRoute) -> FileRouteGuard {
        lock(&self.routes).insert(session_id.to_owned(), route);
        FileRouteGuard {
            hub: Arc::clone(self),
            session_id: session_id.to_owned(),
        }
    }

    /// The outbox of the tools of session `session_id`.
    pub fn outbox(self: &Arc<Self>, session_id: &str) -> Arc<dyn FileOutbox> {
        Arc::new(SessionOutbox {
            hub: Arc::clone(self),
            session_id: session_id.to_owned(),
        })
    }

    fn route(&self, session_id: &str) -> Result<(FileRoute, Arc<dyn FileSender>), String> {
        let route = lock(&self.routes)
            .get(session_id)
            .cloned()
            .ok_or("there is no chat to send to outside a conversation turn")?;
        let sender = self
            .sender
            .get()
            .cloned()
            .ok_or("the gateway is not serving yet")?;
        Ok((route, sender))
    }
}

struct SessionOutbox {
    hub: Arc<FileHub>,
    session_id: String,
}

impl FileOutbox for SessionOutbox {
    fn limit(&self, kind: FileKind) -> Result<u64, String> {
        let (route, sender) = self.hub.route(&self.session_id)?;
        sender.limit(&route, kind)
    }

    fn send(&self, file: OutboundFile) -> Result<String, String> {
        let (route, sender) = self.hub.route(&self.session_id)?;
        let outgoing = OutgoingFile {
            file_name: file.file_name,
            content: file.bytes,
            caption: file.caption,
            kind: file.kind,
            media_type: file.media_type,
        };
        sender.send(&route, outgoing)?;
        Ok(format!("to this {} chat", route.platform))
    }
}
