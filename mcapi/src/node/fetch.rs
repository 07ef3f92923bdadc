//! The receiving side of the rendezvous (docs/design.md, "Large messages"): messages are
//! read ahead.
//!
//! As soon as a rendezvous descriptor arrives (in the CQ read that delivers it), its data is
//! read (`fi_read`) into receive staging: a pool of 1 MiB chunks, one registered region made
//! at the first read, a message in as many chunks as it needs, each chunk one read, at most
//! [`READ_WINDOW`] in flight in message order, and several messages at once within
//! [`RECV_STAGING_BUDGET`]; descriptors beyond it wait their turn ([`Fetches`]' deferred
//! list). When a message's
//! reads end the sender is told (`RndvDone`), which frees its staging. The receive that
//! takes the message copies it out of its chunks, waiting (without the state lock between
//! polls) while its reads are under way; one whose reads wait for room starts them then,
//! from a reserve of one largest message. A read from a sender whose run is gone never
//! ends: the receive that takes it fails with `MCAPI_ERR_TRANSMISSION`, and its chunks are
//! given up (the provider may still write them; the endpoint's CQ keeps the memory alive)
//! and replaced.

use super::common::{ofi_status, MAX_MSG_SIZE};
use super::inner::NodeInner;
use super::peers::PeerInput;
use super::state::{Req, State, TakenSlot, LOCAL_SLOT};
use crate::semantics::request::RequestHandle;
use crate::semantics::wire::Context;
use crate::semantics::Status;
use mcapi_ofi::MemoryRegion;
use std::collections::VecDeque;

/// Receive staging is cut into chunks of this size; each read fills one.
const CHUNK: usize = 1 << 20;
/// Bytes of receive staging that messages read ahead may hold: one largest message, or
/// several smaller ones. Not more: reading far ahead on shm moves the data through more
/// memory than the caches hold, and the copies slow down (docs/performance.md).
pub(super) const RECV_STAGING_BUDGET: usize = MAX_MSG_SIZE;
/// Reads in flight at most (more measured slower on shm: they all end together, and the
/// copy-out of the first waits for the last).
const READ_WINDOW: usize = 4;
/// Reads in flight at most while they are all of one message, where the sender's progress
/// serves them (tcp;ofi_rxm...): each read waits for the other side, so one large message
/// goes faster with more of its reads in flight, and no other message waits behind them
/// (docs/performance.md, tcp 16 MiB messages).
const ONE_MESSAGE_READ_WINDOW: usize = 16;
/// Chunks of the largest message: a receive that needs a message not read yet can always
/// start its reads from these, whatever the read-ahead holds.
const MAX_CHUNKS: usize = MAX_MSG_SIZE.div_ceil(CHUNK);
// A message read into a posted buffer may have every chunk's read in flight at once, each
// holding one of the buffer's read records.
const _: () = assert!(MAX_CHUNKS <= mcapi_ofi::READS_IN_FLIGHT);
/// Chunks in the pool: the read-ahead budget and the reserve.
const POOL_CHUNKS: usize = RECV_STAGING_BUDGET / CHUNK + MAX_CHUNKS;
/// Times a message whose read failed is read again while its sender's run lives: its
/// sender was told the message was sent, and a provider may fail a read now and then with
/// both sides alive. Bounded: a descriptor whose memory cannot be read (a bad key) fails
/// every time.
pub(super) const READ_RETRIES: u8 = 3;

/// Where a message that arrived in a receive slot stands with its read.
const NO_FETCH: u32 = u32::MAX;
/// The fetch index of a read straight into a receive's buffer (no fetch tracks it: the
/// receive waits for its end itself).
pub(super) const IN_PLACE_READ: u32 = u32::MAX;
/// Its reads wait for room in the budget (listed in `Fetches::deferred`).
const DEFERRED: u32 = u32::MAX - 1;

/// One chunk of receive staging: a slot of the pool region, or, for one given up, a region
/// of its own made to replace it.
struct Chunk {
    region: MemoryRegion,
    offset: usize,
}

