//! Channel connect and open (`*_connect_i`, `*_open_i`) and the open's completion.

use super::data::SideData;
use super::endpoint::PeerOpen;
use super::handle::ChannelHandle;
use super::req::ChanReq;
use super::side::LocalPeer;
use crate::config::Compat;
use crate::control::{ChannelOp, ConnectEnd};
use crate::node::common::{endpoint_unreachable, lock, Result};
use crate::node::inner::NodeInner;
use crate::node::state::PeerRun;
use crate::node::state::Req;
use crate::node::Node;
use crate::semantics::channel::{ChannelKind, Direction};
use crate::semantics::endpoint_id::EndpointId;
use crate::semantics::request::RequestHandle;
use crate::semantics::Status;

impl Node {
    /// `mcapi_pktchan_connect_i`: connects `send` to `receive` as a packet channel. Any node
    /// may connect (also a third one); the result is known when this returns, so the
    /// request comes back completed.
    ///
    /// # Errors
    /// `MCAPI_ERR_ENDP_INVALID` (no such endpoint, or both the same),
    /// `MCAPI_ERR_CHAN_CONNECTED`, `MCAPI_ERR_CHAN_CLOSEPENDING`, `MCAPI_ERR_ENDP_GET_LIMIT`
    /// (other nodes send messages to the endpoint), `MCAPI_ERR_ATTR_INCOMPATIBLE`,
    /// `MCAPI_ERR_REQUEST_LIMIT`.
    pub fn pktchan_connect_i(
        &self,
        send: EndpointId,
        receive: EndpointId,
    ) -> Result<RequestHandle> {
        self.channel_connect(ChannelKind::Packet, send, receive)
    }

    /// `mcapi_sclchan_connect_i`: as [`Node::pktchan_connect_i`] for a scalar channel.
    ///
    /// # Errors
    /// As [`Node::pktchan_connect_i`].
    pub fn sclchan_connect_i(
        &self,
        send: EndpointId,
        receive: EndpointId,
    ) -> Result<RequestHandle> {
        self.channel_connect(ChannelKind::Scalar, send, receive)
    }

    fn channel_connect(
        &self,
        kind: ChannelKind,
        send: EndpointId,
        receive: EndpointId,
    ) -> Result<RequestHandle> {
        // The request is taken first, so that no failure after both endpoints are bound
        // can leave them connected.
        let h = {
            let mut st = self.inner.live_state()?;
            if send == receive {
                return Err(Status::MCAPI_ERR_ENDP_INVALID);
            }
            st.requests.alloc(Req::Chan(ChanReq::Connect))?
        };
        // An endpoint whose node cannot be reached (not running, finalized or dead) is no
        // valid endpoint: the connect's ERRORS table has no MCAPI_ERR_TRANSMISSION.
        let connected = self
            .inner
            .channel_call(
                send,
                ChannelOp::Connect {
                    peer: receive,
                    kind,
                    end: ConnectEnd::Send,
                },
            )
            .and_then(|sender| {
                // A connect is always answered with attributes.
                sender
                    .ok_or(Status::MCAPI_ERR_GENERAL)
                    .and_then(|sender| {
                        self.inner.channel_call(
                            receive,
                            ChannelOp::Connect {
                                peer: send,
                                kind,
                                end: ConnectEnd::Receive { sender },
                            },
                        )
                    })
                    .inspect_err(|_| {
                        if let Err(e) = self.inner.channel_call(send, ChannelOp::UndoConnect) {
                            log::warn!(
                                "connect of {send:?}: the receive side refused and the send \
                                 side's connect could not be undone: {e}"
                            );
                        }
                    })
            });
        let mut st = lock(&self.inner.state);
        match connected {
            Ok(_) => {
                st.requests.complete_if_pending(h, Status::MCAPI_SUCCESS, 0);
                Ok(h)
            }
            Err(e) => {
                log::info!("connect {send:?} -> {receive:?} failed: {e}");
                // Allocated above: releasing it cannot fail.
                _ = st.requests.release(h);
                Err(endpoint_unreachable(e))
            }
        }
    }

