//! The two sides of a channel as I/O-free state machines.
//!
//! [`RecvSide`]: what arrived, in which order it is handed out, which pool buffers and
//! scalar slots go back to the fabric and when, which credits go back to the sender, and
//! which `*_recv_i` requests complete. [`SendSide`]: the credits held, the sequence number
//! of the next item, the staging buffers, the `pktchan_send_i` packets queued for credits
//! and those posted from the application's memory, and how each ends.
//!
//! The driver feeds in what the fabric reported (an item arrived in buffer `b`, the
//! provider is done with buffer `b`, a receive failed) and what the application did (take
//! an item, release a packet, close), and carries out what comes back: post buffer `b`
//! again ([`Repost::Now`]), return `n` credits, complete request `r`. Nothing here knows
//! libfabric; every queue is sized at construction, so nothing allocates per item.
//!
//! Re-posting policy, by [`Posting`] mode:
//! - `MultiRecv` (packet buffers shared by small packets, `FI_MULTI_RECV`): a buffer is
//!   posted again the moment both the provider (its last completion) and the application
//!   (every packet in it released) are done with it ([`Repost::Now`]); if that post fails
//!   it is listed and posted later.
//! - `Plain` (one receive per scalar slot or packet buffer, shm): a free slot is listed and
//!   posted off the reply path: before credits go back (so the sender never has more on
//!   its way than receives are posted), when the side is idle, or at the next receive call.
//! - `Hub` (scalars on the node's shared hub): nothing of its own is posted.
//!
//! A `MultiRecv` side may also take small packets through the node's hub
//! ([`RecvSide::add_hub_slots`]): each is copied into a slot of its own, numbered after the
//! pool's buffers and spares, which its release frees (nothing is posted for it).

use super::channel::{ChannelKind, CreditReturn, Fill, PoolBuffers, Release, SendCredits};
use super::queue::{Rejected, SeqReorder};
use super::request::RequestHandle;
use super::Status;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::ops::Range;
use std::time::{Duration, Instant};

/// How a receive side's pool is posted to the fabric (see the module doc).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Posting {
    /// Packet buffers, each an `FI_MULTI_RECV` receive that small packets share.
    MultiRecv,
    /// One plain receive per scalar slot or packet buffer.
    Plain,
    /// Nothing of its own: the scalar hub's pool.
    Hub,
}

/// One received packet or scalar, where it lies in the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    /// Offset of the packet in the pool (scalars: of their slot).
    pub offset: usize,
    /// Its length in bytes (scalars: the width).
    pub len: usize,
    /// A scalar's value (packets: 0).
    pub value: u64,
}

/// What to do with a pool buffer after an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Repost {
    /// Nothing now (still in use, or listed to be posted later).
    Later,
    /// Post buffer `b` again now; report the outcome with [`RecvSide::posted`].
    Now(usize),
}

/// A request the side completed, for the driver to record (outside the side's lock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completed {
    /// The request.
    pub request: RequestHandle,
    /// How it ended.
    pub status: Status,
    /// Bytes transferred.
    pub len: usize,
    /// The packet handed to a `pktchan_recv_i`, if it got one.
    pub item: Option<Item>,
}

/// The receive side's state machine (see the module doc).
pub struct RecvSide {
    kind: ChannelKind,
    /// The sender's credits: items it may have here (arrived and not yet received).
    capacity: u32,
    /// More arrived than a sender keeping to its credits can have sent (hub scalars,
    /// which are routed by what a message says): some were dropped, the stream has a gap.
    overrun: bool,
    posting: Posting,
    buffer_size: usize,
    buffers: PoolBuffers,
    reorder: SeqReorder<u8, Item>,
    fifo: VecDeque<Item>,
    returns: CreditReturn,
    /// Slots and buffers free to be posted again; never more than there are.
    to_post: Vec<u32>,
    /// Packets the application holds.
    held: Held,
    /// Where packets began in each multi-receive buffer (for `pktchan_release_test`).
    starts: PacketStarts,
    /// What the provider reported written in each multi-receive buffer since its post
    /// ([`RecvSide::track_fill`]).
    fill: Option<Box<Fill>>,
    /// Spare multi-receive buffers not used yet (they follow the pool's buffers).
    spares: Range<usize>,
    /// The spare [`RecvSide::receive_failed`] just handed out, until its post is reported.
    fresh_spare: Option<usize>,
    received: u32,
    /// How many the sender sent in all, once it closed or died.
    peer_sent: Option<u32>,
    /// Slots after the pool's buffers for packets copied out of the hub.
    hub_slots: HubSlots,
    /// `pktchan_recv_i` requests in the order they were made.
    pending: VecDeque<RequestHandle>,
    /// Where the packets handed to `pktchan_recv_i` requests lie, until the application
    /// takes them from their requests ([`RecvSide::delivered`]): held, but not yet its to
    /// release (a stale pointer to the same place, released before, is refused).
    undelivered: Vec<usize>,
    /// Requests completed and not yet taken by the driver.
    completed: VecDeque<Completed>,
}

impl RecvSide {
    /// A side of `n` scalar slots or packet buffers of `buffer_size` bytes each, all about
    /// to be posted, taking `capacity` items (the sender's credits) at once.
    pub fn new(
        kind: ChannelKind,
        posting: Posting,
        buffer_size: usize,
        n: usize,
        capacity: u32,
    ) -> RecvSide {
        // Multi-receive buffers may be lost to the provider (`RecvSide::receive_failed`):
        // as many spares as buffers, numbered after them, each posted in a lost one's place.
        let spares = if posting == Posting::MultiRecv { n } else { 0 };
        RecvSide {
            kind,
            capacity,
            overrun: false,
            posting,
            buffer_size,
            buffers: PoolBuffers::new(n, spares),
            reorder: SeqReorder::new(1, capacity.max(1) * 2),
            fifo: VecDeque::with_capacity(capacity as usize),
            returns: CreditReturn::new(capacity),
            to_post: Vec::with_capacity(n),
            held: if posting == Posting::MultiRecv {
                Held::ByOffset(FxHashMap::default())
            } else {
                Held::ByBuffer {
                    counts: vec![0; n],
                    total: 0,
                }
            },
            starts: PacketStarts::new(
                if posting == Posting::MultiRecv {
                    n + spares
                } else {
                    0
                },
                buffer_size,
            ),
            fill: None,
            spares: n..n + spares,
            fresh_spare: None,
            received: 0,
            peer_sent: None,
            hub_slots: HubSlots {
                base: (n + spares) * buffer_size,
                size: 0,
                free: Vec::new(),
                began: Vec::new(),
            },
            pending: VecDeque::with_capacity(16),
            undelivered: Vec::with_capacity(16),
            completed: VecDeque::with_capacity(16),
        }
    }

    /// Gives a multi-receive side one slot of `size` bytes per credit, for packets that
    /// come through the hub: a sender keeping to its credits never has more here at once.
    /// Slot `i` is at offset [`RecvSide::hub_slots_base`] + `i` x `size`, past the pool's
    /// buffers and spares (the driver keeps them in memory of their own).
    pub fn add_hub_slots(&mut self, size: usize) {
        debug_assert_eq!(self.posting, Posting::MultiRecv);
        let n = self.capacity as usize;
        self.hub_slots.size = size.max(1);
        self.hub_slots.free = (0..n as u32).rev().collect();
        self.hub_slots.began = vec![false; n];
    }

    /// The offset of the first hub slot: the end of the pool's buffers and spares.
    #[inline]
    pub fn hub_slots_base(&self) -> usize {
        self.hub_slots.base
    }

    /// How the pool is posted.
    #[inline]
    pub fn posting(&self) -> Posting {
        self.posting
    }

    /// The size of one buffer or slot.
    #[inline]
    pub fn buffer_size(&self) -> usize {
        self.buffer_size
    }

    /// Items received so far (the sequence number expected next, widened).
    #[inline]
    pub fn received(&self) -> u32 {
        self.received
    }

    // ---- what the fabric reports ----

    /// A packet of `len` bytes at `offset` arrived in buffer `b` as item `seq` of the
    /// sender's stream (not yet counting the provider's release of the buffer: see
    /// [`RecvSide::buffer_done`]). Returns credits to give back now, and what to do with
    /// the buffer if the packet was a duplicate (dropped).
    #[inline(always)]
    pub fn packet_arrived(
        &mut self,
        b: usize,
        offset: usize,
        len: usize,
        seq: u32,
    ) -> (Option<u32>, Repost) {
        self.buffers.arrived(b);
        self.starts.arrived(b, offset);
        let item = Item {
            offset,
            len,
            value: 0,
        };
        match self.accept(seq, item) {
            Ok(credits) => (credits, Repost::Later),
            // A duplicate or a number beyond the window (no sender of ours sends one).
            Err(_) => (None, self.packet_gone(b)),
        }
    }

    /// The provider is done with buffer `b` (a plain receive's completion, or a
    /// multi-receive's last).
    #[inline(always)]
    pub fn buffer_done(&mut self, b: usize) -> Repost {
        if self.buffers.provider_released(b) {
            self.free(b)
        } else {
            Repost::Later
        }
    }

    /// Makes a multi-receive side hold a buffer the provider releases back until every
    /// message the provider carved out of it was reported ([`Fill`], which says why;
    /// [`RecvSide::filled`], [`RecvSide::multi_recv_released`]). A buffer counts as used up
    /// when less than `min_free` bytes are left in it (the endpoint's
    /// `FI_OPT_MIN_MULTI_RECV`).
    pub fn track_fill(&mut self, min_free: usize) {
        if self.posting == Posting::MultiRecv {
            let n = self.buffers.count();
            self.fill = Some(Box::new(Fill::new(n, self.buffer_size, min_free)));
        }
    }

    /// A completion reported `len` bytes written at pool offset `offset` of multi-receive
    /// buffer `b` (a packet or anything else). Frees the buffer if its release was waiting
    /// for these bytes.
    #[inline(always)]
    pub fn filled(&mut self, b: usize, offset: usize, len: usize) -> Repost {
        self.done_if(b, |fill| fill.reported(b, offset, len))
    }

