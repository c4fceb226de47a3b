//! Verdicts on a bursty host, end to end (issue 28): an A/A comparison in every way of taking
//! turns, while the noise injector (src/bin/noise.rs) busies every CPU in seeded random spells,
//! must not claim a difference. How often a 95% interval may exclude 1 is a rate, measured by
//! benches/stats/calibrate.sh over many runs; one run can only catch an interval that is far too
//! narrow. So each printed interval is stretched 3 times about its centre and must then hold 1:
//! an honest t interval from 8 rounds (7 degrees of freedom, fewer when the rounds correlate)
//! fails that once in 1,000-5,000 runs, one three times too narrow fails it often. No bound
//! depends on the machine's speed: the figures are ratios of one command with itself.

mod common;

use std::io::Read;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// A CPU-bound shell loop of `n` iterations: both sides' work.
fn spin(n: u32) -> String {
    format!("i=0; while [ $i -lt {n} ]; do i=$((i+1)); done")
}

/// This process's CPUs (the injector hogs each of them).
fn allowed_cpus() -> Vec<u32> {
    let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).expect("affinity");
    (0..nix::sched::CpuSet::count())
        .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
        .map(|cpu| cpu as u32)
        .collect()
}

/// The running injector. Dropped without [`Injector::stop`] (a failed assertion), it is killed
/// at once, so no busy spell outlives the test into the next one.
struct Injector(Option<Child>);

impl Injector {
    /// A busy thread on each of `cpus` in 100-500 ms spells, on 30% of the time, for at most two
    /// minutes.
    fn start(cpus: &[u32], seed: u64) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_noise"))
            .args(["--cpu-hog", &quietbench_host::format_cpu_list(cpus)])
            .args(["--duty", "0.3", "--for", "120", "--seed", &seed.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the noise injector starts");
        Self(Some(child))
    }

    /// Stops it with SIGTERM (it ends its spells cleanly) and returns its summary line,
    /// "noise: stopped (...) after S s; time on: cpu0 P%, ... (duty 0.3)".
    fn stop(mut self) -> String {
        let mut child = self.0.take().expect("running");
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        let status = child.wait().expect("the injector ends");
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert!(status.success(), "the injector failed ({status}):\n{err}");
        err.lines()
            .last()
            .expect("the injector's summary")
            .to_owned()
    }
}

impl Drop for Injector {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The share of time each hog was on, from the injector's summary line.
fn time_on(summary: &str) -> Vec<f64> {
    let on = summary
        .split("time on: ")
        .nth(1)
        .unwrap_or_else(|| panic!("no time on in {summary:?}"));
    on.split(" (duty")
        .next()
        .unwrap()
        .split(", ")
        .map(|hog| {
            let pct = hog.rsplit(' ').next().unwrap().trim_end_matches('%');
            pct.parse()
                .unwrap_or_else(|_| panic!("{hog:?} in {summary:?}"))
        })
        .collect()
}

/// `figure`'s interval, stretched 3 times about its centre in log space, holds 1.
fn assert_holds_one_when_stretched(mode: &str, figure: &Value) {
    let name = figure["figure"].as_str().unwrap();
    let (ratio, lo, hi) = (
        figure["ratio"].as_f64().unwrap(),
        figure["ci_low"].as_f64().unwrap(),
        figure["ci_high"].as_f64().unwrap(),
    );
    assert!(lo <= ratio && ratio <= hi, "{mode} {name}: {figure:#}");
    let (centre, half) = ((hi.ln() + lo.ln()) / 2.0, (hi.ln() - lo.ln()) / 2.0);
    println!("{mode:<11} {name:<6} B/A {ratio:.4} [{lo:.4}, {hi:.4}]");
    assert!(
        centre.abs() <= 3.0 * half,
        "{mode}: the {name} figure of an A/A, [{lo:.4}, {hi:.4}], is far from 1 for its width: \
         {:.1} half-widths",
        centre.abs() / half
    );
}

#[test]
fn an_a_a_under_bursty_noise_claims_no_difference_in_any_mode() {
    let cpus = allowed_cpus();
    let dir = tempfile::tempdir().unwrap();
    let a = spin(20000);
    for (seed, mode) in [(1, "invocations"), (2, "trials"), (3, "duet")] {
        let json = dir.path().join(format!("{mode}.json"));
        let noise = Injector::start(&cpus, seed);
        let out = common::quietbench()
            .args(["compare", "--local", "--shell", "--no-store"])
            .args(["--rounds", "8", "--warmup", "0", "--duration", "0.3"])
            .args(["--interleave", mode, "--seed", &seed.to_string()])
            .args(["--a", &a, "--b", &a, "--json"])
            .arg(&json)
            .output()
            .expect("compare starts");
        let summary = noise.stop();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{mode}: compare failed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let on = time_on(&summary);
        assert_eq!(on.len(), cpus.len(), "a hog per CPU: {summary}");
        assert!(
            on.iter().all(|&p| p > 0.0),
            "every hog had spells: {summary}"
        );
        println!("{summary}");

        let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(v["interleave"], mode, "{v:#}");
        assert_eq!(v["rounds"], 8, "{v:#}");
        assert_eq!(v["figure"], "median", "{v:#}");
        assert_holds_one_when_stretched(mode, &v);
        let others = v["other_figures"].as_array().unwrap();
        assert_eq!(
            others.len(),
            1,
            "the cpu figure is printed beside it: {v:#}"
        );
        assert_eq!(others[0]["figure"], "cpu", "{v:#}");
        assert_holds_one_when_stretched(mode, &others[0]);
    }
}
