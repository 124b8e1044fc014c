//! The gateway's counters: messages in and out per platform, turns
//! answered and failed, tokens, turn latency, and each platform's
//! connection state. Rendered as Prometheus text for `/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hermes_core::Usage;
use hermes_runtime::sync::lock;
use serde::{Deserialize, Serialize};

/// Upper bounds of the turn-latency histogram's buckets, in seconds.
const LATENCY_BUCKETS: [f64; 10] = [0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0];

/// Where a platform's connection stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "detail")]
pub enum PlatformState {
    /// Connecting (or waiting for the bot's lease the first time).
    Connecting,
    /// Connected: messages flow.
    Connected,
    /// Another gateway holds the bot's lease; this one takes over if it
    /// stops (SPEC X8). Healthy.
    StandingBy,
    /// The adapter failed to connect or stopped; the cause.
    Failed(String),
}

impl PlatformState {
    /// Whether this state is what a healthy gateway shows.
    pub fn healthy(&self) -> bool {
        matches!(self, PlatformState::Connected | PlatformState::StandingBy)
    }

    /// How `gateway status` and `/healthz` say it.
    pub fn describe(&self) -> String {
        match self {
            PlatformState::Connecting => "connecting".to_owned(),
            PlatformState::Connected => "connected".to_owned(),
            PlatformState::StandingBy => "standing by (another gateway serves this bot)".to_owned(),
            PlatformState::Failed(why) => format!("failed: {why}"),
        }
    }
}

/// One platform's counters and state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlatformOps {
    /// Where the connection stands.
    #[serde(flatten)]
    pub state: PlatformState,
    /// Since when (Unix seconds).
    pub since: u64,
    /// Messages received from allowed users.
    pub messages_in: u64,
    /// Platform messages sent as replies (a long reply is several).
    pub messages_out: u64,
}

/// A metric family: name, type, help, and its samples (labels, value).
type Family = (&'static str, &'static str, &'static str, Vec<(String, u64)>);

/// The registry. All updates are cheap (atomics, one short lock per
/// platform event).
#[derive(Debug, Default)]
pub struct Ops {
    started: AtomicU64,
    turns_answered: AtomicU64,
    turns_failed: AtomicU64,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
    latency_buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    latency_count: AtomicU64,
    latency_sum_ms: AtomicU64,
    last_message_in: AtomicU64,
    last_reply_out: AtomicU64,
    scheduler_tick: AtomicU64,
    platforms: Mutex<BTreeMap<String, PlatformOps>>,
}

/// The process's registry.
pub fn ops() -> &'static Ops {
    static OPS: OnceLock<Ops> = OnceLock::new();
    OPS.get_or_init(Ops::default)
}

