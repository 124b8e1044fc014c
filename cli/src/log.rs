//! Log lines for humans: `hermes: warning: the message: the error`, through
//! the terminal writer (never over the spinner or a streamed answer),
//! coloured only where [`crate::term::Caps`] allows.
//!
//! With `RUST_LOG` set, a developer asked for detail: every field is shown.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;

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
    tracing_subscriber::fmt()
        .with_writer(LogWriter::default)
        .event_format(Human {
            all_fields: from_env,
        })
        .finish()
        .with(filter)
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

impl<S, N> FormatEvent<S, N> for Human
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
        writeln!(w, "{line}")
    }
}
