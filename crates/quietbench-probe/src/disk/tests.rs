use super::*;
use crate::test_params as params;

fn counter(outcome: &crate::TrialOutcome, name: &str) -> f64 {
    crate::vocab_tests::assert_counters_registered(&outcome.counters);
    outcome
        .counters
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no counter {name}: {:?}", outcome.counters))
        .value
}

#[test]
fn applies_fio_like_defaults() {
    let dir = ScratchDir::new();
    let path = dir.path().join("d.dat");
    let p = path.to_str().unwrap();
    let seq = resolve("disk.seq", &params(&[("path", p)])).unwrap();
    assert_eq!(seq.resolved_params["block_kib"], "128");
    assert_eq!(seq.resolved_params["qd"], "16");
    assert_eq!(seq.resolved_params["mode"], "read");
    assert_eq!(seq.resolved_params["size_mib"], "1024");
    assert!(!seq.resolved_params.contains_key("read_pct"));
    assert!(["io_uring", "threads"].contains(&seq.resolved_params["engine"].as_str()));
    assert_eq!(seq.metric_sets, READS);
    let rand = resolve("disk.rand", &params(&[("path", p), ("mode", "mixed")])).unwrap();
    assert_eq!(rand.resolved_params["block_kib"], "16");
    assert_eq!(rand.resolved_params["qd"], "32");
    assert_eq!(rand.resolved_params["read_pct"], "70");
    assert_eq!(rand.metric_sets, READS_AND_WRITES);
    // Resolving lays nothing out: that is the factory's work.
    assert!(!path.exists());
}

#[test]
fn refuses_bad_parameters_with_clear_errors() {
    // A path nothing is at (not /tmp/x: a machine may have one).
    let missing =
        std::env::temp_dir().join(format!("quietbench-disk-params-{}", std::process::id()));
    let x = missing.to_str().unwrap();
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[], "path= is invalid: required"),
        (&[("path", x), ("mode", "append")], "read, write, mixed"),
        (&[("path", x), ("block_kib", "6")], "multiple of 4"),
        (&[("path", x), ("read_pct", "50")], "mode=mixed only"),
        (&[("path", x), ("destructive", "sure")], "true or false"),
        (
            &[("path", x), ("engine", "aio")],
            "auto, io_uring or threads",
        ),
        (&[("path", x), ("qd", "0")], "from 1 to 1024"),
        (
            &[("path", x), ("qd", "1024"), ("block_kib", "4096")],
            "need 4096 MiB of buffers per thread",
        ),
        (
            &[("path", x), ("iodepth", "8")],
            "block_kib, destructive, engine",
        ),
        (
            &[
                ("path", x),
                ("size_mib", "1"),
                ("threads", "16"),
                ("block_kib", "128"),
            ],
            "too small for 16 thread(s)",
        ),
        (
            &[("path", "/proc")],
            "neither a regular file nor a block device",
        ),
    ];
    for (given, expected) in cases {
        let err = resolve("disk.seq", &params(given)).unwrap_err().to_string();
        assert!(err.contains(expected), "{given:?}: {err}");
    }
}

#[test]
fn a_block_device_is_never_opened_for_writes_without_destructive() {
    // Every Linux machine has a block device node somewhere: make one of our own (as root),
    // or use any found in /dev; the check happens before anything is opened.
    let Some(dev) = std::fs::read_dir("/dev").ok().and_then(|entries| {
        entries.flatten().map(|e| e.path()).find(|p| {
            use std::os::unix::fs::FileTypeExt;
            std::fs::metadata(p).is_ok_and(|m| m.file_type().is_block_device())
        })
    }) else {
        panic!("no block device in /dev to test with");
    };
    let d = dev.to_str().unwrap();
    for mode in ["write", "mixed"] {
        let err = resolve("disk.seq", &params(&[("path", d), ("mode", mode)]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("is a block device") && err.contains("destructive=true"),
            "{err}"
        );
    }
}

#[test]
fn stripes_are_disjoint_whole_blocks_covering_the_target() {
    let unit = 16 << 10;
    for threads in 1..=7 {
        let size = 1_000 * unit + 123;
        let mut next = 0;
        for t in 0..threads {
            let (start, len) = stripe(size, threads, t, unit);
            assert_eq!(start, next);
            assert_eq!(start % unit, 0);
            assert_eq!(len % unit, 0);
            assert!(len > 0);
            next = start + len;
        }
        assert_eq!(next, 1_000 * unit);
    }
}

fn run_probe(probe: &'static str, extra: &[(&str, &str)], ms: u64) -> crate::TrialOutcome {
    let dir = ScratchDir::new();
    let path = dir.path().join("probe.dat");
    let mut given = params(&[("path", path.to_str().unwrap()), ("size_mib", "16")]);
    given.extend(params(extra));
    let spec = resolve(probe, &given).unwrap();
    let outcome = run_for(&spec, ms).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 16 * MIB);
    outcome
}

