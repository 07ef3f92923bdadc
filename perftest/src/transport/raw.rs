//! The baseline: libfabric directly, through the `mcapi-ofi` safe layer.
//!
//! Tagged messages on one RDM endpoint with one CQ, polled directly. Messages up to the
//! provider's `inject_size` go out with `fi_tinject` (no completion), larger ones with
//! `fi_tsend` from a registered buffer. Receives are pre-posted into registered memory and
//! re-posted as soon as their completion is read, so `depth` receives are always waiting.

use super::{Kind, Transport};
use crate::error::{Context, Error, Result};
use mcapi_ofi::{
    AddressVector, Completion, CompletionQueue, Domain, Endpoint, EndpointOptions, FiAddr, Hints,
    Info, MemoryRegion, WaitObject,
};
use std::collections::VecDeque;
use std::net::IpAddr;

/// The tag of every benchmark message.
const TAG: u64 = 0x5045_5246; // "PERF"
/// Context of send operations; receive contexts are slot numbers.
const SEND_CONTEXT: u64 = u64::MAX;
/// Smallest receive slot (room for acknowledgements whatever the message size).
const MIN_SLOT: usize = 64;

/// The hints the benchmark opens `provider` with. IP providers bind to `source` (the
/// interface that routes to the peer); without it they would pick the first interface.
pub fn hints(provider: &str, source: Option<IpAddr>) -> Hints {
    // The progress model MCAPI asks for: both layers poll their CQs as they wait.
    let mut h = Hints::new().provider(provider);
    if let Some(progress) = mcapi_ofi::caller_progress(provider) {
        h = h.data_progress(progress);
    }
    match source {
        Some(ip) if needs_source(provider) => h.source(Some(&ip.to_string()), None),
        _ => h,
    }
}

/// Whether the provider addresses peers by IP (everything but shared memory).
pub fn needs_source(provider: &str) -> bool {
    !(provider == "shm" || provider.starts_with("shm;"))
}

/// Whether `provider` is offered at all; `Error::NotRun` lists the ones that are.
pub fn check_available(provider: &str) -> Result<String> {
    let info = Info::first(&Hints::new().provider(provider))?;
    Ok(info.provider().to_owned())
}

pub struct RawTransport {
    ep: Endpoint,
    cq: CompletionQueue,
    av: AddressVector,
    domain: Domain,
    provider: String,
    inject_size: usize,
    max_msg_size: usize,
    peer: FiAddr,
    /// Payload of injected messages.
    inject_data: Vec<u8>,
    /// Source of `fi_tsend` messages (shared by all sends in flight: they only read it).
    send_region: Option<MemoryRegion>,
    recv_region: Option<MemoryRegion>,
    slot_len: usize,
    memory_slots: usize,
    /// Lengths of arrived messages not yet handed out.
    arrived: VecDeque<usize>,
    /// Receive slots whose re-post was refused with -FI_EAGAIN.
    repost: Vec<u64>,
    pending_sends: usize,
    completions: [Completion; 32],
}

impl RawTransport {
    /// Opens fabric, domain, CQ, AV and endpoint for `provider`.
    ///
    /// # Errors
    /// `Error::NotRun` when the provider is absent, otherwise the failing libfabric call.
    pub fn open(provider: &str, source: Option<IpAddr>) -> Result<RawTransport> {
        let info = Info::first(&hints(provider, source))?;
        let what = |step: &str| format!("{step} ({})", info.provider());
        let domain = Domain::open_info(&info).context(what("opening the domain"))?;
        let cq = CompletionQueue::open(&domain, 0, WaitObject::None)
            .context(what("opening the completion queue"))?;
        let av = AddressVector::open(&domain, 4).context(what("opening the address vector"))?;
        let ep = Endpoint::open(&domain, &cq, &av, EndpointOptions::default())
            .context(what("opening the endpoint"))?;
        let attrs = domain.attributes();
        Ok(RawTransport {
            provider: attrs.provider.clone(),
            inject_size: attrs.inject_size,
            max_msg_size: attrs.max_msg_size,
            ep,
            cq,
            av,
            domain,
            peer: FiAddr::UNSPEC,
            inject_data: Vec::new(),
            send_region: None,
            recv_region: None,
            slot_len: 0,
            memory_slots: 0,
            arrived: VecDeque::new(),
            repost: Vec::new(),
            pending_sends: 0,
            completions: [Completion::default(); 32],
        })
    }

    fn post_recv(&self, slot: u64) -> mcapi_ofi::Result<()> {
        let region = self.recv_region.as_ref().expect("prepared");
        let offset = (slot as usize % self.memory_slots) * self.slot_len;
        let buf = region.slice(offset, self.slot_len)?;
        self.ep.recv_tagged(buf, FiAddr::UNSPEC, TAG, 0, slot)
    }

