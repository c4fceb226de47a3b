//! CPU time and scheduler noise: /proc/stat, /proc/softirqs and a thread's status, stat and
//! sched files.
//!
//! The noise monitor samples these around a run: steal says the hypervisor took the vCPU away,
//! softirqs say the kernel did network or timer work on a measured CPU, and a probe thread's
//! involuntary switches and migrations say something else ran in its place or moved it.

use std::io::ErrorKind;

use serde::Serialize;

use crate::proc_table::{cpu_table, parse_digits, split_counts};
use crate::{HostRoot, ReadError};

/// The errors of this module's parsers and delta helpers: the same types as
/// [`crate::interrupts`], since both read the same kind of /proc tables (see `proc_table`).
pub use crate::proc_table::{DeltaError, ParseError};

const STAT: &str = "/proc/stat";
const SOFTIRQS: &str = "/proc/softirqs";
const TASK_STATUS: &str = "/proc/<pid>/task/<tid>/status";
const TASK_STAT: &str = "/proc/<pid>/task/<tid>/stat";
const PROCESS_STAT: &str = "/proc/<pid>/stat";

/// A reader of a /proc file failed: it could not be read, or was read but is malformed. The
/// error of this module's readers and of [`crate::smaps`]'s.
#[derive(Debug, thiserror::Error)]
pub enum ProcStatError {
    /// The file could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The file was read but is malformed.
    #[error(transparent)]
    Parse(#[from] ParseError),
}

/// One `cpu` line of /proc/stat, in USER_HZ ticks (100 per second on every mainstream
/// architecture). Columns that older kernels do not print are `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CpuTimes {
    /// The CPU id; `None` for the aggregate `cpu` line.
    pub cpu: Option<u32>,
    /// Normal-priority user time; includes `guest`.
    pub user: u64,
    /// Niced user time; includes `guest_nice`.
    pub nice: u64,
    /// Kernel time.
    pub system: u64,
    /// Idle time.
    pub idle: u64,
    /// Idle while waiting for I/O (Linux 2.6+). Unreliable: per-CPU values can go backwards.
    pub iowait: Option<u64>,
    /// Servicing hard interrupts (2.6+).
    pub irq: Option<u64>,
    /// Servicing softirqs (2.6+).
    pub softirq: Option<u64>,
    /// Time the hypervisor ran something else while this vCPU wanted to run (2.6.11+).
    pub steal: Option<u64>,
    /// Running a guest's vCPU (2.6.24+); already counted in `user`.
    pub guest: Option<u64>,
    /// Running a niced guest's vCPU (2.6.33+); already counted in `nice`.
    pub guest_nice: Option<u64>,
}

impl CpuTimes {
    /// Ticks spent running something: user, nice, system, irq and softirq. Guest time is not
    /// added because the kernel already counts it in user and nice; steal is not, because the
    /// vCPU was not running then.
    pub fn busy(&self) -> u64 {
        [
            self.user,
            self.nice,
            self.system,
            self.irq.unwrap_or(0),
            self.softirq.unwrap_or(0),
        ]
        .iter()
        .fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// All ticks: busy, idle, iowait and steal. A column the kernel does not print adds nothing,
    /// since that kernel counted the time in another column.
    pub fn total(&self) -> u64 {
        [
            self.busy(),
            self.idle,
            self.iowait.unwrap_or(0),
            self.steal.unwrap_or(0),
        ]
        .iter()
        .fold(0u64, |a, &b| a.saturating_add(b))
    }
}

/// The share of time stolen by the hypervisor between two samples of the same CPU line, from
/// 0 to 1. `None` when the kernel gives no steal column or no time passed. Counter decreases
/// (iowait can go backwards) are saturated so the share stays within 0..=1.
pub fn steal_fraction(before: &CpuTimes, after: &CpuTimes) -> Option<f64> {
    let stolen = after.steal?.saturating_sub(before.steal?);
    let elapsed = after.total().saturating_sub(before.total());
    if elapsed == 0 {
        return None;
    }
    Some((stolen as f64 / elapsed as f64).min(1.0))
}

/// A parsed /proc/stat (the parts the noise monitor uses).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcStat {
    /// The aggregate `cpu` line.
    pub total: CpuTimes,
    /// One `cpuN` line per online CPU, in file order (offline CPUs are absent).
    pub per_cpu: Vec<CpuTimes>,
    /// Context switches since boot, all CPUs.
    pub ctxt: Option<u64>,
    /// Boot time, seconds since the Unix epoch.
    pub btime: Option<u64>,
    /// Processes and threads created since boot.
    pub processes: Option<u64>,
    /// Threads runnable right now.
    pub procs_running: Option<u64>,
}

