//! Packet and scalar channels between nodes over real providers (shm and tcp), one test at a
//! time: nodes are threads of this process here; `processes.rs` covers separate processes.

use mcapi::config::Config;
use mcapi::semantics::channel::status_flags as flag;
use mcapi::{ChannelHandle, EndpointId, Node, RequestHandle, Status};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

static FABRIC: Mutex<()> = Mutex::new(());
const WAIT: Option<Duration> = Some(Duration::from_secs(20));
const ATTR_STATUS: u32 = 8;
const ATTR_MAX_PAYLOAD: u32 = 1;
const ATTR_PRIORITY: u32 = 5;

fn config(provider: &str, job: &str) -> Config {
    let mut c = Config::defaults();
    c.provider = Some(provider.into());
    c.job = format!("{job}-{}", std::process::id());
    c.recv_buffers = 16;
    c
}

fn providers() -> Vec<&'static str> {
    offered(&["shm", "tcp", "sockets"])
}

/// shm and tcp, and sockets, net and udp, whose sides keep plain receives of their own (no hub).
fn every_provider() -> Vec<&'static str> {
    offered(&["shm", "tcp", "sockets", "net", "udp"])
}

fn offered(names: &[&'static str]) -> Vec<&'static str> {
    let mut v = names.to_vec();
    v.retain(|p| mcapi_ofi::Info::first(&mcapi_ofi::Hints::new().provider(*p)).is_ok());
    v
}

struct Pair {
    a: Node,
    b: Node,
    third: Node,
    tx: EndpointId,
    rx: EndpointId,
}

impl Pair {
    fn new(prov: &str, job: &str, base: u32) -> Pair {
        Pair::with_config(config(prov, job), base)
    }

    fn with_config(cfg: Config, base: u32) -> Pair {
        let a = Node::initialize(0, base, cfg.clone()).unwrap();
        let b = Node::initialize(0, base + 1, cfg.clone()).unwrap();
        let third = Node::initialize(0, base + 2, cfg).unwrap();
        let tx = a.endpoint_create(10).unwrap();
        let rx = b.endpoint_create(20).unwrap();
        Pair {
            a,
            b,
            third,
            tx,
            rx,
        }
    }

    fn finalize(self) {
        self.a.finalize().unwrap();
        self.b.finalize().unwrap();
        self.third.finalize().unwrap();
    }
}

/// A third node gets both endpoints and connects them (spec 7.1), then both sides open
/// (receiver first or sender first) and wait.
fn open(p: &Pair, scalar: bool, receiver_first: bool) -> (ChannelHandle, ChannelHandle) {
    connect(p, scalar);
    let open_rx = |n: &Node| {
        if scalar {
            n.sclchan_recv_open_i(p.rx)
        } else {
            n.pktchan_recv_open_i(p.rx)
        }
        .unwrap()
    };
    let open_tx = |n: &Node| {
        if scalar {
            n.sclchan_send_open_i(p.tx)
        } else {
            n.pktchan_send_open_i(p.tx)
        }
        .unwrap()
    };
    let ((hr, qr), (hs, qs)) = if receiver_first {
        let r = open_rx(&p.b);
        (r, open_tx(&p.a))
    } else {
        let s = open_tx(&p.a);
        (open_rx(&p.b), s)
    };
    let a = p.a.clone();
    let waiter = std::thread::spawn(move || a.wait(qs, None, WAIT));
    p.b.wait(qr, None, WAIT).unwrap();
    waiter.join().unwrap().unwrap();
    (hs, hr)
}

/// The third node connects `tx` to `rx` (spec 7.1) and waits for the connect.
fn connect(p: &Pair, scalar: bool) {
    let s = p.third.endpoint_get(0, p.tx.node(), 10, WAIT).unwrap();
    let r = p.third.endpoint_get(0, p.rx.node(), 20, WAIT).unwrap();
    let c = if scalar {
        p.third.sclchan_connect_i(s, r)
    } else {
        p.third.pktchan_connect_i(s, r)
    }
    .unwrap();
    p.third.wait(c, None, WAIT).unwrap();
}

fn close(p: &Pair, hs: ChannelHandle, hr: ChannelHandle, scalar: bool) {
    let (qs, qr): (RequestHandle, RequestHandle) = if scalar {
        (
            p.a.sclchan_send_close_i(hs).unwrap(),
            p.b.sclchan_recv_close_i(hr).unwrap(),
        )
    } else {
        (
            p.a.pktchan_send_close_i(hs).unwrap(),
            p.b.pktchan_recv_close_i(hr).unwrap(),
        )
    };
    p.b.wait(qr, None, WAIT).unwrap();
    p.a.wait(qs, None, WAIT).unwrap();
}

/// Packets of 0 and 1 byte, around the inject size of the provider in use (the last one
/// injected and the first one sent; shm 4096 bytes, tcp;ofi_rxm 64) and up to the maximum
/// payload arrive intact, received in place in the pool.
#[test]
fn packets_of_every_size_arrive_in_order_zero_copy() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    for prov in providers() {
        let p = Pair::new(prov, "pkt", 10);
        let (hs, hr) = open(&p, false, true);
        let pool = p.b.pktchan_receive_memory(hr).unwrap();
        let inject = p.a.inject_size();
        assert!(
            0 < inject && inject < 64 * 1024,
            "{prov}: inject size {inject}"
        );
        eprintln!("{prov}: inject size {inject}");
        let sizes = [
            0usize,
            1,
            64,
            inject - 1,
            inject,
            inject + 1,
            64 * 1024 - 1,
            64 * 1024,
        ];
        for (i, &n) in sizes.iter().enumerate() {
            let data: Vec<u8> = (0..n).map(|k| (k * 7 + i) as u8).collect();
            p.a.pktchan_send(hs, &data).unwrap();
            let pkt = p.b.pktchan_recv(hr).unwrap();
            assert_eq!(pkt.len(), n, "{prov} size {n}");
            assert_eq!(pkt.to_vec(), data, "{prov} size {n}");
            assert!(
                pool.contains(&pkt.addr()),
                "{prov}: packet not inside the pool"
            );
            release_at(&p.b, pkt.addr()).unwrap();
            assert_eq!(
                release_at(&p.b, pkt.addr()),
                Err(Status::MCAPI_ERR_BUF_INVALID)
            );
        }
        assert_eq!(
            p.a.pktchan_send(hs, &vec![0u8; 64 * 1024 + 1]),
            Err(Status::MCAPI_ERR_PKT_SIZE)
        );
        close(&p, hs, hr, false);
        p.finalize();
    }
}

#[test]
fn held_packets_block_the_sender_until_released_out_of_order() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    for prov in providers() {
        let p = Pair::new(prov, "hold", 20);
        let (hs, hr) = open(&p, false, false);
        // 16 receive buffers: the receiver holds all of them.
        let a = p.a.clone();
        let sender = std::thread::spawn(move || {
            for i in 0..40u32 {
                a.pktchan_send(hs, &vec![i as u8; 1000 + i as usize])
                    .unwrap();
            }
        });
        let mut held = Vec::new();
        for i in 0..16u32 {
            let pkt = p.b.pktchan_recv(hr).unwrap();
            assert_eq!(pkt.to_vec(), vec![i as u8; 1000 + i as usize]);
            held.push(pkt);
        }
        std::thread::sleep(Duration::from_millis(300));
        assert!(!sender.is_finished(), "{prov}: sender did not block");
        assert_eq!(p.b.pktchan_available(hr).unwrap(), 0);
        assert!(!p.b.pktchan_release_test(held[3].addr()).unwrap());
        // Inside a packet is not where a packet began (spec 4.4.10: a buffer descriptor).
        assert_eq!(
            p.b.pktchan_release_test(held[3].addr() + 1),
            Err(Status::MCAPI_ERR_BUF_INVALID),
            "{prov}"
        );
        // Release in reverse order; the rest flows.
        while let Some(pkt) = held.pop() {
            release_at(&p.b, pkt.addr()).unwrap();
            assert!(p.b.pktchan_release_test(pkt.addr()).unwrap());
        }
        for i in 16..40u32 {
            let pkt = p.b.pktchan_recv(hr).unwrap();
            assert_eq!(pkt.to_vec(), vec![i as u8; 1000 + i as usize], "{prov}");
            release_at(&p.b, pkt.addr()).unwrap();
        }
        sender.join().unwrap();
        close(&p, hs, hr, false);
        p.finalize();
    }
}

/// A receiver that waits through `pktchan_recv_i` (never a blocking `pktchan_recv`) and
/// releases packets in bunches that leave credits below a return batch unreported: the
/// sender must not stall while the receiver holds fewer than all buffers.
#[test]
fn bunched_releases_with_recv_i_never_stall_the_sender() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    for prov in providers() {
        let p = Pair::new(prov, "bunch", 35);
        let (hs, hr) = open(&p, false, true);
        let a = p.a.clone();
        let sender = std::thread::spawn(move || {
            for i in 0..100u32 {
                a.pktchan_send(hs, &i.to_le_bytes()).unwrap();
            }
        });
        // 16 buffers (batches of 4): whenever all 16 are held, release 15 of them.
        let mut held = Vec::new();
        for i in 0..100u32 {
            let r = p.b.pktchan_recv_i(hr).unwrap();
            let got = p.b.wait(r, None, Some(Duration::from_secs(10)));
            assert_eq!(got, Ok(4), "{prov}: packet {i} holding {}", held.len());
            let addr = p.b.received_packet(r).unwrap().addr();
            held.push(addr);
            if held.len() == 16 {
                for addr in held.drain(1..) {
                    release_at(&p.b, addr).unwrap();
                }
            }
        }
        for addr in held {
            release_at(&p.b, addr).unwrap();
        }
        sender.join().unwrap();
        close(&p, hs, hr, false);
        p.finalize();
    }
}

/// A cancel withdraws a receive that has not happened; one already served a packet (here by
/// another request's wait) cannot be taken back: the cancel says so, and the packet stays
/// with the request.
#[test]
fn cancel_of_a_served_receive_loses_no_packet() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    for prov in providers() {
        let p = Pair::new(prov, "cancel", 100);
        let (hs, hr) = open(&p, false, true);
        let r = p.b.pktchan_recv_i(hr).unwrap();
        p.b.cancel(r).unwrap();
        assert_eq!(
            p.b.wait(r, None, WAIT),
            Err(Status::MCAPI_ERR_REQUEST_CANCELLED)
        );
        // Two receives; waiting on the second serves the first (requests are served in
        // order), which is then no longer cancellable.
        let r = p.b.pktchan_recv_i(hr).unwrap();
        let r2 = p.b.pktchan_recv_i(hr).unwrap();
        p.a.pktchan_send(hs, b"kept").unwrap();
        assert_eq!(
            p.b.wait(r2, None, Some(Duration::from_millis(200))),
            Err(Status::MCAPI_TIMEOUT)
        );
        assert_eq!(
            p.b.cancel(r),
            Err(Status::MCAPI_ERR_REQUEST_INVALID),
            "{prov}"
        );
        p.b.cancel(r2).unwrap();
        assert_eq!(p.b.wait(r, None, WAIT), Ok(4), "{prov}");
        let addr = p.b.received_packet(r).unwrap().addr();
        release_at(&p.b, addr).unwrap();
        close(&p, hs, hr, false);
        p.finalize();
    }
}

