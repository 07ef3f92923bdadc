//! Reserving a side and opening its fabric part (own endpoint, or a place on the scalar hub).

use super::data::{FlushMarker, HubLane, LocalRecv, RecvData, SendData, SideData, Spares};
use super::endpoint::PeerOpen;
use super::handle::ChannelHandle;
use super::hub::{self, HubItem};
use super::limits::{pool_slack, CTX_CREDIT, SCALAR_SLOT};
use super::side::Side;
use super::side_io::{HubSide, SideIo};
use crate::node::common::Result;
use crate::node::inner::NodeInner;
use crate::semantics::channel::{ChannelKind, CreditReturn, Direction};
use crate::semantics::channel_side::{Posting, RecvSide, SendSide};
use crate::semantics::Status;
use mcapi_ofi::{
    AddressVector, Completion, CompletionQueue, Endpoint, EndpointOptions, Error as OfiError,
    FiAddr, MemoryRegion,
};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;

impl NodeInner {
    /// Reserves a side slot for an open of local endpoint `port`.
    pub(super) fn reserve_side(
        &self,
        kind: ChannelKind,
        dir: Direction,
        port: u32,
    ) -> Result<ChannelHandle> {
        let generation = self.channels.generation.fetch_add(1, Ordering::Relaxed) & 0xFF_FFFF;
        for (slot, s) in self.channels.sides.iter().enumerate() {
            let mut g = s.lock();
            if g.is_none() {
                *g = Some(Side::reserved(generation, kind, port));
                self.channels.used[slot / 64].fetch_or(1 << (slot % 64), Ordering::Relaxed);
                return Ok(ChannelHandle::new(slot, generation, kind, dir));
            }
        }
        // The open calls' ERRORS tables have no MCAPI_ERR_MEM_LIMIT.
        log::info!(
            "open on port {port}: MCAPI_ERR_GENERAL: every channel side of the node is in use"
        );
        Err(Status::MCAPI_ERR_GENERAL)
    }

