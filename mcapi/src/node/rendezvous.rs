//! Large messages by rendezvous, the sending side (docs/design.md, "Large messages").
//!
//! A message above the node's eager size is copied by its sender into a registered staging
//! region (so `msg_send` returns at once with the buffer free, as for an eager message) and
//! only a 32-byte descriptor travels the eager path: same tag, credit and sequence number
//! as an eager message, marked by its remote CQ data, so priorities and per-sender FIFO
//! order are the queue's. The receiver reads the data ahead (`node/fetch.rs`) and tells
//! the sender when its reads ended ([`Kind::RndvDone`](crate::semantics::wire::Kind)),
//! which frees the region.

use super::common::{ofi_status, Result};
use super::credit_plane::control_tag;
use super::inner::NodeInner;
use super::state::{PeerRun, State, LOCAL_PEER};
use crate::semantics::request::RequestHandle;
use crate::semantics::wire::Kind;
use crate::semantics::Status;
use mcapi_ofi::{flags, ExposedBuffer, MemoryRegion};
use std::time::{Duration, Instant};

/// Bytes of a descriptor: remote address, key, length, the sender's staging id.
pub(super) const DESC_LEN: usize = 32;
/// Remote CQ data marking a message as a rendezvous descriptor (fits 4-byte CQ data).
pub(super) const RNDV_MARK: u64 = 0x5244_5601;
/// Remote CQ data of an eager message, where it has to carry some (`Fab::message_cq_data`).
pub(super) const EAGER_MARK: u64 = 0;
/// Bytes a node keeps staged for rendezvous messages not yet read at most (but one
/// message always goes): beyond it a blocking `msg_send` waits for a receiver to finish
/// reading, and `msg_send_i` is `MCAPI_ERR_MEM_LIMIT`.
pub(super) const STAGING_BUDGET: usize = 64 << 20;
/// Staging regions are allocated in powers of two of at least this (so they are reused
/// across sizes), and the receive region likewise.
const STAGING_UNIT: usize = 64 << 10;
/// Staging regions kept for reuse at most (and at most [`STAGING_BUDGET`] bytes of them):
/// a window of large `msg_send_i`s registers memory once, not per message.
const STAGING_CACHE: usize = 64;

/// What a rendezvous descriptor says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Descriptor {
    /// Where the data is, as the provider addresses the sender's region (its virtual
    /// address with `FI_MR_VIRT_ADDR`, else an offset: 0).
    pub(super) addr: u64,
    pub(super) key: u64,
    pub(super) len: u64,
    /// The sender's staging id, echoed in `RndvDone`.
    pub(super) id: u64,
}

impl Descriptor {
    pub(super) fn encode(&self) -> [u8; DESC_LEN] {
        let mut b = [0u8; DESC_LEN];
        for (i, v) in [self.addr, self.key, self.len, self.id].iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    pub(super) fn decode(b: &[u8; DESC_LEN]) -> Descriptor {
        let f = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        Descriptor {
            addr: f(0),
            key: f(1),
            len: f(2),
            id: f(3),
        }
    }
}

/// A message to send: eager (its bytes) or staged (its descriptor).
#[derive(Clone, Copy)]
pub(super) enum Msg<'a> {
    Eager(&'a [u8]),
    Staged {
        desc: [u8; DESC_LEN],
        id: u64,
        len: usize,
    },
}

impl Msg<'_> {
    /// The message's length as the application sees it.
    pub(super) fn len(&self) -> usize {
        match self {
            Msg::Eager(d) => d.len(),
            Msg::Staged { len, .. } => *len,
        }
    }
}

/// "No staging": the `rndv` field of an eager `Req::Send`.
pub(super) const NO_STAGING: u64 = u64::MAX;

/// Where a rendezvous message's data is.
enum Data {
    /// Copied into a staging region.
    Staged(MemoryRegion),
    /// The application's buffer, exposed by a blocking `msg_send` that waits for its end
    /// ([`Rendezvous::take_exposed`]).
    Caller,
    /// An application's buffer lent by `msg_send_i_zero_copy`, and that send's request
    /// (once queued), which completes when the receiver is done with it.
    Lent(ExposedBuffer, Option<RequestHandle>),
}

