//! CPU topology from sysfs: packages, cores, SMT siblings, NUMA nodes and caches.
//!
//! Placement needs to know which CPUs share a core (a busy sibling slows a probe) and which
//! share a node (memory and NIC locality). Everything comes from `/sys/devices/system/cpu` and
//! `/sys/devices/system/node`; /proc/cpuinfo's "core id" lines were rejected because Arm kernels
//! do not print them.

use std::io::ErrorKind;

use serde::Serialize;

use crate::{CpuListError, HostRoot, parse_cpu_list};

/// Where one CPU sits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CpuTopology {
    /// The CPU id.
    pub cpu: u32,
    /// `topology/physical_package_id` (the socket); `None` where unknown (-1 on some Arm).
    pub package_id: Option<u32>,
    /// `topology/core_id`, unique within the package.
    pub core_id: Option<u32>,
    /// `topology/die_id`, where the kernel has it (5.2 and later, x86).
    pub die_id: Option<u32>,
    /// CPUs sharing this CPU's core, itself included (`thread_siblings_list`).
    pub thread_siblings: Vec<u32>,
    /// CPUs in this CPU's package, itself included (`package_cpus_list`, or the older
    /// `core_siblings_list`).
    pub package_cpus: Vec<u32>,
    /// The NUMA node, when the kernel has NUMA support.
    pub numa_node: Option<u32>,
}

/// A NUMA node and its CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NumaNode {
    /// The node id (the N of `nodeN`).
    pub id: u32,
    /// Its CPUs (`nodeN/cpulist`); empty for a memory-only node.
    pub cpus: Vec<u32>,
}

/// What a cache holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum CacheKind {
    /// Data only (an L1d).
    Data,
    /// Instructions only (an L1i).
    Instruction,
    /// Both.
    Unified,
}

/// One cache, listed once however many CPUs share it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cache {
    /// 1, 2, 3…
    pub level: u8,
    /// Data, instruction or unified.
    pub kind: CacheKind,
    /// Capacity in bytes; `None` if the kernel does not say.
    pub size_bytes: Option<u64>,
    /// `ways_of_associativity`, as the kernel prints it.
    pub ways_of_associativity: Option<u32>,
    /// `coherency_line_size`: the cache line, in bytes.
    pub line_size_bytes: Option<u32>,
    /// The CPUs sharing this cache (`shared_cpu_list`).
    pub shared_cpus: Vec<u32>,
}

/// The machine's CPU topology. What the kernel does not expose is `None` or empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Topology {
    /// One entry per online CPU, in the order given.
    pub cpus: Vec<CpuTopology>,
    /// NUMA nodes by id; empty on a kernel without NUMA support.
    pub nodes: Vec<NumaNode>,
    /// Distinct caches, sorted by level, kind and first CPU.
    pub caches: Vec<Cache>,
}

impl Topology {
    /// The number of distinct packages (sockets) among the CPUs whose package is known.
    pub fn sockets(&self) -> usize {
        let mut ids: Vec<u32> = self.cpus.iter().filter_map(|c| c.package_id).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    }

    /// The number of distinct physical cores: distinct (package, core) pairs among CPUs where
    /// both are known. A core id alone repeats across packages, hence the pair.
    pub fn cores(&self) -> usize {
        let mut pairs: Vec<(u32, u32)> = self
            .cpus
            .iter()
            .filter_map(|c| Some((c.package_id?, c.core_id?)))
            .collect();
        pairs.sort_unstable();
        pairs.dedup();
        pairs.len()
    }

