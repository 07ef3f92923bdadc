//! Global, self-validating endpoint identifiers (`mcapi_endpoint_t`).
//!
//! An endpoint is named by the tuple `<domain, node, port>` (spec 4.2.2); the
//! identifier must be globally unique and comparable with `==` (3.16.4). We
//! pack the tuple into a `u64` together with a 16-bit check field, so any
//! value the application hands back is validated before use: 0 (`MCAPI_NULL`),
//! an uninitialised variable or `0xdeadbeef` decodes as invalid instead of
//! naming some other endpoint.
//!
//! Layout (bit 0 = least significant):
//!
//! | bits   | field  | valid range                 |
//! |--------|--------|-----------------------------|
//! | 0..24  | port   | `0..=MAX_PORT` (0xFF_FFFE)  |
//! | 24..40 | node   | `0..=MAX_NODE` (0xFFFE)     |
//! | 40..48 | domain | `0..=MAX_DOMAIN` (0xFF)     |
//! | 48..64 | check  | `check16(bits 0..48)`       |
//!
//! The all-ones value of each narrow field is reserved: all-ones node and port
//! are what a truncated `~0` sentinel (`MCAPI_PORT_ANY`, "any node") would
//! become, so such a truncation can never produce a valid identifier.

use super::check16;
use super::status::Status;
use std::fmt;

/// Largest valid domain id (8-bit field; a cluster needs few domains).
pub const MAX_DOMAIN: u32 = 0xFF;
/// Largest valid node id (16-bit field, all-ones reserved).
pub const MAX_NODE: u32 = 0xFFFE;
/// Largest valid port id (24-bit field, all-ones reserved).
pub const MAX_PORT: u32 = 0x00FF_FFFE;
/// `MCAPI_PORT_ANY` (`~0`): asks `mcapi_endpoint_create` for the next free
/// port (spec 4.2.1). A sentinel, never a valid port of an identifier.
pub const PORT_ANY: u32 = u32::MAX;

/// Salt of [`check16`] for endpoint ids (differs from request handles').
const SALT: u64 = 0x6D63_6170_6945_6E64; // "mcapiEnd"

const PORT_BITS: u32 = 24;
const NODE_BITS: u32 = 16;
const NODE_SHIFT: u32 = PORT_BITS;
const DOMAIN_SHIFT: u32 = PORT_BITS + NODE_BITS;
const CHECK_SHIFT: u32 = 48;

/// A validated endpoint identifier: `<domain, node, port>` plus a check field.
///
/// Only [`EndpointId::encode`] and [`EndpointId::from_raw`] create one, so a
/// value of this type always decodes. Ordering follows the raw value and has
/// no meaning beyond making ids usable as sorted keys.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EndpointId(u64);

impl EndpointId {
    /// Packs `<domain, node, port>` into an identifier.
    ///
    /// # Errors
    /// `MCAPI_ERR_DOMAIN_INVALID`, `MCAPI_ERR_NODE_INVALID` or
    /// `MCAPI_ERR_PORT_INVALID` (checked in that order) when a field is above
    /// its `MAX_*`; `PORT_ANY` is rejected as a port, the caller must resolve
    /// it to a concrete port first.
    pub const fn encode(domain: u32, node: u32, port: u32) -> Result<EndpointId, Status> {
        if domain > MAX_DOMAIN {
            return Err(Status::MCAPI_ERR_DOMAIN_INVALID);
        }
        if node > MAX_NODE {
            return Err(Status::MCAPI_ERR_NODE_INVALID);
        }
        if port > MAX_PORT {
            return Err(Status::MCAPI_ERR_PORT_INVALID);
        }
        let payload =
            ((domain as u64) << DOMAIN_SHIFT) | ((node as u64) << NODE_SHIFT) | port as u64;
        let check = check16(payload, SALT) as u64;
        Ok(EndpointId(payload | (check << CHECK_SHIFT)))
    }

    /// Unpacks a raw value into `(domain, node, port)`, or `None` if the check
    /// field does not match or a field holds a reserved value.
    pub const fn decode(raw: u64) -> Option<(u32, u32, u32)> {
        let payload = raw & ((1 << CHECK_SHIFT) - 1);
        if (raw >> CHECK_SHIFT) as u16 != check16(payload, SALT) {
            return None;
        }
        let port = (payload & ((1 << PORT_BITS) - 1)) as u32;
        let node = ((payload >> NODE_SHIFT) & ((1 << NODE_BITS) - 1)) as u32;
        let domain = (payload >> DOMAIN_SHIFT) as u32;
        // Reserved all-ones fields are invalid even with a matching check.
        if node > MAX_NODE || port > MAX_PORT {
            return None;
        }
        Some((domain, node, port))
    }

