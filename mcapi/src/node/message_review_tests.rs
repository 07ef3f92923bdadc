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
