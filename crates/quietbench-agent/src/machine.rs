//! What machine the agent runs on, in full: the fingerprint plus topology, kernel settings,
//! devices, NIC queue interrupts and the CPUs that service them, each CPU's role, the host
//! tuning steps available, and the EC2 identity. Also the layout the placement planner works from.

use std::collections::BTreeMap;
use std::time::Duration;

use quietbench_host::HostRoot;
use quietbench_host::devices::{read_block_devices, read_nics};
use quietbench_host::imds::{ImdsConfig, read_instance_identity};
use quietbench_host::interrupts::{
    IrqId, QueueDirection, interrupt_deltas, nic_queue_irqs, read_interrupts, read_irq_affinity,
    servicing_cpus,
};
use quietbench_host::kernel::{Aslr, is_slow_clocksource, read_kernel_settings};
use quietbench_host::procstat::read_proc_stat;
use quietbench_host::topology::read_topology;
use quietbench_host::{read_fingerprint, topology::CacheKind};
use quietbench_probe::placement::{MachineLayout, NicQueueCpus, cpu_roles};
use quietbench_proto::v1 as pb;

use crate::convert;

/// How long the agent watches /proc/interrupts to see which CPUs service each NIC queue.
pub const OBSERVATION_WINDOW: Duration = Duration::from_millis(250);

/// The full description and the planner's layout, read together.
pub struct MachineView {
    /// For GetHost.
    pub fingerprint: pb::Fingerprint,
    /// For placement.
    pub layout: MachineLayout,
}

