//! The attribution on CONTEXT.md §2's three steps and §4's flows. The instance figures are what
//! moto's DescribeInstanceTypes returns (moto 5, `instance_types.json`), which the EC2 crate's
//! moto test checks end to end; they differ from the blog's table where AWS's API does (r6in.8xlarge
//! EBS 3125 MB/s, not 2500).

use super::*;
use crate::limits::caps::{InstanceCaps, NetworkCard};

fn instance(kind: &str, base_mb: f64, max_mb: f64, base_iops: f64, max_iops: f64) -> InstanceCaps {
    InstanceCaps {
        instance_type: kind.into(),
        ebs: Some(EbsCaps {
            baseline_mb_per_s: base_mb,
            maximum_mb_per_s: max_mb,
            baseline_iops: base_iops,
            maximum_iops: max_iops,
        }),
        network: NetworkCaps {
            performance: None,
            ena_support: Some("required".into()),
            cards: Vec::new(),
        },
        default_vcpus: None,
        default_cores: None,
    }
}

fn volume(kind: &str, iops: u64, mib: Option<u64>) -> VolumeInfo {
    VolumeInfo {
        volume_id: "vol-0aaaabbbbccccdddd".into(),
        volume_type: kind.into(),
        size_gib: 2000,
        iops: Some(iops),
        throughput_mib_per_s: mib,
        snapshot_id: None,
        multi_attach: false,
        initialization: None,
        device: Some("nvme1n1".into()),
        prewarm: None,
    }
}

fn host(instance: InstanceCaps, volume: VolumeInfo) -> HostCaps {
    HostCaps {
        instance: Some(instance),
        volumes: vec![volume],
        ..Default::default()
    }
}

const KIB: u64 = 1024;

fn seq(mb_per_s: f64) -> DiskMeasure {
    DiskMeasure {
        mb_per_s,
        iops: mb_per_s * 1e6 / (128 * KIB) as f64,
        block_bytes: 128 * KIB,
    }
}

#[test]
fn step_1_r6i_8xlarge_with_gp3_is_capped_by_the_volume() {
    let caps = host(
        instance("r6i.8xlarge", 1250.0, 1250.0, 40000.0, 40000.0),
        volume("gp3", 16000, Some(1000)),
    );
    let a = attribute_disk(seq(1040.0), &caps, Some("nvme1n1"), None).unwrap();
    assert_eq!(a.standing, Standing::Capped, "{a:#?}");
    let cap = a.cap.as_ref().unwrap();
    assert_eq!((cap.holder, cap.dimension), (Holder::Volume, "throughput"));
    assert!((a.share.unwrap() - 1040.0 / 1048.576).abs() < 1e-9);
    assert!(
        a.line.starts_with("capped by the volume (gp3"),
        "{}",
        a.line
    );
    assert!(a.line.contains("1000 MiB/s = 1048.58 MB/s"), "{}", a.line);
    let next = a.next.unwrap();
    assert!(
        next.contains("r6i.8xlarge EBS 1250 MB/s") && next.contains("19.2%"),
        "{next}"
    );
}

#[test]
fn step_2_r6in_8xlarge_with_io2_block_express_is_capped_by_the_instance() {
    let caps = host(
        instance("r6in.8xlarge", 3125.0, 3125.0, 100000.0, 100000.0),
        volume("io2", 32000, None),
    );
    let a = attribute_disk(seq(3100.0), &caps, Some("nvme1n1"), None).unwrap();
    assert_eq!(a.standing, Standing::Capped, "{a:#?}");
    assert_eq!(a.cap.as_ref().unwrap().holder, Holder::Instance);
    assert!(
        a.line
            .starts_with("capped by the instance (r6in.8xlarge EBS 3125 MB/s): measured 3100 MB/s"),
        "{}",
        a.line
    );
    // Raising the instance: the volume's 4000 MiB/s (4194 MB/s) binds next.
    assert!(a.next.unwrap().contains("the volume"));
    assert!(a.caveats.iter().any(|c| c.contains("Block Express")));
}

