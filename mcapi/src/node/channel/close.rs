//! Channel close (`*_close_i`), finalize's notices, and freeing or retiring sides.

use super::data::SideData;
use super::endpoint::EndpointChannel;
use super::handle::ChannelHandle;
use super::req::ChanReq;
use super::side_io::SideIo;
use crate::node::common::{lock, Result};
use crate::node::inner::NodeInner;
use crate::node::state::Req;
use crate::node::Node;
use crate::semantics::channel::{ChannelKind, Direction, Phase};
use crate::semantics::channel_side::Posting;
use crate::semantics::endpoint_id::EndpointId;
use crate::semantics::request::RequestHandle;
use crate::semantics::Status;
use std::sync::Arc;
use std::time::Duration;

impl Node {
    /// `mcapi_pktchan_recv_close_i`: closes the receive side; packets not yet received are
    /// discarded, packets the application holds stay valid until released. Completes when
    /// both sides have closed.
    ///
    /// # Errors
    /// `MCAPI_ERR_CHAN_INVALID`, `MCAPI_ERR_CHAN_TYPE`, `MCAPI_ERR_CHAN_DIRECTION`,
    /// `MCAPI_ERR_CHAN_NOTOPEN`, `MCAPI_ERR_REQUEST_LIMIT`.
    pub fn pktchan_recv_close_i(&self, handle: ChannelHandle) -> Result<RequestHandle> {
        self.channel_close(handle, ChannelKind::Packet, Direction::Receive)
    }

    /// `mcapi_pktchan_send_close_i`: closes the send side; packets sent stay to be received.
    ///
    /// # Errors
    /// As [`Node::pktchan_recv_close_i`].
    pub fn pktchan_send_close_i(&self, handle: ChannelHandle) -> Result<RequestHandle> {
        self.channel_close(handle, ChannelKind::Packet, Direction::Send)
    }

    /// `mcapi_sclchan_recv_close_i`.
    ///
    /// # Errors
    /// As [`Node::pktchan_recv_close_i`].
    pub fn sclchan_recv_close_i(&self, handle: ChannelHandle) -> Result<RequestHandle> {
        self.channel_close(handle, ChannelKind::Scalar, Direction::Receive)
    }

    /// `mcapi_sclchan_send_close_i`.
    ///
    /// # Errors
    /// As [`Node::pktchan_recv_close_i`].
    pub fn sclchan_send_close_i(&self, handle: ChannelHandle) -> Result<RequestHandle> {
        self.channel_close(handle, ChannelKind::Scalar, Direction::Send)
    }

    fn channel_close(
        &self,
        handle: ChannelHandle,
        kind: ChannelKind,
        dir: Direction,
    ) -> Result<RequestHandle> {
        drop(self.inner.live_state()?);
        let (slot, generation, k, d) = handle.decode().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
        if k != kind {
            return Err(Status::MCAPI_ERR_CHAN_TYPE);
        }
        if d != dir {
            return Err(Status::MCAPI_ERR_CHAN_DIRECTION);
        }
        let (port, ready) = {
            let g = self.inner.channels.sides[slot].lock();
            let side = g
                .as_ref()
                .filter(|s| s.generation == generation)
                .ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
            if side.io.is_none() || side.closed {
                return Err(Status::MCAPI_ERR_CHAN_NOTOPEN);
            }
            // Open for the application (data calls allowed) while the binding may still wait
            // for the other side's open: compatibility mode's early open, also while the
            // other side's open is being taken in.
            (side.port, side.ready)
        };
        let (req, peer_id) = {
            let mut st = self.inner.live_state()?;
            if !st.requests.has_room() {
                return Err(Status::MCAPI_ERR_REQUEST_LIMIT);
            }
            let ep = st
                .endpoints
                .get_mut(&port)
                .ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
            ep.channel.binding.close(kind, dir, ready)?;
            let peer_id = ep.channel.peer;
            let req = st
                .requests
                .alloc(Req::Chan(ChanReq::Close { port, handle }))?;
            if let Some(ep) = st.endpoints.get_mut(&port) {
                ep.channel.closing = Some(req);
            }
            (req, peer_id)
        };
        // Closed, and what was sent counted, at one moment: no send slips in after the
        // count, and a cancel of a queued packet from now on announces its own count.
        let (cancelled, sent, run) = {
            let mut g = self.inner.channels.sides[slot].lock();
            let mut cancelled = Vec::new();
            let mut sent = 0;
            let mut run = None;
            // (A concurrent close of the same handle may have freed the slot for another
            // channel meanwhile: that one is left alone.)
            if let Some(side) = g.as_mut().filter(|s| s.generation == generation) {
                side.closed = true;
                run = side.peer;
                if let Some(SideIo {
                    data: SideData::Send(s),
                    ..
                }) = &mut side.io
                {
                    sent = s.state.announce_close();
                }
                if let Some(io) = &mut side.io {
                    if let SideData::Recv(r) = &mut io.data {
                        // Packets not received yet are discarded; their buffers go back.
                        r.state.close();
                        while let Some(c) = r.state.take_completed() {
                            cancelled.push(c.request);
                        }
                        // Multi-receive buffers go back at once, as they do when released;
                        // plain slots wait to be posted as usual.
                        if r.state.posting() == Posting::MultiRecv {
                            io.repost_slots();
                        }
                    }
                }
            }
            (cancelled, sent, run)
        };
        {
            let mut st = lock(&self.inner.state);
            for h in cancelled {
                st.requests
                    .complete_if_pending(h, Status::MCAPI_ERR_REQUEST_CANCELLED, 0);
            }
        }
        // A dead peer cannot answer: the close then completes with an error below.
        if let Some(peer_id) = peer_id {
            self.inner.send_closed(peer_id, port, sent, run);
        }
        self.inner.advance_close(req, port, handle)?;
        Ok(req)
    }

