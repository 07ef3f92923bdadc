//! MCAPI nodes: the driver that moves the semantic core's decisions over libfabric.
//!
//! A [`Node`] owns one fabric stack (domain, CQ, AV, one RDM endpoint; see
//! `docs/design.md`), a control server, and its state behind one mutex. Blocking calls take
//! the mutex, read the CQ themselves (no thread hop), release it and back off between
//! attempts, so threads of one node and processes on two cores do not starve each other.
//!
//! Messages: a local endpoint posts its N receive slots (tag = its port); senders hold
//! credits for it (`semantics::credit`) so nothing arrives without a posted slot; a message
//! is copied out of its slot by `msg_recv`. The slot is posted again, and its credit
//! returned, by the node's next receive call or CQ read, so a reply goes out first.

use crate::attributes::{
    EndpointAttribute, NodeAttributes, FIFO_BUFFER, LOCAL_MEMORY, TIMEOUT_INFINITE,
};
use crate::config::Config;
use crate::control::{self, ControlServer, Frame, Handler, Rendezvous, StartError, Stream};
use crate::semantics::credit::{Control, CreditPool, CreditWindow, SenderId};
use crate::semantics::endpoint_id::{EndpointId, MAX_DOMAIN, MAX_NODE, PORT_ANY};
use crate::semantics::peer::{PeerEvent, PeerLife};
use crate::semantics::queue::{PriorityQueues, SeqReorder};
use crate::semantics::request::{RequestHandle, RequestState, RequestTable};
use crate::semantics::wire::{Context, Kind, Tag, MAX_PEERS, MAX_WIRE_PORT};
use crate::semantics::Status;
use mcapi_ofi::{
    flags, AddressVector, Completion, CompletionQueue, Domain, Endpoint, EndpointOptions,
    Error as OfiError, FiAddr, MemoryRegion, WaitObject,
};
use rustc_hash::FxHashMap as HashMap;
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

/// Completions read from the CQ at once.
const CQ_BATCH: usize = 16;
/// How long messages of a peer that closed its control connection are still accepted.
const DEPARTURE_GRACE: Duration = Duration::from_secs(2);
/// How long a deleted endpoint's node tries to reach a sender to tell it.
const PEER_NOTICE: Duration = Duration::from_secs(1);
/// Sender nodes one endpoint serves at once (its credit pool and reorder state are
/// preallocated for them).
const MAX_SENDERS: usize = 256;

mod channels;
mod common;
mod driver;
mod fabric;
mod messages;
mod requests;
mod scalar_hub;
mod seq;
mod service;
mod wait;

use channels::{ChanReq, ChannelTable, EndpointChannel};
pub use channels::{ChannelHandle, Packet, MAX_PKT_SIZE};
use common::{lock, ofi_status, Result};
pub use common::{MAX_MSG_SIZE, NUM_PRIORITIES};
use driver::PeerInput;
use fabric::{open_fabric, Fab, CONTROL_SLOTS_MIN, CONTROL_SLOTS_PER_REMOTE, SEND_SLOTS};
use service::{background_progress, ControlHandler};
use wait::{Backoff, Deadline, SleepCqs};

/// An initialized MCAPI node. Cheap to clone; usable from any thread.
#[derive(Clone)]
pub struct Node {
    inner: Arc<NodeInner>,
}

struct NodeInner {
    domain_id: u32,
    node_id: u32,
    attributes: NodeAttributes,
    config: Config,
    fab: Fab,
    state: Mutex<State>,
    control: Mutex<Option<ControlServer>>,
    progress_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Counts progress made by application calls, so the background thread can keep away.
    app_progress: AtomicU64,
    channels: ChannelTable,
    /// Tells this run of the node from earlier ones with the same id (peers' view).
    incarnation: u64,
    /// One lock per node we make first contact with: two threads contacting it at once
    /// must share one control connection (a second one replacing the first would close
    /// it, and the peer would take us for dead).
    contacting: Mutex<HashMap<(u32, u32), ContactLock>>,
    /// Where the liveness watcher's next round starts among the peers.
    watch_cursor: std::sync::atomic::AtomicUsize,
    /// Why the node stopped working, once a background thread (progress, control server)
    /// panicked: its state may be half-changed, so every later call fails.
    broken: OnceLock<String>,
    /// Makes the background thread panic once (tests of the guard).
    #[cfg(test)]
    panic_in_background: std::sync::atomic::AtomicBool,
}

