//! The C ABI: `libmcapi.so` / `libmcapi.a` with the MCAPI 2.000 functions of spec chapter 4
//! and the types and constants of `include/mca.h`, `include/mcapi.h` and
//! `include/mcapi_impl_spec.h` (see `docs/c-abi.md`).
//!
//! Every exported function wraps the Rust API ([`Node`], [`Node::current`] as the calling
//! thread's node) in `StatusOut::call`, which catches any panic (reported as
//! `MCAPI_ERR_GENERAL`, so no unwinding crosses into C) and writes the status through a
//! pointer that may be NULL. Pointer arguments are checked for NULL before anything
//! changes; bad handles are rejected by the self-validating Rust handles ([`EndpointId`],
//! [`ChannelHandle`], [`RequestHandle`](crate::RequestHandle)).
//!
//! This module is the only place of the crate with `unsafe` code: dereferencing what C
//! passes. Each exported function is `unsafe extern "C"` with its pointer contract in a
//! `# Safety` section, and each dereference sits in its own `unsafe` block.
//!
//! Layout, one file per chapter-4 section: [`node`] (4.1), [`mod@endpoint`] (4.2), [`msg`]
//! (4.3), [`pktchan`] (4.4), [`sclchan`] (4.5), [`request`] (4.6), [`support`] (4.7).
#![allow(non_camel_case_types)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod endpoint;
pub mod msg;
pub mod node;
pub mod pktchan;
pub mod request;
pub mod sclchan;
pub mod support;

pub use endpoint::*;
pub use msg::*;
pub use node::*;
pub use pktchan::*;
pub use request::*;
pub use sclchan::*;
pub use support::*;

use crate::config::Compat;
use crate::semantics::channel::status_flags;
use crate::semantics::endpoint_id::{MAX_PORT, PORT_ANY};
use crate::semantics::{EndpointId, Status};
use crate::{ChannelHandle, Node, MAX_MSG_SIZE, MAX_PKT_SIZE, NUM_PRIORITIES};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

// The scalar types of the headers (`mca.h`, `mcapi.h`, `mcapi_impl_spec.h`).

/// `mcapi_status_t` / `mca_status_t`: a [`Status`] code.
pub type mcapi_status_t = u32;
/// `mcapi_domain_t` / `mca_domain_t`.
pub type mcapi_domain_t = u32;
/// `mcapi_node_t` / `mca_node_t`.
pub type mcapi_node_t = u32;
/// `mcapi_port_t`.
pub type mcapi_port_t = u32;
/// `mcapi_uint_t` / `mca_uint_t`.
pub type mcapi_uint_t = u32;
/// `mcapi_priority_t` (0 is the highest).
pub type mcapi_priority_t = u32;
/// `mcapi_timeout_t` / `mca_timeout_t`: milliseconds, [`MCAPI_TIMEOUT_INFINITE`] = ~0.
pub type mcapi_timeout_t = u32;
/// `mcapi_boolean_t` / `mca_boolean_t`.
pub type mcapi_boolean_t = u8;
/// `mcapi_endpoint_t`: an [`EndpointId`] value.
pub type mcapi_endpoint_t = u64;
/// `mcapi_request_t` / `mca_request_t`: a [`RequestHandle`](crate::RequestHandle) value.
pub type mcapi_request_t = u64;
/// `mcapi_pktchan_recv_hndl_t`: a [`ChannelHandle`] value.
pub type mcapi_pktchan_recv_hndl_t = u64;
/// `mcapi_pktchan_send_hndl_t`: a [`ChannelHandle`] value.
pub type mcapi_pktchan_send_hndl_t = u64;
/// `mcapi_sclchan_recv_hndl_t`: a [`ChannelHandle`] value.
pub type mcapi_sclchan_recv_hndl_t = u64;
/// `mcapi_sclchan_send_hndl_t`: a [`ChannelHandle`] value.
pub type mcapi_sclchan_send_hndl_t = u64;

// Constants of the headers; `tests/c_abi.rs` compiles the headers and compares.

