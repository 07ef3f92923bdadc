//! Unit tests of the credit pool and window, and a deterministic simulation
//! of senders, a receiver and delaying wires (in the spirit of quinn-proto's
//! `Pair::drive`).

use super::super::XorShift;
use super::*;
use std::collections::VecDeque;
use Status::*;

const A: SenderId = SenderId(10);
const B: SenderId = SenderId(20);
const C: SenderId = SenderId(30);

fn drain(p: &mut CreditPool) -> Vec<Control> {
    std::iter::from_fn(|| p.poll()).collect()
}

fn grant(to: SenderId, credits: u32) -> Control {
    Control::Grant(Grant { to, credits })
}

fn recall(from: SenderId, credits: u32) -> Control {
    Control::Recall { from, credits }
}

/// Whether the controls polled now grant `s` credits.
fn granted_to(p: &mut CreditPool, s: SenderId) -> bool {
    drain(p)
        .iter()
        .any(|c| matches!(c, Control::Grant(g) if g.to == s))
}

/// A fresh request: the sender has seen every grant polled so far.
fn ask(p: &mut CreditPool, s: SenderId, want: u32) -> Result<(), Status> {
    let seen = p.slot(s).map_or(0, |i| p.senders[i].sent);
    p.request(s, want, seen)
}

/// The pool's internal invariants.
fn check(p: &CreditPool) {
    let held: u32 = p.senders.iter().map(Sender::held).sum();
    assert_eq!(p.free + held, p.owned, "credits created or lost");
    assert!(p.owned + p.local <= p.capacity);
    assert!(p.outstanding() <= p.capacity);
    assert!(p.queued <= p.capacity);
    assert_eq!(p.queued, p.senders.iter().map(|s| s.queued).sum::<u32>());
    if !p.waiters.is_empty() {
        assert_eq!(p.free, 0, "free credits while someone waits");
        assert!(p.senders.iter().all(|s| s.owed == 0 && !s.asked));
    }
    for (i, s) in p.senders.iter().enumerate() {
        let in_ring = p.waiters.iter().filter(|&&w| w as usize == i).count();
        assert_eq!(in_ring, usize::from(s.waiting), "waiter ring out of sync");
        assert!(!s.waiting || s.want > 0);
        assert!(!s.asked || s.owed == 0, "a deferred sender with an earmark");
    }
}

#[test]
fn window_operations() {
    enum Op {
        Take(bool),
        Add(u32),
        Sent(u32),
        Recall(u32, u32),
        Reset,
    }
    use Op::*;
    // (operation, then available, then needs_request)
    let table = [
        (Take(false), 0, true),
        (Sent(0), 0, false),
        (Add(0), 0, false),
        (Add(3), 3, false),
        (Take(true), 2, false),
        (Recall(1, 1), 1, false),
        (Take(true), 0, true),
        (Take(false), 0, true),
        (Sent(3), 0, false),
        (Recall(4, 0), 0, false),
        (Add(5), 5, false),
        (Recall(9, 5), 0, true),
        (Add(2), 2, false),
        (Sent(10), 2, false),
        (Reset, 0, true),
    ];
    let mut w = CreditWindow::new();
    assert_eq!(w, CreditWindow::default());
    for (step, (op, avail, needs)) in table.into_iter().enumerate() {
        match op {
            Take(ok) => assert_eq!(w.try_take(), ok, "step {step}"),
            Add(n) => w.add(n),
            Sent(stamp) => assert_eq!(w.request_sent(), stamp, "step {step}"),
            Recall(n, back) => assert_eq!(w.recall(n), back, "step {step}"),
            Reset => w.reset(),
        }
        assert_eq!(
            (w.available(), w.needs_request()),
            (avail, needs),
            "step {step}"
        );
    }
}

#[test]
fn requests_served_from_the_remainder() {
    // (capacity, requests in order, grants expected)
    type Case<'a> = (u32, &'a [(SenderId, u32)], &'a [Control]);
    let table: &[Case<'_>] = &[
        (8, &[(A, 100)], &[grant(A, 8)]),
        (8, &[(A, 0)], &[grant(A, 1)]),
        (8, &[(A, 3), (B, 100)], &[grant(A, 3), grant(B, 5)]),
        (
            8,
            &[(A, 3), (B, 2), (C, 2)],
            &[grant(A, 3), grant(B, 2), grant(C, 2)],
        ),
        (1, &[(A, 1)], &[grant(A, 1)]),
    ];
    for (n, reqs, want) in table {
        let mut p = CreditPool::new(*n, 4);
        let mut got = Vec::new();
        for &(s, w) in reqs.iter() {
            ask(&mut p, s, w).unwrap();
            got.extend(drain(&mut p));
            check(&p);
        }
        assert_eq!(got, *want, "capacity {n}, requests {reqs:?}");
        assert_eq!(p.free_buffers(), *n);
        assert_eq!(p.waiters.len(), 0);
    }
}

