//! The log of `hermes gateway run` (issue 31): a service's log, read in
//! `journalctl` or a collector, not a terminal's. Every line starts with a
//! UTC timestamp and the level; at the default level hermes says one line
//! per event (connected, message in, reply out, a failure and its cause)
//! and the libraries it uses say only their warnings.
//!
//! The level: `--log-level`, else `HERMES_LOG`, else `RUST_LOG`, else
//! `info`. A bare level (`debug`) applies to hermes's own crates — the HTTP
//! and TLS libraries stay at warnings; a filter with `=` or `,`
//! (`hermes_gateway=debug,ureq=trace`) is taken as written. The format:
//! `[gateway] log_format` (`text` or `json`).

use std::fmt::{self, Write as _};

use hermes_gateway::config::LogFormat;
use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// hermes's own crates below the platforms: with the platforms' crates
/// (their descriptors' `log_target`), what a bare level applies to.
const OWN_CRATES: &[&str] = &[
    "hermes",
    "hermes_gateway",
    "hermes_runner",
    "hermes_platform_kit",
    "hermes_runtime",
    "hermes_store",
    "hermes_core",
];

/// Every crate of this build whose lines a bare level shows.
fn own_crates() -> impl Iterator<Item = &'static str> {
    OWN_CRATES.iter().copied().chain(
        hermes_gateway::platform::platforms()
            .iter()
            .map(|p| p.log_target),
    )
}

/// Library log targets that write credentials at trace level: always off.
const SECRET_TRACING: &str = "async_imap::imap_stream=off";

/// The filter for a level or filter `spec` (`None`: the default, `info`).
/// `source` names where the spec came from, for the error.
pub fn filter(spec: Option<&str>, source: &str) -> Result<Targets, String> {
    let spec = spec
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .unwrap_or("info");
    let directives = if spec.contains(['=', ',']) {
        spec.to_owned()
    } else {
        let level = spec.to_ascii_lowercase();
        if !matches!(
            level.as_str(),
            "off" | "error" | "warn" | "info" | "debug" | "trace"
        ) {
            return Err(format!(
                "{source}: `{spec}` is not a log level; use error, warn, info, debug or trace (or a filter such as hermes_gateway=debug)"
            ));
        }
        // Libraries only ever say more than warnings when asked by name.
        let libraries = if matches!(level.as_str(), "off" | "error") {
            level.as_str()
        } else {
            "warn"
        };
        let own: Vec<String> = own_crates().map(|c| format!("{c}={level}")).collect();
        format!("{libraries},{}", own.join(","))
    };
    // The IMAP client traces every command it writes, the LOGIN with the
    // mailbox password among them: never shown, whatever the filter says
    // (the most specific target wins).
    let directives = format!("{directives},{SECRET_TRACING}");
    directives
        .parse::<Targets>()
        .map_err(|e| format!("{source}: `{spec}` is not a log filter: {e}"))
}

/// Installs the gateway's subscriber, writing to stderr.
pub fn init(format: LogFormat, filter: Targets) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .event_format(Line { format })
        .finish()
        .with(filter)
        .try_init();
}

/// One event, one line.
struct Line {
    format: LogFormat,
}

/// An event's fields, in the order given.
#[derive(Default)]
struct Fields {
    message: String,
    error: Option<String>,
    rest: Vec<(&'static str, Value)>,
}

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        match (field.name(), value) {
            ("message", Value::String(s)) => self.message = s,
            ("error", Value::String(s)) => self.error = Some(s),
            (name, v) => self.rest.push((name, v)),
        }
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_owned()));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::from(value));
    }
}