    /// `mcapi_pktchan_recv_open_i`: opens the receive side on local endpoint `endpoint`.
    /// The handle is usable once the request completes, which is when both sides are open.
    ///
    /// # Errors
    /// `MCAPI_ERR_ENDP_INVALID`, `MCAPI_ERR_CHAN_TYPE`, `MCAPI_ERR_CHAN_DIRECTION`,
    /// `MCAPI_ERR_CHAN_OPENPENDING`, `MCAPI_ERR_CHAN_OPEN`, `MCAPI_ERR_CHAN_CLOSEPENDING`,
    /// `MCAPI_ERR_REQUEST_LIMIT`.
    pub fn pktchan_recv_open_i(
        &self,
        endpoint: EndpointId,
    ) -> Result<(ChannelHandle, RequestHandle)> {
        self.channel_open(ChannelKind::Packet, Direction::Receive, endpoint)
    }

    /// `mcapi_pktchan_send_open_i`.
    ///
    /// # Errors
    /// As [`Node::pktchan_recv_open_i`].
    pub fn pktchan_send_open_i(
        &self,
        endpoint: EndpointId,
    ) -> Result<(ChannelHandle, RequestHandle)> {
        self.channel_open(ChannelKind::Packet, Direction::Send, endpoint)
    }

    /// `mcapi_sclchan_recv_open_i`.
    ///
    /// # Errors
    /// As [`Node::pktchan_recv_open_i`].
    pub fn sclchan_recv_open_i(
        &self,
        endpoint: EndpointId,
    ) -> Result<(ChannelHandle, RequestHandle)> {
        self.channel_open(ChannelKind::Scalar, Direction::Receive, endpoint)
    }

    /// `mcapi_sclchan_send_open_i`.
    ///
    /// # Errors
    /// As [`Node::pktchan_recv_open_i`].
    pub fn sclchan_send_open_i(
        &self,
        endpoint: EndpointId,
    ) -> Result<(ChannelHandle, RequestHandle)> {
        self.channel_open(ChannelKind::Scalar, Direction::Send, endpoint)
    }

    fn channel_open(
        &self,
        kind: ChannelKind,
        dir: Direction,
        endpoint: EndpointId,
    ) -> Result<(ChannelHandle, RequestHandle)> {
        let port = self.local_port(endpoint)?;
        // Reserved before taking the state lock: side locks are never taken under it.
        let handle = self.inner.reserve_side(kind, dir, port)?;
        let opened = (|| {
            let mut st = self.inner.live_state()?;
            if !st.requests.has_room() {
                return Err(Status::MCAPI_ERR_REQUEST_LIMIT);
            }
            let ep = st
                .endpoints
                .get_mut(&port)
                .ok_or(Status::MCAPI_ERR_ENDP_INVALID)?;
            ep.channel.binding.open(kind, dir)?;
            ep.channel.side = Some(handle);
            st.requests.alloc(Req::Chan(ChanReq::Open { port, handle }))
        })();
        match opened {
            Ok(req) => {
                self.drive_pending(req)?;
                Ok((handle, req))
            }
            Err(e) => {
                self.inner.free_side(handle);
                Err(e)
            }
        }
    }