struct Staged {
    data: Data,
    peer: u16,
    len: usize,
    generation: u32,
    /// An exposed buffer's end: read or discarded by its receiver (`true`), or the receiver
    /// is gone (`false`).
    ended: Option<bool>,
}

/// The node's rendezvous state (under the state lock).
#[derive(Default)]
pub(super) struct Rendezvous {
    staged: Vec<Option<Staged>>,
    free_ids: Vec<u32>,
    generation: u32,
    /// Staging regions not in use, kept for the next large message to the same peer: the
    /// peer they were staged for, which knows their key (a region's registration, and so its
    /// key, stays; another peer reading it by that key would read what is not its own).
    cache: Vec<(u16, MemoryRegion)>,
    staged_bytes: usize,
    /// The receiving side: reads of messages that arrived, in flight or done.
    pub(super) fetches: super::fetch::Fetches,
    /// Counts staged messages released (see [`Rendezvous::keep_polling`]).
    released: u32,
}

impl Rendezvous {
    /// The node's rendezvous state, its staging ids starting at a random generation: an id
    /// comes back in `RndvDone`, which ends its staging, and a receiver drops and answers a
    /// descriptor whatever it names, so a stranger who could guess ids (a counter from 0)
    /// could end other receivers' messages early with forged descriptors.
    pub(super) fn new() -> Rendezvous {
        let mut seed = [0u8; 4];
        // Without random numbers the counter starts at 0, as it did.
        _ = getrandom::fill(&mut seed);
        Rendezvous {
            generation: u32::from_le_bytes(seed),
            ..Rendezvous::default()
        }
    }

    /// Whether a blocked call should keep polling rather than sleep: a read of ours is in
    /// flight (it moves with our progress), or a receiver may be reading what we staged
    /// (which needs our progress too): for the first `SLOW_AFTER` of the wait, and after
    /// that while rendezvous traffic moved since `seen` (a receiver that never reads does
    /// not keep us spinning).
    pub(super) fn keep_polling(&self, seen: &mut u32, waited_long: bool) -> bool {
        let now = self.events();
        let moved = now != *seen;
        *seen = now;
        self.fetches.reading > 0 || ((moved || !waited_long) && self.outstanding() > 0)
    }

    /// Counts staged messages released and reads ended.
    pub(super) fn events(&self) -> u32 {
        self.released.wrapping_add(self.fetches.ended)
    }

    /// Staged messages not yet released by their receivers.
    pub(super) fn outstanding(&self) -> usize {
        self.staged.len() - self.free_ids.len()
    }

    /// The staged message `id`'s region, if it is still staged.
    pub(super) fn region(&self, id: u64) -> Option<&MemoryRegion> {
        match &self.get(id)?.data {
            Data::Staged(region) => Some(region),
            Data::Caller | Data::Lent(..) => None,
        }
    }

