//! perftest started by a launcher: `mpirun -n 2 perftest msg-lat -p tcp -S 8`, no host and
//! no port. On one host, and on two "hosts" (network namespaces joined by a veth pair,
//! mpirun's daemon started in the second through an rsh agent: `mcapi/tests/common/
//! launch.rs`, shared with mcapi's launcher test). Checks that rank 0 alone prints the
//! table (`--tag-output`), with a row per layer for 8 bytes, and that its header is the one
//! a run started by hand prints (`--local` on one host; server and client with an explicit
//! host across the namespaces). Also: another job size than 2 is refused on every rank.
//!
//! Says why it did not run where mpirun, PMIx, the tcp provider or CAP_NET_ADMIN is missing.
//! No timing is checked: the numbers are printed for the log.

#[path = "../../mcapi/tests/common/launch.rs"]
mod launch;

use launch::{
    output_bounded, required, skip, wait_bounded, which, Captured, NoHosts, TwoHosts, MPIRUN_FLAGS,
};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PERFTEST: &str = env!("CARGO_BIN_EXE_perftest");
/// A short run: one size, few iterations.
const BENCH: &[&str] = &["msg-lat", "-p", "tcp", "-S", "8", "-I", "1000", "-w", "100"];
/// mpirun binds each rank to a core by default; the mpirun daemon of each namespace "host"
/// would bind its one rank to the same core 0, and two busy-polling ranks on one core
/// measure the scheduler. Unbound, as the by-hand runs.
const NO_BINDING: &[&str] = &["--bind-to", "none"];
/// The job key of the by-hand run across the namespaces (a topology run needs one).
const KEY: &str = "perftest-launcher-test-key-0123456789";

