//! Answers out through SMTP (lettre): text/plain, in the thread of the mail
//! answered (`In-Reply-To`, `References`, `Re:` subject), marked
//! `Auto-Submitted: auto-replied` so other robots do not answer it back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lettre::message::Mailbox;
use lettre::message::header::{ContentType, HeaderName, HeaderValue};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::transport::smtp::extension::ClientId;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use hermes_platform_kit::adapter::AdapterError;

use super::PLATFORM;
use super::config::{EmailConfig, Security};
use super::parse::Threading;

fn rejected(message: String) -> AdapterError {
    AdapterError::Rejected {
        platform: PLATFORM,
        message,
    }
}

/// `Re: subject`, without doubling an existing `Re:`.
pub fn reply_subject(subject: &str) -> String {
    let s = subject.trim();
    let has_re = s.get(..3).is_some_and(|p| p.eq_ignore_ascii_case("re:"));
    match (s.is_empty(), has_re) {
        (true, _) => "Re: your message".to_owned(),
        (false, true) => s.to_owned(),
        (false, false) => format!("Re: {s}"),
    }
}

/// The subject of a mail that starts a thread (a scheduled job's answer):
/// its first line, shortened.
fn new_subject(text: &str) -> String {
    let line = text
        .lines()
        .map(|l| l.trim().trim_start_matches('#').trim())
        .find(|l| !l.is_empty())
        .unwrap_or("Message from Hermes");
    if line.chars().count() > 70 {
        let cut: String = line.chars().take(69).collect();
        format!("{cut}…")
    } else {
        line.to_owned()
    }
}

/// A fresh Message-ID in the bot's domain.
fn new_message_id(domain: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("hermes.{ms}.{n}.{:016x}@{domain}", rand::random::<u64>())
}

fn transport(config: &EmailConfig) -> Result<AsyncSmtpTransport<Tokio1Executor>, AdapterError> {
    let smtp = &config.smtp;
    let params = || {
        let mut builder = TlsParameters::builder(smtp.host.clone());
        if let Some(pem) = &config.extra_roots_pem {
            let cert = Certificate::from_pem(pem)
                .map_err(|e| rejected(format!("a trusted certificate is not PEM: {e}")))?;
            builder = builder.add_root_certificate(cert);
        }
        builder
            .build_rustls()
            .map_err(|e| rejected(format!("SMTP TLS settings: {e}")))
    };
    let tls = match smtp.security {
        Security::Tls => Tls::Wrapper(params()?),
        Security::StartTls => Tls::Required(params()?),
        Security::None => Tls::None,
    };
    Ok(
        AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(smtp.host.clone())
            .port(smtp.port)
            .tls(tls)
            .credentials(Credentials::new(
                config.address.clone(),
                config.password.expose().to_owned(),
            ))
            .hello_name(ClientId::Domain(config.domain().to_owned()))
            .timeout(Some(Duration::from_secs(60)))
            .build(),
    )
}

/// Sends `text` to `to`, as an answer in `parent`'s thread when given (a
/// new thread otherwise); returns the sent mail's threading, so a reply to
/// it continues the thread.
pub(crate) async fn send(
    config: &EmailConfig,
    to: &str,
    text: &str,
    parent: Option<&Threading>,
    thread: Option<&str>,
) -> Result<Threading, AdapterError> {
    let mailbox = |addr: &str| {
        addr.parse::<Mailbox>()
            .map_err(|e| rejected(format!("{addr:?} is not a mail address: {e}")))
    };
    let message_id = new_message_id(config.domain());
    let subject = parent.map_or_else(|| new_subject(text), |p| reply_subject(&p.subject));
    let mut builder = Message::builder()
        .from(mailbox(&config.address)?)
        .to(mailbox(to)?)
        .subject(subject.clone())
        .message_id(Some(format!("<{message_id}>")))
        .raw_header(HeaderValue::new(
            HeaderName::new_from_ascii_str("Auto-Submitted"),
            "auto-replied".to_owned(),
        ));
    let mut references = Vec::new();
    if let Some(p) = parent {
        references = p.references.clone();
        references.push(p.message_id.clone());
        builder = builder
            .in_reply_to(format!("<{}>", p.message_id))
            .references(
                references
                    .iter()
                    .map(|r| format!("<{r}>"))
                    .collect::<Vec<_>>()
                    .join(" "),
            );
    }
    let message = builder
        .header(ContentType::TEXT_PLAIN)
        .body(text.to_owned())
        .map_err(|e| rejected(format!("cannot build the mail: {e}")))?;
    transport(config)?.send(message).await.map_err(|e| {
        if e.is_permanent() {
            rejected(format!("the SMTP server refused the mail: {e}"))
        } else {
            AdapterError::Network {
                platform: PLATFORM,
                message: format!("SMTP: {e}"),
            }
        }
    })?;
    Ok(Threading {
        message_id,
        references,
        subject,
        from: to.to_owned(),
        thread: parent
            .map(|p| p.thread.clone())
            .or_else(|| thread.map(str::to_owned))
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_get_one_re_and_new_threads_their_first_line() {
        assert_eq!(reply_subject("Plans"), "Re: Plans");
        assert_eq!(reply_subject("RE: Plans"), "RE: Plans");
        assert_eq!(reply_subject("re:Plans"), "re:Plans");
        assert_eq!(reply_subject("  "), "Re: your message");
        assert_eq!(new_subject("\n# Daily report\nall good"), "Daily report");
        assert_eq!(new_subject(&"x".repeat(100)).chars().count(), 70);
    }
}
