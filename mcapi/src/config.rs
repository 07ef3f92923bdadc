//! Node configuration: everything settable by environment is settable in code.
//!
//! | environment | [`Config`] field | default |
//! |---|---|---|
//! | `MCAPI_JOB` | `job` | `default` (so two processes of one user meet without configuration) |
//! | `MCAPI_BOOTSTRAP` (`pmix`, `topology` or `local`) | `bootstrap` | `pmix` under a PMIx launcher (`PMIX_NAMESPACE`, `PMIX_RANK` or `PMIX_SERVER_URI*` set) when built with PMIx, else `topology` when `MCAPI_TOPOLOGY` is set, else `local` |
//! | `MCAPI_TOPOLOGY` | `topology` | none: every node on this host |
//! | `MCAPI_PROVIDER` | `provider` | `shm` (then `tcp`) when every node is on this host, else the best network provider |
//! | `MCAPI_TCP_IFACE` (or libfabric's `FI_TCP_IFACE`) | `tcp_iface` | none: the topology host; under a launcher the published control address; else 127.0.0.1 |
//! | `MCAPI_RUNTIME_DIR` | `runtime_dir` | `$XDG_RUNTIME_DIR/mcapi`, else `/tmp/mcapi-<uid>` |
//! | `MCAPI_JOB_KEY` (or a file named by `MCAPI_JOB_KEY_FILE`) | `job_key` | one host: generated into the job's private directory; several hosts: none, and initialize fails |
//! | `MCAPI_REQUESTS` | `request_table_size` | 1024 (at most 2^24) |
//! | `MCAPI_RECV_BUFFERS` | `recv_buffers` | 64 (at most [`MAX_RECV_BUFFERS`], 16384) |
//! | `MCAPI_COMPAT` (`spec` or `mca`) | `compat` | `spec`: the letter of MCAPI 2.000; `mca`: the reference implementation's readings (docs/c-abi.md) |
//! | `MCAPI_MAX_MSG_SIZE` | `max_msg_size` | 16 MiB (`MCAPI_MAX_MSG_SIZE`, the ceiling; above it refused); 64 KiB on a provider without `FI_RMA` |
//! | `MCAPI_EAGER_MAX` | `eager_max` | the provider's eager/rendezvous threshold (its inject size on shm, 4 KiB; 16 KiB under ofi_rxm, else 64 KiB); any value from 1 B to 64 KiB replaces it (others are refused) |
//! | `MCAPI_SPIN_US` | `spin` | 50: a blocked call polls for 50 µs before it yields the core (then sleeps); large values busy-poll, 0 yields at once |
//!
//! The job key authenticates every control connection (docs/security.md). It is at least
//! [`MIN_KEY_LEN`] bytes, used as given (leading and trailing white space trimmed, so
//! `openssl rand -hex 32 > key` makes a good key file). A key file must be a regular file
//! of this user, readable by no one else (mode 0600 or 0400).
//!
//! libfabric's own `FI_PROVIDER` restricts what libfabric offers at all (read once per
//! process); `MCAPI_PROVIDER` chooses among what is offered.

use crate::semantics::request::MAX_REQUESTS;
use std::fmt;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default number of request slots (`MCAPI_REQUESTS`).
pub const DEFAULT_REQUESTS: usize = 1024;
/// Default receive buffers per endpoint (`MCAPI_RECV_BUFFERS`).
pub const DEFAULT_RECV_BUFFERS: usize = 64;
/// The largest `recv_buffers` (`MCAPI_RECV_BUFFERS`): also the most credits a channel
/// sender accepts from its receiver (a larger count in a peer's frame is refused).
pub const MAX_RECV_BUFFERS: usize = 16384;
/// Default time a blocked call polls before it yields (`MCAPI_SPIN_US`).
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);
/// TCP port of the control plane of node `n` when the topology gives none: `BASE + n`.
pub const DEFAULT_CONTROL_PORT_BASE: u16 = 47000;

/// Shortest job key accepted, in bytes.
pub const MIN_KEY_LEN: usize = 16;

