//! Where interrupts land: /proc/interrupts, /proc/irq/N/*_affinity_list and a PCI device's
//! `msi_irqs` directory.
//!
//! Placement needs the CPUs that take NIC queue interrupts (network probes go there, quiet probes
//! stay away), and the noise monitor needs how many interrupts hit the measured CPUs during a
//! run. Affinity files say where the kernel *may* deliver an IRQ; only count deltas between two
//! /proc/interrupts samples say where it *did*, so both are here.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io::ErrorKind;

use serde::Serialize;

use crate::proc_table::{cpu_table, parse_digits, split_counts};
use crate::{CpuListError, HostRoot, ReadError, parse_cpu_list};

/// The errors of this module's parsers and delta helpers, shared with [`crate::procstat`]:
/// both read per-CPU /proc tables (see `proc_table`).
pub use crate::proc_table::{DeltaError, ParseError};

const INTERRUPTS: &str = "/proc/interrupts";

/// A reader in this module failed.
#[derive(Debug, thiserror::Error)]
pub enum InterruptsError {
    /// The file could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The file was read but is malformed.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// An affinity file does not hold a CPU list.
    #[error("{path}: {source}")]
    CpuList {
        /// The machine path of the affinity file.
        path: String,
        /// Why the list was rejected.
        #[source]
        source: CpuListError,
    },
    /// A directory could not be listed.
    #[error("cannot list {path}: {source}")]
    ListDir {
        /// The machine path of the directory.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// The first column of a /proc/interrupts line.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum IrqId {
    /// A numbered IRQ (a device's or a legacy line); its settings are under /proc/irq/N.
    Number(u32),
    /// An architecture counter such as `LOC`, `NMI`, `RES`, `ERR` (x86) or `IPI0` (arm64).
    Named(String),
}

impl fmt::Display for IrqId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IrqId::Number(n) => write!(f, "{n}"),
            IrqId::Named(name) => f.write_str(name),
        }
    }
}

/// One line of /proc/interrupts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InterruptLine {
    /// The IRQ number or counter name.
    pub id: IrqId,
    /// Counts since boot, one per column of [`InterruptTable::cpus`] in the same order. Global
    /// counters (x86 `ERR` and `MIS`) have a single count that belongs to no CPU; see
    /// [`InterruptLine::is_per_cpu`].
    pub counts: Vec<u64>,
    /// The interrupt chip (`IO-APIC`, `PCI-MSI`, `PCI-MSIX-0000:00:03.0`, `GICv3`, …); `None` for
    /// named counters and for IRQs the kernel prints with chip `None`.
    pub chip: Option<String>,
    /// The hardware IRQ number within the chip's domain (`81921` in `PCI-MSI 81921-edge`);
    /// `None` where the kernel prints none (no domain, named counters, pre-3.x kernels).
    pub hwirq: Option<String>,
    /// The handlers' names (`eth0-Tx-Rx-0`, `virtio2-input.0`); several for a shared IRQ.
    /// Empty for named counters and for IRQs with no handler.
    pub actions: Vec<String>,
    /// Everything after the counts, whitespace-trimmed but otherwise as the kernel printed it,
    /// so that nothing the split above gets wrong is lost.
    pub text: String,
}

impl InterruptLine {
    /// Whether the counts are one per CPU column (`ncpus` is `InterruptTable::cpus.len()`).
    /// False for global counters such as `ERR`, whose single count cannot be placed on a CPU.
    pub fn is_per_cpu(&self, ncpus: usize) -> bool {
        self.counts.len() == ncpus
    }

    /// The count summed over all columns.
    pub fn total(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, &c| a.saturating_add(c))
    }
}

/// A parsed /proc/interrupts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InterruptTable {
    /// The CPU ids of the header's columns, ascending (`CPU0 CPU2` gives `[0, 2]`: the kernel
    /// prints online CPUs only, so offline ones leave gaps).
    pub cpus: Vec<u32>,
    /// The lines in file order.
    pub lines: Vec<InterruptLine>,
}

impl InterruptTable {
    /// The line for `id`, if the file has one.
    pub fn line(&self, id: &IrqId) -> Option<&InterruptLine> {
        self.lines.iter().find(|l| &l.id == id)
    }
}

