//! ServerSlot on this machine, with `python3 -m http.server` as the user's server, and the
//! request checks. Nothing here asserts on how fast the machine is: waits are generous bounds.

use super::request::fill_port;
use super::*;
use quietbench_probe::placement::MachineLayout;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::path::PathBuf;

/// A request for `command`, with the defaults the proto gives.
fn request(command: &str) -> pb::StartServerRequest {
    pb::StartServerRequest {
        command: command.into(),
        ..Default::default()
    }
}

fn refusal(req: pb::StartServerRequest) -> String {
    let err = check_request(&req).unwrap_err();
    assert_eq!(
        err.code(),
        tonic::Code::InvalidArgument,
        "{}",
        err.message()
    );
    err.message().to_string()
}

#[test]
fn a_request_is_checked_field_by_field() {
    assert!(refusal(request("  ")).starts_with("command: empty"));
    assert_eq!(
        refusal(request("python3 -m http.server")),
        "the server must be told its port: put {port} in the command, or give port="
    );
    let fixed = pb::StartServerRequest {
        port: 8080,
        ..request("python3 -m http.server 8080")
    };
    assert_eq!(check_request(&fixed).unwrap().port, 8080);
    assert!(
        refusal(pb::StartServerRequest {
            port: 70000,
            ..request("x {port}")
        })
        .contains("70000 is not a TCP port")
    );
    assert!(
        refusal(request("no-such-program-quietbench {port}"))
            .contains("'no-such-program-quietbench' is not an executable on PATH")
    );
    assert!(refusal(request("/etc/passwd {port}")).contains("not an executable file"));
    assert!(refusal(request("sh -c 'unterminated {port}")).contains("unterminated"));
    assert!(
        refusal(pb::StartServerRequest {
            bind_address: "localhost".into(),
            ..request("sh {port}")
        })
        .contains("bind_address 'localhost' is not an IP address")
    );
    assert!(
        refusal(pb::StartServerRequest {
            ready_timeout_ms: 120_001,
            ..request("sh {port}")
        })
        .starts_with("ready_timeout_ms: 120001 is over the most, 120000")
    );
    assert!(
        refusal(pb::StartServerRequest {
            max_life_ms: 86_400_001,
            ..request("sh {port}")
        })
        .starts_with("max_life_ms: 86400001")
    );
    assert!(
        refusal(pb::StartServerRequest {
            ready_path: "health".into(),
            ..request("sh {port}")
        })
        .contains("is not a request path")
    );
    assert!(
        refusal(pb::StartServerRequest {
            ready_path: "/a b".into(),
            ..request("sh {port}")
        })
        .contains("is not a request path")
    );
    assert!(
        refusal(pb::StartServerRequest {
            env: HashMap::from([("A=B".into(), "1".into())]),
            ..request("sh {port}")
        })
        .contains("not a variable name")
    );
    assert!(
        refusal(pb::StartServerRequest {
            cwd: "/no/such/dir".into(),
            ..request("sh {port}")
        })
        .contains("cwd '/no/such/dir' is not a directory")
    );
}

#[test]
fn defaults_fill_what_the_request_leaves_out() {
    let checked = check_request(&request("sh -c 'exec server --port {port}'")).unwrap();
    assert_eq!(checked.argv, ["sh", "-c", "exec server --port {port}"]);
    assert!(
        checked.program.is_absolute() && checked.program.ends_with("sh"),
        "found on PATH: {}",
        checked.program.display()
    );
    assert_eq!(checked.bind, IpAddr::V4(Ipv4Addr::LOCALHOST));
    assert_eq!(checked.port, 0);
    assert_eq!(checked.ready_timeout, Duration::from_secs(10));
    assert_eq!(checked.max_life, Duration::from_secs(600));
    assert_eq!(checked.threads, 1);
    assert_eq!(checked.ready_path, None);
    let shell = check_request(&pb::StartServerRequest {
        shell: true,
        ..request("server --port {port} 2>&1 | cat")
    })
    .unwrap();
    assert_eq!(
        shell.argv,
        ["/bin/sh", "-c", "server --port {port} 2>&1 | cat"]
    );
    assert_eq!(
        fill_port(&shell.argv, 8080)[2],
        "server --port 8080 2>&1 | cat"
    );
}

