//! The out-of-band channel: one plain TCP connection between client and server, carrying
//! short text lines (parameters, fabric addresses, per-size start and end). It never carries
//! benchmark data.
//!
//! The socket is non-blocking: the benchmark waits for a line while progressing its fabric
//! (manual-progress providers move data only while the CQ is read), and checks for lines now
//! and then while it waits for fabric messages (so a peer can say "stop" or report an error,
//! and a crashed peer is noticed at once from the closed connection).

use crate::error::{Context, Error, Result};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// How long a blocking wait for a line may take before the peer is declared stalled.
pub const LINE_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Oob {
    stream: TcpStream,
    input: Vec<u8>,
    local: SocketAddr,
    peer: SocketAddr,
}

/// A listening server socket.
pub struct Listener {
    listener: TcpListener,
}

impl Listener {
    /// Listens on `port`: on loopback only, or on every interface (IPv6 and IPv4 where the
    /// machine has IPv6, IPv4 only otherwise).
    pub fn bind(port: u16, loopback_only: bool) -> Result<Listener> {
        let candidates: &[IpAddr] = if loopback_only {
            &[IpAddr::V4(Ipv4Addr::LOCALHOST)]
        } else {
            &[
                IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            ]
        };
        let mut last = None;
        for ip in candidates {
            match TcpListener::bind(SocketAddr::new(*ip, port)) {
                Ok(listener) => return Ok(Listener { listener }),
                Err(e) => last = Some(e),
            }
        }
        let e = last.expect("at least one candidate address");
        let hint = if e.kind() == ErrorKind::AddrInUse {
            " (another perftest server may be running: choose another --oob-port)"
        } else {
            ""
        };
        Err(Error::failed(format!(
            "cannot listen on TCP port {port}: {e}{hint}"
        )))
    }

    /// Listens at exactly `addr` (port 0: a free port; see [`Listener::local_addr`]).
    pub fn bind_at(addr: SocketAddr) -> Result<Listener> {
        TcpListener::bind(addr)
            .map(|listener| Listener { listener })
            .map_err(|e| Error::failed(format!("cannot listen on {addr}: {e}")))
    }

