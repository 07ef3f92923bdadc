//! The incumbent beside raw libfabric and MCAPI: Open MPI's ping-pong and windowed bandwidth
//! (`perftest/mpi/mcapi_mpi_baseline.c`, built with `mpicc -O2` into the output directory
//! when the comparison starts), run with `mpirun -n 2` over the transport that matches the
//! provider, pinned so that it is Open MPI's own and not libfabric again (Debian's Open MPI
//! also has `mtl ofi` and `btl ofi`):
//!
//! - `shm`: `--mca pml ob1 --mca btl self,vader` (`self,sm` from Open MPI 5);
//! - `tcp`, `sockets`: `--mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo`.
//!
//! Only `msg-lat` (one-way latency, half the round trip) and `msg-bw` (windows of `MPI_Isend`,
//! one acknowledgement per window) have an MPI counterpart, at the sizes, iterations, warmup,
//! window, time limit and rounds of the libfabric runs. Without `mpicc` or `mpirun`, or with
//! another MPI whose transport cannot be pinned, the baseline is "not run" with the reason;
//! nothing else changes.
//!
//! Each MPI point runs right after the libfabric run of the same benchmark and provider, as
//! a run of its own: starting `mpirun` per round would cost more than a round. Its rounds
//! are reported as the libfabric rounds are: medians of p50 and MB/s, spread min..max.

use super::runner::Child;
use super::Job;
use crate::cli::{CompareOpts, Metric, Test};
use crate::report::RunInfo;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The baseline's source, built at run time by the MPI found here.
const SOURCE: &str = include_str!("../../mpi/mcapi_mpi_baseline.c");
const NAME: &str = "mcapi_mpi_baseline";

/// Open MPI, found and the baseline built.
#[derive(Clone, Debug)]
pub struct Mpi {
    exe: PathBuf,
    mpirun: PathBuf,
    /// `Open MPI 4.1.4`.
    pub version: String,
    major: u32,
}

/// An Open MPI transport pinned for a libfabric provider.
#[derive(Clone, Debug, PartialEq)]
pub struct Pinned {
    /// `pml ob1, btl self,vader`: for the tables and the JSON lines.
    pub label: String,
    mca: Vec<(&'static str, &'static str)>,
}

/// The MPI pattern of a benchmark: `lat` or `bw`, or none (packet and scalar channels have no
/// MPI counterpart).
pub fn pattern(test: Test) -> Option<&'static str> {
    match test {
        Test::MsgLat => Some("lat"),
        Test::MsgBw => Some("bw"),
        _ => None,
    }
}

/// `name` in `$PATH`.
fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// `mpirun (Open MPI) 4.1.4` -> (`Open MPI 4.1.4`, 4); `None` for another MPI.
fn open_mpi_version(text: &str) -> Option<(String, u32)> {
    let line = text.lines().find(|l| l.contains("(Open MPI)"))?;
    let version = line.rsplit(' ').next()?.trim();
    let major = version.split('.').next()?.parse().ok()?;
    Some((format!("Open MPI {version}"), major))
}

/// Finds `mpicc` and `mpirun` and builds the baseline in `dir`; the reason when it cannot
/// run here.
pub fn prepare(dir: &Path) -> Result<Mpi, String> {
    let missing: Vec<&str> = ["mpicc", "mpirun"]
        .into_iter()
        .filter(|n| find_in_path(n).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{} not found (Debian: apt-get install openmpi-bin libopenmpi-dev)",
            missing.join(" and ")
        ));
    }
    let mpirun = find_in_path("mpirun").expect("found above");
    let out = Command::new(&mpirun)
        .arg("--version")
        .output()
        .map_err(|e| format!("running mpirun --version: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (version, major) = open_mpi_version(&text).ok_or_else(|| {
        format!(
            "mpirun is not Open MPI's ({}): its transport cannot be pinned",
            text.lines().next().unwrap_or("no version").trim()
        )
    })?;
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let src = dir.join(format!("{NAME}.c"));
    let exe = dir.join(NAME);
    std::fs::write(&src, SOURCE).map_err(|e| format!("writing {}: {e}", src.display()))?;
    let out = Command::new("mpicc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .map_err(|e| format!("running mpicc: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
        return Err(format!(
            "mpicc -O2 {} failed: {}",
            src.display(),
            last.trim()
        ));
    }
    Ok(Mpi {
        exe,
        mpirun,
        version,
        major,
    })
}

