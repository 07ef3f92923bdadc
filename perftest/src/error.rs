//! The benchmark's failures: "not run" (the provider is absent, exit code 61 as fabtests uses)
//! or a real failure with a message that says what was being done.

use std::fmt;

/// `ENODATA`: fabtests' exit code for a test that could not run here.
pub const EXIT_NOT_RUN: i32 = 61;

#[derive(Debug)]
pub enum Error {
    /// The provider (or something it needs) is not available on this machine.
    NotRun(String),
    /// Anything else.
    Failed(String),
    /// A failure another process of the job reports (launcher rank 0): this one exits
    /// with the failure's code and prints nothing, so the reason appears once.
    ReportedElsewhere,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn failed(msg: impl Into<String>) -> Error {
        Error::Failed(msg.into())
    }

    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::NotRun(_) => EXIT_NOT_RUN,
            Error::Failed(_) | Error::ReportedElsewhere => 1,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotRun(m) | Error::Failed(m) => f.write_str(m),
            Error::ReportedElsewhere => f.write_str("failed (rank 0 says why)"),
        }
    }
}

impl From<mcapi_ofi::Error> for Error {
    fn from(e: mcapi_ofi::Error) -> Error {
        match e {
            mcapi_ofi::Error::ProviderNotFound { .. } => Error::NotRun(e.to_string()),
            e => Error::Failed(e.to_string()),
        }
    }
}

/// Adds what was being done to an error from below.
pub trait Context<T> {
    fn context(self, what: impl fmt::Display) -> Result<T>;
}

impl<T, E: Into<Error>> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl fmt::Display) -> Result<T> {
        self.map_err(|e| match e.into() {
            Error::NotRun(m) => Error::NotRun(m),
            Error::Failed(m) => Error::Failed(format!("{what}: {m}")),
            Error::ReportedElsewhere => Error::ReportedElsewhere,
        })
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Failed(e.to_string())
    }
}
