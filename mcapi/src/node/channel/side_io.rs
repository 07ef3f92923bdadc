//! The fabric part of an open side ([`SideIo`]): CQ reads, dispatch, re-posts, queued sends and credit returns.

use super::data::{posted, FlushMarker, SendData, SideData};
use super::hub::{self, Hub, HubItem};
use super::limits::{
    CTX_CREDIT, CTX_FLUSH, CTX_STAGING, CTX_USER, FLUSH_MARK, SCALAR_SLOT, ZERO_COPY_GRACE,
};
use super::outbox::Outbox;
use crate::node::common::Result;
use crate::node::fabric::cq_data;
use crate::node::seq;
use crate::semantics::channel::ChannelKind;
use crate::semantics::channel_side::{NextSend, Outgoing, Posted, Posting, Repost};
use crate::semantics::Status;
use mcapi_ofi::{
    flags, AddressVector, Completion, CompletionQueue, Endpoint, Error as OfiError, FiAddr,
    SendBuffer,
};
use std::sync::Arc;
use std::time::Instant;

/// Whether a `pktchan_send_i` packet would be injected now ([`SideIo::injectable`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Injectable {
    /// Small enough, nothing queued before it, a credit at hand: only the provider may
    /// still refuse it.
    Now,
    /// Small enough, nothing queued before it, but no credit at hand.
    NoCredit,
    /// It goes the staged or zero-copy way.
    No,
}

/// The fabric part of an open side.
pub(super) struct SideIo {
    // Declared before the objects it is bound to and before the memory it uses.
    pub(super) ep: Option<Endpoint>,
    pub(super) cq: CompletionQueue,
    /// Read buffer of `progress`, kept here: clearing a fresh one on every poll showed.
    pub(super) cq_buf: [Completion; 16],
    pub(super) av: AddressVector,
    pub(super) dest: FiAddr,
    pub(super) data: SideData,
    /// A scalar side's place on the hub (`ep`, `cq` and `av` are the hub's then).
    pub(super) hub: Option<HubSide>,
    /// A packet receive side's place on the hub, where its small packets come (`ep`, `cq`
    /// and `av` are its own).
    pub(super) packet_hub: Option<HubSide>,
    /// Which of a packet receive side's two ways (its CQ, the hub) it reads first: the one
    /// its last packet came by ([`SideIo::progress_packet_ways`]); a send side with a hub
    /// lane counts its progresses here.
    pub(super) ways: PacketWays,
    /// Requests completed here, until flushed.
    pub(super) out: Outbox,
}

pub(super) struct HubSide {
    pub(super) hub: Arc<Hub>,
    pub(super) route: u16,
    /// The other side's route on its node's hub.
    pub(super) peer_route: u16,
    pub(super) items: [HubItem; hub::READ_BURST],
}

impl Drop for HubSide {
    /// What still comes for the side is dropped.
    fn drop(&mut self) {
        self.hub.detach(self.route);
    }
}

/// A packet receive side with a hub route, polled by a blocked `pktchan_recv`, reads the
/// way its last packet came on every poll, and the other only on every
/// [`OTHER_WAY_EVERY`]th that took no packet (or while a packet is missing before those
/// that arrived): a spinning receive pays one CQ read per poll, not two
/// (docs/performance-log.md). Every other progress (waits on requests, `available`, the
/// background thread, closes) reads both.
#[derive(Default)]
pub(super) struct PacketWays {
    hub_first: bool,
    turn: u32,
}

const OTHER_WAY_EVERY: u32 = 4;

/// See [`SideIo::progress`]: how often a send side with a hub lane reads the hub's CQ.
const HUB_POLL_EVERY: u32 = 8;

