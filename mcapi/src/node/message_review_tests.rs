//! Message-path cases found by review (each failed before its fix).

use crate::node::test_pair::sender_and_receiver;
use crate::semantics::Status;
use mcapi_ofi::RecvBuffer;
use std::time::Duration;

const T: Option<Duration> = Some(Duration::from_secs(10));

/// A sender that looked an endpoint up, which is then deleted before its first message,
/// asks for credits of an endpoint that is not there; the receiver has nothing to answer.
/// A request unanswered for a second has the sender look the endpoint up on the receiver's
/// control plane: the send ends with `MCAPI_ERR_ENDP_INVALID`, and a later send looks the
/// port up again (reaching a new endpoint there). Before, the `msg_send_i` never completed
/// and every later send to the port queued behind it.
#[test]
fn a_send_to_an_endpoint_deleted_before_its_first_message_ends() {
    for (recreate, ids) in [(false, (130, 131)), (true, (132, 133))] {
        let (a, b, tx, rx, to) = sender_and_receiver("tcp", "deleted-unseen", ids, Some(8));
        a.set_endpoint_timeout(tx, Some(Duration::from_secs(10)))
            .unwrap();
        b.endpoint_delete(rx).unwrap();
        let again = recreate.then(|| b.endpoint_create(1).unwrap());
        let first = a.msg_send_i(tx, to, b"first", 0).unwrap();
        assert_eq!(
            a.wait(first, None, T),
            Err(Status::MCAPI_ERR_ENDP_INVALID),
            "recreate {recreate}"
        );
        let second = a.msg_send(tx, to, b"second", 0);
        match again {
            Some(rx2) => {
                assert_eq!(second, Ok(()), "to the new endpoint");
                let mut buf = [0u8; 16];
                assert_eq!(b.msg_recv(rx2, &mut buf), Ok(6));
                assert_eq!(&buf[..6], b"second");
            }
            None => assert_eq!(second, Err(Status::MCAPI_ERR_ENDP_INVALID)),
        }
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

/// Receives posted with their buffers complete oldest first, as posted receives do, also
/// when the application waits on a later one first: before, a wait on the second of two
/// such receives never completed for eager messages (it waited for a test of the first),
/// though both messages were queued.
#[test]
fn a_wait_on_a_later_posted_receive_completes_the_older_ones() {
    for (provider, ids) in [("shm", (134, 135)), ("tcp", (136, 137))] {
        let (a, b, tx, rx, to) = sender_and_receiver(provider, "later-posted", ids, Some(8));
        let buffer = || RecvBuffer::from_static(Box::leak(vec![0u8; 64].into_boxed_slice()));
        let first = b.msg_recv_i_into(rx, buffer()).unwrap();
        let second = b.msg_recv_i_into(rx, buffer()).unwrap();
        a.msg_send(tx, to, b"one", 0).unwrap();
        a.msg_send(tx, to, b"two", 0).unwrap();
        let (n, mut got) = b.wait_into(second, T).expect("the second receive");
        assert_eq!(&got.as_mut_slice().unwrap()[..n], b"two", "{provider}");
        let (n, mut got) = b.wait_into(first, T).expect("the first receive");
        assert_eq!(&got.as_mut_slice().unwrap()[..n], b"one", "{provider}");
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

/// The look-up of a stalled window leaves a window alone that is no longer the one it
/// looked at: one of a peer's new run (a restart met between the snapshot and the
/// look-up, whose endpoint the new run answered for), or one that got credits since. Before
/// (a review of the first version), the first was forgotten and sends to the port then
/// hung, the second's credits were lost.
#[test]
fn a_stale_look_up_leaves_a_live_window_alone() {
    let mut config = crate::config::Config::defaults();
    config.provider = Some("tcp".into());
    config.job = format!("stale-look-up-{}", std::process::id());
    let a = crate::Node::initialize(0, 150, config.clone()).unwrap();
    let b = crate::Node::initialize(0, 151, config.clone()).unwrap();
    let tx = a.endpoint_create(1).unwrap();
    for port in 2..5 {
        b.endpoint_create(port).unwrap();
    }
    let rx = b.endpoint_create(1).unwrap();
    let to = a.endpoint_get(0, 151, 1, T).unwrap();
    a.msg_send(tx, to, b"old", 0).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(b.msg_recv(rx, &mut buf), Ok(3));
    let peer = a.inner.live_state().unwrap().peer_of[&(0, 151)];
    let (old_epoch, old_replaced) = {
        let st = a.inner.live_state().unwrap();
        let r = &st.remotes[&(peer, 1)];
        (r.epoch, r.replaced)
    };
    // A window with credits: its look-up (the endpoint is there) changes nothing, and one
    // naming it after it got credits neither.
    a.inner.verify_window(peer, (1, old_epoch, old_replaced));
    assert!(a
        .inner
        .live_state()
        .unwrap()
        .remotes
        .contains_key(&(peer, 1)));
    // The receiver restarts; the sender meets the new run, whose endpoint 1 is epoch 0.
    b.finalize().unwrap();
    let b = crate::Node::initialize(0, 151, config).unwrap();
    let rx = b.endpoint_create(1).unwrap();
    a.set_endpoint_timeout(tx, Some(Duration::from_secs(3)))
        .unwrap();
    let start = std::time::Instant::now();
    loop {
        let to = a.endpoint_get(0, 151, 1, T).unwrap();
        match a.msg_send(tx, to, b"new", 0) {
            Ok(()) => break,
            Err(e) => assert!(start.elapsed() < Duration::from_secs(20), "{e:?}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(b.msg_recv(rx, &mut buf), Ok(3));
    // The look-up of the old run's window, answered by the new run.
    a.inner.verify_window(peer, (1, old_epoch, old_replaced));
    let to = a.endpoint_get(0, 151, 1, T).unwrap();
    assert_eq!(a.msg_send(tx, to, b"after", 0), Ok(()));
    assert_eq!(b.msg_recv(rx, &mut buf), Ok(5));
    a.finalize().unwrap();
    b.finalize().unwrap();
}

/// A blocking `msg_send` that finds no free send slot (all in flight: shm never completes a
/// send to a receiver run that is gone, so a node whose peers finalize mid-traffic loses
/// them) waits for one without the node's state lock: the node's other threads go on
/// meanwhile, and the send ends at its timeout. Before, `send_payload` waited holding the
/// lock for the send's whole timeout (for good without one), so another thread's call on
/// the node, a `finalize` and the control plane's answers to other nodes (their credit
/// requests and look-ups, which have no deadline) waited as long: blocking calls of
/// several nodes returned seconds past their timeouts under load.
#[test]
fn a_send_waiting_for_a_send_slot_leaves_the_node_to_its_other_threads() {
    use std::time::Instant;
    let (a, b, tx, _rx, to) = crate::node::test_pair::sender_and_receiver_eager(
        "shm",
        "no-send-slot",
        (711, 712),
        None,
        Some(8 << 10),
    );
    let timeout = Duration::from_secs(5);
    a.set_endpoint_timeout(tx, Some(timeout)).unwrap();
    a.msg_send(tx, to, b"warm", 0).unwrap();
    let size = a.eager_max();
    assert!(size > a.inject_size(), "no eager size above inject on shm");
    // Every send slot taken, as sends in flight to a receiver that is gone hold them.
    let slots = std::mem::take(&mut a.inner.state.lock().unwrap().send_free);
    let sender = {
        let a = a.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            let sent = a.msg_send(tx, to, &vec![1u8; size], 0);
            (sent, start.elapsed())
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    a.msg_available(tx).expect("another call on the node");
    let other = start.elapsed();
    let (sent, took) = sender.join().unwrap();
    a.inner.state.lock().unwrap().send_free = slots;
    assert_eq!(sent, Err(Status::MCAPI_TIMEOUT), "no send slot came back");
    // (Bounds far from both outcomes: the lock was held for the whole timeout.)
    assert!(
        took < timeout + Duration::from_millis(2500),
        "the send returned {took:?} after its start (timeout {timeout:?})"
    );
    assert!(
        other < timeout / 2,
        "another thread's call waited {other:?} for the stalled send"
    );
    // The slots back, the same send goes at once (its credit was given back).
    a.msg_send(tx, to, &vec![2u8; size], 0)
        .expect("a send with slots");
    a.finalize().unwrap();
    b.finalize().unwrap();
}

/// A receiver that goes away without reading messages sent to it leaves its sender's later
/// sends alone. shm completes a send above its inject size only once the receiver answers,
/// and it reports its answers in order: one that never comes (the receiver crashed, or a
/// node of the process finalized with messages on their way) held back the completion of
/// every later such send of the endpoint, to any peer, so its send slots ran out and its
/// eager sends timed out (for good without a timeout). Messages above the inject size go
/// by rendezvous on shm since. Here the receiver's first run is dropped unfinalized (as by
/// a crash) with messages of every size on their way to it; then its next run takes 200
/// messages of the sizes around the eager threshold.
#[test]
fn a_receiver_gone_with_messages_on_their_way_leaves_later_sends_alone() {
    use crate::config::Config;
    use crate::Node;
    use std::sync::atomic::Ordering;
    let (a, b, tx, rx, to) = sender_and_receiver("shm", "gone-unread", (355, 356), Some(64));
    a.set_endpoint_timeout(tx, Some(Duration::from_secs(5)))
        .unwrap();
    let sizes = [
        a.inject_size(),
        a.inject_size() + 1,
        6000,
        8 << 10,
        16 << 10,
    ];
    let mut buf = vec![0u8; 16 << 10];
    a.msg_send(tx, to, b"warm", 0).unwrap();
    assert_eq!(b.msg_recv(rx, &mut buf), Ok(4));
    b.inner.hold_background.store(true, Ordering::Relaxed);
    for i in 0..20 {
        let size = sizes[i % sizes.len()];
        a.msg_send(tx, to, &vec![1u8; size], 0)
            .unwrap_or_else(|e| panic!("send {i} of {size} B to the first run: {e:?}"));
    }
    // Gone without reading them: dropped unfinalized, as by a crash (its CQ is never read
    // again; a `finalize` would have taken them in).
    drop(b);
    let mut config = Config::defaults();
    config.provider = Some("shm".into());
    config.job = format!("gone-unread-{}", std::process::id());
    config.recv_buffers = 64;
    let b = Node::initialize(0, 356, config).expect("the receiver's next run");
    let rx = b.endpoint_create(1).unwrap();
    // The first sends may find the old run gone (MCAPI_ERR_TRANSMISSION) until the look-up
    // meets the next run: a bound, not a timing.
    let start = std::time::Instant::now();
    let to = loop {
        let to = a.endpoint_get(0, 356, 1, T).unwrap();
        match a.msg_send(tx, to, b"hello", 0) {
            Ok(()) => break to,
            Err(e) => assert!(start.elapsed() < Duration::from_secs(20), "{e:?}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(b.msg_recv(rx, &mut buf), Ok(5));
    for i in 0..200 {
        let size = sizes[i % sizes.len()];
        a.msg_send(tx, to, &vec![i as u8; size], 0)
            .unwrap_or_else(|e| panic!("send {i} of {size} B to the next run: {e:?}"));
        assert_eq!(b.msg_recv(rx, &mut buf), Ok(size), "message {i}");
        assert!(
            buf[..size].iter().all(|&x| x == i as u8),
            "message {i}'s content"
        );
    }
    a.finalize().unwrap();
    b.finalize().unwrap();
}

/// A rendezvous read that fails while its sender's run lives is tried again, and the
/// message arrives whole. Before, the receive ended with `MCAPI_ERR_TRANSMISSION` while the
/// sender had been told its message was sent. Each way a receive reads meets two failed
/// reads here: ahead into staging (where the descriptor's arrival starts the reads),
/// straight into a posted buffer, in place by a receive that waits. Reads that keep failing
/// end their message with `MCAPI_ERR_TRANSMISSION`, the sender is told, and the next
/// message arrives.
#[test]
fn a_rendezvous_read_that_fails_while_its_sender_lives_is_tried_again() {
    use crate::node::fetch::READ_RETRIES;
    for (provider, ids) in [("shm", (370, 371)), ("tcp", (372, 373))] {
        let (a, b, tx, rx, to) = sender_and_receiver(provider, "read-again", ids, Some(8));
        // Three chunks of receive staging, and as many reads.
        let size = (2 << 20) + 5;
        assert!(size > a.eager_max(), "{provider}: a rendezvous message");
        let failures = |n: u32| b.inner.state.lock().unwrap().forced_read_failures = n;
        let failures_left = || b.inner.state.lock().unwrap().forced_read_failures;
        let send = |fill: u8| a.msg_send_i(tx, to, &vec![fill; size], 0).unwrap();
        let check = |got: &[u8], fill: u8, how: &str| {
            assert_eq!(got.len(), size, "{provider} {how}");
            assert!(got.iter().all(|&x| x == fill), "{provider} {how}: content");
        };
        let mut buf = vec![0u8; size];
        let read_in_place = || b.inner.state.lock().unwrap().read_in_place;
        for (fill, how) in [(1u8, "ahead"), (2, "posted"), (3, "in place")] {
            failures(2);
            let in_place_before = read_in_place();
            match how {
                "ahead" => {
                    let sent = send(fill);
                    a.wait(sent, None, T).expect("sent");
                    let start = std::time::Instant::now();
                    while b.msg_available(rx) == Ok(0) {
                        assert!(start.elapsed() < T.unwrap(), "{provider}: no arrival");
                        std::thread::yield_now();
                    }
                    let recv = b.msg_recv_i(rx).unwrap();
                    let n = b.wait(recv, Some(&mut buf), T).expect(how);
                    check(&buf[..n], fill, how);
                }
                "posted" => {
                    let posted = RecvBuffer::from_static(Box::leak(vec![0u8; size].into()));
                    let recv = b.msg_recv_i_into(rx, posted).unwrap();
                    let sent = send(fill);
                    let (n, mut got) = b.wait_into(recv, T).expect(how);
                    check(&got.as_mut_slice().unwrap()[..n], fill, how);
                    a.wait(sent, None, T).expect("sent");
                }
                _ => {
                    let sent = send(fill);
                    let n = b.msg_recv(rx, &mut buf).expect(how);
                    check(&buf[..n], fill, how);
                    a.wait(sent, None, T).expect("sent");
                }
            }
            assert_eq!(failures_left(), 0, "{provider} {how}: the failures met");
            // A receive posted with its buffer before the message came reads into it; the
            // other ways read in place or ahead as the background thread's progress falls.
            if how == "posted" {
                assert_eq!(
                    read_in_place() - in_place_before,
                    1,
                    "{provider} {how}: read in place"
                );
            }
        }
        // Failing every time: the message is lost, and said so; the sender's request ends.
        failures(u32::MAX);
        let sent = send(4);
        assert_eq!(
            b.msg_recv(rx, &mut buf),
            Err(Status::MCAPI_ERR_TRANSMISSION),
            "{provider}"
        );
        let tried = u32::MAX - failures_left();
        assert!(
            tried > u32::from(READ_RETRIES),
            "{provider}: read {tried} times"
        );
        failures(0);
        _ = a.wait(sent, None, T);
        let sent = send(5);
        let n = b.msg_recv(rx, &mut buf).expect("the next message");
        check(&buf[..n], 5, "after a lost one");
        a.wait(sent, None, T).expect("sent");
        assert_eq!(b.inner.state.lock().unwrap().rndv.fetches.held(), 0);
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

/// A send on another thread while its node finalizes either returns success and its
/// message arrives, or fails and nothing arrives. Before, sends went on through
/// `finalize`'s drain of staged messages and its flushes, returned success, and their
/// messages were lost with the node's endpoint (a stress run on tcp lost a rendezvous
/// message so: its receiver found the sender gone before it could read it; here every
/// rendezvous message staged after the drain was lost). Here a thread sends eager and
/// rendezvous messages back to back, and the node finalizes once it has sent some.
#[test]
fn a_send_racing_finalize_arrives_or_fails() {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use std::time::Instant;
    for (provider, ids) in [("tcp", (374, 375)), ("shm", (376, 377))] {
        for round in 0..4u32 {
            let (a, b, tx, rx, to) =
                sender_and_receiver(provider, "racing-finalize", ids, Some(64));
            a.set_endpoint_timeout(tx, T).unwrap();
            b.set_endpoint_timeout(rx, Some(Duration::from_millis(500)))
                .unwrap();
            let big = 4 * a.eager_max();
            let sent = Arc::new(AtomicU32::new(0));
            let sender = {
                let (a, sent) = (a.clone(), sent.clone());
                std::thread::spawn(move || loop {
                    let i = sent.load(Ordering::Relaxed);
                    let mut msg = vec![i as u8; if i % 2 == 0 { 100 } else { big }];
                    msg[..4].copy_from_slice(&i.to_le_bytes());
                    if let Err(e) = a.msg_send(tx, to, &msg, 0) {
                        return e;
                    }
                    sent.store(i + 1, Ordering::Relaxed);
                })
            };
            let receiver = {
                let b = b.clone();
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; big];
                    let (mut got, mut failed) = (Vec::new(), Vec::new());
                    loop {
                        match b.msg_recv(rx, &mut buf) {
                            Ok(n) => {
                                let i = u32::from_le_bytes(buf[..4].try_into().unwrap());
                                assert!(buf[4..n].iter().all(|&x| x == i as u8), "message {i}");
                                got.push(i);
                            }
                            Err(Status::MCAPI_TIMEOUT) => return (got, failed),
                            Err(e) => failed.push(e),
                        }
                    }
                })
            };
            let start = Instant::now();
            while sent.load(Ordering::Relaxed) < 1 + 8 * round {
                assert!(
                    start.elapsed() < T.unwrap(),
                    "{provider}: the sender is stuck"
                );
                std::thread::yield_now();
            }
            let start = Instant::now();
            a.finalize().unwrap();
            let took = start.elapsed();
            let err = sender.join().unwrap();
            let sent = sent.load(Ordering::Relaxed);
            let (got, failed) = receiver.join().unwrap();
            let missing: Vec<u32> = (0..sent).filter(|i| !got.contains(i)).collect();
            assert!(
                missing.is_empty() && got.len() == sent as usize,
                "{provider} round {round}: {sent} sent (then {err:?}), {} received, \
                 missing {missing:?}, receives failed: {failed:?}",
                got.len()
            );
            assert!(
                took < Duration::from_secs(5),
                "{provider}: finalize took {took:?}"
            );
            b.finalize().unwrap();
        }
    }
}

/// A node that finalizes while its read-ahead of a large message is under way closes its
/// endpoint only once the reads ended. On tcp;ofi_rxm (libfabric 1.17) closing a
/// connection while a read's reply arrives reports the read cancelled twice, the second
/// time with its entry freed, and rxm's endpoint close crashed on it (SIGSEGV inside
/// libfabric, seen in stress runs where restarting nodes finalized).
#[test]
fn a_node_finalizing_mid_read_closes_after_its_reads() {
    use std::time::Instant;
    for round in 0..3 {
        let (a, b, tx, _rx, to) =
            sender_and_receiver("tcp", "finalize-mid-read", (384, 385), Some(8));
        a.set_endpoint_timeout(tx, T).unwrap();
        let size = a.max_msg_size();
        let sent = a.msg_send_i(tx, to, &vec![7u8; size], 0).unwrap();
        // The read-ahead starts as the descriptor arrives; finalize with reads under way.
        let start = Instant::now();
        while b.fetched_messages() == Ok(0) {
            assert!(
                start.elapsed() < T.unwrap(),
                "round {round}: no read started"
            );
            std::thread::yield_now();
        }
        b.finalize().unwrap();
        drop(b);
        _ = a.wait(sent, None, T);
        a.finalize().unwrap();
    }
}
