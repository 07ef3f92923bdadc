//! Two hosts for real: two network namespaces joined by a veth pair, each running an MCAPI
//! node in its own mount namespace (private /tmp and /dev/shm, so nothing passes through
//! shared files), talking over tcp through an `MCAPI_TOPOLOGY` file. Addresses come from
//! the documentation range 198.51.100.0/24. Skipped, with the reason printed, without
//! CAP_NET_ADMIN. Messages, then a packet and a scalar channel between the two hosts.

#[path = "common/launch.rs"]
mod launch;

use launch::{required, sh};
use libtest_mimic::{Arguments, Failed, Trial};
use mcapi::config::Config;
use mcapi::{Node, MAX_PKT_SIZE};
use std::process::Command;
use std::time::Duration;

const MESSAGES: u32 = 2000;
const WAIT: Option<Duration> = Some(Duration::from_secs(60));
const ATTR_MAX_PAYLOAD: u32 = 1;
const ATTR_STATUS: u32 = 8;
/// Packet sizes sent across: empty, tiny, around tcp's inject size, 64 KiB and the maximum
/// payload.
const SIZES: [usize; 8] = [0, 1, 8, 4095, 4097, 64 * 1024, 1024 * 1024, MAX_PKT_SIZE];
/// Rounds of `SIZES`, then small numbered packets and scalars of each width: enough to run
/// through the receive pool and the credits several times.
const ROUNDS: usize = 3;
const STREAM: u64 = 5000;
const NS: [&str; 2] = ["mcapi-host-a", "mcapi-host-b"];
const ADDR: [&str; 2] = ["198.51.100.1", "198.51.100.2"];

fn main() {
    if let Ok(role) = std::env::var("MCAPI_TWO_HOSTS_ROLE") {
        child(&role);
        return;
    }
    let mut args = Arguments::from_args();
    args.test_threads = Some(1);
    // The test command sets MCAPI_TEST_REQUIRE_ALL: there the tests run (and fail) anyway.
    let why = setup_reason().filter(|_| !required());
    if let Some(why) = &why {
        eprintln!("skipping two_hosts: {why}");
    }
    let trials = vec![
        Trial::test("tcp_between_two_network_namespaces", || {
            two_hosts(["receiver", "sender"])
        }),
        Trial::test("channels_between_two_network_namespaces", || {
            two_hosts(["chan-receiver", "chan-sender"])
        }),
    ];
    let trials = trials
        .into_iter()
        .map(|t| t.with_ignored_flag(why.is_some()))
        .collect();
    libtest_mimic::run(&args, trials).exit();
}

/// Why the namespaces cannot be made here, if they cannot.
fn setup_reason() -> Option<String> {
    let probe = "mcapi-probe-ns";
    match sh(&["ip", "netns", "add", probe]) {
        Ok(()) => {
            let _ = sh(&["ip", "netns", "del", probe]);
            None
        }
        Err(e) => Some(format!(
            "cannot create network namespaces (needs CAP_NET_ADMIN): {e}"
        )),
    }
}

struct Namespaces;

impl Namespaces {
    fn create() -> Result<Namespaces, String> {
        Namespaces::remove();
        let guard = Namespaces;
        for ns in NS {
            sh(&["ip", "netns", "add", ns])?;
        }
        sh(&[
            "ip",
            "link",
            "add",
            "mcapi-veth-a",
            "type",
            "veth",
            "peer",
            "name",
            "mcapi-veth-b",
        ])?;
        for (i, ns) in NS.iter().enumerate() {
            let dev = ["mcapi-veth-a", "mcapi-veth-b"][i];
            sh(&["ip", "link", "set", dev, "netns", ns])?;
            sh(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{}/24", ADDR[i]),
                "dev",
                dev,
            ])?;
            sh(&["ip", "-n", ns, "link", "set", dev, "up"])?;
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(guard)
    }

    fn remove() {
        for ns in NS {
            let _ = sh(&["ip", "netns", "del", ns]);
        }
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        Namespaces::remove();
    }
}

