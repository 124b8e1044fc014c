//! Entry points for the fuzz targets in `fuzz/` and for the proptests and
//! corpus replay in `std-runtime/tests/hostile_bytes.rs`. Not API.
//!
//! Each function takes untrusted bytes, runs a parser over them and panics
//! when one of the parser's promises breaks; the fuzzer, the proptests and
//! the committed crash inputs all drive these same functions.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hermes_core::{
    ChatRequest, Completion, Model, ModelError, ModelErrorKind, StreamSink, ToolCall, ToolSpec,
};
use serde_json::Value;

use crate::bridge::AsyncBridge;
use crate::client::retry::{delay_before_next, parse_http_date, parse_retry_after};
use crate::tools::{ToolEnv, arguments, build_registry};

/// `Retry-After` and `retry-after-ms`: never a panic, a wait never above
/// the cap, and an HTTP date read back from its own canonical form.
pub fn retry_after(data: &[u8]) {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    let base = Duration::from_millis(500);
    let cap = Duration::from_secs(60);
    for (ms, plain) in [
        (Some(value), None),
        (None, Some(value)),
        (Some(value), Some(value)),
    ] {
        let parsed = parse_retry_after(ms, plain);
        let attempt = u32::try_from(data.len()).unwrap_or(u32::MAX);
        assert!(delay_before_next(attempt, parsed, base, cap) <= cap);
    }
    if let Some(at) = parse_http_date(value) {
        let canonical = imf_fixdate(at);
        // A leap second on the last day of 9999 lands in year 10000, which
        // the parser (rightly) does not read: nothing to read back.
        if canonical.contains(" 10000 ") {
            return;
        }
        assert_eq!(
            parse_http_date(&canonical),
            Some(at),
            "{value:?} → {canonical}"
        );
    }
}

/// Documents (issue 46): arbitrary bytes read as each document kind never
/// panic (the PDF parser's own panics, which `read_file` turns into a
/// refusal, are surfaced here), and a read returns at most the text cap
/// plus its markers.
#[cfg(feature = "documents")]
pub fn documents(data: &[u8]) {
    use crate::documents::{DocumentError, Kind, MAX_TEXT_BYTES, Pages, extract};
    let pages = Pages {
        first: usize::from(data.first().copied().unwrap_or(0) % 4) + 1,
        count: usize::from(data.last().copied().unwrap_or(0)),
    };
    for kind in [Kind::Pdf, Kind::Docx, Kind::Odt, Kind::Xlsx] {
        match extract(kind, data, pages) {
            Ok(doc) => assert!(doc.text.len() <= MAX_TEXT_BYTES + 200, "{kind:?}"),
            Err(DocumentError::Invalid { detail, .. }) => {
                assert_ne!(detail, crate::documents::PARSER_PANICKED, "{kind:?}");
            }
            Err(_) => {}
        }
    }
}

/// Seconds since the epoch as an IMF-fixdate (the weekday is not checked
/// by the parser and is written as `Xxx`).
fn imf_fixdate(secs: u64) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX);
    let rem = secs % 86_400;
    // Howard Hinnant's `civil_from_days`.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let name = usize::try_from(month - 1)
        .ok()
        .and_then(|m| MONTHS.get(m))
        .copied()
        .unwrap_or("Jan");
    format!(
        "Xxx, {day:02} {name} {year:04} {:02}:{:02}:{:02} GMT",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The search backends' HTML scanner and DuckDuckGo's result parser: never
/// a panic, and every hit has an http(s) link.
pub fn search_page(data: &[u8]) {
    let html = String::from_utf8_lossy(data);
    let _ = crate::tools::html_scan::scan(&html);
    for hit in crate::tools::web_search::parse_duckduckgo(data) {
        assert!(hit.url.starts_with("http://") || hit.url.starts_with("https://"));
    }
}

/// `html_to_text`: never a panic, text at most twice the page (each
/// expanding case — a table cell marker, a control character — doubles at
/// most), and the tag scans linear in the page (see `TagEnds`).
pub fn html_to_text(data: &[u8]) {
    let html = String::from_utf8_lossy(data);
    let (text, steps) = crate::tools::html_text::reduce(&html);
    assert!(
        text.len() <= 2 * html.len(),
        "{} bytes of text from {} of HTML",
        text.len(),
        html.len()
    );
    assert!(!text.contains(['\u{1}', '\u{2}']) || html.contains(['\u{1}', '\u{2}']));
    assert!(
        steps <= 7 * html.len() + 7,
        "{steps} scan steps for {} bytes",
        html.len()
    );
}

/// The store's tool-call decoder gives serde's answer on any text, and
/// reads back what the store writes.
pub fn stored_tool_calls(data: &[u8]) {
    let Ok(json) = std::str::from_utf8(data) else {
        return;
    };
    let ours = crate::store::tool_calls::decode(json);
    let serde = serde_json::from_str::<Vec<ToolCall>>(json);
    match (&ours, &serde) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "{json}"),
        (Err(_), Err(_)) => {}
        (a, b) => panic!("{json}: ours {a:?}, serde {b:?}"),
    }
    if let Ok(calls) = ours {
        let written = serde_json::to_string(&calls).unwrap_or_default();
        match crate::store::tool_calls::decode(&written) {
            Ok(back) => assert_eq!(back, calls, "{written}"),
            Err(e) => panic!("cannot read back {written}: {e}"),
        }
    }
}

