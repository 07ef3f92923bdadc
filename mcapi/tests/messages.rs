//! MCAPI messages between nodes over real providers (shm and tcp), one test at a time.

use mcapi::config::{Compat, Config};
use mcapi::{EndpointId, Node, RecvBuffer, SendBuffer, Status};
use std::sync::Mutex;
use std::time::Duration;

/// Fabric tests take turns: on 2 cores two busy fabrics starve each other.
static FABRIC: Mutex<()> = Mutex::new(());

fn config(provider: &str, job: &str) -> Config {
    let mut c = Config::defaults();
    c.provider = Some(provider.into());
    c.job = format!("{job}-{}", std::process::id());
    c.recv_buffers = 16;
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

#[test]
fn priorities_and_fifo_between_two_nodes() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let cfg = config(prov, "prio");
        let a = Node::initialize(0, 1, cfg.clone()).unwrap();
        let b = Node::initialize(0, 2, cfg).unwrap();
        assert_eq!(a.provider(), b.provider());
        let rx = b.endpoint_create(7).unwrap();
        let tx = a
            .endpoint_create(mcapi::semantics::endpoint_id::PORT_ANY)
            .unwrap();
        let to = a
            .endpoint_get(0, 2, 7, Some(Duration::from_secs(10)))
            .unwrap();
        assert_eq!(to, rx);
        // Fill the receiver without it reading: mixed priorities.
        for i in 0..12u32 {
            let prio = [3, 0, 5][i as usize % 3];
            a.msg_send(tx, to, &i.to_le_bytes(), prio).unwrap();
        }
        // Wait until all are queued, then expect priority order, FIFO within a priority.
        let start = std::time::Instant::now();
        while b.msg_available(rx).unwrap() < 12 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "messages did not arrive"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut got = Vec::new();
        let mut buf = [0u8; 16];
        for _ in 0..12 {
            let n = b.msg_recv(rx, &mut buf).unwrap();
            got.push(u32::from_le_bytes(buf[..n].try_into().unwrap()));
        }
        assert_eq!(got, vec![1, 4, 7, 10, 0, 3, 6, 9, 2, 5, 8, 11], "{prov}");
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

/// The buffer of a message `msg_recv` took goes back to the fabric later (by the next
/// receive or CQ read): a sender blocked on a full endpoint still resumes when the
/// receiver takes one message and then makes no call at all (the background thread posts
/// it). (`endpoint_attributes_local_and_remote` checks that `NUM_RECV_BUFFERS` counts the
/// buffer free at once.)
#[test]
fn a_message_taken_frees_its_buffer_without_another_call() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let mut cfg = config(prov, "taken");
        cfg.recv_buffers = 4;
        let a = Node::initialize(0, 5, cfg.clone()).unwrap();
        let b = Node::initialize(0, 6, cfg).unwrap();
        let rx = b.endpoint_create(1).unwrap();
        let tx = a.endpoint_create(1).unwrap();
        let to = a.endpoint_get(0, 6, 1, None).unwrap();
        for i in 0..4u8 {
            a.msg_send(tx, to, &[i], 0).unwrap();
        }
        let fifth = {
            let a = a.clone();
            std::thread::spawn(move || a.msg_send(tx, to, &[4], 0))
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !fifth.is_finished(),
            "{prov}: a fifth send found no full endpoint"
        );
        let mut buf = [0u8; 8];
        assert_eq!(b.msg_recv(rx, &mut buf), Ok(1));
        assert_eq!(buf[0], 0, "{prov}");
        // No call on b from here until the fifth send is through.
        let start = std::time::Instant::now();
        while !fifth.is_finished() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{prov}: the sender never got the buffer back"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(fifth.join().unwrap(), Ok(()), "{prov}");
        for i in 1..5u8 {
            assert_eq!(b.msg_recv(rx, &mut buf), Ok(1));
            assert_eq!(buf[0], i, "{prov}: order");
        }
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

#[test]
fn sender_outrunning_receiver_blocks_and_loses_nothing() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let cfg = config(prov, "flow");
        let a = Node::initialize(0, 3, cfg.clone()).unwrap();
        let b = Node::initialize(0, 4, cfg).unwrap();
        let rx = b.endpoint_create(1).unwrap();
        const COUNT: u32 = 20_000;
        let sender = {
            let a = a.clone();
            std::thread::spawn(move || {
                let tx = a.endpoint_create(1).unwrap();
                let to = a.endpoint_get(0, 4, 1, None).unwrap();
                for i in 0..COUNT {
                    // Sizes from 4 B to above the inject size.
                    let len = 4 + (i as usize * 37) % 3000;
                    let mut msg = vec![(i % 251) as u8; len];
                    msg[..4].copy_from_slice(&i.to_le_bytes());
                    a.msg_send(tx, to, &msg, 1).unwrap();
                }
            })
        };
        let mut buf = vec![0u8; 4096];
        for i in 0..COUNT {
            if i % 5000 == 0 {
                // Stall: the sender must block, not drop.
                std::thread::sleep(Duration::from_millis(50));
                assert!(
                    b.msg_available(rx).unwrap() <= 16,
                    "queue exceeded the receive buffers"
                );
            }
            let n = b.msg_recv(rx, &mut buf).unwrap();
            assert_eq!(
                u32::from_le_bytes(buf[..4].try_into().unwrap()),
                i,
                "{prov}: order"
            );
            assert_eq!(n, 4 + (i as usize * 37) % 3000);
            assert!(buf[4..n].iter().all(|&x| x == (i % 251) as u8));
        }
        sender.join().unwrap();
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

#[test]
fn bad_input_gets_the_spec_codes() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    let cfg = config("shm", "errors");
    let a = Node::initialize(0, 5, cfg.clone()).unwrap();
    assert_eq!(
        Node::initialize(0, 5, cfg.clone()).err(),
        Some(Status::MCAPI_ERR_NODE_INITIALIZED)
    );
    assert_eq!(
        Node::initialize(256, 5, cfg.clone()).err(),
        Some(Status::MCAPI_ERR_DOMAIN_INVALID)
    );
    assert_eq!(
        Node::initialize(0, 0xFFFF, cfg.clone()).err(),
        Some(Status::MCAPI_ERR_NODE_INVALID)
    );
    let ep = a.endpoint_create(9).unwrap();
    assert_eq!(a.endpoint_create(9), Err(Status::MCAPI_ERR_ENDP_EXISTS));
    let big = vec![0u8; mcapi::MAX_MSG_SIZE + 1];
    assert_eq!(a.msg_send(ep, ep, &big, 0), Err(Status::MCAPI_ERR_MSG_SIZE));
    assert_eq!(
        a.msg_send(ep, ep, b"x", mcapi::NUM_PRIORITIES),
        Err(Status::MCAPI_ERR_PRIORITY)
    );
    // A message to ourselves, then a too-small buffer: truncated, and it stays queued.
    a.msg_send(ep, ep, b"hello", 0).unwrap();
    let mut small = [0u8; 2];
    a.set_endpoint_timeout(ep, Some(Duration::from_secs(10)))
        .unwrap();
    let start = std::time::Instant::now();
    while a.msg_available(ep).unwrap() == 0 {
        assert!(start.elapsed() < Duration::from_secs(10));
    }
    assert_eq!(
        a.msg_recv(ep, &mut small),
        Err(Status::MCAPI_ERR_MSG_TRUNCATED)
    );
    let mut buf = [0u8; 8];
    assert_eq!(a.msg_recv(ep, &mut buf), Ok(5));
    // Timeout on an empty endpoint.
    a.set_endpoint_timeout(ep, Some(Duration::from_millis(20)))
        .unwrap();
    assert_eq!(a.msg_recv(ep, &mut buf), Err(Status::MCAPI_TIMEOUT));
    // endpoint_get with a timeout for an endpoint nobody creates.
    assert_eq!(
        a.endpoint_get(0, 5, 77, Some(Duration::from_millis(20))),
        Err(Status::MCAPI_TIMEOUT)
    );
    assert_eq!(
        a.endpoint_get(0, 6, 77, Some(Duration::from_millis(20))),
        Err(Status::MCAPI_TIMEOUT)
    );
    // Deleting: another node's endpoint, then ours twice.
    let foreign = EndpointId::encode(0, 6, 1).unwrap();
    assert_eq!(
        a.endpoint_delete(foreign),
        Err(Status::MCAPI_ERR_ENDP_NOTOWNER)
    );
    a.endpoint_delete(ep).unwrap();
    assert_eq!(a.endpoint_delete(ep), Err(Status::MCAPI_ERR_ENDP_INVALID));
    a.finalize().unwrap();
    assert_eq!(a.finalize(), Err(Status::MCAPI_ERR_NODE_NOTINIT));
    assert_eq!(a.endpoint_create(1), Err(Status::MCAPI_ERR_NODE_NOTINIT));
    // initialize after finalize works again.
    let again = Node::initialize(0, 5, cfg).unwrap();
    again.finalize().unwrap();
}

#[test]
fn requests_test_wait_wait_any_cancel() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    let mut cfg = config("shm", "requests");
    cfg.request_table_size = 40;
    let a = Node::initialize(0, 40, cfg.clone()).unwrap();
    let b = Node::initialize(0, 41, cfg).unwrap();
    let rx = b.endpoint_create(1).unwrap();
    let tx = a.endpoint_create(1).unwrap();
    let to = a.endpoint_get(0, 41, 1, None).unwrap();
    let mut buf = [0u8; 64];

    // A cancelled receive consumes nothing; its handle is dead afterwards.
    let r = b.msg_recv_i(rx).unwrap();
    assert_eq!(b.test(r, Some(&mut buf)), Ok(None));
    b.cancel(r).unwrap();
    assert_eq!(
        b.wait(r, Some(&mut buf), None),
        Err(Status::MCAPI_ERR_REQUEST_CANCELLED)
    );
    assert_eq!(
        b.test(r, Some(&mut buf)),
        Err(Status::MCAPI_ERR_REQUEST_INVALID)
    );
    a.msg_send(tx, to, b"kept", 0).unwrap();
    assert_eq!(b.msg_recv(rx, &mut buf), Ok(4));

    // Non-blocking sends beyond the receiver's 16 buffers stay pending, then complete.
    let sends: Vec<_> = (0..30u32)
        .map(|i| a.msg_send_i(tx, to, &i.to_le_bytes(), 0).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        a.test(sends[29], None),
        Ok(None),
        "send 29 went out without a credit"
    );
    let recvs: Vec<_> = (0..30).map(|_| b.msg_recv_i(rx).unwrap()).collect();
    for (i, r) in recvs.iter().enumerate() {
        let n = b
            .wait(*r, Some(&mut buf), Some(Duration::from_secs(10)))
            .unwrap();
        assert_eq!(u32::from_le_bytes(buf[..n].try_into().unwrap()), i as u32);
    }
    let mut left = sends.clone();
    while !left.is_empty() {
        let (i, n) = a.wait_any(&left, Some(Duration::from_secs(10))).unwrap();
        assert_eq!(n, 4);
        left.remove(i);
    }
    assert_eq!(a.wait_any(&[], None), Err(Status::MCAPI_ERR_PARAMETER));

    // Timeout leaves the request valid; a second waiter gets WAIT_PENDING; a cancel from
    // another thread wakes the waiter.
    let r = b.msg_recv_i(rx).unwrap();
    assert_eq!(
        b.wait(r, Some(&mut buf), Some(Duration::from_millis(10))),
        Err(Status::MCAPI_TIMEOUT)
    );
    let waiter = {
        let b = b.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8];
            b.wait(r, Some(&mut buf), None)
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        b.wait(r, Some(&mut buf), Some(Duration::from_millis(10))),
        Err(Status::MCAPI_ERR_WAIT_PENDING)
    );
    b.cancel(r).unwrap();
    assert_eq!(
        waiter.join().unwrap(),
        Err(Status::MCAPI_ERR_REQUEST_CANCELLED)
    );

    // Truncation through a request: reported, and the message stays queued.
    a.msg_send(tx, to, &[7u8; 32], 0).unwrap();
    let r = b.msg_recv_i(rx).unwrap();
    let mut small = [0u8; 8];
    assert_eq!(
        b.wait(r, Some(&mut small), Some(Duration::from_secs(10))),
        Err(Status::MCAPI_ERR_MSG_TRUNCATED)
    );
    assert_eq!(b.msg_recv(rx, &mut buf), Ok(32));

    // A garbage handle.
    let junk = mcapi::RequestHandle::from_raw(0xdead_beef);
    assert_eq!(a.test(junk, None), Err(Status::MCAPI_ERR_REQUEST_INVALID));
    assert_eq!(a.cancel(junk), Err(Status::MCAPI_ERR_REQUEST_INVALID));
    a.finalize().unwrap();
    b.finalize().unwrap();
}

