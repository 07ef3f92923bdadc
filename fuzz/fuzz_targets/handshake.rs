#![no_main]
// Both ends of the handshake: the first byte says which side the input attacks.
libfuzzer_sys::fuzz_target!(|data: &[u8]| match data.split_first() {
    Some((side, rest)) if side % 2 == 0 => mcapi::fuzzing::handshake_server(rest),
    Some((_, rest)) => mcapi::fuzzing::handshake_client(rest),
    None => {}
});
