//! Runs the built `perftest` binary end to end (server and client as real processes via
//! `--local`) on shm and tcp, every benchmark (messages, packet channels, scalar channels),
//! and checks its error paths. The numbers (raw libfabric and
//! MCAPI, and their ratio) are only checked to be present and positive, not fast.
//!
//! The tests run one at a time (a static lock): each run busy-polls two processes, and a
//! 2-core machine cannot run several at once without starving them. Each uses its own
//! bootstrap port, below Linux's ephemeral range (32768..60999): a port in it may be held
//! by any outgoing connection (a 47xxx port once failed with "Address already in use").

#[path = "../../mcapi/tests/common/launch.rs"]
mod launch;

use serde_json::Value;
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());
const DEADLINE: Duration = Duration::from_secs(120);

/// Runs perftest with `args` to completion (killed after `DEADLINE`).
fn perftest(args: &[&str]) -> Output {
    perftest_env(args, &[])
}

/// [`perftest`] with environment variables set.
fn perftest_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut child = Command::new(env!("CARGO_BIN_EXE_perftest"))
        .args(args)
        .envs(env.iter().copied())
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
            let [min, p50, p99, p999, max] = ["min", "p50", "p99", "p999", "max"]
                .map(|p| positive(v, &format!("{prefix}lat_us_{p}")));
            // With several rounds p50 is the median of the rounds' p50s while the others come
            // from all round trips together: p50 lies between min and max, not always below p99.
            assert!(
                min <= p99 && p99 <= p999 && p999 <= max && min <= p50 && p50 <= max,
                "{prefix} percentiles out of order: {v}"
            );
            if v["rounds"] == 1 {
                assert!(p50 <= p99, "{prefix} p50 above p99: {v}");
            }
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
        "--max-time",
        "60",
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

/// msg-bw at 64 B (eager) and 128 KiB (rendezvous: windows of zero-copy sends into posted
/// receives), then 128 KiB with blocking sends and receives.
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
    // 128 KiB is above the eager size: a rendezvous, said so.
    // Eager messages go by blocking msg_send (it returns at once), rendezvous ones by
    // msg_send_i_zero_copy: each line names its own.
    for (v, size, protocol, call) in [
        (&lines[0], 64, "eager", "msg_send"),
        (&lines[1], 128 << 10, "rendezvous", "msg_send_i_zero_copy"),
    ] {
        check_line(v, "msg-bw", libfabric_name, size, false, true);
        assert_eq!(v["window"], 32);
        assert_eq!(v["mcapi_protocol"], protocol, "{v}");
        assert_eq!(v["mcapi_send"], call, "{v}");
    }
    // The same with blocking sends.
    let lines = json_run(&[
        "msg-bw",
        "--local",
        "-p",
        provider,
        "-S",
        "128k",
        "-I",
        "500",
        "--blocking-sends",
        "--max-time",
        "60",
        "--json",
        "--oob-port",
        port,
    ]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    check_line(&lines[0], "msg-bw", libfabric_name, 128 << 10, false, true);
    assert_eq!(lines[0]["mcapi_send"], "msg_send", "{}", lines[0]);
    assert_eq!(lines[0]["iterations_done"], 500, "{}", lines[0]);
}

#[test]
fn shm_latency() {
    latency_run("shm", "shm", "27611");
}

/// A run removes its job's directory when it ends (its job name is the run's alone):
/// before, every run left `<runtime_dir>/perftest-<pid>-<port>/key` behind, and the
/// same-node run `perftest-same-node-<pid>/`.
#[test]
fn a_run_leaves_no_job_directory() {
    let runtime = std::env::temp_dir().join(format!("perftest-rundir-{}", std::process::id()));
    _ = std::fs::remove_dir_all(&runtime);
    let dir = runtime.to_str().expect("a UTF-8 path");
    for mode in ["--local", "--same-node"] {
        let args = &[
            "msg-lat",
            mode,
            "-S",
            "8",
            "-I",
            "50",
            "--oob-port",
            "47690",
        ];
        let out = perftest_env(args, &[("MCAPI_RUNTIME_DIR", dir)]);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        let left: Vec<_> = std::fs::read_dir(&runtime)
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{args:?} left {left:?} in {dir}");
    }
    _ = std::fs::remove_dir_all(&runtime);
}

