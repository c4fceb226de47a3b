//! `quietbench run --ec2 --probe http` end to end against moto (as tests/tests/ec2_fleet.rs):
//! the fleet launches the measured hosts, then one load instance per host (a second batch,
//! with the hosts' template: same placement group and security group), runs each host's trials
//! with its own load instance sending the requests, never measures on a load instance nor
//! matches its CPU model, and terminates all of them (also when a load instance fails to
//! answer).
//!
//! Agents on this machine stand in for the instances (`QUIETBENCH_EC2_AGENT_MAP`, taken in
//! launch order: the host batch first, then the load batch). The hosts' agents allow exec (they
//! start the user's server); the load agents do not, as the fleet's peer user data says, so a
//! server started on the wrong side fails the run.
//!
//! Needs the `quietbench` binary built with the `ec2` feature, as ec2_fleet.rs does.

mod common;

use std::path::Path;
use std::process::Command;

use common::AgentProcess;
use common::ec2::{
    Moto, against, any_ami, check_binary_has_ec2, describe_run_instances, fleet_ca, free_port,
    live, start_moto, tls_agent, two_model_roots,
};
use common::servers::{own_server, processes_of};
use serde_json::Value;

/// `run --ec2 --probe http` on moto for 2 hosts, with the agents at `map` and `extra` flags.
fn run_http_ec2(
    moto: &Moto,
    ami: &str,
    ca: &Path,
    server: &Path,
    map: &[String],
    json: &Path,
    extra: &[&str],
) -> Command {
    let mut command = against(
        moto,
        &[
            "run",
            "--ec2",
            "--instance-type",
            "c5.large",
            "--ami",
            ami,
            "--count",
            "2",
            "--probe",
            "http",
            "--param",
            "rate=50",
            // The generator's lag bound is http_server.rs's to test; a hiccup of this 2-CPU
            // machine must not void these trials.
            "--param",
            "max_lag_ms=1000",
            "--rounds",
            "1",
            "--duration",
            "0.5",
            "--interval",
            "0.5",
            "--no-store",
        ],
    );
    command
        .arg("--param")
        .arg(format!("server={} --port {{port}}", server.display()))
        .arg("--json")
        .arg(json)
        .args(extra)
        .arg("--ca-dir")
        .arg(ca)
        .env("QUIETBENCH_EC2_AGENT_MAP", map.join(","));
    command
}

