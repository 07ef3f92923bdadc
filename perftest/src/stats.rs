//! What one run of one size over one transport measured, and the numbers derived from it.
//!
//! Conventions (fabtests, OSU): latency is half a round trip, in microseconds; MB/s counts
//! 10^6 bytes; a ping-pong iteration is two transfers, a streaming iteration one.
//!
//! With `--rounds`, a size runs several times over each layer; a [`Summary`] reports the
//! medians of the rounds' headline numbers and their spread.

use hdrhistogram::Histogram;
use std::time::Duration;

/// Round trips are recorded in nanoseconds, up to an hour, with 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

#[derive(Clone, Debug)]
pub struct Measurement {
    /// Message size in bytes.
    pub size: usize,
    /// Timed iterations actually done (fewer than asked when the time limit stopped the run).
    pub iterations: u64,
    /// Wall time of the timed iterations.
    pub elapsed: Duration,
    /// Transfers (messages) per iteration: 2 for ping-pong, 1 for streaming.
    pub xfers_per_iter: u64,
    /// Per-iteration round-trip times (ping-pong only).
    pub round_trips: Option<RoundTrips>,
}

/// Round-trip times of a ping-pong run.
#[derive(Clone, Debug)]
pub struct RoundTrips {
    pub hist: Histogram<u64>,
    /// Exact extremes (the histogram's are rounded to its precision).
    pub min_ns: u64,
    pub max_ns: u64,
}

impl Default for RoundTrips {
    fn default() -> Self {
        RoundTrips::new()
    }
}

impl RoundTrips {
    pub fn new() -> RoundTrips {
        RoundTrips {
            hist: new_histogram(),
            min_ns: u64::MAX,
            max_ns: 0,
        }
    }

    #[inline]
    pub fn record(&mut self, rtt: Duration) {
        let ns = u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.hist.saturating_record(ns);
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
    }
}

/// Latency percentiles (half round trips) in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Latency {
    pub min: f64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Measurement {
    fn secs(&self) -> f64 {
        self.elapsed.as_secs_f64().max(1e-9)
    }

    fn xfers(&self) -> u64 {
        self.iterations * self.xfers_per_iter
    }

    /// Bytes moved by the timed iterations.
    pub fn total_bytes(&self) -> u64 {
        self.xfers() * self.size as u64
    }

    /// Megabytes (10^6) per second.
    pub fn mb_s(&self) -> f64 {
        self.total_bytes() as f64 / self.secs() / 1e6
    }

    /// Millions of messages per second.
    pub fn mmsg_s(&self) -> f64 {
        self.xfers() as f64 / self.secs() / 1e6
    }

    /// Mean microseconds per transfer (for ping-pong: the mean half round trip).
    pub fn usec_per_xfer(&self) -> f64 {
        self.secs() * 1e6 / self.xfers().max(1) as f64
    }

    /// Half-round-trip percentiles, for ping-pong runs.
    pub fn latency(&self) -> Option<Latency> {
        let rt = self.round_trips.as_ref().filter(|r| !r.hist.is_empty())?;
        // The histogram reports a bucket's highest value: keep percentiles within the exact
        // extremes.
        let us = |ns: u64| ns.clamp(rt.min_ns, rt.max_ns) as f64 / 2.0 / 1000.0;
        Some(Latency {
            min: us(rt.min_ns),
            p50: us(rt.hist.value_at_quantile(0.5)),
            p99: us(rt.hist.value_at_quantile(0.99)),
            p999: us(rt.hist.value_at_quantile(0.999)),
            max: us(rt.max_ns),
        })
    }
}

/// The rounds of one size over one layer, and what is reported from them: p50 latency, MB/s
/// and messages per second are the medians over the rounds (the spread is the min..max of the
/// rounds' values); min, p99, p99.9 and max latency come from all rounds' round trips
/// together; iterations and time are totals. One round reports exactly its measurement.
#[derive(Clone, Debug)]
pub struct Summary {
    rounds: Vec<Measurement>,
    /// All rounds as one measurement.
    total: Measurement,
}

impl Summary {
    pub fn new(first: Measurement) -> Summary {
        Summary {
            total: first.clone(),
            rounds: vec![first],
        }
    }

    pub fn push(&mut self, m: Measurement) {
        let t = &mut self.total;
        t.iterations += m.iterations;
        t.elapsed += m.elapsed;
        if let (Some(all), Some(rt)) = (&mut t.round_trips, &m.round_trips) {
            // Same bounds on both sides: adding cannot fail.
            let _ = all.hist.add(&rt.hist);
            all.min_ns = all.min_ns.min(rt.min_ns);
            all.max_ns = all.max_ns.max(rt.max_ns);
        }
        self.rounds.push(m);
    }

    /// Timed iterations of all rounds.
    pub fn iterations(&self) -> u64 {
        self.total.iterations
    }

    /// Timed wall time of all rounds.
    pub fn elapsed(&self) -> Duration {
        self.total.elapsed
    }

    pub fn total_bytes(&self) -> u64 {
        self.total.total_bytes()
    }