/// A greedy or hostile peer asking for 2^20 or `u32::MAX` credits, again and again, under
/// many sender ids, never gets more than the endpoint's buffers in all, and senders beyond
/// the table's size are refused.
#[test]
fn huge_requests_never_grant_more_than_the_buffers() {
    let (n, max) = (16, 4);
    let mut p = CreditPool::new(n, max);
    let mut granted = 0u64;
    for round in 0..3 {
        for k in 0..max as u32 {
            let want = if round == 0 { 1 << 20 } else { u32::MAX };
            // A fresh stamp and a stale one: neither turns into extra credits.
            ask(&mut p, SenderId(k), want).unwrap();
            p.request(SenderId(k), want, 0).unwrap();
            for c in drain(&mut p) {
                if let Control::Grant(g) = c {
                    granted += u64::from(g.credits);
                }
            }
            check(&p);
            assert!(p.outstanding() <= n);
        }
    }
    assert!(granted <= u64::from(n), "granted {granted} of {n} buffers");
    assert_eq!(ask(&mut p, SenderId(99), 1 << 20), Err(MCAPI_ERR_MEM_LIMIT));
}

#[test]
fn returns_are_batched_to_half_of_what_the_sender_holds() {
    let mut p = CreditPool::new(8, 2);
    ask(&mut p, A, 100).unwrap();
    assert_eq!(drain(&mut p), [grant(A, 8)]);
    (0..8).for_each(|_| p.arrived(A).unwrap());
    assert_eq!(p.free_buffers(), 0);
    // Consumed one by one: a grant of 4 after every 4th.
    let mut grants = Vec::new();
    for k in 1..=8 {
        p.consumed(A).unwrap();
        check(&p);
        for c in drain(&mut p) {
            grants.push((k, c));
        }
    }
    assert_eq!(grants, [(4, grant(A, 4)), (8, grant(A, 4))]);
    // A small holder gets each credit back at once.
    let mut p = CreditPool::new(8, 2);
    ask(&mut p, A, 1).unwrap();
    drain(&mut p);
    p.arrived(A).unwrap();
    p.consumed(A).unwrap();
    assert_eq!(drain(&mut p), [grant(A, 1)]);
}

#[test]
fn dry_sender_holding_its_share_is_answered_by_its_first_consumed_message() {
    let mut p = CreditPool::new(4, 2);
    ask(&mut p, A, 4).unwrap();
    drain(&mut p);
    (0..4).for_each(|_| p.arrived(A).unwrap());
    ask(&mut p, A, 10).unwrap(); // dry
    assert_eq!(drain(&mut p), []);
    assert_eq!(p.waiters.len(), 0);
    // Deferred, not forgotten: the first buffer freed goes to it at once (the receiver
    // may take nothing more until the blocked send is through).
    p.consumed(A).unwrap();
    assert_eq!(drain(&mut p), [grant(A, 1)]);
    check(&p);
    // Then batches again: held 4 (1 granted, 2 queued, 1 earmarked).
    p.consumed(A).unwrap();
    assert_eq!(drain(&mut p), []);
    p.consumed(A).unwrap();
    assert_eq!(drain(&mut p), [grant(A, 2)]);
    check(&p);
}

#[test]
fn request_crossing_a_grant_is_ignored() {
    let mut p = CreditPool::new(4, 2);
    let mut w = CreditWindow::new();
    let stamp = w.request_sent();
    p.request(A, 2, stamp).unwrap();
    assert_eq!(drain(&mut p), [grant(A, 2)]);
    w.add(2);
    assert!(w.try_take() && w.try_take());
    p.arrived(A).unwrap();
    p.arrived(A).unwrap();
    // A is dry and asks; meanwhile its batch is granted.
    let stamp = w.request_sent();
    p.consumed(A).unwrap();
    assert_eq!(drain(&mut p), [grant(A, 1)]);
    p.request(A, 9, stamp).unwrap(); // stale: the grant answers it
    assert_eq!((drain(&mut p), p.waiters.len()), (vec![], 0));
    w.add(1);
    assert!(!w.needs_request());
    // A stamp matching every grant polled so far is served.
    p.request(A, 9, w.request_sent()).unwrap();
    assert_eq!(drain(&mut p), [grant(A, 2)]);
    check(&p);
}

#[test]
fn new_sender_waits_and_recalls_the_excess_of_an_idle_one() {
    let mut p = CreditPool::new(4, 2);
    ask(&mut p, A, 4).unwrap();
    assert_eq!(drain(&mut p), [grant(A, 4)]);
    (0..4).for_each(|_| p.arrived(A).unwrap());
    // A's batches come back to it, unasked; then it stays idle.
    let mut got = Vec::new();
    for _ in 0..4 {
        p.consumed(A).unwrap();
        got.extend(drain(&mut p));
    }
    assert_eq!(got, [grant(A, 2), grant(A, 2)]);
    ask(&mut p, B, 4).unwrap();
    check(&p);
    assert_eq!(p.waiters.len(), 1);
    assert_eq!(drain(&mut p), [recall(A, 2)]);
    p.returned(A, 2).unwrap();
    check(&p);
    assert_eq!(drain(&mut p), [grant(B, 2)]);
    assert_eq!(p.waiters.len(), 0);
    assert_eq!(p.outstanding(), 4);
}

