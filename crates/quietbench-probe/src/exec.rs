//! `exec`: a user's command, run once per event and timed: wall time and CPU time (user +
//! system, from wait4's rusage) of every invocation, pinned where placement says, with
//! address-space randomization on or off as asked. The command's output is discarded; a
//! non-zero exit fails the trial with the tail of its standard error.
//!
//! With `cmd_b`, the trial times two commands in pairs, A and B back to back in a random order
//! for every pair, and records, besides each command's own times, every pair's B/A wall-time
//! ratio. Cloud hosts switch between fast and slow states every second or so (a neighbour on
//! the sibling hyperthread: on this project's VM the same command took 47 ms or 85 ms, in runs
//! of a few hundred milliseconds); two invocations 50 ms apart nearly always share a state,
//! so the per-pair ratio cancels it where separate trials of A and B cannot.
//!
//! The command runs without a shell (argv split like a shell would, no expansion), so no shell's
//! start-up is part of each sample; `shell=true` runs `/bin/sh -c CMD` for commands that need
//! one, and then the shell is part of what is measured.
//!
//! Every command runs in a process group of its own, killed whole when the command ends, when
//! the trial is cancelled or its caller goes away, and when the command runs past the trial's
//! deadline (its duration plus a grace: see [`crate::spec::TrialBounds`]), which fails the
//! trial; see `child.rs`. Its standard input is /dev/null: in a group of its own, a command
//! reading the agent's terminal would be stopped (SIGTTIN) rather than read it.

use std::collections::BTreeMap;
use std::ffi::{CString, c_char};
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use crate::rng::Rng;
use crate::{MetricSet, Samples, Step, Workload};

mod child;
mod duet;
mod metric_sets;
mod resolve;
pub use child::wait4_child;
use child::{Group, Stopped, Watch};
use duet::Rendezvous;
pub use metric_sets::{
    COUNTED_METRIC_SETS, METRIC_SETS, PAIRED_COUNTED_METRIC_SETS, PAIRED_METRIC_SETS,
};
use metric_sets::{RATIO_INDICES, SINGLE_INSTRUCTIONS, side_indices, turn_ratio_indices};
use resolve::Command;
pub use resolve::{resolve, split_words};

/// The metric of the per-pair B/A wall-time ratios, in parts per million.
pub const PAIR_RATIO_METRIC: &str = quietbench_vocab::metrics::B_OVER_A_WALL_PPM;

/// Bytes of standard error kept for the failure message.
const STDERR_TAIL: usize = 2048;
/// What a child whose personality(ADDR_NO_RANDOMIZE) was refused writes to its stderr before
/// exiting with status 125 (a command's own 125 is told apart by these words).
const PERSONALITY_REFUSED_WORDS: &str = "personality(ADDR_NO_RANDOMIZE) was refused";
const PERSONALITY_REFUSED: &[u8] =
    b"quietbench: personality(ADDR_NO_RANDOMIZE) was refused: ASLR stays on\n";

/// ADDR_NO_RANDOMIZE from linux/personality.h.
const ADDR_NO_RANDOMIZE: nix::libc::c_ulong = 0x0040000;

/// One thread's exec workload: everything the child needs is built before measuring, because
/// between fork and exec the child may not allocate.
pub struct ExecWorkload {
    /// A, and in paired mode B.
    commands: Vec<Prepared>,
    environment: Environment,
    cwd: Option<CString>,
    aslr_off: bool,
    stderr: std::fs::File,
    devnull: std::fs::File,
    error: Option<String>,
    /// Picks each pair's order (paired mode).
    order: Rng,
    /// What this workload records, by mode.
    sets: &'static [MetricSet],
    /// Count instructions.
    instructions: bool,
    /// A duet's side: this thread (0 or 1) and where it meets the other.
    duet: Option<(usize, Arc<Rendezvous>)>,
    /// Duet pairs run so far (the same on both threads).
    pairs: u64,
    /// The trial's cancel flag and deadline, which every wait for a command watches.
    watch: Watch,
}

