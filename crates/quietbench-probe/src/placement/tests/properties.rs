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
        self.allowed.contains(&cpu) && !self.busy(cpu) && !sibs.into_iter().any(|&s| self.busy(s))
    }
    fn others(&self) -> impl Iterator<Item = u32> + '_ {
        self.allowed.iter().copied().filter(|&c| c != self.hk)
    }
    fn key(&self, cpu: u32) -> (u64, u32) {
        (self.load.get(&cpu).copied().unwrap_or(0), cpu)
    }
}

fn check(l: &MachineLayout, r: &PlacementRequest, p: &PlacementPlan) -> Result<(), TestCaseError> {
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
