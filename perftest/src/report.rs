//! Output: a fabtests-style table, or one JSON object per size and line (`--json`), and a
//! progress line on stderr for long runs at a terminal.
//!
//! JSON fields: `test`, `provider` (as libfabric names it), `size`, `iterations` (asked for,
//! per round), `window` (streaming tests), `mcapi_send` (pkt-bw: `pktchan_send_i` or
//! `pktchan_send`, how MCAPI sends), `rounds` and then, for MCAPI unprefixed and for raw
//! libfabric prefixed `raw_`: `iterations_done`, `time_s` (totals over the rounds),
//! `lat_us_min`, `lat_us_p50`, `lat_us_p99`, `lat_us_p999`, `lat_us_max` (half round trips;
//! null for msg-bw), `mb_s` (10^6 B/s), `mmsg_s` (10^6 messages/s), `lat_us_p50_spread` and
//! `mb_s_spread` (`[min, max]` over the rounds; null when there is one round, and the latency
//! one for msg-bw). With several rounds, p50, MB/s and messages/s are the medians of the
//! rounds (see [`Summary`]). `ratio` is MCAPI over raw (p50 latency for latency tests, MB/s
//! for the others), `delta_us` MCAPI's p50 minus raw's (latency tests); with several rounds
//! each is the median of the rounds' own (raw and MCAPI back to back in a round). Fields of a half that
//! did not run are null. Then `libfabric_version`, `host`, `date` (UTC, ISO 8601),
//! `git_sha` (the build's commit), `settings` (the `MCAPI_*` and `FI_*` environment, but
//! the job key) and `load_average` (the machine's 1-minute load average at the start).

use crate::cli::{Metric, Test};
use crate::pattern::Plan;
use crate::stats::{median, Summary};
use serde_json::Value;
use std::io::IsTerminal;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Where and when the run happened, and what else steered it.
#[derive(Clone, Debug, Default)]
pub struct RunInfo {
    pub libfabric_version: String,
    pub host: String,
    pub date: String,
    pub git_sha: &'static str,
    /// The `MCAPI_*` and `FI_*` environment (spin time, eager threshold, buffers, the
    /// provider's own settings), which change the numbers; sorted.
    pub settings: Vec<(String, String)>,
    /// The machine's 1-minute load average at the start: other processes' load moves the
    /// layers apart (they wait differently).
    pub load_average: Option<f64>,
}

impl RunInfo {
    pub fn collect() -> RunInfo {
        let (major, minor) = mcapi_ofi::libfabric_version();
        RunInfo {
            libfabric_version: format!("{major}.{minor}"),
            host: hostname(),
            date: iso8601_utc(SystemTime::now()),
            git_sha: env!("PERFTEST_GIT_SHA"),
            settings: settings(),
            load_average: std::fs::read_to_string("/proc/loadavg")
                .ok()
                .and_then(|l| l.split_whitespace().next()?.parse().ok()),
        }
    }
}

/// The environment variables that steer MCAPI and libfabric.
fn settings() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| (k.starts_with("MCAPI_") || k.starts_with("FI_")) && k != "MCAPI_JOB_KEY")
        .collect();
    v.sort();
    v
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// `2026-11-21T06:38:17Z`.
fn iso8601_utc(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// fabtests' `size_str`: 1536 -> "1.5k", 10000 -> "9.7k", 2 GiB -> "2g".
fn size_str(n: u64) -> String {
    let (base, mag) = match n {
        n if n >= 1 << 30 => (1u64 << 30, "g"),
        n if n >= 1 << 20 => (1 << 20, "m"),
        n if n >= 1 << 10 => (1 << 10, "k"),
        _ => (1, ""),
    };
    let fraction = if n / base < 10 {
        (n % base) * 10 / base
    } else {
        0
    };
    if fraction > 0 {
        format!("{}.{fraction}{mag}", n / base)
    } else {
        format!("{}{mag}", n / base)
    }
}

/// Results of one size: the rounds of each transport that ran.
pub struct SizeResult<'a> {
    pub size: usize,
    pub raw: Option<&'a Summary>,
    pub mcapi: Option<&'a Summary>,
    /// Why MCAPI did not run this size (shown in the table; its JSON fields are null).
    pub mcapi_not_run: Option<&'a str>,
    /// How MCAPI carried this size, where the layer has a choice (messages: "eager" or
    /// "rendezvous"); shown after the ratio, and as `mcapi_protocol` in JSON.
    pub protocol: Option<&'static str>,
    /// The call MCAPI's sender made at this size (msg-bw, pkt-bw: `mcapi_send` in JSON).
    pub send_call: Option<&'static str>,
}

