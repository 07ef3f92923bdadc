//! MCAPI nodes in separate processes over real providers: late receivers, killed peers.
//! Runs one test at a time and re-executes itself as the peer (`MCAPI_TEST_CHILD`, the
//! harness in `common`).

mod common;

use common::{config, Peer};
use libtest_mimic::{Failed, Trial};
use mcapi::{EndpointId, Node, RecvBuffer, SendBuffer, Status};
use std::time::{Duration, Instant};

const MESSAGES: u32 = 3000;

fn main() {
    common::run(child, |prov| {
        vec![
            Trial::test(
                format!("{prov}::receiver_starts_after_endpoint_get"),
                move || late_receiver(prov),
            ),
            Trial::test(format!("{prov}::killed_peer_gives_an_error"), move || {
                killed_peer(prov)
            }),
            Trial::test(format!("{prov}::three_sender_processes"), move || {
                three_senders(prov)
            }),
            Trial::test(
                format!("{prov}::restarted_sender_starts_afresh"),
                move || restarted_sender(prov),
            ),
            Trial::test(format!("{prov}::large_messages_16_mib"), move || {
                large_messages(prov)
            }),
            Trial::test(format!("{prov}::receiver_dies_mid_rendezvous"), move || {
                receiver_dies_mid_rendezvous(prov)
            }),
            Trial::test(
                format!("{prov}::receiver_dies_during_a_send_in_place"),
                move || receiver_dies_during_a_send_in_place(prov),
            ),
            Trial::test(
                format!("{prov}::receiver_dies_with_rendezvous_sends_queued"),
                move || receiver_dies_with_rendezvous_sends_queued(prov),
            ),
            Trial::test(format!("{prov}::sender_dies_mid_rendezvous"), move || {
                sender_dies_mid_rendezvous(prov)
            }),
            Trial::test(
                format!("{prov}::endpoint_deleted_mid_rendezvous"),
                move || endpoint_deleted_mid_rendezvous(prov),
            ),
            Trial::test(
                format!("{prov}::large_messages_to_a_receiver_without_cross_memory_attach"),
                move || receiver_without_cma(prov),
            ),
        ]
    });
}

/// The receiver process starts a second after the sender asked for its endpoint; the
/// sender's `endpoint_get` waits for it, then prioritized messages all arrive in order.
fn late_receiver(prov: &str) -> Result<(), Failed> {
    let job = format!("late-{prov}-{}", std::process::id());
    let a = Node::initialize(0, 10, config(prov, &job))?;
    let tx = a.endpoint_create(1)?;
    let child = Peer::spawn("receiver", prov, &job)?;
    let start = Instant::now();
    let to = a.endpoint_get(0, 11, 5, Some(Duration::from_secs(30)))?;
    let waited = start.elapsed();
    for i in 0..MESSAGES {
        let data = i.to_le_bytes();
        a.msg_send(tx, to, &data, i % 4)?;
    }
    let status = child.wait()?;
    a.finalize()?;
    if !status.success() {
        return Err(format!("receiver failed: {status}").into());
    }
    if waited < Duration::from_millis(500) {
        return Err(
            format!("endpoint_get returned after {waited:?}, before the receiver existed").into(),
        );
    }
    Ok(())
}

/// The peer is killed mid-conversation: the survivor's sends fail with
/// MCAPI_ERR_TRANSMISSION instead of hanging, and its node keeps working.
fn killed_peer(prov: &str) -> Result<(), Failed> {
    let job = format!("kill-{prov}-{}", std::process::id());
    let a = Node::initialize(0, 20, config(prov, &job))?;
    let tx = a.endpoint_create(1)?;
    let mut child = Peer::spawn("sink", prov, &job)?;
    let to = a.endpoint_get(0, 21, 5, Some(Duration::from_secs(30)))?;
    a.msg_send(tx, to, b"first", 0)?;
    child.expect("got")?;
    child.kill()?;
    a.set_endpoint_timeout(tx, Some(Duration::from_secs(20)))?;
    let start = Instant::now();
    let err = loop {
        match a.msg_send(tx, to, b"more", 0) {
            Ok(()) if start.elapsed() < Duration::from_secs(20) => continue,
            Ok(()) => return Err("sends to a dead peer kept succeeding".into()),
            Err(e) => break e,
        }
    };
    if err != Status::MCAPI_ERR_TRANSMISSION {
        return Err(format!("expected MCAPI_ERR_TRANSMISSION, got {err}").into());
    }
    // The rest of the node still works.
    let me = a.endpoint_create(2)?;
    a.msg_send(me, me, b"still here", 0)?;
    let mut buf = [0u8; 16];
    a.set_endpoint_timeout(me, Some(Duration::from_secs(10)))?;
    let n = a.msg_recv(me, &mut buf)?;
    a.finalize()?;
    if &buf[..n] != b"still here" {
        return Err("local message corrupted".into());
    }
    eprintln!("  {prov}: peer death reported after {:?}", start.elapsed());
    Ok(())
}