    pub(super) fn advance_open(
        &self,
        request: RequestHandle,
        port: u32,
        handle: ChannelHandle,
    ) -> Result<()> {
        let (slot, generation, kind, dir) = handle.decode().ok_or(Status::MCAPI_ERR_GENERAL)?;
        // `gone`: the other endpoint, whose node died or finalized; if this endpoint is
        // still connected to it for this open, it is unconnected again (there is nothing
        // to close against).
        // The endpoint at `port` is the one this open was made on only while its side is
        // this open's: after a delete, a new endpoint at the port is none of its business.
        let fail = |status: Status, gone: Option<EndpointId>| -> Result<()> {
            let mut st = self.inner.live_state()?;
            if let Some(ep) = st
                .endpoints
                .get_mut(&port)
                .filter(|ep| ep.channel.side == Some(handle))
            {
                ep.channel.binding.abandon_open();
                let ours = gone.is_some() && ep.channel.peer == gone;
                if ours && ep.channel.binding.peer_lost_before_open() {
                    ep.channel.peer = None;
                }
                ep.channel.side = None;
            }
            st.requests.complete_if_pending(request, status, 0);
            drop(st);
            self.inner.free_side(handle);
            Ok(())
        };
        // What the endpoint knows now.
        let (connected, peer_id, peer_info, max_payload, timeout) = {
            let st = self.inner.live_state()?;
            let Some(ep) = st
                .endpoints
                .get(&port)
                .filter(|ep| ep.channel.side == Some(handle))
            else {
                drop(st);
                return fail(Status::MCAPI_ERR_ENDP_DELETED, None);
            };
            let b = &ep.channel.binding;
            match b.early_open_status(kind, dir) {
                Err(e) => {
                    drop(st);
                    return fail(e, None);
                }
                Ok(connected) => (
                    connected,
                    ep.channel.peer,
                    b.peer_info().cloned(),
                    ep.max_payload,
                    ep.timeout,
                ),
            }
        };
        let Some(peer_id) = peer_id.filter(|_| connected) else {
            return Ok(());
        };
        let local =
            (peer_id.domain(), peer_id.node()) == (self.inner.domain_id, self.inner.node_id);
        let peer = if local {
            None
        } else {
            self.inner
                .live_state()?
                .peer_run(peer_id.domain(), peer_id.node())
        };
        // First time: open our fabric part; then tell the other side (again if a connect
        // that failed half-way had us announce to another endpoint).
        let announce = {
            let mut g = self.inner.channels.sides[slot].lock();
            let Some(side) = g.as_mut().filter(|s| s.generation == generation) else {
                return Ok(());
            };
            if side.io.is_none() {
                let io = match self.inner.open_side_io(kind, dir, max_payload, slot, local) {
                    Ok(io) => io,
                    Err(e) => {
                        drop(g);
                        log::info!("open on port {port}: MCAPI_ERR_GENERAL: its fabric part: {e}");
                        return fail(Status::MCAPI_ERR_GENERAL, None);
                    }
                };
                if let (SideData::Recv(r), ChannelKind::Packet) = (&io.data, kind) {
                    let mut pools = lock(&self.inner.channels.pools);
                    for m in std::iter::once(&r.pool).chain(&r.hub_slots) {
                        pools.push((m.addr(), m.addr() + m.len(), slot));
                    }
                }
                side.io = Some(io);
                side.timeout = timeout;
                side.max_payload = match kind {
                    ChannelKind::Packet => max_payload,
                    ChannelKind::Scalar => 8,
                };
            }
            if side.announced_to == Some(peer_id) {
                None
            } else {
                side.announced_to = Some(peer_id);
                if kind == ChannelKind::Packet && dir == Direction::Send {
                    // The endpoint's attribute may have changed since a first announce.
                    side.max_payload = max_payload;
                }
                side.io.as_ref().and_then(|io| {
                    let (route, hub_addr) = match (&io.hub, &io.packet_hub) {
                        (Some(h), _) => (h.route, Vec::new()),
                        (None, Some(h)) => (h.route, h.hub.endpoint().address().to_vec()),
                        (None, None) => (0, Vec::new()),
                    };
                    Some((io.ep.as_ref()?.address().to_vec(), route, hub_addr))
                })
            }
        };
        // Compatibility mode: the other side may have opened, sent and closed before this
        // side had its receive part; its close is taken now.
        let closed_before = self
            .inner
            .live_state()?
            .endpoints
            .get(&port)
            .filter(|ep| ep.channel.side == Some(handle))
            .and_then(|ep| ep.channel.binding.peer_sent());
        if let Some(sent) = closed_before {
            self.inner.other_side_closed(handle, sent);
        }
        if let Some((addr, route, hub_addr)) = announce {
            // No liveness pre-check here: `channel_call` fails at once for a run known lost,
            // and otherwise finds a dead node itself (its closed control connection, or 10 s
            // unreachable).
            let credits = match (dir, kind) {
                (Direction::Receive, ChannelKind::Packet) => self.inner.config.recv_buffers as u32,
                (Direction::Receive, ChannelKind::Scalar) => self.inner.scalar_capacity(),
                (Direction::Send, _) => 0,
            };
            // A local endpoint's id always encodes.
            let from = match self.inner.endpoint_id(port) {
                Ok(from) => from,
                Err(e) => return fail(e, None),
            };
            let opened = ChannelOp::Opened {
                from,
                credits,
                route,
                max_payload: max_payload as u64,
                fabric_addr: addr,
                hub_addr,
            };
            if let Err(e) = self.inner.channel_call(peer_id, opened) {
                // Its node answered the connect, so one that cannot be reached now (the
                // call's 10 s to reach it) or is finalizing is gone.
                return match e {
                    Status::MCAPI_ERR_TRANSMISSION
                    | Status::MCAPI_TIMEOUT
                    | Status::MCAPI_ERR_NODE_NOTINIT => {
                        log::info!("open on port {port}: MCAPI_ERR_GENERAL: {peer_id:?}'s node is gone ({e})");
                        fail(Status::MCAPI_ERR_GENERAL, Some(peer_id))
                    }
                    e => fail(e, None),
                };
            }
        }
        let info = match peer_info {
            Some(info) => info,
            None if peer.is_some() && !self.inner.peer_alive(peer) => {
                // It may have opened (and gone) since we looked: then the open completes
                // and the data path reports the loss.
                let opened = self
                    .inner
                    .live_state()?
                    .endpoints
                    .get(&port)
                    .and_then(|ep| {
                        (ep.channel.peer == Some(peer_id))
                            .then(|| ep.channel.binding.peer_info().cloned())
                            .flatten()
                    });
                match opened {
                    Some(info) => info,
                    None => {
                        log::info!(
                            "open on port {port}: MCAPI_ERR_GENERAL: {peer_id:?}'s node is gone"
                        );
                        return fail(Status::MCAPI_ERR_GENERAL, Some(peer_id));
                    }
                }
            }
            None if self.inner.config.compat == Compat::Mca => {
                // The reference's reading: this side's open completes on its own; the
                // other side's open, when it comes, finishes the connection
                // (`finish_early_open`), and what is sent meanwhile waits for it.
                return match self
                    .inner
                    .open_early(port, handle, payload_of(kind, max_payload))
                {
                    Ok(()) => {
                        self.inner.live_state()?.requests.complete_if_pending(
                            request,
                            Status::MCAPI_SUCCESS,
                            0,
                        );
                        // Its open may have come meanwhile, before this side was marked.
                        self.inner.finish_early_open(port, handle);
                        Ok(())
                    }
                    Err(e) => fail(e, None),
                };
            }
            None => return Ok(()),
        };
        // Both sides open: finish the fabric part and complete.
        if let Err(e) = self
            .inner
            .connect_opened(port, handle, peer, peer_id, &info)
        {
            return fail(e, None);
        }
        let mut st = self.inner.live_state()?;
        if let Some(ep) = st.endpoints.get_mut(&port) {
            ep.channel.binding.try_finish_open();
        }
        st.requests
            .complete_if_pending(request, Status::MCAPI_SUCCESS, 0);
        Ok(())
    }
}

