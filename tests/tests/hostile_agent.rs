//! A broken or hostile agent must not crash, hang or fool the controller: a fake agent (the
//! wire contract served in-process by tonic, no agent code) sends each stream the red team
//! found, and the controller must fail the trial quickly, by the agent's name, without holding
//! what it was sent. Each case was once fatal or silent: an OOM kill within seconds (2000
//! histograms that each claim 6.5 MB decoded), an OOM kill within 30 s (endless 1 MiB
//! intervals), a 1-second trial that never ended (endless intervals), p99 below p50
//! (overflowing counts), a foreign trial id or a backwards interval taken as data, NaN values
//! silently dropped, and escape codes from the agent written raw to the terminal.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use quietbench_controller::connection::{AgentConnection, AgentError};
use quietbench_proto::v1 as pb;
use quietbench_proto::v1::agent_service_server::{AgentService, AgentServiceServer};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status};

use pb::probe_event::Event;

/// Generous: every case ends in well under this on a loaded 2-CPU machine; the old controller
/// never ended the endless ones.
const PATIENCE: Duration = Duration::from_secs(30);

/// The hostile CPU model: an escape sequence that retitles the terminal and clears it, and a
/// newline that forges a line of the controller's own.
const EVIL_MODEL: &str = "Evil\x1b]0;owned\x07\x1b[2J CPU\nquietbench: run stored";
const EVIL_MESSAGE: &str = "boom\x1b[8m hidden\r\nquietbench: all trials passed\u{202e}";

/// What the fake agent saw of the controller.
#[derive(Default)]
struct Seen {
    /// The controller dropped the trial's stream (a send failed).
    stream_closed: AtomicBool,
    /// Cancel calls.
    cancels: AtomicU32,
}

