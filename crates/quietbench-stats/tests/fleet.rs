//! The fleet of CONTEXT §1: 20 c5.large instances, two CPU models whose speeds differ by 6%
//! (Xeon 8124M vs 8275CL), same-model instances within 2% of each other, 20 sysbench runs each.
//! The variance components must recover the simulated shares, the hosts must group by model,
//! and no host may be called an outlier for having drawn the other CPU.

mod common;

use common::Sim;
use quietbench_stats::{
    Arm, IGLEWICZ_HOAGLIN_THRESHOLD, Observation, outlier_hosts, variance_components,
};

const SKYLAKE: &str = "Intel(R) Xeon(R) Platinum 8124M CPU @ 3.00GHz";
const CASCADE: &str = "Intel(R) Xeon(R) Platinum 8275CL CPU @ 3.00GHz";
const GAP: f64 = 1.06; // 8275CL is 6% faster
const ROUND_SD: f64 = 0.005; // run-to-run noise of one instance, log scale
const HOSTS_PER_MODEL: usize = 10;
const ROUNDS: u32 = 20;

/// The host offsets of one model: evenly spaced over ±1% (a 2% spread), mean zero, so that the
/// host component of the truth is known exactly rather than drawn.
fn fixed_offsets() -> Vec<f64> {
    let k = HOSTS_PER_MODEL as f64 - 1.0;
    (0..HOSTS_PER_MODEL)
        .map(|i| -0.01 + 0.02 * i as f64 / k)
        .collect()
}

/// Seconds per sysbench run for every host and round; `offsets[m][h]` is host h of model m.
fn fleet(sim: &mut Sim, offsets: [&[f64]; 2]) -> Vec<Observation> {
    let mut out = Vec::new();
    for (m, (model, speed)) in [(SKYLAKE, 1.0), (CASCADE, GAP)].into_iter().enumerate() {
        for (h, offset) in offsets[m].iter().enumerate() {
            for round in 0..ROUNDS {
                let log = 10f64.ln() - f64::ln(speed) + offset + ROUND_SD * sim.normal();
                out.push(Observation {
                    host: format!("i-{m}{h:02}"),
                    cpu_model: model.into(),
                    round,
                    arm: Arm::A,
                    value: log.exp(),
                });
            }
        }
    }
    out
}

/// Analytic shares of the simulation's truth [models, hosts, rounds]: CPU models as a fixed
/// factor with half the hosts on each, w(1 − w)·ln(1.06)²; hosts with variance σ_h²; rounds
/// ROUND_SD².
fn true_shares(host_variance: f64) -> [f64; 3] {
    let parts = [0.25 * GAP.ln().powi(2), host_variance, ROUND_SD.powi(2)];
    let total: f64 = parts.iter().sum();
    parts.map(|p| p / total)
}

