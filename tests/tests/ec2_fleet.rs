//! `quietbench run --ec2` end to end against a real EC2 API server on loopback (moto's server
//! mode, installed by `.ci/run`), with agents on this machine standing in for the instances:
//! `QUIETBENCH_EC2_AGENT_MAP` hands them out in launch order, and the fleet refuses to dial the
//! addresses moto invents. The agents serve mutual TLS with certificates from the CA the run
//! is given (`--ca-dir`), as instances do with the user data the fleet writes; their host
//! roots carry captured /proc/cpuinfo of two CPU models (the fixtures README cites them).
//!
//! Needs the `quietbench` binary built with the `ec2` feature: the README's test command
//! (`cargo test --workspace --features quietbench/ec2`) builds it. Without it these tests fail
//! and say so; they never skip.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::ec2::{
    Moto, against, agents_on_two_models, any_ami, check_binary_has_ec2, fleet_ca, free_port, live,
    start_moto,
};

/// `run --ec2` on moto with the agents at `map`.
fn run_ec2(moto: &Moto, ami: &str, ca: &Path, map: &[String], args: &[&str]) -> Command {
    let mut command = against(
        moto,
        &[
            "run",
            "--ec2",
            "--instance-type",
            "c5.large",
            "--ami",
            ami,
            "--rounds",
            "1",
            "--duration",
            "0.2",
            "--interval",
            "0.2",
            "--no-store",
        ],
    );
    command
        .args(args)
        .arg("--ca-dir")
        .arg(ca)
        .env("QUIETBENCH_EC2_AGENT_MAP", map.join(","));
    command
}

