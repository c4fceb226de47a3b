//! E-divisive means (Matteson & James, "A Nonparametric Approach for Multiple Change Point
//! Analysis of Multivariate Data", JASA 2014), the detector MongoDB's performance team
//! (`signal-processing-algorithms`) and Apache Otava use on their nightly histories, and
//! quietbench's default until issue 31; kept as `ChangePointMethod::EDivisive`:
//!
//! 1. for every split τ of a segment into x = [0, τ) and y = [τ, n), the energy statistic
//!    q(τ) = m·k/n · (2/(mk)·Σ|xᵢ−yⱼ| − 1/C(m,2)·Σ|xᵢ−xₗ| − 1/C(k,2)·Σ|yⱼ−yₗ|),
//!    m = τ, k = n − τ: large when the two sides come from different distributions (it sees
//!    a shift of level, and of spread too), and scaled by m·k/n so that a split near an edge must
//!    be more convincing than one in the middle;
//! 2. the best split over all current segments is a candidate;
//! 3. a permutation test decides whether it is real: the observations are shuffled within each
//!    current segment (which destroys any change inside a segment but keeps the ones already
//!    found), the largest q is found again, and the p-value is the share of shuffles whose
//!    largest q reaches the observed one, (1 + count) / (1 + permutations);
//! 4. a significant candidate splits its segment and the search repeats; the first candidate
//!    that is not significant ends it.
//!
//! Its weakness (docs/statistics.md §9c): the shuffles assume exchangeable noise, so slowly
//! drifting (autocorrelated) noise alarms often, and it costs O(n²) per shuffle.

use super::{ChangePoint, ChangePointConfig, series_seed, shuffle, with_medians};
use crate::bootstrap::Resampler;
use crate::error::StatsError;

/// E-divisive's change points of `values` (already checked: non-empty, finite; `config`
/// validated), in index order.
pub(super) fn change_points(
    values: &[f64],
    config: &ChangePointConfig,
) -> Result<Vec<ChangePoint>, StatsError> {
    let mut rng = Resampler::new(series_seed(values, config.seed));
    let mut scratch = Scratch::default();
    let mut shuffled = values.to_vec();
    // Segment boundaries: [bounds[i], bounds[i+1]).
    let mut bounds = vec![0, values.len()];
    let mut found: Vec<(usize, f64, f64)> = Vec::new();
    while let Some((index, q)) =
        best_over_segments(values, &bounds, config.min_segment, &mut scratch)
    {
        // Values near ±f64::MAX overflow their distances; no split of them means anything.
        if !q.is_finite() {
            return Err(StatsError::Overflow {
                what: "change-point statistic",
            });
        }
        // Stop shuffling as soon as the count makes the candidate insignificant.
        let limit = (config.significance * f64::from(config.permutations + 1)).floor() as u64;
        let mut reached = 0u64;
        for _ in 0..config.permutations {
            shuffled.copy_from_slice(values);
            for w in bounds.windows(2) {
                shuffle(&mut rng, &mut shuffled[w[0]..w[1]]);
            }
            let best = best_over_segments(&shuffled, &bounds, config.min_segment, &mut scratch);
            // A shuffle that recreates the observed partition (the new level's runs moved to
            // the other end, say) has the same q, summed in another order: it must count as
            // reaching it, or rounding would make short histories look more significant than
            // any shuffle test can make them.
            if best.is_some_and(|(_, qp)| qp >= q - 1e-9 * q.abs()) {
                reached += 1;
                if reached >= limit {
                    break;
                }
            }
        }
        let p_value = (reached + 1) as f64 / f64::from(config.permutations + 1);
        if p_value > config.significance {
            break;
        }
        found.push((index, p_value, q));
        let at = bounds.partition_point(|&b| b < index);
        bounds.insert(at, index);
    }
    found.sort_by_key(|&(index, _, _)| index);
    with_medians(values, &found)
}

