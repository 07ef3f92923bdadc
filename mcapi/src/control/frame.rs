//! Control frames and their wire format.
//!
//! A frame travels as a little-endian `u32` body length and the body: a one-byte tag, then
//! the fields in order, integers little-endian in their own widths, byte strings as a `u32`
//! length and the bytes.
//!
//! The decoder is total: any input gives a frame or an error, never a panic. It allocates
//! nothing but a frame's byte strings (fabric addresses), which lie inside the body, and the
//! body is at most [`MAX_FRAME`] bytes, checked on the length prefix before it is read. A
//! field out of its range (an unknown tag, kind or side, an endpoint id whose check fails,
//! bytes left over) is an error, so a body decodes to at most one frame, which encodes back
//! to the same bytes.
//!
//! Versions: Hello and Welcome carry [`PROTOCOL_VERSION`] right after their tag, and the
//! decoder reads nothing further of a handshake in another version. The length prefix, those
//! first two fields and the [`Frame::Refused`] frame keep their layout in every version, so
//! nodes of different versions can tell each other so instead of misreading fields. (A
//! handshake of the format before versions, whose tag was a `u64`, reads as version 0.)

use crate::semantics::channel::ChannelKind;
use crate::semantics::EndpointId;
use smallvec::SmallVec;

/// The control protocol this build speaks. Change it with any change to the frames, their
/// answers' meaning, or the fabric's control tags (4: a `Lookup` and a `CreditRequest` are
/// answered with the endpoint's credit epoch, which credit control tags and `EndpointDeleted` carry;
/// 5: a Hello names the node it is for; 6: a packet receive side's `Opened` names its node's
/// hub and its route there).
pub const PROTOCOL_VERSION: u32 = 7;

/// Largest frame body accepted (fabric addresses are small).
pub const MAX_FRAME: usize = 64 * 1024;

/// A frame's bytes, inline up to 64 (every frame but those that carry a fabric address): a
/// sender out of credits asks the receiver's control plane for more, and that call
/// allocates nothing.
pub(crate) type FrameBytes = SmallVec<[u8; 64]>;

/// One control message. Requests and their answers share the type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// First contact: who I am, my fabric address, and how I number you. On the wire it
    /// also carries [`PROTOCOL_VERSION`]; a decoded Hello is always in this version.
    Hello {
        /// Sender's domain.
        domain: u32,
        /// Sender's node.
        node: u32,
        /// The node the sender means to reach, `(domain, node)`: another node at the address
        /// (one that took over a dead node's port) refuses it.
        to: (u32, u32),
        /// The index the sender gave the receiver among its peers (goes into the tags of
        /// messages the receiver sends to it).
        peer: u32,
        /// Tells this run of the node from an earlier one with the same id (a restart).
        incarnation: u64,
        /// The sender's remote reads are made by its own process (shm's cross-memory
        /// attach), so memory lent to it is never read by the lender's provider.
        reads_itself: bool,
        /// Sender's fabric (libfabric endpoint) address.
        fabric_addr: Vec<u8>,
        /// What fabric control messages to the sender must carry (a secret of its run).
        fabric_token: u64,
    },
    /// The answer to Hello: how I number you, and my fabric address. Versioned as Hello.
    Welcome {
        /// The index the server gave the client among its peers.
        peer: u32,
        /// As in Hello.
        incarnation: u64,
        /// As in Hello.
        reads_itself: bool,
        /// The server's fabric address.
        fabric_addr: Vec<u8>,
        /// As in Hello.
        fabric_token: u64,
    },
    /// Does `port` exist on the node?
    Lookup {
        /// The port asked for.
        port: u32,
    },
    /// Read an endpoint attribute.
    GetAttribute {
        /// Endpoint port.
        port: u32,
        /// MCAPI attribute number.
        attribute: u32,
    },
    /// Read a node attribute.
    NodeAttribute {
        /// MCAPI node attribute number.
        attribute: u32,
    },
    /// A sender out of credits for endpoint `port` asks for `want` (with the stamp of its
    /// credit window); the answer is the credits granted now (`Value`), more may follow
    /// over the fabric.
    CreditRequest {
        /// Endpoint port.
        port: u32,
        /// Credits wanted.
        want: u32,
        /// The window's stamp (credits received so far).
        seen: u32,
    },
    /// A channel operation on endpoint `port` of the receiving node.
    Channel {
        /// Endpoint port.
        port: u32,
        /// What to do.
        op: ChannelOp,
    },
    /// Endpoint `port` of the sending node was deleted: forget the credits and sequence
    /// numbers kept for sending to it.
    EndpointDeleted {
        /// Endpoint port.
        port: u32,
        /// The deleted endpoint's credit epoch: a window for a later endpoint at the port
        /// is not the one to forget.
        epoch: u16,
    },
    /// A positive answer carrying a value (attribute value, 1 for "exists", credits).
    Value(u64),
    /// The answer to [`ChannelOp::Connect`]: the attributes of the endpoint connected.
    Connected {
        /// Its attributes.
        attributes: ChannelAttributes,
    },
    /// A negative answer carrying an MCAPI status code. The raw code, not a `Status`: a code
    /// this build does not know is the caller's to map (to `MCAPI_ERR_GENERAL`), not a
    /// reason to drop the connection.
    Refused(u32),
}

