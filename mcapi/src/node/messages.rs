//! Message calls of a node (spec 4.3).

use super::channel::SideSet;
use super::common::{ofi_status, refusal, Result, EAGER_SLOT, NUM_PRIORITIES};
use super::credit_plane::{control_tag, encode_control};
use super::fetch::{IN_PLACE_READ, READ_RETRIES};
use super::inner::NodeInner;
use super::message_path::{give_back, InPlace};
use super::peers::PeerInput;
use super::rendezvous::{Descriptor, Msg, NO_STAGING};
use super::state::{Req, State, LOCAL_PEER};
use super::wait::{Backoff, Deadline};
use super::Node;
use crate::config::Compat;
use crate::control::Frame;
use crate::semantics::endpoint_id::EndpointId;
use crate::semantics::request::{RequestHandle, RequestState};
use crate::semantics::wire::{Context, Kind, Tag};
use crate::semantics::Status;
use mcapi_ofi::{RecvBuffer, SendBuffer};
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

impl Node {
    /// The largest message this node sends or receives (`Config::max_msg_size`, at most
    /// [`MAX_MSG_SIZE`](crate::MAX_MSG_SIZE); the eager slot, 64 KiB, without `FI_RMA`).
    pub fn max_msg_size(&self) -> usize {
        self.inner.fab.max_msg
    }

    /// The largest message this node sends eagerly; larger ones go by rendezvous.
    pub fn eager_max(&self) -> usize {
        self.inner.fab.eager_max
    }

    /// Whether a blocking `msg_send` of a rendezvous message (above [`Node::eager_max`]) from
    /// an endpoint without a timeout lets its receiver read the buffer in place, returning
    /// once the receiver is done with it, rather than staging a copy and returning at once
    /// (docs/design.md, "Large messages"): on providers whose reads the reader's process
    /// makes (shm).
    pub fn sends_in_place(&self) -> bool {
        self.inner.fab.sends_in_place
    }

    /// Whether a rendezvous message may be read straight into a receive's buffer (a
    /// blocking `msg_recv`, a waited `msg_recv_i`, a receive posted with its buffer) rather
    /// than into receive staging and copied out: where every read ends, successfully or
    /// with an error once its sender is gone (shm with cross-memory attach, tcp;ofi_rxm,
    /// sockets; docs/design.md, "Reads in place").
    pub fn reads_into_receive_buffers(&self) -> bool {
        self.inner.fab.reads_in_place
    }

    /// Whether [`Node::msg_send_i_zero_copy`] lends a rendezvous message's buffer that
    /// lives for good ([`SendBuffer::from_static`]) to its receiver rather than copying it:
    /// where sends go in place, and on tcp;ofi_rxm (docs/design.md, "Lent buffers").
    pub fn lends_static_buffers(&self) -> bool {
        self.inner.fab.lends_static
    }

    /// Rendezvous messages this node staged that their receivers have not yet read or
    /// discarded (tests: nothing leaks).
    ///
    /// # Errors
    /// `MCAPI_ERR_NODE_NOTINIT` after `finalize`.
    #[doc(hidden)]
    pub fn staged_messages(&self) -> Result<usize> {
        self.inner.staged_messages()
    }

    /// Rendezvous messages this node is reading or has read and not yet handed out
    /// (tests: nothing leaks).
    ///
    /// # Errors
    /// `MCAPI_ERR_NODE_NOTINIT` after `finalize`.
    #[doc(hidden)]
    pub fn fetched_messages(&self) -> Result<usize> {
        Ok(self.inner.live_state()?.rndv.fetches.held())
    }

    /// Rendezvous messages this node read straight into a receive's buffer, and whether a
    /// receive blocks on local endpoint `endpoint` now (tests: which path a message took).
    ///
    /// # Errors
    /// `MCAPI_ERR_NODE_NOTINIT` after `finalize`, `MCAPI_ERR_ENDP_INVALID`.
    #[doc(hidden)]
    pub fn reads_in_place(&self, endpoint: EndpointId) -> Result<(u64, bool)> {
        let port = self.local_port(endpoint)?;
        let st = self.inner.live_state()?;
        Ok((st.read_in_place, st.waiting_receives.on(port)))
    }

