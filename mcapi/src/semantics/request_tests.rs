//! Unit tests of the request table (kept apart so `request.rs` stays short).

use super::super::XorShift;
use super::*;
use Status::*;

const INVALID: Result<Option<(Status, usize)>, Status> = Err(MCAPI_ERR_REQUEST_INVALID);

#[test]
fn send_test_wait_happy_path() {
    let mut t = RequestTable::new(4);
    let h = t.alloc("send").unwrap();
    assert_eq!(t.len(), 1);
    assert_eq!(t.state(h), Ok(RequestState::Pending));
    assert_eq!(t.test(h), Ok(None));
    assert_eq!(t.take_completed(h), Ok(None));
    t.complete(h, MCAPI_SUCCESS, 64).unwrap();
    assert_eq!(t.test(h), Ok(Some((MCAPI_SUCCESS, 64))));
    // test() is repeatable and does not release.
    assert_eq!(t.test(h), Ok(Some((MCAPI_SUCCESS, 64))));
    let c = t.take_completed(h).unwrap().unwrap();
    assert_eq!(
        c,
        Completion {
            status: MCAPI_SUCCESS,
            size: 64,
            payload: "send"
        }
    );
    assert!(t.is_empty());
    assert_eq!(t.test(h), INVALID);
    assert_eq!(t.take_completed(h), Err(MCAPI_ERR_REQUEST_INVALID));
}

#[test]
fn operation_error_is_reported_by_test_and_wait() {
    let mut t = RequestTable::new(1);
    let h = t.alloc(()).unwrap();
    t.complete(h, MCAPI_ERR_MSG_TRUNCATED, 8).unwrap();
    assert_eq!(t.test(h), Ok(Some((MCAPI_ERR_MSG_TRUNCATED, 8))));
    let c = t.take_completed(h).unwrap().unwrap();
    assert_eq!((c.status, c.size), (MCAPI_ERR_MSG_TRUNCATED, 8));
}

#[test]
fn complete_errors() {
    let mut t = RequestTable::new(2);
    let h = t.alloc(()).unwrap();
    assert_eq!(t.complete(h, MCAPI_PENDING, 0), Err(MCAPI_ERR_PARAMETER));
    t.complete(h, MCAPI_SUCCESS, 1).unwrap();
    assert_eq!(t.complete(h, MCAPI_SUCCESS, 1), Err(MCAPI_ERR_GENERAL));
    let g = t.alloc(()).unwrap();
    t.cancel(g).unwrap();
    assert_eq!(
        t.complete(g, MCAPI_SUCCESS, 1),
        Err(MCAPI_ERR_REQUEST_CANCELLED)
    );
    t.take_completed(h).unwrap();
    assert_eq!(
        t.complete(h, MCAPI_SUCCESS, 1),
        Err(MCAPI_ERR_REQUEST_INVALID)
    );
}

#[test]
fn limit_without_reclaimable_slots() {
    let mut t = RequestTable::new(2);
    let a = t.alloc(1).unwrap();
    let _b = t.alloc(2).unwrap();
    assert!(!t.has_room());
    assert_eq!(t.alloc(3), Err(MCAPI_ERR_REQUEST_LIMIT));
    // Completed but not yet reported by test(): a wait may still come.
    t.complete(a, MCAPI_SUCCESS, 0).unwrap();
    assert!(!t.has_room());
    assert_eq!(t.alloc(3), Err(MCAPI_ERR_REQUEST_LIMIT));
    assert_eq!(
        RequestTable::<()>::new(0).alloc(()),
        Err(MCAPI_ERR_REQUEST_LIMIT)
    );
}

#[test]
fn reclaim_after_test_without_wait() {
    let mut t = RequestTable::new(2);
    let a = t.alloc("a").unwrap();
    let b = t.alloc("b").unwrap();
    t.complete(a, MCAPI_SUCCESS, 10).unwrap();
    assert_eq!(t.test(a), Ok(Some((MCAPI_SUCCESS, 10))));
    // Full, but `a` was reported: it is recycled.
    assert!(t.has_room());
    let c = t.alloc("c").unwrap();
    assert_ne!(a, c);
    assert_eq!(t.test(a), INVALID);
    assert_eq!(t.get(a), Err(MCAPI_ERR_REQUEST_INVALID));
    assert_eq!(t.get(c), Ok(&"c"));
    assert_eq!(t.get(b), Ok(&"b"));
    assert_eq!(t.len(), 2);
}