#[test]
fn random_reads_on_a_file_keep_the_queue_full() {
    for engine in ["io_uring", "threads"] {
        if engine == "io_uring" && engine::io_uring_available().is_err() {
            continue;
        }
        let outcome = run_probe("disk.rand", &[("engine", engine), ("qd", "8")], 400);
        let read = &outcome.total.metric_sets[0];
        assert_eq!(read.metric_set, READ);
        assert!(read.events > 50, "{engine}: {} reads", read.events);
        assert_eq!(read.bytes, read.events * (16 << 10));
        assert!(read.events_per_sec > 0.0);
        let mb = read.throughput.unwrap();
        let expected = read.events_per_sec * 16384.0 / 1e6;
        assert!((mb / expected - 1.0).abs() < 1e-6, "{mb} vs {expected}");
        let uring = counter(&outcome, "engine_io_uring");
        assert_eq!(uring, f64::from(u8::from(engine == "io_uring")), "{engine}");
        // Read from this process's smaps, which a Linux /proc always has.
        let huge = counter(&outcome, "io_buffers_huge_pages");
        assert!((0.0..=100.0).contains(&huge), "{engine}: {huge}");
    }
}

#[test]
fn sequential_writes_and_mixed_io_record_both_metric_sets() {
    let outcome = run_probe("disk.seq", &[("mode", "write"), ("qd", "4")], 300);
    assert_eq!(outcome.total.metric_sets.len(), 1);
    assert_eq!(outcome.total.metric_sets[0].metric_set, WRITE);
    assert!(outcome.total.metric_sets[0].events > 10);

    let outcome = run_probe(
        "disk.rand",
        &[("mode", "mixed"), ("read_pct", "50"), ("threads", "2")],
        400,
    );
    let (reads, writes) = (&outcome.total.metric_sets[0], &outcome.total.metric_sets[1]);
    assert_eq!((reads.metric_set, writes.metric_set), (READ, WRITE));
    assert!(
        reads.events > 20 && writes.events > 20,
        "{} {}",
        reads.events,
        writes.events
    );
    let share = reads.events as f64 / (reads.events + writes.events) as f64;
    assert!((0.35..0.65).contains(&share), "read share {share}");
}

#[test]
fn a_failing_device_is_an_error_not_a_number() {
    // Reads past the end of a file that shrank under the probe come back short.
    let dir = ScratchDir::new();
    let path = dir.path().join("shrinks.dat");
    let spec = resolve(
        "disk.seq",
        &params(&[("path", path.to_str().unwrap()), ("size_mib", "8")]),
    )
    .unwrap();
    let mut workload = spec.workload(0).unwrap();
    File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(0)
        .unwrap();
    let mut rec = crate::worker::Recording::new(1);
    let mut samples = Samples { rec: &mut rec };
    let step = (0..100)
        .map(|_| workload.step(&mut samples))
        .find(|s| *s != Step::Recorded);
    assert_eq!(step, Some(Step::Failed));
    let error = workload.take_error().unwrap();
    assert!(
        error.contains("disk.seq: read of 131072 bytes at offset"),
        "{error}"
    );
    assert!(error.contains("only 0 bytes transferred"), "{error}");
}

/// A file someone else made: `len` bytes of a pattern no probe writes.
fn foreign_file(dir: &ScratchDir, name: &str, len: usize) -> (PathBuf, Vec<u8>) {
    let path = dir.path().join(name);
    let content: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    std::fs::write(&path, &content).unwrap();
    (path, content)
}

