//! The user's server for the `http` probe, run on the agent whose host is the system under
//! test (another agent sends the requests): StartServer and StopServer.
//!
//! One server at a time, in a process group of its own (see `spawn.rs`), pinned, journaled in
//! the state directory before it can run (see `journal.rs`), and waited for until its port
//! accepts (see `ready.rs`). It is stopped by StopServer, by a second StartServer, by the
//! agent's graceful stop, and by a watchdog at its max life when no StopServer came (the
//! controller died). An agent killed outright leaves it journaled, and the next agent start on
//! the same state directory kills it. What it cost is read from /proc before it is signalled
//! (see `procfs.rs`).
//!
//! Not stopped with the agent by PR_SET_PDEATHSIG: that fires when the *thread* that forked
//! exits, and the agent forks on a pooled blocking thread that exits when idle.

mod journal;
mod procfs;
mod ready;
mod request;
mod spawn;

use std::fs::File;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use nix::libc;
use quietbench_host::HostRoot;
use quietbench_proto::v1 as pb;
use tonic::Status;

use journal::{ServerEntry, ServerJournal};
use procfs::Identity;
use ready::NotReady;
pub use request::{ServerRequest, check_request, server_cpus};
use request::{choose_port, fill_port, invalid, seconds, shown};
use spawn::{Launch, Leader, Sentinel};

/// How long a stopped server has between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// Bytes of the server's stderr kept for errors and the stop's report.
const STDERR_TAIL: usize = 4096;

/// Why a server is being stopped.
#[derive(Debug, Clone, Copy)]
enum StopReason {
    /// StopServer.
    Request,
    /// A second StartServer.
    Replaced,
    /// Nobody stopped it within its max life.
    MaxLife(Duration),
    /// The agent is stopping.
    AgentStopping,
}

/// The server that runs.
struct Running {
    id: u64,
    leader: Leader,
    /// Stops the group if the agent dies; killed first when the agent stops the server.
    sentinel: Sentinel,
    identity: Identity,
    /// When it was released to exec.
    started: Instant,
    stderr: File,
    /// Dropped with this, which wakes the watchdog to end.
    _watchdog: mpsc::Sender<()>,
}

/// What the slot holds.
#[derive(Default)]
enum Slot {
    #[default]
    Empty,
    Running(Running),
    /// Stopped by the watchdog: reported by the next StopServer.
    Reported(pb::StopServerResponse),
}

/// The user's server this agent runs, if any.
pub struct ServerSlot {
    journal: ServerJournal,
    /// Where its processes are read: always the live /proc (they are this agent's children,
    /// whatever `--host-root` says), a fake one in tests.
    root: HostRoot,
    /// This agent, as journal entries name it.
    me: Option<Identity>,
    boot: String,
    ticks_per_sec: u64,
    state: Mutex<Slot>,
    next_id: AtomicU64,
}

