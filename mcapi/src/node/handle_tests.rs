//! Handles kept across a `finalize` and the next `initialize` of the same node.

use crate::node::test_pair::{open_channel, sender_and_receiver};
use crate::semantics::Status;

/// A request or channel handle from before a `finalize` names nothing of the node
/// initialized after it, even where that node's first request and first channel take the
/// same slots (before, both tables started every slot at generation 1, and the old handle
/// cancelled the new receive and sent on the new channel).
#[test]
fn handles_from_before_a_finalize_are_invalid_after_the_next_initialize() {
    let mut old = None;
    for round in 0..2 {
        let (a, b, tx, rx, to) =
            sender_and_receiver("shm", &format!("stale-handles-{round}"), (40, 41), Some(4));
        let (hs, hr) = open_channel((&a, &b), (tx, rx, to), false);
        let recv = b.msg_recv_i(rx).expect("a receive");
        if let Some((old_recv, old_send)) = old {
            assert_ne!(old_recv, recv, "the same request handle again");
            assert_ne!(old_send, hs, "the same channel handle again");
            assert_eq!(b.cancel(old_recv), Err(Status::MCAPI_ERR_REQUEST_INVALID));
            assert_eq!(
                a.pktchan_send(old_send, b"stale"),
                Err(Status::MCAPI_ERR_CHAN_INVALID)
            );
            assert_eq!(b.pktchan_available(hr), Ok(0), "the stale send arrived");
            assert_eq!(b.cancel(recv), Ok(()), "the live receive was cancelled");
        }
        old = Some((recv, hs));
        a.finalize().expect("finalize");
        b.finalize().expect("finalize");
    }
}
