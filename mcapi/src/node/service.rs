//! What runs besides the application's calls: the control-plane handler, background
//! progress, opening the fabric, and the blocking-call backoff.

use super::*;
use arrayvec::ArrayVec;

/// Answers other nodes on the control plane.
pub(super) struct ControlHandler(pub(super) Weak<NodeInner>);

impl Handler for ControlHandler {
    fn handle(&self, peer: Option<(u32, u32)>, request: &Frame) -> Frame {
        let Some(node) = self.0.upgrade() else {
            return Frame::Refused(Status::MCAPI_ERR_NODE_NOTINIT.code());
        };
        match request {
            Frame::Hello {
                domain,
                node: n,
                peer,
                incarnation,
                fabric_addr,
            } => {
                let Ok(addr) = node.fab.av.insert(fabric_addr) else {
                    return Frame::Refused(Status::MCAPI_ERR_TRANSMISSION.code());
                };
                let Ok(mut st) = node.live_state() else {
                    return Frame::Refused(Status::MCAPI_ERR_NODE_NOTINIT.code());
                };
                let index = match st.peer_of.get(&(*domain, *n)) {
                    Some(&i) => i,
                    None => match node.add_peer(&mut st, *domain, *n, Some(addr)) {
                        Ok(i) => i,
                        Err(s) => return Frame::Refused(s.code()),
                    },
                };
                node.meet_incarnation(&mut st, index, *incarnation);
                let p = &mut st.peers[index as usize];
                p.addr = addr;
                p.index_at_peer = *peer as u16;
                p.alive = true;
                Frame::Welcome {
                    peer: u32::from(index),
                    incarnation: node.incarnation,
                    fabric_addr: node.fab.ep.address().to_vec(),
                }
            }
            Frame::CreditRequest { port, want, seen } => {
                let Some(from) = peer else {
                    return Frame::Refused(Status::MCAPI_ERR_PARAMETER.code());
                };
                node.answer_credit_request(from, *port, *want, *seen)
            }
            Frame::EndpointDeleted { port } => {
                if let Some(from) = peer {
                    node.forget_remote(from, *port);
                }
                Frame::Value(0)
            }
            Frame::NodeAttribute { attribute } => match node.attributes.get(*attribute) {
                Ok(v) => Frame::Value(v),
                Err(s) => Frame::Refused(s.code()),
            },
            Frame::GetAttribute { port, attribute } => {
                let value = EndpointAttribute::from_number(*attribute).and_then(|a| {
                    node.live_state()
                        .and_then(|st| node.local_attribute(&st, *port, a))
                });
                match value {
                    Ok(v) => Frame::Value(v),
                    Err(s) => Frame::Refused(s.code()),
                }
            }
            Frame::Channel { port, op } => match node.channel_frame(*port, op) {
                Ok(Some(attributes)) => Frame::Connected { attributes },
                Ok(None) => Frame::Value(0),
                Err(s) => Frame::Refused(s.code()),
            },
            Frame::Lookup { port } => match node.live_state() {
                Ok(st) if st.endpoints.contains_key(port) => Frame::Value(1),
                Ok(_) => Frame::Refused(Status::MCAPI_ERR_ENDP_INVALID.code()),
                Err(s) => Frame::Refused(s.code()),
            },
            _ => Frame::Refused(Status::MCAPI_ERR_PARAMETER.code()),
        }
    }

    fn peer_gone(&self, peer: (u32, u32)) {
        let Some(node) = self.0.upgrade() else { return };
        let index = lock(&node.state).peer_of.get(&peer).copied();
        if let Some(i) = index {
            node.peer_died(i);
        }
    }
}

