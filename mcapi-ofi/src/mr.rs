//! Registered memory that operations read from and write into, in slots that say who may
//! touch them.
//!
//! # Slot states
//! A region is cut into equal slots when it is made. Every operation posted on a region lies
//! inside one slot, and each slot has one atomic state word that safe code and the provider
//! take turns on:
//!
//! | state                      | provider          | [`MemoryRegion::read`] | [`MemoryRegion::write`] | new post     |
//! |----------------------------|-------------------|------------------------|-------------------------|--------------|
//! | idle                       | does not touch it | yes                    | yes                     | any          |
//! | sends in flight (`n`)      | reads it          | yes                    | refused                 | sends only   |
//! | receive posted             | writes it         | refused                | refused                 | refused      |
//! | multi-receive posted       | writes its rest   | bytes a completion reported | refused            | refused      |
//!
//! Posting moves a slot out of idle (or refuses with [`Error::InUse`]); the completion that
//! ends the operation, which [`crate::CompletionQueue::read`] sees before it hands the entry
//! out, moves it back: every completion of a send or plain receive (an error completion, e.g.
//! `FI_ECANCELED` or `FI_ETRUNC`, too); for a multi-receive buffer the one flagged
//! `FI_MULTI_RECV` (or a cancellation). For this the provider gets, as the operation's
//! context, the address of the slot's record (where the caller's context waits); the CQ read
//! puts the caller's context back into the completion. A region an endpoint posted on is kept
//! alive by the endpoint's CQ, so a record outlives every completion that names it.
//!
//! A read or write holds the slot for the copy (readers count, a writer excludes everyone),
//! so a post that comes meanwhile from another thread is refused rather than racing it.

use crate::error::{Error, Result};
use crate::fabric::Domain;
use crate::info::flags;
use crate::raw::{IoSlice, Memory};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// A receive is posted: the provider may write the slot.
const RECV: u64 = 1 << 63;
/// The posted receive is a multi-receive: bytes reported by its completions are readable.
const MULTI: u64 = 1 << 62;
/// Safe code is writing the slot (or a multi-receive post is clearing its received bits).
const WRITE: u64 = 1 << 61;
/// The first of the sends now in flight is setting their shared context: the others wait
/// for it before they compare theirs.
const SETTING: u64 = 1 << 60;
/// One send (or RMA write) from the slot in flight: the provider reads it.
const SEND: u64 = 1 << 32;
/// The sends-in-flight count.
const SENDS: u64 = SETTING - SEND;
// The low 32 bits count the safe reads under way.

/// Where a multi-receive post's generation sits in the context the provider sees: above
/// the slot record's address (user-space addresses stay below 2^48, checked when a region
/// is made) and below bit 63 (so the context stays even, a record's).
const GEN_SHIFT: u32 = 48;
/// The generation bits (15).
const GEN_MASK: u64 = 0x7fff;
/// Slot records must lie below this for their generation bits to be free.
pub(crate) const RECORD_LIMIT: usize = 1 << GEN_SHIFT;

/// Page-aligned memory registered with a domain, in slots. Cheap to clone (shared).
///
/// The provider reads and writes this memory asynchronously, so the application accesses it
/// by copying ([`MemoryRegion::read`], [`MemoryRegion::write`]), and only where no operation
/// in flight could race the copy: each slot's state (see the crate docs, "Posted memory and
/// safe code") refuses a read of memory a posted receive may still write, and a write of
/// memory a send may still read, with [`Error::InUse`]. An operation's range must lie inside
/// one slot.
///
/// An endpoint that posts an operation on a region keeps the region alive (through its CQ)
/// until its CQ is closed, so dropping the region early is never unsafe.
#[derive(Clone)]
pub struct MemoryRegion {
    pub(crate) inner: Arc<MrInner>,
}

/// One slot's state word and the context of the operation(s) in flight on it. Its address is
/// the context the provider sees (8-aligned, so never odd: odd contexts are the caller's own,
/// shifted, see [`plain_context`]).
#[repr(C, align(8))]
pub(crate) struct Slot {
    state: AtomicU64,
    context: AtomicU64,
    /// Multi-receive posts so far: a completion carries its post's in its context, so one
    /// read late by another thread never marks bytes of the next post.
    generation: AtomicU64,
    /// The address of the region's [`MrInner`], for the completion path.
    region: usize,
}