impl SizeResult<'_> {
    /// MCAPI over raw: p50 latency for latency tests, MB/s for the others. With several
    /// rounds, the median of the rounds' own ratios: raw and MCAPI run back to back in a
    /// round, so a host that speeds up or slows down between rounds moves both alike.
    pub fn ratio(&self, test: Test) -> Option<f64> {
        let (mc, raw) = (self.mcapi?, self.raw?);
        if let Some(pairs) = self.paired_rounds() {
            // (No round where raw moved anything: no ratio, as with one round.)
            let ratios: Vec<f64> = pairs
                .filter(|&(_, r)| r > 0.0)
                .map(|(m, r)| m / r)
                .collect();
            return (!ratios.is_empty()).then(|| median(ratios.into_iter()));
        }
        match test.metric() {
            Metric::Latency => {
                let (a, b) = (mc.latency()?, raw.latency()?);
                (b.p50 > 0.0).then(|| a.p50 / b.p50)
            }
            Metric::Throughput => (raw.mb_s() > 0.0).then(|| mc.mb_s() / raw.mb_s()),
        }
    }

    /// MCAPI's p50 latency minus raw's, in microseconds (latency tests); with several
    /// rounds, the median of the rounds' differences (as for [`SizeResult::ratio`]).
    pub fn delta_us(&self) -> Option<f64> {
        let p50 = self.mcapi?.latency()?.p50 - self.raw?.latency()?.p50;
        Some(match self.paired_rounds() {
            Some(pairs) => median(pairs.map(|(m, r)| m - r)),
            None => p50,
        })
    }

    /// (MCAPI, raw) headline numbers of each round, when both layers ran the same rounds,
    /// more than one.
    fn paired_rounds(&self) -> Option<impl Iterator<Item = (f64, f64)>> {
        let (mc, raw) = (self.mcapi?.round_values(), self.raw?.round_values());
        (mc.len() > 1 && mc.len() == raw.len()).then(|| mc.into_iter().zip(raw))
    }
}

pub struct Report {
    test: Test,
    provider: String,
    plan: Plan,
    json: bool,
    info: RunInfo,
    header_done: bool,
}

impl Report {
    pub fn new(plan: &Plan, provider: &str, json: bool, info: RunInfo) -> Report {
        Report {
            test: plan.test,
            provider: provider.to_owned(),
            plan: plan.clone(),
            json,
            info,
            header_done: false,
        }
    }

    /// One size's line(s) (with the table's header before the first), to print as they
    /// are measured.
    pub fn render(&mut self, r: &SizeResult<'_>) -> String {
        if self.json {
            self.json_line(r)
        } else {
            self.table_rows(r)
        }
    }

