//! A safe, RAII layer over libfabric for the MCAPI transport.
//!
//! This crate sits between the raw bindings (`ofi-sys`) and the MCAPI implementation
//! (`mcapi`). It knows libfabric, not MCAPI: reliable-datagram (RDM) endpoints, completion
//! queues, address vectors, registered memory, tagged and multi-receive operations.
//!
//! # Quick start
//! ```no_run
//! use mcapi_ofi::*;
//! let info = Info::first(&Hints::new().provider("shm"))?;
//! let domain = Domain::open_info(&info)?;
//! let cq = CompletionQueue::open(&domain, 0, WaitObject::None)?;
//! let av = AddressVector::open(&domain, 16)?;
//! let ep = Endpoint::open(&domain, &cq, &av, EndpointOptions::default())?;
//! let me = av.insert(ep.address())?;
//! ep.inject_tagged(b"hello", me, 7)?;
//! # Ok::<(), mcapi_ofi::Error>(())
//! ```
//!
//! # Ownership and cleanup
//! Every object is a cheap-to-clone handle over an `Arc`. A child keeps its parents alive
//! (endpoint -> CQ, AV, domain -> fabric), so objects are closed children first no matter in
//! which order the application drops its handles. Memory that an endpoint ever posted an
//! operation on stays allocated until that endpoint is closed.
//!
//! # Thread safety
//! Domains are opened with `FI_THREAD_SAFE`: every handle is `Send + Sync` and operations
//! may be posted and completions read from any thread.
//!
//! # Provider selection
//! [`Hints::provider`] picks a provider by name. libfabric's `FI_PROVIDER` environment
//! variable is honoured as well, but libfabric reads it once per process: to use several
//! providers in one process, name them in the hints.
//!
//! # Unsafe code
//! All of it is in the `raw` module, each block with a `// SAFETY:` comment.

#![deny(missing_docs)]
// Unsafe code is confined to `raw` (the FFI module), where each block states why it holds.
#![deny(unsafe_code)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod av;
pub mod cleanup;
mod cq;
mod ep;
mod error;
mod fabric;
mod info;
mod mr;
#[allow(unsafe_code)]
mod raw;

pub use av::{AddressVector, FiAddr};
pub use cq::{Completion, CompletionError, CompletionQueue, Sleep, WaitObject};
pub use ep::{Endpoint, EndpointOptions, SendWait};
pub use error::{Error, Result};
pub use fabric::{Domain, Fabric};
pub use info::{available_providers, flags, libfabric_version, Attributes, Hints, Info, Progress};
pub use mr::{Buf, MemoryRegion};
pub use raw::SendBuffer;

/// The raw bindings, for what this layer does not cover.
pub use ofi_sys as ffi;