/// A connect the receiver refuses leaves a sender that had already opened unbound, with its
/// open waiting for the next connect; the refusing receiver, connected to another sender
/// afterwards, gets that sender's open and credits, not the first one's.
#[test]
fn a_refused_connect_leaves_an_early_open_waiting() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    for prov in providers() {
        let p = Pair::new(prov, "refused", 110);
        let tx2 = p.a.endpoint_create(11).unwrap();
        let (h_early, q_early) = p.a.pktchan_send_open_i(p.tx).unwrap();
        let early_status = p.a.endpoint_get_attribute(p.tx, ATTR_STATUS).unwrap();
        p.b.endpoint_set_attribute(p.rx, ATTR_MAX_PAYLOAD, 1024)
            .unwrap();
        let s = p.third.endpoint_get(0, p.tx.node(), 10, WAIT).unwrap();
        let r = p.third.endpoint_get(0, p.rx.node(), 20, WAIT).unwrap();
        assert_eq!(
            p.third.pktchan_connect_i(s, r),
            Err(Status::MCAPI_ERR_ATTR_INCOMPATIBLE)
        );
        // Give the early open time to announce itself, were it still connected.
        assert_eq!(
            p.a.wait(q_early, None, Some(Duration::from_millis(300))),
            Err(Status::MCAPI_TIMEOUT)
        );
        assert_eq!(
            p.a.endpoint_get_attribute(p.tx, ATTR_STATUS).unwrap(),
            early_status
        );
        // rx with tx2: a working channel, well past the 16 credits of its pool.
        p.a.endpoint_set_attribute(tx2, ATTR_MAX_PAYLOAD, 1024)
            .unwrap();
        let c = p.a.pktchan_connect_i(tx2, p.rx).unwrap();
        p.a.wait(c, None, WAIT).unwrap();
        let (hs, qs) = p.a.pktchan_send_open_i(tx2).unwrap();
        let (hr, qr) = p.b.pktchan_recv_open_i(p.rx).unwrap();
        let b = p.b.clone();
        let receiver = std::thread::spawn(move || {
            b.wait(qr, None, WAIT).unwrap();
            for i in 0..100u32 {
                let pkt = b.pktchan_recv(hr).unwrap();
                assert_eq!(pkt.to_vec(), i.to_le_bytes());
                release_at(&b, pkt.addr()).unwrap();
            }
        });
        p.a.wait(qs, None, WAIT).unwrap();
        for i in 0..100u32 {
            p.a.pktchan_send(hs, &i.to_le_bytes()).unwrap();
        }
        receiver.join().unwrap();
        close(&p, hs, hr, false);
        // The first sender's open completes with its next connect.
        let other = p.b.endpoint_create(22).unwrap();
        let c = p.a.pktchan_connect_i(p.tx, other).unwrap();
        p.a.wait(c, None, WAIT).unwrap();
        let (h_other, q_other) = p.b.pktchan_recv_open_i(other).unwrap();
        let a = p.a.clone();
        let early = std::thread::spawn(move || a.wait(q_early, None, WAIT));
        p.b.wait(q_other, None, WAIT).unwrap();
        early.join().unwrap().unwrap();
        p.a.pktchan_send(h_early, b"late").unwrap();
        assert_eq!(p.b.pktchan_recv(h_other).unwrap().to_vec(), b"late");
        close(&p, h_early, h_other, false);
        p.finalize();
    }
}

/// A sender closes with packets still queued, then cancels one of them: the receiver gets
/// the others and then the end of the channel, instead of waiting for the cancelled one.
#[test]
fn cancel_after_send_close_ends_the_receivers_wait() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    for prov in providers() {
        let p = Pair::new(prov, "closecancel", 120);
        p.b.set_endpoint_timeout(p.rx, Some(Duration::from_secs(5)))
            .unwrap();
        let (hs, hr) = open(&p, false, true);
        for i in 0..16u8 {
            p.a.pktchan_send(hs, &[i]).unwrap();
        }
        let held: Vec<_> = (0..16).map(|_| p.b.pktchan_recv(hr).unwrap()).collect();
        let dropped = p.a.pktchan_send_i(hs, b"cancelled").unwrap();
        let kept = p.a.pktchan_send_i(hs, b"kept").unwrap();
        let closing = p.a.pktchan_send_close_i(hs).unwrap();
        p.a.cancel(dropped).unwrap();
        for pkt in held {
            release_at(&p.b, pkt.addr()).unwrap();
        }
        p.a.wait(kept, None, WAIT).unwrap();
        let pkt = p.b.pktchan_recv(hr).unwrap();
        assert_eq!(pkt.to_vec(), b"kept", "{prov}");
        release_at(&p.b, pkt.addr()).unwrap();
        assert_eq!(
            p.b.pktchan_recv(hr).map(|p| p.to_vec()),
            Err(Status::MCAPI_ERR_TRANSMISSION),
            "{prov}"
        );
        let q = p.b.pktchan_recv_close_i(hr).unwrap();
        p.b.wait(q, None, WAIT).unwrap();
        p.a.wait(closing, None, WAIT).unwrap();
        p.finalize();
    }
}

/// With a timeout shorter than the transfer, a blocking send of a large packet is copied
/// (not left with the provider when the timeout passes): it succeeds, and so do the next.
#[test]
fn a_short_timeout_never_breaks_a_large_blocking_send() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    for prov in providers() {
        let p = Pair::new(prov, "short", 130);
        for (n, ep) in [(&p.a, p.tx), (&p.b, p.rx)] {
            n.endpoint_set_attribute(ep, ATTR_MAX_PAYLOAD, 1 << 20)
                .unwrap();
        }
        p.a.set_endpoint_timeout(p.tx, Some(Duration::from_millis(1)))
            .unwrap();
        let (hs, hr) = open(&p, false, true);
        let b = p.b.clone();
        let receiver = std::thread::spawn(move || {
            for i in 0..8u8 {
                let pkt = b.pktchan_recv(hr).unwrap();
                assert!(pkt.len() == 1 << 20 && pkt.to_vec().iter().all(|&x| x == i));
                release_at(&b, pkt.addr()).unwrap();
            }
        });
        for i in 0..8u8 {
            let data = vec![i; 1 << 20];
            loop {
                match p.a.pktchan_send(hs, &data) {
                    Ok(()) => break,
                    // No credit within 1 ms: nothing was sent, try again.
                    Err(Status::MCAPI_TIMEOUT) => continue,
                    Err(e) => panic!("{prov}: send {i}: {e}"),
                }
            }
        }
        receiver.join().unwrap();
        close(&p, hs, hr, false);
        p.finalize();
    }
}

#[test]
fn nonblocking_packets_and_many_packets_lose_nothing() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    for prov in providers() {
        let p = Pair::new(prov, "pkti", 30);
        let (hs, hr) = open(&p, false, true);
        let r = p.b.pktchan_recv_i(hr).unwrap();
        assert_eq!(p.b.test(r, None).unwrap(), None);
        let s = p.a.pktchan_send_i(hs, b"hello").unwrap();
        p.a.wait(s, None, WAIT).unwrap();
        assert_eq!(p.b.wait(r, None, WAIT).unwrap(), 5);
        let addr = p.b.received_packet(r).unwrap().addr();
        release_at(&p.b, addr).unwrap();
        let count: u32 = if prov == "shm" { 100_000 } else { 20_000 };
        let a = p.a.clone();
        let sender = std::thread::spawn(move || {
            for i in 0..count {
                a.pktchan_send(hs, &i.to_le_bytes()).unwrap();
            }
        });
        for i in 0..count {
            let pkt = p.b.pktchan_recv(hr).unwrap();
            assert_eq!(pkt.to_vec(), i.to_le_bytes(), "{prov}");
            release_at(&p.b, pkt.addr()).unwrap();
        }
        sender.join().unwrap();
        close(&p, hs, hr, false);
        p.finalize();
    }
}

/// Packets of every size up to just past the inject size (on tcp the small ones come
/// through the nodes' hubs, the others on the channel's own endpoints), with larger ones
/// (sent zero copy) in between, arrive in order and intact while the receiver
/// holds a few and releases them out of order: enough of them to fill and turn over the
/// hub's multi-receive buffers with every size at every fill level.
#[test]
fn small_and_large_packets_mixed_keep_their_order_and_bytes() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    // Every provider offered: the hub's multi-receive pool and CQ data differ among them.
    for prov in every_provider() {
        let p = Pair::new(prov, "pktmix", 310);
        // A lost packet fails the receive instead of hanging the test.
        p.b.set_endpoint_timeout(p.rx, Some(Duration::from_secs(20)))
            .unwrap();
        let (hs, hr) = open(&p, false, true);
        let inject = p.a.inject_size().min(4096);
        let size = move |i: u32| match i % 97 {
            0 => 4096,
            1 => 64 * 1024,
            k => (k as usize * 13 + i as usize) % (inject + 2),
        };
        let body = |i: u32, n: usize| -> Vec<u8> {
            (0..n).map(|k| (k as u32 * 31 + i * 7) as u8).collect()
        };
        let count: u32 = match prov {
            "shm" => 20_000,
            "tcp" => 12_000,
            _ => 3_000,
        };
        let a = p.a.clone();
        let sender = std::thread::spawn(move || {
            for i in 0..count {
                a.pktchan_send(hs, &body(i, size(i))).unwrap();
            }
        });
        let mut held = Vec::new();
        for i in 0..count {
            let pkt = p.b.pktchan_recv(hr).unwrap();
            assert_eq!(pkt.len(), size(i), "{prov} packet {i}");
            assert!(pkt.to_vec() == body(i, size(i)), "{prov} packet {i}: bytes");
            held.push(pkt.addr());
            if held.len() == 3 {
                // Newest first, then the oldest.
                for at in [held.remove(2), held.remove(0)] {
                    release_at(&p.b, at).unwrap();
                }
            }
        }
        for at in held {
            release_at(&p.b, at).unwrap();
        }
        sender.join().unwrap();
        close(&p, hs, hr, false);
        p.finalize();
    }
}

/// A thread reading a held small packet while the receiver takes the next ones: every
/// small packet is copied into a slot of its own (on tcp, through the hub), and neither the
/// copies nor the reads of another slot are ever refused.
#[test]
fn reading_a_held_small_packet_never_drops_the_next_ones() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    for prov in providers().into_iter().filter(|p| *p == "tcp") {
        let p = Pair::new(prov, "hubread", 900);
        p.b.set_endpoint_timeout(p.rx, Some(Duration::from_secs(20)))
            .unwrap();
        let (hs, hr) = open(&p, false, true);
        let count = 3000u32;
        let a = p.a.clone();
        let sender = std::thread::spawn(move || {
            for i in 0..count {
                a.pktchan_send(hs, &i.to_le_bytes()).unwrap();
            }
        });
        let first = p.b.pktchan_recv(hr).unwrap();
        assert_eq!(first.to_vec(), 0u32.to_le_bytes());
        let stop = std::sync::atomic::AtomicBool::new(false);
        let result = std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    assert_eq!(first.to_vec(), 0u32.to_le_bytes(), "held packet changed");
                    reads += 1;
                }
                reads
            });
            let mut outcome = Ok(());
            for i in 1..count {
                match p.b.pktchan_recv(hr) {
                    Ok(pkt) => {
                        assert_eq!(pkt.to_vec(), i.to_le_bytes(), "packet {i}");
                        p.b.pktchan_release(pkt).unwrap();
                    }
                    Err(e) => {
                        outcome = Err((i, e));
                        break;
                    }
                }
            }
            stop.store(true, Ordering::Relaxed);
            let reads = reader.join();
            (outcome, reads.is_ok())
        });
        assert_eq!(
            result,
            (Ok(()), true),
            "{prov}: (receive outcome, reader ok)"
        );
        p.b.pktchan_release(first).unwrap();
        sender.join().unwrap();
        close(&p, hs, hr, false);
        p.finalize();
    }
}

