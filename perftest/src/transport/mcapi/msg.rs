//! MCAPI messages: each node receives on one message endpoint (port [`PORT`]) and sends from
//! another ([`SEND_PORT`]), and the benchmark messages are MCAPI messages at priority 0.
//! Sends are blocking `msg_send` (which injects or copies the payload, or for a rendezvous
//! message on shm lets the receiver read it in place, and blocks while the receiver has no
//! free buffer: credit flow control) or, for the sender of msg-bw's windows of rendezvous
//! messages, windows of `msg_send_i_zero_copy` (on shm and tcp lent to the receiver,
//! completing once it has read the message; elsewhere staged as by `msg_send_i`), reaped
//! in order. Receives are blocking
//! `msg_recv` (which copies the message out of its receive slot, or reads a rendezvous
//! message straight into its buffer) or, for msg-bw's receiver of rendezvous messages,
//! `msg_recv_i_into` requests posted with their buffers (a window of them, as raw posts its
//! receives), into which messages are read as they arrive, completed in order by
//! `wait_into` and posted again. The buffers are page-aligned, as the raw baseline's.

use super::{failed, send_pattern, OwnedNode, SendWindow, DOMAIN, WAIT};
use crate::error::{Error, Result};
use crate::transport::{Kind, Transport};
use ::mcapi::{EndpointId, Node, RecvBuffer, RequestHandle, SendBuffer, Status, MAX_MSG_SIZE};
use std::collections::VecDeque;
use std::time::Duration;

/// The port of each side's receiving message endpoint.
pub const PORT: u32 = 1;
/// The port each side sends from: an endpoint without a timeout, MCAPI's default (a send
/// with a timeout stages a large message, one without may be read in place; the receiving
/// endpoint's timeout lets the pattern look at the peer between calls).
const SEND_PORT: u32 = 2;
/// Priority of the benchmark messages (0 is the highest).
const PRIORITY: u32 = 0;
/// Page size the buffers are aligned to.
const PAGE: usize = 4096;

/// One side's MCAPI node and message endpoint, connected to the peer's endpoint on the same
/// port.
pub struct MsgTransport {
    node: OwnedNode,
    local: EndpointId,
    /// Where messages are sent from (no timeout).
    sender: EndpointId,
    remote: Option<EndpointId>,
    provider: String,
    /// Payload of every message sent (read only, for the whole run: lent sends read it
    /// until their requests complete).
    send_buf: &'static [u8],
    /// Windowed `msg_send_i_zero_copy` sends (else blocking `msg_send`).
    window: Option<SendWindow>,
    /// Where every message is received (contents ignored): `recv_len` bytes from
    /// `recv_at`, the first page boundary of `recv_block`.
    recv_block: Vec<u8>,
    recv_at: usize,
    recv_len: usize,
    /// Receives posted with their buffers, for rendezvous sizes (msg-bw's receiver).
    posted: Option<PostedRecvs>,
}

/// A window of `msg_recv_i_into` requests, each with a buffer for the current size; used
/// while the messages are larger than the node's eager size (a request per eager message
/// would only add its allocation and reaping to `msg_recv`'s copy).
struct PostedRecvs {
    /// Requests posted, oldest first.
    pending: VecDeque<RequestHandle>,
    /// Receives to post (the window).
    depth: usize,
    /// Length of the posted buffers (0: none posted yet).
    buf_len: usize,
    /// Messages of the current size go to the posted receives.
    active: bool,
}

impl PostedRecvs {
    /// Page-aligned buffers of `len` bytes (a multiple of the page), as many as the window
    /// and the memory cap allow, carved from one allocation given up for the rest of the
    /// run (a buffer goes with a cancelled request: each size posted leaks at most
    /// [`crate::transport::RECV_MEMORY_CAP`], or one message).
    fn buffers(depth: usize, len: usize) -> Vec<RecvBuffer> {
        let count = depth.clamp(1, (crate::transport::RECV_MEMORY_CAP / len).max(1));
        let block: &'static mut [u8] = Box::leak(vec![0u8; count * len + PAGE].into_boxed_slice());
        let at = block.as_ptr().align_offset(PAGE).min(PAGE);
        block[at..]
            .chunks_exact_mut(len)
            .take(count)
            .map(RecvBuffer::from_static)
            .collect()
    }
}

