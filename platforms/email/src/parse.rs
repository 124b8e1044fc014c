//! One raw mail → a [`MessageEvent`] to answer, or the reason it is not
//! answered. Pure: no I/O, so the rules (who, what is automatic, which
//! thread, what the model reads) are tested without a server.

use mail_parser::{HeaderValue, MessageParser, MimeHeaders, PartType};
use serde::{Deserialize, Serialize};

use hermes_platform_kit::event::{
    ChatType, MediaKind, MediaRef, MessageEvent, MessageType, SessionSource,
};

use super::PLATFORM;
use super::config::EmailConfig;

/// What the adapter keeps of an answered mail, to answer it in its thread:
/// ids without the angle brackets.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Threading {
    /// The mail's own `Message-ID`.
    pub message_id: String,
    /// Its `References` (oldest first).
    pub references: Vec<String>,
    /// Its subject.
    pub subject: String,
    /// The sender's address (where the answer goes).
    pub from: String,
    /// The thread's id (the session's thread part).
    pub thread: String,
}

/// Why a mail is not answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Skip {
    /// Not a mail the parser could read, or without a sender.
    Unreadable,
    /// The bot's own mail (a copy to itself, a loop).
    Own,
    /// `Auto-Submitted`, `Precedence: bulk/list/junk`, `List-Id`, a bounce.
    Automatic,
    /// A sender not on the allow-list: nothing is said to strangers.
    Stranger,
}

/// A mail to answer.
#[derive(Debug)]
pub(crate) struct Accepted {
    pub event: MessageEvent,
    pub threading: Threading,
}

/// Where a mail lives in the mailbox, for its attachments' handles.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Place {
    pub uid_validity: u32,
    pub uid: u32,
}

/// The thread id of a thread whose first mail has Message-ID `root`
/// (without `<>`): a stable 64-bit FNV-1a hash as 16 hex digits. Thread ids go into session
/// keys in the store, so they must not change between builds (std's hasher
/// may).
pub fn thread_id(root: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in root.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

fn ids(value: &HeaderValue<'_>) -> Vec<String> {
    match value {
        HeaderValue::Text(t) => t.split_whitespace().map(clean_id).collect(),
        HeaderValue::TextList(list) => list.iter().map(|t| clean_id(t)).collect(),
        _ => Vec::new(),
    }
    .into_iter()
    .filter(|s| !s.is_empty())
    .collect()
}

fn clean_id(id: &str) -> String {
    id.trim()
        .trim_start_matches('<')
        .trim_end_matches('>')
        .to_owned()
}

fn text_of<'a>(value: Option<&'a HeaderValue<'a>>) -> Option<&'a str> {
    match value? {
        HeaderValue::Text(t) => Some(t.as_ref()),
        HeaderValue::TextList(list) => list.first().map(AsRef::as_ref),
        _ => None,
    }
}

/// Whether the mail was sent by a machine: auto-replies, bounces, lists.
/// Answering those is how mail loops start (RFC 3834).
fn is_automatic(message: &mail_parser::Message<'_>) -> bool {
    let auto = text_of(message.header("Auto-Submitted"))
        .is_some_and(|v| !v.trim().eq_ignore_ascii_case("no"));
    let bulk = text_of(message.header("Precedence")).is_some_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "bulk" | "list" | "junk"
        )
    });
    let list = message.header("List-Id").is_some() || message.header("List-Unsubscribe").is_some();
    // A bounce has the null sender, which delivery records as `<>`.
    let bounce = message
        .header_raw("Return-Path")
        .is_some_and(|v| v.trim() == "<>");
    auto || bulk || list || bounce
}

/// The new part of a reply: without the quoted lines (`> `), the
/// "On … wrote:" line above them, a forwarded/original-message block and
/// the signature (after `-- `).
pub(crate) fn strip_quoted(body: &str) -> String {
    let lines: Vec<&str> = body.lines().collect();
    let mut kept: Vec<&str> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_end();
        let next = lines.get(i + 1).map_or("", |l| l.trim_end());
        let attribution = line.starts_with("On ")
            && (line.ends_with("wrote:") || (next.ends_with("wrote:") && !next.starts_with('>')));
        if attribution
            || line == "-- "
            || line == "--"
            || line.starts_with("-----Original Message-----")
            || line.starts_with("---------- Forwarded message")
        {
            break;
        }
        if !line.starts_with('>') {
            kept.push(line);
        }
        i += 1;
    }
    kept.join("\n").trim().to_owned()
}

