//! What a benchmark pattern needs from the layer under test, and the layers that provide it.
//!
//! A pattern (ping-pong, windowed streaming) talks to exactly one peer through a
//! [`Transport`]: post a message of `len` bytes, poll for the next arrived message, wait for
//! local send completions. The same pattern code runs over every transport, so the numbers
//! of the raw-libfabric baseline ([`raw::RawTransport`]) and of MCAPI (messages, packet
//! channels or scalar channels: [`mcapi::McapiLayer`]) measure the same protocol.
//!
//! The raw transport never blocks: waiting (busy polling, with the occasional look at the
//! bootstrap channel) is the pattern's business, so it adds no thread or sleep to the
//! measured path. The MCAPI transport measures MCAPI as an application uses it, with its
//! blocking calls (and their own way of waiting) under a short endpoint timeout, and says so
//! through [`Transport::waits`].
//!
//! Setting a transport up (opening, exchanging addresses with the peer) is transport
//! specific and lives with each one.

pub mod mcapi;
pub mod raw;

use crate::error::Result;
use std::fmt;

/// Which layer a measurement was taken over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// libfabric directly: tagged messages on an RDM endpoint.
    Raw,
    /// MCAPI (messages, packets or scalars) over libfabric.
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

/// A message transport between this process and one peer, set up (transport specific) and
/// connected, with its buffers allocated.
/// Receive memory that posted receives cycle through, raw's and MCAPI's alike: beyond it
/// raw's posted receives share their bytes (the benchmark does not read payloads), and
/// MCAPI posts fewer receives. The same for both, so neither side's receive buffers stay
/// in the caches while the other's do not (4 MiB: four 1 MiB messages).
pub const RECV_MEMORY_CAP: usize = 4 << 20;

pub trait Transport {
    /// Which layer this is.
    fn kind(&self) -> Kind;

    /// The libfabric provider underneath, as libfabric names it (`tcp;ofi_rxm`).
    fn provider(&self) -> &str;

    /// Whether [`Transport::try_send`] and [`Transport::try_recv`] may wait (up to a short
    /// timeout) before answering "not yet". The pattern then looks at the bootstrap channel
    /// after every such answer instead of every few hundred.
    fn waits(&self) -> bool {
        false
    }

    /// Length of the acknowledgement a streaming receiver returns after each window.
    fn ack_len(&self) -> usize {
        crate::pattern::ACK_LEN
    }

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