#[test]
fn step_3_m6in_12xlarge_is_capped_by_the_volumes_iops_at_16_kib() {
    let caps = host(
        instance("m6in.12xlarge", 4687.5, 4687.5, 150000.0, 150000.0),
        volume("io2", 32000, None),
    );
    let iops = 31900.0;
    let m = DiskMeasure {
        mb_per_s: iops * (16 * KIB) as f64 / 1e6,
        iops,
        block_bytes: 16 * KIB,
    };
    let a = attribute_disk(m, &caps, Some("nvme1n1"), None).unwrap();
    assert_eq!(a.standing, Standing::Capped, "{a:#?}");
    let cap = a.cap.unwrap();
    assert_eq!((cap.holder, cap.dimension), (Holder::Volume, "IOPS"));
    assert!(
        a.line
            .contains("the volume's IOPS (io2 Block Express, provisioned 32000 IOPS")
    );
    assert!(a.line.contains("measured 31900 IOPS, 99.7%"), "{}", a.line);
    // Same machine at 128 KiB under the caps: below every cap.
    let a = attribute_disk(seq(2600.0), &caps, Some("nvme1n1"), None).unwrap();
    assert_eq!(a.standing, Standing::Below, "{a:#?}");
    assert!(a.line.starts_with("below every cap (62%"), "{}", a.line);
}

#[test]
fn a_bursting_instance_says_how_long_its_figure_holds() {
    let caps = host(
        instance("c5.large", 81.25, 593.75, 4000.0, 20000.0),
        volume("gp3", 16000, Some(1000)),
    );
    let a = attribute_disk(seq(590.0), &caps, Some("nvme1n1"), None).unwrap();
    assert_eq!(a.standing, Standing::Burst, "{a:#?}");
    assert!(
        a.line.contains("c5.large EBS 593.75 MB/s") && a.line.contains("sustained 81.25 MB/s"),
        "{}",
        a.line
    );
    let spent = attribute_disk(seq(80.0), &caps, Some("nvme1n1"), None).unwrap();
    assert_eq!(spent.standing, Standing::Capped, "{spent:#?}");
    assert!(
        spent.line.contains("sustained 81.25 MB/s"),
        "{}",
        spent.line
    );
    let mid = attribute_disk(seq(300.0), &caps, Some("nvme1n1"), None).unwrap();
    assert_eq!(mid.standing, Standing::Burst, "{mid:#?}");
}

#[test]
fn a_cached_result_is_above_every_cap_and_no_caps_means_no_verdict() {
    let caps = host(
        instance("r6i.8xlarge", 1250.0, 1250.0, 40000.0, 40000.0),
        volume("gp3", 3000, Some(125)),
    );
    let a = attribute_disk(seq(900.0), &caps, Some("nvme1n1"), None).unwrap();
    assert_eq!(a.standing, Standing::Above, "{a:#?}");
    // Another device: only the instance's caps apply.
    let a = attribute_disk(seq(900.0), &caps, Some("nvme9n1"), None).unwrap();
    assert_eq!(a.cap.unwrap().holder, Holder::Instance);
    assert_eq!(
        attribute_disk(seq(900.0), &HostCaps::default(), None, None),
        None
    );
}