/// Two packet channels between the same node pair share the hubs; the receiver
/// drains one, then the other (whose small packets wait in its hub inbox meanwhile).
#[test]
fn two_channels_through_the_hubs_drained_one_after_the_other() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    for prov in providers() {
        let p = Pair::new(prov, "hubtwo", 920);
        let tx2 = p.a.endpoint_create(11).unwrap();
        let rx2 = p.b.endpoint_create(21).unwrap();
        for e in [p.rx, rx2] {
            p.b.set_endpoint_timeout(e, Some(Duration::from_secs(20)))
                .unwrap();
        }
        let (hs, hr) = open(&p, false, true);
        let s2 = p.third.endpoint_get(0, tx2.node(), 11, WAIT).unwrap();
        let r2 = p.third.endpoint_get(0, rx2.node(), 21, WAIT).unwrap();
        let c = p.third.pktchan_connect_i(s2, r2).unwrap();
        p.third.wait(c, None, WAIT).unwrap();
        let (hr2, qr2) = p.b.pktchan_recv_open_i(rx2).unwrap();
        let (hs2, qs2) = p.a.pktchan_send_open_i(tx2).unwrap();
        p.a.wait(qs2, None, WAIT).unwrap();
        p.b.wait(qr2, None, WAIT).unwrap();
        let count = 2000u32;
        let senders: Vec<_> = [hs, hs2]
            .into_iter()
            .enumerate()
            .map(|(k, h)| {
                let a = p.a.clone();
                std::thread::spawn(move || {
                    for i in 0..count {
                        let mut b = vec![k as u8; (i as usize % 60) + 4];
                        b[..4].copy_from_slice(&i.to_le_bytes());
                        a.pktchan_send(h, &b).unwrap();
                    }
                })
            })
            .collect();
        for (k, h) in [hr, hr2].into_iter().enumerate() {
            for i in 0..count {
                let pkt =
                    p.b.pktchan_recv(h)
                        .unwrap_or_else(|e| panic!("{prov} ch {k} pkt {i}: {e:?}"));
                let mut b = vec![k as u8; (i as usize % 60) + 4];
                b[..4].copy_from_slice(&i.to_le_bytes());
                assert_eq!(pkt.to_vec(), b, "{prov} ch {k} pkt {i}");
                p.b.pktchan_release(pkt).unwrap();
            }
        }
        for s in senders {
            s.join().unwrap();
        }
        p.finalize();
    }
}

#[test]
fn scalars_of_every_width_in_order_and_width_mismatch_is_an_error() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    for prov in providers() {
        let p = Pair::new(prov, "scl", 40);
        let (hs, hr) = open(&p, true, false);
        let count: u64 = if prov == "shm" { 100_000 } else { 20_000 };
        for width in [1usize, 2, 4, 8] {
            let a = p.a.clone();
            let mask = if width == 8 {
                u64::MAX
            } else {
                (1 << (8 * width)) - 1
            };
            let sender = std::thread::spawn(move || {
                for i in 0..count {
                    a.sclchan_send(hs, i.wrapping_mul(0x9E37_79B9_7F4A_7C15) & mask, width)
                        .unwrap();
                }
            });
            for i in 0..count {
                let v = p.b.sclchan_recv(hr, width).unwrap();
                assert_eq!(
                    v,
                    i.wrapping_mul(0x9E37_79B9_7F4A_7C15) & mask,
                    "{prov} w{width}"
                );
            }
            sender.join().unwrap();
        }
        p.a.sclchan_send(hs, 0xABCD, 2).unwrap();
        let start = Instant::now();
        while p.b.sclchan_available(hr).unwrap() == 0 {
            assert!(start.elapsed() < Duration::from_secs(10));
        }
        assert_eq!(p.b.sclchan_recv(hr, 4), Err(Status::MCAPI_ERR_GENERAL));
        assert_eq!(
            p.b.sclchan_recv(hr, 2),
            Ok(0xABCD),
            "mismatch left it queued"
        );
        close(&p, hs, hr, true);
        p.finalize();
    }
}

/// With one, two or eight credits a scalar receive side's few receives are used up and
/// posted again all the time (shm: while the receiver waits, and before each credit
/// return; with eight, credits go back in pairs, also from a CQ read once all are back): a
/// sender streaming into them, against a receiver that now keeps up and now falls behind,
/// loses nothing, reorders nothing and never stalls.
#[test]
fn scalars_through_a_few_receive_slots_lose_nothing() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    const COUNT: u64 = 20_000;
    for prov in providers() {
        for slots in [1u64, 2, 8] {
            let mut cfg = config(prov, &format!("slots{slots}"));
            cfg.recv_buffers = slots as usize;
            let p = Pair::with_config(cfg, 45);
            p.a.set_endpoint_timeout(p.tx, STALL).unwrap();
            p.b.set_endpoint_timeout(p.rx, STALL).unwrap();
            let (hs, hr) = open(&p, true, false);
            let a = p.a.clone();
            let sent = Arc::new(AtomicU64::new(0));
            let count = sent.clone();
            let sender = std::thread::spawn(move || {
                (0..COUNT).try_for_each(|i| {
                    a.sclchan_send(hs, scalar_value(slots, i), 8)?;
                    count.fetch_add(1, Ordering::Release);
                    Ok::<(), Status>(())
                })
            });
            for i in 0..COUNT {
                // A credit per slot, given back once received: never more ahead than that.
                let ahead = sent.load(Ordering::Acquire);
                assert!(
                    ahead <= i + slots,
                    "{prov}, {slots} slots: {ahead} sent, {i} received"
                );
                if i % 2000 == 1000 {
                    // Behind: the sender fills every slot and blocks for credits.
                    stalls_at(
                        &sent,
                        i + slots,
                        &format!("{prov}, {slots} slots: scalar {i}"),
                    );
                }
                assert_eq!(
                    p.b.sclchan_recv(hr, 8),
                    Ok(scalar_value(slots, i)),
                    "{prov}, {slots} slots: scalar {i}"
                );
            }
            assert_eq!(sender.join().unwrap(), Ok(()), "{prov}, {slots} slots");
            close(&p, hs, hr, true);
            p.finalize();
        }
    }
}

/// Waits until the sender thread has completed `bound` sends (while the receiver makes no
/// call), then checks that it stays there: it is blocked, not merely slow. The credits of
/// everything received are back by then: the last ones go back as soon as the receiver
/// holds every credit (docs/implementation-defined.md, "Credit returns").
fn stalls_at(sent: &AtomicU64, bound: u64, what: &str) {
    let start = Instant::now();
    while sent.load(Ordering::Acquire) < bound {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{what}: the sender reached only {} of {bound} sends",
            sent.load(Ordering::Acquire)
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        sent.load(Ordering::Acquire),
        bound,
        "{what}: the sender did not block"
    );
}

/// A scalar sender blocks when the channel FIFO (`NUM_RECV_BUFFERS` scalars, one credit
/// each) is full (spec 4.5.4): with the receiver making no call it completes exactly that
/// many sends and stays there; then everything arrives in order and the sender finishes.
#[test]
fn a_scalar_sender_blocks_exactly_when_the_fifo_is_full() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    for prov in providers() {
        for capacity in [5u64, 16] {
            let mut cfg = config(prov, &format!("sclfull{capacity}"));
            cfg.recv_buffers = capacity as usize;
            let p = Pair::with_config(cfg, 230);
            let (hs, hr) = open(&p, true, true);
            let total = 3 * capacity + 1;
            let a = p.a.clone();
            let sent = Arc::new(AtomicU64::new(0));
            let count = sent.clone();
            let sender = std::thread::spawn(move || {
                (0..total).try_for_each(|i| {
                    a.sclchan_send(hs, scalar_value(capacity, i), 8)?;
                    count.fetch_add(1, Ordering::Release);
                    Ok::<(), Status>(())
                })
            });
            stalls_at(&sent, capacity, &format!("{prov}, FIFO of {capacity}"));
            assert!(!sender.is_finished(), "{prov}: FIFO of {capacity}");
            // A completed send was handed to the fabric; on tcp it may still be on its way.
            let until = Instant::now() + Duration::from_secs(20);
            while p.b.sclchan_available(hr) != Ok(capacity as usize) {
                assert!(
                    Instant::now() < until,
                    "{prov}: {:?} available",
                    p.b.sclchan_available(hr)
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            for i in 0..total {
                assert_eq!(
                    p.b.sclchan_recv(hr, 8),
                    Ok(scalar_value(capacity, i)),
                    "{prov}, FIFO of {capacity}: scalar {i}"
                );
            }
            assert_eq!(sender.join().unwrap(), Ok(()), "{prov}: FIFO of {capacity}");
            assert_eq!(sent.load(Ordering::Acquire), total);
            close(&p, hs, hr, true);
            p.finalize();
        }
    }
}

/// The packet counterpart: with one, two or eight receive buffers each is used up and
/// posted again all the time (shm: one plain receive per buffer, posted again when its
/// packet is released; elsewhere multi-receive buffers). Packets of 0 to 100 bytes, every
/// fourth one held until the next arrives and released after it; a buffer never posted again
/// would leave the next packet unmatched and the receiver waiting (`STALL`).
#[test]
fn packets_through_a_few_receive_buffers_lose_nothing() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    const COUNT: usize = 5_000;
    let packet = |i: usize| -> Vec<u8> { (0..i % 101).map(|k| (k + i) as u8).collect() };
    for prov in providers() {
        for buffers in [1usize, 2, 8] {
            let mut cfg = config(prov, &format!("pktbuf{buffers}"));
            cfg.recv_buffers = buffers;
            let p = Pair::with_config(cfg, 240);
            p.a.set_endpoint_timeout(p.tx, STALL).unwrap();
            p.b.set_endpoint_timeout(p.rx, STALL).unwrap();
            let (hs, hr) = open(&p, false, true);
            let a = p.a.clone();
            let sent = Arc::new(AtomicU64::new(0));
            let count = sent.clone();
            let sender = std::thread::spawn(move || {
                (0..COUNT).try_for_each(|i| {
                    a.pktchan_send(hs, &packet(i))?;
                    count.fetch_add(1, Ordering::Release);
                    Ok::<(), Status>(())
                })
            });
            let mut held = None;
            let mut released = 0;
            for i in 0..COUNT {
                // A credit per buffer, given back on release: never more ahead than that.
                let ahead = sent.load(Ordering::Acquire);
                let bound = (released + buffers) as u64;
                assert!(
                    ahead <= bound,
                    "{prov}, {buffers} buffers: {ahead} sent, {released} released"
                );
                if i % 1000 == 500 {
                    // Behind: the sender uses every credit and blocks (none held here).
                    assert!(held.is_none());
                    stalls_at(
                        &sent,
                        bound,
                        &format!("{prov}, {buffers} buffers: packet {i}"),
                    );
                }
                let pkt =
                    p.b.pktchan_recv(hr)
                        .unwrap_or_else(|e| panic!("{prov}, {buffers} buffers: packet {i}: {e}"));
                assert_eq!(
                    pkt.to_vec(),
                    packet(i),
                    "{prov}, {buffers} buffers: packet {i}"
                );
                // With one buffer its only packet cannot be held while the next comes.
                if buffers > 1 && i % 4 == 0 {
                    held = Some(pkt);
                    continue;
                }
                release_at(&p.b, pkt.addr()).unwrap();
                released += 1;
                if let Some(old) = held.take() {
                    release_at(&p.b, old.addr()).unwrap();
                    released += 1;
                }
            }
            if let Some(old) = held.take() {
                release_at(&p.b, old.addr()).unwrap();
            }
            assert_eq!(sender.join().unwrap(), Ok(()), "{prov}, {buffers} buffers");
            close(&p, hs, hr, false);
            p.finalize();
        }
    }
}

