//! Spec 4.3: connectionless messages.

use super::{
    current_node, endpoint, mcapi_endpoint_t, mcapi_priority_t, mcapi_request_t, mcapi_status_t,
    mcapi_uint_t, put, request, required, started_status, RequestOut, StatusOut,
    MCAPI_MAX_MSG_SIZE,
};
use crate::semantics::Status;
use mcapi_ofi::{RecvBuffer, SendBuffer};
use std::ffi::c_void;

/// The C buffer of a send as a slice: NULL is allowed for an empty message only.
///
/// # Safety
/// `buffer` is NULL or readable for `size` bytes, and stays so for the returned lifetime.
unsafe fn send_data<'a>(buffer: *const c_void, size: usize) -> Result<&'a [u8], Status> {
    match (buffer.is_null(), size) {
        (_, 0) => Ok(&[]),
        (true, _) => Err(Status::MCAPI_ERR_PARAMETER),
        // Refused before a slice is made of it (a size such as `(size_t)-1` would be UB).
        (false, n) if n > MCAPI_MAX_MSG_SIZE => Err(Status::MCAPI_ERR_MSG_SIZE),
        // SAFETY: non-NULL and readable for `size` bytes by the contract.
        (false, _) => Ok(unsafe { std::slice::from_raw_parts(buffer.cast::<u8>(), size) }),
    }
}

/// `mcapi_msg_send_i` (4.3.1): a rendezvous message on shm is read by its receiver
/// straight from `buffer` (`Node::msg_send_i_zero_copy`), the request completing once the
/// receiver is done with it; any other message is copied at once. `MCAPI_SUCCESS` if it
/// is done already, else `MCAPI_PENDING`.
///
/// # Safety
/// `buffer` is NULL or readable for `buffer_size` bytes, and stays valid and unmodified
/// until the request completes (spec 3.5.4); `request` and `status` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_msg_send_i(
    send_endpoint: mcapi_endpoint_t,
    receive_endpoint: mcapi_endpoint_t,
    buffer: *const c_void,
    buffer_size: usize,
    priority: mcapi_priority_t,
    request: *mut mcapi_request_t,
    status: *mut mcapi_status_t,
) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    // SAFETY: `request` is NULL or writable per this function's contract.
    let request_out = unsafe { RequestOut::new(request) };
    status.call_i(request_out, || {
        required(request)?;
        if buffer.is_null() && buffer_size > 0 {
            return Err(Status::MCAPI_ERR_PARAMETER);
        }
        // Refused before a buffer is made of it (a size such as `(size_t)-1` would be UB).
        if buffer_size > MCAPI_MAX_MSG_SIZE {
            return Err(Status::MCAPI_ERR_MSG_SIZE);
        }
        // SAFETY: by this function's contract (spec 3.5.4) `buffer` is readable for
        // `buffer_size` bytes and stays valid and unmodified until the request completes,
        // and mcapi completes a send from it only once its receiver is done reading it (or
        // is gone); a NULL `buffer` comes with size 0.
        let buf = unsafe { SendBuffer::from_raw(buffer.cast::<u8>(), buffer_size) };
        let (from, to) = (endpoint(send_endpoint)?, endpoint(receive_endpoint)?);
        let node = current_node()?;
        let handle = node.msg_send_i_zero_copy(from, to, buf, priority)?;
        // SAFETY: non-NULL and writable by the contract.
        unsafe { put(request, handle.as_raw()) };
        Ok(started_status(node.test(handle, None)))
    })
}

/// `mcapi_msg_send` (4.3.2): blocks while the receiver has no free buffer, up to the send
/// endpoint's `MCAPI_ENDP_ATTR_TIMEOUT`.
///
/// # Safety
/// `buffer` is NULL or readable for `buffer_size` bytes; `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_msg_send(
    send_endpoint: mcapi_endpoint_t,
    receive_endpoint: mcapi_endpoint_t,
    buffer: *const c_void,
    buffer_size: usize,
    priority: mcapi_priority_t,
    status: *mut mcapi_status_t,
) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call((), || {
        // SAFETY: per this function's contract; used only during this call.
        let data = unsafe { send_data(buffer, buffer_size)? };
        let (from, to) = (endpoint(send_endpoint)?, endpoint(receive_endpoint)?);
        current_node()?.msg_send(from, to, data, priority)
    })
}

