#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| mcapi::fuzzing::control_stream(data));