/// Reads everything. Blocks for `window` (two interrupt samples). Never fails: what cannot be
/// read is listed in the fingerprint's `unreadable`.
pub fn describe(root: &HostRoot, allowed_cpus: &[u32], window: Duration) -> MachineView {
    let base = read_fingerprint(root);
    let online = base.online_cpus.clone();
    let flags = base
        .cpu
        .as_ref()
        .map(|c| c.flags.clone())
        .unwrap_or_default();
    let mut fp = convert::fingerprint(base);
    fp.cpu_flags = flags;

    let (topology, notes) = read_topology(root, &online);
    fp.unreadable.extend(notes);
    let (kernel, notes) = read_kernel_settings(root, &online);
    fp.unreadable.extend(notes);
    let (nics, notes) = read_nics(root);
    fp.unreadable.extend(notes);
    let (blocks, notes) = read_block_devices(root);
    fp.unreadable.extend(notes);

    // NIC queues, and which CPUs serviced them during the window.
    let before = read_interrupts(root);
    std::thread::sleep(window);
    let after = read_interrupts(root);
    let mut interrupt_load: BTreeMap<u32, u64> = BTreeMap::new();
    let mut queues = Vec::new();
    match (&before, &after) {
        (Ok(b), Ok(a)) => {
            let deltas = interrupt_deltas(b, a).unwrap_or_default();
            for d in &deltas {
                for &(cpu, n) in &d.per_cpu {
                    *interrupt_load.entry(cpu).or_default() += n;
                }
            }
            for q in nic_queue_irqs(a) {
                let delta = deltas.iter().find(|d| d.id == IrqId::Number(q.irq));
                let affinity = read_irq_affinity(root, q.irq).ok();
                let interface = nics
                    .iter()
                    .find(|n| n.msi_irqs.contains(&q.irq) || n.name == q.queue.device)
                    .map(|n| n.name.clone())
                    .unwrap_or_default();
                queues.push(pb::NicQueue {
                    irq: q.irq,
                    device: q.queue.device.clone(),
                    interface,
                    queue: q.queue.queue,
                    direction: match q.queue.direction {
                        QueueDirection::Rx => "rx",
                        QueueDirection::Tx => "tx",
                        QueueDirection::TxRx => "txrx",
                        QueueDirection::Other => "other",
                    }
                    .into(),
                    affinity_cpus: affinity
                        .as_ref()
                        .map(|a| a.smp_affinity_list.clone())
                        .unwrap_or_default(),
                    effective_cpus: affinity
                        .and_then(|a| a.effective_affinity_list)
                        .unwrap_or_default(),
                    serviced_by: delta.map(servicing_cpus).unwrap_or_default(),
                    window_count: delta
                        .map(|d| d.per_cpu.iter().map(|(_, n)| n).sum())
                        .unwrap_or(0),
                });
            }
        }
        (Err(e), _) | (_, Err(e)) => fp.unreadable.push(format!("interrupts: {e}")),
    }

    let layout = MachineLayout {
        allowed_cpus: allowed_cpus.to_vec(),
        smt_siblings: online
            .iter()
            .map(|&c| (c, topology.smt_siblings_of(c)))
            .collect(),
        numa_node: online
            .iter()
            .filter_map(|&c| topology.node_of(c).map(|n| (c, n)))
            .collect(),
        nic_queues: queues
            .iter()
            .filter(|q| q.direction != "tx")
            .map(|q| NicQueueCpus {
                device: if q.interface.is_empty() {
                    q.device.clone()
                } else {
                    q.interface.clone()
                },
                queue: q.queue,
                cpus: servicing_evidence(q),
                numa_node: nics
                    .iter()
                    .find(|n| n.name == q.interface)
                    .and_then(|n| n.numa_node),
            })
            .collect(),
        interrupt_load: interrupt_load.clone(),
    };
    fp.cpu_roles = cpu_roles(&layout)
        .into_iter()
        .map(|(cpu, r)| pb::CpuRole {
            cpu,
            housekeeping: r.housekeeping,
            quiet: r.quiet,
            rss_queues: r.rss_queues,
            smt_siblings: r.smt_siblings,
            numa_node: r.numa_node,
            window_interrupts: interrupt_load.get(&cpu).copied().unwrap_or(0),
        })
        .collect();
    fp.nic_queues = queues;

    fp.topology = Some(topology_summary(&topology));
    let cmdline = root
        .read("/proc/cmdline")
        .map(|c| c.trim().to_string())
        .unwrap_or_default();
    fp.kernel = Some(kernel_summary(&kernel, &fp.clocksource, cmdline));
    fp.nics = nics
        .iter()
        .filter(|n| !n.is_virtual)
        .map(|n| pb::Nic {
            name: n.name.clone(),
            driver: n.driver.clone(),
            mtu: n.mtu,
            rx_queues: n.rx_queues,
            tx_queues: n.tx_queues,
            numa_node: n.numa_node,
            irqs: n.msi_irqs.clone(),
            speed_mbps: n.speed_mbps,
            pci_address: n.pci_address.clone(),
        })
        .collect();
    fp.block_devices = blocks
        .iter()
        .map(|b| pb::BlockDevice {
            name: b.name.clone(),
            model: b.model.clone(),
            rotational: b.rotational,
            scheduler: b.scheduler.clone(),
            size_bytes: b.size_bytes,
            serial: b.serial.clone(),
            ebs_volume_id: b.ebs_volume_id.clone(),
        })
        .collect();
    fp.controls = controls(root, &kernel);
    // The monitors read devices directly (ioctl), not through `root`: only for the live machine.
    if root.path() == std::path::Path::new("/") {
        let ebs: Vec<String> = blocks
            .iter()
            .filter(|b| b.ebs_volume_id.is_some())
            .map(|b| b.name.clone())
            .collect();
        let nics: Vec<String> = fp.nics.iter().map(|n| n.name.clone()).collect();
        fp.monitors = quietbench_host::device_noise::monitor_checks(&ebs, &nics)
            .into_iter()
            .map(
                |(monitor, device, available, detail)| pb::MonitorAvailability {
                    monitor: monitor.into(),
                    device,
                    available,
                    detail,
                },
            )
            .collect();
    }
    fp.instance = match read_instance_identity(root, &ImdsConfig::default()) {
        Ok(Some(i)) => Some(pb::InstanceIdentity {
            instance_id: i.instance_id,
            instance_type: i.instance_type,
            availability_zone: i.availability_zone,
            ami_id: i.ami_id,
            placement_group: i.placement_group,
            host_id: i.host_id,
            partition_number: i.partition_number,
            availability_zone_id: i.availability_zone_id,
        }),
        Ok(None) => None,
        Err(err) => {
            fp.unreadable.push(format!("EC2 instance metadata: {err}"));
            None
        }
    };
    fp.steal_fraction_since_boot = read_proc_stat(root).ok().and_then(|s| {
        let total = s.total.total();
        s.total
            .steal
            .filter(|_| total > 0)
            .map(|st| st as f64 / total as f64)
    });
    MachineView {
        fingerprint: fp,
        layout,
    }
}

/// The CPUs that evidently service a queue: those whose count grew in the window; when the
/// queue was idle, the effective affinity (where the kernel delivers it now). Not the allowed
/// affinity: that is often every CPU, and would mark every CPU as an RSS CPU.
fn servicing_evidence(q: &pb::NicQueue) -> Vec<u32> {
    if !q.serviced_by.is_empty() {
        q.serviced_by.clone()
    } else {
        q.effective_cpus.clone()
    }
}

