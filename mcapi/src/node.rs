//! MCAPI nodes: the driver that moves the semantic core's decisions over libfabric.
//!
//! A [`Node`] owns one fabric stack (domain, CQ, AV, one RDM endpoint; see
//! `docs/design.md`), a control server, and its state behind one mutex. Blocking calls take
//! the mutex, read the CQ themselves (no thread hop), release it and back off between
//! attempts, so threads of one node and processes on two cores do not starve each other.
//!
//! Messages: a local endpoint posts its N receive slots (tag = its port); senders hold
//! credits for it (`semantics::credit`) so nothing arrives without a posted slot; a message
//! is copied out of its slot by `msg_recv`, which re-posts the slot and returns the credit.

use crate::attributes::{
    EndpointAttribute, NodeAttributes, FIFO_BUFFER, LOCAL_MEMORY, TIMEOUT_INFINITE,
};
use crate::config::Config;
use crate::control::{self, ControlServer, Frame, Handler, Rendezvous, StartError, Stream};
use crate::semantics::credit::{Control, CreditPool, CreditWindow, SenderId};
use crate::semantics::endpoint_id::{EndpointId, MAX_DOMAIN, MAX_NODE, PORT_ANY};
use crate::semantics::queue::{PriorityQueues, SeqReorder};
use crate::semantics::request::{RequestHandle, RequestState, RequestTable};
use crate::semantics::wire::{Context, Kind, Tag, MAX_PEERS, MAX_WIRE_PORT};
use crate::semantics::Status;
use mcapi_ofi::{
    flags, AddressVector, Completion, CompletionQueue, Domain, Endpoint, EndpointOptions,
    Error as OfiError, FiAddr, Hints, Info, MemoryRegion, WaitObject,
};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

/// Largest message (`MCAPI_MAX_MSG_SIZE`): the size of a receive slot.
pub const MAX_MSG_SIZE: usize = 64 * 1024;
/// Priorities per endpoint (`MCAPI_MAX_PRIORITY` + 1); 0 is the highest.
pub const NUM_PRIORITIES: u32 = 8;
/// Send slots of a node (copies of messages above the inject size until sent).
const SEND_SLOTS: u32 = 64;
/// Control receive slots a node keeps posted per remote endpoint it sends to, and at least.
const CONTROL_SLOTS_PER_REMOTE: u32 = 4;
const CONTROL_SLOTS_MIN: u32 = 64;
/// Sender nodes one endpoint serves at once (its credit pool and reorder state are
/// preallocated for them).
const MAX_SENDERS: usize = 256;

type Result<T> = std::result::Result<T, Status>;

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
}

/// The node's libfabric objects.
struct Fab {
    ep: Endpoint,
    cq: CompletionQueue,
    av: AddressVector,
    domain: Domain,
    provider: String,
    inject_size: usize,
    send_pool: MemoryRegion,
    control_pool: MemoryRegion,
}

struct State {
    endpoints: HashMap<u32, LocalEndpoint>,
    next_any_port: u32,
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
    finalized: bool,
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
}

struct Peer {
    addr: FiAddr,
    /// How the peer numbers us: goes into the tags we send it.
    index_at_peer: u16,
    alive: bool,
    stream: Option<Arc<Mutex<Stream>>>,
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
}

