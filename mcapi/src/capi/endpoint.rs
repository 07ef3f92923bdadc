//! Spec 4.2: endpoints and their attributes.

use super::{
    current_node, endpoint, mcapi_domain_t, mcapi_endpoint_t, mcapi_node_t, mcapi_port_t,
    mcapi_request_t, mcapi_status_t, mcapi_timeout_t, mcapi_uint_t, put, required, started_status,
    timeout, RequestOut, StatusOut, MCAPI_NULL,
};
use crate::attributes::EndpointAttribute;
use crate::semantics::{EndpointId, Status};
use std::ffi::c_void;

/// `mcapi_endpoint_create` (4.2.1): `MCAPI_NULL` on error.
///
/// # Safety
/// `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_endpoint_create(
    port_id: mcapi_port_t,
    status: *mut mcapi_status_t,
) -> mcapi_endpoint_t {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call(MCAPI_NULL, || {
        Ok(current_node()?.endpoint_create(port_id)?.as_raw())
    })
}

/// `mcapi_endpoint_get_i` (4.2.2). The endpoint value follows from the tuple, so
/// `*endpoint` is written at once; the request completes once the endpoint exists.
/// `MCAPI_SUCCESS` if it did at the call already, else `MCAPI_PENDING`.
///
/// # Safety
/// `endpoint`, `request` and `status` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_endpoint_get_i(
    domain_id: mcapi_domain_t,
    node_id: mcapi_node_t,
    port_id: mcapi_port_t,
    endpoint: *mut mcapi_endpoint_t,
    request: *mut mcapi_request_t,
    status: *mut mcapi_status_t,
) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    // SAFETY: `request` is NULL or writable per this function's contract.
    let request_out = unsafe { RequestOut::new(request) };
    status.call_i(request_out, || {
        required(endpoint)?;
        required(request)?;
        let node = current_node()?;
        let handle = node.endpoint_get_i(domain_id, node_id, port_id)?;
        let id = EndpointId::encode(domain_id, node_id, port_id)?;
        // SAFETY: both non-NULL and writable by the contract.
        unsafe {
            put(request, handle.as_raw());
            put(endpoint, id.as_raw());
        }
        // One attempt now, so a known endpoint reports MCAPI_SUCCESS at once.
        Ok(started_status(node.test(handle, None)))
    })
}

/// `mcapi_endpoint_get` (4.2.3): waits up to `timeout` milliseconds for the endpoint to
/// exist; `MCAPI_NULL` on error.
///
/// # Safety
/// `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_endpoint_get(
    domain_id: mcapi_domain_t,
    node_id: mcapi_node_t,
    port_id: mcapi_port_t,
    timeout_ms: mcapi_timeout_t,
    status: *mut mcapi_status_t,
) -> mcapi_endpoint_t {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call(MCAPI_NULL, || {
        let id = current_node()?.endpoint_get(domain_id, node_id, port_id, timeout(timeout_ms))?;
        Ok(id.as_raw())
    })
}

/// `mcapi_endpoint_delete` (4.2.4).
///
/// # Safety
/// `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_endpoint_delete(
    endpoint_value: mcapi_endpoint_t,
    status: *mut mcapi_status_t,
) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call((), || {
        let id = endpoint(endpoint_value)?;
        current_node()?.endpoint_delete(id)
    })
}

/// `mcapi_endpoint_get_attribute` (4.2.5) of a local or remote endpoint. `attribute_size`
/// must be the attribute's C size: `sizeof(size_t)` for `MCAPI_ENDP_ATTR_MAX_PAYLOAD_SIZE`,
/// 4 for the others.
///
/// # Safety
/// `attribute` is NULL or writable for `attribute_size` bytes; `status` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_endpoint_get_attribute(
    endpoint_value: mcapi_endpoint_t,
    attribute_num: mcapi_uint_t,
    attribute: *mut c_void,
    attribute_size: usize,
    status: *mut mcapi_status_t,
) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call((), || {
        required(attribute)?;
        let id = endpoint(endpoint_value)?;
        let which = EndpointAttribute::from_number(attribute_num)?;
        if attribute_size != which.c_size() {
            return Err(Status::MCAPI_ERR_ATTR_SIZE);
        }
        let value = current_node()?.endpoint_get_attribute(id, attribute_num)?;
        if which.c_size() == size_of::<usize>() {
            let value = usize::try_from(value).map_err(|_| Status::MCAPI_ERR_GENERAL)?;
            // SAFETY: non-NULL, writable for `attribute_size` bytes (checked to be this
            // size) by the contract; unaligned because C may point into a byte buffer.
            unsafe { attribute.cast::<usize>().write_unaligned(value) };
        } else {
            let value = u32::try_from(value).map_err(|_| Status::MCAPI_ERR_GENERAL)?;
            // SAFETY: as above, for 4 bytes.
            unsafe { attribute.cast::<u32>().write_unaligned(value) };
        }
        Ok(())
    })
}

/// `mcapi_endpoint_set_attribute` (4.2.6) of a local endpoint: priority and timeout are
/// writable, the others read-only.
///
/// # Safety
/// `attribute` is NULL or readable for `attribute_size` bytes; `status` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_endpoint_set_attribute(
    endpoint_value: mcapi_endpoint_t,
    attribute_num: mcapi_uint_t,
    attribute: *const c_void,
    attribute_size: usize,
    status: *mut mcapi_status_t,
) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call((), || {
        required(attribute)?;
        let id = endpoint(endpoint_value)?;
        let which = EndpointAttribute::from_number(attribute_num)?;
        if attribute_size != which.c_size() {
            return Err(Status::MCAPI_ERR_ATTR_SIZE);
        }
        let value = if which.c_size() == size_of::<usize>() {
            // SAFETY: non-NULL, readable for `attribute_size` bytes (checked to be this
            // size) by the contract; unaligned because C may point into a byte buffer.
            unsafe { attribute.cast::<usize>().read_unaligned() as u64 }
        } else {
            // SAFETY: as above, for 4 bytes.
            u64::from(unsafe { attribute.cast::<u32>().read_unaligned() })
        };
        current_node()?.endpoint_set_attribute(id, attribute_num, value)
    })
}
