//! Job authentication of control connections: a challenge-response on the job key, run
//! on every connection before any frame (docs/security.md).
//!
//! ```text
//! client -> server  MAGIC, version, client nonce
//! server -> client  MAGIC, version, server nonce, HMAC(key, "server", version, job, nonces)
//! client -> server  HMAC(key, "client", version, job, nonces)
//! server -> client  one byte: 1 accepted, 0 refused (then closed)
//! ```
//!
//! HMAC-SHA-256; nonces of 32 bytes from the OS; proofs compared in constant time. The
//! labels keep a proof of one side from serving as the other's, the fresh nonces keep a
//! recorded proof from serving again, and the job name and version keep a key shared by
//! two jobs (or two builds) from joining them. On Unix sockets each side also checks that
//! the other runs as the same user (`SO_PEERCRED`).

use super::Stream;
use crate::config::JobKey;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

/// Opens the handshake; not the start of any frame (a frame's length prefix this large is
/// refused by every version), so a node of a build before authentication and one after
/// tell each other apart at once.
const MAGIC: [u8; 8] = *b"MCAPIKEY";
/// Version of this handshake (inside every proof).
const AUTH_VERSION: u32 = 1;
const NONCE: usize = 32;
const PROOF: usize = 32;
/// How long a peer has to complete the whole handshake: an idle or trickling connection
/// holds a thread (and a handshake slot) until then.
pub(super) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// The job's identity: its name and shared key.
#[derive(Clone, Debug)]
pub struct JobAuth {
    job: String,
    key: JobKey,
}

impl JobAuth {
    /// The identity of job `job` with `key`.
    pub fn new(job: &str, key: JobKey) -> JobAuth {
        JobAuth {
            job: job.to_owned(),
            key,
        }
    }

    fn proof(&self, side: &[u8], client: &[u8; NONCE], server: &[u8; NONCE]) -> Hmac<Sha256> {
        // HMAC takes keys of any length.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(self.key.as_bytes())
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        mac.update(b"mcapi control ");
        mac.update(side);
        mac.update(&AUTH_VERSION.to_le_bytes());
        mac.update(&(self.job.len() as u64).to_le_bytes());
        mac.update(self.job.as_bytes());
        mac.update(client);
        mac.update(server);
        mac
    }

    /// The connecting side of the handshake.
    ///
    /// # Errors
    /// `PermissionDenied` when the server is not of this job (another key, another user),
    /// `InvalidData` for a peer that does not speak the handshake, or the socket's errors.
    pub fn client(&self, stream: &mut Stream) -> io::Result<()> {
        let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
        same_user(stream)?;
        let client = nonce()?;
        let mut hello = Vec::with_capacity(MAGIC.len() + 4 + NONCE);
        hello.extend_from_slice(&MAGIC);
        hello.extend_from_slice(&AUTH_VERSION.to_le_bytes());
        hello.extend_from_slice(&client);
        stream.write_all(&hello)?;
        let mut reply = [0u8; 8 + 4 + NONCE + PROOF];
        read_exact_by(stream, &mut reply, deadline)?;
        check_header(&reply)?;
        let server: [u8; NONCE] = reply[12..12 + NONCE].try_into().expect("sized");
        self.proof(b"server", &client, &server)
            .verify_slice(&reply[12 + NONCE..])
            .map_err(|_| refused("the node answering is not of this job (another job key)"))?;
        let proof = self
            .proof(b"client", &client, &server)
            .finalize()
            .into_bytes();
        stream.write_all(&proof)?;
        let mut verdict = [0u8; 1];
        read_exact_by(stream, &mut verdict, deadline)?;
        if verdict[0] != 1 {
            return Err(refused("the node refused our job key"));
        }
        stream.set_read_timeout(None)
    }

    /// The accepting side: `Ok` only for a peer that proved it holds the key (and, on a
    /// Unix socket, runs as this user). A refused peer is told so (one byte) and nothing
    /// else.
    ///
    /// # Errors
    /// Why the peer is refused, or the socket's errors.
    pub fn server(&self, stream: &mut Stream) -> io::Result<()> {
        let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
        same_user(stream)?;
        let mut hello = [0u8; 8 + 4 + NONCE];
        read_exact_by(stream, &mut hello, deadline)?;
        check_header(&hello)?;
        let client: [u8; NONCE] = hello[12..].try_into().expect("sized");
        let server = nonce()?;
        let mut reply = Vec::with_capacity(8 + 4 + NONCE + PROOF);
        reply.extend_from_slice(&MAGIC);
        reply.extend_from_slice(&AUTH_VERSION.to_le_bytes());
        reply.extend_from_slice(&server);
        reply.extend_from_slice(
            &self
                .proof(b"server", &client, &server)
                .finalize()
                .into_bytes(),
        );
        stream.write_all(&reply)?;
        let mut proof = [0u8; PROOF];
        read_exact_by(stream, &mut proof, deadline)?;
        if self
            .proof(b"client", &client, &server)
            .verify_slice(&proof)
            .is_err()
        {
            // Best effort: the connection closes anyway.
            _ = stream.write_all(&[0]);
            return Err(refused("wrong job key"));
        }
        stream.write_all(&[1])?;
        stream.set_read_timeout(None)
    }
}

