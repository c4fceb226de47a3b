//! Device monitors: what EC2 itself says about a trial's devices. For a disk probe, EBS's NVMe
//! statistics of its volume (time demand spent over the volume's and the instance's limits);
//! for a network probe, ENA's allowance counters (packets EC2 shaped). Sampled with the other
//! noise monitors, on the supervisor thread, at interval boundaries; never by a probe thread.
//!
//! A device without them (virtio, a local disk, a machine off EC2) gives `None` and a line in
//! `unavailable`, never zero: zero would claim "not capped".

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::HostRoot;
use crate::ebs_nvme::{EbsInterval, EbsNvmeStats, exceeded_between, read_ebs_stats};
use crate::ethtool::{
    Allowance, EnaAllowances, NicStats, NicStatsReader, allowances_between, ena_allowances,
};

/// The kernel name of the whole disk that holds `path` (a file, a directory or a block
/// device): `nvme1n1` for `/mnt/data/file` on `nvme1n1p1`. `None` where sysfs does not say
/// (overlay and network filesystems, a path that does not exist).
pub fn block_device_of(root: &HostRoot, path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path)
        .ok()
        .or_else(|| std::fs::metadata(path.parent()?).ok())?;
    let dev = if meta.file_type().is_block_device() {
        meta.rdev()
    } else {
        meta.dev()
    };
    let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    disk_of_devnum(root, major, minor)
}

/// The whole disk of device number MAJOR:MINOR, through `/sys/dev/block` (a partition's entry
/// has a `partition` file; its disk is the parent directory).
pub fn disk_of_devnum(root: &HostRoot, major: u64, minor: u64) -> Option<String> {
    let link = root.resolve(&format!("/sys/dev/block/{major}:{minor}"));
    let real = std::fs::canonicalize(&link).ok()?;
    let disk: PathBuf = if real.join("partition").exists() {
        real.parent()?.to_path_buf()
    } else {
        real
    };
    disk.file_name()?.to_str().map(str::to_string)
}

/// Whether one device monitor can read here: (monitor, device, available, detail).
pub type MonitorCheck = (&'static str, String, bool, String);

/// Which device monitors can read on this machine: EBS NVMe statistics on each EBS device
/// (`ebs_devices`: kernel names), ENA allowance counters on each interface in `nics`. Reads the
/// live machine: call it only for the live root.
pub fn monitor_checks(ebs_devices: &[String], nics: &[String]) -> Vec<MonitorCheck> {
    let mut out = Vec::new();
    if ebs_devices.is_empty() {
        out.push((
            "ebs_nvme_stats",
            String::new(),
            false,
            "no EBS NVMe device (not on EC2 Nitro, or no EBS volume)".into(),
        ));
    }
    for name in ebs_devices {
        let check = match read_ebs_stats(Path::new(&format!("/dev/{name}"))) {
            Ok(s) => (
                true,
                format!(
                    "readable: {} ops, demand over the volume's limits {} us so far",
                    s.total_read_ops + s.total_write_ops,
                    s.ebs_volume_performance_exceeded_iops_us
                        + s.ebs_volume_performance_exceeded_tp_us
                ),
            ),
            Err(e) => (false, e.to_string()),
        };
        out.push(("ebs_nvme_stats", name.clone(), check.0, check.1));
    }
    for name in nics {
        let check = match crate::ethtool::read_nic_stats(name) {
            Ok(stats) => match ena_allowances(&stats) {
                Some(_) => (true, "ENA allowance counters present".to_string()),
                None => (
                    false,
                    format!(
                        "{} driver statistics, no allowance counters (not ENA)",
                        stats.len()
                    ),
                ),
            },
            Err(e) => (false, e.to_string()),
        };
        out.push(("ena_allowances", name.clone(), check.0, check.1));
    }
    out
}

/// What a trial's devices are watched with.
pub struct DeviceWatch {
    disk: Option<String>,
    ebs: Option<(String, PathBuf)>,
    nics: Vec<(NicStatsReader, NicStats)>,
    unavailable: Vec<String>,
}

/// The counters at one instant.
#[derive(Debug, Clone, Default)]
pub struct DeviceSnapshot {
    ebs: Option<EbsNvmeStats>,
    ena: Vec<Option<EnaAllowances>>,
    unavailable: Vec<String>,
}

/// What the devices said over an interval.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceNoise {
    /// EBS over-limit time, µs: volume IOPS, volume throughput, instance IOPS, instance
    /// throughput.
    pub ebs_exceeded_us: Option<[u64; 4]>,
    /// ENA allowance counters' growth summed over the watched NICs, in [`Allowance::ALL`]
    /// order; `None` where no NIC has them.
    pub ena_exceeded: Option<[u64; 5]>,
    /// Monitors that could not read, and why.
    pub unavailable: Vec<String>,
}

