//! StartServer's request: checked field by field before anything runs (every refusal is
//! INVALID_ARGUMENT naming the field), its program found, its CPUs and port chosen.

use std::ffi::OsStr;
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::Duration;

use quietbench_probe::placement::{MachineLayout, PlacementRequest, WorkKind, plan};
use quietbench_proto::v1 as pb;
use tonic::Status;

use crate::limits::{MAX_CPUS, MAX_PARAM_NAME_BYTES, MAX_PARAM_VALUE_BYTES, MAX_PARAMS};

/// Default wait for the port to accept, ms.
pub const DEFAULT_READY_TIMEOUT_MS: u32 = 10_000;
/// Longest wait for the port to accept, ms.
pub const MAX_READY_TIMEOUT_MS: u32 = 120_000;
/// Default life of a server no StopServer stops, ms.
pub const DEFAULT_MAX_LIFE_MS: u64 = 600_000;
/// Longest life of a server no StopServer stops, ms (a day).
pub const MAX_MAX_LIFE_MS: u64 = 86_400_000;
/// Longest ready path.
const MAX_READY_PATH_BYTES: usize = 2048;
/// Longest name of a kept server (`keep_as`).
pub const MAX_KEEP_AS_BYTES: usize = 128;
/// What `{port}` is replaced with.
const PORT_PLACEHOLDER: &str = "{port}";

/// A StartServer request, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerRequest {
    /// The command line as argv, `{port}` not yet filled in.
    pub argv: Vec<String>,
    /// What is exec'd: argv[0] found on PATH, or as given when it holds a `/`.
    pub program: PathBuf,
    /// Variables set over the agent's environment.
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub cwd: Option<PathBuf>,
    /// personality(ADDR_NO_RANDOMIZE).
    pub aslr_off: bool,
    /// Where the readiness check connects.
    pub bind: IpAddr,
    /// The port asked for; 0: the agent picks a free one.
    pub port: u16,
    /// How long the port may take to accept.
    pub ready_timeout: Duration,
    /// `GET` this until it answers 2xx.
    pub ready_path: Option<String>,
    /// Stopped by the agent itself after this long.
    pub max_life: Duration,
    /// CPUs placement gives it when none are named.
    pub threads: usize,
    /// The name it is kept under (restart=run); empty: the per-trial server.
    pub keep_as: String,
}

pub(super) fn invalid(message: impl Into<String>) -> Status {
    Status::invalid_argument(message.into())
}

