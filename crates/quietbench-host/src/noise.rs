//! Noise monitors: what disturbed the probe CPUs and threads during an interval. Sampled by the
//! agent's supervisor thread (on the housekeeping CPU) at every interval boundary, never by a
//! probe thread.
//!
//! Each figure is `None` where the machine does not expose it, and the reason is listed in
//! `unavailable`: a monitor that cannot read never reports zero noise.

use serde::Serialize;

use crate::HostRoot;
use crate::interrupts::{InterruptTable, interrupts_on_cpus, read_interrupts};
use crate::procstat::{
    ProcStat, SoftirqTable, TaskStat, TaskSwitches, read_proc_stat, read_softirqs,
    read_task_sched_migrations, read_task_stat, read_task_switches, softirqs_on_cpus,
};

/// /proc/PID/task/TID/schedstat: nanoseconds on CPU, nanoseconds waiting on a run queue, and
/// timeslices. The run-queue wait is the precise measure of "the probe wanted its CPU and
/// someone else had it": nanosecond accounting, unlike /proc/stat's 10 ms ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedStat {
    /// Time on CPU, ns.
    pub on_cpu_ns: u64,
    /// Time runnable but waiting for the CPU, ns.
    pub run_delay_ns: u64,
}

/// Parses a schedstat line; `None` if it does not hold at least two numbers.
pub fn parse_schedstat(text: &str) -> Option<SchedStat> {
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    Some(SchedStat {
        on_cpu_ns: fields.next()?.ok()?,
        run_delay_ns: fields.next()?.ok()?,
    })
}

/// One probe thread's counters at an instant.
#[derive(Debug, Clone)]
pub struct ThreadSample {
    /// Kernel thread id.
    pub tid: u32,
    /// Context switches.
    pub switches: Option<TaskSwitches>,
    /// CPU times in ticks.
    pub stat: Option<TaskStat>,
    /// Migrations (CONFIG_SCHED_DEBUG kernels).
    pub migrations: Option<u64>,
    /// Nanosecond scheduler accounting (CONFIG_SCHEDSTATS kernels).
    pub schedstat: Option<SchedStat>,
}

/// Everything the monitors read at one instant.
#[derive(Debug, Clone)]
pub struct NoiseSnapshot {
    at: std::time::Instant,
    stat: Option<ProcStat>,
    interrupts: Option<InterruptTable>,
    softirqs: Option<SoftirqTable>,
    threads: Vec<ThreadSample>,
    cpu_khz: Vec<Option<u64>>,
    unavailable: Vec<String>,
}

/// Reads the counters of `cpus` and of the threads `tids` of process `pid`.
pub fn take_snapshot(root: &HostRoot, pid: u32, tids: &[u32], cpus: &[u32]) -> NoiseSnapshot {
    let mut unavailable = Vec::new();
    let mut note =
        |what: &str, err: &dyn std::fmt::Display| unavailable.push(format!("{what}: {err}"));
    let stat = read_proc_stat(root)
        .map_err(|e| note("steal and CPU time", &e))
        .ok();
    let interrupts = read_interrupts(root)
        .map_err(|e| note("interrupts", &e))
        .ok();
    let softirqs = read_softirqs(root).map_err(|e| note("softirqs", &e)).ok();
    let threads = tids
        .iter()
        .map(|&tid| ThreadSample {
            tid,
            switches: read_task_switches(root, pid, tid).ok(),
            stat: read_task_stat(root, pid, tid).ok(),
            migrations: read_task_sched_migrations(root, pid, tid).ok().flatten(),
            schedstat: root
                .read(&format!("/proc/{pid}/task/{tid}/schedstat"))
                .ok()
                .and_then(|t| parse_schedstat(&t)),
        })
        .collect();
    let cpu_khz = cpus
        .iter()
        .map(|cpu| {
            root.read(&format!(
                "/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq"
            ))
            .ok()
            .and_then(|t| t.trim().parse().ok())
        })
        .collect();
    NoiseSnapshot {
        at: std::time::Instant::now(),
        stat,
        interrupts,
        softirqs,
        threads,
        cpu_khz,
        unavailable,
    }
}

