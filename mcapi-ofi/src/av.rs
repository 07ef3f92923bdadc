//! Address vectors: raw peer addresses in, `fi_addr_t` handles out.

use crate::error::{Error, Result};
use crate::fabric::Domain;
use crate::raw::{self, AvFid};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A peer address as libfabric numbers it in an address vector: made only by
/// [`AddressVector::insert`] (or [`FiAddr::UNSPEC`]), and used only with endpoints bound to
/// that vector while its number is in it. Providers index their tables with it unchecked
/// (a made-up number, one of another vector or one removed is a wild memory access), so
/// every operation checks it first. (A provider may hand a removed address's number to
/// an address inserted later, which the old value then names: drop values once removed.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FiAddr {
    raw: u64,
    /// The vector it is of (0: none, `UNSPEC`).
    av: u32,
}

impl FiAddr {
    /// `FI_ADDR_UNSPEC`: any source (receives); no destination.
    pub const UNSPEC: FiAddr = FiAddr {
        raw: ofi_sys::FI_ADDR_UNSPEC,
        av: 0,
    };
}

/// Which addresses of a vector are there (inserted, not removed): a bit per index, read
/// without a lock on every operation. A vector holds at most [`MAX_ADDRESSES`].
struct LiveSet(Box<[AtomicU64]>);

/// The most addresses an address vector holds (8 KiB of bits).
pub const MAX_ADDRESSES: usize = 1 << 16;

impl LiveSet {
    fn new() -> LiveSet {
        LiveSet((0..MAX_ADDRESSES / 64).map(|_| AtomicU64::new(0)).collect())
    }

    /// Marks `index` there (or not); `false` if it is beyond the set.
    fn set(&self, index: u64, live: bool) -> bool {
        let Some(word) = self.0.get((index / 64) as usize) else {
            return false;
        };
        let bit = 1 << (index % 64);
        if live {
            word.fetch_or(bit, Ordering::Release);
        } else {
            word.fetch_and(!bit, Ordering::Release);
        }
        true
    }

    #[inline(always)]
    fn has(&self, index: u64) -> bool {
        self.0
            .get((index / 64) as usize)
            .is_some_and(|w| w.load(Ordering::Acquire) & (1 << (index % 64)) != 0)
    }
}

/// What an address vector holds (`AvInner::inserted`).
#[derive(Default)]
struct Inserted {
    by_bytes: HashMap<Vec<u8>, (u64, u32)>,
    bytes_of: HashMap<u64, Vec<u8>>,
    /// Where closed endpoints linger (shm): the addresses removed, which an endpoint may
    /// still reach through operations in flight (`Endpoint`'s lingering).
    removed: std::collections::HashSet<Vec<u8>>,
}

/// Numbers address vectors, so that an address names its own.
static NEXT_AV: AtomicU32 = AtomicU32::new(1);

/// An address vector (`FI_AV_TABLE`). Keeps its domain open.
#[derive(Clone)]
pub struct AddressVector {
    pub(crate) inner: Arc<AvInner>,
}

pub(crate) struct AvInner {
    pub(crate) fid: AvFid,
    pub(crate) domain: Domain,
    id: u32,
    live: LiveSet,
    /// The addresses in, by their bytes and by their numbers, with how many times each was
    /// inserted: the provider sees one insert per address and one remove at the last
    /// (providers differ on a second insert: most count it, ofi_rxd drops the entry at the
    /// first remove, shm runs out of entries).
    inserted: Mutex<Inserted>,
    /// Whether its endpoints linger when closed (`crate::info::shares_memory_in_process`).
    lingers: bool,
}

impl AddressVector {
    /// Opens a table sized for about `count` peers (it grows as needed on most providers).
    ///
    /// # Errors
    /// `fi_av_open` failures.
    pub fn open(domain: &Domain, count: usize) -> Result<AddressVector> {
        let fid = raw::open_av(&domain.inner.fid, count)?;
        Ok(AddressVector {
            inner: Arc::new(AvInner {
                fid,
                domain: domain.clone(),
                id: NEXT_AV.fetch_add(1, Ordering::Relaxed),
                live: LiveSet::new(),
                inserted: Mutex::default(),
                lingers: crate::info::shares_memory_in_process(domain.inner.info.provider()),
            }),
        })
    }