/// Checks a StartServer request (all but its CPUs, which the service checks against the
/// agent's): every refusal is INVALID_ARGUMENT naming the field.
pub fn check_request(req: &pb::StartServerRequest) -> Result<ServerRequest, Status> {
    let command = req.command.trim();
    if command.is_empty() {
        return Err(invalid(
            "command: empty: give the server's command line, with {port} where its port goes \
             (e.g. 'python3 -m http.server {port}')",
        ));
    }
    if req.command.len() > MAX_PARAM_VALUE_BYTES {
        return Err(invalid(format!(
            "command: {} bytes, at most {MAX_PARAM_VALUE_BYTES}",
            req.command.len()
        )));
    }
    if req.command.contains('\0') {
        return Err(invalid("command: contains a NUL byte"));
    }
    let port = u16::try_from(req.port).map_err(|_| {
        invalid(format!(
            "port: {} is not a TCP port (1-65535, or 0 for one the agent picks)",
            req.port
        ))
    })?;
    if port == 0 && !req.command.contains(PORT_PLACEHOLDER) {
        return Err(invalid(
            "the server must be told its port: put {port} in the command, or give port=",
        ));
    }
    let argv = if req.shell {
        vec!["/bin/sh".to_string(), "-c".to_string(), req.command.clone()]
    } else {
        quietbench_probe::exec::split_words(&req.command)
            .map_err(|why| invalid(format!("command: {why}")))?
    };
    let bind = if req.bind_address.is_empty() {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        req.bind_address.parse().map_err(|_| {
            invalid(format!(
                "bind_address '{}' is not an IP address",
                req.bind_address
            ))
        })?
    };
    let ready_timeout_ms = match req.ready_timeout_ms {
        0 => DEFAULT_READY_TIMEOUT_MS,
        ms if ms > MAX_READY_TIMEOUT_MS => {
            return Err(invalid(format!(
                "ready_timeout_ms: {ms} is over the most, {MAX_READY_TIMEOUT_MS}"
            )));
        }
        ms => ms,
    };
    let max_life_ms = match req.max_life_ms {
        0 => DEFAULT_MAX_LIFE_MS,
        ms => check_max_life_ms(ms)?.as_millis() as u64,
    };
    if !req.keep_as.is_empty() {
        check_keep_as(&req.keep_as)?;
    }
    let ready_path = match req.ready_path.as_str() {
        "" => None,
        path if path.starts_with('/')
            && path.len() <= MAX_READY_PATH_BYTES
            && !path.chars().any(|c| c.is_whitespace() || c.is_control()) =>
        {
            Some(path.to_string())
        }
        path => {
            return Err(invalid(format!(
                "ready_path {:?} is not a request path: it starts with / and holds no spaces or \
                 control characters (at most {MAX_READY_PATH_BYTES} bytes)",
                path.chars().take(80).collect::<String>()
            )));
        }
    };
    let env = check_env(&req.env)?;
    let cwd = match req.cwd.as_str() {
        "" => None,
        dir if Path::new(dir).is_dir() => Some(PathBuf::from(dir)),
        dir => return Err(invalid(format!("cwd '{dir}' is not a directory"))),
    };
    let threads = match req.threads {
        0 => 1,
        n if n as usize > MAX_CPUS => {
            return Err(invalid(format!("threads: {n}, at most {MAX_CPUS}")));
        }
        n => n as usize,
    };
    let path_var = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| std::ffi::OsString::from(v))
        .or_else(|| std::env::var_os("PATH"));
    let first = &argv[0];
    let program = find_program(first, cwd.as_deref(), path_var.as_deref()).ok_or_else(|| {
        invalid(if first.contains('/') {
            format!("command: '{first}' is not an executable file")
        } else {
            format!("command: '{first}' is not an executable on PATH")
        })
    })?;
    Ok(ServerRequest {
        argv,
        program,
        env,
        cwd,
        aslr_off: req.aslr_off,
        bind,
        port,
        ready_timeout: Duration::from_millis(ready_timeout_ms.into()),
        ready_path,
        max_life: Duration::from_millis(max_life_ms),
        threads,
        keep_as: req.keep_as.clone(),
    })
}

/// A max life asked for (StartServer's, SampleServer's renewal), refused over a day.
pub fn check_max_life_ms(ms: u64) -> Result<Duration, Status> {
    if ms > MAX_MAX_LIFE_MS {
        return Err(invalid(format!(
            "max_life_ms: {ms} is over the most, {MAX_MAX_LIFE_MS}"
        )));
    }
    Ok(Duration::from_millis(ms))
}

/// A kept server's name: 1 to [`MAX_KEEP_AS_BYTES`] printable ASCII characters, so that it
/// reads plainly in the agent's logs and errors.
pub fn check_keep_as(name: &str) -> Result<(), Status> {
    if name.is_empty()
        || name.len() > MAX_KEEP_AS_BYTES
        || !name.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
    {
        return Err(invalid(format!(
            "keep_as {:?}: give the kept server a name of 1 to {MAX_KEEP_AS_BYTES} printable \
             ASCII characters",
            name.chars().take(80).collect::<String>()
        )));
    }
    Ok(())
}

