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
mod fixtures;

/// Random layouts: 1..64 CPUs, SMT groups of 1, 2 or 4 (some listed one way only), random
/// NUMA nodes, loads and NIC queues (some on CPUs outside the affinity), random requests.
mod properties;
