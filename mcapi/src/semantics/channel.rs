//! Channels (spec 3.7, 3.8, 4.4, 4.5) without I/O: the life cycle of an endpoint's channel
//! binding, the status flags it shows, the sender's credits, and the accounting that decides
//! when a receive pool buffer may be posted to the fabric again.
//!
//! Life cycle of one endpoint (each side keeps its own [`Binding`]):
//!
//! ```text
//!   unbound --connect--> connected --open--> open pending --peer opened--> open
//!      ^                                                                    |
//!      +---- peer closed <---- close pending <------------close------------+
//! ```
//!
//! An open may come before the connect (the connect is made by a third node and the two
//! opens need no order): it waits, and is checked against the channel type and direction
//! when the connect arrives.

use super::Status;
use std::collections::BTreeMap;

/// Packet or scalar channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChannelKind {
    /// Packets into system buffers (4.4).
    Packet,
    /// 8- to 64-bit scalars (4.5).
    Scalar,
}

/// The side of a channel an endpoint is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// The sending endpoint.
    Send,
    /// The receiving endpoint.
    Receive,
}

/// `MCAPI_ENDP_ATTR_STATUS_*` flags (spec 3.16.13.8).
pub mod status_flags {
    /// One end of a connected channel.
    pub const CONNECTED: u64 = 0x01;
    /// A channel is open on this endpoint.
    pub const OPEN: u64 = 0x02;
    /// A channel open is pending.
    pub const OPEN_PENDING: u64 = 0x04;
    /// A channel close is pending.
    pub const CLOSE_PENDING: u64 = 0x08;
    /// Packet channel.
    pub const PKTCHAN: u64 = 0x10;
    /// Scalar channel.
    pub const SCLCHAN: u64 = 0x20;
    /// Send side.
    pub const SEND: u64 = 0x40;
    /// Receive side.
    pub const RECEIVE: u64 = 0x80;
}

/// Where an endpoint's side of its channel is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Connected, not opened here yet.
    Connected,
    /// Opened here; waiting for the other side's open.
    OpenPending,
    /// Both sides open.
    Open,
    /// Closed here; waiting for the other side's close.
    ClosePending,
}

/// An endpoint's channel state, `T` being what the other side told us when it opened
/// (e.g. its fabric address).
#[derive(Debug)]
pub struct Binding<T> {
    connection: Option<(ChannelKind, Direction)>,
    /// An open made before the connect arrived.
    early_open: Option<(ChannelKind, Direction)>,
    phase: Phase,
    peer_open: Option<T>,
    peer_closed: bool,
    /// What the other side's close announced it sent (the smallest count, should a recount
    /// follow), for a side whose receive part did not exist yet to take it.
    peer_sent: Option<u32>,
}

impl<T> Default for Binding<T> {
    fn default() -> Self {
        Binding {
            connection: None,
            early_open: None,
            phase: Phase::Connected,
            peer_open: None,
            peer_closed: false,
            peer_sent: None,
        }
    }
}

impl<T> Binding<T> {
    /// Whether the endpoint is one end of a channel (connected, not yet disconnected).
    pub fn is_connected(&self) -> bool {
        self.connection.is_some()
    }

    /// The channel's type and this endpoint's direction, once connected.
    pub fn connection(&self) -> Option<(ChannelKind, Direction)> {
        self.connection
    }

    /// The phase of a connected endpoint.
    pub fn phase(&self) -> Option<Phase> {
        self.connection.map(|_| self.phase)
    }

    /// Whether a connect of this endpoint is allowed; `message_users` counts other nodes
    /// that use the endpoint as a message destination now (its "get reference count").
    ///
    /// # Errors
    /// `MCAPI_ERR_CHAN_CLOSEPENDING` while a close is pending, `MCAPI_ERR_CHAN_CONNECTED`
    /// when connected, `MCAPI_ERR_ENDP_GET_LIMIT` when other nodes send messages to it.
    pub fn check_connect(&self, message_users: usize) -> Result<(), Status> {
        match self.phase() {
            Some(Phase::ClosePending) => Err(Status::MCAPI_ERR_CHAN_CLOSEPENDING),
            Some(_) => Err(Status::MCAPI_ERR_CHAN_CONNECTED),
            None if message_users > 0 => Err(Status::MCAPI_ERR_ENDP_GET_LIMIT),
            None => Ok(()),
        }
    }

