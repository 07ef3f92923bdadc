//! The channel state of a local endpoint: its binding and what the other side told it.

use super::handle::ChannelHandle;
use crate::semantics::channel::Binding;
use crate::semantics::endpoint_id::EndpointId;

/// What the other side told us when it opened.
#[derive(Clone, Debug)]
pub(in crate::node) struct PeerOpen {
    /// The endpoint that opened: only the one connected to counts.
    pub(super) from: EndpointId,
    pub(super) fabric_addr: Vec<u8>,
    pub(super) credits: u32,
    pub(super) max_payload: usize,
    /// A scalar side's route on its node's hub.
    pub(super) route: u16,
}

/// The channel state of a local endpoint.
#[derive(Default)]
pub(in crate::node) struct EndpointChannel {
    pub(super) binding: Binding<PeerOpen>,
    /// The other endpoint, once connected.
    pub(super) peer: Option<EndpointId>,
    /// The side slot reserved by an open.
    pub(super) side: Option<ChannelHandle>,
}

impl EndpointChannel {
    pub(in crate::node) fn is_connected(&self) -> bool {
        self.binding.is_connected()
    }

    pub(in crate::node) fn status_flags(&self) -> u64 {
        self.binding.status_flags()
    }
}
