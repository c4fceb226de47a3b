//! The EC2 tests' helpers: a moto server (EC2's API on loopback), an AMI it knows, a fleet CA,
//! and agents on this machine standing in for instances (`QUIETBENCH_EC2_AGENT_MAP`), their
//! host roots carrying captured /proc/cpuinfo of two CPU models.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{AgentProcess, agent_command, quietbench, succeed};

#[path = "../../../crates/quietbench-ec2/tests/common/moto.rs"]
mod moto;
// Not every test binary that includes `common` starts moto.
#[allow(unused_imports)]
pub use moto::{Moto, start_moto};

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An AMI moto knows, asked of moto itself (DescribeImages over plain HTTP). moto's
/// development server now and then resets a connection it has just accepted while it is still
/// busy starting (seen once in CI: ECONNRESET on the read): the question is asked again then,
/// a few times; any other failure, or five resets, fails the test.
pub fn any_ami(moto: &Moto) -> String {
    let mut tries = 0;
    let answer = loop {
        tries += 1;
        match describe_images(moto.port) {
            Ok(answer) => break answer,
            // Refused too: seen once in CI, the server not yet listening again.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionRefused
                ) && tries < 5 =>
            {
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            Err(e) => panic!("DescribeImages on moto failed after {tries} tries: {e}"),
        }
    };
    let at = answer.find("<imageId>ami-").expect("moto lists images");
    let rest = &answer[at + "<imageId>".len()..];
    rest[..rest.find('<').unwrap()].to_string()
}

/// moto's answer to DescribeImages, read to its end.
fn describe_images(port: u16) -> std::io::Result<String> {
    query(
        port,
        "Action=DescribeImages&Owner.1=amazon&Version=2016-11-15",
    )
}

/// moto's answer to DescribeInstances for one run's instances (its `quietbench:run` tag),
/// terminated ones included: moto keeps them listed.
pub fn describe_run_instances(moto: &Moto, run: &str) -> String {
    query(
        moto.port,
        &format!(
            "Action=DescribeInstances&Filter.1.Name=tag%3Aquietbench%3Arun&Filter.1.Value.1={run}\
             &Version=2016-11-15"
        ),
    )
    .expect("DescribeInstances on moto")
}

/// An EC2 query API call to moto over plain HTTP, its answer read to its end.
fn query(port: u16, body: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    write!(
        stream,
        "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/ec2/aws4_request, \
         SignedHeaders=host, Signature=0\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

/// A CA with the certificate every EC2 agent carries (`quietbench-agent`).
pub fn fleet_ca(dir: &Path) -> PathBuf {
    let ca = dir.join("ca");
    succeed(quietbench().args(["certs", "init", "--dir"]).arg(&ca));
    succeed(
        quietbench()
            .args(["certs", "issue", "--agent", "quietbench-agent", "--dir"])
            .arg(&ca),
    );
    ca
}

pub fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/quietbench-host/tests/fixtures")
        .join(path)
}

/// `count` TLS agents, the even ones describing the captured EC2 8259CL and the odd ones the
/// captured KVM Xeon.
pub fn agents_on_two_models(dir: &Path, ca: &Path, count: usize) -> Vec<AgentProcess> {
    let roots = two_model_roots(dir);
    (0..count)
        .map(|i| tls_agent(dir, ca, &roots[i % 2], &i.to_string(), true))
        .collect()
}

/// Host roots whose /proc/cpuinfo is captured: [the EC2 8259CL, the KVM Xeon], in `dir`.
pub fn two_model_roots(dir: &Path) -> Vec<PathBuf> {
    [
        ("ec2-8259cl", "public/ec2-8259cl-2vcpu/proc/cpuinfo"),
        ("kvm-xeon", "kvm-2vcpu-xeon/proc/cpuinfo"),
    ]
    .iter()
    .map(|(name, capture)| {
        let root = dir.join(name);
        std::fs::create_dir_all(root.join("proc")).unwrap();
        std::fs::copy(fixture(capture), root.join("proc/cpuinfo")).unwrap();
        root
    })
    .collect()
}

/// A TLS agent with the fleet's agent certificate from `ca`, the host root `root` and a state
/// folder `agent-state-NAME` in `dir`; `allow_exec`: it runs exec probes and servers.
pub fn tls_agent(dir: &Path, ca: &Path, root: &Path, name: &str, allow_exec: bool) -> AgentProcess {
    let mut command = agent_command();
    command
        .arg("--host-root")
        .arg(root)
        .arg("--tls-cert")
        .arg(ca.join("agent-quietbench-agent.pem"))
        .arg("--tls-key")
        .arg(ca.join("agent-quietbench-agent.key"))
        .arg("--client-ca")
        .arg(ca.join("ca.pem"))
        .arg("--state-dir")
        .arg(dir.join(format!("agent-state-{name}")));
    AgentProcess::start_allowing(command, allow_exec)
}

/// Points `command`'s AWS settings at moto, with test credentials, by the environment (as an
/// instance profile and `serve.env` would give them), whatever the developer's own are.
pub fn moto_environment<'c>(command: &'c mut Command, moto: &Moto) -> &'c mut Command {
    command
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", &moto.url)
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_ENDPOINT_URL_EC2")
}

/// A `quietbench` command against moto, with test credentials, and moto named by the flags.
pub fn against(moto: &Moto, args: &[&str]) -> Command {
    let mut command = quietbench();
    command
        .args(args)
        .args(["--endpoint-url", &moto.url, "--region", "us-east-1"]);
    moto_environment(&mut command, moto);
    command
}

/// The fleets' live resources in moto, from `quietbench fleet ls`: (count, the listing).
pub fn live(moto: &Moto) -> (usize, String) {
    let out = against(moto, &["fleet", "ls"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let count = text
        .lines()
        .find_map(|l| l.strip_suffix(" resource(s) in us-east-1"))
        .unwrap_or_else(|| panic!("fleet ls printed no count: {text}"))
        .parse()
        .unwrap();
    (count, text)
}

/// Fails, saying how to build it, unless the `quietbench` under test has EC2 fleets.
pub fn check_binary_has_ec2() {
    let out = quietbench().args(["run", "--help"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("--ec2"),
        "this quietbench has no --ec2"
    );
    let out = quietbench().args(["gc", "--help"]).output().unwrap();
    assert!(
        out.status.success(),
        "the quietbench under test was built without the ec2 feature: run the tests with \
         `cargo test --workspace --features quietbench/ec2` (README)"
    );
}