#[test]
fn request_table_limit_and_reclaim_after_test() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    let mut cfg = config("shm", "reqlimit");
    cfg.request_table_size = 4;
    let a = Node::initialize(0, 42, cfg).unwrap();
    let ep = a.endpoint_create(1).unwrap();
    let rs: Vec<_> = (0..4).map(|_| a.msg_recv_i(ep).unwrap()).collect();
    assert_eq!(a.msg_recv_i(ep), Err(Status::MCAPI_ERR_REQUEST_LIMIT));
    // Complete the first through test (never waited on), as spec 7.3.8 programs do.
    a.msg_send(ep, ep, b"x", 0).unwrap();
    let mut buf = [0u8; 4];
    let start = std::time::Instant::now();
    while a.test(rs[0], Some(&mut buf)).unwrap().is_none() {
        assert!(start.elapsed() < Duration::from_secs(10));
    }
    // Its slot is reclaimed for a new request; the old handle reads as invalid.
    let fresh = a.msg_recv_i(ep).unwrap();
    assert_ne!(fresh, rs[0]);
    assert_eq!(
        a.test(rs[0], Some(&mut buf)),
        Err(Status::MCAPI_ERR_REQUEST_INVALID)
    );
    a.finalize().unwrap();
}

#[test]
fn endpoint_attributes_local_and_remote() {
    use mcapi::attributes::{EndpointAttribute as A, TIMEOUT_INFINITE};
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let cfg = config(prov, "attrs");
        let a = Node::initialize(0, 50, cfg.clone()).unwrap();
        let b = Node::initialize(0, 51, cfg).unwrap();
        let rx = b.endpoint_create(1).unwrap();
        let tx = a.endpoint_create(1).unwrap();
        let to = a.endpoint_get(0, 51, 1, None).unwrap();
        assert_eq!(
            b.endpoint_get_attribute(rx, A::NumRecvBuffers as u32),
            Ok(16)
        );
        assert_eq!(
            // The packet size a channel connected to it would take (64 KiB by default),
            // not the message maximum (`Node::max_msg_size`).
            a.endpoint_get_attribute(to, A::MaxPayloadSize as u32),
            Ok(64 * 1024)
        );
        assert_eq!(
            a.endpoint_get_attribute(to, A::Timeout as u32),
            Ok(TIMEOUT_INFINITE)
        );
        for i in 0..5u8 {
            a.msg_send(tx, to, &[i], 0).unwrap();
        }
        // Read from the sender's side, live (3.13 throttling).
        let start = std::time::Instant::now();
        while a.endpoint_get_attribute(to, A::NumRecvBuffers as u32) != Ok(11) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{prov}: free buffers never reached 11"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut buf = [0u8; 4];
        b.msg_recv(rx, &mut buf).unwrap();
        b.msg_recv(rx, &mut buf).unwrap();
        assert_eq!(
            a.endpoint_get_attribute(to, A::NumRecvBuffers as u32),
            Ok(13)
        );
        // Errors.
        assert_eq!(
            a.endpoint_get_attribute(to, 99),
            Err(Status::MCAPI_ERR_ATTR_NUM)
        );
        assert_eq!(
            a.endpoint_set_attribute(to, A::Timeout as u32, 5),
            Err(Status::MCAPI_ERR_ENDP_REMOTE)
        );
        assert_eq!(
            b.endpoint_set_attribute(rx, A::NumRecvBuffers as u32, 4),
            Err(Status::MCAPI_ERR_ATTR_READONLY)
        );
        assert_eq!(
            b.endpoint_set_attribute(rx, A::Priority as u32, 99),
            Err(Status::MCAPI_ERR_ATTR_VALUE)
        );
        let gone = EndpointId::encode(0, 51, 999).unwrap();
        assert_eq!(
            a.endpoint_get_attribute(gone, A::Status as u32),
            Err(Status::MCAPI_ERR_ENDP_INVALID)
        );
        // The timeout attribute governs blocking receives.
        b.endpoint_set_attribute(rx, A::Timeout as u32, 20).unwrap();
        for _ in 0..3 {
            b.msg_recv(rx, &mut buf).unwrap();
        }
        assert_eq!(b.msg_recv(rx, &mut buf), Err(Status::MCAPI_TIMEOUT));
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

/// Three sender nodes (threads) send mixed priorities and sizes to one receiver that
/// stalls now and then: everything arrives once, FIFO per sender and priority, and the
/// receiver's memory stays bounded.
#[test]
fn three_senders_one_stalling_receiver() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        // The stress target (scripts/stress, MCAPI_STRESS=1) runs full counts everywhere.
        let stress = std::env::var_os("MCAPI_STRESS").is_some_and(|v| v == "1");
        let per_sender: u32 = if prov == "shm" || stress {
            100_000
        } else {
            20_000
        };
        let cfg = config(prov, "three");
        let rxn = Node::initialize(0, 60, cfg.clone()).unwrap();
        let rx = rxn.endpoint_create(1).unwrap();
        let senders: Vec<_> = (0..3u32)
            .map(|s| {
                let cfg = cfg.clone();
                std::thread::spawn(move || {
                    let n = Node::initialize(0, 61 + s, cfg).unwrap();
                    let tx = n.endpoint_create(1).unwrap();
                    let to = n.endpoint_get(0, 60, 1, None).unwrap();
                    let mut msg = vec![0u8; 2048];
                    for i in 0..per_sender {
                        let len = 12 + (i as usize * 131) % 2000;
                        msg[..4].copy_from_slice(&s.to_le_bytes());
                        msg[4..8].copy_from_slice(&i.to_le_bytes());
                        n.msg_send(tx, to, &msg[..len], i % 3).unwrap();
                    }
                    n
                })
            })
            .collect();
        // Provider pools (tcp;ofi_rxm posts 2048 x 16 KiB buffers per endpoint) fill up
        // during the first part; from then on memory must stay flat.
        let mut rss_start = 0;
        let mut next = [[0u32; 3]; 3];
        let mut buf = vec![0u8; 4096];
        for k in 0..3 * per_sender {
            if k % 50_000 == 0 {
                std::thread::sleep(Duration::from_millis(20));
            }
            if k == per_sender {
                rss_start = rss_kib();
            }
            let len = rxn.msg_recv(rx, &mut buf).unwrap();
            let s = u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize;
            let i = u32::from_le_bytes(buf[4..8].try_into().unwrap());
            assert_eq!(len, 12 + (i as usize * 131) % 2000);
            let prio = (i % 3) as usize;
            // Per sender and priority, messages come in order, once: i = prio + 3 * count.
            assert_eq!(
                i,
                next[s][prio] * 3 + prio as u32,
                "{prov}: sender {s} priority {prio}"
            );
            next[s][prio] += 1;
        }
        let rss_growth = rss_kib().saturating_sub(rss_start);
        eprintln!(
            "{prov}: {} messages, RSS growth over the last two thirds {rss_growth} KiB",
            3 * per_sender
        );
        assert!(rss_growth < 16 * 1024, "{prov}: RSS grew {rss_growth} KiB");
        for t in senders {
            t.join().unwrap().finalize().unwrap();
        }
        rxn.finalize().unwrap();
    }
}

fn rss_kib() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn node_attributes_local_and_remote() {
    use mcapi::attributes::{NodeAttributes, NODE_ATTR_TYPE, NODE_ATTR_TYPE_REGULAR};
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    let cfg = config("shm", "nodeattr");
    let mut attrs = NodeAttributes::default();
    attrs.set(NODE_ATTR_TYPE, NODE_ATTR_TYPE_REGULAR).unwrap();
    let a = Node::initialize_with(0, 70, attrs, cfg.clone()).unwrap();
    let b = Node::initialize(0, 71, cfg).unwrap();
    assert_eq!(
        a.node_get_attribute(0, 70, NODE_ATTR_TYPE),
        Ok(NODE_ATTR_TYPE_REGULAR)
    );
    assert_eq!(
        a.node_get_attribute(0, 71, NODE_ATTR_TYPE),
        Ok(NODE_ATTR_TYPE_REGULAR)
    );
    assert_eq!(
        a.node_get_attribute(0, 71, 42),
        Err(Status::MCAPI_ERR_ATTR_NUM)
    );
    assert_eq!(
        a.node_get_attribute(0, 72, NODE_ATTR_TYPE),
        Err(Status::MCAPI_ERR_NODE_INVALID)
    );
    assert_eq!(
        a.node_get_attribute(300, 71, NODE_ATTR_TYPE),
        Err(Status::MCAPI_ERR_DOMAIN_INVALID)
    );
    assert_eq!((a.domain_id(), a.node_id()), (0, 70));
    a.finalize().unwrap();
    assert_eq!(
        a.node_get_attribute(0, 71, NODE_ATTR_TYPE),
        Err(Status::MCAPI_ERR_NODE_NOTINIT)
    );
    b.finalize().unwrap();
}

/// A thread that initialized a node uses its own (and none once it finalized it); other
/// threads use the process's node when there is exactly one.
#[test]
fn current_node_follows_the_thread_rule() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    let cfg = config("shm", "current");
    let main = Node::initialize(0, 80, cfg.clone()).unwrap();
    assert_eq!(Node::current().unwrap().node_id(), 80);
    // Another thread, no node of its own, one node in the process: that one.
    assert_eq!(
        std::thread::spawn(|| Node::current().map(|n| n.node_id()))
            .join()
            .unwrap(),
        Ok(80)
    );
    // A thread with its own node uses it; while two exist, a third thread has none.
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        let own = Node::initialize(0, 81, cfg).unwrap();
        assert!(Node::thread_has_node());
        tx.send(Node::current().map(|n| n.node_id())).unwrap();
        done_rx.recv().unwrap();
        own.finalize().unwrap();
        // Its node finalized, the thread's calls do not fall to the process's other node
        // (a second `mcapi_finalize` must not finalize that one).
        assert!(!Node::thread_has_node());
        Node::current().map(|n| n.node_id())
    });
    assert_eq!(rx.recv().unwrap(), Ok(81));
    assert_eq!(Node::current().unwrap().node_id(), 80);
    assert_eq!(
        std::thread::spawn(|| Node::current().map(|n| n.node_id()))
            .join()
            .unwrap(),
        Err(Status::MCAPI_ERR_NODE_NOTINIT)
    );
    done_tx.send(()).unwrap();
    assert_eq!(worker.join().unwrap(), Err(Status::MCAPI_ERR_NODE_NOTINIT));
    assert_eq!(
        std::thread::spawn(|| Node::current().map(|n| n.node_id()))
            .join()
            .unwrap(),
        Ok(80)
    );
    main.finalize().unwrap();
    assert_eq!(Node::current().err(), Some(Status::MCAPI_ERR_NODE_NOTINIT));
}

