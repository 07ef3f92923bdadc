//! Non-blocking lookups and the request calls (spec 4.2.3, 4.6).

use super::channel::ChanReq;
use super::common::Result;
use super::state::{Req, State};
use super::Node;
use crate::semantics::endpoint_id::EndpointId;
use crate::semantics::request::{RequestHandle, RequestState};
use crate::semantics::Status;
use mcapi_ofi::RecvBuffer;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

impl Node {
    /// `mcapi_endpoint_get_i`: a request that completes once endpoint `<domain, node, port>`
    /// exists (checked each time it is tested or waited on). The endpoint value is
    /// `EndpointId::encode(domain, node, port)`.
    ///
    /// # Errors
    /// `MCAPI_ERR_DOMAIN_INVALID`, `MCAPI_ERR_NODE_INVALID`, `MCAPI_ERR_PORT_INVALID`,
    /// `MCAPI_ERR_REQUEST_LIMIT`.
    pub fn endpoint_get_i(&self, domain: u32, node: u32, port: u32) -> Result<RequestHandle> {
        // (A finalized node says so first.)
        drop(self.inner.live_state()?);
        let id = EndpointId::encode(domain, node, port)?;
        // A node that is not in the job never will be: refused before any request exists
        // (spec 4.2.2: on error only the status is set).
        let ours = (domain, node) == (self.inner.domain_id, self.inner.node_id);
        if !ours && crate::control::Rendezvous::of(&self.inner.config, domain, node).is_none() {
            return Err(Status::MCAPI_ERR_NODE_INVALID);
        }
        self.inner.live_state()?.requests.alloc(Req::Get { id })
    }

    /// A request already complete with `status`: what an `_i` call that failed at once hands
    /// out in `MCAPI_COMPAT=mca` mode, so that `test`/`wait`/`wait_any` on it report the
    /// error (the MCA reference implementation's reading; docs/c-abi.md).
    ///
    /// # Errors
    /// `MCAPI_ERR_REQUEST_LIMIT` when no slot is free or reclaimable (the caller then reports
    /// the original error alone), `MCAPI_ERR_PARAMETER` for `MCAPI_PENDING`.
    pub fn failed_request(&self, status: Status) -> Result<RequestHandle> {
        let mut st = self.inner.live_state()?;
        let request = st.requests.alloc_completed(Req::Failed, status, 0)?;
        // The call reported its error already: a cancel releases the request, and one
        // nobody waits on is reclaimed when the table is full.
        _ = st.requests.test(request);
        Ok(request)
    }

    /// What `mcapi_display_state` prints: the node, its mode, its endpoints (port, messages
    /// queued, receives pending, connected to a channel) and the requests in use.
    ///
    /// # Errors
    /// `MCAPI_ERR_NODE_NOTINIT` after finalize.
    pub fn describe(&self) -> Result<String> {
        use std::fmt::Write;
        let st = self.inner.live_state()?;
        let mut text = format!(
            "mcapi node <{}, {}> ({:?} mode): {} endpoints, {} of {} requests in use",
            self.inner.domain_id,
            self.inner.node_id,
            self.compat(),
            st.endpoints.len(),
            st.requests.len(),
            st.requests.capacity(),
        );
        let mut ports: Vec<_> = st.endpoints.iter().collect();
        ports.sort_by_key(|(port, _)| **port);
        for (port, ep) in ports {
            let _ = write!(
                text,
                "\n  port {port}: {} queued, {} receives pending{}",
                ep.queue.len(),
                ep.pending_recvs.len(),
                if ep.channel.is_connected() {
                    ", channel connected"
                } else {
                    ""
                }
            );
        }
        Ok(text)
    }

    /// One non-blocking attempt to complete a pending `endpoint_get_i` request.
    pub(super) fn poll_get(&self, request: RequestHandle) -> Result<()> {
        let id = {
            let st = self.inner.live_state()?;
            match (st.requests.state(request), st.requests.get(request)) {
                (Ok(RequestState::Pending), Ok(&Req::Get { id })) => id,
                _ => return Ok(()),
            }
        };
        let found = if (id.domain(), id.node()) == (self.inner.domain_id, self.inner.node_id) {
            Ok(self.inner.live_state()?.endpoints.contains_key(&id.port()))
        } else {
            match self.resolve_remote(id, Some(Instant::now())) {
                Ok(_) => Ok(true),
                // No such node in the job (not in the topology, no key under PMIx): it
                // never will be, unlike an endpoint not created yet or a node not up yet.
                Err(Status::MCAPI_ERR_NODE_INVALID) => Err(Status::MCAPI_ERR_NODE_INVALID),
                Err(_) => Ok(false),
            }
        };
        let status = match found {
            Ok(false) => return Ok(()),
            Ok(true) => Status::MCAPI_SUCCESS,
            Err(e) => e,
        };
        self.inner
            .live_state()?
            .requests
            .complete_if_pending(request, status, 0);
        Ok(())
    }

