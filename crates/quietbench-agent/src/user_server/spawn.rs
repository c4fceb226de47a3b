//! Forking the user's server as exec's commands are forked (quietbench-probe's exec.rs and
//! exec/child.rs): everything the child needs is built before the fork, because between fork
//! and exec the child may not allocate (another thread may hold the allocator's lock at the
//! fork); its own process group; stdin and stdout on /dev/null, stderr into a file with no
//! name. Not `std::process::Command` with `pre_exec`: it cannot hold the child at a pipe
//! until the parent has journaled it, which is the point of the journal.
//!
//! The child stops at a pipe before exec: the parent pins it, reads its start time and
//! journals it, and only then releases it. A parent that dies (or gives up) first closes its
//! end of the pipe, and the child exits without running anything of the user's.
//!
//! The group is signalled only while its leader is unreaped (a zombie at worst), so its id
//! cannot have been reused by another process's group.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::libc;
use quietbench_probe::exec::{Environment, Prepared, wait4_child};

/// ADDR_NO_RANDOMIZE from linux/personality.h.
const ADDR_NO_RANDOMIZE: libc::c_ulong = 0x0040000;
/// What the child writes to its stderr when it cannot go on; static, since it may not
/// allocate.
const CHDIR_FAILED: &[u8] = b"quietbench-agent: cannot enter the server's working directory\n";
const PERSONALITY_REFUSED: &[u8] =
    b"quietbench-agent: personality(ADDR_NO_RANDOMIZE) was refused: the server was not started \
      with ASLR on in its place\n";
const EXEC_FAILED: &[u8] = b"quietbench-agent: execve of the server's program failed\n";

/// The server's command ready to exec: exec's own pieces (quietbench-probe's `Prepared` and
/// `Environment`), built before the fork.
pub struct Launch {
    command: Prepared,
    environment: Environment,
    cwd: Option<CString>,
    aslr_off: bool,
}

impl Launch {
    /// `program` run with `argv`, the agent's environment with `env` set over it, in `cwd`.
    pub fn new(
        program: &Path,
        argv: &[String],
        env: &[(String, String)],
        cwd: Option<&Path>,
        aslr_off: bool,
    ) -> Result<Self, String> {
        let cwd = cwd
            .map(|d| {
                CString::new(d.as_os_str().as_bytes())
                    .map_err(|_| "the working directory contains a NUL byte".to_string())
            })
            .transpose()?;
        Ok(Self {
            command: Prepared::new(program, argv)?,
            environment: Environment::new(env)?,
            cwd,
            aslr_off,
        })
    }
}

/// A forked child waiting at its pipe, before exec. Dropping it closes the pipe (the child
/// exits) and reaps the child.
pub struct Waiting {
    leader: Leader,
    release: OwnedFd,
}

/// Forks the child of `launch`, which makes its own process group and waits at a pipe until
/// [`Waiting::release`].
pub fn fork_waiting(launch: &Launch, stderr: &File, devnull: &File) -> std::io::Result<Waiting> {
    let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (gate, gate_write) = (read_end.as_raw_fd(), write_end.as_raw_fd());
    let (err_fd, null_fd) = (stderr.as_raw_fd(), devnull.as_raw_fd());
    // Built before the fork: the signal mask and SIGPIPE's disposition the server starts with.
    // The agent's thread may block signals, and Rust ignores SIGPIPE in its processes (an
    // ignored signal stays ignored across exec): the server gets the defaults a shell gives.
    // SAFETY: all-zero sigset_t and sigaction are valid values; sigemptyset fills the set.
    let mut no_signals: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid, writable sigset_t.
    unsafe { libc::sigemptyset(&mut no_signals) };
    // SAFETY: see above.
    let mut default_action: libc::sigaction = unsafe { std::mem::zeroed() };
    default_action.sa_sigaction = libc::SIG_DFL;
    // SAFETY: fork in a multi-threaded process is sound when the child makes only
    // async-signal-safe calls before exec: setpgid, close, sigprocmask, sigaction, read, dup2,
    // chdir, personality, write, execve and _exit are system calls, and every pointer they
    // receive was built before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: the child side of the fork, see above; _exit never returns.
        unsafe {
            // Its own group first: whatever it starts is stopped with it.
            libc::setpgid(0, 0);
            // Its copy of the write end, or it would never see the parent's end close.
            libc::close(gate_write);
            libc::sigprocmask(libc::SIG_SETMASK, &no_signals, std::ptr::null_mut());
            libc::sigaction(libc::SIGPIPE, &default_action, std::ptr::null_mut());
            let mut byte = 0u8;
            if libc::read(gate, (&mut byte as *mut u8).cast(), 1) != 1 {
                // The agent gave up on it (or died) before it was journaled.
                libc::_exit(127);
            }
            libc::dup2(null_fd, 0);
            libc::dup2(null_fd, 1);
            libc::dup2(err_fd, 2);
            if let Some(dir) = &launch.cwd
                && libc::chdir(dir.as_ptr()) != 0
            {
                libc::write(2, CHDIR_FAILED.as_ptr().cast(), CHDIR_FAILED.len());
                libc::_exit(126);
            }
            // A refused personality (systemd's LockPersonality=, a seccomp filter) must not
            // let an "ASLR off" server run with ASLR on.
            if launch.aslr_off && libc::personality(ADDR_NO_RANDOMIZE) == -1 {
                libc::write(
                    2,
                    PERSONALITY_REFUSED.as_ptr().cast(),
                    PERSONALITY_REFUSED.len(),
                );
                libc::_exit(125);
            }
            libc::execve(
                launch.command.program.as_ptr(),
                launch.command.argv_ptrs.as_ptr(),
                launch.environment.as_ptr(),
            );
            libc::write(2, EXEC_FAILED.as_ptr().cast(), EXEC_FAILED.len());
            libc::_exit(127);
        }
    }
    drop(read_end);
    Ok(Waiting {
        leader: Leader::adopt(pid),
        release: write_end,
    })
}

