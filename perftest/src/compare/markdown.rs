//! `summary.md`: the comparison as markdown tables, one per benchmark, then the runs and
//! their outcome, then the plots.

use super::runner::Outcome;
use super::{Point, Run};
use crate::cli::{CompareOpts, Metric, Test};
use crate::report::RunInfo;
use std::fmt::Write;

pub fn render(runs: &[Run], opts: &CompareOpts, info: &RunInfo, plots: &[String]) -> String {
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
    let tests: Vec<Test> = opts.tests();
    for &test in &tests {
        let of_test: Vec<&Run> = runs.iter().filter(|r| r.job.test == test).collect();
        let spreads = of_test.iter().any(|r| r.job.rounds > 1);
        match test.metric() {
            Metric::Latency => {
                let _ = writeln!(s, "## {test}: p50 latency (us)\n");
                let mut head = vec![
                    "provider",
                    "bytes",
                    "raw",
                    "MCAPI",
                    "MCAPI/raw",
                    "MCAPI-raw (us)",
                ];
                if spreads {
                    head.extend(["raw spread", "MCAPI spread"]);
                }
                table_head(&mut s, 1, &head);
                for run in &of_test {
                    for p in run.points() {
                        let mut row = vec![
                            run.provider().to_owned(),
                            p.size.to_string(),
                            num(p.raw, 3),
                            num(p.mcapi, 3),
                            num(p.ratio, 2),
                            signed(p.delta, 3),
                        ];
                        if spreads {
                            row.extend([range(p.raw_spread, 3), range(p.mcapi_spread, 3)]);
                        }
                        table_row(&mut s, &row);
                    }
                }
            }
            Metric::Throughput => {
                let _ = writeln!(s, "## {test}: bandwidth (MB/s) and message rate (Mmsg/s)\n");
                let mut head = vec![
                    "provider",
                    "bytes",
                    "raw MB/s",
                    "MCAPI MB/s",
                    "raw Mmsg/s",
                    "MCAPI Mmsg/s",
                    "MCAPI/raw",
                ];
                if spreads {
                    head.extend(["raw MB/s spread", "MCAPI MB/s spread"]);
                }
                table_head(&mut s, 1, &head);
                for run in &of_test {
                    for p in run.points() {
                        let mut row = throughput_row(run.provider(), &p);
                        if spreads {
                            row.extend([range(p.raw_spread, 2), range(p.mcapi_spread, 2)]);
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
        let outcome = match &run.outcome {
            Outcome::Done => "done".to_owned(),
            Outcome::NotRun(why) => format!("not run: {why}"),
            Outcome::Failed(why) => format!("failed: {why}"),
        };
        table_row(
            &mut s,
            &[
                run.job.test.name().to_owned(),
                run.provider().to_owned(),
                run.lines.len().to_string(),
                outcome,
            ],
        );
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

fn throughput_row(provider: &str, p: &Point) -> Vec<String> {
    vec![
        provider.to_owned(),
        p.size.to_string(),
        num(p.raw, 2),
        num(p.mcapi, 2),
        num(p.raw_rate, 4),
        num(p.mcapi_rate, 4),
        num(p.ratio, 2),
    ]
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