/// What disturbed the probe CPUs and threads between two snapshots.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct IntervalNoise {
    /// Wall time between the snapshots, ns.
    pub elapsed_ns: u64,
    /// Steal ticks over all ticks of the probe CPUs (the hypervisor ran someone else).
    pub steal_fraction: Option<f64>,
    /// Hardware interrupts that landed on the probe CPUs.
    pub interrupts: Option<u64>,
    /// Softirqs that ran on the probe CPUs.
    pub softirqs: Option<u64>,
    /// Busy time of the probe CPUs not spent by the probe threads, over all their time (10 ms
    /// tick resolution: meaningful over seconds, not within one short interval).
    pub foreign_cpu_fraction: Option<f64>,
    /// Time the probe threads were runnable but waited for a CPU, ns (summed over threads).
    pub runqueue_wait_ns: Option<u64>,
    /// Involuntary context switches of the probe threads.
    pub involuntary_switches: Option<u64>,
    /// Migrations of the probe threads between CPUs.
    pub migrations: Option<u64>,
    /// Mean current frequency of the probe CPUs, MHz, where cpufreq is exposed.
    pub cpu_mhz: Option<f64>,
    /// Monitors that could not read, and why.
    pub unavailable: Vec<String>,
}

fn sum_threads<F: Fn(&ThreadSample) -> Option<u64>>(
    before: &NoiseSnapshot,
    after: &NoiseSnapshot,
    f: F,
) -> Option<u64> {
    let mut total = 0u64;
    for a in &after.threads {
        let b = before.threads.iter().find(|b| b.tid == a.tid)?;
        total += f(a)?.saturating_sub(f(b)?);
    }
    Some(total)
}

