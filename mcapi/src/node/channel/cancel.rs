//! Cancelling channel requests: withdrawing a pending send, receive or open.

use super::data::SideData;
use super::handle::ChannelHandle;
use super::req::ChanReq;
use super::table::Recount;
use crate::node::Node;
use crate::semantics::request::RequestHandle;

impl Node {
    /// Takes a pending `pktchan_send_i` (not yet posted) or `pktchan_recv_i` (not yet
    /// served) off its side for a cancel; `false` if it can no longer be withdrawn. A
    /// zero-copy packet already posted is waited for first (the provider reads its memory
    /// until then), so the caller may reuse the buffer once the cancel returns.
    pub(in crate::node) fn withdraw_channel_request(
        &self,
        request: RequestHandle,
        c: ChanReq,
    ) -> bool {
        if let ChanReq::Open { handle, .. } = c {
            return self.withdraw_open(handle);
        }
        let (ChanReq::Recv { handle } | ChanReq::Send { handle }) = c else {
            return false;
        };
        let Some((slot, generation, ..)) = handle.decode() else {
            return false;
        };
        // A send side that closed announced its queued packets: `Some((port, count))` to
        // announce again without the withdrawn one.
        let mut recount = None;
        let withdrawn = {
            let mut g = self.inner.channels.sides[slot].lock();
            let side = g.as_mut().filter(|s| s.generation == generation);
            let (port, run) = side.as_ref().map_or((0, None), |s| (s.port, s.peer));
            match side.and_then(|s| s.io.as_mut()).map(|io| &mut io.data) {
                Some(SideData::Recv(r)) => r.state.withdraw(request),
                Some(SideData::Send(s)) => match s.state.withdraw(request) {
                    Some(_) => {
                        recount = s.state.recount().map(|count| Recount {
                            port,
                            handle,
                            count,
                            run,
                        });
                        true
                    }
                    None => false,
                },
                _ => false,
            }
        };
        if let Some(r) = recount {
            self.inner.announce_close(r);
        }
        if !withdrawn && matches!(c, ChanReq::Send { .. }) {
            self.settle_send(request, handle);
        }
        withdrawn
    }

    /// Frees the side of a pending open unless the open was announced to the other side:
    /// that side may have completed its own open against this one's endpoint already.
    fn withdraw_open(&self, handle: ChannelHandle) -> bool {
        let Some((slot, generation, ..)) = handle.decode() else {
            return true;
        };
        let mut g = self.inner.channels.sides[slot].lock();
        match g.as_ref().filter(|s| s.generation == generation) {
            Some(side) if side.announced_to.is_some() => false,
            Some(_) => {
                self.inner.channels.vacate(&mut g, slot);
                true
            }
            None => true,
        }
    }

    /// Before a cancel of send request `request`: a zero-copy packet already handed to the
    /// fabric cannot be taken back, and its memory is the provider's until the send
    /// completes, so this waits for that (or for the endpoint to close, when the receiver is
    /// gone). The request is then complete and the cancel changes nothing on the wire.
    pub(in crate::node) fn settle_send(&self, request: RequestHandle, handle: ChannelHandle) {
        let Some((slot, generation, ..)) = handle.decode() else {
            return;
        };
        let in_flight = || {
            self.inner.channels.sides[slot]
                .lock()
                .as_ref()
                .filter(|s| s.generation == generation)
                .and_then(|s| s.io.as_ref())
                .is_some_and(|io| match &io.data {
                    SideData::Send(s) => s.state.is_in_flight(request),
                    _ => false,
                })
        };
        let mut backoff = self.inner.backoff();
        while in_flight() {
            self.progress_side(handle);
            // No deadline: the wait cannot time out.
            _ = backoff.wait(None);
        }
    }

    /// `mcapi_cancel` of an open (`handle`'s), once its side is withdrawn: the endpoint is no
    /// longer opening (unless it was deleted, and a new endpoint at the port opens on its own).
    pub(in crate::node) fn cancel_channel_open(&self, port: u32, handle: ChannelHandle) {
        if let Ok(mut st) = self.inner.live_state() {
            if let Some(ep) = st
                .endpoints
                .get_mut(&port)
                .filter(|ep| ep.channel.side == Some(handle))
            {
                ep.channel.binding.abandon_open();
                ep.channel.side = None;
            }
        }
    }
}
