//! The latency–throughput curve of a run's servers: for each server command, its measured
//! `http` or `tcp` trials grouped by offered rate, their histograms merged by adding counts (an
//! average of percentiles is no percentile of anything), and the knee: the lowest rate at which
//! the tail departs from the median by [`KNEE_FACTOR`]. A capacity search's steps make one, and
//! so does any run (a plan) that offers one server several rates.

use super::merge;
use crate::record::{RunRecord, TrialRecord};

/// The knee: the lowest rate whose p99 is at least this many times its p50 (or whose p99 went
/// unanswered). Twice the median is where queueing, not service, makes the tail.
pub const KNEE_FACTOR: f64 = 2.0;

/// A curve is drawn for a server offered at least this many rates.
pub const MIN_RATES: usize = 3;

/// One point: one server at one offered rate.
#[derive(Debug, Clone, PartialEq)]
pub struct CurvePoint {
    /// Offered, requests/s.
    pub rate: f64,
    /// Achieved (answered after the warm-up), the trials' mean.
    pub achieved: Option<f64>,
    /// Latency from the intended send, ns, with requests never sent ranked above all (`None`:
    /// more of them than the percentile leaves above it).
    pub p50: Option<f64>,
    /// p99.
    pub p99: Option<f64>,
    /// p99.9.
    pub p999: Option<f64>,
    /// Trials merged.
    pub trials: usize,
}

/// One server's curve.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerCurve {
    /// What the report calls it: its variants' name before the step (`A` of `A@1000`).
    pub label: String,
    /// The first of its variants, whose colour it takes.
    pub variant: String,
    /// Its server command.
    pub server: String,
    /// Its points, by rate.
    pub points: Vec<CurvePoint>,
    /// The knee's rate, if the curve has one.
    pub knee: Option<f64>,
}

/// A variant's name before its step: `A@1000` → `A`, `A.load@958` → `A`.
fn label_of(variant: &str) -> &str {
    variant.split(['@', '.']).next().unwrap_or(variant)
}

fn offered(t: &TrialRecord) -> Option<f64> {
    t.params
        .get("rate")
        .and_then(|r| r.trim().parse::<f64>().ok())
        .filter(|r| r.is_finite() && *r > 0.0)
}

/// The run's curves: one per server command offered at least [`MIN_RATES`] open-loop rates.
pub fn load_curves(run: &RunRecord) -> Vec<ServerCurve> {
    let counted: Vec<&TrialRecord> = run
        .trials
        .iter()
        .filter(|t| !t.warmup && !t.cancelled && matches!(t.probe.as_str(), "http" | "tcp"))
        .collect();
    let mut servers: Vec<(&str, &str)> = Vec::new();
    for t in &counted {
        if let Some(server) = t.params.get("server")
            && !servers.iter().any(|(s, _)| s == server)
        {
            servers.push((server, &t.variant));
        }
    }
    let mut curves = Vec::new();
    for (server, first) in servers {
        let mine: Vec<&TrialRecord> = counted
            .iter()
            .copied()
            .filter(|t| t.params.get("server").is_some_and(|s| s == server))
            .collect();
        let mut rates: Vec<f64> = mine.iter().filter_map(|t| offered(t)).collect();
        rates.sort_by(f64::total_cmp);
        rates.dedup();
        if rates.len() < MIN_RATES {
            continue;
        }
        let points: Vec<CurvePoint> = rates
            .iter()
            .map(|&rate| {
                point(
                    rate,
                    mine.iter().copied().filter(|t| offered(t) == Some(rate)),
                )
            })
            .collect();
        let knee = points
            .iter()
            .find(|p| match (p.p50, p.p99) {
                (Some(p50), Some(p99)) => p99 >= KNEE_FACTOR * p50,
                (_, None) => true,
                (None, Some(_)) => false,
            })
            .map(|p| p.rate);
        curves.push(ServerCurve {
            label: label_of(first).to_string(),
            variant: first.to_string(),
            server: server.to_string(),
            points,
            knee,
        });
    }
    // Two servers whose variants share a name before the step keep apart by number.
    let labels: Vec<String> = curves.iter().map(|c| c.label.clone()).collect();
    for (i, c) in curves.iter_mut().enumerate() {
        if labels.iter().filter(|l| **l == c.label).count() > 1 {
            c.label = format!("{} ({})", c.label, i + 1);
        }
    }
    curves
}

fn point<'a>(rate: f64, trials: impl Iterator<Item = &'a TrialRecord>) -> CurvePoint {
    let trials: Vec<&TrialRecord> = trials.collect();
    let merged = merge(trials.iter().copied());
    CurvePoint {
        rate,
        achieved: merged.achieved,
        p50: merged.p50,
        p99: merged.p99,
        p999: merged.p999,
        trials: trials.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::test_records::http_run::capacity_run;

    #[test]
    fn each_server_gets_its_curve_and_its_knee() {
        let run = capacity_run();
        let curves = load_curves(&run);
        assert_eq!(curves.len(), 2, "{curves:?}");
        let (a, b) = (&curves[0], &curves[1]);
        assert_eq!((a.label.as_str(), b.label.as_str()), ("A", "B"));
        // Rates ascend; a confirming step and a fixed-load step at a rate merge into its point.
        assert!(a.points.windows(2).all(|w| w[0].rate < w[1].rate));
        let confirmed = a.points.iter().find(|p| p.rate == 1914.0).unwrap();
        assert_eq!(confirmed.trials, 2);
        // The sample's A departs at 2,000 requests/s (unanswered requests), B at 1,682 (its p99
        // three times its p50).
        assert_eq!(a.knee, Some(2000.0));
        assert_eq!(b.knee, Some(1682.0));
        let saturated = a.points.last().unwrap();
        assert_eq!(saturated.p99, None, "{saturated:?}");
        assert!(saturated.p50.is_some());
    }

    #[test]
    fn a_run_at_one_rate_has_no_curve() {
        let run = crate::record::test_records::http_run::sample_http_run();
        assert!(load_curves(&run).is_empty());
    }
}
