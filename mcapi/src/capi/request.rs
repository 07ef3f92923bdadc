//! Spec 4.6: `mcapi_test`, `mcapi_wait`, `mcapi_wait_any`, `mcapi_cancel`, and the receive
//! buffers of pending `mcapi_msg_recv_i` requests.
//!
//! The Rust API takes a receive request's message when the request is tested or waited on,
//! into the buffer given then. C gives the buffer to `mcapi_msg_recv_i` instead, so this
//! module remembers it per request and hands it to whichever call completes the request.
//! A `wait`/`wait_any` checks the buffer out while it blocks (a concurrent `test` then
//! reports the request pending, a second waiter gets `MCAPI_ERR_WAIT_PENDING`), so the
//! buffer is never used by two calls at once.

use super::{
    boolean, current_node, mcapi_boolean_t, mcapi_request_t, mcapi_status_t, mcapi_timeout_t,
    mcapi_uint_t, put, required, timeout, StatusOut, MCAPI_RETURN_VALUE_INVALID, MCA_FALSE,
};
use crate::semantics::Status;
use crate::{Node, RequestHandle};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

/// A receive request's buffer, as C gave it to `mcapi_msg_recv_i`.
struct RecvBuffer {
    address: usize,
    len: usize,
    /// A `wait` or `wait_any` has it checked out.
    checked_out: bool,
}

impl RecvBuffer {
    /// The buffer as a slice.
    ///
    /// # Safety
    /// The C caller of `mcapi_msg_recv_i` keeps the buffer writable until the request
    /// completes or is cancelled, and nothing else uses this slice meanwhile (the checkout
    /// or the registry lock guarantees that).
    unsafe fn slice<'a>(&self) -> &'a mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: non-NULL (`mcapi_msg_recv_i` refuses NULL with a size) and writable for
        // `len` bytes by the contract above.
        unsafe { std::slice::from_raw_parts_mut(self.address as *mut u8, self.len) }
    }
}

/// Requests are per node, so a key is `(domain, node, request)`.
type Key = (u32, u32, u64);

fn key(node: &Node, request: RequestHandle) -> Key {
    (node.domain_id(), node.node_id(), request.as_raw())
}

/// Buffers of receive requests not yet reported complete.
fn buffers() -> MutexGuard<'static, BTreeMap<Key, RecvBuffer>> {
    static BUFFERS: Mutex<BTreeMap<Key, RecvBuffer>> = Mutex::new(BTreeMap::new());
    BUFFERS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Remembers where receive request `request` puts its message.
pub(super) fn remember_buffer(node: &Node, request: RequestHandle, buffer: *mut u8, len: usize) {
    let entry = RecvBuffer {
        address: buffer as usize,
        len,
        checked_out: false,
    };
    buffers().insert(key(node, request), entry);
}

/// Forgets the buffers of a finalized node's requests.
pub(super) fn forget_node(domain: u32, node: u32) {
    buffers().retain(|&(d, n, _), _| (d, n) != (domain, node));
}

/// `Node::test` with the request's receive buffer, if it has one.
///
/// # Safety
/// Any buffer registered for `request` is still writable (the `mcapi_msg_recv_i` contract).
pub(super) unsafe fn test_now(
    node: &Node,
    request: RequestHandle,
) -> Result<Option<usize>, Status> {
    let key = key(node, request);
    let mut table = buffers();
    let Some(entry) = table.get(&key) else {
        drop(table);
        return node.test(request, None);
    };
    if entry.checked_out {
        // A waiter is completing it: still pending as far as this call can tell.
        return Ok(None);
    }
    // SAFETY: per this function's contract; the registry lock, held until the end, keeps
    // every other call away from this buffer.
    let result = node.test(request, Some(unsafe { entry.slice() }));
    if !matches!(result, Ok(None)) {
        table.remove(&key);
    }
    result
}

/// Checks out the buffers of `requests` (those that have one) for a wait.
///
/// # Errors
/// `MCAPI_ERR_WAIT_PENDING` if another wait holds one of them; nothing is checked out then.
fn check_out(keys: &[Key]) -> Result<Vec<Option<(usize, usize)>>, Status> {
    let mut table = buffers();
    if keys
        .iter()
        .any(|k| table.get(k).is_some_and(|b| b.checked_out))
    {
        return Err(Status::MCAPI_ERR_WAIT_PENDING);
    }
    Ok(keys
        .iter()
        .map(|k| {
            table.get_mut(k).map(|b| {
                b.checked_out = true;
                (b.address, b.len)
            })
        })
        .collect())
}

/// Gives checked-out buffers back: `finished` ones are forgotten, the others can be used
/// by the next test or wait.
fn check_in(keys: &[Key], finished: impl Fn(usize) -> bool) {
    let mut table = buffers();
    for (i, k) in keys.iter().enumerate() {
        if finished(i) {
            table.remove(k);
        } else if let Some(b) = table.get_mut(k) {
            b.checked_out = false;
        }
    }
}

/// A checked-out buffer as a slice.
///
/// # Safety
/// As [`RecvBuffer::slice`]; the checkout keeps other calls away.
unsafe fn checked_out_slice<'a>(buffer: Option<(usize, usize)>) -> Option<&'a mut [u8]> {
    buffer.map(|(address, len)| {
        let entry = RecvBuffer {
            address,
            len,
            checked_out: true,
        };
        // SAFETY: per this function's contract.
        unsafe { entry.slice() }
    })
}

/// Whether a wait's error leaves the request pending (so its buffer stays registered).
fn still_pending(error: Status) -> bool {
    matches!(
        error,
        Status::MCAPI_TIMEOUT | Status::MCAPI_ERR_WAIT_PENDING
    )
}

