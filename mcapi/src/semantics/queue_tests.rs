//! Unit tests of the receive queues and the reorder buffer.

use super::super::XorShift;
use super::*;

fn drain<T>(q: &mut PriorityQueues<T>) -> Vec<(usize, T)> {
    std::iter::from_fn(|| q.pop_with_priority()).collect()
}

#[test]
fn priority_then_fifo_order() {
    let mut q = PriorityQueues::new(4, 16);
    // (priority, item) in push order.
    let pushes = [
        (2, 'a'),
        (0, 'b'),
        (3, 'c'),
        (2, 'd'),
        (0, 'e'),
        (1, 'f'),
        (3, 'g'),
    ];
    for (p, x) in pushes {
        q.push(p, x).unwrap();
    }
    assert_eq!(q.len(), 7);
    assert_eq!(q.len_at(2), 2);
    let seen: String = q.iter().collect();
    assert_eq!(seen, "befadcg", "iter visits in pop order");
    let want = [
        (0, 'b'),
        (0, 'e'),
        (1, 'f'),
        (2, 'a'),
        (2, 'd'),
        (3, 'c'),
        (3, 'g'),
    ];
    assert_eq!(drain(&mut q), want);
    assert!(q.is_empty());
    assert_eq!(q.pop(), None);
    assert_eq!(q.peek(), None);
    assert_eq!(q.head_priority(), None);
}

#[test]
fn higher_priority_arriving_later_overtakes() {
    let mut q = PriorityQueues::new(2, 4);
    q.push(1, "low1").unwrap();
    assert_eq!(q.pop(), Some("low1"));
    q.push(1, "low2").unwrap();
    q.push(0, "high").unwrap();
    assert_eq!(q.head_priority(), Some(0));
    assert_eq!(q.pop(), Some("high"));
    q.push(1, "low3").unwrap();
    assert_eq!(drain(&mut q), [(1, "low2"), (1, "low3")]);
}

#[test]
fn bounded_total_capacity() {
    let mut q = PriorityQueues::new(3, 3);
    q.push(2, 1).unwrap();
    q.push(2, 2).unwrap();
    q.push(0, 3).unwrap();
    assert!(q.is_full());
    assert_eq!(q.free(), 0);
    let err = q.push(1, 4).unwrap_err();
    assert_eq!(err.status(), Status::MCAPI_ERR_MEM_LIMIT);
    assert_eq!(err, PushError::Full(4));
    assert_eq!(q.pop(), Some(3));
    assert_eq!(q.free(), 1);
    q.push(1, 4).unwrap();
    assert_eq!(drain(&mut q), [(1, 4), (2, 1), (2, 2)]);
}

#[test]
fn bad_priority_is_refused_even_when_full() {
    let mut q = PriorityQueues::new(2, 1);
    q.push(0, 'x').unwrap();
    let err = q.push(2, 'y').unwrap_err();
    assert_eq!(err.status(), Status::MCAPI_ERR_PRIORITY);
    assert_eq!(err.into_inner(), 'y');
    assert_eq!(q.len_at(9), 0);
}

#[test]
fn zero_capacity_queue() {
    let mut q = PriorityQueues::new(1, 0);
    assert!(q.is_full() && q.is_empty());
    assert_eq!(q.push(0, ()), Err(PushError::Full(())));
}

#[test]
fn truncation_peek_leaves_message_queued() {
    // Messages as (size, tag); the application offers an 8-byte buffer.
    let mut q = PriorityQueues::new(2, 4);
    q.push(1, (4, "small")).unwrap();
    q.push(0, (100, "big")).unwrap();
    let buffer_size = 8;
    let &(size, tag) = q.peek().unwrap();
    assert!(size > buffer_size, "driver reports MCAPI_ERR_MSG_TRUNCATED");
    assert_eq!(tag, "big");
    assert_eq!(q.len(), 2, "peek does not consume");
    // A larger buffer then receives it.
    assert_eq!(q.pop(), Some((100, "big")));
    q.peek_mut().unwrap().0 = 5;
    assert_eq!(q.pop(), Some((5, "small")));
}