#[derive(Clone, Copy, Debug)]
struct Arrived {
    slot: u32,
    len: usize,
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn ofi_status(_: OfiError) -> Status {
    Status::MCAPI_ERR_TRANSMISSION
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
            endpoints: HashMap::new(),
            next_any_port: 1 << 20,
            peers: Vec::new(),
            peer_of: HashMap::new(),
            remotes: HashMap::new(),
            send_free: (0..SEND_SLOTS).rev().collect(),
            control_posted: 0,
            outbox: VecDeque::with_capacity(256),
            requests: RequestTable::new(config.request_table_size),
            pending_sends: VecDeque::with_capacity(64),
            finalized: false,
        };
        let inner = Arc::new(NodeInner {
            domain_id,
            node_id,
            attributes,
            config,
            fab,
            state: Mutex::new(state),
            control: Mutex::new(None),
            progress_thread: Mutex::new(None),
        });
        inner.post_control_slots(&mut lock(&inner.state), CONTROL_SLOTS_MIN)?;
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
        {
            let mut st = lock(&self.inner.state);
            if st.finalized {
                return Err(Status::MCAPI_ERR_NODE_NOTINIT);
            }
            st.finalized = true;
            st.endpoints.clear();
            for p in &st.peers {
                if let Some(s) = &p.stream {
                    lock(s).shutdown();
                }
            }
        }
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
        match self
            .inner
            .control_call(peer, &Frame::NodeAttribute { attribute })?
        {
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
        let pool = MemoryRegion::new(&self.inner.fab.domain, n as usize * MAX_MSG_SIZE)
            .map_err(|_| Status::MCAPI_ERR_MEM_LIMIT)?;
        let ep = LocalEndpoint {
            pool,
            slots: n,
            queue: PriorityQueues::new(NUM_PRIORITIES as usize, n as usize),
            credits: CreditPool::new(n, MAX_SENDERS),
            // A sender has at most n messages in flight (its credits): that is the window.
            reorder: SeqReorder::new(MAX_SENDERS, n),
            timeout: None,
            priority: 0,
            pending_recvs: VecDeque::with_capacity(16),
        };
        for slot in 0..n {
            self.inner.post_recv_slot(&ep, port, slot)?;
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
        let ep = st
            .endpoints
            .remove(&port)
            .ok_or(Status::MCAPI_ERR_ENDP_INVALID)?;
        for slot in 0..ep.slots {
            let _ = self
                .inner
                .fab
                .ep
                .cancel(Context::RecvSlot { port, slot }.encode());
        }
        // The slots' memory stays registered with the fabric endpoint until the node ends.
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
            let mut backoff = Backoff::new();
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

    /// `mcapi_endpoint_get_i`: a request that completes once endpoint `<domain, node, port>`
    /// exists (checked each time it is tested or waited on). The endpoint value is
    /// `EndpointId::encode(domain, node, port)`.
    ///
    /// # Errors
    /// `MCAPI_ERR_DOMAIN_INVALID`, `MCAPI_ERR_NODE_INVALID`, `MCAPI_ERR_PORT_INVALID`,
    /// `MCAPI_ERR_REQUEST_LIMIT`.
    pub fn endpoint_get_i(&self, domain: u32, node: u32, port: u32) -> Result<RequestHandle> {
        let id = EndpointId::encode(domain, node, port)?;
        self.inner.live_state()?.requests.alloc(Req::Get { id })
    }

    /// One non-blocking attempt to complete a pending `endpoint_get_i` request.
    fn poll_get(&self, request: RequestHandle) -> Result<()> {
        let id = {
            let st = self.inner.live_state()?;
            match (st.requests.state(request), st.requests.get(request)) {
                (Ok(RequestState::Pending), Ok(&Req::Get { id })) => id,
                _ => return Ok(()),
            }
        };
        let found = if (id.domain(), id.node()) == (self.inner.domain_id, self.inner.node_id) {
            self.inner.live_state()?.endpoints.contains_key(&id.port())
        } else {
            self.resolve_remote(id, Some(Instant::now())).is_ok()
        };
        if found {
            let _ = self
                .inner
                .live_state()?
                .requests
                .complete(request, Status::MCAPI_SUCCESS, 0);
        }
        Ok(())
    }

    /// Connects to the endpoint's node, waits until the endpoint exists there and sets up
    /// the credit window for sending to it. Returns the peer index.
    fn resolve_remote(&self, id: EndpointId, deadline: Option<Instant>) -> Result<u16> {
        let port = id.port();
        let peer = self.inner.connect_peer(id.domain(), id.node(), deadline)?;
        let mut backoff = Backoff::new();
        loop {
            match self.inner.control_call(peer, &Frame::Lookup { port })? {
                Frame::Value(_) => break,
                _ => backoff.wait(deadline)?,
            }
        }
        let mut st = self.inner.live_state()?;
        if let std::collections::hash_map::Entry::Vacant(e) = st.remotes.entry((peer, port)) {
            e.insert(Remote {
                window: CreditWindow::new(),
                spare: 0,
                next_seq: 0,
            });
            self.inner
                .post_control_slots(&mut st, CONTROL_SLOTS_PER_REMOTE)?;
        }
        Ok(peer)
    }

    /// `mcapi_msg_send`: sends `data` from local endpoint `from` to `to` with `priority`,
    /// blocking while the receiver's buffers are full (up to `from`'s timeout).
    ///
    /// # Errors
    /// `MCAPI_ERR_ENDP_INVALID` (either endpoint), `MCAPI_ERR_MSG_SIZE`,
    /// `MCAPI_ERR_PRIORITY`, `MCAPI_TIMEOUT`, `MCAPI_ERR_TRANSMISSION` (peer gone).
    pub fn msg_send(
        &self,
        from: EndpointId,
        to: EndpointId,
        data: &[u8],
        priority: u32,
    ) -> Result<()> {
        let from_port = self.local_port(from)?;
        if priority >= NUM_PRIORITIES {
            return Err(Status::MCAPI_ERR_PRIORITY);
        }
        if data.len() > MAX_MSG_SIZE {
            return Err(Status::MCAPI_ERR_MSG_SIZE);
        }
        let timeout = self
            .inner
            .live_state()?
            .endpoints
            .get(&from_port)
            .ok_or(Status::MCAPI_ERR_ENDP_INVALID)?
            .timeout;
        let deadline = timeout.map(|t| Instant::now() + t);
        let peer = self.remote_peer(to, deadline)?;
        let key = (peer, to.port());
        {
            // Behind non-blocking sends still waiting for credits: queue after them.
            let mut st = self.inner.live_state()?;
            if !st.pending_sends.is_empty() {
                let h = self.inner.queue_send(&mut st, key, priority as u8, data)?;
                self.inner.advance_sends(&mut st);
                drop(st);
                return self.wait(h, None, timeout).map(|_| ());
            }
        }
        let mut backoff = Backoff::new();
        loop {
            let mut st = self.inner.live_state()?;
            self.inner.progress(&mut st);
            if !st.peers[peer as usize].alive {
                return Err(Status::MCAPI_ERR_TRANSMISSION);
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
                return self.inner.send_payload(&mut st, peer, tag, data);
            }
            if remote.window.needs_request() {
                // Out of credits: ask the receiver's control plane, which answers even while
                // its application is busy elsewhere. Later grants come over the fabric.
                let seen = remote.window.request_sent();
                let want = self.inner.config.recv_buffers as u32;
                drop(st);
                let request = Frame::CreditRequest {
                    port: to.port(),
                    want,
                    seen,
                };
                if let Frame::Value(n) = self.inner.control_call(peer, &request)? {
                    let mut st = self.inner.live_state()?;
                    if let Some(remote) = st.remotes.get_mut(&key) {
                        remote.window.add(n as u32);
                    }
                }
                continue;
            }
            drop(st);
            if backoff.slow() {
                self.inner.check_peer(peer);
            }
            backoff.wait(deadline)?;
        }
    }

    /// `mcapi_msg_recv`: the next message of local endpoint `endpoint` (highest priority
    /// first, FIFO within a priority) into `buf`; returns its length. Blocks up to the
    /// endpoint's timeout.
    ///
    /// # Errors
    /// `MCAPI_ERR_ENDP_INVALID`, `MCAPI_ERR_MSG_TRUNCATED` (the message stays queued),
    /// `MCAPI_TIMEOUT`.
    pub fn msg_recv(&self, endpoint: EndpointId, buf: &mut [u8]) -> Result<usize> {
        let port = self.local_port(endpoint)?;
        let timeout = self
            .inner
            .live_state()?
            .endpoints
            .get(&port)
            .ok_or(Status::MCAPI_ERR_ENDP_INVALID)?
            .timeout;
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut backoff = Backoff::new();
        loop {
            let mut st = self.inner.live_state()?;
            self.inner.progress(&mut st);
            if let Some(n) = self.inner.take_message(&mut st, port, buf)? {
                return Ok(n);
            }
            drop(st);
            backoff.wait(deadline)?;
        }
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
        self.local_port(from)?;
        if priority >= NUM_PRIORITIES {
            return Err(Status::MCAPI_ERR_PRIORITY);
        }
        if data.len() > MAX_MSG_SIZE {
            return Err(Status::MCAPI_ERR_MSG_SIZE);
        }
        let peer = self.remote_peer(to, None)?;
        let mut st = self.inner.live_state()?;
        let h = self
            .inner
            .queue_send(&mut st, (peer, to.port()), priority as u8, data)?;
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
        let port = self.local_port(endpoint)?;
        let mut st = self.inner.live_state()?;
        let h = st.requests.alloc(Req::Recv { port })?;
        match st.endpoints.get_mut(&port) {
            Some(ep) => ep.pending_recvs.push_back(h),
            None => return Err(Status::MCAPI_ERR_ENDP_INVALID),
        }
        Ok(h)
    }

    /// `mcapi_test`: `Ok(Some(size))` once the request completed (for a receive, the
    /// message is copied into `buf`), `Ok(None)` while pending.
    ///
    /// # Errors
    /// `MCAPI_ERR_REQUEST_INVALID` (unknown, released or cancelled request), the
    /// operation's own error (e.g. `MCAPI_ERR_MSG_TRUNCATED`), `MCAPI_ERR_PARAMETER` for a
    /// receive tested without a buffer.
    pub fn test(&self, request: RequestHandle, buf: Option<&mut [u8]>) -> Result<Option<usize>> {
        self.poll_get(request)?;
        let mut st = self.inner.live_state()?;
        self.inner.progress(&mut st);
        self.inner.try_complete(&mut st, request, buf)?;
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
        mut buf: Option<&mut [u8]>,
        timeout: Option<Duration>,
    ) -> Result<usize> {
        self.inner.live_state()?.requests.begin_wait(request)?;
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut backoff = Backoff::new();
        loop {
            self.poll_get(request)?;
            let mut st = self.inner.live_state()?;
            self.inner.progress(&mut st);
            self.inner
                .try_complete(&mut st, request, buf.as_deref_mut())?;
            if let Some(done) = st.requests.take_completed(request)? {
                return match done.status {
                    Status::MCAPI_SUCCESS => Ok(done.size),
                    status => Err(status),
                };
            }
            drop(st);
            if let Err(e) = backoff.wait(deadline) {
                let _ = self.inner.live_state()?.requests.end_wait(request);
                return Err(e);
            }
        }
    }

    /// `mcapi_wait_any`: waits until one of `requests` completes; returns its index and
    /// size and releases it. Receives among them get no buffer here: use [`Node::wait`]
    /// for receives whose data is wanted.
    ///
    /// # Errors
    /// `MCAPI_ERR_PARAMETER` (empty list), `MCAPI_ERR_REQUEST_INVALID`, `MCAPI_TIMEOUT`.
    pub fn wait_any(
        &self,
        requests: &[RequestHandle],
        timeout: Option<Duration>,
    ) -> Result<(usize, usize)> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut backoff = Backoff::new();
        loop {
            for &r in requests {
                self.poll_get(r)?;
            }
            let mut st = self.inner.live_state()?;
            self.inner.progress(&mut st);
            if let Some(i) = st.requests.find_ready(requests)? {
                let done = st
                    .requests
                    .take_completed(requests[i])?
                    .ok_or(Status::MCAPI_ERR_GENERAL)?;
                return match done.status {
                    Status::MCAPI_SUCCESS => Ok((i, done.size)),
                    status => Err(status),
                };
            }
            drop(st);
            backoff.wait(deadline)?;
        }
    }

    /// `mcapi_cancel`: cancels a pending request; a waiter gets
    /// `MCAPI_ERR_REQUEST_CANCELLED`. A cancelled receive consumes no message; a cancelled
    /// send that has not left is not sent.
    ///
    /// # Errors
    /// `MCAPI_ERR_REQUEST_INVALID`.
    pub fn cancel(&self, request: RequestHandle) -> Result<()> {
        let mut st = self.inner.live_state()?;
        let pending = matches!(st.requests.state(request)?, RequestState::Pending);
        let payload = st.requests.cancel(request)?;
        if !pending {
            return Ok(());
        }
        match payload {
            Req::Recv { port } => {
                if let Some(ep) = st.endpoints.get_mut(&port) {
                    ep.pending_recvs.retain(|&h| h != request);
                }
            }
            Req::Send { slot, .. } => {
                st.pending_sends.retain(|&h| h != request);
                st.send_free.push(slot);
            }
            Req::Get { .. } => {}
        }
        Ok(())
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
        match attr {
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

    /// The port of `endpoint` if it is this node's and exists.
    /// The port of `endpoint` if it is one of this node's live endpoints; another node's
    /// endpoint is "not a valid local endpoint" (`MCAPI_ERR_ENDP_INVALID`, spec 4.3).
    fn local_port(&self, endpoint: EndpointId) -> Result<u32> {
        let port = endpoint.port();
        let st = self.inner.live_state()?;
        let ours =
            (endpoint.domain(), endpoint.node()) == (self.inner.domain_id, self.inner.node_id);
        if !ours || !st.endpoints.contains_key(&port) {
            return Err(Status::MCAPI_ERR_ENDP_INVALID);
        }
        Ok(port)
    }

    /// The peer index for a remote endpoint, resolving it (as `endpoint_get` does) when it
    /// came to us as a value in a message rather than through `endpoint_get`.
    fn remote_peer(&self, to: EndpointId, deadline: Option<Instant>) -> Result<u16> {
        {
            let st = self.inner.live_state()?;
            if let Some(&peer) = st.peer_of.get(&(to.domain(), to.node())) {
                if st.remotes.contains_key(&(peer, to.port())) {
                    return Ok(peer);
                }
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

/// The full sequence number of a 16-bit wire sequence, given the next one expected: the
/// sender's credits keep every message within a window far below 2^15 of it.
fn widen(expected: u32, wire: u16) -> u32 {
    let delta = wire.wrapping_sub(expected as u16) as i16;
    expected.wrapping_add(delta as i32 as u32)
}

/// Queues a credit decision of endpoint `port` for the fabric.
fn queue_control(peers: &[Peer], outbox: &mut VecDeque<(u16, Tag, u64)>, port: u32, ctl: Control) {
    let (kind, to, n) = match ctl {
        Control::Grant(g) => (Kind::Grant, g.to, g.credits),
        Control::Recall { from, credits } => (Kind::Recall, from, credits),
    };
    let peer = to.0 as u16;
    if let Some(p) = peers.get(peer as usize) {
        outbox.push_back((peer, control_tag(kind, port, p.index_at_peer), u64::from(n)));
    }
}

fn control_tag(kind: Kind, port: u32, peer: u16) -> Tag {
    Tag {
        kind,
        priority: 0,
        port,
        peer,
        seq: 0,
    }
}

impl NodeInner {
    fn live_state(&self) -> Result<MutexGuard<'_, State>> {
        let st = lock(&self.state);
        if st.finalized {
            return Err(Status::MCAPI_ERR_NODE_NOTINIT);
        }
        Ok(st)
    }

    fn post_recv_slot(&self, ep: &LocalEndpoint, port: u32, slot: u32) -> Result<()> {
        let buf = ep
            .pool
            .slice(slot as usize * MAX_MSG_SIZE, MAX_MSG_SIZE)
            .map_err(ofi_status)?;
        let (tag, ignore) = Tag::match_port(Kind::Message, port);
        self.post_receive(buf, tag, ignore, Context::RecvSlot { port, slot })
    }

    fn post_control_slot(&self, slot: u32) -> Result<()> {
        let buf = self
            .fab
            .control_pool
            .slice(slot as usize * 8, 8)
            .map_err(ofi_status)?;
        let (tag, ignore) = Tag::match_control();
        self.post_receive(buf, tag, ignore, Context::ControlSlot(slot))
    }

    /// Posts one receive. A full receive queue (-FI_EAGAIN: shm takes 1024 posted receives,
    /// tcp;ofi_rxm 2048) is retried briefly without reading the CQ, whose completions only
    /// the caller can dispatch, then reported as `MCAPI_ERR_MEM_LIMIT`.
    fn post_receive(
        &self,
        buf: mcapi_ofi::Buf<'_>,
        tag: u64,
        ignore: u64,
        ctx: Context,
    ) -> Result<()> {
        let ctx = ctx.encode();
        for _ in 0..100 {
            match self
                .fab
                .ep
                .recv_tagged(buf, FiAddr::UNSPEC, tag, ignore, ctx)
            {
                Ok(()) => return Ok(()),
                Err(e) if e.is_again() => std::thread::yield_now(),
                Err(e) => return Err(ofi_status(e)),
            }
        }
        Err(Status::MCAPI_ERR_MEM_LIMIT)
    }

    fn post_control_slots(&self, st: &mut State, n: u32) -> Result<()> {
        let capacity = (self.fab.control_pool.len() / 8) as u32;
        let want = (st.control_posted + n).min(capacity);
        for slot in st.control_posted..want {
            self.post_control_slot(slot)?;
        }
        st.control_posted = want;
        Ok(())
    }

    fn local_attribute(&self, st: &State, port: u32, attr: EndpointAttribute) -> Result<u64> {
        let ep = st
            .endpoints
            .get(&port)
            .ok_or(Status::MCAPI_ERR_ENDP_INVALID)?;
        Ok(match attr {
            EndpointAttribute::MaxPayloadSize => MAX_MSG_SIZE as u64,
            EndpointAttribute::BufferType => FIFO_BUFFER,
            EndpointAttribute::MemoryType => LOCAL_MEMORY,
            EndpointAttribute::NumPriorities => u64::from(NUM_PRIORITIES),
            EndpointAttribute::Priority => u64::from(ep.priority),
            EndpointAttribute::NumSendBuffers => st.send_free.len() as u64,
            EndpointAttribute::NumRecvBuffers => u64::from(ep.credits.free_buffers()),
            EndpointAttribute::Status => 0,
            EndpointAttribute::Timeout => ep
                .timeout
                .map_or(TIMEOUT_INFINITE, |t| t.as_millis() as u64),
        })
    }

    /// Copies a message into a send slot and queues it as a request.
    fn queue_send(
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
    fn advance_sends(&self, st: &mut State) {
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
            let alive = st.peers[peer as usize].alive;
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
    fn try_complete(
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

    /// Copies the next message of `port` into `buf`, re-posts its slot and returns its
    /// credit; `Ok(None)` if none is queued.
    fn take_message(&self, st: &mut State, port: u32, buf: &mut [u8]) -> Result<Option<usize>> {
        let ep = st
            .endpoints
            .get_mut(&port)
            .ok_or(Status::MCAPI_ERR_ENDP_INVALID)?;
        let Some(head) = ep.queue.peek().copied() else {
            return Ok(None);
        };
        if head.len > buf.len() {
            return Err(Status::MCAPI_ERR_MSG_TRUNCATED);
        }
        ep.queue.pop();
        ep.pool
            .read(head.slot as usize * MAX_MSG_SIZE, &mut buf[..head.len]);
        self.post_recv_slot(ep, port, head.slot)?;
        let _ = ep.credits.consumed(SenderId(u32::from(head.peer)));
        self.collect_credit_controls(st, port);
        self.flush_outbox(st);
        Ok(Some(head.len))
    }

    /// Sends a message payload: inject when it fits, else from a send slot.
    fn send_payload(&self, st: &mut State, peer: u16, tag: Tag, data: &[u8]) -> Result<()> {
        let dest = st.peers[peer as usize].addr;
        if data.len() <= self.fab.inject_size {
            loop {
                match self.fab.ep.inject_tagged(data, dest, tag.encode()) {
                    Ok(()) => return Ok(()),
                    Err(e) if e.is_again() => self.progress(st),
                    Err(e) => return Err(ofi_status(e)),
                }
            }
        }
        let slot = loop {
            if let Some(s) = st.send_free.pop() {
                break s;
            }
            self.progress(st);
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
                Err(e) if e.is_again() => self.progress(st),
                Err(e) => {
                    st.send_free.push(slot);
                    return Err(ofi_status(e));
                }
            }
        }
    }

    /// Reads the CQ and dispatches what completed; sends queued control messages.
    fn progress(&self, st: &mut State) {
        self.progress_counting(st);
    }

    /// As `progress`, returning how many completions were handled.
    fn progress_counting(&self, st: &mut State) -> usize {
        let mut buf = [Completion::default(); 16];
        let mut handled = 0;
        loop {
            match self.fab.cq.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    handled += n;
                    for c in &buf[..n] {
                        self.dispatch(st, c);
                    }
                    if n < buf.len() {
                        break;
                    }
                }
                Err(OfiError::Completion(e)) => {
                    // Cancelled slots of deleted endpoints, or a send to a dead peer.
                    if let Some(Context::SendSlot(s)) = Context::decode(e.context) {
                        st.send_free.push(s);
                    }
                }
                Err(_) => break,
            }
        }
        if !st.pending_sends.is_empty() {
            self.advance_sends(st);
        }
        self.flush_outbox(st);
        handled
    }

    fn dispatch(&self, st: &mut State, c: &Completion) {
        match Context::decode(c.context()) {
            Some(Context::SendSlot(s)) => st.send_free.push(s),
            Some(Context::RecvSlot { port, slot }) => self.message_arrived(st, port, slot, c),
            Some(Context::ControlSlot(slot)) => {
                if let Some(tag) = Tag::decode(c.tag()) {
                    self.control_arrived(st, tag, c.data());
                }
                let _ = self.post_control_slot(slot);
            }
            None => {}
        }
    }

    fn message_arrived(&self, st: &mut State, port: u32, slot: u32, c: &Completion) {
        let Some(ep) = st.endpoints.get_mut(&port) else {
            return;
        };
        let Some(tag) = Tag::decode(c.tag()) else {
            return;
        };
        let arrived = Arrived {
            slot,
            len: c.len(),
            peer: tag.peer,
            priority: tag.priority,
        };
        if ep.credits.arrived(SenderId(u32::from(tag.peer))).is_err() {
            // Protocol violation: a message without a credit. Drop it, keep the slot.
            let _ = self.post_recv_slot(ep, port, slot);
            return;
        }
        let LocalEndpoint { reorder, queue, .. } = ep;
        // Completion order is not delivery order on most providers: release in sequence.
        let seq = widen(reorder.expected(&tag.peer).unwrap_or(0), tag.seq);
        if let Ok(ready) = reorder.accept(tag.peer, seq, arrived) {
            for a in ready {
                // Credits bound the queue to its slots, so it has room.
                let _ = queue.push(a.priority as usize, a);
            }
        }
    }

    fn control_arrived(&self, st: &mut State, tag: Tag, data: u64) {
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
    fn answer_credit_request(&self, from: (u32, u32), port: u32, want: u32, seen: u32) -> Frame {
        let Ok(mut st) = self.live_state() else {
            return Frame::Refused(Status::MCAPI_ERR_NODE_NOTINIT.code());
        };
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
    fn collect_credit_controls(&self, st: &mut State, port: u32) {
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

    fn flush_outbox(&self, st: &mut State) {
        while let Some(&(peer, tag, data)) = st.outbox.front() {
            let Some(p) = st.peers.get(peer as usize) else {
                st.outbox.pop_front();
                continue;
            };
            if !p.alive {
                st.outbox.pop_front();
                continue;
            }
            match self
                .fab
                .ep
                .inject_tagged_data(&[], data, p.addr, tag.encode())
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

    /// Our peer index for `<domain, node>`, connecting its control plane (and exchanging
    /// fabric addresses) on first use.
    fn connect_peer(&self, domain: u32, node: u32, deadline: Option<Instant>) -> Result<u16> {
        {
            let st = self.live_state()?;
            if let Some(&p) = st.peer_of.get(&(domain, node)) {
                if st.peers[p as usize].stream.is_some() {
                    return Ok(p);
                }
            }
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
            fabric_addr: self.fab.ep.address().to_vec(),
        };
        let Ok(Frame::Welcome { peer, fabric_addr }) = stream.call(&hello) else {
            return Err(Status::MCAPI_ERR_TRANSMISSION);
        };
        let addr = self.fab.av.insert(&fabric_addr).map_err(ofi_status)?;
        let mut st = self.live_state()?;
        let p = &mut st.peers[index as usize];
        p.addr = addr;
        p.index_at_peer = peer as u16;
        p.alive = true;
        p.stream = Some(Arc::new(Mutex::new(stream)));
        Ok(index)
    }

    fn add_peer(
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
            alive: true,
            stream: None,
        });
        st.peer_of.insert((domain, node), index);
        Ok(index)
    }

    fn control_call(&self, peer: u16, request: &Frame) -> Result<Frame> {
        let stream = {
            let st = self.live_state()?;
            st.peers[peer as usize]
                .stream
                .clone()
                .ok_or(Status::MCAPI_ERR_TRANSMISSION)?
        };
        let answer = lock(&stream).call(request);
        answer.map_err(|_| {
            self.peer_died(peer);
            Status::MCAPI_ERR_TRANSMISSION
        })
    }

    /// Slow-path liveness check of a peer we hold a control connection to.
    fn check_peer(&self, peer: u16) {
        let stream = match self.live_state() {
            Ok(st) => st.peers[peer as usize].stream.clone(),
            Err(_) => return,
        };
        if let Some(s) = stream {
            if lock(&s).is_closed() {
                self.peer_died(peer);
            }
        }
    }

    fn peer_died(&self, peer: u16) {
        let mut st = lock(&self.state);
        if let Some(p) = st.peers.get_mut(peer as usize) {
            p.alive = false;
        }
        for ep in st.endpoints.values_mut() {
            ep.credits.sender_gone(SenderId(u32::from(peer)));
        }
    }
}

/// Answers other nodes on the control plane.
struct ControlHandler(Weak<NodeInner>);

impl Handler for ControlHandler {
    fn handle(&self, peer: Option<(u32, u32)>, request: &Frame) -> Frame {
        let Some(node) = self.0.upgrade() else {
            return Frame::Refused(Status::MCAPI_ERR_NODE_NOTINIT.code());
        };
        match request {
            Frame::Hello {
                domain,
                node: n,
                peer,
                fabric_addr,
            } => {
                let Ok(addr) = node.fab.av.insert(fabric_addr) else {
                    return Frame::Refused(Status::MCAPI_ERR_TRANSMISSION.code());
                };
                let Ok(mut st) = node.live_state() else {
                    return Frame::Refused(Status::MCAPI_ERR_NODE_NOTINIT.code());
                };
                let index = match st.peer_of.get(&(*domain, *n)) {
                    Some(&i) => i,
                    None => match node.add_peer(&mut st, *domain, *n, Some(addr)) {
                        Ok(i) => i,
                        Err(s) => return Frame::Refused(s.code()),
                    },
                };
                let p = &mut st.peers[index as usize];
                p.addr = addr;
                p.index_at_peer = *peer as u16;
                p.alive = true;
                Frame::Welcome {
                    peer: u32::from(index),
                    fabric_addr: node.fab.ep.address().to_vec(),
                }
            }
            Frame::CreditRequest { port, want, seen } => {
                let Some(from) = peer else {
                    return Frame::Refused(Status::MCAPI_ERR_PARAMETER.code());
                };
                node.answer_credit_request(from, *port, *want, *seen)
            }
            Frame::NodeAttribute { attribute } => match node.attributes.get(*attribute) {
                Ok(v) => Frame::Value(v),
                Err(s) => Frame::Refused(s.code()),
            },
            Frame::GetAttribute { port, attribute } => {
                let value = EndpointAttribute::from_number(*attribute).and_then(|a| {
                    node.live_state()
                        .and_then(|st| node.local_attribute(&st, *port, a))
                });
                match value {
                    Ok(v) => Frame::Value(v),
                    Err(s) => Frame::Refused(s.code()),
                }
            }
            Frame::Lookup { port } => match node.live_state() {
                Ok(st) if st.endpoints.contains_key(port) => Frame::Value(1),
                Ok(_) => Frame::Refused(Status::MCAPI_ERR_ENDP_INVALID.code()),
                Err(s) => Frame::Refused(s.code()),
            },
            _ => Frame::Refused(Status::MCAPI_ERR_PARAMETER.code()),
        }
    }

    fn peer_gone(&self, peer: (u32, u32)) {
        let Some(node) = self.0.upgrade() else { return };
        let index = lock(&node.state).peer_of.get(&peer).copied();
        if let Some(i) = index {
            node.peer_died(i);
        }
    }
}

/// Progresses a node while no application thread does: with manual-progress providers
/// (shm, tcp;ofi_rxm) nothing arrives, and shm does not even connect, unless someone reads
/// the CQ. It never waits for the state lock: a thread inside an MCAPI call is already
/// progressing. It polls often while traffic flows and backs off to a few milliseconds
/// when the node is idle.
fn background_progress(node: Weak<NodeInner>) {
    let mut pause = Duration::from_micros(100);
    loop {
        std::thread::sleep(pause);
        let Some(node) = node.upgrade() else { return };
        let Ok(mut st) = node.state.try_lock() else {
            pause = Duration::from_micros(100);
            continue;
        };
        if st.finalized {
            return;
        }
        let busy = node.progress_counting(&mut st) > 0;
        pause = if busy {
            Duration::from_micros(100)
        } else {
            (pause * 2).min(Duration::from_millis(5))
        };
    }
}

/// Opens the fabric stack with the first provider candidate that works.
fn open_fabric(config: &Config, domain_id: u32, node_id: u32) -> Option<Fab> {
    // The local address the network providers bind to: the chosen interface's, else this
    // node's topology entry, else loopback (every node on this host).
    let local = match (&config.tcp_iface, &config.topology) {
        (Some(iface), _) => interface_address(iface)?,
        (None, Some(t)) => t.get(domain_id, node_id)?.host.clone(),
        (None, None) => "127.0.0.1".to_owned(),
    };
    for provider in config.provider_candidates() {
        let mut hints = Hints::new().provider(provider.clone()).caps(flags::TAGGED);
        if provider != "shm" {
            hints = hints.source(Some(&local), None);
        }
        let Ok(info) = Info::first(&hints) else {
            continue;
        };
        let open = || -> std::result::Result<Fab, OfiError> {
            let domain = Domain::open_info(&info)?;
            let cq = CompletionQueue::open(&domain, 0, WaitObject::None)?;
            let av = AddressVector::open(&domain, 64)?;
            let ep = Endpoint::open(&domain, &cq, &av, EndpointOptions::default())?;
            Ok(Fab {
                inject_size: info.attributes().inject_size,
                provider: info.provider().to_owned(),
                send_pool: MemoryRegion::new(&domain, SEND_SLOTS as usize * MAX_MSG_SIZE)?,
                control_pool: MemoryRegion::new(&domain, 8 * 4096)?,
                ep,
                cq,
                av,
                domain,
            })
        };
        if let Ok(fab) = open() {
            return Some(fab);
        }
    }
    None
}

/// The first IPv4 address of network interface `name` (`MCAPI_TCP_IFACE`).
fn interface_address(name: &str) -> Option<String> {
    nix::ifaddrs::getifaddrs()
        .ok()?
        .filter(|i| i.interface_name == name)
        .find_map(|i| i.address?.as_sockaddr_in().map(|a| a.ip().to_string()))
}

/// Spin briefly, then sleep in growing steps: two processes blocked on 2 cores must not
/// starve each other.
struct Backoff {
    start: Instant,
    sleep: Duration,
}

/// How long a blocked call polls the CQ back to back: long enough to catch a reply over
/// shm or tcp on this host without a context switch.
const SPIN: Duration = Duration::from_micros(50);
/// Then it yields the core between polls for this long, before sleeping.
const YIELD: Duration = Duration::from_micros(500);

impl Backoff {
    fn new() -> Backoff {
        Backoff {
            start: Instant::now(),
            sleep: Duration::from_micros(20),
        }
    }

    /// True once the caller has been waiting long enough for slow-path checks.
    fn slow(&self) -> bool {
        self.sleep >= Duration::from_millis(1)
    }

    fn wait(&mut self, deadline: Option<Instant>) -> Result<()> {
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Err(Status::MCAPI_TIMEOUT);
        }
        let waited = now - self.start;
        if waited < SPIN {
            std::hint::spin_loop();
        } else if waited < SPIN + YIELD {
            std::thread::yield_now();
        } else {
            std::thread::sleep(self.sleep);
            self.sleep = (self.sleep * 2).min(Duration::from_millis(2));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::widen;

    #[test]
    fn wire_sequences_widen_across_wraps() {
        for (expected, wire, full) in [
            (0, 0, 0),
            (5, 7, 7),
            (65_535, 65_535, 65_535),
            (65_535, 0, 65_536),
            (65_536, 1, 65_537),
            (131_070, 65_534, 131_070),
            (131_072, 65_535, 131_071),
            (u32::MAX, 0, 0),
        ] {
            assert_eq!(
                widen(expected, wire),
                full,
                "expected {expected}, wire {wire}"
            );
        }
    }
}
