//! CONTEXT.md §1's CPU lottery as a test, on fake agents with known figures
//! (quietbench-testkit): half of 20 hosts report the processor of a captured EC2 8259CL and half
//! this project's captured KVM Xeon (each parsed from its /proc/cpuinfo fixture), and each host's
//! `exec` trials report the time per invocation this file injects: 6% more on the 8259CL hosts,
//! up to 1% of scatter between hosts, 0.1% from trial to trial, and two slow hosts. The run's
//! report must group the hosts exactly by model, find the between-model share of the spread
//! within 2 points of the truth computed here from the injected figures, and flag the injected
//! outliers and no other host; `history` then shows one series per model.
//!
//! The fake agents measure nothing, so no assertion here depends on this machine's speed or
//! load: the same seed (`--seed`) gives the same trial order, the same injected figures and the
//! same report on every run. What real agents do end to end is tested in run_local.rs, fleet.rs
//! and the probes' own tests.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use quietbench_testkit::{Ask, Cpu, FakeFleet, FakeHost, Figure, Invocation, normal, splitmix64};
use serde_json::Value;

const HOSTS: usize = 20;
/// Seconds per invocation on the fast model.
const BASE_S: f64 = 0.5;
/// The 8259CL hosts' workload costs this much more.
const MODEL_COST: f64 = 1.06;
/// Injected slow hosts, one per model, and how much slower.
const OUTLIERS: [usize; 2] = [4, 7];
const OUTLIER_COST: f64 = 1.04;
/// The standard deviation of a trial's figure around its host's, relative.
const TRIAL_SD: f64 = 0.001;

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/quietbench-host/tests/fixtures")
        .join(path)
}

/// The captured processors: [KVM Xeon, EC2 8259CL].
fn captured_cpus() -> [Cpu; 2] {
    [
        "kvm-2vcpu-xeon/proc/cpuinfo",
        "public/ec2-8259cl-2vcpu/proc/cpuinfo",
    ]
    .map(|capture| Cpu::from_cpuinfo(&std::fs::read_to_string(fixture(capture)).unwrap()).unwrap())
}

