//! The node's channel table: side slots, their locks, the scalar hub and table-wide progress.

use super::data::PoolRegistry;
use super::handle::ChannelHandle;
use super::hub::Hub;
use super::limits::MAX_SIDES;
use super::outbox::{DoneFlags, Outbox, ORPHAN_SLOT};
use super::side::{Side, Sides};
use crate::node::common::lock;
use crate::node::fabric::Fab;
use crate::node::state::PeerRun;
use mcapi_ofi::Error as OfiError;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

pub(super) type SideGuard<'a> = parking_lot::MutexGuard<'a, Option<Side>>;

/// The node's channel sides, one lock each, so channels never contend with each other or
/// with messages.
pub(in crate::node) struct ChannelTable {
    /// parking_lot's: lock and unlock inline, with no poisoning to check, in every data
    /// call. A panic under a side lock (the C ABI catches it) leaves the side as it was,
    /// for the application's calls and for background progress alike.
    /// Shared with the sides of same-node channels, which reach their other side through it
    /// ([`LocalPeer`](super::side::LocalPeer)).
    pub(super) sides: Sides,
    /// Bumped by every application call on a side: the background thread leaves sides
    /// in use alone (taking their lock could stall the application's next call).
    pub(super) touched: Box<[AtomicU32]>,
    /// Slots ever reserved (one bit each): what a blocked call progresses besides its own
    /// side, and what the background thread visits. Never cleared: a stale bit costs one
    /// `try_lock` of an empty slot.
    pub(super) used: [AtomicU64; MAX_SIDES / 64],
    pub(super) generation: AtomicU32,
    /// Receive pools: `(start, end, slot)`, to find the channel of a released buffer.
    pub(super) pools: PoolRegistry,
    /// The endpoint all scalar sides share, opened with the first.
    hub: Mutex<Option<Arc<Hub>>>,
    /// Which sides hold completed requests in their [`Outbox`], for `flush_completed`.
    pub(super) done: Arc<DoneFlags>,
    /// Completions of sides emptied before they were flushed.
    pub(super) orphans: Mutex<Outbox>,
    /// Smaller counts closed send sides found to announce: a packet queued at the close
    /// that will never go. Handed by the background thread to a thread of their own: a
    /// control call belongs neither in the completion flush that finds them nor on the
    /// thread that progresses the node.
    pub(super) recounts: Mutex<Vec<Recount>>,

    /// The side a packet was last released into: a hint, checked against the side's pool
    /// under its lock, that spares the pool list's lock.
    pub(super) last_pool: AtomicUsize,
    /// Whether a blocked call polls the sides with transfers under way after every poll of
    /// its own ([`BusyBurst`]: providers under ofi_rxm, whose sends move only while their
    /// CQ is read) or once per burst (elsewhere: on shm the extra reads of a sender's CQ
    /// slowed the receiver).
    ///
    /// [`BusyBurst`]: super::waiting::BusyBurst
    pub(super) busy_every_poll: bool,
}

/// A closed send side's smaller count to announce again.
#[derive(Clone, Copy)]
pub(super) struct Recount {
    pub(super) port: u32,
    /// The side: announced only while its endpoint is still in that channel.
    pub(super) handle: ChannelHandle,
    pub(super) count: u32,
    pub(super) run: Option<PeerRun>,
}

impl ChannelTable {
    /// `busy_every_poll`: see [`ChannelTable::busy_every_poll`].
    pub(in crate::node) fn new(busy_every_poll: bool) -> ChannelTable {
        ChannelTable {
            busy_every_poll,
            sides: (0..MAX_SIDES)
                .map(|_| parking_lot::Mutex::new(None))
                .collect(),
            touched: (0..MAX_SIDES).map(|_| AtomicU32::new(0)).collect(),
            used: Default::default(),
            generation: AtomicU32::new(crate::semantics::first_generation()),
            pools: PoolRegistry::default(),
            hub: Mutex::new(None),
            done: Arc::new(DoneFlags::default()),
            orphans: Mutex::new(Outbox::new(ORPHAN_SLOT, Arc::new(DoneFlags::default()))),
            recounts: Mutex::new(Vec::new()),
            last_pool: AtomicUsize::new(0),
        }
    }

    /// An empty outbox for side slot `slot`.
    pub(super) fn outbox(&self, slot: usize) -> Outbox {
        Outbox::new(slot, self.done.clone())
    }

    /// The scalar hub, opened on first use.
    pub(super) fn hub(
        &self,
        fab: &Fab,
        capacity: usize,
    ) -> std::result::Result<Arc<Hub>, OfiError> {
        let mut hub = lock(&self.hub);
        if let Some(h) = &*hub {
            return Ok(h.clone());
        }
        let h = Arc::new(Hub::open(&fab.domain, fab.cq_wait, capacity)?);
        *hub = Some(h.clone());
        Ok(h)
    }

    /// Drops every side (finalize): their endpoints close, pools stay only while packets are
    /// held.
    pub(in crate::node) fn clear(&self) {
        for s in self.sides.iter() {
            s.lock().take();
        }
        lock(&self.pools).clear();
        lock(&self.hub).take();
    }

    /// Empties side slot `slot` (locked in `g`): its endpoint, if still open, closes, and
    /// its receive pool leaves the release lookup.
    pub(super) fn vacate(&self, g: &mut Option<Side>, slot: usize) {
        if let Some(mut io) = g.take().and_then(|s| s.io) {
            if !io.out.is_empty() {
                lock(&self.orphans).take_from(&mut io.out);
                self.done.set(ORPHAN_SLOT);
            }
        }
        lock(&self.pools).retain(|p| p.2 != slot);
    }