/// The reads of one rendezvous message.
struct Fetch {
    /// Its chunks, in order (`n` of them).
    chunks: [u16; MAX_CHUNKS],
    n: u8,
    /// Reads posted so far (the rest wait for the read window or the provider).
    posted: u8,
    /// Reads posted and not yet completed.
    pending: u8,
    /// It cannot be read (a bad length or address, a sender gone): it ends with an error.
    failed: bool,
    /// A read of this round failed: all are read again when they end, if retries remain.
    read_failed: bool,
    retries_left: u8,
    len: usize,
    /// The receive slot holding its descriptor.
    slot: u32,
    peer: u16,
    /// The sender's run: a read from a run that is gone never ends.
    run: u64,
    port: u32,
    /// Where the data is at the sender, and its staging id (echoed in `RndvDone`).
    addr: u64,
    key: u64,
    id: u64,
    generation: u16,
    /// Its endpoint was deleted: nobody takes it; freed when its reads end.
    orphan: bool,
    /// Read into the buffer of this receive request (posted with it) instead of chunks;
    /// the receive slot goes back when the reads end.
    into: Option<(RequestHandle, TakenSlot)>,
}

impl Fetch {
    fn done(&self) -> bool {
        self.posted == self.n && self.pending == 0
    }
}

/// The node's reads of rendezvous messages (under the state lock).
#[derive(Default)]
pub(super) struct Fetches {
    chunks: Vec<Chunk>,
    free_chunks: Vec<u16>,
    fetches: Vec<Option<Fetch>>,
    free: Vec<u16>,
    generation: u16,
    /// Per receive slot: the index of its message's fetch, [`DEFERRED`] or [`NO_FETCH`].
    of_slot: Vec<u32>,
    /// Messages whose reads wait for room, oldest first: receive slot, sender, endpoint
    /// (a message taken or discarded meanwhile leaves the list).
    pub(super) deferred: VecDeque<(u32, u16, u32)>,
    /// Fetches with reads not posted yet, in the order they started: reads go out in
    /// message order, at most [`READ_WINDOW`] in flight.
    queue: VecDeque<u32>,
    /// Reads posted and not completed.
    in_flight: usize,
    /// Messages whose reads are in flight.
    pub(super) reading: usize,
    /// Counts messages whose reads ended (see `Rendezvous::keep_polling`).
    pub(super) ended: u32,
}

/// What a receive finds of the rendezvous message at the head of its queue.
pub(super) enum FetchOutcome {
    /// Read: copied out into the caller's buffer (the fetch is freed).
    Copied,
    /// Its read failed, or its sender's run is gone: the message is lost.
    Failed(Status),
    /// Its reads are under way (or wait to be posted): take it later.
    Pending,
}

impl Fetches {
    /// Whether reads wait to be posted or to start (`advance_fetches` has work).
    pub(super) fn waiting(&self) -> bool {
        !self.queue.is_empty() || !self.deferred.is_empty()
    }

    fn state_of(&self, slot: u32) -> u32 {
        self.of_slot.get(slot as usize).copied().unwrap_or(NO_FETCH)
    }

    /// Sizes the tables for a receive pool of `slots` slots (each may hold a descriptor,
    /// so at most that many fetches exist at once).
    pub(super) fn size_for(&mut self, slots: usize) {
        self.of_slot = vec![NO_FETCH; slots];
        self.fetches.reserve(slots);
        self.free.reserve(slots);
        self.queue.reserve(slots);
        self.deferred.reserve(slots);
    }

    fn set_slot(&mut self, slot: u32, v: u32) {
        let i = slot as usize;
        if self.of_slot.len() <= i {
            self.of_slot.resize(i + 1, NO_FETCH);
        }
        self.of_slot[i] = v;
    }

    /// Whether no read of the message in `slot` has started (none posted, none done).
    pub(super) fn not_started(&self, slot: u32) -> bool {
        matches!(self.state_of(slot), NO_FETCH | DEFERRED)
    }

    /// Whether the message in `slot` is neither being read nor listed to be.
    pub(super) fn not_listed(&self, slot: u32) -> bool {
        self.state_of(slot) == NO_FETCH
    }

    /// The message in `slot` (from `peer`, to `port`) waits for room to be read ahead.
    fn defer(&mut self, slot: u32, peer: u16, port: u32) {
        self.set_slot(slot, DEFERRED);
        self.deferred.push_back((slot, peer, port));
    }

    /// The message in `slot` no longer waits for its reads (taken or discarded).
    pub(super) fn undefer(&mut self, slot: u32) {
        if self.state_of(slot) == DEFERRED {
            self.deferred.retain(|&(s, _, _)| s != slot);
        }
        self.set_slot(slot, NO_FETCH);
    }

