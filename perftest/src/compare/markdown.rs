//! `summary.md`: the comparison as markdown tables, one per benchmark, then the runs and
//! their outcome, then the plots. The MPI columns say "n/a" where MPI has no counterpart and
//! "not run" where MPI is not usable here (the reason is under the title and in the runs).

use super::runner::Outcome;
use super::{mpi, Point, Run};
use crate::cli::{CompareOpts, Metric, Test};
use crate::report::RunInfo;
use std::fmt::Write;

/// `mpi`: Open MPI's version, or why the baseline did not run; `None` when no benchmark has
/// an MPI counterpart.
pub fn render(
    runs: &[Run],
    opts: &CompareOpts,
    info: &RunInfo,
    plots: &[String],
    mpi: Option<&Result<String, String>>,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# perftest compare: MCAPI beside raw libfabric\n");
    let _ = writeln!(
        s,
        "Host `{}`, {} (UTC), libfabric {}, perftest {}. Each point: at most {} iterations \
         and {} s per size, layer and round, warmup {}; latency benchmarks {} round(s), \
         others {} (raw libfabric and MCAPI alternating; with several rounds the numbers are \
         the medians of the rounds and the spread is their min..max). Latency is half a round \
         trip (p50, microseconds); MB/s counts 10^6 bytes.\n",
        info.host,
        info.date,
        info.libfabric_version,
        info.git_sha,
        opts.iterations,
        opts.max_time,
        opts.warmup,
        opts.lat_rounds,
        opts.bw_rounds,
    );
    match mpi {
        Some(Ok(version)) => {
            let mut pinned: Vec<String> = Vec::new();
            for r in runs {
                if let Some(m) = r.mpi.as_ref().filter(|m| !m.transport.is_empty()) {
                    let p = format!("{} beside `{}`", r.provider(), m.transport);
                    if !pinned.contains(&p) {
                        pinned.push(p);
                    }
                }
            }
            let _ = writeln!(
                s,
                "MPI baseline (msg-lat, msg-bw): {version}, `mpirun -n 2` on this host with \
                 its own transport pinned ({}), same sizes, iterations, warmup, window, time \
                 limit and rounds, run right after the libfabric run of each point. \
                 n/a: no MPI counterpart (packet and scalar channels) or no Open MPI \
                 transport of its own for the provider.\n",
                if pinned.is_empty() {
                    "none matched the providers".to_owned()
                } else {
                    pinned.join("; ")
                }
            );
        }
        Some(Err(why)) => {
            let _ = writeln!(s, "MPI baseline: not run: {why}.\n");
        }
        None => {}
    }
    let tests: Vec<Test> = opts.tests();
    for &test in &tests {
        let of_test: Vec<&Run> = runs.iter().filter(|r| r.job.test == test).collect();
        let spreads = of_test.iter().any(|r| r.job.rounds > 1);
        // MPI's ratio, rate and spread columns only where MPI has a counterpart.
        let with_mpi = mpi::pattern(test).is_some();
        match test.metric() {
            Metric::Latency => {
                let _ = writeln!(s, "## {test}: p50 latency (us)\n");
                let mut head = vec!["provider", "bytes", "raw", "MCAPI", "MPI", "MCAPI/raw"];
                if with_mpi {
                    head.push("MCAPI/MPI");
                }
                head.push("MCAPI-raw (us)");
                if spreads {
                    head.extend(["raw spread", "MCAPI spread"]);
                    if with_mpi {
                        head.push("MPI spread");
                    }
                }
                table_head(&mut s, 1, &head);
                for run in &of_test {
                    for p in run.points() {
                        let mut row = vec![
                            run.provider().to_owned(),
                            p.size.to_string(),
                            num(p.raw, 3),
                            num(p.mcapi, 3),
                            mpi_cell(run, p.mpi.map(|v| format!("{v:.3}"))),
                            num(p.ratio, 2),
                        ];
                        if with_mpi {
                            row.push(mpi_cell(run, p.mcapi_mpi.map(|v| format!("{v:.2}"))));
                        }
                        row.push(signed(p.delta, 3));
                        if spreads {
                            row.extend([range(p.raw_spread, 3), range(p.mcapi_spread, 3)]);
                            if with_mpi {
                                row.push(mpi_cell(run, p.mpi_spread.map(|v| range(Some(v), 3))));
                            }
                        }
                        table_row(&mut s, &row);
                    }
                }
            }
            Metric::Throughput => {
                let _ = writeln!(s, "## {test}: bandwidth (MB/s) and message rate (Mmsg/s)\n");
                let mut head = vec!["provider", "bytes", "raw MB/s", "MCAPI MB/s", "MPI MB/s"];
                head.extend(["raw Mmsg/s", "MCAPI Mmsg/s"]);
                if with_mpi {
                    head.push("MPI Mmsg/s");
                }
                head.push("MCAPI/raw");
                if with_mpi {
                    head.push("MCAPI/MPI");
                }
                if spreads {
                    head.extend(["raw MB/s spread", "MCAPI MB/s spread"]);
                    if with_mpi {
                        head.push("MPI MB/s spread");
                    }
                }
                table_head(&mut s, 1, &head);
                for run in &of_test {
                    for p in run.points() {
                        let mut row = throughput_row(run, &p, with_mpi);
                        if spreads {
                            row.extend([range(p.raw_spread, 2), range(p.mcapi_spread, 2)]);
                            if with_mpi {
                                row.push(mpi_cell(run, p.mpi_spread.map(|v| range(Some(v), 2))));
                            }
                        }
                        table_row(&mut s, &row);
                    }
                }
            }
        }
        s.push('\n');
    }

    let _ = writeln!(s, "## Runs\n");
    table_head(&mut s, 4, &["benchmark", "provider", "sizes", "outcome"]);
    for run in runs {
        let outcome = outcome_text(&run.outcome);
        table_row(
            &mut s,
            &[
                run.job.test.name().to_owned(),
                run.provider().to_owned(),
                run.lines.len().to_string(),
                outcome,
            ],
        );
        if let Some(m) = &run.mpi {
            let provider = if m.transport.is_empty() {
                format!("{} (MPI)", run.provider())
            } else {
                format!("{} (MPI: {})", run.provider(), m.transport)
            };
            table_row(
                &mut s,
                &[
                    run.job.test.name().to_owned(),
                    provider,
                    m.lines.len().to_string(),
                    outcome_text(&m.outcome),
                ],
            );
        }
    }
    s.push('\n');
    if !plots.is_empty() {
        let _ = writeln!(s, "## Plots\n");
        for p in plots {
            let _ = writeln!(s, "![{p}]({p})");
        }
        s.push('\n');
    }
    s
}

