//! Each EBS volume type's published performance, as a table in code with the source of every
//! number. DescribeVolumes gives what was provisioned (gp3's IOPS and throughput, io1/io2's
//! IOPS); the rest (gp2's size-bound baseline and burst, io1/io2's throughput per IOPS, the HDD
//! types' throughput per TiB) is AWS's published rule, applied here.
//!
//! Sources (Amazon EBS User Guide):
//! - GP: <https://docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html>
//! - PIOPS: <https://docs.aws.amazon.com/ebs/latest/userguide/provisioned-iops.html>
//! - HDD: <https://docs.aws.amazon.com/ebs/latest/userguide/hdd-vols.html>
//! - IO size: <https://docs.aws.amazon.com/ebs/latest/userguide/ebs-io-characteristics.html>
//!
//! Volume throughput is published in MiB/s and the probes report decimal MB/s, as fio and the
//! instance caps do: the table converts, and the report prints both.

use super::caps::VolumeInfo;

const MIB: f64 = 1_048_576.0;
const MB: f64 = 1_000_000.0;

/// MiB/s to decimal MB/s.
pub fn mib_to_mb(mib_per_s: f64) -> f64 {
    mib_per_s * MIB / MB
}

/// What a volume delivers, by AWS's published rules, for the volume as provisioned.
#[derive(Debug, Clone, PartialEq)]
pub struct VolumeLimits {
    /// IOPS it sustains.
    pub iops: f64,
    /// Throughput it sustains, MiB/s as published.
    pub throughput_mib_per_s: f64,
    /// What a burst bucket allows above that while credits last (gp2, st1, sc1).
    pub burst: Option<VolumeBurst>,
    /// Largest request counted as one I/O: bigger ones count as several (SSD 256 KiB, HDD 1 MiB).
    pub io_unit_bytes: u64,
    /// How the figures follow from the volume, e.g. "gp3, provisioned 16000 IOPS, 1000 MiB/s".
    pub basis: String,
    /// A caveat the figures carry (io2 outside Block Express, gp2's credit-bound throughput).
    pub caveat: Option<String>,
    /// The page the rule comes from.
    pub source: &'static str,
}

impl VolumeLimits {
    /// Sustained throughput, decimal MB/s.
    pub fn mb_per_s(&self) -> f64 {
        mib_to_mb(self.throughput_mib_per_s)
    }
}

/// A burst allowance above the sustained figures.
#[derive(Debug, Clone, PartialEq)]
pub struct VolumeBurst {
    /// IOPS while credits last.
    pub iops: f64,
    /// MiB/s while credits last.
    pub throughput_mib_per_s: f64,
}

const GP: &str = "https://docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html";
const PIOPS: &str = "https://docs.aws.amazon.com/ebs/latest/userguide/provisioned-iops.html";
const HDD: &str = "https://docs.aws.amazon.com/ebs/latest/userguide/hdd-vols.html";

/// SSD volumes count a request of up to 256 KiB as one I/O; HDD volumes up to 1 MiB
/// (ebs-io-characteristics.html).
const SSD_IO_UNIT: u64 = 256 << 10;
const HDD_IO_UNIT: u64 = 1 << 20;