impl ProcStat {
    /// The line of CPU `cpu`, if it is online.
    pub fn cpu(&self, cpu: u32) -> Option<&CpuTimes> {
        self.per_cpu.iter().find(|t| t.cpu == Some(cpu))
    }
}

/// Parses /proc/stat. Lines other than `cpu*`, `ctxt`, `btime`, `processes` and
/// `procs_running` are skipped (`intr`, `softirq`, `procs_blocked`, 2.4's `page`/`swap`).
pub fn parse_proc_stat(text: &str) -> Result<ProcStat, ParseError> {
    let line_err = |line: usize, reason: String| ParseError::Line {
        file: STAT,
        line,
        reason,
    };
    let mut total = None;
    let mut per_cpu: Vec<CpuTimes> = Vec::new();
    let (mut ctxt, mut btime, mut processes, mut procs_running) = (None, None, None, None);
    for (i, line) in text.lines().enumerate() {
        let no = i + 1;
        let mut tokens = line.split_whitespace();
        let Some(key) = tokens.next() else {
            continue;
        };
        if let Some(suffix) = key.strip_prefix("cpu") {
            let cpu = if suffix.is_empty() {
                None
            } else {
                Some(parse_digits::<u32>(suffix).ok_or_else(|| {
                    line_err(no, format!("'{key}' is not 'cpu' followed by a CPU number"))
                })?)
            };
            let times = parse_cpu_times(cpu, tokens).map_err(|r| line_err(no, r))?;
            match cpu {
                None if total.is_some() => {
                    return Err(line_err(no, "a second aggregate 'cpu' line".to_string()));
                }
                None => total = Some(times),
                Some(n) if per_cpu.iter().any(|t| t.cpu == Some(n)) => {
                    return Err(line_err(no, format!("'{key}' appears twice")));
                }
                Some(_) => per_cpu.push(times),
            }
            continue;
        }
        let slot = match key {
            "ctxt" => &mut ctxt,
            "btime" => &mut btime,
            "processes" => &mut processes,
            "procs_running" => &mut procs_running,
            _ => continue,
        };
        let value = tokens.next().unwrap_or("");
        *slot = Some(
            parse_digits(value)
                .ok_or_else(|| line_err(no, format!("'{key}' value '{value}' is not a count")))?,
        );
    }
    let total = total.ok_or_else(|| ParseError::File {
        file: STAT,
        reason: "no aggregate 'cpu' line".to_string(),
    })?;
    Ok(ProcStat {
        total,
        per_cpu,
        ctxt,
        btime,
        processes,
        procs_running,
    })
}

fn parse_cpu_times<'a>(
    cpu: Option<u32>,
    tokens: impl Iterator<Item = &'a str>,
) -> Result<CpuTimes, String> {
    let mut values = Vec::with_capacity(10);
    for token in tokens {
        values.push(
            parse_digits::<u64>(token)
                .ok_or_else(|| format!("CPU time '{token}' is not a tick count"))?,
        );
    }
    // 2.4 kernels print 4 columns; each later column was added by a later kernel. Columns
    // beyond the 10 known today are ignored so a future kernel does not break the reader.
    if values.len() < 4 {
        return Err(format!(
            "{} CPU time columns, expected at least 4 (user nice system idle)",
            values.len()
        ));
    }
    let col = |i: usize| values.get(i).copied();
    Ok(CpuTimes {
        cpu,
        user: values[0],
        nice: values[1],
        system: values[2],
        idle: values[3],
        iowait: col(4),
        irq: col(5),
        softirq: col(6),
        steal: col(7),
        guest: col(8),
        guest_nice: col(9),
    })
}

/// Reads and parses /proc/stat below `root`.
pub fn read_proc_stat(root: &HostRoot) -> Result<ProcStat, ProcStatError> {
    Ok(parse_proc_stat(&root.read(STAT)?)?)
}

/// A parsed /proc/softirqs: per-CPU counts of each softirq kind since boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SoftirqTable {
    /// The CPU ids of the header's columns, ascending.
    pub cpus: Vec<u32>,
    /// `(kind, counts)` per line in file order (`HI`, `TIMER`, `NET_TX`, `NET_RX`, `BLOCK`, …);
    /// counts follow `cpus`.
    pub rows: Vec<(String, Vec<u64>)>,
}

