//! Driving channel requests: flushing outboxes, and the sides and CQs their waits poll.

use super::handle::{ChannelHandle, Packet};
use super::outbox::{Outbox, ORPHAN_SLOT};
use super::req::ChanReq;
use super::side::Side;
use super::table::SideSet;
use crate::node::common::{lock, Result};
use crate::node::inner::NodeInner;
use crate::node::state::Req;
use crate::node::wait::{Backoff, SleepCqs};
use crate::node::Node;
use crate::semantics::request::RequestHandle;
use crate::semantics::Status;
use mcapi_ofi::CompletionQueue;
use smallvec::SmallVec;

impl NodeInner {
    /// Completes the requests that side operations finished.
    #[inline(always)]
    pub(in crate::node) fn flush_completed(&self) {
        if self.channels.done.any() {
            self.flush_flagged();
        }
    }

    #[inline(never)]
    fn flush_flagged(&self) {
        let table = &self.channels;
        table.done.begin_flush();
        let flagged = table.done.flagged();
        let mut finished = Finished::default();
        for slot in flagged {
            if slot == ORPHAN_SLOT {
                table.done.clear(slot);
                finished.take(&mut lock(&table.orphans));
            } else if let Some(mut g) = table.sides[slot].try_lock() {
                // A side locked elsewhere keeps its flag: its holder flushes it.
                table.done.clear(slot);
                if let Some(side) = g.as_mut() {
                    side.recount(slot, &table.recounts);
                    if let Some(io) = side.io.as_mut() {
                        finished.take(&mut io.out);
                    }
                }
            }
        }
        table.done.end_flush();
        self.complete_finished(finished);
    }

    /// Completes the requests `finished` took out of side outboxes.
    fn complete_finished(&self, finished: Finished) {
        if finished.done.is_empty() {
            return;
        }
        let mut st = lock(&self.state);
        st.delivered.extend(finished.delivered);
        for &(req, status, size) in &finished.done {
            st.requests.complete_if_pending(req, status, size);
        }
    }
}

/// Requests that side operations finished, taken out of the sides' outboxes (under their
/// locks) to be completed under the state lock.
#[derive(Default)]
struct Finished {
    done: SmallVec<[(RequestHandle, Status, usize); 16]>,
    delivered: SmallVec<[(RequestHandle, Packet); 4]>,
}

impl Finished {
    fn take(&mut self, out: &mut Outbox) {
        self.done.extend(out.completed.drain(..));
        self.delivered.extend(out.delivered.drain(..));
    }
}

impl Node {
    /// The channel sides `requests` transfer on (their waits poll those already).
    pub(in crate::node) fn transfer_sides(&self, requests: &[RequestHandle]) -> SideSet {
        let mut set = SideSet::default();
        if let Ok(st) = self.inner.live_state() {
            for &r in requests {
                if let Ok(Req::Chan(ChanReq::Send { handle } | ChanReq::Recv { handle })) =
                    st.requests.get(r)
                {
                    if let Some((slot, ..)) = handle.decode() {
                        set.insert(slot);
                    }
                }
            }
        }
        set
    }

    /// Between a blocked wait's looks: progresses the node's channel sides with transfers
    /// under way, except those in `skip`, and takes `backoff` back to spinning when they
    /// completed something (see [`ChannelTable::progress_others`]).
    ///
    /// [`ChannelTable::progress_others`]: super::table::ChannelTable::progress_others
    pub(in crate::node) fn progress_busy_sides(&self, skip: &SideSet, backoff: &mut Backoff) {
        let seen = self
            .inner
            .channels
            .progress_used(|slot| skip.contains(slot), true);
        if seen > 0 {
            self.inner.flush_completed();
            backoff.restart();
        }
    }

    /// Advances pending channel request `request`, whose payload is `c`.
    pub(in crate::node) fn drive_channel(&self, request: RequestHandle, c: ChanReq) -> Result<()> {
        match c {
            ChanReq::Open { port, handle } => self.advance_open(request, port, handle),
            ChanReq::Close { port, handle } => {
                self.inner.advance_close(request, port, handle).map(drop)
            }
            ChanReq::Send { handle } | ChanReq::Recv { handle } => {
                self.progress_side(handle);
                Ok(())
            }
            ChanReq::Connect => Ok(()),
        }
    }