/// `MCAPI_VERSION`: 2.000, the rightmost three hex digits being the minor number (3.17.5.1.2).
pub const MCAPI_VERSION: u32 = 0x2000;
/// `MCAPI_ORG_ID`: no organization id has been assigned by the MCA.
pub const MCAPI_ORG_ID: u32 = 0;
/// `MCAPI_IMPL_VERSION`: this crate's version as `0xMMmmpp` (major, minor, patch).
pub const MCAPI_IMPL_VERSION: u32 = implementation_version();
/// `MCA_TRUE`.
pub const MCA_TRUE: mcapi_boolean_t = 1;
/// `MCA_FALSE`.
pub const MCA_FALSE: mcapi_boolean_t = 0;
/// `MCAPI_NULL` / `MCA_NULL`: what failed calls return as an endpoint or count.
pub const MCAPI_NULL: u64 = 0;
/// `MCAPI_PORT_ANY`.
pub const MCAPI_PORT_ANY: mcapi_port_t = PORT_ANY;
/// `MCAPI_TIMEOUT_INFINITE` / `MCA_INFINITE`.
pub const MCAPI_TIMEOUT_INFINITE: mcapi_timeout_t = u32::MAX;
/// `MCAPI_TIMEOUT_IMMEDIATE`.
pub const MCAPI_TIMEOUT_IMMEDIATE: mcapi_timeout_t = 0;
/// `MCAPI_DOMAIN_INVALID`: `mcapi_domain_id_get`'s return value on error.
pub const MCAPI_DOMAIN_INVALID: mcapi_domain_t = u32::MAX;
/// `MCAPI_NODE_INVALID`: `mcapi_node_id_get`'s return value on error.
pub const MCAPI_NODE_INVALID: mcapi_node_t = u32::MAX;
/// `MCAPI_RETURN_VALUE_INVALID`: `mcapi_wait_any`'s return value on error.
pub const MCAPI_RETURN_VALUE_INVALID: mcapi_uint_t = u32::MAX;
/// `MCAPI_MAX_MSG_SIZE`: the largest message accepted.
pub const MCAPI_MAX_MSG_SIZE: usize = MAX_MSG_SIZE;
/// `MCAPI_MAX_PKT_SIZE`: the largest packet accepted (the largest
/// `MCAPI_ENDP_ATTR_MAX_PAYLOAD_SIZE` of a channel endpoint).
pub const MCAPI_MAX_PKT_SIZE: usize = MAX_PKT_SIZE;
/// `MCAPI_MAX_PRIORITY`: the largest valid priority value (the lowest priority).
pub const MCAPI_MAX_PRIORITY: u32 = NUM_PRIORITIES - 1;
/// `MCAPI_MAX_ENDPOINTS`: the endpoints every node can create, on every provider (they
/// share the node's receive pool); one more is `MCAPI_ERR_PORT_INVALID`
/// (`MCAPI_ERR_ENDP_LIMIT` in compatibility mode).
pub const MCAPI_MAX_ENDPOINTS: u32 = crate::MAX_ENDPOINTS as u32;
/// `MCAPI_BUF_ALIGN`: the alignment `MCAPI_DECL_ALIGNED` gives buffers (a cache line).
pub const MCAPI_BUF_ALIGN: usize = 64;
/// `MCAPI_MAX_STATUS_MSG_LEN`: a buffer this long holds every status name and its NUL.
pub const MCAPI_MAX_STATUS_MSG_LEN: usize = 32;
/// `MCAPI_ENDP_ATTR_STATE_BUFFER` (an ABB extension this implementation does not offer:
/// setting it is `MCAPI_ERR_ATTR_NOTSUPPORTED`).
pub const MCAPI_ENDP_ATTR_STATE_BUFFER: u32 = crate::attributes::STATE_BUFFER as u32;
/// `MCAPI_ENDP_ATTR_SHARED_MEMORY` (not offered: `MCAPI_ERR_ATTR_NOTSUPPORTED`).
pub const MCAPI_ENDP_ATTR_SHARED_MEMORY: u32 = crate::attributes::SHARED_MEMORY as u32;
/// `MCAPI_ENDP_ATTR_REMOTE_MEMORY` (not offered: `MCAPI_ERR_ATTR_NOTSUPPORTED`).
pub const MCAPI_ENDP_ATTR_REMOTE_MEMORY: u32 = crate::attributes::REMOTE_MEMORY as u32;
/// The `MCAPI_ENDP_ATTR_STATUS_*` flags (spec 3.16.13.8), by C name: the channel state's
/// flags that `MCAPI_ENDP_ATTR_STATUS` reports.
pub const MCAPI_ENDP_ATTR_STATUS_FLAGS: [(&str, u32); 8] = [
    (
        "MCAPI_ENDP_ATTR_STATUS_CONNECTED",
        status_flags::CONNECTED as u32,
    ),
    ("MCAPI_ENDP_ATTR_STATUS_OPEN", status_flags::OPEN as u32),
    (
        "MCAPI_ENDP_ATTR_STATUS_OPEN_PENDING",
        status_flags::OPEN_PENDING as u32,
    ),
    (
        "MCAPI_ENDP_ATTR_STATUS_CLOSE_PENDING",
        status_flags::CLOSE_PENDING as u32,
    ),
    (
        "MCAPI_ENDP_ATTR_STATUS_PKTCHAN",
        status_flags::PKTCHAN as u32,
    ),
    (
        "MCAPI_ENDP_ATTR_STATUS_SCLCHAN",
        status_flags::SCLCHAN as u32,
    ),
    ("MCAPI_ENDP_ATTR_STATUS_SEND", status_flags::SEND as u32),
    (
        "MCAPI_ENDP_ATTR_STATUS_RECEIVE",
        status_flags::RECEIVE as u32,
    ),
];
/// Ports a node has: `0..=MAX_PORT` (`mcapi_info_t.number_of_ports`).
pub const NUMBER_OF_PORTS: u32 = MAX_PORT + 1;

