//! The node's libfabric stack: opening it (provider, CQ wait object), posting receives.

use super::common::{ofi_status, Result, EAGER_SLOT, MAX_MSG_SIZE};
use super::credit_plane::CONTROL_LEN;
use super::rendezvous::{EAGER_MARK, RNDV_MARK};
use super::state::State;
use crate::config::Config;
use crate::semantics::wire::{Context, Kind, Tag};
use crate::semantics::Status;
use mcapi_ofi::{
    flags, AddressVector, Completion, CompletionQueue, Domain, Endpoint, EndpointOptions,
    Error as OfiError, FiAddr, Hints, Info, MemoryRegion, WaitObject,
};

/// Send slots of a node (copies of messages above the inject size until sent).
pub(super) const SEND_SLOTS: u32 = 64;
/// Control receive slots a node keeps posted per remote endpoint it sends to, and at least.
pub(super) const CONTROL_SLOTS_PER_REMOTE: u32 = 4;
pub(super) const CONTROL_SLOTS_MIN: u32 = 64;
/// Control receive slots a node keeps posted at most: with the message pool (at most
/// [`MAX_RECV_SLOTS`]) under shm's 1024 posted receives.
pub(super) const CONTROL_SLOTS_MAX: u32 = 256;
/// Most slots of a node's message receive pool.
pub(super) const MAX_RECV_SLOTS: u32 = 512;

/// Slots of the node's message receive pool for endpoints of `recv_buffers` buffers: eight
/// endpoints' worth, at least 64, at most [`MAX_RECV_SLOTS`] (the providers' posted-receive
/// limits: shm takes 1024 per node, tcp;ofi_rxm 2048).
pub(super) fn recv_slots(recv_buffers: usize) -> u32 {
    (recv_buffers.saturating_mul(8)).clamp(64, MAX_RECV_SLOTS as usize) as u32
}

/// The node's libfabric objects.
pub(super) struct Fab {
    pub(super) ep: Endpoint,
    pub(super) cq: CompletionQueue,
    pub(super) av: AddressVector,
    pub(super) domain: Domain,
    pub(super) provider: String,
    /// The wait object of the node's CQs (an fd where the provider has one).
    pub(super) cq_wait: WaitObject,
    pub(super) inject_size: usize,
    pub(super) send_pool: MemoryRegion,
    pub(super) control_pool: MemoryRegion,
    /// The node's message receive pool: [`recv_slots`] slots of `EAGER_SLOT`, each
    /// posted for a message to any port (the tag says which).
    pub(super) recv_pool: MemoryRegion,
    pub(super) recv_slots: u32,
    /// Largest message sent eagerly (the payload in a receive slot); larger ones go by
    /// rendezvous ([`eager_threshold`]).
    pub(super) eager_max: usize,
    /// Largest message accepted (`Config::max_msg_size`; the eager slot without `FI_RMA`).
    pub(super) max_msg: usize,
    /// Whether a blocking receive reads a rendezvous message straight into its buffer
    /// ([`reads_in_place`]).
    pub(super) reads_in_place: bool,
    /// Whether a blocking `msg_send` of a rendezvous message lets its receiver read the
    /// application's buffer in place (no staging copy): where reads are made by the reader's
    /// process (shm), so nothing here touches the buffer once the call has returned.
    pub(super) sends_in_place: bool,
    /// Whether `msg_send_i_zero_copy` lends a rendezvous message's buffer that lives for
    /// good ([`lends_static_buffers`]).
    pub(super) lends_static: bool,
    /// Whether the provider may leave `FI_REMOTE_CQ_DATA` out of a completion that has data
    /// ([`loses_cq_data_flag`]).
    pub(super) unflagged_cq_data: bool,
    /// Whether the provider may keep injected messages queued after the inject returned
    /// ([`queues_injects`]).
    pub(super) injects_queue: bool,
}

/// sockets (1.17) leaves `FI_REMOTE_CQ_DATA` out of the completion of a message it matched
/// from its unexpected list (one that came before a receive was posted for it), though its
/// data is there (`sock_pe_progress_buffered_rx`). Packets and scalars come that way when a
/// stranger's messages took the receives posted for them: they were taken for "no packet"
/// and dropped (found by a flaky CI run, 2026-11-28). There every message of ours carries
/// data ([`Fab::message_cq_data`]), and receivers take it whatever the flag says
/// ([`cq_data`]).
pub(super) fn loses_cq_data_flag(provider: &str) -> bool {
    provider == "sockets"
}

