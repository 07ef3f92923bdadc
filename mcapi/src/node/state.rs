//! What the node's one mutex guards: endpoints, peers, remotes, requests, slots.

use super::channel::{ChanReq, EndpointChannel, Packet};
use crate::control::Stream;
use crate::semantics::credit::{CreditPool, CreditWindow};
use crate::semantics::endpoint_id::EndpointId;
use crate::semantics::peer::PeerLife;
use crate::semantics::queue::{PriorityQueues, SeqReorder};
use crate::semantics::request::{RequestHandle, RequestTable};
use crate::semantics::wire::Tag;
use mcapi_ofi::{Completion, FiAddr};
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Completions read from the CQ at once.
pub(super) const CQ_BATCH: usize = 16;

pub(super) struct State {
    // Fx hashing: these maps are looked up on every message with small integer keys that
    // only this process chooses, so SipHash's flooding resistance buys nothing here.
    pub(super) endpoints: HashMap<u32, LocalEndpoint>,
    pub(super) next_any_port: u32,
    /// The credit epoch the next endpoint created gets (see [`LocalEndpoint::epoch`]).
    pub(super) next_endpoint_epoch: u16,
    /// Credits of the node's receive pool not lent to any endpoint (docs/design.md,
    /// Credits).
    pub(super) recv_free: u32,
    /// Slots of the node's receive pool neither posted nor holding a message, the one
    /// freed last on top. At most `recv_free` less `recv_held` of them: every credit lent
    /// has a slot posted or holding its message, and the slots posted are few and were in
    /// use recently (a ping-pong's messages land in memory still in cache, not in the next
    /// of hundreds of slots in turn).
    pub(super) idle_slots: Vec<u32>,
    /// Slots still held by messages of deleted endpoints (taken, or being read in place)
    /// whose credits already went back to `recv_free`: not available until freed, so
    /// [`NodeInner::post_for_lent`](super::inner::NodeInner::post_for_lent) counts them
    /// as lent.
    pub(super) recv_held: u32,
    /// Per receive slot, the run of the node that sent the rendezvous descriptor in it, as
    /// known when it arrived (0: unknown, any run): its data is read from that run only,
    /// and only that run is told `RndvDone` (a restarted sender reuses staging ids).
    pub(super) slot_run: Vec<u64>,
    /// Credits that deleted endpoints' senders still held: spent on messages that arrive
    /// for nobody, or given back when the senders hear of the delete.
    pub(super) recv_strays: u32,
    /// Endpoints whose senders wait for credits the node's pool had none of, oldest first.
    pub(super) hungry: VecDeque<u32>,
    /// Whether the other endpoints' idle credits were recalled for the hungry ones.
    pub(super) recalled: bool,
    pub(super) peers: Vec<Peer>,
    pub(super) peer_of: HashMap<(u32, u32), u16>,
    pub(super) remotes: HashMap<(u16, u32), Remote>,
    pub(super) send_free: Vec<u32>,
    /// Per send slot, the peer run a send posted from it (with a completion) went to, until
    /// its completion is read: what `finalize` waits for (`flush_sends`).
    pub(super) send_in_flight: Vec<Option<PeerRun>>,
    pub(super) control_posted: u32,
    /// Control messages waiting for the provider to accept them.
    pub(super) outbox: VecDeque<(u16, Tag, u64)>,
    pub(super) requests: RequestTable<Req>,
    /// Non-blocking sends waiting for credits, in the order they were made.
    pub(super) pending_sends: VecDeque<RequestHandle>,
    /// Peers in their departure grace ([`PeerLife::Departing`]): when none, the progress
    /// loop skips looking for a grace that is over.
    pub(super) departing: u32,
    /// Where the CQ is read into (kept here so no read has to clear a fresh buffer).
    pub(super) cq_buf: [Completion; CQ_BATCH],
    /// Where a queued send small enough to inject is copied out of its send slot (the
    /// provider's inject size, at most a slot).
    pub(super) inject_scratch: Box<[u8]>,
    /// The receive slot of the message taken last, to be freed (returning its
    /// sender's credit) by the next receive or CQ read: after the application's reply to
    /// it, not before (see [`NodeInner::repost_taken`](super::inner::NodeInner::repost_taken)).
    pub(super) taken: Option<TakenSlot>,
    /// Packets of completed `pktchan_recv_i` requests, until asked for.
    pub(super) delivered: HashMap<RequestHandle, Packet>,
    /// Large messages: staged sends, the receive staging region, the read under way.
    pub(super) rndv: super::rendezvous::Rendezvous,
    /// The endpoint whose blocking receive is reading the CQ right now (under this lock):
    /// a rendezvous message that arrives at the head of its queue is not read ahead, the
    /// receive reads it into its own buffer next.
    pub(super) receiving_in_place: Option<u32>,
    /// Blocking receives waiting, by endpoint: a rendezvous message that arrives at the
    /// head of such an endpoint's queue is left for them to read in place, whoever reads
    /// the CQ (another thread, the background thread).
    pub(super) waiting_receives: WaitingReceives,
    /// The background thread is reading the CQ (not an application call).
    pub(super) in_background: bool,
    /// The message that receive took off its queue to read in place (handed over by
    /// `take_message`, which found it at the head).
    pub(super) in_place_read: Option<super::message_path::InPlace>,
    /// Rendezvous messages read straight into a receive's buffer (tests).
    pub(super) read_in_place: u64,
    /// Read completions to take as failed (tests of the rendezvous' retries).
    #[cfg(test)]
    pub(super) forced_read_failures: u32,
    pub(super) finalized: bool,
    /// `finalize` flushes the sends posted: queued ones stay queued (and are discarded),
    /// since a send posted after the flush would be lost with the endpoint.
    pub(super) sends_flushed: bool,
}