#[test]
fn endpoint_get_i_completes_when_the_endpoint_appears() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    let cfg = config("shm", "geti");
    let a = Node::initialize(0, 90, cfg.clone()).unwrap();
    // The remote node does not exist yet; then it exists without the endpoint.
    let r = a.endpoint_get_i(0, 91, 4).unwrap();
    assert_eq!(a.test(r, None), Ok(None));
    let b = Node::initialize(0, 91, cfg).unwrap();
    assert_eq!(a.test(r, None), Ok(None));
    let late = {
        let b = b.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            b.endpoint_create(4).unwrap()
        })
    };
    assert_eq!(a.wait(r, None, Some(Duration::from_secs(10))), Ok(0));
    let ep = late.join().unwrap();
    assert_eq!(EndpointId::encode(0, 91, 4).unwrap(), ep);
    // A local lookup, and a cancelled one.
    let mine = a.endpoint_create(1).unwrap();
    let r = a.endpoint_get_i(0, 90, 1).unwrap();
    assert_eq!(a.wait(r, None, Some(Duration::from_secs(1))), Ok(0));
    let r = a.endpoint_get_i(0, 91, 5).unwrap();
    a.cancel(r).unwrap();
    assert_eq!(
        a.wait(r, None, None),
        Err(Status::MCAPI_ERR_REQUEST_CANCELLED)
    );
    assert_eq!(
        a.endpoint_get_i(0, 0xFFFF, 1),
        Err(Status::MCAPI_ERR_NODE_INVALID)
    );
    // The looked-up endpoint is usable.
    a.msg_send(mine, ep, b"hi", 0).unwrap();
    let mut buf = [0u8; 4];
    assert_eq!(b.msg_recv(ep, &mut buf), Ok(2));
    a.finalize().unwrap();
    b.finalize().unwrap();
}

