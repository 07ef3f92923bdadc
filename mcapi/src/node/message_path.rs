//! The message data path: queued sends and credits, arrivals, receives taking messages.

use super::common::{ofi_status, Result, EAGER_SLOT, MAX_MSG_SIZE, NUM_PRIORITIES};
use super::credit_plane::{control_tag, queue_control, EPOCH_UNKNOWN};
use super::fetch::FetchOutcome;
use super::inner::NodeInner;
use super::rendezvous::{Msg, DESC_LEN, NO_STAGING, RNDV_MARK};
use super::seq::widen;
use super::state::{Arrived, LocalEndpoint, Req, State, TakenSlot, LOCAL_PEER, LOCAL_SLOT};
use crate::semantics::credit::SenderId;
use crate::semantics::request::{RequestHandle, RequestState};
use crate::semantics::wire::{Context, Kind, Tag};
use crate::semantics::Status;
use mcapi_ofi::Completion;

impl NodeInner {
    /// Copies a message (an eager one, or a staged one's descriptor) into a send slot and
    /// queues it as a request. The request owns a staged message's staging from then on
    /// (freed if it fails or is withdrawn).
    pub(super) fn queue_send(
        &self,
        st: &mut State,
        remote: (u16, u32),
        priority: u8,
        msg: Msg<'_>,
    ) -> Result<RequestHandle> {
        let slot = match st.send_free.pop() {
            Some(slot) => slot,
            None => {
                // Slots of sends already made come back with their completions: read them
                // before refusing (a loop of `msg_send_i` + `wait` reads no CQ otherwise).
                self.progress(st);
                st.send_free.pop().ok_or(Status::MCAPI_ERR_MEM_LIMIT)?
            }
        };
        let rndv = match msg {
            Msg::Eager(_) => NO_STAGING,
            Msg::Staged { id, .. } => id,
        };
        let req = Req::Send {
            remote,
            priority,
            slot,
            len: msg.len(),
            rndv,
        };
        let h = match st.requests.alloc(req) {
            Ok(h) => h,
            Err(e) => {
                st.send_free.push(slot);
                return Err(e);
            }
        };
        let written = match msg {
            Msg::Eager(data) => self.fab.send_pool.write(slot as usize * EAGER_SLOT, data),
            Msg::Staged { desc, .. } => self.fab.send_pool.write(slot as usize * EAGER_SLOT, &desc),
        };
        if let Err(e) = written {
            // Never: a free send slot has no send in flight.
            _ = st.requests.release(h);
            st.send_free.push(slot);
            return Err(ofi_status(e));
        }
        st.pending_sends.push_back(h);
        Ok(h)
    }

    /// A queued send that is over (sent, failed or withdrawn): its slot goes back, and a
    /// staged message's staging unless it was sent (its receiver releases it then).
    pub(super) fn send_finished(&self, st: &mut State, slot: u32, rndv: u64, sent: bool) {
        if !sent {
            st.send_free.push(slot);
            if rndv != NO_STAGING {
                st.rndv.release(rndv, None);
            }
        }
    }

    /// Posts queued sends that have credits now, in order per destination; asks for
    /// credits (over the fabric) where a destination has none.
    pub(super) fn advance_sends(&self, st: &mut State) {
        if st.sends_flushed {
            return;
        }
        let mut i = 0;
        let mut blocked: [(u16, u32); 8] = [(u16::MAX, 0); 8];
        let mut nblocked = 0;
        while i < st.pending_sends.len() {
            let h = st.pending_sends[i];
            let Ok(&Req::Send {
                remote,
                priority,
                slot,
                len,
                rndv,
            }) = st.requests.get(h)
            else {
                st.pending_sends.remove(i);
                continue;
            };
            if blocked[..nblocked].contains(&remote) {
                i += 1;
                continue;
            }
            if remote.0 == LOCAL_PEER {
                let pool = &self.fab.send_pool;
                let staged = (rndv != NO_STAGING)
                    .then(|| st.rndv.region(rndv).cloned())
                    .flatten();
                let fill = |buf: &mut [u8]| {
                    // A send slot queued for this node is in no operation, nor is a
                    // staging region.
                    let read = match &staged {
                        Some(region) => region.read(0, buf),
                        None => pool.read(slot as usize * EAGER_SLOT, buf),
                    };
                    debug_assert!(read.is_ok(), "{read:?}");
                };
                match self.deliver_local(st, remote.1, priority, len, fill) {
                    Ok(true) => {
                        st.requests
                            .complete_if_pending(h, Status::MCAPI_SUCCESS, len);
                        self.send_finished(st, slot, rndv, false);
                        st.pending_sends.remove(i);
                    }
                    Ok(false) => {
                        if nblocked < blocked.len() {
                            blocked[nblocked] = remote;
                            nblocked += 1;
                        }
                        i += 1;
                    }
                    Err(e) => {
                        st.requests.complete_if_pending(h, e, 0);
                        self.send_finished(st, slot, rndv, false);
                        st.pending_sends.remove(i);
                    }
                }
                continue;
            }
            let peer = remote.0;
            let index = st.peers[peer as usize].index_at_peer;
            let dest = st.peers[peer as usize].addr;
            let alive = st.peers[peer as usize].is_alive();
            let Some(r) = st.remotes.get_mut(&remote) else {
                st.requests
                    .complete_if_pending(h, Status::MCAPI_ERR_ENDP_INVALID, 0);
                self.send_finished(st, slot, rndv, false);
                st.pending_sends.remove(i);
                continue;
            };
            if !alive {
                st.requests
                    .complete_if_pending(h, Status::MCAPI_ERR_TRANSMISSION, 0);
                self.send_finished(st, slot, rndv, false);
                st.pending_sends.remove(i);
                continue;
            }
            if !r.take_credit() {
                if r.window.needs_request() {
                    let seen = r.window.request_sent();
                    r.asked_at = Some(std::time::Instant::now());
                    let want = self.config.recv_buffers as u64;
                    let mut tag = control_tag(Kind::Request, (remote.1, r.epoch), index);
                    if !r.epoch_known {
                        tag.priority = EPOCH_UNKNOWN;
                    }
                    st.outbox
                        .push_back((peer, tag, want << 32 | u64::from(seen)));
                }
                if nblocked < blocked.len() {
                    blocked[nblocked] = remote;
                    nblocked += 1;
                }
                i += 1;
                continue;
            }
            let seq = r.next_seq;
            r.next_seq = seq.wrapping_add(1);
            let tag = Tag {
                kind: Kind::Message,
                priority,
                port: remote.1,
                peer: index,
                seq,
            };
            let wire_len = if rndv == NO_STAGING { len } else { DESC_LEN };
            let Ok(buf) = self
                .fab
                .send_pool
                .slice(slot as usize * EAGER_SLOT, wire_len)
            else {
                give_back(st, remote, seq);
                break;
            };
            let ctx = Context::SendSlot(slot).encode();
            // What fits is injected (a descriptor, a small message): its slot is free at
            // once and no completion has to be read for it.
            let inject = wire_len <= st.inject_scratch.len();
            let cq_data = self.fab.message_cq_data(rndv != NO_STAGING);
            let posted = if inject {
                let bytes = &mut st.inject_scratch[..wire_len];
                let read = self.fab.send_pool.read(slot as usize * EAGER_SLOT, bytes);
                debug_assert!(read.is_ok(), "{read:?}");
                match cq_data {
                    None => self.fab.ep.inject_tagged(bytes, dest, tag.encode()),
                    Some(d) => self.fab.ep.inject_tagged_data(bytes, d, dest, tag.encode()),
                }
            } else {
                match cq_data {
                    None => self.fab.ep.send_tagged(buf, dest, tag.encode(), ctx),
                    Some(d) => self
                        .fab
                        .ep
                        .send_tagged_data(buf, d, dest, tag.encode(), ctx),
                }
            };
            match posted {
                Ok(()) => {
                    if inject {
                        st.send_free.push(slot);
                    } else {
                        st.slot_sent(slot, peer);
                    }
                    // A lent buffer's send completes when its receiver is done with it.
                    if rndv == NO_STAGING || !st.rndv.is_lent(rndv) {
                        st.requests
                            .complete_if_pending(h, Status::MCAPI_SUCCESS, len);
                    }
                    st.pending_sends.remove(i);
                }
                Err(e) if e.is_again() => {
                    // Give the credit and sequence number back; retry on the next progress.
                    give_back(st, remote, seq);
                    break;
                }
                Err(_) => {
                    // Never sent: its credit and number stay unused (the receiver would
                    // wait for that number for good).
                    give_back(st, remote, seq);
                    st.requests
                        .complete_if_pending(h, Status::MCAPI_ERR_TRANSMISSION, 0);
                    self.send_finished(st, slot, rndv, false);
                    st.pending_sends.remove(i);
                }
            }
        }
    }

