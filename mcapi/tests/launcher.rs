//! Launched for real: `mpirun -n 4` on this test's own binary, no topology file. Under
//! mpirun (`PMIX_RANK` set) the binary is a rank: node id = rank, every pair of ranks
//! exchanges messages, and rank 0 opens a packet channel to rank 1. On one host over tcp
//! and shm, then on two "hosts": two network namespaces joined by a veth pair, mpirun in
//! one starting its daemon in the other through an rsh agent that is `ip netns exec`.
//! The example job `examples/halo.c` (built here against this build's libmcapi) runs the
//! same ways: over shm and tcp on one host, over tcp on the two hosts. Without mpirun (or a
//! build without PMIx, or CAP_NET_ADMIN for the two hosts, or cc for the example) the test
//! says why it did not run.

#[path = "common/launch.rs"]
mod launch;

use launch::{
    output_bounded, required, skip, wait_bounded, which, NoHosts, TwoHosts, MPIRUN_FLAGS,
};
use mcapi::config::{Bootstrap, Config};
use mcapi::Node;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

const RANKS: u32 = 4;
const WAIT: Option<Duration> = Some(Duration::from_secs(30));
const MSG_PORT: u32 = 1;
const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");

/// Runs that passed and failed, each reported as it ends.
#[derive(Default)]
struct Tally {
    passed: u32,
    failed: u32,
}

impl Tally {
    fn report(&mut self, run: &str, result: Result<(), String>, t0: Instant) {
        match result {
            Ok(()) => {
                self.passed += 1;
                println!("launcher {run}: ok ({:.1}s)", t0.elapsed().as_secs_f64());
            }
            Err(why) => {
                self.failed += 1;
                println!("launcher {run}: FAILED: {why}");
            }
        }
    }

    /// `run` needs `provider`, which libfabric does not offer here.
    fn not_offered(&mut self, run: &str, provider: &str) {
        let why = format!("libfabric offers no {provider}");
        if required() {
            self.report(run, Err(why), Instant::now());
        } else {
            println!("launcher {run}: not run ({why})");
        }
    }
}

fn succeeded(status: Option<ExitStatus>) -> Result<(), String> {
    match status {
        Some(s) if s.success() => Ok(()),
        Some(s) => Err(format!("mpirun: {s}")),
        None => Err("mpirun did not finish within 120 s (killed)".into()),
    }
}

fn main() {
    if std::env::var_os("PMIX_RANK").is_some() {
        if let Err(e) = rank_main() {
            eprintln!("rank {:?}: {e}", mcapi::launcher::rank());
            std::process::exit(1);
        }
        return;
    }
    if !mcapi::launcher::built_with_pmix() {
        skip(
            "launcher",
            "this build has no PMIx (libpmix-dev, pkg-config)",
        );
    }
    let Ok(mpirun) = which("mpirun") else {
        skip(
            "launcher",
            "no mpirun on PATH (apt-get install openmpi-bin)",
        );
    };
    let me = std::env::current_exe().expect("own path");
    let mut tally = Tally::default();
    let offered = |p: &str| mcapi_ofi::Info::first(&mcapi_ofi::Hints::new().provider(p)).is_ok();
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
        if !offered(provider) {
            tally.not_offered(provider, provider);
            continue;
        }
        let t0 = Instant::now();
        let mut cmd = one_host(&mpirun, provider);
        if let Some(key) = key {
            cmd.args(["-x", "MCAPI_JOB_KEY"]).env("MCAPI_JOB_KEY", key);
        }
        let mut child = cmd.arg(&me).spawn().expect("spawn mpirun");
        tally.report(
            &format!("{run}: mpirun -n {RANKS}"),
            succeeded(wait_bounded(&mut child)),
            t0,
        );
    }
    // The example job of examples/, built against this build's libmcapi.
    let halo = build_halo();
    match &halo {
        Ok(halo) => {
            for provider in ["shm", "tcp"] {
                if !offered(provider) {
                    tally.not_offered(&format!("halo {provider}"), provider);
                    continue;
                }
                let t0 = Instant::now();
                let result = halo_result(one_host(&mpirun, provider).arg(halo), provider);
                tally.report(&format!("halo {provider}: mpirun -n {RANKS}"), result, t0);
            }
        }
        Err(NoHalo::NoTool(why)) if !required() => println!("launcher halo: skipped: {why}"),
        Err(NoHalo::NoTool(why) | NoHalo::Failed(why)) => {
            tally.report("halo: built", Err(why.clone()), Instant::now());
        }
    }
    match TwoHosts::new(Path::new(env!("CARGO_TARGET_TMPDIR"))) {
        Ok(hosts) => {
            let t0 = Instant::now();
            let mut child = hosts
                .mpirun(&mpirun, RANKS / 2)
                .arg(&me)
                .spawn()
                .expect("spawn mpirun");
            tally.report(
                &format!("two hosts (tcp): mpirun -n {RANKS}"),
                succeeded(wait_bounded(&mut child)),
                t0,
            );
            if let Ok(halo) = &halo {
                let t0 = Instant::now();
                let mut cmd = hosts.mpirun(&mpirun, RANKS / 2);
                cmd.args(["-x", "MCAPI_PROVIDER"])
                    .env("MCAPI_PROVIDER", "tcp")
                    .arg(halo);
                tally.report(
                    &format!("halo on two hosts (tcp): mpirun -n {RANKS}"),
                    halo_result(&mut cmd, "tcp"),
                    t0,
                );
            }
        }
        Err(NoHosts::Unsupported(why)) if !required() => {
            println!("launcher two hosts: skipped: {why}");
        }
        Err(NoHosts::Unsupported(why) | NoHosts::Broken(why)) => {
            tally.report("two hosts: set up", Err(why), Instant::now());
        }
    }
    println!(
        "\nlauncher: {} passed, {} failed",
        tally.passed, tally.failed
    );
    if tally.failed > 0 {
        std::process::exit(1);
    }
}

