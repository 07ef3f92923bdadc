//! MCAPI packet and scalar channels: two unidirectional channels between the nodes, one
//! from the client's [`TX_PORT`] endpoint to the server's [`RX_PORT`] endpoint, one from
//! the server's [`TX_PORT`] to the client's [`RX_PORT`]. The client connects both (any node
//! may connect a channel) and opens its two sides; the server then opens its sides.
//!
//! - Packets ([`PktTransport`]): blocking `pktchan_send` (injected when small, else zero copy
//!   from the send buffer where the provider allows) or, for the sender of pkt-bw's windows
//!   of packets above the inject size, `pktchan_send_i` (zero copy from a send buffer that
//!   lives for the whole run, the request completing with the send), whose requests are reaped
//!   in order, at most a window of them outstanding; `pktchan_recv` hands out a packet in
//!   the receive pool, given back at once with `pktchan_release`. The endpoints'
//!   `MAX_PAYLOAD_SIZE` is set to the largest size of the run before the connect; the pool
//!   depth is the node's receive buffer count (at least the window plus a few).
//! - Scalars ([`SclTransport`]): `sclchan_send`/`sclchan_recv` of 8-byte values, each the
//!   channel's running count, checked on arrival (a lost or reordered scalar is an error).
//!   Acknowledgements are scalars too.

use super::msg::create_endpoint;
use super::{failed, send_pattern, OwnedNode, SendWindow, CLIENT_NODE, DOMAIN};
use crate::error::{Error, Result};
use crate::transport::{Kind, Transport};
use ::mcapi::attributes::EndpointAttribute;
use ::mcapi::{ChannelHandle, EndpointId, RequestHandle, SendBuffer, Status, MAX_PKT_SIZE};
use std::time::Duration;

/// The port of each node's sending channel endpoint.
pub const TX_PORT: u32 = 2;
/// The port of each node's receiving channel endpoint.
pub const RX_PORT: u32 = 3;
/// Width of a scalar: uint64.
const SCALAR: usize = 8;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ChannelKind {
    Packet,
    Scalar,
}

/// One node's two channel ends: its endpoints, then (once connected and opened) the send
/// and receive handles.
pub struct ChannelPair {
    node: OwnedNode,
    kind: ChannelKind,
    provider: String,
    tx_ep: EndpointId,
    rx_ep: EndpointId,
    tx: Option<ChannelHandle>,
    rx: Option<ChannelHandle>,
    /// Open requests not completed yet.
    opening: Vec<RequestHandle>,
}

impl ChannelPair {
    /// Creates the two endpoints; for packets, with their `MAX_PAYLOAD_SIZE` (what this side
    /// sends, what it receives).
    fn open(node: OwnedNode, kind: ChannelKind, payload: Option<(usize, usize)>) -> Result<Self> {
        let tx_ep = create_endpoint(&node, TX_PORT)?;
        let rx_ep = create_endpoint(&node, RX_PORT)?;
        if kind == ChannelKind::Packet {
            // A blocking pktchan_send is zero copy only without a timeout (a timeout must not
            // leave the provider reading the buffer); the receiver's timeout is enough for
            // the pattern to look at the bootstrap channel now and then.
            node.set_endpoint_timeout(tx_ep, None)
                .map_err(|s| failed("set_endpoint_timeout", s))?;
        }
        if let Some((tx, rx)) = payload {
            for (ep, bytes) in [(tx_ep, tx), (rx_ep, rx)] {
                let bytes = bytes.clamp(1, MAX_PKT_SIZE);
                node.endpoint_set_attribute(
                    ep,
                    EndpointAttribute::MaxPayloadSize as u32,
                    bytes as u64,
                )
                .map_err(|s| failed(&format!("MAX_PAYLOAD_SIZE of {bytes} bytes"), s))?;
            }
        }
        Ok(ChannelPair {
            provider: node.provider().to_owned(),
            node,
            kind,
            tx_ep,
            rx_ep,
            tx: None,
            rx: None,
            opening: Vec::with_capacity(2),
        })
    }

    pub fn provider(&self) -> &str {
        &self.provider
    }

    fn is_client(&self) -> bool {
        self.node.node_id() == CLIENT_NODE
    }

