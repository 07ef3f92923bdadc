//! What a channel request waits for ([`ChanReq`]), as the node's request table records it.

use super::handle::ChannelHandle;

/// What a channel request waits for.
#[derive(Clone, Copy)]
pub(in crate::node) enum ChanReq {
    Connect,
    Open { port: u32, handle: ChannelHandle },
    Close { port: u32, handle: ChannelHandle },
    Send { handle: ChannelHandle },
    Recv { handle: ChannelHandle },
}
