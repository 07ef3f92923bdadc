//! Spec 4.4: packet channels.
//!
//! A received packet is handed to C as a pointer into the channel's registered receive pool
//! (no copy): it stays valid until `mcapi_pktchan_release` gives it back (also after the
//! channel closed), and at the latest until `mcapi_finalize`. The node tracks held packets
//! by address, so nothing of the Rust [`Packet`](crate::Packet) needs to outlive the call.

use super::MCAPI_MAX_PKT_SIZE;
use super::{
    boolean, channel, current_node, endpoint, mcapi_boolean_t, mcapi_endpoint_t,
    mcapi_pktchan_recv_hndl_t, mcapi_pktchan_send_hndl_t, mcapi_request_t, mcapi_status_t,
    mcapi_uint_t, put, request, required, started_status, RequestOut, StatusOut, MCA_FALSE,
};
use crate::semantics::{EndpointId, Status};
use crate::{ChannelHandle, Node, RequestHandle, SendBuffer};
use std::ffi::c_void;

/// A `Node` connect method (`pktchan_connect_i`, `sclchan_connect_i`).
type Connect = fn(&Node, EndpointId, EndpointId) -> Result<RequestHandle, Status>;
/// A `Node` open method: the side's handle and the open request.
type Open = fn(&Node, EndpointId) -> Result<(ChannelHandle, RequestHandle), Status>;
/// A `Node` close method.
type Close = fn(&Node, ChannelHandle) -> Result<RequestHandle, Status>;

/// The status an `_i` call reports for the request it made: `MCAPI_SUCCESS` when it
/// completed during the call, `MCAPI_PENDING` otherwise, or the operation's own error when
/// it completed with one (the request, written already, reports it as well).
///
/// # Safety
/// Any receive target registered for `handle` is still writable.
pub(super) unsafe fn started(node: &Node, handle: RequestHandle) -> Result<Status, Status> {
    // SAFETY: per this function's contract.
    Ok(started_status(unsafe { request::test_now(node, handle) }))
}

/// Connects with `connect`, writes the request and reports it (the connect functions of
/// 4.4.1 and 4.5.1).
///
/// # Safety
/// `request` and `status` are NULL or writable.
pub(super) unsafe fn connect(
    send_endpoint: mcapi_endpoint_t,
    receive_endpoint: mcapi_endpoint_t,
    request: *mut mcapi_request_t,
    status: *mut mcapi_status_t,
    connect: Connect,
) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    // SAFETY: `request` is NULL or writable per this function's contract.
    let request_out = unsafe { RequestOut::new(request) };
    status.call_i(request_out, || {
        required(request)?;
        let (send, receive) = (endpoint(send_endpoint)?, endpoint(receive_endpoint)?);
        let node = current_node()?;
        let handle = connect(&node, send, receive)?;
        // SAFETY: non-NULL and writable by the contract.
        unsafe { put(request, handle.as_raw()) };
        // SAFETY: a connect request has no receive target.
        unsafe { started(&node, handle) }
    })
}

/// Opens a channel side with `open`, writes the handle and the request and reports the
/// request (the open functions of 4.4.2, 4.4.3, 4.5.2 and 4.5.3). The handle is written at
/// once; it is usable when the request completed.
///
/// # Safety
/// `handle`, `request` and `status` are NULL or writable.
pub(super) unsafe fn open(
    handle: *mut u64,
    local_endpoint: mcapi_endpoint_t,
    request: *mut mcapi_request_t,
    status: *mut mcapi_status_t,
    open: Open,
) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    // SAFETY: `request` is NULL or writable per this function's contract.
    let request_out = unsafe { RequestOut::new(request) };
    status.call_i(request_out, || {
        required(handle)?;
        required(request)?;
        let id = endpoint(local_endpoint)?;
        let node = current_node()?;
        let (side, req) = open(&node, id)?;
        // SAFETY: both non-NULL and writable by the contract.
        unsafe {
            put(handle, side.raw());
            put(request, req.as_raw());
        }
        // SAFETY: an open request has no receive target.
        unsafe { started(&node, req) }
    })
}

