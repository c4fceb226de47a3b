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

use crate::{CpuListError, HostRoot, ReadError, parse_cpu_list};

const INTERRUPTS: &str = "/proc/interrupts";

/// A /proc-style file that does not have the expected shape. Shared by the parsers of this
/// module and of [`crate::procstat`], which read the same kind of column tables.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// One line is malformed.
    #[error("{file} line {line}: {reason}")]
    Line {
        /// The machine path of the file, e.g. `/proc/interrupts`.
        file: &'static str,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it, quoting the offending text.
        reason: String,
    },
    /// The file as a whole lacks something (empty, or a required line is missing).
    #[error("{file}: {reason}")]
    File {
        /// The machine path of the file.
        file: &'static str,
        /// What is missing.
        reason: String,
    },
}

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

/// Two samples cannot be compared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeltaError {
    /// CPUs went on- or offline between the samples. A CPU's counters survive going offline, so
    /// a column that appears or disappears has no meaningful delta: take a fresh `before`.
    #[error(
        "the online CPUs changed between the two samples ({before:?} before, {after:?} after); take both samples again"
    )]
    CpusChanged {
        /// CPU columns of the first sample.
        before: Vec<u32>,
        /// CPU columns of the second sample.
        after: Vec<u32>,
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

/// Parses the header of /proc/interrupts or /proc/softirqs (`CPU0 CPU1 …`) into CPU ids.
/// The reason string says what is wrong; callers add file and line.
pub(crate) fn parse_cpu_header(line: &str) -> Result<Vec<u32>, String> {
    let mut cpus: Vec<u32> = Vec::new();
    for token in line.split_whitespace() {
        let cpu = token
            .strip_prefix("CPU")
            .and_then(parse_digits::<u32>)
            .ok_or_else(|| {
                format!("expected a header of CPU columns like 'CPU0', found '{token}'")
            })?;
        // The kernel walks the online mask in ascending order; anything else means this is not
        // a header and the columns cannot be trusted.
        if cpus.last().is_some_and(|&last| cpu <= last) {
            return Err(format!("CPU columns are not ascending at '{token}'"));
        }
        cpus.push(cpu);
    }
    if cpus.is_empty() {
        return Err("the header names no CPU columns".to_string());
    }
    Ok(cpus)
}

/// Parses a number made of ASCII digits only. `str::parse` alone would also take `+5`, which
/// is never a count and would hide a misaligned column.
pub(crate) fn parse_digits<T: std::str::FromStr>(token: &str) -> Option<T> {
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    token.parse().ok()
}

/// Splits up to `max` leading counts off `rest`. Returns the counts and the remaining text,
/// or a reason when a digit-only token overflows u64.
pub(crate) fn split_counts(rest: &str, max: usize) -> Result<(Vec<u64>, &str), String> {
    let mut counts = Vec::with_capacity(max);
    let mut remaining = rest;
    while counts.len() < max {
        let trimmed = remaining.trim_start();
        let end = trimmed.find(char::is_whitespace).unwrap_or(trimmed.len());
        let token = &trimmed[..end];
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
            break;
        }
        let count = token
            .parse::<u64>()
            .map_err(|_| format!("count '{token}' does not fit in 64 bits"))?;
        counts.push(count);
        remaining = &trimmed[end..];
    }
    Ok((counts, remaining.trim()))
}

