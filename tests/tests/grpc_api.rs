//! The agent's gRPC API as other tooling sees it: reflection, health, and the RunProbe/Cancel
//! contract, against a real agent process.

mod common;

use std::time::{Duration, Instant};

use quietbench_proto::v1 as pb;
use quietbench_proto::v1::agent_service_client::AgentServiceClient;
use tokio_stream::StreamExt;
use tonic::Code;
use tonic::transport::Channel;

async fn channel(agent: &common::AgentProcess) -> Channel {
    Channel::from_shared(agent.endpoint())
        .unwrap()
        .connect()
        .await
        .expect("connect to the agent")
}

async fn client(agent: &common::AgentProcess) -> AgentServiceClient<Channel> {
    AgentServiceClient::new(channel(agent).await)
}

fn request(probe: &str, duration_ms: u64) -> pb::RunProbeRequest {
    pb::RunProbeRequest {
        probe: probe.into(),
        duration_ms,
        // At most the trial: agents refuse a longer interval.
        interval_ms: duration_ms.min(100),
        ..Default::default()
    }
}

#[tokio::test]
async fn reflection_lists_the_agent_and_health_services() {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let agent = common::AgentProcess::start();
    let mut reflection = ServerReflectionClient::new(channel(&agent).await);
    let requests = tokio_stream::iter([ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    }]);
    let mut responses = reflection
        .server_reflection_info(requests)
        .await
        .unwrap()
        .into_inner();
    let response = responses.next().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        panic!("unexpected reflection answer: {response:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&pb::AGENT_SERVICE_NAME.to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"grpc.health.v1.Health".to_string()),
        "{names:?}"
    );
    // The controller service shares the proto package, not the agent's port.
    assert!(
        !names.contains(&pb::CONTROLLER_SERVICE_NAME.to_string()),
        "{names:?}"
    );

    let mut health = tonic_health::pb::health_client::HealthClient::new(channel(&agent).await);
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: pb::AGENT_SERVICE_NAME.into(),
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

/// Reflection as a stock non-Rust client sees it: Python's grpcio-reflection speaks only
/// v1alpha (as many tools still do), lists the services, resolves the agent's methods from the
/// descriptors it is sent, and calls GetHost with message classes built from them alone.
/// Fails, rather than skips, without python3 or its packages: .ci/run installs them.
#[test]
fn python_reflection_v1alpha_resolves_the_agent_and_calls_it() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("python")
        .join("reflection_v1alpha.py");
    let agent = common::AgentProcess::start();
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg(agent.addr.to_string())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run python3 ({e}): install it, then `pip install grpcio grpcio-reflection`"
            )
        });
    assert!(
        out.status.success(),
        "{} failed ({}): {}",
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    let services = seen["services"].as_array().unwrap();
    for name in [
        pb::AGENT_SERVICE_NAME,
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    ] {
        assert!(
            services.iter().any(|s| s == name),
            "{name} not in {services:?}"
        );
    }
    let methods = seen["methods"].as_object().unwrap();
    let mut names: Vec<&str> = methods.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "Cancel",
            "GetHost",
            "Prepare",
            "Restore",
            "RunProbe",
            "SampleServer",
            "StartPeer",
            "StartServer",
            "StopPeer",
            "StopServer"
        ]
    );
    assert_eq!(
        methods["RunProbe"],
        serde_json::json!({
            "input": "quietbench.v1.RunProbeRequest",
            "output": "quietbench.v1.ProbeEvent",
            "server_streaming": true,
            "client_streaming": false,
        })
    );
    assert_eq!(
        methods["GetHost"]["output"],
        "quietbench.v1.GetHostResponse"
    );
    assert_eq!(seen["get_host"]["agent_version"], env!("CARGO_PKG_VERSION"));
    let live = quietbench_host::read_fingerprint(&quietbench_host::HostRoot::live());
    assert_eq!(seen["get_host"]["logical_cpus"], live.online_cpus.len());
}