    /// The ids of the messages staged now (tests).
    #[cfg(test)]
    pub(super) fn staged_ids(&self) -> Vec<u64> {
        self.staged
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some(u64::from(s.as_ref()?.generation) << 32 | i as u64))
            .collect()
    }

    /// Whether `id` is an application's buffer lent by `msg_send_i_zero_copy`.
    pub(super) fn is_lent(&self, id: u64) -> bool {
        self.get(id)
            .is_some_and(|s| matches!(s.data, Data::Lent(..)))
    }

    fn get(&self, id: u64) -> Option<&Staged> {
        let s = self.staged.get(id as u32 as usize)?.as_ref()?;
        (s.generation == (id >> 32) as u32).then_some(s)
    }

    /// Frees staged message `id` (an id already freed, or of an earlier use of its slot, is
    /// ignored); `from`: the peer that says so (`None`: this node). A lent buffer's request
    /// and length are returned, for the caller to complete.
    pub(super) fn release(&mut self, id: u64, from: Option<u16>) -> Option<(RequestHandle, usize)> {
        let (exposed, request) = self.free(id, from)?;
        let len = exposed.len();
        // The registration closes here, before the request completes.
        drop(exposed);
        request.map(|h| (h, len))
    }

    /// As `release`, handing back a lent buffer's exposure with its request (if queued).
    fn free(
        &mut self,
        id: u64,
        from: Option<u16>,
    ) -> Option<(ExposedBuffer, Option<RequestHandle>)> {
        let s = self.get(id)?;
        if from.is_some_and(|p| p != s.peer) {
            return None;
        }
        let i = id as u32;
        if let Some(s) = self.staged[i as usize]
            .as_mut()
            .filter(|s| matches!(s.data, Data::Caller))
        {
            // An exposed buffer: its sender, waiting, takes the news (and frees the id).
            s.ended.get_or_insert(from.is_some());
            self.released = self.released.wrapping_add(1);
            return None;
        }
        let s = self.staged[i as usize].take()?;
        self.released = self.released.wrapping_add(1);
        self.free_ids.push(i);
        self.staged_bytes -= s.len;
        match s.data {
            Data::Staged(region) => {
                keep_largest(
                    &mut self.cache,
                    (s.peer, region),
                    |(_, m)| m.len(),
                    (STAGING_CACHE, STAGING_BUDGET),
                );
                None
            }
            Data::Lent(exposed, request) => Some((exposed, request)),
            Data::Caller => None,
        }
    }

    /// Records an application's buffer exposed for peer `peer` to read in place, and returns
    /// its id (for the descriptor).
    pub(super) fn expose(&mut self, peer: u16) -> u64 {
        self.record(Data::Caller, peer, 0)
    }

    /// Records `buf`, lent by `msg_send_i_zero_copy` and exposed for peer `peer` to read in
    /// place, and returns its id; [`Rendezvous::attach`] names its request once queued.
    pub(super) fn lend(&mut self, peer: u16, buf: ExposedBuffer) -> u64 {
        self.record(Data::Lent(buf, None), peer, 0)
    }

    /// Request `h` completes when lent buffer `id` is released.
    pub(super) fn attach(&mut self, id: u64, h: RequestHandle) {
        let i = id as u32 as usize;
        if let Some(Staged {
            data: Data::Lent(_, request),
            generation,
            ..
        }) = self.staged.get_mut(i).and_then(Option::as_mut)
        {
            if *generation == (id >> 32) as u32 {
                *request = Some(h);
            }
        }
    }

    /// Records data for peer `peer` under a fresh id, which it returns: the slot's index,
    /// its generation above.
    fn record(&mut self, data: Data, peer: u16, len: usize) -> u64 {
        self.generation = self.generation.wrapping_add(1);
        let i = match self.free_ids.pop() {
            Some(i) => i,
            None => {
                self.staged.push(None);
                self.staged.len() as u32 - 1
            }
        };
        self.staged_bytes += len;
        self.staged[i as usize] = Some(Staged {
            data,
            peer,
            len,
            generation: self.generation,
            ended: None,
        });
        u64::from(self.generation) << 32 | u64::from(i)
    }

    /// The end of exposed buffer `id`, once there is one (`Some(true)`: its receiver is done
    /// with it); then its id is free again. `Some(false)` too for an id unknown (never).
    pub(super) fn take_exposed(&mut self, id: u64) -> Option<bool> {
        let Some(s) = self.get(id) else {
            return Some(false);
        };
        let ended = s.ended?;
        self.staged[id as u32 as usize] = None;
        self.free_ids.push(id as u32);
        Some(ended)
    }

    /// Frees what peer `peer` was sent and will never read (its run is gone); returns what
    /// a read of may still be served (lent buffers' exposures with their requests, staging
    /// regions), for the caller to dispose of and fail. Exposed application buffers end
    /// with their waiting senders.
    pub(super) fn forget_peer(&mut self, peer: u16) -> Vec<Forgotten> {
        // Regions cached for it would only serve it again (or its successor, which never
        // learnt their keys): freed.
        self.cache.retain(|(p, _)| *p != peer);
        let ids: Vec<u64> = self
            .staged
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let s = s.as_ref().filter(|s| s.peer == peer)?;
                Some(u64::from(s.generation) << 32 | i as u64)
            })
            .collect();
        let mut forgotten = Vec::new();
        for id in ids {
            let i = id as u32 as usize;
            let staging = matches!(&self.staged[i], Some(s) if matches!(s.data, Data::Staged(_)));
            if staging {
                // Not cached for the next message: the peer's read may still be served.
                if let Some(Staged {
                    data: Data::Staged(region),
                    len,
                    ..
                }) = self.staged[i].take()
                {
                    self.released = self.released.wrapping_add(1);
                    self.free_ids.push(i as u32);
                    self.staged_bytes -= len;
                    forgotten.push(Forgotten::Staged(region));
                }
            } else if let Some((exposed, request)) = self.free(id, None) {
                forgotten.push(Forgotten::Lent(exposed, request));
            }
        }
        forgotten
    }
}