/// The exact `MCAPI_ENDP_ATTR_STATUS` flags (spec 3.16.13.8) of both endpoints at each step
/// of a channel's life, for packet and scalar channels, closed sender first and receiver
/// first: connected, one side open (open pending there), both open, one side closed (close
/// pending there, the other side unchanged even once it learnt of the close), both closed
/// (0: a message endpoint again), then reconnected.
#[test]
fn close_reconnect_and_status_flags_at_each_step() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    for prov in providers() {
        let p = Pair::new(prov, "cycle", 50);
        assert_eq!(p.b.endpoint_get_attribute(p.rx, ATTR_STATUS).unwrap(), 0);
        for round in 0..4 {
            let scalar = round >= 2;
            let sender_closes_first = round % 2 == 0;
            let receiver_opens_first = round % 2 == 0;
            let kind = if scalar { flag::SCLCHAN } else { flag::PKTCHAN };
            let tx_base = flag::CONNECTED | flag::SEND | kind;
            let rx_base = flag::CONNECTED | flag::RECEIVE | kind;
            let step = |what: &str, tx: u64, rx: u64| {
                let got = (
                    p.a.endpoint_get_attribute(p.tx, ATTR_STATUS),
                    p.b.endpoint_get_attribute(p.rx, ATTR_STATUS),
                );
                assert_eq!(got, (Ok(tx), Ok(rx)), "{prov}, round {round}: {what}");
            };

            connect(&p, scalar);
            step("connected", tx_base, rx_base);
            let (hs, qs, hr, qr) = if receiver_opens_first {
                let (hr, qr) = if scalar {
                    p.b.sclchan_recv_open_i(p.rx)
                } else {
                    p.b.pktchan_recv_open_i(p.rx)
                }
                .unwrap();
                step("receiver opened", tx_base, rx_base | flag::OPEN_PENDING);
                let (hs, qs) = if scalar {
                    p.a.sclchan_send_open_i(p.tx)
                } else {
                    p.a.pktchan_send_open_i(p.tx)
                }
                .unwrap();
                (hs, qs, hr, qr)
            } else {
                let (hs, qs) = if scalar {
                    p.a.sclchan_send_open_i(p.tx)
                } else {
                    p.a.pktchan_send_open_i(p.tx)
                }
                .unwrap();
                step("sender opened", tx_base | flag::OPEN_PENDING, rx_base);
                let (hr, qr) = if scalar {
                    p.b.sclchan_recv_open_i(p.rx)
                } else {
                    p.b.pktchan_recv_open_i(p.rx)
                }
                .unwrap();
                (hs, qs, hr, qr)
            };
            let a = p.a.clone();
            let waiter = std::thread::spawn(move || a.wait(qs, None, WAIT));
            p.b.wait(qr, None, WAIT).unwrap();
            waiter.join().unwrap().unwrap();
            step("both open", tx_base | flag::OPEN, rx_base | flag::OPEN);
            // From another node too.
            assert_eq!(
                p.third.endpoint_get_attribute(p.tx, ATTR_STATUS).unwrap(),
                tx_base | flag::OPEN
            );
            assert_eq!(
                p.b.endpoint_delete(p.rx),
                Err(Status::MCAPI_ERR_CHAN_CONNECTED)
            );
            assert_eq!(
                p.b.endpoint_set_attribute(p.rx, ATTR_PRIORITY, 1),
                Err(Status::MCAPI_ERR_CHAN_CONNECTED)
            );

            let (qs, qr) = if sender_closes_first {
                let qs = if scalar {
                    p.a.sclchan_send_close_i(hs)
                } else {
                    p.a.pktchan_send_close_i(hs)
                }
                .unwrap();
                assert_eq!(p.a.test(qs, None).unwrap(), None);
                let pending = tx_base | flag::OPEN | flag::CLOSE_PENDING;
                step("sender closed", pending, rx_base | flag::OPEN);
                // The receiver learns of it (nothing more comes): its flags stay.
                let end = if scalar {
                    p.b.sclchan_recv(hr, 8).map(drop)
                } else {
                    p.b.pktchan_recv(hr).map(drop)
                };
                let gone = if scalar {
                    Status::MCAPI_ERR_GENERAL
                } else {
                    Status::MCAPI_ERR_TRANSMISSION
                };
                assert_eq!(end, Err(gone), "{prov}, round {round}");
                step("sender closed, seen", pending, rx_base | flag::OPEN);
                let qr = if scalar {
                    p.b.sclchan_recv_close_i(hr)
                } else {
                    p.b.pktchan_recv_close_i(hr)
                }
                .unwrap();
                (qs, qr)
            } else {
                let qr = if scalar {
                    p.b.sclchan_recv_close_i(hr)
                } else {
                    p.b.pktchan_recv_close_i(hr)
                }
                .unwrap();
                assert_eq!(p.b.test(qr, None).unwrap(), None);
                let pending = rx_base | flag::OPEN | flag::CLOSE_PENDING;
                step("receiver closed", tx_base | flag::OPEN, pending);
                // The sender learns of it (its sends fail): its flags stay.
                let start = Instant::now();
                let refused = loop {
                    let r = if scalar {
                        p.a.sclchan_send(hs, 1, 8)
                    } else {
                        p.a.pktchan_send(hs, b"x")
                    };
                    match r {
                        Ok(()) => assert!(start.elapsed() < Duration::from_secs(10), "{prov}"),
                        Err(e) => break e,
                    }
                };
                let gone = if scalar {
                    Status::MCAPI_ERR_GENERAL
                } else {
                    Status::MCAPI_ERR_TRANSMISSION
                };
                assert_eq!(refused, gone, "{prov}, round {round}");
                step("receiver closed, seen", tx_base | flag::OPEN, pending);
                let qs = if scalar {
                    p.a.sclchan_send_close_i(hs)
                } else {
                    p.a.pktchan_send_close_i(hs)
                }
                .unwrap();
                (qs, qr)
            };
            p.b.wait(qr, None, WAIT).unwrap();
            p.a.wait(qs, None, WAIT).unwrap();
            step("both closed", 0, 0);
            assert_eq!(
                p.a.pktchan_send(hs, b"x"),
                Err(Status::MCAPI_ERR_CHAN_INVALID),
                "closed handle"
            );
        }
        // Back to a message endpoint.
        let to = p.a.endpoint_get(0, p.rx.node(), 20, WAIT).unwrap();
        p.a.msg_send(p.tx, to, b"msg", 1).unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(p.b.msg_recv(p.rx, &mut buf).unwrap(), 3);
        p.finalize();
    }
}

#[test]
fn errors_tables_of_connect_open_send_recv_close_on_shm() {
    if providers().contains(&"shm") {
        errors_tables_of_connect_open_send_recv_close("shm", 60);
    }
}

#[test]
fn errors_tables_of_connect_open_send_recv_close_on_tcp() {
    if providers().contains(&"tcp") {
        errors_tables_of_connect_open_send_recv_close("tcp", 65);
    }
}

/// On `prov`, with nodes `base`..`base + 2` (each provider its own ids, so a failed run's
/// nodes never refuse the other's).
fn errors_tables_of_connect_open_send_recv_close(prov: &str, base: u32) {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    let p = Pair::new(prov, "errs", base);
    let other = p.b.endpoint_create(21).unwrap();
    p.b.endpoint_set_attribute(p.rx, 9, 200).unwrap();
    // Connect: same endpoint twice, unknown endpoint, incompatible attributes.
    assert_eq!(
        p.a.pktchan_connect_i(p.tx, p.tx),
        Err(Status::MCAPI_ERR_ENDP_INVALID)
    );
    let ghost = EndpointId::encode(0, p.rx.node(), 999).unwrap();
    assert_eq!(
        p.a.pktchan_connect_i(p.tx, ghost),
        Err(Status::MCAPI_ERR_ENDP_INVALID)
    );
    p.b.endpoint_set_attribute(other, ATTR_MAX_PAYLOAD, 1024)
        .unwrap();
    assert_eq!(
        p.a.pktchan_connect_i(p.tx, other),
        Err(Status::MCAPI_ERR_ATTR_INCOMPATIBLE)
    );
    p.b.endpoint_set_attribute(other, ATTR_MAX_PAYLOAD, 64 * 1024)
        .unwrap();
    p.b.endpoint_set_attribute(other, ATTR_PRIORITY, 3).unwrap();
    assert_eq!(
        p.a.pktchan_connect_i(p.tx, other),
        Err(Status::MCAPI_ERR_ATTR_INCOMPATIBLE)
    );
    assert_eq!(
        p.a.endpoint_get_attribute(p.tx, ATTR_STATUS).unwrap(),
        0,
        "unchanged"
    );
    // A good connect, then a second connection on either endpoint.
    let c = p.a.pktchan_connect_i(p.tx, p.rx).unwrap();
    p.a.wait(c, None, WAIT).unwrap();
    assert_eq!(
        p.a.pktchan_connect_i(p.tx, other),
        Err(Status::MCAPI_ERR_CHAN_CONNECTED)
    );
    // Open with the wrong type or direction.
    assert_eq!(
        p.b.sclchan_recv_open_i(p.rx).err(),
        Some(Status::MCAPI_ERR_CHAN_TYPE)
    );
    assert_eq!(
        p.b.pktchan_send_open_i(p.rx).err(),
        Some(Status::MCAPI_ERR_CHAN_DIRECTION)
    );
    assert_eq!(
        p.b.pktchan_recv_open_i(p.tx).err(),
        Some(Status::MCAPI_ERR_ENDP_INVALID),
        "another node's endpoint"
    );
    let (hr, qr) = p.b.pktchan_recv_open_i(p.rx).unwrap();
    assert_eq!(
        p.b.pktchan_recv_open_i(p.rx).err(),
        Some(Status::MCAPI_ERR_CHAN_OPENPENDING)
    );
    // Not usable before both sides are open.
    assert_eq!(
        p.b.pktchan_recv(hr).err(),
        Some(Status::MCAPI_ERR_CHAN_INVALID)
    );
    let (hs, qs) = p.a.pktchan_send_open_i(p.tx).unwrap();
    p.a.wait(qs, None, WAIT).unwrap();
    p.b.wait(qr, None, WAIT).unwrap();
    assert_eq!(
        p.b.pktchan_recv_open_i(p.rx).err(),
        Some(Status::MCAPI_ERR_CHAN_OPEN)
    );
    // Handles: garbage, wrong kind, wrong direction.
    let garbage = ChannelHandle::from_raw(0xdead_beef);
    assert_eq!(
        p.a.pktchan_send(garbage, b"x"),
        Err(Status::MCAPI_ERR_CHAN_INVALID)
    );
    assert_eq!(
        p.a.sclchan_send(hs, 1, 8),
        Err(Status::MCAPI_ERR_CHAN_INVALID)
    );
    assert_eq!(
        p.a.pktchan_recv_close_i(hs).err(),
        Some(Status::MCAPI_ERR_CHAN_DIRECTION)
    );
    assert_eq!(
        p.a.sclchan_send_close_i(hs).err(),
        Some(Status::MCAPI_ERR_CHAN_TYPE)
    );
    assert_eq!(release_at(&p.b, 0x1000), Err(Status::MCAPI_ERR_BUF_INVALID));
    assert_eq!(
        p.b.pktchan_release_test(0x1000),
        Err(Status::MCAPI_ERR_BUF_INVALID)
    );
    // The endpoint timeout (set before the connect) bounds a blocking receive.
    let t = Instant::now();
    assert_eq!(p.b.pktchan_recv(hr).err(), Some(Status::MCAPI_TIMEOUT));
    assert!(t.elapsed() >= Duration::from_millis(200));
    close(&p, hs, hr, false);
    assert_eq!(
        p.a.pktchan_send_close_i(hs).err(),
        Some(Status::MCAPI_ERR_CHAN_INVALID)
    );
    p.finalize();
}

