//! Email's harness: the tests' real mail system (`hermes_tests::dovecot`:
//! Dovecot for IMAP, aiosmtpd for SMTP) on loopback. A DM is a mail to the
//! bot's address; the bot's answers are read back from each user's maildir
//! (`In-Reply-To` is the message it answers); the home channel is an
//! address of its own (`EMAIL_HOME_ADDRESS`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hermes_tests::dovecot::{self, MailUser};

use crate::conformance_kit::{
    Access, Capabilities, Harness, Media, Place, Plan, Posted, Said, Sender,
};

pub struct Email {
    bot: MailUser,
    users: Vec<MailUser>,
    stranger: MailUser,
    home: MailUser,
}

/// Message-IDs of this process's mails.
static NEXT: AtomicU64 = AtomicU64::new(0);

impl Email {
    fn everyone(&self) -> impl Iterator<Item = &MailUser> {
        self.users.iter().chain([&self.stranger, &self.home])
    }

    /// How many times the bot has logged in to IMAP so far.
    fn logins(&self) -> usize {
        let logs = dovecot::server().logs();
        logs.matches(&format!("Login: user=<{}>", self.bot.address))
            .count()
    }
}

impl Harness for Email {
    const NAME: &'static str = "email";

    fn capabilities() -> Capabilities {
        Capabilities {
            users: 3,
            groups: false,
            threads: false,
            answers_while_down: true,
            replies_point_back: true,
            reply_limit: None,
            rate_limit: false,
            // Strangers get nothing at all, not even a pairing code:
            // answering them is how mail loops and backscatter start.
            access: Access::AllowList,
            photo_in: true,
            voice_in: false,
            file_out: false,
            home_channel: true,
        }
    }

    fn soak_plan() -> Plan {
        Plan {
            rounds: 12,
            users: 3,
            // Mailed before each gateway starts (from the second round on:
            // a first start takes the mailbox as it is).
            while_down: 2,
            down_in_first_round: false,
            while_up: 0,
            first_round_extra: (1, Duration::from_millis(500)),
            kill_within: Duration::from_millis(1500),
            graceful_every: 5,
            before_last: 0,
            settle: Duration::from_secs(2),
        }
    }

    fn needs() -> &'static [hermes_tests::tier::Component] {
        use hermes_tests::tier::Component;
        &[Component::Dovecot, Component::Aiosmtpd]
    }

    fn start(_: &tokio::runtime::Runtime) -> Self {
        let server = dovecot::server();
        Email {
            bot: server.user("bot"),
            users: (0..3).map(|_| server.user("user")).collect(),
            stranger: server.user("stranger"),
            home: server.user("home"),
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        let server = dovecot::server();
        let allowed: Vec<&str> = self.users.iter().map(|u| u.address.as_str()).collect();
        vec![
            ("EMAIL_ADDRESS", self.bot.address.clone()),
            ("EMAIL_PASSWORD", self.bot.password.clone()),
            ("EMAIL_IMAP_HOST", "127.0.0.1".to_owned()),
            ("EMAIL_IMAP_PORT", server.imap_port.to_string()),
            ("EMAIL_IMAP_SECURITY", "none".to_owned()),
            ("EMAIL_SMTP_HOST", "127.0.0.1".to_owned()),
            ("EMAIL_SMTP_PORT", server.smtp_port.to_string()),
            ("EMAIL_SMTP_SECURITY", "none".to_owned()),
            ("EMAIL_ALLOWED_USERS", allowed.join(",")),
            ("EMAIL_HOME_ADDRESS", self.home.address.clone()),
        ]
    }

    fn send(&mut self, from: Sender, place: Place, text: &str) -> Posted {
        assert_eq!(place, Place::Dm, "email has direct mail only");
        let user = match from {
            Sender::User(n) => &self.users[n],
            Sender::Stranger => &self.stranger,
        };
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let id = format!("m{n}.{}", user.address);
        let mail = format!(
            "From: {from}\nTo: {to}\nSubject: conformance {n}\nMessage-ID: <{id}>\n\n{text}\n",
            from = user.address,
            to = self.bot.address,
        );
        dovecot::server().send(&user.address, &self.bot.address, &mail);
        Posted {
            id,
            chat: user.address.clone(),
        }
    }

    /// A photo is a `multipart/mixed` mail: the caption as the text part,
    /// the PNG as a base64 attachment.
    fn send_media(&mut self, from: Sender, place: Place, media: &Media) -> Posted {
        let Media::Photo { png, caption } = media else {
            panic!("email has no voice notes")
        };
        assert_eq!(place, Place::Dm, "email has direct mail only");
        let user = match from {
            Sender::User(n) => &self.users[n],
            Sender::Stranger => &self.stranger,
        };
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let id = format!("m{n}.{}", user.address);
        let b64 = {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(png)
        };
        let mail = format!(
            "From: {from}\nTo: {to}\nSubject: photo {n}\nMessage-ID: <{id}>\nMIME-Version: 1.0\n\
             Content-Type: multipart/mixed; boundary=\"b{n}\"\n\n\
             --b{n}\nContent-Type: text/plain; charset=utf-8\n\n{caption}\n\
             --b{n}\nContent-Type: image/png\nContent-Disposition: attachment; filename=\"photo.png\"\n\
             Content-Transfer-Encoding: base64\n\n{b64}\n--b{n}--\n",
            from = user.address,
            to = self.bot.address,
        );
        dovecot::server().send(&user.address, &self.bot.address, &mail);
        Posted {
            id,
            chat: user.address.clone(),
        }
    }

    fn said(&self) -> Vec<Said> {
        let mut said: Vec<(String, Said)> = Vec::new();
        for user in self.everyone() {
            for raw in user.mails() {
                let Some(mail) = mail_parser::MessageParser::default().parse(raw.as_bytes()) else {
                    continue;
                };
                let reply_to = match mail.in_reply_to() {
                    mail_parser::HeaderValue::Text(t) => Some(t.to_string()),
                    mail_parser::HeaderValue::TextList(l) => l.first().map(|t| t.to_string()),
                    _ => None,
                };
                let date = mail.date().map(|d| d.to_rfc3339()).unwrap_or_default();
                said.push((
                    date,
                    Said {
                        chat: user.address.clone(),
                        reply_to,
                        text: mail.body_text(0).unwrap_or_default().trim().to_owned(),
                        file: None,
                    },
                ));
            }
        }
        // In the order sent, as far as the Date headers tell.
        said.sort_by(|a, b| a.0.cmp(&b.0));
        said.into_iter().map(|(_, s)| s).collect()
    }

    fn mark(&self) -> usize {
        self.logins()
    }

    /// Up once it has logged in to IMAP (and a moment more for the first
    /// look at the mailbox).
    fn wait_up(&self, logins: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.logins() == logins {
            assert!(
                Instant::now() < deadline,
                "the gateway never logged in: {}",
                dovecot::server().logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(500));
    }

    fn home_chat(&self) -> String {
        self.home.address.clone()
    }
}
