//! Message-path cases found by review (each failed before its fix).

use crate::node::test_pair::sender_and_receiver;
use mcapi_ofi::RecvBuffer;
use std::time::Duration;

const T: Option<Duration> = Some(Duration::from_secs(10));

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