    /// Completes a pending receive request if it is the oldest on its endpoint and a
    /// message is queued; a buffer too small completes it with `MCAPI_ERR_MSG_TRUNCATED`
    /// and leaves the message queued. A request posted with a buffer uses it when `buf` is
    /// `None`, and has a rendezvous message read into it rather than staged.
    pub(super) fn try_complete(
        &self,
        st: &mut State,
        request: RequestHandle,
        buf: Option<&mut [u8]>,
    ) -> Result<()> {
        let (port, posted) = match (st.requests.state(request)?, st.requests.get(request)) {
            (RequestState::Pending, Ok(Req::Recv { port, posted, .. })) => {
                (*port, posted.is_some())
            }
            _ => return Ok(()),
        };
        if st.reading_into(request) {
            // Its message is being read into its buffer (by a waiter, or bound to it): it
            // completes with the read, even if its endpoint was deleted meanwhile; the
            // provider may write the buffer until then.
            return Ok(());
        }
        let Some(ep) = st.endpoints.get(&port) else {
            st.requests
                .complete(request, Status::MCAPI_ERR_ENDP_INVALID, 0)?;
            return Ok(());
        };
        if ep.pending_recvs.front() != Some(&request)
            && !self.older_posted_done(st, port, request)?
        {
            // Not its turn.
            return Ok(());
        }
        if posted && self.bind_posted(st, port, None) {
            // Its message is being read into its buffer: it completes with the read.
            return Ok(());
        }
        let mut own = None;
        let buf = match buf {
            Some(buf) => buf,
            None => {
                let posted = st.take_posted(request).ok_or(Status::MCAPI_ERR_PARAMETER)?;
                if posted.reading() {
                    // Never (a request whose message is read into its buffer has left the
                    // receives pending): it completes with the read.
                    st.restore_posted(request, posted);
                    return Ok(());
                }
                own.insert(posted).as_mut_slice().unwrap_or_default()
            }
        };
        let taken = self.take_message(st, port, buf);
        if let Some(own) = own {
            st.restore_posted(request, own);
        }
        let outcome = match taken {
            Ok(Some(n)) => Some((Status::MCAPI_SUCCESS, n)),
            Ok(None) => None,
            // Truncated (the message stays queued) or lost (`MCAPI_ERR_TRANSMISSION`: taken
            // with its error): the request ends with it either way.
            Err(e) => Some((e, 0)),
        };
        if let Some((status, n)) = outcome {
            st.requests.complete(request, status, n)?;
            if let Some(ep) = st.endpoints.get_mut(&port) {
                ep.pending_recvs.pop_front();
            }
        }
        Ok(())
    }

