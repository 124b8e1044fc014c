#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hermes_runtime::fuzz_entry::documents(data);
});
