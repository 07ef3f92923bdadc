//! Scalar channels: `sclchan_send` and `sclchan_recv`.

use super::data::{posted, SideData};
use super::handle::ChannelHandle;
use super::side::Side;
use super::waiting::{BusyBurst, ChannelWait, POLL_BURST};
use crate::node::common::Result;
use crate::node::Node;
use crate::semantics::channel::{ChannelKind, Direction};
use crate::semantics::Status;
use mcapi_ofi::Error as OfiError;

impl Node {
    /// `mcapi_sclchan_send_uint8/16/32/64`: sends the low `width` bytes (1, 2, 4 or 8) of
    /// `value`; blocks while the channel FIFO is full.
    ///
    /// # Errors
    /// `MCAPI_ERR_CHAN_INVALID`, `MCAPI_ERR_PARAMETER` (width), `MCAPI_TIMEOUT`,
    /// `MCAPI_ERR_GENERAL` (the receiver closed or died).
    pub fn sclchan_send(&self, handle: ChannelHandle, value: u64, width: usize) -> Result<()> {
        if !matches!(width, 1 | 2 | 4 | 8) {
            return Err(Status::MCAPI_ERR_PARAMETER);
        }
        // The common case, kept small: a credit is there and the value goes at once.
        if self.sclchan_try_send(handle, value, width)? {
            return Ok(());
        }
        self.sclchan_send_blocking(handle, value, width)
    }

    /// One attempt to send a scalar: `false` when it must wait (no credit, or the provider
    /// asked to try again).
    #[inline(always)]
    fn sclchan_try_send(&self, handle: ChannelHandle, value: u64, width: usize) -> Result<bool> {
        let bytes = value.to_le_bytes();
        let mut g = self
            .inner
            .side(handle, ChannelKind::Scalar, Direction::Send)?;
        let side = g.as_mut().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
        side.check_usable()?;
        if let Some(status) = side.peer_gone {
            return Err(status);
        }
        if side.local.is_some() {
            return side.send_local_scalar(value, width);
        }
        let io = side.io.as_mut().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
        let SideData::Send(s) = &mut io.data else {
            return Ok(false);
        };
        if !s.state.take_credit() {
            return Ok(false);
        }
        let seq = s.state.seq();
        let sent = match (&io.hub, &io.ep) {
            (Some(h), _) => h
                .hub
                .send_value(&bytes[..width], seq, io.dest, h.peer_route),
            (None, Some(ep)) => ep.inject_data(&bytes[..width], u64::from(seq), io.dest),
            // No endpoint: fails as the provider would, so the credit goes back.
            (None, None) => Err(OfiError::InvalidArgument("scalar side without an endpoint")),
        };
        s.state.posted(posted(&sent), Status::MCAPI_ERR_GENERAL)
    }

    /// A scalar send that found no credit: progresses the side and backs off until one
    /// comes, the timeout passes or the receiver is gone.
    #[cold]
    #[inline(never)]
    fn sclchan_send_blocking(&self, handle: ChannelHandle, value: u64, width: usize) -> Result<()> {
        let mut wait = None;
        loop {
            {
                let mut g = self
                    .inner
                    .side(handle, ChannelKind::Scalar, Direction::Send)?;
                let side = g.as_mut().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
                side.check_usable()?;
                let timeout = side.timeout;
                side.progress();
                wait.get_or_insert_with(|| ChannelWait::new(timeout, self.inner.config.spin));
            }
            if self.sclchan_try_send(handle, value, width)? {
                return Ok(());
            }
            self.channel_backoff(handle, wait.as_mut().expect("set above"))?;
        }
    }

    /// `mcapi_sclchan_recv_uint8/16/32/64`: the next scalar, which must have been sent with
    /// the same `width`; blocks until one arrives.
    ///
    /// # Errors
    /// `MCAPI_ERR_CHAN_INVALID`, `MCAPI_TIMEOUT`, `MCAPI_ERR_GENERAL` for a width mismatch
    /// (the scalar stays queued) or when the sender closed and everything was received, or
    /// died.
    pub fn sclchan_recv(&self, handle: ChannelHandle, width: usize) -> Result<u64> {
        if !matches!(width, 1 | 2 | 4 | 8) {
            return Err(Status::MCAPI_ERR_PARAMETER);
        }
        // The common case, kept small: the scalar is queued or in the CQ already.
        {
            let mut g = self
                .inner
                .side(handle, ChannelKind::Scalar, Direction::Receive)?;
            let side = g.as_mut().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
            side.check_usable()?;
            if let Some(v) = take_scalar(side, width)? {
                return Ok(v);
            }
            side.progress();
            if let Some(v) = take_scalar(side, width)? {
                return Ok(v);
            }
        }
        self.sclchan_recv_blocking(handle, width)
    }

    /// A scalar receive that found nothing: polls the side in bursts and backs off until a
    /// scalar comes, the timeout passes or the sender is gone.
    #[cold]
    #[inline(never)]
    fn sclchan_recv_blocking(&self, handle: ChannelHandle, width: usize) -> Result<u64> {
        let mut wait = None;
        loop {
            let mut burst = BusyBurst::new(handle);
            let got = (|| {
                let mut g = self
                    .inner
                    .side(handle, ChannelKind::Scalar, Direction::Receive)?;
                let side = g.as_mut().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
                side.check_usable()?;
                // Poll a burst under the lock before backing off: the side is this call's
                // while it blocks, and a lock round trip per poll would slow detection.
                // (Reading the CQ first is no loss: the common path just looked.)
                for _ in 0..POLL_BURST {
                    side.progress();
                    if let Some(v) = take_scalar(side, width)? {
                        return Ok(Some(v));
                    }
                    burst.poll(&self.inner.channels);
                }
                let timeout = side.timeout;
                wait.get_or_insert_with(|| ChannelWait::new(timeout, self.inner.config.spin));
                Ok(None)
            })();
            self.end_burst(&burst, wait.as_mut());
            if let Some(v) = got? {
                return Ok(v);
            }
            self.channel_backoff(handle, wait.as_mut().expect("set above"))?;
        }
    }
}

/// Takes the next scalar of a receive side, which must be `width` bytes wide (else
/// `MCAPI_ERR_GENERAL`, and it stays queued), or says why there is none.
#[inline(always)]
fn take_scalar(side: &mut Side, width: usize) -> Result<Option<u64>> {
    let gone = side.peer_gone;
    let io = side.io.as_mut().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
    let SideData::Recv(r) = &mut io.data else {
        return Err(Status::MCAPI_ERR_CHAN_INVALID);
    };
    if let Some((v, credits)) = r.state.take_scalar(width)? {
        if let Some(n) = credits {
            io.return_credits(n);
            if side.local.is_some() {
                side.pump_local(false);
            }
        }
        return Ok(Some(v));
    }
    io.nothing_received(gone)?;
    Ok(None)
}
