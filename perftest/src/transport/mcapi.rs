//! MCAPI messages: the layer under test, through the `mcapi` crate's Rust API.
//!
//! Each side runs one MCAPI node (server node 0, client node 1, domain 0) with one message
//! endpoint (port 1, later 2, 3...: see below), and the benchmark messages are MCAPI messages at priority 0: blocking
//! `msg_send` (which copies or injects the payload and blocks while the receiver has no free
//! buffer: credit flow control) and blocking `msg_recv` (which copies the message out of its
//! receive slot). Both wait in MCAPI's own way (spinning on the node's CQ, then sleeping);
//! the endpoint timeout ([`WAIT`]) only bounds each call so the pattern can look at the
//! bootstrap channel while it waits.
//!
//! Message streams: mcapi numbers the messages of one sender to one endpoint with 16-bit
//! sequence numbers but reorders them as 32-bit ones, so the 65537th message from a node to
//! an endpoint is taken for an old duplicate and never delivered: the run stalls. Until that is fixed in mcapi, the benchmark moves to a fresh pair
//! of endpoints (the next port) before a size that could cross [`MESSAGES_PER_ENDPOINT`],
//! and runs at most that many messages (warmup included) per size over MCAPI.
//!
//! Addressing: on one host (a loopback bootstrap connection) the nodes meet through MCAPI's
//! Unix-socket rendezvous under a job name unique to the run; across hosts both sides build
//! the same two-line topology from the addresses of the bootstrap connection (see
//! [`topology`]). Buffers are allocated once; the data path allocates nothing.

use super::{Kind, Transport};
use crate::error::{Error, Result};
use ::mcapi::config::{Config, Topology};
use ::mcapi::{EndpointId, Node, Status, MAX_MSG_SIZE};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// The MCAPI domain of both nodes.
pub const DOMAIN: u32 = 0;
/// The server's node id.
pub const SERVER_NODE: u32 = 0;
/// The client's node id.
pub const CLIENT_NODE: u32 = 1;
/// The port of each side's first message endpoint (then 2, 3...: see the module doc).
pub const FIRST_PORT: u32 = 1;
/// Messages one node may send to one endpoint before mcapi's 16-bit sequence numbers wrap,
/// which mcapi does not survive (see the module doc).
pub const MESSAGES_PER_ENDPOINT: u64 = 1 << 16;
/// Priority of the benchmark messages (0 is the highest).
const PRIORITY: u32 = 0;
/// Longest a blocking send or receive waits before handing back to the pattern, which then
/// looks at the bootstrap channel and calls again.
const WAIT: Duration = Duration::from_millis(10);

