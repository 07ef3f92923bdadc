//! The scalar hub: one RDM endpoint and CQ that every scalar channel side of a node shares.
//!
//! A channel whose two directions each had an endpoint of their own (as packet channels
//! do: their multi-receive pools need an endpoint that carries nothing else) runs a
//! ping-pong over two connections on connection-based providers, and the kernel then
//! acknowledges each one separately: on tcp;ofi_rxm a raw `fi_tinject` ping-pong over two
//! endpoint pairs is 1.2..1.3x slower than over one. Scalars need no pool, so all scalar
//! sides of a node use the hub instead, and every scalar between two nodes, in both
//! directions, and every credit return, shares one connection.
//!
//! Messages are tagged: `TAG_VALUE | route` for a scalar to the receive side `route`,
//! `TAG_CREDIT | route` for credits to the send side `route`, where a route is a side's
//! slot and the low bits of its generation. Receive contexts carry the route above
//! [`LOCAL_BITS`], so a side reading the shared CQ can hand the completions of other sides
//! to their inboxes. Only receives are ever posted on the hub (values and credits go out by
//! inject), so every completion gives back a posted receive: a side that goes away cancels
//! its receives, and its memory is reused once every one of them came back.

use super::*;
use mcapi_ofi::Buf;

/// Bits of a side's own completion context; the route is above them.
pub(super) const LOCAL_BITS: u32 = 44;
const LOCAL_MASK: u64 = (1 << LOCAL_BITS) - 1;
/// Tag of a scalar value, and of a credit return, above the route.
const TAG_VALUE: u64 = 1 << 32;
const TAG_CREDIT: u64 = 2 << 32;
/// Completions read from the CQ at a time.
const READ_BURST: usize = 16;

/// A completion of a receive posted on the hub.
#[derive(Clone, Copy)]
pub(super) enum HubEvent {
    Done(Completion),
    /// An error completion (a cancelled receive), with its context.
    Failed(u64),
}

impl Default for HubEvent {
    fn default() -> Self {
        HubEvent::Failed(0)
    }
}

impl HubEvent {
    fn context(&self) -> u64 {
        match self {
            HubEvent::Done(c) => c.context(),
            HubEvent::Failed(ctx) => *ctx,
        }
    }

    /// The side's own context (without the route).
    pub(super) fn local_context(&self) -> u64 {
        self.context() & LOCAL_MASK
    }

    fn route(&self) -> u32 {
        (self.context() >> LOCAL_BITS) as u32
    }
}

/// A side's route: its slot and the low 12 bits of its generation.
pub(super) fn route(slot: usize, generation: u32) -> u32 {
    slot as u32 | (generation & 0xFFF) << 8
}

fn slot_of(route: u32) -> usize {
    (route & 0xFF) as usize
}

pub(super) struct ScalarHub {
    // Declared first: closed before the CQ and AV it is bound to.
    ep: Endpoint,
    cq: CompletionQueue,
    av: AddressVector,
    domain: Domain,
    routing: Mutex<Routing>,
    /// Peers' hub addresses already in the AV (inserting one again would add an entry).
    peers: Mutex<HashMap<Vec<u8>, FiAddr>>,
}

struct Routing {
    buf: [Completion; READ_BURST],
    /// Completions read by one side for another, by slot.
    inbox: Vec<VecDeque<HubEvent>>,
    /// Sides gone with receives still posted: `(route, receives outstanding, memory)`.
    retiring: Vec<(u32, u32, Vec<MemoryRegion>)>,
    /// Memory no receive is posted in any more, for the next sides.
    spare: Vec<MemoryRegion>,
}

impl ScalarHub {
    /// Opens the hub for sides posting up to `receives` receives each.
    pub(super) fn open(
        domain: &Domain,
        wait: WaitObject,
        receives: usize,
    ) -> std::result::Result<Self, OfiError> {
        // Room for every receive of every side: a full CQ must not lose a completion.
        let size = (super::channels::MAX_SIDES * receives.max(8)).min(1 << 16);
        let cq = CompletionQueue::open(domain, size, wait)?;
        let av = AddressVector::open(domain, 16)?;
        let ep = Endpoint::open(domain, &cq, &av, EndpointOptions::default())?;
        Ok(ScalarHub {
            ep,
            cq,
            av,
            domain: domain.clone(),
            routing: Mutex::new(Routing {
                buf: [Completion::default(); READ_BURST],
                inbox: (0..super::channels::MAX_SIDES)
                    .map(|_| VecDeque::new())
                    .collect(),
                retiring: Vec::new(),
                spare: Vec::new(),
            }),
            peers: Mutex::new(HashMap::default()),
        })
    }

    pub(super) fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    pub(super) fn cq(&self) -> &CompletionQueue {
        &self.cq
    }

    pub(super) fn av(&self) -> &AddressVector {
        &self.av
    }

    /// The AV entry of a peer's hub.
    pub(super) fn peer(&self, addr: &[u8]) -> std::result::Result<FiAddr, OfiError> {
        let mut peers = lock(&self.peers);
        if let Some(&a) = peers.get(addr) {
            return Ok(a);
        }
        let a = self.av.insert(addr)?;
        peers.insert(addr.to_vec(), a);
        Ok(a)
    }