/// Parses /proc/interrupts. Lines with fewer counts than CPU columns (x86 `ERR` and `MIS`) are
/// kept with the counts they have.
pub fn parse_interrupts(text: &str) -> Result<InterruptTable, ParseError> {
    let line_err = |line: usize, reason: String| ParseError::Line {
        file: INTERRUPTS,
        line,
        reason,
    };
    let (cpus, numbered) = cpu_table(INTERRUPTS, text)?;

    let mut lines = Vec::new();
    let mut seen = HashSet::new();
    for (no, line) in numbered {
        let parsed = parse_interrupt_line(line, cpus.len()).map_err(|r| line_err(no, r))?;
        // Deltas pair lines by id; a repeated id would make them ambiguous.
        if !seen.insert(parsed.id.clone()) {
            return Err(line_err(no, format!("IRQ '{}' appears twice", parsed.id)));
        }
        lines.push(parsed);
    }
    Ok(InterruptTable { cpus, lines })
}

fn parse_interrupt_line(line: &str, ncpus: usize) -> Result<InterruptLine, String> {
    let (id_text, rest) = line
        .split_once(':')
        .ok_or_else(|| format!("no ':' after the IRQ id in '{}'", line.trim()))?;
    let id_text = id_text.trim();
    let id = if id_text.is_empty() {
        return Err(format!("empty IRQ id in '{}'", line.trim()));
    } else if id_text.bytes().all(|b| b.is_ascii_digit()) {
        IrqId::Number(
            id_text
                .parse()
                .map_err(|_| format!("IRQ number '{id_text}' is too large"))?,
        )
    } else if id_text.contains(char::is_whitespace) {
        return Err(format!("IRQ id '{id_text}' contains spaces"));
    } else {
        IrqId::Named(id_text.to_string())
    };
    let (counts, text) = split_counts(rest, ncpus)?;
    if counts.is_empty() {
        return Err(format!("IRQ '{id}' has no counts"));
    }
    let (chip, hwirq, actions) = match id {
        IrqId::Number(_) => split_irq_text(text),
        // Named counters carry a description ("Local timer interrupts"), not chip and handlers.
        IrqId::Named(_) => (None, None, Vec::new()),
    };
    Ok(InterruptLine {
        id,
        counts,
        chip,
        hwirq,
        actions,
        text: text.to_string(),
    })
}

/// Flow handler suffixes that pre-3.x kernels glued to the chip name (`IO-APIC-edge`,
/// `PCI-MSI-edge`): such lines have no separate hwirq column.
const OLD_FLOW_SUFFIXES: [&str; 5] = ["-edge", "-fasteoi", "-level", "-event", "-virq"];

/// Splits the text after the counts of a numbered line into chip, hwirq and handler names.
///
/// The kernel (kernel/irq/proc.c) prints: the chip name, the hwirq when the IRQ has a domain,
/// `Level`/`Edge` on architectures with GENERIC_IRQ_SHOW_LEVEL (arm64), `-<flow>` when the
/// flow handler is named, then two spaces and the handler names joined by ", ". Handler names
/// may contain spaces, so they are cut from the text rather than re-joined from tokens.
fn split_irq_text(text: &str) -> (Option<String>, Option<String>, Vec<String>) {
    let tokens = token_spans(text);
    let Some(&(_, chip)) = tokens.first() else {
        return (None, None, Vec::new());
    };
    let mut next = 1;
    let mut hwirq = None;
    let old_format = OLD_FLOW_SUFFIXES.iter().any(|s| chip.ends_with(s));
    if !old_format && let Some(&(_, token)) = tokens.get(1) {
        let (digits, flow) = match token.split_once('-') {
            Some((d, f)) => (d, Some(f)),
            None => (token, None),
        };
        let digits_ok = digits.is_empty() || digits.bytes().all(|b| b.is_ascii_digit());
        if digits_ok
            && (flow.is_some_and(|f| !f.is_empty()) || flow.is_none() && !digits.is_empty())
        {
            if !digits.is_empty() {
                hwirq = Some(digits.to_string());
            }
            next = 2;
            if flow.is_none() {
                // arm64: "GICv3  27 Level     arch_timer", optionally followed by "-<flow>".
                if tokens
                    .get(next)
                    .is_some_and(|&(_, t)| t == "Level" || t == "Edge")
                {
                    next += 1;
                }
                if tokens
                    .get(next)
                    .is_some_and(|&(_, t)| t.len() > 1 && t.starts_with('-'))
                {
                    next += 1;
                }
            }
        }
    }
    let actions = match tokens.get(next) {
        Some(&(start, _)) => text[start..]
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_string)
            .collect(),
        None => Vec::new(),
    };
    let chip = (chip != "None").then(|| chip.to_string());
    (chip, hwirq, actions)
}

