//! Which cap binds a disk or network result, and by how much: the diagnosis that CONTEXT.md §2's
//! engineers made by hand, twice, comparing a measured throughput with the instance's and the
//! volume's tables. Pure: a measured figure and the caps in, one [`Attribution`] out.
//!
//! The rule. Every cap is turned into the throughput it allows at the measured request size (an
//! IOPS cap allows IOPS × request size). The lowest ceiling (bursts included) is the candidate.
//! A result within 10% of it is capped by it; one above a sustained figure but under its burst
//! ceiling holds only while the burst lasts; one more than 5% above every ceiling was helped by
//! something the caps do not see (the page cache); anything else is below every cap, and the
//! limit is elsewhere. A counter that measured time over a limit (EBS's NVMe statistics, ENA's
//! allowance counters) outranks the inference.

use serde::Serialize;

use super::caps::{EbsCaps, HostCaps, NetworkCaps, VolumeInfo};
use super::volume_types::volume_limits;

/// A result within this share of a ceiling is capped by it: probes of a capped device measure
/// 95–100% of the cap, and a cap's own shaping wobbles by a few percent.
pub const CAPPED_SHARE: f64 = 0.90;
/// A result this far above every ceiling was not limited by them (cache, or an unknown burst).
pub const ABOVE_SHARE: f64 = 1.05;
/// Over-limit time (EBS NVMe statistics) above this share of a trial is the measured cause.
pub const EXCEEDED_SHARE: f64 = 0.05;
/// Single-flow limit in a cluster placement group, Gbit/s; 5 outside one. Source:
/// <https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-network-bandwidth.html>
pub const FLOW_GBPS_CLUSTER: f64 = 10.0;
/// Single-flow limit outside a cluster placement group, Gbit/s.
pub const FLOW_GBPS: f64 = 5.0;

/// A disk result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DiskMeasure {
    /// Reads and writes together, decimal MB/s.
    pub mb_per_s: f64,
    /// Reads and writes together.
    pub iops: f64,
    /// Bytes per request.
    pub block_bytes: u64,
}

/// Microseconds during a trial in which EBS saw demand over a limit (the NVMe statistics).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EbsExceeded {
    /// Over the volume's IOPS.
    pub volume_iops_us: u64,
    /// Over the volume's throughput.
    pub volume_throughput_us: u64,
    /// Over the instance's EBS IOPS.
    pub instance_iops_us: u64,
    /// Over the instance's EBS throughput.
    pub instance_throughput_us: u64,
    /// The trial's length.
    pub elapsed_us: u64,
}

/// A network result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NetMeasure {
    /// Gbit/s.
    pub gbps: f64,
    /// Concurrent TCP flows.
    pub flows: u32,
}

/// How the result stands against its caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Standing {
    /// At a cap: raising it is what would make this faster.
    Capped,
    /// Above a sustained cap, under its burst ceiling: holds only while the burst lasts.
    Burst,
    /// Under every cap: the limit is elsewhere (queue depth, CPU, the code).
    Below,
    /// Above every cap: something the caps do not see helped (cache).
    Above,
}

/// What a cap belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Holder {
    /// The EBS volume.
    Volume,
    /// The instance's EBS bandwidth.
    Instance,
    /// The instance's network card.
    Network,
    /// The per-flow limit.
    Flow,
}

/// One cap, as it applies to the measured request size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cap {
    /// Whose.
    pub holder: Holder,
    /// "throughput", "IOPS" or "bandwidth".
    pub dimension: &'static str,
    /// The cap in its own unit.
    pub value: f64,
    /// MB/s, IOPS or Gbit/s.
    pub unit: &'static str,
    /// The same cap as a throughput at the measured request size (MB/s; Gbit/s for networks).
    pub ceiling: f64,
    /// A burst ceiling: sustained only while credits last, down to `sustained`.
    pub sustained: Option<f64>,
    /// How it is known, e.g. "gp3 vol-0…, provisioned 16000 IOPS, 1000 MiB/s".
    pub basis: String,
}

/// The verdict on one result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Attribution {
    /// Where it stands.
    pub standing: Standing,
    /// The cap it is judged against (the lowest ceiling), if any cap is known.
    pub cap: Option<Cap>,
    /// The measured figure in the cap's unit.
    pub measured: f64,
    /// Measured over the cap's value.
    pub share: Option<f64>,
    /// "inferred", or the counter that measured it ("EBS NVMe statistics", "ENA allowances").
    pub evidence: String,
    /// One line for people.
    pub line: String,
    /// What binds next once this cap is raised.
    pub next: Option<String>,
    /// Caveats of the figures (io2 outside Block Express…).
    pub caveats: Vec<String>,
}

