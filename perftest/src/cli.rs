//! Command line, in fabtests' dialect: `-p` provider, `-S` sizes, `-I` iterations, `-w`
//! warmup, `-W` window; no host argument means "be the server", a host means "connect to it".

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::fmt;
use std::time::Duration;

/// Default out-of-band (bootstrap) TCP port.
pub const DEFAULT_OOB_PORT: u16 = 47592;

/// Largest message size accepted on the command line.
const MAX_SIZE: usize = 1 << 30;

/// Sizes that `-S all` stands for: powers of two from 1 B to 4 MiB (capped at the provider's
/// `max_msg_size`).
const ALL_SIZES_MAX: usize = 4 << 20;

#[derive(Parser, Debug)]
#[command(
    name = "perftest",
    version,
    about = "Latency, bandwidth and rate of MCAPI messages, packet and scalar channels, beside \
             raw libfabric on the same provider",
    long_about = "Latency, bandwidth and rate of MCAPI messages, packet channels and scalar \
                  channels, measured beside raw libfabric over the same provider, sizes and \
                  window: each size runs over raw libfabric, then over MCAPI (up to MCAPI's \
                  limit: 16 MiB messages, 4 MiB packets, 8-byte scalars), and the results are \
                  printed side by side with their ratio (MCAPI/raw: p50 latency, or MB/s).\n\n\
                  Run the server with no host argument and the client with the server's host, \
                  or both at once on this machine with --local:\n\n  \
                  perftest msg-lat --local -p tcp -S 8,4k\n  \
                  perftest msg-bw -p tcp            # on host A (server)\n  \
                  perftest msg-bw -p tcp hostA      # on host B (client; prints the results)\n  \
                  mpirun -n 2 perftest msg-bw -p tcp  # under a launcher: no host, no port\n\n\
                  perftest compare runs every benchmark over every provider offered here and \
                  writes a markdown table and SVG plots (perftest compare --help).",
    after_help = "Examples, one per subcommand (--local: both sides on this machine):\n  \
                  perftest msg-lat --local -p tcp -S 8,4k\n  \
                  perftest msg-bw --local -S 1:64k -W 64\n  \
                  perftest pkt-lat --local -S 8,64k,1m\n  \
                  perftest pkt-bw --local -p tcp -S 64k --rounds 3\n  \
                  perftest scl-lat --local --rounds 9\n  \
                  perftest scl-rate --local -I 200000\n  \
                  perftest compare -p shm,tcp -o /tmp/cmp\n\n\
                  A provider libfabric does not offer here is reported with the list of those \
                  it does. Exit status: 0 done; 61 not run (the provider is not available \
                  here, as in fabtests); 2 bad command line; 1 any other failure."
)]
pub struct Cli {
    #[command(subcommand)]
    pub test: TestCmd,
}

/// The benchmarks, and the provider comparison that runs them all.
#[derive(Subcommand, Debug)]
pub enum TestCmd {
    /// Ping-pong latency: the client sends a message, the server returns one of the same size;
    /// latency is half the round trip, recorded for every iteration.
    #[command(after_help = "Example: perftest msg-lat --local -p tcp -S 8,4k")]
    MsgLat(Opts),
    /// Streaming bandwidth and message rate: the client keeps a window of -W non-blocking sends
    /// in flight, the server acknowledges each window.
    #[command(after_help = "Example: perftest msg-bw --local -S 1:64k -W 64")]
    MsgBw(Opts),
    /// Packet-channel ping-pong over two unidirectional packet channels (blocking
    /// pktchan_send, pktchan_recv and release); raw baseline: msg-lat's.
    #[command(after_help = "Example: perftest pkt-lat --local -S 8,64k,1m")]
    PktLat(Opts),
    /// Packet-channel bandwidth: windows of -W pktchan_send_i above the inject size, blocking
    /// pktchan_send (injected) up to it (every one blocking with --blocking-sends), the
    /// receiver receives and releases, acknowledges each window over the reverse channel;
    /// raw baseline: msg-bw's.
    #[command(after_help = "Example: perftest pkt-bw --local -p tcp -S 64k --rounds 3")]
    PktBw(Opts),
    /// Scalar-channel ping-pong of uint64 values over two scalar channels (size 8); raw
    /// baseline: an 8-byte inject ping-pong.
    #[command(after_help = "Example: perftest scl-lat --local --rounds 9")]
    SclLat(Opts),
    /// Scalar-channel rate: uint64 values streamed one way in windows of -W, acknowledged by
    /// a scalar per window (-W >= -I: one final ack); raw baseline: 8-byte injects, same
    /// window.
    #[command(after_help = "Example: perftest scl-rate --local -I 200000")]
    SclRate(Opts),
    /// Every benchmark over every provider offered here (each as a --local run bounded in
    /// time); writes a markdown table, the JSON lines and SVG plots into a directory.
    #[command(after_help = "Example: perftest compare -p shm,tcp -S 8,64k -o /tmp/cmp")]
    Compare(CompareOpts),
}

