//! The mailbox watch: new mail since the saved position is read, judged,
//! and handed to the runner; then IDLE (or a pause of `poll_interval` when
//! the server has no IDLE) until more comes.

use std::sync::Arc;
use std::time::Duration;

use async_imap::Session;
use async_imap::extensions::idle::IdleResponse;
use async_imap::types::UnsolicitedResponse;
use tokio::sync::watch;

use hermes_platform_kit::adapter::{AdapterError, EventHandler};

use super::imap::{self, Conn, DONE_KEYWORD, ImapError};
use super::parse::{self, Place, Skip};
use super::state::Position;
use super::{Inner, PLATFORM};

/// How long one IDLE lasts before it is renewed (RFC 2177 asks for less
/// than 29 minutes; NAT boxes often forget quiet connections sooner).
const IDLE_RENEW: Duration = Duration::from_secs(5 * 60);

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

async fn blocking<T: Send + 'static>(
    inner: &Arc<Inner>,
    f: impl FnOnce(&Inner) -> T + Send + 'static,
) -> Option<T> {
    let inner = Arc::clone(inner);
    hermes_runtime::task::spawn_blocking(move || f(&inner))
        .await
        .ok()
}

enum Outcome {
    Stopped,
}

/// Watches until stopped (`None`) or a fatal error: a refused login.
pub(super) async fn watch_loop(
    inner: Arc<Inner>,
    handler: EventHandler,
    mut stop: watch::Receiver<bool>,
    first: Session<Conn>,
) -> Option<AdapterError> {
    let mut failures = 0u32;
    let mut first = Some(first);
    loop {
        if !inner.gate.is_open() {
            tracing::info!("email: the bot's lease is gone; reading stopped");
            return None;
        }
        let mut inner_stop = stop.clone();
        let result = tokio::select! {
            r = session(&inner, &handler, &mut inner_stop, &mut failures, first.take()) => r,
            _ = stop.wait_for(|s| *s) => return None,
        };
        match result {
            Ok(Outcome::Stopped) => return None,
            Err(ImapError::Auth(who)) => {
                return Some(AdapterError::Auth {
                    platform: PLATFORM,
                    message: ImapError::Auth(who).to_string(),
                });
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let wait = Duration::from_secs(1 << failures.min(6));
                tracing::warn!(error = %e, attempt = failures, "email: the mailbox connection failed; retrying in {wait:?}");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.wait_for(|s| *s) => return None,
                }
            }
        }
    }
}

/// One connection's life: select, catch up, then wait for more, round
/// after round, until stopped or broken.
async fn session(
    inner: &Arc<Inner>,
    handler: &EventHandler,
    stop: &mut watch::Receiver<bool>,
    failures: &mut u32,
    connected: Option<Session<Conn>>,
) -> Result<Outcome, ImapError> {
    let mut session = match connected {
        Some(s) => s,
        None => imap::connect(&inner.config, &inner.tls).await?,
    };
    let can_idle = inner.config.idle
        && session
            .capabilities()
            .await
            .is_ok_and(|c| c.has_str("IDLE"));
    // What the server said between commands (EXISTS above all) queues
    // here; a mail that arrives after the search and before IDLE starts is
    // announced there too, and must not wait for the next renewal.
    let news = session.unsolicited_responses.clone();
    loop {
        while news.try_recv().is_ok() {}
        let mailbox = session.select(&inner.config.mailbox).await?;
        *failures = 0;
        let uid_validity = mailbox.uid_validity.unwrap_or(0);
        let uid_next = match mailbox.uid_next {
            Some(n) => n,
            None => imap::search(&mut session, "ALL")
                .await?
                .last()
                .map_or(1, |u| u.saturating_add(1)),
        };
        catch_up(inner, handler, &mut session, uid_validity, uid_next).await?;
        if !inner.gate.is_open() {
            imap::log_out(session).await;
            return Ok(Outcome::Stopped);
        }
        session = if can_idle {
            let mut idle = session.idle();
            idle.init().await?;
            let pending = std::iter::from_fn(|| news.try_recv().ok()).any(|r| {
                matches!(
                    r,
                    UnsolicitedResponse::Exists(_) | UnsolicitedResponse::Recent(_)
                )
            });
            let stopped = if pending {
                false
            } else {
                let (wait, _interrupt) = idle.wait_with_timeout(IDLE_RENEW);
                tokio::select! {
                    r = wait => {
                        if let IdleResponse::NewData(_) = r? {
                            tracing::debug!("email: the server says the mailbox changed");
                        }
                        false
                    }
                    _ = stop.wait_for(|s| *s) => true,
                }
            };
            let session = idle.done().await?;
            if stopped {
                imap::log_out(session).await;
                return Ok(Outcome::Stopped);
            }
            session
        } else {
            let stopped = tokio::select! {
                _ = tokio::time::sleep(inner.config.poll_interval) => false,
                _ = stop.wait_for(|s| *s) => true,
            };
            if stopped {
                imap::log_out(session).await;
                return Ok(Outcome::Stopped);
            }
            session
        };
    }
}

