//! Endpoint attributes (spec 3.16.13): numbers, value types and which are writable.

use crate::semantics::Status;

/// An endpoint attribute, numbered in the order of spec 3.16.13 (from 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum EndpointAttribute {
    /// Largest packet (`size_t`); writable up to `MCAPI_MAX_PKT_SIZE` before the endpoint is
    /// connected (a channel compatibility attribute); messages are limited by
    /// `MCAPI_MAX_MSG_SIZE`.
    MaxPayloadSize = 1,
    /// FIFO or state buffer (`mcapi_uint_t`); FIFO only, read-only.
    BufferType = 2,
    /// Local, shared or remote memory (`mcapi_uint_t`); local only, read-only.
    MemoryType = 3,
    /// Number of priorities (`mcapi_uint_t`); read-only.
    NumPriorities = 4,
    /// Channel priority (`mcapi_uint_t`), applied when a channel is connected; writable.
    Priority = 5,
    /// Free send buffers of the node (`mcapi_uint_t`); read-only, live.
    NumSendBuffers = 6,
    /// Free receive buffers of the endpoint (`mcapi_uint_t`); read-only, live, readable
    /// from other nodes for throttling (spec 3.13). Its capacity is the node parameter
    /// `recv_buffers`.
    NumRecvBuffers = 7,
    /// Status flags (`mcapi_uint_t`); read-only.
    Status = 8,
    /// Timeout of blocking sends and receives in milliseconds (`mcapi_timeout_t`,
    /// `MCAPI_TIMEOUT_INFINITE` = ~0); writable.
    Timeout = 9,
}

/// `MCAPI_ENDP_ATTR_FIFO_BUFFER`.
pub const FIFO_BUFFER: u64 = 0;
/// `MCAPI_ENDP_ATTR_STATE_BUFFER` (an ABB extension of the spec, not implemented).
pub const STATE_BUFFER: u64 = 1;
/// `MCAPI_ENDP_ATTR_LOCAL_MEMORY`.
pub const LOCAL_MEMORY: u64 = 0;
/// `MCAPI_ENDP_ATTR_SHARED_MEMORY` (not implemented).
pub const SHARED_MEMORY: u64 = 1;
/// `MCAPI_ENDP_ATTR_REMOTE_MEMORY` (not implemented).
pub const REMOTE_MEMORY: u64 = 2;
/// `MCAPI_TIMEOUT_INFINITE` as an attribute value.
pub const TIMEOUT_INFINITE: u64 = u32::MAX as u64;

impl EndpointAttribute {
    /// All attributes, in number order.
    pub const ALL: [EndpointAttribute; 9] = [
        EndpointAttribute::MaxPayloadSize,
        EndpointAttribute::BufferType,
        EndpointAttribute::MemoryType,
        EndpointAttribute::NumPriorities,
        EndpointAttribute::Priority,
        EndpointAttribute::NumSendBuffers,
        EndpointAttribute::NumRecvBuffers,
        EndpointAttribute::Status,
        EndpointAttribute::Timeout,
    ];

    /// The attribute with number `n`.
    ///
    /// # Errors
    /// `MCAPI_ERR_ATTR_NUM` for an unknown number.
    pub fn from_number(n: u32) -> Result<EndpointAttribute, Status> {
        Self::ALL
            .into_iter()
            .find(|a| *a as u32 == n)
            .ok_or(Status::MCAPI_ERR_ATTR_NUM)
    }

    /// Size in bytes of the attribute's C type (checked against `attribute_size`).
    pub fn c_size(self) -> usize {
        match self {
            EndpointAttribute::MaxPayloadSize => std::mem::size_of::<usize>(),
            _ => 4,
        }
    }

    /// `mcapi_endpoint_set_attribute` of an attribute whose value this implementation fixes
    /// among several the spec defines (buffer and memory type): the value implemented is
    /// accepted (nothing changes), another value the spec defines is
    /// `MCAPI_ERR_ATTR_NOTSUPPORTED`, anything else `MCAPI_ERR_ATTR_VALUE`. `None` for the
    /// other attributes.
    pub fn set_fixed(self, value: u64) -> Option<Result<(), Status>> {
        let (implemented, defined): (u64, &[u64]) = match self {
            EndpointAttribute::BufferType => (FIFO_BUFFER, &[STATE_BUFFER]),
            EndpointAttribute::MemoryType => (LOCAL_MEMORY, &[SHARED_MEMORY, REMOTE_MEMORY]),
            _ => return None,
        };
        Some(if value == implemented {
            Ok(())
        } else if defined.contains(&value) {
            Err(Status::MCAPI_ERR_ATTR_NOTSUPPORTED)
        } else {
            Err(Status::MCAPI_ERR_ATTR_VALUE)
        })
    }

    /// Whether `mcapi_endpoint_set_attribute` may change it.
    pub fn writable(self) -> bool {
        matches!(
            self,
            EndpointAttribute::MaxPayloadSize
                | EndpointAttribute::Priority
                | EndpointAttribute::Timeout
        )
    }
}