    /// A message too long for what was left of multi-receive buffer `b` ended in an error
    /// after `written` bytes: it took the rest of the buffer, so it was the last carved out
    /// of it. Frees the buffer if a release was waiting for it ([`RecvSide::filled`]); else
    /// see [`RecvSide::receive_failed`].
    pub fn truncated_in(&mut self, b: usize, written: usize) -> Repost {
        self.done_if(b, |fill| fill.truncated(b, written))
    }

    /// Buffer `b` is done with if `done` says its waiting release now counts.
    #[inline(always)]
    fn done_if(&mut self, b: usize, done: impl FnOnce(&mut Fill) -> bool) -> Repost {
        match self.fill.as_deref_mut().is_some_and(done) {
            true => self.buffer_done(b),
            false => Repost::Later,
        }
    }

    /// The provider released multi-receive buffer `b` (a completion flagged
    /// `FI_MULTI_RECV`): done with it once every message carved out of it was reported
    /// ([`RecvSide::track_fill`]), else when the last of them is ([`RecvSide::filled`]).
    #[inline(always)]
    pub fn multi_recv_released(&mut self, b: usize) -> Repost {
        match self.fill.as_mut().map(|fill| fill.released(b)) {
            None | Some(Release::Done) => self.buffer_done(b),
            Some(Release::Waits) => Repost::Later,
            Some(Release::Lost) => self.lost(b),
        }
    }

    /// A message carved out of multi-receive buffer `b` ended in an error other than a
    /// truncation (how much it wrote is not said): a release that waited for it, or one
    /// that comes with bytes missing, gives the buffer up ([`Fill::failed`]).
    pub fn carved_failed(&mut self, b: usize) -> Repost {
        if self.fill.as_mut().is_some_and(|fill| fill.failed(b)) {
            self.lost(b)
        } else {
            Repost::Later
        }
    }

    /// Multi-receive buffer `b` is given up: a spare takes its place, if one is left.
    fn lost(&mut self, b: usize) -> Repost {
        self.receive_failed(b, false, true)
    }

    /// Scalar slot `slot` completed: with a scalar (`Some((seq, value, width))`) or without
    /// (anything else that arrived in it). The slot is listed to be posted again either way;
    /// returns credits to give back now.
    #[inline(always)]
    pub fn scalar_arrived(&mut self, slot: u32, scalar: Option<(u32, u64, usize)>) -> Option<u32> {
        self.list(slot);
        let (seq, value, len) = scalar?;
        let item = Item {
            offset: slot as usize * self.buffer_size,
            len,
            value,
        };
        self.accept(seq, item).ok().flatten()
    }

    /// A scalar arrived through the hub (nothing of this side's is posted for it); `seq` is
    /// widened by the caller. Returns credits to give back now.
    #[inline(always)]
    pub fn hub_scalar_arrived(&mut self, seq: u32, value: u64, len: usize) -> Option<u32> {
        // The hub routes by what a message says: beyond what a sender can have here (its
        // credits, twice over if a forged credit return refilled them once) a message is
        // dropped, never queued without bound, and the side reports the gap
        // ([`RecvSide::overrun`]) rather than waiting for it.
        if self.fifo.len() + self.reorder.buffered(&0) >= 2 * self.capacity as usize {
            self.overrun = true;
            return None;
        }
        let item = Item {
            offset: 0,
            len,
            value,
        };
        self.accept(seq, item).ok().flatten()
    }

    /// Packet `seq` of `len` bytes came through the hub: `copy` puts it at the pool offset
    /// it is given (a free hub slot) and says whether it did. Returns credits to give back
    /// now. A packet that does not fit a slot, or finds none free, is more than a sender
    /// keeping to its credits can have here (the hub routes by what a message says): it is
    /// dropped and the stream has a gap ([`RecvSide::overrun`]).
    #[inline]
    pub fn hub_packet_arrived(
        &mut self,
        seq: u32,
        len: usize,
        copy: impl FnOnce(usize) -> bool,
    ) -> Option<u32> {
        let slot = (len <= self.hub_slots.size)
            .then(|| self.hub_slots.free.pop())
            .flatten();
        let Some(slot) = slot else {
            self.overrun = true;
            return None;
        };
        let offset = self.hub_slots.offset(slot as usize);
        if !copy(offset) {
            self.hub_slots.free.push(slot);
            self.overrun = true;
            return None;
        }
        self.hub_slots.began[slot as usize] = true;
        let item = Item {
            offset,
            len,
            value: 0,
        };
        match self.accept(seq, item) {
            Ok(credits) => credits,
            // A duplicate or a number beyond the window: the slot is free again.
            Err(_) => {
                self.hub_slots.free.push(slot);
                None
            }
        }
    }

    /// A receive into buffer or slot `b` failed (say, truncated): a plain receive's buffer
    /// is free again, and so is a multi-receive buffer the provider released with the error
    /// (`released`: the entry is flagged `FI_MULTI_RECV`). A multi-receive buffer ended by
    /// a message too long for it without being released (`truncated`; tcp;ofi_rxm drops
    /// it, and may still be writing a message it matched there earlier) is never posted
    /// again: the next spare buffer takes its place, if one is left.
    #[inline]
    pub fn receive_failed(&mut self, b: usize, released: bool, truncated: bool) -> Repost {
        if !self.buffers.holds(b as u64) {
            return Repost::Later;
        }
        if self.posting != Posting::MultiRecv || released {
            return self.buffer_done(b);
        }
        if !truncated || !self.buffers.lose(b) {
            return Repost::Later;
        }
        self.fresh_spare = self.spares.next();
        match self.fresh_spare {
            Some(spare) => Repost::Now(spare),
            None => Repost::Later,
        }
    }

    /// Spare buffers left for lost ones (see [`RecvSide::receive_failed`]).
    pub fn spares_left(&self) -> usize {
        self.spares.len()
    }

    /// The outcome of a [`Repost::Now`]: posted, or listed to be posted later. A spare
    /// that failed its first post (its memory could not be made) is not listed, which
    /// would hold every credit return back behind it: it goes back among the spares, for
    /// the next loss to try again, and the side goes on with one buffer less.
    #[inline(always)]
    pub fn posted(&mut self, b: usize, ok: bool) {
        let fresh_spare = self.fresh_spare.take() == Some(b);
        if ok {
            self.buffers.reposted(b);
            self.starts.reposted(b);
            if let Some(fill) = &mut self.fill {
                fill.reposted(b);
            }
        } else if fresh_spare {
            self.spares.start = b;
        } else {
            self.list(b as u32);
        }
    }

    /// The next listed slot or buffer to post; report it with [`RecvSide::posted_again`].
    #[inline(always)]
    pub fn next_to_post(&self) -> Option<u32> {
        self.to_post.last().copied()
    }

    /// The slot [`RecvSide::next_to_post`] gave was posted.
    #[inline(always)]
    pub fn posted_again(&mut self) {
        if let Some(b) = self.to_post.pop() {
            self.buffers.reposted(b as usize);
            self.starts.reposted(b as usize);
            if let Some(fill) = &mut self.fill {
                fill.reposted(b as usize);
            }
        }
    }

    /// Whether slots or buffers wait to be posted again.
    #[inline(always)]
    pub fn any_to_post(&self) -> bool {
        !self.to_post.is_empty()
    }

    // ---- what the application does ----

    /// Items waiting to be received.
    #[inline(always)]
    pub fn available(&self) -> usize {
        // Those owed to pending `pktchan_recv_i` requests are theirs, not available.
        self.fifo.len().saturating_sub(self.pending.len())
    }

    /// Takes the next packet; the application holds it until [`RecvSide::release`].
    #[inline(always)]
    pub fn take_packet(&mut self) -> Option<Item> {
        let item = self.fifo.pop_front()?;
        self.hold(item.offset);
        Some(item)
    }

    /// Takes the next scalar, which must be `width` bytes wide (else
    /// `MCAPI_ERR_GENERAL`, and it stays queued). Returns it and the credits to give back.
    ///
    /// # Errors
    /// `MCAPI_ERR_GENERAL` for a width mismatch.
    #[inline(always)]
    pub fn take_scalar(&mut self, width: usize) -> Result<Option<(u64, Option<u32>)>, Status> {
        match self.fifo.front() {
            None => Ok(None),
            Some(item) if item.len != width => Err(Status::MCAPI_ERR_GENERAL),
            Some(item) => {
                let v = item.value;
                self.fifo.pop_front();
                Ok(Some((v, self.returns.freed())))
            }
        }
    }

    /// The application released the packet at `offset`. Returns what to do with its buffer
    /// and the credits to give back now.
    ///
    /// # Errors
    /// `MCAPI_ERR_BUF_INVALID` if no packet is held there.
    #[inline(always)]
    pub fn release(&mut self, offset: usize) -> Result<(Repost, Option<u32>), Status> {
        if !self.undelivered.is_empty() && self.held_count(offset) <= self.undelivered_at(offset) {
            // Every packet held there waits in a request: none is the application's.
            return Err(Status::MCAPI_ERR_BUF_INVALID);
        }
        if !self.unhold(offset) {
            return Err(Status::MCAPI_ERR_BUF_INVALID);
        }
        Ok((self.item_gone(offset), self.returns.freed()))
    }

    /// Whether a packet is held at `offset` (a release of it would succeed).
    #[inline]
    pub fn is_held(&self, offset: usize) -> bool {
        match &self.held {
            Held::ByOffset(map) => map.contains_key(&offset),
            Held::ByBuffer { counts, .. } => {
                self.plain_buffer(offset).is_some_and(|b| counts[b] > 0)
            }
        }
    }

    /// `mcapi_pktchan_release_test` of `offset`: `Some(false)` while the application holds
    /// the packet there, `Some(true)` once it released it, `None` if no packet began there
    /// (a plain receive's packets begin their buffers, once one was received there; a
    /// multi-receive buffer remembers where its packets began until it receives again
    /// after being posted again).
    pub fn release_state(&self, offset: usize) -> Option<bool> {
        if self.is_held(offset) {
            return Some(false);
        }
        let began = match &self.held {
            Held::ByBuffer { .. } => self
                .plain_buffer(offset)
                .is_some_and(|b| self.buffers.ever_received(b)),
            Held::ByOffset(_) => match self.hub_slots.of(offset) {
                Some(slot) => self.hub_slots.began[slot],
                None => offset
                    .checked_div(self.buffer_size)
                    .is_some_and(|b| self.starts.began(b, offset)),
            },
        };
        began.then_some(true)
    }

