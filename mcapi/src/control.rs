//! The control plane: how nodes find each other, answer lookups and notice dead peers.
//!
//! Each node serves one socket: a thread sleeps in `accept`, and a thread per connected peer
//! in `read`, so a node whose application is busy computing still answers, and the data path
//! never waits on them.
//!
//! - One host (no topology): a Unix socket `<runtime_dir>/<job>/d<domain>n<node>.sock`. The
//!   socket file is the registry entry: a file left by a crashed process refuses connections
//!   and is replaced; a live one means the node id is taken.
//! - Several hosts: TCP on the host and port the topology gives for the node, listening on
//!   that address only (not every interface).
//! - Under a PMIx launcher (mpirun, `srun --mpi=pmix`): TCP on an ephemeral port of this
//!   host's address (`launcher::control_ip`), published in the launcher's PMIx server; a
//!   peer's address is looked up there until the caller's deadline.
//!
//! Every connection first passes the job's key handshake ([`JobAuth`]); the server then
//! takes a Hello and, once it welcomed one, other requests. A connection that fails either
//! step is closed before the handler sees anything of it. The directories of the Unix
//! sockets are private to the user (`job_dir`), the sockets mode 0600.
//!
//! Frames are a little-endian `u32` length followed by the bytes of a [`Frame`] (format and
//! versioning: [`frame`]). Requests are answered in order on the connection they came on. A
//! peer that keeps its connection open is alive: end-of-file on it means the process died or
//! finalized.

mod auth;
mod frame;
mod job_dir;

pub(crate) use job_dir::remove_unused as remove_unused_job_dir;

use crate::config::{Bootstrap, Config};
use crate::launcher;
use crate::semantics::Status;
pub use auth::JobAuth;
pub(crate) use frame::FrameBytes;
pub use frame::{ChannelAttributes, ChannelOp, ConnectEnd, Frame, PROTOCOL_VERSION};
use frame::{DecodeError, MAX_FRAME};
use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The peer connections of a server, by id: each leaves the table (and closes its handle)
/// when its thread ends, so nothing of a closed connection stays open.
type Connections = Arc<Mutex<ConnTable>>;

#[derive(Default)]
struct ConnTable {
    next_id: u64,
    conns: BTreeMap<u64, Conn>,
}

struct Conn {
    /// A second handle on the socket, to shut it down (a slow handshake evicted, the server
    /// stopping).
    handle: Stream,
    /// When its key handshake began, while it lasts.
    handshake_since: Option<Instant>,
    /// Shut down to make room for a newer handshake; its thread is ending.
    evicted: bool,
    thread: Option<JoinHandle<()>>,
}

impl ConnTable {
    /// Threads of connections not past their handshake: pending, or evicted and ending.
    fn handshake_threads(&self) -> usize {
        self.conns
            .values()
            .filter(|c| c.handshake_since.is_some())
            .count()
    }

    /// Makes room for one more handshake: at [`MAX_HANDSHAKES`] pending, the oldest one is
    /// shut down (its thread then ends). A real node, whose handshake takes a round trip, is
    /// never the oldest for long; a flood of idle connections costs at most twice that many
    /// threads (the acceptor waits for evicted ones to end: see `accept_loop`).
    fn make_room_for_a_handshake(&mut self) {
        let pending = || {
            self.conns
                .iter()
                .filter(|(_, c)| c.handshake_since.is_some() && !c.evicted)
        };
        if pending().count() < MAX_HANDSHAKES {
            return;
        }
        let oldest = pending()
            .min_by_key(|(_, c)| c.handshake_since)
            .map(|(&id, _)| id);
        if let Some(oldest) = oldest.and_then(|id| self.conns.get_mut(&id)) {
            log::info!(
                "control connection closed: the oldest of {MAX_HANDSHAKES} pending handshakes"
            );
            oldest.handle.shutdown();
            oldest.evicted = true;
        }
    }
}

/// Connections in their key handshake at once (see [`ConnTable::make_room_for_a_handshake`]).
const MAX_HANDSHAKES: usize = 64;

/// Longest pause of the acceptor when accepting fails (out of file descriptors): it backs
/// off instead of spinning, and accepts again as soon as descriptors are free.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_millis(200);

/// The job's identity for `config`: its configured key, else (one host) the key generated
/// in the job's private directory.
///
/// # Errors
/// Why the node cannot start, to log: a job across hosts without a configured key, or a
/// job directory or key file that is not private to this user.
pub fn job_auth(config: &Config) -> Result<JobAuth, String> {
    if let Some(key) = &config.job_key {
        return Ok(JobAuth::new(&config.job, key.clone()));
    }
    if config.bootstrap == Bootstrap::Pmix {
        return Ok(JobAuth::new(&config.job, launcher::job_key(&config.job)?));
    }
    if !config.single_host() {
        return Err("a job across hosts needs a job key: set MCAPI_JOB_KEY, or \
                    MCAPI_JOB_KEY_FILE to a file of mode 0600, the same on every host \
                    (docs/security.md)"
            .into());
    }
    let dir = job_dir::private_job_dir(&config.runtime_dir, &config.job)?;
    Ok(JobAuth::new(&config.job, job_dir::job_key(&dir)?))
}

/// Where a node's control socket is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rendezvous {
    /// A Unix socket path (every node on this host).
    Unix(PathBuf),
    /// A TCP host and port (from the topology).
    Tcp(String, u16),
    /// A key in the launcher's PMIx server, whose value is the TCP address.
    Pmix(String),
}

