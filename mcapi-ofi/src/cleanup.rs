//! What libfabric leaves behind a crashed process.

/// Removes the shared-memory regions the shm provider created for process `pid`
/// (`/dev/shm/<pid>:<n>:<n>`, 16 MiB each), which outlive a process that was killed. Call it
/// only for a process known to be dead. Returns how many were removed.
pub fn remove_shm_regions(pid: u32) -> usize {
    let prefix = format!("{pid}:");
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return 0;
    };
    dir.flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}
