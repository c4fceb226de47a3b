//! The http probe end to end on loopback: a tiny HTTP/1.1 server written here (a thread per
//! connection, keep-alive), real sockets, and the real harness (`run_trial`).
//!
//! This runs on a bursty 2-vCPU VM next to other work, so no assertion bounds a speed: each
//! holds by construction (the schedule's arithmetic, one request in flight per connection,
//! every request sent ending exactly one way), whatever the machine's pace. The tests give
//! `max_lag_ms` and `timeout_ms` room for the same reason.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use quietbench_vocab::metrics::{self, Form, Kind};

use super::*;
use crate::affinity::current_thread_affinity;
use crate::spec::TrialBounds;
use crate::vocab_tests::{assert_counters_registered, assert_registered};
use crate::worker::Recording;
use crate::{
    RunError, Samples, Step, TrialOutcome, TrialSettings, plan_placement, resolve_probe, run_trial,
    test_params,
};

/// What the test server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// 200 with a Content-Length body (none for HEAD).
    Length,
    /// 200 with a chunked body, written in pieces that split its framing.
    Chunked,
    /// A complete response with this status.
    Status(u16),
    /// 200 with `Connection: close`, then closes.
    Close,
    /// HTTP/1.0 with no length: the body ends when the server closes.
    UntilClose,
    /// Like Length, but the nth request (from 1, all connections) waits this long first.
    StallOnce { nth: u64, millis: u64 },
    /// Reads requests and never answers.
    Silent,
}

struct Shared {
    mode: Mode,
    stop: AtomicBool,
    requests: AtomicU64,
    /// The first request, head and body, as received.
    first: Mutex<Option<Vec<u8>>>,
    /// Every request's method and target ("GET /a"), in the order they arrived.
    lines: Mutex<Vec<String>>,
}