    /// `mcapi_msg_send`: sends `data` from local endpoint `from` to `to` with `priority`,
    /// blocking while the receiver's buffers are full (up to `from`'s timeout).
    ///
    /// # Errors
    /// `MCAPI_ERR_ENDP_INVALID` (either endpoint), `MCAPI_ERR_MSG_SIZE`,
    /// `MCAPI_ERR_PRIORITY`, `MCAPI_TIMEOUT`, `MCAPI_ERR_TRANSMISSION` (peer gone),
    /// `MCAPI_ERR_GENERAL` to or from an endpoint connected to a channel.
    pub fn msg_send(
        &self,
        from: EndpointId,
        to: EndpointId,
        data: &[u8],
        priority: u32,
    ) -> Result<()> {
        // The fast path (a known destination with a credit in hand) takes the state lock
        // once, reads no clock and makes no call but the provider's send.
        let mut st = self.inner.sending_state()?;
        let timeout = self.sending_endpoint(&st, from)?.timeout;
        if priority >= NUM_PRIORITIES {
            return Err(Status::MCAPI_ERR_PRIORITY);
        }
        if data.len() > self.inner.fab.max_msg {
            return Err(Status::MCAPI_ERR_MSG_SIZE);
        }
        if (to.domain(), to.node()) == (self.inner.domain_id, self.inner.node_id) {
            return self.send_local(st, to, data, priority as u8, timeout);
        }
        // Fast path: a known destination, a credit in hand, nothing queued before us.
        if let Some(&peer) = st.peer_of.get(&(to.domain(), to.node())) {
            let State {
                peers,
                remotes,
                pending_sends,
                ..
            } = &mut *st;
            let p = &peers[peer as usize];
            if let (true, true, Some(remote)) = (
                p.is_alive(),
                pending_sends.is_empty(),
                remotes.get_mut(&(peer, to.port())),
            ) {
                if remote.take_credit() {
                    let seq = remote.next_seq;
                    let tag = Tag {
                        kind: Kind::Message,
                        priority: priority as u8,
                        port: to.port(),
                        peer: p.index_at_peer,
                        seq,
                    };
                    if data.len() <= self.inner.fab.inject_size
                        && self
                            .inner
                            .fab
                            .inject_eager(data, p.addr, tag.encode())
                            .is_ok()
                    {
                        remote.next_seq = seq.wrapping_add(1);
                        return Ok(());
                    }
                    // Not sent here: keep the credit for the general path below.
                    remote.spare += 1;
                }
            }
        }
        let mut deadline = Deadline::new(timeout);
        let peer = match st.known_remote(to) {
            Some(peer) => peer,
            None => {
                drop(st);
                let peer = self.remote_peer(to, deadline.get())?;
                st = self.inner.sending_state()?;
                peer
            }
        };
        let key = (peer, to.port());
        let mut backoff = self.inner.backoff();
        let mut progressed = false;
        let mut rndv_seen = st.rndv.events();
        loop {
            if !st.peers[peer as usize].is_alive() {
                return Err(Status::MCAPI_ERR_TRANSMISSION);
            }
            if !st.pending_sends.is_empty() {
                // Non-blocking sends were queued while we waited unlocked: after them (the
                // sequence number taken below is then never taken by one of them meanwhile).
                drop(st);
                return self.send_behind_queued(key, priority as u8, data, &mut deadline);
            }
            let remote = st
                .remotes
                .get_mut(&key)
                .ok_or(Status::MCAPI_ERR_ENDP_INVALID)?;
            if remote.take_credit() {
                let seq = remote.next_seq;
                remote.next_seq = seq.wrapping_add(1);
                let tag = Tag {
                    kind: Kind::Message,
                    priority: priority as u8,
                    port: to.port(),
                    peer: st.peers[peer as usize].index_at_peer,
                    seq,
                };
                if data.len() > self.inner.fab.eager_max
                    && timeout.is_none()
                    && self.inner.fab.sends_in_place
                    && st.peers[peer as usize].reads_itself
                {
                    if self.send_in_place(st, (peer, seq), key, tag, data)? {
                        return Ok(());
                    }
                    // The provider kept refusing the descriptor: as below.
                    st = self.wait_unlocked(&mut backoff, deadline.get())?;
                    continue;
                }
                let msg = if data.len() > self.inner.fab.eager_max {
                    // Staged (copied into registered memory), so the buffer is free when
                    // the call returns; only its descriptor takes the credit's slot.
                    match self.inner.stage(&mut st, peer, data) {
                        Ok(Some(msg)) => msg,
                        staged => {
                            give_back(&mut st, key, seq);
                            staged?;
                            // The staging budget is spent: wait for a receiver to read
                            // (which needs our progress: keep polling while reads end).
                            if st.rndv.keep_polling(&mut rndv_seen, backoff.waited_long()) {
                                backoff.restart();
                            }
                            drop(st);
                            st = self.wait_unlocked(&mut backoff, deadline.get())?;
                            continue;
                        }
                    }
                } else {
                    Msg::Eager(data)
                };
                let sent = self.inner.send_payload(&mut st, peer, tag, msg);
                if let (Msg::Staged { .. }, Ok(true)) = (msg, &sent) {
                    // Receivers read staged messages with this node's progress (manual-
                    // progress providers): a sender of many keeps them moving.
                    self.inner.progress(&mut st);
                }
                if sent != Ok(true) {
                    // Not sent: the credit and the sequence number stay unused (the lock
                    // was held since they were taken, so no later number went out).
                    give_back(&mut st, key, seq);
                    if let Msg::Staged { id, .. } = msg {
                        st.rndv.release(id, None);
                    }
                }
                if sent? {
                    return Ok(());
                }
                // No send slot came free, or the provider kept refusing: wait as for a
                // credit, without the state lock (the node's other calls, its control
                // plane's answers and its finalize go on meanwhile), up to the deadline.
                drop(st);
                st = self.wait_unlocked(&mut backoff, deadline.get())?;
                continue;
            }
            if !progressed {
                // Dry: grants may be waiting in the CQ already (the receiver sends them as
                // it consumes, unasked). Read it before asking.
                progressed = true;
                self.inner.progress(&mut st);
                continue;
            }
            // A window that had credits gets more as the receiver consumes; ask only if that
            // does not happen while we spin (or if it never had any).
            if remote.window.needs_request() && (!remote.window.granted_before() || backoff.spun())
            {
                // Ask the receiver's control plane, which answers even while its application
                // is busy elsewhere. Later grants come over the fabric.
                let seen = remote.window.request_sent();
                // The window asked for: if another thread replaces it meanwhile, an answer
                // of another epoch is about the one it replaced.
                let asked_for = (remote.epoch, remote.replaced);
                let want = self.inner.config.recv_buffers as u32;
                drop(st);
                let request = Frame::CreditRequest {
                    port: to.port(),
                    want,
                    seen,
                };
                let (answer, run) = self.inner.control_call_on(peer, &request)?;
                st = self.inner.sending_state()?;
                if !st.run_alive((peer, run)) {
                    // Granted by a run that is gone since (its successor never granted
                    // it): the message was for that run, as to any peer that died.
                    return Err(Status::MCAPI_ERR_TRANSMISSION);
                }
                let Some(remote) = st.remotes.get_mut(&key) else {
                    // Forgotten meanwhile (the endpoint was deleted): what it granted goes
                    // back to its node.
                    if let Frame::Value(v) = answer {
                        let back = ((v >> 32) as u16, v as u32);
                        if back.1 > 0 {
                            self.inner.return_credits(&mut st, key, back);
                        }
                    }
                    return Err(Status::MCAPI_ERR_ENDP_INVALID);
                };
                match answer {
                    Frame::Value(v) => {
                        // Granted by the endpoint of that epoch: if it replaced the one
                        // our window was for, the window is the new one's from now on.
                        let (granted, epoch) = (v as u32, (v >> 32) as u16);
                        if epoch != remote.epoch && (remote.epoch, remote.replaced) != asked_for {
                            // About the window another thread replaced meanwhile (a stale
                            // answer): its grant goes back, and the next look asks again.
                            remote.window.request_refused();
                            if granted > 0 {
                                self.inner.return_credits(&mut st, key, (epoch, granted));
                            }
                            continue;
                        }
                        if let Some(back) = remote.replace(epoch) {
                            self.inner.return_credits(&mut st, key, back);
                        }
                        if let Some(remote) = st.remotes.get_mut(&key) {
                            remote.window.add(granted);
                        }
                    }
                    // Refused (e.g. the endpoint serves too many senders, is connected to a
                    // channel, or was deleted): forget the request so a later send asks
                    // again (the window's stamp stays: it is the pool's count), and report
                    // why.
                    answer => {
                        remote.window.request_refused();
                        return Err(refusal("credit request", &answer));
                    }
                }
                continue;
            }
            if st.rndv.keep_polling(&mut rndv_seen, backoff.waited_long()) {
                // Credits come back as receivers read what we staged, which needs our
                // progress.
                backoff.restart();
            }
            drop(st);
            st = self.wait_unlocked(&mut backoff, deadline.get())?;
        }
    }

