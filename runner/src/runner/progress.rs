//! Progress while a turn runs (SPEC X6): the typing indicator, refreshed
//! every [`TYPING_INTERVAL`] on platforms that have one, and the reply
//! shown as it is written, through the adapter's [`ReplyStream`].
//!
//! The turn's observer (on the blocking pool) sends [`StreamEvent`]s down a
//! channel; one task per turn folds them into a preview — the reply prefix
//! (media notices, quoted transcripts), the text of the model call in
//! progress, and one status line for the tool that runs, replaced by the
//! next — and hands it to the stream at most once per the adapter's
//! [`PlatformAdapter::stream_interval`]. One task, so previews arrive in
//! order; the final text is given to [`ReplyStream::finish`] by the worker
//! once the turn is over, whole.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::adapter::{PlatformAdapter, ReplyStream};

/// How often the typing indicator is sent again while a turn runs
/// (Telegram shows it for about 5 s).
pub const TYPING_INTERVAL: Duration = Duration::from_secs(4);

/// What the turn reports to its preview.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamEvent {
    /// The text shown before the answer (notices, transcripts).
    Prefix(String),
    /// A model call starts: its text replaces the previous call's once it
    /// arrives.
    ModelCall,
    /// A piece of answer text.
    Text(String),
    /// A tool starts (its name).
    ToolStarted(String),
    /// The tool finished.
    ToolFinished,
    /// The runner sent the chat another message meanwhile (an approval
    /// question): the preview stays as it is, without its status line, and
    /// the reply comes as a new message below that one.
    Break,
    /// A line about the run itself (the repeat guard stopped a loop),
    /// shown as the status until the answer's text arrives.
    Notice(String),
}

/// The preview being built.
#[derive(Debug, Default)]
struct Preview {
    prefix: String,
    text: String,
    /// The next text replaces `text` (a new model call began).
    replace: bool,
    status: Option<String>,
    dirty: bool,
}

impl Preview {
    fn apply(&mut self, event: StreamEvent) {
        match event {
            StreamEvent::Prefix(p) => self.prefix = p,
            StreamEvent::ModelCall => {
                self.replace = true;
                return;
            }
            StreamEvent::Text(t) => {
                if t.is_empty() {
                    return;
                }
                if std::mem::take(&mut self.replace) {
                    self.text.clear();
                }
                self.text.push_str(&t);
                self.status = None;
            }
            StreamEvent::ToolStarted(name) => {
                self.status = Some(format!("⚙️ working: {name}…"));
            }
            StreamEvent::ToolFinished => {
                self.status = Some("⚙️ working…".to_owned());
            }
            // Handled by the preview task.
            StreamEvent::Break => return,
            StreamEvent::Notice(line) => {
                self.status = Some(format!("⚠️ {line}"));
            }
        }
        self.dirty = true;
    }

    fn render(&self) -> String {
        let mut out = self.prefix.clone();
        out.push_str(self.text.trim_end());
        if let Some(status) = &self.status {
            if !out.trim().is_empty() {
                out.push_str("\n\n");
            }
            out.push_str(status);
        }
        out
    }
}

/// A running preview: feed it with [`Streaming::sender`], then
/// [`Streaming::end`] it to get the stream back for its final text.
pub(super) struct Streaming {
    tx: mpsc::UnboundedSender<StreamEvent>,
    task: JoinHandle<Option<(Box<dyn ReplyStream>, bool)>>,
}

impl Streaming {
    /// Starts the preview task over `stream`.
    pub(super) fn start(stream: Box<dyn ReplyStream>, interval: Duration) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = hermes_runtime::task::spawn(run_preview(rx, stream, interval));
        Streaming { tx, task }
    }

    /// A sender for the turn's observer.
    pub(super) fn sender(&self) -> mpsc::UnboundedSender<StreamEvent> {
        self.tx.clone()
    }

    /// Waits for the preview task once every sender is gone; returns the
    /// stream and whether every update was accepted (`None` if the task
    /// panicked, or the preview was ended early by [`StreamEvent::Break`]:
    /// the reply is then sent as a message of its own).
    pub(super) async fn end(self) -> Option<(Box<dyn ReplyStream>, bool)> {
        drop(self.tx);
        match self.task.await {
            Ok(done) => done,
            Err(e) => {
                tracing::error!(error = %e, "the reply preview task failed");
                None
            }
        }
    }
}