    /// The address and port listened at.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        Ok(self.listener.local_addr()?)
    }

    /// Waits for one client (`timeout`: `None` waits forever).
    pub fn accept(self, timeout: Option<Duration>) -> Result<Oob> {
        let start = Instant::now();
        self.listener.set_nonblocking(timeout.is_some())?;
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => return Oob::new(stream),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if timeout.is_some_and(|t| start.elapsed() > t) {
                        return Err(Error::failed(format!(
                            "no client connected within {:?}",
                            timeout.unwrap_or_default()
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("accepting the client's connection"),
            }
        }
    }
}

impl Oob {
    /// Connects to a server; while the connection is refused, retries for up to `retry_for`
    /// (the server may still be starting).
    pub fn connect(host: &str, port: u16, retry_for: Duration) -> Result<Oob> {
        let addrs: Vec<SocketAddr> = (host, port)
            .to_socket_addrs()
            .map_err(|e| Error::failed(format!("cannot resolve server host '{host}': {e}")))?
            .collect();
        let start = Instant::now();
        loop {
            let mut last = None;
            for addr in &addrs {
                match TcpStream::connect_timeout(addr, Duration::from_secs(5)) {
                    Ok(s) => return Oob::new(s),
                    Err(e) => last = Some(e),
                }
            }
            let e = last.ok_or_else(|| Error::failed(format!("'{host}' has no address")))?;
            let retry = matches!(
                e.kind(),
                ErrorKind::ConnectionRefused | ErrorKind::ConnectionReset
            );
            if !retry || start.elapsed() >= retry_for {
                let why = match e.kind() {
                    ErrorKind::ConnectionRefused => {
                        "connection refused: is the perftest server running there \
                         (the same command without a host argument)?"
                            .to_string()
                    }
                    ErrorKind::TimedOut | ErrorKind::WouldBlock => {
                        "timed out: the host does not answer (firewall, wrong address?)".to_string()
                    }
                    _ => e.to_string(),
                };
                return Err(Error::failed(format!(
                    "cannot reach the perftest server at {host} port {port}: {why}"
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn new(stream: TcpStream) -> Result<Oob> {
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        let canonical = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
        Ok(Oob {
            local: canonical(stream.local_addr()?),
            peer: canonical(stream.peer_addr()?),
            stream,
            input: Vec::new(),
        })
    }

    /// The local address of the connection: the interface that routes to the peer.
    pub fn local_ip(&self) -> IpAddr {
        self.local.ip()
    }

    /// The peer's address on the connection.
    pub fn peer_ip(&self) -> IpAddr {
        self.peer.ip()
    }

    /// Sends one line (without the newline).
    pub fn send(&mut self, line: &str) -> Result<()> {
        debug_assert!(!line.contains('\n'));
        let mut data = Vec::with_capacity(line.len() + 1);
        data.extend_from_slice(line.as_bytes());
        data.push(b'\n');
        let mut rest = &data[..];
        let start = Instant::now();
        while !rest.is_empty() {
            match self.stream.write(rest) {
                Ok(0) => return Err(closed()),
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if start.elapsed() > LINE_TIMEOUT {
                        return Err(Error::failed(
                            "the peer stopped reading the bootstrap channel",
                        ));
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(peer_gone(e)),
            }
        }
        Ok(())
    }

    /// A complete line if one has arrived, without blocking.
    ///
    /// # Errors
    /// The connection closed or failed: the peer has gone.
    pub fn try_line(&mut self) -> Result<Option<String>> {
        if let Some(line) = self.take_line() {
            return Ok(Some(line));
        }
        let mut buf = [0u8; 4096];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => return Err(closed()),
                Ok(n) => {
                    self.input.extend_from_slice(&buf[..n]);
                    if n < buf.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(peer_gone(e)),
            }
        }
        Ok(self.take_line())
    }

    fn take_line(&mut self) -> Option<String> {
        let end = self.input.iter().position(|&b| b == b'\n')?;
        let line: Vec<u8> = self.input.drain(..=end).collect();
        Some(String::from_utf8_lossy(&line[..end]).trim().to_owned())
    }

    /// Waits for a line, calling `idle` between checks (to progress the fabric). A line
    /// `error <text>` from the peer becomes an error.
    pub fn line(&mut self, mut idle: impl FnMut() -> Result<()>) -> Result<String> {
        let start = Instant::now();
        let mut spins = 0u64;
        loop {
            if let Some(line) = self.try_line()? {
                return check_peer_error(line);
            }
            idle()?;
            spins += 1;
            if spins > 1000 {
                // Long waits (a peer that is printing, opening its fabric) need not burn a core.
                std::thread::sleep(Duration::from_micros(50));
                if start.elapsed() > LINE_TIMEOUT {
                    return Err(Error::failed(format!(
                        "the peer ({}) sent nothing for {LINE_TIMEOUT:?}",
                        self.peer
                    )));
                }
            }
        }
    }

    /// Waits for a line without progressing anything.
    pub fn line_blocking(&mut self) -> Result<String> {
        self.line(|| Ok(()))
    }

    /// Waits for exactly `want`.
    pub fn expect(&mut self, want: &str, idle: impl FnMut() -> Result<()>) -> Result<()> {
        let got = self.line(idle)?;
        if got == want {
            Ok(())
        } else {
            Err(protocol(&got, want))
        }
    }

    /// Tells the peer why this side gives up (best effort: it may be gone already).
    pub fn report_error(&mut self, e: &Error) {
        let text = e.to_string().replace('\n', " ");
        let _ = self.send(&format!("error {text}"));
    }
}

/// A line `error <text>` from the peer becomes an error; others pass through.
pub fn check_peer_error(line: String) -> Result<String> {
    match line.strip_prefix("error ") {
        Some(text) => Err(Error::failed(format!("the peer failed: {text}"))),
        None => Ok(line),
    }
}

/// An unexpected line on the bootstrap channel.
pub fn protocol(got: &str, want: &str) -> Error {
    Error::failed(format!(
        "bootstrap protocol: expected '{want}', the peer sent '{got}' (are both sides the same perftest version?)"
    ))
}

fn closed() -> Error {
    Error::failed("the peer closed the bootstrap connection (did it exit or crash?)")
}

fn peer_gone(e: std::io::Error) -> Error {
    Error::failed(format!("bootstrap connection to the peer lost: {e}"))
}

/// Hex text of a fabric address.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Bytes of a hex fabric address.
pub fn unhex(s: &str) -> Result<Vec<u8>> {
    let bad = || Error::failed(format!("malformed fabric address from the peer: '{s}'"));
    if s.len() & 1 == 1 {
        return Err(bad());
    }
    (0..s.len() / 2)
        .map(|i| {
            u8::from_str_radix(s.get(2 * i..2 * i + 2).ok_or_else(bad)?, 16).map_err(|_| bad())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let a = vec![0u8, 1, 0xab, 0xff];
        assert_eq!(unhex(&hex(&a)).unwrap(), a);
        assert!(unhex("abc").is_err());
        assert!(unhex("zz").is_err());
    }

    #[test]
    fn lines_over_loopback() {
        let listener = Listener::bind(0, true).unwrap();
        let port = listener.listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let mut s = listener.accept(Some(Duration::from_secs(10))).unwrap();
            let l = s.line_blocking().unwrap();
            s.send(&format!("echo {l}")).unwrap();
            s.report_error(&Error::failed("boom"));
        });
        let mut c = Oob::connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
        assert_eq!(c.local_ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(c.peer_ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
        c.send("hello").unwrap();
        assert_eq!(c.line_blocking().unwrap(), "echo hello");
        let e = c.line_blocking().unwrap_err().to_string();
        assert!(e.contains("boom"), "{e}");
        server.join().unwrap();
        let e = c.line_blocking().unwrap_err().to_string();
        assert!(e.contains("closed"), "{e}");
    }

    #[test]
    fn bound_at_a_free_port() {
        let listener = Listener::bind_at("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        assert_ne!(addr.port(), 0);
        let c = Oob::connect("127.0.0.1", addr.port(), Duration::from_secs(5)).unwrap();
        let s = listener.accept(Some(Duration::from_secs(10))).unwrap();
        assert_eq!(s.peer, c.local);
    }

    #[test]
    fn refused_connection_is_explained() {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let e = Oob::connect("127.0.0.1", port, Duration::ZERO)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("server") && e.contains("refused"), "{e}");
    }
}