#[test]
fn time_measured_over_a_limit_outranks_the_inference() {
    let caps = host(
        instance("r6i.8xlarge", 1250.0, 1250.0, 40000.0, 40000.0),
        volume("gp3", 16000, Some(1000)),
    );
    let exceeded = EbsExceeded {
        instance_throughput_us: 40_000_000,
        volume_throughput_us: 1_000_000,
        elapsed_us: 60_000_000,
        ..Default::default()
    };
    // Inference alone would call 700 MB/s below every cap.
    let a = attribute_disk(seq(700.0), &caps, Some("nvme1n1"), Some(exceeded)).unwrap();
    assert_eq!(a.standing, Standing::Capped);
    assert_eq!(a.evidence, "EBS NVMe statistics");
    assert!(
        a.line.contains("instance's throughput") && a.line.contains("66.7%"),
        "{}",
        a.line
    );
    // A blip under 5% of the trial is not a cause.
    let blip = EbsExceeded {
        volume_iops_us: 1_000_000,
        elapsed_us: 60_000_000,
        ..Default::default()
    };
    let a = attribute_disk(seq(700.0), &caps, Some("nvme1n1"), Some(blip)).unwrap();
    assert_eq!(
        (a.standing, a.evidence.as_str()),
        (Standing::Below, "inferred")
    );
}

fn c5n_18xlarge(cluster: bool) -> HostCaps {
    let mut i = instance("c5n.18xlarge", 2375.0, 2375.0, 80000.0, 80000.0);
    i.network.cards = vec![NetworkCard {
        index: 0,
        baseline_gbps: Some(100.0),
        peak_gbps: Some(100.0),
    }];
    HostCaps {
        instance: Some(i),
        cluster_placement_group: cluster,
        ..Default::default()
    }
}

#[test]
fn section_4_flows_against_the_per_flow_and_card_limits() {
    let caps = c5n_18xlarge(true);
    let net = |gbps, flows| attribute_net(NetMeasure { gbps, flows }, &caps, &[]).unwrap();
    // One flow at ~9.5 Gbit/s: the 10 Gbit/s single-flow limit.
    let a = net(9.5, 1);
    assert_eq!(
        (a.standing, a.cap.as_ref().unwrap().holder),
        (Standing::Capped, Holder::Flow)
    );
    assert!(a.next.unwrap().contains("the instance's network"));
    // 8 streams at 28 Gbit/s: under every cap, the core is the limit.
    assert_eq!(net(28.0, 8).standing, Standing::Below);
    // 32 flows at 95 Gbit/s: the card's 100 Gbit/s.
    let a = net(95.0, 32);
    assert_eq!(
        (a.standing, a.cap.unwrap().holder),
        (Standing::Capped, Holder::Network)
    );
    // Outside a cluster placement group a flow stops at 5 Gbit/s.
    let outside = c5n_18xlarge(false);
    let a = attribute_net(
        NetMeasure {
            gbps: 4.9,
            flows: 1,
        },
        &outside,
        &[],
    )
    .unwrap();
    assert!(
        a.line.contains("outside a cluster placement group"),
        "{}",
        a.line
    );
}

#[test]
fn up_to_bandwidth_is_a_burst_and_allowance_counters_win() {
    let mut i = instance("c5.large", 81.25, 593.75, 4000.0, 20000.0);
    i.network.cards = vec![NetworkCard {
        index: 0,
        baseline_gbps: Some(0.75),
        peak_gbps: Some(10.0),
    }];
    let caps = HostCaps {
        instance: Some(i),
        ..Default::default()
    };
    let a = attribute_net(
        NetMeasure {
            gbps: 4.8,
            flows: 1,
        },
        &caps,
        &[],
    )
    .unwrap();
    assert_eq!(a.standing, Standing::Capped, "{a:#?}");
    let a = attribute_net(
        NetMeasure {
            gbps: 3.0,
            flows: 2,
        },
        &caps,
        &[],
    )
    .unwrap();
    assert_eq!(a.standing, Standing::Burst, "{a:#?}");
    let grew = [("bw_out_allowance_exceeded".to_string(), 1234)];
    let a = attribute_net(
        NetMeasure {
            gbps: 3.0,
            flows: 2,
        },
        &caps,
        &grew,
    )
    .unwrap();
    assert_eq!(
        (a.standing, a.evidence.as_str()),
        (Standing::Capped, "ENA allowances")
    );
    assert!(
        a.line.contains("bw_out_allowance_exceeded grew by 1234"),
        "{}",
        a.line
    );
}
