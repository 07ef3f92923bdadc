//! The node's shared core ([`NodeInner`]) and the checks every call makes on it.

use super::channel::ChannelTable;
use super::common::{lock, Result};
use super::fabric::Fab;
use super::state::State;
use super::wait::{Backoff, SleepCqs};
use crate::attributes::{NodeAttributes, NODE_ATTR_EAGER_MAX, NODE_ATTR_MAX_MSG_SIZE};
use crate::config::Config;
use crate::control::{ControlServer, JobAuth};
use crate::semantics::Status;
use mcapi_ofi::WaitObject;
use rustc_hash::FxHashMap as HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

pub(super) struct NodeInner {
    pub(super) domain_id: u32,
    pub(super) node_id: u32,
    pub(super) attributes: NodeAttributes,
    pub(super) config: Config,
    pub(super) fab: Fab,
    pub(super) state: Mutex<State>,
    pub(super) control: Mutex<Option<ControlServer>>,
    /// The job's key: every control connection, ours and our peers', proves it.
    pub(super) auth: Arc<JobAuth>,
    pub(super) progress_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Counts progress made by application calls, so the background thread can keep away.
    pub(super) app_progress: AtomicU64,
    /// Set when a rendezvous message is staged, cleared by the background thread once none
    /// is: while set, that thread progresses the node even while application calls do
    /// (their waits sleep, and a receiver's RMA read of our memory needs our progress on
    /// manual-progress providers).
    pub(super) staged_out: std::sync::atomic::AtomicBool,
    /// Rendezvous reads deferred by an application thread's progress (shm: they wait for a
    /// receive to read in place) are started by the background thread if no receive takes
    /// them first: it does not stand aside for the application while this is set.
    pub(super) reads_deferred: std::sync::atomic::AtomicBool,
    /// Peers whose endpoints of stalled credit requests a thread is looking up (one
    /// thread per peer at a time).
    pub(super) verifying: std::sync::Mutex<std::collections::HashSet<u16>>,
    pub(super) channels: ChannelTable,
    /// Tells this run of the node from earlier ones with the same id (peers' view).
    pub(super) incarnation: u64,
    /// The random value every fabric control message to this run must carry, told to
    /// peers only in the authenticated handshake (Hello, Welcome): a stranger who can
    /// reach the fabric but not the control plane cannot forge credit controls.
    pub(super) fabric_token: u64,
    /// One lock per node we make first contact with: two threads contacting it at once
    /// must share one control connection (a second one replacing the first would close
    /// it, and the peer would take us for dead).
    pub(super) contacting: Mutex<HashMap<(u32, u32), ContactLock>>,
    /// Where the liveness watcher's next round starts among the peers.
    pub(super) watch_cursor: std::sync::atomic::AtomicUsize,
    /// Why the node stopped working, once a background thread (progress, control server)
    /// panicked: its state may be half-changed, so every later call fails.
    pub(super) broken: OnceLock<String>,
    /// Set with `State::finalized`, for `Node::current` (every C call) to read without the
    /// state lock.
    pub(super) finalized: std::sync::atomic::AtomicBool,
    /// Set (under the state lock) when `finalize` begins: sends are refused from then on
    /// ([`NodeInner::sending_state`], channel send sides), so its drain and flushes cover
    /// every send a call reported done.
    pub(super) closing: std::sync::atomic::AtomicBool,
    /// Set once `initialize` returned the node: its id is this node's until `finalize`, or
    /// until its last handle goes (`Drop`).
    pub(super) holds_id: std::sync::atomic::AtomicBool,
    /// Makes the background thread panic once (tests of the guard).
    #[cfg(test)]
    pub(super) panic_in_background: std::sync::atomic::AtomicBool,
    /// Keeps the background thread from progressing the node (tests of what application
    /// calls do on their own).
    #[cfg(test)]
    pub(super) hold_background: std::sync::atomic::AtomicBool,
}

/// Held while first contact with one node is made.
/// parking_lot's: a call with a deadline waits for another thread's contact only until
/// then (`try_lock_until`).
type ContactLock = Arc<parking_lot::Mutex<()>>;

impl NodeInner {
    /// `mcapi_node_get_attribute` of this node: the attributes it was initialized with and
    /// the extensions its fabric decided (`MCAPI_NODE_ATTR_MAX_MSG_SIZE`, `..._EAGER_MAX`).
    pub(super) fn node_attribute(&self, attribute: u32) -> Result<u64> {
        match attribute {
            NODE_ATTR_MAX_MSG_SIZE => Ok(self.fab.max_msg as u64),
            NODE_ATTR_EAGER_MAX => Ok(self.fab.eager_max as u64),
            a => self.attributes.get(a),
        }
    }

    pub(super) fn live_state(&self) -> Result<MutexGuard<'_, State>> {
        self.check_working()?;
        let st = lock(&self.state);
        if st.finalized {
            return Err(Status::MCAPI_ERR_NODE_NOTINIT);
        }
        Ok(st)
    }

    /// [`NodeInner::live_state`] for a call about to send: `MCAPI_ERR_NODE_NOTINIT` once
    /// `finalize` began. Before, a send on another thread that went out between
    /// `finalize`'s drain and its end returned success, and its message was lost with the
    /// node's endpoint (a stress run lost one so, a rendezvous message whose receiver found
    /// the sender gone before it could read it).
    pub(super) fn sending_state(&self) -> Result<MutexGuard<'_, State>> {
        let st = self.live_state()?;
        if self.closing.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(Status::MCAPI_ERR_NODE_NOTINIT);
        }
        Ok(st)
    }

    /// Reads the CQ and drops what it held: for a read in place that must end after the
    /// node stopped (finalized or broken), where only the fabric layer's bookkeeping of
    /// completions matters.
    pub(super) fn discard_completions(&self) {
        let mut st = lock(&self.state);
        let mut entries = st.cq_buf;
        _ = self.fab.cq.read(&mut entries);
        st.cq_buf = entries;
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
}
