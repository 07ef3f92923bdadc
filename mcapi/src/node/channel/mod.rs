//! Packet and scalar channels (spec 4.4, 4.5) over dedicated fabric endpoints.
//!
//! Each open side of a packet channel owns one RDM endpoint and CQ of its own (multi-receive
//! is untagged-only in libfabric 1.17, so a receive pool needs an endpoint that carries
//! nothing else); scalar sides share the node's scalar hub (`hub`), which keeps a
//! scalar ping-pong between two nodes on one connection (except on shm, which has no
//! connections: they have endpoints of their own there). The channel data path never takes
//! the node's state lock:
//!
//! - the receive side posts its pool, `NUM_RECV_BUFFERS` buffers: on shm each a plain
//!   receive of one max-size packet, elsewhere `max payload + POOL_SLACK` bytes posted as an
//!   `FI_MULTI_RECV` receive that small packets share; `pktchan_recv` hands out a pointer
//!   into the pool, and a buffer is posted again once the provider has released it and every
//!   packet in it has been released by the application ([`PoolBuffers`]; on shm by the next
//!   `pktchan_recv`, or while the side is idle, or before credits go back: [`RepostList`]);
//! - (scalars on the hub: its shared pool; a scalar is copied out on arrival, and a receive
//!   side takes `NUM_RECV_BUFFERS` of them before its sender waits for credits);
//! - the sender holds one credit per pool buffer ([`SendCredits`]): a held packet pins at most
//!   one buffer, so with as many buffers as credits some buffer always has room for a packet
//!   that was sent with a credit, however the application releases (no pinning stall);
//! - the receiver returns credits when packets are released (scalars: received), in batches
//!   of a quarter pool, and the rest as soon as every credit is back at the receiver
//!   ([`CreditReturn`]), as 8-byte messages into receives the sender keeps posted (scalar
//!   senders: through the hub);
//! - every packet and scalar carries its sequence number as remote CQ data, so FIFO order
//!   holds on providers whose completion order is not delivery order; a scalar's width is its
//!   length.
//!
//! Connect, open and close run on the control plane (`Frame::Channel`), between the nodes
//! owning the two endpoints; a third node may make the connect.

mod hub;

use super::*;
use crate::control::{ChannelAttributes, ChannelOp, ConnectEnd};
use crate::semantics::channel::{Binding, ChannelKind, CreditReturn, Direction};
use crate::semantics::channel_side::{
    Completions, Item, NextSend, Outgoing, Posted, Posting, RecvSide, Repost, SendSide, UserBuffer,
    ZeroCopy,
};
use hub::{HubItem, ScalarHub};
use mcapi_ofi::{SendBuffer, SendWait};
use smallvec::SmallVec;
use std::sync::atomic::{AtomicU32, AtomicUsize};

/// Largest packet an endpoint may be configured for (`MCAPI_MAX_PKT_SIZE`).
pub const MAX_PKT_SIZE: usize = 4 << 20;
/// Channel sides one node can have open at once.
pub(super) const MAX_SIDES: usize = 256;
/// Extra bytes per multi-receive pool buffer, so small packets share a buffer (fewer
/// re-posts).
const POOL_SLACK: usize = 8 * 1024;
/// A scalar receive slot: one posted receive of the widest scalar.
const SCALAR_SLOT: usize = 8;
/// Completion contexts on a sender's CQ (a receiver's contexts are pool buffer or scalar
/// slot indexes).
const CTX_CREDIT: u64 = 1 << 40;
const CTX_STAGING: u64 = 2 << 40;
const CTX_ZERO_COPY: u64 = 3 << 40;
/// A zero-copy `pktchan_send_i` packet; the low bits are its slot in `SendData::in_flight`.
const CTX_USER: u64 = 4 << 40;
const CTX_MASK: u64 = (1 << 40) - 1;
/// How long zero-copy packets in flight when the receiver closed or died may still complete
/// before the sender's endpoint is closed under them (and they fail).
const ZERO_COPY_GRACE: Duration = Duration::from_millis(100);

/// A channel send or receive handle (`mcapi_pktchan_send_hndl_t` and its kin): a plain value
/// that names the kind and direction and is checked, so a stale or garbage value is refused
/// (`MCAPI_ERR_CHAN_INVALID`) rather than aliasing another channel.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ChannelHandle(u64);

const HANDLE_SALT: u64 = 0x6368_616e_6e65_6c21;

impl ChannelHandle {
    fn new(slot: usize, generation: u32, kind: ChannelKind, dir: Direction) -> ChannelHandle {
        let payload = (u64::from(generation & 0xFF_FFFF) << 24)
            | (u64::from(kind == ChannelKind::Scalar) << 17)
            | (u64::from(dir == Direction::Receive) << 16)
            | slot as u64;
        ChannelHandle(u64::from(crate::semantics::check16(payload, HANDLE_SALT)) << 48 | payload)
    }

    /// The value as the C API passes it.
    pub fn raw(self) -> u64 {
        self.0
    }

    /// A handle from its C value (checked when used).
    pub fn from_raw(raw: u64) -> ChannelHandle {
        ChannelHandle(raw)
    }

    fn decode(self) -> Option<(usize, u32, ChannelKind, Direction)> {
        let payload = self.0 & 0xFFFF_FFFF_FFFF;
        if (self.0 >> 48) as u16 != crate::semantics::check16(payload, HANDLE_SALT) {
            return None;
        }
        let slot = (payload & 0xFFFF) as usize;
        let kind = if payload >> 17 & 1 == 1 {
            ChannelKind::Scalar
        } else {
            ChannelKind::Packet
        };
        let dir = if payload >> 16 & 1 == 1 {
            Direction::Receive
        } else {
            Direction::Send
        };
        (slot < MAX_SIDES).then_some((slot, (payload >> 24) as u32, kind, dir))
    }
}

/// A received packet: a view into the channel's registered receive pool (no copy). Give it
/// back with [`Node::pktchan_release`], which consumes it.
///
/// Not `Clone`: once released, its bytes may be posted to the fabric again and overwritten,
/// so no handle that can still read them may survive the release. Dropping a packet without
/// releasing it keeps its buffer held until the channel's pool goes.
#[derive(Debug)]
pub struct Packet {
    pool: MemoryRegion,
    offset: usize,
    len: usize,
}

impl Packet {
    /// Address of the first byte (what `mcapi_pktchan_recv` returns).
    pub fn addr(&self) -> usize {
        self.pool.addr() + self.offset
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the packet is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies the packet into `out` (which must be at least `len()` long).
    pub fn copy_to(&self, out: &mut [u8]) {
        self.pool.read(self.offset, &mut out[..self.len]);
    }

    /// The packet's bytes, copied.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.len];
        self.copy_to(&mut v);
        v
    }
}

/// What the other side told us when it opened.
#[derive(Clone, Debug)]
pub(super) struct PeerOpen {
    /// The endpoint that opened: only the one connected to counts.
    from: EndpointId,
    fabric_addr: Vec<u8>,
    credits: u32,
    max_payload: usize,
    /// A scalar side's route on its node's hub.
    route: u16,
}

/// The channel state of a local endpoint.
#[derive(Default)]
pub(super) struct EndpointChannel {
    binding: Binding<PeerOpen>,
    /// The other endpoint, once connected.
    peer: Option<EndpointId>,
    /// The side slot reserved by an open.
    side: Option<ChannelHandle>,
}

impl EndpointChannel {
    pub(super) fn is_connected(&self) -> bool {
        self.binding.is_connected()
    }

    pub(super) fn status_flags(&self) -> u64 {
        self.binding.status_flags()
    }
}

type SideGuard<'a> = parking_lot::MutexGuard<'a, Option<Side>>;

/// The node's channel sides, one lock each, so channels never contend with each other or
/// with messages.
pub(super) struct ChannelTable {
    /// parking_lot's: lock and unlock inline, with no poisoning to check, in every data
    /// call. A panic under a side lock (the C ABI catches it) leaves the side as it was,
    /// for the application's calls and for background progress alike.
    sides: Box<[parking_lot::Mutex<Option<Side>>]>,
    /// Bumped by every application call on a side: the background thread leaves sides
    /// in use alone (taking their lock could stall the application's next call).
    touched: Box<[AtomicU32]>,
    /// Slots ever reserved (one bit each): what a blocked call progresses besides its own
    /// side, and what the background thread visits. Never cleared: a stale bit costs one
    /// `try_lock` of an empty slot.
    used: [AtomicU64; MAX_SIDES / 64],
    generation: AtomicU32,
    /// Receive pools: `(start, end, slot)`, to find the channel of a released buffer.
    pools: Mutex<Vec<(usize, usize, usize)>>,
    /// Endpoints of retired sides, with when they retired: closed [`RETIRED_GRACE`] later
    /// (or at finalize). shm hands an endpoint of the same process its peer's own mapping,
    /// which closing the peer unmaps: the other side, still open, would crash in its next
    /// CQ read if a message of ours (the last credit return, the connect handshake of a
    /// first one) was still in its queue.
    retired: Mutex<VecDeque<(Instant, Endpoint)>>,
    /// The endpoint all scalar sides share, opened with the first.
    hub: Mutex<Option<Arc<ScalarHub>>>,
    /// Which sides hold completed requests in their [`Outbox`], for `flush_completed`.
    done: Arc<DoneFlags>,
    /// Completions of sides emptied before they were flushed.
    orphans: Mutex<Outbox>,
    /// The side a packet was last released into: a hint, checked against the side's pool
    /// under its lock, that spares the pool list's lock.
    last_pool: AtomicUsize,
    /// Whether a blocked call polls the sides with transfers under way after every poll of
    /// its own ([`BusyBurst`]: providers under ofi_rxm, whose sends move only while their
    /// CQ is read) or once per burst (elsewhere: on shm the extra reads of a sender's CQ
    /// slowed the receiver).
    busy_every_poll: bool,
}

/// How long a retired side's endpoint stays open, unused, before it is closed.
const RETIRED_GRACE: Duration = Duration::from_secs(1);

impl ChannelTable {
    /// `busy_every_poll`: see [`ChannelTable::busy_every_poll`].
    pub(super) fn new(busy_every_poll: bool) -> ChannelTable {
        ChannelTable {
            busy_every_poll,
            sides: (0..MAX_SIDES)
                .map(|_| parking_lot::Mutex::new(None))
                .collect(),
            touched: (0..MAX_SIDES).map(|_| AtomicU32::new(0)).collect(),
            used: Default::default(),
            generation: AtomicU32::new(1),
            pools: Mutex::new(Vec::new()),
            retired: Mutex::new(VecDeque::new()),
            hub: Mutex::new(None),
            done: Arc::new(DoneFlags::default()),
            orphans: Mutex::new(Outbox::new(ORPHAN_SLOT, Arc::new(DoneFlags::default()))),
            last_pool: AtomicUsize::new(0),
        }
    }

    /// An empty outbox for side slot `slot`.
    fn outbox(&self, slot: usize) -> Outbox {
        Outbox::new(slot, self.done.clone())
    }

    /// The scalar hub, opened on first use.
    fn hub(&self, fab: &Fab, capacity: usize) -> std::result::Result<Arc<ScalarHub>, OfiError> {
        let mut hub = lock(&self.hub);
        if let Some(h) = &*hub {
            return Ok(h.clone());
        }
        let h = Arc::new(ScalarHub::open(&fab.domain, fab.cq_wait, capacity)?);
        *hub = Some(h.clone());
        Ok(h)
    }

    /// Drops every side (finalize): their endpoints close, pools stay only while packets are
    /// held.
    pub(super) fn clear(&self) {
        for s in self.sides.iter() {
            s.lock().take();
        }
        lock(&self.pools).clear();
        lock(&self.retired).clear();
        lock(&self.hub).take();
    }

    /// Empties side slot `slot` (locked in `g`): its endpoint, if still open, is parked,
    /// and its receive pool leaves the release lookup.
    fn vacate(&self, g: &mut Option<Side>, slot: usize) {
        if let Some(mut io) = g.take().and_then(|s| s.io) {
            if !io.out.is_empty() {
                lock(&self.orphans).take_from(&mut io.out);
                self.done.set(ORPHAN_SLOT);
            }
            self.park(io.ep.take());
        }
        lock(&self.pools).retain(|p| p.2 != slot);
    }

    /// Keeps the endpoint of a retired side open, unused, for [`RETIRED_GRACE`].
    fn park(&self, ep: Option<Endpoint>) {
        if let Some(ep) = ep {
            lock(&self.retired).push_back((Instant::now(), ep));
        }
    }

    /// Closes the parked endpoints whose grace is over (background thread).
    pub(super) fn close_retired(&self) {
        let Ok(mut retired) = self.retired.try_lock() else {
            return;
        };
        while retired
            .front()
            .is_some_and(|(at, _)| at.elapsed() >= RETIRED_GRACE)
        {
            retired.pop_front();
        }
    }

    /// Progresses every other side that is free right now (a blocked call between its
    /// polls): with manual-progress providers (tcp;ofi_rxm) a side's large sends and
    /// credit returns move only while someone reads its CQ, and the application may be
    /// blocked on another side of the node. Completions wait in the sides' outboxes.
    /// `busy_only`: just those with transfers under way ([`Side::has_transfers`]), which
    /// may need every poll they can get: a large tcp;ofi_rxm send moves only while its
    /// side's CQ is read (the receiver's reads of a rendezvous packet are served there).
    /// Returns completions seen.
    fn progress_others(&self, own: usize, busy_only: bool) -> usize {
        self.progress_used(|slot| slot == own, busy_only)
    }

    /// Progresses each side ever opened whose lock is free, except those `skip` names
    /// (and, with `busy_only`, those without transfers under way); returns completions seen.
    fn progress_used(&self, mut skip: impl FnMut(usize) -> bool, busy_only: bool) -> usize {
        self.used_now()
            .iter()
            .filter(|&slot| !skip(slot))
            .map(|slot| self.progress_slot(slot, busy_only))
            .sum()
    }

