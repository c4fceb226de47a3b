use super::*;

fn layout(allowed: &[u32]) -> MachineLayout {
    MachineLayout::allowed_only(allowed)
}

/// Lists each pair one way only: the planner must read siblings as symmetric.
fn siblings(mut layout: MachineLayout, pairs: &[(u32, u32)]) -> MachineLayout {
    for &(a, b) in pairs {
        layout.smt_siblings.entry(a).or_default().push(b);
    }
    layout
}

fn queue(device: &str, queue: u32, cpus: &[u32], numa_node: Option<u32>) -> NicQueueCpus {
    NicQueueCpus {
        device: device.into(),
        queue: Some(queue),
        cpus: cpus.to_vec(),
        numa_node,
    }
}

fn request(threads: usize, kind: WorkKind) -> PlacementRequest {
    PlacementRequest {
        threads,
        kind,
        explicit_cpus: Vec::new(),
    }
}

fn compute(layout: &MachineLayout, threads: usize) -> PlacementPlan {
    plan(layout, &request(threads, WorkKind::Compute)).unwrap()
}

fn network(layout: &MachineLayout, threads: usize) -> PlacementPlan {
    plan(layout, &request(threads, WorkKind::Network)).unwrap()
}

#[test]
fn a_peer_on_this_machine_makes_network_threads_use_every_cpu() {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let own = |ip: IpAddr| ip == IpAddr::V4(Ipv4Addr::new(10, 0, 0, 5));
    let lo = Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let lo6 = Some(IpAddr::V6(Ipv6Addr::LOCALHOST));
    let this_host = Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 5)));
    let other_host = Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 6)));
    let same = WorkKind::SameMachineNetwork;
    assert_eq!(network_kind(WorkKind::Network, lo, own), same);
    assert_eq!(network_kind(WorkKind::Network, lo6, own), same);
    assert_eq!(network_kind(WorkKind::Network, this_host, own), same);
    assert_eq!(
        network_kind(WorkKind::Network, other_host, own),
        WorkKind::Network
    );
    assert_eq!(
        network_kind(WorkKind::Network, None, own),
        WorkKind::Network
    );
    // Only network probes have a peer to share the machine with.
    assert_eq!(network_kind(WorkKind::Compute, lo, own), WorkKind::Compute);
    // A loopback peer needs no look at this host's addresses.
    network_kind(WorkKind::Network, lo, |_| panic!("asked about loopback"));

    // This VM's shape: 2 vCPUs, both servicing a virtio NIC queue. To a remote peer the
    // flows go on the RSS CPU that is not housekeeping, sharing it; to a peer on this
    // machine they spread over both CPUs, as `--cpus 0-1` (and iperf3) would have them.
    let vm = MachineLayout {
        nic_queues: vec![
            queue("virtio0-input", 0, &[0], None),
            queue("virtio0-input", 1, &[1], None),
        ],
        ..layout(&[0, 1])
    };
    assert_eq!(network(&vm, 2).thread_cpus, vec![1, 1]);
    let local = |threads| plan(&vm, &request(threads, same)).unwrap();
    for (threads, cpus) in [(1, vec![1]), (2, vec![1, 0]), (4, vec![1, 0, 1, 0])] {
        let p = local(threads);
        assert_eq!(p.thread_cpus, cpus, "{threads} threads");
        assert_eq!(p.policy, PlacementPolicy::SameMachine);
        assert_eq!(p.policy.as_str(), "same-machine");
        assert_eq!(p.housekeeping_cpus, vec![0]);
        assert!(
            p.notes[0].starts_with("the peer runs on this machine"),
            "{:?}",
            p.notes
        );
    }
    assert!(
        local(2)
            .notes
            .iter()
            .any(|n| n.starts_with("thread 1 on CPU 0, the housekeeping CPU")),
        "{:?}",
        local(2).notes
    );
    // One CPU per core first, quiet CPUs first, as compute threads.
    let smt = siblings(layout(&[0, 1, 2, 3]), &[(0, 2), (1, 3)]);
    assert_eq!(
        plan(&smt, &request(2, same)).unwrap().thread_cpus,
        vec![1, 2]
    );
    // An explicit list still wins, without RSS notes that mean nothing here.
    let p = plan(
        &vm,
        &PlacementRequest {
            explicit_cpus: vec![1],
            ..request(1, same)
        },
    )
    .unwrap();
    assert_eq!(p.policy, PlacementPolicy::Explicit);
    assert!(p.notes.is_empty(), "{:?}", p.notes);
}

