//! Runs the built `perftest` binary end to end (server and client as real processes via
//! `--local`) on shm and tcp, and checks its error paths. The numbers are only checked to be
//! present and positive, not fast.
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

/// Checks one result line: every field present, raw numbers positive, MCAPI half null.
fn check_line(v: &Value, test: &str, provider: &str, size: u64, latency: bool) {
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
        assert!(
            v[*f].is_null(),
            "MCAPI field {f} should be null for now: {v}"
        );
    }
    assert_eq!(v["test"], test);
    assert_eq!(v["provider"], provider);
    assert_eq!(v["size"], size);
    assert!(v["ratio"].is_null());
    assert_eq!(v["libfabric_version"], "1.17");
    for f in ["host", "git_sha"] {
        assert!(!v[f].as_str().unwrap_or_default().is_empty(), "{f} in {v}");
    }
    let date = v["date"].as_str().expect("date");
    assert!(
        date.len() == 20 && date.ends_with('Z') && date.as_bytes()[10] == b'T',
        "{date}"
    );
    positive(v, "raw_iterations_done");
    positive(v, "raw_time_s");
    positive(v, "raw_mb_s");
    positive(v, "raw_mmsg_s");
    if latency {
        let lat: Vec<f64> = ["min", "p50", "p99", "p999", "max"]
            .iter()
            .map(|p| positive(v, &format!("raw_lat_us_{p}")))
            .collect();
        assert!(
            lat.windows(2).all(|w| w[0] <= w[1]),
            "percentiles out of order: {v}"
        );
        assert!(v["window"].is_null());
    } else {
        for p in ["min", "p50", "p99", "p999", "max"] {
            assert!(v[format!("raw_lat_us_{p}")].is_null(), "{v}");
        }
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
        check_line(v, "msg-lat", libfabric_name, size, true);
        assert_eq!(v["iterations"], 200);
    }
}

fn bandwidth_run(provider: &str, libfabric_name: &str, port: &str) {
    let lines = json_run(&[
        "msg-bw",
        "--local",
        "-p",
        provider,
        "-S",
        "64",
        "-I",
        "2000",
        "-W",
        "32",
        "--json",
        "--oob-port",
        port,
    ]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    check_line(&lines[0], "msg-bw", libfabric_name, 64, false);
    assert_eq!(lines[0]["window"], 32);
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
    let row: Vec<&str> = stdout
        .lines()
        .nth(2)
        .expect("a row")
        .split_whitespace()
        .collect();
    assert_eq!(row[..3], ["raw", "64", "100"], "{stdout}");
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
