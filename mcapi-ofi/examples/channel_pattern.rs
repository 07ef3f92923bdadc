//! The packet channel's fabric pattern without MCAPI, beside perftest's raw baseline, over
//! shm (`PROVIDER=tcp` etc. for another provider): separates what the pattern costs from what the MCAPI layer adds.
//!
//! `cargo run --release -p mcapi-ofi --example channel_pattern -- <pattern> [packets] [bytes]`
//!
//! Patterns (a window of 64 packets, then an 8-byte tagged ack, as perftest's pkt-bw):
//! - `tagged`: one endpoint a side, tagged sends into 64 posted tagged slots (the raw baseline);
//! - `channel`: a data and an ack endpoint a side, untagged sends with remote CQ data into a
//!   pool of 64 `FI_MULTI_RECV` buffers of `bytes + 8 KiB`, an 8-byte credit return every 16
//!   packets (what an MCAPI packet channel does);
//! - `channel-no-credits`: `channel` without the credit returns;
//! - `one-endpoint`: `channel` with one endpoint a side;
//! - `channel-unregistered`: `channel` sending from unregistered memory.
//!
//! `PINGPONG=1` runs a ping-pong of `bytes` instead (`packets` round trips) and prints the
//! median round trip: `tagged` is perftest's raw scl-lat baseline; `channel` is two
//! channels as MCAPI runs scalars on shm (a send and a receive endpoint a side, injects with
//! remote CQ data into a pool of `FI_MULTI_RECV` buffers, no credits); `one-endpoint` the
//! same with one endpoint a side.
//!
//! `PIN=1` pins the receiver to CPU 0 and the sender to CPU 1 (`taskset`).
//!
//! `RECV_DELAY_NS` / `SEND_DELAY_NS` add busy time per packet to the receiver / sender, to see
//! which side's per-packet work the throughput follows; `ACK_POLLS=n` makes the sender poll
//! its ack endpoint n times per poll of its data endpoint while it waits.

use mcapi_ofi::{
    flags, AddressVector, Completion, CompletionQueue, Domain, Endpoint, EndpointOptions, FiAddr,
    Hints, Info, MemoryRegion, SendBuffer, WaitObject,
};
use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

const WINDOW: usize = 64;
const CREDIT_EVERY: usize = 16;
const CREDIT_SLOTS: usize = 8;
const DATA_TAG: u64 = 1;
const ACK_TAG: u64 = 7;
const ACK_CTX: u64 = 1 << 40;
const CREDIT_CTX: u64 = 1 << 41;
const WARMUP: usize = 10 * WINDOW;

#[derive(Clone, Copy)]
struct Pattern {
    multi_recv: bool,
    two_endpoints: bool,
    credits: bool,
    /// Sends from unregistered memory (as MCAPI's zero-copy `pktchan_send_i`).
    unregistered: bool,
}

impl Pattern {
    fn parse(name: &str) -> Option<Pattern> {
        let (multi_recv, two_endpoints, credits, unregistered) = match name {
            "tagged" => (false, false, false, false),
            "channel" => (true, true, true, false),
            "channel-no-credits" => (true, true, false, false),
            "one-endpoint" => (true, false, true, false),
            "channel-unregistered" => (true, true, true, true),
            _ => return None,
        };
        Some(Pattern {
            multi_recv,
            two_endpoints,
            credits,
            unregistered,
        })
    }
}

struct Side {
    ep: Endpoint,
    cq: CompletionQueue,
    av: AddressVector,
}