/// Parses /proc/softirqs. Every row must have one count per CPU column: unlike
/// /proc/interrupts, the file has no global rows.
pub fn parse_softirqs(text: &str) -> Result<SoftirqTable, ParseError> {
    let line_err = |line: usize, reason: String| ParseError::Line {
        file: SOFTIRQS,
        line,
        reason,
    };
    let (cpus, numbered) = cpu_table(SOFTIRQS, text)?;
    let mut rows: Vec<(String, Vec<u64>)> = Vec::new();
    for (no, line) in numbered {
        let (name, rest) = line
            .split_once(':')
            .ok_or_else(|| line_err(no, format!("no ':' after the name in '{}'", line.trim())))?;
        let name = name.trim();
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(line_err(no, format!("bad softirq name '{name}'")));
        }
        if rows.iter().any(|(n, _)| n == name) {
            return Err(line_err(no, format!("'{name}' appears twice")));
        }
        let (counts, tail) = split_counts(rest, cpus.len()).map_err(|r| line_err(no, r))?;
        if counts.len() != cpus.len() || !tail.is_empty() {
            return Err(line_err(
                no,
                format!(
                    "'{name}' should have {} counts, one per CPU column",
                    cpus.len()
                ),
            ));
        }
        rows.push((name.to_string(), counts));
    }
    Ok(SoftirqTable { cpus, rows })
}

/// Reads and parses /proc/softirqs below `root`.
pub fn read_softirqs(root: &HostRoot) -> Result<SoftirqTable, ProcStatError> {
    Ok(parse_softirqs(&root.read(SOFTIRQS)?)?)
}

/// How many softirqs of each kind ran on `cpus` between the two samples, one entry per row of
/// `after` in its order (zeros included, so the shape is stable). A kind missing from `before`
/// counts from zero; a count that went backwards contributes zero.
pub fn softirqs_on_cpus(
    before: &SoftirqTable,
    after: &SoftirqTable,
    cpus: &[u32],
) -> Result<Vec<(String, u64)>, DeltaError> {
    if before.cpus != after.cpus {
        return Err(DeltaError::CpusChanged {
            before: before.cpus.clone(),
            after: after.cpus.clone(),
        });
    }
    let mut out = Vec::with_capacity(after.rows.len());
    for (name, counts) in &after.rows {
        let old = before.rows.iter().find(|(n, _)| n == name).map(|(_, c)| c);
        let mut sum = 0u64;
        for (i, (&cpu, &now)) in after.cpus.iter().zip(counts).enumerate() {
            if cpus.contains(&cpu) {
                let then = old.and_then(|c| c.get(i)).copied().unwrap_or(0);
                sum = sum.saturating_add(now.saturating_sub(then));
            }
        }
        out.push((name.clone(), sum));
    }
    Ok(out)
}

/// A thread's context switches since it started, from its `status` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TaskSwitches {
    /// `voluntary_ctxt_switches`: the thread blocked or yielded (2.6.23+).
    pub voluntary: Option<u64>,
    /// `nonvoluntary_ctxt_switches`: the thread was preempted; on a quiet CPU this should barely
    /// move during a probe.
    pub nonvoluntary: Option<u64>,
}

/// Parses `/proc/<pid>/task/<tid>/status` (or `/proc/<pid>/status`). Missing lines give `None`;
/// a present line with a value that is not a count is an error.
pub fn parse_task_status(text: &str) -> Result<TaskSwitches, ParseError> {
    let mut switches = TaskSwitches {
        voluntary: None,
        nonvoluntary: None,
    };
    for (i, line) in text.lines().enumerate() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let slot = match key.trim() {
            "voluntary_ctxt_switches" => &mut switches.voluntary,
            "nonvoluntary_ctxt_switches" => &mut switches.nonvoluntary,
            _ => continue,
        };
        let value = value.trim();
        *slot = Some(parse_digits(value).ok_or_else(|| ParseError::Line {
            file: TASK_STATUS,
            line: i + 1,
            reason: format!("'{}' value '{value}' is not a count", key.trim()),
        })?);
    }
    Ok(switches)
}

/// CPU time and last CPU of one thread, from its `stat` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TaskStat {
    /// Field 14, user time in USER_HZ ticks.
    pub utime_ticks: u64,
    /// Field 15, kernel time in USER_HZ ticks.
    pub stime_ticks: u64,
    /// Field 39, the CPU the thread last ran on (2.2.8+); checks that pinning held.
    pub processor: Option<u32>,
}

