//! Sending packets: `pktchan_send`, `pktchan_send_i` and its zero-copy form.

use super::data::{posted, SideData, Source};
use super::handle::ChannelHandle;
use super::limits::CTX_ZERO_COPY;
use super::req::ChanReq;
use super::side::Side;
use super::side_io::{post_staged, Injectable};
use super::table::SideSet;
use super::waiting::ChannelWait;
use crate::node::common::{lock, Result};
use crate::node::state::Req;
use crate::node::wait::SleepCqs;
use crate::node::Node;
use crate::semantics::channel::{ChannelKind, Direction};
use crate::semantics::channel_side::{Outgoing, Posted, ZeroCopy};
use crate::semantics::request::RequestHandle;
use crate::semantics::Status;
use mcapi_ofi::{Completion, Error as OfiError, SendBuffer, SendWait};

impl Node {
    /// `mcapi_pktchan_send`: sends one packet; blocks while the receiver's pool is full
    /// (no credit) and until the provider is done with `data`. Packets up to the inject size
    /// are injected; larger ones go out from `data` itself without a copy where the provider
    /// allows (no `FI_MR_LOCAL`), else through the channel's registered staging buffers.
    ///
    /// # Errors
    /// `MCAPI_ERR_CHAN_INVALID`, `MCAPI_ERR_PKT_SIZE`, `MCAPI_TIMEOUT` (endpoint timeout),
    /// `MCAPI_ERR_TRANSMISSION` (the receiver closed or died).
    pub fn pktchan_send(&self, handle: ChannelHandle, data: &[u8]) -> Result<()> {
        let mut wait = None;
        loop {
            let mut g = self
                .inner
                .side(handle, ChannelKind::Packet, Direction::Send)?;
            let side = g.as_mut().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
            let sent = self.send_packet_now(side, data, &mut wait);
            drop(g);
            self.inner.flush_completed();
            if sent? {
                return Ok(());
            }
            self.channel_backoff(handle, wait.as_mut().expect("set when it must wait"))?;
        }
    }

    /// One pass of a blocking send: tries, and if the packet cannot go yet, reads the side's
    /// CQ (credits, completions) and tries once more. `Ok(false)`: it must wait (`wait` is
    /// set then; it is made only when needed, as it reads the clock).
    fn send_packet_now(
        &self,
        side: &mut Side,
        data: &[u8],
        wait: &mut Option<ChannelWait>,
    ) -> Result<bool> {
        side.check_usable()?;
        if data.len() > side.max_payload {
            return Err(Status::MCAPI_ERR_PKT_SIZE);
        }
        for progress_first in [false, true] {
            if progress_first {
                side.progress();
            }
            if let Some(status) = side.peer_gone {
                return Err(status);
            }
            if self.try_send_packet(side, data, wait)? {
                return Ok(true);
            }
        }
        let timeout = side.timeout;
        wait.get_or_insert_with(|| ChannelWait::new(timeout, self.inner.config.spin));
        Ok(false)
    }

