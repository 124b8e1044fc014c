//! Hostile bytes into the runtime's parsers, on stable: proptests for the
//! invariants the fuzz targets check (`fuzz/`, nightly), and a replay of the
//! committed seeds and crash inputs (`fuzz/seeds/`, `fuzz/regressions/`).
//! Both call the same `hermes_runtime::fuzz_entry` functions as the targets.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cell::RefCell;
use std::collections::HashMap;

use hermes_runtime::fuzz_entry;
use hermes_tests::fuzz_inputs::replay;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};

thread_local! {
    static VALIDATORS: RefCell<HashMap<String, jsonschema::Validator>> = RefCell::new(HashMap::new());
}

/// The JSON-schema check the `tool_arguments` target uses too.
fn schema_accepts(schema: &Value, value: &Value) -> bool {
    VALIDATORS.with(|cache| {
        let mut cache = cache.borrow_mut();
        let key = schema.to_string();
        let validator = cache
            .entry(key)
            .or_insert_with(|| jsonschema::validator_for(schema).expect("tool schemas compile"));
        validator.is_valid(value)
    })
}

#[test]
fn committed_fuzz_inputs_still_pass() {
    replay("retry_after", fuzz_entry::retry_after);
    replay("html_to_text", fuzz_entry::html_to_text);
    replay("stored_tool_calls", fuzz_entry::stored_tool_calls);
    #[cfg(feature = "documents")]
    replay("documents", fuzz_entry::documents);
    replay("tool_arguments", |d| {
        fuzz_entry::tool_arguments(d, &schema_accepts);
    });
}

/// A value of the schema's type, mostly inside its bounds.
fn value_for(schema: &Value, rng: &mut StdRng) -> Value {
    if let Some(options) = schema["enum"].as_array() {
        return options[rng.random_range(0..options.len())].clone();
    }
    match schema["type"].as_str().unwrap_or("string") {
        "integer" => {
            let min = schema["minimum"].as_u64().unwrap_or(0);
            let max = schema["maximum"]
                .as_u64()
                .unwrap_or(u64::from(u32::MAX))
                .max(min);
            json!(match rng.random_range(0..4) {
                0 => min,
                1 => max,
                _ => rng.random_range(min..=max),
            })
        }
        "number" => json!(rng.random_range(0..1000)),
        "boolean" => json!(rng.random_bool(0.5)),
        "array" => {
            let n = rng.random_range(0..4);
            Value::Array((0..n).map(|_| value_for(&schema["items"], rng)).collect())
        }
        "object" => object_for(schema, rng),
        _ => {
            const PIECES: &[&str] = &[
                "a", "é", "中", "🚀", " ", "\n", "\"", "\\", "../", "/", "\u{0}",
            ];
            let n = rng.random_range(0..6);
            json!(
                (0..n)
                    .map(|_| PIECES[rng.random_range(0..PIECES.len())])
                    .collect::<String>()
            )
        }
    }
}

/// An object with every required property, some optional ones, and now and
/// then a property the schema does not name.
fn object_for(schema: &Value, rng: &mut StdRng) -> Value {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut out = serde_json::Map::new();
    if let Some(props) = schema["properties"].as_object() {
        for (name, prop) in props {
            if required.contains(&name.as_str()) || rng.random_bool(0.5) {
                out.insert(name.clone(), value_for(prop, rng));
            }
        }
    }
    if rng.random_bool(0.2) {
        out.insert("unexpected".into(), json!(1));
    }
    Value::Object(out)
}

#[test]
fn generated_arguments_mostly_satisfy_their_schema() {
    // Otherwise the "never refused" property below would hold vacuously.
    let specs = fuzz_entry::tool_specs();
    assert!(specs.len() >= 9, "{specs:?}");
    for spec in specs {
        let mut rng = StdRng::seed_from_u64(1);
        let schema = spec.schema();
        let valid = (0..200)
            .filter(|_| schema_accepts(&schema, &object_for(&schema, &mut rng)))
            .count();
        assert!(valid >= 50, "{}: {valid} of 200 valid", spec.name);
    }
}

/// HTML-ish text: tags, entities, quotes, stray brackets, multi-byte text.
fn html() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("<p>"),
            Just("</p>"),
            Just("<td>"),
            Just("<li>"),
            Just("<pre>"),
            Just("</pre>"),
            Just("<script>"),
            Just("</script"),
            Just("<!--"),
            Just("-->"),
            Just("<a href=\""),
            Just("\">"),
            Just("'"),
            Just("<"),
            Just(">"),
            Just("&amp;"),
            Just("&#x1F680;"),
            Just("&#1;"),
            Just("&"),
            Just(";"),
            Just("中文"),
            Just("é"),
            Just(" "),
            Just("\n"),
            Just("\u{1}"),
            Just("\u{2}"),
            Just("text"),
        ],
        0..40,
    )
    .prop_map(|parts| parts.concat())
}