/// The job's shared secret. Its `Debug` output hides it, so a logged [`Config`] does not
/// leak it.
#[derive(Clone, PartialEq, Eq)]
pub struct JobKey(Vec<u8>);

impl JobKey {
    /// A key from its bytes (white space at either end trimmed).
    ///
    /// # Errors
    /// Shorter than [`MIN_KEY_LEN`] bytes.
    pub fn new(bytes: &[u8]) -> Result<JobKey, ConfigError> {
        let bytes = bytes.trim_ascii();
        if bytes.len() < MIN_KEY_LEN {
            return Err(ConfigError(format!(
                "a job key needs at least {MIN_KEY_LEN} bytes (got {})",
                bytes.len()
            )));
        }
        Ok(JobKey(bytes.to_vec()))
    }

    /// Reads a key file, refusing one another user could have written or can read: not a
    /// regular file (a symlink is not followed), not owned by this user, or with any group
    /// or other permission.
    ///
    /// # Errors
    /// The file is unreadable, unsafe as above, or holds too short a key.
    pub fn from_file(path: &Path) -> Result<JobKey, ConfigError> {
        let err =
            |why: &dyn fmt::Display| ConfigError(format!("key file {}: {why}", path.display()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| err(&e))?;
        // Checked on the open file: what was checked is what is read.
        let meta = file.metadata().map_err(|e| err(&e))?;
        if !meta.is_file() {
            return Err(err(&"not a regular file"));
        }
        let me = nix::unistd::geteuid().as_raw();
        if meta.uid() != me {
            return Err(err(&format_args!(
                "owned by uid {}, not this user ({me})",
                meta.uid()
            )));
        }
        if meta.mode() & 0o077 != 0 {
            return Err(err(&format_args!(
                "mode {:o}: readable or writable by others (chmod 600 it)",
                meta.mode() & 0o777
            )));
        }
        let mut bytes = Vec::new();
        file.take(4096)
            .read_to_end(&mut bytes)
            .map_err(|e| err(&e))?;
        JobKey::new(&bytes).map_err(|e| err(&e))
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JobKey(<hidden>)")
    }
}

/// How the nodes of a job find each other (docs/launchers.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bootstrap {
    /// Every node on this host: Unix sockets in the job's private directory.
    Local,
    /// The hosts and ports of an `MCAPI_TOPOLOGY` file.
    Topology,
    /// The PMIx server of the launcher (mpirun, `srun --mpi=pmix`): each node publishes its
    /// control address, peers are looked up by `<domain, node>`.
    Pmix,
}

/// Whose reading of the spec a node follows where the MCA reference implementation departs
/// from the letter of MCAPI 2.000 (docs/c-abi.md lists every difference).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Compat {
    /// The letter of the spec.
    #[default]
    Spec,
    /// The reference implementation's idioms, for programs written against it.
    Mca,
}

/// A node's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// How nodes find each other.
    pub bootstrap: Bootstrap,
    /// Job name: nodes of different jobs never see each other.
    pub job: String,
    /// Where nodes run, for jobs that span hosts.
    pub topology: Option<Topology>,
    /// libfabric provider to use (`shm`, `tcp`, `verbs`...); `None`: choose automatically.
    pub provider: Option<String>,
    /// Network interface for the tcp provider.
    pub tcp_iface: Option<String>,
    /// Directory for this user's single-host rendezvous sockets.
    pub runtime_dir: PathBuf,
    /// The job's shared secret; `None`: one host's nodes generate one in the job's
    /// directory, a job across hosts cannot start.
    pub job_key: Option<JobKey>,
    /// Size of the request table.
    pub request_table_size: usize,
    /// Receive buffers of a new endpoint.
    pub recv_buffers: usize,
    /// How long a blocked call polls back to back before it yields the core between polls
    /// (for 500 µs) and then sleeps: long enough to catch a reply without a context switch.
    /// A job with a core per node can poll for as long as it waits (MPI-style busy polling)
    /// with a large value; `ZERO` yields at once.
    pub spin: Duration,
    /// The spec's reading or the reference implementation's.
    pub compat: Compat,
    /// Largest message a node accepts (at most, and by default,
    /// [`MAX_MSG_SIZE`](crate::MAX_MSG_SIZE); the eager slot, 64 KiB, on a provider
    /// without `FI_RMA`). Read it at run time with `Node::max_msg_size`.
    pub max_msg_size: usize,
    /// Largest message sent eagerly (1 to 64 KiB); larger ones go by rendezvous. `None`:
    /// the provider's measured threshold (docs/performance.md).
    pub eager_max: Option<usize>,
}