    /// Connects the endpoint (after [`Binding::check_connect`]).
    pub fn connect(&mut self, kind: ChannelKind, direction: Direction) {
        self.connection = Some((kind, direction));
        self.phase = Phase::Connected;
        self.peer_closed = false;
        if self.early_open.take().is_some() {
            self.phase = Phase::OpenPending;
        }
    }

    /// Undoes a connect that the other endpoint refused: unbound again, and an open made
    /// meanwhile (or before) waits for the next connect.
    pub fn undo_connect(&mut self) {
        match self.phase {
            Phase::Connected => self.connection = None,
            Phase::OpenPending => {
                self.early_open = self.connection.take();
                self.phase = Phase::Connected;
            }
            Phase::Open | Phase::ClosePending => return,
        }
        self.peer_open = None;
    }

    /// Forgets what another endpoint's open told us (it is not the one we are connected to).
    pub fn forget_peer_open(&mut self) {
        self.peer_open = None;
    }

    /// An open of the given type and direction made here.
    ///
    /// # Errors
    /// `MCAPI_ERR_CHAN_TYPE`, `MCAPI_ERR_CHAN_DIRECTION`, `MCAPI_ERR_CHAN_OPENPENDING`,
    /// `MCAPI_ERR_CHAN_OPEN`, `MCAPI_ERR_CHAN_CLOSEPENDING`.
    pub fn open(&mut self, kind: ChannelKind, direction: Direction) -> Result<(), Status> {
        let Some((k, d)) = self.connection else {
            if self.early_open.is_some() {
                return Err(Status::MCAPI_ERR_CHAN_OPENPENDING);
            }
            self.early_open = Some((kind, direction));
            return Ok(());
        };
        if k != kind {
            return Err(Status::MCAPI_ERR_CHAN_TYPE);
        }
        if d != direction {
            return Err(Status::MCAPI_ERR_CHAN_DIRECTION);
        }
        match self.phase {
            Phase::Connected => {
                self.phase = Phase::OpenPending;
                Ok(())
            }
            Phase::OpenPending => Err(Status::MCAPI_ERR_CHAN_OPENPENDING),
            Phase::Open => Err(Status::MCAPI_ERR_CHAN_OPEN),
            Phase::ClosePending => Err(Status::MCAPI_ERR_CHAN_CLOSEPENDING),
        }
    }

    /// The open made before the connect, if any: checked against the connection once it
    /// arrives (`Ok(true)`: it now waits for the other side).
    ///
    /// # Errors
    /// `MCAPI_ERR_CHAN_TYPE` or `MCAPI_ERR_CHAN_DIRECTION` when the connect disagrees.
    pub fn early_open_status(
        &self,
        kind: ChannelKind,
        direction: Direction,
    ) -> Result<bool, Status> {
        match self.connection {
            None => Ok(false),
            Some((k, _)) if k != kind => Err(Status::MCAPI_ERR_CHAN_TYPE),
            Some((_, d)) if d != direction => Err(Status::MCAPI_ERR_CHAN_DIRECTION),
            Some(_) => Ok(true),
        }
    }

    /// Withdraws an open that failed or was cancelled before completing.
    pub fn abandon_open(&mut self) {
        self.early_open = None;
        if self.phase == Phase::OpenPending {
            self.phase = Phase::Connected;
        }
    }

    /// The other endpoint's node died or finalized before the channel was open here (after
    /// [`Binding::abandon_open`]): nothing is left to open or close against, so the endpoint
    /// is unbound again, as after a close (`true`). An open channel keeps its binding until
    /// its close.
    pub fn peer_lost_before_open(&mut self) -> bool {
        if self.connection.is_some() && self.phase == Phase::Connected {
            *self = Binding::default();
            return true;
        }
        false
    }

    /// The other side opened and told us `info`.
    pub fn peer_opened(&mut self, info: T) {
        self.peer_open = Some(info);
    }

    /// What the other side told us when it opened.
    pub fn peer_info(&self) -> Option<&T> {
        self.peer_open.as_ref()
    }

    /// Completes a pending open once the other side has opened too.
    pub fn try_finish_open(&mut self) -> bool {
        if self.phase == Phase::OpenPending && self.peer_open.is_some() {
            self.phase = Phase::Open;
        }
        self.phase == Phase::Open && self.connection.is_some()
    }