/// A figure as the API gives it: up to two decimals, no trailing zeros (593.75, 4687.5, 1250).
pub fn fmt(x: f64) -> String {
    trim(format!("{x:.2}"))
}

/// A percentage to one decimal, no trailing zero (99.2, 62).
fn pct(share: f64) -> String {
    trim(format!("{:.1}", share * 100.0))
}

fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

impl Cap {
    fn owner(&self) -> &'static str {
        match self.holder {
            Holder::Volume => "the volume",
            Holder::Instance => "the instance",
            Holder::Network => "the instance's network",
            Holder::Flow => "the per-flow limit",
        }
    }

    /// "the volume's IOPS (io2 …, provisioned 32000 IOPS)" or "the instance (r6in.8xlarge EBS
    /// 3125 MB/s)".
    fn describe(&self) -> String {
        match (self.holder, self.dimension) {
            (Holder::Volume | Holder::Instance, "IOPS") => {
                format!("{}'s IOPS ({})", self.owner(), self.basis)
            }
            _ => format!("{} ({})", self.owner(), self.basis),
        }
    }
}

/// The disk caps of a host at `block_bytes`, for the volume behind `device` (when known).
pub fn disk_caps(
    caps: &HostCaps,
    device: Option<&str>,
    block_bytes: u64,
) -> (Vec<Cap>, Vec<String>) {
    let mut out = Vec::new();
    let mut caveats = Vec::new();
    let block = block_bytes.max(1) as f64;
    if let Some(volume) = device.and_then(|d| caps.volume_on(d)) {
        match volume_limits(volume) {
            Ok(limits) => {
                caveats.extend(limits.caveat.clone());
                out.extend(volume_caps(volume, &limits, block));
            }
            Err(e) => caveats.push(e),
        }
    }
    if let Some(instance) = &caps.instance
        && let Some(ebs) = &instance.ebs
    {
        out.extend(instance_caps(&instance.instance_type, ebs, block));
    }
    (out, caveats)
}

fn volume_caps(
    volume: &VolumeInfo,
    limits: &super::volume_types::VolumeLimits,
    block: f64,
) -> Vec<Cap> {
    // A request larger than the volume's I/O unit counts as several I/Os.
    let ios_per_request = (block / limits.io_unit_bytes as f64).ceil().max(1.0);
    let basis = format!("{} {}", limits.basis, volume.volume_id);
    let mb = super::volume_types::mib_to_mb;
    let mut caps = vec![
        Cap {
            holder: Holder::Volume,
            dimension: "throughput",
            value: limits.mb_per_s(),
            unit: "MB/s",
            ceiling: limits.mb_per_s(),
            sustained: None,
            basis: format!(
                "{basis}: {} MiB/s = {} MB/s",
                fmt(limits.throughput_mib_per_s),
                fmt(limits.mb_per_s())
            ),
        },
        Cap {
            holder: Holder::Volume,
            dimension: "IOPS",
            value: limits.iops,
            unit: "IOPS",
            ceiling: limits.iops / ios_per_request * block / 1e6,
            sustained: None,
            basis: basis.clone(),
        },
    ];
    if let Some(burst) = &limits.burst {
        if burst.throughput_mib_per_s > limits.throughput_mib_per_s {
            caps.push(Cap {
                holder: Holder::Volume,
                dimension: "throughput",
                value: mb(burst.throughput_mib_per_s),
                unit: "MB/s",
                ceiling: mb(burst.throughput_mib_per_s),
                sustained: Some(limits.mb_per_s()),
                basis: format!("{basis}: burst {} MiB/s", fmt(burst.throughput_mib_per_s)),
            });
        }
        if burst.iops > limits.iops {
            caps.push(Cap {
                holder: Holder::Volume,
                dimension: "IOPS",
                value: burst.iops,
                unit: "IOPS",
                ceiling: burst.iops / ios_per_request * block / 1e6,
                sustained: Some(limits.iops / ios_per_request * block / 1e6),
                basis: format!("{basis}: burst {} IOPS", fmt(burst.iops)),
            });
        }
    }
    caps
}

fn instance_caps(instance_type: &str, ebs: &EbsCaps, block: f64) -> Vec<Cap> {
    let iops_ceiling = |iops: f64| iops * block / 1e6;
    let bursts = ebs.bursts();
    let sustained = |base: f64, max: f64| (bursts && max > base).then_some(base);
    vec![
        Cap {
            holder: Holder::Instance,
            dimension: "throughput",
            value: ebs.maximum_mb_per_s,
            unit: "MB/s",
            ceiling: ebs.maximum_mb_per_s,
            sustained: sustained(ebs.baseline_mb_per_s, ebs.maximum_mb_per_s),
            basis: format!("{instance_type} EBS {} MB/s", fmt(ebs.maximum_mb_per_s)),
        },
        Cap {
            holder: Holder::Instance,
            dimension: "IOPS",
            value: ebs.maximum_iops,
            unit: "IOPS",
            ceiling: iops_ceiling(ebs.maximum_iops),
            sustained: sustained(ebs.baseline_iops, ebs.maximum_iops).map(iops_ceiling),
            basis: format!("{instance_type} EBS {} IOPS", fmt(ebs.maximum_iops)),
        },
    ]
}