#[test]
fn busy_holder_is_drained_towards_the_share_of_a_waiter() {
    let mut p = CreditPool::new(8, 2);
    ask(&mut p, A, 8).unwrap();
    drain(&mut p);
    (0..8).for_each(|_| p.arrived(A).unwrap());
    ask(&mut p, B, 8).unwrap(); // share 4; A has nothing unspent to recall
    assert_eq!(drain(&mut p), []);
    let mut got = Vec::new();
    for _ in 0..8 {
        p.consumed(A).unwrap();
        check(&p);
        got.extend(drain(&mut p));
    }
    // B gets the first 4 credits, up to its share; then A gets batches of
    // half of what it holds.
    let mut want = vec![grant(B, 1); 4];
    want.extend([grant(A, 2), grant(A, 2)]);
    assert_eq!(got, want);
}

#[test]
fn single_credit_rotates_round_robin() {
    let mut p = CreditPool::new(1, 3);
    ask(&mut p, A, 5).unwrap();
    assert_eq!(drain(&mut p), [grant(A, 1)]);
    p.arrived(A).unwrap();
    ask(&mut p, B, 5).unwrap();
    ask(&mut p, C, 5).unwrap();
    ask(&mut p, A, 5).unwrap(); // dry again, behind B and C
    assert_eq!(drain(&mut p), []);
    assert_eq!(p.waiters.len(), 3);
    let mut order = Vec::new();
    let mut last = A;
    for _ in 0..6 {
        p.consumed(last).unwrap();
        check(&p);
        let [Control::Grant(g)] = drain(&mut p)[..] else {
            panic!("one grant expected");
        };
        assert_eq!(g.credits, 1);
        order.push(g.to);
        p.arrived(g.to).unwrap();
        ask(&mut p, g.to, 5).unwrap(); // dry again: back in the ring
        last = g.to;
    }
    assert_eq!(order, [B, C, A, B, C, A]);
}

#[test]
fn errors_change_nothing() {
    let mut p = CreditPool::new(2, 2);
    assert_eq!(p.arrived(A), Err(MCAPI_ERR_TRANSMISSION)); // unknown
    assert_eq!(p.consumed(A), Err(MCAPI_ERR_PARAMETER));
    assert_eq!(p.returned(A, 1), Err(MCAPI_ERR_TRANSMISSION));
    ask(&mut p, A, 1).unwrap();
    assert_eq!(p.arrived(A), Err(MCAPI_ERR_TRANSMISSION)); // grant not sent yet
    drain(&mut p);
    assert_eq!(p.returned(A, 2), Err(MCAPI_ERR_TRANSMISSION));
    p.arrived(A).unwrap();
    assert_eq!(p.arrived(A), Err(MCAPI_ERR_TRANSMISSION)); // no credit left
    assert_eq!(p.consumed_many(A, 2), Err(MCAPI_ERR_PARAMETER));
    assert_eq!(p.returned(A, 1), Err(MCAPI_ERR_TRANSMISSION));
    check(&p);
    assert_eq!((p.outstanding(), p.free_buffers()), (1, 1));
    // Sender table full, until one is gone.
    ask(&mut p, B, 1).unwrap();
    assert_eq!(ask(&mut p, C, 1), Err(MCAPI_ERR_MEM_LIMIT));
    drain(&mut p);
    assert_eq!(p.sender_gone(B), 0);
    assert_eq!(p.sender_gone(B), 0); // unknown now
    ask(&mut p, C, 1).unwrap();
    check(&p);
}

#[test]
fn capacity_changes_only_while_no_credit_is_out() {
    let mut p = CreditPool::new(4, 2);
    assert_eq!(p.set_capacity(0), Err(MCAPI_ERR_ATTR_VALUE));
    assert_eq!(p.set_capacity(6), Ok(()));
    assert_eq!((p.capacity(), p.free_buffers()), (6, 6));
    ask(&mut p, A, 2).unwrap();
    assert_eq!(drain(&mut p), [grant(A, 2)]);
    assert_eq!(p.set_capacity(3), Err(MCAPI_ERR_ATTR_READONLY));
    p.arrived(A).unwrap();
    p.consumed(A).unwrap(); // earmarked, held 2: batch of 1 goes back
    assert_eq!(drain(&mut p), [grant(A, 1)]);
    assert_eq!(p.set_capacity(3), Err(MCAPI_ERR_ATTR_READONLY));
    p.returned(A, 2).unwrap();
    assert_eq!(p.set_capacity(3), Ok(()));
    check(&p);
    ask(&mut p, A, 5).unwrap();
    assert_eq!(drain(&mut p), [grant(A, 3)]);
}

