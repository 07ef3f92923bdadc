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
//! operation on stays allocated until that endpoint's CQ is closed (after the endpoint: the
//! provider may use it until then, and completions name it), or, on shm, where a closed
//! endpoint lingers open ([`Endpoint`]), until its CQ retires (no endpoint of it open: it
//! reads nothing more, so nothing touches the memory again).
//!
//! # Posted memory and safe code
//! The provider writes a posted receive buffer, and reads a send buffer, while safe code
//! holds `&MemoryRegion` and could copy in or out of it: in this layer that is not a data
//! race the type system allows, it is refused. A [`MemoryRegion`] is cut into slots (one for
//! [`MemoryRegion::new`], `count` for [`MemoryRegion::with_slots`]); every operation lies in
//! one slot, whose atomic state the post sets and the completion that ends the operation
//! clears, as [`CompletionQueue::read`] hands it out:
//! - a receive posted into a slot: [`MemoryRegion::read`], [`MemoryRegion::read_le`] and
//!   [`MemoryRegion::write`] of it fail with [`Error::InUse`] until its completion (an error
//!   completion too, e.g. `FI_ECANCELED` after [`Endpoint::cancel`]);
//! - a multi-receive buffer: reads succeed for exactly the bytes its completions reported
//!   (one bit per byte), writes fail, until the completion flagged `FI_MULTI_RECV`;
//! - sends (and RMA writes) in flight from a slot: reads succeed, writes and receives fail;
//!   sends in flight from one slot share one context;
//! - a read or write holds its slot during the copy, so a post from another thread is
//!   refused meanwhile instead of racing it.
//!
//! This takes no lock and allocates nothing per operation: a compare-and-swap or add on the
//! post, one on the completion, two per copy. For it, the context the provider sees is the
//! address of the slot's record (the caller's context is kept there and put back into the
//! completion): every operation on an endpoint must go through [`Endpoint`], not through
//! [`ffi`]. [`MemoryRegion::sink`] makes memory that safe code can never copy, which any
//! number of receives may share (e.g. a benchmark's).
//!
//! Rust's own memory posted for a send ([`SendBuffer`]) or an RMA read ([`RecvBuffer`]) is
//! the other way in: `unsafe` to make from a pointer, with a stated contract, or safe from
//! `'static` memory (nobody writes a send's; nobody else ever reaches a read's).
//!
//! # Peers' addresses and memory
//! An [`FiAddr`] comes only from [`AddressVector::insert`], and every operation checks
//! that its address is of the endpoint's vector and still there: providers index their
//! tables with it unchecked. No region is open to peers' writes; only one made by
//! [`MemoryRegion::readable_remotely`] is open to their reads, under a random key (tcp and
//! sockets address memory by key and offset, and tcp;ofi_rxm serves a read whatever the
//! access flags). A peer told the key reads what the region holds at the time: write it
//! before telling the key, and not while a peer may read it.
//!
//! # Thread safety
//! Domains are opened with `FI_THREAD_SAFE`: every handle is `Send + Sync` and operations
//! may be posted and completions read from any thread. Reads of one CQ take turns (a flag
//! held until the completions read are finished), so what one thread reads is handed out
//! before another reads the next.
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
pub use ep::{Endpoint, EndpointOptions, KeptMemory, SendWait};
pub use error::{Error, Result};
pub use fabric::{Domain, Fabric};
pub use info::{
    available_providers, caller_progress, flags, libfabric_version, Attributes, Hints, Info,
    Progress,
};
pub use mr::{Buf, MemoryRegion};
pub use raw::{ExposedBuffer, RecvBuffer, SendBuffer, READS_IN_FLIGHT};

/// The raw bindings, for what this layer does not cover.
pub use ofi_sys as ffi;