/// Held while first contact with one node is made.
type ContactLock = Arc<Mutex<()>>;

struct State {
    // Fx hashing: these maps are looked up on every message with small integer keys that
    // only this process chooses, so SipHash's flooding resistance buys nothing here.
    endpoints: HashMap<u32, LocalEndpoint>,
    next_any_port: u32,
    /// The generation the next endpoint created gets (see [`LocalEndpoint::generation`]).
    next_endpoint_generation: u8,
    retired_pools: Vec<RetiredPool>,
    peers: Vec<Peer>,
    peer_of: HashMap<(u32, u32), u16>,
    remotes: HashMap<(u16, u32), Remote>,
    send_free: Vec<u32>,
    control_posted: u32,
    /// Control messages waiting for the provider to accept them.
    outbox: VecDeque<(u16, Tag, u64)>,
    requests: RequestTable<Req>,
    /// Non-blocking sends waiting for credits, in the order they were made.
    pending_sends: VecDeque<RequestHandle>,
    /// Peers in their departure grace ([`PeerLife::Departing`]): when none, the progress
    /// loop skips looking for a grace that is over.
    departing: u16,
    /// Where the CQ is read into (kept here so no read has to clear a fresh buffer).
    cq_buf: [Completion; CQ_BATCH],
    /// The receive slot of the message taken last, to be posted again (returning its
    /// sender's credit) by the next receive or CQ read: after the application's reply to
    /// it, not before (see [`NodeInner::repost_taken`]).
    taken: Option<TakenSlot>,
    /// Packets of completed `pktchan_recv_i` requests, until asked for.
    delivered: HashMap<RequestHandle, Packet>,
    finalized: bool,
}

impl State {
    /// The peer index of a remote endpoint already resolved by `endpoint_get` (or a send).
    fn known_remote(&self, to: EndpointId) -> Option<u16> {
        let peer = *self.peer_of.get(&(to.domain(), to.node()))?;
        self.remotes
            .contains_key(&(peer, to.port()))
            .then_some(peer)
    }

    /// A receive posted by a deleted endpoint came back (a message, or cancelled).
    fn retired_slot_back(&mut self, port: u32, generation: u8) {
        if let Some(r) = self
            .retired_pools
            .iter_mut()
            .find(|r| (r.port, r.generation) == (port, generation))
        {
            r.outstanding = r.outstanding.saturating_sub(1);
        }
    }

    /// A retired pool of `slots` slots that nothing is posted into any more.
    fn reusable_pool(&mut self, slots: u32) -> Option<MemoryRegion> {
        let i = self
            .retired_pools
            .iter()
            .position(|r| r.outstanding == 0 && r.slots == slots)?;
        Some(self.retired_pools.swap_remove(i).pool)
    }

    /// Node `<domain, node>`'s peer index and the run of it alive now (0: none met yet),
    /// for a channel side to bind to.
    fn peer_run(&self, domain: u32, node: u32) -> Option<PeerRun> {
        let p = *self.peer_of.get(&(domain, node))?;
        let run = self.peers[p as usize].life.incarnation().unwrap_or(0);
        Some((p, run))
    }

    /// Whether the run of node `<domain, node>` we knew was lost and no other has been met.
    fn run_lost(&self, domain: u32, node: u32) -> bool {
        self.peer_of.get(&(domain, node)).is_some_and(|&p| {
            let life = &self.peers[p as usize].life;
            life.incarnation().is_some() && !life.is_alive()
        })
    }

    /// Whether run `run.1` of peer `run.0` is alive (0: whichever run is alive now).
    fn run_alive(&self, (peer, run): PeerRun) -> bool {
        self.peers.get(peer as usize).is_some_and(|p| match run {
            0 => p.life.is_alive(),
            run => p.life.is_alive_as(run),
        })
    }

    /// Our index of node `<domain, node>` while we hold a control connection to it that
    /// has not been seen closed.
    fn connected_peer(&self, domain: u32, node: u32) -> Option<u16> {
        let p = *self.peer_of.get(&(domain, node))?;
        self.peers[p as usize]
            .link
            .as_ref()
            .is_some_and(|l| !l.is_closed())
            .then_some(p)
    }
}