#[tokio::test]
async fn get_host_describes_this_machine() {
    let agent = common::AgentProcess::start();
    let host = client(&agent)
        .await
        .get_host(pb::GetHostRequest {})
        .await
        .unwrap()
        .into_inner();
    let fp = host.fingerprint.unwrap();
    let live = quietbench_host::read_fingerprint(&quietbench_host::HostRoot::live());
    assert_eq!(fp.online_cpus, live.online_cpus);
    assert_eq!(fp.logical_cpus as usize, live.online_cpus.len());
    assert_eq!(fp.cpu.unwrap().model_name, live.cpu.unwrap().model_name);
    assert_eq!(host.agent_version, env!("CARGO_PKG_VERSION"));
}

/// A 500 ms trial reported every 100 ms has at most 5 intervals; fewer when the probe thread is
/// held up across a boundary (a loaded machine), so the count is checked against the result's
/// own, not against 5.
#[tokio::test]
async fn a_trial_streams_accepted_placement_intervals_then_result() {
    let agent = common::AgentProcess::start();
    let mut stream = client(&agent)
        .await
        .run_probe(request("cpu.primes", 500))
        .await
        .unwrap()
        .into_inner();
    let mut kinds = Vec::new();
    let mut reported = None;
    while let Some(event) = stream.next().await {
        let event = event.unwrap().event.unwrap();
        kinds.push(match &event {
            pb::probe_event::Event::Accepted(_) => "accepted",
            pb::probe_event::Event::Placement(p) => {
                assert_eq!(p.threads.len(), 1);
                assert_eq!(p.threads[0].affinity_cpus, vec![p.threads[0].planned_cpu]);
                "placement"
            }
            pb::probe_event::Event::Interval(i) => {
                let hist = i.metrics.iter().find_map(|m| m.histogram.as_ref()).unwrap();
                assert!(hist.total_count > 0);
                assert_eq!(hist.dropped_count, 0);
                "interval"
            }
            pb::probe_event::Event::Result(r) => {
                assert!(!r.cancelled);
                reported = Some(r.intervals);
                "result"
            }
            pb::probe_event::Event::Error(e) => panic!("trial failed: {}", e.message),
        });
    }
    assert_eq!(kinds.first(), Some(&"accepted"));
    assert_eq!(kinds.get(1), Some(&"placement"));
    assert_eq!(kinds.last(), Some(&"result"));
    let intervals = kinds.iter().filter(|k| **k == "interval").count();
    assert!((1..=5).contains(&intervals), "{intervals} intervals");
    assert_eq!(reported, Some(intervals as u32));
}

#[tokio::test]
async fn bad_requests_are_refused_with_reasons() {
    let agent = common::AgentProcess::start();
    let mut c = client(&agent).await;
    let cases = [
        (request("cpu.nope", 100), "available probes: cpu.primes"),
        (request("cpu.primes", 0), "duration_ms 0 is out of range"),
        (request("cpu.primes", 4_000_000), "one hour"),
        (
            pb::RunProbeRequest {
                interval_ms: 1,
                ..request("cpu.primes", 100)
            },
            "too short",
        ),
        (
            pb::RunProbeRequest {
                cpus: vec![4095],
                ..request("cpu.primes", 100)
            },
            "CPU 4095 is not available",
        ),
        (
            pb::RunProbeRequest {
                unpinned: true,
                cpus: vec![0],
                ..request("cpu.primes", 100)
            },
            "contradict",
        ),
        (
            pb::RunProbeRequest {
                params: [("threads".to_string(), "zero".to_string())].into(),
                ..request("cpu.primes", 100)
            },
            "threads=zero is invalid",
        ),
    ];
    // Bounded inputs: each bound names its field.
    let many: std::collections::HashMap<String, String> = (0..65)
        .map(|i| (format!("p{i}"), "1".to_string()))
        .collect();
    let bounded = [
        (
            pb::RunProbeRequest {
                params: many,
                ..request("cpu.primes", 100)
            },
            "params: 65 entries, at most 64",
        ),
        (
            pb::RunProbeRequest {
                params: [("cmd".to_string(), "x".repeat(17 * 1024))].into(),
                ..request("exec", 100)
            },
            "params.cmd: 17408 bytes, at most 16384",
        ),
        (
            pb::RunProbeRequest {
                cpus: vec![1; 5000],
                ..request("cpu.primes", 100)
            },
            "cpus: 5000 entries, at most 4096",
        ),
        (request(&"p".repeat(100), 100), "probe: 100 bytes"),
        (
            pb::RunProbeRequest {
                trial_id: "t".repeat(129),
                ..request("cpu.primes", 100)
            },
            "trial_id is longer than 128 bytes",
        ),
    ];
    for (req, expected) in cases.into_iter().chain(bounded) {
        let status = c.run_probe(req).await.expect_err("refused");
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(
            status.message().contains(expected),
            "{:?} lacks {expected:?}",
            status.message()
        );
    }
    let status = c
        .prepare(pb::PrepareRequest {
            probe_cpus: vec![1; 5000],
            ..Default::default()
        })
        .await
        .expect_err("refused");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().contains("probe_cpus: 5000 entries"),
        "{status:?}"
    );
    let status = c
        .start_peer(pb::StartPeerRequest {
            bind_address: "not an address".into(),
            same_machine: false,
            secret: "00".repeat(16),
        })
        .await
        .expect_err("refused");
    assert!(status.message().contains("bind_address"), "{status:?}");
    // A peer server without the trial's secret would serve anyone: refused.
    let status = c
        .start_peer(pb::StartPeerRequest {
            bind_address: "127.0.0.1".into(),
            same_machine: true,
            secret: String::new(),
        })
        .await
        .expect_err("refused");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status
            .message()
            .contains("secret: the peer secret must be 32 hex digits"),
        "{status:?}"
    );
    // A request over the transport's limit is refused by tonic itself. The agent's limit
    // (MAX_REQUEST_BYTES in crates/quietbench-agent/src/limits.rs, which this crate cannot
    // reach) is 1 MiB plus an `http` request file's 1 MiB: 4 MiB is clearly over it.
    let status = c
        .run_probe(pb::RunProbeRequest {
            trial_id: "t".repeat(4 << 20),
            ..request("cpu.primes", 100)
        })
        .await
        .expect_err("refused");
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    assert!(status.message().contains("too large"), "{status:?}");
    // And the agent serves the next request normally.
    c.get_host(pb::GetHostRequest {})
        .await
        .expect("the agent still answers");
}