    /// Completes the receives of `port` older than `request` that were posted with their
    /// buffers (C's `mcapi_msg_recv_i`, `msg_recv_i_into`) from the queued messages, oldest
    /// first, as posted receives do: a wait on a later one does not wait for a test of the
    /// older ones. `true` once `request` is the oldest; `false` if an older one stays (one
    /// without a buffer, no message for it, or its message being read into its buffer).
    fn older_posted_done(&self, st: &mut State, port: u32, request: RequestHandle) -> Result<bool> {
        loop {
            let front = match st
                .endpoints
                .get(&port)
                .and_then(|ep| ep.pending_recvs.front())
            {
                Some(&front) if front == request => return Ok(true),
                Some(&front) => front,
                None => return Ok(false),
            };
            if !matches!(
                st.requests.get(front),
                Ok(Req::Recv {
                    posted: Some(_),
                    ..
                })
            ) {
                return Ok(false);
            }
            self.try_complete(st, front, None)?;
            let still = st
                .endpoints
                .get(&port)
                .and_then(|ep| ep.pending_recvs.front());
            if still == Some(&front) {
                return Ok(false);
            }
        }
    }

    /// Copies the next message of `port` into `buf` and leaves its slot in `State::taken`
    /// (see [`NodeInner::repost_taken`]); `Ok(None)` if none is queued.
    pub(super) fn take_message(
        &self,
        st: &mut State,
        port: u32,
        buf: &mut [u8],
    ) -> Result<Option<usize>> {
        if st.taken.is_some() {
            self.repost_taken(st);
        }
        let ep = st
            .endpoints
            .get_mut(&port)
            .ok_or(Status::MCAPI_ERR_ENDP_INVALID)?;
        let Some(head) = ep.queue.peek().copied() else {
            return Ok(None);
        };
        let len = head.len as usize;
        if len > buf.len() {
            return Err(Status::MCAPI_ERR_MSG_TRUNCATED);
        }
        if head.slot & LOCAL_SLOT != 0 {
            ep.queue.pop();
            // From this node: copied out of its buffer, nothing to post or credit.
            let i = head.slot & !LOCAL_SLOT;
            buf[..len].copy_from_slice(&ep.local_bufs[i as usize][..len]);
            if ep.local_bufs[i as usize].len() > EAGER_SLOT {
                // A large message's buffer is not kept: the endpoint's memory stays N x
                // the eager size however large the messages it was sent.
                ep.local_bufs[i as usize] = Vec::new();
            }
            ep.local_free.push(i);
            ep.credits.local_consumed();
            if ep.credits.has_waiters() {
                self.settle_credits(st, port);
            }
            if !st.pending_sends.is_empty() {
                self.advance_sends(st);
            }
            return Ok(Some(len));
        }
        // The message is the caller's now; its slot goes back to the fabric later.
        let taken = TakenSlot {
            port,
            epoch: ep.epoch,
            slot: head.slot,
            peer: head.peer,
        };
        if head.rndv {
            return self.take_rendezvous(st, port, head, taken, &mut buf[..len]);
        }
        ep.queue.pop();
        let read = self
            .fab
            .recv_pool
            .read(head.slot as usize * EAGER_SLOT, &mut buf[..len]);
        st.taken = Some(taken);
        read.map_err(ofi_status)?;
        Ok(Some(len))
    }

    /// Taking a rendezvous message: its data copied out of receive staging once its read
    /// is done (`Ok(None)` until then: the message stays at the head of its queue). A read
    /// that failed, or whose sender's run is gone, consumes the message with its error.
    #[cold]
    #[inline(never)]
    fn take_rendezvous(
        &self,
        st: &mut State,
        port: u32,
        head: Arrived,
        taken: TakenSlot,
        out: &mut [u8],
    ) -> Result<Option<usize>> {
        if st.receiving_in_place == Some(port) {
            if let Some(read) = self.take_for_in_place(st, head, taken) {
                // The blocking receive reads it into its own buffer, without the lock.
                st.in_place_read = Some(read);
                return Ok(None);
            }
        }
        let outcome = match self.take_fetched(st, head.slot, head.peer, port, out) {
            FetchOutcome::Pending => return Ok(None),
            FetchOutcome::Copied => Ok(Some(out.len())),
            FetchOutcome::Failed(e) => Err(e),
        };
        if let Some(ep) = st.endpoints.get_mut(&port) {
            ep.queue.pop();
        }
        if st.taken.is_some() {
            // Another read (a posted receive's) ended meanwhile and took its slot.
            self.repost_taken(st);
        }
        st.taken = Some(taken);
        if st.rndv.fetches.reading > 0 || st.rndv.fetches.waiting() {
            // A receive that finds its message read takes it without looking at the CQ;
            // the reads behind it move only with our progress (manual-progress providers),
            // and those waiting for the room it freed start there.
            self.progress(st);
        } else if !st.outbox.is_empty() {
            self.flush_outbox(st);
        }
        outcome
    }

    /// For a blocking receive that found rendezvous message `head` at the head of its
    /// queue (its slot to go back as `taken`): takes it off the queue if nothing reads it
    /// yet, to be read straight into the receive's buffer ([`InPlace`]). `None`: the
    /// provider cannot, or its reads are under way (taken as usual).
    fn take_for_in_place(
        &self,
        st: &mut State,
        head: Arrived,
        taken: TakenSlot,
    ) -> Option<InPlace> {
        let len = head.len as usize;
        if !self.fab.reads_in_place || len > MAX_MSG_SIZE || !st.rndv.fetches.not_started(head.slot)
        {
            return None;
        }
        st.endpoints.get_mut(&taken.port)?.queue.pop();
        st.rndv.fetches.undefer(head.slot);
        let run = st.arrival_run(head.slot);
        Some(InPlace {
            desc: self.descriptor_in(head.slot),
            src: st.peers[head.peer as usize].addr,
            alive: st.run_alive((head.peer, run)),
            run,
            taken,
            len,
        })
    }

    /// A read in place ended (`read_ok`) or was never made: the sender is told, the
    /// descriptor's slot goes back (with the sender's credit) as a taken message's does.
    pub(super) fn in_place_done(
        &self,
        st: &mut State,
        read: &InPlace,
        read_ok: bool,
    ) -> Result<usize> {
        let t = read.taken;
        self.send_rndv_done(st, (t.peer, read.run), t.port, read.desc.id);
        if st.taken.is_some() {
            self.repost_taken(st);
        }
        st.taken = Some(t);
        if !st.outbox.is_empty() {
            self.flush_outbox(st);
        }
        if read_ok {
            st.read_in_place += 1;
            Ok(read.len)
        } else {
            Err(Status::MCAPI_ERR_TRANSMISSION)
        }
    }