impl State {
    /// The peer index of a remote endpoint already resolved by `endpoint_get` (or a send).
    pub(super) fn known_remote(&self, to: EndpointId) -> Option<u16> {
        let peer = *self.peer_of.get(&(to.domain(), to.node()))?;
        self.remotes
            .contains_key(&(peer, to.port()))
            .then_some(peer)
    }

    /// Node `<domain, node>`'s peer index and the run of it alive now (0: none met yet),
    /// for a channel side to bind to.
    pub(super) fn peer_run(&self, domain: u32, node: u32) -> Option<PeerRun> {
        let p = *self.peer_of.get(&(domain, node))?;
        let run = self.peers[p as usize].life.incarnation().unwrap_or(0);
        Some((p, run))
    }

    /// Whether the run of node `<domain, node>` we knew was lost and no other has been met.
    pub(super) fn run_lost(&self, domain: u32, node: u32) -> bool {
        self.peer_of.get(&(domain, node)).is_some_and(|&p| {
            let life = &self.peers[p as usize].life;
            life.incarnation().is_some() && !life.is_alive()
        })
    }

    /// Whether to take this read's completion as failed (tests: `forced_read_failures`).
    #[cfg(test)]
    pub(super) fn forced_read_failure(&mut self) -> bool {
        let forced = self.forced_read_failures > 0;
        self.forced_read_failures -= u32::from(forced);
        forced
    }

    /// The run that sent the rendezvous descriptor in receive slot `slot` (see
    /// [`State::slot_run`]).
    pub(super) fn arrival_run(&self, slot: u32) -> u64 {
        self.slot_run.get(slot as usize).copied().unwrap_or(0)
    }

    /// A send to `peer` was posted from send slot `slot`, with a completion to come.
    #[inline(always)]
    pub(super) fn slot_sent(&mut self, slot: u32, peer: u16) {
        let run = self.peers[peer as usize].life.incarnation().unwrap_or(0);
        self.send_in_flight[slot as usize] = Some((peer, run));
    }

    /// The completion of the send from slot `slot` was read: the slot is free.
    #[inline(always)]
    pub(super) fn slot_completed(&mut self, slot: u32) {
        if let Some(s) = self.send_in_flight.get_mut(slot as usize) {
            *s = None;
        }
        self.send_free.push(slot);
    }

    /// Whether a send posted from a slot to a peer run that is still alive has not
    /// completed (a send to a run that died may never complete: shm).
    pub(super) fn sends_in_flight_to_live_runs(&self) -> bool {
        self.send_in_flight
            .iter()
            .flatten()
            .any(|&run| self.run_alive(run))
    }