impl Slot {
    /// The address of the [`MrInner`] this slot belongs to.
    #[inline(always)]
    pub(crate) fn region(&self) -> usize {
        self.region
    }

    /// A record of its own for one operation on memory no region owns (a read in place,
    /// an unregistered send): posted (the provider may use the memory until its completion
    /// clears the record), with the caller's `context`.
    pub(crate) fn posted_alone(context: u64) -> Slot {
        Slot {
            state: AtomicU64::new(RECV),
            context: AtomicU64::new(context),
            generation: AtomicU64::new(0),
            region: 0,
        }
    }

    /// A record for operations posted alone, none posted yet ([`Slot::arm_alone`]).
    pub(crate) fn idle() -> Slot {
        Slot {
            state: AtomicU64::new(0),
            context: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            region: 0,
        }
    }

    /// Claims this idle record for one receive-like operation with the caller's `context`
    /// (as [`Slot::posted_alone`] makes one): `false` if an operation holds it already.
    pub(crate) fn arm_alone(&self, context: u64) -> bool {
        if self
            .state
            .compare_exchange(0, RECV, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        self.context.store(context, Ordering::Relaxed);
        self.generation.store(0, Ordering::Relaxed);
        true
    }

    /// Gives back a record claimed by [`Slot::arm_alone`] whose operation was not posted.
    pub(crate) fn disarm(&self) {
        self.state.store(0, Ordering::Release);
    }

    /// Whether the operation posted with this record as context has not completed yet.
    #[inline(always)]
    pub(crate) fn posted(&self) -> bool {
        self.state.load(Ordering::Acquire) & RECV != 0
    }

    /// The error its completion carried (0: none), once [`Slot::posted`] is false.
    pub(crate) fn error(&self) -> i32 {
        self.generation.load(Ordering::Relaxed) as i32
    }
}

pub(crate) struct MrInner {
    pub(crate) mem: Memory,
    /// Id of the last CQ known to keep this region alive (0: none); saves that CQ a lock on
    /// every post.
    pub(crate) pinned_by: AtomicU64,
    slot_size: usize,
    /// `log2(slot_size)` when that is a power of two, else `u32::MAX` (divide).
    slot_shift: u32,
    /// A sink is never read or written by safe code: receives may share it, nothing is
    /// tracked.
    sink: bool,
    slots: Box<[Slot]>,
    /// One bit per byte: reported by a completion of the multi-receive posted in its slot.
    /// Made at the first multi-receive post.
    received: OnceLock<Box<[AtomicU64]>>,
    pub(crate) domain: Domain,
}

impl MemoryRegion {
    /// Allocates `len` zeroed bytes as one slot and registers them for local use: sends,
    /// receives and, where the domain offers RMA, as the local buffer of this process's
    /// reads and writes. No peer can read or write it.
    ///
    /// # Errors
    /// Allocation or `fi_mr_reg` failures.
    pub fn new(domain: &Domain, len: usize) -> Result<MemoryRegion> {
        MemoryRegion::make(domain, 1, len.max(1), false)
    }

    /// As [`MemoryRegion::new`], and open to remote reads (`FI_REMOTE_READ`, where the domain
    /// offers RMA) by whoever is told its [`MemoryRegion::key`], which is random: a peer
    /// reads what the region holds at the time, never writes it. For data a peer fetches
    /// (a rendezvous sender's staging): write it before telling the key.
    ///
    /// # Errors
    /// As [`MemoryRegion::new`].
    pub fn readable_remotely(domain: &Domain, len: usize) -> Result<MemoryRegion> {
        MemoryRegion::register(domain, 1, len.max(1), false, flags::REMOTE_READ)
    }

    /// Allocates `count` slots of `slot_size` bytes each (zeroed) and registers them as
    /// [`MemoryRegion::new`] does: a pool of buffers, each posted and read on its own.
    ///
    /// # Errors
    /// As [`MemoryRegion::new`]; `InvalidArgument` for zero or overflowing sizes.
    pub fn with_slots(domain: &Domain, count: usize, slot_size: usize) -> Result<MemoryRegion> {
        if count == 0 || slot_size == 0 || count > u32::MAX as usize {
            return Err(Error::InvalidArgument(
                "a region needs 1 to 2^32 slots of 1+ bytes",
            ));
        }
        MemoryRegion::make(domain, count, slot_size, false)
    }

