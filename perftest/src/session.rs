//! A benchmark session between one client and one server: bootstrap over the out-of-band
//! channel, open the transports, run every size, print the results (client side).
//!
//! Bootstrap (one text line each, client first):
//! 1. `perftest/1 <provider> <test> <warmup> <iterations> <window> <max_ms>` -> `ok`
//!    (or `error <why>`: another test or provider than the server's).
//! 2. Both open their transport, IP providers bound to the local address of this connection.
//!    `addr <transport> <hex address> <max_msg_size>`, answered likewise by the server.
//! 3. `prepare <max bytes>`: both post their receives.
//! 4. MCAPI: `mcapi <job> <server port> <client port>` (the job name and, across hosts, the
//!    control-plane ports of the two nodes); the server starts its node and answers
//!    `mcapi-up`, or `mcapi-off <why>` when MCAPI cannot run here (the run goes on over raw
//!    libfabric alone). Then the client starts its node and says `mcapi-up` (or
//!    `mcapi-off <why>`); the server looks its endpoint up and answers `mcapi-connected`,
//!    and the client looks the server's up. Channel benchmarks go on: the client connects
//!    both channels, opens its sides and says `mcapi-open` (or `mcapi-off <why>`); the
//!    server opens its sides and answers `mcapi-opened` once they are open (or
//!    `mcapi-off <why>`: the provider cannot carry channels; the run goes on over raw
//!    libfabric alone).
//! 5. Per size, raw then MCAPI (sizes up to MCAPI's limit), the frame of
//!    [`crate::pattern`]: `size <transport> <bytes>`/`ready`, `end`/`done`; with `--rounds`,
//!    that many times, the order of the two alternating (the server just serves each frame).
//! 6. `quit` -> `bye`.
//!
//! Under a launcher ([`crate::launch`]) the client sends its results to the server as
//! `print <line>` (between sizes and before `quit`), and the server prints them: rank 0
//! prints the table, rank 1 measures.
//!
//! Any side that fails sends `error <text>` before it exits, so the other reports the cause.

use crate::affinity::{self, Side};
use crate::cli::{LocalRole, Opts, Test};
use crate::error::{Error, Result};
use crate::oob::{self, Listener, Oob};
use crate::pattern::{self, Plan, ACK_LEN};
use crate::report::{Progress, Report, RunInfo, SizeResult};
use crate::stats::{Measurement, Summary};
use crate::transport::mcapi::{self, McapiLayer, Setup, CLIENT_NODE, SERVER_NODE};
use crate::transport::raw::{self, RawTransport};
use crate::transport::{Kind, Transport};
use std::io::{IsTerminal, Write};
use std::time::Duration;

const PROTOCOL: &str = "perftest/2";

/// How long a `--local` client retries while its server starts.
const LOCAL_CONNECT_RETRY: Duration = Duration::from_secs(10);
/// How long a `--local` server waits for its client.
const LOCAL_ACCEPT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an MCAPI node waits for the peer's endpoint (it exists by then: this only
/// bounds the control-plane connection).
const MCAPI_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

pub fn pin_side(opts: &Opts, side: Side) -> Result<()> {
    match opts.cpu {
        Some(spec) => affinity::pin(affinity::core_for(spec, side)),
        None => Ok(()),
    }
}

/// Sends our transport's address, returns the peer's (with its largest message size).
fn exchange_addresses(t: &mut RawTransport, oob: &mut Oob, first: bool) -> Result<usize> {
    let mine = format!(
        "addr {} {} {}",
        t.kind(),
        oob::hex(&t.address()),
        t.max_msg_size()
    );
    if first {
        oob.send(&mine)?;
    }
    let line = oob.line(|| t.progress())?;
    let words: Vec<&str> = line.split(' ').collect();
    let (addr, max) = match words[..] {
        ["addr", kind, addr, max] if kind == t.kind().name() => (addr, max),
        _ => return Err(oob::protocol(&line, &format!("addr {} ...", t.kind()))),
    };
    t.connect(&oob::unhex(addr)?)?;
    if !first {
        oob.send(&mine)?;
    }
    max.parse()
        .map_err(|_| oob::protocol(&line, "addr <kind> <hex> <max_msg_size>"))
}

// ---------------------------------------------------------------------------------------------
// Client

/// Connects to the server at `host`, runs every size and prints the results.
pub fn client(test: Test, opts: &Opts, host: &str) -> Result<()> {
    pin_side(opts, Side::Client)?;
    let provider = raw::check_available(&opts.provider)?;
    let retry = match opts.local_role {
        Some(LocalRole::Client) => LOCAL_CONNECT_RETRY,
        _ => Duration::ZERO,
    };
    let oob = Oob::connect(host, opts.oob_port, retry)?;
    run_client(test, opts, &provider, oob, Output::Stdout)
}

