use std::time::Instant;

use super::*;
use crate::disk::target::TargetKind;
use crate::disk::{ScratchDir, run_for};
use crate::test_params as params;

fn counter(outcome: &crate::TrialOutcome, name: &str) -> Option<f64> {
    crate::vocab_tests::assert_counters_registered(&outcome.counters);
    outcome
        .counters
        .iter()
        .find(|c| c.name == name)
        .map(|c| c.value)
}

/// A file of `mib` MiB of data, laid out as disk.seq does.
fn data_file(dir: &ScratchDir, mib: u64) -> PathBuf {
    let path = dir.path().join("scan.dat");
    target::prepare_file(&path, (mib << 20) - target::HEADER_BYTES, 9, false).unwrap();
    path
}

/// An agent context whose state directory is `dir`/state.
fn context(dir: &ScratchDir) -> crate::ProbeContext {
    crate::ProbeContext {
        state_dir: Some(dir.path().join("state")),
    }
}

fn resolve(probe: &'static str, given: &BTreeMap<String, String>) -> Result<ProbeSpec, ParamError> {
    // No state directory: what a pre-warm needs is given by the tests that run one.
    super::resolve(probe, given, &crate::ProbeContext::default())
}

#[test]
fn state_files_are_named_from_the_path_and_kept_in_the_agents_directory() {
    let named = |path: &str| {
        default_state_name(&TargetInfo {
            path: path.into(),
            kind: TargetKind::File,
            size: None,
        })
    };
    let a = named("/data/x.img");
    assert!(
        a.starts_with("data_x_img-") && a.ends_with(".qbscan"),
        "{a}"
    );
    assert!(named("/dev/nvme1n1").starts_with("dev_nvme1n1-"));
    // Paths that read alike get files of their own.
    assert_ne!(named("/a/b_c"), named("/a_b/c"));
    assert_eq!(named("/data/x.img"), a, "stable");
    assert_eq!(
        state_path(Path::new("/var/lib/quietbench-agent"), &a),
        Path::new("/var/lib/quietbench-agent/scan").join(&a)
    );
}

#[test]
fn a_state_name_cannot_leave_the_agents_directory() {
    let dir = ScratchDir::new();
    let path = data_file(&dir, 4);
    let p = path.to_str().unwrap();
    for bad in ["/etc/shadow.qbscan", "../x", "a/b", ".hidden"] {
        let given = params(&[("path", p), ("prewarm", "true"), ("state", bad)]);
        let err = super::resolve("disk.scan", &given, &context(&dir))
            .err()
            .unwrap_or_else(|| panic!("state={bad} was accepted"))
            .to_string();
        assert!(err.contains("plain file name"), "{bad}: {err}");
    }
    let err = resolve("disk.scan", &params(&[("path", p), ("prewarm", "true")]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("state directory"), "{err}");
    let err = resolve("disk.scan", &params(&[("path", "scan.dat")]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("relative path"), "{err}");

    // A link planted where the progress file goes is refused, not written through.
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    let scan_dir = dir.path().join("state").join(STATE_FOLDER);
    std::fs::create_dir_all(&scan_dir).unwrap();
    std::os::unix::fs::symlink(&victim, scan_dir.join("planted")).unwrap();
    let given = params(&[("path", p), ("prewarm", "true"), ("state", "planted")]);
    let spec = super::resolve("disk.scan", &given, &context(&dir)).unwrap();
    let err = spec.workload(0).err().expect("a planted link is refused");
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
}

#[test]
fn refuses_bad_parameters_with_clear_errors() {
    let dir = ScratchDir::new();
    let path = data_file(&dir, 4);
    let p = path.to_str().unwrap();
    let missing = dir.path().join("nope");
    let m = missing.to_str().unwrap();
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[("path", m)], "does not exist"),
        (&[("path", p), ("state", "/tmp/s")], "prewarm=true only"),
        (
            &[("path", p), ("prewarm", "true"), ("resample", "2")],
            "survey only",
        ),
        (&[("path", p), ("regions", "2000")], "at most 1024 regions"),
        (
            &[("path", p), ("regions", "4"), ("threads", "5")],
            "more threads",
        ),
        (&[("path", p), ("read_kib", "5")], "multiple of 4"),
        (&[("path", p), ("depth", "5")], "cold_factor, engine, path"),
        (
            &[("path", p), ("prewarm", "1"), ("region_read_mib", "1")],
            "survey only",
        ),
        (
            &[("path", p), ("qd", "512"), ("read_kib", "4096")],
            "lower qd",
        ),
    ];
    for (given, expected) in cases {
        let err = resolve("disk.scan", &params(given))
            .unwrap_err()
            .to_string();
        assert!(err.contains(expected), "{given:?}: {err}");
    }
    let spec = super::resolve(
        "disk.scan",
        &params(&[("path", p), ("prewarm", "yes")]),
        &context(&dir),
    )
    .unwrap();
    assert_eq!(spec.resolved_params["qd"], "4");
    assert_eq!(spec.resolved_params["regions"], "64");
    let state = &spec.resolved_params["state"];
    assert!(
        state.starts_with(&dir.path().join("state/scan/").display().to_string()),
        "{state}"
    );
    assert!(!spec.resolved_params.contains_key("resample"));
    let spec = resolve("disk.scan", &params(&[("path", p)])).unwrap();
    assert_eq!(spec.resolved_params["qd"], "4");
    assert_eq!(spec.metric_sets, SURVEY_METRIC_SETS);
}