    /// Allocates `len` bytes that safe code never reads or writes (every
    /// [`MemoryRegion::read`] and [`MemoryRegion::write`] fails): receives whose data
    /// nobody looks at, e.g. a benchmark's, may share it, and sends go out of whatever it
    /// holds (zeros, or what arrived). Nothing is tracked, so contexts of operations on a
    /// sink must be below 2^63.
    ///
    /// # Errors
    /// As [`MemoryRegion::new`].
    pub fn sink(domain: &Domain, len: usize) -> Result<MemoryRegion> {
        MemoryRegion::make(domain, 1, len.max(1), true)
    }

    fn make(domain: &Domain, count: usize, slot_size: usize, sink: bool) -> Result<MemoryRegion> {
        MemoryRegion::register(domain, count, slot_size, sink, 0)
    }

    /// Registers a new region for local access and `remote` (`FI_REMOTE_READ` or nothing):
    /// no region is writable by peers, and none readable unless asked for.
    fn register(
        domain: &Domain,
        count: usize,
        slot_size: usize,
        sink: bool,
        remote: u64,
    ) -> Result<MemoryRegion> {
        let len = count
            .checked_mul(slot_size)
            .ok_or(Error::InvalidArgument("memory region too large"))?;
        let mut mem = Memory::new(len)?;
        let mut access = flags::SEND | flags::RECV;
        if domain.attributes().has(flags::RMA) {
            access |= flags::READ | flags::WRITE | remote;
        }
        mem.register(&domain.inner.fid, access, len)?;
        let inner = Arc::new_cyclic(|me| {
            let region = me.as_ptr() as usize;
            let slots = if sink { 0 } else { count };
            MrInner {
                mem,
                pinned_by: AtomicU64::new(0),
                slot_size,
                slot_shift: if slot_size.is_power_of_two() {
                    slot_size.trailing_zeros()
                } else {
                    u32::MAX
                },
                sink,
                slots: (0..slots)
                    .map(|_| Slot {
                        state: AtomicU64::new(0),
                        context: AtomicU64::new(0),
                        generation: AtomicU64::new(0),
                        region,
                    })
                    .collect(),
                received: OnceLock::new(),
                domain: domain.clone(),
            }
        });
        let end = inner.slots.as_ptr_range().end as usize;
        if end > RECORD_LIMIT {
            return Err(Error::InvalidArgument(
                "slot records above 2^48 leave no room for their generation",
            ));
        }
        Ok(MemoryRegion { inner })
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.inner.mem.len()
    }

    /// Whether the region is empty (never: at least one byte is allocated).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The size of each slot (the whole region for [`MemoryRegion::new`]).
    pub fn slot_size(&self) -> usize {
        self.inner.slot_size
    }

    /// The virtual address of the first byte (for RMA peers and for locating multi-receive
    /// completions inside the region).
    pub fn addr(&self) -> usize {
        self.inner.mem.addr() as usize
    }

    /// The remote access key (`fi_mr_key`).
    pub fn key(&self) -> u64 {
        self.inner.mem.key().unwrap_or(ofi_sys::FI_KEY_NOTAVAIL)
    }

    /// Copies bytes out of the region.
    ///
    /// # Errors
    /// [`Error::InUse`] if a receive posted into the range's slot may still write it (for a
    /// multi-receive buffer: unless every byte was reported by one of its completions) or
    /// the region is a sink; `InvalidArgument` if the range is outside the region or crosses
    /// a slot boundary.
    #[inline(always)]
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        if out.is_empty() {
            // Touches no byte: nothing to race.
            return self.inner.slot_of(offset, 0).map(drop);
        }
        let slot = self.inner.begin_read(offset, out.len())?;
        self.inner.mem.read(offset, out);
        end_read(slot);
        Ok(())
    }