    /// The application took the packet at `offset` from its `pktchan_recv_i` request: it
    /// may release it now.
    pub fn delivered(&mut self, offset: usize) {
        if let Some(i) = self.undelivered.iter().position(|&o| o == offset) {
            self.undelivered.swap_remove(i);
        }
    }

    /// Packets handed to requests at `offset` that the application has not taken yet.
    fn undelivered_at(&self, offset: usize) -> usize {
        self.undelivered.iter().filter(|&&o| o == offset).count()
    }

    /// Packets held at `offset`.
    fn held_count(&self, offset: usize) -> usize {
        match &self.held {
            Held::ByOffset(map) => map.get(&offset).map_or(0, |&n| n as usize),
            Held::ByBuffer { counts, .. } => {
                self.plain_buffer(offset).map_or(0, |b| counts[b] as usize)
            }
        }
    }

    /// Whether the application holds any packet.
    #[inline]
    pub fn holds_packets(&self) -> bool {
        match &self.held {
            Held::ByOffset(map) => !map.is_empty(),
            Held::ByBuffer { total, .. } => *total > 0,
        }
    }

    /// A `pktchan_recv_i` waits for the next item.
    pub fn add_pending(&mut self, request: RequestHandle) {
        self.pending.push_back(request);
    }

    /// Withdraws a pending request (cancel); `false` if it is not pending.
    pub fn withdraw(&mut self, request: RequestHandle) -> bool {
        let before = self.pending.len();
        self.pending.retain(|&h| h != request);
        self.pending.len() < before
    }

    /// Whether `pktchan_recv_i` requests wait here.
    #[inline]
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Hands queued items to pending requests in order; once the sender is gone
    /// (`gone`: the status its loss gives) and everything it sent was taken, the remaining
    /// requests complete with that status. Results go to [`RecvSide::take_completed`].
    pub fn serve_pending(&mut self, gone: Option<Status>) {
        while !self.pending.is_empty() && !self.fifo.is_empty() {
            let (Some(request), Some(item)) = (self.pending.pop_front(), self.fifo.pop_front())
            else {
                break;
            };
            self.hold(item.offset);
            self.undelivered.push(item.offset);
            self.completed.push_back(Completed {
                request,
                status: Status::MCAPI_SUCCESS,
                len: item.len,
                item: Some(item),
            });
        }
        if let Some(status) = gone {
            if self.fifo.is_empty() && self.sender_done() {
                while let Some(request) = self.pending.pop_front() {
                    self.completed.push_back(Completed {
                        request,
                        status,
                        len: 0,
                        item: None,
                    });
                }
            }
        }
    }

    /// Closes the side here: queued items are discarded (packet buffers that become free
    /// are listed, to be posted by the caller now) and pending requests are cancelled.
    pub fn close(&mut self) {
        while let Some(item) = self.fifo.pop_front() {
            // A scalar's slot was listed when it arrived.
            if self.kind == ChannelKind::Packet {
                if let Repost::Now(b) = self.item_gone(item.offset) {
                    self.list(b as u32);
                }
            }
        }
        while let Some(request) = self.pending.pop_front() {
            self.completed.push_back(Completed {
                request,
                status: Status::MCAPI_ERR_REQUEST_CANCELLED,
                len: 0,
                item: None,
            });
        }
    }

    /// The next request the side completed, for the driver to record.
    pub fn take_completed(&mut self) -> Option<Completed> {
        self.completed.pop_front()
    }

    // ---- the other side ----

    /// The sender closed after sending `sent` items in all. A cancel after the close
    /// announces a smaller count, and the two may arrive in either order: the smaller holds.
    pub fn sender_closed(&mut self, sent: u32) {
        let ahead = |n: u32| n.wrapping_sub(self.received);
        self.peer_sent = Some(match self.peer_sent {
            Some(old) if ahead(old) <= ahead(sent) => old,
            _ => sent,
        });
    }

    /// The sender's node died: nothing more comes than what arrived.
    pub fn sender_died(&mut self) {
        self.peer_sent = Some(self.received);
    }

    /// An item for this side was dropped before it arrived here (the hub's inbox for it
    /// was full): the stream has a gap.
    pub fn gap(&mut self) {
        self.overrun = true;
    }

    /// Whether items beyond what the sender could have sent on its credits arrived and
    /// were dropped (a stream with a gap: it ends with `MCAPI_ERR_TRANSMISSION`).
    #[inline(always)]
    pub fn overrun(&self) -> bool {
        self.overrun
    }

    /// Whether nothing more will come from a sender that closed or died: all it announced
    /// arrived (or more: a zero-copy packet it gave up on may have got through); `true`
    /// while it is open.
    #[inline(always)]
    pub fn sender_done(&self) -> bool {
        self.peer_sent
            .is_none_or(|sent| self.received.wrapping_sub(sent) < 1 << 31)
    }

    /// Scalars or packets.
    #[inline]
    pub fn kind(&self) -> ChannelKind {
        self.kind
    }

    /// Whether items arrived ahead of one still missing (held back to keep the order).
    #[inline]
    pub fn awaits_out_of_order(&self) -> bool {
        self.reorder.buffered(&0) > 0
    }

    /// Whether a closed sender announced items that have not arrived.
    #[inline]
    pub fn awaits_announced(&self) -> bool {
        self.peer_sent.is_some() && !self.sender_done()
    }

    /// Credit returns go back in larger batches ([`CreditReturn::hold_back`]).
    pub fn hold_back_credits(&mut self) {
        self.returns.hold_back();
    }

    /// Credits to give back now if the sender is out of them (a return that could not be
    /// sent before is retried this way).
    #[inline(always)]
    pub fn credits_to_flush(&mut self) -> Option<u32> {
        self.returns.flush()
    }

    /// Whether returned credits should go to the sender: not once a closed or dead sender
    /// has everything it announced (its endpoint may be gone).
    #[inline(always)]
    pub fn sender_wants_credits(&self) -> bool {
        !(self.peer_sent.is_some() && self.sender_done())
    }

    /// Credits whose message could not be sent now; they go with a later return.
    #[inline]
    pub fn credits_not_sent(&mut self, n: u32) {
        self.returns.unflush(n);
    }

    // ---- internals ----

    /// Takes item number `seq`; those now in order go to the FIFO. Returns the credits to
    /// give back now.
    #[inline(always)]
    fn accept(&mut self, seq: u32, item: Item) -> Result<Option<u32>, Item> {
        if self.reorder.pass_in_order(0, seq) {
            // The common case: next in order with nothing waiting before it.
            self.fifo.push_back(item);
            self.received = self.received.wrapping_add(1);
            return Ok(self.returns.arrived());
        }
        self.accept_reordered(seq, item)
    }

    #[inline(never)]
    fn accept_reordered(&mut self, seq: u32, item: Item) -> Result<Option<u32>, Item> {
        let ready = self
            .reorder
            .accept(0, seq, item)
            .map_err(Rejected::into_inner)?;
        let mut due = None;
        for i in ready {
            self.fifo.push_back(i);
            self.received = self.received.wrapping_add(1);
            if let Some(n) = self.returns.arrived() {
                due = Some(due.unwrap_or(0) + n);
            }
        }
        Ok(due)
    }

    /// The packet at `offset` is gone (released or discarded): its hub slot is free, or
    /// its buffer counts one packet less.
    #[inline(always)]
    fn item_gone(&mut self, offset: usize) -> Repost {
        if let Some(slot) = self.hub_slots.of(offset) {
            self.hub_slots.free.push(slot as u32);
            return Repost::Later;
        }
        self.packet_gone(offset / self.buffer_size)
    }

    /// A packet of buffer `b` is gone (released, discarded or dropped).
    #[inline(always)]
    fn packet_gone(&mut self, b: usize) -> Repost {
        if self.buffers.packet_released(b) {
            self.free(b)
        } else {
            Repost::Later
        }
    }

    /// Buffer `b` is free: a multi-receive goes back at once, a plain receive is listed.
    #[inline(always)]
    fn free(&mut self, b: usize) -> Repost {
        if self.posting == Posting::MultiRecv {
            Repost::Now(b)
        } else {
            self.list(b as u32);
            Repost::Later
        }
    }

    #[inline(always)]
    fn list(&mut self, b: u32) {
        debug_assert!(!self.to_post.contains(&b), "slot {b} listed twice");
        self.to_post.push(b);
    }

    /// The buffer a plain receive's packet at `offset` lies in: packets start at a
    /// buffer's first byte there; `None` for any other offset.
    #[inline(always)]
    fn plain_buffer(&self, offset: usize) -> Option<usize> {
        let Held::ByBuffer { counts, .. } = &self.held else {
            return None;
        };
        let b = offset.checked_div(self.buffer_size)?;
        (offset.is_multiple_of(self.buffer_size) && b < counts.len()).then_some(b)
    }

    #[inline(always)]
    fn hold(&mut self, offset: usize) {
        let b = self.plain_buffer(offset);
        match (&mut self.held, b) {
            (Held::ByOffset(map), _) => *map.entry(offset).or_insert(0) += 1,
            (Held::ByBuffer { counts, total }, Some(b)) => {
                counts[b] += 1;
                *total += 1;
            }
            // Never: a plain receive's packet starts its buffer.
            (Held::ByBuffer { .. }, None) => debug_assert!(false, "packet at {offset}"),
        }
    }

    #[inline(always)]
    fn unhold(&mut self, offset: usize) -> bool {
        let b = self.plain_buffer(offset);
        match (&mut self.held, b) {
            (Held::ByOffset(map), _) => match map.get_mut(&offset) {
                Some(1) => {
                    map.remove(&offset);
                    true
                }
                Some(n) => {
                    *n -= 1;
                    true
                }
                None => false,
            },
            (Held::ByBuffer { counts, total }, Some(b)) if counts[b] > 0 => {
                counts[b] -= 1;
                *total -= 1;
                true
            }
            (Held::ByBuffer { .. }, _) => false,
        }
    }
}

