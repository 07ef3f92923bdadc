//! A node's life in the process: initialize, the calling thread's node, finalize.

use super::channel::{ChannelTable, SideSet};
use super::common::{lock, Result, EAGER_SLOT};
use super::control_handler::ControlHandler;
use super::fabric::{open_fabric, CONTROL_SLOTS_MIN, SEND_SLOTS};
use super::inner::NodeInner;
use super::progress::background_progress;
use super::rendezvous::FINALIZE_DRAIN;
use super::state::{State, CQ_BATCH};
use super::Node;
use crate::attributes::NodeAttributes;
use crate::config::Config;
use crate::control::{self, ControlServer, Handler, StartError};
use crate::semantics::endpoint_id::{MAX_DOMAIN, MAX_NODE};
use crate::semantics::request::RequestTable;
use crate::semantics::Status;
use mcapi_ofi::Completion;
use rustc_hash::FxHashMap as HashMap;
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;

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

/// The node behind `w` if it is alive and not finalized.
fn live(w: &Weak<NodeInner>) -> Option<Arc<NodeInner>> {
    w.upgrade().filter(|n| !n.finalized.load(Ordering::Acquire))
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
        crate::diagnostics::init();
        if domain_id > MAX_DOMAIN {
            return Err(Status::MCAPI_ERR_DOMAIN_INVALID);
        }
        if node_id > MAX_NODE {
            return Err(Status::MCAPI_ERR_NODE_INVALID);
        }
        if let Some(why) = config.unusable() {
            log::error!("initialize of node {domain_id}.{node_id} failed: {why}");
            return Err(Status::MCAPI_ERR_NODE_INITFAILED);
        }
        if !lock(live_nodes()).insert((domain_id, node_id)) {
            return Err(Status::MCAPI_ERR_NODE_INITIALIZED);
        }
        let node = Node::start(domain_id, node_id, attributes, config);
        match &node {
            Ok(n) => {
                n.inner.holds_id.store(true, Ordering::Release);
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
    /// thread initialized, else (a thread that initialized none) the process's node when
    /// there is exactly one (threads of a process sharing one node, the FAQ's model).
    ///
    /// # Errors
    /// `MCAPI_ERR_NODE_NOTINIT` when the thread's node was finalized (its calls never fall
    /// to another thread's node), or the thread initialized none and the process has zero or
    /// several live nodes.
    pub fn current() -> Result<Node> {
        let (initialized_here, own) = THREAD_NODE.with(|t| {
            let t = t.borrow();
            (!t.ptr_eq(&Weak::new()), live(&t))
        });
        if let Some(inner) = own {
            return Ok(Node { inner });
        }
        if initialized_here {
            return Err(Status::MCAPI_ERR_NODE_NOTINIT);
        }
        let all = lock(process_nodes());
        let mut alive = all.iter().filter_map(live);
        match (alive.next(), alive.next()) {
            (Some(inner), None) => Ok(Node { inner }),
            _ => Err(Status::MCAPI_ERR_NODE_NOTINIT),
        }
    }

    /// Whether `other` is a handle of this very node (not merely one with the same ids).
    pub fn is(&self, other: &Node) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Whether the calling thread initialized a node that is not finalized (the C API's
    /// `mcapi_initialize` then refuses another).
    pub fn thread_has_node() -> bool {
        THREAD_NODE.with(|t| live(&t.borrow()).is_some())
    }

    fn start(
        domain_id: u32,
        node_id: u32,
        attributes: NodeAttributes,
        config: Config,
    ) -> Result<Node> {
        let failed = |why: &dyn std::fmt::Display| {
            log::error!("node <{domain_id}, {node_id}>: initialize failed: {why}");
            Status::MCAPI_ERR_NODE_INITFAILED
        };
        // Before the fabric: a job that cannot be secured is refused at once.
        let auth = Arc::new(control::job_auth(&config).map_err(|why| failed(&why))?);
        // The secret fabric controls to this run carry (`NodeInner::fabric_token`).
        let fabric_token = getrandom::u64()
            .map_err(|e| failed(&format!("no random numbers for the fabric token: {e}")))?;
        let fab = open_fabric(&config, domain_id, node_id).map_err(|why| failed(&why))?;
        log::info!(
            "node <{domain_id}, {node_id}>: provider {} (job {})",
            fab.provider,
            config.job
        );
        let mut state = State {
            endpoints: HashMap::default(),
            next_any_port: super::endpoints::FIRST_ANY_PORT,
            next_endpoint_epoch: 0,
            recv_free: fab.recv_slots,
            // Posted as credits are lent (`post_for_lent`).
            idle_slots: (0..fab.recv_slots).rev().collect(),
            recv_held: 0,
            slot_run: vec![0; fab.recv_slots as usize],
            recv_strays: 0,
            hungry: VecDeque::with_capacity(16),
            recalled: false,
            peers: Vec::new(),
            peer_of: HashMap::default(),
            remotes: HashMap::default(),
            send_free: (0..SEND_SLOTS).rev().collect(),
            send_in_flight: vec![None; SEND_SLOTS as usize],
            control_posted: 0,
            outbox: VecDeque::with_capacity(256),
            requests: RequestTable::new(config.request_table_size),
            pending_sends: VecDeque::with_capacity(64),
            departing: 0,
            cq_buf: [Completion::default(); CQ_BATCH],
            inject_scratch: vec![0; fab.inject_size.min(EAGER_SLOT)].into_boxed_slice(),
            taken: None,
            delivered: HashMap::default(),
            rndv: super::rendezvous::Rendezvous::new(),
            receiving_in_place: None,
            waiting_receives: Default::default(),
            in_background: false,
            in_place_read: None,
            read_in_place: 0,
            #[cfg(test)]
            forced_read_failures: 0,
            finalized: false,
            sends_flushed: false,
        };
        // Sized once: which receive slots carry rendezvous descriptors, and how many reads
        // are under way at once, vary with the traffic; growing then would allocate on the
        // data path.
        state.rndv.fetches.size_for(fab.recv_slots as usize);
        let busy_every_poll = fab.provider.contains("ofi_rxm");
        let inner = Arc::new(NodeInner {
            domain_id,
            node_id,
            attributes,
            config,
            fab,
            state: Mutex::new(state),
            control: Mutex::new(None),
            auth: auth.clone(),
            progress_thread: Mutex::new(None),
            app_progress: AtomicU64::new(0),
            staged_out: std::sync::atomic::AtomicBool::new(false),
            reads_deferred: std::sync::atomic::AtomicBool::new(false),
            verifying: Default::default(),
            channels: ChannelTable::new(busy_every_poll),
            incarnation: new_incarnation(),
            fabric_token,
            contacting: Mutex::new(HashMap::default()),
            watch_cursor: Default::default(),
            broken: OnceLock::new(),
            finalized: Default::default(),
            closing: Default::default(),
            holds_id: Default::default(),
            #[cfg(test)]
            panic_in_background: Default::default(),
            #[cfg(test)]
            hold_background: Default::default(),
        });
        inner
            .fab
            .post_control_slots(&mut lock(&inner.state), CONTROL_SLOTS_MIN)?;
        let handler: Arc<dyn Handler> = Arc::new(ControlHandler(Arc::downgrade(&inner)));
        let server = ControlServer::start(&inner.config, domain_id, node_id, handler, auth)
            .map_err(|e| match e {
                StartError::NodeTaken => failed(&format_args!(
                    "another process of job '{}' runs this node",
                    inner.config.job
                )),
                StartError::NotInTopology => failed(&"the topology file does not list this node"),
                StartError::Unsafe(why) => failed(&why),
                StartError::Io(e) => failed(&format_args!("control server: {e}")),
            })?;
        *lock(&inner.control) = Some(server);
        let weak = Arc::downgrade(&inner);
        let thread = std::thread::Builder::new()
            .name(format!("mcapi-progress-{domain_id}.{node_id}"))
            .spawn(move || background_progress(weak))
            .map_err(|e| failed(&format_args!("progress thread: {e}")))?;
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
            let st = lock(&self.inner.state);
            if st.finalized {
                return Err(Status::MCAPI_ERR_NODE_NOTINIT);
            }
            // From here on sends are refused (under this lock, which every send holds
            // while it posts): what the drain and flushes below wait for is all there is.
            self.inner.closing.store(true, Ordering::Relaxed);
        }
        // Staged rendezvous messages live in this process: their receivers read them first;
        // then everything else sent leaves the provider (both within one budget).
        let deadline = Instant::now() + FINALIZE_DRAIN;
        self.inner.drain_staged(deadline);
        self.inner.flush_sends(deadline);
        self.flush_channel_sends(deadline);
        self.inner.settle_reads(deadline);
        self.inner.notify_channel_peers();
        let links: Vec<_> = {
            let mut st = lock(&self.inner.state);
            if st.finalized {
                return Err(Status::MCAPI_ERR_NODE_NOTINIT);
            }
            st.finalized = true;
            self.inner.finalized.store(true, Ordering::Release);
            st.endpoints.clear();
            st.delivered.clear();
            st.peers.iter().filter_map(|p| p.link.clone()).collect()
        };
        // Outside the state lock, and through the second handle: a call in progress on a
        // link (whose answer may need the peer's state while the peer finalizes too) ends
        // with its connection instead of holding finalize.
        for link in links {
            link.closer.shutdown();
        }
        self.inner.channels.clear();
        drop(lock(&self.inner.control).take());
        if let Some(t) = lock(&self.inner.progress_thread).take() {
            // Its panics are caught inside (the node is marked broken): nothing to report.
            _ = t.join();
        }
        lock(process_nodes()).retain(|w| !std::ptr::eq(w.as_ptr(), Arc::as_ptr(&self.inner)));
        lock(live_nodes()).remove(&(self.inner.domain_id, self.inner.node_id));
        Ok(())
    }

    /// `finalize`'s flush of channel packets: copied or zero-copy packets handed to the
    /// fabric complete before the sides' endpoints close (sockets lost all but 2 of 512
    /// 60 KiB packets a slow receiver had not read; a close waits for them too), unless
    /// the side's peer run is gone (shm never completes a send to a dead receiver).
    /// Packets still queued for credits are discarded, as finalize discards pending data.
    /// Injected packets and scalars have no completion to wait for: where the provider may
    /// still queue them (sockets, udp), a marker sent behind them with a completion says they
    /// were written (half of them were lost before,
    /// `injected_packets_and_scalars_arrive_when_their_sender_finalizes_at_once`).
    fn flush_channel_sends(&self, deadline: Instant) {
        let mut backoff = self.inner.backoff();
        let mut runs = Vec::new();
        let flush_markers = self.inner.fab.injects_queue;
        while self.inner.channels.sends_posted(flush_markers, &mut runs) {
            // (Side locks are released: the state lock is taken after them, never inside.)
            let st = lock(&self.inner.state);
            if !runs.iter().any(|run| run.is_none_or(|r| st.run_alive(r))) {
                return;
            }
            drop(st);
            self.progress_busy_sides(&SideSet::default(), &mut backoff);
            if backoff.wait(Some(deadline)).is_err() {
                return;
            }
        }
    }
}

impl Drop for NodeInner {
    /// A node whose last handle went without `finalize` frees its id, so it can be
    /// initialized again (a finalized one freed it already, and its id may be another
    /// node's since).
    fn drop(&mut self) {
        if self.holds_id.load(Ordering::Acquire) && !self.finalized.load(Ordering::Acquire) {
            // The control server first: a node initialized again with this id binds its
            // socket at once.
            drop(lock(&self.control).take());
            lock(live_nodes()).remove(&(self.domain_id, self.node_id));
        }
    }
}