struct Server {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Server {
    fn start(mode: Mode) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            mode,
            stop: AtomicBool::new(false),
            requests: AtomicU64::new(0),
            first: Mutex::new(None),
            lines: Mutex::new(Vec::new()),
        });
        let state = Arc::clone(&shared);
        let accept = std::thread::spawn(move || {
            while !state.stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let state = Arc::clone(&state);
                        std::thread::spawn(move || serve(stream, &state));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(1)),
                }
            }
        });
        Self {
            addr,
            shared,
            accept: Some(accept),
        }
    }

    fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::Relaxed)
    }

    /// Every request's method and target so far, in the order they arrived.
    fn request_lines(&self) -> Vec<String> {
        self.shared.lines.lock().unwrap().clone()
    }

    fn first_request(&self) -> String {
        let first = self.shared.first.lock().unwrap();
        String::from_utf8_lossy(first.as_deref().unwrap_or_default()).into_owned()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

/// One connection: requests in, responses out, until the client closes or the server stops.
fn serve(mut stream: TcpStream, state: &Shared) {
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // One whole request: its head, then Content-Length bytes of body.
        let (head_end, length) = loop {
            if let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&pending[..end]).to_ascii_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse::<usize>().unwrap());
                if pending.len() >= end + 4 + length {
                    break (end + 4, length);
                }
            }
            match stream.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
                Err(_) if !state.stop.load(Ordering::Relaxed) => {}
                Err(_) => return,
            }
        };
        let request: Vec<u8> = pending.drain(..head_end + length).collect();
        let head_request = request.starts_with(b"HEAD ");
        let n = state.requests.fetch_add(1, Ordering::Relaxed) + 1;
        let line = String::from_utf8_lossy(&request);
        let mut words = line.split(' ');
        let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        state
            .lines
            .lock()
            .unwrap()
            .push(format!("{method} {target}"));
        state.first.lock().unwrap().get_or_insert(request);
        let pieces: &[&[u8]] = match state.mode {
            Mode::Length if head_request => &[b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"],
            Mode::Length => &[b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"],
            Mode::Chunked => &[
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhel",
                b"lo\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r",
                b"\n0\r\nX-Trailer: 1\r\n\r\n",
            ],
            Mode::Status(404) => &[b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"],
            Mode::Status(_) => {
                &[b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 3\r\n\r\nerr"]
            }
            Mode::Close => {
                &[b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"]
            }
            Mode::UntilClose => &[b"HTTP/1.0 200 OK\r\n\r\nuntil the end"],
            Mode::StallOnce { nth, millis } => {
                if n == nth {
                    std::thread::sleep(Duration::from_millis(millis));
                }
                &[b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"]
            }
            Mode::Silent => &[],
        };
        for piece in pieces {
            if stream.write_all(piece).is_err() {
                return;
            }
        }
        if matches!(state.mode, Mode::Close | Mode::UntilClose) {
            return;
        }
    }
}

fn params(server: SocketAddr, pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut params = test_params(pairs);
    params.insert("target".into(), server.to_string());
    params
}

/// Runs a trial through the harness; a trial that does not end well after its duration fails
/// the test instead of hanging it.
pub(crate) fn try_run(
    params: &BTreeMap<String, String>,
    millis: u64,
) -> Result<TrialOutcome, RunError> {
    try_run_probe(PROBE, params, millis)
}

/// [`try_run`] of any probe (`tcp` runs the same loop).
pub(crate) fn try_run_probe(
    probe: &str,
    params: &BTreeMap<String, String>,
    millis: u64,
) -> Result<TrialOutcome, RunError> {
    let spec = resolve_probe(probe, params).unwrap();
    let allowed = current_thread_affinity().unwrap();
    let settings = TrialSettings {
        duration: Duration::from_millis(millis),
        interval: Duration::from_millis(100),
        plan: plan_placement(spec.threads, &allowed, &[]).unwrap(),
        unpinned: None,
    };
    let (done, result) = mpsc::channel();
    std::thread::spawn(move || {
        let cancel = Arc::new(AtomicBool::new(false));
        let _ = done.send(run_trial(&spec, &settings, &cancel, &mut |_| true));
    });
    result
        .recv_timeout(Duration::from_millis(millis) + Duration::from_secs(60))
        .expect("the trial did not end")
}

pub(crate) fn run(params: &BTreeMap<String, String>, millis: u64) -> TrialOutcome {
    try_run(params, millis).unwrap()
}

pub(crate) fn counter(outcome: &TrialOutcome, name: &str) -> f64 {
    assert_counters_registered(&outcome.counters);
    outcome
        .counters
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no counter {name} in {:?}", outcome.counters))
        .value
}

pub(crate) fn has_counter(outcome: &TrialOutcome, name: &str) -> bool {
    outcome.counters.iter().any(|c| c.name == name)
}

pub(crate) fn latency(outcome: &TrialOutcome) -> &Histogram<u64> {
    &outcome.total.metric_sets[LATENCY].latency_ns
}

pub(crate) fn service(outcome: &TrialOutcome) -> &Histogram<u64> {
    &outcome.total.metric_sets[SERVICE].latency_ns
}

/// Samples at or above `ns`.
fn at_least(hist: &Histogram<u64>, ns: u64) -> u64 {
    hist.iter_recorded()
        .filter(|v| v.value_iterated_to() >= ns)
        .map(|v| v.count_at_value())
        .sum()
}

/// Every request sent after the warm-up ended exactly one way: recorded, an error, or still in
/// flight at the end; and each recorded one has both its latency and its service time.
fn assert_accounted(outcome: &TrialOutcome) {
    let recorded = latency(outcome).len();
    assert_eq!(recorded, service(outcome).len());
    assert_eq!(recorded, outcome.total.metric_sets[LATENCY].events);
    let ended = recorded as f64
        + counter(outcome, metrics::ERRORS_4XX)
        + counter(outcome, metrics::ERRORS_5XX)
        + counter(outcome, metrics::ERRORS_TIMEOUT)
        + counter(outcome, metrics::ERRORS_IO)
        + counter(outcome, metrics::REQUESTS_ABANDONED);
    assert_eq!(
        ended,
        counter(outcome, metrics::REQUESTS_SENT),
        "{:?}",
        outcome.counters
    );
}

/// Room for a bursty machine: the tests check structure, not the generator's punctuality.
const ROOMY: &[(&str, &str)] = &[("max_lag_ms", "60000"), ("timeout_ms", "60000")];

/// [`ROOMY`] parameters, then `pairs` over them, against `server`.
fn roomy(server: SocketAddr, pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut all = test_params(ROOMY);
    all.extend(params(server, pairs));
    all
}

#[test]
fn open_loop_accounts_for_every_request_it_sends() {
    let server = Server::start(Mode::Length);
    let outcome = run(
        &roomy(
            server.addr,
            &[("rate", "400"), ("connections", "4"), ("threads", "2")],
        ),
        500,
    );
    assert_eq!(outcome.total.metric_sets.len(), 3);
    assert_accounted(&outcome);
    let recorded = latency(&outcome).len();
    assert!(recorded > 0, "no response recorded");
    // Every recorded request went out on an idle connection, so each has a lag sample.
    assert_eq!(
        outcome.total.metric_sets[LAG].events as f64,
        counter(&outcome, metrics::REQUESTS_SENT)
    );
    // A request's latency from its due time is never below its service time from its send.
    for q in [0.5, 0.9, 0.99, 1.0] {
        assert!(
            latency(&outcome).value_at_quantile(q) >= service(&outcome).value_at_quantile(q),
            "q{q}"
        );
    }
    for name in [
        metrics::ERRORS_CONNECT,
        metrics::ERRORS_TIMEOUT,
        metrics::ERRORS_4XX,
        metrics::ERRORS_5XX,
        metrics::ERRORS_IO,
    ] {
        assert_eq!(counter(&outcome, name), 0.0, "{name}");
    }
    assert!(counter(&outcome, metrics::REQUESTS_UNSENT) >= 0.0);
    assert!(counter(&outcome, metrics::SEND_LAG_MAX_US) >= 0.0);
    assert!(server.requests() >= recorded);
}

#[test]
fn the_request_sent_is_the_one_the_parameters_describe() {
    let server = Server::start(Mode::Length);
    let outcome = run(
        &roomy(
            server.addr,
            &[
                ("rate", "0"),
                ("connections", "1"),
                ("method", "post"),
                ("path", "/p?q=1"),
                ("body", "hello"),
                ("host", "example.test"),
                ("header.X-Test", "yes"),
            ],
        ),
        200,
    );
    let first = server.first_request();
    assert!(first.starts_with("POST /p?q=1 HTTP/1.1\r\n"), "{first}");
    for line in [
        "\r\nHost: example.test\r\n",
        "\r\nX-Test: yes\r\n",
        "\r\nContent-Length: 5\r\n",
    ] {
        assert!(first.contains(line), "{line:?} not in {first:?}");
    }
    assert!(first.ends_with("\r\n\r\nhello"), "{first:?}");
    // A closed loop: no schedule, so no lag and nothing unsent.
    assert_eq!(outcome.total.metric_sets.len(), 2);
    assert!(!has_counter(&outcome, metrics::SEND_LAG_MAX_US));
    assert!(!has_counter(&outcome, metrics::REQUESTS_UNSENT));
    assert!(!latency(&outcome).is_empty());
    assert_accounted(&outcome);
}

#[test]
fn error_statuses_are_counted_never_recorded() {
    for (status, name) in [(500, metrics::ERRORS_5XX), (404, metrics::ERRORS_4XX)] {
        let server = Server::start(Mode::Status(status));
        let outcome = run(
            &roomy(server.addr, &[("rate", "0"), ("connections", "2")]),
            200,
        );
        assert!(counter(&outcome, name) > 0.0, "{status}");
        assert_eq!(latency(&outcome).len(), 0, "{status}");
        assert_eq!(service(&outcome).len(), 0, "{status}");
        assert_eq!(outcome.total.metric_sets[LATENCY].events_per_sec, 0.0);
        assert_accounted(&outcome);
    }
}

#[test]
fn a_refused_port_counts_connect_errors_backs_off_and_ends() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let target: SocketAddr = ([127, 0, 0, 1], port).into();
    let started = Instant::now();
    let outcome = run(
        &roomy(target, &[("rate", "100"), ("connections", "2")]),
        300,
    );
    let wall_ms = started.elapsed().as_millis() as f64;
    let attempts = counter(&outcome, metrics::ERRORS_CONNECT);
    assert!(attempts >= 2.0, "{attempts}");
    // The backoff spaces each connection's attempts 1, 2, 4, 8 ms and then 10 ms apart: no
    // spinning on a refusing server, however fast the machine.
    let most = 2.0 * (5.0 + wall_ms / 10.0 + 1.0);
    assert!(attempts <= most, "{attempts} attempts in {wall_ms} ms");
    assert_eq!(latency(&outcome).len(), 0);
    assert_eq!(counter(&outcome, metrics::REQUESTS_SENT), 0.0);
    // Due at 100/s for at least 0.3 s, never sent.
    assert!(counter(&outcome, metrics::REQUESTS_UNSENT) >= 30.0);
}

#[test]
fn a_stall_shows_in_latency_from_the_schedule_not_in_service_time() {
    // One connection at 100/s: request 3 (due at 20 ms) waits 300 ms at the server; the 20
    // requests due in the 200 ms after it queue behind it, each waiting at least 100 ms.
    let server = Server::start(Mode::StallOnce {
        nth: 3,
        millis: 300,
    });
    let outcome = run(
        &roomy(server.addr, &[("rate", "100"), ("connections", "1")]),
        1500,
    );
    assert_accounted(&outcome);
    let ms = 1_000_000;
    assert!(latency(&outcome).max() >= 300 * ms);
    assert!(
        service(&outcome).max() >= 300 * ms,
        "the stalled request's own service"
    );
    let queued = at_least(latency(&outcome), 100 * ms);
    assert!(queued >= 20, "{queued} requests waited 100 ms or more");
    // The queued requests' service times are their own, not the stall's.
    let slow_service = at_least(service(&outcome), 100 * ms);
    assert!(slow_service < queued, "{slow_service} vs {queued}");
}

#[test]
fn chunked_bodies_and_head_responses_are_read_whole() {
    for (mode, method) in [(Mode::Chunked, "GET"), (Mode::Length, "HEAD")] {
        let server = Server::start(mode);
        let outcome = run(
            &roomy(
                server.addr,
                &[("rate", "0"), ("connections", "2"), ("method", method)],
            ),
            300,
        );
        // A body misread would leave requests waiting (abandoned) or misframed (I/O errors).
        assert!(!latency(&outcome).is_empty(), "{mode:?}");
        assert_eq!(counter(&outcome, metrics::ERRORS_IO), 0.0, "{mode:?}");
        assert_accounted(&outcome);
    }
}

#[test]
fn a_server_that_closes_is_reconnected_to() {
    for mode in [Mode::Close, Mode::UntilClose] {
        let server = Server::start(mode);
        let outcome = run(
            &roomy(server.addr, &[("rate", "0"), ("connections", "2")]),
            300,
        );
        assert!(!latency(&outcome).is_empty(), "{mode:?}");
        assert!(counter(&outcome, metrics::RECONNECTS) > 0.0, "{mode:?}");
        assert_eq!(counter(&outcome, metrics::ERRORS_IO), 0.0, "{mode:?}");
        assert_accounted(&outcome);
    }
}

#[test]
fn an_unanswered_request_times_out_and_its_connection_is_reopened() {
    let server = Server::start(Mode::Silent);
    let outcome = run(
        &roomy(
            server.addr,
            &[("rate", "0"), ("connections", "2"), ("timeout_ms", "50")],
        ),
        400,
    );
    assert!(counter(&outcome, metrics::ERRORS_TIMEOUT) > 0.0);
    assert!(counter(&outcome, metrics::RECONNECTS) > 0.0);
    assert_eq!(latency(&outcome).len(), 0);
    assert_accounted(&outcome);
}

#[test]
fn a_late_generator_voids_the_trial() {
    let server = Server::start(Mode::Length);
    let spec = resolve_probe(
        PROBE,
        &params(
            server.addr,
            &[("rate", "20"), ("connections", "2"), ("max_lag_ms", "10")],
        ),
    )
    .unwrap();
    let mut workload = spec.workload(0).unwrap();
    let mut recording = Recording::new(OPEN_LOOP_METRIC_SETS.len());
    let mut samples = Samples {
        rec: &mut recording,
    };
    // Request 0 goes at the start; request 1 is due 50 ms later, with a connection idle since
    // before the start. The loop is away for 150 ms: 100 ms late at least.
    assert_eq!(workload.step(&mut samples), Step::Recorded);
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(workload.step(&mut samples), Step::Failed);
    let error = workload.take_error().unwrap();
    assert!(
        error.starts_with("void: the load generator fell behind its schedule by "),
        "{error}"
    );
    assert!(error.contains("(max_lag_ms=10)"), "{error}");
    workload.finish();
    let lag_max = workload
        .counters()
        .into_iter()
        .find(|c| c.name == metrics::SEND_LAG_MAX_US)
        .unwrap();
    assert!(lag_max.value >= 100_000.0, "{lag_max:?}");
}

#[test]
fn warm_up_requests_are_sent_but_not_counted_and_the_rate_is_kept_honest() {
    let server = Server::start(Mode::Length);
    let outcome = run(
        &roomy(
            server.addr,
            &[("rate", "200"), ("connections", "2"), ("warmup", "0.2")],
        ),
        600,
    );
    assert_accounted(&outcome);
    // The harness divides by the whole measured time, warm-up included; the counter by the
    // time after it, which is shorter, over the same responses.
    let honest = counter(&outcome, metrics::REQUESTS_PER_SEC_AFTER_WARMUP);
    let harness = outcome.total.metric_sets[LATENCY].events_per_sec;
    assert!(honest >= harness, "{honest} < {harness}");
    assert!(!latency(&outcome).is_empty());
    // Without a warm-up, no second rate.
    let outcome = run(&roomy(server.addr, &[("rate", "200")]), 100);
    assert!(!has_counter(
        &outcome,
        metrics::REQUESTS_PER_SEC_AFTER_WARMUP
    ));
}

fn refused(pairs: &[(&str, &str)]) -> String {
    resolve_probe(PROBE, &test_params(pairs))
        .map(|_| ())
        .unwrap_err()
        .to_string()
}

#[test]
fn bad_parameters_say_what_is_wrong() {
    let t = ("target", "127.0.0.1:8080");
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[], "target"),
        (&[], "required"),
        (&[("target", "localhost:8080")], "not resolved"),
        (&[("target", "10.0.0.1")], "IP:PORT"),
        (&[t, ("rate", "20000000")], "from 0 to 10000000"),
        (&[t, ("connections", "1"), ("threads", "2")], "at least 2"),
        (&[t, ("threads", "65")], "from 1 to 64"),
        (&[t, ("connections", "100001")], "from 1 to 100000"),
        (&[t, ("method", "PATCH")], "unknown method"),
        (&[t, ("header.", "x")], "needs a name"),
        (&[t, ("header.Host", "x")], "host="),
        (&[t, ("header.X", "a\nb")], "control character"),
        (&[t, ("warmup", "-1")], "from 0 to 3600"),
        (&[t, ("warmup", "soon")], "expected seconds"),
        (&[t, ("path", "index.html")], "start with '/'"),
        (&[t, ("rat", "5")], "has no parameter 'rat'"),
        (&[t, ("timeout_ms", "0")], "from 1 to 600000"),
        (
            &[t, ("requests", "r.txt")],
            "names a file on the controller's machine",
        ),
        (&[t, (REQUESTS_TEXT, "/a")], "comes with requests=FILE"),
        (&[t, ("requests_order", "random")], "give requests=FILE too"),
        (
            &[
                t,
                ("requests", "r.txt"),
                (REQUESTS_TEXT, "/a"),
                ("path", "/b"),
            ],
            "one or the other",
        ),
        (
            &[
                t,
                ("requests", "r.txt"),
                (REQUESTS_TEXT, "/a"),
                ("requests_order", "shuffled"),
            ],
            "give sequence",
        ),
        (
            &[
                t,
                ("requests", "r.txt"),
                (REQUESTS_TEXT, "/a"),
                ("requests_seed", "-1"),
            ],
            "whole number",
        ),
        (
            &[t, ("requests", "r.txt"), (REQUESTS_TEXT, "/a\n\nGET b\n")],
            "requests=r.txt is invalid: line 3: 'b' must start with '/'",
        ),
    ];
    for (pairs, expected) in cases {
        let err = refused(pairs);
        assert!(err.contains(expected), "{pairs:?}: {err}");
        assert!(err.contains("http"), "{err}");
    }
}

#[test]
fn resolved_parameters_list_every_default() {
    let spec = resolve_probe(PROBE, &test_params(&[("target", "127.0.0.1:8080")])).unwrap();
    let resolved: Vec<(&str, &str)> = spec
        .resolved_params
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        resolved,
        [
            ("body", ""),
            ("connections", "16"),
            ("host", "127.0.0.1:8080"),
            ("max_lag_ms", "10"),
            ("method", "GET"),
            ("path", "/"),
            ("rate", "1000"),
            ("target", "127.0.0.1:8080"),
            ("threads", "1"),
            ("timeout_ms", "2000"),
            ("warmup", "0"),
        ]
    );
    assert_eq!(spec.metric_sets, OPEN_LOOP_METRIC_SETS);
    assert_eq!(spec.work, WorkKind::Network);
    let spec = resolve_probe(
        PROBE,
        &test_params(&[
            ("target", "[::1]:80"),
            ("rate", "0"),
            ("warmup", "0.5"),
            ("header.Accept", "*/*"),
            ("connections", "33"),
            ("threads", "2"),
        ]),
    )
    .unwrap();
    assert_eq!(spec.metric_sets, CLOSED_LOOP_METRIC_SETS);
    assert_eq!(spec.resolved_params["warmup"], "0.5");
    assert_eq!(spec.resolved_params["header.Accept"], "*/*");
    assert_eq!(spec.resolved_params["host"], "[::1]:80");
    // The busiest thread's 17 connections, each with its response buffer.
    let demand = crate::catalog::demand(&spec);
    assert_eq!(demand.buffer_bytes_per_thread, 17 * 8192);
    assert_eq!(demand.buffers, "17 connections x a 8 KiB response buffer");
}

