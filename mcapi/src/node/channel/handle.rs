//! The public channel handle ([`ChannelHandle`]), received packet ([`Packet`]) and a receive side's memory ([`ReceiveMemory`]).

use super::limits::MAX_SIDES;
use crate::semantics::channel::{ChannelKind, Direction};
use mcapi_ofi::MemoryRegion;
use smallvec::SmallVec;
use std::ops::Range;

/// A channel send or receive handle (`mcapi_pktchan_send_hndl_t` and its kin): a plain value
/// that names the kind and direction and is checked, so a stale or garbage value is refused
/// (`MCAPI_ERR_CHAN_INVALID`) rather than aliasing another channel.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ChannelHandle(u64);

const HANDLE_SALT: u64 = 0x6368_616e_6e65_6c21;

impl ChannelHandle {
    pub(super) fn new(
        slot: usize,
        generation: u32,
        kind: ChannelKind,
        dir: Direction,
    ) -> ChannelHandle {
        let payload = (u64::from(generation & 0xFF_FFFF) << 24)
            | (u64::from(kind == ChannelKind::Scalar) << 17)
            | (u64::from(dir == Direction::Receive) << 16)
            | slot as u64;
        ChannelHandle(u64::from(crate::semantics::check16(payload, HANDLE_SALT)) << 48 | payload)
    }

    /// The value as the C API passes it.
    pub fn raw(self) -> u64 {
        self.0
    }

    /// A handle from its C value (checked when used).
    pub fn from_raw(raw: u64) -> ChannelHandle {
        ChannelHandle(raw)
    }

    pub(super) fn decode(self) -> Option<(usize, u32, ChannelKind, Direction)> {
        let payload = self.0 & 0xFFFF_FFFF_FFFF;
        if (self.0 >> 48) as u16 != crate::semantics::check16(payload, HANDLE_SALT) {
            return None;
        }
        let slot = (payload & 0xFFFF) as usize;
        let kind = if payload >> 17 & 1 == 1 {
            ChannelKind::Scalar
        } else {
            ChannelKind::Packet
        };
        let dir = if payload >> 16 & 1 == 1 {
            Direction::Receive
        } else {
            Direction::Send
        };
        (slot < MAX_SIDES).then_some((slot, (payload >> 24) as u32, kind, dir))
    }
}

/// A received packet: a view into the channel's registered receive pool (no copy). Give it
/// back with [`Node::pktchan_release`](crate::Node::pktchan_release), which consumes it.
///
/// Not `Clone`: once released, its bytes may be posted to the fabric again and overwritten,
/// so no handle that can still read them may survive the release. Dropping a packet without
/// releasing it keeps its buffer held until the channel's pool goes.
#[derive(Debug)]
pub struct Packet {
    pub(super) pool: MemoryRegion,
    pub(super) offset: usize,
    pub(super) len: usize,
}

impl Packet {
    /// Address of the first byte (what `mcapi_pktchan_recv` returns).
    pub fn addr(&self) -> usize {
        self.pool.addr() + self.offset
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the packet is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies the packet into `out` (which must be at least `len()` long).
    pub fn copy_to(&self, out: &mut [u8]) {
        // The fabric layer allows the read: the packet's receive completed (or, in a
        // multi-receive buffer, its completion reported these bytes), and the buffer is not
        // posted again while the packet is held. A refusal would leave `out` as it is.
        let read = self.pool.read(self.offset, &mut out[..self.len]);
        debug_assert!(read.is_ok(), "{read:?}");
    }

    /// The packet's bytes, copied.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.len];
        self.copy_to(&mut v);
        v
    }
}

/// The address ranges of a packet receive side's memory ([`crate::Node::pktchan_receive_memory`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceiveMemory(pub(super) SmallVec<[Range<usize>; 2]>);

impl ReceiveMemory {
    /// Whether `addr` lies in it.
    pub fn contains(&self, addr: &usize) -> bool {
        self.0.iter().any(|r| r.contains(addr))
    }

    /// Its address ranges: the pool, then the hub slots if the side has them.
    pub fn ranges(&self) -> &[Range<usize>] {
        &self.0
    }
}
