//! Every page decoded here is built from the published layout, not captured (no EBS device is
//! reachable from the development VM), so the decoder tests are named `synthetic_…` as
//! tests/fixtures/README.md asks.

use super::*;

/// The page built with Python's `struct` from the CloudWatch agent's `EBSMetrics` struct (see
/// tests/fixtures/public/ebs-nvme/README.md). Not a capture: no EBS device here.
const BUILT_PAGE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/public/ebs-nvme/log-page-d0-built.bin"
);

fn built_page() -> Vec<u8> {
    std::fs::read(BUILT_PAGE).unwrap_or_else(|e| panic!("cannot read fixture {BUILT_PAGE}: {e}"))
}

/// The twelve leading u64 fields, in the CloudWatch agent's order: magic, read ops, write ops,
/// read bytes, write bytes, read time, write time, volume IOPS exceeded, volume throughput
/// exceeded, instance IOPS exceeded, instance throughput exceeded, queue length.
type Counters = [u64; 12];

/// The values the fixture was built with (its README lists them).
const FIXTURE_COUNTERS: Counters = [
    0x3C23_B510,
    1_000_001,
    2_000_002,
    4_096_000_003,
    0x0102_0304_0506_0708,
    5_000_005,
    6_000_006,
    7_007,
    8_008,
    9_009,
    10_010,
    11,
];
const FIXTURE_READ_BINS: [(u64, u64, u64); 3] = [(0, 100, 500), (100, 200, 300), (200, 500, 7)];
const FIXTURE_WRITE_BINS: [(u64, u64, u64); 2] = [(0, 1000, 40), (1000, 2000, 2)];