    /// Opens the fabric part of a channel end before the other side is known: endpoint,
    /// CQ and (receive side) the posted pool. Returns it with the payload limit it uses.
    /// `local`: the other endpoint is on this node; the receive side's pool is then
    /// posted to no endpoint, the sender places its items itself (`local.rs`), and scalars
    /// stay off the hub.
    pub(super) fn open_side_io(
        &self,
        kind: ChannelKind,
        dir: Direction,
        max_payload: usize,
        slot: usize,
        local: bool,
    ) -> std::result::Result<SideIo, OfiError> {
        if kind == ChannelKind::Scalar && self.channels_share_buffers() && !local {
            return self.open_scalar_io(dir, slot);
        }
        let domain = &self.fab.domain;
        let cq = CompletionQueue::open(domain, 0, self.fab.cq_wait)?;
        let av = AddressVector::open(domain, 4)?;
        let payload = match kind {
            ChannelKind::Packet => max_payload,
            ChannelKind::Scalar => 8,
        };
        let multi_recv = dir == Direction::Receive
            && kind == ChannelKind::Packet
            && self.channels_share_buffers()
            && !local;
        let min_multi_recv = multi_recv.then_some(payload.max(8));
        let ep = Endpoint::open(domain, &cq, &av, EndpointOptions { min_multi_recv })?;
        let capacity = match kind {
            ChannelKind::Packet => self.config.recv_buffers as u32,
            ChannelKind::Scalar => self.scalar_capacity(),
        };
        let mut packet_hub = None;
        let data = match dir {
            Direction::Send => SideData::Unconnected,
            Direction::Receive => {
                // Unless channel sides share buffers (`channels_share_buffers`: scalar sides
                // here are of other providers than ofi_rxm's) one plain receive per credit:
                // shm, say, matches a scalar or packet into a multi-receive buffer more
                // slowly, all between its arrival and the application's reply, and a second
                // completion when the buffer is full. An emptied slot is posted again off
                // that path (`repost_slots`). Under ofi_rxm packets share multi-receive
                // buffers.
                // Same-node scalars are queued as they come, as from the hub: no slots.
                let n = match kind {
                    ChannelKind::Scalar if local => 0,
                    _ => capacity as usize,
                };
                let (buffer_size, posting) = match kind {
                    ChannelKind::Scalar if local => (SCALAR_SLOT, Posting::Hub),
                    ChannelKind::Scalar => (SCALAR_SLOT, Posting::Plain),
                    ChannelKind::Packet if multi_recv => {
                        (payload + pool_slack(payload), Posting::MultiRecv)
                    }
                    ChannelKind::Packet => (payload.max(SCALAR_SLOT), Posting::Plain),
                };
                let mut state = RecvSide::new(kind, posting, buffer_size, n, capacity);
                if let Some(min_free) = min_multi_recv {
                    state.track_fill(min_free);
                }
                packet_hub = (posting == Posting::MultiRecv)
                    .then(|| self.packet_hub(slot, capacity))
                    .flatten();
                let hub_slots = match packet_hub {
                    Some(_) => {
                        state.add_hub_slots(hub::PACKET_MAX);
                        let slots = capacity.max(1) as usize;
                        Some(MemoryRegion::with_slots(domain, slots, hub::PACKET_MAX)?)
                    }
                    None => None,
                };
                let pool = MemoryRegion::with_slots(domain, n.max(1), buffer_size)?;
                let mut r = RecvData {
                    pool,
                    hub_slots,
                    state,
                    local: local.then(|| {
                        Box::new(LocalRecv {
                            free: VecDeque::with_capacity(n),
                            credits: 0,
                        })
                    }),
                    spares: (posting == Posting::MultiRecv).then(|| {
                        let registry = self.channels.pools.clone();
                        Box::new(Spares::new(n, domain.clone(), registry, slot))
                    }),
                    unflagged_cq_data: self.fab.unflagged_cq_data,
                };
                for b in 0..n {
                    r.post(&ep, b)?;
                }
                SideData::Recv(r)
            }
        };
        Ok(SideIo {
            ep: Some(ep),
            cq,
            cq_buf: [Completion::default(); 16],
            av,
            dest: FiAddr::UNSPEC,
            data,
            hub: None,
            packet_hub,
            ways: Default::default(),
            out: self.channels.outbox(slot),
        })
    }

    /// A packet receive side's place on the node's hub, where its senders inject packets up
    /// to [`hub::PACKET_MAX`] bytes, so that a small-packet ping-pong between two nodes runs
    /// over one connection (as scalars do: the hub's doc). Where scalars use the hub, and
    /// within what the hub's CQ holds for every side; `None` otherwise, or if the hub
    /// cannot be opened (the side's own endpoint then takes every packet).
    fn packet_hub(&self, slot: usize, capacity: u32) -> Option<HubSide> {
        if !self.channels_share_buffers()
            || self.fab.inject_size == 0
            || capacity as usize > hub::MAX_CAPACITY
        {
            return None;
        }
        let hub = self
            .channels
            .hub(&self.fab, self.scalar_capacity() as usize)
            .ok()?;
        let route = hub.attach(slot, capacity as usize);
        Some(HubSide {
            hub,
            route,
            peer_route: 0,
            items: [HubItem::default(); hub::READ_BURST],
        })
    }

