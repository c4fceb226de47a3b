use std::cmp::Reverse;

use quietbench_host::HostRoot;
use quietbench_host::interrupts::{
    InterruptTable, IrqId, QueueDirection, interrupt_deltas, nic_queue_irqs, parse_interrupts,
    read_interrupts, servicing_cpus,
};
use quietbench_host::topology::{Topology, read_topology};

use super::*;

fn root(name: &str) -> HostRoot {
    HostRoot::at(format!(
        "{}/../quietbench-host/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
}

/// NIC queues from the handler names, each serviced by the CPUs whose count grew
/// between the samples (most first); the load is every per-CPU count that grew.
/// Transmit-only queues (virtio `output.N`) are left out: their interrupts follow the
/// sending CPU, not where a flow's packets arrive, and `NicQueueCpus` has no direction,
/// so `virtio2 queue 0` would name both.
fn layout_from(
    before: &InterruptTable,
    after: &InterruptTable,
    topology: Option<&Topology>,
    nic_node: Option<u32>,
) -> MachineLayout {
    let deltas = interrupt_deltas(before, after).unwrap();
    let mut nic_queues = Vec::new();
    for q in nic_queue_irqs(after) {
        if q.queue.direction == QueueDirection::Tx {
            continue;
        }
        let delta = deltas.iter().find(|d| d.id == IrqId::Number(q.irq));
        let mut per_cpu = delta.map(|d| d.per_cpu.clone()).unwrap_or_default();
        per_cpu.sort_by_key(|&(cpu, n)| (Reverse(n), cpu));
        let mut cpus: Vec<u32> = per_cpu.iter().map(|&(cpu, _)| cpu).collect();
        let mut ascending = cpus.clone();
        ascending.sort_unstable();
        assert_eq!(ascending, delta.map(servicing_cpus).unwrap_or_default());
        cpus.dedup();
        nic_queues.push(NicQueueCpus {
            device: q.queue.device,
            queue: q.queue.queue,
            cpus,
            numa_node: nic_node,
        });
    }
    let mut interrupt_load = BTreeMap::new();
    for &(cpu, n) in deltas.iter().flat_map(|d| &d.per_cpu) {
        *interrupt_load.entry(cpu).or_insert(0) += n;
    }
    let mut layout = MachineLayout {
        allowed_cpus: after.cpus.clone(),
        nic_queues,
        interrupt_load,
        ..MachineLayout::default()
    };
    if let Some(t) = topology {
        for &cpu in &after.cpus {
            let s = t.smt_siblings_of(cpu);
            if !s.is_empty() {
                layout.smt_siblings.insert(cpu, s);
            }
            if let Some(node) = t.node_of(cpu) {
                layout.numa_node.insert(cpu, node);
            }
        }
    }
    layout
}

/// The development VM: 2 vCPUs, no SMT, node 0; virtio-net's input queue (IRQ 38)
/// fired on CPU 1 between the two samples.
fn kvm_layout() -> MachineLayout {
    let root = root("kvm-2vcpu-xeon");
    let online = read_interrupts(&root).unwrap().cpus;
    let sample = |name: &str| {
        parse_interrupts(&root.read(&format!("/proc-samples/{name}")).unwrap()).unwrap()
    };
    let (topology, unreadable) = read_topology(&root, &online);
    assert!(unreadable.is_empty(), "{unreadable:?}");
    let nic = root
        .read("/sys/devices/pci0000:00/0000:00:03.0/numa_node")
        .unwrap();
    let nic_node = u32::try_from(nic.trim().parse::<i64>().unwrap()).ok();
    layout_from(
        &sample("interrupts-t0"),
        &sample("interrupts-t1"),
        Some(&topology),
        nic_node,
    )
}

#[test]
fn the_2_vcpu_vm_has_no_quiet_cpu_so_compute_goes_to_the_rss_cpu() {
    let l = kvm_layout();
    assert_eq!(l.allowed_cpus, vec![0, 1]);
    assert_eq!(l.nic_queues, vec![queue("virtio2", 0, &[1], None)]);
    assert!(l.smt_siblings.is_empty());
    assert_eq!(l.numa_node, [(0, 0), (1, 0)].into());
    assert_eq!(l.interrupt_load, [(0, 222), (1, 150)].into());

    let roles = cpu_roles(&l);
    assert!(roles[&0].housekeeping && !roles[&0].quiet);
    assert_eq!(roles[&1].rss_queues, vec!["virtio2 queue 0"]);
    assert!(!roles[&1].quiet);

    let p = compute(&l, 1);
    assert_eq!(
        (p.policy, &p.thread_cpus),
        (PlacementPolicy::QuietFirst, &vec![1])
    );
    assert_eq!(
        p.notes,
        vec![
            "no quiet CPU: thread 0 on CPU 1, which services NIC queue virtio2 queue 0 (150 interrupts in the observation window)"
        ]
    );
    let p = compute(&l, 2);
    assert_eq!(p.thread_cpus, vec![1, 0]);
    assert!(p.notes[1].starts_with(
        "thread 1 on CPU 0, the housekeeping CPU that the agent's own runtime uses: the other allowed CPU already runs a probe thread"
    ));

    let p = network(&l, 1);
    assert_eq!((p.policy, &p.thread_cpus), (PlacementPolicy::Rss, &vec![1]));
    assert!(p.notes.is_empty(), "{:?}", p.notes);
    let p = network(&l, 2);
    assert_eq!(p.thread_cpus, vec![1, 1]);
    assert!(p.shares_cpus);
}

/// EC2 with 3 ENA NICs × 4 combined queues on 4 vCPUs. One sample: the counts since
/// boot are the evidence (a delta from an empty table), so every CPU that ever took a
/// queue's interrupt services it, and every CPU is an RSS CPU.
fn ena_layout() -> MachineLayout {
    let table = read_interrupts(&root("public/ec2-ena-3nic-4vcpu")).unwrap();
    let boot = InterruptTable {
        cpus: table.cpus.clone(),
        lines: Vec::new(),
    };
    layout_from(&boot, &table, None, None)
}

#[test]
fn on_ec2_ena_every_cpu_is_rss_so_compute_takes_the_least_interrupted() {
    let l = ena_layout();
    assert_eq!(l.allowed_cpus, vec![0, 1, 2, 3]);
    assert_eq!(l.nic_queues.len(), 12);
    assert_eq!(l.nic_queues[0], queue("eth0", 0, &[3, 0], None));
    assert_eq!(l.nic_queues[1], queue("eth0", 1, &[1, 2, 0], None));
    // eth2's queues 1 and 3 never fired: no CPU services them.
    assert_eq!(l.nic_queues[9], queue("eth2", 1, &[], None));
    assert_eq!(
        l.interrupt_load,
        [(0, 88663571), (1, 98530446), (2, 89899617), (3, 95834241)].into()
    );

    let roles = cpu_roles(&l);
    assert!(roles.values().all(|r| !r.quiet && !r.rss_queues.is_empty()));
    assert_eq!(
        roles[&3].rss_queues,
        vec![
            "eth0 queue 0",
            "eth0 queue 3",
            "eth1 queue 0",
            "eth1 queue 3"
        ]
    );

    let p = compute(&l, 3);
    assert_eq!(p.thread_cpus, vec![2, 3, 1]);
    assert_eq!(
        p.notes[0],
        "no quiet CPU: thread 0 on CPU 2, which services NIC queues eth0 queue 1, eth0 queue 3, eth1 queue 0, eth1 queue 2 and 1 more (89899617 interrupts in the observation window)"
    );
    assert_eq!(compute(&l, 4).thread_cpus, vec![2, 3, 1, 0]);
}

#[test]
fn on_ec2_ena_network_takes_one_cpu_per_queue_in_queue_order() {
    let l = ena_layout();
    // eth0 queue 0 → CPU 3, queue 1 → CPU 1 then 2; CPU 0 is housekeeping.
    let p = network(&l, 3);
    assert_eq!(
        (p.policy, &p.thread_cpus),
        (PlacementPolicy::Rss, &vec![3, 1, 2])
    );
    assert!(p.notes[0].starts_with("CPU 0 services NIC queues eth0 queue 0"));
    assert_eq!(p.notes.len(), 1);
    let p = network(&l, 8);
    assert_eq!(p.thread_cpus, vec![3, 1, 2, 3, 1, 2, 3, 1]);
    assert!(p.shares_cpus);
}
