//! Address vectors: raw peer addresses in, `fi_addr_t` handles out.

use crate::error::Result;
use crate::fabric::Domain;
use crate::raw::{self, AvFid};
use std::sync::Arc;

/// A peer address as libfabric numbers it in an address vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FiAddr(pub u64);

impl FiAddr {
    /// `FI_ADDR_UNSPEC`: any source (receives) or no address.
    pub const UNSPEC: FiAddr = FiAddr(ofi_sys::FI_ADDR_UNSPEC);
}

/// An address vector (`FI_AV_TABLE`). Keeps its domain open.
#[derive(Clone)]
pub struct AddressVector {
    pub(crate) inner: Arc<AvInner>,
}

pub(crate) struct AvInner {
    pub(crate) fid: AvFid,
    pub(crate) domain: Domain,
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
            }),
        })
    }

    /// Inserts a peer's raw address (from [`crate::Endpoint::address`] on the peer).
    ///
    /// # Errors
    /// `fi_av_insert` failures (e.g. a malformed address).
    pub fn insert(&self, addr: &[u8]) -> Result<FiAddr> {
        self.inner.fid.insert(addr).map(FiAddr)
    }

    /// Removes a peer; operations to it fail afterwards.
    ///
    /// # Errors
    /// `fi_av_remove` failures.
    pub fn remove(&self, addr: FiAddr) -> Result<()> {
        self.inner.fid.remove(addr.0)
    }
}
