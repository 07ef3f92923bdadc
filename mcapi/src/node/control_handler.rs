//! The node's answers on the control plane (the control server's `Handler`).

use super::common::lock;
use super::credit_plane::queue_control;
use super::inner::NodeInner;
use super::peers::PeerInput;
use super::state::State;
use crate::attributes::EndpointAttribute;
use crate::control::{Frame, Handler};
use crate::semantics::credit::{Control, SenderId};
use crate::semantics::Status;
use std::sync::Weak;

/// Answers other nodes on the control plane.
pub(super) struct ControlHandler(pub(super) Weak<NodeInner>);

impl Handler for ControlHandler {
    fn handle(&self, peer: Option<(u32, u32)>, request: &Frame) -> Frame {
        let Some(node) = self.0.upgrade() else {
            return Frame::Refused(Status::MCAPI_ERR_NODE_NOTINIT.code());
        };
        if node.check_working().is_err() {
            return Frame::Refused(Status::MCAPI_ERR_GENERAL.code());
        }
        // A panic here would end this connection's thread and leave the node's state
        // half-changed: the node is marked broken instead, and the caller refused.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.answer(&node, peer, request)
        }))
        .unwrap_or_else(|panic| {
            node.mark_broken("the control server", &*panic);
            Frame::Refused(Status::MCAPI_ERR_GENERAL.code())
        })
    }

    fn peer_gone(&self, peer: (u32, u32), incarnation: u64) {
        let Some(node) = self.0.upgrade() else { return };
        let lost = std::panic::AssertUnwindSafe(|| {
            let index = lock(&node.state).peer_of.get(&peer).copied();
            if let Some(i) = index {
                node.peer_event(i, PeerInput::Lost(incarnation));
            }
        });
        if let Err(panic) = std::panic::catch_unwind(lost) {
            node.mark_broken("the control server", &*panic);
        }
    }
}

impl ControlHandler {
    fn answer(&self, node: &NodeInner, peer: Option<(u32, u32)>, request: &Frame) -> Frame {
        match request {
            Frame::Hello {
                domain,
                node: n,
                to,
                peer,
                incarnation,
                reads_itself,
                fabric_addr,
                fabric_token,
            } => {
                // Meant for another node (one whose port this node took over after it
                // died, its address still published): not ours to meet.
                if *to != (node.domain_id, node.node_id) {
                    log::info!(
                        "node <{domain}, {n}> refused: its Hello is for <{}, {}>",
                        to.0,
                        to.1
                    );
                    return Frame::Refused(Status::MCAPI_ERR_NODE_INVALID.code());
                }
                let Ok(mut st) = node.live_state() else {
                    return Frame::Refused(Status::MCAPI_ERR_NODE_NOTINIT.code());
                };
                let index = match st.peer_of.get(&(*domain, *n)) {
                    Some(&i) => i,
                    None => match node.add_peer(&mut st, *domain, *n, None) {
                        Ok(i) => i,
                        Err(s) => return Frame::Refused(s.code()),
                    },
                };
                let addr = match node.peer_address(&st, index, *incarnation, fabric_addr) {
                    Ok(addr) => addr,
                    // The fabric maps no more peers (shm: 256 at once).
                    Err(e) => {
                        log::info!("node <{domain}, {n}> refused: its fabric address: {e}");
                        return Frame::Refused(Status::MCAPI_ERR_MEM_LIMIT.code());
                    }
                };
                node.peer_met(
                    &mut st,
                    index,
                    (*incarnation, *reads_itself, *fabric_token),
                    addr,
                    *peer as u16,
                );
                Frame::Welcome {
                    peer: u32::from(index),
                    incarnation: node.incarnation,
                    reads_itself: node.fab.domain.reads_made_by_reader(),
                    fabric_addr: node.fab.ep.address().to_vec(),
                    fabric_token: node.fabric_token,
                }
            }
            Frame::CreditRequest { port, want, seen } => {
                let Some(from) = peer else {
                    return Frame::Refused(Status::MCAPI_ERR_PARAMETER.code());
                };
                node.answer_credit_request(from, *port, *want, *seen)
            }
            Frame::EndpointDeleted { port, epoch } => {
                let unspent = peer.map_or(0, |from| node.forget_remote(from, *port, *epoch));
                Frame::Value(u64::from(unspent))
            }
            Frame::NodeAttribute { attribute } => match node.node_attribute(*attribute) {
                Ok(v) => Frame::Value(v),
                Err(s) => Frame::Refused(s.code()),
            },
            Frame::GetAttribute { port, attribute } => {
                let value = EndpointAttribute::from_number(*attribute).and_then(|a| {
                    node.live_state()
                        .and_then(|st| node.local_attribute(&st, *port, a))
                });
                match value {
                    Ok(v) => Frame::Value(v),
                    Err(s) => Frame::Refused(s.code()),
                }
            }
            // (A connection says which node it is, Hello, before anything else.)
            Frame::Channel { port, op } => match peer
                .ok_or(Status::MCAPI_ERR_PARAMETER)
                .and_then(|sender| node.channel_frame(*port, op, sender))
            {
                Ok(Some(attributes)) => Frame::Connected { attributes },
                Ok(None) => Frame::Value(0),
                Err(s) => Frame::Refused(s.code()),
            },
            Frame::Lookup { port } => match node.live_state() {
                // Its credit epoch: the asker's credit window is for this endpoint.
                Ok(st) => match st.endpoints.get(port) {
                    Some(ep) => Frame::Value(u64::from(ep.epoch)),
                    None => Frame::Refused(Status::MCAPI_ERR_ENDP_INVALID.code()),
                },
                Err(s) => Frame::Refused(s.code()),
            },
            _ => Frame::Refused(Status::MCAPI_ERR_PARAMETER.code()),
        }
    }
}