/// Runs `roles[0]` as node 0 on host a and `roles[1]` as node 1 on host b.
fn two_hosts(roles: [&str; 2]) -> Result<(), Failed> {
    let _ns = Namespaces::create()?;
    let topology = format!(
        "# two hosts\n0 0 {}:47700\n0 1 {}:47701\n",
        ADDR[0], ADDR[1]
    );
    let exe = std::env::current_exe()?;
    let spawn = |i: usize, role: &str| {
        // A private /tmp and /dev/shm per "host": only the network connects them. The test
        // binary (which may itself live under /tmp) is opened before the mounts hide it and
        // executed through its descriptor; the topology file is written into the new /tmp.
        let script = "exec 3<\"$MCAPI_TEST_EXE\" && mount -t tmpfs tmpfs /tmp && mount -t tmpfs tmpfs /dev/shm \
             && printf '%s' \"$MCAPI_TEST_TOPOLOGY\" > /tmp/topology && exec /proc/self/fd/3";
        Command::new("ip")
            .args([
                "netns",
                "exec",
                NS[i],
                "unshare",
                "-m",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
            ])
            .env("MCAPI_TEST_EXE", &exe)
            .env("MCAPI_TEST_TOPOLOGY", &topology)
            .env("MCAPI_TWO_HOSTS_ROLE", role)
            .env("MCAPI_TOPOLOGY", "/tmp/topology")
            .env("MCAPI_PROVIDER", "tcp")
            .env("MCAPI_JOB", format!("two-hosts-{}", std::process::id()))
            // Across hosts the job key cannot be generated: both are given it.
            .env(
                "MCAPI_JOB_KEY",
                format!("two-hosts-key-{}-0123456789", std::process::id()),
            )
            .spawn()
    };
    let mut receiver = spawn(0, roles[0])?;
    let mut sender = spawn(1, roles[1])?;
    // Bounded: a hang fails this test instead of eating the CI run.
    let status = wait_both([&mut receiver, &mut sender], Duration::from_secs(120))?;
    match status {
        [Some(r), Some(s)] if r.success() && s.success() => Ok(()),
        [r, s] => Err(format!("receiver {r:?}, sender {s:?} (None: killed)").into()),
    }
}

