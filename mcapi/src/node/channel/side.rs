//! One side of a channel ([`Side`]): its state, status and CQ progress under its lock.

use super::data::{FlushMarker, SideData};
use super::handle::ChannelHandle;
use super::side_io::SideIo;
use super::table::Recount;
use crate::node::common::Result;
use crate::node::state::PeerRun;
use crate::semantics::channel::{ChannelKind, Direction};
use crate::semantics::endpoint_id::EndpointId;
use crate::semantics::Status;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The node's side slots (the [`ChannelTable`](super::table::ChannelTable)'s).
pub(super) type Sides = Arc<[parking_lot::Mutex<Option<Side>>]>;

/// The other side of a channel whose two endpoints are on this node: items go straight from
/// the sender's call into the receive side's pool and FIFO, credits straight back, with no
/// fabric in between (`local.rs`). Reached by `try_lock` only (side locks never nest
/// otherwise): a side busy elsewhere is moved to by its holder's next progress.
pub(super) struct LocalPeer {
    pub(super) sides: Sides,
    pub(super) slot: usize,
    pub(super) generation: u32,
}

/// One side of a channel, reserved by an open; its fabric part exists once both sides opened.
pub(in crate::node) struct Side {
    pub(super) generation: u32,
    pub(super) kind: ChannelKind,
    pub(super) port: u32,
    /// The other endpoint's node among our peers and the run of it this side is bound to
    /// (liveness: a later run of that node is another process); `None`: this node.
    pub(super) peer: Option<PeerRun>,
    /// Both sides open: data calls are allowed.
    pub(super) ready: bool,
    /// Closed here: data calls are refused.
    pub(super) closed: bool,
    /// The other side closed or died (the status data calls then get).
    pub(super) peer_gone: Option<Status>,
    /// When a request waiting on this side next checks that the other node is alive.
    next_liveness_check: Option<Instant>,
    pub(super) timeout: Option<Duration>,
    pub(super) max_payload: usize,
    pub(super) io: Option<SideIo>,
    /// The endpoint this side's open was announced to.
    pub(super) announced_to: Option<EndpointId>,
    /// The other side, when it is on this node (set when both sides are open).
    pub(super) local: Option<LocalPeer>,
    /// Compatibility mode: the open completed before the other side's (`ready`, but not
    /// connected to it yet).
    pub(super) early: bool,
}

pub(super) fn side_status(kind: ChannelKind) -> Status {
    // Scalar calls have no MCAPI_ERR_TRANSMISSION in their ERRORS tables.
    match kind {
        ChannelKind::Packet => Status::MCAPI_ERR_TRANSMISSION,
        ChannelKind::Scalar => Status::MCAPI_ERR_GENERAL,
    }
}

impl Side {
    /// Reads the side's CQ (and a packet receive side's hub route) and dispatches; returns
    /// completions seen.
    #[inline(always)]
    pub(super) fn progress(&mut self) -> usize {
        self.progress_ways(false)
    }

    /// [`Side::progress`] for a blocked `pktchan_recv`'s polls: a packet receive side with a
    /// hub route reads one way of the two as [`PacketWays`] says.
    ///
    /// [`PacketWays`]: super::side_io::PacketWays
    #[inline(always)]
    pub(super) fn progress_polling(&mut self) -> usize {
        self.progress_ways(true)
    }

    #[inline(always)]
    fn progress_ways(&mut self, polling: bool) -> usize {
        let (kind, payload, gone) = (self.kind, self.max_payload, self.peer_gone.is_some());
        let seen = self
            .io
            .as_mut()
            .map_or(0, |io| io.progress(kind, payload, gone, polling));
        if matches!(&self.io, Some(SideIo { data: SideData::Send(s), .. }) if s.state.is_broken()) {
            // Later sends fail instead of stalling behind the lost packet.
            self.peer_gone.get_or_insert(side_status(kind));
        }
        if self.local.is_some() {
            return seen + self.pump_local(false);
        }
        seen
    }

    /// Whether a send side still has packets to send: queued, or posted zero copy and not
    /// complete (its close waits for them; its endpoint must not close under them).
    pub(super) fn sends_pending(&self) -> bool {
        matches!(&self.io, Some(SideIo {
            data: SideData::Send(s),
            ..
        }) if s.state.has_queued() || s.state.has_in_flight())
    }

    /// Whether requests wait on this side: queued or in-flight (zero-copy) `send_i` packets,
    /// or pending `recv_i`s.
    fn has_waiting_requests(&self) -> bool {
        match &self.io {
            Some(SideIo {
                data: SideData::Send(_),
                ..
            }) => self.sends_pending(),
            Some(SideIo {
                data: SideData::Recv(r),
                ..
            }) => r.state.has_pending(),
            _ => false,
        }
    }

    /// Whether transfers are under way here: requests waiting on the side, or copied
    /// packets posted to the fabric and not yet complete.
    pub(super) fn has_transfers(&self) -> bool {
        self.has_waiting_requests()
            || matches!(&self.io, Some(SideIo { data: SideData::Send(s), .. })
                if s.state.has_staged_in_flight() || s.flush_marker == FlushMarker::InFlight)
    }