    /// The sides other than `own` with transfers under way whose lock is free right now.
    fn busy_sides(&self, own: usize) -> SideSet {
        let mut set = SideSet::default();
        for slot in self.used_now().iter().filter(|&slot| slot != own) {
            if let Some(g) = self.sides[slot].try_lock() {
                if g.as_ref().is_some_and(Side::has_transfers) {
                    set.insert(slot);
                }
            }
        }
        set
    }

    /// Progresses the sides in `set` whose lock is free; returns completions seen.
    fn progress_set(&self, set: &SideSet) -> usize {
        set.iter().map(|slot| self.progress_slot(slot, false)).sum()
    }

    /// Progresses side `slot` if its lock is free (and, with `busy_only`, it has transfers
    /// under way); returns completions seen.
    fn progress_slot(&self, slot: usize, busy_only: bool) -> usize {
        match self.sides[slot].try_lock() {
            Some(mut g) => g
                .as_mut()
                .filter(|s| !busy_only || s.has_transfers())
                .map_or(0, Side::progress),
            None => 0,
        }
    }

    /// The slots ever reserved, as they are now.
    fn used_now(&self) -> SideSet {
        SideSet(std::array::from_fn(|w| {
            self.used[w].load(Ordering::Relaxed)
        }))
    }

    /// What `progress_idle` remembers of the touch counters, initially.
    pub(super) fn touch_memory(&self) -> Vec<u32> {
        vec![0; self.touched.len()]
    }

    /// Progresses the sides no application call touched since the last time (background
    /// thread; `seen` is its memory of the touch counters); returns completions seen.
    pub(super) fn progress_idle(&self, seen: &mut [u32]) -> usize {
        self.progress_used(
            |slot| {
                let now = self.touched[slot].load(Ordering::Relaxed);
                std::mem::replace(&mut seen[slot], now) != now
            },
            false,
        )
    }
}

/// The flag of the table's orphan outbox in [`DoneFlags`] (a bit past the side slots).
const ORPHAN_SLOT: usize = MAX_SIDES;

/// One bit per side slot (and one for the orphans): set when its outbox got its first
/// completion, cleared when `flush_completed` takes them.
#[derive(Default)]
struct DoneFlags([AtomicU64; MAX_SIDES / 64 + 1]);

impl DoneFlags {
    fn set(&self, slot: usize) {
        self.0[slot / 64].fetch_or(1 << (slot % 64), Ordering::Release);
    }

    fn clear(&self, slot: usize) {
        self.0[slot / 64].fetch_and(!(1 << (slot % 64)), Ordering::Relaxed);
    }

    /// The flagged slots, as they are now.
    fn flagged(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(w, word)| {
            let mut bits = word.load(Ordering::Acquire);
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let b = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    w * 64 + b
                })
            })
        })
    }
}

/// Requests a side completed under its lock, until `flush_completed` records them in the
/// node's request table with no side lock held (the state lock is never taken under one).
/// Its capacity is kept, so a steady stream of completions allocates nothing.
struct Outbox {
    slot: usize,
    flags: Arc<DoneFlags>,
    completed: Vec<(RequestHandle, Status, usize)>,
    /// Packets handed to completed `pktchan_recv_i` requests.
    delivered: Vec<(RequestHandle, Packet)>,
}

impl Outbox {
    fn new(slot: usize, flags: Arc<DoneFlags>) -> Outbox {
        Outbox {
            slot,
            flags,
            completed: Vec::with_capacity(16),
            delivered: Vec::new(),
        }
    }

    fn complete(&mut self, request: RequestHandle, status: Status, len: usize) {
        if self.completed.is_empty() {
            self.flags.set(self.slot);
        }
        self.completed.push((request, status, len));
    }

    fn deliver(&mut self, request: RequestHandle, packet: Packet) {
        let len = packet.len();
        self.delivered.push((request, packet));
        self.complete(request, Status::MCAPI_SUCCESS, len);
    }

    fn is_empty(&self) -> bool {
        self.completed.is_empty()
    }

    /// Moves `other`'s completions here.
    fn take_from(&mut self, other: &mut Outbox) {
        self.completed.append(&mut other.completed);
        self.delivered.append(&mut other.delivered);
    }
}

impl Completions for Outbox {
    fn complete(&mut self, request: RequestHandle, status: Status, len: usize) {
        Outbox::complete(self, request, status, len);
    }
}

/// One side of a channel, reserved by an open; its fabric part exists once both sides opened.
pub(super) struct Side {
    generation: u32,
    kind: ChannelKind,
    port: u32,
    /// The other endpoint's node among our peers and the run of it this side is bound to
    /// (liveness: a later run of that node is another process); `None`: this node.
    peer: Option<PeerRun>,
    /// Both sides open: data calls are allowed.
    ready: bool,
    /// Closed here: data calls are refused.
    closed: bool,
    /// The other side closed or died (the status data calls then get).
    peer_gone: Option<Status>,
    /// When a request waiting on this side next checks that the other node is alive.
    next_liveness_check: Option<Instant>,
    timeout: Option<Duration>,
    max_payload: usize,
    io: Option<SideIo>,
    /// The endpoint this side's open was announced to.
    announced_to: Option<EndpointId>,
}

/// The fabric part of an open side.
struct SideIo {
    // Declared before the objects it is bound to and before the memory it uses.
    ep: Option<Endpoint>,
    cq: CompletionQueue,
    /// Read buffer of `progress`, kept here: clearing a fresh one on every poll showed.
    cq_buf: [Completion; 16],
    av: AddressVector,
    dest: FiAddr,
    data: SideData,
    /// A scalar side's place on the hub (`ep`, `cq` and `av` are the hub's then).
    hub: Option<HubSide>,
    /// Requests completed here, until flushed.
    out: Outbox,
}

struct HubSide {
    hub: Arc<ScalarHub>,
    route: u16,
    /// The other side's route on its node's hub.
    peer_route: u16,
    items: [HubItem; hub::READ_BURST],
}

impl Drop for HubSide {
    /// What still comes for the side is dropped.
    fn drop(&mut self) {
        self.hub.detach(self.route);
    }
}

enum SideData {
    /// A sender before the receiver's open arrived.
    Unconnected,
    Send(SendData),
    Recv(RecvData),
}

/// A send side's memory and its state machine (`semantics::channel_side`).
struct SendData {
    state: SendSide<SendBuffer>,
    /// Where the receiver's credit messages arrive, one 8-byte slot each.
    credit_slots: MemoryRegion,
    staging: MemoryRegion,
    inject_size: usize,
    /// Credit receives that completed during a zero-copy send, to post again after it.
    credit_reposts: Vec<usize>,
}

impl UserBuffer for SendBuffer {
    fn byte_len(&self) -> usize {
        self.len()
    }
}

/// The packet of a `pktchan_send_i`.
enum Source<'a> {
    /// To be copied.
    Copy(&'a [u8]),
    /// Zero copy where possible.
    User(SendBuffer),
}

impl Source<'_> {
    fn len(&self) -> usize {
        match self {
            Source::Copy(d) => d.len(),
            Source::User(b) => b.len(),
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Source::Copy(d) => d,
            Source::User(b) => b.as_slice(),
        }
    }
}

impl SendData {
    /// Handles a sender's completion (`ok`: not an error completion); returns the credit
    /// receive slot of a credit message (to be posted again).
    fn event(&mut self, ctx: u64, ok: bool, out: &mut Outbox) -> Option<usize> {
        let slot = (ctx & CTX_MASK) as usize;
        match ctx & !CTX_MASK {
            CTX_CREDIT if ok => {
                let mut word = [0u8; 8];
                self.credit_slots.read(slot * 8, &mut word);
                self.state.credits_returned(u64::from_le_bytes(word) as u32);
                return Some(slot);
            }
            CTX_STAGING => self.state.staged_sent(slot, ok),
            CTX_ZERO_COPY => self.state.zero_copy_sent(ok),
            CTX_USER => self.state.user_sent(slot, ok, out),
            _ => {}
        }
        None
    }
}

/// What a post to the fabric did, for the state machine.
#[inline(always)]
fn posted(r: &std::result::Result<(), OfiError>) -> Posted {
    match r {
        Ok(()) => Posted::Sent,
        Err(e) if e.is_again() => Posted::Again,
        Err(_) => Posted::Failed,
    }
}

/// A receive side's pool and its state machine (`semantics::channel_side`): the state
/// machine decides, this only moves memory and posts.
struct RecvData {
    pool: MemoryRegion,
    state: RecvSide,
}

impl RecvData {
    /// Posts buffer or slot `b` to `ep`.
    #[inline(always)]
    fn post(&self, ep: &Endpoint, b: usize) -> std::result::Result<(), OfiError> {
        let size = self.state.buffer_size();
        let buf = self.pool.slice(b * size, size)?;
        if self.state.posting() == Posting::MultiRecv {
            ep.recv_multi(buf, b as u64)
        } else {
            ep.recv(buf, FiAddr::UNSPEC, b as u64)
        }
    }

    /// Carries out what the state machine said about a buffer: a [`Repost::Now`] is posted
    /// (listed for later if it cannot be, or the endpoint is closed).
    #[inline(always)]
    fn repost(&mut self, ep: &Option<Endpoint>, what: Repost) {
        if let Repost::Now(b) = what {
            let ok = ep.as_ref().is_some_and(|ep| self.post(ep, b).is_ok());
            self.state.posted(b, ok);
        }
    }

    /// A packet handed to the application.
    fn packet(&self, item: Item) -> Packet {
        Packet {
            pool: self.pool.clone(),
            offset: item.offset,
            len: item.len,
        }
    }
}

/// What a channel request waits for.
#[derive(Clone, Copy)]
pub(super) enum ChanReq {
    Connect,
    Open { port: u32, handle: ChannelHandle },
    Close { port: u32, handle: ChannelHandle },
    Send { handle: ChannelHandle },
    Recv { handle: ChannelHandle },
}

/// CQ polls a blocked channel call makes under the side lock before it backs off once.
const POLL_BURST: usize = 32;

/// The node's other sides with transfers under way, found at the start of a blocked call's
/// burst and polled after each poll of the call's own side: on tcp;ofi_rxm a sender's data
/// moves only while its side's CQ is read, and the application may be blocked on another
/// side (perftest's zero-copy sender waits for the receiver's acknowledgement). Polled
/// once per burst instead, the pattern alone lost a fifth of its 256 KiB bandwidth
/// (`channel_pattern`, `ACK_POLLS=32`).
struct BusyBurst {
    /// The call's own side; `None` once the others were looked for (decoded only then: on
    /// providers that poll them once per burst, a receive spends nothing on this).
    own: Option<ChannelHandle>,
    sides: SideSet,
    /// Completions seen on them (waiting in their outboxes for the caller's flush).
    seen: usize,
}

impl BusyBurst {
    fn new(own: ChannelHandle) -> BusyBurst {
        BusyBurst {
            own: Some(own),
            sides: SideSet::default(),
            seen: 0,
        }
    }