/// Why an invocation gave no figures.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Halt {
    /// The trial was cancelled while the command ran: it was killed, and nothing is recorded.
    Cancelled,
    /// The command failed, or was killed past the deadline: the trial fails with this.
    Failed(String),
}

impl From<String> for Halt {
    fn from(message: String) -> Self {
        Halt::Failed(message)
    }
}

/// One invocation's figures (also what a duet side publishes to the other).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Invocation {
    wall_ns: u64,
    cpu_ns: u64,
    instructions: Option<u64>,
}

/// One command ready to exec: its program and NUL-terminated argv pointers.
/// Everything is built before the fork: between fork and exec the child may not allocate
/// (another thread may hold the allocator's lock at the fork). Shared with cpu.spawn and the
/// agent's user servers.
pub struct Prepared {
    /// The program's path, for execve.
    pub program: CString,
    _argv: Vec<CString>,
    /// argv for execve, NULL-terminated.
    pub argv_ptrs: Vec<*const c_char>,
}

impl Prepared {
    /// `program` run with `argv`; an error names a part with a NUL byte.
    pub fn new(program: &Path, argv: &[impl AsRef<std::ffi::OsStr>]) -> Result<Self, String> {
        let program = cstring(program.as_os_str().as_bytes(), "the program path")?;
        let argv = argv
            .iter()
            .map(|a| cstring(a.as_ref().as_bytes(), "an argument"))
            .collect::<Result<Vec<_>, _>>()?;
        let mut argv_ptrs: Vec<*const c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        argv_ptrs.push(std::ptr::null());
        Ok(Self {
            program,
            _argv: argv,
            argv_ptrs,
        })
    }
}

/// The environment a user's command gets: the agent's, with the command's variables set over
/// it, as NULL-terminated `NAME=VALUE` pointers for execve, built before the fork.
pub struct Environment {
    _envp: Vec<CString>,
    ptrs: Vec<*const c_char>,
}

