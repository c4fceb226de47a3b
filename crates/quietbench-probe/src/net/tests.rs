//! The network probes end to end on loopback: a real [`PeerServer`], real sockets, the real
//! harness (`run_trial`).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use super::wire::{self, Header, Mode};
use super::*;
use crate::affinity::current_thread_affinity;
use crate::{Counter, TrialOutcome, TrialSettings, plan_placement, resolve_probe, run_trial};

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// The tests' trial secret.
const SECRET: Secret = Secret([7; wire::SECRET_LEN]);

/// A header with no buffer size and no pacing.
fn header(mode: Mode, request_bytes: u32, response_bytes: u32) -> Header {
    Header {
        mode,
        request_bytes,
        response_bytes,
        buffer_bytes: 0,
        pacing_mbit: 0,
        secret: SECRET,
    }
}

fn server() -> PeerServer {
    PeerServer::start(LOOPBACK, &[], SECRET).unwrap()
}

fn params(server: &PeerServer, pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut params: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    params.insert("peer".into(), format!("127.0.0.1:{}", server.tcp_port()));
    params.insert("peer_udp".into(), server.udp_port().to_string());
    params.insert("peer_secret".into(), SECRET.to_hex());
    params
}

fn run(probe: &str, params: &BTreeMap<String, String>, millis: u64) -> TrialOutcome {
    let spec = resolve_probe(probe, params).unwrap();
    let allowed = current_thread_affinity().unwrap();
    let settings = TrialSettings {
        duration: Duration::from_millis(millis),
        interval: Duration::from_millis(100),
        plan: plan_placement(spec.threads, &allowed, &[]).unwrap(),
        unpinned: None,
    };
    let cancel = Arc::new(AtomicBool::new(false));
    run_trial(&spec, &settings, &cancel, &mut |_| true).unwrap()
}

fn counter<'a>(outcome: &'a TrialOutcome, name: &str) -> &'a Counter {
    crate::vocab_tests::assert_counters_registered(&outcome.counters);
    outcome
        .counters
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no counter {name} in {:?}", outcome.counters))
}

fn gbit(outcome: &TrialOutcome, metric_set: usize) -> f64 {
    outcome.total.metric_sets[metric_set].throughput.unwrap()
}

#[test]
fn throughput_moves_bytes_each_way_and_reports_tcp_info() {
    let server = server();
    for (mode, metric_sets) in [("send", 1), ("reverse", 1), ("bidir", 2)] {
        let outcome = run(
            "net.throughput",
            &params(&server, &[("mode", mode), ("threads", "2")]),
            300,
        );
        assert_eq!(outcome.total.metric_sets.len(), metric_sets, "{mode}");
        for v in 0..metric_sets {
            let report = &outcome.total.metric_sets[v];
            assert!(report.events > 0 && report.bytes > 0, "{mode}: {report:?}");
            assert!(gbit(&outcome, v) > 0.0, "{mode}");
        }
        // Reverse flows' figures come from the server's trailer: present means it arrived.
        assert!(counter(&outcome, "tcp_retransmits").value >= 0.0, "{mode}");
        assert!(counter(&outcome, "tcp_rtt_us").value > 0.0, "{mode}");
    }
    server.stop();
}

#[test]
fn one_thread_drives_several_flows_in_turn() {
    let server = server();
    let outcome = run(
        "net.throughput",
        &params(&server, &[("threads", "1"), ("flows_per_thread", "3")]),
        300,
    );
    let report = &outcome.total.metric_sets[0];
    assert!(report.events > 0 && report.bytes > 0, "{report:?}");
    assert!(gbit(&outcome, 0) > 0.0);
    assert!(counter(&outcome, "tcp_rtt_us").value > 0.0);
    // The server served three sinks: the flows' connections each got a thread.
    assert!(
        server.connections_served() >= 3,
        "{}",
        server.connections_served()
    );
    let err = resolve_probe(
        "net.throughput",
        &params(&server, &[("mode", "reverse"), ("flows_per_thread", "2")]),
    )
    .map(|_| ())
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("flows_per_thread") && err.contains("mode=send"),
        "{err}"
    );
    server.stop();
}