/// Closes a channel side with `close`, writes the request and reports it (the close
/// functions of 4.4.11, 4.4.12, 4.5.13 and 4.5.14).
///
/// # Safety
/// `request` and `status` are NULL or writable.
pub(super) unsafe fn close(
    handle: u64,
    request: *mut mcapi_request_t,
    status: *mut mcapi_status_t,
    close: Close,
) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    // SAFETY: `request` is NULL or writable per this function's contract.
    let request_out = unsafe { RequestOut::new(request) };
    status.call_i(request_out, || {
        required(request)?;
        let node = current_node()?;
        let req = close(&node, channel(handle))?;
        // SAFETY: non-NULL and writable by the contract.
        unsafe { put(request, req.as_raw()) };
        // SAFETY: a close request has no receive target.
        unsafe { started(&node, req) }
    })
}

/// `mcapi_pktchan_connect_i` (4.4.1): any node may connect two endpoints (also a third
/// one). The connect is complete when this returns (`MCAPI_SUCCESS`); the request must
/// still be released by `mcapi_wait`, `mcapi_wait_any`, `mcapi_test` or `mcapi_cancel`.
///
/// # Safety
/// `request` and `status` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_connect_i(
    send_endpoint: mcapi_endpoint_t,
    receive_endpoint: mcapi_endpoint_t,
    request: *mut mcapi_request_t,
    status: *mut mcapi_status_t,
) {
    // SAFETY: this function's contract is `connect`'s.
    unsafe {
        connect(
            send_endpoint,
            receive_endpoint,
            request,
            status,
            Node::pktchan_connect_i,
        )
    }
}

/// `mcapi_pktchan_recv_open_i` (4.4.2): `*receive_handle` is written at once and usable
/// once the request completed (both sides open).
///
/// # Safety
/// `receive_handle`, `request` and `status` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_recv_open_i(
    receive_handle: *mut mcapi_pktchan_recv_hndl_t,
    receive_endpoint: mcapi_endpoint_t,
    request: *mut mcapi_request_t,
    status: *mut mcapi_status_t,
) {
    // SAFETY: this function's contract is `open`'s.
    unsafe {
        open(
            receive_handle,
            receive_endpoint,
            request,
            status,
            Node::pktchan_recv_open_i,
        )
    }
}

/// `mcapi_pktchan_send_open_i` (4.4.3): as `mcapi_pktchan_recv_open_i` for the send side.
///
/// # Safety
/// `send_handle`, `request` and `status` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_send_open_i(
    send_handle: *mut mcapi_pktchan_send_hndl_t,
    send_endpoint: mcapi_endpoint_t,
    request: *mut mcapi_request_t,
    status: *mut mcapi_status_t,
) {
    // SAFETY: this function's contract is `open`'s.
    unsafe {
        open(
            send_handle,
            send_endpoint,
            request,
            status,
            Node::pktchan_send_open_i,
        )
    }
}

/// The C buffer of a packet send as a slice: NULL is allowed for an empty packet only.
///
/// # Safety
/// `buffer` is NULL or readable for `size` bytes, and stays so for the returned lifetime.
unsafe fn packet_data<'a>(buffer: *const c_void, size: usize) -> Result<&'a [u8], Status> {
    match (buffer.is_null(), size) {
        (_, 0) => Ok(&[]),
        (true, _) => Err(Status::MCAPI_ERR_PARAMETER),
        // Refused before a slice is made of it (a size such as `(size_t)-1` would be UB).
        (false, n) if n > MCAPI_MAX_PKT_SIZE => Err(Status::MCAPI_ERR_PKT_SIZE),
        // SAFETY: non-NULL and readable for `size` bytes by the contract.
        (false, _) => Ok(unsafe { std::slice::from_raw_parts(buffer.cast::<u8>(), size) }),
    }
}

