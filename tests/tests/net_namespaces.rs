//! Network probes between two real agents in two network namespaces joined by a veth pair:
//! the only addresses that carry traffic are the namespaces' own (10.201.0.1 and 10.201.0.2).
//! Needs root (CI runs as root); fails, rather than skips, without it.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// Two namespaces, qbtA and qbtB (suffixed by pid so parallel runs cannot collide), joined by
/// a veth pair; removed when dropped.
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
        let id = std::process::id() % 100_000;
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
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(common::quietbench_bin())
            // A veth address is not loopback: plain gRPC needs --insecure (the namespaces are
            // this test's own, reachable from nowhere else).
            .args(["agent", "--listen", &format!("{addr}:0"), "--insecure"])
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