impl Rendezvous {
    /// The rendezvous of `<domain, node>` under `config`; `None` when a topology is in use
    /// and does not list the node.
    pub fn of(config: &Config, domain: u32, node: u32) -> Option<Rendezvous> {
        if config.bootstrap == Bootstrap::Pmix {
            return match launcher::node_key(&config.job, domain, node) {
                Ok(key) => Some(Rendezvous::Pmix(key)),
                Err(why) => {
                    log::error!("node <{domain}, {node}>: {why}");
                    None
                }
            };
        }
        match &config.topology {
            Some(t) => t
                .get(domain, node)
                .map(|e| Rendezvous::Tcp(e.host.clone(), e.port)),
            None => Some(Rendezvous::Unix(
                config
                    .runtime_dir
                    .join(&config.job)
                    .join(format!("d{domain}n{node}.sock")),
            )),
        }
    }
}

/// A connected control stream (either kind).
#[derive(Debug)]
pub enum Stream {
    /// Same host.
    Unix(UnixStream),
    /// Across hosts.
    Tcp(TcpStream),
}

impl Stream {
    /// Connects to `to`, failing after `timeout`.
    ///
    /// # Errors
    /// The peer is not listening (not started yet, or gone) or unreachable.
    pub fn connect(to: &Rendezvous, timeout: Duration) -> io::Result<Stream> {
        match to {
            Rendezvous::Unix(path) => UnixStream::connect(path).map(Stream::Unix),
            // Resolved by `connect_raw`, which has the deadline to wait for the publish.
            Rendezvous::Pmix(key) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{key}: not resolved"),
            )),
            Rendezvous::Tcp(host, port) => {
                let mut last =
                    io::Error::new(io::ErrorKind::NotFound, format!("{host}: no address"));
                for addr in (host.as_str(), *port).to_socket_addrs()? {
                    match TcpStream::connect_timeout(&addr, timeout) {
                        Ok(s) => {
                            s.set_nodelay(true)?;
                            notice_silent_death(&s);
                            return Ok(Stream::Tcp(s));
                        }
                        Err(e) => last = e,
                    }
                }
                Err(last)
            }
        }
    }

    /// Sets (or, `None`, clears) the read timeout.
    ///
    /// # Errors
    /// A zero duration.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_read_timeout(timeout),
            Stream::Tcp(s) => s.set_read_timeout(timeout),
        }
    }

    /// Another handle to the same socket.
    ///
    /// # Errors
    /// Out of file descriptors.
    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
        })
    }

    /// Whether the peer has closed the connection (checked without blocking; the peer never
    /// sends unsolicited data, so anything but "would block" means it is gone).
    pub fn is_closed(&self) -> bool {
        let mut probe = [0u8; 1];
        let set = |nb: bool| match self {
            Stream::Unix(s) => s.set_nonblocking(nb),
            Stream::Tcp(s) => s.set_nonblocking(nb),
        };
        if set(true).is_err() {
            return true;
        }
        let r = match self {
            Stream::Unix(s) => (&*s).read(&mut probe),
            Stream::Tcp(s) => (&*s).read(&mut probe),
        };
        // Left non-blocking, the next call's read fails with WouldBlock and counts as the
        // connection's end: the same answer this probe would give a broken socket.
        _ = set(false);
        !matches!(r, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Shuts both directions down, waking any reader.
    pub fn shutdown(&self) {
        // A socket already shut or closed by the peer has nothing left to wake.
        _ = match self {
            Stream::Unix(s) => s.shutdown(std::net::Shutdown::Both),
            Stream::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }

    /// Writes one frame.
    ///
    /// # Errors
    /// The peer is gone, or the frame is larger than a peer accepts (`InvalidInput`).
    pub fn send(&mut self, frame: &Frame) -> io::Result<()> {
        let mut buf = FrameBytes::from_slice(&[0; 4]);
        frame.encode_into(&mut buf);
        let len = buf.len() - 4;
        if len > MAX_FRAME {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "oversized control frame",
            ));
        }
        buf[..4].copy_from_slice(&(len as u32).to_le_bytes());
        self.write_all(&buf)?;
        self.flush()
    }

    /// Reads one frame.
    ///
    /// # Errors
    /// End of file (peer gone), timeout, or a malformed, oversized or other-version frame
    /// (`InvalidData`).
    pub fn recv(&mut self) -> io::Result<Frame> {
        let body = self.recv_body()?;
        Frame::decode(&body).map_err(|e| {
            let why = match e {
                DecodeError::Malformed => "malformed control frame".to_string(),
                DecodeError::Version(v) => {
                    format!("control protocol version {v}, this node speaks {PROTOCOL_VERSION}")
                }
            };
            io::Error::new(io::ErrorKind::InvalidData, why)
        })
    }

    /// Reads one frame's body. The length is checked before anything is allocated or read,
    /// so a garbage prefix costs nothing and leaves the rest unread.
    fn recv_body(&mut self) -> io::Result<FrameBytes> {
        let mut len = [0u8; 4];
        self.read_exact(&mut len)?;
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_FRAME {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "oversized control frame",
            ));
        }
        let mut body = FrameBytes::from_elem(0, len);
        self.read_exact(&mut body)?;
        Ok(body)
    }

    /// Sends `request` and waits for the answer.
    ///
    /// # Errors
    /// As [`Stream::send`] and [`Stream::recv`].
    pub fn call(&mut self, request: &Frame) -> io::Result<Frame> {
        self.send(request)?;
        self.recv()
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.flush(),
            Stream::Tcp(s) => s.flush(),
        }
    }
}