#[test]
fn paced_flows_say_whether_fq_paces_them() {
    let server = server();
    let outcome = run(
        "net.throughput",
        &params(&server, &[("pacing_mbit", "200"), ("buffer_kib", "0")]),
        300,
    );
    let rate = gbit(&outcome, 0);
    // Paced to 0.2 Gbit/s. What sits in the socket buffer at the end (up to tcp_wmem's
    // maximum, 4 MiB by default: 0.1 Gbit/s over 0.3 s) is counted as sent too; unpaced,
    // loopback moves tens of Gbit/s.
    assert!(rate > 0.0 && rate < 1.0, "{rate} Gbit/s paced to 0.2");
    assert!((0.0..=1.0).contains(&counter(&outcome, "fq_qdisc").value));
}

#[test]
fn round_trips_over_tcp_and_udp() {
    let server = server();
    for protocol in ["tcp", "udp"] {
        let outcome = run("net.rr", &params(&server, &[("protocol", protocol)]), 300);
        let report = &outcome.total.metric_sets[0];
        assert!(
            report.events > 100,
            "{protocol}: {} round trips",
            report.events
        );
        let p50 = report.latency_ns.value_at_quantile(0.5);
        assert!(
            (1_000..50_000_000).contains(&p50),
            "{protocol} p50 {p50} ns"
        );
        if protocol == "tcp" {
            assert!(counter(&outcome, "tcp_retransmits").value >= 0.0);
            assert!(counter(&outcome, "tcp_rtt_us").value > 0.0);
        } else {
            assert_eq!(counter(&outcome, "udp_lost").value, 0.0);
        }
    }
}

#[test]
fn open_loop_keeps_its_schedule_and_counts_late_sends() {
    let server = server();
    let outcome = run(
        "net.rr",
        &params(
            &server,
            &[
                ("rate", "2000"),
                ("request_bytes", "64"),
                ("response_bytes", "1000"),
            ],
        ),
        400,
    );
    let report = &outcome.total.metric_sets[0];
    // 2000/s for 0.4 s: never more than the schedule (800, plus the edges); fewer only when
    // round trips fall behind, which a loaded 2-vCPU machine can make last up to about 1 ms.
    assert!(
        (400..=900).contains(&report.events),
        "{} requests",
        report.events
    );
    assert_eq!(report.bytes, report.events * 1064);
    let late = counter(&outcome, "late_sends").value;
    assert!(late < report.events as f64, "{late} late");
}

fn bad(probe: &str, pairs: &[(&str, &str)]) -> String {
    let params = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    resolve_probe(probe, &params).unwrap_err().to_string()
}

