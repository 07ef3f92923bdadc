//! The channel hot path allocates nothing (no allocation per packet or scalar),
//! and neither does the message path:
//! a global allocator counts the allocations made by a sending and a receiving thread while
//! they stream packets (injected, zero copy from the caller's buffer, blocking and
//! `pktchan_send_i`, received blocking and by `pktchan_recv_i`) and scalars of every width
//! through channels over real providers, after a warm-up that lets every queue reach its
//! working size. Blocked calls that spin, yield or sleep on the CQs are counted too. The
//! nodes' background and control threads are not: they are off the application's path.

use mcapi::config::Config;
use mcapi::{ChannelHandle, Node, SendBuffer};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Mutex;
use std::time::Duration;

struct CountingAllocator;

thread_local! {
    /// Whether this thread's allocations are counted, and how many there were.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn note_allocation() {
    // `try_with`: a thread being torn down has no locals left; it is not counted anyway.
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        }
    });
}

// SAFETY: every call is passed on unchanged to the system allocator; counting touches
// only const-initialized thread locals, which never allocate.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: the caller's contract for `realloc`, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Allocations made by this thread while `f` runs.
fn allocations_during(f: impl FnOnce()) -> u64 {
    ALLOCATIONS.with(|n| n.set(0));
    COUNTING.with(|on| on.set(true));
    f();
    COUNTING.with(|on| on.set(false));
    ALLOCATIONS.with(|n| n.get())
}

static FABRIC: Mutex<()> = Mutex::new(());
const WAIT: Option<Duration> = Some(Duration::from_secs(20));
const LARGE: usize = 64 << 10;

fn config(provider: &str) -> Config {
    let mut c = Config::defaults();
    c.provider = Some(provider.into());
    c.job = format!("hotpath-{}", std::process::id());
    c.recv_buffers = 16;
    c
}

fn providers() -> Vec<&'static str> {
    let mut v = vec!["shm", "tcp", "sockets"];
    v.retain(|p| mcapi_ofi::Info::first(&mcapi_ofi::Hints::new().provider(*p)).is_ok());
    v
}

/// Connects port 10 of `a` to port 20 of `b` (packets) and port 11 to port 21 (scalars),
/// and opens all four sides: (packet send, packet receive, scalar send, scalar receive).
fn channels(a: &Node, b: &Node) -> [ChannelHandle; 4] {
    let mut handles = Vec::new();
    for (tx_port, rx_port, scalar) in [(10, 20, false), (11, 21, true)] {
        let tx = a.endpoint_create(tx_port).unwrap();
        let rx = b.endpoint_create(rx_port).unwrap();
        let connect = if scalar {
            a.sclchan_connect_i(tx, rx)
        } else {
            a.pktchan_connect_i(tx, rx)
        };
        a.wait(connect.unwrap(), None, WAIT).unwrap();
        let (hs, qs) = if scalar {
            a.sclchan_send_open_i(tx)
        } else {
            a.pktchan_send_open_i(tx)
        }
        .unwrap();
        let (hr, qr) = if scalar {
            b.sclchan_recv_open_i(rx)
        } else {
            b.pktchan_recv_open_i(rx)
        }
        .unwrap();
        // One thread: each test moves the other open on.
        while a.test(qs, None).unwrap().is_none() | b.test(qr, None).unwrap().is_none() {}
        handles.extend([hs, hr]);
    }
    handles.try_into().unwrap()
}

/// Sender and receiver of the rounds, each on a thread of its own.
struct Ends {
    packet_tx: ChannelHandle,
    packet_rx: ChannelHandle,
    scalar_tx: ChannelHandle,
    scalar_rx: ChannelHandle,
}

const WIDTHS: [usize; 4] = [1, 2, 4, 8];

/// The sender's part of `rounds` rounds of everything the hot path does: a small blocking
/// packet (injected), a large one (zero copy, blocking), a copying `pktchan_send_i`, a
/// zero-copy `pktchan_send_i`, a one-byte packet for a `pktchan_recv_i`, a scalar of
/// each width.
fn send_rounds(a: &Node, e: &Ends, large: &'static [u8], rounds: u32) {
    for _ in 0..rounds {
        a.pktchan_send(e.packet_tx, &large[..8]).unwrap();
        a.pktchan_send(e.packet_tx, large).unwrap();
        let q = a.pktchan_send_i(e.packet_tx, &large[..100]).unwrap();
        a.wait(q, None, WAIT).unwrap();
        let q = a
            .pktchan_send_i_zero_copy(e.packet_tx, SendBuffer::from_static(large))
            .unwrap();
        a.wait(q, None, WAIT).unwrap();
        a.pktchan_send(e.packet_tx, &large[..1]).unwrap();
        for width in WIDTHS {
            a.sclchan_send(e.scalar_tx, 0x5A, width).unwrap();
        }
    }
}

/// The receiver's part: each packet checked (copied into `scratch`) and released, the
/// last one through `pktchan_recv_i`, then the scalars.
fn receive_rounds(b: &Node, e: &Ends, large: &[u8], scratch: &mut [u8], rounds: u32) {
    for _ in 0..rounds {
        for len in [8, large.len(), 100, large.len()] {
            let p = b.pktchan_recv(e.packet_rx).unwrap();
            assert_eq!(p.len(), len);
            p.copy_to(scratch);
            assert!(scratch[..len] == large[..len]);
            b.pktchan_release(p).unwrap();
        }
        let q = b.pktchan_recv_i(e.packet_rx).unwrap();
        assert_eq!(b.wait(q, None, WAIT).unwrap(), 1);
        b.pktchan_release(b.received_packet(q).unwrap()).unwrap();
        for width in WIDTHS {
            assert_eq!(b.sclchan_recv(e.scalar_rx, width).unwrap(), 0x5A);
        }
    }
}

