//! Jobs started by a launcher (Open MPI's `mpirun`, `srun --mpi=pmix`): the process's rank,
//! and the PMIx bootstrap through which nodes find each other without a topology file
//! (docs/launchers.md).
//!
//! Each node publishes its control address under a key naming the launcher's namespace,
//! the MCAPI job and `<domain, node>`; a peer is found by looking that key up, polled until
//! the caller's deadline. MCAPI's initialize is not collective and node ids are the
//! application's, so nothing here waits for all ranks (no PMIx fence).
//!
//! Applications may use the same directory for their own values: [`publish`] and
//! [`lookup`] (with a timeout) store strings under keys private to the launch, and
//! [`host_address`] says which address of this host the other ranks reach.
//!
//! Without PMIx support in the build (the `pmix` feature off, or no PMIx found when
//! pmix-sys was built) [`rank`] and [`size`] return `None` and `MCAPI_BOOTSTRAP=pmix` is
//! refused.

use crate::config::{Config, JobKey};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a rank waits at initialize for rank 0 to publish the job key.
pub const KEY_WAIT: Duration = Duration::from_secs(60);

/// Whether this build can bootstrap through PMIx.
pub fn built_with_pmix() -> bool {
    cfg!(feature = "pmix") && pmix_sys::AVAILABLE
}

/// The process's PMIx client, when the process runs under a PMIx launcher.
fn client() -> Result<&'static pmix_sys::Client, String> {
    if !built_with_pmix() {
        return Err("this build has no PMIx support".into());
    }
    pmix_sys::Client::process().map_err(|e| format!("PMIx: {e}"))
}

fn under_launcher() -> bool {
    built_with_pmix() && pmix_sys::launched_under_pmix()
}

/// This process's rank in its launcher's job (`None`: not started by a PMIx launcher, or
/// no PMIx in this build). The first call connects to the launcher's PMIx server.
pub fn rank() -> Option<u32> {
    under_launcher()
        .then(client)
        .and_then(Result::ok)
        .map(|c| c.rank())
}

/// The number of processes in the launcher's job (`None` as for [`rank`]).
pub fn size() -> Option<u32> {
    under_launcher()
        .then(client)
        .and_then(Result::ok)
        .and_then(|c| c.job_size().ok())
}

/// A failure of the launcher's key-value directory ([`publish`], [`lookup`], [`unpublish`],
/// [`host_address`]): not started by a PMIx launcher, no PMIx in this build, or the
/// launcher's answer, as text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LauncherError(pub String);

impl std::fmt::Display for LauncherError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LauncherError {}

/// The launcher's client, for the application-level directory: only under a launcher.
fn app_client() -> Result<&'static pmix_sys::Client, LauncherError> {
    if !built_with_pmix() {
        return Err(LauncherError("this build has no PMIx support".into()));
    }
    if !pmix_sys::launched_under_pmix() {
        return Err(LauncherError(
            "not started by a PMIx launcher (mpirun, srun --mpi=pmix): no PMIX_* variables".into(),
        ));
    }
    client().map_err(LauncherError)
}

/// The name under which the application's `key` is stored: in this launch's namespace, and
/// apart from the keys MCAPI publishes for its nodes and job keys.
fn app_key(c: &pmix_sys::Client, key: &str) -> String {
    format!("mcapi:{}:app:{key}", c.namespace())
}

/// Publishes `value` under `key` in the launcher's directory, for the other ranks of this
/// launch to [`lookup`] (a small key-value helper on the same PMIx publish/lookup that the
/// nodes' bootstrap uses). Keys are private to the launch (the launcher's namespace is
/// part of the stored name) and apart from MCAPI's own. Publishing a key again does not
/// fail (PMIx keeps one of the values): publish each key from one rank.
///
/// `perftest` under `mpirun` publishes its server's out-of-band address this way.
///
/// # Errors
/// Not under a PMIx launcher, no PMIx in this build, or the launcher refused (a key or
/// value PMIx cannot carry, such as one with a NUL byte).
pub fn publish(key: &str, value: &str) -> Result<(), LauncherError> {
    let c = app_client()?;
    c.publish(&app_key(c, key), value)
        .map_err(|e| LauncherError(format!("publishing {key}: {e}")))
}

