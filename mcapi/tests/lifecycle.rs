//! `initialize` after `finalize` works again, 150 times, without leaking file descriptors,
//! threads or memory. Its own test binary: nothing else runs in this process.

use mcapi::config::Config;
use mcapi::Node;

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

fn rss_kib() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0)
}

fn cycle(config: &Config) {
    let a = Node::initialize(0, 30, config.clone()).unwrap();
    let b = Node::initialize(0, 31, config.clone()).unwrap();
    let rx = b.endpoint_create(1).unwrap();
    let tx = a.endpoint_create(1).unwrap();
    let to = a.endpoint_get(0, 31, 1, None).unwrap();
    a.msg_send(tx, to, b"ping", 0).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(b.msg_recv(rx, &mut buf).unwrap(), 4);
    a.finalize().unwrap();
    b.finalize().unwrap();
}

#[test]
fn initialize_finalize_cycles_leak_nothing() {
    let mut config = Config::defaults();
    config.provider = Some("shm".into());
    config.job = format!("lifecycle-{}", std::process::id());
    config.recv_buffers = 4;
    cycle(&config);
    let (fds, threads) = (count("/proc/self/fd"), count("/proc/self/task"));
    // The allocator and libfabric's caches settle during the first few dozen cycles;
    // memory is measured from then on.
    for _ in 0..49 {
        cycle(&config);
    }
    let rss = rss_kib();
    for _ in 0..100 {
        cycle(&config);
    }
    let (fds2, threads2, rss2) = (count("/proc/self/fd"), count("/proc/self/task"), rss_kib());
    eprintln!("after 1 cycle: {fds} fds, {threads} threads; after 150: {fds2}, {threads2}; RSS {rss} KiB after 50, {rss2} KiB after 150");
    assert_eq!(fds2, fds, "file descriptors leaked");
    assert_eq!(threads2, threads, "threads leaked");
    assert!(
        rss2 < rss + 4 * 1024,
        "memory grew from {rss} to {rss2} KiB over 100 cycles"
    );
}