    /// Median microseconds per transfer of the rounds (as MB/s and the message rate are
    /// medians: the row's columns agree).
    pub fn usec_per_xfer(&self) -> f64 {
        median(self.rounds.iter().map(Measurement::usec_per_xfer))
    }

    /// Median MB/s of the rounds.
    pub fn mb_s(&self) -> f64 {
        median(self.rounds.iter().map(Measurement::mb_s))
    }

    /// Median million messages per second of the rounds.
    pub fn mmsg_s(&self) -> f64 {
        median(self.rounds.iter().map(Measurement::mmsg_s))
    }

    /// Percentiles of all round trips, except p50: the median of the rounds' p50s.
    pub fn latency(&self) -> Option<Latency> {
        let mut l = self.total.latency()?;
        if self.rounds.len() > 1 {
            l.p50 = median(self.round_p50s());
        }
        Some(l)
    }

    /// The lowest and highest of the rounds' p50 latencies.
    pub fn p50_spread(&self) -> Option<(f64, f64)> {
        self.total.latency()?;
        spread(self.round_p50s())
    }

    /// The lowest and highest of the rounds' MB/s.
    pub fn mb_s_spread(&self) -> Option<(f64, f64)> {
        spread(self.rounds.iter().map(Measurement::mb_s))
    }

    /// Each round's headline number: p50 latency (µs) for ping-pong runs, else MB/s.
    pub fn round_values(&self) -> Vec<f64> {
        if self.total.latency().is_some() {
            self.round_p50s().collect()
        } else {
            self.rounds.iter().map(Measurement::mb_s).collect()
        }
    }

    fn round_p50s(&self) -> impl Iterator<Item = f64> + '_ {
        self.rounds
            .iter()
            .filter_map(|m| m.latency().map(|l| l.p50))
    }
}

/// The median (the mean of the two middle values for an even count); 0 for none.
pub fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn spread(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((f64::min(lo, v), f64::max(hi, v))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ping_pong(rtt_us: &[u64]) -> Measurement {
        let mut rt = RoundTrips::new();
        for &us in rtt_us {
            rt.record(Duration::from_micros(us));
        }
        Measurement {
            size: 8,
            iterations: rtt_us.len() as u64,
            elapsed: Duration::from_micros(rtt_us.iter().sum()),
            xfers_per_iter: 2,
            round_trips: Some(rt),
        }
    }

    #[test]
    fn medians() {
        assert_eq!(median([3.0, 1.0, 2.0].into_iter()), 2.0);
        assert_eq!(median([4.0, 1.0, 2.0, 3.0].into_iter()), 2.5);
        assert_eq!(median(std::iter::empty()), 0.0);
    }

    #[test]
    fn rounds_report_median_p50_spread_and_totals() {
        let mut s = Summary::new(ping_pong(&[2, 2, 2]));
        assert_eq!(s.latency(), ping_pong(&[2, 2, 2]).latency());
        assert_eq!(s.p50_spread(), Some((1.0, 1.0)));
        s.push(ping_pong(&[10, 10, 10]));
        s.push(ping_pong(&[4, 4, 400]));
        assert_eq!(s.rounds.len(), 3);
        assert_eq!(s.iterations(), 9);
        let l = s.latency().unwrap();
        // The median round's p50 (2 us, within the histogram's 3 digits).
        assert!((l.p50 - 2.0).abs() < 0.01, "{l:?}");
        assert_eq!((l.min, l.max), (1.0, 200.0));
        let (lo, hi) = s.p50_spread().unwrap();
        assert!(
            (lo - 1.0).abs() < 0.01 && (hi - 5.0).abs() < 0.01,
            "{lo} {hi}"
        );
        let (lo, hi) = s.mb_s_spread().unwrap();
        assert!(lo <= s.mb_s() && s.mb_s() <= hi);
        // usec/xfer is the median round's (elapsed / transfers: 1, 5 and 68 us), as MB/s
        // is: not the pooled mean (416 / 18 us).
        assert!(
            (s.usec_per_xfer() - 5.0).abs() < 1e-9,
            "{}",
            s.usec_per_xfer()
        );
    }

    #[test]
    fn derived_numbers() {
        let mut rt = RoundTrips::new();
        for us in 1..=1000u64 {
            rt.record(Duration::from_micros(us * 2));
        }
        let m = Measurement {
            size: 1000,
            iterations: 1000,
            elapsed: Duration::from_secs(1),
            xfers_per_iter: 2,
            round_trips: Some(rt),
        };
        assert!((m.mb_s() - 2.0).abs() < 1e-9);
        assert!((m.mmsg_s() - 0.002).abs() < 1e-12);
        assert!((m.usec_per_xfer() - 500.0).abs() < 1e-9);
        let l = m.latency().unwrap();
        assert_eq!(l.min, 1.0);
        assert_eq!(l.max, 1000.0);
        assert!((l.p50 - 500.0).abs() < 1.0, "{l:?}");
        assert!((l.p99 - 990.0).abs() < 1.0, "{l:?}");
        assert!(l.p999 >= l.p99 && l.p999 <= l.max);
    }
}