/// `mpirun -n RANKS` on this host over `provider`, with no topology, key or job directory
/// of the caller's: everything comes through PMIx. The caller adds the program.
fn one_host(mpirun: &Path, provider: &str) -> Command {
    let mut cmd = Command::new(mpirun);
    cmd.args(["-n", &RANKS.to_string()])
        .args(MPIRUN_FLAGS)
        .args(["-x", "MCAPI_PROVIDER"]);
    for v in launch::CLEARED {
        cmd.env_remove(v);
    }
    if std::env::var_os("MCAPI_LOG").is_some() {
        cmd.args(["-x", "MCAPI_LOG"]);
    }
    cmd.env("MCAPI_PROVIDER", provider);
    cmd
}

/// Runs the halo example (`cmd`: mpirun with it, over `provider`) and checks rank 0's line.
fn halo_result(cmd: &mut Command, provider: &str) -> Result<(), String> {
    let run = output_bounded(cmd).ok_or("mpirun did not finish within 120 s (killed)")?;
    let out = run.stdout;
    succeeded(Some(run.status)).map_err(|e| format!("{e}; output:\n{out}{}", run.stderr))?;
    let want = format!("halo: {RANKS} ranks x 16 cells, 100 iterations over {provider}: ");
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("halo")).collect();
    match lines[..] {
        [line] if line.starts_with(&want) && line.ends_with(": ok") => {
            println!("  {line}");
            Ok(())
        }
        _ => Err(format!(
            "expected one 'halo: ... ok' line from rank 0, got:\n{out}"
        )),
    }
}

/// Builds `examples/halo.c` the way its Makefile does (`cc $(pkg-config --cflags --libs
/// mcapi)`), against libmcapi of this test build installed into a private prefix with
/// `scripts/install`.
fn build_halo() -> Result<PathBuf, NoHalo> {
    for tool in ["cc", "pkg-config", "nm"] {
        which(tool)
            .map_err(|()| NoHalo::NoTool(format!("no {tool} on PATH to build examples/halo.c")))?;
    }
    build_halo_with_tools().map_err(NoHalo::Failed)
}

/// Why the example was not built.
enum NoHalo {
    /// A tool it needs is missing here: a reason to skip.
    NoTool(String),
    /// Installing the library or compiling the example failed: a failure.
    Failed(String),
}

/// [`build_halo`] once its tools are known to be there.
fn build_halo_with_tools() -> Result<PathBuf, String> {
    // target/<profile>/deps: where this build put libmcapi.so and libmcapi.a.
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let lib = exe.parent().ok_or("no directory")?.to_path_buf();
    let work = lib.join("..").join("launcher");
    let prefix = work.join("prefix");
    _ = std::fs::remove_dir_all(&prefix);
    std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    let run = |cmd: &mut Command| -> Result<String, String> {
        let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{cmd:?} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    run(
        Command::new(Path::new(MANIFEST_DIR).join("../scripts/install"))
            .arg(&prefix)
            .env("MCAPI_LIB_DIR", &lib),
    )?;
    let flags = run(Command::new("pkg-config")
        .args(["--cflags", "--libs", "mcapi"])
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig")))?;
    let halo = work.join("halo");
    run(Command::new("cc")
        .args([
            "-O2",
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-pedantic",
            "-Werror",
        ])
        .arg(Path::new(MANIFEST_DIR).join("../examples/halo.c"))
        .arg("-o")
        .arg(&halo)
        .args(flags.split_whitespace())
        .arg(format!("-Wl,-rpath,{}", prefix.join("lib").display())))?;
    Ok(halo)
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
    // The application's key-value helpers: rank 0 publishes, every rank finds it.
    if me == 0 {
        mcapi::launcher::publish("launcher-test", "from rank 0")?;
    }
    let value = mcapi::launcher::lookup("launcher-test", WAIT)?;
    assert_eq!(value.as_deref(), Some("from rank 0"));
    let never = mcapi::launcher::lookup("never-published", Some(Duration::from_millis(20)))?;
    assert_eq!(never, None);
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