/// What the node answers on its control plane.
pub trait Handler: Send + Sync + 'static {
    /// Answers one request from the peer `peer` (its Hello, once received).
    fn handle(&self, peer: Option<(u32, u32)>, request: &Frame) -> Frame;
    /// The connection of run `incarnation` of node `peer` ended: that run died or
    /// finalized.
    fn peer_gone(&self, peer: (u32, u32), incarnation: u64);
}

/// Why a control server could not start.
#[derive(Debug)]
pub enum StartError {
    /// A live node already serves this `<domain, node>` in this job.
    NodeTaken,
    /// The topology does not list this node.
    NotInTopology,
    /// The job directory is not private to this user (the reason).
    Unsafe(String),
    /// Socket errors.
    Io(io::Error),
}

/// Keepalive probes after 5 s of silence, 1 s apart, 5 of them; sent data unacknowledged
/// for 10 s: a TCP control connection to a host that died without closing it (power,
/// cable, partition) ends within about 10 s, which is how a node learns that a peer on
/// another host is gone. Best effort: a socket that refuses keeps the kernel's defaults.
fn notice_silent_death(s: &TcpStream) {
    use nix::sys::socket::{setsockopt, sockopt};
    let set = || -> nix::Result<()> {
        setsockopt(s, sockopt::KeepAlive, &true)?;
        setsockopt(s, sockopt::TcpKeepIdle, &5)?;
        setsockopt(s, sockopt::TcpKeepInterval, &1)?;
        setsockopt(s, sockopt::TcpKeepCount, &5)?;
        setsockopt(s, sockopt::TcpUserTimeout, &10_000)
    };
    if let Err(e) = set() {
        log::debug!("control connection: keepalive not set: {e}");
    }
}

/// A node's control server: a thread accepting connections, one thread per connected peer.
/// Dropping it stops every thread and removes the socket file.
pub struct ControlServer {
    stop: Arc<AtomicBool>,
    rendezvous: Rendezvous,
    /// Where the acceptor is woken from (the bound address for TCP).
    wake: Rendezvous,
    /// The listening socket (a duplicate of the acceptor's): shut down to wake it, with no
    /// path to reach (a socket file may be gone).
    listening: std::os::fd::OwnedFd,
    /// The Unix socket file this server bound (device, inode): removed only if it is still
    /// that one, never a successor's.
    socket_file: Option<(u64, u64)>,
    acceptor: Option<JoinHandle<()>>,
    connections: Connections,
}

/// Under PMIx: binds an ephemeral port of this host's control address and publishes it
/// under `key`, unless a live node of the job (one that proves it holds the job key)
/// already answers at the address published there.
fn bind_published(config: &Config, key: &str, auth: &JobAuth) -> Result<Listener, StartError> {
    let io_err = |why: String| StartError::Io(io::Error::other(why));
    let now = Instant::now();
    if let Some(addr) = launcher::lookup_node(key, Some(now)).map_err(io_err)? {
        // Anyone may listen on a port a dead node left: only the handshake tells.
        let live = TcpStream::connect_timeout(&addr, Duration::from_secs(1))
            .is_ok_and(|s| auth.client(&mut Stream::Tcp(s)).is_ok());
        if live {
            return Err(StartError::NodeTaken);
        }
        // Left by a run that died: ours replaces it.
        launcher::unpublish_node(key);
    }
    let ip = launcher::control_ip(config).map_err(io_err)?;
    let listener =
        TcpListener::bind((ip, 0)).map_err(|e| io_err(format!("cannot listen on {ip}: {e}")))?;
    let addr = listener.local_addr().map_err(StartError::Io)?;
    launcher::publish_node(key, addr).map_err(io_err)?;
    Ok(Listener::Tcp(listener))
}

