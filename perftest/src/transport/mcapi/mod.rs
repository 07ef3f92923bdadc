//! MCAPI: the layer under test, through the `mcapi` crate's Rust API.
//!
//! Each side runs one MCAPI node (server node 0, client node 1, domain 0). What moves
//! between them depends on the benchmark ([`Layer`]):
//!
//! - messages ([`msg::MsgTransport`]): a receiving and a sending message endpoint per node,
//!   blocking `msg_send` or windowed `msg_send_i_zero_copy`, blocking `msg_recv`;
//! - packets ([`channel::PktTransport`]): two unidirectional packet channels (client to
//!   server, server to client), blocking `pktchan_send` or windowed `pktchan_send_i`,
//!   `pktchan_recv` and `pktchan_release`;
//! - scalars ([`channel::SclTransport`]): two unidirectional scalar channels of uint64,
//!   `sclchan_send`/`sclchan_recv`.
//!
//! Every blocking call waits in MCAPI's own way (spinning on a CQ, then sleeping); the
//! endpoint timeout ([`WAIT`]) only bounds each call so the pattern can look at the
//! bootstrap channel while it waits.
//!
//! Addressing: on one host (a loopback bootstrap connection) the nodes meet through MCAPI's
//! Unix-socket rendezvous under a job name unique to the run; across hosts both sides build
//! the same two-line topology from the addresses of the bootstrap connection (see
//! [`topology`]); under a launcher (`mpirun -n 2 perftest ...`) through its PMIx server, as
//! any MCAPI job started by it. Buffers are allocated once; the data path allocates nothing.
//!
//! Setting up, in the order of the bootstrap protocol ([`crate::session`]): both sides
//! [`McapiLayer::open`] their node and endpoints; each [`McapiLayer::connect`]s to the other
//! node (looks its endpoints up; for channels, the client connects both channels and opens
//! its two sides); for channels, the server then [`McapiLayer::open_channels`], and the
//! client [`McapiLayer::finish_open`]s.

pub mod channel;
pub mod msg;

use crate::cli::{Layer, Test};
use crate::error::{Error, Result};
use crate::oob::Oob;
use crate::pattern::{self, Plan};
use crate::stats::Measurement;
use ::mcapi::config::{Bootstrap, Config, Topology};
use ::mcapi::{Node, RequestHandle, Status};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// The MCAPI domain of both nodes.
pub const DOMAIN: u32 = 0;
/// The server's node id.
pub const SERVER_NODE: u32 = 0;
/// The client's node id.
pub const CLIENT_NODE: u32 = 1;
/// Longest a blocking send or receive waits before handing back to the pattern, which then
/// looks at the bootstrap channel and calls again.
pub const WAIT: Duration = Duration::from_millis(10);

/// What both sides agree on before they start their nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setup {
    /// MCAPI job name, unique to the run, so parallel runs never meet.
    pub job: String,
    /// TCP ports of the nodes' control planes (server, client); used across hosts only.
    pub ports: (u16, u16),
}

/// The two-node topology for a run across hosts: the server (node 0) at the address the
/// client reached it at, the client (node 1) at the address the server saw it come from.
/// `None` when both ends of the bootstrap connection are loopback addresses: then the nodes
/// meet through the single-host rendezvous (and IP providers bind to 127.0.0.1 as raw does).
/// IPv6 addresses are written in brackets (`[fd00::2]:47001`).
///
/// # Errors
/// mcapi does not accept the topology.
pub fn topology(server: IpAddr, client: IpAddr, ports: (u16, u16)) -> Result<Option<Topology>> {
    if server.is_loopback() && client.is_loopback() {
        return Ok(None);
    }
    let text = format!(
        "{DOMAIN} {SERVER_NODE} {}\n{DOMAIN} {CLIENT_NODE} {}\n",
        SocketAddr::new(server, ports.0),
        SocketAddr::new(client, ports.1)
    );
    Topology::parse(&text)
        .map(Some)
        .map_err(|e| Error::failed(format!("MCAPI topology {text:?}: {e}")))
}

