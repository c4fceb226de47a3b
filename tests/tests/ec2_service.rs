//! An EC2 plan submitted to `quietbench serve`, end to end against moto (as in
//! tests/tests/ec2_fleet.rs): the service launches the instances with its own AWS settings and
//! its own CA (`QUIETBENCH_EC2_CA_DIR` in its environment; clients may not name its folders),
//! measures on the agents standing in for them, keeps the run in its store, and leaves nothing
//! in EC2. The service also has an identity for the agents it is told of (`--ca --cert --key`,
//! as the systemd unit gives it), which an EC2 run, making its own, must not be handed.
//!
//! Needs the `quietbench` binary built with the `ec2` feature (the README's test command).

mod common;

use std::process::Stdio;

use common::ec2::{
    agents_on_two_models, any_ami, check_binary_has_ec2, fleet_ca, live, moto_environment,
    start_moto,
};
use common::{quietbench, succeed};

#[test]
fn an_ec2_plan_submitted_to_the_service_launches_measures_and_releases() {
    check_binary_has_ec2();
    let dir = tempfile::tempdir().unwrap();
    let moto = start_moto();
    let ami = any_ami(&moto);
    let ca = fleet_ca(dir.path());
    // Agents 0 and 2 describe the 8259CL, agent 1 the KVM Xeon.
    let agents = agents_on_two_models(dir.path(), &ca, 3);
    let map: Vec<String> = agents.iter().map(|a| a.addr.to_string()).collect();
    succeed(
        quietbench()
            .args(["certs", "issue", "--controller", "service", "--dir"])
            .arg(&ca),
    );
    let db = dir.path().join("runs.sqlite3");
    let mut service = moto_environment(&mut quietbench(), &moto)
        .args(["serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(&db)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--ca")
        .arg(ca.join("ca.pem"))
        .arg("--cert")
        .arg(ca.join("controller-service.pem"))
        .arg("--key")
        .arg(ca.join("controller-service.key"))
        .env("QUIETBENCH_EC2_AGENT_MAP", map.join(","))
        .env("QUIETBENCH_EC2_CA_DIR", &ca)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (_, address) = common::serve_address(&mut service);

    let plan = dir.path().join("plan.toml");
    std::fs::write(
        &plan,
        format!(
            "rounds = 1\nduration_s = 0.2\ninterval_s = 0.2\n\n[fleet]\nkind = \"ec2\"\n\
             instance_type = \"c5.large\"\nami = \"{ami}\"\ncount = 2\ncpu_model = \"8259cl\"\n\n\
             [[variant]]\nname = \"a\"\nprobe = \"cpu.primes\"\n"
        ),
    )
    .unwrap();
    let json = dir.path().join("report.json");
    let out = quietbench()
        .args(["run", "--controller", &address, "--plan"])
        .arg(&plan)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let _ = service.kill();
    let _ = service.wait();
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("fleet: launched 3 in 1 batch(es), kept 2, rejected 1"),
        "{said}"
    );
    // The report, from the service's store: both hosts of the model asked for.
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let models: Vec<&str> = report["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["fingerprint"]["cpu_model_name"].as_str().unwrap())
        .collect();
    assert_eq!(models.len(), 2, "{models:?}");
    assert!(models.iter().all(|m| m.contains("8259CL")), "{models:?}");
    // Nothing left in EC2, and the run is in the service's store.
    assert_eq!(live(&moto).0, 0, "{}", live(&moto).1);
    let listed = succeed(quietbench().arg("runs").arg("--db").arg(&db));
    assert!(listed.contains("complete"), "{listed}");
}
