//! The node's limits and the refusals at their edges, over real providers (shm and tcp), one
//! test at a time: nodes are threads of this process.

use mcapi::config::{Compat, Config};
use mcapi::semantics::channel::status_flags as flag;
use mcapi::{EndpointId, Node, Status};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Fabric tests take turns: on 2 cores two busy fabrics starve each other.
static FABRIC: Mutex<()> = Mutex::new(());
const WAIT: Option<Duration> = Some(Duration::from_secs(10));
const ATTR_STATUS: u32 = 8;

fn config(provider: &str, job: &str, recv_buffers: usize) -> Config {
    let mut c = Config::defaults();
    c.provider = Some(provider.into());
    c.job = format!("{job}-{}", std::process::id());
    c.recv_buffers = recv_buffers;
    c
}

fn providers() -> Vec<&'static str> {
    let mut v = vec!["shm", "tcp", "sockets"];
    v.retain(|p| {
        let ok = mcapi_ofi::Info::first(&mcapi_ofi::Hints::new().provider(*p)).is_ok();
        if !ok {
            eprintln!("skipping {p}: not offered here");
        }
        ok
    });
    v
}

/// Creates endpoints from port 100 up until the node's limit refuses one: the endpoints
/// made, and the port and status of the refused create.
fn fill(node: &Node) -> (Vec<EndpointId>, u32, Status) {
    let mut made = Vec::new();
    for port in 100..100 + 2 * mcapi::MAX_ENDPOINTS as u32 {
        match node.endpoint_create(port) {
            Ok(ep) => made.push(ep),
            Err(e) => return (made, port, e),
        }
    }
    panic!("no endpoint_create was refused");
}

/// Sends `count` messages to `to` and receives them there, each within the timeout.
fn round_trip(from_node: &Node, from: EndpointId, to_node: &Node, to: EndpointId, count: u32) {
    to_node
        .set_endpoint_timeout(to, Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 8];
    for i in 0..count {
        from_node.msg_send(from, to, &i.to_le_bytes(), 0).unwrap();
        let n = to_node
            .msg_recv(to, &mut buf)
            .unwrap_or_else(|e| panic!("message {i} to the re-created endpoint: {e:?}"));
        assert_eq!(&buf[..n], &i.to_le_bytes());
    }
}

/// A create refused at the node's endpoint limit leaves nothing behind: refused again and
/// again, and once two endpoints are deleted the same port is created and gets every
/// message sent to it.
#[test]
fn a_create_refused_at_the_endpoint_limit_leaves_nothing_behind() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let cfg = config(prov, "refused-create", 100);
        let rx = Node::initialize(0, 11, cfg.clone()).unwrap();
        let tx = Node::initialize(0, 12, cfg).unwrap();
        let from = tx.endpoint_create(1).unwrap();
        let (made, port, _) = fill(&rx);
        for _ in 0..5 {
            assert!(rx.endpoint_create(port).is_err(), "{prov}: still full");
        }
        rx.endpoint_delete(made[0]).unwrap();
        rx.endpoint_delete(made[1]).unwrap();
        let again = rx
            .endpoint_create(port)
            .unwrap_or_else(|e| panic!("{prov}: port {port} after two deletes: {e:?}"));
        let to = tx.endpoint_get(0, 11, port, WAIT).unwrap();
        assert_eq!(to, again);
        round_trip(&tx, from, &rx, again, 300);
        tx.finalize().unwrap();
        rx.finalize().unwrap();
    }
}

/// A node creates `MCAPI_MAX_ENDPOINTS` endpoints at the default settings on every
/// provider (they share the node's receive pool, whatever the provider's posted-receive
/// limit), and the next create is `MCAPI_ERR_PORT_INVALID` (spec 4.2.1, "no more available
/// ports"); `MCAPI_ERR_ENDP_LIMIT` in compatibility mode.
#[test]
fn a_create_beyond_max_endpoints_is_port_invalid() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        for compat in [Compat::Spec, Compat::Mca] {
            let mut cfg = config(prov, "create-limit", 64);
            cfg.compat = compat;
            let node = Node::initialize(0, 21, cfg).unwrap();
            let (made, port, status) = fill(&node);
            let want = match compat {
                Compat::Spec => Status::MCAPI_ERR_PORT_INVALID,
                Compat::Mca => Status::MCAPI_ERR_ENDP_LIMIT,
            };
            assert_eq!(
                status,
                want,
                "{prov}: endpoint {} (port {port})",
                made.len() + 1
            );
            assert_eq!(made.len(), mcapi::MAX_ENDPOINTS, "{prov}");
            node.finalize().unwrap();
        }
    }
}