/// The node configuration for one side: the environment's (`MCAPI_*`), with this run's job,
/// topology and provider, and at least `recv_buffers` receive buffers per endpoint (for
/// channels: buffers of a receive pool, and so the sender's credits).
pub fn config(
    setup: &Setup,
    topology: Option<Topology>,
    provider: &str,
    recv_buffers: usize,
) -> Result<Config> {
    let mut c =
        Config::from_env().map_err(|e| Error::failed(format!("MCAPI configuration: {e}")))?;
    c.job.clone_from(&setup.job);
    // Under a launcher the nodes meet through its PMIx server (the bootstrap detected from
    // the environment); the topology is for a run started by hand.
    if c.bootstrap != Bootstrap::Pmix {
        c.topology = topology;
    }
    c.provider = Some(provider.to_owned());
    // A sender asks for as many credits as its own node's endpoints have buffers, so both
    // sides use the same count.
    c.recv_buffers = c.recv_buffers.max(recv_buffers);
    Ok(c)
}

/// The payload of messages and packets of up to `len` bytes: one buffer for the whole run (leaked once,
/// grown, i.e. leaked again, only if a larger one is asked for), since zero-copy sends read
/// it until their requests complete. Page-aligned like the raw baseline's registered send
/// buffer: malloc puts a large block 16 bytes into a page, so a 64 KiB message would span 17
/// pages, and shm's copy between processes pins and copies page by page.
pub(super) fn send_pattern(len: usize) -> &'static [u8] {
    const PAGE: usize = 4096;
    static BUF: std::sync::Mutex<&'static [u8]> = std::sync::Mutex::new(&[]);
    let mut b = BUF.lock().unwrap_or_else(|p| p.into_inner());
    if b.len() < len {
        let block = Box::leak(vec![0u8; len + PAGE].into_boxed_slice());
        let start = block.as_ptr().align_offset(PAGE).min(PAGE);
        let buf = &mut block[start..start + len];
        for (i, x) in buf.iter_mut().enumerate() {
            *x = (i % 251) as u8;
        }
        *b = buf;
    }
    *b
}

/// The outstanding requests of a sender's windowed non-blocking sends (`pktchan_send_i`,
/// `msg_send_i_zero_copy`), oldest first, at most `window`.
struct SendWindow {
    in_flight: VecDeque<RequestHandle>,
    window: usize,
}

impl SendWindow {
    fn new(window: usize) -> SendWindow {
        SendWindow {
            in_flight: VecDeque::with_capacity(window),
            window: window.max(1),
        }
    }

    /// Posts one send of `len` bytes with `post` (`what` names it) if the window has room,
    /// keeping its request: `Ok(false)` when it has none, or when the node's send buffers or
    /// requests are all taken (the completed ones are reaped first). With a full window the
    /// oldest request is reaped if it completed: one per send, as a fabtests window does,
    /// so the reaping is spread over the window instead of all done between two windows
    /// while the receiver idles.
    fn send(
        &mut self,
        node: &Node,
        what: &str,
        len: usize,
        post: impl FnOnce() -> std::result::Result<RequestHandle, Status>,
    ) -> Result<bool> {
        if self.in_flight.len() >= self.window {
            self.reap(node, self.window - 1, what)?;
            if self.in_flight.len() >= self.window {
                return Ok(false);
            }
        }
        match post() {
            Ok(req) => {
                self.in_flight.push_back(req);
                Ok(true)
            }
            // Every staging buffer, send slot or request is taken: some must complete first.
            Err(Status::MCAPI_ERR_MEM_LIMIT | Status::MCAPI_ERR_REQUEST_LIMIT) => {
                self.reap(node, 0, what)?;
                Ok(false)
            }
            Err(s) => Err(failed(&format!("{what} of {len} bytes"), s)),
        }
    }

    /// Completes the oldest outstanding requests that are done, until at most `keep` are
    /// outstanding (in order: stops at the first still pending). `wait` with a zero
    /// timeout, not `test`: `wait` frees the request's slot at once, while one that `test`
    /// saw complete stays in mcapi's request table until an allocation reclaims it.
    fn reap(&mut self, node: &Node, keep: usize, what: &str) -> Result<()> {
        while self.in_flight.len() > keep {
            let Some(&req) = self.in_flight.front() else {
                break;
            };
            match node.wait(req, None, Some(Duration::ZERO)) {
                Ok(_) => {
                    self.in_flight.pop_front();
                }
                Err(Status::MCAPI_TIMEOUT) => break,
                Err(s) => return Err(failed(what, s)),
            }
        }
        Ok(())
    }
}