/// Attributes a disk result on the volume behind `device` (a kernel name; `None` when the
/// target's device is unknown: only the instance's caps apply then).
pub fn attribute_disk(
    measure: DiskMeasure,
    caps: &HostCaps,
    device: Option<&str>,
    exceeded: Option<EbsExceeded>,
) -> Option<Attribution> {
    let (caps_list, caveats) = disk_caps(caps, device, measure.block_bytes);
    if let Some(found) = exceeded.and_then(|e| measured_ebs_limit(measure, &e, &caps_list)) {
        return Some(Attribution { caveats, ..found });
    }
    let mut a = judge(&caps_list, measure.mb_per_s, |cap| {
        if cap.unit == "IOPS" {
            measure.iops
        } else {
            measure.mb_per_s
        }
    })?;
    a.caveats = caveats;
    Some(a)
}

/// The limit EBS itself says was exceeded longest, if long enough to count.
fn measured_ebs_limit(m: DiskMeasure, e: &EbsExceeded, caps: &[Cap]) -> Option<Attribution> {
    let counters = [
        (e.volume_throughput_us, Holder::Volume, "throughput"),
        (e.volume_iops_us, Holder::Volume, "IOPS"),
        (e.instance_throughput_us, Holder::Instance, "throughput"),
        (e.instance_iops_us, Holder::Instance, "IOPS"),
    ];
    let (us, holder, dimension) = counters.into_iter().max_by_key(|c| c.0)?;
    let share = us as f64 / e.elapsed_us.max(1) as f64;
    if e.elapsed_us == 0 || share < EXCEEDED_SHARE {
        return None;
    }
    let cap = caps
        .iter()
        .find(|c| c.holder == holder && c.dimension == dimension && c.sustained.is_none())
        .cloned();
    {
        let measured = if dimension == "IOPS" {
            m.iops
        } else {
            m.mb_per_s
        };
        let unit = if dimension == "IOPS" { "IOPS" } else { "MB/s" };
        let whose = if holder == Holder::Volume {
            "the volume's"
        } else {
            "the instance's"
        };
        let of_cap = cap
            .as_ref()
            .map(|c| format!(" ({}: {}%)", c.basis, pct(measured / c.value)))
            .unwrap_or_default();
        Some(Attribution {
            standing: Standing::Capped,
            share: cap.as_ref().map(|c| measured / c.value),
            cap,
            measured,
            evidence: "EBS NVMe statistics".into(),
            line: format!(
                "capped by {whose} {dimension}, measured by EBS: demand exceeded it {}% of the \
                 trial; measured {} {unit}{of_cap}",
                pct(share),
                fmt(measured)
            ),
            next: None,
            caveats: Vec::new(),
        })
    }
}

