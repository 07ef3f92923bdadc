//! The benchmark patterns, written once over [`Transport`].
//!
//! The client drives and measures; the server answers. Each size is framed on the bootstrap
//! channel: the client says `size <transport> <bytes>`, the server answers `ready`; after the
//! run the client says `end <n>` (messages or round trips it did, warmup included) and the
//! server, once it has seen exactly that many and its sends have completed, answers `done`.
//! That frame is also the barrier between sizes, and it lets the client stop early (the time
//! limit) without marking any data message: benchmark messages carry nothing but payload.
//!
//! - `msg-lat`: ping-pong. Each iteration sends one message and waits for the reply of the
//!   same size; every round trip is recorded, latency is half of it.
//! - `msg-bw`: the client sends a window of `W` messages back to back, the server replies with
//!   a small acknowledgement after the window's last message (as OSU's bandwidth test does).
//!   The sender never has more than `W` messages in flight, and the receiver keeps more than
//!   `W` receives posted: on shm (libfabric 1.17) messages that arrive with no receive posted
//!   are lost once a few hundred pile up.
//! - `pkt-lat`, `scl-lat` are `msg-lat`'s ping-pong, `pkt-bw` and `scl-rate` `msg-bw`'s
//!   windows, over MCAPI channels (the transport decides; the raw baseline is the same).
//!   An acknowledgement is [`Transport::ack_len`] bytes (a uint64 over scalar channels).

use crate::cli::{Metric, Opts, Test};
use crate::error::{Error, Result};
use crate::oob::{self, Oob};
use crate::stats::{Measurement, RoundTrips};
use crate::transport::Transport;
use std::time::{Duration, Instant};

/// Size of the acknowledgement the receiver returns after each window.
pub const ACK_LEN: usize = 4;

/// While busy-waiting on the fabric, look at the bootstrap channel at most this often.
const LOOK_EVERY: Duration = Duration::from_millis(1);
/// Empty polls in one wait after which the waiter yields the core now and then.
const YIELD_AFTER_SPINS: u32 = 16 * 1024;
/// A peer that sends nothing on either channel for this long is declared stalled.
const STALL: Duration = Duration::from_secs(30);

/// What both sides agree to run (the client's options; sent to the server in the hello).
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub test: Test,
    pub warmup: u64,
    pub iterations: u64,
    pub window: u64,
    pub max_time: Duration,
    /// Rounds per size (client side only: the server serves sizes as they come).
    pub rounds: u32,
    /// pkt-bw: MCAPI sends with blocking `pktchan_send` (client side only).
    pub blocking_sends: bool,
}

impl Plan {
    pub fn from_opts(test: Test, opts: &Opts) -> Plan {
        Plan {
            test,
            warmup: opts.warmup,
            iterations: opts.iterations,
            window: opts.window,
            max_time: opts.max_time(),
            rounds: opts.rounds,
            blocking_sends: opts.blocking_sends,
        }
    }

    /// Receives each side keeps posted: more than the peer can have in flight.
    pub fn depth(&self) -> usize {
        if self.test.windowed() {
            self.window as usize + 4
        } else {
            4
        }
    }

    /// The hello line's parameters (the receiver's side needs `blocking_sends` too: with
    /// blocking sends `msg-bw`'s receiver receives with blocking `msg_recv`).
    pub fn to_words(&self) -> String {
        format!(
            "{} {} {} {} {} {}",
            self.test,
            self.warmup,
            self.iterations,
            self.window,
            self.max_time.as_millis(),
            u8::from(self.blocking_sends)
        )
    }

    pub fn from_words(words: &[&str]) -> Option<Plan> {
        let [test, warmup, iterations, window, max_ms, blocking] = words else {
            return None;
        };
        Some(Plan {
            test: Test::from_name(test)?,
            warmup: warmup.parse().ok()?,
            iterations: iterations.parse().ok()?,
            window: window.parse().ok().filter(|&w| w > 0)?,
            max_time: Duration::from_millis(max_ms.parse().ok()?),
            rounds: 1,
            blocking_sends: match *blocking {
                "0" => false,
                "1" => true,
                _ => return None,
            },
        })
    }
}

/// Busy-waiting bookkeeping: every so often, a look at the bootstrap channel (for the peer's
/// `end`, or an error, or its disappearance) and a stall check.
struct Watch {
    spins: u32,
    /// Empty polls between looks, minus one (a power of two minus one): few for a transport
    /// whose polls wait by themselves.
    look_mask: u32,
    last_look: Instant,
    last_activity: Instant,
    active: bool,
}

impl Watch {
    fn new<T: Transport>(t: &T) -> Watch {
        let now = Instant::now();
        Watch {
            spins: 0,
            look_mask: if t.waits() { 0 } else { 0xff },
            last_look: now,
            last_activity: now,
            active: false,
        }
    }