    /// Whether run `run.1` of peer `run.0` is alive (0: whichever run is alive now).
    pub(super) fn run_alive(&self, (peer, run): PeerRun) -> bool {
        self.peers.get(peer as usize).is_some_and(|p| match run {
            0 => p.life.is_alive(),
            run => p.life.is_alive_as(run),
        })
    }

    /// Our index of node `<domain, node>` while we hold a control connection to it that
    /// has not been seen closed.
    pub(super) fn connected_peer(&self, domain: u32, node: u32) -> Option<u16> {
        let p = *self.peer_of.get(&(domain, node))?;
        self.peers[p as usize]
            .link
            .as_ref()
            .is_some_and(|l| !l.is_closed())
            .then_some(p)
    }
}

/// What a request is for.
pub(super) enum Req {
    /// A message copied into send slot `slot`, waiting for a credit of `remote`.
    Send {
        remote: (u16, u32),
        priority: u8,
        slot: u32,
        len: usize,
        /// The staged message (`rendezvous`) whose descriptor is in the slot, or
        /// [`NO_STAGING`](super::rendezvous::NO_STAGING).
        rndv: u64,
    },
    /// A receive on local endpoint `port`; it takes a message when tested or waited on, or,
    /// posted with a buffer (`posted`), a rendezvous message is read straight into that
    /// buffer as it arrives (`NodeInner::bind_posted`).
    Recv {
        port: u32,
        posted: Option<mcapi_ofi::RecvBuffer>,
        /// Its message is being read in place (by its waiter, or into `posted`; its queue
        /// no longer has it): it cannot be cancelled.
        reading: bool,
    },
    /// An endpoint lookup; it completes once the endpoint exists.
    Get { id: EndpointId },
    /// A channel operation.
    Chan(ChanReq),
    /// Nothing under way: an `_i` call that failed at once, completed with its error
    /// (`MCAPI_COMPAT=mca`, [`Node::failed_request`](super::Node::failed_request)).
    Failed,
}

impl State {
    /// Whether receive request `h`'s message is being read in place.
    pub(super) fn reading_into(&self, h: RequestHandle) -> bool {
        matches!(self.requests.get(h), Ok(Req::Recv { reading: true, .. }))
    }

    /// Marks receive request `h` as having its message read in place (`on`) or not.
    pub(super) fn set_reading_into(&mut self, h: RequestHandle, on: bool) {
        if let Ok(Req::Recv { reading, .. }) = self.requests.get_mut(h) {
            *reading = on;
        }
    }

    /// Takes the buffer receive request `h` was posted with out of it, for a receive that
    /// copies or reads into it now ([`State::restore_posted`] puts it back).
    pub(super) fn take_posted(&mut self, h: RequestHandle) -> Option<mcapi_ofi::RecvBuffer> {
        match self.requests.get_mut(h) {
            Ok(Req::Recv { posted, .. }) => posted.take(),
            _ => None,
        }
    }

    /// Gives request `h` back the buffer [`State::take_posted`] took.
    pub(super) fn restore_posted(&mut self, h: RequestHandle, buf: mcapi_ofi::RecvBuffer) {
        if let Ok(Req::Recv { posted, .. }) = self.requests.get_mut(h) {
            *posted = Some(buf);
        }
    }
}

pub(super) struct Peer {
    pub(super) addr: FiAddr,
    /// How the peer numbers us: goes into the tags we send it.
    pub(super) index_at_peer: u16,
    /// Which run of the node we know, and whether it is alive (`semantics::peer`).
    pub(super) life: PeerLife,
    /// Our control connection to the run in `life`, once made.
    pub(super) link: Option<Arc<ControlLink>>,
    /// Its remote reads are made by its own process (its Hello or Welcome said so): only
    /// then is memory the provider here would not serve lent to it.
    pub(super) reads_itself: bool,
    /// What our fabric control messages to it carry (its [`NodeInner::fabric_token`], from
    /// its Hello or Welcome).
    ///
    /// [`NodeInner::fabric_token`]: super::inner::NodeInner::fabric_token
    pub(super) fabric_token: u64,
}

impl Peer {
    pub(super) fn is_alive(&self) -> bool {
        self.life.is_alive()
    }
}

