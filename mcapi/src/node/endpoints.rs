//! Endpoints: create, delete, get (resolving remote ones), attributes.

use super::channel::{EndpointChannel, MAX_PKT_SIZE};
use super::common::{
    endpoint_unreachable, lock, refusal, Result, EAGER_SLOT, MAX_ENDPOINTS, NUM_PRIORITIES,
};
use super::fabric::CONTROL_SLOTS_PER_REMOTE;
use super::inner::NodeInner;
use super::state::{epoch_before, LocalEndpoint, Remote, State, LOCAL_SLOT};
use super::Node;
use crate::attributes::{EndpointAttribute, FIFO_BUFFER, LOCAL_MEMORY, TIMEOUT_INFINITE};
use crate::config::Compat;
use crate::control::Frame;
use crate::semantics::credit::CreditPool;
use crate::semantics::endpoint_id::{EndpointId, MAX_PORT, PORT_ANY};
use crate::semantics::queue::{PriorityQueues, SeqReorder};
use crate::semantics::wire::MAX_WIRE_PORT;
use crate::semantics::Status;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How long a deleted endpoint's node tries to reach a sender to tell it.
const PEER_NOTICE: Duration = Duration::from_secs(1);
/// Sender nodes one endpoint serves at once (its credit pool and reorder state are
/// preallocated for them).
const MAX_SENDERS: usize = 256;

/// Where `MCAPI_PORT_ANY` starts handing out ports (below: the application's own).
pub(super) const FIRST_ANY_PORT: u32 = 1 << 20;

impl Node {
    /// `mcapi_endpoint_create`: a local endpoint on `port` (`PORT_ANY`: a free port).
    ///
    /// # Errors
    /// `MCAPI_ERR_PORT_INVALID`, `MCAPI_ERR_ENDP_EXISTS`, `MCAPI_ERR_NODE_NOTINIT`,
    /// `MCAPI_ERR_MEM_LIMIT` if the receive slots cannot be allocated or posted (the node's
    /// receive limit).
    pub fn endpoint_create(&self, port: u32) -> Result<EndpointId> {
        let mut st = self.inner.live_state()?;
        let any = port == PORT_ANY;
        let port = if any {
            // The next free port from where the last one was handed out, round the range
            // (a node has far fewer endpoints than the range has ports).
            let mut p = st.next_any_port;
            loop {
                if p > MAX_PORT {
                    p = FIRST_ANY_PORT;
                }
                if !st.endpoints.contains_key(&p) {
                    break p;
                }
                p += 1;
            }
        } else {
            port
        };
        if port > MAX_WIRE_PORT {
            return Err(Status::MCAPI_ERR_PORT_INVALID);
        }
        if st.endpoints.contains_key(&port) {
            return Err(Status::MCAPI_ERR_ENDP_EXISTS);
        }
        let id = EndpointId::encode(self.inner.domain_id, self.inner.node_id, port)?;
        if st.endpoints.len() >= MAX_ENDPOINTS {
            // Spec 4.2.1: "no more available ports"; the reference's own code in
            // compatibility mode.
            return Err(match self.inner.config.compat {
                Compat::Mca => Status::MCAPI_ERR_ENDP_LIMIT,
                Compat::Spec => Status::MCAPI_ERR_PORT_INVALID,
            });
        }
        let n = self.inner.config.recv_buffers as u32;
        // Messages still on their way to an endpoint deleted at this port are discarded
        // before this one takes messages there.
        self.inner.progress(&mut st);
        let ep = LocalEndpoint {
            queue: PriorityQueues::new(NUM_PRIORITIES as usize, n as usize),
            // Its credits are lent by the node's receive pool as senders ask.
            credits: CreditPool::empty(n, MAX_SENDERS),
            // A sender has at most n messages in flight (its credits): that is the window.
            reorder: SeqReorder::new(MAX_SENDERS, n),
            timeout: None,
            priority: 0,
            pending_recvs: VecDeque::with_capacity(16),
            max_payload: EAGER_SLOT,
            channel: EndpointChannel::default(),
            epoch: st.next_endpoint_epoch,
            local_bufs: Vec::new(),
            local_free: Vec::new(),
        };
        st.next_endpoint_epoch = st.next_endpoint_epoch.wrapping_add(1);
        st.endpoints.insert(port, ep);
        if any {
            st.next_any_port = port + 1;
        }
        Ok(id)
    }

