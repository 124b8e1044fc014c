//! `hermes-email`: Email for the Hermes gateway — a mailbox read over IMAP,
//! answers sent over SMTP.
//!
//! Inbound: the mailbox (`INBOX`) is watched with IMAP IDLE where the
//! server offers it, polled every `EMAIL_POLL_INTERVAL` otherwise. Mail
//! after the saved position (the UIDVALIDITY and the last UID handed on, in
//! the store) is read; each mail handed to the runner is flagged `\Seen`
//! and `$HermesAnswered`. So a restart answers what came while the gateway
//! was down and nothing twice, and a first start answers none of the mail
//! already there. A new UIDVALIDITY (a rebuilt mailbox) reads only the
//! unflagged mail since the last check; the runner's inbox drops repeats by
//! `Message-ID`.
//!
//! Who is answered: only senders on `EMAIL_ALLOWED_USERS`. Strangers get
//! nothing at all — no model call, no refusal, no pairing code — since an
//! answer to a forged sender is backscatter. Automatic mail
//! (`Auto-Submitted`, `Precedence: bulk/list/junk`, `List-Id`, bounces) is
//! never answered either, so two robots cannot loop.
//!
//! Sessions follow G2 with the sender as the DM and the thread as its
//! thread: `agent:main:email:dm:ADDRESS:THREAD`, where THREAD is a hash of
//! the thread's first `Message-ID` (from `References`, or the parent the
//! bot knows). The model reads the new text only: quoted history, the
//! "On … wrote:" line and signatures are stripped; attachments go through
//! the media pipeline, fetched again from the mailbox when the turn starts.
//!
//! Outbound: one text/plain mail per answer, whole (mail has no length
//! limit worth splitting at), with `In-Reply-To`, `References` and a `Re:`
//! subject, and `Auto-Submitted: auto-replied`.

mod config;
pub mod descriptor;
mod imap;
mod parse;
mod smtp;
mod state;
mod watch;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures_util::TryStreamExt;
use hermes_runtime::store::Store;
use tokio::sync::watch as channel;

use hermes_platform_kit::adapter::{AdapterError, EventHandler, FetchedMedia, PlatformAdapter};
use hermes_platform_kit::event::MediaRef;
use hermes_platform_kit::lease::{Held, LeaseGate};
use hermes_platform_kit::running::RunningLoop;
use hermes_platform_kit::split::LengthUnit;

pub use config::{EmailConfig, EmailConfigError, Endpoint, Security, is_loopback};
pub use imap::DONE_KEYWORD;
pub use parse::thread_id;
pub use smtp::reply_subject;

/// The platform name in session keys.
pub const PLATFORM: &str = "email";

/// The longest answer, in bytes: far above any answer, below what mail
/// servers take (10 MB is a common limit). Answers are never split.
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// State shared by the adapter and its watch task.
struct Inner {
    config: EmailConfig,
    memory: state::Memory,
    tls: Arc<rustls::ClientConfig>,
    gate: LeaseGate,
}

/// The Email adapter. See the module docs.
pub struct EmailAdapter {
    inner: Arc<Inner>,
    running: RunningLoop,
    stopped: Arc<channel::Sender<Option<Arc<AdapterError>>>>,
}