#[test]
fn keeps_the_housekeeping_cpu_free_while_another_cpu_is_free() {
    let p = plan_placement(1, &[1, 0], &[]).unwrap();
    assert_eq!(p.thread_cpus, vec![1]);
    assert_eq!(p.housekeeping_cpus, vec![0]);
    assert_eq!(p.policy, PlacementPolicy::QuietFirst);
    assert_eq!(p.policy.as_str(), "quiet-first");
    assert!(!p.shares_cpus);
    assert!(p.notes.is_empty(), "{:?}", p.notes);
    let p = plan_placement(3, &[0, 1, 2, 3], &[]).unwrap();
    assert_eq!(p.thread_cpus, vec![1, 2, 3]);
    assert!(!p.shares_cpus);
    // More threads than the other CPUs: the housekeeping CPU, then sharing.
    let p = plan_placement(3, &[0, 1], &[]).unwrap();
    assert_eq!(p.thread_cpus, vec![1, 0, 1]);
    assert!(p.shares_cpus);
    assert!(p.notes[0].starts_with("thread 1 on CPU 0, the housekeeping CPU"));
    assert!(p.notes[1].starts_with("3 threads but 2 allowed CPUs"));
}

#[test]
fn a_single_cpu_machine_uses_its_only_cpu_and_says_so() {
    let p = plan_placement(2, &[4], &[]).unwrap();
    assert_eq!(p.thread_cpus, vec![4, 4]);
    assert_eq!(p.housekeeping_cpus, vec![4]);
    assert!(p.notes[0].contains("the only CPU the agent may use"));
    assert!(p.shares_cpus);
}

#[test]
fn an_explicit_list_wins_is_checked_and_annotated() {
    let l = MachineLayout {
        nic_queues: vec![queue("eth0", 0, &[2], None)],
        ..layout(&[0, 1, 2])
    };
    let req = |threads, kind, cpus: &[u32]| PlacementRequest {
        threads,
        kind,
        explicit_cpus: cpus.to_vec(),
    };
    let p = plan(&l, &req(3, WorkKind::Compute, &[0, 2])).unwrap();
    assert_eq!(p.thread_cpus, vec![0, 2, 0]);
    assert_eq!(p.policy.as_str(), "explicit");
    assert!(p.shares_cpus);
    assert_eq!(
        p.notes,
        vec![
            "explicit CPU 0 is the housekeeping CPU that the agent's own runtime uses",
            "explicit CPU 2 services NIC queue eth0 queue 0: its interrupts land on the probe thread",
            "3 threads but 2 explicit CPUs: threads share CPUs, up to 2 on one CPU, and each runs slower",
        ]
    );
    let p = plan(&l, &req(1, WorkKind::Network, &[2, 1])).unwrap();
    assert_eq!((p.thread_cpus, p.notes.len()), (vec![2], 0));
    let p = plan(&l, &req(1, WorkKind::Network, &[1])).unwrap();
    assert!(
        p.notes[0].contains("services no NIC queue"),
        "{:?}",
        p.notes
    );

    let err = plan(&l, &req(1, WorkKind::Compute, &[1, 5, 6])).unwrap_err();
    assert_eq!(
        err,
        PlacementError::CpuNotAllowed {
            cpu: 5,
            allowed: "0,1,2".into()
        }
    );
    assert!(err.to_string().contains("CPU 5"), "{err}");
}

