//! The disk probes end to end through the real `quietbench` binary: disk.rand and disk.seq on a
//! file the probe lays out, the disk.scan survey, a pre-warm resumed after an interruption, and,
//! as root, a loop device that is never written without `destructive=true`.
//!
//! Files live under `QB_DISK_TEST_DIR` or the temp directory; it must be a disk-backed
//! filesystem (direct I/O fails on tmpfs).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// A scratch directory on disk, removed when dropped.
struct Scratch(tempfile::TempDir);

impl Scratch {
    fn new() -> Self {
        let base = std::env::var_os("QB_DISK_TEST_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        Self(tempfile::tempdir_in(base).expect("scratch directory"))
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
}

/// `quietbench run --local` of one probe with `params`, one round; the JSON report is written
/// to `json`.
fn run(probe: &str, params: &[String], duration: &str, json: &Path) -> Output {
    let mut cmd = common::quietbench();
    // The local agent's state directory (pre-warm progress lives there): beside the report.
    cmd.env(
        "QUIETBENCH_STATE_DIR",
        json.parent().unwrap().join("agent-state"),
    );
    cmd.args([
        "run",
        "--local",
        "--probe",
        probe,
        "--rounds",
        "1",
        "--duration",
        duration,
    ])
    .arg("--json")
    .arg(json);
    for p in params {
        cmd.args(["--param", p]);
    }
    cmd.output().expect("run quietbench")
}

fn ok_report(out: &Output, json: &Path) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    assert_eq!(report["complete"], true, "{report}");
    assert_eq!(report["trials"].as_array().unwrap().len(), 1);
    report
}

fn metric(trial: &Value, name: &str) -> f64 {
    trial["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("trial has no metric {name}: {trial}"))["value"]
        .as_f64()
        .unwrap()
}

fn has_metric(trial: &Value, name: &str) -> bool {
    trial["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["name"] == name)
}

#[test]
fn disk_rand_and_seq_measure_a_file_they_lay_out() {
    let dir = Scratch::new();
    let file = dir.path("rand.dat");
    let json = dir.path("report.json");
    let path = format!("path={}", file.display());

    let out = run(
        "disk.rand",
        &[path.clone(), "size_mib=32".into()],
        "1",
        &json,
    );
    let report = ok_report(&out, &json);
    let trial = &report["trials"][0];
    assert_eq!(trial["probe"], "disk.rand");
    assert_eq!(trial["params"]["block_kib"], "16");
    assert_eq!(trial["params"]["qd"], "32");
    assert_eq!(trial["params"]["mode"], "read");
    let engine = trial["params"]["engine"].as_str().unwrap().to_string();
    assert!(engine == "io_uring" || engine == "threads", "{engine}");
    assert_eq!(
        metric(trial, "engine_io_uring"),
        if engine == "io_uring" { 1.0 } else { 0.0 }
    );
    let iops = metric(trial, "read_iops");
    let mb = metric(trial, "read_mb_per_sec");
    // Rates depend on this machine's disk and load: only their consistency is guaranteed.
    assert!(iops > 0.0, "{iops} IOPS");
    assert!(
        (mb / (iops * 16384.0 / 1e6) - 1.0).abs() < 0.05,
        "{mb} MB/s at {iops} IOPS"
    );
    assert!(metric(trial, "read_latency") > 0.0);
    // Laid out once, with real data (no block of zeros where the probe wrote).
    let data = std::fs::read(&file).unwrap();
    assert_eq!(data.len(), 32 << 20);
    assert!(data.chunks(4096).all(|b| b.iter().any(|&x| x != 0)));

    let out = run(
        "disk.seq",
        &[
            path,
            "size_mib=32".into(),
            "mode=mixed".into(),
            "read_pct=50".into(),
        ],
        "1",
        &json,
    );
    let report = ok_report(&out, &json);
    let trial = &report["trials"][0];
    assert_eq!(trial["params"]["block_kib"], "128");
    // Half reads, half writes, 32 at a time: both kinds are issued at once, however slow the
    // disk.
    assert!(metric(trial, "read_iops") > 0.0);
    assert!(metric(trial, "write_iops") > 0.0);
    assert!(metric(trial, "write_mb_per_sec") > 0.0);
    assert!(metric(trial, "write_latency") > 0.0);
}

#[test]
fn disk_scan_surveys_a_file_and_ends_when_done() {
    let dir = Scratch::new();
    let file = dir.path("scan.dat");
    let json = dir.path("report.json");
    // disk.seq lays the file out; the scan only reads.
    let out = run(
        "disk.seq",
        &[format!("path={}", file.display()), "size_mib=64".into()],
        "0.2",
        &json,
    );
    ok_report(&out, &json);

    let out = run(
        "disk.scan",
        &[format!("path={}", file.display()), "regions=16".into()],
        "60",
        &json,
    );
    let report = ok_report(&out, &json);
    let trial = &report["trials"][0];
    // However slow the disk, a trial that ends before its 60 s ended because the file was read.
    let lasted = trial["duration_s"].as_f64().unwrap();
    assert!(
        lasted < 60.0,
        "the scan ends when the file is read, not at the trial's 60 s: it lasted {lasted} s"
    );
    assert_eq!(metric(trial, "scan_complete"), 1.0);
    assert_eq!(metric(trial, "regions_read"), 16.0);
    assert_eq!(metric(trial, "resampled_regions"), 8.0);
    let cold = metric(trial, "cold_fraction");
    assert!((0.0..=1.0).contains(&cold), "cold_fraction {cold}");
    assert!(metric(trial, "slowdown") > 0.0);
    assert!(metric(trial, "survey_mb_per_sec") > 0.0);
    assert!(metric(trial, "read_latency") > 0.0);
    assert!(metric(trial, "reread_latency") > 0.0);
}

#[test]
fn a_prewarm_resumes_after_an_interruption() {
    let dir = Scratch::new();
    let file = dir.path("warm.dat");
    let state = dir.path("agent-state/scan/warm.state");
    let json = dir.path("report.json");
    let size: u64 = 256 << 20;
    let out = run(
        "disk.seq",
        &[format!("path={}", file.display()), "size_mib=256".into()],
        "0.2",
        &json,
    );
    ok_report(&out, &json);
    let params = [
        format!("path={}", file.display()),
        "state=warm.state".to_string(),
        "prewarm=true".to_string(),
        "regions=256".to_string(),
    ];

    // Interrupted by a short trial: small reads, one at a time, for 0.1 s, or twice that until
    // a trial finishes a region (1 MiB) on this disk at this load: a fixed length would finish
    // none on a slow enough machine. Each longer try resumes the one before.
    let mut first_params = params.to_vec();
    first_params.extend(["qd=1".to_string(), "read_kib=16".to_string()]);
    let mut seconds = 0.1;
    let (first, done_first) = loop {
        let out = run("disk.scan", &first_params, &seconds.to_string(), &json);
        let report = ok_report(&out, &json);
        let trial = report["trials"][0].clone();
        let done = metric(&trial, "prewarm_bytes_done");
        if done > 0.0 {
            break (trial, done);
        }
        assert!(
            metric(&trial, "prewarm_bytes_read") >= done,
            "partly read regions are read, not done"
        );
        assert!(
            seconds < 30.0,
            "no 1 MiB region read in a {seconds} s trial"
        );
        seconds *= 2.0;
    };
    let first = &first;
    // One region took more than half this trial the time before: it did not read them all.
    assert!(
        done_first < size as f64,
        "the short trial was not interrupted"
    );
    // Partly read regions are read again next time: not done, but read.
    assert!(metric(first, "prewarm_bytes_read") >= done_first);
    let marks = std::fs::read(&state).unwrap();
    let marked = marks.iter().rev().take(256).filter(|&&b| b == b'#').count() as f64;
    assert_eq!(
        marked * (1 << 20) as f64,
        done_first,
        "the state file holds what was done"
    );

    // Resumed: the rest, and only the rest, then the trial ends by itself.
    let out = run("disk.scan", &params, "60", &json);
    let second = ok_report(&out, &json);
    let second = &second["trials"][0];
    assert_eq!(metric(second, "prewarm_bytes_skipped"), done_first);
    assert_eq!(
        metric(second, "prewarm_bytes_read"),
        size as f64 - done_first
    );
    assert_eq!(metric(second, "prewarm_bytes_done"), size as f64);
    assert_eq!(metric(second, "prewarm_complete"), 1.0);
    // Ended by itself (the rest was read), not by the trial's 60 s, however slow the disk.
    assert!(second["duration_s"].as_f64().unwrap() < 60.0);

    // Everything done: nothing read.
    let out = run("disk.scan", &params, "60", &json);
    let third = ok_report(&out, &json);
    assert_eq!(metric(&third["trials"][0], "prewarm_bytes_read"), 0.0);
    assert!(!has_metric(&third["trials"][0], "cold_fraction"));
}

/// The red team's reproduction: a read-mode disk probe pointed at someone's data (here a file
/// standing for the store) is refused in every mode, through the real binary, and the file is
/// left byte for byte as it was; so is a relative path.
#[test]
fn a_disk_probe_never_writes_a_file_it_did_not_create() {
    let dir = Scratch::new();
    let store = dir.path("results.sqlite");
    let content: Vec<u8> = (0..(300u32 << 10)).map(|i| (i % 253) as u8).collect();
    std::fs::write(&store, &content).unwrap();
    let json = dir.path("report.json");
    for probe in ["disk.seq", "disk.rand"] {
        for mode in ["read", "write", "mixed"] {
            let out = run(
                probe,
                &[format!("path={}", store.display()), format!("mode={mode}")],
                "0.2",
                &json,
            );
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{probe} mode={mode} ran: {stderr}");
            assert!(
                stderr.contains("not made by a quietbench disk probe"),
                "{probe} mode={mode}: {stderr}"
            );
        }
    }
    let out = run("disk.seq", &["path=relative.dat".into()], "0.2", &json);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("relative path"), "{stderr}");
    assert_eq!(
        std::fs::read(&store).unwrap(),
        content,
        "the store was changed"
    );
}

/// A loop device over a file, detached when dropped.
struct LoopDevice {
    device: String,
}

impl LoopDevice {
    fn attach(backing: &Path) -> Self {
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(backing)
            .output()
            .expect("run losetup (util-linux)");
        assert!(
            out.status.success(),
            "losetup -f --show {} failed: {}",
            backing.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Self {
            device: String::from_utf8(out.stdout).unwrap().trim().to_string(),
        }
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.device]).status();
    }
}

#[test]
fn a_block_device_is_never_written_without_destructive() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root: it attaches a loop device (losetup) to check that disk probes \
         never write a block device without destructive=true; run the tests as root"
    );
    let dir = Scratch::new();
    let backing = dir.path("backing.img");
    let original: Vec<u8> = (0..16u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&backing, &original).unwrap();
    let json = dir.path("report.json");
    let device = LoopDevice::attach(&backing);
    let path = format!("path={}", device.device);

    for probe in ["disk.seq", "disk.rand"] {
        for mode in ["write", "mixed"] {
            let out = run(probe, &[path.clone(), format!("mode={mode}")], "1", &json);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success(),
                "{probe} mode={mode} on a device ran: {stderr}"
            );
            assert!(
                stderr.contains("is a block device") && stderr.contains("destructive=true"),
                "{probe} mode={mode}: {stderr}"
            );
        }
    }
    // Reading is allowed, and reads only.
    let out = run("disk.rand", std::slice::from_ref(&path), "0.5", &json);
    ok_report(&out, &json);
    let out = run(
        "disk.scan",
        &[path.clone(), "regions=4".into()],
        "30",
        &json,
    );
    ok_report(&out, &json);
    assert!(
        std::fs::read(&backing).unwrap() == original,
        "the device's bytes changed without destructive=true"
    );

    // With the flag, writing is what the user asked for.
    let out = run(
        "disk.seq",
        &[path, "mode=write".into(), "destructive=true".into()],
        "0.5",
        &json,
    );
    ok_report(&out, &json);
    drop(device);
    assert!(std::fs::read(&backing).unwrap() != original);
}

