//! The node's limits and the refusals at their edges, over real providers (shm and tcp), one
//! test at a time: nodes are threads of this process.

use mcapi::config::Config;
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
    let mut v = vec!["shm", "tcp"];
    v.retain(|p| {
        let ok = mcapi_ofi::Info::first(&mcapi_ofi::Hints::new().provider(*p)).is_ok();
        if !ok {
            eprintln!("skipping {p}: not offered here");
        }
        ok
    });
    v
}

/// Creates endpoints from port 100 up until the node's receive limit refuses one: the
/// endpoints made, and the port and status of the refused create.
fn fill(node: &Node) -> (Vec<EndpointId>, u32, Status) {
    let mut made = Vec::new();
    for port in 100..400 {
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

/// A create refused at the node's receive limit leaves nothing behind: refused again and
/// again it leaks no posted receive, and once two endpoints are deleted the same port is
/// created and gets every message sent to it.
#[test]
fn a_create_refused_at_the_receive_limit_leaves_nothing_posted() {
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

/// The create beyond the node's receive limit is `MCAPI_ERR_MEM_LIMIT` on every provider
/// (the 16th endpoint at 64 buffers on shm, later on tcp).
#[test]
fn a_create_beyond_the_receive_limit_is_mem_limit() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let node = Node::initialize(0, 21, config(prov, "create-limit", 64)).unwrap();
        let (made, port, status) = fill(&node);
        assert_eq!(
            status,
            Status::MCAPI_ERR_MEM_LIMIT,
            "{prov}: endpoint {} (port {port})",
            made.len() + 1
        );
        node.finalize().unwrap();
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
