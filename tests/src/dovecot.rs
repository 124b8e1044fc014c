//! A private mail system for the Email tests of one test binary: Dovecot
//! (IMAP, IMAPS and LMTP on free loopback ports, a passwd-file of users,
//! maildirs in a fresh directory, a self-signed certificate) and an SMTP server in front of it
//! (`tests/python/smtp_relay.py`, aiosmtpd) that delivers what it accepts
//! into the recipients' mailboxes through Dovecot's LMTP.
//!
//! [`server`] starts both on first use, each with `PR_SET_PDEATHSIG` from
//! a thread that lives as long as the process, so the kernel stops them
//! when the test process dies; a normal exit kills them and removes the
//! directory. Dovecot comes from Debian (`dovecot-imapd dovecot-lmtpd`),
//! aiosmtpd from PyPI: `$HERMES_AIOSMTPD_PYTHON` names the Python of a
//! virtualenv that has it (`.ci/run` makes both, the virtualenv under
//! `~/.cache/hermes-ci`, which is also looked in). Without them [`server`]
//! panics with what to install: the tests fail, they do not skip.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// The running mail system.
#[derive(Debug)]
pub struct MailServer {
    /// Dovecot's IMAP port on 127.0.0.1 (no TLS).
    pub imap_port: u16,
    /// The SMTP server's port on 127.0.0.1 (AUTH over plain loopback).
    pub smtp_port: u16,
    /// Dovecot's LMTP port on 127.0.0.1.
    pub lmtp_port: u16,
    /// Dovecot's IMAPS port on 127.0.0.1 (TLS from the first byte; the
    /// plain port offers STARTTLS too), with [`MailServer::cert_pem`].
    pub imaps_port: u16,
    /// The server's self-signed certificate (PEM) for `localhost` and
    /// 127.0.0.1: the root a client must trust.
    pub cert_pem: Vec<u8>,
    /// Everything: config, users, mailboxes, logs.
    pub dir: PathBuf,
    users: Mutex<String>,
}

/// A mailbox user.
#[derive(Clone, Debug)]
pub struct MailUser {
    /// `nameN@example.test`.
    pub address: String,
    /// The IMAP and SMTP password.
    pub password: String,
    maildir: PathBuf,
}

/// The aiosmtpd version `.ci/run` installs.
pub const AIOSMTPD: &str = "1.4.6";

static SERVER: OnceLock<MailServer> = OnceLock::new();
static NEXT_USER: AtomicU32 = AtomicU32::new(0);
static PIDS: [AtomicI32; 2] = [AtomicI32::new(0), AtomicI32::new(0)];
static DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

/// The mail system of this test process, started on first use.
pub fn server() -> &'static MailServer {
    SERVER.get_or_init(start)
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn is_root() -> bool {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() == 0 }
}

/// The uid and gid mail is stored as: ours, or `nobody` when we are root
/// (Dovecot refuses to access mail as root).
fn mail_ids() -> (u32, u32) {
    if is_root() {
        (65534, 65534)
    } else {
        // SAFETY: getuid/getgid have no preconditions.
        unsafe { (libc::getuid(), libc::getgid()) }
    }
}

fn config(dir: &Path, imap: u16, imaps: u16, lmtp: u16) -> String {
    let d = dir.display();
    // Not root: every Dovecot process runs as us (no privilege drop).
    let who = if is_root() {
        String::new()
    } else {
        let user = std::env::var("USER").unwrap_or_else(|_| "nobody".to_owned());
        format!(
            "default_login_user = {user}\ndefault_internal_user = {user}\ndefault_internal_group = {user}\n"
        )
    };
    format!(
        r#"base_dir = {d}/run
state_dir = {d}/state
log_path = {d}/dovecot.log
protocols = imap lmtp
listen = 127.0.0.1
ssl = yes
ssl_cert = <{d}/cert.pem
ssl_key = <{d}/key.pem
disable_plaintext_auth = no
auth_mechanisms = plain login
first_valid_uid = 1
mail_location = maildir:~/Maildir
{who}passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {d}/users
}}
userdb {{
  driver = passwd-file
  args = username_format=%u {d}/users
}}
service imap-login {{
  chroot =
  inet_listener imap {{
    address = 127.0.0.1
    port = {imap}
  }}
  inet_listener imaps {{
    address = 127.0.0.1
    port = {imaps}
  }}
}}
service lmtp {{
  inet_listener lmtp {{
    address = 127.0.0.1
    port = {lmtp}
  }}
}}
service anvil {{
  chroot =
}}
"#
    )
}

