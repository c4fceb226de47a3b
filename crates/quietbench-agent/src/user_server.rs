//! The user's server for the `http` probe, run on the agent whose host is the system under
//! test (another agent sends the requests): StartServer and StopServer.
//!
//! One per-trial server at a time, and beside it up to [`MAX_KEPT`] servers kept for a whole
//! run (restart=run: StartServer's `keep_as` names each, SampleServer reads what one has cost
//! so far). Each in a process group of its own (see `spawn.rs`), pinned, journaled in the state
//! directory before it can run (see `journal.rs`), and waited for until its port accepts (see
//! `ready.rs`). It is stopped by StopServer, by a StartServer of the same name, by the agent's
//! graceful stop, and by a watchdog at its max life when no StopServer (or, for a kept one, no
//! SampleServer) came: the controller died. An agent killed outright leaves it journaled, and
//! the next agent start on the same state directory kills it. What it cost is read from /proc
//! before it is signalled (see `procfs.rs`).
//!
//! Why kept servers at all, and why a few: a compare interleaves A's and B's trials in a random
//! order each round, so a run that keeps one process per build needs both alive at once (a stop
//! and start at every switch of build would restart the server at most trials, which is
//! restart=trial by another name). A plan may have a few variants; [`MAX_KEPT`] bounds what one
//! caller can make an agent hold (processes, their sentinels and watchdog threads), and more
//! idle servers than that beside the measured one no longer describe the machine measured.
//!
//! Not stopped with the agent by PR_SET_PDEATHSIG: that fires when the *thread* that forked
//! exits, and the agent forks on a pooled blocking thread that exits when idle.

mod journal;
mod procfs;
mod ready;
mod request;
mod spawn;

use std::collections::BTreeMap;
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
pub use request::{ServerRequest, check_keep_as, check_max_life_ms, check_request, server_cpus};
use request::{choose_port, fill_port, invalid, seconds, shown};
use spawn::{Launch, Leader, Sentinel};

/// How long a stopped server has between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// Bytes of the server's stderr kept for errors and the stop's report.
const STDERR_TAIL: usize = 4096;
/// Servers kept for a run (`keep_as`) one agent holds at once, besides the per-trial one.
pub const MAX_KEPT: usize = 8;

/// Why a server is being stopped.
#[derive(Debug, Clone, Copy)]
enum StopReason {
    /// StopServer.
    Request,
    /// A second StartServer.
    Replaced,
    /// Nobody stopped it within its max life (`renewed`: counted from its last SampleServer).
    MaxLife { life: Duration, renewed: bool },
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
    /// A new max life, counted from now (SampleServer); dropped with this, which wakes the
    /// watchdog to end.
    watchdog: mpsc::Sender<Duration>,
}

/// What the slot holds of one server.
enum Slot {
    Running(Running),
    /// Stopped by the watchdog: reported by the next StopServer (or SampleServer).
    Reported(pb::StopServerResponse),
}