impl TestCmd {
    /// The benchmark and its options; `None` for `compare`.
    pub fn single(&self) -> Option<(Test, &Opts)> {
        match self {
            TestCmd::MsgLat(o) => Some((Test::MsgLat, o)),
            TestCmd::MsgBw(o) => Some((Test::MsgBw, o)),
            TestCmd::PktLat(o) => Some((Test::PktLat, o)),
            TestCmd::PktBw(o) => Some((Test::PktBw, o)),
            TestCmd::SclLat(o) => Some((Test::SclLat, o)),
            TestCmd::SclRate(o) => Some((Test::SclRate, o)),
            TestCmd::Compare(_) => None,
        }
    }
}

/// Which benchmark pattern runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    MsgLat,
    MsgBw,
    PktLat,
    PktBw,
    SclLat,
    SclRate,
}

/// What a benchmark moves through MCAPI (its raw libfabric baseline is always tagged
/// messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    /// MCAPI messages between two endpoints.
    Messages,
    /// Two unidirectional packet channels.
    Packets,
    /// Two unidirectional scalar channels of uint64.
    Scalars,
}

/// What a benchmark's headline number is: it decides the ratio MCAPI/raw, what `--rounds`
/// takes the median of, and which plot a result goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// p50 latency in microseconds (ping-pong patterns).
    Latency,
    /// MB/s and messages per second (streaming patterns).
    Throughput,
}

impl Test {
    /// Every benchmark, in the order `compare` runs them.
    pub const ALL: &'static [Test] = &[
        Test::MsgLat,
        Test::MsgBw,
        Test::PktLat,
        Test::PktBw,
        Test::SclLat,
        Test::SclRate,
    ];

    /// The name used on the command line, in the output and on the bootstrap channel.
    pub fn name(self) -> &'static str {
        match self {
            Test::MsgLat => "msg-lat",
            Test::MsgBw => "msg-bw",
            Test::PktLat => "pkt-lat",
            Test::PktBw => "pkt-bw",
            Test::SclLat => "scl-lat",
            Test::SclRate => "scl-rate",
        }
    }

    pub fn from_name(s: &str) -> Option<Test> {
        Test::ALL.iter().copied().find(|t| t.name() == s)
    }

    pub fn metric(self) -> Metric {
        match self {
            Test::MsgLat | Test::PktLat | Test::SclLat => Metric::Latency,
            Test::MsgBw | Test::PktBw | Test::SclRate => Metric::Throughput,
        }
    }

    pub fn layer(self) -> Layer {
        match self {
            Test::MsgLat | Test::MsgBw => Layer::Messages,
            Test::PktLat | Test::PktBw => Layer::Packets,
            Test::SclLat | Test::SclRate => Layer::Scalars,
        }
    }

    /// Sizes run when `-S` is not given.
    pub fn default_sizes(self) -> &'static str {
        match self.layer() {
            Layer::Messages => "8:64k",
            Layer::Packets => "8:1m",
            Layer::Scalars => "8",
        }
    }

    /// The sizes to run: `given` (`-S`) or [`Test::default_sizes`]. Scalars are uint64:
    /// their only size is 8.
    ///
    /// # Errors
    /// Another size than 8 for a scalar benchmark.
    pub fn sizes(self, given: Option<&SizeSpec>) -> Result<SizeSpec, String> {
        let default = || parse_sizes(self.default_sizes()).expect("valid default sizes");
        match (self.layer(), given) {
            (_, None) => Ok(default()),
            (Layer::Scalars, Some(s)) if s.sizes != [8] => Err(format!(
                "{self} moves uint64 scalars: its size is 8 bytes (-S 8, or no -S)"
            )),
            (_, Some(s)) => Ok(s.clone()),
        }
    }

    /// Whether `-W` applies.
    pub fn windowed(self) -> bool {
        self.metric() == Metric::Throughput
    }
}

impl fmt::Display for Test {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Options shared by every benchmark.
#[derive(Args, Debug, Clone)]
pub struct Opts {
    /// Server to connect to (client mode); without it, run as the server and wait for a client.
    /// Under a launcher (mpirun -n 2 perftest ...) neither: rank 0 serves and prints, rank 1
    /// connects, and they find each other through the launcher
    #[arg(value_name = "HOST", conflicts_with = "local")]
    pub host: Option<String>,

