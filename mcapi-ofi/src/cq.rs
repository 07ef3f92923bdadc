//! Completion queues: where every operation reports that it finished.

use crate::error::{Error, Result};
use crate::fabric::Domain;
use crate::mr::MemoryRegion;
use crate::raw::{self, CqFid};
pub use crate::raw::{Completion, CompletionError};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How a thread may sleep until completions arrive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitObject {
    /// No wait object: poll only.
    None,
    /// Whatever the provider prefers; enables [`CompletionQueue::sread`].
    Unspec,
    /// A file descriptor ([`CompletionQueue::wait_fd`]), for `poll`/`epoll` with other fds.
    Fd,
}

/// A completion queue in `FI_CQ_FORMAT_TAGGED`. Keeps its domain open.
#[derive(Clone)]
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
}

pub(crate) struct CqInner {
    // Declared first: the CQ is closed before the regions its completions name are freed.
    pub(crate) fid: CqFid,
    /// Held across a read and the bookkeeping of what it read: a completion is finished
    /// (its slot released) before another thread reads the next, so an operation posted
    /// in a slot meanwhile is never taken for the one that completed, and the error entry's
    /// data is read before another read may replace it (fi_cq(3): "serialize access to the
    /// CQ when processing errors").
    reading: ReadLock,
    /// Every region an operation of an endpoint bound to this CQ was posted on, kept until
    /// the CQ is closed (after its endpoints): the provider may use the memory until the
    /// endpoint closes, and completions read from the CQ name the regions' slots.
    pinned: Mutex<Vec<MemoryRegion>>,
    /// Where closed endpoints linger (`ep::lingering`): the endpoints bound to this CQ that
    /// are open. Once the last has closed (and lingers), the CQ is retired: it reads
    /// nothing more (a read would progress a lingering endpoint) and lets its pinned
    /// regions go (nothing touches them again).
    open_endpoints: AtomicUsize,
    retired: AtomicBool,
    id: u64,
    pub(crate) domain: Domain,
    wait: WaitObject,
    /// The fd of an fd wait object, looked up once at open.
    wait_fd: Option<RawFd>,
}

static NEXT_CQ_ID: AtomicU64 = AtomicU64::new(1);

/// What [`CompletionQueue::sleep`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sleep {
    /// Slept until a wait object fired or the timeout passed.
    Slept,
    /// Did not sleep: completions, or provider work that only a CQ read does, are pending.
    Pending,
    /// Did not sleep: no CQs, a CQ without an fd wait object, or more CQs than
    /// [`CompletionQueue::MAX_SLEEP_CQS`].
    Unsupported,
}

impl CompletionQueue {
    /// Opens a CQ with room for `size` entries (0: provider default).
    ///
    /// # Errors
    /// `fi_cq_open` failures, e.g. a provider without support for the wait object.
    pub fn open(domain: &Domain, size: usize, wait: WaitObject) -> Result<CompletionQueue> {
        let obj = match wait {
            WaitObject::None => ofi_sys::FI_WAIT_NONE,
            WaitObject::Unspec => ofi_sys::FI_WAIT_UNSPEC,
            WaitObject::Fd => ofi_sys::FI_WAIT_FD,
        };
        let fid = raw::open_cq(&domain.inner.fid, size, obj)?;
        let wait_fd = match wait {
            WaitObject::None => None,
            WaitObject::Fd => fid.wait_fd(true),
            WaitObject::Unspec => fid.wait_fd(false),
        };
        Ok(CompletionQueue {
            inner: Arc::new(CqInner {
                fid,
                reading: ReadLock::default(),
                pinned: Mutex::new(Vec::new()),
                open_endpoints: AtomicUsize::new(0),
                retired: AtomicBool::new(false),
                id: NEXT_CQ_ID.fetch_add(1, Ordering::Relaxed),
                domain: domain.clone(),
                wait,
                wait_fd,
            }),
        })
    }

    /// Keeps `region` alive for as long as this CQ (see `CqInner::pinned`).
    #[inline(always)]
    pub(crate) fn pin(&self, region: &MemoryRegion) {
        if region.inner.pinned_by.load(Ordering::Relaxed) != self.inner.id {
            self.pin_slow(region);
        }
    }