    /// A blocked send's wait (its state guard dropped by the caller): other busy sides
    /// progressed, then a wait through `backoff` up to `deadline`; returns the state lock
    /// again, the node progressed.
    fn wait_unlocked(
        &self,
        backoff: &mut Backoff,
        deadline: Option<Instant>,
    ) -> Result<MutexGuard<'_, State>> {
        self.progress_busy_sides(&SideSet::default(), backoff);
        backoff.wait_on(deadline, || self.inner.node_sleep_cqs())?;
        let mut st = self.inner.sending_state()?;
        self.inner.progress(&mut st);
        Ok(st)
    }

    /// A blocking `msg_send` of a rendezvous message without a copy: its descriptor (credit
    /// `seq` taken) names `data` itself, registered for the receiver to read in place, and
    /// the call returns once the receiver is done with it (read, or discarded with its
    /// endpoint), or with `MCAPI_ERR_TRANSMISSION` once the receiver is gone. Only without
    /// a timeout (an exposed buffer cannot be taken back) and where the receiver's process
    /// makes the read (`Fab::sends_in_place`). `Ok(false)`: the provider kept refusing the
    /// descriptor ([`NodeInner::send_payload`]); nothing was sent, the credit and number
    /// are back, and the caller waits without the lock and tries again.
    #[cold]
    #[inline(never)]
    fn send_in_place(
        &self,
        st: MutexGuard<'_, State>,
        (peer, seq): (u16, u16),
        key: (u16, u32),
        tag: Tag,
        data: &[u8],
    ) -> Result<bool> {
        let fab = &self.inner.fab;
        // The lock is held from the credit taken to the descriptor sent (so no other send
        // takes a later sequence number meanwhile); the guard moves into the closure, and
        // stays here if the registration fails first (the closure then never runs).
        let mut st = Some(st);
        let exposed = fab.domain.expose_for_reads(data, |mr_key| {
            let Some(mut st) = st.take() else {
                return Err(Status::MCAPI_ERR_GENERAL); // never: the closure runs once
            };
            let id = st.rndv.expose(peer);
            let desc = Descriptor {
                addr: self.inner.remote_address(data.as_ptr() as usize),
                key: mr_key,
                len: data.len() as u64,
                id,
            };
            let msg = Msg::Staged {
                desc: desc.encode(),
                id,
                len: data.len(),
            };
            let sent = self.inner.send_payload(&mut st, peer, tag, msg);
            if sent != Ok(true) {
                // Not sent: nobody learnt of the exposed buffer.
                give_back(&mut st, key, seq);
                st.rndv.release(id, None);
                _ = st.rndv.take_exposed(id);
                return sent;
            }
            let mut backoff = self.inner.backoff();
            loop {
                self.inner.progress(&mut st);
                if let Some(read) = st.rndv.take_exposed(id) {
                    return if read {
                        Ok(true)
                    } else {
                        Err(Status::MCAPI_ERR_TRANSMISSION)
                    };
                }
                if backoff.slow_check_due() {
                    // The liveness watcher marks a dead peer's link closed without the
                    // state lock; its loss is recorded here (which ends the wait above).
                    let p = &st.peers[peer as usize];
                    if let Some(link) = p.link.as_ref().filter(|l| l.is_closed()) {
                        let run = link.incarnation;
                        self.inner
                            .peer_event_locked(&mut st, peer, PeerInput::Lost(run));
                        continue;
                    }
                }
                drop(st);
                _ = backoff.wait_on(None, || self.inner.node_sleep_cqs());
                // (A node finalized meanwhile by another thread ends the call: the
                // application's own race.)
                st = self.inner.live_state()?;
            }
        });
        match exposed {
            Ok(sent) => sent,
            Err(e) => {
                // Not registered: nothing was sent; the credit and number stay unused.
                if let Some(mut st) = st {
                    give_back(&mut st, key, seq);
                }
                Err(ofi_status(e))
            }
        }
    }

    /// `msg_send` to an endpoint of this node: queued there before the call returns. A full
    /// endpoint blocks the call until a receive makes room (spec 4.3.2), up to the sending
    /// endpoint's timeout; in compatibility mode it is `MCAPI_ERR_MEM_LIMIT` at once (the
    /// reference's reading: a thread blocked on its own node's queue can only deadlock).
    fn send_local<'n>(
        &'n self,
        mut st: std::sync::MutexGuard<'n, State>,
        to: EndpointId,
        data: &[u8],
        priority: u8,
        timeout: Option<Duration>,
    ) -> Result<()> {
        let port = to.port();
        let mut deadline = Deadline::new(timeout);
        let mut backoff = self.inner.backoff();
        loop {
            if !st.pending_sends.is_empty() {
                // After the non-blocking sends queued before this one (order).
                drop(st);
                return self.send_behind_queued((LOCAL_PEER, port), priority, data, &mut deadline);
            }
            let fill = |buf: &mut [u8]| buf.copy_from_slice(data);
            if self
                .inner
                .deliver_local(&mut st, port, priority, data.len(), fill)?
            {
                return Ok(());
            }
            if self.inner.config.compat == Compat::Mca {
                return Err(Status::MCAPI_ERR_MEM_LIMIT);
            }
            drop(st);
            st = self.wait_unlocked(&mut backoff, deadline.get())?;
        }
    }

    /// A blocking `msg_send` while non-blocking sends wait for credits: queued behind them
    /// (order), waiting for a send slot or request while all are taken (the call blocks,
    /// its ERRORS table has no limit codes), withdrawn if the timeout passes first.
    fn send_behind_queued(
        &self,
        key: (u16, u32),
        priority: u8,
        data: &[u8],
        deadline: &mut Deadline,
    ) -> Result<()> {
        let mut backoff = self.inner.backoff();
        let h = loop {
            let mut st = self.inner.sending_state()?;
            let msg = if data.len() > self.inner.fab.eager_max {
                self.inner.stage(&mut st, key.0, data)?
            } else {
                Some(Msg::Eager(data))
            };
            let queued = match msg {
                Some(msg) => self
                    .inner
                    .queue_send(&mut st, key, priority, msg)
                    .inspect_err(|_| {
                        if let Msg::Staged { id, .. } = msg {
                            st.rndv.release(id, None);
                        }
                    }),
                None => Err(Status::MCAPI_ERR_MEM_LIMIT),
            };
            match queued {
                Ok(h) => {
                    self.inner.advance_sends(&mut st);
                    break h;
                }
                Err(Status::MCAPI_ERR_MEM_LIMIT | Status::MCAPI_ERR_REQUEST_LIMIT) => {
                    self.inner.progress(&mut st);
                    self.inner.advance_sends(&mut st);
                }
                Err(e) => return Err(e),
            }
            drop(st);
            self.progress_busy_sides(&SideSet::default(), &mut backoff);
            backoff.wait_on(deadline.get(), || self.inner.node_sleep_cqs())?;
        };
        let timeout = deadline
            .get()
            .map(|d| d.saturating_duration_since(Instant::now()));
        match self.wait(h, None, timeout) {
            Err(Status::MCAPI_TIMEOUT) => {
                // Withdrawn under the lock that sends it, unless it went meanwhile.
                let mut st = self.inner.live_state()?;
                if let Ok(RequestState::Pending) = st.requests.state(h) {
                    if let Ok(Some(Req::Send { slot, rndv, .. })) = st.requests.release(h) {
                        st.pending_sends.retain(|&q| q != h);
                        self.inner.send_finished(&mut st, slot, rndv, false);
                    }
                    return Err(Status::MCAPI_TIMEOUT);
                }
                match st.requests.take_completed(h) {
                    Ok(Some(done)) if done.status == Status::MCAPI_SUCCESS => Ok(()),
                    Ok(Some(done)) => Err(done.status),
                    _ => Err(Status::MCAPI_TIMEOUT),
                }
            }
            r => r.map(|_| ()),
        }
    }

    /// `mcapi_msg_recv`: the next message of local endpoint `endpoint` (highest priority
    /// first, FIFO within a priority) into `buf`; returns its length. Blocks up to the
    /// endpoint's timeout.
    ///
    /// # Errors
    /// `MCAPI_ERR_ENDP_INVALID`, `MCAPI_ERR_MSG_TRUNCATED` (the message stays queued),
    /// `MCAPI_TIMEOUT`; `MCAPI_ERR_TRANSMISSION` for a rendezvous message whose sender was
    /// gone before it could be read (the message is dropped; the next receive takes the
    /// next one).
    pub fn msg_recv(&self, endpoint: EndpointId, buf: &mut [u8]) -> Result<usize> {
        let mut st = self.inner.live_state()?;
        if (endpoint.domain(), endpoint.node()) != (self.inner.domain_id, self.inner.node_id) {
            return Err(Status::MCAPI_ERR_ENDP_INVALID);
        }
        let port = endpoint.port();
        // A rendezvous message at the head of the queue that nothing reads yet is read
        // straight into `buf` (where the provider allows), and one arriving while we read
        // the CQ is not read ahead.
        let in_place = self.inner.fab.reads_in_place.then_some(port);
        // A message already queued is taken without reading the CQ (as raw libfabric
        // receivers do: the CQ is read in batches, once the messages of the last are gone).
        st.receiving_in_place = in_place;
        let taken = self.inner.take_message(&mut st, port, buf);
        st.receiving_in_place = None;
        if let Some(n) = taken? {
            return Ok(n);
        }
        if let Some(read) = st.in_place_read.take() {
            drop(st);
            return self.read_in_place(read, buf);
        }
        // (The endpoint is there: `take_message` found it.)
        let timeout = self.local_endpoint(&st, endpoint)?.timeout;
        let mut deadline = Deadline::new(timeout);
        let mut backoff = self.inner.backoff();
        let mut rndv_seen = st.rndv.events();
        let leave = |st: &mut State| {
            if in_place.is_some() {
                self.inner.receive_left(st, port);
            }
        };
        if in_place.is_some() {
            st.waiting_receives.enter(port);
        }
        loop {
            st.receiving_in_place = in_place;
            self.inner.progress(&mut st);
            let taken = self.inner.take_message(&mut st, port, buf);
            st.receiving_in_place = None;
            let taken = taken.inspect_err(|_| leave(&mut st))?;
            if let Some(n) = taken {
                leave(&mut st);
                return Ok(n);
            }
            if let Some(read) = st.in_place_read.take() {
                leave(&mut st);
                drop(st);
                return self.read_in_place(read, buf);
            }
            if st.rndv.keep_polling(&mut rndv_seen, backoff.waited_long()) {
                // Reads move only as fast as both nodes' progress (manual-progress
                // providers): keep polling, without the lock between polls.
                backoff.restart();
            }
            drop(st);
            self.progress_busy_sides(&SideSet::default(), &mut backoff);
            if let Err(e) = backoff.wait_on(deadline.get(), || self.inner.node_sleep_cqs()) {
                if let Ok(mut st) = self.inner.live_state() {
                    leave(&mut st);
                }
                return Err(e);
            }
            st = self.inner.live_state()?;
        }
    }

    /// Reads rendezvous message `read` (taken off its queue by this receive) straight into
    /// `buf`, and waits for the read's end whatever the endpoint's timeout: the provider
    /// may write `buf` until then. A failed read is tried again as a read-ahead's is
    /// ([`READ_RETRIES`]).
    #[cold]
    #[inline(never)]
    pub(super) fn read_in_place(&self, read: InPlace, buf: &mut [u8]) -> Result<usize> {
        let mut read_ok = false;
        let mut alive = read.alive;
        let mut tries = 0;
        while alive && !read_ok {
            let mut backoff = self.inner.backoff();
            let d = read.desc;
            let context = Context::Read(IN_PLACE_READ).encode();
            let out = &mut buf[..read.len];
            let result =
                self.inner
                    .fab
                    .ep
                    .read_in_place(out, read.src, d.addr, d.key, context, || {
                        match self.inner.live_state() {
                            Ok(mut st) => self.inner.progress(&mut st),
                            Err(_) => self.inner.discard_completions(),
                        }
                        _ = backoff.wait_on(None, || self.inner.node_sleep_cqs());
                    });
            #[cfg(test)]
            let result = result.and_then(|()| self.inner.forced_read_failure());
            if let Err(e) = &result {
                log::info!("a rendezvous read in place failed: {e}");
            }
            read_ok = result.is_ok();
            tries += 1;
            alive = !read_ok
                && tries <= READ_RETRIES
                && self.inner.live_state()?.run_alive(read.sender());
        }
        let mut st = self.inner.live_state()?;
        self.inner.in_place_done(&mut st, &read, read_ok)
    }

    /// `mcapi_msg_send_i`: copies `data` and returns a request that completes when the
    /// message is handed to the fabric (once the receiver has a free buffer for it).
    ///
    /// # Errors
    /// As [`Node::msg_send`], plus `MCAPI_ERR_REQUEST_LIMIT` (request table full) and
    /// `MCAPI_ERR_MEM_LIMIT` (all send slots hold messages waiting for credits).
    pub fn msg_send_i(
        &self,
        from: EndpointId,
        to: EndpointId,
        data: &[u8],
        priority: u32,
    ) -> Result<RequestHandle> {
        self.sending_endpoint(&*self.inner.sending_state()?, from)?;
        if priority >= NUM_PRIORITIES {
            return Err(Status::MCAPI_ERR_PRIORITY);
        }
        if data.len() > self.inner.fab.max_msg {
            return Err(Status::MCAPI_ERR_MSG_SIZE);
        }
        if (to.domain(), to.node()) == (self.inner.domain_id, self.inner.node_id) {
            return self.send_local_i(to, data, priority as u8);
        }
        let peer = self.remote_peer(to, None)?;
        let mut st = self.inner.sending_state()?;
        let h = self.queue_staged(&mut st, (peer, to.port()), priority as u8, data)?;
        if data.len() > self.inner.fab.eager_max {
            // As for a staged `msg_send`: receivers read with our progress.
            self.inner.progress(&mut st);
        } else {
            self.inner.advance_sends(&mut st);
        }
        Ok(h)
    }

    /// `mcapi_msg_send_i` without a copy where the provider allows: a rendezvous message
    /// (above [`Node::eager_max`]) to another node is read by its receiver straight from
    /// `buf` on a provider whose reads the reader's process makes ([`Node::sends_in_place`]:
    /// shm), and on tcp;ofi_rxm when `buf` lives for good ([`SendBuffer::from_static`];
    /// [`Node::lends_static_buffers`]: there this node's progress serves the reads, and a
    /// read under way when its reader dies cannot be stopped, so only memory that stays
    /// valid and unmodified may be read; its registration is kept until the node's endpoint
    /// closes). The request completes once the receiver is done with it (read, or discarded
    /// with its endpoint; `MCAPI_ERR_TRANSMISSION` once the receiver is gone): `buf` is the
    /// application's again then. Such a send cannot be cancelled once its descriptor has
    /// left (`MCAPI_ERR_REQUEST_INVALID`). Any other message is copied, as by
    /// [`Node::msg_send_i`]. Priorities and per-sender FIFO order are those of every other
    /// send.
    ///
    /// # Errors
    /// As [`Node::msg_send_i`].
    pub fn msg_send_i_zero_copy(
        &self,
        from: EndpointId,
        to: EndpointId,
        buf: SendBuffer,
        priority: u32,
    ) -> Result<RequestHandle> {
        let lend = buf.len() > self.inner.fab.eager_max
            && buf.len() <= self.inner.fab.max_msg
            && (self.inner.fab.sends_in_place
                || (self.inner.fab.lends_static && buf.lives_forever()))
            && (to.domain(), to.node()) != (self.inner.domain_id, self.inner.node_id);
        if !lend {
            return self.msg_send_i(from, to, buf.as_slice(), priority);
        }
        self.sending_endpoint(&*self.inner.sending_state()?, from)?;
        if priority >= NUM_PRIORITIES {
            return Err(Status::MCAPI_ERR_PRIORITY);
        }
        let peer = self.remote_peer(to, None)?;
        let lent_for_good = self.inner.fab.lends_static && buf.lives_forever();
        if !lent_for_good && !self.inner.sending_state()?.peers[peer as usize].reads_itself {
            // Its reads would be served here (its shm cannot attach to this process, e.g.
            // `FI_SHM_DISABLE_CMA` set there): a buffer that may be freed is copied instead.
            return self.msg_send_i(from, to, buf.as_slice(), priority);
        }
        let len = buf.len();
        let exposed = self
            .inner
            .fab
            .domain
            .expose_send_buffer(buf)
            .map_err(ofi_status)?;
        let desc = Descriptor {
            addr: self.inner.remote_address(exposed.addr()),
            key: exposed.key(),
            len: len as u64,
            id: 0,
        };
        let mut st = self.inner.sending_state()?;
        if !lent_for_good && !st.peers[peer as usize].reads_itself {
            // A run that does not read itself replaced it meanwhile: a copy after all (the
            // key never left this process).
            drop(st);
            return self.msg_send_i(from, to, exposed.as_slice(), priority);
        }
        let id = st.rndv.lend(peer, exposed);
        let msg = Msg::Staged {
            desc: Descriptor { id, ..desc }.encode(),
            id,
            len,
        };
        let h = match self
            .inner
            .queue_send(&mut st, (peer, to.port()), priority as u8, msg)
        {
            Ok(h) => h,
            Err(e) => {
                st.rndv.release(id, None);
                return Err(e);
            }
        };
        st.rndv.attach(id, h);
        if !self.inner.fab.sends_in_place {
            // Our progress serves its reads: the background thread's too.
            self.inner
                .staged_out
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        self.inner.progress(&mut st);
        Ok(h)
    }

    /// `queue_send` of `data`, staged first if it is above the eager size.
    fn queue_staged(
        &self,
        st: &mut State,
        key: (u16, u32),
        priority: u8,
        data: &[u8],
    ) -> Result<RequestHandle> {
        if data.len() <= self.inner.fab.eager_max {
            return self.inner.queue_send(st, key, priority, Msg::Eager(data));
        }
        let msg = match self.inner.stage(st, key.0, data)? {
            Some(msg) => msg,
            None => {
                // Staging freed by receivers' `RndvDone`s not read yet comes back first.
                self.inner.progress(st);
                self.inner
                    .stage(st, key.0, data)?
                    .ok_or(Status::MCAPI_ERR_MEM_LIMIT)?
            }
        };
        self.inner
            .queue_send(st, key, priority, msg)
            .inspect_err(|_| {
                if let Msg::Staged { id, .. } = msg {
                    st.rndv.release(id, None);
                }
            })
    }

    /// `msg_send_i` to an endpoint of this node: queued there at once and the request
    /// complete, or, when the endpoint is full, copied into a send slot and pending until a
    /// receive makes room (in order with the node's other sends to it). In compatibility
    /// mode a full endpoint is `MCAPI_ERR_MEM_LIMIT`, as the blocking send's is.
    fn send_local_i(&self, to: EndpointId, data: &[u8], priority: u8) -> Result<RequestHandle> {
        let port = to.port();
        let mut st = self.inner.sending_state()?;
        // Refused before anything is delivered: a failed call sends nothing.
        if !st.requests.has_room() {
            return Err(Status::MCAPI_ERR_REQUEST_LIMIT);
        }
        if st.pending_sends.is_empty() {
            let fill = |buf: &mut [u8]| buf.copy_from_slice(data);
            if self
                .inner
                .deliver_local(&mut st, port, priority, data.len(), fill)?
            {
                let h = st.requests.alloc(Req::Send {
                    remote: (LOCAL_PEER, port),
                    priority,
                    slot: u32::MAX,
                    len: data.len(),
                    rndv: NO_STAGING,
                })?;
                st.requests.complete(h, Status::MCAPI_SUCCESS, data.len())?;
                return Ok(h);
            }
            if self.inner.config.compat == Compat::Mca {
                return Err(Status::MCAPI_ERR_MEM_LIMIT);
            }
        } else if !st.endpoints.contains_key(&port) {
            return Err(Status::MCAPI_ERR_ENDP_INVALID);
        }
        let h = self.queue_staged(&mut st, (LOCAL_PEER, port), priority, data)?;
        self.inner.advance_sends(&mut st);
        Ok(h)
    }

    /// `mcapi_msg_recv_i`: a request for the next message of local endpoint `endpoint`;
    /// the message is taken when the request is tested or waited on with a buffer.
    /// Cancelling it consumes no message.
    ///
    /// # Errors
    /// `MCAPI_ERR_ENDP_INVALID`, `MCAPI_ERR_REQUEST_LIMIT`.
    pub fn msg_recv_i(&self, endpoint: EndpointId) -> Result<RequestHandle> {
        self.recv_request(endpoint, None)
    }

    /// `mcapi_msg_recv_i` with its buffer given now (as the C call does): besides what
    /// [`Node::msg_recv_i`] does, a rendezvous message this request is the first to get is
    /// read straight into `buf` as soon as it arrives, without a copy, while the application
    /// goes on (where the provider reads into unregistered memory). Test or wait on it with
    /// no buffer: the message is in `buf` when it completes ([`Node::wait_into`] hands `buf`
    /// back). Once
    /// such a read started the request cannot be cancelled (`MCAPI_ERR_REQUEST_INVALID`);
    /// it completes with the read (`MCAPI_ERR_TRANSMISSION` if the read fails).
    ///
    /// # Errors
    /// As [`Node::msg_recv_i`].
    pub fn msg_recv_i_into(&self, endpoint: EndpointId, buf: RecvBuffer) -> Result<RequestHandle> {
        self.recv_request(endpoint, Some(buf))
    }

    fn recv_request(
        &self,
        endpoint: EndpointId,
        posted: Option<RecvBuffer>,
    ) -> Result<RequestHandle> {
        let port = self.local_port(endpoint)?;
        let mut st = self.inner.live_state()?;
        if !st.endpoints.contains_key(&port) {
            return Err(Status::MCAPI_ERR_ENDP_INVALID);
        }
        let bind = posted.is_some();
        let h = st.requests.alloc(Req::Recv {
            port,
            posted,
            reading: false,
        })?;
        if let Some(ep) = st.endpoints.get_mut(&port) {
            ep.pending_recvs.push_back(h);
        }
        if bind {
            self.inner.bind_posted(&mut st, port, None);
        }
        Ok(h)
    }

    /// `mcapi_msg_available`: messages queued at local endpoint `endpoint`.
    ///
    /// # Errors
    /// `MCAPI_ERR_ENDP_INVALID`.
    pub fn msg_available(&self, endpoint: EndpointId) -> Result<usize> {
        let port = self.local_port(endpoint)?;
        let mut st = self.inner.live_state()?;
        self.inner.progress(&mut st);
        Ok(st
            .endpoints
            .get(&port)
            .ok_or(Status::MCAPI_ERR_ENDP_INVALID)?
            .queue
            .len())
    }

    /// The peer index for a remote endpoint, resolving it (as `endpoint_get` does) when it
    /// came to us as a value in a message rather than through `endpoint_get`.
    pub(super) fn remote_peer(&self, to: EndpointId, deadline: Option<Instant>) -> Result<u16> {
        let connected = {
            let st = self.inner.live_state()?;
            if let Some(peer) = st.known_remote(to) {
                return Ok(peer);
            }
            st.connected_peer(to.domain(), to.node())
        };
        // A node we talk to already answers at once whether the endpoint exists (it may
        // have been deleted since we sent to it): no waiting for it to appear.
        if let Some(peer) = connected {
            if let Ok(Frame::Refused(_)) = self
                .inner
                .control_call(peer, &Frame::Lookup { port: to.port() })
            {
                return Err(Status::MCAPI_ERR_ENDP_INVALID);
            }
        }
        // An endpoint value that reached us in a message exists already: wait briefly only.
        let deadline = deadline.or_else(|| Some(Instant::now() + Duration::from_secs(5)));
        self.resolve_remote(to, deadline).map_err(|e| match e {
            Status::MCAPI_TIMEOUT => Status::MCAPI_ERR_ENDP_INVALID,
            e => e,
        })
    }
}

