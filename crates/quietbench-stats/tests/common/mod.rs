//! Simulated A/B runs with a known truth, shared by the statistical tests.
//!
//! Model, on the log scale, for host h, round r and arm v measured in slot s (0 or 1, the
//! order drawn at random within each round):
//!   ln value = host_offset(h) + drift · (r + s/2) + [v = B] · (effect + interaction(h)) + e,
//!   e ~ N(0, sd), or with probability `spike_rate` e + ln(1 + spike) (a noisy neighbour).
//! A per-round log-ratio therefore has SD sd·√2 around effect + interaction(h) when there is no
//! drift and no spike.

#![allow(dead_code)]

use quietbench_stats::{Arm, Observation};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};

/// The tests' generator.
pub struct Sim(ChaCha8Rng);

impl Sim {
    pub fn new(seed: u64) -> Self {
        Sim(ChaCha8Rng::seed_from_u64(seed))
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller; one of the pair is discarded for simplicity).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // (0, 1]
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    pub fn coin(&mut self) -> bool {
        self.0.next_u32() & 1 == 1
    }

    pub fn seed(&mut self) -> u64 {
        self.0.next_u64()
    }
}

/// A simulated host.
#[derive(Clone, Debug)]
pub struct SimHost {
    pub name: String,
    pub cpu_model: String,
    /// ln of the host's speed factor (CPU model + host).
    pub offset: f64,
    /// The host's own deviation from the fleet's true log-ratio (host × arm interaction).
    pub interaction: f64,
}

/// Parameters of a simulated paired run.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub hosts: Vec<SimHost>,
    pub rounds: u32,
    /// True ln(B / A).
    pub effect: f64,
    /// SD of one value's log noise.
    pub sd: f64,
    /// Log drift per round (shared by both arms).
    pub drift: f64,
    /// Probability that a value gets a spike.
    pub spike_rate: f64,
    /// Relative size of a spike (0.2 for +20%).
    pub spike: f64,
    /// Randomise the order within a round; when false A always runs first.
    pub randomize_order: bool,
}

impl Scenario {
    /// `hosts` identical hosts of one model, no drift, no spikes.
    pub fn simple(hosts: usize, rounds: u32, effect: f64, sd: f64) -> Self {
        Scenario {
            hosts: (0..hosts)
                .map(|i| SimHost {
                    name: format!("host-{i:02}"),
                    cpu_model: "Xeon 8275CL".into(),
                    offset: 0.0,
                    interaction: 0.0,
                })
                .collect(),
            rounds,
            effect,
            sd,
            drift: 0.0,
            spike_rate: 0.0,
            spike: 0.0,
            randomize_order: true,
        }
    }

    /// Gives hosts random offsets (SD `offset_sd`) and interactions (SD `interaction_sd`).
    pub fn with_host_spread(mut self, sim: &mut Sim, offset_sd: f64, interaction_sd: f64) -> Self {
        for h in &mut self.hosts {
            h.offset = offset_sd * sim.normal();
            h.interaction = interaction_sd * sim.normal();
        }
        self
    }

    /// Draws the observations.
    pub fn run(&self, sim: &mut Sim) -> Vec<Observation> {
        let mut out = Vec::with_capacity(self.hosts.len() * self.rounds as usize * 2);
        for h in &self.hosts {
            for r in 0..self.rounds {
                let b_first = self.randomize_order && sim.coin();
                for (slot, arm) in [(0, Arm::A), (1, Arm::B)] {
                    let slot = if b_first { 1 - slot } else { slot };
                    let mut log = h.offset
                        + self.drift * (f64::from(r) + f64::from(slot) / 2.0)
                        + self.sd * sim.normal();
                    if arm == Arm::B {
                        log += self.effect + h.interaction;
                    }
                    if self.spike_rate > 0.0 && sim.uniform() < self.spike_rate {
                        log += self.spike.ln_1p();
                    }
                    out.push(Observation {
                        host: h.name.clone(),
                        cpu_model: h.cpu_model.clone(),
                        round: r,
                        arm,
                        value: 100.0 * log.exp(),
                    });
                }
            }
        }
        out
    }
}

/// Monte-Carlo standard error of a rate p estimated from n trials.
pub fn mc_se(p: f64, n: usize) -> f64 {
    (p * (1.0 - p) / n as f64).sqrt()
}