/// An endpoint that received messages from another node (all consumed) can be connected:
/// the connect takes back the sender's credits, so its next message is refused (spec 3.6)
/// and one already on its way is queued, not lost. (Not on sockets: there the sender's node
/// may read the recall only after several more sends, each queued at the endpoint;
/// docs/implementation-defined.md, "Connect and open".)
#[test]
fn endpoint_that_received_messages_can_be_connected() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    for prov in offered(&["shm", "tcp"]) {
        let p = Pair::new(prov, "msg2chan", 70);
        let m = p.a.endpoint_create(11).unwrap();
        let to = p.a.endpoint_get(0, p.rx.node(), 20, WAIT).unwrap();
        let mut buf = [0u8; 8];
        p.b.set_endpoint_timeout(p.rx, WAIT).unwrap();
        for i in 0..3u8 {
            p.a.msg_send(m, to, &[i], 0).unwrap();
            assert_eq!(p.b.msg_recv(p.rx, &mut buf), Ok(1));
        }
        let (hs, hr) = open(&p, false, true);
        let start = Instant::now();
        let mut accepted = 0;
        let refused = loop {
            match p.a.msg_send(m, to, b"late", 0) {
                Ok(()) => accepted += 1,
                Err(e) => break e,
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{prov}: never refused"
            );
        };
        assert_eq!(refused, Status::MCAPI_ERR_GENERAL, "{prov}");
        assert!(
            accepted <= 1,
            "{prov}: {accepted} sends went through after the connect"
        );
        let until = Instant::now() + Duration::from_secs(10);
        while p.b.msg_available(p.rx).unwrap() < accepted && Instant::now() < until {}
        assert_eq!(
            p.b.msg_available(p.rx),
            Ok(accepted),
            "{prov}: a late message lost"
        );
        p.a.pktchan_send(hs, b"packet").unwrap();
        assert_eq!(p.b.pktchan_recv(hr).unwrap().to_vec(), b"packet");
        close(&p, hs, hr, false);
        p.finalize();
    }
}

/// A packet channel of tiny packets (payload 8, like a scalar's) sends non-blocking too.
#[test]
fn tiny_packet_channel_sends_nonblocking() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    for prov in providers() {
        let p = Pair::new(prov, "tiny", 80);
        p.a.endpoint_set_attribute(p.tx, ATTR_MAX_PAYLOAD, 8)
            .unwrap();
        p.b.endpoint_set_attribute(p.rx, ATTR_MAX_PAYLOAD, 8)
            .unwrap();
        let (hs, hr) = open(&p, false, false);
        for i in 0..100u64 {
            let s = p.a.pktchan_send_i(hs, &i.to_le_bytes()).unwrap();
            p.a.wait(s, None, WAIT).unwrap();
            let pkt = p.b.pktchan_recv(hr).unwrap();
            assert_eq!(pkt.to_vec(), i.to_le_bytes(), "{prov}");
            release_at(&p.b, pkt.addr()).unwrap();
        }
        assert_eq!(
            p.a.pktchan_send_i(hs, &[0u8; 9]).err(),
            Some(Status::MCAPI_ERR_PKT_SIZE)
        );
        close(&p, hs, hr, false);
        p.finalize();
    }
}

/// Small `pktchan_send_i` packets: those with a credit at hand are injected (complete on
/// return), the next ones wait in the staging buffers (pending; one more is refused with
/// `MCAPI_ERR_MEM_LIMIT`) and are injected from them as credits come back. Round after
/// round the same number fits: a staging buffer whose packet went by inject is free again
/// (no send completion will free it), and every packet arrives once, in order.
#[test]
fn small_send_i_packets_queued_for_credits_free_their_staging_buffers() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    const BUFFERS: usize = 4;
    // At most tcp;ofi_rxm's inject size (64 bytes).
    let packet = |round: usize, i: usize| -> Vec<u8> { vec![(round * 16 + i) as u8; 1 + i] };
    for prov in providers() {
        let mut cfg = config(prov, "smallq");
        cfg.recv_buffers = BUFFERS;
        let p = Pair::with_config(cfg, 260);
        let (hs, hr) = open(&p, false, true);
        // shm refuses a first message (-FI_EAGAIN) until the receiver has read its CQ.
        p.a.pktchan_send(hs, b"first").unwrap();
        let pkt = p.b.pktchan_recv(hr).unwrap();
        release_at(&p.b, pkt.addr()).unwrap();
        for round in 0..20 {
            // Credits returned by the last round's releases are in the sender's CQ by now.
            std::thread::sleep(Duration::from_millis(20));
            let mut reqs = Vec::new();
            loop {
                match p.a.pktchan_send_i(hs, &packet(round, reqs.len())) {
                    Ok(r) => reqs.push(r),
                    Err(Status::MCAPI_ERR_MEM_LIMIT) => break,
                    Err(e) => panic!("{prov}, round {round}: {e}"),
                }
                assert!(reqs.len() <= 2 * BUFFERS, "{prov}, round {round}");
            }
            assert_eq!(reqs.len(), 2 * BUFFERS, "{prov}, round {round}");
            for (i, &r) in reqs.iter().enumerate() {
                let done = p.a.test(r, None).unwrap();
                assert_eq!(done.is_some(), i < BUFFERS, "{prov}, round {round}: {i}");
            }
            for i in 0..2 * BUFFERS {
                let pkt = p.b.pktchan_recv(hr).unwrap();
                assert_eq!(pkt.to_vec(), packet(round, i), "{prov}, round {round}");
                release_at(&p.b, pkt.addr()).unwrap();
            }
            for (i, r) in reqs.into_iter().enumerate() {
                assert_eq!(p.a.wait(r, None, WAIT).unwrap(), 1 + i, "{prov}");
            }
        }
        assert_eq!(p.b.pktchan_available(hr).unwrap(), 0, "{prov}");
        close(&p, hs, hr, false);
        p.finalize();
    }
}

/// A packet whose bytes say which packet it is, leaked so a zero-copy send may read it.
fn leaked_packet(i: usize, len: usize) -> &'static [u8] {
    let v: Vec<u8> = (0..len).map(|k| (k * 13 + i * 7) as u8).collect();
    Box::leak(v.into_boxed_slice())
}

#[test]
fn zero_copy_send_i_in_order_with_copying_and_blocking_sends() {
    use mcapi::SendBuffer;
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    // Above the inject size (shm 4096 bytes, tcp;ofi_rxm 64): zero-copy where asked.
    const BIG: usize = 60_000;
    const SMALL: usize = 100;
    for prov in providers() {
        let p = Pair::new(prov, "zcopy", 90);
        let (hs, hr) = open(&p, false, true);
        let inject = p.a.inject_size();
        assert!(BIG > inject, "{prov}: inject size {inject}");

        // The receiver holds all 16 credits' packets: a zero-copy send_i then stays pending
        // until one is released, and completes after.
        let first: Vec<&'static [u8]> = (0..17).map(|i| leaked_packet(i, BIG)).collect();
        let reqs: Vec<RequestHandle> = first[..16]
            .iter()
            .map(|b| {
                p.a.pktchan_send_i_zero_copy(hs, SendBuffer::from_static(b))
                    .unwrap()
            })
            .collect();
        let mut held = Vec::new();
        for (i, data) in first[..16].iter().enumerate() {
            let pkt = p.b.pktchan_recv(hr).unwrap();
            assert_eq!(pkt.to_vec(), *data, "{prov}: packet {i}");
            held.push(pkt);
        }
        for r in reqs {
            assert_eq!(p.a.wait(r, None, WAIT).unwrap(), BIG, "{prov}");
        }
        let last =
            p.a.pktchan_send_i_zero_copy(hs, SendBuffer::from_static(first[16]))
                .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(p.a.test(last, None).unwrap(), None, "{prov}: completed");
        assert_eq!(p.b.pktchan_available(hr).unwrap(), 0, "{prov}");
        for pkt in held.drain(..) {
            release_at(&p.b, pkt.addr()).unwrap();
        }
        assert_eq!(p.a.wait(last, None, WAIT).unwrap(), BIG, "{prov}");
        let pkt = p.b.pktchan_recv(hr).unwrap();
        assert_eq!(pkt.to_vec(), first[16], "{prov}: the pending packet");
        release_at(&p.b, pkt.addr()).unwrap();

        // Zero-copy send_i above and at or below the inject size (1 to `inject` bytes: sent
        // by inject even when asked for zero copy), copying send_i and blocking sends,
        // interleaved: one FIFO.
        let count = 150;
        let packets: Vec<&'static [u8]> = (0..count)
            .map(|i| {
                let len = if i % 2 == 0 {
                    BIG
                } else {
                    1 + (SMALL + i) % inject
                };
                leaked_packet(i, len)
            })
            .collect();
        let a = p.a.clone();
        let sent = packets.clone();
        let sender = std::thread::spawn(move || {
            let mut outstanding = std::collections::VecDeque::new();
            for (i, data) in sent.iter().enumerate() {
                if outstanding.len() >= 8 {
                    let (r, n) = outstanding.pop_front().unwrap();
                    assert_eq!(a.wait(r, None, WAIT).unwrap(), n, "packet before {i}");
                }
                match i % 5 {
                    0 | 1 | 3 => {
                        let r = a
                            .pktchan_send_i_zero_copy(hs, SendBuffer::from_static(data))
                            .unwrap();
                        outstanding.push_back((r, data.len()));
                    }
                    2 => {
                        let r = a.pktchan_send_i(hs, data).unwrap();
                        outstanding.push_back((r, data.len()));
                    }
                    _ => a.pktchan_send(hs, data).unwrap(),
                }
            }
            for (r, n) in outstanding {
                assert_eq!(a.wait(r, None, WAIT).unwrap(), n);
            }
        });
        for (i, data) in packets.iter().enumerate() {
            let pkt = p.b.pktchan_recv(hr).unwrap();
            assert_eq!(pkt.len(), data.len(), "{prov}: packet {i}");
            assert_eq!(pkt.to_vec(), *data, "{prov}: packet {i}");
            release_at(&p.b, pkt.addr()).unwrap();
        }
        sender.join().unwrap();

        // A zero-copy packet queued (no credit) when the receiver closes fails; cancel of a
        // queued one withdraws it.
        let fill: Vec<RequestHandle> = packets[..16]
            .iter()
            .map(|data| p.a.pktchan_send_i(hs, data).unwrap())
            .collect();
        let held: Vec<_> = (0..16).map(|_| p.b.pktchan_recv(hr).unwrap()).collect();
        for r in fill {
            p.a.wait(r, None, WAIT).unwrap();
        }
        let cancelled =
            p.a.pktchan_send_i_zero_copy(hs, SendBuffer::from_static(packets[0]))
                .unwrap();
        let queued =
            p.a.pktchan_send_i_zero_copy(hs, SendBuffer::from_static(packets[2]))
                .unwrap();
        p.a.cancel(cancelled).unwrap();
        assert_eq!(
            p.a.wait(cancelled, None, WAIT),
            Err(Status::MCAPI_ERR_REQUEST_CANCELLED)
        );
        let qr = p.b.pktchan_recv_close_i(hr).unwrap();
        assert_eq!(
            p.a.wait(queued, None, WAIT),
            Err(Status::MCAPI_ERR_TRANSMISSION),
            "{prov}"
        );
        let qs = p.a.pktchan_send_close_i(hs).unwrap();
        p.a.wait(qs, None, WAIT).unwrap();
        p.b.wait(qr, None, WAIT).unwrap();
        for pkt in held {
            release_at(&p.b, pkt.addr()).unwrap();
        }
        p.finalize();
    }
}