/// A channel operation, sent to the node owning the endpoint it acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChannelOp {
    /// Bind the endpoint to `peer` as one end of a channel of `kind` (from the node making
    /// the connect, which may be a third one). The answer is [`Frame::Connected`].
    Connect {
        /// The endpoint at the other end.
        peer: EndpointId,
        /// Packet or scalar channel.
        kind: ChannelKind,
        /// Which end this endpoint becomes.
        end: ConnectEnd,
    },
    /// Undo a `Connect` whose other end failed.
    UndoConnect,
    /// The endpoint `from` at the other end opened its side.
    Opened {
        /// The endpoint that opened: only the one connected to counts.
        from: EndpointId,
        /// Credits the sender starts with (a receive side's buffers; 0 from a send side).
        credits: u32,
        /// The side's route on its node's hub: a scalar side's, or a packet receive side's
        /// that takes small packets through the hub (0 otherwise).
        route: u16,
        /// The largest payload the side uses.
        max_payload: u64,
        /// The fabric address of the side's endpoint.
        fabric_addr: Vec<u8>,
        /// A packet receive side's hub, which takes its small packets (empty: none).
        hub_addr: Vec<u8>,
    },
    /// The endpoint `from` at the other end closed its side after sending `sent` items (a
    /// send side; 0 from a receive side).
    Closed {
        /// Items sent (wrapping count).
        sent: u32,
        /// The endpoint that closed: only the one connected to counts.
        from: EndpointId,
    },
}

/// Which end of a channel a [`ChannelOp::Connect`] makes the endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectEnd {
    /// The sending end (connected first).
    Send,
    /// The receiving end, which checks that it can take what the sender sends.
    Receive {
        /// The sending endpoint's attributes (from its `Connect` answer).
        sender: ChannelAttributes,
    },
}

/// The attributes of an endpoint that the other end of a channel must match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelAttributes {
    /// `MCAPI_ENDP_ATTR_MAX_PAYLOAD_SIZE`.
    pub max_payload: u64,
    /// `MCAPI_ENDP_ATTR_PRIORITY`.
    pub priority: u32,
}

/// Why a body is not a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Not a frame of this version (truncated, out of range, bytes left over).
    Malformed,
    /// A handshake in another protocol version (carried).
    Version(u32),
}

/// Frame tags (the body's first byte).
mod tag {
    pub const HELLO: u8 = 1;
    pub const LOOKUP: u8 = 2;
    pub const GET_ATTRIBUTE: u8 = 3;
    pub const VALUE: u8 = 4;
    pub const REFUSED: u8 = 5;
    pub const WELCOME: u8 = 6;
    pub const CREDIT_REQUEST: u8 = 7;
    pub const NODE_ATTRIBUTE: u8 = 8;
    pub const CHANNEL: u8 = 9;
    pub const ENDPOINT_DELETED: u8 = 10;
    pub const CONNECTED: u8 = 11;
}

/// Channel operation tags (the byte after a channel frame's port).
mod op {
    pub const CONNECT: u8 = 1;
    pub const UNDO_CONNECT: u8 = 2;
    pub const OPENED: u8 = 3;
    pub const CLOSED: u8 = 4;
}