    /// Whether this send side has packets handed to the fabric whose sends have not
    /// completed, or a flush marker, its peer not known gone (what `finalize` waits for
    /// before it closes it).
    pub(super) fn has_posted_sends(&self) -> bool {
        self.peer_gone.is_none()
            && matches!(&self.io, Some(SideIo { data: SideData::Send(s), .. })
                if s.state.has_posted() || s.flush_marker == FlushMarker::InFlight)
    }

    /// The other node to check for liveness, at most every 20 ms while requests wait here
    /// and nothing moves (the slow path of waiting on a request).
    pub(super) fn liveness_check_due(&mut self, progressed: bool) -> Option<PeerRun> {
        if progressed || !self.has_waiting_requests() {
            return None;
        }
        if self.peer_gone.is_some() && !self.awaits_announced() {
            return None;
        }
        let now = Instant::now();
        if self.next_liveness_check.is_some_and(|t| now < t) {
            return None;
        }
        self.next_liveness_check = Some(now + Duration::from_millis(20));
        self.peer
    }

    /// A closed send side whose queued packets failed (the provider refused one, or the
    /// endpoint closed under them) lists the smaller count for its receiver, which would
    /// otherwise wait for them. Not for a receiver that is gone.
    pub(super) fn recount(&mut self, slot: usize, recounts: &std::sync::Mutex<Vec<Recount>>) {
        if !self.closed || self.peer_gone.is_some() {
            return;
        }
        if let Some(SideIo {
            data: SideData::Send(s),
            ..
        }) = &mut self.io
        {
            if let Some(count) = s.state.recount() {
                let handle = ChannelHandle::new(slot, self.generation, self.kind, Direction::Send);
                crate::node::common::lock(recounts).push(Recount {
                    port: self.port,
                    handle,
                    count,
                    run: self.peer,
                });
            }
        }
    }

    /// Whether `addr` lies in this side's receive pool.
    pub(super) fn pool_contains(&self, addr: usize) -> bool {
        matches!(&self.io, Some(SideIo { data: SideData::Recv(r), .. }) if r.holds(addr))
    }

    /// Whether another side's read of the hub left messages for this one.
    pub(super) fn hub_inbox_holds(&self) -> bool {
        self.io
            .as_ref()
            .and_then(|io| io.hub.as_ref().or(io.packet_hub.as_ref()))
            .is_some_and(|h| h.hub.holds(h.route))
    }

    /// Whether a received item waits in the FIFO (taken without reading the CQ first).
    pub(super) fn has_queued_item(&self) -> bool {
        matches!(&self.io, Some(SideIo { data: SideData::Recv(r), .. }) if r.state.available() > 0)
    }

    /// Posts the listed packet buffers (shm: those released since the last receive call)
    /// before this call reads the CQ: a ping-pong has sent its reply by now, and a stream
    /// posts each buffer one call after its release.
    pub(super) fn post_released(&mut self) {
        if let Some(io) = self.io.as_mut().filter(|io| io.slots_listed()) {
            io.repost_slots();
        }
    }

    /// Whether the sender closed announcing items that have not all arrived.
    fn awaits_announced(&self) -> bool {
        matches!(&self.io, Some(SideIo { data: SideData::Recv(r), .. })
            if r.state.awaits_announced())
    }

    /// The other side's node is gone: data calls fail from now on (once what arrived is
    /// received), whatever a close announced.
    pub(super) fn peer_died(&mut self) {
        self.peer_gone.get_or_insert(side_status(self.kind));
        if let Some(SideIo {
            data: SideData::Recv(r),
            ..
        }) = &mut self.io
        {
            r.state.sender_died();
        }
    }

    /// Completes pending `pktchan_recv_i` requests of a receive side from its FIFO.
    pub(super) fn serve_pending_recvs(&mut self) {
        let Some(SideIo {
            data: SideData::Recv(r),
            out,
            ..
        }) = &mut self.io
        else {
            return;
        };
        // Once the sender closed or died and everything it sent was received, nothing more
        // comes: the rest end with its loss.
        r.state.serve_pending(self.peer_gone);
        while let Some(c) = r.state.take_completed() {
            match c.item {
                Some(item) => out.deliver(c.request, r.packet(item)),
                None => out.complete(c.request, c.status, c.len),
            }
        }
    }

    pub(super) fn check_usable(&self) -> Result<&SideIo> {
        match &self.io {
            Some(io) if self.ready && !self.closed => Ok(io),
            _ => Err(Status::MCAPI_ERR_CHAN_INVALID),
        }
    }
}

impl Side {
    pub(super) fn reserved(generation: u32, kind: ChannelKind, port: u32) -> Side {
        Side {
            generation,
            kind,
            port,
            peer: None,
            ready: false,
            closed: false,
            peer_gone: None,
            next_liveness_check: None,
            timeout: None,
            max_payload: 0,
            io: None,
            announced_to: None,
            local: None,
            early: false,
        }
    }
}