/// The provokable rows of the ERRORS tables of 4.1, 4.2, 4.3 and 4.6, one per line.
/// (NULL-pointer rows are tested through the C ABI, channel rows in the channel tests.)
#[test]
fn errors_tables() {
    use mcapi::attributes::EndpointAttribute as A;
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    let cfg = config("shm", "table");
    let mut tiny = cfg.clone();
    tiny.request_table_size = 1;
    let a = Node::initialize(0, 100, tiny).unwrap();
    let b = Node::initialize(0, 101, cfg.clone()).unwrap();
    let ep = a.endpoint_create(1).unwrap();
    let theirs = b.endpoint_create(1).unwrap();
    let to = a.endpoint_get(0, 101, 1, None).unwrap();
    let deleted = a.endpoint_create(2).unwrap();
    a.endpoint_delete(deleted).unwrap();
    let held = a.msg_recv_i(ep).unwrap(); // fills the one-slot request table
    let mut bad_provider = cfg.clone();
    bad_provider.provider = Some("no-such-provider".into());
    let mut buf = [0u8; 8];
    let big = vec![0u8; mcapi::MAX_MSG_SIZE + 1];
    let junk = mcapi::RequestHandle::from_raw(0x1234_5678_9abc);
    let ms = |n| Some(Duration::from_millis(n));

    type Row<'a> = (&'a str, Box<dyn Fn() -> Result<(), Status> + 'a>, Status);
    let rows: Vec<Row> = vec![
        // 4.1 initialize / node attributes
        (
            "initialize: domain",
            Box::new(|| Node::initialize(256, 1, cfg.clone()).map(drop)),
            Status::MCAPI_ERR_DOMAIN_INVALID,
        ),
        (
            "initialize: node",
            Box::new(|| Node::initialize(0, 0xFFFF, cfg.clone()).map(drop)),
            Status::MCAPI_ERR_NODE_INVALID,
        ),
        (
            "initialize: twice",
            Box::new(|| Node::initialize(0, 100, cfg.clone()).map(drop)),
            Status::MCAPI_ERR_NODE_INITIALIZED,
        ),
        (
            "initialize: no provider",
            Box::new(|| Node::initialize(0, 102, bad_provider.clone()).map(drop)),
            Status::MCAPI_ERR_NODE_INITFAILED,
        ),
        (
            "node_get_attribute: number",
            Box::new(|| a.node_get_attribute(0, 101, 9).map(drop)),
            Status::MCAPI_ERR_ATTR_NUM,
        ),
        (
            "node_get_attribute: node",
            Box::new(|| a.node_get_attribute(0, 0xFFFF, 1).map(drop)),
            Status::MCAPI_ERR_NODE_INVALID,
        ),
        // 4.2 endpoints
        (
            "endpoint_create: exists",
            Box::new(|| a.endpoint_create(1).map(drop)),
            Status::MCAPI_ERR_ENDP_EXISTS,
        ),
        (
            "endpoint_create: port",
            Box::new(|| a.endpoint_create(1 << 24).map(drop)),
            Status::MCAPI_ERR_PORT_INVALID,
        ),
        (
            "endpoint_get: domain",
            Box::new(|| a.endpoint_get(256, 1, 1, ms(1)).map(drop)),
            Status::MCAPI_ERR_DOMAIN_INVALID,
        ),
        (
            "endpoint_get: node",
            Box::new(|| a.endpoint_get(0, 0xFFFF, 1, ms(1)).map(drop)),
            Status::MCAPI_ERR_NODE_INVALID,
        ),
        (
            "endpoint_get: port",
            Box::new(|| a.endpoint_get(0, 101, 1 << 24, ms(1)).map(drop)),
            Status::MCAPI_ERR_PORT_INVALID,
        ),
        (
            "endpoint_get: timeout",
            Box::new(|| a.endpoint_get(0, 101, 9, ms(10)).map(drop)),
            Status::MCAPI_TIMEOUT,
        ),
        (
            "endpoint_get_i: request limit",
            Box::new(|| a.endpoint_get_i(0, 101, 1).map(drop)),
            Status::MCAPI_ERR_REQUEST_LIMIT,
        ),
        (
            "endpoint_delete: not owner",
            Box::new(|| a.endpoint_delete(theirs)),
            Status::MCAPI_ERR_ENDP_NOTOWNER,
        ),
        (
            "endpoint_delete: deleted",
            Box::new(|| a.endpoint_delete(deleted)),
            Status::MCAPI_ERR_ENDP_INVALID,
        ),
        (
            "endpoint_get_attribute: number",
            Box::new(|| a.endpoint_get_attribute(ep, 0).map(drop)),
            Status::MCAPI_ERR_ATTR_NUM,
        ),
        (
            "endpoint_get_attribute: endpoint",
            Box::new(|| a.endpoint_get_attribute(deleted, 1).map(drop)),
            Status::MCAPI_ERR_ENDP_INVALID,
        ),
        (
            "endpoint_set_attribute: remote",
            Box::new(|| a.endpoint_set_attribute(to, A::Timeout as u32, 1)),
            Status::MCAPI_ERR_ENDP_REMOTE,
        ),
        (
            "endpoint_set_attribute: read-only",
            Box::new(|| a.endpoint_set_attribute(ep, A::NumRecvBuffers as u32, 1)),
            Status::MCAPI_ERR_ATTR_READONLY,
        ),
        (
            "endpoint_set_attribute: value",
            Box::new(|| a.endpoint_set_attribute(ep, A::Priority as u32, 8)),
            Status::MCAPI_ERR_ATTR_VALUE,
        ),
        // 4.3 messages
        (
            "msg_send: from another node",
            Box::new(|| a.msg_send(theirs, to, b"x", 0)),
            Status::MCAPI_ERR_ENDP_INVALID,
        ),
        (
            "msg_send: from deleted",
            Box::new(|| a.msg_send(deleted, to, b"x", 0)),
            Status::MCAPI_ERR_ENDP_INVALID,
        ),
        (
            "msg_send: to deleted",
            Box::new(|| a.msg_send(ep, deleted, b"x", 0)),
            Status::MCAPI_ERR_ENDP_INVALID,
        ),
        (
            "msg_send: size",
            Box::new(|| a.msg_send(ep, to, &big, 0)),
            Status::MCAPI_ERR_MSG_SIZE,
        ),
        (
            "msg_send: priority",
            Box::new(|| a.msg_send(ep, to, b"x", 8)),
            Status::MCAPI_ERR_PRIORITY,
        ),
        (
            "msg_send_i: request limit",
            Box::new(|| a.msg_send_i(ep, to, b"x", 0).map(drop)),
            Status::MCAPI_ERR_REQUEST_LIMIT,
        ),
        (
            "msg_send_i: size",
            Box::new(|| a.msg_send_i(ep, to, &big, 0).map(drop)),
            Status::MCAPI_ERR_MSG_SIZE,
        ),
        (
            "msg_recv: not local",
            Box::new(|| a.msg_recv(to, &mut [0u8; 8][..]).map(drop)),
            Status::MCAPI_ERR_ENDP_INVALID,
        ),
        (
            "msg_recv_i: not local",
            Box::new(|| a.msg_recv_i(to).map(drop)),
            Status::MCAPI_ERR_ENDP_INVALID,
        ),
        (
            "msg_available: not local",
            Box::new(|| a.msg_available(to).map(drop)),
            Status::MCAPI_ERR_ENDP_INVALID,
        ),
        // 4.6 requests
        (
            "test: invalid",
            Box::new(|| a.test(junk, None).map(drop)),
            Status::MCAPI_ERR_REQUEST_INVALID,
        ),
        (
            "wait: invalid",
            Box::new(|| a.wait(junk, None, ms(1)).map(drop)),
            Status::MCAPI_ERR_REQUEST_INVALID,
        ),
        (
            "wait: timeout",
            Box::new(|| a.wait(held, Some(&mut [0u8; 8][..]), ms(5)).map(drop)),
            Status::MCAPI_TIMEOUT,
        ),
        (
            "wait_any: none",
            Box::new(|| a.wait_any(&[], ms(1)).map(drop)),
            Status::MCAPI_ERR_PARAMETER,
        ),
        (
            "wait_any: invalid",
            Box::new(|| a.wait_any(&[held, junk], ms(1)).map(drop)),
            Status::MCAPI_ERR_REQUEST_INVALID,
        ),
        (
            "wait_any: timeout",
            Box::new(|| a.wait_any(&[held], ms(5)).map(drop)),
            Status::MCAPI_TIMEOUT,
        ),
        (
            "cancel: invalid",
            Box::new(|| a.cancel(junk)),
            Status::MCAPI_ERR_REQUEST_INVALID,
        ),
    ];
    let mut wrong = Vec::new();
    for (name, call, want) in &rows {
        let got = call();
        if got != Err(*want) {
            wrong.push(format!("{name}: expected {want}, got {got:?}"));
        }
    }
    drop(rows);
    a.cancel(held).unwrap();
    assert_eq!(
        a.wait(held, Some(&mut buf), None),
        Err(Status::MCAPI_ERR_REQUEST_CANCELLED)
    );
    a.finalize().unwrap();
    // 4.1-4.6 before initialize / after finalize.
    for (name, got) in [
        ("finalize twice", a.finalize()),
        ("endpoint_create", a.endpoint_create(3).map(drop)),
        ("endpoint_get", a.endpoint_get(0, 101, 1, ms(1)).map(drop)),
        ("msg_send", a.msg_send(ep, to, b"x", 0)),
        ("msg_recv_i", a.msg_recv_i(ep).map(drop)),
        ("test", a.test(held, None).map(drop)),
    ] {
        if got != Err(Status::MCAPI_ERR_NODE_NOTINIT) {
            wrong.push(format!("{name} after finalize: {got:?}"));
        }
    }
    b.finalize().unwrap();
    assert!(
        wrong.is_empty(),
        "{} rows wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn tcp_interface_is_chosen_by_name() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    let mut cfg = config("tcp", "iface");
    cfg.tcp_iface = Some("lo".into());
    let a = Node::initialize(0, 110, cfg.clone()).unwrap();
    let b = Node::initialize(0, 111, cfg.clone()).unwrap();
    let rx = b.endpoint_create(1).unwrap();
    let tx = a.endpoint_create(1).unwrap();
    let to = a.endpoint_get(0, 111, 1, None).unwrap();
    a.msg_send(tx, to, b"lo", 0).unwrap();
    let mut buf = [0u8; 4];
    assert_eq!(b.msg_recv(rx, &mut buf), Ok(2));
    a.finalize().unwrap();
    b.finalize().unwrap();
    cfg.tcp_iface = Some("no-such-iface0".into());
    assert_eq!(
        Node::initialize(0, 112, cfg).err(),
        Some(Status::MCAPI_ERR_NODE_INITFAILED)
    );
}

/// Blocks until `node` has `count` messages queued at `ep` (10 s at most).
fn await_available(node: &Node, ep: EndpointId, count: usize, what: &str) {
    let start = std::time::Instant::now();
    while node.msg_available(ep).unwrap() < count {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what}: {count} messages never queued"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Receives at `ep` until `count` messages came or a receive times out (after the
/// endpoint's timeout).
fn recv_up_to(node: &Node, ep: EndpointId, count: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    while got.len() < count {
        match node.msg_recv(ep, &mut buf) {
            Ok(n) => got.push(buf[..n].to_vec()),
            Err(Status::MCAPI_TIMEOUT) => break,
            Err(e) => panic!("msg_recv: {e:?}"),
        }
    }
    got
}

/// Receives at `ep` until a receive times out (after the endpoint's timeout).
fn drain(node: &Node, ep: EndpointId) -> Vec<Vec<u8>> {
    recv_up_to(node, ep, 1000)
}

/// How many requests `node` can still allocate (receives at `ep`, cancelled again).
fn free_requests(node: &Node, ep: EndpointId) -> usize {
    let mut held = Vec::new();
    loop {
        match node.msg_recv_i(ep) {
            Ok(r) => held.push(r),
            Err(Status::MCAPI_ERR_REQUEST_LIMIT) => break,
            Err(e) => panic!("msg_recv_i: {e:?}"),
        }
        assert!(held.len() < 10_000, "the request table has no limit");
    }
    for &r in &held {
        node.cancel(r).unwrap();
    }
    held.len()
}

/// Several threads of node A make first contact with node B at once (a barrier, then
/// endpoint_get), each for its own endpoint of B, and send, again after a pause: B gets
/// every message (review: a second control connection replaced the first, B took A for
/// dead once the first closed and dropped its messages after the 2 s grace; 3 of 3 lost
/// on tcp). Three fresh pairs of nodes per provider, paused together.
#[test]
fn threads_contacting_a_node_at_once_lose_no_message() {
    use std::sync::{Arc, Barrier};
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    const THREADS: u32 = 3;
    const PAIRS: u32 = 3;
    const PER_ROUND: u8 = 4;
    let msg = |port: u32, round: u8, i: u8| vec![port as u8, round, i];
    for prov in providers() {
        let cfg = config(prov, "contact");
        let pairs: Vec<_> = (0..PAIRS)
            .map(|k| {
                let (a_id, b_id) = (130 + 2 * k, 131 + 2 * k);
                let a = Node::initialize(0, a_id, cfg.clone()).unwrap();
                let b = Node::initialize(0, b_id, cfg.clone()).unwrap();
                let rxs: Vec<_> = (1..=THREADS)
                    .map(|p| {
                        let rx = b.endpoint_create(p).unwrap();
                        b.set_endpoint_timeout(rx, Some(Duration::from_millis(1500)))
                            .unwrap();
                        rx
                    })
                    .collect();
                let barrier = Arc::new(Barrier::new(THREADS as usize));
                let threads: Vec<_> = (1..=THREADS)
                    .map(|p| {
                        let (a, barrier) = (a.clone(), barrier.clone());
                        std::thread::spawn(move || {
                            let tx = a.endpoint_create(p).unwrap();
                            a.set_endpoint_timeout(tx, Some(Duration::from_secs(5)))
                                .unwrap();
                            barrier.wait();
                            let to = a.endpoint_get(0, b_id, p, Some(Duration::from_secs(10)))?;
                            for i in 0..PER_ROUND {
                                a.msg_send(tx, to, &msg(p, 0, i), 0)?;
                            }
                            Ok::<_, Status>((tx, to))
                        })
                    })
                    .collect();
                let routes: Vec<_> = threads
                    .into_iter()
                    .map(|t| {
                        t.join()
                            .unwrap()
                            .unwrap_or_else(|e| panic!("{prov} pair {k}: first round: {e:?}"))
                    })
                    .collect();
                (a, b, rxs, routes)
            })
            .collect();
        // Past the grace in which a node still takes messages of a peer whose control
        // connection closed.
        std::thread::sleep(Duration::from_millis(2500));
        for (k, (a, b, rxs, routes)) in pairs.iter().enumerate() {
            for (p, &(tx, to)) in (1..=THREADS).zip(routes) {
                for i in 0..PER_ROUND {
                    a.msg_send(tx, to, &msg(p, 1, i), 0)
                        .unwrap_or_else(|e| panic!("{prov} pair {k}: second round: {e:?}"));
                }
            }
            for (p, &rx) in (1..=THREADS).zip(rxs) {
                let want: Vec<_> = (0..2)
                    .flat_map(|round| (0..PER_ROUND).map(move |i| msg(p, round, i)))
                    .collect();
                assert_eq!(
                    recv_up_to(b, rx, want.len()),
                    want,
                    "{prov} pair {k}: endpoint {p}"
                );
                assert_eq!(b.msg_available(rx), Ok(0), "{prov} pair {k}: endpoint {p}");
            }
        }
        for (a, b, _, _) in pairs {
            a.finalize().unwrap();
            b.finalize().unwrap();
        }
    }
}

/// wait_any over two receives whose endpoints both hold a message takes only the message
/// of the request it reports; the other, cancelled, leaves its message queued (review:
/// both were taken, and the cancel lost one).
#[test]
fn wait_any_takes_a_message_only_for_the_request_it_returns() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let cfg = config(prov, "waitany");
        let a = Node::initialize(0, 122, cfg.clone()).unwrap();
        let b = Node::initialize(0, 123, cfg).unwrap();
        let rxs = [b.endpoint_create(1).unwrap(), b.endpoint_create(2).unwrap()];
        let tx = a.endpoint_create(1).unwrap();
        for (k, rx) in rxs.iter().enumerate() {
            let to = a
                .endpoint_get(0, 123, rx.port(), Some(Duration::from_secs(10)))
                .unwrap();
            a.msg_send(tx, to, format!("for-{k}").as_bytes(), 0)
                .unwrap();
        }
        for &rx in &rxs {
            await_available(&b, rx, 1, prov);
        }
        let reqs = [b.msg_recv_i(rxs[0]).unwrap(), b.msg_recv_i(rxs[1]).unwrap()];
        let (mut b0, mut b1) = ([0u8; 16], [0u8; 16]);
        let (i, got) = {
            let mut bufs = [Some(&mut b0[..]), Some(&mut b1[..])];
            b.wait_any_into(&reqs, &mut bufs, Some(Duration::from_secs(10)))
                .unwrap()
        };
        assert!(i < 2);
        let n = got.unwrap();
        let data = if i == 0 { &b0[..n] } else { &b1[..n] };
        assert_eq!(data, format!("for-{i}").as_bytes(), "{prov}");
        let other = 1 - i;
        assert_eq!(b.msg_available(rxs[i]), Ok(0), "{prov}");
        b.cancel(reqs[other]).unwrap();
        assert_eq!(
            b.msg_available(rxs[other]),
            Ok(1),
            "{prov}: the cancelled receive took its message"
        );
        b.set_endpoint_timeout(rxs[other], Some(Duration::from_secs(5)))
            .unwrap();
        let mut buf = [0u8; 16];
        let n = b.msg_recv(rxs[other], &mut buf).unwrap();
        assert_eq!(&buf[..n], format!("for-{other}").as_bytes(), "{prov}");
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

/// A blocking msg_send queued behind msg_send_i's waiting for credits times out with
/// MCAPI_TIMEOUT and is not sent later; the msg_send_i messages arrive in order, and the
/// request table has as many free slots as before (review: the timed-out message arrived
/// later and its request slot leaked).
#[test]
fn blocking_send_behind_queued_sends_times_out_cleanly() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let mut cfg = config(prov, "queuedto");
        cfg.recv_buffers = 4;
        cfg.request_table_size = 12;
        let a = Node::initialize(0, 124, cfg.clone()).unwrap();
        let b = Node::initialize(0, 125, cfg).unwrap();
        let rx = b.endpoint_create(1).unwrap();
        let tx = a.endpoint_create(1).unwrap();
        let to = a
            .endpoint_get(0, 125, 1, Some(Duration::from_secs(10)))
            .unwrap();
        let free_before = free_requests(&a, tx);
        assert_eq!(free_before, 12, "{prov}");
        // Twice the receiver's buffers, B not reading: the last ones wait for credits.
        let sends: Vec<_> = (0..8u8)
            .map(|i| a.msg_send_i(tx, to, &[i], 0).unwrap())
            .collect();
        await_available(&b, rx, 4, prov);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            a.test(sends[7], None),
            Ok(None),
            "{prov}: a send went without a credit"
        );
        a.set_endpoint_timeout(tx, Some(Duration::from_millis(100)))
            .unwrap();
        assert_eq!(
            a.msg_send(tx, to, b"late", 0),
            Err(Status::MCAPI_TIMEOUT),
            "{prov}"
        );
        // B drains everything: only the msg_send_i messages, in order.
        b.set_endpoint_timeout(rx, Some(Duration::from_secs(1)))
            .unwrap();
        let want: Vec<_> = (0..8u8).map(|i| vec![i]).collect();
        assert_eq!(
            drain(&b, rx),
            want,
            "{prov}: the timed-out message went out"
        );
        for (i, &r) in sends.iter().enumerate() {
            assert_eq!(
                a.wait(r, None, Some(Duration::from_secs(5))),
                Ok(1),
                "{prov}: send {i}"
            );
        }
        assert_eq!(
            free_requests(&a, tx),
            free_before,
            "{prov}: a request slot leaked"
        );
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

/// A wait that ends in an error (a receive waited on without a buffer) leaves the request
/// waitable: a second wait with a buffer gets the message (review: MCAPI_ERR_WAIT_PENDING
/// for ever).
#[test]
fn wait_error_leaves_the_request_waitable() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let cfg = config(prov, "waiterr");
        let a = Node::initialize(0, 126, cfg).unwrap();
        let ep = a.endpoint_create(1).unwrap();
        let r = a.msg_recv_i(ep).unwrap();
        assert_eq!(
            a.wait(r, None, Some(Duration::from_secs(1))),
            Err(Status::MCAPI_ERR_PARAMETER),
            "{prov}"
        );
        a.msg_send(ep, ep, b"after", 0).unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(
            a.wait(r, Some(&mut buf), Some(Duration::from_secs(5))),
            Ok(5),
            "{prov}"
        );
        assert_eq!(&buf[..5], b"after");
        a.finalize().unwrap();
    }
}