/// What a request is for.
enum Req {
    /// A message copied into send slot `slot`, waiting for a credit of `remote`.
    Send {
        remote: (u16, u32),
        priority: u8,
        slot: u32,
        len: usize,
    },
    /// A receive on local endpoint `port`; it takes a message when tested or waited on.
    Recv { port: u32 },
    /// An endpoint lookup; it completes once the endpoint exists.
    Get { id: EndpointId },
    /// A channel operation.
    Chan(ChanReq),
}

struct Peer {
    addr: FiAddr,
    /// How the peer numbers us: goes into the tags we send it.
    index_at_peer: u16,
    /// Which run of the node we know, and whether it is alive (`semantics::peer`).
    life: PeerLife,
    /// Our control connection to the run in `life`, once made.
    link: Option<Arc<ControlLink>>,
}

impl Peer {
    fn is_alive(&self) -> bool {
        self.life.is_alive()
    }
}

/// A peer's index and one run of it (an incarnation; 0: whichever run is alive).
type PeerRun = (u16, u64);

/// A control connection we opened to one run of a peer node.
struct ControlLink {
    stream: Mutex<Stream>,
    /// The run that answered its handshake: the one this connection's end is about.
    incarnation: u64,
    /// Set once the connection is seen closed (by the liveness watcher or a failed call):
    /// a sender spinning under the state lock reads it without a system call.
    closed: std::sync::atomic::AtomicBool,
}

impl ControlLink {
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// A value no earlier run of a node with the same id had: the clock, the process and a
/// per-process counter.
fn new_incarnation() -> u64 {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    (nanos ^ u64::from(std::process::id()).rotate_left(32) ^ n.rotate_left(48)) | 1
}

struct LocalEndpoint {
    pool: MemoryRegion,
    slots: u32,
    queue: PriorityQueues<Arrived>,
    credits: CreditPool,
    reorder: SeqReorder<u16, Arrived>,
    timeout: Option<Duration>,
    priority: u32,
    /// Non-blocking receives in the order they were made; each takes the next message.
    pending_recvs: VecDeque<RequestHandle>,
    /// Largest packet (`MCAPI_ENDP_ATTR_MAX_PAYLOAD_SIZE`, settable for channels).
    max_payload: usize,
    channel: EndpointChannel,
    /// Tells this endpoint's receive slots from those of an earlier one at the same port.
    generation: u8,
    /// Receive slots posted to the fabric (not holding a message).
    posted: u32,
}

/// The receive pool of a deleted endpoint, reused by a new endpoint once the provider has
/// given back every receive that was posted into it (completed or cancelled).
struct RetiredPool {
    port: u32,
    generation: u8,
    slots: u32,
    pool: MemoryRegion,
    /// Receives still posted into the pool.
    outstanding: u32,
}

/// The receive slot of a message the application took.
#[derive(Clone, Copy)]
struct TakenSlot {
    port: u32,
    generation: u8,
    slot: u32,
    peer: u16,
}

/// A message in its receive slot (12 bytes: cheap to move through the queues).
#[derive(Clone, Copy, Debug)]
struct Arrived {
    slot: u32,
    len: u32,
    peer: u16,
    priority: u8,
}

struct Remote {
    window: CreditWindow,
    /// A credit taken for a send the provider refused (-FI_EAGAIN), used first next time.
    spare: u32,
    next_seq: u16,
}

impl Remote {
    fn take_credit(&mut self) -> bool {
        if self.spare > 0 {
            self.spare -= 1;
            return true;
        }
        self.window.try_take()
    }
}

/// Nodes initialized in this process, so a second `initialize` of one is refused.
fn live_nodes() -> &'static Mutex<HashSet<(u32, u32)>> {
    static LIVE: OnceLock<Mutex<HashSet<(u32, u32)>>> = OnceLock::new();
    LIVE.get_or_init(Default::default)
}

/// Every live node of the process, for [`Node::current`].
fn process_nodes() -> &'static Mutex<Vec<Weak<NodeInner>>> {
    static NODES: OnceLock<Mutex<Vec<Weak<NodeInner>>>> = OnceLock::new();
    NODES.get_or_init(Default::default)
}

thread_local! {
    /// The node this thread initialized, if any.
    static THREAD_NODE: std::cell::RefCell<Weak<NodeInner>> = const { std::cell::RefCell::new(Weak::new()) };
}