fn main() {
    if !mcapi::launcher::built_with_pmix() {
        skip(
            "perftest launcher",
            "this build has no PMIx (libpmix-dev, pkg-config)",
        );
    }
    let Ok(mpirun) = which("mpirun") else {
        skip(
            "perftest launcher",
            "no mpirun on PATH (apt-get install openmpi-bin)",
        );
    };
    if mcapi_ofi::Info::first(&mcapi_ofi::Hints::new().provider("tcp")).is_err() {
        skip("perftest launcher", "libfabric offers no tcp");
    }
    let perftest = Path::new(PERFTEST);
    let (mut passed, mut failed) = (0, 0);
    let mut report = |run: &str, result: Result<(), String>, t0: Instant| match result {
        Ok(()) => {
            passed += 1;
            println!(
                "perftest launcher {run}: ok ({:.1}s)",
                t0.elapsed().as_secs_f64()
            );
        }
        Err(why) => {
            failed += 1;
            println!("perftest launcher {run}: FAILED: {why}");
        }
    };

    // One host: the table of `--local` (the same benchmark, started by hand) and mpirun's.
    let t0 = Instant::now();
    let result = (|| {
        let by_hand = run_ok(Command::new(perftest).args(BENCH).arg("--local"))?;
        let mut cmd = Command::new(&mpirun);
        cmd.args(["-n", "2", "--tag-output"])
            .args(MPIRUN_FLAGS)
            .args(NO_BINDING);
        for v in launch::CLEARED {
            cmd.env_remove(v);
        }
        let launched = run_ok(cmd.arg(perftest).args(BENCH))?;
        same_table(&by_hand, &launched)
    })();
    report(
        "one host: mpirun -n 2 perftest msg-lat -p tcp -S 8",
        result,
        t0,
    );

    // Three ranks: refused on every rank, the reason said once (by rank 0).
    let t0 = Instant::now();
    let result = (|| {
        let mut cmd = Command::new(&mpirun);
        cmd.args(["-n", "3"]).args(MPIRUN_FLAGS);
        let run = output_bounded(cmd.arg(perftest).args(BENCH)).ok_or("killed at 120 s")?;
        let refusals = run.stderr.matches("exactly 2 ranks").count();
        match (run.status.success(), refusals) {
            (false, 1) => Ok(()),
            _ => Err(format!(
                "expected a failure saying 'exactly 2 ranks' once ({}):\n{}{}",
                run.status, run.stdout, run.stderr
            )),
        }
    })();
    report("mpirun -n 3: refused", result, t0);

    match TwoHosts::new(Path::new(env!("CARGO_TARGET_TMPDIR"))) {
        Ok(hosts) => {
            let t0 = Instant::now();
            let result = (|| {
                let by_hand = across_by_hand(&hosts, perftest)?;
                let mut cmd = hosts.mpirun(&mpirun, 1);
                cmd.arg("--tag-output").args(NO_BINDING);
                let launched = run_ok(cmd.arg(perftest).args(BENCH))?;
                same_table(&by_hand, &launched)
            })();
            report(
                "two hosts: mpirun -n 2 perftest msg-lat -p tcp -S 8",
                result,
                t0,
            );
        }
        Err(NoHosts::Unsupported(why)) if !required() => {
            println!("perftest launcher two hosts: skipped: {why}");
        }
        Err(NoHosts::Unsupported(why) | NoHosts::Broken(why)) => {
            report("two hosts: set up", Err(why), Instant::now());
        }
    }
    println!("\nperftest launcher: {passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}

/// Runs `cmd` to success (bounded); its output.
fn run_ok(cmd: &mut Command) -> Result<Captured, String> {
    let run = output_bounded(cmd).ok_or_else(|| format!("{cmd:?}: killed at 120 s"))?;
    if !run.status.success() {
        return Err(format!(
            "{cmd:?}: {}\nstdout:\n{}stderr:\n{}",
            run.status, run.stdout, run.stderr
        ));
    }
    Ok(run)
}

/// The benchmark across the namespaces as one starts it by hand: the server in B, the
/// client in A naming B's address (retried while the server is not listening yet).
fn across_by_hand(hosts: &TwoHosts, perftest: &Path) -> Result<Captured, String> {
    let mut server = hosts
        .on(1, perftest)
        .args(BENCH)
        .env("MCAPI_JOB_KEY", KEY)
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting the server: {e}"))?;
    let t0 = Instant::now();
    let client = loop {
        let mut cmd = hosts.on(0, perftest);
        cmd.args(BENCH)
            .arg(launch::HOST_ADDR[1])
            .env("MCAPI_JOB_KEY", KEY);
        let run = output_bounded(&mut cmd).ok_or("the client was killed at 120 s")?;
        let refused = run.stderr.contains("refused");
        if run.status.success() || !refused || t0.elapsed() > Duration::from_secs(20) {
            break run;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let server_status = wait_bounded(&mut server);
    if !client.status.success() || !server_status.is_some_and(|s| s.success()) {
        return Err(format!(
            "by hand: client {}, server {server_status:?}\n{}{}",
            client.status, client.stdout, client.stderr
        ));
    }
    Ok(client)
}

/// The table lines of a run's output, without mpirun's `[job,rank]<stdout>:` tags.
/// `Err` when a line comes from another rank than 0.
fn table(run: &Captured) -> Result<Vec<String>, String> {
    run.stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match l.split_once("]<stdout>:") {
            Some((tag, text)) if tag.ends_with(",0") => Ok(text.to_owned()),
            Some(_) => Err(format!("a line from another rank than 0: {l}")),
            None => Ok(l.to_owned()),
        })
        .collect()
}

/// Both outputs are the table of msg-lat over tcp for 8 bytes: the same header lines (the run, the legend, the columns), a
/// row for raw libfabric and one for MCAPI (the numbers may differ); printed for the log.
fn same_table(by_hand: &Captured, launched: &Captured) -> Result<(), String> {
    let (a, b) = (table(by_hand)?, table(launched)?);
    println!("  by hand:\n    {}", a.join("\n    "));
    println!("  under mpirun:\n    {}", b.join("\n    "));
    let header = |t: &[String]| -> Vec<String> {
        t.iter()
            .filter(|l| l.starts_with('#') || l.starts_with("layer"))
            .cloned()
            .collect()
    };
    let rows = |t: &[String]| -> Vec<String> {
        t.iter()
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                // Layer and bytes (the iterations done may end early at --max-time).
                (w.len() > 2 && (w[0] == "raw" || w[0] == "mcapi"))
                    .then(|| format!("{} {}", w[0], w[1]))
            })
            .collect()
    };
    let want_rows = ["raw 8", "mcapi 8"];
    if header(&a).len() != 3 || header(&a) != header(&b) {
        return Err(format!(
            "headers differ: {:?} and {:?}",
            header(&a),
            header(&b)
        ));
    }
    if rows(&a) != want_rows || rows(&b) != want_rows {
        return Err(format!(
            "expected rows {want_rows:?}, got {:?} and {:?}",
            rows(&a),
            rows(&b)
        ));
    }
    if a.len() != b.len() {
        return Err(format!(
            "{} lines by hand, {} under mpirun",
            a.len(),
            b.len()
        ));
    }
    Ok(())
}
