//! How blocked calls wait: the spin-yield-sleep [`Backoff`], its sleep CQs, [`Deadline`].

use super::common::Result;
use crate::semantics::Status;
use mcapi_ofi::{CompletionQueue, Sleep};
use smallvec::SmallVec;
use std::time::{Duration, Instant};

/// Spin briefly, then sleep in growing steps: two processes blocked on 2 cores must not
/// starve each other. While spinning it reads the clock only every [`CLOCK_EVERY`] calls
/// (a clock read costs as much as an empty CQ poll), so deadlines are checked that often.
/// The sleeps are on the CQs' fd wait objects where the provider has them (a completion
/// ends the sleep at once), else timed.
pub(super) struct Backoff {
    /// How long to poll back to back before yielding (the node's `Config::spin`).
    spin: Duration,
    /// When the first wait happened (set then, so a call that never waits reads no clock).
    start: Option<Instant>,
    spins: u32,
    spinning: bool,
    sleep: Duration,
    /// The CQs to sleep on, asked for once when the first sleep comes.
    sleep_on: Option<SleepCqs>,
    /// When the very first wait happened, and whether [`SLOW_AFTER`] has passed since
    /// (both kept by [`Backoff::restart`], so slow-path checks still come).
    first: Option<Instant>,
    long: bool,
    /// When [`Backoff::slow_check_due`] last said yes (kept by a restart too).
    last_check: Option<Instant>,
}

/// The CQs a blocked call sleeps on: at most what one `ppoll` watches, kept inline so that
/// even a call that sleeps allocates nothing (an empty set sleeps timed).
pub(super) type SleepCqs = SmallVec<[CompletionQueue; CompletionQueue::MAX_SLEEP_CQS]>;

/// Slow-path checks come at most this often.
const CHECK_EVERY: Duration = Duration::from_millis(1);

/// A wait that went back to spinning again and again is slow after this long all the same.
const SLOW_AFTER: Duration = Duration::from_millis(20);

/// After its spin (`Config::spin`), a blocked call yields the core between polls for this long, before sleeping.
const YIELD: Duration = Duration::from_micros(500);
/// Spinning, the clock is read on the first call and every this many calls.
const CLOCK_EVERY: u32 = 16;
/// The first sleep; each next one doubles, up to [`MAX_SLEEP`].
const FIRST_SLEEP: Duration = Duration::from_micros(20);
/// The longest sleep: what is not a completion (a control-plane answer, another thread's
/// progress, a peer's death) is noticed at least this often.
const MAX_SLEEP: Duration = Duration::from_millis(2);
/// The longest sleep during the first [`SHORT_SLEEPS_FOR`] of sleeping. Where the CQ has no
/// fd wait object (tcp;ofi_rxm and sockets here) a sleep is timed, so its length is how late the call
/// sees what arrived meanwhile; with sleeps doubling to [`MAX_SLEEP`] at once, a ping-pong
/// whose round trip once outlasted the spin and yield locked into millisecond round trips
/// (each side then waited long enough to sleep too: docs/performance-log.md).
const SHORT_SLEEP: Duration = Duration::from_micros(50);
/// How long after its spin and yield a wait keeps its sleeps short.
const SHORT_SLEEPS_FOR: Duration = Duration::from_millis(10);

impl Backoff {
    /// A wait that polls back to back for `spin` first.
    pub(super) fn new(spin: Duration) -> Backoff {
        Backoff {
            spin,
            start: None,
            spins: 0,
            spinning: true,
            sleep: FIRST_SLEEP,
            sleep_on: None,
            first: None,
            long: false,
            last_check: None,
        }
    }

    /// Back to the spinning phase: something the caller also drives moved, so more may
    /// follow at once (a deadline is the caller's, unaffected).
    pub(super) fn restart(&mut self) {
        *self = Backoff {
            sleep_on: self.sleep_on.take(),
            first: self.first,
            long: self.long,
            last_check: self.last_check,
            ..Backoff::new(self.spin)
        };
    }

    /// True once the caller has been waiting long enough for slow-path checks.
    fn slow(&self) -> bool {
        self.long || self.sleep >= Duration::from_millis(1)
    }

    /// Whether a slow-path check (is the other node alive?) is due: once the wait is slow,
    /// at most every [`CHECK_EVERY`] (a wait restarted again and again spins on).
    pub(super) fn slow_check_due(&mut self) -> bool {
        if !self.slow() {
            return false;
        }
        let now = Instant::now();
        if self.last_check.is_some_and(|t| now - t < CHECK_EVERY) {
            return false;
        }
        self.last_check = Some(now);
        true
    }

    /// True once the caller has waited [`SLOW_AFTER`] in all (restarts included).
    pub(super) fn waited_long(&self) -> bool {
        self.long
    }

    /// True once the caller sleeps between looks (so extra work per look costs nothing).
    pub(super) fn sleeping(&self) -> bool {
        self.sleep > FIRST_SLEEP
    }

    /// True once the spinning phase is over (the caller has waited at least its spin).
    pub(super) fn spun(&self) -> bool {
        !self.spinning
    }

    /// One wait between two looks at whatever the caller waits for; sleeps timed.
    pub(super) fn wait(&mut self, deadline: Option<Instant>) -> Result<()> {
        self.wait_on(deadline, SleepCqs::new)
    }

