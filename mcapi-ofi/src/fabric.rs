//! Fabric and domain: the roots of every other object.

use crate::error::{Error, Result};
use crate::info::{Attributes, Info};
use crate::raw::{self, DomainFid, FabricFid};
use std::sync::Arc;

/// An open fabric (`fi_fabric`). Cheap to clone; closed when the last clone and every child
/// object are gone.
#[derive(Clone)]
pub struct Fabric {
    pub(crate) inner: Arc<FabricInner>,
}

pub(crate) struct FabricInner {
    pub(crate) fid: FabricFid,
    pub(crate) info: Info,
}

impl Fabric {
    /// Opens the fabric that `info` describes.
    ///
    /// # Errors
    /// `fi_fabric` failures.
    pub fn open(info: &Info) -> Result<Fabric> {
        let fid = raw::open_fabric(&info.raw)?;
        Ok(Fabric {
            inner: Arc::new(FabricInner {
                fid,
                info: info.clone(),
            }),
        })
    }

    /// The provider information this fabric was opened with.
    pub fn info(&self) -> &Info {
        &self.inner.info
    }
}

/// An open access domain (`fi_domain`). Keeps its fabric open.
#[derive(Clone)]
pub struct Domain {
    pub(crate) inner: Arc<DomainInner>,
}

pub(crate) struct DomainInner {
    // Closed before the domain.
    pub(crate) kept_exposures: crate::raw::KeptExposures,
    // Declared before the fabric reference: closed before it is released.
    pub(crate) fid: DomainFid,
    pub(crate) fabric: Fabric,
    pub(crate) info: Info,
}

impl Domain {
    /// Whether `other` is a handle of this same domain.
    pub(crate) fn is(&self, other: &Domain) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Opens the domain that `info` describes, on `fabric`.
    ///
    /// # Errors
    /// `fi_domain` failures.
    pub fn open(fabric: &Fabric, info: &Info) -> Result<Domain> {
        // A domain of another provider's info on this fabric would report that provider's
        // properties (and reads made by the reader where they are not).
        if info.provider() != fabric.inner.info.provider() {
            return Err(Error::InvalidArgument(
                "the info is of another provider than the fabric's",
            ));
        }
        let fid = raw::open_domain(&fabric.inner.fid, &info.raw)?;
        Ok(Domain {
            inner: Arc::new(DomainInner {
                kept_exposures: Default::default(),
                fid,
                fabric: fabric.clone(),
                info: info.clone(),
            }),
        })
    }

    /// Opens fabric and domain for `info` in one step.
    ///
    /// # Errors
    /// As [`Fabric::open`] and [`Domain::open`].
    pub fn open_info(info: &Info) -> Result<Domain> {
        Domain::open(&Fabric::open(info)?, info)
    }

    /// Negotiated attributes.
    pub fn attributes(&self) -> &Attributes {
        self.inner.info.attributes()
    }

    /// The provider information.
    pub fn info(&self) -> &Info {
        &self.inner.info
    }

    /// The fabric this domain belongs to.
    pub fn fabric(&self) -> &Fabric {
        &self.inner.fabric
    }

    /// Whether peers' remote reads of this domain's memory are made by the reading peer's
    /// own process, so the provider here never reads registered memory on their behalf:
    /// shm where it can use cross-memory attach (`process_vm_readv` by the reader; where
    /// it cannot, this side's progress copies the data into bounce buffers instead).
    pub fn reads_made_by_reader(&self) -> bool {
        self.info().provider() == "shm" && crate::raw::cross_memory_attach_allowed()
    }

    /// Lets peers read `data` in place (registered for remote reads: no copy) while `f` runs;
    /// `f` gets the key to hand them, with `data.as_ptr()` as the address where the domain
    /// has `FI_MR_VIRT_ADDR`. The domain may keep the registration after `f` returns (for
    /// the next exposure of the same place): a peer that reads after that reads whatever
    /// `data`'s memory holds then, which its process could read anyway (reads here are
    /// made by the reader's process); the caller waits in `f` until its peers are done.
    ///
    /// # Errors
    /// `InvalidArgument` where this domain's provider would serve remote reads from `data`
    /// itself ([`Domain::reads_made_by_reader`] false: it might still be doing so after `f`
    /// returned); `fi_mr_reg` failures.
    pub fn expose_for_reads<R>(&self, data: &[u8], f: impl FnOnce(u64) -> R) -> Result<R> {
        if !self.reads_made_by_reader() {
            return Err(crate::Error::InvalidArgument(
                "the provider serves remote reads itself",
            ));
        }
        crate::raw::expose_for_reads(self, data, f)
    }

    /// Lets peers read `buf` in place until the result is dropped (as
    /// [`Domain::expose_for_reads`] does for the length of a call): for a send that
    /// completes later, when the peers say they are done. Where this side's provider serves
    /// the reads ([`Domain::reads_made_by_reader`] false) only memory that lives for good
    /// ([`crate::SendBuffer::lives_forever`]) is exposed: a read being served when its
    /// reader dies may go on after anyone can tell; such an exposure is then dropped only
    /// once no read can be served any more ([`crate::Endpoint::keep_until_closed`]).
    ///
    /// # Errors
    /// `InvalidArgument` for a buffer that does not live for good where this side serves
    /// reads; `fi_mr_reg` failures.
    pub fn expose_send_buffer(&self, buf: crate::SendBuffer) -> Result<crate::ExposedBuffer> {
        if !self.reads_made_by_reader() && !buf.lives_forever() {
            return Err(crate::Error::InvalidArgument(
                "the provider serves remote reads itself, and the buffer may be freed",
            ));
        }
        crate::raw::expose_send_buffer(self, buf)
    }
}