#[test]
fn gone_sender_credits_let_the_other_use_the_full_capacity() {
    let mut p = CreditPool::new(4, 2);
    ask(&mut p, A, 4).unwrap();
    drain(&mut p);
    p.arrived(A).unwrap();
    p.arrived(A).unwrap();
    ask(&mut p, B, 4).unwrap();
    // A may never spend what it asked for: its excess over the share comes back.
    assert_eq!(drain(&mut p), [recall(A, 2)]);
    // A dies instead: its 2 unspent or in-flight credits go to B.
    assert_eq!(p.sender_gone(A), 2);
    check(&p);
    assert_eq!(drain(&mut p), [grant(B, 2)]);
    assert_eq!(p.arrived(A), Err(MCAPI_ERR_TRANSMISSION));
    assert_eq!(p.free_buffers(), 2);
    p.consumed_many(A, 2).unwrap(); // its queued messages discarded
    assert!(!p.index.contains_key(&A));
    assert_eq!(p.free_buffers(), 4);
    ask(&mut p, B, 4).unwrap();
    assert_eq!(drain(&mut p), [grant(B, 2)]);
    assert_eq!(p.outstanding(), 4);
    (0..4).for_each(|_| p.arrived(B).unwrap());
    assert_eq!(p.free_buffers(), 0);
    check(&p);
}

#[test]
fn gone_waiter_leaves_the_ring() {
    let mut p = CreditPool::new(1, 3);
    ask(&mut p, A, 1).unwrap();
    drain(&mut p);
    p.arrived(A).unwrap();
    ask(&mut p, B, 1).unwrap();
    ask(&mut p, C, 1).unwrap();
    assert_eq!(p.sender_gone(B), 0);
    check(&p);
    p.consumed(A).unwrap();
    assert_eq!(drain(&mut p), [grant(C, 1)]);
    // B comes back as a new sender.
    ask(&mut p, B, 1).unwrap();
    assert_eq!(p.waiters.len(), 1);
    check(&p);
}

// ---- Simulation ----

/// A FIFO link that delivers each item at or after its due step.
struct Wire<T>(VecDeque<(u64, T)>);

impl<T> Wire<T> {
    fn send(&mut self, due: u64, item: T) {
        let due = self.0.back().map_or(due, |&(last, _)| due.max(last));
        self.0.push_back((due, item));
    }

    fn recv(&mut self, now: u64) -> Option<T> {
        (self.0.front()?.0 <= now).then(|| self.0.pop_front().unwrap().1)
    }
}

#[derive(Clone, Copy)]
enum Up {
    Request(u32, u32),
    Return(u32),
}

#[derive(Clone, Copy)]
enum Down {
    Grant(u32),
    Recall(u32),
}

struct Peer {
    window: CreditWindow,
    sent: u32,
    total: u32,
    alive: bool,
    last_sent: u64,
    /// After `pause_after` messages the sender goes idle (holding what it
    /// has) until step `resume_at`, as a program between two phases.
    pause_after: u32,
    resume_at: u64,
    data: Wire<u32>,
    up: Wire<Up>,
    down: Wire<Down>,
}

struct Sim {
    rng: XorShift,
    now: u64,
    pool: CreditPool,
    peers: Vec<Peer>,
    rx: VecDeque<(usize, u32)>,
    next_rx: Vec<u32>,
    consume: bool,
    stall_until: u64,
    last_progress: u64,
    max_queued: usize,
    max_starve: u64,
    p_send: u64,
    data_delay: u64,
    ctrl_delay: u64,
    /// Senders ask for more than they will send, as the driver does.
    over_ask: bool,
}

/// Steps without any send or receive before the simulation counts as stuck.
const STUCK: u64 = 3_000;
/// Steps a sender with messages left may go without sending.
const STARVE: u64 = 4_000;

fn id(k: usize) -> SenderId {
    SenderId(100 + k as u32)
}

impl Sim {
    fn new(seed: u64, senders: usize, capacity: u32, total: u32) -> Sim {
        let mut rng = XorShift(seed | 1);
        let mut r = |n: u64| rng.next_u64() % n;
        let (p_send, data_delay, ctrl_delay, over_ask) = (10 + r(81), r(21), r(41), r(2) == 1);
        Sim {
            rng,
            now: 0,
            pool: CreditPool::new(capacity, senders),
            peers: (0..senders)
                .map(|_| Peer {
                    window: CreditWindow::new(),
                    sent: 0,
                    total,
                    alive: true,
                    last_sent: 0,
                    pause_after: 0,
                    resume_at: 0,
                    data: Wire(VecDeque::new()),
                    up: Wire(VecDeque::new()),
                    down: Wire(VecDeque::new()),
                })
                .collect(),
            rx: VecDeque::new(),
            next_rx: vec![0; senders],
            consume: true,
            stall_until: 0,
            last_progress: 0,
            max_queued: 0,
            max_starve: 0,
            p_send,
            data_delay,
            ctrl_delay,
            over_ask,
        }
    }

