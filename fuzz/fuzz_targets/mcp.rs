#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| panto_testkit::fuzz::mcp(data));