    /// The `len` (at most 8) bytes at `offset` as a little-endian integer: a scalar read
    /// without a call to `memcpy`.
    ///
    /// # Errors
    /// As [`MemoryRegion::read`]; `InvalidArgument` if `len` exceeds 8.
    #[inline]
    pub fn read_le(&self, offset: usize, len: usize) -> Result<u64> {
        if len > 8 {
            return Err(Error::InvalidArgument("read_le reads at most 8 bytes"));
        }
        if len == 0 {
            return self.inner.slot_of(offset, 0).map(|_| 0);
        }
        let slot = self.inner.begin_read(offset, len)?;
        let v = self.inner.mem.read_le(offset, len);
        end_read(slot);
        Ok(v)
    }

    /// Copies bytes into the region.
    ///
    /// # Errors
    /// [`Error::InUse`] if an operation in flight uses the range's slot (a receive, or a send
    /// that may still read it), another thread is reading or writing it, or the region is a
    /// sink; `InvalidArgument` if the range is outside the region or crosses a slot boundary.
    #[inline]
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let s = self.inner.slot_ref(offset, data.len())?;
        if data.is_empty() {
            return Ok(());
        }
        if s.state
            .compare_exchange(0, WRITE, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(in_use());
        }
        self.inner.mem.write(offset, data);
        s.state.fetch_sub(WRITE, Ordering::Release);
        Ok(())
    }

    /// Copies `len` bytes at `from` of region `src` (which may be this one) to `offset` of
    /// this region: memory to memory, without a bounce buffer.
    ///
    /// # Errors
    /// As [`MemoryRegion::read`] for the source range and [`MemoryRegion::write`] for the
    /// destination (`InUse` too when both are the same slot).
    pub fn copy_from(
        &self,
        offset: usize,
        src: &MemoryRegion,
        from: usize,
        len: usize,
    ) -> Result<()> {
        let s = self.inner.slot_ref(offset, len)?;
        if len == 0 {
            return src.inner.slot_of(from, 0).map(drop);
        }
        let src_slot = src.inner.begin_read(from, len)?;
        if s.state
            .compare_exchange(0, WRITE, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            end_read(src_slot);
            return Err(in_use());
        }
        self.inner.mem.copy_from(offset, &src.inner.mem, from, len);
        s.state.fetch_sub(WRITE, Ordering::Release);
        end_read(src_slot);
        Ok(())
    }

    /// Describes `len` bytes at `offset`, inside one slot, for an operation.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] if the range is outside the region or crosses a slot
    /// boundary.
    #[inline(always)]
    pub fn slice(&self, offset: usize, len: usize) -> Result<Buf<'_>> {
        let slot = match self.inner.slot_fast(offset, len) {
            Some(slot) => Some(slot),
            // A sink has no slots (`Buf::begin` tracks nothing); only the bounds matter.
            None if self.inner.sink => None,
            None => Some(self.inner.slot_ref(offset, len)?),
        };
        let io = IoSlice::new(&self.inner.mem, offset, len)?;
        Ok(Buf {
            region: self,
            io,
            slot,
        })
    }

    /// An empty operation buffer at the region's start, for a message that carries no
    /// bytes (a marker): it touches no memory, so operations on the region's slots do not
    /// keep it from being posted, and it tracks none.
    ///
    /// # Errors
    /// None in practice (the empty range is inside every region).
    pub fn empty(&self) -> Result<Buf<'_>> {
        Ok(Buf {
            region: self,
            io: IoSlice::new(&self.inner.mem, 0, 0)?,
            slot: None,
        })
    }

    /// The whole region as one operation buffer.
    ///
    /// # Panics
    /// If the region has more than one slot.
    pub fn all(&self) -> Buf<'_> {
        self.slice(0, self.len())
            .expect("the whole region is one slot")
    }
}

#[cold]
fn in_use() -> Error {
    Error::InUse("an operation in flight uses this memory")
}

impl MrInner {
    /// The slot holding `[offset, offset + len)`.
    #[inline(always)]
    fn slot_of(&self, offset: usize, len: usize) -> Result<usize> {
        let slot = if self.slot_shift != u32::MAX {
            offset >> self.slot_shift
        } else {
            offset / self.slot_size
        };
        // `at < slot_size`; a sink has no slots, so it always takes the slow path.
        let at = offset - slot * self.slot_size;
        if slot < self.slots.len() && len <= self.slot_size - at {
            return Ok(slot);
        }
        self.slot_of_slow(offset, len)
    }

