//! The synthetic machines the farm's agents claim to run on: what GetHost answers, and each
//! agent's figure (its events per second), so a run's report looks like a real fleet's.

use quietbench_proto::v1 as pb;

/// The housekeeping CPU of every synthetic host (the real agent keeps the first allowed CPU).
pub const HOUSEKEEPING_CPU: u32 = 0;
/// The CPU the synthetic probe thread is "pinned" to.
pub const PROBE_CPU: u32 = 1;

/// One of the CPU models the fleet draws: the EC2 "CPU lottery" of a c5-class fleet.
struct CpuModel {
    vendor: &'static str,
    model_name: &'static str,
    family: u32,
    model: u32,
    stepping: u32,
    microcode: &'static str,
    /// Its cpu.primes speed relative to the first model.
    speed: f64,
}

const MODELS: [CpuModel; 2] = [
    CpuModel {
        vendor: "GenuineIntel",
        model_name: "Intel(R) Xeon(R) Platinum 8275CL CPU @ 3.00GHz",
        family: 6,
        model: 85,
        stepping: 7,
        microcode: "0x5003604",
        speed: 1.0,
    },
    CpuModel {
        vendor: "GenuineIntel",
        model_name: "Intel(R) Xeon(R) Platinum 8124M CPU @ 3.00GHz",
        family: 6,
        model: 85,
        stepping: 4,
        microcode: "0x2007006",
        speed: 0.96,
    },
];

/// One synthetic host: agent number `index` of the farm.
#[derive(Debug, Clone)]
pub struct SyntheticHost {
    /// From 0.
    pub index: usize,
    /// e.g. "farm-017".
    pub hostname: String,
    /// Its mean events per second, before per-interval jitter.
    pub events_per_sec: f64,
}

impl SyntheticHost {
    /// Agent `index`: every fifth host draws the older CPU model; each host's figure is
    /// `base` scaled by its model's speed and a fixed per-host scatter of up to ±`scatter_pct`.
    pub fn new(index: usize, base_events_per_sec: f64, scatter_pct: f64) -> Self {
        let model = model_of(index);
        let scatter = unit_interval(splitmix64(index as u64)) * 2.0 - 1.0;
        Self {
            index,
            hostname: format!("farm-{index:03}"),
            events_per_sec: base_events_per_sec
                * model.speed
                * (1.0 + scatter * scatter_pct / 100.0),
        }
    }

    /// What GetHost answers: a 2-vCPU KVM guest, every figure plausible and fixed.
    pub fn fingerprint(&self) -> pb::Fingerprint {
        let model = model_of(self.index);
        let online = vec![HOUSEKEEPING_CPU, PROBE_CPU];
        pb::Fingerprint {
            cpu: Some(pb::CpuIdentity {
                vendor: model.vendor.into(),
                model_name: model.model_name.into(),
                family: Some(model.family),
                model: Some(model.model),
                stepping: Some(model.stepping),
                microcode: Some(model.microcode.into()),
            }),
            logical_cpus: online.len() as u32,
            online_cpus: online.clone(),
            kernel_release: "6.1.0-18-cloud-amd64".into(),
            clocksource: "kvm-clock".into(),
            hostname: self.hostname.clone(),
            unreadable: Vec::new(),
            cpu_flags: [
                "fpu",
                "sse4_2",
                "avx2",
                "avx512f",
                "constant_tsc",
                "hypervisor",
            ]
            .map(String::from)
            .to_vec(),
            topology: Some(pb::Topology {
                sockets: 1,
                cores: 1,
                threads_per_core: 2,
                nodes: vec![pb::NumaNode {
                    id: 0,
                    cpus: online.clone(),
                }],
                caches: vec![pb::CacheLevel {
                    level: 3,
                    kind: "unified".into(),
                    size_bytes: Some(36_608 * 1024),
                    instances: 1,
                    shared_cpus: online.clone(),
                }],
            }),
            kernel: Some(pb::KernelSettings {
                cmdline: "BOOT_IMAGE=/boot/vmlinuz-6.1.0-18-cloud-amd64 root=/dev/nvme0n1p1 ro"
                    .into(),
                aslr: Some(2),
                thp_enabled: "madvise".into(),
                thp_defrag: "madvise".into(),
                available_clocksources: vec!["kvm-clock".into(), "tsc".into(), "acpi_pm".into()],
                hypervisor: Some("kvm".into()),
                hypervisor_evidence: Some("cpuinfo flag hypervisor, clocksource kvm-clock".into()),
                ..Default::default()
            }),
            nics: vec![pb::Nic {
                name: "ens5".into(),
                driver: Some("ena".into()),
                mtu: Some(9001),
                rx_queues: Some(2),
                tx_queues: Some(2),
                ..Default::default()
            }],
            block_devices: Vec::new(),
            nic_queues: Vec::new(),
            cpu_roles: online
                .iter()
                .map(|&cpu| pb::CpuRole {
                    cpu,
                    housekeeping: cpu == HOUSEKEEPING_CPU,
                    quiet: cpu != HOUSEKEEPING_CPU,
                    smt_siblings: online.clone(),
                    numa_node: Some(0),
                    ..Default::default()
                })
                .collect(),
            controls: [
                "aslr",
                "irq_affinity",
                "irqbalance",
                "governor",
                "thp",
                "drop_caches",
            ]
            .map(|control| pb::ControlAvailability {
                control: control.into(),
                available: false,
                detail: "agent-farm: a synthetic host, nothing to change".into(),
            })
            .to_vec(),
            instance: None,
            steal_fraction_since_boot: Some(0.0008),
            monitors: Vec::new(),
        }
    }
}

fn model_of(index: usize) -> &'static CpuModel {
    &MODELS[usize::from(index % 5 == 4)]
}

/// SplitMix64: a tiny, good-enough mixer for deterministic per-host and per-interval scatter.
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A value in [0, 1) from 53 random bits.
pub fn unit_interval(bits: u64) -> f64 {
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_distinct_and_within_their_scatter() {
        let hosts: Vec<_> = (0..200)
            .map(|i| SyntheticHost::new(i, 1000.0, 3.0))
            .collect();
        assert_eq!(hosts[17].hostname, "farm-017");
        for h in &hosts {
            // The older model runs 4% slower: 1000 x 0.96 x 0.97 at the least.
            assert!((931.0..=1030.0).contains(&h.events_per_sec), "{h:?}");
        }
        let fp = hosts[4].fingerprint();
        assert_eq!(fp.hostname, "farm-004");
        assert!(fp.cpu.unwrap().model_name.contains("8124M"));
    }
}
