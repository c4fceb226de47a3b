//! Network probes between two real agents in two network namespaces joined by a veth pair:
//! the only addresses that carry traffic are the namespaces' own (10.201.0.1 and 10.201.0.2).
//! The `http` probe too: the measured host's agent starts the test server in one namespace,
//! the load agent in the other sends it requests across the pair.
//! Needs root (CI runs as root); fails, rather than skips, without it.

mod common;

use common::servers::processes_of;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// Two namespaces, qbtA and qbtB (suffixed by pid and a count, so parallel runs and tests
/// cannot collide), joined by a veth pair; removed when dropped.
struct Namespaces {
    a: String,
    b: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("the ip command (iproute2) runs");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Namespaces {
    fn create() -> Self {
        assert!(
            nix::unistd::geteuid().is_root(),
            "network namespaces need root (CI runs as root)"
        );
        // Unique per test as well as per process: the tests of this file run at once.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("{}x{n}", std::process::id() % 100_000);
        let (a, b) = (format!("qbtA{id}"), format!("qbtB{id}"));
        let (va, vb) = (format!("qva{id}"), format!("qvb{id}"));
        ip(&["netns", "add", &a]);
        let ns = Self {
            a: a.clone(),
            b: b.clone(),
        };
        ip(&["netns", "add", &b]);
        ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb]);
        ip(&["link", "set", &va, "netns", &a]);
        ip(&["link", "set", &vb, "netns", &b]);
        for (n, v, addr) in [(&a, &va, "10.201.0.1/24"), (&b, &vb, "10.201.0.2/24")] {
            ip(&["-n", n, "addr", "add", addr, "dev", v]);
            ip(&["-n", n, "link", "set", v, "up"]);
            ip(&["-n", n, "link", "set", "lo", "up"]);
        }
        ns
    }

    fn agent(&self, ns: &str, addr: &str) -> (Child, String) {
        self.agent_with(ns, addr, &[])
    }

    /// An agent in `ns` listening on `addr`, with `extra` flags (e.g. `--allow-exec`).
    fn agent_with(&self, ns: &str, addr: &str, extra: &[&str]) -> (Child, String) {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(common::quietbench_bin())
            // A veth address is not loopback: plain gRPC needs --insecure (the namespaces are
            // this test's own, reachable from nowhere else).
            .args(["agent", "--listen", &format!("{addr}:0"), "--insecure"])
            .args(extra)
            .env("QUIETBENCH_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let listen = line.trim().rsplit(' ').next().unwrap().to_string();
        (child, listen)
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        // Deleting a namespace removes its end of the veth pair, and the pair with it.
        for n in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run_in(ns: &str, args: &[&str], json: &std::path::Path) -> Value {
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(common::quietbench_bin())
        .args(args)
        .arg("--json")
        .arg(json)
        .arg("--no-store")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap()
}

fn metric<'a>(trial: &'a Value, name: &str) -> &'a Value {
    trial["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no metric {name} in {trial}"))
}