#[test]
fn refuses_nothing_to_place_too_much_or_nowhere_to_place_it() {
    assert_eq!(plan_placement(0, &[], &[]), Err(PlacementError::NoThreads));
    assert_eq!(
        plan_placement(1, &[], &[]),
        Err(PlacementError::NoAllowedCpus)
    );
    let err = plan_placement(MAX_THREADS + 1, &[0], &[]).unwrap_err();
    assert!(matches!(err, PlacementError::TooManyThreads { .. }));
    assert!(err.to_string().contains("at most 65536"), "{err}");
}

/// 4 cores × 2 threads (0/4, 1/5, 2/6, 3/7); CPU 2 services eth0 queue 0.
fn smt_machine() -> MachineLayout {
    let l = MachineLayout {
        nic_queues: vec![queue("eth0", 0, &[2], None)],
        ..layout(&[0, 1, 2, 3, 4, 5, 6, 7])
    };
    siblings(l, &[(0, 4), (1, 5), (6, 2), (3, 7)])
}

#[test]
fn quiet_cpus_exclude_housekeeping_rss_and_their_siblings() {
    let roles = cpu_roles(&smt_machine());
    let quiet: Vec<u32> = roles.iter().filter(|r| r.1.quiet).map(|r| *r.0).collect();
    assert_eq!(quiet, vec![1, 3, 5, 7]);
    assert!(roles[&0].housekeeping && !roles[&0].quiet);
    assert_eq!(roles[&2].rss_queues, vec!["eth0 queue 0"]);
    // Listed one way in the layout, read both ways.
    assert_eq!(roles[&2].smt_siblings, vec![6]);
    assert_eq!(roles[&6].smt_siblings, vec![2]);
    assert!(!roles[&4].quiet && !roles[&6].quiet);
}

#[test]
fn compute_takes_one_cpu_per_core_before_doubling_up() {
    let l = smt_machine();
    let p = compute(&l, 2);
    assert_eq!(p.thread_cpus, vec![1, 3]);
    assert!(p.notes.is_empty(), "{:?}", p.notes);
    // The quiet CPUs 5 and 7 share cores with threads 0 and 1, so the next threads go to
    // the free cores of CPUs 4 (sibling of housekeeping) and 6 (sibling of RSS CPU 2).
    let p = compute(&l, 4);
    assert_eq!(p.thread_cpus, vec![1, 3, 4, 6]);
    assert_eq!(
        p.notes,
        vec![
            "the quiet CPUs left share a core with a probe thread: thread 2 on CPU 4, whose SMT sibling CPU 0 is the housekeeping CPU",
            "the quiet CPUs left share a core with a probe thread: thread 3 on CPU 6, whose SMT sibling CPU 2 services NIC queue eth0 queue 0",
        ]
    );
    let p = compute(&l, 9);
    assert_eq!(p.thread_cpus, vec![1, 3, 4, 6, 5, 7, 2, 0, 1]);
    assert!(
        p.notes[2].starts_with(
            "thread 4 on CPU 5, which shares a core with CPU 1 (thread 0): every core"
        )
    );
    assert!(p.notes[4].starts_with("all 4 quiet CPUs are taken: thread 6 on CPU 2, which services NIC queue eth0 queue 0; it also shares a core with CPU 6 (thread 3)"), "{}", p.notes[4]);
    assert!(p.notes[5].contains("housekeeping"));
    assert!(p.notes[6].starts_with("9 threads but 8 allowed CPUs"));
}

#[test]
fn a_fresh_core_outranks_a_quiet_sibling_of_a_probe_thread() {
    // CPUs 2 and 3 are quiet siblings; CPU 1 takes NIC interrupts on a core of its own.
    let l = MachineLayout {
        nic_queues: vec![queue("eth0", 0, &[1], None)],
        ..siblings(layout(&[0, 1, 2, 3]), &[(2, 3)])
    };
    assert_eq!(compute(&l, 2).thread_cpus, vec![2, 1]);
    assert_eq!(compute(&l, 3).thread_cpus, vec![2, 1, 3]);
}