/// Starts `command` from a thread that outlives the test that asked, with
/// `PR_SET_PDEATHSIG` (which follows the forking thread, not the process).
fn spawn(mut command: Command, slot: usize) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // SAFETY: prctl is async-signal-safe and touches no memory of ours.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = command.spawn().expect("start a mail server");
        PIDS[slot].store(i32::try_from(child.id()).unwrap_or(0), Ordering::SeqCst);
        tx.send(()).unwrap();
        let _ = child.wait();
        PIDS[slot].store(0, Ordering::SeqCst);
    });
    rx.recv().expect("the mail server starter thread");
}

fn wait_for_port(port: u16, what: &str, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} did not listen within 30 s:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn start() -> MailServer {
    crate::tier::expect(crate::tier::Component::Dovecot);
    crate::tier::expect(crate::tier::Component::Aiosmtpd);
    let dovecot = dovecot_binary().expect(
        "the Email tests need Dovecot: apt-get install dovecot-imapd dovecot-lmtpd (.ci/run does this)",
    );
    let python = aiosmtpd_python().unwrap_or_else(|| {
        panic!(
            "the Email tests need aiosmtpd: python3 -m venv /tmp/aiosmtpd-venv && \
             /tmp/aiosmtpd-venv/bin/pip install aiosmtpd, then set \
             HERMES_AIOSMTPD_PYTHON=/tmp/aiosmtpd-venv/bin/python (.ci/run does this)"
        )
    });
    // Under the system temp dir, readable by `nobody` (the mail's owner
    // when we are root), unlike a private 0700 directory.
    let dir = std::env::temp_dir().join(format!(
        "hermes-mail-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(dir.join("home")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (uid, gid) = mail_ids();
    std::os::unix::fs::chown(dir.join("home"), Some(uid), Some(gid)).unwrap();
    std::fs::write(dir.join("users"), "").unwrap();
    *DIR.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(dir.clone());
    // SAFETY: registering a plain `extern "C" fn` with no captured state.
    unsafe {
        libc::atexit(stop_at_exit);
    }
    make_certificate(&dir);
    let (imap_port, imaps_port) = (free_port(), free_port());
    let (lmtp_port, smtp_port) = (free_port(), free_port());
    std::fs::write(
        dir.join("dovecot.conf"),
        config(&dir, imap_port, imaps_port, lmtp_port),
    )
    .unwrap();
    let out = std::fs::File::create(dir.join("dovecot.out")).unwrap();
    let mut command = Command::new(dovecot);
    command
        .arg("-F")
        .arg("-c")
        .arg(dir.join("dovecot.conf"))
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    spawn(command, 0);
    wait_for_port(imap_port, "Dovecot", &dir.join("dovecot.out"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/smtp_relay.py");
    let log = std::fs::File::create(dir.join("smtp.log")).unwrap();
    let mut command = Command::new(python);
    command
        .arg(script)
        .arg(smtp_port.to_string())
        .arg(lmtp_port.to_string())
        .arg(dir.join("users"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    spawn(command, 1);
    wait_for_port(smtp_port, "the SMTP server", &dir.join("smtp.log"));
    MailServer {
        imap_port,
        imaps_port,
        cert_pem: std::fs::read(dir.join("cert.pem")).unwrap(),
        smtp_port,
        lmtp_port,
        dir,
        users: Mutex::new(String::new()),
    }
}

/// A self-signed certificate for `localhost` and 127.0.0.1, made with the
/// `openssl` command (Dovecot's package depends on it). Not a CA: it is its
/// own trust anchor.
fn make_certificate(dir: &Path) {
    std::fs::write(
        dir.join("openssl.cnf"),
        "[req]\ndistinguished_name = dn\nx509_extensions = ext\nprompt = no\n\
         [dn]\nCN = localhost\n\
         [ext]\nsubjectAltName = DNS:localhost, IP:127.0.0.1\nbasicConstraints = critical, CA:FALSE\n\
         keyUsage = critical, digitalSignature, keyEncipherment\nextendedKeyUsage = serverAuth\n",
    )
    .unwrap();
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-config",
        ])
        .arg(dir.join("openssl.cnf"))
        .arg("-keyout")
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .output()
        .expect("run openssl to make the test certificate");
    assert!(
        out.status.success(),
        "openssl req failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

extern "C" fn stop_at_exit() {
    for pid in &PIDS {
        let pid = pid.load(Ordering::SeqCst);
        if pid > 0 {
            // SAFETY: signalling our own child by pid.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
    if let Ok(mut dir) = DIR.lock()
        && let Some(dir) = dir.take()
    {
        std::thread::sleep(Duration::from_millis(100));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

impl MailServer {
    /// A new user (`{name}{n}@example.test`) with a fresh mailbox.
    pub fn user(&self, name: &str) -> MailUser {
        let n = NEXT_USER.fetch_add(1, Ordering::SeqCst);
        let address = format!("{name}{n}@example.test");
        let password = format!("pw-{name}-{n}");
        let home = self.dir.join("home").join(&address);
        let (uid, gid) = mail_ids();
        let mut users = self
            .users
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        users.push_str(&format!(
            "{address}:{{PLAIN}}{password}:{uid}:{gid}::{}::\n",
            home.display()
        ));
        // Replaced whole (rename), never appended: Dovecot rereads the file
        // when it changes and must never see half a line.
        let tmp = self.dir.join("users.tmp");
        std::fs::write(&tmp, users.as_bytes()).unwrap();
        std::fs::rename(&tmp, self.dir.join("users")).unwrap();
        drop(users);
        // Dovecot looks at the file again at most once a second: a login
        // sooner could still find the user unknown (seen: every other one).
        std::thread::sleep(Duration::from_millis(1100));
        MailUser {
            address,
            password,
            maildir: home.join("Maildir"),
        }
    }

    /// Sends `message` (headers and body, `\n` or `\r\n` lines) from `from`
    /// to `to` through the SMTP server, as mail from outside arrives.
    pub fn send(&self, from: &str, to: &str, message: &str) {
        let stream = TcpStream::connect(("127.0.0.1", self.smtp_port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut writer = stream;
        let mut expect = |code: &str| {
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                assert!(line.starts_with(code), "SMTP: wanted {code}, got {line:?}");
                if line.as_bytes().get(3) != Some(&b'-') {
                    break;
                }
            }
        };
        expect("220");
        let data: String = message
            .replace("\r\n", "\n")
            .lines()
            // Dot-stuffing (RFC 5321 4.5.2).
            .map(|l| {
                if l.starts_with('.') {
                    format!(".{l}\r\n")
                } else {
                    format!("{l}\r\n")
                }
            })
            .collect();
        for (command, code) in [
            ("EHLO tests.example.test".to_owned(), "250"),
            (format!("MAIL FROM:<{from}>"), "250"),
            (format!("RCPT TO:<{to}>"), "250"),
            ("DATA".to_owned(), "354"),
            (format!("{data}."), "250"),
            ("QUIT".to_owned(), "221"),
        ] {
            writer
                .write_all(format!("{command}\r\n").as_bytes())
                .unwrap();
            expect(code);
        }
    }

    /// The server's logs, for a failure message.
    pub fn logs(&self) -> String {
        let read = |f: &str| std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
        format!(
            "dovecot:\n{}\nsmtp:\n{}",
            read("dovecot.log"),
            read("smtp.log")
        )
    }
}

impl MailUser {
    /// Every mail in the user's mailbox, oldest first (read from the
    /// maildir Dovecot delivered into).
    pub fn mails(&self) -> Vec<String> {
        let mut files: Vec<(std::time::SystemTime, String, PathBuf)> = Vec::new();
        for sub in ["new", "cur"] {
            let Ok(entries) = std::fs::read_dir(self.maildir.join(sub)) else {
                continue;
            };
            for entry in entries.flatten() {
                let modified = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::UNIX_EPOCH);
                let name = entry.file_name().to_string_lossy().into_owned();
                files.push((modified, name, entry.path()));
            }
        }
        // Maildir names start with the delivery time, `<secs>.M<usecs>P…`:
        // ordered as numbers (as text, two mails of one second came in the
        // wrong order whenever the later one's microseconds had fewer
        // digits — a test flake under load).
        files.sort_by_key(|(modified, name, _)| (delivered_at(name), *modified, name.clone()));
        files
            .into_iter()
            .filter_map(|(_, _, path)| {
                let mut s = String::new();
                std::fs::File::open(path)
                    .ok()?
                    .read_to_string(&mut s)
                    .ok()?;
                Some(s)
            })
            .collect()
    }

    /// Waits until the mailbox holds at least `count` mails; returns them.
    pub fn wait_for_mails(&self, count: usize, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let mails = self.mails();
            if mails.len() >= count {
                return mails;
            }
            assert!(
                Instant::now() < deadline,
                "{} has {} mails, wanted {count}:\n{}",
                self.address,
                mails.len(),
                server().logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// When a Maildir file name says its mail was delivered: seconds and
/// microseconds (`1733340000.M123456P42.host` → (1733340000, 123456));
/// (0, 0) for a name of another form.
fn delivered_at(name: &str) -> (u64, u64) {
    let mut parts = name.split('.');
    let secs = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let micros = parts
        .next()
        .and_then(|p| p.split_once('M'))
        .map(|(_, rest)| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().unwrap_or(0)
        })
        .unwrap_or(0);
    (secs, micros)
}

/// The value of header `name` in `mail` (unfolded), if present.
pub fn header(mail: &str, name: &str) -> Option<String> {
    let head = mail.split("\r\n\r\n").next().unwrap_or(mail);
    let head = head.split("\n\n").next().unwrap_or(head);
    let mut value: Option<String> = None;
    for line in head.lines() {
        let line = line.trim_end_matches('\r');
        if let Some(v) = value.as_mut()
            && (line.starts_with(' ') || line.starts_with('\t'))
        {
            v.push(' ');
            v.push_str(line.trim());
            continue;
        }
        if value.is_some() {
            break;
        }
        if let Some((n, v)) = line.split_once(':')
            && n.eq_ignore_ascii_case(name)
        {
            value = Some(v.trim().to_owned());
        }
    }
    value
}

/// Dovecot's binary, if installed.
pub(crate) fn dovecot_binary() -> Option<&'static Path> {
    ["/usr/sbin/dovecot", "/usr/bin/dovecot"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists())
}

/// A Python with aiosmtpd: the variable, or the virtualenv where `.ci/run`
/// keeps it.
pub(crate) fn aiosmtpd_python() -> Option<PathBuf> {
    let cached = std::env::var_os("HERMES_CI_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/hermes-ci")))
        .map(|c| c.join(format!("aiosmtpd-{AIOSMTPD}/bin/python")))
        .filter(|p| p.exists());
    match std::env::var_os("HERMES_AIOSMTPD_PYTHON") {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => cached,
    }
}

#[cfg(test)]
mod tests {
    use super::delivered_at;

    #[test]
    fn maildir_names_order_by_delivery_time_as_numbers() {
        let mut names = [
            "1796420354.M99999P7.vm,S=10",
            "1796420354.M100000P7.vm,S=10",
            "1796420353.M999999P7.vm,S=10",
            "odd-name",
        ];
        names.sort_by_key(|n| delivered_at(n));
        assert_eq!(
            names,
            [
                "odd-name",
                "1796420353.M999999P7.vm,S=10",
                "1796420354.M99999P7.vm,S=10",
                "1796420354.M100000P7.vm,S=10",
            ]
        );
    }
}