#[test]
fn shm_bandwidth() {
    bandwidth_run("shm", "shm", "27612");
}

#[test]
fn tcp_latency() {
    latency_run("tcp", "tcp;ofi_rxm", "27613");
}

#[test]
fn tcp_bandwidth() {
    bandwidth_run("tcp", "tcp;ofi_rxm", "27614");
}

/// A channel benchmark over `provider`: every size done over both layers, in full.
fn channel_run(test: &str, provider: &str, libfabric_name: &str, sizes: &[u64], extra: &[&str]) {
    let latency = test.ends_with("-lat");
    let iterations = if latency { "200" } else { "3000" };
    let list: Vec<String> = sizes.iter().map(u64::to_string).collect();
    let list = list.join(",");
    let mut args = vec![
        test,
        "--local",
        "-p",
        provider,
        "-S",
        &list,
        "-I",
        iterations,
        "-w",
        "10",
        "--json",
        // Every iteration is checked: no time limit a loaded host could hit first.
        "--max-time",
        "60",
    ];
    args.extend_from_slice(extra);
    let lines = json_run(&args);
    assert_eq!(lines.len(), sizes.len(), "{lines:?}");
    for (v, &size) in lines.iter().zip(sizes) {
        check_line(v, test, libfabric_name, size, latency, true);
        assert_eq!(v["iterations_done"], v["iterations"], "{v}");
        assert_eq!(v["raw_iterations_done"], v["iterations"], "{v}");
    }
}

/// pkt-lat: an injected and a zero-copy size.
#[test]
fn shm_packet_latency() {
    channel_run(
        "pkt-lat",
        "shm",
        "shm",
        &[8, 64 << 10],
        &["--oob-port", "27640"],
    );
}

#[test]
fn tcp_packet_latency() {
    channel_run(
        "pkt-lat",
        "tcp",
        "tcp;ofi_rxm",
        &[8, 64 << 10],
        &["--oob-port", "27641"],
    );
}

/// pkt-bw with pktchan_send_i, up to a size above the eager message size (packets go to
/// 4 MiB).
#[test]
fn shm_packet_bandwidth() {
    channel_run(
        "pkt-bw",
        "shm",
        "shm",
        &[64, 128 << 10],
        &["-W", "32", "--oob-port", "27642"],
    );
    // Packets shm injects (up to 4 KiB) go by blocking pktchan_send, larger ones by
    // pktchan_send_i.
    let lines = json_run(&[
        "pkt-bw",
        "--local",
        "-S",
        "1k,8k",
        "-I",
        "100",
        "--json",
        "--oob-port",
        "27642",
    ]);
    assert_eq!(lines[0]["mcapi_send"], "pktchan_send", "{}", lines[0]);
    assert_eq!(lines[1]["mcapi_send"], "pktchan_send_i", "{}", lines[1]);
}

#[test]
fn tcp_packet_bandwidth() {
    channel_run(
        "pkt-bw",
        "tcp",
        "tcp;ofi_rxm",
        &[64, 128 << 10],
        &["-W", "32", "--oob-port", "27643"],
    );
}

/// pkt-bw with blocking pktchan_send (zero copy for the large size).
#[test]
fn shm_packet_bandwidth_blocking_sends() {
    channel_run(
        "pkt-bw",
        "shm",
        "shm",
        &[64, 128 << 10],
        &["--blocking-sends", "--oob-port", "27644"],
    );
}

#[test]
fn shm_scalar_latency() {
    channel_run("scl-lat", "shm", "shm", &[8], &["--oob-port", "27645"]);
}

#[test]
fn tcp_scalar_latency() {
    channel_run(
        "scl-lat",
        "tcp",
        "tcp;ofi_rxm",
        &[8],
        &["--oob-port", "27646"],
    );
}

#[test]
fn shm_scalar_rate() {
    channel_run(
        "scl-rate",
        "shm",
        "shm",
        &[8],
        &["-W", "32", "--oob-port", "27647"],
    );
}