    fn table_rows(&mut self, r: &SizeResult<'_>) -> String {
        let mut s = String::new();
        if !self.header_done {
            self.header_done = true;
            let window = if self.test.windowed() {
                format!(", window {}", self.plan.window)
            } else {
                String::new()
            };
            let window = match self.mcapi_send() {
                Some(call) => format!("{window} (MCAPI: {call})"),
                None => window,
            };
            let rounds = match self.plan.rounds {
                1 => String::new(),
                n => format!("; {n} rounds, raw and MCAPI alternating (medians, spread min..max)"),
            };
            s += &format!(
                "# {} provider {} (libfabric {}): {} iterations{window}, warmup {}, at most {:?} per size (iters* = stopped by that limit){rounds}\n",
                self.test,
                self.provider,
                self.info.libfabric_version,
                self.plan.iterations,
                self.plan.warmup,
                self.plan.max_time
            );
            s += match self.test.metric() {
                Metric::Latency => {
                    "# min..max: one transfer's latency in µs (half a round trip); ratio: MCAPI/raw p50 (below 1: MCAPI faster)\n"
                }
                Metric::Throughput => "# MB/sec: 10^6 bytes per second; ratio: MCAPI/raw MB/s (above 1: MCAPI faster)\n",
            };
            s += &format!(
                "{:<8} {:<9} {:>8} {:>7} {:>8} {:>10} {:>9} {:>10}",
                "layer", "bytes", "iters", "total", "time", "MB/sec", "usec/xfer", "Mxfers/sec"
            );
            if self.test.metric() == Metric::Latency {
                s += &format!(
                    " {:>9} {:>9} {:>9} {:>9} {:>9}",
                    "min", "p50", "p99", "p99.9", "max"
                );
            }
            if self.plan.rounds > 1 {
                let what = match self.test.metric() {
                    Metric::Latency => "p50 spread",
                    Metric::Throughput => "MB/s spread",
                };
                s += &format!(" {what:>19}");
            }
            s += &format!(" {:>6}", "ratio");
            if r.protocol.is_some() {
                s += "  protocol";
            }
            s.push('\n');
        }
        let ratio = r.ratio(self.test);
        for (layer, m) in [("raw", r.raw), ("mcapi", r.mcapi)] {
            let Some(m) = m else {
                if let (true, Some(why)) = (layer == "mcapi", r.mcapi_not_run) {
                    s += &format!("{layer:<8} {:<9} not run: {why}\n", r.size);
                }
                continue;
            };
            // Fewer than asked for: the time limit ended the size's rounds.
            let cut = m.iterations() < self.plan.iterations * u64::from(self.plan.rounds);
            s += &format!(
                "{:<8} {:<9} {:>8} {:>7} {:>7.2}s {:>10.2} {:>9.2} {:>10.3}",
                layer,
                r.size,
                format!("{}{}", m.iterations(), if cut { "*" } else { "" }),
                size_str(m.total_bytes()),
                m.elapsed().as_secs_f64(),
                m.mb_s(),
                m.usec_per_xfer(),
                m.mmsg_s()
            );
            if let Some(l) = m.latency() {
                // In us with ns resolution: the latency targets are tens of ns.
                s += &format!(
                    " {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
                    l.min, l.p50, l.p99, l.p999, l.max
                );
            }
            if self.plan.rounds > 1 {
                let spread = match self.test.metric() {
                    Metric::Latency => m.p50_spread(),
                    Metric::Throughput => m.mb_s_spread(),
                };
                if let Some((lo, hi)) = spread {
                    let digits = match self.test.metric() {
                        Metric::Latency => 3,
                        Metric::Throughput => 2,
                    };
                    s += &format!(" {:>19}", format!("{lo:.digits$}..{hi:.digits$}"));
                }
            }
            if let (true, Some(ratio)) = (layer == "mcapi", ratio) {
                s += &format!(" {ratio:>6.2}");
            }
            if let (true, Some(p)) = (layer == "mcapi", r.protocol) {
                if ratio.is_none() {
                    s += &format!(" {:>6}", "");
                }
                s += &format!("  {p}");
            }
            s.push('\n');
        }
        s
    }

