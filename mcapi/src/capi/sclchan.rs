//! Spec 4.5: scalar channels. A scalar must be received with the width it was sent with;
//! a receive of another width fails with `MCAPI_ERR_GENERAL` (the tables of 4.5 have no
//! better code) and leaves the scalar queued for a receive of the right width.

use super::pktchan::{close, connect, open};
use super::{
    channel, current_node, mcapi_endpoint_t, mcapi_request_t, mcapi_sclchan_recv_hndl_t,
    mcapi_sclchan_send_hndl_t, mcapi_status_t, mcapi_uint_t, StatusOut,
};
use crate::Node;

/// `mcapi_sclchan_connect_i` (4.5.1): as `mcapi_pktchan_connect_i`, for a scalar channel.
///
/// # Safety
/// `request` and `status` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_connect_i(
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
            Node::sclchan_connect_i,
        )
    }
}

/// `mcapi_sclchan_recv_open_i` (4.5.2): `*receive_handle` is written at once and usable
/// once the request completed (both sides open).
///
/// # Safety
/// `receive_handle`, `request` and `status` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_recv_open_i(
    receive_handle: *mut mcapi_sclchan_recv_hndl_t,
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
            Node::sclchan_recv_open_i,
        )
    }
}

/// `mcapi_sclchan_send_open_i` (4.5.3): as `mcapi_sclchan_recv_open_i` for the send side.
///
/// # Safety
/// `send_handle`, `request` and `status` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_send_open_i(
    send_handle: *mut mcapi_sclchan_send_hndl_t,
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
            Node::sclchan_send_open_i,
        )
    }
}

/// Sends the low `width` bytes of `value`.
///
/// # Safety
/// `status` is NULL or writable.
unsafe fn send(handle: mcapi_sclchan_send_hndl_t, value: u64, width: usize, status: *mut u32) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call((), || {
        current_node()?.sclchan_send(channel(handle), value, width)
    })
}

/// Receives a scalar of `width` bytes; 0 on error.
///
/// # Safety
/// `status` is NULL or writable.
unsafe fn recv(handle: mcapi_sclchan_recv_hndl_t, width: usize, status: *mut u32) -> u64 {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call(0, || current_node()?.sclchan_recv(channel(handle), width))
}

/// `mcapi_sclchan_send_uint64` (4.5.4): blocks while the receiver's FIFO is full (up to
/// the send endpoint's `MCAPI_ENDP_ATTR_TIMEOUT` at open time).
///
/// # Safety
/// `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_send_uint64(
    send_handle: mcapi_sclchan_send_hndl_t,
    dataword: u64,
    status: *mut mcapi_status_t,
) {
    // SAFETY: this function's contract is `send`'s.
    unsafe { send(send_handle, dataword, 8, status) }
}

/// `mcapi_sclchan_send_uint32` (4.5.5): as `mcapi_sclchan_send_uint64`, 32 bits.
///
/// # Safety
/// `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_send_uint32(
    send_handle: mcapi_sclchan_send_hndl_t,
    dataword: u32,
    status: *mut mcapi_status_t,
) {
    // SAFETY: this function's contract is `send`'s.
    unsafe { send(send_handle, dataword.into(), 4, status) }
}

/// `mcapi_sclchan_send_uint16` (4.5.6): as `mcapi_sclchan_send_uint64`, 16 bits.
///
/// # Safety
/// `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_send_uint16(
    send_handle: mcapi_sclchan_send_hndl_t,
    dataword: u16,
    status: *mut mcapi_status_t,
) {
    // SAFETY: this function's contract is `send`'s.
    unsafe { send(send_handle, dataword.into(), 2, status) }
}

/// `mcapi_sclchan_send_uint8` (4.5.7): as `mcapi_sclchan_send_uint64`, 8 bits.
///
/// # Safety
/// `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_send_uint8(
    send_handle: mcapi_sclchan_send_hndl_t,
    dataword: u8,
    status: *mut mcapi_status_t,
) {
    // SAFETY: this function's contract is `send`'s.
    unsafe { send(send_handle, dataword.into(), 1, status) }
}

/// `mcapi_sclchan_recv_uint64` (4.5.8): blocks until a scalar arrives (up to the receive
/// endpoint's `MCAPI_ENDP_ATTR_TIMEOUT` at open time); 0 on error.
///
/// # Safety
/// `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_recv_uint64(
    receive_handle: mcapi_sclchan_recv_hndl_t,
    status: *mut mcapi_status_t,
) -> u64 {
    // SAFETY: this function's contract is `recv`'s.
    unsafe { recv(receive_handle, 8, status) }
}

/// `mcapi_sclchan_recv_uint32` (4.5.9): as `mcapi_sclchan_recv_uint64`, 32 bits.
///
/// # Safety
/// `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_recv_uint32(
    receive_handle: mcapi_sclchan_recv_hndl_t,
    status: *mut mcapi_status_t,
) -> u32 {
    // SAFETY: this function's contract is `recv`'s.
    unsafe { recv(receive_handle, 4, status) as u32 }
}

/// `mcapi_sclchan_recv_uint16` (4.5.10): as `mcapi_sclchan_recv_uint64`, 16 bits.
///
/// # Safety
/// `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_recv_uint16(
    receive_handle: mcapi_sclchan_recv_hndl_t,
    status: *mut mcapi_status_t,
) -> u16 {
    // SAFETY: this function's contract is `recv`'s.
    unsafe { recv(receive_handle, 2, status) as u16 }
}

/// `mcapi_sclchan_recv_uint8` (4.5.11): as `mcapi_sclchan_recv_uint64`, 8 bits.
///
/// # Safety
/// `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_recv_uint8(
    receive_handle: mcapi_sclchan_recv_hndl_t,
    status: *mut mcapi_status_t,
) -> u8 {
    // SAFETY: this function's contract is `recv`'s.
    unsafe { recv(receive_handle, 1, status) as u8 }
}

/// `mcapi_sclchan_available` (4.5.12): scalars that can be received without waiting, of
/// the receive handle; 0 on error.
///
/// # Safety
/// `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_available(
    receive_handle: mcapi_sclchan_recv_hndl_t,
    status: *mut mcapi_status_t,
) -> mcapi_uint_t {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call(0, || {
        let n = current_node()?.sclchan_available(channel(receive_handle))?;
        Ok(mcapi_uint_t::try_from(n).unwrap_or(mcapi_uint_t::MAX))
    })
}

/// `mcapi_sclchan_recv_close_i` (4.5.13): scalars not yet received are discarded.
/// Completes when both sides have closed.
///
/// # Safety
/// `request` and `status` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_recv_close_i(
    receive_handle: mcapi_sclchan_recv_hndl_t,
    request: *mut mcapi_request_t,
    status: *mut mcapi_status_t,
) {
    // SAFETY: this function's contract is `close`'s.
    unsafe { close(receive_handle, request, status, Node::sclchan_recv_close_i) }
}

/// `mcapi_sclchan_send_close_i` (4.5.14): scalars sent stay to be received. Completes when
/// both sides have closed.
///
/// # Safety
/// `request` and `status` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_send_close_i(
    send_handle: mcapi_sclchan_send_hndl_t,
    request: *mut mcapi_request_t,
    status: *mut mcapi_status_t,
) {
    // SAFETY: this function's contract is `close`'s.
    unsafe { close(send_handle, request, status, Node::sclchan_send_close_i) }
}
