//! Packet and scalar channels (spec 4.4, 4.5) over dedicated fabric endpoints.
//!
//! Each open side of a packet channel owns one RDM endpoint and CQ of its own (multi-receive
//! is untagged-only in libfabric 1.17, so a receive pool needs an endpoint that carries
//! nothing else); scalar sides share the node's scalar hub (`hub`), which keeps a
//! scalar ping-pong between two nodes on one connection (except on shm, which has no
//! connections: they have endpoints of their own there). The channel data path never takes
//! the node's state lock:
//!
//! - the receive side posts its pool, `NUM_RECV_BUFFERS` buffers: on shm each a plain
//!   receive of one max-size packet, elsewhere `max payload + pool_slack` bytes posted as an
//!   `FI_MULTI_RECV` receive that small packets share; `pktchan_recv` hands out a pointer
//!   into the pool, and a buffer is posted again once the provider has released it and every
//!   packet in it has been released by the application ([`PoolBuffers`]; on shm by the next
//!   `pktchan_recv`, or while the side is idle, or before credits go back: [`RepostList`]);
//! - (scalars on the hub: its shared pool; a scalar is copied out on arrival, and a receive
//!   side takes `NUM_RECV_BUFFERS` of them before its sender waits for credits);
//! - the sender holds one credit per pool buffer ([`SendCredits`]): a held packet pins at most
//!   one buffer, so with as many buffers as credits some buffer always has room for a packet
//!   that was sent with a credit, however the application releases (no pinning stall);
//! - the receiver returns credits when packets are released (scalars: received), in batches
//!   of a quarter pool (scalars on the hub: once the sender is down to a quarter of its credits,
//!   all that is unreported), and the rest as soon as every credit is back at the receiver
//!   ([`CreditReturn`]), as 8-byte messages into receives the sender keeps posted (scalar
//!   senders: through the hub);
//! - every packet and scalar carries its sequence number as remote CQ data, so FIFO order
//!   holds on providers whose completion order is not delivery order; a scalar's width is its
//!   length.
//!
//! Connect, open and close run on the control plane (`Frame::Channel`), between the nodes
//! owning the two endpoints; a third node may make the connect.
//!
//! Modules, each importing only those listed before it. The data layer: `limits` (shared
//! constants), `handle` (public handles), `endpoint` (an endpoint's channel state), `req`
//! (what a channel request waits for), `hub` (the scalar hub), `outbox`, `data` (a side's
//! memory), `side_io` (its fabric part), `side`, `local` (same-node channels: no fabric),
//! `table` (the node's sides). Node `state` and `inner` hold its types; the operations,
//! `impl Node` and `impl NodeInner` blocks over both: `lookup` (finding a side), `waiting`
//! (blocked calls), `drive` (channel requests' progress), `control` (channel frames),
//! `open`, `connect`, `close`, `send`, `recv`, `scalar`, `cancel`.
//!
//! [`CreditReturn`]: crate::semantics::channel::CreditReturn

mod cancel;
mod close;
mod connect;
mod control;
mod data;
mod drive;
mod endpoint;
mod handle;
mod hub;
#[cfg(test)]
mod lifecycle_tests;
mod limits;
mod local;
mod lookup;
mod open;
mod outbox;
mod recv;
mod req;
mod scalar;
#[cfg(test)]
mod security_tests;
mod send;
mod side;
mod side_io;
mod table;
mod waiting;

pub use handle::{ChannelHandle, Packet, ReceiveMemory};
pub use limits::MAX_PKT_SIZE;

pub(in crate::node) use endpoint::EndpointChannel;
pub(in crate::node) use req::ChanReq;
pub(in crate::node) use table::{ChannelTable, SideSet};