#[test]
fn clear_discards_everything() {
    let mut q = PriorityQueues::new(3, 5);
    for i in 0..5 {
        q.push(i % 3, i).unwrap();
    }
    q.clear();
    assert!(q.is_empty());
    assert_eq!(q.free(), 5);
    assert_eq!((0..3).map(|p| q.len_at(p)).sum::<usize>(), 0);
}

#[test]
fn matches_reference_model_without_growth() {
    // Random pushes/pops against a Vec-of-VecDeque model.
    let (levels, cap) = (5, 8);
    let mut q = PriorityQueues::new(levels, cap);
    let mut model = vec![std::collections::VecDeque::new(); levels];
    let caps = (
        q.items.capacity(),
        q.free_slots.capacity(),
        q.next.capacity(),
    );
    let mut rng = XorShift(12345);
    for n in 0..20_000u32 {
        if rng.next_u64() % 3 < 2 {
            let p = rng.next_u64() as usize % levels;
            let total: usize = model.iter().map(|l| l.len()).sum();
            match q.push(p, n) {
                Ok(()) => model[p].push_back(n),
                Err(e) => assert_eq!((e, total), (PushError::Full(n), cap)),
            }
        } else {
            let want = model
                .iter_mut()
                .enumerate()
                .find_map(|(p, l)| Some((p, l.pop_front()?)));
            assert_eq!(q.pop_with_priority(), want);
        }
        assert_eq!(q.len(), model.iter().map(|l| l.len()).sum::<usize>());
    }
    assert_eq!(
        (
            q.items.capacity(),
            q.free_slots.capacity(),
            q.next.capacity()
        ),
        caps
    );
}

fn collect(r: Result<Ready<'_, u32>, Rejected<u32>>) -> Result<Vec<u32>, Rejected<u32>> {
    r.map(Iterator::collect)
}

#[test]
fn reorder_table() {
    // Steps of (key, seq) on a window of 4; items are seq * 10.
    #[allow(clippy::type_complexity)]
    let steps: &[((u8, u8), u32, Result<Vec<u32>, Rejected<u32>>)] = &[
        ((1, 0), 0, Ok(vec![0])),
        ((1, 0), 2, Ok(vec![])),
        ((1, 0), 3, Ok(vec![])),
        ((1, 0), 3, Err(Rejected::Duplicate(30))), // already buffered
        ((1, 0), 5, Err(Rejected::BeyondWindow(50))), // 1 + 4
        ((2, 0), 0, Ok(vec![0])),                  // other sender: own stream
        ((1, 1), 0, Ok(vec![0])),                  // other priority: own stream
        ((1, 0), 1, Ok(vec![10, 20, 30])),
        ((1, 0), 0, Err(Rejected::Duplicate(0))), // already delivered
        ((1, 0), 2, Err(Rejected::Duplicate(20))),
        ((1, 0), 7, Ok(vec![])), // 4 + 3, inside the moved window
        ((1, 0), 4, Ok(vec![40])),
        ((3, 0), 0, Err(Rejected::TooManyKeys(0))),
    ];
    let mut r = SeqReorder::new(3, 4);
    for (i, (key, seq, want)) in steps.iter().enumerate() {
        let got = collect(r.accept(*key, *seq, seq * 10));
        assert_eq!(&got, want, "step {i}: key {key:?} seq {seq}");
    }
    assert_eq!(r.expected(&(1, 0)), Some(5));
    assert_eq!(r.buffered(&(1, 0)), 1);
    assert_eq!(r.keys(), 3);
}