/// What [`Rendezvous::forget_peer`] freed that its peer may still be reading.
pub(super) enum Forgotten {
    /// A lent buffer, with the request of its `msg_send_i_zero_copy`.
    Lent(ExposedBuffer, Option<RequestHandle>),
    /// A staging region.
    Staged(MemoryRegion),
}

impl NodeInner {
    /// Stages `data` for peer `peer` (or [`LOCAL_PEER`]): `Ok(None)` while the node's
    /// staging budget is spent.
    pub(super) fn stage(
        &self,
        st: &mut State,
        peer: u16,
        data: &[u8],
    ) -> Result<Option<Msg<'static>>> {
        let r = &mut st.rndv;
        if r.staged_bytes > 0 && r.staged_bytes + data.len() > STAGING_BUDGET {
            return Ok(None);
        }
        if r.cache.capacity() == 0 {
            // Sized once: how many messages are staged at once varies with the receivers'
            // pace, and a list grown later would allocate on a warm path.
            r.cache.reserve(STAGING_CACHE);
            r.staged.reserve(STAGING_CACHE);
            r.free_ids.reserve(STAGING_CACHE);
        }
        let best = r
            .cache
            .iter()
            .enumerate()
            .filter(|(_, (p, m))| *p == peer && m.len() >= data.len())
            .min_by_key(|(_, (_, m))| m.len())
            .map(|(i, _)| i);
        let region = match best {
            Some(i) => r.cache.swap_remove(i).1,
            None => {
                let size = data.len().next_power_of_two().max(STAGING_UNIT);
                MemoryRegion::readable_remotely(&self.fab.domain, size).map_err(|e| {
                    log::info!("a staging region of {size} bytes: {e}");
                    Status::MCAPI_ERR_MEM_LIMIT
                })?
            }
        };
        if let Err(e) = region.write(0, data) {
            // Never: a cached region is in no operation.
            r.cache.push((peer, region));
            return Err(ofi_status(e));
        }
        let (addr, key) = (self.remote_address(region.addr()), region.key());
        let id = r.record(Data::Staged(region), peer, data.len());
        let desc = Descriptor {
            addr,
            key,
            len: data.len() as u64,
            id,
        };
        self.staged_out
            .store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(Some(Msg::Staged {
            desc: desc.encode(),
            id,
            len: data.len(),
        }))
    }

    /// How a peer addresses this node's registered memory at `addr` in an RMA read: by
    /// its virtual address with `FI_MR_VIRT_ADDR`, else by its offset in the region (0).
    pub(super) fn remote_address(&self, addr: usize) -> u64 {
        if self.fab.domain.attributes().mr_mode & flags::MR_VIRT_ADDR != 0 {
            addr as u64
        } else {
            0
        }
    }

    /// A receiver is done with staged message `id` (`RndvDone` from peer `from`); a lent
    /// buffer's send completes.
    pub(super) fn rndv_done(&self, st: &mut State, from: u16, id: u64) {
        if let Some((h, len)) = st.rndv.release(id, Some(from)) {
            st.requests
                .complete_if_pending(h, Status::MCAPI_SUCCESS, len);
        }
        if from == LOCAL_PEER {
            log::debug!("a rendezvous release from this node");
        }
    }

    /// The descriptor in receive slot `slot` (a message that arrived marked as one).
    pub(super) fn descriptor_in(&self, slot: u32) -> Descriptor {
        let mut d = [0u8; DESC_LEN];
        // A completed receive slot not yet posted again: readable. (Should it not be, the
        // zero descriptor's read fails and the message ends with MCAPI_ERR_TRANSMISSION.)
        let read = self
            .fab
            .recv_pool
            .read(slot as usize * super::common::EAGER_SLOT, &mut d);
        debug_assert!(read.is_ok(), "{read:?}");
        Descriptor::decode(&d)
    }

    /// Tells run `(peer, run)` that its staged message `id` (to port `port`) is done with:
    /// read, or discarded with its endpoint. Nothing if that run is gone (another run of
    /// the peer may be using the same id).
    pub(super) fn send_rndv_done(&self, st: &mut State, (peer, run): PeerRun, port: u32, id: u64) {
        if !st.run_alive((peer, run)) {
            return;
        }
        let Some(p) = st.peers.get(peer as usize) else {
            return;
        };
        let tag = control_tag(Kind::RndvDone, (port, 0), p.index_at_peer);
        st.outbox.push_back((peer, tag, id));
    }

    /// Whether a staged message waits for a receiver that is alive.
    fn staged_for_live(st: &State) -> bool {
        st.rndv.staged.iter().flatten().any(|s| {
            s.peer != LOCAL_PEER && st.peers.get(s.peer as usize).is_some_and(|p| p.is_alive())
        })
    }

    /// At `finalize`: waits, progressing, until every staged message was read by its
    /// receiver (or the receiver is gone), at most [`FINALIZE_DRAIN`]. Like an eager
    /// message already sent, a rendezvous message a live receiver has not taken by then
    /// is lost.
    pub(super) fn drain_staged(&self, deadline: Instant) {
        let mut backoff = self.backoff();
        loop {
            let Ok(mut st) = self.live_state() else {
                return;
            };
            self.progress(&mut st);
            if !Self::staged_for_live(&st) {
                return;
            }
            drop(st);
            if backoff.wait(Some(deadline)).is_err() {
                return;
            }
        }
    }

    /// Staged messages not yet released by their receivers.
    pub(super) fn staged_messages(&self) -> Result<usize> {
        Ok(self.live_state()?.rndv.outstanding())
    }
}

