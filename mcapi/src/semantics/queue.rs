//! Endpoint receive queues (spec 3.5.3) and in-order release of messages that
//! the transport completed out of order.
//!
//! * [`PriorityQueues`]: one endpoint's bounded receive queue; FIFO per
//!   priority level, highest priority (0) first.
//! * [`SeqReorder`]: per-(sender, priority) sequence numbers. libfabric's
//!   `tcp;ofi_rxm` reports completions in no particular order, so the receiver
//!   buffers early arrivals and releases them in sequence order.
//!
//! Both allocate only at construction.

use super::status::Status;
use rustc_hash::FxHasher;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash};

/// Most priority levels a [`PriorityQueues`] can have (one bit each in a mask).
pub const MAX_LEVELS: usize = 64;

/// "No next item" in the intrusive lists.
const NIL: u32 = u32::MAX;

/// Why [`PriorityQueues::push`] refused an item; the item is handed back.
#[derive(Debug, PartialEq, Eq)]
pub enum PushError<T> {
    /// All receive buffers are in use.
    Full(T),
    /// `priority >= levels()`.
    Priority(T),
}

impl<T> PushError<T> {
    /// The refused item.
    pub fn into_inner(self) -> T {
        match self {
            PushError::Full(t) | PushError::Priority(t) => t,
        }
    }

    /// The matching MCAPI status: `MCAPI_ERR_MEM_LIMIT` or `MCAPI_ERR_PRIORITY`.
    pub fn status(&self) -> Status {
        match self {
            PushError::Full(_) => Status::MCAPI_ERR_MEM_LIMIT,
            PushError::Priority(_) => Status::MCAPI_ERR_PRIORITY,
        }
    }
}

/// A bounded receive queue with `levels` priority levels (0 = highest).
///
/// Items live in one preallocated slab of `capacity` slots (the endpoint's
/// receive buffers, `MCAPI_ENDP_ATTR_NUM_RECV_BUFFERS`) shared by all levels;
/// each level is a FIFO threaded through the slab. Sharing keeps memory at
/// `capacity` rather than `levels * capacity` while any level may use every
/// buffer. All operations are O(1).
#[derive(Debug)]
pub struct PriorityQueues<T> {
    items: Vec<Option<T>>,
    next: Vec<u32>,
    free_slots: Vec<u32>,
    heads: Vec<u32>,
    tails: Vec<u32>,
    counts: Vec<usize>,
    /// Bit `p` set when level `p` is non-empty: the head is `trailing_zeros`.
    nonempty: u64,
}

impl<T> PriorityQueues<T> {
    /// A queue of `levels` priorities holding at most `capacity` items.
    ///
    /// # Panics
    /// If `levels` is 0 or above [`MAX_LEVELS`], or `capacity >= u32::MAX`.
    pub fn new(levels: usize, capacity: usize) -> PriorityQueues<T> {
        assert!(
            (1..=MAX_LEVELS).contains(&levels),
            "bad number of priority levels {levels}"
        );
        assert!(
            capacity < NIL as usize,
            "receive queue capacity {capacity} too large"
        );
        PriorityQueues {
            items: (0..capacity).map(|_| None).collect(),
            next: vec![NIL; capacity],
            free_slots: (0..capacity as u32).rev().collect(),
            heads: vec![NIL; levels],
            tails: vec![NIL; levels],
            counts: vec![0; levels],
            nonempty: 0,
        }
    }

    /// Number of priority levels.
    pub fn levels(&self) -> usize {
        self.heads.len()
    }

    /// Total number of slots.
    pub fn capacity(&self) -> usize {
        self.items.len()
    }

    /// Items queued, all levels (what `mcapi_msg_available` reports).
    pub fn len(&self) -> usize {
        self.capacity() - self.free_slots.len()
    }

    /// Free slots (receive buffers still available).
    pub fn free(&self) -> usize {
        self.free_slots.len()
    }