/// Now, in Unix seconds.
pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Ops {
    fn platforms(&self) -> MutexGuard<'_, BTreeMap<String, PlatformOps>> {
        lock(&self.platforms)
    }

    fn platform_entry<'a>(
        map: &'a mut BTreeMap<String, PlatformOps>,
        platform: &str,
    ) -> &'a mut PlatformOps {
        map.entry(platform.to_owned())
            .or_insert_with(|| PlatformOps {
                state: PlatformState::Connecting,
                since: now_unix(),
                messages_in: 0,
                messages_out: 0,
            })
    }

    /// The gateway started serving: `platforms` are connecting.
    pub fn started(&self, platforms: &[&str]) {
        self.started.store(now_unix(), Ordering::Relaxed);
        let mut map = self.platforms();
        for p in platforms {
            Self::platform_entry(&mut map, p);
        }
    }

    /// When the gateway started (Unix seconds; 0 before).
    pub fn started_at(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }

    /// A platform's connection changed.
    pub fn platform_state(&self, platform: &str, state: PlatformState) {
        let mut map = self.platforms();
        let entry = Self::platform_entry(&mut map, platform);
        if entry.state != state {
            entry.state = state;
            entry.since = now_unix();
        }
    }

    /// A message from an allowed user came in.
    pub fn message_in(&self, platform: &str) {
        Self::platform_entry(&mut self.platforms(), platform).messages_in += 1;
        self.last_message_in.store(now_unix(), Ordering::Relaxed);
    }

    /// A turn's reply went out in `pieces` platform messages.
    pub fn reply_out(&self, platform: &str, pieces: usize, took: Duration, usage: &Usage) {
        Self::platform_entry(&mut self.platforms(), platform).messages_out += pieces as u64;
        self.last_reply_out.store(now_unix(), Ordering::Relaxed);
        self.turns_answered.fetch_add(1, Ordering::Relaxed);
        self.prompt_tokens
            .fetch_add(usage.prompt_tokens, Ordering::Relaxed);
        self.completion_tokens
            .fetch_add(usage.completion_tokens, Ordering::Relaxed);
        let secs = took.as_secs_f64();
        for (bound, count) in LATENCY_BUCKETS.iter().zip(&self.latency_buckets) {
            if secs <= *bound {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        self.latency_sum_ms.fetch_add(
            u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// A turn ended without its answer.
    pub fn turn_failed(&self) {
        self.turns_failed.fetch_add(1, Ordering::Relaxed);
    }

    /// The scheduler ran a tick.
    pub fn scheduler_tick(&self) {
        self.scheduler_tick.store(now_unix(), Ordering::Relaxed);
    }

    /// Each platform's counters and state.
    pub fn platform_snapshot(&self) -> BTreeMap<String, PlatformOps> {
        self.platforms().clone()
    }

    /// (last message in, last reply out, last scheduler tick), Unix
    /// seconds, 0 for never.
    pub fn last_activity(&self) -> (u64, u64, u64) {
        (
            self.last_message_in.load(Ordering::Relaxed),
            self.last_reply_out.load(Ordering::Relaxed),
            self.scheduler_tick.load(Ordering::Relaxed),
        )
    }

    /// (answered, failed) turns.
    pub fn turns(&self) -> (u64, u64) {
        (
            self.turns_answered.load(Ordering::Relaxed),
            self.turns_failed.load(Ordering::Relaxed),
        )
    }

    /// `Ok` when every platform is connected (or standing by for another
    /// gateway); otherwise each platform that is not, one a line.
    pub fn health(&self) -> Result<(), String> {
        let problems: Vec<String> = self
            .platforms()
            .iter()
            .filter(|(_, p)| !p.state.healthy())
            .map(|(name, p)| format!("{name}: {}", p.state.describe()))
            .collect();
        if self.started_at() == 0 {
            return Err("starting".to_owned());
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("\n"))
        }
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn render_prometheus(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP hermes_gateway_up 1 when every platform is connected or standing by.\n\
             # TYPE hermes_gateway_up gauge\nhermes_gateway_up {}",
            u8::from(self.health().is_ok())
        );
        let started = self.started_at();
        let uptime = now_unix().saturating_sub(started);
        let platforms = self.platform_snapshot();
        let (answered, failed) = self.turns();
        let sections: [Family; 6] = [
            (
                "hermes_gateway_uptime_seconds",
                "gauge",
                "Seconds since the gateway started.",
                vec![(String::new(), if started == 0 { 0 } else { uptime })],
            ),
            (
                "hermes_gateway_messages_in_total",
                "counter",
                "Messages received from allowed users.",
                platforms
                    .iter()
                    .map(|(p, o)| (format!("{{platform=\"{p}\"}}"), o.messages_in))
                    .collect(),
            ),
            (
                "hermes_gateway_messages_out_total",
                "counter",
                "Platform messages sent as replies.",
                platforms
                    .iter()
                    .map(|(p, o)| (format!("{{platform=\"{p}\"}}"), o.messages_out))
                    .collect(),
            ),
            (
                "hermes_gateway_platform_connected",
                "gauge",
                "1 when the platform is connected (or standing by for another gateway).",
                platforms
                    .iter()
                    .map(|(p, o)| {
                        (
                            format!("{{platform=\"{p}\"}}"),
                            u64::from(o.state.healthy()),
                        )
                    })
                    .collect(),
            ),
            (
                "hermes_gateway_turns_total",
                "counter",
                "Turns by outcome: answered, or failed (no answer; the cause is in the log).",
                vec![
                    ("{outcome=\"answered\"}".to_owned(), answered),
                    ("{outcome=\"failed\"}".to_owned(), failed),
                ],
            ),
            (
                "hermes_gateway_tokens_total",
                "counter",
                "Tokens the provider reported for answered turns.",
                vec![
                    (
                        "{kind=\"prompt\"}".to_owned(),
                        self.prompt_tokens.load(Ordering::Relaxed),
                    ),
                    (
                        "{kind=\"completion\"}".to_owned(),
                        self.completion_tokens.load(Ordering::Relaxed),
                    ),
                ],
            ),
        ];
        for (name, kind, help, samples) in sections {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, value) in samples {
                let _ = writeln!(out, "{name}{labels} {value}");
            }
        }
        let name = "hermes_gateway_turn_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time from the start of a turn's work to its reply.\n# TYPE {name} histogram"
        );
        for (bound, count) in LATENCY_BUCKETS.iter().zip(&self.latency_buckets) {
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{bound}\"}} {}",
                count.load(Ordering::Relaxed)
            );
        }
        let count = self.latency_count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.latency_sum_ms.load(Ordering::Relaxed) as f64 / 1000.0;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn prometheus_text_counts_messages_turns_tokens_and_latency() {
        let ops = Ops::default();
        ops.started(&["telegram"]);
        assert!(ops.health().is_err(), "connecting is not healthy yet");
        ops.platform_state("telegram", PlatformState::Connected);
        ops.message_in("telegram");
        ops.message_in("telegram");
        let usage = Usage {
            prompt_tokens: 100,
            completion_tokens: 7,
            total_tokens: 107,
            ..Usage::default()
        };
        ops.reply_out("telegram", 2, Duration::from_millis(1500), &usage);
        ops.turn_failed();
        let text = ops.render_prometheus();
        assert!(
            text.lines()
                .any(|l| l.starts_with("hermes_gateway_uptime_seconds ")),
            "{text}"
        );
        for line in [
            "hermes_gateway_up 1",
            "hermes_gateway_messages_in_total{platform=\"telegram\"} 2",
            "hermes_gateway_messages_out_total{platform=\"telegram\"} 2",
            "hermes_gateway_platform_connected{platform=\"telegram\"} 1",
            "hermes_gateway_turns_total{outcome=\"answered\"} 1",
            "hermes_gateway_turns_total{outcome=\"failed\"} 1",
            "hermes_gateway_tokens_total{kind=\"prompt\"} 100",
            "hermes_gateway_tokens_total{kind=\"completion\"} 7",
            "hermes_gateway_turn_duration_seconds_bucket{le=\"1\"} 0",
            "hermes_gateway_turn_duration_seconds_bucket{le=\"2\"} 1",
            "hermes_gateway_turn_duration_seconds_bucket{le=\"+Inf\"} 1",
            "hermes_gateway_turn_duration_seconds_sum 1.5",
            "hermes_gateway_turn_duration_seconds_count 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        // Every sample belongs to a declared metric.
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let name = l.split(['{', ' ']).next().unwrap_or("");
            let family = name
                .trim_end_matches("_bucket")
                .trim_end_matches("_sum")
                .trim_end_matches("_count");
            assert!(
                text.contains(&format!("# TYPE {family} "))
                    || text.contains(&format!("# TYPE {name} ")),
                "{l}"
            );
        }
        ops.platform_state("telegram", PlatformState::Failed("token refused".into()));
        let why = ops.health().unwrap_err();
        assert!(why.contains("telegram: failed: token refused"), "{why}");
    }
}