const _: () = assert!(MCAPI_MAX_STATUS_MSG_LEN > crate::semantics::status::MAX_NAME_LEN);

const fn implementation_version() -> u32 {
    const fn parse(s: &str) -> u32 {
        let bytes = s.as_bytes();
        let mut n = 0;
        let mut i = 0;
        while i < bytes.len() {
            n = n * 10 + (bytes[i] - b'0') as u32;
            i += 1;
        }
        n
    }
    (parse(env!("CARGO_PKG_VERSION_MAJOR")) << 16)
        | (parse(env!("CARGO_PKG_VERSION_MINOR")) << 8)
        | parse(env!("CARGO_PKG_VERSION_PATCH"))
}

/// The status out-parameter of an exported function. Creating one asserts the pointer's
/// validity once, so reporting through it is safe.
struct StatusOut(*mut mcapi_status_t);

impl StatusOut {
    /// # Safety
    /// `status` is NULL or valid for writing an `mcapi_status_t` during the call.
    unsafe fn new(status: *mut mcapi_status_t) -> StatusOut {
        StatusOut(status)
    }

    /// Runs the body of an exported function: its value on success (status
    /// `MCAPI_SUCCESS`), `on_error` with the error's status otherwise, `on_error` with
    /// `MCAPI_ERR_GENERAL` if it panicked. The status is written unless the pointer is NULL.
    fn call<T>(self, on_error: T, body: impl FnOnce() -> Result<T, Status>) -> T {
        self.call_reporting(on_error, || {
            body().map(|value| (value, Status::MCAPI_SUCCESS))
        })
    }

    /// As [`StatusOut::call`], for bodies that report a status other than `MCAPI_SUCCESS`
    /// along with their value (`MCAPI_PENDING` of the `_i` calls and of `mcapi_test`).
    fn call_reporting<T>(
        self,
        on_error: T,
        body: impl FnOnce() -> Result<(T, Status), Status>,
    ) -> T {
        // AssertUnwindSafe: after a panic the caller sees only `on_error` and a status, and
        // the calling thread's node is marked broken (its state, behind mutexes whose
        // poisoning the node module ignores, may be half-changed): every later call on it
        // fails with MCAPI_ERR_GENERAL, as after a panic of its background thread.
        let (value, code) = match catch_unwind(AssertUnwindSafe(body)) {
            Ok(Ok((value, code))) => (value, code),
            Ok(Err(code)) => (on_error, code),
            Err(panic) => {
                let why = panic
                    .downcast_ref::<&str>()
                    .copied()
                    .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                    .unwrap_or("unknown");
                log::error!("MCAPI_ERR_GENERAL: a panic caught at the C boundary: {why}");
                if let Ok(node) = current_node() {
                    node.mark_broken("a C call", &*panic);
                }
                (on_error, Status::MCAPI_ERR_GENERAL)
            }
        };
        // SAFETY: NULL or writable, as promised to `StatusOut::new`.
        unsafe { put(self.0, code.code()) };
        value
    }
}

impl StatusOut {
    /// Runs the body of an `_i` function (its value is the status to report: `MCAPI_SUCCESS`,
    /// `MCAPI_PENDING`, or the error of a request that exists and finished with one). When
    /// the body fails before it made a request and the node follows `MCAPI_COMPAT=mca`,
    /// `*request` still gets a request complete with that error (see [`RequestOut::fail`]).
    fn call_i(self, request: RequestOut, body: impl FnOnce() -> Result<Status, Status>) {
        self.call_reporting((), || match body() {
            Ok(code) => Ok(((), code)),
            Err(error) => {
                request.fail(error);
                Err(error)
            }
        })
    }
}

