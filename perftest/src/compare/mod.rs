//! `perftest compare`: every benchmark over every provider offered here, MCAPI beside raw
//! libfabric and, for messages, beside Open MPI ([`mpi`]), into one directory:
//!
//! - `summary.md`: per benchmark, a markdown table (provider, size, raw, MCAPI, MPI, ratios,
//!   spread over the rounds), the list of runs and their outcome ("not run" for a provider
//!   that lacks what a benchmark needs, or for MPI when it is not installed), links to the
//!   plots; also printed on stdout;
//! - `results.jsonl`: every run's JSON lines, as the benchmarks print them with `--json`, and
//!   the MPI baseline's (`"transport":"mpi"`, same field names);
//! - `<test>.svg` (all providers) and `<test>-<provider>.svg` (one provider): the headline
//!   number against the message size, MCAPI solid, raw libfabric dashed, MPI dotted;
//! - `logs/<test>-<provider>.log` (and `-mpi.log`): each run's command line and stderr;
//! - `mpi/`: the MPI baseline's source and the program built from it.
//!
//! Each point of the matrix is a `perftest <test> --local --json` child process, so a provider that crashes or stalls costs its own run and nothing else:
//! every point is bounded by `--max-time` per size, layer and round, and a run that reports
//! no size for that long (plus some slack) is stopped and reported as failed.
//!
//! A new benchmark plugs in through [`Test::ALL`] and [`Test::metric`]: the matrix, the
//! tables and the plots read the JSON fields of its metric.

mod markdown;
mod mpi;
mod plot;
mod runner;

use crate::cli::{CompareOpts, Metric, Test};
use crate::error::{Context, Error, Result, EXIT_NOT_RUN};
use crate::report::{Progress, RunInfo};
use runner::{Child, Outcome};
use serde_json::Value;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

/// One point of the matrix: a benchmark over a provider.
pub struct Job {
    pub test: Test,
    /// As given to `-p` (libfabric's full name when compare chose it).
    pub provider: String,
    pub sizes: Vec<usize>,
    /// The sizes are `-S all`'s.
    pub all_sizes: bool,
    pub rounds: u32,
    pub max_time: Duration,
}

impl Job {
    /// The benchmark's command line.
    fn args(&self, opts: &CompareOpts, oob_port: u16) -> Vec<String> {
        let sizes = if self.all_sizes {
            "all".to_owned()
        } else {
            let s: Vec<String> = self.sizes.iter().map(usize::to_string).collect();
            s.join(",")
        };
        let mut args = vec![
            self.test.name().to_owned(),
            "--local".into(),
            "--json".into(),
            "-p".into(),
            self.provider.clone(),
            "-S".into(),
            sizes,
            "-I".into(),
            opts.iterations.to_string(),
            "-w".into(),
            opts.warmup.to_string(),
            "-W".into(),
            opts.window.to_string(),
            "--max-time".into(),
            self.max_time.as_secs_f64().to_string(),
            "--rounds".into(),
            self.rounds.to_string(),
            "--oob-port".into(),
            oob_port.to_string(),
        ];
        if let Some(cpu) = opts.cpu {
            args.extend(["--cpu".into(), cpu.to_string()]);
        }
        args
    }
}

/// A finished point of the matrix.
pub struct Run {
    pub job: Job,
    pub outcome: Outcome,
    /// The benchmark's JSON lines, one per size.
    pub lines: Vec<Value>,
    /// The MPI baseline beside it; `None` where MPI has no counterpart (packet and scalar
    /// channels, a provider without a matching Open MPI transport).
    pub mpi: Option<MpiRun>,
}

/// The MPI baseline of a benchmark over a provider.
pub struct MpiRun {
    /// Open MPI's pinned transport (`pml ob1, btl self,vader`); empty when MPI is not here.
    pub transport: String,
    pub outcome: Outcome,
    /// One `results.jsonl` line per size (see [`mpi::record`]).
    pub lines: Vec<Value>,
}

/// One size of a run: the headline numbers of both layers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Point {
    pub size: u64,
    pub raw: Option<f64>,
    pub mcapi: Option<f64>,
    pub raw_spread: Option<(f64, f64)>,
    pub mcapi_spread: Option<(f64, f64)>,
    /// Million messages per second (throughput tests).
    pub raw_rate: Option<f64>,
    pub mcapi_rate: Option<f64>,
    pub ratio: Option<f64>,
    /// MCAPI minus raw, microseconds (latency tests).
    pub delta: Option<f64>,
    /// The MPI baseline: headline number, its spread, message rate.
    pub mpi: Option<f64>,
    pub mpi_spread: Option<(f64, f64)>,
    pub mpi_rate: Option<f64>,
    /// MCAPI over MPI (p50 latency, or MB/s).
    pub mcapi_mpi: Option<f64>,
}