fn put(page: &mut [u8], at: usize, value: u64) {
    page[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

/// Builds a 4096-byte page from the published layout. The offsets are written out here as
/// numbers, not taken from the module, so a wrong constant there cannot agree with itself.
fn build_page(counters: Counters, read: &[(u64, u64, u64)], write: &[(u64, u64, u64)]) -> Vec<u8> {
    let mut page = vec![0u8; 4096];
    for (i, value) in counters.into_iter().enumerate() {
        put(&mut page, i * 8, value);
    }
    // 12 fields of 8 bytes end at 96; 416 reserved bytes end at 512.
    for (start, bins) in [(512, read), (2056, write)] {
        put(&mut page, start, bins.len() as u64);
        for (i, &(lower, upper, count)) in bins.iter().enumerate() {
            let bin = start + 8 + i * 24;
            put(&mut page, bin, lower);
            put(&mut page, bin + 8, upper);
            put(&mut page, bin + 16, count);
        }
    }
    page
}

fn bins(spec: &[(u64, u64, u64)]) -> Vec<EbsLatencyBin> {
    spec.iter()
        .map(|&(lower_us, upper_us, count)| EbsLatencyBin {
            lower_us,
            upper_us,
            count,
        })
        .collect()
}

fn fixture_stats() -> EbsNvmeStats {
    EbsNvmeStats {
        total_read_ops: 1_000_001,
        total_write_ops: 2_000_002,
        total_read_bytes: 4_096_000_003,
        total_write_bytes: 0x0102_0304_0506_0708,
        total_read_time_us: 5_000_005,
        total_write_time_us: 6_000_006,
        ebs_volume_performance_exceeded_iops_us: 7_007,
        ebs_volume_performance_exceeded_tp_us: 8_008,
        ec2_instance_ebs_performance_exceeded_iops_us: 9_009,
        ec2_instance_ebs_performance_exceeded_tp_us: 10_010,
        volume_queue_length_ops: 11,
        read_latency: EbsLatencyHistogram {
            bins: bins(&FIXTURE_READ_BINS),
            declared_bins: 3,
        },
        write_latency: EbsLatencyHistogram {
            bins: bins(&FIXTURE_WRITE_BINS),
            declared_bins: 2,
        },
    }
}

#[test]
fn synthetic_decodes_the_page_built_from_the_published_layout() {
    let page = built_page();
    assert_eq!(page.len(), EBS_STATS_LOG_PAGE_BYTES);
    assert_eq!(decode_ebs_log_page(&page).unwrap(), fixture_stats());
}

#[test]
fn synthetic_the_test_builder_agrees_with_the_python_built_fixture() {
    // Two independent encodings of the layout (Python struct in the README, this file's
    // builder) must give the same bytes, so neither can drift alone.
    let built = build_page(FIXTURE_COUNTERS, &FIXTURE_READ_BINS, &FIXTURE_WRITE_BINS);
    assert!(built == built_page(), "builder and fixture differ");
}

#[test]
fn layout_constants_match_the_published_offsets() {
    assert_eq!(READ_HISTOGRAM, 512);
    assert_eq!(WRITE_HISTOGRAM, 2056);
    assert_eq!(EBS_STATS_USED_BYTES, 3600);
    // 3600 used bytes plus nvme-cli's `reserved2[496]` make the page.
    assert_eq!(EBS_STATS_USED_BYTES + 496, EBS_STATS_LOG_PAGE_BYTES);
}

#[test]
fn synthetic_a_page_of_exactly_the_used_bytes_decodes_and_one_less_is_truncated() {
    let page = built_page();
    assert_eq!(decode_ebs_log_page(&page[..3600]).unwrap(), fixture_stats());
    assert!(matches!(
        decode_ebs_log_page(&page[..3599]),
        Err(EbsStatsError::Truncated { len: 3599 })
    ));
}

#[test]
fn synthetic_a_longer_buffer_decodes_the_same() {
    let mut page = built_page();
    page.extend_from_slice(&[0xAB; 100]);
    assert_eq!(decode_ebs_log_page(&page).unwrap(), fixture_stats());
}

#[test]
fn synthetic_a_wrong_magic_is_refused_with_the_value_found() {
    let mut counters = FIXTURE_COUNTERS;
    counters[0] = 0x1234_5678;
    let page = build_page(counters, &[], &[]);
    let err = decode_ebs_log_page(&page).unwrap_err();
    assert!(matches!(
        err,
        EbsStatsError::BadMagic { found: 0x1234_5678 }
    ));
    let message = err.to_string();
    assert!(message.contains("0x12345678"), "{message}");
    assert!(message.contains("0x3c23b510"), "{message}");
}

#[test]
fn synthetic_the_magic_is_eight_bytes_as_the_cloudwatch_agent_reads_it() {
    // nvme-cli and ebsnvme read a u32 magic and 4 reserved bytes; the CloudWatch agent reads a
    // u64. With a non-zero reserved byte this module follows the CloudWatch agent and refuses.
    // Newer nvme-cli calls these bytes `version`; the error must say that, not "not EBS".
    let mut page = built_page();
    page[4] = 1;
    let err = decode_ebs_log_page(&page).unwrap_err();
    assert!(
        matches!(
            err,
            EbsStatsError::BadMagic {
                found: 0x1_3C23_B510
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains("version") && message.contains("are 1"),
        "{message}"
    );
}

#[test]
fn synthetic_an_instance_store_page_is_named_as_such() {
    // nvme-cli and the CloudWatch agent give instance store the magic 0xEC2C0D7E (as a u32).
    let mut counters = FIXTURE_COUNTERS;
    counters[0] = 0xEC2C_0D7E;
    let err = decode_ebs_log_page(&build_page(counters, &[], &[])).unwrap_err();
    assert!(err.to_string().contains("instance-store volume"), "{err}");
}

#[test]
fn synthetic_a_bin_count_is_read_as_a_u64_as_the_cloudwatch_agent_reads_it() {
    // nvme-cli reads a u32 count and a u32 reserved; the CloudWatch agent reads one u64.
    let read = [(0, 100, 0x1_0000_0002)];
    let page = build_page(FIXTURE_COUNTERS, &read, &[]);
    let stats = decode_ebs_log_page(&page).unwrap();
    assert_eq!(stats.read_latency.bins, bins(&read));
    assert_eq!(stats.write_latency.bins, Vec::new());
    assert_eq!(stats.write_latency.declared_bins, 0);
}

#[test]
fn synthetic_slots_past_the_declared_bin_count_are_ignored() {
    let mut page = build_page(FIXTURE_COUNTERS, &FIXTURE_READ_BINS, &FIXTURE_WRITE_BINS);
    // Garbage in read slot 3 (unused: 3 bins declared).
    put(&mut page, 512 + 8 + 3 * 24 + 16, 999);
    let stats = decode_ebs_log_page(&page).unwrap();
    assert_eq!(stats.read_latency.bins, bins(&FIXTURE_READ_BINS));
}

#[test]
fn synthetic_a_bin_count_over_64_is_clamped_and_kept_visible() {
    let all: Vec<(u64, u64, u64)> = (0..64).map(|i| (i * 10, i * 10 + 10, i)).collect();
    for declared in [65, 1 << 40, u64::MAX] {
        let mut page = build_page(FIXTURE_COUNTERS, &all, &all);
        put(&mut page, 512, declared);
        let stats = decode_ebs_log_page(&page).unwrap();
        assert_eq!(stats.read_latency.bins, bins(&all));
        assert_eq!(stats.read_latency.declared_bins, declared);
        // The write histogram's 64th bin ends exactly at byte 3600.
        assert_eq!(stats.write_latency.bins.len(), 64);
        assert_eq!(stats.write_latency.bins[63], bins(&all)[63]);
    }
}

/// A small deterministic generator (xorshift64*), so the garbage is the same on every run.
struct Garbage(u64);

impl Garbage {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

#[test]
fn never_panics_on_empty_truncated_or_garbage_input() {
    let mut garbage = Garbage(0x9E37_79B9_7F4A_7C15);
    assert!(matches!(
        decode_ebs_log_page(&[]),
        Err(EbsStatsError::Truncated { len: 0 })
    ));
    let fixture = built_page();
    for len in 0..=4200 {
        // Random bytes: almost always a bad magic, or truncated.
        let random = garbage.bytes(len);
        let _ = decode_ebs_log_page(&random);
        // Random bytes behind a valid magic: random bin counts, clamped.
        let mut with_magic = random;
        if len >= 8 {
            with_magic[..8].copy_from_slice(&EBS_STATS_MAGIC.to_le_bytes());
        }
        match decode_ebs_log_page(&with_magic) {
            Ok(stats) => {
                assert!(len >= 3600);
                assert!(stats.read_latency.bins.len() <= 64);
                assert!(stats.write_latency.bins.len() <= 64);
            }
            Err(EbsStatsError::Truncated { len: l }) => assert!(l == len && len < 3600),
            Err(other) => panic!("length {len}: unexpected {other}"),
        }
        // Every prefix of the real layout.
        let prefix = &fixture[..len.min(fixture.len())];
        assert_eq!(decode_ebs_log_page(prefix).is_ok(), prefix.len() >= 3600);
    }
    let ones = vec![0xFF; 4096];
    assert!(matches!(
        decode_ebs_log_page(&ones),
        Err(EbsStatsError::BadMagic { found: u64::MAX })
    ));
}

fn later(stats: &EbsNvmeStats, step: u64) -> EbsNvmeStats {
    EbsNvmeStats {
        total_read_ops: stats.total_read_ops + step,
        total_write_ops: stats.total_write_ops + 2 * step,
        total_read_bytes: stats.total_read_bytes + 4096 * step,
        total_write_bytes: stats.total_write_bytes + 8192 * step,
        total_read_time_us: stats.total_read_time_us + 10 * step,
        total_write_time_us: stats.total_write_time_us + 20 * step,
        ebs_volume_performance_exceeded_iops_us: stats.ebs_volume_performance_exceeded_iops_us + 3,
        ebs_volume_performance_exceeded_tp_us: stats.ebs_volume_performance_exceeded_tp_us,
        ec2_instance_ebs_performance_exceeded_iops_us: stats
            .ec2_instance_ebs_performance_exceeded_iops_us
            + 5,
        ec2_instance_ebs_performance_exceeded_tp_us: stats
            .ec2_instance_ebs_performance_exceeded_tp_us
            + 7,
        volume_queue_length_ops: 0,
        ..stats.clone()
    }
}

#[test]
fn deltas_between_two_samples() {
    let before = fixture_stats();
    let after = later(&before, 100);
    assert_eq!(
        exceeded_between(&before, &after),
        EbsInterval::Deltas(EbsDeltas {
            read_ops: 100,
            write_ops: 200,
            read_bytes: 409_600,
            write_bytes: 819_200,
            read_time_us: 1000,
            write_time_us: 2000,
            ebs_volume_performance_exceeded_iops_us: 3,
            ebs_volume_performance_exceeded_tp_us: 0,
            ec2_instance_ebs_performance_exceeded_iops_us: 5,
            ec2_instance_ebs_performance_exceeded_tp_us: 7,
        })
    );
    let EbsInterval::Deltas(deltas) = exceeded_between(&before, &after) else {
        panic!("no reset here");
    };
    assert!(deltas.any_exceeded());
}

#[test]
fn an_unchanged_volume_has_zero_deltas_and_was_not_throttled() {
    let stats = fixture_stats();
    let interval = exceeded_between(&stats, &stats);
    assert_eq!(interval, EbsInterval::Deltas(EbsDeltas::default()));
    let EbsInterval::Deltas(deltas) = interval else {
        unreachable!()
    };
    assert!(!deltas.any_exceeded());
}

#[test]
fn a_queue_that_shrank_is_not_a_reset() {
    let before = fixture_stats();
    let after = EbsNvmeStats {
        volume_queue_length_ops: 0,
        ..before.clone()
    };
    assert!(matches!(
        exceeded_between(&before, &after),
        EbsInterval::Deltas(_)
    ));
}

#[test]
fn a_counter_that_went_backwards_is_a_reset_not_a_huge_or_zero_delta() {
    let before = fixture_stats();
    // After a re-attach every counter starts again; only some have passed their old value.
    let after = EbsNvmeStats {
        total_read_ops: 10,
        ebs_volume_performance_exceeded_tp_us: 9_000,
        ec2_instance_ebs_performance_exceeded_iops_us: 1,
        ..later(&before, 1)
    };
    assert_eq!(
        exceeded_between(&before, &after),
        EbsInterval::Reset {
            counters: vec![
                "total_read_ops",
                "ec2_instance_ebs_performance_exceeded_iops_us"
            ],
        }
    );
}

#[test]
fn deltas_at_the_top_of_the_range_do_not_overflow() {
    let mut before = fixture_stats();
    before.total_write_bytes = 0;
    let after = EbsNvmeStats {
        total_write_bytes: u64::MAX,
        ..before.clone()
    };
    let EbsInterval::Deltas(deltas) = exceeded_between(&before, &after) else {
        panic!("no reset here");
    };
    assert_eq!(deltas.write_bytes, u64::MAX);
}

#[test]
fn the_command_struct_has_the_kernel_layout() {
    // Offsets of `struct nvme_passthru_cmd` in <linux/nvme_ioctl.h>.
    use std::mem::offset_of;
    assert_eq!(std::mem::size_of::<NvmePassthruCmd>(), 72);
    assert_eq!(offset_of!(NvmePassthruCmd, nsid), 4);
    assert_eq!(offset_of!(NvmePassthruCmd, metadata), 16);
    assert_eq!(offset_of!(NvmePassthruCmd, addr), 24);
    assert_eq!(offset_of!(NvmePassthruCmd, data_len), 36);
    assert_eq!(offset_of!(NvmePassthruCmd, cdw10), 40);
    assert_eq!(offset_of!(NvmePassthruCmd, timeout_ms), 64);
    assert_eq!(offset_of!(NvmePassthruCmd, result), 68);
}

#[test]
fn the_request_code_is_nvme_ioctl_admin_cmd() {
    // The literal the CloudWatch agent and amazon-ec2-utils pass.
    let code = nix::request_code_readwrite!(b'N', 0x41, std::mem::size_of::<NvmePassthruCmd>());
    assert_eq!(code as u64, 0xC048_4E41);
}

#[test]
fn get_log_page_asks_for_log_0xd0_and_exactly_one_page() {
    assert_eq!(GET_LOG_PAGE_CDW10 & 0xFF, 0xD0);
    // NUMDL is zero-based: 1023 means 1024 dwords, 4096 bytes.
    assert_eq!(GET_LOG_PAGE_CDW10 >> 16, 1023);
}

// On this machine (and any machine without EBS) the reader must fail clearly, never return
// numbers and never panic.

#[test]
fn reading_dev_null_says_it_is_not_an_nvme_device() {
    let err = read_ebs_stats(Path::new("/dev/null")).unwrap_err();
    assert!(
        matches!(
            err,
            EbsStatsError::NotNvme {
                errno: Errno::ENOTTY,
                ..
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("/dev/null"), "{message}");
    assert!(message.contains("not an NVMe device"), "{message}");
}

#[test]
fn reading_a_regular_file_says_it_is_not_an_nvme_device() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nvme0n1");
    // Even a file holding a valid page is not a device.
    std::fs::write(&path, built_page()).unwrap();
    let err = read_ebs_stats(&path).unwrap_err();
    assert!(matches!(err, EbsStatsError::NotNvme { .. }), "{err:?}");
    assert!(err.to_string().contains(path.to_str().unwrap()));
}

#[test]
fn reading_a_missing_node_says_which_node_to_pass() {
    let err = read_ebs_stats(Path::new("/dev/nvme-quietbench-absent")).unwrap_err();
    let EbsStatsError::Open { source, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
    let message = err.to_string();
    assert!(message.contains("/dev/nvme-quietbench-absent"), "{message}");
    assert!(message.contains("/dev/nvme1n1"), "{message}");
}

#[test]
fn reading_the_machines_own_disks_fails_clearly_unless_they_are_ebs() {
    // Whatever disks this machine has: EBS volumes must decode, anything else must give an
    // error naming the device. On the development VM this is virtio `vda`.
    let (devices, _) = crate::devices::read_block_devices(&crate::HostRoot::live());
    for device in devices {
        let node = Path::new("/dev").join(&device.name);
        if !node.exists() {
            continue;
        }
        match read_ebs_stats(&node) {
            Ok(stats) => assert!(
                device.ebs_volume_id.is_some(),
                "{} is not EBS but gave {stats:?}",
                device.name
            ),
            Err(err) => {
                let message = err.to_string();
                eprintln!("{}: {message}", device.name);
                assert!(message.contains(node.to_str().unwrap()), "{message}");
            }
        }
    }
}

#[test]
fn error_messages_say_what_to_do() {
    let device = PathBuf::from("/dev/nvme1n1");
    let denied = EbsStatsError::PermissionDenied {
        device: device.clone(),
        errno: Errno::EACCES,
    }
    .to_string();
    assert!(
        denied.contains("/dev/nvme1n1") && denied.contains("root"),
        "{denied}"
    );
    let open = EbsStatsError::Open {
        device: device.clone(),
        source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
    }
    .to_string();
    assert!(
        open.contains("/dev/nvme1n1") && open.contains("root"),
        "{open}"
    );
    let status = EbsStatsError::NvmeStatus {
        status: 0x4109,
        device: device.clone(),
    }
    .to_string();
    assert!(
        status.contains("0x4109") && status.contains("EBS"),
        "{status}"
    );
    let not_ebs = EbsStatsError::NotEbs {
        device,
        found: 0xdead,
    }
    .to_string();
    assert!(
        not_ebs.contains("0xdead") && not_ebs.contains("not an EBS volume"),
        "{not_ebs}"
    );
}
