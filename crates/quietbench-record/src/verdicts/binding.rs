//! Which cap binds each disk and network result of a run: for every host and variant, the
//! median of its counted trials against the host's caps (`limits::attribution`), with EBS's
//! and ENA's own counters summed over those trials as evidence.

use quietbench_proto::metrics;
use serde::Serialize;

use crate::limits::attribution::{
    Attribution, DiskMeasure, EbsExceeded, NetMeasure, attribute_disk, attribute_net,
};
use crate::limits::caps::HostCaps;
use crate::record::queries::counted;
use crate::record::{RunRecord, TrialRecord};
use crate::warnings::ena_growth;

/// The attribution of one variant's results on one host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BindingCap {
    /// Index into the run's hosts.
    pub host: usize,
    /// The host's address.
    pub address: String,
    /// The variant.
    pub variant: String,
    /// Its probe.
    pub probe: String,
    /// The verdict.
    pub attribution: Attribution,
}

/// The median of a trial figure over trials; `None` when no trial has it.
fn median(values: Vec<f64>) -> Option<f64> {
    quietbench_stats::robust::median(&values).ok()
}

fn value(t: &TrialRecord, metric: &str) -> Option<f64> {
    t.metrics.iter().find(|m| m.name == metric)?.value
}

fn param(t: &TrialRecord, name: &str) -> Option<u64> {
    t.params.get(name)?.parse().ok()
}

/// The disk a trial measured: its recorded block device, or the device it was given.
fn device(t: &TrialRecord) -> Option<String> {
    t.block_device.clone().or_else(|| {
        t.params
            .get("path")?
            .strip_prefix("/dev/")
            .map(str::to_string)
    })
}

fn disk(trials: &[&TrialRecord], caps: &HostCaps) -> Option<Attribution> {
    let sum = |t: &TrialRecord, a: &str, b: &str| -> Option<f64> {
        match (value(t, a), value(t, b)) {
            (None, None) => None,
            (x, y) => Some(x.unwrap_or(0.0) + y.unwrap_or(0.0)),
        }
    };
    let mb = median(
        trials
            .iter()
            .filter_map(|t| sum(t, metrics::READ_MB_PER_SEC, metrics::WRITE_MB_PER_SEC))
            .collect(),
    )?;
    let iops = median(
        trials
            .iter()
            .filter_map(|t| sum(t, metrics::READ_IOPS, metrics::WRITE_IOPS))
            .collect(),
    )?;
    let first = trials.first()?;
    let block_bytes = param(first, "block_kib")? * 1024;
    let mut exceeded = EbsExceeded::default();
    let mut measured = false;
    for n in trials.iter().filter_map(|t| t.noise.as_ref()) {
        if let (Some(a), Some(b), Some(c), Some(d)) = (
            n.ebs_volume_iops_exceeded_us,
            n.ebs_volume_throughput_exceeded_us,
            n.ebs_instance_iops_exceeded_us,
            n.ebs_instance_throughput_exceeded_us,
        ) {
            measured = true;
            exceeded.volume_iops_us += a;
            exceeded.volume_throughput_us += b;
            exceeded.instance_iops_us += c;
            exceeded.instance_throughput_us += d;
            exceeded.elapsed_us += n.elapsed_ns / 1000;
        }
    }
    attribute_disk(
        DiskMeasure {
            mb_per_s: mb,
            iops,
            block_bytes,
        },
        caps,
        device(first).as_deref(),
        measured.then_some(exceeded),
    )
}

fn net(trials: &[&TrialRecord], caps: &HostCaps) -> Option<Attribution> {
    let gbps = median(
        trials
            .iter()
            .filter_map(|t| value(t, metrics::GBIT_PER_SEC))
            .collect(),
    )?;
    let first = trials.first()?;
    let flows =
        param(first, "threads").unwrap_or(1) * param(first, "flows_per_thread").unwrap_or(1);
    let mut growth: Vec<(String, u64)> = Vec::new();
    for n in trials.iter().filter_map(|t| t.noise.as_ref()) {
        for (name, count) in ena_growth(n) {
            match growth.iter_mut().find(|(g, _)| *g == name) {
                Some((_, total)) => *total += count,
                None => growth.push((name, count)),
            }
        }
    }
    attribute_net(
        NetMeasure {
            gbps,
            flows: u32::try_from(flows).unwrap_or(u32::MAX),
        },
        caps,
        &growth,
    )
}

