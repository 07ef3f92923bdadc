//! Outboxes: requests completed under a side lock, flushed to the request table without one.

use super::handle::Packet;
use super::limits::MAX_SIDES;
use crate::semantics::channel_side::Completions;
use crate::semantics::request::RequestHandle;
use crate::semantics::Status;
use crate::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// The flag of the table's orphan outbox in [`DoneFlags`] (a bit past the side slots).
pub(super) const ORPHAN_SLOT: usize = MAX_SIDES;

/// One bit per side slot (and one for the orphans): set when its outbox got its first
/// completion, cleared when `flush_completed` takes them; and one flag for "any", which is
/// all a channel call's flush reads when nothing completed.
#[derive(Default)]
pub(super) struct DoneFlags {
    slots: [AtomicU64; MAX_SIDES / 64 + 1],
    any: AtomicBool,
}

impl DoneFlags {
    pub(super) fn set(&self, slot: usize) {
        self.slots[slot / 64].fetch_or(1 << (slot % 64), Ordering::Release);
        // Pairs with the fence of `begin_flush`: either that flush reads this slot's bit,
        // or this "any" lands after its clearing. Without it a flush could miss the bit and
        // still clear "any" last, stranding the completion (found by loom: scripts/loom).
        fence(Ordering::SeqCst);
        self.any.store(true, Ordering::Release);
    }

    pub(super) fn clear(&self, slot: usize) {
        self.slots[slot / 64].fetch_and(!(1 << (slot % 64)), Ordering::Relaxed);
    }

    /// Whether a slot may be flagged (the check every channel call's flush makes).
    #[inline(always)]
    pub(super) fn any(&self) -> bool {
        self.any.load(Ordering::Relaxed)
    }

    /// Starts a flush: "any" is cleared before the slots are read, so a flag set meanwhile
    /// raises it again.
    pub(super) fn begin_flush(&self) {
        self.any.store(false, Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    /// Ends a flush that left slots flagged (locked elsewhere): "any" stays raised.
    pub(super) fn end_flush(&self) {
        if self.slots.iter().any(|w| w.load(Ordering::Relaxed) != 0) {
            self.any.store(true, Ordering::Release);
        }
    }

    /// The flagged slots, as they are now.
    pub(super) fn flagged(&self) -> impl Iterator<Item = usize> + '_ {
        self.slots.iter().enumerate().flat_map(|(w, word)| {
            let mut bits = word.load(Ordering::Acquire);
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let b = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    w * 64 + b
                })
            })
        })
    }
}

/// Requests a side completed under its lock, until `flush_completed` records them in the
/// node's request table with no side lock held (under one, the state lock is taken only by
/// the zero-copy send's wait and `pktchan_send_i`'s request allocation: docs/design.md, lock
/// discipline).
/// Its capacity is kept, so a steady stream of completions allocates nothing.
pub(super) struct Outbox {
    slot: usize,
    flags: Arc<DoneFlags>,
    pub(super) completed: Vec<(RequestHandle, Status, usize)>,
    /// Packets handed to completed `pktchan_recv_i` requests.
    pub(super) delivered: Vec<(RequestHandle, Packet)>,
}

impl Outbox {
    pub(super) fn new(slot: usize, flags: Arc<DoneFlags>) -> Outbox {
        Outbox {
            slot,
            flags,
            completed: Vec::with_capacity(16),
            delivered: Vec::new(),
        }
    }

    pub(super) fn complete(&mut self, request: RequestHandle, status: Status, len: usize) {
        if self.completed.is_empty() {
            self.flags.set(self.slot);
        }
        self.completed.push((request, status, len));
    }

    pub(super) fn deliver(&mut self, request: RequestHandle, packet: Packet) {
        let len = packet.len();
        self.delivered.push((request, packet));
        self.complete(request, Status::MCAPI_SUCCESS, len);
    }

    pub(super) fn is_empty(&self) -> bool {
        self.completed.is_empty()
    }

    /// Moves `other`'s completions here.
    pub(super) fn take_from(&mut self, other: &mut Outbox) {
        self.completed.append(&mut other.completed);
        self.delivered.append(&mut other.delivered);
    }
}

impl Completions for Outbox {
    fn complete(&mut self, request: RequestHandle, status: Status, len: usize) {
        Outbox::complete(self, request, status, len);
    }
}

/// The flush protocol of [`DoneFlags`] under loom (scripts/loom): whatever the interleaving
/// of sides completing requests and a flusher taking them, a completion is never left in an
/// outbox while "any" says there is nothing to flush (the lost wake-up the fence prevents).
#[cfg(all(test, mcapi_loom))]
mod loom_model {
    use super::DoneFlags;
    use loom::sync::{Arc, Mutex};

    /// Two sides' outboxes (a count of completions each) behind their locks.
    struct Sides {
        flags: DoneFlags,
        outboxes: [Mutex<u32>; 2],
    }

    impl Sides {
        /// What a side does under its lock when it completes a request.
        fn complete(&self, slot: usize) {
            let mut outbox = self.outboxes[slot].lock().unwrap();
            if *outbox == 0 {
                self.flags.set(slot);
            }
            *outbox += 1;
        }

        /// `flush_completed`: takes every flagged outbox. Returns the completions taken.
        fn flush(&self) -> u32 {
            if !self.flags.any() {
                return 0;
            }
            self.flags.begin_flush();
            let mut taken = 0;
            let flagged: Vec<usize> = self.flags.flagged().collect();
            for slot in flagged {
                // A side locked elsewhere keeps its flag, as in `flush_flagged`.
                if let Ok(mut outbox) = self.outboxes[slot].try_lock() {
                    self.flags.clear(slot);
                    taken += std::mem::take(&mut *outbox);
                }
            }
            self.flags.end_flush();
            taken
        }
    }

    #[test]
    fn no_completion_is_stranded_behind_a_cleared_any_flag() {
        loom::model(|| {
            let sides = Arc::new(Sides {
                flags: DoneFlags::default(),
                outboxes: [Mutex::new(0), Mutex::new(0)],
            });
            let producers: Vec<_> = (0..2)
                .map(|slot| {
                    let sides = sides.clone();
                    loom::thread::spawn(move || sides.complete(slot))
                })
                .collect();
            let mut taken = sides.flush();
            for p in producers {
                p.join().unwrap();
            }
            // Every completion made is either taken already or announced by "any".
            let left: u32 = sides.outboxes.iter().map(|o| *o.lock().unwrap()).sum();
            assert_eq!(taken + left, 2);
            if left > 0 {
                assert!(
                    sides.flags.any(),
                    "{left} completion(s) behind a cleared flag"
                );
            }
            taken += sides.flush();
            assert_eq!(taken, 2, "a flush with no side locked takes everything");
        });
    }
}
