//! Provider discovery: hints in, negotiated attributes out.

use crate::error::{Error, Result};
use crate::raw::{self, InfoBox};
use ofi_sys as sys;
use std::sync::Arc;

/// Capability and order bits, as `u64` (libfabric's header types vary).
pub mod flags {
    use ofi_sys as sys;
    /// Tagged messages (`fi_tsend` family).
    pub const TAGGED: u64 = sys::FI_TAGGED as u64;
    /// Untagged messages (`fi_send` family).
    pub const MSG: u64 = sys::FI_MSG as u64;
    /// Remote memory access.
    pub const RMA: u64 = sys::FI_RMA as u64;
    /// One posted buffer receives many messages.
    pub const MULTI_RECV: u64 = sys::FI_MULTI_RECV as u64;
    /// Receives can name their source address.
    pub const DIRECTED_RECV: u64 = sys::FI_DIRECTED_RECV;
    /// Source address reported with completions.
    pub const SOURCE: u64 = sys::FI_SOURCE;
    /// Completion flag: send completion.
    pub const SEND: u64 = sys::FI_SEND as u64;
    /// Completion flag: receive completion.
    pub const RECV: u64 = sys::FI_RECV as u64;
    /// Completion flag: the completion carries remote CQ data.
    pub const REMOTE_CQ_DATA: u64 = sys::FI_REMOTE_CQ_DATA as u64;
    /// RMA write access / completion flag.
    pub const WRITE: u64 = sys::FI_WRITE as u64;
    /// RMA read access.
    pub const READ: u64 = sys::FI_READ as u64;
    /// Memory may be the target of remote writes.
    pub const REMOTE_WRITE: u64 = sys::FI_REMOTE_WRITE as u64;
    /// Memory may be the source of remote reads.
    pub const REMOTE_READ: u64 = sys::FI_REMOTE_READ as u64;
    /// Send-after-send ordering.
    pub const ORDER_SAS: u64 = sys::FI_ORDER_SAS as u64;
    /// Completions in the order operations were posted.
    pub const ORDER_STRICT: u64 = sys::FI_ORDER_STRICT as u64;
    /// Memory registration mode: local buffers need descriptors.
    pub const MR_LOCAL: u64 = sys::FI_MR_LOCAL as u64;
    /// Memory registration mode: RMA uses virtual addresses.
    pub const MR_VIRT_ADDR: u64 = sys::FI_MR_VIRT_ADDR as u64;
    /// Memory registration mode: memory must be allocated (backed) before registering.
    pub const MR_ALLOCATED: u64 = sys::FI_MR_ALLOCATED as u64;
    /// Memory registration mode: the provider picks keys.
    pub const MR_PROV_KEY: u64 = sys::FI_MR_PROV_KEY as u64;
}

/// libfabric's progress models.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// The provider progresses by itself.
    Auto,
    /// The application progresses by reading the CQ.
    Manual,
    /// Something else (newer libfabric).
    Other(u32),
}

/// What to ask `fi_getinfo` for. RDM endpoints, thread-safe domains.
#[derive(Clone, Debug)]
pub struct Hints {
    pub(crate) provider: Option<String>,
    pub(crate) domain: Option<String>,
    pub(crate) node: Option<String>,
    pub(crate) service: Option<String>,
    pub(crate) caps: u64,
    pub(crate) mode: u64,
    pub(crate) mr_mode: u64,
    pub(crate) msg_order: u64,
    pub(crate) tx_size: usize,
    pub(crate) rx_size: usize,
    pub(crate) threading: sys::fi_threading,
    pub(crate) data_progress: sys::fi_progress,
    pub(crate) control_progress: sys::fi_progress,
    pub(crate) api_version: u32,
}

impl Default for Hints {
    fn default() -> Self {
        Hints {
            provider: None,
            domain: None,
            node: None,
            service: None,
            caps: flags::TAGGED | flags::MSG,
            mode: 0,
            // The registration modes this layer handles: descriptors on every local buffer,
            // real (allocated) memory, provider keys, virtual addresses for RMA.
            mr_mode: flags::MR_LOCAL
                | flags::MR_VIRT_ADDR
                | flags::MR_ALLOCATED
                | flags::MR_PROV_KEY,
            msg_order: flags::ORDER_SAS,
            tx_size: 0,
            rx_size: 0,
            threading: sys::FI_THREAD_SAFE,
            data_progress: sys::FI_PROGRESS_UNSPEC,
            control_progress: sys::FI_PROGRESS_UNSPEC,
            api_version: ofi_sys::fi_version_of(1, 17),
        }
    }
}

impl Hints {
    /// Tagged and untagged messaging, send-after-send ordering, any provider.
    pub fn new() -> Hints {
        Hints::default()
    }

