//! Outlier hosts: a host whose mean sits far from its peers (a noisy neighbour, a throttled or
//! broken instance, CONTEXT §3's platform bug) is named, with its score, so the user can drop or
//! re-roll it.
//!
//! Score: the modified z-score of Iglewicz & Hoaglin (*How to Detect and Handle Outliers*, ASQC
//! Basic References in Quality Control 16, 1993): z = 0.6745 (x − median) / MAD, flagged when
//! |z| > 3.5. Median and MAD, unlike mean and SD, are not dragged toward the outlier they are
//! meant to expose.
//!
//! Hosts are compared within their CPU model: x is the host's mean ln(value) minus the median of
//! its model's host means. Scoring the raw host means would flag every host of a rare CPU model
//! (two 8223CL hosts among eighteen 8275CL are "far" only because of the CPU lottery, which the
//! variance components report separately). The residuals are pooled over models so that the MAD
//! rests on the whole fleet. A host alone in its model has a residual of 0 by construction and
//! cannot be judged; the scan says so.
//!
//! A host's mean carries its own rounds' noise, σ_e/√n with σ_e the pooled round-to-round
//! standard deviation: with few hosts per model the MAD can come out far smaller than that (three
//! hosts of a model leave one residual at exactly 0), and a host 1.5% off on rounds 1.3% noisy
//! would score z = 13. The divisor is therefore never below that standard error: a host is an
//! outlier only when it is off by more than both its peers' spread and its own noise explain.
//!
//! When more than half the residuals are equal the MAD is 0; the scan then uses the mean
//! absolute deviation, z = (x − median) / (1.253314 · MeanAD), the usual fallback (1.253314 =
//! √(π/2) makes both consistent for normal data). If that is 0 too, every host is alike and none
//! is flagged.

use serde::Serialize;

use crate::components::group_logs;
use crate::error::StatsError;
use crate::paired::{Arm, Observation};
use crate::robust::{mean_unchecked, median_of_sorted, sorted};

/// Iglewicz & Hoaglin's recommended cut-off for the modified z-score.
pub const IGLEWICZ_HOAGLIN_THRESHOLD: f64 = 3.5;

/// One host's score.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostScore {
    /// The host.
    pub host: String,
    /// Its CPU model.
    pub cpu_model: String,
    /// Geometric mean of its values, in the values' unit.
    pub mean: f64,
    /// Modified z-score of its log-mean against its model's median; `None` when the host is
    /// alone in its model, or the fleet has fewer than three hosts.
    pub z: Option<f64>,
    /// |z| above the threshold.
    pub outlier: bool,
}

/// The scores of every host and the rule used.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutlierScan {
    /// All hosts, by CPU model then host name.
    pub hosts: Vec<HostScore>,
    /// The |z| cut-off.
    pub threshold: f64,
    /// Which hosts could not be judged, and fallbacks used.
    pub notes: Vec<String>,
}

impl OutlierScan {
    /// The flagged hosts.
    pub fn outliers(&self) -> impl Iterator<Item = &HostScore> {
        self.hosts.iter().filter(|h| h.outlier)
    }
}

/// Scores the hosts of `arm`'s observations; flags |z| > `threshold`
/// (use [`IGLEWICZ_HOAGLIN_THRESHOLD`]).
pub fn outlier_hosts(
    observations: &[Observation],
    arm: Arm,
    threshold: f64,
) -> Result<OutlierScan, StatsError> {
    if !(threshold > 0.0 && threshold.is_finite()) {
        return Err(StatsError::InvalidParameter {
            what: "outlier threshold",
            value: threshold,
            why: "it must be a positive number, 3.5 by Iglewicz & Hoaglin",
        });
    }
    let groups = group_logs(observations, arm)?;
    let mut notes = Vec::new();
    // (host, model, log-mean, residual or None when alone in its model, values)
    let mut rows = Vec::new();
    for (model, hosts) in &groups {
        let means: Vec<f64> = hosts.values().map(|v| mean_unchecked(v)).collect();
        let centre = median_of_sorted(&sorted(&means));
        let alone = hosts.len() == 1;
        if alone {
            notes.push(format!(
                "host {} is the only {model} host: it cannot be compared with peers",
                hosts.keys().next().copied().unwrap_or_default()
            ));
        }
        for ((host, logs), m) in hosts.iter().zip(&means) {
            rows.push((
                *host,
                *model,
                *m,
                (!alone).then_some(m - centre),
                logs.len(),
            ));
        }
    }
    let residuals: Vec<f64> = rows.iter().filter_map(|r| r.3).collect();
    let scale = if residuals.len() < 3 {
        notes.push(format!(
            "{} comparable hosts: at least 3 are needed to score outliers",
            residuals.len()
        ));
        None
    } else {
        robust_scale(&residuals, &mut notes)
    };
    let within_sd = pooled_within_sd(&groups);
    let hosts = rows
        .into_iter()
        .map(|(host, model, log_mean, residual, n)| {
            let own_noise = within_sd / (n as f64).sqrt();
            let z = match (residual, scale) {
                (Some(r), Some((centre, s))) => Some((r - centre) / s.max(own_noise)),
                (Some(_), None) if residuals.len() >= 3 => Some(0.0),
                _ => None,
            };
            HostScore {
                host: host.to_owned(),
                cpu_model: model.to_owned(),
                mean: log_mean.exp(),
                z,
                outlier: z.is_some_and(|z| z.abs() > threshold),
            }
        })
        .collect();
    Ok(OutlierScan {
        hosts,
        threshold,
        notes,
    })
}

