//! `hermes webhook add NAME --deliver TARGET [--prompt TEMPLATE]`: a
//! `[webhooks.NAME]` route appended to `config.toml` with a fresh secret,
//! printed once (it is in the file, readable by the owner only, and never
//! shown again). The gateway's listener checks the file at start.

use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use hermes_runtime::config::Settings;
use hermes_runtime::cron::{TARGET_FORMS, Target};

use crate::app::CliError;

/// Adds the route; prints its secret and how to use it.
pub fn add(
    settings: &Settings,
    name: &str,
    deliver: &str,
    prompt: Option<&str>,
    no_agent: bool,
) -> Result<i32, CliError> {
    let valid_name = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !valid_name {
        return Err(CliError::Config(format!(
            "a webhook name is 1 to 64 letters, digits, '-' or '_' (it is the URL's /hooks/NAME); got {name:?}"
        )));
    }
    match Target::parse(deliver) {
        Ok(Target::Home(_) | Target::Chat { .. } | Target::Local) => {}
        Ok(Target::Origin) => {
            return Err(CliError::Config(
                "--deliver cannot be origin: an event has no chat of its own; name a platform (its home channel) or platform:CHAT".into(),
            ));
        }
        Err(_) => {
            return Err(CliError::Config(format!(
                "cannot read --deliver {deliver:?}; use {TARGET_FORMS}"
            )));
        }
    }
    let path = settings.home.join("config.toml");
    let before = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => {
            return Err(CliError::Runtime(format!(
                "cannot read {}: {e}",
                path.display()
            )));
        }
    };
    let parsed: toml::Table = toml::from_str(&before)
        .map_err(|e| CliError::Config(format!("{} is not valid TOML: {e}", path.display())))?;
    if parsed.get("webhooks").and_then(|w| w.get(name)).is_some() {
        return Err(CliError::Config(format!(
            "a webhook route {name:?} exists already in {}; remove its [webhooks.{name}] table first",
            path.display()
        )));
    }
    let secret = fresh_secret()?;
    let quote = |s: &str| toml::Value::String(s.to_owned()).to_string();
    let mut section = format!(
        "\n[webhooks.{name}]\nsecret = {}\ndeliver = {}\n",
        quote(&secret),
        quote(deliver.trim())
    );
    if let Some(prompt) = prompt {
        section.push_str(&format!("prompt = {}\n", quote(prompt)));
    }
    if no_agent {
        section.push_str("no_agent = true\n");
    }
    let mut after = before.clone();
    if !after.is_empty() && !after.ends_with('\n') {
        after.push('\n');
    }
    after.push_str(&section);
    // Appending may clash with what the file says (`webhooks = {…}`): check.
    let reread: Result<toml::Table, _> = toml::from_str(&after);
    if !reread.is_ok_and(|t| t.get("webhooks").and_then(|w| w.get(name)).is_some()) {
        return Err(CliError::Config(format!(
            "cannot add [webhooks.{name}] to {}: its [webhooks] is not a plain section; nothing was changed",
            path.display()
        )));
    }
    write_private(&path, &after)?;
    let port = parsed
        .get("webhooks")
        .and_then(|w| w.get("port"))
        .map(ToString::to_string);
    println!("Added webhook route {name:?} to {}.", path.display());
    println!("Secret (shown only now): {secret}");
    println!(
        "Senders sign the raw body with it: X-Hub-Signature-256: sha256=HMAC-SHA256(secret, body) (GitHub: the webhook's \"Secret\")."
    );
    match port {
        Some(port) => {
            println!("URL: http://HOST:{port}/hooks/{name} (restart the gateway to load it)")
        }
        None => println!(
            "URL: http://HOST:PORT/hooks/{name}; set WEBHOOK_PORT (or [webhooks] port) and restart the gateway to listen"
        ),
    }
    Ok(0)
}

/// 32 random bytes from the kernel, as hex.
fn fresh_secret() -> Result<String, CliError> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| CliError::Runtime(format!("cannot draw a random secret: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Writes `text` to `path` through a temp file and a rename, mode 0600
/// (the file holds the secret).
fn write_private(path: &Path, text: &str) -> Result<(), CliError> {
    let fail =
        |e: std::io::Error| CliError::Runtime(format!("cannot write {}: {e}", path.display()));
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(fail)?;
    let temp = dir.join(".config.toml.webhook-tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)
        .map_err(fail)?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(fail)?;
    std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o600)).map_err(fail)?;
    std::fs::rename(&temp, path).map_err(fail)
}
