//! Node configuration: everything settable by environment is settable in code.
//!
//! | environment | [`Config`] field | default |
//! |---|---|---|
//! | `MCAPI_JOB` | `job` | `default` (so two processes of one user meet without configuration) |
//! | `MCAPI_TOPOLOGY` | `topology` | none: every node on this host |
//! | `MCAPI_PROVIDER` | `provider` | `shm` when every node is on this host, else the best network provider |
//! | `MCAPI_TCP_IFACE` (or libfabric's `FI_TCP_IFACE`) | `tcp_iface` | libfabric's choice |
//! | `MCAPI_RUNTIME_DIR` | `runtime_dir` | `$XDG_RUNTIME_DIR/mcapi`, else `/tmp/mcapi-<uid>` |
//! | `MCAPI_REQUESTS` | `request_table_size` | 1024 |
//! | `MCAPI_RECV_BUFFERS` | `recv_buffers` | 64 |
//! | `MCAPI_SPIN_US` | `spin` | 50: a blocked call polls for 50 µs before it yields the core (then sleeps); large values busy-poll, 0 yields at once |
//!
//! libfabric's own `FI_PROVIDER` restricts what libfabric offers at all (read once per
//! process); `MCAPI_PROVIDER` chooses among what is offered.

use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

/// Default number of request slots (`MCAPI_REQUESTS`).
pub const DEFAULT_REQUESTS: usize = 1024;
/// Default receive buffers per endpoint (`MCAPI_RECV_BUFFERS`).
pub const DEFAULT_RECV_BUFFERS: usize = 64;
/// Default time a blocked call polls before it yields (`MCAPI_SPIN_US`).
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);
/// TCP port of the control plane of node `n` when the topology gives none: `BASE + n`.
pub const DEFAULT_CONTROL_PORT_BASE: u16 = 47000;

/// A node's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
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
    /// Size of the request table.
    pub request_table_size: usize,
    /// Receive buffers of a new endpoint.
    pub recv_buffers: usize,
    /// How long a blocked call polls back to back before it yields the core between polls
    /// (for 500 µs) and then sleeps: long enough to catch a reply without a context switch.
    /// A job with a core per node can poll for as long as it waits (MPI-style busy polling)
    /// with a large value; `ZERO` yields at once.
    pub spin: Duration,
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
    /// Defaults, without reading the environment.
    pub fn defaults() -> Config {
        Config {
            job: "default".into(),
            topology: None,
            provider: None,
            tcp_iface: None,
            runtime_dir: default_runtime_dir(None),
            request_table_size: DEFAULT_REQUESTS,
            recv_buffers: DEFAULT_RECV_BUFFERS,
            spin: DEFAULT_SPIN,
        }
    }

    /// Defaults overridden by the environment variables in the module table.
    ///
    /// # Errors
    /// An unreadable or malformed topology file, or a non-numeric size.
    pub fn from_env() -> Result<Config, ConfigError> {
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
        c.runtime_dir = match var("MCAPI_RUNTIME_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => default_runtime_dir(var("XDG_RUNTIME_DIR")),
        };
        if let Some(path) = var("MCAPI_TOPOLOGY").filter(|p| !p.is_empty()) {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| ConfigError(format!("MCAPI_TOPOLOGY={path}: {e}")))?;
            c.topology = Some(
                Topology::parse(&text)
                    .map_err(|e| ConfigError(format!("MCAPI_TOPOLOGY={path}: {e}")))?,
            );
        }
        c.provider = var("MCAPI_PROVIDER").filter(|p| !p.is_empty());
        c.tcp_iface = var("MCAPI_TCP_IFACE")
            .or_else(|| var("FI_TCP_IFACE"))
            .filter(|i| !i.is_empty());
        if let Some(n) = var("MCAPI_REQUESTS") {
            c.request_table_size = parse_count("MCAPI_REQUESTS", &n)?;
        }
        if let Some(n) = var("MCAPI_RECV_BUFFERS") {
            c.recv_buffers = parse_count("MCAPI_RECV_BUFFERS", &n)?;
        }
        if let Some(us) = var("MCAPI_SPIN_US") {
            let us = us.trim().parse().map_err(|_| {
                ConfigError(format!("MCAPI_SPIN_US={us}: not a number of microseconds"))
            })?;
            c.spin = Duration::from_micros(us);
        }
        Ok(c)
    }

    /// Whether every node of the job runs on this host (no topology, or one naming only
    /// local addresses).
    pub fn single_host(&self) -> bool {
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
            let uid = std::fs::metadata("/proc/self")
                .map(|m| m.uid())
                .unwrap_or(0);
            PathBuf::from(format!("/tmp/mcapi-{uid}"))
        }
    }
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
    fn environment_overrides_defaults() {
        let c = Config::from_vars(vars(&[])).unwrap();
        assert_eq!(c.job, "default");
        assert!(c.single_host());
        assert_eq!(c.provider_candidates()[0], "shm");
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
        assert!(Config::from_vars(vars(&[("MCAPI_TOPOLOGY", "/nonexistent/topo")])).is_err());
    }

    #[test]
    fn multi_host_topology_prefers_network_providers() {
        let mut c = Config::defaults();
        c.topology = Some(Topology::parse("0 0 198.51.100.1\n0 1 198.51.100.2\n").unwrap());
        assert!(!c.single_host());
        assert_eq!(c.provider_candidates()[0], "verbs;ofi_rxm");
    }
}