    /// The CQs of channel side `handle`, to sleep on while waiting for it: its own (a
    /// scalar side's: the hub's), and the hub's where its small packets come.
    pub(super) fn side_cqs(&self, handle: ChannelHandle) -> SmallVec<[CompletionQueue; 2]> {
        let mut cqs = SmallVec::new();
        let Some((slot, generation, ..)) = handle.decode() else {
            return cqs;
        };
        let g = self.inner.channels.sides[slot].lock();
        if let Some(io) = g
            .as_ref()
            .filter(|s| s.generation == generation)
            .and_then(|s| s.io.as_ref())
        {
            cqs.push(io.cq.clone());
            if let Some(h) = &io.packet_hub {
                cqs.push(h.hub.cq().clone());
            }
        }
        cqs
    }

    /// Whether another side's read of the hub left messages for side `handle` (its
    /// sleep would miss them: the hub's signal may have been reset by `fi_trywait`).
    pub(super) fn hub_inbox_holds(&self, handle: ChannelHandle) -> bool {
        let Some((slot, generation, ..)) = handle.decode() else {
            return false;
        };
        self.inner.channels.sides[slot]
            .lock()
            .as_ref()
            .filter(|s| s.generation == generation)
            .is_some_and(Side::hub_inbox_holds)
    }

    /// [`Node::hub_inbox_holds`] for the sides channel requests transfer on (their waits'
    /// sleeps).
    pub(in crate::node) fn hub_inboxes_hold(&self, sides: &SideSet) -> bool {
        sides.iter().any(|slot| {
            self.inner.channels.sides[slot]
                .lock()
                .as_ref()
                .is_some_and(Side::hub_inbox_holds)
        })
    }

    /// The CQs whose completions may finish `requests`: the node's, and those of the
    /// channel sides that channel sends and receives among them wait on.
    /// Empty where the node's CQs have no fd wait object, or when they are more than one
    /// sleep can watch (the sleeps are timed then).
    pub(in crate::node) fn request_cqs(&self, requests: &[RequestHandle]) -> SleepCqs {
        let mut cqs = self.inner.node_sleep_cqs();
        if cqs.is_empty() {
            return cqs;
        }
        // Gathered under the state lock, looked up once it is released.
        // Never more than a sleep can watch, so neither vector leaves its inline storage.
        const MAX: usize = CompletionQueue::MAX_SLEEP_CQS;
        let mut handles = SmallVec::<[ChannelHandle; MAX]>::new();
        if let Ok(st) = self.inner.live_state() {
            for &r in requests {
                if let Ok(Req::Chan(ChanReq::Send { handle } | ChanReq::Recv { handle })) =
                    st.requests.get(r)
                {
                    if !handles.contains(handle) {
                        if handles.len() == MAX {
                            return SleepCqs::new();
                        }
                        handles.push(*handle);
                    }
                }
            }
        }
        for cq in handles.into_iter().flat_map(|h| self.side_cqs(h)) {
            if !cqs.iter().any(|c| c.wait_fd() == cq.wait_fd()) {
                if cqs.len() == MAX {
                    return SleepCqs::new();
                }
                cqs.push(cq);
            }
        }
        cqs
    }

    /// Progresses a side requests wait on; on the slow path, finds out whether the other
    /// side's node died, so that those requests fail instead of waiting forever.
    pub(super) fn progress_side(&self, handle: ChannelHandle) {
        let Some((slot, generation, ..)) = handle.decode() else {
            return;
        };
        // The side's own finished requests are taken while its lock is held: flushed later,
        // they could meet the side locked by another thread (the background thread's
        // progress), and a test right after a send would find it pending.
        let progress = |peer_died: bool, finished: &mut Finished| {
            let mut g = self.inner.channels.sides[slot].lock();
            let side = g.as_mut().filter(|s| s.generation == generation)?;
            if peer_died {
                side.peer_died();
            }
            let progressed = side.progress() > 0;
            self.inner.serve_pending_recvs(side);
            if let Some(io) = side.io.as_mut() {
                finished.take(&mut io.out);
            }
            side.liveness_check_due(progressed)
        };
        let mut finished = Finished::default();
        let check = progress(false, &mut finished);
        self.inner.complete_finished(std::mem::take(&mut finished));
        self.inner.flush_completed();
        if let Some(peer) = check {
            if !self.inner.peer_alive(Some(peer)) {
                progress(true, &mut finished);
                self.inner.complete_finished(finished);
                self.inner.flush_completed();
            }
        }
    }
}