/// parking_lot makes its global table and a thread's own data the first time a thread
/// parks (once per process and thread, not per message): this thread parks once now.
fn park_once() {
    let lock = parking_lot::Mutex::new(());
    let (held, wait_for_hold) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            let _g = lock.lock();
            held.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(50));
        });
        wait_for_hold.recv().unwrap();
        drop(lock.lock());
    });
}

/// Rounds before counting: request slots, FIFOs and maps reach their working size and the
/// credits go round the pools several times.
const WARM_ROUNDS: u32 = 200;
/// Rounds counted.
const COUNTED_ROUNDS: u32 = 2_000;

/// Runs `send(rounds)` on a thread of its own and `receive(scratch, rounds)` on this one,
/// first [`WARM_ROUNDS`], then [`COUNTED_ROUNDS`]: the allocations (sender's, receiver's)
/// in the counted ones.
fn allocations_in_rounds(
    send: impl Fn(u32) + Sync,
    receive: impl Fn(&mut [u8], u32),
) -> (u64, u64) {
    allocations_after_warming(WARM_ROUNDS, send, receive)
}

/// [`allocations_in_rounds`] after `warm` rounds.
fn allocations_after_warming(
    warm: u32,
    send: impl Fn(u32) + Sync,
    receive: impl Fn(&mut [u8], u32),
) -> (u64, u64) {
    std::thread::scope(|s| {
        let sender = s.spawn(|| {
            park_once();
            send(warm);
            allocations_during(|| send(COUNTED_ROUNDS))
        });
        park_once();
        let mut scratch = vec![0u8; LARGE];
        receive(&mut scratch, warm);
        let received = allocations_during(|| receive(&mut scratch, COUNTED_ROUNDS));
        (sender.join().unwrap(), received)
    })
}

#[test]
fn channel_sends_and_receives_allocate_nothing() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    let large: &'static [u8] = Box::leak((0..LARGE).map(|i| i as u8).collect());
    for prov in providers() {
        let cfg = config(prov);
        let a = Node::initialize(0, 60, cfg.clone()).unwrap();
        let b = Node::initialize(0, 61, cfg).unwrap();
        let [packet_tx, packet_rx, scalar_tx, scalar_rx] = channels(&a, &b);
        let ends = Ends {
            packet_tx,
            packet_rx,
            scalar_tx,
            scalar_rx,
        };
        let (sent, received) = allocations_in_rounds(
            |n| send_rounds(&a, &ends, large, n),
            |scratch, n| receive_rounds(&b, &ends, large, scratch, n),
        );
        assert_eq!(
            (sent, received),
            (0, 0),
            "{prov}: allocations (sender, receiver) in {COUNTED_ROUNDS} rounds of 5 packets and 4 scalars"
        );
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

/// The counter itself counts: an allocation on the counting thread is seen.
#[test]
fn the_counter_sees_an_allocation() {
    let n = allocations_during(|| {
        std::hint::black_box(vec![1u8; 10]);
    });
    assert!(n >= 1);
}

/// Messages too: blocking sends of small (injected) and large messages, `msg_send_i`, and
/// blocking and `msg_recv_i` receives, one sending and one receiving thread; the large
/// ones eager, then by rendezvous (a threshold of 16 KiB: staged, read ahead, copied out).
#[test]
fn message_sends_and_receives_allocate_nothing() {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    let large: Vec<u8> = (0..LARGE).map(|i| i as u8).collect();
    let runs = providers()
        .into_iter()
        .flat_map(|p| [(p, None), (p, Some(16 << 10))]);
    for (prov, eager_max) in runs {
        let mut cfg = config(prov);
        cfg.eager_max = eager_max;
        let a = Node::initialize(0, 62, cfg.clone()).unwrap();
        let b = Node::initialize(0, 63, cfg).unwrap();
        let from = a.endpoint_create(30).unwrap();
        let rx = b.endpoint_create(31).unwrap();
        let to = a.endpoint_get(0, 63, 31, WAIT).unwrap();
        let sizes = [8, 100, LARGE];
        let send_rounds = |rounds: u32| {
            for _ in 0..rounds {
                for len in sizes {
                    a.msg_send(from, to, &large[..len], 1).unwrap();
                }
                let q = a.msg_send_i(from, to, &large[..8], 1).unwrap();
                a.wait(q, None, WAIT).unwrap();
            }
        };
        let receive_rounds = |scratch: &mut [u8], rounds: u32| {
            for _ in 0..rounds {
                for len in sizes {
                    assert_eq!(b.msg_recv(rx, scratch).unwrap(), len);
                    assert!(scratch[..len] == large[..len]);
                }
                let q = b.msg_recv_i(rx).unwrap();
                assert_eq!(b.wait(q, Some(&mut scratch[..]), WAIT).unwrap(), 8);
            }
        };
        // A rendezvous sender makes a staging region whenever more messages than ever
        // before wait for their reads (a pace the receiver sets): warmed longer.
        let warm = if a.eager_max() < LARGE {
            COUNTED_ROUNDS
        } else {
            WARM_ROUNDS
        };
        let (sent, received) = allocations_after_warming(warm, send_rounds, receive_rounds);
        assert_eq!(
            (sent, received),
            (0, 0),
            "{prov} (eager up to {eager_max:?}): allocations (sender, receiver) in \
             {COUNTED_ROUNDS} rounds of 4 messages"
        );
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}
