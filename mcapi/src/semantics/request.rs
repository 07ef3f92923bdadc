//! The bounded table of non-blocking requests (`mcapi_request_t`, spec 3.5.4
//! and 4.6): what `mcapi_test`, `mcapi_wait`, `mcapi_wait_any` and
//! `mcapi_cancel` operate on.
//!
//! Life of a request:
//!
//! ```text
//!  alloc ──► Pending ──complete──► Completed ──test──► CompletedReported
//!               │                     │                      │
//!               └──────cancel─────────┴──────────────────────┴──► Cancelled
//!  take_completed (wait): Completed/CompletedReported ─► released, Ok(Some(..))
//!                          Cancelled                  ─► released, Err(CANCELLED)
//! ```
//!
//! `CompletedReported` and `Cancelled` slots are *reclaimable*: the spec says
//! only wait/wait_any/cancel release a request, but many programs reuse a
//! request after `mcapi_test` reported completion without ever waiting, and
//! cancelled requests are released by definition (4.6.4). When the table is
//! full, [`RequestTable::alloc`] recycles the oldest reclaimable slot that no
//! one is waiting on instead of failing with `MCAPI_ERR_REQUEST_LIMIT`.
//!
//! The table allocates only in [`RequestTable::new`].

use super::check16;
use super::status::Status;
use std::collections::VecDeque;
use std::fmt;

/// Most slots a table can have (the handle's index field is 24 bits).
pub const MAX_REQUESTS: usize = 1 << INDEX_BITS;

const INDEX_BITS: u32 = 24;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;
const GEN_MASK: u32 = (1 << 24) - 1;
const CHECK_SHIFT: u32 = 48;
/// Salt of [`check16`] for request handles (differs from endpoint ids').
const SALT: u64 = 0x6D63_6170_6952_6571; // "mcapiReq"

/// A request handle: slot index (bits 0..24), slot generation (24..48) and a
/// check field (48..64).
///
/// Any `u64` may be turned into a handle; the table validates it on every use,
/// so garbage, a released handle or a stale one whose slot was reused reads as
/// `MCAPI_ERR_REQUEST_INVALID` and never aliases another request. (A stale
/// handle could alias only after its slot was reused 2^24 times.)
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestHandle(u64);

impl RequestHandle {
    /// Wraps a raw value (e.g. a `mcapi_request_t` from C) without validating it.
    pub const fn from_raw(raw: u64) -> RequestHandle {
        RequestHandle(raw)
    }

    /// The raw value to hand out as `mcapi_request_t`.
    pub const fn as_raw(self) -> u64 {
        self.0
    }

    fn new(index: usize, generation: u32) -> RequestHandle {
        let payload = ((generation as u64) << INDEX_BITS) | index as u64;
        RequestHandle(payload | (check16(payload, SALT) as u64) << CHECK_SHIFT)
    }

    /// `(index, generation)` if the check field matches.
    fn split(self) -> Option<(usize, u32)> {
        if (self.0 >> CHECK_SHIFT) as u16 != check16(self.0, SALT) {
            return None;
        }
        Some((
            (self.0 & INDEX_MASK) as usize,
            (self.0 >> INDEX_BITS) as u32 & GEN_MASK,
        ))
    }
}

impl fmt::Debug for RequestHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RequestHandle({:#018x})", self.0)
    }
}

/// Where a live request stands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RequestState {
    /// The operation is under way.
    Pending,
    /// Finished with `status` (the operation's own result, e.g.
    /// `MCAPI_ERR_MSG_TRUNCATED`) and `size` bytes; not yet reported.
    Completed {
        /// The operation's result.
        status: Status,
        /// Bytes sent or received.
        size: usize,
    },
    /// Like `Completed`, and `test()` has said so; reclaimable.
    CompletedReported {
        /// The operation's result.
        status: Status,
        /// Bytes sent or received.
        size: usize,
    },
    /// Cancelled: a tombstone kept so a waiter learns
    /// `MCAPI_ERR_REQUEST_CANCELLED`; reclaimable.
    Cancelled,
}

/// What `wait` hands back for a finished request.
#[derive(Debug, PartialEq, Eq)]
pub struct Completion<T> {
    /// The operation's result (`MCAPI_SUCCESS` or its error).
    pub status: Status,
    /// Bytes sent or received.
    pub size: usize,
    /// The driver's payload, returned now that the slot is released.
    pub payload: T,
}

