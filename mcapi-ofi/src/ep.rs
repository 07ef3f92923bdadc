//! Reliable datagram (RDM) endpoints and the operations posted on them.

use crate::av::{AddressVector, FiAddr};
use crate::cq::CompletionQueue;
use crate::error::Result;
use crate::fabric::Domain;
use crate::info::Attributes;
use crate::mr::{Buf, MemoryRegion, Op};
use crate::raw::{self, EpFid, ExposedBuffer, RecvBuffer, SendBuffer};
use std::sync::Arc;

/// Options for [`Endpoint::open`].
#[derive(Clone, Copy, Debug, Default)]
pub struct EndpointOptions {
    /// For multi-receive buffers: release a buffer once less than this many bytes are free
    /// (`FI_OPT_MIN_MULTI_RECV`). `None` keeps the provider's default.
    pub min_multi_recv: Option<usize>,
}

/// What the waiter of [`Endpoint::send_unregistered`] reports after each look at the CQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendWait {
    /// The send's completion has not been seen yet.
    Pending,
    /// The send completed (successfully or with an error completion).
    Done,
    /// Give up (dead peer): the endpoint is dropped (closed, or left to linger with its CQ
    /// retired, see [`Endpoint`]), so this process's provider no longer touches the memory.
    /// On shm a live peer reads the sender's memory itself (cross-memory attach), whatever
    /// the sender's endpoint does: give up only when the peer is gone.
    Abandon,
}

/// An enabled RDM endpoint bound to one CQ (send and receive) and one address vector.
/// Cheap to clone; all operations take `&self` and may be called from any thread.
///
/// Dropping the last handle closes it, except on shm while an open endpoint of the process
/// may still reach it: it then lingers, open, until none can (in-process peers use its
/// memory; see `lingering` in the source). A lingering endpoint moves only if its CQ is
/// read, and its CQ retires (reads nothing more) once none of the CQ's endpoints is open.
#[derive(Clone)]
pub struct Endpoint {
    inner: Arc<EpInner>,
}

struct EpInner {
    // Declared first: the endpoint is closed before the objects it is bound to, and before the
    // memory that its operations may still be using.
    fid: EpFid,
    /// Exposures and regions whose reads may still be served: closed only after the
    /// endpoint.
    kept: std::sync::Mutex<Vec<KeptMemory>>,
    cq: CompletionQueue,
    av: AddressVector,
    domain: Domain,
    address: Vec<u8>,
    /// The provider's inject limit: longer injects are refused here (providers only assert
    /// it, and rxm would copy past its buffer).
    inject_size: usize,
    /// Whether a post moves only in a later CQ read (`info::posts_wait_for_progress`): each
    /// outgoing post is then followed by one progress pass ([`Endpoint::sent`]).
    progress_posts: bool,
    /// The record an unregistered send is posted with, kept for the next one (a send that
    /// is abandoned leaks it: its completion may still be in the CQ).
    send_record: std::sync::Mutex<Option<Box<crate::mr::Slot>>>,
    /// Whether endpoints of this process share its memory with it (shm: see [`lingering`]):
    /// it then lingers when closed. Its number among them.
    lingers: bool,
    linger_id: u64,
}

impl Drop for EpInner {
    fn drop(&mut self) {
        if !self.lingers {
            return;
        }
        // Its region's name goes now, as at a close (peers not mapping it yet cannot, and an
        // exit before it closes leaves no file behind); the mappings stay.
        crate::cleanup::unlink_region(&self.address);
        let lingering = lingering::Lingering {
            fid: self.fid.take(),
            kept: std::mem::take(
                &mut *self
                    .kept
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            ),
            cq: self.cq.clone(),
            av: self.av.clone(),
            domain: self.domain.clone(),
            address: std::mem::take(&mut self.address),
        };
        self.cq.endpoint_closed();
        lingering::closed(self.linger_id, lingering);
    }
}