/// The request out-parameter of an `_i` function. Creating one asserts the pointer's
/// validity once, so writing through it is safe.
struct RequestOut(*mut mcapi_request_t);

impl RequestOut {
    /// # Safety
    /// `request` is NULL or valid for writing an `mcapi_request_t` during the call.
    unsafe fn new(request: *mut mcapi_request_t) -> RequestOut {
        RequestOut(request)
    }

    /// `MCAPI_COMPAT=mca`: an `_i` call that failed at once still yields a request, complete
    /// with `error`, so `mcapi_test`/`mcapi_wait`/`mcapi_wait_any` on it report the error
    /// (the reference implementation records every refusal in the request). Nothing is
    /// written in spec mode (chapter 4: on error only the status is set), for a NULL
    /// pointer, without a node, or when the request table is full (the status alone then
    /// reports `error`).
    fn fail(&self, error: Status) {
        if self.0.is_null() {
            return;
        }
        let Ok(node) = current_node() else {
            return;
        };
        if node.compat() != Compat::Mca {
            return;
        }
        if let Ok(handle) = node.failed_request(error) {
            // SAFETY: non-NULL, and writable as promised to `RequestOut::new`.
            unsafe { put(self.0, handle.as_raw()) };
        }
    }
}

/// The status an `_i` call reports once its request exists: `MCAPI_SUCCESS` when it
/// completed during the call, `MCAPI_PENDING` otherwise, or the error it completed with
/// (the request reports it too, and must still be released).
fn started_status(test: Result<Option<usize>, Status>) -> Status {
    match test {
        Ok(Some(_)) => Status::MCAPI_SUCCESS,
        Ok(None) => Status::MCAPI_PENDING,
        Err(e) => e,
    }
}

/// Writes an out-parameter unless the caller passed NULL for it.
///
/// # Safety
/// `out` is NULL or valid and aligned for writing a `T`.
unsafe fn put<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: non-NULL, and valid for writes by the caller's contract.
        unsafe { out.write(value) };
    }
}

/// Fails with `MCAPI_ERR_PARAMETER` when a required pointer is NULL.
fn required<T>(pointer: *const T) -> Result<(), Status> {
    if pointer.is_null() {
        Err(Status::MCAPI_ERR_PARAMETER)
    } else {
        Ok(())
    }
}

/// The calling thread's node (the one it initialized, else the process's only node).
fn current_node() -> Result<Node, Status> {
    Node::current()
}

/// An `mcapi_endpoint_t` value as an [`EndpointId`]; garbage is `MCAPI_ERR_ENDP_INVALID`.
fn endpoint(raw: mcapi_endpoint_t) -> Result<EndpointId, Status> {
    EndpointId::from_raw(raw).ok_or(Status::MCAPI_ERR_ENDP_INVALID)
}

/// A channel handle value (`mcapi_pktchan_send_hndl_t` and its kin); checked when used,
/// garbage is `MCAPI_ERR_CHAN_INVALID`.
fn channel(raw: u64) -> ChannelHandle {
    ChannelHandle::from_raw(raw)
}

/// An `mcapi_timeout_t` in milliseconds as the Rust API's timeout (`None`: infinite).
fn timeout(ms: mcapi_timeout_t) -> Option<Duration> {
    (ms != MCAPI_TIMEOUT_INFINITE).then(|| Duration::from_millis(u64::from(ms)))
}

/// `true`/`false` as `MCA_TRUE`/`MCA_FALSE`.
fn boolean(value: bool) -> mcapi_boolean_t {
    if value {
        MCA_TRUE
    } else {
        MCA_FALSE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    /// A panic caught at the C boundary marks the calling thread's node broken: the call
    /// reports MCAPI_ERR_GENERAL, and so does every later call on the node.
    #[test]
    fn a_panic_in_a_c_call_breaks_the_node() {
        let mut config = Config::defaults();
        config.provider = Some("shm".into());
        config.job = format!("capi-panic-{}", std::process::id());
        let node = Node::initialize(0, 41, config).expect("a node");
        let mut code = Status::MCAPI_SUCCESS.code();
        // SAFETY: a pointer to a local.
        let out = unsafe { StatusOut::new(&mut code) };
        let value = out.call(0u32, || -> Result<u32, Status> { panic!("injected") });
        assert_eq!((value, code), (0, Status::MCAPI_ERR_GENERAL.code()));
        assert_eq!(
            node.endpoint_create(1).err(),
            Some(Status::MCAPI_ERR_GENERAL)
        );
        _ = node.finalize();
    }
}