#[test]
fn reclaim_takes_oldest_and_skips_waited() {
    let mut t = RequestTable::new(3);
    let h: Vec<_> = (0..3).map(|i| t.alloc(i).unwrap()).collect();
    for &x in &h {
        t.complete(x, MCAPI_SUCCESS, 0).unwrap();
    }
    // Reported in order 2, 0, 1; 2 has a waiter so 0 is the victim.
    for i in [2, 0, 1] {
        t.test(h[i]).unwrap();
    }
    t.begin_wait(h[2]).unwrap();
    t.alloc(9).unwrap();
    assert_eq!(t.test(h[0]), INVALID);
    assert!(t.test(h[1]).is_ok());
    assert!(t.test(h[2]).is_ok());
    t.alloc(10).unwrap(); // takes h[1]
    assert_eq!(t.test(h[1]), INVALID);
    assert!(!t.has_room());
    assert_eq!(t.alloc(11), Err(MCAPI_ERR_REQUEST_LIMIT));
    t.end_wait(h[2]).unwrap();
    assert!(t.has_room());
    t.alloc(11).unwrap(); // waiter gone: h[2] goes
    assert_eq!(t.test(h[2]), INVALID);
}

#[test]
fn stale_handle_never_aliases_reused_slot() {
    let mut t = RequestTable::new(1);
    let old = t.alloc("old").unwrap();
    t.complete(old, MCAPI_SUCCESS, 0).unwrap();
    t.take_completed(old).unwrap();
    let new = t.alloc("new").unwrap();
    assert_ne!(old, new);
    assert_eq!(t.get(old), Err(MCAPI_ERR_REQUEST_INVALID));
    assert_eq!(t.cancel(old), Err(MCAPI_ERR_REQUEST_INVALID));
    assert_eq!(t.begin_wait(old), Err(MCAPI_ERR_REQUEST_INVALID));
    assert_eq!(t.release(old), Err(MCAPI_ERR_REQUEST_INVALID));
    assert_eq!(t.get(new), Ok(&"new"));
}

#[test]
fn garbage_handles_are_invalid() {
    let mut t = RequestTable::new(8);
    let live: Vec<_> = (0..8).map(|i| t.alloc(i).unwrap()).collect();
    let mut fixed = vec![0, 1, u64::MAX, 0xdead_beef, 0xdead_beef_dead_beef];
    // Single-bit corruptions of live handles.
    for bit in 0..64 {
        fixed.push(live[3].as_raw() ^ (1 << bit));
    }
    // A valid-looking handle from a bigger table (index out of range here).
    let mut big = RequestTable::new(100);
    let far = (0..100).map(|_| big.alloc(()).unwrap()).last().unwrap();
    fixed.push(far.as_raw());
    for raw in fixed {
        assert_eq!(t.test(RequestHandle::from_raw(raw)), INVALID, "{raw:#x}");
    }
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    for _ in 0..200_000 {
        let h = RequestHandle::from_raw(rng.next_u64());
        if !live.contains(&h) {
            assert_eq!(t.get(h), Err(MCAPI_ERR_REQUEST_INVALID));
        }
    }
}

#[test]
fn request_handles_are_not_endpoint_ids() {
    let mut t = RequestTable::new(16);
    for _ in 0..16 {
        let h = t.alloc(()).unwrap();
        assert_eq!(super::super::EndpointId::decode(h.as_raw()), None);
    }
}

#[test]
fn cancel_then_wait() {
    let mut t = RequestTable::new(2);
    let h = t.alloc("recv").unwrap();
    assert_eq!(t.cancel(h), Ok("recv"));
    assert_eq!(t.state(h), Ok(RequestState::Cancelled));
    assert_eq!(t.test(h), INVALID);
    assert_eq!(t.get(h), Err(MCAPI_ERR_REQUEST_INVALID));
    assert_eq!(t.cancel(h), Err(MCAPI_ERR_REQUEST_INVALID));
    assert_eq!(t.take_completed(h), Err(MCAPI_ERR_REQUEST_CANCELLED));
    // The tombstone is consumed.
    assert_eq!(t.take_completed(h), Err(MCAPI_ERR_REQUEST_INVALID));
    assert!(t.is_empty());
}

#[test]
fn cancel_during_wait_tells_the_waiter() {
    let mut t = RequestTable::new(1);
    let h = t.alloc(5).unwrap();
    t.begin_wait(h).unwrap();
    assert_eq!(t.take_completed(h), Ok(None)); // still pending: keeps waiting
    assert_eq!(t.cancel(h), Ok(5));
    // The waited tombstone is not reclaimable.
    assert_eq!(t.alloc(6), Err(MCAPI_ERR_REQUEST_LIMIT));
    assert_eq!(t.take_completed(h), Err(MCAPI_ERR_REQUEST_CANCELLED));
    assert!(t.alloc(6).is_ok());
}