/// A configuration value that could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Removes this job's directory on this host (`<runtime_dir>/<job>` and the key the
    /// first node made there) once no node of the job is bound there: for tools and tests
    /// whose job names are used once (a process id in them), which would otherwise leave
    /// one directory per run. Only under the local bootstrap, where each running node has
    /// its socket there (nodes that meet over TCP, by a topology on this host, use the key
    /// with no socket of their own: theirs is kept); and only when no node of the job is
    /// starting (one between reading the key and binding its socket would lose the key to
    /// the removal). `Ok(true)` if it removed it.
    ///
    /// # Errors
    /// A directory that is there and cannot be read or removed.
    pub fn remove_unused_job_dir(&self) -> std::io::Result<bool> {
        if self.bootstrap != Bootstrap::Local {
            return Ok(false);
        }
        crate::control::remove_unused_job_dir(&self.runtime_dir, &self.job)
    }

    /// Defaults, without reading the environment.
    pub fn defaults() -> Config {
        Config {
            bootstrap: Bootstrap::Local,
            job: "default".into(),
            topology: None,
            provider: None,
            tcp_iface: None,
            runtime_dir: default_runtime_dir(None),
            job_key: None,
            request_table_size: DEFAULT_REQUESTS,
            recv_buffers: DEFAULT_RECV_BUFFERS,
            spin: DEFAULT_SPIN,
            compat: Compat::Spec,
            max_msg_size: crate::MAX_MSG_SIZE,
            eager_max: None,
        }
    }

    /// Defaults overridden by the environment variables in the module table.
    ///
    /// # Errors
    /// An unreadable or malformed topology file, a non-numeric size, or a job key that is
    /// too short, given twice, or in an unsafe file.
    pub fn from_env() -> Result<Config, ConfigError> {
        if let Some(key) = non_utf8_setting(std::env::vars_os()) {
            return Err(ConfigError(format!("{key}: not valid UTF-8")));
        }
        Config::from_vars(|k| std::env::var(k).ok())
    }

    /// As [`Config::from_env`], reading variables through `var` (testable).
    ///
    /// # Errors
    /// As [`Config::from_env`].
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let mut c = Config::defaults();
        if let Some(job) = var("MCAPI_JOB").filter(|j| !j.is_empty()) {
            c.job = job;
        }
        c.runtime_dir = match var("MCAPI_RUNTIME_DIR").filter(|d| !d.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => default_runtime_dir(var("XDG_RUNTIME_DIR")),
        };
        let topology_path = var("MCAPI_TOPOLOGY").filter(|p| !p.is_empty());
        c.bootstrap = match var("MCAPI_BOOTSTRAP").as_deref() {
            None | Some("") => {
                let launched = ["PMIX_NAMESPACE", "PMIX_RANK", "PMIX_SERVER_URI"]
                    .iter()
                    .chain(&["PMIX_SERVER_URI2", "PMIX_SERVER_URI21"])
                    .chain(&["PMIX_SERVER_URI3", "PMIX_SERVER_URI4", "PMIX_SERVER_URI41"])
                    .any(|k| var(k).is_some());
                if launched && crate::launcher::built_with_pmix() {
                    Bootstrap::Pmix
                } else if topology_path.is_some() {
                    Bootstrap::Topology
                } else {
                    Bootstrap::Local
                }
            }
            Some("pmix") if crate::launcher::built_with_pmix() => Bootstrap::Pmix,
            Some("pmix") => {
                return Err(ConfigError(
                    "MCAPI_BOOTSTRAP=pmix: this build has no PMIx (install libpmix-dev and \
                     pkg-config, rebuild)"
                        .into(),
                ))
            }
            Some("topology") if topology_path.is_some() => Bootstrap::Topology,
            Some("topology") => {
                return Err(ConfigError(
                    "MCAPI_BOOTSTRAP=topology needs MCAPI_TOPOLOGY".into(),
                ))
            }
            Some("local") => Bootstrap::Local,
            Some(other) => {
                return Err(ConfigError(format!(
                    "MCAPI_BOOTSTRAP={other}: expected pmix, topology or local"
                )))
            }
        };
        // The topology file is what `topology` reads; the other bootstraps leave it unread
        // (a stale or broken one in the environment of a launched job is no error).
        if let (Bootstrap::Topology, Some(path)) = (c.bootstrap, &topology_path) {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ConfigError(format!("MCAPI_TOPOLOGY={path}: {e}")))?;
            c.topology = Some(
                Topology::parse(&text)
                    .map_err(|e| ConfigError(format!("MCAPI_TOPOLOGY={path}: {e}")))?,
            );
        }
        c.job_key = match (
            var("MCAPI_JOB_KEY").filter(|k| !k.is_empty()),
            var("MCAPI_JOB_KEY_FILE").filter(|k| !k.is_empty()),
        ) {
            (Some(_), Some(_)) => {
                return Err(ConfigError(
                    "MCAPI_JOB_KEY and MCAPI_JOB_KEY_FILE are both set: give one".into(),
                ))
            }
            (Some(key), None) => Some(
                JobKey::new(key.as_bytes())
                    .map_err(|e| ConfigError(format!("MCAPI_JOB_KEY: {e}")))?,
            ),
            (None, Some(path)) => Some(
                JobKey::from_file(Path::new(&path))
                    .map_err(|e| ConfigError(format!("MCAPI_JOB_KEY_FILE: {e}")))?,
            ),
            (None, None) => None,
        };
        c.provider = var("MCAPI_PROVIDER").filter(|p| !p.is_empty());
        c.tcp_iface = var("MCAPI_TCP_IFACE")
            .or_else(|| var("FI_TCP_IFACE"))
            .filter(|i| !i.is_empty());
        if let Some(n) = var("MCAPI_REQUESTS") {
            c.request_table_size = parse_count("MCAPI_REQUESTS", &n)?;
            if c.request_table_size > MAX_REQUESTS {
                return Err(ConfigError(format!(
                    "MCAPI_REQUESTS={n}: at most {MAX_REQUESTS}"
                )));
            }
        }
        if let Some(n) = var("MCAPI_RECV_BUFFERS") {
            c.recv_buffers = parse_count("MCAPI_RECV_BUFFERS", &n)?;
            if c.recv_buffers > MAX_RECV_BUFFERS {
                return Err(ConfigError(format!(
                    "MCAPI_RECV_BUFFERS={n}: at most {MAX_RECV_BUFFERS}"
                )));
            }
        }
        // Above their ceilings these are refused, as in `mcapi_param_t` (not clamped).
        if let Some(n) = var("MCAPI_MAX_MSG_SIZE") {
            c.max_msg_size = parse_count("MCAPI_MAX_MSG_SIZE", &n)?;
            if c.max_msg_size > crate::MAX_MSG_SIZE {
                return Err(ConfigError(format!(
                    "MCAPI_MAX_MSG_SIZE={n}: at most {}",
                    crate::MAX_MSG_SIZE
                )));
            }
        }
        if let Some(n) = var("MCAPI_EAGER_MAX") {
            let eager_max = parse_count("MCAPI_EAGER_MAX", &n)?;
            if eager_max > crate::node::EAGER_SLOT {
                return Err(ConfigError(format!(
                    "MCAPI_EAGER_MAX={n}: at most {}",
                    crate::node::EAGER_SLOT
                )));
            }
            c.eager_max = Some(eager_max);
        }
        c.compat = match var("MCAPI_COMPAT").as_deref() {
            None | Some("") | Some("spec") => Compat::Spec,
            Some("mca") => Compat::Mca,
            Some(other) => {
                return Err(ConfigError(format!(
                    "MCAPI_COMPAT={other}: expected spec or mca"
                )))
            }
        };
        if let Some(us) = var("MCAPI_SPIN_US") {
            let us = us.trim().parse().map_err(|_| {
                ConfigError(format!("MCAPI_SPIN_US={us}: not a number of microseconds"))
            })?;
            c.spin = Duration::from_micros(us);
        }
        Ok(c)
    }

    /// Why a node cannot start with this configuration (sizes beyond what the node's
    /// tables address), if it cannot.
    pub(crate) fn unusable(&self) -> Option<String> {
        if self.request_table_size > MAX_REQUESTS {
            Some(format!(
                "request_table_size {} is above {MAX_REQUESTS}",
                self.request_table_size
            ))
        } else if self.recv_buffers > MAX_RECV_BUFFERS {
            Some(format!(
                "recv_buffers {} is above {MAX_RECV_BUFFERS}",
                self.recv_buffers
            ))
        } else {
            None
        }
    }

    /// Whether every node of the job runs on this host (no topology, or one naming only
    /// local addresses; under PMIx, every rank of the job on this host).
    pub fn single_host(&self) -> bool {
        if self.bootstrap == Bootstrap::Pmix {
            return crate::launcher::all_ranks_here();
        }
        self.topology.as_ref().is_none_or(Topology::all_local)
    }

    /// The provider to ask libfabric for: the explicit choice, else `shm` on one host, else
    /// the network providers in order of preference.
    pub fn provider_candidates(&self) -> Vec<String> {
        match &self.provider {
            Some(p) => vec![p.clone()],
            None if self.single_host() => vec!["shm".into(), "tcp".into()],
            None => vec!["verbs;ofi_rxm".into(), "tcp".into(), "sockets".into()],
        }
    }
}

