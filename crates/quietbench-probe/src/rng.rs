//! The probes' pseudo-random generator: the workspace's one SplitMix64
//! ([`quietbench_stats::rng`]), under the name the probes use.

pub(crate) use quietbench_stats::rng::SplitMix64 as Rng;