/// How many times `send_payload` tries a send the provider refuses, or looks for a free
/// send slot, progressing the node between tries under the state lock, before it lets a
/// caller that can wait unlocked do so (bounded: the node's other threads and its control
/// plane's answers wait for the lock meanwhile).
const TRIES_UNDER_LOCK: u32 = 64;

// Here rather than in `message_path`: it progresses the node (`progress`) while the
// provider refuses, and progress drives the message path.
impl NodeInner {
    /// Sends a message payload: inject when it fits, else from a send slot. While the
    /// provider refuses (-FI_EAGAIN) or no send slot is free it progresses and tries again,
    /// under the caller's state lock. `Ok(true)`: sent. After [`TRIES_UNDER_LOCK`] tries it
    /// gives up with `Ok(false)` (nothing posted): the caller waits without the lock, up to
    /// its deadline, and tries again; or with `MCAPI_ERR_TRANSMISSION` if the peer died
    /// (tcp;ofi_rxm and shm refuse for good then).
    pub(super) fn send_payload(
        &self,
        st: &mut State,
        peer: u16,
        tag: Tag,
        msg: Msg<'_>,
    ) -> Result<bool> {
        let dest = st.peers[peer as usize].addr;
        let (data, cq_data) = match &msg {
            Msg::Eager(data) => (*data, self.fab.message_cq_data(false)),
            Msg::Staged { desc, .. } => (&desc[..], self.fab.message_cq_data(true)),
        };
        let mut refused = 0u32;
        // `Ok(false)`: give up for now (the caller waits unlocked).
        let mut stalled = |st: &mut State| -> Result<bool> {
            refused += 1;
            if refused < TRIES_UNDER_LOCK {
                self.progress(st);
                return Ok(true);
            }
            // Giving up for now: a dead peer's link is looked at on the way out (tcp;ofi_rxm
            // and shm refuse for good when the peer has died), and its loss recorded.
            if let Some(link) = st.peers[peer as usize].link.clone() {
                if !link.is_closed() && link.stream.try_lock().is_ok_and(|s| s.is_closed()) {
                    link.closed
                        .store(true, std::sync::atomic::Ordering::Release);
                }
                if link.is_closed() {
                    self.peer_event_locked(st, peer, PeerInput::Lost(link.incarnation));
                }
            }
            if !st.peers[peer as usize].is_alive() {
                return Err(Status::MCAPI_ERR_TRANSMISSION);
            }
            Ok(false)
        };
        if data.len() <= self.fab.inject_size {
            loop {
                let injected = match cq_data {
                    None => self.fab.ep.inject_tagged(data, dest, tag.encode()),
                    Some(d) => self.fab.ep.inject_tagged_data(data, d, dest, tag.encode()),
                };
                match injected {
                    Ok(()) => return Ok(true),
                    Err(e) if e.is_again() => {
                        if !stalled(st)? {
                            return Ok(false);
                        }
                    }
                    Err(e) => return Err(ofi_status(e)),
                }
            }
        }
        let slot = loop {
            if let Some(s) = st.send_free.pop() {
                break s;
            }
            if !stalled(st)? {
                return Ok(false);
            }
        };
        let offset = slot as usize * EAGER_SLOT;
        let buf = self
            .fab
            .send_pool
            .write(offset, data)
            .and_then(|()| self.fab.send_pool.slice(offset, data.len()))
            .map_err(ofi_status)?;
        let ctx = Context::SendSlot(slot).encode();
        loop {
            let posted = match cq_data {
                None => self.fab.ep.send_tagged(buf, dest, tag.encode(), ctx),
                Some(d) => self
                    .fab
                    .ep
                    .send_tagged_data(buf, d, dest, tag.encode(), ctx),
            };
            match posted {
                Ok(()) => {
                    st.slot_sent(slot, peer);
                    return Ok(true);
                }
                Err(e) if e.is_again() => {
                    let again = stalled(st);
                    if again != Ok(true) {
                        st.send_free.push(slot);
                        return again;
                    }
                }
                Err(e) => {
                    st.send_free.push(slot);
                    return Err(ofi_status(e));
                }
            }
        }
    }