fn parse_count(name: &str, value: &str) -> Result<usize, ConfigError> {
    match value.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(ConfigError(format!(
            "{name}={value}: expected a positive number"
        ))),
    }
}

fn default_runtime_dir(xdg: Option<String>) -> PathBuf {
    match xdg.filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("mcapi"),
        None => {
            // The uid keeps two users' jobs apart in /tmp.
            let uid = nix::unistd::geteuid().as_raw();
            PathBuf::from(format!("/tmp/mcapi-{uid}"))
        }
    }
}

/// The first `MCAPI_*` variable whose value is not UTF-8: refused, not taken as unset (a
/// job key among them would silently give way to a generated one).
fn non_utf8_setting(
    vars: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Option<String> {
    vars.map(|(key, value)| (key.to_string_lossy().into_owned(), value))
        .find(|(key, value)| key.starts_with("MCAPI_") && value.to_str().is_none())
        .map(|(key, _)| key)
}

/// Where each node of a multi-host job runs: `MCAPI_TOPOLOGY` lines `domain node host[:port]`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Topology {
    entries: Vec<TopologyEntry>,
}

/// One node of a [`Topology`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopologyEntry {
    /// MCAPI domain.
    pub domain: u32,
    /// MCAPI node.
    pub node: u32,
    /// Host name or address.
    pub host: String,
    /// Control-plane TCP port (default [`DEFAULT_CONTROL_PORT_BASE`] + node).
    pub port: u16,
}