/// A peer's index and one run of it (an incarnation; 0: whichever run is alive).
pub(super) type PeerRun = (u16, u64);

/// A control connection we opened to one run of a peer node.
pub(super) struct ControlLink {
    pub(super) stream: Mutex<Stream>,
    /// A second handle on the same socket, to shut it down (finalize) without waiting for
    /// a call in progress on `stream`, which the shutdown ends.
    pub(super) closer: Stream,
    /// The run that answered its handshake: the one this connection's end is about.
    pub(super) incarnation: u64,
    /// Set once the connection is seen closed (by the liveness watcher or a failed call):
    /// a sender spinning under the state lock reads it without a system call.
    pub(super) closed: AtomicBool,
}

impl ControlLink {
    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

pub(super) struct LocalEndpoint {
    pub(super) queue: PriorityQueues<Arrived>,
    pub(super) credits: CreditPool,
    pub(super) reorder: SeqReorder<u16, Arrived>,
    pub(super) timeout: Option<Duration>,
    pub(super) priority: u32,
    /// Non-blocking receives in the order they were made; each takes the next message.
    pub(super) pending_recvs: VecDeque<RequestHandle>,
    /// Largest packet (`MCAPI_ENDP_ATTR_MAX_PAYLOAD_SIZE`, settable for channels).
    pub(super) max_payload: usize,
    pub(super) channel: EndpointChannel,
    /// Tells this endpoint from every other one of the node (node-wide, wrapping at 2^16):
    /// its credit controls carry it, so those of an endpoint deleted since, or created at
    /// its port later, never mix with its own; and a message taken from it knows it.
    pub(super) epoch: u16,
    /// Buffers of messages from this node's own endpoints (`Arrived::slot` with
    /// [`LOCAL_SLOT`]), made on first use and reused: at most N.
    pub(super) local_bufs: Vec<Vec<u8>>,
    pub(super) local_free: Vec<u32>,
}

/// `Arrived::slot` of a message from the node's own endpoints: an index into
/// `LocalEndpoint::local_bufs`, not a slot of the node's receive pool.
pub(super) const LOCAL_SLOT: u32 = 1 << 31;
/// `Arrived::peer` of a message from the node's own endpoints (it passes no credit pool
/// and no reorder buffer), and the peer of `Req::Send` to one of them.
pub(super) const LOCAL_PEER: u16 = u16::MAX;

/// The receive slot of a message the application took.
#[derive(Clone, Copy)]
pub(super) struct TakenSlot {
    pub(super) port: u32,
    /// The endpoint's epoch (`LocalEndpoint::epoch`): tells it from a later one at the port.
    pub(super) epoch: u16,
    pub(super) slot: u32,
    pub(super) peer: u16,
}

/// A message in its receive slot of the node's pool (12 bytes: cheap to move through the
/// queues).
#[derive(Clone, Copy, Debug)]
pub(super) struct Arrived {
    pub(super) slot: u32,
    pub(super) len: u32,
    pub(super) peer: u16,
    pub(super) priority: u8,
    /// A rendezvous descriptor (its slot holds where the data is; `len` is the data's).
    pub(super) rndv: bool,
}

pub(super) struct Remote {
    /// The epoch of the endpoint this window is for (`LocalEndpoint::epoch` at its node):
    /// credit controls carry it, so those of an endpoint deleted since (or of one created
    /// at the port after it) never mix with this one's.
    pub(super) epoch: u16,
    /// `false` once the node restarted (a new run numbers its endpoints afresh): the
    /// epoch is taken from the first answer or grant, and requests say they do not know it.
    pub(super) epoch_known: bool,
    /// Times the window was replaced for another epoch (wrapping): tells an answer to a
    /// request made before a replacement from one made after it.
    pub(super) replaced: u32,
    pub(super) window: CreditWindow,
    /// A credit taken for a send the provider refused (-FI_EAGAIN), used first next time.
    pub(super) spare: u32,
    pub(super) next_seq: u16,
    /// When the credit request now unanswered went (or the window was last checked):
    /// after [`STALLED_REQUEST`] the endpoint is looked up on its node's control plane
    /// (`NodeInner::verify_stalled_windows`).
    pub(super) asked_at: Option<std::time::Instant>,
}

/// How long a credit request may go unanswered before its endpoint is looked up: a request
/// for an endpoint deleted before the sender had credits of it is dropped by the receiver,
/// which has no endpoint to ask.
pub(super) const STALLED_REQUEST: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether credit epoch `a` came before `b` (node-wide counts that wrap at 2^16: compared
/// within half the range).
pub(super) fn epoch_before(a: u16, b: u16) -> bool {
    (a.wrapping_sub(b) as i16) < 0
}

impl Remote {
    /// A window for endpoint generation `epoch`: no credits yet, sequence numbers from 0.
    pub(super) fn new(epoch: u16) -> Remote {
        Remote {
            epoch,
            epoch_known: true,
            replaced: 0,
            window: CreditWindow::new(),
            spare: 0,
            next_seq: 0,
            asked_at: None,
        }
    }

    /// Its node restarted: everything of the old run is forgotten, the epoch included.
    pub(super) fn forget_epoch(&mut self) {
        let replaced = self.replaced.wrapping_add(1);
        *self = Remote::new(0);
        (self.epoch_known, self.replaced) = (false, replaced);
    }

    /// Whether a credit control of endpoint epoch `epoch` is for this window (one whose
    /// epoch is not known yet takes the first and adopts it).
    pub(super) fn accepts(&mut self, epoch: u16) -> bool {
        if !self.epoch_known {
            (self.epoch, self.epoch_known) = (epoch, true);
        }
        self.epoch == epoch
    }

    /// This window is for the endpoint of credit epoch `epoch` from now on (the one it was
    /// for was replaced at its port, as the caller learnt from that node): emptied, and what
    /// the old one lent is returned (`Some`: a Return to queue, of `(old epoch, credits)`).
    pub(super) fn replace(&mut self, epoch: u16) -> Option<(u16, u32)> {
        if self.accepts(epoch) {
            return None;
        }
        let unspent = self.window.available() + self.spare;
        let replaced = self.replaced.wrapping_add(1);
        let old = std::mem::replace(self, Remote::new(epoch));
        self.replaced = replaced;
        (unspent > 0).then_some((old.epoch, unspent))
    }

    pub(super) fn take_credit(&mut self) -> bool {
        if self.spare > 0 {
            self.spare -= 1;
            return true;
        }
        self.window.try_take()
    }
}

/// Counts of blocked receives by endpoint port (the ports some receive waits on: a few,
/// scanned; room for 16 made once, so entering allocates nothing until then).
pub(super) struct WaitingReceives {
    ports: Vec<(u32, u32)>,
    /// A rendezvous message was left unread for a waiting receive since no receive waited
    /// (`NodeInner::rendezvous_arrived`): a port's last receive to leave looks for it.
    left_unread: bool,
}

impl Default for WaitingReceives {
    fn default() -> WaitingReceives {
        WaitingReceives {
            ports: Vec::with_capacity(16),
            left_unread: false,
        }
    }
}

impl WaitingReceives {
    #[inline(always)]
    pub(super) fn enter(&mut self, port: u32) {
        match self.ports.iter_mut().find(|(p, _)| *p == port) {
            Some((_, n)) => *n += 1,
            None => self.ports.push((port, 1)),
        }
    }

    /// One receive on `port` stopped waiting; `true` if it was the last and a rendezvous
    /// message may have been left unread for it at the head of the port's queue.
    #[inline(always)]
    pub(super) fn leave(&mut self, port: u32) -> bool {
        let Some(i) = self.ports.iter().position(|(p, _)| *p == port) else {
            return false;
        };
        self.ports[i].1 -= 1;
        if self.ports[i].1 > 0 {
            return false;
        }
        self.ports.swap_remove(i);
        let look = self.left_unread;
        // Every port's last receive has left (and looked): nothing is left unread for one.
        self.left_unread &= !self.ports.is_empty();
        look
    }

    /// A rendezvous message at the head of a waited port's queue is left unread for the
    /// receive that waits there.
    #[inline(always)]
    pub(super) fn leave_unread(&mut self) {
        self.left_unread = true;
    }

    /// Whether a blocking receive is waiting on `port`.
    #[inline(always)]
    pub(super) fn on(&self, port: u32) -> bool {
        self.ports.iter().any(|(p, _)| *p == port)
    }
}
