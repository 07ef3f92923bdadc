//! `--cpu`: pinning each side to one core, so the scheduler does not move a busy-polling
//! process mid-run.

use crate::cli::CpuSpec;
use crate::error::{Error, Result};

/// Which side of the benchmark a process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Server,
    Client,
}

/// The core for `side`: the server's as given, the client's as given or the next one.
pub fn core_for(spec: CpuSpec, side: Side) -> usize {
    match side {
        Side::Server => spec.server,
        Side::Client => spec
            .client
            .unwrap_or_else(|| (spec.server + 1) % online_cores()),
    }
}

fn online_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Pins the calling process (its current thread; called before any other is started) to `cpu`.
pub fn pin(cpu: usize) -> Result<()> {
    use nix::sched::{sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let mut set = CpuSet::new();
    set.set(cpu)
        .map_err(|_| Error::failed(format!("--cpu {cpu}: no such core")))?;
    sched_setaffinity(Pid::from_raw(0), &set).map_err(|e| {
        Error::failed(format!(
            "cannot pin to CPU core {cpu}: {e} (this process may use {} cores)",
            online_cores()
        ))
    })
}