/// The payload limit a side of `kind` uses, given its endpoint's.
fn payload_of(kind: ChannelKind, max_payload: usize) -> usize {
    match kind {
        ChannelKind::Packet => max_payload,
        ChannelKind::Scalar => 8,
    }
}

impl NodeInner {
    /// Both sides are open: completes side `handle` on local endpoint `port` with what the
    /// other side (`peer_id`, on run `peer` of its node, or on this node) announced, and
    /// lets data calls through. `Err`: the open fails with that status.
    fn connect_opened(
        &self,
        port: u32,
        handle: ChannelHandle,
        peer: Option<PeerRun>,
        peer_id: EndpointId,
        info: &PeerOpen,
    ) -> std::result::Result<(), Status> {
        let (slot, generation, kind, dir) = handle.decode().ok_or(Status::MCAPI_ERR_GENERAL)?;
        let local = (peer_id.domain(), peer_id.node()) == (self.domain_id, self.node_id);
        // A same-node other side is reached through its slot (it set its handle before it
        // announced its open).
        let local_peer = if local {
            let other = self
                .live_state()?
                .endpoints
                .get(&peer_id.port())
                .and_then(|ep| ep.channel.side)
                .and_then(|h| h.decode());
            match other {
                Some((slot, generation, ..)) => Some(LocalPeer {
                    sides: self.channels.sides.clone(),
                    slot,
                    generation,
                }),
                None => {
                    log::info!("open on port {port}: MCAPI_ERR_GENERAL: {peer_id:?} has no side");
                    return Err(Status::MCAPI_ERR_GENERAL);
                }
            }
        } else {
            None
        };
        let mut g = self.channels.sides[slot].lock();
        let Some(side) = g.as_mut().filter(|s| s.generation == generation) else {
            return Ok(());
        };
        if side.ready && !side.early {
            // Connected already: another thread driving the same open, or (compatibility
            // mode) the other side's `Opened` and our own call both found it opened early
            // and got here one after the other. Connecting again would add the peer's
            // credits twice and replace credit receives still posted.
            return Ok(());
        }
        side.peer = peer;
        // (Not for a side opened early: its queued packets are staged at that stride. The
        // connect checked that the receiver takes the sender's size anyway.)
        if kind == ChannelKind::Packet && dir == Direction::Send && !side.early {
            side.max_payload = side.max_payload.min(info.max_payload);
        }
        let payload = side.max_payload;
        let Some(io) = side.io.as_mut() else {
            return Ok(());
        };
        if let Err(e) = self.connect_side_io(io, kind, payload, info, local) {
            drop(g);
            log::info!("open on port {port}: MCAPI_ERR_GENERAL: reaching the other side: {e}");
            return Err(Status::MCAPI_ERR_GENERAL);
        }
        side.local = local_peer;
        side.ready = true;
        if std::mem::take(&mut side.early) {
            // Sent before the other side opened (compatibility mode): they go now.
            if let Some(io) = side.io.as_mut() {
                io.advance_queued(payload, false);
            }
            side.progress();
        }
        Ok(())
    }