    /// [`MrInner::slot_of`] for what its fast path does not take: sinks, empty ranges at
    /// the region's end, and errors.
    #[cold]
    #[inline(never)]
    fn slot_of_slow(&self, offset: usize, len: usize) -> Result<usize> {
        if self.sink {
            return Err(Error::InUse("a sink region is never read or written"));
        }
        let slot = if self.slot_shift != u32::MAX {
            offset >> self.slot_shift
        } else {
            offset / self.slot_size
        };
        // An empty range may sit at the region's end.
        let slot = if len == 0 && slot == self.slots.len() && slot > 0 {
            slot - 1
        } else {
            slot
        };
        let start = slot * self.slot_size;
        let at = offset - start;
        if slot >= self.slots.len() || at > self.slot_size || len > self.slot_size - at {
            return Err(Error::InvalidArgument(
                "range outside the region or across a slot boundary",
            ));
        }
        Ok(slot)
    }

    /// The slot holding `[offset, offset + len)`, as [`MrInner::slot_of`] (one bounds check).
    #[inline(always)]
    fn slot_ref(&self, offset: usize, len: usize) -> Result<&Slot> {
        match self.slot_fast(offset, len) {
            Some(s) => Ok(s),
            None => self.slot_of_slow(offset, len).map(|slot| &self.slots[slot]),
        }
    }

    /// The slot holding a non-empty or mid-region `[offset, offset + len)`; `None` for
    /// everything [`MrInner::slot_of_slow`] sorts out (a sink has no slots).
    #[inline(always)]
    fn slot_fast(&self, offset: usize, len: usize) -> Option<&Slot> {
        let slot = if self.slot_shift != u32::MAX {
            offset >> self.slot_shift
        } else {
            offset / self.slot_size
        };
        let at = offset - slot * self.slot_size;
        let s = self.slots.get(slot)?;
        (len <= self.slot_size - at).then_some(s)
    }

    /// The index of `slot`, one of this region's.
    fn index_of(&self, slot: &Slot) -> usize {
        (slot as *const Slot as usize - self.slots.as_ptr() as usize) / std::mem::size_of::<Slot>()
    }

    /// Counts a reader of `[offset, offset + len)` in; the caller copies, then calls
    /// [`end_read`] with the returned slot.
    #[inline(always)]
    fn begin_read(&self, offset: usize, len: usize) -> Result<&Slot> {
        let s = self.slot_ref(offset, len)?;
        let prev = s.state.fetch_add(1, Ordering::Acquire);
        if prev & (WRITE | RECV) != 0 {
            return self.begin_read_busy(s, prev, offset, len);
        }
        Ok(s)
    }

    /// The rest of [`MrInner::begin_read`] when a receive or writer holds the slot: the read
    /// may go on only in bytes a multi-receive completion reported; otherwise the reader
    /// counted in leaves again.
    #[cold]
    #[inline(never)]
    fn begin_read_busy<'a>(
        &self,
        slot: &'a Slot,
        prev: u64,
        offset: usize,
        len: usize,
    ) -> Result<&'a Slot> {
        if prev & (WRITE | MULTI) != MULTI || !self.all_received(offset, len) {
            slot.state.fetch_sub(1, Ordering::Release);
            return Err(in_use());
        }
        Ok(slot)
    }

    /// Whether every byte of `[offset, offset + len)` was reported by a multi-receive
    /// completion of the current post.
    fn all_received(&self, offset: usize, len: usize) -> bool {
        let Some(bits) = self.received.get() else {
            return false;
        };
        let span = WordSpan::of(offset, len);
        let full = |&(w, mask): &(usize, u64)| bits[w].load(Ordering::Acquire) & mask == mask;
        span.edges().all(|e| full(&e))
            && bits[span.whole]
                .iter()
                .all(|b| b.load(Ordering::Acquire) == u64::MAX)
    }

    /// Marks `[offset, offset + len)` of a multi-receive buffer as reported (by a completion
    /// of its current post, see [`multi_completed`]).
    fn mark_received(&self, offset: usize, len: usize) {
        if let Some(bits) = self.received.get() {
            let span = WordSpan::of(offset, len);
            // A word wholly inside one message: no other completion touches it.
            for b in &bits[span.whole.clone()] {
                b.store(u64::MAX, Ordering::Release);
            }
            for (w, mask) in span.edges() {
                bits[w].fetch_or(mask, Ordering::Release);
            }
        }
    }

    /// Forgets what completions reported in slot `slot` (it is held exclusively).
    fn clear_received(&self, slot: usize) {
        let bits = self.received.get_or_init(|| {
            (0..self.mem.len().div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect()
        });
        let span = WordSpan::of(slot * self.slot_size, self.slot_size);
        for b in &bits[span.whole.clone()] {
            b.store(0, Ordering::Relaxed);
        }
        for (w, mask) in span.edges() {
            bits[w].fetch_and(!mask, Ordering::Relaxed);
        }
    }
}

