//! What one run of one size over one transport measured, and the numbers derived from it.
//!
//! Conventions (fabtests, OSU): latency is half a round trip, in microseconds; MB/s counts
//! 10^6 bytes; a ping-pong iteration is two transfers, a streaming iteration one.

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

#[cfg(test)]
mod tests {
    use super::*;

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
