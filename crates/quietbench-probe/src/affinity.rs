//! Thread pinning with sched_setaffinity, and reading back where a thread may and does run.

use nix::sched::{CpuSet, sched_getaffinity, sched_getcpu, sched_setaffinity};
use nix::unistd::Pid;

/// Pinning or reading affinity failed.
#[derive(Debug, thiserror::Error)]
pub enum AffinityError {
    /// The CPU id does not fit the kernel's CPU set.
    #[error("CPU {cpu} is beyond the largest CPU set this system supports ({max} CPUs)")]
    OutOfRange {
        /// The CPU asked for.
        cpu: u32,
        /// The CPU set's capacity.
        max: usize,
    },
    /// The kernel refused.
    #[error("{call} failed: {errno}")]
    Sys {
        /// The system call.
        call: &'static str,
        /// Its error.
        errno: nix::Error,
    },
}

/// Pins the calling thread to exactly `cpus`.
pub fn pin_current_thread(cpus: &[u32]) -> Result<(), AffinityError> {
    let mut set = CpuSet::new();
    for &cpu in cpus {
        set.set(cpu as usize)
            .map_err(|_| AffinityError::OutOfRange {
                cpu,
                max: CpuSet::count(),
            })?;
    }
    // Pid 0 is the calling thread for sched_setaffinity.
    sched_setaffinity(Pid::from_raw(0), &set).map_err(|errno| AffinityError::Sys {
        call: "sched_setaffinity",
        errno,
    })
}

/// The CPUs the calling thread may run on, read back from the kernel.
pub fn current_thread_affinity() -> Result<Vec<u32>, AffinityError> {
    let set = sched_getaffinity(Pid::from_raw(0)).map_err(|errno| AffinityError::Sys {
        call: "sched_getaffinity",
        errno,
    })?;
    Ok((0..CpuSet::count())
        .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
        .map(|cpu| cpu as u32)
        .collect())
}

/// The CPU the calling thread is running on right now.
pub fn current_cpu() -> Result<u32, AffinityError> {
    sched_getcpu()
        .map(|cpu| cpu as u32)
        .map_err(|errno| AffinityError::Sys {
            call: "sched_getcpu",
            errno,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_a_thread_and_reads_it_back() {
        let allowed = current_thread_affinity().unwrap();
        let target = *allowed.last().unwrap();
        std::thread::spawn(move || {
            pin_current_thread(&[target]).unwrap();
            assert_eq!(current_thread_affinity().unwrap(), vec![target]);
            assert_eq!(current_cpu().unwrap(), target);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn refuses_a_cpu_beyond_the_set() {
        let err = std::thread::spawn(|| pin_current_thread(&[100_000]))
            .join()
            .unwrap()
            .unwrap_err();
        assert!(
            matches!(err, AffinityError::OutOfRange { cpu: 100_000, .. }),
            "{err}"
        );
    }
}