impl Waiting {
    /// The child's pid (and process group).
    pub fn pid(&self) -> i32 {
        self.leader.pid
    }

    /// Lets the child exec.
    pub fn release(self) -> std::io::Result<Leader> {
        let Self { leader, release } = self;
        nix::unistd::write(&release, &[1])?;
        Ok(leader)
    }
}

/// The server's process group, led by the process the agent forked. Killed (SIGKILL to the
/// group) and reaped on drop unless reaped before.
pub struct Leader {
    pid: i32,
    reaped: bool,
}

/// How the leader ended, from wait4.
pub struct Ended {
    /// Its wait status.
    pub status: libc::c_int,
    /// Its resource usage, and that of the children it waited for.
    pub usage: libc::rusage,
}

impl Ended {
    /// User plus system time, nanoseconds.
    pub fn cpu_ns(&self) -> u64 {
        let ns = |t: libc::timeval| {
            (t.tv_sec.max(0) as u64)
                .saturating_mul(1_000_000_000)
                .saturating_add(t.tv_usec.max(0) as u64 * 1_000)
        };
        ns(self.usage.ru_utime).saturating_add(ns(self.usage.ru_stime))
    }

    /// The largest resident set of the leader or of one of the children it waited for, bytes.
    pub fn max_rss_bytes(&self) -> u64 {
        (self.usage.ru_maxrss.max(0) as u64).saturating_mul(1024)
    }

    /// Whether SIGTERM ended it (it died of it, or exited after it: the caller knows which).
    pub fn killed_by(&self, signal: libc::c_int) -> bool {
        libc::WIFSIGNALED(self.status) && libc::WTERMSIG(self.status) == signal
    }

    /// "exited with status 3", "killed by signal 9 (SIGKILL)".
    pub fn describe(&self) -> String {
        describe_status(self.status)
    }
}

/// A wait status in words: "exited with status 3", "killed by signal 9 (SIGKILL)".
pub fn describe_status(status: libc::c_int) -> String {
    if libc::WIFEXITED(status) {
        let code = libc::WEXITSTATUS(status);
        let why = match code {
            125 => " (personality(ADDR_NO_RANDOMIZE) refused?)",
            126 => " (its working directory could not be entered?)",
            127 => " (it could not be executed?)",
            _ => "",
        };
        format!("exited with status {code}{why}")
    } else if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        match nix::sys::signal::Signal::try_from(signal) {
            Ok(name) => format!("killed by signal {signal} ({name})"),
            Err(_) => format!("killed by signal {signal}"),
        }
    } else {
        format!("ended with wait status {status:#x}")
    }
}

impl Leader {
    fn adopt(pid: i32) -> Self {
        // SAFETY: setpgid on our own child; it fails harmlessly if the child has already
        // made the group itself.
        unsafe { libc::setpgid(pid, pid) };
        Self { pid, reaped: false }
    }