impl SideIo {
    /// Reads the side's CQ, or the hub (a scalar side), or both (a packet receive side with
    /// a hub route: one of them when `polling`, see [`PacketWays`]), and moves what waits.
    pub(super) fn progress(
        &mut self,
        kind: ChannelKind,
        payload: usize,
        gone: bool,
        polling: bool,
    ) -> usize {
        let seen = if self.hub.is_some() {
            self.progress_hub()
        } else if self.packet_hub.is_none() {
            self.progress_cq(kind)
        } else if polling {
            self.progress_packet_ways(kind)
        } else {
            self.progress_cq(kind) + self.progress_packet_hub()
        };
        match &mut self.data {
            SideData::Send(s) => {
                // The hub's sends and connections move only while its CQ is read: by this
                // side while it has packets queued, else on every HUB_POLL_EVERYth progress
                // (and by the node's packet and scalar receive sides): a poll is a system
                // call on tcp, and a zero-copy stream progresses its side many times per
                // packet.
                if let Some(lane) = &s.hub_lane {
                    self.ways.turn = self.ways.turn.wrapping_add(1);
                    if s.state.has_queued() || self.ways.turn.is_multiple_of(HUB_POLL_EVERY) {
                        lane.hub.poll();
                    }
                }
                if s.state.has_queued() || s.state.has_in_flight() {
                    self.advance_queued(payload, gone);
                }
            }
            // A credit return that could not be sent goes now, whoever progresses the side
            // (a blocking receive, a wait on a `pktchan_recv_i`, `pktchan_available`, the
            // background thread).
            SideData::Recv(r) => {
                if let Some(n) = r.state.credits_to_flush() {
                    self.return_credits(n);
                } else if seen == 0 && r.state.any_to_post() {
                    // Idle: a ping-pong's receiver posts here while it waits for the
                    // reply, not between a scalar's arrival and its own reply.
                    self.repost_slots();
                }
            }
            SideData::Unconnected => {}
        }
        seen
    }

    /// Reads the side's own CQ until it is drained; returns completions seen.
    #[inline]
    fn progress_cq(&mut self, kind: ChannelKind) -> usize {
        let mut seen = 0;
        // Without its endpoint (closed) the CQ has nothing to report, and on shm reading it
        // would progress the endpoint, which lingers (mcapi_ofi::Endpoint).
        while self.ep.is_some() {
            match self.cq.read(&mut self.cq_buf) {
                Ok(n) => {
                    seen += n;
                    for i in 0..n {
                        let c = self.cq_buf[i];
                        self.dispatch(&c, kind);
                    }
                    if n < self.cq_buf.len() {
                        break;
                    }
                }
                Err(e) => {
                    if !self.read_failed(e) {
                        break;
                    }
                }
            }
        }
        seen
    }

    /// An error completion (handled; read on) or a failing CQ (`false`: stop reading).
    #[cold]
    #[inline(never)]
    fn read_failed(&mut self, e: OfiError) -> bool {
        match e {
            OfiError::Completion(e) => {
                match &mut self.data {
                    SideData::Send(s) => {
                        if let Some(slot) = s.event(e.context, false, 0, &mut self.out) {
                            s.credit_reposts.push(slot);
                            self.repost_credit_slots();
                        }
                    }
                    // A receive that failed (say, truncated): its scalar slot or plain
                    // packet buffer is free again (a scalar slot never holds a packet). A
                    // multi-receive buffer: released with the error, as by a completion; a
                    // message too long for the rest of it frees it if its release waited
                    // for that message, else ends it (a spare takes its place, if one is
                    // left); any other failed receive gives up a buffer whose release waits
                    // for it.
                    SideData::Recv(r) => {
                        let b = e.context as usize;
                        let released = e.flags & flags::MULTI_RECV != 0;
                        let recv = e.flags & flags::RECV != 0;
                        let truncated = e.is_truncation() && recv;
                        let what = if r.state.posting() != Posting::MultiRecv {
                            r.state.receive_failed(b, released, truncated)
                        } else if released {
                            r.state.multi_recv_released(b)
                        } else if truncated {
                            match r.state.truncated_in(b, e.len.saturating_sub(e.olen)) {
                                Repost::Now(b) => Repost::Now(b),
                                Repost::Later => {
                                    if r.state.spares_left() == 0 {
                                        log::warn!("packet channel: a receive buffer was ended by a message too long for it, and no spare is left: it stays out");
                                    }
                                    r.state.receive_failed(b, false, true)
                                }
                            }
                        } else if recv {
                            r.state.carved_failed(b)
                        } else {
                            Repost::Later
                        };
                        r.repost(&self.ep, what);
                    }
                    _ => {}
                }
                true
            }
            _ => false,
        }
    }

    /// Takes a scalar side's messages from the hub until it has no more for the side.
    #[inline(never)]
    fn progress_hub(&mut self) -> usize {
        let mut seen = 0;
        while self.ep.is_some() {
            match self.read_hub() {
                Some(n) => {
                    seen += n;
                    if n < hub::READ_BURST {
                        break;
                    }
                }
                None => break,
            }
        }
        seen
    }