fn outcome_text(o: &Outcome) -> String {
    match o {
        Outcome::Done => "done".to_owned(),
        Outcome::NotRun(why) => format!("not run: {why}"),
        Outcome::Failed(why) => format!("failed: {why}"),
    }
}

fn throughput_row(run: &Run, p: &Point, with_mpi: bool) -> Vec<String> {
    let mut row = vec![
        run.provider().to_owned(),
        p.size.to_string(),
        num(p.raw, 2),
        num(p.mcapi, 2),
        mpi_cell(run, p.mpi.map(|v| format!("{v:.2}"))),
        num(p.raw_rate, 4),
        num(p.mcapi_rate, 4),
    ];
    if with_mpi {
        row.push(mpi_cell(run, p.mpi_rate.map(|v| format!("{v:.4}"))));
    }
    row.push(num(p.ratio, 2));
    if with_mpi {
        row.push(mpi_cell(run, p.mcapi_mpi.map(|v| format!("{v:.2}"))));
    }
    row
}

/// An MPI figure of `run`, or why there is none: "n/a" (no counterpart), "not run", "failed".
fn mpi_cell(run: &Run, value: Option<String>) -> String {
    match (&run.mpi, value) {
        (None, _) => "n/a".into(),
        (Some(_), Some(v)) => v,
        (Some(m), None) => match m.outcome {
            Outcome::Done => "-".into(),
            Outcome::NotRun(_) => "not run".into(),
            Outcome::Failed(_) => "failed".into(),
        },
    }
}

fn num(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.digits$}"))
}

fn signed(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:+.digits$}"))
}