/// Retry-After values: numbers, and HTTP dates with any component.
fn retry_after_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<f64>().prop_map(|f| f.to_string()),
        any::<i64>().prop_map(|i| i.to_string()),
        (
            any::<i64>(),
            any::<u8>(),
            0..14usize,
            any::<u8>(),
            any::<u8>(),
            any::<u8>()
        )
            .prop_map(|(year, day, month, h, m, s)| {
                let months = [
                    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                    "Dec", "Foo", "",
                ];
                format!("Sun, {day} {} {year} {h}:{m}:{s} GMT", months[month])
            }),
        (
            0..=9999u16,
            1..=31u8,
            0..12usize,
            0..24u8,
            0..60u8,
            0..=60u8
        )
            .prop_map(|(year, day, month, h, m, s)| {
                let months = [
                    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                    "Dec",
                ];
                format!(
                    "Mon, {day:02} {} {year:04} {h:02}:{m:02}:{s:02} GMT",
                    months[month]
                )
            }),
        "[ -~]{0,40}",
    ]
}

/// Stored tool-call JSON: canonical arrays and damaged or reordered text.
fn stored_calls() -> impl Strategy<Value = String> {
    let s = "([a-z\"\\\\{}\\[\\]:,é🚀]|\\\\u0041|\\\\n){0,8}";
    prop_oneof![
        proptest::collection::vec((s, s, s), 1..4).prop_map(|calls| {
            let calls: Vec<_> = calls
                .into_iter()
                .map(|(id, name, args)| hermes_core::ToolCall::new(id, name, args))
                .collect();
            serde_json::to_string(&calls).unwrap()
        }),
        (s, s).prop_map(|(a, b)| format!(
            "[ {{\"type\":\"function\",\"id\":\"{a}\",\"function\":{{\"arguments\":\"{b}\",\"name\":\"n\"}}}}]"
        )),
        "[\\[\\]{}\":, a-z]{0,40}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn retry_after_never_panics_and_dates_read_back(value in retry_after_value()) {
        fuzz_entry::retry_after(value.as_bytes());
    }

    #[test]
    fn html_reduces_in_bounded_space_and_linear_time(page in html()) {
        fuzz_entry::html_to_text(page.as_bytes());
    }

    #[test]
    fn search_pages_scan_without_a_panic(page in html()) {
        fuzz_entry::search_page(page.as_bytes());
    }

    #[test]
    fn stored_tool_calls_decode_like_serde(json in stored_calls()) {
        fuzz_entry::stored_tool_calls(json.as_bytes());
    }

    #[test]
    fn arguments_the_schema_accepts_are_never_refused(tool in any::<u8>(), seed in any::<u64>()) {
        let specs = fuzz_entry::tool_specs();
        let spec = &specs[usize::from(tool) % specs.len()];
        let mut rng = StdRng::seed_from_u64(seed);
        let args = object_for(&spec.schema(), &mut rng);
        let mut input = vec![tool];
        input.extend_from_slice(args.to_string().as_bytes());
        fuzz_entry::tool_arguments(&input, &schema_accepts);
    }

    #[test]
    fn arbitrary_argument_text_is_refused_cleanly(tool in any::<u8>(), text in "[{}\\[\\]\":, a-z0-9.-]{0,60}") {
        let mut input = vec![tool];
        input.extend_from_slice(text.as_bytes());
        fuzz_entry::tool_arguments(&input, &schema_accepts);
    }
}

#[cfg(feature = "documents")]
proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The committed document seeds, damaged: a byte run overwritten or
    /// the file cut short, never panics the readers or passes their caps.
    #[test]
    fn damaged_documents_are_refused_or_read_within_the_caps(
        seed in 0usize..8,
        at in any::<prop::sample::Index>(),
        cut in any::<bool>(),
        junk in prop::collection::vec(any::<u8>(), 1..16),
    ) {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/documents");
        let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|f| f.unwrap().path()).collect();
        files.sort();
        let mut data = std::fs::read(&files[seed % files.len()]).unwrap();
        let i = at.index(data.len());
        if cut {
            data.truncate(i);
        } else {
            let end = (i + junk.len()).min(data.len());
            data[i..end].copy_from_slice(&junk[..end - i]);
        }
        fuzz_entry::documents(&data);
    }
}
