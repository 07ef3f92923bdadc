//! What runs besides the application's calls: the control-plane handler, background
//! progress, opening the fabric, and the blocking-call backoff.

use super::*;

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
        let index = lock(&node.state).peer_of.get(&peer).copied();
        if let Some(i) = index {
            node.peer_event(i, PeerInput::Lost(incarnation));
        }
    }
}

impl ControlHandler {
    fn answer(&self, node: &NodeInner, peer: Option<(u32, u32)>, request: &Frame) -> Frame {
        match request {
            Frame::Hello {
                domain,
                node: n,
                peer,
                incarnation,
                fabric_addr,
            } => {
                let Ok(addr) = node.fab.av.insert(fabric_addr) else {
                    return Frame::Refused(Status::MCAPI_ERR_TRANSMISSION.code());
                };
                let Ok(mut st) = node.live_state() else {
                    return Frame::Refused(Status::MCAPI_ERR_NODE_NOTINIT.code());
                };
                let index = match st.peer_of.get(&(*domain, *n)) {
                    Some(&i) => i,
                    None => match node.add_peer(&mut st, *domain, *n, Some(addr)) {
                        Ok(i) => i,
                        Err(s) => return Frame::Refused(s.code()),
                    },
                };
                node.peer_met(&mut st, index, *incarnation, addr, *peer as u16);
                Frame::Welcome {
                    peer: u32::from(index),
                    incarnation: node.incarnation,
                    fabric_addr: node.fab.ep.address().to_vec(),
                }
            }
            Frame::CreditRequest { port, want, seen } => {
                let Some(from) = peer else {
                    return Frame::Refused(Status::MCAPI_ERR_PARAMETER.code());
                };
                node.answer_credit_request(from, *port, *want, *seen)
            }
            Frame::EndpointDeleted { port } => {
                if let Some(from) = peer {
                    node.forget_remote(from, *port);
                }
                Frame::Value(0)
            }
            Frame::NodeAttribute { attribute } => match node.attributes.get(*attribute) {
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
            Frame::Channel {
                op,
                port,
                args,
                bytes,
            } => match node.channel_frame(*op, *port, *args, bytes) {
                Ok(v) => Frame::Value(v),
                Err(s) => Frame::Refused(s.code()),
            },
            Frame::Lookup { port } => match node.live_state() {
                Ok(st) if st.endpoints.contains_key(port) => Frame::Value(1),
                Ok(_) => Frame::Refused(Status::MCAPI_ERR_ENDP_INVALID.code()),
                Err(s) => Frame::Refused(s.code()),
            },
            _ => Frame::Refused(Status::MCAPI_ERR_PARAMETER.code()),
        }
    }
}

/// Progresses a node while no application thread does: with manual-progress providers
/// (shm, tcp;ofi_rxm) nothing arrives, and shm does not even connect, unless someone reads
/// the CQ. It never waits for the state lock: a thread inside an MCAPI call is already
/// progressing. It polls often while traffic flows and backs off to a few milliseconds
/// when the node is idle.
/// How often the background thread looks for control connections closed by the other end.
const LINK_WATCH_PERIOD: Duration = Duration::from_millis(5);

/// The background thread's body, guarded: a panic marks the node broken (every later
/// call fails with `MCAPI_ERR_GENERAL`) instead of silently stopping its progress.
pub(super) fn background_progress(node: Weak<NodeInner>) {
    let run = std::panic::AssertUnwindSafe(|| progress_in_background(node.clone()));
    if let Err(panic) = std::panic::catch_unwind(run) {
        if let Some(node) = node.upgrade() {
            node.mark_broken("the background progress thread", &*panic);
        }
    }
}

fn progress_in_background(node: Weak<NodeInner>) {
    let mut pause = Duration::from_micros(100);
    let mut seen_app_progress = u64::MAX;
    let mut seen_channel_use = match node.upgrade() {
        Some(node) => node.channels.touch_memory(),
        None => return,
    };
    let mut next_watch = Instant::now();
    loop {
        std::thread::sleep(pause);
        let Some(node) = node.upgrade() else { return };
        #[cfg(test)]
        if node.panic_in_background.swap(false, Ordering::Relaxed) {
            panic!("injected");
        }
        node.channels.close_retired();
        if Instant::now() >= next_watch {
            node.watch_links();
            next_watch = Instant::now() + LINK_WATCH_PERIOD;
        }
        // While application threads progress the node themselves, stay out of their way
        // (no lock traffic, no preemption of a busy core).
        let app = node.app_progress.load(Ordering::Relaxed);
        if app != seen_app_progress {
            seen_app_progress = app;
            pause = Duration::from_millis(1);
            // Application calls progress the message endpoint and the channel side they
            // use; the other sides (a receiver nobody waits on yet, whose CQ must be read
            // for the provider to connect and take data) are ours.
            node.channels.progress_idle(&mut seen_channel_use);
            node.flush_completed();
            continue;
        }
        let Ok(mut st) = node.state.try_lock() else {
            pause = Duration::from_millis(1);
            continue;
        };
        if st.finalized {
            return;
        }
        let busy = node.progress_counting(&mut st) > 0;
        drop(st);
        let busy = node.channels.progress_idle(&mut seen_channel_use) > 0 || busy;
        node.flush_completed();
        pause = if busy {
            Duration::from_micros(100)
        } else {
            (pause * 2).min(Duration::from_millis(5))
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panic in the background progress thread is caught: the node reports it once and
    /// every later call fails with MCAPI_ERR_GENERAL instead of hanging on a node that no
    /// longer progresses.
    #[test]
    fn a_panic_in_the_background_thread_makes_every_later_call_fail() {
        let mut config = Config::defaults();
        config.provider = Some("tcp".into());
        config.job = format!("background-panic-{}", std::process::id());
        config.recv_buffers = 4;
        let node = Node::initialize(0, 7, config).expect("a node over tcp");
        let ep = node.endpoint_create(1).expect("an endpoint");
        node.msg_send(ep, ep, b"before", 0).expect("works before");
        node.inner
            .panic_in_background
            .store(true, Ordering::Relaxed);
        let until = Instant::now() + Duration::from_secs(20);
        while node.inner.broken.get().is_none() {
            assert!(Instant::now() < until, "the panic was never recorded");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(node.inner.broken.get().unwrap().contains("injected"));
        assert_eq!(node.endpoint_create(2), Err(Status::MCAPI_ERR_GENERAL));
        assert_eq!(
            node.msg_send(ep, ep, b"after", 0),
            Err(Status::MCAPI_ERR_GENERAL)
        );
        let mut buf = [0u8; 8];
        assert_eq!(node.msg_recv(ep, &mut buf), Err(Status::MCAPI_ERR_GENERAL));
    }
}
