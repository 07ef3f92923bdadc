//! A side's memory: send staging and credits ([`SendData`]), the receive pool ([`RecvData`]).

use super::handle::Packet;
use super::hub::Hub;
use super::limits::{CTX_CREDIT, CTX_FLUSH, CTX_MASK, CTX_STAGING, CTX_USER, CTX_ZERO_COPY};
use super::outbox::Outbox;
use crate::node::common::lock;
use crate::semantics::channel_side::{
    Item, Posted, Posting, RecvSide, Repost, SendSide, UserBuffer,
};
use mcapi_ofi::{Domain, Endpoint, Error as OfiError, FiAddr, MemoryRegion, SendBuffer};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

// One per channel side: boxing the receive side would cost a pointer chase per packet to
// save a few hundred bytes per send side.
#[allow(clippy::large_enum_variant)]
pub(super) enum SideData {
    /// A sender before the receiver's open arrived.
    Unconnected,
    Send(SendData),
    Recv(RecvData),
}

/// A send side's memory and its state machine (`semantics::channel_side`).
pub(super) struct SendData {
    pub(super) state: SendSide<SendBuffer>,
    /// Where the receiver's credit messages arrive, one 8-byte slot each.
    pub(super) credit_slots: MemoryRegion,
    pub(super) staging: MemoryRegion,
    pub(super) inject_size: usize,
    /// A queued packet small enough to inject is copied out of its staging buffer into
    /// this, and injected from here (a send with a completion costs several times more,
    /// most of all under ofi_rxm).
    pub(super) inject_scratch: Vec<u8>,
    /// Credit receives that completed during a zero-copy send, to post again after it.
    pub(super) credit_reposts: Vec<usize>,
    /// The receiver is on this node: packets go to it directly (`local.rs`), not to the
    /// fabric.
    pub(super) local: bool,
    /// The receiver takes small packets through its node's hub: they go there from ours.
    pub(super) hub_lane: Option<HubLane>,
    /// `finalize`'s marker behind the packets and scalars this side injected, where the
    /// provider may still queue them (`Fab::injects_queue`): its completion says they were
    /// written.
    pub(super) flush_marker: FlushMarker,
}

/// Where a send side's flush marker is ([`SendData::flush_marker`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FlushMarker {
    Unsent,
    InFlight,
    /// Completed, failed, or not needed: nothing to wait for.
    Done,
}

/// Where a send side injects its small packets: the receiver's route on its node's hub.
pub(super) struct HubLane {
    pub(super) hub: Arc<Hub>,
    /// The receiver's hub in our hub's AV.
    pub(super) dest: FiAddr,
    pub(super) route: u16,
    /// Packets up to this size go this way (the hub's slots, the inject size).
    pub(super) max: usize,
}

impl UserBuffer for SendBuffer {
    fn byte_len(&self) -> usize {
        self.len()
    }
}

/// The packet of a `pktchan_send_i`.
pub(super) enum Source<'a> {
    /// To be copied.
    Copy(&'a [u8]),
    /// Zero copy where possible.
    User(SendBuffer),
}

impl Source<'_> {
    pub(super) fn len(&self) -> usize {
        match self {
            Source::Copy(d) => d.len(),
            Source::User(b) => b.len(),
        }
    }

    pub(super) fn bytes(&self) -> &[u8] {
        match self {
            Source::Copy(d) => d,
            Source::User(b) => b.as_slice(),
        }
    }
}

impl SendData {
    /// Injects packet `seq` (at most the inject size): through the hubs if the receiver
    /// takes it there, else from `ep` to `dest` (the receiver's endpoint).
    #[inline(always)]
    pub(super) fn inject(
        &self,
        ep: &Endpoint,
        data: &[u8],
        seq: u32,
        dest: FiAddr,
    ) -> std::result::Result<(), OfiError> {
        match &self.hub_lane {
            Some(lane) if data.len() <= lane.max => {
                lane.hub.send_value(data, seq, lane.dest, lane.route)
            }
            _ => ep.inject_data(data, u64::from(seq), dest),
        }
    }