impl Node {
    /// `mcapi_initialize`: creates node `<domain, node>` with `config`.
    ///
    /// # Errors
    /// `MCAPI_ERR_DOMAIN_INVALID` / `MCAPI_ERR_NODE_INVALID` for out-of-range ids,
    /// `MCAPI_ERR_NODE_INITIALIZED` if this process already runs that node,
    /// `MCAPI_ERR_NODE_INITFAILED` if another process does, or no provider works.
    pub fn initialize(domain_id: u32, node_id: u32, config: Config) -> Result<Node> {
        Node::initialize_with(domain_id, node_id, NodeAttributes::default(), config)
    }

    /// `mcapi_initialize` with node attributes (`mcapi_node_init_attributes` /
    /// `mcapi_node_set_attribute`).
    ///
    /// # Errors
    /// As [`Node::initialize`].
    pub fn initialize_with(
        domain_id: u32,
        node_id: u32,
        attributes: NodeAttributes,
        config: Config,
    ) -> Result<Node> {
        if domain_id > MAX_DOMAIN {
            return Err(Status::MCAPI_ERR_DOMAIN_INVALID);
        }
        if node_id > MAX_NODE {
            return Err(Status::MCAPI_ERR_NODE_INVALID);
        }
        if !lock(live_nodes()).insert((domain_id, node_id)) {
            return Err(Status::MCAPI_ERR_NODE_INITIALIZED);
        }
        let node = Node::start(domain_id, node_id, attributes, config);
        match &node {
            Ok(n) => {
                THREAD_NODE.with(|t| *t.borrow_mut() = Arc::downgrade(&n.inner));
                let mut all = lock(process_nodes());
                all.retain(|w| w.strong_count() > 0);
                all.push(Arc::downgrade(&n.inner));
            }
            Err(_) => {
                lock(live_nodes()).remove(&(domain_id, node_id));
            }
        }
        node
    }

    /// The node the calling thread works with, as the C API's implicit node: the one this
    /// thread initialized, else the process's node when there is exactly one (threads of a
    /// process sharing one node, the FAQ's model).
    ///
    /// # Errors
    /// `MCAPI_ERR_NODE_NOTINIT` when the thread initialized none and the process has zero or
    /// several live nodes.
    pub fn current() -> Result<Node> {
        let live = |w: &Weak<NodeInner>| w.upgrade().filter(|n| !lock(&n.state).finalized);
        if let Some(inner) = THREAD_NODE.with(|t| live(&t.borrow())) {
            return Ok(Node { inner });
        }
        let all = lock(process_nodes());
        let mut alive = all.iter().filter_map(live);
        match (alive.next(), alive.next()) {
            (Some(inner), None) => Ok(Node { inner }),
            _ => Err(Status::MCAPI_ERR_NODE_NOTINIT),
        }
    }

    fn start(
        domain_id: u32,
        node_id: u32,
        attributes: NodeAttributes,
        config: Config,
    ) -> Result<Node> {
        let fab =
            open_fabric(&config, domain_id, node_id).ok_or(Status::MCAPI_ERR_NODE_INITFAILED)?;
        let state = State {
            endpoints: HashMap::default(),
            next_any_port: 1 << 20,
            next_endpoint_generation: 0,
            retired_pools: Vec::new(),
            peers: Vec::new(),
            peer_of: HashMap::default(),
            remotes: HashMap::default(),
            send_free: (0..SEND_SLOTS).rev().collect(),
            control_posted: 0,
            outbox: VecDeque::with_capacity(256),
            requests: RequestTable::new(config.request_table_size),
            pending_sends: VecDeque::with_capacity(64),
            departing: 0,
            cq_buf: [Completion::default(); CQ_BATCH],
            taken: None,
            delivered: HashMap::default(),
            finalized: false,
        };
        let busy_every_poll = fab.provider.contains("ofi_rxm");
        let inner = Arc::new(NodeInner {
            domain_id,
            node_id,
            attributes,
            config,
            fab,
            state: Mutex::new(state),
            control: Mutex::new(None),
            progress_thread: Mutex::new(None),
            app_progress: AtomicU64::new(0),
            channels: ChannelTable::new(busy_every_poll),
            incarnation: new_incarnation(),
            contacting: Mutex::new(HashMap::default()),
            watch_cursor: Default::default(),
            broken: OnceLock::new(),
            #[cfg(test)]
            panic_in_background: Default::default(),
        });
        inner
            .fab
            .post_control_slots(&mut lock(&inner.state), CONTROL_SLOTS_MIN)?;
        let handler: Arc<dyn Handler> = Arc::new(ControlHandler(Arc::downgrade(&inner)));
        let server = ControlServer::start(&inner.config, domain_id, node_id, handler).map_err(
            |e| match e {
                StartError::NodeTaken | StartError::NotInTopology | StartError::Io(_) => {
                    Status::MCAPI_ERR_NODE_INITFAILED
                }
            },
        )?;
        *lock(&inner.control) = Some(server);
        let weak = Arc::downgrade(&inner);
        let thread = std::thread::Builder::new()
            .name(format!("mcapi-progress-{domain_id}.{node_id}"))
            .spawn(move || background_progress(weak))
            .map_err(|_| Status::MCAPI_ERR_NODE_INITFAILED)?;
        *lock(&inner.progress_thread) = Some(thread);
        Ok(Node { inner })
    }

