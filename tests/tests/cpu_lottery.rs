//! CONTEXT.md §1's CPU lottery as a test: 20 agents on this machine, half of them describing a
//! captured EC2 8259CL and half this project's captured KVM Xeon (`agent --host-root` pointed at
//! fixture trees holding each one's /proc/cpuinfo), an `exec` workload 6% costlier on the 8259CL
//! hosts, up to 1% of scatter between hosts and two injected slow hosts. The run's report must
//! group the hosts exactly by model, find the between-model share of the spread within 2 points
//! of the truth computed here from the injected costs, and flag the injected outliers and no
//! other host; `history` then shows one series per model.
//!
//! Keeping it honest on a 2-CPU machine: the 20 hosts run at once (the concurrent schedule with
//! round sync), so a CPU-bound workload would measure how the 20 share 2 CPUs, not the costs put
//! in. The workload is therefore a sleep whose length is the injected cost (`sleep $QB_COST`
//! through /bin/sh, the cost in each agent's environment): its CPU part (fork, exec, sh and sleep
//! starting up, about 2 ms) is under 0.5% of a 0.5 s invocation, so contention moves a trial by a
//! small fraction of the 1% host scatter. Trials of 5 s (10 invocations each) and 2 rounds keep
//! round-to-round variation around 0.1%, which the within-host share absorbs without moving the
//! between-model share by more than a few tenths of a point.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::{AgentProcess, agent_command};
use serde_json::Value;

/// The two tests run one after the other: each is sized for this machine to itself (26 agents
/// at once would make the sleeps' CPU part contend).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

const HOSTS: usize = 20;
/// Seconds per invocation on the fast model.
const BASE_S: f64 = 0.5;
/// The 8259CL hosts' workload costs this much more.
const MODEL_COST: f64 = 1.06;
/// Injected slow hosts, one per model, and how much slower.
const OUTLIERS: [usize; 2] = [4, 7];
const OUTLIER_COST: f64 = 1.04;

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/quietbench-host/tests/fixtures")
        .join(path)
}

/// A host root holding only `proc/cpuinfo`, copied from a captured machine.
fn host_root(dir: &Path, name: &str, capture: &str) -> PathBuf {
    let root = dir.join(name);
    std::fs::create_dir_all(root.join("proc")).unwrap();
    std::fs::copy(fixture(capture), root.join("proc/cpuinfo")).unwrap();
    root
}

