//! Credit-based flow control for messages: a sender that outruns its receiver
//! loses nothing (`mcapi_msg_send` blocks, `mcapi_msg_send_i` stays pending)
//! and the receiver holds at most N = `MCAPI_ENDP_ATTR_NUM_RECV_BUFFERS`.
//!
//! A *credit* allows one message in flight to, or queued unconsumed at, an
//! endpoint. [`CreditPool`] (receiver side, per endpoint) hands them out,
//! [`CreditWindow`] (sender side, per remote endpoint) spends them; the driver
//! carries the pool's [`Control`]s and the senders' requests and returns.
//! Invariant: credits granted and not back (unspent, in flight, queued) <= N.
//!
//! Policy (share = N / senders holding credits or waiting):
//! * *Request*: a dry sender asks for `want` = its messages waiting. It gets
//!   its own earmarked returns, then the ungranted remainder, up to `want` (a
//!   lone sender can have all N); short of that, other senders' earmarks are
//!   pooled first. Left below its share, or with nothing, it *waits*. While
//!   nobody waits, a dry sender holding its share with messages out is
//!   *deferred* until one of its messages is consumed. A request that crossed
//!   a grant is stale and ignored, so answers never exceed `want`.
//! * *Waiters first*: while anyone waits, every credit that comes back goes
//!   to the waiters, one each in turn, until each has its want (at most its
//!   share, at least 1); nothing stays ungranted or earmarked.
//! * *Rebalance*: when waiting starts, deferred senders join the ring;
//!   whenever a sender starts waiting, every other sender is brought down to
//!   the new share: served waiters cap their want (and leave the ring once
//!   they hold the share), and each sender that got credits since its last
//!   recall and holds more than the share is asked for the excess; it gives
//!   back what is unspent. Senders ask for batches they may never spend (a
//!   sender that stops sending sits on them), so nothing granted is exempt.
//!   Then the others hold at most their shares, so credits are left for the
//!   newcomer: while anyone waits, credits that come back go round the ring,
//!   and every waiter is served.
//! * *Dearth*: while the driver's shared budget is short and another pool's
//!   senders wait ([`CreditPool::drain`]), consumed credits go back to the
//!   budget instead of into batches.
//! * *Batches*: while nobody waits, a consumed message's credit is earmarked
//!   for its sender, granted back when the earmark reaches `max(1, held / 2)`
//!   (held = credits out plus earmarked): about two grants per window, and
//!   the earmark fills as the sender's queued messages are consumed; a
//!   deferred sender gets its first earmark at once.
//!
//! Driver rules: ask for what you expect to send (a batch is fine: the
//! excess is recalled when someone waits); give unneeded credits back (a
//! cancelled send) via [`CreditWindow::recall`] and [`CreditPool::returned`]. Memory is allocated only in [`CreditPool::new`];
//! refused input changes nothing.

use super::status::Status;
use rustc_hash::FxHasher;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::mem::take;

/// A sender as the driver numbers it (e.g. from the sending node id).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct SenderId(pub u32);

/// `credits` (never 0) more credits for sender `to`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Grant {
    /// The sender.
    pub to: SenderId,
    /// Number of credits.
    pub credits: u32,
}

/// A control message for the driver to send.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Control {
    /// Credits for a sender ([`CreditWindow::add`]).
    Grant(Grant),
    /// Asks a sender to give back up to `credits` unspent credits
    /// ([`CreditWindow::recall`], answered by [`CreditPool::returned`]).
    Recall {
        /// The sender.
        from: SenderId,
        /// Most credits wanted back.
        credits: u32,
    },
}

/// The pool's view of one sender.
#[derive(Clone, Copy, Debug, Default)]
struct Sender {
    id: SenderId,
    usable: u32, // granted (with unpolled `grant`) - arrived - returned
    queued: u32, // arrived, not consumed
    owed: u32,   // consumed, earmarked for it, not granted yet
    grant: u32,  // granted, not polled yet
    recall: u32, // recall not polled yet
    sent: u32,   // credits in polled grants, wrapping (the window's stamp)
    want: u32,   // credits still wanted while waiting or deferred
    waiting: bool,
    served: bool, // got credits since its last request
    asked: bool,  // deferred request, answered when one of its messages is consumed
    spare: bool,  // may hold credits it will not spend (a grant since its last recall)
    dirty: bool,  // in the outbox
    gone: bool,   // disconnected; kept while its messages are queued
}