#[test]
fn a_relative_program_is_found_from_the_working_directory() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("serve.sh");
    std::fs::write(&script, "#!/bin/sh\n").unwrap();
    let req = |cwd: &Path| pb::StartServerRequest {
        cwd: cwd.display().to_string(),
        ..request("./serve.sh {port}")
    };
    assert!(refusal(req(Path::new("/"))).contains("'./serve.sh' is not an executable file"));
    assert!(
        refusal(req(dir.path())).contains("not an executable file"),
        "not executable yet"
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(
        check_request(&req(dir.path())).unwrap().program,
        PathBuf::from("./serve.sh")
    );
}

#[test]
fn the_server_gets_the_cpus_named_or_placements_or_none() {
    let layout = MachineLayout::allowed_only(&[0, 1, 2, 3]);
    assert_eq!(server_cpus(&layout, &[3, 1, 3], 1), vec![1, 3]);
    let placed = server_cpus(&layout, &[], 2);
    assert_eq!(placed.len(), 2, "{placed:?}");
    assert!(!placed.contains(&0), "not the housekeeping CPU: {placed:?}");
    assert_eq!(
        server_cpus(&MachineLayout::allowed_only(&[]), &[], 1),
        Vec::<u32>::new(),
        "no plan: unpinned"
    );
}

#[test]
fn words_for_logs_and_messages() {
    assert_eq!(
        shown(&[
            "sh".into(),
            "-c".into(),
            "echo 'hi' $X".into(),
            String::new()
        ]),
        "sh -c 'echo '\\''hi'\\'' $X' ''"
    );
    assert_eq!(seconds(Duration::from_millis(300)), "0.3");
    assert_eq!(seconds(Duration::from_secs(10)), "10");
    assert_eq!(seconds(Duration::from_millis(1250)), "1.25");
}

/// A slot whose journal is in a fresh temporary directory.
fn slot() -> (Arc<ServerSlot>, tempfile::TempDir) {
    let state = tempfile::tempdir().unwrap();
    (Arc::new(ServerSlot::new(state.path())), state)
}

/// This agent's allowed CPUs: where an unpinned server runs.
fn allowed() -> Vec<u32> {
    quietbench_probe::affinity::current_thread_affinity().unwrap()
}

/// `python3 -m http.server` on a free port of 127.0.0.1, marked with `marker` in its
/// environment so that the tests can find every process it left.
fn python_server(marker: &str) -> ServerRequest {
    let mut req = check_request(&pb::StartServerRequest {
        env: HashMap::from([("QB_SERVER_TEST".into(), marker.into())]),
        ready_timeout_ms: 60_000,
        ..request("python3 -m http.server {port} --bind 127.0.0.1")
    })
    .unwrap();
    req.cwd = Some(std::env::temp_dir());
    req
}

/// The live processes (not zombies) whose environment holds `QB_SERVER_TEST=marker`.
fn marked(marker: &str) -> Vec<i32> {
    let needle = format!("QB_SERVER_TEST={marker}");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let live = procfs::read_stat(&HostRoot::live(), pid).is_some_and(|s| !s.has_exited());
        if live && environ.split(|&b| b == 0).any(|v| v == needle.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

fn unique(name: &str) -> String {
    format!("{name}-{}-{:?}", std::process::id(), Instant::now())
}

/// GET / on the server: its status line.
fn get(port: u32) -> String {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port as u16)).unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer.lines().next().unwrap_or("").to_string()
}