    /// Takes one burst of a scalar side's messages from the hub; `None` when there were
    /// none (or the read failed).
    fn read_hub(&mut self) -> Option<usize> {
        let h = self.hub.as_mut()?;
        let mut dropped = false;
        let n = h.hub.read(h.route, &mut h.items, &mut dropped);
        if dropped {
            if let SideData::Recv(r) = &mut self.data {
                r.state.gap();
            }
        }
        let n = n.ok().filter(|&n| n > 0)?;
        let mut credits_due = 0;
        for i in 0..n {
            let it = h.items[i];
            match &mut self.data {
                SideData::Send(s) if it.credit => s.state.credits_returned(it.value() as u32),
                SideData::Recv(r) if !it.credit => {
                    let seq = seq::widen(r.state.received(), it.seq);
                    credits_due += r
                        .state
                        .hub_scalar_arrived(seq, it.value(), usize::from(it.len))
                        .unwrap_or(0);
                }
                _ => {}
            }
        }
        if credits_due > 0 {
            self.return_credits(credits_due);
        }
        Some(n)
    }

    /// Reads a packet receive side's CQ and its hub route, as [`PacketWays`] says. Only
    /// packets taken in order count for the choice: other completions (a buffer's
    /// release), messages the side drops (a stranger's flood) or packets held back behind
    /// a missing one (both ways are read then) do not keep the other way unread.
    #[inline]
    fn progress_packet_ways(&mut self, kind: ChannelKind) -> usize {
        let received = |io: &SideIo| match &io.data {
            SideData::Recv(r) => r.state.received(),
            _ => 0,
        };
        let before = received(self);
        let hub_first = self.ways.hub_first;
        let first = if hub_first {
            self.progress_packet_hub()
        } else {
            self.progress_cq(kind)
        };
        let took = received(self) != before;
        let gap = matches!(&self.data, SideData::Recv(r) if r.state.awaits_out_of_order());
        if took && !gap {
            return first;
        }
        self.ways.turn = self.ways.turn.wrapping_add(1);
        if !gap && !self.ways.turn.is_multiple_of(OTHER_WAY_EVERY) {
            return first;
        }
        let middle = received(self);
        let other = if hub_first {
            self.progress_cq(kind)
        } else {
            self.progress_packet_hub()
        };
        if !took && received(self) != middle {
            self.ways.hub_first = !hub_first;
        }
        first + other
    }

    /// Takes a packet receive side's small packets from the hub (copied into its hub
    /// slots) until it has no more there.
    fn progress_packet_hub(&mut self) -> usize {
        let mut seen = 0;
        while self.ep.is_some() {
            let (Some(h), SideData::Recv(r)) = (self.packet_hub.as_mut(), &mut self.data) else {
                break;
            };
            let mut dropped = false;
            let n = h.hub.read(h.route, &mut h.items, &mut dropped);
            if dropped {
                r.state.gap();
            }
            let Some(n) = n.ok().filter(|&n| n > 0) else {
                break;
            };
            seen += n;
            let mut credits_due = 0;
            for it in &h.items[..n] {
                // Credits for this channel come to the sender's endpoint, not here.
                if it.credit {
                    continue;
                }
                let seq = seq::widen(r.state.received(), it.seq);
                let (data, state) = (&r.hub_slots, &mut r.state);
                let base = state.hub_slots_base();
                let copy = |at: usize| {
                    let (Some(slots), Some(p)) = (data, it.packet()) else {
                        return false;
                    };
                    slots.write(at.wrapping_sub(base), p).is_ok()
                };
                credits_due += state
                    .hub_packet_arrived(seq, usize::from(it.len), copy)
                    .unwrap_or(0);
            }
            if credits_due > 0 {
                self.return_credits(credits_due);
            }
            if n < hub::READ_BURST {
                break;
            }
        }
        seen
    }