    /// `mcapi_test`: `Ok(Some(size))` once the request completed (for a receive, the
    /// message is copied into `buf`), `Ok(None)` while pending.
    ///
    /// # Errors
    /// `MCAPI_ERR_REQUEST_INVALID` (unknown, released or cancelled request), the
    /// operation's own error (e.g. `MCAPI_ERR_MSG_TRUNCATED`), `MCAPI_ERR_PARAMETER` for a
    /// receive tested without a buffer.
    pub fn test(&self, request: RequestHandle, buf: Option<&mut [u8]>) -> Result<Option<usize>> {
        let node_progress = self.drive_pending(request)?;
        let mut st = self.inner.live_state()?;
        if node_progress {
            self.inner.progress(&mut st);
        }
        // Where the reader's process makes the read (shm), reading in place is this call's
        // own copy, with nothing to wait for from the sender: a test may do it too.
        let mut st = if self.inner.fab.sends_in_place {
            self.complete_waited(st, request, buf)?
        } else {
            self.inner.try_complete(&mut st, request, buf)?;
            st
        };
        match st.requests.test(request)? {
            None => Ok(None),
            Some((Status::MCAPI_SUCCESS, size)) => Ok(Some(size)),
            Some((status, _)) => Err(status),
        }
    }

    /// `mcapi_wait`: blocks until the request completes (then releases it), is cancelled
    /// (`MCAPI_ERR_REQUEST_CANCELLED`) or `timeout` passes (`MCAPI_TIMEOUT`; the request
    /// stays valid). Returns the size transferred.
    ///
    /// # Errors
    /// `MCAPI_ERR_WAIT_PENDING` if another thread waits on it, as [`Node::test`] otherwise.
    pub fn wait(
        &self,
        request: RequestHandle,
        buf: Option<&mut [u8]>,
        timeout: Option<Duration>,
    ) -> Result<usize> {
        self.wait_outcome(request, buf, timeout)?
    }

    /// [`Node::wait`] telling apart a wait that ended without the request (the outer error:
    /// `MCAPI_TIMEOUT`, `MCAPI_ERR_WAIT_PENDING`, `MCAPI_ERR_REQUEST_INVALID`...; the request,
    /// if any, stays valid) from a request that finished and was released (`Ok`, with the
    /// operation's own outcome, such as `MCAPI_ERR_MSG_TRUNCATED` or
    /// `MCAPI_ERR_REQUEST_CANCELLED`). `MCAPI_COMPAT=mca` reports the two differently.
    ///
    /// # Errors
    /// As [`Node::wait`], for the wait itself.
    pub fn wait_outcome(
        &self,
        request: RequestHandle,
        buf: Option<&mut [u8]>,
        timeout: Option<Duration>,
    ) -> Result<Result<usize>> {
        // A request that completed already is taken at once, without driving anything
        // (a sender reaping its completed sends reads no CQ) and before the wait's set-up.
        let mut st = self.inner.live_state()?;
        if let Some(done) = taken(st.requests.begin_wait_or_take(request))? {
            return Ok(done);
        }
        // A receive that waits with its buffer reads a rendezvous message in place: one
        // arriving at the head of its queue meanwhile is not read ahead (as for `msg_recv`).
        let waited_port = match st.requests.get(request) {
            Ok(&Req::Recv {
                port, ref posted, ..
            }) if (buf.is_some() || posted.is_some()) && self.inner.fab.reads_in_place => {
                st.waiting_receives.enter(port);
                Some(port)
            }
            _ => None,
        };
        self.wait_for(st, request, (buf, waited_port), timeout, &mut None)
    }