/// Runs `insert` (of shm address `address` into an address vector) unless `address` names
/// an endpoint of this process that is closed for good: shm keeps the names of the
/// process's closed endpoints, and inserting one maps the freed region (SIGSEGV inside
/// `fi_av_insert`). An address of the process that is open or lingering is inserted while
/// it cannot close. `InvalidArgument` for a closed one.
pub(crate) fn while_not_closed_in_process<T>(
    address: &[u8],
    insert: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let own = format!("{}:", std::process::id());
    if !crate::cleanup::region_name(address).is_some_and(|n| n.starts_with(&own)) {
        return insert();
    }
    lingering::while_known(address, insert).unwrap_or(Err(crate::Error::InvalidArgument(
        "the address of a closed endpoint of this process",
    )))
}

/// Endpoints of one process that share memory with each other, closed when none of the
/// others can reach them any more.
///
/// The shm provider reaches a peer endpoint of the same process through that endpoint's own
/// mapping of its region (it looks the name up among the process's endpoints instead of
/// mapping the region again), and closing an endpoint unmaps its region. An endpoint of the
/// process that still sends to the closed one, answers its commands or completes a
/// transfer with it then faults inside `fi_cq_read` (SIGSEGV), as a node did when another
/// node of its process finalized in the middle of a channel's traffic. So a closed shm
/// endpoint lingers, open but never progressed again, while an open endpoint of the
/// process may reach it: one whose address vector ever held its address, or whose address
/// its own vector ever held (shm maps a sender when its first message arrives). Its CQ,
/// once no endpoint bound to it is open, retires: it reads nothing more (a read would
/// progress the lingering endpoint) and lets the memory posted on it go, which nothing
/// touches again. So what lingers is the region (16 MiB of address space, of which shm
/// writes 3.75 MiB at creation; its file is removed at once), for as long as a peer it
/// knew stays open.
mod lingering {
    use super::{AddressVector, CompletionQueue, Domain, EpFid, KeptMemory};
    use std::sync::Mutex;

    /// A closed endpoint waiting for the open ones that may reach it, with what it was
    /// bound to (fields in the order they close: the endpoint first; most held only to be
    /// dropped).
    #[allow(dead_code)]
    pub(super) struct Lingering {
        pub(super) fid: EpFid,
        pub(super) kept: Vec<KeptMemory>,
        pub(super) cq: CompletionQueue,
        pub(super) av: AddressVector,
        pub(super) domain: Domain,
        pub(super) address: Vec<u8>,
    }

    /// An open endpoint that will linger when closed: its address and address vector.
    struct Open {
        id: u64,
        address: Vec<u8>,
        av: AddressVector,
    }

    #[derive(Default)]
    struct Endpoints {
        open: Vec<Open>,
        lingering: Vec<Lingering>,
        next_id: u64,
    }

    static ENDPOINTS: Mutex<Endpoints> = Mutex::new(Endpoints {
        open: Vec::new(),
        lingering: Vec::new(),
        next_id: 0,
    });

    fn endpoints() -> std::sync::MutexGuard<'static, Endpoints> {
        ENDPOINTS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers an open endpoint; the number to close it with.
    pub(super) fn opened(address: &[u8], av: &AddressVector) -> u64 {
        let mut e = endpoints();
        e.next_id += 1;
        let id = e.next_id;
        e.open.push(Open {
            id,
            address: address.to_vec(),
            av: av.clone(),
        });
        id
    }

    /// Runs `f` with the registry locked if an endpoint at `address` is open or lingers
    /// (then it stays so until `f` returns), else `None`.
    pub(super) fn while_known<T>(address: &[u8], f: impl FnOnce() -> T) -> Option<T> {
        let e = endpoints();
        let known = e.open.iter().any(|o| o.address == address)
            || e.lingering.iter().any(|l| l.address == address);
        known.then(f)
    }

    /// Endpoint `id` closed: kept as `ep` while an open endpoint may reach it. Every
    /// lingering endpoint that none can reach any more is closed (outside the lock: a close
    /// may take a while).
    pub(super) fn closed(id: u64, ep: Lingering) {
        let released: Vec<Lingering> = {
            let mut e = endpoints();
            e.open.retain(|o| o.id != id);
            e.lingering.push(ep);
            let Endpoints {
                open, lingering, ..
            } = &mut *e;
            let (reachable, unreachable) = std::mem::take(lingering).into_iter().partition(|l| {
                open.iter()
                    .any(|o| o.av.ever_held(&l.address) || l.av.ever_held(&o.address))
            });
            *lingering = reachable;
            unreachable
        };
        drop(released);
    }
}