#[test]
fn a_survey_reads_everything_then_rereads_a_sample_and_finishes_early() {
    let dir = ScratchDir::new();
    let path = data_file(&dir, 32);
    let spec = resolve(
        "disk.scan",
        &params(&[
            ("path", path.to_str().unwrap()),
            ("regions", "16"),
            ("resample", "4"),
        ]),
    )
    .unwrap();
    let started = Instant::now();
    let outcome = run_for(&spec, 60_000).unwrap();
    assert!(
        started.elapsed().as_secs() < 30,
        "the scan ends when it is done"
    );
    let first = &outcome.total.metric_sets[0];
    let again = &outcome.total.metric_sets[1];
    assert_eq!(first.bytes, 32 << 20);
    assert_eq!(first.events, 32);
    // Four regions of 2 MiB: their first (up to 4) 1 MiB reads again.
    assert_eq!(
        (again.metric_set, again.events, again.bytes),
        (REREAD, 8, 8 << 20)
    );
    assert_eq!(counter(&outcome, "scan_complete"), Some(1.0));
    assert_eq!(counter(&outcome, "regions_read"), Some(16.0));
    assert_eq!(counter(&outcome, "resampled_regions"), Some(4.0));
    let cold = counter(&outcome, "cold_fraction").unwrap();
    assert!((0.0..=1.0).contains(&cold));
    assert!(counter(&outcome, "slowdown").unwrap() > 0.0);
    assert!(counter(&outcome, "survey_mb_per_sec").unwrap() > 0.0);
    let (min, p50) = (
        counter(&outcome, "region_mb_per_sec_min").unwrap(),
        counter(&outcome, "region_mb_per_sec_p50").unwrap(),
    );
    assert!(min > 0.0 && min <= p50);
}

#[test]
fn a_quick_survey_reads_the_start_of_each_region() {
    let dir = ScratchDir::new();
    let path = data_file(&dir, 32);
    let spec = resolve(
        "disk.scan",
        &params(&[
            ("path", path.to_str().unwrap()),
            ("regions", "16"),
            ("region_read_mib", "1"),
            ("resample", "2"),
        ]),
    )
    .unwrap();
    let outcome = run_for(&spec, 60_000).unwrap();
    assert_eq!(outcome.total.metric_sets[0].bytes, 16 << 20);
    assert_eq!(outcome.total.metric_sets[1].bytes, 2 << 20);
    assert_eq!(counter(&outcome, "regions_read"), Some(16.0));
    assert_eq!(counter(&outcome, "scan_complete"), Some(1.0));
}

#[test]
fn a_prewarm_resumes_where_an_interrupted_one_stopped() {
    let dir = ScratchDir::new();
    let path = data_file(&dir, 32);
    let state = dir.path().join("state/scan/progress.qbscan");
    let given = params(&[
        ("path", path.to_str().unwrap()),
        ("prewarm", "true"),
        ("regions", "32"),
        ("qd", "2"),
        ("state", "progress.qbscan"),
    ]);
    let spec = super::resolve("disk.scan", &given, &context(&dir)).unwrap();

    // Interrupted: a few steps, then the trial ends (finish reaps what is in flight).
    let mut workload = spec.workload(0).unwrap();
    let mut rec = crate::worker::Recording::new(1);
    for _ in 0..5 {
        assert_eq!(
            workload.step(&mut Samples { rec: &mut rec }),
            Step::Recorded
        );
    }
    workload.finish();
    let first_run = workload.counters();
    drop(workload);
    let read_first: f64 = first_run
        .iter()
        .find(|c| c.name == "prewarm_bytes_read")
        .unwrap()
        .value;
    let marks = std::fs::read(&state).unwrap();
    let done = marks.iter().filter(|&&b| b == b'#').count();
    assert!(
        (4..32).contains(&done),
        "{done} regions marked after 5 steps"
    );
    assert_eq!(read_first, (done << 20) as f64);

    // Resumed: only the rest is read, and the trial finishes by itself.
    let outcome = run_for(&spec, 60_000).unwrap();
    assert_eq!(
        counter(&outcome, "prewarm_bytes_skipped"),
        Some((done << 20) as f64)
    );
    assert_eq!(
        counter(&outcome, "prewarm_bytes_read"),
        Some(((32 - done) << 20) as f64)
    );
    assert_eq!(
        counter(&outcome, "prewarm_bytes_done"),
        Some((32 << 20) as f64)
    );
    assert_eq!(counter(&outcome, "prewarm_complete"), Some(1.0));
    assert_eq!(
        outcome.total.metric_sets[0].bytes,
        ((32 - done) << 20) as u64
    );
    let marks = std::fs::read(&state).unwrap();
    assert!(marks.ends_with(&[b'#'; 32]));

    // Done already: nothing to read, finished at once.
    let outcome = run_for(&spec, 60_000).unwrap();
    assert_eq!(counter(&outcome, "prewarm_bytes_read"), Some(0.0));
    assert_eq!(counter(&outcome, "prewarm_complete"), Some(1.0));
}

#[test]
fn a_parallel_prewarm_splits_the_target_into_disjoint_stripes() {
    let dir = ScratchDir::new();
    let path = data_file(&dir, 16);
    let spec = super::resolve(
        "disk.scan",
        &params(&[
            ("path", path.to_str().unwrap()),
            ("prewarm", "true"),
            ("threads", "2"),
            ("regions", "64"),
        ]),
        &context(&dir),
    )
    .unwrap();
    let outcome = run_for(&spec, 60_000).unwrap();
    assert_eq!(
        counter(&outcome, "prewarm_bytes_read"),
        Some((16 << 20) as f64)
    );
    assert_eq!(outcome.total.metric_sets[0].bytes, 16 << 20);
    assert_eq!(counter(&outcome, "prewarm_complete"), Some(1.0));
    let state = std::fs::read(&spec.resolved_params["state"]).unwrap();
    assert!(state.ends_with(&[b'#'; 64]));
}