    /// `mcapi_endpoint_delete`: deletes a local endpoint; queued messages are discarded.
    ///
    /// # Errors
    /// `MCAPI_ERR_ENDP_INVALID` for a value that is no endpoint (or already deleted),
    /// `MCAPI_ERR_ENDP_NOTOWNER` for another node's endpoint.
    pub fn endpoint_delete(&self, endpoint: EndpointId) -> Result<()> {
        if (endpoint.domain(), endpoint.node()) != (self.inner.domain_id, self.inner.node_id) {
            return Err(Status::MCAPI_ERR_ENDP_NOTOWNER);
        }
        let port = self.local_port(endpoint)?;
        // In a channel: only once this side closed (its close finishes now).
        if !self.inner.close_for_delete(port)? {
            return Err(Status::MCAPI_ERR_CHAN_CONNECTED);
        }
        let mut st = self.inner.live_state()?;
        if st
            .endpoints
            .get(&port)
            .is_some_and(|e| e.channel.is_connected())
        {
            // Connected again meanwhile (another thread's connect).
            return Err(Status::MCAPI_ERR_CHAN_CONNECTED);
        }
        // What already arrived is discarded with it rather than left for a later endpoint.
        self.inner.progress(&mut st);
        let mut ep = st
            .endpoints
            .remove(&port)
            .ok_or(Status::MCAPI_ERR_ENDP_INVALID)?;
        self.inner.retire_endpoint(&mut st, port, &mut ep);
        // Its pending receives end now (an endpoint created at the port later is another),
        // but one reading its message into its buffer right now, which ends with the read.
        for &r in &ep.pending_recvs {
            if !st.reading_into(r) {
                st.requests
                    .complete_if_pending(r, Status::MCAPI_ERR_ENDP_INVALID, 0);
            }
        }
        drop(st);
        let senders: Vec<u16> = ep.credits.senders().map(|s| s.0 as u16).collect();
        let unspent = self.inner.announce_deleted((port, ep.epoch), &senders);
        self.inner.strays_returned(unspent)
    }

    /// `mcapi_endpoint_get`: the endpoint `<domain, node, port>`, waiting up to `timeout`
    /// (`None`: forever) for it to be created, also when its node starts later.
    ///
    /// # Errors
    /// `MCAPI_TIMEOUT`, `MCAPI_ERR_DOMAIN_INVALID`, `MCAPI_ERR_NODE_INVALID`,
    /// `MCAPI_ERR_PORT_INVALID`, `MCAPI_ERR_NODE_NOTINIT`.
    pub fn endpoint_get(
        &self,
        domain: u32,
        node: u32,
        port: u32,
        timeout: Option<Duration>,
    ) -> Result<EndpointId> {
        let id = EndpointId::encode(domain, node, port)?;
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        if (domain, node) == (self.inner.domain_id, self.inner.node_id) {
            let mut backoff = self.inner.backoff();
            loop {
                if self.inner.live_state()?.endpoints.contains_key(&port) {
                    return Ok(id);
                }
                backoff.wait(deadline)?;
            }
        }
        self.resolve_remote(id, deadline)?;
        Ok(id)
    }