/// Where the client's results (the table or JSON lines) go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// This process's standard output.
    Stdout,
    /// The server's standard output, as `print <line>` lines (under a launcher: rank 0
    /// prints the results, rank 1 measures).
    Server,
}

impl Output {
    fn emit(self, oob: &mut Oob, text: &str) -> Result<()> {
        match self {
            Output::Stdout => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(text.as_bytes());
                let _ = out.flush();
            }
            Output::Server => {
                for line in text.lines() {
                    oob.send(&format!("print {line}"))?;
                }
            }
        }
        Ok(())
    }
}

/// Runs the client's side of a session over a connected bootstrap channel (`provider`:
/// checked to be available); tells the server why if it fails.
pub fn run_client(
    test: Test,
    opts: &Opts,
    provider: &str,
    mut oob: Oob,
    output: Output,
) -> Result<()> {
    let result = client_session(test, opts, provider, &mut oob, output);
    if let Err(e) = &result {
        oob.report_error(e);
    }
    result
}

fn client_session(
    test: Test,
    opts: &Opts,
    provider: &str,
    oob: &mut Oob,
    output: Output,
) -> Result<()> {
    let plan = Plan::from_opts(test, opts);
    oob.send(&format!("{PROTOCOL} {provider} {}", plan.to_words()))?;
    let reply = oob.line_blocking()?;
    if reply != "ok" {
        return Err(oob::protocol(&reply, "ok"));
    }
    let mut raw = RawTransport::open(&opts.provider, Some(oob.local_ip()))?;
    let peer_max = exchange_addresses(&mut raw, oob, true)?;

    let spec = test.sizes(opts.sizes.as_ref()).map_err(Error::failed)?;
    let limit = raw.max_msg_size().min(peer_max);
    let (sizes, skipped): (Vec<usize>, Vec<usize>) = spec.sizes.iter().partition(|&&s| s <= limit);
    if !skipped.is_empty() && !spec.all {
        eprintln!(
            "perftest: sizes {skipped:?} skipped: larger than {}'s max_msg_size ({limit} bytes)",
            raw.provider()
        );
    }
    let Some(&max_len) = sizes.last() else {
        return Err(Error::failed(format!(
            "no size to run: every size asked for is larger than {}'s max_msg_size ({limit} bytes)",
            raw.provider()
        )));
    };
    let max_len = max_len.max(ACK_LEN);
    oob.send(&format!("prepare {max_len}"))?;
    raw.prepare(max_len, plan.depth())?;
    let (mut mcapi, why_not) = client_mcapi(opts, &plan, max_len, &mut raw, oob)?;
    if let Some(why) = &why_not {
        eprintln!("perftest: MCAPI not run: {why}");
    }
    let (mcapi_limit, too_large) = match &mcapi {
        Some(t) => {
            let (limit, name) = t.limit();
            (limit, format!("larger than {name} ({limit} bytes)"))
        }
        None => (0, String::new()),
    };

    let mut report = Report::new(&plan, raw.provider(), opts.json, RunInfo::collect());
    let mut progress = Progress::new();
    for (i, &size) in sizes.iter().enumerate() {
        let note = match &mcapi {
            Some(_) if size <= mcapi_limit => None,
            Some(_) => Some(too_large.as_str()),
            None => Some("MCAPI could not start (see above)"),
        };
        // Interleaved: each size over raw libfabric and at once over MCAPI, round after
        // round; raw goes first in even rounds, MCAPI in odd ones, so that neither layer
        // always runs right after the other.
        let (mut raw_rounds, mut mc_rounds) = (None, None);
        for round in 0..plan.rounds {
            let rounds = match plan.rounds {
                1 => String::new(),
                n => format!(", round {}/{n}", round + 1),
            };
            progress.show(&format!(
                "perftest {test} {}: {size} bytes ({}/{} sizes{rounds})",
                raw.provider(),
                i + 1,
                sizes.len()
            ));
            let order = if round % 2 == 0 {
                [Kind::Raw, Kind::Mcapi]
            } else {
                [Kind::Mcapi, Kind::Raw]
            };
            for kind in order {
                match (kind, &mut mcapi) {
                    (Kind::Raw, _) => add_round(
                        &mut raw_rounds,
                        pattern::client_size(&mut raw, oob, &plan, size)?,
                    ),
                    (Kind::Mcapi, Some(t)) if note.is_none() => {
                        add_round(&mut mc_rounds, t.client_size(oob, &plan, size)?)
                    }
                    (Kind::Mcapi, _) => {}
                }
            }
        }
        progress.clear();
        let text = report.render(&SizeResult {
            size,
            raw: raw_rounds.as_ref(),
            mcapi: mc_rounds.as_ref(),
            mcapi_not_run: note,
            protocol: mcapi
                .as_ref()
                .filter(|_| note.is_none())
                .and_then(|t| t.protocol(size)),
            send_call: mcapi
                .as_ref()
                .filter(|_| note.is_none())
                .and_then(|t| t.send_call(&plan, size)),
        });
        output.emit(oob, &text)?;
    }
    progress.clear();
    oob.send("quit")?;
    oob.expect("bye", || raw.progress())
}