/// How long `finalize` waits for receivers to read this node's staged messages.
pub(super) const FINALIZE_DRAIN: Duration = Duration::from_secs(10);

/// Keeps `item` in `cache` (at most `max_items` items of `max_bytes` in all, by `len`),
/// giving up smaller items to make room: the cache follows the sizes in use, so a run that
/// moves from many small messages to larger ones does not allocate a region per message
/// while the small ones hold every place. An item no larger than every one it would
/// displace is dropped instead.
fn keep_largest<T>(
    cache: &mut Vec<T>,
    item: T,
    len: impl Fn(&T) -> usize,
    (max_items, max_bytes): (usize, usize),
) {
    let size = len(&item);
    if size > max_bytes || max_items == 0 {
        return;
    }
    let mut cached: usize = cache.iter().map(&len).sum();
    while cache.len() >= max_items || cached + size > max_bytes {
        // (Never empty here: an empty cache has room for an item within the bounds.)
        let Some((i, smallest)) = cache
            .iter()
            .enumerate()
            .map(|(i, c)| (i, len(c)))
            .min_by_key(|&(_, n)| n)
        else {
            return;
        };
        if smallest >= size {
            return;
        }
        cached -= smallest;
        cache.swap_remove(i);
    }
    cache.push(item);
}

#[cfg(test)]
mod tests {
    use super::{keep_largest, Rendezvous};

    /// Staging ids start at a random generation (before: 0 for every node, so a stranger
    /// could name the ids of the messages a node staged in forged descriptors).
    #[test]
    fn staging_ids_start_somewhere_unguessable() {
        let firsts: Vec<u32> = (0..4).map(|_| Rendezvous::new().generation).collect();
        assert!(
            firsts.windows(2).any(|w| w[0] != w[1]),
            "four nodes' ids all start at {}",
            firsts[0]
        );
    }

    fn keep(cache: &mut Vec<usize>, item: usize) {
        keep_largest(cache, item, |&n| n, (3, 100));
    }

    #[test]
    fn the_staging_cache_follows_the_sizes_in_use() {
        let mut cache = Vec::new();
        for _ in 0..4 {
            keep(&mut cache, 10);
        }
        assert_eq!(cache, [10, 10, 10], "at most 3 items");
        // Larger regions displace the smallest, one for one.
        keep(&mut cache, 30);
        keep(&mut cache, 30);
        let mut sorted = cache.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [10, 30, 30]);
        // No larger than any: dropped.
        keep(&mut cache, 10);
        sorted = cache.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [10, 30, 30]);
        // The byte bound: 60 displaces what it must (10 and one 30) to stay within 100.
        keep(&mut cache, 60);
        sorted = cache.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [30, 60]);
        // Above the bound alone: never kept, nothing given up.
        keep(&mut cache, 101);
        sorted = cache.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [30, 60]);
    }
}
