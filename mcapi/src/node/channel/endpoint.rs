//! The channel state of a local endpoint: its binding and what the other side told it.

use super::handle::ChannelHandle;
use crate::semantics::channel::Binding;
use crate::semantics::endpoint_id::EndpointId;
use crate::semantics::request::RequestHandle;

/// What the other side told us when it opened.
#[derive(Clone, Debug)]
pub(in crate::node) struct PeerOpen {
    /// The endpoint that opened: only the one connected to counts.
    pub(super) from: EndpointId,
    pub(super) fabric_addr: Vec<u8>,
    pub(super) credits: u32,
    pub(super) max_payload: usize,
    /// A scalar side's route on its node's hub, or a packet receive side's (with
    /// `hub_addr`).
    pub(super) route: u16,
    /// A packet receive side's hub, which takes its small packets (empty: none).
    pub(super) hub_addr: Vec<u8>,
}

/// The channel state of a local endpoint.
#[derive(Default)]
pub(in crate::node) struct EndpointChannel {
    pub(super) binding: Binding<PeerOpen>,
    /// The other endpoint, once connected.
    pub(super) peer: Option<EndpointId>,
    /// The node that made the connect (`<domain, node>`), which may undo it.
    pub(super) connected_by: Option<(u32, u32)>,
    /// The side slot reserved by an open.
    pub(super) side: Option<ChannelHandle>,
    /// This side's close request, while the close waits for the other side's.
    pub(super) closing: Option<RequestHandle>,
}

impl EndpointChannel {
    pub(in crate::node) fn is_connected(&self) -> bool {
        self.binding.is_connected()
    }

    /// Node `<domain, node>` is gone: unbinds the endpoint if it is connected to one of that
    /// node's endpoints and has not opened (an open learns of the loss itself).
    pub(in crate::node) fn node_lost_before_open(&mut self, domain: u32, node: u32) {
        let theirs = self
            .peer
            .is_some_and(|id| (id.domain(), id.node()) == (domain, node));
        if theirs && self.side.is_none() && self.binding.peer_lost_before_open() {
            self.peer = None;
        }
    }

    pub(in crate::node) fn status_flags(&self) -> u64 {
        self.binding.status_flags()
    }
}