/// The user's servers this agent runs, by name: "" for the per-trial one, a `keep_as` for
/// each kept one.
pub struct ServerSlot {
    journal: ServerJournal,
    /// Where its processes are read: always the live /proc (they are this agent's children,
    /// whatever `--host-root` says), a fake one in tests.
    root: HostRoot,
    /// This agent, as journal entries name it.
    me: Option<Identity>,
    boot: String,
    ticks_per_sec: u64,
    state: Mutex<BTreeMap<String, Slot>>,
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
            state: Mutex::new(BTreeMap::new()),
            next_id: AtomicU64::new(0),
        }
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Slot>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the server of `req` pinned to `cpus` (empty: unpinned, on `unpinned_cpus`, the
    /// agent's own affinity, rather than the housekeeping CPU the forking thread is pinned to),
    /// after stopping the one of the same name (`keep_as`) that runs. Returns when its port
    /// accepts, with the agent's CPUs it is not pinned to (all of them when it is unpinned) as
    /// `free_cpus`. A kept server beyond [`MAX_KEPT`] is refused.
    pub fn start(
        self: &Arc<Self>,
        req: &ServerRequest,
        cpus: Vec<u32>,
        unpinned_cpus: &[u32],
    ) -> Result<pb::StartServerResponse, Status> {
        let mut servers = self.locked();
        let name = req.keep_as.clone();
        if let Some(Slot::Running(old)) = servers.remove(&name) {
            let report = self.finish(old, StopReason::Replaced);
            tracing::info!(
                ended = %report.ended,
                name = %name,
                "a new StartServer replaced the server"
            );
        }
        if !name.is_empty() {
            room_for_one_more(&mut servers)?;
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
        let watched = name.clone();
        let spawned = std::thread::Builder::new()
            .name("qb-server-life".into())
            .spawn(move || watch(weak, &watched, id, expiry, max_life));
        if let Err(e) = spawned {
            // Without its watchdog a server could outlive a dead controller: not started.
            drop(sentinel);
            let _ = leader.kill_and_reap();
            self.forget(identity);
            return Err(internal("cannot start the server's watchdog", e));
        }
        servers.insert(
            name.clone(),
            Slot::Running(Running {
                id,
                leader,
                sentinel,
                identity,
                started,
                stderr,
                watchdog,
            }),
        );
        tracing::info!(pid, port, command = %entry.command, name = %name, "server ready");
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

    /// Stops the server named `keep_as` ("": the per-trial one; StopServer): what it cost;
    /// `stopped` false when none ran.
    pub fn stop(&self, keep_as: &str) -> pb::StopServerResponse {
        let mut servers = self.locked();
        match servers.remove(keep_as) {
            Some(Slot::Running(running)) => self.finish(running, StopReason::Request),
            Some(Slot::Reported(report)) => report,
            None => pb::StopServerResponse::default(),
        }
    }

    /// What the kept server `keep_as` has cost so far, without a signal (SampleServer), and
    /// from now on `renew` as its max life when given. One found gone (it exited, or the
    /// watchdog stopped it) is reaped and reported with how it ended, once; `stopped` false
    /// when there is none of that name.
    pub fn sample(&self, keep_as: &str, renew: Option<Duration>) -> pb::StopServerResponse {
        let mut servers = self.locked();
        let gone = match servers.get(keep_as) {
            None => return pb::StopServerResponse::default(),
            Some(Slot::Running(running)) => running.leader.has_exited(),
            Some(Slot::Reported(_)) => true,
        };
        if gone {
            return match servers.remove(keep_as) {
                Some(Slot::Running(ended)) => self.finish(ended, StopReason::Request),
                Some(Slot::Reported(report)) => report,
                None => pb::StopServerResponse::default(),
            };
        }
        let Some(Slot::Running(running)) = servers.get(keep_as) else {
            return pb::StopServerResponse::default();
        };
        if let Some(life) = renew {
            // A watchdog that has just run out waits for this lock to stop the server: the
            // renewal came too late, and goes unread (or fails) without harm.
            let _ = running.watchdog.send(life);
        }
        let pid = running.leader.pid();
        pb::StopServerResponse {
            stopped: true,
            cpu_ns: procfs::ticks_to_ns(
                procfs::group_cpu_ticks(&self.root, pid),
                self.ticks_per_sec,
            ),
            peak_rss_bytes: procfs::read_vm_hwm(&self.root, pid).unwrap_or(0),
            exited_early: false,
            ended: String::new(),
            stderr_tail: String::new(),
            ran_ns: u64::try_from(running.started.elapsed().as_nanos()).unwrap_or(u64::MAX),
        }
    }

    /// The agent's graceful stop: stops every server that runs.
    pub fn shutdown(&self) {
        let mut servers = self.locked();
        for (name, slot) in std::mem::take(&mut *servers) {
            if let Slot::Running(running) = slot {
                let report = self.finish(running, StopReason::AgentStopping);
                tracing::info!(
                    ended = %report.ended,
                    name = %name,
                    "stopped the server: the agent is stopping"
                );
            }
        }
    }

    /// The watchdog's end: stops server `id` of that name if it still runs, keeping the report.
    fn expire(&self, name: &str, id: u64, life: Duration, renewed: bool) {
        let mut servers = self.locked();
        if !matches!(servers.get(name), Some(Slot::Running(r)) if r.id == id) {
            return;
        }
        if let Some(Slot::Running(running)) = servers.remove(name) {
            let report = self.finish(running, StopReason::MaxLife { life, renewed });
            tracing::warn!(
                ended = %report.ended,
                name = %name,
                "stopped the server at its max life"
            );
            servers.insert(name.to_string(), Slot::Reported(report));
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
            StopReason::MaxLife {
                life,
                renewed: false,
            } => words.push_str(&format!(
                ", by the agent at its max life of {} s (no StopServer came)",
                seconds(life)
            )),
            StopReason::MaxLife {
                life,
                renewed: true,
            } => words.push_str(&format!(
                ", by the agent at its max life, {} s after the last SampleServer (no \
                 SampleServer or StopServer came since)",
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

/// Makes room for one more kept server: reports nobody asked for go first (a name that is
/// never sampled again must not hold a place); refused when [`MAX_KEPT`] still run.
fn room_for_one_more(servers: &mut BTreeMap<String, Slot>) -> Result<(), Status> {
    let kept = |servers: &BTreeMap<String, Slot>| servers.keys().filter(|n| !n.is_empty()).count();
    if kept(servers) < MAX_KEPT {
        return Ok(());
    }
    servers.retain(|name, slot| name.is_empty() || matches!(slot, Slot::Running(_)));
    if kept(servers) < MAX_KEPT {
        return Ok(());
    }
    let names: Vec<&str> = servers
        .keys()
        .filter(|n| !n.is_empty())
        .map(String::as_str)
        .collect();
    Err(Status::resource_exhausted(format!(
        "this agent already keeps {MAX_KEPT} servers, the most it keeps at once ({}): stop one \
         (StopServer with its keep_as), or start this one per trial (restart=trial)",
        names.join(", ")
    )))
}

/// The watchdog of server `id` called `name`: stops it after its max life, counted from its
/// start or from the last renewal its channel brings, unless the channel closes first (the
/// server was stopped).
fn watch(
    slot: Weak<ServerSlot>,
    name: &str,
    id: u64,
    renewals: mpsc::Receiver<Duration>,
    max_life: Duration,
) {
    let mut life = max_life;
    let mut deadline = Instant::now() + life;
    let mut renewed = false;
    loop {
        match renewals.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(new_life) => {
                life = new_life;
                deadline = Instant::now() + life;
                renewed = true;
            }
            Err(RecvTimeoutError::Timeout) => {
                if let Some(slot) = slot.upgrade() {
                    slot.expire(name, id, life, renewed);
                }
                return;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

#[cfg(test)]
mod tests;