    /// Progresses every other side that is free right now (a blocked call between its
    /// polls): with manual-progress providers (tcp;ofi_rxm) a side's large sends and
    /// credit returns move only while someone reads its CQ, and the application may be
    /// blocked on another side of the node. Completions wait in the sides' outboxes.
    /// `busy_only`: just those with transfers under way ([`Side::has_transfers`]), which
    /// may need every poll they can get: a large tcp;ofi_rxm send moves only while its
    /// side's CQ is read (the receiver's reads of a rendezvous packet are served there).
    /// Returns completions seen.
    pub(super) fn progress_others(&self, own: usize, busy_only: bool) -> usize {
        self.progress_used(|slot| slot == own, busy_only)
    }

    /// Progresses each side ever opened whose lock is free, except those `skip` names
    /// (and, with `busy_only`, those without transfers under way); returns completions seen.
    pub(super) fn progress_used(
        &self,
        mut skip: impl FnMut(usize) -> bool,
        busy_only: bool,
    ) -> usize {
        self.used_now()
            .iter()
            .filter(|&slot| !skip(slot))
            .map(|slot| self.progress_slot(slot, busy_only))
            .sum()
    }

    /// The peer runs of send sides with packets handed to the fabric whose sends have not
    /// completed (`finalize` waits for them: closing a side's endpoint discards what its
    /// provider still queues), into `runs`; a side whose lock is taken counts too, with no
    /// run (its holder may be posting). With `flush_markers` (`Fab::injects_queue`), each
    /// send side posts its flush marker first (`SideIo::send_flush_marker`), and counts
    /// until it completes, or while the provider has no room for it. Returns whether any
    /// side counted.
    pub(in crate::node) fn sends_posted(
        &self,
        flush_markers: bool,
        runs: &mut Vec<Option<PeerRun>>,
    ) -> bool {
        runs.clear();
        for slot in self.used_now().iter() {
            match self.sides[slot].try_lock() {
                Some(mut g) => {
                    let Some(side) = g.as_mut().filter(|s| s.peer_gone.is_none()) else {
                        continue;
                    };
                    let unsent =
                        flush_markers && side.io.as_mut().is_some_and(|io| !io.send_flush_marker());
                    if unsent || side.has_posted_sends() {
                        runs.push(side.peer);
                    }
                }
                None => runs.push(None),
            }
        }
        !runs.is_empty()
    }

    /// The sides other than `own` with transfers under way whose lock is free right now.
    pub(super) fn busy_sides(&self, own: usize) -> SideSet {
        let mut set = SideSet::default();
        for slot in self.used_now().iter().filter(|&slot| slot != own) {
            if let Some(g) = self.sides[slot].try_lock() {
                if g.as_ref().is_some_and(Side::has_transfers) {
                    set.insert(slot);
                }
            }
        }
        set
    }

    /// Progresses the sides in `set` whose lock is free; returns completions seen.
    pub(super) fn progress_set(&self, set: &SideSet) -> usize {
        set.iter().map(|slot| self.progress_slot(slot, false)).sum()
    }

    /// Progresses side `slot` if its lock is free (and, with `busy_only`, it has transfers
    /// under way); returns completions seen.
    fn progress_slot(&self, slot: usize, busy_only: bool) -> usize {
        match self.sides[slot].try_lock() {
            Some(mut g) => g
                .as_mut()
                .filter(|s| !busy_only || s.has_transfers())
                .map_or(0, Side::progress),
            None => 0,
        }
    }

    /// The slots ever reserved, as they are now.
    fn used_now(&self) -> SideSet {
        SideSet(std::array::from_fn(|w| {
            self.used[w].load(Ordering::Relaxed)
        }))
    }

    /// What `progress_idle` remembers of the touch counters, initially.
    pub(in crate::node) fn touch_memory(&self) -> Vec<u32> {
        vec![0; self.touched.len()]
    }

    /// Progresses the sides no application call touched since the last time (background
    /// thread; `seen` is its memory of the touch counters); returns completions seen.
    pub(in crate::node) fn progress_idle(&self, seen: &mut [u32]) -> usize {
        self.progress_used(
            |slot| {
                let now = self.touched[slot].load(Ordering::Relaxed);
                std::mem::replace(&mut seen[slot], now) != now
            },
            false,
        )
    }
}

/// A set of channel sides by slot (a bit each: no allocation).
#[derive(Default)]
pub(in crate::node) struct SideSet([u64; MAX_SIDES / 64]);

impl SideSet {
    pub(super) fn insert(&mut self, slot: usize) {
        self.0[slot / 64] |= 1 << (slot % 64);
    }

    pub(super) fn contains(&self, slot: usize) -> bool {
        self.0[slot / 64] & (1 << (slot % 64)) != 0
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// The slots in order (one step per member: it runs after every poll of a burst).
    pub(super) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(word, &bits)| {
            std::iter::successors(Some(bits).filter(|&b| b != 0), |&b| {
                Some(b & (b - 1)).filter(|&b| b != 0)
            })
            .map(move |b| word * 64 + b.trailing_zeros() as usize)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::SideSet;

    #[test]
    fn side_set_holds_what_was_inserted_in_slot_order() {
        let mut set = SideSet::default();
        assert!(set.is_empty());
        for slot in [200, 0, 63, 64, 255] {
            set.insert(slot);
        }
        assert!(!set.is_empty());
        assert!(set.contains(63) && set.contains(64) && !set.contains(65));
        assert_eq!(set.iter().collect::<Vec<_>>(), [0, 63, 64, 200, 255]);
    }
}
