//! Where probe threads go. This is the first, simple policy: keep the housekeeping CPU (the
//! lowest allowed one, where the kernel's and the agent's own work tends to land) free of probe
//! threads whenever another CPU exists; an explicit CPU list always wins. Interrupt-aware
//! placement builds on this shape.

use serde::Serialize;

/// The policy that chose the CPUs, as reported in every result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PlacementPolicy {
    /// The caller's CPU list.
    Explicit,
    /// The agent's choice: CPUs other than the housekeeping one first.
    QuietFirst,
}

impl PlacementPolicy {
    /// The name used on the wire and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Explicit => "explicit",
            Self::QuietFirst => "quiet-first",
        }
    }
}

/// The planned CPU of each probe thread, and the housekeeping CPUs left to everything else.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlacementPlan {
    /// How the CPUs were chosen.
    pub policy: PlacementPolicy,
    /// `thread_cpus[i]` is the CPU of probe thread i.
    pub thread_cpus: Vec<u32>,
    /// CPUs for the agent's runtime and supervisor threads.
    pub housekeeping_cpus: Vec<u32>,
    /// True when two probe threads share a CPU (more threads than usable CPUs).
    pub shares_cpus: bool,
}

/// The request cannot be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// No thread to place.
    #[error("a probe needs at least one thread")]
    NoThreads,
    /// The process may run nowhere (an empty affinity mask).
    #[error("the agent's CPU affinity is empty: it may run on no CPU")]
    NoAllowedCpus,
    /// An explicit CPU is outside what the agent may use.
    #[error(
        "CPU {cpu} is not available to the agent (it may use CPUs {allowed}); pick CPUs from that list"
    )]
    CpuNotAllowed {
        /// The CPU asked for.
        cpu: u32,
        /// The allowed CPUs, in list format.
        allowed: String,
    },
}

/// Plans where `threads` probe threads run, given the CPUs the agent may use and an optional
/// explicit list (threads take its CPUs in turn).
pub fn plan_placement(
    threads: usize,
    allowed_cpus: &[u32],
    explicit_cpus: &[u32],
) -> Result<PlacementPlan, PlacementError> {
    if threads == 0 {
        return Err(PlacementError::NoThreads);
    }
    let mut allowed = allowed_cpus.to_vec();
    allowed.sort_unstable();
    allowed.dedup();
    let Some(&housekeeping) = allowed.first() else {
        return Err(PlacementError::NoAllowedCpus);
    };
    let housekeeping_cpus = vec![housekeeping];

    let (policy, usable) = if explicit_cpus.is_empty() {
        let quiet: Vec<u32> = if allowed.len() > 1 {
            allowed[1..].to_vec()
        } else {
            allowed.clone()
        };
        (PlacementPolicy::QuietFirst, quiet)
    } else {
        if let Some(&cpu) = explicit_cpus.iter().find(|c| !allowed.contains(c)) {
            return Err(PlacementError::CpuNotAllowed {
                cpu,
                allowed: join_cpus(&allowed),
            });
        }
        (PlacementPolicy::Explicit, explicit_cpus.to_vec())
    };
    let thread_cpus: Vec<u32> = (0..threads).map(|i| usable[i % usable.len()]).collect();
    let mut distinct = thread_cpus.clone();
    distinct.sort_unstable();
    distinct.dedup();
    Ok(PlacementPlan {
        policy,
        shares_cpus: distinct.len() < thread_cpus.len(),
        thread_cpus,
        housekeeping_cpus,
    })
}

/// CPU ids joined by commas, for messages.
fn join_cpus(cpus: &[u32]) -> String {
    cpus.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_cpu0_for_housekeeping_when_it_can() {
        let plan = plan_placement(1, &[0, 1], &[]).unwrap();
        assert_eq!(plan.thread_cpus, vec![1]);
        assert_eq!(plan.housekeeping_cpus, vec![0]);
        assert_eq!(plan.policy, PlacementPolicy::QuietFirst);
        assert!(!plan.shares_cpus);
    }

    #[test]
    fn spreads_threads_and_says_when_they_share() {
        let plan = plan_placement(3, &[0, 1, 2, 3], &[]).unwrap();
        assert_eq!(plan.thread_cpus, vec![1, 2, 3]);
        assert!(!plan.shares_cpus);
        let plan = plan_placement(3, &[0, 1], &[]).unwrap();
        assert_eq!(plan.thread_cpus, vec![1, 1, 1]);
        assert!(plan.shares_cpus);
    }

    #[test]
    fn a_single_cpu_machine_uses_its_only_cpu() {
        let plan = plan_placement(1, &[0], &[]).unwrap();
        assert_eq!(plan.thread_cpus, vec![0]);
    }

    #[test]
    fn an_explicit_list_wins_and_is_checked() {
        let plan = plan_placement(2, &[0, 1, 2], &[0]).unwrap();
        assert_eq!(plan.thread_cpus, vec![0, 0]);
        assert_eq!(plan.policy, PlacementPolicy::Explicit);
        let err = plan_placement(1, &[0, 1], &[5]).unwrap_err();
        assert_eq!(
            err,
            PlacementError::CpuNotAllowed {
                cpu: 5,
                allowed: "0,1".into()
            }
        );
        assert!(err.to_string().contains("CPU 5"));
    }

    #[test]
    fn refuses_nothing_to_place_or_nowhere_to_place_it() {
        assert_eq!(plan_placement(0, &[0], &[]), Err(PlacementError::NoThreads));
        assert_eq!(
            plan_placement(1, &[], &[]),
            Err(PlacementError::NoAllowedCpus)
        );
    }
}
