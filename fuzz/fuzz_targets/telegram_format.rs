#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hermes_gateway::fuzz_entry::telegram_format(data);
});
