//! Channel operations on the control plane: handling (`channel_frame`) and sending (`channel_call`) them.

use super::data::SideData;
use super::endpoint::PeerOpen;
use super::handle::ChannelHandle;
use super::side::side_status;
use super::side_io::SideIo;
use super::table::Recount;
use crate::config::Compat;
use crate::control::{ChannelAttributes, ChannelOp, ConnectEnd, Frame};
use crate::node::common::{lock, refusal, Result};
use crate::node::inner::NodeInner;
use crate::node::state::PeerRun;
use crate::semantics::channel::{ChannelKind, Direction};
use crate::semantics::endpoint_id::EndpointId;
use crate::semantics::Status;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl NodeInner {
    /// Tells `peer` that the side on local endpoint `port` closed after sending `sent` items;
    /// not if the run of its node that the side was bound to (`run`) is gone: a later run
    /// never hears of an earlier run's channels.
    pub(super) fn send_closed(&self, peer: EndpointId, port: u32, sent: u32, run: Option<PeerRun>) {
        if !self.peer_alive(run) {
            return;
        }
        // A local endpoint's id always encodes.
        let Ok(from) = self.endpoint_id(port) else {
            return;
        };
        if let Err(e) = self.channel_call(peer, ChannelOp::Closed { sent, from }) {
            // Its node is gone or going: it notices the loss itself.
            log::debug!("close of port {port}: {peer:?} not told: {e}");
        }
    }

    /// A closed send side will not send a queued packet (withdrawn, or refused): its
    /// receiver must not wait for it. Told only while the endpoint is still in the channel
    /// of that side (`r.handle`), not one connected since.
    pub(super) fn announce_close(&self, r: Recount) {
        let peer = self.live_state().ok().and_then(|st| {
            let ep = st.endpoints.get(&r.port)?;
            (ep.channel.side == Some(r.handle)).then_some(ep.channel.peer)?
        });
        if let Some(peer) = peer {
            self.send_closed(peer, r.port, r.count, r.run);
        }
    }

    /// Announces the counts closed send sides recounted ([`ChannelTable::recounts`]), on a
    /// thread of their own (each is a control round trip; rare).
    ///
    /// [`ChannelTable::recounts`]: super::table::ChannelTable::recounts
    pub(in crate::node) fn send_recounts(self: &Arc<Self>) {
        let recounts = match self.channels.recounts.try_lock() {
            Ok(mut r) if !r.is_empty() => std::mem::take(&mut *r),
            _ => return,
        };
        let node = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("mcapi-recount".into())
            .spawn(move || {
                for r in recounts {
                    match node.upgrade() {
                        Some(node) => node.announce_close(r),
                        None => return,
                    }
                }
            });
        if let Err(e) = spawned {
            log::warn!("channel close recounts not announced: no thread: {e}");
        }
    }

    /// The id of local endpoint `port` (what channel operations name their sender by).
    pub(super) fn endpoint_id(&self, port: u32) -> Result<EndpointId> {
        EndpointId::encode(self.domain_id, self.node_id, port)
    }

    /// Whether the run of the other side's node that a side is bound to is still there, as
    /// the liveness events received so far tell (no I/O: the watcher and the control server
    /// push them). `None`: the other side is on this node.
    pub(super) fn peer_alive(&self, peer: Option<PeerRun>) -> bool {
        let Some(run) = peer else { return true };
        lock(&self.state).run_alive(run)
    }

    /// Handles a channel operation on local endpoint `port` (from the control plane, or
    /// directly when both ends are on this node). Answers a connect with the endpoint's
    /// attributes, anything else with `None`.
    pub(in crate::node) fn channel_frame(
        &self,
        port: u32,
        op: &ChannelOp,
        sender: (u32, u32),
    ) -> std::result::Result<Option<ChannelAttributes>, Status> {
        // An open or a close speaks for an endpoint of the node that sends it, never for
        // another node's (any member of the job could name any endpoint).
        if let ChannelOp::Opened { from, .. } | ChannelOp::Closed { from, .. } = op {
            if (from.domain(), from.node()) != sender {
                return Err(Status::MCAPI_ERR_PARAMETER);
            }
        }
        match *op {
            ChannelOp::Connect { peer, kind, end } => {
                // An endpoint connected to itself (no connect of ours asks for that) would be
                // its own same-node peer.
                if (peer.domain(), peer.node(), peer.port()) == (self.domain_id, self.node_id, port)
                {
                    return Err(Status::MCAPI_ERR_ENDP_INVALID);
                }
                let dir = match end {
                    ConnectEnd::Send => Direction::Send,
                    ConnectEnd::Receive { .. } => Direction::Receive,
                };
                let mut st = self.live_state()?;
                // A message taken is done with: its credit counts back before the check.
                self.repost_taken(&mut st);
                let ep = st
                    .endpoints
                    .get_mut(&port)
                    .ok_or(Status::MCAPI_ERR_ENDP_INVALID)?;
                let users = usize::from(ep.credits.in_use() || !ep.queue.is_empty());
                ep.channel.binding.check_connect(users)?;
                // The receiver checks compatibility with the sender's attributes.
                if let ConnectEnd::Receive { sender } = end {
                    // Scalars are 8 bytes whatever the endpoints' packet payloads.
                    let too_large =
                        kind == ChannelKind::Packet && sender.max_payload > ep.max_payload as u64;
                    if too_large || sender.priority != ep.priority {
                        return Err(Status::MCAPI_ERR_ATTR_INCOMPATIBLE);
                    }
                }
                ep.channel.binding.connect(kind, dir);
                ep.channel.peer = Some(peer);
                ep.channel.connected_by = Some(sender);
                // An open announced by an endpoint of a connect that failed half-way.
                if ep
                    .channel
                    .binding
                    .peer_info()
                    .is_some_and(|p| p.from != peer)
                {
                    ep.channel.binding.forget_peer_open();
                }
                let answer = ChannelAttributes {
                    max_payload: ep.max_payload as u64,
                    priority: ep.priority,
                };
                // Senders that sent messages here earlier sit on credits: take them back
                // (their next message is refused, spec 3.6).
                ep.credits.recall_all();
                self.settle_credits(&mut st, port);
                self.flush_outbox(&mut st);
                Ok(Some(answer))
            }
            ChannelOp::UndoConnect => {
                let side = {
                    let mut st = self.live_state()?;
                    let Some(ep) = st.endpoints.get_mut(&port) else {
                        return Ok(None);
                    };
                    // Only the node that connected it (or its other end's) undoes it.
                    let other_end = ep.channel.peer.map(|p| (p.domain(), p.node()));
                    if ep.channel.connected_by != Some(sender) && other_end != Some(sender) {
                        return Err(Status::MCAPI_ERR_PARAMETER);
                    }
                    ep.channel.binding.undo_connect();
                    if ep.channel.binding.is_connected() {
                        return Ok(None);
                    }
                    ep.channel.peer = None;
                    ep.channel.side
                };
                // A retry of the same connect must announce the open again.
                if let Some((slot, generation, ..)) = side.and_then(|h| h.decode()) {
                    let mut g = self.channels.sides[slot].lock();
                    if let Some(side) = g.as_mut().filter(|s| s.generation == generation) {
                        side.announced_to = None;
                    }
                }
                Ok(None)
            }
            ChannelOp::Opened {
                from,
                credits,
                route,
                max_payload,
                ref fabric_addr,
                ref hub_addr,
            } => {
                if credits as usize > crate::config::MAX_RECV_BUFFERS {
                    // No receiver grants that many (the sender would size its staging by it).
                    return Err(Status::MCAPI_ERR_PARAMETER);
                }
                let mut st = self.live_state()?;
                let ep = st
                    .endpoints
                    .get_mut(&port)
                    .ok_or(Status::MCAPI_ERR_ENDP_INVALID)?;
                // From an endpoint we are not connected to (a connect that failed half-way):
                // ignored. Before our connect arrives it is kept, and checked then.
                if ep.channel.peer.is_some_and(|p| p != from) {
                    return Ok(None);
                }
                ep.channel.binding.peer_opened(PeerOpen {
                    from,
                    fabric_addr: fabric_addr.clone(),
                    hub_addr: hub_addr.clone(),
                    credits,
                    max_payload: max_payload as usize,
                    route,
                });
                // Compatibility mode: a side of ours whose open completed on its own is
                // connected now.
                let early = ep
                    .channel
                    .side
                    .filter(|_| self.config.compat == Compat::Mca);
                drop(st);
                if let Some(handle) = early {
                    self.finish_early_open(port, handle);
                }
                Ok(None)
            }
            ChannelOp::Closed { sent, from } => {
                let handle = {
                    let mut st = self.live_state()?;
                    let ep = st
                        .endpoints
                        .get_mut(&port)
                        .ok_or(Status::MCAPI_ERR_ENDP_INVALID)?;
                    if ep.channel.peer != Some(from) {
                        return Ok(None);
                    }
                    ep.channel.binding.peer_closed_after(sent);
                    ep.channel.side.map(|h| (h, ep.channel.closing))
                };
                if let Some((handle, closing)) = handle {
                    self.other_side_closed(handle, sent);
                    // This side's close waited for this one: it finishes now (the endpoint
                    // is free at once), not when the application next looks at its request.
                    if let Some(request) = closing {
                        _ = self.advance_close(request, port, handle);
                    }
                }
                Ok(None)
            }
        }
    }

    /// The other side of `handle` closed after sending `sent` items: data calls end once
    /// they arrived. (Also from an open whose side got its receive part after the close
    /// came: the binding kept the count.)
    pub(super) fn other_side_closed(&self, handle: ChannelHandle, sent: u32) {
        let Some((slot, generation, ..)) = handle.decode() else {
            return;
        };
        let mut g = self.channels.sides[slot].lock();
        if let Some(side) = g.as_mut().filter(|s| s.generation == generation) {
            if side.peer_gone.is_none() {
                side.peer_gone = Some(side_status(side.kind));
            }
            if let Some(SideIo {
                data: SideData::Recv(r),
                ..
            }) = &mut side.io
            {
                r.state.sender_closed(sent);
            }
        }
    }

    /// Sends a channel operation to the node of endpoint `to` (or handles it here); answers
    /// as [`NodeInner::channel_frame`].
    pub(super) fn channel_call(
        &self,
        to: EndpointId,
        op: ChannelOp,
    ) -> Result<Option<ChannelAttributes>> {
        if (to.domain(), to.node()) == (self.domain_id, self.node_id) {
            return self.channel_frame(to.port(), &op, (self.domain_id, self.node_id));
        }
        // Only a connect starts something new; every other frame is about a binding made
        // with the run we knew, which a later run of the node never heard of: no waiting
        // for one to start.
        if !matches!(op, ChannelOp::Connect { .. })
            && self.live_state()?.run_lost(to.domain(), to.node())
        {
            return Err(Status::MCAPI_ERR_TRANSMISSION);
        }
        let peer = self.connect_peer(
            to.domain(),
            to.node(),
            Some(Instant::now() + Duration::from_secs(10)),
        )?;
        match self.control_call(
            peer,
            &Frame::Channel {
                port: to.port(),
                op,
            },
        )? {
            Frame::Value(_) => Ok(None),
            Frame::Connected { attributes } => Ok(Some(attributes)),
            answer => Err(refusal("channel operation", &answer)),
        }
    }
}
