//! The machine a fake agent claims to run on: what GetHost answers. Every figure is plausible
//! and fixed (a 2-vCPU KVM guest); the CPU is the one a test gives, typed in or parsed from a
//! captured /proc/cpuinfo the way the real agent parses it.

use quietbench_host::CpuIdentity;
use quietbench_proto::v1 as pb;

/// The housekeeping CPU of every fake host (the real agent keeps the first allowed CPU).
pub const HOUSEKEEPING_CPU: u32 = 0;
/// The CPU the fake probe thread is "pinned" to.
pub const PROBE_CPU: u32 = 1;

/// The processor a fake host reports: the agent's own description of a processor
/// (`quietbench_host::CpuIdentity`), made from a captured /proc/cpuinfo or typed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cpu(pub CpuIdentity);

impl std::ops::Deref for Cpu {
    type Target = CpuIdentity;

    fn deref(&self) -> &CpuIdentity {
        &self.0
    }
}

impl Cpu {
    /// The processor of a captured /proc/cpuinfo, parsed by the agent's own parser.
    pub fn from_cpuinfo(text: &str) -> Result<Self, String> {
        quietbench_host::parse_cpuinfo(text)
            .map(Self)
            .map_err(|e| e.to_string())
    }

    /// An Intel processor of family 6 by its model name, model, stepping and microcode.
    pub fn intel(model_name: &str, model: u32, stepping: u32, microcode: &str) -> Self {
        Self(CpuIdentity {
            vendor: "GenuineIntel".into(),
            model_name: model_name.into(),
            family: Some(6),
            model: Some(model),
            stepping: Some(stepping),
            microcode: Some(microcode.into()),
            flags: [
                "fpu",
                "sse4_2",
                "avx2",
                "avx512f",
                "constant_tsc",
                "hypervisor",
            ]
            .map(String::from)
            .to_vec(),
        })
    }
}

/// What GetHost answers for a fake host called `hostname` with processor `cpu`.
pub fn fingerprint(hostname: &str, cpu: &Cpu) -> pb::Fingerprint {
    let online = vec![HOUSEKEEPING_CPU, PROBE_CPU];
    pb::Fingerprint {
        cpu: Some(pb::CpuIdentity {
            vendor: cpu.vendor.clone(),
            model_name: cpu.model_name.clone(),
            family: cpu.family,
            model: cpu.model,
            stepping: cpu.stepping,
            microcode: cpu.microcode.clone(),
        }),
        logical_cpus: online.len() as u32,
        online_cpus: online.clone(),
        kernel_release: "6.1.0-18-cloud-amd64".into(),
        clocksource: "kvm-clock".into(),
        hostname: hostname.into(),
        unreadable: Vec::new(),
        cpu_flags: cpu.flags.clone(),
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
            cmdline: "BOOT_IMAGE=/boot/vmlinuz-6.1.0-18-cloud-amd64 root=/dev/nvme0n1p1 ro".into(),
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
            detail: "a fake host (quietbench-testkit): nothing to change".into(),
        })
        .to_vec(),
        instance: None,
        steal_fraction_since_boot: Some(0.0008),
        monitors: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_captured_cpuinfo_names_the_fake_hosts_processor() {
        let text = include_str!(
            "../../quietbench-host/tests/fixtures/public/ec2-8259cl-2vcpu/proc/cpuinfo"
        );
        let cpu = Cpu::from_cpuinfo(text).unwrap();
        assert!(cpu.model_name.contains("8259CL"), "{cpu:?}");
        let fp = fingerprint("fake-001", &cpu);
        assert_eq!(fp.cpu.unwrap().stepping, Some(7));
        assert_eq!(fp.hostname, "fake-001");
        assert!(Cpu::from_cpuinfo("nothing here\n").is_err());
    }
}
