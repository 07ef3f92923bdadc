//! MCAPI status codes (`mcapi_status_t`, spec 3.16.11 and 3.16.15).
//!
//! Numbering: `MCAPI_SUCCESS = 1` and every following code of the table in spec
//! 3.16.15 numbered consecutively in the order listed there (SUCCESS = 1 ..
//! GENERAL = 42). Codes that chapter 4's ERRORS tables use but 3.16.15 omits are
//! appended after, in the order they first appear in chapter 4 (43..=45).
//! `MCAPI_STATUSCODE_END` is a sentinel rather than a status, so it is the
//! constant [`STATUSCODE_END`] (one past the last code), keeping it "always last".
//!
//! Descriptions are the spec's one-line meanings, verbatim (typos included), so
//! they can be checked against the table with grep.

use std::fmt;

/// Defines [`Status`] and its tables from one list, so names, codes and
/// descriptions cannot drift apart.
macro_rules! status_codes {
    ($( $(#[$extra:meta])* $name:ident = $code:literal => $desc:literal; )*) => {
        /// An MCAPI status code (`mcapi_status_t`).
        ///
        /// Variants carry the exact C names so the mapping to `mcapi.h` is obvious.
        /// The discriminant is the C value ([`Status::code`]).
        #[repr(u32)]
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
        pub enum Status {
            $( #[doc = $desc] $(#[$extra])* $name = $code, )*
        }

        impl Status {
            /// Every status, in code order (`ALL[i].code() == i + 1`).
            pub const ALL: &'static [Status] = &[ $(Status::$name,)* ];

            /// The exact C name, e.g. `"MCAPI_ERR_ENDP_INVALID"`
            /// (what `mcapi_display_status()` prints, spec 4.7.1).
            pub const fn name(self) -> &'static str {
                match self { $(Status::$name => stringify!($name),)* }
            }

            /// The spec's one-line meaning of the code.
            pub const fn description(self) -> &'static str {
                match self { $(Status::$name => $desc,)* }
            }
        }
    };
}

status_codes! {
    MCAPI_SUCCESS = 1 => "Indicates operation was successful";
    MCAPI_PENDING = 2 => "Indicates operation is pending without errors";
    MCAPI_TIMEOUT = 3 => "The operation timed out";
    MCAPI_ERR_PARAMETER = 4 => "Incorrect parameter";
    MCAPI_ERR_DOMAIN_INVALID = 5 => "The parameter is not a valid domain";
    MCAPI_ERR_NODE_INVALID = 6 => "The parameter is not a valid node";
    MCAPI_ERR_NODE_INITFAILED = 7 => "The MCAPI node could not be initialized";
    MCAPI_ERR_NODE_INITIALIZED = 8 => "MCAPI node is already initialized";
    MCAPI_ERR_NODE_NOTINIT = 9 => "The MCAPI node is not initialized";
    MCAPI_ERR_NODE_FINALFAILED = 10 => "The MCAPI could not be finalized";
    MCAPI_ERR_PORT_INVALID = 11 => "The parameter is not a valid port";
    MCAPI_ERR_ENDP_INVALID = 12 => "The parameter is not a valid endpoint descriptor";
    MCAPI_ERR_ENDP_EXISTS = 13 => "The endpoint is already created";
    MCAPI_ERR_ENDP_GET_LIMIT = 14 => "The endpoint get reference count is too high";
    MCAPI_ERR_ENDP_NOTOWNER = 15 => "An endpoint can only be deleted by its creator";
    MCAPI_ERR_ENDP_REMOTE = 16 => "Certain operations are only allowed on the node local endpoints";
    MCAPI_ERR_ATTR_INCOMPATIBLE = 17 => "Connection of endpoints with incompatible attributes not allowed";
    MCAPI_ERR_ATTR_SIZE = 18 => "Incorrect attribute size";
    MCAPI_ERR_ATTR_NUM = 19 => "Incorrect attribute number";
    MCAPI_ERR_ATTR_VALUE = 20 => "Incorrect attribute vale";
    MCAPI_ERR_ATTR_NOTSUPPORTED = 21 => "Attribute not supported by the implementation";
    MCAPI_ERR_ATTR_READONLY = 22 => "Attribute is read only";
    MCAPI_ERR_MSG_SIZE = 23 => "The message size exceeds the maximum size allowed by the MCAPI implementation";
    MCAPI_ERR_MSG_TRUNCATED = 24 => "The message size exceeds the buffer size";
    MCAPI_ERR_CHAN_OPEN = 25 => "A channel is open, certain operations are not allowed";
    MCAPI_ERR_CHAN_TYPE = 26 => "Attempt to open a packet/scalar channel on an endpoint that has been connected with a different channel type";
    MCAPI_ERR_CHAN_DIRECTION = 27 => "Attempt to open a send handle on a port that was connected as a receiver, or vice versa";
    MCAPI_ERR_CHAN_CONNECTED = 28 => "A channel connection has already been established for one or both of the specified endpoints";
    MCAPI_ERR_CHAN_OPENPENDING = 29 => "An open request is pending";
    MCAPI_ERR_CHAN_CLOSEPENDING = 30 => "A close request is pending.";
    MCAPI_ERR_CHAN_NOTOPEN = 31 => "The channel is not open (cannot be closed)";
    MCAPI_ERR_CHAN_INVALID = 32 => "Argument is not a channel handle";
    MCAPI_ERR_PKT_SIZE = 33 => "The packet size exceeds the maximum size allowed by the MCAPI implementation";
    MCAPI_ERR_TRANSMISSION = 34 => "Transmission failure";
    MCAPI_ERR_PRIORITY = 35 => "Incorrect priority level";
    MCAPI_ERR_BUF_INVALID = 36 => "Not a valid buffer descriptor";
    MCAPI_ERR_MEM_LIMIT = 37 => "Out of memory";
    MCAPI_ERR_REQUEST_INVALID = 38 => "Argument is not a valid request handle";
    MCAPI_ERR_REQUEST_LIMIT = 39 => "Out of request handles";
    MCAPI_ERR_REQUEST_CANCELLED = 40 => "The request was already canceled";
    MCAPI_ERR_WAIT_PENDING = 41 => "A wait is pending";
    MCAPI_ERR_GENERAL = 42 => "To be used by implementations for error conditions not covered by the other status codes";

    // Used in chapter 4 ERRORS tables but missing from 3.16.15.
    /// (Spec 4.1.11/4.1.12, ABB extension `mcapi_node_connect`/`_disconnect`.)
    MCAPI_ERR_NODE_CONFFAILED = 43 => "The node endpoints or channels could not be configured";
    /// (Spec 4.2.3 `mcapi_endpoint_get`; 4.2.2 `_i` reports the same condition
    /// as `MCAPI_ERR_ENDP_GET_LIMIT`, so this is most likely an editing slip,
    /// kept so C code naming it compiles.)
    MCAPI_ERR_ENDP_GET_INVALID = 44 => "The endpoint get reference count is too high.";
    /// (Spec 4.4.2/4.4.3/4.5.2/4.5.3, channel open on a deleted endpoint.)
    MCAPI_ERR_ENDP_DELETED = 45 => "The endpoint has been deleted.";

    // Extension: not in MCAPI 2.000.
    /// (Extension: the MCA reference implementation's code for `mcapi_endpoint_create`
    /// beyond `MCAPI_MAX_ENDPOINTS`, returned only in its compatibility mode
    /// (`MCAPI_COMPAT=mca`); the spec's `MCAPI_ERR_PORT_INVALID` otherwise.)
    MCAPI_ERR_ENDP_LIMIT = 46 => "Out of endpoints (the node has MCAPI_MAX_ENDPOINTS)";
}

/// `MCAPI_STATUSCODE_END`: one past the last status code ("should always be last").
pub const STATUSCODE_END: u32 = Status::ALL.len() as u32 + 1;

/// Length in bytes of the longest [`Status::name`], so a C caller's
/// `mcapi_display_status` buffer can be sized (add 1 for the NUL).
pub const MAX_NAME_LEN: usize = {
    let mut max = 0;
    let mut i = 0;
    while i < Status::ALL.len() {
        let n = Status::ALL[i].name().len();
        if n > max {
            max = n;
        }
        i += 1;
    }
    max
};

impl Status {
    /// The C value of the code.
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// The status with C value `code`, or `None` for a value that is no status
    /// (0, `STATUSCODE_END` and above): `mcapi_display_status` then returns NULL.
    pub const fn from_code(code: u32) -> Option<Status> {
        // Relies on consecutive numbering from 1 (checked by a test).
        if code >= 1 && (code as usize) <= Status::ALL.len() {
            Some(Status::ALL[code as usize - 1])
        } else {
            None
        }
    }

    /// `true` only for `MCAPI_SUCCESS`.
    pub const fn is_success(self) -> bool {
        matches!(self, Status::MCAPI_SUCCESS)
    }
}

/// `mcapi_display_status` (spec 4.7.1) minus the C buffer handling: the name
/// of `code`, or `None` ("a NULL string") if `code` is not a status.
pub fn display_status(code: u32) -> Option<&'static str> {
    Status::from_code(code).map(Status::name)
}

