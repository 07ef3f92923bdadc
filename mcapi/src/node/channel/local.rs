//! Same-node channels: both sides on this node, items copied straight from the sender's call
//! into the receive side's pool and FIFO.
//!
//! Nothing goes through the fabric: a send takes a credit and a sequence number as it would
//! for a remote receiver, then locks the receive side (`try_lock`: side locks never nest
//! otherwise) and copies the packet into one of its free buffers (or queues the scalar) with
//! the receive side's own state machine, so order, credits and the buffer count hold as over
//! the fabric. Credits come back the same way: the receive side counts what it frees
//! ([`LocalRecv`]) and hands it over whenever either side is progressed ([`Side::pump_local`]),
//! which also moves `pktchan_send_i` packets that waited for credits. A side busy in another
//! thread is left to that thread, whose next progress moves what waits; in one thread every
//! call finds the other side free, so a single thread sends and receives on its own.
//!
//! [`LocalRecv`]: super::data::LocalRecv

use super::data::{RecvData, SideData};
use super::side::Side;
use super::side_io::SideIo;
use crate::node::common::Result;
use crate::semantics::channel_side::{NextSend, Posted};
use crate::semantics::Status;
use mcapi_ofi::MemoryRegion;

impl Side {
    /// Runs `f` on this side and its same-node other side, if that one is still the side
    /// this one was opened with and its lock is free (or, `wait`, once it is). `None`
    /// otherwise. Only a send side's application call waits (for its receive side, which
    /// never waits for its send side, nor does anything else wait for a side under a side
    /// lock: docs/design.md, lock discipline).
    #[inline]
    fn with_local_peer<R>(
        &mut self,
        wait: bool,
        f: impl FnOnce(&mut Side, &mut Side) -> R,
    ) -> Option<R> {
        let lp = self.local.take()?;
        let guard = if wait {
            Some(lp.sides[lp.slot].lock())
        } else {
            lp.sides[lp.slot].try_lock()
        };
        let r = guard.and_then(|mut g| {
            let peer = g.as_mut().filter(|s| s.generation == lp.generation)?;
            Some(f(self, peer))
        });
        self.local = Some(lp);
        r
    }

    /// Moves what waits between this side and its same-node other side: freed credits to the
    /// sender, then queued `pktchan_send_i` packets into the receive side, and serves its
    /// pending `pktchan_recv_i`s. Returns the items moved (and credits handed over).
    /// `wait`: for the other side's lock (a send side's application call only).
    pub(super) fn pump_local(&mut self, wait: bool) -> usize {
        self.with_local_peer(wait, |a, b| {
            let a_sends = matches!(
                &a.io,
                Some(SideIo {
                    data: SideData::Send(_),
                    ..
                })
            );
            let (send, recv) = if a_sends { (a, b) } else { (b, a) };
            transfer(send, recv)
        })
        .unwrap_or(0)
    }

    /// A blocking `pktchan_send` to a same-node receiver: `Ok(false)` when it must wait (no
    /// credit, packets queued before it, the receive side busy elsewhere).
    pub(super) fn send_local_packet(&mut self, data: &[u8]) -> Result<bool> {
        // Queued packets go first (and the credits freed meanwhile come over).
        self.pump_local(true);
        self.send_local(|r, seq| {
            deliver(r, seq, data.len(), |pool, offset| pool.write(offset, data))
        })
    }

    /// A scalar send to a same-node receiver: `Ok(false)` when it must wait.
    pub(super) fn send_local_scalar(&mut self, value: u64, width: usize) -> Result<bool> {
        let value = value & (u64::MAX >> (64 - 8 * width));
        let sent = self.send_local(|r, seq| Some(r.state.hub_scalar_arrived(seq, value, width)))?;
        if !sent {
            // The credits freed meanwhile come over for the next try.
            self.pump_local(true);
        }
        Ok(sent)
    }