impl Frame {
    /// Appends the frame's body to `out`.
    pub(crate) fn encode_into(&self, out: &mut FrameBytes) {
        let mut w = Writer(out);
        match self {
            Frame::Hello {
                domain,
                node,
                to,
                peer,
                incarnation,
                reads_itself,
                fabric_addr,
                fabric_token,
            } => {
                w.u8(tag::HELLO);
                w.u32(PROTOCOL_VERSION);
                w.u32(*domain);
                w.u32(*node);
                w.u32(to.0);
                w.u32(to.1);
                w.u32(*peer);
                w.u64(*incarnation);
                w.u8(u8::from(*reads_itself));
                w.bytes(fabric_addr);
                w.u64(*fabric_token);
            }
            Frame::Welcome {
                peer,
                incarnation,
                reads_itself,
                fabric_addr,
                fabric_token,
            } => {
                w.u8(tag::WELCOME);
                w.u32(PROTOCOL_VERSION);
                w.u32(*peer);
                w.u64(*incarnation);
                w.u8(u8::from(*reads_itself));
                w.bytes(fabric_addr);
                w.u64(*fabric_token);
            }
            Frame::Lookup { port } => {
                w.u8(tag::LOOKUP);
                w.u32(*port);
            }
            Frame::GetAttribute { port, attribute } => {
                w.u8(tag::GET_ATTRIBUTE);
                w.u32(*port);
                w.u32(*attribute);
            }
            Frame::NodeAttribute { attribute } => {
                w.u8(tag::NODE_ATTRIBUTE);
                w.u32(*attribute);
            }
            Frame::CreditRequest { port, want, seen } => {
                w.u8(tag::CREDIT_REQUEST);
                w.u32(*port);
                w.u32(*want);
                w.u32(*seen);
            }
            Frame::Channel { port, op } => {
                w.u8(tag::CHANNEL);
                w.u32(*port);
                op.encode(&mut w);
            }
            Frame::EndpointDeleted { port, epoch } => {
                w.u8(tag::ENDPOINT_DELETED);
                w.u32(*port);
                w.u16(*epoch);
            }
            Frame::Value(v) => {
                w.u8(tag::VALUE);
                w.u64(*v);
            }
            Frame::Connected { attributes } => {
                w.u8(tag::CONNECTED);
                attributes.encode(&mut w);
            }
            Frame::Refused(code) => {
                w.u8(tag::REFUSED);
                w.u32(*code);
            }
        }
    }

    /// Decodes a body (without its length prefix).
    ///
    /// # Errors
    /// [`DecodeError::Version`] for a handshake in another protocol version,
    /// [`DecodeError::Malformed`] for anything else that is not exactly one frame.
    pub(crate) fn decode(body: &[u8]) -> Result<Frame, DecodeError> {
        let mut r = Reader(body);
        let frame = match r.u8()? {
            tag::HELLO => {
                r.version()?;
                Frame::Hello {
                    domain: r.u32()?,
                    node: r.u32()?,
                    to: (r.u32()?, r.u32()?),
                    peer: r.u32()?,
                    incarnation: r.u64()?,
                    reads_itself: r.flag()?,
                    fabric_addr: r.bytes()?,
                    fabric_token: r.u64()?,
                }
            }
            tag::WELCOME => {
                r.version()?;
                Frame::Welcome {
                    peer: r.u32()?,
                    incarnation: r.u64()?,
                    reads_itself: r.flag()?,
                    fabric_addr: r.bytes()?,
                    fabric_token: r.u64()?,
                }
            }
            tag::LOOKUP => Frame::Lookup { port: r.u32()? },
            tag::GET_ATTRIBUTE => Frame::GetAttribute {
                port: r.u32()?,
                attribute: r.u32()?,
            },
            tag::NODE_ATTRIBUTE => Frame::NodeAttribute {
                attribute: r.u32()?,
            },
            tag::CREDIT_REQUEST => Frame::CreditRequest {
                port: r.u32()?,
                want: r.u32()?,
                seen: r.u32()?,
            },
            tag::CHANNEL => Frame::Channel {
                port: r.u32()?,
                op: ChannelOp::decode(&mut r)?,
            },
            tag::ENDPOINT_DELETED => Frame::EndpointDeleted {
                port: r.u32()?,
                epoch: r.u16()?,
            },
            tag::VALUE => Frame::Value(r.u64()?),
            tag::CONNECTED => Frame::Connected {
                attributes: ChannelAttributes::decode(&mut r)?,
            },
            tag::REFUSED => Frame::Refused(r.u32()?),
            _ => return Err(DecodeError::Malformed),
        };
        r.finish()?;
        Ok(frame)
    }
}

