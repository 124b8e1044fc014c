//! `hermes gateway status` (issue 31, item 9): whether a gateway runs for
//! this home (its lock), and what its status file says — each platform's
//! connection, the last message and reply, the scheduler's last tick. The
//! exit code is for scripts and service checks: 0 running with every
//! platform connected (or standing by for another gateway), 1 running with
//! a platform that is not, 3 not running.

use hermes_gateway::ops::status::{self, GatewayStatus, StatusFile};
use hermes_runtime::config::Settings;
use hermes_runtime::store::BackendKind;

use crate::sessions::date_time;

/// Prints the status; returns the exit code.
pub fn print(settings: &Settings) -> i32 {
    let sqlite = settings.store_target().kind() == BackendKind::Sqlite;
    let found = status::read(&settings.home, sqlite);
    println!(
        "{}",
        describe(&found, hermes_gateway::ops::metrics::now_unix())
    );
    found.exit_code()
}

/// "12 s ago", "5 min ago", "3 h ago", "2 days ago".
fn ago(now: u64, then: u64) -> String {
    let secs = now.saturating_sub(then);
    match secs {
        0..120 => format!("{secs} s ago"),
        120..7200 => format!("{} min ago", secs / 60),
        7200..172_800 => format!("{} h ago", secs / 3600),
        _ => format!("{} days ago", secs / 86_400),
    }
}

fn when(now: u64, then: u64) -> String {
    if then == 0 {
        return "never".to_owned();
    }
    format!("{} ({})", date_time(then * 1000), ago(now, then))
}

/// The report, as printed.
pub fn describe(found: &GatewayStatus, now: u64) -> String {
    match found {
        GatewayStatus::Running { pid, status } => {
            let pid = pid.map_or_else(String::new, |p| format!(" (pid {p})"));
            match status {
                Some(s) => {
                    let mut out =
                        format!("gateway: running{pid} since {}", when(now, s.started_at));
                    details(&mut out, s, now);
                    out
                }
                None => format!("gateway: running{pid}; it has not written its status yet"),
            }
        }
        GatewayStatus::NotRunning(None) => "gateway: not running".to_owned(),
        GatewayStatus::NotRunning(Some(s)) => {
            let stopped = s.stopped_at.unwrap_or(s.updated_at);
            let mut out = format!(
                "gateway: not running (the last one, pid {}, stopped {})",
                s.pid,
                when(now, stopped)
            );
            // Why a platform stopped it (a revoked token) is what to fix.
            for (name, p) in &s.platforms {
                if let hermes_gateway::ops::PlatformState::Failed(why) = &p.state {
                    out.push_str(&format!("\n  {name}: failed: {why}"));
                }
            }
            out
        }
    }
}

fn details(out: &mut String, s: &StatusFile, now: u64) {
    use std::fmt::Write as _;
    for (name, p) in &s.platforms {
        let _ = write!(
            out,
            "\n  {name}: {} since {}; {} message{} in, {} out",
            p.state.describe(),
            when(now, p.since),
            p.messages_in,
            if p.messages_in == 1 { "" } else { "s" },
            p.messages_out
        );
    }
    let _ = write!(
        out,
        "\n  last message in: {}\n  last reply out: {}\n  turns: {} answered, {} failed",
        when(now, s.last_message_in),
        when(now, s.last_reply_out),
        s.turns_answered,
        s.turns_failed
    );
    if s.scheduler_tick != 0 {
        let _ = write!(
            out,
            "\n  scheduler: last tick {}",
            ago(now, s.scheduler_tick)
        );
    }
    if let Some(addr) = &s.metrics_addr {
        let _ = write!(out, "\n  health: {addr}/healthz, metrics: {addr}/metrics");
    }
    let _ = write!(out, "\n  (status written {})", ago(now, s.updated_at));
}