/// Messages per sender: 100,000 on shm (and everywhere under `MCAPI_STRESS=1`, the stress
/// target `scripts/stress`), 20,000 on the network providers.
fn per_sender(prov: &str) -> u32 {
    if prov == "shm" || std::env::var_os("MCAPI_STRESS").is_some_and(|v| v == "1") {
        100_000
    } else {
        20_000
    }
}

/// Three sender processes, mixed priorities and sizes, one receiver that stalls now and then:
/// everything arrives once, in order per sender and priority.
fn three_senders(prov: &str) -> Result<(), Failed> {
    let job = format!("three-{prov}-{}", std::process::id());
    let node = Node::initialize(0, 30, config(prov, &job))?;
    let rx = node.endpoint_create(1)?;
    node.set_endpoint_timeout(rx, Some(Duration::from_secs(60)))?;
    let children: Vec<_> = (0..3)
        .map(|k| Peer::spawn(&format!("sender{k}"), prov, &job))
        .collect::<Result<_, _>>()?;
    let mut next = [[0u32; 3]; 3];
    let mut buf = vec![0u8; 4096];
    for n in 0..3 * per_sender(prov) {
        if n % 20_000 == 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
        let len = node.msg_recv(rx, &mut buf)?;
        let k = buf[0] as usize;
        let i = u32::from_le_bytes(buf[1..5].try_into()?);
        let prio = (i % 3) as usize;
        if len != 5 + (i as usize * 97) % 1500 || i != next[k][prio] * 3 + prio as u32 {
            return Err(
                format!("sender {k}: message {i} ({len} B) out of order or damaged").into(),
            );
        }
        next[k][prio] += 1;
    }
    for c in children {
        if !c.wait()?.success() {
            return Err("a sender failed".into());
        }
    }
    node.finalize()?;
    Ok(())
}

/// A sender process finalizes and a new process takes over its node id: the new one's
/// messages arrive too, in order (its sequence numbers start afresh).
fn restarted_sender(prov: &str) -> Result<(), Failed> {
    let job = format!("restart-{prov}-{}", std::process::id());
    let node = Node::initialize(0, 40, config(prov, &job))?;
    let rx = node.endpoint_create(1)?;
    node.set_endpoint_timeout(rx, Some(Duration::from_secs(30)))?;
    let mut buf = [0u8; 8];
    for life in 0..3u32 {
        let child = Peer::spawn(&format!("life{life}"), prov, &job)?;
        for i in 0..500u32 {
            let n = node.msg_recv(rx, &mut buf)?;
            let got = u32::from_le_bytes(buf[..n].try_into()?);
            if got != life * 1000 + i {
                return Err(format!("life {life}: message {i} is {got}").into());
            }
        }
        if !child.wait()?.success() {
            return Err(format!("sender life {life} failed").into());
        }
    }
    node.finalize()?;
    Ok(())
}

/// A large message's bytes: every offset and every message (`seed`) differ.
fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) as u8 ^ (i >> 13) as u8)
        .collect()
}

/// Sizes and priorities of the mix the "bigsender" sends after its 16 MiB message.
const MIX: [(usize, u32); 8] = [
    (8, 2),
    (300_000, 2),
    (65_536, 0),
    (65_537, 1),
    (3, 0),
    (1 << 20, 2),
    (100, 1),
    (4 << 20, 0),
];

