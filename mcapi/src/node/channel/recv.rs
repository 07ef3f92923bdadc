//! Receiving packets: `pktchan_recv`/`_recv_i`, `available`, release and the pool lookup of a released packet.

use super::data::SideData;
use super::handle::{ChannelHandle, Packet, ReceiveMemory};
use super::req::ChanReq;
use super::side::Side;
use super::side_io::SideIo;
use super::waiting::{BusyBurst, ChannelWait, POLL_BURST};
use crate::node::common::{lock, Result};
use crate::node::inner::NodeInner;
use crate::node::state::Req;
use crate::node::Node;
use crate::semantics::channel::{ChannelKind, Direction};
use crate::semantics::request::RequestHandle;
use crate::semantics::Status;

impl NodeInner {
    /// Completes pending `pktchan_recv_i` requests of a receive side from its FIFO.
    pub(super) fn serve_pending_recvs(&self, side: &mut Side) {
        side.serve_pending_recvs();
    }
}

impl Node {
    /// `mcapi_pktchan_recv`: the next packet, blocking until one arrives (or the endpoint
    /// timeout passes). The packet stays in the channel's pool until released.
    ///
    /// # Errors
    /// `MCAPI_ERR_CHAN_INVALID`, `MCAPI_TIMEOUT`, `MCAPI_ERR_TRANSMISSION` (the sender closed
    /// and everything it sent was received, or it died).
    pub fn pktchan_recv(&self, handle: ChannelHandle) -> Result<Packet> {
        let mut wait = None;
        loop {
            let mut burst = BusyBurst::new(handle);
            let got = (|| {
                let mut g = self
                    .inner
                    .side(handle, ChannelKind::Packet, Direction::Receive)?;
                let side = g.as_mut().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
                side.check_usable()?;
                side.post_released();
                if side.has_queued_item() {
                    if let Some(p) = take_item(side)? {
                        return Ok(Some(p));
                    }
                }
                for _ in 0..POLL_BURST {
                    side.progress_polling();
                    if let Some(p) = take_item(side)? {
                        return Ok(Some(p));
                    }
                    burst.poll(&self.inner.channels);
                }
                let timeout = side.timeout;
                wait.get_or_insert_with(|| ChannelWait::new(timeout, self.inner.config.spin));
                Ok(None)
            })();
            self.end_burst(&burst, wait.as_mut());
            if let Some(p) = got? {
                return Ok(p);
            }
            self.channel_backoff(handle, wait.as_mut().expect("set above"))?;
        }
    }

    /// `mcapi_pktchan_recv_i`: a request that completes with the next packet; its address
    /// comes from [`Node::received_packet`] once the request completed.
    ///
    /// # Errors
    /// `MCAPI_ERR_CHAN_INVALID`, `MCAPI_ERR_REQUEST_LIMIT`.
    pub fn pktchan_recv_i(&self, handle: ChannelHandle) -> Result<RequestHandle> {
        {
            let g = self
                .inner
                .side(handle, ChannelKind::Packet, Direction::Receive)?;
            g.as_ref()
                .ok_or(Status::MCAPI_ERR_CHAN_INVALID)?
                .check_usable()?;
        }
        let req = self
            .inner
            .live_state()?
            .requests
            .alloc(Req::Chan(ChanReq::Recv { handle }))?;
        // Checked again under the lock it is queued under: a close in between drained the
        // pending receives already, and one queued after it would wait forever.
        let queued = (|| {
            let mut g = self
                .inner
                .side(handle, ChannelKind::Packet, Direction::Receive)?;
            let side = g.as_mut().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
            side.check_usable()?;
            match side.io.as_mut().map(|io| &mut io.data) {
                Some(SideData::Recv(r)) => {
                    r.state.add_pending(req);
                    Ok(())
                }
                _ => Err(Status::MCAPI_ERR_CHAN_INVALID),
            }
        })();
        if let Err(e) = queued {
            // The call fails: the request never reaches the application (allocated above,
            // so releasing it cannot fail).
            _ = lock(&self.inner.state).requests.release(req);
            return Err(e);
        }
        self.progress_side(handle);
        Ok(req)
    }

    /// The packet a completed `pktchan_recv_i` request received (once).
    pub fn received_packet(&self, request: RequestHandle) -> Option<Packet> {
        let packet = lock(&self.inner.state).delivered.remove(&request)?;
        // The application's from now on: its side lets it be released.
        if let Ok((_, mut g)) = self.inner.pool_side(packet.addr()) {
            if let Some(SideIo {
                data: SideData::Recv(r),
                ..
            }) = g.as_mut().and_then(|s| s.io.as_mut())
            {
                r.state.delivered(r.offset_of(packet.addr()));
            }
        }
        Some(packet)
    }

    /// `mcapi_pktchan_available`: packets that can be received without waiting.
    ///
    /// # Errors
    /// `MCAPI_ERR_CHAN_INVALID`.
    pub fn pktchan_available(&self, handle: ChannelHandle) -> Result<usize> {
        self.available(handle, ChannelKind::Packet)
    }

    /// `mcapi_sclchan_available`: scalars that can be received without waiting.
    ///
    /// # Errors
    /// `MCAPI_ERR_CHAN_INVALID`.
    pub fn sclchan_available(&self, handle: ChannelHandle) -> Result<usize> {
        self.available(handle, ChannelKind::Scalar)
    }

