//! noise: seeded bursty interference on a small machine, to calibrate `compare`'s verdicts
//! against (benches/stats/calibrate.sh). On a cloud VM a CPU-bound loop's wall time varied 50%
//! between invocations (issue 28): neighbours and the hypervisor come and go, which a steady hog,
//! slowing every invocation alike, does not reproduce.
//!
//! Each hog (a busy thread per CPU, a memory streamer, a cgroup's cpu.max or v1 CFS quota) follows a schedule of
//! spells of lengths drawn uniformly from --spell-ms, each on with probability --duty; SplitMix64
//! from --seed draws it, so a seed means the same spells on every run (--print-schedule shows
//! them). At the end it puts back the cap it found.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::Parser;
use nix::sched::{CpuSet, sched_setaffinity};
use nix::sys::signal::{SigSet, Signal};
use nix::unistd::Pid;
use quietbench_stats::rng::{SplitMix64, mix};

#[derive(Debug, Parser)]
#[command(
    name = "noise",
    group(clap::ArgGroup::new("hogs").args(["cpu_hog", "memory_hog", "cpu_max"]).multiple(true)
          .required(true)),
    about = "Injects seeded bursty noise (busy CPUs, memory traffic, a cgroup's cpu.max) in \
             random on and off spells, until SIGINT or SIGTERM or for --for SECS"
)]
struct Args {
    /// One busy-spinning thread pinned to each of these CPUs (kernel list format: 0-1, 1, 0,2)
    #[arg(long, value_name = "CPUS", value_parser = parse_cpu_list)]
    cpu_hog: Option<CpuList>,
    /// A thread streaming over a buffer of MIB mebibytes (read and write)
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    memory_hog: Option<u64>,
    /// Pin the memory hog to the first CPU of this list (default: not pinned)
    #[arg(long, value_name = "LIST", value_parser = parse_cpu_list, requires = "memory_hog")]
    memory_cpus: Option<CpuList>,
    /// In on-spells, cap the cgroup of --cgroup at PERCENT of all its CPUs (its cpu.max)
    #[arg(long, value_name = "PERCENT", requires = "cgroup",
          value_parser = |s: &str| parse_number(s, 0.001, 100.0, "a percentage in (0, 100]"))]
    cpu_max: Option<f64>,
    /// The cgroup whose cap --cpu-max writes (made by the caller): a v2 directory (cpu.max) or
    /// one of v1's cpu controller (cpu.cfs_quota_us)
    #[arg(long, value_name = "PATH", requires = "cpu_max")]
    cgroup: Option<PathBuf>,
    /// Each spell's length in milliseconds, drawn uniformly from MIN-MAX
    #[arg(long, value_name = "MIN-MAX", default_value = "100-500", value_parser = parse_spell_ms)]
    spell_ms: (u64, u64),
    /// The probability that a spell is on, from 0 to 1: the long-run fraction of time on
    #[arg(long, value_name = "F", default_value_t = 0.5,
          value_parser = |s: &str| parse_number(s, 0.0, 1.0, "a duty cycle from 0 to 1"))]
    duty: f64,
    /// Seed of the schedules (random by default; the start-up line prints it)
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// One schedule for every hog, rather than an independent one each
    #[arg(long)]
    together: bool,
    /// Stop after SECS seconds (default: at SIGINT or SIGTERM)
    #[arg(long = "for", value_name = "SECS",
          value_parser = |s: &str| parse_number(s, 0.001, 1e9, "a positive number of seconds"))]
    for_secs: Option<f64>,
    /// Print each hog's first N spells (hog, start ms, length ms, on|off) and exit
    #[arg(long, value_name = "N")]
    print_schedule: Option<usize>,
}

/// Not `Vec<usize>`, which clap would read as a flag given several times.
type CpuList = Vec<usize>;

/// One spell of a hog's schedule: from `at_ms` (since the hog started) for `len_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Spell {
    at_ms: u64,
    len_ms: u64,
    on: bool,
}

/// The endless spell schedule of `seed`. Lengths are drawn whatever the spell's state, so the
/// time on tends to `duty` itself, not to `duty` weighted by one state's longer spells.
fn schedule(seed: u64, min_ms: u64, max_ms: u64, duty: f64) -> impl Iterator<Item = Spell> {
    let (mut rng, mut at_ms) = (SplitMix64::new(seed), 0);
    std::iter::from_fn(move || {
        // 53 bits make a uniform double in [0, 1): duty 0 is never on, duty 1 always.
        let on = ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < duty;
        let len_ms = min_ms + rng.below(max_ms - min_ms + 1);
        let spell = Spell { at_ms, len_ms, on };
        at_ms += len_ms;
        Some(spell)
    })
}

#[derive(Debug)]
enum Kind {
    Cpu(usize),
    Memory { mib: u64, cpu: Option<usize> },
    Throttle,
}