impl ControlServer {
    /// Binds `<domain, node>`'s rendezvous and starts serving `handler` to the peers that
    /// prove they are of job `auth`.
    ///
    /// # Errors
    /// [`StartError::NodeTaken`] if a live node already holds the address,
    /// [`StartError::Unsafe`] for a job directory others could write into.
    pub fn start(
        config: &Config,
        domain: u32,
        node: u32,
        handler: Arc<dyn Handler>,
        auth: Arc<JobAuth>,
    ) -> Result<ControlServer, StartError> {
        let rendezvous = if config.bootstrap == Bootstrap::Pmix {
            // The launcher's reason, rather than "not in the topology".
            let key = launcher::node_key(&config.job, domain, node)
                .map_err(|why| StartError::Io(io::Error::other(why)))?;
            Rendezvous::Pmix(key)
        } else {
            Rendezvous::of(config, domain, node).ok_or(StartError::NotInTopology)?
        };
        if let Rendezvous::Unix(_) = rendezvous {
            job_dir::private_job_dir(&config.runtime_dir, &config.job)
                .map_err(StartError::Unsafe)?;
        }
        let listener = match &rendezvous {
            Rendezvous::Pmix(key) => bind_published(config, key, &auth)?,
            other => bind(other)?,
        };
        let (wake, listening, socket_file) = match (&listener, &rendezvous) {
            (Listener::Unix(l), Rendezvous::Unix(path)) => (
                rendezvous.clone(),
                l.try_clone().map_err(StartError::Io)?.into(),
                file_identity(path),
            ),
            (Listener::Unix(l), _) => (
                rendezvous.clone(),
                l.try_clone().map_err(StartError::Io)?.into(),
                None,
            ),
            (Listener::Tcp(l), _) => {
                let a = l.local_addr().map_err(StartError::Io)?;
                let dup = l.try_clone().map_err(StartError::Io)?.into();
                (Rendezvous::Tcp(a.ip().to_string(), a.port()), dup, None)
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let connections: Connections = Arc::default();
        let acceptor = {
            let (stop, connections) = (stop.clone(), connections.clone());
            std::thread::Builder::new()
                .name(format!("mcapi-ctl-{domain}.{node}"))
                .spawn(move || accept_loop(listener, stop, connections, handler, auth))
                .map_err(StartError::Io)?
        };
        Ok(ControlServer {
            stop,
            rendezvous,
            wake,
            listening,
            socket_file,
            acceptor: Some(acceptor),
            connections,
        })
    }

    /// Where this server listens.
    #[cfg(test)]
    pub fn rendezvous(&self) -> &Rendezvous {
        &self.rendezvous
    }

    /// The address and port the server is bound to (TCP only).
    #[cfg(test)]
    pub fn bound(&self) -> &Rendezvous {
        &self.wake
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let (Rendezvous::Unix(path), Some(bound)) = (&self.rendezvous, self.socket_file) {
            // First, while we still listen: a successor starting now binds a fresh file
            // (ours would refuse it, or be taken for stale and replaced, and removing it
            // later would remove the successor's). Only if it is still the file we bound.
            if file_identity(path) == Some(bound) {
                _ = std::fs::remove_file(path);
            }
        }
        // Wake the acceptor: shut its socket down (accept fails at once), and as a
        // fallback connect to the address it is bound to. It sees `stop` first.
        _ = nix::sys::socket::shutdown(
            std::os::fd::AsRawFd::as_raw_fd(&self.listening),
            nix::sys::socket::Shutdown::Both,
        );
        if let Rendezvous::Tcp(..) = self.wake {
            _ = Stream::connect(&self.wake, Duration::from_millis(200));
        }
        // The threads catch nothing and end on their sockets' errors; a join error would
        // only repeat a panic already printed.
        if let Some(t) = self.acceptor.take() {
            _ = t.join();
        }
        let conns = std::mem::take(
            &mut self
                .connections
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .conns,
        );
        for c in conns.values() {
            c.handle.shutdown();
        }
        for c in conns.into_values() {
            // The node's last handle may go on a connection's own thread (a frame handled
            // while the application dropped it): that one is left to end by itself.
            if let Some(t) = c
                .thread
                .filter(|t| t.thread().id() != std::thread::current().id())
            {
                _ = t.join();
            }
        }
        if let Rendezvous::Pmix(key) = &self.rendezvous {
            launcher::unpublish_node(key);
        }
        if let Rendezvous::Unix(path) = &self.rendezvous {
            // The job's directory goes with its last node (a no-op while others remain).
            if let Some(dir) = path.parent() {
                _ = std::fs::remove_dir(dir);
            }
        }
    }
}

enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

/// The device and inode of the file at `path`, if there is one.
fn file_identity(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// Binds the socket; the caller made its directory private. The socket file is made mode
/// 0600 as well (the directory already keeps others out; this keeps them out of a socket
/// moved elsewhere too).
fn bind(to: &Rendezvous) -> Result<Listener, StartError> {
    match to {
        Rendezvous::Pmix(_) => unreachable!("bound by bind_published"),
        Rendezvous::Unix(path) => {
            let listener = match UnixListener::bind(path) {
                Ok(l) => l,
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                    // A live node answers; a file left by a crashed process refuses.
                    if UnixStream::connect(path).is_ok() {
                        return Err(StartError::NodeTaken);
                    }
                    std::fs::remove_file(path).map_err(StartError::Io)?;
                    UnixListener::bind(path).map_err(StartError::Io)?
                }
                Err(e) => return Err(StartError::Io(e)),
            };
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(StartError::Io)?;
            Ok(Listener::Unix(listener))
        }
        // The address the topology names, and only it: a node meant for one network is not
        // reachable from the others.
        Rendezvous::Tcp(host, port) => {
            let addrs = (host.as_str(), *port)
                .to_socket_addrs()
                .map_err(|e| StartError::Io(io::Error::new(e.kind(), format!("{host}: {e}"))))?;
            let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{host}: no address"));
            for addr in addrs {
                match TcpListener::bind(addr) {
                    Ok(l) => return Ok(Listener::Tcp(l)),
                    Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                        return Err(StartError::NodeTaken)
                    }
                    Err(e) => {
                        last = io::Error::new(
                            e.kind(),
                            format!("cannot listen on {addr} (an address of this host?): {e}"),
                        )
                    }
                }
            }
            Err(StartError::Io(last))
        }
    }
}

fn accept_loop(
    listener: Listener,
    stop: Arc<AtomicBool>,
    connections: Connections,
    handler: Arc<dyn Handler>,
    auth: Arc<JobAuth>,
) {
    let mut backoff = Duration::ZERO;
    loop {
        let stream = match &listener {
            Listener::Unix(l) => l.accept().map(|(s, _)| Stream::Unix(s)),
            Listener::Tcp(l) => l.accept().map(|(s, _)| {
                // A latency hint: without it the connection still works.
                _ = s.set_nodelay(true);
                notice_silent_death(&s);
                Stream::Tcp(s)
            }),
        };
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let stream = match stream {
            Ok(s) => {
                backoff = Duration::ZERO;
                s
            }
            Err(e) => {
                // Out of descriptors (EMFILE, ENFILE) or memory: the connection waits in the
                // backlog; pause rather than spin on the same error.
                if backoff.is_zero() {
                    log::warn!("control server: accept failed: {e}; backing off");
                }
                backoff = (backoff * 2).clamp(Duration::from_millis(5), ACCEPT_BACKOFF_MAX);
                std::thread::sleep(backoff);
                continue;
            }
        };
        let Ok(handle) = stream.try_clone() else {
            continue;
        };
        // Back-pressure: while evicted handshakes are still ending, new connections wait in
        // the listener's backlog rather than in threads.
        let mut table = connections.lock().unwrap_or_else(|p| p.into_inner());
        while table.handshake_threads() >= 2 * MAX_HANDSHAKES && !stop.load(Ordering::SeqCst) {
            drop(table);
            std::thread::sleep(Duration::from_millis(1));
            table = connections.lock().unwrap_or_else(|p| p.into_inner());
        }
        table.make_room_for_a_handshake();
        let id = table.next_id;
        table.next_id += 1;
        table.conns.insert(
            id,
            Conn {
                handle,
                handshake_since: Some(Instant::now()),
                evicted: false,
                thread: None,
            },
        );
        let (handler, auth, conns) = (handler.clone(), auth.clone(), connections.clone());
        let spawned = std::thread::Builder::new()
            .name("mcapi-ctl-peer".into())
            .spawn(move || {
                serve(stream, handler, &auth, id, &conns);
                // Its handle closes with its entry.
                conns
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .conns
                    .remove(&id);
            });
        match spawned {
            // (A thread that already ended removed its entry: its handle is dropped here.)
            Ok(t) => {
                if let Some(c) = table.conns.get_mut(&id) {
                    c.thread = Some(t);
                }
            }
            Err(_) => _ = table.conns.remove(&id),
        }
    }
}

fn serve(
    mut stream: Stream,
    handler: Arc<dyn Handler>,
    auth: &JobAuth,
    id: u64,
    connections: &Mutex<ConnTable>,
) {
    let authenticated = auth.server(&mut stream);
    if let Some(c) = connections
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .conns
        .get_mut(&id)
    {
        c.handshake_since = None;
    }
    if let Err(e) = authenticated {
        log::info!("control connection refused: {e}");
        // The server keeps a handle to the socket: shut it, so the peer sees the end now.
        stream.shutdown();
        return;
    }
    // The node and run that introduced themselves, once welcomed: the end of this
    // connection is news about that run only (a refused Hello names nobody).
    let mut peer: Option<((u32, u32), u64)> = None;
    while let Some(request) = next_request(&mut stream) {
        // A Hello first, and only once: every other request speaks for the node the Hello
        // named, so none is taken before it (nor a second identity after it).
        let hello = matches!(request, Frame::Hello { .. });
        if hello == peer.is_some() {
            log::info!(
                "control connection closed: {}",
                if hello {
                    "a second Hello"
                } else {
                    "a request before any Hello"
                }
            );
            break;
        }
        // A Hello read after its sender died (a successor's may have been met meanwhile,
        // on another connection) must not be met: it would pass for a newer run. Its
        // sender sends nothing more until our answer, so anything but silence is its end.
        if hello && stream.is_closed() {
            log::info!("control connection closed: its Hello's sender is gone");
            break;
        }
        let answer = handler.handle(peer.map(|p| p.0), &request);
        if let (
            Frame::Hello {
                domain,
                node,
                incarnation,
                ..
            },
            Frame::Welcome { .. },
        ) = (&request, &answer)
        {
            peer = Some(((*domain, *node), *incarnation));
        }
        if stream.send(&answer).is_err() || peer.is_none() {
            // A refused Hello ends the connection: it has no one to speak for.
            break;
        }
    }
    stream.shutdown();
    if let Some((node, incarnation)) = peer {
        handler.peer_gone(node, incarnation);
    }
}

/// The next request on a served connection; `None` ends the connection. A handshake in
/// another protocol version is refused here, before any handler sees it, with
/// `MCAPI_ERR_TRANSMISSION`: the spec has no code for an incompatible peer, and
/// "transmission failure" is what the connecting node reports for any failed handshake.
fn next_request(stream: &mut Stream) -> Option<Frame> {
    let body = stream.recv_body().ok()?;
    match Frame::decode(&body) {
        Ok(frame) => Some(frame),
        Err(DecodeError::Version(_)) => {
            log::info!("control connection refused: another protocol version");
            // Best effort: the shutdown below tells the peer anyway.
            _ = stream.send(&Frame::Refused(Status::MCAPI_ERR_TRANSMISSION.code()));
            // The server keeps a handle to the socket: shut it, so the peer sees the end now.
            stream.shutdown();
            None
        }
        Err(DecodeError::Malformed) => {
            log::info!("control connection closed: a malformed frame");
            None
        }
    }
}

/// Connects to `to` and proves we are of job `auth` (and checks the peer is), retrying
/// while the peer has not started yet, until `deadline` (`None`: forever) or until
/// `gave_up()` says so, which it asks between tries (at least every second: a node
/// finalized under a call waiting for another node to come up ends that call). Returns
/// `Ok(None)` then.
///
/// # Errors
/// Errors other than "not there yet" (e.g. permission denied, a failed handshake).
pub fn connect_when_up(
    to: &Rendezvous,
    deadline: Option<Instant>,
    auth: &JobAuth,
    gave_up: &dyn Fn() -> bool,
) -> io::Result<Option<Stream>> {
    let Some(mut stream) = connect_raw(to, deadline, gave_up)? else {
        return Ok(None);
    };
    auth.client(&mut stream)?;
    Ok(Some(stream))
}

/// [`connect_when_up`] without the handshake.
fn connect_raw(
    to: &Rendezvous,
    deadline: Option<Instant>,
    gave_up: &dyn Fn() -> bool,
) -> io::Result<Option<Stream>> {
    let mut pause = Duration::from_millis(1);
    loop {
        if gave_up() {
            return Ok(None);
        }
        // A published address is looked up again on every try: a node that died left its
        // old one behind, and its next run publishes another. Each look waits a second at
        // most, so `gave_up` is asked again.
        let resolved;
        let at = match to {
            Rendezvous::Pmix(key) => {
                let look = Instant::now() + Duration::from_secs(1);
                let until = deadline.map_or(look, |d| d.min(look));
                match launcher::lookup_node(key, Some(until)).map_err(io::Error::other)? {
                    Some(a) => {
                        resolved = Rendezvous::Tcp(a.ip().to_string(), a.port());
                        Some(&resolved)
                    }
                    None => None,
                }
            }
            other => Some(other),
        };
        match at.map(|at| Stream::connect(at, Duration::from_secs(1))) {
            Some(Ok(s)) => return Ok(Some(s)),
            Some(Err(e))
                if !matches!(
                    e.kind(),
                    io::ErrorKind::NotFound
                        | io::ErrorKind::ConnectionRefused
                        | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(e)
            }
            // Not published yet, or not listening yet: tried again.
            _ => {}
        }
        if deadline.is_some_and(|d| Instant::now() + pause > d) {
            return Ok(None);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn tcp_control_connections_notice_a_silent_peer() {
        use nix::sys::socket::{getsockopt, sockopt};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let to = Rendezvous::Tcp("127.0.0.1".into(), port);
        let Stream::Tcp(s) = Stream::connect(&to, Duration::from_secs(1)).unwrap() else {
            panic!("a TCP rendezvous gives a TCP stream");
        };
        assert!(getsockopt(&s, sockopt::KeepAlive).unwrap());
        assert_eq!(getsockopt(&s, sockopt::TcpKeepIdle).unwrap(), 5);
        assert_eq!(getsockopt(&s, sockopt::TcpUserTimeout).unwrap(), 10_000);
    }

    struct Ports {
        ports: Vec<u32>,
        gone: AtomicUsize,
        /// Requests handled (tests of what never reaches the handler).
        handled: AtomicUsize,
    }

    fn auth() -> Arc<JobAuth> {
        auth_with("0123456789abcdef")
    }

    fn auth_with(key: &str) -> Arc<JobAuth> {
        Arc::new(JobAuth::new(
            "test",
            crate::config::JobKey::new(key.as_bytes()).unwrap(),
        ))
    }

    impl Handler for Ports {
        fn handle(&self, _peer: Option<(u32, u32)>, request: &Frame) -> Frame {
            self.handled.fetch_add(1, Ordering::SeqCst);
            match request {
                // Node 2 is welcome; anyone else is refused.
                Frame::Hello { node: 2, .. } => Frame::Welcome {
                    peer: 0,
                    incarnation: 9,
                    reads_itself: false,
                    fabric_addr: vec![],
                    fabric_token: 0x7070_7070,
                },
                Frame::Hello { .. } => Frame::Refused(99),
                Frame::Lookup { port } if self.ports.contains(port) => Frame::Value(1),
                Frame::GetAttribute { port, attribute } => {
                    Frame::Value(u64::from(port + attribute))
                }
                _ => Frame::Refused(99),
            }
        }
        fn peer_gone(&self, peer: (u32, u32), incarnation: u64) {
            assert_eq!((peer, incarnation), ((0, 2), 1), "the welcomed run");
            self.gone.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn config(tag: &str) -> Config {
        let mut c = Config::defaults();
        c.runtime_dir =
            std::env::temp_dir().join(format!("mcapi-ctl-test-{}-{tag}", std::process::id()));
        c
    }

    #[test]
    fn lookup_liveness_and_restart() {
        let c = config("a");
        let handler = Arc::new(Ports {
            ports: vec![3],
            gone: AtomicUsize::new(0),
            handled: AtomicUsize::new(0),
        });
        let server = ControlServer::start(&c, 0, 1, handler.clone(), auth()).unwrap();
        assert!(matches!(
            ControlServer::start(&c, 0, 1, handler.clone(), auth()),
            Err(StartError::NodeTaken)
        ));

        let mut s = connect_when_up(server.rendezvous(), None, &auth(), &|| false)
            .unwrap()
            .unwrap();
        let hello = Frame::Hello {
            domain: 0,
            node: 2,
            to: (0, 1),
            peer: 0,
            incarnation: 1,
            reads_itself: false,
            fabric_addr: vec![1],
            fabric_token: 0x7070_7070,
        };
        // A refused Hello names nobody: its connection's end reports no one gone.
        let mut refused = connect_when_up(server.rendezvous(), None, &auth(), &|| false)
            .unwrap()
            .unwrap();
        let stranger = Frame::Hello {
            domain: 0,
            node: 5,
            to: (0, 1),
            peer: 0,
            incarnation: 1,
            reads_itself: false,
            fabric_addr: vec![1],
            fabric_token: 0x7070_7070,
        };
        assert_eq!(refused.call(&stranger).unwrap(), Frame::Refused(99));
        drop(refused);
        assert!(matches!(s.call(&hello).unwrap(), Frame::Welcome { .. }));
        assert_eq!(s.call(&Frame::Lookup { port: 3 }).unwrap(), Frame::Value(1));
        assert_eq!(
            s.call(&Frame::Lookup { port: 4 }).unwrap(),
            Frame::Refused(99)
        );
        drop(s);
        let start = Instant::now();
        while handler.gone.load(Ordering::SeqCst) == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "peer_gone not reported"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            handler.gone.load(Ordering::SeqCst),
            1,
            "only the welcomed one"
        );
        drop(server);
        // The id is free again, and a stale socket file does not block a new server.
        let path = match Rendezvous::of(&c, 0, 1).unwrap() {
            Rendezvous::Unix(p) => p,
            _ => unreachable!(),
        };
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        drop(UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let again = ControlServer::start(&c, 0, 1, handler, auth()).unwrap();
        drop(again);
        assert!(!path.exists());
        let _ = std::fs::remove_dir_all(&c.runtime_dir);
    }

    /// A server stops even when its socket file is gone (removed by a cleaner, say): its
    /// acceptor is woken without the path. And a server that stops while a successor at
    /// the same path took over (a restart) leaves the successor's socket alone.
    #[test]
    fn a_server_stops_without_its_socket_file_and_spares_a_successors() {
        let c = config("gone");
        let handler = || {
            Arc::new(Ports {
                ports: vec![],
                gone: AtomicUsize::new(0),
                handled: AtomicUsize::new(0),
            })
        };
        let path = match Rendezvous::of(&c, 0, 1).unwrap() {
            Rendezvous::Unix(p) => p,
            _ => unreachable!(),
        };
        // Bounded: a hang fails the test instead of blocking the run.
        let stops_within = |server: ControlServer| {
            let (done, stopped) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                drop(server);
                _ = done.send(());
            });
            stopped.recv_timeout(Duration::from_secs(10)).is_ok()
        };
        let server = ControlServer::start(&c, 0, 1, handler(), auth()).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(stops_within(server), "stopped without its socket file");

        let first = ControlServer::start(&c, 0, 1, handler(), auth()).unwrap();
        // The successor takes over the path while the first still runs (as a restarted
        // node finding a file it takes for stale would).
        std::fs::remove_file(&path).unwrap();
        let successor = ControlServer::start(&c, 0, 1, handler(), auth()).unwrap();
        assert!(stops_within(first));
        assert!(path.exists(), "the successor's socket was removed");
        assert!(
            connect_when_up(
                successor.rendezvous(),
                Some(Instant::now()),
                &auth(),
                &|| false
            )
            .unwrap()
            .is_some(),
            "the successor is reachable"
        );
        assert!(stops_within(successor));
        assert!(!path.exists());
        let _ = std::fs::remove_dir_all(&c.runtime_dir);
    }

    /// A TCP server listens on the address its topology entry names and on no other (the
    /// other loopback family, another loopback address are refused), and stops (no hang).
    #[test]
    fn tcp_listens_on_the_topology_address_only() {
        for (host, others) in [
            ("127.0.0.1", ["::1", "127.0.0.2"]),
            ("::1", ["127.0.0.1", "127.0.0.1"]),
        ] {
            let mut c = config("tcp");
            c.topology =
                Some(crate::config::Topology::parse(&format!("0 3 [{host}]:47731\n")).unwrap());
            let handler = Arc::new(Ports {
                ports: vec![8],
                gone: AtomicUsize::new(0),
                handled: AtomicUsize::new(0),
            });
            let server = ControlServer::start(&c, 0, 3, handler, auth()).unwrap();
            assert_eq!(server.bound(), &Rendezvous::Tcp(host.into(), 47731));
            let to = Rendezvous::Tcp(host.into(), 47731);
            let mut s = connect_when_up(&to, None, &auth(), &|| false)
                .unwrap()
                .unwrap();
            assert!(matches!(s.call(&hello(2)).unwrap(), Frame::Welcome { .. }));
            assert_eq!(s.call(&Frame::Lookup { port: 8 }).unwrap(), Frame::Value(1));
            for other in others {
                let e = Stream::connect(
                    &Rendezvous::Tcp(other.into(), 47731),
                    Duration::from_secs(1),
                )
                .unwrap_err();
                assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{other}");
            }
            let start = Instant::now();
            drop(server);
            assert!(start.elapsed() < Duration::from_secs(2));
        }
    }

    fn hello(node: u32) -> Frame {
        Frame::Hello {
            domain: 0,
            node,
            to: (0, 1),
            peer: 0,
            incarnation: 1,
            reads_itself: false,
            fabric_addr: vec![1],
            fabric_token: 0x7070_7070,
        }
    }

    fn raw_frame(s: &mut Stream, frame: &Frame) {
        let mut body = FrameBytes::new();
        frame.encode_into(&mut body);
        s.write_all(&(body.len() as u32).to_le_bytes()).unwrap();
        s.write_all(&body).unwrap();
    }

    /// Nothing from a connection without the key, or without a Hello, reaches the handler:
    /// the connection is closed unanswered. A client with another key is refused too, and
    /// learns it.
    #[test]
    fn unauthenticated_requests_never_reach_the_handler() {
        let c = config("auth");
        let handler = Arc::new(Ports {
            ports: vec![3],
            gone: AtomicUsize::new(0),
            handled: AtomicUsize::new(0),
        });
        let server = ControlServer::start(&c, 0, 1, handler.clone(), auth()).unwrap();
        // No handshake: frames, garbage.
        let channel = Frame::Channel {
            port: 3,
            op: ChannelOp::UndoConnect,
        };
        for frame in [hello(2), Frame::Lookup { port: 3 }, channel.clone()] {
            let mut s = connect_raw(server.rendezvous(), None, &|| false)
                .unwrap()
                .unwrap();
            raw_frame(&mut s, &frame);
            s.write_all(&[0; 64]).unwrap();
            assert!(s.recv().is_err(), "{frame:?} answered");
        }
        // Another key.
        let mut s = connect_raw(server.rendezvous(), None, &|| false)
            .unwrap()
            .unwrap();
        let e = auth_with("another key, long enough")
            .client(&mut s)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        // The key but no Hello: closed at the first request.
        for frame in [Frame::Lookup { port: 3 }, channel] {
            let mut s = connect_when_up(server.rendezvous(), None, &auth(), &|| false)
                .unwrap()
                .unwrap();
            raw_frame(&mut s, &frame);
            assert_eq!(s.recv().unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        }
        // A second Hello on a welcomed connection ends it.
        let mut s = connect_when_up(server.rendezvous(), None, &auth(), &|| false)
            .unwrap()
            .unwrap();
        assert!(matches!(s.call(&hello(2)).unwrap(), Frame::Welcome { .. }));
        raw_frame(&mut s, &hello(2));
        assert_eq!(s.recv().unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        // That one Hello was all the handler saw.
        assert_eq!(handler.handled.load(Ordering::SeqCst), 1);
        let path = match server.rendezvous() {
            Rendezvous::Unix(p) => p.clone(),
            _ => unreachable!(),
        };
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        drop(server);
        let _ = std::fs::remove_dir_all(&c.runtime_dir);
    }

    /// A handshake in another protocol version (or in the format before versions) is
    /// refused with `MCAPI_ERR_TRANSMISSION`, the connection closed, and the handler never
    /// sees it.
    #[test]
    fn another_protocol_version_is_refused() {
        let c = config("v");
        let handler = Arc::new(Ports {
            ports: vec![],
            gone: AtomicUsize::new(0),
            handled: AtomicUsize::new(0),
        });
        let server = ControlServer::start(&c, 0, 1, handler.clone(), auth()).unwrap();
        let mut hello = FrameBytes::new();
        Frame::Hello {
            domain: 0,
            node: 2,
            to: (0, 1),
            peer: 0,
            incarnation: 1,
            reads_itself: false,
            fabric_addr: vec![1],
            fabric_token: 0x7070_7070,
        }
        .encode_into(&mut hello);
        hello[1..5].copy_from_slice(&(PROTOCOL_VERSION + 1).to_le_bytes());
        let mut before_versions = Vec::new();
        for w in [1u64, 0, 2, 0, 1, 1] {
            before_versions.extend_from_slice(&w.to_le_bytes());
        }
        for body in [&hello[..], &before_versions] {
            let mut s = connect_when_up(server.rendezvous(), None, &auth(), &|| false)
                .unwrap()
                .unwrap();
            s.write_all(&(body.len() as u32).to_le_bytes()).unwrap();
            s.write_all(body).unwrap();
            assert_eq!(
                s.recv().unwrap(),
                Frame::Refused(Status::MCAPI_ERR_TRANSMISSION.code())
            );
            assert_eq!(s.recv().unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        }
        drop(server);
        assert_eq!(handler.gone.load(Ordering::SeqCst), 0);
        let _ = std::fs::remove_dir_all(&c.runtime_dir);
    }

    /// A length prefix over the bound is refused at once: the body is neither allocated nor
    /// waited for. A frame over it is not sent.
    #[test]
    fn oversized_frames_are_refused() {
        for len in [MAX_FRAME as u32 + 1, u32::MAX] {
            let (a, b) = UnixStream::pair().unwrap();
            b.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let (mut a, mut b) = (Stream::Unix(a), Stream::Unix(b));
            a.write_all(&len.to_le_bytes()).unwrap();
            let start = Instant::now();
            assert_eq!(b.recv().unwrap_err().kind(), io::ErrorKind::InvalidData);
            assert!(start.elapsed() < Duration::from_secs(5));
        }
        let (a, _b) = UnixStream::pair().unwrap();
        let big = Frame::Welcome {
            peer: 0,
            incarnation: 0,
            reads_itself: false,
            fabric_addr: vec![0; MAX_FRAME],
            fabric_token: 0x7070_7070,
        };
        assert_eq!(
            Stream::Unix(a).send(&big).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    /// A body that is not a frame ends the connection (the peer is garbage, not alive).
    #[test]
    fn malformed_frame_is_an_error() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut a, mut b) = (Stream::Unix(a), Stream::Unix(b));
        a.write_all(&3u32.to_le_bytes()).unwrap();
        a.write_all(&[2, 0, 0]).unwrap();
        assert_eq!(b.recv().unwrap_err().kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn connect_when_up_waits_for_a_late_server_and_times_out_otherwise() {
        let c = config("b");
        let to = Rendezvous::of(&c, 0, 9).unwrap();
        let t0 = Instant::now();
        assert!(
            connect_when_up(&to, Some(t0 + Duration::from_millis(50)), &auth(), &|| {
                false
            })
            .unwrap()
            .is_none()
        );
        // The server stays up until the client has connected (a loaded machine may take
        // longer than any fixed pause for the handshake), at most 10 s.
        let (connected, wait_for_client) = std::sync::mpsc::channel::<()>();
        let late = {
            let c = c.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                let h = Arc::new(Ports {
                    ports: vec![],
                    gone: AtomicUsize::new(0),
                    handled: AtomicUsize::new(0),
                });
                let s = ControlServer::start(&c, 0, 9, h, auth()).unwrap();
                _ = wait_for_client.recv_timeout(Duration::from_secs(10));
                drop(s);
            })
        };
        let s = connect_when_up(
            &to,
            Some(Instant::now() + Duration::from_secs(10)),
            &auth(),
            &|| false,
        );
        _ = connected.send(());
        assert!(s.unwrap().is_some());
        late.join().unwrap();
        let _ = std::fs::remove_dir_all(&c.runtime_dir);
    }
}