/// `mcapi_test` (4.6.1): `MCA_TRUE` and `*size` once the request completed (a receive's
/// message is then in its buffer); `MCA_FALSE` with `MCAPI_PENDING` before. The request
/// stays valid until waited on or cancelled.
///
/// # Safety
/// `request` is NULL or readable; `size` and `status` are NULL or writable; a receive
/// request's buffer is still writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_test(
    request: *mut mcapi_request_t,
    size: *mut usize,
    status: *mut mcapi_status_t,
) -> mcapi_boolean_t {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call_reporting(MCA_FALSE, || {
        required(size)?;
        // SAFETY: NULL or readable by the contract.
        let handle = RequestHandle::from_raw(
            *unsafe { request.as_ref() }.ok_or(Status::MCAPI_ERR_PARAMETER)?,
        );
        let node = current_node()?;
        // SAFETY: receive buffers per this function's contract.
        match unsafe { test_now(&node, handle) }? {
            Some(n) => {
                // SAFETY: non-NULL and writable by the contract.
                unsafe { put(size, n) };
                Ok((boolean(true), Status::MCAPI_SUCCESS))
            }
            None => Ok((boolean(false), Status::MCAPI_PENDING)),
        }
    })
}

/// `mcapi_wait` (4.6.2): blocks until the request completes (it is released then), is
/// cancelled, or `timeout` milliseconds pass (`MCAPI_TIMEOUT`; the request stays valid).
///
/// # Safety
/// `request` is NULL or readable; `size` and `status` are NULL or writable; a receive
/// request's buffer is still writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_wait(
    request: *mut mcapi_request_t,
    size: *mut usize,
    timeout_ms: mcapi_timeout_t,
    status: *mut mcapi_status_t,
) -> mcapi_boolean_t {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call(MCA_FALSE, || {
        required(size)?;
        // SAFETY: NULL or readable by the contract.
        let handle = RequestHandle::from_raw(
            *unsafe { request.as_ref() }.ok_or(Status::MCAPI_ERR_PARAMETER)?,
        );
        let node = current_node()?;
        let keys = [key(&node, handle)];
        let buffer = check_out(&keys)?.pop().flatten();
        // SAFETY: checked out, and writable per this function's contract.
        let result = node.wait(
            handle,
            unsafe { checked_out_slice(buffer) },
            timeout(timeout_ms),
        );
        check_in(&keys, |_| !matches!(result, Err(e) if still_pending(e)));
        // SAFETY: non-NULL and writable by the contract.
        unsafe { put(size, result?) };
        Ok(boolean(true))
    })
}

/// `mcapi_wait_any` (4.6.3): `requests` is an array of `number` pointers to requests (as
/// the MCA headers declare it, not the synopsis' `mcapi_request_t*`). Returns the index of
/// the request that finished (released now) with its size, or `MCAPI_RETURN_VALUE_INVALID`
/// with the error, which is the finished operation's own error when one finished with one.
///
/// # Safety
/// `requests` is NULL or readable for `number` pointers, each NULL or readable; `size` and
/// `status` are NULL or writable; receive requests' buffers are still writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_wait_any(
    number: usize,
    requests: *mut *mut mcapi_request_t,
    size: *mut usize,
    timeout_ms: mcapi_timeout_t,
    status: *mut mcapi_status_t,
) -> mcapi_uint_t {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call(MCAPI_RETURN_VALUE_INVALID, || {
        required(size)?;
        required(requests)?;
        if number == 0 || number >= MCAPI_RETURN_VALUE_INVALID as usize {
            return Err(Status::MCAPI_ERR_PARAMETER);
        }
        // SAFETY: non-NULL and readable for `number` pointers by the contract.
        let pointers = unsafe { std::slice::from_raw_parts(requests, number) };
        let handles = pointers
            .iter()
            // SAFETY: each pointer is NULL or readable by the contract.
            .map(|&p| unsafe { p.as_ref() }.map(|&raw| RequestHandle::from_raw(raw)))
            .collect::<Option<Vec<_>>>()
            .ok_or(Status::MCAPI_ERR_PARAMETER)?;
        let node = current_node()?;
        let keys: Vec<Key> = handles.iter().map(|&h| key(&node, h)).collect();
        let checked_out = check_out(&keys)?;
        let mut slices: Vec<Option<&mut [u8]>> = checked_out
            .into_iter()
            // SAFETY: checked out, and writable per this function's contract.
            .map(|b| unsafe { checked_out_slice(b) })
            .collect();
        let result = node.wait_any_into(&handles, &mut slices, timeout(timeout_ms));
        let finished = match &result {
            Ok((index, _)) => Some(*index),
            Err(_) => None,
        };
        check_in(&keys, |i| Some(i) == finished);
        let (index, outcome) = result?;
        // SAFETY: non-NULL and writable by the contract.
        unsafe { put(size, outcome?) };
        Ok(index as mcapi_uint_t)
    })
}

/// `mcapi_cancel` (4.6.4): a cancelled receive takes no message and forgets its buffer.
///
/// # Safety
/// `request` is NULL or readable; `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_cancel(request: *mut mcapi_request_t, status: *mut mcapi_status_t) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call((), || {
        // SAFETY: NULL or readable by the contract.
        let handle = RequestHandle::from_raw(
            *unsafe { request.as_ref() }.ok_or(Status::MCAPI_ERR_PARAMETER)?,
        );
        let node = current_node()?;
        node.cancel(handle)?;
        // A waiter holding the buffer learns of the cancel and forgets it itself.
        let key = key(&node, handle);
        let mut table = buffers();
        if table.get(&key).is_some_and(|b| !b.checked_out) {
            table.remove(&key);
        }
        Ok(())
    })
}
