//! Log lines for humans: `hermes: warning: the message: the error`, through
//! the terminal writer (never over the spinner or a streamed answer),
//! coloured only where [`crate::term::Caps`] allows.
//!
//! With `RUST_LOG` set, a developer asked for detail: every field is shown.

use std::fmt::{self, Write as _};
use std::io::Write as _;

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::filter::Targets;

use crate::term::{LogWriter, term};

/// Installs the subscriber. Default level: warnings (`error` with `--quiet`).
pub fn init(quiet: bool) {
    use tracing_subscriber::util::SubscriberInitExt as _;
    let _ = subscriber(quiet).try_init();
}

/// The terminal's subscriber, for [`init`] or for a while
/// (`tracing::subscriber::with_default`).
pub fn subscriber(quiet: bool) -> impl Subscriber + Send + Sync + 'static {
    let from_env = std::env::var("RUST_LOG").is_ok_and(|v| !v.is_empty());
    // `target=level` lists (`hermes_runtime=debug,warn`); a filter that does
    // not parse falls back to the default, as before.
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|v| v.parse::<Targets>().ok())
        .unwrap_or_else(|| {
            Targets::new().with_default(if quiet { Level::ERROR } else { Level::WARN })
        });
    Terminal {
        filter,
        format: Human {
            all_fields: from_env,
        },
    }
}

/// Events that pass the filter, each written as one line through the
/// terminal. Spans are not kept: no line shows them. (Not
/// `tracing_subscriber::fmt()`: its span registry made a table of 4,096
/// slots at every start, ≈ 34 k instructions of a 0-turn one-shot, issue
/// 39.)
struct Terminal {
    filter: Targets,
    format: Human,
}

impl Subscriber for Terminal {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.filter
            .would_enable(metadata.target(), metadata.level())
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        // The most verbose level the filter lets through anywhere, which
        // it keeps as it is built.
        tracing_subscriber::Layer::<Self>::max_level_hint(&self.filter)
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        // One id for all: nothing is kept per span.
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        // The writer hands the line to the terminal when dropped.
        let _ = LogWriter::default().write_all(self.format.line(event).as_bytes());
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// The event formatter.
struct Human {
    all_fields: bool,
}

#[derive(Default)]
struct Fields {
    message: String,
    error: Option<String>,
    rest: Vec<(&'static str, String)>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        self.put(field, text);
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.to_owned());
    }
}

impl Fields {
    fn put(&mut self, field: &Field, text: String) {
        match field.name() {
            "message" => self.message = text,
            "error" => self.error = Some(text),
            name => self.rest.push((name, text)),
        }
    }
}

impl Human {
    /// `hermes: warning: the message: the error`, and a newline.
    fn line(&self, event: &Event<'_>) -> String {
        let style = term().err_style();
        let level = *event.metadata().level();
        let label = match level {
            Level::ERROR => style.red("error"),
            Level::WARN => style.yellow("warning"),
            Level::INFO => style.dim("note"),
            _ => style.dim(&level.as_str().to_ascii_lowercase()),
        };
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut line = format!("hermes: {label}: {}", fields.message);
        if let Some(e) = &fields.error {
            let _ = write!(line, ": {e}");
        }
        if self.all_fields && !fields.rest.is_empty() {
            let detail: Vec<String> = fields
                .rest
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect();
            let _ = write!(line, " {}", style.dim(&format!("({})", detail.join(", "))));
        }
        line.push('\n');
        line
    }
}