impl Endpoint {
    /// Opens, binds (to `cq` for transmit and receive, and to `av`) and enables an endpoint.
    ///
    /// # Errors
    /// `InvalidArgument` for a CQ or AV of another domain; `fi_endpoint`, `fi_ep_bind`,
    /// `fi_setopt` or `fi_enable` failures (e.g. the domain's `ep_cnt` is exhausted).
    pub fn open(
        domain: &Domain,
        cq: &CompletionQueue,
        av: &AddressVector,
        options: EndpointOptions,
    ) -> Result<Endpoint> {
        // Objects of another domain would be taken for this one's by the provider.
        if !cq.inner.domain.is(domain) || !av.inner.domain.is(domain) {
            return Err(crate::Error::InvalidArgument(
                "the CQ and the AV must be of the endpoint's domain",
            ));
        }
        if domain.inner.info.provider() == "shm" {
            crate::cleanup::clear_recycled_pid_regions();
        }
        let fid = raw::open_endpoint(
            &domain.inner.fid,
            &domain.inner.info.raw,
            &cq.inner.fid,
            &av.inner.fid,
            options.min_multi_recv,
        )?;
        let address = fid.name()?;
        let lingers = crate::info::shares_memory_in_process(domain.inner.info.provider());
        let linger_id = if lingers {
            cq.endpoint_opened();
            lingering::opened(&address, av)
        } else {
            0
        };
        Ok(Endpoint {
            inner: Arc::new(EpInner {
                fid,
                kept: std::sync::Mutex::new(Vec::new()),
                cq: cq.clone(),
                av: av.clone(),
                domain: domain.clone(),
                address,
                inject_size: domain.attributes().inject_size,
                progress_posts: crate::info::posts_wait_for_progress(
                    domain.inner.info.provider(),
                    domain.attributes().data_progress(),
                ),
                send_record: std::sync::Mutex::new(None),
                lingers,
                linger_id,
            }),
        })
    }

    /// This endpoint's fabric address, to hand to peers for their address vectors.
    pub fn address(&self) -> &[u8] {
        &self.inner.address
    }

    /// The completion queue the endpoint reports to.
    pub fn cq(&self) -> &CompletionQueue {
        &self.inner.cq
    }

    /// The address vector the endpoint resolves peers with.
    pub fn av(&self) -> &AddressVector {
        &self.inner.av
    }

    /// The negotiated attributes of the endpoint's domain.
    pub fn attributes(&self) -> &Attributes {
        self.inner.domain.attributes()
    }

    /// Posts `op` on `buf` with `post`, which gets the provider context: keeps the region
    /// alive for as long as the endpoint's CQ (the provider may still be using the memory
    /// when the application drops its last handle, and the CQ may still hold completions
    /// naming its slots), and moves the slot's state (see [`MemoryRegion`]).
    ///
    /// [`MemoryRegion`]: crate::MemoryRegion
    #[inline(always)]
    fn post(
        &self,
        buf: &Buf<'_>,
        op: Op,
        context: u64,
        post: impl FnOnce(u64) -> Result<()>,
    ) -> Result<()> {
        if !buf.region.inner.domain.is(&self.inner.domain) {
            return Err(crate::Error::InvalidArgument(
                "the buffer is registered with another domain",
            ));
        }
        self.inner.cq.pin(buf.region);
        let provider_context = buf.begin(op, context)?;
        let r = post(provider_context);
        if r.is_err() {
            buf.abort(op);
        }
        r
    }

    /// Sends a tagged message of at most `inject_size` bytes; `data` may be reused at once
    /// and no completion is reported.
    ///
    /// # Errors
    /// `InvalidArgument` for more than `inject_size` bytes; `-FI_EAGAIN`
    /// ([`crate::Error::is_again`]) when the provider has no room; other errors.
    #[inline(always)]
    pub fn inject_tagged(&self, data: &[u8], dest: FiAddr, tag: u64) -> Result<()> {
        self.injectable(data)?;
        self.sent(
            self.inner
                .fid
                .tinject(data, None, self.inner.av.destination(dest)?, tag),
        )
    }