    /// Whether packet receive sides take packets into shared multi-receive buffers, and
    /// scalar sides and small packets go through the node's hub (whose pool is one too):
    /// under ofi_rxm (tcp, verbs), where a node pair's connection is worth sharing and a
    /// buffer a message too long for it ends is replaced. Elsewhere sides keep endpoints
    /// and plain receives of their own, one per credit:
    /// - shm has no connection to share, and matches a packet or scalar into a plain
    ///   receive faster than into a multi-receive buffer (and the hub's lock and routing
    ///   would add to every scalar round trip);
    /// - udp;ofi_rxd (1.17) writes a message too long for a multi-receive buffer on past
    ///   its end, into whatever memory follows (anyone reaching the endpoint could corrupt
    ///   the heap), and sockets, having released a buffer with such a message, goes on
    ///   matching later messages into it (they read as zeros): found in review, 2026-11-28.
    fn channels_share_buffers(&self) -> bool {
        self.fab.provider.ends_with(";ofi_rxm")
    }

    /// Scalars a receive side takes before the sender waits for credits: `recv_buffers`,
    /// within what the hub's CQ holds for every side at once.
    pub(super) fn scalar_capacity(&self) -> u32 {
        self.config.recv_buffers.min(hub::MAX_CAPACITY) as u32
    }

    /// The fabric part of a scalar side, on the node's hub (nothing of its own is posted:
    /// it takes its messages from the hub).
    fn open_scalar_io(&self, dir: Direction, slot: usize) -> std::result::Result<SideIo, OfiError> {
        let capacity = self.scalar_capacity();
        let hub = self.channels.hub(&self.fab, capacity as usize)?;
        let route = hub.attach(slot, capacity.max(8) as usize);
        let data = match dir {
            Direction::Send => SideData::Unconnected,
            // The hub's pool: its scalars are copied out, so no buffer of it is this side's.
            // Each credit return is a syscall on the connection-based providers the hub
            // serves: they go back once the sender is down to a quarter of its credits.
            Direction::Receive => {
                let mut state = RecvSide::new(ChannelKind::Scalar, Posting::Hub, 8, 0, capacity);
                state.hold_back_credits();
                SideData::Recv(RecvData {
                    pool: hub.pool().clone(),
                    hub_slots: None,
                    state,
                    local: None,
                    spares: None,
                    unflagged_cq_data: self.fab.unflagged_cq_data,
                })
            }
        };
        Ok(SideIo {
            ep: Some(hub.endpoint().clone()),
            cq: hub.cq().clone(),
            cq_buf: [Completion::default(); 16],
            av: hub.av().clone(),
            dest: FiAddr::UNSPEC,
            data,
            hub: Some(HubSide {
                hub,
                route,
                peer_route: 0,
                items: [HubItem::default(); hub::READ_BURST],
            }),
            packet_hub: None,
            ways: Default::default(),
            out: self.channels.outbox(slot),
        })
    }

