//! `msg-lat --same-node`: both ends in one MCAPI node (one process), a ping-pong between
//! two of its endpoints driven from one thread (`msg_send` a -> b, `msg_recv` at b,
//! `msg_send` b -> a, `msg_recv` at a): the node's same-node path, a copy into the receiving
//! endpoint's queue and a copy out, no fabric. Then, in the same run, the `--local` msg-lat
//! over the chosen provider (two processes), for comparison.

use crate::cli::Opts;
use crate::error::{Context, Result};
use crate::stats::{Measurement, RoundTrips};
use ::mcapi::config::Config;
use ::mcapi::Node;
use std::process::Command;
use std::time::Instant;

/// Runs the same-node ping-pong over every size, prints its half round trips, then runs
/// the provider's `--local` msg-lat with the same options.
pub fn run(opts: &Opts) -> Result<i32> {
    let sizes = crate::cli::Test::MsgLat
        .sizes(opts.sizes.as_ref())
        .map_err(crate::error::Error::failed)?;
    let mut config = Config::from_env()
        .map_err(|e| crate::error::Error::failed(format!("MCAPI configuration: {e}")))?;
    config.provider = Some(opts.provider.clone());
    config.job = format!("perftest-same-node-{}", std::process::id());
    let node = Node::initialize(0, 0, config.clone())
        .map_err(|e| crate::error::Error::failed(format!("mcapi_initialize: {e}")))?;
    let a = node.endpoint_create(1).map_err(mcapi_err)?;
    let b = node.endpoint_create(2).map_err(mcapi_err)?;
    let max = sizes.sizes.iter().copied().max().unwrap_or(8);
    let out = vec![0x5au8; max];
    let mut buf = vec![0u8; max];
    println!(
        "# msg-lat --same-node: one node, one thread, endpoints a <-> b (half round trips, µs)"
    );
    println!(
        "{:>10} {:>10} {:>10} {:>10} {:>10}",
        "size", "iters", "min", "p50", "p99"
    );
    for &size in &sizes.sizes {
        let mut p50s = Vec::new();
        let mut last = None;
        for _ in 0..opts.rounds {
            let mut rt = RoundTrips::new();
            let mut round = || -> Result<()> {
                node.msg_send(a, b, &out[..size], 0).map_err(mcapi_err)?;
                node.msg_recv(b, &mut buf).map_err(mcapi_err)?;
                node.msg_send(b, a, &buf[..size], 0).map_err(mcapi_err)?;
                node.msg_recv(a, &mut buf).map_err(mcapi_err)?;
                Ok(())
            };
            for _ in 0..opts.warmup {
                round()?;
            }
            let start = Instant::now();
            let mut done = 0;
            while done < opts.iterations && start.elapsed() < opts.max_time() {
                let t = Instant::now();
                round()?;
                rt.record(t.elapsed());
                done += 1;
            }
            let m = Measurement {
                size,
                iterations: done,
                xfers_per_iter: 2,
                elapsed: start.elapsed(),
                round_trips: Some(rt),
            };
            if let Some(l) = m.latency() {
                p50s.push(l.p50);
                last = Some((done, l));
            }
        }
        if let Some((iters, l)) = last {
            let p50 = crate::stats::median(p50s.into_iter());
            println!(
                "{size:>10} {iters:>10} {:>10.3} {p50:>10.3} {:>10.3}",
                l.min, l.p99
            );
        }
    }
    node.finalize().map_err(mcapi_err)?;
    drop(node);
    // The job name is this run's alone: its directory goes with it.
    let _ = config.remove_unused_job_dir();
    // The provider's figure in the same run: `--local` with the same options.
    println!(
        "# msg-lat --local -p {} (two processes), for comparison",
        opts.provider
    );
    let exe = std::env::current_exe().context("locating this executable")?;
    let args: Vec<_> = std::env::args_os()
        .skip(1)
        .filter(|a| a != "--same-node")
        .collect();
    let status = Command::new(exe)
        .args(&args)
        .arg("--local")
        .status()
        .context("starting the --local run")?;
    Ok(status.code().unwrap_or(1))
}

fn mcapi_err(e: ::mcapi::Status) -> crate::error::Error {
    crate::error::Error::failed(format!("MCAPI: {e}"))
}
