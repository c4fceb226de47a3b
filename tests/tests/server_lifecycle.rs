//! StartServer and StopServer end to end: a real agent process, real gRPC, and the testserver
//! binary (src/bin/testserver.rs) as the user's server. What is checked: a server that is
//! ready answers and leaves no process of its group when stopped, with what it cost; a server
//! that exits before it listens, or never listens, fails the start with the reason and leaves
//! nothing; a server journaled by an agent that was SIGKILLed is killed by the next agent
//! start on the same state directory; an agent without --allow-exec refuses to start one.
//! Nothing asserts on how fast the machine is: every wait is a generous bound.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use quietbench_proto::v1 as pb;
use quietbench_proto::v1::agent_service_client::AgentServiceClient;
use tonic::Code;
use tonic::transport::Channel;

/// The test server, built with these tests.
const TESTSERVER: &str = env!("CARGO_BIN_EXE_testserver");
/// The variable that marks a test's servers, so that the test finds every process they left.
const MARK: &str = "QB_SERVER_LIFECYCLE";

async fn client(addr: std::net::SocketAddr) -> AgentServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("connect to the agent");
    AgentServiceClient::new(channel)
}

/// A mark no other test (or run) uses.
fn unique(name: &str) -> String {
    format!("{name}-{}-{:?}", std::process::id(), Instant::now())
}

/// StartServer of the testserver with `args`, marked with `mark`.
fn start_request(args: &str, mark: &str) -> pb::StartServerRequest {
    pb::StartServerRequest {
        command: format!("{TESTSERVER} --port {{port}} {args}"),
        env: HashMap::from([(MARK.to_string(), mark.to_string())]),
        ready_timeout_ms: 60_000,
        ..Default::default()
    }
}

/// The state field and process group of `pid` (/proc/PID/stat), if it exists.
fn state_and_group(pid: i32) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = text[text.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let group = fields.nth(1)?.parse().ok()?;
    Some((state, group))
}

/// Whether `pid` runs: it exists and is not a zombie (nothing here may reap a process the
/// killed agent left to init).
fn runs(pid: i32) -> bool {
    state_and_group(pid).is_some_and(|(state, _)| !matches!(state, 'Z' | 'X'))
}

/// The running processes whose group is `pgid`.
fn group(pgid: i32) -> Vec<i32> {
    pids()
        .filter(|&pid| runs(pid) && state_and_group(pid).is_some_and(|(_, g)| g == pgid))
        .collect()
}

/// The running processes whose environment holds `MARK=mark`.
fn marked(mark: &str) -> Vec<i32> {
    let needle = format!("{MARK}={mark}");
    pids()
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == needle.as_bytes()))
        })
        .filter(|&pid| runs(pid))
        .collect()
}

/// The running children of `parent` other than `except` (the agent's sentinel, beside its
/// server).
fn children_of(parent: i32, except: i32) -> Vec<i32> {
    pids()
        .filter(|&pid| pid != except && runs(pid))
        .filter(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|text| {
                text.rfind(')').is_some_and(|end| {
                    text[end + 1..].split_whitespace().nth(1) == Some(&parent.to_string())
                })
            })
        })
        .collect()
}

fn pids() -> impl Iterator<Item = i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
}

/// Waits up to `limit` for `done`.
fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