    fn rand(&mut self, n: u64) -> u64 {
        self.rng.next_u64() % n
    }

    fn step(&mut self) {
        self.now += 1;
        let now = self.now;
        for k in 0..self.peers.len() {
            if !self.peers[k].alive {
                continue;
            }
            while let Some(d) = self.peers[k].down.recv(now) {
                let w = &mut self.peers[k].window;
                match d {
                    Down::Grant(n) => w.add(n),
                    Down::Recall(n) => match w.recall(n) {
                        0 => {}
                        back => {
                            let due = now + self.rand(self.ctrl_delay + 1);
                            self.peers[k].up.send(due, Up::Return(back));
                        }
                    },
                }
            }
            while let Some(u) = self.peers[k].up.recv(now) {
                match u {
                    Up::Request(want, seen) => self.pool.request(id(k), want, seen).unwrap(),
                    Up::Return(n) => self.pool.returned(id(k), n).unwrap(),
                }
            }
            while let Some(seq) = self.peers[k].data.recv(now) {
                self.pool.arrived(id(k)).expect("message without credit");
                self.rx.push_back((k, seq));
            }
            let send = self.rand(100) < self.p_send;
            let (dd, cd) = (
                self.rand(self.data_delay + 1),
                self.rand(self.ctrl_delay + 1),
            );
            let p = &mut self.peers[k];
            let paused = p.sent == p.pause_after && now < p.resume_at;
            if paused {
                p.last_sent = now;
            }
            if send && p.sent < p.total && !paused {
                if p.window.try_take() {
                    p.data.send(now + dd, p.sent);
                    p.sent += 1;
                    (p.last_sent, self.last_progress) = (now, now);
                } else if p.window.needs_request() {
                    let seen = p.window.request_sent();
                    // Drivers ask for a batch: messages they may never send.
                    let want = if self.over_ask { 64 } else { p.total - p.sent };
                    p.up.send(now + cd, Up::Request(want, seen));
                }
            }
        }
        if self.consume && now >= self.stall_until {
            if self.rand(100) < 2 {
                self.stall_until = now + self.rand(100);
            } else if let Some((k, seq)) = self.rx.pop_front() {
                assert_eq!(seq, self.next_rx[k], "sender {k}: lost or reordered");
                self.next_rx[k] += 1;
                self.pool.consumed(id(k)).unwrap();
                self.last_progress = now;
            }
        }
        self.flush();
        self.check();
    }

    fn flush(&mut self) {
        while let Some(c) = self.pool.poll() {
            let (s, msg) = match c {
                Control::Grant(g) => (g.to, Down::Grant(g.credits)),
                Control::Recall { from, credits } => (from, Down::Recall(credits)),
            };
            let k = (s.0 - 100) as usize;
            let due = self.now + self.rand(self.ctrl_delay + 1);
            assert!(self.peers[k].alive, "control for a gone sender");
            self.peers[k].down.send(due, msg);
        }
    }

    fn check(&mut self) {
        let pool = &self.pool;
        check(pool);
        assert_eq!(self.rx.len(), pool.queued as usize);
        assert_eq!(
            pool.free_buffers() as usize,
            pool.capacity as usize - self.rx.len()
        );
        self.max_queued = self.max_queued.max(self.rx.len());
        for (k, p) in self.peers.iter().enumerate().filter(|(_, p)| p.alive) {
            // Every credit the pool counts as usable is somewhere.
            let grants: u32 = p
                .down
                .0
                .iter()
                .map(|&(_, d)| if let Down::Grant(n) = d { n } else { 0 })
                .sum();
            let returns: u32 =
                p.up.0
                    .iter()
                    .map(|&(_, u)| if let Up::Return(n) = u { n } else { 0 })
                    .sum();
            let usable = pool.slot(id(k)).map_or(0, |i| pool.senders[i].usable);
            assert_eq!(
                usable,
                p.window.available() + p.data.0.len() as u32 + grants + returns,
                "sender {k}"
            );
            if p.sent < p.total {
                let starved = self.now - p.last_sent;
                self.max_starve = self.max_starve.max(starved);
                assert!(starved <= STARVE, "sender {k} starved for {starved} steps");
            }
        }
    }

    fn done(&self) -> bool {
        self.peers
            .iter()
            .zip(&self.next_rx)
            .all(|(p, &n)| !p.alive || n == p.total)
    }