/// The mail's first text body; an HTML one read as the web tool reads a
/// page (`hermes_runtime`'s `html_to_text`). Not mail-parser's own
/// converter: its table of 2,125 HTML entities was 2,125 pointers the
/// loader relocates at every start of every command (issue 39).
fn body_text(message: &mail_parser::Message<'_>) -> Option<String> {
    match &message.text_part(0)?.body {
        PartType::Text(text) => Some(text.to_string()),
        PartType::Html(html) => Some(hermes_runtime::tools::html_to_text(html)),
        _ => None,
    }
}

fn media_of(message: &mail_parser::Message<'_>, place: Place) -> Vec<MediaRef> {
    message
        .attachments()
        .enumerate()
        .filter(|(_, part)| !part.contents().is_empty())
        .map(|(i, part)| {
            let mime = part.content_type().map(|c| match c.subtype() {
                Some(sub) => format!("{}/{}", c.ctype(), sub).to_ascii_lowercase(),
                None => c.ctype().to_ascii_lowercase(),
            });
            let kind = match mime.as_deref().and_then(|m| m.split('/').next()) {
                Some("image") => MediaKind::Image,
                Some("audio") => MediaKind::Audio,
                _ => MediaKind::Document,
            };
            let mut media =
                MediaRef::new(kind, format!("{}:{}:{i}", place.uid_validity, place.uid));
            media.file_name = part.attachment_name().map(str::to_owned);
            media.mime_type = mime;
            media.size = Some(part.contents().len() as u64);
            media
        })
        .collect()
}

/// The bytes of attachment `index` of `raw` (for [`MediaRef`] handles), with
/// its MIME type and file name.
pub(crate) fn attachment(
    raw: &[u8],
    index: usize,
) -> Option<(Vec<u8>, Option<String>, Option<String>)> {
    let message = MessageParser::default().parse(raw)?;
    let part = message
        .attachments()
        .filter(|p| !p.contents().is_empty())
        .nth(index)?;
    let mime = part.content_type().map(|c| match c.subtype() {
        Some(sub) => format!("{}/{}", c.ctype(), sub),
        None => c.ctype().to_owned(),
    });
    Some((
        part.contents().to_vec(),
        mime,
        part.attachment_name().map(str::to_owned),
    ))
}