impl ChannelOp {
    fn encode(&self, w: &mut Writer<'_>) {
        match self {
            ChannelOp::Connect { peer, kind, end } => {
                w.u8(op::CONNECT);
                w.u64(peer.as_raw());
                w.u8(match kind {
                    ChannelKind::Packet => 0,
                    ChannelKind::Scalar => 1,
                });
                match end {
                    ConnectEnd::Send => w.u8(0),
                    ConnectEnd::Receive { sender } => {
                        w.u8(1);
                        sender.encode(w);
                    }
                }
            }
            ChannelOp::UndoConnect => w.u8(op::UNDO_CONNECT),
            ChannelOp::Opened {
                from,
                credits,
                route,
                max_payload,
                fabric_addr,
                hub_addr,
            } => {
                w.u8(op::OPENED);
                w.u64(from.as_raw());
                w.u32(*credits);
                w.u16(*route);
                w.u64(*max_payload);
                w.bytes(fabric_addr);
                w.bytes(hub_addr);
            }
            ChannelOp::Closed { sent, from } => {
                w.u8(op::CLOSED);
                w.u32(*sent);
                w.u64(from.as_raw());
            }
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<ChannelOp, DecodeError> {
        Ok(match r.u8()? {
            op::CONNECT => ChannelOp::Connect {
                peer: r.endpoint()?,
                kind: match r.u8()? {
                    0 => ChannelKind::Packet,
                    1 => ChannelKind::Scalar,
                    _ => return Err(DecodeError::Malformed),
                },
                end: match r.u8()? {
                    0 => ConnectEnd::Send,
                    1 => ConnectEnd::Receive {
                        sender: ChannelAttributes::decode(r)?,
                    },
                    _ => return Err(DecodeError::Malformed),
                },
            },
            op::UNDO_CONNECT => ChannelOp::UndoConnect,
            op::OPENED => ChannelOp::Opened {
                from: r.endpoint()?,
                credits: r.u32()?,
                route: r.u16()?,
                max_payload: r.u64()?,
                fabric_addr: r.bytes()?,
                hub_addr: r.bytes()?,
            },
            op::CLOSED => ChannelOp::Closed {
                sent: r.u32()?,
                from: r.endpoint()?,
            },
            _ => return Err(DecodeError::Malformed),
        })
    }
}

impl ChannelAttributes {
    fn encode(&self, w: &mut Writer<'_>) {
        w.u64(self.max_payload);
        w.u32(self.priority);
    }

    fn decode(r: &mut Reader<'_>) -> Result<ChannelAttributes, DecodeError> {
        Ok(ChannelAttributes {
            max_payload: r.u64()?,
            priority: r.u32()?,
        })
    }
}

struct Writer<'a>(&'a mut FrameBytes);

impl Writer<'_> {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// A byte string. One longer than `u32::MAX` gets a wrong length, but its frame is far
    /// over [`MAX_FRAME`] and is never sent.
    fn bytes(&mut self, b: &[u8]) {
        self.u32(u32::try_from(b.len()).unwrap_or(u32::MAX));
        self.0.extend_from_slice(b);
    }
}