/// Counts out the reader [`MrInner::begin_read`] counted in.
#[inline(always)]
fn end_read(slot: &Slot) {
    slot.state.fetch_sub(1, Ordering::Release);
}

/// The 64-bit words of a one-bit-per-byte map that `[offset, offset + len)` covers: those
/// it covers wholly, and the one or two it covers in part with the bits it covers there.
/// Split so that the whole words, nearly all of a large range, go in a plain loop.
#[derive(Clone, Debug, PartialEq, Eq)]
struct WordSpan {
    whole: std::ops::Range<usize>,
    head: Option<(usize, u64)>,
    tail: Option<(usize, u64)>,
}

impl WordSpan {
    #[inline(always)]
    fn of(offset: usize, len: usize) -> WordSpan {
        if len == 0 {
            return WordSpan {
                whole: 0..0,
                head: None,
                tail: None,
            };
        }
        let (first, last) = (offset / 64, (offset + len - 1) / 64);
        // Bits [lo, 64) of the first word and [0, hi) of the last one are covered.
        let (lo, hi) = (offset % 64, offset + len - last * 64);
        let low_bits = |n: usize| if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
        if first == last {
            let mask = low_bits(hi - lo) << lo;
            return if mask == u64::MAX {
                WordSpan {
                    whole: first..first + 1,
                    head: None,
                    tail: None,
                }
            } else {
                WordSpan {
                    whole: 0..0,
                    head: Some((first, mask)),
                    tail: None,
                }
            };
        }
        WordSpan {
            whole: first + usize::from(lo != 0)..last + usize::from(hi == 64),
            head: (lo != 0).then(|| (first, u64::MAX << lo)),
            tail: (hi != 64).then(|| (last, low_bits(hi))),
        }
    }

    /// The words covered in part, with their masks.
    #[inline(always)]
    fn edges(&self) -> impl Iterator<Item = (usize, u64)> {
        self.head.into_iter().chain(self.tail)
    }
}

/// The provider context of an operation that no slot tracks: the caller's `context`,
/// shifted and made odd (slot records are even addresses).
///
/// # Errors
/// `InvalidArgument` for a context of 2^63 or more.
#[inline(always)]
pub(crate) fn plain_context(context: u64) -> Result<u64> {
    if context >> 63 != 0 {
        return Err(Error::InvalidArgument(
            "contexts of untracked operations must be below 2^63",
        ));
    }
    Ok(context << 1 | 1)
}

/// What kind of operation a post starts.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// The provider reads the buffer (send, RMA write).
    Send,
    /// The provider writes the buffer once.
    Recv,
    /// `FI_MULTI_RECV`: the provider writes messages into the buffer until it releases it.
    MultiRecv,
}

