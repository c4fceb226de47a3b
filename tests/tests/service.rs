//! `quietbench serve` and `--controller`, end to end: real service processes on loopback, runs
//! on real local agents, the CLI and the Python grpcio client (examples/python, generated from
//! the proto) as clients. What is checked: the same output as the CLI gives locally; a run that
//! waits for its host and is cancelled; a service killed mid-run that resumes the run when it
//! starts again; mutual TLS that lets in client certificates and no other role.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::ServiceProcess as Service;

fn output(command: &mut Command) -> (i32, String, String) {
    let out = command.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn signal(pid: u32, signal: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal).unwrap();
}

fn run_id_in(stderr: &str) -> String {
    stderr
        .split("quietbench: run ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no run id in {stderr}"))
        .to_string()
}

#[test]
fn the_cli_gets_the_same_output_from_a_service_as_from_its_own_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.sqlite3");
    let service = Service::start(&db, &dir.path().join("state"), &[]);
    let json = dir.path().join("run.json");
    let (code, stdout, stderr) = output(
        common::quietbench()
            .args(["run", "--controller", &service.address, "--local"])
            .args([
                "--probe",
                "cpu.primes",
                "--rounds",
                "2",
                "--duration",
                "0.2",
            ])
            .arg("--json")
            .arg(&json),
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("cpu.primes  events_per_sec"), "{stdout}");
    assert!(stderr.contains("quietbench: started"), "{stderr}");
    let run_id = run_id_in(&stderr);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["run_id"], run_id.as_str());
    assert_eq!(report["trials"].as_array().unwrap().len(), 2);

    // show, runs and history: what the service prints is what the store's own CLI prints.
    let local = |args: &[&str]| {
        let mut command = common::quietbench();
        command.args(args).arg("--db").arg(&db);
        output(&mut command)
    };
    let remote = |args: &[&str]| {
        output(
            common::quietbench()
                .args(args)
                .args(["--controller", &service.address]),
        )
    };
    for args in [
        vec!["show", &run_id],
        vec!["runs"],
        vec![
            "history",
            "--probe",
            "cpu.primes",
            "--metric",
            "events_per_sec",
        ],
    ] {
        let (local_code, local_out, _) = local(&args);
        let (remote_code, remote_out, remote_err) = remote(&args);
        assert_eq!(
            (remote_code, &remote_out),
            (local_code, &local_out),
            "{args:?}: {remote_err}"
        );
    }
    // compare --runs keeps compare's exit code and message (too few trials here).
    let (code, _, stderr) = remote(&["compare", "--runs", &run_id, &run_id]);
    assert_eq!(code, 1);
    assert!(stderr.contains("need at least 3 trials"), "{stderr}");
    // Bad input is refused by the service with its reason.
    let (code, _, stderr) = remote(&["show", "../etc/passwd"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("is not a run id"), "{stderr}");
    // Ids are whole: the service completes no prefix (the store's own CLI still does).
    let (code, _, stderr) = remote(&["show", &run_id[..8]]);
    assert_eq!(code, 1);
    assert!(stderr.contains("never a prefix"), "{stderr}");
    let (code, _, stderr) = remote(&["run", "--local", "--probe", "no.such", "--rounds", "1"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("no.such"), "{stderr}");
}

#[test]
fn the_python_client_submits_a_plan_and_follows_its_events() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(
        &dir.path().join("store.sqlite3"),
        &dir.path().join("state"),
        &[],
    );
    let plan = dir.path().join("plan.toml");
    std::fs::write(
        &plan,
        "hosts = \"local\"\nrounds = 2\nduration_s = 0.2\n\n[[variant]]\nname = \"small\"\n\
         probe = \"cpu.primes\"\nparams = { max_prime = \"5000\" }\n\n[[variant]]\n\
         name = \"large\"\nprobe = \"cpu.primes\"\nparams = { max_prime = \"10000\" }\n",
    )
    .unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/python/submit_plan.py");
    let (code, stdout, stderr) = output(
        Command::new("python3")
            .arg(script)
            .args(["--controller", &service.address])
            .arg(&plan),
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    for expected in [
        "submitted run ",
        "queued: ",
        "started",
        "host 0: 127.0.0.1:",
        "trial 0: host 0 ",
        "trial 3: host 0 ",
        "events_per_sec=",
        "large: cpu.primes  events_per_sec",
        "finished: complete, exit code 0",
        "report: schema quietbench.run-report.v1, 4 trials",
    ] {
        assert!(stdout.contains(expected), "{expected:?} missing:\n{stdout}");
    }
}

/// The status `runs --controller` shows for a run.
fn status_of(service: &Service, run_id: &str) -> Option<String> {
    let (_, stdout, _) =
        output(common::quietbench().args(["runs", "--controller", &service.address]));
    stdout
        .lines()
        .find(|l| l.starts_with(run_id))
        .and_then(|l| l.split_whitespace().nth(2).map(str::to_string))
}

fn wait_until(limit: Duration, mut done: impl FnMut() -> bool, what: &str) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn runs_wait_for_their_host_are_cancelled_and_survive_a_killed_service() {
    let dir = tempfile::tempdir().unwrap();
    let (db, state) = (dir.path().join("store.sqlite3"), dir.path().join("state"));
    let mut service = Service::start(&db, &state, &["--max-runs", "2"]);
    let submit = |rounds: &str, log: &PathBuf| {
        common::quietbench()
            .args(["run", "--controller", &service.address, "--local"])
            .args(["--rounds", rounds, "--duration", "1", "--warmup", "0"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap()
    };
    let (long_log, queued_log) = (dir.path().join("long.log"), dir.path().join("queued.log"));
    // Long enough (20 s) to be still measuring when the service is killed below, after the
    // queued runs' clients have come and gone, however slowly they start on a loaded machine.
    let mut long = submit("20", &long_log);
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    wait_until(
        Duration::from_secs(60),
        || read(&long_log).contains("round 1/20"),
        "a trial",
    );
    // Room for two runs, but both measure on this machine: the second waits, and Ctrl-C on its
    // client cancels it on the service.
    let mut queued = submit("1", &queued_log);
    wait_until(
        Duration::from_secs(30),
        || read(&queued_log).contains("queued: a host is measuring run"),
        "the second run to wait for the host",
    );
    signal(queued.id(), nix::sys::signal::Signal::SIGINT);
    let status = queued.wait().unwrap();
    let log = read(&queued_log);
    assert_eq!(status.code(), Some(130), "{log}");
    assert!(log.contains("cancelling run"), "{log}");

    // `quietbench cancel` drops a queued run; its client learns it ended.
    let third_log = dir.path().join("third.log");
    let mut third = submit("1", &third_log);
    wait_until(
        Duration::from_secs(30),
        || read(&third_log).contains("queued: a host is measuring run"),
        "the third run to wait for the host",
    );
    let third_id = run_id_in(&read(&third_log));
    let (code, _, stderr) = output(common::quietbench().args([
        "cancel",
        &third_id[..8],
        "--controller",
        &service.address,
    ]));
    assert_eq!(code, 1);
    assert!(stderr.contains("not a whole run id"), "{stderr}");
    let (code, said, stderr) =
        output(common::quietbench().args(["cancel", &third_id, "--controller", &service.address]));
    assert_eq!(code, 0, "{stderr}");
    assert!(said.contains("cancelled: it had not started"), "{said}");
    assert_eq!(
        third.wait().unwrap().code(),
        Some(130),
        "{}",
        read(&third_log)
    );

    // The service dies mid-run; its run's controller is interrupted (restoring, keeping its
    // trials), and the restarted service resumes it to the end.
    let long_id = run_id_in(&read(&long_log));
    service.kill();
    let _ = long.wait();
    let service = Service::start(&db, &state, &[]);
    wait_until(
        Duration::from_secs(120),
        || status_of(&service, &long_id).as_deref() == Some("complete"),
        "the resumed run to complete",
    );
    let (_, stdout, _) =
        output(common::quietbench().args(["runs", "--controller", &service.address]));
    let line = stdout.lines().find(|l| l.starts_with(&long_id)).unwrap();
    assert_eq!(line.split_whitespace().nth(4), Some("20"), "{stdout}");
    let (_, shown, _) =
        output(common::quietbench().args(["show", &long_id, "--controller", &service.address]));
    assert!(shown.contains("(complete)"), "{shown}");
    let stderr = read(&state.join("runs").join(&long_id).join("stderr"));
    assert!(stderr.contains("resuming run"), "{stderr}");
}

#[test]
fn over_mutual_tls_only_client_certificates_are_let_in() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    common::issue_certs(
        &certs,
        &[
            &["--service", "svc", "--san", "127.0.0.1"],
            &["--client", "ci"],
            &["--controller", "ctl"],
        ],
    );
    let file = |name: &str| certs.join(name).to_str().unwrap().to_string();
    let service = Service::start(
        &dir.path().join("store.sqlite3"),
        &dir.path().join("state"),
        &[
            "--tls-cert",
            &file("service-svc.pem"),
            "--tls-key",
            &file("service-svc.key"),
            "--client-ca",
            &file("ca.pem"),
        ],
    );
    let runs_as = |cert: Option<&str>| {
        let mut command = common::quietbench();
        command.args(["runs", "--controller", &service.address]);
        if let Some(stem) = cert {
            command.args([
                "--controller-ca",
                &file("ca.pem"),
                "--controller-cert",
                &file(&format!("{stem}.pem")),
                "--controller-key",
                &file(&format!("{stem}.key")),
            ]);
        }
        output(&mut command)
    };
    let (code, stdout, stderr) = runs_as(Some("client-ci"));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("no runs stored"), "{stdout}");
    let (code, _, stderr) = runs_as(Some("controller-ctl"));
    assert_eq!(code, 1);
    assert!(stderr.contains("not a client's"), "{stderr}");
    let (code, _, stderr) = runs_as(None);
    assert_eq!(code, 1, "plain gRPC must not reach a TLS service: {stderr}");

    // The Python client over mutual TLS, with the client certificate.
    let plan = dir.path().join("plan.toml");
    std::fs::write(
        &plan,
        "hosts = \"local\"\nrounds = 1\nduration_s = 0.2\n\n[[variant]]\nname = \"a\"\n\
         probe = \"cpu.primes\"\n",
    )
    .unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/python/submit_plan.py");
    let (code, stdout, stderr) = output(
        Command::new("python3")
            .arg(script)
            .args(["--controller", &service.address])
            .args(["--ca", &file("ca.pem")])
            .args(["--cert", &file("client-ci.pem")])
            .args(["--key", &file("client-ci.key")])
            .arg(&plan),
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("finished: complete, exit code 0"),
        "{stdout}"
    );
}

#[tokio::test]
async fn health_and_both_reflection_versions_describe_the_service() {
    use quietbench_proto::v1::CONTROLLER_SERVICE_NAME;
    use tonic_reflection::pb::{v1, v1alpha};

    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(
        &dir.path().join("store.sqlite3"),
        &dir.path().join("state"),
        &[],
    );
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", service.address))
        .unwrap()
        .connect()
        .await
        .unwrap();

    let request = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(v1::server_reflection_request::MessageRequest::ListServices(
            String::new(),
        )),
    };
    let mut answers = v1::server_reflection_client::ServerReflectionClient::new(channel.clone())
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let Some(v1::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
        answers.message().await.unwrap().unwrap().message_response
    else {
        panic!("no service list (v1)");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.iter().any(|n| n == CONTROLLER_SERVICE_NAME),
        "{names:?}"
    );
    assert!(
        names.iter().any(|n| n == "grpc.health.v1.Health"),
        "{names:?}"
    );
    // Only what it serves: the agent's service is in the same proto package, not on this port.
    assert!(
        !names
            .iter()
            .any(|n| n == quietbench_proto::v1::AGENT_SERVICE_NAME),
        "{names:?}"
    );

    let request = v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            v1alpha::server_reflection_request::MessageRequest::FileContainingSymbol(
                CONTROLLER_SERVICE_NAME.into(),
            ),
        ),
    };
    let mut answers =
        v1alpha::server_reflection_client::ServerReflectionClient::new(channel.clone())
            .server_reflection_info(tokio_stream::iter([request]))
            .await
            .unwrap()
            .into_inner();
    let answer = answers.message().await.unwrap().unwrap().message_response;
    assert!(
        matches!(
            answer,
            Some(v1alpha::server_reflection_response::MessageResponse::FileDescriptorResponse(ref f))
                if !f.file_descriptor_proto.is_empty()
        ),
        "no descriptor for the service (v1alpha): {answer:?}"
    );

    let status = tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest {
            service: CONTROLLER_SERVICE_NAME.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(
        status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
}

#[test]
fn a_stopped_service_ends_its_streams_resumes_its_runs_and_running_runs_cancel() {
    let dir = tempfile::tempdir().unwrap();
    let (db, state) = (dir.path().join("store.sqlite3"), dir.path().join("state"));
    let mut service = Service::start(&db, &state, &[]);
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let submit = |service: &Service, log: &PathBuf| {
        common::quietbench()
            .args(["run", "--controller", &service.address, "--local"])
            .args(["--rounds", "6", "--duration", "1", "--warmup", "0"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap()
    };
    let log = dir.path().join("first.log");
    let mut client = submit(&service, &log);
    wait_until(
        Duration::from_secs(60),
        || read(&log).contains("round 1/6"),
        "a trial",
    );
    let run_id = run_id_in(&read(&log));

    // SIGTERM with a client watching: the service interrupts the run, ends the stream, stops.
    signal(service.child.id(), nix::sys::signal::Signal::SIGTERM);
    let stopped = Instant::now();
    let status = service.child.wait().unwrap();
    assert!(status.success(), "serve ended with {status}");
    assert!(
        stopped.elapsed() < Duration::from_secs(60),
        "serve took {:?} to stop",
        stopped.elapsed()
    );
    assert_eq!(client.wait().unwrap().code(), Some(1));
    let said = read(&log);
    assert!(said.contains("the service is stopping"), "{said}");
    assert!(
        said.contains(&format!("quietbench show {run_id}")),
        "{said}"
    );

    // Started again: the run resumes and completes with all its trials.
    let service = Service::start(&db, &state, &[]);
    wait_until(
        Duration::from_secs(120),
        || status_of(&service, &run_id).as_deref() == Some("complete"),
        "the resumed run to complete",
    );
    let (_, listed, _) =
        output(common::quietbench().args(["runs", "--controller", &service.address]));
    let line = listed.lines().find(|l| l.starts_with(&run_id)).unwrap();
    assert_eq!(line.split_whitespace().nth(4), Some("6"), "{listed}");

    // Ctrl-C on the client of a measuring run cancels it on the service: it ends interrupted,
    // its finished trials kept.
    let log = dir.path().join("second.log");
    let mut client = submit(&service, &log);
    wait_until(
        Duration::from_secs(60),
        || read(&log).contains("round 1/6"),
        "a trial",
    );
    let second = run_id_in(&read(&log));
    signal(client.id(), nix::sys::signal::Signal::SIGINT);
    let code = client.wait().unwrap().code();
    let said = read(&log);
    assert_eq!(code, Some(130), "{said}");
    assert!(said.contains("cancelling run"), "{said}");
    assert_eq!(status_of(&service, &second).as_deref(), Some("interrupted"));
}