    /// Something arrived on the fabric (cheap: no clock read).
    #[inline]
    fn activity(&mut self) {
        self.active = true;
        self.spins = 0;
    }

    /// Called on every empty poll; returns a line from the peer if one arrived.
    #[inline]
    fn idle(&mut self, oob: &mut Oob) -> Result<Option<String>> {
        self.spins = self.spins.wrapping_add(1);
        if self.spins & self.look_mask != 0 {
            return Ok(None);
        }
        if self.spins >= YIELD_AFTER_SPINS && self.look_mask != 0 {
            // A long wait: if the machine is oversubscribed (more busy processes than cores),
            // let the peer run. Without contention this returns at once.
            std::thread::yield_now();
        }
        self.look(oob)
    }

    #[cold]
    fn look(&mut self, oob: &mut Oob) -> Result<Option<String>> {
        let now = Instant::now();
        if now.duration_since(self.last_look) < LOOK_EVERY {
            return Ok(None);
        }
        self.last_look = now;
        if let Some(line) = oob.try_line()? {
            return oob::check_peer_error(line).map(Some);
        }
        if std::mem::take(&mut self.active) {
            self.last_activity = now;
        } else if now.duration_since(self.last_activity) > STALL {
            return Err(Error::failed(format!(
                "no message from the peer for {STALL:?}: it stalled or a message was lost"
            )));
        }
        Ok(None)
    }
}

fn unexpected(line: &str) -> Error {
    Error::failed(format!(
        "unexpected '{line}' from the peer on the bootstrap channel during a run"
    ))
}

#[inline]
fn send<T: Transport>(t: &mut T, oob: &mut Oob, w: &mut Watch, len: usize) -> Result<()> {
    while !t.try_send(len)? {
        if let Some(line) = w.idle(oob)? {
            return Err(unexpected(&line));
        }
    }
    Ok(())
}

/// Waits for the next message, which must be `len` bytes long.
#[inline]
fn recv<T: Transport>(t: &mut T, oob: &mut Oob, w: &mut Watch, len: usize) -> Result<()> {
    loop {
        if let Some(got) = t.try_recv()? {
            w.activity();
            return check_len(got, len);
        }
        if let Some(line) = w.idle(oob)? {
            return Err(unexpected(&line));
        }
    }
}

fn check_len(got: usize, want: usize) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(Error::failed(format!(
            "a message of {want} bytes arrived with {got} bytes (the provider truncated it?)"
        )))
    }
}