    /// Registered memory of at least `len` bytes for a side's receives: a spare region when
    /// one is large enough.
    pub(super) fn memory(&self, len: usize) -> std::result::Result<MemoryRegion, OfiError> {
        let mut r = lock(&self.routing);
        if let Some(i) = r.spare.iter().position(|m| m.len() >= len) {
            return Ok(r.spare.swap_remove(i));
        }
        drop(r);
        MemoryRegion::new(&self.domain, len)
    }

    /// Readies the inbox of a new side (no allocation on its data path later).
    pub(super) fn attach(&self, route: u32, receives: usize) {
        let mut r = lock(&self.routing);
        let inbox = &mut r.inbox[slot_of(route)];
        inbox.clear();
        inbox.reserve(receives);
    }

    /// Reads completions for side `route` into `out`: first those other sides read for it,
    /// then from the CQ, handing other sides' completions to their inboxes. Returns how
    /// many; stops at the first CQ error other than an error completion.
    pub(super) fn read(
        &self,
        route: u32,
        out: &mut [HubEvent],
    ) -> std::result::Result<usize, OfiError> {
        let mut guard = lock(&self.routing);
        let r = &mut *guard;
        let mut n = 0;
        let own = slot_of(route);
        while n < out.len() {
            match r.inbox[own].pop_front() {
                Some(e) if e.route() == route => {
                    out[n] = e;
                    n += 1;
                }
                Some(_) => {} // of a side gone before this one took the slot
                None => break,
            }
        }
        while n < out.len() {
            match self.cq.read(&mut r.buf) {
                Ok(0) => break,
                Ok(k) => {
                    for i in 0..k {
                        let e = HubEvent::Done(r.buf[i]);
                        r.deliver(e, route, out, &mut n);
                    }
                    if k < READ_BURST {
                        break;
                    }
                }
                Err(OfiError::Completion(e)) => {
                    r.deliver(HubEvent::Failed(e.context), route, out, &mut n);
                }
                Err(e) if e.is_again() => break,
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    /// Posts a receive of side `route` for a scalar value (`credit`: a credit return).
    pub(super) fn post(
        &self,
        route: u32,
        credit: bool,
        buf: Buf<'_>,
        ctx: u64,
    ) -> std::result::Result<(), OfiError> {
        let kind = if credit { TAG_CREDIT } else { TAG_VALUE };
        let ctx = ctx | u64::from(route) << LOCAL_BITS;
        self.ep
            .recv_tagged(buf, FiAddr::UNSPEC, kind | u64::from(route), 0, ctx)
    }

    /// Injects scalar `bytes` with sequence number `seq` to receive side `to` at `dest`.
    pub(super) fn send_value(
        &self,
        bytes: &[u8],
        seq: u32,
        dest: FiAddr,
        to: u32,
    ) -> std::result::Result<(), OfiError> {
        self.ep
            .inject_tagged_data(bytes, u64::from(seq), dest, TAG_VALUE | u64::from(to))
    }

    /// Injects `n` credits to send side `to` at `dest`.
    pub(super) fn send_credits(
        &self,
        n: u32,
        dest: FiAddr,
        to: u32,
    ) -> std::result::Result<(), OfiError> {
        self.ep.inject_tagged(
            &u64::from(n).to_le_bytes(),
            dest,
            TAG_CREDIT | u64::from(to),
        )
    }

    /// Side `route` is gone with `posted` receives posted in `memory` with contexts
    /// `contexts`: they are cancelled, and the memory is reused once all came back.
    pub(super) fn detach(
        &self,
        route: u32,
        mut posted: u32,
        contexts: impl Iterator<Item = u64>,
        memory: Vec<MemoryRegion>,
    ) {
        let mut r = lock(&self.routing);
        // Completions read for it and never taken.
        for e in std::mem::take(&mut r.inbox[slot_of(route)]) {
            if e.route() == route {
                posted = posted.saturating_sub(1);
            }
        }
        if posted == 0 {
            r.spare.extend(memory);
            return;
        }
        for ctx in contexts {
            // Not posted (completed, or never reposted): -FI_ENOENT, nothing to do.
            let _ = self.ep.cancel(ctx | u64::from(route) << LOCAL_BITS);
        }
        r.retiring.push((route, posted, memory));
    }
}

impl Routing {
    fn deliver(&mut self, e: HubEvent, reader: u32, out: &mut [HubEvent], n: &mut usize) {
        let to = e.route();
        if to == reader && *n < out.len() && self.inbox[slot_of(to)].is_empty() {
            out[*n] = e;
            *n += 1;
            return;
        }
        if let Some(i) = self.retiring.iter().position(|r| r.0 == to) {
            let gone = &mut self.retiring[i];
            gone.1 -= 1;
            if gone.1 == 0 {
                let (_, _, memory) = self.retiring.swap_remove(i);
                self.spare.extend(memory);
            }
            return;
        }
        // A side that is there (or a stale route: dropped when the slot is attached again).
        self.inbox[slot_of(to)].push_back(e);
    }
}
