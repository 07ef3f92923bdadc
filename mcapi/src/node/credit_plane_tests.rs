//! Credits across an endpoint's delete and re-creation, and a refused request, between
//! two nodes over shm (found by review; each failed before the endpoint generation in the
//! credit controls and the stamp kept on refusal).

use crate::node::test_pair::sender_and_receiver;
use crate::semantics::Status;
use crate::Node;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

const T: Option<Duration> = Some(Duration::from_secs(3));

/// Until `done` holds, progressing both nodes (a bound, not a timing).
fn until(a: &Node, b: &Node, what: &str, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}");
        for n in [a, b] {
            if let Ok(mut st) = n.inner.live_state() {
                n.inner.progress(&mut st);
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Until every credit of `b`'s node is back (none lent, none stray), then both finalize.
fn every_credit_back(a: &Node, b: &Node) {
    let p = b.inner.fab.recv_slots;
    until(a, b, "the node's credits to come back", || {
        let st = b.inner.state.lock().unwrap();
        (st.recv_free, st.recv_strays) == (p, 0)
    });
    a.finalize().unwrap();
    b.finalize().unwrap();
}

/// Sends the N = 8 messages `b`'s endpoint lends credits for, receives them while the
/// sender does not read its CQ (its grants stay there), then deletes the endpoint; the
/// sender's background thread is held until the caller lets it go.
fn delete_with_grants_unread(
    a: &Node,
    b: &Node,
    (tx, rx, to): (crate::EndpointId, crate::EndpointId, crate::EndpointId),
) {
    for i in 0..8u8 {
        a.msg_send(tx, to, &[i], 0).unwrap();
    }
    a.inner.hold_background.store(true, Relaxed);
    let mut buf = [0u8; 8];
    for _ in 0..8 {
        assert_eq!(b.msg_recv(rx, &mut buf), Ok(1));
    }
    b.endpoint_delete(rx).unwrap();
}

/// The grants of the last messages consumed are still in the sender's CQ when the
/// endpoint is deleted: the sender gives them back when they arrive, and the receiving
/// node's credits all come back.
#[test]
fn grants_crossing_a_delete_come_back() {
    let (a, b, tx, rx, to) = sender_and_receiver("shm", "cp-delete", (44, 45), Some(8));
    delete_with_grants_unread(&a, &b, (tx, rx, to));
    a.inner.hold_background.store(false, Relaxed);
    every_credit_back(&a, &b);
}

/// Delete and create again, twenty times, with nothing held: no credit is lost on the way
/// (each round's sends would block once the node had none left).
#[test]
fn deletes_after_the_last_receive_lose_no_credit() {
    let (a, b, tx, mut rx, mut to) = sender_and_receiver("shm", "cp-rounds", (50, 51), Some(8));
    let mut buf = [0u8; 8];
    a.set_endpoint_timeout(tx, T).unwrap();
    for round in 0..20u32 {
        for i in 0..8u8 {
            assert_eq!(a.msg_send(tx, to, &[i], 0), Ok(()), "round {round}");
        }
        for _ in 0..8 {
            assert_eq!(b.msg_recv(rx, &mut buf), Ok(1));
        }
        b.endpoint_delete(rx).unwrap();
        rx = b.endpoint_create(10 + round).unwrap();
        to = a.endpoint_get(0, 51, 10 + round, None).unwrap();
    }
    b.endpoint_delete(rx).unwrap();
    every_credit_back(&a, &b);
}

/// As above, and the endpoint is created again at the port before the sender reads the old
/// one's grants: they are not spent on the new endpoint (whose pool never lent them, so
/// its messages would be dropped as sent without a credit), and sending goes on.
#[test]
fn stale_grants_are_not_spent_on_an_endpoint_created_again() {
    let (a, b, tx, rx, to) = sender_and_receiver("shm", "cp-recreate", (46, 47), Some(8));
    delete_with_grants_unread(&a, &b, (tx, rx, to));
    let rx2 = b.endpoint_create(1).unwrap();
    let mut buf = [0u8; 8];
    a.set_endpoint_timeout(tx, T).unwrap();
    b.set_endpoint_timeout(rx2, T).unwrap();
    for round in 0..3u8 {
        for i in 0..8u8 {
            assert_eq!(a.msg_send(tx, to, &[round, i], 0), Ok(()));
        }
        if round == 0 {
            a.inner.hold_background.store(false, Relaxed);
        }
        for i in 0..8u8 {
            assert_eq!(b.msg_recv(rx2, &mut buf), Ok(2), "round {round}");
            assert_eq!(buf[..2], [round, i]);
        }
    }
    a.finalize().unwrap();
    b.finalize().unwrap();
}

/// A credit request refused while the endpoint is connected to a channel leaves the
/// sender's grant count as the pool's: once the channel is closed, the sender's requests
/// are answered again.
#[test]
fn a_refused_request_keeps_the_senders_count() {
    let (a, b, tx, rx, to) = sender_and_receiver("shm", "cp-refused", (48, 49), Some(8));
    let mut buf = [0u8; 8];
    a.msg_send(tx, to, b"m1", 0).unwrap();
    assert_eq!(b.msg_recv(rx, &mut buf), Ok(2));
    let tx2 = a.endpoint_create(2).unwrap();
    let c = a.pktchan_connect_i(tx2, to).unwrap();
    a.wait(c, None, T).unwrap();
    let (hs, qs) = a.pktchan_send_open_i(tx2).unwrap();
    let (hr, qr) = b.pktchan_recv_open_i(rx).unwrap();
    let a2 = a.clone();
    let opened = std::thread::spawn(move || a2.wait(qs, None, T));
    b.wait(qr, None, T).unwrap();
    opened.join().unwrap().unwrap();
    // The connect recalled the sender's unspent credits.
    until(&a, &b, "the sender's credits to be recalled", || {
        let st = a.inner.state.lock().unwrap();
        st.remotes
            .values()
            .all(|r| r.window.available() == 0 && r.spare == 0)
    });
    assert_eq!(a.msg_send(tx, to, b"m2", 0), Err(Status::MCAPI_ERR_GENERAL));
    let qs = a.pktchan_send_close_i(hs).unwrap();
    let qr = b.pktchan_recv_close_i(hr).unwrap();
    b.wait(qr, None, T).unwrap();
    a.wait(qs, None, T).unwrap();
    a.set_endpoint_timeout(tx, T).unwrap();
    assert_eq!(
        a.msg_send(tx, to, b"m3", 0),
        Ok(()),
        "blocked after the channel closed"
    );
    assert_eq!(b.msg_recv(rx, &mut buf), Ok(2));
    a.finalize().unwrap();
    b.finalize().unwrap();
}

/// P = 64 (N = 8): eight endpoints each get a burst of N from one sender (all P lent, all
/// spent), then the sender sends to a ninth, whose pool has nothing to lend. The credits of
/// the bursts, as they are consumed, go to the ninth endpoint (not back to the sender as
/// batches it would never spend), and its message is delivered.
#[test]
fn an_endpoint_hungry_in_a_dearth_gets_the_credits_consumed_elsewhere() {
    let (a, b, tx, rx, to) = sender_and_receiver("shm", "cp-dearth", (42, 43), Some(8));
    assert_eq!(b.inner.fab.recv_slots, 64);
    let (mut rxs, mut tos) = (vec![rx], vec![to]);
    for port in 2..=9 {
        rxs.push(b.endpoint_create(port).unwrap());
        tos.push(a.endpoint_get(0, 43, port, None).unwrap());
    }
    for &to in &tos[..8] {
        for i in 0..8u8 {
            a.msg_send(tx, to, &[i], 0).unwrap();
        }
    }
    let ninth = a.msg_send_i(tx, tos[8], b"ninth", 0).unwrap();
    // Its credit request reaches the receiver (over the fabric: a bound, not a timing).
    until(&a, &b, "the ninth endpoint to wait for credits", || {
        !b.inner.state.lock().unwrap().hungry.is_empty()
    });
    let mut buf = [0u8; 8];
    for &rx in &rxs[..8] {
        for _ in 0..8 {
            assert_eq!(b.msg_recv(rx, &mut buf), Ok(1));
        }
    }
    b.set_endpoint_timeout(rxs[8], T).unwrap();
    assert_eq!(b.msg_recv(rxs[8], &mut buf), Ok(5));
    assert_eq!(a.wait(ninth, None, T), Ok(5));
    a.finalize().unwrap();
    b.finalize().unwrap();
}

/// A remote sender that sent one message holds a batch of the endpoint's credits; a sender
/// of the endpoint's own node, finding no room though nothing is queued, has that batch
/// recalled and gets room.
#[test]
fn a_same_node_sender_gets_room_held_by_a_remote_batch() {
    let (a, b, tx, rx, to) = sender_and_receiver("shm", "cp-local", (56, 57), Some(8));
    a.msg_send(tx, to, b"hi", 0).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(b.msg_recv(rx, &mut buf), Ok(2));
    let local = b.endpoint_create(2).unwrap();
    b.set_endpoint_timeout(local, T).unwrap();
    for i in 0..8u8 {
        assert_eq!(
            b.msg_send(local, rx, &[i], 0),
            Ok(()),
            "nothing queued at the endpoint"
        );
    }
    for i in 0..8u8 {
        assert_eq!(b.msg_recv(rx, &mut buf), Ok(1));
        assert_eq!(buf[0], i);
    }
    a.finalize().unwrap();
    b.finalize().unwrap();
}

/// Credit epochs compare within half their range, so they order across the wrap.
#[test]
fn credit_epochs_order_across_the_wrap() {
    use crate::node::state::epoch_before;
    assert!(epoch_before(1, 2) && !epoch_before(2, 1) && !epoch_before(5, 5));
    assert!(epoch_before(u16::MAX, 0), "0 follows 65535");
    assert!(epoch_before(65000, 100));
}

/// A receiver that restarts numbers its endpoints afresh: a sender that sent to an
/// endpoint of its old run (of a later epoch than the new run's first endpoints) sends to
/// the new run's endpoint at the port once it met the new run.
#[test]
fn a_sender_goes_on_after_its_receiver_restarted_with_fresh_epochs() {
    let mut config = crate::config::Config::defaults();
    config.provider = Some("shm".into());
    config.job = format!("cp-restart-{}", std::process::id());
    let a = Node::initialize(0, 58, config.clone()).unwrap();
    let b = Node::initialize(0, 59, config.clone()).unwrap();
    let tx = a.endpoint_create(1).unwrap();
    // The old run's port-1 endpoint has epoch 3 (three created before it).
    for port in 2..5 {
        b.endpoint_create(port).unwrap();
    }
    let rx = b.endpoint_create(1).unwrap();
    let to = a.endpoint_get(0, 59, 1, T).unwrap();
    a.msg_send(tx, to, b"old", 0).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(b.msg_recv(rx, &mut buf), Ok(3));
    b.finalize().unwrap();
    let b = Node::initialize(0, 59, config).unwrap();
    let rx = b.endpoint_create(1).unwrap();
    b.set_endpoint_timeout(rx, T).unwrap();
    a.set_endpoint_timeout(tx, T).unwrap();
    // The first sends may find the old run gone (MCAPI_ERR_TRANSMISSION) until the new
    // run is met: a bound, not a timing.
    let start = std::time::Instant::now();
    loop {
        let to = a.endpoint_get(0, 59, 1, T).unwrap();
        match a.msg_send(tx, to, b"new", 0) {
            Ok(()) => break,
            Err(e) => assert!(start.elapsed() < Duration::from_secs(20), "{e:?}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(b.msg_recv(rx, &mut buf), Ok(3));
    assert_eq!(&buf[..3], b"new");
    a.finalize().unwrap();
    b.finalize().unwrap();
}
