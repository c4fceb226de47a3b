//! What the red team reproduced, tried again through the real binary: a local agent that any
//! user of the machine could call (and through it run commands as the run's user), and agents
//! locked out by idle sockets. Each test fails on the code before the fix.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{AgentProcess, agent_command, children_of, quietbench};
use quietbench_proto::v1 as pb;
use quietbench_proto::v1::agent_service_client::AgentServiceClient;

/// The TCP ports `pid` listens on, from its open sockets and /proc/net/tcp.
fn listening_ports(pid: u32) -> Vec<u16> {
    let mut inodes = Vec::new();
    if let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for fd in fds.flatten() {
            if let Ok(target) = std::fs::read_link(fd.path()) {
                let target = target.to_string_lossy().into_owned();
                if let Some(inode) = target
                    .strip_prefix("socket:[")
                    .and_then(|t| t.strip_suffix(']'))
                {
                    inodes.push(inode.to_string());
                }
            }
        }
    }
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local_address, st (0A: LISTEN), inode
            let listening = fields.get(3) == Some(&"0A");
            let ours = fields.get(9).is_some_and(|i| inodes.iter().any(|x| x == i));
            let port = fields.get(1)?.rsplit(':').next()?;
            (listening && ours)
                .then(|| u16::from_str_radix(port, 16).ok())
                .flatten()
        })
        .collect()
}

/// GetHost on `addr` with `token` as its bearer token (none: no header).
async fn get_host(addr: &str, token: Option<&str>) -> Result<pb::GetHostResponse, tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let header: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>> =
        token.map(|t| format!("Bearer {t}").parse().unwrap());
    let mut client =
        AgentServiceClient::with_interceptor(channel, move |mut r: tonic::Request<()>| {
            if let Some(h) = &header {
                r.metadata_mut().insert("authorization", h.clone());
            }
            Ok(r)
        });
    tokio::time::timeout(
        Duration::from_secs(10),
        client.get_host(pb::GetHostRequest::default()),
    )
    .await
    .map_err(|_| tonic::Status::deadline_exceeded("no answer in 10 s"))?
    .map(tonic::Response::into_inner)
}

#[test]
fn a_local_runs_agent_answers_its_controller_only() {
    // A run whose one trial sleeps: its agent lives long enough to be called from outside.
    let run = quietbench()
        .args([
            "run",
            "--local",
            "--probe",
            "exec",
            "--rounds",
            "1",
            "--duration",
            "1",
        ])
        .args(["--param", "cmd=sleep 0.3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start quietbench run --local");
    let deadline = Instant::now() + Duration::from_secs(30);
    let port = loop {
        let ports: Vec<u16> = children_of(run.id())
            .into_iter()
            .flat_map(listening_ports)
            .collect();
        if let Some(&port) = ports.first() {
            break port;
        }
        assert!(
            Instant::now() < deadline,
            "no local agent listening after 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let addr = format!("127.0.0.1:{port}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    // Another user of the machine knows the port (ss shows it), not the secret.
    for token in [
        None,
        Some("0123456789abcdef0123456789abcdef0123456789abcdef"),
    ] {
        let err = rt
            .block_on(get_host(&addr, token))
            .expect_err("a stranger was answered");
        assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
    }
    let out = run.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The secret never appears on the agent's command line (readable by every user).
    let ps = std::process::Command::new("ps")
        .args(["-eo", "args"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&ps.stdout).contains("--secret "));
}

#[test]
fn an_agent_with_a_secret_on_stdin_refuses_calls_without_it() {
    let secret = "5ecret-5ecret-5ecret-5ecret-5ecret-5ecret";
    let mut child = agent_command()
        .args(["--listen", "127.0.0.1:0", "--secret-stdin"])
        .env("QUIETBENCH_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{secret}").unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let addr = line.trim().rsplit(' ').next().unwrap().to_string();
    let rt = tokio::runtime::Runtime::new().unwrap();
    assert!(rt.block_on(get_host(&addr, Some(secret))).is_ok());
    let err = rt.block_on(get_host(&addr, None)).unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    let _ = child.kill();
    let _ = child.wait();

    // Only on loopback, and a short secret is refused.
    let out = agent_command()
        .args(["--listen", "0.0.0.0:0", "--insecure", "--secret-stdin"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("loopback"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut short = agent_command()
        .args(["--listen", "127.0.0.1:0", "--secret-stdin"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(short.stdin.take().unwrap(), "short").unwrap();
    let out = short.wait_with_output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 32"));
}

#[test]
fn idle_sockets_cannot_lock_a_controller_out() {
    let agent = AgentProcess::start();
    // Twice the old cap of 64, opened and left silent (the red team's lock-out).
    let idle: Vec<TcpStream> = (0..128)
        .filter_map(|_| TcpStream::connect(agent.addr).ok())
        .collect();
    assert!(idle.len() >= 100, "opened {} sockets", idle.len());
    std::thread::sleep(Duration::from_millis(200));
    let rt = tokio::runtime::Runtime::new().unwrap();
    for _ in 0..3 {
        let host = rt
            .block_on(get_host(&agent.addr.to_string(), None))
            .expect("a controller's call is served while idle sockets are open");
        assert!(!host.agent_version.is_empty());
    }
    drop(idle);
}

#[test]
fn a_plain_controller_at_a_tls_agent_is_told_to_use_tls() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    common::issue_certs(dir.path(), &[&["--agent", "a1", "--san", "127.0.0.1"]]);
    let mut command = agent_command();
    command.args(["--tls-cert", &format!("{d}/agent-a1.pem")]);
    command.args(["--tls-key", &format!("{d}/agent-a1.key")]);
    command.args(["--client-ca", &format!("{d}/ca.pem")]);
    let agent = AgentProcess::start_with(command);
    let out = quietbench()
        .args(["host", "--agent", &agent.addr.to_string()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    // Not "lost agent mid-trial": what to do instead.
    assert!(
        stderr.contains("probably serves TLS") && stderr.contains("--ca"),
        "{stderr}"
    );
}