    fn dispatch(&mut self, c: &Completion, kind: ChannelKind) {
        let ctx = c.context();
        let mut credits_due = None;
        match &mut self.data {
            SideData::Unconnected => {}
            SideData::Send(s) => {
                if let Some(slot) = s.event(ctx, true, c.len(), &mut self.out) {
                    if let (Some(ep), Ok(b)) = (&self.ep, s.credit_slots.slice(slot * 8, 8)) {
                        if let Err(e) = ep.recv(b, FiAddr::UNSPEC, ctx) {
                            credit_slot_lost(&e);
                        }
                    }
                }
            }
            SideData::Recv(r) if kind == ChannelKind::Scalar => {
                // Whatever arrived used up slot `ctx`, which is listed to be posted again.
                let slot = ctx as u32;
                // The receive completed: the slot is idle (a refusal counts as no scalar).
                let scalar = item_seq(c, r.unflagged_cq_data).and_then(|seq| {
                    let len = c.len();
                    let value = r
                        .pool
                        .read_le(slot as usize * SCALAR_SLOT, len.min(SCALAR_SLOT));
                    value.ok().map(|value| (seq as u32, value, len))
                });
                credits_due = r.state.scalar_arrived(slot, scalar);
            }
            SideData::Recv(r) => {
                let b = ctx as usize;
                let multi_recv = r.state.posting() == Posting::MultiRecv;
                if let Some(seq) = item_seq(c, r.unflagged_cq_data) {
                    let offset = if multi_recv {
                        r.offset_of(c.buf_addr())
                    } else {
                        // `buf` is defined for multi-receive completions only.
                        b * r.state.buffer_size()
                    };
                    let (due, dropped) = r.state.packet_arrived(b, offset, c.len(), seq as u32);
                    credits_due = due;
                    r.repost(&self.ep, dropped);
                }
                // After the packet is held: a release that waited for these bytes may
                // free the buffer.
                if multi_recv && !c.is_empty() {
                    let what = r.state.filled(b, r.offset_of(c.buf_addr()), c.len());
                    r.repost(&self.ep, what);
                }
                // A plain receive is done with its buffer at once, whatever arrived.
                if !multi_recv {
                    let what = r.state.buffer_done(b);
                    r.repost(&self.ep, what);
                } else if c.flags() & flags::MULTI_RECV != 0 {
                    let what = r.state.multi_recv_released(b);
                    r.repost(&self.ep, what);
                }
            }
        }
        if let Some(n) = credits_due {
            self.return_credits(n);
        }
    }

    /// Whether a receive side has slots or buffers listed to be posted again.
    #[inline]
    pub(super) fn slots_listed(&self) -> bool {
        matches!(&self.data, SideData::Recv(r) if r.state.any_to_post())
    }

    /// Posts a receive side's listed slots and buffers again. Before any credit return, so
    /// the sender never has more scalars or packets on their way than receives are posted
    /// (none arrives unexpected, to be buffered by the provider outside the channel's
    /// bound); and, for latency only, whenever the side is idle and (packets) when
    /// `pktchan_recv` starts. `false` if some could not be posted now: they stay listed, and
    /// credits wait for them.
    #[inline(never)]
    pub(super) fn repost_slots(&mut self) -> bool {
        let (SideData::Recv(r), Some(ep)) = (&mut self.data, &self.ep) else {
            // Closed: nothing more arrives.
            return true;
        };
        while let Some(slot) = r.state.next_to_post() {
            if r.post(ep, slot as usize).is_err() {
                return false;
            }
            r.state.posted_again();
        }
        true
    }

    /// Posts queued `pktchan_send_i` packets that have credits now.
    pub(super) fn advance_queued(&mut self, payload: usize, gone: bool) {
        let SideData::Send(s) = &mut self.data else {
            return;
        };
        if gone && s.state.receiver_gone(Instant::now(), ZERO_COPY_GRACE) {
            self.ep = None;
        }
        let Some(ep) = &self.ep else {
            // Closed (receiver gone, or a blocking send gave up): nothing goes any more.
            s.state.fail_in_flight(&mut self.out);
            s.state.fail_queued(&mut self.out);
            return;
        };
        if gone {
            // The receiver closed or died: what is still queued can never go.
            s.state.fail_queued(&mut self.out);
            return;
        }
        if s.local {
            // Moved by the side's `pump_local`.
            return;
        }
        while let Some(next) = s.state.next_queued() {
            let mut injected = None;
            let r = match next {
                NextSend::Staged { slot, len, seq } if len <= s.inject_scratch.len() => {
                    injected = Some(slot);
                    let mut scratch = std::mem::take(&mut s.inject_scratch);
                    let r = s
                        .staging
                        .read(slot * payload, &mut scratch[..len])
                        .and_then(|()| s.inject(ep, &scratch[..len], seq, self.dest));
                    s.inject_scratch = scratch;
                    r
                }
                NextSend::Staged { slot, len, seq } => {
                    s.staging.slice(slot * payload, len).and_then(|buf| {
                        ep.send(
                            buf,
                            Some(u64::from(seq)),
                            self.dest,
                            CTX_STAGING | slot as u64,
                        )
                    })
                }
                NextSend::User { buf, zslot, seq } => {
                    ep.send_from(buf, u64::from(seq), self.dest, CTX_USER | zslot as u64)
                }
            };
            let outcome = posted(&r);
            if let (Some(slot), Posted::Sent) = (injected, outcome) {
                // Injected: no completion will free the staging buffer.
                s.state.return_staging(slot);
            }
            if !s.state.queued_posted(outcome, &mut self.out) {
                return;
            }
        }
    }