    /// `mcapi_finalize`: stops the control server, discards pending data and releases every
    /// fabric resource once the last handle of this node is gone.
    ///
    /// # Errors
    /// `MCAPI_ERR_NODE_NOTINIT` if the node was already finalized.
    pub fn finalize(&self) -> Result<()> {
        self.inner.notify_channel_peers();
        {
            let mut st = lock(&self.inner.state);
            if st.finalized {
                return Err(Status::MCAPI_ERR_NODE_NOTINIT);
            }
            st.finalized = true;
            st.endpoints.clear();
            st.delivered.clear();
            for p in &st.peers {
                if let Some(link) = &p.link {
                    lock(&link.stream).shutdown();
                }
            }
        }
        self.inner.channels.clear();
        drop(lock(&self.inner.control).take());
        if let Some(t) = lock(&self.inner.progress_thread).take() {
            let _ = t.join();
        }
        lock(process_nodes()).retain(|w| !std::ptr::eq(w.as_ptr(), Arc::as_ptr(&self.inner)));
        lock(live_nodes()).remove(&(self.inner.domain_id, self.inner.node_id));
        Ok(())
    }

    /// `mcapi_domain_id_get`.
    pub fn domain_id(&self) -> u32 {
        self.inner.domain_id
    }

    /// `mcapi_node_id_get`.
    pub fn node_id(&self) -> u32 {
        self.inner.node_id
    }

    /// `mcapi_node_get_attribute` of this node or another one (asked over its control
    /// plane).
    ///
    /// # Errors
    /// `MCAPI_ERR_DOMAIN_INVALID`, `MCAPI_ERR_NODE_INVALID` (out of range, or not running),
    /// `MCAPI_ERR_ATTR_NUM`, `MCAPI_ERR_NODE_NOTINIT`.
    pub fn node_get_attribute(&self, domain: u32, node: u32, attribute: u32) -> Result<u64> {
        if domain > MAX_DOMAIN {
            return Err(Status::MCAPI_ERR_DOMAIN_INVALID);
        }
        if node > MAX_NODE {
            return Err(Status::MCAPI_ERR_NODE_INVALID);
        }
        drop(self.inner.live_state()?);
        if (domain, node) == (self.inner.domain_id, self.inner.node_id) {
            return self.inner.attributes.get(attribute);
        }
        let peer = match self.inner.connect_peer(domain, node, Some(Instant::now())) {
            Ok(p) => p,
            Err(Status::MCAPI_TIMEOUT | Status::MCAPI_ERR_TRANSMISSION) => {
                return Err(Status::MCAPI_ERR_NODE_INVALID)
            }
            Err(e) => return Err(e),
        };
        // A node that went away since the last contact is no valid node either.
        match self
            .inner
            .control_call(peer, &Frame::NodeAttribute { attribute })
            .map_err(|e| match e {
                Status::MCAPI_ERR_TRANSMISSION => Status::MCAPI_ERR_NODE_INVALID,
                e => e,
            })? {
            Frame::Value(v) => Ok(v),
            Frame::Refused(code) => {
                Err(Status::from_code(code).unwrap_or(Status::MCAPI_ERR_GENERAL))
            }
            _ => Err(Status::MCAPI_ERR_GENERAL),
        }
    }

    /// The libfabric provider this node runs over.
    pub fn provider(&self) -> &str {
        &self.inner.fab.provider
    }