/// Every one of `MCAPI_MAX_ENDPOINTS` endpoints of a node receives messages from another
/// node and sends to it, at the default settings: each endpoint gets a message in each of
/// two rounds (one round queues as many messages as the node's pool has slots), then
/// answers; endpoints are deleted and created again and lose nothing sent after.
#[test]
fn every_endpoint_of_a_full_node_exchanges_messages() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let cfg = config(prov, "full-node", Config::defaults().recv_buffers);
        let rx = Node::initialize(0, 31, cfg.clone()).unwrap();
        let tx = Node::initialize(0, 32, cfg).unwrap();
        let from = tx.endpoint_create(1).unwrap();
        let (made, _, _) = fill(&rx);
        assert_eq!(made.len(), mcapi::MAX_ENDPOINTS, "{prov}");
        let rx_thread = {
            let made = made.clone();
            let rx = &rx;
            move || {
                let mut buf = [0u8; 16];
                for k in 0..2u32 {
                    for (i, &ep) in made.iter().enumerate() {
                        let n = rx.msg_recv(ep, &mut buf).unwrap();
                        assert_eq!(&buf[..n], &[i as u32, k].map(u32::to_le_bytes).concat()[..]);
                    }
                }
                for (i, &ep) in made.iter().enumerate() {
                    rx.msg_send(ep, from, &(i as u32).to_le_bytes(), 0).unwrap();
                }
            }
        };
        std::thread::scope(|s| {
            let receiver = s.spawn(rx_thread);
            for k in 0..2u32 {
                for (i, &ep) in made.iter().enumerate() {
                    let to = tx.endpoint_get(0, 31, ep.port(), WAIT).unwrap();
                    tx.msg_send(from, to, &[i as u32, k].map(u32::to_le_bytes).concat(), 0)
                        .unwrap_or_else(|e| panic!("{prov}: message {k} to endpoint {i}: {e:?}"));
                }
            }
            let mut buf = [0u8; 16];
            for i in 0..made.len() as u32 {
                let n = tx.msg_recv(from, &mut buf).unwrap();
                assert_eq!(&buf[..n], &i.to_le_bytes(), "{prov}");
            }
            receiver.join().unwrap();
        });
        // Deleted and created again: the new endpoints get every message.
        for &ep in &made[..8] {
            rx.endpoint_delete(ep).unwrap();
        }
        for &ep in &made[..8] {
            let again = rx.endpoint_create(ep.port()).unwrap();
            round_trip(&tx, from, &rx, again, 100);
        }
        tx.finalize().unwrap();
        rx.finalize().unwrap();
    }
}

/// An endpoint connected as a channel's send side sends no messages: `MCAPI_ERR_GENERAL`,
/// as sending to a connected endpoint is (spec 4.3.1, 4.3.2), from `msg_send` and
/// `msg_send_i` alike, and nothing arrives; after the close it sends messages again.
#[test]
fn a_connected_endpoint_sends_no_messages() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let cfg = config(prov, "connected-sender", 16);
        let a = Node::initialize(0, 31, cfg.clone()).unwrap();
        let b = Node::initialize(0, 32, cfg).unwrap();
        let tx = a.endpoint_create(10).unwrap();
        let rx = b.endpoint_create(20).unwrap();
        let mailbox = b.endpoint_create(30).unwrap();
        let to_rx = a.endpoint_get(0, 32, 20, WAIT).unwrap();
        let to_mailbox = a.endpoint_get(0, 32, 30, WAIT).unwrap();
        a.msg_send(tx, to_mailbox, b"before", 0).unwrap();
        let q = a.pktchan_connect_i(tx, to_rx).unwrap();
        a.wait(q, None, WAIT).unwrap();
        assert_ne!(
            a.endpoint_get_attribute(tx, ATTR_STATUS).unwrap() & flag::CONNECTED,
            0
        );
        assert_eq!(
            a.msg_send(tx, to_mailbox, b"connected", 0),
            Err(Status::MCAPI_ERR_GENERAL),
            "{prov}: msg_send"
        );
        assert_eq!(
            a.msg_send_i(tx, to_mailbox, b"connected", 0).err(),
            Some(Status::MCAPI_ERR_GENERAL),
            "{prov}: msg_send_i"
        );
        // Opened too.
        let (hs, qs) = a.pktchan_send_open_i(tx).unwrap();
        let (hr, qr) = b.pktchan_recv_open_i(rx).unwrap();
        b.wait(qr, None, WAIT).unwrap();
        a.wait(qs, None, WAIT).unwrap();
        assert_eq!(
            a.msg_send(tx, to_mailbox, b"open", 0),
            Err(Status::MCAPI_ERR_GENERAL),
            "{prov}: msg_send on an open channel"
        );
        let qs = a.pktchan_send_close_i(hs).unwrap();
        let qr = b.pktchan_recv_close_i(hr).unwrap();
        a.wait(qs, None, WAIT).unwrap();
        b.wait(qr, None, WAIT).unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        while a.endpoint_get_attribute(tx, ATTR_STATUS).unwrap() != 0 {
            assert!(Instant::now() < until, "{prov}: never disconnected");
            std::thread::sleep(Duration::from_millis(1));
        }
        a.msg_send(tx, to_mailbox, b"after", 0).unwrap();
        let mut buf = [0u8; 16];
        let n = b.msg_recv(mailbox, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"before");
        let n = b.msg_recv(mailbox, &mut buf).unwrap();
        assert_eq!(
            &buf[..n],
            b"after",
            "{prov}: only what was sent unconnected arrives"
        );
        assert_eq!(b.msg_available(mailbox).unwrap(), 0);
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