impl DeviceWatch {
    /// Watches nothing (CPU and memory probes).
    pub fn none() -> Self {
        Self {
            disk: None,
            ebs: None,
            nics: Vec::new(),
            unavailable: Vec::new(),
        }
    }

    /// Watches the EBS statistics of the disk holding `path`.
    pub fn disk(root: &HostRoot, path: &Path) -> Self {
        let mut watch = Self::none();
        watch.disk = block_device_of(root, path);
        match watch.disk.clone() {
            Some(name) if name.starts_with("nvme") => {
                let node = root.resolve(&format!("/dev/{name}"));
                watch.ebs = Some((name, node));
            }
            Some(name) => watch.unavailable.push(format!(
                "EBS NVMe statistics: {} is on {name}, not an NVMe (EBS) device",
                path.display()
            )),
            None => watch.unavailable.push(format!(
                "EBS NVMe statistics: the block device of {} is unknown",
                path.display()
            )),
        }
        watch
    }

    /// The whole disk a disk probe's target is on (kernel name), where sysfs says.
    pub fn disk_name(&self) -> Option<&str> {
        self.disk.as_deref()
    }

    /// Watches the ENA allowance counters of the NICs named `nics` (physical interfaces).
    pub fn network(nics: &[String]) -> Self {
        let mut watch = Self::none();
        for name in nics {
            match NicStatsReader::open(name) {
                Ok(reader) => watch.nics.push((reader, NicStats::default())),
                Err(e) => watch
                    .unavailable
                    .push(format!("ENA allowances: {name}: {e}")),
            }
        }
        if nics.is_empty() {
            watch
                .unavailable
                .push("ENA allowances: no network interface with a device".into());
        }
        watch
    }

    /// Reads every watched counter.
    pub fn snapshot(&mut self) -> DeviceSnapshot {
        let mut snap = DeviceSnapshot {
            unavailable: self.unavailable.clone(),
            ..Default::default()
        };
        if let Some((name, node)) = &self.ebs {
            match read_ebs_stats(node) {
                Ok(stats) => snap.ebs = Some(stats),
                Err(e) => snap
                    .unavailable
                    .push(format!("EBS NVMe statistics: {name}: {e}")),
            }
        }
        for (reader, stats) in &mut self.nics {
            match reader.read_into(stats) {
                Ok(()) => snap.ena.push(ena_allowances(stats)),
                Err(e) => {
                    snap.unavailable.push(format!("ENA allowances: {e}"));
                    snap.ena.push(None);
                }
            }
        }
        snap
    }
}