impl Sender {
    fn held(&self) -> u32 {
        self.usable + self.queued + self.owed
    }
}

/// Receiver-side credit pool of one endpoint (see the module doc).
#[derive(Debug)]
pub struct CreditPool {
    capacity: u32,
    owned: u32,  // credits of the pool: free + held by senders (see `lend`)
    local: u32,  // messages of the receiver's own node queued (`take_local`)
    free: u32,   // neither granted nor earmarked
    queued: u32, // arrived and not consumed, all senders
    index: HashMap<SenderId, u32, BuildHasherDefault<FxHasher>>,
    senders: Vec<Sender>,
    free_slots: Vec<u32>,
    waiters: VecDeque<u32>,
    outbox: VecDeque<u32>,
    /// While the shared budget is short ([`drain`](Self::drain)): consumed credits go back
    /// to it (another pool's senders wait), not to their senders as batches.
    draining: bool,
    /// Unspent credits were recalled for a message of the receiver's own node that found
    /// no room ([`recall_for_local`](Self::recall_for_local)); cleared once one gets room.
    recalled_for_local: bool,
}

impl CreditPool {
    /// A pool of `capacity` credits for up to `max_senders` senders at once.
    ///
    /// # Panics
    /// If `capacity` is 0 or `max_senders >= u32::MAX`.
    pub fn new(capacity: u32, max_senders: usize) -> CreditPool {
        assert!(capacity > 0, "a credit pool needs at least one buffer");
        assert!(max_senders < u32::MAX as usize, "too many senders");
        CreditPool {
            capacity,
            owned: capacity,
            local: 0,
            free: capacity,
            queued: 0,
            index: HashMap::with_capacity_and_hasher(max_senders, Default::default()),
            senders: vec![Sender::default(); max_senders],
            free_slots: (0..max_senders as u32).rev().collect(),
            waiters: VecDeque::with_capacity(max_senders),
            outbox: VecDeque::with_capacity(max_senders),
            draining: false,
            recalled_for_local: false,
        }
    }

    /// A pool of `capacity` credits that owns none yet: its credits are lent to it by
    /// [`lend`](Self::lend) from a budget shared with other pools (the node's receive
    /// slots), and its free credits go back with [`reclaim`](Self::reclaim).
    ///
    /// # Panics
    /// As [`new`](Self::new).
    pub fn empty(capacity: u32, max_senders: usize) -> CreditPool {
        let mut pool = CreditPool::new(capacity, max_senders);
        (pool.owned, pool.free) = (0, 0);
        pool
    }

    /// Takes up to `n` credits lent from the shared budget (at most up to N owned and
    /// queued locally); waiters are served first, the rest is free. Returns how many were
    /// taken.
    pub fn lend(&mut self, n: u32) -> u32 {
        let n = n.min(self.capacity.saturating_sub(self.owned + self.local));
        self.owned += n;
        self.give(n);
        n
    }

    /// Gives the free credits back to the shared budget; returns how many.
    pub fn reclaim(&mut self) -> u32 {
        let n = take(&mut self.free);
        self.owned -= n;
        n
    }

    /// Credits the pool owns: free, or granted, queued or earmarked for a sender.
    pub fn owned(&self) -> u32 {
        self.owned
    }

    /// Whether a sender waits for credits (a [`lend`](Self::lend) would serve it).
    pub fn has_waiters(&self) -> bool {
        !self.waiters.is_empty()
    }

    /// The whole pool goes back to the shared budget (its endpoint is deleted): what is
    /// free, earmarked, queued or granted and not polled; returns that count and the
    /// credits senders still hold (unspent or in flight), which they give back or spend on
    /// messages that arrive for nobody.
    pub fn dissolve(&mut self) -> (u32, u32) {
        let mut back = take(&mut self.free);
        let mut held = 0;
        for s in &mut self.senders {
            back += s.queued + s.owed + s.grant;
            held += s.usable - s.grant;
        }
        self.owned = 0;
        (back, held)
    }

    /// A message of the receiver's own node is queued (no credit travels: the sending
    /// thread holds the lock). `false` when the endpoint's N buffers are taken, by messages
    /// queued or by credits lent to its senders.
    pub fn take_local(&mut self) -> bool {
        if self.owned - self.free + self.local >= self.capacity {
            return false;
        }
        self.local += 1;
        self.recalled_for_local = false;
        true
    }