    /// An outgoing post's result; where the provider moves posts only in CQ reads, a
    /// successful one is followed by one progress pass, so it leaves now.
    #[inline(always)]
    fn sent(&self, posted: Result<()>) -> Result<()> {
        if self.inner.progress_posts && posted.is_ok() {
            self.inner.cq.progress_posts();
        }
        posted
    }

    /// `InvalidArgument` for data longer than the provider injects.
    #[inline(always)]
    fn injectable(&self, data: &[u8]) -> Result<()> {
        if data.len() > self.inner.inject_size {
            return Err(crate::Error::InvalidArgument(
                "longer than the provider's inject size",
            ));
        }
        Ok(())
    }

    /// As [`Endpoint::inject_tagged`], with remote CQ data.
    ///
    /// # Errors
    /// As [`Endpoint::inject_tagged`].
    #[inline(always)]
    pub fn inject_tagged_data(
        &self,
        data: &[u8],
        cq_data: u64,
        dest: FiAddr,
        tag: u64,
    ) -> Result<()> {
        self.injectable(data)?;
        self.sent(self.inner.fid.tinject(
            data,
            Some(cq_data),
            self.inner.av.destination(dest)?,
            tag,
        ))
    }

    /// Untagged inject.
    ///
    /// # Errors
    /// As [`Endpoint::inject_tagged`].
    #[inline(always)]
    pub fn inject(&self, data: &[u8], dest: FiAddr) -> Result<()> {
        self.injectable(data)?;
        self.sent(
            self.inner
                .fid
                .inject(data, None, self.inner.av.destination(dest)?),
        )
    }

    /// Untagged inject with remote CQ data.
    ///
    /// # Errors
    /// As [`Endpoint::inject_tagged`].
    #[inline(always)]
    pub fn inject_data(&self, data: &[u8], cq_data: u64, dest: FiAddr) -> Result<()> {
        self.injectable(data)?;
        self.sent(
            self.inner
                .fid
                .inject(data, Some(cq_data), self.inner.av.destination(dest)?),
        )
    }

    /// Posts a tagged send of `buf`; completion (with `context`) says the buffer is free.
    /// Until then [`crate::MemoryRegion::write`] refuses the buffer's slot; sends in flight
    /// from one slot share one context.
    ///
    /// # Errors
    /// As [`Endpoint::inject_tagged`]; [`crate::Error::InUse`] if a receive is posted into
    /// the slot or it is being written.
    #[inline]
    pub fn send_tagged(&self, buf: Buf<'_>, dest: FiAddr, tag: u64, context: u64) -> Result<()> {
        self.sent(self.post(&buf, Op::Send, context, |c| {
            self.inner
                .fid
                .tsend(buf.io, None, self.inner.av.destination(dest)?, tag, c)
        }))
    }

    /// Tagged send with remote CQ data.
    ///
    /// # Errors
    /// As [`Endpoint::send_tagged`].
    #[inline]
    pub fn send_tagged_data(
        &self,
        buf: Buf<'_>,
        cq_data: u64,
        dest: FiAddr,
        tag: u64,
        context: u64,
    ) -> Result<()> {
        self.sent(self.post(&buf, Op::Send, context, |c| {
            self.inner.fid.tsend(
                buf.io,
                Some(cq_data),
                self.inner.av.destination(dest)?,
                tag,
                c,
            )
        }))
    }

    /// Untagged send (optionally with remote CQ data).
    ///
    /// # Errors
    /// As [`Endpoint::send_tagged`].
    #[inline]
    pub fn send(
        &self,
        buf: Buf<'_>,
        cq_data: Option<u64>,
        dest: FiAddr,
        context: u64,
    ) -> Result<()> {
        self.sent(self.post(&buf, Op::Send, context, |c| {
            self.inner
                .fid
                .send(buf.io, cq_data, self.inner.av.destination(dest)?, c)
        }))
    }