#[test]
fn bad_parameters_are_clear_errors() {
    let hex = SECRET.to_hex();
    let peer = ("peer", "127.0.0.1:9");
    let secret = ("peer_secret", hex.as_str());
    let err = bad("net.throughput", &[]);
    assert!(err.contains("peer") && err.contains("required"), "{err}");
    let err = bad("net.throughput", &[("peer", "nonsense"), secret]);
    assert!(err.contains("HOST:PORT"), "{err}");
    let err = bad("net.throughput", &[("peer", "127.0.0.1:0"), secret]);
    assert!(err.contains("port"), "{err}");
    let err = bad("net.throughput", &[peer, secret, ("mode", "sideways")]);
    assert!(err.contains("send, reverse or bidir"), "{err}");
    let err = bad("net.throughput", &[peer, secret, ("write_kib", "1000000")]);
    assert!(err.contains("write_kib") && err.contains("1024"), "{err}");
    let err = bad(
        "net.throughput",
        &[peer, secret, ("buffer_kib", "99999999999")],
    );
    assert!(err.contains("buffer_kib"), "{err}");
    let err = bad("net.throughput", &[peer, secret, ("protocol", "udp")]);
    assert!(err.contains("mode") && err.contains("peer_udp"), "{err}");
    let err = bad("net.rr", &[peer, secret, ("request_bytes", "4294967296")]);
    assert!(err.contains("request_bytes"), "{err}");
    let err = bad("net.rr", &[peer, secret, ("protocol", "sctp")]);
    assert!(err.contains("tcp or udp"), "{err}");
    let err = bad("net.rr", &[peer, secret, ("protocol", "udp")]);
    assert!(err.contains("peer_udp"), "{err}");
    let udp = [peer, ("protocol", "udp"), ("peer_udp", "9"), secret];
    let err = bad(
        "net.rr",
        &[udp[0], udp[1], udp[2], udp[3], ("request_bytes", "16")],
    );
    assert!(err.contains("32..=65507"), "{err}");
    let err = bad(
        "net.rr",
        &[udp[0], udp[1], udp[2], udp[3], ("response_bytes", "70000")],
    );
    assert!(err.contains("response_bytes"), "{err}");

    let params = udp
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let spec = resolve_probe("net.rr", &params).unwrap();
    assert_eq!(spec.resolved_params["request_bytes"], "32");
    assert_eq!(spec.resolved_params["response_bytes"], "16");
    assert_eq!(spec.work, crate::placement::WorkKind::Network);
}

#[test]
fn an_unreachable_peer_fails_the_trial_with_its_address() {
    // A port nobody listens on: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let params = [
        ("peer".to_string(), format!("127.0.0.1:{port}")),
        ("peer_secret".to_string(), SECRET.to_hex()),
    ]
    .into();
    let spec = resolve_probe("net.throughput", &params).unwrap();
    let err = spec.workload(0).err().unwrap();
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
}

fn echo_round_trip(server: &PeerServer) {
    let mut stream = TcpStream::connect((LOOPBACK, server.tcp_port())).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let header = header(Mode::Echo, 3, 5);
    stream.write_all(&header.encode()).unwrap();
    stream.write_all(b"abc").unwrap();
    let mut response = [0u8; 5];
    stream.read_exact(&mut response).unwrap();
}

#[test]
fn garbage_is_refused_and_the_server_still_serves() {
    let server = server();
    let garbage: [&[u8]; 4] = [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        &[0xff; 24],
        // Our header, asking for a 4 GiB request.
        &header(Mode::Echo, u32::MAX, 1).encode(),
        b"QB",
    ];
    for bytes in garbage {
        let mut stream = TcpStream::connect((LOOPBACK, server.tcp_port())).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream.write_all(bytes).unwrap();
        if bytes.len() >= wire::HEADER_LEN {
            // Closed by the server at once: end of stream (or a reset, the bytes it did not
            // read), never a response and never the 5 s timeout.
            let mut buf = [0u8; 16];
            match stream.read(&mut buf) {
                Ok(0) => {}
                Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
                Ok(n) => panic!("{n} bytes of response to garbage"),
            }
        }
    }
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.send_to(b"not ours", (LOOPBACK, server.udp_port()))
        .unwrap();
    let mut short = [0u8; wire::UDP_MIN as usize];
    wire::encode_udp_request(&mut short, 1, u32::MAX, &SECRET);
    udp.send_to(&short, (LOOPBACK, server.udp_port())).unwrap();
    echo_round_trip(&server);
    let outcome = run("net.rr", &params(&server, &[("protocol", "udp")]), 100);
    assert!(outcome.total.events() > 0);
}

