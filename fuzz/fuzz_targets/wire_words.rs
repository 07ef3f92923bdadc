#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| mcapi::fuzzing::wire_words(data));
