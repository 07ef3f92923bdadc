//! Diagnostics: why a call failed, on stderr (`MCAPI_LOG`).
//!
//! For C programs, errors by default: why an initialize failed (an unknown provider, a node
//! id taken, a key file others can read...), a panic caught at the C boundary, so a C
//! program that gets `MCAPI_ERR_NODE_INITFAILED` is told why; `MCAPI_LOG=off` silences
//! them. A Rust program's records go to its own logger (the `log` crate); ours is installed
//! only when `MCAPI_LOG` asks. `MCAPI_LOG=error|warn|info|debug|trace` (or any `env_logger`
//! filter) sets the level for this library the first time a node is initialized;
//! libfabric's own logging stays with `FI_LOG_LEVEL`. Every `MCAPI_ERR_NODE_INITFAILED`, and the causes of
//! `MCAPI_ERR_TRANSMISSION` and `MCAPI_ERR_GENERAL` (a fabric call that failed, a peer
//! lost, a refused frame, a broken node), are logged at `info` or above with the provider,
//! the call, libfabric's error text and the peer. Logging sits on error paths only: a call
//! that succeeds logs nothing and checks no level.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

/// Our logger is the one installed, at errors only until `mcapi_set_debug_level`.
static OURS: AtomicBool = AtomicBool::new(false);

/// Installs our stderr logger if `MCAPI_LOG` asks for it (once per process; the Rust
/// API). An application that installed a logger of its own keeps it: ours is then not
/// installed.
pub(crate) fn init() {
    init_with(false);
}

/// As [`init`], for the C ABI: without `MCAPI_LOG`, errors only (a C program has no
/// logger of its own to read them from).
pub(crate) fn init_for_c() {
    init_with(true);
}

fn init_with(errors_by_default: bool) {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let Some(filter) = log_variable() else {
            // Errors only, with room for `mcapi_set_debug_level` to raise the level.
            if errors_by_default && install("mcapi=trace") {
                OURS.store(true, Ordering::Relaxed);
                log::set_max_level(log::LevelFilter::Error);
            }
            return;
        };
        // A bare level applies to this library; a full filter is taken as it is.
        let filter = if filter.parse::<log::LevelFilter>().is_ok() {
            format!("mcapi={filter}")
        } else {
            filter
        };
        _ = install(&filter);
    });
}

/// `MCAPI_LOG`, when set and not empty.
fn log_variable() -> Option<String> {
    std::env::var("MCAPI_LOG").ok().filter(|f| !f.is_empty())
}

/// Installs our stderr logger with `filter`, unless a logger is installed already (`false`).
fn install(filter: &str) -> bool {
    let pid = std::process::id();
    env_logger::Builder::new()
        .parse_filters(filter)
        .format(move |out, record| {
            use std::io::Write;
            writeln!(out, "mcapi[{pid}] {}: {}", record.level(), record.args())
        })
        .target(env_logger::Target::Stderr)
        .try_init()
        .is_ok()
}

/// The level `mcapi_set_debug_level(level)` stands for: 0 (or less) off, 1 errors, 2
/// warnings, 3 info, 4 debug, 5 and more everything.
pub(crate) fn debug_level(level: i32) -> log::LevelFilter {
    match level {
        i32::MIN..=0 => log::LevelFilter::Off,
        1 => log::LevelFilter::Error,
        2 => log::LevelFilter::Warn,
        3 => log::LevelFilter::Info,
        4 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    }
}

/// `mcapi_set_debug_level` (an extension, the reference implementation's switch): this
/// library's diagnostics on stderr at [`debug_level`]`(level)`, as `MCAPI_LOG=<level>`
/// would. `MCAPI_LOG`, when set, wins: the call then changes nothing.
pub(crate) fn set_debug_level(level: i32) {
    if log_variable().is_some() {
        return;
    }
    init_for_c();
    // An application's own logger keeps its level.
    if OURS.load(Ordering::Relaxed) {
        log::set_max_level(debug_level(level));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_levels() {
        assert_eq!(debug_level(-3), log::LevelFilter::Off);
        assert_eq!(debug_level(0), log::LevelFilter::Off);
        assert_eq!(debug_level(1), log::LevelFilter::Error);
        assert_eq!(debug_level(3), log::LevelFilter::Info);
        assert_eq!(debug_level(6), log::LevelFilter::Trace);
    }
}
