//! Launched for real: `mpirun -n 4` on this test's own binary, no topology file. Under
//! mpirun (`PMIX_RANK` set) the binary is a rank: node id = rank, every pair of ranks
//! exchanges messages, and rank 0 opens a packet channel to rank 1. On one host over tcp
//! and shm, then on two "hosts": two network namespaces joined by a veth pair, mpirun in
//! one starting its daemon in the other through an rsh agent that is `ip netns exec`.
//! Without mpirun (or a build without PMIx, or CAP_NET_ADMIN for the two hosts) the test
//! says why it did not run.

use mcapi::config::{Bootstrap, Config};
use mcapi::Node;
use std::process::Command;
use std::time::{Duration, Instant};

const RANKS: u32 = 4;
const WAIT: Option<Duration> = Some(Duration::from_secs(30));
const MSG_PORT: u32 = 1;

fn main() {
    if std::env::var_os("PMIX_RANK").is_some() {
        if let Err(e) = rank_main() {
            eprintln!("rank {:?}: {e}", mcapi::launcher::rank());
            std::process::exit(1);
        }
        return;
    }
    if !mcapi::launcher::built_with_pmix() {
        println!("launcher: skipped: this build has no PMIx (libpmix-dev, pkg-config)");
        return;
    }
    let Ok(mpirun) = which("mpirun") else {
        println!("launcher: skipped: no mpirun on PATH (apt-get install openmpi-bin)");
        return;
    };
    let me = std::env::current_exe().expect("own path");
    let (mut passed, mut failed) = (0, 0);
    let mut report = |run: &str, status: Option<std::process::ExitStatus>, t0: Instant| match status
    {
        Some(s) if s.success() => {
            passed += 1;
            println!(
                "launcher {run}: mpirun -n {RANKS}: ok ({:.1}s)",
                t0.elapsed().as_secs_f64()
            )
        }
        other => {
            println!("launcher {run}: FAILED: {other:?}");
            failed += 1;
        }
    };
    // The key from rank 0 through PMIx, and (last run) given to every rank with -x.
    for (provider, key) in [
        ("tcp", None),
        ("shm", None),
        ("tcp", Some("launcher-test-key-0123456789")),
    ] {
        let run = format!(
            "{provider}{}",
            if key.is_some() {
                ", -x MCAPI_JOB_KEY"
            } else {
                ""
            }
        );
        if mcapi_ofi::Info::first(&mcapi_ofi::Hints::new().provider(provider)).is_err() {
            println!("launcher {provider}: not run (libfabric offers no {provider})");
            continue;
        }
        let t0 = Instant::now();
        let mut cmd = Command::new(&mpirun);
        cmd.env_remove("MCAPI_JOB_KEY");
        cmd.args([
            "-n",
            &RANKS.to_string(),
            "--oversubscribe",
            "--allow-run-as-root",
        ])
        .args(["-x", "MCAPI_PROVIDER"]);
        if std::env::var_os("MCAPI_LOG").is_some() {
            cmd.args(["-x", "MCAPI_LOG"]);
        }
        if let Some(key) = key {
            cmd.args(["-x", "MCAPI_JOB_KEY"]).env("MCAPI_JOB_KEY", key);
        }
        let mut child = cmd
            .arg(&me)
            .env("MCAPI_PROVIDER", provider)
            // No topology, no key, no job directory: everything comes through PMIx.
            .env_remove("MCAPI_TOPOLOGY")
            .env_remove("MCAPI_JOB_KEY_FILE")
            .spawn()
            .expect("spawn mpirun");
        report(&run, wait_bounded(&mut child), t0);
    }
    match TwoHosts::new() {
        Ok(hosts) => {
            let t0 = Instant::now();
            let mut child = hosts.mpirun(&mpirun, &me).spawn().expect("spawn mpirun");
            report("two hosts (tcp)", wait_bounded(&mut child), t0);
        }
        Err(why) => println!("launcher two hosts: skipped: {why}"),
    }
    println!("\nlauncher: {passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}

/// Waits for `child` (an mpirun) for at most two minutes; `None`: killed at the limit.
fn wait_bounded(child: &mut std::process::Child) -> Option<std::process::ExitStatus> {
    let t0 = Instant::now();
    loop {
        if let Some(s) = child.try_wait().expect("wait mpirun") {
            return Some(s);
        }
        if t0.elapsed() > Duration::from_secs(120) {
            // Only the mpirun this test started; mpirun takes its ranks down with it.
            _ = child.kill();
            _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Two network namespaces joined by a veth pair, removed on drop; "host" A is where mpirun
/// runs, B is reached by the rsh agent script.
struct TwoHosts {
    ns: [String; 2],
    agent: std::path::PathBuf,
}

const HOST_ADDR: [&str; 2] = ["198.51.100.11", "198.51.100.12"];

impl TwoHosts {
    fn new() -> Result<TwoHosts, String> {
        let id = std::process::id();
        let ns = [format!("mcapi-pmix-a{id}"), format!("mcapi-pmix-b{id}")];
        sh(&["ip", "netns", "add", &ns[0]])
            .map_err(|e| format!("cannot create network namespaces (needs CAP_NET_ADMIN): {e}"))?;
        let hosts = TwoHosts {
            agent: std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("pmix-agent-{id}.sh")),
            ns,
        };
        let (veth_a, veth_b) = (format!("mpa{id}"), format!("mpb{id}"));
        sh(&["ip", "netns", "add", &hosts.ns[1]])?;
        sh(&[
            "ip", "link", "add", &veth_a, "type", "veth", "peer", "name", &veth_b,
        ])?;
        for (i, veth) in [&veth_a, &veth_b].into_iter().enumerate() {
            let ns = &hosts.ns[i];
            sh(&["ip", "link", "set", veth, "netns", ns])?;
            let addr = format!("{}/24", HOST_ADDR[i]);
            sh(&["ip", "-n", ns, "addr", "add", &addr, "dev", veth])?;
            sh(&["ip", "-n", ns, "link", "set", veth, "up"])?;
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
        }
        // mpirun runs `agent <host> <command line>` to start its daemon on another host.
        let script = format!(
            "#!/bin/sh\nshift\nexec ip netns exec {} sh -c \"$*\"\n",
            hosts.ns[1]
        );
        std::fs::write(&hosts.agent, script).map_err(|e| e.to_string())?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&hosts.agent, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| e.to_string())?;
        Ok(hosts)
    }

    /// mpirun in host A, two ranks per host, its own traffic on the veth pair.
    fn mpirun(&self, mpirun: &std::path::Path, exe: &std::path::Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns[0]])
            .arg(mpirun)
            .args([
                "-n",
                &RANKS.to_string(),
                "--oversubscribe",
                "--allow-run-as-root",
            ])
            .args(["--mca", "plm_rsh_agent"])
            .arg(&self.agent)
            .args(["--mca", "oob_tcp_if_include", "198.51.100.0/24"])
            .arg("--host")
            .arg(format!("{}:2,{}:2", HOST_ADDR[0], HOST_ADDR[1]))
            .arg(exe)
            .env_remove("MCAPI_PROVIDER")
            .env_remove("MCAPI_TOPOLOGY")
            .env_remove("MCAPI_JOB_KEY")
            .env_remove("MCAPI_JOB_KEY_FILE");
        cmd
    }
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        // Cleanup only: the veth pair goes with its namespaces.
        for ns in &self.ns {
            _ = sh(&["ip", "netns", "del", ns]);
        }
        _ = std::fs::remove_file(&self.agent);
    }
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

fn which(cmd: &str) -> Result<std::path::PathBuf, ()> {
    std::env::split_paths(&std::env::var_os("PATH").ok_or(())?)
        .map(|d| d.join(cmd))
        .find(|p| p.is_file())
        .ok_or(())
}

fn rank_main() -> Result<(), Box<dyn std::error::Error>> {
    let cfg = Config::from_env()?;
    if cfg.bootstrap != Bootstrap::Pmix {
        return Err(format!("bootstrap {:?} under mpirun", cfg.bootstrap).into());
    }
    let me = mcapi::launcher::rank().ok_or("no rank")?;
    let n = mcapi::launcher::size().ok_or("no size")?;
    assert_eq!(n, RANKS);
    // The C extensions agree.
    let mut status = u32::MAX;
    // SAFETY: `status` is a writable mcapi_status_t.
    let c_rank = unsafe { mcapi::capi::mcapi_ext_launcher_rank(&mut status) };
    assert_eq!((c_rank, status), (me, mcapi::Status::MCAPI_SUCCESS.code()));
    // SAFETY: NULL status is allowed.
    let c_size = unsafe { mcapi::capi::mcapi_ext_launcher_size(std::ptr::null_mut()) };
    assert_eq!(c_size, n);
    let node = Node::initialize(0, me, cfg)?;
    // Two rounds, each on its own endpoint (messages of different senders are not
    // ordered): data, then "received all", so no rank finalizes before every rank has
    // everything of round 0.
    let rounds = [
        node.endpoint_create(MSG_PORT)?,
        node.endpoint_create(MSG_PORT + 1)?,
    ];
    let rx = rounds[0];
    let peers: Vec<u32> = (0..n).filter(|&r| r != me).collect();
    for (round, rx) in (0u8..).zip(rounds) {
        for &r in &peers {
            let dest = node.endpoint_get(0, r, MSG_PORT + u32::from(round), WAIT)?;
            node.msg_send(rx, dest, &[round, me as u8], 0)?;
        }
        let mut from = Vec::new();
        let mut buf = [0u8; 16];
        for _ in &peers {
            let len = node.msg_recv(rx, &mut buf)?;
            if len != 2 || buf[0] != round {
                return Err(format!("round {round}: got {:?}", &buf[..len]).into());
            }
            from.push(u32::from(buf[1]));
        }
        from.sort_unstable();
        if from != peers {
            return Err(format!("round {round}: heard from {from:?}, expected {peers:?}").into());
        }
    }
    // A packet channel from rank 0 to rank 1.
    match me {
        0 => {
            let tx = node.endpoint_create(10)?;
            let remote = node.endpoint_get(0, 1, 11, WAIT)?;
            let c = node.pktchan_connect_i(tx, remote)?;
            node.wait(c, None, WAIT)?;
            let (h, open) = node.pktchan_send_open_i(tx)?;
            node.wait(open, None, WAIT)?;
            for i in 0..100u32 {
                node.pktchan_send(h, &i.to_le_bytes())?;
            }
            let close = node.pktchan_send_close_i(h)?;
            node.wait(close, None, WAIT)?;
            // Rank 1 says it has every packet before this node goes.
            let mut buf = [0u8; 16];
            node.msg_recv(rx, &mut buf)?;
        }
        1 => {
            let ep = node.endpoint_create(11)?;
            let (h, open) = node.pktchan_recv_open_i(ep)?;
            node.wait(open, None, WAIT)?;
            for i in 0..100u32 {
                let p = node.pktchan_recv(h)?;
                if p.to_vec() != i.to_le_bytes() {
                    return Err(format!("packet {i}: {:?}", p.to_vec()).into());
                }
                node.pktchan_release(p)?;
            }
            let close = node.pktchan_recv_close_i(h)?;
            node.wait(close, None, WAIT)?;
            // Node 0 is live in rank 0 (it waits for our "done"): its id is taken.
            match Node::initialize(0, 0, Config::from_env()?) {
                Err(mcapi::Status::MCAPI_ERR_NODE_INITFAILED) => {}
                other => return Err(format!("a second node 0: {:?}", other.err()).into()),
            }
            let zero = node.endpoint_get(0, 0, MSG_PORT, WAIT)?;
            node.msg_send(rx, zero, b"done", 0)?;
        }
        _ => {}
    }
    node.finalize()?;
    println!("rank {me}: ok");
    Ok(())
}