    /// The other hardware threads of `cpu`'s core (itself excluded); empty without SMT or for
    /// an unknown CPU.
    pub fn smt_siblings_of(&self, cpu: u32) -> Vec<u32> {
        self.cpu(cpu)
            .map(|c| {
                c.thread_siblings
                    .iter()
                    .copied()
                    .filter(|&s| s != cpu)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The NUMA node of `cpu`, if known.
    pub fn node_of(&self, cpu: u32) -> Option<u32> {
        self.cpu(cpu).and_then(|c| c.numa_node)
    }

    fn cpu(&self, cpu: u32) -> Option<&CpuTopology> {
        self.cpus.iter().find(|c| c.cpu == cpu)
    }
}

/// A topology file held something other than what the kernel writes there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    /// An id or count is not a number.
    #[error("{path}: '{text}' is not a number")]
    BadNumber {
        /// The machine path of the file.
        path: String,
        /// What it held (trimmed).
        text: String,
    },
    /// A cache size is not a number with an optional K/M/G suffix.
    #[error("{path}: '{text}' is not a cache size like 32K, 1024K or 32M")]
    BadSize {
        /// The machine path of the file.
        path: String,
        /// What it held (trimmed).
        text: String,
    },
    /// A cache type other than Data, Instruction or Unified.
    #[error("{path}: unknown cache type '{text}' (expected Data, Instruction or Unified)")]
    BadCacheType {
        /// The machine path of the file.
        path: String,
        /// What it held (trimmed).
        text: String,
    },
    /// A CPU list that does not parse.
    #[error("{path}: {source}")]
    BadCpuList {
        /// The machine path of the file.
        path: String,
        /// Why the list was refused.
        #[source]
        source: CpuListError,
    },
}

/// Parses a topology id such as `physical_package_id`. `-1` (and any negative value) means the
/// kernel does not know, which is `None`, not an error.
pub fn parse_topology_id(path: &str, text: &str) -> Result<Option<u32>, TopologyError> {
    let t = text.trim();
    match t.parse::<i64>() {
        Ok(v) if v < 0 => Ok(None),
        Ok(v) => u32::try_from(v).map(Some).map_err(|_| bad_number(path, t)),
        Err(_) => Err(bad_number(path, t)),
    }
}

/// Parses a cache `size` file: bytes with an optional binary suffix (`48K`, `2048K`, `32M`).
/// The kernel prints KiB (`%uK`); M and G are accepted for other producers of the format.
pub fn parse_cache_size(path: &str, text: &str) -> Result<u64, TopologyError> {
    let t = text.trim();
    let bad = || TopologyError::BadSize {
        path: path.to_string(),
        text: t.to_string(),
    };
    let (digits, multiplier) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 1u64 << 10),
        Some((i, 'M' | 'm')) => (&t[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    // `u64::from_str` accepts a leading '+'; the kernel never writes one, so refuse it.
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(multiplier))
        .ok_or_else(bad)
}

/// Parses a cache `type` file.
pub fn parse_cache_kind(path: &str, text: &str) -> Result<CacheKind, TopologyError> {
    match text.trim() {
        "Data" => Ok(CacheKind::Data),
        "Instruction" => Ok(CacheKind::Instruction),
        "Unified" => Ok(CacheKind::Unified),
        other => Err(TopologyError::BadCacheType {
            path: path.to_string(),
            text: other.to_string(),
        }),
    }
}

fn bad_number(path: &str, text: &str) -> TopologyError {
    TopologyError::BadNumber {
        path: path.to_string(),
        text: text.to_string(),
    }
}

fn parse_list(path: &str, text: &str) -> Result<Vec<u32>, TopologyError> {
    parse_cpu_list(text).map_err(|source| TopologyError::BadCpuList {
        path: path.to_string(),
        source,
    })
}

fn parse_u32(path: &str, text: &str) -> Result<u32, TopologyError> {
    let t = text.trim();
    t.parse().map_err(|_| bad_number(path, t))
}

/// Reads a file that may legitimately be absent: `None` and no note when it does not exist
/// (absence is how sysfs says "not on this machine"), `None` and a note for any other failure.
pub(crate) fn read_present(root: &HostRoot, path: &str, notes: &mut Vec<String>) -> Option<String> {
    match root.read(path) {
        Ok(text) => Some(text),
        Err(err) if err.source.kind() == ErrorKind::NotFound => None,
        Err(err) => {
            notes.push(err.to_string());
            None
        }
    }
}

/// The entry names of a directory below the root, sorted; `Err` if it cannot be listed.
pub(crate) fn list_dir(root: &HostRoot, path: &str) -> std::io::Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(root.resolve(path))?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    Ok(names)
}

/// Parses `T` from an optional file, noting a parse failure and giving `None`.
fn parsed<T>(
    root: &HostRoot,
    path: &str,
    notes: &mut Vec<String>,
    parse: impl FnOnce(&str, &str) -> Result<T, TopologyError>,
) -> Option<T> {
    let text = read_present(root, path, notes)?;
    match parse(path, &text) {
        Ok(v) => Some(v),
        Err(err) => {
            notes.push(err.to_string());
            None
        }
    }
}

/// The numeric suffix of `prefix<N>` entries (`node0`, `index3`), ascending.
fn numbered(names: &[String], prefix: &str) -> Vec<u32> {
    let mut ids: Vec<u32> = names
        .iter()
        .filter_map(|n| n.strip_prefix(prefix)?.parse().ok())
        .collect();
    ids.sort_unstable();
    ids
}

const CPU_DIR: &str = "/sys/devices/system/cpu";
const NODE_DIR: &str = "/sys/devices/system/node";

/// Reads the topology of the `online` CPUs below `root`. Never fails: the second value has one
/// line per file that could not be read or parsed. Files a machine normally lacks (die_id on old
/// kernels, the node directory without NUMA) are simply `None`/empty.
pub fn read_topology(root: &HostRoot, online: &[u32]) -> (Topology, Vec<String>) {
    let mut notes = Vec::new();
    let nodes = read_nodes(root, &mut notes);
    let mut cpus = Vec::with_capacity(online.len());
    let mut caches: Vec<Cache> = Vec::new();
    for &cpu in online {
        cpus.push(read_cpu(root, cpu, &nodes, &mut notes));
        for cache in read_caches(root, cpu, &mut notes) {
            // Every sharing CPU lists the same cache; the sharing set plus level and kind
            // identifies it (the `id` file was rejected as the key: older kernels lack it).
            let seen = caches.iter().any(|c| {
                c.level == cache.level && c.kind == cache.kind && c.shared_cpus == cache.shared_cpus
            });
            if !seen {
                caches.push(cache);
            }
        }
    }
    caches.sort_by(|a, b| {
        (a.level, &a.kind, a.shared_cpus.first()).cmp(&(b.level, &b.kind, b.shared_cpus.first()))
    });
    (
        Topology {
            cpus,
            nodes,
            caches,
        },
        notes,
    )
}

fn read_nodes(root: &HostRoot, notes: &mut Vec<String>) -> Vec<NumaNode> {
    let names = match list_dir(root, NODE_DIR) {
        Ok(names) => names,
        Err(err) if err.kind() == ErrorKind::NotFound => return Vec::new(), // no CONFIG_NUMA
        Err(err) => {
            notes.push(format!("cannot list {NODE_DIR}: {err}"));
            return Vec::new();
        }
    };
    numbered(&names, "node")
        .into_iter()
        .map(|id| {
            let path = format!("{NODE_DIR}/node{id}/cpulist");
            let cpus = parsed(root, &path, notes, parse_list).unwrap_or_default();
            NumaNode { id, cpus }
        })
        .collect()
}

fn read_cpu(root: &HostRoot, cpu: u32, nodes: &[NumaNode], notes: &mut Vec<String>) -> CpuTopology {
    let dir = format!("{CPU_DIR}/cpu{cpu}");
    let topo = format!("{dir}/topology");
    let id = |name: &str, notes: &mut Vec<String>| {
        parsed(root, &format!("{topo}/{name}"), notes, parse_topology_id).flatten()
    };
    let package_id = id("physical_package_id", notes);
    let core_id = id("core_id", notes);
    let die_id = id("die_id", notes);
    if package_id.is_none() && core_id.is_none() && !root.resolve(&topo).is_dir() {
        notes.push(format!(
            "{topo}: missing, so CPU {cpu}'s package and core are unknown"
        ));
    }
    let list = |name: &str, notes: &mut Vec<String>| {
        parsed(root, &format!("{topo}/{name}"), notes, parse_list)
    };
    let thread_siblings = list("thread_siblings_list", notes).unwrap_or_default();
    // package_cpus_list replaced core_siblings_list in 5.x; both name the package's CPUs.
    let package_cpus = match list("package_cpus_list", notes) {
        Some(cpus) => cpus,
        None => list("core_siblings_list", notes).unwrap_or_default(),
    };
    // The kernel links cpuN/nodeM for the CPU's node; the node cpulists are the fallback for
    // trees where the links are missing.
    let linked = list_dir(root, &dir)
        .ok()
        .and_then(|names| numbered(&names, "node").first().copied());
    let numa_node = linked.or_else(|| nodes.iter().find(|n| n.cpus.contains(&cpu)).map(|n| n.id));
    CpuTopology {
        cpu,
        package_id,
        core_id,
        die_id,
        thread_siblings,
        package_cpus,
        numa_node,
    }
}

fn read_caches(root: &HostRoot, cpu: u32, notes: &mut Vec<String>) -> Vec<Cache> {
    let dir = format!("{CPU_DIR}/cpu{cpu}/cache");
    let names = match list_dir(root, &dir) {
        Ok(names) => names,
        // Some guests and Arm boards expose no cache information at all.
        Err(err) if err.kind() == ErrorKind::NotFound => return Vec::new(),
        Err(err) => {
            notes.push(format!("cannot list {dir}: {err}"));
            return Vec::new();
        }
    };
    let mut caches = Vec::new();
    for index in numbered(&names, "index") {
        let base = format!("{dir}/index{index}");
        let level = parsed(root, &format!("{base}/level"), notes, parse_u32)
            .and_then(|l| u8::try_from(l).ok());
        let kind = parsed(root, &format!("{base}/type"), notes, parse_cache_kind);
        let (Some(level), Some(kind)) = (level, kind) else {
            // Without level and kind the cache cannot be told apart from the others.
            notes.push(format!("{base}: no usable level or type, cache skipped"));
            continue;
        };
        caches.push(Cache {
            level,
            kind,
            size_bytes: parsed(root, &format!("{base}/size"), notes, parse_cache_size),
            ways_of_associativity: parsed(
                root,
                &format!("{base}/ways_of_associativity"),
                notes,
                parse_u32,
            ),
            line_size_bytes: parsed(
                root,
                &format!("{base}/coherency_line_size"),
                notes,
                parse_u32,
            ),
            shared_cpus: parsed(root, &format!("{base}/shared_cpu_list"), notes, parse_list)
                .unwrap_or_else(|| vec![cpu]),
        });
    }
    caches
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_fixtures::{dev_vm, read_fixture};

    const CACHE0: &str = "kvm-2vcpu-xeon/sys/devices/system/cpu/cpu0/cache";

    #[test]
    fn parses_the_captured_cache_sizes() {
        let sizes: Vec<u64> = (0..4)
            .map(|i| parse_cache_size("size", &read_fixture(&format!("{CACHE0}/index{i}/size"))))
            .collect::<Result<_, _>>()
            .unwrap();
        // 48K L1d, 32K L1i, 2048K L2, 266240K (260 MiB) L3 on this Xeon guest.
        assert_eq!(sizes, vec![48 << 10, 32 << 10, 2 << 20, 260 << 20]);
        assert_eq!(parse_cache_size("size", "32M\n").unwrap(), 32 << 20);
        assert_eq!(parse_cache_size("size", "1024K").unwrap(), 1 << 20);
    }

    #[test]
    fn refuses_bad_cache_sizes_without_panicking() {
        for bad in [
            "",
            "K",
            "-4K",
            "+4K",
            "4X",
            "4 K",
            "99999999999999999999K",
            "18014398509481984K",
        ] {
            let err = parse_cache_size("/sys/x/size", bad).unwrap_err();
            assert!(err.to_string().contains("/sys/x/size"), "{err}");
        }
    }

    #[test]
    fn parses_ids_and_kinds() {
        let cpu1 = "kvm-2vcpu-xeon/sys/devices/system/cpu/cpu1/topology";
        let core = read_fixture(&format!("{cpu1}/core_id"));
        assert_eq!(parse_topology_id("core_id", &core).unwrap(), Some(1));
        assert_eq!(parse_topology_id("p", "-1\n").unwrap(), None);
        assert!(parse_topology_id("p", "x").is_err());
        assert!(parse_topology_id("p", "99999999999").is_err());
        let kind = read_fixture(&format!("{CACHE0}/index1/type"));
        assert_eq!(
            parse_cache_kind("type", &kind).unwrap(),
            CacheKind::Instruction
        );
        assert!(parse_cache_kind("type", "Trace").is_err());
    }

    #[test]
    fn reads_the_development_vm() {
        let (topo, notes) = read_topology(&dev_vm(), &[0, 1]);
        assert_eq!(notes, Vec::<String>::new());
        assert_eq!(topo.sockets(), 1);
        assert_eq!(topo.cores(), 2, "2 vCPUs, no SMT: {:?}", topo.cpus);
        assert_eq!(topo.smt_siblings_of(0), Vec::<u32>::new());
        assert_eq!(topo.node_of(1), Some(0));
        assert_eq!(topo.node_of(7), None);
        assert_eq!(
            topo.nodes,
            vec![NumaNode {
                id: 0,
                cpus: vec![0, 1]
            }]
        );
        let cpu1 = &topo.cpus[1];
        assert_eq!(
            (cpu1.package_id, cpu1.core_id, cpu1.die_id),
            (Some(0), Some(1), Some(0))
        );
        assert_eq!(cpu1.thread_siblings, vec![1]);
        assert_eq!(cpu1.package_cpus, vec![0, 1]);
        // Per-CPU L1d, L1i, L2 for each of 2 CPUs, plus one shared L3: 7 distinct caches.
        assert_eq!(topo.caches.len(), 7, "{:?}", topo.caches);
        let l3 = topo.caches.last().unwrap();
        assert_eq!((l3.level, &l3.kind), (3, &CacheKind::Unified));
        assert_eq!(l3.shared_cpus, vec![0, 1]);
        assert_eq!(l3.size_bytes, Some(266_240 * 1024));
        assert_eq!(l3.ways_of_associativity, Some(20));
        assert_eq!(l3.line_size_bytes, Some(64));
    }

    #[test]
    fn an_offline_or_missing_cpu_is_noted_not_invented() {
        let (topo, notes) = read_topology(&dev_vm(), &[5]);
        assert_eq!(topo.cpus[0].package_id, None);
        assert_eq!(topo.cpus[0].numa_node, None);
        assert!(
            notes.iter().any(|n| n.contains("cpu5/topology")),
            "{notes:?}"
        );
    }

    #[test]
    fn a_missing_root_gives_an_empty_topology() {
        let (topo, _) = read_topology(&HostRoot::at("/nonexistent/quietbench-root"), &[]);
        assert_eq!(topo, Topology::default());
    }

    #[test]
    fn reads_this_machine() {
        let (topo, notes) = read_topology(&HostRoot::live(), &[0]);
        assert!(topo.cpus[0].package_id.is_some(), "{notes:?}");
    }
}
