//! MCAPI 2.000 (the Multicore Communications API) over libfabric.
//!
//! This crate sits on top of the safe fabric layer (`mcapi-ofi`) and gives applications
//! MCAPI's nodes, endpoints, messages, channels and requests, in Rust and (later) through a
//! C ABI. The MCAPI rules themselves (status codes, request table, priority queues, endpoint
//! identifiers) live in [`semantics`], a deterministic core without I/O that the transport
//! drives.
//!
//! Status: the semantic core is in place; the node, endpoint and message API over the
//! transport is the subject of the messaging issue.

pub mod attributes;
pub mod capi;
pub mod config;
mod control;
mod node;
pub mod semantics;

pub use mcapi_ofi::SendBuffer;
pub use node::{ChannelHandle, Node, Packet, MAX_MSG_SIZE, MAX_PKT_SIZE, NUM_PRIORITIES};
pub use semantics::request::RequestHandle;
pub use semantics::{EndpointId, Status};