    /// A message of the receiver's own node found no room ([`take_local`](Self::take_local)):
    /// the senders' unspent credits are recalled, once until one gets room (a retry asks
    /// for nothing more: the returns are on their way).
    pub fn recall_for_local(&mut self) {
        if !std::mem::replace(&mut self.recalled_for_local, true) {
            self.recall_all();
        }
    }

    /// A message of the receiver's own node was received or discarded.
    pub fn local_consumed(&mut self) {
        self.local = self.local.saturating_sub(1);
    }

    /// N, the number of receive buffers.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Sets N (`MCAPI_ENDP_ATTR_NUM_RECV_BUFFERS`, spec 4.2.6).
    ///
    /// # Errors
    /// `MCAPI_ERR_ATTR_VALUE` for 0; `MCAPI_ERR_ATTR_READONLY` ("attribute
    /// cannot be modified") while credits are [`outstanding`](Self::outstanding)
    /// (4.2.6 has no "busy" code; `MCAPI_ERR_CHAN_CONNECTED` is for channels).
    pub fn set_capacity(&mut self, n: u32) -> Result<(), Status> {
        if n == 0 {
            return Err(Status::MCAPI_ERR_ATTR_VALUE);
        }
        if self.outstanding() > 0 || self.senders.iter().any(|s| s.asked) {
            return Err(Status::MCAPI_ERR_ATTR_READONLY);
        }
        self.senders.iter_mut().for_each(|s| s.owed = 0);
        (self.capacity, self.free, self.owned) = (n, n, n);
        Ok(())
    }

    /// Free receive buffers: N minus messages arrived and not consumed.
    pub fn free_buffers(&self) -> u32 {
        self.capacity.saturating_sub(self.queued + self.local)
    }

    /// Credits out (granted, polled or not, and not back); at most N.
    pub fn outstanding(&self) -> u32 {
        self.senders.iter().map(|s| s.usable + s.queued).sum()
    }

    /// `sender`'s window ran dry (or first contact): it asks for `want`
    /// credits (0 counts as 1) with the stamp `seen` of
    /// [`CreditWindow::request_sent`]. Registers or revives the sender. The
    /// answer comes out of [`poll`](Self::poll), now or later. If `seen`
    /// differs from the credits polled to it, a grant crossed the request and
    /// answers it: the request is ignored.
    ///
    /// # Errors
    /// `MCAPI_ERR_MEM_LIMIT` if `sender` is new and `max_senders` are known.
    pub fn request(&mut self, sender: SenderId, want: u32, seen: u32) -> Result<(), Status> {
        if self.slot(sender).is_none() {
            let i = self.free_slots.pop().ok_or(Status::MCAPI_ERR_MEM_LIMIT)?;
            self.index.insert(sender, i); // Free slots are `Sender::default()`.
        }
        let i = self.index[&sender] as usize;
        let (share, want) = (self.share(i), want.max(1));
        let calm = self.waiters.is_empty();
        let s = &mut self.senders[i];
        (s.id, s.gone) = (sender, false);
        if s.waiting && s.grant == 0 && s.sent == seen {
            // Dry again while still in the ring: it waits for its next credit.
            s.served = false;
        }
        if s.waiting || s.asked || s.grant > 0 || s.sent != seen {
            return Ok(());
        }
        let out = s.usable + s.queued;
        if calm && self.free == 0 && s.owed == 0 && out > 0 && out >= share {
            (s.asked, s.want) = (true, want);
            return Ok(());
        }
        let own = s.owed.min(want);
        s.owed -= own;
        let need = want - own;
        if self.free < need {
            self.promote_asked();
            for s in &mut self.senders {
                self.free += take(&mut s.owed);
            }
        }
        let extra = self.free.min(need);
        self.free -= extra;
        self.grant_to(i, own + extra);
        let s = &mut self.senders[i];
        let mut rest = (need - extra).min(share.saturating_sub(s.held()));
        if own + extra == 0 {
            rest = rest.max(1);
        }
        if rest > 0 {
            (s.want, s.waiting, s.served) = (rest, true, own + extra > 0);
            self.waiters.push_back(i as u32);
            self.rebalance(i, share);
        }
        if !self.waiters.is_empty() {
            let free = take(&mut self.free);
            self.give(free);
        }
        Ok(())
    }

