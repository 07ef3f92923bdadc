//! Registered memory that operations read from and write into.

use crate::error::Result;
use crate::fabric::Domain;
use crate::info::flags;
use crate::raw::{IoSlice, Memory};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Page-aligned memory registered with a domain. Cheap to clone (shared).
///
/// The provider reads and writes this memory asynchronously, so the application accesses it
/// by copying ([`MemoryRegion::read`], [`MemoryRegion::write`]) ranges that no operation in
/// flight is using. An endpoint that posts an operation on a region keeps the region alive
/// until the endpoint is closed, so dropping the region early is never unsafe.
#[derive(Clone)]
pub struct MemoryRegion {
    pub(crate) inner: Arc<MrInner>,
}

pub(crate) struct MrInner {
    pub(crate) mem: Memory,
    /// Id of the last endpoint known to keep this region alive (0: none); saves that
    /// endpoint a lock on every post.
    pub(crate) pinned_by: AtomicU64,
    _domain: Domain,
}

impl MemoryRegion {
    /// Allocates `len` zeroed bytes and registers them for local send/receive and, where the
    /// domain offers RMA, remote read/write.
    ///
    /// # Errors
    /// Allocation or `fi_mr_reg` failures.
    pub fn new(domain: &Domain, len: usize) -> Result<MemoryRegion> {
        let mut mem = Memory::new(len)?;
        let mut access = flags::SEND | flags::RECV;
        if domain.attributes().has(flags::RMA) {
            access |= flags::READ | flags::WRITE | flags::REMOTE_READ | flags::REMOTE_WRITE;
        }
        mem.register(&domain.inner.fid, access, len.max(1))?;
        Ok(MemoryRegion {
            inner: Arc::new(MrInner {
                mem,
                pinned_by: AtomicU64::new(0),
                _domain: domain.clone(),
            }),
        })
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.inner.mem.len()
    }

    /// Whether the region is empty (never: at least one byte is allocated).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The virtual address of the first byte (for RMA peers and for locating multi-receive
    /// completions inside the region).
    pub fn addr(&self) -> usize {
        self.inner.mem.addr() as usize
    }

    /// The remote access key (`fi_mr_key`).
    pub fn key(&self) -> u64 {
        self.inner.mem.key().unwrap_or(ofi_sys::FI_KEY_NOTAVAIL)
    }

    /// Copies bytes out of the region.
    ///
    /// # Panics
    /// If the range is outside the region.
    pub fn read(&self, offset: usize, out: &mut [u8]) {
        self.inner.mem.read(offset, out)
    }

    /// The `len` (at most 8) bytes at `offset` as a little-endian integer: a scalar read
    /// without a call to `memcpy`.
    ///
    /// # Panics
    /// If `len` exceeds 8 or the range is outside the region.
    #[inline]
    pub fn read_le(&self, offset: usize, len: usize) -> u64 {
        self.inner.mem.read_le(offset, len)
    }

    /// Copies bytes into the region.
    ///
    /// # Panics
    /// If the range is outside the region.
    pub fn write(&self, offset: usize, data: &[u8]) {
        self.inner.mem.write(offset, data)
    }

    /// Copies `len` bytes at `from` of region `src` (which may be this one) to `offset` of
    /// this region: memory to memory, without a bounce buffer.
    ///
    /// # Panics
    /// If either range is outside its region.
    pub fn copy_from(&self, offset: usize, src: &MemoryRegion, from: usize, len: usize) {
        self.inner.mem.copy_from(offset, &src.inner.mem, from, len)
    }

    /// Describes `len` bytes at `offset` for an operation.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] if the range is outside the region.
    pub fn slice(&self, offset: usize, len: usize) -> Result<Buf<'_>> {
        let io = IoSlice::new(&self.inner.mem, offset, len)?;
        Ok(Buf { region: self, io })
    }

    /// The whole region as one operation buffer.
    pub fn all(&self) -> Buf<'_> {
        self.slice(0, self.len()).expect("whole region is in range")
    }
}

/// A checked range of a [`MemoryRegion`], ready to be posted.
#[derive(Clone, Copy)]
pub struct Buf<'a> {
    pub(crate) region: &'a MemoryRegion,
    pub(crate) io: IoSlice,
}

impl Buf<'_> {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.io.len
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.io.len == 0
    }
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemoryRegion({:#x}, {} bytes)", self.addr(), self.len())
    }
}