    /// How MCAPI sends in msg-bw and pkt-bw (the header's summary; each size's JSON line
    /// names its own call).
    fn mcapi_send(&self) -> Option<&'static str> {
        match (self.test, self.plan.blocking_sends) {
            (Test::PktBw, false) => {
                Some("pktchan_send_i above the inject size, pktchan_send up to it")
            }
            (Test::PktBw, true) => Some("pktchan_send"),
            (Test::MsgBw, false) => {
                Some("msg_send_i_zero_copy above the eager size, msg_send up to it")
            }
            (Test::MsgBw, true) => Some("msg_send"),
            _ => None,
        }
    }

    fn json_line(&self, r: &SizeResult<'_>) -> String {
        let round = |v: f64, digits: i32| {
            let f = 10f64.powi(digits);
            Value::from((v * f).round() / f)
        };
        let mut fields: Vec<(String, Value)> = vec![
            ("test".into(), self.test.name().into()),
            ("provider".into(), self.provider.clone().into()),
            ("size".into(), r.size.into()),
            ("iterations".into(), self.plan.iterations.into()),
            (
                "window".into(),
                if self.test.windowed() {
                    self.plan.window.into()
                } else {
                    Value::Null
                },
            ),
            ("mcapi_send".into(), r.send_call.into()),
            ("rounds".into(), self.plan.rounds.into()),
        ];
        let num = |v: Option<f64>, digits| v.map_or(Value::Null, |v| round(v, digits));
        // [min, max] over the rounds, when there are several.
        let spread = |v: Option<(f64, f64)>, digits| match v {
            Some((lo, hi)) if self.plan.rounds > 1 => {
                Value::from(vec![round(lo, digits), round(hi, digits)])
            }
            _ => Value::Null,
        };
        for (prefix, m) in [("", r.mcapi), ("raw_", r.raw)] {
            let lat = m.and_then(Summary::latency);
            let entries = [
                (
                    "iterations_done",
                    m.map_or(Value::Null, |m| m.iterations().into()),
                ),
                ("time_s", num(m.map(|m| m.elapsed().as_secs_f64()), 6)),
                ("lat_us_min", num(lat.map(|l| l.min), 3)),
                ("lat_us_p50", num(lat.map(|l| l.p50), 3)),
                ("lat_us_p99", num(lat.map(|l| l.p99), 3)),
                ("lat_us_p999", num(lat.map(|l| l.p999), 3)),
                ("lat_us_max", num(lat.map(|l| l.max), 3)),
                ("mb_s", num(m.map(Summary::mb_s), 3)),
                ("mmsg_s", num(m.map(Summary::mmsg_s), 6)),
                (
                    "lat_us_p50_spread",
                    spread(m.and_then(Summary::p50_spread), 3),
                ),
                ("mb_s_spread", spread(m.and_then(Summary::mb_s_spread), 3)),
            ];
            fields.extend(entries.map(|(k, v)| (format!("{prefix}{k}"), v)));
        }
        let ratio = r.ratio(self.test).map_or(Value::Null, |v| round(v, 4));
        fields.push(("ratio".into(), ratio));
        fields.push(("delta_us".into(), num(r.delta_us(), 3)));
        fields.push(("mcapi_protocol".into(), r.protocol.into()));
        fields.push((
            "libfabric_version".into(),
            self.info.libfabric_version.clone().into(),
        ));
        fields.push(("host".into(), self.info.host.clone().into()));
        fields.push(("date".into(), self.info.date.clone().into()));
        fields.push(("git_sha".into(), self.info.git_sha.into()));
        let settings: serde_json::Map<String, Value> = self
            .info
            .settings
            .iter()
            .map(|(k, v)| (k.clone(), v.clone().into()))
            .collect();
        fields.push(("settings".into(), settings.into()));
        fields.push((
            "load_average".into(),
            self.info.load_average.map_or(Value::Null, Value::from),
        ));
        // Written by hand to keep the field order (serde_json's map sorts without the
        // preserve_order feature).
        let body: Vec<String> = fields
            .iter()
            .map(|(k, v)| format!("{}:{v}", Value::from(k.as_str())))
            .collect();
        format!("{{{}}}\n", body.join(","))
    }
}

/// A one-line progress indication on stderr, only at a terminal and only once the run has
/// lasted a while; cleared before results are printed.
pub struct Progress {
    enabled: bool,
    start: Instant,
    shown: bool,
    /// What the terminal shows now (not written again).
    last: String,
}