impl Run {
    /// The provider as libfabric names it (from the results), else as asked for.
    pub fn provider(&self) -> &str {
        self.lines
            .first()
            .and_then(|v| v["provider"].as_str())
            .unwrap_or(&self.job.provider)
    }

    pub fn points(&self) -> Vec<Point> {
        let key = match self.job.test.metric() {
            Metric::Latency => "lat_us_p50",
            Metric::Throughput => "mb_s",
        };
        let num = |v: &Value, k: &str| v[k].as_f64().filter(|x| x.is_finite());
        let spread = |v: &Value, k: &str| {
            let a = v[k].as_array()?;
            Some((a.first()?.as_f64()?, a.get(1)?.as_f64()?))
        };
        let mut points: Vec<Point> = self
            .lines
            .iter()
            .filter_map(|v| {
                Some(Point {
                    size: v["size"].as_u64()?,
                    raw: num(v, &format!("raw_{key}")),
                    mcapi: num(v, key),
                    raw_spread: spread(v, &format!("raw_{key}_spread")),
                    mcapi_spread: spread(v, &format!("{key}_spread")),
                    raw_rate: num(v, "raw_mmsg_s"),
                    mcapi_rate: num(v, "mmsg_s"),
                    ratio: num(v, "ratio"),
                    delta: num(v, "delta_us"),
                    ..Point::default()
                })
            })
            .collect();
        for v in self.mpi.iter().flat_map(|m| &m.lines) {
            let Some(size) = v["size"].as_u64() else {
                continue;
            };
            let at = match points.iter().position(|p| p.size == size) {
                Some(i) => i,
                None => {
                    points.push(Point {
                        size,
                        ..Point::default()
                    });
                    points.len() - 1
                }
            };
            let p = &mut points[at];
            p.mpi = num(v, key);
            p.mpi_spread = spread(v, &format!("{key}_spread"));
            p.mpi_rate = num(v, "mmsg_s");
            p.mcapi_mpi = match (p.mcapi, p.mpi) {
                (Some(a), Some(b)) if b > 0.0 => Some(a / b),
                _ => None,
            };
        }
        points.sort_by_key(|p| p.size);
        points
    }
}

/// Every provider libfabric offers here, shm first.
fn default_providers() -> Vec<String> {
    let mut all = mcapi_ofi::available_providers(&mcapi_ofi::Hints::new());
    all.sort_by_key(|p| p != "shm");
    all
}

/// `tcp;ofi_rxm` -> `tcp-ofi_rxm`, for file names.
pub fn slug(provider: &str) -> String {
    provider
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// Runs the matrix and writes the report; returns the exit code: 0 when some run produced
/// results, 61 when nothing could run here, 1 when every run failed.
pub fn run(opts: &CompareOpts) -> Result<i32> {
    let providers = if opts.providers.is_empty() {
        default_providers()
    } else {
        opts.providers.clone()
    };
    if providers.is_empty() {
        return Err(Error::NotRun("libfabric offers no provider here".into()));
    }
    let dir = &opts.output;
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).context(format!("creating {}", logs.display()))?;
    let info = RunInfo::collect();
    let tests = opts.tests();
    let mpi_here = tests
        .iter()
        .any(|&t| mpi::pattern(t).is_some())
        .then(|| mpi::prepare(&dir.join("mpi")));
    let total = providers.len() * tests.len();
    let mut progress = Progress::new();
    let mut runs = Vec::new();
    for provider in &providers {
        for &test in &tests {
            let spec = opts.sizes(test);
            let job = Job {
                test,
                provider: provider.clone(),
                sizes: spec.sizes,
                all_sizes: spec.all,
                rounds: opts.rounds(test),
                max_time: Duration::from_secs_f64(opts.max_time),
            };
            // Three ports per run (bootstrap and two MCAPI nodes), a fresh set each time.
            let step = u16::try_from(3 * runs.len()).unwrap_or(u16::MAX);
            let port = opts
                .oob_port
                .checked_add(step)
                .filter(|&p| p <= u16::MAX - 3)
                .unwrap_or(opts.oob_port);
            let log = logs.join(format!("{test}-{}.log", slug(provider)));
            let label = format!(
                "perftest compare ({}/{total}): {test} over {provider}",
                runs.len() + 1
            );
            if !progress.on_terminal() {
                eprintln!("{label}");
            }
            let child = Child::perftest(job.args(opts, port))?;
            let result = runner::run(&job, &child, &log, &mut progress, &label)?;
            progress.clear();
            let mut run = Run {
                job,
                outcome: result.outcome,
                lines: result.lines,
                mpi: None,
            };
            // Right after the libfabric run, so that both see the machine alike.
            run.mpi = match &mpi_here {
                Some(m) if mpi::pattern(test).is_some() => {
                    mpi_run(m, &run, opts, &info, &logs, &mut progress, &label)?
                }
                _ => None,
            };
            runs.push(run);
        }
    }

    let mut jsonl = String::new();
    for r in &runs {
        for v in r.lines.iter().chain(r.mpi.iter().flat_map(|m| &m.lines)) {
            jsonl += &format!("{v}\n");
        }
    }
    write(&dir.join("results.jsonl"), &jsonl)?;
    let plots = plot::write_all(dir, &runs)?;
    // Open MPI's version, or why it did not run; `None` when no benchmark has an MPI side.
    let mpi_note = mpi_here
        .as_ref()
        .map(|r| r.as_ref().map(|m| m.version.clone()).map_err(Clone::clone));
    let summary = markdown::render(&runs, opts, &info, &plots, mpi_note.as_ref());
    write(&dir.join("summary.md"), &summary)?;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(summary.as_bytes());
    let _ = out.flush();
    eprintln!(
        "perftest compare: wrote {} (summary.md, results.jsonl, {} plots, logs/)",
        dir.display(),
        plots.len()
    );

    let produced = runs.iter().any(|r| !r.lines.is_empty());
    let all_not_run = runs.iter().all(|r| matches!(r.outcome, Outcome::NotRun(_)));
    Ok(match (produced, all_not_run) {
        (true, _) => 0,
        (false, true) => EXIT_NOT_RUN,
        (false, false) => 1,
    })
}