    /// A close made here. `opened_early`: this side's open completed before the binding
    /// took the other side's (compatibility mode's early open, or the moment between the
    /// two), so it is open for the application while the binding still waits.
    ///
    /// # Errors
    /// `MCAPI_ERR_CHAN_TYPE`, `MCAPI_ERR_CHAN_DIRECTION`, `MCAPI_ERR_CHAN_NOTOPEN`.
    pub fn close(
        &mut self,
        kind: ChannelKind,
        direction: Direction,
        opened_early: bool,
    ) -> Result<(), Status> {
        let Some((k, d)) = self.connection else {
            return Err(Status::MCAPI_ERR_CHAN_NOTOPEN);
        };
        if k != kind {
            return Err(Status::MCAPI_ERR_CHAN_TYPE);
        }
        if d != direction {
            return Err(Status::MCAPI_ERR_CHAN_DIRECTION);
        }
        let open = self.phase == Phase::Open || (opened_early && self.phase == Phase::OpenPending);
        if !open {
            return Err(Status::MCAPI_ERR_CHAN_NOTOPEN);
        }
        self.phase = Phase::ClosePending;
        Ok(())
    }

    /// The other side closed.
    pub fn peer_closed(&mut self) {
        self.peer_closed = true;
    }

    /// The other side closed, announcing `sent` items sent in all (a receive side
    /// announces 0).
    pub fn peer_closed_after(&mut self, sent: u32) {
        self.peer_closed = true;
        self.peer_sent = Some(self.peer_sent.map_or(sent, |old| old.min(sent)));
    }

    /// What the other side's close announced, once it closed.
    pub fn peer_sent(&self) -> Option<u32> {
        self.peer_sent
    }

    /// Whether the other side has closed.
    pub fn is_peer_closed(&self) -> bool {
        self.peer_closed
    }

    /// Disconnects once both sides have closed (`true`: the endpoint is unbound again).
    pub fn try_finish_close(&mut self) -> bool {
        if self.phase == Phase::ClosePending && self.peer_closed {
            *self = Binding::default();
            return true;
        }
        false
    }

    /// `MCAPI_ENDP_ATTR_STATUS`.
    pub fn status_flags(&self) -> u64 {
        use status_flags::*;
        let Some((kind, direction)) = self.connection else {
            return if self.early_open.is_some() {
                OPEN_PENDING
            } else {
                0
            };
        };
        let mut f = CONNECTED;
        f |= match kind {
            ChannelKind::Packet => PKTCHAN,
            ChannelKind::Scalar => SCLCHAN,
        };
        f |= match direction {
            Direction::Send => SEND,
            Direction::Receive => RECEIVE,
        };
        f |= match self.phase {
            Phase::Connected => 0,
            Phase::OpenPending => OPEN_PENDING,
            Phase::Open => OPEN,
            Phase::ClosePending => OPEN | CLOSE_PENDING,
        };
        f
    }
}

/// The most credits a channel sender counts: above any receiver's pool (whose size is
/// bounded by `config::MAX_RECV_BUFFERS`).
pub const MAX_SEND_CREDITS: u32 = 1 << 16;

/// The sender's view of the receiver's free buffers.
#[derive(Debug, Clone, Copy)]
pub struct SendCredits {
    available: u32,
    /// The receiver's pool: no more are ever held (a count from the peer is capped there).
    capacity: u32,
}

impl SendCredits {
    /// Starts with the receiver's whole pool.
    pub fn new(capacity: u32) -> SendCredits {
        SendCredits {
            available: capacity,
            capacity,
        }
    }

    /// The receiver's pool grew by `n` buffers, all free (a sender that opened before it
    /// knew the pool starts with none).
    pub fn grant(&mut self, n: u32) {
        self.capacity = self.capacity.saturating_add(n).min(MAX_SEND_CREDITS);
        self.add(n);
    }

    /// Takes one credit for a packet or scalar about to be sent.
    pub fn try_take(&mut self) -> bool {
        let ok = self.available > 0;
        self.available -= u32::from(ok);
        ok
    }

    /// Gives back a credit taken for a send the provider refused.
    pub fn untake(&mut self) {
        self.available += 1;
    }

    /// Credits the receiver returned. The count comes from the peer (or from a stranger
    /// on the fabric): no more than the receiver's pool are ever held.
    pub fn add(&mut self, n: u32) {
        self.available = self.available.saturating_add(n).min(self.capacity);
    }

    /// Credits held now.
    pub fn available(&self) -> u32 {
        self.available
    }
}