/// The value another rank [`publish`]ed under `key`, waiting for up to `timeout` (`None`:
/// for as long as it takes) for it to appear; `Ok(None)` when it did not appear in time.
/// The wait polls the launcher (1 ms doubling to 50 ms between lookups), so nothing stays
/// pending in the launcher after the call.
///
/// # Errors
/// As [`publish`].
pub fn lookup(key: &str, timeout: Option<Duration>) -> Result<Option<String>, LauncherError> {
    let c = app_client()?;
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    c.lookup(&app_key(c, key), deadline)
        .map_err(|e| LauncherError(format!("looking up {key}: {e}")))
}

/// Withdraws a key this process [`publish`]ed.
///
/// # Errors
/// As [`publish`].
pub fn unpublish(key: &str) -> Result<(), LauncherError> {
    let c = app_client()?;
    c.unpublish(&app_key(c, key))
        .map_err(|e| LauncherError(format!("unpublishing {key}: {e}")))
}

/// The address by which the other ranks of the job reach this host, chosen as for a node's
/// control server (docs/launchers.md): `MCAPI_TCP_IFACE`'s address if set; else loopback
/// when every rank of the job is on this host; else the address of the default route's
/// interface; else of the first interface that is up and not loopback. For an application
/// that opens its own sockets beside MCAPI (perftest's out-of-band channel).
///
/// # Errors
/// Not under a PMIx launcher, no PMIx in this build, a malformed `MCAPI_*` variable, or no
/// usable interface.
pub fn host_address() -> Result<IpAddr, LauncherError> {
    app_client()?;
    let config = Config::from_env().map_err(|e| LauncherError(e.to_string()))?;
    control_ip(&config).map_err(LauncherError)
}

/// Whether every rank of the job runs on this host (false when unknown: the network
/// configuration works on one host too).
pub(crate) fn all_ranks_here() -> bool {
    let Ok(c) = client() else { return false };
    matches!((c.local_size(), c.job_size()), (Ok(l), Ok(n)) if l == n)
}

/// The key under which `<domain, node>` of `job` publishes its control address. The job
/// comes last so that any job name is unambiguous.
pub(crate) fn node_key(job: &str, domain: u32, node: u32) -> Result<String, String> {
    let c = client()?;
    Ok(format!("mcapi:{}:{domain}.{node}:{job}", c.namespace()))
}

/// Publishes a node's control address.
pub(crate) fn publish_node(key: &str, addr: SocketAddr) -> Result<(), String> {
    client()?
        .publish(key, &addr.to_string())
        .map_err(|e| format!("publishing {key}: {e}"))
}

/// Withdraws a finalized node's address (best effort: the job may be ending).
pub(crate) fn unpublish_node(key: &str) {
    if let Ok(c) = client() {
        if let Err(e) = c.unpublish(key) {
            log::debug!("unpublishing {key}: {e}");
        }
    }
}

/// The address published under `key`, waiting for it until `deadline` (`None`: forever).
pub(crate) fn lookup_node(
    key: &str,
    deadline: Option<Instant>,
) -> Result<Option<SocketAddr>, String> {
    let Some(text) = client()?
        .lookup(key, deadline)
        .map_err(|e| format!("looking up {key}: {e}"))?
    else {
        return Ok(None);
    };
    text.parse()
        .map(Some)
        .map_err(|_| format!("{key}: not an address: {text:?}"))
}