    /// `finalize`'s flush: what this node's calls reported sent leaves the provider before
    /// its endpoint closes, which discards whatever the provider still queues (tcp;ofi_rxm
    /// and sockets queue sends behind a full socket; shm serves a send's data from this
    /// process until the receiver has it). Each peer this node sent messages to gets a
    /// [`Kind::Flush`] marker, sent with a completion behind everything else to it (the
    /// provider keeps each peer's order, so its completion covers injected messages, which
    /// have none); then the node progresses until no send posted to a live peer run awaits
    /// its completion (sends still queued for credits are not posted from here on,
    /// `State::sends_flushed`: finalize discards them), up to `deadline`.
    pub(super) fn flush_sends(&self, deadline: Instant) {
        let mut backoff = self.backoff();
        let Ok(mut st) = self.live_state() else {
            return;
        };
        st.sends_flushed = true;
        let mut peers: Vec<u16> = st
            .remotes
            .iter()
            .filter(|(_, r)| r.window.granted_before())
            .map(|(&(peer, _), _)| peer)
            .collect();
        peers.sort_unstable();
        peers.dedup();
        let mut marked = 0;
        loop {
            self.progress(&mut st);
            while let Some(&peer) = peers.get(marked) {
                match self.send_flush_marker(&mut st, peer) {
                    Ok(true) => marked += 1,
                    Ok(false) => break,
                    // Not sent (the peer is gone, or the provider refused): nothing to wait
                    // for behind it.
                    Err(_) => marked += 1,
                }
            }
            if marked == peers.len() && !st.sends_in_flight_to_live_runs() {
                return;
            }
            drop(st);
            if backoff.wait(Some(deadline)).is_err() {
                return;
            }
            st = match self.live_state() {
                Ok(st) => st,
                Err(_) => return,
            };
        }
    }

