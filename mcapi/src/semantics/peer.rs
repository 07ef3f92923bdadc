//! The life of another node as this node sees it: one state machine per peer.
//!
//! ```text
//!            Met(i)                Lost(i)               grace over
//! Unknown ───────────▶ Alive(i) ───────────▶ Departing(i) ───────────▶ Gone(i)
//!                        ▲  │ Met(j), j ≠ i: Restarted                   │
//!                        │  └──────────────▶ Alive(j)                    │
//!                        └───────────────── Met(j) ◀─────────────────────┘
//! ```
//!
//! A peer's run is named by its *incarnation*, a value each `mcapi_initialize` draws anew
//! and the handshake carries both ways. Every liveness event names the run it is about:
//! the handshake the run it met, the end of a control connection the run that connection
//! talked to. So an event about an old run (a dead process's socket closing late, after its
//! successor shook hands) never touches the new one: that is the rule that lets a restarted
//! node replace its predecessor.
//!
//! `Departing` is the grace period after a run is lost: sends to it fail at once, but
//! messages it sent before it went (the fabric and the control connection are different
//! channels) are still taken; only when the grace is over are its credits and sequence
//! numbers reclaimed. The driver feeds events in with the time and carries out the
//! [`PeerEvent`] that comes back.

use std::time::{Duration, Instant};

/// One peer's lifecycle (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerLife {
    /// Known by address only: no handshake yet.
    Unknown,
    /// Its run `incarnation` answered a handshake and has not been lost since.
    Alive {
        /// The run.
        incarnation: u64,
    },
    /// Run `incarnation` was lost; what it sent is still taken until `until`.
    Departing {
        /// The run.
        incarnation: u64,
        /// When the grace is over.
        until: Instant,
    },
    /// Run `incarnation` was lost and its grace is over.
    Gone {
        /// The run.
        incarnation: u64,
    },
}

/// What the driver must do after an input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerEvent {
    /// A new run replaced `old`: forget everything kept for the old run (credits both
    /// ways, sequence numbers, channel sides bound to it, the old control connection).
    Restarted {
        /// The run that is gone.
        old: u64,
    },
    /// The run was lost: sends to it fail from now on; its messages are still taken.
    Departed,
    /// The grace is over: reclaim the credits and sequence state of the lost run.
    Gone,
}

impl PeerLife {
    /// A handshake with run `incarnation` completed (either direction).
    pub fn met(&mut self, incarnation: u64) -> Option<PeerEvent> {
        let known = self.incarnation();
        *self = PeerLife::Alive { incarnation };
        match known {
            Some(old) if old != incarnation => Some(PeerEvent::Restarted { old }),
            _ => None,
        }
    }

    /// A connection to run `incarnation` ended (its process died or finalized), or the
    /// fabric reported it unreachable. Ignored unless it is about the run we know alive.
    pub fn lost(&mut self, incarnation: u64, now: Instant, grace: Duration) -> Option<PeerEvent> {
        match *self {
            PeerLife::Alive { incarnation: i } if i == incarnation => {
                *self = PeerLife::Departing {
                    incarnation,
                    until: now + grace,
                };
                Some(PeerEvent::Departed)
            }
            _ => None,
        }
    }

    /// Time passed: ends a grace that is over.
    pub fn tick(&mut self, now: Instant) -> Option<PeerEvent> {
        match *self {
            PeerLife::Departing { incarnation, until } if now >= until => {
                *self = PeerLife::Gone { incarnation };
                Some(PeerEvent::Gone)
            }
            _ => None,
        }
    }

    /// Whether sends to the peer may go out: its run is known and not lost.
    pub fn is_alive(&self) -> bool {
        matches!(self, PeerLife::Alive { .. })
    }

    /// Whether run `incarnation` is the one alive now (a channel bound to an earlier run
    /// of the same node is dead even though the node runs again).
    pub fn is_alive_as(&self, incarnation: u64) -> bool {
        *self == PeerLife::Alive { incarnation }
    }

    /// Whether a lost run's grace is running (its reclaim is still to come).
    pub fn is_departing(&self) -> bool {
        matches!(self, PeerLife::Departing { .. })
    }