impl Topology {
    /// Parses the file format: one node per line, `#` starts a comment, blank lines ignored.
    /// IPv6 addresses with a port are written in brackets: `[fd00::2]:47001`.
    ///
    /// # Errors
    /// The first malformed line, with its number.
    pub fn parse(text: &str) -> Result<Topology, ConfigError> {
        let mut entries: Vec<TopologyEntry> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let err = |msg: &str| ConfigError(format!("line {}: {msg}: {raw:?}", i + 1));
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [domain, node, addr] = fields[..] else {
                return Err(err("expected `domain node host[:port]`"));
            };
            let domain = domain.parse().map_err(|_| err("bad domain"))?;
            let node: u32 = node.parse().map_err(|_| err("bad node"))?;
            let (host, port) = split_host_port(addr).ok_or_else(|| err("bad host[:port]"))?;
            let port = match port {
                Some(p) => p,
                None => u16::try_from(u32::from(DEFAULT_CONTROL_PORT_BASE) + node)
                    .map_err(|_| err("node too large for a default port; give one"))?,
            };
            if entries.iter().any(|e| e.domain == domain && e.node == node) {
                return Err(err("node listed twice"));
            }
            entries.push(TopologyEntry {
                domain,
                node,
                host,
                port,
            });
        }
        Ok(Topology { entries })
    }

    /// The entry of `<domain, node>`.
    pub fn get(&self, domain: u32, node: u32) -> Option<&TopologyEntry> {
        self.entries
            .iter()
            .find(|e| e.domain == domain && e.node == node)
    }

    /// Every entry, in file order.
    pub fn entries(&self) -> &[TopologyEntry] {
        &self.entries
    }

    /// Whether every host is a loopback name or address.
    pub fn all_local(&self) -> bool {
        self.entries
            .iter()
            .all(|e| matches!(e.host.as_str(), "localhost" | "::1") || e.host.starts_with("127."))
    }
}