/// Waits until `what` holds, for up to 10 s.
fn until(what: &str, mut done: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < end, "never: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// An endpoint connected to an endpoint whose node finalizes before either opened is
/// unconnected again: its node can delete it and messages reach it. A third node that made
/// a connect and left changes nothing (spec 4.4.1).
#[test]
fn a_connection_whose_other_node_is_gone_before_any_open_is_undone() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let cfg = config(prov, "gone-before-open", 16);
        let a = Node::initialize(0, 40, cfg.clone()).unwrap();
        let b = Node::initialize(0, 41, cfg.clone()).unwrap();
        let third = Node::initialize(0, 42, cfg.clone()).unwrap();
        let sender = Node::initialize(0, 43, cfg).unwrap();
        let stuck = b.endpoint_create(5).unwrap();
        let (kept_tx, kept_rx) = (b.endpoint_create(7).unwrap(), b.endpoint_create(8).unwrap());
        let theirs = a.endpoint_create(6).unwrap();
        let to_stuck = a.endpoint_get(0, 41, 5, WAIT).unwrap();
        let q = a.sclchan_connect_i(to_stuck, theirs).unwrap();
        a.wait(q, None, WAIT).unwrap();
        let (t7, t8) = (
            third.endpoint_get(0, 41, 7, WAIT).unwrap(),
            third.endpoint_get(0, 41, 8, WAIT).unwrap(),
        );
        let q = third.sclchan_connect_i(t7, t8).unwrap();
        third.wait(q, None, WAIT).unwrap();
        assert_ne!(
            b.endpoint_get_attribute(stuck, ATTR_STATUS).unwrap() & flag::CONNECTED,
            0
        );
        a.finalize().unwrap();
        third.finalize().unwrap();
        until(&format!("{prov}: endpoint 5 unconnected"), || {
            b.endpoint_get_attribute(stuck, ATTR_STATUS).unwrap() == 0
        });
        let from = sender.endpoint_create(1).unwrap();
        let to = sender.endpoint_get(0, 41, 5, WAIT).unwrap();
        sender.msg_send(from, to, b"unstuck", 0).unwrap();
        let mut buf = [0u8; 16];
        let n = b.msg_recv(stuck, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"unstuck");
        // The third node's connect stands: both its endpoints are on a live node.
        for ep in [kept_tx, kept_rx] {
            let status = b.endpoint_get_attribute(ep, ATTR_STATUS).unwrap();
            assert_ne!(
                status & flag::CONNECTED,
                0,
                "{prov}: a third party's connect"
            );
        }
        assert_eq!(
            b.endpoint_delete(kept_tx),
            Err(Status::MCAPI_ERR_CHAN_CONNECTED)
        );
        b.endpoint_delete(stuck).unwrap();
        sender.finalize().unwrap();
        b.finalize().unwrap();
    }
}