/// Reads `buf` whole by `deadline`: the handshake's limit holds for the whole exchange, not
/// for each read (a peer sending a byte at a time would otherwise hold on for minutes).
fn read_exact_by(stream: &mut Stream, mut buf: &mut [u8], deadline: Instant) -> io::Result<()> {
    while !buf.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the handshake took too long",
            ));
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(buf) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => buf = &mut buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn refused(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, why.to_owned())
}

fn check_header(bytes: &[u8]) -> io::Result<()> {
    if bytes[..8] != MAGIC {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not an MCAPI control handshake",
        ));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("sized"));
    if version != AUTH_VERSION {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("handshake version {version}, this node speaks {AUTH_VERSION}"),
        ));
    }
    Ok(())
}

fn nonce() -> io::Result<[u8; NONCE]> {
    let mut n = [0u8; NONCE];
    getrandom::fill(&mut n).map_err(|e| io::Error::other(e.to_string()))?;
    Ok(n)
}

/// On a Unix socket, refuses a peer running as another user (the kernel's word for it,
/// taken at connect time). TCP peers have no such word: the key alone decides.
fn same_user(stream: &Stream) -> io::Result<()> {
    let Stream::Unix(s) = stream else {
        return Ok(());
    };
    let cred = nix::sys::socket::getsockopt(s, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(io::Error::from)?;
    let me = nix::unistd::geteuid().as_raw();
    if cred.uid() != me {
        return Err(refused(&format!(
            "peer runs as uid {}, not this user ({me})",
            cred.uid()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    fn auth(job: &str, key: &str) -> JobAuth {
        JobAuth::new(job, JobKey::new(key.as_bytes()).unwrap())
    }

    fn run(client: JobAuth, server: JobAuth) -> (io::Result<()>, io::Result<()>) {
        let (a, b) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || server.server(&mut Stream::Unix(b)));
        let c = client.client(&mut Stream::Unix(a));
        (c, t.join().unwrap())
    }

    #[test]
    fn same_key_and_job_pass_anything_else_fails_both_sides() {
        let (c, s) = run(auth("j", "0123456789abcdef"), auth("j", "0123456789abcdef"));
        assert!(c.is_ok() && s.is_ok(), "{c:?} {s:?}");
        for (client, server) in [
            (auth("j", "0123456789abcdef"), auth("j", "0123456789abcdeX")),
            (auth("j", "0123456789abcdef"), auth("k", "0123456789abcdef")),
        ] {
            let (c, s) = run(client, server);
            // The client sees the server's proof fail first and stops.
            assert_eq!(c.unwrap_err().kind(), io::ErrorKind::PermissionDenied);
            assert!(s.is_err());
        }
    }

    #[test]
    fn a_peer_trickling_bytes_gets_no_more_than_the_whole_limit() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let trickle = std::thread::spawn(move || {
            // Each byte well within the limit, all of them far beyond it.
            for _ in 0..20 {
                std::thread::sleep(Duration::from_millis(50));
                if b.write_all(&[7]).is_err() {
                    break;
                }
            }
        });
        let mut stream = Stream::Unix(a);
        let mut buf = [0u8; 20];
        let limit = Instant::now() + Duration::from_millis(300);
        let e = read_exact_by(&mut stream, &mut buf, limit).unwrap_err();
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ),
            "{e:?}"
        );
        drop(stream);
        trickle.join().unwrap();
    }

    #[test]
    fn a_peer_that_does_not_speak_the_handshake_is_refused() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let t =
            std::thread::spawn(move || auth("j", "0123456789abcdef").server(&mut Stream::Unix(b)));
        a.write_all(&[0x20, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0])
            .unwrap();
        a.write_all(&[0; 32]).unwrap();
        assert_eq!(
            t.join().unwrap().unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }
}