    /// A message of `sender` arrived (is queued at the endpoint).
    ///
    /// # Errors
    /// `MCAPI_ERR_TRANSMISSION` if no credit sent to `sender` covers it: a
    /// protocol violation; the driver drops it and treats the peer as faulty.
    pub fn arrived(&mut self, sender: SenderId) -> Result<(), Status> {
        let i = self.slot(sender).ok_or(Status::MCAPI_ERR_TRANSMISSION)?;
        let s = &mut self.senders[i];
        if s.usable == s.grant {
            return Err(Status::MCAPI_ERR_TRANSMISSION);
        }
        (s.usable, s.queued) = (s.usable - 1, s.queued + 1);
        self.queued += 1;
        Ok(())
    }

    /// The application received one message of `sender`; as
    /// [`consumed_many`](Self::consumed_many).
    pub fn consumed(&mut self, sender: SenderId) -> Result<(), Status> {
        self.consumed_many(sender, 1)
    }

    /// `n` queued messages of `sender` were received or discarded (after
    /// [`sender_gone`](Self::sender_gone), or as the endpoint is deleted).
    ///
    /// # Errors
    /// `MCAPI_ERR_PARAMETER` if fewer than `n` of its messages are queued.
    pub fn consumed_many(&mut self, sender: SenderId, n: u32) -> Result<(), Status> {
        let i = self.slot(sender).ok_or(Status::MCAPI_ERR_PARAMETER)?;
        let s = &mut self.senders[i];
        if s.queued < n {
            return Err(Status::MCAPI_ERR_PARAMETER);
        }
        s.queued -= n;
        self.queued -= n;
        // Draining, a deferred sender still gets its credit (nothing else answers it).
        let drained = self.draining && !s.asked;
        let ring = n * u32::from(s.gone || !self.waiters.is_empty() || drained);
        s.owed += n - ring;
        // A deferred sender is dry and blocked: its credit goes at once, not with the batch
        // (the receiver may take no other message until that sender's next one arrives).
        if n > ring && (s.asked || s.owed >= (s.held() / 2).max(1)) {
            let owed = take(&mut s.owed);
            self.grant_to(i, owed);
        }
        self.give(ring);
        if self.senders[i].gone && self.senders[i].queued == 0 {
            self.release(i);
        }
        Ok(())
    }

    /// `sender` gave back `n` unspent credits (for a recall, or unneeded).
    ///
    /// # Errors
    /// `MCAPI_ERR_TRANSMISSION` if it cannot hold that many (protocol error).
    pub fn returned(&mut self, sender: SenderId, n: u32) -> Result<(), Status> {
        let i = self.slot(sender).ok_or(Status::MCAPI_ERR_TRANSMISSION)?;
        let s = &mut self.senders[i];
        if s.usable - s.grant < n {
            return Err(Status::MCAPI_ERR_TRANSMISSION);
        }
        s.usable -= n;
        self.give(n);
        // The returns a recall for the receiver's own node asked for are coming: a message
        // of its that still finds no room may recall again.
        self.recalled_for_local = false;
        let s = &self.senders[i];
        if s.asked && s.queued == 0 && s.usable == s.grant {
            // Deferred for what it had out, which came back unspent (its request overtook
            // this return): no message of its will be consumed to answer it. It asks anew.
            let (want, seen) = (s.want, s.sent);
            self.senders[i].asked = false;
            self.request(sender, want, seen)?;
        }
        Ok(())
    }

    /// `sender` died or disconnected, and none of its messages can still
    /// arrive: its unspent, in-flight and earmarked credits are reclaimed,
    /// unpolled control to it dropped. Returns its messages still queued: the
    /// caller delivers or discards them, reporting with
    /// [`consumed_many`](Self::consumed_many), which frees its slot.
    pub fn sender_gone(&mut self, sender: SenderId) -> u32 {
        let Some(i) = self.slot(sender) else {
            return 0;
        };
        self.waiters.retain(|&w| w as usize != i);
        let s = &mut self.senders[i];
        let reclaimed = s.usable + s.owed;
        let (id, queued, dirty) = (s.id, s.queued, s.dirty);
        *s = Sender::default();
        (s.id, s.queued, s.dirty, s.gone) = (id, queued, dirty, true);
        self.give(reclaimed);
        if queued == 0 {
            self.release(i);
        }
        queued
    }

