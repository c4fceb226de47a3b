//! Shared helpers of the end-to-end tests: find the `quietbench` binary, start real agent
//! processes, and clean them up.

#![allow(dead_code)] // each test file uses a different subset

pub mod ec2;
pub mod servers;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The `quietbench` binary under test: `$QUIETBENCH_BIN`, or the one cargo built beside this
/// test (`cargo test --workspace` builds it, because the controller package has integration
/// tests of its own).
pub fn quietbench_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("QUIETBENCH_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> -> target/<profile>/quietbench
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test executable lives in target/<profile>/deps")
        .join("quietbench");
    assert!(
        bin.exists(),
        "{} does not exist: run the tests with `cargo test --workspace` (which builds it), or set \
         QUIETBENCH_BIN",
        bin.display()
    );
    bin
}

/// A `quietbench` command whose default result store and fleet ledger are the tests' own
/// (`XDG_DATA_HOME` under cargo's target temp folder, and no `QUIETBENCH_DB`), never the user's: a test then neither
/// adds runs to a person's history nor depends on what is in it (a store written by a newer
/// build, say). A test that needs its own data folder sets `XDG_DATA_HOME` again.
pub fn quietbench() -> Command {
    let mut command = Command::new(quietbench_bin());
    command.env(
        "XDG_DATA_HOME",
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("xdg-data"),
    );
    // A developer's QUIETBENCH_DB (a team's shared store, say) would take precedence.
    command.env_remove("QUIETBENCH_DB");
    command
}

/// The first line a `quietbench serve` spawned with a piped stderr prints, and the address it
/// names ("listening on ADDR"). The rest of its stderr is read on a thread of its own, so the
/// service never blocks on a full pipe.
pub fn serve_address(service: &mut Child) -> (String, String) {
    let mut lines = BufReader::new(service.stderr.take().expect("a piped stderr")).lines();
    let first = lines
        .next()
        .expect("serve says where it listens")
        .expect("serve's stderr");
    std::thread::spawn(move || lines.for_each(drop));
    let address = first
        .split("listening on ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_string();
    (first, address)
}

/// A running `quietbench serve` on a loopback port with its own store and state folder, and
/// `extra` arguments; killed (SIGKILL) when dropped.
pub struct ServiceProcess {
    pub child: Child,
    pub address: String,
}

impl ServiceProcess {
    pub fn start(db: &std::path::Path, state: &std::path::Path, extra: &[&str]) -> Self {
        let mut child = quietbench()
            .args(["serve", "--listen", "127.0.0.1:0", "--db"])
            .arg(db)
            .arg("--state-dir")
            .arg(state)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start quietbench serve");
        let (_, address) = serve_address(&mut child);
        Self { child, address }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `command` to its end and asserts that it succeeded, showing what it printed when it did
/// not; returns its standard output.
pub fn succeed(command: &mut Command) -> String {
    let out = command.output().expect("the command starts");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{command:?} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A fleet CA made with `quietbench certs init` in `dir`, and a certificate issued from it for
/// each of `issues` (the flags of `certs issue`, e.g. `["--client", "ci"]`).
pub fn issue_certs(dir: &std::path::Path, issues: &[&[&str]]) {
    let arg = dir.to_str().unwrap();
    succeed(quietbench().args(["certs", "init", "--dir", arg]));
    for flags in issues {
        succeed(
            quietbench()
                .args(["certs", "issue", "--dir", arg])
                .args(*flags),
        );
    }
}

/// `quietbench agent`, to which [`AgentProcess::start_with`] adds `--listen`.
pub fn agent_command() -> Command {
    let mut command = Command::new(quietbench_bin());
    command.arg("agent");
    command
}

/// A `quietbench agent` process on a free loopback port, killed when dropped.
pub struct AgentProcess {
    pub child: Child,
    pub addr: SocketAddr,
}

impl AgentProcess {
    pub fn start() -> Self {
        Self::start_with(agent_command())
    }

    /// An agent whose restore journal lives in `state_dir`, for tests that tune the host: two
    /// tuning agents must not share the default journal.
    pub fn start_in(state_dir: &std::path::Path) -> Self {
        let mut command = agent_command();
        command.env("QUIETBENCH_STATE_DIR", state_dir);
        Self::start_with(command)
    }

    /// An agent started from `command` (a `quietbench` command with its environment and any
    /// flags before `agent`'s own set by the caller, e.g. `--host-root`).
    pub fn start_with(command: Command) -> Self {
        Self::start_allowing(command, true)
    }

    /// As [`AgentProcess::start_with`]; `allow_exec` false: an agent that refuses exec probes
    /// and servers, as an agent configured by default (an EC2 fleet's load instances).
    pub fn start_allowing(mut command: Command, allow_exec: bool) -> Self {
        command.args(["--listen", "127.0.0.1:0"]);
        // The tests run exec probes: allowed here, refused by default (see security.rs).
        if allow_exec {
            command.arg("--allow-exec");
        }
        let mut child = command
            .env("QUIETBENCH_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start quietbench agent");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("read the agent's listening line");
        let addr = line
            .trim()
            .rsplit(' ')
            .next()
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("unexpected agent handshake: {line:?}"));
        Self { child, addr }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The children of a process, from /proc (its `task/*/children` lists).
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut kids = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return kids;
    };
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            kids.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    kids
}

/// Waits until `pid` has a child, up to `limit`.
pub fn wait_for_child(pid: u32, limit: Duration) -> Option<u32> {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if let Some(&kid) = children_of(pid).first() {
            return Some(kid);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}