fn split_host_port(addr: &str) -> Option<(String, Option<u16>)> {
    if let Some(rest) = addr.strip_prefix('[') {
        let (host, tail) = rest.split_once(']')?;
        let port = match tail.strip_prefix(':') {
            Some(p) => Some(p.parse().ok()?),
            None if tail.is_empty() => None,
            None => return None,
        };
        return Some((host.to_owned(), port));
    }
    match addr.split_once(':') {
        // More than one colon and no brackets: a bare IPv6 address.
        Some((_, rest)) if rest.contains(':') => Some((addr.to_owned(), None)),
        Some((host, port)) if !host.is_empty() => Some((host.to_owned(), Some(port.parse().ok()?))),
        Some(_) => None,
        None => Some((addr.to_owned(), None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn topology_lines() {
        let t = Topology::parse(
            "# two hosts\n0 0 198.51.100.1\n0 1 198.51.100.2:5000  # comment\n\n1 7 [fd00::2]:6000\n1 8 fd00::3\n",
        )
        .unwrap();
        let want = [
            (0, 0, "198.51.100.1", DEFAULT_CONTROL_PORT_BASE),
            (0, 1, "198.51.100.2", 5000),
            (1, 7, "fd00::2", 6000),
            (1, 8, "fd00::3", DEFAULT_CONTROL_PORT_BASE + 8),
        ];
        assert_eq!(t.entries().len(), want.len());
        for (d, n, h, p) in want {
            let e = t.get(d, n).unwrap();
            assert_eq!((e.host.as_str(), e.port), (h, p));
        }
        assert!(!t.all_local());
        assert!(Topology::parse("0 0 127.0.0.1\n0 1 localhost:9\n")
            .unwrap()
            .all_local());
    }

    #[test]
    fn topology_errors_name_the_line() {
        for (text, line) in [
            ("0 0\n", 1),
            ("0 0 h\nx 1 h\n", 2),
            ("0 0 h:99999\n", 1),
            ("0 0 h\n0 0 g\n", 2),
            ("0 0 [::1\n", 1),
            ("0 0 :80\n", 1),
        ] {
            let e = Topology::parse(text).unwrap_err();
            assert!(e.0.starts_with(&format!("line {line}:")), "{text:?}: {e}");
        }
    }

    #[test]
    fn compat_mode_from_environment() {
        let read = |v: &str| Config::from_vars(vars(&[("MCAPI_COMPAT", v)])).map(|c| c.compat);
        assert_eq!(Config::from_vars(vars(&[])).unwrap().compat, Compat::Spec);
        assert_eq!(read("spec"), Ok(Compat::Spec));
        assert_eq!(read("mca"), Ok(Compat::Mca));
        assert!(read("MCA").is_err());
    }

    #[test]
    fn environment_overrides_defaults() {
        let c = Config::from_vars(vars(&[])).unwrap();
        assert_eq!(c.job, "default");
        assert!(c.single_host());
        assert_eq!(c.provider_candidates()[0], "shm");
        assert!(c.runtime_dir.to_string_lossy().starts_with("/tmp/mcapi-"));
        // Empty is unset, as for every other variable (it was the path "").
        let c = Config::from_vars(vars(&[("MCAPI_RUNTIME_DIR", "")])).unwrap();
        assert!(c.runtime_dir.to_string_lossy().starts_with("/tmp/mcapi-"));

        let c = Config::from_vars(vars(&[
            ("MCAPI_JOB", "j1"),
            ("MCAPI_PROVIDER", "tcp"),
            ("FI_TCP_IFACE", "lo"),
            ("XDG_RUNTIME_DIR", "/run/user/5"),
            ("MCAPI_REQUESTS", "16"),
            ("MCAPI_RECV_BUFFERS", "8"),
            ("MCAPI_SPIN_US", "0"),
        ]))
        .unwrap();
        assert_eq!((c.job.as_str(), c.tcp_iface.as_deref()), ("j1", Some("lo")));
        assert_eq!(c.provider_candidates(), vec!["tcp".to_string()]);
        assert_eq!(c.runtime_dir, PathBuf::from("/run/user/5/mcapi"));
        assert_eq!((c.request_table_size, c.recv_buffers), (16, 8));
        assert_eq!(c.spin, Duration::ZERO);
        assert_eq!(Config::from_vars(vars(&[])).unwrap().spin, DEFAULT_SPIN);
        let c = Config::from_vars(vars(&[("MCAPI_SPIN_US", "1000000")])).unwrap();
        assert_eq!(c.spin, Duration::from_secs(1));
        assert!(Config::from_vars(vars(&[("MCAPI_SPIN_US", "-1")])).is_err());
        assert!(Config::from_vars(vars(&[("MCAPI_SPIN_US", "50us")])).is_err());

        assert!(Config::from_vars(vars(&[("MCAPI_REQUESTS", "0")])).is_err());
        assert!(Config::from_vars(vars(&[("MCAPI_REQUESTS", "16777216")])).is_ok());
        assert!(Config::from_vars(vars(&[("MCAPI_REQUESTS", "16777217")])).is_err());
        let sized = |name: &str, n: usize| Config::from_vars(vars(&[(name, &n.to_string())]));
        assert_eq!(
            sized("MCAPI_MAX_MSG_SIZE", crate::MAX_MSG_SIZE).map(|c| c.max_msg_size),
            Ok(crate::MAX_MSG_SIZE)
        );
        assert!(sized("MCAPI_MAX_MSG_SIZE", crate::MAX_MSG_SIZE + 1).is_err());
        assert_eq!(
            sized("MCAPI_EAGER_MAX", 65536).map(|c| c.eager_max),
            Ok(Some(65536))
        );
        assert!(sized("MCAPI_EAGER_MAX", 65537).is_err());
        let mut c = Config::defaults();
        assert_eq!(c.unusable(), None);
        c.request_table_size = MAX_REQUESTS + 1;
        assert!(c.unusable().is_some());
        assert!(Config::from_vars(vars(&[("MCAPI_TOPOLOGY", "/nonexistent/topo")])).is_err());
    }

    #[test]
    fn settings_that_are_not_utf8_are_refused() {
        use std::ffi::OsString;
        use std::os::unix::ffi::OsStringExt;
        let bad = || OsString::from_vec(b"abcdefghijklmnop\xff".to_vec());
        let vars = |pairs: Vec<(&str, OsString)>| {
            pairs
                .into_iter()
                .map(|(k, v)| (OsString::from(k), v))
                .collect::<Vec<_>>()
                .into_iter()
        };
        assert_eq!(
            non_utf8_setting(vars(vec![
                ("HOME", bad()),
                ("MCAPI_JOB", "j".into()),
                ("MCAPI_JOB_KEY", bad()),
            ])),
            Some("MCAPI_JOB_KEY".into())
        );
        assert_eq!(
            non_utf8_setting(vars(vec![("PATH", bad()), ("MCAPI_JOB", "j".into())])),
            None
        );
    }

    #[test]
    fn bootstrap_detection_and_override() {
        let b = |pairs: &[(&str, &str)]| Config::from_vars(vars(pairs)).map(|c| c.bootstrap);
        assert_eq!(b(&[]), Ok(Bootstrap::Local));
        let pmix = if crate::launcher::built_with_pmix() {
            Bootstrap::Pmix
        } else {
            Bootstrap::Local
        };
        assert_eq!(b(&[("PMIX_RANK", "0")]), Ok(pmix));
        assert_eq!(b(&[("PMIX_SERVER_URI41", "x")]), Ok(pmix));
        assert_eq!(
            b(&[("PMIX_RANK", "0"), ("MCAPI_BOOTSTRAP", "local")]),
            Ok(Bootstrap::Local)
        );
        assert!(b(&[("MCAPI_BOOTSTRAP", "topology")]).is_err());
        assert!(b(&[("MCAPI_BOOTSTRAP", "slurm")]).is_err());
        // A topology file is read only by the bootstrap that uses it: a stale or broken one
        // in a launched or local job's environment is no error (it failed every bootstrap).
        let missing = ("MCAPI_TOPOLOGY", "/nonexistent/topo");
        assert!(b(&[missing]).is_err(), "topology chosen, the file read");
        assert_eq!(
            b(&[missing, ("MCAPI_BOOTSTRAP", "local")]),
            Ok(Bootstrap::Local)
        );
        if crate::launcher::built_with_pmix() {
            assert_eq!(b(&[missing, ("PMIX_RANK", "0")]), Ok(Bootstrap::Pmix));
        }
        assert_eq!(
            b(&[("MCAPI_BOOTSTRAP", "pmix")]).is_ok(),
            crate::launcher::built_with_pmix()
        );
    }

    #[test]
    fn job_key_from_environment_or_a_private_file() {
        let key = "0123456789abcdef";
        let c = Config::from_vars(vars(&[("MCAPI_JOB_KEY", key)])).unwrap();
        assert_eq!(c.job_key.as_ref().unwrap().as_bytes(), key.as_bytes());
        assert!(!format!("{c:?}").contains(key), "Debug shows the key");
        assert!(Config::from_vars(vars(&[("MCAPI_JOB_KEY", "short")])).is_err());
        let dir = std::env::temp_dir().join(format!("mcapi-keyfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("key");
        std::fs::write(&file, format!("{key}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let path = file.to_str().unwrap();
        for (mode, ok) in [(0o600, true), (0o400, true), (0o640, false), (0o604, false)] {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            let c = Config::from_vars(vars(&[("MCAPI_JOB_KEY_FILE", path)]));
            assert_eq!(c.is_ok(), ok, "mode {mode:o}: {c:?}");
            if ok {
                assert_eq!(c.unwrap().job_key.unwrap().as_bytes(), key.as_bytes());
            }
        }
        std::os::unix::fs::symlink(&file, dir.join("link")).unwrap();
        let link = dir.join("link");
        let c = Config::from_vars(vars(&[("MCAPI_JOB_KEY_FILE", link.to_str().unwrap())]));
        assert!(c.is_err(), "a symlink is followed");
        let both = [("MCAPI_JOB_KEY", key), ("MCAPI_JOB_KEY_FILE", path)];
        assert!(Config::from_vars(vars(&both)).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn multi_host_topology_prefers_network_providers() {
        let mut c = Config::defaults();
        c.topology = Some(Topology::parse("0 0 198.51.100.1\n0 1 198.51.100.2\n").unwrap());
        assert!(!c.single_host());
        assert_eq!(c.provider_candidates()[0], "verbs;ofi_rxm");
    }
}