impl Environment {
    /// The agent's environment with `env` set over it; an error names a part with a NUL byte.
    pub fn new(env: &[(String, String)]) -> Result<Self, String> {
        let mut vars: BTreeMap<Vec<u8>, Vec<u8>> = std::env::vars_os()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect();
        for (k, v) in env {
            vars.insert(k.as_bytes().to_vec(), v.as_bytes().to_vec());
        }
        let envp = vars
            .into_iter()
            .map(|(mut k, v)| {
                k.push(b'=');
                k.extend(v);
                cstring(&k, "an environment variable")
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut ptrs: Vec<*const c_char> = envp.iter().map(|e| e.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        Ok(Self { _envp: envp, ptrs })
    }

    /// envp for execve.
    pub fn as_ptr(&self) -> *const *const c_char {
        self.ptrs.as_ptr()
    }
}

// SAFETY: the raw pointers point into `_argv` and `_envp`, owned by this struct and never
// changed after construction; moving the struct moves their owners, not the heap buffers.
unsafe impl Send for ExecWorkload {}

fn cstring(text: &[u8], what: &str) -> Result<CString, String> {
    CString::new(text).map_err(|_| format!("{what} contains a NUL byte"))
}

impl ExecWorkload {
    fn new(command: &Command, env: &[(String, String)]) -> Result<Self, String> {
        let mut commands = vec![Prepared::new(&command.program, &command.argv)?];
        if let Some((program, argv)) = &command.b {
            commands.push(Prepared::new(program, argv)?);
        }
        let environment = Environment::new(env)?;
        let cwd = command
            .cwd
            .as_ref()
            .map(|d| cstring(d.as_os_str().as_bytes(), "the working directory"))
            .transpose()?;
        let stderr = anonymous_file()
            .map_err(|e| format!("cannot create a file for the command's stderr: {e}"))?;
        let devnull = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map_err(|e| format!("cannot open /dev/null: {e}"))?;
        // Any seed will do: the order only has to be unpredictable to the commands.
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Ok(Self {
            commands,
            environment,
            cwd,
            aslr_off: command.aslr_off,
            stderr,
            devnull,
            error: None,
            order: Rng::new(clock),
            sets: metric_sets::for_mode(command.b.is_some(), command.instructions),
            instructions: command.instructions,
            duet: None,
            pairs: 0,
            // Made inside the factory, where a bounded spec's bounds are in force.
            watch: Watch::new(crate::spec::bounds_in_force()),
        })
    }

    /// How failures name command `which`.
    fn command_name(&self, which: usize) -> &'static str {
        match (self.commands.len(), which) {
            (1, _) => "the command",
            (_, 0) => "command A",
            _ => "command B",
        }
    }

    /// The next pair's order: true when B goes first.
    fn b_first(&mut self) -> bool {
        self.order.below(2) == 1
    }

    /// Runs command `which` (0 = A, 1 = B) once: its figures, or why there are none.
    fn run_once(&mut self, which: usize) -> Result<Invocation, Halt> {
        self.watch.start();
        self.stderr
            .set_len(0)
            .map_err(|e| format!("cannot reset the stderr file: {e}"))?;
        self.stderr
            .seek(SeekFrom::Start(0))
            .map_err(|e| e.to_string())?;
        let (err_fd, null_fd) = (self.stderr.as_raw_fd(), self.devnull.as_raw_fd());
        // Counting instructions, the child waits at a pipe until its counter is attached (the
        // counter starts at its exec, so it must exist before the exec).
        let gate = if self.instructions {
            Some(
                nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                    .map_err(|e| format!("cannot create the counter's pipe: {e}"))?,
            )
        } else {
            None
        };
        let gate_read = gate.as_ref().map_or(-1, |(r, _)| r.as_raw_fd());
        let started = Instant::now();
        // SAFETY: fork in a multi-threaded process is sound when the child makes only
        // async-signal-safe calls before exec: setpgid, read, dup2, chdir, personality, execve
        // and _exit are system calls, and every pointer they receive was built before the fork.
        let pid = unsafe { nix::libc::fork() };
        if pid < 0 {
            return Err(format!("fork failed: {}", std::io::Error::last_os_error()).into());
        }
        if pid == 0 {
            // SAFETY: child side of the fork, see above; _exit never returns.
            unsafe {
                // Its own process group first, before anything can go wrong: whatever it
                // starts is killed with it (see child.rs).
                nix::libc::setpgid(0, 0);
                if gate_read >= 0 {
                    let mut byte = 0u8;
                    if nix::libc::read(gate_read, (&mut byte as *mut u8).cast(), 1) != 1 {
                        nix::libc::_exit(127);
                    }
                }
                nix::libc::dup2(null_fd, 0);
                nix::libc::dup2(null_fd, 1);
                nix::libc::dup2(err_fd, 2);
                if let Some(dir) = &self.cwd
                    && nix::libc::chdir(dir.as_ptr()) != 0
                {
                    nix::libc::_exit(126);
                }
                // A refused personality (systemd's LockPersonality=, a seccomp filter) must not
                // let an "ASLR off" run be measured with ASLR on: say so and stop.
                if self.aslr_off && nix::libc::personality(ADDR_NO_RANDOMIZE) == -1 {
                    nix::libc::write(
                        2,
                        PERSONALITY_REFUSED.as_ptr().cast(),
                        PERSONALITY_REFUSED.len(),
                    );
                    nix::libc::_exit(125);
                }
                let command = &self.commands[which];
                nix::libc::execve(
                    command.program.as_ptr(),
                    command.argv_ptrs.as_ptr(),
                    self.environment.as_ptr(),
                );
                nix::libc::_exit(127);
            }
        }
        let mut group = Group::adopt(pid);
        let counter = match gate {
            Some((_, write_end)) => {
                let counter = crate::perf_counter::InstructionCounter::attach(group.pid());
                // Released whatever happened: a child left waiting would never be reaped.
                let _ = nix::unistd::write(&write_end, &[1]);
                Some(counter)
            }
            None => None,
        };
        let waited = group.wait_exit(&self.watch);
        let wall = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        // Ended or stopped, whatever is left of its group goes now (`sleep 300 &`).
        group.kill();
        let ended = group.reap().map_err(|e| format!("wait4 failed: {e}"))?;
        match waited {
            Ok(()) => {}
            Err(Stopped::Cancelled) => return Err(Halt::Cancelled),
            Err(Stopped::Overran) => {
                return Err(Halt::Failed(self.watch.overran(self.command_name(which))));
            }
        }
        let (status, usage) = (ended.status, ended.usage);
        let code = if nix::libc::WIFEXITED(status) {
            Some(nix::libc::WEXITSTATUS(status))
        } else {
            None
        };
        if code != Some(0) {
            let tail = self.stderr_tail();
            if code == Some(125) && tail.contains(PERSONALITY_REFUSED_WORDS) {
                return Err(Halt::Failed(
                    "aslr=off cannot be measured here: personality(ADDR_NO_RANDOMIZE) was refused \
                     (systemd's LockPersonality=, or a seccomp filter); run with aslr=on or lift \
                     the restriction"
                        .to_string(),
                ));
            }
            let how = match code {
                Some(126) => "could not enter its working directory (exit status 126)".to_string(),
                Some(127) => "could not be executed (exit status 127)".to_string(),
                Some(c) => format!("exited with status {c}"),
                None => format!("was killed by signal {}", nix::libc::WTERMSIG(status)),
            };
            let name = self.command_name(which);
            return Err(Halt::Failed(format!(
                "{name} {how}; its stderr ended with: {tail}"
            )));
        }
        let cpu =
            |t: nix::libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
        let instructions = match counter {
            None => None,
            Some(counter) => Some(
                counter
                    .and_then(|c| c.read())
                    .map_err(|e| format!("cannot count the command's instructions: {e}"))?,
            ),
        };
        Ok(Invocation {
            wall_ns: wall,
            cpu_ns: cpu(usage.ru_utime) + cpu(usage.ru_stime),
            instructions,
        })
    }

    /// Runs A and B back to back in a random order and records both and their ratios.
    fn run_pair(&mut self, samples: &mut Samples<'_>) -> Result<(), Halt> {
        let b_first = self.b_first();
        let (a, b) = if b_first {
            let b = self.run_once(1)?;
            (self.run_once(0)?, b)
        } else {
            let a = self.run_once(0)?;
            (a, self.run_once(1)?)
        };
        record_side(samples, false, a);
        record_side(samples, true, b);
        record_ratios(samples, a, b, !b_first);
        Ok(())
    }

    /// One duet pair on this thread's side: false when the other side has stopped (the pair
    /// is not counted).
    fn run_duet_pair(
        &mut self,
        me: usize,
        rendezvous: &Rendezvous,
        samples: &mut Samples<'_>,
    ) -> Result<bool, Halt> {
        let pair = self.pairs;
        let b = rendezvous.runs_b(me, pair);
        if !rendezvous.meet(me, 2 * pair) {
            return Ok(false);
        }
        let mine = self.run_once(usize::from(b))?;
        rendezvous.publish(me, mine);
        if !rendezvous.meet(me, 2 * pair + 1) {
            return Ok(false);
        }
        self.pairs += 1;
        record_side(samples, b, mine);
        // One thread records the pair's ratios, so each pair counts once. A's turn is the
        // first when A ran on this thread's CPU (thread 0's).
        if me == 0 {
            let theirs = rendezvous.other(me);
            let (a, b_figures) = if b { (theirs, mine) } else { (mine, theirs) };
            record_ratios(samples, a, b_figures, !b);
        }
        Ok(true)
    }

    fn stderr_tail(&mut self) -> String {
        let len = self.stderr.metadata().map(|m| m.len()).unwrap_or(0);
        let start = len.saturating_sub(STDERR_TAIL as u64);
        let mut text = Vec::new();
        if self.stderr.seek(SeekFrom::Start(start)).is_ok() {
            let _ = (&self.stderr)
                .take(STDERR_TAIL as u64)
                .read_to_end(&mut text);
        }
        let text = String::from_utf8_lossy(&text).trim().to_string();
        if text.is_empty() {
            "(nothing)".into()
        } else {
            text
        }
    }
}

/// One side's figures, where [`metric_sets`] puts them.
fn record_side(samples: &mut Samples<'_>, b: bool, figures: Invocation) {
    let (wall, cpu, instructions) = side_indices(b);
    samples.record(wall, figures.wall_ns, 0);
    samples.record(cpu, figures.cpu_ns, 0);
    if let Some(count) = figures.instructions {
        samples.record(instructions, count, 0);
    }
}

/// A pair's B/A ratios, overall and under the turn A had (`a_first`).
fn record_ratios(samples: &mut Samples<'_>, a: Invocation, b: Invocation, a_first: bool) {
    let (wall, cpu, instructions) = RATIO_INDICES;
    let (wall_ppm, cpu_ppm) = (
        pair_ratio_ppm(a.wall_ns, b.wall_ns),
        pair_ratio_ppm(a.cpu_ns, b.cpu_ns),
    );
    samples.record(wall, wall_ppm, 0);
    samples.record(cpu, cpu_ppm, 0);
    let (turn_wall, turn_cpu) = turn_ratio_indices(a_first);
    samples.record(turn_wall, wall_ppm, 0);
    samples.record(turn_cpu, cpu_ppm, 0);
    if let (Some(x), Some(y)) = (a.instructions, b.instructions) {
        samples.record(instructions, pair_ratio_ppm(x, y), 0);
    }
}

/// B's figure over A's, in parts per million (at least 1: the histogram's floor).
fn pair_ratio_ppm(a: u64, b: u64) -> u64 {
    let ratio = b as f64 / a.max(1) as f64;
    ((ratio * 1e6).round() as u64).max(1)
}

/// A file with no name: created in the temporary directory and unlinked at once.
fn anonymous_file() -> std::io::Result<std::fs::File> {
    let path = std::env::temp_dir()
        .join(format!(
            "quietbench-exec-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ))
        .to_string_lossy()
        .replace(['(', ')', ' '], "");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    std::fs::remove_file(Path::new(&path))?;
    Ok(file)
}

impl Workload for ExecWorkload {
    fn metric_sets(&self) -> &'static [MetricSet] {
        self.sets
    }

    fn step(&mut self, samples: &mut Samples<'_>) -> Step {
        // The duet's side is taken out for the pair and put back (no Arc clone per sample).
        let outcome = if let Some((me, rendezvous)) = self.duet.take() {
            let outcome = self.run_duet_pair(me, &rendezvous, samples);
            if !matches!(outcome, Ok(true)) {
                rendezvous.leave();
            }
            self.duet = Some((me, rendezvous));
            outcome
        } else if self.commands.len() == 1 {
            self.run_once(0).map(|one| {
                samples.record(0, one.wall_ns, 0);
                samples.record(1, one.cpu_ns, 0);
                if let Some(count) = one.instructions {
                    samples.record(SINGLE_INSTRUCTIONS, count, 0);
                }
                true
            })
        } else {
            self.run_pair(samples).map(|()| true)
        };
        match outcome {
            Ok(true) => Step::Recorded,
            // Cancelled mid-command: the command is gone, and the trial ends as cancelled.
            Ok(false) | Err(Halt::Cancelled) => Step::Finished,
            Err(Halt::Failed(message)) => {
                self.error = Some(message);
                Step::Failed
            }
        }
    }

    fn finish(&mut self) {
        // Time is up on this side (or it was cancelled): the other must not wait for it.
        if let Some((_, rendezvous)) = &self.duet {
            rendezvous.leave();
        }
    }

    fn take_error(&mut self) -> Option<String> {
        self.error.take()
    }
}

#[cfg(test)]
mod bounds_tests;
#[cfg(test)]
mod tests;