    /// Posts a [`Kind::Flush`] marker to `peer` from a send slot: `Ok(false)` when no slot
    /// is free or the provider has no room now (try again after progress).
    fn send_flush_marker(&self, st: &mut State, peer: u16) -> std::result::Result<bool, ()> {
        let Some(p) = st.peers.get(peer as usize).filter(|p| p.is_alive()) else {
            return Err(());
        };
        let (addr, token, index) = (p.addr, p.fabric_token, p.index_at_peer);
        let Some(slot) = st.send_free.pop() else {
            return Ok(false);
        };
        let bytes = encode_control(control_tag(Kind::Flush, (0, 0), index), token);
        let offset = slot as usize * EAGER_SLOT;
        let posted = self
            .fab
            .send_pool
            .write(offset, &bytes)
            .and_then(|()| self.fab.send_pool.slice(offset, bytes.len()))
            .and_then(|buf| {
                let ctx = Context::SendSlot(slot).encode();
                self.fab.ep.send(buf, Some(0), addr, ctx)
            });
        match posted {
            Ok(()) => {
                st.slot_sent(slot, peer);
                Ok(true)
            }
            Err(e) => {
                st.send_free.push(slot);
                if e.is_again() {
                    Ok(false)
                } else {
                    Err(())
                }
            }
        }
    }
}