/// The job's key under the launcher: rank 0 generates and publishes it, the others wait
/// for it (up to [`KEY_WAIT`]). Publishing a secret in one's own job's PMIx server is
/// acceptable (docs/security.md): only processes of this user reach it.
pub(crate) fn job_key(job: &str) -> Result<JobKey, String> {
    static KEYS: Mutex<Option<HashMap<String, JobKey>>> = Mutex::new(None);
    let c = client()?;
    let mut keys = KEYS.lock().unwrap_or_else(|p| p.into_inner());
    let keys = keys.get_or_insert_with(HashMap::new);
    if let Some(k) = keys.get(job) {
        return Ok(k.clone());
    }
    let name = format!("mcapi:{}:key:{job}", c.namespace());
    let key = if c.rank() == 0 {
        let mut raw = [0u8; 32];
        getrandom::fill(&mut raw).map_err(|e| format!("generating the job key: {e}"))?;
        let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        c.publish(&name, &hex)
            .map_err(|e| format!("publishing the job key: {e}"))?;
        hex
    } else {
        c.lookup(&name, Some(Instant::now() + KEY_WAIT))
            .map_err(|e| format!("looking up the job key: {e}"))?
            .ok_or_else(|| {
                format!(
                    "rank 0 published no job key within {}s (rank 0 initializes an MCAPI \
                     node of job '{job}', or set MCAPI_JOB_KEY for every rank: \
                     mpirun -x MCAPI_JOB_KEY)",
                    KEY_WAIT.as_secs()
                )
            })?
    };
    let key = JobKey::new(key.as_bytes()).map_err(|e| e.to_string())?;
    keys.insert(job.to_owned(), key.clone());
    Ok(key)
}

/// The address a node's control server listens on under PMIx: `MCAPI_TCP_IFACE`'s, else
/// loopback when every rank is on this host, else the address of the default route's
/// interface, else of the first interface that is up and not loopback.
pub(crate) fn control_ip(config: &Config) -> Result<IpAddr, String> {
    if let Some(iface) = &config.tcp_iface {
        return iface_addr(|name| name == iface)
            .ok_or_else(|| format!("interface {iface} (MCAPI_TCP_IFACE) has no address"));
    }
    if all_ranks_here() {
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    if let Some(iface) = default_route_iface() {
        if let Some(a) = iface_addr(|name| name == iface) {
            return Ok(a);
        }
    }
    iface_addr(|name| name != "lo")
        .ok_or_else(|| "no network interface with an address: set MCAPI_TCP_IFACE".into())
}

/// The first address (IPv4 preferred) of an up, non-loopback interface `pick` accepts
/// (`lo` only when named).
fn iface_addr(pick: impl Fn(&str) -> bool) -> Option<IpAddr> {
    use nix::net::if_::InterfaceFlags;
    let addrs: Vec<(String, IpAddr)> = nix::ifaddrs::getifaddrs()
        .ok()?
        .filter(|a| a.flags.contains(InterfaceFlags::IFF_UP) && pick(&a.interface_name))
        .filter_map(|a| {
            let sa = a.address?;
            let ip = match (sa.as_sockaddr_in(), sa.as_sockaddr_in6()) {
                (Some(v4), _) => IpAddr::V4(v4.ip()),
                // Link-local (fe80::/10) needs a scope id no peer could use.
                (_, Some(v6)) if v6.ip().segments()[0] & 0xffc0 != 0xfe80 => IpAddr::V6(v6.ip()),
                _ => return None,
            };
            Some((a.interface_name, ip))
        })
        .collect();
    let usable = |v4: bool| {
        addrs
            .iter()
            .find(|(_, ip)| ip.is_ipv4() == v4 && (!ip.is_loopback() || pick("lo")))
            .map(|(_, ip)| *ip)
    };
    usable(true).or_else(|| usable(false))
}

/// The interface of the IPv4 default route (`/proc/net/route`, destination 0).
fn default_route_iface() -> Option<String> {
    let table = std::fs::read_to_string("/proc/net/route").ok()?;
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 2 && f[1] == "00000000").then(|| f[0].to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_addresses() {
        assert_eq!(
            iface_addr(|n| n == "lo"),
            Some(IpAddr::V4(Ipv4Addr::LOCALHOST))
        );
        assert_eq!(iface_addr(|n| n == "no-such-interface"), None);
        if let Some(i) = default_route_iface() {
            assert!(iface_addr(|n| n == i).is_some(), "{i} has no address");
        }
    }

    #[test]
    fn no_launcher_no_rank() {
        if !pmix_sys::launched_under_pmix() {
            assert_eq!((rank(), size()), (None, None));
        }
    }

    #[test]
    fn no_launcher_no_directory() {
        if !pmix_sys::launched_under_pmix() {
            for e in [
                publish("k", "v").unwrap_err(),
                lookup("k", Some(Duration::ZERO)).unwrap_err(),
                unpublish("k").unwrap_err(),
                host_address().unwrap_err(),
            ] {
                assert!(e.0.contains("PMIx"), "{e}");
            }
        }
    }
}