impl Side {
    fn open(domain: &Domain, min_multi_recv: Option<usize>) -> Side {
        let cq = CompletionQueue::open(domain, 0, WaitObject::None).expect("CQ");
        let av = AddressVector::open(domain, 4).expect("AV");
        let ep =
            Endpoint::open(domain, &cq, &av, EndpointOptions { min_multi_recv }).expect("endpoint");
        Side { ep, cq, av }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex address"))
        .collect()
}

fn delay_from_env(var: &str) -> Duration {
    Duration::from_nanos(
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    )
}

fn busy(d: Duration) {
    if !d.is_zero() {
        let t = Instant::now();
        while t.elapsed() < d {
            std::hint::spin_loop();
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = args.first().map_or("channel", String::as_str);
    let Some(pattern) = Pattern::parse(name) else {
        eprintln!(
            "patterns: tagged, channel, channel-no-credits, one-endpoint, channel-unregistered"
        );
        std::process::exit(2);
    };
    let packets: usize = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let len: usize = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(65536);
    if let Some(role) = args.get(3) {
        return run(role, pattern, packets, len);
    }
    // Two processes, as perftest --local: the receiver and the sender swap addresses here.
    let exe = std::env::current_exe().expect("own path");
    // PIN=1: the receiver on CPU 0, the sender on CPU 1 (as perftest --cpu 0,1).
    let pin = std::env::var_os("PIN").is_some();
    let spawn = |role: &str| {
        let mut command = if pin {
            let mut c = std::process::Command::new("taskset");
            c.args(["-c", if role == "recv" { "0" } else { "1" }])
                .arg(&exe);
            c
        } else {
            std::process::Command::new(&exe)
        };
        command
            .args([name, &packets.to_string(), &len.to_string(), role])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn")
    };
    let mut receiver = spawn("recv");
    let mut sender = spawn("send");
    let mut from_receiver = std::io::BufReader::new(receiver.stdout.take().expect("stdout"));
    let mut from_sender = std::io::BufReader::new(sender.stdout.take().expect("stdout"));
    let (mut receiver_addr, mut sender_addr) = (String::new(), String::new());
    from_receiver
        .read_line(&mut receiver_addr)
        .expect("address");
    from_sender.read_line(&mut sender_addr).expect("address");
    let mut to = receiver.stdin.take().expect("stdin");
    writeln!(to, "{}", sender_addr.trim()).expect("address");
    let mut to = sender.stdin.take().expect("stdin");
    writeln!(to, "{}", receiver_addr.trim()).expect("address");
    let mut result = String::new();
    from_sender.read_line(&mut result).expect("result");
    print!("{name} {len} B: {result}");
    let _ = sender.wait();
    let _ = receiver.kill();
    let _ = receiver.wait();
}

fn run(role: &str, p: Pattern, packets: usize, len: usize) {
    let provider = std::env::var("PROVIDER").unwrap_or_else(|_| "shm".to_owned());
    let mut hints = Hints::new().provider(provider.clone());
    if provider != "shm" {
        hints = hints.source(Some("127.0.0.1"), None);
    }
    let info = Info::first(&hints).expect("provider");
    let domain = Domain::open_info(&info).expect("domain");
    if std::env::var_os("PINGPONG").is_some() {
        return pingpong(role == "send", p, packets, len, &domain);
    }
    let receiving = role == "recv";
    let data = Side::open(&domain, (p.multi_recv && receiving).then_some(len.max(8)));
    let ack_side = p.two_endpoints.then(|| Side::open(&domain, None));
    let ack = ack_side.as_ref().unwrap_or(&data);
    let (peer_data, peer_ack) = swap_addresses(&data, ack);
    let peer_data = data.av.insert(&peer_data).expect("AV");
    let peer_ack = ack.av.insert(&peer_ack).expect("AV");
    if receiving {
        receive(p, len, &domain, &data, ack, peer_data, peer_ack);
    } else {
        let rate = send(p, packets, len, &domain, &data, ack, peer_data);
        println!(
            "{:.0} MB/s, {:.3} M packets/s",
            rate * len as f64 / 1e6,
            rate / 1e6
        );
    }
}

/// Posts receive buffer `b` (of `buffer` bytes) of `pool`: a multi-receive or a tagged slot.
fn post_receive(p: Pattern, ep: &Endpoint, pool: &MemoryRegion, buffer: usize, b: usize) {
    let buf = pool.slice(b * buffer, buffer).expect("slice");
    if p.multi_recv {
        ep.recv_multi(buf, b as u64)
    } else {
        ep.recv_tagged(buf, FiAddr::UNSPEC, DATA_TAG, 0, b as u64)
    }
    .expect("posting a receive");
}

/// Retries an inject the provider refused for now, reading `cq` in between.
fn inject_retrying(cq: &CompletionQueue, mut inject: impl FnMut() -> mcapi_ofi::Result<()>) {
    let mut scratch = [Completion::default(); 4];
    while let Err(e) = inject() {
        assert!(e.is_again(), "inject: {e}");
        let _ = cq.read(&mut scratch);
    }
}

fn receive(
    p: Pattern,
    len: usize,
    domain: &Domain,
    data: &Side,
    ack: &Side,
    peer_data: FiAddr,
    peer_ack: FiAddr,
) -> ! {
    let delay = delay_from_env("RECV_DELAY_NS");
    let buffer = if p.multi_recv { len + 8192 } else { len.max(8) };
    let pool = MemoryRegion::with_slots(domain, WINDOW, buffer).expect("pool");
    let post = |b: usize| post_receive(p, &data.ep, &pool, buffer, b);
    (0..WINDOW).for_each(post);
    let word = [0u8; 8];
    let mut completions = [Completion::default(); 32];
    let mut received = 0usize;
    loop {
        let n = data.cq.read(&mut completions).unwrap_or(0);
        for c in &completions[..n] {
            let arrived = !p.multi_recv || c.flags() & flags::REMOTE_CQ_DATA != 0;
            if arrived {
                busy(delay);
                received += 1;
                if p.credits && received.is_multiple_of(CREDIT_EVERY) {
                    inject_retrying(&data.cq, || data.ep.inject(&word, peer_data));
                }
                if received.is_multiple_of(WINDOW) {
                    inject_retrying(&ack.cq, || ack.ep.inject_tagged(&word, peer_ack, ACK_TAG));
                }
            }
            if !p.multi_recv || c.flags() & flags::MULTI_RECV != 0 {
                post(c.context() as usize);
            }
        }
        if p.two_endpoints {
            let _ = ack.cq.read(&mut completions);
        }
    }
}

/// Sends windows of packets; returns packets per second after the warmup.
fn send(
    p: Pattern,
    packets: usize,
    len: usize,
    domain: &Domain,
    data: &Side,
    ack: &Side,
    peer_data: FiAddr,
) -> f64 {
    let delay = delay_from_env("SEND_DELAY_NS");
    let source = MemoryRegion::new(domain, len.max(8)).expect("send buffer");
    let pattern = vec![1u8; len];
    // Written, as perftest's buffers: a never-written one reads the shared zero page.
    source.write(0, &pattern).expect("filling the send buffer");
    let user: &'static [u8] = Box::leak(pattern.clone().into_boxed_slice());
    let user = SendBuffer::from_static(user);
    let small = len <= data.ep.attributes().inject_size;
    let ack_buf = MemoryRegion::new(domain, 8).expect("ack buffer");
    let post_ack = || {
        let buf = ack_buf.slice(0, 8).expect("slice");
        ack.ep
            .recv_tagged(buf, FiAddr::UNSPEC, ACK_TAG, 0, ACK_CTX)
            .expect("posting the ack receive");
    };
    post_ack();
    let slots = MemoryRegion::with_slots(domain, CREDIT_SLOTS, 8).expect("credit slots");
    let post_credit = |i: usize| {
        let buf = slots.slice(i * 8, 8).expect("slice");
        data.ep
            .recv(buf, FiAddr::UNSPEC, CREDIT_CTX | i as u64)
            .expect("posting a credit receive");
    };
    if p.credits {
        (0..CREDIT_SLOTS).for_each(post_credit);
    }
    let mut completions = [Completion::default(); 32];
    let mut acks = 0usize;
    // ACK_POLLS: polls of the ack endpoint per poll of the data endpoint while waiting (a
    // blocked MCAPI call polls its own side in bursts, the others between them).
    let ack_polls: usize = std::env::var("ACK_POLLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let mut polls = 0usize;
    let mut poll = |acks: &mut usize| {
        polls += 1;
        let sides: &[&Side] = match (p.two_endpoints, polls.is_multiple_of(ack_polls)) {
            (true, true) => &[data, ack],
            (true, false) => &[ack],
            (false, _) => &[data],
        };
        for side in sides {
            let n = side.cq.read(&mut completions).unwrap_or(0);
            for c in &completions[..n] {
                if c.context() == ACK_CTX {
                    *acks += 1;
                    post_ack();
                } else if c.context() & CREDIT_CTX != 0 {
                    post_credit((c.context() & 0xff) as usize);
                }
            }
        }
    };
    let mut start = Instant::now();
    let mut sent = 0usize;
    while sent < WARMUP + packets {
        if sent == WARMUP {
            start = Instant::now();
        }
        for _ in 0..WINDOW {
            busy(delay);
            let seq = sent as u64;
            loop {
                let posted = match (p.multi_recv, small) {
                    (true, true) => data.ep.inject_data(&pattern, seq, peer_data),
                    (false, true) => data.ep.inject_tagged(&pattern, peer_data, DATA_TAG),
                    (true, false) if p.unregistered => data.ep.send_from(&user, seq, peer_data, 0),
                    (true, false) => {
                        let buf = source.slice(0, len).expect("slice");
                        data.ep.send(buf, Some(seq), peer_data, 0)
                    }
                    (false, false) => {
                        let buf = source.slice(0, len).expect("slice");
                        data.ep.send_tagged(buf, peer_data, DATA_TAG, 0)
                    }
                };
                match posted {
                    Ok(()) => break,
                    Err(e) if e.is_again() => poll(&mut acks),
                    Err(e) => panic!("send: {e}"),
                }
            }
            sent += 1;
        }
        while acks < sent / WINDOW {
            poll(&mut acks);
        }
    }
    packets as f64 / start.elapsed().as_secs_f64()
}

/// Swaps the two endpoints' addresses with the peer over stdin/stdout; returns the peer's.
fn swap_addresses(first: &Side, second: &Side) -> (Vec<u8>, Vec<u8>) {
    println!("{} {}", hex(first.ep.address()), hex(second.ep.address()));
    std::io::stdout().flush().expect("stdout");
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .expect("peer address");
    let mut words = line.split_whitespace().map(unhex);
    let mut next = || words.next().expect("address");
    (next(), next())
}

/// `PINGPONG`: round trips of `len` bytes; the client prints the median.
fn pingpong(client: bool, p: Pattern, round_trips: usize, len: usize, domain: &Domain) {
    const SLOTS: usize = 4;
    let rx = Side::open(domain, p.multi_recv.then_some(len.max(8)));
    let tx_side = p.two_endpoints.then(|| Side::open(domain, None));
    let tx = tx_side.as_ref().unwrap_or(&rx);
    // The peer's receive endpoint is its first address.
    let (peer_rx, _) = swap_addresses(&rx, tx);
    let peer = tx.av.insert(&peer_rx).expect("AV");
    let buffer = if p.multi_recv { 64 * 1024 } else { len.max(8) };
    let pool = MemoryRegion::with_slots(domain, SLOTS, buffer).expect("pool");
    let post = |b: usize| post_receive(p, &rx.ep, &pool, buffer, b);
    (0..SLOTS).for_each(post);
    let payload = vec![1u8; len];
    let mut completions = [Completion::default(); 16];
    let mut seq = 0u64;
    let mut send = || {
        seq += 1;
        inject_retrying(&tx.cq, || {
            if p.multi_recv {
                tx.ep.inject_data(&payload, seq, peer)
            } else {
                tx.ep.inject_tagged(&payload, peer, DATA_TAG)
            }
        });
    };
    let mut wait = || loop {
        let n = rx.cq.read(&mut completions).unwrap_or(0);
        let mut arrived = false;
        for c in &completions[..n] {
            arrived |= !p.multi_recv || c.flags() & flags::REMOTE_CQ_DATA != 0;
            if !p.multi_recv || c.flags() & flags::MULTI_RECV != 0 {
                post(c.context() as usize);
            }
        }
        if arrived {
            return;
        }
        if p.two_endpoints {
            let _ = tx.cq.read(&mut completions);
        }
    };
    if !client {
        loop {
            wait();
            send();
        }
    }
    let mut times = Vec::with_capacity(round_trips);
    for i in 0..WARMUP + round_trips {
        let t = Instant::now();
        send();
        wait();
        if i >= WARMUP {
            times.push(t.elapsed());
        }
    }
    times.sort_unstable();
    println!("round trip p50 {:?}", times[times.len() / 2]);
}
