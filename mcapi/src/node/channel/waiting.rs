//! How a blocked channel call waits: poll bursts over busy sides, backoff, timeout and liveness.

use super::handle::ChannelHandle;
use super::table::{ChannelTable, SideSet};
use crate::node::common::Result;
use crate::node::wait::Backoff;
use crate::node::Node;
use std::time::{Duration, Instant};

/// CQ polls a blocked channel call makes under the side lock before it backs off once.
pub(super) const POLL_BURST: usize = 32;

/// The node's other sides with transfers under way, found at the start of a blocked call's
/// burst and polled after each poll of the call's own side: on tcp;ofi_rxm a sender's data
/// moves only while its side's CQ is read, and the application may be blocked on another
/// side (perftest's zero-copy sender waits for the receiver's acknowledgement). Polled
/// once per burst instead, the pattern alone lost a fifth of its 256 KiB bandwidth
/// (`channel_pattern`, `ACK_POLLS=32`).
pub(super) struct BusyBurst {
    /// The call's own side; `None` once the others were looked for (decoded only then: on
    /// providers that poll them once per burst, a receive spends nothing on this).
    own: Option<ChannelHandle>,
    sides: SideSet,
    /// Completions seen on them (waiting in their outboxes for the caller's flush).
    seen: usize,
}

impl BusyBurst {
    pub(super) fn new(own: ChannelHandle) -> BusyBurst {
        BusyBurst {
            own: Some(own),
            sides: SideSet::default(),
            seen: 0,
        }
    }

    /// After a poll of the own side that found nothing: the busy sides' turn (looked for
    /// at the first, so a call served at once spends nothing on them).
    pub(super) fn poll(&mut self, table: &ChannelTable) {
        if !table.busy_every_poll {
            return;
        }
        if let Some((own, ..)) = self.own.take().and_then(ChannelHandle::decode) {
            self.sides = table.busy_sides(own);
        }
        if !self.sides.is_empty() {
            self.seen += table.progress_set(&self.sides);
        }
    }
}

/// The spin-then-sleep wait of a blocking channel call, with the endpoint's timeout and the
/// slow-path liveness check of the other side's node.
pub(super) struct ChannelWait {
    backoff: Backoff,
    pub(super) deadline: Option<Instant>,
    /// Backoffs so far: while spinning, the node's other sides without transfers under way
    /// are progressed on every [`OTHERS_EVERY`]th only, so many open sides do not slow the
    /// poll of this one.
    backoffs: u32,
}

/// See [`ChannelWait::backoffs`].
const OTHERS_EVERY: u32 = 8;

impl ChannelWait {
    pub(super) fn new(timeout: Option<Duration>, spin: Duration) -> ChannelWait {
        ChannelWait {
            backoff: Backoff::new(spin),
            deadline: timeout.and_then(|t| Instant::now().checked_add(t)),
            backoffs: 0,
        }
    }
}

impl Node {
    /// Waits between attempts of a blocking channel call; checks the timeout and, on the
    /// slow path, that the other side's node is alive.
    pub(super) fn channel_backoff(
        &self,
        handle: ChannelHandle,
        wait: &mut ChannelWait,
    ) -> Result<()> {
        wait.backoffs = wait.backoffs.wrapping_add(1);
        // Sides with transfers under way every time; all of them once sleeping, or every
        // OTHERS_EVERY: a sender of this node (this thread's own, maybe) may be waiting for
        // a credit return or a connection only its side's CQ reads carry on.
        if let Some((slot, ..)) = handle.decode() {
            let all = wait.backoff.sleeping() || wait.backoffs % OTHERS_EVERY == 1;
            let seen = self.inner.channels.progress_others(slot, !all);
            if seen > 0 {
                // Transfers are moving here: keep polling rather than sleep.
                wait.backoff.restart();
            }
            if all || seen > 0 {
                self.inner.flush_completed();
            }
        }
        wait.backoff.wait_on_unless(
            wait.deadline,
            || self.side_cqs(handle).into_iter().collect(),
            || self.hub_inbox_holds(handle),
        )?;
        if wait.backoff.slow_check_due() {
            if let Some((slot, generation, ..)) = handle.decode() {
                let peer = self.inner.channels.sides[slot]
                    .lock()
                    .as_ref()
                    .filter(|s| s.generation == generation)
                    .and_then(|s| s.peer);
                if peer.is_some() && !self.inner.peer_alive(peer) {
                    let mut g = self.inner.channels.sides[slot].lock();
                    if let Some(side) = g.as_mut().filter(|s| s.generation == generation) {
                        side.peer_died();
                    }
                }
            }
        }
        Ok(())
    }

    /// After a blocked call's burst (its own side unlocked): completes the requests the
    /// busy sides' polls finished, and keeps the call spinning if there were any.
    pub(super) fn end_burst(&self, burst: &BusyBurst, wait: Option<&mut ChannelWait>) {
        if burst.seen > 0 {
            self.inner.flush_completed();
            if let Some(w) = wait {
                w.backoff.restart();
            }
        }
    }
}
