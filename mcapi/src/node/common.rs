//! What every node module shares: the result type, locking, fabric-error status, limits.

use crate::control::Frame;
use crate::semantics::Status;
use mcapi_ofi::Error as OfiError;
use std::sync::{Mutex, MutexGuard};

/// Largest message (`MCAPI_MAX_MSG_SIZE`), the compile-time ceiling: messages above the
/// eager size go by rendezvous (`node/rendezvous.rs`), so it sizes no receive memory.
/// [`Config::max_msg_size`](crate::config::Config::max_msg_size) may lower it per node.
pub const MAX_MSG_SIZE: usize = 16 * 1024 * 1024;
/// Size of a slot of the node's send and receive pools: the largest eager message.
pub const EAGER_SLOT: usize = 64 * 1024;
/// Endpoints a node has at most (`MCAPI_MAX_ENDPOINTS`): they share the node's receive
/// pool, so the providers' posted-receive limits do not bound them.
pub const MAX_ENDPOINTS: usize = 512;
/// Priorities per endpoint (`MCAPI_MAX_PRIORITY` + 1); 0 is the highest.
pub const NUM_PRIORITIES: u32 = 8;

pub(super) type Result<T> = std::result::Result<T, Status>;

/// Locks `m`, also when a thread panicked while holding it.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Any failed fabric call, as MCAPI reports it; the call and libfabric's reason are logged
/// (`MCAPI_LOG=info`).
#[cold]
pub(super) fn ofi_status(e: OfiError) -> Status {
    log::info!("MCAPI_ERR_TRANSMISSION: {e}");
    Status::MCAPI_ERR_TRANSMISSION
}

/// An error reaching another node's endpoint (its node not running, unknown to the job,
/// gone, or finalizing, whose refusal names *its* state) as the ERRORS tables of calls on
/// endpoints have it: the endpoint is no valid one. Call only once this node is known live.
pub(super) fn endpoint_unreachable(e: Status) -> Status {
    match e {
        Status::MCAPI_TIMEOUT
        | Status::MCAPI_ERR_TRANSMISSION
        | Status::MCAPI_ERR_NODE_INVALID
        | Status::MCAPI_ERR_NODE_NOTINIT => Status::MCAPI_ERR_ENDP_INVALID,
        e => e,
    }
}

/// What a control answer other than the one asked for means: the refusal's status, else
/// `MCAPI_ERR_GENERAL` (a code this build does not know, or another kind of answer: a peer
/// of another build), with the reason logged. A refusal naming the other node's own state
/// (`MCAPI_ERR_NODE_NOTINIT`: it is finalizing; `MCAPI_ERR_NODE_INVALID`) says that node
/// is gone, `MCAPI_ERR_TRANSMISSION`: the caller's node is live, and a caller that took
/// `NODE_NOTINIT` for its own state stopped (a stress review: `msg_send` to a node that
/// was finalizing).
#[cold]
pub(super) fn refusal(what: &str, answer: &Frame) -> Status {
    let status = match answer {
        Frame::Refused(code) => Status::from_code(*code).map(|s| match s {
            Status::MCAPI_ERR_NODE_NOTINIT | Status::MCAPI_ERR_NODE_INVALID => {
                Status::MCAPI_ERR_TRANSMISSION
            }
            s => s,
        }),
        _ => None,
    };
    match status {
        Some(s) => {
            if s == Status::MCAPI_ERR_GENERAL {
                log::info!("{what}: refused with MCAPI_ERR_GENERAL");
            } else {
                log::debug!("{what}: refused with {s}");
            }
            s
        }
        None => {
            log::info!("{what}: MCAPI_ERR_GENERAL: unexpected answer {answer:?}");
            Status::MCAPI_ERR_GENERAL
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer's refusal that names its own node's state says that node is gone: never
    /// `MCAPI_ERR_NODE_NOTINIT`, which the caller would take for its own node's (a stress
    /// review saw `msg_send` to a finalizing node return it). Other refusals keep their code.
    #[test]
    fn a_refusal_naming_the_peers_node_says_it_is_gone() {
        for (refused, want) in [
            (
                Status::MCAPI_ERR_NODE_NOTINIT,
                Status::MCAPI_ERR_TRANSMISSION,
            ),
            (
                Status::MCAPI_ERR_NODE_INVALID,
                Status::MCAPI_ERR_TRANSMISSION,
            ),
            (
                Status::MCAPI_ERR_ENDP_INVALID,
                Status::MCAPI_ERR_ENDP_INVALID,
            ),
            (Status::MCAPI_ERR_CHAN_TYPE, Status::MCAPI_ERR_CHAN_TYPE),
        ] {
            assert_eq!(refusal("test", &Frame::Refused(refused.code())), want);
        }
        assert_eq!(refusal("test", &Frame::Value(1)), Status::MCAPI_ERR_GENERAL);
    }
}