/// The controller's pre-warm of a restored volume, through a real agent: `disk.scan
/// prewarm=true` trial after trial until everything is read, with the bytes and time it took.
/// A file stands in for the volume (the same probe reads both).
#[test]
fn the_controllers_prewarm_reads_the_whole_target_through_the_agent() {
    let scratch = Scratch::new();
    let path = scratch.path("restored.img");
    let size: usize = 192 << 20;
    std::fs::write(&path, vec![0x5au8; size]).unwrap();
    let agent = common::AgentProcess::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let done = rt.block_on(async {
        let mut conn = quietbench_controller::connection::AgentConnection::connect_with(
            &agent.addr.to_string(),
            "test agent".into(),
            &quietbench_controller::connection::AgentAccess::Fleet(None),
        )
        .await
        .unwrap();
        quietbench_controller::prewarm::prewarm_path(
            &mut conn,
            path.to_str().unwrap(),
            Some(size as u64),
            &quietbench_controller::progress::Progress::new(0),
        )
        .await
        .unwrap()
    });
    // The rate × time of each trial: an estimate. Each thread's rate is over its own time, so
    // threads that start and stop out of step make it high, the more so the shorter the read
    // (48 MiB in 0.17 s once gave 1.12); 192 MiB keeps that skew small. Near the file's size.
    let ratio = done.bytes as f64 / size as f64;
    assert!((0.75..=1.25).contains(&ratio), "{done:?} for {size} bytes");
    assert!(done.seconds > 0.0, "{done:?}");
    assert!(done.summary().contains("GiB in"), "{}", done.summary());
}