    fn available(&self, handle: ChannelHandle, kind: ChannelKind) -> Result<usize> {
        let mut g = self.inner.side(handle, kind, Direction::Receive)?;
        let side = g.as_mut().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
        side.check_usable()?;
        side.progress();
        match &side.io {
            Some(SideIo {
                data: SideData::Recv(r),
                ..
            }) => Ok(r.state.available()),
            _ => Err(Status::MCAPI_ERR_CHAN_INVALID),
        }
    }

    /// `mcapi_pktchan_release`: gives a received packet's buffer back (any order). Its pool
    /// buffer is posted to the fabric again once all packets in it are released.
    ///
    /// # Errors
    /// `MCAPI_ERR_BUF_INVALID` for an address that is not a packet this node holds;
    /// `MCAPI_ERR_NODE_NOTINIT` once the node finalized (or while it finalizes).
    ///
    /// Consumes the packet, so that nothing can read its bytes once they may be received
    /// into again.
    pub fn pktchan_release(&self, packet: Packet) -> Result<()> {
        self.pktchan_release_addr(packet.addr())
    }

    /// [`Node::pktchan_release`] by address, for the C ABI (`mcapi_pktchan_release`), whose
    /// contract is C's: the caller stops reading the packet once it is given back. Not public:
    /// in Rust a [`Packet`] is the proof that a buffer is held.
    pub(crate) fn pktchan_release_addr(&self, addr: usize) -> Result<()> {
        let (slot, mut g) = self.inner.pool_side(addr)?;
        let receives =
            |s: &&mut Side| matches!(&s.io, Some(io) if matches!(io.data, SideData::Recv(_)));
        let Some(side) = g.as_mut().filter(receives) else {
            // Emptied after its pool was found: a finalize under way took it (the node's
            // state is read once the side's guard is gone).
            drop(g);
            return Err(self.inner.unless_finalized(Status::MCAPI_ERR_BUF_INVALID));
        };
        let open = !side.closed;
        let Some(io) = side.io.as_mut() else {
            return Err(Status::MCAPI_ERR_BUF_INVALID);
        };
        let SideData::Recv(r) = &mut io.data else {
            return Err(Status::MCAPI_ERR_BUF_INVALID);
        };
        let (what, credits) = r.state.release(r.offset_of(addr))?;
        r.repost(&io.ep, what);
        let last = !r.state.holds_packets();
        if open {
            if let Some(n) = credits {
                io.return_credits(n);
                if side.local.is_some() {
                    side.pump_local(false);
                }
            }
        } else if last && io.ep.is_none() {
            // The last held packet of a disconnected channel: the pool goes now.
            self.inner.channels.vacate(&mut g, slot);
        }
        Ok(())
    }

    /// `mcapi_pktchan_release_test`: `Ok(true)` if the packet at `addr` was released,
    /// `Ok(false)` while the application still holds it.
    ///
    /// # Errors
    /// `MCAPI_ERR_BUF_INVALID` for an address where no packet of this node's receive pools
    /// began (see [`RecvSide::release_state`](crate::semantics::channel_side::RecvSide::release_state)
    /// for how long a released packet's address is remembered).
    pub fn pktchan_release_test(&self, addr: usize) -> Result<bool> {
        let (_, g) = self.inner.pool_side(addr)?;
        match g.as_ref().and_then(|s| s.io.as_ref()) {
            Some(SideIo {
                data: SideData::Recv(r),
                ..
            }) => r
                .state
                .release_state(r.offset_of(addr))
                .ok_or(Status::MCAPI_ERR_BUF_INVALID),
            _ => Ok(true),
        }
    }

    /// The registered memory packets of `handle` are received into (to check zero copy):
    /// its pool, and the slots of packets that came through the hub.
    pub fn pktchan_receive_memory(&self, handle: ChannelHandle) -> Result<ReceiveMemory> {
        let g = self
            .inner
            .side(handle, ChannelKind::Packet, Direction::Receive)?;
        match g.as_ref().and_then(|s| s.io.as_ref()) {
            Some(SideIo {
                data: SideData::Recv(r),
                ..
            }) => Ok(ReceiveMemory(
                r.regions().map(|m| m.addr()..m.addr() + m.len()).collect(),
            )),
            _ => Err(Status::MCAPI_ERR_CHAN_INVALID),
        }
    }
}

/// Takes the next packet of a receive side for the application, or says why there is none.
/// `pktchan_recv_i` requests made earlier take theirs first (receives are served in the
/// order they were made).
fn take_item(side: &mut Side) -> Result<Option<Packet>> {
    if matches!(&side.io, Some(SideIo { data: SideData::Recv(r), .. }) if r.state.has_pending()) {
        side.serve_pending_recvs();
    }
    let gone = side.peer_gone;
    let io = side.io.as_mut().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
    let SideData::Recv(r) = &mut io.data else {
        return Err(Status::MCAPI_ERR_CHAN_INVALID);
    };
    if let Some(item) = r.state.take_packet() {
        return Ok(Some(r.packet(item)));
    }
    io.nothing_received(gone)?;
    Ok(None)
}