    /// Restricts to one provider by libfabric name (`shm`, `tcp`, `tcp;ofi_rxm`, `sockets`,
    /// `udp`, `verbs`...). Without it, libfabric's `FI_PROVIDER` environment variable (read
    /// once per process) decides what is offered.
    pub fn provider(mut self, name: impl Into<String>) -> Hints {
        self.provider = Some(name.into());
        self
    }

    /// Restricts to one domain (for IP providers, the interface: `lo`, `eth0`).
    pub fn domain(mut self, name: impl Into<String>) -> Hints {
        self.domain = Some(name.into());
        self
    }

    /// Binds to a local address (`fi_getinfo` node/service with `FI_SOURCE`).
    pub fn source(mut self, node: Option<&str>, service: Option<&str>) -> Hints {
        self.node = node.map(str::to_owned);
        self.service = service.map(str::to_owned);
        self
    }

    /// Adds required capabilities (see [`flags`]).
    pub fn caps(mut self, caps: u64) -> Hints {
        self.caps |= caps;
        self
    }

    /// Replaces the requested message ordering (default `FI_ORDER_SAS`).
    pub fn msg_order(mut self, order: u64) -> Hints {
        self.msg_order = order;
        self
    }

    /// Requests transmit and receive queue depths (0: provider default).
    pub fn queue_sizes(mut self, tx: usize, rx: usize) -> Hints {
        self.tx_size = tx;
        self.rx_size = rx;
        self
    }

    /// Requests a data progress model (default: the provider's).
    pub fn data_progress(mut self, progress: Progress) -> Hints {
        self.data_progress = match progress {
            Progress::Auto => sys::FI_PROGRESS_AUTO,
            Progress::Manual => sys::FI_PROGRESS_MANUAL,
            Progress::Other(p) => p as sys::fi_progress,
        };
        self
    }

    /// The provider name asked for, if any.
    pub fn provider_name(&self) -> Option<&str> {
        self.provider.as_deref()
    }
}

/// Negotiated attributes of one provider/domain, as plain values.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Attributes {
    /// Provider name as libfabric spells it (`tcp;ofi_rxm`).
    pub provider: String,
    /// Fabric name (for IP providers, the subnet).
    pub fabric: String,
    /// Domain name (for IP providers, the interface).
    pub domain: String,
    /// Capability bits.
    pub caps: u64,
    /// Mode bits the provider requires.
    pub mode: u64,
    /// Address format (`FI_SOCKADDR_IN`, `FI_ADDR_STR`...).
    pub addr_format: u32,
    /// Source address chosen by `fi_getinfo`.
    pub src_addr: Vec<u8>,
    /// Largest message sent with `fi_inject`.
    pub inject_size: usize,
    /// Transmit queue depth.
    pub tx_size: usize,
    /// Receive queue depth.
    pub rx_size: usize,
    /// Largest message.
    pub max_msg_size: usize,
    /// Bits of the tag the provider matches on.
    pub mem_tag_format: u64,
    /// Transmit-side message ordering bits.
    pub msg_order: u64,
    /// Transmit-side completion ordering bits.
    pub comp_order: u64,
    /// Receive-side message ordering bits.
    pub rx_msg_order: u64,
    /// Receive-side completion ordering bits.
    pub rx_comp_order: u64,
    /// Bytes of remote CQ data a send can carry (0: none).
    pub cq_data_size: usize,
    /// Memory registration mode bits.
    pub mr_mode: u64,
    /// Data progress model (raw `fi_progress`).
    pub data_progress: u32,
    /// Control progress model (raw `fi_progress`).
    pub control_progress: u32,
    /// Threading model (raw `fi_threading`).
    pub threading: u32,
    /// Endpoints the domain supports.
    pub ep_cnt: usize,
    /// Completion queues the domain supports.
    pub cq_cnt: usize,
    /// Size of memory registration keys.
    pub mr_key_size: usize,
}

impl Attributes {
    /// Whether all of `caps` are offered.
    pub fn has(&self, caps: u64) -> bool {
        self.caps & caps == caps
    }

    /// Remote CQ data is an operation flag; it is available when `cq_data_size > 0`.
    pub fn has_cq_data(&self) -> bool {
        self.cq_data_size > 0
    }

    /// Whether sends to one peer arrive in order (`FI_ORDER_SAS`).
    pub fn send_after_send_ordered(&self) -> bool {
        self.msg_order & flags::ORDER_SAS != 0
    }

    /// Whether completions are reported in posting order.
    pub fn completions_ordered(&self) -> bool {
        self.comp_order & flags::ORDER_STRICT != 0
    }

    /// Data progress model.
    pub fn data_progress(&self) -> Progress {
        progress(self.data_progress)
    }

    /// Control progress model.
    pub fn control_progress(&self) -> Progress {
        progress(self.control_progress)
    }
}

