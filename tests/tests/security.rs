//! What an agent enforces, through the shipped binary: `exec` only with `--allow-exec`; plain
//! gRPC only on loopback (or with `--insecure`); with `--tls-cert --tls-key --client-ca` only
//! controllers holding a certificate from the fleet's CA, and each way a handshake can fail
//! named in the controller's error.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{AgentProcess, agent_command, quietbench};
use quietbench_controller::tls::certs::{Role, issue};

fn certs(dir: &Path, args: &[&str]) {
    let mut command = quietbench();
    command.arg("certs").args(args).arg("--dir").arg(dir);
    common::succeed(&mut command);
}

/// A controller command's output (stdout + stderr) and whether it succeeded.
fn outcome(command: &mut Command) -> (bool, String) {
    let out = command.output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `quietbench host --agent ADDR` with the controller's identity from `dir` (CA, cert, key).
fn host_with(addr: &str, ca: &Path, cert: &Path, key: &Path) -> (bool, String) {
    let mut command = quietbench();
    command
        .args(["host", "--agent", addr, "--ca"])
        .arg(ca)
        .arg("--cert")
        .arg(cert)
        .arg("--key")
        .arg(key);
    outcome(&mut command)
}

struct Fleet {
    dir: PathBuf,
}

impl Fleet {
    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// An agent serving mutual TLS with `agent-NAME`'s certificate.
    fn agent(&self, name: &str) -> AgentProcess {
        let mut command = agent_command();
        command
            .arg("--tls-cert")
            .arg(self.file(&format!("agent-{name}.pem")))
            .arg("--tls-key")
            .arg(self.file(&format!("agent-{name}.key")))
            .arg("--client-ca")
            .arg(self.file("ca.pem"));
        AgentProcess::start_with(command)
    }
}

#[test]
fn exec_is_refused_unless_the_agent_allows_it() {
    // An agent started without --allow-exec (AgentProcess adds it; this one is started bare).
    let mut child = Command::new(common::quietbench_bin())
        .args(["agent", "--listen", "127.0.0.1:0"])
        .env("QUIETBENCH_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        line.trim().rsplit(' ').next().unwrap().to_string()
    };
    let (ok, said) = outcome(quietbench().args([
        "run",
        "--agent",
        &addr,
        "--probe",
        "exec",
        "--param",
        "cmd=true",
        "--rounds",
        "1",
        "--duration",
        "1",
        "--no-store",
    ]));
    let _ = child.kill();
    let _ = child.wait();
    assert!(!ok, "{said}");
    assert!(said.contains("does not allow this"), "{said}");
    assert!(said.contains("--allow-exec"), "{said}");
}

#[test]
fn plain_grpc_is_refused_off_loopback_unless_insecure() {
    let out = Command::new(common::quietbench_bin())
        .args(["agent", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        said.contains("refusing to serve plain gRPC on 0.0.0.0:0"),
        "{said}"
    );
    for flag in ["--tls-cert", "--tls-key", "--client-ca", "--insecure"] {
        assert!(said.contains(flag), "{flag}: {said}");
    }
}

#[test]
fn mutual_tls_admits_the_fleet_controller_and_names_every_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = Fleet {
        dir: dir.path().join("fleet"),
    };
    certs(&fleet.dir, &["init"]);
    certs(
        &fleet.dir,
        &["issue", "--agent", "a1", "--san", "127.0.0.1"],
    );
    certs(
        &fleet.dir,
        &["issue", "--agent", "elsewhere", "--san", "10.9.9.9"],
    );
    certs(&fleet.dir, &["issue", "--controller", "ci"]);
    certs(&fleet.dir, &["issue", "--client", "dashboard"]);
    // Another fleet's CA and controller.
    let other = Fleet {
        dir: dir.path().join("other"),
    };
    certs(&other.dir, &["init"]);
    certs(
        &other.dir,
        &["issue", "--agent", "a1", "--san", "127.0.0.1"],
    );
    certs(&other.dir, &["issue", "--controller", "ci"]);

    let agent = fleet.agent("a1");
    let addr = agent.addr.to_string();
    let (ca, cert, key) = (
        fleet.file("ca.pem"),
        fleet.file("controller-ci.pem"),
        fleet.file("controller-ci.key"),
    );

    // The fleet's controller gets in.
    let (ok, said) = host_with(&addr, &ca, &cert, &key);
    assert!(ok, "{said}");
    assert!(said.contains("CPU"), "{said}");

    // ... and runs a probe over it, its intervals streaming back.
    let mut run = quietbench();
    run.args([
        "run",
        "--agent",
        &addr,
        "--rounds",
        "1",
        "--warmup",
        "0",
        "--duration",
        "1",
        "--no-store",
        "--ca",
    ])
    .arg(&ca)
    .arg("--cert")
    .arg(&cert)
    .arg("--key")
    .arg(&key);
    let table = common::succeed(&mut run);
    assert!(table.contains("cpu.primes  events_per_sec"), "{table}");

    // ... and so does a plan whose [tls] table names the same files (relative to the plan).
    let plan = dir.path().join("plan.toml");
    std::fs::write(
        &plan,
        format!(
            "hosts = [\"{addr}\"]\nrounds = 1\nduration_s = 1\n\n[tls]\nca = \"fleet/ca.pem\"\n\
             cert = \"fleet/controller-ci.pem\"\nkey = \"fleet/controller-ci.key\"\n\n\
             [[variant]]\nname = \"primes\"\nprobe = \"cpu.primes\"\n"
        ),
    )
    .unwrap();
    let mut run = quietbench();
    run.args(["run", "--no-store", "--plan"]).arg(&plan);
    let table = common::succeed(&mut run);
    assert!(table.contains("events_per_sec"), "{table}");

    // A certificate for a client of the controller service, from the same CA: it reaches the
    // service, never an agent.
    let (ok, said) = host_with(
        &addr,
        &ca,
        &fleet.file("client-dashboard.pem"),
        &fleet.file("client-dashboard.key"),
    );
    assert!(!ok, "a service client got into an agent: {said}");
    assert!(said.contains("agents answer controllers only"), "{said}");

    // No certificate at all (plain gRPC): refused.
    let (ok, said) = outcome(quietbench().args(["host", "--agent", &addr]));
    assert!(!ok, "plain gRPC got in: {said}");

    // A certificate from another CA: the agent refuses it.
    let (ok, said) = host_with(
        &addr,
        &ca,
        &other.file("controller-ci.pem"),
        &other.file("controller-ci.key"),
    );
    assert!(!ok, "{said}");
    assert!(said.contains("the agent refused our certificate"), "{said}");

    // We trust another CA than the agent's: its certificate is not signed by ours.
    let (ok, said) = host_with(&addr, &other.file("ca.pem"), &cert, &key);
    assert!(!ok, "{said}");
    assert!(said.contains("is not signed by the CA"), "{said}");

    // An agent whose certificate names another address.
    let elsewhere = fleet.agent("elsewhere");
    let (ok, said) = host_with(&elsewhere.addr.to_string(), &ca, &cert, &key);
    assert!(!ok, "{said}");
    assert!(said.contains("does not name the address dialled"), "{said}");

    // Expired certificates, issued 40 days ago for 1 day (by the library: the command line
    // issues from today only): the agent's is named as expired; ours is refused by the agent.
    let long_ago = time::OffsetDateTime::now_utc() - time::Duration::days(40);
    for (role, name) in [(Role::Agent, "old"), (Role::Controller, "old")] {
        let sans = if role == Role::Agent {
            vec!["127.0.0.1".to_string()]
        } else {
            Vec::new()
        };
        issue(&fleet.dir, role, name, &sans, 1, long_ago).unwrap();
    }
    let old_agent = fleet.agent("old");
    let (ok, said) = host_with(&old_agent.addr.to_string(), &ca, &cert, &key);
    assert!(!ok, "{said}");
    assert!(
        said.contains("the agent's certificate has expired"),
        "{said}"
    );
    let (ok, said) = host_with(
        &addr,
        &ca,
        &fleet.file("controller-old.pem"),
        &fleet.file("controller-old.key"),
    );
    assert!(!ok, "{said}");
    assert!(said.contains("the agent refused our certificate"), "{said}");

    // The same agent set up from a config file (as the AMI's unit starts it).
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "tls_cert = {:?}\ntls_key = {:?}\nclient_ca = {:?}\nmax_trial_secs = 60\n",
            fleet.file("agent-a1.pem"),
            fleet.file("agent-a1.key"),
            fleet.file("ca.pem")
        ),
    )
    .unwrap();
    let mut command = agent_command();
    command.arg("--config").arg(&config);
    let configured = AgentProcess::start_with(command);
    let (ok, said) = host_with(&configured.addr.to_string(), &ca, &cert, &key);
    assert!(ok, "{said}");
    let (ok, said) = outcome(quietbench().args(["host", "--agent", &configured.addr.to_string()]));
    assert!(!ok, "plain gRPC got into the configured agent: {said}");

    // Missing files are named.
    let (ok, said) = host_with(&addr, &fleet.file("nope.pem"), &cert, &key);
    assert!(!ok);
    assert!(
        said.contains("cannot read the CA certificate (--ca)"),
        "{said}"
    );

    // The agent serves the next request normally.
    let (ok, said) = host_with(&addr, &ca, &cert, &key);
    assert!(ok, "{said}");
}