#[test]
fn connections_split_evenly_over_threads() {
    let config = HttpConfig {
        probe: PROBE,
        framing: Framing::Http,
        target: "127.0.0.1:1".parse().unwrap(),
        duet_target: None,
        duet_b_first: false,
        tls_host: None,
        requests: Arc::new(
            RequestSet::one(false, request::Method::Get, "/", "h", &[], b"").unwrap(),
        ),
        order: Order::Sequence,
        rate: 1,
        connections: 10,
        threads: 4,
        warmup: Duration::ZERO,
        timeout: Duration::from_secs(1),
        max_lag: Duration::from_secs(1),
    };
    let split: Vec<usize> = (0..4).map(|t| config.connections_of(t)).collect();
    assert_eq!(split, [3, 3, 2, 2]);
}

#[test]
fn a_warm_up_as_long_as_the_trial_is_refused_when_the_workload_is_made() {
    let spec = resolve_probe(
        PROBE,
        &test_params(&[("target", "127.0.0.1:1"), ("warmup", "2")]),
    )
    .unwrap()
    .with_bounds(TrialBounds::new(
        Arc::new(AtomicBool::new(false)),
        Duration::from_secs(2),
        Duration::from_secs(60),
    ));
    let err = spec.workload(0).map(|_| ()).unwrap_err();
    assert!(err.contains("nothing would be measured"), "{err}");
}