    /// One wait; once it sleeps, it sleeps on the CQs `cqs` names (called once) until one
    /// of them may hold a completion.
    pub(super) fn wait_on(
        &mut self,
        deadline: Option<Instant>,
        cqs: impl FnOnce() -> SleepCqs,
    ) -> Result<()> {
        self.wait_on_unless(deadline, cqs, || false)
    }

    /// [`Backoff::wait_on`], where a sleep first asks `pending` (after `fi_trywait`, see
    /// [`CompletionQueue::sleep_unless`]) whether the caller has work not on the CQs.
    pub(super) fn wait_on_unless(
        &mut self,
        deadline: Option<Instant>,
        cqs: impl FnOnce() -> SleepCqs,
        pending: impl FnOnce() -> bool,
    ) -> Result<()> {
        let first = self.spins == 0;
        self.spins = self.spins.wrapping_add(1);
        if self.spinning && !first && !self.spins.is_multiple_of(CLOCK_EVERY) {
            std::hint::spin_loop();
            return Ok(());
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Err(Status::MCAPI_TIMEOUT);
        }
        self.long = self.long || now - *self.first.get_or_insert(now) >= SLOW_AFTER;
        let waited = now - *self.start.get_or_insert(now);
        if waited < self.spin {
            std::hint::spin_loop();
        } else if waited < self.spin.saturating_add(YIELD) {
            self.spinning = false;
            std::thread::yield_now();
        } else {
            self.spinning = false;
            let nap = deadline.map_or(self.sleep, |d| self.sleep.min(d - now));
            let cqs = self.sleep_on.get_or_insert_with(cqs);
            match CompletionQueue::sleep_unless(cqs, nap, pending) {
                Ok(Sleep::Slept) => {}
                // The CQ holds something: the caller reads it next.
                Ok(Sleep::Pending) => std::thread::yield_now(),
                Ok(Sleep::Unsupported) | Err(_) => std::thread::sleep(nap),
            }
            let cap = if waited < self.spin.saturating_add(YIELD + SHORT_SLEEPS_FOR) {
                SHORT_SLEEP
            } else {
                MAX_SLEEP
            };
            self.sleep = (self.sleep * 2).min(cap);
        }
        Ok(())
    }
}

/// A blocking call's deadline, computed from its timeout only when first needed: a call that
/// completes at once reads no clock.
pub(super) struct Deadline {
    timeout: Option<Duration>,
    at: Option<Option<Instant>>,
}

impl Deadline {
    pub(super) fn new(timeout: Option<Duration>) -> Deadline {
        Deadline { timeout, at: None }
    }

    /// The instant the call times out (`None`: never).
    pub(super) fn get(&mut self) -> Option<Instant> {
        let timeout = self.timeout;
        *self
            .at
            .get_or_insert_with(|| timeout.and_then(|t| Instant::now().checked_add(t)))
    }
}

#[cfg(test)]
mod tests {
    use super::Backoff;
    use crate::config::DEFAULT_SPIN;
    use crate::semantics::Status;
    use std::time::{Duration, Instant};

    /// Waits on `b` until `d` has passed.
    fn wait_for(b: &mut Backoff, d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until {
            b.wait(None).expect("no deadline");
        }
    }

    #[test]
    fn the_spin_sets_how_long_a_wait_polls() {
        let mut b = Backoff::new(Duration::ZERO);
        b.wait(None).expect("no deadline");
        assert!(b.spun(), "a zero spin yields at the first wait");

        let mut b = Backoff::new(DEFAULT_SPIN);
        wait_for(&mut b, Duration::from_millis(2));
        assert!(b.spun(), "the default spin is over after 2 ms");

        let mut b = Backoff::new(Duration::from_secs(600));
        wait_for(&mut b, Duration::from_millis(2));
        assert!(
            !b.spun() && !b.sleeping(),
            "a long spin still polls after 2 ms"
        );
        b.restart();
        wait_for(&mut b, Duration::from_millis(2));
        assert!(!b.spun(), "a restart keeps the spin");
    }

    #[test]
    fn restart_takes_a_sleeping_backoff_back_to_spinning() {
        let mut b = Backoff::new(DEFAULT_SPIN);
        let give_up = Instant::now() + Duration::from_secs(10);
        while !b.sleeping() {
            b.wait(None).expect("no deadline");
            assert!(Instant::now() < give_up, "never reached the sleeping phase");
        }
        assert!(b.spun());
        b.restart();
        assert!(!b.spun() && !b.sleeping());
        b.wait(None).expect("no deadline");
        assert!(!b.spun(), "the first wait after a restart spins");
    }

    #[test]
    fn a_wait_restarted_again_and_again_still_gets_slow() {
        let mut b = Backoff::new(DEFAULT_SPIN);
        let give_up = Instant::now() + Duration::from_secs(10);
        while !b.slow_check_due() {
            b.wait(None).expect("no deadline");
            b.restart();
            assert!(Instant::now() < give_up, "never slow");
        }
        assert!(!b.spun(), "slow, yet spinning (restarted)");
        assert!(!b.slow_check_due(), "checks come at most every millisecond");
    }

    #[test]
    fn a_deadline_survives_restarts() {
        let mut b = Backoff::new(DEFAULT_SPIN);
        let deadline = Some(Instant::now() + Duration::from_millis(5));
        let give_up = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Err(s) = b.wait(deadline) {
                break s;
            }
            b.restart();
            assert!(
                Instant::now() < give_up,
                "the deadline never ended the wait"
            );
        };
        assert_eq!(status, Status::MCAPI_TIMEOUT);
    }
}