    /// Sends `data` with remote CQ data `cq_data` straight from the caller's memory: no
    /// registration, no copy. Returns
    /// only once the provider is done with `data`: `wait` reads the CQ (the completion comes
    /// back with `context`, as any), and once it reports [`SendWait::Done`] and the send's
    /// completion was indeed read (tracked here; until then `Done` counts as `Pending`); or,
    /// if it reports [`SendWait::Abandon`], after dropping the endpoint: closing it is the
    /// only way libfabric promises to stop touching a buffer (where it lingers instead, its
    /// CQ retires). The endpoint comes back unless it was dropped; `wait` gets no handle of
    /// it, so dropping it closes it.
    ///
    /// Needs the endpoint's only handle (else dropping it would not close it), on shm a CQ
    /// of its own (else the CQ would not retire), and a provider without `FI_MR_LOCAL`;
    /// otherwise nothing is sent and an `InvalidArgument` error comes back with the
    /// endpoint, so the caller can copy into registered memory instead.
    ///
    /// # Errors
    /// As [`Endpoint::inject_tagged`] when posting fails (nothing was sent).
    pub fn send_unregistered(
        self,
        data: &[u8],
        cq_data: u64,
        dest: FiAddr,
        context: u64,
        mut wait: impl FnMut() -> SendWait,
    ) -> (Option<Endpoint>, Result<()>) {
        let dest = match self.inner.av.destination(dest) {
            Ok(dest) => dest,
            Err(e) => return (Some(self), Err(e)),
        };
        raw::send_unregistered(self, data, cq_data, dest, context, &mut wait)
    }

    /// Whether sends may go out from unregistered application memory (no `FI_MR_LOCAL`):
    /// what [`Endpoint::send_from`] and [`Endpoint::send_unregistered`] need.
    #[inline]
    pub fn sends_unregistered(&self) -> bool {
        self.attributes().mr_mode & crate::flags::MR_LOCAL == 0
    }

    /// Posts a send of `buf` with remote CQ data `cq_data` straight from the application's
    /// memory (no registration, no copy) and returns at once; the completion, with
    /// `context`, comes through the CQ. The memory must stay as it is until then, or until
    /// the endpoint is closed (its last handle dropped), which [`SendBuffer`]'s contract
    /// guarantees.
    ///
    /// # Errors
    /// `InvalidArgument` (nothing sent) where the provider needs `FI_MR_LOCAL`, so the caller
    /// can copy into registered memory instead; otherwise as [`Endpoint::inject_tagged`].
    #[inline]
    pub fn send_from(
        &self,
        buf: &SendBuffer,
        cq_data: u64,
        dest: FiAddr,
        context: u64,
    ) -> Result<()> {
        if !self.sends_unregistered() {
            return Err(crate::Error::InvalidArgument("provider needs FI_MR_LOCAL"));
        }
        self.sent(raw::send_from(
            &self.inner.fid,
            buf,
            cq_data,
            self.inner.av.destination(dest)?,
            context,
        ))
    }

    /// Posts an RMA read (`fi_read`) of `len` bytes of the peer's registered memory at
    /// `remote_addr` with `key` into `buf` at offset `at`, straight into the application's
    /// memory (no registration, no copy), and returns at once; the completion, with
    /// `context`, comes through the CQ. [`RecvBuffer`]'s contract keeps the memory to the
    /// provider until then.
    ///
    /// # Errors
    /// `InvalidArgument` (nothing posted) where the provider needs `FI_MR_LOCAL`, or for a
    /// range outside `buf`; otherwise as [`Endpoint::inject_tagged`].
    #[allow(clippy::too_many_arguments)]
    pub fn read_to(
        &self,
        buf: &RecvBuffer,
        at: usize,
        len: usize,
        src: FiAddr,
        remote_addr: u64,
        key: u64,
        context: u64,
    ) -> Result<()> {
        if !self.sends_unregistered() {
            return Err(crate::Error::InvalidArgument("provider needs FI_MR_LOCAL"));
        }
        self.sent(raw::read_to(
            &self.inner.fid,
            buf,
            (at, len),
            (self.inner.av.destination(src)?, remote_addr, key),
            context,
        ))
    }