    /// `true` if nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.nonempty == 0
    }

    /// `true` if no slot is free.
    pub fn is_full(&self) -> bool {
        self.free_slots.is_empty()
    }

    /// Items queued at `priority` (0 for an out-of-range level).
    pub fn len_at(&self, priority: usize) -> usize {
        self.counts.get(priority).copied().unwrap_or(0)
    }

    /// Appends `item` to the FIFO of level `priority`.
    ///
    /// # Errors
    /// [`PushError::Priority`] if `priority >= levels()` (checked first),
    /// [`PushError::Full`] if no slot is free; the item comes back in both.
    #[inline(always)]
    pub fn push(&mut self, priority: usize, item: T) -> Result<(), PushError<T>> {
        if priority >= self.levels() {
            return Err(PushError::Priority(item));
        }
        let Some(slot) = self.free_slots.pop() else {
            return Err(PushError::Full(item));
        };
        let s = slot as usize;
        self.items[s] = Some(item);
        self.next[s] = NIL;
        match self.tails[priority] {
            NIL => self.heads[priority] = slot,
            tail => self.next[tail as usize] = slot,
        }
        self.tails[priority] = slot;
        self.counts[priority] += 1;
        self.nonempty |= 1 << priority;
        Ok(())
    }

    /// Priority level of the item [`pop`](Self::pop) would return.
    #[inline]
    pub fn head_priority(&self) -> Option<usize> {
        (self.nonempty != 0).then(|| self.nonempty.trailing_zeros() as usize)
    }

    /// The next item without removing it.
    ///
    /// Lets the driver check a message's size against the receive buffer
    /// first: if it does not fit it reports `MCAPI_ERR_MSG_TRUNCATED` (spec
    /// 4.3.3/4.3.4) and chooses whether to [`pop`](Self::pop) the message or
    /// leave it queued for a larger buffer.
    #[inline]
    pub fn peek(&self) -> Option<&T> {
        let p = self.head_priority()?;
        self.items[self.heads[p] as usize].as_ref()
    }

    /// The items in the order `pop` would return them.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        (0..self.levels()).flat_map(move |p| {
            let mut at = self.heads[p];
            std::iter::from_fn(move || {
                if at == NIL {
                    return None;
                }
                let s = at as usize;
                at = self.next[s];
                self.items[s].as_ref()
            })
        })
    }

    /// Mutable access to the next item, as [`peek`](Self::peek).
    pub fn peek_mut(&mut self) -> Option<&mut T> {
        let p = self.head_priority()?;
        self.items[self.heads[p] as usize].as_mut()
    }

    /// Removes the oldest item of the highest non-empty priority level.
    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        self.pop_with_priority().map(|(_, item)| item)
    }

    /// As [`pop`](Self::pop), also returning the item's priority level.
    #[inline(always)]
    pub fn pop_with_priority(&mut self) -> Option<(usize, T)> {
        let p = self.head_priority()?;
        let slot = self.heads[p];
        let s = slot as usize;
        self.heads[p] = self.next[s];
        if self.heads[p] == NIL {
            self.tails[p] = NIL;
            self.nonempty &= !(1 << p);
        }
        self.counts[p] -= 1;
        self.free_slots.push(slot);
        self.items[s].take().map(|item| (p, item))
    }

    /// Drops every queued item: unconsumed data of a deleted endpoint is
    /// discarded (spec 3.5.3).
    pub fn clear(&mut self) {
        while self.pop().is_some() {}
    }
}

/// Why [`SeqReorder::accept`] refused an item; the item is handed back.
#[derive(Debug, PartialEq, Eq)]
pub enum Rejected<T> {
    /// This sequence number was already delivered or is already buffered:
    /// drop the item, it must not be delivered twice.
    Duplicate(T),
    /// Sequence number at or beyond `expected + window`: the sender exceeded
    /// its window (a protocol error; the item is not buffered).
    BeyondWindow(T),
    /// New key, but `max_keys` keys are already tracked.
    TooManyKeys(T),
}

impl<T> Rejected<T> {
    /// The refused item.
    pub fn into_inner(self) -> T {
        match self {
            Rejected::Duplicate(t) | Rejected::BeyondWindow(t) | Rejected::TooManyKeys(t) => t,
        }
    }
}

/// Per-key reorder state: the next sequence number to release and the ring
/// position that holds it.
#[derive(Clone, Copy, Debug, Default)]
struct Stream {
    next: u32,
    head: u32,
    buffered: u32,
}

impl Stream {
    /// The item at `head` (number `next`) is delivered: both move on by one, `head` within
    /// the key's `slots` (a power of two).
    #[inline]
    fn pass(&mut self, slots: u32) {
        self.head = (self.head + 1) & (slots - 1);
        self.next = self.next.wrapping_add(1);
    }
}

