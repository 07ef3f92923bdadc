//! The peer lifecycle driver over `semantics::peer`: contact, control calls, liveness.

use super::common::{lock, Result};
use super::inner::NodeInner;
use super::rendezvous::{Forgotten, NO_STAGING};
use super::state::{ControlLink, LocalEndpoint, Peer, Req, State};
use crate::control::{self, Frame, Rendezvous};
use crate::semantics::credit::SenderId;
use crate::semantics::peer::{PeerEvent, PeerLife};
use crate::semantics::wire::MAX_PEERS;
use crate::semantics::Status;
use mcapi_ofi::{FiAddr, KeptMemory};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long messages of a peer that closed its control connection are still accepted.
const DEPARTURE_GRACE: Duration = Duration::from_secs(2);

/// A liveness event about one peer, with the run it is about.
#[derive(Clone, Copy)]
pub(super) enum PeerInput {
    /// A handshake with this run completed.
    Met(u64),
    /// A connection to this run ended, or the fabric cannot reach it.
    Lost(u64),
}

impl NodeInner {
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
        // Another thread's contact may wait for the node to come up without a deadline: a
        // call with one waits for it until its own deadline only (a non-blocking attempt
        // not at all: spec 3.16.12, 4.2.2).
        let _contact = match deadline {
            None => contact.lock(),
            Some(d) => contact.try_lock_until(d).ok_or(Status::MCAPI_TIMEOUT)?,
        };
        // Another thread may have made the contact meanwhile.
        if let Some(p) = connected()? {
            return Ok(p);
        }
        let to =
            Rendezvous::of(&self.config, domain, node).ok_or(Status::MCAPI_ERR_NODE_INVALID)?;
        let finalized = || self.finalized.load(Ordering::Relaxed);
        let mut stream = match control::connect_when_up(&to, deadline, &self.auth, &finalized) {
            Ok(Some(s)) => s,
            // Finalized meanwhile: MCAPI_ERR_NODE_NOTINIT.
            Ok(None) => {
                drop(self.live_state()?);
                return Err(Status::MCAPI_TIMEOUT);
            }
            Err(e) => {
                log::warn!("node <{domain}, {node}>: no control connection: {e}");
                return Err(Status::MCAPI_ERR_TRANSMISSION);
            }
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
            to: (domain, node),
            peer: u32::from(index),
            incarnation: self.incarnation,
            reads_itself: self.fab.domain.reads_made_by_reader(),
            fabric_addr: self.fab.ep.address().to_vec(),
            fabric_token: self.fabric_token,
        };
        let (peer, incarnation, reads_itself, fabric_addr, fabric_token) = match stream.call(&hello)
        {
            Ok(Frame::Welcome {
                peer,
                incarnation,
                reads_itself,
                fabric_addr,
                fabric_token,
            }) => (peer, incarnation, reads_itself, fabric_addr, fabric_token),
            // It cannot take another peer now.
            Ok(Frame::Refused(c)) if c == Status::MCAPI_ERR_MEM_LIMIT.code() => {
                return Err(Status::MCAPI_ERR_MEM_LIMIT)
            }
            _ => return Err(Status::MCAPI_ERR_TRANSMISSION),
        };
        let closer = stream.try_clone().map_err(|e| {
            log::info!("node <{domain}, {node}>: control connection: {e}");
            Status::MCAPI_ERR_TRANSMISSION
        })?;
        let mut st = self.live_state()?;
        // The run that welcomed us may have died since, and a successor's Hello been handled
        // meanwhile: meeting the dead run now would take the successor for the older one.
        if stream.is_closed() {
            return Err(Status::MCAPI_ERR_TRANSMISSION);
        }
        let addr = self
            .peer_address(&st, index, incarnation, &fabric_addr)
            .map_err(|e| {
                log::info!("node <{domain}, {node}>: its fabric address: {e}");
                Status::MCAPI_ERR_MEM_LIMIT
            })?;
        self.peer_met(
            &mut st,
            index,
            (incarnation, reads_itself, fabric_token),
            addr,
            peer as u16,
        );
        st.peers[index as usize].link = Some(Arc::new(ControlLink {
            stream: Mutex::new(stream),
            closer,
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
            reads_itself: false,
            fabric_token: 0,
        });
        st.peer_of.insert((domain, node), index);
        Ok(index)
    }

