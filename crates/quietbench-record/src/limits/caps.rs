//! The caps a host's disk and network results run into: the instance's (DescribeInstanceTypes)
//! and each attached EBS volume's (DescribeVolumes). Plain data, filled by the EC2 crate when the
//! controller has AWS credentials, stored with the run, and read by the attribution.

use serde::{Deserialize, Serialize};

/// The instance type's EBS caps (DescribeInstanceTypes `EbsInfo.EbsOptimizedInfo`). AWS publishes
/// the MB/s figures for 128 KiB requests and the IOPS for 16 KiB requests; MB/s is decimal
/// (the API's bandwidth in Mbit/s divided by 8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EbsCaps {
    /// Throughput the instance sustains, MB/s.
    pub baseline_mb_per_s: f64,
    /// Throughput it reaches while its burst lasts, MB/s (equal to the baseline on types that
    /// do not burst).
    pub maximum_mb_per_s: f64,
    /// IOPS it sustains.
    pub baseline_iops: f64,
    /// IOPS while its burst lasts.
    pub maximum_iops: f64,
}

impl EbsCaps {
    /// Whether the maximum is a burst above the baseline (smaller types: c5.large's 593.75 MB/s
    /// holds for 30 minutes a day, its 81.25 MB/s always).
    pub fn bursts(&self) -> bool {
        self.maximum_mb_per_s > self.baseline_mb_per_s || self.maximum_iops > self.baseline_iops
    }
}

/// One network card's bandwidth (DescribeInstanceTypes `NetworkInfo.NetworkCards`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetworkCard {
    /// NetworkCardIndex.
    pub index: u32,
    /// Bandwidth the card sustains, Gbit/s.
    pub baseline_gbps: Option<f64>,
    /// Bandwidth while its burst lasts ("Up to 10 Gigabit"), Gbit/s.
    pub peak_gbps: Option<f64>,
}

/// The instance type's network caps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetworkCaps {
    /// AWS's text, e.g. "Up to 12.5 Gigabit", "50 Gigabit".
    pub performance: Option<String>,
    /// ENA support: "required", "supported", "unsupported".
    pub ena_support: Option<String>,
    /// Per card.
    pub cards: Vec<NetworkCard>,
}

impl NetworkCaps {
    /// The default card's (index 0, else the first) baseline and peak, Gbit/s.
    pub fn primary(&self) -> Option<&NetworkCard> {
        self.cards
            .iter()
            .find(|c| c.index == 0)
            .or_else(|| self.cards.first())
    }
}

/// An instance type's caps, as DescribeInstanceTypes gave them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceCaps {
    /// e.g. r6in.8xlarge.
    pub instance_type: String,
    /// EBS caps; `None` for a type without EBS-optimized figures.
    pub ebs: Option<EbsCaps>,
    /// Network caps.
    pub network: NetworkCaps,
    /// Default vCPUs.
    pub default_vcpus: Option<u32>,
    /// Default physical cores.
    pub default_cores: Option<u32>,
}

/// An EBS volume as DescribeVolumes describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VolumeInfo {
    /// vol-...
    pub volume_id: String,
    /// gp2, gp3, io1, io2, st1, sc1, standard.
    pub volume_type: String,
    /// Size, GiB.
    pub size_gib: u64,
    /// Provisioned IOPS (gp3, io1, io2), or gp2's baseline, as the API gives it.
    pub iops: Option<u64>,
    /// Provisioned throughput, MiB/s (gp3 only).
    pub throughput_mib_per_s: Option<u64>,
    /// The snapshot it was created from: its blocks load from S3 on first touch.
    pub snapshot_id: Option<String>,
    /// Multi-Attach enabled.
    pub multi_attach: bool,
    /// Whether its blocks are all loaded yet, where the API says ("completed", "initializing"…).
    pub initialization: Option<String>,
    /// The kernel's name for it on the host (`nvme1n1`), matched by the NVMe serial.
    pub device: Option<String>,
    /// The pre-warm quietbench ran over it before measuring, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prewarm: Option<Prewarm>,
}

/// A pre-warm pass over a restored volume: every block read once (disk.scan prewarm=true).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prewarm {
    /// Bytes read.
    pub bytes: u64,
    /// How long it took, seconds.
    pub seconds: f64,
}

impl Prewarm {
    /// "8.0 GiB in 182 s at 47.2 MB/s".
    pub fn summary(&self) -> String {
        let rate = if self.seconds > 0.0 {
            self.bytes as f64 / self.seconds / 1e6
        } else {
            0.0
        };
        format!(
            "{:.1} GiB in {:.0} s at {rate:.1} MB/s",
            self.bytes as f64 / (1u64 << 30) as f64,
            self.seconds
        )
    }
}

impl VolumeInfo {
    /// Restored from a snapshot and not known to be fully loaded: first touch of each block is
    /// slow (CONTEXT.md §5: ~10× on gp2).
    pub fn needs_prewarm(&self) -> bool {
        self.snapshot_id.as_deref().is_some_and(|s| !s.is_empty())
            && self.initialization.as_deref() != Some("completed")
            && self.prewarm.is_none()
    }
}

/// What is known of one host's caps, with where it came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostCaps {
    /// The instance type's caps.
    pub instance: Option<InstanceCaps>,
    /// Its attached EBS volumes that the agent saw.
    pub volumes: Vec<VolumeInfo>,
    /// In a cluster placement group: the single-flow limit is 10 Gbit/s there, 5 elsewhere.
    pub cluster_placement_group: bool,
    /// Where the caps come from, e.g. "DescribeInstanceTypes, DescribeVolumes (us-east-1)".
    pub source: String,
    /// What could not be looked up, and why.
    pub notes: Vec<String>,
}

impl HostCaps {
    /// The volume behind block device `device` (a kernel name such as `nvme1n1`).
    pub fn volume_on(&self, device: &str) -> Option<&VolumeInfo> {
        self.volumes
            .iter()
            .find(|v| v.device.as_deref() == Some(device))
    }
}