#[test]
fn stop_returns_promptly_with_connections_open() {
    let server = server();
    let addr = SocketAddr::new(LOOPBACK, server.tcp_port());
    // An idle connection without a header, a source nobody reads, an echo mid-request.
    let idle = TcpStream::connect(addr).unwrap();
    let source = super::throughput::connect(addr, &header(Mode::Source, 0, 1 << 20)).unwrap();
    let echo = super::throughput::connect(addr, &header(Mode::Echo, 1000, 1)).unwrap();
    (&echo).write_all(&[1; 10]).unwrap();
    echo_round_trip(&server);
    std::thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    server.stop();
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "stop took {:?}",
        started.elapsed()
    );
    // Every connection was closed by the server.
    for mut stream in [&idle, &echo] {
        stream
            .set_read_timeout(Some(Duration::from_secs(1)))
            .unwrap();
        let mut buf = [0u8; 4];
        match stream.read(&mut buf) {
            Ok(0) => {}
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
            Ok(n) => panic!("{n} bytes after stop"),
        }
    }
    drop(source);
}

#[test]
fn dropping_the_server_stops_it() {
    let server = server();
    let port = server.tcp_port();
    let _conn = TcpStream::connect((LOOPBACK, port)).unwrap();
    let started = Instant::now();
    drop(server);
    assert!(started.elapsed() < Duration::from_millis(500));
    assert!(TcpStream::connect((LOOPBACK, port)).is_err());
}