    /// Handles a sender's completion (`ok`: not an error completion; `len`: the bytes it
    /// reports); returns the credit receive slot of a credit message (to be posted again).
    pub(super) fn event(
        &mut self,
        ctx: u64,
        ok: bool,
        len: usize,
        out: &mut Outbox,
    ) -> Option<usize> {
        let slot = (ctx & CTX_MASK) as usize;
        match ctx & !CTX_MASK {
            CTX_CREDIT if ok => {
                let mut word = [0u8; 8];
                // The receive completed: the slot is idle (a refusal returns no credits).
                let read = self.credit_slots.read(slot * 8, &mut word);
                debug_assert!(read.is_ok(), "{read:?}");
                // Only a whole credit word counts (a shorter message, which the receiver
                // never sends, would leave the slot's last word to be counted again).
                if len == 8 {
                    self.state.credits_returned(u64::from_le_bytes(word) as u32);
                }
                return Some(slot);
            }
            // A credit receive that failed (a message longer than a credit word, which the
            // receiver never sends): posted again, or strangers could use them all up.
            CTX_CREDIT => return Some(slot),
            CTX_STAGING => self.state.staged_sent(slot, ok),
            CTX_ZERO_COPY => self.state.zero_copy_sent(ok),
            CTX_USER => self.state.user_sent(slot, ok, out),
            CTX_FLUSH => self.flush_marker = FlushMarker::Done,
            _ => {}
        }
        None
    }
}

/// What a post to the fabric did, for the state machine (a refusal is logged: the send
/// fails with it).
#[inline(always)]
pub(super) fn posted(r: &std::result::Result<(), OfiError>) -> Posted {
    match r {
        Ok(()) => Posted::Sent,
        Err(e) if e.is_again() => Posted::Again,
        Err(e) => post_refused(e),
    }
}

#[cold]
#[inline(never)]
fn post_refused(e: &OfiError) -> Posted {
    log::info!("a channel send failed: {e}");
    Posted::Failed
}

/// A receive side's pool and its state machine (`semantics::channel_side`): the state
/// machine decides, this only moves memory and posts.
pub(super) struct RecvData {
    pub(super) pool: MemoryRegion,
    /// Where packets that came through the hub are copied, one slot each: a region of its
    /// own, so that a copy into one slot never waits for a read of another (the region's
    /// guards are per slot).
    pub(super) hub_slots: Option<MemoryRegion>,
    pub(super) state: RecvSide,
    /// The sender is on this node (`local.rs`): the buffers "posted" for it, in order
    /// (nothing is posted to the fabric), and credits freed and not yet handed to it.
    pub(super) local: Option<Box<LocalRecv>>,
    /// Multi-receive sides: the buffers that replace those the provider dropped.
    pub(super) spares: Option<Box<Spares>>,
    /// The provider may leave `FI_REMOTE_CQ_DATA` out (`fabric::loses_cq_data_flag`).
    pub(super) unflagged_cq_data: bool,
}

/// Receive pool ranges of a node's channel sides: `(start, end, slot)`, to find the side
/// of a released packet.
pub(super) type PoolRegistry = Arc<Mutex<Vec<(usize, usize, usize)>>>;

/// The spare buffers of a multi-receive side (`RecvSide::receive_failed`): buffer
/// `first + k` is spare `k`, a region of its own made when it is first posted (so the
/// memory grows only with buffers lost) and listed in the node's pool registry, so that
/// releases find its packets.
pub(super) struct Spares {
    regions: Vec<MemoryRegion>,
    /// The number of the first spare: the pool's buffer count.
    first: usize,
    domain: Domain,
    registry: PoolRegistry,
    /// The side's slot, under which the registry lists its memory.
    slot: usize,
}

impl Spares {
    pub(super) fn new(first: usize, domain: Domain, registry: PoolRegistry, slot: usize) -> Self {
        Spares {
            regions: Vec::new(),
            first,
            domain,
            registry,
            slot,
        }
    }

    /// Spare `k`'s memory of `size` bytes, made now if it is the first post of it.
    fn region(&mut self, k: usize, size: usize) -> std::result::Result<&MemoryRegion, OfiError> {
        while self.regions.len() <= k {
            let m = MemoryRegion::with_slots(&self.domain, 1, size)?;
            lock(&self.registry).push((m.addr(), m.addr() + m.len(), self.slot));
            self.regions.push(m);
        }
        Ok(&self.regions[k])
    }