/// Every disk (disk.seq, disk.rand) and network (net.throughput) result of `run` against the
/// cap that binds it, per host and variant; results without caps or counters are left out.
pub fn binding_caps(run: &RunRecord) -> Vec<BindingCap> {
    let mut out = Vec::new();
    let no_caps = HostCaps::default();
    for variant in &run.settings.variants {
        for (i, host) in run.hosts.iter().enumerate() {
            let trials: Vec<&TrialRecord> = counted(&run.trials, &variant.name)
                .filter(|t| t.host == i)
                .collect();
            let Some(probe) = trials.first().map(|t| t.probe.clone()) else {
                continue;
            };
            let caps = host.caps.as_ref().unwrap_or(&no_caps);
            let attribution = match probe.as_str() {
                "disk.seq" | "disk.rand" => disk(&trials, caps),
                "net.throughput" => net(&trials, caps),
                _ => None,
            };
            if let Some(attribution) = attribution {
                out.push(BindingCap {
                    host: i,
                    address: host.address.clone(),
                    variant: variant.name.clone(),
                    probe,
                    attribution,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::caps::{EbsCaps, InstanceCaps, NetworkCaps, VolumeInfo};
    use crate::record::test_records;

    #[test]
    fn a_disk_run_on_an_ec2_host_is_judged_against_its_volume() {
        let mut run = test_records::empty_run("disk.seq", &["disk.seq"], 3, None);
        run.hosts
            .push(test_records::host(0, "Intel(R) Xeon(R) Platinum 8375C"));
        run.hosts[0].caps = Some(HostCaps {
            instance: Some(InstanceCaps {
                instance_type: "r6i.8xlarge".into(),
                ebs: Some(EbsCaps {
                    baseline_mb_per_s: 1250.0,
                    maximum_mb_per_s: 1250.0,
                    baseline_iops: 40000.0,
                    maximum_iops: 40000.0,
                }),
                network: NetworkCaps {
                    performance: None,
                    ena_support: None,
                    cards: Vec::new(),
                },
                default_vcpus: None,
                default_cores: None,
            }),
            volumes: vec![VolumeInfo {
                volume_id: "vol-1".into(),
                volume_type: "gp3".into(),
                size_gib: 1000,
                iops: Some(16000),
                throughput_mib_per_s: Some(1000),
                snapshot_id: None,
                multi_attach: false,
                initialization: None,
                device: Some("nvme1n1".into()),
                prewarm: None,
            }],
            ..Default::default()
        });
        for (round, mb) in [(1, 1030.0), (2, 1040.0), (3, 1045.0)] {
            let mut t = test_records::value_trial(
                ("disk.seq", "disk.seq"),
                0,
                round,
                ("read_mb_per_sec", "MB/s", mb),
            );
            let iops = test_records::value_trial(
                ("disk.seq", "disk.seq"),
                0,
                round,
                ("read_iops", "IOPS", mb * 1e6 / 131072.0),
            );
            t.metrics.extend(iops.metrics);
            t.params.insert("block_kib".into(), "128".into());
            t.block_device = Some("nvme1n1".into());
            run.trials.push(t);
        }
        let found = binding_caps(&run);
        assert_eq!(found.len(), 1, "{found:#?}");
        let a = &found[0].attribution;
        assert!(
            a.line.starts_with("capped by the volume (gp3"),
            "{}",
            a.line
        );
        assert!((a.measured - 1040.0).abs() < 1e-9);
        // A host without caps or counters gets no line.
        run.hosts[0].caps = None;
        assert!(binding_caps(&run).is_empty());
    }
}