    /// Connects to the endpoint's node, waits until the endpoint exists there (in whichever
    /// run of the node answers: one that dies meanwhile is waited past) and sets up the
    /// credit window for sending to it. Returns the peer index.
    pub(super) fn resolve_remote(&self, id: EndpointId, deadline: Option<Instant>) -> Result<u16> {
        let port = id.port();
        let mut backoff = self.inner.backoff();
        let (peer, epoch) = loop {
            let peer = self.inner.connect_peer(id.domain(), id.node(), deadline)?;
            match self.inner.control_call(peer, &Frame::Lookup { port }) {
                // The endpoint's epoch: our credit window is for that one.
                Ok(Frame::Value(epoch)) => break (peer, epoch as u16),
                // Not created yet; or the run we reached is gone: wait for the next one.
                Ok(_) | Err(Status::MCAPI_ERR_TRANSMISSION) => backoff.wait(deadline)?,
                Err(e) => return Err(e),
            }
        };
        let mut st = self.inner.live_state()?;
        match st.remotes.entry((peer, port)) {
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(Remote::new(epoch));
                self.inner
                    .fab
                    .post_control_slots(&mut st, CONTROL_SLOTS_PER_REMOTE)?;
            }
            // Replaced at its port while we were not told (its node could not reach us).
            std::collections::hash_map::Entry::Occupied(mut e) => {
                if let Some(back) = e.get_mut().replace(epoch) {
                    self.inner.return_credits(&mut st, (peer, port), back);
                }
            }
        }
        Ok(peer)
    }

    /// `mcapi_endpoint_get_attribute` of a local or remote endpoint (a remote one is asked
    /// over its node's control plane).
    ///
    /// # Errors
    /// `MCAPI_ERR_NODE_NOTINIT`, `MCAPI_ERR_ENDP_INVALID` (also a remote endpoint whose
    /// node cannot be reached, is not running or is finalizing: the spec's table has no
    /// other code for it), `MCAPI_ERR_ATTR_NUM`.
    pub fn endpoint_get_attribute(&self, endpoint: EndpointId, attribute: u32) -> Result<u64> {
        let attr = EndpointAttribute::from_number(attribute)?;
        let st = self.inner.live_state()?;
        if (endpoint.domain(), endpoint.node()) == (self.inner.domain_id, self.inner.node_id) {
            return self.inner.local_attribute(&st, endpoint.port(), attr);
        }
        drop(st);
        let peer = self
            .inner
            .connect_peer(
                endpoint.domain(),
                endpoint.node(),
                Some(Instant::now() + Duration::from_secs(10)),
            )
            .map_err(endpoint_unreachable)?;
        let request = Frame::GetAttribute {
            port: endpoint.port(),
            attribute,
        };
        match self
            .inner
            .control_call(peer, &request)
            .map_err(endpoint_unreachable)?
        {
            Frame::Value(v) => Ok(v),
            answer => Err(endpoint_unreachable(refusal(
                "endpoint_get_attribute",
                &answer,
            ))),
        }
    }

    /// `mcapi_endpoint_set_attribute` of a local endpoint. Writable: maximum payload,
    /// priority (below `NUM_PRIORITIES`) and timeout (milliseconds, `TIMEOUT_INFINITE`);
    /// buffer and memory type take their one implemented value (FIFO, local); the others
    /// are read-only.
    ///
    /// # Errors
    /// `MCAPI_ERR_ENDP_REMOTE` for another node's endpoint, `MCAPI_ERR_ENDP_INVALID`,
    /// `MCAPI_ERR_ATTR_NUM`, `MCAPI_ERR_ATTR_READONLY`, `MCAPI_ERR_ATTR_VALUE`,
    /// `MCAPI_ERR_ATTR_NOTSUPPORTED` (a state buffer, shared or remote memory),
    /// `MCAPI_ERR_CHAN_CONNECTED`.
    pub fn endpoint_set_attribute(
        &self,
        endpoint: EndpointId,
        attribute: u32,
        value: u64,
    ) -> Result<()> {
        if (endpoint.domain(), endpoint.node()) != (self.inner.domain_id, self.inner.node_id) {
            return Err(Status::MCAPI_ERR_ENDP_REMOTE);
        }
        let attr = EndpointAttribute::from_number(attribute)?;
        let mut st = self.inner.live_state()?;
        let ep = st
            .endpoints
            .get_mut(&endpoint.port())
            .ok_or(Status::MCAPI_ERR_ENDP_INVALID)?;
        if ep.channel.is_connected() {
            return Err(Status::MCAPI_ERR_CHAN_CONNECTED);
        }
        match attr {
            EndpointAttribute::MaxPayloadSize if (1..=MAX_PKT_SIZE as u64).contains(&value) => {
                ep.max_payload = value as usize
            }
            EndpointAttribute::Priority if value < u64::from(NUM_PRIORITIES) => {
                ep.priority = value as u32
            }
            EndpointAttribute::Timeout if value <= TIMEOUT_INFINITE => {
                ep.timeout = (value != TIMEOUT_INFINITE).then(|| Duration::from_millis(value));
            }
            a => match a.set_fixed(value) {
                Some(fixed) => fixed?,
                None if a.writable() => return Err(Status::MCAPI_ERR_ATTR_VALUE),
                None => return Err(Status::MCAPI_ERR_ATTR_READONLY),
            },
        }
        Ok(())
    }

    /// Sets the timeout of blocking sends and receives of local endpoint `endpoint`
    /// (`None`: infinite): [`Node::endpoint_set_attribute`] of `MCAPI_ENDP_ATTR_TIMEOUT`
    /// with `timeout` in whole milliseconds, rounded up.
    ///
    /// # Errors
    /// As [`Node::endpoint_set_attribute`]: `MCAPI_ERR_ATTR_VALUE` for a timeout the
    /// attribute cannot hold (`MCAPI_TIMEOUT_INFINITE` ms or more),
    /// `MCAPI_ERR_CHAN_CONNECTED` for an endpoint connected to a channel.
    pub fn set_endpoint_timeout(
        &self,
        endpoint: EndpointId,
        timeout: Option<Duration>,
    ) -> Result<()> {
        let ms = match timeout.map(|t| t.as_nanos().div_ceil(1_000_000)) {
            None => TIMEOUT_INFINITE,
            Some(ms) if ms < u128::from(TIMEOUT_INFINITE) => ms as u64,
            Some(_) => return Err(Status::MCAPI_ERR_ATTR_VALUE),
        };
        self.endpoint_set_attribute(endpoint, EndpointAttribute::Timeout as u32, ms)
    }

    /// The port of `endpoint` if it is one of this node's live endpoints; another node's
    /// endpoint is "not a valid local endpoint" (`MCAPI_ERR_ENDP_INVALID`, spec 4.3).
    pub(super) fn local_port(&self, endpoint: EndpointId) -> Result<u32> {
        let st = self.inner.live_state()?;
        self.local_endpoint(&st, endpoint).map(|_| endpoint.port())
    }

    /// Local endpoint `from` if it may send messages: not while it is connected to a
    /// channel, as no message may go to one (spec 4.3.1, 4.3.2; `MCAPI_ERR_GENERAL`, the
    /// code the spec recommends for that).
    pub(super) fn sending_endpoint<'s>(
        &self,
        st: &'s State,
        from: EndpointId,
    ) -> Result<&'s LocalEndpoint> {
        let ep = self.local_endpoint(st, from)?;
        if ep.channel.is_connected() {
            log::info!("msg_send from {from:?}: MCAPI_ERR_GENERAL: it is connected to a channel");
            return Err(Status::MCAPI_ERR_GENERAL);
        }
        Ok(ep)
    }

    /// `endpoint` if it is one of this node's live endpoints, under a lock already held.
    pub(super) fn local_endpoint<'s>(
        &self,
        st: &'s State,
        endpoint: EndpointId,
    ) -> Result<&'s LocalEndpoint> {
        let ours =
            (endpoint.domain(), endpoint.node()) == (self.inner.domain_id, self.inner.node_id);
        st.endpoints
            .get(&endpoint.port())
            .filter(|_| ours)
            .ok_or(Status::MCAPI_ERR_ENDP_INVALID)
    }
}