/// The slots after a pool's buffers that packets copied out of the hub take, one each.
struct HubSlots {
    /// Offset of the first slot.
    base: usize,
    size: usize,
    free: Vec<u32>,
    /// Whether a packet was ever copied to the slot (for `pktchan_release_test`).
    began: Vec<bool>,
}

impl HubSlots {
    /// Where slot `slot` begins.
    #[inline(always)]
    fn offset(&self, slot: usize) -> usize {
        self.base + slot * self.size
    }

    /// The slot a packet at offset `offset` lies in, if it is one.
    #[inline(always)]
    fn of(&self, offset: usize) -> Option<usize> {
        let within = offset.checked_sub(self.base)?;
        let slot = within / self.size.max(1);
        (within.is_multiple_of(self.size.max(1)) && slot < self.began.len()).then_some(slot)
    }
}

/// Packets the application holds, counted where they lie.
enum Held {
    /// Multi-receive buffers, by offset (an empty packet takes no room in a buffer, so the
    /// next one starts at the same offset).
    ByOffset(FxHashMap<usize, u32>),
    /// Plain receives: a packet starts its buffer, so a count per buffer (no hashing on a
    /// packet's way), and their sum.
    ByBuffer { counts: Vec<u32>, total: usize },
}

/// Where the packets of each multi-receive buffer began, from its first arrival after it
/// was posted until the first one after it is posted again: in arrival order (a buffer
/// fills front to back), an empty packet's offset once however many share it, so at most a
/// buffer's size plus one per buffer. Allocated as packets first fill a buffer, kept after.
struct PacketStarts {
    buffers: Box<[BufferStarts]>,
    buffer_size: usize,
}

#[derive(Clone, Default)]
struct BufferStarts {
    /// Offsets within the buffer (a buffer is far below 4 GiB).
    offsets: Vec<u32>,
    /// Posted again since its last arrival: the next arrival starts a new list.
    stale: bool,
}

impl PacketStarts {
    fn new(buffers: usize, buffer_size: usize) -> PacketStarts {
        PacketStarts {
            buffers: vec![BufferStarts::default(); buffers].into_boxed_slice(),
            buffer_size,
        }
    }

    /// Pool offset `offset` as an offset within buffer `b`.
    #[inline(always)]
    fn within(&self, b: usize, offset: usize) -> Option<u32> {
        let start = b.checked_mul(self.buffer_size)?;
        u32::try_from(offset.checked_sub(start)?).ok()
    }

    #[inline(always)]
    fn arrived(&mut self, b: usize, offset: usize) {
        let Some(at) = self.within(b, offset) else {
            return;
        };
        let Some(buffer) = self.buffers.get_mut(b) else {
            return;
        };
        if buffer.stale {
            buffer.offsets.clear();
            buffer.stale = false;
        }
        if buffer.offsets.last() != Some(&at) {
            buffer.offsets.push(at);
        }
    }

    #[inline(always)]
    fn reposted(&mut self, b: usize) {
        if let Some(buffer) = self.buffers.get_mut(b) {
            buffer.stale = true;
        }
    }

    fn began(&self, b: usize, offset: usize) -> bool {
        let Some(at) = self.within(b, offset) else {
            return false;
        };
        self.buffers.get(b).is_some_and(|s| s.offsets.contains(&at))
    }
}

/// Where requests a side completes go (the driver's outbox; a `Vec` in tests).
pub trait Completions {
    /// Request `request` ended with `status` after moving `len` bytes.
    fn complete(&mut self, request: RequestHandle, status: Status, len: usize);
}

impl Completions for Vec<(RequestHandle, Status, usize)> {
    fn complete(&mut self, request: RequestHandle, status: Status, len: usize) {
        self.push((request, status, len));
    }
}

/// An application buffer a packet is sent from without a copy.
pub trait UserBuffer {
    /// Its length in bytes.
    fn byte_len(&self) -> usize;
}

/// A `pktchan_send_i` packet waiting for a credit.
#[derive(Debug)]
pub enum Outgoing<B> {
    /// Copied into staging buffer `slot`.
    Staged {
        /// The staging buffer.
        slot: usize,
        /// The packet's length.
        len: usize,
    },
    /// In the application's memory (zero copy).
    User(B),
}

/// The next queued packet to post, with the credit for it taken.
#[derive(Debug)]
pub enum NextSend<'a, B> {
    /// From staging buffer `slot`.
    Staged {
        /// The staging buffer.
        slot: usize,
        /// The packet's length.
        len: usize,
        /// Its sequence number.
        seq: u32,
    },
    /// From the application's buffer, tracked in zero-copy slot `zslot` until its send
    /// completes.
    User {
        /// The buffer.
        buf: &'a B,
        /// The zero-copy slot (the completion context names it).
        zslot: usize,
        /// Its sequence number.
        seq: u32,
    },
}

/// What became of a post to the fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Posted {
    /// It went (its sequence number is spent).
    Sent,
    /// The provider asked to try again later.
    Again,
    /// The provider refused it.
    Failed,
}

/// A blocking zero-copy send's progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZeroCopy {
    /// None under way.
    Idle,
    /// Posted, its completion not seen yet.
    Waiting,
    /// Completed (`true`: without error).
    Done(bool),
}

/// The send side's state machine (see the module doc). `B` is the driver's zero-copy
/// buffer type.
pub struct SendSide<B> {
    credits: SendCredits,
    next_seq: u32,
    staging_free: Vec<usize>,
    /// `pktchan_send_i` packets waiting for credits, in order.
    queued: VecDeque<(RequestHandle, Outgoing<B>)>,
    /// Zero-copy packets posted, until their send completions (one slot per credit).
    in_flight: Box<[Option<(RequestHandle, B)>]>,
    in_flight_free: Vec<usize>,
    /// When the receiver was first seen gone with zero-copy packets in flight.
    gone_since: Option<Instant>,
    zero_copy: ZeroCopy,
    /// A packet failed after it was posted: its sequence number is spent, so the receiver
    /// would wait for it forever; the channel is broken.
    broken: bool,
    /// The count the receiver was last told, once this side closed.
    announced: Option<u32>,
}

impl<B: UserBuffer> SendSide<B> {
    /// A sender holding the receiver's `credits` and `staging` staging buffers (as many
    /// zero-copy slots).
    pub fn new(credits: u32, staging: usize) -> SendSide<B> {
        SendSide {
            credits: SendCredits::new(credits),
            next_seq: 0,
            staging_free: (0..staging).rev().collect(),
            queued: VecDeque::with_capacity(staging),
            in_flight: (0..staging).map(|_| None).collect(),
            in_flight_free: (0..staging).rev().collect(),
            gone_since: None,
            zero_copy: ZeroCopy::Idle,
            broken: false,
            announced: None,
        }
    }

    // ---- credits and sequence numbers ----

    /// The receiver returned `n` credits.
    #[inline(always)]
    pub fn credits_returned(&mut self, n: u32) {
        self.credits.add(n);
    }

    /// The receiver's pool of `n` buffers, for a sender that opened before it knew it.
    pub fn credits_granted(&mut self, n: u32) {
        self.credits.grant(n);
    }

    /// Whether a credit is held (for an item that is to be posted next).
    #[inline(always)]
    pub fn has_credit(&self) -> bool {
        self.credits.available() > 0
    }

    /// Takes a credit for an item about to be posted; `false` if none is held.
    #[inline(always)]
    pub fn take_credit(&mut self) -> bool {
        self.credits.try_take()
    }

    /// The sequence number the next item goes with.
    #[inline(always)]
    pub fn seq(&self) -> u32 {
        self.next_seq
    }

    /// Items posted so far (the next sequence number): what a finalize announces.
    #[inline]
    pub fn sent(&self) -> u32 {
        self.next_seq
    }

    /// The outcome of posting an item whose credit was taken: its sequence number is
    /// spent if it went, the credit comes back if not. `Ok(false)`: try again later.
    ///
    /// # Errors
    /// `fail` when the provider refused it.
    #[inline(always)]
    pub fn posted(&mut self, outcome: Posted, fail: Status) -> Result<bool, Status> {
        match outcome {
            Posted::Sent => {
                self.next_seq = self.next_seq.wrapping_add(1);
                Ok(true)
            }
            Posted::Again => {
                self.credits.untake();
                Ok(false)
            }
            Posted::Failed => {
                self.credits.untake();
                Err(fail)
            }
        }
    }

    // ---- staging ----

    /// A free staging buffer, taken.
    #[inline]
    pub fn take_staging(&mut self) -> Option<usize> {
        self.staging_free.pop()
    }

    /// Gives back staging buffer `slot` (unused, or its send completed).
    #[inline]
    pub fn return_staging(&mut self, slot: usize) {
        self.staging_free.push(slot);
    }

    /// Whether every staging buffer is taken.
    #[inline]
    pub fn staging_exhausted(&self) -> bool {
        self.staging_free.is_empty()
    }

    /// Whether staging buffers are taken (copied packets posted or queued).
    #[inline]
    pub fn has_staged_in_flight(&self) -> bool {
        // There are as many staging buffers as zero-copy slots.
        self.staging_free.len() < self.in_flight.len()
    }

    // ---- completions from the fabric ----

    /// The send from staging buffer `slot` completed (`ok`: without error).
    #[inline]
    pub fn staged_sent(&mut self, slot: usize, ok: bool) {
        self.broken |= !ok;
        self.return_staging(slot);
    }

    /// The zero-copy `pktchan_send_i` packet of slot `zslot` completed.
    #[inline]
    pub fn user_sent(&mut self, zslot: usize, ok: bool, out: &mut impl Completions) {
        self.broken |= !ok;
        if let Some((request, buf)) = self.in_flight.get_mut(zslot).and_then(Option::take) {
            self.in_flight_free.push(zslot);
            if ok {
                out.complete(request, Status::MCAPI_SUCCESS, buf.byte_len());
            } else {
                out.complete(request, Status::MCAPI_ERR_TRANSMISSION, 0);
            }
        }
    }

    /// A blocking zero-copy send is posted.
    pub fn zero_copy_started(&mut self) {
        self.zero_copy = ZeroCopy::Waiting;
    }

    /// The blocking zero-copy send completed (`ok`: without error), or its CQ failed.
    pub fn zero_copy_sent(&mut self, ok: bool) {
        self.zero_copy = ZeroCopy::Done(ok);
    }