/// A model that is never called: `delegate_task` needs one to exist.
#[derive(Debug)]
struct NoModel;

impl Model for NoModel {
    fn complete(
        &self,
        _: &ChatRequest<'_>,
        _: &mut dyn StreamSink,
    ) -> Result<Completion, ModelError> {
        Err(ModelError::new(ModelErrorKind::Request, "not for calling"))
    }
}

/// The definitions of every built-in tool, as the model sees them.
pub fn tool_specs() -> &'static [ToolSpec] {
    static SPECS: OnceLock<Vec<ToolSpec>> = OnceLock::new();
    SPECS.get_or_init(|| {
        let bridge = match AsyncBridge::new() {
            Ok(b) => Arc::new(b),
            Err(e) => panic!("cannot start the async bridge: {e}"),
        };
        let env = ToolEnv {
            bridge: Some(bridge),
            delegate_model: Some(Arc::new(NoModel)),
            ..ToolEnv::new(std::env::temp_dir(), PathBuf::new())
        };
        match build_registry(&env, None) {
            Ok(registry) => registry.specs().to_vec(),
            Err(e) => panic!("cannot build the tools: {e}"),
        }
    })
}

/// Whether every number in `v` is a JSON integer that fits in `u32`: the
/// range every built-in tool's integer arguments take.
fn small_integers_only(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.as_u64().is_some_and(|n| n <= u64::from(u32::MAX)),
        Value::Array(items) => items.iter().all(small_integers_only),
        Value::Object(map) => map.values().all(small_integers_only),
        _ => true,
    }
}

/// The model's tool arguments: parsing them into the tool's argument type
/// never panics, and arguments the tool's own JSON schema accepts (with
/// integers in range) are never refused by that parsing — a mismatch
/// between the schema the model is shown and the type the tool reads.
///
/// Input: one byte picks the tool, the rest is the arguments text.
/// `schema_accepts(schema, value)` is a JSON-schema validator (the fuzz
/// target and the proptest use the `jsonschema` crate).
pub fn tool_arguments(data: &[u8], schema_accepts: &dyn Fn(&Value, &Value) -> bool) {
    let specs = tool_specs();
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let Some(spec) = specs.get(usize::from(pick) % specs.len().max(1)) else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let Some(parsed) = arguments::parse(&spec.name, text) else {
        panic!("no argument parser for {}", spec.name);
    };
    if let Err(e) = &parsed {
        let hermes_core::ToolError::Failed(message) = e else {
            panic!("argument error of the wrong kind: {e:?}");
        };
        assert!(message.contains(spec.name.as_str()), "{message}");
    }
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        return;
    };
    if small_integers_only(&value) && schema_accepts(&spec.schema(), &value) {
        // Written out again: duplicate keys (serde_json keeps the last) are
        // not what this property is about.
        let canonical = value.to_string();
        if let Some(Err(e)) = arguments::parse(&spec.name, &canonical) {
            panic!(
                "{} refuses arguments its schema accepts: {canonical}: {e:?}",
                spec.name
            );
        }
    }
}