/// The pooled round-to-round standard deviation of ln(value) within hosts; 0 when every host
/// has one value (nothing to pool).
fn pooled_within_sd(groups: &crate::components::LogGroups<'_>) -> f64 {
    let (mut ss, mut df) = (0.0, 0usize);
    for logs in groups.values().flat_map(|hosts| hosts.values()) {
        let m = mean_unchecked(logs);
        ss += logs.iter().map(|y| (y - m) * (y - m)).sum::<f64>();
        df += logs.len() - 1;
    }
    if df == 0 {
        0.0
    } else {
        (ss / df as f64).sqrt()
    }
}

/// (centre, divisor) so that z = (x − centre) / divisor: MAD / 0.6745, else 1.253314 · MeanAD;
/// `None` when both spreads are zero (all alike: no outliers, z = 0).
fn robust_scale(values: &[f64], notes: &mut Vec<String>) -> Option<(f64, f64)> {
    let centre = median_of_sorted(&sorted(values));
    let deviations: Vec<f64> = values.iter().map(|v| (v - centre).abs()).collect();
    let mad = median_of_sorted(&sorted(&deviations));
    if mad > 0.0 && mad.is_finite() {
        return Some((centre, mad / 0.6745));
    }
    let mean_ad = mean_unchecked(&deviations);
    if mean_ad > 0.0 && mean_ad.is_finite() {
        notes.push(
            "MAD is 0 (most hosts identical): scored with the mean absolute deviation".into(),
        );
        return Some((centre, 1.253_314 * mean_ad));
    }
    notes.push("all comparable hosts have the same mean: none is an outlier".into());
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(model: &str, host: &str, value: f64) -> Observation {
        Observation {
            host: host.into(),
            cpu_model: model.into(),
            round: 0,
            arm: Arm::A,
            value,
        }
    }

    #[test]
    fn flags_the_slow_host_with_its_score() {
        let mut data: Vec<Observation> = (0..9)
            .map(|i| host("m", &format!("h{i}"), 100.0 + f64::from(i) * 0.2))
            .collect();
        data.push(host("m", "slow", 130.0));
        let scan = outlier_hosts(&data, Arm::A, IGLEWICZ_HOAGLIN_THRESHOLD).unwrap();
        let flagged: Vec<_> = scan.outliers().collect();
        assert_eq!(flagged.len(), 1);
        assert_eq!(flagged[0].host, "slow");
        assert!(flagged[0].z.unwrap() > 3.5);
    }

    #[test]
    fn a_rare_cpu_model_is_not_an_outlier() {
        let mut data: Vec<Observation> = (0..18)
            .map(|i| host("8275CL", &format!("c{i}"), 100.0 + f64::from(i % 5) * 0.3))
            .collect();
        data.push(host("8124M", "s0", 106.0));
        data.push(host("8124M", "s1", 106.5));
        let scan = outlier_hosts(&data, Arm::A, 3.5).unwrap();
        assert_eq!(scan.outliers().count(), 0, "{scan:?}");
    }

    #[test]
    fn a_host_off_by_no_more_than_its_own_noise_is_not_an_outlier() {
        // Three hosts of a model, rounds ±1.3%: the middle host's residual is 0 and the MAD
        // tiny, but a host 1.5% off on 6 such rounds is within its own noise (se 0.53%).
        let mut data = Vec::new();
        for (h, centre) in [("a", 100.0), ("b", 100.1), ("c", 101.5)] {
            for r in 0..6 {
                let wiggle = if r % 2 == 0 { 1.013 } else { 1.0 / 1.013 };
                data.push(host("m", h, centre * wiggle));
            }
        }
        let scan = outlier_hosts(&data, Arm::A, IGLEWICZ_HOAGLIN_THRESHOLD).unwrap();
        assert_eq!(scan.outliers().count(), 0, "{scan:?}");
        let c = scan.hosts.iter().find(|h| h.host == "c").unwrap();
        assert!(c.z.unwrap() > 2.0 && c.z.unwrap() < 3.5, "{c:?}");
    }

    #[test]
    fn identical_hosts_and_lonely_hosts_are_handled() {
        let data: Vec<Observation> = (0..5).map(|i| host("m", &format!("h{i}"), 1.0)).collect();
        let scan = outlier_hosts(&data, Arm::A, 3.5).unwrap();
        assert!(scan.hosts.iter().all(|h| h.z == Some(0.0) && !h.outlier));
        let lonely = outlier_hosts(&[host("m", "h", 1.0)], Arm::A, 3.5).unwrap();
        assert_eq!(lonely.hosts[0].z, None);
        assert!(outlier_hosts(&data, Arm::A, f64::NAN).is_err());
    }
}
