#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| panto_fuzz::openai_chunk_scan(data));