#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    /// `None` when the slot is free.
    state: Option<RequestState>,
    /// `None` when free or cancelled (cancel hands the payload back).
    payload: Option<T>,
    /// A `wait` is in progress (spec: a second waiter is an error).
    waiter: bool,
    /// Logical time the slot became reclaimable; the oldest goes first.
    stamp: u64,
}

/// A bounded table of requests, each carrying a driver-owned payload `T`.
#[derive(Debug)]
pub struct RequestTable<T> {
    slots: Vec<Slot<T>>,
    /// Free slot indices, used as a stack (hot slots stay in cache).
    free: Vec<u32>,
    /// Slots that became reclaimable, oldest first, with their stamps; an entry whose
    /// slot changed since (stamp differs) is stale and skipped. Compacted when full, so
    /// it never grows past twice the capacity.
    reclaimable: VecDeque<(u32, u64)>,
    /// Counter ordering reclaimable slots; not a clock.
    ticks: u64,
}

impl<T> RequestTable<T> {
    /// A table of `capacity` requests; all memory is allocated here.
    ///
    /// # Panics
    /// If `capacity > MAX_REQUESTS`.
    pub fn new(capacity: usize) -> RequestTable<T> {
        assert!(
            capacity <= MAX_REQUESTS,
            "request table capacity {capacity} too large"
        );
        let generation = super::first_generation();
        let slots = (0..capacity)
            .map(|_| Slot {
                generation,
                state: None,
                payload: None,
                waiter: false,
                stamp: 0,
            })
            .collect();
        // Reversed so that slot 0 is handed out first.
        let free = (0..capacity as u32).rev().collect();
        RequestTable {
            slots,
            free,
            reclaimable: VecDeque::with_capacity(2 * capacity + 1),
            ticks: 0,
        }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Slots in use, counting reclaimable ones.
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Whether [`alloc`](Self::alloc) would succeed now: a slot is free or reclaimable.
    /// For callers that must know before they change anything else; reclaims nothing.
    pub fn has_room(&self) -> bool {
        !self.free.is_empty()
            || self.reclaimable.iter().any(|&(i, stamp)| {
                let slot = &self.slots[i as usize];
                !slot.waiter && Self::is_reclaimable(slot, stamp)
            })
    }

    /// `true` if no slot is in use.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Starts a request in state `Pending`.
    ///
    /// # Errors
    /// `MCAPI_ERR_REQUEST_LIMIT` if every slot is in use and none is
    /// reclaimable; `payload` is then dropped. Reclaiming drops the old
    /// slot's payload and bumps its generation, so its handle reads as invalid.
    pub fn alloc(&mut self, payload: T) -> Result<RequestHandle, Status> {
        self.alloc_in(payload, RequestState::Pending)
    }

    /// [`alloc`](Self::alloc) of a request starting in `state`.
    #[inline]
    fn alloc_in(&mut self, payload: T, state: RequestState) -> Result<RequestHandle, Status> {
        let index = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                let i = self
                    .oldest_reclaimable()
                    .ok_or(Status::MCAPI_ERR_REQUEST_LIMIT)?;
                self.release_slot(i);
                self.free.pop();
                i
            }
        };
        let slot = &mut self.slots[index];
        slot.state = Some(state);
        slot.payload = Some(payload);
        Ok(RequestHandle::new(index, slot.generation))
    }

    /// Starts a request that is already complete with `status` and `size` bytes: an `_i`
    /// call that failed at once still hands out a request reporting its error (the MCA
    /// reference implementation's reading, `MCAPI_COMPAT=mca`), and one that finished within
    /// the call hands out one reporting its success. It is tested, waited on and reclaimed as
    /// any completed request.
    ///
    /// # Errors
    /// `MCAPI_ERR_PARAMETER` for `MCAPI_PENDING` (a complete request has a final status);
    /// otherwise as [`alloc`](Self::alloc).
    pub fn alloc_completed(
        &mut self,
        payload: T,
        status: Status,
        size: usize,
    ) -> Result<RequestHandle, Status> {
        if status == Status::MCAPI_PENDING {
            return Err(Status::MCAPI_ERR_PARAMETER);
        }
        self.alloc_in(payload, RequestState::Completed { status, size })
    }

    /// The state of a live request.
    ///
    /// # Errors
    /// `MCAPI_ERR_REQUEST_INVALID` for an invalid, stale or released handle.
    pub fn state(&self, handle: RequestHandle) -> Result<RequestState, Status> {
        let i = self.index(handle)?;
        Ok(self.slots[i].state.expect("live slot has a state"))
    }

    /// The payload of a live, not cancelled request.
    ///
    /// # Errors
    /// `MCAPI_ERR_REQUEST_INVALID` if the handle is not live or was cancelled
    /// (cancel gave the payload back).
    pub fn get(&self, handle: RequestHandle) -> Result<&T, Status> {
        let i = self.index(handle)?;
        self.slots[i]
            .payload
            .as_ref()
            .ok_or(Status::MCAPI_ERR_REQUEST_INVALID)
    }

    /// Mutable access to the payload, as [`get`](Self::get).
    ///
    /// # Errors
    /// As [`get`](Self::get).
    pub fn get_mut(&mut self, handle: RequestHandle) -> Result<&mut T, Status> {
        let i = self.index(handle)?;
        self.slots[i]
            .payload
            .as_mut()
            .ok_or(Status::MCAPI_ERR_REQUEST_INVALID)
    }

    /// [`RequestTable::complete`] for a driver whose result has nowhere else to go: a
    /// request cancelled or released meanwhile is simply no longer there (a cancelled
    /// request already reports its cancel). A second completion of one request is a driver
    /// bug, caught in debug builds.
    pub fn complete_if_pending(&mut self, handle: RequestHandle, status: Status, size: usize) {
        let r = self.complete(handle, status, size);
        debug_assert_ne!(
            r,
            Err(Status::MCAPI_ERR_GENERAL),
            "{handle:?} completed twice"
        );
    }

    /// Records that the operation finished with `status` and `size` bytes.
    /// Called by the driver when the transport completes the operation.
    ///
    /// # Errors
    /// `MCAPI_ERR_REQUEST_INVALID` for a dead handle; `MCAPI_ERR_REQUEST_CANCELLED`
    /// if it was cancelled meanwhile (the driver must undo or drop the result);
    /// `MCAPI_ERR_PARAMETER` if `status` is `MCAPI_PENDING`; `MCAPI_ERR_GENERAL`
    /// if it had already completed (a driver bug).
    pub fn complete(
        &mut self,
        handle: RequestHandle,
        status: Status,
        size: usize,
    ) -> Result<(), Status> {
        let i = self.index(handle)?;
        if status == Status::MCAPI_PENDING {
            return Err(Status::MCAPI_ERR_PARAMETER);
        }
        let state = self.slots[i].state.as_mut().expect("live slot has a state");
        match state {
            RequestState::Pending => {
                *state = RequestState::Completed { status, size };
                Ok(())
            }
            RequestState::Cancelled => Err(Status::MCAPI_ERR_REQUEST_CANCELLED),
            _ => Err(Status::MCAPI_ERR_GENERAL),
        }
    }

    /// `mcapi_test` (spec 4.6.1): `Ok(None)` while pending, else
    /// `Ok(Some((status, size)))` with the operation's own status. Does not
    /// release the request, but marks it reclaimable by [`alloc`](Self::alloc).
    ///
    /// # Errors
    /// `MCAPI_ERR_REQUEST_INVALID` for a dead handle and, as the spec says, for
    /// a cancelled one (the tombstone stays for a waiter).
    pub fn test(&mut self, handle: RequestHandle) -> Result<Option<(Status, usize)>, Status> {
        let i = self.index(handle)?;
        let tick = self.tick();
        let slot = &mut self.slots[i];
        match slot.state.expect("live slot has a state") {
            RequestState::Pending => Ok(None),
            RequestState::Completed { status, size } => {
                slot.state = Some(RequestState::CompletedReported { status, size });
                slot.stamp = tick;
                self.note_reclaimable(i, tick);
                Ok(Some((status, size)))
            }
            RequestState::CompletedReported { status, size } => Ok(Some((status, size))),
            RequestState::Cancelled => Err(Status::MCAPI_ERR_REQUEST_INVALID),
        }
    }

    /// Registers the caller as the request's one waiter (`mcapi_wait`,
    /// `mcapi_wait_any`). While registered, the slot is never reclaimed.
    ///
    /// # Errors
    /// `MCAPI_ERR_REQUEST_INVALID` for a dead handle; `MCAPI_ERR_WAIT_PENDING`
    /// if another wait is in progress (spec 3.5.4).
    pub fn begin_wait(&mut self, handle: RequestHandle) -> Result<(), Status> {
        let i = self.index(handle)?;
        let slot = &mut self.slots[i];
        if slot.waiter {
            return Err(Status::MCAPI_ERR_WAIT_PENDING);
        }
        slot.waiter = true;
        Ok(())
    }

    /// [`begin_wait`](Self::begin_wait) and [`take_completed`](Self::take_completed) in
    /// one look: a request that completed (or was cancelled) is taken at once, as a wait
    /// would take it, without registering the waiter; a pending one gets the waiter
    /// (`Ok(None)`).
    ///
    /// # Errors
    /// As [`begin_wait`](Self::begin_wait), then as
    /// [`take_completed`](Self::take_completed).
    pub fn begin_wait_or_take(
        &mut self,
        handle: RequestHandle,
    ) -> Result<Option<Completion<T>>, Status> {
        let i = self.index(handle)?;
        let slot = &mut self.slots[i];
        if slot.waiter {
            return Err(Status::MCAPI_ERR_WAIT_PENDING);
        }
        if slot.state == Some(RequestState::Pending) {
            slot.waiter = true;
            return Ok(None);
        }
        self.take_completed(handle)
    }

    /// Unregisters the waiter without releasing the request: a wait that timed
    /// out leaves the request to be waited on again (spec 4.6.2).
    /// Not needed after [`take_completed`](Self::take_completed) released it.
    ///
    /// # Errors
    /// `MCAPI_ERR_REQUEST_INVALID` for a dead handle.
    pub fn end_wait(&mut self, handle: RequestHandle) -> Result<(), Status> {
        let i = self.index(handle)?;
        self.slots[i].waiter = false;
        Ok(())
    }

    /// The wait step: `Ok(None)` while pending (keep waiting); a completed
    /// request is released and returned with its payload.
    ///
    /// # Errors
    /// `MCAPI_ERR_REQUEST_INVALID` for a dead handle (including a cancelled
    /// one whose tombstone was already consumed or reclaimed);
    /// `MCAPI_ERR_REQUEST_CANCELLED` for a cancelled one, whose tombstone this
    /// consumes (spec 4.6.2).
    pub fn take_completed(
        &mut self,
        handle: RequestHandle,
    ) -> Result<Option<Completion<T>>, Status> {
        let i = self.index(handle)?;
        match self.slots[i].state.expect("live slot has a state") {
            RequestState::Pending => Ok(None),
            RequestState::Completed { status, size }
            | RequestState::CompletedReported { status, size } => {
                let payload = self
                    .release_slot(i)
                    .expect("completed slot has its payload");
                Ok(Some(Completion {
                    status,
                    size,
                    payload,
                }))
            }
            RequestState::Cancelled => {
                self.release_slot(i);
                Err(Status::MCAPI_ERR_REQUEST_CANCELLED)
            }
        }
    }

    /// The `mcapi_wait_any` scan: the index in `handles` of the first request
    /// that is completed or cancelled, `Ok(None)` if all are pending. The
    /// caller then calls [`take_completed`](Self::take_completed) on it.
    ///
    /// # Errors
    /// `MCAPI_ERR_PARAMETER` if `handles` is empty (spec 4.6.3: number = 0);
    /// `MCAPI_ERR_REQUEST_INVALID` if any handle is dead (all are checked first,
    /// so the result does not depend on completion order).
    pub fn find_ready(&self, handles: &[RequestHandle]) -> Result<Option<usize>, Status> {
        if handles.is_empty() {
            return Err(Status::MCAPI_ERR_PARAMETER);
        }
        for &h in handles {
            self.index(h)?;
        }
        Ok(handles
            .iter()
            .position(|&h| !matches!(self.state(h), Ok(RequestState::Pending))))
    }

    /// `mcapi_cancel` (spec 4.6.4) on a pending request, or one whose completion
    /// `test` reported (cancel then only releases it): it becomes a `Cancelled`
    /// tombstone and its payload is returned so the driver can cancel the transport
    /// operation. A completion nobody was told of is not cancelled (spec: "the
    /// operation may have completed"): a receive's message would be lost with it, and
    /// a send has gone.
    ///
    /// The request counts as released: `test` then reports
    /// `MCAPI_ERR_REQUEST_INVALID`, and the slot may be reclaimed by `alloc`.
    /// Until then a waiter, present or later, gets `MCAPI_ERR_REQUEST_CANCELLED`
    /// from [`take_completed`](Self::take_completed), which frees the slot.
    /// A tombstone with a registered waiter is never reclaimed.
    ///
    /// # Errors
    /// `MCAPI_ERR_REQUEST_INVALID` for a dead or already cancelled handle, and for a
    /// completion not yet reported (it is waited on or tested as usual).
    pub fn cancel(&mut self, handle: RequestHandle) -> Result<T, Status> {
        let i = self.index(handle)?;
        if matches!(self.slots[i].state, Some(RequestState::Completed { .. })) {
            return Err(Status::MCAPI_ERR_REQUEST_INVALID);
        }
        let tick = self.tick();
        let slot = &mut self.slots[i];
        let payload = slot
            .payload
            .take()
            .ok_or(Status::MCAPI_ERR_REQUEST_INVALID)?;
        slot.state = Some(RequestState::Cancelled);
        slot.stamp = tick;
        self.note_reclaimable(i, tick);
        Ok(payload)
    }

    /// Frees a live request unconditionally (e.g. the `_i` call failed after
    /// allocating), returning its payload unless it was cancelled.
    ///
    /// # Errors
    /// `MCAPI_ERR_REQUEST_INVALID` for a dead handle.
    pub fn release(&mut self, handle: RequestHandle) -> Result<Option<T>, Status> {
        let i = self.index(handle)?;
        Ok(self.release_slot(i))
    }

    /// Validates a handle: check field, index in range, same generation, live.
    fn index(&self, handle: RequestHandle) -> Result<usize, Status> {
        let (i, generation) = handle.split().ok_or(Status::MCAPI_ERR_REQUEST_INVALID)?;
        match self.slots.get(i) {
            Some(s) if s.generation == generation && s.state.is_some() => Ok(i),
            _ => Err(Status::MCAPI_ERR_REQUEST_INVALID),
        }
    }

    fn tick(&mut self) -> u64 {
        self.ticks += 1;
        self.ticks
    }

    /// Slot `i` became reclaimable at `stamp`.
    fn note_reclaimable(&mut self, i: usize, stamp: u64) {
        if self.reclaimable.len() == self.reclaimable.capacity() {
            let slots = &self.slots;
            self.reclaimable
                .retain(|&(i, stamp)| Self::is_reclaimable(&slots[i as usize], stamp));
        }
        self.reclaimable.push_back((i as u32, stamp));
    }

    fn is_reclaimable(slot: &Slot<T>, stamp: u64) -> bool {
        slot.stamp == stamp
            && matches!(
                slot.state,
                Some(RequestState::CompletedReported { .. } | RequestState::Cancelled)
            )
    }

    /// The reclaimable slot with the oldest stamp and no waiter (taken off the list);
    /// stale entries ahead of it are dropped. Only run when the table is full.
    fn oldest_reclaimable(&mut self) -> Option<usize> {
        while let Some(&(i, stamp)) = self.reclaimable.front() {
            if Self::is_reclaimable(&self.slots[i as usize], stamp) {
                break;
            }
            self.reclaimable.pop_front();
        }
        let k = self.reclaimable.iter().position(|&(i, stamp)| {
            let slot = &self.slots[i as usize];
            !slot.waiter && Self::is_reclaimable(slot, stamp)
        })?;
        self.reclaimable.remove(k).map(|(i, _)| i as usize)
    }

    /// Frees slot `i`: bumps the generation so old handles die.
    fn release_slot(&mut self, i: usize) -> Option<T> {
        let slot = &mut self.slots[i];
        slot.generation = (slot.generation + 1) & GEN_MASK;
        slot.state = None;
        slot.waiter = false;
        self.free.push(i as u32);
        slot.payload.take()
    }
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
