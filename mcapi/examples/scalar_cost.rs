//! The CPU cost of MCAPI's scalar calls: one thread owns two nodes, sends a uint64 on a
//! scalar channel from one and receives it on the other, and prints the time per pair of
//! calls. No second core and no wait is in it, so it varies far less than perftest's
//! ping-pong and `perf record` shows what the calls themselves cost.
//!
//! `cargo run --release -p mcapi --example scalar_cost -- [pairs [rounds]]` (`PROVIDER=tcp` etc. for
//! another provider than shm; pin it with `taskset -c 1`).
use mcapi::config::Config;
use mcapi::Node;
use std::time::{Duration, Instant};

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let mut c = Config::defaults();
    c.provider = Some(std::env::var("PROVIDER").unwrap_or("shm".into()));
    c.job = format!("cost-{}", std::process::id());
    let wait = Some(Duration::from_secs(20));
    let a = Node::initialize(0, 1, c.clone()).unwrap();
    let b = Node::initialize(0, 2, c).unwrap();
    let tx = a.endpoint_create(10).unwrap();
    let rx = b.endpoint_create(20).unwrap();
    let r = a.endpoint_get(0, 2, 20, wait).unwrap();
    let q = a.sclchan_connect_i(tx, r).unwrap();
    a.wait(q, None, wait).unwrap();
    let (hs, qs) = a.sclchan_send_open_i(tx).unwrap();
    let (hr, qr) = b.sclchan_recv_open_i(rx).unwrap();
    let a2 = a.clone();
    let t = std::thread::spawn(move || a2.wait(qs, None, wait));
    b.wait(qr, None, wait).unwrap();
    t.join().unwrap().unwrap();
    let rounds: u32 = std::env::args()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let mut best = f64::INFINITY;
    for round in 0..rounds {
        let start = Instant::now();
        for i in 0..n {
            a.sclchan_send(hs, i, 8).unwrap();
            assert_eq!(b.sclchan_recv(hr, 8).unwrap(), i);
        }
        let ns = start.elapsed().as_nanos() as f64 / n as f64;
        println!("round {round}: {ns:.0} ns per send + recv");
        best = best.min(ns);
    }
    println!("best {best:.0} ns");
    std::process::exit(0);
}