    /// After a poll of the own side that found nothing: the busy sides' turn (looked for
    /// at the first, so a call served at once spends nothing on them).
    fn poll(&mut self, table: &ChannelTable) {
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

fn side_status(kind: ChannelKind) -> Status {
    // Scalar calls have no MCAPI_ERR_TRANSMISSION in their ERRORS tables.
    match kind {
        ChannelKind::Packet => Status::MCAPI_ERR_TRANSMISSION,
        ChannelKind::Scalar => Status::MCAPI_ERR_GENERAL,
    }
}

impl Side {
    /// Reads the side's CQ and dispatches; returns completions seen.
    #[inline(always)]
    fn progress(&mut self) -> usize {
        let (kind, payload, gone) = (self.kind, self.max_payload, self.peer_gone.is_some());
        let seen = self
            .io
            .as_mut()
            .map_or(0, |io| io.progress(kind, payload, gone));
        if matches!(&self.io, Some(SideIo { data: SideData::Send(s), .. }) if s.state.is_broken()) {
            // Later sends fail instead of stalling behind the lost packet.
            self.peer_gone.get_or_insert(side_status(kind));
        }
        seen
    }

    /// Whether requests wait on this side: queued or in-flight (zero-copy) `send_i` packets,
    /// or pending `recv_i`s.
    fn has_waiting_requests(&self) -> bool {
        match &self.io {
            Some(SideIo {
                data: SideData::Send(s),
                ..
            }) => s.state.has_queued() || s.state.has_in_flight(),
            Some(SideIo {
                data: SideData::Recv(r),
                ..
            }) => r.state.has_pending(),
            _ => false,
        }
    }

    /// Whether transfers are under way here: requests waiting on the side, or copied
    /// packets posted to the fabric and not yet complete.
    fn has_transfers(&self) -> bool {
        self.has_waiting_requests()
            || matches!(&self.io, Some(SideIo { data: SideData::Send(s), .. })
                if s.state.has_staged_in_flight())
    }

    /// The other node to check for liveness, at most every 20 ms while requests wait here
    /// and nothing moves (the slow path of waiting on a request).
    fn liveness_check_due(&mut self, progressed: bool) -> Option<PeerRun> {
        if progressed || !self.has_waiting_requests() {
            return None;
        }
        if self.peer_gone.is_some() && !self.awaits_announced() {
            return None;
        }
        let now = Instant::now();
        if self.next_liveness_check.is_some_and(|t| now < t) {
            return None;
        }
        self.next_liveness_check = Some(now + Duration::from_millis(20));
        self.peer
    }

    /// Whether `addr` lies in this side's receive pool.
    fn pool_contains(&self, addr: usize) -> bool {
        matches!(&self.io, Some(SideIo { data: SideData::Recv(r), .. })
            if addr.wrapping_sub(r.pool.addr()) < r.pool.len())
    }

    /// Whether a received item waits in the FIFO (taken without reading the CQ first).
    fn has_queued_item(&self) -> bool {
        matches!(&self.io, Some(SideIo { data: SideData::Recv(r), .. }) if r.state.available() > 0)
    }

    /// Posts the listed packet buffers (shm: those released since the last receive call)
    /// before this call reads the CQ: a ping-pong has sent its reply by now, and a stream
    /// posts each buffer one call after its release.
    fn post_released(&mut self) {
        if let Some(io) = self.io.as_mut().filter(|io| io.slots_listed()) {
            io.repost_slots();
        }
    }

    /// Whether the sender closed announcing items that have not all arrived.
    fn awaits_announced(&self) -> bool {
        matches!(&self.io, Some(SideIo { data: SideData::Recv(r), .. })
            if r.state.awaits_announced())
    }

    /// The other side's node is gone: data calls fail from now on (once what arrived is
    /// received), whatever a close announced.
    fn peer_died(&mut self) {
        self.peer_gone.get_or_insert(side_status(self.kind));
        if let Some(SideIo {
            data: SideData::Recv(r),
            ..
        }) = &mut self.io
        {
            r.state.sender_died();
        }
    }

    fn check_usable(&self) -> Result<&SideIo> {
        match &self.io {
            Some(io) if self.ready && !self.closed => Ok(io),
            _ => Err(Status::MCAPI_ERR_CHAN_INVALID),
        }
    }
}

impl SideIo {
    fn progress(&mut self, kind: ChannelKind, payload: usize, gone: bool) -> usize {
        let seen = if self.hub.is_some() {
            self.progress_hub()
        } else {
            self.progress_cq(kind)
        };
        match &mut self.data {
            SideData::Send(s) => {
                if s.state.has_queued() || s.state.has_in_flight() {
                    self.advance_queued(payload, gone);
                }
            }
            // A credit return that could not be sent goes now, whoever progresses the side
            // (a blocking receive, a wait on a `pktchan_recv_i`, `pktchan_available`, the
            // background thread).
            SideData::Recv(r) => {
                if let Some(n) = r.state.credits_to_flush() {
                    self.return_credits(n);
                } else if seen == 0 && r.state.any_to_post() {
                    // Idle: a ping-pong's receiver posts here while it waits for the
                    // reply, not between a scalar's arrival and its own reply.
                    self.repost_slots();
                }
            }
            SideData::Unconnected => {}
        }
        seen
    }

    /// Reads the side's own CQ until it is drained; returns completions seen.
    #[inline]
    fn progress_cq(&mut self, kind: ChannelKind) -> usize {
        let mut seen = 0;
        // Without its endpoint (closed, or parked after retirement) the CQ has nothing to
        // report, and reading it would progress a parked endpoint.
        while self.ep.is_some() {
            match self.cq.read(&mut self.cq_buf) {
                Ok(n) => {
                    seen += n;
                    for i in 0..n {
                        let c = self.cq_buf[i];
                        self.dispatch(&c, kind);
                    }
                    if n < self.cq_buf.len() {
                        break;
                    }
                }
                Err(e) => {
                    if !self.read_failed(e) {
                        break;
                    }
                }
            }
        }
        seen
    }

    /// An error completion (handled; read on) or a failing CQ (`false`: stop reading).
    #[cold]
    #[inline(never)]
    fn read_failed(&mut self, e: OfiError) -> bool {
        match e {
            OfiError::Completion(e) => {
                match &mut self.data {
                    SideData::Send(s) => {
                        s.event(e.context, false, &mut self.out);
                    }
                    // A plain receive that failed (say, truncated): its scalar slot or packet
                    // buffer is free again (a scalar slot never holds a packet).
                    SideData::Recv(r) => {
                        let what = r.state.receive_failed(e.context as usize);
                        r.repost(&self.ep, what);
                    }
                    _ => {}
                }
                true
            }
            _ => false,
        }
    }

    /// Takes a scalar side's messages from the hub until it has no more for the side.
    #[inline(never)]
    fn progress_hub(&mut self) -> usize {
        let mut seen = 0;
        while self.ep.is_some() {
            match self.read_hub() {
                Some(n) => {
                    seen += n;
                    if n < hub::READ_BURST {
                        break;
                    }
                }
                None => break,
            }
        }
        seen
    }

    /// Takes one burst of a scalar side's messages from the hub; `None` when there were
    /// none (or the read failed).
    fn read_hub(&mut self) -> Option<usize> {
        let h = self.hub.as_mut()?;
        let n = h.hub.read(h.route, &mut h.items).ok().filter(|&n| n > 0)?;
        let mut credits_due = 0;
        for i in 0..n {
            let it = h.items[i];
            match &mut self.data {
                SideData::Send(s) if it.credit => s.state.credits_returned(it.value as u32),
                SideData::Recv(r) if !it.credit => {
                    let seq = super::driver::widen(r.state.received(), it.seq);
                    credits_due += r
                        .state
                        .hub_scalar_arrived(seq, it.value, usize::from(it.len))
                        .unwrap_or(0);
                }
                _ => {}
            }
        }
        if credits_due > 0 {
            self.return_credits(credits_due);
        }
        Some(n)
    }

    fn dispatch(&mut self, c: &Completion, kind: ChannelKind) {
        let ctx = c.context();
        let mut credits_due = None;
        match &mut self.data {
            SideData::Unconnected => {}
            SideData::Send(s) => {
                if let Some(slot) = s.event(ctx, true, &mut self.out) {
                    if let (Some(ep), Ok(b)) = (&self.ep, s.credit_slots.slice(slot * 8, 8)) {
                        let _ = ep.recv(b, FiAddr::UNSPEC, ctx);
                    }
                }
            }
            SideData::Recv(r) if kind == ChannelKind::Scalar => {
                // Whatever arrived used up slot `ctx`, which is listed to be posted again.
                let slot = ctx as u32;
                let scalar = (c.flags() & flags::REMOTE_CQ_DATA != 0).then(|| {
                    let len = c.len();
                    let value = r
                        .pool
                        .read_le(slot as usize * SCALAR_SLOT, len.min(SCALAR_SLOT));
                    (c.data() as u32, value, len)
                });
                credits_due = r.state.scalar_arrived(slot, scalar);
            }
            SideData::Recv(r) => {
                let b = ctx as usize;
                let multi_recv = r.state.posting() == Posting::MultiRecv;
                if c.flags() & flags::REMOTE_CQ_DATA != 0 {
                    let offset = if multi_recv {
                        c.buf_addr().wrapping_sub(r.pool.addr())
                    } else {
                        // `buf` is defined for multi-receive completions only.
                        b * r.state.buffer_size()
                    };
                    let (due, dropped) =
                        r.state.packet_arrived(b, offset, c.len(), c.data() as u32);
                    credits_due = due;
                    r.repost(&self.ep, dropped);
                }
                // A plain receive is done with its buffer at once, whatever arrived.
                if !multi_recv || c.flags() & flags::MULTI_RECV != 0 {
                    let what = r.state.buffer_done(b);
                    r.repost(&self.ep, what);
                }
            }
        }
        if let Some(n) = credits_due {
            self.return_credits(n);
        }
    }

    /// Whether a receive side has slots or buffers listed to be posted again.
    #[inline]
    fn slots_listed(&self) -> bool {
        matches!(&self.data, SideData::Recv(r) if r.state.any_to_post())
    }

    /// Posts a receive side's listed slots and buffers again. Before any credit return, so
    /// the sender never has more scalars or packets on their way than receives are posted
    /// (none arrives unexpected, to be buffered by the provider outside the channel's
    /// bound); and, for latency only, whenever the side is idle and (packets) when
    /// `pktchan_recv` starts. `false` if some could not be posted now: they stay listed, and
    /// credits wait for them.
    #[inline(never)]
    fn repost_slots(&mut self) -> bool {
        let (SideData::Recv(r), Some(ep)) = (&mut self.data, &self.ep) else {
            // Closed: nothing more arrives.
            return true;
        };
        while let Some(slot) = r.state.next_to_post() {
            if r.post(ep, slot as usize).is_err() {
                return false;
            }
            r.state.posted_again();
        }
        true
    }

    /// Posts queued `pktchan_send_i` packets that have credits now.
    fn advance_queued(&mut self, payload: usize, gone: bool) {
        let SideData::Send(s) = &mut self.data else {
            return;
        };
        if gone && s.state.receiver_gone(Instant::now(), ZERO_COPY_GRACE) {
            self.ep = None;
        }
        let Some(ep) = &self.ep else {
            // Closed (receiver gone, or a blocking send gave up): nothing goes any more.
            s.state.fail_in_flight(&mut self.out);
            s.state.fail_queued(&mut self.out);
            return;
        };
        if gone {
            // The receiver closed or died: what is still queued can never go.
            s.state.fail_queued(&mut self.out);
            return;
        }
        while let Some(next) = s.state.next_queued() {
            let r = match next {
                NextSend::Staged { slot, len, seq } => {
                    s.staging.slice(slot * payload, len).and_then(|buf| {
                        ep.send(
                            buf,
                            Some(u64::from(seq)),
                            self.dest,
                            CTX_STAGING | slot as u64,
                        )
                    })
                }
                NextSend::User { buf, zslot, seq } => {
                    ep.send_from(buf, u64::from(seq), self.dest, CTX_USER | zslot as u64)
                }
            };
            if !s.state.queued_posted(posted(&r), &mut self.out) {
                return;
            }
        }
    }

    /// Copies a `pktchan_send_i` packet into a free staging buffer of this send side;
    /// `None` when every one is taken. Staging buffers come back with their sends'
    /// completions, so the CQ is read first when none is free.
    fn stage(&mut self, data: &[u8], payload: usize) -> Option<Outgoing<SendBuffer>> {
        if matches!(&self.data, SideData::Send(s) if s.state.staging_exhausted()) {
            self.progress(ChannelKind::Packet, payload, false);
        }
        let SideData::Send(s) = &mut self.data else {
            return None;
        };
        let slot = s.state.take_staging()?;
        s.staging.write(slot * payload, data);
        Some(Outgoing::Staged {
            slot,
            len: data.len(),
        })
    }

    /// Whether `pktchan_send_i` packets wait on this send side (for credits or a slot).
    fn has_queued_send(&self) -> bool {
        matches!(&self.data, SideData::Send(s) if s.state.has_queued())
    }

    /// Sends `n` returned credits to the sender; keeps them if the provider is busy.
    fn return_credits(&mut self, n: u32) {
        // The credits let the sender fill emptied slots: they are posted first.
        let slots_posted = !self.slots_listed() || self.repost_slots();
        let SideData::Recv(r) = &mut self.data else {
            return;
        };
        if !r.state.sender_wants_credits() {
            // The sender closed (or died) and needs no more: its endpoint may be gone. While
            // packets it queued before closing are still to come, it needs the credits.
            return;
        }
        let sent = slots_posted
            && match (&self.ep, &self.hub) {
                (None, _) => false,
                (Some(_), Some(h)) => h.hub.send_credits(n, self.dest, h.peer_route).is_ok(),
                (Some(ep), None) => ep.inject(&u64::from(n).to_le_bytes(), self.dest).is_ok(),
            };
        if !sent {
            r.state.credits_not_sent(n);
        }
    }
}

/// Copies `data` into a free staging buffer of a send side and posts it with sequence
/// number `seq` (a credit is taken); `None` when every staging buffer is in use (the credit
/// is given back: try again after a send completion).
fn post_staged(
    s: &mut SendData,
    ep: Option<&Endpoint>,
    dest: FiAddr,
    data: &[u8],
    seq: u64,
    payload: usize,
) -> Option<std::result::Result<(), OfiError>> {
    let Some(slot) = s.state.take_staging() else {
        // The credit taken for it comes back.
        let _ = s.state.posted(Posted::Again, Status::MCAPI_SUCCESS);
        return None;
    };
    let Some(ep) = ep else {
        s.state.return_staging(slot);
        return Some(Err(OfiError::InvalidArgument("endpoint closed")));
    };
    s.staging.write(slot * payload, data);
    let r = s
        .staging
        .slice(slot * payload, data.len())
        .and_then(|buf| ep.send(buf, Some(seq), dest, CTX_STAGING | slot as u64));
    if r.is_err() {
        s.state.return_staging(slot);
    }
    Some(r)
}

impl NodeInner {
    /// Locks side `handle` after checking it is live and of the kind and direction the
    /// caller needs.
    #[inline(always)]
    fn side(
        &self,
        handle: ChannelHandle,
        kind: ChannelKind,
        dir: Direction,
    ) -> Result<SideGuard<'_>> {
        // Finalize dropped every side: on a finalized node any handle is refused as
        // MCAPI_ERR_NODE_NOTINIT (looked up only on this error path, never on the data path).
        let invalid = || self.unless_finalized(Status::MCAPI_ERR_CHAN_INVALID);
        let Some((slot, generation, k, d)) = handle.decode() else {
            return Err(invalid());
        };
        if k != kind || d != dir {
            return Err(invalid());
        }
        self.check_working()?;
        let g = self.channels.sides[slot].lock();
        if g.as_ref().is_some_and(|s| s.generation == generation) {
            // An application call uses the side: the background thread keeps away (only a
            // change matters, so racing plain stores will do).
            let touched = &self.channels.touched[slot];
            touched.store(
                touched.load(Ordering::Relaxed).wrapping_add(1),
                Ordering::Relaxed,
            );
            return Ok(g);
        }
        drop(g);
        Err(invalid())
    }

    /// Completes the requests that side operations finished.
    pub(super) fn flush_completed(&self) {
        let table = &self.channels;
        let mut flagged = table.done.flagged().peekable();
        if flagged.peek().is_none() {
            return;
        }
        let mut done: SmallVec<[(RequestHandle, Status, usize); 16]> = SmallVec::new();
        let mut delivered: SmallVec<[(RequestHandle, Packet); 4]> = SmallVec::new();
        for slot in flagged {
            let mut take = |out: &mut Outbox| {
                table.done.clear(slot);
                done.extend(out.completed.drain(..));
                delivered.extend(out.delivered.drain(..));
            };
            if slot == ORPHAN_SLOT {
                take(&mut lock(&table.orphans));
            } else if let Some(mut g) = table.sides[slot].try_lock() {
                // A side locked elsewhere keeps its flag: its holder flushes it.
                if let Some(io) = g.as_mut().and_then(|s| s.io.as_mut()) {
                    take(&mut io.out);
                } else {
                    table.done.clear(slot);
                }
            }
        }
        if done.is_empty() {
            return;
        }
        let mut st = lock(&self.state);
        st.delivered.extend(delivered);
        for &(req, status, size) in &done {
            let _ = st.requests.complete(req, status, size);
        }
    }

    /// Tells `peer` that the side on local endpoint `port` closed after sending `sent` items;
    /// not if the run of its node that the side was bound to (`run`) is gone: a later run
    /// never hears of an earlier run's channels.
    fn send_closed(&self, peer: EndpointId, port: u32, sent: u32, run: Option<PeerRun>) {
        if !self.peer_alive(run) {
            return;
        }
        // A local endpoint's id always encodes.
        let Ok(from) = self.endpoint_id(port) else {
            return;
        };
        let _ = self.channel_call(peer, ChannelOp::Closed { sent, from });
    }

    /// A closed send side withdrew a queued packet: the receiver must not wait for it.
    fn announce_close(&self, port: u32, sent: u32, run: Option<PeerRun>) {
        let peer = self
            .live_state()
            .ok()
            .and_then(|st| st.endpoints.get(&port).and_then(|ep| ep.channel.peer));
        if let Some(peer) = peer {
            self.send_closed(peer, port, sent, run);
        }
    }

    /// The id of local endpoint `port` (what channel operations name their sender by).
    fn endpoint_id(&self, port: u32) -> Result<EndpointId> {
        EndpointId::encode(self.domain_id, self.node_id, port)
    }

    /// Whether the run of the other side's node that a side is bound to is still there, as
    /// the liveness events received so far tell (no I/O: the watcher and the control server
    /// push them). `None`: the other side is on this node.
    fn peer_alive(&self, peer: Option<PeerRun>) -> bool {
        let Some(run) = peer else { return true };
        lock(&self.state).run_alive(run)
    }

    /// Handles a channel operation on local endpoint `port` (from the control plane, or
    /// directly when both ends are on this node). Answers a connect with the endpoint's
    /// attributes, anything else with `None`.
    pub(super) fn channel_frame(
        &self,
        port: u32,
        op: &ChannelOp,
    ) -> std::result::Result<Option<ChannelAttributes>, Status> {
        match *op {
            ChannelOp::Connect { peer, kind, end } => {
                let dir = match end {
                    ConnectEnd::Send => Direction::Send,
                    ConnectEnd::Receive { .. } => Direction::Receive,
                };
                let mut st = self.live_state()?;
                // A message taken is done with: its credit counts back before the check.
                self.repost_taken(&mut st);
                let ep = st
                    .endpoints
                    .get_mut(&port)
                    .ok_or(Status::MCAPI_ERR_ENDP_INVALID)?;
                let users = usize::from(ep.credits.in_use() || !ep.queue.is_empty());
                ep.channel.binding.check_connect(users)?;
                // The receiver checks compatibility with the sender's attributes.
                if let ConnectEnd::Receive { sender } = end {
                    if sender.max_payload > ep.max_payload as u64 || sender.priority != ep.priority
                    {
                        return Err(Status::MCAPI_ERR_ATTR_INCOMPATIBLE);
                    }
                }
                ep.channel.binding.connect(kind, dir);
                ep.channel.peer = Some(peer);
                // An open announced by an endpoint of a connect that failed half-way.
                if ep
                    .channel
                    .binding
                    .peer_info()
                    .is_some_and(|p| p.from != peer)
                {
                    ep.channel.binding.forget_peer_open();
                }
                let answer = ChannelAttributes {
                    max_payload: ep.max_payload as u64,
                    priority: ep.priority,
                };
                // Senders that sent messages here earlier sit on credits: take them back
                // (their next message is refused, spec 3.6).
                ep.credits.recall_all();
                self.collect_credit_controls(&mut st, port);
                self.flush_outbox(&mut st);
                Ok(Some(answer))
            }
            ChannelOp::UndoConnect => {
                let side = {
                    let mut st = self.live_state()?;
                    let Some(ep) = st.endpoints.get_mut(&port) else {
                        return Ok(None);
                    };
                    ep.channel.binding.undo_connect();
                    if ep.channel.binding.is_connected() {
                        return Ok(None);
                    }
                    ep.channel.peer = None;
                    ep.channel.side
                };
                // A retry of the same connect must announce the open again.
                if let Some((slot, generation, ..)) = side.and_then(|h| h.decode()) {
                    let mut g = self.channels.sides[slot].lock();
                    if let Some(side) = g.as_mut().filter(|s| s.generation == generation) {
                        side.announced_to = None;
                    }
                }
                Ok(None)
            }
            ChannelOp::Opened {
                from,
                credits,
                route,
                max_payload,
                ref fabric_addr,
            } => {
                let mut st = self.live_state()?;
                let ep = st
                    .endpoints
                    .get_mut(&port)
                    .ok_or(Status::MCAPI_ERR_ENDP_INVALID)?;
                // From an endpoint we are not connected to (a connect that failed half-way):
                // ignored. Before our connect arrives it is kept, and checked then.
                if ep.channel.peer.is_some_and(|p| p != from) {
                    return Ok(None);
                }
                ep.channel.binding.peer_opened(PeerOpen {
                    from,
                    fabric_addr: fabric_addr.clone(),
                    credits,
                    max_payload: max_payload as usize,
                    route,
                });
                Ok(None)
            }
            ChannelOp::Closed { sent, from } => {
                let handle = {
                    let mut st = self.live_state()?;
                    let ep = st
                        .endpoints
                        .get_mut(&port)
                        .ok_or(Status::MCAPI_ERR_ENDP_INVALID)?;
                    if ep.channel.peer != Some(from) {
                        return Ok(None);
                    }
                    ep.channel.binding.peer_closed();
                    ep.channel.side
                };
                if let Some((slot, generation, ..)) = handle.and_then(|h| h.decode()) {
                    let mut g = self.channels.sides[slot].lock();
                    if let Some(side) = g.as_mut().filter(|s| s.generation == generation) {
                        if side.peer_gone.is_none() {
                            side.peer_gone = Some(side_status(side.kind));
                        }
                        if let Some(SideIo {
                            data: SideData::Recv(r),
                            ..
                        }) = &mut side.io
                        {
                            r.state.sender_closed(sent);
                        }
                    }
                }
                Ok(None)
            }
        }
    }

    /// Sends a channel operation to the node of endpoint `to` (or handles it here); answers
    /// as [`NodeInner::channel_frame`].
    fn channel_call(&self, to: EndpointId, op: ChannelOp) -> Result<Option<ChannelAttributes>> {
        if (to.domain(), to.node()) == (self.domain_id, self.node_id) {
            return self.channel_frame(to.port(), &op);
        }
        // Only a connect starts something new; every other frame is about a binding made
        // with the run we knew, which a later run of the node never heard of: no waiting
        // for one to start.
        if !matches!(op, ChannelOp::Connect { .. })
            && self.live_state()?.run_lost(to.domain(), to.node())
        {
            return Err(Status::MCAPI_ERR_TRANSMISSION);
        }
        let peer = self.connect_peer(
            to.domain(),
            to.node(),
            Some(Instant::now() + Duration::from_secs(10)),
        )?;
        match self.control_call(
            peer,
            &Frame::Channel {
                port: to.port(),
                op,
            },
        )? {
            Frame::Value(_) => Ok(None),
            Frame::Connected { attributes } => Ok(Some(attributes)),
            Frame::Refused(code) => {
                Err(Status::from_code(code).unwrap_or(Status::MCAPI_ERR_GENERAL))
            }
            _ => Err(Status::MCAPI_ERR_GENERAL),
        }
    }

    /// Reserves a side slot for an open of local endpoint `port`.
    fn reserve_side(&self, kind: ChannelKind, dir: Direction, port: u32) -> Result<ChannelHandle> {
        let generation = self.channels.generation.fetch_add(1, Ordering::Relaxed) & 0xFF_FFFF;
        for (slot, s) in self.channels.sides.iter().enumerate() {
            let mut g = s.lock();
            if g.is_none() {
                *g = Some(Side::reserved(generation, kind, port));
                self.channels.used[slot / 64].fetch_or(1 << (slot % 64), Ordering::Relaxed);
                return Ok(ChannelHandle::new(slot, generation, kind, dir));
            }
        }
        // The open calls' ERRORS tables have no MCAPI_ERR_MEM_LIMIT.
        Err(Status::MCAPI_ERR_GENERAL)
    }

    /// Opens the fabric part of a channel end before the other side is known: endpoint,
    /// CQ and (receive side) the posted pool. Returns it with the payload limit it uses.
    fn open_side_io(
        &self,
        kind: ChannelKind,
        dir: Direction,
        max_payload: usize,
        slot: usize,
    ) -> std::result::Result<SideIo, OfiError> {
        if kind == ChannelKind::Scalar && self.scalars_on_hub() {
            return self.open_scalar_io(dir, slot);
        }
        let domain = &self.fab.domain;
        let cq = CompletionQueue::open(domain, 0, self.fab.cq_wait)?;
        let av = AddressVector::open(domain, 4)?;
        let payload = match kind {
            ChannelKind::Packet => max_payload,
            ChannelKind::Scalar => 8,
        };
        let multi_recv = dir == Direction::Receive && kind == ChannelKind::Packet && !self.is_shm();
        let min_multi_recv = multi_recv.then_some(payload.max(8));
        let ep = Endpoint::open(domain, &cq, &av, EndpointOptions { min_multi_recv })?;
        let capacity = match kind {
            ChannelKind::Packet => self.config.recv_buffers as u32,
            ChannelKind::Scalar => self.scalar_capacity(),
        };
        let data = match dir {
            Direction::Send => SideData::Unconnected,
            Direction::Receive => {
                // On shm (scalar sides here are shm's) one plain receive per credit: shm
                // matches a scalar or packet into a multi-receive buffer more slowly, all
                // between its arrival and the application's reply,
                // and a second completion when the buffer is full. An emptied slot is
                // posted again off that path (`repost_slots`). Elsewhere packets share
                // multi-receive buffers.
                let n = capacity as usize;
                let (buffer_size, posting) = match kind {
                    ChannelKind::Scalar => (SCALAR_SLOT, Posting::Plain),
                    ChannelKind::Packet if multi_recv => (payload + POOL_SLACK, Posting::MultiRecv),
                    ChannelKind::Packet => (payload.max(SCALAR_SLOT), Posting::Plain),
                };
                let pool = MemoryRegion::new(domain, n * buffer_size)?;
                let r = RecvData {
                    pool,
                    state: RecvSide::new(kind, posting, buffer_size, n, capacity),
                };
                for b in 0..n {
                    r.post(&ep, b)?;
                }
                SideData::Recv(r)
            }
        };
        Ok(SideIo {
            ep: Some(ep),
            cq,
            cq_buf: [Completion::default(); 16],
            av,
            dest: FiAddr::UNSPEC,
            data,
            hub: None,
            out: self.channels.outbox(slot),
        })
    }

    /// Whether scalar sides use the node's hub: wherever endpoints talk over connections
    /// (everything but shm), so that a node pair's scalars share one. On shm there is no
    /// connection to share, and reading a CQ shared with other sides adds the hub's lock and
    /// routing to every scalar round trip: scalar sides keep endpoints of their
    /// own there, as packet sides do.
    fn scalars_on_hub(&self) -> bool {
        !self.is_shm()
    }

    /// Whether the node runs over shm, where a packet or scalar matched into a plain
    /// receive costs the receiver less than one matched into a multi-receive buffer.
    fn is_shm(&self) -> bool {
        self.fab.provider == "shm" || self.fab.provider.starts_with("shm;")
    }

    /// Scalars a receive side takes before the sender waits for credits: `recv_buffers`,
    /// within what the hub's CQ holds for every side at once.
    fn scalar_capacity(&self) -> u32 {
        self.config.recv_buffers.min(hub::MAX_CAPACITY) as u32
    }

    /// The fabric part of a scalar side, on the node's hub (nothing of its own is posted:
    /// it takes its messages from the hub).
    fn open_scalar_io(&self, dir: Direction, slot: usize) -> std::result::Result<SideIo, OfiError> {
        let capacity = self.scalar_capacity();
        let hub = self.channels.hub(&self.fab, capacity as usize)?;
        let route = hub.attach(slot, capacity.max(8) as usize);
        let data = match dir {
            Direction::Send => SideData::Unconnected,
            // The hub's pool: its scalars are copied out, so no buffer of it is this side's.
            Direction::Receive => SideData::Recv(RecvData {
                pool: hub.pool().clone(),
                state: RecvSide::new(ChannelKind::Scalar, Posting::Hub, 8, 0, capacity),
            }),
        };
        Ok(SideIo {
            ep: Some(hub.endpoint().clone()),
            cq: hub.cq().clone(),
            cq_buf: [Completion::default(); 16],
            av: hub.av().clone(),
            dest: FiAddr::UNSPEC,
            data,
            hub: Some(HubSide {
                hub,
                route,
                peer_route: 0,
                items: [HubItem::default(); hub::READ_BURST],
            }),
            out: self.channels.outbox(slot),
        })
    }

    /// Completes the fabric part once the other side's open arrived: its address, and for a
    /// sender the credits and staging sized by the receiver's pool.
    fn connect_side_io(
        &self,
        io: &mut SideIo,
        kind: ChannelKind,
        payload: usize,
        peer: &PeerOpen,
    ) -> std::result::Result<(), OfiError> {
        match &mut io.hub {
            Some(h) => {
                io.dest = h.hub.peer(&peer.fabric_addr)?;
                h.peer_route = peer.route;
            }
            None => io.dest = io.av.insert(&peer.fabric_addr)?,
        }
        if let SideData::Unconnected = io.data {
            let domain = &self.fab.domain;
            let credits = peer.credits;
            // A scalar sender's credits come through the hub.
            let slots = match io.hub {
                Some(_) => 0,
                None => CreditReturn::max_in_flight(credits) as usize,
            };
            let credit_slots = MemoryRegion::new(domain, (slots * 8).max(8))?;
            if let (Some(ep), None) = (&io.ep, &io.hub) {
                for i in 0..slots {
                    ep.recv(
                        credit_slots.slice(i * 8, 8)?,
                        FiAddr::UNSPEC,
                        CTX_CREDIT | i as u64,
                    )?;
                }
            }
            // Scalars go out by inject: no staging.
            let staged = if kind == ChannelKind::Packet {
                credits.max(1) as usize
            } else {
                0
            };
            io.data = SideData::Send(SendData {
                state: SendSide::new(credits, staged),
                credit_slots,
                staging: MemoryRegion::new(domain, (staged * payload).max(8))?,
                inject_size: self.fab.inject_size,
                credit_reposts: Vec::with_capacity(slots),
            });
            // An empty message, which the receiver ignores (it carries no CQ data), makes
            // the provider set up its connection while the open completes: rxm connects on
            // a first send, in several steps 10 ms apart (its CM progress interval), which
            // the first packet would wait for. Not on shm, which has no connections, and
            // where the receiver's plain receives would take one for it without a credit.
            if let (Some(ep), None, ChannelKind::Packet) = (&io.ep, &io.hub, kind) {
                if !self.is_shm() {
                    let _ = ep.inject(&[], io.dest);
                }
            }
        }
        Ok(())
    }
}

impl Side {
    fn reserved(generation: u32, kind: ChannelKind, port: u32) -> Side {
        Side {
            generation,
            kind,
            port,
            peer: None,
            ready: false,
            closed: false,
            peer_gone: None,
            next_liveness_check: None,
            timeout: None,
            max_payload: 0,
            io: None,
            announced_to: None,
        }
    }
}

/// A set of channel sides by slot (a bit each: no allocation).
#[derive(Default)]
pub(super) struct SideSet([u64; MAX_SIDES / 64]);

impl SideSet {
    fn insert(&mut self, slot: usize) {
        self.0[slot / 64] |= 1 << (slot % 64);
    }