    /// [`Node::wait`] for a receive posted with its buffer ([`Node::msg_recv_i_into`]):
    /// returns the message's size and the buffer, holding the message, to be read or
    /// posted again.
    ///
    /// # Errors
    /// As [`Node::wait`]; `MCAPI_ERR_PARAMETER` for a request that holds no buffer (it
    /// stays valid). A receive that failed (`MCAPI_ERR_MSG_TRUNCATED`...) is released and
    /// its buffer dropped.
    pub fn wait_into(
        &self,
        request: RequestHandle,
        timeout: Option<Duration>,
    ) -> Result<(usize, RecvBuffer)> {
        let mut st = self.inner.live_state()?;
        let port = match st.requests.get(request)? {
            &Req::Recv {
                port,
                posted: Some(_),
                ..
            } => port,
            _ => return Err(Status::MCAPI_ERR_PARAMETER),
        };
        st.requests.begin_wait(request)?;
        if self.inner.fab.reads_in_place {
            st.waiting_receives.enter(port);
        }
        let waited_port = self.inner.fab.reads_in_place.then_some(port);
        let mut back = None;
        let size = self.wait_for(st, request, (None, waited_port), timeout, &mut back)??;
        Ok((size, back.ok_or(Status::MCAPI_ERR_GENERAL)?))
    }