/// The published limits of `volume`, or why there are none.
pub fn volume_limits(volume: &VolumeInfo) -> Result<VolumeLimits, String> {
    let size = volume.size_gib as f64;
    let provisioned_iops = || {
        volume.iops.map(|i| i as f64).ok_or_else(|| {
            format!(
                "{} ({}): DescribeVolumes gave no provisioned IOPS",
                volume.volume_id, volume.volume_type
            )
        })
    };
    match volume.volume_type.as_str() {
        // gp3: 3000 IOPS and 125 MiB/s included, more provisioned up to the type's maximum.
        "gp3" => {
            let iops = volume.iops.unwrap_or(3000) as f64;
            let mib = volume.throughput_mib_per_s.unwrap_or(125) as f64;
            Ok(VolumeLimits {
                iops,
                throughput_mib_per_s: mib,
                burst: None,
                io_unit_bytes: SSD_IO_UNIT,
                basis: format!("gp3, provisioned {iops:.0} IOPS, {mib:.0} MiB/s"),
                caveat: None,
                source: GP,
            })
        }
        // gp2: 3 IOPS per GiB between 100 and 16000; volumes under 1000 GiB burst to 3000 IOPS
        // on credits. Throughput 128 MiB/s up to 170 GiB; 250 MiB/s from 334 GiB; in between,
        // 250 MiB/s only while burst credits last.
        "gp2" => {
            let baseline = (3.0 * size).clamp(100.0, 16_000.0);
            let (mib, burst_mib) = if size <= 170.0 {
                (128.0, None)
            } else if size < 334.0 {
                (128.0, Some(250.0))
            } else {
                (250.0, None)
            };
            let burst = (baseline < 3000.0 || burst_mib.is_some()).then(|| VolumeBurst {
                iops: baseline.max(3000.0),
                throughput_mib_per_s: burst_mib.unwrap_or(mib),
            });
            Ok(VolumeLimits {
                iops: baseline,
                throughput_mib_per_s: mib,
                burst,
                io_unit_bytes: SSD_IO_UNIT,
                basis: format!("gp2, {} GiB: baseline {baseline:.0} IOPS", volume.size_gib),
                caveat: None,
                source: GP,
            })
        }
        // io1: up to 32000 IOPS, 256 KiB per IOPS up to 500 MiB/s; above, 16 KiB per IOPS up
        // to 1000 MiB/s.
        "io1" => {
            let iops = provisioned_iops()?;
            let mib = if iops <= 32_000.0 {
                (iops * 256.0 / 1024.0).min(500.0)
            } else {
                (iops * 16.0 / 1024.0).min(1000.0)
            };
            Ok(VolumeLimits {
                iops,
                throughput_mib_per_s: mib,
                burst: None,
                io_unit_bytes: SSD_IO_UNIT,
                basis: format!("io1, provisioned {iops:.0} IOPS"),
                caveat: None,
                source: PIOPS,
            })
        }
        // io2 Block Express: throughput 0.256 MiB/s per provisioned IOPS, up to 4000 MiB/s
        // (256000 IOPS). Every io2 volume is Block Express since 2023; an instance without
        // Block Express support holds it to 64000 IOPS and 1000 MiB/s.
        "io2" => {
            let iops = provisioned_iops()?;
            let mib = (iops * 0.256).min(4000.0);
            Ok(VolumeLimits {
                iops,
                throughput_mib_per_s: mib,
                burst: None,
                io_unit_bytes: SSD_IO_UNIT,
                basis: format!("io2 Block Express, provisioned {iops:.0} IOPS"),
                caveat: (iops > 64_000.0 || mib > 1000.0).then(|| {
                    "on an instance type without Block Express support io2 stops at 64000 IOPS \
                     and 1000 MiB/s"
                        .to_string()
                }),
                source: PIOPS,
            })
        }
        // st1: 40 MiB/s per TiB baseline, bursting at 250 MiB/s per TiB, at most 500 MiB/s and
        // 500 IOPS of 1 MiB.
        "st1" => Ok(hdd(volume, "st1", 40.0, 250.0, 500.0, 500.0)),
        // sc1: 12 MiB/s per TiB baseline, bursting at 80 MiB/s per TiB, at most 250 MiB/s and
        // 250 IOPS of 1 MiB.
        "sc1" => Ok(hdd(volume, "sc1", 12.0, 80.0, 250.0, 250.0)),
        other => Err(format!(
            "{}: volume type {other:?} has no published caps in this table (gp2, gp3, io1, io2, \
             st1, sc1)",
            volume.volume_id
        )),
    }
}