fn topology_summary(t: &quietbench_host::topology::Topology) -> pb::Topology {
    let cores = t.cores().max(1);
    let mut caches: Vec<pb::CacheLevel> = Vec::new();
    for c in &t.caches {
        let kind = match c.kind {
            CacheKind::Data => "data",
            CacheKind::Instruction => "instruction",
            CacheKind::Unified => "unified",
        };
        match caches
            .iter_mut()
            .find(|x| x.level == u32::from(c.level) && x.kind == kind)
        {
            Some(existing) => existing.instances += 1,
            None => caches.push(pb::CacheLevel {
                level: c.level.into(),
                kind: kind.into(),
                size_bytes: c.size_bytes,
                instances: 1,
                shared_cpus: c.shared_cpus.clone(),
            }),
        }
    }
    pb::Topology {
        sockets: t.sockets() as u32,
        cores: cores as u32,
        threads_per_core: (t.cpus.len() / cores).max(1) as u32,
        nodes: t
            .nodes
            .iter()
            .map(|n| pb::NumaNode {
                id: n.id,
                cpus: n.cpus.clone(),
            })
            .collect(),
        caches,
    }
}

fn kernel_summary(
    k: &quietbench_host::kernel::KernelSettings,
    clocksource: &str,
    cmdline: String,
) -> pb::KernelSettings {
    let cpus = |p: &Option<quietbench_host::kernel::CpuListParam>| {
        p.as_ref().and_then(|p| p.cpus.clone()).unwrap_or_default()
    };
    let first_freq = k
        .cpufreq
        .iter()
        .find(|f| f.governor.is_some() || f.driver.is_some());
    pb::KernelSettings {
        cmdline,
        isolcpus: cpus(&k.boot.isolcpus),
        nohz_full: cpus(&k.boot.nohz_full),
        rcu_nocbs: cpus(&k.boot.rcu_nocbs),
        aslr: k.aslr.map(|a| match a {
            Aslr::Disabled => 0,
            Aslr::Conservative => 1,
            Aslr::Full => 2,
        }),
        thp_enabled: k.thp_enabled.clone().unwrap_or_default(),
        thp_defrag: k.thp_defrag.clone().unwrap_or_default(),
        cpufreq_governor: first_freq.and_then(|f| f.governor.clone()),
        cpufreq_driver: first_freq.and_then(|f| f.driver.clone()),
        turbo: k.turbo,
        cpuidle_governor: k.cpuidle_governor.clone(),
        cpuidle_driver: k.cpuidle_driver.clone(),
        available_clocksources: k.available_clocksources.clone(),
        slow_clocksource: is_slow_clocksource(clocksource),
        hypervisor: k.hypervisor.clone(),
        hypervisor_evidence: k.hypervisor_evidence.clone(),
    }
}

/// Which tuning steps `tune` could use here, read without changing anything.
fn controls(
    root: &HostRoot,
    k: &quietbench_host::kernel::KernelSettings,
) -> Vec<pb::ControlAvailability> {
    let is_root = nix::unistd::geteuid().is_root();
    let exists = |path: &str| root.resolve(path).exists();
    let control = |name: &str, ok: bool, detail: String| pb::ControlAvailability {
        control: name.into(),
        available: ok && is_root,
        detail: if ok && !is_root {
            format!("{detail}; needs root")
        } else {
            detail
        },
    };
    let irqs = std::fs::read_dir(root.resolve("/proc/irq"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().join("smp_affinity_list").exists())
                .count()
        })
        .unwrap_or(0);
    let irqbalance = std::fs::read_dir(root.resolve("/proc"))
        .map(|d| {
            d.flatten().any(|e| {
                std::fs::read_to_string(e.path().join("comm"))
                    .is_ok_and(|c| c.trim() == "irqbalance")
            })
        })
        .unwrap_or(false);
    let governor = k.cpufreq.iter().any(|f| f.governor.is_some());
    vec![
        control(
            "aslr",
            exists("/proc/sys/kernel/randomize_va_space"),
            "kernel.randomize_va_space (system-wide; per-process ASLR control needs no change)"
                .into(),
        ),
        control(
            "irq_affinity",
            irqs > 0,
            format!("{irqs} IRQs with a settable affinity (some may refuse)"),
        ),
        control(
            "irqbalance",
            irqbalance,
            if irqbalance {
                "irqbalance is running".into()
            } else {
                "irqbalance is not running".into()
            },
        ),
        control(
            "governor",
            governor,
            if governor {
                "cpufreq governors exposed".into()
            } else {
                "no cpufreq (normal on VMs)".into()
            },
        ),
        control(
            "thp",
            exists("/sys/kernel/mm/transparent_hugepage/enabled"),
            "transparent hugepages mode".into(),
        ),
        control(
            "drop_caches",
            exists("/proc/sys/vm/drop_caches"),
            "page cache drop before disk probes".into(),
        ),
    ]
}