/// The receiver's batching of returned credits: one small message per quarter of the pool,
/// and whatever is unreported as soon as every credit is back at the receiver (the sender
/// can send nothing more), so a sender never waits for space that is free but unreported,
/// and a ping-pong sends no credit message per item. A receiver that holds returns back
/// ([`CreditReturn::hold_back`]) sends its quarters only once the sender is down to a
/// quarter of its credits (as the receiver counts: what it was given back minus what
/// arrived), all that is unreported then: a stream costs one message per three quarters of
/// the pool instead of one per quarter, the quarter left to the sender covers the return's
/// way to it, and a ping-pong over a small pool sends a return every few items (down to
/// half the pool, 4 buffers had one per item: 2.4x raw's scalar round trip over tcp).
#[derive(Debug, Clone, Copy)]
pub struct CreditReturn {
    /// Freed and not yet returned.
    unreported: u32,
    /// Arrived and not yet returned (held by the application, or freed and unreported):
    /// the sender holds `capacity - owed` (available, or spent on items on their way).
    owed: u32,
    batch: u32,
    /// Owed credits from which a batch goes back: 0, or three quarters of the pool when
    /// held back.
    batch_from: u32,
    capacity: u32,
}

impl CreditReturn {
    /// For a pool of `capacity` buffers.
    pub fn new(capacity: u32) -> CreditReturn {
        CreditReturn {
            unreported: 0,
            owed: 0,
            batch: capacity.div_ceil(4).max(1),
            batch_from: 0,
            capacity,
        }
    }

    /// Batches go back only once the sender is down to a quarter of its credits: for
    /// scalars on connection-based providers, where each return is a syscall of the
    /// receiver, the slower side of a stream there.
    pub fn hold_back(&mut self) {
        self.batch_from = self.capacity - self.capacity / 4;
    }

    /// An item sent with a credit arrived; `Some(n)`: return `n` credits now.
    pub fn arrived(&mut self) -> Option<u32> {
        self.owed += 1;
        self.flush()
    }

    /// A buffer became free; `Some(n)`: return `n` credits now.
    pub fn freed(&mut self) -> Option<u32> {
        self.unreported += 1;
        self.flush()
    }

    /// What is unreported if it is due: a batch (once the sender is down to half, when held
    /// back), or anything once the sender is out of credits with nothing on its way; else
    /// what is on its way comes, and keeps the sender going. `arrived` and `freed` check this
    /// themselves: call it to retry after a return could not be sent.
    pub fn flush(&mut self) -> Option<u32> {
        let sender_dry = self.owed >= self.capacity;
        let batch_due = self.unreported >= self.batch && self.owed >= self.batch_from;
        (self.unreported > 0 && sender_dry || batch_due).then(|| self.take())
    }

    /// Gives back credits whose message could not be sent now.
    pub fn unflush(&mut self, n: u32) {
        self.unreported += n;
        self.owed += n;
    }

    fn take(&mut self) -> u32 {
        let n = std::mem::take(&mut self.unreported);
        self.owed -= n;
        n
    }

    /// Most credit messages that can be on their way at once (how many receives the sender
    /// must keep posted for them): each returns a batch or more but a flush, and a flush
    /// happens only when no credit is on its way.
    pub fn max_in_flight(capacity: u32) -> u32 {
        capacity.div_ceil(CreditReturn::new(capacity).batch) + 1
    }
}

/// Which buffers of a packet pool hold packets the application has not released, and which
/// the provider still owns, so a buffer is posted again exactly when both are done with it.
/// The provider releases a multi-receive buffer with `FI_MULTI_RECV`, a plain receive's
/// buffer with its completion.
#[derive(Debug)]
pub struct PoolBuffers {
    /// Packets in each buffer that arrived and were not released yet.
    held: Vec<u32>,
    /// Whether the provider owns the buffer (posted and not yet released).
    posted: Vec<bool>,
    /// Whether a packet ever arrived in the buffer.
    received: Vec<bool>,
    /// Whether the provider dropped the buffer without releasing it ([`PoolBuffers::lose`]).
    lost: Vec<bool>,
}

impl PoolBuffers {
    /// `n` buffers, all about to be posted, and `spares` after them that are not (each
    /// posted once it takes the place of a lost one, [`PoolBuffers::lose`]).
    pub fn new(n: usize, spares: usize) -> PoolBuffers {
        let mut posted = vec![true; n];
        posted.resize(n + spares, false);
        PoolBuffers {
            held: vec![0; n + spares],
            posted,
            received: vec![false; n + spares],
            lost: vec![false; n + spares],
        }
    }

    /// The provider dropped posted buffer `b` without releasing it: it stays the
    /// provider's for good (no release of its packets frees it). `false` if it was not
    /// posted or was lost already, so a buffer is replaced once.
    pub fn lose(&mut self, b: usize) -> bool {
        let fresh = self.posted.get(b).copied().unwrap_or(false) && !self.lost[b];
        if fresh {
            self.lost[b] = true;
        }
        fresh
    }

