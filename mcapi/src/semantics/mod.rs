//! The MCAPI semantic core: MCAPI 2.000 rules without I/O.
//!
//! In the style of `quinn-proto`, this module holds the state an MCAPI node
//! keeps — status codes, the request table behind `mcapi_test`/`mcapi_wait`/
//! `mcapi_cancel`, per-priority receive queues, sequence reordering and
//! self-validating endpoint identifiers — as plain data structures. It does no
//! I/O, spawns no threads, reads no clock (callers pass time in where needed)
//! and knows nothing of libfabric, so the MCAPI semantics can be read and
//! unit-tested on their own.
//!
//! The transport driver owns these values and drives them: it feeds in fabric
//! completions (`RequestTable::complete`, `SeqReorder::accept`,
//! `PriorityQueues::push`) and answers the application's calls from them.
//! Everything is bounded and preallocated at construction so the data path
//! never allocates, and nothing here is `unsafe`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod channel;
pub mod credit;
pub mod endpoint_id;
pub mod queue;
pub mod request;
pub mod status;
pub mod wire;

pub use endpoint_id::EndpointId;
pub use queue::{PriorityQueues, SeqReorder};
pub use request::{RequestHandle, RequestTable};
pub use status::Status;

/// A 16-bit check value over the low 48 bits of a handle.
///
/// Handles that cross the C boundary carry it so a garbage, zero or
/// foreign value is rejected rather than aliasing a live object. `salt`
/// differs per handle kind, so a request handle is not a valid endpoint id.
/// The mixer is the splitmix64 finalizer: every input bit affects every
/// output bit, so random values pass with probability about 2^-16.
pub(crate) const fn check16(payload: u64, salt: u64) -> u16 {
    let mut x = (payload & 0xFFFF_FFFF_FFFF) ^ salt;
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    (x >> 48) as u16
}

/// Deterministic xorshift64 generator for tests (no external crates).
#[cfg(test)]
pub(crate) struct XorShift(pub u64);

#[cfg(test)]
impl XorShift {
    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}