/// Size of the send and receive buffers until a larger message comes.
const INITIAL_BUF: usize = 64 * 1024;

impl MsgTransport {
    /// Creates the node's message endpoint on [`PORT`] and its sending one; `window`: sends
    /// are windows of `msg_send_i_zero_copy`, at most that many outstanding; `posted`:
    /// rendezvous messages go to up to that many receives posted with their buffers.
    ///
    /// # Errors
    /// The endpoint could not be created.
    pub fn open(
        n: OwnedNode,
        window: Option<usize>,
        posted: Option<usize>,
    ) -> Result<MsgTransport> {
        let local = create_endpoint(&n, PORT)?;
        let sender = n
            .endpoint_create(SEND_PORT)
            .map_err(|s| failed(&format!("endpoint_create on port {SEND_PORT}"), s))?;
        let mut t = MsgTransport {
            provider: n.provider().to_owned(),
            node: n,
            local,
            sender,
            remote: None,
            send_buf: send_pattern(INITIAL_BUF),
            window: window.map(SendWindow::new),
            recv_block: Vec::new(),
            recv_at: 0,
            recv_len: 0,
            posted: posted.map(|depth| PostedRecvs {
                pending: VecDeque::new(),
                depth,
                buf_len: 0,
                active: false,
            }),
        };
        // Buffers start at the eager size and grow to the largest message seen (in the
        // warmup): 16 MiB buffers from the start made eager messages on shm 3x slower.
        t.grow_recv(INITIAL_BUF);
        Ok(t)
    }

    /// A page-aligned receive buffer of `len` bytes.
    fn grow_recv(&mut self, len: usize) {
        self.recv_block = vec![0; len + PAGE];
        self.recv_at = self.recv_block.as_ptr().align_offset(PAGE).min(PAGE);
        self.recv_len = len;
    }

    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// The node's eager/rendezvous threshold.
    pub fn eager_max(&self) -> usize {
        self.node.eager_max()
    }

    /// The next messages are `size` bytes: rendezvous sizes go to receives posted with
    /// buffers of that size (those of another size are cancelled: every message sent to them
    /// was taken); eager ones to `msg_recv`, the posted receives staying posted.
    pub fn expect_size(&mut self, size: usize) -> Result<()> {
        let eager = self.node.eager_max();
        let Some(p) = self.posted.as_mut() else {
            return Ok(());
        };
        let len = size.div_ceil(PAGE).max(1) * PAGE;
        p.active = size > eager;
        if !p.active || p.buf_len == len {
            return Ok(());
        }
        for h in p.pending.drain(..) {
            self.node
                .cancel(h)
                .map_err(|s| failed("cancel of a posted receive", s))?;
        }
        for buf in PostedRecvs::buffers(p.depth, len) {
            let h = self
                .node
                .msg_recv_i_into(self.local, buf)
                .map_err(|s| failed("msg_recv_i_into", s))?;
            p.pending.push_back(h);
        }
        p.buf_len = len;
        Ok(())
    }

    /// The oldest posted receive's message, if it came within [`WAIT`]; its buffer is
    /// posted again at once.
    fn take_posted(&mut self) -> Result<Option<usize>> {
        let Some(p) = self.posted.as_mut() else {
            return Ok(None);
        };
        let Some(&oldest) = p.pending.front() else {
            return Err(Error::failed("no receive posted"));
        };
        match self.node.wait_into(oldest, Some(WAIT)) {
            Ok((n, buf)) => {
                p.pending.pop_front();
                let h = self
                    .node
                    .msg_recv_i_into(self.local, buf)
                    .map_err(|s| failed("msg_recv_i_into", s))?;
                p.pending.push_back(h);
                Ok(Some(n))
            }
            Err(Status::MCAPI_TIMEOUT) => Ok(None),
            Err(s) => Err(failed("wait_into", s)),
        }
    }