impl Mpi {
    /// Open MPI's own transport for a libfabric provider (as libfabric names it), if one
    /// matches.
    pub fn pinned(&self, provider: &str) -> Option<Pinned> {
        // Open MPI 5 renamed the shared-memory BTL from vader to sm.
        let shm = if self.major >= 5 {
            "self,sm"
        } else {
            "self,vader"
        };
        let mca = match provider.split(';').next()? {
            "shm" => vec![("pml", "ob1"), ("btl", shm)],
            "tcp" | "sockets" => vec![
                ("pml", "ob1"),
                ("btl", "self,tcp"),
                ("btl_tcp_if_include", "lo"),
            ],
            _ => return None,
        };
        let label = format!("pml ob1, btl {}", mca[1].1);
        Some(Pinned { label, mca })
    }

    /// The `mpirun` command of a point: `job`'s sizes and bounds, `opts`' iterations, warmup
    /// and window.
    pub fn child(&self, job: &Job, pinned: &Pinned, opts: &CompareOpts) -> Option<Child> {
        let pattern = pattern(job.test)?;
        let mut args: Vec<String> = [
            "-n",
            "2",
            "--oversubscribe",
            // Open MPI refuses root without it; harmless otherwise.
            "--allow-run-as-root",
            // Each rank busy-polls: binding both to one core would starve one.
            "--bind-to",
            "none",
        ]
        .map(String::from)
        .to_vec();
        for (k, v) in &pinned.mca {
            args.extend(["--mca".into(), (*k).into(), (*v).into()]);
        }
        if let Some(cpu) = opts.cpu {
            // The program pins its ranks itself (rank 0 is the client), as perftest's
            // --cpu pins its server and client: mpirun's own binding sorts a cpu list.
            let client = cpu.client.unwrap_or(cpu.server + 1);
            args.extend([
                "-x".into(),
                format!("PERFTEST_MPI_CPUS={client},{}", cpu.server),
            ]);
        }
        let sizes: Vec<String> = job.sizes.iter().map(usize::to_string).collect();
        args.push(self.exe.display().to_string());
        args.extend([
            pattern.into(),
            sizes.join(","),
            opts.iterations.to_string(),
            opts.warmup.to_string(),
            opts.window.to_string(),
            job.max_time.as_secs_f64().to_string(),
            job.rounds.to_string(),
        ]);
        Some(Child {
            program: self.mpirun.clone(),
            shown: "mpirun".into(),
            args,
            json_only: false,
        })
    }
}

/// What an MPI point is labelled with in its results.
pub struct Labels<'a> {
    pub test: Test,
    /// The libfabric provider it stands beside.
    pub provider: &'a str,
    pub pinned: &'a Pinned,
    pub mpi_version: &'a str,
    pub opts: &'a CompareOpts,
    pub info: &'a RunInfo,
}