impl Buf<'_> {
    /// Moves the buffer's slot into the state of `op` and returns the context to hand the
    /// provider; [`Buf::abort`] undoes it if the post fails.
    ///
    /// # Errors
    /// [`Error::InUse`] if the slot's state does not allow `op` (see the module docs);
    /// `InvalidArgument` for sends sharing a slot with different contexts.
    #[inline(always)]
    pub(crate) fn begin(&self, op: Op, context: u64) -> Result<u64> {
        // A sink has no slots: nothing is tracked.
        let Some(s) = self.slot else {
            return plain_context(context);
        };
        match op {
            Op::Send => {
                // Counted in, the first of a busy period marking that it sets the context.
                let mut prev = s.state.load(Ordering::Acquire);
                loop {
                    if prev & (RECV | WRITE) != 0 {
                        return Err(in_use());
                    }
                    let first = prev & SENDS == 0;
                    let next = prev + SEND + if first { SETTING } else { 0 };
                    match s.state.compare_exchange_weak(
                        prev,
                        next,
                        Ordering::Acquire,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => break,
                        Err(now) => prev = now,
                    }
                }
                if prev & SENDS == 0 {
                    s.context.store(context, Ordering::Relaxed);
                    s.state.fetch_sub(SETTING, Ordering::Release);
                } else {
                    // Counted in, ours keeps the busy period (and its context) going; the
                    // context is that of its first send once it is set.
                    while s.state.load(Ordering::Acquire) & SETTING != 0 {
                        std::hint::spin_loop();
                    }
                    if s.context.load(Ordering::Relaxed) != context {
                        s.state.fetch_sub(SEND, Ordering::Release);
                        return Err(Error::InvalidArgument(
                            "sends in flight from one slot share one context",
                        ));
                    }
                }
            }
            Op::Recv => {
                if s.state
                    .compare_exchange(0, RECV, Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
                {
                    return Err(in_use());
                }
                s.context.store(context, Ordering::Relaxed);
            }
            Op::MultiRecv => {
                // Held as a writer while the bits of the last post are cleared, so no reader
                // trusts them meanwhile.
                if s.state
                    .compare_exchange(0, WRITE, Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
                {
                    return Err(in_use());
                }
                let mr = &self.region.inner;
                mr.clear_received(mr.index_of(s));
                s.context.store(context, Ordering::Relaxed);
                let generation = s.generation.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
                // WRITE off, RECV and MULTI on; readers that looked meanwhile keep counting.
                s.state.fetch_xor(WRITE | RECV | MULTI, Ordering::Release);
                return Ok(record_of(s) | (generation & GEN_MASK) << GEN_SHIFT);
            }
        }
        Ok(record_of(s))
    }

    /// The provider context of the operation posted on this buffer's slot (`None` for a
    /// sink): its record, with the post's generation for a multi-receive.
    pub(crate) fn record(&self) -> Option<u64> {
        self.slot.map(|s| {
            if s.state.load(Ordering::Acquire) & MULTI == 0 {
                return record_of(s);
            }
            let generation = s.generation.load(Ordering::Relaxed);
            record_of(s) | (generation & GEN_MASK) << GEN_SHIFT
        })
    }

    /// Whether the range's slot holds a multi-receive post.
    pub(crate) fn in_multi_receive(&self) -> bool {
        self.slot
            .is_some_and(|s| s.state.load(Ordering::Acquire) & MULTI != 0)
    }

    /// Undoes [`Buf::begin`] after the post failed (the provider never saw the buffer).
    #[cold]
    pub(crate) fn abort(&self, op: Op) {
        let Some(s) = self.slot else {
            return; // a sink
        };
        match op {
            Op::Send => s.state.fetch_sub(SEND, Ordering::Release),
            Op::Recv | Op::MultiRecv => s.state.fetch_and(!(RECV | MULTI), Ordering::Release),
        };
    }
}

/// The address of `slot`'s record: the provider context of its operations (below
/// [`RECORD_LIMIT`], so a multi-receive's generation fits above it).
#[inline(always)]
fn record_of(slot: &Slot) -> u64 {
    slot as *const Slot as usize as u64
}

/// Splits a provider context that is not the caller's own (even, non-zero) into the address
/// of its slot record and the multi-receive generation it was posted with.
#[inline(always)]
pub(crate) fn split_record(context: usize) -> (usize, u64) {
    (
        context & (RECORD_LIMIT - 1),
        (context as u64 >> GEN_SHIFT) & GEN_MASK,
    )
}

/// What a completion (error completions with `err` non-zero) of an operation posted with
/// `slot`'s record as context (and, for a multi-receive, generation `generation`) means for
/// the slot; returns the caller's context. `multi` gives
/// the slot's region and the completion's flags, buffer and length, which only a
/// multi-receive's completion needs (so a send's or plain receive's loads none of them).
#[inline(always)]
pub(crate) fn completed<'a>(
    slot: &'a Slot,
    generation: u64,
    err: i32,
    multi: impl FnOnce() -> (&'a MrInner, u64, usize, usize),
) -> u64 {
    // Before the state changes: once it is idle the slot may be posted with a new context.
    let context = slot.context.load(Ordering::Relaxed);
    let state = slot.state.load(Ordering::Acquire);
    if state & RECV == 0 {
        if state & SENDS != 0 {
            slot.state.fetch_sub(SEND, Ordering::Release);
        }
    } else if state & MULTI == 0 {
        if err != 0 {
            // A plain receive has no generation: the field keeps its error (read by the
            // waiter of an operation posted alone, `Slot::error`).
            slot.generation.store(err as u64, Ordering::Relaxed);
        }
        slot.state.fetch_and(!RECV, Ordering::Release);
    } else {
        let (mr, flags, buf, len) = multi();
        multi_completed(mr, slot, generation, (flags, buf, len), err);
    }
    context
}

/// [`completed`] for a multi-receive buffer: marks the bytes the completion (flags, buffer,
/// length) reports, and frees the slot at the buffer's last completion (or its
/// cancellation).
///
/// The marks are made holding the slot as a reader (so it cannot be posted again meanwhile)
/// and only while it still holds the post of `generation`: an entry another thread read
/// before the buffer's last one, but marks after the application posted the buffer again,
/// marks nothing (its bytes belong to the old post, which nobody reads through the bits).
#[inline(never)]
fn multi_completed(
    mr: &MrInner,
    slot: &Slot,
    generation: u64,
    (flags, buf, len): (u64, usize, usize),
    err: i32,
) {
    if err == 0 && len > 0 {
        let prev = slot.state.fetch_add(1, Ordering::Acquire);
        let same_post = prev & (MULTI | WRITE) == MULTI
            && slot.generation.load(Ordering::Relaxed) & GEN_MASK == generation;
        let start = mr.index_of(slot) * mr.slot_size;
        let offset = buf.wrapping_sub(mr.mem.addr() as usize);
        // Only what lies inside the posted slot (a provider never reports more).
        if same_post
            && offset >= start
            && offset - start <= mr.slot_size
            && len <= mr.slot_size - (offset - start)
        {
            mr.mark_received(offset, len);
        }
        slot.state.fetch_sub(1, Ordering::Release);
    }
    if flags & crate::flags::MULTI_RECV != 0 || err == ofi_sys::FI_ECANCELED as i32 {
        slot.state.fetch_and(!(RECV | MULTI), Ordering::Release);
    }
}

/// A checked range of a [`MemoryRegion`], inside one slot, ready to be posted.
#[derive(Clone, Copy)]
pub struct Buf<'a> {
    pub(crate) region: &'a MemoryRegion,
    pub(crate) io: IoSlice,
    /// The slot the range lies in (`None` in a sink).
    slot: Option<&'a Slot>,
}