    fn contains(&self, slot: usize) -> bool {
        self.0[slot / 64] & (1 << (slot % 64)) != 0
    }

    fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// The slots in order (one step per member: it runs after every poll of a burst).
    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(word, &bits)| {
            std::iter::successors(Some(bits).filter(|&b| b != 0), |&b| {
                Some(b & (b - 1)).filter(|&b| b != 0)
            })
            .map(move |b| word * 64 + b.trailing_zeros() as usize)
        })
    }
}

/// The spin-then-sleep wait of a blocking channel call, with the endpoint's timeout and the
/// slow-path liveness check of the other side's node.
struct ChannelWait {
    backoff: Backoff,
    deadline: Option<Instant>,
    /// Backoffs so far: while spinning, the node's other sides without transfers under way
    /// are progressed on every [`OTHERS_EVERY`]th only, so many open sides do not slow the
    /// poll of this one.
    backoffs: u32,
}

/// See [`ChannelWait::backoffs`].
const OTHERS_EVERY: u32 = 8;

impl ChannelWait {
    fn new(timeout: Option<Duration>, spin: Duration) -> ChannelWait {
        ChannelWait {
            backoff: Backoff::new(spin),
            deadline: timeout.map(|t| Instant::now() + t),
            backoffs: 0,
        }
    }
}