    /// Steps until every live sender's messages are received; `Err` if
    /// progress stops for [`STUCK`] steps or `max_steps` pass.
    fn drive_bounded(&mut self, max_steps: u64) -> Result<u64, String> {
        for _ in 0..max_steps {
            if self.done() {
                return Ok(self.now);
            }
            self.step();
            if self.now - self.last_progress > STUCK && !self.done() {
                let peers: Vec<_> = self
                    .peers
                    .iter()
                    .map(|p| {
                        (
                            p.window,
                            p.sent,
                            p.total,
                            p.alive,
                            p.pause_after,
                            p.resume_at,
                        )
                    })
                    .collect();
                return Err(format!(
                    "stuck at step {}: {:?} {peers:?}",
                    self.now, self.pool
                ));
            }
        }
        Err(format!("not done after {max_steps} steps"))
    }

    /// Sender `k` dies: whatever it had on the wires is lost, its queued
    /// messages are discarded.
    fn kill(&mut self, k: usize) {
        let p = &mut self.peers[k];
        p.alive = false;
        (p.data.0, p.up.0, p.down.0) = Default::default();
        let queued = self.pool.sender_gone(id(k));
        let before = self.rx.len();
        self.rx.retain(|&(j, _)| j != k);
        assert_eq!((before - self.rx.len()) as u32, queued);
        if queued > 0 {
            self.pool.consumed_many(id(k), queued).unwrap();
        }
        self.flush();
        self.check();
    }
}

#[test]
fn simulation_delivers_everything_in_order_without_starvation() {
    let mut worst = 0;
    for seed in 1..=300u64 {
        let mut r = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let senders = 1 + (r.next_u64() % 9) as usize;
        // Small pools, and the default 64 shared by senders that stop early.
        let capacity = [1, 2, 3, 5, 8, 64][(r.next_u64() % 6) as usize];
        let total = 20 + (r.next_u64() % 60) as u32;
        let mut sim = Sim::new(r.next_u64(), senders, capacity, total);
        // Uneven loads: early finishers sit on credits until recalled; some
        // senders pause midway and come back when the others are idle.
        for p in &mut sim.peers {
            p.total = 1 + (r.next_u64() % total as u64) as u32;
            p.pause_after = (r.next_u64() % (2 * p.total as u64)) as u32;
            p.resume_at = r.next_u64() % 2_500;
        }
        if let Err(e) = sim.drive_bounded(1_000_000) {
            panic!("seed {seed} ({senders} senders, N={capacity}): {e}");
        }
        assert!(sim.rx.is_empty());
        worst = worst.max(sim.max_starve);
    }
    assert!(worst > 0);
}

#[test]
fn lone_sender_fills_every_buffer_and_no_more() {
    for capacity in [1, 2, 5, 8] {
        let mut sim = Sim::new(7, 1, capacity, 3 * capacity);
        sim.consume = false;
        for _ in 0..2_000 {
            sim.step();
        }
        assert_eq!(sim.max_queued, capacity as usize);
        sim.last_progress = sim.now;
        assert_eq!(sim.pool.free_buffers(), 0);
        sim.consume = true;
        sim.drive_bounded(100_000).unwrap();
    }
}

#[test]
fn simulation_survives_a_dead_sender() {
    for seed in 1..=100u64 {
        let mut r = XorShift(seed.wrapping_mul(0xD1B5_4A32_D192_ED03));
        let senders = 2 + (r.next_u64() % 4) as usize;
        let capacity = 1 + (r.next_u64() % 8) as u32;
        let mut sim = Sim::new(r.next_u64(), senders, capacity, 40);
        for _ in 0..r.next_u64() % 500 {
            sim.step();
        }
        sim.kill(0);
        if let Err(e) = sim.drive_bounded(1_000_000) {
            panic!("seed {seed}: {e}");
        }
        // All but the last sender go; it can then fill every buffer.
        for k in 1..senders - 1 {
            sim.kill(k);
        }
        let last = senders - 1;
        sim.consume = false;
        sim.peers[last].total += 2 * capacity;
        for _ in 0..2_000 {
            sim.step();
        }
        assert_eq!(sim.rx.len(), capacity as usize, "seed {seed}");
        (sim.consume, sim.last_progress, sim.peers[last].last_sent) = (true, sim.now, sim.now);
        sim.drive_bounded(1_000_000).unwrap();
        check(&sim.pool);
    }
}

/// Delivers the pool's controls to senders that hold `unspent` credits each and
/// answer recalls with what they have unspent, until nothing moves.
fn settle(p: &mut CreditPool, unspent: &mut [u32], ids: &[SenderId]) {
    while let Some(c) = p.poll() {
        match c {
            Control::Grant(g) => {
                let k = ids.iter().position(|&s| s == g.to).unwrap();
                unspent[k] += g.credits;
            }
            Control::Recall { from, credits } => {
                let k = ids.iter().position(|&s| s == from).unwrap();
                let back = credits.min(unspent[k]);
                unspent[k] -= back;
                if back > 0 {
                    p.returned(from, back).unwrap();
                }
            }
        }
        check(p);
    }
}