    /// The spare holding `addr` and where it begins in the side's offsets.
    fn find(&self, addr: usize, size: usize) -> Option<(&MemoryRegion, usize)> {
        self.regions
            .iter()
            .enumerate()
            .find(|(_, m)| addr.wrapping_sub(m.addr()) < m.len())
            .map(|(k, m)| (m, (self.first + k) * size))
    }
}

/// A same-node receive side's stand-in for posted receives and credit messages.
pub(super) struct LocalRecv {
    pub(super) free: VecDeque<u32>,
    pub(super) credits: u32,
}

impl RecvData {
    /// Posts buffer or slot `b` to `ep` (or, same-node, lists it for the sender).
    #[inline(always)]
    pub(super) fn post(&mut self, ep: &Endpoint, b: usize) -> std::result::Result<(), OfiError> {
        if let Some(l) = &mut self.local {
            l.free.push_back(b as u32);
            return Ok(());
        }
        let size = self.state.buffer_size();
        let buf = match &mut self.spares {
            Some(spares) if b >= spares.first => spares.region(b - spares.first, size)?.all(),
            _ => self.pool.slice(b * size, size)?,
        };
        if self.state.posting() == Posting::MultiRecv {
            ep.recv_multi(buf, b as u64)
        } else {
            ep.recv(buf, FiAddr::UNSPEC, b as u64)
        }
    }

    /// Carries out what the state machine said about a buffer: a [`Repost::Now`] is posted
    /// (listed for later if it cannot be, or the endpoint is closed).
    #[inline(always)]
    pub(super) fn repost(&mut self, ep: &Option<Endpoint>, what: Repost) {
        if let Repost::Now(b) = what {
            let ok = ep.as_ref().is_some_and(|ep| self.post(ep, b).is_ok());
            self.state.posted(b, ok);
        }
    }

    /// A packet handed to the application.
    pub(super) fn packet(&self, item: Item) -> Packet {
        let (pool, offset) = self.region_of(item.offset);
        Packet {
            pool: pool.clone(),
            offset,
            len: item.len,
        }
    }

    /// The region holding the state machine's `offset` and the offset within it: the pool,
    /// a spare buffer (numbered after the pool's), or a hub slot (after the spares).
    fn region_of(&self, offset: usize) -> (&MemoryRegion, usize) {
        let base = self.state.hub_slots_base();
        let size = self.state.buffer_size();
        match (&self.hub_slots, &self.spares) {
            (Some(slots), _) if offset >= base => (slots, offset - base),
            (_, Some(spares)) if offset >= spares.first * size => {
                let k = offset / size - spares.first;
                match spares.regions.get(k) {
                    Some(m) => (m, offset % size),
                    None => (&self.pool, offset),
                }
            }
            _ => (&self.pool, offset),
        }
    }

    /// Whether `addr` lies in this side's receive memory (its pool, its spare buffers or
    /// its hub slots).
    #[inline]
    pub(super) fn holds(&self, addr: usize) -> bool {
        let within = |m: &MemoryRegion| addr.wrapping_sub(m.addr()) < m.len();
        within(&self.pool)
            || self.hub_slots.as_ref().is_some_and(within)
            || self
                .spares
                .as_ref()
                .is_some_and(|s| s.regions.iter().any(within))
    }

    /// The state machine's offset of the packet at `addr` (spare buffers count on from
    /// the pool's end, hub slots from the spares').
    #[inline]
    pub(super) fn offset_of(&self, addr: usize) -> usize {
        if addr.wrapping_sub(self.pool.addr()) < self.pool.len() {
            return addr - self.pool.addr();
        }
        match &self.hub_slots {
            Some(slots) if addr.wrapping_sub(slots.addr()) < slots.len() => {
                return self.state.hub_slots_base() + (addr - slots.addr());
            }
            _ => {}
        }
        let size = self.state.buffer_size();
        match self.spares.as_ref().and_then(|s| s.find(addr, size)) {
            Some((m, start)) => start + (addr - m.addr()),
            None => addr.wrapping_sub(self.pool.addr()),
        }
    }

    /// Every region packets are received into (for `pktchan_receive_memory`).
    pub(super) fn regions(&self) -> impl Iterator<Item = &MemoryRegion> {
        std::iter::once(&self.pool)
            .chain(&self.hub_slots)
            .chain(self.spares.iter().flat_map(|s| &s.regions))
    }
}