#[test]
fn throughput_and_round_trips_cross_a_veth_pair() {
    let ns = Namespaces::create();
    let (a, a_addr) = ns.agent(&ns.a, "10.201.0.1");
    let _a = Kill(a);
    let (b, b_addr) = ns.agent(&ns.b, "10.201.0.2");
    let _b = Kill(b);
    let dir = tempfile::tempdir().unwrap();
    // One 1 s trial of `probe` from the agent in A, its peer the agent in B.
    let run_across = |probe: &str, params: &[&str], json: &str| {
        let mut args = vec![
            "run", "--agent", &a_addr, "--peer", &b_addr, "--probe", probe,
        ];
        for param in params {
            args.extend(["--param", param]);
        }
        args.extend(["--rounds", "1", "--duration", "1"]);
        run_in(&ns.a, &args, &dir.path().join(json))
    };

    let report = run_across("net.throughput", &[], "tput.json");
    let trial = &report["trials"][0];
    assert_eq!(trial["peer"], b_addr.as_str());
    assert!(
        trial["placement"]["threads"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
    );
    let gbit = metric(trial, "gbit_per_sec")["value"].as_f64().unwrap();
    // A rate depends on this machine and its load; that bytes crossed does not.
    assert!(gbit > 0.0, "{gbit} Gbit/s across veth");
    assert!(metric(trial, "tcp_retransmits")["value"].as_f64().is_some());
    // The peer's reader moved to the CPU that handled its flow's packets: across veth on one
    // machine, the sending thread's.
    let sender_cpu = &trial["placement"]["threads"][0]["planned_cpu"];
    assert_eq!(
        trial["placement"]["peer_flow_cpus"],
        serde_json::json!([{"cpu": sender_cpu, "flows": 1}]),
        "{trial}"
    );

    // Three flows from one thread, written in turn.
    let report = run_across("net.throughput", &["flows_per_thread=3"], "tput-mux.json");
    let trial = &report["trials"][0];
    assert_eq!(trial["params"]["flows_per_thread"], "3", "{trial}");
    let sender_cpu = &trial["placement"]["threads"][0]["planned_cpu"];
    assert_eq!(
        trial["placement"]["peer_flow_cpus"],
        serde_json::json!([{"cpu": sender_cpu, "flows": 3}]),
        "{trial}"
    );
    let gbit = metric(trial, "gbit_per_sec")["value"].as_f64().unwrap();
    assert!(
        gbit > 0.0,
        "{gbit} Gbit/s across veth from one thread of three flows"
    );

    for protocol in ["tcp", "udp"] {
        let report = run_across(
            "net.rr",
            &[&format!("protocol={protocol}")],
            &format!("rr-{protocol}.json"),
        );
        let trial = &report["trials"][0];
        let latency = trial["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["histogram"].is_string())
            .unwrap_or_else(|| panic!("no latency histogram: {trial}"));
        // In nanoseconds: a round trip through two kernel stacks takes well over a microsecond
        // on any machine (noise only lengthens it). How much longer, and so how many fit in
        // the second, depends on the machine and its load.
        let p50 = latency["p50"].as_f64().unwrap();
        assert!(p50 >= 1_000.0, "{protocol} p50 {p50} ns");
        assert!(
            latency["min"].as_f64().unwrap() <= p50 && p50 <= latency["max"].as_f64().unwrap(),
            "{latency}"
        );
        assert!(latency["count"].as_u64().unwrap() >= 1);
        // Round trips are served where the scheduler puts them: nothing moves.
        assert_eq!(
            trial["placement"]["peer_flow_cpus"],
            serde_json::json!([]),
            "{trial}"
        );
    }
}

#[test]
fn a_server_in_one_namespace_is_timed_by_requests_from_the_other() {
    let ns = Namespaces::create();
    // The measured host runs the user's server: its agent allows commands.
    let (a, a_addr) = ns.agent_with(&ns.a, "10.201.0.1", &["--allow-exec"]);
    let _a = Kill(a);
    let (b, b_addr) = ns.agent(&ns.b, "10.201.0.2");
    let _b = Kill(b);
    let dir = tempfile::tempdir().unwrap();
    // A copy of the test server under a name of this test's, to find its processes by.
    let server = dir.path().join("qb-netns-http-server");
    std::fs::copy(env!("CARGO_BIN_EXE_testserver"), &server).unwrap();
    let command = format!(
        "server={} --port {{port}} --bind 10.201.0.1 --work 1000",
        server.display()
    );
    let report = run_in(
        &ns.a,
        &[
            "run",
            "--agent",
            &a_addr,
            "--load-from",
            &b_addr,
            "--probe",
            "http",
            "--param",
            &command,
            "--param",
            "rate=100",
            "--param",
            "connections=2",
            // The generator's lag bound is the probe's own test, not this one's.
            "--param",
            "max_lag_ms=1000",
            "--rounds",
            "1",
            "--duration",
            "1",
        ],
        &dir.path().join("http.json"),
    );
    let trial = &report["trials"][0];
    // The load came from the agent in the other namespace, to the server this trial started.
    assert_eq!(trial["peer"], b_addr.as_str(), "{trial}");
    let latency = metric(trial, "request_latency");
    let count = latency["count"].as_u64().unwrap();
    // At 100/s for 1 s, at most 100 were due; that any crossed the pair does not depend on
    // the machine's speed.
    assert!((1..=101).contains(&count), "{count} requests: {latency}");
    // Across two kernel stacks and a veth pair: well over a microsecond on any machine.
    assert!(latency["p50"].as_f64().unwrap() >= 1_000.0, "{latency}");
    for errors in [
        "errors_connect",
        "errors_timeout",
        "errors_5xx",
        "errors_io",
    ] {
        assert_eq!(
            metric(trial, errors)["value"].as_f64(),
            Some(0.0),
            "{errors}"
        );
    }
    assert!(metric(trial, "server_cpu_time")["value"].as_f64().unwrap() > 0.0);
    assert!(
        processes_of(&server).is_empty(),
        "the server outlived its trial: {:?}",
        processes_of(&server)
    );
}