#[test]
fn a_server_starts_pinned_answers_and_stops_with_its_cost_and_nothing_left() {
    let (slot, state) = slot();
    let marker = unique("lifecycle");
    let cpus = vec![*allowed().last().unwrap()];
    let started = slot
        .start(&python_server(&marker), cpus.clone(), &allowed())
        .unwrap();
    assert_eq!(started.cpus, cpus);
    assert!(!started.free_cpus.contains(&cpus[0]), "{started:?}");
    assert_eq!(started.free_cpus.len(), allowed().len() - 1);
    assert!(started.port > 0 && started.pid > 0 && started.ready_ns > 0);
    assert_eq!(
        started.argv[3],
        started.port.to_string(),
        "{{port}} filled in: {:?}",
        started.argv
    );
    let affinity =
        nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(started.pid as i32)).unwrap();
    assert!(affinity.is_set(cpus[0] as usize).unwrap());
    assert!(
        get(started.port).starts_with("HTTP/1.0 200"),
        "python answers"
    );
    let journal = ServerJournal::in_dir(state.path());
    let (entries, _) = journal.entries().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].server.pid, started.pid as i32);
    assert!(entries[0].command.contains("http.server"), "{entries:?}");
    assert_eq!(marked(&marker), vec![started.pid as i32]);

    let stopped = slot.stop("");
    assert!(stopped.stopped);
    assert!(!stopped.exited_early);
    assert_eq!(stopped.ended, "stopped by SIGTERM");
    assert!(stopped.cpu_ns > 0, "python's start-up costs CPU");
    assert!(stopped.peak_rss_bytes > 0);
    assert!(stopped.ran_ns >= started.ready_ns);
    assert!(
        stopped.stderr_tail.contains("GET / HTTP/1.1"),
        "{}",
        stopped.stderr_tail
    );
    assert!(marked(&marker).is_empty(), "nothing of the server is left");
    assert!(!journal.path().exists(), "and the journal forgets it");
    assert_eq!(
        slot.stop(""),
        pb::StopServerResponse::default(),
        "stopped once"
    );
}