    /// The provider's inject size (`fi_info.tx_attr->inject_size`): messages, packets and
    /// scalars up to this many bytes go out by inject, larger packets by a send that the
    /// provider completes later (docs/implementation-defined.md, "When `pktchan_send`
    /// completes").
    pub fn inject_size(&self) -> usize {
        self.inner.fab.inject_size
    }

    /// `mcapi_endpoint_create`: a local endpoint on `port` (`PORT_ANY`: a free port).
    ///
    /// # Errors
    /// `MCAPI_ERR_PORT_INVALID`, `MCAPI_ERR_ENDP_EXISTS`, `MCAPI_ERR_NODE_NOTINIT`,
    /// `MCAPI_ERR_MEM_LIMIT` if the receive slots cannot be allocated.
    pub fn endpoint_create(&self, port: u32) -> Result<EndpointId> {
        let mut st = self.inner.live_state()?;
        let port = if port == PORT_ANY {
            let mut p = st.next_any_port;
            while st.endpoints.contains_key(&p) {
                p += 1;
            }
            st.next_any_port = p + 1;
            p
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
        let n = self.inner.config.recv_buffers as u32;
        // Cancelled receives of deleted endpoints come back through the CQ.
        if !st.retired_pools.is_empty() {
            self.inner.progress(&mut st);
        }
        let pool = match st.reusable_pool(n) {
            Some(pool) => pool,
            None => MemoryRegion::new(&self.inner.fab.domain, n as usize * MAX_MSG_SIZE)
                .map_err(|_| Status::MCAPI_ERR_MEM_LIMIT)?,
        };
        let mut ep = LocalEndpoint {
            pool,
            slots: n,
            queue: PriorityQueues::new(NUM_PRIORITIES as usize, n as usize),
            credits: CreditPool::new(n, MAX_SENDERS),
            // A sender has at most n messages in flight (its credits): that is the window.
            reorder: SeqReorder::new(MAX_SENDERS, n),
            timeout: None,
            priority: 0,
            pending_recvs: VecDeque::with_capacity(16),
            max_payload: MAX_MSG_SIZE,
            channel: EndpointChannel::default(),
            generation: st.next_endpoint_generation,
            posted: 0,
        };
        st.next_endpoint_generation = st.next_endpoint_generation.wrapping_add(1) & 0x3F;
        for slot in 0..n {
            self.inner.fab.post_recv_slot(&mut ep, port, slot)?;
        }
        st.endpoints.insert(port, ep);
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
        let mut st = self.inner.live_state()?;
        if st
            .endpoints
            .get(&port)
            .is_some_and(|e| e.channel.is_connected())
        {
            return Err(Status::MCAPI_ERR_CHAN_CONNECTED);
        }
        let ep = st
            .endpoints
            .remove(&port)
            .ok_or(Status::MCAPI_ERR_ENDP_INVALID)?;
        for slot in 0..ep.slots {
            let _ = self.inner.fab.ep.cancel(
                Context::RecvSlot {
                    port,
                    generation: ep.generation,
                    slot,
                }
                .encode(),
            );
        }
        // Its pending receives end now (an endpoint created at the port later is another).
        for &r in &ep.pending_recvs {
            let _ = st.requests.complete(r, Status::MCAPI_ERR_ENDP_INVALID, 0);
        }
        // The pool is reused once every receive posted into it has come back.
        st.retired_pools.push(RetiredPool {
            port,
            generation: ep.generation,
            slots: ep.slots,
            pool: ep.pool.clone(),
            outstanding: ep.posted,
        });
        drop(st);
        let senders: Vec<u16> = ep.credits.senders().map(|s| s.0 as u16).collect();
        self.inner.announce_deleted(port, &senders);
        Ok(())
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
        let deadline = timeout.map(|t| Instant::now() + t);
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
    fn resolve_remote(&self, id: EndpointId, deadline: Option<Instant>) -> Result<u16> {
        let port = id.port();
        let mut backoff = self.inner.backoff();
        let peer = loop {
            let peer = self.inner.connect_peer(id.domain(), id.node(), deadline)?;
            match self.inner.control_call(peer, &Frame::Lookup { port }) {
                Ok(Frame::Value(_)) => break peer,
                // Not created yet; or the run we reached is gone: wait for the next one.
                Ok(_) | Err(Status::MCAPI_ERR_TRANSMISSION) => backoff.wait(deadline)?,
                Err(e) => return Err(e),
            }
        };
        let mut st = self.inner.live_state()?;
        if let std::collections::hash_map::Entry::Vacant(e) = st.remotes.entry((peer, port)) {
            e.insert(Remote {
                window: CreditWindow::new(),
                spare: 0,
                next_seq: 0,
            });
            self.inner
                .fab
                .post_control_slots(&mut st, CONTROL_SLOTS_PER_REMOTE)?;
        }
        Ok(peer)
    }

    /// `mcapi_endpoint_get_attribute` of a local or remote endpoint (a remote one is asked
    /// over its node's control plane).
    ///
    /// # Errors
    /// `MCAPI_ERR_ENDP_INVALID`, `MCAPI_ERR_ATTR_NUM`, `MCAPI_ERR_TRANSMISSION` (remote node
    /// gone).
    pub fn endpoint_get_attribute(&self, endpoint: EndpointId, attribute: u32) -> Result<u64> {
        let attr = EndpointAttribute::from_number(attribute)?;
        if (endpoint.domain(), endpoint.node()) == (self.inner.domain_id, self.inner.node_id) {
            let st = self.inner.live_state()?;
            return self.inner.local_attribute(&st, endpoint.port(), attr);
        }
        let peer = self.inner.connect_peer(
            endpoint.domain(),
            endpoint.node(),
            Some(Instant::now() + Duration::from_secs(10)),
        )?;
        match self.inner.control_call(
            peer,
            &Frame::GetAttribute {
                port: endpoint.port(),
                attribute,
            },
        )? {
            Frame::Value(v) => Ok(v),
            Frame::Refused(code) => {
                Err(Status::from_code(code).unwrap_or(Status::MCAPI_ERR_GENERAL))
            }
            _ => Err(Status::MCAPI_ERR_GENERAL),
        }
    }

    /// `mcapi_endpoint_set_attribute` of a local endpoint. Writable: priority (below
    /// `NUM_PRIORITIES`) and timeout (milliseconds, `TIMEOUT_INFINITE`); the others are
    /// read-only.
    ///
    /// # Errors
    /// `MCAPI_ERR_ENDP_REMOTE` for another node's endpoint, `MCAPI_ERR_ENDP_INVALID`,
    /// `MCAPI_ERR_ATTR_NUM`, `MCAPI_ERR_ATTR_READONLY`, `MCAPI_ERR_ATTR_VALUE`.
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
            a if a.writable() => return Err(Status::MCAPI_ERR_ATTR_VALUE),
            _ => return Err(Status::MCAPI_ERR_ATTR_READONLY),
        }
        Ok(())
    }

