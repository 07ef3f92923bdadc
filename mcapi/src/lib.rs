//! MCAPI 2.000 (the Multicore Communications API) over libfabric.
//!
//! This crate sits on top of the safe fabric layer (`mcapi-ofi`) and gives applications
//! MCAPI's nodes, endpoints, messages, packet and scalar channels and requests, in Rust
//! ([`Node`]) and through a C ABI ([`capi`], `mcapi/include/mcapi.h`). The MCAPI rules
//! themselves (status codes, request table, priority queues, endpoint identifiers, credits)
//! live in [`semantics`], a deterministic core without I/O that the node's driver moves
//! over libfabric.
//!
//! # Quick start
//!
//! Two nodes in one process (they could be two processes, or two hosts with
//! `MCAPI_TOPOLOGY`; see [`config`]):
//!
//! ```
//! use mcapi::{config::Config, semantics::endpoint_id::PORT_ANY, Node};
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cfg = Config::from_env()?;                // MCAPI_* environment variables, else defaults
//! let a = Node::initialize(0, 1, cfg.clone())?; // two nodes in one process here
//! let b = Node::initialize(0, 2, cfg)?;
//! let rx = b.endpoint_create(7)?;
//! let tx = a.endpoint_create(PORT_ANY)?;
//! let to = a.endpoint_get(0, 2, 7, Some(Duration::from_secs(5)))?;
//! a.msg_send(tx, to, b"hello", 0)?; // priority 0 is the highest
//! let mut buf = [0u8; 64];
//! let n = b.msg_recv(rx, &mut buf)?;
//! assert_eq!(&buf[..n], b"hello");
//! # a.finalize()?;
//! # b.finalize()?;
//! # Ok(())
//! # }
//! ```
//!
//! What the specification leaves to the implementation is in
//! `docs/implementation-defined.md`, the transport's design in `docs/design.md`.

// Unsafe code is confined to the C ABI (`capi`), where C hands us raw pointers.
#![deny(unsafe_code)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod attributes;
#[allow(unsafe_code)]
pub mod capi;
pub mod config;
mod control;
mod diagnostics;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod launcher;
mod node;
pub mod semantics;
mod sync;

pub use mcapi_ofi::{RecvBuffer, SendBuffer};
pub use node::{
    ChannelHandle, Node, Packet, ReceiveMemory, MAX_ENDPOINTS, MAX_MSG_SIZE, MAX_PKT_SIZE,
    NUM_PRIORITIES,
};
pub use semantics::request::RequestHandle;
pub use semantics::{EndpointId, Status};