/// The request's variables, sorted by name, refused when one could not be set.
fn check_env(
    env: &std::collections::HashMap<String, String>,
) -> Result<Vec<(String, String)>, Status> {
    if env.len() > MAX_PARAMS {
        return Err(invalid(format!(
            "env: {} variables, at most {MAX_PARAMS}",
            env.len()
        )));
    }
    let mut vars: Vec<(String, String)> = env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    vars.sort();
    for (name, value) in &vars {
        let shown: String = name.chars().take(MAX_PARAM_NAME_BYTES).collect();
        if name.is_empty() || name.contains(['=', '\0']) || name.len() > MAX_PARAM_NAME_BYTES {
            return Err(invalid(format!(
                "env: {shown:?} is not a variable name (1-{MAX_PARAM_NAME_BYTES} bytes, no '=' \
                 or NUL)"
            )));
        }
        if value.contains('\0') || value.len() > MAX_PARAM_VALUE_BYTES {
            return Err(invalid(format!(
                "env.{shown}: its value holds a NUL byte or is over {MAX_PARAM_VALUE_BYTES} bytes"
            )));
        }
    }
    Ok(vars)
}

/// Finds the program as execvp would, once, before the fork. A name holding a `/` is taken
/// as given (relative to `cwd`, where the child will be when it execs).
fn find_program(name: &str, cwd: Option<&Path>, path_var: Option<&OsStr>) -> Option<PathBuf> {
    let executable =
        |p: &Path| p.is_file() && nix::unistd::access(p, nix::unistd::AccessFlags::X_OK).is_ok();
    if name.contains('/') {
        let given = Path::new(name);
        let seen = match cwd {
            Some(dir) if given.is_relative() => dir.join(given),
            _ => given.to_path_buf(),
        };
        return executable(&seen).then(|| given.to_path_buf());
    }
    std::env::split_paths(path_var?)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|p| executable(p))
}

/// The CPUs the server is pinned to: those named, else placement's for `threads` compute
/// threads (distinct, ascending). Empty when placement has none: the server is left to the
/// scheduler on every CPU the agent may use.
pub fn server_cpus(layout: &MachineLayout, named: &[u32], threads: usize) -> Vec<u32> {
    let mut cpus = if named.is_empty() {
        let request = PlacementRequest {
            threads,
            kind: WorkKind::Compute,
            explicit_cpus: Vec::new(),
        };
        plan(layout, &request)
            .map(|p| p.thread_cpus)
            .unwrap_or_default()
    } else {
        named.to_vec()
    };
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

/// Every `{port}` of `argv` filled in.
pub(super) fn fill_port(argv: &[String], port: u16) -> Vec<String> {
    argv.iter()
        .map(|a| a.replace(PORT_PLACEHOLDER, &port.to_string()))
        .collect()
}

/// The port the server gets: the one asked for, which must be free now (or the readiness
/// check could take whatever listens there for the server), else a free one the kernel picks
/// (bound and closed at once; another program could take it before the server does).
pub(super) fn choose_port(bind: IpAddr, port: u16) -> Result<u16, Status> {
    match TcpListener::bind((bind, port)) {
        Ok(listener) => listener
            .local_addr()
            .map(|a| a.port())
            .map_err(|e| Status::internal(format!("cannot read the port picked on {bind}: {e}"))),
        Err(err) if err.kind() == std::io::ErrorKind::AddrInUse => {
            Err(Status::failed_precondition(format!(
                "port {port} on {bind} is already in use: the readiness check would take what \
                 listens there for the server. Stop it, or give port=0 to let the agent pick a \
                 free port"
            )))
        }
        // A privileged port: the server may hold the capability the agent lacks.
        Err(err) if port != 0 && err.kind() == std::io::ErrorKind::PermissionDenied => Ok(port),
        Err(err) => Err(invalid(format!(
            "bind_address {bind}: cannot listen there ({err}): give an address of this host"
        ))),
    }
}

/// A command line for the logs, each word quoted when it needs to be.
pub(super) fn shown(argv: &[String]) -> String {
    argv.iter()
        .map(|w| {
            if !w.is_empty() && !w.contains(|c: char| c.is_whitespace() || "'\"\\$`".contains(c)) {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Seconds as people write them: "0.3", "10".
pub(super) fn seconds(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        (ms / 1000).to_string()
    } else {
        format!("{}.{:03}", ms / 1000, ms % 1000)
            .trim_end_matches('0')
            .to_string()
    }
}