/// `count` GETs on one keep-alive connection: the status line of each answer.
fn get_many(port: u32, count: usize) -> Vec<String> {
    let stream = std::net::TcpStream::connect(("127.0.0.1", port as u16)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut statuses = Vec::new();
    for _ in 0..count {
        writer
            .write_all(b"GET /work HTTP/1.1\r\nHost: test\r\n\r\n")
            .unwrap();
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line.trim().is_empty() {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        statuses.push(status.trim().to_string());
    }
    statuses
}

#[tokio::test]
async fn a_ready_server_answers_and_leaves_nothing_of_its_group_when_stopped() {
    let state = tempfile::tempdir().unwrap();
    let agent = common::AgentProcess::start_in(state.path());
    let mut agent_client = client(agent.addr).await;
    let mark = unique("ready");
    let started = agent_client
        .start_server(start_request("--work 2000000", &mark))
        .await
        .unwrap()
        .into_inner();
    assert!(started.port > 0 && started.pid > 0, "{started:?}");
    assert_eq!(
        started.argv,
        [
            TESTSERVER,
            "--port",
            &started.port.to_string(),
            "--work",
            "2000000"
        ]
    );
    assert_eq!(marked(&mark), vec![started.pid as i32]);
    assert_eq!(group(started.pid as i32), vec![started.pid as i32]);
    let journal = std::fs::read_to_string(state.path().join("servers.journal")).unwrap();
    assert!(
        journal.contains(&format!(" server={}@", started.pid)),
        "{journal}"
    );

    let statuses = get_many(started.port, 20);
    assert!(
        statuses.iter().all(|s| s == "HTTP/1.1 200 OK"),
        "{statuses:?}"
    );

    let stopped = agent_client
        .stop_server(pb::StopServerRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(stopped.stopped && !stopped.exited_early, "{stopped:?}");
    assert_eq!(
        stopped.ended, "stopped by SIGTERM, and then exited with status 0",
        "the testserver exits 0 at SIGTERM"
    );
    assert!(
        stopped.cpu_ns > 0,
        "20 requests of work cost CPU: {stopped:?}"
    );
    assert!(stopped.peak_rss_bytes > 0, "{stopped:?}");
    assert!(stopped.ran_ns >= started.ready_ns, "{stopped:?}");
    assert!(
        stopped
            .stderr_tail
            .contains(&format!("listening on 127.0.0.1:{}", started.port)),
        "{stopped:?}"
    );
    assert!(
        group(started.pid as i32).is_empty(),
        "no process of its group is left"
    );
    assert!(marked(&mark).is_empty());
    assert!(!state.path().join("servers.journal").exists());
    let again = agent_client
        .stop_server(pb::StopServerRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        again,
        pb::StopServerResponse::default(),
        "nothing runs any more"
    );
}

#[tokio::test]
async fn a_server_that_exits_before_it_listens_fails_the_start_with_its_stderr() {
    let state = tempfile::tempdir().unwrap();
    let agent = common::AgentProcess::start_in(state.path());
    let mark = unique("early");
    let err = client(agent.addr)
        .await
        .start_server(start_request(
            "--ready-after-ms 60000 --exit-after-ms 0",
            &mark,
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    let message = err.message();
    assert!(
        message.starts_with("the server exited with status 3 before its port "),
        "{message}"
    );
    assert!(
        message.ends_with(
            "its stderr ended with: testserver: exiting with status 3 after --exit-after-ms 0"
        ),
        "{message}"
    );
    assert!(marked(&mark).is_empty());
    assert!(!state.path().join("servers.journal").exists());
}

#[tokio::test]
async fn a_server_that_never_listens_is_killed_at_the_ready_timeout() {
    let state = tempfile::tempdir().unwrap();
    let agent = common::AgentProcess::start_in(state.path());
    let mark = unique("never");
    let err = client(agent.addr)
        .await
        .start_server(pb::StartServerRequest {
            ready_timeout_ms: 300,
            ..start_request("--ready-after-ms 5000", &mark)
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(
        err.message().contains("did not accept within 0.3 s"),
        "{}",
        err.message()
    );
    assert!(marked(&mark).is_empty(), "the server was killed");
    assert!(!state.path().join("servers.journal").exists());
}

#[tokio::test]
async fn a_ready_path_waits_for_2xx() {
    let state = tempfile::tempdir().unwrap();
    let agent = common::AgentProcess::start_in(state.path());
    let mut agent_client = client(agent.addr).await;
    let mark = unique("path");
    let err = agent_client
        .start_server(pb::StartServerRequest {
            ready_path: "/ready".into(),
            ready_timeout_ms: 3000,
            ..start_request("--status 503", &mark)
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    // On a machine too slow to start the testserver in 3 s, the port is what is named.
    assert!(
        err.message()
            .contains("(last: HTTP/1.1 503 Service Unavailable)")
            || err.message().contains("did not accept within 3 s"),
        "{}",
        err.message()
    );
    assert!(marked(&mark).is_empty());
    let started = agent_client
        .start_server(pb::StartServerRequest {
            ready_path: "/ready".into(),
            ..start_request("", &mark)
        })
        .await
        .unwrap()
        .into_inner();
    assert!(runs(started.pid as i32));
    agent_client
        .stop_server(pb::StopServerRequest::default())
        .await
        .unwrap();
    assert!(marked(&mark).is_empty());
}

#[tokio::test]
async fn a_server_left_by_a_killed_agent_is_killed_by_the_next_agent_start() {
    let state = tempfile::tempdir().unwrap();
    let mut first = common::AgentProcess::start_in(state.path());
    let mark = unique("orphan");
    let started = client(first.addr)
        .await
        .start_server(start_request("", &mark))
        .await
        .unwrap()
        .into_inner();
    let pid = started.pid as i32;
    // The sentinel would stop the server when the agent dies (the test below): killed first
    // here, as a crash that takes both (or a reboot) would, to leave the journal alone to act.
    let agent_pid = first.child.id() as i32;
    let sentinels = children_of(agent_pid, pid);
    assert_eq!(sentinels.len(), 1, "one sentinel per server: {sentinels:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sentinels[0]),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    first.child.kill().unwrap(); // SIGKILL: no graceful stop
    first.child.wait().unwrap();
    assert!(runs(pid), "the server outlives its agent and its sentinel");
    let journal = state.path().join("servers.journal");
    assert!(
        std::fs::read_to_string(&journal)
            .unwrap()
            .contains(&format!(" server={pid}@")),
        "journaled"
    );
    // The next agent on the same state directory kills it before it serves.
    let _second = common::AgentProcess::start_in(state.path());
    assert!(
        eventually(Duration::from_secs(30), || group(pid).is_empty()),
        "the orphaned server's group is killed: {:?}",
        group(pid)
    );
    assert!(marked(&mark).is_empty());
    assert!(!journal.exists(), "and the journal is cleared");
}

#[tokio::test]
async fn a_server_does_not_outlive_a_killed_agent_by_more_than_its_sentinel_grace() {
    let state = tempfile::tempdir().unwrap();
    let mut agent = common::AgentProcess::start_in(state.path());
    let mark = unique("sentinel");
    let started = client(agent.addr)
        .await
        .start_server(start_request("", &mark))
        .await
        .unwrap()
        .into_inner();
    let pid = started.pid as i32;
    assert!(runs(pid));
    agent.child.kill().unwrap(); // SIGKILL: no graceful stop, and no agent starts again
    agent.child.wait().unwrap();
    // The sentinel sends SIGTERM at once and SIGKILL 2 s later; 30 s is for a loaded machine.
    assert!(
        eventually(Duration::from_secs(30), || group(pid).is_empty()),
        "the server's group outlived its agent: {:?}",
        group(pid)
    );
    assert!(marked(&mark).is_empty());
}

#[tokio::test]
async fn an_agent_without_allow_exec_refuses_to_start_a_server() {
    let state = tempfile::tempdir().unwrap();
    // Started bare: AgentProcess adds --allow-exec.
    let mut child = Command::new(common::quietbench_bin())
        .args(["agent", "--listen", "127.0.0.1:0", "--state-dir"])
        .arg(state.path())
        .env("QUIETBENCH_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line.trim().rsplit(' ').next().unwrap().parse().unwrap();
    let mark = unique("refused");
    let result = client(addr)
        .await
        .start_server(start_request("", &mark))
        .await;
    let _ = child.kill();
    let _ = child.wait();
    let err = result.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    assert!(err.message().contains("--allow-exec"), "{}", err.message());
    assert!(marked(&mark).is_empty());
    assert!(!Path::new(&state.path().join("servers.journal")).exists());
}