#[test]
fn tcp_scalar_rate() {
    channel_run(
        "scl-rate",
        "tcp",
        "tcp;ofi_rxm",
        &[8],
        &["-W", "32", "--oob-port", "27648"],
    );
}

/// Scalars are uint64: another size is a command-line error; options of other benchmarks
/// are refused.
#[test]
fn scalar_sizes_and_misplaced_options_are_refused() {
    for args in [
        &["scl-lat", "--local", "-S", "64"][..],
        &["scl-rate", "--local", "-S", "8,16"][..],
        &["msg-lat", "--local", "--blocking-sends"][..],
    ] {
        let out = perftest(args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("8 bytes") || stderr.contains("pkt-bw"),
            "{stderr}"
        );
    }
}

/// `--rounds` over packet channels: the channels stay open across rounds and sizes.
#[test]
fn packet_rounds_alternate() {
    let lines = json_run(&[
        "pkt-lat",
        "--local",
        "-S",
        "8,4k",
        "-I",
        "100",
        "-w",
        "5",
        "--rounds",
        "3",
        "--max-time",
        "60",
        "--json",
        "--oob-port",
        "27649",
    ]);
    assert_eq!(lines.len(), 2, "{lines:?}");
    for v in &lines {
        check_line(v, "pkt-lat", "shm", v["size"].as_u64().unwrap(), true, true);
        assert_eq!(v["rounds"], 3);
        assert_eq!(v["iterations_done"], 300, "{v}");
        assert!(v["lat_us_p50_spread"].is_array(), "{v}");
    }
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
        "27617",
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
        "27615",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("# min..max")),
        "the legend: {stdout}"
    );
    let header = stdout.lines().nth(2).expect("column header");
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
    assert!(header.ends_with("ratio  protocol"), "{header}");
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .skip(3)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    assert_eq!(rows[0][..3], ["raw", "64", "100"], "{stdout}");
    assert_eq!(rows[1][..3], ["mcapi", "64", "100"], "{stdout}");
    // The raw row has no ratio; the MCAPI row ends with it and the protocol.
    assert_eq!(rows[0].len() + 2, rows[1].len(), "{stdout}");
    assert_eq!(rows[1].last(), Some(&"eager"), "{stdout}");
    let ratio: f64 = rows[1][rows[1].len() - 2].parse().expect("a ratio");
    assert!(ratio > 0.0, "{stdout}");
}