/// Releases items in sequence order per key, whatever order they arrive in.
///
/// The key is typically `(sender endpoint, priority)`: MCAPI orders messages
/// FIFO per priority level (spec 3.5.3), so each sender numbers each of its
/// priority streams to this endpoint separately.
///
/// Sequence numbers are `u32` with wrapping arithmetic: every new key expects
/// 0 first, then 1, 2, .. `u32::MAX`, 0, .. A number up to 2^31 behind the
/// expected one counts as already delivered (duplicate); one at least
/// `window` ahead is refused. `window` should therefore be at least the
/// number of messages a sender may have in flight per key (its credits).
///
/// Memory: `window` (rounded up to a power of two) item slots per stream, made when a key
/// first takes that stream (a sender's first message: once, kept for the keys that reuse
/// the stream), so an endpoint pays for the senders it has, not for `max_keys`; plus a key
/// map sized for `max_keys` that never grows. The map uses Fx hashing (fast on
/// the small integer keys it gets, once per message, and deterministic: no random seed).
#[derive(Debug)]
pub struct SeqReorder<K, T> {
    window: u32,
    index: HashMap<K, u32, BuildHasherDefault<FxHasher>>,
    streams: Vec<Stream>,
    free_streams: Vec<u32>,
    /// Each stream's slots (empty until a key first takes the stream).
    buf: Vec<Box<[Option<T>]>>,
    /// The key accepted last and its stream: a run of items of one stream (a channel has
    /// only one) skips the map.
    last: Option<(K, u32)>,
}

/// Half the `u32` sequence space: the boundary between "behind" and "ahead".
const HALF: u32 = 1 << 31;

impl<K: Copy + Eq + Hash, T> SeqReorder<K, T> {
    /// Tracks up to `max_keys` keys, buffering up to `window` items per key.
    ///
    /// # Panics
    /// If `window` is 0 or above 2^31, `max_keys >= u32::MAX`, or
    /// `max_keys * window` overflows `usize`.
    pub fn new(max_keys: usize, window: u32) -> SeqReorder<K, T> {
        assert!((1..=HALF).contains(&window), "bad reorder window {window}");
        assert!(
            max_keys < u32::MAX as usize,
            "too many reorder keys {max_keys}"
        );
        assert!(
            max_keys.checked_mul(Self::stride(window)).is_some(),
            "reorder buffer too large"
        );
        SeqReorder {
            window,
            index: HashMap::with_capacity_and_hasher(max_keys, Default::default()),
            streams: vec![Stream::default(); max_keys],
            free_streams: (0..max_keys as u32).rev().collect(),
            buf: (0..max_keys).map(|_| Box::default()).collect(),
            last: None,
        }
    }

    /// Slots per key: the window rounded up to a power of two, so positions wrap with a mask
    /// (a division per item showed in profiles).
    fn stride(window: u32) -> usize {
        (window as usize).next_power_of_two()
    }

    /// The per-key window.
    pub fn window(&self) -> u32 {
        self.window
    }

    /// Number of keys tracked.
    pub fn keys(&self) -> usize {
        self.index.len()
    }

    /// The next sequence number `key` will release, `None` for an unknown key.
    pub fn expected(&self, key: &K) -> Option<u32> {
        self.index.get(key).map(|&s| self.streams[s as usize].next)
    }

    /// Items buffered for `key`, waiting for an earlier sequence number.
    pub fn buffered(&self, key: &K) -> usize {
        self.index
            .get(key)
            .map_or(0, |&s| self.streams[s as usize].buffered as usize)
    }

