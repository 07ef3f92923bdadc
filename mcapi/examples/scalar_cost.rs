//! The CPU cost of MCAPI's scalar calls: one thread owns two nodes, sends a uint64 on a
//! scalar channel from one and receives it on the other, and prints the time per pair of
//! calls. No second core and no wait is in it, so it varies far less than perftest's
//! ping-pong and `perf record` shows what the calls themselves cost.
//!
//! `RAW=1` measures the same with libfabric alone, as perftest's raw scl-lat baseline does it
//! (an 8-byte `fi_tinject` into a posted tagged receive, which is re-posted): the difference
//! of the two is what MCAPI adds per send and receive. `MSG=1` measures an 8-byte
//! `msg_send` + `msg_recv` between the two nodes instead (the raw pattern is the same; `SIZE`
//! sets the size of both, up to the provider's inject size), and
//! `PKT=1` an 8-byte packet on a packet channel (`pktchan_send`, `pktchan_recv`,
//! `pktchan_release`: pkt-lat's calls).
//!
//! `cargo run --release -p mcapi --example scalar_cost -- [pairs [rounds]]` (`PROVIDER=tcp` etc. for
//! another provider than shm; pin it with `taskset -c 1`).
use mcapi::config::Config;
use mcapi::{EndpointId, Node};
use mcapi_ofi::{
    AddressVector, Completion, CompletionQueue, Domain, Endpoint, EndpointOptions, FiAddr, Hints,
    Info, MemoryRegion, WaitObject,
};
use std::time::{Duration, Instant};

const WAIT: Option<Duration> = Some(Duration::from_secs(20));

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let rounds: u32 = std::env::args()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let provider = std::env::var("PROVIDER").unwrap_or("shm".into());
    let mut pair: Box<dyn FnMut(u64)> = if std::env::var_os("RAW").is_some() {
        raw_pair(&provider)
    } else if std::env::var_os("LENT").is_some() {
        lent_pair(provider)
    } else if std::env::var_os("MSG").is_some() {
        msg_pair(provider)
    } else if std::env::var_os("PKT").is_some() {
        pkt_pair(provider)
    } else {
        mcapi_pair(provider)
    };
    let mut best = f64::INFINITY;
    for round in 0..rounds {
        let start = Instant::now();
        for i in 0..n {
            pair(i);
        }
        let ns = start.elapsed().as_nanos() as f64 / n as f64;
        println!("round {round}: {ns:.0} ns per send + recv");
        best = best.min(ns);
    }
    println!("best {best:.0} ns");
    std::process::exit(0);
}

/// Two nodes of this thread, endpoint 10 on the first and 20 on the second, and the second's
/// as the first got it.
fn two_nodes(provider: String, job: &str) -> (Node, Node, EndpointId, EndpointId, EndpointId) {
    let mut c = Config::defaults();
    c.provider = Some(provider);
    c.job = format!("{job}-{}", std::process::id());
    let a = Node::initialize(0, 1, c.clone()).unwrap();
    let b = Node::initialize(0, 2, c).unwrap();
    let tx = a.endpoint_create(10).unwrap();
    let rx = b.endpoint_create(20).unwrap();
    let to = a.endpoint_get(0, 2, 20, WAIT).unwrap();
    (a, b, tx, rx, to)
}

/// A scalar channel between two nodes of this thread; the closure sends `i` and receives it.
fn mcapi_pair(provider: String) -> Box<dyn FnMut(u64)> {
    let (a, b, tx, rx, to) = two_nodes(provider, "cost");
    let q = a.sclchan_connect_i(tx, to).unwrap();
    a.wait(q, None, WAIT).unwrap();
    let (hs, qs) = a.sclchan_send_open_i(tx).unwrap();
    let (hr, qr) = b.sclchan_recv_open_i(rx).unwrap();
    let a2 = a.clone();
    let t = std::thread::spawn(move || a2.wait(qs, None, WAIT));
    b.wait(qr, None, WAIT).unwrap();
    t.join().unwrap().unwrap();
    Box::new(move |i| {
        a.sclchan_send(hs, i, 8).unwrap();
        assert_eq!(b.sclchan_recv(hr, 8).unwrap(), i);
    })
}

/// A packet channel between two nodes of this thread; the closure sends `i` as an 8-byte
/// packet, receives it and releases it.
fn pkt_pair(provider: String) -> Box<dyn FnMut(u64)> {
    let (a, b, tx, rx, to) = two_nodes(provider, "pcost");
    let q = a.pktchan_connect_i(tx, to).unwrap();
    a.wait(q, None, WAIT).unwrap();
    let (hs, qs) = a.pktchan_send_open_i(tx).unwrap();
    let (hr, qr) = b.pktchan_recv_open_i(rx).unwrap();
    let a2 = a.clone();
    let t = std::thread::spawn(move || a2.wait(qs, None, WAIT));
    b.wait(qr, None, WAIT).unwrap();
    t.join().unwrap().unwrap();
    let mut word = [0u8; 8];
    Box::new(move |i| {
        a.pktchan_send(hs, &i.to_le_bytes()).unwrap();
        let p = b.pktchan_recv(hr).unwrap();
        p.copy_to(&mut word);
        b.pktchan_release(p).unwrap();
        assert_eq!(u64::from_le_bytes(word), i);
    })
}