    /// A request and its answer over our control connection to `peer`. A connection that
    /// fails is closed for good: the run it talked to is lost, and the next contact makes a
    /// new one (to a restarted run, if one answers).
    pub(super) fn control_call(&self, peer: u16, request: &Frame) -> Result<Frame> {
        self.control_call_on(peer, request)
            .map(|(answer, _)| answer)
    }

    /// [`NodeInner::control_call`], also naming the run that answered: an answer that
    /// changes state is applied only while that run is still the one alive (a successor
    /// never granted what its predecessor did).
    pub(super) fn control_call_on(&self, peer: u16, request: &Frame) -> Result<(Frame, u64)> {
        let link = {
            let st = self.live_state()?;
            st.peers[peer as usize]
                .link
                .clone()
                .ok_or(Status::MCAPI_ERR_TRANSMISSION)?
        };
        let answer = lock(&link.stream).call(request);
        answer.map(|a| (a, link.incarnation)).map_err(|e| {
            log::info!("control call to peer {peer} failed: {e}");
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
        if let Some(event) = event {
            log_peer_event(st, peer, event);
        }
        match event {
            Some(PeerEvent::Restarted { .. }) => self.forget_run(st, peer),
            Some(PeerEvent::Gone) => self.run_gone(st, peer),
            Some(PeerEvent::Departed) | None => {}
        }
    }

    /// The fabric address of run `incarnation` of peer `index`: the one we hold if we met
    /// that run already (both nodes may open the contact), else inserted into the AV.
    pub(super) fn peer_address(
        &self,
        st: &State,
        index: u16,
        incarnation: u64,
        fabric_addr: &[u8],
    ) -> std::result::Result<FiAddr, mcapi_ofi::Error> {
        let p = &st.peers[index as usize];
        if p.addr != FiAddr::UNSPEC && p.life.incarnation() == Some(incarnation) {
            return Ok(p.addr);
        }
        self.fab.av.insert(fabric_addr)
    }

    /// A handshake with run `incarnation` of peer `index` completed (a Hello or Welcome): it
    /// is alive, at `addr`, numbers us `index_at_peer`, and makes its remote reads itself
    /// or not (`reads_itself`).
    pub(super) fn peer_met(
        &self,
        st: &mut State,
        index: u16,
        (incarnation, reads_itself, fabric_token): (u64, bool, u64),
        addr: FiAddr,
        index_at_peer: u16,
    ) {
        let p = &mut st.peers[index as usize];
        if p.addr != addr || p.life.incarnation() != Some(incarnation) {
            // The address of a run replaced (or gone): shm maps 256 peers at most. (A new
            // run inserted its address anew, `peer_address`, even where it is the same one:
            // the vector counts inserts, so the old run's goes.)
            self.forget_address(p.addr);
        }
        p.addr = addr;
        p.index_at_peer = index_at_peer;
        // Set after the event: a restart reclaims the old run's exposures by the old run's
        // word.
        self.peer_event_locked(st, index, PeerInput::Met(incarnation));
        st.peers[index as usize].reads_itself = reads_itself;
        st.peers[index as usize].fabric_token = fabric_token;
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
                // The new run numbers its endpoints afresh: the epoch is learnt again.
                remote.forget_epoch();
            }
        }
    }

    /// Rendezvous sends queued for peer `index` (waiting for credits) whose run is lost fail
    /// now, before their staging or lent buffer is freed: sent later (to a restarted run)
    /// their descriptors would name memory that is gone or holds another message. Their
    /// descriptors never left, so nothing reads them.
    fn fail_queued_rendezvous(&self, st: &mut State, index: u16) {
        let mut i = 0;
        while i < st.pending_sends.len() {
            let h = st.pending_sends[i];
            match st.requests.get(h) {
                Ok(&Req::Send {
                    remote, slot, rndv, ..
                }) if remote.0 == index && rndv != NO_STAGING => {
                    st.pending_sends.remove(i);
                    st.requests
                        .complete_if_pending(h, Status::MCAPI_ERR_TRANSMISSION, 0);
                    self.send_finished(st, slot, rndv, false);
                }
                _ => i += 1,
            }
        }
    }