/// The noise between two snapshots of the same CPUs and threads.
pub fn noise_between(before: &NoiseSnapshot, after: &NoiseSnapshot, cpus: &[u32]) -> IntervalNoise {
    let mut unavailable = after.unavailable.clone();
    let mut noise = IntervalNoise {
        elapsed_ns: u64::try_from(after.at.saturating_duration_since(before.at).as_nanos())
            .unwrap_or(u64::MAX),
        ..Default::default()
    };
    if let (Some(b), Some(a)) = (&before.stat, &after.stat) {
        let (mut steal, mut total, mut busy) = (Some(0u64), 0u64, 0u64);
        for &cpu in cpus {
            let (Some(cb), Some(ca)) = (b.cpu(cpu), a.cpu(cpu)) else {
                continue;
            };
            steal = match (steal, cb.steal, ca.steal) {
                (Some(s), Some(x), Some(y)) => Some(s + y.saturating_sub(x)),
                _ => None,
            };
            total += ca.total().saturating_sub(cb.total());
            busy += ca.busy().saturating_sub(cb.busy());
        }
        if total > 0 {
            noise.steal_fraction = steal.map(|s| s as f64 / total as f64);
            let probe_ticks = sum_threads(before, after, |t| {
                t.stat.map(|s| s.utime_ticks + s.stime_ticks)
            });
            noise.foreign_cpu_fraction =
                probe_ticks.map(|p| busy.saturating_sub(p) as f64 / total as f64);
        }
    }
    if let (Some(b), Some(a)) = (&before.interrupts, &after.interrupts) {
        match interrupts_on_cpus(b, a, cpus) {
            Ok(n) => noise.interrupts = Some(n),
            Err(e) => unavailable.push(format!("interrupts: {e}")),
        }
    }
    if let (Some(b), Some(a)) = (&before.softirqs, &after.softirqs) {
        match softirqs_on_cpus(b, a, cpus) {
            Ok(rows) => noise.softirqs = Some(rows.iter().map(|(_, n)| n).sum()),
            Err(e) => unavailable.push(format!("softirqs: {e}")),
        }
    }
    noise.runqueue_wait_ns = sum_threads(before, after, |t| t.schedstat.map(|s| s.run_delay_ns));
    noise.involuntary_switches =
        sum_threads(before, after, |t| t.switches.and_then(|s| s.nonvoluntary));
    noise.migrations = sum_threads(before, after, |t| t.migrations);
    let khz: Vec<u64> = after.cpu_khz.iter().flatten().copied().collect();
    if !khz.is_empty() {
        noise.cpu_mhz = Some(khz.iter().sum::<u64>() as f64 / khz.len() as f64 / 1000.0);
    }
    if noise.runqueue_wait_ns.is_none() && !after.threads.is_empty() {
        unavailable.push("run-queue wait: /proc/PID/task/TID/schedstat is not readable (kernel without schedstats?)".into());
    }
    if noise.migrations.is_none() && !after.threads.is_empty() {
        unavailable.push(
            "migrations: /proc/PID/task/TID/sched is absent (kernel without CONFIG_SCHED_DEBUG)"
                .into(),
        );
    }
    unavailable.sort();
    unavailable.dedup();
    noise.unavailable = unavailable;
    noise
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_captured_schedstat() {
        let text = include_str!("../tests/fixtures/kvm-2vcpu-xeon/proc/self-sample/schedstat");
        let s = parse_schedstat(text).unwrap();
        assert_eq!(
            s,
            SchedStat {
                on_cpu_ns: 348_473,
                run_delay_ns: 0
            }
        );
        assert_eq!(parse_schedstat(""), None);
        assert_eq!(parse_schedstat("12 x 3"), None);
    }

    #[test]
    fn live_snapshots_of_a_busy_thread_show_its_own_time_not_foreign_time() {
        let root = HostRoot::live();
        let pid = std::process::id();
        let (tx, rx) = std::sync::mpsc::channel();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop2 = stop.clone();
        let spinner = std::thread::spawn(move || {
            tx.send(nix::unistd::gettid().as_raw() as u32).unwrap();
            while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        let tid = rx.recv().unwrap();
        let cpus: Vec<u32> = crate::read_fingerprint(&root).online_cpus;
        let before = take_snapshot(&root, pid, &[tid], &cpus);
        std::thread::sleep(std::time::Duration::from_millis(300));
        let after = take_snapshot(&root, pid, &[tid], &cpus);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        spinner.join().unwrap();
        let noise = noise_between(&before, &after, &cpus);
        assert!(noise.elapsed_ns >= 300_000_000);
        assert!(
            noise
                .steal_fraction
                .is_some_and(|s| (0.0..=1.0).contains(&s)),
            "{noise:?}"
        );
        assert!(noise.interrupts.is_some(), "{noise:?}");
        assert!(noise.involuntary_switches.is_some(), "{noise:?}");
        assert!(noise.runqueue_wait_ns.is_some(), "{noise:?}");
        let foreign = noise.foreign_cpu_fraction.unwrap();
        assert!((0.0..=1.0).contains(&foreign), "{noise:?}");
    }

    #[test]
    fn a_missing_proc_is_unavailable_not_zero() {
        let dir = tempfile::tempdir().unwrap();
        let root = HostRoot::at(dir.path());
        let a = take_snapshot(&root, 1, &[1], &[0]);
        let b = take_snapshot(&root, 1, &[1], &[0]);
        let noise = noise_between(&a, &b, &[0]);
        assert_eq!(noise.steal_fraction, None);
        assert_eq!(noise.interrupts, None);
        assert_eq!(noise.runqueue_wait_ns, None);
        assert!(
            noise.unavailable.iter().any(|u| u.starts_with("steal")),
            "{:?}",
            noise.unavailable
        );
    }
}
