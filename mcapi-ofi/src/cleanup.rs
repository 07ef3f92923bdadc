//! What libfabric leaves behind a crashed process.

/// Removes the shared-memory regions the shm provider created for process `pid`
/// (`/dev/shm/<pid>:<n>:<n>`, 16 MiB each), which outlive a process that was killed. Call it
/// only for a process known to be dead. Returns how many were removed.
pub fn remove_shm_regions(pid: u32) -> usize {
    remove_regions_of(pid, |_| true)
}

/// The region name in the shm endpoint address `address` (`fi_shm://<name>`): a file name
/// under `/dev/shm`.
pub(crate) fn region_name(address: &[u8]) -> Option<&str> {
    let address = std::str::from_utf8(address).ok()?;
    let name = address.trim_end_matches('\0');
    let name = name.strip_prefix("fi_shm://").unwrap_or(name);
    (!name.is_empty() && !name.contains('/') && !name.starts_with('.')).then_some(name)
}

/// Removes the shared-memory region file of the shm endpoint at `address`, as closing the
/// endpoint does; its mappings stay valid.
pub(crate) fn unlink_region(address: &[u8]) {
    if let Some(name) = region_name(address) {
        _ = std::fs::remove_file(std::path::Path::new("/dev/shm").join(name));
    }
}

/// Removes `/dev/shm/<pid>:*` regions for which `stale` holds. Returns how many.
fn remove_regions_of(pid: u32, stale: impl Fn(&std::fs::DirEntry) -> bool) -> usize {
    let prefix = format!("{pid}:");
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return 0;
    };
    dir.flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .filter(|e| stale(e))
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}

/// Before this process's first shm endpoint: regions named for this pid that are older than
/// the process belong to a dead process whose pid was recycled (a killed process leaves its
/// regions behind), and the shm provider would refuse to create this process's own
/// (`fi_enable`: `-EBUSY`). Removed once per process; regions made since the process
/// started (by another libfabric user in it) are left alone.
pub(crate) fn clear_recycled_pid_regions() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let Some(started) = process_start() else {
            return;
        };
        remove_regions_of(std::process::id(), |e| {
            e.metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t < started)
        });
    });
}

/// When this process started, from `/proc` (boot time plus the start tick; USER_HZ is 100
/// on Linux), rounded down to the second before.
fn process_start() -> Option<std::time::SystemTime> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Field 22 (starttime), counted after the command name's closing parenthesis.
    let ticks: u64 = stat
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()?;
    let boot: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let secs = (boot + ticks / 100).checked_sub(1)?;
    Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_started_in_the_past() {
        let started = super::process_start().expect("a start time from /proc");
        let now = std::time::SystemTime::now();
        assert!(started <= now);
        assert!(now.duration_since(started).unwrap() < std::time::Duration::from_secs(3600));
    }
}
