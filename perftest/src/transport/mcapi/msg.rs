//! MCAPI messages: each node receives on one message endpoint (port [`PORT`]) and sends from
//! another ([`SEND_PORT`]), and the benchmark messages are MCAPI messages at priority 0:
//! blocking `msg_send` (which injects or copies the payload, or for a rendezvous message
//! on shm lets the receiver read it in place, and blocks while the receiver has no free
//! buffer: credit flow control) and blocking `msg_recv` (which copies the message out of
//! its receive slot, or reads a rendezvous message straight into its buffer).

use super::{failed, OwnedNode, DOMAIN, WAIT};
use crate::error::{Error, Result};
use crate::transport::{Kind, Transport};
use ::mcapi::{EndpointId, Node, Status, MAX_MSG_SIZE};
use std::time::Duration;

/// The port of each side's receiving message endpoint.
pub const PORT: u32 = 1;
/// The port each side sends from: an endpoint without a timeout, MCAPI's default (a send
/// with a timeout stages a large message, one without may be read in place; the receiving
/// endpoint's timeout lets the pattern look at the peer between calls).
const SEND_PORT: u32 = 2;
/// Priority of the benchmark messages (0 is the highest).
const PRIORITY: u32 = 0;

/// One side's MCAPI node and message endpoint, connected to the peer's endpoint on the same
/// port.
pub struct MsgTransport {
    node: OwnedNode,
    local: EndpointId,
    /// Where messages are sent from (no timeout).
    sender: EndpointId,
    remote: Option<EndpointId>,
    provider: String,
    /// Payload of every message sent (read only).
    send_buf: Vec<u8>,
    /// Where every message is received (contents ignored).
    recv_buf: Vec<u8>,
}

/// Size of the send and receive buffers until a larger message comes.
const INITIAL_BUF: usize = 64 * 1024;

/// `len` bytes of the payload pattern.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

impl MsgTransport {
    /// Creates the node's message endpoint on [`PORT`].
    ///
    /// # Errors
    /// The endpoint could not be created.
    pub fn open(n: OwnedNode) -> Result<MsgTransport> {
        let local = create_endpoint(&n, PORT)?;
        let sender = n
            .endpoint_create(SEND_PORT)
            .map_err(|s| failed(&format!("endpoint_create on port {SEND_PORT}"), s))?;
        // Buffers start at the eager size and grow to the largest message seen (in the
        // warmup): 16 MiB buffers from the start made eager messages on shm 3x slower.
        let pattern = pattern(INITIAL_BUF);
        Ok(MsgTransport {
            provider: n.provider().to_owned(),
            node: n,
            local,
            sender,
            remote: None,
            send_buf: pattern,
            recv_buf: vec![0; INITIAL_BUF],
        })
    }

    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// The node's eager/rendezvous threshold.
    pub fn eager_max(&self) -> usize {
        self.node.eager_max()
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
pub(super) fn create_endpoint(node: &Node, port: u32) -> Result<EndpointId> {
    let ep = node
        .endpoint_create(port)
        .map_err(|s| failed(&format!("endpoint_create on port {port}"), s))?;
    node.set_endpoint_timeout(ep, Some(WAIT))
        .map_err(|s| failed("set_endpoint_timeout", s))?;
    Ok(ep)
}

impl Transport for MsgTransport {
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
        if len > self.send_buf.len() {
            self.send_buf = pattern(len.min(MAX_MSG_SIZE));
        }
        match self
            .node
            .msg_send(self.sender, to, &self.send_buf[..len], PRIORITY)
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
            // The message stays queued: take it with a larger buffer.
            Err(Status::MCAPI_ERR_MSG_TRUNCATED) if self.recv_buf.len() < MAX_MSG_SIZE => {
                let grown = (self.recv_buf.len() * 2).min(MAX_MSG_SIZE);
                self.recv_buf.resize(grown, 0);
                self.try_recv()
            }
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
