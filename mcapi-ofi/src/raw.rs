//! The only module of this crate with `unsafe` code: owned libfabric handles and the calls made
//! on them.
//!
//! Every handle type here owns exactly one libfabric object and closes it on Drop. The safe
//! types in the rest of the crate keep parents alive (an endpoint holds its CQ, AV and domain)
//! so that Drop always closes children before parents. Functions here check what the C API
//! cannot: lengths against buffers, output counts against slices.
//!
//! Buffers handed to asynchronous operations are [`Memory`] blocks, kept alive by the CQ of
//! the endpoint that used them (see `ep.rs`, `cq.rs`), so the provider never writes into
//! freed memory; which ranges the provider may be using, and so which ranges safe code may
//! copy, is tracked per slot by the safe layer (`mr.rs`), whose records come back as the
//! contexts of completions (`finish`).

use crate::error::{Error, Result};
use crate::info::{Attributes, Hints};
use core::ffi::{c_char, c_int, c_void, CStr};
use core::ptr::{self, NonNull};
use ofi_sys as sys;
use std::alloc::{self, Layout};
use std::ffi::CString;
use std::sync::Arc;

/// Converts a libfabric return code (`0` or `-errno`) into a `Result`.
#[inline(always)]
pub(crate) fn check(call: &'static str, ret: isize) -> Result<()> {
    if ret >= 0 {
        Ok(())
    } else {
        Err(Error::call(call, -ret as i32))
    }
}

/// `fi_strerror` text for a positive libfabric errno.
pub(crate) fn strerror(errno: i32) -> &'static str {
    // SAFETY: fi_strerror returns a pointer to a static, NUL-terminated string for any value.
    let text = unsafe { CStr::from_ptr(sys::fi_strerror(errno)) };
    text.to_str().unwrap_or("unknown error")
}

/// The libfabric library version (`fi_version()`), as (major, minor).
pub(crate) fn library_version() -> (u32, u32) {
    // SAFETY: fi_version has no preconditions.
    let v = unsafe { sys::fi_version() };
    (v >> 16, v & 0xffff)
}