/// Runs the MPI baseline beside `run` (the libfabric run of the same benchmark and
/// provider): "not run" with the reason when MPI is not usable here, `None` when no Open MPI
/// transport matches the provider.
fn mpi_run(
    mpi: &std::result::Result<mpi::Mpi, String>,
    run: &Run,
    opts: &CompareOpts,
    info: &RunInfo,
    logs: &Path,
    progress: &mut Progress,
    label: &str,
) -> Result<Option<MpiRun>> {
    let m = match mpi {
        Ok(m) => m,
        Err(why) => {
            return Ok(Some(MpiRun {
                transport: String::new(),
                outcome: Outcome::NotRun(why.clone()),
                lines: Vec::new(),
            }))
        }
    };
    let provider = run.provider();
    let Some(pinned) = m.pinned(provider) else {
        return Ok(None);
    };
    let Some(child) = m.child(&run.job, &pinned, opts) else {
        return Ok(None);
    };
    let log = logs.join(format!("{}-{}-mpi.log", run.job.test, slug(provider)));
    let label = format!("{label}, MPI baseline");
    let result = runner::run(&run.job, &child, &log, progress, &label)?;
    progress.clear();
    let labels = mpi::Labels {
        test: run.job.test,
        provider,
        pinned: &pinned,
        mpi_version: &m.version,
        opts,
        info,
    };
    let lines: Vec<Value> = result
        .lines
        .iter()
        .filter_map(|v| mpi::record(v, &labels))
        .collect();
    let outcome = match result.outcome {
        Outcome::Done if lines.len() < run.job.sizes.len() => Outcome::Failed(format!(
            "{} of {} sizes reported (see {})",
            lines.len(),
            run.job.sizes.len(),
            log.display()
        )),
        o => o,
    };
    Ok(Some(MpiRun {
        transport: pinned.label,
        outcome,
        lines,
    }))
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).context(format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs() {
        assert_eq!(slug("tcp;ofi_rxm"), "tcp-ofi_rxm");
        assert_eq!(slug("shm"), "shm");
    }

    #[test]
    fn points_from_json_lines() {
        let line = |size: u64| {
            serde_json::json!({
                "test": "msg-lat", "provider": "tcp;ofi_rxm", "size": size,
                "lat_us_p50": 3.0, "raw_lat_us_p50": 2.0, "ratio": 1.5, "delta_us": 1.0,
                "lat_us_p50_spread": [2.5, 3.5], "raw_lat_us_p50_spread": null,
                "mmsg_s": 0.1, "raw_mmsg_s": 0.2,
            })
        };
        let run = Run {
            job: Job {
                test: Test::MsgLat,
                provider: "tcp".into(),
                sizes: vec![8, 64],
                all_sizes: false,
                rounds: 3,
                max_time: Duration::from_millis(10),
            },
            outcome: Outcome::Done,
            lines: vec![line(8), line(64)],
            mpi: None,
        };
        assert_eq!(run.provider(), "tcp;ofi_rxm");
        let p = run.points();
        assert_eq!(p.len(), 2);
        assert_eq!(p[1].size, 64);
        assert_eq!((p[0].raw, p[0].mcapi), (Some(2.0), Some(3.0)));
        assert_eq!(p[0].mcapi_spread, Some((2.5, 3.5)));
        assert_eq!(p[0].raw_spread, None);
        assert_eq!((p[0].ratio, p[0].delta), (Some(1.5), Some(1.0)));
    }
}