fn failed(what: &str, s: Status) -> Error {
    Error::failed(format!("MCAPI {what}: {s} ({})", s.name()))
}

/// A started node, finalized when dropped (mcapi removes the job's rendezvous directory
/// with its last node).
pub struct OwnedNode(Node, Config);

impl OwnedNode {
    /// Starts node `<DOMAIN, node>`.
    fn start(node: u32, config: Config) -> Result<OwnedNode> {
        Node::initialize(DOMAIN, node, config.clone())
            .map(|n| OwnedNode(n, config))
            .map_err(|s| failed(&format!("initialize of node {DOMAIN}.{node}"), s))
    }
}

impl std::ops::Deref for OwnedNode {
    type Target = Node;

    fn deref(&self) -> &Node {
        &self.0
    }
}

impl Drop for OwnedNode {
    /// Finalizes the node; the last node of the run on this host removes the job's
    /// directory (its job name is this run's alone).
    fn drop(&mut self) {
        let _ = self.0.finalize();
        let _ = self.1.remove_unused_job_dir();
    }
}

/// This side's MCAPI layer for the benchmark at hand.
pub enum McapiLayer {
    Msg(msg::MsgTransport),
    Pkt(channel::PktTransport),
    Scl(channel::SclTransport),
}

impl McapiLayer {
    /// Starts node `node` and creates its endpoints for `plan`'s benchmark; `max_len` is the
    /// largest size the run sends (packet channels are configured for it, up to
    /// `MCAPI_MAX_PKT_SIZE`).
    ///
    /// # Errors
    /// The node could not start (e.g. the provider does not offer what MCAPI needs, or a
    /// control port is taken) or an endpoint could not be created.
    pub fn open(plan: &Plan, node: u32, config: Config, max_len: usize) -> Result<McapiLayer> {
        let n = OwnedNode::start(node, config)?;
        let client = node == CLIENT_NODE;
        let layer = match plan.test.layer() {
            Layer::Messages => {
                // msg-bw's non-blocking calls: the client's windows of sends, the server's
                // receives posted with their buffers (as raw's receives are posted).
                let windowed = plan.test == Test::MsgBw && !plan.blocking_sends;
                let window = plan.window as usize;
                let posted = (windowed && !client).then_some(window);
                msg::MsgTransport::open(n, (windowed && client).then_some(window), posted)
                    .map(McapiLayer::Msg)
            }
            Layer::Packets => {
                // pkt-bw returns only acknowledgements: its reverse channel's pool stays small.
                let back = match plan.test {
                    Test::PktBw => pattern::ACK_LEN,
                    _ => max_len,
                };
                let (tx, rx) = if client {
                    (max_len, back)
                } else {
                    (back, max_len)
                };
                let windowed = client && plan.test == Test::PktBw && !plan.blocking_sends;
                channel::PktTransport::open(n, tx, rx, windowed, plan.window as usize)
                    .map(McapiLayer::Pkt)
            }
            Layer::Scalars => channel::SclTransport::open(n).map(McapiLayer::Scl),
        }?;
        Ok(layer)
    }

    /// Looks up the peer node's endpoints (waiting up to `timeout` for them to exist). For
    /// channels on the client: connects both channels and opens this side of each; the
    /// server opens its sides next ([`McapiLayer::open_channels`]).
    pub fn connect(&mut self, peer: u32, timeout: Duration) -> Result<()> {
        match self {
            McapiLayer::Msg(t) => t.connect(peer, timeout),
            McapiLayer::Pkt(t) => t.chan.connect(peer, timeout),
            McapiLayer::Scl(t) => t.chan.connect(peer, timeout),
        }
    }

    /// Whether the bootstrap protocol has the channel-open step.
    pub fn has_channels(&self) -> bool {
        !matches!(self, McapiLayer::Msg(_))
    }

    /// Server: opens this side of both channels (the client has connected them and opened
    /// its sides) and waits until both are open.
    pub fn open_channels(&mut self, timeout: Duration) -> Result<()> {
        match self {
            McapiLayer::Msg(_) => Ok(()),
            McapiLayer::Pkt(t) => t.chan.open_and_wait(timeout),
            McapiLayer::Scl(t) => t.chan.open_and_wait(timeout),
        }
    }