    /// Whether the read-ahead has room for a message of `len` bytes (the reserve stays).
    fn room_for(&self, len: usize) -> bool {
        self.chunks.is_empty() || self.free_chunks.len() >= len.div_ceil(CHUNK) + MAX_CHUNKS
    }

    fn get_mut(&mut self, index: u32) -> Option<&mut Fetch> {
        let f = self.fetches.get_mut((index & 0xFFFF) as usize)?.as_mut()?;
        (f.generation == (index >> 16) as u16).then_some(f)
    }

    /// Frees fetch `index`: its chunks go back to the pool, unless `abandoned` (reads still
    /// posted may write them): those are replaced by new regions (`domain`) where possible.
    fn free(&mut self, index: u32, abandoned: Option<&mcapi_ofi::Domain>) {
        let i = (index & 0xFFFF) as usize;
        let Some(f) = self.fetches[i].take() else {
            return;
        };
        self.free.push(i as u16);
        if !f.done() {
            self.reading -= 1;
            self.in_flight -= f.pending as usize;
            if f.posted < f.n {
                self.queue.retain(|&q| q != index);
            }
        }
        if self.state_of(f.slot) == index {
            self.set_slot(f.slot, NO_FETCH);
        }
        if f.into.is_some() {
            // Read into a receive's own buffer: no chunks.
            return;
        }
        for &c in &f.chunks[..f.n as usize] {
            match abandoned {
                None => self.free_chunks.push(c),
                Some(domain) => {
                    // The old chunk stays with the endpoint's CQ (which keeps every region
                    // posted on alive); a new one takes its place.
                    if let Ok(region) = MemoryRegion::new(domain, CHUNK) {
                        self.chunks[c as usize] = Chunk { region, offset: 0 };
                        self.free_chunks.push(c);
                    }
                }
            }
        }
    }

    /// Messages read or being read and not yet taken (tests: nothing leaks).
    pub(super) fn held(&self) -> usize {
        self.fetches.len() - self.free.len()
    }
}