    /// Sets the timeout of blocking sends and receives of local endpoint `endpoint`
    /// (`MCAPI_ENDP_ATTR_TIMEOUT`; `None`: infinite).
    ///
    /// # Errors
    /// `MCAPI_ERR_ENDP_INVALID`.
    pub fn set_endpoint_timeout(
        &self,
        endpoint: EndpointId,
        timeout: Option<Duration>,
    ) -> Result<()> {
        let port = self.local_port(endpoint)?;
        let mut st = self.inner.live_state()?;
        st.endpoints
            .get_mut(&port)
            .ok_or(Status::MCAPI_ERR_ENDP_INVALID)?
            .timeout = timeout;
        Ok(())
    }

    /// The port of `endpoint` if it is one of this node's live endpoints; another node's
    /// endpoint is "not a valid local endpoint" (`MCAPI_ERR_ENDP_INVALID`, spec 4.3).
    fn local_port(&self, endpoint: EndpointId) -> Result<u32> {
        let st = self.inner.live_state()?;
        self.local_endpoint(&st, endpoint).map(|_| endpoint.port())
    }

    /// `endpoint` if it is one of this node's live endpoints, under a lock already held.
    fn local_endpoint<'s>(&self, st: &'s State, endpoint: EndpointId) -> Result<&'s LocalEndpoint> {
        let ours =
            (endpoint.domain(), endpoint.node()) == (self.inner.domain_id, self.inner.node_id);
        st.endpoints
            .get(&endpoint.port())
            .filter(|_| ours)
            .ok_or(Status::MCAPI_ERR_ENDP_INVALID)
    }
}