    /// Validates a raw value (e.g. a `mcapi_endpoint_t` from C).
    pub const fn from_raw(raw: u64) -> Option<EndpointId> {
        match EndpointId::decode(raw) {
            Some(_) => Some(EndpointId(raw)),
            None => None,
        }
    }

    /// The raw value to hand out as `mcapi_endpoint_t` or put on the wire.
    pub const fn as_raw(self) -> u64 {
        self.0
    }

    /// The domain id.
    pub const fn domain(self) -> u32 {
        (self.0 >> DOMAIN_SHIFT) as u32 & MAX_DOMAIN
    }

    /// The node id.
    pub const fn node(self) -> u32 {
        (self.0 >> NODE_SHIFT) as u32 & 0xFFFF
    }

    /// The port id.
    pub const fn port(self) -> u32 {
        self.0 as u32 & 0x00FF_FFFF
    }
}

impl fmt::Display for EndpointId {
    /// The spec's tuple notation, `<domain,node,port>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{},{},{}>", self.domain(), self.node(), self.port())
    }
}

impl fmt::Debug for EndpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EndpointId{self}")
    }
}

#[cfg(test)]
mod tests {
    use super::super::XorShift;
    use super::*;

    #[test]
    fn round_trip_table() {
        let table = [
            (0, 0, 0),
            (0, 0, 1),
            (1, 2, 3),
            (MAX_DOMAIN, 0, 0),
            (0, MAX_NODE, 0),
            (0, 0, MAX_PORT),
            (MAX_DOMAIN, MAX_NODE, MAX_PORT),
            (7, 1000, 0x12_3456),
        ];
        for (d, n, p) in table {
            let id = EndpointId::encode(d, n, p).unwrap();
            assert_eq!(EndpointId::decode(id.as_raw()), Some((d, n, p)));
            assert_eq!(EndpointId::from_raw(id.as_raw()), Some(id));
            assert_eq!((id.domain(), id.node(), id.port()), (d, n, p));
        }
    }

    #[test]
    fn out_of_range_fields() {
        let table = [
            (MAX_DOMAIN + 1, 0, 0, Status::MCAPI_ERR_DOMAIN_INVALID),
            (
                u32::MAX,
                u32::MAX,
                u32::MAX,
                Status::MCAPI_ERR_DOMAIN_INVALID,
            ),
            (0, MAX_NODE + 1, 0, Status::MCAPI_ERR_NODE_INVALID),
            (0, 0, MAX_PORT + 1, Status::MCAPI_ERR_PORT_INVALID),
            (0, 0, PORT_ANY, Status::MCAPI_ERR_PORT_INVALID),
        ];
        for (d, n, p, err) in table {
            assert_eq!(EndpointId::encode(d, n, p), Err(err), "<{d},{n},{p}>");
        }
    }

    #[test]
    fn well_known_garbage_is_invalid() {
        for raw in [
            0,
            1,
            0xdead_beef,
            0xdead_beef_dead_beef,
            u64::MAX,
            u32::MAX as u64,
        ] {
            assert_eq!(EndpointId::decode(raw), None, "{raw:#x}");
        }
    }

    #[test]
    fn single_bit_flips_are_invalid() {
        let id = EndpointId::encode(3, 42, 4242).unwrap();
        for bit in 0..64 {
            assert_eq!(
                EndpointId::decode(id.as_raw() ^ (1 << bit)),
                None,
                "bit {bit}"
            );
        }
    }

    #[test]
    fn random_garbage_rejection_rate() {
        let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
        let n = 1_000_000;
        let accepted = (0..n)
            .filter(|_| EndpointId::decode(rng.next_u64()).is_some())
            .count();
        // Expected about n / 65536 (~15); require better than 1 in 10,000.
        assert!(accepted < n / 10_000, "{accepted} of {n} accepted");
    }

    #[test]
    fn distinct_tuples_give_distinct_ids() {
        let a = EndpointId::encode(1, 2, 3).unwrap();
        let b = EndpointId::encode(1, 3, 2).unwrap();
        assert_ne!(a, b);
        assert_eq!(a.to_string(), "<1,2,3>");
        assert_eq!(format!("{a:?}"), "EndpointId<1,2,3>");
    }
}