    /// Looks up the peer's endpoint on node `peer` and [`PORT`] (waiting up to `timeout` for
    /// it to exist) and makes it the destination of sends.
    pub fn connect(&mut self, peer: u32, timeout: Duration) -> Result<()> {
        let id = self
            .node
            .endpoint_get(DOMAIN, peer, PORT, Some(timeout))
            .map_err(|s| failed(&format!("endpoint_get of {DOMAIN}.{peer}.{PORT}"), s))?;
        self.remote = Some(id);
        Ok(())
    }
}

/// A message endpoint on `port` whose blocking calls wait at most [`WAIT`].
pub(super) fn create_endpoint(node: &Node, port: u32) -> Result<EndpointId> {
    let ep = node
        .endpoint_create(port)
        .map_err(|s| failed(&format!("endpoint_create on port {port}"), s))?;
    node.set_endpoint_timeout(ep, Some(WAIT))
        .map_err(|s| failed("set_endpoint_timeout", s))?;
    Ok(ep)
}

impl Transport for MsgTransport {
    fn kind(&self) -> Kind {
        Kind::Mcapi
    }

    fn provider(&self) -> &str {
        &self.provider
    }

    fn waits(&self) -> bool {
        true
    }

    #[inline]
    fn try_send(&mut self, len: usize) -> Result<bool> {
        let Some(to) = self.remote else {
            return Err(Error::failed(
                "MCAPI send before the peer's endpoint is known",
            ));
        };
        if len > self.send_buf.len() {
            self.send_buf = send_pattern(len.min(MAX_MSG_SIZE));
        }
        let node = &self.node;
        // Eager messages go by blocking `msg_send`, which injects or copies them and returns
        // at once (a request per message would only add its allocation and reaping).
        let window = self.window.as_mut().filter(|_| len > node.eager_max());
        let Some(window) = window else {
            return match node.msg_send(self.sender, to, &self.send_buf[..len], PRIORITY) {
                Ok(()) => Ok(true),
                Err(Status::MCAPI_TIMEOUT) => Ok(false),
                Err(s) => Err(failed(&format!("msg_send of {len} bytes"), s)),
            };
        };
        let buf = SendBuffer::from_static(&self.send_buf[..len]);
        window.send(node, "msg_send_i", len, || {
            node.msg_send_i_zero_copy(self.sender, to, buf, PRIORITY)
        })
    }

    #[inline]
    fn try_recv(&mut self) -> Result<Option<usize>> {
        if self.posted.as_ref().is_some_and(|p| p.active) {
            return self.take_posted();
        }
        let buf = &mut self.recv_block[self.recv_at..self.recv_at + self.recv_len];
        match self.node.msg_recv(self.local, buf) {
            Ok(n) => Ok(Some(n)),
            // The message stays queued: take it with a larger buffer.
            Err(Status::MCAPI_ERR_MSG_TRUNCATED) if self.recv_len < MAX_MSG_SIZE => {
                self.grow_recv((self.recv_len * 2).min(MAX_MSG_SIZE));
                self.try_recv()
            }
            Err(Status::MCAPI_TIMEOUT) => Ok(None),
            Err(s) => Err(failed("msg_recv", s)),
        }
    }

    fn pending_sends(&self) -> usize {
        // A blocking msg_send returns once the payload is copied or injected (or read).
        self.window.as_ref().map_or(0, |w| w.in_flight.len())
    }

    fn progress(&mut self) -> Result<()> {
        if let Some(window) = self.window.as_mut() {
            window.reap(&self.node, 0, "msg_send_i")?;
        }
        self.node
            .msg_available(self.local)
            .map(|_| ())
            .map_err(|s| failed("msg_available", s))
    }
}
