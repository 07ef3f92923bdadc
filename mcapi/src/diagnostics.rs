//! Diagnostics: why a call failed, on stderr, when the user asks (`MCAPI_LOG`).
//!
//! Off by default. `MCAPI_LOG=error|warn|info|debug|trace` (or any `env_logger` filter)
//! turns it on for this library the first time a node is initialized; libfabric's own
//! logging stays with `FI_LOG_LEVEL`. Every `MCAPI_ERR_NODE_INITFAILED`, and the causes of
//! `MCAPI_ERR_TRANSMISSION` and `MCAPI_ERR_GENERAL` (a fabric call that failed, a peer
//! lost, a refused frame, a broken node), are logged at `info` or above with the provider,
//! the call, libfabric's error text and the peer. Logging sits on error paths only: a call
//! that succeeds logs nothing and checks no level.

use std::sync::Once;

/// Turns logging on if `MCAPI_LOG` asks for it (once per process). An application that
/// installed a logger of its own keeps it: ours is then not installed.
pub(crate) fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let Some(filter) = std::env::var("MCAPI_LOG").ok().filter(|f| !f.is_empty()) else {
            return;
        };
        // A bare level applies to this library; a full filter is taken as it is.
        let filter = if filter.parse::<log::LevelFilter>().is_ok() {
            format!("mcapi={filter}")
        } else {
            filter
        };
        let pid = std::process::id();
        let _already_set = env_logger::Builder::new()
            .parse_filters(&filter)
            .format(move |out, record| {
                use std::io::Write;
                writeln!(out, "mcapi[{pid}] {}: {}", record.level(), record.args())
            })
            .target(env_logger::Target::Stderr)
            .try_init();
    });
}