    /// Completes the fabric part once the other side's open arrived: its address, and for a
    /// sender the credits and staging sized by the receiver's pool. `local`: the other side
    /// is on this node, and nothing of the fabric is set up for it (`local.rs`).
    pub(super) fn connect_side_io(
        &self,
        io: &mut SideIo,
        kind: ChannelKind,
        payload: usize,
        peer: &PeerOpen,
        local: bool,
    ) -> std::result::Result<(), OfiError> {
        match &mut io.hub {
            _ if local => {}
            Some(h) => {
                let node = (peer.from.domain(), peer.from.node());
                io.dest = h.hub.peer(node, &peer.fabric_addr)?;
                h.peer_route = peer.route;
            }
            None => io.dest = io.av.insert(&peer.fabric_addr)?,
        }
        let early = matches!(io.data, SideData::Send(_));
        if let SideData::Unconnected = io.data {
            let credits = peer.credits;
            // Scalars go out by inject: no staging.
            let staged = if kind == ChannelKind::Packet {
                credits.max(1) as usize
            } else {
                0
            };
            io.data = SideData::Send(self.send_data(credits, staged, payload, local)?);
        }
        if let SideData::Send(s) = &mut io.data {
            if early {
                // Opened early (compatibility mode), with no credits.
                s.state.credits_granted(peer.credits);
                s.local = local;
            }
            if kind == ChannelKind::Packet && !local && !peer.hub_addr.is_empty() {
                s.hub_lane = self.hub_lane(peer);
            }
            // A scalar sender's credits come through the hub, a same-node sender's directly.
            let slots = match io.hub {
                _ if local => 0,
                Some(_) => 0,
                None => CreditReturn::max_in_flight(peer.credits) as usize,
            };
            if slots > 0 {
                s.credit_slots = MemoryRegion::with_slots(&self.fab.domain, slots, 8)?;
                s.credit_reposts = Vec::with_capacity(slots);
                if let Some(ep) = &io.ep {
                    for i in 0..slots {
                        ep.recv(
                            s.credit_slots.slice(i * 8, 8)?,
                            FiAddr::UNSPEC,
                            CTX_CREDIT | i as u64,
                        )?;
                    }
                }
            }
            // An empty message, which the receiver ignores (it carries no CQ data), makes
            // the provider set up its connection while the open completes: rxm connects on
            // a first send, in several steps 10 ms apart (its CM progress interval), which
            // the first packet would wait for. Not where the receiver posts plain receives
            // (shm, which has no connections, and others), which would take one for it
            // without a credit.
            if let (Some(ep), None, ChannelKind::Packet) = (&io.ep, &io.hub, kind) {
                if self.channels_share_buffers() && !local {
                    // Best effort: a failure shows at the first packet.
                    _ = ep.inject(&[], io.dest);
                }
            }
        }
        Ok(())
    }

    /// The way to a packet receiver's hub that it announced, if this node has one too (the
    /// side's own endpoint takes every packet otherwise).
    fn hub_lane(&self, peer: &PeerOpen) -> Option<HubLane> {
        if !self.channels_share_buffers() || peer.route as usize >= hub::ROUTES {
            return None;
        }
        let hub = self
            .channels
            .hub(&self.fab, self.scalar_capacity() as usize)
            .ok()?;
        let node = (peer.from.domain(), peer.from.node());
        let dest = hub.peer(node, &peer.hub_addr).ok()?;
        Some(HubLane {
            hub,
            dest,
            route: peer.route,
            max: hub::PACKET_MAX.min(self.fab.inject_size),
        })
    }

    /// A send side's memory and state: `credits` (the receiver's pool), `staged` staging
    /// buffers of `payload` bytes; credit receive slots are added when it connects.
    fn send_data(
        &self,
        credits: u32,
        staged: usize,
        payload: usize,
        local: bool,
    ) -> std::result::Result<SendData, OfiError> {
        let domain = &self.fab.domain;
        Ok(SendData {
            state: SendSide::new(credits, staged),
            credit_slots: MemoryRegion::new(domain, 8)?,
            staging: MemoryRegion::with_slots(domain, staged.max(1), payload.max(1))?,
            inject_size: self.fab.inject_size,
            inject_scratch: vec![0; self.fab.inject_size.min(payload)],
            credit_reposts: Vec::new(),
            local,
            hub_lane: None,
            flush_marker: FlushMarker::Unsent,
        })
    }

    /// Compatibility mode: a send side whose open completes before the receiver's gets its
    /// state now, with no credits and its own node's pool size of staging buffers (the
    /// receiver's is not known yet): `pktchan_send_i` packets queue there until it opens.
    pub(super) fn early_send_data(
        &self,
        io: &mut SideIo,
        kind: ChannelKind,
        payload: usize,
    ) -> std::result::Result<(), OfiError> {
        if !matches!(io.data, SideData::Unconnected) {
            return Ok(());
        }
        let staged = match kind {
            ChannelKind::Packet => self.config.recv_buffers.max(1),
            ChannelKind::Scalar => 0,
        };
        // Whether the receiver is on this node is known from the connect; `local` only
        // matters for where queued packets go, decided again when it connects.
        io.data = SideData::Send(self.send_data(0, staged, payload, false)?);
        Ok(())
    }
}