    /// Reads the CQ once: sorts completions into arrived messages and finished sends, re-posts
    /// the receives that completed.
    fn poll_cq(&mut self) -> Result<()> {
        if !self.repost.is_empty() {
            self.retry_reposts()?;
        }
        let n = match self.cq.read(&mut self.completions) {
            Ok(n) => n,
            Err(e) => return Err(Error::failed(format!("{} data path: {e}", self.provider))),
        };
        for i in 0..n {
            let c = self.completions[i];
            if c.context() == SEND_CONTEXT {
                self.pending_sends = self.pending_sends.saturating_sub(1);
            } else {
                self.arrived.push_back(c.len());
                match self.post_recv(c.context()) {
                    Ok(()) => {}
                    Err(e) if e.is_again() => self.repost.push(c.context()),
                    Err(e) => return Err(e).context("re-posting a receive"),
                }
            }
        }
        Ok(())
    }

    fn retry_reposts(&mut self) -> Result<()> {
        while let Some(&slot) = self.repost.last() {
            match self.post_recv(slot) {
                Ok(()) => {
                    self.repost.pop();
                }
                Err(e) if e.is_again() => break,
                Err(e) => return Err(e).context("re-posting a receive"),
            }
        }
        Ok(())
    }

    /// The largest message this side can send or receive.
    pub fn max_msg_size(&self) -> usize {
        self.max_msg_size
    }

    /// The endpoint's fabric address, for the peer.
    pub fn address(&self) -> Vec<u8> {
        self.ep.address().to_vec()
    }

    /// Makes the peer (its [`RawTransport::address`]) the destination of sends.
    pub fn connect(&mut self, peer: &[u8]) -> Result<()> {
        self.peer = self
            .av
            .insert(peer)
            .context("inserting the peer's address into the address vector")?;
        Ok(())
    }

    /// Allocates buffers for messages up to `max_len` bytes and keeps `depth` receives
    /// posted from now on: the peer may have up to `depth` messages in flight towards us.
    pub fn prepare(&mut self, max_len: usize, depth: usize) -> Result<()> {
        let rx_size = self.domain.attributes().rx_size;
        if rx_size > 0 && depth > rx_size {
            return Err(Error::failed(format!(
                "{} receives needed in flight, but {} posts at most {rx_size} (use a smaller -W)",
                depth, self.provider
            )));
        }
        let pattern: Vec<u8> = (0..max_len.max(self.inject_size))
            .map(|i| (i % 251) as u8)
            .collect();
        self.inject_data = pattern[..self.inject_size].to_vec();
        if max_len > self.inject_size {
            let region =
                MemoryRegion::new(&self.domain, max_len).context("registering the send buffer")?;
            region
                .write(0, &pattern[..max_len])
                .context("filling the send buffer")?;
            self.send_region = Some(region);
        }
        self.slot_len = max_len.max(MIN_SLOT);
        self.memory_slots = depth.clamp(1, (super::RECV_MEMORY_CAP / self.slot_len).max(1));
        // A sink: the payloads are never looked at, so more receives than there are
        // memory slots may share them.
        self.recv_region = Some(
            MemoryRegion::sink(&self.domain, self.slot_len * self.memory_slots)
                .context("registering the receive buffers")?,
        );
        for slot in 0..depth as u64 {
            // Nothing has been sent to us yet, so the receive queue can only be full if the
            // provider's rx_size was too small, which is checked above.
            self.post_recv(slot).context("posting a receive")?;
        }
        Ok(())
    }
}

impl Transport for RawTransport {
    fn kind(&self) -> Kind {
        Kind::Raw
    }

    fn provider(&self) -> &str {
        &self.provider
    }

    #[inline]
    fn try_send(&mut self, len: usize) -> Result<bool> {
        let r = if len <= self.inject_size {
            self.ep
                .inject_tagged(&self.inject_data[..len], self.peer, TAG)
        } else {
            let region = self.send_region.as_ref().expect("prepared for this size");
            let buf = region.slice(0, len).context("send buffer")?;
            let r = self.ep.send_tagged(buf, self.peer, TAG, SEND_CONTEXT);
            if r.is_ok() {
                self.pending_sends += 1;
            }
            r
        };
        match r {
            Ok(()) => Ok(true),
            Err(e) if e.is_again() => {
                // The provider wants progress before it takes more (and shm answers -FI_EAGAIN
                // to a first message until the peer has read its CQ).
                self.poll_cq()?;
                Ok(false)
            }
            Err(e) => Err(Error::failed(format!(
                "sending {len} bytes over {}: {e}",
                self.provider
            ))),
        }
    }

    #[inline]
    fn try_recv(&mut self) -> Result<Option<usize>> {
        if self.arrived.is_empty() {
            self.poll_cq()?;
        }
        Ok(self.arrived.pop_front())
    }

    fn pending_sends(&self) -> usize {
        self.pending_sends
    }

    fn progress(&mut self) -> Result<()> {
        self.poll_cq()
    }
}