/// `count` agents in `dir`, the even ones describing the captured 8259CL and the odd ones the
/// captured KVM Xeon, each with the environment `env(i)` gives it.
fn agents_on_two_models(
    dir: &Path,
    count: usize,
    env: impl Fn(usize) -> Vec<(&'static str, String)>,
) -> Vec<AgentProcess> {
    let roots = [
        host_root(dir, "kvm-xeon", "kvm-2vcpu-xeon/proc/cpuinfo"),
        host_root(dir, "ec2-8259cl", "public/ec2-8259cl-2vcpu/proc/cpuinfo"),
    ];
    (0..count)
        .map(|i| {
            let mut command = agent_command();
            command
                .arg("--host-root")
                .arg(&roots[usize::from(i.is_multiple_of(2))])
                .envs(env(i));
            AgentProcess::start_with(command)
        })
        .collect()
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

/// The true between-model share from the injected costs alone: models are a fixed factor
/// (variance of their injected effects, weighted by hosts), hosts a random one (the variance of
/// each host's injected effect around its model's, with H - M degrees of freedom as the
/// estimator counts them); the injection adds no round-to-round variation.
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
    between_models / (between_models + between_hosts)
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
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let agents = agents_on_two_models(dir.path(), HOSTS, |i| {
        vec![("QB_COST", format!("{:.6}", BASE_S * injected(i).1))]
    });
    let json = dir.path().join("run.json");
    let html = dir.path().join("run.html");
    let mut command = common::quietbench();
    command.args([
        "run",
        "--probe",
        "exec",
        "--param",
        "cmd=exec sleep \"$QB_COST\"",
        "--param",
        "shell=true",
        "--rounds",
        "2",
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
    for a in &agents {
        command.arg("--agent").arg(a.addr.to_string());
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
    let address = |i: usize| agents[i].addr.to_string();
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

    // The difference between models: the KVM Xeon hosts (sleeping 6% less) against the 8259CL
    // ones, the reference by name at equal host counts. The CPU part of each invocation dilutes
    // the 6% slightly; the interval must hold it.
    let d = &spread["differences"][0];
    assert!(d["reference"].as_str().unwrap().contains("8259CL"), "{d:#}");
    let ratio = d["ratio"].as_f64().unwrap();
    assert!(ratio > 1.0 / 1.065 && ratio < 1.0 / 1.045, "{d:#}");
    assert!(d["ci_high"].as_f64().unwrap() < 1.0, "{d:#}");

    // The between-model share, against the truth.
    let truth = true_between_model_share();
    let found = spread["split"]["between_models"].as_f64().unwrap();
    println!(
        "between-model share: found {:.1}%, true {:.1}%",
        found * 100.0,
        truth * 100.0
    );
    // The machine's own noise adds variance between hosts and rounds that the injection does
    // not, so it can only lower the share found: a loaded machine (a second CI run beside this
    // one) found 83.0% against 85.3%. Above the truth by more than its sampling error, or far
    // below it, is a wrong split.
    assert!(
        found <= truth + 0.02 && found >= truth - 0.06,
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
/// own verdict, and the interaction, in the terminal and the JSON. Sleeps of half a second
/// again, for the same reason as above (with 0.1 s, the 6 agents' fork and exec on one CPU moved
/// pairs by 1-2% and the intervals over 3 hosts could not separate 3% from 0%); A and B run back
/// to back in pairs, so what the pairs share cancels. Issue 27 moves this onto a fake agent with
/// known truth.
#[test]
fn compare_says_when_a_change_differs_between_cpu_models() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    // Five hosts of each model, 4 s trials: the interaction's interval is over hosts (a t
    // interval), and with three hosts of 2 s trials (two pairs a trial) it came out at -0.1% to
    // 7.4% in two of five runs on this 2-vCPU VM; so it reads 2.0-3.8%.
    let agents = agents_on_two_models(dir.path(), 10, |i| {
        let b = if i.is_multiple_of(2) {
            "0.485"
        } else {
            "0.500"
        };
        vec![("QB_A", "0.500".to_string()), ("QB_B", b.to_string())]
    });
    let json = dir.path().join("verdict.json");
    let mut command = common::quietbench();
    command.args([
        "compare",
        "--a",
        "exec sleep \"$QB_A\"",
        "--b",
        "exec sleep \"$QB_B\"",
        "--shell",
        "--rounds",
        "5",
        "--warmup",
        "0",
        "--duration",
        "4",
        "--no-store",
        "--json",
    ]);
    command.arg(&json);
    for a in &agents {
        command.arg("--agent").arg(a.addr.to_string());
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
        assert!((ratio - want).abs() < 0.01, "{m:#}");
        assert_eq!(m["hosts"].as_array().unwrap().len(), 5);
    }
    assert_eq!(v["interaction"]["differs"], true, "{v:#}");
    assert!(v["interaction"]["low"].as_str().unwrap().contains("8259CL"));
}

/// CONTEXT.md §1's "5% faster on Tuesday" as a test: two runs standing for two days on two
/// different sets of 8 hosts (4 of each model), each host with its own speed (±4%), every host
/// 2% slower on the second day, and the workload 2% faster on the second day. Each host runs the
/// workload and a control (`run --control`), interleaved. Without normalisation the instances
/// and the day hide the change: `compare --runs` finds no difference and says how many hosts a
/// run would need. Divided by each host's control (`--normalize-by control`), the change is
/// detected on each CPU model, at about 2%. The models are compared each on its own.
#[test]
fn two_fleets_on_two_days_need_a_control_to_see_a_two_percent_change() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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
        let day_dir = dir.path().join(format!("day{day}"));
        std::fs::create_dir_all(&day_dir).unwrap();
        let agents = agents_on_two_models(&day_dir, PER_DAY, |i| {
            let s = speed(day, i) * SLEEP_S;
            vec![
                ("QB_WORK", format!("{:.6}", s * work)),
                ("QB_CONTROL", format!("{s:.6}")),
            ]
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
            "--json",
        ]);
        command.arg(&json).arg("--db").arg(&db);
        for a in &agents {
            command.arg("--agent").arg(a.addr.to_string());
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
    let (text, normalised) = compare(true);
    assert_eq!(normalised.len(), 2, "{normalised:#?}");
    for c in &normalised {
        assert_eq!(c["verdict"], "b_faster", "{c:#}");
        let ratio = c["ratio"].as_f64().unwrap();
        assert!((0.97..0.99).contains(&ratio), "{c:#}");
        assert_eq!(c["normalized_by"], "control");
    }
    assert!(text.contains("faster than run"), "{text}");

    // history shows the normalised figure per run, one series per model.
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
        history.matches("normalised by \"control\"").count(),
        2,
        "{history}"
    );
    for id in &run_ids {
        assert_eq!(history.matches(&id[..8]).count(), 2, "{history}");
    }

    // The change-point search takes the same normalised series: per model, one point per run
    // with each run's median normalised figure (two runs are too few for a change point).
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
        // Day 2's workload is 2% faster against its control: its normalised rate is higher.
        let v: Vec<f64> = points
            .iter()
            .map(|p| p["value"].as_f64().unwrap())
            .collect();
        assert!(v[1] > v[0] * 1.01, "{v:?}");
        assert!(s["change_points"].as_array().unwrap().is_empty());
    }
}
