//! The tcp probe end to end on loopback: a tiny line server written here (a thread per
//! connection), real sockets, and the real harness. As http's tests, no assertion bounds a
//! speed: the machine is a bursty 2-vCPU VM.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use quietbench_vocab::metrics;

use super::*;
use crate::http::tests::{counter, has_counter, latency, service, try_run_probe};
use crate::{TrialOutcome, resolve_probe, test_params};

/// What the test server answers to each request (a line, up to `\n`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `+PONG\r\n`, written in two pieces that split the `\r\n`.
    Line,
    /// Ten bytes with newlines among them, for `response_bytes=10`.
    Fixed,
    /// Bytes without a newline, without end.
    Endless,
    /// Two answers to each request.
    Twice,
    /// Reads requests and never answers.
    Silent,
}

struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    requests: Arc<AtomicU64>,
    /// Every request, in the order they arrived.
    seen: Arc<Mutex<Vec<Vec<u8>>>>,
    accept: Option<JoinHandle<()>>,
}

impl Server {
    fn start(mode: Mode) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicU64::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (s, r, f) = (Arc::clone(&stop), Arc::clone(&requests), Arc::clone(&seen));
        let accept = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (s, r, f) = (Arc::clone(&s), Arc::clone(&r), Arc::clone(&f));
                        std::thread::spawn(move || serve(stream, mode, &s, &r, &f));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(1)),
                }
            }
        });
        Self {
            addr,
            stop,
            requests,
            seen,
            accept: Some(accept),
        }
    }

    fn first(&self) -> Option<Vec<u8>> {
        self.seen.lock().unwrap().first().cloned()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

fn serve(
    mut stream: TcpStream,
    mode: Mode,
    stop: &AtomicBool,
    requests: &AtomicU64,
    seen: &Mutex<Vec<Vec<u8>>>,
) {
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut pending = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let Some(end) = pending.iter().position(|&b| b == b'\n') else {
            match stream.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
                Err(_) if !stop.load(Ordering::Relaxed) => {}
                Err(_) => return,
            }
            continue;
        };
        let request: Vec<u8> = pending.drain(..=end).collect();
        requests.fetch_add(1, Ordering::Relaxed);
        seen.lock().unwrap().push(request);
        let pieces: &[&[u8]] = match mode {
            Mode::Line => &[b"+PONG\r", b"\n"],
            Mode::Fixed => &[b"ab\ncd", b"\n\nxyz"],
            Mode::Twice => &[b"one\ntwo\n"],
            Mode::Silent => &[],
            Mode::Endless => {
                let chunk = [b'a'; 64 * 1024];
                while !stop.load(Ordering::Relaxed) && stream.write_all(&chunk).is_ok() {}
                return;
            }
        };
        for piece in pieces {
            if stream.write_all(piece).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

/// Room for a bursty machine: the tests check structure, not the generator's punctuality.
fn roomy(server: SocketAddr, pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut all = test_params(&[("max_lag_ms", "60000"), ("timeout_ms", "60000")]);
    all.extend(test_params(pairs));
    all.insert("target".into(), server.to_string());
    all
}

fn run(params: &BTreeMap<String, String>, millis: u64) -> TrialOutcome {
    try_run_probe(PROBE, params, millis).unwrap()
}

/// Every request sent after the warm-up ended exactly one way, and no HTTP status was
/// counted: a raw response has none.
fn assert_accounted(outcome: &TrialOutcome) {
    let recorded = latency(outcome).len();
    assert_eq!(recorded, service(outcome).len());
    let ended = recorded as f64
        + counter(outcome, metrics::ERRORS_TIMEOUT)
        + counter(outcome, metrics::ERRORS_IO)
        + counter(outcome, metrics::REQUESTS_ABANDONED);
    assert_eq!(
        ended,
        counter(outcome, metrics::REQUESTS_SENT),
        "{:?}",
        outcome.counters
    );
    assert!(!has_counter(outcome, metrics::ERRORS_4XX));
    assert!(!has_counter(outcome, metrics::ERRORS_5XX));
}

#[test]
fn open_loop_sends_the_request_and_reads_line_answers() {
    let server = Server::start(Mode::Line);
    let outcome = run(
        &roomy(
            server.addr,
            &[
                ("rate", "400"),
                ("connections", "4"),
                ("threads", "2"),
                ("request", "PING 1\\r\\n"),
            ],
        ),
        500,
    );
    assert_eq!(
        outcome.total.metric_sets.len(),
        3,
        "open loop: with send lag"
    );
    assert_accounted(&outcome);
    let recorded = latency(&outcome).len();
    assert!(recorded > 0, "no response recorded");
    assert_eq!(counter(&outcome, metrics::ERRORS_IO), 0.0);
    assert_eq!(counter(&outcome, metrics::ERRORS_TIMEOUT), 0.0);
    assert!(server.requests.load(Ordering::Relaxed) >= recorded);
    assert_eq!(server.first().as_deref(), Some(&b"PING 1\r\n"[..]));
    for q in [0.5, 0.99] {
        assert!(latency(&outcome).value_at_quantile(q) >= service(&outcome).value_at_quantile(q));
    }
}

#[test]
fn closed_loop_reads_fixed_length_answers_whatever_they_hold() {
    let server = Server::start(Mode::Fixed);
    let outcome = run(
        &roomy(
            server.addr,
            &[
                ("rate", "0"),
                ("connections", "2"),
                ("response_bytes", "10"),
            ],
        ),
        300,
    );
    assert_eq!(outcome.total.metric_sets.len(), 2, "closed loop: no lag");
    assert_accounted(&outcome);
    assert!(!latency(&outcome).is_empty());
    assert_eq!(counter(&outcome, metrics::ERRORS_IO), 0.0);
    assert_eq!(
        server.first().as_deref(),
        Some(&b"PING\n"[..]),
        "the default request"
    );
}

#[test]
fn an_answer_without_its_terminator_is_an_io_error_not_a_hang() {
    let server = Server::start(Mode::Endless);
    let outcome = run(
        &roomy(server.addr, &[("rate", "0"), ("connections", "1")]),
        1000,
    );
    assert_accounted(&outcome);
    assert_eq!(latency(&outcome).len(), 0);
    assert!(
        counter(&outcome, metrics::ERRORS_IO) >= 1.0,
        "{:?}",
        outcome.counters
    );
    assert_eq!(counter(&outcome, metrics::ERRORS_TIMEOUT), 0.0);
}

#[test]
fn an_answer_nobody_asked_for_and_silence_are_counted_by_kind() {
    let server = Server::start(Mode::Twice);
    let outcome = run(
        &roomy(server.addr, &[("rate", "100"), ("connections", "1")]),
        300,
    );
    assert_accounted(&outcome);
    // "one\ntwo\n" in one read is refused whole; split over two reads, the first answer is
    // recorded and the second is a reply to nothing (a reconnect, no request lost).
    assert!(
        counter(&outcome, metrics::ERRORS_IO) + counter(&outcome, metrics::RECONNECTS) >= 1.0,
        "{:?}",
        outcome.counters
    );
    drop(server);

    let silent = Server::start(Mode::Silent);
    let mut params = roomy(silent.addr, &[("rate", "50"), ("connections", "2")]);
    params.insert("timeout_ms".into(), "100".into());
    let outcome = run(&params, 600);
    assert_accounted(&outcome);
    assert_eq!(latency(&outcome).len(), 0);
    assert!(counter(&outcome, metrics::ERRORS_TIMEOUT) >= 1.0);
}

fn refused(pairs: &[(&str, &str)]) -> String {
    let mut params = test_params(&[("target", "127.0.0.1:9")]);
    params.extend(test_params(pairs));
    resolve_probe(PROBE, &params).unwrap_err().to_string()
}

#[test]
fn bad_parameters_say_what_is_wrong() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[("request", "PING\\q")], "unknown escape \\q at byte 4"),
        (&[("request", "")], "must not be empty"),
        (&[("response_terminator", "\\x0")], "two hexadecimal digits"),
        (&[("response_terminator", "")], "must not be empty"),
        (&[("response_bytes", "0")], "from 1 to 1073741824"),
        (&[("response_bytes", "ten")], "whole number of bytes"),
        (
            &[("response_bytes", "10"), ("response_terminator", "\\n")],
            "not both",
        ),
        (&[("path", "/x")], "http's parameter"),
        (
            &[("request", "PING\\n"), ("requests", "keys.txt")],
            "give request= or requests=, not both",
        ),
        (
            &[("requests", "keys.txt")],
            "names a file on the controller's machine",
        ),
        (&[("requests_order", "random")], "give requests=FILE too"),
        (&[("requests_seed", "3")], "give requests=FILE too"),
        (
            &[(REQUESTS_TEXT, "PING\\n")],
            "comes with requests=FILE, the file it was read from",
        ),
        (
            &[
                ("requests", "keys.txt"),
                (REQUESTS_TEXT, "A\\n\n# c\nB\\q\n"),
            ],
            "requests=keys.txt is invalid: line 3: 'B\\q': unknown escape \\q at byte 1",
        ),
        (
            &[("requests", "keys.txt"), (REQUESTS_TEXT, "# none\n")],
            "no requests",
        ),
        (
            &[
                ("requests", "keys.txt"),
                (REQUESTS_TEXT, "A\\n"),
                ("requests_order", "shuffled"),
            ],
            "give sequence (the file's order) or random",
        ),
        (
            &[
                ("requests", "keys.txt"),
                (REQUESTS_TEXT, "A\\n"),
                ("requests_seed", "x"),
            ],
            "give a whole number",
        ),
        (&[("header.X", "1")], "http's parameter"),
        (&[("colour", "red")], "no parameter 'colour'"),
        (
            &[("connections", "1"), ("threads", "2")],
            "needs a connection",
        ),
        (&[("warmup", "-1")], "from 0 to"),
    ];
    for (pairs, want) in cases {
        let err = refused(pairs);
        assert!(err.contains(want), "{pairs:?}: {err}");
        assert!(
            err.starts_with("tcp parameter") || err.starts_with("probe tcp"),
            "{err}"
        );
    }
    let err = resolve_probe(PROBE, &BTreeMap::new())
        .unwrap_err()
        .to_string();
    assert!(err.contains("required: IP:PORT"), "{err}");
}