    /// One attempt to send a packet: `Ok(false)` when it must wait (no credit, provider busy).
    fn try_send_packet(
        &self,
        side: &mut Side,
        data: &[u8],
        wait: &mut Option<ChannelWait>,
    ) -> Result<bool> {
        if side.local.is_some() {
            return side.send_local_packet(data);
        }
        let (peer, timeout) = (side.peer, side.timeout);
        let io = side.io.as_mut().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
        let SideData::Send(s) = &mut io.data else {
            return Err(Status::MCAPI_ERR_CHAN_INVALID);
        };
        if s.state.has_queued() || !s.state.take_credit() {
            return Ok(false);
        }
        let seq = u64::from(s.state.seq());
        let ep = io.ep.as_ref().ok_or(Status::MCAPI_ERR_TRANSMISSION)?;
        let r = if data.len() <= s.inject_size {
            s.inject(ep, data, seq as u32, io.dest)
        } else if timeout.is_some() {
            // A finite timeout must never leave the provider reading the caller's buffer
            // (only closing the endpoint would take it back): copy.
            match post_staged(s, Some(ep), io.dest, data, seq, side.max_payload) {
                Some(r) => r,
                None => return Ok(false),
            }
        } else {
            // Zero copy: the endpoint is lent to the send, which returns once the provider
            // is done with `data` (or has closed the endpoint, if we must give up).
            let ep = io.ep.take().ok_or(Status::MCAPI_ERR_TRANSMISSION)?;
            s.state.zero_copy_started();
            let cq = io.cq.clone();
            let out = &mut io.out;
            let deadline = wait
                .get_or_insert_with(|| ChannelWait::new(timeout, self.inner.config.spin))
                .deadline;
            let mut polls = 0u32;
            let mut backoff = self.inner.backoff();
            let mut outcome = Ok(());
            let (back, result) = ep.send_unregistered(data, seq, io.dest, CTX_ZERO_COPY, || {
                let mut buf = [Completion::default(); 16];
                match cq.read(&mut buf) {
                    Ok(n) => {
                        for c in &buf[..n] {
                            if let Some(slot) = s.event(c.context(), true, c.len(), out) {
                                // Re-posted after the send: the endpoint is lent out.
                                s.credit_reposts.push(slot);
                            }
                        }
                    }
                    Err(OfiError::Completion(e)) => {
                        if let Some(slot) = s.event(e.context, false, 0, out) {
                            s.credit_reposts.push(slot);
                        }
                    }
                    Err(_) => {
                        // The CQ cannot be read: the send's end will never be seen, and only
                        // closing the endpoint stops the provider reading `data`.
                        s.state.zero_copy_sent(false);
                        outcome = Err(Status::MCAPI_ERR_TRANSMISSION);
                        return SendWait::Abandon;
                    }
                }
                if s.state.zero_copy() != ZeroCopy::Waiting {
                    return SendWait::Done;
                }
                // Liveness (the pushed state of the peer's run) on the slow path, every 16th
                // look.
                polls += 1;
                if polls.is_multiple_of(16)
                    && backoff.slow_check_due()
                    && !self.inner.peer_alive(peer)
                {
                    outcome = Err(Status::MCAPI_ERR_TRANSMISSION);
                    return SendWait::Abandon;
                }
                self.progress_busy_sides(&SideSet::default(), &mut backoff);
                if let Err(e) = backoff.wait_on(deadline, || SleepCqs::from_iter([cq.clone()])) {
                    outcome = Err(e);
                    return SendWait::Abandon;
                }
                SendWait::Pending
            });
            io.ep = back;
            // Credit receives that completed during the wait go back, whatever the send did.
            if let Some(ep) = &io.ep {
                super::side_io::repost_credit_slots_on(s, ep);
            }
            // A send that completed with an error (the layer reports it as such too) broke
            // the channel: its sequence number may or may not have arrived.
            if s.state.zero_copy() == ZeroCopy::Done(false) {
                side.peer_gone = Some(Status::MCAPI_ERR_TRANSMISSION);
                return Err(Status::MCAPI_ERR_TRANSMISSION);
            }
            match result {
                Ok(()) => {
                    return s.state.posted(Posted::Sent, Status::MCAPI_ERR_TRANSMISSION);
                }
                Err(e) if e.is_again() => Err(e),
                Err(OfiError::InvalidArgument("send abandoned")) => {
                    side.peer_gone = Some(Status::MCAPI_ERR_TRANSMISSION);
                    return outcome.map(|_| false);
                }
                Err(OfiError::InvalidArgument(_)) => {
                    // No zero copy here: copy into staging and send from there.
                    match post_staged(s, io.ep.as_ref(), io.dest, data, seq, side.max_payload) {
                        Some(r) => r,
                        None => return Ok(false),
                    }
                }
                Err(e) => Err(e),
            }
        };
        s.state.posted(posted(&r), Status::MCAPI_ERR_TRANSMISSION)
    }

    /// `mcapi_pktchan_send_i`: sends one packet without blocking. A packet up to the inject
    /// size with a credit at hand is injected and its request is complete on return; any
    /// other is copied into the channel's registered staging buffers, so the request
    /// completes (and `data` may be reused) as soon as it is handed to the fabric; while the
    /// receiver's pool is full it stays pending, in order.
    ///
    /// # Errors
    /// `MCAPI_ERR_CHAN_INVALID`, `MCAPI_ERR_PKT_SIZE`, `MCAPI_ERR_MEM_LIMIT` (all staging
    /// buffers queued), `MCAPI_ERR_REQUEST_LIMIT`, `MCAPI_ERR_TRANSMISSION`.
    pub fn pktchan_send_i(&self, handle: ChannelHandle, data: &[u8]) -> Result<RequestHandle> {
        self.send_i(handle, Source::Copy(data))
    }