/// A hog: its name in the logs, its schedule's seed, what it does.
struct Hog(String, u64, Kind);

/// The hogs asked for, each with a seed derived from its key (unless --together): a CPU hog's key
/// is its CPU, so `--cpu-hog 1` and `--cpu-hog 0-1` give CPU 1 the same spells.
fn hogs(args: &Args, seed: u64) -> Vec<Hog> {
    let hog = |name: &str, key: u64, kind| {
        let derived = mix(seed ^ mix(key));
        let seed = if args.together { seed } else { derived };
        Hog(name.into(), seed, kind)
    };
    let cpu = |&c: &usize| hog(&format!("cpu{c}"), c as u64, Kind::Cpu(c));
    let mut hogs: Vec<Hog> = args.cpu_hog.iter().flatten().map(cpu).collect();
    if let Some(mib) = args.memory_hog {
        let cpu = args.memory_cpus.as_ref().and_then(|l| l.first().copied());
        hogs.push(hog("memory", 1 << 32, Kind::Memory { mib, cpu }));
    }
    if args.cpu_max.is_some() {
        hogs.push(hog("cpu.max", 2 << 32, Kind::Throttle));
    }
    hogs
}

/// Why the run stopped, once it has: every thread polls it (an atomic load).
static STOP: OnceLock<String> = OnceLock::new();

/// Until `end` (None: for ever) or the stop, in 20 ms slices: 50 short wake-ups a second.
fn sleep_until(end: Option<Instant>) {
    let slice = Duration::from_millis(20);
    while STOP.get().is_none() {
        let left = end.map_or(slice, |e| e.saturating_duration_since(Instant::now()));
        if left.is_zero() {
            return;
        }
        thread::sleep(left.min(slice));
    }
}

/// A cgroup's CPU cap and the value found there, which `Drop` puts back (short of a SIGKILL):
/// cgroup v2's cpu.max ("QUOTA PERIOD" or "max PERIOD"), or v1's cpu.cfs_quota_us (-1 for no
/// cap) beside its cpu.cfs_period_us, whichever the directory has.
struct CpuMax {
    file: PathBuf,
    was: String,
    /// What the file holds during an on-spell, and during an off one.
    on: String,
    off: String,
}

impl CpuMax {
    fn open(dir: &Path, percent: f64) -> anyhow::Result<Self> {
        let v2 = dir.join("cgroup.controllers").exists();
        let v1_period = dir.join("cpu.cfs_period_us");
        if !v2 && !v1_period.exists() {
            bail!(
                "{}: neither a cgroup v2 directory (no cgroup.controllers) nor one of v1's cpu                  controller (no cpu.cfs_period_us)",
                dir.display()
            );
        }
        let file = dir.join(if v2 { "cpu.max" } else { "cpu.cfs_quota_us" });
        let why = if v2 {
            "(is the cpu controller in the parent's cgroup.subtree_control?)"
        } else {
            "(is the v1 cpu controller mounted?)"
        };
        let was = fs::read_to_string(&file).map(|s| s.trim().to_string());
        let was = was.with_context(|| format!("cannot read {} {why}", file.display()))?;
        // Writing back what is there proves the file writable before any spell depends on it.
        let writable = fs::write(&file, &was);
        writable.with_context(|| format!("{} is not writable", file.display()))?;
        // PERCENT of all the cgroup's CPUs: the quota per period is summed over CPUs.
        let cpus = fs::read_to_string(dir.join("cpuset.cpus.effective"))
            .or_else(|_| fs::read_to_string("/sys/devices/system/cpu/online"))
            .ok()
            .and_then(|s| parse_cpu_list(s.trim()).ok())
            .map_or(1, |l| l.len().max(1));
        let period: u64 = if v2 {
            100_000
        } else {
            let text = fs::read_to_string(&v1_period);
            let text = text.with_context(|| format!("cannot read {}", v1_period.display()))?;
            let period = text.trim().parse();
            period.with_context(|| format!("{}: not a number", v1_period.display()))?
        };
        // The kernel refuses a quota below 1 ms.
        let quota = ((percent / 100.0 * period as f64 * cpus as f64).round() as u64).max(1000);
        let (on, off) = if v2 {
            (format!("{quota} {period}"), format!("max {period}"))
        } else {
            (quota.to_string(), "-1".to_string())
        };
        Ok(Self { file, was, on, off })
    }
    fn set(&self, on: bool) -> anyhow::Result<()> {
        let written = fs::write(&self.file, if on { &self.on } else { &self.off });
        written.with_context(|| format!("cannot write {}", self.file.display()))
    }
}