/// Hands on every mail after the saved position. A mailbox never read
/// before only sets the position: mail that was there before the first
/// start is history, not questions. After a UIDVALIDITY change the old
/// numbers mean nothing: the mail since the last save that is not marked
/// handed on is read, and the runner's inbox drops any repeat by its id.
async fn catch_up(
    inner: &Arc<Inner>,
    handler: &EventHandler,
    session: &mut Session<Conn>,
    uid_validity: u32,
    uid_next: u32,
) -> Result<(), ImapError> {
    let saved = blocking(inner, |i| i.memory.position()).await.flatten();
    let newest = uid_next.saturating_sub(1);
    let uids: Vec<u32> = match saved {
        None => {
            tracing::info!(
                uid_validity,
                "email: first start on this mailbox; mail already there is not answered"
            );
            save(inner, uid_validity, newest).await;
            return Ok(());
        }
        Some(p) if p.uid_validity != uid_validity => {
            tracing::warn!(
                old = p.uid_validity,
                new = uid_validity,
                "email: the mailbox's UIDVALIDITY changed; reading only unhandled mail since the last check"
            );
            let day_before = i64::try_from(p.saved_at.saturating_sub(86_400)).unwrap_or(0);
            let since =
                jiff::Timestamp::from_second(day_before).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
            let date = since.strftime("%d-%b-%Y").to_string();
            let candidates =
                imap::search(session, &format!("UNKEYWORD {DONE_KEYWORD} SINCE {date}")).await?;
            // SEARCH SINCE counts whole days: the delivery time decides, in
            // whole seconds. Mail of the very second of the last save is
            // left (it may be history); answering old mail is the worse
            // mistake.
            let saved_at = i64::try_from(p.saved_at).unwrap_or(i64::MAX);
            let arrived = imap::arrival_times(session, &candidates).await?;
            for uid in candidates {
                if !inner.gate.is_open() {
                    return Ok(());
                }
                if arrived.get(&uid).is_some_and(|t| *t > saved_at) {
                    handle(inner, handler, session, Place { uid_validity, uid }).await?;
                }
            }
            // Only now: a crash before this point runs the same recovery.
            save(inner, uid_validity, newest).await;
            return Ok(());
        }
        Some(p) if p.last_uid >= newest => return Ok(()),
        Some(p) => imap::search(session, &format!("UID {}:*", p.last_uid.saturating_add(1)))
            .await?
            .into_iter()
            // `n:*` always matches the newest mail, even below n.
            .filter(|u| *u > p.last_uid)
            .collect(),
    };
    for uid in uids {
        if !inner.gate.is_open() {
            return Ok(());
        }
        handle(inner, handler, session, Place { uid_validity, uid }).await?;
        save(inner, uid_validity, uid).await;
    }
    Ok(())
}

/// Takes the mailbox's present as the position when there is none yet (a
/// first start), before the adapter reports itself connected: mail sent
/// after that is answered, mail from before is history.
pub(super) async fn first_position(
    inner: &Arc<Inner>,
    session: &mut Session<Conn>,
) -> Result<(), ImapError> {
    if blocking(inner, |i| i.memory.position())
        .await
        .flatten()
        .is_some()
    {
        return Ok(());
    }
    let mailbox = session.select(&inner.config.mailbox).await?;
    let uid_validity = mailbox.uid_validity.unwrap_or(0);
    let newest = match mailbox.uid_next {
        Some(n) => n.saturating_sub(1),
        None => imap::search(session, "ALL")
            .await?
            .last()
            .copied()
            .unwrap_or(0),
    };
    tracing::info!(
        uid_validity,
        "email: first start on this mailbox; mail already there is not answered"
    );
    save(inner, uid_validity, newest).await;
    Ok(())
}

async fn save(inner: &Arc<Inner>, uid_validity: u32, last_uid: u32) {
    let position = Position {
        uid_validity,
        last_uid,
        saved_at: now_secs(),
    };
    blocking(inner, move |i| i.memory.set_position(&i.gate, position)).await;
}

/// Reads one mail and hands it on, or says why not.
async fn handle(
    inner: &Arc<Inner>,
    handler: &EventHandler,
    session: &mut Session<Conn>,
    place: Place,
) -> Result<(), ImapError> {
    let Some((raw, done)) = imap::fetch(session, place.uid).await? else {
        return Ok(());
    };
    if done {
        tracing::debug!(uid = place.uid, "email: already handed on");
        return Ok(());
    }
    let verdict = blocking(inner, move |i| {
        parse::read(&raw, &i.config, place, &|parent| {
            i.memory.message(parent).map(|m| m.thread)
        })
    })
    .await;
    match verdict {
        Some(Ok(accepted)) => {
            let threading = accepted.threading.clone();
            blocking(inner, move |i| i.memory.remember(&i.gate, &threading)).await;
            tracing::debug!(uid = place.uid, thread = ?accepted.event.source.thread_id, "email: message in");
            handler(accepted.event);
            if let Err(e) = imap::mark_done(session, place.uid).await {
                tracing::warn!(uid = place.uid, error = %e, "email: cannot flag the mail as handled");
            }
        }
        Some(Err(why)) => {
            let why = match why {
                Skip::Unreadable => "not a readable mail",
                Skip::Own => "the bot's own mail",
                Skip::Automatic => "automatic or list mail",
                Skip::Stranger => "a sender not on EMAIL_ALLOWED_USERS",
            };
            tracing::info!(uid = place.uid, "email: not answered: {why}");
        }
        None => tracing::error!(uid = place.uid, "email: reading the mail panicked"),
    }
    Ok(())
}