#[test]
fn absent_provider_is_not_run_and_lists_providers() {
    for args in [
        &["msg-lat", "--local", "-p", "nosuch", "--oob-port", "27616"][..],
        &["msg-bw", "-p", "nosuch", "--oob-port", "27616"][..],
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

/// `--rounds`: raw and MCAPI alternate; p50 is the median of the rounds, with its spread;
/// `ratio` and `delta_us` are medians of the rounds' own.
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
        "--max-time",
        "60",
        "--json",
        "--oob-port",
        "27618",
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
    // The median of the rounds' differences: within what the spreads allow.
    let delta = v["delta_us"].as_f64().expect("delta_us");
    let bounds = |prefix: &str| {
        let s = v[format!("{prefix}lat_us_p50_spread")].as_array().unwrap();
        (s[0].as_f64().unwrap(), s[1].as_f64().unwrap())
    };
    let ((lo, hi), (raw_lo, raw_hi)) = (bounds(""), bounds("raw_"));
    assert!(
        lo - raw_hi - 0.01 <= delta && delta <= hi - raw_lo + 0.01,
        "{v}"
    );
    let ratio = v["ratio"].as_f64().expect("ratio");
    assert!(
        lo / raw_hi - 0.01 <= ratio && ratio <= hi / raw_lo + 0.01,
        "{v}"
    );
}

/// `compare` over shm, tcp and an absent provider, with tiny bounds: every benchmark's table,
/// the JSON lines, the plots (not for the one-size scalar benchmarks) and the logs are
/// written; the absent provider is "not run".
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
        "27630",
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
        "## pkt-lat",
        "## pkt-bw",
        "## scl-lat",
        "## scl-rate",
        "| shm | 8 |",
        "| tcp;ofi_rxm | 1024 |",
        "| scl-rate | tcp;ofi_rxm | 1 | done |",
    ] {
        assert!(summary.contains(want), "{want} missing from\n{summary}");
    }
    assert!(
        summary.contains("| msg-lat | nosuch | 0 | not run: "),
        "{summary}"
    );
    // The MPI baseline's lines (where Open MPI is installed) are checked by compare_with_mpi.
    let lines: Vec<Value> = read("results.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("JSON"))
        .filter(|v| v["transport"] != "mpi")
        .collect();
    // Per provider: two sizes of msg-* and pkt-*, one (8 bytes) of scl-*.
    assert_eq!(lines.len(), 20, "{lines:?}");
    for v in &lines {
        let test = v["test"].as_str().expect("test");
        let provider = v["provider"].as_str().expect("provider");
        let size = v["size"].as_u64().expect("size");
        let latency = test.ends_with("-lat");
        check_line(v, test, provider, size, latency, true);
        assert_eq!(v["rounds"], if latency { 2 } else { 1 }, "{v}");
        if test.starts_with("scl-") {
            assert_eq!(size, 8, "{v}");
        }
    }
    for test in ["msg-lat", "msg-bw", "pkt-lat", "pkt-bw"] {
        for svg in [
            format!("{test}.svg"),
            format!("{test}-shm.svg"),
            format!("{test}-tcp-ofi_rxm.svg"),
        ] {
            let body = read(&svg);
            assert!(body.starts_with("<svg") && body.contains("MCAPI"), "{svg}");
            assert!(summary.contains(&format!("]({svg})")), "{svg} not linked");
        }
    }
    assert!(!dir.join("scl-lat.svg").exists());
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

/// The first of Open MPI's `mpicc` and `mpirun` missing from `$PATH` (where compare looks).
fn mpi_missing() -> Option<&'static str> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    ["mpicc", "mpirun"]
        .into_iter()
        .find(|tool| !std::env::split_paths(&path).any(|d| d.join(tool).is_file()))
}

/// The cells of `column` in the markdown table under `heading`.
fn table_column(summary: &str, heading: &str, column: &str) -> Vec<(String, String)> {
    let mut lines = summary
        .lines()
        .skip_while(|l| !l.starts_with(heading))
        .skip(2);
    let cells = |l: &str| -> Vec<String> {
        l.trim_matches('|')
            .split(" | ")
            .map(|c| c.trim().to_owned())
            .collect()
    };
    let head = cells(lines.next().expect("table header"));
    let at = head
        .iter()
        .position(|c| c == column)
        .unwrap_or_else(|| panic!("no column {column} under {heading}: {head:?}"));
    lines
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let c = cells(l);
            (format!("{} {}", c[0], c[1]), c[at].clone())
        })
        .collect()
}