#[test]
fn cancel_completed_request() {
    let mut t = RequestTable::new(1);
    let h = t.alloc(1).unwrap();
    t.complete(h, MCAPI_SUCCESS, 3).unwrap();
    // Not reported yet: the operation completed, the cancel comes too late.
    assert_eq!(t.cancel(h), Err(MCAPI_ERR_REQUEST_INVALID));
    assert_eq!(t.test(h), Ok(Some((MCAPI_SUCCESS, 3))));
    // Reported: the cancel releases it.
    assert_eq!(t.cancel(h), Ok(1));
    assert_eq!(t.take_completed(h), Err(MCAPI_ERR_REQUEST_CANCELLED));
}

#[test]
fn cancelled_tombstone_is_reclaimed_when_full() {
    let mut t = RequestTable::new(1);
    let h = t.alloc(1).unwrap();
    t.cancel(h).unwrap();
    let g = t.alloc(2).unwrap();
    assert_eq!(t.take_completed(h), Err(MCAPI_ERR_REQUEST_INVALID));
    assert_eq!(t.get(g), Ok(&2));
}

#[test]
fn second_waiter_gets_wait_pending() {
    let mut t = RequestTable::new(1);
    let h = t.alloc(()).unwrap();
    t.begin_wait(h).unwrap();
    assert_eq!(t.begin_wait(h), Err(MCAPI_ERR_WAIT_PENDING));
    // test() is not a wait and still works.
    assert_eq!(t.test(h), Ok(None));
    // Timeout: the first waiter leaves, the request survives.
    t.end_wait(h).unwrap();
    t.begin_wait(h).unwrap();
    t.complete(h, MCAPI_SUCCESS, 0).unwrap();
    assert!(t.take_completed(h).unwrap().is_some());
    // Released with its waiter; a new request in the slot starts unwaited.
    let g = t.alloc(()).unwrap();
    assert_eq!(t.begin_wait(g), Ok(()));
}

#[test]
fn find_ready_table() {
    let mut t = RequestTable::new(4);
    let p = t.alloc(0).unwrap();
    let d = t.alloc(1).unwrap();
    let c = t.alloc(2).unwrap();
    let dead = t.alloc(3).unwrap();
    t.complete(d, MCAPI_SUCCESS, 0).unwrap();
    t.cancel(c).unwrap();
    t.release(dead).unwrap();
    type Case<'a> = (&'a [RequestHandle], Result<Option<usize>, Status>);
    let table: &[Case] = &[
        (&[], Err(MCAPI_ERR_PARAMETER)),
        (&[p], Ok(None)),
        (&[p, d], Ok(Some(1))),
        (&[d, p], Ok(Some(0))),
        (&[p, c], Ok(Some(1))),
        (&[p, d, dead], Err(MCAPI_ERR_REQUEST_INVALID)),
    ];
    for (handles, want) in table {
        assert_eq!(t.find_ready(handles), *want, "{handles:?}");
    }
}

#[test]
fn get_mut_and_release() {
    let mut t = RequestTable::new(2);
    let h = t.alloc(vec![1u8]).unwrap();
    t.get_mut(h).unwrap().push(2);
    assert_eq!(t.release(h), Ok(Some(vec![1, 2])));
    let g = t.alloc(vec![]).unwrap();
    t.cancel(g).unwrap();
    assert_eq!(t.release(g), Ok(None));
    assert!(t.is_empty());
}

#[test]
fn no_growth_after_construction() {
    let mut t = RequestTable::new(4);
    let (slots, free, reclaimable) = (
        t.slots.capacity(),
        t.free.capacity(),
        t.reclaimable.capacity(),
    );
    let mut rng = XorShift(7);
    let mut live = Vec::new();
    for _ in 0..10_000 {
        match rng.next_u64() % 5 {
            // Tested, then released: its reclaimable entry goes stale.
            4 if !live.is_empty() => {
                let h = live.swap_remove(rng.next_u64() as usize % live.len());
                let _ = t.complete(h, MCAPI_SUCCESS, 0);
                let _ = t.test(h);
                let _ = t.release(h);
            }
            0 | 1 => {
                if let Ok(h) = t.alloc(()) {
                    live.push(h);
                }
            }
            2 if !live.is_empty() => {
                let h = live[rng.next_u64() as usize % live.len()];
                let _ = t.complete(h, MCAPI_SUCCESS, 0);
                let _ = t.test(h);
            }
            _ if !live.is_empty() => {
                let h = live.swap_remove(rng.next_u64() as usize % live.len());
                let _ = t.cancel(h);
            }
            _ => {}
        }
        assert!(t.len() <= t.capacity());
    }
    assert_eq!(
        (
            t.slots.capacity(),
            t.free.capacity(),
            t.reclaimable.capacity()
        ),
        (slots, free, reclaimable)
    );
}

