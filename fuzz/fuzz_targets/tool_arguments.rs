#![no_main]

use std::cell::RefCell;
use std::collections::HashMap;

use serde_json::Value;

thread_local! {
    /// One compiled validator per tool schema.
    static VALIDATORS: RefCell<HashMap<String, jsonschema::Validator>> = RefCell::new(HashMap::new());
}

fn schema_accepts(schema: &Value, value: &Value) -> bool {
    VALIDATORS.with(|cache| {
        let mut cache = cache.borrow_mut();
        let key = schema.to_string();
        if !cache.contains_key(&key) {
            let Ok(validator) = jsonschema::validator_for(schema) else {
                panic!("a tool schema does not compile: {schema}");
            };
            cache.insert(key.clone(), validator);
        }
        cache.get(&key).is_some_and(|v| v.is_valid(value))
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hermes_runtime::fuzz_entry::tool_arguments(data, &schema_accepts);
});
