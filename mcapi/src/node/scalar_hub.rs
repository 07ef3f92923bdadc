//! The scalar hub: one RDM endpoint and CQ that every scalar channel side of a node shares.
//!
//! A channel whose two directions each have an endpoint of their own (as packet channels
//! do: their pools need an endpoint that carries nothing else) runs a ping-pong over two
//! connections on connection-based providers, and the kernel then acknowledges each one
//! separately: on tcp;ofi_rxm a raw `fi_tinject` ping-pong over two endpoint pairs is
//! 1.2..1.3x slower than over one. Scalars are copied out on arrival, so they need no pool
//! of their own: all scalar sides of a node use the hub, and every scalar and credit return
//! between two nodes, in both directions, shares one connection.
//!
//! The hub posts one multi-receive pool. Every message carries its destination side's
//! route (slot and low generation bits) in its 32-bit remote CQ data (providers with
//! 4-byte CQ data suffice), with a credit bit and, for a value, a 16-bit sequence number;
//! a value's width is its length, a credit return's count its 8-byte payload. A side
//! reading the CQ copies each message out, keeps its own and hands the others to their
//! sides' inboxes; messages to a side that is gone (scalars a receive close discarded) are
//! dropped there.

use super::*;

/// Multi-receive buffers of the hub's pool, and their size.
const POOL_BUFFERS: usize = 4;
const POOL_BUFFER_SIZE: usize = 64 * 1024;
/// Completions read from the CQ at a time.
const READ_BURST: usize = 16;
const CREDIT_BIT: u64 = 1 << 31;
/// Most scalars a receive side may have in flight to it: sequence numbers travel as 16
/// bits and are widened against the next one expected, which needs a window below 2^15.
pub(super) const MAX_CAPACITY: usize = 1 << 14;

/// A side's route: its slot and the low 7 bits of its generation.
pub(super) fn route(slot: usize, generation: u32) -> u16 {
    slot as u16 | ((generation & 0x7F) as u16) << 8
}

fn slot_of(route: u16) -> usize {
    usize::from(route & 0xFF)
}

/// A message for one side, copied out of the pool.
#[derive(Clone, Copy, Default)]
pub(super) struct HubItem {
    /// A credit return (`value` credits), else a scalar of `len` bytes.
    pub credit: bool,
    /// A scalar's sequence number (low 16 bits).
    pub seq: u16,
    pub len: u8,
    pub value: u64,
}

pub(super) struct ScalarHub {
    // Declared first: closed before the CQ, AV and pool it uses.
    ep: Endpoint,
    cq: CompletionQueue,
    av: AddressVector,
    pool: MemoryRegion,
    routing: Mutex<Routing>,
    /// Peers' hub addresses already in the AV (inserting one again would add an entry).
    peers: Mutex<HashMap<Vec<u8>, FiAddr>>,
}

struct Routing {
    buf: [Completion; READ_BURST],
    /// Messages read by one side for another, by slot.
    inbox: Vec<VecDeque<HubItem>>,
    /// The route of each slot's side, while it is there.
    live: Vec<Option<u16>>,
}