/// A credit window whose request went unanswered: its port, epoch and `Remote::replaced`.
pub(super) type StalledWindow = (u32, u16, u32);

impl NodeInner {
    /// Endpoint `port` is deleted: its queued messages are discarded (their slots freed)
    /// and its credits go back to the node's pool, but for those its senders hold, which
    /// are counted as strays until they come back.
    fn retire_endpoint(&self, st: &mut State, port: u32, ep: &mut LocalEndpoint) {
        let mut discarded = 0;
        // Slots the provider refused to take back: their credits are withheld, never lent
        // without a slot.
        let mut lost = 0;
        while let Some(a) = ep.queue.pop() {
            if a.slot & LOCAL_SLOT != 0 {
                continue;
            }
            if a.rndv {
                // Its sender frees the data it staged (once a read in flight ends).
                self.fetch_discarded(st, a.slot, a.peer, port);
            }
            lost += u32::from(!self.free_slot(st, a.slot, port));
            discarded += 1;
        }
        // Messages waiting in the reorder buffer for an earlier one hold slots too.
        let peers: Vec<u16> = ep.credits.senders().map(|s| s.0 as u16).collect();
        let mut done = Vec::new();
        for peer in peers {
            ep.reorder.remove(&peer, |a| {
                discarded += 1;
                if a.rndv {
                    done.push((a.slot, a.peer));
                } else {
                    lost += u32::from(!self.free_slot(st, a.slot, port));
                }
            });
        }
        for (slot, peer) in done {
            // Its descriptor is read before the slot is posted again.
            self.fetch_discarded(st, slot, peer, port);
            lost += u32::from(!self.free_slot(st, slot, port));
        }
        // Messages taken off the queue and not done with (read in place right now) hold
        // their slots beyond the credits going back below: until `repost_taken` frees them.
        st.recv_held += ep.credits.queued().saturating_sub(discarded);
        if !st.outbox.is_empty() {
            self.flush_outbox(st);
        }
        let (back, held) = ep.credits.dissolve();
        st.recv_free += back.saturating_sub(lost);
        st.recv_strays += held;
        // The message taken last is posted again by `repost_taken` (not credited).
        if !st.hungry.is_empty() {
            let p = st.hungry[0];
            self.settle_credits(st, p);
        }
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
                    .is_some_and(|t| t.port == port && t.epoch == ep.epoch);
                u64::from(ep.credits.free_buffers() + u32::from(taken))
                    .min(u64::from(ep.credits.capacity()))
            }
            EndpointAttribute::Status => ep.channel.status_flags(),
            EndpointAttribute::Timeout => ep
                .timeout
                .map_or(TIMEOUT_INFINITE, |t| t.as_millis() as u64),
        })
    }

    /// Endpoint `port` of node `from`, of credit epoch `epoch`, was deleted: what we kept
    /// for sending to it goes (a new endpoint at that port starts afresh), and sends queued
    /// for it fail. Returns the credits for it that were not spent. A window we hold for a
    /// later endpoint at the port (another epoch) stays.
    pub(super) fn forget_remote(&self, from: (u32, u32), port: u32, epoch: u16) -> u32 {
        let Ok(mut st) = self.live_state() else {
            return 0;
        };
        let mut unspent = 0;
        if let Some(&peer) = st.peer_of.get(&from) {
            // That endpoint's window, or an older one's whose notice never reached us.
            if st
                .remotes
                .get(&(peer, port))
                .is_some_and(|r| !epoch_before(epoch, r.epoch))
            {
                if let Some(r) = st.remotes.remove(&(peer, port)) {
                    unspent = r.window.available() + r.spare;
                }
            }
            self.advance_sends(&mut st);
        }
        unspent
    }

    /// Looks up, on their nodes' control planes, the endpoints whose credit request went
    /// unanswered for [`STALLED_REQUEST`]: one deleted before this node had credits of it
    /// was never told of the delete (its node knew no credits of ours to recall), and its
    /// node drops the request. One that is gone (or replaced by a later endpoint at the port)
    /// is forgotten as a delete's notice would have it: what waits for it fails with
    /// `MCAPI_ERR_ENDP_INVALID`, and the next send looks the port up again. At most one
    /// thread at a time; windows whose epoch is not known (their node restarted) are left
    /// to their first answer.
    ///
    /// [`STALLED_REQUEST`]: super::state::STALLED_REQUEST
    pub(in crate::node) fn verify_stalled_windows(self: &std::sync::Arc<Self>) {
        // Per peer, its stalled windows.
        let mut stalled: Vec<(u16, Vec<StalledWindow>)> = Vec::new();
        {
            let Ok(mut st) = self.state.try_lock() else {
                return;
            };
            let now = Instant::now();
            let busy = lock(&self.verifying).clone();
            for (&(peer, port), r) in st.remotes.iter_mut() {
                let due = r
                    .asked_at
                    .is_some_and(|t| now.duration_since(t) >= super::state::STALLED_REQUEST);
                if due && r.epoch_known && r.window.waits_for_grant() && !busy.contains(&peer) {
                    // Checked again a period later at the soonest.
                    r.asked_at = Some(now);
                    let window = (port, r.epoch, r.replaced);
                    match stalled.iter_mut().find(|(p, _)| *p == peer) {
                        Some((_, windows)) => windows.push(window),
                        None => stalled.push((peer, vec![window])),
                    }
                }
            }
        }
        // A thread per peer (a stopped one holds up only its own), at most one each.
        for (peer, windows) in stalled {
            if !lock(&self.verifying).insert(peer) {
                continue;
            }
            let node = std::sync::Arc::downgrade(self);
            let spawned = std::thread::Builder::new()
                .name("mcapi-verify".into())
                .spawn(move || {
                    for window in windows {
                        let Some(node) = node.upgrade() else { return };
                        node.verify_window(peer, window);
                    }
                    if let Some(node) = node.upgrade() {
                        lock(&node.verifying).remove(&peer);
                    }
                });
            if let Err(e) = spawned {
                lock(&self.verifying).remove(&peer);
                log::warn!("stalled credit requests not looked into: no thread: {e}");
            }
        }
    }

    /// Looks endpoint `port` of peer `peer` up: the window of epoch `epoch` (its
    /// `replaced` count then) goes if the endpoint is not there, or another one is, and the
    /// window is still that one and still waits (see [`NodeInner::verify_stalled_windows`]).
    pub(super) fn verify_window(&self, peer: u16, (port, epoch, replaced): StalledWindow) {
        let gone = match self.control_call(peer, &Frame::Lookup { port }) {
            Ok(Frame::Value(e)) => e != u64::from(epoch),
            Ok(Frame::Refused(c)) => c == Status::MCAPI_ERR_ENDP_INVALID.code(),
            // Unreachable: its liveness decides (a lost node's sends fail).
            _ => false,
        };
        if !gone {
            return;
        }
        let Ok(mut st) = self.live_state() else {
            return;
        };
        // The same window, still without credits (a grant since, or a restart of the peer
        // met meanwhile, which answered for its own endpoints: left alone).
        let same = st.remotes.get(&(peer, port)).is_some_and(|r| {
            r.epoch == epoch && r.replaced == replaced && r.window.waits_for_grant() && r.spare == 0
        });
        if same {
            log::info!("port {port} of peer {peer}: gone since its credits were asked for");
            st.remotes.remove(&(peer, port));
            self.advance_sends(&mut st);
        }
    }

    /// Credits of deleted endpoints that their senders had not spent (`unspent`, as they
    /// answered the notice) come back to the node; those spent come back as their messages
    /// arrive for nobody.
    pub(super) fn strays_returned(&self, unspent: u32) -> Result<()> {
        if unspent > 0 {
            let mut st = self.live_state()?;
            let back = unspent.min(st.recv_strays);
            st.recv_strays -= back;
            st.recv_free += back;
            if !st.hungry.is_empty() {
                let p = st.hungry[0];
                self.settle_credits(&mut st, p);
            }
        }
        Ok(())
    }

    /// Tells the nodes that sent to local endpoint `port` that it was deleted; returns the
    /// credits they held unspent (and now forget).
    pub(super) fn announce_deleted(&self, (port, epoch): (u32, u16), senders: &[u16]) -> u32 {
        let mut unspent = 0u32;
        for &peer in senders {
            let node = {
                let Ok(st) = self.live_state() else {
                    return unspent;
                };
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
                match self.control_call(peer, &Frame::EndpointDeleted { port, epoch }) {
                    Ok(Frame::Value(n)) => unspent = unspent.saturating_add(n as u32),
                    Ok(_) => {}
                    // It left meanwhile: it has nothing left to forget.
                    Err(e) => {
                        log::debug!("port {port} deleted: peer <{domain}, {node}> not told: {e}")
                    }
                }
            }
        }
        unspent
    }
}