    /// A close whose request `request` was cancelled: announced to the other side at the
    /// call, it goes on without its request, on a thread of its own polling it as a wait
    /// would (rare), or the endpoint would stay closing for good.
    pub(in crate::node) fn close_unowned(
        &self,
        request: RequestHandle,
        port: u32,
        handle: ChannelHandle,
    ) {
        let node = Arc::downgrade(&self.inner);
        let spawned = std::thread::Builder::new()
            .name("mcapi-close".into())
            .spawn(move || loop {
                let Some(n) = node.upgrade() else { return };
                if !matches!(n.advance_close(request, port, handle), Ok(false)) {
                    return;
                }
                drop(n);
                std::thread::sleep(Duration::from_millis(2));
            });
        if let Err(e) = spawned {
            log::warn!("close on port {port} left pending: no thread to finish it: {e}");
        }
    }
}

impl NodeInner {
    /// Finishes the close of `handle` on `port` once it can; `Ok(true)` once finished.
    /// `request` completes then, unless it was cancelled: a close announced to the other
    /// side goes on without its request ([`Node::close_unowned`]).
    pub(in crate::node) fn advance_close(
        &self,
        request: RequestHandle,
        port: u32,
        handle: ChannelHandle,
    ) -> Result<bool> {
        let (slot, generation, ..) = handle.decode().ok_or(Status::MCAPI_ERR_GENERAL)?;
        let (peer, gone, queued) = {
            let g = self.channels.sides[slot].lock();
            match g.as_ref().filter(|s| s.generation == generation) {
                Some(side) => (side.peer, side.peer_gone, side.sends_pending()),
                None => (None, None, false),
            }
        };
        // Liveness (the pushed state of the peer's run) is asked only while the peer has not
        // closed: this runs on every poll of the close request.
        let peer_closed = self
            .live_state()?
            .endpoints
            .get(&port)
            .is_some_and(|ep| ep.channel.binding.is_peer_closed());
        let peer_dead = !peer_closed && peer.is_some() && !self.peer_alive(peer);
        let finished = {
            let mut st = self.live_state()?;
            let Some(ep) = st.endpoints.get_mut(&port) else {
                st.requests
                    .complete_if_pending(request, Status::MCAPI_ERR_GENERAL, 0);
                return Ok(true);
            };
            if ep.channel.side != Some(handle) {
                // Finished already (by the request's own wait while a cancel was under way,
                // or the other way round); the endpoint may be in another channel by now.
                return Ok(true);
            }
            // A peer that died without closing never will: its side counts as closed, and
            // this close reports the loss.
            let lost = peer_dead && !ep.channel.binding.is_peer_closed();
            if lost {
                ep.channel.binding.peer_closed();
            }
            // Packets queued here still go out first, unless the receiver is gone.
            let receiver_here = gone.is_none() && !peer_dead;
            if (queued && receiver_here) || !ep.channel.binding.try_finish_close() {
                return Ok(false);
            }
            ep.channel = EndpointChannel::default();
            let status = if lost {
                log::info!(
                    "close on port {port}: MCAPI_ERR_GENERAL: the other side's node is gone"
                );
                Status::MCAPI_ERR_GENERAL
            } else {
                Status::MCAPI_SUCCESS
            };
            st.requests.complete_if_pending(request, status, 0);
            true
        };
        if finished {
            self.retire_side(handle);
        }
        Ok(finished)
    }