/// Reads a possibly-NULL C string owned by libfabric.
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string that outlives the call.
unsafe fn opt_str(p: *const c_char) -> Option<String> {
    if p.is_null() {
        None
    } else {
        // SAFETY: guaranteed by the caller.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
}

/// Copies `s` into memory from `malloc`, as `fi_freeinfo` will `free` it.
fn c_strdup(s: &str) -> Result<*mut c_char> {
    let c = CString::new(s).map_err(|_| Error::InvalidArgument("string contains NUL"))?;
    // SAFETY: c is a valid NUL-terminated string; strdup copies it into malloc'ed memory.
    let p = unsafe { libc::strdup(c.as_ptr()) };
    if p.is_null() {
        Err(Error::call("strdup", libc::ENOMEM))
    } else {
        Ok(p)
    }
}

// ---------------------------------------------------------------------------------------------
// fi_info

/// One `fi_info` entry owned by us (a `fi_dupinfo` copy), freed with `fi_freeinfo`.
pub(crate) struct InfoBox(NonNull<sys::fi_info>);

// SAFETY: an fi_info is plain heap data with no thread affinity; we never mutate it after
// creation, so shared references from several threads are fine.
unsafe impl Send for InfoBox {}
// SAFETY: see Send; all access after construction is read-only.
unsafe impl Sync for InfoBox {}

impl Drop for InfoBox {
    fn drop(&mut self) {
        // SAFETY: we own this fi_info (from fi_dupinfo) and free it exactly once.
        unsafe { sys::fi_freeinfo(self.0.as_ptr()) }
    }
}

impl InfoBox {
    fn as_ptr(&self) -> *mut sys::fi_info {
        self.0.as_ptr()
    }

    /// Reads the negotiated attributes into plain Rust values.
    pub(crate) fn attributes(&self) -> Attributes {
        // SAFETY: a fi_info from fi_getinfo/fi_dupinfo has valid (possibly NULL) attribute
        // pointers and NUL-terminated names, alive as long as self.
        unsafe {
            let i = &*self.as_ptr();
            let fab = i.fabric_attr.as_ref();
            let dom = i.domain_attr.as_ref();
            let ep = i.ep_attr.as_ref();
            let tx = i.tx_attr.as_ref();
            let rx = i.rx_attr.as_ref();
            let src_addr = if i.src_addr.is_null() {
                Vec::new()
            } else {
                std::slice::from_raw_parts(i.src_addr as *const u8, i.src_addrlen).to_vec()
            };
            Attributes {
                provider: fab.and_then(|f| opt_str(f.prov_name)).unwrap_or_default(),
                fabric: fab.and_then(|f| opt_str(f.name)).unwrap_or_default(),
                domain: dom.and_then(|d| opt_str(d.name)).unwrap_or_default(),
                caps: i.caps,
                mode: i.mode,
                addr_format: i.addr_format,
                src_addr,
                inject_size: tx.map_or(0, |t| t.inject_size),
                tx_size: tx.map_or(0, |t| t.size),
                rx_size: rx.map_or(0, |r| r.size),
                max_msg_size: ep.map_or(0, |e| e.max_msg_size),
                mem_tag_format: ep.map_or(0, |e| e.mem_tag_format),
                msg_order: tx.map_or(0, |t| t.msg_order),
                comp_order: tx.map_or(0, |t| t.comp_order),
                rx_msg_order: rx.map_or(0, |r| r.msg_order),
                rx_comp_order: rx.map_or(0, |r| r.comp_order),
                cq_data_size: dom.map_or(0, |d| d.cq_data_size),
                mr_mode: dom.map_or(0, |d| d.mr_mode as u64),
                data_progress: dom.map_or(0, |d| d.data_progress),
                control_progress: dom.map_or(0, |d| d.control_progress),
                threading: dom.map_or(0, |d| d.threading),
                ep_cnt: dom.map_or(0, |d| d.ep_cnt),
                cq_cnt: dom.map_or(0, |d| d.cq_cnt),
                mr_key_size: dom.map_or(0, |d| d.mr_key_size),
            }
        }
    }
}

/// Calls `fi_getinfo` with `hints` and returns an owned copy of every entry.
pub(crate) fn getinfo(hints: &Hints) -> Result<Vec<InfoBox>> {
    struct Guard(*mut sys::fi_info);
    impl Drop for Guard {
        fn drop(&mut self) {
            if !self.0.is_null() {
                // SAFETY: the pointer came from fi_allocinfo/fi_getinfo and is freed once.
                unsafe { sys::fi_freeinfo(self.0) }
            }
        }
    }

    // SAFETY: fi_allocinfo returns a zeroed fi_info with allocated attribute structs (or NULL).
    let h = Guard(unsafe { sys::fi_allocinfo() });
    if h.0.is_null() {
        return Err(Error::call("fi_allocinfo", libc::ENOMEM));
    }
    // SAFETY: h.0 and its attribute pointers are valid and exclusively ours until freed;
    // strings put into them come from malloc, as fi_freeinfo frees them.
    unsafe {
        let i = &mut *h.0;
        i.caps = hints.caps;
        i.mode = hints.mode;
        (*i.ep_attr).type_ = sys::FI_EP_RDM;
        (*i.domain_attr).mr_mode = hints.mr_mode as c_int;
        (*i.domain_attr).threading = hints.threading;
        (*i.domain_attr).data_progress = hints.data_progress;
        (*i.domain_attr).control_progress = hints.control_progress;
        (*i.tx_attr).msg_order = hints.msg_order;
        (*i.rx_attr).msg_order = hints.msg_order;
        (*i.tx_attr).size = hints.tx_size;
        (*i.rx_attr).size = hints.rx_size;
        if let Some(p) = &hints.provider {
            (*i.fabric_attr).prov_name = c_strdup(p)?;
        }
        if let Some(d) = &hints.domain {
            (*i.domain_attr).name = c_strdup(d)?;
        }
    }

    let node = hints.node.as_deref().map(CString::new).transpose();
    let service = hints.service.as_deref().map(CString::new).transpose();
    let (Ok(node), Ok(service)) = (node, service) else {
        return Err(Error::InvalidArgument("node/service contains NUL"));
    };
    let flags = if hints.node.is_some() || hints.service.is_some() {
        sys::FI_SOURCE
    } else {
        0
    };
    let mut list = Guard(ptr::null_mut());
    // SAFETY: all pointers are valid or NULL as fi_getinfo allows; `list` receives ownership.
    let ret = unsafe {
        sys::fi_getinfo(
            hints.api_version,
            node.as_ref().map_or(ptr::null(), |c| c.as_ptr()),
            service.as_ref().map_or(ptr::null(), |c| c.as_ptr()),
            flags,
            h.0,
            &mut list.0,
        )
    };
    check("fi_getinfo", ret as isize)?;

    let mut out = Vec::new();
    let mut cur = list.0;
    while !cur.is_null() {
        // SAFETY: cur is an entry of the list fi_getinfo returned; fi_dupinfo copies one entry
        // (its `next` is set to NULL in the copy).
        let dup = unsafe { sys::fi_dupinfo(cur) };
        let dup = NonNull::new(dup).ok_or(Error::call("fi_dupinfo", libc::ENOMEM))?;
        out.push(InfoBox(dup));
        // SAFETY: cur is valid; next is NULL or the following entry.
        cur = unsafe { (*cur).next };
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Owned fabric objects

/// Declares a handle type that owns one libfabric object and `fi_close`s it on Drop.
macro_rules! owned_fid {
    ($(#[$m:meta])* $name:ident, $ty:ty) => {
        $(#[$m])*
        pub(crate) struct $name(NonNull<$ty>);

        // SAFETY: every object is opened with FI_THREAD_SAFE threading (`Info::query` keeps
        // only such domains),
        // so libfabric allows calls on it from any thread, concurrently.
        unsafe impl Send for $name {}
        // SAFETY: as for Send.
        unsafe impl Sync for $name {}

        impl Drop for $name {
            fn drop(&mut self) {
                if self.0 == NonNull::dangling() {
                    return; // moved out by `take`
                }
                // SAFETY: we own the object and close it once; the safe layer guarantees its
                // children were closed first. A failing close is ignored: Drop must not panic
                // (through the C ABI a panic would abort) and there is no one to tell.
                let _ = unsafe { sys::fi_close(self.fid()) };
            }
        }

        impl $name {
            #[inline(always)]
            pub(crate) fn as_ptr(&self) -> *mut $ty {
                self.0.as_ptr()
            }

            #[inline(always)]
            fn fid(&self) -> *mut sys::fid {
                // `struct fid` is the first member of every fid_* struct.
                self.0.as_ptr().cast()
            }
        }
    };
}

owned_fid!(
    /// An open `fid_fabric`.
    FabricFid,
    sys::fid_fabric
);
owned_fid!(
    /// An open `fid_domain`.
    DomainFid,
    sys::fid_domain
);
owned_fid!(
    /// An open `fid_av`.
    AvFid,
    sys::fid_av
);
owned_fid!(
    /// An open `fid_cq`.
    CqFid,
    sys::fid_cq
);
owned_fid!(
    /// An open `fid_ep`.
    EpFid,
    sys::fid_ep
);

impl EpFid {
    /// Moves the endpoint out, leaving a handle that closes nothing: for an owner whose
    /// Drop hands the endpoint on instead of closing it.
    pub(crate) fn take(&mut self) -> EpFid {
        EpFid(std::mem::replace(&mut self.0, NonNull::dangling()))
    }
}
owned_fid!(
    /// A `fid_mr` memory registration.
    MrFid,
    sys::fid_mr
);

fn opened<T>(call: &'static str, ret: c_int, p: *mut T) -> Result<NonNull<T>> {
    check(call, ret as isize)?;
    NonNull::new(p).ok_or(Error::call(call, libc::EINVAL))
}

pub(crate) fn open_fabric(info: &InfoBox) -> Result<FabricFid> {
    let mut p = ptr::null_mut();
    // SAFETY: info comes from fi_getinfo, so fabric_attr is valid.
    let ret = unsafe { sys::fi_fabric((*info.as_ptr()).fabric_attr, &mut p, ptr::null_mut()) };
    opened("fi_fabric", ret, p).map(FabricFid)
}

pub(crate) fn open_domain(fabric: &FabricFid, info: &InfoBox) -> Result<DomainFid> {
    let mut p = ptr::null_mut();
    // SAFETY: fabric is open and info is a valid fi_info for it.
    let ret = unsafe { sys::fi_domain(fabric.as_ptr(), info.as_ptr(), &mut p, ptr::null_mut()) };
    opened("fi_domain", ret, p).map(DomainFid)
}

pub(crate) fn open_av(domain: &DomainFid, count: usize) -> Result<AvFid> {
    let mut attr = sys::fi_av_attr {
        type_: sys::FI_AV_TABLE,
        count,
        ..Default::default()
    };
    let mut p = ptr::null_mut();
    // SAFETY: domain is open; attr lives across the call.
    let ret = unsafe { sys::fi_av_open(domain.as_ptr(), &mut attr, &mut p, ptr::null_mut()) };
    opened("fi_av_open", ret, p).map(AvFid)
}

pub(crate) fn open_cq(
    domain: &DomainFid,
    size: usize,
    wait_obj: sys::fi_wait_obj,
) -> Result<CqFid> {
    let mut attr = sys::fi_cq_attr {
        size,
        format: sys::FI_CQ_FORMAT_TAGGED,
        wait_obj,
        wait_cond: sys::FI_CQ_COND_NONE,
        ..Default::default()
    };
    let mut p = ptr::null_mut();
    // SAFETY: domain is open; attr lives across the call.
    let ret = unsafe { sys::fi_cq_open(domain.as_ptr(), &mut attr, &mut p, ptr::null_mut()) };
    opened("fi_cq_open", ret, p).map(CqFid)
}

/// Opens an RDM endpoint, binds it to `cq` (transmit and receive) and `av`, and enables it.
pub(crate) fn open_endpoint(
    domain: &DomainFid,
    info: &InfoBox,
    cq: &CqFid,
    av: &AvFid,
    min_multi_recv: Option<usize>,
) -> Result<EpFid> {
    let mut p = ptr::null_mut();
    // SAFETY: domain is open and info describes it.
    let ret = unsafe { sys::fi_endpoint(domain.as_ptr(), info.as_ptr(), &mut p, ptr::null_mut()) };
    let ep = EpFid(opened("fi_endpoint", ret, p)?);
    let flags = (sys::FI_TRANSMIT | sys::FI_RECV) as u64;
    // SAFETY: ep, cq and av are open objects of the same domain; the safe layer keeps cq and
    // av alive for as long as ep (EpInner owns clones of them).
    unsafe {
        check(
            "fi_ep_bind(cq)",
            sys::fi_ep_bind(ep.as_ptr(), cq.fid(), flags) as isize,
        )?;
        check(
            "fi_ep_bind(av)",
            sys::fi_ep_bind(ep.as_ptr(), av.fid(), 0) as isize,
        )?;
        check("fi_enable", sys::fi_enable(ep.as_ptr()) as isize)?;
        // After fi_enable: shm (1.17) keeps the threshold in a receive context created at
        // enable time and crashes on a NULL pointer when the option is set before.
        if let Some(min) = min_multi_recv {
            let ret = sys::fi_setopt(
                ep.fid(),
                sys::FI_OPT_ENDPOINT as c_int,
                sys::FI_OPT_MIN_MULTI_RECV as c_int,
                (&min as *const usize).cast(),
                core::mem::size_of::<usize>(),
            );
            check("fi_setopt(FI_OPT_MIN_MULTI_RECV)", ret as isize)?;
        }
    }
    Ok(ep)
}

impl EpFid {
    /// The endpoint's own address (`fi_getname`).
    pub(crate) fn name(&self) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; 256];
        let mut len = buf.len();
        // SAFETY: buf is writable for len bytes; on -FI_ETOOSMALL len holds the needed size.
        let mut ret = unsafe { sys::fi_getname(self.fid(), buf.as_mut_ptr().cast(), &mut len) };
        if ret == -(sys::FI_ETOOSMALL as c_int) {
            buf.resize(len, 0);
            // SAFETY: as above with the larger buffer.
            ret = unsafe { sys::fi_getname(self.fid(), buf.as_mut_ptr().cast(), &mut len) };
        }
        check("fi_getname", ret as isize)?;
        buf.truncate(len);
        Ok(buf)
    }
}

/// Bytes an address is zero-padded to before `fi_av_insert` reads it: above every provider's
/// address length (shm's names are at most 256 bytes, sockaddrs 128).
const PADDED_ADDR_LEN: usize = 512;

impl AvFid {
    /// Inserts one raw address; returns its `fi_addr_t`.
    pub(crate) fn insert(&self, addr: &[u8]) -> Result<sys::fi_addr_t> {
        let mut out: sys::fi_addr_t = sys::FI_ADDR_NOTAVAIL;
        if addr.is_empty() {
            return Err(Error::InvalidArgument("empty fabric address"));
        }
        // Providers read one address of their own format, of their own length (shm: its
        // whole name buffer), whatever the bytes given: a shorter one (from a peer's frame)
        // is zero-padded to a length no provider's address exceeds.
        let mut padded = [0u8; PADDED_ADDR_LEN];
        let addr = match padded.get_mut(..addr.len()) {
            Some(head) => {
                head.copy_from_slice(addr);
                &padded[..]
            }
            None => addr,
        };
        // SAFETY: `addr` is readable for at least `PADDED_ADDR_LEN` bytes, more than any
        // provider's address; `out` receives exactly one fi_addr_t.
        let ret = unsafe {
            sys::fi_av_insert(
                self.as_ptr(),
                addr.as_ptr().cast(),
                1,
                &mut out,
                0,
                ptr::null_mut(),
            )
        };
        if ret != 1 {
            return Err(Error::call(
                "fi_av_insert",
                if ret < 0 { -ret } else { libc::EINVAL },
            ));
        }
        Ok(out)
    }

    /// Removes one address from the table.
    pub(crate) fn remove(&self, mut addr: sys::fi_addr_t) -> Result<()> {
        // SAFETY: av is open; addr is a single fi_addr_t.
        let ret = unsafe { sys::fi_av_remove(self.as_ptr(), &mut addr, 1, 0) };
        check("fi_av_remove", ret as isize)
    }
}

// ---------------------------------------------------------------------------------------------
// Memory

/// Page-aligned, zero-initialised heap memory, optionally registered with a domain.
///
/// The memory is shared with the provider, which writes into it asynchronously: Rust code only
/// touches it through copies ([`Memory::read`], [`Memory::write`]) of ranges that `mr.rs`'s
/// slot states show no operation in flight could race, never through long-lived references.
pub(crate) struct Memory {
    // Field order matters: the registration is closed before the memory is freed.
    mr: Option<MrFid>,
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the memory is a plain allocation; concurrent access goes through raw copies whose
// ranges `mr.rs` coordinates per slot (a copy holds its slot, and a slot the provider may
// write is never copied, nor one it may read written).
unsafe impl Send for Memory {}
// SAFETY: see Send.
unsafe impl Sync for Memory {}

const PAGE: usize = 4096;

impl Memory {
    pub(crate) fn new(len: usize) -> Result<Memory> {
        let layout = Layout::from_size_align(len.max(1), PAGE)
            .map_err(|_| Error::InvalidArgument("memory region too large"))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or(Error::call("alloc", libc::ENOMEM))?;
        Ok(Memory {
            mr: None,
            ptr,
            layout,
        })
    }

    pub(crate) fn register(&mut self, domain: &DomainFid, access: u64, len: usize) -> Result<()> {
        let requested_key = fresh_key()?;
        let mut p = ptr::null_mut();
        // SAFETY: the memory is valid for len <= layout.size() bytes and outlives the
        // registration (field order closes mr first).
        let ret = unsafe {
            sys::fi_mr_reg(
                domain.as_ptr(),
                self.ptr.as_ptr().cast(),
                len,
                access,
                0,
                requested_key,
                0,
                &mut p,
                ptr::null_mut(),
            )
        };
        self.mr = Some(MrFid(opened("fi_mr_reg", ret, p)?));
        Ok(())
    }

    #[inline(always)]
    pub(crate) fn addr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    #[inline(always)]
    pub(crate) fn desc(&self) -> *mut c_void {
        match &self.mr {
            // SAFETY: the registration is open.
            Some(mr) => unsafe { sys::fi_mr_desc(mr.as_ptr()) },
            None => ptr::null_mut(),
        }
    }

    pub(crate) fn key(&self) -> Option<u64> {
        // SAFETY: the registration is open.
        self.mr
            .as_ref()
            .map(|mr| unsafe { sys::fi_mr_key(mr.as_ptr()) })
    }

    /// Copies `out.len()` bytes starting at `offset` out of the memory.
    #[inline]
    pub(crate) fn read(&self, offset: usize, out: &mut [u8]) {
        assert!(offset <= self.layout.size() && out.len() <= self.layout.size() - offset);
        // SAFETY: the range is inside the allocation (checked above) and cannot overlap `out`,
        // which is a distinct Rust borrow.
        unsafe { ptr::copy_nonoverlapping(self.addr().add(offset), out.as_mut_ptr(), out.len()) }
    }

    /// The `len` (at most 8) bytes at `offset` as a little-endian integer.
    #[inline]
    pub(crate) fn read_le(&self, offset: usize, len: usize) -> u64 {
        assert!(len <= 8 && offset <= self.layout.size() && len <= self.layout.size() - offset);
        let mut word = [0u8; 8];
        if len == 8 {
            // SAFETY: 8 bytes inside the allocation (checked above); any alignment.
            word = unsafe { ptr::read_unaligned(self.addr().add(offset).cast::<[u8; 8]>()) };
        } else {
            for (i, b) in word.iter_mut().enumerate().take(len) {
                // SAFETY: offset + i < offset + len, inside the allocation (checked above).
                *b = unsafe { self.addr().add(offset + i).read() };
            }
        }
        u64::from_le_bytes(word)
    }

    /// Copies `data` into the memory at `offset`.
    #[inline]
    pub(crate) fn write(&self, offset: usize, data: &[u8]) {
        assert!(offset <= self.layout.size() && data.len() <= self.layout.size() - offset);
        // SAFETY: as in read.
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), self.addr().add(offset), data.len()) }
    }

    /// Copies `len` bytes at `from` of `src` to `offset` of this memory (`ptr::copy`: the
    /// two may be the same memory, and the ranges may overlap).
    #[inline]
    pub(crate) fn copy_from(&self, offset: usize, src: &Memory, from: usize, len: usize) {
        assert!(offset <= self.layout.size() && len <= self.layout.size() - offset);
        assert!(from <= src.layout.size() && len <= src.layout.size() - from);
        // SAFETY: both ranges are inside their allocations (checked above); `ptr::copy`
        // allows them to overlap.
        unsafe { ptr::copy(src.addr().add(from), self.addr().add(offset), len) }
    }

    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        self.mr = None;
        // SAFETY: allocated in new() with this layout; the registration is already closed.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

// ---------------------------------------------------------------------------------------------
// Data path

/// A region of [`Memory`] for one operation: pointer, length and registration descriptor.
/// Built only by the safe layer after bounds checks.
#[derive(Clone, Copy)]
pub(crate) struct IoSlice {
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
    pub(crate) desc: *mut c_void,
}

impl IoSlice {
    pub(crate) fn new(mem: &Memory, offset: usize, len: usize) -> Result<IoSlice> {
        if offset > mem.len() || len > mem.len() - offset {
            return Err(Error::InvalidArgument("range outside the memory region"));
        }
        Ok(IoSlice {
            // SAFETY: offset <= len of the allocation (checked above).
            ptr: unsafe { mem.addr().add(offset) },
            len,
            desc: mem.desc(),
        })
    }
}

#[inline(always)]
fn ctx(context: u64) -> *mut c_void {
    context as usize as *mut c_void
}

/// Held while an operation posted alone on the caller's memory may still be under way: a
/// waiter that unwinds before the record says the operation completed aborts the process
/// rather than hand back memory the provider may still read or write.
struct AbortIfPosted<'a>(&'a crate::mr::Slot);

impl Drop for AbortIfPosted<'_> {
    fn drop(&mut self) {
        if self.0.posted() {
            std::process::abort();
        }
    }
}