    /// Compatibility mode: side `handle` completes its open before the other side opened.
    /// A send side gets its staging now and no credits (what it sends waits for the other
    /// side's); data calls are let through.
    fn open_early(
        &self,
        port: u32,
        handle: ChannelHandle,
        payload: usize,
    ) -> std::result::Result<(), Status> {
        let (slot, generation, kind, dir) = handle.decode().ok_or(Status::MCAPI_ERR_GENERAL)?;
        let mut g = self.channels.sides[slot].lock();
        let Some(side) = g.as_mut().filter(|s| s.generation == generation) else {
            return Ok(());
        };
        if side.ready {
            return Ok(());
        }
        let Some(io) = side.io.as_mut() else {
            return Err(Status::MCAPI_ERR_GENERAL);
        };
        if dir == Direction::Send {
            if let Err(e) = self.early_send_data(io, kind, payload) {
                log::info!("open on port {port}: MCAPI_ERR_GENERAL: its staging: {e}");
                return Err(Status::MCAPI_ERR_GENERAL);
            }
        }
        side.early = true;
        side.ready = true;
        Ok(())
    }

    /// Compatibility mode: the other side of an early-opened side `handle` (on local
    /// endpoint `port`) opened, or may have: connects it (once; a no-op otherwise).
    pub(super) fn finish_early_open(&self, port: u32, handle: ChannelHandle) {
        let Some((slot, generation, ..)) = handle.decode() else {
            return;
        };
        let early = self.channels.sides[slot]
            .lock()
            .as_ref()
            .is_some_and(|s| s.generation == generation && s.early);
        if !early {
            return;
        }
        let known = self.live_state().ok().and_then(|st| {
            let ep = st.endpoints.get(&port)?;
            let peer_id = ep.channel.peer?;
            let info = ep.channel.binding.peer_info()?.clone();
            let local = (peer_id.domain(), peer_id.node()) == (self.domain_id, self.node_id);
            let peer = if local {
                None
            } else {
                st.peer_run(peer_id.domain(), peer_id.node())
            };
            Some((peer_id, info, peer))
        });
        let Some((peer_id, info, peer)) = known else {
            return;
        };
        match self.connect_opened(port, handle, peer, peer_id, &info) {
            Ok(()) => {
                if let Ok(mut st) = self.live_state() {
                    if let Some(ep) = st.endpoints.get_mut(&port) {
                        ep.channel.binding.try_finish_open();
                    }
                }
            }
            Err(e) => {
                // The application holds a completed open: its data calls fail from now on.
                let mut g = self.channels.sides[slot].lock();
                if let Some(side) = g.as_mut().filter(|s| s.generation == generation) {
                    side.early = false;
                    side.peer_gone = Some(e);
                }
            }
        }
        self.flush_completed();
    }
}