/// Reads a body front to back; every read checks what is left first.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or(DecodeError::Malformed)?;
        self.0 = rest;
        Ok(*head)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take::<1>()?[0])
    }
    /// A boolean: 0 or 1, anything else malformed (one encoding per frame).
    fn flag(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError::Malformed),
        }
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        self.take().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        self.take().map(u64::from_le_bytes)
    }
    /// A byte string: its length is checked against what is left before anything is
    /// allocated, so a lying length costs nothing.
    fn bytes(&mut self) -> Result<Vec<u8>, DecodeError> {
        let n = usize::try_from(self.u32()?).map_err(|_| DecodeError::Malformed)?;
        if n > self.0.len() {
            return Err(DecodeError::Malformed);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head.to_vec())
    }
    fn endpoint(&mut self) -> Result<EndpointId, DecodeError> {
        EndpointId::from_raw(self.u64()?).ok_or(DecodeError::Malformed)
    }
    /// A handshake's version; the rest of one in another version is not read.
    fn version(&mut self) -> Result<(), DecodeError> {
        match self.u32()? {
            PROTOCOL_VERSION => Ok(()),
            v => Err(DecodeError::Version(v)),
        }
    }
    fn finish(self) -> Result<(), DecodeError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Malformed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::semantics::XorShift;

    fn ep(port: u32) -> EndpointId {
        EndpointId::encode(3, 7, port).unwrap()
    }

    /// One of every frame, channel operation and connect end (and both channel kinds).
    fn samples() -> Vec<Frame> {
        let attrs = ChannelAttributes {
            max_payload: 4 << 20,
            priority: 2,
        };
        let mut frames = vec![
            Frame::Hello {
                domain: 1,
                node: 2,
                to: (3, 4),
                peer: 3,
                incarnation: u64::MAX - 1,
                reads_itself: true,
                fabric_addr: vec![9, 8, 7],
                fabric_token: 0x7070_7070,
            },
            Frame::Hello {
                domain: u32::MAX,
                node: 0,
                to: (u32::MAX, u32::MAX),
                peer: 0,
                incarnation: 0,
                reads_itself: false,
                fabric_addr: vec![],
                fabric_token: 0x7070_7070,
            },
            Frame::Welcome {
                peer: 4,
                incarnation: 5,
                reads_itself: false,
                fabric_addr: vec![1; 200],
                fabric_token: 0x7070_7070,
            },
            Frame::Lookup { port: 5 },
            Frame::GetAttribute {
                port: 5,
                attribute: 7,
            },
            Frame::NodeAttribute { attribute: 1 },
            Frame::CreditRequest {
                port: 1,
                want: 2,
                seen: u32::MAX,
            },
            Frame::EndpointDeleted { port: 6, epoch: 9 },
            Frame::Value(u64::MAX),
            Frame::Connected { attributes: attrs },
            Frame::Refused(3),
        ];
        let ops = [
            ChannelOp::Connect {
                peer: ep(1),
                kind: ChannelKind::Packet,
                end: ConnectEnd::Send,
            },
            ChannelOp::Connect {
                peer: ep(2),
                kind: ChannelKind::Scalar,
                end: ConnectEnd::Receive { sender: attrs },
            },
            ChannelOp::UndoConnect,
            ChannelOp::Opened {
                from: ep(3),
                credits: 64,
                route: u16::MAX,
                max_payload: 8,
                fabric_addr: vec![0xAB; 40],
                hub_addr: vec![0xCD; 40],
            },
            ChannelOp::Closed {
                sent: u32::MAX,
                from: ep(4),
            },
        ];
        frames.extend(ops.into_iter().map(|op| Frame::Channel { port: 9, op }));
        frames
    }

    fn encode(f: &Frame) -> FrameBytes {
        let mut b = FrameBytes::new();
        f.encode_into(&mut b);
        b
    }

    #[test]
    fn every_frame_round_trips() {
        for f in samples() {
            assert_eq!(Frame::decode(&encode(&f)), Ok(f));
        }
    }

    #[test]
    fn every_truncation_and_extension_is_rejected() {
        for f in samples() {
            let body = encode(&f);
            for n in 0..body.len() {
                assert!(Frame::decode(&body[..n]).is_err(), "{f:?} cut at {n}");
            }
            let mut longer = body.to_vec();
            longer.push(0);
            assert_eq!(Frame::decode(&longer), Err(DecodeError::Malformed), "{f:?}");
        }
    }

    /// The hot path's request and its answer are built and read without allocating.
    #[test]
    fn small_frames_stay_inline() {
        for f in [
            Frame::CreditRequest {
                port: 1,
                want: 2,
                seen: 3,
            },
            Frame::Value(1),
            Frame::Refused(1),
        ] {
            assert!(!encode(&f).spilled());
        }
    }

    #[test]
    fn another_version_is_told_not_misread() {
        for f in samples() {
            if !matches!(f, Frame::Hello { .. } | Frame::Welcome { .. }) {
                continue;
            }
            let mut body = encode(&f);
            body[1..5].copy_from_slice(&(PROTOCOL_VERSION + 1).to_le_bytes());
            assert_eq!(
                Frame::decode(&body),
                Err(DecodeError::Version(PROTOCOL_VERSION + 1))
            );
            // Only the version is read: the rest may be anything in another version.
            assert_eq!(
                Frame::decode(&body[..5]),
                Err(DecodeError::Version(PROTOCOL_VERSION + 1))
            );
        }
        // A Hello of the format before versions (every field a u64 word).
        let mut old = Vec::new();
        for w in [1u64, 0, 2, 0, 7] {
            old.extend_from_slice(&w.to_le_bytes());
        }
        assert_eq!(Frame::decode(&old), Err(DecodeError::Version(0)));
    }

    #[test]
    fn a_flag_is_0_or_1() {
        let mut hello = encode(&Frame::Hello {
            domain: 1,
            node: 2,
            to: (0, 1),
            peer: 3,
            incarnation: 4,
            reads_itself: true,
            fabric_addr: vec![5],
            fabric_token: 0x7070_7070,
        });
        // tag, version, domain, node, to (two), peer (4 each after the tag), incarnation (8)
        let flag = 1 + 6 * 4 + 8;
        assert_eq!(hello[flag], 1);
        hello[flag] = 2;
        assert_eq!(Frame::decode(&hello), Err(DecodeError::Malformed));
    }

    #[test]
    fn out_of_range_fields_are_rejected() {
        let connect = encode(&Frame::Channel {
            port: 0,
            op: ChannelOp::Connect {
                peer: ep(1),
                kind: ChannelKind::Packet,
                end: ConnectEnd::Send,
            },
        });
        // tag, port (4), op, peer (8), kind, end
        let (peer, kind, end) = (6, 14, 15);
        for (at, bad) in [(0, 0u8), (0, 12), (5, 0), (5, 5), (kind, 2), (end, 2)] {
            let mut b = connect.clone();
            b[at] = bad;
            assert_eq!(Frame::decode(&b), Err(DecodeError::Malformed), "byte {at}");
        }
        // An endpoint id whose check field does not match.
        let mut b = connect.clone();
        b[peer + 7] ^= 1;
        assert_eq!(Frame::decode(&b), Err(DecodeError::Malformed));
        // A byte string longer than what is left.
        let mut hello = encode(&samples()[0]).to_vec();
        // (the address's length, its 3 bytes, the fabric token)
        let len_at = hello.len() - 8 - 3 - 4;
        hello[len_at..len_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Frame::decode(&hello), Err(DecodeError::Malformed));
    }

    /// Any bytes decode without panicking, and whatever decodes is the encoding of its frame
    /// (nothing is accepted loosely).
    #[test]
    fn random_bytes_never_panic() {
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        let valid: Vec<FrameBytes> = samples().iter().map(encode).collect();
        let mut decoded = 0;
        let mut check = |b: &[u8]| {
            if let Ok(f) = Frame::decode(b) {
                assert_eq!(encode(&f).as_slice(), b);
                decoded += 1;
            }
        };
        let mut buf = Vec::with_capacity(128);
        for i in 0..300_000u32 {
            buf.clear();
            match i % 3 {
                // Plain noise.
                0 => {
                    let len = (rng.next_u64() % 96) as usize;
                    buf.extend((0..len).map(|_| rng.next_u64() as u8));
                }
                // A valid tag (and version) then noise, to get past the first checks.
                1 => {
                    let t = (rng.next_u64() % 12) as u8;
                    buf.push(t);
                    if matches!(t, tag::HELLO | tag::WELCOME) {
                        buf.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
                    }
                    if t == tag::CHANNEL {
                        buf.extend_from_slice(&[0; 4]);
                        buf.push((rng.next_u64() % 5) as u8);
                    }
                    let len = (rng.next_u64() % 48) as usize;
                    buf.extend((0..len).map(|_| rng.next_u64() as u8));
                }
                // A valid frame with a few bytes flipped, cut or extended.
                _ => {
                    let v = &valid[(rng.next_u64() % valid.len() as u64) as usize];
                    buf.extend_from_slice(v);
                    for _ in 0..1 + rng.next_u64() % 3 {
                        let at = (rng.next_u64() % buf.len() as u64) as usize;
                        buf[at] ^= 1 << (rng.next_u64() % 8);
                    }
                    match rng.next_u64() % 4 {
                        0 => buf.truncate((rng.next_u64() % buf.len() as u64) as usize),
                        1 => buf.push(rng.next_u64() as u8),
                        _ => {}
                    }
                }
            }
            check(&buf);
        }
        // The generator does reach valid frames (so the deep paths were exercised).
        assert!(decoded > 1000, "only {decoded} decoded");
    }
}