/// A timeout for blocking channel calls where a stall is the failure: the call returns
/// `MCAPI_TIMEOUT` (and the test fails) instead of hanging.
const STALL: Option<Duration> = Some(Duration::from_secs(5));

/// The 100 bytes of packet `i`.
fn hundred_bytes(i: usize) -> Vec<u8> {
    (0..100).map(|k| (k * 3 + i * 11 + 1) as u8).collect()
}

/// A 0-byte packet takes no room in a multi-receive buffer (tcp), so the packet after it is
/// received at the same address (on shm every packet has a buffer of its own): each
/// release of an address gives back one of the packets held there
/// (`MCAPI_SUCCESS` as many times as packets are held, then `MCAPI_ERR_BUF_INVALID`), and
/// every release returns its credit. Before the fix the receiver kept held packets in a set
/// by address: the second release was `MCAPI_ERR_BUF_INVALID` and its credit leaked, so with
/// 4 receive buffers the sender stalled after a few pairs. Packets held when the channel
/// closes stay valid until released.
#[test]
fn zero_length_packets_share_an_address_and_each_release_returns_a_credit() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    const PAIRS: usize = 200;
    for prov in providers() {
        let mut cfg = config(prov, "zerolen");
        cfg.recv_buffers = 4;
        let p = Pair::with_config(cfg, 140);
        p.a.set_endpoint_timeout(p.tx, STALL).unwrap();
        p.b.set_endpoint_timeout(p.rx, STALL).unwrap();
        let (hs, hr) = open(&p, false, true);

        // Held together, then released in order: 0 and 100 bytes, then three empty packets
        // and 100 bytes (all 4 credits), each time all at one address.
        for (round, sizes) in [&[0usize, 100][..], &[0, 0, 0, 100]].iter().enumerate() {
            let mut held = Vec::new();
            for (i, &n) in sizes.iter().enumerate() {
                let data = if n == 0 {
                    Vec::new()
                } else {
                    hundred_bytes(round)
                };
                assert_eq!(p.a.pktchan_send(hs, &data), Ok(()), "{prov}: send {i}");
                let pkt =
                    p.b.pktchan_recv(hr)
                        .unwrap_or_else(|e| panic!("{prov}: round {round} recv {i}: {e}"));
                assert_eq!(pkt.len(), n, "{prov}: round {round} packet {i}");
                assert_eq!(pkt.to_vec(), data, "{prov}: round {round} packet {i}");
                held.push(pkt);
            }
            for (i, pkt) in held.iter().enumerate() {
                assert_eq!(
                    release_at(&p.b, pkt.addr()),
                    Ok(()),
                    "{prov}: round {round}: release of packet {i} of {sizes:?}"
                );
                let still_held = held[i + 1..].iter().any(|q| q.addr() == pkt.addr());
                assert_eq!(
                    p.b.pktchan_release_test(pkt.addr()),
                    Ok(!still_held),
                    "{prov}: round {round}: release_test after packet {i}"
                );
            }
            for pkt in &held {
                assert_eq!(
                    release_at(&p.b, pkt.addr()),
                    Err(Status::MCAPI_ERR_BUF_INVALID),
                    "{prov}: round {round}: released twice"
                );
            }
        }

        // Many pairs through 4 buffers: no credit may leak (released in either order).
        let a = p.a.clone();
        let sender = std::thread::spawn(move || -> Result<(), (usize, Status)> {
            for i in 0..PAIRS {
                a.pktchan_send(hs, &[]).map_err(|e| (i, e))?;
                a.pktchan_send(hs, &hundred_bytes(i)).map_err(|e| (i, e))?;
            }
            Ok(())
        });
        for i in 0..PAIRS {
            let mut pair = Vec::new();
            for _ in 0..2 {
                let pkt =
                    p.b.pktchan_recv(hr)
                        .unwrap_or_else(|e| panic!("{prov}: pair {i}: recv: {e}"));
                pair.push(pkt);
            }
            assert_eq!(pair[0].len(), 0, "{prov}: pair {i}");
            assert_eq!(pair[1].to_vec(), hundred_bytes(i), "{prov}: pair {i}");
            if i % 2 == 1 {
                pair.reverse();
            }
            for pkt in &pair {
                assert_eq!(
                    release_at(&p.b, pkt.addr()),
                    Ok(()),
                    "{prov}: pair {i}: release of {} bytes",
                    pkt.len()
                );
            }
        }
        assert_eq!(sender.join().unwrap(), Ok(()), "{prov}: sender");

        // Both held across the close, released after it.
        p.a.pktchan_send(hs, &[]).unwrap();
        p.a.pktchan_send(hs, &hundred_bytes(7)).unwrap();
        let empty = p.b.pktchan_recv(hr).unwrap();
        let full = p.b.pktchan_recv(hr).unwrap();
        assert_eq!((empty.len(), full.len()), (0, 100), "{prov}");
        close(&p, hs, hr, false);
        assert_eq!(full.to_vec(), hundred_bytes(7), "{prov}: after the close");
        assert_eq!(
            release_at(&p.b, empty.addr()),
            Ok(()),
            "{prov}: empty packet after the close"
        );
        assert_eq!(
            release_at(&p.b, full.addr()),
            Ok(()),
            "{prov}: 100-byte packet after the close"
        );
        assert_eq!(
            release_at(&p.b, full.addr()),
            Err(Status::MCAPI_ERR_BUF_INVALID),
            "{prov}: released twice after the close"
        );
        p.finalize();
    }
}