    /// Whether [`SideIo::inject_now`] would inject a packet of `len` bytes, taking nothing:
    /// its request is then allocated complete before the inject.
    #[inline]
    pub(super) fn injectable(&self, len: usize) -> Injectable {
        let (SideData::Send(s), Some(_)) = (&self.data, &self.ep) else {
            return Injectable::No;
        };
        if s.local || len > s.inject_size || s.state.has_queued() {
            Injectable::No
        } else if s.state.has_credit() {
            Injectable::Now
        } else {
            Injectable::NoCredit
        }
    }

    /// Injects a `pktchan_send_i` packet now if it can go as a raw inject would: small
    /// enough, a credit at hand and nothing queued before it (FIFO). The provider copies it,
    /// so it takes no staging buffer and leaves no send completion to read. `false`: it
    /// must be staged and queued (a refused inject gives its credit back).
    #[inline]
    pub(super) fn inject_now(&mut self, data: &[u8]) -> bool {
        if self.injectable(data.len()) != Injectable::Now {
            return false;
        }
        let (SideData::Send(s), Some(ep)) = (&mut self.data, &self.ep) else {
            return false;
        };
        if !s.state.take_credit() {
            return false;
        }
        let r = s.inject(ep, data, s.state.seq(), self.dest);
        // Anything but success goes the queued way, which retries it and reports a failure.
        let outcome = if r.is_ok() {
            Posted::Sent
        } else {
            Posted::Again
        };
        matches!(
            s.state.posted(outcome, Status::MCAPI_ERR_TRANSMISSION),
            Ok(true)
        )
    }

    /// Copies a `pktchan_send_i` packet into a free staging buffer of this send side;
    /// `None` when every one is taken. Staging buffers come back with their sends'
    /// completions, so the CQ is read first when none is free.
    pub(super) fn stage(&mut self, data: &[u8], payload: usize) -> Option<Outgoing<SendBuffer>> {
        if matches!(&self.data, SideData::Send(s) if s.state.staging_exhausted()) {
            self.progress(ChannelKind::Packet, payload, false, false);
        }
        let SideData::Send(s) = &mut self.data else {
            return None;
        };
        let slot = s.state.take_staging()?;
        if s.staging.write(slot * payload, data).is_err() {
            // Never: a free staging buffer has no send in flight.
            s.state.return_staging(slot);
            return None;
        }
        Some(Outgoing::Staged {
            slot,
            len: data.len(),
        })
    }

    /// Posts `finalize`'s flush marker of a send side that injects from its own endpoint
    /// ([`SendData::flush_marker`]): an empty message to the receiver, with a completion,
    /// which the provider sends after everything this side injected before it. `false`
    /// while the provider has no room for it (try again after progress). A side that never
    /// sent anything needs none (its completion would wait for the receiver's progress).
    pub(super) fn send_flush_marker(&mut self) -> bool {
        let (SideData::Send(s), Some(ep), None) = (&mut self.data, &self.ep, &self.hub) else {
            return true;
        };
        if s.local || s.flush_marker != FlushMarker::Unsent {
            return true;
        }
        if s.state.sent() == 0 {
            s.flush_marker = FlushMarker::Done;
            return true;
        }
        let sent = s
            .credit_slots
            .empty()
            .and_then(|empty| ep.send(empty, Some(FLUSH_MARK), self.dest, CTX_FLUSH));
        s.flush_marker = match posted(&sent) {
            Posted::Sent => FlushMarker::InFlight,
            Posted::Again => return false,
            Posted::Failed => FlushMarker::Done,
        };
        true
    }

    /// Whether `pktchan_send_i` packets wait on this send side (for credits or a slot).
    pub(super) fn has_queued_send(&self) -> bool {
        matches!(&self.data, SideData::Send(s) if s.state.has_queued())
    }