fn range(v: Option<(f64, f64)>, digits: usize) -> String {
    v.map_or_else(
        || "-".into(),
        |(lo, hi)| format!("{lo:.digits$}..{hi:.digits$}"),
    )
}

/// A table's header; `text_cols` leading columns are left-aligned, the others (numbers)
/// right-aligned.
fn table_head(s: &mut String, text_cols: usize, cols: &[&str]) {
    let _ = writeln!(s, "| {} |", cols.join(" | "));
    let rule: Vec<&str> = (0..cols.len())
        .map(|i| if i < text_cols { "---" } else { "---:" })
        .collect();
    let _ = writeln!(s, "|{}|", rule.join("|"));
}

fn table_row(s: &mut String, cells: &[String]) {
    let cells: Vec<String> = cells.iter().map(|c| c.replace('|', "\\|")).collect();
    let _ = writeln!(s, "| {} |", cells.join(" | "));
}

#[cfg(test)]
mod tests {
    use super::super::{Job, MpiRun};
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn run(test: Test, mpi: Option<MpiRun>) -> Run {
        let lat = test.metric() == Metric::Latency;
        let line = if lat {
            json!({"size": 8, "provider": "shm", "lat_us_p50": 2.0, "raw_lat_us_p50": 1.0,
                   "ratio": 2.0, "delta_us": 1.0})
        } else {
            json!({"size": 8, "provider": "shm", "mb_s": 30.0, "raw_mb_s": 40.0,
                   "mmsg_s": 3.0, "raw_mmsg_s": 4.0, "ratio": 0.75})
        };
        Run {
            job: Job {
                test,
                provider: "shm".into(),
                sizes: vec![8],
                all_sizes: false,
                rounds: 1,
                max_time: Duration::from_millis(10),
            },
            outcome: Outcome::Done,
            lines: vec![line],
            mpi,
        }
    }

    fn opts(tests: &str) -> CompareOpts {
        use clap::Parser;
        #[derive(Parser)]
        struct P {
            #[command(flatten)]
            c: CompareOpts,
        }
        P::parse_from(["p", "-t", tests, "--lat-rounds", "1"]).c
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

    #[test]
    fn mpi_columns_figures_not_run_and_na() {
        let done = MpiRun {
            transport: "pml ob1, btl self,vader".into(),
            outcome: Outcome::Done,
            lines: vec![json!({"size": 8, "transport": "mpi", "lat_us_p50": 0.5})],
        };
        let runs = [
            run(Test::MsgLat, Some(done)),
            run(Test::PktLat, None),
            run(
                Test::MsgBw,
                Some(MpiRun {
                    transport: String::new(),
                    outcome: Outcome::NotRun("mpicc not found".into()),
                    lines: Vec::new(),
                }),
            ),
        ];
        let version = Ok("Open MPI 4.1.4".to_owned());
        let md = render(
            &runs,
            &opts("msg-lat,pkt-lat,msg-bw"),
            &info(),
            &[],
            Some(&version),
        );
        for want in [
            "(shm beside `pml ob1, btl self,vader`)",
            "| provider | bytes | raw | MCAPI | MPI | MCAPI/raw | MCAPI/MPI | MCAPI-raw (us) |",
            "| shm | 8 | 1.000 | 2.000 | 0.500 | 2.00 | 4.00 | +1.000 |",
            "| provider | bytes | raw | MCAPI | MPI | MCAPI/raw | MCAPI-raw (us) |",
            "| shm | 8 | 1.000 | 2.000 | n/a | 2.00 | +1.000 |",
            "| shm | 8 | 40.00 | 30.00 | not run | 4.0000 | 3.0000 | not run | 0.75 | not run |",
            "| msg-lat | shm (MPI: pml ob1, btl self,vader) | 1 | done |",
            "| msg-bw | shm (MPI) | 0 | not run: mpicc not found |",
        ] {
            assert!(md.contains(want), "{want} missing from\n{md}");
        }
        let absent = Err("mpicc and mpirun not found".to_owned());
        let md = render(&runs[..1], &opts("msg-lat"), &info(), &[], Some(&absent));
        assert!(
            md.contains("MPI baseline: not run: mpicc and mpirun not found."),
            "{md}"
        );
    }
}