    /// The credits and sequence state a lost run held at our endpoints go back, and our
    /// endpoints connected to one of its endpoints but not opened are unbound.
    fn reclaim_run(&self, st: &mut State, index: u16) {
        // Credit grants and RndvDones queued for the lost run are not for its successor
        // (a grant would lend credits the pool takes back below; an id may name another
        // message of the new run).
        st.outbox.retain(|&(peer, ..)| peer != index);
        self.fail_queued_rendezvous(st, index);
        self.abandon_orphans_of(st, index);
        // What we staged for it will never be read.
        let reader_reads = self.fab.sends_in_place && st.peers[index as usize].reads_itself;
        for forgotten in st.rndv.forget_peer(index) {
            let (memory, request): (KeptMemory, _) = match forgotten {
                Forgotten::Lent(exposed, request) => (exposed.into(), request),
                Forgotten::Staged(region) => (region.into(), None),
            };
            if reader_reads {
                // Its reader made every read: the registration closes before the request
                // completes.
                drop(memory);
            } else {
                // Our provider serves its reads: one may have been under way.
                self.fab.ep.keep_until_closed(memory);
            }
            if let Some(h) = request {
                st.requests
                    .complete_if_pending(h, Status::MCAPI_ERR_TRANSMISSION, 0);
            }
        }
        forget_sequence(st, index);
        unbind_unopened(st, index);
        let ports: Vec<u32> = st.endpoints.keys().copied().collect();
        for port in ports {
            if let Some(ep) = st.endpoints.get_mut(&port) {
                ep.credits.sender_gone(SenderId(u32::from(index)));
            }
            self.settle_credits(st, port);
        }
    }

    /// Run of peer `index` is gone for good (its grace over): what it held goes back, and
    /// its fabric address leaves the AV, whose entries are bounded (shm: 256 peers), so
    /// senders that come and go never fill it.
    fn run_gone(&self, st: &mut State, index: u16) {
        self.reclaim_run(st, index);
        let p = &mut st.peers[index as usize];
        self.forget_address(std::mem::replace(&mut p.addr, FiAddr::UNSPEC));
    }

    fn forget_address(&self, addr: FiAddr) {
        if addr != FiAddr::UNSPEC {
            if let Err(e) = self.fab.av.remove(addr) {
                log::info!("a departed peer's fabric address not removed: {e}");
            }
        }
    }

    /// Ends the departure graces that are over.
    pub(super) fn end_graces(&self, st: &mut State) {
        let now = Instant::now();
        for i in 0..st.peers.len() {
            if st.peers[i].life.tick(now) == Some(PeerEvent::Gone) {
                st.departing -= 1;
                self.run_gone(st, i as u16);
            }
        }
    }
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

/// Unbinds our endpoints connected to an endpoint of `peer`, whose run is lost, and not
/// opened here: no open can complete against it any more, and nothing else would ever undo
/// the connect (an endpoint that opened learns of the loss through its open). The node that
/// made the connect does not count: a third party may connect and leave (spec 4.4.1).
fn unbind_unopened(st: &mut State, peer: u16) {
    let Some((domain, node)) = st
        .peer_of
        .iter()
        .find(|(_, &p)| p == peer)
        .map(|(&node, _)| node)
    else {
        return;
    };
    for ep in st.endpoints.values_mut() {
        ep.channel.node_lost_before_open(domain, node);
    }
}

/// Says what happened to a peer: the reason later `MCAPI_ERR_TRANSMISSION`s and channel
/// errors with it have.
#[cold]
fn log_peer_event(st: &State, peer: u16, event: PeerEvent) {
    let node = st
        .peer_of
        .iter()
        .find(|(_, &p)| p == peer)
        .map_or((u32::MAX, u32::MAX), |(&node, _)| node);
    let (domain, node) = node;
    match event {
        PeerEvent::Restarted { old } => log::info!(
            "node <{domain}, {node}> runs again (run {:x} replaces {old:x}): what was kept for \
             the old run is forgotten",
            st.peers[peer as usize].life.incarnation().unwrap_or(0)
        ),
        PeerEvent::Departed => log::info!(
            "node <{domain}, {node}> is gone (its control connection closed): sends to it fail \
             with MCAPI_ERR_TRANSMISSION, its channels with their loss status"
        ),
        PeerEvent::Gone => log::debug!("node <{domain}, {node}>: departure grace over"),
    }
}