    /// An idle record for an unregistered send: the one kept, or a new one.
    pub(crate) fn take_send_record(&self) -> Box<crate::mr::Slot> {
        self.inner
            .send_record
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .unwrap_or_else(|| Box::new(crate::mr::Slot::idle()))
    }

    /// Keeps an idle record for the next unregistered send.
    pub(crate) fn keep_send_record(&self, record: Box<crate::mr::Slot>) {
        *self
            .inner
            .send_record
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(record);
    }

    /// Whether this is the endpoint's only handle.
    pub(crate) fn is_unique(&self) -> bool {
        Arc::strong_count(&self.inner) == 1
    }

    /// Whether dropping its only handle stops this process's provider using the memory its
    /// operations named: it closes, or it lingers (shm) with a CQ that no other open
    /// endpoint shares, which then retires (reads nothing more).
    pub(crate) fn drop_ends_its_operations(&self) -> bool {
        !self.inner.lingers || self.inner.cq.open_endpoints() == 1
    }

    pub(crate) fn fid(&self) -> &EpFid {
        &self.inner.fid
    }

    /// Posts a tagged receive matching `tag` on the bits not set in `ignore`, from `src`
    /// ([`FiAddr::UNSPEC`]: anyone). Until its completion (or error completion) was read from
    /// the CQ, [`crate::MemoryRegion::read`] and [`crate::MemoryRegion::write`] refuse the
    /// buffer's slot.
    ///
    /// # Errors
    /// As [`Endpoint::inject_tagged`]; [`crate::Error::InUse`] if an operation is in flight
    /// on the slot or safe code is copying it.
    #[inline]
    pub fn recv_tagged(
        &self,
        buf: Buf<'_>,
        src: FiAddr,
        tag: u64,
        ignore: u64,
        context: u64,
    ) -> Result<()> {
        self.post(&buf, Op::Recv, context, |c| {
            self.inner
                .fid
                .trecv(buf.io, self.inner.av.source(src)?, tag, ignore, c)
        })
    }

    /// Posts an untagged receive of one message; the slot is held as by
    /// [`Endpoint::recv_tagged`].
    ///
    /// # Errors
    /// As [`Endpoint::recv_tagged`].
    #[inline]
    pub fn recv(&self, buf: Buf<'_>, src: FiAddr, context: u64) -> Result<()> {
        self.post(&buf, Op::Recv, context, |c| {
            self.inner
                .fid
                .recv(buf.io, self.inner.av.source(src)?, false, c)
        })
    }

    /// Posts `buf` as an untagged multi-receive buffer (`FI_MULTI_RECV`): each message gets a
    /// completion pointing into the buffer; the completion carrying the `FI_MULTI_RECV` flag
    /// says the provider has released the buffer, which may then be posted again.
    ///
    /// Until that completion (or the `FI_ECANCELED` of a cancel) was read from the CQ,
    /// [`crate::MemoryRegion::read`] of the buffer's slot succeeds only for bytes that a
    /// completion of this post reported (the messages received so far), and writes fail.
    ///
    /// In libfabric 1.17 multi-receive is defined for untagged receives only.
    ///
    /// # Errors
    /// As [`Endpoint::recv_tagged`].
    #[inline]
    pub fn recv_multi(&self, buf: Buf<'_>, context: u64) -> Result<()> {
        self.post(&buf, Op::MultiRecv, context, |c| {
            self.inner
                .fid
                .recv(buf.io, ofi_sys::FI_ADDR_UNSPEC, true, c)
        })
    }

    /// RMA write of `buf` into the peer's registered memory at `remote_addr` with `key`.
    ///
    /// # Errors
    /// As [`Endpoint::send_tagged`]; unsupported without `FI_RMA`.
    #[inline]
    pub fn write(
        &self,
        buf: Buf<'_>,
        dest: FiAddr,
        remote_addr: u64,
        key: u64,
        context: u64,
    ) -> Result<()> {
        self.sent(self.post(&buf, Op::Send, context, |c| {
            self.inner.fid.rma_write(
                buf.io,
                self.inner.av.destination(dest)?,
                remote_addr,
                key,
                c,
            )
        }))
    }