/// Spec 7.2 as it ran over tcp with eight workers: every worker asks the root
/// for a batch (64) to send one message, then idles holding what it got; a
/// worker that later needs one more credit must get it back from the idle ones.
#[test]
fn idle_senders_holding_batches_do_not_starve_a_returning_one() {
    for workers in 2..=8u32 {
        let ids: Vec<SenderId> = (0..workers).map(|k| SenderId(100 + k)).collect();
        let mut unspent = vec![0u32; ids.len()];
        let mut p = CreditPool::new(64, 8);
        for (k, &s) in ids.iter().enumerate() {
            ask(&mut p, s, 64).unwrap();
            settle(&mut p, &mut unspent, &ids);
            // Each sends its one message as soon as it has a credit; the root
            // consumes it.
            for (j, &t) in ids.iter().enumerate().take(k + 1) {
                if unspent[j] > 0 && p.senders[p.slot(t).unwrap()].queued == 0 {
                    unspent[j] -= 1;
                    p.arrived(t).unwrap();
                    p.consumed(t).unwrap();
                    settle(&mut p, &mut unspent, &ids);
                }
            }
        }
        // Everyone idles; then each in turn runs dry and sends one more.
        for (k, &s) in ids.iter().enumerate() {
            if unspent[k] == 0 {
                ask(&mut p, s, 64).unwrap();
                settle(&mut p, &mut unspent, &ids);
            }
            assert!(
                unspent[k] > 0,
                "{workers} workers: sender {k} starves: {p:?}"
            );
            unspent[k] -= 1;
            p.arrived(s).unwrap();
            p.consumed(s).unwrap();
            settle(&mut p, &mut unspent, &ids);
        }
    }
}

/// Connecting an endpoint to a channel takes back every credit senders sit on.
#[test]
fn recall_all_takes_back_every_unspent_credit() {
    let mut p = CreditPool::new(8, 3);
    ask(&mut p, A, 8).unwrap();
    drain(&mut p);
    p.arrived(A).unwrap();
    p.consumed(A).unwrap(); // earmarked for A
    assert!(!p.in_use());
    ask(&mut p, B, 1).unwrap(); // B gets A's earmark
    let mut unspent = [7u32, 0];
    settle(&mut p, &mut unspent, &[A, B]);
    assert_eq!(unspent, [7, 1]);
    unspent[0] -= 1;
    p.arrived(A).unwrap();
    assert!(p.in_use(), "a message is queued");
    p.consumed(A).unwrap();
    assert!(!p.in_use());
    p.recall_all();
    check(&p);
    settle(&mut p, &mut unspent, &[A, B]);
    assert_eq!(unspent, [0, 0]);
    assert_eq!(p.outstanding(), 0);
    assert_eq!(p.free, 8);
}

/// A pool that owns nothing until the node lends it credits: a request with nothing lent
/// waits, a loan serves the waiter first, free credits go back with `reclaim`, and N bounds
/// what it owns plus its node's own messages.
#[test]
fn lent_pools_serve_waiters_and_give_back_what_is_free() {
    let mut p = CreditPool::empty(4, 8);
    assert_eq!(p.owned(), 0);
    ask(&mut p, A, 3).unwrap();
    assert!(drain(&mut p).is_empty(), "nothing to grant yet");
    assert!(p.has_waiters());
    assert_eq!(p.lend(10), 4, "at most N");
    assert_eq!(drain(&mut p), vec![grant(A, 3)]);
    assert!(!p.has_waiters());
    assert_eq!(p.reclaim(), 1);
    assert_eq!(p.owned(), 3);
    check(&p);
    // A's three credits are out: one local message fits, a second does not.
    assert!(p.take_local());
    assert!(!p.take_local());
    assert_eq!(p.free_buffers(), 3);
    assert_eq!(p.lend(5), 0, "N owned or queued locally");
    p.local_consumed();
    assert!(p.take_local());
    p.local_consumed();
    // Two of A's messages arrive, one is consumed; the pool is dissolved: the queued one,
    // the earmark and nothing free come back, A's unspent credit is still held.
    p.arrived(A).unwrap();
    p.arrived(A).unwrap();
    p.consumed(A).unwrap();
    let (back, held) = p.dissolve();
    assert_eq!((back, held), (2, 1));
    assert_eq!(p.owned(), 0);
}