fn add_round(rounds: &mut Option<Summary>, m: Measurement) {
    match rounds {
        Some(s) => s.push(m),
        None => *rounds = Some(Summary::new(m)),
    }
}

/// Unique per run (client pid and bootstrap port), so that parallel runs never meet.
fn mcapi_setup(opts: &Opts) -> Setup {
    // Two ports next to the bootstrap port (below it at the top of the range).
    let base = if opts.oob_port > u16::MAX - 2 {
        opts.oob_port - 3
    } else {
        opts.oob_port
    };
    Setup {
        job: format!("perftest-{}-{}", std::process::id(), opts.oob_port),
        ports: (base + 1, base + 2),
    }
}

/// One line of text for the bootstrap channel.
fn one_line(e: &Error) -> String {
    e.to_string().replace('\n', " ")
}

/// Starts the client's MCAPI node and connects it to the server's (for channel benchmarks:
/// connects and opens the channels). `Ok((None, why))` when MCAPI cannot run here (either
/// side could not start its node or open its channels): the run goes on over raw.
fn client_mcapi(
    opts: &Opts,
    plan: &Plan,
    max_len: usize,
    raw: &mut RawTransport,
    oob: &mut Oob,
) -> Result<(Option<McapiLayer>, Option<String>)> {
    let setup = mcapi_setup(opts);
    oob.send(&format!(
        "mcapi {} {} {}",
        setup.job, setup.ports.0, setup.ports.1
    ))?;
    let reply = oob.line(|| raw.progress())?;
    if let Some(why) = reply.strip_prefix("mcapi-off ") {
        return Ok((None, Some(format!("the server's node: {why}"))));
    }
    if reply != "mcapi-up" {
        return Err(oob::protocol(&reply, "mcapi-up"));
    }
    let opened = mcapi::topology(oob.peer_ip(), oob.local_ip(), setup.ports)
        .and_then(|topo| mcapi::config(&setup, topo, &opts.provider, plan.depth()))
        .and_then(|config| McapiLayer::open(plan, CLIENT_NODE, config, max_len));
    let mut t = match opened {
        Ok(t) => t,
        Err(e) => {
            oob.send(&format!("mcapi-off {}", one_line(&e)))?;
            return Ok((None, Some(e.to_string())));
        }
    };
    oob.send("mcapi-up")?;
    oob.expect("mcapi-connected", || raw.progress())?;
    if !t.has_channels() {
        t.connect(SERVER_NODE, MCAPI_CONNECT_TIMEOUT)?;
    } else {
        if let Err(e) = t.connect(SERVER_NODE, MCAPI_CONNECT_TIMEOUT) {
            oob.send(&format!("mcapi-off {}", one_line(&e)))?;
            return Ok((None, Some(e.to_string())));
        }
        oob.send("mcapi-open")?;
        let reply = oob.line(|| raw.progress())?;
        if let Some(why) = reply.strip_prefix("mcapi-off ") {
            return Ok((None, Some(format!("the server's channels: {why}"))));
        }
        if reply != "mcapi-opened" {
            return Err(oob::protocol(&reply, "mcapi-opened"));
        }
        t.finish_open(MCAPI_CONNECT_TIMEOUT)?;
    }
    if t.provider() != raw.provider() {
        eprintln!(
            "perftest: warning: MCAPI runs over {}, raw libfabric over {}",
            t.provider(),
            raw.provider()
        );
    }
    Ok((Some(t), None))
}

// ---------------------------------------------------------------------------------------------
// Server

/// Waits for one client and serves its run.
pub fn server(test: Test, opts: &Opts) -> Result<()> {
    pin_side(opts, Side::Server)?;
    let provider = raw::check_available(&opts.provider)?;
    let local = opts.local_role == Some(LocalRole::Server);
    let listener = Listener::bind(opts.oob_port, local)?;
    if !local && std::io::stderr().is_terminal() {
        eprintln!(
            "perftest {test} server ({provider}): waiting for a client on TCP port {}",
            opts.oob_port
        );
    }
    let oob = listener.accept(local.then_some(LOCAL_ACCEPT_TIMEOUT))?;
    run_server(test, opts, &provider, oob)
}