/// The devices' noise between two snapshots of one [`DeviceWatch`].
pub fn device_noise_between(before: &DeviceSnapshot, after: &DeviceSnapshot) -> DeviceNoise {
    let mut noise = DeviceNoise {
        unavailable: after.unavailable.clone(),
        ..Default::default()
    };
    if let (Some(b), Some(a)) = (&before.ebs, &after.ebs) {
        match exceeded_between(b, a) {
            EbsInterval::Deltas(d) => {
                noise.ebs_exceeded_us = Some([
                    d.ebs_volume_performance_exceeded_iops_us,
                    d.ebs_volume_performance_exceeded_tp_us,
                    d.ec2_instance_ebs_performance_exceeded_iops_us,
                    d.ec2_instance_ebs_performance_exceeded_tp_us,
                ]);
            }
            EbsInterval::Reset { counters } => noise.unavailable.push(format!(
                "EBS NVMe statistics: counters went backwards ({}): the volume was re-attached",
                counters.join(", ")
            )),
        }
    }
    let mut sums = [0u64; 5];
    let mut any = false;
    for (b, a) in before.ena.iter().zip(&after.ena) {
        let (Some(b), Some(a)) = (b, a) else {
            continue;
        };
        any = true;
        let grew = allowances_between(b, a);
        for (i, allowance) in Allowance::ALL.iter().enumerate() {
            let n = grew
                .packets
                .iter()
                .find(|(x, _)| x == allowance)
                .and_then(|(_, n)| *n)
                .unwrap_or(0);
            sums[i] += n;
        }
    }
    if any {
        noise.ena_exceeded = Some(sums);
    } else if !after.ena.is_empty() {
        noise
            .unavailable
            .push("ENA allowances: no watched interface is ENA (no allowance counters)".into());
    }
    noise.unavailable.sort();
    noise.unavailable.dedup();
    noise
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_resolves_to_its_whole_disk_and_a_missing_root_to_none() {
        let root = HostRoot::live();
        // The test binary's filesystem: on a block device sysfs knows (a disk, or a partition
        // of one) it resolves to the whole disk; on an overlay or tmpfs to nothing.
        let exe = std::env::current_exe().unwrap();
        let dev = std::fs::metadata(&exe).unwrap().dev();
        let entry = format!(
            "/sys/dev/block/{}:{}",
            nix::sys::stat::major(dev),
            nix::sys::stat::minor(dev)
        );
        match block_device_of(&root, &exe) {
            Some(name) => assert!(
                std::path::Path::new(&format!("/sys/block/{name}")).exists(),
                "{name} is not a whole disk"
            ),
            None => assert!(
                !std::path::Path::new(&entry).exists(),
                "{entry} exists, yet the disk of {} was not found",
                exe.display()
            ),
        }
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(disk_of_devnum(&HostRoot::at(empty.path()), 8, 0), None);
    }

    #[test]
    fn a_partition_resolves_to_its_disk_in_a_sysfs_tree() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path();
        let part = base.join("sys/devices/pci0000:00/nvme/nvme0/nvme0n1/nvme0n1p1");
        std::fs::create_dir_all(&part).unwrap();
        std::fs::write(part.join("partition"), "1\n").unwrap();
        std::fs::create_dir_all(base.join("sys/dev/block")).unwrap();
        std::os::unix::fs::symlink(&part, base.join("sys/dev/block/259:1")).unwrap();
        std::os::unix::fs::symlink(part.parent().unwrap(), base.join("sys/dev/block/259:0"))
            .unwrap();
        let root = HostRoot::at(base);
        assert_eq!(disk_of_devnum(&root, 259, 1).as_deref(), Some("nvme0n1"));
        assert_eq!(disk_of_devnum(&root, 259, 0).as_deref(), Some("nvme0n1"));
    }

    #[test]
    fn a_disk_that_is_not_ebs_is_unavailable_not_zero() {
        let root = HostRoot::live();
        let dir = tempfile::tempdir().unwrap();
        let mut watch = DeviceWatch::disk(&root, dir.path());
        let (a, b) = (watch.snapshot(), watch.snapshot());
        let noise = device_noise_between(&a, &b);
        assert_eq!(noise.ebs_exceeded_us, None);
        assert!(
            noise
                .unavailable
                .iter()
                .any(|u| u.starts_with("EBS NVMe statistics")),
            "{noise:?}"
        );
    }

    #[test]
    fn a_nic_without_allowance_counters_is_unavailable_not_zero() {
        // This machine's interfaces with a device: virtio or similar, never ENA in CI.
        let root = HostRoot::live();
        let (nics, _) = crate::devices::read_nics(&root);
        let names: Vec<String> = nics
            .iter()
            .filter(|n| !n.is_virtual)
            .map(|n| n.name.clone())
            .collect();
        let mut watch = DeviceWatch::network(&names);
        let (a, b) = (watch.snapshot(), watch.snapshot());
        let noise = device_noise_between(&a, &b);
        assert_eq!(noise.ena_exceeded, None, "{noise:?}");
        assert!(
            noise
                .unavailable
                .iter()
                .any(|u| u.starts_with("ENA allowances")),
            "{noise:?}"
        );
        let mut lo = DeviceWatch::network(&["lo".to_string()]);
        let snap = lo.snapshot();
        assert!(
            snap.unavailable.iter().any(|u| u.contains("lo")),
            "{snap:?}"
        );
    }

    #[test]
    fn ena_growth_sums_over_interfaces() {
        let with = |out: u64| {
            Some(EnaAllowances {
                bw_in_allowance_exceeded: Some(0),
                bw_out_allowance_exceeded: Some(out),
                pps_allowance_exceeded: Some(0),
                conntrack_allowance_exceeded: Some(0),
                linklocal_allowance_exceeded: Some(0),
                conntrack_allowance_available: None,
            })
        };
        let before = DeviceSnapshot {
            ena: vec![with(10), with(5)],
            ..Default::default()
        };
        let after = DeviceSnapshot {
            ena: vec![with(110), with(25)],
            ..Default::default()
        };
        let noise = device_noise_between(&before, &after);
        assert_eq!(noise.ena_exceeded, Some([0, 120, 0, 0, 0]));
    }
}
