//! A latency SLO as a user writes it: `p99<20ms`, `p99.9<=5ms`, `p50<800us`.

use std::fmt;

/// The most a latency bound may be: an hour, the longest request timeout anyone would give.
const MAX_BOUND_NS: f64 = 3_600e9;

/// A latency objective: the `quantile` of request latency (each request timed from when it
/// was due) stays at or under `bound_ns`.
#[derive(Debug, Clone, PartialEq)]
pub struct Slo {
    /// The percentile as written, e.g. "p99".
    pub label: String,
    /// The quantile, 0 < q < 1 (0.99).
    pub quantile: f64,
    /// The bound, ns.
    pub bound_ns: u64,
}

impl Slo {
    /// Parses `pQ<BOUND` or `pQ<=BOUND` (BOUND a number with `us`, `ms` or `s`). Both
    /// comparisons mean the same here: a histogram's quantile is read at 3 significant digits,
    /// so "under" and "at most" cannot be told apart.
    pub fn parse(text: &str) -> Result<Self, String> {
        let explain = "write the SLO as pQ<BOUND, e.g. p99<20ms, p99.9<5ms or p50<800us";
        let text = text.trim();
        let (label, bound) = text
            .split_once("<=")
            .or_else(|| text.split_once('<'))
            .ok_or_else(|| format!("'{text}': no '<' ({explain})"))?;
        let label = label.trim();
        let digits = label
            .strip_prefix('p')
            .ok_or_else(|| format!("'{label}' is not a percentile ({explain})"))?;
        let pct: f64 = digits
            .parse()
            .map_err(|_| format!("'{label}' is not a percentile ({explain})"))?;
        if !(pct > 0.0 && pct < 100.0) {
            return Err(format!(
                "'{label}': the percentile must be above 0 and under 100 ({explain})"
            ));
        }
        let bound = bound.trim();
        let (number, scale) = if let Some(n) = bound.strip_suffix("us") {
            (n, 1e3)
        } else if let Some(n) = bound.strip_suffix("ms") {
            (n, 1e6)
        } else if let Some(n) = bound.strip_suffix('s') {
            (n, 1e9)
        } else {
            return Err(format!(
                "'{bound}': give the bound's unit, us, ms or s ({explain})"
            ));
        };
        let value: f64 = number
            .trim()
            .parse()
            .map_err(|_| format!("'{bound}' is not a duration ({explain})"))?;
        let ns = value * scale;
        if !(1_000.0..=MAX_BOUND_NS).contains(&ns) {
            return Err(format!(
                "'{bound}': a latency bound must be from 1us to 1 hour ({explain})"
            ));
        }
        Ok(Self {
            label: label.to_string(),
            quantile: pct / 100.0,
            bound_ns: ns.round() as u64,
        })
    }
}

/// An SLO at an offered rate, as a CI gate: `p99<20ms@2000rps`.
#[derive(Debug, Clone, PartialEq)]
pub struct SloGate {
    /// The objective.
    pub slo: Slo,
    /// The rate it must hold at, requests/s.
    pub rate: u64,
}

impl SloGate {
    /// Parses `pQ<BOUND@RATErps` (`rps` may be left out).
    pub fn parse(text: &str) -> Result<Self, String> {
        let explain = "write it as pQ<BOUND@RATErps, e.g. p99<20ms@2000rps";
        let (slo, rate) = text
            .split_once('@')
            .ok_or_else(|| format!("'{text}': no '@RATE' ({explain})"))?;
        let slo = Slo::parse(slo)?;
        let digits = rate.trim();
        let digits = digits.strip_suffix("rps").unwrap_or(digits).trim();
        let rate = digits
            .parse::<u64>()
            .ok()
            .filter(|r| (1..=MAX_GATE_RATE).contains(r))
            .ok_or_else(|| {
                format!(
                    "'{rate}': the rate must be a whole number of requests/s from 1 to                      {MAX_GATE_RATE} ({explain})"
                )
            })?;
        Ok(Self { slo, rate })
    }
}

/// The highest rate a gate may name: the `http` probe's own bound.
const MAX_GATE_RATE: u64 = 10_000_000;

impl fmt::Display for Slo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} < {}",
            self.label,
            duration_text(self.bound_ns as f64)
        )
    }
}

/// A latency for people: 850 us, 12.3 ms, 1.20 s.
pub fn duration_text(ns: f64) -> String {
    if ns < 1e6 {
        format!("{:.0} us", ns / 1e3)
    } else if ns < 1e9 {
        let ms = format!("{:.3}", ns / 1e6);
        format!("{} ms", ms.trim_end_matches('0').trim_end_matches('.'))
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slos_parse_with_their_units_and_percentiles() {
        let slo = Slo::parse("p99<20ms").unwrap();
        assert_eq!((slo.label.as_str(), slo.bound_ns), ("p99", 20_000_000));
        assert!((slo.quantile - 0.99).abs() < 1e-12);
        let slo = Slo::parse(" p99.9 <= 800us ").unwrap();
        assert_eq!((slo.label.as_str(), slo.bound_ns), ("p99.9", 800_000));
        assert!((slo.quantile - 0.999).abs() < 1e-12);
        assert_eq!(Slo::parse("p50<1.5s").unwrap().bound_ns, 1_500_000_000);
        assert_eq!(Slo::parse("p99<20ms").unwrap().to_string(), "p99 < 20 ms");
    }

    #[test]
    fn bad_slos_say_how_to_write_one() {
        for (text, words) in [
            ("p99", "no '<'"),
            ("99<20ms", "not a percentile"),
            ("p100<20ms", "above 0 and under 100"),
            ("p0<20ms", "above 0 and under 100"),
            ("pxx<20ms", "not a percentile"),
            ("p99<20", "unit"),
            ("p99<fast ms", "not a duration"),
            ("p99<0ms", "from 1us to 1 hour"),
            ("p99<2h", "unit"),
            ("p99<NaNms", "from 1us to 1 hour"),
            ("p99<99999s", "from 1us to 1 hour"),
        ] {
            let err = Slo::parse(text).unwrap_err();
            assert!(err.contains(words), "{text}: {err}");
            assert!(err.contains("e.g. p99<20ms"), "{text}: {err}");
        }
    }

    #[test]
    fn gates_name_their_rate() {
        let gate = SloGate::parse("p99<20ms@2000rps").unwrap();
        assert_eq!((gate.slo.bound_ns, gate.rate), (20_000_000, 2000));
        assert_eq!(SloGate::parse("p50<1ms @ 500").unwrap().rate, 500);
        for (text, words) in [
            ("p99<20ms", "no '@RATE'"),
            ("p99<20ms@fast", "whole number of requests/s"),
            ("p99<20ms@0rps", "from 1 to"),
            ("p99<20ms@1.5rps", "whole number"),
            ("p99<20@2000rps", "unit"),
        ] {
            let err = SloGate::parse(text).unwrap_err();
            assert!(err.contains(words), "{text}: {err}");
        }
    }

    #[test]
    fn durations_read_in_their_unit() {
        assert_eq!(duration_text(850_000.0), "850 us");
        assert_eq!(duration_text(12_300_000.0), "12.3 ms");
        assert_eq!(duration_text(20_000_000.0), "20 ms");
        assert_eq!(duration_text(1_200_000_000.0), "1.20 s");
    }
}