impl Drop for CpuMax {
    fn drop(&mut self) {
        if let Err(err) = fs::write(&self.file, &self.was) {
            let (f, was) = (self.file.display(), &self.was);
            eprintln!("noise: could not restore {f} to {was:?}: {err}");
        }
    }
}

/// Busy-spins until `end`: a black-boxed multiply chain, which the compiler cannot fold away.
fn spin(end: Instant) {
    let mut x = 1u64;
    while Instant::now() < end && STOP.get().is_none() {
        for _ in 0..10_000 {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
        }
    }
}

/// Streams over `buf` until `end`, reading and writing one word per 64-byte line: the most
/// memory traffic per instruction; a buffer larger than the last-level cache misses every line.
fn stream(buf: &mut [u64], end: Instant) {
    loop {
        for chunk in buf.chunks_mut(1 << 17) {
            if Instant::now() >= end || STOP.get().is_some() {
                return;
            }
            for word in chunk.iter_mut().step_by(8) {
                *word = word.wrapping_add(1);
            }
            std::hint::black_box(&mut *chunk);
        }
    }
}

fn pin(cpu: usize) -> anyhow::Result<()> {
    let mut set = CpuSet::new();
    set.set(cpu)?;
    sched_setaffinity(Pid::from_raw(0), &set).with_context(|| format!("cannot pin to CPU {cpu}"))
}

/// One hog's spells, timed from the common `start`: each spell ends at its scheduled time, so a
/// late wake-up shortens that spell rather than shifting the rest. Returns the fraction it was on.
fn run(hog: &Hog, args: &Args, cg: Option<&CpuMax>, start: Instant) -> anyhow::Result<f64> {
    if let Kind::Cpu(cpu) | Kind::Memory { cpu: Some(cpu), .. } = hog.2 {
        pin(cpu)?;
    }
    // Ones, not zeros: every page is faulted in now rather than in the first spell.
    let mut buf = match hog.2 {
        Kind::Memory { mib, .. } => vec![1u64; (mib as usize) << 17],
        _ => Vec::new(),
    };
    let mut on = Duration::ZERO;
    let spells = schedule(hog.1, args.spell_ms.0, args.spell_ms.1, args.duty);
    for spell in spells.take_while(|_| STOP.get().is_none()) {
        let end = start + Duration::from_millis(spell.at_ms + spell.len_ms);
        let began = Instant::now();
        match (&hog.2, cg) {
            (Kind::Throttle, Some(cg)) => cg.set(spell.on)?,
            (Kind::Cpu(_), _) if spell.on => spin(end),
            (Kind::Memory { .. }, _) if spell.on => stream(&mut buf, end),
            _ => {}
        }
        sleep_until(Some(end));
        if spell.on {
            on += began.elapsed();
        }
    }
    Ok(on.div_duration_f64(start.elapsed()))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let seed = args.seed.unwrap_or_else(|| {
        let now = SystemTime::now().duration_since(UNIX_EPOCH);
        mix(now.unwrap_or_default().as_nanos() as u64 ^ u64::from(std::process::id()))
    });
    let ((min, max), duty, hogs) = (args.spell_ms, args.duty, hogs(&args, seed));
    if let Some(n) = args.print_schedule {
        for Hog(name, seed, _) in &hogs {
            for s in schedule(*seed, min, max, duty).take(n) {
                let state = if s.on { "on" } else { "off" };
                println!("{name}\t{}\t{}\t{state}", s.at_ms, s.len_ms);
            }
        }
        return Ok(());
    }
    let cg = match (&args.cgroup, args.cpu_max) {
        (Some(dir), Some(percent)) => Some(CpuMax::open(dir, percent)?),
        _ => None,
    };
    // Blocked before any thread exists, so every thread inherits the mask and the signals wait
    // for the one thread that asks for them: a stop is then an ordinary flag, not a handler.
    let signals = SigSet::from_iter([Signal::SIGINT, Signal::SIGTERM]);
    signals.thread_block().context("cannot block signals")?;
    let ending = args.for_secs.map(|s| format!("for {s} s"));
    let ending = ending.unwrap_or("until SIGINT or SIGTERM".into());
    let sharing = ["independent schedules", "one schedule for all"][usize::from(args.together)];
    eprintln!("noise: seed {seed} ({sharing}), spells {min}-{max} ms, duty {duty}, {ending}");
    if let Some(CpuMax { file, was, on, off }) = &cg {
        let f = file.display();
        eprintln!("noise:   {f}: {on:?} when on, {off:?} off (was {was:?})");
    }
    for Hog(name, seed, kind) in &hogs {
        eprintln!("noise:   {name}: {kind:?}; schedule seed {seed}");
    }
    let start = Instant::now();
    // Not joined: when --for ends the run it stays blocked in sigwait, and the exit ends it.
    thread::spawn(move || signals.wait().map(|sig| STOP.set(sig.to_string())));
    let outcomes = thread::scope(|scope| {
        let (args, cg) = (&args, cg.as_ref());
        let mut threads = Vec::new();
        for hog in &hogs {
            let failed = |_: &_| _ = STOP.set(format!("{} failed", hog.0));
            threads.push(scope.spawn(move || run(hog, args, cg, start).inspect_err(failed)));
        }
        sleep_until(args.for_secs.map(|s| start + Duration::from_secs_f64(s)));
        _ = STOP.set("time's up".into());
        threads.into_iter().map(|t| t.join()).collect::<Vec<_>>()
    });
    // Every hog has stopped: cpu.max goes back now, before the summary says so.
    drop(cg);
    let (mut summary, mut failure) = (Vec::new(), None);
    for (Hog(name, ..), outcome) in hogs.iter().zip(outcomes) {
        match outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic)) {
            Ok(fraction) => summary.push(format!("{name} {:.1}%", 100.0 * fraction)),
            Err(err) => _ = failure.get_or_insert(err),
        }
    }
    let why = STOP.get().cloned().unwrap_or_default();
    let (secs, on) = (start.elapsed().as_secs_f64(), summary.join(", "));
    eprintln!("noise: stopped ({why}) after {secs:.1} s; time on: {on} (duty {duty})");
    failure.map_or(Ok(()), Err)
}