    /// RMA read (`fi_read`) of `buf.len()` bytes of the peer's registered memory at
    /// `remote_addr` with `key` into `buf`; the completion (with `context`) says the data is
    /// there.
    ///
    /// # Errors
    /// As [`Endpoint::inject_tagged`]; unsupported without `FI_RMA`.
    #[inline]
    pub fn read(
        &self,
        buf: Buf<'_>,
        src: FiAddr,
        remote_addr: u64,
        key: u64,
        context: u64,
    ) -> Result<()> {
        self.sent(self.post(&buf, Op::Recv, context, |c| {
            self.inner
                .fid
                .rma_read(buf.io, self.inner.av.destination(src)?, remote_addr, key, c)
        }))
    }

    /// RMA read (`fi_read`) of `out.len()` bytes of the peer's registered memory at
    /// `remote_addr` with `key` straight into `out`: no registration, no copy. Returns only
    /// once the provider is done with `out`: its completion (with `context`, handed out as
    /// usual by whoever reads the CQ) was read; meanwhile `wait` is called over and over, and
    /// must read the CQ (or let another thread do it). There is no abandoning the read: a
    /// read whose completion never comes never returns (providers complete or flush every
    /// read, an error completion when the peer is gone). Should `wait` panic with the read
    /// in flight, the process aborts.
    ///
    /// # Errors
    /// `InvalidArgument` (nothing posted) where the provider needs `FI_MR_LOCAL`, so the
    /// caller can read into registered memory instead; the read's error completion;
    /// otherwise as [`Endpoint::inject_tagged`].
    pub fn read_in_place(
        &self,
        out: &mut [u8],
        src: FiAddr,
        remote_addr: u64,
        key: u64,
        context: u64,
        mut wait: impl FnMut(),
    ) -> Result<()> {
        if !self.sends_unregistered() {
            return Err(crate::Error::InvalidArgument("provider needs FI_MR_LOCAL"));
        }
        raw::read_in_place(
            &self.inner.fid,
            out,
            (self.inner.av.destination(src)?, remote_addr, key),
            context,
            &mut wait,
        )
    }

    /// Cancels the receive posted into `buf`'s slot (if it is still pending); it completes
    /// with `FI_ECANCELED`, which frees the slot.
    ///
    /// # Errors
    /// `fi_cancel` failures; `InvalidArgument` for a sink region (nothing tracks its
    /// receives) and for a multi-receive buffer: tcp;ofi_rxm reports its `FI_ECANCELED`
    /// while a message it matched earlier is still being written into it (measured), so
    /// the slot could not be freed then; such a buffer is released by its completion
    /// flagged `FI_MULTI_RECV`, or by closing the endpoint.
    pub fn cancel(&self, buf: Buf<'_>) -> Result<()> {
        if buf.in_multi_receive() {
            return Err(crate::Error::InvalidArgument(
                "a multi-receive buffer cannot be cancelled (close the endpoint)",
            ));
        }
        let context = buf.record().ok_or(crate::Error::InvalidArgument(
            "receives into a sink region cannot be cancelled",
        ))?;
        self.inner.fid.cancel(context)
    }

    /// Keeps `memory` registered (and allocated) until this endpoint is closed (its last
    /// handle dropped), when the provider can no longer serve reads of it through the
    /// endpoint: for memory abandoned while a peer may be reading it (the peer died
    /// mid-read), which fi_mr(3) does not let us close under a read in flight.
    pub fn keep_until_closed(&self, memory: impl Into<KeptMemory>) {
        self.inner
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(memory.into());
    }
}

/// Memory a peer may still read through an endpoint ([`Endpoint::keep_until_closed`]).
pub enum KeptMemory {
    /// An application's buffer, exposed.
    Exposed(ExposedBuffer),
    /// A region of ours, exposed.
    Region(MemoryRegion),
}

impl From<ExposedBuffer> for KeptMemory {
    fn from(exposed: ExposedBuffer) -> KeptMemory {
        KeptMemory::Exposed(exposed)
    }
}

impl From<MemoryRegion> for KeptMemory {
    fn from(region: MemoryRegion) -> KeptMemory {
        KeptMemory::Region(region)
    }
}