/// Waits until every send posted has completed locally.
fn flush<T: Transport>(t: &mut T, oob: &mut Oob) -> Result<()> {
    let mut w = Watch::new(t);
    while t.pending_sends() > 0 {
        t.progress()?;
        if let Some(line) = w.idle(oob)? {
            return Err(unexpected(&line));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Client side: drives and measures.

/// Runs one size over `t` and returns what it measured.
pub fn client_size<T: Transport>(
    t: &mut T,
    oob: &mut Oob,
    plan: &Plan,
    size: usize,
) -> Result<Measurement> {
    oob.send(&format!("size {} {size}", t.kind()))?;
    oob.expect("ready", || t.progress())?;
    let m = match plan.test.metric() {
        Metric::Latency => lat_client(t, oob, plan, size)?,
        Metric::Throughput => bw_client(t, oob, plan, size)?,
    };
    oob.send(&format!("end {}", plan.warmup + m.iterations))?;
    oob.expect("done", || t.progress())?;
    flush(t, oob)?;
    Ok(m)
}

fn lat_client<T: Transport>(
    t: &mut T,
    oob: &mut Oob,
    plan: &Plan,
    size: usize,
) -> Result<Measurement> {
    let mut w = Watch::new(t);
    for _ in 0..plan.warmup {
        send(t, oob, &mut w, size)?;
        recv(t, oob, &mut w, size)?;
    }
    let mut rt = RoundTrips::new();
    let start = Instant::now();
    let deadline = start + plan.max_time;
    let mut last = start;
    let mut done = 0;
    while done < plan.iterations {
        send(t, oob, &mut w, size)?;
        recv(t, oob, &mut w, size)?;
        let now = Instant::now();
        rt.record(now - last);
        last = now;
        done += 1;
        if now >= deadline {
            break;
        }
    }
    Ok(Measurement {
        size,
        iterations: done,
        elapsed: last - start,
        xfers_per_iter: 2,
        round_trips: Some(rt),
    })
}

fn bw_client<T: Transport>(
    t: &mut T,
    oob: &mut Oob,
    plan: &Plan,
    size: usize,
) -> Result<Measurement> {
    let mut w = Watch::new(t);
    let ack = t.ack_len();
    let mut window = |t: &mut T, n: u64| -> Result<()> {
        for _ in 0..n {
            send(t, oob, &mut w, size)?;
        }
        recv(t, oob, &mut w, ack)
    };
    let mut warm = plan.warmup;
    while warm > 0 {
        let n = warm.min(plan.window);
        window(t, n)?;
        warm -= n;
    }
    let start = Instant::now();
    let deadline = start + plan.max_time;
    let mut end = start;
    let mut done = 0;
    while done < plan.iterations {
        let n = (plan.iterations - done).min(plan.window);
        window(t, n)?;
        done += n;
        end = Instant::now();
        if end >= deadline {
            break;
        }
    }
    Ok(Measurement {
        size,
        iterations: done,
        elapsed: end - start,
        xfers_per_iter: 1,
        round_trips: None,
    })
}

// ---------------------------------------------------------------------------------------------
// Server side: answers until the client says `end`.

/// Serves one size (after the client's `size` line).
pub fn serve_size<T: Transport>(t: &mut T, oob: &mut Oob, plan: &Plan, size: usize) -> Result<()> {
    oob.send("ready")?;
    let mut w = Watch::new(t);
    let mut windows = Windows::new(plan);
    let mut received = 0u64;
    loop {
        let got = match t.try_recv()? {
            Some(got) => got,
            None => {
                if let Some(line) = w.idle(oob)? {
                    return finish(t, oob, &line, received);
                }
                continue;
            }
        };
        w.activity();
        check_len(got, size)?;
        received += 1;
        match plan.test.metric() {
            Metric::Latency => send(t, oob, &mut w, size)?,
            Metric::Throughput => {
                if windows.take_one()? {
                    let ack = t.ack_len();
                    send(t, oob, &mut w, ack)?;
                }
            }
        }
    }
}

/// The client's `end <n>`: check the count, complete the sends, answer `done`.
fn finish<T: Transport>(t: &mut T, oob: &mut Oob, line: &str, received: u64) -> Result<()> {
    let announced: u64 = line
        .strip_prefix("end ")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| unexpected(line))?;
    if announced != received {
        return Err(Error::failed(format!(
            "the client sent {announced} messages, {received} arrived"
        )));
    }
    flush(t, oob)?;
    oob.send("done")
}

/// The receiver's view of the streaming benchmarks' windows: the warmup messages in windows of `W` (the last
/// one possibly shorter), then the timed ones likewise.
struct Windows {
    warmup: u64,
    timed: u64,
    window: u64,
    left_in_window: u64,
}

impl Windows {
    fn new(plan: &Plan) -> Windows {
        let mut w = Windows {
            warmup: plan.warmup,
            timed: plan.iterations,
            window: plan.window,
            left_in_window: 0,
        };
        w.left_in_window = w.next_window();
        w
    }

    fn next_window(&mut self) -> u64 {
        let pool = if self.warmup > 0 {
            &mut self.warmup
        } else {
            &mut self.timed
        };
        let n = (*pool).min(self.window);
        *pool -= n;
        n
    }

    /// Counts one arrived message; true when it completes a window (time to acknowledge).
    fn take_one(&mut self) -> Result<bool> {
        if self.left_in_window == 0 {
            return Err(Error::failed(
                "more messages arrived than the client announced",
            ));
        }
        self.left_in_window -= 1;
        if self.left_in_window == 0 {
            self.left_in_window = self.next_window();
            return Ok(true);
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(warmup: u64, iterations: u64, window: u64) -> Plan {
        Plan {
            test: Test::MsgBw,
            warmup,
            iterations,
            window,
            max_time: Duration::from_secs(2),
            rounds: 1,
            blocking_sends: false,
        }
    }

    /// Window lengths as the receiver sees them.
    fn windows(p: &Plan) -> Vec<u64> {
        let mut w = Windows::new(p);
        let (mut out, mut n) = (Vec::new(), 0);
        while let Ok(ack) = w.take_one() {
            n += 1;
            if ack {
                out.push(n);
                n = 0;
            }
        }
        out
    }

    #[test]
    fn receiver_windows_match_the_sender() {
        assert_eq!(windows(&plan(10, 10, 4)), [4, 4, 2, 4, 4, 2]);
        assert_eq!(windows(&plan(0, 8, 4)), [4, 4]);
        assert_eq!(windows(&plan(3, 0, 4)), [3]);
        assert_eq!(windows(&plan(0, 1, 64)), [1]);
    }

    #[test]
    fn plan_round_trips_through_words() {
        for blocking_sends in [false, true] {
            let p = Plan {
                blocking_sends,
                ..plan(5, 1000, 32)
            };
            let words = p.to_words();
            let parsed = Plan::from_words(&words.split(' ').collect::<Vec<_>>()).unwrap();
            assert_eq!(parsed, p);
        }
        assert!(Plan::from_words(&["msg-bw", "1"]).is_none());
        assert!(Plan::from_words(&["msg-bw", "1", "1", "1", "1", "2"]).is_none());
    }
}