    /// Queues a message of `len` bytes from one of this node's endpoints at local endpoint
    /// `port` (`fill` writes it): `Ok(false)` when the endpoint's N buffers are taken.
    /// Allocates a buffer only the first times an endpoint holds that many such messages
    /// at once (or a larger one).
    ///
    /// # Errors
    /// `MCAPI_ERR_ENDP_INVALID` (no such endpoint), `MCAPI_ERR_GENERAL` (connected to a
    /// channel, spec 3.6).
    pub(super) fn deliver_local(
        &self,
        st: &mut State,
        port: u32,
        priority: u8,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<bool> {
        let ep = st
            .endpoints
            .get_mut(&port)
            .ok_or(Status::MCAPI_ERR_ENDP_INVALID)?;
        if ep.channel.is_connected() {
            return Err(Status::MCAPI_ERR_GENERAL);
        }
        if !ep.credits.take_local() {
            // The buffers may be held by remote senders' unspent credits (a batch a sender
            // sits on) rather than by messages: they are recalled, so this node's own
            // sender gets room once they come back.
            ep.credits.recall_for_local();
            self.settle_credits(st, port);
            self.flush_outbox(st);
            return Ok(false);
        }
        let i = match ep.local_free.pop() {
            Some(i) => i,
            None => {
                ep.local_bufs.push(Vec::new());
                ep.local_bufs.len() as u32 - 1
            }
        };
        let buf = &mut ep.local_bufs[i as usize];
        if buf.len() < len {
            buf.resize(len, 0);
        }
        fill(&mut buf[..len]);
        let arrived = Arrived {
            slot: LOCAL_SLOT | i,
            len: len as u32,
            peer: LOCAL_PEER,
            priority,
            rndv: false,
        };
        // The endpoint's credits bound its queue to N, local messages included.
        let _ = ep.queue.push(priority as usize, arrived);
        Ok(true)
    }

    /// Gives the slot of the message taken last back to the pool and returns its sender's
    /// credit. Done by the next receive or CQ read rather than by the receive that took the
    /// message: a ping-pong's reply then goes out first (on shm the post costs about as much
    /// as a CQ read that delivers a message). A slot the provider refused to take back costs
    /// its credit (never returned: the sender must not count on a receive not posted).
    #[inline(never)]
    pub(super) fn repost_taken(&self, st: &mut State) {
        let Some(t) = st.taken.take() else {
            return;
        };
        let State {
            endpoints,
            peers,
            outbox,
            recv_free,
            recv_held,
            idle_slots,
            hungry,
            ..
        } = st;
        let Some(ep) = endpoints.get_mut(&t.port).filter(|ep| ep.epoch == t.epoch) else {
            // Deleted since: its credit went back with the endpoint, its slot is free now
            // (a slot the provider refuses takes that credit with it).
            st.recv_held = st.recv_held.saturating_sub(1);
            if !self.free_slot(st, t.slot, t.port) {
                st.recv_free = st.recv_free.saturating_sub(1);
            }
            return;
        };
        if !self.free_slot_of(idle_slots, *recv_held, *recv_free, t.slot, t.port) {
            // The credit stays with the endpoint's sender accounting, never returned.
            return;
        }
        // (A sender that left meanwhile has nothing to be credited.)
        _ = ep.credits.consumed(SenderId(u32::from(t.peer)));
        settle_pool(ep, t.port, peers, outbox, recv_free, hungry);
        if !st.hungry.is_empty() {
            self.feed_hungry(st);
        }
        if !st.outbox.is_empty() {
            self.flush_outbox(st);
        }
    }

    /// Receive slot `slot` (of a message to `port`) holds no message any more: it waits
    /// idle if the node's unlent credits allow, else it is posted again. `false`: the
    /// provider refused it (lost; the node takes one message fewer at once from now on).
    pub(super) fn free_slot(&self, st: &mut State, slot: u32, port: u32) -> bool {
        self.free_slot_of(&mut st.idle_slots, st.recv_held, st.recv_free, slot, port)
    }

    /// [`NodeInner::free_slot`] on the state's fields.
    #[inline(always)]
    fn free_slot_of(
        &self,
        idle_slots: &mut Vec<u32>,
        recv_held: u32,
        recv_free: u32,
        slot: u32,
        port: u32,
    ) -> bool {
        if idle_slots.len() as u32 + recv_held < recv_free {
            idle_slots.push(slot);
        } else if let Err(e) = self.fab.post_recv_slot(slot) {
            log::warn!("port {port}: a receive slot could not be posted again: {e}");
            return false;
        }
        true
    }

    /// Posts idle receive slots until at most the node's unlent credits less `reserve` (and
    /// less the slots still held for deleted endpoints, [`State::recv_held`]) are idle:
    /// every credit lent (and `reserve` more, about to be) has a slot posted or holding its
    /// message before it is granted. `false` if the provider refused a slot
    /// (it stays idle): nothing may be granted then.
    pub(super) fn post_for_lent(&self, st: &mut State, reserve: u32) -> bool {
        while st.idle_slots.len() as u32 + reserve + st.recv_held > st.recv_free {
            let Some(slot) = st.idle_slots.pop() else {
                // Slots still held (`recv_held`) stand for some of the free credits: no
                // slot for the rest yet.
                return false;
            };
            if let Err(e) = self.fab.post_recv_slot(slot) {
                log::warn!("a receive slot could not be posted: {e}");
                st.idle_slots.push(slot);
                return false;
            }
        }
        true
    }

    /// After the credit pool of endpoint `port` changed: its free credits go back to the
    /// node's pool, its decisions to the outbox, and endpoints whose senders wait get what
    /// the node has free.
    pub(super) fn settle_credits(&self, st: &mut State, port: u32) {
        let State {
            endpoints,
            peers,
            outbox,
            recv_free,
            hungry,
            ..
        } = st;
        if let Some(ep) = endpoints.get_mut(&port) {
            settle_pool(ep, port, peers, outbox, recv_free, hungry);
        }
        if !st.hungry.is_empty() {
            self.feed_hungry(st);
        }
    }

    /// Lends the node's free credits to endpoints whose senders wait, oldest first; when
    /// the node has none, recalls (once per dearth) the credits other endpoints' senders
    /// hold unspent, which come back as they answer.
    #[cold]
    fn feed_hungry(&self, st: &mut State) {
        let State {
            endpoints,
            peers,
            outbox,
            recv_free,
            recv_held,
            hungry,
            recalled,
            ..
        } = st;
        while let Some(&port) = hungry.front() {
            let Some(ep) = endpoints.get_mut(&port).filter(|e| e.credits.has_waiters()) else {
                hungry.pop_front();
                continue;
            };
            let lendable = recv_free.saturating_sub(*recv_held);
            if lendable == 0 {
                break;
            }
            *recv_free -= ep.credits.lend(lendable);
            *recv_free += ep.credits.reclaim();
            while let Some(ctl) = ep.credits.poll() {
                queue_control(peers, outbox, (port, ep.epoch), ctl);
            }
            if ep.credits.has_waiters() {
                // Full (N lent) while its senders still wait: they wait for their own
                // messages to be consumed.
                if *recv_free > 0 {
                    hungry.pop_front();
                    continue;
                }
                break;
            }
            hungry.pop_front();
        }
        if hungry.is_empty() {
            if std::mem::take(recalled) {
                for ep in endpoints.values_mut() {
                    ep.credits.stop_draining();
                }
            }
        } else if !*recalled {
            *recalled = true;
            for (&port, ep) in endpoints.iter_mut() {
                if ep.credits.has_waiters() {
                    continue;
                }
                ep.credits.recall_all();
                ep.credits.drain();
                *recv_free += ep.credits.reclaim();
                while let Some(ctl) = ep.credits.poll() {
                    queue_control(peers, outbox, (port, ep.epoch), ctl);
                }
            }
            if *recv_free > 0 {
                self.feed_hungry(st);
            }
        }
    }

    pub(super) fn message_arrived(&self, st: &mut State, slot: u32, c: &Completion) {
        let Some(tag) = Tag::decode(c.tag()) else {
            self.free_slot(st, slot, 0);
            return;
        };
        let port = tag.port;
        let Some(sender) = st.peers.get(tag.peer as usize) else {
            // From no peer of ours (a stranger or a corrupt tag): dropped. It used a receive
            // posted for a credit lent, so that receive is posted again.
            if let Err(e) = self.fab.post_recv_slot(slot) {
                log::warn!("port {port}: a receive slot could not be posted again: {e}");
            }
            return;
        };
        let rndv = self.fab.cq_data(c) == Some(RNDV_MARK);
        if rndv {
            st.slot_run[slot as usize] = sender.life.incarnation().unwrap_or(0);
        }
        // A message for a deleted endpoint (discarded, spec 4.2.2): its sender spent a
        // credit the delete counted as a stray.
        let Some(ep) = st.endpoints.get_mut(&port) else {
            self.rndv_dropped(st, slot, tag.peer, port, c);
            self.stray_arrived(st, slot, port);
            return;
        };
        let mut arrived = Arrived {
            slot,
            len: c.len() as u32,
            peer: tag.peer,
            priority: tag.priority,
            rndv: false,
        };
        // Our senders never send these; a peer that does breaks the protocol (the message
        // is dropped below, as a duplicate is).
        let mut malformed = tag.priority as u32 >= NUM_PRIORITIES;
        if rndv {
            // A rendezvous descriptor: queued in the message's place, with its length.
            arrived.rndv = true;
            let len = self.descriptor_in(slot).len;
            malformed |= c.len() != DESC_LEN || len > MAX_MSG_SIZE as u64;
            arrived.len = len as u32;
        }
        if ep.credits.arrived(SenderId(u32::from(tag.peer))).is_err() {
            // A message without a credit: for an endpoint deleted before this one was
            // created at its port (a stray), or a protocol violation. Drop it, keep the slot.
            log::info!(
                "port {port}: dropped a message of peer {} sent without a credit",
                tag.peer
            );
            self.rndv_dropped(st, slot, tag.peer, port, c);
            self.stray_arrived(st, slot, port);
            return;
        }
        let LocalEndpoint { reorder, queue, .. } = ep;
        // Completion order is not delivery order on most providers: release in sequence.
        let wire = tag.seq;
        let accepted = !malformed
            && match reorder.accept_relative(tag.peer, |next| widen(next, wire), arrived) {
                Ok(ready) => {
                    for a in ready {
                        // Credits bound the queue to its slots, so it has room.
                        let _ = queue.push(a.priority as usize, a);
                    }
                    true
                }
                Err(_) => false,
            };
        if accepted {
            if arrived.rndv {
                self.rendezvous_arrived(st, slot, tag.peer, port);
            }
        } else {
            // A duplicate, a number far ahead or a malformed message: a protocol violation
            // (credits bound what a sender has in flight, and so the window and the keys).
            // Drop it, keep the slot and the credit.
            log::info!(
                "port {port}: dropped a duplicate or out-of-window message of peer {}",
                tag.peer
            );
            // A rendezvous descriptor's sender is told, as for a stray (one sent to the
            // endpoint deleted before this one was created at the port, still on its way
            // when the sender's credits of this one let it pass): its staging is freed and
            // its request ends, instead of waiting for a read that never comes.
            self.rndv_dropped(st, slot, tag.peer, port, c);
            // (A slot the provider refuses keeps the credit: never lent without a slot.)
            if self.free_slot(st, slot, port) {
                if let Some(ep) = st.endpoints.get_mut(&port) {
                    _ = ep.credits.consumed(SenderId(u32::from(tag.peer)));
                }
                self.settle_credits(st, port);
            }
        }
    }

    /// A rendezvous message arrived in `slot`: read ahead, unless it is at the head of a
    /// queue that blocking receives wait on (the next of them reads it in place).
    #[cold]
    fn rendezvous_arrived(&self, st: &mut State, slot: u32, peer: u16, port: u32) {
        if self.bind_posted(st, port, Some(slot)) {
            return;
        }
        let for_receive = st.waiting_receives.on(port)
            && st
                .endpoints
                .get(&port)
                .and_then(|e| e.queue.peek())
                .is_some_and(|h| h.slot == slot);
        if for_receive {
            st.waiting_receives.leave_unread();
        } else {
            self.prefetch(st, slot, peer, port);
        }
    }

    /// A blocking receive (or a wait on a receive posted with its buffer) on `port` ends:
    /// if it was the last, a rendezvous message left at the head of the port's queue
    /// unread for it (the receive timed out, or its buffer was too small) is read ahead as
    /// any other, so its sender goes on.
    #[inline]
    pub(super) fn receive_left(&self, st: &mut State, port: u32) {
        if st.waiting_receives.leave(port) {
            self.read_ahead_left(st, port);
        }
    }

    #[cold]
    fn read_ahead_left(&self, st: &mut State, port: u32) {
        // Not only the head: a message of higher priority may have come in front of the
        // one left unread meanwhile.
        let unread: Vec<_> = match st.endpoints.get(&port) {
            Some(e) => e
                .queue
                .iter()
                .filter(|h| h.rndv && h.slot & LOCAL_SLOT == 0)
                .filter(|h| st.rndv.fetches.not_listed(h.slot))
                .map(|h| (h.slot, h.peer))
                .collect(),
            None => return,
        };
        for (slot, peer) in unread {
            self.prefetch(st, slot, peer, port);
        }
    }

    /// A message that arrived in `slot` is dropped: if it is a rendezvous descriptor, its
    /// sender is told to free the data.
    #[cold]
    fn rndv_dropped(&self, st: &mut State, slot: u32, peer: u16, port: u32, c: &Completion) {
        if self.fab.cq_data(c) == Some(RNDV_MARK) {
            let id = self.descriptor_in(slot).id;
            self.send_rndv_done(st, (peer, st.arrival_run(slot)), port, id);
        }
    }

    /// A message nobody takes arrived in `slot`: the slot is freed, and a credit a
    /// deleted endpoint's sender spent on it goes back to the node.
    #[cold]
    fn stray_arrived(&self, st: &mut State, slot: u32, port: u32) {
        if !self.free_slot(st, slot, port) {
            // Lost: the stray's credit stays counted, never lent without a slot.
            return;
        }
        if st.recv_strays > 0 {
            st.recv_strays -= 1;
            st.recv_free += 1;
        }
        if !st.hungry.is_empty() {
            self.feed_hungry(st);
        }
    }
}

/// A send to `remote` that took credit and sequence number `seq` was not made: both stay
/// unused.
pub(super) fn give_back(st: &mut State, remote: (u16, u32), seq: u16) {
    if let Some(r) = st.remotes.get_mut(&remote) {
        r.spare += 1;
        r.next_seq = seq;
    }
}

/// After endpoint `port`'s credit pool changed: its free credits go back to the node, it is
/// listed hungry if its senders wait, and its decisions go to the outbox.
#[inline(always)]
fn settle_pool(
    ep: &mut LocalEndpoint,
    port: u32,
    peers: &[super::state::Peer],
    outbox: &mut std::collections::VecDeque<(u16, Tag, u64)>,
    recv_free: &mut u32,
    hungry: &mut std::collections::VecDeque<u32>,
) {
    *recv_free += ep.credits.reclaim();
    if ep.credits.has_waiters() && !hungry.contains(&port) {
        hungry.push_back(port);
    }
    while let Some(ctl) = ep.credits.poll() {
        queue_control(peers, outbox, (port, ep.epoch), ctl);
    }
}

/// A rendezvous message taken off its queue by a blocking receive, to be read straight into
/// its buffer (`Endpoint::read_in_place`): no staging, no copy.
pub(super) struct InPlace {
    pub(super) desc: super::rendezvous::Descriptor,
    pub(super) src: mcapi_ofi::FiAddr,
    /// Whether its sender's run (`run`, the one that sent it) was alive when it was taken
    /// (else it is not read).
    pub(super) alive: bool,
    run: u64,
    taken: TakenSlot,
    pub(super) len: usize,
}

impl InPlace {
    /// Its sender and the run that sent it.
    pub(super) fn sender(&self) -> super::state::PeerRun {
        (self.taken.peer, self.run)
    }
}

#[cfg(test)]
mod tests {
    use super::super::credit_plane::control_tag;
    use super::super::rendezvous::RNDV_MARK;
    use crate::node::test_pair::sender_and_receiver;
    use crate::semantics::request::RequestHandle;
    use crate::semantics::wire::{Kind, Tag};
    use crate::{EndpointId, Node};
    use mcapi_ofi::RecvBuffer;
    use std::collections::HashSet;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    /// Messages and credit requests whose tags no sender of ours makes (a peer index no
    /// peer has, a priority that does not exist, a rendezvous descriptor of the wrong
    /// length) are dropped without a panic or a change a later message could notice: the
    /// sender's next message arrives, in order, and every credit lent has its slot.
    #[test]
    fn messages_with_forged_tags_change_nothing() {
        for provider in ["shm", "tcp"] {
            let (a, b, tx, rx, to) = sender_and_receiver(provider, "forged", (14, 15), Some(8));
            let mut buf = [0u8; 64];
            a.msg_send(tx, to, b"first", 0).expect("send");
            assert_eq!(b.msg_recv(rx, &mut buf), Ok(5), "{provider}");
            let (addr, index, seq) = {
                let st = a.inner.state.lock().expect("state");
                let peer = st.peer_of[&(0, 15)];
                let p = &st.peers[peer as usize];
                (p.addr, p.index_at_peer, st.remotes[&(peer, 1)].next_seq)
            };
            let forge = |priority: u8, peer: u16, data: &[u8], rndv: bool| {
                let tag = Tag {
                    kind: Kind::Message,
                    priority,
                    port: 1,
                    peer,
                    seq,
                }
                .encode();
                let ep = &a.inner.fab.ep;
                let sent = if rndv {
                    ep.inject_tagged_data(data, RNDV_MARK, addr, tag)
                } else {
                    ep.inject_tagged(data, addr, tag)
                };
                sent.expect("a forged message");
            };
            // A credit request in a stranger's name first (were it granted, the stranger's
            // messages below would pass the credit check).
            let request = control_tag(Kind::Request, (1, 0), 9999)
                .encode()
                .to_le_bytes();
            a.inner
                .fab
                .ep
                .inject_data(&request, 8 << 32, addr)
                .expect("a forged credit request");
            for _ in 0..20 {
                assert_eq!(b.msg_available(rx), Ok(0), "{provider}");
                std::thread::sleep(Duration::from_millis(2));
            }
            forge(0, 9999, b"stranger", false);
            forge(0, 9999, &[0; 32], true);
            forge(9, index, b"priority", false);
            forge(0, index, &[1; 5], true);
            for _ in 0..50 {
                assert_eq!(b.msg_available(rx), Ok(0), "{provider}");
                std::thread::sleep(Duration::from_millis(2));
            }
            a.msg_send(tx, to, b"second", 0).expect("send");
            assert_eq!(b.msg_recv(rx, &mut buf), Ok(6), "{provider}");
            assert_eq!(&buf[..6], b"second", "{provider}");
            let st = b.inner.state.lock().expect("state");
            assert!(st.idle_slots.len() as u32 + st.recv_held <= st.recv_free);
            drop(st);
            a.finalize().expect("finalize");
            b.finalize().expect("finalize");
        }
    }