    /// A packet arrived in buffer `b`.
    pub fn arrived(&mut self, b: usize) {
        self.held[b] += 1;
        self.received[b] = true;
    }

    /// Whether a packet ever arrived in buffer `b`.
    pub fn ever_received(&self, b: usize) -> bool {
        self.received.get(b).copied().unwrap_or(false)
    }

    /// The provider released buffer `b`; `true`: it is free to be posted again.
    pub fn provider_released(&mut self, b: usize) -> bool {
        self.posted[b] = false;
        self.lost[b] = false;
        self.held[b] == 0
    }

    /// A packet of buffer `b` was released (by the application, or discarded);
    /// `true`: the buffer is free to be posted again.
    pub fn packet_released(&mut self, b: usize) -> bool {
        self.held[b] = self.held[b].saturating_sub(1);
        self.held[b] == 0 && !self.posted[b]
    }

    /// Buffer `b` was posted again.
    pub fn reposted(&mut self, b: usize) {
        self.posted[b] = true;
    }

    /// The buffers, spares included.
    pub fn count(&self) -> usize {
        self.posted.len()
    }

    /// Whether `b` (a completion context) names one of the buffers.
    pub fn holds(&self, b: u64) -> bool {
        b < self.posted.len() as u64
    }

    /// Buffers the provider owns now.
    pub fn posted(&self) -> usize {
        self.posted.iter().filter(|p| **p).count()
    }
}

/// The bytes a provider reported written in each multi-receive buffer since it was
/// posted, and releases that came before all of them. A provider carves messages out of
/// a buffer one after another from its start, so the buffer is done with once the
/// reported bytes run without a gap from its start to less than the minimum before its
/// end. Why a release is not enough: tcp;ofi_rxm 1.17, given a buffer while messages wait
/// for one, carves them out of it at once and reports it released as soon as less than
/// the minimum is left, while a message sent by segmentation or rendezvous is still being
/// written into it.
///
/// Offsets are `b * buffer_size + offset within buffer b`, whatever memory holds it.
#[derive(Debug)]
pub struct Fill {
    buffers: Box<[BufferFill]>,
    buffer_size: usize,
    min_free: usize,
}

/// What a release of a multi-receive buffer comes to ([`Fill::released`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// Every message carved out of the buffer was reported: it may be posted again.
    Done,
    /// Some are still being written: [`Fill::reported`] says when they are done.
    Waits,
    /// One ended in an error that did not say how much it wrote: its bytes may never be
    /// reported, so the buffer is given up (never posted again).
    Lost,
}

#[derive(Clone, Default, Debug)]
struct BufferFill {
    /// Bytes reported from the buffer's start on without a gap.
    prefix: usize,
    /// Ranges reported past a gap (a message carved earlier still being written), by
    /// start: a range's end.
    pieces: BTreeMap<usize, usize>,
    /// The provider released the buffer before all of it was reported.
    release_waits: bool,
    /// A message carved out of it ended in an error other than a truncation.
    failed: bool,
}

impl Fill {
    /// `buffers` buffers of `buffer_size` bytes, used up when less than `min_free` is left
    /// (the endpoint's `FI_OPT_MIN_MULTI_RECV`).
    pub fn new(buffers: usize, buffer_size: usize, min_free: usize) -> Fill {
        Fill {
            buffers: vec![BufferFill::default(); buffers].into_boxed_slice(),
            buffer_size,
            min_free,
        }
    }

    /// `len` bytes at pool offset `offset` of buffer `b` were reported; `true` if a release
    /// of `b` waited for them and need wait no more.
    #[inline(always)]
    pub fn reported(&mut self, b: usize, offset: usize, len: usize) -> bool {
        let size = self.buffer_size;
        let Some(f) = self.buffers.get_mut(b) else {
            return false;
        };
        let Some(at) = offset.checked_sub(b * size).filter(|at| at + len <= size) else {
            return false;
        };
        if at == f.prefix {
            f.prefix += len;
            // Pieces reported out of order that now join the prefix.
            while let Some(end) = f.pieces.remove(&f.prefix) {
                f.prefix = end;
            }
        } else if at > f.prefix && len > 0 {
            f.pieces.insert(at, at + len);
        }
        let waited = std::mem::take(&mut f.release_waits);
        waited && self.released(b) == Release::Done
    }

