//! Two hosts for real: two network namespaces joined by a veth pair, each running an MCAPI
//! node in its own mount namespace (private /tmp and /dev/shm, so nothing passes through
//! shared files), talking over tcp through an `MCAPI_TOPOLOGY` file. Addresses come from
//! the documentation range 198.51.100.0/24. Skipped, with the reason printed, without
//! CAP_NET_ADMIN.

use libtest_mimic::{Arguments, Failed, Trial};
use mcapi::config::Config;
use mcapi::Node;
use std::process::Command;
use std::time::Duration;

const MESSAGES: u32 = 2000;
const NS: [&str; 2] = ["mcapi-host-a", "mcapi-host-b"];
const ADDR: [&str; 2] = ["198.51.100.1", "198.51.100.2"];

fn main() {
    if let Ok(role) = std::env::var("MCAPI_TWO_HOSTS_ROLE") {
        child(&role);
        return;
    }
    let mut args = Arguments::from_args();
    args.test_threads = Some(1);
    let trial = Trial::test("tcp_between_two_network_namespaces", two_hosts);
    let trial = match setup_reason() {
        None => trial,
        Some(why) => {
            eprintln!("skipping two_hosts: {why}");
            trial.with_ignored_flag(true)
        }
    };
    libtest_mimic::run(&args, vec![trial]).exit();
}

fn sh(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args[0]))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
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

fn two_hosts() -> Result<(), Failed> {
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
            .spawn()
    };
    let mut receiver = spawn(0, "receiver")?;
    let mut sender = spawn(1, "sender")?;
    let (r, s) = (receiver.wait()?, sender.wait()?);
    if !r.success() || !s.success() {
        return Err(format!("receiver {r}, sender {s}").into());
    }
    Ok(())
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
            node.finalize().unwrap();
        }
        other => panic!("unknown role {other}"),
    }
}