/// `check_only` checks a request as a trial would be checked and runs nothing: the controller
/// asks it of a load agent before it starts a server, so that a bad load parameter is refused
/// before the server's start and readiness wait.
#[tokio::test]
async fn check_only_refuses_what_a_trial_would_and_runs_nothing() {
    let agent = common::AgentProcess::start();
    let mut c = client(&agent).await;
    let http = |extra: &[(&str, &str)]| pb::RunProbeRequest {
        params: [("target", "127.0.0.1:1"), ("rate", "100")]
            .iter()
            .chain(extra)
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        check_only: true,
        ..request("http", 60_000)
    };
    let status = c
        .run_probe(http(&[("http2", "maybe")]))
        .await
        .expect_err("refused");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("http2=maybe"), "{status:?}");
    // A good request: a stream that ends with no event.
    let mut events = c.run_probe(http(&[])).await.unwrap().into_inner();
    assert!(events.next().await.is_none(), "check_only ran something");
    // The slot was never taken: a real trial runs at once.
    let mut stream = c
        .run_probe(request("cpu.primes", 100))
        .await
        .expect("the slot is free")
        .into_inner();
    let mut result = false;
    while let Some(event) = stream.next().await {
        result |= matches!(
            event.unwrap().event,
            Some(pb::probe_event::Event::Result(_))
        );
    }
    assert!(result, "the trial after the checks ran");
}

