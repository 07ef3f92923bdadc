//! Spec 4.7: support functions.

use super::mcapi_status_t;
use crate::semantics::status::display_status;
use catch_unwind_free::name_into;
use std::ffi::c_char;

/// `mcapi_display_status` (4.7.1): writes the code's name (e.g. `"MCAPI_ERR_ENDP_INVALID"`,
/// cut to `size - 1` characters if the buffer is shorter) and a NUL into `status_message`
/// and returns `status_message`; NULL for a code that is no status, a NULL buffer or a
/// size of 0, leaving the buffer untouched.
///
/// # Safety
/// `status_message` is NULL or writable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcapi_display_status(
    status: mcapi_status_t,
    status_message: *mut c_char,
    size: usize,
) -> *mut c_char {
    let Some(name) = display_status(status) else {
        return std::ptr::null_mut();
    };
    if status_message.is_null() || size == 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: non-NULL and writable for `size` bytes by the contract.
    let out = unsafe { std::slice::from_raw_parts_mut(status_message.cast::<u8>(), size) };
    name_into(name, out);
    status_message
}

/// Copying a name cannot panic (no allocation, indices checked), so this function needs no
/// `catch_unwind`; it is kept apart to make that easy to see.
mod catch_unwind_free {
    /// Copies `name` into `out` as a NUL-terminated string, cut to fit.
    pub(super) fn name_into(name: &str, out: &mut [u8]) {
        let n = name.len().min(out.len().saturating_sub(1));
        out[..n].copy_from_slice(&name.as_bytes()[..n]);
        if let Some(end) = out.get_mut(n) {
            *end = 0;
        }
    }
}