/// Parses `/proc/<pid>/task/<tid>/stat`. Field 2 is the command name in parentheses, which may
/// itself hold spaces and parentheses; the kernel does not escape them, so the fields are
/// counted from the last `)`, after which only numbers and the state letter follow.
pub fn parse_task_stat(text: &str) -> Result<TaskStat, ParseError> {
    let err = |reason: String| ParseError::Line {
        file: TASK_STAT,
        line: 1,
        reason,
    };
    let (_, after_comm) = text
        .rsplit_once(')')
        .ok_or_else(|| err("no ')' closing the command name (field 2)".to_string()))?;
    // Field 3 (state) is the first token after the command name, so field N is token N - 3.
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).copied();
    let count = |n: usize, what: &str| {
        let token = field(n).ok_or_else(|| err(format!("field {n} ({what}) is missing")))?;
        parse_digits::<u64>(token)
            .ok_or_else(|| err(format!("field {n} ({what}) '{token}' is not a tick count")))
    };
    let utime_ticks = count(14, "utime")?;
    let stime_ticks = count(15, "stime")?;
    let processor = match field(39) {
        None => None,
        Some(token) => Some(parse_digits::<u32>(token).ok_or_else(|| {
            err(format!(
                "field 39 (processor) '{token}' is not a CPU number"
            ))
        })?),
    };
    Ok(TaskStat {
        utime_ticks,
        stime_ticks,
        processor,
    })
}

/// Field 22 of `/proc/<pid>/stat`, `starttime`: when the process started, in clock ticks
/// since boot. With the boot it belongs to, it names one process for good, where a pid alone
/// is reused as soon as the process exits. The command name (field 2) is skipped as in
/// [`parse_task_stat`].
pub fn parse_process_start_ticks(text: &str) -> Result<u64, ParseError> {
    let err = |reason: String| ParseError::Line {
        file: PROCESS_STAT,
        line: 1,
        reason,
    };
    let (_, after_comm) = text
        .rsplit_once(')')
        .ok_or_else(|| err("no ')' closing the command name (field 2)".to_string()))?;
    let token = after_comm
        .split_whitespace()
        .nth(22 - 3)
        .ok_or_else(|| err("field 22 (starttime) is missing".to_string()))?;
    parse_digits::<u64>(token).ok_or_else(|| {
        err(format!(
            "field 22 (starttime) '{token}' is not a tick count"
        ))
    })
}

/// Reads when process `pid` started (see [`parse_process_start_ticks`]) below `root`. A
/// process that has exited has no /proc entry: the error is then a read error whose source is
/// [`ErrorKind::NotFound`].
pub fn read_process_start_ticks(root: &HostRoot, pid: u32) -> Result<u64, ProcStatError> {
    Ok(parse_process_start_ticks(
        &root.read(&format!("/proc/{pid}/stat"))?,
    )?)
}

/// `se.nr_migrations` from `/proc/<pid>/task/<tid>/sched`: how often the scheduler moved the
/// thread to another CPU. `None` when the line is absent or unreadable. This returns an
/// `Option` rather than an error because the file is scheduler debug output with no stable
/// format (it exists only with CONFIG_SCHED_DEBUG), so its absence is normal, not a fault.
pub fn parse_task_sched_migrations(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "se.nr_migrations")
            .then(|| parse_digits(value.trim()))
            .flatten()
    })
}

fn task_path(pid: u32, tid: u32, file: &str) -> String {
    format!("/proc/{pid}/task/{tid}/{file}")
}

/// Reads one thread's context switches below `root`.
pub fn read_task_switches(
    root: &HostRoot,
    pid: u32,
    tid: u32,
) -> Result<TaskSwitches, ProcStatError> {
    Ok(parse_task_status(
        &root.read(&task_path(pid, tid, "status"))?,
    )?)
}

/// Reads one thread's CPU times and last CPU below `root`.
pub fn read_task_stat(root: &HostRoot, pid: u32, tid: u32) -> Result<TaskStat, ProcStatError> {
    Ok(parse_task_stat(&root.read(&task_path(pid, tid, "stat"))?)?)
}

/// Reads one thread's migration count below `root`. A missing `sched` file (a kernel without
/// CONFIG_SCHED_DEBUG) gives `Ok(None)`; other read failures are errors.
pub fn read_task_sched_migrations(
    root: &HostRoot,
    pid: u32,
    tid: u32,
) -> Result<Option<u64>, ReadError> {
    match root.read(&task_path(pid, tid, "sched")) {
        Ok(text) => Ok(parse_task_sched_migrations(&text)),
        Err(err) if err.source.kind() == ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests;