#[cfg(test)]
mod tests {
    use super::FIRST_ANY_PORT;
    use crate::node::test_pair::sender_and_receiver;
    use crate::semantics::endpoint_id::{MAX_PORT, PORT_ANY};

    /// While another thread waits (forever) for a node to come up, a get of that node's
    /// endpoint with a zero or short timeout, and a test of an `endpoint_get_i`, return at
    /// once instead of waiting for the other thread's contact (spec 3.16.12, 4.2.2).
    #[test]
    fn a_get_with_a_timeout_does_not_wait_for_another_threads_contact() {
        use crate::config::Config;
        use crate::semantics::Status;
        use crate::Node;
        use std::time::{Duration, Instant};
        let mut config = Config::defaults();
        config.provider = Some("shm".into());
        config.job = format!("contact-wait-{}", std::process::id());
        let node = Node::initialize(0, 31, config).expect("a node");
        let waiter = {
            let node = node.clone();
            std::thread::spawn(move || node.endpoint_get(0, 99, 1, None))
        };
        std::thread::sleep(Duration::from_millis(300));
        for timeout in [Duration::ZERO, Duration::from_millis(10)] {
            let start = Instant::now();
            assert_eq!(
                node.endpoint_get(0, 99, 1, Some(timeout)),
                Err(Status::MCAPI_TIMEOUT)
            );
            assert!(
                start.elapsed() < Duration::from_secs(1),
                "{timeout:?}: {:?}",
                start.elapsed()
            );
        }
        let r = node.endpoint_get_i(0, 99, 1).expect("a request");
        let start = Instant::now();
        assert_eq!(node.test(r, None), Ok(None));
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "test: {:?}",
            start.elapsed()
        );
        node.cancel(r).expect("cancel");
        node.finalize().expect("finalize");
        assert!(waiter.join().expect("the waiter").is_err());
    }

    /// `set_endpoint_timeout` is the timeout attribute's setter: refused for an endpoint
    /// connected to a channel (spec 4.2.6) and for what the attribute cannot hold.
    #[test]
    fn set_endpoint_timeout_checks_as_the_attribute_does() {
        use crate::semantics::Status;
        use std::time::Duration;
        let (a, _b, tx, ..) = sender_and_receiver("shm", "timeout-set", (32, 33), None);
        let too_long = Duration::from_millis(u64::from(u32::MAX));
        assert_eq!(
            a.set_endpoint_timeout(tx, Some(too_long)),
            Err(Status::MCAPI_ERR_ATTR_VALUE)
        );
        a.set_endpoint_timeout(tx, Some(Duration::from_micros(1500)))
            .expect("a timeout");
        assert_eq!(a.endpoint_get_attribute(tx, 9), Ok(2));
        let rx = a.endpoint_create(2).expect("an endpoint");
        let r = a.pktchan_connect_i(tx, rx).expect("connect");
        a.wait(r, None, None).expect("connected");
        assert_eq!(
            a.set_endpoint_timeout(tx, Some(Duration::ZERO)),
            Err(Status::MCAPI_ERR_CHAN_CONNECTED)
        );
        assert_eq!(a.endpoint_get_attribute(tx, 9), Ok(2));
    }

    /// `MCAPI_PORT_ANY` goes round its range: at its end it starts again with the first
    /// port free, so create/delete cycles never run out of ports.
    #[test]
    fn port_any_goes_round_its_range() {
        let (a, b, ..) = sender_and_receiver("shm", "port-any", (14, 15), None);
        b.inner.state.lock().expect("state").next_any_port = MAX_PORT;
        let last = b.endpoint_create(PORT_ANY).expect("the last port");
        assert_eq!(last.port(), MAX_PORT);
        let first = b.endpoint_create(PORT_ANY).expect("round again");
        assert_eq!(first.port(), FIRST_ANY_PORT);
        b.endpoint_delete(first).expect("delete");
        // A failed create hands out nothing: the next one gets the same port.
        assert!(b.endpoint_create(MAX_PORT + 1).is_err());
        assert_eq!(
            b.endpoint_create(PORT_ANY).map(|e| e.port()),
            Ok(FIRST_ANY_PORT + 1)
        );
        a.finalize().expect("finalize");
        b.finalize().expect("finalize");
    }

    /// An endpoint deleted while a message of its is taken and not done with (read in place
    /// right now; here its slot is simply left taken) gives its credits back to the node,
    /// but that slot stays held until freed: idle slots plus held ones never exceed the
    /// credits unlent, so whatever is lent meanwhile has a slot posted.
    #[test]
    fn a_deleted_endpoints_slot_still_in_use_is_not_counted_free() {
        let (a, b, tx, rx, to) = sender_and_receiver("shm", "held-slot", (12, 13), Some(8));
        a.msg_send(tx, to, b"held", 0).expect("send");
        let mut buf = [0u8; 8];
        assert_eq!(b.msg_recv(rx, &mut buf), Ok(4));
        {
            let mut st = b.inner.state.lock().expect("state");
            assert!(st.taken.is_some(), "the message's slot is still taken");
            // As `endpoint_delete` does, without its progress (which frees the slot first).
            let mut ep = st.endpoints.remove(&1).expect("the endpoint");
            b.inner.retire_endpoint(&mut st, 1, &mut ep);
            assert_eq!(st.recv_held, 1);
            assert!(st.idle_slots.len() as u32 + st.recv_held <= st.recv_free);
            assert!(b.inner.post_for_lent(&mut st, 8));
            assert!(st.idle_slots.len() as u32 + 8 + st.recv_held <= st.recv_free);
            b.inner.repost_taken(&mut st);
            assert_eq!(st.recv_held, 0);
            assert!(st.taken.is_none());
            assert!(st.idle_slots.len() as u32 <= st.recv_free);
        }
        a.finalize().expect("finalize");
        b.finalize().expect("finalize");
    }
}