/// Whitespace-separated tokens with their byte offsets.
fn token_spans(text: &str) -> Vec<(usize, &str)> {
    let mut spans = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        match (c.is_whitespace(), start) {
            (true, Some(s)) => {
                spans.push((s, &text[s..i]));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        spans.push((s, &text[s..]));
    }
    spans
}

/// Reads and parses /proc/interrupts below `root`.
pub fn read_interrupts(root: &HostRoot) -> Result<InterruptTable, InterruptsError> {
    Ok(parse_interrupts(&root.read(INTERRUPTS)?)?)
}

/// Where the kernel may and does deliver one IRQ.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IrqAffinity {
    /// `/proc/irq/N/smp_affinity_list`: the CPUs the IRQ may be delivered to.
    pub smp_affinity_list: Vec<u32>,
    /// `/proc/irq/N/effective_affinity_list`: the CPUs the hardware is actually programmed for
    /// (often one CPU out of the allowed set). `None` where the kernel lacks the file (before
    /// 4.13, or without GENERIC_IRQ_EFFECTIVE_AFF_MASK).
    pub effective_affinity_list: Option<Vec<u32>>,
}

/// Reads the affinity files of IRQ `irq` below `root`.
pub fn read_irq_affinity(root: &HostRoot, irq: u32) -> Result<IrqAffinity, InterruptsError> {
    let list = |path: String, text: String| {
        parse_cpu_list(&text).map_err(|source| InterruptsError::CpuList { path, source })
    };
    let smp_path = format!("/proc/irq/{irq}/smp_affinity_list");
    let smp_affinity_list = list(smp_path.clone(), root.read(&smp_path)?)?;
    let eff_path = format!("/proc/irq/{irq}/effective_affinity_list");
    let effective_affinity_list = match root.read(&eff_path) {
        Ok(text) => Some(list(eff_path, text)?),
        // Absent on older kernels: unknown, not empty.
        Err(err) if err.source.kind() == ErrorKind::NotFound => None,
        Err(err) => return Err(err.into()),
    };
    Ok(IrqAffinity {
        smp_affinity_list,
        effective_affinity_list,
    })
}

/// The MSI/MSI-X IRQ numbers of a PCI device: the numeric names in `<device_dir>/msi_irqs`,
/// ascending. `device_dir` is a machine path such as `/sys/devices/pci0000:00/0000:00:03.0`.
/// A device whose directory exists but has no `msi_irqs` uses legacy INTx (or MSI is off) and
/// gives an empty list; a missing `device_dir` is an error.
pub fn read_msi_irqs(root: &HostRoot, device_dir: &str) -> Result<Vec<u32>, InterruptsError> {
    let dir = format!("{}/msi_irqs", device_dir.trim_end_matches('/'));
    let list_err = |path: &str, source| InterruptsError::ListDir {
        path: path.to_string(),
        source,
    };
    let entries = match std::fs::read_dir(root.resolve(&dir)) {
        Ok(entries) => entries,
        Err(err) if err.kind() == ErrorKind::NotFound => {
            return match std::fs::metadata(root.resolve(device_dir)) {
                Ok(_) => Ok(Vec::new()),
                Err(source) => Err(list_err(device_dir, source)),
            };
        }
        Err(source) => return Err(list_err(&dir, source)),
    };
    let mut irqs = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| list_err(&dir, source))?;
        // Only numbered entries are IRQs; skip anything else rather than fail on it.
        if let Some(irq) = entry.file_name().to_str().and_then(parse_digits::<u32>) {
            irqs.push(irq);
        }
    }
    irqs.sort_unstable();
    Ok(irqs)
}

/// Which traffic a NIC queue interrupt serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum QueueDirection {
    /// Receive only.
    Rx,
    /// Transmit only.
    Tx,
    /// A combined vector serving one receive and one transmit queue.
    TxRx,
    /// A queue vector whose name does not say its direction (gve notification blocks).
    Other,
}

/// A NIC queue, as recognised from an interrupt handler's name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct NicQueueName {
    /// What the driver put in the name: a network interface (`eth0`, `ens5`), a virtio device
    /// (`virtio2`, the directory under the NIC's PCI device in sysfs), or a PCI address
    /// (`0000:00:05.0`, for mlx5, gve and mana, which name vectors after the PCI function).
    pub device: String,
    /// The queue or vector index from the name.
    pub queue: Option<u32>,
    /// Which traffic the queue serves.
    pub direction: QueueDirection,
}