fn ok(command: &mut Command) -> (String, String) {
    let out = command.output().unwrap();
    let (stdout, stderr) = texts(&out);
    assert!(
        out.status.success(),
        "{command:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

fn texts(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_models(path: &Path) -> Vec<String> {
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    report["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            h["fingerprint"]["cpu_model_name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// What every test here starts from: a binary with EC2 fleets, a moto server, an AMI moto
/// knows, and the fleet's CA in a scratch directory.
struct Setup {
    dir: tempfile::TempDir,
    moto: Moto,
    ami: String,
    ca: PathBuf,
}

fn setup() -> Setup {
    check_binary_has_ec2();
    let dir = tempfile::tempdir().unwrap();
    let moto = start_moto();
    let ami = any_ami(&moto);
    let ca = fleet_ca(dir.path());
    Setup { dir, moto, ami, ca }
}

#[test]
fn cpu_model_policies_select_reroll_and_stratify() {
    let Setup { dir, moto, ami, ca } = setup();
    let agents = agents_on_two_models(dir.path(), &ca, 6);
    let map: Vec<String> = agents.iter().map(|a| a.addr.to_string()).collect();

    // select: 2 hosts of the 8259CL; 3 launched (half again), agents 0 and 2 kept, 1 rejected.
    let json = dir.path().join("select.json");
    let json_arg = json.to_str().unwrap();
    let (stdout, stderr) = ok(&mut run_ec2(
        &moto,
        &ami,
        &ca,
        &map,
        &["--count", "2", "--cpu-model", "8259cl", "--json", json_arg],
    ));
    assert!(stderr.contains("launching 3 to keep 2"), "{stderr}");
    assert!(
        stdout
            .contains("fleet: launched 3 in 1 batch(es), kept 2, rejected 1, lost 0, 0 re-roll(s)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("terminated (CPU model Intel(R) Xeon(R) Processor)"),
        "{stdout}"
    );
    let models = json_models(&json);
    assert_eq!(models.len(), 2);
    assert!(models.iter().all(|m| m.contains("8259CL")), "{models:?}");
    assert_eq!(live(&moto).0, 0, "{}", live(&moto).1);

    // reroll: agents 0 (8259CL) and 1 (KVM) come up; 1 is stopped and started, and its new
    // boot is agent 2 (8259CL).
    let json = dir.path().join("reroll.json");
    let json_arg = json.to_str().unwrap();
    let (stdout, stderr) = ok(&mut run_ec2(
        &moto,
        &ami,
        &ca,
        &map,
        &[
            "--count",
            "2",
            "--cpu-model",
            "8259CL",
            "--cpu-policy",
            "reroll",
            "--json",
            json_arg,
        ],
    ));
    assert!(
        stderr.contains("stopping and starting it (re-roll 1/5)"),
        "{stderr}"
    );
    assert!(
        stdout
            .contains("fleet: launched 2 in 1 batch(es), kept 2, rejected 0, lost 0, 1 re-roll(s)"),
        "{stdout}"
    );
    let models = json_models(&json);
    assert_eq!(models.len(), 2);
    assert!(models.iter().all(|m| m.contains("8259CL")), "{models:?}");
    assert_eq!(live(&moto).0, 0);

    // A bound on re-rolls: only KVM agents in the map, one re-roll allowed.
    let kvm_only: Vec<String> = map.iter().skip(1).step_by(2).cloned().collect();
    let out = run_ec2(
        &moto,
        &ami,
        &ca,
        &kvm_only,
        &[
            "--count",
            "1",
            "--cpu-model",
            "8259CL",
            "--cpu-policy",
            "reroll",
            "--max-rerolls",
            "1",
        ],
    )
    .output()
    .unwrap();
    let (_, stderr) = texts(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("after 1 re-roll(s)"), "{stderr}");
    assert_eq!(live(&moto).0, 0, "a failed choice leaves nothing");

    // stratify: 3 launched (8259CL, KVM, 8259CL), one of each model kept, reported per model.
    let (stdout, _) = ok(&mut run_ec2(
        &moto,
        &ami,
        &ca,
        &map,
        &["--count", "2", "--stratify"],
    ));
    assert!(stdout.contains("kept: 1 × Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz, 1 × Intel(R) Xeon(R) Processor (--stratify)"), "{stdout}");
    assert!(stdout.contains("2 hosts, 2 CPU models"), "{stdout}");
    assert_eq!(live(&moto).0, 0);
}

/// Spawns `run --ec2` for 2 hosts whose agents never answer (the map names a closed port), so
/// the controller sits after RunInstances waiting for them; returns once moto has them.
fn stuck_after_launch(moto: &Moto, ami: &str, ca: &Path, count: &str) -> Child {
    let closed = format!("127.0.0.1:{}", free_port());
    let child = run_ec2(
        moto,
        ami,
        ca,
        &[closed.clone(), closed],
        &["--count", count, "--boot-timeout", "5m"],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while live(moto).0 == 0 {
        assert!(Instant::now() < deadline, "no instance launched in 60 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    child
}

#[test]
fn a_sigkilled_controller_leaves_an_expiring_lease_and_gc_leaves_nothing() {
    // `_dir` is bound, not `_`: the CA lives in it until the test ends.
    let Setup {
        dir: _dir,
        moto,
        ami,
        ca,
    } = setup();
    let mut child = stuck_after_launch(&moto, &ami, &ca, "2");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
    let (count, listing) = live(&moto);
    assert!(count >= 2, "{listing}");
    // The lease: the expiry is at most 15 minutes ahead, not the 2 h --ttl.
    let expires = listing
        .lines()
        .find(|l| l.starts_with("instance"))
        .and_then(|l| l.split_whitespace().find(|w| w.ends_with('Z')))
        .unwrap_or_else(|| panic!("{listing}"));
    let at = humantime::parse_rfc3339(expires).unwrap();
    let ahead = at
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    assert!(ahead <= Duration::from_secs(15 * 60), "{listing}");
    let run = listing
        .lines()
        .find(|l| l.starts_with("instance"))
        .and_then(|l| l.split_whitespace().nth(2))
        .unwrap()
        .to_string();
    // moto answers DescribePlacementGroups with HTTP 500 (the request-level tests cover
    // placement groups): gc reports that one listing as its only error.
    let out = against(&moto, &["gc", "--run", &run]).output().unwrap();
    let (stdout, stderr) = texts(&out);
    assert!(stdout.contains("terminated instance"), "{stdout}");
    assert!(stdout.contains("kept 0, 1 error(s)"), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("could not list placement groups: ec2:DescribePlacementGroups failed"),
        "{stderr}"
    );
    let (count, listing) = live(&moto);
    assert_eq!(count, 0, "{listing}");
}

#[test]
fn ctrl_c_during_launch_leaves_nothing() {
    // `_dir` is bound, not `_`: the CA lives in it until the test ends.
    let Setup {
        dir: _dir,
        moto,
        ami,
        ca,
    } = setup();
    let mut child = stuck_after_launch(&moto, &ami, &ca, "2");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let (count, listing) = live(&moto);
    assert_eq!(count, 0, "{listing}");
}

#[test]
fn a_launch_that_fails_half_way_leaves_nothing() {
    let Setup { dir, moto, ami, ca } = setup();
    let agents = agents_on_two_models(dir.path(), &ca, 2);
    let closed = format!("127.0.0.1:{}", free_port());
    // Three instances: the first and the last answer, the second never does.
    let map = vec![
        agents[0].addr.to_string(),
        closed,
        agents[1].addr.to_string(),
    ];
    let out = run_ec2(
        &moto,
        &ami,
        &ca,
        &map,
        &["--count", "3", "--boot-timeout", "3s"],
    )
    .output()
    .unwrap();
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("did not answer as an agent before the boot timeout"),
        "{stderr}"
    );
    assert!(stderr.contains("its console output ends"), "{stderr}");
    assert!(stderr.contains("terminating 3 instance(s)"), "{stderr}");
    let (count, listing) = live(&moto);
    assert_eq!(count, 0, "{listing}");
}

#[test]
fn a_loopback_endpoint_without_the_map_dials_nothing() {
    // `_dir` is bound, not `_`: the CA lives in it until the test ends.
    let Setup {
        dir: _dir,
        moto,
        ami,
        ca,
    } = setup();
    let out = run_ec2(&moto, &ami, &ca, &[], &["--count", "1"])
        .env_remove("QUIETBENCH_EC2_AGENT_MAP")
        .output()
        .unwrap();
    let (_, stderr) = texts(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("must not be dialled"), "{stderr}");
    assert_eq!(live(&moto).0, 0);
}

#[test]
fn a_security_group_made_for_the_run_goes_with_it_and_a_dry_run_launches_nothing() {
    let Setup { dir, moto, ami, ca } = setup();
    let agents = agents_on_two_models(dir.path(), &ca, 1);
    let map = vec![agents[0].addr.to_string()];
    let (stdout, stderr) = ok(&mut run_ec2(
        &moto,
        &ami,
        &ca,
        &map,
        &[
            "--count",
            "1",
            "--allow-from",
            "127.0.0.1/32",
            "--threads-per-core",
            "1",
        ],
    ));
    assert!(stdout.contains("threads per core 1"), "{stdout}");
    assert!(
        stderr.contains("1 instance(s) terminated, 1 other resource(s) deleted"),
        "{stderr}"
    );
    assert_eq!(live(&moto).0, 0, "{}", live(&moto).1);

    let (stdout, _) = ok(&mut run_ec2(
        &moto,
        &ami,
        &ca,
        &map,
        &[
            "--count",
            "2",
            "--allow-from",
            "127.0.0.1/32",
            "--cpu-model",
            "8259CL",
            "--dry-run",
        ],
    ));
    assert!(
        stdout.contains("launch plan (dry run: nothing is launched)"),
        "{stdout}"
    );
    assert!(stdout.contains("3 × c5.large"), "{stdout}");
    assert!(
        stdout.contains("ec2:CreateSecurityGroup: allowed"),
        "{stdout}"
    );
    assert!(stdout.contains("ec2:RunInstances: allowed"), "{stdout}");
    assert_eq!(live(&moto).0, 0);
}
