use std::sync::atomic::AtomicBool;

use proptest::prelude::*;

use super::bandwidth::read_pass;
use super::latency::HUGE_PAGE_LINES;
use super::*;
use crate::affinity::current_thread_affinity;
use crate::test_params as params;
use crate::{TrialOutcome, TrialSettings, Workload, plan_placement, run_trial};

/// Walks one full cycle from line 0's successor and checks every line comes up once and
/// the walk is back where it started after exactly `n` loads.
fn assert_single_cycle(lines: usize, seed: u64) {
    assert_single_cycle_of(PointerCycle::new(lines, seed, false).unwrap(), lines);
}

fn assert_single_cycle_of(mut cycle: PointerCycle, lines: usize) {
    let n = cycle.len();
    assert_eq!(n, lines.max(1));
    let start = cycle.position();
    let mut seen = vec![false; n];
    for step in 0..n {
        cycle.walk(1);
        let at = cycle.position();
        assert!(
            !seen[at],
            "line {at} visited twice before step {n} (step {step})"
        );
        seen[at] = true;
        assert_eq!(
            at == start,
            step == n - 1,
            "back at the start at step {step}"
        );
    }
    assert!(seen.iter().all(|&s| s));
}

#[test]
fn the_permutation_is_one_cycle_over_every_line() {
    for lines in [1, 2, 3, 7, 256, 1000, RUNG_BYTES[1] / LINE_BYTES] {
        assert_single_cycle(lines, 42);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn any_size_and_seed_gives_one_cycle(lines in 1usize..3000, seed in any::<u64>()) {
        assert_single_cycle(lines, seed);
    }
}

#[test]
fn with_huge_pages_the_cycle_starts_on_a_huge_page_boundary() {
    for lines in [1, 256, 16_384, HUGE_PAGE_LINES + 3] {
        let cycle = PointerCycle::new(lines, 5, true).unwrap();
        assert_eq!(cycle.base_addr() % (2 << 20), 0, "{lines} lines");
        assert_single_cycle_of(cycle, lines);
    }
}

#[test]
fn building_in_small_batches_gives_the_same_cycle() {
    let order = |cycle: &mut PointerCycle| {
        (0..cycle.len())
            .map(|_| {
                cycle.walk(1);
                cycle.position()
            })
            .collect::<Vec<_>>()
    };
    let mut builder = CycleBuilder::new(1000, 9, false).unwrap();
    let mut calls = 0;
    while !builder.work(7) {
        calls += 1;
    }
    // Fill, shuffle and link: 1000 + 999 + 1000 lines of work, 7 at a time.
    assert!(calls >= 2999 / 7 - 1, "{calls} calls");
    let mut batched = builder.finish().ok().unwrap();
    let mut whole = PointerCycle::new(1000, 9, false).unwrap();
    assert_eq!(order(&mut batched), order(&mut whole));
    let unfinished = CycleBuilder::new(1000, 9, false).unwrap();
    assert!(unfinished.finish().is_err());
    // With huge pages: padding first, same cycle after it.
    let mut builder = CycleBuilder::new(1000, 9, true).unwrap();
    while !builder.work(7) {}
    let mut padded = builder.finish().ok().unwrap();
    assert_eq!(order(&mut padded), order(&mut whole));
}

#[test]
fn a_rebuild_is_a_new_single_cycle_in_the_same_memory() {
    let order = |cycle: &mut PointerCycle| {
        (0..cycle.len())
            .map(|_| {
                cycle.walk(1);
                cycle.position()
            })
            .collect::<Vec<_>>()
    };
    let mut first = PointerCycle::new(3000, 11, true).unwrap();
    let (base, before) = (first.base_addr(), order(&mut first));
    let mut builder = first.rebuild();
    while !builder.work(100) {}
    let mut second = builder.finish().ok().unwrap();
    assert_eq!(second.base_addr(), base);
    assert_ne!(order(&mut second), before);
    assert_single_cycle_of(second, 3000);
}

#[test]
fn the_shuffle_defeats_a_stride_prefetcher() {
    // Few successors are the next line: a sequential layout would have them all.
    let mut cycle = PointerCycle::new(4096, 7, false).unwrap();
    let mut sequential = 0;
    for _ in 0..4096 {
        let from = cycle.position();
        cycle.walk(1);
        sequential += usize::from(cycle.position() == from + 1);
    }
    assert!(sequential < 16, "{sequential} sequential successors");
}

#[test]
fn the_same_seed_gives_the_same_layout() {
    let order = |seed| {
        let mut c = PointerCycle::new(512, seed, false).unwrap();
        (0..512)
            .map(|_| {
                c.walk(1);
                c.position()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(order(3), order(3));
    assert_ne!(order(3), order(4));
}

#[test]
fn defaults_and_ladder() {
    let spec = resolve("mem.latency", &BTreeMap::new()).unwrap();
    assert_eq!(spec.threads, 1);
    assert_eq!(spec.resolved_params["max_size_mib"], "256");
    assert_eq!(spec.resolved_params["loads_per_step"], "65536");
    assert_eq!(spec.resolved_params["huge_pages"], "1");
    assert_eq!(spec.resolved_params["visit_ms"], "250");
    let names: Vec<_> = spec.metric_sets.iter().map(|v| v.latency_metric).collect();
    assert_eq!(names.first(), Some(&"load_latency_16k"));
    assert_eq!(names.last(), Some(&"load_latency_256m"));
    assert_eq!(spec.metric_sets.len(), 6);
    assert_eq!(spec.basis, RateBasis::OwnTime);

    let small = resolve("mem.latency", &params(&[("max_size_mib", "8")])).unwrap();
    assert_eq!(small.metric_sets.len(), 4);
    let tiny = resolve("mem.latency", &params(&[("max_size_mib", "1")])).unwrap();
    assert_eq!(
        tiny.metric_sets.last().unwrap().rate_metric,
        "loads_per_sec_1m"
    );
    let all = resolve("mem.latency", &params(&[("max_size_mib", "1024")])).unwrap();
    assert_eq!(all.metric_sets, LATENCY_METRIC_SETS);
    // The workload's metric sets are the spec's.
    let w = LatencyWorkload::new(4, 1024, Duration::from_millis(10), false, 0);
    assert_eq!(w.metric_sets(), small.metric_sets);

    let bw = resolve("mem.bandwidth", &BTreeMap::new()).unwrap();
    assert_eq!(bw.resolved_params["size_mib"], "256");
    assert_eq!(bw.metric_sets.len(), 3);
    assert_eq!(
        bw.metric_sets[2].throughput.unwrap().metric,
        "gb_per_sec_triad"
    );
}

#[test]
fn bad_parameters_say_what_is_allowed() {
    let err = resolve("mem.latency", &params(&[("size_mib", "8")])).unwrap_err();
    assert!(
        err.to_string().contains("max_size_mib, loads_per_step"),
        "{err}"
    );
    let err = resolve("mem.latency", &params(&[("max_size_mib", "0")])).unwrap_err();
    assert!(err.to_string().contains("from 1 to 1024"), "{err}");
    let err = resolve("mem.latency", &params(&[("loads_per_step", "10")])).unwrap_err();
    assert!(err.to_string().contains("from 1024 to 4194304"), "{err}");
    let err = resolve("mem.latency", &params(&[("visit_ms", "1")])).unwrap_err();
    assert!(err.to_string().contains("from 10 to 10000"), "{err}");
    let err = resolve("mem.bandwidth", &params(&[("size_mib", "4096")])).unwrap_err();
    assert!(err.to_string().contains("from 1 to 2048"), "{err}");
    let err = resolve("mem.bandwidth", &params(&[("size_mib", "lots")])).unwrap_err();
    assert!(err.to_string().contains("whole number"), "{err}");
    let err = resolve("mem.bandwidth", &params(&[("huge_pages", "2")])).unwrap_err();
    assert!(err.to_string().contains("from 0 to 1"), "{err}");
    let err = resolve("mem.bandwidth", &params(&[("max_size_mib", "8")])).unwrap_err();
    assert!(
        err.to_string().contains("size_mib, threads, huge_pages"),
        "{err}"
    );
    assert!(matches!(
        resolve("mem.nope", &BTreeMap::new()),
        Err(ParamError::UnknownProbe(_))
    ));
}

#[test]
fn refuses_more_memory_than_is_available() {
    let gib = 1u64 << 30;
    assert!(check_memory("mem.bandwidth", 3 << 30, 1, Some(16 * gib)).is_ok());
    assert!(check_memory("mem.bandwidth", 3 << 30, 1, None).is_ok());
    let err = check_memory("mem.bandwidth", 3 << 30, 4, Some(8 * gib)).unwrap_err();
    assert!(
        err.contains("12288 MiB (3072 MiB per thread x 4 threads)"),
        "{err}"
    );
    assert!(err.contains("8192 MiB available"), "{err}");
}

#[test]
fn reads_mem_available() {
    // Captured from the development VM (Debian 12, 24 GiB).
    let meminfo = "MemTotal:       24684112 kB\nMemFree:        21290056 kB\n\
                   MemAvailable:   24042400 kB\nBuffers:           88328 kB\n";
    assert_eq!(parse_mem_available(meminfo), Some(24_042_400 * 1024));
    assert_eq!(parse_mem_available("MemTotal: 5 kB\n"), None);
}

#[test]
fn reads_mem_available_below_the_host_root() {
    // A fake root holding only proc/meminfo: the reader must look below it, not at /proc.
    let dir = std::env::temp_dir().join(format!("qb-mem-root-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("proc")).unwrap();
    std::fs::write(
        dir.join("proc/meminfo"),
        "MemTotal:       24684112 kB\nMemAvailable:   1000 kB\n",
    )
    .unwrap();
    let found = mem_available(&HostRoot::at(&dir));
    let missing = mem_available(&HostRoot::at(dir.join("nowhere")));
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(found, Some(1000 * 1024));
    assert_eq!(missing, None);
}

#[test]
fn kernels_compute_what_stream_computes() {
    let mut arrays = StreamArrays::new(64 * 37 + 5, false).unwrap();
    // 37 lines of 8 elements: exercises the remainder of the read kernel's 4-line chunks.
    assert_eq!(arrays.bytes(Kernel::Read), 37 * 8 * 8);
    assert_eq!(arrays.bytes(Kernel::Triad), 37 * 8 * 24);
    assert_eq!(read_pass(&arrays.b, arrays.avx2), 37.0 * 8.0);
    assert_eq!(read_pass(&arrays.b, false), 37.0 * 8.0);
    arrays.pass(Kernel::Copy);
    assert_eq!(arrays.first_of_a(), 1.0);
    arrays.pass(Kernel::Triad);
    assert!(arrays.a.iter().all(|b| b.0 == [7.0; 8]));
}

fn run(probe: &'static str, pairs: &[(&str, &str)], millis: u64) -> TrialOutcome {
    let spec = resolve(probe, &params(pairs)).unwrap();
    let allowed = current_thread_affinity().unwrap();
    let plan = plan_placement(spec.threads, &allowed, &[]).unwrap();
    let settings = TrialSettings {
        duration: Duration::from_millis(millis),
        interval: Duration::from_millis(250),
        plan,
        unpinned: None,
    };
    let cancel = Arc::new(AtomicBool::new(false));
    run_trial(&spec, &settings, &cancel, &mut |_| true).unwrap()
}

#[test]
fn latency_rises_from_l1_to_the_largest_rung() {
    // 64 MiB: past any L2, and on most machines past the L3 a 2-core VM gets to use.
    let outcome = run(
        "mem.latency",
        &[
            ("max_size_mib", "64"),
            ("loads_per_step", "16384"),
            ("visit_ms", "50"),
        ],
        2000,
    );
    let ns = |name: &str| {
        outcome
            .counters
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no {name} in {:?}", outcome.counters))
            .value
    };
    let (l1, big) = (ns("load_ns_16k"), ns("load_ns_64m"));
    assert!(
        l1 > 0.1 && big > 3.0 * l1,
        "16 KiB: {l1} ns, 64 MiB: {big} ns"
    );
    for v in &outcome.total.metric_sets {
        assert!(
            v.events > 0,
            "{} has no sample",
            v.metric_set.latency_metric
        );
        assert_eq!(v.bytes, 0);
    }
    assert_eq!(outcome.counters.len(), 5);
}

#[test]
fn bandwidth_counts_bytes_as_stream_does() {
    let outcome = run("mem.bandwidth", &[("size_mib", "4")], 600);
    for (v, per_elem) in outcome.total.metric_sets.iter().zip(STREAM_BYTES_PER_ELEM) {
        assert!(v.events > 0, "{} has no pass", v.metric_set.rate_metric);
        assert_eq!(v.bytes, v.events * (4 << 20) / 8 * per_elem);
        assert!(v.throughput.unwrap() > 0.0);
    }
}