/// Loopback figures to compare by hand with iperf3 and sockperf, printed with `--nocapture`
/// (benches/peer/*.sh run it when the agents cannot pair yet). The server's threads on the first
/// allowed CPU, the client on the last, as two hosts would have them; QB_NET_FIGURES_MS sets
/// each measurement's length (default 300 ms, a smoke test). It asserts only what holds at any
/// speed: bytes and round trips counted, rates finite and positive, TCP figures present.
#[test]
fn loopback_figures() {
    let millis = std::env::var("QB_NET_FIGURES_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let allowed = current_thread_affinity().unwrap();
    let server = PeerServer::start(LOOPBACK, &allowed[..1], SECRET).unwrap();
    let client = *allowed.last().unwrap();
    let measure = |probe: &str, pairs: &[(&str, &str)]| {
        let spec = resolve_probe(probe, &params(&server, pairs)).unwrap();
        let settings = TrialSettings {
            duration: Duration::from_millis(millis),
            interval: Duration::from_millis(100),
            plan: plan_placement(spec.threads, &allowed, &vec![client; spec.threads]).unwrap(),
            unpinned: None,
        };
        let cancel = Arc::new(AtomicBool::new(false));
        run_trial(&spec, &settings, &cancel, &mut |_| true).unwrap()
    };
    let flow = measure("net.throughput", &[]);
    // Whatever the speed: bytes moved and counted, a finite positive rate, and the kernel's TCP
    // figures reported rather than left out.
    let sent = &flow.total.metric_sets[0];
    assert!(
        sent.events > 0 && sent.bytes > 0,
        "no bytes counted: {sent:?}"
    );
    assert!(gbit(&flow, 0).is_finite() && gbit(&flow, 0) > 0.0);
    for name in ["tcp_retransmits", "tcp_rtt_us"] {
        let counter = flow.counters.iter().find(|c| c.name == name);
        let value = counter.unwrap_or_else(|| panic!("no {name} counter")).value;
        assert!(value.is_finite() && value >= 0.0, "{name} = {value}");
    }
    println!(
        "loopback net.throughput: {:.2} Gbit/s (server CPU {}, client CPU {client})",
        gbit(&flow, 0),
        allowed[0]
    );
    for protocol in ["tcp", "udp"] {
        let rr = measure(
            "net.rr",
            &[
                ("protocol", protocol),
                // UDP's smallest request: a header and the trial's secret.
                ("request_bytes", "32"),
                ("response_bytes", "32"),
            ],
        );
        let trips = &rr.total.metric_sets[0];
        let p50 = trips.latency_ns.value_at_quantile(0.5);
        assert!(
            trips.events > 0 && p50 > 0,
            "no round trips timed: {trips:?}"
        );
        assert!(trips.events_per_sec.is_finite() && trips.events_per_sec > 0.0);
        assert!(trips.latency_ns.min() > 0, "a round trip timed at 0 ns");
        println!(
            "loopback net.rr {protocol}: median round trip {:.2} us",
            p50 as f64 / 1e3
        );
    }
}

/// Connects a source flow from a thread pinned to `cpu` and reads its first bytes (so the
/// server has read the header and placed itself).
fn source_flow_from(server: &PeerServer, cpu: u32) -> TcpStream {
    let port = server.tcp_port();
    std::thread::spawn(move || {
        crate::affinity::pin_current_thread(&[cpu]).unwrap();
        let mut stream = TcpStream::connect((LOOPBACK, port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let header = header(Mode::Source, 0, 4096);
        stream.write_all(&header.encode()).unwrap();
        let mut first = [0u8; 1];
        stream.read_exact(&mut first).unwrap();
        stream
    })
    .join()
    .unwrap()
}

#[test]
fn throughput_connections_follow_their_flows_cpu() {
    let allowed = current_thread_affinity().unwrap();
    // Unrestricted (both ends on one machine): each connection moves to its sender's CPU.
    let server = server();
    let mut expected = BTreeMap::new();
    let mut flows = Vec::new();
    for &cpu in &allowed {
        flows.push(source_flow_from(&server, cpu));
        *expected.entry(cpu).or_insert(0u64) += 1;
        assert_eq!(
            server.flows_followed(),
            expected,
            "after a flow from CPU {cpu}"
        );
    }
    drop(flows);
    // Restricted to the first CPU: a flow handled on another CPU stays where it was put.
    if let [first, .., last] = allowed[..] {
        let server = PeerServer::start(LOOPBACK, &[first], SECRET).unwrap();
        let _flow = source_flow_from(&server, last);
        assert!(server.flows_followed().is_empty());
        let _flow = source_flow_from(&server, first);
        assert_eq!(server.flows_followed(), BTreeMap::from([(first, 1)]));
    }
}

#[test]
fn connections_and_datagrams_without_the_trials_secret_are_not_served() {
    let server = server();
    // A well-formed header with another secret: closed at once, counted, never served.
    let mut stream = TcpStream::connect((LOOPBACK, server.tcp_port())).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut other = header(Mode::Source, 0, 4096);
    other.secret = Secret([8; wire::SECRET_LEN]);
    stream.write_all(&other.encode()).unwrap();
    let mut buf = [0u8; 64];
    match stream.read(&mut buf) {
        Ok(0) => {}
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
        Ok(n) => panic!("a source without the secret sent {n} bytes"),
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while server.connections_refused() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the refusal was not counted"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // A UDP request with another secret gets no response.
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut request = [0u8; wire::UDP_MIN as usize];
    wire::encode_udp_request(&mut request, 1, 64, &Secret([9; wire::SECRET_LEN]));
    udp.send_to(&request, (LOOPBACK, server.udp_port()))
        .unwrap();
    assert!(
        udp.recv(&mut buf).is_err(),
        "answered a datagram without the secret"
    );
    // With it, both are served.
    wire::encode_udp_request(&mut request, 2, 64, &SECRET);
    udp.send_to(&request, (LOOPBACK, server.udp_port()))
        .unwrap();
    assert_eq!(udp.recv(&mut buf).unwrap(), 64);
    echo_round_trip(&server);
    // And a probe without a secret is refused before it connects.
    let mut no_secret = params(&server, &[]);
    no_secret.remove("peer_secret");
    let err = resolve_probe("net.rr", &no_secret)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("peer_secret") && err.contains("32 hex digits"),
        "{err}"
    );
    // The secret is never among the resolved (reported) parameters.
    let spec = resolve_probe("net.rr", &params(&server, &[])).unwrap();
    assert!(!spec.resolved_params.contains_key("peer_secret"));
}