/// Recognises an interrupt handler name as a NIC queue. Returns `None` for everything else,
/// including NIC management and control vectors (`ena-mgmnt@pci:…`, `gve-mgmnt@pci:…`,
/// `mlx5_async0@pci:…`, `virtio2-config`): they fire rarely and carry no traffic, so a CPU
/// that takes only those is not an RSS CPU.
///
/// Names come from these drivers' `snprintf` formats:
/// - ENA (EC2): `<ifname>-Tx-Rx-<q>` → TxRx.
/// - virtio-net: `virtio<N>-input.<q>` → Rx, `virtio<N>-output.<q>` → Tx (device `virtio<N>`).
///   The `.q` suffix is required: virtio-console and virtio-rng name queues plain `input` and
///   `output`, and vsock uses `rx`/`tx`, so those are not NICs. When virtio-pci cannot get one
///   vector per queue it shares one named `virtio<N>-virtqueues`, which names no queue: `None`.
/// - mlx5: `mlx5_comp<q>@pci:<pci addr>` → TxRx (a completion vector serves a channel's send and
///   receive queues). Old kernels' `mlx5_comp<q>` without the address names no device: `None`.
/// - gve (GCP): `gve-ntfy-blk<b>@pci:<pci addr>` → Other: blocks below half the count serve
///   transmit, the rest receive, which the name alone does not tell.
/// - mana (Azure): `mana_q<q>@pci:<pci addr>` → TxRx. Azure's older netvsc path interrupts
///   arrive as `HYP` and name no queue.
/// - i40e, ice, iavf: `<driver>-<ifname>-TxRx-<q>` (also `-rx-`/`-tx-`); the driver prefix is
///   dropped from `device`.
/// - ixgbe, ixgbevf, igb, bnxt_en: `<ifname>-TxRx-<q>`, `<ifname>-rx-<q>`, `<ifname>-tx-<q>`.
/// - Xen netfront (older EC2 Xen instances): `<ifname>-q<q>-tx`, `<ifname>-q<q>-rx`, or
///   `<ifname>-q<q>` when one event channel serves both.
pub fn classify_nic_queue(action: &str) -> Option<NicQueueName> {
    let action = action.trim();
    let named = |device: &str, queue: u32, direction| {
        (!device.is_empty()).then(|| NicQueueName {
            device: device.to_string(),
            queue: Some(queue),
            direction,
        })
    };
    if let Some((name, pci)) = action.split_once("@pci:") {
        let (queue, direction) = if let Some(q) = name.strip_prefix("mlx5_comp") {
            (q, QueueDirection::TxRx)
        } else if let Some(q) = name.strip_prefix("gve-ntfy-blk") {
            (q, QueueDirection::Other)
        } else if let Some(q) = name.strip_prefix("mana_q") {
            (q, QueueDirection::TxRx)
        } else {
            return None;
        };
        return named(pci, parse_digits(queue)?, direction);
    }
    if let Some(rest) = action.strip_prefix("virtio") {
        let (number, vq) = rest.split_once('-')?;
        parse_digits::<u32>(number)?;
        let device = &action[..action.len() - vq.len() - 1];
        let (direction, q) = if let Some(q) = vq.strip_prefix("input.") {
            (QueueDirection::Rx, q)
        } else if let Some(q) = vq.strip_prefix("output.") {
            (QueueDirection::Tx, q)
        } else {
            return None;
        };
        return named(device, parse_digits(q)?, direction);
    }
    // "<prefix><sep><q>" with the queue number last.
    let (head, q) = action.rsplit_once('-')?;
    if let Some(queue) = parse_digits::<u32>(q) {
        for (sep, direction) in [
            ("-Tx-Rx", QueueDirection::TxRx),
            ("-TxRx", QueueDirection::TxRx),
            ("-rx", QueueDirection::Rx),
            ("-tx", QueueDirection::Tx),
        ] {
            if let Some(device) = head.strip_suffix(sep) {
                return named(strip_driver_prefix(device), queue, direction);
            }
        }
        return None;
    }
    // Xen netfront: the queue number sits before the direction, or ends the name.
    let (device, q, direction) = match q {
        "tx" | "rx" => {
            let (device, qq) = head.rsplit_once('-')?;
            let direction = if q == "tx" {
                QueueDirection::Tx
            } else {
                QueueDirection::Rx
            };
            (device, qq, direction)
        }
        _ => (head, q, QueueDirection::TxRx),
    };
    named(device, parse_digits(q.strip_prefix('q')?)?, direction)
}

