//! MCAPI messages: the layer under test, through the `mcapi` crate's Rust API.
//!
//! Each side runs one MCAPI node (server node 0, client node 1, domain 0) with one message
//! endpoint (port [`PORT`]), and the benchmark messages are MCAPI messages at priority 0: blocking
//! `msg_send` (which copies or injects the payload and blocks while the receiver has no free
//! buffer: credit flow control) and blocking `msg_recv` (which copies the message out of its
//! receive slot). Both wait in MCAPI's own way (spinning on the node's CQ, then sleeping);
//! the endpoint timeout ([`WAIT`]) only bounds each call so the pattern can look at the
//! bootstrap channel while it waits.
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
use std::time::Duration;

/// The MCAPI domain of both nodes.
pub const DOMAIN: u32 = 0;
/// The server's node id.
pub const SERVER_NODE: u32 = 0;
/// The client's node id.
pub const CLIENT_NODE: u32 = 1;
/// The port of each side's message endpoint.
pub const PORT: u32 = 1;
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
    local: EndpointId,
    remote: Option<EndpointId>,
    provider: String,
    /// Payload of every message sent (read only).
    send_buf: Vec<u8>,
    /// Where every message is received (contents ignored).
    recv_buf: Vec<u8>,
}

fn failed(what: &str, s: Status) -> Error {
    Error::failed(format!("MCAPI {what}: {s} ({})", s.name()))
}

impl McapiTransport {
    /// Starts node `<DOMAIN, node>` and creates its endpoint on [`PORT`].
    ///
    /// # Errors
    /// The node could not start (e.g. the provider does not offer what MCAPI needs, or a
    /// control port is taken) or the endpoint could not be created.
    pub fn open(node: u32, config: Config) -> Result<McapiTransport> {
        let n = Node::initialize(DOMAIN, node, config)
            .map_err(|s| failed(&format!("initialize of node {DOMAIN}.{node}"), s))?;
        let local = match create_endpoint(&n, PORT) {
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
            local,
            remote: None,
            send_buf: pattern,
            recv_buf: vec![0; MAX_MSG_SIZE],
        })
    }

    /// Looks up the peer's endpoint on node `peer` and [`PORT`] (waiting up to `timeout` for
    /// it to exist) and makes it the destination of sends.
    pub fn connect(&mut self, peer: u32, timeout: Duration) -> Result<()> {
        let id = self
            .node
            .endpoint_get(DOMAIN, peer, PORT, Some(timeout))
            .map_err(|s| failed(&format!("endpoint_get of {DOMAIN}.{peer}.{PORT}"), s))?;
        self.remote = Some(id);
        Ok(())
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
        // mcapi removes the job's rendezvous directory with its last node.
        let _ = self.node.finalize();
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
        let t = topology(a, v6, (5000, 5001)).unwrap().unwrap();
        let c = t.get(DOMAIN, CLIENT_NODE).unwrap();
        assert_eq!((c.host.as_str(), c.port), ("fd00::2", 5001));
    }
}