    /// `endpoint_delete` of the endpoint at `port` once its side closed: a close that still
    /// waits for the other side's finishes now, successfully (spec 4.2.4: the close made
    /// before the delete closed the connection as far as this endpoint goes; the other side
    /// was told at the close). `false` if the endpoint is in a channel it has not closed, or
    /// whose close is still under way: made on the side (another thread's close call in
    /// between), or a send side's packets still queued or in flight to a receiver that is
    /// there (the close announced them; they go out first, as the close itself waits).
    pub(in crate::node) fn close_for_delete(&self, port: u32) -> Result<bool> {
        let handle = {
            let st = self.live_state()?;
            let Some(ep) = st.endpoints.get(&port) else {
                return Ok(true);
            };
            if !ep.channel.is_connected() {
                return Ok(true);
            }
            if ep.channel.binding.phase() != Some(Phase::ClosePending) {
                return Ok(false);
            }
            ep.channel.side
        };
        if let Some((slot, generation, ..)) = handle.and_then(ChannelHandle::decode) {
            let under_way = {
                let g = self.channels.sides[slot].lock();
                g.as_ref()
                    .filter(|s| s.generation == generation)
                    .map(|side| {
                        (
                            !side.closed,
                            side.sends_pending(),
                            side.peer,
                            side.peer_gone,
                        )
                    })
            };
            if let Some((not_closed_yet, sending, peer, gone)) = under_way {
                let receiver_here = sending && gone.is_none() && self.peer_alive(peer);
                if not_closed_yet || receiver_here {
                    return Ok(false);
                }
            }
        }
        let side = {
            let mut st = self.live_state()?;
            let Some(ep) = st
                .endpoints
                .get_mut(&port)
                .filter(|ep| ep.channel.side == handle)
            else {
                // Finished meanwhile (the other side's close came).
                return Ok(true);
            };
            if ep.channel.binding.phase() != Some(Phase::ClosePending) {
                return Ok(!ep.channel.is_connected());
            }
            let channel = std::mem::take(&mut ep.channel);
            if let Some(request) = channel.closing {
                st.requests
                    .complete_if_pending(request, Status::MCAPI_SUCCESS, 0);
            }
            channel.side
        };
        if let Some(handle) = side {
            self.retire_side(handle);
        }
        Ok(true)
    }

    /// Finalize: tells the other side of each open channel that this side is gone, as a
    /// close does, so that its calls fail at once instead of reaching an endpoint that is
    /// about to close (on shm within one process that memory is unmapped).
    pub(in crate::node) fn notify_channel_peers(&self) {
        let open: Vec<(u32, EndpointId, ChannelHandle)> = match self.live_state() {
            Ok(st) => st
                .endpoints
                .iter()
                .filter_map(|(&port, ep)| Some((port, ep.channel.peer?, ep.channel.side?)))
                .filter(|(_, peer, _)| {
                    (peer.domain(), peer.node()) != (self.domain_id, self.node_id)
                })
                .collect(),
            Err(_) => return,
        };
        for (port, peer, handle) in open {
            let Some((slot, generation, ..)) = handle.decode() else {
                continue;
            };
            let (sent, run) = match self.channels.sides[slot]
                .lock()
                .as_ref()
                .filter(|s| s.generation == generation && s.ready && !s.closed)
                .and_then(|s| Some((s.io.as_ref()?, s.peer)))
            {
                Some((
                    SideIo {
                        data: SideData::Send(s),
                        ..
                    },
                    run,
                )) => (s.state.sent(), run),
                Some((_, run)) => (0, run),
                None => continue,
            };
            self.send_closed(peer, port, sent, run);
        }
    }

    /// Frees a side slot at once (an open that never got its fabric part).
    pub(super) fn free_side(&self, handle: ChannelHandle) {
        if let Some((slot, generation, ..)) = handle.decode() {
            let mut g = self.channels.sides[slot].lock();
            if g.as_ref().is_some_and(|s| s.generation == generation) {
                self.channels.vacate(&mut g, slot);
            }
        }
    }

    /// A side whose channel is disconnected: its endpoint closes now; a receive pool with
    /// packets the application still holds stays until they are released.
    fn retire_side(&self, handle: ChannelHandle) {
        let Some((slot, generation, ..)) = handle.decode() else {
            return;
        };
        let mut g = self.channels.sides[slot].lock();
        let Some(side) = g.as_mut().filter(|s| s.generation == generation) else {
            return;
        };
        // Completions already there count (zero-copy sends that did complete).
        side.progress();
        let held = match &mut side.io {
            Some(io) => {
                // Nothing more comes through the hub either.
                io.packet_hub = None;
                // The endpoint closes now (on shm it lingers, its CQ never read again): that
                // also stops the provider reading the memory of zero-copy sends still posted.
                io.ep = None;
                match &mut io.data {
                    SideData::Recv(r) => r.state.holds_packets(),
                    SideData::Send(s) => {
                        // Sends the departed receiver can no longer take fail, not vanish.
                        s.state.fail_queued(&mut io.out);
                        s.state.fail_in_flight(&mut io.out);
                        false
                    }
                    SideData::Unconnected => false,
                }
            }
            None => false,
        };
        side.closed = true;
        if !held {
            self.channels.vacate(&mut g, slot);
        }
        drop(g);
        self.flush_completed();
    }
}