    /// Buffer `b` was released: what that comes to.
    pub fn released(&mut self, b: usize) -> Release {
        let (size, min_free) = (self.buffer_size, self.min_free);
        let Some(f) = self.buffers.get_mut(b) else {
            return Release::Done;
        };
        let release = if f.pieces.is_empty() && f.prefix + min_free > size {
            Release::Done
        } else if f.failed {
            Release::Lost
        } else {
            Release::Waits
        };
        f.release_waits = release == Release::Waits;
        release
    }

    /// A message too long for what was left of buffer `b` ended in an error after
    /// `written` bytes: it took the rest of the buffer. `true` as for [`Fill::reported`].
    pub fn truncated(&mut self, b: usize, written: usize) -> bool {
        let size = self.buffer_size;
        match (b + 1)
            .checked_mul(size)
            .and_then(|end| end.checked_sub(written))
        {
            Some(offset) if written <= size => self.reported(b, offset, written),
            _ => false,
        }
    }

    /// A message carved out of buffer `b` ended in another error (a read that failed, a
    /// cancellation): how much it wrote is not said. `true` if a release of `b` waited,
    /// which now comes to [`Release::Lost`]; else a release to come does, unless all of
    /// the buffer is reported by then.
    pub fn failed(&mut self, b: usize) -> bool {
        let Some(f) = self.buffers.get_mut(b) else {
            return false;
        };
        f.failed = true;
        std::mem::take(&mut f.release_waits)
    }