/// While the shared budget is short (`drain`), consumed credits go back to it instead of to
/// their sender as a batch; after `stop_draining`, batches again.
#[test]
fn a_draining_pool_gives_consumed_credits_back_to_the_budget() {
    let mut p = CreditPool::new(8, 3);
    ask(&mut p, A, 8).unwrap();
    drain(&mut p);
    for _ in 0..8 {
        p.arrived(A).unwrap();
    }
    p.drain();
    for _ in 0..4 {
        p.consumed(A).unwrap();
    }
    check(&p);
    assert!(drain(&mut p).is_empty(), "no batch for A");
    assert_eq!(p.reclaim(), 4, "the consumed credits are the budget's");
    p.stop_draining();
    for _ in 0..4 {
        p.consumed(A).unwrap();
    }
    check(&p);
    assert!(granted_to(&mut p, A), "batches again");
}

/// A dry sender's request that overtakes the Return answering a recall is deferred (its
/// returning credits count as out); when the Return arrives with nothing of it out any
/// more, the request is answered instead of waiting for a consumption that never comes.
#[test]
fn a_deferred_request_is_answered_when_its_credits_come_back_unspent() {
    let mut p = CreditPool::empty(4, 4);
    let mut w = CreditWindow::new();
    let seen = w.request_sent();
    p.lend(4);
    p.request(A, 4, seen).unwrap();
    p.reclaim();
    for c in drain(&mut p) {
        if let Control::Grant(g) = c {
            w.add(g.credits);
        }
    }
    assert_eq!(w.available(), 4);
    // Another endpoint of the node is hungry: the recall.
    p.recall_all();
    p.reclaim();
    let back = match drain(&mut p)[..] {
        [Control::Recall { credits, .. }] => w.recall(credits),
        ref o => panic!("{o:?}"),
    };
    assert_eq!(back, 4);
    // The Return travels; the sender, dry, asks meanwhile and is deferred.
    let seen = w.request_sent();
    p.lend(0);
    p.request(A, 1, seen).unwrap();
    p.reclaim();
    assert_eq!(drain(&mut p), []);
    p.returned(A, back).unwrap();
    check(&p);
    let got: u32 = drain(&mut p)
        .iter()
        .map(|c| match c {
            Control::Grant(g) if g.to == A => g.credits,
            _ => 0,
        })
        .sum();
    assert!(got > 0, "the deferred request is answered");
}

/// A sender deferred (it holds the whole pool and asks for more) is still answered by its
/// consumed messages while the pool drains for a dearth elsewhere.
#[test]
fn a_deferred_sender_is_answered_while_the_pool_drains() {
    let mut p = CreditPool::new(8, 3);
    ask(&mut p, A, 8).unwrap();
    drain(&mut p);
    for _ in 0..8 {
        p.arrived(A).unwrap();
    }
    ask(&mut p, A, 1).unwrap();
    assert!(drain(&mut p).is_empty(), "deferred: it holds its share");
    p.recall_all();
    p.drain();
    drain(&mut p);
    p.consumed(A).unwrap();
    check(&p);
    assert!(granted_to(&mut p, A), "the deferred sender is answered");
}

/// A message of the receiver's own node that finds no room recalls the senders' unspent
/// credits once, not on every retry, until a return arrives or it gets room.
#[test]
fn a_local_message_without_room_recalls_once() {
    let mut p = CreditPool::empty(8, 3);
    p.lend(8);
    ask(&mut p, A, 8).unwrap();
    drain(&mut p);
    assert!(!p.take_local(), "A's batch holds every buffer");
    p.recall_for_local();
    let recalls = |p: &mut CreditPool| {
        drain(p)
            .iter()
            .filter(|c| matches!(c, Control::Recall { .. }))
            .count()
    };
    assert_eq!(recalls(&mut p), 1);
    for _ in 0..5 {
        assert!(!p.take_local());
        p.recall_for_local();
    }
    assert_eq!(recalls(&mut p), 0, "retries ask for nothing more");
    p.returned(A, 8).unwrap();
    assert_eq!(p.reclaim(), 8, "back to the node");
    assert!(p.take_local(), "room once A's credits came back");
    check(&p);
}

/// A recall for the receiver's own node that found every credit spent (nothing to recall)
/// does not keep the next one from going out once those credits were granted again.
#[test]
fn a_local_recall_is_made_again_after_a_new_grant() {
    let mut p = CreditPool::empty(8, 3);
    p.lend(8);
    ask(&mut p, A, 8).unwrap();
    drain(&mut p);
    for _ in 0..8 {
        p.arrived(A).unwrap();
    }
    assert!(!p.take_local());
    p.recall_for_local();
    assert!(
        drain(&mut p).is_empty(),
        "every credit is spent: nothing to recall"
    );
    for _ in 0..8 {
        p.consumed(A).unwrap(); // earmarked, then granted back to A as batches
    }
    assert!(granted_to(&mut p, A));
    assert!(!p.take_local(), "A's new batch holds the buffers");
    p.recall_for_local();
    assert!(
        drain(&mut p)
            .iter()
            .any(|c| matches!(c, Control::Recall { from, .. } if *from == A)),
        "recalled again"
    );
    check(&p);
}
