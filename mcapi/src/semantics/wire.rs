//! What travels in a libfabric tag and operation context.
//!
//! Every MCAPI node has one RDM endpoint; the 64-bit tag says what a message is and for whom,
//! so the receiver can match, order and route it without reading the payload:
//!
//! | bits | field |
//! |---|---|
//! | 60..64 | [`Kind`] |
//! | 56..60 | priority (0 highest) |
//! | 32..56 | destination port |
//! | 16..32 | sender, as the *receiving* node numbers its peers |
//! | 0..16 | sequence number per (sender node, destination endpoint), wrapping |
//!
//! Control kinds (credit grants, requests, returns, recalls) travel as *untagged* messages:
//! the encoded tag is their 8-byte payload, their numbers the remote CQ data. Their receives
//! then sit in the provider's untagged queue, and a message never walks past them to find
//! its endpoint's receive (shm and rxm match tagged receives by walking the posted list).

/// What a tagged message is. Control kinds have the top bit set, so one tag pattern
/// ([`Tag::match_control`]) matches any of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// An MCAPI message (payload).
    Message = 1,
    /// Credits for the sender (receiver -> sender); data: count.
    Grant = 8,
    /// The sender asks for credits; data: `want << 32 | seen`.
    Request = 9,
    /// The sender gives credits back; data: count.
    Return = 10,
    /// The receiver asks for unspent credits back; data: count.
    Recall = 11,
    /// The receiver of a rendezvous message is done with the sender's staged data
    /// (read, or discarded); data: the sender's staging id.
    RndvDone = 12,
    /// The sender's last message before it finalizes, behind everything it sent: nothing
    /// for the receiver to do (the sender waits for its send completion, which says the
    /// provider has written what went before it).
    Flush = 13,
}

impl Kind {
    fn from_bits(b: u64) -> Option<Kind> {
        Some(match b {
            1 => Kind::Message,
            8 => Kind::Grant,
            9 => Kind::Request,
            10 => Kind::Return,
            11 => Kind::Recall,
            12 => Kind::RndvDone,
            13 => Kind::Flush,
            _ => return None,
        })
    }
}

/// Largest port that fits the tag.
pub const MAX_WIRE_PORT: u32 = (1 << 24) - 1;
/// Largest peer index that fits the tag.
pub const MAX_PEERS: usize = 1 << 16;
/// Priorities that fit the tag.
pub const MAX_PRIORITIES: u32 = 16;

/// A decoded tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    /// What the message is.
    pub kind: Kind,
    /// MCAPI priority.
    pub priority: u8,
    /// Destination port on the receiving node.
    pub port: u32,
    /// The sender, numbered by the receiver.
    pub peer: u16,
    /// Sequence number.
    pub seq: u16,
}

impl Tag {
    /// Packs the tag; fields are masked to their widths (callers validate ranges first).
    pub const fn encode(&self) -> u64 {
        (self.kind as u64) << 60
            | ((self.priority as u64) & 0xF) << 56
            | ((self.port as u64) & 0xFF_FFFF) << 32
            | (self.peer as u64) << 16
            | self.seq as u64
    }

    /// Unpacks a tag; `None` for an unknown kind.
    pub fn decode(t: u64) -> Option<Tag> {
        Some(Tag {
            kind: Kind::from_bits(t >> 60)?,
            priority: ((t >> 56) & 0xF) as u8,
            port: ((t >> 32) & 0xFF_FFFF) as u32,
            peer: (t >> 16) as u16,
            seq: t as u16,
        })
    }

    /// Tag and ignore mask that match every message of `kind` for `port`.
    pub const fn match_port(kind: Kind, port: u32) -> (u64, u64) {
        let t = Tag {
            kind,
            priority: 0,
            port,
            peer: 0,
            seq: 0,
        };
        (t.encode(), (0xF << 56) | 0xFFFF_FFFF)
    }

    /// Tag and ignore mask that match every message of `kind`, for any port, priority,
    /// sender and sequence number (the node's receive pool).
    pub const fn match_kind(kind: Kind) -> (u64, u64) {
        ((kind as u64) << 60, (1 << 60) - 1)
    }

    /// Tag and ignore mask that match every control message (any control kind).
    pub const fn match_control() -> (u64, u64) {
        (1 << 63, (1 << 63) - 1)
    }
}

/// What a posted operation was for, carried in its libfabric context value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    /// A slot of the node's message receive pool (any port: the tag says whose).
    RecvSlot(u32),
    /// A node-level receive slot for control messages.
    ControlSlot(u32),
    /// A send from the node's send slot pool.
    SendSlot(u32),
    /// The RMA read of a rendezvous message's data (its read number).
    Read(u32),
}

impl Context {
    /// Packs into a non-zero `u64`.
    pub const fn encode(self) -> u64 {
        match self {
            Context::RecvSlot(slot) => 1 << 62 | slot as u64,
            Context::ControlSlot(i) => 2 << 62 | i as u64,
            Context::SendSlot(i) => 3 << 62 | i as u64,
            Context::Read(i) => 1 << 40 | i as u64,
        }
    }

    /// Unpacks a context value.
    pub fn decode(v: u64) -> Option<Context> {
        Some(match v >> 62 {
            1 => Context::RecvSlot(v as u32),
            2 => Context::ControlSlot(v as u32),
            3 => Context::SendSlot(v as u32),
            0 if v >> 32 == 1 << 8 => Context::Read(v as u32),
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip_and_match() {
        let t = Tag {
            kind: Kind::Message,
            priority: 7,
            port: MAX_WIRE_PORT,
            peer: 0xBEEF,
            seq: 0xFFFF,
        };
        assert_eq!(Tag::decode(t.encode()), Some(t));
        let (want, ignore) = Tag::match_port(Kind::Message, MAX_WIRE_PORT);
        assert_eq!(t.encode() & !ignore, want & !ignore);
        let other_port = Tag { port: 5, ..t };
        assert_ne!(other_port.encode() & !ignore, want);
        let grant = Tag {
            kind: Kind::Grant,
            ..t
        };
        assert_ne!(grant.encode() & !ignore, want);
        let (k, kignore) = Tag::match_control();
        for kind in [
            Kind::Grant,
            Kind::Request,
            Kind::Return,
            Kind::Recall,
            Kind::Flush,
        ] {
            assert_eq!(Tag { kind, ..t }.encode() & !kignore, k);
        }
        assert_ne!(t.encode() & !kignore, k);
        assert_eq!(Tag::decode(0), None);
        let (m, mignore) = Tag::match_kind(Kind::Message);
        assert_eq!(t.encode() & !mignore, m);
        assert_eq!(other_port.encode() & !mignore, m);
        assert_ne!(grant.encode() & !mignore, m);
    }

    #[test]
    fn contexts_round_trip() {
        for c in [
            Context::RecvSlot(0),
            Context::RecvSlot(u32::MAX),
            Context::ControlSlot(9),
            Context::SendSlot(u32::MAX),
        ] {
            assert_ne!(c.encode(), 0);
            assert_eq!(Context::decode(c.encode()), Some(c));
        }
        assert_eq!(Context::decode(0), None);
    }
}