/// An endpoint deleted after a sender used it, then created again at the same port: the
/// sender's next messages reach the new endpoint, in order, none lost (review: the sender
/// kept the old endpoint's credits and sequence numbers, so the new endpoint dropped or
/// parked its messages and the sender then blocked). A send to a deleted endpoint that is
/// not created again fails with `MCAPI_ERR_ENDP_INVALID`.
#[test]
fn an_endpoint_created_again_at_a_deleted_port_gets_every_new_message() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let cfg = config(prov, "recreate");
        let a = Node::initialize(0, 160, cfg.clone()).unwrap();
        let b = Node::initialize(0, 161, cfg).unwrap();
        let tx = a.endpoint_create(1).unwrap();
        a.set_endpoint_timeout(tx, Some(Duration::from_secs(5)))
            .unwrap();
        let rx = b.endpoint_create(1).unwrap();
        let gone = b.endpoint_create(2).unwrap();
        let to = a
            .endpoint_get(0, 161, 1, Some(Duration::from_secs(10)))
            .unwrap();
        let to_gone = a
            .endpoint_get(0, 161, 2, Some(Duration::from_secs(10)))
            .unwrap();
        for i in 0..3u8 {
            a.msg_send(tx, to, &[b'o', i], 1).unwrap();
        }
        a.msg_send(tx, to_gone, b"x", 1).unwrap();
        await_available(&b, rx, 3, prov);
        let mut buf = [0u8; 8];
        assert_eq!(b.msg_recv(rx, &mut buf).unwrap(), 2);
        b.endpoint_delete(rx).unwrap();
        b.endpoint_delete(gone).unwrap();
        let rx = b.endpoint_create(1).unwrap();
        b.set_endpoint_timeout(rx, Some(Duration::from_secs(5)))
            .unwrap();
        // More than the endpoint's buffers, so credits must come from the new endpoint.
        let n = 40u8;
        for i in 0..n {
            a.msg_send(tx, to, &[b'n', i], 1)
                .unwrap_or_else(|e| panic!("{prov}: send {i} to the new endpoint: {e:?}"));
            if i % 8 == 7 {
                let got = recv_up_to(&b, rx, 8);
                let want: Vec<Vec<u8>> = (i - 7..=i).map(|k| vec![b'n', k]).collect();
                assert_eq!(got, want, "{prov}");
            }
        }
        assert_eq!(
            a.msg_send(tx, to_gone, b"y", 1).err(),
            Some(Status::MCAPI_ERR_ENDP_INVALID),
            "{prov}: send to a deleted endpoint"
        );
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

/// A receive blocked past its spin and yield phases sleeps (on the CQ's fd wait object
/// where the node uses one: sockets, net; timed elsewhere) and still returns the message
/// that arrives then, as does a `wait` on a receive request. Every provider offered.
#[test]
fn receives_blocked_for_milliseconds_get_their_message() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    let offered = ["shm", "tcp", "sockets", "net"]
        .into_iter()
        .filter(|p| mcapi_ofi::Info::first(&mcapi_ofi::Hints::new().provider(*p)).is_ok());
    for prov in offered {
        let cfg = config(prov, "sleepers");
        let a = Node::initialize(0, 170, cfg.clone()).unwrap();
        let b = Node::initialize(0, 171, cfg).unwrap();
        let tx = a.endpoint_create(1).unwrap();
        let rx = b.endpoint_create(1).unwrap();
        b.set_endpoint_timeout(rx, Some(Duration::from_secs(10)))
            .unwrap();
        let to = a
            .endpoint_get(0, 171, 1, Some(Duration::from_secs(10)))
            .unwrap();
        let late_send = |i: u8| {
            let a = a.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                a.msg_send(tx, to, &[i], 1).unwrap();
            })
        };
        let mut buf = [0u8; 4];
        for i in 0..3u8 {
            let sender = late_send(i);
            assert_eq!(b.msg_recv(rx, &mut buf), Ok(1), "{prov}");
            assert_eq!(buf[0], i, "{prov}");
            sender.join().unwrap();
        }
        for i in 3..6u8 {
            let req = b.msg_recv_i(rx).unwrap();
            let sender = late_send(i);
            let got = b.wait(req, Some(&mut buf), Some(Duration::from_secs(10)));
            assert_eq!(got, Ok(1), "{prov}");
            assert_eq!(buf[0], i, "{prov}");
            sender.join().unwrap();
        }
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

/// Creating and deleting an endpoint again and again reuses the deleted endpoints' receive
/// memory once the provider has given their receives back: memory stays bounded, and a
/// message sent to each new endpoint arrives intact (review: every cycle kept its pool,
/// about `recv_buffers` x 64 KiB, until finalize).
#[test]
fn endpoint_create_delete_cycles_keep_memory_bounded() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let cfg = config(prov, "cycles");
        let a = Node::initialize(0, 175, cfg.clone()).unwrap();
        let b = Node::initialize(0, 176, cfg).unwrap();
        let tx = a.endpoint_create(1).unwrap();
        let cycle = |i: usize| {
            let rx = b.endpoint_create(5).unwrap();
            b.set_endpoint_timeout(rx, Some(Duration::from_secs(10)))
                .unwrap();
            let to = a
                .endpoint_get(0, 176, 5, Some(Duration::from_secs(10)))
                .unwrap();
            let data = [i as u8; 100];
            a.msg_send(tx, to, &data, 1).unwrap();
            let mut buf = [0u8; 128];
            assert_eq!(b.msg_recv(rx, &mut buf), Ok(100), "{prov}: cycle {i}");
            assert_eq!(buf[..100], data, "{prov}: cycle {i}");
            b.endpoint_delete(rx).unwrap();
        };
        // A few cycles first, so that steady state is measured.
        (0..5).for_each(cycle);
        let start = rss_kib();
        (5..65).for_each(cycle);
        let growth_mib = rss_kib().saturating_sub(start) / 1024;
        // recv_buffers = 16: 1 MiB per cycle if pools were kept.
        assert!(
            growth_mib < 20,
            "{prov}: 60 cycles grew RSS by {growth_mib} MiB"
        );
        eprintln!("  {prov}: 60 create/delete cycles grew RSS by {growth_mib} MiB");
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

/// A receive request pending on an endpoint that is deleted ends with
/// `MCAPI_ERR_ENDP_INVALID`, also when an endpoint is created at the same port before the
/// wait (review: it waited forever, never first in the new endpoint's receive queue).
#[test]
fn a_receive_pending_on_a_deleted_endpoint_ends() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    let cfg = config(providers()[0], "pendingdel");
    let b = Node::initialize(0, 178, cfg).unwrap();
    let rx = b.endpoint_create(3).unwrap();
    let req = b.msg_recv_i(rx).unwrap();
    b.endpoint_delete(rx).unwrap();
    let again = b.endpoint_create(3).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(
        b.wait(req, Some(&mut buf), Some(Duration::from_secs(5))),
        Err(Status::MCAPI_ERR_ENDP_INVALID)
    );
    // The new endpoint's own receives work.
    let req = b.msg_recv_i(again).unwrap();
    b.cancel(req).unwrap();
    b.finalize().unwrap();
}

/// CPU time the calling thread has run (the scheduler's count, in ns).
fn thread_cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    let ns = stat.split_whitespace().next().unwrap().parse().unwrap();
    Duration::from_nanos(ns)
}

/// How often the calling thread has given up its core by blocking (sleeping, polling an
/// fd, waiting for a lock): a thread that spins only loses its core to preemption, which
/// counts elsewhere, so this tells the two apart however loaded the machine is.
fn voluntary_switches() -> u64 {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// `Config::spin` (`MCAPI_SPIN_US`) decides how a blocked call waits: a node set to spin
/// for minutes keeps its core through a 200 ms wait (MPI-style busy polling: it never
/// blocks), one with the default 50 µs sleeps through it. Blocked message receives, request waits and scalar
/// receives each wait that way.
#[test]
fn the_configured_spin_decides_whether_a_blocked_call_keeps_its_core() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    let Some(&prov) = providers().first() else {
        return;
    };
    for (spin, busy) in [
        (Duration::from_secs(600), true),
        (mcapi::config::DEFAULT_SPIN, false),
    ] {
        let cfg = config(prov, "spin");
        let a = Node::initialize(0, 180, cfg.clone()).unwrap();
        let b = Node::initialize(0, 181, Config { spin, ..cfg }).unwrap();
        let wait = Some(Duration::from_secs(10));
        let (tx, rx) = (a.endpoint_create(1).unwrap(), b.endpoint_create(1).unwrap());
        let to = a.endpoint_get(0, 181, 1, wait).unwrap();
        let (scl_tx, scl_rx) = (a.endpoint_create(2).unwrap(), b.endpoint_create(2).unwrap());
        let scl_to = a.endpoint_get(0, 181, 2, wait).unwrap();
        let q = a.sclchan_connect_i(scl_tx, scl_to).unwrap();
        a.wait(q, None, wait).unwrap();
        let (hs, qs) = a.sclchan_send_open_i(scl_tx).unwrap();
        let (hr, qr) = b.sclchan_recv_open_i(scl_rx).unwrap();
        b.wait(qr, None, wait).unwrap();
        a.wait(qs, None, wait).unwrap();

        let late = |send: Box<dyn FnOnce(&Node) + Send>| {
            let a = a.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(200));
                send(&a);
            })
        };
        let calls: [(&str, &dyn Fn() -> u64); 3] = [
            ("msg_recv", &|| {
                b.msg_recv(rx, &mut [0u8; 4]).unwrap() as u64
            }),
            ("wait", &|| {
                let req = b.msg_recv_i(rx).unwrap();
                b.wait(req, Some(&mut [0u8; 4]), wait).unwrap() as u64
            }),
            ("sclchan_recv", &|| b.sclchan_recv(hr, 8).unwrap()),
        ];
        for (name, call) in calls {
            let sender = if name == "sclchan_recv" {
                late(Box::new(move |a: &Node| a.sclchan_send(hs, 7, 8).unwrap()))
            } else {
                late(Box::new(move |a: &Node| {
                    a.msg_send(tx, to, &[1], 1).unwrap()
                }))
            };
            let (cpu, start) = (thread_cpu_time(), std::time::Instant::now());
            let blocked = voluntary_switches();
            call();
            let blocked = voluntary_switches() - blocked;
            let (cpu, waited) = (thread_cpu_time() - cpu, start.elapsed());
            sender.join().unwrap();
            // Sleeping through 200 ms takes a hundred sleeps or more (each at most 2 ms) and
            // a few ms of CPU. Spinning keeps the core unless the machine is loaded, and then
            // it still blocks only on a lock now and then (the background thread's).
            let spun = cpu >= waited / 2 || blocked < 20;
            assert_eq!(
                spun, busy,
                "{name} with a spin of {spin:?}: blocked {blocked} times, {cpu:?} on the CPU \
                 in {waited:?}"
            );
        }
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