/// Buffers reused across segments and shuffles.
#[derive(Default)]
struct Scratch {
    left: Vec<f64>,
    right: Vec<f64>,
}

/// The best split over all segments: its absolute index and q.
fn best_over_segments(
    values: &[f64],
    bounds: &[usize],
    min_segment: usize,
    scratch: &mut Scratch,
) -> Option<(usize, f64)> {
    let mut best: Option<(usize, f64)> = None;
    for w in bounds.windows(2) {
        if let Some((tau, q)) = best_split(&values[w[0]..w[1]], min_segment, scratch)
            && best.is_none_or(|(_, b)| q > b)
        {
            best = Some((w[0] + tau, q));
        }
    }
    best
}

/// The split τ of `x` into [0, τ) and [τ, n), both at least `min_segment` long, with the largest
/// q, in O(n²): the within-left, within-right and between sums of |xᵢ − xⱼ| for every τ come
/// from each point's sums of distances to the points before and after it.
fn best_split(x: &[f64], min_segment: usize, scratch: &mut Scratch) -> Option<(usize, f64)> {
    let n = x.len();
    if n < 2 * min_segment {
        return None;
    }
    let Scratch { left, right } = scratch;
    left.clear();
    left.resize(n, 0.0);
    right.clear();
    right.resize(n, 0.0);
    for j in 0..n {
        for i in 0..j {
            let d = (x[i] - x[j]).abs();
            left[j] += d;
            right[i] += d;
        }
    }
    let total: f64 = left.iter().sum();
    // within_left(τ) = Σ_{j<τ} left[j]; within_right(τ) = Σ_{j≥τ} right[j].
    let mut within_left = left[..min_segment].iter().sum::<f64>();
    let mut within_right = right[min_segment..].iter().sum::<f64>();
    let mut best: Option<(usize, f64)> = None;
    for tau in min_segment..=n - min_segment {
        let m = tau as f64;
        let k = (n - tau) as f64;
        let between = total - within_left - within_right;
        let pairs = |c: f64| c * (c - 1.0) / 2.0;
        let mean_within = |sum: f64, c: f64| if c < 2.0 { 0.0 } else { sum / pairs(c) };
        let energy =
            2.0 * between / (m * k) - mean_within(within_left, m) - mean_within(within_right, k);
        let q = m * k / n as f64 * energy;
        if best.is_none_or(|(_, b)| q > b) {
            best = Some((tau, q));
        }
        if tau < n - min_segment {
            within_left += left[tau];
            within_right -= right[tau];
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::changepoint::{ChangePointMethod, change_points as detect};
    use rand_chacha::ChaCha8Rng;
    use rand_chacha::rand_core::{Rng, SeedableRng};

    /// Gaussian noise (Box–Muller) around `level`, relative SD `sd`.
    fn noise(rng: &mut ChaCha8Rng, n: usize, level: f64, sd: f64) -> Vec<f64> {
        (0..n)
            .map(|_| {
                let u1 = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                let u2 = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                let z = (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                level * (1.0 + sd * z)
            })
            .collect()
    }

    fn e_divisive() -> ChangePointConfig {
        ChangePointConfig {
            method: ChangePointMethod::EDivisive,
            ..ChangePointConfig::default()
        }
    }

    /// q by its definition, O(n⁴)-free but straight from the sums.
    fn q_by_definition(x: &[f64], tau: usize) -> f64 {
        let (a, b) = x.split_at(tau);
        let (m, k) = (a.len() as f64, b.len() as f64);
        let between: f64 = a
            .iter()
            .flat_map(|p| b.iter().map(move |q| (p - q).abs()))
            .sum();
        let within = |s: &[f64]| -> f64 {
            if s.len() < 2 {
                return 0.0;
            }
            let mut sum = 0.0;
            for i in 0..s.len() {
                for j in i + 1..s.len() {
                    sum += (s[i] - s[j]).abs();
                }
            }
            sum / (s.len() * (s.len() - 1) / 2) as f64
        };
        m * k / (m + k) * (2.0 * between / (m * k) - within(a) - within(b))
    }

    #[test]
    fn the_fast_split_search_agrees_with_the_definition() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut x = noise(&mut rng, 23, 100.0, 0.01);
        for v in &mut x[9..] {
            *v *= 1.03;
        }
        for min in [1, 2, 4] {
            let mut scratch = Scratch::default();
            let (tau, q) = best_split(&x, min, &mut scratch).unwrap();
            let (best_tau, best_q) = (min..=x.len() - min)
                .map(|t| (t, q_by_definition(&x, t)))
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .unwrap();
            assert_eq!(tau, best_tau, "min segment {min}");
            assert!((q - best_q).abs() < 1e-9 * best_q.abs(), "{q} vs {best_q}");
        }
    }

    #[test]
    fn a_five_percent_step_is_found_where_it_is_with_its_size() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut x = noise(&mut rng, 60, 100.0, 0.01);
        for v in &mut x[35..] {
            *v *= 1.05;
        }
        let found = detect(&x, &e_divisive()).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        let cp = found[0];
        assert_eq!(cp.index, 35);
        let change = cp.change.unwrap();
        assert!((0.04..0.06).contains(&change), "{change}");
        assert!(cp.p_value <= 0.01);
        assert!((cp.before_median - 100.0).abs() < 1.0);
    }

    #[test]
    fn two_steps_give_two_points_with_the_medians_of_their_own_segments() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let mut x = noise(&mut rng, 90, 100.0, 0.005);
        for v in &mut x[30..] {
            *v *= 0.95;
        }
        for v in &mut x[60..] {
            *v *= 1.1;
        }
        let found = detect(&x, &e_divisive()).unwrap();
        let at: Vec<usize> = found.iter().map(|c| c.index).collect();
        assert_eq!(at, vec![30, 60]);
        assert!((found[0].after_median - 95.0).abs() < 0.5);
        assert!((found[1].before_median - 95.0).abs() < 0.5);
        assert!((found[1].after_median - 104.5).abs() < 0.6);
    }

    #[test]
    fn noise_alone_raises_about_as_many_alarms_as_the_significance_promises() {
        // 200 series of 50 points: at significance 0.05 the first candidate of a noise series
        // is accepted 5% of the time, so about 10 series alarm; 25 would be a broken test.
        let config = ChangePointConfig {
            significance: 0.05,
            ..e_divisive()
        };
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let alarmed = (0..200)
            .filter(|_| {
                let x = noise(&mut rng, 50, 100.0, 0.01);
                !detect(&x, &config).unwrap().is_empty()
            })
            .count();
        println!("{alarmed} of 200 noise series alarmed");
        assert!(
            (2..=22).contains(&alarmed),
            "{alarmed} of 200 noise series alarmed"
        );
    }

    #[test]
    fn the_same_series_and_seed_give_the_same_answer() {
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let mut x = noise(&mut rng, 40, 10.0, 0.02);
        for v in &mut x[20..] {
            *v *= 1.04;
        }
        let c = e_divisive();
        assert_eq!(detect(&x, &c).unwrap(), detect(&x, &c).unwrap());
    }

    #[test]
    fn short_constant_and_empty_series_have_no_change_points() {
        let c = e_divisive();
        assert!(detect(&[], &c).unwrap().is_empty());
        assert!(detect(&[1.0, 2.0, 3.0], &c).unwrap().is_empty());
        assert!(detect(&[5.0; 30], &c).unwrap().is_empty());
    }

    #[test]
    fn a_single_odd_run_is_not_a_change() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let x = noise(&mut rng, 40, 100.0, 0.01);
        let c = e_divisive();
        assert!(detect(&x, &c).unwrap().is_empty());
        for at in [20, 39] {
            let mut odd = x.clone();
            odd[at] = 130.0;
            let found = detect(&odd, &c).unwrap();
            assert!(found.is_empty(), "one odd run at {at}: {found:?}");
        }
    }
}
