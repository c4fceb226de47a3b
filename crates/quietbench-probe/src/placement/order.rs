//! The orders the planner takes CPUs in, one per kind of work: compute (quiet CPUs first, one
//! thread per core), network (the NIC's RSS CPUs, its NUMA node first) and explicit lists, with
//! the note for every compromise. [`super::plan`] picks one.

use std::collections::{BTreeMap, BTreeSet};

use super::*;

/// The layout, normalized: allowed CPUs sorted and unique, siblings symmetric, SMT groups
/// resolved, RSS CPUs with their queue labels.
pub(super) struct View<'a> {
    pub(super) layout: &'a MachineLayout,
    pub(super) allowed: Vec<u32>,
    pub(super) housekeeping: Option<u32>,
    pub(super) siblings: BTreeMap<u32, BTreeSet<u32>>,
    /// CPU → the lowest CPU of its SMT group (transitively: a malformed layout listing a-b and
    /// b-c puts all three on one core rather than letting the planner double up on b's core).
    pub(super) core: BTreeMap<u32, u32>,
    pub(super) rss: BTreeMap<u32, Vec<String>>,
}

impl<'a> View<'a> {
    pub(super) fn new(layout: &'a MachineLayout) -> Self {
        let mut allowed = layout.allowed_cpus.clone();
        allowed.sort_unstable();
        allowed.dedup();

        let mut siblings: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
        for (&cpu, list) in &layout.smt_siblings {
            for &sibling in list.iter().filter(|&&s| s != cpu) {
                siblings.entry(cpu).or_default().insert(sibling);
                siblings.entry(sibling).or_default().insert(cpu);
            }
        }
        let mut core = BTreeMap::new();
        for &start in siblings.keys() {
            if core.contains_key(&start) {
                continue;
            }
            let mut group = BTreeSet::from([start]);
            let mut stack = vec![start];
            while let Some(cpu) = stack.pop() {
                for &s in siblings.get(&cpu).into_iter().flatten() {
                    if group.insert(s) {
                        stack.push(s);
                    }
                }
            }
            let id = group.first().copied().unwrap_or(start);
            core.extend(group.into_iter().map(|c| (c, id)));
        }

        let mut rss: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for queue in &layout.nic_queues {
            let label = queue.label();
            for &cpu in &queue.cpus {
                let labels = rss.entry(cpu).or_default();
                if !labels.contains(&label) {
                    labels.push(label.clone());
                }
            }
        }
        Self {
            layout,
            housekeeping: allowed.first().copied(),
            allowed,
            siblings,
            core,
            rss,
        }
    }

    pub(super) fn is_allowed(&self, cpu: u32) -> bool {
        self.allowed.binary_search(&cpu).is_ok()
    }

    pub(super) fn siblings_of(&self, cpu: u32) -> impl Iterator<Item = u32> + '_ {
        self.siblings.get(&cpu).into_iter().flatten().copied()
    }

    pub(super) fn core_of(&self, cpu: u32) -> u32 {
        self.core.get(&cpu).copied().unwrap_or(cpu)
    }

    pub(super) fn load(&self, cpu: u32) -> u64 {
        self.layout.interrupt_load.get(&cpu).copied().unwrap_or(0)
    }

    pub(super) fn is_rss(&self, cpu: u32) -> bool {
        self.rss.contains_key(&cpu)
    }

    pub(super) fn is_busy(&self, cpu: u32) -> bool {
        self.housekeeping == Some(cpu) || self.is_rss(cpu)
    }

    pub(super) fn tier(&self, cpu: u32) -> Tier {
        if self.is_rss(cpu) {
            Tier::Rss
        } else if self.siblings_of(cpu).any(|s| self.is_busy(s)) {
            Tier::BusySibling
        } else {
            Tier::Quiet
        }
    }

    pub(super) fn is_quiet(&self, cpu: u32) -> bool {
        self.is_allowed(cpu) && self.housekeeping != Some(cpu) && self.tier(cpu) == Tier::Quiet
    }

    /// `NIC queue eth0 queue 1` or `NIC queues eth0 queue 1, eth0 queue 2`, at most four named.
    pub(super) fn queues_text(&self, cpu: u32) -> String {
        let labels = self.rss.get(&cpu).map(Vec::as_slice).unwrap_or_default();
        let shown = labels
            .iter()
            .take(4)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        let more = match labels.len().saturating_sub(4) {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        let noun = if labels.len() == 1 { "queue" } else { "queues" };
        format!("NIC {noun} {shown}{more}")
    }

    /// ` (N interrupts in the observation window)`, when the layout has a count for `cpu`.
    pub(super) fn load_text(&self, cpu: u32) -> String {
        match self.layout.interrupt_load.get(&cpu) {
            Some(n) => format!(" ({n} interrupts in the observation window)"),
            None => String::new(),
        }
    }
}

