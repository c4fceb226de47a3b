//! The bodies of quietbench's fuzz targets.
//!
//! Each target takes arbitrary bytes and hands them to the parsers of one kind of input that
//! comes from outside the process: the kernel's /proc and /sys files, the network (histograms
//! from agents, the peer protocol, IMDS answers) and the user (plans, hosts files). A target
//! fails by panicking: a parser may refuse input, never crash on it. Where a parser has an
//! inverse, the target also checks the round trip, so the fuzzer finds wrong answers as well as
//! crashes.
//!
//! `fuzz/` (cargo fuzz, libFuzzer) runs these for coverage-guided search; `tests/replay.rs` runs
//! the inputs kept in git (`fuzz/seeds/`, `fuzz/regressions/`: fuzz/README.md) through them on
//! every `cargo test`, and the local corpus too where a fuzzing run left one.

use quietbench_host::{imds, journal, kernel, noise, procstat, smaps, topology, tuning};
use quietbench_probe::net::wire;
use quietbench_proto::histogram::{MAX_DECODED, MAX_TOTAL_COUNT, decode_bounded};

/// A fuzz target: its name and its body.
pub struct Target {
    /// The target's name, also its `fuzz/fuzz_targets/NAME.rs` and its folder under
    /// `fuzz/seeds/`, `fuzz/regressions/` and `fuzz/corpus/`.
    pub name: &'static str,
    /// Runs one input; panics only on a defect.
    pub run: fn(&[u8]),
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "proc_interrupts",
        run: proc_interrupts,
    },
    Target {
        name: "proc_stat",
        run: proc_stat,
    },
    Target {
        name: "proc_task",
        run: proc_task,
    },
    Target {
        name: "cpuinfo",
        run: cpuinfo,
    },
    Target {
        name: "sys_cpu",
        run: sys_cpu,
    },
    Target {
        name: "kernel_files",
        run: kernel_files,
    },
    Target {
        name: "histogram",
        run: histogram,
    },
    Target {
        name: "plan",
        run: plan,
    },
    Target {
        name: "peer_wire",
        run: peer_wire,
    },
    Target {
        name: "imds_http",
        run: imds_http,
    },
    Target {
        name: "series_csv",
        run: series_csv,
    },
    Target {
        name: "request_files",
        run: request_files,
    },
    Target {
        name: "http2_reader",
        run: http2_reader,
    },
];

/// `changes --csv`'s input, with each way of choosing the index column. A table that parses has
/// one finite value per row in every series (the parser refuses ragged rows and non-numbers).
pub fn series_csv(data: &[u8]) {
    use quietbench_controller::series_csv::{IndexColumn, parse_series_csv};
    let text = text(data);
    for index in [
        IndexColumn::Auto,
        IndexColumn::None,
        IndexColumn::Named("date".to_string()),
    ] {
        if let Ok(table) = parse_series_csv(&text, &index) {
            for series in &table.series {
                assert_eq!(series.values.len(), table.rows, "{text:?}");
                assert!(series.values.iter().all(|v| v.is_finite()), "{text:?}");
            }
        }
    }
}

/// The request files of `http` (`PATH` or `METHOD PATH` per line) and `tcp` (escaped bytes per
/// line), which the controller reads from the user's disk and the agent gets as text.
pub fn request_files(data: &[u8]) {
    let text = text(data);
    let _ = quietbench_vocab::requests::parse_requests(&text);
    let _ = quietbench_vocab::raw_requests::parse_raw_requests(&text);
}

/// The HTTP/2 reader of a server's answers (`http2=true`): frames split at any read size.
pub fn http2_reader(data: &[u8]) {
    quietbench_probe::http::fuzz_http2_reader(data);
}

/// The readers read these files as UTF-8 text; arbitrary bytes become text the way a lossy
/// read would, so no input is wasted on the UTF-8 check.
fn text(data: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(data)
}

/// /proc/interrupts: the RSS-aware placement reads it on every host.
pub fn proc_interrupts(data: &[u8]) {
    let _ = quietbench_host::interrupts::parse_interrupts(&text(data));
}

/// /proc/stat and /proc/softirqs.
pub fn proc_stat(data: &[u8]) {
    let text = text(data);
    let _ = procstat::parse_proc_stat(&text);
    let _ = procstat::parse_softirqs(&text);
}

/// A task's status, stat, sched and schedstat files, and a smaps mapping.
pub fn proc_task(data: &[u8]) {
    let text = text(data);
    let _ = procstat::parse_task_status(&text);
    let _ = procstat::parse_task_stat(&text);
    let _ = procstat::parse_process_start_ticks(&text);
    let _ = procstat::parse_task_sched_migrations(&text);
    let _ = noise::parse_schedstat(&text);
    let addr = data
        .get(..8)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
    let _ = smaps::parse_smaps_mapping(&text, addr);
}

/// /proc/cpuinfo: the CPU model the lottery report splits by.
pub fn cpuinfo(data: &[u8]) {
    let _ = quietbench_host::parse_cpuinfo(&text(data));
}

