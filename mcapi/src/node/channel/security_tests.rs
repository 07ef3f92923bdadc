//! What a stranger on the fabric (anyone who can send to a channel side's endpoint or the
//! scalar hub) must not be able to do to a channel (found by review; each failed before its
//! fix).

use crate::node::test_pair::{open_channel, sender_and_receiver};
use crate::{ChannelHandle, Node};
use std::time::Duration;

/// A peer (or anyone reaching the hub's address) sends 2,000 scalars in sequence without
/// credits to a receive side of N = 8: all of them were queued (memory grew with what the
/// sender sent, not with NUM_RECV_BUFFERS). Now at most 2N are kept, and the receiver
/// learns of the gap (`MCAPI_ERR_GENERAL`, the scalar calls' code for a failure, once the
/// kept ones are taken).
#[test]
fn scalars_without_credits_do_not_grow_a_receive_side_beyond_its_buffers() {
    let (a, b, tx, rx, to) = sender_and_receiver("tcp", "rv-hub", (81, 82), Some(8));
    b.set_endpoint_timeout(rx, Some(Duration::from_secs(10)))
        .unwrap();
    let (hs, hr) = open_channel((&a, &b), (tx, rx, to), true);
    a.sclchan_send(hs, 1, 8).unwrap();
    assert_eq!(b.sclchan_recv(hr, 8), Ok(1));
    // The forgery: straight to the receive side's route, numbered in sequence.
    let (slot, ..) = hs.decode().unwrap();
    const FORGED: u32 = 2000;
    let mut sent = 0u32;
    while sent < FORGED {
        let g = a.inner.channels.sides[slot].lock();
        let io = g.as_ref().unwrap().io.as_ref().unwrap();
        let h = io.hub.as_ref().unwrap();
        match h
            .hub
            .send_value(&7u64.to_le_bytes(), 1 + sent, io.dest, h.peer_route)
        {
            Ok(()) => sent += 1,
            Err(e) if e.is_again() => {
                drop(g);
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("{e}"),
        }
    }
    let mut queued = 0;
    for _ in 0..500 {
        queued = b.sclchan_available(hr).unwrap();
        if queued >= FORGED as usize {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut taken = 0;
    let end = loop {
        match b.sclchan_recv(hr, 8) {
            Ok(_) => taken += 1,
            Err(e) => break e,
        }
    };
    a.finalize().unwrap();
    b.finalize().unwrap();
    assert_eq!(end, crate::Status::MCAPI_ERR_GENERAL, "after {taken}");
    assert!(
        queued <= 16 && taken <= 16,
        "{queued} scalars queued ({taken} taken) at a receive side of 8 buffers"
    );
}

/// Anyone who can send to a packet send side's endpoint sends it a few messages longer
/// than a credit slot (8 bytes): each ends in a truncation error for one credit receive,
/// which is never posted again. With all of them gone the sender never hears a credit
/// return: the channel stops after the receiver's first N packets.
#[test]
fn oversized_messages_to_a_send_side_do_not_use_up_its_credit_receives() {
    for provider in ["tcp", "shm"] {
        let (a, b, tx, rx, to) =
            sender_and_receiver(provider, "rv-credit-slots", (91, 92), Some(8));
        a.set_endpoint_timeout(tx, Some(Duration::from_secs(3)))
            .unwrap();
        b.set_endpoint_timeout(rx, Some(Duration::from_secs(3)))
            .unwrap();
        let (hs, hr) = open_channel((&a, &b), (tx, rx, to), false);
        // The forgery, from the receive side's endpoint (any endpoint would do).
        let (slot, ..) = hr.decode().unwrap();
        let mut forged = 0;
        let start = std::time::Instant::now();
        while forged < 16 && start.elapsed() < Duration::from_secs(5) {
            let g = b.inner.channels.sides[slot].lock();
            let io = g.as_ref().unwrap().io.as_ref().unwrap();
            if io.ep.as_ref().unwrap().inject(&[0u8; 16], io.dest).is_ok() {
                forged += 1;
            } else {
                drop(g);
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        std::thread::sleep(Duration::from_millis(100));
        let reader = {
            let b = b.clone();
            std::thread::spawn(move || {
                let mut n = 0;
                while let Ok(p) = b.pktchan_recv(hr) {
                    _ = b.pktchan_release(p);
                    n += 1;
                }
                n
            })
        };
        let mut sent = 0;
        let outcome = loop {
            if sent == 40 {
                break Ok(());
            }
            match a.pktchan_send(hs, b"packet") {
                Ok(()) => sent += 1,
                Err(e) => break Err(e),
            }
        };
        a.finalize().unwrap();
        let _ = reader.join();
        b.finalize().unwrap();
        assert_eq!(
            outcome,
            Ok(()),
            "{provider}: after {forged} forged messages the sender stalled at packet {sent}"
        );
    }
}

/// A forged credit return to a scalar send side (the hub routes it by route number)
/// refills the sender's credits while the receiver still holds its scalars: the sender
/// then has twice its credits in flight. That much is kept, and nothing is lost.
#[test]
fn one_forged_credit_return_loses_no_scalar() {
    let (a, b, tx, rx, to) = sender_and_receiver("tcp", "sec-hub-credit", (96, 97), Some(8));
    a.set_endpoint_timeout(tx, Some(Duration::from_secs(10)))
        .unwrap();
    b.set_endpoint_timeout(rx, Some(Duration::from_secs(10)))
        .unwrap();
    let (hs, hr) = open_channel((&a, &b), (tx, rx, to), true);
    for v in 0..8u64 {
        a.sclchan_send(hs, v, 8).unwrap();
    }
    // The forgery, from the receiver's side of the hub to the sender's route.
    let (slot, ..) = hr.decode().unwrap();
    loop {
        let g = b.inner.channels.sides[slot].lock();
        let io = g.as_ref().unwrap().io.as_ref().unwrap();
        let h = io.hub.as_ref().unwrap();
        match h.hub.send_credits(8, io.dest, h.peer_route) {
            Ok(()) => break,
            Err(e) if e.is_again() => {
                drop(g);
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("{e}"),
        }
    }
    let sender = {
        let a = a.clone();
        std::thread::spawn(move || (8..24u64).try_for_each(|v| a.sclchan_send(hs, v, 8)))
    };
    std::thread::sleep(Duration::from_millis(200));
    let got: Vec<u64> = (0..24).map_while(|_| b.sclchan_recv(hr, 8).ok()).collect();
    assert_eq!(sender.join().unwrap(), Ok(()));
    a.finalize().unwrap();
    b.finalize().unwrap();
    assert_eq!(got, (0..24).collect::<Vec<u64>>());
}

/// Anyone reaching the hub sends small packets without credits, numbered in sequence, to a
/// packet receive side's route: each kept one takes one of the side's hub slots (one per
/// credit), the rest are dropped, and once the kept ones are taken the receiver learns of
/// the gap (`MCAPI_ERR_TRANSMISSION`) instead of waiting for them.
#[test]
fn small_packets_without_credits_through_the_hub_take_no_more_than_the_credits() {
    use super::data::SideData;
    let (a, b, tx, rx, to) = sender_and_receiver("tcp", "rv-hub-pkt", (86, 87), Some(8));
    b.set_endpoint_timeout(rx, Some(Duration::from_secs(10)))
        .unwrap();
    let (hs, hr) = open_channel((&a, &b), (tx, rx, to), false);
    a.pktchan_send(hs, b"first").unwrap();
    let first = b.pktchan_recv(hr).unwrap();
    assert_eq!(first.to_vec(), b"first");
    b.pktchan_release(first).unwrap();
    // The forgery: through the sender's hub to the receive side's route, in sequence.
    let (slot, ..) = hs.decode().unwrap();
    const FORGED: u32 = 200;
    let mut sent = 0u32;
    while sent < FORGED {
        let g = a.inner.channels.sides[slot].lock();
        let io = g.as_ref().unwrap().io.as_ref().unwrap();
        let SideData::Send(s) = &io.data else {
            panic!("not a send side")
        };
        let lane = s
            .hub_lane
            .as_ref()
            .expect("small packets go through the hub");
        match lane
            .hub
            .send_value(b"forged", 1 + sent, lane.dest, lane.route)
        {
            Ok(()) => sent += 1,
            Err(e) if e.is_again() => {
                drop(g);
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("{e}"),
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let mut held = Vec::new();
    let end = loop {
        match b.pktchan_recv(hr) {
            Ok(p) => held.push(p),
            Err(e) => break e,
        }
    };
    let taken = held.len();
    for p in held {
        b.pktchan_release(p).unwrap();
    }
    a.finalize().unwrap();
    b.finalize().unwrap();
    assert_eq!(end, crate::Status::MCAPI_ERR_TRANSMISSION, "after {taken}");
    assert!(
        taken <= 8,
        "{taken} packets kept at a receive side of 8 buffers"
    );
}

/// Anyone who can send to a packet receive side's endpoint sends it messages too long for
/// its buffers, one per buffer. On tcp;ofi_rxm each ends a multi-receive buffer without
/// releasing it (the provider may still write a message it matched there earlier, so it
/// is never posted again): the side was left with no buffer, and the channel's packets
/// waited for good. Spare buffers take the lost ones' places (one per buffer: security.md).
/// On sockets and udp (plain receives there: udp;ofi_rxd wrote such a message on past a
/// multi-receive buffer's end, sockets went on matching messages into a buffer it had
/// released) each such message ends one receive, which is posted again; there as many
/// again come with the sender's first packets while the side cannot post its receives
/// again, and the packets must still arrive.
#[test]
fn messages_too_long_for_a_receive_sides_buffers_do_not_take_its_pool() {
    for provider in ["tcp", "sockets", "udp"] {
        let offered = mcapi_ofi::Info::first(&mcapi_ofi::Hints::new().provider(provider));
        if offered.is_ok() {
            too_long_messages_then_packets(provider);
        }
    }
}

fn too_long_messages_then_packets(provider: &str) {
    use mcapi_ofi::Completion;
    const BUFFERS: usize = 4;
    let (a, b, hs, hr, lone) = Stranger::at_channel(provider, "sec-long", (164, 165), BUFFERS);
    let Stranger {
        ep: stranger,
        cq,
        dest,
        long,
        slot,
        plain,
        ..
    } = &lone;
    let (dest, slot, plain) = (*dest, *slot, *plain);
    // Sends `n` of them, and waits for their completions (`settle`).
    let send_long = |n: usize, settle: bool| {
        let mut completions = [Completion::default(); 8];
        for _ in 0..n {
            let start = std::time::Instant::now();
            while let Err(e) = stranger.send(long.all(), None, dest, 7) {
                assert!(
                    e.is_again() && start.elapsed() < Duration::from_secs(5),
                    "{e}"
                );
                _ = cq.read(&mut completions);
            }
        }
        let start = std::time::Instant::now();
        let mut done = 0;
        while settle && done < n && start.elapsed() < Duration::from_secs(5) {
            match cq.read(&mut completions) {
                Ok(n) => done += n,
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    };
    // The channel's packets, above the hub's size so they take the side's own buffers.
    let packet: Vec<u8> = (0..20_000u32).map(|i| i as u8).collect();
    let (end, (got, sent)) = std::thread::scope(|scope| {
        // The rest of the stranger's messages and the sender's first packets (it has
        // credits for them) come while the side can post no receive: they wait in the
        // provider until the side posts one.
        // - Plain receives: one message per buffer before, as many again then; sockets
        //   left the packets' data flag out, and they were dropped.
        // - Multi-receive buffers: twice as many as the side has, all then (the stranger
        //   progresses its own sends: ofi_rxm moves them only while it reads its CQ). Each
        //   spare the side posts, tcp;ofi_rxm reports released at once while it still
        //   writes a waiting message into it; posted again then, the buffer took the next
        //   packet where the last was still being written.
        let side = if plain {
            send_long(BUFFERS, true);
            let side = b.inner.channels.sides[slot].lock();
            send_long(BUFFERS, false);
            side
        } else {
            // The stranger's connection first (ofi_rxm makes it only while the receiver
            // progresses): else its messages came after every packet.
            let mut completions = [Completion::default(); 8];
            while let Err(e) = stranger.send(long.slice(0, 8).unwrap(), None, dest, 7) {
                assert!(e.is_again(), "{e}");
                _ = cq.read(&mut completions);
            }
            let start = std::time::Instant::now();
            while start.elapsed() < Duration::from_millis(300) {
                _ = cq.read(&mut completions);
                _ = b.pktchan_available(hr);
                std::thread::sleep(Duration::from_millis(1));
            }
            let side = b.inner.channels.sides[slot].lock();
            scope.spawn(|| send_long(2 * BUFFERS, true));
            side
        };
        std::thread::sleep(Duration::from_millis(100));
        let sender = scope.spawn(|| (0..3 * BUFFERS).try_for_each(|_| a.pktchan_send(hs, &packet)));
        std::thread::sleep(Duration::from_millis(200));
        drop(side);
        let mut got = 0;
        let end = loop {
            if got == 3 * BUFFERS {
                break Ok(());
            }
            match b.pktchan_recv(hr) {
                Ok(p) => {
                    assert!(p.to_vec() == packet, "{provider}: packet {got} corrupted");
                    b.pktchan_release(p).unwrap();
                    got += 1;
                }
                Err(e) => break Err(e),
            }
        };
        (end, (got, sender.join().unwrap()))
    });
    drop(lone);
    a.finalize().unwrap();
    b.finalize().unwrap();
    assert_eq!(
        end,
        Ok(()),
        "{provider}: after {got} packets (the sender: {sent:?})"
    );
}

/// tcp;ofi_rxm, given a multi-receive buffer while a message waits for one, carves the
/// message out of it and reports the buffer released at once, while it still reads the
/// message's data from its sender. A packet side posted the buffer again at that release:
/// the next packet landed in it, and the stranger's data, once read, overwrote the packet
/// the application held. Now the release waits for the message.
#[test]
fn a_buffer_is_not_posted_again_while_a_strangers_message_is_written_into_it() {
    use mcapi_ofi::Completion;
    const BUFFERS: usize = 4;
    if mcapi_ofi::Info::first(&mcapi_ofi::Hints::new().provider("tcp")).is_err() {
        eprintln!("skipping: tcp not offered here");
        return;
    }
    let (a, b, hs, hr, lone) = Stranger::at_channel("tcp", "sec-early", (303, 304), BUFFERS);
    let Stranger {
        ep: stranger,
        cq,
        dest,
        long,
        ..
    } = &lone;
    let dest = *dest;
    let mut completions = [Completion::default(); 8];
    // The stranger's connection first (rxm makes it only while both ends progress).
    let progress = |stranger: bool, for_ms: u64| {
        let mut completions = [Completion::default(); 8];
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_millis(for_ms) {
            if stranger {
                _ = cq.read(&mut completions);
            }
            _ = b.pktchan_available(hr);
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    while let Err(e) = stranger.send(long.slice(0, 8).unwrap(), None, dest, 7) {
        assert!(e.is_again(), "{e}");
        _ = cq.read(&mut completions);
    }
    progress(true, 300);
    // Four packets take the four buffers (less than a packet is left in each after one),
    // and the application holds them: no buffer is posted.
    let packet = |i: u8| vec![i; 20_000];
    for i in 0..BUFFERS as u8 {
        a.pktchan_send(hs, &packet(i)).unwrap();
    }
    let mut held: Vec<_> = (0..BUFFERS).map(|_| b.pktchan_recv(hr).unwrap()).collect();
    // The stranger's message waits at the side; its data is read from the stranger, which
    // does not progress for now.
    while let Err(e) = stranger.send(long.all(), None, dest, 7) {
        assert!(e.is_again(), "{e}");
        std::thread::sleep(Duration::from_millis(1));
    }
    progress(false, 200);
    // The first packet released: its buffer is posted, and takes the stranger's message.
    b.pktchan_release(held.remove(0)).unwrap();
    progress(false, 200);
    let (end, early) = std::thread::scope(|scope| {
        let sender = scope.spawn(|| a.pktchan_send(hs, &packet(4)));
        // Before the stranger's data is read, the fifth packet has no buffer to go to.
        let start = std::time::Instant::now();
        let mut early = None;
        while early.is_none() && start.elapsed() < Duration::from_millis(300) {
            if b.pktchan_available(hr) == Ok(1) {
                early = Some(b.pktchan_recv(hr).unwrap());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let came_early = early.is_some();
        progress(true, 500);
        let fifth = match early {
            Some(p) => Ok(p),
            None => b.pktchan_recv(hr),
        };
        let intact = match &fifth {
            Ok(p) => Ok(p.to_vec() == packet(4)),
            Err(e) => Err(*e),
        };
        if let Ok(p) = fifth {
            b.pktchan_release(p).unwrap();
        }
        (
            (
                intact,
                sender.join().unwrap(),
                held.iter().map(|p| p.to_vec()).collect::<Vec<_>>(),
            ),
            came_early,
        )
    });
    for p in held {
        b.pktchan_release(p).unwrap();
    }
    drop(lone);
    a.finalize().unwrap();
    b.finalize().unwrap();
    let (intact, sent, held) = end;
    for (i, p) in held.iter().enumerate() {
        assert!(*p == packet(i as u8 + 1), "held packet {} changed", i + 1);
    }
    assert_eq!(sent, Ok(()));
    assert_eq!(
        intact,
        Ok(true),
        "the fifth packet (it came before the stranger's data was read: {early})"
    );
}

/// An endpoint of its own on `a`'s domain (no control connection, no job key) that sends
/// to the packet receive side of `hr` at `b`, with a region twice the side's buffer size.
struct Stranger {
    ep: mcapi_ofi::Endpoint,
    cq: mcapi_ofi::CompletionQueue,
    _av: mcapi_ofi::AddressVector,
    dest: mcapi_ofi::FiAddr,
    long: mcapi_ofi::MemoryRegion,
    /// The side's slot at `b`, and whether it posts plain receives.
    slot: usize,
    plain: bool,
}

impl Stranger {
    /// A packet channel from node `ids.0` to node `ids.1` over `provider` (receive side
    /// of `buffers` buffers, 10 s timeouts) and a stranger at its receive side.
    fn at_channel(
        provider: &str,
        job: &str,
        ids: (u32, u32),
        buffers: usize,
    ) -> (Node, Node, ChannelHandle, ChannelHandle, Stranger) {
        let (a, b, tx, rx, to) = sender_and_receiver(provider, job, ids, Some(buffers));
        a.set_endpoint_timeout(tx, Some(Duration::from_secs(10)))
            .unwrap();
        b.set_endpoint_timeout(rx, Some(Duration::from_secs(10)))
            .unwrap();
        let (hs, hr) = open_channel((&a, &b), (tx, rx, to), false);
        let stranger = Stranger::at_side(&a, &b, hr);
        (a, b, hs, hr, stranger)
    }

    fn at_side(a: &Node, b: &Node, hr: ChannelHandle) -> Stranger {
        use super::data::SideData;
        use crate::semantics::channel_side::Posting;
        use mcapi_ofi::{AddressVector, CompletionQueue, Endpoint, EndpointOptions};
        use mcapi_ofi::{MemoryRegion, WaitObject};
        let (slot, ..) = hr.decode().unwrap();
        let (side_addr, buffer_size, plain) = {
            let g = b.inner.channels.sides[slot].lock();
            let io = g.as_ref().unwrap().io.as_ref().unwrap();
            let SideData::Recv(r) = &io.data else {
                panic!("not a receive side")
            };
            (
                io.ep.as_ref().unwrap().address().to_vec(),
                r.state.buffer_size(),
                r.state.posting() == Posting::Plain,
            )
        };
        let domain = &a.inner.fab.domain;
        let cq = CompletionQueue::open(domain, 0, WaitObject::None).unwrap();
        let av = AddressVector::open(domain, 4).unwrap();
        let ep = Endpoint::open(domain, &cq, &av, EndpointOptions::default()).unwrap();
        let dest = av.insert(&side_addr).unwrap();
        let long = MemoryRegion::new(domain, 2 * buffer_size).unwrap();
        Stranger {
            ep,
            cq,
            _av: av,
            dest,
            long,
            slot,
            plain,
        }
    }
}