    /// The run last met, if any.
    pub fn incarnation(&self) -> Option<u64> {
        match *self {
            PeerLife::Unknown => None,
            PeerLife::Alive { incarnation }
            | PeerLife::Departing { incarnation, .. }
            | PeerLife::Gone { incarnation } => Some(incarnation),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(2);

    #[test]
    fn a_first_handshake_makes_the_peer_alive_without_forgetting_anything() {
        let mut p = PeerLife::Unknown;
        assert!(!p.is_alive());
        assert_eq!(p.met(7), None);
        assert!(p.is_alive() && p.is_alive_as(7) && !p.is_alive_as(8));
        assert_eq!(p.met(7), None, "a second handshake with the same run");
    }

    #[test]
    fn a_lost_run_departs_then_is_gone_after_the_grace() {
        let t0 = Instant::now();
        let mut p = PeerLife::Alive { incarnation: 7 };
        assert_eq!(p.lost(7, t0, GRACE), Some(PeerEvent::Departed));
        assert!(!p.is_alive() && p.is_departing());
        assert_eq!(p.lost(7, t0, GRACE), None, "lost twice is one departure");
        assert_eq!(p.tick(t0 + GRACE / 2), None);
        assert_eq!(p.tick(t0 + GRACE), Some(PeerEvent::Gone));
        assert_eq!(p.tick(t0 + GRACE * 2), None);
        assert_eq!(p, PeerLife::Gone { incarnation: 7 });
    }

    #[test]
    fn a_new_run_replaces_the_old_one_in_every_state() {
        let t0 = Instant::now();
        for mut p in [
            PeerLife::Alive { incarnation: 7 },
            PeerLife::Departing {
                incarnation: 7,
                until: t0 + GRACE,
            },
            PeerLife::Gone { incarnation: 7 },
        ] {
            assert_eq!(p.met(9), Some(PeerEvent::Restarted { old: 7 }), "{p:?}");
            assert!(p.is_alive_as(9));
            // The grace of the old run no longer runs.
            assert_eq!(p.tick(t0 + GRACE * 2), None);
        }
    }

    #[test]
    fn the_old_runs_late_end_of_connection_never_marks_the_new_run_lost() {
        let t0 = Instant::now();
        let mut p = PeerLife::Alive { incarnation: 7 };
        assert_eq!(p.met(9), Some(PeerEvent::Restarted { old: 7 }));
        // The dead process's socket closes after its successor's handshake.
        assert_eq!(p.lost(7, t0, GRACE), None);
        assert!(p.is_alive_as(9));
        assert_eq!(p.lost(9, t0, GRACE), Some(PeerEvent::Departed));
    }

    #[test]
    fn the_same_run_met_again_during_its_grace_is_alive_without_a_restart() {
        let t0 = Instant::now();
        let mut p = PeerLife::Alive { incarnation: 7 };
        p.lost(7, t0, GRACE);
        assert_eq!(p.met(7), None);
        assert!(p.is_alive_as(7));
        assert_eq!(p.tick(t0 + GRACE), None, "no reclaim of a live run");
    }

    #[test]
    fn an_unknown_peer_ignores_losses() {
        let mut p = PeerLife::Unknown;
        assert_eq!(p.lost(1, Instant::now(), GRACE), None);
        assert_eq!(p.incarnation(), None);
    }

    /// Restarts in a row never exhaust anything here and always end alive as the last run,
    /// whatever order the old runs' ends and the new runs' handshakes arrive in.
    #[test]
    fn restarts_in_a_row_with_late_ends_interleaved() {
        let t0 = Instant::now();
        let mut p = PeerLife::Unknown;
        let mut restarts = 0;
        for run in 1..=50u64 {
            if p.met(run) == Some(PeerEvent::Restarted { old: run - 1 }) {
                restarts += 1;
            }
            // The previous run's end arrives late half of the time.
            if run % 2 == 0 {
                assert_eq!(p.lost(run - 1, t0, GRACE), None);
            }
            assert!(p.is_alive_as(run));
            if run % 3 == 0 {
                assert_eq!(p.lost(run, t0, GRACE), Some(PeerEvent::Departed));
                p.tick(t0 + GRACE);
            }
        }
        assert_eq!(restarts, 49);
    }
}