/// `Endpoint::send_unregistered`: sends `data` from memory the provider neither owns nor
/// has registered (`desc` NULL, allowed without `FI_MR_LOCAL`) and returns only once the
/// provider is done with it: its completion seen (tracked here, in a record of its own,
/// whatever `wait` says), or the endpoint closed.
pub(crate) fn send_unregistered(
    ep: crate::Endpoint,
    data: &[u8],
    cq_data: u64,
    dest: u64,
    context: u64,
    wait: &mut dyn FnMut() -> crate::SendWait,
) -> (Option<crate::Endpoint>, Result<()>) {
    if !ep.is_unique() {
        return (
            Some(ep),
            Err(Error::InvalidArgument("endpoint handle is shared")),
        );
    }
    if !ep.sends_unregistered() {
        return (
            Some(ep),
            Err(Error::InvalidArgument("provider needs FI_MR_LOCAL")),
        );
    }
    if !ep.drop_ends_its_operations() {
        return (
            Some(ep),
            Err(Error::InvalidArgument("endpoint lingers on a shared CQ")),
        );
    }
    // On the heap, kept by the endpoint from one send to the next: an abandoned send's
    // completion may already sit in the CQ, to be read after this function returned; its
    // record is leaked then.
    let record = ep.take_send_record();
    let provider_context = &*record as *const crate::mr::Slot as usize;
    if provider_context >= crate::mr::RECORD_LIMIT || !record.arm_alone(context) {
        return (
            Some(ep),
            Err(Error::InvalidArgument("no record for the send")),
        );
    }
    // SAFETY: `data` stays borrowed until this function returns, which is after the
    // completion of this send (the one operation posted with `record` as context) cleared
    // the record's posted state, or after the endpoint (whose only handle we own: checked
    // above, and `wait` is given none) was dropped, which closed it or left it lingering
    // with its CQ retired (`drop_ends_its_operations`, checked above), so this process's
    // provider never reads it later.
    // `record` stays allocated while posted (leaked if the send is abandoned).
    let posted =
        unsafe { senddata_unregistered(ep.fid(), data, cq_data, dest, provider_context as u64) };
    if let Err(e) = posted {
        record.disarm();
        ep.keep_send_record(record);
        return (Some(ep), Err(e));
    }
    let guard = AbortIfPosted(&record);
    loop {
        match wait() {
            // Done only once the completion was read, whatever the waiter thinks.
            crate::SendWait::Done if !record.posted() => {
                drop(guard);
                // Its completion cleared it: idle again (an error completion says why not).
                let outcome = match record.error() {
                    0 => Ok(()),
                    err => Err(Error::call("fi_senddata (completion)", err)),
                };
                record.disarm();
                ep.keep_send_record(record);
                return (Some(ep), outcome);
            }
            crate::SendWait::Done | crate::SendWait::Pending => {}
            crate::SendWait::Abandon => {
                std::mem::forget(guard);
                drop(ep);
                if record.posted() {
                    Box::leak(record);
                }
                return (None, Err(Error::InvalidArgument("send abandoned")));
            }
        }
    }
}