/// A 16 MiB message from another process, content checked; then a mix of eager and
/// rendezvous messages of three priorities queued before the receiver looks: priority
/// order, FIFO within a priority. The sender finalizes at once after its last send
/// (finalize waits for its staged messages to be read).
fn large_messages(prov: &str) -> Result<(), Failed> {
    let job = format!("big-{prov}-{}", std::process::id());
    let node = Node::initialize(0, 50, config(prov, &job))?;
    let rx = node.endpoint_create(1)?;
    node.set_endpoint_timeout(rx, Some(Duration::from_secs(60)))?;
    let child = Peer::spawn("bigsender", prov, &job)?;
    let max = mcapi::MAX_MSG_SIZE;
    let mut buf = vec![0u8; max];
    let n = node.msg_recv(rx, &mut buf)?;
    if n != max || buf != pattern(max, 1) {
        return Err(format!("16 MiB message: {n} bytes, content differs").into());
    }
    let start = Instant::now();
    while node.msg_available(rx)? < MIX.len() {
        if start.elapsed() > Duration::from_secs(60) {
            return Err("the mix never queued".into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut expect: Vec<usize> = (0..MIX.len()).collect();
    expect.sort_by_key(|&i| MIX[i].1);
    for i in expect {
        let n = node.msg_recv(rx, &mut buf)?;
        if n != MIX[i].0 || buf[..n] != pattern(n, 10 + i as u32)[..] {
            return Err(format!(
                "expected message {i} ({} B), got {n} B or other bytes",
                MIX[i].0
            )
            .into());
        }
    }
    if !child.wait()?.success() {
        return Err("the sender failed".into());
    }
    node.finalize()?;
    Ok(())
}

/// A receiver whose shm cannot attach to other processes (`FI_SHM_DISABLE_CMA` set in its
/// process alone) reads through the sender's provider: a blocking rendezvous send to it
/// (which would lend the buffer in place to a receiver that reads itself) is staged, a
/// buffer that lives for good is still lent, and both arrive whole.
fn receiver_without_cma(prov: &str) -> Result<(), Failed> {
    let job = format!("nocma-{prov}-{}", std::process::id());
    let node = Node::initialize(0, 56, config(prov, &job))?;
    let tx = node.endpoint_create(1)?;
    let mut child = Peer::spawn_with("nocma", prov, &job, &[("FI_SHM_DISABLE_CMA", "1")])?;
    let to = node.endpoint_get(0, 57, 5, Some(Duration::from_secs(30)))?;
    let len = 4 << 20;
    node.msg_send(tx, to, &pattern(len, 3), 1)?;
    let forever: &'static [u8] = Box::leak(pattern(len, 4).into_boxed_slice());
    let lent = node.msg_send_i_zero_copy(tx, to, SendBuffer::from_static(forever), 1)?;
    node.wait(lent, None, Some(Duration::from_secs(60)))?;
    child.expect("ok")?;
    if !child.wait()?.success() {
        return Err("the receiver failed".into());
    }
    node.finalize()?;
    Ok(())
}

/// Node 52 of job `name` with endpoint 1, and a receiver process (node 53, endpoint 5,
/// which takes nothing: "bigsink") ready: the node, its endpoint, the receiver's endpoint,
/// the receiver.
fn sender_and_sink(prov: &str, name: &str) -> Result<(Node, EndpointId, EndpointId, Peer), Failed> {
    let job = format!("{name}-{prov}-{}", std::process::id());
    let a = Node::initialize(0, 52, config(prov, &job))?;
    let tx = a.endpoint_create(1)?;
    let mut child = Peer::spawn("bigsink", prov, &job)?;
    let to = a.endpoint_get(0, 53, 5, Some(Duration::from_secs(30)))?;
    child.expect("ready")?;
    Ok((a, tx, to, child))
}

/// The receiver dies holding descriptors of staged messages it never read: the sender's
/// send that waits for staging room ends with MCAPI_ERR_TRANSMISSION, and the staged
/// messages are freed (once the dead receiver's departure grace is over).
fn receiver_dies_mid_rendezvous(prov: &str) -> Result<(), Failed> {
    let (a, tx, to, child) = sender_and_sink(prov, "bigdie")?;
    let big = pattern(mcapi::MAX_MSG_SIZE, 3);
    // With a timeout, sends stage their messages (none go in place).
    a.set_endpoint_timeout(tx, Some(Duration::from_secs(30)))?;
    // The receiver's node reads one ahead (its 16 MiB read-ahead budget) although its
    // application takes none; four more fill this node's 64 MiB staging.
    for _ in 0..5 {
        a.msg_send(tx, to, &big, 0)?;
    }
    let start = Instant::now();
    while a.staged_messages()? != 4 {
        if start.elapsed() > Duration::from_secs(30) {
            return Err(format!("{} staged, expected 4", a.staged_messages()?).into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill()?;
    match a.msg_send(tx, to, &big, 0) {
        Err(Status::MCAPI_ERR_TRANSMISSION) => {}
        other => return Err(format!("a send waiting for staging room: {other:?}").into()),
    }
    let start = Instant::now();
    while a.staged_messages()? > 0 {
        if start.elapsed() > Duration::from_secs(30) {
            return Err("staged messages of a dead receiver never freed".into());
        }
        std::thread::sleep(Duration::from_millis(20));
        let me = a.endpoint_create(9)?;
        a.endpoint_delete(me)?; // (any call progresses the node)
    }
    a.finalize()?;
    Ok(())
}

/// Blocking sends without a timeout to a receiver that takes nothing: where sends go in
/// place, the first is read ahead by the receiver's node and returns, the second waits for a
/// read until the receiver is killed and then ends with MCAPI_ERR_TRANSMISSION; elsewhere
/// both are staged and return at once. A `msg_send_i_zero_copy` between them lends its
/// buffer (one that lives for good) where the node says so (shm, tcp; its request
/// cannot be cancelled once sent, and ends with MCAPI_ERR_TRANSMISSION too: the receiver's
/// read-ahead room is taken by the first message); elsewhere it is copied and completes.
/// Nothing stays exposed or staged.
fn receiver_dies_during_a_send_in_place(prov: &str) -> Result<(), Failed> {
    let (a, tx, to, child) = sender_and_sink(prov, "bigplace")?;
    let big = pattern(mcapi::MAX_MSG_SIZE, 6);
    // (No timeout on `tx`: sends go in place where the provider allows.)
    a.msg_send(tx, to, &big, 0)?;
    let lent_buf: &'static [u8] = Box::leak(pattern(mcapi::MAX_MSG_SIZE, 7).into_boxed_slice());
    let lent = a.msg_send_i_zero_copy(tx, to, SendBuffer::from_static(lent_buf), 0)?;
    if a.lends_static_buffers() && a.cancel(lent) != Err(Status::MCAPI_ERR_REQUEST_INVALID) {
        return Err("a lent buffer's send was cancelled after it left".into());
    }
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        child.kill().map_err(|e| format!("{e:?}"))
    });
    let start = Instant::now();
    let second = a.msg_send(tx, to, &big, 0);
    let blocked = start.elapsed();
    killer.join().map_err(|_| "the killer thread panicked")??;
    let lent_end = a.wait(lent, None, Some(Duration::from_secs(30)));
    match (a.lends_static_buffers(), lent_end) {
        (true, Err(Status::MCAPI_ERR_TRANSMISSION)) => {}
        (false, Ok(n)) if n == lent_buf.len() => {}
        (lent, other) => return Err(format!("lent: {lent}, the lent send: {other:?}").into()),
    }
    match (a.sends_in_place(), second) {
        (true, Err(Status::MCAPI_ERR_TRANSMISSION)) if blocked >= Duration::from_millis(900) => {}
        (false, Ok(())) => {}
        (in_place, other) => {
            return Err(format!(
                "in place: {in_place}, the second send: {other:?} after {blocked:?}"
            )
            .into())
        }
    }
    let start = Instant::now();
    while a.staged_messages()? > 0 {
        if start.elapsed() > Duration::from_secs(30) {
            return Err("messages of a dead receiver never freed".into());
        }
        std::thread::sleep(Duration::from_millis(20));
        let me = a.endpoint_create(9)?;
        a.endpoint_delete(me)?;
    }
    a.finalize()?;
    Ok(())
}

/// Rendezvous sends queued for credits (behind an eager one the receiver, taking nothing,
/// has no room for) when the receiver is killed: each ends once with
/// MCAPI_ERR_TRANSMISSION (a lent one, a staged one, and the eager one before them), and
/// nothing stays staged or lent.
fn receiver_dies_with_rendezvous_sends_queued(prov: &str) -> Result<(), Failed> {
    let (a, tx, to, child) = sender_and_sink(prov, "bigqueued")?;
    // Eager sends until one waits for a credit the receiver cannot give (its buffers are
    // full of messages it never takes).
    let mut waiting = None;
    for _ in 0..200 {
        let r = a.msg_send_i(tx, to, b"fill", 0)?;
        match a.wait(r, None, Some(Duration::from_secs(1))) {
            Ok(_) => {}
            Err(Status::MCAPI_TIMEOUT) => {
                waiting = Some(r);
                break;
            }
            Err(e) => return Err(format!("an eager send: {e:?}").into()),
        }
    }
    let eager = waiting.ok_or("the receiver never ran out of credits")?;
    let size = a.eager_max() * 4;
    let lent_buf: &'static [u8] = Box::leak(pattern(size, 8).into_boxed_slice());
    let lent = a.msg_send_i_zero_copy(tx, to, SendBuffer::from_static(lent_buf), 0)?;
    let staged = a.msg_send_i(tx, to, &pattern(size, 9), 0)?;
    child.kill()?;
    // The node learns of the loss and frees what it staged or lent; its progress goes on
    // (each endpoint call progresses it) before anyone looks at the requests.
    let start = Instant::now();
    while a.staged_messages()? > 0 || start.elapsed() < Duration::from_millis(500) {
        if start.elapsed() > Duration::from_secs(30) {
            return Err("queued messages of a dead receiver never freed".into());
        }
        std::thread::sleep(Duration::from_millis(20));
        let me = a.endpoint_create(9)?;
        a.endpoint_delete(me)?;
    }
    for (what, r) in [("eager", eager), ("lent", lent), ("staged", staged)] {
        match a.wait(r, None, Some(Duration::from_secs(30))) {
            Err(Status::MCAPI_ERR_TRANSMISSION) => {}
            other => return Err(format!("the queued {what} send: {other:?}").into()),
        }
    }
    // The node still works.
    let me = a.endpoint_create(9)?;
    a.msg_send(tx, me, b"alive", 0)?;
    a.finalize()?;
    Ok(())
}

/// The receiving endpoint is deleted with rendezvous messages queued: their sender is told
/// and frees them; a blocking send waiting for staging room then goes (to be discarded, if
/// it raced the delete's notice) or fails with MCAPI_ERR_ENDP_INVALID, as later sends do.
fn endpoint_deleted_mid_rendezvous(prov: &str) -> Result<(), Failed> {
    let job = format!("bigdel-{prov}-{}", std::process::id());
    let a = Node::initialize(0, 54, config(prov, &job))?;
    let tx = a.endpoint_create(1)?;
    let mut child = Peer::spawn("bigdeleter", prov, &job)?;
    let to = a.endpoint_get(0, 55, 5, Some(Duration::from_secs(30)))?;
    let big = pattern(mcapi::MAX_MSG_SIZE, 4);
    // With a timeout, sends stage their messages (none go in place).
    a.set_endpoint_timeout(tx, Some(Duration::from_secs(30)))?;
    for _ in 0..4 {
        a.msg_send(tx, to, &big, 0)?;
    }
    match a.msg_send(tx, to, &big, 0) {
        Ok(()) | Err(Status::MCAPI_ERR_ENDP_INVALID) => {}
        other => return Err(format!("a send to the deleted endpoint: {other:?}").into()),
    }
    child.expect("deleted")?;
    match a.msg_send(tx, to, &big, 0) {
        Err(Status::MCAPI_ERR_ENDP_INVALID) => {}
        other => return Err(format!("a send after the delete: {other:?}").into()),
    }
    let start = Instant::now();
    while a.staged_messages()? > 0 {
        if start.elapsed() > Duration::from_secs(30) {
            return Err(format!("{} staged messages never freed", a.staged_messages()?).into());
        }
        std::thread::sleep(Duration::from_millis(5));
        let me = a.endpoint_create(9)?;
        a.endpoint_delete(me)?;
    }
    child.finish()?;
    a.finalize()?;
    Ok(())
}

/// The sender dies with rendezvous messages queued here: the one whose read was done
/// (read ahead into receive staging) is still delivered, content checked; those waiting
/// for read-ahead room end their receives (blocking, and posted with their buffers) with
/// MCAPI_ERR_TRANSMISSION; nothing stays held.
fn sender_dies_mid_rendezvous(prov: &str) -> Result<(), Failed> {
    let job = format!("bigsdie-{prov}-{}", std::process::id());
    let node = Node::initialize(0, 56, config(prov, &job))?;
    let rx = node.endpoint_create(1)?;
    node.set_endpoint_timeout(rx, Some(Duration::from_secs(30)))?;
    let mut child = Peer::spawn("bigsender-dies", prov, &job)?;
    child.expect("sent")?;
    let start = Instant::now();
    // One fits the read-ahead budget (16 MiB) and is read at once; four wait.
    while node.msg_available(rx)? < 5 || node.fetched_messages()? < 1 {
        if start.elapsed() > Duration::from_secs(60) {
            return Err("the messages never arrived".into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill()?;
    let max = mcapi::MAX_MSG_SIZE;
    let mut buf = vec![0u8; max];
    let n = node.msg_recv(rx, &mut buf)?;
    if n != max || buf != pattern(max, 20) {
        return Err(format!("the message read ahead: {n} bytes, content differs").into());
    }
    for i in 1..3 {
        match node.msg_recv(rx, &mut buf) {
            Err(Status::MCAPI_ERR_TRANSMISSION) => {}
            other => return Err(format!("message {i} of a dead sender: {other:?}").into()),
        }
    }
    // Receives posted with their buffers: the reads into them (or their refusal) end too.
    for i in 3..5 {
        let posted = RecvBuffer::from_static(Box::leak(vec![0u8; max].into()));
        let request = node.msg_recv_i_into(rx, posted)?;
        match node.wait_into(request, Some(Duration::from_secs(60))) {
            Err(Status::MCAPI_ERR_TRANSMISSION) => {}
            other => {
                let other = other.map(|(n, _)| n);
                return Err(format!("posted receive {i} of a dead sender: {other:?}").into());
            }
        }
    }
    if node.msg_available(rx)? != 0 || node.fetched_messages()? != 0 {
        return Err(format!("{} reads still held", node.fetched_messages()?).into());
    }
    node.finalize()?;
    Ok(())
}

fn child(spec: &str) {
    let mut parts = spec.splitn(3, ':');
    let (role, prov, job) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    match role {
        "receiver" => {
            std::thread::sleep(Duration::from_secs(1));
            let b = Node::initialize(0, 11, config(prov, job)).unwrap();
            let rx = b.endpoint_create(5).unwrap();
            b.set_endpoint_timeout(rx, Some(Duration::from_secs(30)))
                .unwrap();
            let mut next = [0u32; 4];
            let mut buf = [0u8; 8];
            for _ in 0..MESSAGES {
                let n = b.msg_recv(rx, &mut buf).unwrap();
                let i = u32::from_le_bytes(buf[..n].try_into().unwrap());
                let prio = (i % 4) as usize;
                // FIFO within a priority: the next message of this priority.
                assert_eq!(
                    i,
                    next[prio] * 4 + prio as u32,
                    "out of order within priority {prio}"
                );
                next[prio] += 1;
            }
            b.finalize().unwrap();
        }
        "nocma" => {
            let b = Node::initialize(0, 57, config(prov, job)).unwrap();
            let rx = b.endpoint_create(5).unwrap();
            let mut buf = vec![0u8; 4 << 20];
            for seed in [3, 4] {
                let n = b.msg_recv(rx, &mut buf).unwrap();
                assert!(n == buf.len() && buf == pattern(n, seed), "message {seed}");
            }
            println!("ok");
            b.finalize().unwrap();
        }
        "sink" => {
            let b = Node::initialize(0, 21, config(prov, job)).unwrap();
            let rx = b.endpoint_create(5).unwrap();
            let mut buf = [0u8; 8];
            b.msg_recv(rx, &mut buf).unwrap();
            println!("got");
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        sender if sender.starts_with("sender") => {
            let k: u8 = sender["sender".len()..].parse().unwrap();
            let n = Node::initialize(0, 31 + u32::from(k), config(prov, job)).unwrap();
            let tx = n.endpoint_create(1).unwrap();
            let to = n
                .endpoint_get(0, 30, 1, Some(Duration::from_secs(30)))
                .unwrap();
            let mut msg = vec![k; 2048];
            for i in 0..per_sender(prov) {
                msg[1..5].copy_from_slice(&i.to_le_bytes());
                n.msg_send(tx, to, &msg[..5 + (i as usize * 97) % 1500], i % 3)
                    .unwrap();
            }
            n.finalize().unwrap();
        }
        life if life.starts_with("life") => {
            let k: u32 = life["life".len()..].parse().unwrap();
            let n = Node::initialize(0, 41, config(prov, job)).unwrap();
            let tx = n.endpoint_create(1).unwrap();
            let to = n
                .endpoint_get(0, 40, 1, Some(Duration::from_secs(30)))
                .unwrap();
            for i in 0..500u32 {
                n.msg_send(tx, to, &(k * 1000 + i).to_le_bytes(), 0)
                    .unwrap();
            }
            n.finalize().unwrap();
        }
        "bigsender" => {
            let n = Node::initialize(0, 51, config(prov, job)).unwrap();
            let tx = n.endpoint_create(1).unwrap();
            let to = n
                .endpoint_get(0, 50, 1, Some(Duration::from_secs(30)))
                .unwrap();
            // Priority 0: a message whose data is still being read is not available yet,
            // so a receive waiting for it takes a higher-priority one that arrives meanwhile.
            n.msg_send(tx, to, &pattern(mcapi::MAX_MSG_SIZE, 1), 0)
                .unwrap();
            let mut reqs = Vec::new();
            for (i, &(len, prio)) in MIX.iter().enumerate() {
                let data = pattern(len, 10 + i as u32);
                if i % 2 == 0 {
                    n.msg_send(tx, to, &data, prio).unwrap();
                } else {
                    reqs.push(n.msg_send_i(tx, to, &data, prio).unwrap());
                }
            }
            for r in reqs {
                n.wait(r, None, Some(Duration::from_secs(60))).unwrap();
            }
            n.finalize().unwrap();
        }
        "bigsink" => {
            let b = Node::initialize(0, 53, config(prov, job)).unwrap();
            let _rx = b.endpoint_create(5).unwrap();
            println!("ready");
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        "bigsender-dies" => {
            let a = Node::initialize(0, 57, config(prov, job)).unwrap();
            let tx = a.endpoint_create(1).unwrap();
            let to = a
                .endpoint_get(0, 56, 1, Some(Duration::from_secs(30)))
                .unwrap();
            // One read ahead by the receiver, four staged here (with a timeout: none in
            // place).
            a.set_endpoint_timeout(tx, Some(Duration::from_secs(30)))
                .unwrap();
            for i in 0..5 {
                a.msg_send(tx, to, &pattern(mcapi::MAX_MSG_SIZE, 20 + i), 0)
                    .unwrap();
            }
            println!("sent");
            // Killed here.
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        "bigdeleter" => {
            let b = Node::initialize(0, 55, config(prov, job)).unwrap();
            let rx = b.endpoint_create(5).unwrap();
            let start = Instant::now();
            while b.msg_available(rx).unwrap() < 4 {
                assert!(start.elapsed() < Duration::from_secs(60), "never queued");
                std::thread::sleep(Duration::from_millis(2));
            }
            b.endpoint_delete(rx).unwrap();
            println!("deleted");
            // Stay (the sender hears of the delete through this node's control plane).
            std::thread::sleep(Duration::from_secs(2));
            b.finalize().unwrap();
        }
        other => panic!("unknown role {other}"),
    }
}