#[test]
fn compute_prefers_the_lowest_interrupt_load_then_the_lowest_id() {
    let l = MachineLayout {
        interrupt_load: [(1, 50), (2, 10), (3, 10), (4, 0)].into(),
        ..layout(&[0, 1, 2, 3, 4])
    };
    assert_eq!(compute(&l, 4).thread_cpus, vec![4, 2, 3, 1]);
}

#[test]
fn compute_degrades_quiet_then_busy_sibling_then_rss_by_load_then_housekeeping() {
    // 1 and 2 are RSS (2 fires less), 3's sibling 4 is RSS, 5 is quiet.
    let l = MachineLayout {
        nic_queues: vec![
            queue("eth0", 0, &[1], None),
            queue("eth0", 1, &[2, 4], None),
        ],
        interrupt_load: [(1, 100), (2, 5), (4, 7)].into(),
        ..siblings(layout(&[0, 1, 2, 3, 4, 5]), &[(3, 4)])
    };
    let p = compute(&l, 7);
    assert_eq!(p.thread_cpus, vec![5, 3, 2, 1, 4, 0, 5]);
    assert_eq!(
        p.notes[0],
        "the only quiet CPU is taken: thread 1 on CPU 3, whose SMT sibling CPU 4 services NIC queue eth0 queue 1"
    );
    assert_eq!(
        p.notes[1],
        "the only quiet CPU is taken: thread 2 on CPU 2, which services NIC queue eth0 queue 1 (5 interrupts in the observation window)"
    );
}

#[test]
fn network_takes_rss_cpus_on_the_nic_node_in_queue_order() {
    // Node 0: CPUs 0-3, node 1: CPUs 4-7; eth0 on node 1, its queues listed out of order.
    let l = MachineLayout {
        numa_node: (0..8).map(|c| (c, c / 4)).collect(),
        nic_queues: vec![
            queue("eth0", 2, &[6], Some(1)),
            queue("eth0", 0, &[2], Some(1)),
            queue("eth0", 3, &[0], Some(1)),
            queue("eth0", 1, &[5], Some(1)),
        ],
        ..layout(&[0, 1, 2, 3, 4, 5, 6, 7])
    };
    let p = network(&l, 3);
    assert_eq!(p.policy.as_str(), "rss");
    assert_eq!(p.thread_cpus, vec![5, 6, 2]);
    assert_eq!(
        p.notes,
        vec![
            "CPU 0 services NIC queue eth0 queue 3 but is the housekeeping CPU: no network thread goes there",
            "thread 2 on CPU 2 (NUMA node 0), away from eth0's node 1: no RSS CPU left on that node",
        ]
    );
    let p = network(&l, 5);
    assert_eq!(p.thread_cpus, vec![5, 6, 2, 5, 6]);
    assert!(p.shares_cpus);
    assert!(
        p.notes
            .last()
            .unwrap()
            .starts_with("5 threads but 3 RSS CPUs")
    );
}

#[test]
fn network_without_rss_cpus_falls_back_to_the_compute_order() {
    let p = network(&layout(&[0, 1, 2]), 2);
    assert_eq!(p.policy, PlacementPolicy::QuietFirst);
    assert_eq!(p.thread_cpus, vec![1, 2]);
    assert_eq!(
        p.notes,
        vec![
            "no RSS CPU for network threads (no CPU is known to service a NIC queue): they are placed like compute threads"
        ]
    );
    // Only the housekeeping CPU and a CPU outside the affinity take NIC interrupts.
    let l = MachineLayout {
        nic_queues: vec![queue("eth0", 0, &[0, 9], None)],
        ..layout(&[0, 1, 2])
    };
    let p = network(&l, 1);
    assert_eq!(
        (p.policy, p.thread_cpus),
        (PlacementPolicy::QuietFirst, vec![1])
    );
    assert!(
        p.notes[0].contains("is the housekeeping CPU"),
        "{:?}",
        p.notes
    );
    assert!(p.notes[1].starts_with("CPUs 9 service NIC queues but are outside"));
    assert!(p.notes[2].contains("none that the agent may use"));
}