impl ServerSlot {
    /// The slot of an agent whose state directory is `state_dir` (the journal goes there).
    pub fn new(state_dir: &Path) -> Self {
        let root = HostRoot::live();
        Self {
            journal: ServerJournal::in_dir(state_dir),
            me: Identity::of(&root, std::process::id() as i32),
            boot: procfs::read_boot_id(&root),
            root,
            ticks_per_sec: procfs::ticks_per_sec(),
            state: Mutex::new(Slot::Empty),
            next_id: AtomicU64::new(0),
        }
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the server of `req` pinned to `cpus` (empty: unpinned, on `unpinned_cpus`, the
    /// agent's own affinity, rather than the housekeeping CPU the forking thread is pinned to),
    /// after stopping the one that runs. Returns when its port accepts, with the agent's CPUs
    /// it is not pinned to (all of them when it is unpinned) as `free_cpus`.
    pub fn start(
        self: &Arc<Self>,
        req: &ServerRequest,
        cpus: Vec<u32>,
        unpinned_cpus: &[u32],
    ) -> Result<pb::StartServerResponse, Status> {
        let mut slot = self.locked();
        match std::mem::take(&mut *slot) {
            Slot::Running(old) => {
                let report = self.finish(old, StopReason::Replaced);
                tracing::info!(ended = %report.ended, "a new StartServer replaced the server");
            }
            Slot::Reported(_) | Slot::Empty => {}
        }
        let port = choose_port(req.bind, req.port)?;
        let argv = fill_port(&req.argv, port);
        let launch = Launch::new(
            &req.program,
            &argv,
            &req.env,
            req.cwd.as_deref(),
            req.aslr_off,
        )
        .map_err(invalid)?;
        let internal = |what: &str, e: std::io::Error| Status::internal(format!("{what}: {e}"));
        let stderr = spawn::anonymous_file()
            .map_err(|e| internal("cannot create a file for the server's stderr", e))?;
        let devnull = spawn::devnull().map_err(|e| internal("cannot open /dev/null", e))?;
        let waiting = spawn::fork_waiting(&launch, &stderr, &devnull)
            .map_err(|e| internal("cannot fork the server", e))?;
        let pid = waiting.pid();
        spawn::set_affinity(
            pid,
            if cpus.is_empty() {
                unpinned_cpus
            } else {
                &cpus
            },
        )
        .map_err(Status::failed_precondition)?;
        let identity = Identity::of(&self.root, pid).ok_or_else(|| {
            Status::internal(format!(
                "cannot read /proc/{pid}/stat of the server just forked"
            ))
        })?;
        let entry = ServerEntry {
            boot: self.boot.clone(),
            agent: self.me.unwrap_or(Identity {
                pid: std::process::id() as i32,
                start_ticks: 0,
            }),
            server: identity,
            command: shown(&argv),
        };
        self.journal.record(&entry).map_err(|e| {
            Status::failed_precondition(format!(
                "{e}: the server was not started (a server the journal does not hold would \
                 outlive an agent crash)"
            ))
        })?;
        let started = Instant::now();
        let released = waiting.release();
        let mut leader = match released {
            Ok(leader) => leader,
            Err(e) => {
                self.forget(identity);
                return Err(internal("cannot release the server to exec", e));
            }
        };
        let sentinel = match Sentinel::watch(pid) {
            Ok(sentinel) => sentinel,
            Err(e) => {
                // Without its sentinel, a server would outlive an agent that is killed.
                let _ = leader.kill_and_reap();
                self.forget(identity);
                return Err(internal("cannot start the server's sentinel", e));
            }
        };
        let addr = SocketAddr::new(req.bind, port);
        if let Err(why) =
            ready::wait_ready(&leader, addr, req.ready_path.as_deref(), req.ready_timeout)
        {
            drop(sentinel);
            let ended = leader.kill_and_reap().map(|e| e.describe());
            self.forget(identity);
            let tail = spawn::tail(&stderr, STDERR_TAIL);
            let tail = if tail.is_empty() { "(nothing)" } else { &tail };
            let what = match (&why, &req.ready_path) {
                (NotReady::Exited { accepted: true }, Some(path)) => {
                    format!("before GET {path} answered 2xx")
                }
                _ => format!("before its port {port} accepted"),
            };
            let message = match why {
                NotReady::Exited { .. } => format!(
                    "the server {} {what}",
                    ended.unwrap_or_else(|e| format!("exited (its status is lost: {e})"))
                ),
                NotReady::TimedOut {
                    accepted: true,
                    last,
                } => format!(
                    "the server's port {port} accepted, but GET {} did not answer 2xx within \
                     {} s (last: {last}); it was killed",
                    req.ready_path.as_deref().unwrap_or("/"),
                    seconds(req.ready_timeout)
                ),
                NotReady::TimedOut {
                    accepted: false,
                    last,
                } => format!(
                    "the server's port {port} did not accept within {} s (last try: {last}); it \
                     was killed",
                    seconds(req.ready_timeout)
                ),
            };
            return Err(Status::failed_precondition(format!(
                "{message}; its stderr ended with: {tail}"
            )));
        }
        let ready_ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (watchdog, expiry) = mpsc::channel();
        let weak = Arc::downgrade(self);
        let max_life = req.max_life;
        let spawned = std::thread::Builder::new()
            .name("qb-server-life".into())
            .spawn(move || watch(weak, id, expiry, max_life));
        if let Err(e) = spawned {
            // Without its watchdog a server could outlive a dead controller: not started.
            drop(sentinel);
            let _ = leader.kill_and_reap();
            self.forget(identity);
            return Err(internal("cannot start the server's watchdog", e));
        }
        *slot = Slot::Running(Running {
            id,
            leader,
            sentinel,
            identity,
            started,
            stderr,
            _watchdog: watchdog,
        });
        tracing::info!(pid, port, command = %entry.command, "server ready");
        let mut free_cpus: Vec<u32> = unpinned_cpus
            .iter()
            .copied()
            .filter(|c| !cpus.contains(c))
            .collect();
        free_cpus.sort_unstable();
        free_cpus.dedup();
        Ok(pb::StartServerResponse {
            port: port.into(),
            free_cpus,
            cpus,
            pid: pid as u32,
            ready_ns,
            argv,
        })
    }

    /// Stops the server (StopServer): what it cost; `stopped` false when none ran.
    pub fn stop(&self) -> pb::StopServerResponse {
        let mut slot = self.locked();
        match std::mem::take(&mut *slot) {
            Slot::Running(running) => self.finish(running, StopReason::Request),
            Slot::Reported(report) => report,
            Slot::Empty => pb::StopServerResponse::default(),
        }
    }

    /// The agent's graceful stop: stops the server, if one runs.
    pub fn shutdown(&self) {
        let mut slot = self.locked();
        if let Slot::Running(running) = std::mem::take(&mut *slot) {
            let report = self.finish(running, StopReason::AgentStopping);
            tracing::info!(ended = %report.ended, "stopped the server: the agent is stopping");
        }
    }

    /// The watchdog's end: stops server `id` if it still runs, keeping the report.
    fn expire(&self, id: u64, max_life: Duration) {
        let mut slot = self.locked();
        if !matches!(&*slot, Slot::Running(r) if r.id == id) {
            return;
        }
        if let Slot::Running(running) = std::mem::take(&mut *slot) {
            let report = self.finish(running, StopReason::MaxLife(max_life));
            tracing::warn!(ended = %report.ended, "stopped the server at its max life");
            *slot = Slot::Reported(report);
        }
    }

    /// Removes a server that is gone (reaped) from the journal.
    fn forget(&self, identity: Identity) {
        if let Err(err) = self.journal.remove(identity) {
            tracing::error!("{err}: the next agent start will find the server gone");
        }
    }

    /// Reads what the server cost, stops it (SIGTERM to its group, SIGKILL after the grace),
    /// reaps it and removes it from the journal.
    fn finish(&self, running: Running, why: StopReason) -> pb::StopServerResponse {
        let Running {
            mut leader,
            sentinel,
            identity,
            started,
            stderr,
            ..
        } = running;
        // The agent stops it now: the sentinel goes first, so that it never signals a group
        // id that the leader's reaping has freed.
        let pid = leader.pid();
        // Before any signal: what it cost, and whether it was still there.
        let exited_early = leader.has_exited();
        let ticks = procfs::group_cpu_ticks(&self.root, pid);
        let peak_rss = procfs::read_vm_hwm(&self.root, pid);
        let ran = started.elapsed();
        drop(sentinel);
        let stopped_by_term = !exited_early && {
            leader.signal_group(libc::SIGTERM);
            leader.wait_exit(STOP_GRACE)
        };
        let ended = leader.kill_and_reap();
        self.forget(identity);
        let (cpu_ns, rss, how) = match &ended {
            Ok(end) => (end.cpu_ns(), end.max_rss_bytes(), end.describe()),
            Err(e) => (0, 0, format!("ended unseen (wait4: {e})")),
        };
        let mut words = if exited_early {
            how
        } else if stopped_by_term {
            match &ended {
                Ok(end) if end.killed_by(libc::SIGTERM) => "stopped by SIGTERM".to_string(),
                _ => format!("stopped by SIGTERM, and then {how}"),
            }
        } else {
            format!(
                "killed by SIGKILL: it had not exited {} s after SIGTERM",
                seconds(STOP_GRACE)
            )
        };
        // Who stopped it, when it was not StopServer (a server that had exited on its own
        // was stopped by nobody: "exited with status 3" says all).
        match why {
            _ if exited_early => {}
            StopReason::MaxLife(life) => words.push_str(&format!(
                ", by the agent at its max life of {} s (no StopServer came)",
                seconds(life)
            )),
            StopReason::Replaced => words.push_str(", replaced by a new StartServer"),
            StopReason::AgentStopping => words.push_str(", as the agent stopped"),
            StopReason::Request => {}
        }
        pb::StopServerResponse {
            stopped: true,
            cpu_ns: procfs::ticks_to_ns(ticks, self.ticks_per_sec).max(cpu_ns),
            // VmHWM names the leader; when it had exited (no VmHWM left), wait4's figure,
            // which may be a waited-for child's.
            peak_rss_bytes: peak_rss.unwrap_or(rss),
            exited_early,
            ended: words,
            stderr_tail: spawn::tail(&stderr, STDERR_TAIL),
            ran_ns: u64::try_from(ran.as_nanos()).unwrap_or(u64::MAX),
        }
    }
}

/// At agent start, before serving: kills the servers journaled in `state_dir` by agents that
/// are gone (SIGKILL to their groups), and clears their entries.
pub fn stop_orphans(state_dir: &Path) {
    let slot = ServerSlot::new(state_dir);
    let me = slot.me.unwrap_or(Identity {
        pid: std::process::id() as i32,
        start_ticks: 0,
    });
    match slot.journal.stop_orphans(&slot.root, &slot.boot, me) {
        Ok(report) => {
            for e in &report.killed {
                tracing::warn!(
                    pid = e.server.pid,
                    command = %e.command,
                    journal = %slot.journal.path().display(),
                    "killed a server left running by an agent that did not stop cleanly"
                );
            }
            for line in &report.skipped {
                tracing::warn!(journal = %slot.journal.path().display(), "skipped {line}");
            }
        }
        Err(err) => tracing::error!("cannot stop the servers of a previous agent: {err}"),
    }
}

/// The watchdog of server `id`: stops it after `max_life`, unless its sender is dropped first
/// (the server was stopped).
fn watch(slot: Weak<ServerSlot>, id: u64, expiry: mpsc::Receiver<()>, max_life: Duration) {
    if let Err(RecvTimeoutError::Timeout) = expiry.recv_timeout(max_life)
        && let Some(slot) = slot.upgrade()
    {
        slot.expire(id, max_life);
    }
}

#[cfg(test)]
mod tests;