/// sockets (1.17, with the manual progress we ask for) queues an inject until reads of the
/// endpoint's CQ write it to the socket (docs/providers.md); closing the endpoint discards
/// what is still queued. udp;ofi_rxd too keeps an inject until its sender's CQ reads move
/// it. A channel's injected packets and scalars, which have no completion to wait for, were
/// lost when their sender finalized at once (99 of 199 packets arrived on sockets, 128 of
/// 199 on udp): `finalize` sends a marker with a completion behind them on such a
/// provider. shm, tcp;ofi_rxm and net write an inject in the call (or into the kernel's
/// socket buffer) and need none (tested).
pub(super) fn queues_injects(provider: &str) -> bool {
    matches!(provider, "sockets" | "udp;ofi_rxd")
}

/// A receive completion's remote CQ data: where its flag says there is some, or always
/// where the provider may leave the flag out (`unflagged`, [`loses_cq_data_flag`]).
#[inline(always)]
pub(super) fn cq_data(c: &Completion, unflagged: bool) -> Option<u64> {
    (unflagged || c.flags() & flags::REMOTE_CQ_DATA != 0).then(|| c.data())
}

/// Whether `msg_send_i_zero_copy` lends a rendezvous message's buffer that lives for good
/// (`SendBuffer::from_static`) rather than staging a copy: where the reader's process makes
/// the reads (as for any buffer), and on tcp;ofi_rxm, where this side's progress serves them
/// and lending measured faster from 128 KiB up (performance-log.md, "Lent buffers over tcp").
/// Not on sockets: there it measured slower at 1 MiB.
fn lends_static_buffers(provider: &str, domain: &Domain) -> bool {
    domain.reads_made_by_reader() || provider == "tcp;ofi_rxm"
}

/// Whether rendezvous reads may go straight into a blocking receive's buffer: the read
/// cannot be abandoned (the provider may write the buffer until it completes), so only
/// where every read ends, successfully or with an error completion when its sender is
/// gone (measured: shm with cross-memory attach reads inside `fi_read`; tcp;ofi_rxm and
/// sockets flush reads at a disconnect), and unregistered memory may be read into (no
/// `FI_MR_LOCAL`).
fn reads_in_place(provider: &str, domain: &Domain, ep: &Endpoint, rma: bool) -> bool {
    let every_read_ends = match provider {
        // Without cross-memory attach shm reads through its peer's progress, and a dead
        // peer's read never ends.
        "shm" => domain.reads_made_by_reader(),
        "tcp;ofi_rxm" | "sockets" => true,
        _ => false,
    };
    rma && ep.sends_unregistered() && every_read_ends
}

/// The eager/rendezvous threshold under ofi_rxm (tcp, verbs): rxm's own eager buffer.
/// Measured over tcp (docs/performance.md, "Large messages"), with reads ahead a
/// rendezvous beats the eager path from 24 KiB to 64 KiB in ping-pong latency and in
/// streaming (above 16 KiB rxm sends an eager message by a rendezvous of its own).
const RXM_EAGER_MAX: usize = 16 << 10;

/// The eager/rendezvous threshold of `provider` unless configured (`MCAPI_EAGER_MAX`),
/// chosen by measurement (docs/performance.md, "Large messages"); providers not measured
/// keep every message up to the slot size (64 KiB) eager.
///
/// On shm it is the inject size (`inject_size`): shm completes a send above it only once
/// the receiver answers, and reports its answers in order, so one that never comes (a
/// receiver that crashed, or a node of the process that finalized with messages on their
/// way, its endpoint never read again) held back the completion of every later such send
/// of the node's endpoint, to any peer: its send slots ran out and its eager sends timed
/// out. A rendezvous' descriptor is injected and its data read by the receiver, so nothing
/// of the node's waits for an answer. (Eager to 8 KiB measured 10..25% faster at 6 and 8
/// KiB, performance.md.)
pub(super) fn eager_threshold(
    provider: &str,
    inject_size: usize,
    configured: Option<usize>,
) -> usize {
    let default = if provider.contains("ofi_rxm") {
        RXM_EAGER_MAX
    } else if provider == "shm" {
        inject_size
    } else {
        EAGER_SLOT
    };
    configured.unwrap_or(default).clamp(1, EAGER_SLOT)
}