#[test]
fn reorder_random_permutations_deliver_exactly_once_in_order() {
    let window = 16u32;
    let mut r = SeqReorder::new(1, window);
    let mut rng = XorShift(99);
    let mut delivered = Vec::new();
    // Send 0..N in blocks of `window`, each shuffled and with duplicates.
    let n = 4096u32;
    for block in (0..n).step_by(window as usize) {
        let mut seqs: Vec<u32> = (block..block + window).collect();
        for i in (1..seqs.len()).rev() {
            seqs.swap(i, rng.next_u64() as usize % (i + 1));
        }
        let dups: Vec<u32> = seqs.iter().step_by(3).copied().collect();
        seqs.extend(dups);
        for s in seqs {
            match r.accept('k', s, s) {
                Ok(ready) => delivered.extend(ready),
                Err(Rejected::Duplicate(x)) => assert_eq!(x, s),
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
    }
    assert_eq!(delivered, (0..n).collect::<Vec<_>>());
    assert_eq!(r.buffered(&'k'), 0);
}

#[test]
fn reorder_wraps_around_u32() {
    let mut r = SeqReorder::new(1, 4);
    // Walking 2^32 messages is too slow: start the stream, then move its
    // expected number to just before the wrap through the private state.
    let start = u32::MAX - 1;
    r.accept((), 0, 0).unwrap().for_each(drop);
    let s = r.index[&()] as usize;
    r.streams[s].next = start;
    assert_eq!(collect(r.accept((), 0, 2)), Ok(vec![])); // after the wrap
    assert_eq!(collect(r.accept((), u32::MAX, 1)), Ok(vec![]));
    assert_eq!(collect(r.accept((), start, 0)), Ok(vec![0, 1, 2]));
    assert_eq!(r.expected(&()), Some(1));
    assert_eq!(
        collect(r.accept((), u32::MAX, 9)),
        Err(Rejected::Duplicate(9))
    );
}

#[test]
fn dropped_ready_iterator_keeps_items() {
    let mut r = SeqReorder::new(2, 8);
    for s in 1..4 {
        assert_eq!(r.accept("a", s, s).unwrap().count(), 0);
    }
    // Take only the first deliverable item, then let the iterator go.
    assert_eq!(r.accept("a", 0, 0).unwrap().next(), Some(0));
    assert_eq!(r.buffered(&"a"), 3);
    assert_eq!(r.ready(&"a").collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(r.ready(&"unknown").count(), 0);
}

#[test]
fn an_in_order_item_not_taken_stays_buffered() {
    let mut r = SeqReorder::new(1, 3);
    // Straight through, around the slots (3 rounds up to 4) more than once.
    for s in 0..10u32 {
        assert_eq!(r.accept("a", s, s).unwrap().collect::<Vec<_>>(), [s]);
    }
    drop(r.accept("a", 10, 10).unwrap());
    assert_eq!((r.buffered(&"a"), r.expected(&"a")), (1, Some(10)));
    assert!(matches!(
        r.accept("a", 10, 99),
        Err(Rejected::Duplicate(99))
    ));
    assert_eq!(r.accept("a", 11, 11).unwrap().collect::<Vec<_>>(), [10, 11]);
    assert_eq!(r.expected(&"a"), Some(12));
}

#[test]
fn remove_resets_a_key() {
    let mut r = SeqReorder::new(1, 4);
    r.accept(7, 0, 0).unwrap().for_each(drop);
    r.accept(7, 3, 3).unwrap().for_each(drop);
    r.accept(7, 2, 2).unwrap().for_each(drop);
    let mut left = Vec::new();
    assert_eq!(r.remove(&7, |x| left.push(x)), 2);
    assert_eq!(left, [2, 3]);
    assert_eq!(r.remove(&7, |_| panic!("nothing left")), 0);
    assert_eq!(r.expected(&7), None);
    // The slot is reused by a new key, starting again at 0 with no leftovers.
    r.accept(8, 1, 1).unwrap().for_each(drop);
    assert_eq!(r.accept(8, 0, 0).unwrap().collect::<Vec<_>>(), [0, 1]);
    assert_eq!(Rejected::TooManyKeys(5).into_inner(), 5);
}

#[test]
fn reorder_key_churn_does_not_grow() {
    let mut r = SeqReorder::new(4, 2);
    let caps = (
        r.index.capacity(),
        r.buf.capacity(),
        r.free_streams.capacity(),
    );
    for k in 0..10_000u32 {
        r.accept(k, 0, k).unwrap().for_each(drop);
        if k >= 3 {
            assert_eq!(r.remove(&(k - 3), drop), 0);
        }
    }
    assert_eq!(
        (
            r.index.capacity(),
            r.buf.capacity(),
            r.free_streams.capacity()
        ),
        caps
    );
}

#[test]
fn the_last_key_shortcut_follows_removal_and_interleaving() {
    let mut r = SeqReorder::new(2, 4);
    // Interleaved keys each keep their own numbering.
    for s in 0..3u32 {
        assert_eq!(
            r.accept(1, s, 10 + s).unwrap().collect::<Vec<_>>(),
            [10 + s]
        );
        assert_eq!(
            r.accept(2, s, 20 + s).unwrap().collect::<Vec<_>>(),
            [20 + s]
        );
    }
    // Key 2 was accepted last; removed, it starts again at 0 in a fresh stream (which may
    // be the same slot), and key 1 is unaffected.
    assert_eq!(r.remove(&2, drop), 0);
    assert_eq!(r.expected(&2), None);
    assert_eq!(r.accept(2, 0, 30).unwrap().collect::<Vec<_>>(), [30]);
    assert_eq!(r.expected(&1), Some(3));
    assert_eq!(r.expected(&2), Some(1));
    // Key 1 goes through the map again and continues where it was.
    assert_eq!(r.accept(1, 3, 13).unwrap().collect::<Vec<_>>(), [13]);
}

#[test]
fn pass_in_order_takes_only_the_next_item_of_the_last_key_with_nothing_buffered() {
    let mut r = SeqReorder::new(2, 4);
    // No key accepted yet: nothing passes, and accept starts the stream.
    assert!(!r.pass_in_order(1, 0));
    assert_eq!(r.accept(1, 0, 10).unwrap().collect::<Vec<_>>(), [10]);
    // The next of the last key passes and counts as delivered; others do not.
    assert!(r.pass_in_order(1, 1));
    assert_eq!(r.expected(&1), Some(2));
    assert!(!r.pass_in_order(1, 3));
    assert!(!r.pass_in_order(2, 0));
    assert_eq!(r.expected(&1), Some(2));
    // With an item buffered ahead, even the next one goes through accept, which releases
    // both in order.
    assert_eq!(r.accept(1, 3, 13).unwrap().count(), 0);
    assert!(!r.pass_in_order(1, 2));
    assert_eq!(r.accept(1, 2, 12).unwrap().collect::<Vec<_>>(), [12, 13]);
    // The wrap of the slot ring and of the passed-through items stays consistent.
    for s in 4..20u32 {
        assert!(r.pass_in_order(1, s));
    }
    assert_eq!(r.accept(1, 21, 21).unwrap().count(), 0);
    assert_eq!(r.accept(1, 20, 20).unwrap().collect::<Vec<_>>(), [20, 21]);
    // Another key's accept makes it the last one.
    assert_eq!(r.accept(2, 0, 30).unwrap().collect::<Vec<_>>(), [30]);
    assert!(!r.pass_in_order(1, 22));
    assert!(r.pass_in_order(2, 1));
}

/// Slots are made per stream as keys first take them (an endpoint pays for the senders it
/// has, not for `max_keys`), and a stream freed keeps its slots for the next key.
#[test]
fn reorder_slots_are_made_per_stream_taken() {
    let mut r: SeqReorder<u16, u32> = SeqReorder::new(256, 64);
    let slots = |r: &SeqReorder<u16, u32>| r.buf.iter().map(|b| b.len()).sum::<usize>();
    assert_eq!(slots(&r), 0);
    assert_eq!(r.accept(7, 0, 70).unwrap().collect::<Vec<_>>(), [70]);
    assert_eq!(slots(&r), 64);
    assert_eq!(r.accept(8, 1, 81).unwrap().count(), 0, "buffered");
    assert_eq!(slots(&r), 128);
    assert_eq!(r.remove(&8, |_| {}), 1);
    assert_eq!(r.accept(9, 0, 90).unwrap().collect::<Vec<_>>(), [90]);
    assert_eq!(slots(&r), 128, "the freed stream's slots are reused");
}