/// Application memory by address and length, owned by nobody here: what [`SendBuffer`] and
/// [`RecvBuffer`] name. A NULL pointer is only allowed with length 0, and is kept as a
/// dangling one (slices need non-NULL).
#[derive(Debug)]
struct AppMemory {
    ptr: NonNull<u8>,
    len: usize,
}

impl AppMemory {
    fn new(ptr: *mut u8, len: usize) -> AppMemory {
        AppMemory {
            ptr: NonNull::new(ptr)
                .filter(|_| len > 0)
                .unwrap_or(NonNull::dangling()),
            len,
        }
    }
}

/// Application memory that a send ([`crate::Endpoint::send_from`]) reads in place, without a
/// copy or a registration, and that stays valid and unmodified until the send completes.
///
/// Made by [`SendBuffer::from_static`] (safe: `'static` shared memory, e.g. a leaked `Box`)
/// or [`SendBuffer::from_raw`] (the caller promises it, as a C API's contract does).
#[derive(Debug)]
pub struct SendBuffer {
    mem: AppMemory,
    /// Made from `'static` shared memory: valid and unmodified for good.
    forever: bool,
}

// SAFETY: a SendBuffer only names memory that its constructor's contract keeps readable and
// unmodified while it exists; reading it from any thread is fine.
unsafe impl Send for SendBuffer {}
// SAFETY: see Send; it gives out shared reads only.
unsafe impl Sync for SendBuffer {}

impl SendBuffer {
    /// Names `len` bytes at `ptr` (NULL allowed when `len` is 0).
    ///
    /// # Safety
    /// The memory is readable for `len` bytes and stays valid and unmodified while this
    /// `SendBuffer` exists and, for every send posted from it, until that send's completion
    /// was read from the CQ or its endpoint was closed (every handle dropped; where closed
    /// endpoints linger, see [`crate::Endpoint`], and its CQ not read after that).
    pub unsafe fn from_raw(ptr: *const u8, len: usize) -> SendBuffer {
        SendBuffer {
            mem: AppMemory::new(ptr.cast_mut(), len),
            forever: false,
        }
    }

    /// Names memory that lives for the rest of the program and is never modified.
    pub fn from_static(data: &'static [u8]) -> SendBuffer {
        SendBuffer {
            mem: AppMemory::new(data.as_ptr().cast_mut(), data.len()),
            forever: true,
        }
    }

    /// Whether its memory stays valid and unmodified for good ([`SendBuffer::from_static`]),
    /// so a provider reading it after its send was abandoned reads valid, unchanging bytes.
    #[inline(always)]
    pub fn lives_forever(&self) -> bool {
        self.forever
    }

    /// Length in bytes.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.mem.len
    }

    /// Whether it is empty.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.mem.len == 0
    }

    /// The bytes.
    #[inline(always)]
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: by the constructor's contract the memory is readable for `len` bytes and
        // unmodified while this SendBuffer exists (a dangling pointer only when len is 0);
        // `from_static`'s is a shared `'static` borrow, so forever.
        unsafe { std::slice::from_raw_parts(self.mem.ptr.as_ptr(), self.mem.len) }
    }
}

/// Application memory that RMA reads ([`crate::Endpoint::read_to`]) write in place, without a
/// registration.
///
/// Made by [`RecvBuffer::from_static`] (safe: `'static` memory given up for good, e.g. a
/// leaked `Box`) or [`RecvBuffer::from_raw`] (the caller promises it, as a C API's contract
/// does). Each read posted into it holds one of its records (the read's provider context,
/// cleared by the completion, as a region's slots are), so [`RecvBuffer::as_mut_slice`]
/// gives the memory out only while no read is in flight, and a buffer dropped with reads in
/// flight leaves its records to the provider (leaked) rather than freeing them.
pub struct RecvBuffer {
    mem: AppMemory,
    /// Made at the first read (a buffer that only takes copies allocates nothing).
    reads: std::sync::OnceLock<Box<[crate::mr::Slot; READS_IN_FLIGHT]>>,
}

/// Reads in flight into one [`RecvBuffer`] at most.
pub const READS_IN_FLIGHT: usize = 16;

// SAFETY: a RecvBuffer is the only way to its memory while it exists (its constructor's
// contract); moving it to another thread moves that access along.
unsafe impl Send for RecvBuffer {}

impl RecvBuffer {
    /// Names `len` writable bytes at `ptr` (NULL allowed when `len` is 0).
    ///
    /// # Safety
    /// The memory is valid for reads and writes of `len` bytes, and nothing but this
    /// `RecvBuffer` accesses it while it exists and, for every read posted into it, until
    /// that read's completion was read from the CQ or its endpoint was closed (every handle
    /// dropped; where closed endpoints linger, see [`crate::Endpoint`], and its CQ not read
    /// after that).
    pub unsafe fn from_raw(ptr: *mut u8, len: usize) -> RecvBuffer {
        RecvBuffer {
            mem: AppMemory::new(ptr, len),
            reads: std::sync::OnceLock::new(),
        }
    }

    /// Names memory given up for the rest of the program.
    pub fn from_static(data: &'static mut [u8]) -> RecvBuffer {
        // SAFETY: `data` is borrowed mutably for 'static: nothing else reaches it, ever.
        unsafe { RecvBuffer::from_raw(data.as_mut_ptr(), data.len()) }
    }

    /// Length in bytes.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.mem.len
    }

    /// Whether it is empty.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.mem.len == 0
    }

    /// Whether a read posted into it has not completed yet.
    pub fn reading(&self) -> bool {
        self.reads
            .get()
            .is_some_and(|records| records.iter().any(crate::mr::Slot::posted))
    }

    /// The bytes; `None` while a read into them is in flight (the borrow of `self` keeps new
    /// ones from being posted meanwhile).
    #[inline(always)]
    pub fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        if self.reading() {
            return None;
        }
        // SAFETY: by the constructor's contract the memory is valid and reached only through
        // this RecvBuffer (a dangling pointer only when len is 0), and no read posted into it
        // is in flight (each holds a record until its completion was read).
        Some(unsafe { std::slice::from_raw_parts_mut(self.mem.ptr.as_ptr(), self.mem.len) })
    }
}

impl Drop for RecvBuffer {
    fn drop(&mut self) {
        if self.reading() {
            // The provider holds records as contexts until their completions are read (or
            // the CQ closes): they must outlive this buffer.
            if let Some(records) = self.reads.take() {
                Box::leak(records);
            }
        }
    }
}

impl core::fmt::Debug for RecvBuffer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RecvBuffer")
            .field("mem", &self.mem)
            .field("reading", &self.reading())
            .finish()
    }
}

/// `Endpoint::read_to`: posts an RMA read of `len` bytes into `buf` at `at` (in bounds, the
/// caller checked) with no memory descriptor (allowed without `FI_MR_LOCAL`, which the
/// caller checked); returns at once.
pub(crate) fn read_to(
    ep: &EpFid,
    buf: &RecvBuffer,
    (at, len): (usize, usize),
    (src, addr, key): (u64, u64, u64),
    context: u64,
) -> Result<()> {
    if at.checked_add(len).is_none_or(|end| end > buf.mem.len) {
        return Err(Error::InvalidArgument("read beyond the receive buffer"));
    }
    let records = buf
        .reads
        .get_or_init(|| Box::new(std::array::from_fn(|_| crate::mr::Slot::idle())));
    // (Not `ok_or`: that would build and drop an `Error`, which has drop glue, per read.)
    let Some(record) = records.iter().find(|r| r.arm_alone(context)) else {
        return Err(Error::InvalidArgument(
            "too many reads in flight into one buffer",
        ));
    };
    let provider_context = record as *const crate::mr::Slot as usize;
    if provider_context >= crate::mr::RECORD_LIMIT {
        record.disarm();
        return Err(Error::InvalidArgument(
            "a read record above the record limit",
        ));
    }
    // SAFETY: `at..at + len` lies in `buf`, whose contract keeps the memory valid and
    // untouched by anything else until this read's completion was read or the endpoint
    // closed, and safe code reaches it only through `as_mut_slice`, which refuses while
    // `record` is posted; `record` (the provider's context) stays allocated until the
    // completion cleared it (a buffer dropped before leaks it).
    let posted = unsafe {
        let dest = buf.mem.ptr.as_ptr().add(at);
        read_unregistered(ep, (dest, len), (src, addr, key), provider_context)
    };
    if posted.is_err() {
        record.disarm();
    }
    posted
}