#[test]
fn every_metric_and_counter_is_registered() {
    for set in OPEN_LOOP_METRIC_SETS {
        if !set.rate_metric.is_empty() {
            assert_registered(
                set.rate_metric,
                set.rate_unit,
                Some(Kind::Rate),
                Form::Value,
            );
        }
        assert_registered(
            set.latency_metric,
            set.latency_unit,
            Some(Kind::Time),
            Form::Histogram,
        );
    }
    assert!(
        CLOSED_LOOP_METRIC_SETS
            .iter()
            .all(|s| OPEN_LOOP_METRIC_SETS.contains(s))
    );
}

/// `pairs` over [`ROOMY`] against `server`, with a request file of `text` (as the controller
/// sends it: its name and its text).
fn with_file(server: SocketAddr, text: &str, pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut all = roomy(server, pairs);
    all.insert("requests".into(), "routes.txt".into());
    all.insert(REQUESTS_TEXT.into(), text.into());
    all
}

const ROUTES: &str = "# three routes\n/search?from=A&to=B\nHEAD /health\n\npost /orders\n";
const ROUTE_LINES: [&str; 3] = ["GET /search?from=A&to=B", "HEAD /health", "POST /orders"];

#[test]
fn a_request_file_is_sent_in_its_order_and_its_heads_read_without_a_body() {
    let server = Server::start(Mode::Length);
    let one = [("rate", "0"), ("connections", "1")];
    let outcome = run(&with_file(server.addr, ROUTES, &one), 200);
    assert_accounted(&outcome);
    assert_eq!(counter(&outcome, metrics::ERRORS_TIMEOUT), 0.0);
    assert_eq!(counter(&outcome, metrics::ERRORS_IO), 0.0);
    // One connection sends one request at a time: the server sees the file's lines in order,
    // wrapping at its end (a HEAD's answer read as if it had a body would stall the rest).
    let seen = server.request_lines();
    assert!(seen.len() > ROUTE_LINES.len(), "{seen:?}");
    for (k, line) in seen.iter().enumerate() {
        assert_eq!(line, ROUTE_LINES[k % 3], "request {k} of {seen:?}");
    }

    // Two threads walk the file with a stride of two from their own lines: each line's count
    // differs from another's by at most one per thread, whatever each thread's pace.
    let server = Server::start(Mode::Length);
    let two = [("rate", "0"), ("connections", "2"), ("threads", "2")];
    let outcome = run(&with_file(server.addr, ROUTES, &two), 200);
    assert_accounted(&outcome);
    let seen = server.request_lines();
    let counts: Vec<usize> = ROUTE_LINES
        .iter()
        .map(|l| seen.iter().filter(|s| s == l).count())
        .collect();
    assert_eq!(counts.iter().sum::<usize>(), seen.len(), "{seen:?}");
    let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
    assert!(*min > 0 && max - min <= 2, "{counts:?}");
}