impl fmt::Display for Status {
    /// Prints the C name, as `mcapi_display_status` does.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::error::Error for Status {}

impl From<Status> for u32 {
    fn from(s: Status) -> u32 {
        s.code()
    }
}

impl TryFrom<u32> for Status {
    /// The rejected value.
    type Error = u32;

    fn try_from(code: u32) -> Result<Status, u32> {
        Status::from_code(code).ok_or(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn numbering_is_consecutive_from_one() {
        for (i, s) in Status::ALL.iter().enumerate() {
            assert_eq!(s.code() as usize, i + 1, "{s}");
            assert_eq!(Status::from_code(s.code()), Some(*s));
        }
        assert_eq!(STATUSCODE_END as usize, Status::ALL.len() + 1);
    }

    #[test]
    fn names_and_descriptions_are_unique_and_well_formed() {
        let mut names = HashSet::new();
        for s in Status::ALL {
            assert!(names.insert(s.name()), "duplicate name {}", s.name());
            assert!(s.name().starts_with("MCAPI_"));
            assert!(!s.description().is_empty());
            assert!(s.name().len() <= MAX_NAME_LEN);
        }
        assert_eq!(MAX_NAME_LEN, "MCAPI_ERR_REQUEST_CANCELLED".len());
    }

    #[test]
    fn known_codes() {
        // Spot checks against the 3.16.15 table order.
        let table = [
            (1, Status::MCAPI_SUCCESS, "MCAPI_SUCCESS"),
            (2, Status::MCAPI_PENDING, "MCAPI_PENDING"),
            (3, Status::MCAPI_TIMEOUT, "MCAPI_TIMEOUT"),
            (12, Status::MCAPI_ERR_ENDP_INVALID, "MCAPI_ERR_ENDP_INVALID"),
            (
                24,
                Status::MCAPI_ERR_MSG_TRUNCATED,
                "MCAPI_ERR_MSG_TRUNCATED",
            ),
            (
                38,
                Status::MCAPI_ERR_REQUEST_INVALID,
                "MCAPI_ERR_REQUEST_INVALID",
            ),
            (41, Status::MCAPI_ERR_WAIT_PENDING, "MCAPI_ERR_WAIT_PENDING"),
            (42, Status::MCAPI_ERR_GENERAL, "MCAPI_ERR_GENERAL"),
            (45, Status::MCAPI_ERR_ENDP_DELETED, "MCAPI_ERR_ENDP_DELETED"),
        ];
        for (code, status, name) in table {
            assert_eq!(status.code(), code);
            assert_eq!(status.name(), name);
            assert_eq!(status.to_string(), name);
            assert_eq!(display_status(code), Some(name));
            assert_eq!(Status::try_from(code), Ok(status));
            assert_eq!(u32::from(status), code);
        }
    }

    #[test]
    fn invalid_codes() {
        for code in [0, STATUSCODE_END, STATUSCODE_END + 1, u32::MAX] {
            assert_eq!(Status::from_code(code), None);
            assert_eq!(display_status(code), None);
            assert_eq!(Status::try_from(code), Err(code));
        }
    }

    #[test]
    fn is_error_trait_object() {
        let e: Box<dyn std::error::Error> = Box::new(Status::MCAPI_ERR_MEM_LIMIT);
        assert_eq!(e.to_string(), "MCAPI_ERR_MEM_LIMIT");
        assert!(Status::MCAPI_SUCCESS.is_success());
        assert!(!Status::MCAPI_PENDING.is_success());
    }
}