impl std::fmt::Debug for EmailAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailAdapter")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl EmailAdapter {
    /// An adapter for `config`, keeping its mailbox position and threads in
    /// `store` when one is given (otherwise every start is a first start).
    pub fn new(
        config: EmailConfig,
        store: Option<Arc<Mutex<Store>>>,
    ) -> Result<Self, EmailConfigError> {
        let tls = imap::tls_config(&config).map_err(|message| EmailConfigError {
            key: "email TLS".to_owned(),
            message,
        })?;
        let (stopped, _) = channel::channel(None);
        Ok(EmailAdapter {
            inner: Arc::new(Inner {
                memory: state::Memory::new(store, &config.address),
                config,
                tls,
                gate: LeaseGate::default(),
            }),
            running: RunningLoop::default(),
            stopped: Arc::new(stopped),
        })
    }

    /// The adapter configured from the environment and `[email]`, or `None`
    /// when no address is set (Email disabled).
    pub fn from_sources(
        env: &dyn Fn(&str) -> Option<String>,
        file: &toml::Table,
        store: Option<Arc<Mutex<Store>>>,
    ) -> Option<Result<Self, EmailConfigError>> {
        EmailConfig::from_sources(env, file).map(|c| c.and_then(|c| Self::new(c, store)))
    }

    /// The error the watch stopped on, if it stopped on its own.
    pub fn fatal_error(&self) -> Option<Arc<AdapterError>> {
        self.stopped.borrow().clone()
    }

    async fn send_mail(
        &self,
        to: &str,
        text: &str,
        parent: Option<parse::Threading>,
        thread: Option<&str>,
    ) -> Result<(), AdapterError> {
        let sent = smtp::send(&self.inner.config, to, text, parent.as_ref(), thread).await?;
        if !sent.thread.is_empty() {
            let inner = Arc::clone(&self.inner);
            let _ = hermes_runtime::task::spawn_blocking(move || {
                inner.memory.remember(&inner.gate, &sent)
            })
            .await;
        }
        Ok(())
    }

    async fn recall<T: Send + 'static>(
        &self,
        f: impl FnOnce(&state::Memory) -> Option<T> + Send + 'static,
    ) -> Option<T> {
        let inner = Arc::clone(&self.inner);
        hermes_runtime::task::spawn_blocking(move || f(&inner.memory))
            .await
            .ok()
            .flatten()
    }
}

