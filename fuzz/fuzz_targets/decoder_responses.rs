#![no_main]

use panto::ProviderKind;

libfuzzer_sys::fuzz_target!(|data: &[u8]| panto_testkit::fuzz::decoder(ProviderKind::OpenAiResponses, data));