impl Buf<'_> {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.io.len
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.io.len == 0
    }
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemoryRegion({:#x}, {} bytes)", self.addr(), self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::WordSpan;

    /// The bits of each word that `[offset, offset + len)` covers, byte by byte.
    fn byte_by_byte(offset: usize, len: usize) -> Vec<(usize, u64)> {
        let mut words: Vec<(usize, u64)> = Vec::new();
        for byte in offset..offset + len {
            let (w, bit) = (byte / 64, 1u64 << (byte % 64));
            match words.last_mut() {
                Some((last, mask)) if *last == w => *mask |= bit,
                _ => words.push((w, bit)),
            }
        }
        words
    }

    #[test]
    fn word_spans_cover_exactly_the_bytes_of_the_range() {
        for offset in 0..200 {
            for len in 0..300 {
                let span = WordSpan::of(offset, len);
                let mut got: Vec<(usize, u64)> = span
                    .whole
                    .clone()
                    .map(|w| (w, u64::MAX))
                    .chain(span.edges())
                    .collect();
                got.sort_unstable();
                assert_eq!(got, byte_by_byte(offset, len), "offset {offset} len {len}");
                // Whole words are never reported as edges.
                assert!(span.edges().all(|(_, mask)| mask != u64::MAX));
            }
        }
    }
}