#[test]
fn random_order_reaches_every_line_and_a_seed_replays_its_draw() {
    let lines: Vec<String> = (0..8).map(|i| format!("/r/{i}")).collect();
    let text = lines.join("\n");
    let random = [
        ("rate", "0"),
        ("connections", "1"),
        ("requests_order", "random"),
        ("requests_seed", "42"),
    ];
    let draw = || {
        let server = Server::start(Mode::Length);
        let outcome = run(&with_file(server.addr, &text, &random), 300);
        assert_accounted(&outcome);
        server.request_lines()
    };
    let first = draw();
    // 8 lines, each missed by 200 uniform draws with probability (7/8)^200 < 1e-11.
    assert!(first.len() >= 200, "only {} requests", first.len());
    let hit: std::collections::BTreeSet<&str> = first.iter().map(String::as_str).collect();
    let expected: std::collections::BTreeSet<String> =
        lines.iter().map(|l| format!("GET {l}")).collect();
    assert_eq!(
        hit,
        expected.iter().map(String::as_str).collect(),
        "{first:?}"
    );
    // Not the file's order.
    assert!(
        first
            .iter()
            .zip(expected.iter().cycle())
            .any(|(a, b)| a != b),
        "{first:?}"
    );
    // The same seed, one thread, one connection: the same requests in the same order.
    let second = draw();
    let common = first.len().min(second.len());
    assert_eq!(first[..common], second[..common]);
}

