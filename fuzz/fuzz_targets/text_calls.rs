#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hermes_core::fuzz_entry::text_calls(data);
});
