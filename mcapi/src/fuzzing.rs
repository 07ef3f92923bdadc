//! Entry points of the fuzz targets (`fuzz/`, run by `scripts/fuzz`): every decoder of what
//! reaches a node from outside the process, fed arbitrary bytes. Each must return (never
//! panic) and allocate no more than its stated bound; what decodes must encode back to the
//! same bytes. Built only with the `fuzzing` feature; not part of the API.

use crate::config::{JobKey, Topology};
use crate::control::{Frame, FrameBytes, JobAuth, Stream};
use crate::semantics::wire::{Context, Tag};
use std::io::Write;
use std::os::unix::net::UnixStream;

/// A control frame's body: decoded, and if it decodes, encoded back byte for byte.
pub fn control_frame(body: &[u8]) {
    if let Ok(frame) = Frame::decode(body) {
        let mut out = FrameBytes::new();
        frame.encode_into(&mut out);
        assert_eq!(&out[..], body, "{frame:?} encodes to other bytes");
    }
}

/// A control connection's bytes, read frame by frame as the server reads them (the length
/// prefix is checked before anything is allocated).
pub fn control_stream(bytes: &[u8]) {
    let mut stream = peer_sending(bytes);
    while stream.recv().is_ok() {}
}

/// The authentication handshake, as the accepting node sees a client that sends `bytes`.
pub fn handshake_server(bytes: &[u8]) {
    let mut stream = peer_sending(bytes);
    assert!(
        auth().server(&mut stream).is_err(),
        "random bytes passed the handshake"
    );
}

/// The handshake as the connecting node sees a server that sends `bytes`.
pub fn handshake_client(bytes: &[u8]) {
    let mut stream = peer_sending(bytes);
    assert!(
        auth().client(&mut stream).is_err(),
        "random bytes passed the handshake"
    );
}

/// A fabric tag (sent by another node: what decodes must encode to the same word, so no
/// two tags mean one thing) and a completion context (ours, handed back by the provider:
/// it only must not panic).
pub fn wire_words(bytes: &[u8]) {
    let mut word = [0u8; 8];
    let n = bytes.len().min(8);
    word[..n].copy_from_slice(&bytes[..n]);
    let w = u64::from_le_bytes(word);
    if let Some(tag) = Tag::decode(w) {
        assert_eq!(tag.encode(), w, "{tag:?}");
    }
    _ = Context::decode(w);
}

/// A topology file's text.
pub fn topology(bytes: &[u8]) {
    if let Ok(text) = std::str::from_utf8(bytes) {
        _ = Topology::parse(text);
    }
}

fn auth() -> JobAuth {
    JobAuth::new(
        "fuzz",
        JobKey::new(b"a key of the fuzzing job").expect("long enough"),
    )
}

/// Our end of a socket pair whose other end sent `bytes` and closed.
fn peer_sending(bytes: &[u8]) -> Stream {
    let (mut theirs, ours) = UnixStream::pair().expect("a socket pair");
    // The socket buffer holds a fuzz input (libFuzzer's default limit is 4 KiB); a longer
    // one is cut, which the decoders see as a connection that ended.
    theirs.set_nonblocking(true).expect("non-blocking");
    _ = theirs.write_all(bytes);
    drop(theirs);
    Stream::Unix(ours)
}