/// `compare` with the MPI baseline: over shm and tcp, msg-lat and msg-bw have MPI figures
/// (positive, in the tables and in results.jsonl, over Open MPI's own transport). Skipped,
/// with the reason, where Open MPI is not installed. (The "n/a" of the benchmarks without an
/// MPI counterpart is checked by the summary's unit tests, without the cost of a run.)
#[test]
fn compare_with_mpi() {
    if let Some(tool) = mpi_missing() {
        // The test command sets MCAPI_TEST_REQUIRE_ALL: there the baseline must run.
        let why = format!("{tool} not found (apt-get install openmpi-bin libopenmpi-dev)");
        assert!(!launch::required(), "compare_with_mpi: {why}");
        eprintln!("compare_with_mpi: skipped: {why}");
        return;
    }
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("compare-mpi");
    let _ = std::fs::remove_dir_all(&dir);
    let out = perftest(&[
        "compare",
        "-p",
        "shm,tcp",
        "-t",
        "msg-lat,msg-bw",
        "-S",
        "8,4k",
        "-I",
        "200",
        "-w",
        "5",
        "--max-time",
        "0.02",
        "--lat-rounds",
        "2",
        "--oob-port",
        "27660",
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
    for want in [
        "MPI baseline (msg-lat, msg-bw): Open MPI ",
        "| msg-lat | shm (MPI: pml ob1, btl self,vader) | 2 | done |",
        "| msg-bw | tcp;ofi_rxm (MPI: pml ob1, btl self,tcp) | 2 | done |",
    ] {
        assert!(summary.contains(want), "{want} missing from\n{summary}");
    }
    for (heading, column) in [
        ("## msg-lat", "MPI"),
        ("## msg-lat", "MCAPI/MPI"),
        ("## msg-lat", "MPI spread"),
        ("## msg-bw", "MPI MB/s"),
        ("## msg-bw", "MPI Mmsg/s"),
    ] {
        let cells = table_column(&summary, heading, column);
        assert_eq!(cells.len(), 4, "{heading} {column}: {cells:?}\n{summary}");
        for (row, cell) in cells {
            let ok = if column.ends_with("spread") {
                cell.split("..")
                    .all(|x| x.parse::<f64>().is_ok_and(|x| x > 0.0))
            } else if column.contains('/') {
                // A ratio far from 1 rounds to 0.00 on a loaded machine.
                cell.parse::<f64>().is_ok_and(|x| x >= 0.0)
            } else {
                cell.parse::<f64>().is_ok_and(|x| x > 0.0)
            };
            assert!(ok, "{heading} {column} {row}: '{cell}'\n{summary}");
        }
    }

    let mpi: Vec<Value> = read("results.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("JSON"))
        .filter(|v| v["transport"] == "mpi")
        .collect();
    // msg-lat and msg-bw, two providers, two sizes.
    assert_eq!(mpi.len(), 8, "{mpi:?}");
    for v in &mpi {
        let latency = v["test"] == "msg-lat";
        assert!(latency || v["test"] == "msg-bw", "{v}");
        assert!(
            v["mpi"].as_str().is_some_and(|s| s.starts_with("Open MPI")),
            "{v}"
        );
        assert!(
            v["mpi_transport"]
                .as_str()
                .is_some_and(|s| s.starts_with("pml ob1, btl self,")),
            "{v}"
        );
        for f in ["iterations_done", "time_s", "mb_s", "mmsg_s"] {
            positive(v, f);
        }
        if latency {
            assert_eq!(v["rounds"], 2, "{v}");
            let p50 = positive(v, "lat_us_p50");
            assert!(
                positive(v, "lat_us_min") <= p50 && p50 <= positive(v, "lat_us_max"),
                "{v}"
            );
        } else {
            assert!(v["lat_us_p50"].is_null(), "{v}");
        }
    }
    let log = read("logs/msg-bw-tcp-ofi_rxm-mpi.log");
    assert!(
        log.starts_with("$ mpirun -n 2 ") && log.contains("--mca btl_tcp_if_include lo"),
        "{log}"
    );
    for svg in ["msg-lat-shm.svg", "msg-bw-tcp-ofi_rxm.svg", "msg-lat.svg"] {
        assert!(read(svg).contains("MPI"), "{svg}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without Open MPI (here: a `$PATH` without it), the MPI cells say "not run", the reason is
/// in the summary and the comparison succeeds.
#[test]
fn compare_without_mpi_says_not_run() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("compare-no-mpi");
    let _ = std::fs::remove_dir_all(&dir);
    let out = perftest_env(
        &[
            "compare",
            "-p",
            "shm",
            "-t",
            "msg-lat",
            "-S",
            "8",
            "-I",
            "100",
            "-w",
            "5",
            "--max-time",
            "0.02",
            "--lat-rounds",
            "1",
            "--oob-port",
            "27670",
            "-o",
            dir.to_str().expect("UTF-8 path"),
        ],
        &[("PATH", "/nonexistent")],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("MPI baseline: not run: mpicc and mpirun not found"),
        "{stdout}"
    );
    assert_eq!(
        table_column(&stdout, "## msg-lat", "MPI"),
        [("shm 8".to_owned(), "not run".to_owned())]
    );
    assert!(
        stdout.contains("| msg-lat | shm (MPI) | 0 | not run: mpicc and mpirun not found"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
