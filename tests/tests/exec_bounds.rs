//! A real agent keeps what a trial starts and allocates within bounds: an exec command that
//! runs past the trial's deadline is killed with everything it started, and the trial fails
//! saying so; a cancel or a caller that hangs up kills the command at once; a request that asks
//! for more than the host has is refused before anything runs; and a trial's memory is given
//! back when it ends.
//!
//! The commands here would run for 30 s and leave a `sleep 300` behind; the tests allow 15 s,
//! so no bound depends on how fast the machine is.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use quietbench_proto::v1 as pb;
use quietbench_proto::v1::agent_service_client::AgentServiceClient;
use tokio_stream::StreamExt;
use tonic::Code;
use tonic::transport::Channel;

/// Far below the 30 s a command that is not killed takes.
const PROMPTLY: Duration = Duration::from_secs(15);

async fn client(agent: &common::AgentProcess) -> AgentServiceClient<Channel> {
    let channel = Channel::from_shared(agent.endpoint())
        .unwrap()
        .connect()
        .await
        .expect("connect to the agent");
    AgentServiceClient::new(channel)
}

fn request(probe: &str, params: &[(&str, &str)], duration_ms: u64) -> pb::RunProbeRequest {
    pb::RunProbeRequest {
        probe: probe.into(),
        params: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        duration_ms,
        interval_ms: 100,
        ..Default::default()
    }
}