    /// libfabric provider: shm, tcp, sockets, udp, net, verbs (or a full name like tcp;ofi_rxm)
    #[arg(short = 'p', long, default_value = "shm")]
    pub provider: String,

    /// Message sizes: a list (8,64,1k), power-of-two ranges (1:4m), or "all" (1 B to 4 MiB);
    /// k = 1024, m = 1048576 [default: 8:64k for msg-*, 8:1m for pkt-*; scl-* are 8 bytes]
    #[arg(short = 'S', long = "size", value_name = "SIZES", value_parser = parse_sizes)]
    pub sizes: Option<SizeSpec>,

    /// Timed iterations per size (latency tests: round trips; the others: messages)
    #[arg(short = 'I', long, default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub iterations: u64,

    /// Untimed warmup iterations before the timed ones, per size
    #[arg(short = 'w', long, default_value_t = 100)]
    pub warmup: u64,

    /// msg-bw, pkt-bw, scl-rate: messages in flight before the receiver acknowledges
    #[arg(short = 'W', long, default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub window: u64,

    /// msg-bw, pkt-bw: MCAPI sends with blocking msg_send / pktchan_send (zero copy where the
    /// provider allows, each send waits for its completion) instead of windows of
    /// msg_send_i_zero_copy above the eager size (on shm and tcp lent to the receiver,
    /// completing once it has read the message; else staged, completing once posted; eager messages go
    /// by msg_send, which returns once they are injected or copied) / pktchan_send_i above
    /// the inject size (zero copy where the provider allows, completing with the send; else
    /// copied into the channel's staging buffers, completing once posted; smaller packets
    /// go by pktchan_send, which injects them and returns at once). For
    /// msg-bw the receiver then takes every message by blocking msg_recv instead of
    /// receives posted with their buffers above the eager size
    #[arg(long)]
    pub blocking_sends: bool,

    /// Stop a size's timed iterations after this many seconds and report the iterations done
    #[arg(long, value_name = "SECS", default_value_t = 2.0, value_parser = parse_seconds)]
    pub max_time: f64,

    /// Rounds per size: raw libfabric and MCAPI alternate (raw first in even rounds, MCAPI
    /// first in odd ones); p50 latency and MB/s are the medians of the rounds, with their
    /// spread (min..max)
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub rounds: u32,

    /// Print one JSON object per size and line instead of the table
    #[arg(long)]
    pub json: bool,

    /// Pin to CPU cores: N (server on N, client on N+1) or SERVER,CLIENT
    #[arg(long, value_name = "N|N,M", value_parser = parse_cpus)]
    pub cpu: Option<CpuSpec>,

    /// Run server and client on this machine, as two child processes of this one
    #[arg(long)]
    pub local: bool,

    /// msg-lat: both ends in one MCAPI node of this process (two endpoints, one thread),
    /// then the same options with --local for comparison
    #[arg(long, conflicts_with_all = ["host", "local"])]
    pub same_node: bool,

    /// TCP port of the out-of-band channel that exchanges fabric addresses and synchronises;
    /// across hosts the two MCAPI nodes' control planes use the next two ports (under a
    /// launcher: unused, the channel takes a free port and the nodes bootstrap through PMIx)
    #[arg(long, default_value_t = DEFAULT_OOB_PORT)]
    pub oob_port: u16,