/// A fake agent whose trial, chosen by the probe name, is one hostile stream.
#[derive(Clone, Default)]
struct Hostile {
    seen: Arc<Seen>,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn event(e: Event) -> Result<pb::ProbeEvent, Status> {
    Ok(pb::ProbeEvent { event: Some(e) })
}

fn interval(index: u32, start: u64, end: u64, metrics: Vec<pb::Metric>) -> Event {
    Event::Interval(pb::Interval {
        index,
        start_unix_ns: start,
        end_unix_ns: end,
        metrics,
        noise: None,
    })
}

fn rate(value: f64) -> pb::Metric {
    pb::Metric {
        name: "events_per_sec".into(),
        unit: "events/s".into(),
        value: Some(value),
        histogram: None,
    }
}

fn histogram_metric(name: String, h: &Histogram<u64>, total_count: u64) -> pb::Metric {
    let mut bytes = Vec::new();
    V2DeflateSerializer::new().serialize(h, &mut bytes).unwrap();
    pb::Metric {
        name,
        unit: "ns".into(),
        value: Some(1.0),
        histogram: Some(pb::Histogram {
            hdr_v2_deflate: bytes,
            unit: "ns".into(),
            total_count,
            ..Default::default()
        }),
    }
}

fn result(trial_id: &str, start: u64, metrics: Vec<pb::Metric>) -> Event {
    Event::Result(pb::ProbeResult {
        trial_id: trial_id.into(),
        start_unix_ns: start,
        end_unix_ns: now_ns(),
        metrics,
        ..Default::default()
    })
}

impl Hostile {
    /// Streams the trial `probe` names into `tx` until it is done or the controller hangs up.
    async fn play(
        self,
        probe: String,
        trial_id: String,
        tx: mpsc::Sender<Result<pb::ProbeEvent, Status>>,
    ) {
        let send = |e: Event| {
            let tx = tx.clone();
            async move { tx.send(event(e)).await.is_ok() }
        };
        let start = now_ns();
        let accepted_id = if probe == "foreign-id" {
            "someone-elses-trial".to_string()
        } else {
            trial_id.clone()
        };
        let ok = send(Event::Accepted(pb::Accepted {
            trial_id: accepted_id,
            resolved_params: Default::default(),
            accepted_unix_ns: start,
        }))
        .await;
        if !ok {
            return;
        }
        let closed = match probe.as_str() {
            // Well-formed intervals, every 100 ms, for ever.
            "forever" => {
                let mut index = 0;
                let mut from = start;
                loop {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let to = now_ns();
                    if !send(interval(index, from, to, vec![rate(1000.0)])).await {
                        break true;
                    }
                    index += 1;
                    from = to;
                }
            }
            // 1 MiB intervals as fast as the controller takes them (stopping at 200 MiB, so
            // that a controller without a cap fails the test instead of the machine).
            "flood" => {
                let mut noise = pb::NoiseSample::default();
                noise.unavailable.push("x".repeat(1 << 20));
                let mut closed = false;
                for index in 0..200 {
                    let t = now_ns();
                    let mut i = pb::Interval {
                        index,
                        start_unix_ns: t,
                        end_unix_ns: t,
                        metrics: vec![rate(1.0)],
                        noise: Some(noise.clone()),
                    };
                    i.metrics[0].value = Some(1.0);
                    if !send(Event::Interval(i)).await {
                        closed = true;
                        break;
                    }
                }
                if !closed {
                    // Then silence: the old controller called this a stall, 4 s later.
                    tx.closed().await;
                }
                true
            }
            // 2000 histograms of a few dozen bytes, each declaring 4 digits over 1..2^62:
            // 6.5 MB of counts each once decoded, 13 GB in all.
            "huge-histograms" => {
                let mut h = Histogram::<u64>::new_with_bounds(1, 1 << 62, 4).unwrap();
                h.record(1000).unwrap();
                let one = histogram_metric("latency".into(), &h, 1);
                let metrics = (0..2000)
                    .map(|n| pb::Metric {
                        name: format!("latency_{n}"),
                        ..one.clone()
                    })
                    .collect();
                !send(result(&trial_id, start, metrics)).await
            }
            // Counts that sum past u64: hdrhistogram saturates the total, p99 < p50.
            "overflow" => {
                let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
                for v in [10, 20, 30, 40] {
                    h.record_n(v, 1 << 62).unwrap();
                }
                let m = histogram_metric("event_latency".into(), &h, u64::MAX);
                !send(result(&trial_id, start, vec![m])).await
            }
            "nan" => {
                let i = interval(0, start, now_ns(), vec![rate(f64::NAN)]);
                !send(i).await || !send(result(&trial_id, start, vec![rate(1.0)])).await
            }
            "backwards" => {
                let i = interval(0, start + 1_000_000_000, start, vec![rate(1.0)]);
                !send(i).await || !send(result(&trial_id, start, vec![rate(1.0)])).await
            }
            "foreign-id" => !send(result("someone-elses-trial", start, Vec::new())).await,
            "evil-error" => {
                !send(Event::Error(pb::ProbeError {
                    trial_id: trial_id.clone(),
                    message: EVIL_MESSAGE.into(),
                }))
                .await
            }
            other => panic!("no hostile stream named {other}"),
        };
        if closed {
            self.seen.stream_closed.store(true, Ordering::Release);
        }
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::ProbeEvent, Status>> + Send>>;

#[tonic::async_trait]
impl AgentService for Hostile {
    async fn get_host(
        &self,
        _request: Request<pb::GetHostRequest>,
    ) -> Result<Response<pb::GetHostResponse>, Status> {
        Ok(Response::new(pb::GetHostResponse {
            fingerprint: Some(pb::Fingerprint {
                cpu: Some(pb::CpuIdentity {
                    vendor: "Genuine\x1b[31mEvil".into(),
                    model_name: EVIL_MODEL.into(),
                    ..Default::default()
                }),
                logical_cpus: 2,
                hostname: "evil\nhost".into(),
                kernel_release: "6.1\x1b[1A\x1b[2K".into(),
                ..Default::default()
            }),
            agent_version: "hostile".into(),
        }))
    }

    type RunProbeStream = EventStream;

    async fn run_probe(
        &self,
        request: Request<pb::RunProbeRequest>,
    ) -> Result<Response<Self::RunProbeStream>, Status> {
        let req = request.into_inner();
        // As the real agent: a small buffer, so a controller that stops reading stops us.
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(self.clone().play(req.probe, req.trial_id, tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn cancel(
        &self,
        _request: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::CancelResponse>, Status> {
        self.seen.cancels.fetch_add(1, Ordering::AcqRel);
        Ok(Response::new(pb::CancelResponse { cancelled: false }))
    }

    async fn prepare(
        &self,
        _request: Request<pb::PrepareRequest>,
    ) -> Result<Response<pb::PrepareResponse>, Status> {
        Err(Status::unimplemented("hostile"))
    }

    async fn restore(
        &self,
        _request: Request<pb::RestoreRequest>,
    ) -> Result<Response<pb::RestoreResponse>, Status> {
        Ok(Response::new(pb::RestoreResponse::default()))
    }

    async fn start_peer(
        &self,
        _request: Request<pb::StartPeerRequest>,
    ) -> Result<Response<pb::StartPeerResponse>, Status> {
        Err(Status::unimplemented("hostile"))
    }

    async fn stop_peer(
        &self,
        _request: Request<pb::StopPeerRequest>,
    ) -> Result<Response<pb::StopPeerResponse>, Status> {
        Err(Status::unimplemented("hostile"))
    }

    async fn start_server(
        &self,
        _request: Request<pb::StartServerRequest>,
    ) -> Result<Response<pb::StartServerResponse>, Status> {
        Err(Status::unimplemented("hostile"))
    }

    async fn stop_server(
        &self,
        _request: Request<pb::StopServerRequest>,
    ) -> Result<Response<pb::StopServerResponse>, Status> {
        Err(Status::unimplemented("hostile"))
    }

    async fn sample_server(
        &self,
        _request: Request<pb::SampleServerRequest>,
    ) -> Result<Response<pb::StopServerResponse>, Status> {
        Err(Status::unimplemented("hostile"))
    }
}

/// Serves a fake agent on a loopback port of this runtime; its address and what it saw.
async fn serve() -> (String, Arc<Seen>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let agent = Hostile::default();
    let seen = agent.seen.clone();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(AgentServiceServer::new(agent))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    (address, seen)
}

fn request(probe: &str, duration_ms: u64, interval_ms: u64) -> pb::RunProbeRequest {
    pb::RunProbeRequest {
        probe: probe.into(),
        duration_ms,
        interval_ms,
        trial_id: format!("run-{probe}-1"),
        ..Default::default()
    }
}

/// Runs the hostile trial `probe` on a fresh fake agent; the controller's error, its text, how
/// long it took, and what the agent saw.
async fn hostile_trial(
    probe: &str,
    duration_ms: u64,
    interval_ms: u64,
) -> (AgentError, String, Duration, Arc<Seen>) {
    let (address, seen) = serve().await;
    let mut conn = AgentConnection::connect_with(
        &address,
        format!("hostile-agent ({address})"),
        &quietbench_controller::connection::AgentAccess::Fleet(None),
    )
    .await
    .unwrap();
    let started = Instant::now();
    let outcome = tokio::time::timeout(
        PATIENCE,
        conn.run_probe(request(probe, duration_ms, interval_ms), |_| {}),
    )
    .await
    .unwrap_or_else(|_| {
        panic!("{probe}: the controller was still taking the trial after {PATIENCE:?}")
    });
    let took = started.elapsed();
    let err = match outcome {
        Ok(_) => panic!("{probe}: the controller took the hostile trial as a result"),
        Err(err) => err,
    };
    let text = err.to_string();
    eprintln!("{probe} after {took:?}: {text}");
    assert!(
        text.contains(&format!("hostile-agent ({address})")),
        "{probe}: the error names the agent: {text}"
    );
    assert!(took < PATIENCE, "{probe}: took {took:?}");
    (err, text, took, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_intervals_are_cut_off_at_the_trials_deadline() {
    // A 1 s trial: duration 1 s, set-up allowance 3.1 s (interval + 3 s), grace 10 s.
    let (_, text, took, seen) = hostile_trial("forever", 1000, 100).await;
    assert!(
        text.contains("did not finish trial 'run-forever-1' by its deadline"),
        "{text}"
    );
    assert!(text.contains("10 s of grace"), "{text}");
    assert!(
        took >= Duration::from_secs(14),
        "not before the deadline: {took:?}"
    );
    // The stream was cancelled: the agent's next send failed, and Cancel was called.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !seen.stream_closed.load(Ordering::Acquire) {
        assert!(Instant::now() < deadline, "the agent's stream stayed open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(seen.cancels.load(Ordering::Acquire), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_big_intervals_stops_at_the_interval_cap() {
    let (_, text, took, seen) = hostile_trial("flood", 1000, 1000).await;
    // 1 s + 4 s + 10 s fit 15 intervals of 1 s, and 2 partial ones.
    assert!(text.contains("sent more than a trial may hold"), "{text}");
    assert!(text.contains("more than 17 intervals"), "{text}");
    assert!(
        took < Duration::from_secs(15),
        "refused as it came, not at the deadline: {took:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while !seen.stream_closed.load(Ordering::Acquire) {
        assert!(Instant::now() < deadline, "the agent's stream stayed open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histograms_that_would_decode_huge_are_refused_before_decoding() {
    let (_, text, _, _) = hostile_trial("huge-histograms", 1000, 1000).await;
    assert!(text.contains("sent more than a trial may hold"), "{text}");
    assert!(
        text.contains("metric latency_0: the histogram is refused: the header's range (1 to 4611686018427387904, 4 digits) needs 6553600 bytes of counts"),
        "{text}"
    );
    // Refused at the first header: nothing near 13 GB was ever allocated.
    assert!(
        peak_rss_bytes() < 2 << 30,
        "peak RSS {} bytes",
        peak_rss_bytes()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_that_overflow_are_refused() {
    let (_, text, _, _) = hostile_trial("overflow", 1000, 1000).await;
    assert!(text.contains("broke the protocol"), "{text}");
    assert!(
        text.contains("the counts sum to 18446744073709551615 or more samples"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nan_values_backwards_intervals_and_foreign_trials_are_refused() {
    let (_, text, _, _) = hostile_trial("nan", 1000, 1000).await;
    assert!(
        text.contains(
            "interval 0: metric events_per_sec's value is NaN (values must be finite numbers)"
        ),
        "{text}"
    );
    let (_, text, _, _) = hostile_trial("backwards", 1000, 1000).await;
    assert!(
        text.contains("interval 0 ends") && text.contains("before it starts"),
        "{text}"
    );
    let (_, text, _, _) = hostile_trial("foreign-id", 1000, 1000).await;
    assert!(
        text.contains(
            "it accepted trial 'someone-elses-trial' when trial 'run-foreign-id-1' was asked for"
        ),
        "{text}"
    );
}

/// No control character, newline or bidirectional override of the agent's reaches the text.
fn assert_printable(what: &str, text: &str) {
    let raw: Vec<char> = text
        .chars()
        .filter(|c| c.is_control() || ('\u{202a}'..='\u{202e}').contains(c))
        .collect();
    assert!(raw.is_empty(), "{what} carries raw {raw:?}: {text:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_text_reaches_the_terminal_escaped() {
    let (_, text, _, _) = hostile_trial("evil-error", 1000, 1000).await;
    assert_printable("the trial's error", &text);
    assert!(
        text.contains("boom\\u{1b}[8m hidden\\r\\nquietbench: all trials passed\\u{202e}"),
        "{text}"
    );

    // A whole run on the hostile agent, as `quietbench run --agent` does it: the host line and
    // the host's failure are what the terminal and the report show.
    let (address, _) = serve().await;
    let mut fleet = quietbench_controller::fleet::StaticFleet::new(
        vec![quietbench_controller::fleet::HostEntry {
            address: address.clone(),
            label: None,
            source: "--agent".into(),
        }],
        Vec::new(),
        quietbench_controller::connection::AgentAccess::Fleet(None),
    )
    .unwrap();
    let progress = quietbench_controller::progress::Progress::new(1);
    use quietbench_controller::fleet::Fleet as _;
    let targets = fleet.acquire(&progress).await.unwrap();
    let variant = quietbench_controller::schedule::VariantSpec {
        name: "evil-error".into(),
        probe: "evil-error".into(),
        params: BTreeMap::new(),
    };
    let settings = quietbench_controller::record::RunSettings {
        probes: vec!["evil-error".into()],
        params: BTreeMap::new(),
        rounds: 1,
        duration_ms: 1000,
        interval_ms: 1000,
        cpus: Vec::new(),
        tune: false,
        unpinned: false,
        variants: vec![variant],
        warmup: 0,
        seed: 1,
        round_sync: true,
        compare_figure: None,
        exec_figure: None,
        capacity_slo: None,
    };
    let mut run =
        quietbench_controller::record::RunRecord::new("run".into(), SystemTime::now(), settings);
    tokio::time::timeout(
        PATIENCE,
        quietbench_controller::execute::execute(
            &targets,
            &mut run,
            &progress,
            &[],
            quietbench_controller::execute::FailurePolicy::default(),
            &quietbench_controller::context::CommandContext::default(),
            &quietbench_controller::execute::KeptServers::default(),
            &mut |_, _| Ok(quietbench_controller::execute::Flow::Continue),
        ),
    )
    .await
    .expect("the run ends")
    .expect("a failed host does not fail the run");
    let line = quietbench_controller::report::table::host_line(&run.hosts[0]);
    assert_printable("the host line", &line);
    assert!(
        line.contains("Evil\\u{1b}]0;owned\\u{7}\\u{1b}[2J CPU\\nquietbench: run stored"),
        "{line}"
    );
    let host = quietbench_controller::report::host::render(&run.hosts[0]);
    for l in host.lines() {
        assert_printable("quietbench host's output", l);
    }
    assert!(host.contains("evil\\nhost"), "{host}");
    assert_eq!(run.host_failures.len(), 1, "{:?}", run.host_failures);
    let failure = &run.host_failures[0].error;
    assert_printable("the host's failure", failure);
    assert!(
        failure.contains(&format!("trial failed on agent {address}")),
        "{failure}"
    );
    let table = quietbench_controller::report::table::render(&run);
    for l in table.lines() {
        assert_printable("the table", l);
    }
}

/// The test process's peak resident memory (VmHWM).
fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}