    /// Inserts a peer's raw address (from [`crate::Endpoint::address`] on the peer). The
    /// same bytes inserted again give the same value, counted: it stays until removed as
    /// often.
    ///
    /// # Errors
    /// `fi_av_insert` failures (e.g. a malformed address).
    pub fn insert(&self, addr: &[u8]) -> Result<FiAddr> {
        if self.inner.lingers {
            // shm maps an endpoint of this process at the insert: only one not closed.
            return crate::ep::while_not_closed_in_process(addr, || self.insert_checked(addr));
        }
        self.insert_checked(addr)
    }

    fn insert_checked(&self, addr: &[u8]) -> Result<FiAddr> {
        let mut guard = self
            .inner
            .inserted
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let inserted = &mut *guard;
        if let Some((raw, count)) = inserted.by_bytes.get_mut(addr) {
            *count += 1;
            return Ok(FiAddr {
                raw: *raw,
                av: self.inner.id,
            });
        }
        let raw = self.inner.fid.insert(addr)?;
        if !self.inner.live.set(raw, true) {
            _ = self.inner.fid.remove(raw);
            return Err(Error::InvalidArgument(
                "address vector full (MAX_ADDRESSES)",
            ));
        }
        inserted.by_bytes.insert(addr.to_vec(), (raw, 1));
        inserted.bytes_of.insert(raw, addr.to_vec());
        Ok(FiAddr {
            raw,
            av: self.inner.id,
        })
    }

    /// Removes a peer (once for each time it was inserted); operations to it are refused
    /// afterwards, until the provider hands its number to an address inserted later.
    /// (Operations to it still in flight end as the provider ends them: fi_av(3) leaves
    /// that to the provider.)
    ///
    /// # Errors
    /// `InvalidArgument` for an address of another vector or one removed already;
    /// `fi_av_remove` failures.
    pub fn remove(&self, addr: FiAddr) -> Result<()> {
        let mut guard = self
            .inner
            .inserted
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let raw = self.destination(addr)?;
        let Inserted {
            by_bytes,
            bytes_of,
            removed,
        } = &mut *guard;
        let Some((_, count)) = bytes_of.get(&raw).and_then(|b| by_bytes.get_mut(b)) else {
            return Err(foreign(addr));
        };
        *count -= 1;
        if *count > 0 {
            // Still in under another handle.
            return Ok(());
        }
        if let Some(bytes) = bytes_of.remove(&raw) {
            by_bytes.remove(&bytes);
            if self.inner.lingers {
                removed.insert(bytes);
            }
        }
        self.inner.live.set(raw, false);
        self.inner.fid.remove(raw)
    }

    /// Whether `addr` was ever inserted (where closed endpoints linger; elsewhere whether
    /// it is in).
    pub(crate) fn ever_held(&self, addr: &[u8]) -> bool {
        let inserted = self
            .inner
            .inserted
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        inserted.by_bytes.contains_key(addr) || inserted.removed.contains(addr)
    }

    /// The provider's number for `addr` as an operation's peer, if it may be one: an
    /// address of this vector that is there.
    #[inline(always)]
    pub(crate) fn destination(&self, addr: FiAddr) -> Result<u64> {
        if addr.av != self.inner.id || !self.inner.live.has(addr.raw) {
            return Err(foreign(addr));
        }
        Ok(addr.raw)
    }

    /// As [`AddressVector::destination`], or `FI_ADDR_UNSPEC` (a receive from anyone).
    #[inline]
    pub(crate) fn source(&self, addr: FiAddr) -> Result<u64> {
        if addr == FiAddr::UNSPEC {
            return Ok(addr.raw);
        }
        self.destination(addr)
    }
}

#[cold]
fn foreign(addr: FiAddr) -> Error {
    Error::InvalidArgument(if addr == FiAddr::UNSPEC {
        "FI_ADDR_UNSPEC is no peer"
    } else {
        "an address not (or no longer) in the endpoint's address vector"
    })
}
