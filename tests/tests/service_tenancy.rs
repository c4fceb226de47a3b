//! `quietbench serve` shared by clients who must not reach each other, end to end: real service
//! processes over mutual TLS with a client certificate per tenant (`quietbench certs`), real
//! runs on the service's machine, the gRPC API as a client. What is checked: a client sees and
//! acts on its own runs only, and another's run reads exactly as no run (NOT_FOUND); an admin
//! sees every run; ids are whole; exec is refused by the built-in policy and never runs, and a
//! policy file lets one client run it; `env.*` values reach the command and nowhere else (not
//! the listing, the reports, the events, the state directory nor the store). And, in-process
//! with the state directory refusing every write as a full disk would, that the reads go on.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pb::controller_client::ControllerClient;
use pb::controller_server::Controller;
use quietbench_proto::v1 as pb;
use quietbench_service::api::ControllerApi;
use quietbench_service::auth::Caller;
use quietbench_service::policy::Policy;
use quietbench_service::retention::Retention;
use quietbench_service::runs::{ChildSettings, Runs};
use quietbench_service::state::{Stage, StateDir, Submission};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Request};

/// A CA, a service certificate for 127.0.0.1, and client certificates `a`, `b` and `ops`.
struct Certs {
    dir: PathBuf,
}

impl Certs {
    fn make(dir: &Path) -> Self {
        let dir = dir.join("certs");
        common::issue_certs(
            &dir,
            &[
                &["--service", "svc", "--san", "127.0.0.1"],
                &["--client", "a"],
                &["--client", "b"],
                &["--client", "ops"],
            ],
        );
        Self { dir }
    }

    fn file(&self, name: &str) -> String {
        self.dir.join(name).to_str().unwrap().to_string()
    }
}

/// A running `quietbench serve` over mutual TLS: the service's certificate from `certs`, its
/// clients' from the same CA, and `policy` when given.
fn start_service(certs: &Certs, db: &Path, state: &Path, policy: Option<&Path>) -> Service {
    let (cert, key, ca) = (
        certs.file("service-svc.pem"),
        certs.file("service-svc.key"),
        certs.file("ca.pem"),
    );
    let mut extra = vec!["--tls-cert", &cert, "--tls-key", &key, "--client-ca", &ca];
    let policy = policy.map(|p| p.to_str().unwrap().to_string());
    if let Some(policy) = &policy {
        extra.extend(["--policy", policy.as_str()]);
    }
    Service::start(db, state, &extra)
}

use common::ServiceProcess as Service;

/// The gRPC side of a service under test.
trait ServiceClient {
    async fn client(&self, certs: &Certs, name: &str) -> ControllerClient<Channel>;
}

impl ServiceClient for Service {
    /// A gRPC client of the service with client certificate `name`.
    async fn client(&self, certs: &Certs, name: &str) -> ControllerClient<Channel> {
        let read = |f: &str| std::fs::read_to_string(certs.dir.join(f)).unwrap();
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(read("ca.pem")))
            .identity(Identity::from_pem(
                read(&format!("client-{name}.pem")),
                read(&format!("client-{name}.key")),
            ));
        let channel = Endpoint::from_shared(format!("https://{}", self.address))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await
            .unwrap();
        ControllerClient::new(channel)
    }
}

fn local_run(probes: &[&str], params: &[(&str, &str)], rounds: u32) -> pb::SubmitRunRequest {
    pb::SubmitRunRequest {
        what: Some(pb::submit_run_request::What::Options(pb::RunOptions {
            local: true,
            probes: probes.iter().map(|p| p.to_string()).collect(),
            params: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            rounds,
            warmup: Some(0),
            duration_ms: 300,
            ..Default::default()
        })),
    }
}

async fn submit(client: &mut ControllerClient<Channel>, request: pb::SubmitRunRequest) -> String {
    client
        .submit_run(request)
        .await
        .unwrap()
        .into_inner()
        .run_id
}

