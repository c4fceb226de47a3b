//! `quietbench run --local` end to end: a real agent process, real gRPC, a real JSON report
//! checked field by field, and its histograms decoded by a second, non-Rust HdrHistogram
//! implementation (Python's `hdrhistogram` package).

mod common;

use std::process::Command;

use base64::Engine;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::Deserializer;
use serde_json::Value;

fn decode(b64: &str) -> Histogram<u64> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("valid base64");
    Deserializer::new()
        .deserialize(&mut &bytes[..])
        .expect("HdrHistogram V2")
}

fn metric<'a>(trial: &'a Value, name: &str) -> &'a Value {
    trial["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("trial has no metric {name}: {trial}"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn two_rounds_of_cpu_primes_produce_a_complete_report() {
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("report.json");
    let started = std::time::Instant::now();
    let out = common::quietbench()
        .args([
            "run",
            "--local",
            "--rounds",
            "2",
            "--duration",
            "1",
            "--json",
        ])
        .arg(&json_path)
        .output()
        .unwrap();
    // What a trial may last is bounded by the whole command, not by a guess at this machine's
    // speed.
    let wall_s = started.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );

    let live = quietbench_host::read_fingerprint(&quietbench_host::HostRoot::live());
    let model = live.cpu.expect("this machine's CPU model").model_name;
    assert!(
        stdout.contains(&model),
        "the table names the CPU model {model:?}:\n{stdout}"
    );
    assert!(
        stdout.contains("events_per_sec") && stdout.contains("event_latency"),
        "{stdout}"
    );

    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    assert_eq!(report["schema"], "quietbench.run-report.v1");
    assert!(report["run_id"].as_str().is_some_and(|id| id.len() >= 16));
    assert_eq!(report["complete"], true);
    assert_eq!(report["error"], Value::Null);
    assert!(report["started_at"].as_str().unwrap() <= report["finished_at"].as_str().unwrap());
    assert_eq!(report["settings"]["rounds"], 2);
    assert_eq!(report["settings"]["probes"][0], "cpu.primes");

    let hosts = report["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 1);
    let host = &hosts[0];
    assert_eq!(host["kind"], "local");
    assert!(host["address"].as_str().unwrap().starts_with("127.0.0.1:"));
    let fp = &host["fingerprint"];
    assert_eq!(fp["cpu_model_name"], model.as_str());
    assert_eq!(fp["logical_cpus"], live.online_cpus.len());
    assert_eq!(fp["kernel_release"], live.kernel_release.unwrap().as_str());
    assert_eq!(fp["clocksource"], live.clocksource.unwrap().as_str());

    let trials = report["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 2);
    for (i, trial) in trials.iter().enumerate() {
        assert_eq!(trial["probe"], "cpu.primes");
        assert_eq!(trial["round"], i + 1);
        assert_eq!(trial["host"], host["address"]);
        assert_eq!(trial["cancelled"], false);
        assert_eq!(trial["params"]["max_prime"], "10000");
        assert_eq!(trial["params"]["threads"], "1");
        // The thread stops at its first event past 1 s; how far past depends on the load.
        let duration = f(&trial["duration_s"]);
        assert!(
            (0.999..wall_s).contains(&duration),
            "trial lasted {duration} s of the command's {wall_s} s"
        );
        assert_eq!(trial["intervals"], 1);

        let placement = &trial["placement"];
        assert_eq!(placement["matches_plan"], true, "{placement}");
        let thread = &placement["threads"][0];
        assert_eq!(
            thread["affinity_cpus"],
            serde_json::json!([thread["planned_cpu"]])
        );
        if live.online_cpus.len() > 1 {
            assert_ne!(
                thread["planned_cpu"], 0,
                "quiet-first keeps CPU 0 for housekeeping"
            );
        }

        let rate = metric(trial, "events_per_sec");
        assert_eq!(rate["unit"], "events/s");
        assert_eq!(rate["stats_of"], "intervals");
        assert_eq!(rate["histogram"], Value::Null);
        let events_per_sec = f(&rate["value"]);
        assert!(events_per_sec > 0.0, "{events_per_sec} events/s");

        let latency = metric(trial, "event_latency");
        assert_eq!(latency["unit"], "ns");
        assert_eq!(latency["stats_of"], "histogram");
        let hist = decode(latency["histogram"].as_str().unwrap());
        assert_eq!(hist.len(), latency["count"].as_u64().unwrap());
        assert_eq!(hist.value_at_quantile(0.99) as f64, f(&latency["p99"]));
        let (p50, p90, p99, p999) = (
            f(&latency["p50"]),
            f(&latency["p90"]),
            f(&latency["p99"]),
            f(&latency["p999"]),
        );
        assert!(f(&latency["min"]) <= p50 && p50 <= p90 && p90 <= p99 && p99 <= p999);
        assert!(p999 <= f(&latency["max"]));
        // One thread, back-to-back events: events/s x mean latency is one second of events.
        // Not a speed: each event is timed from the end of the one before, so the latencies add
        // up to the measured time exactly, however loaded the machine; the tolerance is the
        // histogram's rounding.
        let busy = events_per_sec * f(&latency["mean"]) / 1e9;
        assert!((0.95..1.02).contains(&busy), "rate x latency = {busy}");
        // Events counted two ways agree: histogram samples over the measured time.
        let rate_from_hist = hist.len() as f64 / duration;
        assert!((rate_from_hist / events_per_sec - 1.0).abs() < 0.02);
    }

    for trial in trials {
        let noise = &trial["noise"];
        assert_eq!(
            noise["cpus"],
            serde_json::json!([trial["placement"]["threads"][0]["planned_cpu"]])
        );
        // Sampled just before the threads start and after their last interval: it spans the
        // trial, and lies within the command.
        let elapsed = f(&noise["elapsed_s"]);
        assert!(
            f(&trial["duration_s"]) - 1e-3 <= elapsed && elapsed < wall_s,
            "{noise}"
        );
        // This VM (and CI's) exposes every one of these; a monitor that cannot read says so in
        // `unavailable`, never with a zero.
        for field in ["steal_fraction", "foreign_cpu_fraction"] {
            let v = f(&noise[field]);
            assert!((0.0..=1.0).contains(&v), "{field} = {v}");
        }
        for field in ["interrupts", "softirqs", "involuntary_switches"] {
            assert!(noise[field].as_u64().is_some(), "{field}: {noise}");
        }
        assert!(f(&noise["runqueue_wait_s"]) >= 0.0);
    }

    let summary = report["summary"].as_array().unwrap();
    let rate_row = summary
        .iter()
        .find(|s| s["metric"] == "events_per_sec")
        .unwrap();
    assert_eq!(rate_row["n"], 2);
    let values: Vec<f64> = trials
        .iter()
        .map(|t| f(&metric(t, "events_per_sec")["value"]))
        .collect();
    assert!((f(&rate_row["mean"]) - (values[0] + values[1]) / 2.0).abs() < 1e-6);
    assert!(rate_row["cv"].as_f64().is_some());
}

#[test]
fn histograms_decode_in_a_non_rust_hdrhistogram() {
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("report.json");
    let out = common::quietbench()
        .args([
            "run",
            "--local",
            "--rounds",
            "1",
            "--duration",
            "0.5",
            "--json",
        ])
        .arg(&json_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let latency = metric(&report["trials"][0], "event_latency");
    let b64 = latency["histogram"].as_str().unwrap();
    // Compare what decoding must preserve: the total, the extremes and the count at every
    // recorded value. Not percentiles: the two libraries round a percentile's rank differently
    // (Rust's hdrhistogram and Python's hdrh pick different samples of a sparse tail, e.g.
    // p99.9 of 40.4 ms against 44.5 ms from the same bytes), which says nothing about decoding.
    let script = r#"
import json, sys
try:
    from hdrh.histogram import HdrHistogram
except ImportError:
    sys.exit("python3 lacks the hdrhistogram package: pip install hdrhistogram (.ci/run does)")
h = HdrHistogram.decode(sys.argv[1])
recorded = [[i.value_iterated_to, i.count_at_value_iterated_to] for i in h.get_recorded_iterator()]
print(json.dumps({"count": h.get_total_count(), "min": h.get_min_value(),
                  "max": h.get_max_value(), "recorded": recorded}))
"#;
    let py = Command::new("python3")
        .args(["-c", script, b64])
        .output()
        .expect("python3 runs");
    assert!(
        py.status.success(),
        "python decoder failed: {}",
        String::from_utf8_lossy(&py.stderr)
    );
    let python: Value = serde_json::from_slice(&py.stdout).unwrap();
    let rust = decode(b64);
    let recorded: Vec<[u64; 2]> = rust
        .iter_recorded()
        .map(|v| [v.value_iterated_to(), v.count_at_value()])
        .collect();
    assert!(!recorded.is_empty());
    assert_eq!(python["recorded"], serde_json::json!(recorded));
    assert_eq!(python["count"], rust.len());
    assert_eq!(python["min"], rust.min());
    assert_eq!(python["max"], rust.max());
    // And both agree with the report's own fields.
    assert_eq!(f(&python["count"]), f(&latency["count"]));
    assert_eq!(f(&python["min"]), f(&latency["min"]));
    assert_eq!(f(&python["max"]), f(&latency["max"]));
}

#[test]
fn cpu_spawn_times_aslr_on_and_off_in_the_same_trial() {
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("spawn.json");
    let out = common::quietbench()
        .args([
            "run",
            "--local",
            "--probe",
            "cpu.spawn",
            "--rounds",
            "1",
            "--duration",
            "1",
            "--json",
        ])
        .arg(&json_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let trial = &report["trials"][0];
    let on = metric(trial, "spawn_latency_aslr_on");
    let off = metric(trial, "spawn_latency_aslr_off");
    let (n_on, n_off) = (
        on["count"].as_u64().unwrap(),
        off["count"].as_u64().unwrap(),
    );
    // Events alternate, so the two counts differ by at most one. How many fit in the second
    // depends on the machine and its load.
    assert!(n_on >= 1 && n_on.abs_diff(n_off) <= 1, "{n_on} vs {n_off}");
    for name in ["spawns_per_sec_aslr_on", "spawns_per_sec_aslr_off"] {
        let rate = f(&metric(trial, name)["value"]);
        assert!(rate > 0.0, "{name} = {rate}");
    }
    // A spawn is fork + exec + wait of a real binary: well above ten microseconds on any
    // machine (noise only lengthens it), which checks the unit is nanoseconds.
    assert!(f(&on["p50"]) > 10_000.0, "{on}");
}

/// The store named by `QUIETBENCH_DB` (a PostgreSQL password, in a CI job) is the controller's:
/// the run is stored there, and the commands an exec probe runs do not inherit it.
#[test]
fn the_store_variable_names_the_store_and_stays_out_of_benchmarked_commands() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("from-env.sqlite3");
    let seen = dir.path().join("env-seen");
    common::succeed(
        common::quietbench()
            .args(["run", "--local", "--probe", "exec", "--param", "shell=true"])
            .arg("--param")
            .arg(format!("cmd=env > {}", seen.display()))
            .args(["--rounds", "1", "--warmup", "0", "--duration", "0.2"])
            .env("QUIETBENCH_DB", &db),
    );
    let env = std::fs::read_to_string(&seen).unwrap();
    // The look must be able to see something: the command's environment is there.
    assert!(env.contains("PATH="), "{env}");
    assert!(!env.contains("QUIETBENCH_DB"), "{env}");
    let listed = common::succeed(common::quietbench().args(["runs", "--db"]).arg(&db));
    assert_eq!(listed.lines().count(), 2, "{listed}");
}
