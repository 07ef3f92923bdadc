//! A benchmark session between one client and one server: bootstrap over the out-of-band
//! channel, open the transports, run every size, print the results (client side).
//!
//! Bootstrap (one text line each, client first):
//! 1. `perftest/1 <provider> <test> <warmup> <iterations> <window> <max_ms>` -> `ok`
//!    (or `error <why>`: another test or provider than the server's).
//! 2. Both open their transport, IP providers bound to the local address of this connection.
//!    `addr <transport> <hex address> <max_msg_size>`, answered likewise by the server.
//! 3. `prepare <max bytes>`: both post their receives.
//! 4. Per size and transport, the frame of [`crate::pattern`]: `size`/`ready`, `end`/`done`.
//! 5. `quit` -> `bye`.
//!
//! Any side that fails sends `error <text>` before it exits, so the other reports the cause.

use crate::affinity::{self, Side};
use crate::cli::{LocalRole, Opts, Test};
use crate::error::{Error, Result};
use crate::oob::{self, Listener, Oob};
use crate::pattern::{self, Plan, ACK_LEN};
use crate::report::{Progress, Report, RunInfo, SizeResult};
use crate::transport::raw::{self, RawTransport};
use crate::transport::{Kind, Transport};
use std::io::IsTerminal;
use std::time::Duration;

const PROTOCOL: &str = "perftest/1";

/// How long a `--local` client retries while its server starts.
const LOCAL_CONNECT_RETRY: Duration = Duration::from_secs(10);
/// How long a `--local` server waits for its client.
const LOCAL_ACCEPT_TIMEOUT: Duration = Duration::from_secs(30);

fn pin_side(opts: &Opts, side: Side) -> Result<()> {
    match opts.cpu {
        Some(spec) => affinity::pin(affinity::core_for(spec, side)),
        None => Ok(()),
    }
}

/// Sends our transport's address, returns the peer's (with its largest message size).
fn exchange_addresses<T: Transport>(t: &mut T, oob: &mut Oob, first: bool) -> Result<usize> {
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
    let mut oob = Oob::connect(host, opts.oob_port, retry)?;
    let result = client_session(test, opts, &provider, &mut oob);
    if let Err(e) = &result {
        oob.report_error(e);
    }
    result
}

fn client_session(test: Test, opts: &Opts, provider: &str, oob: &mut Oob) -> Result<()> {
    let plan = Plan::from_opts(test, opts);
    oob.send(&format!("{PROTOCOL} {provider} {}", plan.to_words()))?;
    let reply = oob.line_blocking()?;
    if reply != "ok" {
        return Err(oob::protocol(&reply, "ok"));
    }
    let mut raw = RawTransport::open(&opts.provider, Some(oob.local_ip()))?;
    let peer_max = exchange_addresses(&mut raw, oob, true)?;

    let limit = raw.max_msg_size().min(peer_max);
    let (sizes, skipped): (Vec<usize>, Vec<usize>) =
        opts.sizes.sizes.iter().partition(|&&s| s <= limit);
    if !skipped.is_empty() && !opts.sizes.all {
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

    let mut report = Report::new(&plan, raw.provider(), opts.json, RunInfo::collect());
    let mut progress = Progress::new();
    for (i, &size) in sizes.iter().enumerate() {
        progress.show(&format!(
            "perftest {test} {}: {size} bytes ({}/{} sizes)",
            raw.provider(),
            i + 1,
            sizes.len()
        ));
        let m = pattern::client_size(&mut raw, oob, &plan, size)?;
        progress.clear();
        report.row(&SizeResult {
            size,
            raw: Some(&m),
            mcapi: None,
        });
    }
    progress.clear();
    oob.send("quit")?;
    oob.expect("bye", || raw.progress())
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
    let mut oob = listener.accept(local.then_some(LOCAL_ACCEPT_TIMEOUT))?;
    let result = server_session(test, opts, &provider, &mut oob);
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
    loop {
        let line = oob.line(|| raw.progress())?;
        let words: Vec<&str> = line.split(' ').collect();
        match words[..] {
            ["prepare", max] => {
                let max = max
                    .parse()
                    .map_err(|_| oob::protocol(&line, "prepare <bytes>"))?;
                raw.prepare(max, plan.depth())?;
            }
            ["size", kind, size] => {
                let size = size
                    .parse()
                    .map_err(|_| oob::protocol(&line, "size <kind> <bytes>"))?;
                match Kind::from_name(kind) {
                    Some(Kind::Raw) => pattern::serve_size(&mut raw, oob, &plan, size)?,
                    _ => {
                        return Err(Error::failed(format!(
                            "this server cannot run over '{kind}'"
                        )))
                    }
                }
            }
            ["quit"] => return oob.send("bye"),
            _ => return Err(oob::protocol(&line, "prepare, size or quit")),
        }
    }
}
