//! An agent process on this machine, started by re-executing this binary as `quietbench agent`
//! on a free loopback port. It dies with the controller however the controller ends: killed
//! (SIGKILL included, through PR_SET_PDEATHSIG), interrupted, or failing.
//!
//! Only this process can call it: the agent is handed a fresh secret on its standard input (a
//! pipe no one else holds; never a command line or an environment, which other users can read
//! in /proc) and refuses every call without it. Loopback is open to every user of the machine,
//! and the agent runs commands as this user (root, often).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How long a fresh agent may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a stopping agent gets after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Starting the local agent failed.
#[derive(Debug, thiserror::Error)]
pub enum LocalAgentError {
    /// The executable could not be found or started.
    #[error("cannot start a local agent ({exe}): {source}")]
    Spawn {
        /// The program.
        exe: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// It exited before it was ready.
    #[error("the local agent exited before it was ready ({status}); its messages are above")]
    ExitedEarly {
        /// How it ended.
        status: String,
    },
    /// It did not become ready in time.
    #[error("the local agent did not start listening within {0:?}")]
    Timeout(Duration),
    /// It printed something unexpected.
    #[error("the local agent printed '{0}' instead of its listening address")]
    BadHandshake(String),
}

/// A running local agent; stopped when dropped.
pub struct LocalAgent {
    child: Child,
    addr: SocketAddr,
    /// What every call must carry (`--secret-stdin`).
    secret: String,
}

/// A fresh secret: 32 bytes of the kernel's randomness, in hex.
fn new_secret() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl LocalAgent {
    /// Starts `quietbench agent --listen 127.0.0.1:0` from this executable and waits until it
    /// listens. Call it from a thread that lives as long as the agent should (the main thread):
    /// the kernel's parent-death signal follows the thread that spawned the child.
    pub fn start() -> Result<Self, LocalAgentError> {
        let exe = std::env::current_exe().map_err(|source| LocalAgentError::Spawn {
            exe: "current executable".into(),
            source,
        })?;
        let secret = new_secret().map_err(|source| LocalAgentError::Spawn {
            exe: "/dev/urandom (the local agent's secret)".into(),
            source,
        })?;
        let mut command = Command::new(&exe);
        command
            // This machine's own agent, for this user's own commands: exec is allowed, and
            // only this process, which holds the secret, can ask for it.
            .args([
                "agent",
                "--listen",
                "127.0.0.1:0",
                "--allow-exec",
                "--secret-stdin",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            // The store (a PostgreSQL password, perhaps) is the controller's: the agent never
            // needs it, and the commands it runs for exec probes must not inherit it.
            .env_remove(crate::store::DB_VARIABLE);
        if std::env::var_os("QUIETBENCH_LOG").is_none() {
            // The agent's info logs would interleave with the controller's table.
            command.env("QUIETBENCH_LOG", "warn");
        }
        // SAFETY: the closure runs in the forked child before exec and only calls prctl, an
        // async-signal-safe system call; it touches no memory shared with the parent.
        unsafe {
            command.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(Some(Signal::SIGKILL)).map_err(std::io::Error::from)
            });
        }
        let mut child = command.spawn().map_err(|source| LocalAgentError::Spawn {
            exe: exe.display().to_string(),
            source,
        })?;
        // The secret, then end of file: the agent reads one line before it listens.
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let handed = stdin.write_all(format!("{secret}\n").as_bytes());
        drop(stdin);
        if let Err(source) = handed {
            let _ = child.kill();
            let _ = child.wait();
            return Err(LocalAgentError::Spawn {
                exe: "the local agent's standard input".into(),
                source,
            });
        }
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("qb-agent-handshake".into())
            .spawn(move || {
                let mut line = String::new();
                let mut reader = BufReader::new(stdout);
                let _ = tx.send(reader.read_line(&mut line).map(|_| line));
                // Keep draining so the agent never blocks on a full pipe.
                let _ = std::io::copy(&mut reader, &mut std::io::sink());
            })
            .map_err(|source| LocalAgentError::Spawn {
                exe: "handshake thread".into(),
                source,
            })?;
        let mut agent = Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            secret,
        };
        let line = match rx.recv_timeout(START_TIMEOUT) {
            Ok(Ok(line)) => line,
            Ok(Err(_)) | Err(mpsc::RecvTimeoutError::Disconnected) => String::new(),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(LocalAgentError::Timeout(START_TIMEOUT));
            }
        };
        if line.is_empty() {
            let status = agent.wait_exit(Duration::from_secs(2));
            return Err(LocalAgentError::ExitedEarly {
                status: status.map_or("still running".into(), describe_status),
            });
        }
        agent.addr = line
            .trim()
            .rsplit(' ')
            .next()
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| LocalAgentError::BadHandshake(line.trim().to_string()))?;
        Ok(agent)
    }

    /// Where the agent listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The secret every call to it carries.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// The agent's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How the agent ended, if it has (waiting up to `patience` for it).
    pub fn wait_exit(&mut self, patience: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + patience;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => return None,
            }
        }
    }

    fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        // SIGTERM first, so the agent can stop its trial cleanly; SIGKILL if it does not.
        let pid = Pid::from_raw(self.child.id() as i32);
        let _ = kill(pid, Signal::SIGTERM);
        if self.wait_exit(STOP_GRACE).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Drop for LocalAgent {
    fn drop(&mut self) {
        self.stop();
    }
}

/// "exited with code 1", "killed by SIGKILL".
pub fn describe_status(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with code {code}"),
        (None, Some(signal)) => match Signal::try_from(signal) {
            Ok(sig) => format!("killed by {sig}"),
            Err(_) => format!("killed by signal {signal}"),
        },
        (None, None) => "ended".to_string(),
    }
}