impl NodeInner {
    /// A rendezvous message arrived in receive `slot` (for endpoint `port`): its reads
    /// start now if the read-ahead has room, else it waits its turn.
    pub(super) fn prefetch(&self, st: &mut State, slot: u32, peer: u16, port: u32) {
        if st.rndv.fetches.of_slot.is_empty() {
            // Sized once for every receive slot: lists grown later would allocate on a
            // warm path (how many wait at once is the receiver's pace).
            let slots = self.fab.recv_slots as usize;
            st.rndv.fetches.of_slot.resize(slots, NO_FETCH);
            st.rndv.fetches.deferred.reserve(slots);
        }
        let len = self.descriptor_in(slot).len as usize;
        if st.rndv.fetches.deferred.is_empty()
            && st.rndv.fetches.room_for(len)
            && !self.reads_wait_for_receives(st)
        {
            self.start_fetch(st, slot, peer, port, None);
        } else {
            st.rndv.fetches.defer(slot, peer, port);
            self.reads_deferred
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Whether messages are not read ahead now: where the reader's process makes the read
    /// (shm: the copy is ours, inside `fi_read`, so reading ahead into receive staging only
    /// adds the copy out of it), while the application calls in, whose receives read into
    /// their own buffers. The background thread, which progresses the node while the
    /// application does not call in, still reads ahead (so a sender waiting for its read
    /// in place goes on).
    fn reads_wait_for_receives(&self, st: &State) -> bool {
        !st.in_background && self.fab.sends_in_place
    }

    /// Takes chunks for the message in `slot` and posts its reads. Without chunks (the pool
    /// could not be made, or a receive holds the reserve) it is deferred; a message that
    /// cannot be read (a bad length, a sender gone) is recorded as failed, for the receive
    /// that takes it to report. With `into`, the message is off its queue and read into
    /// that request's posted buffer instead (no chunks), and the request completes with the
    /// reads' end.
    fn start_fetch(
        &self,
        st: &mut State,
        slot: u32,
        peer: u16,
        port: u32,
        into: Option<(RequestHandle, TakenSlot)>,
    ) {
        let desc = self.descriptor_in(slot);
        let len = desc.len as usize;
        let run = st.arrival_run(slot);
        let n = len.div_ceil(CHUNK);
        let f = &mut st.rndv.fetches;
        if f.chunks.is_empty() && into.is_none() {
            match MemoryRegion::with_slots(&self.fab.domain, POOL_CHUNKS, CHUNK) {
                Ok(pool) => {
                    f.chunks = (0..POOL_CHUNKS)
                        .map(|i| Chunk {
                            region: pool.clone(),
                            offset: i * CHUNK,
                        })
                        .collect();
                    f.free_chunks = (0..POOL_CHUNKS as u16).rev().collect();
                }
                Err(e) => log::info!("the rendezvous receive staging: {e}"),
            }
        }
        // Any message up to the ceiling is received, whatever this node's own maximum.
        let usable = n <= MAX_CHUNKS && len <= MAX_MSG_SIZE;
        if usable && into.is_none() && f.free_chunks.len() < n {
            f.set_slot(slot, DEFERRED);
            f.deferred.push_front((slot, peer, port));
            return;
        }
        f.generation = f.generation.wrapping_add(1);
        let i = match f.free.pop() {
            Some(i) => i,
            None => {
                f.fetches.push(None);
                (f.fetches.len() - 1) as u16
            }
        };
        let index = u32::from(f.generation) << 16 | u32::from(i);
        let mut fetch = Fetch {
            chunks: [0; MAX_CHUNKS],
            n: 0,
            posted: 0,
            pending: 0,
            failed: !usable,
            read_failed: false,
            retries_left: READ_RETRIES,
            len,
            slot,
            peer,
            run,
            port,
            addr: desc.addr,
            key: desc.key,
            id: desc.id,
            generation: f.generation,
            orphan: false,
            into,
        };
        if usable {
            if into.is_none() {
                for c in &mut fetch.chunks[..n] {
                    *c = f.free_chunks.pop().unwrap_or_default();
                }
            }
            fetch.n = n as u8;
        }
        fetch.failed |= !st.run_alive((peer, fetch.run));
        let f = &mut st.rndv.fetches;
        if into.is_none() {
            f.set_slot(slot, index);
        }
        f.reading += 1;
        if fetch.failed {
            // Nothing to read: it ends at once.
            fetch.posted = fetch.n;
        } else if fetch.n > 0 {
            f.queue.push_back(index);
        }
        f.fetches[i as usize] = Some(fetch);
        if st.rndv.fetches.get_mut(index).is_some_and(|f| f.done()) {
            self.fetch_ended(st, index);
        } else {
            self.pump_reads(st);
        }
    }

    /// Posts the next reads in message order while fewer than [`READ_WINDOW`] are in
    /// flight (or [`ONE_MESSAGE_READ_WINDOW`], all of one message, where the sender's
    /// progress serves reads): the message at the head of the line completes first, and
    /// its copy-out overlaps the reads behind it (all at once, they would all end together).
    fn pump_reads(&self, st: &mut State) {
        if self.closing.load(std::sync::atomic::Ordering::Relaxed) {
            // `finalize` waits for the reads in flight (`settle_reads`); no new ones.
            return;
        }
        let served = !self.fab.sends_in_place;
        loop {
            let in_flight = st.rndv.fetches.in_flight;
            let Some(&index) = st.rndv.fetches.queue.front() else {
                return;
            };
            let Some(f) = st.rndv.fetches.get_mut(index).filter(|f| f.posted < f.n) else {
                st.rndv.fetches.queue.pop_front();
                continue;
            };
            let alone = served && f.pending as usize == in_flight;
            if in_flight >= READ_WINDOW && !(alone && in_flight < ONE_MESSAGE_READ_WINDOW) {
                return;
            }
            // A run that is gone (its successor may have the address now) gets no read.
            let (peer, run) = (f.peer, f.run);
            let alive = st.run_alive((peer, run));
            let dest = st.peers[peer as usize].addr;
            let chunks = &st.rndv.fetches.chunks;
            let Some(f) = st.rndv.fetches.fetches[(index & 0xFFFF) as usize].as_mut() else {
                return;
            };
            let k = f.posted as usize;
            let at = k * CHUNK;
            let len = (f.len - at).min(CHUNK);
            let ctx = Context::Read(index).encode();
            // A hostile descriptor's address may overflow: its read fails.
            let remote = f.addr.checked_add(at as u64).filter(|_| alive);
            let posted = match (f.into, remote) {
                (_, None) => Err(mcapi_ofi::Error::InvalidArgument(
                    "the sender's run is gone, or its address overflows",
                )),
                (Some((request, _)), Some(remote)) => match st.requests.get(request) {
                    Ok(Req::Recv {
                        posted: Some(buf), ..
                    }) => self.fab.ep.read_to(buf, at, len, dest, remote, f.key, ctx),
                    _ => Err(mcapi_ofi::Error::InvalidArgument(
                        "the request has no buffer",
                    )),
                },
                (None, Some(remote)) => {
                    let chunk = &chunks[f.chunks[k] as usize];
                    chunk
                        .region
                        .slice(chunk.offset, len)
                        .and_then(|buf| self.fab.ep.read(buf, dest, remote, f.key, ctx))
                }
            };
            match posted {
                Ok(()) => {
                    f.posted += 1;
                    f.pending += 1;
                    st.rndv.fetches.in_flight += 1;
                }
                // The provider's queue is full: the rest later (`advance_fetches`).
                Err(e) if e.is_again() => return,
                Err(e) => {
                    log::info!("a rendezvous read could not be posted: {e}");
                    // The reads not posted never will be.
                    f.failed = true;
                    f.posted = f.n;
                }
            }
            if f.posted == f.n {
                let done = f.pending == 0;
                st.rndv.fetches.queue.pop_front();
                if done {
                    self.fetch_ended(st, index);
                }
            }
        }
    }

    /// Posts reads the window or the provider held back, and starts deferred reads that
    /// now fit.
    pub(super) fn advance_fetches(&self, st: &mut State) {
        if !st.rndv.fetches.queue.is_empty() {
            self.pump_reads(st);
        }
        if self.reads_wait_for_receives(st) {
            return;
        }
        while let Some(&(slot, peer, port)) = st.rndv.fetches.deferred.front() {
            if st.rndv.fetches.state_of(slot) != DEFERRED {
                st.rndv.fetches.deferred.pop_front();
                continue;
            }
            let len = self.descriptor_in(slot).len as usize;
            if !st.rndv.fetches.room_for(len) {
                return;
            }
            st.rndv.fetches.deferred.pop_front();
            self.start_fetch(st, slot, peer, port, None);
            if st.rndv.fetches.state_of(slot) == DEFERRED {
                return;
            }
        }
    }

    /// A read of fetch `index` completed (`ok`) or failed. A message whose read failed is
    /// read again, whole, once its other reads end, while its sender's run lives and
    /// retries remain ([`READ_RETRIES`]); else it ends failed.
    pub(super) fn read_completed(&self, st: &mut State, index: u32, ok: bool) {
        if index == IN_PLACE_READ {
            // Its receive sees the end itself.
            return;
        }
        #[cfg(test)]
        let ok = ok && !st.forced_read_failure();
        let Some(f) = st.rndv.fetches.get_mut(index) else {
            return;
        };
        if f.pending == 0 {
            return;
        }
        f.pending -= 1;
        f.read_failed |= !ok;
        let (done, retry, sender) = (
            f.done(),
            f.read_failed && !f.failed && !f.orphan && f.retries_left > 0,
            (f.peer, f.run),
        );
        st.rndv.fetches.in_flight -= 1;
        if done {
            let retry = retry && st.run_alive(sender);
            let fetches = &mut st.rndv.fetches;
            if let Some(f) = fetches.get_mut(index) {
                if retry {
                    log::info!("a rendezvous read failed; the message is read again");
                    (f.posted, f.read_failed) = (0, false);
                    f.retries_left -= 1;
                    // First in line: it is the oldest message being read.
                    fetches.queue.push_front(index);
                } else {
                    f.failed |= f.read_failed;
                    self.fetch_ended(st, index);
                }
            }
        }
        if !st.rndv.fetches.queue.is_empty() {
            self.pump_reads(st);
        }
    }

    /// A read in place to take as failed (tests: `State::forced_read_failures`).
    #[cfg(test)]
    pub(super) fn forced_read_failure(&self) -> mcapi_ofi::Result<()> {
        match self.live_state().map(|mut st| st.forced_read_failure()) {
            Ok(true) => Err(mcapi_ofi::Error::InvalidArgument("a forced read failure")),
            _ => Ok(()),
        }
    }

    /// At `finalize`: progresses until no read of this node is in flight (new ones are not
    /// posted once it began), at most until `deadline`. tcp;ofi_rxm reports a read whose
    /// reply is arriving as cancelled twice when its connection closes, the second time
    /// with its entry freed, and rxm's endpoint close then follows a NULL context (SIGSEGV
    /// in libfabric 1.17 when the endpoint closed with a read-ahead under way).
    pub(super) fn settle_reads(&self, deadline: std::time::Instant) {
        let mut backoff = self.backoff();
        loop {
            let Ok(mut st) = self.live_state() else {
                return;
            };
            self.progress(&mut st);
            if st.rndv.fetches.in_flight == 0 {
                return;
            }
            drop(st);
            if backoff.wait(Some(deadline)).is_err() {
                return;
            }
        }
    }

    /// Every read of fetch `index` ended: the sender is told (its staging is of no more
    /// use, read or not) and an orphan is freed; deferred reads may start at the end of
    /// this progress pass (`advance_fetches`).
    fn fetch_ended(&self, st: &mut State, index: u32) {
        let Some(f) = st.rndv.fetches.get_mut(index) else {
            return;
        };
        let (peer, run, port, id, orphan) = (f.peer, f.run, f.port, f.id, f.orphan);
        let (into, read) = (f.into, (!f.failed).then_some(f.len));
        st.rndv.fetches.reading -= 1;
        st.rndv.fetches.ended = st.rndv.fetches.ended.wrapping_add(1);
        self.send_rndv_done(st, (peer, run), port, id);
        if orphan {
            st.rndv.fetches.free(index, None);
        }
        if let Some((request, taken)) = into {
            // The provider is done with the request's buffer: it completes, and the
            // descriptor's slot goes back (with the sender's credit) as a taken message's.
            st.rndv.fetches.free(index, None);
            st.set_reading_into(request, false);
            let (status, size) = match read {
                Some(len) => (Status::MCAPI_SUCCESS, len),
                None => (Status::MCAPI_ERR_TRANSMISSION, 0),
            };
            st.requests.complete_if_pending(request, status, size);
            if read.is_some() {
                st.read_in_place += 1;
            }
            if st.taken.is_some() {
                self.repost_taken(st);
            }
            st.taken = Some(taken);
        }
    }

    /// Reads rendezvous messages at the head of `port`'s queue, not read yet, straight into
    /// the buffers of its oldest receive requests where those were posted with one large
    /// enough (and the provider reads into unregistered memory): each such message leaves
    /// its queue, its request leaves the receives pending and completes when the reads end.
    /// Returns whether the message in receive slot `watch` was bound (`None`: whether any
    /// was).
    pub(super) fn bind_posted(&self, st: &mut State, port: u32, watch: Option<u32>) -> bool {
        let mut bound = false;
        if !self.fab.reads_in_place {
            return false;
        }
        while let Some(ep) = st.endpoints.get(&port) {
            let (Some(&request), Some(head)) = (ep.pending_recvs.front(), ep.queue.peek()) else {
                break;
            };
            let head = *head;
            let len = head.len as usize;
            let fits = matches!(st.requests.get(request),
                Ok(Req::Recv { posted: Some(buf), .. }) if buf.len() >= len);
            if !fits
                || !head.rndv
                || head.slot & LOCAL_SLOT != 0
                || len > MAX_MSG_SIZE
                || !st.rndv.fetches.not_started(head.slot)
                || st.reading_into(request)
            {
                break;
            }
            let Some(ep) = st.endpoints.get_mut(&port) else {
                break;
            };
            ep.queue.pop();
            ep.pending_recvs.pop_front();
            let taken = TakenSlot {
                port,
                epoch: ep.epoch,
                slot: head.slot,
                peer: head.peer,
            };
            st.rndv.fetches.undefer(head.slot);
            st.set_reading_into(request, true);
            self.start_fetch(st, head.slot, head.peer, port, Some((request, taken)));
            bound |= watch.is_none_or(|w| w == head.slot);
        }
        bound
    }

    /// The receive that takes the rendezvous message in `slot` (of peer `peer`, for
    /// endpoint `port`) copies it into `out` if its reads are done; starts them if they
    /// wait for room.
    pub(super) fn take_fetched(
        &self,
        st: &mut State,
        slot: u32,
        peer: u16,
        port: u32,
        out: &mut [u8],
    ) -> FetchOutcome {
        let mut index = st.rndv.fetches.state_of(slot);
        if index == DEFERRED || index == NO_FETCH {
            st.rndv.fetches.undefer(slot);
            self.start_fetch(st, slot, peer, port, None);
            index = st.rndv.fetches.state_of(slot);
            if index == DEFERRED {
                // Another receive holds the reserve, or the pool could not be made.
                if st.rndv.fetches.chunks.is_empty() {
                    st.rndv.fetches.undefer(slot);
                    let id = self.descriptor_in(slot).id;
                    self.send_rndv_done(st, (peer, st.arrival_run(slot)), port, id);
                    return FetchOutcome::Failed(Status::MCAPI_ERR_MEM_LIMIT);
                }
                return FetchOutcome::Pending;
            }
        }
        let Some(f) = st.rndv.fetches.get_mut(index) else {
            return FetchOutcome::Failed(Status::MCAPI_ERR_TRANSMISSION);
        };
        if f.done() {
            let failed = f.failed;
            let mut copied = Ok(());
            if !failed {
                let chunks = &st.rndv.fetches.chunks;
                let Some(f) = st.rndv.fetches.fetches[(index & 0xFFFF) as usize].as_ref() else {
                    return FetchOutcome::Failed(Status::MCAPI_ERR_TRANSMISSION);
                };
                for (k, part) in out.chunks_mut(CHUNK).enumerate() {
                    let chunk = &chunks[f.chunks[k] as usize];
                    copied = copied.and(chunk.region.read(chunk.offset, part));
                }
            }
            st.rndv.fetches.free(index, None);
            return match (failed, copied) {
                (true, _) => FetchOutcome::Failed(Status::MCAPI_ERR_TRANSMISSION),
                (false, Ok(())) => FetchOutcome::Copied,
                (false, Err(e)) => FetchOutcome::Failed(ofi_status(e)),
            };
        }
        let (run, id) = (f.run, f.id);
        // The liveness watcher marks a dead peer's link closed without the state lock; its
        // loss is recorded here, as a blocked send does.
        if let Some(link) = st.peers[peer as usize]
            .link
            .as_ref()
            .filter(|l| l.is_closed() && l.incarnation == run)
        {
            let lost = link.incarnation;
            self.peer_event_locked(st, peer, PeerInput::Lost(lost));
        }
        if st.run_alive((peer, run)) {
            return FetchOutcome::Pending;
        }
        // The sender's run is gone: its reads never end.
        st.rndv.fetches.free(index, Some(&self.fab.domain));
        self.send_rndv_done(st, (peer, run), port, id);
        FetchOutcome::Failed(Status::MCAPI_ERR_TRANSMISSION)
    }

    /// Orphaned fetches (their endpoint deleted) from runs of peer `peer` that are gone:
    /// nobody takes them, and where a dead peer's read never ends theirs never would (the
    /// read-ahead budget lost, and every wait polling for them): freed, their chunks
    /// replaced as an abandoned read's are.
    pub(super) fn abandon_orphans_of(&self, st: &mut State, peer: u16) {
        let gone: Vec<u32> = st
            .rndv
            .fetches
            .fetches
            .iter()
            .enumerate()
            .filter_map(|(i, f)| Some((i, f.as_ref()?)))
            .filter(|(_, f)| f.orphan && f.peer == peer && !st.run_alive((peer, f.run)))
            .map(|(i, f)| u32::from(f.generation) << 16 | i as u32)
            .collect();
        for index in gone {
            st.rndv.fetches.free(index, Some(&self.fab.domain));
        }
    }

    /// The rendezvous message in `slot` is discarded with its endpoint: its sender is told
    /// now, or when its reads in flight end.
    pub(super) fn fetch_discarded(&self, st: &mut State, slot: u32, peer: u16, port: u32) {
        let index = st.rndv.fetches.state_of(slot);
        if let Some(f) = st.rndv.fetches.get_mut(index) {
            if f.done() {
                st.rndv.fetches.free(index, None);
            } else {
                f.orphan = true;
                // The slot is posted again now; the reads' end frees the fetch.
                st.rndv.fetches.set_slot(slot, NO_FETCH);
            }
            return;
        }
        st.rndv.fetches.undefer(slot);
        let id = self.descriptor_in(slot).id;
        self.send_rndv_done(st, (peer, st.arrival_run(slot)), port, id);
    }
}