/// Serves one client's run over a connected bootstrap channel (`provider`: checked to be
/// available); tells the client why if it fails.
pub fn run_server(test: Test, opts: &Opts, provider: &str, mut oob: Oob) -> Result<()> {
    let result = server_session(test, opts, provider, &mut oob);
    if let Err(e) = &result {
        oob.report_error(e);
    }
    result
}

fn server_session(test: Test, opts: &Opts, provider: &str, oob: &mut Oob) -> Result<()> {
    let hello = oob.line_blocking()?;
    let words: Vec<&str> = hello.split(' ').collect();
    let (client_provider, plan) = match &words[..] {
        [PROTOCOL, prov, rest @ ..] => match Plan::from_words(rest) {
            Some(plan) => (*prov, plan),
            None => return Err(oob::protocol(&hello, "a perftest hello")),
        },
        _ => return Err(oob::protocol(&hello, PROTOCOL)),
    };
    if plan.test != test || client_provider != provider {
        return Err(Error::failed(format!(
            "the client runs {} over {client_provider}, this server {test} over {provider}: \
             start both with the same test and -p",
            plan.test
        )));
    }
    oob.send("ok")?;
    let mut raw = RawTransport::open(&opts.provider, Some(oob.local_ip()))?;
    exchange_addresses(&mut raw, oob, false)?;
    // Started, waiting for the client's node; then connected.
    let mut mcapi_started: Option<McapiLayer> = None;
    let mut mcapi: Option<McapiLayer> = None;
    // The largest size of the run (from `prepare`).
    let mut max_len = ACK_LEN;
    loop {
        let line = oob.line(|| raw.progress())?;
        // The client's results, to print here (lines arrive trimmed: "print" alone is an
        // empty line).
        if let Some(text) = line
            .strip_prefix("print")
            .filter(|t| t.is_empty() || t.starts_with(' '))
        {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", text.strip_prefix(' ').unwrap_or(text));
            let _ = out.flush();
            continue;
        }
        let words: Vec<&str> = line.split(' ').collect();
        match words[..] {
            ["prepare", max] => {
                max_len = max
                    .parse()
                    .map_err(|_| oob::protocol(&line, "prepare <bytes>"))?;
                raw.prepare(max_len, plan.depth())?;
            }
            ["mcapi", job, server_port, client_port] => {
                let port = |p: &str| {
                    p.parse::<u16>()
                        .map_err(|_| oob::protocol(&line, "mcapi <job> <port> <port>"))
                };
                let setup = Setup {
                    job: job.to_owned(),
                    ports: (port(server_port)?, port(client_port)?),
                };
                let opened = mcapi::topology(oob.local_ip(), oob.peer_ip(), setup.ports)
                    .and_then(|topo| mcapi::config(&setup, topo, &opts.provider, plan.depth()))
                    .and_then(|config| McapiLayer::open(&plan, SERVER_NODE, config, max_len));
                match opened {
                    Ok(t) => {
                        mcapi_started = Some(t);
                        oob.send("mcapi-up")?;
                    }
                    Err(e) => oob.send(&format!("mcapi-off {}", one_line(&e)))?,
                }
            }
            ["mcapi-up"] => {
                let mut t = mcapi_started
                    .take()
                    .ok_or_else(|| oob::protocol(&line, "mcapi-off"))?;
                t.connect(CLIENT_NODE, MCAPI_CONNECT_TIMEOUT)?;
                mcapi = Some(t);
                oob.send("mcapi-connected")?;
            }
            ["mcapi-open"] => {
                let opened = match &mut mcapi {
                    Some(t) => t.open_channels(MCAPI_CONNECT_TIMEOUT),
                    None => return Err(oob::protocol(&line, "mcapi-up first")),
                };
                match opened {
                    Ok(()) => oob.send("mcapi-opened")?,
                    Err(e) => {
                        mcapi = None;
                        oob.send(&format!("mcapi-off {}", one_line(&e)))?;
                    }
                }
            }
            ["mcapi-off", ..] => {
                mcapi_started = None;
                mcapi = None;
            }
            ["size", kind, size] => {
                let size = size
                    .parse()
                    .map_err(|_| oob::protocol(&line, "size <kind> <bytes>"))?;
                match (Kind::from_name(kind), &mut mcapi) {
                    (Some(Kind::Raw), _) => pattern::serve_size(&mut raw, oob, &plan, size)?,
                    (Some(Kind::Mcapi), Some(t)) => t.serve_size(oob, &plan, size)?,
                    _ => {
                        return Err(Error::failed(format!(
                            "this server cannot run over '{kind}'"
                        )))
                    }
                }
            }
            ["quit"] => return oob.send("bye"),
            _ => return Err(oob::protocol(&line, "prepare, mcapi, size or quit")),
        }
    }
}