/// Thread i gets `cpus[i % len]`.
pub(super) fn take_in_turn(cpus: &[u32], threads: usize) -> Vec<u32> {
    cpus.iter().copied().cycle().take(threads).collect()
}

/// `threads` threads on `cpus` distinct CPUs share them: say so once, not once per thread.
pub(super) fn sharing_note(threads: usize, cpus: usize, what: &str, notes: &mut Vec<String>) {
    if cpus > 0 && threads > cpus {
        notes.push(format!(
            "{threads} threads but {cpus} {what}: threads share CPUs, up to {} on one CPU, and each runs slower",
            threads.div_ceil(cpus)
        ));
    }
}

/// Every allowed CPU in the order compute threads take them (module docs, steps 1 to 3).
pub(super) fn compute_order(view: &View) -> Vec<u32> {
    let mut rest: Vec<u32> = view
        .allowed
        .iter()
        .copied()
        .filter(|&c| Some(c) != view.housekeeping)
        .collect();
    rest.sort_by_key(|&c| (view.tier(c), view.load(c), c));
    // Rounds: each round gives every core at most one more thread, so a core gets its k-th
    // thread only after every core with k CPUs has its (k-1)-th.
    let mut order = Vec::with_capacity(view.allowed.len());
    while !rest.is_empty() {
        let mut cores = BTreeSet::new();
        let mut later = Vec::new();
        for cpu in rest {
            if cores.insert(view.core_of(cpu)) {
                order.push(cpu);
            } else {
                later.push(cpu);
            }
        }
        rest = later;
    }
    order.extend(view.housekeeping);
    order
}

pub(super) fn compute_plan(view: &View, threads: usize, notes: &mut Vec<String>) -> Vec<u32> {
    let order = compute_order(view);
    let quiet_total = view.allowed.iter().filter(|&&c| view.is_quiet(c)).count();
    let mut quiet_used = 0;
    // Core → (thread, CPU) of the first probe thread on it.
    let mut cores: BTreeMap<u32, (usize, u32)> = BTreeMap::new();
    for (i, &cpu) in order.iter().enumerate().take(threads) {
        if Some(cpu) == view.housekeeping {
            let why = if view.allowed.len() == 1 {
                "it is the only CPU the agent may use".to_string()
            } else if view.allowed.len() == 2 {
                "the other allowed CPU already runs a probe thread".to_string()
            } else {
                format!(
                    "the {} other allowed CPUs already run a probe thread",
                    view.allowed.len() - 1
                )
            };
            notes.push(format!(
                "thread {i} on CPU {cpu}, the housekeeping CPU that the agent's own runtime uses: {why}"
            ));
            continue;
        }
        let mut note = String::new();
        let tier = view.tier(cpu);
        if tier != Tier::Quiet {
            let short = if quiet_total == 0 {
                "no quiet CPU".to_string()
            } else if quiet_used == quiet_total && quiet_total == 1 {
                "the only quiet CPU is taken".to_string()
            } else if quiet_used == quiet_total {
                format!("all {quiet_total} quiet CPUs are taken")
            } else {
                "the quiet CPUs left share a core with a probe thread".to_string()
            };
            let why = if tier == Tier::Rss {
                format!(
                    "which services {}{}",
                    view.queues_text(cpu),
                    view.load_text(cpu)
                )
            } else {
                let busy: Vec<String> = view
                    .siblings_of(cpu)
                    .filter(|&s| view.is_busy(s))
                    .map(|s| {
                        if Some(s) == view.housekeeping {
                            format!("CPU {s} is the housekeeping CPU")
                        } else {
                            format!("CPU {s} services {}", view.queues_text(s))
                        }
                    })
                    .collect();
                format!("whose SMT sibling {}", busy.join(" and sibling "))
            };
            note = format!("{short}: thread {i} on CPU {cpu}, {why}");
        } else {
            quiet_used += 1;
        }
        let core = view.core_of(cpu);
        if let Some(&(j, other)) = cores.get(&core) {
            let doubled = format!(
                "shares a core with CPU {other} (thread {j}): every core the agent may use already runs a probe thread"
            );
            note = if note.is_empty() {
                format!("thread {i} on CPU {cpu}, which {doubled}")
            } else {
                format!("{note}; it also {doubled}")
            };
        } else {
            cores.insert(core, (i, cpu));
        }
        if !note.is_empty() {
            notes.push(note);
        }
    }
    sharing_note(threads, order.len(), "allowed CPUs", notes);
    take_in_turn(&order, threads)
}

/// An RSS CPU that network threads may use, and the queue it was found through.
pub(super) struct RssTarget {
    cpu: u32,
    queue: usize,
    /// 0: on the NIC's node; 1: either node unknown; 2: on another node.
    distance: u8,
}