/// Progresses a node while no application thread does: with manual-progress providers
/// (shm, tcp;ofi_rxm) nothing arrives, and shm does not even connect, unless someone reads
/// the CQ. It never waits for the state lock: a thread inside an MCAPI call is already
/// progressing. It polls often while traffic flows and backs off to a few milliseconds
/// when the node is idle.
pub(super) fn background_progress(node: Weak<NodeInner>) {
    let mut pause = Duration::from_micros(100);
    let mut seen_app_progress = u64::MAX;
    let mut seen_channel_use = match node.upgrade() {
        Some(node) => node.channels.touch_memory(),
        None => return,
    };
    loop {
        std::thread::sleep(pause);
        let Some(node) = node.upgrade() else { return };
        node.channels.close_retired();
        // While application threads progress the node themselves, stay out of their way
        // (no lock traffic, no preemption of a busy core).
        let app = node.app_progress.load(Ordering::Relaxed);
        if app != seen_app_progress {
            seen_app_progress = app;
            pause = Duration::from_millis(1);
            // Application calls progress the message endpoint and the channel side they
            // use; the other sides (a receiver nobody waits on yet, whose CQ must be read
            // for the provider to connect and take data) are ours.
            node.channels.progress_idle(&mut seen_channel_use);
            node.flush_completed();
            continue;
        }
        let Ok(mut st) = node.state.try_lock() else {
            pause = Duration::from_millis(1);
            continue;
        };
        if st.finalized {
            return;
        }
        let busy = node.progress_counting(&mut st) > 0;
        drop(st);
        let busy = node.channels.progress_idle(&mut seen_channel_use) > 0 || busy;
        node.flush_completed();
        pause = if busy {
            Duration::from_micros(100)
        } else {
            (pause * 2).min(Duration::from_millis(5))
        };
    }
}

/// Opens the fabric stack with the first provider candidate that works.
pub(super) fn open_fabric(config: &Config, domain_id: u32, node_id: u32) -> Option<Fab> {
    // The local address the network providers bind to: the chosen interface's, else this
    // node's topology entry, else loopback (every node on this host).
    let local = match (&config.tcp_iface, &config.topology) {
        (Some(iface), _) => interface_address(iface)?,
        (None, Some(t)) => t.get(domain_id, node_id)?.host.clone(),
        (None, None) => "127.0.0.1".to_owned(),
    };
    for provider in config.provider_candidates() {
        let mut hints = Hints::new()
            .provider(provider.clone())
            .caps(flags::TAGGED | flags::MSG | flags::MULTI_RECV);
        if provider != "shm" {
            hints = hints.source(Some(&local), None);
        }
        let Ok(info) = Info::first(&hints) else {
            continue;
        };
        let open = || -> std::result::Result<Fab, OfiError> {
            let domain = Domain::open_info(&info)?;
            let (cq, cq_wait) = open_node_cq(&domain, info.provider())?;
            let av = AddressVector::open(&domain, 64)?;
            let ep = Endpoint::open(&domain, &cq, &av, EndpointOptions::default())?;
            Ok(Fab {
                inject_size: info.attributes().inject_size,
                provider: info.provider().to_owned(),
                cq_wait,
                send_pool: MemoryRegion::new(&domain, SEND_SLOTS as usize * MAX_MSG_SIZE)?,
                control_pool: MemoryRegion::new(&domain, 8 * 4096)?,
                ep,
                cq,
                av,
                domain,
            })
        };
        if let Ok(fab) = open() {
            return Some(fab);
        }
    }
    None
}

/// The first IPv4 address of network interface `name` (`MCAPI_TCP_IFACE`).
pub(super) fn interface_address(name: &str) -> Option<String> {
    nix::ifaddrs::getifaddrs()
        .ok()?
        .filter(|i| i.interface_name == name)
        .find_map(|i| i.address?.as_sockaddr_in().map(|a| a.ip().to_string()))
}

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
pub(super) type SleepCqs = ArrayVec<CompletionQueue, { CompletionQueue::MAX_SLEEP_CQS }>;

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

/// Opens a CQ of the node: with an fd wait object where the provider has one to hand out
/// and it costs nothing measurable (sockets, net), so blocked calls sleep until a
/// completion; else without. Not on shm (-FI_ENOSYS), udp;ofi_rxd (no fd exposed) or
/// providers under ofi_rxm: there the wait object made every tcp;ofi_rxm round trip
/// 10..15% slower (A/B, msg-lat and scl-lat), which the faster wake-up of a long wait does
/// not buy back. Returns the wait object used, for the node's later CQs.
pub(super) fn open_node_cq(
    domain: &Domain,
    provider: &str,
) -> std::result::Result<(CompletionQueue, WaitObject), OfiError> {
    if !provider.contains("ofi_rxm") {
        if let Ok(cq) = CompletionQueue::open(domain, 0, WaitObject::Fd) {
            if cq.wait_fd().is_some() {
                return Ok((cq, WaitObject::Fd));
            }
        }
    }
    Ok((
        CompletionQueue::open(domain, 0, WaitObject::None)?,
        WaitObject::None,
    ))
}

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
            self.sleep = (self.sleep * 2).min(MAX_SLEEP);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_SPIN;

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