/// Senders that finalized leave no trace at the receiving node: after more sender nodes
/// than an endpoint serves at once (256) and the shm provider maps (256 peers) have come,
/// sent and gone, one by one, a new sender still gets the endpoint and its message arrives.
#[test]
fn senders_that_finalized_free_their_place_at_the_receiver() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let cfg = config(prov, "many-senders", 16);
        let rx = Node::initialize(0, 50, cfg.clone()).unwrap();
        let ep = rx.endpoint_create(5).unwrap();
        rx.set_endpoint_timeout(ep, Some(Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 8];
        for i in 0..261u32 {
            let s = Node::initialize(0, 1000 + i, cfg.clone()).unwrap();
            let to = s
                .endpoint_get(0, 50, 5, WAIT)
                .unwrap_or_else(|e| panic!("{prov}: sender {i}: endpoint_get: {e:?}"));
            // Every 64th sends (one whose credits the receiver still counts for a departed
            // sender waits up to its grace).
            if i % 64 == 0 || i == 260 {
                let from = s.endpoint_create(1).unwrap();
                s.msg_send(from, to, &i.to_le_bytes(), 0)
                    .unwrap_or_else(|e| panic!("{prov}: sender {i}: msg_send: {e:?}"));
                let n = rx.msg_recv(ep, &mut buf).unwrap();
                assert_eq!(&buf[..n], &i.to_le_bytes());
            }
            s.finalize().unwrap();
        }
        rx.finalize().unwrap();
    }
}

/// 257 sender nodes alive at once against one endpoint (it serves 256 senders; shm also maps
/// at most 256 peers per node), on shm: the 257th is refused with `MCAPI_ERR_MEM_LIMIT` (at its
/// `endpoint_get` or its send), the 256 before it are all delivered, and once one of them
/// finalizes and its departure grace ends, the 257th gets through; nothing is lost.
#[test]
fn the_257th_live_sender_is_refused_cleanly_and_gets_in_later() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    // shm only: a tcp;ofi_rxm node holds about 75 MiB of provider buffers, so 258 of them
    // in one process need about 20 GiB. The limit is the endpoint's (its credit pool and
    // reorder state serve 256 senders), the same on every provider; tcp's senders come and
    // go in `senders_that_finalized_free_their_place_at_the_receiver`.
    for prov in providers().into_iter().filter(|p| *p == "shm") {
        let cfg = config(prov, "live-senders", 16);
        let rx = Node::initialize(0, 60, cfg.clone()).unwrap();
        let ep = rx.endpoint_create(5).unwrap();
        rx.set_endpoint_timeout(ep, WAIT).unwrap();
        let mut buf = [0u8; 8];
        let mut senders = Vec::new();
        for i in 0..256u32 {
            let s = Node::initialize(0, 2000 + i, cfg.clone()).unwrap();
            let to = s
                .endpoint_get(0, 60, 5, WAIT)
                .unwrap_or_else(|e| panic!("{prov}: sender {i}: endpoint_get: {e:?}"));
            let from = s.endpoint_create(1).unwrap();
            s.msg_send(from, to, &i.to_le_bytes(), 0)
                .unwrap_or_else(|e| panic!("{prov}: sender {i}: msg_send: {e:?}"));
            let n = rx.msg_recv(ep, &mut buf).unwrap();
            assert_eq!(&buf[..n], &i.to_le_bytes(), "{prov}: sender {i}");
            senders.push((s, from, to));
        }
        let late = Node::initialize(0, 2256, cfg.clone()).unwrap();
        let from = late.endpoint_create(1).unwrap();
        let refused = late
            .endpoint_get(0, 60, 5, WAIT)
            .and_then(|to| late.msg_send(from, to, b"late", 0));
        assert_eq!(
            refused,
            Err(Status::MCAPI_ERR_MEM_LIMIT),
            "{prov}: sender 256"
        );
        // One leaves; its place is free once its departure grace (2 s) has passed.
        senders.remove(0).0.finalize().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let sent = loop {
            let r = late
                .endpoint_get(0, 60, 5, WAIT)
                .and_then(|to| late.msg_send(from, to, b"late", 0));
            match r {
                Err(Status::MCAPI_ERR_MEM_LIMIT) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                r => break r,
            }
        };
        assert_eq!(sent, Ok(()), "{prov}: sender 256 after one left");
        let n = rx.msg_recv(ep, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"late");
        // The senders that stayed still reach the endpoint.
        for (i, (s, from, to)) in senders.iter().enumerate().step_by(51) {
            s.msg_send(*from, *to, &(i as u32).to_le_bytes(), 0)
                .unwrap();
            let n = rx.msg_recv(ep, &mut buf).unwrap();
            assert_eq!(&buf[..n], &(i as u32).to_le_bytes(), "{prov}: again {i}");
        }
        late.finalize().unwrap();
        for (s, _, _) in senders {
            s.finalize().unwrap();
        }
        rx.finalize().unwrap();
    }
}