/// A node talking to itself, in one thread: every message is queued at the receiving
/// endpoint before the send returns, so single tests complete, `msg_available` counts at
/// once, priorities and FIFO order hold, and a full endpoint keeps a `msg_send_i` pending
/// (spec) until a receive makes room, in order with later sends; a blocking `msg_send`
/// to it times out (spec 4.3.2: it blocks) or is `MCAPI_ERR_MEM_LIMIT` in compatibility
/// mode.
#[test]
fn a_node_talking_to_itself_completes_at_once() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        for compat in [Compat::Spec, Compat::Mca] {
            let mut cfg = config(prov, "same-node");
            cfg.compat = compat;
            let node = Node::initialize(0, 41, cfg).unwrap();
            let a = node.endpoint_create(1).unwrap();
            let b = node.endpoint_create(2).unwrap();
            let mut buf = [0u8; 16];
            // msg_recv_i, send_i, send_i, recv_i: one test each.
            let r0 = node.msg_recv_i(b).unwrap();
            let s1 = node.msg_send_i(a, b, b"one", 1).unwrap();
            let s2 = node.msg_send_i(a, b, b"two", 1).unwrap();
            let r3 = node.msg_recv_i(b).unwrap();
            assert_eq!(node.test(r0, Some(&mut buf)), Ok(Some(3)), "{prov}");
            assert_eq!(&buf[..3], b"one");
            assert_eq!(node.test(s1, None), Ok(Some(3)));
            assert_eq!(node.test(s2, None), Ok(Some(3)));
            assert_eq!(node.test(r3, Some(&mut buf)), Ok(Some(3)));
            assert_eq!(&buf[..3], b"two");
            // Counted at once; priorities first, FIFO within one.
            for (text, prio) in [(&b"low1"[..], 7), (b"mid", 3), (b"low2", 7), (b"high", 0)] {
                node.msg_send(a, b, text, prio).unwrap();
            }
            assert_eq!(node.msg_available(b), Ok(4));
            for want in [&b"high"[..], b"mid", b"low1", b"low2"] {
                let n = node.msg_recv(b, &mut buf).unwrap();
                assert_eq!(&buf[..n], want, "{prov}");
            }
            // Full: NUM_RECV_BUFFERS counts the local messages.
            const NUM_RECV_BUFFERS: u32 = 7;
            for i in 0..16u32 {
                node.msg_send(a, b, &i.to_le_bytes(), 1).unwrap();
            }
            assert_eq!(node.endpoint_get_attribute(b, NUM_RECV_BUFFERS), Ok(0));
            node.set_endpoint_timeout(a, Some(Duration::from_millis(20)))
                .unwrap();
            match compat {
                Compat::Spec => {
                    assert_eq!(
                        node.msg_send(a, b, b"x", 1),
                        Err(Status::MCAPI_TIMEOUT),
                        "{prov}: spec 4.3.2, a full endpoint blocks the send"
                    );
                    let late = node.msg_send_i(a, b, &16u32.to_le_bytes(), 1).unwrap();
                    assert_eq!(node.test(late, None), Ok(None), "pending while full");
                    let n = node.msg_recv(b, &mut buf).unwrap();
                    assert_eq!(&buf[..n], &0u32.to_le_bytes());
                    assert_eq!(node.test(late, None), Ok(Some(4)), "room made");
                }
                Compat::Mca => {
                    assert_eq!(
                        node.msg_send(a, b, b"x", 1),
                        Err(Status::MCAPI_ERR_MEM_LIMIT)
                    );
                    assert_eq!(
                        node.msg_send_i(a, b, b"x", 1),
                        Err(Status::MCAPI_ERR_MEM_LIMIT)
                    );
                    let n = node.msg_recv(b, &mut buf).unwrap();
                    assert_eq!(&buf[..n], &0u32.to_le_bytes());
                    node.msg_send(a, b, &16u32.to_le_bytes(), 1).unwrap();
                }
            }
            for i in 1..17u32 {
                let n = node.msg_recv(b, &mut buf).unwrap();
                assert_eq!(&buf[..n], &i.to_le_bytes(), "{prov}: FIFO");
            }
            assert_eq!(node.msg_available(b), Ok(0));
            assert_eq!(node.endpoint_get_attribute(b, NUM_RECV_BUFFERS), Ok(16));
            // A send pending on a full endpoint that is deleted fails; a new endpoint at
            // the port starts empty.
            if compat == Compat::Spec {
                for i in 0..16u32 {
                    node.msg_send(a, b, &i.to_le_bytes(), 1).unwrap();
                }
                let pending = node.msg_send_i(a, b, b"late", 1).unwrap();
                node.endpoint_delete(b).unwrap();
                assert_eq!(
                    node.test(pending, None),
                    Err(Status::MCAPI_ERR_ENDP_INVALID)
                );
                let b = node.endpoint_create(2).unwrap();
                assert_eq!(node.msg_available(b), Ok(0));
                node.msg_send(a, b, b"new", 0).unwrap();
                let n = node.msg_recv(b, &mut buf).unwrap();
                assert_eq!(&buf[..n], b"new");
            }
            node.finalize().unwrap();
        }
    }
}

/// Messages to the node's own endpoints and to another node's interleave from one thread
/// without a fabric round trip for the local ones, and a blocking send queued behind
/// pending `msg_send_i`s to a local endpoint keeps their order.
#[test]
fn local_sends_keep_order_behind_pending_ones() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let node = Node::initialize(0, 42, config(prov, "same-node-order")).unwrap();
        let a = node.endpoint_create(1).unwrap();
        let b = node.endpoint_create(2).unwrap();
        for i in 0..16u32 {
            node.msg_send(a, b, &i.to_le_bytes(), 2).unwrap();
        }
        let queued: Vec<_> = (16..20u32)
            .map(|i| node.msg_send_i(a, b, &i.to_le_bytes(), 2).unwrap())
            .collect();
        std::thread::scope(|s| {
            let sender = s.spawn(|| node.msg_send(a, b, &20u32.to_le_bytes(), 2));
            let mut buf = [0u8; 4];
            for i in 0..21u32 {
                let n = node.msg_recv(b, &mut buf).unwrap();
                assert_eq!(&buf[..n], &i.to_le_bytes(), "{prov}");
            }
            sender.join().unwrap().unwrap();
        });
        for r in queued {
            assert_eq!(node.wait(r, None, Some(Duration::from_secs(5))), Ok(4));
        }
        node.finalize().unwrap();
    }
}

/// A pattern that tells every offset of a large message from every other (and one message
/// from the next: `seed`).
fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) as u8 ^ (i >> 13) as u8)
        .collect()
}

/// Messages above the eager size go by rendezvous: 16 MiB between two nodes over shm and
/// tcp with their content checked, in the order of priorities and per-sender FIFO mixed
/// with eager messages, both from blocking sends and from `msg_send_i`.
#[test]
fn large_messages_by_rendezvous_keep_content_priorities_and_order() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let cfg = config(prov, "large");
        let a = Node::initialize(0, 60, cfg.clone()).unwrap();
        let b = Node::initialize(0, 61, cfg).unwrap();
        assert_eq!(a.max_msg_size(), mcapi::MAX_MSG_SIZE, "{prov}");
        assert!(a.eager_max() <= 64 * 1024);
        let rx = b.endpoint_create(1).unwrap();
        let tx = a.endpoint_create(1).unwrap();
        let to = a.endpoint_get(0, 61, 1, None).unwrap();
        let max = mcapi::MAX_MSG_SIZE;
        // One 16 MiB message, blocking send, received by a blocking receive.
        let big = pattern(max, 1);
        let recv = {
            let b = b.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; max];
                let n = b.msg_recv(rx, &mut buf).unwrap();
                buf.truncate(n);
                buf
            })
        };
        a.msg_send(tx, to, &big, 0).unwrap();
        let got = recv.join().unwrap();
        assert!(got == big, "{prov}: 16 MiB message content differs");
        assert_eq!(
            a.msg_send(tx, to, &vec![0u8; max + 1], 0),
            Err(Status::MCAPI_ERR_MSG_SIZE)
        );
        // A mix of sizes and priorities, queued before the receiver looks.
        let sizes = [
            8usize,
            200_000,
            64 * 1024,
            64 * 1024 + 1,
            3,
            1 << 20,
            100,
            2_000_000,
        ];
        let prios = [2u32, 2, 0, 1, 0, 2, 1, 0];
        let mut reqs = Vec::new();
        for (i, (&n, &p)) in sizes.iter().zip(&prios).enumerate() {
            let data = pattern(n, i as u32 + 10);
            if i % 2 == 0 {
                a.msg_send(tx, to, &data, p).unwrap();
            } else {
                reqs.push(a.msg_send_i(tx, to, &data, p).unwrap());
            }
        }
        for r in reqs {
            a.wait(r, None, Some(Duration::from_secs(30))).unwrap();
        }
        await_available(&b, rx, sizes.len(), prov);
        // A buffer too small leaves the large message queued.
        let mut small = vec![0u8; 16];
        let mut order = Vec::new();
        let mut expect: Vec<usize> = (0..sizes.len()).collect();
        expect.sort_by_key(|&i| prios[i]);
        for &i in &expect {
            if sizes[i] > 16 {
                assert_eq!(
                    b.msg_recv(rx, &mut small),
                    Err(Status::MCAPI_ERR_MSG_TRUNCATED)
                );
            }
            let mut buf = vec![0u8; 4 << 20];
            let n = b.msg_recv(rx, &mut buf).unwrap();
            assert_eq!(n, sizes[i], "{prov}: message {i} out of order");
            assert!(
                buf[..n] == pattern(n, i as u32 + 10)[..],
                "{prov}: message {i} content"
            );
            order.push(i);
        }
        assert_eq!(order, expect);
        assert_eq!(
            b.fetched_messages(),
            Ok(0),
            "{prov}: reads held after the last take"
        );
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

/// Waits (up to 30 s) until `what` holds.
fn await_true(what: &str, mut f: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(std::time::Instant::now() < until, "never: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Rendezvous messages are read as soon as their descriptors arrive, before any receive,
/// within the receiver's read-ahead budget (16 MiB: four 4 MiB messages; the sender's
/// staging is freed as each read ends); an endpoint deleted with messages read and
/// messages waiting for room frees its receive staging, and the sender is told of every
/// message (nothing stays staged).
#[test]
fn prefetched_rendezvous_messages_are_freed_with_their_endpoint() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let cfg = config(prov, "prefetch");
        let a = Node::initialize(0, 63, cfg.clone()).unwrap();
        let b = Node::initialize(0, 64, cfg).unwrap();
        let rx = b.endpoint_create(1).unwrap();
        let tx = a.endpoint_create(1).unwrap();
        // With a timeout, sends stage their messages and return (none go in place).
        a.set_endpoint_timeout(tx, Some(Duration::from_secs(30)))
            .unwrap();
        let to = a.endpoint_get(0, 64, 1, None).unwrap();
        let len = 4 << 20;
        for i in 0..3 {
            a.msg_send(tx, to, &pattern(len, 30 + i), 0).unwrap();
        }
        // Read by b's progress (its background thread) while nobody receives.
        await_true("three read ahead", || {
            a.staged_messages() == Ok(0) && b.fetched_messages() == Ok(3)
        });
        let mut buf = vec![0u8; len];
        assert_eq!(b.msg_recv(rx, &mut buf), Ok(len));
        assert!(
            buf == pattern(len, 30),
            "{prov}: a prefetched message's content"
        );
        assert_eq!(b.fetched_messages(), Ok(2));
        // Three more: four fit the budget, the fifth waits (still staged at a).
        for i in 3..6 {
            a.msg_send(tx, to, &pattern(len, 30 + i), 0).unwrap();
        }
        await_true("four read ahead, one waiting", || {
            a.staged_messages() == Ok(1) && b.fetched_messages() == Ok(4)
        });
        b.endpoint_delete(rx).unwrap();
        assert_eq!(
            b.fetched_messages(),
            Ok(0),
            "{prov}: reads held after the delete"
        );
        await_true("the waiting message released", || {
            a.staged_messages() == Ok(0)
        });
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

/// A node sending a 16 MiB message to itself, in one thread: queued at once (a copy), no
/// deadlock, by `msg_send` and by `msg_send_i`.
#[test]
fn a_same_node_16_mib_message_in_one_thread() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    let cfg = config("shm", "large-self");
    let a = Node::initialize(0, 62, cfg).unwrap();
    let rx = a.endpoint_create(1).unwrap();
    let tx = a.endpoint_create(2).unwrap();
    let max = mcapi::MAX_MSG_SIZE;
    let big = pattern(max, 7);
    a.msg_send(tx, rx, &big, 1).unwrap();
    let r = a.msg_send_i(tx, rx, &pattern(max, 8), 0).unwrap();
    a.wait(r, None, Some(Duration::from_secs(10))).unwrap();
    let mut buf = vec![0u8; max];
    assert_eq!(a.msg_recv(rx, &mut buf), Ok(max));
    assert!(buf == pattern(max, 8));
    assert_eq!(a.msg_recv(rx, &mut buf), Ok(max));
    assert!(buf == big);
    a.finalize().unwrap();
}

/// A receive request waited on with its buffer (`msg_recv_i` + `wait`) reads a rendezvous
/// message straight into that buffer where the provider allows (as a blocking `msg_recv`
/// does): content intact, no read ahead held, the request released; the request behind
/// it on the same endpoint gets the next message, and a cancelled one consumes none.
#[test]
fn a_waited_receive_request_reads_its_rendezvous_message_in_place() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let cfg = config(prov, "recv-i-in-place");
        let a = Node::initialize(0, 65, cfg.clone()).unwrap();
        let b = Node::initialize(0, 66, cfg).unwrap();
        let rx = b.endpoint_create(1).unwrap();
        let tx = a.endpoint_create(1).unwrap();
        let to = a.endpoint_get(0, 66, 1, None).unwrap();
        let len = 3 << 20;
        let first = b.msg_recv_i(rx).unwrap();
        let second = b.msg_recv_i(rx).unwrap();
        let cancelled = b.msg_recv_i(rx).unwrap();
        b.cancel(cancelled).unwrap();
        let (before, _) = b.reads_in_place(rx).unwrap();
        let waiter = {
            let b = b.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; len];
                let n = b.wait(first, Some(&mut buf), Some(Duration::from_secs(60)));
                (n, buf)
            })
        };
        await_true("the waiter blocks", || b.reads_in_place(rx).unwrap().1);
        a.msg_send(tx, to, &pattern(len, 70), 1).unwrap();
        let (n, buf) = waiter.join().unwrap();
        assert_eq!(n, Ok(len), "{prov}");
        assert!(buf == pattern(len, 70), "{prov}: content read in place");
        let (after, waiting) = b.reads_in_place(rx).unwrap();
        assert!(
            !waiting,
            "{prov}: the finished wait still counts as waiting"
        );
        let in_place = usize::from(b.reads_into_receive_buffers());
        assert_eq!(after - before, in_place as u64, "{prov}: read in place");
        assert_eq!(b.fetched_messages(), Ok(0), "{prov}: nothing read ahead");
        assert_eq!(b.test(first, None), Err(Status::MCAPI_ERR_REQUEST_INVALID));
        // The second request gets the next message (eager here), by test.
        a.msg_send(tx, to, b"next", 0).unwrap();
        let mut small = [0u8; 8];
        await_true("the second message", || {
            b.test(second, Some(&mut small)) == Ok(Some(4))
        });
        assert_eq!(&small[..4], b"next");
        assert_eq!(
            b.msg_available(rx),
            Ok(0),
            "{prov}: the cancelled one took none"
        );
        // A test loop: on shm (the read is the test's own copy) in place too; elsewhere the
        // message is read ahead and copied out. (On shm the background thread reads ahead
        // if this thread stalls for a millisecond as the message arrives: up to 3 tries.)
        let mut in_place = 0;
        for seed in 72..75 {
            let request = b.msg_recv_i(rx).unwrap();
            let (before, _) = b.reads_in_place(rx).unwrap();
            let sender = {
                let a = a.clone();
                std::thread::spawn(move || a.msg_send(tx, to, &pattern(len, seed), 0))
            };
            let mut buf = vec![0u8; len];
            let until = std::time::Instant::now() + Duration::from_secs(60);
            let n = loop {
                if let Some(n) = b.test(request, Some(&mut buf)).unwrap() {
                    break n;
                }
                assert!(std::time::Instant::now() < until, "{prov}: never received");
            };
            assert_eq!(sender.join().unwrap(), Ok(()));
            assert_eq!(n, len);
            assert!(buf == pattern(len, seed), "{prov}: content taken by test");
            in_place = b.reads_in_place(rx).unwrap().0 - before;
            if in_place > 0 || !b.sends_in_place() {
                break;
            }
        }
        assert_eq!(
            in_place,
            u64::from(b.sends_in_place()),
            "{prov}: read in place by test"
        );
        await_true("nothing stays staged", || a.staged_messages() == Ok(0));
        assert_eq!(b.fetched_messages(), Ok(0), "{prov}: no read held");
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