/// `mcapi_msg_recv_i` (4.3.3): the message is copied into `buffer` when the request
/// completes, i.e. in the `mcapi_test`, `mcapi_wait` or `mcapi_wait_any` that reports it,
/// or at once (`MCAPI_SUCCESS`) if one is queued already. `buffer` must stay valid until
/// then, as for any non-blocking receive.
///
/// # Safety
/// `buffer` is NULL or writable for `buffer_size` bytes until the request completes or is
/// cancelled; `request` and `status` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_msg_recv_i(
    receive_endpoint: mcapi_endpoint_t,
    buffer: *mut c_void,
    buffer_size: usize,
    request: *mut mcapi_request_t,
    status: *mut mcapi_status_t,
) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    // SAFETY: `request` is NULL or writable per this function's contract.
    let request_out = unsafe { RequestOut::new(request) };
    status.call_i(request_out, || {
        required(request)?;
        if buffer.is_null() && buffer_size > 0 {
            return Err(Status::MCAPI_ERR_PARAMETER);
        }
        let node = current_node()?;
        // SAFETY: the contract keeps the buffer writable, and C away from it, until the
        // request completes or is cancelled; the request owns it until then (a read into it
        // ends before the request completes, and none starts once it is cancelled).
        let buf =
            unsafe { RecvBuffer::from_raw(buffer.cast(), buffer_size.min(MCAPI_MAX_MSG_SIZE)) };
        let handle = node.msg_recv_i_into(endpoint(receive_endpoint)?, buf)?;
        // SAFETY: non-NULL and writable by the contract.
        unsafe { put(request, handle.as_raw()) };
        request::remember_message(&node, handle);
        // SAFETY: the buffer was just registered under this function's contract.
        Ok(started_status(unsafe { request::test_now(&node, handle) }))
    })
}

/// `mcapi_msg_recv` (4.3.4): blocks up to the endpoint's `MCAPI_ENDP_ATTR_TIMEOUT`.
///
/// # Safety
/// `buffer` is NULL or writable for `buffer_size` bytes; `received_size` and `status` are
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_msg_recv(
    receive_endpoint: mcapi_endpoint_t,
    buffer: *mut c_void,
    buffer_size: usize,
    received_size: *mut usize,
    status: *mut mcapi_status_t,
) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call((), || {
        required(received_size)?;
        let data: &mut [u8] = match (buffer.is_null(), buffer_size) {
            (_, 0) => &mut [],
            (true, _) => return Err(Status::MCAPI_ERR_PARAMETER),
            // SAFETY: non-NULL and writable for `buffer_size` bytes by the contract (no
            // message is longer than `MCAPI_MAX_MSG_SIZE`: a larger size is cut to it).
            (false, _) => unsafe {
                std::slice::from_raw_parts_mut(
                    buffer.cast::<u8>(),
                    buffer_size.min(MCAPI_MAX_MSG_SIZE),
                )
            },
        };
        let n = current_node()?.msg_recv(endpoint(receive_endpoint)?, data)?;
        // SAFETY: non-NULL and writable by the contract.
        unsafe { put(received_size, n) };
        Ok(())
    })
}

/// `mcapi_msg_available` (4.3.5): messages queued at a local endpoint; `MCAPI_NULL` (0) on
/// error.
///
/// # Safety
/// `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_msg_available(
    receive_endpoint: mcapi_endpoint_t,
    status: *mut mcapi_status_t,
) -> mcapi_uint_t {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call(0, || {
        let n = current_node()?.msg_available(endpoint(receive_endpoint)?)?;
        Ok(mcapi_uint_t::try_from(n).unwrap_or(mcapi_uint_t::MAX))
    })
}