/// Opens the fabric stack with the first provider candidate that works.
///
/// # Errors
/// Why no provider could be opened, one reason per provider tried.
pub(super) fn open_fabric(
    config: &Config,
    domain_id: u32,
    node_id: u32,
) -> std::result::Result<Fab, String> {
    // The local address the network providers bind to: the chosen interface's, else this
    // node's topology entry, else (under a launcher) the address its control server
    // publishes, else loopback (every node on this host).
    let local = match (&config.tcp_iface, &config.topology) {
        (None, None) if config.bootstrap == crate::config::Bootstrap::Pmix => {
            crate::launcher::control_ip(config)?.to_string()
        }
        (Some(iface), _) => interface_address(iface)
            .ok_or_else(|| format!("MCAPI_TCP_IFACE={iface}: no IPv4 address on that interface"))?,
        (None, Some(t)) => t
            .get(domain_id, node_id)
            .ok_or_else(|| format!("node <{domain_id}, {node_id}> is not in the topology file"))?
            .host
            .clone(),
        (None, None) => "127.0.0.1".to_owned(),
    };
    let mut reasons = Vec::new();
    for provider in config.provider_candidates() {
        let base = flags::TAGGED | flags::MSG | flags::MULTI_RECV;
        let hints_with = |caps: u64| {
            let mut hints = Hints::new().provider(provider.clone()).caps(caps);
            if let Some(progress) = mcapi_ofi::caller_progress(&provider) {
                hints = hints.data_progress(progress);
            }
            if provider != "shm" {
                hints.source(Some(&local), None)
            } else {
                hints
            }
        };
        // RMA for rendezvous messages where the provider has it; without, messages stay
        // within the eager slot.
        let info = match Info::first(&hints_with(base | flags::RMA))
            .or_else(|_| Info::first(&hints_with(base)))
        {
            Ok(info) => info,
            Err(e) => {
                reasons.push(format!("{provider}: {e}"));
                continue;
            }
        };
        let rma = info.attributes().has(flags::RMA);
        let open = || -> std::result::Result<Fab, OfiError> {
            let domain = Domain::open_info(&info)?;
            let (cq, cq_wait) = open_node_cq(&domain, info.provider())?;
            let av = AddressVector::open(&domain, 64)?;
            let ep = Endpoint::open(&domain, &cq, &av, EndpointOptions::default())?;
            Ok(Fab {
                inject_size: info.attributes().inject_size,
                provider: info.provider().to_owned(),
                cq_wait,
                send_pool: MemoryRegion::with_slots(&domain, SEND_SLOTS as usize, EAGER_SLOT)?,
                control_pool: MemoryRegion::with_slots(&domain, 4096, CONTROL_LEN)?,
                recv_pool: MemoryRegion::with_slots(
                    &domain,
                    recv_slots(config.recv_buffers) as usize,
                    EAGER_SLOT,
                )?,
                recv_slots: recv_slots(config.recv_buffers),
                eager_max: eager_threshold(
                    info.provider(),
                    info.attributes().inject_size,
                    config.eager_max,
                ),
                max_msg: if rma {
                    config.max_msg_size.clamp(1, MAX_MSG_SIZE)
                } else {
                    config.max_msg_size.clamp(1, EAGER_SLOT)
                },
                reads_in_place: reads_in_place(info.provider(), &domain, &ep, rma),
                sends_in_place: rma && domain.reads_made_by_reader(),
                lends_static: rma && lends_static_buffers(info.provider(), &domain),
                unflagged_cq_data: loses_cq_data_flag(info.provider()),
                injects_queue: queues_injects(info.provider()),
                ep,
                cq,
                av,
                domain,
            })
        };
        match open() {
            Ok(fab) => return Ok(fab),
            Err(e) => reasons.push(format!("{provider} ({}): {e}", info.provider())),
        }
    }
    Err(format!(
        "no libfabric provider could be opened: {}",
        reasons.join("; ")
    ))
}

/// The first IPv4 address of network interface `name` (`MCAPI_TCP_IFACE`).
pub(super) fn interface_address(name: &str) -> Option<String> {
    nix::ifaddrs::getifaddrs()
        .ok()?
        .filter(|i| i.interface_name == name)
        .find_map(|i| i.address?.as_sockaddr_in().map(|a| a.ip().to_string()))
}

/// Opens a CQ of the node: with an fd wait object where the provider has one to hand out
/// and it costs nothing measurable (net), so blocked calls sleep until a completion; else
/// without. Not on shm (-FI_ENOSYS), udp;ofi_rxd (no fd exposed), sockets with the manual
/// progress MCAPI asks for (no fd), or providers under ofi_rxm: there the wait object made
/// every tcp;ofi_rxm round trip slower (docs/performance-log.md), which the faster wake-up
/// of a long wait does not buy back. Returns the wait object used, for the node's later
/// CQs.
pub(super) fn open_node_cq(
    domain: &Domain,
    provider: &str,
) -> std::result::Result<(CompletionQueue, WaitObject), OfiError> {
    if !provider.contains("ofi_rxm") {
        if let Ok(cq) = CompletionQueue::open(domain, 0, WaitObject::Fd) {
            if cq.wait_fd().is_some() {
                return Ok((cq, WaitObject::Fd));
            }
        }
    }
    Ok((
        CompletionQueue::open(domain, 0, WaitObject::None)?,
        WaitObject::None,
    ))
}