/// `MCAPI_NODE_ATTR_TYPE`: the one node attribute of MCAPI 2.000 (`mcapi_uint_t`).
pub const NODE_ATTR_TYPE: u32 = 1;
/// `MCAPI_NODE_ATTR_TYPE_REGULAR`, the default (and only) node type.
pub const NODE_ATTR_TYPE_REGULAR: u64 = 0;
/// `MCAPI_NODE_ATTR_MAX_MSG_SIZE` (an extension, `mcapi_uint_t`, read-only): the largest
/// message the running node sends, as configured (`Node::max_msg_size`).
pub const NODE_ATTR_MAX_MSG_SIZE: u32 = 0x100;
/// `MCAPI_NODE_ATTR_EAGER_MAX` (an extension, `mcapi_uint_t`, read-only): the largest
/// message the running node sends eagerly; larger ones go by rendezvous (`Node::eager_max`).
pub const NODE_ATTR_EAGER_MAX: u32 = 0x101;

/// `mcapi_node_attributes_t`: what `mcapi_initialize` takes besides the parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeAttributes {
    node_type: u64,
}

impl Default for NodeAttributes {
    /// `mcapi_node_init_attributes`: every attribute at its default.
    fn default() -> Self {
        NodeAttributes {
            node_type: NODE_ATTR_TYPE_REGULAR,
        }
    }
}

impl NodeAttributes {
    /// `mcapi_node_set_attribute`.
    ///
    /// # Errors
    /// `MCAPI_ERR_ATTR_NUM` for an unknown number, `MCAPI_ERR_ATTR_VALUE` for a node type
    /// other than regular (the only type MCAPI 2.000 defines), `MCAPI_ERR_ATTR_READONLY`
    /// for the running node's values (configured with `mcapi_param_t` or the environment).
    pub fn set(&mut self, attribute: u32, value: u64) -> Result<(), Status> {
        match attribute {
            NODE_ATTR_TYPE if value == NODE_ATTR_TYPE_REGULAR => {
                self.node_type = value;
                Ok(())
            }
            NODE_ATTR_TYPE => Err(Status::MCAPI_ERR_ATTR_VALUE),
            NODE_ATTR_MAX_MSG_SIZE | NODE_ATTR_EAGER_MAX => Err(Status::MCAPI_ERR_ATTR_READONLY),
            _ => Err(Status::MCAPI_ERR_ATTR_NUM),
        }
    }

    /// The value of `attribute` (the running node's values come from the node).
    ///
    /// # Errors
    /// `MCAPI_ERR_ATTR_NUM` for an unknown number.
    pub fn get(&self, attribute: u32) -> Result<u64, Status> {
        match attribute {
            NODE_ATTR_TYPE => Ok(self.node_type),
            _ => Err(Status::MCAPI_ERR_ATTR_NUM),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_attributes() {
        let mut a = NodeAttributes::default();
        assert_eq!(a.get(NODE_ATTR_TYPE), Ok(NODE_ATTR_TYPE_REGULAR));
        assert_eq!(a.set(NODE_ATTR_TYPE, NODE_ATTR_TYPE_REGULAR), Ok(()));
        assert_eq!(a.set(NODE_ATTR_TYPE, 7), Err(Status::MCAPI_ERR_ATTR_VALUE));
        assert_eq!(a.set(2, 0), Err(Status::MCAPI_ERR_ATTR_NUM));
        assert_eq!(a.get(0), Err(Status::MCAPI_ERR_ATTR_NUM));
    }

    #[test]
    fn fixed_attributes_take_their_value_and_refuse_the_others() {
        use EndpointAttribute::{BufferType, MemoryType, Timeout};
        assert_eq!(BufferType.set_fixed(FIFO_BUFFER), Some(Ok(())));
        assert_eq!(
            BufferType.set_fixed(STATE_BUFFER),
            Some(Err(Status::MCAPI_ERR_ATTR_NOTSUPPORTED))
        );
        assert_eq!(
            BufferType.set_fixed(9),
            Some(Err(Status::MCAPI_ERR_ATTR_VALUE))
        );
        assert_eq!(MemoryType.set_fixed(LOCAL_MEMORY), Some(Ok(())));
        for v in [SHARED_MEMORY, REMOTE_MEMORY] {
            assert_eq!(
                MemoryType.set_fixed(v),
                Some(Err(Status::MCAPI_ERR_ATTR_NOTSUPPORTED))
            );
        }
        assert_eq!(EndpointAttribute::Status.set_fixed(0), None);
        assert_eq!(Timeout.set_fixed(0), None);
    }

    #[test]
    fn numbers_round_trip_and_unknown_is_attr_num() {
        for a in EndpointAttribute::ALL {
            assert_eq!(EndpointAttribute::from_number(a as u32), Ok(a));
        }
        for n in [0, 10, u32::MAX] {
            assert_eq!(
                EndpointAttribute::from_number(n),
                Err(Status::MCAPI_ERR_ATTR_NUM)
            );
        }
    }
}
