//! What a first message to a new endpoint costs: node <0,2> creates endpoints one by one
//! (a thread blocked in `msg_recv` on each), node <0,1> gets each with `endpoint_get` and
//! sends it two messages; prints the median time of the first `msg_send` (the credit
//! request over the control plane, the node lending credits from its receive pool, and from
//! the ninth endpoint on at the defaults a recall of idle credits) and of the second (a
//! credit in hand).
//!
//!   cargo run --release -p mcapi --example first_message [ENDPOINTS]   # MCAPI_PROVIDER=tcp

use mcapi::config::Config;
use mcapi::Node;
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn main() {
    let endpoints: u32 = std::env::args()
        .nth(1)
        .map_or(64, |n| n.parse().expect("a number of endpoints"));
    let mut config = Config::from_env().expect("MCAPI configuration");
    config.job = format!("first-message-{}", std::process::id());
    let tx = Node::initialize(0, 1, config.clone()).expect("node <0,1>");
    let rx = Node::initialize(0, 2, config).expect("node <0,2>");
    let from = tx.endpoint_create(1).unwrap();
    let (created, ports) = mpsc::channel();
    let (firsts, seconds) = std::thread::scope(|s| {
        s.spawn(|| {
            let mut buf = [0u8; 8];
            for port in 100..100 + endpoints {
                let ep = rx.endpoint_create(port).unwrap();
                created.send(port).unwrap();
                rx.msg_recv(ep, &mut buf).unwrap();
                rx.msg_recv(ep, &mut buf).unwrap();
            }
        });
        let (mut firsts, mut seconds) = (Vec::new(), Vec::new());
        for port in ports.iter().take(endpoints as usize) {
            let to = tx
                .endpoint_get(0, 2, port, Some(Duration::from_secs(10)))
                .unwrap();
            let t = Instant::now();
            tx.msg_send(from, to, b"first", 0).unwrap();
            firsts.push(t.elapsed());
            let t = Instant::now();
            tx.msg_send(from, to, b"second", 0).unwrap();
            seconds.push(t.elapsed());
        }
        (firsts, seconds)
    });
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (early, late) = firsts.split_at(firsts.len().min(8));
    println!(
        "{} endpoints: first msg_send median {:?} (endpoints 1-8: {:?}, later: {:?}), second {:?}",
        endpoints,
        median(firsts.clone()),
        median(early.to_vec()),
        if late.is_empty() {
            Duration::ZERO
        } else {
            median(late.to_vec())
        },
        median(seconds),
    );
    tx.finalize().unwrap();
    rx.finalize().unwrap();
}