    /// Buffer `b` was posted again: nothing reported in it yet.
    pub fn reposted(&mut self, b: usize) {
        if let Some(f) = self.buffers.get_mut(b) {
            *f = BufferFill::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A release counts once the reported bytes run from the buffer's start to less than
    /// the minimum before its end; a truncation reports the rest; a repost starts over.
    #[test]
    fn fill_counts_a_release_once_every_carved_byte_was_reported() {
        let mut f = Fill::new(2, 100, 10);
        // Buffer 1: messages reported in order, the last with the release.
        for (at, len) in [(0, 30), (30, 30), (60, 31)] {
            assert!(!f.reported(1, 100 + at, len));
        }
        assert_eq!(
            f.released(1),
            Release::Done,
            "91 reported: less than 10 left"
        );
        // Buffer 0: released before anything was reported, then a gap, then the rest.
        assert_eq!(f.released(0), Release::Waits);
        assert!(!f.reported(0, 40, 20), "a gap before 40");
        assert!(!f.reported(0, 0, 40), "60 reported: more than 10 left");
        assert!(f.truncated(0, 40), "a message took the last 40");
        // Posted again: nothing reported, a release waits again; out-of-range reports
        // and reports of another buffer's bytes count for nothing.
        f.reposted(0);
        assert_eq!(f.released(0), Release::Waits);
        assert!(!f.reported(0, 100, 50), "buffer 1's bytes");
        assert!(!f.reported(0, 95, 10), "past the end");
        assert!(!f.reported(7, 0, 100), "no such buffer");
        assert!(!f.truncated(0, 101));
        assert!(f.reported(0, 0, 100));
        // A message that fails without saying what it wrote: a waiting release is given
        // up, and so is one that comes later with bytes missing.
        f.reposted(0);
        assert_eq!(f.released(0), Release::Waits);
        assert!(f.failed(0));
        f.reposted(1);
        assert!(!f.failed(1));
        assert!(!f.reported(1, 150, 50));
        assert_eq!(f.released(1), Release::Lost);
        // Many pieces out of order join in one go.
        f.reposted(0);
        for at in (1..100).rev() {
            assert!(!f.reported(0, at, 1));
        }
        assert_eq!(f.released(0), Release::Waits, "byte 0 missing");
        assert!(f.reported(0, 0, 1));
    }

    /// Credits a peer returns are counted without overflow, whatever it sends, and never
    /// beyond the receiver's pool.
    #[test]
    fn returned_credits_saturate() {
        let mut c = SendCredits::new(4);
        assert!(c.try_take());
        c.add(u32::MAX);
        c.add(u32::MAX);
        assert_eq!(c.available(), 4);
        let mut early = SendCredits::new(0);
        early.grant(8);
        early.add(100);
        assert_eq!(early.available(), 8);
        early.grant(u32::MAX);
        assert_eq!(early.available(), MAX_SEND_CREDITS);
    }
    use status_flags::*;

    #[test]
    fn connect_open_close_cycle_shows_the_spec_flags() {
        let mut b: Binding<u32> = Binding::default();
        assert_eq!(b.status_flags(), 0);
        b.check_connect(0).unwrap();
        b.connect(ChannelKind::Packet, Direction::Receive);
        assert_eq!(b.status_flags(), CONNECTED | PKTCHAN | RECEIVE);
        assert_eq!(b.check_connect(0), Err(Status::MCAPI_ERR_CHAN_CONNECTED));
        b.open(ChannelKind::Packet, Direction::Receive).unwrap();
        assert_eq!(
            b.open(ChannelKind::Packet, Direction::Receive),
            Err(Status::MCAPI_ERR_CHAN_OPENPENDING)
        );
        assert!(!b.try_finish_open());
        assert_eq!(b.status_flags() & OPEN_PENDING, OPEN_PENDING);
        b.peer_opened(7);
        assert!(b.try_finish_open());
        assert_eq!(b.status_flags(), CONNECTED | PKTCHAN | RECEIVE | OPEN);
        assert_eq!(
            b.open(ChannelKind::Packet, Direction::Receive),
            Err(Status::MCAPI_ERR_CHAN_OPEN)
        );
        b.close(ChannelKind::Packet, Direction::Receive, false)
            .unwrap();
        assert_eq!(b.check_connect(0), Err(Status::MCAPI_ERR_CHAN_CLOSEPENDING));
        assert_eq!(b.status_flags() & CLOSE_PENDING, CLOSE_PENDING);
        assert!(!b.try_finish_close());
        b.peer_closed();
        assert!(b.try_finish_close());
        assert_eq!(b.status_flags(), 0);
        b.check_connect(0).unwrap();
    }

    #[test]
    fn a_peer_lost_before_the_open_unbinds_the_endpoint() {
        let mut b: Binding<u32> = Binding::default();
        b.connect(ChannelKind::Scalar, Direction::Send);
        b.open(ChannelKind::Scalar, Direction::Send).unwrap();
        assert!(!b.peer_lost_before_open(), "an open is under way");
        b.abandon_open();
        assert!(b.peer_lost_before_open());
        assert_eq!(b.status_flags(), 0);
        b.check_connect(0).unwrap();
        // An open channel is left to its close.
        b.connect(ChannelKind::Scalar, Direction::Send);
        b.open(ChannelKind::Scalar, Direction::Send).unwrap();
        b.peer_opened(1);
        assert!(b.try_finish_open());
        assert!(!b.peer_lost_before_open());
        assert_eq!(b.check_connect(0), Err(Status::MCAPI_ERR_CHAN_CONNECTED));
    }

    #[test]
    fn wrong_type_or_direction_is_refused_and_changes_nothing() {
        let mut b: Binding<()> = Binding::default();
        b.connect(ChannelKind::Scalar, Direction::Send);
        let before = b.status_flags();
        assert_eq!(
            b.open(ChannelKind::Packet, Direction::Send),
            Err(Status::MCAPI_ERR_CHAN_TYPE)
        );
        assert_eq!(
            b.open(ChannelKind::Scalar, Direction::Receive),
            Err(Status::MCAPI_ERR_CHAN_DIRECTION)
        );
        assert_eq!(
            b.close(ChannelKind::Scalar, Direction::Send, false),
            Err(Status::MCAPI_ERR_CHAN_NOTOPEN)
        );
        assert_eq!(b.status_flags(), before);
    }

    #[test]
    fn an_open_before_the_connect_waits_and_is_checked_when_it_arrives() {
        let mut b: Binding<()> = Binding::default();
        b.open(ChannelKind::Packet, Direction::Send).unwrap();
        assert_eq!(
            b.early_open_status(ChannelKind::Packet, Direction::Send),
            Ok(false)
        );
        assert_eq!(b.status_flags(), OPEN_PENDING);
        b.connect(ChannelKind::Packet, Direction::Receive);
        assert_eq!(
            b.early_open_status(ChannelKind::Packet, Direction::Send),
            Err(Status::MCAPI_ERR_CHAN_DIRECTION)
        );
        b.abandon_open();
        assert_eq!(b.phase(), Some(Phase::Connected));
    }

    #[test]
    fn an_undone_connect_keeps_an_open_made_before_it() {
        let mut b: Binding<u8> = Binding::default();
        b.open(ChannelKind::Packet, Direction::Send).unwrap();
        b.connect(ChannelKind::Packet, Direction::Send);
        b.peer_opened(7);
        assert_eq!(b.phase(), Some(Phase::OpenPending));
        b.undo_connect();
        assert!(!b.is_connected() && b.peer_info().is_none());
        assert_eq!(
            b.open(ChannelKind::Packet, Direction::Send),
            Err(Status::MCAPI_ERR_CHAN_OPENPENDING)
        );
        b.connect(ChannelKind::Packet, Direction::Send);
        assert_eq!(b.phase(), Some(Phase::OpenPending));
        // A connect refused after an open made once connected leaves that open waiting too.
        let mut c: Binding<u8> = Binding::default();
        c.connect(ChannelKind::Scalar, Direction::Receive);
        c.open(ChannelKind::Scalar, Direction::Receive).unwrap();
        c.undo_connect();
        assert_eq!(
            c.early_open_status(ChannelKind::Scalar, Direction::Receive),
            Ok(false)
        );
    }

    #[test]
    fn message_users_block_a_connect() {
        let b: Binding<()> = Binding::default();
        assert_eq!(b.check_connect(2), Err(Status::MCAPI_ERR_ENDP_GET_LIMIT));
    }

    #[test]
    fn credits_return_in_batches_and_on_flush() {
        let mut r = CreditReturn::new(64);
        for _ in 0..17 {
            assert_eq!(r.arrived(), None);
        }
        for _ in 0..15 {
            assert_eq!(r.freed(), None);
        }
        assert_eq!(r.freed(), Some(16));
        assert_eq!(r.freed(), None);
        // One freed, one owed: the sender still holds 63 credits.
        assert_eq!(r.flush(), None);
        // The sender spends them all: the last arrival brings the unreported one back.
        for _ in 0..62 {
            assert_eq!(r.arrived(), None);
        }
        assert_eq!(r.arrived(), Some(1));
        assert_eq!(r.flush(), None);
        // That credit comes back as an item: the application holds all 64, and a release
        // returns its credit at once.
        assert_eq!(r.arrived(), None);
        assert_eq!(r.freed(), Some(1));
        r.unflush(1);
        assert_eq!(r.flush(), Some(1));
        assert!(CreditReturn::max_in_flight(64) >= 4);
        let mut s = SendCredits::new(2);
        assert!(s.try_take() && s.try_take() && !s.try_take());
        s.add(1);
        assert!(s.try_take());
    }

    #[test]
    fn held_back_credits_return_once_the_sender_is_down_to_a_quarter() {
        let mut r = CreditReturn::new(64);
        r.hold_back();
        for _ in 0..17 {
            assert_eq!(r.arrived(), None);
        }
        // A quarter free while the sender still holds more than a quarter: kept.
        for _ in 0..16 {
            assert_eq!(r.freed(), None);
        }
        assert_eq!(r.flush(), None);
        // The sender down to a quarter (48 owed): everything unreported goes back.
        for _ in 0..30 {
            assert_eq!(r.arrived(), None);
        }
        assert_eq!(r.arrived(), Some(16));
        // Less than a quarter unreported waits, even for a low sender, until a quarter is
        // free.
        for _ in 0..15 {
            assert_eq!(r.freed(), None);
        }
        for _ in 0..16 {
            assert_eq!(r.arrived(), None);
        }
        assert_eq!(r.freed(), Some(16));
        // The sender spends the rest: nothing unreported, nothing to flush.
        for _ in 0..32 {
            assert_eq!(r.arrived(), None);
        }
        assert_eq!(r.flush(), None);
        // Every credit is back at the receiver: a release returns its credit at once.
        assert_eq!(r.freed(), Some(1));
        r.unflush(1);
        assert_eq!(r.flush(), Some(1));
        // A stream the application takes as it comes: one return per three quarters of the
        // pool (less the item whose arrival sends it, not taken yet).
        assert_eq!(held_back_returns(64, 640), [47; 13]);
        // A ping-pong over 4 buffers: a return of 2 every second item, not one per item.
        assert_eq!(held_back_returns(4, 10), [2; 4]);
    }

    /// The returns of a held-back pool of `capacity` over `items` items, each taken as it
    /// arrives.
    fn held_back_returns(capacity: u32, items: usize) -> Vec<u32> {
        let mut r = CreditReturn::new(capacity);
        r.hold_back();
        (0..items)
            .flat_map(|_| [r.arrived(), r.freed()])
            .flatten()
            .collect()
    }

    #[test]
    fn a_buffer_is_reposted_when_both_provider_and_application_are_done() {
        let mut p = PoolBuffers::new(2, 0);
        p.arrived(0);
        p.arrived(0);
        assert!(!p.provider_released(0));
        assert!(!p.packet_released(0));
        assert!(p.packet_released(0));
        p.reposted(0);
        assert_eq!(p.posted(), 2);
        // Released by the application first, then by the provider.
        p.arrived(1);
        assert!(!p.packet_released(1));
        assert!(p.provider_released(1));
    }
}