/// A value as `key=value` shows it: bare when it is one word, quoted
/// otherwise.
fn text_value(v: &Value) -> String {
    match v {
        Value::String(s)
            if !s.is_empty() && !s.contains(char::is_whitespace) && !s.contains('"') =>
        {
            s.clone()
        }
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

impl<S, N> FormatEvent<S, N> for Line
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        match self.format {
            LogFormat::Text => {
                let mut line = format!("{timestamp} {:>5} {}", meta.level(), fields.message);
                if let Some(e) = &fields.error {
                    let _ = write!(line, ": {e}");
                }
                for (k, v) in &fields.rest {
                    let _ = write!(line, " {k}={}", text_value(v));
                }
                // One event, one line: a multi-line message stays on it.
                writeln!(w, "{}", line.replace('\n', " "))
            }
            LogFormat::Json => {
                let mut object = Map::new();
                object.insert("timestamp".into(), Value::String(timestamp));
                object.insert("level".into(), Value::String(meta.level().to_string()));
                object.insert("target".into(), Value::String(meta.target().to_owned()));
                object.insert("message".into(), Value::String(fields.message));
                if let Some(e) = fields.error {
                    object.insert("error".into(), Value::String(e));
                }
                for (k, v) in fields.rest {
                    object.insert(k.to_owned(), v);
                }
                writeln!(w, "{}", Value::Object(object))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The platforms and the runner left the gateway's crate (issue 40):
    /// their `info` lines (a platform connected, a turn answered) are what
    /// an operator reads at the default level, and must not fall to the
    /// libraries' `warn`.
    #[test]
    fn the_default_level_shows_info_of_every_own_crate() {
        use tracing::Level;
        let f = filter(None, "HERMES_LOG").unwrap();
        let targets: Vec<String> = ["hermes_runner::runner::turn", "hermes_store::x"]
            .into_iter()
            .map(str::to_owned)
            .chain(
                hermes_gateway::platform::platforms()
                    .iter()
                    .map(|p| format!("{}::x", p.log_target)),
            )
            .collect();
        assert!(targets.len() > 3, "{targets:?}");
        for target in &targets {
            assert!(
                f.would_enable(target, &Level::INFO),
                "{target} at info: {f}"
            );
        }
        assert!(!f.would_enable("ureq::unit", &Level::INFO), "{f}");
        let f = filter(Some("debug"), "HERMES_LOG").unwrap();
        for target in &targets {
            assert!(
                f.would_enable(target, &Level::DEBUG),
                "{target} at debug: {f}"
            );
        }
    }

    #[test]
    fn a_bare_level_leaves_the_libraries_at_warnings() {
        let f = filter(Some("debug"), "HERMES_LOG").unwrap().to_string();
        assert!(f.contains("hermes_gateway=debug"), "{f}");
        assert!(f.contains("hermes_runtime=debug"), "{f}");
        assert!(f.starts_with("warn") || f.contains(",warn"), "{f}");
        let f = filter(None, "HERMES_LOG").unwrap().to_string();
        assert!(f.contains("hermes_gateway=info"), "{f}");
        let f = filter(Some("ureq=trace"), "RUST_LOG").unwrap().to_string();
        assert!(f.contains("ureq=trace"), "{f}");
        // Whatever is asked, the IMAP client's command trace (it shows the
        // LOGIN password) stays off.
        for spec in ["ureq=trace", "trace", "trace,async_imap=trace"] {
            let f = filter(Some(spec), "RUST_LOG").unwrap();
            assert!(
                !f.would_enable("async_imap::imap_stream", &tracing::Level::TRACE),
                "{spec}"
            );
        }
        let f = filter(Some("trace,async_imap=trace"), "RUST_LOG").unwrap();
        assert!(f.would_enable("async_imap::client", &tracing::Level::TRACE));
        let e = filter(Some("loud"), "--log-level").unwrap_err();
        assert!(e.contains("--log-level") && e.contains("debug"), "{e}");
    }

    #[test]
    fn text_values_are_quoted_only_when_needed() {
        assert_eq!(text_value(&Value::from("telegram")), "telegram");
        assert_eq!(text_value(&Value::from("two words")), "\"two words\"");
        assert_eq!(text_value(&Value::from(11u64)), "11");
    }
}