    /// The loop of [`Node::wait_outcome`] (the wait begun; a receive counted as waiting on
    /// `waited_port` stops counting when the wait ends).
    fn wait_for<'n>(
        &'n self,
        mut st: MutexGuard<'n, State>,
        request: RequestHandle,
        (mut buf, waited_port): (Option<&mut [u8]>, Option<u32>),
        timeout: Option<Duration>,
        back: &mut Option<RecvBuffer>,
    ) -> Result<Result<usize>> {
        // A zero timeout looks once: no clock to read (the zero-copy sender's poll).
        let look_once = timeout == Some(Duration::ZERO);
        let deadline = timeout
            .filter(|_| !look_once)
            .and_then(|t| Instant::now().checked_add(t));
        let mut backoff = self.inner.backoff();
        let mut own_side = None;
        loop {
            let outcome = match self.look(st, request, buf.as_deref_mut(), waited_port, back) {
                Ok(Some(done)) => return Ok(done),
                Ok(None) if look_once => Err(Status::MCAPI_TIMEOUT),
                Ok(None) => {
                    let own = own_side.get_or_insert_with(|| self.transfer_sides(&[request]));
                    self.progress_busy_sides(own, &mut backoff);
                    let own = &*own;
                    backoff.wait_on_unless(
                        deadline,
                        || self.request_cqs(&[request]),
                        || self.hub_inboxes_hold(own),
                    )
                }
                Err(e) => Err(e),
            };
            if let Err(e) = outcome {
                // Whatever ended the wait, the request may be waited on again (a completed
                // one is released already).
                if let Ok(mut st) = self.inner.live_state() {
                    let _ = st.requests.end_wait(request);
                    if let Some(port) = waited_port {
                        self.inner.receive_left(&mut st, port);
                    }
                }
                return Err(e);
            }
            st = self.inner.live_state()?;
        }
    }

    /// One look of a waiter (holding `st`) at `request`: a request that completed already is
    /// taken (released) without driving anything, so a sender reaping its completed sends
    /// reads no CQ; otherwise what it waits for is driven and it is looked at again.
    /// `Ok(None)`: still pending; `Ok(Some(outcome))`: finished and released (a cancelled
    /// request's outcome is `MCAPI_ERR_REQUEST_CANCELLED`). A receive counted as waiting on
    /// `waited_port` stops counting when it finished; one posted with its buffer hands it
    /// `back` when it finished successfully.
    fn look(
        &self,
        mut st: MutexGuard<'_, State>,
        request: RequestHandle,
        buf: Option<&mut [u8]>,
        waited_port: Option<u32>,
        back: &mut Option<RecvBuffer>,
    ) -> Result<Option<Result<usize>>> {
        let mut finished = |st: &mut State| {
            let mut took = st.requests.take_completed(request);
            if let Ok(Some(done)) = &mut took {
                if let Req::Recv { posted, .. } = &mut done.payload {
                    *back = posted
                        .take()
                        .filter(|_| done.status == Status::MCAPI_SUCCESS);
                }
            }
            let done = taken(took);
            if let (Ok(Some(_)), Some(port)) = (&done, waited_port) {
                self.inner.receive_left(st, port);
            }
            done
        };
        if let Some(done) = finished(&mut st)? {
            return Ok(Some(done));
        }
        let payload = st.requests.get(request)?;
        let node_progress = needs_node_progress(payload);
        let drive = Drive::of(payload);
        drop(st);
        self.drive(request, drive)?;
        let mut st = self.inner.live_state()?;
        if node_progress {
            self.inner.progress(&mut st);
        }
        let mut st = self.complete_waited(st, request, buf)?;
        finished(&mut st)
    }

    /// [`NodeInner::try_complete`] for a waiter, which may block (or a test where the read
    /// is the caller's own copy, shm): a rendezvous message at the head of the receive's
    /// queue that nothing reads yet is read straight into `buf` (where the provider allows,
    /// as a blocking `msg_recv` does), without the state lock meanwhile, and the request
    /// completes with the read.
    fn complete_waited<'n>(
        &'n self,
        mut st: MutexGuard<'n, State>,
        request: RequestHandle,
        buf: Option<&mut [u8]>,
    ) -> Result<MutexGuard<'n, State>> {
        // (Not while its message is being read into the buffer: it completes with the read.)
        if buf.is_none() && !st.reading_into(request) {
            if let Some(mut own) = st.take_posted(request) {
                if own.reading() {
                    // Never (see above): it completes with the read.
                    st.restore_posted(request, own);
                    return Ok(st);
                }
                // Posted with its buffer: waited on with it.
                let done = self.complete_waited(st, request, own.as_mut_slice());
                let mut st = match done {
                    Ok(st) => st,
                    Err(e) => {
                        self.inner.live_state()?.restore_posted(request, own);
                        return Err(e);
                    }
                };
                st.restore_posted(request, own);
                return Ok(st);
            }
        }
        let (port, buf) = match (st.requests.get(request), buf) {
            (Ok(&Req::Recv { port, .. }), Some(buf)) if self.inner.fab.reads_in_place => {
                (port, buf)
            }
            (_, buf) => {
                self.inner.try_complete(&mut st, request, buf)?;
                return Ok(st);
            }
        };
        st.receiving_in_place = Some(port);
        let tried = self.inner.try_complete(&mut st, request, Some(&mut *buf));
        st.receiving_in_place = None;
        tried?;
        let Some(read) = st.in_place_read.take() else {
            return Ok(st);
        };
        // The message is off its queue and the request still first on its endpoint (the
        // receives behind it wait): nothing may cancel it now.
        st.set_reading_into(request, true);
        drop(st);
        let (status, size) = match self.read_in_place(read, buf) {
            Ok(n) => (Status::MCAPI_SUCCESS, n),
            Err(e) => (e, 0),
        };
        let mut st = self.inner.live_state()?;
        st.set_reading_into(request, false);
        st.requests.complete(request, status, size)?;
        if let Some(ep) = st.endpoints.get_mut(&port) {
            if ep.pending_recvs.front() == Some(&request) {
                ep.pending_recvs.pop_front();
            }
        }
        Ok(st)
    }

    /// `mcapi_wait_any`: waits until one of `requests` completes; returns its index and
    /// size and releases it. Receives among them get no buffer here: use [`Node::wait`]
    /// or [`Node::wait_any_into`] for receives whose data is wanted.
    ///
    /// # Errors
    /// `MCAPI_ERR_PARAMETER` (empty list), `MCAPI_ERR_REQUEST_INVALID`, `MCAPI_TIMEOUT`, or
    /// the completed operation's own error.
    pub fn wait_any(
        &self,
        requests: &[RequestHandle],
        timeout: Option<Duration>,
    ) -> Result<(usize, usize)> {
        let (index, outcome) = self.wait_any_into(requests, &mut [], timeout)?;
        outcome.map(|size| (index, size))
    }

    /// `mcapi_wait_any` with receive buffers: `buffers[i]`, when present, is where receive
    /// request `requests[i]` puts its message (the C ABI's `mcapi_msg_recv_i` buffers).
    /// Returns the index of the request that finished and its outcome (size, or the
    /// operation's error such as `MCAPI_ERR_MSG_TRUNCATED` or
    /// `MCAPI_ERR_REQUEST_CANCELLED`); that request is released either way, so the caller
    /// always learns which one it was.
    ///
    /// # Errors
    /// `MCAPI_ERR_PARAMETER` (empty list), `MCAPI_ERR_REQUEST_INVALID` (every handle is
    /// checked before any receive takes a message), `MCAPI_TIMEOUT`.
    pub fn wait_any_into(
        &self,
        requests: &[RequestHandle],
        buffers: &mut [Option<&mut [u8]>],
        timeout: Option<Duration>,
    ) -> Result<(usize, Result<usize>)> {
        // The one waiter of each (spec 4.6.3), for as long as this call waits.
        {
            let mut st = self.inner.live_state()?;
            st.requests.find_ready(requests)?;
            for (i, &r) in requests.iter().enumerate() {
                if requests[..i].contains(&r) {
                    continue;
                }
                if let Err(e) = st.requests.begin_wait(r) {
                    for &earlier in &requests[..i] {
                        _ = st.requests.end_wait(earlier);
                    }
                    return Err(e);
                }
            }
        }
        let outcome = self.wait_any_registered(requests, buffers, timeout);
        if let Ok(mut st) = self.inner.live_state() {
            // The request taken is released (its handle dead); the others wait again.
            for &r in requests {
                _ = st.requests.end_wait(r);
            }
        }
        outcome
    }

    /// [`Node::wait_any_into`] once registered as the requests' waiter.
    fn wait_any_registered(
        &self,
        requests: &[RequestHandle],
        buffers: &mut [Option<&mut [u8]>],
        timeout: Option<Duration>,
    ) -> Result<(usize, Result<usize>)> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut backoff = self.inner.backoff();
        let own_sides = self.transfer_sides(requests);
        loop {
            for &r in requests {
                self.drive_pending(r)?;
            }
            let mut st = self.inner.live_state()?;
            self.inner.progress(&mut st);
            let mut ready = st.requests.find_ready(requests)?;
            // Receives take their message only until one request is done: a receive that
            // is not reported must not have consumed one.
            for (i, &r) in requests.iter().enumerate() {
                if ready.is_some() {
                    break;
                }
                let buf = buffers.get_mut(i).and_then(|b| b.as_deref_mut());
                let posted = matches!(
                    st.requests.get(r),
                    Ok(Req::Recv {
                        posted: Some(_),
                        ..
                    })
                );
                if buf.is_some() || posted {
                    st = self.complete_waited(st, r, buf)?;
                    if st.requests.find_ready(&requests[i..=i])?.is_some() {
                        ready = Some(i);
                    }
                }
            }
            if let Some(i) = ready {
                let outcome = match st.requests.take_completed(requests[i]) {
                    Ok(Some(done)) if done.status == Status::MCAPI_SUCCESS => Ok(done.size),
                    Ok(Some(done)) => Err(done.status),
                    Ok(None) => return Err(Status::MCAPI_ERR_GENERAL),
                    // Cancelled: released by taking it, so it belongs to index `i` too.
                    Err(e) => Err(e),
                };
                return Ok((i, outcome));
            }
            drop(st);
            self.progress_busy_sides(&own_sides, &mut backoff);
            backoff.wait_on_unless(
                deadline,
                || self.request_cqs(requests),
                || self.hub_inboxes_hold(&own_sides),
            )?;
        }
    }

    /// `mcapi_cancel`: cancels a pending request; a waiter gets
    /// `MCAPI_ERR_REQUEST_CANCELLED`. A cancelled receive consumes no message; a cancelled
    /// send that has not left is not sent.
    ///
    /// # Errors
    /// `MCAPI_ERR_REQUEST_INVALID`, also for a channel send or receive that can no longer be
    /// withdrawn (posted to the fabric, or served a packet), a message receive whose waiter
    /// is reading its rendezvous message in place, and for a channel open already
    /// announced to the other side (which may have completed its own open against it): it
    /// completes as usual.
    pub fn cancel(&self, request: RequestHandle) -> Result<()> {
        let data = {
            let st = self.inner.live_state()?;
            let pending = matches!(st.requests.state(request), Ok(RequestState::Pending));
            // Only a pending operation is withdrawn from its side; a completion already
            // reported is released by the table's cancel below (spec 4.6.1).
            match st.requests.get(request) {
                Ok(Req::Chan(
                    c @ (ChanReq::Send { .. } | ChanReq::Recv { .. } | ChanReq::Open { .. }),
                )) if pending => Some(*c),
                _ => None,
            }
        };
        // Taken off its side first, under the side lock, so that no other thread posts or
        // serves it meanwhile.
        if data.is_some_and(|c| !self.withdraw_channel_request(request, c)) {
            return Err(Status::MCAPI_ERR_REQUEST_INVALID);
        }
        let mut st = self.inner.live_state()?;
        let pending = matches!(st.requests.state(request)?, RequestState::Pending);
        let lent_out = match st.requests.get(request) {
            // A lent buffer whose descriptor left: its receiver may be reading it.
            Ok(&Req::Send { rndv, .. }) => {
                st.rndv.is_lent(rndv) && !st.pending_sends.contains(&request)
            }
            _ => false,
        };
        if pending && (lent_out || st.reading_into(request)) {
            // It completes with the read of its message.
            return Err(Status::MCAPI_ERR_REQUEST_INVALID);
        }
        let payload = st.requests.cancel(request)?;
        if !pending {
            return Ok(());
        }
        match payload {
            Req::Recv { port, .. } => {
                if let Some(ep) = st.endpoints.get_mut(&port) {
                    ep.pending_recvs.retain(|&h| h != request);
                }
            }
            Req::Send { slot, rndv, .. } => {
                st.pending_sends.retain(|&h| h != request);
                self.inner.send_finished(&mut st, slot, rndv, false);
            }
            Req::Get { .. } | Req::Failed => {}
            Req::Chan(ChanReq::Open { port, handle }) => {
                drop(st);
                self.cancel_channel_open(port, handle);
            }
            Req::Chan(ChanReq::Close { port, handle }) => {
                // Announced to the other side already: the close goes on without its
                // request, or the endpoint would stay closing for good.
                drop(st);
                self.close_unowned(request, port, handle);
            }
            // Sends and receives were withdrawn above; connects complete at once.
            Req::Chan(_) => {}
        }
        Ok(())
    }
}