    /// Takes item `seq` of `key`'s stream and returns the items now
    /// deliverable, in order: empty if `seq` is ahead of a missing one, else
    /// `seq`'s item followed by any buffered successors.
    ///
    /// Items the returned iterator does not yield (it is dropped early) stay
    /// buffered and come out of the next `accept` or [`ready`](Self::ready).
    ///
    /// # Errors
    /// [`Rejected`] with the item: a duplicate, a number beyond the window, or
    /// a new key when `max_keys` are already tracked.
    pub fn accept(&mut self, key: K, seq: u32, item: T) -> Result<Ready<'_, T>, Rejected<T>> {
        self.accept_relative(key, |_| seq, item)
    }

    /// The fast path of [`accept`](Self::accept): whether `seq` is the next item of `key`
    /// (the key of the previous accept) with nothing buffered; it is then counted as
    /// delivered, and the caller takes its item as `accept` would have yielded it. `false`
    /// changes nothing: call `accept`.
    #[inline]
    pub fn pass_in_order(&mut self, key: K, seq: u32) -> bool {
        let Some((k, si)) = self.last else {
            return false;
        };
        let w = Self::stride(self.window) as u32;
        let stream = &mut self.streams[si as usize];
        if k != key || stream.next != seq || stream.buffered != 0 {
            return false;
        }
        stream.pass(w);
        true
    }

    /// As [`accept`](Self::accept), with the sequence number computed by
    /// `seq_of` from the one `key` expects next (0 for a new key): for wire
    /// formats that carry only the low bits. One key lookup.
    ///
    /// # Errors
    /// As [`accept`](Self::accept).
    pub fn accept_relative(
        &mut self,
        key: K,
        seq_of: impl FnOnce(u32) -> u32,
        item: T,
    ) -> Result<Ready<'_, T>, Rejected<T>> {
        let si = match self.last {
            Some((k, s)) if k == key => s,
            _ => {
                let s = match self.index.get(&key) {
                    Some(&s) => s,
                    None => {
                        let Some(s) = self.free_streams.pop() else {
                            return Err(Rejected::TooManyKeys(item));
                        };
                        self.streams[s as usize] = Stream::default();
                        if self.buf[s as usize].is_empty() {
                            let w = Self::stride(self.window);
                            self.buf[s as usize] = (0..w).map(|_| None).collect();
                        }
                        self.index.insert(key, s);
                        s
                    }
                };
                self.last = Some((key, s));
                s
            }
        } as usize;
        let stream = &mut self.streams[si];
        let seq = seq_of(stream.next);
        let ahead = seq.wrapping_sub(stream.next);
        if ahead >= HALF {
            return Err(Rejected::Duplicate(item));
        }
        if ahead >= self.window {
            return Err(Rejected::BeyondWindow(item));
        }
        let w = Self::stride(self.window);
        let slots = &mut self.buf[si][..];
        if ahead == 0 && stream.buffered == 0 {
            // In order with nothing waiting (the common case): straight through.
            stream.pass(w as u32);
            return Ok(Ready {
                first: Some(item),
                slots,
                stream: Some(stream),
            });
        }
        let pos = (stream.head as usize + ahead as usize) & (w - 1);
        if slots[pos].is_some() {
            return Err(Rejected::Duplicate(item));
        }
        slots[pos] = Some(item);
        stream.buffered += 1;
        Ok(Ready {
            first: None,
            slots,
            stream: Some(stream),
        })
    }

    /// The items of `key` deliverable now (those a dropped [`Ready`] left).
    pub fn ready(&mut self, key: &K) -> Ready<'_, T> {
        match self.index.get(key) {
            Some(&s) => Ready {
                first: None,
                slots: &mut self.buf[s as usize][..],
                stream: Some(&mut self.streams[s as usize]),
            },
            None => Ready {
                first: None,
                slots: Default::default(),
                stream: None,
            },
        }
    }

    /// Forgets `key` (its sender went away or restarts numbering at 0) and hands its
    /// buffered items, which wait for an earlier one that can no longer come, to
    /// `leftover` in sequence order; returns how many there were.
    pub fn remove(&mut self, key: &K, mut leftover: impl FnMut(T)) -> usize {
        let Some(s) = self.index.remove(key) else {
            return 0;
        };
        if self.last.is_some_and(|(k, _)| k == *key) {
            self.last = None;
        }
        let w = Self::stride(self.window);
        let s = s as usize;
        let head = self.streams[s].head as usize;
        let slots = &mut self.buf[s][..];
        for i in 0..w {
            if let Some(item) = slots[(head + i) & (w - 1)].take() {
                leftover(item);
            }
        }
        self.free_streams.push(s as u32);
        self.streams[s].buffered as usize
    }
}

/// Iterator over the items of one key that are deliverable in order.
#[derive(Debug)]
pub struct Ready<'a, T> {
    /// The accepted item when it was next in order (never stored in `slots`).
    first: Option<T>,
    slots: &'a mut [Option<T>],
    stream: Option<&'a mut Stream>,
}

impl<T> Iterator for Ready<'_, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        if let Some(item) = self.first.take() {
            return Some(item);
        }
        let stream = self.stream.as_mut()?;
        let item = self.slots[stream.head as usize].take()?;
        stream.pass(self.slots.len() as u32);
        stream.buffered -= 1;
        Some(item)
    }
}

impl<T> Drop for Ready<'_, T> {
    /// An in-order item never yielded is buffered as if it had not been passed straight
    /// through, so it comes out of the next `accept` or `ready`.
    fn drop(&mut self) {
        if let (Some(item), Some(stream)) = (self.first.take(), self.stream.as_mut()) {
            stream.head = stream.head.wrapping_sub(1) & (self.slots.len() as u32 - 1);
            stream.next = stream.next.wrapping_sub(1);
            stream.buffered += 1;
            self.slots[stream.head as usize] = Some(item);
        }
    }
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