    /// Two tcp nodes connected and a 4 MiB rendezvous message sent by `msg_send_i`, with
    /// both background threads held: the sender's, since over tcp its progress serves the
    /// receiver's reads (they wait while it is held), and the receiver's, so that only the
    /// test's calls read its CQ (else the descriptor may be read ahead before the test's
    /// receive is there). Returns the nodes, the receiving endpoint, the send and its data.
    fn held_rendezvous(
        job: &str,
        ids: (u32, u32),
    ) -> (Node, Node, EndpointId, RequestHandle, Vec<u8>) {
        let (a, b, tx, rx, to) = sender_and_receiver("tcp", job, ids, None);
        let mut small = [0u8; 8];
        a.msg_send(tx, to, b"hi", 0).expect("send");
        assert_eq!(b.msg_recv(rx, &mut small), Ok(2));
        a.inner.hold_background.store(true, Ordering::Relaxed);
        b.inner.hold_background.store(true, Ordering::Relaxed);
        let data = vec![ids.0 as u8; 4 << 20];
        let send = a.msg_send_i(tx, to, &data, 0).expect("send");
        (a, b, rx, send, data)
    }

    /// A receive whose rendezvous message is being read into its buffer stays pending when
    /// its endpoint is deleted, until the reads end (the provider writes the buffer until
    /// then), and then completes with them.
    #[test]
    fn a_receive_being_read_into_completes_with_the_read_after_its_endpoint_is_deleted() {
        let (a, b, rx, send, data) = held_rendezvous("bound-delete", (16, 17));
        let len = data.len();
        let buf = RecvBuffer::from_static(Box::leak(vec![0u8; len].into_boxed_slice()));
        let r = b.msg_recv_i_into(rx, buf).expect("receive");
        let bound = (0..5000).any(|_| {
            assert_eq!(b.test(r, None), Ok(None));
            std::thread::sleep(Duration::from_millis(1));
            b.inner.state.lock().expect("state").reading_into(r)
        });
        assert!(bound, "the message was not bound to the receive");
        b.endpoint_delete(rx).expect("delete");
        for _ in 0..20 {
            assert_eq!(b.test(r, None), Ok(None), "completed while being read into");
            std::thread::sleep(Duration::from_millis(1));
        }
        a.inner.hold_background.store(false, Ordering::Relaxed);
        b.inner.hold_background.store(false, Ordering::Relaxed);
        let wait = Some(Duration::from_secs(60));
        let (n, mut buf) = b.wait_into(r, wait).expect("the read's end");
        assert_eq!(n, len);
        assert!(buf.as_mut_slice().expect("read")[..len] == data[..]);
        assert_eq!(a.wait(send, None, wait), Ok(len));
        a.finalize().expect("finalize");
        b.finalize().expect("finalize");
    }

