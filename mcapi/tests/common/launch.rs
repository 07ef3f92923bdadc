//! Launching for real, shared by the launcher tests of mcapi (`tests/launcher.rs`, and
//! `tests/two_hosts.rs` for `sh` and `required`) and
//! perftest (`perftest/tests/launcher.rs`, and `smoke.rs` for `required`, which include this
//! file by path): finding
//! mpirun, waiting for it with a bound, and two "hosts" made of network namespaces.
//! Only std: each test crate compiles its own copy.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// The flags every test mpirun gets (more ranks than cores; root in containers).
pub const MPIRUN_FLAGS: &[&str] = &["--oversubscribe", "--allow-run-as-root"];

/// The `MCAPI_*` variables that would change how the ranks meet: the tests run without a
/// topology, key or provider of the caller's.
pub const CLEARED: &[&str] = &[
    "MCAPI_TOPOLOGY",
    "MCAPI_JOB_KEY",
    "MCAPI_JOB_KEY_FILE",
    "MCAPI_PROVIDER",
    "MCAPI_BOOTSTRAP",
];

/// Set by the test command (`scripts/test`): a test that needs a tool or capability this
/// machine lacks fails instead of skipping, so CI never passes having tested nothing.
pub const REQUIRE_ALL: &str = "MCAPI_TEST_REQUIRE_ALL";

/// Whether [`REQUIRE_ALL`] is set.
pub fn required() -> bool {
    std::env::var_os(REQUIRE_ALL).is_some_and(|v| !v.is_empty() && v != "0")
}

/// `what` cannot run here for `why`: said, and the process exits (with 1 if every test is
/// required, else 0: skipped).
pub fn skip(what: &str, why: &str) -> ! {
    if required() {
        println!("{what}: FAILED: {why} ({REQUIRE_ALL} is set: nothing may be skipped)");
        std::process::exit(1);
    }
    println!("{what}: skipped: {why}");
    std::process::exit(0);
}

/// `cmd` on PATH.
pub fn which(cmd: &str) -> Result<PathBuf, ()> {
    std::env::split_paths(&std::env::var_os("PATH").ok_or(())?)
        .map(|d| d.join(cmd))
        .find(|p| p.is_file())
        .ok_or(())
}

/// Waits for `child` (an mpirun) for at most two minutes; `None`: killed at the limit.
pub fn wait_bounded(child: &mut Child) -> Option<ExitStatus> {
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

/// What a bounded run printed.
pub struct Captured {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` (an mpirun) with its standard output and error captured, bounded as
/// [`wait_bounded`]. `None`: killed at the limit.
pub fn output_bounded(cmd: &mut Command) -> Option<Captured> {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mpirun");
    // Read while it runs, so that a full pipe cannot stall it.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("piped stdout")));
    let err = drain(Box::new(child.stderr.take().expect("piped stderr")));
    let status = wait_bounded(&mut child);
    let (stdout, stderr) = (
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    );
    status.map(|status| Captured {
        status,
        stdout,
        stderr,
    })
}

/// Two network namespaces joined by a veth pair, removed on drop; "host" A is where mpirun
/// runs, B is reached by the rsh agent script.
pub struct TwoHosts {
    ns: [String; 2],
    agent: PathBuf,
}

/// Why [`TwoHosts::new`] made no hosts.
#[derive(Debug)]
pub enum NoHosts {
    /// This machine cannot make network namespaces: a reason to skip.
    Unsupported(String),
    /// It can, and setting them up failed: a failure.
    Broken(String),
}

impl From<String> for NoHosts {
    fn from(why: String) -> NoHosts {
        NoHosts::Broken(why)
    }
}

/// The veth addresses of hosts A and B.
pub const HOST_ADDR: [&str; 2] = ["198.51.100.11", "198.51.100.12"];

impl TwoHosts {
    /// Creates the namespaces; `scratch` holds the agent script.
    ///
    /// # Errors
    /// [`NoHosts::Unsupported`]: no namespace can be made here (no CAP_NET_ADMIN, no `ip`),
    /// a reason to skip; [`NoHosts::Broken`]: one could, and a later step failed.
    pub fn new(scratch: &Path) -> Result<TwoHosts, NoHosts> {
        let id = std::process::id();
        let ns = [format!("mcapi-pmix-a{id}"), format!("mcapi-pmix-b{id}")];
        sh(&["ip", "netns", "add", &ns[0]]).map_err(|e| {
            NoHosts::Unsupported(format!(
                "cannot create network namespaces (needs CAP_NET_ADMIN and iproute2): {e}"
            ))
        })?;
        let hosts = TwoHosts {
            agent: scratch.join(format!("pmix-agent-{id}.sh")),
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
        std::fs::write(&hosts.agent, script).map_err(|e| NoHosts::Broken(e.to_string()))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&hosts.agent, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| NoHosts::Broken(e.to_string()))?;
        Ok(hosts)
    }

    /// `program` run in host `host` (0: A, 1: B).
    pub fn on(&self, host: usize, program: &Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns[host]]).arg(program);
        for v in CLEARED {
            cmd.env_remove(v);
        }
        cmd
    }

    /// mpirun in host A with `per_host` ranks on each host, its own traffic on the veth
    /// pair, none of [`CLEARED`] set; the caller adds `-x` options, the program and its
    /// arguments.
    pub fn mpirun(&self, mpirun: &Path, per_host: u32) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns[0]])
            .arg(mpirun)
            .args(["-n", &(2 * per_host).to_string()])
            .args(MPIRUN_FLAGS)
            .args(["--mca", "plm_rsh_agent"])
            .arg(&self.agent)
            .args(["--mca", "oob_tcp_if_include", "198.51.100.0/24"])
            .arg("--host")
            .arg(format!(
                "{}:{per_host},{}:{per_host}",
                HOST_ADDR[0], HOST_ADDR[1]
            ));
        for v in CLEARED {
            cmd.env_remove(v);
        }
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

/// Runs a command; its standard error is the error if it fails.
pub fn sh(args: &[&str]) -> Result<(), String> {
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
