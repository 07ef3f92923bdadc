//! Errors of the fabric layer: which libfabric call failed, with `fi_strerror` text.

use crate::raw::{strerror, CompletionError};
use std::fmt;

/// Result of this crate's calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A failure in the fabric layer.
///
/// Building an `Error` never allocates except for the rare variants that carry names, so the
/// data path can return `-FI_EAGAIN` as an error without cost.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A libfabric call returned `-errno`.
    #[error("{call} failed: {} (-{errno})", strerror(*.errno))]
    Call {
        /// The libfabric function (and, in parentheses, what it was doing).
        call: &'static str,
        /// Positive libfabric error number (`FI_EAGAIN`, `FI_ENODATA`, ...).
        errno: i32,
    },
    /// An operation completed with an error (`fi_cq_readerr`).
    #[error(
        "operation completed with error: {} (-{}), provider: {} ({}), {} bytes, {} truncated",
        strerror(.0.err), .0.err, .0.prov_text, .0.prov_errno, .0.len, .0.olen
    )]
    Completion(Box<CompletionError>),
    /// The requested provider is not offered on this machine.
    #[error("{}", NotFound { requested, available, env_restriction })]
    ProviderNotFound {
        /// The name asked for.
        requested: String,
        /// What `fi_getinfo` offers for the same requirements.
        available: Vec<String>,
        /// The `FI_PROVIDER` environment restriction in force, if any.
        env_restriction: Option<String>,
    },
    /// Memory that an operation in flight uses (or that safe code is copying on another
    /// thread, or a sink region): a read, write or post that would race it was refused.
    #[error("memory in use: {0}")]
    InUse(&'static str),
    /// A bad argument caught before calling libfabric.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
}

/// The text of [`Error::ProviderNotFound`], which depends on which fields are set.
struct NotFound<'a> {
    requested: &'a str,
    available: &'a [String],
    env_restriction: &'a Option<String>,
}

impl fmt::Display for NotFound<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "libfabric provider '{}' is not available here",
            self.requested
        )?;
        if let Some(env) = self.env_restriction {
            write!(f, " (FI_PROVIDER={env} restricts what libfabric offers)")?;
        }
        if self.available.is_empty() {
            write!(f, "; no provider offers the required capabilities")
        } else {
            write!(f, "; available: {}", self.available.join(", "))
        }
    }
}

impl Error {
    pub(crate) fn call(call: &'static str, errno: i32) -> Error {
        Error::Call { call, errno }
    }

    /// The libfabric error number, if the error came from a call or a completion.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Call { errno, .. } => Some(*errno),
            Error::Completion(c) => Some(c.err),
            _ => None,
        }
    }

    /// `-FI_EAGAIN`: not an error but a request to progress the CQ and retry.
    #[inline]
    pub fn is_again(&self) -> bool {
        matches!(self, Error::Call { errno, .. } if *errno == ofi_sys::FI_EAGAIN as i32)
    }

    /// `-FI_ENOSYS`, `-FI_ENODATA` or `-FI_EOPNOTSUPP`: the provider does not offer this.
    pub fn is_unsupported(&self) -> bool {
        matches!(self.errno(), Some(e) if e == ofi_sys::FI_ENOSYS as i32
            || e == ofi_sys::FI_ENODATA as i32 || e == ofi_sys::FI_EOPNOTSUPP as i32)
    }
}