    /// Messages arrived and not consumed (queued, or taken and not yet reported), all
    /// senders.
    pub fn queued(&self) -> u32 {
        self.queued
    }

    /// Whether other nodes are sending to the endpoint now: messages of theirs
    /// are queued, or they wait for credits.
    pub fn in_use(&self) -> bool {
        self.queued > 0 || self.senders.iter().any(|s| s.waiting || s.asked)
    }

    /// The endpoint stops taking messages (it was connected to a channel):
    /// grants not polled yet and earmarks come back at once, and every sender
    /// is asked for all its unspent credits. A message already sent on one
    /// still arrives and is queued as usual.
    pub fn recall_all(&mut self) {
        for i in 0..self.senders.len() {
            let s = &mut self.senders[i];
            let (grant, owed) = (take(&mut s.grant), take(&mut s.owed));
            s.usable -= grant;
            self.free += grant + owed;
            if s.usable > 0 && !s.gone {
                s.recall = s.usable;
                self.mark(i);
            }
        }
    }

    /// The shared budget ran dry while other pools' senders wait: every credit consumed
    /// from now on goes back to it (to this pool's own waiters first), until
    /// [`stop_draining`](Self::stop_draining). Without this, credits spent when the dearth
    /// began would come back to their senders as batches they may never spend, and the
    /// waiting pools would starve.
    pub fn drain(&mut self) {
        self.draining = true;
    }

    /// The shared budget's dearth is over: consumed credits are earmarked for their
    /// senders again (batches).
    pub fn stop_draining(&mut self) {
        self.draining = false;
    }

    /// Every sender the pool has dealt with.
    pub fn senders(&self) -> impl Iterator<Item = SenderId> + '_ {
        self.index.keys().copied()
    }

    /// The next control message to send, if any.
    pub fn poll(&mut self) -> Option<Control> {
        while let Some(&i) = self.outbox.front() {
            let s = &mut self.senders[i as usize];
            if s.grant > 0 {
                let credits = take(&mut s.grant);
                s.sent = s.sent.wrapping_add(credits);
                return Some(Control::Grant(Grant { to: s.id, credits }));
            }
            self.outbox.pop_front();
            s.dirty = false;
            if s.recall > 0 {
                let credits = take(&mut s.recall);
                return Some(Control::Recall {
                    from: s.id,
                    credits,
                });
            }
        }
        None
    }

    fn slot(&self, sender: SenderId) -> Option<usize> {
        self.index.get(&sender).map(|&i| i as usize)
    }

    /// Counts `n` more credits out to slot `i` (answering a deferral).
    fn grant_to(&mut self, i: usize, n: u32) {
        let s = &mut self.senders[i];
        (s.usable, s.grant, s.asked) = (s.usable + n, s.grant + n, s.asked && n == 0);
        if n > 0 {
            (s.spare, s.served) = (true, true);
            self.mark(i);
            // Granted after a recall for the receiver's own node: that one may need another.
            self.recalled_for_local = false;
        }
    }

    /// Queues slot `i` for [`poll`](Self::poll).
    fn mark(&mut self, i: usize) {
        let s = &mut self.senders[i];
        if !s.dirty {
            s.dirty = true;
            self.outbox.push_back(i as u32);
        }
    }

    /// N divided among the senders holding credits or waiting, and `i`.
    fn share(&self, i: usize) -> u32 {
        let active = self.index.values().filter(|&&j| {
            let s = &self.senders[j as usize];
            j as usize == i || (!s.gone && (s.held() > 0 || s.waiting))
        });
        self.capacity / active.count() as u32
    }

    /// Sender `i` starts waiting and the share shrinks to `share`: every
    /// other sender is brought down to it. Waiters cap their want (sized for
    /// an older, larger share); those served since their last request leave
    /// the ring once they hold their share (they ask again when dry); anyone that got credits since its last recall is
    /// asked for its credits beyond the share. Idle senders sitting on batches
    /// would otherwise starve the newcomer.
    fn rebalance(&mut self, i: usize, share: u32) {
        for k in 0..self.senders.len() {
            let s = &mut self.senders[k];
            if k == i || s.gone {
                continue;
            }
            if s.waiting {
                // One that has not been served since it asked keeps waiting.
                let floor = u32::from(!s.served);
                s.want = s.want.min(share.saturating_sub(s.held())).max(floor);
                if s.want == 0 {
                    s.waiting = false;
                    self.waiters.retain(|&w| w as usize != k);
                }
            }
            let s = &mut self.senders[k];
            let excess = s.held().saturating_sub(share).min(s.usable);
            if s.spare && excess > 0 {
                (s.recall, s.spare) = (s.recall.max(excess), excess < s.usable);
                self.mark(k);
            }
        }
    }

    /// A waiter is about to appear, so batches stop: deferred senders join the
    /// ring ahead of the new waiter (they have nothing earmarked: a consumed
    /// message's credit goes to them at once).
    fn promote_asked(&mut self) {
        for k in 0..self.senders.len() {
            let s = &mut self.senders[k];
            if s.asked {
                (s.asked, s.waiting, s.want, s.served) = (false, true, 1, false);
                self.waiters.push_back(k as u32);
            }
        }
    }

    /// Hands `n` credits to the waiters, one each in turn; the rest is free.
    fn give(&mut self, mut n: u32) {
        while n > 0 {
            let Some(w) = self.waiters.pop_front() else {
                break;
            };
            let s = &mut self.senders[w as usize];
            s.want -= 1;
            s.waiting = s.want > 0;
            if s.waiting {
                self.waiters.push_back(w);
            }
            self.grant_to(w as usize, 1);
            n -= 1;
        }
        self.free += n;
    }

    /// Forgets slot `i` (gone, nothing queued).
    fn release(&mut self, i: usize) {
        self.index.remove(&self.senders[i].id);
        self.outbox.retain(|&j| j as usize != i);
        self.senders[i] = Sender::default();
        self.free_slots.push(i as u32);
    }
}

