//! `perftest`: latency, bandwidth and message rate of MCAPI messages, packet channels and
//! scalar channels, measured beside raw libfabric over the same provider, sizes and window.
//!
//! # Place in the workspace
//! `ofi-sys` (bindings) <- `mcapi-ofi` (safe fabric layer) <- `mcapi` (MCAPI 2.000) <-
//! `perftest`. The benchmark patterns are written once over a small
//! [`transport::Transport`] trait; [`transport::raw`] implements it directly on `mcapi-ofi`
//! (tagged messages on an RDM endpoint, busy-polled CQ), [`transport::mcapi`] with MCAPI
//! message endpoints, packet and scalar channels. Each size runs over raw libfabric,
//! then over MCAPI (sizes up to MCAPI's limits); the table has a row per layer
//! and the MCAPI row ends with the ratio MCAPI/raw (p50 latency for msg-lat, MB/s for
//! msg-bw); a JSON line carries both results (`raw_*` and unprefixed MCAPI fields) and
//! `ratio`.
//!
//! # Usage
//! fabtests' dialect (`-p` provider, `-S` sizes, `-I` iterations, `-w` warmup, `-W` window):
//! without a host argument the process is the server, with one it is the client that connects
//! to it and prints the results; `--local` runs both on this machine.
//!
//! ```text
//! perftest msg-lat --local                       # shm, 8 B to 64 KiB
//! perftest msg-bw --local -p tcp -S 64,1k:64k -W 32 --json
//! perftest msg-lat -p tcp -S all                 # on the server host
//! perftest msg-lat -p tcp -S all server-host     # on the client host
//! perftest msg-lat --local -S 8 --rounds 9       # 9 rounds, raw and MCAPI alternating
//! perftest msg-lat --same-node -S 8 --rounds 5   # one node talking to itself, then --local
//! perftest compare                               # every benchmark over every provider
//! mpirun -n 2 perftest msg-lat -p tcp -S 8       # under a launcher: no host, no port
//! ```
//!
//! Under a launcher (`mpirun`, `srun --mpi=pmix`; [`launch`]) rank 0 is the server and
//! prints the table, rank 1 the client; they find each other through the launcher's PMIx
//! server, and so do their MCAPI nodes. Exactly two ranks.
//!
//! `--rounds N` runs each size N times over each layer, alternating, and reports medians and
//! their spread ([`stats::Summary`]). `compare` ([`compare`]) runs the benchmarks as `--local`
//! child processes over every provider, each point bounded in time, and writes a markdown
//! table, the JSON lines and SVG plots into a directory.
//!
//! # Exit codes
//! 0 success; 61 (`ENODATA`, as fabtests) when the provider is not available here ("not
//! run"; for `compare`: when nothing could run); 2 for a bad command line; 1 for any other
//! failure.
//!
//! # Modules
//! [`cli`] command line; [`session`] bootstrap and the run of all sizes; [`pattern`] the
//! ping-pong and windowed-streaming protocols; [`transport`] the layers under test; [`oob`]
//! the out-of-band TCP channel; [`launch`] runs under mpirun; [`stats`] and [`report`]
//! numbers and output; [`local`] the two-process `--local` mode; [`affinity`] `--cpu`;
//! [`compare`] the provider comparison.

mod affinity;
mod cli;
mod compare;
mod error;
mod launch;
mod local;
mod oob;
mod pattern;
mod report;
mod same_node;
mod session;
mod stats;
mod transport;

use clap::Parser;
use cli::Cli;
use error::Error;

fn main() {
    let cli = Cli::parse();
    let (test, opts) = match &cli.test {
        cli::TestCmd::Compare(c) => {
            let code = compare::run(c).unwrap_or_else(|e| {
                eprintln!("perftest compare: error: {e}");
                e.exit_code()
            });
            std::process::exit(code);
        }
        cmd => cmd.single().expect("a single benchmark"),
    };
    if let Err(why) = check_opts(test, opts) {
        use clap::CommandFactory;
        Cli::command()
            .error(clap::error::ErrorKind::ArgumentConflict, why)
            .exit();
    }
    let launched = launch::role(opts);
    let role = match (&opts.host, opts.local, &launched) {
        (_, true, _) | (_, _, Err(_)) => "",
        (_, _, Ok(Some(r))) => r.describe(),
        (Some(_), _, _) => " (client)",
        (None, _, _) => " (server)",
    };
    let result = match launched {
        Err(e) => Err(e),
        Ok(Some(r)) => launch::run(test, opts, r).map(|()| 0),
        Ok(None) if opts.same_node => same_node::run(opts),
        Ok(None) if opts.local => local::run(opts),
        Ok(None) => match &opts.host {
            Some(host) => session::client(test, opts, host).map(|()| 0),
            None => session::server(test, opts).map(|()| 0),
        },
    };
    let code = match result {
        Ok(code) => code,
        Err(e @ Error::NotRun(_)) => {
            eprintln!("perftest {test}: {e}");
            eprintln!("perftest {test}: not run");
            e.exit_code()
        }
        Err(e @ Error::ReportedElsewhere) => {
            // A launcher ends the job at the first rank that fails: give rank 0 time to say why.
            std::thread::sleep(std::time::Duration::from_secs(1));
            e.exit_code()
        }
        Err(e) => {
            // Under --local, the side whose peer failed repeats nothing: the peer has said why.
            let echoed = opts.local_role.is_some() && e.to_string().starts_with("the peer failed");
            if !echoed {
                eprintln!("perftest {test}{role}: error: {e}");
            }
            e.exit_code()
        }
    };
    std::process::exit(code);
}

/// What clap cannot check alone: options that depend on the benchmark.
fn check_opts(test: cli::Test, opts: &cli::Opts) -> Result<(), String> {
    test.sizes(opts.sizes.as_ref())?;
    if opts.same_node && test != cli::Test::MsgLat {
        return Err(format!("--same-node applies to msg-lat, not to {test}"));
    }
    if opts.blocking_sends && !matches!(test, cli::Test::PktBw | cli::Test::MsgBw) {
        return Err(format!(
            "--blocking-sends applies to msg-bw and pkt-bw, not to {test}"
        ));
    }
    Ok(())
}