/// `count` fake agents, the even ones on the captured 8259CL and the odd ones on the captured
/// KVM Xeon, each trial's figures from `figures`.
fn fleet_on_two_models(
    count: usize,
    figures: impl Fn(&Ask<'_>) -> Vec<Figure> + Send + Sync + Clone + 'static,
) -> FakeFleet {
    let cpus = captured_cpus();
    let hosts = (0..count)
        .map(|i| {
            FakeHost::new(
                &format!("fake-{i:03}"),
                cpus[usize::from(i.is_multiple_of(2))].clone(),
                figures.clone(),
            )
        })
        .collect();
    FakeFleet::start(hosts).unwrap()
}

/// A trial's own deviation of relative SD `sd`, fixed by what the trial is (`salt`, the host,
/// its number).
fn trial_noise(sd: f64, salt: u64, ask: &Ask<'_>) -> f64 {
    1.0 + sd * normal(splitmix64(salt ^ ((ask.host as u64) << 32) ^ ask.trial))
}

/// Host i: (is an 8259CL host, the cost factor injected on it).
fn injected(i: usize) -> (bool, f64) {
    let slow_model = i.is_multiple_of(2);
    // Up to 1% between hosts of a model, spread evenly: -0.5% .. +0.5%.
    let scatter = 1.0 + ((i / 2) as f64 / (HOSTS / 2 - 1) as f64 - 0.5) * 0.01;
    let model = if slow_model { MODEL_COST } else { 1.0 };
    let outlier = if OUTLIERS.contains(&i) {
        OUTLIER_COST
    } else {
        1.0
    };
    (slow_model, model * scatter * outlier)
}

/// The true between-model share from the injected figures: models are a fixed factor
/// (variance of their injected effects, weighted by hosts), hosts a random one (the variance of
/// each host's injected effect around its model's, with H - M degrees of freedom as the
/// estimator counts them), and rounds the injected trial-to-trial variance.
fn true_between_model_share() -> f64 {
    let mut by_model: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for i in 0..HOSTS {
        let (slow_model, cost) = injected(i);
        by_model[usize::from(slow_model)].push(cost.ln());
    }
    let model_effect = [0.0, MODEL_COST.ln()];
    let weights = by_model.each_ref().map(|m| m.len() as f64 / HOSTS as f64);
    let grand: f64 = (0..2).map(|m| weights[m] * model_effect[m]).sum();
    let between_models: f64 = (0..2)
        .map(|m| weights[m] * (model_effect[m] - grand).powi(2))
        .sum();
    let mut ss_hosts = 0.0;
    for hosts in &by_model {
        let mean = hosts.iter().sum::<f64>() / hosts.len() as f64;
        ss_hosts += hosts.iter().map(|c| (c - mean).powi(2)).sum::<f64>();
    }
    let between_hosts = ss_hosts / (HOSTS - 2) as f64;
    let within_host = TRIAL_SD * TRIAL_SD;
    between_models / (between_models + between_hosts + within_host)
}

/// (host index, its trials' values) from a JSON report, for failure messages.
fn host_means(report: &Value, address: &dyn Fn(usize) -> String) -> Vec<(usize, f64, Vec<f64>)> {
    (0..HOSTS)
        .map(|i| {
            let values = report["trials"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t["host"] == address(i))
                .filter_map(|t| {
                    t["metrics"]
                        .as_array()?
                        .iter()
                        .find(|m| m["name"] == "wall_time")?["p50"]
                        .as_f64()
                })
                .collect();
            (i, injected(i).1, values)
        })
        .collect()
}

#[test]
fn the_report_splits_twenty_hosts_by_cpu_model_and_names_the_injected_outliers() {
    let dir = tempfile::tempdir().unwrap();
    let agents = fleet_on_two_models(HOSTS, |ask| {
        let wall_ns = BASE_S * 1e9 * injected(ask.host).1 * trial_noise(TRIAL_SD, 1, ask);
        quietbench_testkit::exec(wall_ns, 2e6)
    });
    let json = dir.path().join("run.json");
    let html = dir.path().join("run.html");
    let mut command = common::quietbench();
    command.args([
        "run",
        "--probe",
        "exec",
        "--param",
        "cmd=exec sleep 0.5",
        "--param",
        "shell=true",
        "--rounds",
        "2",
        "--seed",
        "1",
        "--warmup",
        "0",
        "--duration",
        "5",
        "--json",
    ]);
    let db = dir.path().join("store.sqlite3");
    command
        .arg(&json)
        .arg("--html")
        .arg(&html)
        .arg("--db")
        .arg(&db);
    for a in agents.addresses() {
        command.arg("--agent").arg(a.to_string());
    }
    let out = command.stderr(Stdio::piped()).output().unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{table}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{table}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let spread = &report["fleet_spread"][0];
    // exec trials count with the figure verdicts use: the median time per invocation.
    assert_eq!(
        spread["metric"], "median_wall_time_per_invocation",
        "{spread:#}"
    );
    assert_eq!(spread["hosts"], HOSTS);

    // Grouped exactly by model.
    let address = |i: usize| agents.addresses()[i].to_string();
    let models = spread["models"].as_array().unwrap();
    assert_eq!(models.len(), 2, "{spread:#}");
    for m in models {
        let name = m["cpu_model"].as_str().unwrap();
        let slow_model = name.contains("8259CL");
        let mut want: Vec<String> = (0..HOSTS)
            .filter(|&i| injected(i).0 == slow_model)
            .map(address)
            .collect();
        want.sort();
        let got: Vec<String> = m["addresses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect();
        assert_eq!(got, want, "{name}");
        assert_eq!(m["trials"], 2 * HOSTS / 2);
    }

    // The difference between models: the KVM Xeon hosts (6% less per invocation) against the
    // 8259CL ones, the reference by name at equal host counts. Each model has one outlier and
    // the same scatter, so the injected ratio is 1/1.06 within the histograms' 0.1% buckets and
    // the trials' noise; the interval holds it.
    let d = &spread["differences"][0];
    assert!(d["reference"].as_str().unwrap().contains("8259CL"), "{d:#}");
    let ratio = d["ratio"].as_f64().unwrap();
    assert!((ratio * MODEL_COST - 1.0).abs() < 0.002, "{d:#}");
    let (low, high) = (
        d["ci_low"].as_f64().unwrap(),
        d["ci_high"].as_f64().unwrap(),
    );
    assert!(
        low < 1.0 / MODEL_COST && 1.0 / MODEL_COST < high && high < 1.0,
        "{d:#}"
    );

    // The between-model share, against the truth.
    let truth = true_between_model_share();
    let found = spread["split"]["between_models"].as_f64().unwrap();
    println!(
        "between-model share: found {:.1}%, true {:.1}%",
        found * 100.0,
        truth * 100.0
    );
    // Twenty hosts are a sample of the injected spread: within 2 points of the truth, either
    // way.
    assert!(
        (found - truth).abs() <= 0.02,
        "found {found:.4}, true {truth:.4}: {spread:#}"
    );

    // Only the injected outliers are flagged, each about 4% slow (its time 4% above its
    // model's median host).
    let mut flagged: Vec<String> = spread["outliers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["address"].as_str().unwrap().to_string())
        .collect();
    flagged.sort();
    let mut want: Vec<String> = OUTLIERS.iter().map(|&i| address(i)).collect();
    want.sort();
    assert_eq!(
        flagged,
        want,
        "{spread:#}\nper host: {:#?}",
        host_means(&report, &address)
    );
    for o in spread["outliers"].as_array().unwrap() {
        let off = o["off"].as_f64().unwrap();
        assert!(off > 0.02 && off < 0.06, "{o:#}");
    }

    // The table says the same, first the rows per model.
    assert!(
        table
            .contains("across hosts: exec median_wall_time_per_invocation, 20 hosts, 2 CPU models")
    );
    assert!(table.contains("of the spread comes from the CPU model"));
    for i in OUTLIERS {
        assert!(table.contains(&format!("    {} (", address(i))), "{table}");
    }

    // And the HTML report, right after its verdicts.
    let page = std::fs::read_to_string(&html).unwrap();
    if let Some(keep) = std::env::var_os("QUIETBENCH_KEEP_REPORT") {
        std::fs::copy(&html, Path::new(&keep).join("cpu_lottery.html")).unwrap();
    }
    let section = &page[page
        .find(r#"<section id="spread">"#)
        .expect("a spread section")..];
    let section = &section[..section.find("</section>").unwrap()];
    assert!(section.contains("Platinum 8259CL") && section.contains("Xeon(R) Processor"));
    assert!(section.contains(r#"<svg id="chart-spread-0""#));
    assert!(section.contains("of the spread comes from the CPU model"));
    for i in OUTLIERS {
        assert!(
            section.contains(&format!("<td>{}</td>", address(i))),
            "{section}"
        );
    }
}

/// `compare` over hosts of two models, with B 3% faster on the 8259CL hosts only: each model's
/// own verdict, and the interaction, in the terminal and the JSON. Each host's B/A ratio has
/// its own deviation (up to ±0.3%, averaging 0 over a model's hosts) and each trial another
/// (0.2% SD), so the interaction's interval is over hosts, as on a real fleet, and each model's
/// interval must hold its injected change.
#[test]
fn compare_says_when_a_change_differs_between_cpu_models() {
    let dir = tempfile::tempdir().unwrap();
    let agents = fleet_on_two_models(10, |ask| {
        assert!(
            ask.params.contains_key("cmd_b"),
            "compare times A and B in pairs"
        );
        let change = if ask.host.is_multiple_of(2) {
            0.97
        } else {
            1.0
        };
        // -0.3% .. +0.3% over each model's five hosts: their mean is the change itself.
        let host = 1.0 + 0.003 * ((ask.host / 2) as f64 / 2.0 - 1.0);
        let a_ns = 0.5e9 * injected(ask.host).1 * trial_noise(TRIAL_SD, 2, ask);
        let pair = trial_noise(0.002, 3, ask);
        let (a, b) = (a_ns, a_ns * change * host * pair);
        quietbench_testkit::exec_pairs(
            Invocation {
                wall_ns: a,
                cpu_ns: a / 100.0,
            },
            Invocation {
                wall_ns: b,
                cpu_ns: b / 100.0,
            },
        )
    });
    let json = dir.path().join("verdict.json");
    let mut command = common::quietbench();
    command.args([
        "compare",
        "--a",
        "exec sleep 0.5",
        "--b",
        "exec sleep 0.49",
        "--shell",
        "--rounds",
        "5",
        "--seed",
        "1",
        "--warmup",
        "0",
        "--duration",
        "4",
        "--no-store",
        "--json",
    ]);
    command.arg(&json);
    for a in agents.addresses() {
        command.arg("--agent").arg(a.to_string());
    }
    let out = common::succeed(&mut command);
    println!("{out}");
    assert!(out.contains("CPU models: Intel(R) Xeon(R)"), "{out}");
    assert!(
        out.contains("the change differs between CPU models"),
        "{out}"
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let models = v["cpu_models"].as_array().unwrap();
    assert_eq!(models.len(), 2, "{v:#}");
    for m in models {
        let ratio = m["estimate"]["ratio"].as_f64().unwrap();
        let want = if m["cpu_model"].as_str().unwrap().contains("8259CL") {
            0.97
        } else {
            1.0
        };
        assert!((ratio - want).abs() < 0.005, "{m:#}");
        let e = &m["estimate"];
        let (low, high) = (
            e["ci_low"].as_f64().unwrap(),
            e["ci_high"].as_f64().unwrap(),
        );
        assert!(low <= want && want <= high, "{m:#}");
        assert_eq!(m["hosts"].as_array().unwrap().len(), 5);
    }
    assert_eq!(v["interaction"]["differs"], true, "{v:#}");
    assert!(v["interaction"]["low"].as_str().unwrap().contains("8259CL"));
}

/// CONTEXT.md §1's "5% faster on Tuesday" as a test: two runs standing for two days on two
/// different sets of 8 hosts (4 of each model), each host with its own speed (±4%), every host
/// 2% slower on the second day, and the workload 2% faster on the second day. Each host runs the
/// workload and a control (`run --control`), interleaved. Without normalization the instances
/// and the day hide the change: `compare --runs` finds no difference and says how many hosts a
/// run would need. Divided by each host's control (`--normalize-by control`), the change is
/// detected on each CPU model, at about 2%. The models are compared each on its own.
#[test]
fn two_fleets_on_two_days_need_a_control_to_see_a_two_percent_change() {
    const PER_DAY: usize = 8;
    const SLEEP_S: f64 = 0.25;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.sqlite3");
    // Host speed factors: day 1 spread evenly over ±4% per model, day 2 another spread.
    let speed = |day: usize, i: usize| {
        let k = (i / 2) as f64 / 3.0; // 0, 1/3, 2/3, 1 within each model
        let model = if i.is_multiple_of(2) { MODEL_COST } else { 1.0 };
        let host = if day == 1 {
            1.0 - 0.04 + 0.08 * k
        } else {
            1.0 - 0.035 + 0.08 * (1.0 - k) // the other order, shifted
        };
        let day_effect = if day == 1 { 1.0 } else { 1.02 };
        model * host * day_effect
    };
    let mut run_ids = Vec::new();
    for day in [1, 2] {
        let work = if day == 1 { 1.0 } else { 0.98 };
        // The workload's command names QB_WORK, the control's QB_CONTROL; the fake hosts tell
        // them apart by that. Host and trial make each trial's own 0.1% deviation.
        let agents = fleet_on_two_models(PER_DAY, move |ask| {
            let cmd = ask.params.get("cmd").map(String::as_str).unwrap_or("");
            let factor = if cmd.contains("QB_WORK") {
                work
            } else {
                assert!(cmd.contains("QB_CONTROL"), "an unexpected command: {cmd}");
                1.0
            };
            let wall_ns = speed(day, ask.host) * SLEEP_S * 1e9 * factor;
            quietbench_testkit::exec(wall_ns * trial_noise(TRIAL_SD, day as u64, ask), 2e6)
        });
        let json = dir.path().join(format!("day{day}.json"));
        let mut command = common::quietbench();
        command.args([
            "run",
            "--probe",
            "exec",
            "--param",
            "cmd=exec sleep \"$QB_WORK\"",
            "--param",
            "shell=true",
            "--control",
            "exec shell=true cmd='exec sleep \"$QB_CONTROL\"'",
            "--rounds",
            "3",
            "--duration",
            "2",
            "--seed",
            "1",
            "--json",
        ]);
        command.arg(&json).arg("--db").arg(&db);
        for a in agents.addresses() {
            command.arg("--agent").arg(a.to_string());
        }
        common::succeed(&mut command);
        let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        run_ids.push(report["run_id"].as_str().unwrap().to_string());
    }

    let compare = |normalize: bool| {
        let out = dir.path().join(format!("runs-{normalize}.json"));
        let mut command = common::quietbench();
        command
            .args(["compare", "--runs", &run_ids[0], &run_ids[1], "--db"])
            .arg(&db)
            .arg("--json")
            .arg(&out);
        if normalize {
            command.args(["--normalize-by", "control"]);
        }
        let text = common::succeed(&mut command);
        println!("{text}");
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        let workload: Vec<Value> = v["comparisons"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["variant"] == "exec")
            .cloned()
            .collect();
        (text, workload)
    };

    // Without the control: each model compared on its own, no difference, and the fleet a
    // 2% change would need is named (far more than 4 hosts at ±4% between hosts).
    let (text, raw) = compare(false);
    assert_eq!(raw.len(), 2, "one comparison per CPU model: {raw:#?}");
    for c in &raw {
        assert_eq!(c["verdict"], "no_difference", "{c:#}");
        assert!(c["mde"].as_f64().unwrap() > 0.02, "{c:#}");
        assert!(c["hosts_needed"].as_u64().unwrap() > 4, "{c:#}");
        assert_eq!(c["units"], "hosts");
    }
    assert!(text.contains("hosts for a 2.0% difference"), "{text}");

    // With it: detected on each model, at about 2%.
    let (text, normalized) = compare(true);
    assert_eq!(normalized.len(), 2, "{normalized:#?}");
    for c in &normalized {
        assert_eq!(c["verdict"], "b_faster", "{c:#}");
        let ratio = c["ratio"].as_f64().unwrap();
        assert!((0.975..0.985).contains(&ratio), "{c:#}");
        let (low, high) = (
            c["ci_low"].as_f64().unwrap(),
            c["ci_high"].as_f64().unwrap(),
        );
        assert!(low <= 0.98 && 0.98 <= high, "{c:#}");
        assert_eq!(c["normalized_by"], "control");
    }
    assert!(text.contains("faster than run"), "{text}");

    // history shows the normalized figure per run, one series per model.
    let mut command = common::quietbench();
    command
        .args([
            "history",
            "--probe",
            "exec",
            "--metric",
            "invocations_per_sec",
            "--normalize-by",
            "control",
            "--db",
        ])
        .arg(&db);
    let history = common::succeed(&mut command);
    println!("{history}");
    assert_eq!(
        history.matches("normalized by \"control\"").count(),
        2,
        "{history}"
    );
    for id in &run_ids {
        assert_eq!(history.matches(&id[..8]).count(), 2, "{history}");
    }

    // The change-point search takes the same normalized series: per model, one point per run
    // with each run's median normalized figure (two runs are too few for a change point).
    command.args(["--change-points", "--json"]);
    let found: serde_json::Value = serde_json::from_str(&common::succeed(&mut command)).unwrap();
    let series = found["series"].as_array().unwrap();
    assert_eq!(series.len(), 2, "{found}");
    for s in series {
        // The rate against the control's time: multiplied (docs/statistics.md §9b).
        assert_eq!(s["variant"], "invocations_per_sec × control", "{s}");
        let points = s["points"].as_array().unwrap();
        let ids: Vec<&str> = points
            .iter()
            .map(|p| p["run_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, run_ids.iter().map(String::as_str).collect::<Vec<_>>());
        // Day 2's workload is 2% faster against its control: its normalized rate is higher.
        let v: Vec<f64> = points
            .iter()
            .map(|p| p["value"].as_f64().unwrap())
            .collect();
        assert!(v[1] > v[0] * 1.01, "{v:?}");
        assert!(s["change_points"].as_array().unwrap().is_empty());
    }
}