/// `fi_read` of `len` bytes of the peer's memory (`src`, `addr`, `key`) into application
/// memory at `dest`, with no descriptor (allowed without `FI_MR_LOCAL`, which the caller
/// checked) and `provider_context` as the operation's context.
///
/// # Safety
/// `dest` is writable for `len` bytes, and nothing else touches it, until the read's
/// completion was read from the CQ or the endpoint closed; `provider_context` is the address
/// of a [`crate::mr::Slot`] that stays allocated until then.
unsafe fn read_unregistered(
    ep: &EpFid,
    (dest, len): (*mut u8, usize),
    (src, addr, key): (u64, u64, u64),
    provider_context: usize,
) -> Result<()> {
    // SAFETY: the endpoint is open (`ep` is borrowed from its owner); the memory and the
    // record outlive the provider's use of them by this function's contract.
    let ret = unsafe {
        sys::fi_read(
            ep.as_ptr(),
            dest.cast(),
            len,
            ptr::null_mut(),
            src,
            addr,
            key,
            ctx(provider_context as u64),
        )
    };
    check("fi_read", ret)
}

/// `Endpoint::send_from`: posts a send with remote CQ data from application memory
/// (`desc` NULL, allowed without `FI_MR_LOCAL`, which the caller checked); returns at once.
#[inline]
pub(crate) fn send_from(
    ep: &EpFid,
    buf: &SendBuffer,
    cq_data: u64,
    dest: u64,
    context: u64,
) -> Result<()> {
    let context = crate::mr::plain_context(context)?;
    // SAFETY: by SendBuffer's contract the memory stays valid and unmodified until the
    // send's completion was read or the endpoint closed, which is as long as the provider
    // may read it.
    unsafe { senddata_unregistered(ep, buf.as_slice(), cq_data, dest, context) }
}

/// A key to ask a registration for: providers without `FI_MR_PROV_KEY` take the key asked
/// for (and reject duplicates within a domain), and tcp and sockets address memory by the
/// key and an offset from 0: a counted key would let anyone who reaches the endpoint guess
/// one. A random 64-bit key is as good as unguessable, and in practice never twice the
/// same in a process.
fn fresh_key() -> Result<u64> {
    getrandom::u64().map_err(|e| Error::call("getrandom", e.raw_os_error().unwrap_or(libc::EIO)))
}

/// Whether this process may copy from and into another process of the same user with
/// cross-memory attach (`process_vm_readv`), as shm's RMA reads do when they can: not when
/// the Yama LSM restricts ptrace (`ptrace_scope` 1 and up: only descendants, which peers
/// are not), nor when a seccomp filter refuses the call (tried on this process itself), nor
/// with `FI_SHM_DISABLE_CMA` set. Checked once.
pub(crate) fn cross_memory_attach_allowed() -> bool {
    static ALLOWED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALLOWED.get_or_init(|| {
        cma_allowed(
            std::env::var("FI_SHM_DISABLE_CMA").ok().as_deref(),
            std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
                .ok()
                .as_deref(),
            process_vm_readv_works,
        )
    })
}

/// [`cross_memory_attach_allowed`]'s decision from `FI_SHM_DISABLE_CMA`'s value, the Yama
/// `ptrace_scope` file's text (both `None` when absent) and a probe of the call itself.
fn cma_allowed(disable: Option<&str>, yama: Option<&str>, probe: impl FnOnce() -> bool) -> bool {
    let disabled = disable.is_some_and(|v| !matches!(v, "" | "0" | "no" | "false" | "off"));
    let restricted = yama.and_then(|s| s.trim().parse::<u32>().ok()).unwrap_or(0) > 0;
    !disabled && !restricted && probe()
}

/// Whether `process_vm_readv` copies from this very process (a seccomp filter may refuse
/// it).
fn process_vm_readv_works() -> bool {
    let source = [0x5au8; 8];
    let mut copy = [0u8; 8];
    let local = libc::iovec {
        iov_base: copy.as_mut_ptr().cast(),
        iov_len: copy.len(),
    };
    let remote = libc::iovec {
        iov_base: source.as_ptr().cast_mut().cast(),
        iov_len: source.len(),
    };
    // SAFETY: both iovecs describe live local arrays of their stated lengths; the call
    // reads `source` of this very process and writes `copy`.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    n == 8 && copy == source
}

/// `Domain::expose_for_reads`: registers `data` for remote reads (or finds the domain's
/// kept registration of it) and runs `f` with its key. Only called for providers whose
/// remote reads the reading peer's process makes itself (the caller checked), so the
/// provider here never touches `data`, during `f` or after; the registration the domain
/// keeps afterwards lets such a reader read nothing it could not read anyway
/// ([`KeptExposures`]).
pub(crate) fn expose_for_reads<R>(
    domain: &crate::Domain,
    data: &[u8],
    f: impl FnOnce(u64) -> R,
) -> Result<R> {
    let (_mr, key) = domain
        .inner
        .kept_exposures
        .get_or_register(&domain.inner.fid, data)?;
    Ok(f(key))
}

/// Registers `data` for remote reads only, returning the registration and its key.
/// Registering memory makes the provider read nothing of it by itself; the callers only
/// use it where remote reads are made by the reader's process, and keep the memory valid
/// until the registration is closed.
fn register_for_reads(domain: &DomainFid, data: &[u8]) -> Result<(MrFid, u64)> {
    let mut p = ptr::null_mut();
    // SAFETY: `data` is valid for its length now; the registration only records where it
    // is (see above for how long it stays valid).
    let ret = unsafe {
        sys::fi_mr_reg(
            domain.as_ptr(),
            data.as_ptr().cast(),
            data.len(),
            sys::FI_REMOTE_READ as u64,
            0,
            fresh_key()?,
            0,
            &mut p,
            ptr::null_mut(),
        )
    };
    let mr = MrFid(opened("fi_mr_reg", ret, p)?);
    // SAFETY: the registration is open.
    let key = unsafe { sys::fi_mr_key(mr.as_ptr()) };
    Ok((mr, key))
}

/// A [`SendBuffer`] registered for peers to read in place
/// ([`crate::Domain::expose_send_buffer`]) until this is dropped: the registration is
/// closed first, then the buffer (and the domain reference) let go, unless the domain keeps
/// the registration (`KeptExposures`).
pub struct ExposedBuffer {
    // Declared first: closed (unless the domain keeps it) before the buffer is let go.
    _mr: Arc<MrFid>,
    key: u64,
    buf: SendBuffer,
    _domain: crate::Domain,
}

/// A domain's registrations for remote reads that outlive their exposures, so exposing
/// the same buffer again (a stream or a ping-pong sending from one buffer) costs a lookup
/// instead of `fi_mr_reg` and `fi_close`. Kept: those of
/// memory that lives for good ([`SendBuffer::lives_forever`]: nothing can change or free
/// it, so a peer reading it later reads what it was sent), and on a domain whose peers'
/// reads are made by the reader's own process ([`crate::Domain::reads_made_by_reader`]:
/// shm's cross-memory attach, which needs the reader to be allowed to ptrace this process)
/// those of any memory: such a reader can read all of this process's memory anyway, so a
/// registration left open gives it nothing, and the provider here never touches the memory.
/// At most [`KEPT_EXPOSURES`], the one kept longest making room for a new one (an
/// exposure still using it keeps its registration open).
#[derive(Default)]
pub(crate) struct KeptExposures(std::sync::Mutex<(Vec<KeptExposure>, usize)>);

/// Where a buffer is (address, length), its registration and key.
type KeptExposure = ((usize, usize), Arc<MrFid>, u64);

/// Registrations a domain keeps.
const KEPT_EXPOSURES: usize = 64;