    /// Client: looks up the server's endpoints on node `peer`, connects both channels and
    /// opens this side of each. Server: nothing (it opens on the client's word).
    pub fn connect(&mut self, peer: u32, timeout: Duration) -> Result<()> {
        if !self.is_client() {
            return Ok(());
        }
        let get = |port: u32| {
            self.node
                .endpoint_get(DOMAIN, peer, port, Some(timeout))
                .map_err(|s| failed(&format!("endpoint_get of {DOMAIN}.{peer}.{port}"), s))
        };
        let (peer_rx, peer_tx) = (get(RX_PORT)?, get(TX_PORT)?);
        for (from, to) in [(self.tx_ep, peer_rx), (peer_tx, self.rx_ep)] {
            let req = match self.kind {
                ChannelKind::Packet => self.node.pktchan_connect_i(from, to),
                ChannelKind::Scalar => self.node.sclchan_connect_i(from, to),
            }
            .map_err(|s| failed("channel connect", s))?;
            self.node
                .wait(req, None, Some(timeout))
                .map_err(|s| failed("channel connect", s))?;
        }
        self.open_sides()
    }

    /// Opens this side of both channels (they complete once the other side opened too). An
    /// open that failed at once (the provider cannot carry channels) is reported now.
    fn open_sides(&mut self) -> Result<()> {
        let (tx, tx_req) = match self.kind {
            ChannelKind::Packet => self.node.pktchan_send_open_i(self.tx_ep),
            ChannelKind::Scalar => self.node.sclchan_send_open_i(self.tx_ep),
        }
        .map_err(|s| failed("send side open", s))?;
        self.opening.push(tx_req);
        let (rx, rx_req) = match self.kind {
            ChannelKind::Packet => self.node.pktchan_recv_open_i(self.rx_ep),
            ChannelKind::Scalar => self.node.sclchan_recv_open_i(self.rx_ep),
        }
        .map_err(|s| failed("receive side open", s))?;
        self.opening.push(rx_req);
        (self.tx, self.rx) = (Some(tx), Some(rx));
        let mut pending = Vec::with_capacity(2);
        for req in self.opening.drain(..) {
            match self.node.test(req, None) {
                Ok(Some(_)) => {}
                Ok(None) => pending.push(req),
                Err(s) => return Err(failed("channel open", s)),
            }
        }
        self.opening = pending;
        Ok(())
    }

    /// Waits until this side's opens have completed (both sides of both channels open).
    pub fn wait_open(&mut self, timeout: Duration) -> Result<()> {
        for req in self.opening.drain(..) {
            self.node
                .wait(req, None, Some(timeout))
                .map_err(|s| failed("channel open", s))?;
        }
        Ok(())
    }

    /// Server: opens this side of both channels and waits until they are open.
    pub fn open_and_wait(&mut self, timeout: Duration) -> Result<()> {
        self.open_sides()?;
        self.wait_open(timeout)
    }

    fn handles(&self) -> Result<(ChannelHandle, ChannelHandle)> {
        match (self.tx, self.rx) {
            (Some(tx), Some(rx)) if self.opening.is_empty() => Ok((tx, rx)),
            _ => Err(Error::failed("MCAPI channel used before it is open")),
        }
    }
}

/// Packet channels as the benchmark's transport.
pub struct PktTransport {
    pub(super) chan: ChannelPair,
    /// Payload of every packet sent (read only, never freed: zero-copy `pktchan_send_i`
    /// sends from it).
    send_buf: &'static [u8],
    /// Windowed `pktchan_send_i` sends (else blocking `pktchan_send`).
    window: Option<SendWindow>,
}

impl PktTransport {
    /// Creates the endpoints for packets of up to `tx` bytes sent and `rx` bytes received
    /// (each capped at `MCAPI_MAX_PKT_SIZE`); `windowed`: sends are `pktchan_send_i`, at most
    /// `window` of them outstanding.
    ///
    /// # Errors
    /// An endpoint could not be created or configured.
    pub fn open(
        node: OwnedNode,
        tx: usize,
        rx: usize,
        windowed: bool,
        window: usize,
    ) -> Result<PktTransport> {
        let tx = tx.min(MAX_PKT_SIZE);
        let chan = ChannelPair::open(node, ChannelKind::Packet, Some((tx, rx)))?;
        Ok(PktTransport {
            chan,
            send_buf: send_pattern(tx),
            window: windowed.then(|| SendWindow::new(window)),
        })
    }

    /// Packets up to this size go by blocking `pktchan_send` (the provider injects them).
    pub fn inject_size(&self) -> usize {
        self.chan.node.inject_size()
    }
}

impl Transport for PktTransport {
    fn kind(&self) -> Kind {
        Kind::Mcapi
    }

    fn provider(&self) -> &str {
        &self.chan.provider
    }

    fn waits(&self) -> bool {
        true
    }