    /// Set by --local for its two child processes.
    #[arg(long, hide = true, value_enum)]
    pub local_role: Option<LocalRole>,
}

impl Opts {
    pub fn max_time(&self) -> Duration {
        Duration::from_secs_f64(self.max_time)
    }
}

/// Options of `compare`.
#[derive(Args, Debug, Clone)]
pub struct CompareOpts {
    /// Providers to compare, comma-separated (default: every provider libfabric offers here)
    #[arg(
        short = 'p',
        long = "provider",
        value_name = "LIST",
        value_delimiter = ','
    )]
    pub providers: Vec<String>,

    /// Benchmarks to run, comma-separated (default: all)
    #[arg(short = 't', long = "tests", value_name = "LIST", value_delimiter = ',',
          value_parser = parse_test)]
    pub tests: Vec<Test>,

    /// Message sizes, as for the benchmarks [default: each benchmark's own; scalar
    /// benchmarks always run 8 bytes]
    #[arg(short = 'S', long = "size", value_name = "SIZES", value_parser = parse_sizes)]
    pub sizes: Option<SizeSpec>,

    /// Timed iterations per point at most (--max-time usually ends a point first)
    #[arg(short = 'I', long, default_value_t = 100_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub iterations: u64,

    /// Untimed warmup iterations per point
    #[arg(short = 'w', long, default_value_t = 20)]
    pub warmup: u64,

    /// Window of the streaming benchmarks
    #[arg(short = 'W', long, default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub window: u64,

    /// Seconds per point (one size, one layer, one round)
    #[arg(long, value_name = "SECS", default_value_t = 0.1, value_parser = parse_seconds)]
    pub max_time: f64,

    /// Rounds per size of the latency benchmarks (raw and MCAPI interleaved; medians and
    /// spread reported)
    #[arg(long, value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub lat_rounds: u32,

    /// Rounds per size of the bandwidth and rate benchmarks
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub bw_rounds: u32,

    /// Directory for summary.md, results.jsonl, the SVG plots and the runs' logs
    #[arg(
        short = 'o',
        long,
        value_name = "DIR",
        default_value = "perftest-compare"
    )]
    pub output: std::path::PathBuf,

    /// Pin both sides of every run: N (server on N, client on N+1) or SERVER,CLIENT
    #[arg(long, value_name = "N|N,M", value_parser = parse_cpus)]
    pub cpu: Option<CpuSpec>,

    /// First TCP port of the runs' bootstrap channels (each run uses the next free three)
    #[arg(long, default_value_t = DEFAULT_OOB_PORT)]
    pub oob_port: u16,
}

impl CompareOpts {
    pub fn rounds(&self, test: Test) -> u32 {
        match test.metric() {
            Metric::Latency => self.lat_rounds,
            Metric::Throughput => self.bw_rounds,
        }
    }

    /// The sizes of `test`: `-S` where it applies, else the benchmark's defaults.
    pub fn sizes(&self, test: Test) -> SizeSpec {
        match test.layer() {
            Layer::Scalars => test.sizes(None),
            _ => test.sizes(self.sizes.as_ref()),
        }
        .expect("valid sizes")
    }

    /// The benchmarks to run (all when none was named).
    pub fn tests(&self) -> Vec<Test> {
        if self.tests.is_empty() {
            Test::ALL.to_vec()
        } else {
            self.tests.clone()
        }
    }
}

fn parse_test(s: &str) -> Result<Test, String> {
    Test::from_name(s.trim()).ok_or_else(|| {
        let names: Vec<&str> = Test::ALL.iter().map(|t| t.name()).collect();
        format!(
            "unknown benchmark '{s}': expected one of {}",
            names.join(", ")
        )
    })
}

/// The role of a child process started by `--local`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LocalRole {
    Server,
    Client,
}

/// Sizes to run, as given by `-S`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeSpec {
    /// Ascending, without duplicates.
    pub sizes: Vec<usize>,
    /// `-S all`: sizes above the provider's limit are dropped silently.
    pub all: bool,
}

const SIZE_HELP: &str =
    "expected a byte count such as 64, 4k, 1m or 1g (k = 1024, m = 1048576, g = 2^30), \
                         a power-of-two range such as 1:4m, a comma-separated list of these \
                         (8,64,1k:64k), or 'all'";

/// Parses `-S`: `all`, or a comma-separated list of sizes and `a:b` power-of-two ranges.
pub fn parse_sizes(s: &str) -> Result<SizeSpec, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("all") {
        return Ok(SizeSpec {
            sizes: power_range(1, ALL_SIZES_MAX),
            all: true,
        });
    }
    let mut sizes = Vec::new();
    for part in s.split(',').map(str::trim) {
        if part.is_empty() {
            return Err(format!("empty size in '{s}': {SIZE_HELP}"));
        }
        match part.split_once(':') {
            Some((a, b)) => {
                let (lo, hi) = (parse_size(a.trim())?, parse_size(b.trim())?);
                if lo > hi {
                    return Err(format!(
                        "invalid range '{part}': the start is larger than the end"
                    ));
                }
                sizes.extend(power_range(lo, hi));
            }
            None => sizes.push(parse_size(part)?),
        }
    }
    sizes.sort_unstable();
    sizes.dedup();
    Ok(SizeSpec { sizes, all: false })
}

/// `lo`, then doubling up to `hi` (from 0: 0, 1, 2, 4...).
fn power_range(lo: usize, hi: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut v = lo;
    if v == 0 {
        out.push(0);
        v = 1;
    }
    while v <= hi {
        out.push(v);
        match v.checked_mul(2) {
            Some(n) => v = n,
            None => break,
        }
    }
    out
}