/// The largest message MCAPI carries (`MCAPI_MAX_MSG_SIZE`): larger sizes are not run over it.
pub const MAX_SIZE: usize = MAX_MSG_SIZE;

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
///
/// # Errors
/// An IPv6 connection: mcapi's control plane listens on IPv4 only (`0.0.0.0`), so the
/// nodes could not reach each other, and finalizing a node whose topology address is IPv6
/// hangs (its control thread is woken by a connection to that address).
pub fn topology(server: IpAddr, client: IpAddr, ports: (u16, u16)) -> Result<Option<Topology>> {
    if server.is_loopback() && client.is_loopback() {
        return Ok(None);
    }
    if server.is_ipv6() || client.is_ipv6() {
        return Err(Error::failed(
            "mcapi's control plane listens on IPv4 only: give the server's IPv4 address to \
             measure MCAPI across hosts",
        ));
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
/// topology and provider, and at least `recv_buffers` receive buffers per endpoint.
pub fn config(
    setup: &Setup,
    topology: Option<Topology>,
    provider: &str,
    recv_buffers: usize,
) -> Result<Config> {
    let mut c =
        Config::from_env().map_err(|e| Error::failed(format!("MCAPI configuration: {e}")))?;
    c.job.clone_from(&setup.job);
    c.topology = topology;
    c.provider = Some(provider.to_owned());
    // A sender asks for as many credits as its own node's endpoints have buffers, so both
    // sides use the same count.
    c.recv_buffers = c.recv_buffers.max(recv_buffers);
    Ok(c)
}

/// One side's MCAPI node and message endpoint, connected to the peer's endpoint on the same
/// port.
pub struct McapiTransport {
    node: Node,
    port: u32,
    local: EndpointId,
    remote: Option<EndpointId>,
    provider: String,
    /// Payload of every message sent (read only).
    send_buf: Vec<u8>,
    /// Where every message is received (contents ignored).
    recv_buf: Vec<u8>,
    /// The single-host rendezvous directory of the job, removed at the end when empty.
    job_dir: Option<PathBuf>,
}

fn failed(what: &str, s: Status) -> Error {
    Error::failed(format!("MCAPI {what}: {s} ({})", s.name()))
}

impl McapiTransport {
    /// Starts node `<DOMAIN, node>` and creates its endpoint on [`FIRST_PORT`].
    ///
    /// # Errors
    /// The node could not start (e.g. the provider does not offer what MCAPI needs, or a
    /// control port is taken) or the endpoint could not be created.
    pub fn open(node: u32, config: Config) -> Result<McapiTransport> {
        let job_dir = config
            .topology
            .is_none()
            .then(|| config.runtime_dir.join(&config.job));
        let n = Node::initialize(DOMAIN, node, config)
            .map_err(|s| failed(&format!("initialize of node {DOMAIN}.{node}"), s))?;
        let local = match create_endpoint(&n, FIRST_PORT) {
            Ok(ep) => ep,
            Err(e) => {
                let _ = n.finalize();
                return Err(e);
            }
        };
        let pattern = (0..MAX_MSG_SIZE).map(|i| (i % 251) as u8).collect();
        Ok(McapiTransport {
            provider: n.provider().to_owned(),
            node: n,
            port: FIRST_PORT,
            local,
            remote: None,
            send_buf: pattern,
            recv_buf: vec![0; MAX_MSG_SIZE],
            job_dir,
        })
    }

    /// The port of the current endpoint.
    pub fn port(&self) -> u32 {
        self.port
    }

    /// Looks up the peer's endpoint on node `peer` and our port (waiting up to `timeout` for
    /// it to exist) and makes it the destination of sends.
    pub fn connect(&mut self, peer: u32, timeout: Duration) -> Result<()> {
        let port = self.port;
        let id = self
            .node
            .endpoint_get(DOMAIN, peer, port, Some(timeout))
            .map_err(|s| failed(&format!("endpoint_get of {DOMAIN}.{peer}.{port}"), s))?;
        self.remote = Some(id);
        Ok(())
    }

    /// Moves to a fresh endpoint on `port` (deleting the current one, whose messages have
    /// all been received); [`McapiTransport::connect`] then finds the peer's on that port.
    pub fn renew(&mut self, port: u32) -> Result<()> {
        let fresh = create_endpoint(&self.node, port)?;
        let old = std::mem::replace(&mut self.local, fresh);
        (self.port, self.remote) = (port, None);
        self.node
            .endpoint_delete(old)
            .map_err(|s| failed("endpoint_delete", s))
    }
}

/// A message endpoint on `port` whose blocking calls wait at most [`WAIT`].
fn create_endpoint(node: &Node, port: u32) -> Result<EndpointId> {
    let ep = node
        .endpoint_create(port)
        .map_err(|s| failed(&format!("endpoint_create on port {port}"), s))?;
    node.set_endpoint_timeout(ep, Some(WAIT))
        .map_err(|s| failed("set_endpoint_timeout", s))?;
    Ok(ep)
}

impl Drop for McapiTransport {
    fn drop(&mut self) {
        let _ = self.node.finalize();
        if let Some(dir) = &self.job_dir {
            // The peer may still have its socket there: only an empty directory goes.
            let _ = std::fs::remove_dir(dir);
        }
    }
}

impl Transport for McapiTransport {
    fn kind(&self) -> Kind {
        Kind::Mcapi
    }

    fn provider(&self) -> &str {
        &self.provider
    }

    fn waits(&self) -> bool {
        true
    }

    #[inline]
    fn try_send(&mut self, len: usize) -> Result<bool> {
        let Some(to) = self.remote else {
            return Err(Error::failed(
                "MCAPI send before the peer's endpoint is known",
            ));
        };
        match self
            .node
            .msg_send(self.local, to, &self.send_buf[..len], PRIORITY)
        {
            Ok(()) => Ok(true),
            Err(Status::MCAPI_TIMEOUT) => Ok(false),
            Err(s) => Err(failed(&format!("msg_send of {len} bytes"), s)),
        }
    }

    #[inline]
    fn try_recv(&mut self) -> Result<Option<usize>> {
        match self.node.msg_recv(self.local, &mut self.recv_buf) {
            Ok(n) => Ok(Some(n)),
            Err(Status::MCAPI_TIMEOUT) => Ok(None),
            Err(s) => Err(failed("msg_recv", s)),
        }
    }

    fn pending_sends(&self) -> usize {
        // msg_send returns once the payload is copied or injected.
        0
    }

    fn progress(&mut self) -> Result<()> {
        self.node
            .msg_available(self.local)
            .map(|_| ())
            .map_err(|s| failed("msg_available", s))
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
        assert!(topology(a, v6, (5000, 5001)).is_err());
    }
}