#[tokio::test]
async fn one_probe_at_a_time_and_cancel_stops_it_promptly() {
    let agent = common::AgentProcess::start();
    let mut c = client(&agent).await;
    let long = pb::RunProbeRequest {
        trial_id: "long-one".into(),
        ..request("cpu.primes", 60_000)
    };
    let mut stream = c.run_probe(long).await.unwrap().into_inner();
    // Wait for the first interval: the trial is measuring.
    loop {
        if let pb::probe_event::Event::Interval(_) =
            stream.next().await.unwrap().unwrap().event.unwrap()
        {
            break;
        }
    }
    let busy = c
        .run_probe(request("cpu.primes", 100))
        .await
        .expect_err("second trial refused");
    assert_eq!(busy.code(), Code::ResourceExhausted);
    assert!(busy.message().contains("long-one"), "{}", busy.message());

    let wrong = c
        .cancel(pb::CancelRequest {
            trial_id: "other".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!wrong.cancelled);
    let asked = Instant::now();
    let right = c
        .cancel(pb::CancelRequest {
            trial_id: "long-one".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(right.cancelled);
    let mut result = None;
    while let Some(event) = stream.next().await {
        if let pb::probe_event::Event::Result(r) = event.unwrap().event.unwrap() {
            result = Some(r);
        }
    }
    // Stopped by the cancel, not by running out: it measured less than its 60 s. How soon after
    // the cancel depends on the machine's load, so that is not timed.
    let result = result.expect("a result after cancel");
    assert!(result.cancelled);
    let measured_ns = result.end_unix_ns.saturating_sub(result.start_unix_ns);
    assert!(
        measured_ns < 60_000_000_000,
        "the trial ran its full {measured_ns} ns; the cancel was asked {:?} ago",
        asked.elapsed()
    );

    // The slot is free again.
    let mut again = c
        .run_probe(request("cpu.primes", 100))
        .await
        .unwrap()
        .into_inner();
    while let Some(event) = again.next().await {
        event.unwrap();
    }
}

#[tokio::test]
async fn dropping_the_stream_cancels_the_trial() {
    let agent = common::AgentProcess::start();
    let mut c = client(&agent).await;
    let mut stream = c
        .run_probe(request("cpu.primes", 60_000))
        .await
        .unwrap()
        .into_inner();
    stream.next().await.unwrap().unwrap();
    drop(stream);
    // The agent notices at its next send (an interval, 100 ms) and frees the slot. On a loaded
    // machine that can take longer; the abandoned trial itself would hold the agent for 60 s,
    // so a slot free within 30 s proves the drop cancelled it.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match c.run_probe(request("cpu.primes", 50)).await {
            Ok(s) => {
                let mut s = s.into_inner();
                while let Some(e) = s.next().await {
                    e.unwrap();
                }
                break;
            }
            Err(status)
                if status.code() == Code::ResourceExhausted && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(status) => panic!("the abandoned trial still holds the agent: {status:?}"),
        }
    }
}

#[tokio::test]
async fn idle_connections_are_pushed_out_and_the_agent_serves_on() {
    use std::io::Read;
    let agent = common::AgentProcess::start();
    // 64 idle connections (the old cap, which they filled, locking every controller out)...
    let mut held: Vec<std::net::TcpStream> = (0..64)
        .map(|_| std::net::TcpStream::connect(agent.addr).unwrap())
        .collect();
    // ... and a controller is served while they are open: the unauthenticated ones share a
    // small budget (quietbench_proto::gate) whose oldest are closed to make room.
    let mut c = client(&agent).await;
    c.get_host(pb::GetHostRequest {})
        .await
        .expect("a controller is served while 64 idle connections are open");
    // The oldest idle one was closed: after the server's HTTP/2 greeting, end of stream, not
    // a hang.
    let first = &mut held[0];
    first
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 256];
    loop {
        match first.read(&mut buf) {
            Ok(0) => break,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Ok(_) => continue,
            other => panic!("the oldest idle connection was kept: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_trial_whose_controller_hangs_up_is_cancelled() {
    let agent = common::AgentProcess::start();
    {
        let mut c = client(&agent).await;
        // One interval as long as the trial: the agent has nothing to send (and so no failed
        // send to notice the hang-up by) until the end.
        let long = pb::RunProbeRequest {
            trial_id: "orphan".into(),
            interval_ms: 600_000,
            ..request("cpu.primes", 600_000)
        };
        let mut stream = c.run_probe(long).await.unwrap().into_inner();
        loop {
            if let pb::probe_event::Event::Placement(_) =
                stream.next().await.unwrap().unwrap().event.unwrap()
            {
                break;
            }
        }
        // The stream, the client and its connection go here, as a killed controller's would.
    }
    // A fresh connection gets the agent as soon as the orphan has wound down: long before its
    // 600 s. The bound only keeps a regression from hanging the suite.
    let mut c = client(&agent).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match c.run_probe(request("cpu.primes", 100)).await {
            Ok(_) => break,
            Err(status) => {
                assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                assert!(status.message().contains("orphan"), "{status:?}");
                assert!(
                    Instant::now() < deadline,
                    "the orphaned trial still holds the agent after 60 s"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
