//! Runs the built `perftest` binary end to end (server and client as real processes via
//! `--local`) on shm and tcp, and checks its error paths. The numbers (raw libfabric and
//! MCAPI, and their ratio) are only checked to be present and positive, not fast.
//!
//! The tests run one at a time (a static lock): each run busy-polls two processes, and a
//! 2-core machine cannot run several at once without starving them. Each uses its own
//! bootstrap port.

use serde_json::Value;
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());
const DEADLINE: Duration = Duration::from_secs(120);

/// Runs perftest with `args` to completion (killed after `DEADLINE`).
fn perftest(args: &[&str]) -> Output {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut child = Command::new(env!("CARGO_BIN_EXE_perftest"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start perftest");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > DEADLINE {
            child.kill().expect("kill our own child");
            panic!("perftest {args:?} did not finish within {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs a `--json` benchmark that must succeed; returns its JSON lines.
fn json_run(args: &[&str]) -> Vec<Value> {
    let out = perftest(args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "perftest {args:?} failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    stdout
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}\n{stderr}"))
        })
        .collect()
}

const COMMON: &[&str] = &[
    "test",
    "provider",
    "size",
    "iterations",
    "window",
    "ratio",
    "libfabric_version",
    "host",
    "date",
    "git_sha",
];
const PER_LAYER: &[&str] = &[
    "iterations_done",
    "time_s",
    "lat_us_min",
    "lat_us_p50",
    "lat_us_p99",
    "lat_us_p999",
    "lat_us_max",
    "mb_s",
    "mmsg_s",
];

fn positive(v: &Value, field: &str) -> f64 {
    let x = v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} is not a number in {v}"));
    assert!(x > 0.0, "{field} = {x} in {v}");
    x
}

/// Checks one result line: every field present, raw numbers positive, and the MCAPI half
/// (unprefixed) and `ratio` positive when `mcapi` (else null: the size is above MCAPI's limit).
fn check_line(v: &Value, test: &str, provider: &str, size: u64, latency: bool, mcapi: bool) {
    let obj = v.as_object().expect("a JSON object");
    for f in COMMON {
        assert!(obj.contains_key(*f), "{f} missing from {v}");
    }
    for f in PER_LAYER {
        assert!(obj.contains_key(*f), "{f} missing from {v}");
        assert!(
            obj.contains_key(&format!("raw_{f}")),
            "raw_{f} missing from {v}"
        );
        if !mcapi {
            assert!(v[*f].is_null(), "MCAPI field {f} should be null: {v}");
        }
    }
    assert_eq!(v["test"], test);
    assert_eq!(v["provider"], provider);
    assert_eq!(v["size"], size);
    if mcapi {
        positive(v, "ratio");
    } else {
        assert!(v["ratio"].is_null(), "{v}");
    }
    assert_eq!(v["libfabric_version"], "1.17");
    for f in ["host", "git_sha"] {
        assert!(!v[f].as_str().unwrap_or_default().is_empty(), "{f} in {v}");
    }
    let date = v["date"].as_str().expect("date");
    assert!(
        date.len() == 20 && date.ends_with('Z') && date.as_bytes()[10] == b'T',
        "{date}"
    );
    let layers: &[&str] = if mcapi { &["raw_", ""] } else { &["raw_"] };
    for prefix in layers {
        for f in ["iterations_done", "time_s", "mb_s", "mmsg_s"] {
            positive(v, &format!("{prefix}{f}"));
        }
        if latency {
            let lat: Vec<f64> = ["min", "p50", "p99", "p999", "max"]
                .iter()
                .map(|p| positive(v, &format!("{prefix}lat_us_{p}")))
                .collect();
            assert!(
                lat.windows(2).all(|w| w[0] <= w[1]),
                "{prefix} percentiles out of order: {v}"
            );
        } else {
            for p in ["min", "p50", "p99", "p999", "max"] {
                assert!(v[format!("{prefix}lat_us_{p}")].is_null(), "{v}");
            }
        }
    }
    if latency {
        assert!(v["window"].is_null());
    } else {
        assert!(v["window"].as_u64().is_some());
    }
}

fn latency_run(provider: &str, libfabric_name: &str, port: &str) {
    let lines = json_run(&[
        "msg-lat",
        "--local",
        "-p",
        provider,
        "-S",
        "8,4k",
        "-I",
        "200",
        "-w",
        "10",
        "--json",
        "--oob-port",
        port,
    ]);
    assert_eq!(lines.len(), 2, "{lines:?}");
    for (v, size) in lines.iter().zip([8, 4096]) {
        check_line(v, "msg-lat", libfabric_name, size, true, true);
        assert_eq!(v["iterations"], 200);
        assert_eq!(v["iterations_done"], 200);
    }
}

/// msg-bw at 64 B and, over MCAPI's 64 KiB limit, 128 KiB (raw only).
fn bandwidth_run(provider: &str, libfabric_name: &str, port: &str) {
    let lines = json_run(&[
        "msg-bw",
        "--local",
        "-p",
        provider,
        "-S",
        "64,128k",
        "-I",
        "2000",
        "-W",
        "32",
        "--json",
        "--oob-port",
        port,
    ]);
    assert_eq!(lines.len(), 2, "{lines:?}");
    for (v, size, mcapi) in [(&lines[0], 64, true), (&lines[1], 128 << 10, false)] {
        check_line(v, "msg-bw", libfabric_name, size, false, mcapi);
        assert_eq!(v["window"], 32);
    }
}

#[test]
fn shm_latency() {
    latency_run("shm", "shm", "47611");
}

#[test]
fn shm_bandwidth() {
    bandwidth_run("shm", "shm", "47612");
}

#[test]
fn tcp_latency() {
    latency_run("tcp", "tcp;ofi_rxm", "47613");
}

#[test]
fn tcp_bandwidth() {
    bandwidth_run("tcp", "tcp;ofi_rxm", "47614");
}

/// Two sizes of 40000 messages over one pair of endpoints: more than 65536, so mcapi's 16-bit
/// wire sequence numbers wrap; every iteration is done over both layers.
#[test]
fn mcapi_long_runs_cross_sequence_wraps() {
    let lines = json_run(&[
        "msg-bw",
        "--local",
        "-S",
        "8,16",
        "-I",
        "40000",
        "-W",
        "64",
        "--max-time",
        "60",
        "--json",
        "--oob-port",
        "47617",
    ]);
    assert_eq!(lines.len(), 2, "{lines:?}");
    for (v, size) in lines.iter().zip([8, 16]) {
        check_line(v, "msg-bw", "shm", size, false, true);
        assert_eq!(v["iterations_done"], 40000, "{v}");
        assert_eq!(v["raw_iterations_done"], 40000, "{v}");
    }
}

#[test]
fn table_output_by_default() {
    let out = perftest(&[
        "msg-lat",
        "--local",
        "-S",
        "64",
        "-I",
        "100",
        "-w",
        "0",
        "--oob-port",
        "47615",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let header = stdout.lines().nth(1).expect("column header");
    for col in [
        "bytes",
        "iters",
        "total",
        "time",
        "MB/sec",
        "usec/xfer",
        "p50",
        "p99.9",
    ] {
        assert!(header.contains(col), "{col} missing from {header}");
    }
    assert!(header.ends_with("ratio"), "{header}");
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .skip(2)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    assert_eq!(rows[0][..3], ["raw", "64", "100"], "{stdout}");
    assert_eq!(rows[1][..3], ["mcapi", "64", "100"], "{stdout}");
    // The raw row has no ratio; the MCAPI row ends with it.
    assert_eq!(rows[0].len() + 1, rows[1].len(), "{stdout}");
    let ratio: f64 = rows[1].last().unwrap().parse().expect("a ratio");
    assert!(ratio > 0.0, "{stdout}");
}

#[test]
fn absent_provider_is_not_run_and_lists_providers() {
    for args in [
        &["msg-lat", "--local", "-p", "nosuch", "--oob-port", "47616"][..],
        &["msg-bw", "-p", "nosuch", "--oob-port", "47616"][..],
    ] {
        let out = perftest(args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(61), "{args:?}: {stderr}");
        assert!(stderr.contains("not run"), "{stderr}");
        assert!(
            stderr.contains("nosuch") && stderr.contains("shm"),
            "{stderr}"
        );
    }
}

#[test]
fn bad_size_explains_the_syntax() {
    let out = perftest(&["msg-lat", "--local", "-S", "8,4x"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("invalid size '4x'"), "{stderr}");
    assert!(
        stderr.contains("1:4m") && stderr.contains("all"),
        "{stderr}"
    );
}

#[test]
fn unreachable_server_is_explained() {
    // Nothing listens on this port (a listener bound and closed just before).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
        .to_string();
    let out = perftest(&["msg-lat", "--oob-port", &port, "127.0.0.1"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot reach the perftest server"),
        "{stderr}"
    );
}

/// `--rounds`: raw and MCAPI alternate; p50 is the median of the rounds, with its spread.
#[test]
fn rounds_report_medians_and_spread() {
    let lines = json_run(&[
        "msg-lat",
        "--local",
        "-S",
        "8",
        "-I",
        "100",
        "-w",
        "5",
        "--rounds",
        "3",
        "--json",
        "--oob-port",
        "47618",
    ]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let v = &lines[0];
    check_line(v, "msg-lat", "shm", 8, true, true);
    assert_eq!(v["rounds"], 3);
    for prefix in ["", "raw_"] {
        assert_eq!(v[format!("{prefix}iterations_done")], 300, "{v}");
        let spread = v[format!("{prefix}lat_us_p50_spread")]
            .as_array()
            .unwrap_or_else(|| panic!("{prefix}lat_us_p50_spread in {v}"));
        let (lo, hi) = (spread[0].as_f64().unwrap(), spread[1].as_f64().unwrap());
        let p50 = positive(v, &format!("{prefix}lat_us_p50"));
        assert!(0.0 < lo && lo <= p50 && p50 <= hi, "{prefix}: {v}");
        assert!(v[format!("{prefix}mb_s_spread")].is_array(), "{v}");
    }
    let delta = v["delta_us"].as_f64().expect("delta_us");
    let (p50, raw_p50) = (positive(v, "lat_us_p50"), positive(v, "raw_lat_us_p50"));
    assert!((delta - (p50 - raw_p50)).abs() < 0.01, "{v}");
}

/// `compare` over shm, tcp and an absent provider, with tiny bounds: the table, the JSON
/// lines, the plots and the logs are written; the absent provider is "not run".
#[test]
fn compare_writes_table_results_and_plots() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("compare-smoke");
    let _ = std::fs::remove_dir_all(&dir);
    let out = perftest(&[
        "compare",
        "-p",
        "shm,tcp,nosuch",
        "-S",
        "8,1k",
        "-I",
        "300",
        "-w",
        "5",
        "--max-time",
        "0.02",
        "--lat-rounds",
        "2",
        "--oob-port",
        "47630",
        "-o",
        dir.to_str().expect("UTF-8 path"),
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .unwrap_or_else(|e| panic!("{name}: {e}\n{stdout}\n{stderr}"))
    };
    let summary = read("summary.md");
    assert_eq!(stdout, summary, "stdout is the summary");
    for want in [
        "## msg-lat",
        "## msg-bw",
        "| shm | 8 |",
        "| tcp;ofi_rxm | 1024 |",
    ] {
        assert!(summary.contains(want), "{want} missing from\n{summary}");
    }
    assert!(
        summary.contains("| msg-lat | nosuch | 0 | not run: "),
        "{summary}"
    );
    let lines: Vec<Value> = read("results.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    assert_eq!(lines.len(), 8, "{lines:?}");
    for v in &lines {
        let test = v["test"].as_str().expect("test");
        let provider = v["provider"].as_str().expect("provider");
        let size = v["size"].as_u64().expect("size");
        check_line(v, test, provider, size, test == "msg-lat", true);
        let rounds = if test == "msg-lat" { 2 } else { 1 };
        assert_eq!(v["rounds"], rounds, "{v}");
    }
    for svg in [
        "msg-lat.svg",
        "msg-bw.svg",
        "msg-lat-shm.svg",
        "msg-lat-tcp-ofi_rxm.svg",
        "msg-bw-shm.svg",
        "msg-bw-tcp-ofi_rxm.svg",
    ] {
        let body = read(svg);
        assert!(body.starts_with("<svg") && body.contains("MCAPI"), "{svg}");
        assert!(summary.contains(&format!("]({svg})")), "{svg} not linked");
    }
    assert!(read("logs/msg-lat-nosuch.log").contains("not available"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn compare_with_no_provider_here_is_not_run() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("compare-none");
    let out = perftest(&[
        "compare",
        "-p",
        "nosuch",
        "-t",
        "msg-lat",
        "-o",
        dir.to_str().expect("UTF-8 path"),
    ]);
    assert_eq!(out.status.code(), Some(61), "{}", text(&out.stderr));
    let summary = std::fs::read_to_string(dir.join("summary.md")).expect("summary.md");
    assert!(summary.contains("not run"), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}
