//! Atomics of the node's lock-free protocols: std's, or loom's when the crate is built for
//! the model checker (`--cfg mcapi_loom`, scripts/loom), so the same code is what loom
//! explores.

#[cfg(not(mcapi_loom))]
pub(crate) use std::sync::atomic;

#[cfg(mcapi_loom)]
pub(crate) use loom::sync::atomic;