impl KeptExposures {
    /// The registration of `data` for remote reads, and its key; kept for later exposures
    /// of the same place (the caller decides that it may be: see above).
    fn get_or_register(&self, domain: &DomainFid, data: &[u8]) -> Result<(Arc<MrFid>, u64)> {
        let mut guard = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (kept, oldest) = &mut *guard;
        let at = (data.as_ptr() as usize, data.len());
        // A few buffers in practice: a scan is cheaper than hashing.
        if let Some((_, mr, key)) = kept.iter().find(|(place, ..)| *place == at) {
            return Ok((mr.clone(), *key));
        }
        let (mr, key) = register_for_reads(domain, data)?;
        let mr = Arc::new(mr);
        if kept.len() < KEPT_EXPOSURES {
            kept.push((at, mr.clone(), key));
        } else {
            kept[*oldest] = (at, mr.clone(), key);
            *oldest = (*oldest + 1) % KEPT_EXPOSURES;
        }
        Ok((mr, key))
    }
}

impl ExposedBuffer {
    /// The key peers read it with.
    pub fn key(&self) -> u64 {
        self.key
    }

    /// Its bytes.
    pub fn as_slice(&self) -> &[u8] {
        self.buf.as_slice()
    }

    /// Where it is in this process (the address peers name with `FI_MR_VIRT_ADDR`).
    pub fn addr(&self) -> usize {
        self.buf.as_slice().as_ptr() as usize
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

impl core::fmt::Debug for ExposedBuffer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ExposedBuffer")
            .field("buf", &self.buf)
            .field("key", &self.key)
            .finish()
    }
}

/// `Domain::expose_send_buffer`: registers `buf` for remote reads until the result is
/// dropped. `SendBuffer`'s contract keeps the memory valid and unmodified while it exists,
/// which the result does until after the registration is closed.
pub(crate) fn expose_send_buffer(domain: &crate::Domain, buf: SendBuffer) -> Result<ExposedBuffer> {
    let (mr, key) = if buf.lives_forever() || domain.reads_made_by_reader() {
        domain
            .inner
            .kept_exposures
            .get_or_register(&domain.inner.fid, buf.as_slice())?
    } else {
        let (mr, key) = register_for_reads(&domain.inner.fid, buf.as_slice())?;
        (Arc::new(mr), key)
    };
    Ok(ExposedBuffer {
        _mr: mr,
        key,
        buf,
        _domain: domain.clone(),
    })
}

/// `Endpoint::read_in_place`: reads into `out`, memory the provider neither owns nor has
/// registered (`desc` NULL, allowed without `FI_MR_LOCAL`, which the caller checked), with a
/// record of its own on this stack frame as the provider context; returns only once the
/// read's completion was read from the CQ (by `wait` or by anyone else reading it).
pub(crate) fn read_in_place(
    ep: &EpFid,
    out: &mut [u8],
    (src, addr, key): (u64, u64, u64),
    context: u64,
    wait: &mut dyn FnMut(),
) -> Result<()> {
    let record = crate::mr::Slot::posted_alone(context);
    let provider_context = &record as *const crate::mr::Slot as usize;
    if provider_context >= crate::mr::RECORD_LIMIT {
        return Err(Error::InvalidArgument("stack above the record limit"));
    }
    let (ptr, len) = (out.as_mut_ptr(), out.len());
    let post = || {
        // SAFETY: `out` stays borrowed (and `record` alive) until this function returns,
        // which is only after the completion of this read (the one operation posted with
        // `record` as context) cleared the record's posted state: the provider never writes
        // `out` or touches `record` later. Should `wait` unwind, the guard below aborts the
        // process rather than hand `out` back early.
        unsafe { read_unregistered(ep, (ptr, len), (src, addr, key), provider_context) }
    };
    loop {
        match post() {
            // The provider's queue is full: its completions make room.
            Err(e) if e.is_again() => wait(),
            posted => break posted?,
        }
    }
    let guard = AbortIfPosted(&record);
    while record.posted() {
        wait();
    }
    drop(guard);
    match record.error() {
        0 => Ok(()),
        err => Err(Error::call("fi_read (completion)", err)),
    }
}

/// Posts `fi_senddata` of `data` with no memory descriptor (allowed without `FI_MR_LOCAL`,
/// which the callers check).
///
/// # Safety
/// `data` must stay valid and unmodified until the send's completion was read from the CQ
/// or the endpoint was closed.
unsafe fn senddata_unregistered(
    ep: &EpFid,
    data: &[u8],
    cq_data: u64,
    dest: u64,
    context: u64,
) -> Result<()> {
    // SAFETY: the endpoint is open (`ep` is borrowed from its owner); `data` outlives the
    // provider's reads by this function's contract.
    let ret = unsafe {
        sys::fi_senddata(
            ep.as_ptr(),
            data.as_ptr().cast(),
            data.len(),
            ptr::null_mut(),
            cq_data,
            dest,
            ctx(context),
        )
    };
    check("fi_senddata", ret)
}

// The calls below post operations. Their buffers are either copied before the call returns
// (inject) or are IoSlices into Memory that the calling endpoint's CQ keeps alive until it is
// closed, after the endpoint (see ep.rs, cq.rs), so libfabric never touches freed memory.
impl EpFid {
    #[inline(always)]
    pub(crate) fn tinject(
        &self,
        data: &[u8],
        cq_data: Option<u64>,
        dest: u64,
        tag: u64,
    ) -> Result<()> {
        // SAFETY: inject copies `data` before returning.
        let ret = unsafe {
            match cq_data {
                None => sys::fi_tinject(self.as_ptr(), data.as_ptr().cast(), data.len(), dest, tag),
                Some(d) => sys::fi_tinjectdata(
                    self.as_ptr(),
                    data.as_ptr().cast(),
                    data.len(),
                    d,
                    dest,
                    tag,
                ),
            }
        };
        check("fi_tinject", ret)
    }

    #[inline(always)]
    pub(crate) fn inject(&self, data: &[u8], cq_data: Option<u64>, dest: u64) -> Result<()> {
        // SAFETY: inject copies `data` before returning.
        let ret = unsafe {
            match cq_data {
                None => sys::fi_inject(self.as_ptr(), data.as_ptr().cast(), data.len(), dest),
                Some(d) => {
                    sys::fi_injectdata(self.as_ptr(), data.as_ptr().cast(), data.len(), d, dest)
                }
            }
        };
        check("fi_inject", ret)
    }

    #[inline(always)]
    pub(crate) fn tsend(
        &self,
        buf: IoSlice,
        cq_data: Option<u64>,
        dest: u64,
        tag: u64,
        context: u64,
    ) -> Result<()> {
        // SAFETY: buf points into Memory kept alive by the endpoint's CQ (see the impl comment).
        let ret = unsafe {
            match cq_data {
                None => sys::fi_tsend(
                    self.as_ptr(),
                    buf.ptr.cast(),
                    buf.len,
                    buf.desc,
                    dest,
                    tag,
                    ctx(context),
                ),
                Some(d) => sys::fi_tsenddata(
                    self.as_ptr(),
                    buf.ptr.cast(),
                    buf.len,
                    buf.desc,
                    d,
                    dest,
                    tag,
                    ctx(context),
                ),
            }
        };
        check("fi_tsend", ret)
    }

    #[inline(always)]
    pub(crate) fn send(
        &self,
        buf: IoSlice,
        cq_data: Option<u64>,
        dest: u64,
        context: u64,
    ) -> Result<()> {
        // SAFETY: buf points into Memory kept alive by the endpoint's CQ.
        let ret = unsafe {
            match cq_data {
                None => sys::fi_send(
                    self.as_ptr(),
                    buf.ptr.cast(),
                    buf.len,
                    buf.desc,
                    dest,
                    ctx(context),
                ),
                Some(d) => sys::fi_senddata(
                    self.as_ptr(),
                    buf.ptr.cast(),
                    buf.len,
                    buf.desc,
                    d,
                    dest,
                    ctx(context),
                ),
            }
        };
        check("fi_send", ret)
    }

    #[inline(always)]
    pub(crate) fn trecv(
        &self,
        buf: IoSlice,
        src: u64,
        tag: u64,
        ignore: u64,
        context: u64,
    ) -> Result<()> {
        // SAFETY: buf points into Memory kept alive by the endpoint's CQ.
        let ret = unsafe {
            sys::fi_trecv(
                self.as_ptr(),
                buf.ptr.cast(),
                buf.len,
                buf.desc,
                src,
                tag,
                ignore,
                ctx(context),
            )
        };
        check("fi_trecv", ret)
    }

    /// Posts an untagged receive; with `multi` the buffer takes many messages (`FI_MULTI_RECV`).
    #[inline(always)]
    pub(crate) fn recv(&self, buf: IoSlice, src: u64, multi: bool, context: u64) -> Result<()> {
        let iov = libc::iovec {
            iov_base: buf.ptr.cast(),
            iov_len: buf.len,
        };
        let mut desc = buf.desc;
        let msg = sys::fi_msg {
            msg_iov: (&iov as *const libc::iovec).cast(),
            desc: &mut desc,
            iov_count: 1,
            addr: src,
            context: ctx(context),
            data: 0,
        };
        let flags = if multi { sys::FI_MULTI_RECV as u64 } else { 0 } | sys::FI_COMPLETION as u64;
        // SAFETY: msg, iov and desc live across the call (the provider copies the descriptor);
        // the data buffer points into Memory kept alive by the endpoint's CQ.
        let ret = unsafe { sys::fi_recvmsg(self.as_ptr(), &msg, flags) };
        check("fi_recvmsg", ret)
    }