#[test]
fn malformed_siblings_are_read_as_one_core() {
    // Self-listing, one-way lists and a chain 1-2-3: all one core.
    let l = MachineLayout {
        smt_siblings: [(1, vec![1, 2]), (3, vec![2]), (7, vec![])].into(),
        ..layout(&[0, 1, 2, 3, 4])
    };
    assert_eq!(cpu_roles(&l)[&2].smt_siblings, vec![1, 3]);
    assert_eq!(compute(&l, 4).thread_cpus, vec![1, 4, 2, 3]);
}

#[test]
fn roles_cover_every_cpu_the_layout_names() {
    let l = MachineLayout {
        numa_node: [(1, 0), (9, 1)].into(),
        nic_queues: vec![NicQueueCpus {
            device: "virtio2".into(),
            queue: None,
            cpus: vec![8],
            numa_node: None,
        }],
        ..siblings(layout(&[1, 2]), &[(2, 10)])
    };
    let roles = cpu_roles(&l);
    assert_eq!(roles.keys().copied().collect::<Vec<_>>(), [1, 2, 8, 9, 10]);
    assert!(roles[&1].housekeeping && !roles[&1].quiet);
    assert!(roles[&2].quiet);
    assert_eq!(roles[&8].rss_queues, vec!["virtio2"]);
    assert!(!roles[&10].quiet, "not allowed, so never quiet");
    assert_eq!(roles[&9].numa_node, Some(1));
    assert!(cpu_roles(&MachineLayout::default()).is_empty());
}

/// Layouts built the way the agent is meant to, from files captured on real machines.
mod fixtures {
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
}

/// Random layouts: 1..64 CPUs, SMT groups of 1, 2 or 4 (some listed one way only), random
/// NUMA nodes, loads and NIC queues (some on CPUs outside the affinity), random requests.
mod properties {
    use proptest::collection::{btree_map, btree_set, vec};
    use proptest::prelude::*;
    use proptest::sample::Index;

    use super::*;

    type QueueSeed = (usize, Option<u32>, Vec<Index>, Vec<u32>, Option<u32>);

    fn arb_queue() -> impl Strategy<Value = QueueSeed> {
        (
            0usize..3,
            proptest::option::weighted(0.9, 0u32..8),
            vec(any::<Index>(), 0..4),
            vec(96u32..100, 0..2),
            proptest::option::of(0u32..3),
        )
    }