#[test]
fn fleet_variance_shares_grouping_and_no_false_outliers() {
    let offsets = fixed_offsets();
    // Pooled host variance with the (hosts − models) divisor the ANOVA estimator targets.
    let mean = offsets.iter().sum::<f64>() / offsets.len() as f64;
    let host_variance =
        offsets.iter().map(|o| (o - mean).powi(2)).sum::<f64>() / (offsets.len() - 1) as f64;
    let truth_all = true_shares(host_variance);
    let truth = truth_all[0];

    let mut sim = Sim::new(2024);
    let data = fleet(&mut sim, [&offsets, &offsets]);
    let c = variance_components(&data, Arm::A).unwrap();
    let shares = c.shares.unwrap();
    eprintln!(
        "fleet: between-model share {:.2}% (truth {:.2}%), hosts {:.2}% ({:.2}%), \
         within {:.2}% ({:.2}%)",
        shares.between_models * 100.0,
        truth * 100.0,
        shares.between_hosts * 100.0,
        truth_all[1] * 100.0,
        shares.within_host * 100.0,
        truth_all[2] * 100.0,
    );
    assert!(
        (shares.between_models - truth).abs() <= 0.01,
        "between-model share {} vs truth {truth}",
        shares.between_models
    );
    let sum = shares.between_models + shares.between_hosts + shares.within_host;
    assert!((sum - 1.0).abs() < 1e-12);
    assert!((c.within_host.sqrt() - ROUND_SD).abs() < 0.0005, "{c:?}");

    // Hosts group by model: two groups of ten, every 8275CL host faster than every 8124M host.
    assert_eq!(c.models.len(), 2);
    let slowest_cascade = c.models.iter().find(|m| m.cpu_model == CASCADE).unwrap();
    let fastest_skylake = c.models.iter().find(|m| m.cpu_model == SKYLAKE).unwrap();
    assert!(c.models.iter().all(|m| m.hosts.len() == HOSTS_PER_MODEL));
    let max_cascade = slowest_cascade
        .hosts
        .iter()
        .map(|h| h.mean)
        .fold(0.0, f64::max);
    let min_skylake = fastest_skylake
        .hosts
        .iter()
        .map(|h| h.mean)
        .fold(f64::MAX, f64::min);
    assert!(max_cascade < min_skylake);
    let gap = fastest_skylake.mean / slowest_cascade.mean;
    assert!((gap - GAP).abs() < 0.003, "model gap {gap}");

    // No host is an outlier for its CPU model; one broken instance (+8%) is, alone.
    let scan = outlier_hosts(&data, Arm::A, IGLEWICZ_HOAGLIN_THRESHOLD).unwrap();
    let worst = scan
        .hosts
        .iter()
        .filter_map(|h| h.z)
        .fold(0.0, |m: f64, z| m.max(z.abs()));
    eprintln!("fleet: largest |z| {worst:.2}");
    assert_eq!(
        scan.outliers().count(),
        0,
        "{:?}",
        scan.outliers().collect::<Vec<_>>()
    );
    let mut broken = offsets.clone();
    broken[3] += 0.08;
    let data = fleet(&mut sim, [&offsets, &broken]);
    let scan = outlier_hosts(&data, Arm::A, IGLEWICZ_HOAGLIN_THRESHOLD).unwrap();
    let flagged: Vec<_> = scan.outliers().collect();
    assert_eq!(flagged.len(), 1, "{flagged:?}");
    assert_eq!(flagged[0].host, "i-103");
    eprintln!("fleet: broken host z = {:.1}", flagged[0].z.unwrap());
}

#[test]
fn model_share_is_unbiased_over_random_fleets() {
    // Hosts drawn at random (σ_h = 0.5%, so same-model hosts fall within about 2%): over many
    // fleets the estimate must centre on the analytic share. One fleet's estimate scatters by
    // about a point, mostly because 20 hosts pin σ_h down only to ±33%.
    const FLEETS: usize = 60;
    let host_sd = 0.005;
    let truth = true_shares(host_sd * host_sd)[0];
    let mut sim = Sim::new(99);
    let mut estimates = Vec::with_capacity(FLEETS);
    for _ in 0..FLEETS {
        let offsets: [Vec<f64>; 2] = std::array::from_fn(|_| {
            (0..HOSTS_PER_MODEL)
                .map(|_| host_sd * sim.normal())
                .collect()
        });
        let data = fleet(&mut sim, [&offsets[0], &offsets[1]]);
        let c = variance_components(&data, Arm::A).unwrap();
        estimates.push(c.shares.unwrap().between_models);
    }
    let mean = estimates.iter().sum::<f64>() / FLEETS as f64;
    let sd =
        (estimates.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / (FLEETS - 1) as f64).sqrt();
    eprintln!(
        "random fleets: between-model share {:.2}% ± {:.2} (SD of one fleet), truth {:.2}%",
        mean * 100.0,
        sd * 100.0,
        truth * 100.0
    );
    assert!(
        (mean - truth).abs() <= 0.01,
        "mean share {mean} vs truth {truth}"
    );
}
