//! Credit control over the fabric: grants, recalls, requests, returns, and the outbox.

use super::inner::NodeInner;
use super::state::{Peer, State};
use crate::semantics::credit::{Control, SenderId};
use crate::semantics::wire::{Kind, Tag};
use std::collections::VecDeque;

/// Queues a credit decision of endpoint `port` for the fabric.
pub(super) fn queue_control(
    peers: &[Peer],
    outbox: &mut VecDeque<(u16, Tag, u64)>,
    port: u32,
    ctl: Control,
) {
    let (kind, to, n) = match ctl {
        Control::Grant(g) => (Kind::Grant, g.to, g.credits),
        Control::Recall { from, credits } => (Kind::Recall, from, credits),
    };
    let peer = to.0 as u16;
    if let Some(p) = peers.get(peer as usize) {
        outbox.push_back((peer, control_tag(kind, port, p.index_at_peer), u64::from(n)));
    }
}

pub(super) fn control_tag(kind: Kind, port: u32, peer: u16) -> Tag {
    Tag {
        kind,
        priority: 0,
        port,
        peer,
        seq: 0,
    }
}

impl NodeInner {
    pub(super) fn control_arrived(&self, st: &mut State, tag: Tag, data: u64) {
        let from = tag.peer;
        if from as usize >= st.peers.len() {
            // No peer of ours (a stranger or a corrupt tag): it may change nothing.
            return;
        }
        match tag.kind {
            Kind::Grant | Kind::Recall => {
                let Some(remote) = st.remotes.get_mut(&(from, tag.port)) else {
                    return;
                };
                if tag.kind == Kind::Grant {
                    remote.window.add(data as u32);
                } else {
                    let back = remote.window.recall(data as u32);
                    if back > 0 {
                        let index = st.peers[from as usize].index_at_peer;
                        st.outbox.push_back((
                            from,
                            control_tag(Kind::Return, tag.port, index),
                            u64::from(back),
                        ));
                    }
                }
            }
            Kind::Request | Kind::Return => {
                let State {
                    endpoints,
                    recv_free,
                    recv_held,
                    ..
                } = st;
                let Some(ep) = endpoints.get_mut(&tag.port) else {
                    return;
                };
                let sender = SenderId(u32::from(from));
                let r = if tag.kind == Kind::Request {
                    // Lent the node's free credits for the answer; `settle_credits` takes
                    // back what was not granted.
                    *recv_free -= ep.credits.lend(recv_free.saturating_sub(*recv_held));
                    ep.credits.request(sender, (data >> 32) as u32, data as u32)
                } else {
                    ep.credits.returned(sender, data as u32)
                };
                if let Err(e) = r {
                    // A sender's own accounting error; the pool stays as it was.
                    log::debug!("credit message from peer {from} to port {}: {e}", tag.port);
                }
                self.settle_credits(st, tag.port);
            }
            Kind::RndvDone => self.rndv_done(st, from, data),
            Kind::Message => {}
        }
    }

    /// Sends the control messages queued, once every credit lent has a receive slot posted
    /// (a grant among them may be spent at once; until then they all wait).
    pub(super) fn flush_outbox(&self, st: &mut State) {
        if !self.post_for_lent(st, 0) {
            return;
        }
        while let Some(&(peer, tag, data)) = st.outbox.front() {
            let Some(p) = st.peers.get(peer as usize) else {
                st.outbox.pop_front();
                continue;
            };
            if !p.is_alive() {
                st.outbox.pop_front();
                continue;
            }
            match self
                .fab
                .ep
                .inject_data(&tag.encode().to_le_bytes(), data, p.addr)
            {
                Ok(()) => {
                    st.outbox.pop_front();
                }
                Err(e) if e.is_again() => break,
                Err(_) => {
                    st.outbox.pop_front();
                }
            }
        }
    }
}
