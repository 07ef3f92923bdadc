//! Credit control over the fabric: grants, recalls, requests, returns, and the outbox.

use super::inner::NodeInner;
use super::state::{Peer, State};
use crate::semantics::credit::{Control, SenderId};
use crate::semantics::wire::{Kind, Tag};
use std::collections::VecDeque;

/// Queues a credit decision of endpoint `port` (of credit epoch `epoch`) for the fabric.
pub(super) fn queue_control(
    peers: &[Peer],
    outbox: &mut VecDeque<(u16, Tag, u64)>,
    (port, epoch): (u32, u16),
    ctl: Control,
) {
    let (kind, to, n) = match ctl {
        Control::Grant(g) => (Kind::Grant, g.to, g.credits),
        Control::Recall { from, credits } => (Kind::Recall, from, credits),
    };
    let peer = to.0 as u16;
    if let Some(p) = peers.get(peer as usize) {
        let tag = control_tag(kind, (port, epoch), p.index_at_peer);
        outbox.push_back((peer, tag, u64::from(n)));
    }
}

/// Bytes of a fabric control message: its tag, then the receiving run's fabric token
/// (`NodeInner::fabric_token`, learnt in the authenticated handshake); its number goes as
/// CQ data.
pub(super) const CONTROL_LEN: usize = 16;

/// A control message's bytes.
pub(super) fn encode_control(tag: Tag, token: u64) -> [u8; CONTROL_LEN] {
    let mut b = [0u8; CONTROL_LEN];
    b[..8].copy_from_slice(&tag.encode().to_le_bytes());
    b[8..].copy_from_slice(&token.to_le_bytes());
    b
}

/// The tag of a control message's bytes if they carry `token` (this run's): anything else
/// comes from someone who never passed the handshake with it (a stranger on the fabric,
/// or a run of a peer that met an earlier run of ours) and changes nothing.
pub(super) fn decode_control(b: &[u8; CONTROL_LEN], token: u64) -> Option<Tag> {
    let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
    (word(8) == token).then(|| Tag::decode(word(0))).flatten()
}

/// A credit request's priority field (unused by controls otherwise) when its sender does
/// not know the endpoint's epoch.
pub(super) const EPOCH_UNKNOWN: u8 = 1;

/// The tag of a control message about endpoint `port` of credit epoch `epoch` (carried in
/// the sequence field, which controls do not use otherwise).
pub(super) fn control_tag(kind: Kind, (port, epoch): (u32, u16), peer: u16) -> Tag {
    Tag {
        kind,
        priority: 0,
        port,
        peer,
        seq: epoch,
    }
}

impl NodeInner {
    pub(super) fn control_arrived(&self, st: &mut State, tag: Tag, data: u64) {
        let from = tag.peer;
        if from as usize >= st.peers.len() {
            // No peer of ours (a stranger or a corrupt tag): it may change nothing.
            return;
        }
        let epoch = tag.seq;
        match tag.kind {
            Kind::Grant | Kind::Recall => {
                let mut remote = st.remotes.get_mut(&(from, tag.port));
                if remote.as_mut().is_some_and(|r| !r.accepts(epoch)) {
                    remote = None;
                }
                let back = match (remote, tag.kind) {
                    (Some(remote), Kind::Grant) => {
                        remote.window.add(data as u32);
                        0
                    }
                    (Some(remote), _) => remote.window.recall(data as u32),
                    // A grant of an endpoint we no longer send to (deleted, or replaced
                    // at its port): the credits go back to its node, never lost.
                    (None, Kind::Grant) => data as u32,
                    // A recall of one: we hold nothing of it any more.
                    (None, _) => 0,
                };
                if back > 0 {
                    let index = st.peers[from as usize].index_at_peer;
                    let tag = control_tag(Kind::Return, (tag.port, epoch), index);
                    st.outbox.push_back((from, tag, u64::from(back)));
                }
            }
            Kind::Request if !st.peers[from as usize].is_alive() => {
                // In the name of a peer that is leaving or left (forged, or late): a grant
                // to it would never be sent, so its credits would never come back.
            }
            Kind::Return
                if !st.peers[from as usize].is_alive()
                    && !st.peers[from as usize].life.is_departing() =>
            {
                // In the name of a peer that left (forged, or late): what it held was
                // reclaimed when it went. (One that is leaving still returns what it held,
                // strays of deleted endpoints among them.)
            }
            Kind::Request | Kind::Return => {
                let State {
                    endpoints,
                    recv_free,
                    recv_held,
                    recv_strays,
                    ..
                } = st;
                // A request of a sender that does not know the epoch (we restarted since it
                // last sent here) is for whichever endpoint is at the port.
                let any_epoch = tag.kind == Kind::Request && tag.priority == EPOCH_UNKNOWN;
                let Some(ep) = endpoints
                    .get_mut(&tag.port)
                    .filter(|e| any_epoch || e.epoch == epoch)
                else {
                    if tag.kind == Kind::Return {
                        // Credits of an endpoint deleted since: counted as held by its
                        // senders when it went (strays), they are the node's again.
                        let back = (data as u32).min(*recv_strays);
                        *recv_strays -= back;
                        *recv_free += back;
                        if back > 0 && !st.hungry.is_empty() {
                            let p = st.hungry[0];
                            self.settle_credits(st, p);
                        }
                    }
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
            Kind::Flush | Kind::Message => {}
        }
    }

    /// Queues the return of `credits` lent by the endpoint `remote` (peer, port) of
    /// credit epoch `epoch` to its node: they go back to it even once the endpoint is gone.
    pub(super) fn return_credits(
        &self,
        st: &mut State,
        remote: (u16, u32),
        (epoch, credits): (u16, u32),
    ) {
        let Some(p) = st.peers.get(remote.0 as usize) else {
            return;
        };
        let tag = control_tag(Kind::Return, (remote.1, epoch), p.index_at_peer);
        st.outbox.push_back((remote.0, tag, u64::from(credits)));
        self.flush_outbox(st);
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
            let bytes = encode_control(tag, p.fabric_token);
            match self.fab.ep.inject_data(&bytes, data, p.addr) {
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

#[cfg(test)]
#[path = "credit_plane_tests.rs"]
mod tests;
