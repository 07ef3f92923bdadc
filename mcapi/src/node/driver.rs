//! The driver: what moves between the semantic core and the fabric (posting, progress,
//! credits, peers).

use super::*;

/// For `channels` (which names it by this path) until its rewrite imports it from `seq`.
pub(super) use super::seq::widen;

/// Queues a credit decision of endpoint `port` for the fabric.
pub(super) fn queue_control(
    peers: &[Peer],
    outbox: &mut VecDeque<(u16, Tag, u64)>,
    port: u32,
    ctl: Control,
) {
    let (kind, to, n) = match ctl {
        Control::Grant(g) => (Kind::Grant, g.to, g.credits),
        Control::Recall { from, credits } => (Kind::Recall, from, credits),
    };
    let peer = to.0 as u16;
    if let Some(p) = peers.get(peer as usize) {
        outbox.push_back((peer, control_tag(kind, port, p.index_at_peer), u64::from(n)));
    }
}

pub(super) fn control_tag(kind: Kind, port: u32, peer: u16) -> Tag {
    Tag {
        kind,
        priority: 0,
        port,
        peer,
        seq: 0,
    }
}

impl NodeInner {
    pub(super) fn live_state(&self) -> Result<MutexGuard<'_, State>> {
        self.check_working()?;
        let st = lock(&self.state);
        if st.finalized {
            return Err(Status::MCAPI_ERR_NODE_NOTINIT);
        }
        Ok(st)
    }

    /// `MCAPI_ERR_GENERAL` once a background thread of the node panicked.
    #[inline(always)]
    pub(super) fn check_working(&self) -> Result<()> {
        match self.broken.get() {
            None => Ok(()),
            Some(_) => Err(Status::MCAPI_ERR_GENERAL),
        }
    }

    /// Records that a background thread panicked (`what` names it) and says so on
    /// stderr: the node is unusable from now on, and the application is told why once.
    pub(super) fn mark_broken(&self, what: &str, panic: &(dyn std::any::Any + Send)) {
        let reason = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        let reason = format!("{what} panicked: {reason}");
        if self.broken.set(reason.clone()).is_ok() {
            eprintln!(
                "mcapi: node <{}, {}>: {reason}; every later call on this node fails with \
                 MCAPI_ERR_GENERAL",
                self.domain_id, self.node_id
            );
        }
    }

    /// The wait of a blocked call: it polls for the node's configured spin first.
    pub(super) fn backoff(&self) -> Backoff {
        Backoff::new(self.config.spin)
    }

    /// What a blocked message call sleeps on: the node's CQ where it has an fd wait object,
    /// else nothing (the sleeps are timed).
    pub(super) fn node_sleep_cqs(&self) -> SleepCqs {
        let mut cqs = SleepCqs::new();
        if self.fab.cq_wait == WaitObject::Fd {
            cqs.push(self.fab.cq.clone());
        }
        cqs
    }

    pub(super) fn local_attribute(
        &self,
        st: &State,
        port: u32,
        attr: EndpointAttribute,
    ) -> Result<u64> {
        let ep = st
            .endpoints
            .get(&port)
            .ok_or(Status::MCAPI_ERR_ENDP_INVALID)?;
        Ok(match attr {
            EndpointAttribute::MaxPayloadSize => ep.max_payload as u64,
            EndpointAttribute::BufferType => FIFO_BUFFER,
            EndpointAttribute::MemoryType => LOCAL_MEMORY,
            EndpointAttribute::NumPriorities => u64::from(NUM_PRIORITIES),
            EndpointAttribute::Priority => u64::from(ep.priority),
            EndpointAttribute::NumSendBuffers => st.send_free.len() as u64,
            EndpointAttribute::NumRecvBuffers => {
                // The message taken last left its buffer, which is only not posted yet.
                let taken = st
                    .taken
                    .is_some_and(|t| t.port == port && t.generation == ep.generation);
                u64::from(ep.credits.free_buffers() + u32::from(taken))
            }
            EndpointAttribute::Status => ep.channel.status_flags(),
            EndpointAttribute::Timeout => ep
                .timeout
                .map_or(TIMEOUT_INFINITE, |t| t.as_millis() as u64),
        })
    }

    /// Copies a message into a send slot and queues it as a request.
    pub(super) fn queue_send(
        &self,
        st: &mut State,
        remote: (u16, u32),
        priority: u8,
        data: &[u8],
    ) -> Result<RequestHandle> {
        let slot = st.send_free.pop().ok_or(Status::MCAPI_ERR_MEM_LIMIT)?;
        let req = Req::Send {
            remote,
            priority,
            slot,
            len: data.len(),
        };
        let h = match st.requests.alloc(req) {
            Ok(h) => h,
            Err(e) => {
                st.send_free.push(slot);
                return Err(e);
            }
        };
        self.fab.send_pool.write(slot as usize * MAX_MSG_SIZE, data);
        st.pending_sends.push_back(h);
        Ok(h)
    }

    /// Posts queued sends that have credits now, in order per destination; asks for
    /// credits (over the fabric) where a destination has none.
    pub(super) fn advance_sends(&self, st: &mut State) {
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
            }) = st.requests.get(h)
            else {
                st.pending_sends.remove(i);
                continue;
            };
            if blocked[..nblocked].contains(&remote) {
                i += 1;
                continue;
            }
            let peer = remote.0;
            let index = st.peers[peer as usize].index_at_peer;
            let dest = st.peers[peer as usize].addr;
            let alive = st.peers[peer as usize].is_alive();
            let Some(r) = st.remotes.get_mut(&remote) else {
                let _ = st.requests.complete(h, Status::MCAPI_ERR_ENDP_INVALID, 0);
                st.send_free.push(slot);
                st.pending_sends.remove(i);
                continue;
            };
            if !alive {
                let _ = st.requests.complete(h, Status::MCAPI_ERR_TRANSMISSION, 0);
                st.send_free.push(slot);
                st.pending_sends.remove(i);
                continue;
            }
            if !r.take_credit() {
                if r.window.needs_request() {
                    let seen = r.window.request_sent();
                    let want = self.config.recv_buffers as u64;
                    st.outbox.push_back((
                        peer,
                        control_tag(Kind::Request, remote.1, index),
                        want << 32 | u64::from(seen),
                    ));
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
            let Ok(buf) = self.fab.send_pool.slice(slot as usize * MAX_MSG_SIZE, len) else {
                break;
            };
            match self
                .fab
                .ep
                .send_tagged(buf, dest, tag.encode(), Context::SendSlot(slot).encode())
            {
                Ok(()) => {
                    let _ = st.requests.complete(h, Status::MCAPI_SUCCESS, len);
                    st.pending_sends.remove(i);
                }
                Err(e) if e.is_again() => {
                    // Give the credit and sequence number back; retry on the next progress.
                    if let Some(r) = st.remotes.get_mut(&remote) {
                        r.spare += 1;
                        r.next_seq = seq;
                    }
                    break;
                }
                Err(_) => {
                    let _ = st.requests.complete(h, Status::MCAPI_ERR_TRANSMISSION, 0);
                    st.send_free.push(slot);
                    st.pending_sends.remove(i);
                }
            }
        }
    }

    /// Completes a pending receive request if it is the oldest on its endpoint and a
    /// message is queued; a buffer too small completes it with `MCAPI_ERR_MSG_TRUNCATED`
    /// and leaves the message queued.
    pub(super) fn try_complete(
        &self,
        st: &mut State,
        request: RequestHandle,
        buf: Option<&mut [u8]>,
    ) -> Result<()> {
        let port = match (st.requests.state(request)?, st.requests.get(request)) {
            (RequestState::Pending, Ok(&Req::Recv { port })) => port,
            _ => return Ok(()),
        };
        let Some(ep) = st.endpoints.get(&port) else {
            st.requests
                .complete(request, Status::MCAPI_ERR_ENDP_INVALID, 0)?;
            return Ok(());
        };
        if ep.pending_recvs.front() != Some(&request) {
            return Ok(());
        }
        let buf = buf.ok_or(Status::MCAPI_ERR_PARAMETER)?;
        let outcome = match self.take_message(st, port, buf) {
            Ok(Some(n)) => Some((Status::MCAPI_SUCCESS, n)),
            Ok(None) => None,
            Err(Status::MCAPI_ERR_MSG_TRUNCATED) => Some((Status::MCAPI_ERR_MSG_TRUNCATED, 0)),
            Err(e) => return Err(e),
        };
        if let Some((status, n)) = outcome {
            st.requests.complete(request, status, n)?;
            if let Some(ep) = st.endpoints.get_mut(&port) {
                ep.pending_recvs.pop_front();
            }
        }
        Ok(())
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
        ep.queue.pop();
        ep.pool
            .read(head.slot as usize * MAX_MSG_SIZE, &mut buf[..len]);
        // The message is the caller's now; its slot goes back to the fabric later.
        st.taken = Some(TakenSlot {
            port,
            generation: ep.generation,
            slot: head.slot,
            peer: head.peer,
        });
        Ok(Some(len))
    }

    /// Posts the slot of the message taken last again and returns its sender's credit.
    /// Done by the next receive or CQ read rather than by the receive that took the
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
            ..
        } = st;
        // Deleted since (its pool is retired: the slot is simply not posted).
        let Some(ep) = endpoints
            .get_mut(&t.port)
            .filter(|ep| ep.generation == t.generation)
        else {
            return;
        };
        if self.fab.post_recv_slot(ep, t.port, t.slot).is_ok() {
            let _ = ep.credits.consumed(SenderId(u32::from(t.peer)));
        }
        while let Some(ctl) = ep.credits.poll() {
            queue_control(peers, outbox, t.port, ctl);
        }
        if !st.outbox.is_empty() {
            self.flush_outbox(st);
        }
    }

    /// Sends a message payload: inject when it fits, else from a send slot. While the
    /// provider refuses (-FI_EAGAIN) it progresses, and now and then checks the deadline and
    /// the peer's liveness: tcp;ofi_rxm and shm refuse forever when the peer has died.
    pub(super) fn send_payload(
        &self,
        st: &mut State,
        peer: u16,
        tag: Tag,
        data: &[u8],
        deadline: &mut Deadline,
    ) -> Result<()> {
        let dest = st.peers[peer as usize].addr;
        let mut refused = 0u32;
        let mut stalled = |st: &mut State| -> Result<()> {
            refused += 1;
            if refused.is_multiple_of(1024) {
                if deadline.get().is_some_and(|d| Instant::now() >= d) {
                    return Err(Status::MCAPI_TIMEOUT);
                }
                // The liveness watcher marks a dead peer's link closed without the state
                // lock, which we hold; its loss is recorded here.
                let p = &st.peers[peer as usize];
                if let Some(link) = p.link.as_ref().filter(|l| l.is_closed()) {
                    let run = link.incarnation;
                    self.peer_event_locked(st, peer, PeerInput::Lost(run));
                }
                if !st.peers[peer as usize].is_alive() {
                    return Err(Status::MCAPI_ERR_TRANSMISSION);
                }
                std::thread::yield_now();
            }
            self.progress(st);
            Ok(())
        };
        if data.len() <= self.fab.inject_size {
            loop {
                match self.fab.ep.inject_tagged(data, dest, tag.encode()) {
                    Ok(()) => return Ok(()),
                    Err(e) if e.is_again() => stalled(st)?,
                    Err(e) => return Err(ofi_status(e)),
                }
            }
        }
        let slot = loop {
            if let Some(s) = st.send_free.pop() {
                break s;
            }
            stalled(st)?;
        };
        let offset = slot as usize * MAX_MSG_SIZE;
        self.fab.send_pool.write(offset, data);
        let buf = self
            .fab
            .send_pool
            .slice(offset, data.len())
            .map_err(ofi_status)?;
        let ctx = Context::SendSlot(slot).encode();
        loop {
            match self.fab.ep.send_tagged(buf, dest, tag.encode(), ctx) {
                Ok(()) => return Ok(()),
                Err(e) if e.is_again() => {
                    if let Err(status) = stalled(st) {
                        st.send_free.push(slot);
                        return Err(status);
                    }
                }
                Err(e) => {
                    st.send_free.push(slot);
                    return Err(ofi_status(e));
                }
            }
        }
    }

    /// Reads the CQ and dispatches what completed; sends queued control messages.
    /// Progress on behalf of an application call (the background thread then keeps away).
    pub(super) fn progress(&self, st: &mut State) {
        // Application threads count under the state lock (held: `st`), so a plain store
        // will do; the background thread only looks for a change.
        let n = self.app_progress.load(Ordering::Relaxed);
        self.app_progress
            .store(n.wrapping_add(1), Ordering::Relaxed);
        self.progress_counting(st);
    }

    /// As `progress`, returning how many completions were handled.
    pub(super) fn progress_counting(&self, st: &mut State) -> usize {
        if st.taken.is_some() {
            self.repost_taken(st);
        }
        let mut handled = 0;
        loop {
            match self.fab.cq.read(&mut st.cq_buf) {
                Ok(0) => break,
                Ok(n) => {
                    handled += n;
                    for i in 0..n {
                        let c = st.cq_buf[i];
                        self.dispatch(st, &c);
                    }
                    if n < CQ_BATCH {
                        break;
                    }
                }
                Err(OfiError::Completion(e)) => match Context::decode(e.context) {
                    // A send to a dead peer.
                    Some(Context::SendSlot(s)) => st.send_free.push(s),
                    // A cancelled slot of a deleted endpoint.
                    Some(Context::RecvSlot {
                        port, generation, ..
                    }) => st.retired_slot_back(port, generation),
                    _ => {}
                },
                Err(_) => break,
            }
        }
        if !st.pending_sends.is_empty() {
            self.advance_sends(st);
        }
        if st.departing > 0 {
            self.end_graces(st);
        }
        if !st.outbox.is_empty() {
            self.flush_outbox(st);
        }
        handled
    }

    pub(super) fn dispatch(&self, st: &mut State, c: &Completion) {
        match Context::decode(c.context()) {
            Some(Context::SendSlot(s)) => st.send_free.push(s),
            Some(Context::RecvSlot {
                port,
                generation,
                slot,
            }) => self.message_arrived(st, port, generation, slot, c),
            Some(Context::ControlSlot(slot)) => {
                let mut tag = [0u8; 8];
                self.fab.control_pool.read(slot as usize * 8, &mut tag);
                if let Some(tag) = Tag::decode(u64::from_le_bytes(tag)) {
                    self.control_arrived(st, tag, c.data());
                }
                let _ = self.fab.post_control_slot(slot);
            }
            None => {}
        }
    }

    pub(super) fn message_arrived(
        &self,
        st: &mut State,
        port: u32,
        generation: u8,
        slot: u32,
        c: &Completion,
    ) {
        // A slot of a deleted endpoint (its messages are discarded, spec 4.2.2), also when
        // another endpoint was created at the port since: that one's slots are its own.
        let Some(ep) = st
            .endpoints
            .get_mut(&port)
            .filter(|ep| ep.generation == generation)
        else {
            st.retired_slot_back(port, generation);
            return;
        };
        ep.posted = ep.posted.saturating_sub(1);
        let Some(tag) = Tag::decode(c.tag()) else {
            return;
        };
        let arrived = Arrived {
            slot,
            len: c.len() as u32,
            peer: tag.peer,
            priority: tag.priority,
        };
        if ep.credits.arrived(SenderId(u32::from(tag.peer))).is_err() {
            // Protocol violation: a message without a credit. Drop it, keep the slot.
            let _ = self.fab.post_recv_slot(ep, port, slot);
            return;
        }
        let LocalEndpoint { reorder, queue, .. } = ep;
        // Completion order is not delivery order on most providers: release in sequence.
        let wire = tag.seq;
        let accepted = match reorder.accept_relative(tag.peer, |next| widen(next, wire), arrived) {
            Ok(ready) => {
                for a in ready {
                    // Credits bound the queue to its slots, so it has room.
                    let _ = queue.push(a.priority as usize, a);
                }
                true
            }
            Err(_) => false,
        };
        if !accepted {
            // A duplicate or a number far ahead: a protocol violation (credits bound what a
            // sender has in flight, and so the window and the keys). Drop it, keep the slot
            // and the credit.
            let _ = ep.credits.consumed(SenderId(u32::from(tag.peer)));
            let _ = self.fab.post_recv_slot(ep, port, slot);
        }
    }

    pub(super) fn control_arrived(&self, st: &mut State, tag: Tag, data: u64) {
        let from = tag.peer;
        match tag.kind {
            Kind::Grant | Kind::Recall => {
                let Some(remote) = st.remotes.get_mut(&(from, tag.port)) else {
                    return;
                };
                if tag.kind == Kind::Grant {
                    remote.window.add(data as u32);
                } else {
                    let back = remote.window.recall(data as u32);
                    if back > 0 {
                        let index = st.peers[from as usize].index_at_peer;
                        st.outbox.push_back((
                            from,
                            control_tag(Kind::Return, tag.port, index),
                            u64::from(back),
                        ));
                    }
                }
            }
            Kind::Request | Kind::Return => {
                let Some(ep) = st.endpoints.get_mut(&tag.port) else {
                    return;
                };
                let sender = SenderId(u32::from(from));
                let _ = if tag.kind == Kind::Request {
                    ep.credits.request(sender, (data >> 32) as u32, data as u32)
                } else {
                    ep.credits.returned(sender, data as u32)
                };
                self.collect_credit_controls(st, tag.port);
            }
            Kind::Message => {}
        }
    }

    /// A credit request from node `from` (on its control connection): grants for it go back
    /// in the answer, other decisions (grants to others, recalls) over the fabric.
    pub(super) fn answer_credit_request(
        &self,
        from: (u32, u32),
        port: u32,
        want: u32,
        seen: u32,
    ) -> Frame {
        let Ok(mut st) = self.live_state() else {
            return Frame::Refused(Status::MCAPI_ERR_NODE_NOTINIT.code());
        };
        // A message taken is done with: its credit can be part of the answer.
        self.repost_taken(&mut st);
        let Some(&peer) = st.peer_of.get(&from) else {
            return Frame::Refused(Status::MCAPI_ERR_TRANSMISSION.code());
        };
        let me = SenderId(u32::from(peer));
        let State {
            endpoints,
            peers,
            outbox,
            ..
        } = &mut *st;
        let Some(ep) = endpoints.get_mut(&port) else {
            return Frame::Refused(Status::MCAPI_ERR_ENDP_INVALID.code());
        };
        if ep.channel.is_connected() {
            // Spec 3.6: no messages to a connected endpoint.
            return Frame::Refused(Status::MCAPI_ERR_GENERAL.code());
        }
        if let Err(s) = ep.credits.request(me, want, seen) {
            return Frame::Refused(s.code());
        }
        let mut granted = 0u64;
        while let Some(ctl) = ep.credits.poll() {
            match ctl {
                Control::Grant(g) if g.to == me => granted += u64::from(g.credits),
                other => queue_control(peers, outbox, port, other),
            }
        }
        self.flush_outbox(&mut st);
        Frame::Value(granted)
    }

    /// Moves the credit decisions of endpoint `port` into the outbox.
    pub(super) fn collect_credit_controls(&self, st: &mut State, port: u32) {
        let State {
            endpoints,
            peers,
            outbox,
            ..
        } = st;
        let Some(ep) = endpoints.get_mut(&port) else {
            return;
        };
        while let Some(ctl) = ep.credits.poll() {
            queue_control(peers, outbox, port, ctl);
        }
    }

    pub(super) fn flush_outbox(&self, st: &mut State) {
        while let Some(&(peer, tag, data)) = st.outbox.front() {
            let Some(p) = st.peers.get(peer as usize) else {
                st.outbox.pop_front();
                continue;
            };
            if !p.is_alive() {
                st.outbox.pop_front();
                continue;
            }
            match self
                .fab
                .ep
                .inject_data(&tag.encode().to_le_bytes(), data, p.addr)
            {
                Ok(()) => {
                    st.outbox.pop_front();
                }
                Err(e) if e.is_again() => break,
                Err(_) => {
                    st.outbox.pop_front();
                }
            }
        }
    }

    /// Endpoint `port` of node `from` was deleted: what we kept for sending to it goes (a
    /// new endpoint at that port starts afresh), and sends queued for it fail.
    pub(super) fn forget_remote(&self, from: (u32, u32), port: u32) {
        let Ok(mut st) = self.live_state() else {
            return;
        };
        if let Some(&peer) = st.peer_of.get(&from) {
            st.remotes.remove(&(peer, port));
            self.advance_sends(&mut st);
        }
    }

    /// Tells the nodes that sent to local endpoint `port` that it was deleted.
    pub(super) fn announce_deleted(&self, port: u32, senders: &[u16]) {
        for &peer in senders {
            let node = {
                let Ok(st) = self.live_state() else { return };
                st.peer_of
                    .iter()
                    .find(|(_, &p)| p == peer)
                    .map(|(&node, _)| node)
            };
            let Some((domain, node)) = node else { continue };
            // A node that cannot be reached has no credits to forget.
            if self
                .connect_peer(domain, node, Some(Instant::now() + PEER_NOTICE))
                .is_ok()
            {
                let _ = self.control_call(peer, &Frame::EndpointDeleted { port });
            }
        }
    }

    /// Our peer index for `<domain, node>`, connecting its control plane (and exchanging
    /// fabric addresses) on first use.
    pub(super) fn connect_peer(
        &self,
        domain: u32,
        node: u32,
        deadline: Option<Instant>,
    ) -> Result<u16> {
        let connected =
            || -> Result<Option<u16>> { Ok(self.live_state()?.connected_peer(domain, node)) };
        if let Some(p) = connected()? {
            return Ok(p);
        }
        let contact = lock(&self.contacting)
            .entry((domain, node))
            .or_default()
            .clone();
        let _contact = lock(&contact);
        // Another thread may have made the contact meanwhile.
        if let Some(p) = connected()? {
            return Ok(p);
        }
        let to =
            Rendezvous::of(&self.config, domain, node).ok_or(Status::MCAPI_ERR_NODE_INVALID)?;
        let mut stream = match control::connect_when_up(&to, deadline) {
            Ok(Some(s)) => s,
            Ok(None) => return Err(Status::MCAPI_TIMEOUT),
            Err(_) => return Err(Status::MCAPI_ERR_TRANSMISSION),
        };
        let index = {
            let mut st = self.live_state()?;
            match st.peer_of.get(&(domain, node)) {
                Some(&p) => p,
                None => self.add_peer(&mut st, domain, node, None)?,
            }
        };
        let hello = Frame::Hello {
            domain: self.domain_id,
            node: self.node_id,
            peer: u32::from(index),
            incarnation: self.incarnation,
            fabric_addr: self.fab.ep.address().to_vec(),
        };
        let Ok(Frame::Welcome {
            peer,
            incarnation,
            fabric_addr,
        }) = stream.call(&hello)
        else {
            return Err(Status::MCAPI_ERR_TRANSMISSION);
        };
        let addr = self.fab.av.insert(&fabric_addr).map_err(ofi_status)?;
        let mut st = self.live_state()?;
        self.peer_met(&mut st, index, incarnation, addr, peer as u16);
        st.peers[index as usize].link = Some(Arc::new(ControlLink {
            stream: Mutex::new(stream),
            incarnation,
            closed: Default::default(),
        }));
        Ok(index)
    }

    pub(super) fn add_peer(
        &self,
        st: &mut State,
        domain: u32,
        node: u32,
        addr: Option<FiAddr>,
    ) -> Result<u16> {
        if st.peers.len() >= MAX_PEERS {
            return Err(Status::MCAPI_ERR_MEM_LIMIT);
        }
        let index = st.peers.len() as u16;
        st.peers.push(Peer {
            addr: addr.unwrap_or(FiAddr::UNSPEC),
            index_at_peer: 0,
            life: PeerLife::Unknown,
            link: None,
        });
        st.peer_of.insert((domain, node), index);
        Ok(index)
    }

    /// A request and its answer over our control connection to `peer`. A connection that
    /// fails is closed for good: the run it talked to is lost, and the next contact makes a
    /// new one (to a restarted run, if one answers).
    pub(super) fn control_call(&self, peer: u16, request: &Frame) -> Result<Frame> {
        let link = {
            let st = self.live_state()?;
            st.peers[peer as usize]
                .link
                .clone()
                .ok_or(Status::MCAPI_ERR_TRANSMISSION)?
        };
        let answer = lock(&link.stream).call(request);
        answer.map_err(|_| {
            link.closed.store(true, Ordering::Release);
            self.peer_event(peer, PeerInput::Lost(link.incarnation));
            Status::MCAPI_ERR_TRANSMISSION
        })
    }

    /// The liveness watcher: finds our control connections whose other end closed (the
    /// run died or finalized) and reports each run lost. Runs on the background thread,
    /// so no application call ever probes a socket.
    pub(super) fn watch_links(&self) {
        let links: Vec<(u16, Arc<ControlLink>)> = {
            let Some(st) = self.state.try_lock().ok() else {
                return;
            };
            let start = self.watch_cursor.load(Ordering::Relaxed) % st.peers.len().max(1);
            let order = (start..st.peers.len()).chain(0..start);
            order
                .filter_map(|i| {
                    let l = st.peers[i].link.as_ref()?;
                    (!l.is_closed() && st.peers[i].is_alive()).then(|| (i as u16, l.clone()))
                })
                .take(64)
                .collect()
        };
        self.watch_cursor
            .fetch_add(links.len().max(1), Ordering::Relaxed);
        for (peer, link) in links {
            // try_lock: a call in progress on the link will see its end itself.
            let closed = link.stream.try_lock().is_ok_and(|s| s.is_closed());
            if closed {
                link.closed.store(true, Ordering::Release);
                self.peer_event(peer, PeerInput::Lost(link.incarnation));
            }
        }
    }

    /// Feeds one liveness event about `peer` into its state machine and carries out what
    /// comes back.
    pub(super) fn peer_event(&self, peer: u16, input: PeerInput) {
        let mut st = lock(&self.state);
        self.peer_event_locked(&mut st, peer, input);
    }

    pub(super) fn peer_event_locked(&self, st: &mut State, peer: u16, input: PeerInput) {
        let Some(p) = st.peers.get_mut(peer as usize) else {
            return;
        };
        let was_departing = p.life.is_departing();
        let event = match input {
            PeerInput::Met(run) => p.life.met(run),
            PeerInput::Lost(run) => p.life.lost(run, Instant::now(), DEPARTURE_GRACE),
        };
        match (was_departing, p.life.is_departing()) {
            (false, true) => st.departing += 1,
            (true, false) => st.departing -= 1,
            _ => {}
        }
        match event {
            Some(PeerEvent::Restarted { .. }) => self.forget_run(st, peer),
            Some(PeerEvent::Gone) => self.reclaim_run(st, peer),
            Some(PeerEvent::Departed) | None => {}
        }
    }

    /// A handshake with run `incarnation` of peer `index` completed: it is alive, at
    /// `addr`, and numbers us `index_at_peer`.
    pub(super) fn peer_met(
        &self,
        st: &mut State,
        index: u16,
        incarnation: u64,
        addr: FiAddr,
        index_at_peer: u16,
    ) {
        let p = &mut st.peers[index as usize];
        p.addr = addr;
        p.index_at_peer = index_at_peer;
        self.peer_event_locked(st, index, PeerInput::Met(incarnation));
    }

    /// A new run of peer `index` replaced the old one, which starts from nothing: what we
    /// kept of the old one — its credits and queued message accounting, the sequence
    /// numbers in both directions, our windows for its endpoints and our control
    /// connection — is forgotten.
    fn forget_run(&self, st: &mut State, index: u16) {
        if let Some(old) = st.peers[index as usize].link.take() {
            old.closed.store(true, Ordering::Release);
        }
        self.reclaim_run(st, index);
        for ((peer, _), remote) in st.remotes.iter_mut() {
            if *peer == index {
                remote.window.reset();
                (remote.spare, remote.next_seq) = (0, 0);
            }
        }
    }

    /// The credits and sequence state a lost run held at our endpoints go back.
    fn reclaim_run(&self, st: &mut State, index: u16) {
        forget_sequence(st, index);
        let ports: Vec<u32> = st.endpoints.keys().copied().collect();
        for port in ports {
            if let Some(ep) = st.endpoints.get_mut(&port) {
                ep.credits.sender_gone(SenderId(u32::from(index)));
            }
            self.collect_credit_controls(st, port);
        }
    }

    /// Ends the departure graces that are over.
    fn end_graces(&self, st: &mut State) {
        let now = Instant::now();
        for i in 0..st.peers.len() {
            if st.peers[i].life.tick(now) == Some(PeerEvent::Gone) {
                st.departing -= 1;
                self.reclaim_run(st, i as u16);
            }
        }
    }
}

/// A liveness event about one peer, with the run it is about.
#[derive(Clone, Copy)]
pub(super) enum PeerInput {
    /// A handshake with this run completed.
    Met(u64),
    /// A connection to this run ended, or the fabric cannot reach it.
    Lost(u64),
}

/// Forgets the sequence numbers of `peer`'s messages to every endpoint (it departed, or
/// restarted and numbers from 0 again). Messages of its still waiting for an earlier one,
/// which can no longer come, are queued for the application rather than dropped (they hold
/// a receive slot and a credit until received).
fn forget_sequence(st: &mut State, peer: u16) {
    for ep in st.endpoints.values_mut() {
        let LocalEndpoint { reorder, queue, .. } = ep;
        reorder.remove(&peer, |a| {
            // Credits bound the queue to its slots, so it has room.
            let _ = queue.push(a.priority as usize, a);
        });
    }
}