#[async_trait]
impl PlatformAdapter for EmailAdapter {
    fn platform(&self) -> &'static str {
        PLATFORM
    }

    /// The bot's address: two gateways on one database never read one
    /// mailbox twice (SPEC X8).
    fn bot_id(&self) -> String {
        self.inner.config.address.clone()
    }

    fn set_lease(&self, lease: Option<Held>) {
        self.inner.gate.set(lease);
    }

    fn max_message_len(&self) -> usize {
        MAX_BODY_BYTES
    }

    fn length_unit(&self) -> LengthUnit {
        LengthUnit::Bytes
    }

    async fn connect(&self, handler: EventHandler) -> Result<(), AdapterError> {
        let Some(starting) = self.running.begin().await else {
            return Ok(());
        };
        let failed = |e: imap::ImapError| match e {
            imap::ImapError::Auth(_) => AdapterError::Auth {
                platform: PLATFORM,
                message: e.to_string(),
            },
            imap::ImapError::Other(m) => AdapterError::Network {
                platform: PLATFORM,
                message: m,
            },
        };
        // The login is checked now, so a wrong password fails the start.
        let mut session = imap::connect(&self.inner.config, &self.inner.tls)
            .await
            .map_err(failed)?;
        watch::first_position(&self.inner, &mut session)
            .await
            .map_err(failed)?;
        tracing::info!(address = %self.inner.config.address, "email: connected");
        let inner = Arc::clone(&self.inner);
        let stopped = Arc::clone(&self.stopped);
        starting.spawn(|stop| async move {
            if let Some(e) = watch::watch_loop(inner, handler, stop, session).await {
                tracing::error!(error = %e, "email: reading stopped");
                stopped.send_replace(Some(Arc::new(e)));
            }
        });
        Ok(())
    }

    async fn disconnect(&self) {
        self.running.stop().await;
    }

    /// The whole `text` in one mail to `chat_id`; with `reply_to` (a mail's
    /// Message-ID) in that mail's thread.
    async fn send(
        &self,
        chat_id: &str,
        text: &str,
        reply_to: Option<&str>,
    ) -> Result<(), AdapterError> {
        let parent = match reply_to {
            Some(id) => {
                let id = id.to_owned();
                self.recall(move |m| m.message(&id)).await
            }
            None => None,
        };
        self.send_mail(chat_id, text, parent, None).await
    }

    /// Into the thread (a scheduled job made in a mail thread): an answer
    /// to the thread's latest mail, or a new mail when it is unknown.
    async fn send_to_thread(
        &self,
        chat_id: &str,
        thread: &str,
        text: &str,
    ) -> Result<(), AdapterError> {
        let id = thread.to_owned();
        let parent = self.recall(move |m| m.thread(&id)).await;
        self.send_mail(chat_id, text, parent, Some(thread)).await
    }

    async fn verify(&self) -> Result<Option<String>, String> {
        let config = &self.inner.config;
        let session = imap::connect(config, &self.inner.tls).await.map_err(|e| {
            format!(
                "{e} (EMAIL_IMAP_HOST {}:{})",
                config.imap.host, config.imap.port
            )
        })?;
        imap::log_out(session).await;
        Ok(Some(config.address.clone()))
    }

    async fn gave_up(&self) -> String {
        let mut rx = self.stopped.subscribe();
        loop {
            if let Some(e) = &*rx.borrow_and_update() {
                return e.to_string();
            }
            if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// Attachment `INDEX` of the mail at `UIDVALIDITY:UID`, read again from
    /// the mailbox (examined, so nothing changes there).
    async fn fetch_media(
        &self,
        media: &MediaRef,
        max_bytes: u64,
    ) -> Result<FetchedMedia, AdapterError> {
        let rejected = |message: String| AdapterError::Rejected {
            platform: PLATFORM,
            message,
        };
        let mut parts = media.handle.split(':').map(str::parse::<u32>);
        let (Some(Ok(validity)), Some(Ok(uid)), Some(Ok(index)), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(rejected("not an email attachment handle".to_owned()));
        };
        if media.size.is_some_and(|s| s > max_bytes) {
            return Err(rejected(format!(
                "the file is larger than {max_bytes} bytes"
            )));
        }
        let network = |e: imap::ImapError| AdapterError::Network {
            platform: PLATFORM,
            message: e.to_string(),
        };
        let config = &self.inner.config;
        let mut session = imap::connect(config, &self.inner.tls)
            .await
            .map_err(network)?;
        let mailbox = session
            .examine(&config.mailbox)
            .await
            .map_err(|e| network(e.into()))?;
        if mailbox.uid_validity != Some(validity) {
            imap::log_out(session).await;
            return Err(rejected(
                "the mailbox was rebuilt since the mail came".to_owned(),
            ));
        }
        let raw: Option<Vec<u8>> = session
            .uid_fetch(uid.to_string(), "(UID BODY.PEEK[])")
            .await
            .map_err(|e| network(e.into()))?
            .try_collect::<Vec<_>>()
            .await
            .map_err(|e| network(e.into()))?
            .into_iter()
            .find(|f| f.uid == Some(uid))
            .and_then(|f| f.body().map(<[u8]>::to_vec));
        imap::log_out(session).await;
        let raw = raw.ok_or_else(|| rejected("the mail is no longer in the mailbox".to_owned()))?;
        let index = usize::try_from(index).unwrap_or(usize::MAX);
        let (bytes, mime_type, file_name) =
            hermes_runtime::task::spawn_blocking(move || parse::attachment(&raw, index))
                .await
                .ok()
                .flatten()
                .ok_or_else(|| rejected("the attachment is not in the mail".to_owned()))?;
        if bytes.len() as u64 > max_bytes {
            return Err(rejected(format!(
                "the file is larger than {max_bytes} bytes"
            )));
        }
        Ok(FetchedMedia {
            bytes,
            mime_type: mime_type.or_else(|| media.mime_type.clone()),
            file_name: file_name.or_else(|| media.file_name.clone()),
        })
    }
}