impl Progress {
    const AFTER: Duration = Duration::from_secs(2);

    pub fn new() -> Progress {
        Progress {
            enabled: std::io::stderr().is_terminal(),
            start: Instant::now(),
            shown: false,
            last: String::new(),
        }
    }

    pub fn show(&mut self, msg: &str) {
        if self.enabled && self.start.elapsed() >= Self::AFTER && !(self.shown && self.last == msg)
        {
            eprint!("\r\x1b[K{msg}");
            self.shown = true;
            msg.clone_into(&mut self.last);
        }
    }

    /// Whether it shows anything (stderr is a terminal): elsewhere (a log, CI) the caller
    /// says in plain lines what it is doing.
    pub fn on_terminal(&self) -> bool {
        self.enabled
    }

    pub fn clear(&mut self) {
        if self.shown {
            eprint!("\r\x1b[K");
            self.shown = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{Measurement, RoundTrips};

    #[test]
    fn dates() {
        assert_eq!(iso8601_utc(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_709_210_096); // leap year, Feb 29
        assert_eq!(iso8601_utc(t), "2024-02-29T12:34:56Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(iso8601_utc(t), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn fabtests_sizes() {
        assert_eq!(size_str(8), "8");
        assert_eq!(size_str(1536), "1.5k");
        assert_eq!(size_str(10_000), "9.7k");
        assert_eq!(size_str(65_536), "64k");
        assert_eq!(size_str(3 << 20), "3m");
    }

    #[test]
    fn json_fields_in_order_with_nulls() {
        let mut rt = RoundTrips::new();
        rt.record(Duration::from_micros(4));
        let m = Measurement {
            size: 8,
            iterations: 1,
            elapsed: Duration::from_micros(4),
            xfers_per_iter: 2,
            round_trips: Some(rt),
        };
        let plan = Plan {
            test: Test::MsgLat,
            warmup: 0,
            iterations: 1,
            window: 64,
            max_time: Duration::from_secs(2),
            rounds: 1,
            blocking_sends: false,
        };
        let info = RunInfo {
            libfabric_version: "1.17".into(),
            host: "h\"q".into(),
            date: "d".into(),
            git_sha: "abc",
            settings: vec![("MCAPI_SPIN_US".into(), "7".into())],
            load_average: Some(0.25),
        };
        let report = Report::new(&plan, "shm", true, info);
        let m1 = Summary::new(m.clone());
        let line = report.json_line(&SizeResult {
            size: 8,
            raw: Some(&m1),
            mcapi: None,
            mcapi_not_run: Some("why"),
            protocol: None,
            send_call: None,
        });
        assert!(line.starts_with("{\"test\":\"msg-lat\",\"provider\":\"shm\",\"size\":8,"));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["raw_lat_us_p50"], 2.0);
        assert_eq!(v["raw_lat_us_min"], 2.0);
        assert!(v["lat_us_p50"].is_null() && v["ratio"].is_null() && v["window"].is_null());
        assert_eq!(v["host"], "h\"q");
        assert_eq!(v["settings"]["MCAPI_SPIN_US"], "7");
        assert_eq!(v["load_average"], 0.25);
        assert_eq!(v["raw_iterations_done"], 1);

        // Both halves: MCAPI unprefixed, the ratio of the p50s, and in the table a row each.
        let mut rt = RoundTrips::new();
        rt.record(Duration::from_micros(6));
        let mc = Summary::new(Measurement {
            round_trips: Some(rt),
            ..m.clone()
        });
        let both = SizeResult {
            size: 8,
            raw: Some(&m1),
            mcapi: Some(&mc),
            mcapi_not_run: None,
            protocol: None,
            send_call: None,
        };
        let v: Value = serde_json::from_str(&report.json_line(&both)).unwrap();
        assert_eq!(v["lat_us_p50"], 3.0);
        assert_eq!(v["raw_lat_us_p50"], 2.0);
        assert_eq!(v["ratio"], 1.5);
        assert_eq!(v["delta_us"], 1.0);
        assert_eq!(v["rounds"], 1);
        assert!(v["lat_us_p50_spread"].is_null() && v["raw_mb_s_spread"].is_null());
        let mut table = Report::new(&plan, "shm", false, report.info.clone());
        let text = table.table_rows(&both);
        let rows: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .skip(1)
            .collect();
        assert!(
            rows[0].starts_with("raw ") && rows[1].starts_with("mcapi "),
            "{text}"
        );
        assert!(
            rows[1].ends_with(" 1.50") && !rows[0].ends_with("1.50"),
            "{text}"
        );
        let text = table.table_rows(&SizeResult {
            size: 1 << 20,
            raw: Some(&m1),
            mcapi: None,
            mcapi_not_run: Some("too large"),
            protocol: None,
            send_call: None,
        });
        assert!(
            text.contains("mcapi    1048576   not run: too large"),
            "{text}"
        );
    }

    #[test]
    fn rounds_add_medians_and_spreads() {
        let round = |us: u64| {
            let mut rt = RoundTrips::new();
            rt.record(Duration::from_micros(us));
            Measurement {
                size: 8,
                iterations: 1,
                elapsed: Duration::from_micros(us),
                xfers_per_iter: 2,
                round_trips: Some(rt),
            }
        };
        let mut raw = Summary::new(round(2));
        raw.push(round(4));
        raw.push(round(3));
        let mut mc = Summary::new(round(8));
        mc.push(round(6));
        mc.push(round(7));
        let plan = Plan {
            test: Test::MsgLat,
            warmup: 0,
            iterations: 1,
            window: 64,
            max_time: Duration::from_secs(2),
            rounds: 3,
            blocking_sends: false,
        };
        let info = RunInfo {
            libfabric_version: "1.17".into(),
            host: "h".into(),
            date: "d".into(),
            git_sha: "abc",
            settings: vec![("MCAPI_SPIN_US".into(), "7".into())],
            load_average: Some(0.25),
        };
        let mut report = Report::new(&plan, "shm", true, info);
        let r = SizeResult {
            size: 8,
            raw: Some(&raw),
            mcapi: Some(&mc),
            mcapi_not_run: None,
            protocol: None,
            send_call: None,
        };
        let v: Value = serde_json::from_str(&report.json_line(&r)).unwrap();
        assert_eq!(v["rounds"], 3);
        assert_eq!(v["raw_lat_us_p50"], 1.5);
        assert_eq!(v["lat_us_p50"], 3.5);
        assert_eq!(v["raw_lat_us_p50_spread"], serde_json::json!([1.0, 2.0]));
        assert_eq!(v["lat_us_p50_spread"], serde_json::json!([3.0, 4.0]));
        assert_eq!(v["iterations_done"], 3);
        assert_eq!(v["delta_us"], 2.0);
        assert!((v["ratio"].as_f64().unwrap() - 3.5 / 1.5).abs() < 1e-3);
        let text = report.table_rows(&r);
        assert!(
            text.lines().nth(2).unwrap().contains("p50 spread"),
            "{text}"
        );
        assert!(text.contains("3.000..4.000"), "{text}");

        // The host slows down for raw's second and third rounds and for MCAPI's third: each
        // round's ratio is 2, 0.5, 2, and so their median, where the medians' ratio (2 / 4)
        // would be 0.5.
        let (mut raw, mut mc) = (Summary::new(round(2)), Summary::new(round(4)));
        for (r, m) in [(8, 4), (8, 16)] {
            raw.push(round(r));
            mc.push(round(m));
        }
        let r = SizeResult {
            raw: Some(&raw),
            mcapi: Some(&mc),
            ..r
        };
        let v: Value = serde_json::from_str(&report.json_line(&r)).unwrap();
        assert_eq!(
            (v["raw_lat_us_p50"].as_f64(), v["lat_us_p50"].as_f64()),
            (Some(4.0), Some(2.0))
        );
        assert_eq!(v["ratio"], 2.0);
        assert_eq!(v["delta_us"], 1.0);
    }
}