/// `mcapi_pktchan_send_i` (4.4.4): packets above the inject size go out from `buffer`
/// itself (zero copy) where the provider allows (no `FI_MR_LOCAL`), and the request completes
/// when the provider is done with it; smaller packets, and every packet on providers that
/// need registered memory, are copied into the channel's staging buffers at once and the
/// request completes when the packet is handed to the fabric. `MCAPI_SUCCESS` if it
/// completed already, else `MCAPI_PENDING`. `MCAPI_ERR_MEM_LIMIT` when every staging buffer
/// is queued.
///
/// # Safety
/// `buffer` is NULL (with `size` 0) or readable for `size` bytes and, as 4.4.4 requires,
/// neither modified nor freed until the request completed (or was cancelled); `request` and
/// `status` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_send_i(
    send_handle: mcapi_pktchan_send_hndl_t,
    buffer: *const c_void,
    size: usize,
    request: *mut mcapi_request_t,
    status: *mut mcapi_status_t,
) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    // SAFETY: `request` is NULL or writable per this function's contract.
    let request_out = unsafe { RequestOut::new(request) };
    status.call_i(request_out, || {
        required(request)?;
        if buffer.is_null() && size > 0 {
            return Err(Status::MCAPI_ERR_PARAMETER);
        }
        // SAFETY: by this function's contract (spec 4.4.4) `buffer` is readable for `size`
        // bytes and stays valid and unmodified until the request completes, and mcapi
        // completes a zero-copy send's request only once the provider is done with the
        // memory (its completion was read, or the endpoint was closed, its CQ never read
        // again); a NULL `buffer` comes with size 0.
        let buf = unsafe { SendBuffer::from_raw(buffer.cast::<u8>(), size) };
        let node = current_node()?;
        let handle = node.pktchan_send_i_zero_copy(channel(send_handle), buf)?;
        // SAFETY: non-NULL and writable by the contract.
        unsafe { put(request, handle.as_raw()) };
        // SAFETY: a send request has no receive target.
        unsafe { started(&node, handle) }
    })
}

/// `mcapi_pktchan_send` (4.4.5): blocks while the receiver's pool is full, up to the send
/// endpoint's `MCAPI_ENDP_ATTR_TIMEOUT` at open time, and until the provider is done with
/// `buffer`.
///
/// # Safety
/// `buffer` is NULL or readable for `size` bytes; `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_send(
    send_handle: mcapi_pktchan_send_hndl_t,
    buffer: *const c_void,
    size: usize,
    status: *mut mcapi_status_t,
) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call((), || {
        // SAFETY: per this function's contract; used only during this call.
        let data = unsafe { packet_data(buffer, size)? };
        current_node()?.pktchan_send(channel(send_handle), data)
    })
}

/// `mcapi_pktchan_recv_i` (4.4.6): when the request completes (in the `mcapi_test`,
/// `mcapi_wait` or `mcapi_wait_any` that reports it, or at once with `MCAPI_SUCCESS` when a
/// packet is queued already), `*buffer` gets the packet's address in the receive pool and
/// the completing call the packet's size. `buffer` must stay writable until then.
///
/// # Safety
/// `buffer` is NULL or writable for a pointer until the request completes or is cancelled;
/// `request` and `status` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_recv_i(
    receive_handle: mcapi_pktchan_recv_hndl_t,
    buffer: *mut *mut c_void,
    request: *mut mcapi_request_t,
    status: *mut mcapi_status_t,
) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    // SAFETY: `request` is NULL or writable per this function's contract.
    let request_out = unsafe { RequestOut::new(request) };
    status.call_i(request_out, || {
        required(buffer)?;
        required(request)?;
        let node = current_node()?;
        let handle = node.pktchan_recv_i(channel(receive_handle))?;
        // SAFETY: non-NULL and writable by the contract.
        unsafe { put(request, handle.as_raw()) };
        request::remember_packet_out(&node, handle, buffer);
        // SAFETY: the pointer was just registered under this function's contract.
        unsafe { started(&node, handle) }
    })
}

/// `mcapi_pktchan_recv` (4.4.7): blocks until a packet arrives (up to the receive
/// endpoint's `MCAPI_ENDP_ATTR_TIMEOUT` at open time); `*buffer` is its address in the
/// receive pool (no copy) and `*received_size` its size. Give it back with
/// `mcapi_pktchan_release`.
///
/// # Safety
/// `buffer`, `received_size` and `status` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_recv(
    receive_handle: mcapi_pktchan_recv_hndl_t,
    buffer: *mut *mut c_void,
    received_size: *mut usize,
    status: *mut mcapi_status_t,
) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call((), || {
        required(buffer)?;
        required(received_size)?;
        let packet = current_node()?.pktchan_recv(channel(receive_handle))?;
        // SAFETY: both non-NULL and writable by the contract; the packet stays in the pool
        // (the node tracks it as held) until released by address.
        unsafe {
            buffer.write_unaligned(packet.addr() as *mut c_void);
            put(received_size, packet.len());
        }
        Ok(())
    })
}