impl NodeInner {
    /// A credit request from node `from` (on its control connection): grants for it go back
    /// in the answer, other decisions (grants to others, recalls) over the fabric.
    pub(super) fn answer_credit_request(
        &self,
        from: (u32, u32),
        port: u32,
        want: u32,
        seen: u32,
    ) -> Frame {
        let Ok(mut st) = self.live_state() else {
            return Frame::Refused(Status::MCAPI_ERR_NODE_NOTINIT.code());
        };
        // A message taken is done with: its credit can be part of the answer.
        self.repost_taken(&mut st);
        let Some(&peer) = st.peer_of.get(&from) else {
            return Frame::Refused(Status::MCAPI_ERR_TRANSMISSION.code());
        };
        let me = SenderId(u32::from(peer));
        match st.endpoints.get(&port) {
            None => return Frame::Refused(Status::MCAPI_ERR_ENDP_INVALID.code()),
            // Spec 3.6: no messages to a connected endpoint.
            Some(ep) if ep.channel.is_connected() => {
                return Frame::Refused(Status::MCAPI_ERR_GENERAL.code())
            }
            Some(_) => {}
        }
        // The answer's grants are spent at once: slots for as many as it may grant are
        // posted first.
        let lendable = st.recv_free.saturating_sub(st.recv_held);
        let most = want.min(self.config.recv_buffers as u32).min(lendable);
        if !self.post_for_lent(&mut st, most) {
            return Frame::Refused(Status::MCAPI_ERR_MEM_LIMIT.code());
        }
        let State {
            endpoints,
            peers,
            outbox,
            recv_free,
            ..
        } = &mut *st;
        let Some(ep) = endpoints.get_mut(&port) else {
            return Frame::Refused(Status::MCAPI_ERR_ENDP_INVALID.code());
        };
        // The node's free credits with a slot for them are lent for the answer; what the
        // pool does not grant goes back.
        *recv_free -= ep.credits.lend(lendable);
        let asked = ep.credits.request(me, want, seen);
        *recv_free += ep.credits.reclaim();
        if let Err(s) = asked {
            return Frame::Refused(s.code());
        }
        let mut granted = 0u64;
        while let Some(ctl) = ep.credits.poll() {
            match ctl {
                Control::Grant(g) if g.to == me => granted += u64::from(g.credits),
                other => queue_control(peers, outbox, (port, ep.epoch), other),
            }
        }
        // With the endpoint's credit epoch: the asker's window must be for this endpoint.
        let epoch = u64::from(ep.epoch) << 32;
        self.settle_credits(&mut st, port);
        self.flush_outbox(&mut st);
        Frame::Value(granted | epoch)
    }
}