    #[cold]
    fn pin_slow(&self, region: &MemoryRegion) {
        let mut pinned = self.inner.pinned.lock().unwrap_or_else(|p| p.into_inner());
        if !pinned.iter().any(|r| Arc::ptr_eq(&r.inner, &region.inner)) {
            pinned.push(region.clone());
        }
        region
            .inner
            .pinned_by
            .store(self.inner.id, Ordering::Relaxed);
    }

    /// An endpoint that may linger was bound to this CQ (see `CqInner::open_endpoints`).
    pub(crate) fn endpoint_opened(&self) {
        self.inner.open_endpoints.fetch_add(1, Ordering::SeqCst);
    }

    /// How many endpoints that linger when closed are bound to this CQ and open.
    pub(crate) fn open_endpoints(&self) -> usize {
        self.inner.open_endpoints.load(Ordering::SeqCst)
    }

    /// One of those endpoints was closed, and lingers: the last to go retires the CQ.
    pub(crate) fn endpoint_closed(&self) {
        let inner = &self.inner;
        if inner.open_endpoints.fetch_sub(1, Ordering::SeqCst) == 1 {
            // After a read under way, none again.
            drop(inner.reading.lock());
            inner.retired.store(true, Ordering::SeqCst);
            let pinned =
                std::mem::take(&mut *inner.pinned.lock().unwrap_or_else(|p| p.into_inner()));
            drop(pinned);
        }
    }

    #[inline(always)]
    fn retired(&self) -> bool {
        self.inner.retired.load(Ordering::Acquire)
    }

    /// Reads ready completions into `out` without blocking; `Ok(0)` when there are none.
    /// Reading is also what progresses providers with manual progress.
    ///
    /// # Errors
    /// [`Error::Completion`] for an error completion (read with `fi_cq_readerr`; the entry is
    /// consumed), `Error::Call` for a failing CQ.
    #[inline(always)]
    pub fn read(&self, out: &mut [Completion]) -> Result<usize> {
        let _reading = self.inner.reading.lock();
        if self.retired() {
            return Ok(0);
        }
        self.inner.fid.read(out)
    }

    /// One progress pass that takes no completion (a read of none). For providers that move
    /// posted operations only in CQ reads ([`crate::Endpoint`] calls it after each post
    /// where that holds). It waits for a read under way in another thread, which may have
    /// passed its transmit progress before the post.
    #[inline]
    pub(crate) fn progress_posts(&self) {
        let _reading = self.inner.reading.lock();
        if !self.retired() {
            self.inner.fid.progress_only();
        }
    }

    /// Blocks up to `timeout_ms` (`None`: forever) for completions on the wait object, or
    /// until [`CompletionQueue::signal`]: `Ok(0)` then. Where the CQ has an fd, it sleeps on
    /// it and other threads read the CQ meanwhile; without one it sleeps in the provider's
    /// blocking read, and other readers wait for it (shm's ignores the timeout: it returns
    /// with a completion only).
    ///
    /// # Errors
    /// As [`CompletionQueue::read`]; `InvalidArgument` if the CQ has no wait object.
    pub fn sread(&self, out: &mut [Completion], timeout_ms: Option<u32>) -> Result<usize> {
        if self.inner.wait == WaitObject::None {
            return Err(Error::InvalidArgument("CQ opened without a wait object"));
        }
        let n = self.read(out)?;
        if n > 0 {
            return Ok(n);
        }
        // (`None`: a day at a time, which a completion or a signal ends.)
        let timeout = Duration::from_millis(timeout_ms.map_or(86_400_000, u64::from));
        if CompletionQueue::sleep(std::slice::from_ref(self), timeout)? != Sleep::Unsupported {
            // Woken by a completion, a signal or the timeout: one look.
            return self.read(out);
        }
        let t = timeout_ms.map_or(-1, |t| t.min(i32::MAX as u32) as i32);
        let _reading = self.inner.reading.lock();
        if self.retired() {
            return Ok(0);
        }
        match self.inner.fid.sread(out, t) {
            Err(e) if e.errno() == Some(ofi_sys::FI_ETIMEDOUT as i32) => Ok(0),
            Err(e) if e.errno() == Some(ofi_sys::FI_EINTR as i32) => Ok(0),
            r => r,
        }
    }

    /// The wait object's file descriptor, when the CQ was opened with [`WaitObject::Fd`].
    /// Before sleeping on it, call [`CompletionQueue::trywait`].
    pub fn wait_fd(&self) -> Option<RawFd> {
        self.inner.wait_fd
    }