impl Fab {
    /// The remote CQ data a message goes with: a rendezvous descriptor's mark; nothing for
    /// an eager message, except [`EAGER_MARK`] where the provider may leave the flag out
    /// (its receiver then takes any data as there).
    #[inline(always)]
    pub(super) fn message_cq_data(&self, rndv: bool) -> Option<u64> {
        if rndv {
            Some(RNDV_MARK)
        } else {
            self.unflagged_cq_data.then_some(EAGER_MARK)
        }
    }

    /// Injects an eager message (with [`EAGER_MARK`] where the provider may leave the
    /// data's flag out: [`Fab::message_cq_data`]).
    #[inline(always)]
    pub(super) fn inject_eager(
        &self,
        data: &[u8],
        dest: FiAddr,
        tag: u64,
    ) -> mcapi_ofi::Result<()> {
        if self.unflagged_cq_data {
            self.ep.inject_tagged_data(data, EAGER_MARK, dest, tag)
        } else {
            self.ep.inject_tagged(data, dest, tag)
        }
    }

    /// A receive completion's remote CQ data ([`cq_data`]).
    #[inline(always)]
    pub(super) fn cq_data(&self, c: &Completion) -> Option<u64> {
        cq_data(c, self.unflagged_cq_data)
    }

    /// Posts slot `slot` of the node's message receive pool, for a message to any port.
    pub(super) fn post_recv_slot(&self, slot: u32) -> Result<()> {
        let buf = self
            .recv_pool
            .slice(slot as usize * EAGER_SLOT, EAGER_SLOT)
            .map_err(ofi_status)?;
        let (tag, ignore) = Tag::match_kind(Kind::Message);
        self.post_receive(buf, tag, ignore, Context::RecvSlot(slot))
    }

    /// Posts control receive slot `slot`. Control messages travel untagged (their tag as
    /// an 8-byte payload, their numbers as remote CQ data), so their receives wait in the
    /// provider's untagged queue and every tagged message matches its endpoint's slot
    /// without walking past them (shm and rxm match by walking the posted list).
    pub(super) fn post_control_slot(&self, slot: u32) -> Result<()> {
        let buf = self
            .control_pool
            .slice(slot as usize * CONTROL_LEN, CONTROL_LEN)
            .map_err(ofi_status)?;
        let ctx = Context::ControlSlot(slot).encode();
        for _ in 0..100 {
            match self.ep.recv(buf, FiAddr::UNSPEC, ctx) {
                Ok(()) => return Ok(()),
                Err(e) if e.is_again() => std::thread::yield_now(),
                Err(e) => return Err(ofi_status(e)),
            }
        }
        Err(Status::MCAPI_ERR_MEM_LIMIT)
    }

    /// Posts one receive. A full receive queue (-FI_EAGAIN: shm takes 1024 posted receives,
    /// tcp;ofi_rxm 2048) is retried briefly without reading the CQ, whose completions only
    /// the caller can dispatch, then reported as `MCAPI_ERR_MEM_LIMIT`.
    pub(super) fn post_receive(
        &self,
        buf: mcapi_ofi::Buf<'_>,
        tag: u64,
        ignore: u64,
        ctx: Context,
    ) -> Result<()> {
        let ctx = ctx.encode();
        for _ in 0..100 {
            match self.ep.recv_tagged(buf, FiAddr::UNSPEC, tag, ignore, ctx) {
                Ok(()) => return Ok(()),
                Err(e) if e.is_again() => std::thread::yield_now(),
                Err(e) => return Err(ofi_status(e)),
            }
        }
        Err(Status::MCAPI_ERR_MEM_LIMIT)
    }

    pub(super) fn post_control_slots(&self, st: &mut State, n: u32) -> Result<()> {
        let capacity = ((self.control_pool.len() / CONTROL_LEN) as u32).min(CONTROL_SLOTS_MAX);
        let want = (st.control_posted + n).min(capacity);
        for slot in st.control_posted..want {
            self.post_control_slot(slot)?;
        }
        st.control_posted = want;
        Ok(())
    }
}