    /// The leader's pid, which is also the group's id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Whether the leader has exited (a zombie, not reaped yet).
    pub fn has_exited(&self) -> bool {
        // SAFETY: an all-zero siginfo is valid; waitid writes it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid on our own child with a valid siginfo; WNOWAIT leaves it unreaped.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                self.pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: si_pid is set by waitid (0 when the child has not changed state).
        r == 0 && unsafe { info.si_pid() } == self.pid
    }

    /// Waits up to `limit` for the leader to exit (without reaping it): whether it did.
    pub fn wait_exit(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.has_exited() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            std::thread::sleep((deadline - now).min(Duration::from_millis(10)));
        }
    }

    /// Sends `signal` to every process of the group. The leader is unreaped, so the group's id
    /// is still ours.
    pub fn signal_group(&self, signal: libc::c_int) {
        if !self.reaped {
            // SAFETY: kill(2) with a negative pid signals that process group, our child's.
            unsafe { libc::kill(-self.pid, signal) };
        }
    }

    /// Reaps the leader (call after it has exited, or after SIGKILL to its group).
    pub fn reap(&mut self) -> std::io::Result<Ended> {
        // Reaped, or not ours to wait for any more: nothing is left to reap either way.
        self.reaped = true;
        let (status, usage) = wait4_child(self.pid)?;
        Ok(Ended { status, usage })
    }

    /// SIGKILL to the whole group, then reaps the leader.
    pub fn kill_and_reap(&mut self) -> std::io::Result<Ended> {
        self.signal_group(libc::SIGKILL);
        self.reap()
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.kill_and_reap();
        }
    }
}

/// Pins process `pid` (all of it: a process not yet exec'd has one thread) to `cpus`.
pub fn set_affinity(pid: i32, cpus: &[u32]) -> Result<(), String> {
    use nix::sched::{CpuSet, sched_setaffinity};
    let mut set = CpuSet::new();
    for &cpu in cpus {
        set.set(cpu as usize).map_err(|_| {
            format!(
                "CPU {cpu} is beyond the largest CPU set this system supports ({} CPUs)",
                CpuSet::count()
            )
        })?;
    }
    sched_setaffinity(nix::unistd::Pid::from_raw(pid), &set).map_err(|errno| {
        format!(
            "cannot pin the server to CPUs {}: sched_setaffinity: {errno}",
            quietbench_host::format_cpu_list(cpus)
        )
    })
}

/// A file with no name for the server's stderr: created in the temporary directory and
/// unlinked at once, so nothing is left behind however the agent ends.
pub fn anonymous_file() -> std::io::Result<File> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "quietbench-server-stderr-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(file)
}

/// The last `limit` bytes of the server's stderr, as text. Read with pread: the file's offset
/// is shared with the server, whose writes must keep going to its end.
pub fn tail(file: &File, limit: usize) -> String {
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(limit as u64);
    let mut bytes = vec![0u8; (len - start) as usize];
    let mut read = 0;
    while read < bytes.len() {
        match file.read_at(&mut bytes[read..], start + read as u64) {
            Ok(0) | Err(_) => break,
            Ok(n) => read += n,
        }
    }
    bytes.truncate(read);
    String::from_utf8_lossy(&bytes).trim().to_string()
}

/// Opens /dev/null for reading and writing.
pub fn devnull() -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
}

// SAFETY: the raw pointers in `command` and `environment` point into buffers those own and
// never change after construction; moving the struct moves their owners, not the heap buffers.
unsafe impl Send for Launch {}

/// How long a sentinel waits after SIGTERM before it kills the server's group.
const SENTINEL_GRACE: libc::timespec = libc::timespec {
    tv_sec: 2,
    tv_nsec: 0,
};

/// A small process that stops the server's group the moment the agent dies (SIGKILLed, or
/// killed with the controller that started it: `run --local`'s agents die with their
/// controller), so that no server outlives its agent by more than the sentinel's grace. The
/// journal covers what the sentinel cannot (a sentinel killed too, a reboot): the next agent
/// start stops what it holds.
///
/// It holds the read end of a pipe whose only write end is the agent's (close-on-exec, so no
/// child of the agent keeps it past its exec): when the agent's process ends, the kernel closes
/// that end, the sentinel's read returns end-of-file, and it sends SIGTERM to the group, then
/// SIGKILL after 2 s. It runs in a session of its own, ignoring the terminal's signals (a
/// Ctrl-C that stops the controller must not stop the sentinel first), with every other file
/// of the agent closed (it must not hold the agent's listening socket). A normal stop kills
/// it first ([`Drop`]), before the server's group is signalled and its leader reaped, so the
/// group id it watches is never another's.
pub struct Sentinel {
    pid: i32,
    _keep: OwnedFd,
}