    /// `mcapi_pktchan_send_i` without a copy: the packet goes out from `buf` itself, and the
    /// request completes only when the provider is done with it (the send's completion), so
    /// `buf` is the application's again once the request completed (whatever its status).
    /// Packets up to the inject size, and every packet on providers that need registered
    /// memory (`FI_MR_LOCAL`), are copied as by [`Node::pktchan_send_i`]. FIFO order holds
    /// with copying and blocking sends on the same channel. A cancel of a packet already
    /// handed to the fabric waits for its completion (it is sent, not cancelled).
    ///
    /// # Errors
    /// As [`Node::pktchan_send_i`]; a send that fails after it was handed to the fabric
    /// completes its request with `MCAPI_ERR_TRANSMISSION`.
    pub fn pktchan_send_i_zero_copy(
        &self,
        handle: ChannelHandle,
        buf: SendBuffer,
    ) -> Result<RequestHandle> {
        self.send_i(handle, Source::User(buf))
    }

    fn send_i(&self, handle: ChannelHandle, src: Source<'_>) -> Result<RequestHandle> {
        let len = src.len();
        let request = || Req::Chan(ChanReq::Send { handle });
        let sent = (|| {
            let mut g = self
                .inner
                .side(handle, ChannelKind::Packet, Direction::Send)?;
            let side = g.as_mut().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
            side.check_usable()?;
            if len > side.max_payload {
                return Err(Status::MCAPI_ERR_PKT_SIZE);
            }
            if let Some(status) = side.peer_gone {
                return Err(status);
            }
            let payload = side.max_payload;
            let mut io = side.io.as_mut().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
            let unregistered = io.ep.as_ref().is_some_and(|ep| ep.sends_unregistered());
            let zero_copy = match (&src, &io.data) {
                (Source::User(_), SideData::Send(s)) => len > s.inject_size && unregistered,
                (_, SideData::Send(_)) => false,
                _ => return Err(Status::MCAPI_ERR_CHAN_INVALID),
            };
            // The request is allocated under the side lock (the state lock after it, as
            // the lock discipline allows): complete already when the packet is injected,
            // so the call takes the state lock once.
            let mut req = None;
            if !zero_copy && side.local.is_none() {
                if io.injectable(len) == Injectable::NoCredit {
                    // Returned credits wait in the CQ, which a sender reads only when it
                    // must: read now rather than stage the packet and send it later.
                    side.progress();
                    if let Some(status) = side.peer_gone {
                        return Err(status);
                    }
                    io = side.io.as_mut().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
                }
                if io.injectable(len) == Injectable::Now {
                    let mut st = self.inner.live_state()?;
                    let done =
                        st.requests
                            .alloc_completed(request(), Status::MCAPI_SUCCESS, len)?;
                    drop(st);
                    if io.inject_now(src.bytes()) {
                        return Ok(done);
                    }
                    // The provider refused it: pending, the queued way (no other thread
                    // knows the request; the slot it frees is taken again at once).
                    let mut st = lock(&self.inner.state);
                    _ = st.requests.release(done);
                    req = Some(st.requests.alloc(request())?);
                }
            }
            let req = match req {
                Some(r) => r,
                None => self.inner.live_state()?.requests.alloc(request())?,
            };
            let out = match src {
                Source::User(buf) if zero_copy => Outgoing::User(buf),
                src => match io.stage(src.bytes(), payload) {
                    Some(out) => out,
                    None => {
                        // The call fails: the request never reaches the application.
                        _ = lock(&self.inner.state).requests.release(req);
                        return Err(Status::MCAPI_ERR_MEM_LIMIT);
                    }
                },
            };
            // A send side (checked above).
            if let SideData::Send(s) = &mut io.data {
                s.state.queue(req, out);
            }
            // Posted at once when a credit and a slot are at hand, as a raw send would be;
            // the CQ is read only when the packet must wait (on tcp;ofi_rxm each read is a
            // poll(2) of the endpoint's sockets).
            io.advance_queued(payload, false);
            if side.local.is_some() {
                side.pump_local(true);
            } else if io.has_queued_send() {
                side.progress();
            }
            Ok(req)
        })();
        self.inner.flush_completed();
        sent
    }
}