    /// Where the blocking zero-copy send stands.
    #[inline]
    pub fn zero_copy(&self) -> ZeroCopy {
        self.zero_copy
    }

    /// Whether a packet failed after it was posted.
    #[inline]
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    // ---- pktchan_send_i packets ----

    /// Queues `request`'s packet behind the others.
    #[inline]
    pub fn queue(&mut self, request: RequestHandle, packet: Outgoing<B>) {
        self.queued.push_back((request, packet));
    }

    /// Whether packets wait for credits (a blocking send must not pass them).
    #[inline(always)]
    pub fn has_queued(&self) -> bool {
        !self.queued.is_empty()
    }

    /// Whether packets were handed to the fabric and their sends have not completed:
    /// zero-copy ones, or copied ones beyond those still queued for credits.
    pub fn has_posted(&self) -> bool {
        let queued_staged = self
            .queued
            .iter()
            .filter(|(_, p)| matches!(p, Outgoing::Staged { .. }))
            .count();
        // There are as many staging buffers as zero-copy slots.
        let staged = self.in_flight.len() - self.staging_free.len();
        self.has_in_flight() || staged > queued_staged
    }

    /// Whether zero-copy packets are posted and not completed yet.
    #[inline]
    pub fn has_in_flight(&self) -> bool {
        self.in_flight_free.len() < self.in_flight.len()
    }

    /// Whether `request` is a zero-copy packet posted and not completed.
    pub fn is_in_flight(&self, request: RequestHandle) -> bool {
        self.in_flight.iter().flatten().any(|e| e.0 == request)
    }