/// The median of `v` (the mean of the middle two for an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One size of the baseline's output (`{"size":8,"rounds":[...]}`) as a `results.jsonl` line
/// with `"transport":"mpi"` and the benchmarks' field names (unprefixed): iterations and time
/// are totals over the rounds, p50, MB/s and messages/s the medians of the rounds with their
/// spread (several rounds), min and max the extremes, p99 and p99.9 the highest of the
/// rounds'. `None` for a line that is not the baseline's.
pub fn record(line: &Value, l: &Labels<'_>) -> Option<Value> {
    let size = line["size"].as_u64()?;
    let rounds = line["rounds"].as_array().filter(|r| !r.is_empty())?;
    let latency = l.test.metric() == Metric::Latency;
    // A ping-pong iteration moves two messages, a streaming one one.
    let xfers = if latency { 2.0 } else { 1.0 };
    let mut iters = 0u64;
    let mut time = 0.0;
    let (mut mb, mut mmsg, mut p50) = (Vec::new(), Vec::new(), Vec::new());
    let (mut min, mut p99, mut p999, mut max) = (f64::MAX, 0f64, 0f64, 0f64);
    for r in rounds {
        let n = r["iterations_done"].as_u64()?;
        let t = r["time_s"].as_f64()?.max(1e-9);
        iters += n;
        time += t;
        mb.push(n as f64 * xfers * size as f64 / t / 1e6);
        mmsg.push(n as f64 * xfers / t / 1e6);
        if latency {
            min = min.min(r["lat_us_min"].as_f64()?);
            p50.push(r["lat_us_p50"].as_f64()?);
            p99 = p99.max(r["lat_us_p99"].as_f64()?);
            p999 = p999.max(r["lat_us_p999"].as_f64()?);
            max = max.max(r["lat_us_max"].as_f64()?);
        }
    }
    let round = |v: f64, digits: i32| {
        let f = 10f64.powi(digits);
        Value::from((v * f).round() / f)
    };
    let lat = |v: f64| if latency { round(v, 3) } else { Value::Null };
    let spread = |v: &[f64], digits| {
        let (lo, hi) = v
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        if v.len() > 1 {
            Value::from(vec![round(lo, digits), round(hi, digits)])
        } else {
            Value::Null
        }
    };
    let fields: Vec<(&str, Value)> = vec![
        ("test", l.test.name().into()),
        ("transport", "mpi".into()),
        ("provider", l.provider.into()),
        ("mpi", l.mpi_version.into()),
        ("mpi_transport", l.pinned.label.clone().into()),
        ("size", size.into()),
        ("iterations", l.opts.iterations.into()),
        (
            "window",
            if latency {
                Value::Null
            } else {
                l.opts.window.into()
            },
        ),
        ("rounds", rounds.len().into()),
        ("iterations_done", iters.into()),
        ("time_s", round(time, 6)),
        ("lat_us_min", lat(min)),
        (
            "lat_us_p50",
            if latency {
                round(median(p50.clone()), 3)
            } else {
                Value::Null
            },
        ),
        ("lat_us_p99", lat(p99)),
        ("lat_us_p999", lat(p999)),
        ("lat_us_max", lat(max)),
        ("mb_s", round(median(mb.clone()), 3)),
        ("mmsg_s", round(median(mmsg), 6)),
        (
            "lat_us_p50_spread",
            if latency {
                spread(&p50, 3)
            } else {
                Value::Null
            },
        ),
        ("mb_s_spread", spread(&mb, 3)),
        ("libfabric_version", l.info.libfabric_version.clone().into()),
        ("host", l.info.host.clone().into()),
        ("date", l.info.date.clone().into()),
        ("git_sha", l.info.git_sha.into()),
    ];
    Some(Value::Object(
        fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> CompareOpts {
        use clap::Parser;
        #[derive(Parser)]
        struct P {
            #[command(flatten)]
            c: CompareOpts,
        }
        P::parse_from(["p", "-I", "1000", "-W", "16"]).c
    }

    fn info() -> RunInfo {
        RunInfo {
            libfabric_version: "1.17".into(),
            host: "h".into(),
            date: "d".into(),
            git_sha: "abc",
            ..Default::default()
        }
    }

    fn mpi(major: u32) -> Mpi {
        Mpi {
            exe: "/x/mcapi_mpi_baseline".into(),
            mpirun: "/usr/bin/mpirun".into(),
            version: format!("Open MPI {major}.0.0"),
            major,
        }
    }

    #[test]
    fn versions() {
        let v = open_mpi_version("mpirun (Open MPI) 4.1.4\n\nReport bugs to ...\n");
        assert_eq!(v, Some(("Open MPI 4.1.4".into(), 4)));
        assert_eq!(open_mpi_version("HYDRA build details:\n"), None);
    }

    #[test]
    fn transports_are_open_mpis_own() {
        let m = mpi(4);
        let shm = m.pinned("shm").unwrap();
        assert_eq!(shm.label, "pml ob1, btl self,vader");
        assert_eq!(mpi(5).pinned("shm").unwrap().label, "pml ob1, btl self,sm");
        let tcp = m.pinned("tcp;ofi_rxm").unwrap();
        assert!(tcp.mca.contains(&("btl_tcp_if_include", "lo")), "{tcp:?}");
        assert_eq!(m.pinned("sockets").unwrap(), tcp);
        assert_eq!(m.pinned("verbs;ofi_rxm"), None);
        assert_eq!(m.pinned("udp;ofi_rxd"), None);
    }

    #[test]
    fn command_line() {
        let job = Job {
            test: Test::MsgBw,
            provider: "tcp".into(),
            sizes: vec![8, 4096],
            all_sizes: false,
            rounds: 3,
            max_time: std::time::Duration::from_millis(50),
        };
        let m = mpi(4);
        let pinned = m.pinned("tcp").unwrap();
        let c = m.child(&job, &pinned, &opts()).unwrap();
        let line = c.args.join(" ");
        assert!(
            line.starts_with("-n 2 --oversubscribe --allow-run-as-root --bind-to none "),
            "{line}"
        );
        assert!(
            line.contains("--mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo "),
            "{line}"
        );
        assert!(
            line.ends_with("/x/mcapi_mpi_baseline bw 8,4096 1000 20 16 0.05 3"),
            "{line}"
        );
        // --cpu pins MPI's ranks as it pins perftest's processes (server, client).
        use clap::Parser;
        #[derive(Parser)]
        struct P {
            #[command(flatten)]
            c: CompareOpts,
        }
        let pinned_opts = P::parse_from(["p", "--cpu", "0,1"]).c;
        let line = m.child(&job, &pinned, &pinned_opts).unwrap().args.join(" ");
        assert!(line.contains(" -x PERFTEST_MPI_CPUS=1,0 "), "{line}");
        let pkt = Job {
            test: Test::PktBw,
            ..job
        };
        assert!(m.child(&pkt, &pinned, &opts()).is_none());
    }

    #[test]
    fn records_take_medians_of_the_rounds() {
        let line = serde_json::json!({"size": 1000, "rounds": [
            {"iterations_done": 100, "time_s": 0.001, "lat_us_min": 1.0, "lat_us_p50": 2.0,
             "lat_us_p99": 3.0, "lat_us_p999": 4.0, "lat_us_max": 5.0},
            {"iterations_done": 100, "time_s": 0.002, "lat_us_min": 0.5, "lat_us_p50": 4.0,
             "lat_us_p99": 6.0, "lat_us_p999": 7.0, "lat_us_max": 9.0},
            {"iterations_done": 50, "time_s": 0.001, "lat_us_min": 1.5, "lat_us_p50": 3.0,
             "lat_us_p99": 3.5, "lat_us_p999": 4.5, "lat_us_max": 5.5},
        ]});
        let (o, i, m) = (opts(), info(), mpi(4));
        let pinned = m.pinned("shm").unwrap();
        let l = Labels {
            test: Test::MsgLat,
            provider: "shm",
            pinned: &pinned,
            mpi_version: &m.version,
            opts: &o,
            info: &i,
        };
        let v = record(&line, &l).unwrap();
        assert_eq!(v["transport"], "mpi");
        assert_eq!(v["mpi_transport"], "pml ob1, btl self,vader");
        assert_eq!(v["iterations_done"], 250);
        assert_eq!(v["lat_us_p50"], 3.0);
        assert_eq!(v["lat_us_p50_spread"], serde_json::json!([2.0, 4.0]));
        assert_eq!(
            (v["lat_us_min"].clone(), v["lat_us_max"].clone()),
            (0.5.into(), 9.0.into())
        );
        assert_eq!(v["lat_us_p99"], 6.0);
        // Rounds' MB/s (two 1000-byte messages per iteration): 200, 100, 100.
        assert_eq!(v["mb_s"], 100.0);
        assert_eq!(v["mb_s_spread"], serde_json::json!([100.0, 200.0]));
        assert!(v["window"].is_null());

        let bw =
            serde_json::json!({"size": 8, "rounds": [{"iterations_done": 1000, "time_s": 0.001}]});
        let l = Labels {
            test: Test::MsgBw,
            ..l
        };
        let v = record(&bw, &l).unwrap();
        assert_eq!(v["mmsg_s"], 1.0);
        assert_eq!(v["mb_s"], 8.0);
        assert!(v["lat_us_p50"].is_null() && v["mb_s_spread"].is_null());
        assert_eq!(v["window"], 16);
        assert!(record(&serde_json::json!({"size": 8}), &l).is_none());
    }
}