/// Whether completing a request with this `payload` needs the node's message endpoint and
/// control work progressed: not a packet or scalar transfer, which [`Node::drive_channel`] progresses on
/// its own side (as the blocking channel calls do; the background thread keeps the node
/// going meanwhile). Saves a zero-timeout `wait` on a zero-copy send a CQ read of an
/// unrelated endpoint.
fn needs_node_progress(payload: &Req) -> bool {
    !matches!(
        payload,
        Req::Chan(ChanReq::Send { .. } | ChanReq::Recv { .. })
    )
}

/// What a pending request needs driven before it is looked at again (besides the node's
/// progress, see [`needs_node_progress`]).
#[derive(Clone, Copy)]
enum Drive {
    Nothing,
    /// An `endpoint_get_i`: look the endpoint up.
    Lookup,
    /// A channel request: advance it on its side.
    Channel(ChanReq),
}

impl Drive {
    fn of(payload: &Req) -> Drive {
        match payload {
            Req::Get { .. } => Drive::Lookup,
            Req::Chan(c) => Drive::Channel(*c),
            _ => Drive::Nothing,
        }
    }
}

impl Node {
    /// Drives `request` if it is pending (a lookup or a channel request); returns whether
    /// completing it also needs the node's progress (a handle that is not live: yes, the
    /// caller's look reports it).
    pub(super) fn drive_pending(&self, request: RequestHandle) -> Result<bool> {
        let (drive, node_progress) = {
            let st = self.inner.live_state()?;
            let payload = st.requests.get(request);
            let pending = matches!(st.requests.state(request), Ok(RequestState::Pending));
            (
                payload
                    .ok()
                    .filter(|_| pending)
                    .map_or(Drive::Nothing, Drive::of),
                payload.map_or(true, needs_node_progress),
            )
        };
        self.drive(request, drive)?;
        Ok(node_progress)
    }

    fn drive(&self, request: RequestHandle, drive: Drive) -> Result<()> {
        match drive {
            Drive::Nothing => Ok(()),
            Drive::Lookup => self.poll_get(request),
            Drive::Channel(c) => self.drive_channel(request, c),
        }
    }
}

/// What [`RequestTable::take_completed`](crate::semantics::request::RequestTable) gave a
/// waiter: `Ok(None)` while pending; `Ok(Some(outcome))` once the request was released, the
/// outcome being the size transferred or the operation's error (for a cancelled one,
/// `MCAPI_ERR_REQUEST_CANCELLED`); `Err` when the handle is not a live request.
fn taken<T>(
    took: Result<Option<crate::semantics::request::Completion<T>>>,
) -> Result<Option<Result<usize>>> {
    match took {
        Ok(None) => Ok(None),
        Ok(Some(done)) if done.status == Status::MCAPI_SUCCESS => Ok(Some(Ok(done.size))),
        Ok(Some(done)) => Ok(Some(Err(done.status))),
        Err(Status::MCAPI_ERR_REQUEST_CANCELLED) => {
            Ok(Some(Err(Status::MCAPI_ERR_REQUEST_CANCELLED)))
        }
        Err(e) => Err(e),
    }
}