    /// The first queued packet, ready to post: its credit (and zero-copy slot) taken.
    /// `None` when nothing is queued or it must wait (no credit, every slot posted).
    #[inline]
    pub fn next_queued(&mut self) -> Option<NextSend<'_, B>> {
        let seq = self.next_seq;
        let free_zslot = self.in_flight_free.last().copied();
        let (_, packet) = self.queued.front()?;
        if matches!(packet, Outgoing::User(_)) && free_zslot.is_none() {
            // Every slot is posted: wait for a send completion.
            return None;
        }
        if !self.credits.try_take() {
            return None;
        }
        let (_, packet) = self.queued.front()?;
        Some(match packet {
            Outgoing::Staged { slot, len } => NextSend::Staged {
                slot: *slot,
                len: *len,
                seq,
            },
            Outgoing::User(buf) => NextSend::User {
                buf,
                zslot: free_zslot?,
                seq,
            },
        })
    }

    /// What became of the post of the packet [`SendSide::next_queued`] gave. `false`:
    /// stop posting for now.
    #[inline]
    pub fn queued_posted(&mut self, outcome: Posted, out: &mut impl Completions) -> bool {
        match outcome {
            Posted::Sent => {
                self.next_seq = self.next_seq.wrapping_add(1);
                let Some((request, packet)) = self.queued.pop_front() else {
                    return false;
                };
                match packet {
                    Outgoing::User(buf) => {
                        // Completes when the send completion arrives.
                        if let Some(zslot) = self.in_flight_free.pop() {
                            self.in_flight[zslot] = Some((request, buf));
                        }
                    }
                    Outgoing::Staged { len, .. } => {
                        out.complete(request, Status::MCAPI_SUCCESS, len)
                    }
                }
                true
            }
            Posted::Again => {
                self.credits.untake();
                false
            }
            Posted::Failed => {
                self.credits.untake();
                if let Some((request, packet)) = self.queued.pop_front() {
                    if let Outgoing::Staged { slot, .. } = packet {
                        self.return_staging(slot);
                    }
                    out.complete(request, Status::MCAPI_ERR_TRANSMISSION, 0);
                }
                true
            }
        }
    }

    /// Takes a queued packet off (a cancel); its staging buffer is free again. `None` if it
    /// is not queued (posted already, or no such request).
    pub fn withdraw(&mut self, request: RequestHandle) -> Option<Outgoing<B>> {
        let i = self.queued.iter().position(|q| q.0 == request)?;
        let (_, packet) = self.queued.remove(i)?;
        if let Outgoing::Staged { slot, .. } = packet {
            self.return_staging(slot);
        }
        Some(packet)
    }

    /// What a close announces: the packets posted and those still queued to go.
    #[inline]
    fn announced_count(&self) -> u32 {
        self.next_seq.wrapping_add(self.queued.len() as u32)
    }

    /// The side closes: the count to tell the receiver (it waits for that many packets).
    pub fn announce_close(&mut self) -> u32 {
        let count = self.announced_count();
        self.announced = Some(count);
        count
    }

    /// A smaller count to tell the receiver after a close, when a queued packet will never
    /// go (withdrawn by a cancel, or refused by the provider): without it the receiver would
    /// wait for that packet. `None`: not closed, or nothing changed since the last count.
    pub fn recount(&mut self) -> Option<u32> {
        let count = self.announced_count();
        let last = self.announced.as_mut()?;
        (*last != count).then(|| {
            *last = count;
            count
        })
    }

    // ---- the other side gone ----

    /// The receiver closed or died while zero-copy packets are posted: they may never
    /// complete, and the application's memory is free only once the provider stops reading
    /// it, which closing the endpoint guarantees. Completions of packets the receiver did
    /// take may still be on their way: `true` once `grace` has passed since the loss was
    /// first seen, when the endpoint must close.
    pub fn receiver_gone(&mut self, now: Instant, grace: Duration) -> bool {
        if !self.has_in_flight() {
            return false;
        }
        let since = *self.gone_since.get_or_insert(now);
        now.duration_since(since) >= grace
    }

    /// Completes every zero-copy packet still posted with `MCAPI_ERR_TRANSMISSION`: only
    /// once the endpoint is closed (the provider no longer reads the memory).
    pub fn fail_in_flight(&mut self, out: &mut impl Completions) {
        for (zslot, entry) in self.in_flight.iter_mut().enumerate() {
            if let Some((request, _)) = entry.take() {
                self.in_flight_free.push(zslot);
                out.complete(request, Status::MCAPI_ERR_TRANSMISSION, 0);
            }
        }
    }

    /// Completes every queued packet with `MCAPI_ERR_TRANSMISSION` (they never go).
    pub fn fail_queued(&mut self, out: &mut impl Completions) {
        for (request, packet) in self.queued.drain(..) {
            if let Outgoing::Staged { slot, .. } = packet {
                self.staging_free.push(slot);
            }
            out.complete(request, Status::MCAPI_ERR_TRANSMISSION, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::semantics::channel::SendCredits;

    const SIZE: usize = 1024;

    fn req(n: u32) -> RequestHandle {
        RequestHandle::from_raw(u64::from(n) + 1)
    }

    #[test]
    fn a_plain_buffers_packet_is_released_once_and_only_at_its_start() {
        let mut r = RecvSide::new(ChannelKind::Packet, Posting::Plain, SIZE, 4, 4);
        assert_eq!(r.packet_arrived(2, 2 * SIZE, 0, 0), (None, Repost::Later));
        assert_eq!(r.buffer_done(2), Repost::Later);
        let p = r.take_packet().unwrap();
        assert_eq!(p.offset, 2 * SIZE);
        assert!(r.holds_packets() && r.is_held(2 * SIZE));
        for wrong in [0, SIZE, 2 * SIZE + 1, 3 * SIZE, 4 * SIZE, usize::MAX] {
            assert!(!r.is_held(wrong), "{wrong}");
            assert_eq!(
                r.release(wrong),
                Err(Status::MCAPI_ERR_BUF_INVALID),
                "{wrong}"
            );
        }
        assert_eq!(r.release(2 * SIZE).unwrap().0, Repost::Later);
        assert!(!r.holds_packets() && !r.is_held(2 * SIZE));
        assert_eq!(r.next_to_post(), Some(2));
        assert_eq!(r.release(2 * SIZE), Err(Status::MCAPI_ERR_BUF_INVALID));
    }

    #[test]
    fn a_multi_receive_buffer_goes_back_once_the_provider_and_the_application_are_done() {
        let mut r = RecvSide::new(ChannelKind::Packet, Posting::MultiRecv, SIZE, 2, 8);
        assert_eq!(r.packet_arrived(0, 0, 10, 0), (None, Repost::Later));
        assert_eq!(r.packet_arrived(0, 16, 10, 1), (None, Repost::Later));
        // The provider releases the buffer while the packets are still queued.
        assert_eq!(r.buffer_done(0), Repost::Later);
        let a = r.take_packet().unwrap();
        let b = r.take_packet().unwrap();
        assert_eq!((a.offset, b.offset), (0, 16));
        assert_eq!(r.release(a.offset).unwrap().0, Repost::Later);
        assert_eq!(r.release(b.offset).unwrap().0, Repost::Now(0));
        r.posted(0, true);
        assert!(!r.any_to_post());
    }

    /// `release_state` (`mcapi_pktchan_release_test`): held, released, or where no packet
    /// began; a released packet's address is known until its buffer receives again.
    #[test]
    fn release_test_knows_where_packets_began() {
        let mut r = RecvSide::new(ChannelKind::Packet, Posting::MultiRecv, SIZE, 2, 8);
        assert_eq!(r.packet_arrived(0, 0, 10, 0), (None, Repost::Later));
        assert_eq!(r.packet_arrived(0, 16, 10, 1), (None, Repost::Later));
        assert_eq!(r.buffer_done(0), Repost::Later);
        let (a, b) = (r.take_packet().unwrap(), r.take_packet().unwrap());
        assert_eq!(r.release_state(a.offset), Some(false));
        assert_eq!(r.release(a.offset).unwrap().0, Repost::Later);
        assert_eq!(r.release_state(a.offset), Some(true));
        assert_eq!(r.release_state(b.offset), Some(false));
        for never in [1, 8, 17, SIZE, SIZE + 16, 2 * SIZE, usize::MAX] {
            assert_eq!(r.release_state(never), None, "{never}");
        }
        // Posted again: still known until the buffer receives anew.
        assert_eq!(r.release(b.offset).unwrap().0, Repost::Now(0));
        r.posted(0, true);
        assert_eq!(r.release_state(b.offset), Some(true));
        let _ = r.packet_arrived(0, 0, 4, 2);
        assert_eq!(r.release_state(b.offset), None, "received into again");
        assert_eq!(r.release_state(0), Some(true), "arrived, not taken");
        // Plain receives: packets begin their buffers, once one was received there (before,
        // any buffer's start read as "released", pool memory never received into too).
        let mut p = RecvSide::new(ChannelKind::Packet, Posting::Plain, SIZE, 4, 4);
        assert_eq!(p.release_state(SIZE), None, "never received into");
        let _ = p.packet_arrived(1, SIZE, 8, 0);
        let _ = p.buffer_done(1);
        let taken = p.take_packet().unwrap();
        assert_eq!(p.release_state(SIZE), Some(false));
        assert_eq!(p.release(taken.offset).unwrap().0, Repost::Later);
        assert_eq!(p.release_state(SIZE), Some(true));
        assert_eq!(p.release_state(0), None, "never received into");
        assert_eq!(p.release_state(SIZE + 1), None);
        assert_eq!(p.release_state(4 * SIZE), None);
    }

    /// A packet handed to a `pktchan_recv_i` is held, but the application may release it
    /// only once it took it from the request: a stale pointer to the same buffer, released
    /// before, is refused meanwhile (before, the release went through and the buffer went
    /// back to the fabric under the packet the request then handed out).
    #[test]
    fn a_packet_waiting_in_its_request_cannot_be_released_yet() {
        for posting in [Posting::Plain, Posting::MultiRecv] {
            let mut r = RecvSide::new(ChannelKind::Packet, posting, SIZE, 2, 2);
            let _ = r.packet_arrived(0, 0, 8, 0);
            let _ = r.buffer_done(0);
            let first = r.take_packet().unwrap();
            let _ = r.release(first.offset).expect("the first packet released");
            if posting == Posting::MultiRecv {
                r.posted(0, true);
            } else {
                assert_eq!(r.next_to_post(), Some(0));
                r.posted_again();
            }
            r.add_pending(req(1));
            let _ = r.packet_arrived(0, 0, 8, 1);
            let _ = r.buffer_done(0);
            r.serve_pending(None);
            let served = r.take_completed().unwrap();
            assert_eq!(served.item.map(|i| i.offset), Some(0), "{posting:?}");
            assert_eq!(
                r.release(0),
                Err(Status::MCAPI_ERR_BUF_INVALID),
                "{posting:?}: a stale pointer released it"
            );
            assert!(r.is_held(0));
            r.delivered(0);
            assert!(r.release(0).is_ok(), "{posting:?}: taken, then released");
            assert_eq!(r.release(0), Err(Status::MCAPI_ERR_BUF_INVALID));
        }
    }

    /// A multi-receive buffer the provider releases with an error completion (a packet
    /// truncated, say) is posted again; an error that does not release it leaves it posted.
    #[test]
    fn a_multi_receive_buffer_released_with_an_error_is_posted_again() {
        let mut r = RecvSide::new(ChannelKind::Packet, Posting::MultiRecv, SIZE, 2, 8);
        assert_eq!(r.receive_failed(1, false, false), Repost::Later);
        assert_eq!(r.receive_failed(1, true, true), Repost::Now(1));
        assert_eq!(
            r.receive_failed(7, true, false),
            Repost::Later,
            "no such buffer"
        );
    }

    /// A multi-receive buffer that a message too long for it ended without releasing it
    /// (tcp;ofi_rxm) is never posted again, not even when its packets are released: a
    /// spare takes its place, once per lost buffer and as long as spares last (as many as
    /// buffers). Plain receives are free again whatever ended them.
    #[test]
    fn a_lost_multi_receive_buffer_is_replaced_by_a_spare() {
        let mut r = RecvSide::new(ChannelKind::Packet, Posting::MultiRecv, SIZE, 2, 8);
        let _ = r.packet_arrived(0, 0, 4, 0);
        assert_eq!(r.receive_failed(0, false, true), Repost::Now(2));
        r.posted(2, true);
        assert_eq!(
            r.receive_failed(0, false, true),
            Repost::Later,
            "replaced once"
        );
        let p = r.take_packet().unwrap();
        assert_eq!(
            r.release(p.offset).unwrap().0,
            Repost::Later,
            "lost for good"
        );
        // The spare takes packets as any buffer, and goes back when done.
        let _ = r.packet_arrived(2, 2 * SIZE + 8, 4, 1);
        assert_eq!(r.buffer_done(2), Repost::Later);
        let p = r.take_packet().unwrap();
        assert_eq!(p.offset, 2 * SIZE + 8);
        assert_eq!(r.release_state(p.offset), Some(false));
        assert_eq!(r.release(p.offset).unwrap().0, Repost::Now(2));
        r.posted(2, true);
        // A spare whose memory cannot be made is not listed (credit returns wait for
        // listed buffers): it is tried again at the next loss.
        assert_eq!(r.receive_failed(1, false, true), Repost::Now(3));
        r.posted(3, false);
        assert_eq!(r.next_to_post(), None);
        assert_eq!(r.spares_left(), 1);
        assert_eq!(r.receive_failed(1, false, true), Repost::Later, "lost once");
        let _ = r.packet_arrived(2, 2 * SIZE, 4, 2);
        assert_eq!(r.receive_failed(2, false, true), Repost::Now(3));
        r.posted(3, true);
        assert_eq!(r.spares_left(), 0);
        assert_eq!(
            r.receive_failed(3, false, true),
            Repost::Later,
            "no spare left"
        );
        // A lost buffer the provider still reports released is its again.
        assert_eq!(r.receive_failed(0, true, false), Repost::Now(0));

        let mut plain = RecvSide::new(ChannelKind::Packet, Posting::Plain, SIZE, 2, 8);
        assert_eq!(plain.receive_failed(1, false, true), Repost::Later);
        assert_eq!(plain.next_to_post(), Some(1), "listed to be posted again");
    }

    /// tcp;ofi_rxm, given a buffer while messages wait, carves them out of it and reports
    /// it released at once (`FI_MULTI_RECV`, no bytes), while a large one is still being
    /// written there: the buffer goes back only once every byte carved out of it was
    /// reported (a packet, or a message too long for the rest), and once its packets are
    /// released. Before, it was posted again at the release, and the next packet landed
    /// where the last was still being written.
    #[test]
    fn a_release_waits_for_the_messages_carved_out_of_the_buffer() {
        const MIN: usize = SIZE / 2;
        let mut r = RecvSide::new(ChannelKind::Packet, Posting::MultiRecv, SIZE, 2, 8);
        r.track_fill(MIN);
        // A packet of most of buffer 0 carved at the post, written after the release.
        assert_eq!(
            r.multi_recv_released(0),
            Repost::Later,
            "nothing reported yet"
        );
        let _ = r.packet_arrived(0, 0, SIZE - 8, 0);
        assert_eq!(
            r.filled(0, 0, SIZE - 8),
            Repost::Later,
            "its packet is held"
        );
        let p = r.take_packet().unwrap();
        assert_eq!(r.release(p.offset).unwrap().0, Repost::Now(0));
        r.posted(0, true);
        // A message too long for buffer 1 carved at the post: the release waits for its
        // truncation.
        assert_eq!(r.multi_recv_released(1), Repost::Later);
        assert_eq!(r.truncated_in(1, SIZE), Repost::Now(1));
        r.posted(1, true);
        // Reported out of order (an earlier message still written when a later one came):
        // the release waits for the gap.
        let _ = r.packet_arrived(1, SIZE + 600, 400, 2);
        assert_eq!(r.filled(1, SIZE + 600, 400), Repost::Later);
        assert_eq!(r.multi_recv_released(1), Repost::Later, "a gap before 600");
        assert!(r.take_packet().is_none(), "packet 1 comes first");
        let _ = r.packet_arrived(1, SIZE, 600, 1);
        assert_eq!(r.filled(1, SIZE, 600), Repost::Later, "packets held");
        let p = r.take_packet().unwrap();
        assert_eq!(r.release(p.offset).unwrap().0, Repost::Later);
        let p = r.take_packet().unwrap();
        assert_eq!(r.release(p.offset).unwrap().0, Repost::Now(1));
        r.posted(1, true);
        // A release before less than the minimum was reported: the rest is still coming.
        let _ = r.packet_arrived(0, 10, 10, 3);
        assert_eq!(r.filled(0, 10, 10), Repost::Later);
        assert_eq!(r.multi_recv_released(0), Repost::Later, "a gap before 10");
        let _ = r.filled(0, 0, 10);
        assert_eq!(
            r.multi_recv_released(0),
            Repost::Later,
            "more than MIN left"
        );
        // A message carved out of it that fails without saying what it wrote (a read
        // that failed): the waiting release gives the buffer up, and a spare takes its
        // place.
        assert_eq!(r.carved_failed(0), Repost::Now(2));
        r.posted(2, true);
        assert_eq!(r.carved_failed(1), Repost::Later, "no release waits");
        // Packets that fill the buffer as they come, the last with the release: done at
        // once, as before.
        let mut honest = RecvSide::new(ChannelKind::Packet, Posting::MultiRecv, SIZE, 2, 8);
        honest.track_fill(MIN);
        for (seq, at) in [0, MIN / 2, MIN].into_iter().enumerate() {
            let _ = honest.packet_arrived(0, at, MIN / 2, seq as u32);
            let _ = honest.filled(0, at, MIN / 2);
        }
        while let Some(p) = honest.take_packet() {
            let _ = honest.release(p.offset).unwrap();
        }
        assert_eq!(honest.multi_recv_released(0), Repost::Now(0));
    }

    #[test]
    fn a_failed_post_is_listed_and_posted_later() {
        let mut r = RecvSide::new(ChannelKind::Packet, Posting::MultiRecv, SIZE, 2, 8);
        let _ = r.packet_arrived(1, SIZE, 4, 0);
        assert_eq!(r.buffer_done(1), Repost::Later);
        let p = r.take_packet().unwrap();
        assert_eq!(r.release(p.offset).unwrap().0, Repost::Now(1));
        r.posted(1, false);
        assert_eq!(r.next_to_post(), Some(1));
        r.posted_again();
        assert_eq!(r.next_to_post(), None);
    }

    #[test]
    fn plain_slots_are_listed_not_posted_on_the_reply_path() {
        let mut r = RecvSide::new(ChannelKind::Packet, Posting::Plain, SIZE, 4, 4);
        let _ = r.packet_arrived(2, 2 * SIZE, 8, 0);
        // A plain receive's completion is the provider's release too.
        assert_eq!(r.buffer_done(2), Repost::Later);
        let p = r.take_packet().unwrap();
        assert_eq!(r.release(p.offset).unwrap().0, Repost::Later);
        assert_eq!(r.next_to_post(), Some(2));
    }

    #[test]
    fn releases_are_checked_and_counted() {
        let mut r = RecvSide::new(ChannelKind::Packet, Posting::MultiRecv, SIZE, 1, 4);
        assert_eq!(r.release(0), Err(Status::MCAPI_ERR_BUF_INVALID));
        // Two empty packets share one offset.
        let _ = r.packet_arrived(0, 0, 0, 0);
        let _ = r.packet_arrived(0, 0, 0, 1);
        r.take_packet().unwrap();
        r.take_packet().unwrap();
        assert!(r.is_held(0));
        assert!(r.release(0).is_ok());
        assert!(r.release(0).is_ok());
        assert_eq!(
            r.release(0),
            Err(Status::MCAPI_ERR_BUF_INVALID),
            "released twice"
        );
    }

    #[test]
    fn scalars_of_the_wrong_width_stay_queued() {
        let mut r = RecvSide::new(ChannelKind::Scalar, Posting::Plain, 8, 4, 4);
        r.scalar_arrived(0, Some((0, 7, 4)));
        assert_eq!(r.take_scalar(8), Err(Status::MCAPI_ERR_GENERAL));
        assert_eq!(r.take_scalar(4).unwrap().map(|v| v.0), Some(7));
        assert_eq!(r.take_scalar(4), Ok(None));
        assert_eq!(r.next_to_post(), Some(0), "the slot is listed at arrival");
    }

    #[test]
    fn pending_requests_take_items_in_order_then_fail_once_the_sender_is_gone() {
        let mut r = RecvSide::new(ChannelKind::Packet, Posting::MultiRecv, SIZE, 2, 8);
        for n in 0..3 {
            r.add_pending(req(n));
        }
        let _ = r.packet_arrived(0, 0, 5, 0);
        r.serve_pending(None);
        let c = r.take_completed().unwrap();
        assert_eq!(
            (c.request, c.status, c.len),
            (req(0), Status::MCAPI_SUCCESS, 5)
        );
        assert!(r.take_completed().is_none());
        r.sender_closed(2);
        r.serve_pending(Some(Status::MCAPI_ERR_TRANSMISSION));
        assert!(
            r.take_completed().is_none(),
            "one announced item is still to come"
        );
        let _ = r.packet_arrived(0, 8, 3, 1);
        r.serve_pending(Some(Status::MCAPI_ERR_TRANSMISSION));
        assert_eq!(r.take_completed().unwrap().request, req(1));
        let c = r.take_completed().unwrap();
        assert_eq!(
            (c.request, c.status),
            (req(2), Status::MCAPI_ERR_TRANSMISSION)
        );
    }

    #[test]
    fn close_discards_queued_packets_and_cancels_pending_requests() {
        let mut r = RecvSide::new(ChannelKind::Packet, Posting::MultiRecv, SIZE, 2, 8);
        let _ = r.packet_arrived(1, SIZE, 5, 0);
        assert_eq!(r.buffer_done(1), Repost::Later);
        r.add_pending(req(9));
        r.close();
        assert_eq!(r.next_to_post(), Some(1));
        let c = r.take_completed().unwrap();
        assert_eq!(c.status, Status::MCAPI_ERR_REQUEST_CANCELLED);
    }

    /// Small packets through the hub take slots after the buffers, mixed in order with
    /// packets in the pool by sequence number; a release frees the slot (nothing to post),
    /// release_test remembers it, a close frees the queued ones, and more than the credits
    /// (or a packet too large for a slot) is a gap, never an overwrite.
    #[test]
    fn hub_packets_take_slots_after_the_buffers_in_sequence_order() {
        let mut r = RecvSide::new(ChannelKind::Packet, Posting::MultiRecv, SIZE, 2, 3);
        r.add_hub_slots(64);
        let mut copied = Vec::new();
        let mut copy = |at| {
            copied.push(at);
            true
        };
        // Item 1 through the hub arrives before item 0 in the pool.
        assert_eq!(r.hub_packet_arrived(1, 8, &mut copy), None);
        assert_eq!(r.available(), 0);
        assert_eq!(r.packet_arrived(0, 0, 100, 0), (None, Repost::Later));
        assert_eq!(r.hub_packet_arrived(2, 64, &mut copy), None);
        let hub_base = r.hub_slots_base();
        assert_eq!(hub_base, 4 * SIZE, "after 2 buffers and 2 spares");
        assert_eq!(copied, [hub_base, hub_base + 64]);
        let (a, b, c) = (
            r.take_packet().unwrap(),
            r.take_packet().unwrap(),
            r.take_packet().unwrap(),
        );
        assert_eq!((a.offset, a.len), (0, 100));
        assert_eq!((b.offset, b.len), (hub_base, 8));
        assert_eq!((c.offset, c.len), (hub_base + 64, 64));
        assert_eq!(r.release_state(b.offset), Some(false));
        assert_eq!(r.release(b.offset).unwrap().0, Repost::Later);
        assert_eq!(r.release_state(b.offset), Some(true));
        assert_eq!(r.release(b.offset), Err(Status::MCAPI_ERR_BUF_INVALID));
        // Not a slot's start, and the never used slot 2.
        assert_eq!(r.release(hub_base + 65), Err(Status::MCAPI_ERR_BUF_INVALID));
        assert_eq!(r.release_state(hub_base + 128), None);
        assert!(!r.overrun());
        // Too large for a slot: a gap, nothing copied.
        let mut large = RecvSide::new(ChannelKind::Packet, Posting::MultiRecv, SIZE, 2, 3);
        large.add_hub_slots(64);
        assert_eq!(large.hub_packet_arrived(0, 65, |_| panic!("copied")), None);
        assert!(large.overrun());
        // Slots run out only beyond the credits: slot of b is free again, c and a held.
        let mut n = 0;
        for seq in 3..6 {
            r.hub_packet_arrived(seq, 1, |_| {
                n += 1;
                true
            });
        }
        assert_eq!(n, 2, "three credits, two packets held");
        assert!(r.overrun());
        // A close discards the queued ones: their slots are free again.
        let mut closed = RecvSide::new(ChannelKind::Packet, Posting::MultiRecv, SIZE, 2, 2);
        closed.add_hub_slots(64);
        for seq in 0..2 {
            closed.hub_packet_arrived(seq, 4, |_| true);
        }
        closed.close();
        assert!(!closed.any_to_post());
        let mut again = 0;
        for seq in 2..4 {
            closed.hub_packet_arrived(seq, 4, |_| {
                again += 1;
                true
            });
        }
        assert_eq!(again, 2);
        assert!(!closed.overrun());
    }

    /// A sender and this receive side on a simulated fabric, in virtual steps: the fabric
    /// delivers in any order it likes and holds completions back, the application takes
    /// and releases late, credits run dry and come back. Nothing is lost, duplicated or
    /// reordered; the sender never has more on its way than buffers are posted; every
    /// buffer is posted again exactly once it is free.
    #[test]
    fn simulated_pair_loses_nothing_under_reordering_and_dry_credits() {
        for (seed, posting) in [
            (1u64, Posting::MultiRecv),
            (7, Posting::Plain),
            (99, Posting::MultiRecv),
        ] {
            let capacity = 8u32;
            let mut rng = seed;
            let mut next = move |n: u64| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng % n
            };
            // One packet per buffer (plain) or up to four per multi-receive buffer; a
            // buffer per credit, as the driver sizes pools (one full packet each).
            let per_buffer = if posting == Posting::Plain { 1 } else { 4 };
            let buffers = capacity as usize;
            let mut r = RecvSide::new(ChannelKind::Packet, posting, SIZE, buffers, capacity);
            let mut credits = SendCredits::new(capacity);
            let mut posted = vec![true; buffers];
            let mut fill = vec![0usize; buffers];
            let mut in_flight: Vec<(u32, usize)> = Vec::new();
            let mut held: Vec<Item> = Vec::new();
            let (mut sent, mut got) = (0u32, 0u32);
            let total = 2_000;
            let mut steps = 0;
            while got < total {
                steps += 1;
                assert!(steps < 200_000, "seed {seed}: stuck at {got} of {total}");
                match next(4) {
                    // The sender sends into the posted buffer that has room.
                    0 if sent < total && credits.try_take() => {
                        let b = (0..buffers)
                            .find(|&b| posted[b] && fill[b] < per_buffer)
                            .unwrap_or_else(|| panic!("seed {seed}: a credit without room"));
                        fill[b] += 1;
                        in_flight.push((sent, b));
                        sent += 1;
                    }
                    // The fabric completes one of the packets on their way, in any order.
                    1 if !in_flight.is_empty() => {
                        let (seq, b) = in_flight.swap_remove(next(in_flight.len() as u64) as usize);
                        let offset = b * SIZE + (seq as usize % per_buffer) * 16;
                        let (due, rep) = r.packet_arrived(b, offset, 4, seq);
                        assert_eq!(rep, Repost::Later);
                        credits.add(due.unwrap_or(0));
                        if fill[b] == per_buffer && !in_flight.iter().any(|f| f.1 == b) {
                            posted[b] = false;
                            if let Repost::Now(x) = r.buffer_done(b) {
                                assert_eq!(x, b);
                                (posted[b], fill[b]) = (true, 0);
                                r.posted(b, true);
                            }
                        }
                    }
                    // The application takes what is in order.
                    2 => {
                        if let Some(item) = r.take_packet() {
                            let seq = (got as usize) % per_buffer;
                            assert_eq!(item.offset % SIZE, seq * 16, "seed {seed}: order");
                            got += 1;
                            held.push(item);
                        }
                    }
                    // ... and releases one it holds, in any order.
                    _ if !held.is_empty() => {
                        let item = held.swap_remove(next(held.len() as u64) as usize);
                        let (rep, due) = r.release(item.offset).unwrap();
                        credits.add(due.unwrap_or(0));
                        if let Repost::Now(b) = rep {
                            (posted[b], fill[b]) = (true, 0);
                            r.posted(b, true);
                        }
                        while let Some(b) = r.next_to_post() {
                            (posted[b as usize], fill[b as usize]) = (true, 0);
                            r.posted_again();
                        }
                    }
                    _ => {
                        credits.add(r.credits_to_flush().unwrap_or(0));
                    }
                }
                assert!(credits.available() <= capacity, "seed {seed}: credits grew");
            }
            assert_eq!(r.received(), total);
        }
    }

    #[derive(Debug)]
    struct Buf(usize);

    impl UserBuffer for Buf {
        fn byte_len(&self) -> usize {
            self.0
        }
    }

    type Done = Vec<(RequestHandle, Status, usize)>;

    #[test]
    fn queued_packets_go_in_order_as_credits_come() {
        let mut s: SendSide<Buf> = SendSide::new(1, 2);
        let mut done = Done::new();
        let a = s.take_staging().unwrap();
        s.queue(req(0), Outgoing::Staged { slot: a, len: 10 });
        s.queue(req(1), Outgoing::User(Buf(20)));
        match s.next_queued() {
            Some(NextSend::Staged {
                slot,
                len: 10,
                seq: 0,
            }) => assert_eq!(slot, a),
            other => panic!("{other:?}"),
        }
        assert!(s.queued_posted(Posted::Sent, &mut done));
        assert_eq!(done, [(req(0), Status::MCAPI_SUCCESS, 10)]);
        assert!(s.next_queued().is_none(), "no credit left");
        assert_eq!(s.announce_close(), 2, "one sent, one queued");
        s.credits_returned(1);
        let zslot = match s.next_queued() {
            Some(NextSend::User { buf, zslot, seq: 1 }) => {
                assert_eq!(buf.0, 20);
                zslot
            }
            other => panic!("{other:?}"),
        };
        assert!(s.queued_posted(Posted::Sent, &mut done));
        assert!(s.has_in_flight() && s.is_in_flight(req(1)));
        assert_eq!(done.len(), 1, "a zero-copy packet completes with its send");
        s.user_sent(zslot, true, &mut done);
        assert_eq!(done[1], (req(1), Status::MCAPI_SUCCESS, 20));
        s.staged_sent(a, true);
        assert!(!s.has_staged_in_flight() && !s.is_broken());
    }

    #[test]
    fn a_busy_provider_keeps_the_credit_and_the_order() {
        let mut s: SendSide<Buf> = SendSide::new(1, 1);
        let mut done = Done::new();
        let a = s.take_staging().unwrap();
        s.queue(req(0), Outgoing::Staged { slot: a, len: 1 });
        assert!(s.next_queued().is_some());
        assert!(!s.queued_posted(Posted::Again, &mut done));
        assert!(s.has_queued() && done.is_empty());
        assert!(s.next_queued().is_some(), "the credit came back");
        assert!(!s.queued_posted(Posted::Again, &mut done));
        // A refused post fails its request and frees its staging buffer.
        assert!(s.next_queued().is_some());
        assert!(s.queued_posted(Posted::Failed, &mut done));
        assert_eq!(done, [(req(0), Status::MCAPI_ERR_TRANSMISSION, 0)]);
        assert!(!s.staging_exhausted());
        assert_eq!(s.seq(), 0, "no sequence number spent");
    }

    #[test]
    fn a_closed_sender_recounts_what_will_never_go() {
        let mut s: SendSide<Buf> = SendSide::new(1, 4);
        let mut done = Done::new();
        for i in 0..4 {
            let slot = s.take_staging().unwrap();
            s.queue(req(i), Outgoing::Staged { slot, len: 1 });
        }
        assert!(s.next_queued().is_some());
        assert!(s.queued_posted(Posted::Sent, &mut done));
        assert_eq!(s.recount(), None, "not closed: nothing announced yet");
        assert_eq!(s.announce_close(), 4, "one sent, three queued");
        assert_eq!(s.recount(), None, "nothing changed");
        // The provider refuses the next one: the receiver must not wait for it.
        s.credits_returned(1);
        assert!(s.next_queued().is_some());
        assert!(s.queued_posted(Posted::Failed, &mut done));
        assert_eq!(s.recount(), Some(3));
        assert_eq!(s.recount(), None, "told once");
        // A cancel withdraws one.
        assert!(s.withdraw(req(2)).is_some());
        assert_eq!(s.recount(), Some(2));
        // The endpoint closed under the last: only what went counts.
        s.fail_queued(&mut done);
        assert_eq!(s.recount(), Some(1));
        assert_eq!(s.recount(), None);
    }

    #[test]
    fn a_failed_send_completion_breaks_the_channel() {
        let mut s: SendSide<Buf> = SendSide::new(4, 2);
        let slot = s.take_staging().unwrap();
        assert!(s.take_credit());
        assert_eq!(
            s.posted(Posted::Sent, Status::MCAPI_ERR_TRANSMISSION),
            Ok(true)
        );
        s.staged_sent(slot, false);
        assert!(s.is_broken());
        assert_eq!(
            s.posted(Posted::Failed, Status::MCAPI_ERR_GENERAL),
            Err(Status::MCAPI_ERR_GENERAL)
        );
    }

    #[test]
    fn a_lost_receiver_fails_what_is_queued_and_what_is_posted_after_a_grace() {
        let mut s: SendSide<Buf> = SendSide::new(1, 2);
        let mut done = Done::new();
        s.queue(req(0), Outgoing::User(Buf(8)));
        assert!(s.next_queued().is_some());
        assert!(s.queued_posted(Posted::Sent, &mut done));
        let slot = s.take_staging().unwrap();
        s.queue(req(1), Outgoing::Staged { slot, len: 3 });
        let t0 = Instant::now();
        let grace = Duration::from_millis(100);
        assert!(!s.receiver_gone(t0, grace), "completions may still come");
        assert!(s.receiver_gone(t0 + grace, grace));
        s.fail_queued(&mut done);
        s.fail_in_flight(&mut done);
        assert_eq!(
            done,
            [
                (req(1), Status::MCAPI_ERR_TRANSMISSION, 0),
                (req(0), Status::MCAPI_ERR_TRANSMISSION, 0)
            ]
        );
        assert!(!s.has_in_flight() && !s.has_queued() && !s.has_staged_in_flight());
    }

    #[test]
    fn a_cancelled_packet_is_withdrawn_and_its_buffer_freed() {
        let mut s: SendSide<Buf> = SendSide::new(0, 1);
        let slot = s.take_staging().unwrap();
        s.queue(req(3), Outgoing::Staged { slot, len: 3 });
        assert!(s.withdraw(req(4)).is_none());
        assert!(s.withdraw(req(3)).is_some());
        assert!(!s.staging_exhausted() && !s.has_queued());
    }

    /// Both sides on a simulated fabric: `pktchan_send_i` packets queue at the sender, go as
    /// credits allow, arrive in any order, are taken and released late; credit returns
    /// travel back (and are lost to a busy provider now and then, to be flushed later).
    /// Every request completes once, every packet arrives once and in order.
    #[test]
    fn simulated_pair_of_a_send_side_and_a_receive_side() {
        let capacity = 4u32;
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut tx: SendSide<Buf> = SendSide::new(capacity, capacity as usize);
        let mut rx = RecvSide::new(
            ChannelKind::Packet,
            Posting::Plain,
            SIZE,
            capacity as usize,
            capacity,
        );
        let mut done = Done::new();
        let mut free_bufs: Vec<usize> = (0..capacity as usize).collect();
        let mut wire: Vec<(u32, usize)> = Vec::new();
        let mut returning: Vec<u32> = Vec::new();
        let mut held: Vec<Item> = Vec::new();
        let (total, mut queued, mut got) = (500u32, 0u32, 0u32);
        // The buffer each sequence number went into, to check the order of delivery.
        let mut buffer_of = vec![usize::MAX; total as usize];
        for _ in 0..100_000 {
            if got == total {
                break;
            }
            match next(6) {
                0 if queued < total => {
                    if let Some(slot) = tx.take_staging() {
                        tx.queue(req(queued), Outgoing::Staged { slot, len: 8 });
                        queued += 1;
                    }
                }
                1 => {
                    while let Some(NextSend::Staged { slot, seq, .. }) = tx.next_queued() {
                        let b = free_bufs.pop().expect("a credit implies a posted buffer");
                        buffer_of[seq as usize] = b;
                        wire.push((seq, b));
                        assert!(tx.queued_posted(Posted::Sent, &mut done));
                        tx.staged_sent(slot, true);
                    }
                }
                2 if !wire.is_empty() => {
                    let (seq, b) = wire.swap_remove(next(wire.len() as u64) as usize);
                    let (due, dropped) = rx.packet_arrived(b, b * SIZE, 8, seq);
                    assert_eq!(dropped, Repost::Later);
                    assert_eq!(rx.buffer_done(b), Repost::Later);
                    returning.extend(due);
                }
                3 => {
                    if let Some(item) = rx.take_packet() {
                        assert_eq!(item.offset, buffer_of[got as usize] * SIZE, "order");
                        got += 1;
                        held.push(item);
                    }
                }
                4 if !held.is_empty() => {
                    let item = held.swap_remove(next(held.len() as u64) as usize);
                    let (_, due) = rx.release(item.offset).unwrap();
                    while let Some(b) = rx.next_to_post() {
                        free_bufs.push(b as usize);
                        rx.posted_again();
                    }
                    match due {
                        // The provider is busy: the return waits for a flush.
                        Some(n) if next(4) == 0 => rx.credits_not_sent(n),
                        due => returning.extend(due),
                    }
                }
                _ => {
                    returning.extend(rx.credits_to_flush());
                    for n in returning.drain(..) {
                        tx.credits_returned(n);
                    }
                }
            }
        }
        assert_eq!(
            got,
            total,
            "stuck: {queued} queued, {} on the wire",
            wire.len()
        );
        assert_eq!(done.len(), total as usize);
        assert!(done.iter().all(|d| d.1 == Status::MCAPI_SUCCESS));
        assert_eq!(rx.received(), total);
    }
}
