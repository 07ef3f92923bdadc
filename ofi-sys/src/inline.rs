//! The `static inline` functions of the libfabric headers, as direct op-table calls.
//!
//! Each function mirrors its C namesake line for line. They are `unsafe` for the same reason
//! the C ones are dangerous: every pointer must be a live object of the right kind and every
//! buffer must stay valid until libfabric says it is done with it.

use crate::*;
use core::ffi::{c_char, c_int, c_void};

/// Calls `$table->$op(args...)`, or returns `-FI_ENOSYS` if the provider left it empty.
macro_rules! op_call {
    ($table:expr, $op:ident ( $($arg:expr),* $(,)? )) => {
        match (*$table).$op {
            Some(f) => f($($arg),*),
            None => -(FI_ENOSYS as i32) as _,
        }
    };
}

macro_rules! inline_fns {
    ($(
        $(#[$m:meta])*
        fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) -> $ret:ty => [$table:expr] $op:ident ( $($call:expr),* $(,)? );
    )*) => {$(
        $(#[$m])*
        #[doc = concat!("`", stringify!($name), "` from the libfabric headers.")]
        ///
        /// # Safety
        /// Every pointer must be valid as the libfabric man page of this call requires, and
        /// buffers must stay valid until the operation's completion is reported.
        #[inline(always)]
        pub unsafe fn $name($($arg: $ty),*) -> $ret {
            // SAFETY: the caller guarantees the object is live, so its ops table is valid.
            unsafe { op_call!($table, $op($($call),*)) }
        }
    )*};
}

/// Casts an embedded `struct fid *` back to the endpoint that contains it (`container_of`);
/// `fid` is the first member of `fid_ep`.
#[inline(always)]
fn ep_of(fid: *mut fid) -> *mut fid_ep {
    fid.cast()
}

inline_fns! {
    fn fi_close(fid: *mut fid) -> c_int => [(*fid).ops] close(fid);
    fn fi_control(fid: *mut fid, command: c_int, arg: *mut c_void) -> c_int
        => [(*fid).ops] control(fid, command, arg);
    fn fi_domain(fabric: *mut fid_fabric, info: *mut fi_info, domain: *mut *mut fid_domain, context: *mut c_void) -> c_int
        => [(*fabric).ops] domain(fabric, info, domain, context);
    fn fi_trywait(fabric: *mut fid_fabric, fids: *mut *mut fid, count: c_int) -> c_int
        => [(*fabric).ops] trywait(fabric, fids, count);
    fn fi_cq_open(domain: *mut fid_domain, attr: *mut fi_cq_attr, cq: *mut *mut fid_cq, context: *mut c_void) -> c_int
        => [(*domain).ops] cq_open(domain, attr, cq, context);
    fn fi_av_open(domain: *mut fid_domain, attr: *mut fi_av_attr, av: *mut *mut fid_av, context: *mut c_void) -> c_int
        => [(*domain).ops] av_open(domain, attr, av, context);
    fn fi_endpoint(domain: *mut fid_domain, info: *mut fi_info, ep: *mut *mut fid_ep, context: *mut c_void) -> c_int
        => [(*domain).ops] endpoint(domain, info, ep, context);
    fn fi_mr_reg(domain: *mut fid_domain, buf: *const c_void, len: usize, acs: u64, offset: u64,
                 requested_key: u64, flags: u64, mr: *mut *mut fid_mr, context: *mut c_void) -> c_int
        => [(*domain).mr] reg(&mut (*domain).fid, buf, len, acs, offset, requested_key, flags, mr, context);
    fn fi_av_insert(av: *mut fid_av, addr: *const c_void, count: usize, fi_addr: *mut fi_addr_t,
                    flags: u64, context: *mut c_void) -> c_int
        => [(*av).ops] insert(av, addr, count, fi_addr, flags, context);
    fn fi_av_remove(av: *mut fid_av, fi_addr: *mut fi_addr_t, count: usize, flags: u64) -> c_int
        => [(*av).ops] remove(av, fi_addr, count, flags);
    fn fi_ep_bind(ep: *mut fid_ep, bfid: *mut fid, flags: u64) -> c_int
        => [(*ep).fid.ops] bind(&mut (*ep).fid, bfid, flags);
    fn fi_getname(fid: *mut fid, addr: *mut c_void, addrlen: *mut usize) -> c_int
        => [(*ep_of(fid)).cm] getname(fid, addr, addrlen);
    fn fi_cancel(fid: *mut fid, context: *mut c_void) -> isize
        => [(*ep_of(fid)).ops] cancel(fid, context);
    fn fi_setopt(fid: *mut fid, level: c_int, optname: c_int, optval: *const c_void, optlen: usize) -> c_int
        => [(*ep_of(fid)).ops] setopt(fid, level, optname, optval, optlen);
    fn fi_getopt(fid: *mut fid, level: c_int, optname: c_int, optval: *mut c_void, optlen: *mut usize) -> c_int
        => [(*ep_of(fid)).ops] getopt(fid, level, optname, optval, optlen);

    fn fi_send(ep: *mut fid_ep, buf: *const c_void, len: usize, desc: *mut c_void, dest_addr: fi_addr_t, context: *mut c_void) -> isize
        => [(*ep).msg] send(ep, buf, len, desc, dest_addr, context);
    fn fi_senddata(ep: *mut fid_ep, buf: *const c_void, len: usize, desc: *mut c_void, data: u64, dest_addr: fi_addr_t, context: *mut c_void) -> isize
        => [(*ep).msg] senddata(ep, buf, len, desc, data, dest_addr, context);
    fn fi_inject(ep: *mut fid_ep, buf: *const c_void, len: usize, dest_addr: fi_addr_t) -> isize
        => [(*ep).msg] inject(ep, buf, len, dest_addr);
    fn fi_injectdata(ep: *mut fid_ep, buf: *const c_void, len: usize, data: u64, dest_addr: fi_addr_t) -> isize
        => [(*ep).msg] injectdata(ep, buf, len, data, dest_addr);
    fn fi_recv(ep: *mut fid_ep, buf: *mut c_void, len: usize, desc: *mut c_void, src_addr: fi_addr_t, context: *mut c_void) -> isize
        => [(*ep).msg] recv(ep, buf, len, desc, src_addr, context);
    fn fi_recvmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize
        => [(*ep).msg] recvmsg(ep, msg, flags);
    fn fi_sendmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize
        => [(*ep).msg] sendmsg(ep, msg, flags);

    fn fi_tsend(ep: *mut fid_ep, buf: *const c_void, len: usize, desc: *mut c_void, dest_addr: fi_addr_t, tag: u64, context: *mut c_void) -> isize
        => [(*ep).tagged] send(ep, buf, len, desc, dest_addr, tag, context);
    fn fi_tsenddata(ep: *mut fid_ep, buf: *const c_void, len: usize, desc: *mut c_void, data: u64, dest_addr: fi_addr_t, tag: u64, context: *mut c_void) -> isize
        => [(*ep).tagged] senddata(ep, buf, len, desc, data, dest_addr, tag, context);
    fn fi_tinject(ep: *mut fid_ep, buf: *const c_void, len: usize, dest_addr: fi_addr_t, tag: u64) -> isize
        => [(*ep).tagged] inject(ep, buf, len, dest_addr, tag);
    fn fi_tinjectdata(ep: *mut fid_ep, buf: *const c_void, len: usize, data: u64, dest_addr: fi_addr_t, tag: u64) -> isize
        => [(*ep).tagged] injectdata(ep, buf, len, data, dest_addr, tag);
    fn fi_trecv(ep: *mut fid_ep, buf: *mut c_void, len: usize, desc: *mut c_void, src_addr: fi_addr_t, tag: u64, ignore: u64, context: *mut c_void) -> isize
        => [(*ep).tagged] recv(ep, buf, len, desc, src_addr, tag, ignore, context);
    fn fi_trecvmsg(ep: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> isize
        => [(*ep).tagged] recvmsg(ep, msg, flags);
    fn fi_tsendmsg(ep: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> isize
        => [(*ep).tagged] sendmsg(ep, msg, flags);

    fn fi_read(ep: *mut fid_ep, buf: *mut c_void, len: usize, desc: *mut c_void, src_addr: fi_addr_t, addr: u64, key: u64, context: *mut c_void) -> isize
        => [(*ep).rma] read(ep, buf, len, desc, src_addr, addr, key, context);
    fn fi_write(ep: *mut fid_ep, buf: *const c_void, len: usize, desc: *mut c_void, dest_addr: fi_addr_t, addr: u64, key: u64, context: *mut c_void) -> isize
        => [(*ep).rma] write(ep, buf, len, desc, dest_addr, addr, key, context);

    fn fi_cq_read(cq: *mut fid_cq, buf: *mut c_void, count: usize) -> isize
        => [(*cq).ops] read(cq, buf, count);
    fn fi_cq_readfrom(cq: *mut fid_cq, buf: *mut c_void, count: usize, src_addr: *mut fi_addr_t) -> isize
        => [(*cq).ops] readfrom(cq, buf, count, src_addr);
    fn fi_cq_readerr(cq: *mut fid_cq, buf: *mut fi_cq_err_entry, flags: u64) -> isize
        => [(*cq).ops] readerr(cq, buf, flags);
    fn fi_cq_sread(cq: *mut fid_cq, buf: *mut c_void, count: usize, cond: *const c_void, timeout: c_int) -> isize
        => [(*cq).ops] sread(cq, buf, count, cond, timeout);
    fn fi_cq_signal(cq: *mut fid_cq) -> c_int => [(*cq).ops] signal(cq);
}

/// `fi_enable` from `fi_endpoint.h`.
///
/// # Safety
/// `ep` must be a live endpoint.
#[inline]
pub unsafe fn fi_enable(ep: *mut fid_ep) -> c_int {
    // SAFETY: forwarded from the caller's guarantee.
    unsafe { fi_control(&mut (*ep).fid, FI_ENABLE as c_int, core::ptr::null_mut()) }
}

/// `fi_mr_desc` from `fi_domain.h`.
///
/// # Safety
/// `mr` must be a live memory registration.
#[inline(always)]
pub unsafe fn fi_mr_desc(mr: *mut fid_mr) -> *mut c_void {
    // SAFETY: forwarded from the caller's guarantee.
    unsafe { (*mr).mem_desc }
}

/// `fi_mr_key` from `fi_domain.h`.
///
/// # Safety
/// `mr` must be a live memory registration.
#[inline(always)]
pub unsafe fn fi_mr_key(mr: *mut fid_mr) -> u64 {
    // SAFETY: forwarded from the caller's guarantee.
    unsafe { (*mr).key }
}

/// `fi_cq_strerror` from `fi_eq.h`.
///
/// # Safety
/// `cq` must be a live completion queue and `buf` writable for `len` bytes.
#[inline]
pub unsafe fn fi_cq_strerror(
    cq: *mut fid_cq,
    prov_errno: c_int,
    err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    // SAFETY: forwarded from the caller's guarantee.
    unsafe {
        match (*(*cq).ops).strerror {
            Some(f) => f(cq, prov_errno, err_data, buf, len),
            None => core::ptr::null(),
        }
    }
}

/// `fi_allocinfo` from `fabric.h`.
///
/// # Safety
/// The result must be released with `fi_freeinfo`.
#[inline]
pub unsafe fn fi_allocinfo() -> *mut fi_info {
    // SAFETY: fi_dupinfo(NULL) allocates a zeroed fi_info with its attribute structs.
    unsafe { fi_dupinfo(core::ptr::null()) }
}
