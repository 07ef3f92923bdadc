//! Under a launcher: `mpirun -n 2 perftest msg-lat -p tcp -S 8` (or `srun --mpi=pmix -n 2`),
//! with no host name and no port. Rank 0 is the server, rank 1 the client; they meet
//! through the launcher's PMIx server instead of a host argument:
//!
//! 1. Rank 0 listens for the bootstrap channel on a free TCP port of the address by which
//!    the other ranks reach its host ([`mcapi::launcher::host_address`]: loopback when
//!    both ranks are on one host) and publishes `address:port` under [`OOB_KEY`]
//!    ([`mcapi::launcher::publish`]).
//! 2. Rank 1 looks the key up, waiting up to [`LAUNCH_WAIT`], and connects. From there the
//!    session is the usual one ([`crate::session`]), except that rank 1 sends its results
//!    to rank 0, which prints them: the job's output is the table, once.
//! 3. The MCAPI nodes of the run bootstrap through PMIx too (`MCAPI_BOOTSTRAP` detects the
//!    launcher; no topology), the job key published by rank 0's node.
//!
//! `--oob-port` does not apply (the port is a free one). Only two ranks: any other job
//! size is an error on every rank, which rank 0 alone prints.

use crate::affinity::Side;
use crate::cli::{Opts, Test};
use crate::error::{Error, Result};
use crate::oob::{Listener, Oob};
use crate::session::{self, Output};
use crate::transport::raw;
use mcapi::launcher;
use std::net::SocketAddr;
use std::time::Duration;

/// The launcher key under which rank 0 publishes its bootstrap channel's address.
pub const OOB_KEY: &str = "perftest:oob";

/// How long one rank waits for the other to appear (rank 1 for the key, rank 0 for the
/// connection).
pub const LAUNCH_WAIT: Duration = Duration::from_secs(60);

/// This process's part in a launched run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Rank 0: serves, prints the results.
    Server,
    /// Rank 1: connects, measures.
    Client,
}

impl Role {
    /// How errors name this process.
    pub fn describe(self) -> &'static str {
        match self {
            Role::Server => " (rank 0, server)",
            Role::Client => " (rank 1, client)",
        }
    }
}

/// `Some` when this process is a rank of a launched run: started by a PMIx launcher
/// (`PMIX_RANK` set) with neither a host argument nor `--local`.
///
/// # Errors
/// A job of another size than 2, a perftest built without PMIx under a launcher, or a
/// launcher whose PMIx server does not answer.
pub fn role(opts: &Opts) -> Result<Option<Role>> {
    if opts.host.is_some() || opts.local || opts.local_role.is_some() {
        return Ok(None);
    }
    if std::env::var_os("PMIX_RANK").is_none() {
        return Ok(None);
    }
    if !launcher::built_with_pmix() {
        return Err(Error::failed(
            "started by a launcher (PMIX_RANK is set), but this perftest was built without \
             PMIx (libpmix-dev, pkg-config): give the server's host instead",
        ));
    }
    let (Some(rank), Some(size)) = (launcher::rank(), launcher::size()) else {
        let why = launcher::host_address()
            .err()
            .map(|e| e.0)
            .unwrap_or_default();
        return Err(Error::failed(format!(
            "started by a launcher (PMIX_RANK is set), but its PMIx server does not answer: {why}"
        )));
    };
    if size != 2 {
        if rank != 0 {
            return Err(Error::ReportedElsewhere);
        }
        return Err(Error::failed(format!(
            "under a launcher perftest runs with exactly 2 ranks (rank 0 serves and prints, \
             rank 1 measures: mpirun -n 2 perftest ...); this job has {size}"
        )));
    }
    Ok(Some(if rank == 0 {
        Role::Server
    } else {
        Role::Client
    }))
}

/// Runs this rank's side of the benchmark.
pub fn run(test: Test, opts: &Opts, role: Role) -> Result<()> {
    match role {
        Role::Server => server(test, opts),
        Role::Client => client(test, opts),
    }
}

fn launcher_error(e: launcher::LauncherError) -> Error {
    Error::failed(format!("launcher: {e}"))
}

fn server(test: Test, opts: &Opts) -> Result<()> {
    session::pin_side(opts, Side::Server)?;
    let provider = raw::check_available(&opts.provider)?;
    let ip = launcher::host_address().map_err(launcher_error)?;
    let listener = Listener::bind_at(SocketAddr::new(ip, 0))?;
    let addr = listener.local_addr()?;
    launcher::publish(OOB_KEY, &addr.to_string()).map_err(launcher_error)?;
    let oob = listener.accept(Some(LAUNCH_WAIT));
    // Best effort: the key is of no use once rank 1 is connected (or gone).
    _ = launcher::unpublish(OOB_KEY);
    let oob = oob.map_err(|e| Error::failed(format!("rank 1: {e}")))?;
    session::run_server(test, opts, &provider, oob)
}

fn client(test: Test, opts: &Opts) -> Result<()> {
    session::pin_side(opts, Side::Client)?;
    let provider = raw::check_available(&opts.provider)?;
    let text = launcher::lookup(OOB_KEY, Some(LAUNCH_WAIT))
        .map_err(launcher_error)?
        .ok_or_else(|| {
            Error::failed(format!(
                "rank 0 published no bootstrap address within {}s",
                LAUNCH_WAIT.as_secs()
            ))
        })?;
    let addr: SocketAddr = text.parse().map_err(|_| {
        Error::failed(format!(
            "rank 0 published {text:?}, not an address and port"
        ))
    })?;
    let oob = Oob::connect(&addr.ip().to_string(), addr.port(), Duration::from_secs(5))?;
    session::run_client(test, opts, &provider, oob, Output::Server)
}