/// `mcapi_pktchan_available` (4.4.8): packets that can be received without waiting; 0 on
/// error.
///
/// # Safety
/// `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_available(
    receive_handle: mcapi_pktchan_recv_hndl_t,
    status: *mut mcapi_status_t,
) -> mcapi_uint_t {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call(0, || {
        let n = current_node()?.pktchan_available(channel(receive_handle))?;
        Ok(mcapi_uint_t::try_from(n).unwrap_or(mcapi_uint_t::MAX))
    })
}

/// `mcapi_pktchan_release` (4.4.9): gives a packet from `mcapi_pktchan_recv` or
/// `mcapi_pktchan_recv_i` back, in any order. `MCAPI_ERR_BUF_INVALID` for anything else
/// (NULL, a pointer of the application's own, a packet released already).
///
/// # Safety
/// `status` is NULL or writable. `buffer` is only compared, never dereferenced; once the
/// call succeeded, the caller reads the packet no more (its bytes may be received into).
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_release(buffer: *mut c_void, status: *mut mcapi_status_t) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call((), || {
        let node = current_node()?;
        if buffer.is_null() {
            return Err(Status::MCAPI_ERR_BUF_INVALID);
        }
        // SAFETY: the caller stops reading the packet, per this function's contract.
        unsafe { pktchan_release_at(&node, buffer as usize) }
    })
}

/// [`Node::pktchan_release`] by address, as C releases: what `mcapi_pktchan_release` does
/// on `node`. Rust code holding the [`Packet`](crate::Packet) releases that instead.
///
/// # Errors
/// `MCAPI_ERR_BUF_INVALID` for an address that is not a packet `node` holds.
///
/// # Safety
/// Nothing reads the packet at `addr` after a successful call: its buffer may be posted to
/// the fabric again. In particular no [`Packet`](crate::Packet) for it is read or released
/// afterwards.
pub unsafe fn pktchan_release_at(node: &Node, addr: usize) -> Result<(), Status> {
    node.pktchan_release_addr(addr)
}

/// `mcapi_pktchan_release_test` (4.4.10): `MCA_TRUE` (`MCAPI_SUCCESS`) once the packet at
/// `buffer` was released, `MCA_FALSE` with `MCAPI_PENDING` while the application holds it;
/// `MCAPI_ERR_PARAMETER` for NULL, `MCAPI_ERR_BUF_INVALID` for an address where no packet
/// of the node's receive pools began.
///
/// # Safety
/// `status` is NULL or writable. `buffer` is only compared, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_release_test(
    buffer: *mut c_void,
    status: *mut mcapi_status_t,
) -> mcapi_boolean_t {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call_reporting(MCA_FALSE, || {
        let node = current_node()?;
        required(buffer)?;
        if node.pktchan_release_test(buffer as usize)? {
            Ok((boolean(true), Status::MCAPI_SUCCESS))
        } else {
            Ok((boolean(false), Status::MCAPI_PENDING))
        }
    })
}

/// `mcapi_pktchan_recv_close_i` (4.4.11): packets not yet received are discarded (pending
/// `mcapi_pktchan_recv_i` requests complete with `MCAPI_ERR_REQUEST_CANCELLED`); packets the
/// application holds stay valid until released. Completes when both sides have closed.
///
/// # Safety
/// `request` and `status` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_recv_close_i(
    receive_handle: mcapi_pktchan_recv_hndl_t,
    request: *mut mcapi_request_t,
    status: *mut mcapi_status_t,
) {
    // SAFETY: this function's contract is `close`'s.
    unsafe { close(receive_handle, request, status, Node::pktchan_recv_close_i) }
}

/// `mcapi_pktchan_send_close_i` (4.4.12): packets sent stay to be received. Completes when
/// both sides have closed.
///
/// # Safety
/// `request` and `status` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_send_close_i(
    send_handle: mcapi_pktchan_send_hndl_t,
    request: *mut mcapi_request_t,
    status: *mut mcapi_status_t,
) {
    // SAFETY: this function's contract is `close`'s.
    unsafe { close(send_handle, request, status, Node::pktchan_send_close_i) }
}
