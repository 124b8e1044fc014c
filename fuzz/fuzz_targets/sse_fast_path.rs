#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = hermes_core::fuzz_entry::sse_fast_path(data);
});