/// `LO-HI`, or `N` for N-N.
fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let num = |t: &str| t.trim().parse().map_err(|_| format!("{t:?}: not a number"));
    let (lo, hi) = s.split_once('-').unwrap_or((s, s));
    let (lo, hi) = (num(lo)?, num(hi)?);
    if lo > hi {
        return Err(format!("{s:?}: {lo} is above {hi}"));
    }
    Ok((lo, hi))
}

fn parse_cpu_list(s: &str) -> Result<CpuList, String> {
    let mut cpus = Vec::new();
    for part in s.split(',') {
        let (lo, hi) = parse_range(part).map_err(|e| format!("{e} in the CPU list {s:?}"))?;
        if hi >= CpuSet::count() as u64 {
            return Err(format!("CPU {hi} is beyond what an affinity mask holds"));
        }
        cpus.extend(lo as usize..=hi as usize);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

fn parse_spell_ms(s: &str) -> Result<(u64, u64), String> {
    let (min, max) = parse_range(s)?;
    // A zero-length spell would let a schedule of them spin without time passing.
    if min == 0 || !s.contains('-') {
        return Err(format!("{s:?} is not MIN-MAX in ms with MIN >= 1"));
    }
    Ok((min, max))
}

fn parse_number(s: &str, lo: f64, hi: f64, what: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (lo..=hi).contains(&v) => Ok(v),
        _ => Err(format!("{s:?} is not {what}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spells(seed: u64, duty: f64) -> Vec<Spell> {
        schedule(seed, 100, 500, duty).take(10_000).collect()
    }

    #[test]
    fn the_time_on_tends_to_the_duty_and_0_and_1_are_exact() {
        assert!(spells(1, 0.0).iter().all(|s| !s.on));
        assert!(spells(1, 1.0).iter().all(|s| s.on));
        for duty in [0.1, 0.3, 0.5, 0.9] {
            let s = spells(42, duty);
            let on: u64 = s.iter().filter(|s| s.on).map(|s| s.len_ms).sum();
            let fraction = on as f64 / s.iter().map(|s| s.len_ms).sum::<u64>() as f64;
            assert!((fraction - duty).abs() < 0.03, "duty {duty}: on {fraction}");
        }
    }

    #[test]
    fn spells_are_seeded_stay_within_bounds_and_follow_each_other() {
        assert_eq!(spells(7, 0.3), spells(7, 0.3));
        assert_ne!(spells(7, 0.3), spells(8, 0.3));
        let s: Vec<Spell> = schedule(3, 20, 30, 0.5).take(10_000).collect();
        assert!(s.iter().all(|s| (20..=30).contains(&s.len_ms)));
        assert!(s.iter().any(|s| s.len_ms == 20) && s.iter().any(|s| s.len_ms == 30));
        assert!(s.windows(2).all(|w| w[1].at_ms == w[0].at_ms + w[0].len_ms));
    }

    #[test]
    fn bad_input_is_refused() {
        assert_eq!(parse_cpu_list("3,0-1,1"), Ok(vec![0, 1, 3]));
        assert_eq!(parse_spell_ms("100-500"), Ok((100, 500)));
        for bad in ["", "a", "1-0", "0-", "-1", "0,,1", "1024"] {
            assert!(parse_cpu_list(bad).is_err(), "{bad:?}");
        }
        for bad in ["500-100", "0-10", "100", "a-b"] {
            assert!(parse_spell_ms(bad).is_err(), "{bad:?}");
        }
    }
}