#[test]
fn a_server_that_exits_before_its_port_accepts_fails_at_once_with_its_stderr() {
    let (slot, state) = slot();
    let req = check_request(&request("sh -c 'echo cannot listen on {port} >&2; exit 3'")).unwrap();
    let err = slot.start(&req, vec![], &allowed()).unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    let message = err.message();
    assert!(
        message.starts_with("the server exited with status 3 before its port "),
        "{message}"
    );
    let port = message
        .split("before its port ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap();
    assert!(
        message.ends_with(&format!("; its stderr ended with: cannot listen on {port}")),
        "{message}"
    );
    assert!(!ServerJournal::in_dir(state.path()).path().exists());
    assert!(!slot.stop("").stopped);
}

#[test]
fn a_server_that_never_accepts_is_killed_at_the_timeout() {
    let (slot, _state) = slot();
    let marker = unique("never");
    let req = check_request(&pb::StartServerRequest {
        env: HashMap::from([("QB_SERVER_TEST".into(), marker.clone())]),
        ready_timeout_ms: 300,
        ..request("sh -c 'sleep 600 & sleep 600' {port}")
    })
    .unwrap();
    let err = slot.start(&req, vec![], &allowed()).unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert!(
        err.message().contains("did not accept within 0.3 s"),
        "{}",
        err.message()
    );
    assert!(marked(&marker).is_empty(), "its whole group is gone");
}

#[test]
fn a_ready_path_that_never_answers_2xx_is_named_with_its_last_answer() {
    let (slot, _state) = slot();
    let mut req = python_server(&unique("path"));
    req.ready_path = Some("/no-such-page".into());
    req.ready_timeout = Duration::from_millis(1500);
    let err = slot.start(&req, vec![], &allowed()).unwrap_err();
    let message = err.message();
    // On a machine slow enough that python is not listening in 1.5 s, the port is what is
    // named; the answer is named whenever there was one.
    assert!(
        message.contains(
            "accepted, but GET /no-such-page did not answer 2xx within 1.5 s (last: HTTP/1.0 404"
        ) || message.contains("did not accept within 1.5 s"),
        "{message}"
    );
    req.ready_path = Some("/".into());
    req.ready_timeout = Duration::from_secs(60);
    let started = slot.start(&req, vec![], &allowed()).unwrap();
    assert!(started.cpus.len() <= 1);
    assert!(slot.stop("").stopped);
}

#[test]
fn a_second_start_replaces_the_first_and_an_early_exit_is_reported() {
    let (slot, _state) = slot();
    let (first, second) = (unique("first"), unique("second"));
    let a = slot
        .start(&python_server(&first), vec![], &allowed())
        .unwrap();
    let b = slot
        .start(&python_server(&second), vec![], &allowed())
        .unwrap();
    assert_ne!(a.pid, b.pid);
    assert!(marked(&first).is_empty(), "the first is stopped");
    assert_eq!(marked(&second), vec![b.pid as i32]);
    // The server dies on its own: the stop says so.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(b.pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    until_waitable(&slot, "");
    let stopped = slot.stop("");
    assert!(stopped.stopped && stopped.exited_early, "{stopped:?}");
    assert_eq!(stopped.ended, "killed by signal 9 (SIGKILL)");
}

#[test]
fn the_watchdog_stops_a_server_nobody_stops_and_keeps_the_report() {
    let (slot, state) = slot();
    let marker = unique("watchdog");
    let mut req = python_server(&marker);
    req.max_life = Duration::from_millis(200);
    let started = slot.start(&req, vec![], &allowed()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !marked(&marker).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(marked(&marker).is_empty(), "stopped by the watchdog");
    // The watchdog releases the slot only once the journal is written.
    drop(slot.locked());
    assert!(!ServerJournal::in_dir(state.path()).path().exists());
    let report = slot.stop("");
    assert!(report.stopped, "{report:?}");
    assert!(
        report
            .ended
            .ends_with("by the agent at its max life of 0.2 s (no StopServer came)"),
        "{}",
        report.ended
    );
    assert!(report.ran_ns > 0 && started.pid > 0);
    assert!(!slot.stop("").stopped, "reported once");
}

#[test]
fn a_fixed_port_in_use_is_refused_before_anything_starts() {
    let (slot, _state) = slot();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut req = python_server(&unique("taken"));
    req.port = taken.local_addr().unwrap().port();
    let err = slot.start(&req, vec![], &allowed()).unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert!(
        err.message().contains("already in use"),
        "{}",
        err.message()
    );
}

#[test]
fn the_agent_stopping_stops_the_server() {
    let (slot, _state) = slot();
    let marker = unique("shutdown");
    slot.start(&python_server(&marker), vec![], &allowed())
        .unwrap();
    slot.shutdown();
    assert!(marked(&marker).is_empty());
    assert!(!slot.stop("").stopped, "nothing left to report");
}

/// `python_server(marker)` kept under `name` (restart=run).
fn kept(marker: &str, name: &str) -> ServerRequest {
    let mut req = python_server(marker);
    req.keep_as = name.into();
    req
}

/// Waits (a generous bound) until the leader of the server `name` can be waited for. Its
/// /proc entry turns to a zombie before that: a leader whose other threads are still exiting
/// shows as one, but wait(2) reports it only once they are gone.
fn until_waitable(slot: &ServerSlot, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let exited =
        || matches!(slot.locked().get(name), Some(Slot::Running(r)) if r.leader.has_exited());
    while !exited() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits (a generous bound) until no process marked `marker` is alive.
fn until_gone(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !marked(marker).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn kept_servers_run_beside_each_other_and_the_per_trial_one_and_a_sample_stops_nothing() {
    let (slot, state) = slot();
    let (ma, mb, mt) = (unique("kept-a"), unique("kept-b"), unique("kept-trial"));
    let a = slot
        .start(&kept(&ma, "run-1/a"), vec![], &allowed())
        .unwrap();
    let b = slot
        .start(&kept(&mb, "run-1/b"), vec![], &allowed())
        .unwrap();
    let t = slot.start(&python_server(&mt), vec![], &allowed()).unwrap();
    assert_ne!(a.port, b.port);
    assert_eq!(marked(&ma), vec![a.pid as i32]);
    assert_eq!(marked(&mb), vec![b.pid as i32]);
    assert_eq!(marked(&mt), vec![t.pid as i32]);
    let journal = ServerJournal::in_dir(state.path());
    assert_eq!(journal.entries().unwrap().0.len(), 3, "each is journaled");

    let first = slot.sample("run-1/a", None);
    assert!(first.stopped && !first.exited_early, "{first:?}");
    assert_eq!(first.ended, "", "it runs");
    assert!(first.cpu_ns > 0, "python's start-up costs CPU");
    assert!(first.peak_rss_bytes > 0 && first.ran_ns > 0);
    for _ in 0..20 {
        assert!(get(a.port).starts_with("HTTP/1.0 200"));
    }
    let second = slot.sample("run-1/a", None);
    assert!(second.cpu_ns >= first.cpu_ns, "{first:?} then {second:?}");
    assert!(second.ran_ns > first.ran_ns);
    assert_eq!(marked(&ma), vec![a.pid as i32], "a sample stops nothing");

    // Stopping the per-trial server leaves the kept ones; stopping one kept leaves the other.
    assert!(slot.stop("").stopped);
    assert!(marked(&mt).is_empty());
    let stopped = slot.stop("run-1/a");
    assert_eq!(stopped.ended, "stopped by SIGTERM");
    assert!(stopped.cpu_ns >= second.cpu_ns);
    assert!(marked(&ma).is_empty());
    assert_eq!(marked(&mb), vec![b.pid as i32]);
    assert!(
        !slot.sample("run-1/a", None).stopped,
        "stopped once, then unknown"
    );
    // The agent's graceful stop stops every server it keeps.
    slot.shutdown();
    assert!(marked(&mb).is_empty());
    assert!(!journal.path().exists());
}

#[test]
fn a_kept_server_that_died_is_reported_once_by_the_next_sample_with_its_stderr() {
    let (slot, _state) = slot();
    let marker = unique("kept-dies");
    let started = slot
        .start(&kept(&marker, "run-2/a"), vec![], &allowed())
        .unwrap();
    get(started.port);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(started.pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    until_waitable(&slot, "run-2/a");
    assert!(marked(&marker).is_empty());
    let report = slot.sample("run-2/a", Some(Duration::from_secs(60)));
    assert!(report.stopped && report.exited_early, "{report:?}");
    assert_eq!(report.ended, "killed by signal 9 (SIGKILL)");
    assert!(report.stderr_tail.contains("GET / HTTP/1.1"), "{report:?}");
    assert!(!slot.sample("run-2/a", None).stopped, "reported once");
    assert!(!slot.stop("run-2/a").stopped);
}

#[test]
fn a_sample_renews_a_kept_servers_max_life_and_the_watchdog_says_when_none_came() {
    let (slot, _state) = slot();
    let marker = unique("kept-life");
    let mut req = kept(&marker, "run-3/a");
    req.max_life = Duration::from_secs(2);
    slot.start(&req, vec![], &allowed()).unwrap();
    // Renewed every 0.2 s for 3 s: well past the 2 s it had from its start.
    for _ in 0..15 {
        std::thread::sleep(Duration::from_millis(200));
        let sample = slot.sample("run-3/a", Some(Duration::from_secs(2)));
        assert!(sample.stopped && sample.ended.is_empty(), "{sample:?}");
    }
    // No renewal: the watchdog stops it, and the next call hears why.
    until_gone(&marker);
    assert!(marked(&marker).is_empty(), "stopped by the watchdog");
    let report = slot.sample("run-3/a", None);
    assert!(report.stopped && !report.exited_early, "{report:?}");
    assert!(
        report.ended.ends_with(
            "2 s after the last SampleServer (no SampleServer or StopServer came since)"
        ),
        "{}",
        report.ended
    );
}

#[test]
fn an_agent_keeps_a_few_servers_at_once_and_refuses_one_more_by_name() {
    let (slot, _state) = slot();
    let marker = unique("kept-many");
    for n in 0..MAX_KEPT {
        slot.start(&kept(&marker, &format!("run-4/{n}")), vec![], &allowed())
            .unwrap();
    }
    assert_eq!(marked(&marker).len(), MAX_KEPT);
    let err = slot
        .start(&kept(&marker, "run-4/one-more"), vec![], &allowed())
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    assert!(
        err.message().contains("already keeps 8 servers") && err.message().contains("run-4/0"),
        "{}",
        err.message()
    );
    // The same name again replaces its server rather than counting twice.
    let again = slot
        .start(&kept(&marker, "run-4/0"), vec![], &allowed())
        .unwrap();
    assert_eq!(marked(&marker).len(), MAX_KEPT);
    assert!(marked(&marker).contains(&(again.pid as i32)));
    slot.shutdown();
    assert!(marked(&marker).is_empty());
}

#[test]
fn a_kept_servers_name_is_checked() {
    for bad in ["", "a\nb", "é", &"x".repeat(129)] {
        let err = check_keep_as(bad).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().starts_with("keep_as "), "{}", err.message());
    }
    assert!(check_keep_as("20261127-1218-ab12/host0/variant1").is_ok());
    let req = pb::StartServerRequest {
        keep_as: "bad\tname".into(),
        ..request("sh {port}")
    };
    assert!(refusal(req).starts_with("keep_as "));
}