    /// How many CQs [`CompletionQueue::sleep`] can sleep on at once.
    pub const MAX_SLEEP_CQS: usize = raw::MAX_POLL_FDS;

    /// Sleeps on the fd wait objects of `cqs` (one `poll`) until one of them may hold a
    /// completion or `timeout` passes. `fi_trywait` comes first: it refuses while
    /// completions, or provider work that only a CQ read does, are pending
    /// ([`Sleep::Pending`]: read the CQs, then try again).
    ///
    /// # Errors
    /// `fi_trywait` and `ppoll` failures.
    pub fn sleep(cqs: &[CompletionQueue], timeout: Duration) -> Result<Sleep> {
        CompletionQueue::sleep_unless(cqs, timeout, || false)
    }

    /// [`CompletionQueue::sleep`], but once every `fi_trywait` agreed, `pending` is asked
    /// whether work that is not on the CQs waits (e.g. completions another thread read
    /// for the caller, whose signal the `fi_trywait` just reset): [`Sleep::Pending`] then.
    ///
    /// # Errors
    /// `fi_trywait` and `ppoll` failures.
    pub fn sleep_unless(
        cqs: &[CompletionQueue],
        timeout: Duration,
        pending: impl FnOnce() -> bool,
    ) -> Result<Sleep> {
        let mut fds = [0; raw::MAX_POLL_FDS];
        if cqs.is_empty() || cqs.len() > fds.len() {
            return Ok(Sleep::Unsupported);
        }
        for (fd, cq) in fds.iter_mut().zip(cqs) {
            match cq.wait_fd() {
                Some(f) => *fd = f,
                None => return Ok(Sleep::Unsupported),
            }
        }
        for cq in cqs {
            if !cq.trywait()? {
                return Ok(Sleep::Pending);
            }
        }
        if pending() {
            return Ok(Sleep::Pending);
        }
        raw::poll_readable(&fds[..cqs.len()], timeout)?;
        Ok(Sleep::Slept)
    }

    /// `fi_trywait`: `Ok(true)` when it is safe to sleep on [`CompletionQueue::wait_fd`]
    /// (nothing is pending that only a CQ read would progress).
    ///
    /// # Errors
    /// `fi_trywait` failures.
    pub fn trywait(&self) -> Result<bool> {
        if self.retired() {
            return Ok(true); // nothing will ever complete
        }
        self.inner
            .domain
            .inner
            .fabric
            .inner
            .fid
            .trywait(&self.inner.fid)
    }

    /// Wakes a thread blocked in [`CompletionQueue::sread`].
    ///
    /// # Errors
    /// `fi_cq_signal` failures.
    pub fn signal(&self) -> Result<()> {
        self.inner.fid.signal()
    }

    /// Runs `post` until it stops returning `-FI_EAGAIN`, reading the CQ between attempts so
    /// the provider can make room; completions read meanwhile go to `on_completion`, none is
    /// lost. Returns how many times `post` was refused.
    ///
    /// # Errors
    /// The first error of `post` other than `-FI_EAGAIN`, or a CQ read error.
    pub fn retry_on_again(
        &self,
        mut post: impl FnMut() -> Result<()>,
        mut on_completion: impl FnMut(Result<Completion>),
    ) -> Result<u64> {
        let mut refusals = 0;
        loop {
            match post() {
                Ok(()) => return Ok(refusals),
                Err(e) if e.is_again() => {
                    refusals += 1;
                    let mut buf = [Completion::default(); 16];
                    match self.read(&mut buf) {
                        Ok(n) => buf[..n].iter().for_each(|c| on_completion(Ok(*c))),
                        Err(e @ Error::Completion(_)) => on_completion(Err(e)),
                        Err(e) => return Err(e),
                    }
                    if refusals % 1024 == 0 {
                        std::thread::yield_now();
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// The CQ's reader lock (`CqInner::reading`): a flag, since a read holds it only for the
/// read and its bookkeeping (a lock that counted poisoning and waiters cost a CQ poll about
/// a tenth more).
#[derive(Default)]
struct ReadLock(AtomicBool);

struct Reading<'a>(&'a AtomicBool);

impl ReadLock {
    #[inline(always)]
    fn lock(&self) -> Reading<'_> {
        while self
            .0
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            // Another thread reads (an `sread` may sleep): let it run.
            std::thread::yield_now();
        }
        Reading(&self.0)
    }
}

impl Drop for Reading<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}