/// A shell command that writes its shell's pid to `dir/shell`, starts `sleep 300` in the
/// background and writes its pid to `dir/grandchild`, then sleeps 30 s.
fn hangs_and_leaves_a_grandchild(dir: &Path) -> String {
    format!(
        "echo $$ > {d}/shell; sleep 300 & echo $! > {d}/grandchild; sleep 30",
        d = dir.display()
    )
}

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("exec-bounds-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The pid a command wrote to `file`, once it has.
async fn pid_in(file: &Path) -> i32 {
    let deadline = Instant::now() + PROMPTLY;
    loop {
        if let Some(pid) = std::fs::read_to_string(file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "{} never written",
            file.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether `pid` still runs: it exists and is not a zombie (a killed process that its new
/// parent has not reaped yet has stopped running all the same).
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Asserts that none of `pids` runs, allowing 5 s for the kills to be delivered.
async fn assert_gone(what: &str, pids: &[i32]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|&p| running(p)) {
        assert!(
            Instant::now() < deadline,
            "{what}: {:?} still run",
            pids.iter().filter(|&&p| running(p)).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads a trial's events to the end: its result or its error.
async fn finish(
    mut stream: tonic::Streaming<pb::ProbeEvent>,
) -> Result<pb::ProbeResult, pb::ProbeError> {
    let mut last = None;
    while let Some(event) = stream.next().await {
        match event.expect("the stream carries events").event {
            Some(pb::probe_event::Event::Result(r)) => last = Some(Ok(r)),
            Some(pb::probe_event::Event::Error(e)) => last = Some(Err(e)),
            _ => {}
        }
    }
    last.expect("a result or an error ends the stream")
}

/// A field of the agent's /proc/PID/status, in KiB (VmRSS, VmHWM).
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {status}"))
}

#[tokio::test]
async fn an_exec_command_past_the_deadline_is_killed_with_its_grandchild_and_fails_the_trial() {
    let agent = common::AgentProcess::start();
    let mut c = client(&agent).await;
    let dir = scratch("deadline");
    let cmd = hangs_and_leaves_a_grandchild(&dir);
    let asked = Instant::now();
    let stream = c
        .run_probe(request("exec", &[("cmd", &cmd), ("shell", "true")], 500))
        .await
        .unwrap()
        .into_inner();
    let ended = finish(stream).await;
    let took = asked.elapsed();
    let pids = [
        pid_in(&dir.join("shell")).await,
        pid_in(&dir.join("grandchild")).await,
    ];
    let error = ended.expect_err("a command past the deadline fails the trial");
    assert!(
        error.message.contains(
            "exec: the command ran past the trial's deadline of 5.5 s (duration 0.5 s + grace \
             5 s); it was killed"
        ),
        "{}",
        error.message
    );
    assert!(took < PROMPTLY, "the trial took {took:?}");
    assert_gone("after the deadline", &pids).await;
    assert!(common::children_of(agent.child.id()).is_empty());
    // The agent is free for the next trial.
    let next = c
        .run_probe(request("exec", &[("cmd", "true")], 100))
        .await
        .expect("the agent is idle")
        .into_inner();
    finish(next).await.expect("a trial of true succeeds");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_cancel_kills_the_running_command_and_its_grandchild() {
    let agent = common::AgentProcess::start();
    let mut c = client(&agent).await;
    let dir = scratch("cancel");
    let cmd = hangs_and_leaves_a_grandchild(&dir);
    let stream = c
        .run_probe(pb::RunProbeRequest {
            trial_id: "hanging-exec".into(),
            ..request("exec", &[("cmd", &cmd), ("shell", "true")], 60_000)
        })
        .await
        .unwrap()
        .into_inner();
    let pids = [
        pid_in(&dir.join("shell")).await,
        pid_in(&dir.join("grandchild")).await,
    ];
    let asked = Instant::now();
    let cancelled = c
        .cancel(pb::CancelRequest {
            trial_id: "hanging-exec".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(cancelled.cancelled);
    let result = finish(stream)
        .await
        .expect("a cancelled trial ends normally");
    let took = asked.elapsed();
    assert!(result.cancelled);
    assert!(took < PROMPTLY, "the trial ended {took:?} after the cancel");
    assert_gone("after the cancel", &pids).await;
    assert!(common::children_of(agent.child.id()).is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_caller_that_hangs_up_takes_its_command_with_it() {
    let agent = common::AgentProcess::start();
    let dir = scratch("hang-up");
    let cmd = hangs_and_leaves_a_grandchild(&dir);
    let pids = {
        let mut c = client(&agent).await;
        // One interval as long as the trial: the agent has nothing to send, so only the drop
        // of the stream tells it that nobody listens.
        let mut stream = c
            .run_probe(pb::RunProbeRequest {
                trial_id: "abandoned-exec".into(),
                interval_ms: 60_000,
                ..request("exec", &[("cmd", &cmd), ("shell", "true")], 60_000)
            })
            .await
            .unwrap()
            .into_inner();
        stream.next().await.unwrap().unwrap();
        [
            pid_in(&dir.join("shell")).await,
            pid_in(&dir.join("grandchild")).await,
        ]
        // The stream, the client and its connection go here, as a killed controller's would.
    };
    let hung_up = Instant::now();
    assert_gone("after the caller hung up", &pids).await;
    let mut c = client(&agent).await;
    loop {
        match c.run_probe(request("exec", &[("cmd", "true")], 100)).await {
            Ok(next) => {
                finish(next.into_inner())
                    .await
                    .expect("the next trial runs");
                break;
            }
            Err(status) => {
                assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                assert!(
                    hung_up.elapsed() < PROMPTLY,
                    "the abandoned trial still holds the agent: {status:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    assert!(common::children_of(agent.child.id()).is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn requests_larger_than_the_host_are_refused_with_the_numbers() {
    let agent = common::AgentProcess::start();
    let mut c = client(&agent).await;
    // Each value within its range; together 6 TiB.
    let refused = c
        .run_probe(request(
            "mem.bandwidth",
            &[("size_mib", "2048"), ("threads", "1024")],
            1000,
        ))
        .await
        .expect_err("6 TiB is refused");
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(
        refused
            .message()
            .starts_with("mem.bandwidth: threads=1024 x 3 arrays of size_mib=2048 needs 6 TiB"),
        "{}",
        refused.message()
    );
    assert!(
        refused.message().contains("at most half of it may be used"),
        "{}",
        refused.message()
    );
    // Five threads per CPU of this host (while that is within the parameter's 1024).
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let cpus = quietbench_host::parse_cpu_list(&online).unwrap().len();
    let threads = 4 * cpus + 1;
    if threads <= 1024 {
        let refused = c
            .run_probe(request(
                "cpu.spawn",
                &[("threads", &threads.to_string())],
                1000,
            ))
            .await
            .expect_err("more than 4 threads per CPU are refused");
        assert_eq!(refused.code(), Code::InvalidArgument);
        assert!(
            refused.message().contains(&format!(
                "threads={threads} is more than 4 per CPU of this host's {cpus} CPUs"
            )),
            "{}",
            refused.message()
        );
    }
    // And the agent serves on.
    let next = c
        .run_probe(request("cpu.primes", &[], 100))
        .await
        .unwrap()
        .into_inner();
    finish(next).await.expect("a small trial runs");
}

#[tokio::test]
async fn a_trials_buffers_are_given_back_when_it_ends() {
    let agent = common::AgentProcess::start();
    let pid = agent.child.id();
    let mut c = client(&agent).await;
    // A first small trial, so what every trial keeps (the runtime's buffers, the thread
    // stacks' first pages) is in the baseline.
    let warm = c
        .run_probe(request("mem.bandwidth", &[("size_mib", "1")], 200))
        .await
        .unwrap()
        .into_inner();
    finish(warm).await.expect("a small trial runs");
    let before = status_kib(pid, "VmRSS");
    // Three arrays of 128 MiB: 384 MiB once set up (set-up counts in the duration, so on a
    // busy machine the trial may end before every page is touched: the peak is only asked to
    // pass 128 MiB).
    let big = c
        .run_probe(request("mem.bandwidth", &[("size_mib", "128")], 2000))
        .await
        .unwrap()
        .into_inner();
    finish(big).await.expect("the trial runs");
    let (after, peak) = (status_kib(pid, "VmRSS"), status_kib(pid, "VmHWM"));
    // It did hold its arrays (so the check below means something)...
    assert!(
        peak > before + 128 * 1024,
        "the agent never held the arrays: {before} KiB before, peak {peak} KiB"
    );
    // ... and gave them back.
    assert!(
        after < before + 64 * 1024,
        "the agent kept {} KiB after the trial ({before} KiB before, peak {peak} KiB)",
        after.saturating_sub(before)
    );
}