fn hdd(
    volume: &VolumeInfo,
    kind: &str,
    base_per_tib: f64,
    burst_per_tib: f64,
    max_mib: f64,
    max_iops: f64,
) -> VolumeLimits {
    let tib = volume.size_gib as f64 / 1024.0;
    let base = (base_per_tib * tib).min(max_mib);
    let burst = (burst_per_tib * tib).min(max_mib);
    VolumeLimits {
        iops: max_iops,
        throughput_mib_per_s: base,
        burst: (burst > base).then_some(VolumeBurst {
            iops: max_iops,
            throughput_mib_per_s: burst,
        }),
        io_unit_bytes: HDD_IO_UNIT,
        basis: format!("{kind}, {} GiB", volume.size_gib),
        caveat: None,
        source: HDD,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volume(kind: &str, size_gib: u64, iops: Option<u64>, mib: Option<u64>) -> VolumeInfo {
        VolumeInfo {
            volume_id: "vol-0123456789abcdef0".into(),
            volume_type: kind.into(),
            size_gib,
            iops,
            throughput_mib_per_s: mib,
            snapshot_id: None,
            multi_attach: false,
            initialization: None,
            device: None,
            prewarm: None,
        }
    }

    #[test]
    fn gp3_is_what_was_provisioned_or_the_included_baseline() {
        let v = volume_limits(&volume("gp3", 500, Some(16000), Some(1000))).unwrap();
        assert_eq!((v.iops, v.throughput_mib_per_s), (16000.0, 1000.0));
        assert!((v.mb_per_s() - 1048.576).abs() < 1e-9);
        let v = volume_limits(&volume("gp3", 500, None, None)).unwrap();
        assert_eq!((v.iops, v.throughput_mib_per_s), (3000.0, 125.0));
    }

    #[test]
    fn gp2_follows_its_size() {
        // CONTEXT.md §5's volume: 50 GiB → 150 IOPS baseline, bursting to 3000, 128 MiB/s.
        let v = volume_limits(&volume("gp2", 50, Some(150), None)).unwrap();
        assert_eq!(v.iops, 150.0);
        assert_eq!(v.burst.as_ref().unwrap().iops, 3000.0);
        assert_eq!(v.throughput_mib_per_s, 128.0);
        assert_eq!(
            volume_limits(&volume("gp2", 10, None, None)).unwrap().iops,
            100.0
        );
        let mid = volume_limits(&volume("gp2", 200, None, None)).unwrap();
        assert_eq!(mid.burst.unwrap().throughput_mib_per_s, 250.0);
        let big = volume_limits(&volume("gp2", 6000, None, None)).unwrap();
        assert_eq!((big.iops, big.throughput_mib_per_s), (16000.0, 250.0));
        assert_eq!(big.burst, None);
    }

    #[test]
    fn provisioned_iops_types_scale_throughput_with_iops() {
        // CONTEXT.md §2: io2 Block Express at 32000 IOPS → 8192 MiB/s, held to 4000.
        let v = volume_limits(&volume("io2", 1000, Some(32000), None)).unwrap();
        assert_eq!(v.throughput_mib_per_s, 4000.0);
        assert!(v.caveat.is_some());
        let v = volume_limits(&volume("io2", 100, Some(3000), None)).unwrap();
        assert!((v.throughput_mib_per_s - 768.0).abs() < 1e-9);
        assert_eq!(v.caveat, None);
        let v = volume_limits(&volume("io1", 100, Some(1000), None)).unwrap();
        assert_eq!(v.throughput_mib_per_s, 250.0);
        let v = volume_limits(&volume("io1", 1000, Some(64000), None)).unwrap();
        assert_eq!(v.throughput_mib_per_s, 1000.0);
        let err = volume_limits(&volume("io2", 100, None, None)).unwrap_err();
        assert!(err.contains("no provisioned IOPS"), "{err}");
    }

    #[test]
    fn hdd_types_scale_with_size_and_count_1_mib_ios() {
        let v = volume_limits(&volume("st1", 2048, None, None)).unwrap();
        assert_eq!(v.throughput_mib_per_s, 80.0);
        assert_eq!(v.burst.as_ref().unwrap().throughput_mib_per_s, 500.0);
        assert_eq!(v.io_unit_bytes, 1 << 20);
        let v = volume_limits(&volume("sc1", 16384, None, None)).unwrap();
        assert_eq!(v.throughput_mib_per_s, 192.0);
        assert_eq!(v.burst.unwrap().throughput_mib_per_s, 250.0);
        let err = volume_limits(&volume("standard", 8, None, None)).unwrap_err();
        assert!(err.contains("no published caps"), "{err}");
    }
}