#[test]
fn token_mode_admits_the_right_token_only() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = dir.path().join("fleet");
    certs(&fleet, &["init"]);
    certs(&fleet, &["issue", "--agent", "a1", "--san", "127.0.0.1"]);
    let token = dir.path().join("token");
    std::fs::write(&token, "4f1c0e2b9a7d4e3f8b6a5c2d1e0f9a8b\n").unwrap();
    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, "00000000000000000000000000000000\n").unwrap();
    let mut command = agent_command();
    command
        .arg("--tls-cert")
        .arg(fleet.join("agent-a1.pem"))
        .arg("--tls-key")
        .arg(fleet.join("agent-a1.key"))
        .arg("--token-file")
        .arg(&token);
    let agent = AgentProcess::start_with(command);
    let addr = agent.addr.to_string();
    let host = |args: &[&std::ffi::OsStr], env: Option<&str>| {
        let mut command = quietbench();
        command.args(["host", "--agent", &addr]).args(args);
        command.env_remove("QUIETBENCH_TOKEN");
        if let Some(t) = env {
            command.env("QUIETBENCH_TOKEN", t);
        }
        outcome(&mut command)
    };
    let ca = fleet.join("ca.pem");
    let (ok, said) = host(
        &[
            "--ca".as_ref(),
            ca.as_ref(),
            "--token-file".as_ref(),
            token.as_ref(),
        ],
        None,
    );
    assert!(ok, "{said}");
    let (ok, said) = host(
        &["--ca".as_ref(), ca.as_ref()],
        Some("4f1c0e2b9a7d4e3f8b6a5c2d1e0f9a8b"),
    );
    assert!(ok, "the token from the environment: {said}");
    let (ok, said) = host(
        &[
            "--ca".as_ref(),
            ca.as_ref(),
            "--token-file".as_ref(),
            wrong.as_ref(),
        ],
        None,
    );
    assert!(!ok, "{said}");
    assert!(
        said.contains("the agent refused our token: wrong token"),
        "{said}"
    );
    let (ok, said) = host(&["--ca".as_ref(), ca.as_ref()], None);
    assert!(!ok, "{said}");
    assert!(
        said.contains("--ca needs a way to prove who we are"),
        "{said}"
    );
    let (ok, said) = host(&[], None);
    assert!(!ok, "plain gRPC got in: {said}");
    // A short token is refused at the agent's start.
    std::fs::write(&wrong, "short\n").unwrap();
    let out = agent_command()
        .args(["--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(fleet.join("agent-a1.pem"))
        .arg("--tls-key")
        .arg(fleet.join("agent-a1.key"))
        .arg("--token-file")
        .arg(&wrong)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 16 printable characters"));
}

/// Who calls, as one of the refusal categories of the table below.
struct Caller {
    what: &'static str,
    /// None: plain gRPC (no TLS at all).
    tls: Option<tonic::transport::ClientTlsConfig>,
    token: Option<&'static str>,
}

/// Calls every RPC the agent's port serves (the agent service's ten, health, reflection), each
/// bounded by a timeout so a hang fails the test, and returns each call's status.
async fn call_every_rpc(addr: &str, caller: &Caller) -> Vec<(&'static str, tonic::Status)> {
    use quietbench_proto::v1 as pb;
    use quietbench_proto::v1::agent_service_client::AgentServiceClient;
    use tonic::transport::Channel;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;

    let scheme = if caller.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let mut endpoint = Channel::from_shared(format!("{scheme}://{addr}")).unwrap();
    if let Some(tls) = &caller.tls {
        endpoint = endpoint.tls_config(tls.clone()).unwrap();
    }
    let channel = endpoint.connect_lazy();
    let token = caller.token;
    let add_token = move |mut request: tonic::Request<()>| {
        if let Some(t) = token {
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        Ok(request)
    };
    let mut agent = AgentServiceClient::with_interceptor(channel.clone(), add_token);
    let mut health = HealthClient::with_interceptor(channel.clone(), add_token);
    let mut reflection = ServerReflectionClient::with_interceptor(channel, add_token);

    async fn status<T>(
        call: impl std::future::Future<Output = Result<T, tonic::Status>>,
    ) -> tonic::Status {
        match tokio::time::timeout(std::time::Duration::from_secs(15), call).await {
            Ok(Ok(_)) => tonic::Status::ok(""),
            Ok(Err(status)) => status,
            Err(_) => panic!("a call hung for 15 s"),
        }
    }
    let list = || {
        tokio_stream::iter([ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        }])
    };
    vec![
        (
            "GetHost",
            status(agent.get_host(pb::GetHostRequest::default())).await,
        ),
        (
            "RunProbe",
            status(agent.run_probe(pb::RunProbeRequest::default())).await,
        ),
        (
            "Cancel",
            status(agent.cancel(pb::CancelRequest::default())).await,
        ),
        // All controls off: an admitted call changes nothing on this host.
        (
            "Prepare",
            status(agent.prepare(pb::PrepareRequest::default())).await,
        ),
        (
            "Restore",
            status(agent.restore(pb::RestoreRequest::default())).await,
        ),
        (
            "StartPeer",
            status(agent.start_peer(pb::StartPeerRequest::default())).await,
        ),
        (
            "StopPeer",
            status(agent.stop_peer(pb::StopPeerRequest::default())).await,
        ),
        // An empty command: refused by the handler (INVALID_ARGUMENT) once a caller is let in.
        (
            "StartServer",
            status(agent.start_server(pb::StartServerRequest::default())).await,
        ),
        (
            "StopServer",
            status(agent.stop_server(pb::StopServerRequest::default())).await,
        ),
        // No name: refused by the handler (INVALID_ARGUMENT) once a caller is let in.
        (
            "SampleServer",
            status(agent.sample_server(pb::SampleServerRequest::default())).await,
        ),
        (
            "health.Check",
            status(health.check(tonic_health::pb::HealthCheckRequest::default())).await,
        ),
        (
            "reflection.ServerReflectionInfo",
            status(reflection.server_reflection_info(list())).await,
        ),
    ]
}

/// The call reached the agent's handler: whatever the answer, authentication let it through.
fn admitted(status: &tonic::Status) -> bool {
    use tonic::Code;
    matches!(
        status.code(),
        Code::Ok | Code::InvalidArgument | Code::FailedPrecondition | Code::NotFound
    )
}

#[tokio::test]
async fn every_rpc_refuses_every_kind_of_stranger() {
    use tonic::transport::{Certificate, ClientTlsConfig, Identity};

    let dir = tempfile::tempdir().unwrap();
    let fleet = Fleet {
        dir: dir.path().join("fleet"),
    };
    let other = Fleet {
        dir: dir.path().join("other"),
    };
    for f in [&fleet, &other] {
        certs(&f.dir, &["init"]);
        certs(&f.dir, &["issue", "--agent", "a1", "--san", "127.0.0.1"]);
        certs(&f.dir, &["issue", "--controller", "ci"]);
    }
    let long_ago = time::OffsetDateTime::now_utc() - time::Duration::days(40);
    issue(&fleet.dir, Role::Controller, "old", &[], 1, long_ago).unwrap();
    let read = |p: PathBuf| std::fs::read_to_string(p).unwrap();
    let trust = || {
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(read(fleet.file("ca.pem"))))
            .domain_name("127.0.0.1")
    };
    let identity = |f: &Fleet, name: &str| {
        Identity::from_pem(
            read(f.file(&format!("controller-{name}.pem"))),
            read(f.file(&format!("controller-{name}.key"))),
        )
    };

    // Mutual TLS.
    let mtls = fleet.agent("a1");
    let addr = mtls.addr.to_string();
    let fleet_controller = Caller {
        what: "the fleet's controller",
        tls: Some(trust().identity(identity(&fleet, "ci"))),
        token: None,
    };
    let strangers = [
        Caller {
            what: "plain gRPC",
            tls: None,
            token: None,
        },
        Caller {
            what: "TLS without a client certificate",
            tls: Some(trust()),
            token: None,
        },
        Caller {
            what: "a certificate from another CA",
            tls: Some(trust().identity(identity(&other, "ci"))),
            token: None,
        },
        Caller {
            what: "an expired certificate",
            tls: Some(trust().identity(identity(&fleet, "old"))),
            token: None,
        },
    ];
    let mut refused = 0;
    for (rpc, status) in call_every_rpc(&addr, &fleet_controller).await {
        assert!(admitted(&status), "mutual TLS, {rpc}: {status:?}");
    }
    for caller in &strangers {
        let mut codes = std::collections::BTreeSet::new();
        for (rpc, status) in call_every_rpc(&addr, caller).await {
            assert!(
                !admitted(&status),
                "{}: {rpc} got in: {status:?}",
                caller.what
            );
            codes.insert(format!("{:?}", status.code()));
            refused += 1;
        }
        eprintln!("{}: 9 of 9 refused ({codes:?})", caller.what);
    }

    // Token mode.
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "4f1c0e2b9a7d4e3f8b6a5c2d1e0f9a8b\n").unwrap();
    let mut command = agent_command();
    command
        .arg("--tls-cert")
        .arg(fleet.file("agent-a1.pem"))
        .arg("--tls-key")
        .arg(fleet.file("agent-a1.key"))
        .arg("--token-file")
        .arg(&token_file);
    let token_agent = AgentProcess::start_with(command);
    let addr = token_agent.addr.to_string();
    let holder = Caller {
        what: "the token's holder",
        tls: Some(trust()),
        token: Some("4f1c0e2b9a7d4e3f8b6a5c2d1e0f9a8b"),
    };
    for (rpc, status) in call_every_rpc(&addr, &holder).await {
        assert!(admitted(&status), "token mode, {rpc}: {status:?}");
    }
    for caller in [
        Caller {
            what: "no token",
            tls: Some(trust()),
            token: None,
        },
        Caller {
            what: "a wrong token",
            tls: Some(trust()),
            token: Some("00000000000000000000000000000000"),
        },
    ] {
        for (rpc, status) in call_every_rpc(&addr, &caller).await {
            assert_eq!(
                status.code(),
                tonic::Code::Unauthenticated,
                "{}: {rpc}: {status:?}",
                caller.what
            );
            refused += 1;
        }
    }
    // 6 kinds of stranger, 12 RPCs each.
    assert_eq!(refused, 72);
    eprintln!("refused {refused} calls: 6 kinds of stranger x 12 RPCs");
}