/// Intel's i40e, ice and iavf prefix the interface name with the driver's.
fn strip_driver_prefix(device: &str) -> &str {
    for prefix in ["i40e-", "ice-", "iavf-"] {
        if let Some(rest) = device.strip_prefix(prefix)
            && !rest.is_empty()
        {
            return rest;
        }
    }
    device
}

/// A numbered IRQ that serves a NIC queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NicQueueIrq {
    /// The IRQ number (its settings are under /proc/irq/N).
    pub irq: u32,
    /// The queue its handler name describes.
    pub queue: NicQueueName,
}

/// Every NIC queue IRQ in the table, in file order (one entry per recognised handler name).
pub fn nic_queue_irqs(table: &InterruptTable) -> Vec<NicQueueIrq> {
    let mut found = Vec::new();
    for line in &table.lines {
        let IrqId::Number(irq) = line.id else {
            continue;
        };
        for action in &line.actions {
            if let Some(queue) = classify_nic_queue(action) {
                found.push(NicQueueIrq { irq, queue });
            }
        }
    }
    found
}

/// How many times one IRQ fired between two samples.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IrqDelta {
    /// The IRQ number or counter name.
    pub id: IrqId,
    /// `(cpu, interrupts)` for each CPU where the count grew, ascending by CPU.
    pub per_cpu: Vec<(u32, u64)>,
    /// Growth of a count that belongs to no CPU (x86 `ERR`, `MIS`, or a line with fewer counts
    /// than CPU columns); 0 for per-CPU lines.
    pub unattributed: u64,
}

/// What fired between `before` and `after`: one entry per line whose count grew, in `after`'s
/// order. A line missing from `before` was allocated in between and counts from zero (the kernel
/// starts a new IRQ's counts at zero); a line missing from `after` was freed and is left out.
/// A count that went backwards (the IRQ number was freed and reused) contributes zero rather
/// than a wrapped value: a reset cannot be told from a 32-bit wrap, and resets are the common
/// case.
pub fn interrupt_deltas(
    before: &InterruptTable,
    after: &InterruptTable,
) -> Result<Vec<IrqDelta>, DeltaError> {
    if before.cpus != after.cpus {
        return Err(DeltaError::CpusChanged {
            before: before.cpus.clone(),
            after: after.cpus.clone(),
        });
    }
    let ncpus = after.cpus.len();
    let earlier: HashMap<&IrqId, &InterruptLine> =
        before.lines.iter().map(|l| (&l.id, l)).collect();
    let mut deltas = Vec::new();
    for line in &after.lines {
        let old = earlier.get(&line.id);
        let grown = |i: usize, now: u64| {
            let then = old.and_then(|o| o.counts.get(i)).copied().unwrap_or(0);
            now.saturating_sub(then)
        };
        let mut delta = IrqDelta {
            id: line.id.clone(),
            per_cpu: Vec::new(),
            unattributed: 0,
        };
        // A line whose shape changed between samples (per-CPU in one, not the other) cannot be
        // paired column by column; its growth is counted as unattributed.
        let per_cpu = line.is_per_cpu(ncpus) && old.is_none_or(|o| o.is_per_cpu(ncpus));
        for (i, &now) in line.counts.iter().enumerate() {
            let d = grown(i, now);
            if d == 0 {
                continue;
            }
            if per_cpu {
                delta.per_cpu.push((after.cpus[i], d));
            } else {
                delta.unattributed = delta.unattributed.saturating_add(d);
            }
        }
        if !delta.per_cpu.is_empty() || delta.unattributed > 0 {
            deltas.push(delta);
        }
    }
    Ok(deltas)
}

/// The CPUs that serviced the IRQ in `delta`, ascending.
pub fn servicing_cpus(delta: &IrqDelta) -> Vec<u32> {
    delta.per_cpu.iter().map(|&(cpu, _)| cpu).collect()
}

/// Interrupts of every kind (device IRQs and named counters such as `LOC`, `RES`, `CAL`) that
/// landed on `cpus` between the two samples. Global counters (`ERR`, `MIS`) are left out: they
/// belong to no CPU.
pub fn interrupts_on_cpus(
    before: &InterruptTable,
    after: &InterruptTable,
    cpus: &[u32],
) -> Result<u64, DeltaError> {
    Ok(interrupt_deltas(before, after)?
        .iter()
        .flat_map(|d| d.per_cpu.iter())
        .filter(|(cpu, _)| cpus.contains(cpu))
        .fold(0u64, |sum, &(_, n)| sum.saturating_add(n)))
}

#[cfg(test)]
mod tests;