#[test]
fn a_file_the_probe_did_not_create_is_never_written_in_any_mode() {
    // The red team's case: a store smaller than the fill size, named with mode=read.
    let dir = ScratchDir::new();
    let (path, content) = foreign_file(&dir, "results.db", 300 << 10);
    let p = path.to_str().unwrap();
    for probe in ["disk.seq", "disk.rand"] {
        for mode in ["read", "write", "mixed"] {
            let err = resolve(
                probe,
                &params(&[("path", p), ("mode", mode), ("size_mib", "4")]),
            )
            .unwrap_err()
            .to_string();
            assert!(
                err.contains("not made by a quietbench disk probe")
                    && err.contains("destructive=true"),
                "{probe} mode={mode}: {err}"
            );
        }
    }
    // A file that appears after the parameters were checked is refused by the trial too.
    let late = dir.path().join("late.db");
    let spec = resolve(
        "disk.seq",
        &params(&[("path", late.to_str().unwrap()), ("size_mib", "4")]),
    )
    .unwrap();
    std::fs::write(&late, b"someone's data").unwrap();
    let err = spec.workload(0).err().expect("a foreign file is refused");
    assert!(err.contains("not made by a quietbench disk probe"), "{err}");
    assert_eq!(std::fs::read(&late).unwrap(), b"someone's data");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        content,
        "the file was changed"
    );
}

#[test]
fn destructive_lets_a_probe_claim_a_file_it_did_not_create() {
    let dir = ScratchDir::new();
    let (path, _) = foreign_file(&dir, "scratch.img", 64 << 10);
    let spec = resolve(
        "disk.seq",
        &params(&[
            ("path", path.to_str().unwrap()),
            ("size_mib", "2"),
            ("destructive", "true"),
        ]),
    )
    .unwrap();
    run_for(&spec, 100).unwrap();
    let data = std::fs::read(&path).unwrap();
    assert!(data.starts_with(target::MARK));
    assert_eq!(data.len() as u64, 2 * MIB);
    // Now the probe's own: no destructive needed, and writes are allowed.
    let spec = resolve(
        "disk.rand",
        &params(&[
            ("path", path.to_str().unwrap()),
            ("size_mib", "2"),
            ("mode", "write"),
        ]),
    )
    .unwrap();
    run_for(&spec, 100).unwrap();
    assert!(std::fs::read(&path).unwrap().starts_with(target::MARK));
}

#[test]
fn paths_must_be_absolute_and_free_of_links_and_directories_are_never_made() {
    let dir = ScratchDir::new();
    let err = resolve("disk.seq", &params(&[("path", "probe.dat")]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("relative path"), "{err}");
    assert!(!std::path::Path::new("probe.dat").exists());

    // A link to a file the probe made, and a file reached through a linked directory.
    let own = dir.path().join("own.dat");
    let spec = resolve(
        "disk.seq",
        &params(&[("path", own.to_str().unwrap()), ("size_mib", "1")]),
    )
    .unwrap();
    run_for(&spec, 50).unwrap();
    let link = dir.path().join("link.dat");
    std::os::unix::fs::symlink(&own, &link).unwrap();
    let err = resolve(
        "disk.seq",
        &params(&[("path", link.to_str().unwrap()), ("size_mib", "1")]),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("symbolic link"), "{err}");
    let linked_dir = dir.path().join("linked");
    std::os::unix::fs::symlink(dir.path(), &linked_dir).unwrap();
    for name in ["own.dat", "new.dat"] {
        let through = linked_dir.join(name);
        let given = params(&[("path", through.to_str().unwrap()), ("size_mib", "1")]);
        let err = match resolve("disk.seq", &given) {
            Err(e) => e.to_string(),
            Ok(spec) => spec.workload(0).err().expect("refused"),
        };
        assert!(err.contains("symbolic link"), "{name}: {err}");
    }
    assert!(!dir.path().join("new.dat").exists());

    let nested = dir.path().join("no/such/dir/probe.dat");
    let spec = resolve(
        "disk.seq",
        &params(&[("path", nested.to_str().unwrap()), ("size_mib", "1")]),
    )
    .unwrap();
    let err = spec.workload(0).err().expect("no directory is made");
    assert!(err.contains("creates no directories"), "{err}");
    assert!(!dir.path().join("no").exists());
}