impl Node {
    /// `mcapi_pktchan_connect_i`: connects `send` to `receive` as a packet channel. Any node
    /// may connect (also a third one); the result is known when this returns, so the
    /// request comes back completed.
    ///
    /// # Errors
    /// `MCAPI_ERR_ENDP_INVALID` (no such endpoint, or both the same),
    /// `MCAPI_ERR_CHAN_CONNECTED`, `MCAPI_ERR_CHAN_CLOSEPENDING`, `MCAPI_ERR_ENDP_GET_LIMIT`
    /// (other nodes send messages to the endpoint), `MCAPI_ERR_ATTR_INCOMPATIBLE`,
    /// `MCAPI_ERR_REQUEST_LIMIT`.
    pub fn pktchan_connect_i(
        &self,
        send: EndpointId,
        receive: EndpointId,
    ) -> Result<RequestHandle> {
        self.channel_connect(ChannelKind::Packet, send, receive)
    }

    /// `mcapi_sclchan_connect_i`: as [`Node::pktchan_connect_i`] for a scalar channel.
    ///
    /// # Errors
    /// As [`Node::pktchan_connect_i`].
    pub fn sclchan_connect_i(
        &self,
        send: EndpointId,
        receive: EndpointId,
    ) -> Result<RequestHandle> {
        self.channel_connect(ChannelKind::Scalar, send, receive)
    }

    fn channel_connect(
        &self,
        kind: ChannelKind,
        send: EndpointId,
        receive: EndpointId,
    ) -> Result<RequestHandle> {
        // The request is taken first, so that no failure after both endpoints are bound
        // can leave them connected.
        let h = {
            let mut st = self.inner.live_state()?;
            if send == receive {
                return Err(Status::MCAPI_ERR_ENDP_INVALID);
            }
            st.requests.alloc(Req::Chan(ChanReq::Connect))?
        };
        // An endpoint whose node cannot be reached (not running, finalized or dead) is no
        // valid endpoint: the connect's ERRORS table has no MCAPI_ERR_TRANSMISSION.
        let unreachable = |e: Status| match e {
            Status::MCAPI_TIMEOUT
            | Status::MCAPI_ERR_NODE_INVALID
            | Status::MCAPI_ERR_TRANSMISSION => Status::MCAPI_ERR_ENDP_INVALID,
            e => e,
        };
        let connected = self
            .inner
            .channel_call(
                send,
                ChannelOp::Connect {
                    peer: receive,
                    kind,
                    end: ConnectEnd::Send,
                },
            )
            .and_then(|sender| {
                // A connect is always answered with attributes.
                sender
                    .ok_or(Status::MCAPI_ERR_GENERAL)
                    .and_then(|sender| {
                        self.inner.channel_call(
                            receive,
                            ChannelOp::Connect {
                                peer: send,
                                kind,
                                end: ConnectEnd::Receive { sender },
                            },
                        )
                    })
                    .inspect_err(|_| {
                        let _ = self.inner.channel_call(send, ChannelOp::UndoConnect);
                    })
            });
        let mut st = lock(&self.inner.state);
        match connected {
            Ok(_) => {
                let _ = st.requests.complete(h, Status::MCAPI_SUCCESS, 0);
                Ok(h)
            }
            Err(e) => {
                let _ = st.requests.release(h);
                Err(unreachable(e))
            }
        }
    }

    /// `mcapi_pktchan_recv_open_i`: opens the receive side on local endpoint `endpoint`.
    /// The handle is usable once the request completes, which is when both sides are open.
    ///
    /// # Errors
    /// `MCAPI_ERR_ENDP_INVALID`, `MCAPI_ERR_CHAN_TYPE`, `MCAPI_ERR_CHAN_DIRECTION`,
    /// `MCAPI_ERR_CHAN_OPENPENDING`, `MCAPI_ERR_CHAN_OPEN`, `MCAPI_ERR_CHAN_CLOSEPENDING`,
    /// `MCAPI_ERR_REQUEST_LIMIT`.
    pub fn pktchan_recv_open_i(
        &self,
        endpoint: EndpointId,
    ) -> Result<(ChannelHandle, RequestHandle)> {
        self.channel_open(ChannelKind::Packet, Direction::Receive, endpoint)
    }

    /// `mcapi_pktchan_send_open_i`.
    ///
    /// # Errors
    /// As [`Node::pktchan_recv_open_i`].
    pub fn pktchan_send_open_i(
        &self,
        endpoint: EndpointId,
    ) -> Result<(ChannelHandle, RequestHandle)> {
        self.channel_open(ChannelKind::Packet, Direction::Send, endpoint)
    }

    /// `mcapi_sclchan_recv_open_i`.
    ///
    /// # Errors
    /// As [`Node::pktchan_recv_open_i`].
    pub fn sclchan_recv_open_i(
        &self,
        endpoint: EndpointId,
    ) -> Result<(ChannelHandle, RequestHandle)> {
        self.channel_open(ChannelKind::Scalar, Direction::Receive, endpoint)
    }

    /// `mcapi_sclchan_send_open_i`.
    ///
    /// # Errors
    /// As [`Node::pktchan_recv_open_i`].
    pub fn sclchan_send_open_i(
        &self,
        endpoint: EndpointId,
    ) -> Result<(ChannelHandle, RequestHandle)> {
        self.channel_open(ChannelKind::Scalar, Direction::Send, endpoint)
    }

    fn channel_open(
        &self,
        kind: ChannelKind,
        dir: Direction,
        endpoint: EndpointId,
    ) -> Result<(ChannelHandle, RequestHandle)> {
        let port = self.local_port(endpoint)?;
        // Reserved before taking the state lock: side locks are never taken under it.
        let handle = self.inner.reserve_side(kind, dir, port)?;
        let opened = (|| {
            let mut st = self.inner.live_state()?;
            if !st.requests.has_room() {
                return Err(Status::MCAPI_ERR_REQUEST_LIMIT);
            }
            let ep = st
                .endpoints
                .get_mut(&port)
                .ok_or(Status::MCAPI_ERR_ENDP_INVALID)?;
            ep.channel.binding.open(kind, dir)?;
            ep.channel.side = Some(handle);
            st.requests.alloc(Req::Chan(ChanReq::Open { port, handle }))
        })();
        match opened {
            Ok(req) => {
                self.drive_pending(req)?;
                Ok((handle, req))
            }
            Err(e) => {
                self.inner.free_side(handle);
                Err(e)
            }
        }
    }