/// Sender-side credits for one remote endpoint.
///
/// Send: [`try_take`](Self::try_take); if that fails keep the message pending
/// and, if [`needs_request`](Self::needs_request), send one request stamped
/// with [`request_sent`](Self::request_sent). The pool answers each request.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct CreditWindow {
    available: u32,
    received: u32, // wrapping sum of grants: the request stamp
    requested: bool,
}

impl CreditWindow {
    /// No credits, nothing requested: the first send asks.
    pub const fn new() -> CreditWindow {
        CreditWindow {
            available: 0,
            received: 0,
            requested: false,
        }
    }

    /// Unspent credits.
    pub fn available(&self) -> u32 {
        self.available
    }

    /// Spends a credit on a message about to be sent; `false` if none.
    pub fn try_take(&mut self) -> bool {
        let ok = self.available > 0;
        self.available -= u32::from(ok);
        ok
    }

    /// A grant of `n` credits arrived; it answers the request (`n > 0`).
    pub fn add(&mut self, n: u32) {
        self.available = self.available.saturating_add(n);
        self.received = self.received.wrapping_add(n);
        self.requested &= n == 0;
    }

    /// Whether any credit was ever granted (since [`new`](Self::new) or
    /// [`reset`](Self::reset)). A dry window that had credits before gets more
    /// without asking as its messages are consumed (batches), so the driver
    /// may wait a while before it asks; one that never had any must ask.
    pub fn granted_before(&self) -> bool {
        self.received != 0
    }

    /// Out of credits and no request outstanding: send one request.
    pub fn needs_request(&self) -> bool {
        self.available == 0 && !self.requested
    }

    /// Out of credits with a request outstanding: waiting for its answer.
    pub fn waits_for_grant(&self) -> bool {
        self.available == 0 && self.requested
    }

    /// The request is being sent; returns its stamp for [`CreditPool::request`].
    pub fn request_sent(&mut self) -> u32 {
        self.requested = true;
        self.received
    }

    /// A recall of up to `n` arrived (or the driver gives back `n` unneeded
    /// credits): removes and returns the unspent credits to send back for
    /// [`CreditPool::returned`] (0: send nothing).
    pub fn recall(&mut self, n: u32) -> u32 {
        let back = n.min(self.available);
        self.available -= back;
        back
    }

    /// The request was refused (not answered with a grant): a later send asks again. The
    /// stamp stays, so the pool, which counts what it granted, still knows it.
    pub fn request_refused(&mut self) {
        self.requested = false;
    }

    /// Forgets everything (the peer endpoint restarted). The driver drops
    /// control messages of the old connection still in flight.
    pub fn reset(&mut self) {
        *self = CreditWindow::new();
    }
}

#[cfg(test)]
#[path = "credit_tests.rs"]
mod tests;