/// Reads `raw`. `parent_thread` tells the thread of a mail the bot has seen
/// before (by its id), so a reply from a client that drops `References`
/// still continues its thread.
pub(crate) fn read(
    raw: &[u8],
    config: &EmailConfig,
    place: Place,
    parent_thread: &dyn Fn(&str) -> Option<String>,
) -> Result<Accepted, Skip> {
    let message = MessageParser::default()
        .parse(raw)
        .ok_or(Skip::Unreadable)?;
    let from = message
        .from()
        .and_then(|a| a.first())
        .and_then(|a| a.address())
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .ok_or(Skip::Unreadable)?;
    if from.eq_ignore_ascii_case(&config.address) {
        return Err(Skip::Own);
    }
    if is_automatic(&message) {
        return Err(Skip::Automatic);
    }
    let user_id = config.allowed_sender(from).ok_or(Skip::Stranger)?;
    let user_name = message
        .from()
        .and_then(|a| a.first())
        .and_then(|a| a.name())
        .map(str::to_owned);
    let message_id = message.message_id().map_or_else(
        // Without an id the mail is still answered, under one made from
        // where it lies (stable across restarts: the inbox dedups by it).
        || {
            format!(
                "no-id.{}.{}@{}",
                place.uid_validity,
                place.uid,
                config.domain()
            )
        },
        clean_id,
    );
    let references = ids(message.references());
    let in_reply_to = ids(message.in_reply_to()).into_iter().next();
    let thread = in_reply_to
        .as_deref()
        .and_then(parent_thread)
        .unwrap_or_else(|| {
            let root = references
                .first()
                .or(in_reply_to.as_ref())
                .unwrap_or(&message_id);
            thread_id(root)
        });
    let subject = message.subject().unwrap_or_default().trim().to_owned();
    let body = body_text(&message)
        .map(|b| strip_quoted(&b))
        .unwrap_or_default();
    // The first mail of a thread: its subject is often half the question.
    let text = if in_reply_to.is_none() && !subject.is_empty() {
        format!("Subject: {subject}\n\n{body}").trim().to_owned()
    } else {
        body
    };
    let media = media_of(&message, place);
    let message_type = match (text.is_empty(), media.first().map(|m| m.kind)) {
        (_, None) => MessageType::Text,
        (true, Some(MediaKind::Image)) => MessageType::Photo,
        (true, Some(MediaKind::Audio | MediaKind::Voice)) => MessageType::Voice,
        (true, Some(MediaKind::Document)) => MessageType::File,
        (false, Some(_)) => MessageType::Mixed,
    };
    let chat = from.to_ascii_lowercase();
    Ok(Accepted {
        event: MessageEvent {
            message_id: message_id.clone(),
            text,
            source: SessionSource {
                platform: PLATFORM.to_owned(),
                chat_id: chat.clone(),
                chat_type: ChatType::Dm,
                user_id: user_id.to_owned(),
                user_name,
                thread_id: Some(thread.clone()),
            },
            message_type,
            media,
        },
        threading: Threading {
            message_id,
            references,
            subject,
            from: chat,
            thread,
        },
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn config() -> EmailConfig {
        let env = |k: &str| {
            match k {
                "EMAIL_ADDRESS" => Some("bot@example.org"),
                "EMAIL_PASSWORD" => Some("p"),
                "EMAIL_IMAP_HOST" | "EMAIL_SMTP_HOST" => Some("mail.example.org"),
                "EMAIL_ALLOWED_USERS" => Some("Alice@example.org"),
                _ => None,
            }
            .map(str::to_owned)
        };
        EmailConfig::from_sources(&env, &toml::Table::new())
            .unwrap()
            .unwrap()
    }

    const PLACE: Place = Place {
        uid_validity: 7,
        uid: 3,
    };

    fn mail(headers: &str, body: &str) -> Vec<u8> {
        format!("{headers}\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{body}").into_bytes()
    }

    fn first(headers: &str) -> Result<Accepted, Skip> {
        read(&mail(headers, "Hello bot\r\n"), &config(), PLACE, &|_| None)
    }

    #[test]
    fn a_new_mail_is_its_own_thread_and_a_reply_continues_it() {
        let a = first("From: Alice <alice@EXAMPLE.org>\r\nSubject: Plans\r\nMessage-ID: <m1@x>")
            .unwrap();
        assert_eq!(a.event.text, "Subject: Plans\n\nHello bot");
        assert_eq!(a.event.source.chat_id, "alice@example.org");
        assert_eq!(a.event.source.user_id, "Alice@example.org");
        assert_eq!(a.event.source.user_name.as_deref(), Some("Alice"));
        assert_eq!(a.event.message_id, "m1@x");
        let thread = a.event.source.thread_id.clone().unwrap();
        assert_eq!(thread, thread_id("m1@x"));
        let r = first(
            "From: alice@example.org\r\nSubject: Re: Plans\r\nMessage-ID: <m3@x>\r\n\
             In-Reply-To: <m2@bot>\r\nReferences: <m1@x> <m2@bot>",
        )
        .unwrap();
        assert_eq!(r.event.source.thread_id.as_deref(), Some(thread.as_str()));
        assert_eq!(r.event.text, "Hello bot", "no subject line in a reply");
        assert_eq!(r.threading.references, ["m1@x", "m2@bot"]);
        // A client that dropped References: the known parent's thread.
        let known = read(
            &mail(
                "From: alice@example.org\r\nMessage-ID: <m4@x>\r\nIn-Reply-To: <m2@bot>",
                "ok",
            ),
            &config(),
            PLACE,
            &|id| (id == "m2@bot").then(|| "feedfeedfeedfeed".to_owned()),
        )
        .unwrap();
        assert_eq!(
            known.event.source.thread_id.as_deref(),
            Some("feedfeedfeedfeed")
        );
    }

    #[test]
    fn strangers_machines_and_itself_are_not_answered() {
        assert_eq!(
            first("From: mallory@example.org\r\nMessage-ID: <a@x>").unwrap_err(),
            Skip::Stranger
        );
        assert_eq!(
            first("From: bot@example.org\r\nMessage-ID: <a@x>").unwrap_err(),
            Skip::Own
        );
        for header in [
            "Auto-Submitted: auto-replied",
            "Auto-Submitted: auto-generated",
            "Precedence: bulk",
            "Precedence: list",
            "Precedence: junk",
            "List-Id: <news.example.org>",
            "Return-Path: <>",
        ] {
            let h = format!("From: alice@example.org\r\nMessage-ID: <a@x>\r\n{header}");
            assert_eq!(first(&h).unwrap_err(), Skip::Automatic, "{header}");
        }
        assert!(first("From: alice@example.org\r\nAuto-Submitted: no").is_ok());
        assert_eq!(
            read(b"\r\n\r\n", &config(), PLACE, &|_| None).unwrap_err(),
            Skip::Unreadable
        );
    }

    #[test]
    fn quoted_history_and_signatures_are_stripped() {
        let body = "Yes, do that.\n\nOn Mon, 1 Dec 2026 at 10:00, Bot <bot@example.org> wrote:\n> Shall I?\n> > earlier\n";
        assert_eq!(strip_quoted(body), "Yes, do that.");
        let wrapped =
            "Fine\nOn Mon, 1 Dec 2026 at 10:00, Hermes Bot\n<bot@example.org> wrote:\n> x";
        assert_eq!(strip_quoted(wrapped), "Fine");
        assert_eq!(
            strip_quoted("> top\nanswer below\n-- \nAlice"),
            "answer below"
        );
        assert_eq!(
            strip_quoted("see\n-----Original Message-----\nFrom: x"),
            "see"
        );
        assert_eq!(
            strip_quoted("On Monday we ship.\nGood?"),
            "On Monday we ship.\nGood?"
        );
    }

    #[test]
    fn an_html_mail_is_read_as_text() {
        let raw = "From: alice@example.org\r\nMessage-ID: <h@x>\r\nIn-Reply-To: <m2@bot>\r\n\
                   MIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8\r\n\r\n\
                   <html><head><style>p {}</style></head><body>\
                   <p>Fish &amp; chips &lt;3 &eacute;t&#233;</p><ul><li>one</li><li>two</li></ul>\
                   </body></html>\r\n";
        let a = read(raw.as_bytes(), &config(), PLACE, &|_| None).unwrap();
        assert_eq!(a.event.text, "Fish & chips <3 été\n\n- one\n- two");
        // Both parts: the plain one is read.
        let both = "From: alice@example.org\r\nMessage-ID: <b@x>\r\nIn-Reply-To: <m2@bot>\r\n\
                    MIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary=\"b\"\r\n\r\n\
                    --b\r\nContent-Type: text/plain\r\n\r\nplain words\r\n\
                    --b\r\nContent-Type: text/html\r\n\r\n<p>html words</p>\r\n--b--\r\n";
        let b = read(both.as_bytes(), &config(), PLACE, &|_| None).unwrap();
        assert_eq!(b.event.text, "plain words");
    }

    #[test]
    fn attachments_become_media_with_handles_by_place() {
        let raw = "From: alice@example.org\r\nMessage-ID: <att@x>\r\nSubject: notes\r\n\
                   MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"b\"\r\n\r\n\
                   --b\r\nContent-Type: text/plain\r\n\r\nsee attached\r\n\
                   --b\r\nContent-Type: text/csv; name=\"data.csv\"\r\n\
                   Content-Disposition: attachment; filename=\"data.csv\"\r\n\
                   Content-Transfer-Encoding: base64\r\n\r\nYSxiCjEsMgo=\r\n--b--\r\n";
        let a = read(raw.as_bytes(), &config(), PLACE, &|_| None).unwrap();
        assert_eq!(a.event.message_type, MessageType::Mixed);
        assert_eq!(a.event.text, "Subject: notes\n\nsee attached");
        let m = &a.event.media[0];
        assert_eq!((m.kind, m.handle.as_str()), (MediaKind::Document, "7:3:0"));
        assert_eq!(m.file_name.as_deref(), Some("data.csv"));
        assert_eq!(m.mime_type.as_deref(), Some("text/csv"));
        let (bytes, mime, name) = attachment(raw.as_bytes(), 0).unwrap();
        assert_eq!(bytes, b"a,b\n1,2\n");
        assert_eq!(
            (mime.as_deref(), name.as_deref()),
            (Some("text/csv"), Some("data.csv"))
        );
        assert!(attachment(raw.as_bytes(), 1).is_none());
    }
}
