//! `hermes gateway run --check` (issue 31): what the service manager runs
//! before starting the gateway (`ExecStartPre`), so it checks what would
//! make `run` fail for good — and only that.
//!
//! - The configuration, as `run` validates it ([`check_config`]).
//! - Each platform's credentials, live ([`PlatformAdapter::verify`]):
//!   Telegram's `getMe`, Discord's `users/@me` and MESSAGE CONTENT switch,
//!   the WeCom app's `gettoken` and callback port. A
//!   refusal or an API nobody answers on is an error naming the setting.
//! - Not the provider: a local model that starts after the gateway is no
//!   reason not to start (the gateway retries each turn); the CLI probes it
//!   and only warns.
//!
//! The report says who may talk to the bot (everyone, loudly), the
//! toolsets and the working directory. It is printed only once everything
//! passed: it never says "OK" and then fails.

use std::fmt;
use std::path::PathBuf;

use hermes_runtime::config::Settings;

use crate::config::AllowList;
use crate::error::GatewayError;
use crate::wiring::{
    CheckSummary, adapters_beside, api_server_settings, build_adapters, check_config,
};

/// What `--check` found, everything having passed.
#[derive(Clone, Debug)]
pub struct CheckReport {
    /// The configuration, validated.
    pub summary: CheckSummary,
    /// Each platform and what answered for it (`@bot (bot id …)`; `None`
    /// when the platform has nothing to check before serving).
    pub bots: Vec<(&'static str, Option<String>)>,
    /// The enabled toolsets (`all` when not restricted).
    pub toolsets: String,
    /// Where the file and shell tools work.
    pub workdir: PathBuf,
}

/// Validates the configuration and verifies each platform's credentials
/// live. Every problem found is in the error, one a line.
pub fn check_live(settings: &Settings) -> Result<CheckReport, GatewayError> {
    let summary = check_config(settings)?;
    let api_server = api_server_settings(settings)?.is_some();
    let adapters = adapters_beside(build_adapters(settings, None), api_server)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut problems = Vec::new();
    let mut bots = Vec::new();
    for adapter in &adapters {
        match rt.block_on(adapter.verify()) {
            Ok(name) => bots.push((adapter.platform(), name)),
            Err(why) => problems.push(why),
        }
    }
    // Each platform's own findings beyond `verify` (a token of the wrong
    // shape, ids that are not ids), once every adapter was asked.
    let env = |name: &str| settings.var(name).map(str::to_owned);
    let failed = !problems.is_empty();
    for platform in crate::platform::platforms() {
        let verified = bots.iter().any(|(p, _)| *p == platform.name);
        problems.extend((platform.check_hints)(&env, failed && !verified));
    }
    if !problems.is_empty() {
        return Err(GatewayError::Platform(problems.join("\n")));
    }
    Ok(CheckReport {
        summary,
        bots,
        toolsets: settings
            .toolsets
            .as_ref()
            .map_or_else(|| "all".to_owned(), |t| t.join(", ")),
        workdir: settings.workdir.clone(),
    })
}

/// Verifies one platform's credentials live, as `--check` does
/// (`hermes gateway setup` before it saves a token): what answered, or a
/// sentence naming what to fix.
pub fn verify_platform(settings: &Settings, platform: &str) -> Result<Option<String>, String> {
    let adapters = build_adapters(settings, None).map_err(|e| e.to_string())?;
    let adapter = adapters
        .iter()
        .find(|a| a.platform() == platform)
        .ok_or_else(|| format!("this hermes was built without {platform}"))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(adapter.verify())
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.summary)?;
        for (platform, bot) in &self.bots {
            if let Some(bot) = bot {
                write!(f, "\n  {platform}: {bot} answered")?;
            }
        }
        write!(f, "\n  {}", describe_allow(&self.summary.config.allow))?;
        write!(f, "\n  toolsets: {}", self.toolsets)?;
        write!(f, "\n  working directory: {}", self.workdir.display())
    }
}

/// Who may talk to the bot, as the operator should read it.
pub fn describe_allow(allow: &AllowList) -> String {
    if allow.allow_all {
        return "allowed users: EVERYONE (GATEWAY_ALLOW_ALL_USERS=true) — anybody who finds the \
                bot can chat with it and use its tools"
            .to_owned();
    }
    if allow.is_empty() {
        return format!(
            "warning: nobody is allowed to talk to the bot yet; set {} (comma-separated user \
             ids), approve paired users (`hermes pairing approve`), or set \
             GATEWAY_ALLOW_ALL_USERS=true",
            crate::platform::allow_vars().join(" / ")
        );
    }
    let sorted = |ids: &std::collections::HashSet<String>| {
        let mut ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        ids.sort_unstable();
        ids.join(", ")
    };
    let mut parts = Vec::new();
    if !allow.everywhere.is_empty() {
        parts.push(format!("every platform: {}", sorted(&allow.everywhere)));
    }
    let mut platforms: Vec<_> = allow
        .per_platform
        .iter()
        .filter(|(_, ids)| !ids.is_empty())
        .collect();
    platforms.sort_unstable_by_key(|(p, _)| p.as_str());
    for (platform, ids) in platforms {
        parts.push(format!("{platform}: {}", sorted(ids)));
    }
    format!("allowed users: {}", parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allow_list_is_spelled_out() {
        let mut allow = AllowList::default();
        assert!(describe_allow(&allow).starts_with("warning: nobody"));
        allow.everywhere.insert("9".into());
        allow
            .per_platform
            .entry("telegram".into())
            .or_default()
            .extend(["8".to_owned(), "7".to_owned()]);
        assert_eq!(
            describe_allow(&allow),
            "allowed users: every platform: 9; telegram: 7, 8"
        );
        allow.allow_all = true;
        assert!(describe_allow(&allow).contains("EVERYONE"));
    }
}