/// Receive requests posted with their buffers (`msg_recv_i_into`, as C's `mcapi_msg_recv_i`)
/// get rendezvous messages read straight into those buffers as they arrive, in FIFO order,
/// without a read ahead or a copy (where the provider allows), whether waited on, tested or
/// never looked at until their messages are in; an eager message is copied into its
/// request's buffer; a buffer too small leaves the message queued (`MSG_TRUNCATED`); a
/// request cancelled before its message came consumes none.
#[test]
fn posted_receive_buffers_get_rendezvous_messages_as_they_arrive() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let cfg = config(prov, "recv-i-posted");
        let a = Node::initialize(0, 69, cfg.clone()).unwrap();
        let b = Node::initialize(0, 70, cfg).unwrap();
        let rx = b.endpoint_create(1).unwrap();
        let tx = a.endpoint_create(1).unwrap();
        let to = a.endpoint_get(0, 70, 1, None).unwrap();
        let len = (3 << 20) + 5;
        let buffer = |len: usize| RecvBuffer::from_static(Box::leak(vec![0u8; len].into()));
        let post = |buf: RecvBuffer| b.msg_recv_i_into(rx, buf).unwrap();
        let cancelled = post(buffer(len));
        b.cancel(cancelled).unwrap();
        let requests: Vec<_> = (0..3).map(|_| post(buffer(len))).collect();
        let eager = post(buffer(16));
        let (before, _) = b.reads_in_place(rx).unwrap();
        let sender = {
            let a = a.clone();
            std::thread::spawn(move || {
                for seed in 90..93 {
                    a.msg_send(tx, to, &pattern(len, seed), 2)?;
                }
                a.msg_send(tx, to, b"tail", 2)
            })
        };
        // The last request is waited on first: every message goes to its own request
        // whatever order they are looked at in.
        let wait = Some(Duration::from_secs(60));
        let (n, mut tail) = b.wait_into(eager, wait).unwrap();
        assert_eq!(
            (n, &tail.as_mut_slice().unwrap()[..4]),
            (4, &b"tail"[..]),
            "{prov}"
        );
        let (n, mut second) = b.wait_into(requests[1], wait).unwrap();
        assert_eq!(n, len, "{prov}");
        assert!(
            second.as_mut_slice().unwrap()[..len] == pattern(len, 91),
            "{prov}: second"
        );
        await_true("the first request", || {
            b.test(requests[0], None) == Ok(Some(len))
        });
        let (n, mut first) = b.wait_into(requests[0], wait).unwrap();
        assert_eq!(n, len, "{prov}");
        assert!(
            first.as_mut_slice().unwrap()[..len] == pattern(len, 90),
            "{prov}: first"
        );
        assert_eq!(b.wait_any(&requests[2..], wait), Ok((0, len)), "{prov}");
        assert_eq!(sender.join().unwrap(), Ok(()));
        let (after, _) = b.reads_in_place(rx).unwrap();
        let in_place = u64::from(b.reads_into_receive_buffers());
        assert_eq!(
            after - before,
            3 * in_place,
            "{prov}: read into the posted buffers"
        );
        assert_eq!(b.fetched_messages(), Ok(0), "{prov}: nothing read ahead");
        assert_eq!(
            b.msg_available(rx),
            Ok(0),
            "{prov}: the cancelled one took none"
        );
        // A buffer given back is posted again; too small a one leaves the message queued
        // for a receive that fits.
        let short = post(tail);
        a.msg_send(tx, to, &pattern(len, 95), 1).unwrap();
        let mut outcome = Ok(None);
        await_true("the short request ends", || {
            outcome = b.test(short, None);
            outcome != Ok(None)
        });
        assert_eq!(outcome, Err(Status::MCAPI_ERR_MSG_TRUNCATED), "{prov}");
        assert_eq!(b.msg_available(rx), Ok(1), "{prov}");
        let again = post(first);
        let (n, mut first) = b.wait_into(again, wait).unwrap();
        assert_eq!(n, len, "{prov}");
        assert!(
            first.as_mut_slice().unwrap()[..len] == pattern(len, 95),
            "{prov}: left queued"
        );
        // No buffer: `wait_into` refuses, the request stays.
        let plain = b.msg_recv_i(rx).unwrap();
        assert_eq!(
            b.wait_into(plain, Some(Duration::ZERO)).err(),
            Some(Status::MCAPI_ERR_PARAMETER)
        );
        b.cancel(plain).unwrap();
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

/// `msg_send_i_zero_copy` lends a buffer that lives for good where the node says so (shm,
/// tcp: the receiver reads it in place, served by the sender's progress on tcp): each request completes once the receiver has read the message
/// (read ahead or taken), with priorities and per-sender FIFO order kept across lent and
/// eager messages; elsewhere messages are copied and the requests complete as they go.
/// Nothing stays staged or read.
#[test]
fn zero_copy_msg_send_i_keeps_content_priorities_and_order() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let cfg = config(prov, "send-i-lent");
        let a = Node::initialize(0, 67, cfg.clone()).unwrap();
        let b = Node::initialize(0, 68, cfg).unwrap();
        let rx = b.endpoint_create(1).unwrap();
        let tx = a.endpoint_create(1).unwrap();
        let to = a.endpoint_get(0, 68, 1, None).unwrap();
        let big = 4 << 20;
        // Five lent 4 MiB messages (more than the receiver reads ahead) and two eager ones.
        let sizes = [big, 8, big, big, big + 3, big, 100];
        let prios = [1u32, 0, 0, 2, 1, 1, 2];
        let bufs: Vec<&'static [u8]> = (0..sizes.len())
            .map(|i| &*Box::leak(pattern(sizes[i], 80 + i as u32).into_boxed_slice()))
            .collect();
        let reqs: Vec<_> = (0..sizes.len())
            .map(|i| {
                a.msg_send_i_zero_copy(tx, to, SendBuffer::from_static(bufs[i]), prios[i])
                    .unwrap()
            })
            .collect();
        await_available(&b, rx, sizes.len(), prov);
        // More than the receiver reads ahead: where buffers are lent, a send still waits.
        let waiting = reqs
            .iter()
            .filter(|&&r| a.test(r, None) == Ok(None))
            .count();
        assert_eq!(
            waiting > 0,
            a.lends_static_buffers(),
            "{prov}: {waiting} sends wait"
        );
        let mut expect: Vec<usize> = (0..sizes.len()).collect();
        expect.sort_by_key(|&i| prios[i]);
        let mut buf = vec![0u8; big + 8];
        for &i in &expect {
            let n = b.msg_recv(rx, &mut buf).unwrap();
            assert_eq!(n, sizes[i], "{prov}: message {i} out of order");
            assert!(buf[..n] == *bufs[i], "{prov}: message {i} content");
        }
        for (i, r) in reqs.into_iter().enumerate() {
            assert_eq!(
                a.wait(r, None, Some(Duration::from_secs(30))),
                Ok(sizes[i]),
                "{prov}: send {i}"
            );
        }
        if a.lends_static_buffers() {
            // A lent send completes at its receiver's `RndvDone`: nothing is left at once.
            assert_eq!(a.staged_messages(), Ok(0), "{prov}: nothing stays lent");
        } else {
            // A staged send completed as its descriptor left; the `RndvDone`s follow.
            await_true("nothing stays staged", || a.staged_messages() == Ok(0));
        }
        assert_eq!(b.fetched_messages(), Ok(0), "{prov}: no read held");
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