    /// One item sent with a credit and the next sequence number by `put`, which gives the
    /// credits due back (`None`: it could not be placed now).
    fn send_local(
        &mut self,
        put: impl FnOnce(&mut RecvData, u32) -> Option<Option<u32>>,
    ) -> Result<bool> {
        let kind = self.kind;
        let ok = self.with_local_peer(true, |me, recv| {
            let Some(SideIo {
                data: SideData::Send(s),
                ..
            }) = &mut me.io
            else {
                return Err(Status::MCAPI_ERR_CHAN_INVALID);
            };
            if s.state.has_queued() || recv.closed || !s.state.take_credit() {
                return Ok(false);
            }
            let seq = s.state.seq();
            let due = match &mut recv.io {
                Some(SideIo {
                    data: SideData::Recv(r),
                    ..
                }) => put(r, seq),
                _ => None,
            };
            let Some(due) = due else {
                s.state.posted(Posted::Again, Status::MCAPI_SUCCESS)?;
                return Ok(false);
            };
            if let Some(n) = due {
                s.state.credits_returned(n);
            }
            recv.serve_pending_recvs();
            s.state.posted(Posted::Sent, super::side::side_status(kind))
        });
        ok.unwrap_or(Ok(false))
    }
}

/// Places a packet of `len` bytes (written by `copy` at the offset it is given) in a free
/// buffer of same-node receive side `recv` as item `seq`; returns the credits due back, or
/// `None` when no buffer is free (never with a credit in hand: one buffer per credit).
fn deliver(
    r: &mut RecvData,
    seq: u32,
    len: usize,
    copy: impl FnOnce(&MemoryRegion, usize) -> std::result::Result<(), mcapi_ofi::Error>,
) -> Option<Option<u32>> {
    let b = r.local.as_mut()?.free.pop_front()? as usize;
    let offset = b * r.state.buffer_size();
    // A same-node buffer is never posted and its staging slot is not in flight.
    let copied = copy(&r.pool, offset);
    debug_assert!(copied.is_ok(), "{copied:?}");
    // Plain posting: a buffer that becomes free is listed, never posted at once.
    let (due, _dropped) = r.state.packet_arrived(b, offset, len, seq);
    // As a plain receive's completion: the "provider" is done with the buffer at once.
    let _listed = r.state.buffer_done(b);
    Some(due)
}

/// Hands freed credits from `recv` to `send`, then moves `send`'s queued packets into `recv`
/// while credits last. Returns what moved.
fn transfer(send: &mut Side, recv: &mut Side) -> usize {
    let payload = send.max_payload;
    let (Some(sio), Some(rio)) = (send.io.as_mut(), recv.io.as_mut()) else {
        return 0;
    };
    let (SideData::Send(s), SideData::Recv(r)) = (&mut sio.data, &mut rio.data) else {
        return 0;
    };
    let mut moved = 0;
    if let Some(l) = r.local.as_mut().filter(|l| l.credits > 0) {
        moved += 1;
        s.state.credits_returned(std::mem::take(&mut l.credits));
    }
    if recv.closed {
        return moved;
    }
    while let Some(next) = s.state.next_queued() {
        let (due, staged, zslot) = match next {
            NextSend::Staged { slot, len, seq } => {
                let staging = &s.staging;
                let due = deliver(r, seq, len, |pool, offset| {
                    pool.copy_from(offset, staging, slot * payload, len)
                });
                (due, Some(slot), None)
            }
            NextSend::User { buf, zslot, seq } => {
                let due = deliver(r, seq, buf.len(), |pool, offset| {
                    pool.write(offset, buf.as_slice())
                });
                (due, None, Some(zslot))
            }
        };
        let Some(due) = due else {
            s.state.queued_posted(Posted::Again, &mut sio.out);
            break;
        };
        s.state.queued_posted(Posted::Sent, &mut sio.out);
        // Copied: the staging buffer or the application's memory is free at once.
        if let Some(slot) = staged {
            s.state.staged_sent(slot, true);
        }
        if let Some(zslot) = zslot {
            s.state.user_sent(zslot, true, &mut sio.out);
        }
        if let Some(n) = due {
            s.state.credits_returned(n);
        }
        moved += 1;
    }
    if moved > 0 {
        recv.serve_pending_recvs();
    }
    moved
}