    fn arb_case() -> impl Strategy<Value = (MachineLayout, PlacementRequest)> {
        btree_set(0u32..96, 1..=64)
            .prop_flat_map(|ids| {
                let cpus: Vec<u32> = ids.into_iter().collect();
                let n = cpus.len();
                (
                    Just(cpus.clone()),
                    Just(cpus).prop_shuffle(),
                    vec(
                        prop_oneof![3 => Just(1usize), 6 => Just(2), 1 => Just(4)],
                        n,
                    ),
                    vec(any::<bool>(), n),
                    vec(proptest::bool::weighted(0.85), n),
                    vec(proptest::option::of(0u32..3), n),
                    vec(proptest::option::of(0u64..1_000), n),
                    vec(arb_queue(), 0..8),
                    (
                        1usize..=140,
                        any::<bool>(),
                        prop_oneof![3 => Just(Vec::new()), 1 => vec(any::<Index>(), 1..5)],
                    ),
                )
            })
            .prop_map(
                |(cpus, shuffled, sizes, both_ways, mask, numa, load, queues, req)| {
                    let mut l = MachineLayout::default();
                    let mut rest = &shuffled[..];
                    for (k, &size) in sizes.iter().enumerate() {
                        let (group, tail) = rest.split_at(size.min(rest.len()));
                        for &a in group {
                            for &b in group.iter().filter(|&&b| b != a) {
                                if both_ways[k] || a < b {
                                    l.smt_siblings.entry(a).or_default().push(b);
                                }
                            }
                        }
                        rest = tail;
                    }
                    // The affinity in a random order: the planner must sort it.
                    l.allowed_cpus = shuffled
                        .iter()
                        .zip(&mask)
                        .filter(|(_, keep)| **keep)
                        .map(|(&c, _)| c)
                        .collect();
                    if l.allowed_cpus.is_empty() {
                        l.allowed_cpus.push(cpus[0]);
                    }
                    for (i, &cpu) in cpus.iter().enumerate() {
                        if let Some(node) = numa[i] {
                            l.numa_node.insert(cpu, node);
                        }
                        if let Some(n) = load[i] {
                            l.interrupt_load.insert(cpu, n);
                        }
                    }
                    for (device, queue, picks, outside, node) in queues {
                        let mut q_cpus: Vec<u32> =
                            picks.iter().map(|p| cpus[p.index(cpus.len())]).collect();
                        q_cpus.extend(outside);
                        l.nic_queues.push(NicQueueCpus {
                            device: format!("eth{device}"),
                            queue,
                            cpus: q_cpus,
                            numa_node: node,
                        });
                    }
                    let (threads, network, picks) = req;
                    let allowed = &l.allowed_cpus;
                    let request = PlacementRequest {
                        threads,
                        kind: if network {
                            WorkKind::Network
                        } else {
                            WorkKind::Compute
                        },
                        explicit_cpus: picks
                            .iter()
                            .map(|p| allowed[p.index(allowed.len())])
                            .collect(),
                    };
                    (l, request)
                },
            )
    }

    /// The roles recomputed from the definitions, independently of the planner's code.
    /// The random SMT groups are cliques, so a core is a CPU and its listed siblings.
    struct Model {
        allowed: BTreeSet<u32>,
        hk: u32,
        rss: BTreeSet<u32>,
        siblings: BTreeMap<u32, BTreeSet<u32>>,
        load: BTreeMap<u32, u64>,
    }

