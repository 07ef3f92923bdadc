//! Spec 4.7: support functions.

use super::{current_node, mcapi_status_t};
use crate::semantics::status::display_status;
use catch_unwind_free::name_into;
use std::ffi::{c_char, c_int, c_void};
use std::panic::catch_unwind;

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
    // SAFETY: non-NULL and writable for `size` bytes by the contract (only the start is
    // written: a name and its NUL).
    let out = unsafe { std::slice::from_raw_parts_mut(status_message.cast::<u8>(), size.min(256)) };
    name_into(name, out);
    status_message
}

/// `mcapi_set_debug_level` (an extension: the MCA reference implementation's debug switch,
/// which its test programs call before anything else): this library's diagnostics on stderr
/// from then on, 0 off, 1 errors, 2 warnings, 3 info, 4 debug, 5 and more everything (as
/// `MCAPI_LOG` sets them; when `MCAPI_LOG` is set it wins and this changes nothing).
/// Diagnostics sit on error paths only, so a high level costs nothing while calls succeed.
#[no_mangle]
pub extern "C" fn mcapi_set_debug_level(level: c_int) {
    let _ = catch_unwind(|| crate::diagnostics::set_debug_level(level));
}

/// `mca_set_debug_level`: the reference implementation's name of the same switch in
/// `mca.h`; as [`mcapi_set_debug_level`].
#[no_mangle]
pub extern "C" fn mca_set_debug_level(level: c_int) {
    mcapi_set_debug_level(level);
}

/// `mcapi_display_state` (an extension of the reference implementation, a debugging aid):
/// prints the calling thread's node to stderr (its ids and mode, each endpoint's queued
/// messages and pending receives, the requests in use), or that there is none. `handle` is
/// accepted for the reference's signature and not read.
#[no_mangle]
pub extern "C" fn mcapi_display_state(handle: *mut c_void) {
    let _ = handle;
    let _ = catch_unwind(|| {
        let text = current_node()
            .and_then(|node| node.describe())
            .unwrap_or_else(|_| "mcapi: no node initialized in this thread".to_owned());
        eprintln!("{text}");
    });
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