#[test]
fn the_record_keeps_the_files_name_never_its_text() {
    let mut params = test_params(&[
        ("target", "127.0.0.1:8080"),
        ("requests", "queries/monday.txt"),
        ("requests_order", "random"),
        ("requests_seed", "7"),
    ]);
    params.insert(REQUESTS_TEXT.into(), ROUTES.into());
    let spec = resolve_probe(PROBE, &params).unwrap();
    let r = &spec.resolved_params;
    assert_eq!(r["requests"], "queries/monday.txt");
    assert_eq!(r["requests_order"], "random");
    assert_eq!(r["requests_seed"], "7");
    assert!(!r.contains_key(REQUESTS_TEXT), "{r:?}");
    assert!(
        !r.contains_key("path") && !r.contains_key("method"),
        "{r:?}"
    );
    assert!(r.values().all(|v| !v.contains("/health")), "{r:?}");
    params.remove("requests_order");
    let spec = resolve_probe(PROBE, &params).unwrap();
    // Sequence needs no seed, so the record has none.
    assert_eq!(spec.resolved_params["requests_order"], "sequence");
    assert!(!spec.resolved_params.contains_key("requests_seed"));
}

#[test]
fn a_duet_loads_both_servers_alike_and_keeps_their_figures_apart() {
    let a = Server::start(Mode::Length);
    let b = Server::start(Mode::Length);
    let b_addr = b.addr.to_string();
    let outcome = run(
        &roomy(
            a.addr,
            &[
                ("rate", "200"),
                ("connections", "2"),
                ("duet_target", &b_addr),
            ],
        ),
        1000,
    );
    // A's three metric sets, then B's.
    assert_eq!(outcome.total.metric_sets.len(), 6);
    assert_accounted(&outcome);
    let b_recorded = outcome.total.metric_sets[LATENCY + 3].latency_ns.len();
    assert_eq!(
        b_recorded,
        outcome.total.metric_sets[SERVICE + 3].latency_ns.len()
    );
    let b_ended = b_recorded as f64
        + counter(&outcome, metrics::B_ERRORS_5XX)
        + counter(&outcome, metrics::B_ERRORS_IO)
        + counter(&outcome, metrics::B_REQUESTS_ABANDONED);
    assert_eq!(b_ended, counter(&outcome, metrics::B_REQUESTS_SENT));
    // Each server is offered the rate: 200/s for 1 s each, whatever the machine's speed, and
    // each got the requests its own figures count.
    let (a_sent, b_sent) = (
        counter(&outcome, metrics::REQUESTS_SENT),
        counter(&outcome, metrics::B_REQUESTS_SENT),
    );
    assert!((20.0..=201.0).contains(&a_sent), "A sent {a_sent}");
    assert!(
        (a_sent - b_sent).abs() <= 1.0,
        "A sent {a_sent}, B {b_sent}"
    );
    // Each server saw its own requests and none of the other's (a server may not have read
    // the last one sent when the trial ends).
    let a_recorded = latency(&outcome).len() as f64;
    assert!(
        (a_recorded..=a_sent).contains(&(a.requests() as f64)),
        "{}",
        a.requests()
    );
    assert!(
        (b_recorded as f64..=b_sent).contains(&(b.requests() as f64)),
        "{}",
        b.requests()
    );
    // The resolved parameters are each server's, as given.
    let spec = resolve_probe(
        PROBE,
        &params(a.addr, &[("duet_target", &b_addr), ("threads", "1")]),
    )
    .unwrap();
    assert_eq!(spec.threads, 2);
    assert_eq!(spec.resolved_params["connections"], "16");
    assert_eq!(spec.resolved_params["duet_target"], b_addr);
}

#[test]
fn b_first_swaps_the_threads_not_the_servers() {
    let a = Server::start(Mode::Length);
    let b = Server::start(Mode::Length);
    let b_addr = b.addr.to_string();
    let outcome = run(
        &roomy(
            a.addr,
            &[
                ("rate", "100"),
                ("connections", "2"),
                ("duet_target", &b_addr),
                ("duet_b_first", "true"),
            ],
        ),
        500,
    );
    // B's figures are still B's, and its requests went to B.
    let b_recorded = outcome.total.metric_sets[LATENCY + 3].latency_ns.len() as f64;
    let b_sent = counter(&outcome, metrics::B_REQUESTS_SENT);
    assert!(b_sent > 0.0);
    assert!(
        (b_recorded..=b_sent).contains(&(b.requests() as f64)),
        "{}",
        b.requests()
    );
    let a_sent = counter(&outcome, metrics::REQUESTS_SENT);
    assert!((latency(&outcome).len() as f64..=a_sent).contains(&(a.requests() as f64)));
}