    /// A `wait` reading its receive's message in place when the endpoint is deleted ends
    /// with the read (the message left the queue before the delete), not with an error
    /// for a request the delete completed under it.
    #[test]
    fn a_wait_reading_in_place_ends_with_the_read_after_its_endpoint_is_deleted() {
        let (a, b, rx, send, data) = held_rendezvous("in-place-delete", (18, 19));
        let len = data.len();
        let r = b.msg_recv_i(rx).expect("receive");
        let waiter = {
            let b = b.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; len];
                let n = b.wait(r, Some(&mut buf), Some(Duration::from_secs(60)));
                (n, buf)
            })
        };
        let reading = (0..5000).any(|_| {
            std::thread::sleep(Duration::from_millis(1));
            b.inner.state.lock().expect("state").reading_into(r)
        });
        assert!(reading, "the waiter did not read in place");
        b.endpoint_delete(rx).expect("delete");
        std::thread::sleep(Duration::from_millis(20));
        a.inner.hold_background.store(false, Ordering::Relaxed);
        b.inner.hold_background.store(false, Ordering::Relaxed);
        let (n, buf) = waiter.join().expect("the waiter");
        assert_eq!(n, Ok(len));
        assert!(buf == data);
        assert_eq!(a.wait(send, None, Some(Duration::from_secs(60))), Ok(len));
        a.finalize().expect("finalize");
        b.finalize().expect("finalize");
    }

    /// Receive slots are posted as credits are lent, and a slot freed goes back before the
    /// idle ones: a ping-pong's messages keep landing in the few slots its sender's credits
    /// stand for (memory still in cache), not in each of the node's slots in turn.
    #[test]
    fn messages_land_in_the_slots_their_credits_stand_for() {
        for provider in ["shm", "tcp"] {
            let (a, b, tx, rx, to) = sender_and_receiver(provider, "slot-reuse", (10, 11), Some(8));
            let slots = b.inner.fab.recv_slots as usize;
            let mut used = HashSet::new();
            let mut buf = [0u8; 64];
            for i in 0..3 * slots {
                a.msg_send(tx, to, &[i as u8; 64], 0).expect("send");
                assert_eq!(b.msg_recv(rx, &mut buf), Ok(64));
                assert_eq!(buf, [i as u8; 64], "{provider}: message {i}");
                let st = b.inner.state.lock().expect("state");
                used.insert(st.taken.expect("the slot taken last").slot);
                assert!(
                    st.idle_slots.len() as u32 + st.recv_held <= st.recv_free,
                    "{provider}: more slots idle than credits unlent"
                );
            }
            // At most N = 8 credits are lent to the one sender at a time.
            assert!(
                used.len() <= 8,
                "{provider}: {} of {slots} slots used",
                used.len()
            );
            a.finalize().expect("finalize");
            b.finalize().expect("finalize");
        }
    }

    /// A blocking rendezvous `msg_send` over shm (sent in place: it returns at the
    /// receiver's RndvDone) must return while the receiving node's application polls
    /// another endpoint with `test`: the receiver has a buffer for the message (credits),
    /// so nothing in MCAPI lets the send wait for a receive on its endpoint.
    #[test]
    fn a_large_send_returns_while_its_receiver_polls_another_endpoint() {
        let (a, b, tx, rx, to) = sender_and_receiver("shm", "poll-elsewhere", (20, 21), None);
        assert!(a.sends_in_place(), "shm here sends in place");
        let other = b.endpoint_create(2).expect("endpoint");
        let to_other = a.endpoint_get(0, 21, 2, None).expect("the other endpoint");
        let mut small = [0u8; 8];
        a.msg_send(tx, to, b"hi", 0).expect("send");
        assert_eq!(b.msg_recv(rx, &mut small), Ok(2));
        let len = 1 << 20;
        let sender = {
            let a = a.clone();
            std::thread::spawn(move || {
                let data = vec![5u8; len];
                a.msg_send(tx, to, &data, 0)?;
                a.msg_send(tx, to_other, b"go", 0)
            })
        };
        let r = b.msg_recv_i(other).expect("receive");
        let start = std::time::Instant::now();
        let until = start + Duration::from_secs(10);
        let got = loop {
            match b.test(r, Some(&mut small)) {
                Ok(Some(n)) => break Some(n),
                Ok(None) => {}
                Err(e) => panic!("{e:?}"),
            }
            if std::time::Instant::now() > until {
                break None;
            }
        };
        // Release the sender either way (a receive on its endpoint reads the message).
        let mut big = vec![0u8; len];
        assert_eq!(b.msg_recv(rx, &mut big), Ok(len));
        sender.join().expect("sender").expect("sends");
        if got.is_none() {
            assert_eq!(
                b.wait(r, Some(&mut small), Some(Duration::from_secs(10))),
                Ok(2)
            );
        }
        a.finalize().expect("finalize");
        b.finalize().expect("finalize");
        assert_eq!(
            got,
            Some(2),
            "the sender's msg_send never returned while the receiver polled for 10 s"
        );
    }

    /// A rendezvous message left unread for a waiting receive is read ahead when
    /// that receive leaves without it (design: `receive_left`), also when a message of
    /// higher priority came in front of it meanwhile.
    #[test]
    fn a_message_left_unread_behind_a_higher_priority_one_is_read_ahead() {
        let (a, b, tx, rx, to) = sender_and_receiver("tcp", "left-unread", (22, 23), None);
        let mut small = [0u8; 16];
        a.msg_send(tx, to, b"hi", 0).expect("send");
        assert_eq!(b.msg_recv(rx, &mut small), Ok(2));
        assert!(a.lends_static_buffers());
        // Nobody reads b's CQ but b's own calls.
        b.inner.hold_background.store(true, Ordering::Relaxed);
        let len = 1 << 20;
        let data: &'static [u8] = Box::leak(vec![3u8; len].into_boxed_slice());
        let lent = a
            .msg_send_i_zero_copy(tx, to, mcapi_ofi::SendBuffer::from_static(data), 1)
            .expect("large send");
        a.msg_send(tx, to, &[4u8; 64], 0)
            .expect("eager send, higher priority");
        std::thread::sleep(Duration::from_millis(100));
        // Both arrive in the receive's first look at the CQ: the large one at the head of
        // the queue while the receive waits (left unread for it), then the eager one in
        // front of it, too large for the receive's buffer.
        assert_eq!(
            b.msg_recv(rx, &mut small),
            Err(crate::Status::MCAPI_ERR_MSG_TRUNCATED)
        );
        b.inner.hold_background.store(false, Ordering::Relaxed);
        // Nobody receives: the large message is read ahead and its lent send completes.
        let done = a.wait(lent, None, Some(Duration::from_secs(5)));
        let mut buf = vec![0u8; len];
        assert_eq!(b.msg_recv(rx, &mut buf), Ok(64));
        assert_eq!(b.msg_recv(rx, &mut buf), Ok(len));
        if done.is_err() {
            assert_eq!(a.wait(lent, None, Some(Duration::from_secs(10))), Ok(len));
        }
        a.finalize().expect("finalize");
        b.finalize().expect("finalize");
        assert_eq!(
            done,
            Ok(len),
            "the lent send waited for the receiver's receive"
        );
    }
}