/// The common rule over ceilings (all in one throughput unit). `in_cap_unit` gives the measured
/// figure in a cap's own unit, for the line.
fn judge(
    caps: &[Cap],
    measured_ceiling: f64,
    in_cap_unit: impl Fn(&Cap) -> f64,
) -> Option<Attribution> {
    let lowest = caps
        .iter()
        .min_by(|a, b| a.ceiling.total_cmp(&b.ceiling))?
        .clone();
    let measured = in_cap_unit(&lowest);
    let share = measured / lowest.value;
    let ceiling_share = measured_ceiling / lowest.ceiling;
    let lowest_sustained = caps
        .iter()
        .filter_map(|c| c.sustained.map(|s| (s, c)))
        .min_by(|a, b| a.0.total_cmp(&b.0));
    let next = caps
        .iter()
        .filter(|c| c.holder != lowest.holder && c.ceiling > lowest.ceiling)
        .min_by(|a, b| a.ceiling.total_cmp(&b.ceiling))
        .map(|c| {
            format!(
                "raise {} and {} binds next, {}% higher",
                lowest.owner(),
                c.describe(),
                pct(c.ceiling / lowest.ceiling - 1.0)
            )
        });
    let share_pct = pct(share);
    let (standing, line) = if ceiling_share > ABOVE_SHARE {
        (
            Standing::Above,
            format!(
                "above every cap ({share_pct}% of {}): something the caps do not see helped (the page \
                 cache, or a burst)",
                lowest.describe()
            ),
        )
    } else if ceiling_share >= CAPPED_SHARE {
        match lowest.sustained {
            Some(base) => (
                Standing::Burst,
                format!(
                    "burst: {} holds only while its burst lasts; sustained {} {} (measured {}, \
                     {share_pct}%)",
                    lowest.describe(),
                    fmt(base / lowest.ceiling * lowest.value),
                    lowest.unit,
                    fmt(measured)
                ),
            ),
            None => (
                Standing::Capped,
                format!(
                    "capped by {}: measured {} {}, {share_pct}%",
                    lowest.describe(),
                    fmt(measured),
                    lowest.unit
                ),
            ),
        }
    } else if let Some((base, cap)) = lowest_sustained
        .filter(|(base, _)| (CAPPED_SHARE..=ABOVE_SHARE).contains(&(measured_ceiling / base)))
    {
        (
            Standing::Capped,
            format!(
                "capped by {}'s sustained {} {} (its burst to {} is spent): measured {}, {}%",
                cap.owner(),
                fmt(base / cap.ceiling * cap.value),
                cap.unit,
                fmt(cap.value),
                fmt(in_cap_unit(cap)),
                pct(measured_ceiling / base)
            ),
        )
    } else if let Some((base, cap)) =
        lowest_sustained.filter(|(base, _)| measured_ceiling > base * ABOVE_SHARE)
    {
        (
            Standing::Burst,
            format!(
                "burst: above {}'s sustained {} {} (measured {}): holds only while its burst \
                 lasts",
                cap.owner(),
                fmt(base / cap.ceiling * cap.value),
                cap.unit,
                fmt(in_cap_unit(cap))
            ),
        )
    } else {
        (
            Standing::Below,
            format!(
                "below every cap ({share_pct}% of {}): the limit is elsewhere (queue depth, CPU, the \
                 code)",
                lowest.describe()
            ),
        )
    };
    Some(Attribution {
        standing,
        share: Some(share),
        measured,
        evidence: "inferred".into(),
        line,
        next: (standing == Standing::Capped).then_some(next).flatten(),
        cap: Some(lowest),
        caveats: Vec::new(),
    })
}

/// The network caps of a host for `flows` concurrent flows.
pub fn net_caps(network: &NetworkCaps, flows: u32, cluster_placement_group: bool) -> Vec<Cap> {
    let per_flow = if cluster_placement_group {
        FLOW_GBPS_CLUSTER
    } else {
        FLOW_GBPS
    };
    let mut caps = vec![Cap {
        holder: Holder::Flow,
        dimension: "bandwidth",
        value: per_flow * flows.max(1) as f64,
        unit: "Gbit/s",
        ceiling: per_flow * flows.max(1) as f64,
        sustained: None,
        basis: format!(
            "{} flow{} × {} Gbit/s {}",
            flows,
            if flows == 1 { "" } else { "s" },
            fmt(per_flow),
            if cluster_placement_group {
                "in a cluster placement group"
            } else {
                "outside a cluster placement group"
            }
        ),
    }];
    if let Some(card) = network.primary() {
        let peak = card.peak_gbps.or(card.baseline_gbps);
        if let Some(peak) = peak {
            let base = card.baseline_gbps.filter(|b| *b < peak);
            caps.push(Cap {
                holder: Holder::Network,
                dimension: "bandwidth",
                value: peak,
                unit: "Gbit/s",
                ceiling: peak,
                sustained: base,
                basis: match base {
                    Some(b) => format!("up to {} Gbit/s, baseline {}", fmt(peak), fmt(b)),
                    None => format!("{} Gbit/s", fmt(peak)),
                },
            });
        }
    }
    caps
}

/// Attributes a network result. `allowance_growth` lists ENA allowance counters that grew
/// during the trial with their growth: EC2 itself shaped the traffic, whatever the inference.
pub fn attribute_net(
    measure: NetMeasure,
    caps: &HostCaps,
    allowance_growth: &[(String, u64)],
) -> Option<Attribution> {
    if let Some((name, grew)) = allowance_growth.iter().max_by_key(|(_, n)| *n) {
        return Some(Attribution {
            standing: Standing::Capped,
            cap: None,
            measured: measure.gbps,
            share: None,
            evidence: "ENA allowances".into(),
            line: format!(
                "capped by EC2: ENA's {name} grew by {grew} during the trial (packets queued or \
                 dropped by the instance's allowance), measured {} Gbit/s",
                fmt(measure.gbps)
            ),
            next: None,
            caveats: Vec::new(),
        });
    }
    let instance = caps.instance.as_ref()?;
    let list = net_caps(
        &instance.network,
        measure.flows,
        caps.cluster_placement_group,
    );
    judge(&list, measure.gbps, |_| measure.gbps)
}

#[cfg(test)]
#[path = "attribution_tests.rs"]
mod tests;