    /// Client: waits until the sides opened by [`McapiLayer::connect`] are open (the server
    /// has opened its own).
    pub fn finish_open(&mut self, timeout: Duration) -> Result<()> {
        match self {
            McapiLayer::Msg(_) => Ok(()),
            McapiLayer::Pkt(t) => t.chan.wait_open(timeout),
            McapiLayer::Scl(t) => t.chan.wait_open(timeout),
        }
    }

    /// The provider MCAPI runs over, as libfabric names it.
    pub fn provider(&self) -> &str {
        match self {
            McapiLayer::Msg(t) => t.provider(),
            McapiLayer::Pkt(t) => t.chan.provider(),
            McapiLayer::Scl(t) => t.chan.provider(),
        }
    }

    /// The largest size this layer carries, and the limit's name.
    pub fn limit(&self) -> (usize, &'static str) {
        match self {
            McapiLayer::Msg(_) => (::mcapi::MAX_MSG_SIZE, "MCAPI_MAX_MSG_SIZE"),
            McapiLayer::Pkt(_) => (::mcapi::MAX_PKT_SIZE, "MCAPI_MAX_PKT_SIZE"),
            McapiLayer::Scl(_) => (8, "a uint64 scalar"),
        }
    }

    /// How the layer carries `size` bytes where it has a choice: messages above the node's
    /// eager size go by rendezvous (an RMA read by the receiver).
    pub fn protocol(&self, size: usize) -> Option<&'static str> {
        match self {
            McapiLayer::Msg(t) if size > t.eager_max() => Some("rendezvous"),
            McapiLayer::Msg(_) => Some("eager"),
            _ => None,
        }
    }

    /// The call the sender makes at `size` in msg-bw and pkt-bw: sizes the provider injects
    /// (packets) or sends eagerly (messages) go by the blocking call, which returns at once.
    pub fn send_call(&self, plan: &Plan, size: usize) -> Option<&'static str> {
        match self {
            McapiLayer::Msg(t) if plan.test == Test::MsgBw => {
                Some(if plan.blocking_sends || size <= t.eager_max() {
                    "msg_send"
                } else {
                    "msg_send_i_zero_copy"
                })
            }
            McapiLayer::Pkt(t) if plan.test == Test::PktBw => {
                Some(if plan.blocking_sends || size <= t.inject_size() {
                    "pktchan_send"
                } else {
                    "pktchan_send_i"
                })
            }
            _ => None,
        }
    }

    /// [`pattern::client_size`] over this layer.
    pub fn client_size(&mut self, oob: &mut Oob, plan: &Plan, size: usize) -> Result<Measurement> {
        match self {
            McapiLayer::Msg(t) => pattern::client_size(t, oob, plan, size),
            McapiLayer::Pkt(t) => pattern::client_size(t, oob, plan, size),
            McapiLayer::Scl(t) => pattern::client_size(t, oob, plan, size),
        }
    }

    /// [`pattern::serve_size`] over this layer.
    pub fn serve_size(&mut self, oob: &mut Oob, plan: &Plan, size: usize) -> Result<()> {
        match self {
            McapiLayer::Msg(t) => {
                t.expect_size(size)?;
                pattern::serve_size(t, oob, plan, size)
            }
            McapiLayer::Pkt(t) => pattern::serve_size(t, oob, plan, size),
            McapiLayer::Scl(t) => pattern::serve_size(t, oob, plan, size),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn topology_only_across_hosts() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        assert_eq!(topology(lo, lo, (1, 2)).unwrap(), None);
        let (a, b) = (
            IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1)),
            IpAddr::V4(Ipv4Addr::new(198, 51, 100, 2)),
        );
        let t = topology(a, b, (5000, 5001)).unwrap().unwrap();
        let s = t.get(DOMAIN, SERVER_NODE).unwrap();
        assert_eq!((s.host.as_str(), s.port), ("198.51.100.1", 5000));
        let c = t.get(DOMAIN, CLIENT_NODE).unwrap();
        assert_eq!((c.host.as_str(), c.port), ("198.51.100.2", 5001));
        let v6 = IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2));
        let t = topology(a, v6, (5000, 5001)).unwrap().unwrap();
        let c = t.get(DOMAIN, CLIENT_NODE).unwrap();
        assert_eq!((c.host.as_str(), c.port), ("fd00::2", 5001));
    }
}