#[test]
fn resolved_parameters_list_every_default_and_the_framing_given() {
    let spec = resolve_probe(PROBE, &test_params(&[("target", "127.0.0.1:9")])).unwrap();
    let keys: Vec<&str> = spec.resolved_params.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "connections",
            "max_lag_ms",
            "rate",
            "request",
            "response_terminator",
            "target",
            "threads",
            "timeout_ms",
            "warmup"
        ]
    );
    assert_eq!(spec.resolved_params["request"], DEFAULT_REQUEST);
    assert_eq!(spec.resolved_params["response_terminator"], "\\n");
    let fixed = resolve_probe(
        PROBE,
        &test_params(&[("target", "127.0.0.1:9"), ("response_bytes", "4_096")]),
    )
    .unwrap();
    assert_eq!(fixed.resolved_params["response_bytes"], "4096");
    assert!(!fixed.resolved_params.contains_key("response_terminator"));
    assert_eq!(fixed.name, "tcp");
}

/// A request file's parameters as the controller sends them: the name and its text.
fn with_file(server: SocketAddr, text: &str, pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut params = roomy(server, pairs);
    params.insert("requests".into(), "keys.txt".into());
    params.insert(REQUESTS_TEXT.into(), text.into());
    params
}

#[test]
fn a_request_file_is_sent_line_by_line_in_its_order_and_recorded_by_name() {
    let server = Server::start(Mode::Line);
    let text = "# keys\nGET a\\r\\n\n\nSET b 1\\n\r\n  \nGET \\x63\\n";
    let want: [&[u8]; 3] = [b"GET a\r\n", b"SET b 1\n", b"GET c\n"];
    let params = with_file(
        server.addr,
        text,
        &[("rate", "200"), ("connections", "1"), ("threads", "1")],
    );
    let spec = resolve_probe(PROBE, &params).unwrap();
    let resolved = &spec.resolved_params;
    assert_eq!(resolved["requests"], "keys.txt", "the name, for the record");
    assert_eq!(resolved["requests_order"], "sequence");
    for absent in [REQUESTS_TEXT, "request", "requests_seed"] {
        assert!(!resolved.contains_key(absent), "{absent}: {resolved:?}");
    }

    let outcome = run(&params, 400);
    assert_accounted(&outcome);
    assert_eq!(counter(&outcome, metrics::ERRORS_IO), 0.0);
    // One connection of one thread: the server gets the file's lines in order, wrapping.
    let seen = server.seen.lock().unwrap().clone();
    assert!(seen.len() > want.len(), "{seen:?}");
    for (k, request) in seen.iter().enumerate() {
        assert_eq!(request.as_slice(), want[k % want.len()], "request {k}");
    }
}

#[test]
fn random_order_keeps_its_seed_in_the_record() {
    let params = with_file(
        "127.0.0.1:9".parse().unwrap(),
        "A\\n\nB\\n\n",
        &[("requests_order", "random"), ("requests_seed", "42")],
    );
    let spec = resolve_probe(PROBE, &params).unwrap();
    assert_eq!(spec.resolved_params["requests_order"], "random");
    assert_eq!(spec.resolved_params["requests_seed"], "42");
}

#[test]
fn raw_requests_are_copied_once_into_one_buffer() {
    let requests = vec![b"GET a\r\n".to_vec(), b"x".to_vec(), b"SET bb 1\n".to_vec()];
    let set = RequestSet::raw_many(&requests);
    assert_eq!(set.len(), 3);
    for (i, request) in requests.iter().enumerate() {
        assert_eq!(set.bytes(i), request.as_slice());
        assert!(!set.is_head(i));
    }
    assert_eq!(set.longest(), 9);
}