fn progress(p: u32) -> Progress {
    match p {
        sys::FI_PROGRESS_AUTO => Progress::Auto,
        sys::FI_PROGRESS_MANUAL => Progress::Manual,
        o => Progress::Other(o),
    }
}

/// One `fi_info` entry: a provider/domain that satisfies the hints.
#[derive(Clone)]
pub struct Info {
    pub(crate) raw: Arc<InfoBox>,
    attrs: Attributes,
}

impl std::fmt::Debug for Info {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Info").field(&self.attrs).finish()
    }
}

impl Info {
    /// Every entry `fi_getinfo` offers for `hints`, in libfabric's preference order.
    ///
    /// # Errors
    /// [`Error::ProviderNotFound`] when a named provider is not offered (listing the ones that
    /// are), `Error::Call` for other `fi_getinfo` failures.
    pub fn query(hints: &Hints) -> Result<Vec<Info>> {
        match raw::getinfo(hints) {
            Ok(list) => {
                // Every object is shared across threads (the handles are Send and Sync):
                // only FI_THREAD_SAFE domains will do.
                let safe: Vec<Info> = list
                    .into_iter()
                    .map(Info::from_box)
                    .filter(|i| i.attrs.threading == sys::FI_THREAD_SAFE)
                    .collect();
                if safe.is_empty() {
                    return Err(not_found(hints));
                }
                Ok(safe)
            }
            Err(e) if e.errno() == Some(sys::FI_ENODATA as i32) => Err(not_found(hints)),
            Err(e) => Err(e),
        }
    }

    /// The first (preferred) entry for `hints`.
    ///
    /// # Errors
    /// As [`Info::query`].
    pub fn first(hints: &Hints) -> Result<Info> {
        Ok(Info::query(hints)?.swap_remove(0))
    }

    /// Whether some provider matching `hints` also offers `caps` (libfabric reports only the
    /// capabilities that were asked for, so each capability is checked by asking for it).
    pub fn offers(hints: &Hints, caps: u64) -> bool {
        raw::getinfo(&hints.clone().caps(caps)).is_ok_and(|l| !l.is_empty())
    }

    fn from_box(b: InfoBox) -> Info {
        Info {
            attrs: b.attributes(),
            raw: Arc::new(b),
        }
    }

    /// The negotiated attributes.
    pub fn attributes(&self) -> &Attributes {
        &self.attrs
    }

    /// Provider name as libfabric spells it.
    pub fn provider(&self) -> &str {
        &self.attrs.provider
    }
}

/// The data progress model to ask `provider` for when the application reads its CQs
/// itself while it waits (as MCAPI's calls and perftest's raw loops do): manual on sockets,
/// whose automatic progress is a thread per domain polling its sockets beside the
/// application's own polling (on a 2-core host a round trip then took milliseconds,
/// docs/providers.md); `None` elsewhere (the provider's default: manual already on shm,
/// tcp;ofi_rxm and udp;ofi_rxd).
pub fn caller_progress(provider: &str) -> Option<Progress> {
    (provider == "sockets").then_some(Progress::Manual)
}

/// Whether `provider`, opened with data progress `progress`, moves a posted send, inject
/// or RMA operation only in a later CQ read: sockets with manual progress queues every
/// post for its progress engine (tcp;ofi_rxm writes to the socket in the call; shm writes
/// into the peer's region). [`crate::Endpoint`] then makes one progress pass after each
/// such post, so an operation leaves in the call that posts it rather than at the
/// caller's next CQ read.
pub(crate) fn posts_wait_for_progress(provider: &str, progress: Progress) -> bool {
    provider == "sockets" && progress == Progress::Manual
}

/// Whether `provider`'s endpoints of one process use each other's memory directly, so
/// that closing one while another may still use it faults (shm: see `ep::lingering`).
pub(crate) fn shares_memory_in_process(provider: &str) -> bool {
    provider == "shm"
}

/// Provider names offered for `hints` without its provider restriction, deduplicated.
pub fn available_providers(hints: &Hints) -> Vec<String> {
    let mut any = hints.clone();
    any.provider = None;
    any.domain = None;
    let mut names: Vec<String> = raw::getinfo(&any)
        .map(|l| l.iter().map(|b| b.attributes().provider).collect())
        .unwrap_or_default();
    names.dedup();
    let mut seen = Vec::new();
    names.retain(|n| {
        let new = !seen.contains(n);
        seen.push(n.clone());
        new
    });
    names
}

fn not_found(hints: &Hints) -> Error {
    Error::ProviderNotFound {
        requested: hints.provider.clone().unwrap_or_else(|| "(any)".into()),
        available: available_providers(hints),
        env_restriction: std::env::var("FI_PROVIDER").ok(),
    }
}

/// The libfabric library version in use, as (major, minor).
pub fn libfabric_version() -> (u32, u32) {
    raw::library_version()
}