/// An endpoint of each node; the closure sends `i` in a message of `SIZE` bytes (8 unless
/// set, at least 8) and receives it. `SEND_I=1`: sent by `msg_send_i` and `wait` instead of
/// `msg_send` (the C ABI's non-blocking send of a small message).
fn msg_pair(provider: String) -> Box<dyn FnMut(u64)> {
    let (a, b, tx, rx, to) = two_nodes(provider, "mcost");
    let size = msg_size();
    let (mut out, mut buf) = (vec![0u8; size], vec![0u8; size]);
    let send_i = std::env::var_os("SEND_I").is_some();
    Box::new(move |i| {
        out[..8].copy_from_slice(&i.to_le_bytes());
        if send_i {
            let r = a.msg_send_i(tx, to, &out, 0).unwrap();
            assert_eq!(a.wait(r, None, WAIT).unwrap(), size);
        } else {
            a.msg_send(tx, to, &out, 0).unwrap();
        }
        assert_eq!(b.msg_recv(rx, &mut buf).unwrap(), size);
        assert_eq!(buf[..8], i.to_le_bytes());
    })
}

/// As [`msg_pair`], as perftest's msg-bw streams messages above the eager size: the
/// message (`SIZE` bytes) is lent by `msg_send_i_zero_copy` and taken by a receive posted
/// with its buffer (`msg_recv_i_into`), so a rendezvous reads it in place.
fn lent_pair(provider: String) -> Box<dyn FnMut(u64)> {
    let (a, b, tx, rx, to) = two_nodes(provider, "lcost");
    let size = msg_size();
    let out: &'static [u8] = Box::leak(vec![7u8; size].into_boxed_slice());
    let mut into = Some(mcapi::RecvBuffer::from_static(Box::leak(
        vec![0u8; size].into_boxed_slice(),
    )));
    Box::new(move |_| {
        let r = b.msg_recv_i_into(rx, into.take().unwrap()).unwrap();
        let s = a
            .msg_send_i_zero_copy(tx, to, mcapi::SendBuffer::from_static(out), 0)
            .unwrap();
        let (got, mut buf) = b.wait_into(r, WAIT).unwrap();
        assert_eq!(got, size);
        assert_eq!(buf.as_mut_slice().unwrap()[size - 1], 7);
        assert_eq!(a.wait(s, None, WAIT).unwrap(), size);
        into = Some(buf);
    })
}

/// Two endpoints of one domain; the closure injects `i` (in `SIZE` bytes with `MSG=1`) from
/// one into a tagged receive posted on the other, polls for it and posts the receive again.
fn raw_pair(provider: &str) -> Box<dyn FnMut(u64)> {
    const TAG: u64 = 1;
    let size = msg_size();
    let info = Info::first(&Hints::new().provider(provider)).expect("provider");
    let domain = Domain::open_info(&info).expect("domain");
    let open = || {
        let cq = CompletionQueue::open(&domain, 0, WaitObject::None).expect("CQ");
        let av = AddressVector::open(&domain, 4).expect("AV");
        let ep = Endpoint::open(&domain, &cq, &av, EndpointOptions::default()).expect("endpoint");
        (ep, cq)
    };
    let (tx, tx_cq) = open();
    let (rx, rx_cq) = open();
    let dest = tx.av().insert(rx.address()).expect("AV insert");
    let region = MemoryRegion::new(&domain, size).expect("receive memory");
    let post = move |rx: &Endpoint, region: &MemoryRegion| {
        let buf = region.slice(0, size).expect("slot");
        rx.recv_tagged(buf, FiAddr::UNSPEC, TAG, 0, 0)
            .expect("post");
    };
    post(&rx, &region);
    let mut completions = [Completion::default(); 8];
    let mut out = vec![0u8; size];
    if size > domain.attributes().inject_size {
        // Beyond the inject size: a tagged send from registered memory, as perftest's raw
        // msg-bw; both CQs polled until the send and the receive completed.
        let send_region = MemoryRegion::new(&domain, size).expect("send memory");
        return Box::new(move |i| {
            send_region.write(0, &i.to_le_bytes()).expect("write");
            let buf = send_region.slice(0, size).expect("slot");
            while let Err(e) = tx.send_tagged(buf, dest, TAG, 1) {
                assert!(e.is_again(), "send: {e}");
                tx_cq.read(&mut completions).expect("CQ read");
                rx_cq.read(&mut completions).expect("CQ read");
            }
            let (mut sent, mut received) = (false, false);
            while !(sent && received) {
                sent |= tx_cq.read(&mut completions).expect("CQ read") > 0;
                received |= rx_cq.read(&mut completions).expect("CQ read") > 0;
            }
            let mut word = [0u8; 8];
            region.read(0, &mut word).expect("read");
            assert_eq!(u64::from_le_bytes(word), i);
            post(&rx, &region);
        });
    }
    Box::new(move |i| {
        out[..8].copy_from_slice(&i.to_le_bytes());
        // The CQs are read for the send only when the provider asks for progress (as
        // perftest does); shm's first send to a peer needs the peer's.
        while let Err(e) = tx.inject_tagged(&out, dest, TAG) {
            assert!(e.is_again(), "inject: {e}");
            tx_cq.read(&mut completions).expect("CQ read");
            rx_cq.read(&mut completions).expect("CQ read");
        }
        while rx_cq.read(&mut completions).expect("CQ read") == 0 {}
        let mut word = [0u8; 8];
        region.read(0, &mut word).expect("read");
        assert_eq!(u64::from_le_bytes(word), i);
        post(&rx, &region);
    })
}

/// `SIZE` (bytes of a message with `MSG=1`): 8 unless set, at least 8.
fn msg_size() -> usize {
    let size = std::env::var("SIZE").ok().and_then(|v| v.parse().ok());
    size.unwrap_or(8usize).max(8)
}