/// Both children's exit statuses. Bounded: one that fails ends the other at once (it may
/// wait for its peer for good), and both are killed after `limit`; `None` for one killed.
fn wait_both(
    mut children: [&mut std::process::Child; 2],
    limit: Duration,
) -> std::io::Result<[Option<std::process::ExitStatus>; 2]> {
    let deadline = std::time::Instant::now() + limit;
    let mut status = [None, None];
    loop {
        for (i, child) in children.iter_mut().enumerate() {
            if status[i].is_none() {
                status[i] = child.try_wait()?;
            }
        }
        let failed = status.iter().flatten().any(|s| !s.success());
        if status.iter().all(Option::is_some) {
            return Ok(status);
        }
        if failed || std::time::Instant::now() >= deadline {
            for (i, child) in children.iter_mut().enumerate() {
                if status[i].is_none() {
                    _ = child.kill();
                    _ = child.wait();
                }
            }
            return Ok(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn child(role: &str) {
    let config = Config::from_env().expect("configuration");
    assert!(!config.single_host());
    match role {
        "receiver" => {
            let node = Node::initialize(0, 0, config).expect("initialize");
            assert!(
                node.provider().starts_with("tcp"),
                "provider {}",
                node.provider()
            );
            let ep = node.endpoint_create(1).unwrap();
            node.set_endpoint_timeout(ep, Some(Duration::from_secs(60)))
                .unwrap();
            let mut next = [0u32; 2];
            let mut buf = [0u8; 64];
            for _ in 0..MESSAGES {
                let n = node.msg_recv(ep, &mut buf).unwrap();
                let i = u32::from_le_bytes(buf[..4].try_into().unwrap());
                assert_eq!(n, 4 + (i as usize % 50));
                let p = (i % 2) as usize;
                assert_eq!(i, next[p] * 2 + p as u32, "order within priority {p}");
                next[p] += 1;
            }
            // Then a 16 MiB message by rendezvous (an RMA read across the hosts), and an
            // eager one after it.
            let max = mcapi::MAX_MSG_SIZE;
            let mut big = vec![0u8; max];
            assert_eq!(node.msg_recv(ep, &mut big), Ok(max));
            assert!(big == pattern(max, 5), "16 MiB message content differs");
            assert_eq!(node.msg_recv(ep, &mut buf), Ok(3));
            node.finalize().unwrap();
        }
        "sender" => {
            let node = Node::initialize(0, 1, config).expect("initialize");
            let ep = node.endpoint_create(1).unwrap();
            let to = node
                .endpoint_get(0, 0, 1, Some(Duration::from_secs(60)))
                .unwrap();
            let mut msg = [0u8; 64];
            for i in 0..MESSAGES {
                msg[..4].copy_from_slice(&i.to_le_bytes());
                node.msg_send(ep, to, &msg[..4 + (i as usize % 50)], i % 2)
                    .unwrap();
            }
            node.msg_send(ep, to, &pattern(mcapi::MAX_MSG_SIZE, 5), 1)
                .unwrap();
            node.msg_send(ep, to, b"end", 1).unwrap();
            node.finalize().unwrap();
        }
        "chan-receiver" => chan_receiver(config),
        "chan-sender" => chan_sender(config),
        other => panic!("unknown role {other}"),
    }
}

fn pattern(n: usize, salt: usize) -> Vec<u8> {
    (0..n).map(|k| (k * 31 + salt) as u8).collect()
}

fn scalar(i: u64, width: usize) -> u64 {
    let v = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    if width == 8 {
        v
    } else {
        v & ((1 << (8 * width)) - 1)
    }
}

/// Channel node 0 (host a): receives both channels. It connects the packet channel itself
/// (the receiving host, not the sender, connects); the sender connects the scalar one.
fn chan_receiver(mut config: Config) {
    // 16 buffers of the 4 MiB maximum payload (+ 8 KiB) keep the pool at 64 MiB.
    config.recv_buffers = 16;
    let node = Node::initialize(0, 0, config).expect("initialize");
    assert!(node.provider().starts_with("tcp"));
    let rx = node.endpoint_create(2).unwrap();
    node.endpoint_set_attribute(rx, ATTR_MAX_PAYLOAD, MAX_PKT_SIZE as u64)
        .unwrap();
    node.set_endpoint_timeout(rx, WAIT).unwrap();
    let srx = node.endpoint_create(4).unwrap();
    node.set_endpoint_timeout(srx, WAIT).unwrap();
    // The sender creates port 3 only after port 1's attributes are final: connecting then
    // cannot freeze them half set.
    node.endpoint_get(0, 1, 3, WAIT).unwrap();
    let tx = node.endpoint_get(0, 1, 1, WAIT).unwrap();
    let c = node.pktchan_connect_i(tx, rx).unwrap();
    node.wait(c, None, WAIT).unwrap();
    let (hr, qr) = node.pktchan_recv_open_i(rx).unwrap();
    let (sr, qsr) = node.sclchan_recv_open_i(srx).unwrap();
    node.wait(qr, None, WAIT).unwrap();
    node.wait(qsr, None, WAIT).unwrap();
    let pool = node.pktchan_receive_memory(hr).unwrap();
    let mut k = 0;
    for _ in 0..ROUNDS {
        for &size in &SIZES {
            let pkt = node.pktchan_recv(hr).unwrap();
            assert_eq!(pkt.len(), size, "packet {k}: its size, in order");
            assert!(
                pkt.to_vec() == pattern(size, k),
                "packet {k} of {size} B damaged"
            );
            assert!(
                pool.contains(&pkt.addr()),
                "packet {k} is not inside the registered pool"
            );
            node.pktchan_release(pkt).unwrap();
            k += 1;
        }
    }
    let mut b = [0u8; 8];
    for i in 0..STREAM {
        let pkt = node.pktchan_recv(hr).unwrap();
        assert_eq!(pkt.len(), 8);
        pkt.copy_to(&mut b);
        assert_eq!(
            u64::from_le_bytes(b),
            i,
            "stream packet lost or out of order"
        );
        node.pktchan_release(pkt).unwrap();
    }
    for width in [1, 2, 4, 8] {
        for i in 0..STREAM {
            let v = node.sclchan_recv(sr, width).unwrap();
            assert_eq!(v, scalar(i, width), "scalar {i} of width {width}");
        }
    }
    let q = node.pktchan_recv_close_i(hr).unwrap();
    node.wait(q, None, WAIT).unwrap();
    let q = node.sclchan_recv_close_i(sr).unwrap();
    node.wait(q, None, WAIT).unwrap();
    // Both sides closed: the endpoints are unconnected again.
    assert_eq!(node.endpoint_get_attribute(rx, ATTR_STATUS).unwrap(), 0);
    assert_eq!(node.endpoint_get_attribute(srx, ATTR_STATUS).unwrap(), 0);
    node.finalize().unwrap();
}

/// Channel node 1 (host b): sends on both channels and connects the scalar one.
fn chan_sender(config: Config) {
    let node = Node::initialize(0, 1, config).expect("initialize");
    let tx = node.endpoint_create(1).unwrap();
    node.endpoint_set_attribute(tx, ATTR_MAX_PAYLOAD, MAX_PKT_SIZE as u64)
        .unwrap();
    node.set_endpoint_timeout(tx, WAIT).unwrap();
    let stx = node.endpoint_create(3).unwrap();
    node.set_endpoint_timeout(stx, WAIT).unwrap();
    let srx = node.endpoint_get(0, 0, 4, WAIT).unwrap();
    let c = node.sclchan_connect_i(stx, srx).unwrap();
    node.wait(c, None, WAIT).unwrap();
    let (hs, qs) = node.pktchan_send_open_i(tx).unwrap();
    let (ss, qss) = node.sclchan_send_open_i(stx).unwrap();
    node.wait(qs, None, WAIT).unwrap();
    node.wait(qss, None, WAIT).unwrap();
    let mut k = 0;
    for _ in 0..ROUNDS {
        for &size in &SIZES {
            node.pktchan_send(hs, &pattern(size, k)).unwrap();
            k += 1;
        }
    }
    for i in 0..STREAM {
        node.pktchan_send(hs, &i.to_le_bytes()).unwrap();
    }
    for width in [1, 2, 4, 8] {
        for i in 0..STREAM {
            node.sclchan_send(ss, scalar(i, width), width).unwrap();
        }
    }
    let q = node.pktchan_send_close_i(hs).unwrap();
    node.wait(q, None, WAIT).unwrap();
    let q = node.sclchan_send_close_i(ss).unwrap();
    node.wait(q, None, WAIT).unwrap();
    assert_eq!(node.endpoint_get_attribute(tx, ATTR_STATUS).unwrap(), 0);
    assert_eq!(node.endpoint_get_attribute(stx, ATTR_STATUS).unwrap(), 0);
    node.finalize().unwrap();
}
