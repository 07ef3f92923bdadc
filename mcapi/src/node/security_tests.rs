//! What a stranger on the fabric (any process that reaches a node's libfabric endpoint,
//! with no control connection and no job key), or a job member on the control plane, must
//! not be able to read or change at a node (found by review; each failed before its fix).

use crate::config::Config;
use crate::control::{connect_when_up, ChannelOp, Frame, Rendezvous, Stream};
use crate::node::credit_plane::{control_tag, encode_control, EPOCH_UNKNOWN};
use crate::node::test_pair::{open_channel, sender_and_receiver};
use crate::semantics::wire::{Kind, Tag};
use crate::{EndpointId, Node, Status};
use std::time::{Duration, Instant};

const T: Option<Duration> = Some(Duration::from_secs(10));

/// Progresses both nodes until `done` holds or `limit` passes; returns whether it held.
fn until(nodes: &[&Node], limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > limit {
            return false;
        }
        for n in nodes {
            if let Ok(mut st) = n.inner.live_state() {
                n.inner.progress(&mut st);
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    true
}

/// Sends a credit request for 8 credits with `tag` from `a`'s fabric endpoint to `addr`
/// (`b`'s), as a job member can (it carries `b`'s fabric token), progressing both until it
/// went.
fn forge_credit_request(
    a: &Node,
    b: &Node,
    tag: crate::semantics::wire::Tag,
    addr: mcapi_ofi::FiAddr,
) {
    assert!(until(&[a, b], Duration::from_secs(5), || a
        .inner
        .fab
        .ep
        .inject_data(&encode_control(tag, b.inner.fabric_token), 8u64 << 32, addr)
        .is_ok()));
}

/// An authenticated control connection to node `<0, node>` of `of`'s job (what any process
/// holding the job key can open), introduced by a Hello naming node `claims` with run
/// `incarnation` and fabric address `addr`.
fn member_connection(of: &Node, node: u32, claims: u32, incarnation: u64, addr: Vec<u8>) -> Stream {
    let to = Rendezvous::of(&of.inner.config, 0, node).expect("rendezvous");
    let mut s = connect_when_up(
        &to,
        Some(Instant::now() + Duration::from_secs(10)),
        &of.inner.auth,
        &|| false,
    )
    .expect("connect")
    .expect("up");
    let hello = Frame::Hello {
        domain: 0,
        node: claims,
        to: (0, node),
        peer: 0,
        incarnation,
        reads_itself: false,
        fabric_addr: addr,
        fabric_token: 0x7070_7070,
    };
    match s.call(&hello).expect("hello") {
        Frame::Welcome { .. } => {}
        other => panic!("hello answered {other:?}"),
    }
    s
}

/// A member asks a node to connect one of its endpoints to itself (no connect of ours
/// does): refused, and the endpoint stays free for messages (it would have become its own
/// same-node channel peer).
#[test]
fn a_connect_of_an_endpoint_to_itself_is_refused() {
    let (a, b, _tx, rx, to) = sender_and_receiver("shm", "sec-self", (93, 94), Some(8));
    let mut member = member_connection(&b, 94, 95, 0x95, a.inner.fab.ep.address().to_vec());
    let connect = Frame::Channel {
        port: 1,
        op: ChannelOp::Connect {
            peer: rx,
            kind: crate::semantics::channel::ChannelKind::Packet,
            end: crate::control::ConnectEnd::Send,
        },
    };
    let answer = member.call(&connect).expect("an answer");
    assert!(matches!(answer, Frame::Refused(_)), "{answer:?}");
    let tx = a.endpoint_create(2).unwrap();
    assert_eq!(a.msg_send(tx, to, b"still free", 0), Ok(()));
    let mut buf = [0u8; 16];
    assert_eq!(b.msg_recv(rx, &mut buf), Ok(10));
    a.finalize().unwrap();
    b.finalize().unwrap();
}

/// A member that is not an end of a channel sends `Closed` naming the real sender's
/// endpoint: the receive side ended as if the sender had closed, although the sender was
/// open and sending. Now refused: a close speaks only for the sending node's endpoints.
#[test]
fn a_channel_close_from_a_node_that_does_not_own_the_channel_is_refused() {
    let (a, b, tx, rx, to) = sender_and_receiver("shm", "rv-close", (73, 74), Some(8));
    b.set_endpoint_timeout(rx, Some(Duration::from_millis(300)))
        .unwrap();
    let (hs, hr) = open_channel((&a, &b), (tx, rx, to), false);
    a.pktchan_send(hs, b"one").unwrap();
    let p = b.pktchan_recv(hr).unwrap();
    b.pktchan_release(p).unwrap();
    // Node 75 (a member of the job, no end of this channel) says node 73's endpoint closed.
    let addr = a.inner.fab.ep.address().to_vec();
    let mut third = member_connection(&b, 74, 75, 0x75, addr);
    let from = crate::EndpointId::encode(0, 73, 1).unwrap();
    let answer = third
        .call(&Frame::Channel {
            port: 1,
            op: ChannelOp::Closed { sent: 1, from },
        })
        .unwrap();
    // The sender is open and has sent nothing more: a receive waits (its timeout).
    let got = b.pktchan_recv(hr).map(|p| {
        let n = p.len();
        _ = b.pktchan_release(p);
        n
    });
    assert_eq!(
        got,
        Err(Status::MCAPI_TIMEOUT),
        "receive side ended by a Closed from node 75 (answered {answer:?})"
    );
    a.finalize().unwrap();
    b.finalize().unwrap();
}

/// Any sender on the fabric (no control connection, no credit) sends a credit request in
/// the name of a peer that is gone: the endpoint granted it credits, the grant was dropped
/// from the outbox (the peer is not alive), and the node never got those credits back (N
/// of its P per forged request). Now such requests are ignored.
#[test]
fn a_forged_credit_request_for_a_gone_peer_leaks_no_credit() {
    let (a, b, _tx, _rx, _to) = sender_and_receiver("shm", "rv-gone", (76, 77), Some(8));
    let p = b.inner.fab.recv_slots;
    // A third node meets node 77 and finalizes: after the grace it is gone.
    let mut config = Config::defaults();
    config.provider = Some("shm".into());
    config.job = format!("rv-gone-{}", std::process::id());
    let c = Node::initialize(0, 78, config).unwrap();
    c.endpoint_get(0, 77, 1, T).unwrap();
    c.finalize().unwrap();
    let gone = b.inner.state.lock().unwrap().peer_of[&(0, 78)];
    assert!(
        until(&[&a, &b], Duration::from_secs(10), || {
            let st = b.inner.state.lock().unwrap();
            st.run_lost(0, 78) && st.departing == 0
        }),
        "node 78 not gone"
    );
    assert_eq!(
        b.inner.state.lock().unwrap().recv_free,
        p,
        "all credits home"
    );
    // The forgery, from node 76's fabric endpoint (any process reaching the provider).
    let (addr, index) = {
        let st = a.inner.state.lock().unwrap();
        let peer = st.peer_of[&(0, 77)];
        (st.peers[peer as usize].addr, gone)
    };
    let mut tag = control_tag(Kind::Request, (1, 0), index);
    tag.priority = EPOCH_UNKNOWN;
    forge_credit_request(&a, &b, tag, addr);
    // Until the forged request is handled (it takes credits), if it is at all.
    until(&[&a, &b], Duration::from_secs(2), || {
        b.inner.state.lock().unwrap().recv_free < p
    });
    let back = until(&[&a, &b], Duration::from_secs(3), || {
        let st = b.inner.state.lock().unwrap();
        (st.recv_free, st.recv_strays) == (p, 0)
    });
    let free = b.inner.state.lock().unwrap().recv_free;
    a.finalize().unwrap();
    b.finalize().unwrap();
    assert!(
        back,
        "{free} of {p} credits free: granted to a gone peer, never back"
    );
}

/// Any sender on the fabric sends untagged messages longer than a control slot (16 bytes):
/// each ended in a truncation error completion of a control receive, which was never
/// posted again. Once the slots were gone the node heard no credit control and no
/// `RndvDone` any more (a rendezvous message read by its receiver stayed staged at its
/// sender). Now a failed control receive is posted again.
#[test]
fn oversized_untagged_messages_do_not_use_up_the_control_slots() {
    let (a, b, tx, rx, _to) = sender_and_receiver("shm", "rv-ctlslots", (83, 84), Some(8));
    let big = vec![5u8; 256 << 10];
    let mut buf = vec![0u8; big.len()];
    // The receiver (b) sends a rendezvous message to a, which reads it: b is told (RndvDone).
    let back = b.endpoint_get(0, 83, 1, T).unwrap();
    let staged = |n: &Node| n.inner.state.lock().unwrap().rndv.outstanding();
    b.msg_send(rx, back, &big, 0).unwrap();
    assert_eq!(a.msg_recv(tx, &mut buf), Ok(big.len()));
    assert!(until(&[&a, &b], Duration::from_secs(5), || staged(&b) == 0));
    // The forgery: 300 untagged 24-byte messages to b (it posts at most 256 control slots).
    let addr = {
        let st = a.inner.state.lock().unwrap();
        st.peers[st.peer_of[&(0, 84)] as usize].addr
    };
    let mut sent = 0;
    until(&[&a, &b], Duration::from_secs(10), || {
        while sent < 300 && a.inner.fab.ep.inject_data(&[0u8; 24], 0, addr).is_ok() {
            sent += 1;
        }
        sent == 300
    });
    until(&[&a, &b], Duration::from_millis(200), || false);
    // The same exchange again.
    a.set_endpoint_timeout(tx, Some(Duration::from_secs(5)))
        .unwrap();
    b.set_endpoint_timeout(rx, Some(Duration::from_secs(5)))
        .unwrap();
    _ = b.msg_send(rx, back, &big, 0);
    _ = a.msg_recv(tx, &mut buf);
    let released = until(&[&a, &b], Duration::from_secs(5), || staged(&b) == 0);
    a.finalize().unwrap();
    b.finalize().unwrap();
    assert!(
        released,
        "after {sent} oversized control messages b never heard RndvDone"
    );
}

/// A receiver keeps the key and address of the staging region it read a rendezvous message
/// from. The sender cached that region, still registered for remote reads under the same
/// key, and staged its next large message to another node in it: the first receiver read
/// that message (tcp: the key is checked by the sender's provider, and still valid). Now a
/// cached region is reused only for the peer it was staged for.
#[test]
fn a_receiver_cannot_read_a_later_message_staged_for_another_node() {
    let mut config = Config::defaults();
    config.provider = Some("tcp".into());
    config.job = format!("rv-rma-{}", std::process::id());
    let a = Node::initialize(0, 85, config.clone()).unwrap();
    let b = Node::initialize(0, 86, config.clone()).unwrap();
    let c = Node::initialize(0, 87, config).unwrap();
    let tx = a.endpoint_create(1).unwrap();
    let rb = b.endpoint_create(1).unwrap();
    let rc = c.endpoint_create(1).unwrap();
    let to_b = a.endpoint_get(0, 86, 1, T).unwrap();
    let to_c = a.endpoint_get(0, 87, 1, T).unwrap();
    const LEN: usize = 1 << 20;
    let mut buf = vec![0u8; LEN];
    // Message 1, to b: b learns (addr, key) of the region (read here from a's side: the
    // one message staged).
    a.msg_send(tx, to_b, &vec![1u8; LEN], 0).unwrap();
    let (addr, key) = {
        let st = a.inner.state.lock().unwrap();
        let ids = st.rndv.staged_ids();
        assert_eq!(ids.len(), 1, "{ids:?}");
        let region = st.rndv.region(ids[0]).expect("staged").clone();
        (a.inner.remote_address(region.addr()), region.key())
    };
    assert_eq!(b.msg_recv(rb, &mut buf), Ok(LEN));
    // Message 2, a secret for c, staged in the region b read from.
    let secret = vec![0x5e_u8; LEN];
    a.msg_send(tx, to_c, &secret, 0).unwrap();
    // b reads a's memory with what message 1 told it.
    b.inner
        .hold_background
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let got = rma(&b, 85, addr, key, LEN, None);
    b.inner
        .hold_background
        .store(false, std::sync::atomic::Ordering::Relaxed);
    let mut cbuf = vec![0u8; LEN];
    assert_eq!(c.msg_recv(rc, &mut cbuf), Ok(LEN));
    for n in [a, b, c] {
        n.finalize().unwrap();
    }
    assert!(
        got.as_ref() != Some(&secret),
        "node 86 read the message staged for node 87 with the key ({key}) of its own earlier message"
    );
}

/// Reads `len` bytes of `from`'s registered memory (`addr`, `key`) with `by`'s endpoint,
/// or writes `data` there; waits for the completion by reading `by`'s CQ (its background
/// thread held).
fn rma(
    by: &Node,
    from: u32,
    addr: u64,
    key: u64,
    len: usize,
    data: Option<&[u8]>,
) -> Option<Vec<u8>> {
    let region = mcapi_ofi::MemoryRegion::new(&by.inner.fab.domain, len).unwrap();
    let src = {
        let st = by.inner.state.lock().unwrap();
        st.peers[st.peer_of[&(0, from)] as usize].addr
    };
    if let Some(d) = data {
        region.write(0, d).unwrap();
    }
    let mut entries = [mcapi_ofi::Completion::default(); 16];
    let start = Instant::now();
    loop {
        let buf = region.slice(0, len).unwrap();
        let posted = match data {
            Some(_) => by.inner.fab.ep.write(buf, src, addr, key, 9),
            None => by.inner.fab.ep.read(buf, src, addr, key, 9),
        };
        match posted {
            Ok(()) => break,
            // No connection yet (rxm connects on first use): progress and try again.
            Err(e) if e.is_again() && start.elapsed() < Duration::from_secs(5) => {
                let _st = by.inner.state.lock().unwrap();
                _ = by.inner.fab.cq.read(&mut entries);
            }
            Err(e) => {
                eprintln!("rma post: {e}");
                return None;
            }
        }
    }
    let mut out = vec![0u8; len];
    let start = Instant::now();
    loop {
        {
            let _st = by.inner.state.lock().unwrap();
            _ = by.inner.fab.cq.read(&mut entries);
        }
        // Readable (and writable) again once the operation completed.
        if region.read(0, &mut out).is_ok() && region.write(0, &out[..1]).is_ok() {
            return Some(out);
        }
        if start.elapsed() > Duration::from_secs(5) {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// On tcp every region of a node was registered for remote read and write, with keys
/// numbered 1, 2, 3... and offset addressing: anyone who reached the node's provider read
/// the messages queued for it in its receive pool (trying the first keys at the slots'
/// offsets), and rewrote them before the application took them. (tcp;ofi_rxm serves reads
/// whatever the region's access flags: the random key is what keeps them out.)
#[test]
fn nobody_reads_or_writes_a_nodes_receive_pool_by_rma() {
    let mut config = Config::defaults();
    config.provider = Some("tcp".into());
    config.job = format!("rv-pool-{}", std::process::id());
    let a = Node::initialize(0, 88, config.clone()).unwrap();
    let b = Node::initialize(0, 89, config.clone()).unwrap();
    let c = Node::initialize(0, 90, config).unwrap();
    let ra = a.endpoint_create(1).unwrap();
    let tc = c.endpoint_create(1).unwrap();
    b.endpoint_get(0, 88, 1, T).unwrap(); // b only needs a's fabric address
    let to_a = c.endpoint_get(0, 88, 1, T).unwrap();
    let secret = b"for node 88 only: 0123456789";
    c.msg_send(tc, to_a, secret, 0).unwrap();
    // Until a's progress put it in a receive slot.
    assert!(until(&[&a], Duration::from_secs(5), || a.msg_available(ra)
        == Ok(1)));
    b.inner
        .hold_background
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let base = a.inner.remote_address(a.inner.fab.recv_pool.addr());
    let slot = crate::node::common::EAGER_SLOT;
    let mut found = None;
    'keys: for key in 0..=16 {
        for i in 0..a.inner.fab.recv_slots as u64 {
            let Some(bytes) = rma(&b, 88, base + i * slot as u64, key, secret.len(), None) else {
                continue 'keys;
            };
            if &bytes[..] == secret {
                found = Some((key, i));
                break 'keys;
            }
        }
    }
    if let Some((key, i)) = found {
        rma(&b, 88, base + i * slot as u64, key, 8, Some(b"REWRITE!"));
    }
    b.inner
        .hold_background
        .store(false, std::sync::atomic::Ordering::Relaxed);
    // (tcp progresses a write into a's memory with a's progress)
    until(&[&a, &b], Duration::from_millis(200), || false);
    let mut buf = [0u8; 64];
    let n = a.msg_recv(ra, &mut buf).unwrap();
    let got = buf[..n].to_vec();
    for n in [a, b, c] {
        n.finalize().unwrap();
    }
    assert!(
        found.is_none() && &got[..] == secret,
        "node 89 read node 88's queued message (key, slot) {found:?} (offset addressing \
         {}); node 88 then received {:?}",
        base == 0,
        String::from_utf8_lossy(&got)
    );
}

/// A Hello meant for another node (from a peer that reached this node at an address its
/// previous owner published: PMIx keeps a dead node's address, and its port may be taken
/// by another node of the job) is refused, and this node meets nobody. Before, it welcomed
/// the caller, which took it for the node it meant and sent that node's messages here.
#[test]
fn a_hello_meant_for_another_node_is_refused() {
    let mut config = Config::defaults();
    config.provider = Some("shm".into());
    config.job = format!("sec-hello-to-{}", std::process::id());
    let x = Node::initialize(0, 96, config).unwrap();
    let at = Rendezvous::of(&x.inner.config, 0, 96).expect("rendezvous");
    let limit = Some(Instant::now() + Duration::from_secs(10));
    let mut s = connect_when_up(&at, limit, &x.inner.auth, &|| false)
        .expect("connect")
        .expect("up");
    let hello = |to| Frame::Hello {
        domain: 0,
        node: 97,
        to,
        peer: 0,
        incarnation: 1,
        reads_itself: false,
        fabric_addr: x.inner.fab.ep.address().to_vec(),
        fabric_token: 0x7070_7070,
    };
    let answer = s.call(&hello((0, 98))).expect("an answer");
    assert_eq!(
        answer,
        Frame::Refused(Status::MCAPI_ERR_NODE_INVALID.code())
    );
    assert!(!x.inner.state.lock().unwrap().peer_of.contains_key(&(0, 97)));
    x.finalize().unwrap();
}

/// A process of its own on `provider` (no control connection, no job key) sends `to` the
/// credit control `tag` with number `data`, as it would have to guess it: the old 8-byte
/// form, and the 16-byte one with tokens that are not `to`'s. Progresses `nodes` meanwhile.
fn stranger_controls(provider: &str, nodes: &[&Node], to: &Node, tag: Tag, data: u64) {
    use mcapi_ofi::{AddressVector, Completion, CompletionQueue, Domain, Endpoint};
    use mcapi_ofi::{EndpointOptions, Hints, Info, WaitObject};
    let mut hints = Hints::new().provider(provider.to_owned());
    if provider != "shm" {
        hints = hints.source(Some("127.0.0.1"), None);
    }
    let info = Info::first(&hints).expect("stranger info");
    let domain = Domain::open_info(&info).expect("domain");
    let cq = CompletionQueue::open(&domain, 0, WaitObject::None).expect("CQ");
    let av = AddressVector::open(&domain, 4).expect("AV");
    let ep = Endpoint::open(&domain, &cq, &av, EndpointOptions::default()).expect("endpoint");
    let dest = av.insert(to.inner.fab.ep.address()).expect("AV insert");
    let tag_only = tag.encode().to_le_bytes();
    let guesses = [0, to.inner.incarnation, to.inner.fabric_token ^ 1];
    let forms = std::iter::once(tag_only.to_vec())
        .chain(guesses.map(|token| encode_control(tag, token).to_vec()));
    let mut completions = [Completion::default(); 4];
    for bytes in forms {
        assert!(until(nodes, Duration::from_secs(10), || {
            _ = cq.read(&mut completions);
            ep.inject_data(&bytes, data, dest).is_ok()
        }));
    }
    until(nodes, Duration::from_millis(300), || {
        _ = cq.read(&mut completions);
        false
    });
}

/// Sends up to `n` numbered messages from `tx` of `a` to `to` (until one is refused: with no
/// receive under way, a sender stops at its credits) and returns how many `msg_send`
/// accepted and the numbers `rx` of `b` received (each within the endpoints' timeouts).
fn numbered_messages(
    a: &Node,
    b: &Node,
    (tx, rx, to): (EndpointId, EndpointId, EndpointId),
    n: u32,
) -> (u32, Vec<u32>) {
    let t = Some(Duration::from_secs(5));
    a.set_endpoint_timeout(tx, t).unwrap();
    b.set_endpoint_timeout(rx, t).unwrap();
    let sent = (0..n)
        .take_while(|i| a.msg_send(tx, to, &i.to_le_bytes(), 0).is_ok())
        .count() as u32;
    let mut buf = [0u8; 16];
    let got = (0..sent)
        .map_while(|_| {
            b.msg_recv(rx, &mut buf).ok()?;
            Some(u32::from_le_bytes(buf[..4].try_into().unwrap()))
        })
        .collect();
    (sent, got)
}

/// A stranger sends a sending node a credit Grant of 1,000 credits for the endpoint it
/// sends to, naming the receiver, the port and the endpoint's epoch as the node numbers
/// them (small counters, guessed in a few hundred tries). The window took them: the sender's
/// next messages went without credits of the receiver, which dropped them while `msg_send`
/// returned success (found in review). A control without the receiving run's fabric token
/// now changes nothing.
#[test]
fn a_strangers_credit_grant_makes_no_sender_lose_messages() {
    for provider in ["tcp", "shm"] {
        let (a, b, tx, rx, to) = sender_and_receiver(provider, "sec-grant", (160, 161), Some(8));
        a.msg_send(tx, to, b"first", 0).unwrap();
        assert_eq!(b.msg_recv(rx, &mut [0u8; 16]), Ok(5));
        let (index, epoch) = {
            let st = a.inner.state.lock().unwrap();
            let peer = st.peer_of[&(0, 161)];
            (peer, st.remotes[&(peer, 1)].epoch)
        };
        let tag = control_tag(Kind::Grant, (1, epoch), index);
        stranger_controls(provider, &[&a, &b], &a, tag, 1000);
        let (sent, got) = numbered_messages(&a, &b, (tx, rx, to), 40);
        a.finalize().unwrap();
        b.finalize().unwrap();
        assert_eq!(
            got,
            (0..sent).collect::<Vec<_>>(),
            "{provider}: {sent} sent"
        );
    }
}

/// A stranger sends a receiving node a credit Return in a live sender's name for the
/// credits that sender holds: the receiver's pool took them back, and the sender's next
/// messages, sent on credits it really held, were dropped as sent without one while
/// `msg_send` returned success (found in review). Now the Return changes nothing.
#[test]
fn a_strangers_credit_return_makes_no_receiver_drop_messages() {
    for provider in ["tcp", "shm"] {
        let (a, b, tx, rx, to) = sender_and_receiver(provider, "sec-return", (162, 163), Some(8));
        a.msg_send(tx, to, b"first", 0).unwrap();
        assert_eq!(b.msg_recv(rx, &mut [0u8; 16]), Ok(5));
        until(&[&a, &b], Duration::from_millis(300), || false);
        let (held, index_at_b) = {
            let st = a.inner.state.lock().unwrap();
            let peer = st.peer_of[&(0, 163)];
            let held = st.remotes[&(peer, 1)].window.available();
            (held, st.peers[peer as usize].index_at_peer)
        };
        assert!(held > 0, "{provider}: the sender holds no credits");
        let epoch = b.inner.state.lock().unwrap().endpoints[&1].epoch;
        let tag = control_tag(Kind::Return, (1, epoch), index_at_b);
        stranger_controls(provider, &[&a, &b], &b, tag, u64::from(held));
        let (sent, got) = numbered_messages(&a, &b, (tx, rx, to), held);
        a.finalize().unwrap();
        b.finalize().unwrap();
        assert_eq!(sent, held, "{provider}: the sender's own credits");
        assert_eq!(got, (0..sent).collect::<Vec<_>>(), "{provider}");
    }
}

/// On sockets a message that comes before a receive is posted for it waits in the
/// provider's unexpected list, and its completion, once a receive is posted, leaves
/// `FI_REMOTE_CQ_DATA` out. A stranger's messages take every receive slot of a node while
/// it is busy, and a peer's rendezvous message comes then: it was taken for an eager one,
/// and the application got its 32-byte descriptor as the message. Now every message
/// carries data there, and the receiver reads it whatever the flag says.
#[test]
fn messages_that_wait_for_a_receive_slot_keep_their_kind_on_sockets() {
    use mcapi_ofi::{AddressVector, CompletionQueue, Endpoint, EndpointOptions, WaitObject};
    if mcapi_ofi::Info::first(&mcapi_ofi::Hints::new().provider("sockets")).is_err() {
        eprintln!("skipping: sockets not offered here");
        return;
    }
    let (a, b, tx, rx, to) = sender_and_receiver("sockets", "sec-unexp", (301, 302), Some(8));
    a.set_endpoint_timeout(tx, T).unwrap();
    b.set_endpoint_timeout(rx, T).unwrap();
    let mut buf = vec![0u8; 256 << 10];
    a.msg_send(tx, to, b"warm", 1).unwrap();
    assert_eq!(b.msg_recv(rx, &mut buf), Ok(4));
    // The stranger: an endpoint of its own on a's domain, sending to b's node endpoint.
    let domain = &a.inner.fab.domain;
    let cq = CompletionQueue::open(domain, 0, WaitObject::None).unwrap();
    let av = AddressVector::open(domain, 4).unwrap();
    let stranger = Endpoint::open(domain, &cq, &av, EndpointOptions::default()).unwrap();
    let dest = av.insert(b.inner.fab.ep.address()).unwrap();
    let from_nobody = Tag {
        kind: Kind::Message,
        priority: 1,
        port: 1,
        peer: 9999,
        seq: 0,
    }
    .encode();
    let large: Vec<u8> = (0..256u32 << 10).map(|i| (i % 251) as u8).collect();
    let sender = {
        // b cannot post its slots again while its state is held: the stranger's messages
        // take them all, and a's two messages wait in the provider.
        let st = b.inner.state.lock().unwrap();
        let slots = b.inner.fab.recv_slots;
        for _ in 0..slots {
            let start = Instant::now();
            while let Err(e) = stranger.inject_tagged(&[0u8; 8], dest, from_nobody) {
                assert!(
                    e.is_again() && start.elapsed() < Duration::from_secs(5),
                    "{e}"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        std::thread::sleep(Duration::from_millis(200));
        let sender = {
            let (a, large) = (a.clone(), large.clone());
            std::thread::spawn(move || {
                a.msg_send(tx, to, &large, 1)?;
                a.msg_send(tx, to, b"small", 1)
            })
        };
        std::thread::sleep(Duration::from_millis(300));
        drop(st);
        sender
    };
    let first = b.msg_recv(rx, &mut buf);
    let first_intact = first == Ok(large.len()) && buf[..large.len()] == large[..];
    let second = b.msg_recv(rx, &mut buf);
    let sent = sender.join().unwrap();
    drop((stranger, av, cq));
    a.finalize().unwrap();
    b.finalize().unwrap();
    assert!(
        first_intact,
        "the rendezvous message: {first:?} (sender: {sent:?})"
    );
    assert_eq!(
        second,
        Ok(5),
        "the eager message after it (sender: {sent:?})"
    );
}