/// The CPU columns of a per-CPU table (/proc/interrupts, /proc/softirqs) and its other
/// non-empty lines with their line numbers (from 1).
pub(crate) fn cpu_table<'a>(
    file: &'static str,
    text: &'a str,
) -> Result<(Vec<u32>, impl Iterator<Item = (usize, &'a str)>), ParseError> {
    let mut numbered = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((header_no, header)) = numbered.next() else {
        return Err(ParseError::File {
            file,
            reason: "the file is empty; expected a header like 'CPU0 CPU1'".to_string(),
        });
    };
    let cpus = parse_cpu_header(header).map_err(|reason| ParseError::Line {
        file,
        line: header_no,
        reason,
    })?;
    Ok((cpus, numbered))
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
mod tests {
    use super::*;

    const KVM: &str = include_str!("../tests/fixtures/kvm-2vcpu-xeon/proc/interrupts");
    const KVM_T0: &str =
        include_str!("../tests/fixtures/kvm-2vcpu-xeon/proc-samples/interrupts-t0");
    const KVM_T1: &str =
        include_str!("../tests/fixtures/kvm-2vcpu-xeon/proc-samples/interrupts-t1");
    const ENA: &str = include_str!("../tests/fixtures/public/ec2-ena-3nic-4vcpu/proc/interrupts");

    fn fixture(name: &str) -> HostRoot {
        HostRoot::at(
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures").to_string() + "/" + name,
        )
    }

    fn num(n: u32) -> IrqId {
        IrqId::Number(n)
    }

    fn named(s: &str) -> IrqId {
        IrqId::Named(s.to_string())
    }

    #[test]
    fn parses_the_kvm_virtio_file() {
        let t = parse_interrupts(KVM).unwrap();
        assert_eq!(t.cpus, vec![0, 1]);
        let input = t.line(&num(38)).unwrap();
        assert_eq!(input.chip.as_deref(), Some("PCI-MSIX-0000:00:03.0"));
        assert_eq!(input.hwirq.as_deref(), Some("1"));
        assert_eq!(input.actions, vec!["virtio2-input.0"]);
        assert_eq!(input.counts.len(), 2);
        assert_eq!(
            input.text,
            "PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0"
        );
        let ged = t.line(&num(24)).unwrap();
        assert_eq!(ged.chip.as_deref(), Some("IO-APIC"));
        assert_eq!(ged.hwirq.as_deref(), Some("5"));
        assert_eq!(ged.actions, vec!["ACPI:Ged"]);
        let loc = t.line(&named("LOC")).unwrap();
        assert_eq!(loc.counts.len(), 2);
        assert_eq!((loc.chip.clone(), loc.actions.len()), (None, 0));
        assert_eq!(loc.text, "Local timer interrupts");
        let err = t.line(&named("ERR")).unwrap();
        assert_eq!(err.counts, vec![0]);
        assert!(!err.is_per_cpu(t.cpus.len()));
        assert_eq!(err.text, "");
        // Every line of the file is kept.
        let non_empty = KVM.lines().filter(|l| !l.trim().is_empty()).count();
        assert_eq!(t.lines.len(), non_empty - 1);
    }

    #[test]
    fn classifies_only_the_virtio_net_queues_on_the_kvm_file() {
        // virtio2 is the NIC; virtio3 (vsock: "-rx", "-tx") and virtio4 (rng: "-input" without
        // ".N") must not be taken for NIC queues.
        let t = parse_interrupts(KVM).unwrap();
        let queues = nic_queue_irqs(&t);
        assert_eq!(
            queues,
            vec![
                NicQueueIrq {
                    irq: 38,
                    queue: NicQueueName {
                        device: "virtio2".into(),
                        queue: Some(0),
                        direction: QueueDirection::Rx
                    }
                },
                NicQueueIrq {
                    irq: 39,
                    queue: NicQueueName {
                        device: "virtio2".into(),
                        queue: Some(0),
                        direction: QueueDirection::Tx
                    }
                },
            ]
        );
    }

    #[test]
    fn parses_the_ena_file_and_finds_three_nics_with_four_queues() {
        let t = parse_interrupts(ENA).unwrap();
        assert_eq!(t.cpus, vec![0, 1, 2, 3]);
        let l = t.line(&num(28)).unwrap();
        assert_eq!(l.counts, vec![1482671, 0, 0, 35400719]);
        assert_eq!(l.chip.as_deref(), Some("PCI-MSI"));
        assert_eq!(l.hwirq.as_deref(), Some("81921"));
        assert_eq!(l.actions, vec!["eth0-Tx-Rx-0"]);
        assert_eq!(t.line(&named("MIS")).unwrap().counts, vec![0]);

        let queues = nic_queue_irqs(&t);
        assert_eq!(queues.len(), 12, "{queues:?}");
        for nic in ["eth0", "eth1", "eth2"] {
            let mut ids: Vec<u32> = queues
                .iter()
                .filter(|q| q.queue.device == nic)
                .map(|q| {
                    assert_eq!(q.queue.direction, QueueDirection::TxRx);
                    q.queue.queue.unwrap()
                })
                .collect();
            ids.sort_unstable();
            assert_eq!(ids, vec![0, 1, 2, 3], "{nic}");
        }
        // Management vectors and NVMe queues are not NIC queues.
        assert!(
            queues
                .iter()
                .all(|q| ![27, 32, 52, 24, 25].contains(&q.irq))
        );
        assert_eq!(queues[0].irq, 28);
    }

    #[test]
    fn classifies_each_drivers_format() {
        let q = |s: &str| classify_nic_queue(s).map(|n| (n.device, n.queue, n.direction));
        use QueueDirection::*;
        let some = |d: &str, n: u32, dir| Some((d.to_string(), Some(n), dir));
        assert_eq!(q("ens5-Tx-Rx-0"), some("ens5", 0, TxRx));
        assert_eq!(q("eth0-Tx-Rx-3"), some("eth0", 3, TxRx));
        assert_eq!(q("ena-mgmnt@pci:0000:00:05.0"), None);
        assert_eq!(q("virtio2-input.0"), some("virtio2", 0, Rx));
        assert_eq!(q("virtio12-output.7"), some("virtio12", 7, Tx));
        assert_eq!(q("virtio2-config"), None);
        assert_eq!(q("virtio2-virtqueues"), None);
        assert_eq!(q("virtio4-input"), None);
        assert_eq!(q("virtio3-rx"), None);
        assert_eq!(
            q("mlx5_comp3@pci:0000:00:05.0"),
            some("0000:00:05.0", 3, TxRx)
        );
        assert_eq!(q("mlx5_async0@pci:0000:00:05.0"), None);
        assert_eq!(q("eth0-TxRx-0"), some("eth0", 0, TxRx));
        assert_eq!(
            q("gve-ntfy-blk3@pci:0000:00:04.0"),
            some("0000:00:04.0", 3, Other)
        );
        assert_eq!(q("gve-mgmnt@pci:0000:00:04.0"), None);
        assert_eq!(q("mana_q2@pci:7870:00:00.0"), some("7870:00:00.0", 2, TxRx));
        assert_eq!(q("mana_hwc@pci:7870:00:00.0"), None);
        assert_eq!(q("i40e-eth0-TxRx-3"), some("eth0", 3, TxRx));
        assert_eq!(q("ice-eth0-TxRx-3"), some("eth0", 3, TxRx));
        assert_eq!(q("iavf-ens6-rx-1"), some("ens6", 1, Rx));
        assert_eq!(q("eth0-rx-0"), some("eth0", 0, Rx));
        assert_eq!(q("eth0-tx-0"), some("eth0", 0, Tx));
        assert_eq!(q("eth0-q1-tx"), some("eth0", 1, Tx));
        assert_eq!(q("eth0-q1-rx"), some("eth0", 1, Rx));
        assert_eq!(q("eth0-q0"), some("eth0", 0, TxRx));
        for other in [
            "nvme0q1",
            "ACPI:Ged",
            "ttyS0",
            "i8042",
            "timer",
            "",
            "-TxRx-1",
            "-q1",
            "x-Tx-Rx-",
            "eth0-Tx-Rx-99999999999",
            "virtio-input.0",
            "virtio2-input.x",
            "@pci:",
            "i40e-0000:3b:00.0:misc",
        ] {
            assert_eq!(q(other), None, "{other}");
        }
    }

    #[test]
    fn splits_other_kernels_formats() {
        let one = |line: &str, ncpus| parse_interrupt_line(line, ncpus).unwrap();
        let l = one(
            " 45:  0  12  IR-PCI-MSI 524288-edge      nvme0q0, extra name",
            2,
        );
        assert_eq!(l.chip.as_deref(), Some("IR-PCI-MSI"));
        assert_eq!(l.hwirq.as_deref(), Some("524288"));
        assert_eq!(l.actions, vec!["nvme0q0", "extra name"]);
        let arm = one(" 11:  5  6     GICv3  27 Level     arch_timer", 2);
        assert_eq!(
            (arm.chip.as_deref(), arm.hwirq.as_deref()),
            (Some("GICv3"), Some("27"))
        );
        assert_eq!(arm.actions, vec!["arch_timer"]);
        let old = one("  0:  46  IO-APIC-edge      timer", 1);
        assert_eq!(
            (old.chip.as_deref(), old.hwirq),
            (Some("IO-APIC-edge"), None)
        );
        assert_eq!(old.actions, vec!["timer"]);
        let xen = one(" 80:  7  xen-dyn    -edge    eth0-q0-tx", 1);
        assert_eq!((xen.chip.as_deref(), xen.hwirq), (Some("xen-dyn"), None));
        assert_eq!(xen.actions, vec!["eth0-q0-tx"]);
        let bare = one("  9:  0  0  IO-APIC   9-fasteoi", 2);
        assert!(bare.actions.is_empty());
        assert_eq!(
            one("IPI0:  1  2  Rescheduling interrupts", 2).id,
            named("IPI0")
        );
    }

    #[test]
    fn reads_hotplug_gaps_in_the_header() {
        let t = parse_interrupts("  CPU0  CPU2\n  5:  1  2  IO-APIC 5-edge  a\n").unwrap();
        assert_eq!(t.cpus, vec![0, 2]);
        assert!(parse_interrupts("CPU2 CPU0\n").is_err());
    }

    #[test]
    fn deltas_between_two_real_samples_show_where_the_nic_interrupts_landed() {
        let t0 = parse_interrupts(KVM_T0).unwrap();
        let t1 = parse_interrupts(KVM_T1).unwrap();
        let deltas = interrupt_deltas(&t0, &t1).unwrap();
        let find = |id: IrqId| deltas.iter().find(|d| d.id == id).cloned();
        // Traffic was made between the captures: receive on CPU1, transmit completions on CPU0,
        // matching each IRQ's effective affinity in the captured /proc/irq tree.
        let rx = find(num(38)).unwrap();
        assert_eq!(rx.per_cpu, vec![(1, 6)]);
        assert_eq!(servicing_cpus(&rx), vec![1]);
        assert_eq!(servicing_cpus(&find(num(39)).unwrap()), vec![0]);
        assert_eq!(find(named("LOC")).unwrap().per_cpu, vec![(0, 189), (1, 72)]);
        assert!(
            find(num(37)).is_none(),
            "an IRQ that did not fire has no entry"
        );
        assert!(find(named("ERR")).is_none());
        // Every entry is non-zero, and the totals add up to the per-line difference.
        let total: u64 = t1.lines.iter().map(|l| l.total()).sum::<u64>()
            - t0.lines.iter().map(|l| l.total()).sum::<u64>();
        let on_both = interrupts_on_cpus(&t0, &t1, &[0, 1]).unwrap();
        assert_eq!(on_both, total);
        let on0 = interrupts_on_cpus(&t0, &t1, &[0]).unwrap();
        let on1 = interrupts_on_cpus(&t0, &t1, &[1]).unwrap();
        assert_eq!(on0 + on1, on_both);
        assert!(on0 > 0 && on1 > 0);
        assert!(deltas.iter().all(|d| d.per_cpu.iter().all(|&(_, n)| n > 0)));
        // Same sample twice: nothing fired.
        assert!(interrupt_deltas(&t1, &t1).unwrap().is_empty());
    }

    #[test]
    fn deltas_saturate_backwards_counts_and_refuse_changed_cpus() {
        let t0 = parse_interrupts(KVM_T0).unwrap();
        let t1 = parse_interrupts(KVM_T1).unwrap();
        // Swapped samples: every count "went backwards", which must give zero, not a wrap.
        assert!(interrupt_deltas(&t1, &t0).unwrap().is_empty());
        let ena = parse_interrupts(ENA).unwrap();
        assert!(matches!(
            interrupt_deltas(&t0, &ena),
            Err(DeltaError::CpusChanged { .. })
        ));
        // A line absent before counts from zero; ERR's single count is unattributed.
        let mut empty = t1.clone();
        empty.lines.clear();
        let from_zero = interrupt_deltas(&empty, &t0).unwrap();
        let input = from_zero.iter().find(|d| d.id == num(38)).unwrap();
        assert_eq!(input.per_cpu, vec![(1, 1880)]);
        let mut err_line = t0.clone();
        err_line.lines.retain(|l| l.id == named("ERR"));
        let mut err_after = err_line.clone();
        err_after.lines[0].counts = vec![3];
        let d = interrupt_deltas(&err_line, &err_after).unwrap();
        assert_eq!((d[0].per_cpu.len(), d[0].unattributed), (0, 3));
        assert_eq!(
            interrupts_on_cpus(&err_line, &err_after, &[0, 1]).unwrap(),
            0
        );
    }

    #[test]
    fn reads_affinity_and_msi_irqs_from_the_fixture_tree() {
        let root = fixture("kvm-2vcpu-xeon");
        let t = read_interrupts(&root).unwrap();
        assert_eq!(t.cpus, vec![0, 1]);
        let rx = read_irq_affinity(&root, 38).unwrap();
        assert_eq!(rx.smp_affinity_list, vec![0, 1]);
        assert_eq!(rx.effective_affinity_list, Some(vec![1]));
        assert_eq!(
            read_irq_affinity(&root, 39)
                .unwrap()
                .effective_affinity_list,
            Some(vec![0])
        );
        // Every numbered IRQ of the file has readable affinity files.
        for line in &t.lines {
            if let IrqId::Number(n) = line.id {
                read_irq_affinity(&root, n).unwrap();
            }
        }
        assert!(matches!(
            read_irq_affinity(&root, 9999),
            Err(InterruptsError::Read(_))
        ));
        let nic = "/sys/devices/pci0000:00/0000:00:03.0";
        assert_eq!(read_msi_irqs(&root, nic).unwrap(), vec![37, 38, 39]);
        assert_eq!(
            read_msi_irqs(&root, &format!("{nic}/")).unwrap(),
            vec![37, 38, 39]
        );
        // A device directory without msi_irqs uses legacy interrupts; a missing one is an error.
        assert_eq!(
            read_msi_irqs(&root, "/sys/devices/system").unwrap(),
            Vec::<u32>::new()
        );
        assert!(read_msi_irqs(&root, "/sys/devices/pci0000:00/0000:00:09.0").is_err());
    }

    #[test]
    fn the_nic_msi_irqs_match_the_queue_lines() {
        let root = fixture("kvm-2vcpu-xeon");
        let msi = read_msi_irqs(&root, "/sys/devices/pci0000:00/0000:00:03.0").unwrap();
        let t = read_interrupts(&root).unwrap();
        for q in nic_queue_irqs(&t) {
            assert!(msi.contains(&q.irq), "{q:?}");
        }
    }

    #[test]
    fn bad_input_is_an_error_naming_the_line() {
        let e = parse_interrupts("").unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
        let e = parse_interrupts("CPU0 CPU1\n  5:  1  2  x\n  6  1 2 y\n").unwrap_err();
        assert!(e.to_string().contains("line 3"), "{e}");
        let e = parse_interrupts("CPU0\n 5: 1 a\n 5: 2 b\n").unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
        assert!(parse_interrupts("CPU0\n 5: x\n").is_err());
        assert!(parse_interrupts("CPU0\n 99999999999: 1\n").is_err());
        assert!(parse_interrupts("CPU0\n 5: 99999999999999999999999\n").is_err());
        assert!(parse_interrupts("hello world\n").is_err());
    }

    #[test]
    fn truncated_and_garbled_input_never_panics() {
        for text in [KVM, ENA, KVM_T1] {
            for cut in (0..=text.len())
                .step_by(7)
                .filter(|&i| text.is_char_boundary(i))
            {
                let _ = parse_interrupts(&text[..cut]);
            }
            // Whole-line prefixes of a real file always parse.
            let mut prefix = String::new();
            for line in text.lines() {
                prefix.push_str(line);
                prefix.push('\n');
                parse_interrupts(&prefix).unwrap();
            }
        }
        // Deterministic pseudo-random corruption of a real file, from a fixed seed.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let alphabet = b" \t\n:-,.0123456789CPUxz@";
        for _ in 0..300 {
            let mut bytes = ENA.as_bytes().to_vec();
            for _ in 0..8 {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let at = (state >> 33) as usize % bytes.len();
                bytes[at] = alphabet[(state >> 17) as usize % alphabet.len()];
            }
            let text = String::from_utf8_lossy(&bytes);
            if let Ok(t) = parse_interrupts(&text) {
                let _ = nic_queue_irqs(&t);
                let _ = interrupt_deltas(&t, &t);
            }
        }
        let _ = parse_interrupts("\u{0}\u{ffff}:\n:\n::::");
    }
}