/// Aborts the test binary unless dropped within `limit`: for a hang no MCAPI timeout can
/// bound (a thread spinning inside libfabric on a freed endpoint).
struct Watchdog(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Watchdog {
    fn new(what: String, limit: Duration) -> Watchdog {
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = done.clone();
        std::thread::spawn(move || {
            let until = Instant::now() + limit;
            while Instant::now() < until {
                if seen.load(std::sync::atomic::Ordering::Acquire) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            eprintln!("{what}: still running after {limit:?}, aborting");
            std::process::abort();
        });
        Watchdog(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// The receiver's open has announced itself to the sender's node (a `test` advanced it)
/// when the receiver cancels it. Either the cancel is refused (`MCAPI_ERR_REQUEST_INVALID`)
/// and that open goes on and completes, or it is withdrawn and a second open takes its
/// place; either way the sender's open completes with the live side, packets flow (past the
/// 16 credits of the pool) and the channel closes. Before the fix the sender's open
/// completed against the cancelled side's closed endpoint: on tcp every send and receive
/// then timed out; on shm the first send used the freed endpoint inside libfabric and
/// crashed the test binary (SIGSEGV), spun there forever (hence the watchdog) or timed out,
/// so tcp runs first.
#[test]
fn cancel_of_an_announced_open_leaves_a_working_channel() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    let mut provs = providers();
    provs.sort_by_key(|&prov| prov != "tcp");
    for prov in provs {
        let _watchdog = Watchdog::new(format!("cancelopen on {prov}"), Duration::from_secs(90));
        let p = Pair::new(prov, "cancelopen", 150);
        p.a.set_endpoint_timeout(p.tx, STALL).unwrap();
        p.b.set_endpoint_timeout(p.rx, STALL).unwrap();
        connect(&p, false);
        let (h_first, q_first) = p.b.pktchan_recv_open_i(p.rx).unwrap();
        assert_eq!(p.b.test(q_first, None), Ok(None), "{prov}: open alone");
        // Time for the announce to reach the sender's node.
        std::thread::sleep(Duration::from_millis(200));
        let cancelled = match p.b.cancel(q_first) {
            Ok(()) => true,
            Err(Status::MCAPI_ERR_REQUEST_INVALID) => false,
            Err(e) => panic!("{prov}: cancel of the open: {e}"),
        };
        eprintln!("{prov}: cancel of the announced open withdrew it: {cancelled}");
        let (hs, qs) = p.a.pktchan_send_open_i(p.tx).unwrap();
        let a = p.a.clone();
        let sender_open = std::thread::spawn(move || a.wait(qs, None, WAIT));
        let hr = if cancelled {
            assert_eq!(
                p.b.wait(q_first, None, WAIT),
                Err(Status::MCAPI_ERR_REQUEST_CANCELLED),
                "{prov}"
            );
            let (hr, qr) = p.b.pktchan_recv_open_i(p.rx).unwrap();
            p.b.wait(qr, None, WAIT)
                .unwrap_or_else(|e| panic!("{prov}: second open: {e}"));
            hr
        } else {
            p.b.wait(q_first, None, WAIT)
                .unwrap_or_else(|e| panic!("{prov}: open after a refused cancel: {e}"));
            h_first
        };
        sender_open
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("{prov}: sender's open: {e}"));
        for i in 0..40u32 {
            assert_eq!(
                p.a.pktchan_send(hs, &i.to_le_bytes()),
                Ok(()),
                "{prov} (cancelled: {cancelled}): send {i}"
            );
            let pkt =
                p.b.pktchan_recv(hr)
                    .unwrap_or_else(|e| panic!("{prov} (cancelled: {cancelled}): recv {i}: {e}"));
            assert_eq!(pkt.to_vec(), i.to_le_bytes(), "{prov}");
            release_at(&p.b, pkt.addr()).unwrap();
        }
        close(&p, hs, hr, false);
        p.finalize();
    }
}

/// Opens a scalar channel from endpoint `tx` of node `s` to `rx` of node `r` (`s` connects).
fn scalar_channel(
    s: &Node,
    r: &Node,
    tx: EndpointId,
    rx: EndpointId,
) -> (ChannelHandle, ChannelHandle) {
    let to = s
        .endpoint_get(rx.domain(), rx.node(), rx.port(), WAIT)
        .unwrap();
    let c = s.sclchan_connect_i(tx, to).unwrap();
    s.wait(c, None, WAIT).unwrap();
    let (hr, qr) = r.sclchan_recv_open_i(rx).unwrap();
    let (hs, qs) = s.sclchan_send_open_i(tx).unwrap();
    let waiter = {
        let r = r.clone();
        std::thread::spawn(move || r.wait(qr, None, WAIT))
    };
    s.wait(qs, None, WAIT).unwrap();
    waiter.join().unwrap().unwrap();
    (hs, hr)
}

fn scalar_value(channel: u64, i: u64) -> u64 {
    (channel << 56) ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 8
}

/// Every scalar side of a node shares one endpoint and CQ: a side that reads another
/// side's completion must hand it over, whatever thread reads.
#[test]
fn scalar_channels_both_ways_in_parallel_keep_their_own_values() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    // Every provider offered: the hub's wait-object wake-ups differ (fd on sockets and net).
    for prov in every_provider() {
        let cfg = config(prov, "hub");
        let a = Node::initialize(0, 160, cfg.clone()).unwrap();
        let b = Node::initialize(0, 161, cfg).unwrap();
        let count: u64 = match prov {
            "shm" => 30_000,
            "tcp" => 5_000,
            _ => 1_000,
        };
        let mut threads = Vec::new();
        for ch in 0..6u32 {
            // Three channels a -> b, three b -> a.
            let (s, r) = if ch % 2 == 0 { (&a, &b) } else { (&b, &a) };
            let tx = s.endpoint_create(30 + ch).unwrap();
            let rx = r.endpoint_create(40 + ch).unwrap();
            let (hs, hr) = scalar_channel(s, r, tx, rx);
            let (s, r) = (s.clone(), r.clone());
            threads.push(std::thread::spawn(move || {
                for i in 0..count {
                    s.sclchan_send(hs, scalar_value(ch.into(), i), 8).unwrap();
                }
                s
            }));
            threads.push(std::thread::spawn(move || {
                for i in 0..count {
                    let v = r.sclchan_recv(hr, 8).unwrap();
                    assert_eq!(
                        v,
                        scalar_value(ch.into(), i),
                        "{prov}: channel {ch}, scalar {i}"
                    );
                }
                r
            }));
        }
        for t in threads {
            t.join().unwrap();
        }
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

/// Scalars a receiver closes on are discarded, and never reach the next channel between
/// the same endpoints (same side slot, same hub): neither those it had received nor those
/// still on their way, sent until the sender learnt of the close.
#[test]
fn discarded_scalars_never_reach_the_next_channel() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    for prov in providers() {
        let p = Pair::new(prov, "discard", 170);
        let credits = config(prov, "x").recv_buffers as u64;
        for round in 0..30u64 {
            let (hs, hr) = scalar_channel(&p.a, &p.b, p.tx, p.rx);
            let a = p.a.clone();
            // Even rounds: a full channel the receiver never reads. Odd rounds: the
            // sender goes on until it learns of the close.
            let sender = std::thread::spawn(move || {
                let mut i = 0;
                while (round % 2 == 1 || i < credits)
                    && a.sclchan_send(hs, scalar_value(round, i), 8).is_ok()
                {
                    i += 1;
                }
                a
            });
            for i in 0..credits / 2 {
                assert_eq!(
                    p.b.sclchan_recv(hr, 8),
                    Ok(scalar_value(round, i)),
                    "{prov}: round {round}"
                );
            }
            let qr = p.b.sclchan_recv_close_i(hr).unwrap();
            let a = sender.join().unwrap();
            let qs = a.sclchan_send_close_i(hs).unwrap();
            p.b.wait(qr, None, WAIT).unwrap();
            a.wait(qs, None, WAIT).unwrap();
        }
        let (hs, hr) = scalar_channel(&p.a, &p.b, p.tx, p.rx);
        for i in 0..3 * credits {
            p.a.sclchan_send(hs, scalar_value(99, i), 4).unwrap();
            assert_eq!(
                p.b.sclchan_recv(hr, 4),
                Ok(scalar_value(99, i) & 0xFFFF_FFFF),
                "{prov}"
            );
        }
        close(&p, hs, hr, true);
        p.finalize();
    }
}

/// Packet `i` of `round`: 4 to 103 bytes that say which it is.
fn numbered_packet(round: u32, i: u32) -> Vec<u8> {
    let mut v = (round << 16 | i).to_le_bytes().to_vec();
    v.extend((0..i % 100).map(|k| (k ^ round) as u8));
    v
}

/// The packet counterpart of `discarded_scalars_never_reach_the_next_channel`: packets sent
/// but not received when the receiver closes are discarded (spec 4.4.11), whether they were
/// queued at the receiver already (even rounds) or still on their way (odd rounds: the
/// sender goes on until it learns of the close), and none reaches the next channel between
/// the same endpoints; a packet held across the close stays valid until released. Pending
/// `pktchan_recv_i` requests end with `MCAPI_ERR_REQUEST_CANCELLED`, one already served
/// keeps its packet.
#[test]
fn discarded_packets_never_reach_the_next_channel() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    for prov in providers() {
        let p = Pair::new(prov, "pktdiscard", 235);
        let credits = config(prov, "x").recv_buffers as u32;
        for round in 0..10u32 {
            let (hs, hr) = open(&p, false, round % 2 == 0);
            let a = p.a.clone();
            let sender = std::thread::spawn(move || {
                let mut i = 0;
                while (round % 2 == 1 || i < credits)
                    && a.pktchan_send(hs, &numbered_packet(round, i)).is_ok()
                {
                    i += 1;
                }
                i
            });
            let mut held = None;
            for i in 0..credits / 2 {
                let pkt = p.b.pktchan_recv(hr).unwrap();
                assert_eq!(
                    pkt.to_vec(),
                    numbered_packet(round, i),
                    "{prov}: round {round}"
                );
                if let Some(old) = held.replace(pkt) {
                    release_at(&p.b, old.addr()).unwrap();
                }
            }
            if round % 2 == 0 {
                let start = Instant::now();
                while p.b.pktchan_available(hr) != Ok((credits - credits / 2) as usize) {
                    assert!(
                        start.elapsed() < Duration::from_secs(10),
                        "{prov}: round {round}"
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            let qr = p.b.pktchan_recv_close_i(hr).unwrap();
            let sent = sender.join().unwrap();
            // Even rounds: all sent before the close; odd: at least what was received.
            if round % 2 == 0 {
                assert_eq!(sent, credits, "{prov}: round {round}");
            } else {
                assert!(sent >= credits / 2, "{prov}: round {round}: {sent} sent");
            }
            let qs = p.a.pktchan_send_close_i(hs).unwrap();
            p.b.wait(qr, None, WAIT).unwrap();
            p.a.wait(qs, None, WAIT).unwrap();
            let held = held.unwrap();
            assert_eq!(
                held.to_vec(),
                numbered_packet(round, credits / 2 - 1),
                "{prov}: round {round}: held across the close"
            );
            release_at(&p.b, held.addr()).unwrap();
        }

        // Receives pending at the close: one served first keeps its packet.
        let (hs, hr) = open(&p, false, true);
        let pending: Vec<RequestHandle> = (0..3).map(|_| p.b.pktchan_recv_i(hr).unwrap()).collect();
        p.a.pktchan_send(hs, &numbered_packet(50, 0)).unwrap();
        assert_eq!(p.b.wait(pending[0], None, WAIT), Ok(4), "{prov}");
        let served = p.b.received_packet(pending[0]).unwrap().addr();
        for &r in &pending[1..] {
            assert_eq!(p.b.test(r, None), Ok(None), "{prov}: nothing more was sent");
        }
        let qr = p.b.pktchan_recv_close_i(hr).unwrap();
        for &r in &pending[1..] {
            assert_eq!(
                p.b.wait(r, None, WAIT),
                Err(Status::MCAPI_ERR_REQUEST_CANCELLED),
                "{prov}: a receive pending at the close"
            );
        }
        let qs = p.a.pktchan_send_close_i(hs).unwrap();
        p.b.wait(qr, None, WAIT).unwrap();
        p.a.wait(qs, None, WAIT).unwrap();
        release_at(&p.b, served).unwrap();

        // The next channel carries its own packets only, well past its credits.
        let (hs, hr) = open(&p, false, true);
        let a = p.a.clone();
        let sender = std::thread::spawn(move || {
            for i in 0..3 * credits {
                a.pktchan_send(hs, &numbered_packet(99, i)).unwrap();
            }
        });
        for i in 0..3 * credits {
            let pkt = p.b.pktchan_recv(hr).unwrap();
            assert_eq!(pkt.to_vec(), numbered_packet(99, i), "{prov}: next channel");
            release_at(&p.b, pkt.addr()).unwrap();
        }
        sender.join().unwrap();
        close(&p, hs, hr, false);
        p.finalize();
    }
}

/// A node that finalizes with a channel open to a node of the same process, right after a
/// credit return: the other side fails cleanly (shm gives endpoints of one process each
/// other's mappings, which closing an endpoint unmaps).
#[test]
fn finalize_right_after_a_credit_return_leaves_the_other_side_failing_cleanly() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    for prov in providers() {
        for round in 0..8u32 {
            let p = Pair::new(prov, "finalize", 180 + round * 3);
            let (hs, hr) = open(&p, false, true);
            // 16 released packets make the receiver send a credit return (a quarter pool).
            for i in 0..16u32 {
                p.a.pktchan_send(hs, &i.to_le_bytes()).unwrap();
                let pkt = p.b.pktchan_recv(hr).unwrap();
                release_at(&p.b, pkt.addr()).unwrap();
            }
            p.b.finalize().unwrap();
            // The sender reads its CQ (the credit return) and learns the receiver is gone.
            let start = Instant::now();
            loop {
                match p.a.pktchan_send(hs, b"after") {
                    Ok(()) => assert!(start.elapsed() < Duration::from_secs(10), "{prov}"),
                    Err(Status::MCAPI_ERR_TRANSMISSION) => break,
                    Err(e) => panic!("{prov}: send after the receiver finalized: {e}"),
                }
            }
            // The finalize closed the receiver's side as a close would: the sender's close
            // completes normally (docs/implementation-defined.md, "The other side closed").
            let q = p.a.pktchan_send_close_i(hs).unwrap();
            assert_eq!(p.a.wait(q, None, WAIT), Ok(0), "{prov}: round {round}");
            assert_eq!(
                p.a.endpoint_get_attribute(p.tx, ATTR_STATUS),
                Ok(0),
                "{prov}: round {round}: unconnected after the close"
            );
            p.a.finalize().unwrap();
            p.third.finalize().unwrap();
        }
    }
}

/// Requests that `mcapi_test` reported complete are reclaimable (the spec releases a
/// request only in wait and cancel, but programs reuse them after a test): a request table
/// full of them never refuses an open or a close with `MCAPI_ERR_REQUEST_LIMIT`.
#[test]
fn tested_requests_never_block_an_open_or_a_close() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    const TABLE: usize = 8;
    for prov in providers() {
        let mut cfg = config(prov, "reqfull");
        cfg.request_table_size = TABLE;
        let p = Pair::with_config(cfg, 250);
        // The second round opens with both tables full of the first round's requests.
        for round in 0..2 {
            let (hs, hr) = open(&p, false, round == 0);
            for i in 0..TABLE as u8 {
                let r = p.b.pktchan_recv_i(hr).unwrap();
                let s = p.a.pktchan_send_i(hs, &[i]).unwrap();
                let until = Instant::now() + Duration::from_secs(20);
                for (node, q) in [(&p.a, s), (&p.b, r)] {
                    while node.test(q, None).unwrap().is_none() {
                        assert!(Instant::now() < until, "{prov}: packet {i} stuck");
                    }
                }
                let addr = p.b.received_packet(r).unwrap().addr();
                release_at(&p.b, addr).unwrap();
            }
            close(&p, hs, hr, false);
        }
        p.finalize();
    }
}

/// Releases by address, as C does: these tests hold addresses (to release twice, in a
/// scrambled order, or after a close) where Rust code would hold the `Packet`.
fn release_at(node: &Node, addr: usize) -> Result<(), Status> {
    // SAFETY: the tests read no packet after giving its address back.
    unsafe { mcapi::capi::pktchan_release_at(node, addr) }
}

/// One node, one thread: both endpoints of a packet and a scalar channel are this node's.
/// Connect, both opens (waited in either order), as many packets or scalars as the channel
/// has buffers sent before any is received, each `pktchan_send_i` complete at its first
/// test, `available` counting them at once, a pending `recv_i` complete at its first test;
/// one packet more than the buffers stays pending until one is received. In both modes.
#[test]
fn same_node_channels_in_one_thread() {
    use mcapi::config::Compat;
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    for prov in providers() {
        for compat in [Compat::Spec, Compat::Mca] {
            let mut cfg = config(prov, &format!("samenode-{compat:?}"));
            cfg.compat = compat;
            let n = Node::initialize(0, 140, cfg).unwrap();
            let what = format!("{prov} {compat:?}");
            let buffers = 16usize;
            for (k, recv_first) in [(0u32, true), (1, false)] {
                let (tx, rx) = (
                    n.endpoint_create(10 + 2 * k).unwrap(),
                    n.endpoint_create(11 + 2 * k).unwrap(),
                );
                let c = n.pktchan_connect_i(tx, rx).unwrap();
                n.wait(c, None, WAIT).unwrap();
                let (hr, qr) = n.pktchan_recv_open_i(rx).unwrap();
                let (hs, qs) = n.pktchan_send_open_i(tx).unwrap();
                let order = if recv_first { [qr, qs] } else { [qs, qr] };
                for q in order {
                    n.wait(q, None, WAIT).unwrap();
                }
                for round in 0..2u8 {
                    for i in 0..buffers as u8 {
                        let data = [round, i, 7];
                        if i % 2 == 0 {
                            let s = n.pktchan_send_i(hs, &data).unwrap();
                            assert_eq!(n.test(s, None).unwrap(), Some(3), "{what}");
                        } else {
                            n.pktchan_send(hs, &data).unwrap();
                        }
                    }
                    assert_eq!(n.pktchan_available(hr).unwrap(), buffers, "{what}");
                    for i in 0..buffers as u8 {
                        let pkt = n.pktchan_recv(hr).unwrap();
                        assert_eq!(pkt.to_vec(), [round, i, 7], "{what}");
                        n.pktchan_release(pkt).unwrap();
                    }
                }
                // A pending receive completes at its first test once a packet was sent.
                let r = n.pktchan_recv_i(hr).unwrap();
                assert_eq!(n.test(r, None).unwrap(), None, "{what}");
                n.pktchan_send(hs, b"late").unwrap();
                assert_eq!(n.test(r, None).unwrap(), Some(4), "{what}");
                n.pktchan_release(n.received_packet(r).unwrap()).unwrap();
                // One more than the buffers: pending until one is received.
                for i in 0..buffers as u8 {
                    n.pktchan_send(hs, &[i]).unwrap();
                }
                let s = n.pktchan_send_i(hs, b"over").unwrap();
                assert_eq!(n.test(s, None).unwrap(), None, "{what}");
                let first = n.pktchan_recv(hr).unwrap();
                assert_eq!(first.to_vec(), [0], "{what}");
                n.pktchan_release(first).unwrap();
                assert_eq!(n.wait(s, None, WAIT).unwrap(), 4, "{what}");
                for i in 1..=buffers as u8 {
                    let pkt = n.pktchan_recv(hr).unwrap();
                    let want: &[u8] = if i as usize == buffers { b"over" } else { &[i] };
                    assert_eq!(pkt.to_vec(), want, "{what}");
                    n.pktchan_release(pkt).unwrap();
                }
                let (qs, qr) = (
                    n.pktchan_send_close_i(hs).unwrap(),
                    n.pktchan_recv_close_i(hr).unwrap(),
                );
                n.wait(qs, None, WAIT).unwrap();
                n.wait(qr, None, WAIT).unwrap();
            }
            for (k, width) in [1usize, 2, 4, 8].into_iter().enumerate() {
                let port = 20 + 2 * k as u32;
                let (tx, rx) = (
                    n.endpoint_create(port).unwrap(),
                    n.endpoint_create(port + 1).unwrap(),
                );
                let c = n.sclchan_connect_i(tx, rx).unwrap();
                n.wait(c, None, WAIT).unwrap();
                let (hs, qs) = n.sclchan_send_open_i(tx).unwrap();
                let (hr, qr) = n.sclchan_recv_open_i(rx).unwrap();
                n.wait(qs, None, WAIT).unwrap();
                n.wait(qr, None, WAIT).unwrap();
                let mask = u64::MAX >> (64 - 8 * width);
                let value = |round: u64, i: u64| (round << 40 | i).wrapping_mul(0x0101_0101_0101);
                for round in 0..3u64 {
                    for i in 0..buffers as u64 {
                        n.sclchan_send(hs, value(round, i), width).unwrap();
                    }
                    assert_eq!(n.sclchan_available(hr).unwrap(), buffers, "{what}");
                    for i in 0..buffers as u64 {
                        let v = n.sclchan_recv(hr, width).unwrap();
                        assert_eq!(v, value(round, i) & mask, "{what}");
                    }
                }
                let (qs, qr) = (
                    n.sclchan_send_close_i(hs).unwrap(),
                    n.sclchan_recv_close_i(hr).unwrap(),
                );
                n.wait(qs, None, WAIT).unwrap();
                n.wait(qr, None, WAIT).unwrap();
            }
            n.finalize().unwrap();
        }
    }
}

/// Compatibility mode (MCAPI_COMPAT=mca): a side's open completes before the other side
/// opens, and what is sent meanwhile waits for it: `pktchan_send_i` stays pending, a
/// blocking send (another thread) blocks, both complete once the receiver opened; the
/// same on one node. Spec mode: the send open stays pending until the receiver opens.
#[test]
fn compat_mode_opens_complete_on_their_own() {
    use mcapi::config::Compat;
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    for prov in providers() {
        for compat in [Compat::Spec, Compat::Mca] {
            let mut cfg = config(prov, &format!("early-{compat:?}"));
            cfg.compat = compat;
            let p = Pair::with_config(cfg, 150);
            let what = format!("{prov} {compat:?}");
            connect(&p, false);
            let (hs, qs) = p.a.pktchan_send_open_i(p.tx).unwrap();
            if compat == Compat::Spec {
                assert_eq!(
                    p.a.wait(qs, None, Some(Duration::from_millis(1))).err(),
                    Some(Status::MCAPI_TIMEOUT),
                    "{what}"
                );
                let (hr, qr) = p.b.pktchan_recv_open_i(p.rx).unwrap();
                p.b.wait(qr, None, WAIT).unwrap();
                p.a.wait(qs, None, WAIT).unwrap();
                p.a.pktchan_send(hs, b"x").unwrap();
                assert_eq!(p.b.pktchan_recv(hr).unwrap().to_vec(), b"x", "{what}");
                close(&p, hs, hr, false);
                p.finalize();
                continue;
            }
            p.a.wait(qs, None, WAIT).unwrap();
            let queued: Vec<RequestHandle> = (0..3u8)
                .map(|i| p.a.pktchan_send_i(hs, &[i; 5]).unwrap())
                .collect();
            for &q in &queued {
                assert_eq!(p.a.test(q, None).unwrap(), None, "{what}");
            }
            // A blocking send waits for the receiver's open (in another thread).
            let a = p.a.clone();
            let blocked = std::thread::spawn(move || a.pktchan_send(hs, &[3; 5]));
            let (hr, qr) = p.b.pktchan_recv_open_i(p.rx).unwrap();
            p.b.wait(qr, None, WAIT).unwrap();
            for q in queued {
                assert_eq!(p.a.wait(q, None, WAIT).unwrap(), 5, "{what}");
            }
            blocked.join().unwrap().unwrap();
            for i in 0..4u8 {
                let pkt = p.b.pktchan_recv(hr).unwrap();
                assert_eq!(pkt.to_vec(), [i; 5], "{what}");
                release_at(&p.b, pkt.addr()).unwrap();
            }
            close(&p, hs, hr, false);

            // Scalars: the receive side's open completes alone too; a scalar sent before
            // it opened (blocking, another thread) arrives once it did.
            p.a.endpoint_delete(p.tx).unwrap();
            p.b.endpoint_delete(p.rx).unwrap();
            let p = Pair {
                tx: p.a.endpoint_create(10).unwrap(),
                rx: p.b.endpoint_create(20).unwrap(),
                ..p
            };
            connect(&p, true);
            let (hr, qr) = p.b.sclchan_recv_open_i(p.rx).unwrap();
            p.b.wait(qr, None, WAIT).unwrap();
            assert_eq!(p.b.sclchan_available(hr).unwrap(), 0, "{what}");
            let (hs, qs) = p.a.sclchan_send_open_i(p.tx).unwrap();
            p.a.wait(qs, None, WAIT).unwrap();
            p.a.sclchan_send(hs, 0xBEEF, 2).unwrap();
            assert_eq!(p.b.sclchan_recv(hr, 2).unwrap(), 0xBEEF, "{what}");
            close(&p, hs, hr, true);
            p.finalize();
        }
    }
}

/// Compatibility mode: a side whose open completed before the other side's can be closed
/// then; what it queued still goes once the other side opens, and both closes complete.
#[test]
fn compat_mode_an_early_opened_side_closes_before_the_other_opens() {
    use mcapi::config::Compat;
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    for prov in providers() {
        let mut cfg = config(prov, "early-close");
        cfg.compat = Compat::Mca;
        let p = Pair::with_config(cfg, 160);
        connect(&p, false);
        let (hs, qs) = p.a.pktchan_send_open_i(p.tx).unwrap();
        p.a.wait(qs, None, WAIT).unwrap();
        let queued: Vec<RequestHandle> = (0..2u8)
            .map(|i| p.a.pktchan_send_i(hs, &[i; 3]).unwrap())
            .collect();
        let closing = p.a.pktchan_send_close_i(hs).unwrap();
        assert_eq!(
            p.a.test(closing, None),
            Ok(None),
            "{prov}: the receiver is open"
        );
        let (hr, qr) = p.b.pktchan_recv_open_i(p.rx).unwrap();
        p.b.wait(qr, None, WAIT).unwrap();
        for i in 0..2u8 {
            let pkt = p.b.pktchan_recv(hr).unwrap();
            assert_eq!(pkt.to_vec(), [i; 3], "{prov}");
            release_at(&p.b, pkt.addr()).unwrap();
        }
        assert_eq!(
            p.b.pktchan_recv(hr).err(),
            Some(Status::MCAPI_ERR_TRANSMISSION),
            "{prov}: the sender closed after two"
        );
        for q in queued {
            assert_eq!(p.a.wait(q, None, WAIT), Ok(3), "{prov}");
        }
        let qr = p.b.pktchan_recv_close_i(hr).unwrap();
        p.b.wait(qr, None, WAIT).unwrap();
        p.a.wait(closing, None, WAIT).unwrap();
        p.finalize();
    }
}

/// A blocking `pktchan_recv` made after a pending `pktchan_recv_i` does not overtake it:
/// receives are served in the order they were made, and `pktchan_available` does not count
/// a packet owed to a pending request.
#[test]
fn a_blocking_receive_does_not_overtake_a_pending_request() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    for prov in providers() {
        let p = Pair::new(prov, "no-overtake", 300);
        let (hs, hr) = open(&p, false, true);
        let r = p.b.pktchan_recv_i(hr).unwrap();
        p.a.pktchan_send(hs, b"first").unwrap();
        p.a.pktchan_send(hs, b"second").unwrap();
        // Both arrived, one owed to `r`: one available.
        let start = Instant::now();
        while p.b.pktchan_available(hr).unwrap() < 1 {
            assert!(start.elapsed() < Duration::from_secs(10), "{prov}");
        }
        assert_eq!(p.b.pktchan_available(hr), Ok(1), "{prov}");
        let blocking = p.b.pktchan_recv(hr).unwrap();
        assert_eq!(blocking.to_vec(), b"second", "{prov}: the later receive");
        p.b.wait(r, None, WAIT).unwrap();
        let first = p.b.received_packet(r).unwrap();
        assert_eq!(first.to_vec(), b"first", "{prov}: the earlier request");
        p.b.pktchan_release(first).unwrap();
        p.b.pktchan_release(blocking).unwrap();
        close(&p, hs, hr, false);
        p.finalize();
    }
}
