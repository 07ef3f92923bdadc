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
//!
//! Modules, each depending only on those listed before it: `common` (result, lock, limits),
//! `seq` (wire sequences), `wait` (backoff, deadlines), `state` (what the mutex guards; it
//! holds the channel types of `channel::{handle, endpoint, req}`), `fabric` (libfabric stack,
//! posting), `inner` (`NodeInner`; it holds `channel::table`), `credit_plane`, `peers`,
//! `message_path`, `progress` (CQ, background thread), `endpoints`, `control_handler`,
//! `lifecycle` (initialize/finalize), `requests`, `messages`. `channel` (packet and scalar
//! channels) has its data layer below `state` and `inner` and its operations on top of them;
//! see its module map.

mod channel;
mod common;
mod control_handler;
mod credit_plane;
mod endpoints;
mod fabric;
mod fetch;
#[cfg(test)]
mod handle_tests;
mod inner;
mod lifecycle;
mod message_path;
#[cfg(test)]
mod message_review_tests;
mod messages;
mod peers;
mod progress;
mod rendezvous;
mod requests;
#[cfg(test)]
mod security_tests;
mod seq;
mod state;
mod wait;

/// Set-ups the node's unit tests share.
#[cfg(test)]
pub(crate) mod test_pair {
    use crate::config::Config;
    use crate::{EndpointId, Node};

    /// A sender node and a receiver node of this process (nodes `ids` of domain 0, job
    /// `job`) over `provider`, with `recv_buffers` buffers per endpoint: the sender's
    /// endpoint, the receiver's (both at port 1), and the receiver's as the sender got it.
    pub(crate) fn sender_and_receiver(
        provider: &str,
        job: &str,
        ids: (u32, u32),
        recv_buffers: Option<usize>,
    ) -> (Node, Node, EndpointId, EndpointId, EndpointId) {
        sender_and_receiver_eager(provider, job, ids, recv_buffers, None)
    }

    /// [`sender_and_receiver`] with eager threshold `eager_max` (`MCAPI_EAGER_MAX`): on shm,
    /// whose default is its inject size, 8 KiB sends eager messages above it from send
    /// slots.
    pub(crate) fn sender_and_receiver_eager(
        provider: &str,
        job: &str,
        ids: (u32, u32),
        recv_buffers: Option<usize>,
        eager_max: Option<usize>,
    ) -> (Node, Node, EndpointId, EndpointId, EndpointId) {
        let mut config = Config::defaults();
        config.eager_max = eager_max;
        config.provider = Some(provider.into());
        config.job = format!("{job}-{}", std::process::id());
        if let Some(n) = recv_buffers {
            config.recv_buffers = n;
        }
        let a = Node::initialize(0, ids.0, config.clone()).expect("sender node");
        let b = Node::initialize(0, ids.1, config).expect("receiver node");
        let tx = a.endpoint_create(1).expect("an endpoint");
        let rx = b.endpoint_create(1).expect("an endpoint");
        let to = a.endpoint_get(0, ids.1, 1, None).expect("the receiver");
        (a, b, tx, rx, to)
    }

    /// Connects `tx` of `a` to `to` (`rx` of `b`) as a packet channel, or a scalar one, and
    /// opens both sides: their handles (send, receive).
    pub(crate) fn open_channel(
        (a, b): (&Node, &Node),
        (tx, rx, to): (EndpointId, EndpointId, EndpointId),
        scalar: bool,
    ) -> (crate::ChannelHandle, crate::ChannelHandle) {
        let t = Some(std::time::Duration::from_secs(10));
        let (connect, send_open, recv_open): (Connect, Open, Open) = if scalar {
            (
                Node::sclchan_connect_i,
                Node::sclchan_send_open_i,
                Node::sclchan_recv_open_i,
            )
        } else {
            (
                Node::pktchan_connect_i,
                Node::pktchan_send_open_i,
                Node::pktchan_recv_open_i,
            )
        };
        let c = connect(a, tx, to).expect("connect");
        a.wait(c, None, t).expect("connected");
        let (hs, qs) = send_open(a, tx).expect("send open");
        let (hr, qr) = recv_open(b, rx).expect("receive open");
        let a2 = a.clone();
        let opened = std::thread::spawn(move || a2.wait(qs, None, t));
        b.wait(qr, None, t).expect("receive side open");
        opened.join().expect("the opener").expect("send side open");
        (hs, hr)
    }

    type Connect = fn(&Node, EndpointId, EndpointId) -> Result<crate::RequestHandle, crate::Status>;
    type Open = fn(
        &Node,
        EndpointId,
    ) -> Result<(crate::ChannelHandle, crate::RequestHandle), crate::Status>;
}

pub use channel::{ChannelHandle, Packet, ReceiveMemory, MAX_PKT_SIZE};
pub(crate) use common::EAGER_SLOT;
pub use common::{MAX_ENDPOINTS, MAX_MSG_SIZE, NUM_PRIORITIES};

use crate::control::Frame;
use crate::semantics::endpoint_id::{MAX_DOMAIN, MAX_NODE};
use crate::semantics::Status;
use common::Result;
use inner::NodeInner;
use std::sync::Arc;
use std::time::Instant;

/// An initialized MCAPI node. Cheap to clone; usable from any thread.
#[derive(Clone)]
pub struct Node {
    inner: Arc<NodeInner>,
}

impl Node {
    /// `mcapi_domain_id_get`: the domain this node was initialized in. A `Node` keeps its
    /// ids after `finalize` (the C call, which finds the thread's node, reports
    /// `MCAPI_ERR_NODE_NOTINIT` then: it has none).
    pub fn domain_id(&self) -> u32 {
        self.inner.domain_id
    }

    /// `mcapi_node_id_get`: this node's id (kept after `finalize`, as
    /// [`Node::domain_id`]).
    pub fn node_id(&self) -> u32 {
        self.inner.node_id
    }

    /// Whose reading of the spec this node follows (`MCAPI_COMPAT`).
    pub fn compat(&self) -> crate::config::Compat {
        self.inner.config.compat
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
            return self.inner.node_attribute(attribute);
        }
        let peer = match self.inner.connect_peer(domain, node, Some(Instant::now())) {
            Ok(p) => p,
            Err(Status::MCAPI_TIMEOUT | Status::MCAPI_ERR_TRANSMISSION) => {
                return Err(Status::MCAPI_ERR_NODE_INVALID)
            }
            Err(e) => return Err(e),
        };
        // A node that went away since the last contact (or is finalizing) is no valid node
        // either.
        let gone = |e| match e {
            Status::MCAPI_ERR_TRANSMISSION => Status::MCAPI_ERR_NODE_INVALID,
            e => e,
        };
        match self
            .inner
            .control_call(peer, &Frame::NodeAttribute { attribute })
            .map_err(gone)?
        {
            Frame::Value(v) => Ok(v),
            answer => Err(gone(common::refusal("node_get_attribute", &answer))),
        }
    }

    /// Marks the node broken by `panic` in `what` (caught at the C boundary): every later
    /// call fails with `MCAPI_ERR_GENERAL`.
    pub(crate) fn mark_broken(&self, what: &str, panic: &(dyn std::any::Any + Send)) {
        self.inner.mark_broken(what, panic);
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
}