/// The allowed non-housekeeping RSS CPUs in the order network threads take them: queue order
/// (devices in layout order, queues by index, unnumbered last), CPUs on the NIC's node first.
pub(super) fn rss_targets(view: &View) -> Vec<RssTarget> {
    let queues = &view.layout.nic_queues;
    let device_rank = |device: &str| queues.iter().position(|q| q.device == device);
    let mut order: Vec<usize> = (0..queues.len()).collect();
    order.sort_by_key(|&i| {
        let q = &queues[i];
        (device_rank(&q.device), q.queue.is_none(), q.queue, i)
    });
    let mut seen = BTreeSet::new();
    let mut targets = Vec::new();
    for i in order {
        let q = &queues[i];
        for &cpu in &q.cpus {
            if !view.is_allowed(cpu) || Some(cpu) == view.housekeeping || !seen.insert(cpu) {
                continue;
            }
            let distance = match (q.numa_node, view.layout.numa_node.get(&cpu)) {
                (Some(nic), Some(&node)) if nic == node => 0,
                (Some(_), Some(_)) => 2,
                _ => 1,
            };
            targets.push(RssTarget {
                cpu,
                queue: i,
                distance,
            });
        }
    }
    // Stable: queue order survives within each distance.
    targets.sort_by_key(|t| t.distance);
    targets
}

pub(super) fn network_plan(
    view: &View,
    threads: usize,
    notes: &mut Vec<String>,
) -> (PlacementPolicy, Vec<u32>) {
    let outside: Vec<u32> = view
        .rss
        .keys()
        .copied()
        .filter(|&c| !view.is_allowed(c))
        .collect();
    if let Some(hk) = view.housekeeping.filter(|&hk| view.is_rss(hk)) {
        notes.push(format!(
            "CPU {hk} services {} but is the housekeeping CPU: no network thread goes there",
            view.queues_text(hk)
        ));
    }
    if !outside.is_empty() {
        notes.push(format!(
            "CPUs {} service NIC queues but are outside the agent's CPU affinity: no network thread goes there",
            join_cpus(&outside)
        ));
    }
    let targets = rss_targets(view);
    if targets.is_empty() {
        let why = if view.rss.is_empty() {
            "no CPU is known to service a NIC queue"
        } else {
            "none that the agent may use other than the housekeeping CPU services a NIC queue"
        };
        notes.push(format!(
            "no RSS CPU for network threads ({why}): they are placed like compute threads"
        ));
        return (
            PlacementPolicy::QuietFirst,
            compute_plan(view, threads, notes),
        );
    }
    for (i, t) in targets.iter().enumerate().take(threads) {
        let q = &view.layout.nic_queues[t.queue];
        let (Some(nic), true) = (q.numa_node, t.distance > 0) else {
            continue;
        };
        let cpu = t.cpu;
        notes.push(match view.layout.numa_node.get(&cpu) {
            Some(node) => format!(
                "thread {i} on CPU {cpu} (NUMA node {node}), away from {}'s node {nic}: no RSS CPU left on that node",
                q.device
            ),
            None => format!(
                "thread {i} on CPU {cpu}, whose NUMA node is unknown ({} is on node {nic})",
                q.device
            ),
        });
    }
    sharing_note(
        threads,
        targets.len(),
        "RSS CPUs (one flow per queue CPU)",
        notes,
    );
    let cpus: Vec<u32> = targets.iter().map(|t| t.cpu).collect();
    (PlacementPolicy::Rss, take_in_turn(&cpus, threads))
}

pub(super) fn explicit_notes(
    view: &View,
    kind: WorkKind,
    thread_cpus: &[u32],
    notes: &mut Vec<String>,
) {
    let mut seen = BTreeSet::new();
    for &cpu in thread_cpus {
        if !seen.insert(cpu) {
            continue;
        }
        if Some(cpu) == view.housekeeping && view.allowed.len() > 1 {
            notes.push(format!(
                "explicit CPU {cpu} is the housekeeping CPU that the agent's own runtime uses"
            ));
        }
        match kind {
            WorkKind::Compute if view.is_rss(cpu) => notes.push(format!(
                "explicit CPU {cpu} services {}: its interrupts land on the probe thread",
                view.queues_text(cpu)
            )),
            WorkKind::Network if !view.is_rss(cpu) && !view.rss.is_empty() => {
                notes.push(format!(
                    "explicit CPU {cpu} services no NIC queue: its flow's receive interrupts land on another CPU"
                ))
            }
            _ => {}
        }
    }
    sharing_note(thread_cpus.len(), seen.len(), "explicit CPUs", notes);
}

/// CPU ids joined by commas, for messages.
pub(super) fn join_cpus(cpus: &[u32]) -> String {
    cpus.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}
