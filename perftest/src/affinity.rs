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
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(Error::failed(format!("--cpu {cpu}: no such core")));
    }
    // SAFETY: cpu_set_t is a plain bit array for which all-zero is the valid empty set;
    // CPU_SET writes the bit for `cpu`, which is in range (checked above);
    // sched_setaffinity only reads `size_of::<cpu_set_t>()` bytes of the set we pass.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::failed(format!(
            "cannot pin to CPU core {cpu}: {} (this process may use {} cores)",
            std::io::Error::last_os_error(),
            online_cores()
        )))
    }
}