/// Every event of a run until its end (or the stream's).
async fn events(client: &mut ControllerClient<Channel>, run_id: &str) -> Vec<pb::RunEvent> {
    let mut stream = client
        .watch_run(pb::WatchRunRequest {
            run_id: run_id.into(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut all = Vec::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(120), stream.message())
        .await
        .expect("the run ends within two minutes")
        .unwrap()
    {
        all.push(event);
    }
    all
}

fn finished(events: &[pb::RunEvent]) -> pb::RunFinished {
    events
        .iter()
        .find_map(|e| match &e.event {
            Some(pb::run_event::Event::Finished(f)) => Some(f.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no end among {events:?}"))
}

async fn listed(client: &mut ControllerClient<Channel>) -> pb::ListRunsResponse {
    client
        .list_runs(pb::ListRunsRequest { limit: 100 })
        .await
        .unwrap()
        .into_inner()
}

fn ids(list: &pb::ListRunsResponse) -> Vec<String> {
    list.runs.iter().map(|r| r.run_id.clone()).collect()
}

async fn report(
    client: &mut ControllerClient<Channel>,
    run_id: &str,
    format: pb::ReportFormat,
) -> Result<String, tonic::Status> {
    client
        .get_run_report(pb::GetRunReportRequest {
            run_id: run_id.into(),
            format: format as i32,
        })
        .await
        .map(|r| r.into_inner().content)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sees_and_acts_on_its_own_runs_only_and_an_admin_on_every_run() {
    let dir = tempfile::tempdir().unwrap();
    let certs = Certs::make(dir.path());
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "admins = [\"client ops\"]\n").unwrap();
    let service = start_service(
        &certs,
        &dir.path().join("store.sqlite3"),
        &dir.path().join("state"),
        Some(&policy),
    );
    let (mut a, mut b, mut ops) = (
        service.client(&certs, "a").await,
        service.client(&certs, "b").await,
        service.client(&certs, "ops").await,
    );
    // Long enough (3 rounds of 0.3 s) to be queued or measuring while b tries it.
    let a_run = submit(&mut a, local_run(&["cpu.primes"], &[], 3)).await;
    let nobody = "4f2a9c1e-0b6d-4e8a-9f3c-2d7b5a1e6c40";

    // b: a's run is nowhere, and reads exactly as a run that does not exist.
    assert!(!ids(&listed(&mut b).await).contains(&a_run));
    assert!(!listed(&mut b).await.text.contains(&a_run));
    let as_missing = |status: tonic::Status, id: &str| {
        assert_eq!(status.code(), Code::NotFound, "{status:?}");
        status.message().replace(id, "ID")
    };
    let missing = as_missing(
        report(&mut b, nobody, pb::ReportFormat::Json)
            .await
            .unwrap_err(),
        nobody,
    );
    let refusals = [
        report(&mut b, &a_run, pb::ReportFormat::Json)
            .await
            .unwrap_err(),
        b.watch_run(pb::WatchRunRequest {
            run_id: a_run.clone(),
        })
        .await
        .map(|_| ())
        .unwrap_err(),
        b.cancel_run(pb::CancelRunRequest {
            run_id: a_run.clone(),
        })
        .await
        .map(|_| ())
        .unwrap_err(),
        b.compare_runs(pb::CompareRunsRequest {
            baseline: a_run.clone(),
            candidate: a_run.clone(),
            ..Default::default()
        })
        .await
        .map(|_| ())
        .unwrap_err(),
    ];
    for refusal in refusals {
        assert_eq!(as_missing(refusal, &a_run), missing);
    }
    // A prefix is no way in: refused for what it is, whoever's run it starts.
    let prefix = b
        .cancel_run(pb::CancelRunRequest {
            run_id: a_run[..4].to_string(),
        })
        .await
        .unwrap_err();
    assert_eq!(prefix.code(), Code::InvalidArgument);
    assert!(
        prefix.message().contains("whole id"),
        "{}",
        prefix.message()
    );
    // Garbage collection deletes anyone's cloud resources: admins only.
    let gc = b
        .collect_garbage(pb::CollectGarbageRequest::default())
        .await
        .unwrap_err();
    assert_eq!(gc.code(), Code::PermissionDenied);
    assert!(
        gc.message().contains("client b is not one"),
        "{}",
        gc.message()
    );

    // b's cancel did nothing: a's run completes, and a reads it.
    let end = finished(&events(&mut a, &a_run).await);
    assert_eq!(
        (end.status.as_str(), end.exit_code),
        ("complete", 0),
        "{end:?}"
    );
    let json = report(&mut a, &a_run, pb::ReportFormat::Json)
        .await
        .unwrap();
    assert!(json.contains(&a_run));

    // b's own run; each sees its own, ops both, with their owners.
    let b_run = submit(&mut b, local_run(&["cpu.primes"], &[], 1)).await;
    assert_eq!(finished(&events(&mut b, &b_run).await).exit_code, 0);
    let of_a = listed(&mut a).await;
    assert_eq!(ids(&of_a), [a_run.as_str()]);
    assert!(
        of_a.text.contains(&a_run) && !of_a.text.contains(&b_run),
        "{}",
        of_a.text
    );
    assert_eq!(ids(&listed(&mut b).await), [b_run.as_str()]);
    let all = listed(&mut ops).await;
    for (run, owner) in [(&a_run, "client a"), (&b_run, "client b")] {
        let row = all.runs.iter().find(|r| &r.run_id == run).unwrap();
        assert_eq!(row.owner, owner);
        assert!(all.text.contains(run.as_str()), "{}", all.text);
    }
    report(&mut ops, &b_run, pb::ReportFormat::Text)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_is_refused_by_default_and_a_policy_lets_one_client_run_it_keeping_env_values_private()
{
    let dir = tempfile::tempdir().unwrap();
    let certs = Certs::make(dir.path());
    let (db, state) = (dir.path().join("store.sqlite3"), dir.path().join("state"));
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());

    // The built-in policy: no exec for anyone, and nothing of the refused run happens.
    {
        let service = start_service(&certs, &db, &state, None);
        let mut a = service.client(&certs, "a").await;
        let refused = a
            .submit_run(local_run(
                &["exec"],
                &[("cmd", &touch), ("shell", "true")],
                1,
            ))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::PermissionDenied);
        assert!(
            refused.message().contains(
                "does not let client a run commands (the exec probe, or the http or tcp \
                 probe's server): exec = false in the built-in policy"
            ),
            "{}",
            refused.message()
        );
        // As a control too.
        let control = pb::SubmitRunRequest {
            what: Some(pb::submit_run_request::What::Options(pb::RunOptions {
                local: true,
                control: format!("exec shell=true cmd='{touch}'"),
                ..Default::default()
            })),
        };
        assert_eq!(
            a.submit_run(control).await.unwrap_err().code(),
            Code::PermissionDenied
        );
        assert!(ids(&listed(&mut a).await).is_empty());
        std::thread::sleep(Duration::from_millis(500));
        assert!(!marker.exists(), "a refused exec ran its command");
    }

    // A policy that lets a run commands: the value reaches the command (a trial fails when
    // its command does), and nothing the service keeps or answers holds it.
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "admins = [\"client ops\"]\n\n[caller.\"client a\"]\nexec = true\n",
    )
    .unwrap();
    let service = start_service(&certs, &db, &state, Some(&policy));
    let (mut a, mut b) = (
        service.client(&certs, "a").await,
        service.client(&certs, "b").await,
    );
    let secret = format!("s3cret-{}", std::process::id());
    // What the command got, kept outside the folders searched for the value below (the command
    // line itself must not hold the value: it is a parameter, stored and reported as such).
    let outside = tempfile::tempdir().unwrap();
    let got = outside.path().join("got");
    let print = format!("printf %s \"$API_TOKEN\" > {}", got.display());
    let run = local_run(
        &["exec"],
        &[
            ("cmd", &print),
            ("shell", "true"),
            ("env.API_TOKEN", &secret),
        ],
        1,
    );
    let refused = b.submit_run(run.clone()).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied);
    assert!(
        refused
            .message()
            .contains("exec = false in the built-in policy (absent from"),
        "{}",
        refused.message()
    );
    let run_id = submit(&mut a, run).await;
    let seen = events(&mut a, &run_id).await;
    let end = finished(&seen);
    assert_eq!(
        (end.status.as_str(), end.exit_code),
        ("complete", 0),
        "{seen:?}"
    );
    assert_eq!(std::fs::read_to_string(&got).unwrap(), secret);

    let mut answers = format!("{seen:?}{:?}", listed(&mut a).await);
    for format in [
        pb::ReportFormat::Json,
        pb::ReportFormat::Text,
        pb::ReportFormat::Html,
    ] {
        answers.push_str(&report(&mut a, &run_id, format).await.unwrap());
    }
    answers.push_str(&format!("{:?}", events(&mut a, &run_id).await));
    assert!(answers.contains(&run_id));
    assert!(!answers.contains(&secret), "the value is in an answer");
    let record =
        std::fs::read_to_string(state.join("runs").join(&run_id).join("submission.json")).unwrap();
    assert!(record.contains("\"API_TOKEN\": \"<redacted>\""), "{record}");
    drop(service);
    for file in files_under(dir.path()) {
        let bytes = std::fs::read(&file).unwrap_or_default();
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "the value is written in {}",
            file.display()
        );
    }
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files
}

fn as_caller<T>(id: &str, message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.extensions_mut().insert(Caller { id: id.into() });
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_go_on_when_the_state_directory_cannot_be_written() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.sqlite3");
    // A stored run, and the service's record of it, finished.
    let json = dir.path().join("run.json");
    common::succeed(
        common::quietbench()
            .args(["run", "--local", "--probe", "cpu.primes", "--rounds", "1"])
            .args(["--duration", "0.2", "--warmup", "0", "--db"])
            .arg(&db)
            .arg("--json")
            .arg(&json),
    );
    let stored: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let run_id = stored["run_id"].as_str().unwrap().to_string();
    let state = StateDir::open(&dir.path().join("state")).unwrap();
    let mut submission = Submission::new(run_id.clone(), vec!["local".into()]);
    submission.owner = Some("client a".into());
    submission.starts = 1;
    submission.finish(Stage::Finished {
        status: "complete".into(),
        exit_code: 0,
        error: None,
    });
    state.save(&submission).unwrap();
    std::fs::write(state.run_dir(&run_id).join("stdout"), "the table\n").unwrap();

    let runs = Runs::load(
        state.clone(),
        ChildSettings {
            exe: common::quietbench_bin(),
            db: db.clone(),
            agent_tls_args: Vec::new(),
        },
        1,
        Retention::default(),
    )
    .unwrap();
    let policy = Policy::parse("admins = [\"client ops\"]\n", "policy.toml", 1000).unwrap();
    let api = ControllerApi::new(runs, Arc::new(policy));

    // The disk is full from here on.
    state.refuse_writes(true);
    for caller in ["client a", "client ops"] {
        let list = api
            .list_runs(as_caller(caller, pb::ListRunsRequest { limit: 10 }))
            .await
            .unwrap_or_else(|s| panic!("{caller}: ListRuns: {s:?}"))
            .into_inner();
        assert!(list.runs.iter().any(|r| r.run_id == run_id), "{list:?}");
        assert!(list.text.contains(&run_id), "{}", list.text);
        for format in [
            pb::ReportFormat::Json,
            pb::ReportFormat::Text,
            pb::ReportFormat::Html,
        ] {
            let content = api
                .get_run_report(as_caller(
                    caller,
                    pb::GetRunReportRequest {
                        run_id: run_id.clone(),
                        format: format as i32,
                    },
                ))
                .await
                .unwrap_or_else(|s| panic!("{caller}: {format:?} report: {s:?}"))
                .into_inner()
                .content;
            assert!(content.contains(&run_id[..8]), "{format:?}: {content}");
        }
    }
    // The JSON report is the CLI's, byte for byte.
    let shown = dir.path().join("shown.json");
    common::succeed(
        common::quietbench()
            .args(["show", &run_id, "--db"])
            .arg(&db)
            .arg("--json")
            .arg(&shown),
    );
    let from_service = api
        .get_run_report(as_caller(
            "client a",
            pb::GetRunReportRequest {
                run_id: run_id.clone(),
                format: pb::ReportFormat::Json as i32,
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .content;
    assert_eq!(from_service, std::fs::read_to_string(&shown).unwrap());

    let mut stream = api
        .watch_run(as_caller(
            "client a",
            pb::WatchRunRequest {
                run_id: run_id.clone(),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    let start = Instant::now();
    let mut last = None;
    while let Some(event) = tokio_stream::StreamExt::next(&mut stream).await {
        last = Some(event.unwrap().event.unwrap());
        assert!(start.elapsed() < Duration::from_secs(30));
    }
    assert!(
        matches!(&last, Some(pb::run_event::Event::Finished(f)) if f.status == "complete"),
        "{last:?}"
    );

    // Writing is what fails, and says why.
    let refused = api
        .submit_run(as_caller("client a", local_run(&["cpu.primes"], &[], 1)))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert!(
        refused.message().contains("No space left on device"),
        "{}",
        refused.message()
    );
}