    #[inline(always)]
    pub(crate) fn rma_write(
        &self,
        buf: IoSlice,
        dest: u64,
        addr: u64,
        key: u64,
        context: u64,
    ) -> Result<()> {
        // SAFETY: buf points into Memory kept alive by the endpoint's CQ; the remote side is the
        // peer's business (a bad key gives an error completion, not local corruption).
        let ret = unsafe {
            sys::fi_write(
                self.as_ptr(),
                buf.ptr.cast(),
                buf.len,
                buf.desc,
                dest,
                addr,
                key,
                ctx(context),
            )
        };
        check("fi_write", ret)
    }

    pub(crate) fn rma_read(
        &self,
        buf: IoSlice,
        src: u64,
        addr: u64,
        key: u64,
        context: u64,
    ) -> Result<()> {
        // SAFETY: buf points into registered Memory that the endpoint keeps alive until it is
        // closed (pinned by the caller), so the provider may write into it until then; safe
        // code reads it only by copies (`MemoryRegion::read`). The remote side is the peer's
        // business (a bad key or address gives an error completion, not local corruption).
        let ret = unsafe {
            sys::fi_read(
                self.as_ptr(),
                buf.ptr.cast(),
                buf.len,
                buf.desc,
                src,
                addr,
                key,
                ctx(context),
            )
        };
        check("fi_read", ret)
    }

    pub(crate) fn cancel(&self, context: u64) -> Result<()> {
        // SAFETY: the endpoint is open; cancel only looks the context up.
        let ret = unsafe { sys::fi_cancel(self.fid(), ctx(context)) };
        check("fi_cancel", ret)
    }
}

/// One completion (`struct fi_cq_tagged_entry`), readable without `unsafe`.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct Completion(sys::fi_cq_tagged_entry);

// SAFETY: the raw pointers in the entry are only exposed as integers, never dereferenced.
unsafe impl Send for Completion {}

impl Default for Completion {
    fn default() -> Self {
        Completion(sys::fi_cq_tagged_entry {
            op_context: ptr::null_mut(),
            flags: 0,
            len: 0,
            buf: ptr::null_mut(),
            data: 0,
            tag: 0,
        })
    }
}

impl Completion {
    /// The context value the operation was posted with.
    #[inline(always)]
    pub fn context(&self) -> u64 {
        self.0.op_context as usize as u64
    }
    /// Completion flags (`FI_SEND`, `FI_RECV`, `FI_TAGGED`, `FI_MULTI_RECV`, `FI_REMOTE_CQ_DATA`...).
    #[inline(always)]
    pub fn flags(&self) -> u64 {
        self.0.flags
    }
    /// Received length.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.0.len
    }
    /// True when no bytes were received (or the entry is a send completion).
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }
    /// Address where the data landed (for multi-receive buffers: inside the posted buffer).
    #[inline(always)]
    pub fn buf_addr(&self) -> usize {
        self.0.buf as usize
    }
    /// Remote CQ data, valid when `flags()` has `FI_REMOTE_CQ_DATA`.
    #[inline(always)]
    pub fn data(&self) -> u64 {
        self.0.data
    }
    /// The message tag (tagged receives).
    #[inline(always)]
    pub fn tag(&self) -> u64 {
        self.0.tag
    }
}

/// Hands the caller's contexts back in completions just read, ending their operations on
/// their slots (see `mr.rs`).
#[inline(always)]
fn finish_all(entries: &mut [Completion]) {
    for c in entries {
        let e = &mut c.0;
        e.op_context = ctx(finish(e.op_context, 0, || (e.flags, e.buf, e.len)));
    }
}

/// The caller's context of a completion whose provider context is `op_context`: an odd value
/// is the caller's own, shifted ([`crate::mr::plain_context`]); 0 is none (a provider's error
/// without an operation); anything else is the address of the slot record the operation was
/// posted with (and above it a multi-receive's generation), whose state the completion
/// (error `err`, 0 if none) moves on.
#[inline(always)]
/// `entry` gives the completion's flags, buffer and length, loaded only for a multi-receive.
fn finish(
    op_context: *mut c_void,
    err: i32,
    entry: impl FnOnce() -> (u64, *mut c_void, usize),
) -> u64 {
    let v = op_context as usize;
    if v & 1 != 0 || v == 0 {
        return (v >> 1) as u64;
    }
    let (record, generation) = crate::mr::split_record(v);
    // SAFETY: every operation on an endpoint is posted through `Endpoint` (mode 0: providers
    // never write through the context), which passes either an odd value or the address of a
    // `Slot` of a region (a multi-receive's generation above it, split off here: regions
    // refuse to exist with records above 2^48); the endpoint's CQ, the only place its completions are read from,
    // keeps every region posted on alive (`CompletionQueue::pin`), so the slot and the
    // `MrInner` it names (its own Arc's data, which owns the slot) are alive and shared
    // (`Slot` and `MrInner` are accessed through atomics and immutable fields only). A record
    // of an operation posted alone (a read in place, a `RecvBuffer`'s read, an unregistered
    // send) has no region (never a multi-receive) and stays allocated while posted: on the
    // waiting call's frame or heap, or leaked by a `RecvBuffer` dropped before its reads
    // completed or by an abandoned unregistered send.
    let slot = unsafe { &*(record as *const crate::mr::Slot) };
    crate::mr::completed(slot, generation, err, || {
        let (flags, buf, len) = entry();
        // SAFETY: as above: the slot's region is alive, its `MrInner` shared.
        let mr = unsafe { &*(slot.region() as *const crate::mr::MrInner) };
        (mr, flags, buf as usize, len)
    })
}

/// An error completion (`struct fi_cq_err_entry`), with the provider's text.
#[derive(Clone, Debug)]
pub struct CompletionError {
    /// Context of the failed operation.
    pub context: u64,
    /// Completion flags.
    pub flags: u64,
    /// Bytes transferred.
    pub len: usize,
    /// Tag of the failed operation.
    pub tag: u64,
    /// Bytes that did not fit (truncation).
    pub olen: usize,
    /// libfabric error number (positive, e.g. `FI_ETRUNC`, `FI_ECANCELED`).
    pub err: i32,
    /// Provider-specific error number.
    pub prov_errno: i32,
    /// `fi_cq_strerror` text of the provider error.
    pub prov_text: String,
}

impl CompletionError {
    /// Whether a receive ended because the message was longer than its buffer
    /// (`FI_ETRUNC`).
    pub fn is_truncation(&self) -> bool {
        self.err == sys::FI_ETRUNC as i32
    }
}

impl CqFid {
    /// Reads up to `out.len()` completions; `Ok(0)` when none are ready (`-FI_EAGAIN`).
    #[inline(always)]
    pub(crate) fn read(&self, out: &mut [Completion]) -> Result<usize> {
        // SAFETY: Completion is repr(transparent) over fi_cq_tagged_entry, the CQ's format,
        // and `out` has room for out.len() entries.
        let ret = unsafe { sys::fi_cq_read(self.as_ptr(), out.as_mut_ptr().cast(), out.len()) };
        let n = self.read_result(ret)?;
        finish_all(&mut out[..n]);
        Ok(n)
    }

    /// A read of no entries: where CQ reads progress the provider, posted operations move;
    /// no completion is taken, and an error entry it may announce (`-FI_EAVAIL`) stays in
    /// the CQ for the next read, so the result is not looked at. (sockets returns
    /// `-FI_EAVAIL` before it progresses: while an error entry waits, this moves nothing,
    /// until the next real read takes the entry.)
    pub(crate) fn progress_only(&self) {
        let mut none = [Completion::default(); 1];
        // SAFETY: a read of 0 entries writes none; the buffer is valid for one anyway.
        let _ = unsafe { sys::fi_cq_read(self.as_ptr(), none.as_mut_ptr().cast(), 0) };
    }

    /// Like `read`, but blocks on the CQ's wait object for up to `timeout_ms` (-1: forever).
    pub(crate) fn sread(&self, out: &mut [Completion], timeout_ms: i32) -> Result<usize> {
        // SAFETY: as in read; cond is unused with FI_CQ_COND_NONE.
        let ret = unsafe {
            sys::fi_cq_sread(
                self.as_ptr(),
                out.as_mut_ptr().cast(),
                out.len(),
                ptr::null(),
                timeout_ms,
            )
        };
        let n = self.read_result(ret)?;
        finish_all(&mut out[..n]);
        Ok(n)
    }