    #[inline]
    fn try_send(&mut self, len: usize) -> Result<bool> {
        let (tx, _) = self.chan.handles()?;
        let node = &self.chan.node;
        // Packets the provider injects go by blocking `pktchan_send`, which injects them and
        // returns at once (as msg-bw's eager messages go by `msg_send`): a request per
        // packet would only add its bookkeeping.
        let window = self.window.as_mut().filter(|_| len > node.inject_size());
        let Some(window) = window else {
            return match node.pktchan_send(tx, &self.send_buf[..len]) {
                Ok(()) => Ok(true),
                Err(Status::MCAPI_TIMEOUT) => Ok(false),
                Err(s) => Err(failed(&format!("pktchan_send of {len} bytes"), s)),
            };
        };
        let buf = SendBuffer::from_static(&self.send_buf[..len]);
        window.send(node, "pktchan_send_i", len, || {
            node.pktchan_send_i_zero_copy(tx, buf)
        })
    }

    #[inline]
    fn try_recv(&mut self) -> Result<Option<usize>> {
        let (_, rx) = self.chan.handles()?;
        let node = &self.chan.node;
        match node.pktchan_recv(rx) {
            Ok(p) => {
                let len = p.len();
                node.pktchan_release(p)
                    .map_err(|s| failed("pktchan_release", s))?;
                Ok(Some(len))
            }
            Err(Status::MCAPI_TIMEOUT) => Ok(None),
            Err(s) => Err(failed("pktchan_recv", s)),
        }
    }

    fn pending_sends(&self) -> usize {
        // Blocking pktchan_send returns once the provider is done with the data.
        self.window.as_ref().map_or(0, |w| w.in_flight.len())
    }

    fn progress(&mut self) -> Result<()> {
        if let Some(window) = self.window.as_mut() {
            window.reap(&self.chan.node, 0, "pktchan_send_i")?;
        }
        let (_, rx) = self.chan.handles()?;
        self.chan
            .node
            .pktchan_available(rx)
            .map(|_| ())
            .map_err(|s| failed("pktchan_available", s))
    }
}

/// Scalar channels of uint64 as the benchmark's transport.
pub struct SclTransport {
    pub(super) chan: ChannelPair,
    /// The value of the next scalar sent, and of the next expected.
    next_tx: u64,
    next_rx: u64,
}

impl SclTransport {
    /// Creates the endpoints.
    ///
    /// # Errors
    /// An endpoint could not be created.
    pub fn open(node: OwnedNode) -> Result<SclTransport> {
        Ok(SclTransport {
            chan: ChannelPair::open(node, ChannelKind::Scalar, None)?,
            next_tx: 0,
            next_rx: 0,
        })
    }
}

impl Transport for SclTransport {
    fn kind(&self) -> Kind {
        Kind::Mcapi
    }

    fn provider(&self) -> &str {
        &self.chan.provider
    }

    fn waits(&self) -> bool {
        true
    }

    fn ack_len(&self) -> usize {
        SCALAR
    }

    #[inline]
    fn try_send(&mut self, len: usize) -> Result<bool> {
        if len != SCALAR {
            return Err(Error::failed(format!(
                "MCAPI scalars are {SCALAR} bytes, not {len}"
            )));
        }
        let (tx, _) = self.chan.handles()?;
        match self.chan.node.sclchan_send(tx, self.next_tx, SCALAR) {
            Ok(()) => {
                self.next_tx = self.next_tx.wrapping_add(1);
                Ok(true)
            }
            Err(Status::MCAPI_TIMEOUT) => Ok(false),
            Err(s) => Err(failed("sclchan_send of a uint64", s)),
        }
    }

    #[inline]
    fn try_recv(&mut self) -> Result<Option<usize>> {
        let (_, rx) = self.chan.handles()?;
        match self.chan.node.sclchan_recv(rx, SCALAR) {
            Ok(v) if v == self.next_rx => {
                self.next_rx = self.next_rx.wrapping_add(1);
                Ok(Some(SCALAR))
            }
            Ok(v) => Err(Error::failed(format!(
                "MCAPI scalar number {} arrived with the value {v}: lost or out of order",
                self.next_rx
            ))),
            Err(Status::MCAPI_TIMEOUT) => Ok(None),
            Err(s) => Err(failed("sclchan_recv of a uint64", s)),
        }
    }

    fn pending_sends(&self) -> usize {
        // sclchan_send returns once the scalar is injected.
        0
    }

    fn progress(&mut self) -> Result<()> {
        let (_, rx) = self.chan.handles()?;
        self.chan
            .node
            .sclchan_available(rx)
            .map(|_| ())
            .map_err(|s| failed("sclchan_available", s))
    }
}