#[test]
fn generation_wraps_without_matching_old_handle() {
    let mut t = RequestTable::new(1);
    let first = t.alloc(()).unwrap();
    t.release(first).unwrap();
    let second = t.alloc(()).unwrap();
    // Force the generation to the wrap point and cycle once more.
    t.slots[0].generation = GEN_MASK;
    t.release_slot(0);
    assert_eq!(t.slots[0].generation, 0);
    let wrapped = t.alloc(()).unwrap();
    assert_ne!(wrapped, first);
    assert_ne!(wrapped, second);
    assert_eq!(t.get(second), Err(MCAPI_ERR_REQUEST_INVALID));
}

#[test]
fn alloc_completed_reports_its_status_and_is_reclaimable() {
    let mut t = RequestTable::new(2);
    let h = t.alloc_completed("failed", MCAPI_ERR_PRIORITY, 0).unwrap();
    assert_eq!(t.find_ready(&[h]), Ok(Some(0)));
    assert_eq!(t.test(h), Ok(Some((MCAPI_ERR_PRIORITY, 0))));
    // Reported by test: reclaimed when the table is full.
    let a = t.alloc("a").unwrap();
    let b = t.alloc("b").unwrap();
    assert_eq!(t.test(h), INVALID);
    assert_ne!(a, b);
    // Waited on: released with its status.
    t.release(a).unwrap();
    let w = t.alloc_completed("w", MCAPI_ERR_MSG_SIZE, 0).unwrap();
    let done = t.take_completed(w).unwrap().unwrap();
    assert_eq!((done.status, done.payload), (MCAPI_ERR_MSG_SIZE, "w"));
    assert_eq!(t.len(), 1);
}

#[test]
fn alloc_completed_refuses_pending_and_a_full_table() {
    let mut t = RequestTable::new(1);
    assert_eq!(
        t.alloc_completed((), MCAPI_PENDING, 0),
        Err(MCAPI_ERR_PARAMETER)
    );
    assert!(t.is_empty());
    let _pending = t.alloc(()).unwrap();
    assert_eq!(
        t.alloc_completed((), MCAPI_ERR_PRIORITY, 0),
        Err(MCAPI_ERR_REQUEST_LIMIT)
    );
}

#[test]
fn begin_wait_or_take_takes_what_is_done_and_registers_on_the_rest() {
    let mut t = RequestTable::new(4);
    // Complete from the start (an injected packet): taken at once, released.
    let done = t.alloc_completed("injected", MCAPI_SUCCESS, 8).unwrap();
    let c = t.begin_wait_or_take(done).unwrap().unwrap();
    assert_eq!(
        (c.status, c.size, c.payload),
        (MCAPI_SUCCESS, 8, "injected")
    );
    assert_eq!(t.begin_wait_or_take(done), Err(MCAPI_ERR_REQUEST_INVALID));
    // Pending: the caller becomes its waiter, and a second one is refused.
    let h = t.alloc("pending").unwrap();
    assert_eq!(t.begin_wait_or_take(h), Ok(None));
    assert_eq!(t.begin_wait_or_take(h), Err(MCAPI_ERR_WAIT_PENDING));
    t.complete(h, MCAPI_SUCCESS, 4).unwrap();
    // Even complete, it is that waiter's to take.
    assert_eq!(t.begin_wait_or_take(h), Err(MCAPI_ERR_WAIT_PENDING));
    assert_eq!(t.take_completed(h).unwrap().unwrap().size, 4);
    // Cancelled: the tombstone is consumed.
    let k = t.alloc("cancelled").unwrap();
    t.cancel(k).unwrap();
    assert_eq!(t.begin_wait_or_take(k), Err(MCAPI_ERR_REQUEST_CANCELLED));
    assert_eq!(t.begin_wait_or_take(k), Err(MCAPI_ERR_REQUEST_INVALID));
    assert!(t.is_empty());
}