    #[inline(always)]
    fn read_result(&self, ret: isize) -> Result<usize> {
        if ret >= 0 {
            return Ok(ret as usize);
        }
        match (-ret) as u32 {
            sys::FI_EAGAIN => Ok(0),
            // Another thread may have taken the error entry meanwhile: nothing to report.
            e if e == sys::FI_EAVAIL => match self.read_error()? {
                Some(c) => Err(Error::Completion(Box::new(c))),
                None => Ok(0),
            },
            e => Err(Error::call("fi_cq_read", e as i32)),
        }
    }

    /// The error entry `-FI_EAVAIL` announced; `None` if there is none (any more).
    fn read_error(&self) -> Result<Option<CompletionError>> {
        let mut e = sys::fi_cq_err_entry::default();
        // The provider's error data goes into our own buffer: its own would be valid only
        // until the next read of the CQ, which another thread may make meanwhile.
        let mut err_data = [0u8; 256];
        e.err_data = err_data.as_mut_ptr().cast();
        e.err_data_size = err_data.len();
        // SAFETY: e is a writable fi_cq_err_entry whose err_data points to err_data_size
        // writable bytes (alive until the strerror below).
        let ret = unsafe { sys::fi_cq_readerr(self.as_ptr(), &mut e, 0) };
        if ret == -(sys::FI_EAGAIN as isize) {
            return Ok(None);
        }
        check("fi_cq_readerr", ret)?;
        let mut text = [0 as c_char; 256];
        // SAFETY: text is writable for its length; strerror returns NULL or a C string.
        let prov_text = unsafe {
            let p = sys::fi_cq_strerror(
                self.as_ptr(),
                e.prov_errno,
                e.err_data,
                text.as_mut_ptr(),
                text.len(),
            );
            opt_str(p).unwrap_or_default()
        };
        Ok(Some(CompletionError {
            context: finish(e.op_context, e.err.abs(), || (e.flags, e.buf, 0)),
            flags: e.flags,
            len: e.len,
            tag: e.tag,
            olen: e.olen,
            // shm (1.17) reports the error negated; the API says positive.
            err: e.err.abs(),
            prov_errno: e.prov_errno,
            prov_text,
        }))
    }

    /// The CQ's wait file descriptor (`fi_control(FI_GETWAIT)`), when it has one.
    /// `fd_asked`: the CQ was opened with `FI_WAIT_FD`, so its wait object is an fd;
    /// otherwise (`FI_WAIT_UNSPEC`) the provider chose, and is asked which first.
    pub(crate) fn wait_fd(&self, fd_asked: bool) -> Option<c_int> {
        // FI_GETWAIT writes what the wait object is (an fd, or a larger mutex/cond or pollfd
        // set): for a wait object the provider chose, asked only once FI_GETWAITOBJ said it
        // is an fd (sockets answers FI_GETWAITOBJ for none: not asked of an fd CQ).
        if !fd_asked && !self.wait_obj_is_fd() {
            return None;
        }
        let mut fd: c_int = -1;
        // SAFETY: for an FD wait object FI_GETWAIT writes one int.
        let ret = unsafe {
            sys::fi_control(
                self.fid(),
                sys::FI_GETWAIT as c_int,
                (&mut fd as *mut c_int).cast(),
            )
        };
        (ret == 0 && fd >= 0).then_some(fd)
    }

    fn wait_obj_is_fd(&self) -> bool {
        let mut obj = sys::fi_wait_obj::default();
        // SAFETY: FI_GETWAITOBJ writes one enum fi_wait_obj.
        let ret = unsafe {
            sys::fi_control(
                self.fid(),
                sys::FI_GETWAITOBJ as c_int,
                (&mut obj as *mut sys::fi_wait_obj).cast(),
            )
        };
        ret == 0 && obj == sys::FI_WAIT_FD
    }

    /// Wakes a thread blocked in `sread`.
    pub(crate) fn signal(&self) -> Result<()> {
        // SAFETY: the CQ is open.
        check("fi_cq_signal", unsafe { sys::fi_cq_signal(self.as_ptr()) }
            as isize)
    }
}

/// How many fds [`poll_readable`] watches at most.
pub(crate) const MAX_POLL_FDS: usize = 8;

/// Sleeps in `ppoll` until one of `fds` (at most [`MAX_POLL_FDS`]) is readable or `timeout`
/// passes; `Ok(true)` if one is. An interrupted sleep counts as a timeout.
pub(crate) fn poll_readable(fds: &[c_int], timeout: std::time::Duration) -> Result<bool> {
    let mut set = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; MAX_POLL_FDS];
    let n = fds.len().min(MAX_POLL_FDS);
    for (p, &fd) in set.iter_mut().zip(&fds[..n]) {
        p.fd = fd;
        p.events = libc::POLLIN;
    }
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `set` holds `n` initialised pollfds and outlives the call; `ts` is a valid
    // timespec; a null signal mask keeps the thread's mask.
    let ret = unsafe { libc::ppoll(set.as_mut_ptr(), n as libc::nfds_t, &ts, ptr::null()) };
    if ret >= 0 {
        return Ok(ret > 0);
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EINTR) => Ok(false),
        e => Err(Error::call("ppoll", e.unwrap_or(libc::EINVAL))),
    }
}

impl FabricFid {
    /// `fi_trywait` on one CQ: `Ok(true)` when it is safe to block on the CQ's wait object.
    pub(crate) fn trywait(&self, cq: &CqFid) -> Result<bool> {
        let mut fid = cq.fid();
        // SAFETY: fid is an open CQ of this fabric; the array has one element.
        let ret = unsafe { sys::fi_trywait(self.as_ptr(), &mut fid, 1) };
        match ret {
            0 => Ok(true),
            r if r == -(sys::FI_EAGAIN as c_int) => Ok(false),
            r => Err(Error::call("fi_trywait", -r)),
        }
    }
}

#[cfg(test)]
mod tests {
    /// Cross-memory attach counts as allowed only without `FI_SHM_DISABLE_CMA`, without a
    /// Yama restriction, and with a call that works.
    #[test]
    fn cross_memory_attach_needs_no_restriction_and_a_working_call() {
        use super::cma_allowed;
        assert!(cma_allowed(None, None, || true));
        assert!(cma_allowed(Some("0"), Some("0\n"), || true));
        assert!(!cma_allowed(Some("1"), None, || true));
        assert!(!cma_allowed(None, Some("1\n"), || true));
        assert!(!cma_allowed(None, Some("3"), || true));
        assert!(!cma_allowed(None, None, || false));
        // This process can always read itself unless a filter refuses the call.
        eprintln!("process_vm_readv here: {}", super::process_vm_readv_works());
    }

    use super::finish;
    use crate::mr::Op;
    use crate::{flags, Domain, Hints, Info, MemoryRegion};
    use std::ffi::c_void;

    /// A multi-receive entry that one thread read before the buffer's last entry, but marks
    /// only after the buffer was posted again (the window two threads reading one CQ open),
    /// marks nothing of the new post; an entry of the new post does.
    #[test]
    fn a_late_entry_of_an_earlier_post_marks_nothing() {
        let Ok(info) = Info::first(&Hints::new().provider("shm").caps(flags::MULTI_RECV)) else {
            eprintln!("skipped: shm with FI_MULTI_RECV not offered");
            return;
        };
        let domain = Domain::open_info(&info).expect("domain");
        let pool = MemoryRegion::with_slots(&domain, 1, 4096).expect("region");
        let buf = pool.slice(0, 4096).expect("slice");
        let at = |offset: usize| (pool.addr() + offset) as *mut c_void;
        let entry = |context: u64, offset: usize, len: usize, last: bool| {
            let flags = if last { flags::MULTI_RECV } else { 0 };
            finish(context as usize as *mut c_void, 0, || {
                (flags, at(offset), len)
            })
        };
        let mut word = [0u8; 8];

        let first = buf.begin(Op::MultiRecv, 7).expect("first post");
        assert_eq!(buf.record(), Some(first), "cancel names the post as posted");
        assert_eq!(entry(first, 0, 8, false), 7);
        pool.read(0, &mut word)
            .expect("a reported message is readable");
        assert!(pool.read(8, &mut word).is_err(), "bytes not reported yet");
        // The buffer's last entry, then the application posts it again.
        assert_eq!(entry(first, 8, 0, true), 7);
        let second = buf.begin(Op::MultiRecv, 9).expect("second post");
        assert_ne!(first, second, "each post has its own generation");
        assert_eq!(buf.record(), Some(second));

        // Late: an entry of the first post, for bytes the second has not received. (Its
        // context is the slot's as posted now: the earlier one is gone.)
        entry(first, 8, 8, false);
        assert!(
            pool.read(8, &mut word).is_err(),
            "a late entry of the earlier post made bytes of the new one readable"
        );
        assert_eq!(entry(second, 8, 8, false), 9);
        pool.read(8, &mut word)
            .expect("the new post's own entry marks");
        assert_eq!(entry(second, 16, 0, true), 9);
    }
}