impl ScalarHub {
    /// Opens the hub of a node whose receive sides take `capacity` scalars each.
    pub(super) fn open(
        domain: &Domain,
        wait: WaitObject,
        capacity: usize,
    ) -> std::result::Result<Self, OfiError> {
        // Room for what every side may have in flight: a full CQ must lose nothing.
        let size = (super::channels::MAX_SIDES * (capacity + 8)).min(1 << 16);
        let cq = CompletionQueue::open(domain, size, wait)?;
        let av = AddressVector::open(domain, 16)?;
        let ep = Endpoint::open(
            domain,
            &cq,
            &av,
            EndpointOptions {
                min_multi_recv: Some(8),
            },
        )?;
        let pool = MemoryRegion::new(domain, POOL_BUFFERS * POOL_BUFFER_SIZE)?;
        for b in 0..POOL_BUFFERS {
            ep.recv_multi(
                pool.slice(b * POOL_BUFFER_SIZE, POOL_BUFFER_SIZE)?,
                b as u64,
            )?;
        }
        Ok(ScalarHub {
            ep,
            cq,
            av,
            pool,
            routing: Mutex::new(Routing {
                buf: [Completion::default(); READ_BURST],
                inbox: (0..super::channels::MAX_SIDES)
                    .map(|_| VecDeque::new())
                    .collect(),
                live: vec![None; super::channels::MAX_SIDES],
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

    /// The pool scalars land in (what a receive side's `pool` names).
    pub(super) fn pool(&self) -> &MemoryRegion {
        &self.pool
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

    /// A side takes its slot: messages to `route` are kept for it from now on, up to
    /// `capacity` without allocating.
    pub(super) fn attach(&self, route: u16, capacity: usize) {
        let mut r = lock(&self.routing);
        let slot = slot_of(route);
        r.live[slot] = Some(route);
        r.inbox[slot].clear();
        r.inbox[slot].reserve(capacity);
    }

    /// The side of `route` is gone: what comes for it is dropped.
    pub(super) fn detach(&self, route: u16) {
        let mut r = lock(&self.routing);
        let slot = slot_of(route);
        if r.live[slot] == Some(route) {
            r.live[slot] = None;
            r.inbox[slot].clear();
        }
    }

    /// Reads messages for side `route` into `out`: first those other sides read for it,
    /// then from the CQ, handing other sides' messages to their inboxes. Returns how many.
    ///
    /// # Errors
    /// A CQ read failure other than an error completion.
    pub(super) fn read(
        &self,
        route: u16,
        out: &mut [HubItem],
    ) -> std::result::Result<usize, OfiError> {
        let mut guard = lock(&self.routing);
        let r = &mut *guard;
        let own = slot_of(route);
        let mut n = 0;
        while n < out.len() {
            let Some(item) = r.inbox[own].pop_front() else {
                break;
            };
            out[n] = item;
            n += 1;
        }
        // Read on only with room for a whole burst: what does not fit goes to the inbox.
        while n + READ_BURST <= out.len() || n == 0 {
            match self.cq.read(&mut r.buf) {
                Ok(0) => break,
                Ok(k) => {
                    for i in 0..k {
                        let c = r.buf[i];
                        if c.flags() & flags::REMOTE_CQ_DATA != 0 {
                            self.route_message(r, &c, route, out, &mut n);
                        }
                        if c.flags() & flags::MULTI_RECV != 0 {
                            self.repost(c.context());
                        }
                    }
                    if k < READ_BURST {
                        break;
                    }
                }
                // Only pool buffers are posted: one that failed is posted again.
                Err(OfiError::Completion(e)) => self.repost(e.context),
                Err(e) if e.is_again() => break,
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    fn route_message(
        &self,
        r: &mut Routing,
        c: &Completion,
        reader: u16,
        out: &mut [HubItem],
        n: &mut usize,
    ) {
        let data = c.data();
        let to = (data >> 16 & 0x7FFF) as u16;
        let slot = slot_of(to);
        if r.live[slot] != Some(to) {
            // A side gone (a receive close discards what was still coming).
            return;
        }
        let len = c.len().min(8);
        let mut word = [0u8; 8];
        let offset = c.buf_addr().wrapping_sub(self.pool.addr());
        if offset + len <= self.pool.len() {
            self.pool.read(offset, &mut word[..len]);
        }
        let item = HubItem {
            credit: data & CREDIT_BIT != 0,
            seq: data as u16,
            len: c.len() as u8,
            value: u64::from_le_bytes(word),
        };
        if to == reader && *n < out.len() {
            out[*n] = item;
            *n += 1;
        } else {
            r.inbox[slot].push_back(item);
        }
    }

    fn repost(&self, buffer: u64) {
        let b = buffer as usize;
        if let Ok(buf) = self.pool.slice(b * POOL_BUFFER_SIZE, POOL_BUFFER_SIZE) {
            // Refused only when the endpoint is going away.
            let _ = self.ep.recv_multi(buf, buffer);
        }
    }

    /// Injects scalar `bytes` with sequence number `seq` to side `to` at `dest`.
    pub(super) fn send_value(
        &self,
        bytes: &[u8],
        seq: u32,
        dest: FiAddr,
        to: u16,
    ) -> std::result::Result<(), OfiError> {
        let data = u64::from(to) << 16 | u64::from(seq as u16);
        self.ep.inject_data(bytes, data, dest)
    }

    /// Injects `n` credits to side `to` at `dest`.
    pub(super) fn send_credits(
        &self,
        n: u32,
        dest: FiAddr,
        to: u16,
    ) -> std::result::Result<(), OfiError> {
        let data = CREDIT_BIT | u64::from(to) << 16;
        self.ep.inject_data(&u64::from(n).to_le_bytes(), data, dest)
    }
}