    /// The channel sides `requests` transfer on (their waits poll those already).
    pub(super) fn transfer_sides(&self, requests: &[RequestHandle]) -> SideSet {
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
    pub(super) fn progress_busy_sides(&self, skip: &SideSet, backoff: &mut Backoff) {
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
    pub(super) fn drive_channel(&self, request: RequestHandle, c: ChanReq) -> Result<()> {
        match c {
            ChanReq::Open { port, handle } => self.advance_open(request, port, handle),
            ChanReq::Close { port, handle } => self.advance_close(request, port, handle),
            ChanReq::Send { handle } | ChanReq::Recv { handle } => {
                self.progress_side(handle);
                Ok(())
            }
            ChanReq::Connect => Ok(()),
        }
    }

    /// The CQ of channel side `handle`, to sleep on while waiting for it.
    fn side_cq(&self, handle: ChannelHandle) -> Option<CompletionQueue> {
        let (slot, generation, ..) = handle.decode()?;
        self.inner.channels.sides[slot]
            .lock()
            .as_ref()
            .filter(|s| s.generation == generation)
            .and_then(|s| s.io.as_ref())
            .map(|io| io.cq.clone())
    }

    /// Whether another side's read of the scalar hub left messages for side `handle` (its
    /// sleep would miss them: the hub's signal may have been reset by `fi_trywait`).
    fn hub_inbox_holds(&self, handle: ChannelHandle) -> bool {
        let Some((slot, generation, ..)) = handle.decode() else {
            return false;
        };
        self.inner.channels.sides[slot]
            .lock()
            .as_ref()
            .filter(|s| s.generation == generation)
            .and_then(|s| s.io.as_ref()?.hub.as_ref())
            .is_some_and(|h| h.hub.holds(h.route))
    }

    /// The CQs whose completions may finish `requests`: the node's, and those of the
    /// channel sides that channel sends and receives among them wait on.
    /// Empty where the node's CQs have no fd wait object, or when they are more than one
    /// sleep can watch (the sleeps are timed then).
    pub(super) fn request_cqs(&self, requests: &[RequestHandle]) -> SleepCqs {
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
        for cq in handles.into_iter().filter_map(|h| self.side_cq(h)) {
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
    fn progress_side(&self, handle: ChannelHandle) {
        let Some((slot, generation, ..)) = handle.decode() else {
            return;
        };
        let progress = |peer_died: bool| {
            let mut g = self.inner.channels.sides[slot].lock();
            let side = g.as_mut().filter(|s| s.generation == generation)?;
            if peer_died {
                side.peer_died();
            }
            let progressed = side.progress() > 0;
            self.inner.serve_pending_recvs(side);
            side.liveness_check_due(progressed)
        };
        let check = progress(false);
        self.inner.flush_completed();
        if let Some(peer) = check {
            if !self.inner.peer_alive(Some(peer)) {
                progress(true);
                self.inner.flush_completed();
            }
        }
    }

    fn advance_open(&self, request: RequestHandle, port: u32, handle: ChannelHandle) -> Result<()> {
        let (slot, generation, kind, dir) = handle.decode().ok_or(Status::MCAPI_ERR_GENERAL)?;
        // `gone`: the other endpoint, whose node died or finalized; if this endpoint is
        // still connected to it for this open, it is unconnected again (there is nothing
        // to close against).
        let fail = |status: Status, gone: Option<EndpointId>| -> Result<()> {
            let mut st = self.inner.live_state()?;
            if let Some(ep) = st.endpoints.get_mut(&port) {
                ep.channel.binding.abandon_open();
                let ours =
                    gone.is_some() && ep.channel.peer == gone && ep.channel.side == Some(handle);
                if ours && ep.channel.binding.peer_lost_before_open() {
                    ep.channel.peer = None;
                }
                ep.channel.side = None;
            }
            let _ = st.requests.complete(request, status, 0);
            drop(st);
            self.inner.free_side(handle);
            Ok(())
        };
        // What the endpoint knows now.
        let (connected, peer_id, peer_info, max_payload, timeout) = {
            let st = self.inner.live_state()?;
            let Some(ep) = st.endpoints.get(&port) else {
                drop(st);
                return fail(Status::MCAPI_ERR_ENDP_DELETED, None);
            };
            let b = &ep.channel.binding;
            match b.early_open_status(kind, dir) {
                Err(e) => {
                    drop(st);
                    return fail(e, None);
                }
                Ok(connected) => (
                    connected,
                    ep.channel.peer,
                    b.peer_info().cloned(),
                    ep.max_payload,
                    ep.timeout,
                ),
            }
        };
        let Some(peer_id) = peer_id.filter(|_| connected) else {
            return Ok(());
        };
        let peer = {
            let st = self.inner.live_state()?;
            let local =
                (peer_id.domain(), peer_id.node()) == (self.inner.domain_id, self.inner.node_id);
            if local {
                None
            } else {
                st.peer_run(peer_id.domain(), peer_id.node())
            }
        };
        // First time: open our fabric part; then tell the other side (again if a connect
        // that failed half-way had us announce to another endpoint).
        let announce = {
            let mut g = self.inner.channels.sides[slot].lock();
            let Some(side) = g.as_mut().filter(|s| s.generation == generation) else {
                return Ok(());
            };
            if side.io.is_none() {
                let io = match self.inner.open_side_io(kind, dir, max_payload, slot) {
                    Ok(io) => io,
                    Err(_) => {
                        drop(g);
                        return fail(Status::MCAPI_ERR_GENERAL, None);
                    }
                };
                if let (SideData::Recv(r), ChannelKind::Packet) = (&io.data, kind) {
                    let start = r.pool.addr();
                    lock(&self.inner.channels.pools).push((start, start + r.pool.len(), slot));
                }
                side.io = Some(io);
                side.timeout = timeout;
                side.max_payload = match kind {
                    ChannelKind::Packet => max_payload,
                    ChannelKind::Scalar => 8,
                };
            }
            if side.announced_to == Some(peer_id) {
                None
            } else {
                side.announced_to = Some(peer_id);
                if kind == ChannelKind::Packet && dir == Direction::Send {
                    // The endpoint's attribute may have changed since a first announce.
                    side.max_payload = max_payload;
                }
                side.io.as_ref().and_then(|io| {
                    let route = io.hub.as_ref().map_or(0, |h| h.route);
                    Some((io.ep.as_ref()?.address().to_vec(), route))
                })
            }
        };
        if let Some((addr, route)) = announce {
            // No liveness pre-check: the call itself finds a dead node (its closed control
            // connection, or 10 s unreachable), and a dead mark is not tied to one run.
            let credits = match (dir, kind) {
                (Direction::Receive, ChannelKind::Packet) => self.inner.config.recv_buffers as u32,
                (Direction::Receive, ChannelKind::Scalar) => self.inner.scalar_capacity(),
                (Direction::Send, _) => 0,
            };
            // A local endpoint's id always encodes.
            let from = match self.inner.endpoint_id(port) {
                Ok(from) => from,
                Err(e) => return fail(e, None),
            };
            let opened = ChannelOp::Opened {
                from,
                credits,
                route,
                max_payload: max_payload as u64,
                fabric_addr: addr,
            };
            if let Err(e) = self.inner.channel_call(peer_id, opened) {
                // Its node answered the connect, so one that cannot be reached now (the
                // call's 10 s to reach it) or is finalizing is gone.
                return match e {
                    Status::MCAPI_ERR_TRANSMISSION
                    | Status::MCAPI_TIMEOUT
                    | Status::MCAPI_ERR_NODE_NOTINIT => {
                        fail(Status::MCAPI_ERR_GENERAL, Some(peer_id))
                    }
                    e => fail(e, None),
                };
            }
        }
        let info = match peer_info {
            Some(info) => info,
            None if peer.is_some() && !self.inner.peer_alive(peer) => {
                // It may have opened (and gone) since we looked: then the open completes
                // and the data path reports the loss.
                let opened = self
                    .inner
                    .live_state()?
                    .endpoints
                    .get(&port)
                    .and_then(|ep| {
                        (ep.channel.peer == Some(peer_id))
                            .then(|| ep.channel.binding.peer_info().cloned())
                            .flatten()
                    });
                match opened {
                    Some(info) => info,
                    None => return fail(Status::MCAPI_ERR_GENERAL, Some(peer_id)),
                }
            }
            None => return Ok(()),
        };
        // Both sides open: finish the fabric part and complete.
        {
            let mut g = self.inner.channels.sides[slot].lock();
            let Some(side) = g.as_mut().filter(|s| s.generation == generation) else {
                return Ok(());
            };
            side.peer = peer;
            if kind == ChannelKind::Packet && dir == Direction::Send {
                side.max_payload = side.max_payload.min(info.max_payload);
            }
            let payload = side.max_payload;
            let Some(io) = side.io.as_mut() else {
                return Ok(());
            };
            if self
                .inner
                .connect_side_io(io, kind, payload, &info)
                .is_err()
            {
                drop(g);
                return fail(Status::MCAPI_ERR_GENERAL, None);
            }
            side.ready = true;
        }
        let mut st = self.inner.live_state()?;
        if let Some(ep) = st.endpoints.get_mut(&port) {
            ep.channel.binding.try_finish_open();
        }
        let _ = st.requests.complete(request, Status::MCAPI_SUCCESS, 0);
        Ok(())
    }

    /// `mcapi_pktchan_recv_close_i`: closes the receive side; packets not yet received are
    /// discarded, packets the application holds stay valid until released. Completes when
    /// both sides have closed.
    ///
    /// # Errors
    /// `MCAPI_ERR_CHAN_INVALID`, `MCAPI_ERR_CHAN_TYPE`, `MCAPI_ERR_CHAN_DIRECTION`,
    /// `MCAPI_ERR_CHAN_NOTOPEN`, `MCAPI_ERR_REQUEST_LIMIT`.
    pub fn pktchan_recv_close_i(&self, handle: ChannelHandle) -> Result<RequestHandle> {
        self.channel_close(handle, ChannelKind::Packet, Direction::Receive)
    }

    /// `mcapi_pktchan_send_close_i`: closes the send side; packets sent stay to be received.
    ///
    /// # Errors
    /// As [`Node::pktchan_recv_close_i`].
    pub fn pktchan_send_close_i(&self, handle: ChannelHandle) -> Result<RequestHandle> {
        self.channel_close(handle, ChannelKind::Packet, Direction::Send)
    }

    /// `mcapi_sclchan_recv_close_i`.
    ///
    /// # Errors
    /// As [`Node::pktchan_recv_close_i`].
    pub fn sclchan_recv_close_i(&self, handle: ChannelHandle) -> Result<RequestHandle> {
        self.channel_close(handle, ChannelKind::Scalar, Direction::Receive)
    }

    /// `mcapi_sclchan_send_close_i`.
    ///
    /// # Errors
    /// As [`Node::pktchan_recv_close_i`].
    pub fn sclchan_send_close_i(&self, handle: ChannelHandle) -> Result<RequestHandle> {
        self.channel_close(handle, ChannelKind::Scalar, Direction::Send)
    }

    fn channel_close(
        &self,
        handle: ChannelHandle,
        kind: ChannelKind,
        dir: Direction,
    ) -> Result<RequestHandle> {
        drop(self.inner.live_state()?);
        let (slot, generation, k, d) = handle.decode().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
        if k != kind {
            return Err(Status::MCAPI_ERR_CHAN_TYPE);
        }
        if d != dir {
            return Err(Status::MCAPI_ERR_CHAN_DIRECTION);
        }
        let port = {
            let g = self.inner.channels.sides[slot].lock();
            let side = g
                .as_ref()
                .filter(|s| s.generation == generation)
                .ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
            if side.io.is_none() || side.closed {
                return Err(Status::MCAPI_ERR_CHAN_NOTOPEN);
            }
            side.port
        };
        let (req, peer_id) = {
            let mut st = self.inner.live_state()?;
            if !st.requests.has_room() {
                return Err(Status::MCAPI_ERR_REQUEST_LIMIT);
            }
            let ep = st
                .endpoints
                .get_mut(&port)
                .ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
            ep.channel.binding.close(kind, dir)?;
            let peer_id = ep.channel.peer;
            (
                st.requests
                    .alloc(Req::Chan(ChanReq::Close { port, handle }))?,
                peer_id,
            )
        };
        // Closed, and what was sent counted, at one moment: no send slips in after the
        // count, and a cancel of a queued packet from now on announces its own count.
        let (cancelled, sent, run) = {
            let mut g = self.inner.channels.sides[slot].lock();
            let mut cancelled = Vec::new();
            let mut sent = 0;
            let mut run = None;
            if let Some(side) = g.as_mut() {
                side.closed = true;
                run = side.peer;
                if let Some(SideIo {
                    data: SideData::Send(s),
                    ..
                }) = &side.io
                {
                    sent = s.state.announced_count();
                }
                if let Some(io) = &mut side.io {
                    if let SideData::Recv(r) = &mut io.data {
                        // Packets not received yet are discarded; their buffers go back.
                        r.state.close();
                        while let Some(c) = r.state.take_completed() {
                            cancelled.push(c.request);
                        }
                        // Multi-receive buffers go back at once, as they do when released;
                        // plain slots wait to be posted as usual.
                        if r.state.posting() == Posting::MultiRecv {
                            io.repost_slots();
                        }
                    }
                }
            }
            (cancelled, sent, run)
        };
        {
            let mut st = lock(&self.inner.state);
            for h in cancelled {
                let _ = st
                    .requests
                    .complete(h, Status::MCAPI_ERR_REQUEST_CANCELLED, 0);
            }
        }
        // A dead peer cannot answer: the close then completes with an error below.
        if let Some(peer_id) = peer_id {
            self.inner.send_closed(peer_id, port, sent, run);
        }
        self.advance_close(req, port, handle)?;
        Ok(req)
    }

    fn advance_close(
        &self,
        request: RequestHandle,
        port: u32,
        handle: ChannelHandle,
    ) -> Result<()> {
        let (slot, generation, ..) = handle.decode().ok_or(Status::MCAPI_ERR_GENERAL)?;
        let (peer, gone, queued) = {
            let g = self.inner.channels.sides[slot].lock();
            match g.as_ref().filter(|s| s.generation == generation) {
                Some(side) => {
                    // Zero-copy packets posted but not completed count as queued: the
                    // endpoint must not close under them.
                    let queued = matches!(&side.io, Some(SideIo {
                        data: SideData::Send(s),
                        ..
                    }) if s.state.has_queued() || s.state.has_in_flight());
                    (side.peer, side.peer_gone, queued)
                }
                None => (None, None, false),
            }
        };
        // Liveness is asked (a control-socket check) only while the peer has not closed:
        // this runs on every poll of the close request.
        let peer_closed = self
            .inner
            .live_state()?
            .endpoints
            .get(&port)
            .is_some_and(|ep| ep.channel.binding.is_peer_closed());
        let peer_dead = !peer_closed && peer.is_some() && !self.inner.peer_alive(peer);
        let finished = {
            let mut st = self.inner.live_state()?;
            let Some(ep) = st.endpoints.get_mut(&port) else {
                let _ = st.requests.complete(request, Status::MCAPI_ERR_GENERAL, 0);
                return Ok(());
            };
            // A peer that died without closing never will: its side counts as closed, and
            // this close reports the loss.
            let lost = peer_dead && !ep.channel.binding.is_peer_closed();
            if lost {
                ep.channel.binding.peer_closed();
            }
            // Packets queued here still go out first, unless the receiver is gone.
            let receiver_here = gone.is_none() && !peer_dead;
            if (queued && receiver_here) || !ep.channel.binding.try_finish_close() {
                return Ok(());
            }
            ep.channel = EndpointChannel::default();
            let status = if lost {
                Status::MCAPI_ERR_GENERAL
            } else {
                Status::MCAPI_SUCCESS
            };
            let _ = st.requests.complete(request, status, 0);
            true
        };
        if finished {
            self.inner.retire_side(handle);
        }
        Ok(())
    }
}

impl NodeInner {
    /// Finalize: tells the other side of each open channel that this side is gone, as a
    /// close does, so that its calls fail at once instead of reaching an endpoint that is
    /// about to close (on shm within one process that memory is unmapped).
    pub(super) fn notify_channel_peers(&self) {
        let open: Vec<(u32, EndpointId, ChannelHandle)> = match self.live_state() {
            Ok(st) => st
                .endpoints
                .iter()
                .filter_map(|(&port, ep)| Some((port, ep.channel.peer?, ep.channel.side?)))
                .filter(|(_, peer, _)| {
                    (peer.domain(), peer.node()) != (self.domain_id, self.node_id)
                })
                .collect(),
            Err(_) => return,
        };
        for (port, peer, handle) in open {
            let Some((slot, generation, ..)) = handle.decode() else {
                continue;
            };
            let (sent, run) = match self.channels.sides[slot]
                .lock()
                .as_ref()
                .filter(|s| s.generation == generation && s.ready && !s.closed)
                .and_then(|s| Some((s.io.as_ref()?, s.peer)))
            {
                Some((
                    SideIo {
                        data: SideData::Send(s),
                        ..
                    },
                    run,
                )) => (s.state.sent(), run),
                Some((_, run)) => (0, run),
                None => continue,
            };
            self.send_closed(peer, port, sent, run);
        }
    }

    /// Frees a side slot at once (an open that never got its fabric part).
    fn free_side(&self, handle: ChannelHandle) {
        if let Some((slot, generation, ..)) = handle.decode() {
            let mut g = self.channels.sides[slot].lock();
            if g.as_ref().is_some_and(|s| s.generation == generation) {
                self.channels.vacate(&mut g, slot);
            }
        }
    }

    /// A side whose channel is disconnected: its endpoint closes now; a receive pool with
    /// packets the application still holds stays until they are released.
    fn retire_side(&self, handle: ChannelHandle) {
        let Some((slot, generation, ..)) = handle.decode() else {
            return;
        };
        let mut g = self.channels.sides[slot].lock();
        let Some(side) = g.as_mut().filter(|s| s.generation == generation) else {
            return;
        };
        // Completions already there count (zero-copy sends that did complete).
        side.progress();
        let held = match &mut side.io {
            Some(io) => {
                if matches!(&io.data, SideData::Send(s) if s.state.has_in_flight()) {
                    // Our only handle on zero-copy sends still posted: closing the endpoint
                    // now stops the provider reading their memory.
                    io.ep = None;
                } else {
                    self.channels.park(io.ep.take());
                }
                match &mut io.data {
                    SideData::Recv(r) => r.state.holds_packets(),
                    SideData::Send(s) => {
                        // Sends the departed receiver can no longer take fail, not vanish.
                        s.state.fail_queued(&mut io.out);
                        s.state.fail_in_flight(&mut io.out);
                        false
                    }
                    SideData::Unconnected => false,
                }
            }
            None => false,
        };
        side.closed = true;
        if !held {
            self.channels.vacate(&mut g, slot);
        }
        drop(g);
        self.flush_completed();
    }

    /// Completes pending `pktchan_recv_i` requests of a receive side from its FIFO.
    fn serve_pending_recvs(&self, side: &mut Side) {
        let Some(SideIo {
            data: SideData::Recv(r),
            out,
            ..
        }) = &mut side.io
        else {
            return;
        };
        // Once the sender closed or died and everything it sent was received, nothing more
        // comes: the rest end with its loss.
        r.state.serve_pending(side.peer_gone);
        while let Some(c) = r.state.take_completed() {
            match c.item {
                Some(item) => out.deliver(c.request, r.packet(item)),
                None => out.complete(c.request, c.status, c.len),
            }
        }
    }
}

impl Node {
    /// `mcapi_pktchan_send`: sends one packet; blocks while the receiver's pool is full
    /// (no credit) and until the provider is done with `data`. Packets up to the inject size
    /// are injected; larger ones go out from `data` itself without a copy where the provider
    /// allows (no `FI_MR_LOCAL`), else through the channel's registered staging buffers.
    ///
    /// # Errors
    /// `MCAPI_ERR_CHAN_INVALID`, `MCAPI_ERR_PKT_SIZE`, `MCAPI_TIMEOUT` (endpoint timeout),
    /// `MCAPI_ERR_TRANSMISSION` (the receiver closed or died).
    pub fn pktchan_send(&self, handle: ChannelHandle, data: &[u8]) -> Result<()> {
        let mut wait = None;
        loop {
            let mut g = self
                .inner
                .side(handle, ChannelKind::Packet, Direction::Send)?;
            let side = g.as_mut().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
            let sent = self.send_packet_now(side, data, &mut wait);
            drop(g);
            self.inner.flush_completed();
            if sent? {
                return Ok(());
            }
            self.channel_backoff(handle, wait.as_mut().expect("set when it must wait"))?;
        }
    }

    /// One pass of a blocking send: tries, and if the packet cannot go yet, reads the side's
    /// CQ (credits, completions) and tries once more. `Ok(false)`: it must wait (`wait` is
    /// set then; it is made only when needed, as it reads the clock).
    fn send_packet_now(
        &self,
        side: &mut Side,
        data: &[u8],
        wait: &mut Option<ChannelWait>,
    ) -> Result<bool> {
        side.check_usable()?;
        if data.len() > side.max_payload {
            return Err(Status::MCAPI_ERR_PKT_SIZE);
        }
        for progress_first in [false, true] {
            if progress_first {
                side.progress();
            }
            if let Some(status) = side.peer_gone {
                return Err(status);
            }
            if self.try_send_packet(side, data, wait)? {
                return Ok(true);
            }
        }
        let timeout = side.timeout;
        wait.get_or_insert_with(|| ChannelWait::new(timeout, self.inner.config.spin));
        Ok(false)
    }

    /// One attempt to send a packet: `Ok(false)` when it must wait (no credit, provider busy).
    fn try_send_packet(
        &self,
        side: &mut Side,
        data: &[u8],
        wait: &mut Option<ChannelWait>,
    ) -> Result<bool> {
        let (peer, timeout) = (side.peer, side.timeout);
        let io = side.io.as_mut().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
        let SideData::Send(s) = &mut io.data else {
            return Err(Status::MCAPI_ERR_CHAN_INVALID);
        };
        if s.state.has_queued() || !s.state.take_credit() {
            return Ok(false);
        }
        let seq = u64::from(s.state.seq());
        let ep = io.ep.as_ref().ok_or(Status::MCAPI_ERR_TRANSMISSION)?;
        let r = if data.len() <= s.inject_size {
            ep.inject_data(data, seq, io.dest)
        } else if timeout.is_some() {
            // A finite timeout must never leave the provider reading the caller's buffer
            // (only closing the endpoint would take it back): copy.
            match post_staged(s, Some(ep), io.dest, data, seq, side.max_payload) {
                Some(r) => r,
                None => return Ok(false),
            }
        } else {
            // Zero copy: the endpoint is lent to the send, which returns once the provider
            // is done with `data` (or has closed the endpoint, if we must give up).
            let ep = io.ep.take().ok_or(Status::MCAPI_ERR_TRANSMISSION)?;
            s.state.zero_copy_started();
            let cq = io.cq.clone();
            let out = &mut io.out;
            let deadline = wait
                .get_or_insert_with(|| ChannelWait::new(timeout, self.inner.config.spin))
                .deadline;
            let mut polls = 0u32;
            let mut backoff = self.inner.backoff();
            let mut outcome = Ok(());
            let (back, result) = ep.send_unregistered(data, seq, io.dest, CTX_ZERO_COPY, |_| {
                let mut buf = [Completion::default(); 16];
                match cq.read(&mut buf) {
                    Ok(n) => {
                        for c in &buf[..n] {
                            if let Some(slot) = s.event(c.context(), true, out) {
                                // Re-posted after the send: the endpoint is lent out.
                                s.credit_reposts.push(slot);
                            }
                        }
                    }
                    Err(OfiError::Completion(e)) => {
                        s.event(e.context, false, out);
                    }
                    Err(_) => s.state.zero_copy_sent(false),
                }
                if s.state.zero_copy() != ZeroCopy::Waiting {
                    return SendWait::Done;
                }
                // Liveness (a control-socket check) on the slow path, every 16th look.
                polls += 1;
                if polls.is_multiple_of(16)
                    && backoff.slow_check_due()
                    && !self.inner.peer_alive(peer)
                {
                    outcome = Err(Status::MCAPI_ERR_TRANSMISSION);
                    return SendWait::Abandon;
                }
                self.progress_busy_sides(&SideSet::default(), &mut backoff);
                if let Err(e) = backoff.wait_on(deadline, || SleepCqs::from_iter([cq.clone()])) {
                    outcome = Err(e);
                    return SendWait::Abandon;
                }
                SendWait::Pending
            });
            io.ep = back;
            match result {
                Ok(()) if s.state.zero_copy() == ZeroCopy::Done(false) => {
                    side.peer_gone = Some(Status::MCAPI_ERR_TRANSMISSION);
                    return Err(Status::MCAPI_ERR_TRANSMISSION);
                }
                Ok(()) => {
                    let sent = s.state.posted(Posted::Sent, Status::MCAPI_ERR_TRANSMISSION);
                    io.repost_credit_slots();
                    return sent;
                }
                Err(e) if e.is_again() => Err(e),
                Err(OfiError::InvalidArgument("send abandoned")) => {
                    side.peer_gone = Some(Status::MCAPI_ERR_TRANSMISSION);
                    return outcome.map(|_| false);
                }
                Err(OfiError::InvalidArgument(_)) => {
                    // No zero copy here: copy into staging and send from there.
                    match post_staged(s, io.ep.as_ref(), io.dest, data, seq, side.max_payload) {
                        Some(r) => r,
                        None => return Ok(false),
                    }
                }
                Err(e) => Err(e),
            }
        };
        s.state.posted(posted(&r), Status::MCAPI_ERR_TRANSMISSION)
    }

    /// Waits between attempts of a blocking channel call; checks the timeout and, on the
    /// slow path, that the other side's node is alive.
    fn channel_backoff(&self, handle: ChannelHandle, wait: &mut ChannelWait) -> Result<()> {
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
            || self.side_cq(handle).into_iter().collect(),
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

    /// `mcapi_pktchan_send_i`: sends one packet without blocking. The packet is copied into
    /// the channel's registered staging buffers, so the request completes (and `data` may be
    /// reused) as soon as it is handed to the fabric; while the receiver's pool is full it
    /// stays pending, in order.
    ///
    /// # Errors
    /// `MCAPI_ERR_CHAN_INVALID`, `MCAPI_ERR_PKT_SIZE`, `MCAPI_ERR_MEM_LIMIT` (all staging
    /// buffers queued), `MCAPI_ERR_REQUEST_LIMIT`, `MCAPI_ERR_TRANSMISSION`.
    pub fn pktchan_send_i(&self, handle: ChannelHandle, data: &[u8]) -> Result<RequestHandle> {
        self.send_i(handle, Source::Copy(data))
    }

    /// `mcapi_pktchan_send_i` without a copy: the packet goes out from `buf` itself, and the
    /// request completes only when the provider is done with it (the send's completion), so
    /// `buf` is the application's again once the request completed (whatever its status).
    /// Packets up to the inject size, and every packet on providers that need registered
    /// memory (`FI_MR_LOCAL`), are copied as by [`Node::pktchan_send_i`]. FIFO order holds
    /// with copying and blocking sends on the same channel. A cancel of a packet already
    /// handed to the fabric waits for its completion (it is sent, not cancelled).
    ///
    /// # Errors
    /// As [`Node::pktchan_send_i`]; a send that fails after it was handed to the fabric
    /// completes its request with `MCAPI_ERR_TRANSMISSION`.
    pub fn pktchan_send_i_zero_copy(
        &self,
        handle: ChannelHandle,
        buf: SendBuffer,
    ) -> Result<RequestHandle> {
        self.send_i(handle, Source::User(buf))
    }

    fn send_i(&self, handle: ChannelHandle, src: Source<'_>) -> Result<RequestHandle> {
        let req = {
            let mut st = self.inner.live_state()?;
            st.requests.alloc(Req::Chan(ChanReq::Send { handle }))?
        };
        let queued = (|| {
            let mut g = self
                .inner
                .side(handle, ChannelKind::Packet, Direction::Send)?;
            let side = g.as_mut().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
            side.check_usable()?;
            let len = src.len();
            if len > side.max_payload {
                return Err(Status::MCAPI_ERR_PKT_SIZE);
            }
            if let Some(status) = side.peer_gone {
                return Err(status);
            }
            let payload = side.max_payload;
            let io = side.io.as_mut().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
            let unregistered = io.ep.as_ref().is_some_and(|ep| ep.sends_unregistered());
            let zero_copy = match (&src, &io.data) {
                (Source::User(_), SideData::Send(s)) => len > s.inject_size && unregistered,
                (_, SideData::Send(_)) => false,
                _ => return Err(Status::MCAPI_ERR_CHAN_INVALID),
            };
            let out = match src {
                Source::User(buf) if zero_copy => Outgoing::User(buf),
                src => io
                    .stage(src.bytes(), payload)
                    .ok_or(Status::MCAPI_ERR_MEM_LIMIT)?,
            };
            // A send side (checked above).
            if let SideData::Send(s) = &mut io.data {
                s.state.queue(req, out);
            }
            // Posted at once when a credit and a slot are at hand, as a raw send would be;
            // the CQ is read only when the packet must wait (on tcp;ofi_rxm each read is a
            // poll(2) of the endpoint's sockets).
            io.advance_queued(payload, false);
            if io.has_queued_send() {
                side.progress();
            }
            Ok(())
        })();
        if let Err(e) = queued {
            // The call fails: the request never reaches the application.
            let _ = lock(&self.inner.state).requests.release(req);
            return Err(e);
        }
        self.inner.flush_completed();
        Ok(req)
    }

    /// Takes a pending `pktchan_send_i` (not yet posted) or `pktchan_recv_i` (not yet
    /// served) off its side for a cancel; `false` if it can no longer be withdrawn. A
    /// zero-copy packet already posted is waited for first (the provider reads its memory
    /// until then), so the caller may reuse the buffer once the cancel returns.
    pub(super) fn withdraw_channel_request(&self, request: RequestHandle, c: ChanReq) -> bool {
        if let ChanReq::Open { handle, .. } = c {
            return self.withdraw_open(handle);
        }
        let (ChanReq::Recv { handle } | ChanReq::Send { handle }) = c else {
            return false;
        };
        let Some((slot, generation, ..)) = handle.decode() else {
            return false;
        };
        // A send side that closed announced its queued packets: `Some((port, count))` to
        // announce again without the withdrawn one.
        let mut recount = None;
        let withdrawn = {
            let mut g = self.inner.channels.sides[slot].lock();
            let side = g.as_mut().filter(|s| s.generation == generation);
            let (closed, port, run) = side
                .as_ref()
                .map_or((false, 0, None), |s| (s.closed, s.port, s.peer));
            match side.and_then(|s| s.io.as_mut()).map(|io| &mut io.data) {
                Some(SideData::Recv(r)) => r.state.withdraw(request),
                Some(SideData::Send(s)) => match s.state.withdraw(request) {
                    Some(_) => {
                        if closed {
                            recount = Some((port, s.state.announced_count(), run));
                        }
                        true
                    }
                    None => false,
                },
                _ => false,
            }
        };
        if let Some((port, count, run)) = recount {
            self.inner.announce_close(port, count, run);
        }
        if !withdrawn && matches!(c, ChanReq::Send { .. }) {
            self.settle_send(request, handle);
        }
        withdrawn
    }

    /// Frees the side of a pending open unless the open was announced to the other side:
    /// that side may have completed its own open against this one's endpoint already.
    fn withdraw_open(&self, handle: ChannelHandle) -> bool {
        let Some((slot, generation, ..)) = handle.decode() else {
            return true;
        };
        let mut g = self.inner.channels.sides[slot].lock();
        match g.as_ref().filter(|s| s.generation == generation) {
            Some(side) if side.announced_to.is_some() => false,
            Some(_) => {
                self.inner.channels.vacate(&mut g, slot);
                true
            }
            None => true,
        }
    }

    /// Before a cancel of send request `request`: a zero-copy packet already handed to the
    /// fabric cannot be taken back, and its memory is the provider's until the send
    /// completes, so this waits for that (or for the endpoint to close, when the receiver is
    /// gone). The request is then complete and the cancel changes nothing on the wire.
    pub(super) fn settle_send(&self, request: RequestHandle, handle: ChannelHandle) {
        let Some((slot, generation, ..)) = handle.decode() else {
            return;
        };
        let in_flight = || {
            self.inner.channels.sides[slot]
                .lock()
                .as_ref()
                .filter(|s| s.generation == generation)
                .and_then(|s| s.io.as_ref())
                .is_some_and(|io| match &io.data {
                    SideData::Send(s) => s.state.is_in_flight(request),
                    _ => false,
                })
        };
        let mut backoff = self.inner.backoff();
        while in_flight() {
            self.progress_side(handle);
            let _ = backoff.wait(None);
        }
    }

    /// `mcapi_pktchan_recv`: the next packet, blocking until one arrives (or the endpoint
    /// timeout passes). The packet stays in the channel's pool until released.
    ///
    /// # Errors
    /// `MCAPI_ERR_CHAN_INVALID`, `MCAPI_TIMEOUT`, `MCAPI_ERR_TRANSMISSION` (the sender closed
    /// and everything it sent was received, or it died).
    pub fn pktchan_recv(&self, handle: ChannelHandle) -> Result<Packet> {
        let mut wait = None;
        loop {
            let mut burst = BusyBurst::new(handle);
            let got = (|| {
                let mut g = self
                    .inner
                    .side(handle, ChannelKind::Packet, Direction::Receive)?;
                let side = g.as_mut().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
                side.check_usable()?;
                side.post_released();
                if side.has_queued_item() {
                    if let Some(p) = take_item(side)? {
                        return Ok(Some(p));
                    }
                }
                for _ in 0..POLL_BURST {
                    side.progress();
                    if let Some(p) = take_item(side)? {
                        return Ok(Some(p));
                    }
                    burst.poll(&self.inner.channels);
                }
                let timeout = side.timeout;
                wait.get_or_insert_with(|| ChannelWait::new(timeout, self.inner.config.spin));
                Ok(None)
            })();
            self.end_burst(&burst, wait.as_mut());
            if let Some(p) = got? {
                return Ok(p);
            }
            self.channel_backoff(handle, wait.as_mut().expect("set above"))?;
        }
    }

    /// After a blocked call's burst (its own side unlocked): completes the requests the
    /// busy sides' polls finished, and keeps the call spinning if there were any.
    fn end_burst(&self, burst: &BusyBurst, wait: Option<&mut ChannelWait>) {
        if burst.seen > 0 {
            self.inner.flush_completed();
            if let Some(w) = wait {
                w.backoff.restart();
            }
        }
    }

    /// `mcapi_pktchan_recv_i`: a request that completes with the next packet; its address
    /// comes from [`Node::received_packet`] once the request completed.
    ///
    /// # Errors
    /// `MCAPI_ERR_CHAN_INVALID`, `MCAPI_ERR_REQUEST_LIMIT`.
    pub fn pktchan_recv_i(&self, handle: ChannelHandle) -> Result<RequestHandle> {
        {
            let g = self
                .inner
                .side(handle, ChannelKind::Packet, Direction::Receive)?;
            g.as_ref()
                .ok_or(Status::MCAPI_ERR_CHAN_INVALID)?
                .check_usable()?;
        }
        let req = self
            .inner
            .live_state()?
            .requests
            .alloc(Req::Chan(ChanReq::Recv { handle }))?;
        // Checked again under the lock it is queued under: a close in between drained the
        // pending receives already, and one queued after it would wait forever.
        let queued = (|| {
            let mut g = self
                .inner
                .side(handle, ChannelKind::Packet, Direction::Receive)?;
            let side = g.as_mut().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
            side.check_usable()?;
            match side.io.as_mut().map(|io| &mut io.data) {
                Some(SideData::Recv(r)) => {
                    r.state.add_pending(req);
                    Ok(())
                }
                _ => Err(Status::MCAPI_ERR_CHAN_INVALID),
            }
        })();
        if let Err(e) = queued {
            // The call fails: the request never reaches the application.
            let _ = lock(&self.inner.state).requests.release(req);
            return Err(e);
        }
        self.progress_side(handle);
        Ok(req)
    }

    /// The packet a completed `pktchan_recv_i` request received (once).
    pub fn received_packet(&self, request: RequestHandle) -> Option<Packet> {
        lock(&self.inner.state).delivered.remove(&request)
    }

    /// `mcapi_pktchan_available`: packets that can be received without waiting.
    ///
    /// # Errors
    /// `MCAPI_ERR_CHAN_INVALID`.
    pub fn pktchan_available(&self, handle: ChannelHandle) -> Result<usize> {
        self.available(handle, ChannelKind::Packet)
    }

    /// `mcapi_sclchan_available`: scalars that can be received without waiting.
    ///
    /// # Errors
    /// `MCAPI_ERR_CHAN_INVALID`.
    pub fn sclchan_available(&self, handle: ChannelHandle) -> Result<usize> {
        self.available(handle, ChannelKind::Scalar)
    }

    fn available(&self, handle: ChannelHandle, kind: ChannelKind) -> Result<usize> {
        let mut g = self.inner.side(handle, kind, Direction::Receive)?;
        let side = g.as_mut().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
        side.check_usable()?;
        side.progress();
        match &side.io {
            Some(SideIo {
                data: SideData::Recv(r),
                ..
            }) => Ok(r.state.available()),
            _ => Err(Status::MCAPI_ERR_CHAN_INVALID),
        }
    }

    /// `mcapi_pktchan_release`: gives a received packet's buffer back (any order). Its pool
    /// buffer is posted to the fabric again once all packets in it are released.
    ///
    /// # Errors
    /// `MCAPI_ERR_BUF_INVALID` for an address that is not a packet this node holds.
    ///
    /// Consumes the packet, so that nothing can read its bytes once they may be received
    /// into again.
    pub fn pktchan_release(&self, packet: Packet) -> Result<()> {
        self.pktchan_release_addr(packet.addr())
    }

    /// [`Node::pktchan_release`] by address, for the C ABI (`mcapi_pktchan_release`), whose
    /// contract is C's: the caller stops reading the packet once it is given back. Not public:
    /// in Rust a [`Packet`] is the proof that a buffer is held.
    pub(crate) fn pktchan_release_addr(&self, addr: usize) -> Result<()> {
        let (slot, mut g) = self.inner.pool_side(addr)?;
        let side = g.as_mut().ok_or(Status::MCAPI_ERR_BUF_INVALID)?;
        let open = !side.closed;
        let Some(io) = side.io.as_mut() else {
            return Err(Status::MCAPI_ERR_BUF_INVALID);
        };
        let SideData::Recv(r) = &mut io.data else {
            return Err(Status::MCAPI_ERR_BUF_INVALID);
        };
        let offset = addr.wrapping_sub(r.pool.addr());
        let (what, credits) = r.state.release(offset)?;
        r.repost(&io.ep, what);
        let last = !r.state.holds_packets();
        if open {
            if let Some(n) = credits {
                io.return_credits(n);
            }
        } else if last && io.ep.is_none() {
            // The last held packet of a disconnected channel: the pool goes now.
            self.inner.channels.vacate(&mut g, slot);
        }
        Ok(())
    }

    /// `mcapi_pktchan_release_test`: `Ok(true)` if the buffer at `addr` (inside a receive
    /// pool of this node) is released, `Ok(false)` while the application still holds it.
    ///
    /// # Errors
    /// `MCAPI_ERR_BUF_INVALID` for an address outside every receive pool of this node.
    pub fn pktchan_release_test(&self, addr: usize) -> Result<bool> {
        let (_, g) = self.inner.pool_side(addr)?;
        match g.as_ref().and_then(|s| s.io.as_ref()) {
            Some(SideIo {
                data: SideData::Recv(r),
                ..
            }) => Ok(!r.state.is_held(addr.wrapping_sub(r.pool.addr()))),
            _ => Ok(true),
        }
    }

    /// The address range of the receive pool of `handle` (to check zero copy).
    pub fn pktchan_pool_range(&self, handle: ChannelHandle) -> Result<std::ops::Range<usize>> {
        let g = self
            .inner
            .side(handle, ChannelKind::Packet, Direction::Receive)?;
        match g.as_ref().and_then(|s| s.io.as_ref()) {
            Some(SideIo {
                data: SideData::Recv(r),
                ..
            }) => Ok(r.pool.addr()..r.pool.addr() + r.pool.len()),
            _ => Err(Status::MCAPI_ERR_CHAN_INVALID),
        }
    }

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
        }
        return Ok(Some(v));
    }
    io.nothing_received(gone)?;
    Ok(None)
}

/// Takes the next packet of a receive side for the application, or says why there is none.
fn take_item(side: &mut Side) -> Result<Option<Packet>> {
    let gone = side.peer_gone;
    let io = side.io.as_mut().ok_or(Status::MCAPI_ERR_CHAN_INVALID)?;
    let SideData::Recv(r) = &mut io.data else {
        return Err(Status::MCAPI_ERR_CHAN_INVALID);
    };
    if let Some(item) = r.state.take_packet() {
        return Ok(Some(r.packet(item)));
    }
    io.nothing_received(gone)?;
    Ok(None)
}

impl SideIo {
    /// A receive found the FIFO empty: the end of the stream (`gone`'s status) once the
    /// sender closed or died and everything it sent arrived.
    fn nothing_received(&self, gone: Option<Status>) -> Result<()> {
        let SideData::Recv(r) = &self.data else {
            return Err(Status::MCAPI_ERR_CHAN_INVALID);
        };
        match gone.filter(|_| r.state.sender_done()) {
            Some(status) => Err(status),
            None => Ok(()),
        }
    }

    /// Re-posts credit receives consumed while the endpoint was lent to a zero-copy send.
    fn repost_credit_slots(&mut self) {
        let SideData::Send(s) = &mut self.data else {
            return;
        };
        let Some(ep) = &self.ep else { return };
        while let Some(slot) = s.credit_reposts.pop() {
            if let Ok(b) = s.credit_slots.slice(slot * 8, 8) {
                let _ = ep.recv(b, FiAddr::UNSPEC, CTX_CREDIT | slot as u64);
            }
        }
    }
}

impl NodeInner {
    /// Locks the side whose receive pool holds `addr` (see [`NodeInner::pool_slot`]); returns
    /// its slot too.
    fn pool_side(&self, addr: usize) -> Result<(usize, SideGuard<'_>)> {
        let slot = self.channels.last_pool.load(Ordering::Relaxed);
        let g = self.channels.sides[slot].lock();
        if g.as_ref().is_some_and(|s| s.pool_contains(addr)) {
            return Ok((slot, g));
        }
        drop(g);
        let slot = self.pool_slot(addr)?;
        self.channels.last_pool.store(slot, Ordering::Relaxed);
        Ok((slot, self.channels.sides[slot].lock()))
    }

    /// The side whose receive pool holds `addr`: `MCAPI_ERR_BUF_INVALID` for any other
    /// address, `MCAPI_ERR_NODE_NOTINIT` once finalized (finalize forgets every pool; looked
    /// up only on this error path, so a release takes no node state lock).
    fn pool_slot(&self, addr: usize) -> Result<usize> {
        let found = lock(&self.channels.pools)
            .iter()
            .find(|p| (p.0..p.1).contains(&addr))
            .map(|p| p.2);
        found.ok_or_else(|| self.unless_finalized(Status::MCAPI_ERR_BUF_INVALID))
    }

    /// `MCAPI_ERR_NODE_NOTINIT` on a finalized node, else `status`: for the error paths of
    /// calls that do not take the node state lock when they succeed.
    fn unless_finalized(&self, status: Status) -> Status {
        if lock(&self.state).finalized {
            Status::MCAPI_ERR_NODE_NOTINIT
        } else {
            status
        }
    }
}

impl Node {
    /// `mcapi_cancel` of an open, once its side is withdrawn: the endpoint is no longer
    /// opening.
    pub(super) fn cancel_channel_open(&self, port: u32) {
        if let Ok(mut st) = self.inner.live_state() {
            if let Some(ep) = st.endpoints.get_mut(&port) {
                ep.channel.binding.abandon_open();
                ep.channel.side = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn side_set_holds_what_was_inserted_in_slot_order() {
        let mut set = SideSet::default();
        assert!(set.is_empty());
        for slot in [200, 0, 63, 64, 255] {
            set.insert(slot);
        }
        assert!(!set.is_empty());
        assert!(set.contains(63) && set.contains(64) && !set.contains(65));
        assert_eq!(set.iter().collect::<Vec<_>>(), [0, 63, 64, 200, 255]);
    }
}