    impl Model {
        fn new(l: &MachineLayout) -> Self {
            let allowed: BTreeSet<u32> = l.allowed_cpus.iter().copied().collect();
            let mut siblings: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
            for (&a, list) in &l.smt_siblings {
                for &b in list {
                    siblings.entry(a).or_default().insert(b);
                    siblings.entry(b).or_default().insert(a);
                }
            }
            Model {
                hk: *allowed.first().unwrap(),
                allowed,
                rss: l.nic_queues.iter().flat_map(|q| q.cpus.clone()).collect(),
                siblings,
                load: l.interrupt_load.clone(),
            }
        }
        fn core(&self, cpu: u32) -> u32 {
            let s = self.siblings.get(&cpu);
            s.into_iter().flatten().copied().chain([cpu]).min().unwrap()
        }
        fn busy(&self, cpu: u32) -> bool {
            cpu == self.hk || self.rss.contains(&cpu)
        }
        fn quiet(&self, cpu: u32) -> bool {
            let sibs = self.siblings.get(&cpu).into_iter().flatten();
            self.allowed.contains(&cpu)
                && !self.busy(cpu)
                && !sibs.into_iter().any(|&s| self.busy(s))
        }
        fn others(&self) -> impl Iterator<Item = u32> + '_ {
            self.allowed.iter().copied().filter(|&c| c != self.hk)
        }
        fn key(&self, cpu: u32) -> (u64, u32) {
            (self.load.get(&cpu).copied().unwrap_or(0), cpu)
        }
    }

    fn check(
        l: &MachineLayout,
        r: &PlacementRequest,
        p: &PlacementPlan,
    ) -> Result<(), TestCaseError> {
        let m = Model::new(l);
        let cpus = &p.thread_cpus;
        prop_assert_eq!(cpus.len(), r.threads);
        prop_assert!(cpus.iter().all(|c| m.allowed.contains(c)));
        prop_assert_eq!(&p.housekeeping_cpus, &vec![m.hk]);
        let used: BTreeSet<u32> = cpus.iter().copied().collect();
        prop_assert_eq!(p.shares_cpus, used.len() < cpus.len());
        if p.shares_cpus {
            prop_assert!(!p.notes.is_empty());
        }
        if !r.explicit_cpus.is_empty() {
            prop_assert_eq!(p.policy, PlacementPolicy::Explicit);
            for (i, &cpu) in cpus.iter().enumerate() {
                prop_assert_eq!(cpu, r.explicit_cpus[i % r.explicit_cpus.len()]);
            }
            return Ok(());
        }
        // The housekeeping CPU is a last resort, and always said.
        if used.contains(&m.hk) {
            prop_assert!(r.threads >= m.allowed.len());
            prop_assert!(p.notes.iter().any(|n| n.contains("housekeeping CPU")));
        }
        let targets: BTreeSet<u32> = m.others().filter(|c| m.rss.contains(c)).collect();
        match p.policy {
            PlacementPolicy::Explicit => prop_assert!(false, "explicit without a list"),
            PlacementPolicy::Rss => {
                prop_assert_eq!(r.kind, WorkKind::Network);
                prop_assert!(used.is_subset(&targets));
                // One thread per RSS CPU until they run out, then wrap.
                prop_assert_eq!(used.len(), r.threads.min(targets.len()));
            }
            PlacementPolicy::QuietFirst | PlacementPolicy::SameMachine => {
                prop_assert_eq!(
                    p.policy == PlacementPolicy::SameMachine,
                    r.kind == WorkKind::SameMachineNetwork
                );
                if r.kind == WorkKind::Network {
                    prop_assert!(targets.is_empty());
                    prop_assert!(p.notes.iter().any(|n| n.starts_with("no RSS CPU")));
                }
                // No two threads share a CPU while an allowed CPU is unused.
                prop_assert_eq!(used.len(), r.threads.min(m.allowed.len()));
                let busy_cores: BTreeSet<u32> = used.iter().map(|&c| m.core(c)).collect();
                let has_thread = |c: u32| busy_cores.contains(&m.core(c));
                // No two threads on one core while a core with an allowed
                // non-housekeeping CPU runs none.
                if busy_cores.len() < used.len() {
                    prop_assert!(m.others().all(has_thread));
                }
                // Quiet CPUs first: any other CPU only once every quiet core runs a thread.
                if used.iter().any(|&c| c != m.hk && !m.quiet(c)) {
                    prop_assert!(m.others().filter(|&c| m.quiet(c)).all(has_thread));
                }
                // RSS CPUs after every non-RSS core runs a thread.
                if used.iter().any(|c| m.rss.contains(c) && *c != m.hk) {
                    prop_assert!(m.others().filter(|c| !m.rss.contains(c)).all(has_thread));
                }
                // Among quiet CPUs on distinct cores: lowest load, then lowest id.
                for &a in used.iter().filter(|&&c| m.quiet(c)) {
                    for b in m.others().filter(|&c| m.quiet(c) && !has_thread(c)) {
                        prop_assert!(m.key(a) < m.key(b), "CPU {} used before {}", a, b);
                    }
                }
                // Every thread off a quiet CPU is explained.
                if used.iter().any(|&c| !m.quiet(c)) {
                    prop_assert!(!p.notes.is_empty());
                }
            }
        }
        Ok(())
    }

    fn arb_cpu() -> impl Strategy<Value = u32> {
        prop_oneof![0u32..16, Just(u32::MAX), any::<u32>()]
    }

    proptest! {
        #[test]
        fn plans_keep_their_invariants((layout, request) in arb_case()) {
            let p = plan(&layout, &request).unwrap();
            check(&layout, &request, &p)?;
            // With the peer on this machine, network threads go where compute threads would.
            if request.kind == WorkKind::Network && request.explicit_cpus.is_empty() {
                let same = PlacementRequest { kind: WorkKind::SameMachineNetwork, ..request.clone() };
                let local = plan(&layout, &same).unwrap();
                check(&layout, &same, &local)?;
                let compute = PlacementRequest { kind: WorkKind::Compute, ..request.clone() };
                prop_assert_eq!(&local.thread_cpus, &plan(&layout, &compute).unwrap().thread_cpus);
            }
            // The order the affinity is listed in changes nothing.
            let mut sorted = layout.clone();
            sorted.allowed_cpus.sort_unstable();
            prop_assert_eq!(plan(&sorted, &request).unwrap(), p);
            let roles = cpu_roles(&layout);
            prop_assert_eq!(roles.values().filter(|r| r.housekeeping).count(), 1);
            let model = Model::new(&layout);
            for (&cpu, r) in &roles {
                prop_assert_eq!(r.quiet, model.quiet(cpu), "CPU {}", cpu);
                prop_assert_eq!(!r.rss_queues.is_empty(), model.rss.contains(&cpu));
            }
        }

        #[test]
        fn planning_never_panics_and_errors_are_the_right_ones(
            allowed in vec(arb_cpu(), 0..8),
            smt_siblings in btree_map(arb_cpu(), vec(arb_cpu(), 0..4), 0..8),
            numa_node in btree_map(arb_cpu(), arb_cpu(), 0..8),
            queues in vec((".{0,4}", proptest::option::of(any::<u32>()), vec(arb_cpu(), 0..4), proptest::option::of(arb_cpu())), 0..6),
            interrupt_load in btree_map(arb_cpu(), any::<u64>(), 0..8),
            threads in prop_oneof![0usize..300, Just(MAX_THREADS + 1), Just(usize::MAX)],
            network in any::<bool>(),
            explicit_cpus in vec(arb_cpu(), 0..4),
        ) {
            let layout = MachineLayout {
                allowed_cpus: allowed.clone(),
                smt_siblings,
                numa_node,
                nic_queues: queues
                    .into_iter()
                    .map(|(device, queue, cpus, numa_node)| NicQueueCpus { device, queue, cpus, numa_node })
                    .collect(),
                interrupt_load,
            };
            let kind = if network { WorkKind::Network } else { WorkKind::Compute };
            let request = PlacementRequest { threads, kind, explicit_cpus: explicit_cpus.clone() };
            let roles = cpu_roles(&layout);
            prop_assert!(allowed.iter().all(|c| roles.contains_key(c)));
            let result = plan(&layout, &request);
            let not_allowed = explicit_cpus.iter().find(|c| !allowed.contains(c));
            match result {
                Err(PlacementError::NoThreads) => prop_assert_eq!(threads, 0),
                Err(PlacementError::TooManyThreads { .. }) => prop_assert!(threads > MAX_THREADS),
                Err(PlacementError::NoAllowedCpus) => prop_assert!(allowed.is_empty() && threads > 0),
                Err(PlacementError::CpuNotAllowed { cpu, .. }) => prop_assert_eq!(Some(&cpu), not_allowed),
                Ok(p) => {
                    prop_assert!(threads > 0 && !allowed.is_empty() && not_allowed.is_none());
                    prop_assert_eq!(p.thread_cpus.len(), threads);
                    prop_assert!(p.thread_cpus.iter().all(|c| allowed.contains(c)));
                }
            }
        }
    }
}