impl Sentinel {
    /// Starts the sentinel of process group `group`.
    pub fn watch(group: i32) -> std::io::Result<Self> {
        let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let watch_fd = read_end.as_raw_fd();
        // SAFETY: sysconf is a plain query, made before the fork.
        let open_max = unsafe { libc::sysconf(libc::_SC_OPEN_MAX) }.clamp(1024, 65_536) as i32;
        // SAFETY: the child makes only async-signal-safe system calls (setsid, signal, dup2,
        // close_range or close, read, kill, nanosleep, _exit) and touches no memory shared
        // with the parent but the constants above.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: the child side of the fork, see above; _exit never returns.
            unsafe {
                libc::setsid();
                for signal in [libc::SIGINT, libc::SIGHUP, libc::SIGTERM, libc::SIGQUIT] {
                    libc::signal(signal, libc::SIG_IGN);
                }
                if watch_fd != 0 {
                    libc::dup2(watch_fd, 0);
                }
                if libc::syscall(libc::SYS_close_range, 1u32, u32::MAX, 0u32) != 0 {
                    for fd in 1..open_max {
                        libc::close(fd);
                    }
                }
                let mut byte = 0u8;
                loop {
                    let read = libc::read(0, (&mut byte as *mut u8).cast(), 1);
                    if read == 0 || (read < 0 && *libc::__errno_location() != libc::EINTR) {
                        break;
                    }
                }
                libc::kill(-group, libc::SIGTERM);
                libc::nanosleep(&SENTINEL_GRACE, std::ptr::null_mut());
                libc::kill(-group, libc::SIGKILL);
                libc::_exit(0);
            }
        }
        drop(read_end);
        Ok(Self {
            pid,
            _keep: write_end,
        })
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        // SAFETY: kill and waitpid on our own child; a null status pointer is allowed.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            while libc::waitpid(self.pid, std::ptr::null_mut(), 0) < 0
                && *libc::__errno_location() == libc::EINTR
            {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(argv: &[&str], cwd: Option<&Path>) -> (Ended, String) {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let launch = Launch::new(
            Path::new(&argv[0]),
            &argv,
            &[("QB_SPAWN_TEST".into(), "set".into())],
            cwd,
            false,
        )
        .unwrap();
        let stderr = anonymous_file().unwrap();
        let waiting = fork_waiting(&launch, &stderr, &devnull().unwrap()).unwrap();
        let mut leader = waiting.release().unwrap();
        assert!(leader.wait_exit(Duration::from_secs(30)));
        let ended = leader.reap().unwrap();
        (ended, tail(&stderr, 4096))
    }

    #[test]
    fn the_child_runs_with_its_environment_and_stderr_captured() {
        let (ended, stderr) = run(
            &[
                "/bin/sh",
                "-c",
                "echo \"$QB_SPAWN_TEST in $(pwd)\" >&2; exit 3",
            ],
            Some(Path::new("/")),
        );
        assert_eq!(ended.describe(), "exited with status 3");
        assert_eq!(stderr, "set in /");
    }

    #[test]
    fn a_child_that_is_never_released_runs_nothing_and_is_reaped() {
        let launch = Launch::new(
            Path::new("/bin/sh"),
            &["/bin/sh".into(), "-c".into(), "echo ran >&2".into()],
            &[],
            None,
            false,
        )
        .unwrap();
        let stderr = anonymous_file().unwrap();
        let waiting = fork_waiting(&launch, &stderr, &devnull().unwrap()).unwrap();
        let pid = waiting.pid();
        drop(waiting);
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "reaped"
        );
        assert_eq!(tail(&stderr, 4096), "");
    }

    #[test]
    fn only_the_tail_of_stderr_is_kept() {
        let (_, stderr) = run(
            &[
                "/bin/sh",
                "-c",
                "i=0; while [ $i -lt 2000 ]; do echo line$i >&2; i=$((i+1)); done",
            ],
            None,
        );
        assert!(
            stderr.len() <= 4096 && stderr.len() > 4000,
            "{}",
            stderr.len()
        );
        assert!(stderr.ends_with("line1999"), "{stderr}");
    }

    #[test]
    fn wait_statuses_read_as_words() {
        assert_eq!(describe_status(3 << 8), "exited with status 3");
        assert_eq!(describe_status(9), "killed by signal 9 (SIGKILL)");
        assert_eq!(
            describe_status(127 << 8),
            "exited with status 127 (it could not be executed?)"
        );
    }
}
