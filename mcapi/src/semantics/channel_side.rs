//! The receive side of a channel as an I/O-free state machine: what arrived, in which
//! order it is handed out, which pool buffers and scalar slots go back to the fabric and
//! when, which credits go back to the sender, and which `*_recv_i` requests complete.
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

use super::channel::{ChannelKind, CreditReturn, PoolBuffers};
use super::queue::{Rejected, SeqReorder};
use super::request::RequestHandle;
use super::Status;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

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
    posting: Posting,
    buffer_size: usize,
    buffers: PoolBuffers,
    reorder: SeqReorder<u8, Item>,
    fifo: VecDeque<Item>,
    returns: CreditReturn,
    /// Slots and buffers free to be posted again; never more than there are.
    to_post: Vec<u32>,
    /// Packets the application holds, by offset, counted (an empty packet takes no room
    /// in a multi-receive buffer, so the next one starts at the same offset).
    held: FxHashMap<usize, u32>,
    received: u32,
    /// How many the sender sent in all, once it closed or died.
    peer_sent: Option<u32>,
    /// `pktchan_recv_i` requests in the order they were made.
    pending: VecDeque<RequestHandle>,
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
        RecvSide {
            kind,
            posting,
            buffer_size,
            buffers: PoolBuffers::new(n),
            reorder: SeqReorder::new(1, capacity.max(1) * 2),
            fifo: VecDeque::with_capacity(capacity as usize),
            returns: CreditReturn::new(capacity),
            to_post: Vec::with_capacity(n),
            held: FxHashMap::default(),
            received: 0,
            peer_sent: None,
            pending: VecDeque::with_capacity(16),
            completed: VecDeque::with_capacity(16),
        }
    }

    /// How the pool is posted.
    pub fn posting(&self) -> Posting {
        self.posting
    }

    /// The size of one buffer or slot.
    pub fn buffer_size(&self) -> usize {
        self.buffer_size
    }

    /// Items received so far (the sequence number expected next, widened).
    pub fn received(&self) -> u32 {
        self.received
    }

    /// Whether completion context `b` names one of the pool's buffers.
    pub fn holds_buffer(&self, b: u64) -> bool {
        self.buffers.holds(b)
    }

    // ---- what the fabric reports ----

    /// A packet of `len` bytes at `offset` arrived in buffer `b` as item `seq` of the
    /// sender's stream (not yet counting the provider's release of the buffer: see
    /// [`RecvSide::buffer_done`]). Returns credits to give back now, and what to do with
    /// the buffer if the packet was a duplicate (dropped).
    pub fn packet_arrived(
        &mut self,
        b: usize,
        offset: usize,
        len: usize,
        seq: u32,
    ) -> (Option<u32>, Repost) {
        self.buffers.arrived(b);
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
    pub fn buffer_done(&mut self, b: usize) -> Repost {
        if self.buffers.provider_released(b) {
            self.free(b)
        } else {
            Repost::Later
        }
    }

    /// Scalar slot `slot` completed: with a scalar (`Some((seq, value, width))`) or without
    /// (anything else that arrived in it). The slot is listed to be posted again either way;
    /// returns credits to give back now.
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
    pub fn hub_scalar_arrived(&mut self, seq: u32, value: u64, len: usize) -> Option<u32> {
        let item = Item {
            offset: 0,
            len,
            value,
        };
        self.accept(seq, item).ok().flatten()
    }

    /// A plain receive into buffer or slot `b` failed (say, truncated): it is free again.
    pub fn receive_failed(&mut self, b: usize) -> Repost {
        if self.posting == Posting::MultiRecv || !self.buffers.holds(b as u64) {
            return Repost::Later;
        }
        self.buffer_done(b)
    }

    /// The outcome of a [`Repost::Now`]: posted, or listed to be posted later.
    pub fn posted(&mut self, b: usize, ok: bool) {
        if ok {
            self.buffers.reposted(b);
        } else {
            self.list(b as u32);
        }
    }

    /// The next listed slot or buffer to post; report it with [`RecvSide::posted_again`].
    pub fn next_to_post(&self) -> Option<u32> {
        self.to_post.last().copied()
    }

    /// The slot [`RecvSide::next_to_post`] gave was posted.
    pub fn posted_again(&mut self) {
        if let Some(b) = self.to_post.pop() {
            self.buffers.reposted(b as usize);
        }
    }

    /// Whether slots or buffers wait to be posted again.
    pub fn any_to_post(&self) -> bool {
        !self.to_post.is_empty()
    }

    // ---- what the application does ----

    /// Items waiting to be received.
    pub fn available(&self) -> usize {
        self.fifo.len()
    }

    /// Takes the next packet; the application holds it until [`RecvSide::release`].
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
    pub fn release(&mut self, offset: usize) -> Result<(Repost, Option<u32>), Status> {
        if !self.unhold(offset) {
            return Err(Status::MCAPI_ERR_BUF_INVALID);
        }
        let b = offset / self.buffer_size;
        Ok((self.packet_gone(b), self.returns.freed()))
    }

    /// Whether a packet is held at `offset` (a release of it would succeed).
    pub fn is_held(&self, offset: usize) -> bool {
        self.held.contains_key(&offset)
    }

    /// Whether the application holds any packet.
    pub fn holds_packets(&self) -> bool {
        !self.held.is_empty()
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
                if let Repost::Now(b) = self.packet_gone(item.offset / self.buffer_size) {
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

    /// Whether nothing more will come from a sender that closed or died: all it announced
    /// arrived (or more: a zero-copy packet it gave up on may have got through); `true`
    /// while it is open.
    pub fn sender_done(&self) -> bool {
        self.peer_sent
            .is_none_or(|sent| self.received.wrapping_sub(sent) < 1 << 31)
    }

    /// Whether a closed sender announced items that have not arrived.
    pub fn awaits_announced(&self) -> bool {
        self.peer_sent.is_some() && !self.sender_done()
    }

    /// Credits to give back now if the sender is out of them (a return that could not be
    /// sent before is retried this way).
    pub fn credits_to_flush(&mut self) -> Option<u32> {
        self.returns.flush()
    }

    /// Whether returned credits should go to the sender: not once a closed or dead sender
    /// has everything it announced (its endpoint may be gone).
    pub fn sender_wants_credits(&self) -> bool {
        !(self.peer_sent.is_some() && self.sender_done())
    }

    /// Credits whose message could not be sent now; they go with a later return.
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

    /// A packet of buffer `b` is gone (released, discarded or dropped).
    fn packet_gone(&mut self, b: usize) -> Repost {
        if self.buffers.packet_released(b) {
            self.free(b)
        } else {
            Repost::Later
        }
    }

    /// Buffer `b` is free: a multi-receive goes back at once, a plain receive is listed.
    fn free(&mut self, b: usize) -> Repost {
        if self.posting == Posting::MultiRecv {
            Repost::Now(b)
        } else {
            self.list(b as u32);
            Repost::Later
        }
    }

    fn list(&mut self, b: u32) {
        debug_assert!(!self.to_post.contains(&b), "slot {b} listed twice");
        self.to_post.push(b);
    }

    fn hold(&mut self, offset: usize) {
        *self.held.entry(offset).or_insert(0) += 1;
    }

    fn unhold(&mut self, offset: usize) -> bool {
        match self.held.get_mut(&offset) {
            Some(1) => {
                self.held.remove(&offset);
                true
            }
            Some(n) => {
                *n -= 1;
                true
            }
            None => false,
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
}