/// The /sys/devices/system/cpu files: CPU lists, topology ids, cache sizes and kinds, and the
/// bracketed choices of governors and THP. A CPU list that parses must print as a list that
/// parses to the same CPUs.
pub fn sys_cpu(data: &[u8]) {
    let text = text(data);
    if let Ok(cpus) = quietbench_host::parse_cpu_list(&text) {
        let printed = quietbench_host::format_cpu_list(&cpus);
        let again = quietbench_host::parse_cpu_list(&printed)
            .unwrap_or_else(|e| panic!("{printed:?} (printed from {text:?}) does not parse: {e}"));
        assert_eq!(again, cpus, "{text:?} -> {printed:?}");
    }
    let path = "/sys/devices/system/cpu/cpu0/topology/core_id";
    let _ = topology::parse_topology_id(path, &text);
    let _ = topology::parse_cache_size(path, &text);
    let _ = topology::parse_cache_kind(path, &text);
    let _ = tuning::current_choice(&text);
    let _ = kernel::bracketed_choice(&text);
}

/// /proc/cmdline, randomize_va_space, and the agent's own tuning journal (read back after a
/// crash, so it may be cut anywhere).
pub fn kernel_files(data: &[u8]) {
    let text = text(data);
    let _ = kernel::parse_cmdline(&text);
    let _ = kernel::parse_randomize_va_space(&text);
    let _ = journal::parse_journal(&text);
}

/// A histogram as an agent ships it (`Histogram.hdr_v2_deflate`). One that decodes must be
/// within the bounds `decode_bounded` promises, and re-encode and decode to the same histogram.
pub fn histogram(data: &[u8]) {
    if let Ok(hist) = decode_bounded(data) {
        // Checked here as well as in decode_bounded's own unit tests so that the regression
        // inputs of these bounds (fuzz/regressions/histogram) fail the replay, not only pass
        // through it, should a bound ever go.
        let counts_bytes = hist.distinct_values() * 8;
        assert!(
            counts_bytes <= MAX_DECODED,
            "decoded a counts array of {counts_bytes} bytes"
        );
        assert!(
            hist.len() <= MAX_TOTAL_COUNT,
            "decoded {} samples",
            hist.len()
        );
        let bytes = quietbench_probe::histogram::encode_v2_deflate(&hist).expect("re-encodes");
        let again = decode_bounded(&bytes).expect("re-decodes");
        assert_eq!(again, hist);
    }
}

/// A plan file and a hosts file.
pub fn plan(data: &[u8]) {
    let text = text(data);
    let _ = quietbench_controller::plan::parse_plan(&text, 7);
    let _ = quietbench_controller::fleet::parse_hosts_file(&text, "hosts.txt");
}

/// The peer data plane's bytes: a connection header (checked against the secret it carries,
/// or a fixed one, so the fuzzer reaches the size checks without guessing 128 bits), a stream
/// trailer, the trailer scanner, and UDP datagrams. A header that decodes re-encodes to the
/// same bytes.
pub fn peer_wire(data: &[u8]) {
    let mut header = [0u8; wire::HEADER_LEN];
    let n = data.len().min(wire::HEADER_LEN);
    header[..n].copy_from_slice(&data[..n]);
    let carried = wire::Secret(header[24..].try_into().expect("16 bytes"));
    let fixed = wire::Secret([0x5a; wire::SECRET_LEN]);
    for secret in [&carried, &fixed] {
        if let Ok(h) = wire::Header::decode(&header, secret) {
            assert_eq!(
                h.encode(),
                header,
                "a decoded header re-encodes to its bytes"
            );
        }
    }
    let mut trailer = [0u8; wire::TRAILER_LEN];
    let t = data.len().min(wire::TRAILER_LEN);
    trailer[..t].copy_from_slice(&data[data.len() - t..]);
    if let Some(decoded) = wire::Trailer::decode(&trailer) {
        assert_eq!(decoded.encode(), trailer);
    }
    let mut tail = wire::Tail::default();
    for chunk in data.chunks(7) {
        tail.push(chunk);
    }
    let _ = wire::Trailer::decode(tail.bytes());
    if data.len() >= wire::UDP_MIN as usize {
        let carried = wire::Secret(data[16..32].try_into().expect("16 bytes"));
        if let Some(len) = wire::udp_response_len(data, &carried) {
            assert!((wire::UDP_RESPONSE_MIN as usize..=wire::UDP_MAX as usize).contains(&len));
        }
    }
    let _ = wire::udp_response_seq(data);
    let _ = wire::Secret::from_hex(&text(data));
}

/// An answer from the instance metadata service (plain HTTP on a link-local address), whole or
/// cut at any point.
pub fn imds_http(data: &[u8]) {
    for at_eof in [false, true] {
        if let Ok(Some(answer)) = imds::parse_answer(data, at_eof) {
            assert!(answer.body.len() <= data.len());
        }
    }
}