/// One size: digits with an optional `k`, `m` or `g` suffix.
fn parse_size(s: &str) -> Result<usize, String> {
    let bad = || format!("invalid size '{s}': {SIZE_HELP}");
    let (digits, unit) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1024),
        Some((i, 'm' | 'M')) => (&s[..i], 1024 * 1024),
        Some((i, 'g' | 'G')) => (&s[..i], 1024 * 1024 * 1024),
        _ => (s, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n: usize = digits.parse().map_err(|_| bad())?;
    let bytes = n.checked_mul(unit).ok_or_else(bad)?;
    if bytes > MAX_SIZE {
        return Err(format!("size '{s}' is larger than the limit of 1 GiB"));
    }
    Ok(bytes)
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() && v < 1e6 => Ok(v),
        _ => Err(format!("'{s}' is not a positive number of seconds")),
    }
}

/// Cores to pin the two sides to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuSpec {
    pub server: usize,
    /// `None`: the core after the server's.
    pub client: Option<usize>,
}

impl fmt::Display for CpuSpec {
    /// As `--cpu` takes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.client {
            Some(c) => write!(f, "{},{c}", self.server),
            None => write!(f, "{}", self.server),
        }
    }
}

fn parse_cpus(s: &str) -> Result<CpuSpec, String> {
    let core = |v: &str| {
        v.trim()
            .parse::<usize>()
            .map_err(|_| format!("invalid --cpu '{s}': expected a core number N or a pair N,M"))
    };
    match s.split_once(',') {
        Some((a, b)) => Ok(CpuSpec {
            server: core(a)?,
            client: Some(core(b)?),
        }),
        None => Ok(CpuSpec {
            server: core(s)?,
            client: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(s: &str) -> Vec<usize> {
        parse_sizes(s).unwrap().sizes
    }

    #[test]
    fn lists_and_suffixes() {
        assert_eq!(sizes("8,64,1k"), [8, 64, 1024]);
        assert_eq!(sizes("1m, 4K ,0"), [0, 4096, 1 << 20]);
        assert_eq!(sizes("64,8,64"), [8, 64]);
        assert_eq!(sizes("1g"), [1 << 30]);
    }

    #[test]
    fn ranges() {
        assert_eq!(sizes("1:8"), [1, 2, 4, 8]);
        assert_eq!(sizes("3:20"), [3, 6, 12]);
        assert_eq!(sizes("0:2"), [0, 1, 2]);
        assert_eq!(sizes("1:4m").len(), 23);
        assert_eq!(sizes("8,1k:4k"), [8, 1024, 2048, 4096]);
        let all = parse_sizes("all").unwrap();
        assert!(all.all);
        assert_eq!(all.sizes.first(), Some(&1));
        assert_eq!(all.sizes.last(), Some(&(4 << 20)));
    }

    #[test]
    fn bad_sizes_explain_the_syntax() {
        for bad in [
            "", "abc", "4x", "k", "1,,2", "8:1", "-1", "g", "1.5k", "4097m",
        ] {
            let e = parse_sizes(bad).unwrap_err();
            assert!(e.contains(bad) || bad.is_empty(), "{bad}: {e}");
        }
        assert!(parse_sizes("4x").unwrap_err().contains("1:4m"));
    }

    #[test]
    fn cpus() {
        assert_eq!(
            parse_cpus("3").unwrap(),
            CpuSpec {
                server: 3,
                client: None
            }
        );
        assert_eq!(
            parse_cpus("0,1").unwrap(),
            CpuSpec {
                server: 0,
                client: Some(1)
            }
        );
        assert!(parse_cpus("a").is_err());
    }

    #[test]
    fn sizes_per_benchmark() {
        assert_eq!(
            Test::MsgLat.sizes(None).unwrap().sizes.last(),
            Some(&(64 << 10))
        );
        assert_eq!(
            Test::PktBw.sizes(None).unwrap().sizes.last(),
            Some(&(1 << 20))
        );
        assert_eq!(Test::SclRate.sizes(None).unwrap().sizes, [8]);
        let given = parse_sizes("8").unwrap();
        assert_eq!(Test::SclLat.sizes(Some(&given)).unwrap().sizes, [8]);
        let e = Test::SclLat
            .sizes(Some(&parse_sizes("16").unwrap()))
            .unwrap_err();
        assert!(e.contains("8 bytes"), "{e}");
        assert!(Test::SclLat
            .sizes(Some(&parse_sizes("all").unwrap()))
            .is_err());
        let given = parse_sizes("4m").unwrap();
        assert_eq!(Test::PktLat.sizes(Some(&given)).unwrap(), given);
        for t in Test::ALL {
            assert_eq!(Test::from_name(t.name()), Some(*t));
            assert_eq!(t.windowed(), t.metric() == Metric::Throughput);
        }
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