#[test]
fn requests_keep_the_one_waiter_rule_and_completions_are_not_cancelled() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    let node = Node::initialize(0, 42, config("shm", "waiters")).unwrap();
    let a = node.endpoint_create(1).unwrap();
    let b = node.endpoint_create(2).unwrap();
    // A send that completed (queued at once on this node) but was not reported: a cancel
    // comes too late; once reported, a cancel releases it.
    let s = node.msg_send_i(a, b, b"x", 1).unwrap();
    assert_eq!(node.cancel(s), Err(Status::MCAPI_ERR_REQUEST_INVALID));
    assert_eq!(node.test(s, None), Ok(Some(1)));
    assert_eq!(node.cancel(s), Ok(()));
    let mut buf = [0u8; 8];
    assert_eq!(node.msg_recv(b, &mut buf), Ok(1), "the message went");
    // A timeout too long to add to the clock is no deadline.
    let s = node.msg_send_i(a, b, b"x", 1).unwrap();
    assert_eq!(node.wait(s, None, Some(Duration::MAX)), Ok(1));
    assert_eq!(node.msg_recv(b, &mut buf), Ok(1));

    // A wait_any in progress is the waiter of each request it lists ...
    let r = node.msg_recv_i(b).unwrap();
    let other = node.msg_recv_i(a).unwrap();
    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            let mut buf = [0u8; 8];
            loop {
                // (The probe below may be the waiter for a moment.)
                let got = node.wait_any_into(
                    &[other, r],
                    &mut [None, Some(&mut buf[..])],
                    Some(Duration::from_secs(30)),
                );
                if got != Err(Status::MCAPI_ERR_WAIT_PENDING) {
                    return (got, buf);
                }
            }
        });
        await_true("the wait_any to register", || {
            node.wait(r, None, Some(Duration::ZERO)) == Err(Status::MCAPI_ERR_WAIT_PENDING)
        });
        assert_eq!(
            node.wait_any(&[r], Some(Duration::ZERO)),
            Err(Status::MCAPI_ERR_WAIT_PENDING)
        );
        node.msg_send(a, b, b"yz", 1).unwrap();
        let (got, buf) = waiting.join().unwrap();
        assert_eq!(got, Ok((1, Ok(2))));
        assert_eq!(&buf[..2], b"yz");
    });
    // ... and leaves the others valid.
    assert_eq!(node.cancel(other), Ok(()));

    // A wait in progress keeps a wait_any out.
    let r = node.msg_recv_i(b).unwrap();
    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| loop {
            // (The probe below may be the waiter for a moment.)
            let got = node.wait(r, Some(&mut [0u8; 8][..]), Some(Duration::from_secs(30)));
            if got != Err(Status::MCAPI_ERR_WAIT_PENDING) {
                return got;
            }
        });
        await_true("the wait to register", || {
            node.wait_any(&[r, r], Some(Duration::ZERO)) == Err(Status::MCAPI_ERR_WAIT_PENDING)
        });
        node.msg_send(a, b, b"w", 1).unwrap();
        assert_eq!(waiting.join().unwrap(), Ok(1));
    });
    node.finalize().unwrap();
}

#[test]
fn a_request_table_beyond_the_handles_is_refused_and_changes_nothing() {
    let mut cfg = config("shm", "too-many-requests");
    cfg.request_table_size = (1 << 24) + 1;
    assert_eq!(
        Node::initialize(0, 43, cfg.clone()).err(),
        Some(Status::MCAPI_ERR_NODE_INITFAILED)
    );
    cfg.request_table_size = 16;
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    Node::initialize(0, 43, cfg).unwrap().finalize().unwrap();
}

#[test]
fn a_contact_waiting_for_a_node_does_not_hold_calls_with_deadlines() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    let cfg = config("shm", "contact");
    let a = Node::initialize(0, 44, cfg.clone()).unwrap();
    std::thread::scope(|scope| {
        // Waits for node 45 to come up, holding the contact with it meanwhile.
        let waiting = scope.spawn(|| a.endpoint_get(0, 45, 3, None));
        std::thread::sleep(Duration::from_millis(200));
        const NODE_ATTR_TYPE: u32 = 1;
        assert_eq!(
            a.node_get_attribute(0, 45, NODE_ATTR_TYPE),
            Err(Status::MCAPI_ERR_NODE_INVALID),
            "a node that is not up, after a bounded wait"
        );
        let b = Node::initialize(0, 45, cfg).unwrap();
        let e = b.endpoint_create(3).unwrap();
        assert_eq!(waiting.join().unwrap(), Ok(e));
        b.finalize().unwrap();
    });
    a.finalize().unwrap();
}

#[test]
fn refused_calls_change_nothing_and_name_the_specs_codes() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    let mut cfg = config("shm", "refused-calls");
    cfg.request_table_size = 2;
    // A topology that names this node only: node 47 is none of the job's.
    let port = 47700 + (std::process::id() % 100) as u16;
    cfg.topology =
        Some(mcapi::config::Topology::parse(&format!("0 46 127.0.0.1:{port}\n")).unwrap());
    cfg.job_key = Some(mcapi::config::JobKey::new(b"refused-calls-key-0123456789abcd").unwrap());
    let node = Node::initialize(0, 46, cfg).unwrap();
    let a = node.endpoint_create(1).unwrap();
    let b = node.endpoint_create(2).unwrap();
    // A full request table: a msg_send_i to this node is refused and delivers nothing.
    let held = [node.msg_recv_i(a).unwrap(), node.msg_recv_i(a).unwrap()];
    assert_eq!(
        node.msg_send_i(a, b, b"hello", 0).err(),
        Some(Status::MCAPI_ERR_REQUEST_LIMIT)
    );
    assert_eq!(node.msg_available(b), Ok(0), "nothing was sent");
    for r in held {
        node.cancel(r).unwrap();
    }
    // A node the job does not have is no node to get an endpoint of: refused before a
    // request exists (4.2.2: on error only the status is set), and has no endpoint to read
    // attributes of (4.2.5 knows ENDP_INVALID only).
    assert_eq!(
        node.endpoint_get_i(0, 47, 1),
        Err(Status::MCAPI_ERR_NODE_INVALID)
    );
    let ghost = EndpointId::encode(0, 47, 1).unwrap();
    assert_eq!(
        node.endpoint_get_attribute(ghost, 9),
        Err(Status::MCAPI_ERR_ENDP_INVALID)
    );
    node.finalize().unwrap();
}

/// A node whose configured maximum is smaller than its sender's receives the larger
/// messages anyway (docs/implementation-defined.md: larger *sends* are refused, any message
/// up to the ceiling is received), content checked.
#[test]
fn a_receiver_with_a_smaller_maximum_receives_larger_messages() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let cfg = config(prov, "small-max");
        let a = Node::initialize(0, 60, cfg.clone()).unwrap();
        let mut small = cfg;
        small.max_msg_size = 1 << 20;
        let b = Node::initialize(0, 61, small).unwrap();
        let rx = b.endpoint_create(1).unwrap();
        let tx = a.endpoint_create(1).unwrap();
        let to = a
            .endpoint_get(0, 61, 1, Some(Duration::from_secs(10)))
            .unwrap();
        let data: Vec<u8> = (0..2 << 20).map(|i: u32| (i % 251) as u8).collect();
        let sent = std::thread::scope(|s| {
            let sender = s.spawn(|| a.msg_send(tx, to, &data, 0));
            let mut buf = vec![0u8; 2 << 20];
            let got = b.msg_recv(rx, &mut buf);
            assert_eq!(got, Ok(data.len()), "{prov}");
            assert!(buf == data, "{prov}: content");
            sender.join().unwrap()
        });
        assert_eq!(sent, Ok(()), "{prov}");
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

/// A rendezvous message arriving while a blocking receive waits on another endpoint of the
/// node (here port 65 while it waits at port 1: ports once shared a waiting count) is still read,
/// so a sender blocked until its buffer is read goes on.
#[test]
fn a_large_message_arriving_while_another_port_waits_is_read() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let cfg = config(prov, "waits-elsewhere");
        let a = Node::initialize(0, 62, cfg.clone()).unwrap();
        let b = Node::initialize(0, 63, cfg).unwrap();
        let tx = a.endpoint_create(1).unwrap();
        let waiting = b.endpoint_create(1).unwrap();
        let other = b.endpoint_create(65).unwrap();
        let wait = Some(Duration::from_secs(10));
        let to_waiting = a.endpoint_get(0, 63, 1, wait).unwrap();
        let to_other = a.endpoint_get(0, 63, 65, wait).unwrap();
        let data = vec![9u8; 1 << 20];
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let mut buf = [0u8; 16];
                b.msg_recv(waiting, &mut buf)
            });
            std::thread::sleep(Duration::from_millis(200));
            // Blocks until the receiver read it (on shm the receiver reads the buffer in
            // place): a bound, not a timing.
            let (done, sent) = std::sync::mpsc::channel();
            let (a_ref, data) = (&a, &data);
            let sender = s.spawn(move || done.send(a_ref.msg_send(tx, to_other, data, 0)));
            let outcome = sent.recv_timeout(Duration::from_secs(30));
            a.msg_send(tx, to_waiting, b"go", 0).unwrap();
            assert_eq!(waiter.join().unwrap(), Ok(2), "{prov}");
            let mut big = vec![0u8; 1 << 20];
            assert_eq!(b.msg_recv(other, &mut big), Ok(1 << 20), "{prov}");
            assert!(big.iter().all(|&x| x == 9), "{prov}: content");
            assert_eq!(outcome, Ok(Ok(())), "{prov}: the large send");
            sender.join().unwrap().ok();
        });
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

/// A rendezvous message that arrived for a waiting receive which then leaves without it
/// (its buffer too small: MCAPI_ERR_MSG_TRUNCATED) is read as any other, so a sender
/// blocked until its buffer is read goes on, and a later receive gets it.
#[test]
fn a_large_message_its_waiting_receive_leaves_is_read() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in providers() {
        let cfg = config(prov, "receive-leaves");
        let a = Node::initialize(0, 67, cfg.clone()).unwrap();
        let b = Node::initialize(0, 68, cfg).unwrap();
        let tx = a.endpoint_create(1).unwrap();
        let rx = b.endpoint_create(1).unwrap();
        let to = a
            .endpoint_get(0, 68, 1, Some(Duration::from_secs(10)))
            .unwrap();
        let data = vec![7u8; 1 << 20];
        std::thread::scope(|s| {
            let small = s.spawn(|| {
                let mut buf = [0u8; 16];
                b.msg_recv(rx, &mut buf)
            });
            std::thread::sleep(Duration::from_millis(200));
            let (done, sent) = std::sync::mpsc::channel();
            let (a_ref, data) = (&a, &data);
            let sender = s.spawn(move || done.send(a_ref.msg_send(tx, to, data, 0)));
            assert_eq!(
                small.join().unwrap(),
                Err(Status::MCAPI_ERR_MSG_TRUNCATED),
                "{prov}"
            );
            // A bound, not a timing: the sender waits for the read.
            let outcome = sent.recv_timeout(Duration::from_secs(30));
            let mut big = vec![0u8; 1 << 20];
            assert_eq!(b.msg_recv(rx, &mut big), Ok(1 << 20), "{prov}");
            assert!(big.iter().all(|&x| x == 7), "{prov}: content");
            assert_eq!(outcome, Ok(Ok(())), "{prov}: the large send");
            sender.join().unwrap().ok();
        });
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

/// `finalize` ends a call of another thread that waits, without a deadline, for a node
/// that never comes up (`endpoint_get` with no timeout): it returns MCAPI_ERR_NODE_NOTINIT
/// instead of retrying for good (and keeping the finalized node alive).
#[test]
fn finalize_ends_a_wait_for_a_node_that_never_comes_up() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    let a = Node::initialize(0, 70, config("shm", "finalize-absent")).unwrap();
    let (done, ended) = std::sync::mpsc::channel();
    let waiter = {
        let a = a.clone();
        std::thread::spawn(move || done.send(a.endpoint_get(0, 99, 1, None)))
    };
    std::thread::sleep(Duration::from_millis(200));
    a.finalize().unwrap();
    // A bound, not a timing: the waiter asks at least every second.
    let got = ended.recv_timeout(Duration::from_secs(20));
    assert!(
        matches!(got, Ok(Err(Status::MCAPI_ERR_NODE_NOTINIT))),
        "{got:?}"
    );
    waiter.join().unwrap().ok();
}

/// A node whose every handle is dropped without `finalize` frees its id: it can be
/// initialized again in the process.
#[test]
fn a_node_dropped_without_finalize_can_be_initialized_again() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    let cfg = config("shm", "dropped");
    let a = Node::initialize(0, 71, cfg.clone()).unwrap();
    assert_eq!(
        Node::initialize(0, 71, cfg.clone()).err(),
        Some(Status::MCAPI_ERR_NODE_INITIALIZED)
    );
    drop(a);
    // Its background thread may hold the last handle for a moment (a bound, not a timing).
    let start = std::time::Instant::now();
    let again = loop {
        match Node::initialize(0, 71, cfg.clone()) {
            Err(Status::MCAPI_ERR_NODE_INITIALIZED)
                if start.elapsed() < Duration::from_secs(10) =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => break other.expect("initialized again"),
        }
    };
    again.finalize().unwrap();
}
