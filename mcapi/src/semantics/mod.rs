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
pub mod channel_side;
pub mod credit;
pub mod endpoint_id;
pub mod peer;
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
/// One multiply (checked on every call, so it is kept cheap): bit `i` of the
/// input reaches every product bit above `i`, so each of the 48 payload bits
/// moves the top 16 bits (the check), and random values pass with
/// probability about 2^-16. The multiplier is a spectrally good 64-bit one
/// (Steele and Vigna, 2021).
pub(crate) const fn check16(payload: u64, salt: u64) -> u16 {
    (((payload & 0xFFFF_FFFF_FFFF) ^ salt).wrapping_mul(0xD6E8_FEB8_6659_FD93) >> 48) as u16
}

/// The first generation of a new handle table (24 bits, never 0): a different one for each
/// table this process makes, so a handle kept from before a `finalize` does not name the
/// same slot of the next node's table (which would start where the old one started).
/// Successive tables start 2^24 / golden ratio apart: the first 2^24 tables all differ,
/// and a stale handle aliases only once its slot was reused millions of times.
pub(crate) fn first_generation() -> u32 {
    static TABLES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = TABLES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (n.wrapping_mul(0x9E_3779) & 0xFF_FFFF).max(1)
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