    /// Sends `n` returned credits to the sender; keeps them if the provider is busy.
    pub(super) fn return_credits(&mut self, n: u32) {
        // The credits let the sender fill emptied slots: they are posted first.
        let slots_posted = !self.slots_listed() || self.repost_slots();
        let SideData::Recv(r) = &mut self.data else {
            return;
        };
        if !r.state.sender_wants_credits() {
            // The sender closed (or died) and needs no more: its endpoint may be gone. While
            // packets it queued before closing are still to come, it needs the credits.
            return;
        }
        if let Some(l) = &mut r.local {
            // Handed over by the side's `pump_local`.
            l.credits += n;
            return;
        }
        let sent = slots_posted
            && match (&self.ep, &self.hub) {
                (None, _) => false,
                (Some(_), Some(h)) => h.hub.send_credits(n, self.dest, h.peer_route).is_ok(),
                (Some(ep), None) => ep.inject(&u64::from(n).to_le_bytes(), self.dest).is_ok(),
            };
        if !sent {
            r.state.credits_not_sent(n);
        }
    }
}

/// The sequence number a receive side's completion carries as its remote CQ data: `None`
/// for a message that is no item (no CQ data, or a sender's flush marker).
#[inline(always)]
fn item_seq(c: &Completion, unflagged: bool) -> Option<u64> {
    cq_data(c, unflagged).filter(|&d| d != FLUSH_MARK)
}

/// Copies `data` into a free staging buffer of a send side and posts it with sequence
/// number `seq` (a credit is taken); `None` when every staging buffer is in use (the credit
/// is given back: try again after a send completion).
pub(super) fn post_staged(
    s: &mut SendData,
    ep: Option<&Endpoint>,
    dest: FiAddr,
    data: &[u8],
    seq: u64,
    payload: usize,
) -> Option<std::result::Result<(), OfiError>> {
    let Some(slot) = s.state.take_staging() else {
        // The credit taken for it comes back.
        _ = s.state.posted(Posted::Again, Status::MCAPI_SUCCESS);
        return None;
    };
    let Some(ep) = ep else {
        s.state.return_staging(slot);
        return Some(Err(OfiError::InvalidArgument("endpoint closed")));
    };
    let r = s
        .staging
        .write(slot * payload, data)
        .and_then(|()| s.staging.slice(slot * payload, data.len()))
        .and_then(|buf| ep.send(buf, Some(seq), dest, CTX_STAGING | slot as u64));
    if r.is_err() {
        s.state.return_staging(slot);
    }
    Some(r)
}

impl SideIo {
    /// A receive found the FIFO empty: the end of the stream (`gone`'s status) once the
    /// sender closed or died and everything it sent arrived.
    pub(super) fn nothing_received(&self, gone: Option<Status>) -> Result<()> {
        let SideData::Recv(r) = &self.data else {
            return Err(Status::MCAPI_ERR_CHAN_INVALID);
        };
        if r.state.overrun() {
            // Items beyond the sender's credits were dropped: what follows the gap would
            // never come out of the reorder buffer. (The scalar calls' ERRORS tables have no
            // MCAPI_ERR_TRANSMISSION: MCAPI_ERR_GENERAL there, as for their other failures.)
            return Err(match r.state.kind() {
                ChannelKind::Scalar => Status::MCAPI_ERR_GENERAL,
                ChannelKind::Packet => Status::MCAPI_ERR_TRANSMISSION,
            });
        }
        match gone.filter(|_| r.state.sender_done()) {
            Some(status) => Err(status),
            None => Ok(()),
        }
    }

    /// Re-posts credit receives consumed while the endpoint was lent to a zero-copy send.
    pub(super) fn repost_credit_slots(&mut self) {
        if let (SideData::Send(s), Some(ep)) = (&mut self.data, &self.ep) {
            repost_credit_slots_on(s, ep);
        }
    }
}

/// [`SideIo::repost_credit_slots`] of send side data `s` on its endpoint `ep`.
pub(super) fn repost_credit_slots_on(s: &mut SendData, ep: &Endpoint) {
    while let Some(slot) = s.credit_reposts.pop() {
        if let Ok(b) = s.credit_slots.slice(slot * 8, 8) {
            if let Err(e) = ep.recv(b, FiAddr::UNSPEC, CTX_CREDIT | slot as u64) {
                credit_slot_lost(&e);
            }
        }
    }
}

/// A credit receive that could not be posted again: the receiver's returns then wait in the
/// provider's unexpected queue (bounded by the credits themselves).
#[cold]
fn credit_slot_lost(e: &OfiError) {
    log::warn!("a channel's credit receive could not be posted again: {e}");
}