async fn run_preview(
    mut rx: mpsc::UnboundedReceiver<StreamEvent>,
    mut stream: Box<dyn ReplyStream>,
    interval: Duration,
) -> Option<(Box<dyn ReplyStream>, bool)> {
    let mut preview = Preview::default();
    // The first preview waits one interval too: an answer that is done by
    // then is sent once, whole, with no preview before it.
    let mut last = Instant::now();
    let mut healthy = true;
    loop {
        let due = (preview.dirty && healthy).then(|| last + interval);
        tokio::select! {
            event = rx.recv() => match event {
                Some(StreamEvent::Break) => {
                    // What was shown stays, without its status line (the
                    // shown text is deleted when there is none).
                    preview.status = None;
                    if let Err(e) = stream.finish(&preview.render()).await {
                        tracing::warn!(error = %e, "a reply preview could not be ended");
                    }
                    // The rest of the turn's events have nowhere to go.
                    while rx.recv().await.is_some() {}
                    return None;
                }
                Some(event) => preview.apply(event),
                None => break,
            },
            () = sleep_until(due), if due.is_some() => {
                let text = preview.render();
                preview.dirty = false;
                last = Instant::now();
                if text.trim().is_empty() {
                    continue;
                }
                if let Err(e) = stream.update(&text).await {
                    tracing::warn!(error = %e, "a reply preview was refused; the reply is sent when complete");
                    healthy = false;
                }
                last = Instant::now();
            }
        }
    }
    Some((stream, healthy))
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The typing indicator of one turn, repeated until dropped.
pub(super) struct Typing {
    stop: watch::Sender<bool>,
}

impl Typing {
    /// Shows typing in `chat` now and every [`TYPING_INTERVAL`].
    pub(super) fn start(adapter: Arc<dyn PlatformAdapter>, chat: String) -> Self {
        let (stop, mut rx) = watch::channel(false);
        hermes_runtime::task::spawn(async move {
            loop {
                tokio::select! {
                    () = adapter.typing(&chat) => {}
                    _ = rx.wait_for(|s| *s) => return,
                }
                tokio::select! {
                    () = tokio::time::sleep(TYPING_INTERVAL) => {}
                    _ = rx.wait_for(|s| *s) => return,
                }
            }
        });
        Typing { stop }
    }
}

impl Drop for Typing {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_line_is_replaced_and_a_new_call_replaces_the_text() {
        let mut p = Preview::default();
        p.apply(StreamEvent::Prefix("🎤 “hi”\n\n".into()));
        p.apply(StreamEvent::Text("Let me check.".into()));
        assert_eq!(p.render(), "🎤 “hi”\n\nLet me check.");
        p.apply(StreamEvent::ToolStarted("terminal".into()));
        assert_eq!(
            p.render(),
            "🎤 “hi”\n\nLet me check.\n\n⚙️ working: terminal…"
        );
        p.apply(StreamEvent::ToolStarted("read_file".into()));
        assert_eq!(
            p.render(),
            "🎤 “hi”\n\nLet me check.\n\n⚙️ working: read_file…"
        );
        p.apply(StreamEvent::ModelCall);
        assert_eq!(
            p.render(),
            "🎤 “hi”\n\nLet me check.\n\n⚙️ working: read_file…"
        );
        p.apply(StreamEvent::Text("Done".into()));
        p.apply(StreamEvent::Text(": 42".into()));
        assert_eq!(p.render(), "🎤 “hi”\n\nDone: 42");
    }

    #[test]
    fn a_notice_shows_as_the_status_until_the_answer_arrives() {
        let mut p = Preview::default();
        p.apply(StreamEvent::ToolStarted("todo".into()));
        p.apply(StreamEvent::Notice("stopped a loop".into()));
        assert_eq!(p.render(), "⚠️ stopped a loop");
        p.apply(StreamEvent::ModelCall);
        p.apply(StreamEvent::Text("Here is what I found".into()));
        assert_eq!(p.render(), "Here is what I found");
    }
}