fn ok(command: &mut Command) -> (String, String) {
    let out = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{command:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

fn metric<'a>(trial: &'a Value, name: &str) -> &'a Value {
    trial["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("trial has no metric {name}: {trial}"))
}

fn addrs(agents: &[&AgentProcess]) -> Vec<String> {
    agents.iter().map(|a| a.addr.to_string()).collect()
}

/// Checks the report: trials on the hosts `hosts` only, host i's trials loaded from `loads[i]`,
/// http's metrics without errors. Returns the run id.
fn check_report(json: &Path, hosts: &[String], loads: &[String]) -> String {
    let report: Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    let reported: Vec<&str> = report["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["address"].as_str().unwrap())
        .collect();
    assert_eq!(reported, hosts, "the measured hosts are the host batch's");
    let trials = report["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 2, "1 round × 1 variant × 2 hosts");
    let mut loaded_from: Vec<&str> = Vec::new();
    for trial in trials {
        assert_eq!(trial["probe"], "http");
        let address = trial["host"].as_str().unwrap();
        let host = hosts
            .iter()
            .position(|h| h == address)
            .unwrap_or_else(|| panic!("trial on {address}, not a measured host: {trial}"));
        let peer = trial["peer"].as_str().unwrap();
        assert_eq!(
            peer, loads[host],
            "host {host}'s load is its own load instance"
        );
        loaded_from.push(peer);
        let latency = metric(trial, "request_latency");
        assert!(
            latency["count"].as_u64().is_some_and(|n| n > 0),
            "{latency}"
        );
        assert!(metric(trial, "server_cpu_time")["value"].as_f64().unwrap() > 0.0);
        for errors in [
            "errors_connect",
            "errors_timeout",
            "errors_5xx",
            "errors_io",
        ] {
            assert_eq!(
                metric(trial, errors)["value"].as_f64(),
                Some(0.0),
                "{errors}"
            );
        }
    }
    loaded_from.sort();
    loaded_from.dedup();
    assert_eq!(
        loaded_from.len(),
        2,
        "the pairs ran side by side, each with its own load"
    );
    report["run_id"].as_str().unwrap().to_string()
}

/// The run's instances in moto: (how many, how many terminated, how many tagged as peers).
fn instances_of(moto: &Moto, run: &str) -> (usize, usize, usize) {
    // moto indents its XML; the tag pairs are compared without the whitespace between elements.
    let answer: String = describe_run_instances(moto, run)
        .lines()
        .map(str::trim)
        .collect();
    (
        answer.matches("<instanceId>").count(),
        answer.matches("<name>terminated</name>").count(),
        answer
            .matches("<key>quietbench:role</key><value>peer</value>")
            .count(),
    )
}

#[test]
fn http_runs_each_host_with_its_own_load_instance_and_terminates_both() {
    check_binary_has_ec2();
    let dir = tempfile::tempdir().unwrap();
    let moto = start_moto();
    let ami = any_ami(&moto);
    let ca = fleet_ca(dir.path());
    let roots = two_model_roots(dir.path());
    let (model_8259, model_kvm) = (&roots[0], &roots[1]);
    let server = own_server(dir.path(), "qb-ec2-http-server");
    // Hosts start the user's server (exec allowed); load agents only send requests.
    let host = |name: &str, root: &Path| tls_agent(dir.path(), &ca, root, name, true);
    let load = |name: &str| tls_agent(dir.path(), &ca, model_kvm, name, false);
    let (h0, h1, h2) = (
        host("h0", model_8259),
        host("h1", model_kvm),
        host("h2", model_8259),
    );
    let (l0, l1) = (load("l0"), load("l1"));

    // 2 hosts, no CPU-model policy: the host batch (h0, h1), then the load batch (l0, l1). The
    // security group made for the run also admits its own members (host <-> load).
    let json = dir.path().join("plain.json");
    let map = addrs(&[&h0, &h1, &l0, &l1]);
    let (stdout, stderr) = ok(&mut run_http_ec2(
        &moto,
        &ami,
        &ca,
        &server,
        &map,
        &json,
        &["--allow-from", "127.0.0.1/32"],
    ));
    assert!(
        stdout.contains(
            "fleet: launched 4 in 2 batch(es), kept 2, rejected 0, lost 0, 0 re-roll(s), 2 peer(s)"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("2 hosts, 2 CPU models"), "{stdout}");
    for l in [&l0, &l1] {
        assert!(stdout.contains(&format!("peer, at {}", l.addr)), "{stdout}");
    }
    let run = check_report(&json, &map[..2], &map[2..]);
    assert!(stderr.contains("terminating 4 instance(s)"), "{stderr}");
    assert!(
        stderr.contains("4 instance(s) terminated, 1 other resource(s) deleted"),
        "{stderr}"
    );
    assert_eq!(instances_of(&moto, &run), (4, 4, 2), "{run}");
    assert_eq!(live(&moto).0, 0, "{}", live(&moto).1);
    assert!(
        processes_of(&server).is_empty(),
        "a server outlived the run"
    );

    // --cpu-model select keeps 2 of 3 hosts (h1 is the KVM model); the load instances, both
    // KVM, are matched to nothing: a load instance is never rejected, re-rolled or counted.
    let json = dir.path().join("select.json");
    let map = addrs(&[&h0, &h1, &h2, &l0, &l1]);
    let (stdout, _) = ok(&mut run_http_ec2(
        &moto,
        &ami,
        &ca,
        &server,
        &map,
        &json,
        &["--cpu-model", "8259CL"],
    ));
    assert!(
        stdout.contains(
            "fleet: launched 5 in 2 batch(es), kept 2, rejected 1, lost 0, 0 re-roll(s), 2 peer(s)"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "kept: 2 × Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz (--cpu-model '8259CL', \
             --cpu-policy select); peers (not matched): 2 × Intel(R) Xeon(R) Processor"
        ),
        "{stdout}"
    );
    let run = check_report(&json, &[map[0].clone(), map[2].clone()], &map[3..]);
    assert_eq!(instances_of(&moto, &run), (5, 5, 2), "{run}");
    assert_eq!(live(&moto).0, 0, "{}", live(&moto).1);
    assert!(
        processes_of(&server).is_empty(),
        "a server outlived the run"
    );

    // A load instance that never answers fails the launch, and the hosts and the other load
    // instance go with it.
    let closed = format!("127.0.0.1:{}", free_port());
    let map = [addrs(&[&h0, &h1, &l0]), vec![closed]].concat();
    let out = run_http_ec2(
        &moto,
        &ami,
        &ca,
        &server,
        &map,
        &dir.path().join("failed.json"),
        &["--boot-timeout", "3s"],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("did not answer as an agent before the boot timeout"),
        "{stderr}"
    );
    assert!(stderr.contains("terminating 4 instance(s)"), "{stderr}");
    assert_eq!(live(&moto).0, 0, "{}", live(&moto).1);
}

/// `capacity --ec2` on moto: one host and its load instance are launched once, every step of
/// the search runs on them, and both are terminated at the end. The server serves one request
/// at a time for 5 ms (capacity 200 requests/s); a 20% resolution ends the search in a few
/// steps.
#[test]
fn capacity_searches_on_one_launched_host_and_its_load_instance_and_terminates_both() {
    check_binary_has_ec2();
    let dir = tempfile::tempdir().unwrap();
    let moto = start_moto();
    let ami = any_ami(&moto);
    let ca = fleet_ca(dir.path());
    let roots = two_model_roots(dir.path());
    let server = own_server(dir.path(), "qb-ec2-capacity-server");
    let host = tls_agent(dir.path(), &ca, &roots[0], "h0", true);
    let load = tls_agent(dir.path(), &ca, &roots[1], "l0", false);
    let json = dir.path().join("capacity.json");
    let map = addrs(&[&host, &load]);
    let a = format!(
        "{} --port {{port}} --delay-us 5000 --slots 1",
        server.display()
    );
    let (stdout, stderr) = ok(against(
        &moto,
        &[
            "capacity",
            "--ec2",
            "--instance-type",
            "c5.large",
            "--ami",
            &ami,
            "--allow-from",
            "127.0.0.1/32",
            "--a",
            &a,
            "--slo",
            "p99<50ms",
            "--start",
            "100",
            "--resolution",
            "20",
            "--duration",
            "1.5",
            "--param",
            "max_lag_ms=1000",
            "--param",
            "warmup=0.5",
            "--param",
            "connections=4",
            "--no-store",
            "--json",
            json.to_str().unwrap(),
        ],
    )
    .arg("--ca-dir")
    .arg(&ca)
    .env("QUIETBENCH_EC2_AGENT_MAP", map.join(",")));
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let build = &report["builds"][0];
    let held = build["capacity"]
        .as_f64()
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!((100.0..200.0).contains(&held), "{stdout}");
    assert!(build["steps"].as_array().unwrap().len() >= 3, "{report}");
    // One launch for the whole search: one host, one load instance, both terminated.
    assert!(stderr.contains("terminating 2 instance(s)"), "{stderr}");
    assert_eq!(live(&moto).0, 0, "{}", live(&moto).1);
    assert!(
        processes_of(&server).is_empty(),
        "a server outlived the search"
    );
}
