//! What a benchmark pattern needs from the layer under test, and the layers that provide it.
//!
//! A pattern (ping-pong, windowed streaming) talks to exactly one peer through a
//! [`Transport`]: post a message of `len` bytes, poll for the next arrived message, wait for
//! local send completions. The same pattern code runs over every transport, so the numbers
//! of the raw-libfabric baseline ([`raw::RawTransport`]) and of MCAPI (to come: a transport
//! over `mcapi` message endpoints) measure the same protocol.
//!
//! All methods are non-blocking; waiting (busy polling, with the occasional look at the
//! bootstrap channel) is the pattern's business, so no transport adds a thread or a sleep to
//! the measured path.

pub mod raw;

use crate::error::Result;
use std::fmt;

/// Which layer a measurement was taken over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// libfabric directly: tagged messages on an RDM endpoint.
    Raw,
    /// MCAPI messages over libfabric (not yet implemented).
    Mcapi,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Raw => "raw",
            Kind::Mcapi => "mcapi",
        }
    }

    pub fn from_name(s: &str) -> Option<Kind> {
        [Kind::Raw, Kind::Mcapi].into_iter().find(|k| k.name() == s)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A message transport between this process and one peer.
///
/// Lifecycle: open (transport specific), exchange [`Transport::address`] with the peer over the
/// bootstrap channel, [`Transport::connect`], [`Transport::prepare`] once, then any number of
/// sends and receives.
pub trait Transport {
    /// Which layer this is.
    fn kind(&self) -> Kind;

    /// The libfabric provider underneath, as libfabric names it (`tcp;ofi_rxm`).
    fn provider(&self) -> &str;

    /// The largest message this side can send or receive.
    fn max_msg_size(&self) -> usize;

    /// An opaque blob the peer needs to reach this side.
    fn address(&self) -> Vec<u8>;

    /// Makes the peer (its [`Transport::address`]) the destination of sends.
    fn connect(&mut self, peer: &[u8]) -> Result<()>;

    /// Allocates buffers for messages up to `max_len` bytes and keeps `depth` receives posted
    /// from now on: the peer may have up to `depth` messages in flight towards this side.
    fn prepare(&mut self, max_len: usize, depth: usize) -> Result<()>;

    /// Posts a message of `len` bytes to the peer. `Ok(false)`: no room right now (the
    /// transport has progressed; call again).
    fn try_send(&mut self, len: usize) -> Result<bool>;

    /// The length of the next message that has arrived, if any (progresses the transport).
    fn try_recv(&mut self) -> Result<Option<usize>>;

    /// Sends posted whose local completion has not been seen yet.
    fn pending_sends(&self) -> usize;

    /// Progresses the transport without waiting (reads completions).
    fn progress(&mut self) -> Result<()>;
}
