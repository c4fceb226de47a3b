//! Kernel settings that change what a benchmark measures: isolated CPUs, ASLR, transparent huge
//! pages, CPU frequency and idle policy, the clocksource, and which hypervisor is underneath.
//!
//! Each setting is `None` where the machine does not expose it. That is normal on cloud VMs,
//! which usually have no cpufreq at all, and it must never read as zero or as "off".

use serde::Serialize;

use crate::topology::read_present;
use crate::{CpuListError, HostRoot, parse_cpu_list};

/// A CPU-list boot parameter such as `isolcpus=nohz,domain,2-3` or `nohz_full=2-3`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CpuListParam {
    /// The value as written after `=` (empty for a bare `rcu_nocbs`).
    pub raw: String,
    /// Leading flags (isolcpus only: `nohz`, `domain`, `managed_irq`). Empty means the
    /// kernel's default, which for isolcpus is `domain`.
    pub flags: Vec<String>,
    /// The CPUs; `None` when the list uses syntax this parser does not take (the kernel's
    /// `N` and `a-b:g/w` forms), in which case a note says so.
    pub cpus: Option<Vec<u32>>,
}

/// The CPU-isolation parameters of the kernel command line.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct BootParams {
    /// `isolcpus=`: CPUs taken out of the scheduler's balancing.
    pub isolcpus: Option<CpuListParam>,
    /// `nohz_full=`: CPUs that stop the tick when running one task.
    pub nohz_full: Option<CpuListParam>,
    /// `rcu_nocbs=`: CPUs whose RCU callbacks run elsewhere.
    pub rcu_nocbs: Option<CpuListParam>,
    /// `irqaffinity=`: the default CPUs for interrupts.
    pub irqaffinity: Option<CpuListParam>,
}

/// `/proc/sys/kernel/randomize_va_space`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Aslr {
    /// 0: no randomisation.
    Disabled,
    /// 1: stack, mmap base, vDSO and shared libraries randomised; the heap (brk) is not.
    Conservative,
    /// 2: everything in 1, plus the heap.
    Full,
}

/// cpufreq state of one CPU. On most VMs the whole directory is absent and all fields are `None`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CpuFreq {
    /// The CPU id.
    pub cpu: u32,
    /// `scaling_governor` (performance, powersave, schedutil…).
    pub governor: Option<String>,
    /// `scaling_driver` (intel_pstate, acpi-cpufreq, amd-pstate…).
    pub driver: Option<String>,
    /// `scaling_cur_freq`, in kHz as the kernel reports it.
    pub cur_khz: Option<u64>,
}

/// The kernel settings that bear on measurements.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelSettings {
    /// CPU-isolation parameters from /proc/cmdline.
    pub boot: BootParams,
    /// ASLR mode.
    pub aslr: Option<Aslr>,
    /// Transparent huge pages `enabled` (always, madvise, never).
    pub thp_enabled: Option<String>,
    /// Transparent huge pages `defrag` policy.
    pub thp_defrag: Option<String>,
    /// One entry per online CPU given, fields `None` where cpufreq is absent.
    pub cpufreq: Vec<CpuFreq>,
    /// Whether turbo/boost is allowed (intel_pstate `no_turbo` inverted, or cpufreq `boost`);
    /// `None` where neither file exists.
    pub turbo: Option<bool>,
    /// cpuidle governor (menu, teo, haltpoll…).
    pub cpuidle_governor: Option<String>,
    /// cpuidle driver (intel_idle, acpi_idle, haltpoll, or `none`).
    pub cpuidle_driver: Option<String>,
    /// The current clocksource (tsc, kvm-clock, xen…).
    pub clocksource: Option<String>,
    /// The clocksources the kernel could switch to.
    pub available_clocksources: Vec<String>,
    /// The hypervisor, named only from local evidence; `None` when there is none to see.
    pub hypervisor: Option<String>,
    /// Which file(s) named the hypervisor, so a reader can judge the claim.
    pub hypervisor_evidence: Option<String>,
}

/// A kernel setting file held something the kernel does not write there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    /// A CPU-list boot parameter that does not parse.
    #[error("/proc/cmdline: {param}={value}: {source}")]
    BadCpuList {
        /// The parameter name, e.g. `isolcpus`.
        param: String,
        /// Its value.
        value: String,
        /// Why the list was refused.
        #[source]
        source: CpuListError,
    },
    /// randomize_va_space is not 0, 1 or 2.
    #[error("/proc/sys/kernel/randomize_va_space: '{text}' is not 0, 1 or 2")]
    BadAslr {
        /// What the file held (trimmed).
        text: String,
    },
    /// A number that is not one.
    #[error("{path}: '{text}' is not a number")]
    BadNumber {
        /// The machine path.
        path: String,
        /// What it held (trimmed).
        text: String,
    },
}

/// Parses /proc/cmdline for the CPU-isolation parameters. Never fails as a whole: a parameter
/// whose list does not parse keeps its raw text with `cpus: None`, and the error is returned
/// beside it. Words after `--` are the init process's arguments, not the kernel's, and are
/// ignored. When a parameter repeats, the last one wins.
pub fn parse_cmdline(text: &str) -> (BootParams, Vec<KernelError>) {
    let mut params = BootParams::default();
    let mut errors = Vec::new();
    for word in cmdline_words(text) {
        if word == "--" {
            break;
        }
        let (name, value) = word.split_once('=').unwrap_or((word.as_str(), ""));
        let slot = match name {
            "isolcpus" => &mut params.isolcpus,
            "nohz_full" => &mut params.nohz_full,
            "rcu_nocbs" => &mut params.rcu_nocbs,
            "irqaffinity" => &mut params.irqaffinity,
            _ => continue,
        };
        let value = value.trim_matches('"');
        let (flags, list) = if name == "isolcpus" {
            split_isolcpus_flags(value)
        } else {
            (Vec::new(), value)
        };
        let cpus = match parse_cpu_list(list) {
            Ok(cpus) => Some(cpus),
            Err(source) => {
                errors.push(KernelError::BadCpuList {
                    param: name.to_string(),
                    value: value.to_string(),
                    source,
                });
                None
            }
        };
        *slot = Some(CpuListParam {
            raw: value.to_string(),
            flags,
            cpus,
        });
    }
    (params, errors)
}

/// Splits the command line on whitespace outside double quotes, as the kernel's `next_arg`
/// does, so `foo="a b"` stays one word.
fn cmdline_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for ch in text.chars() {
        if ch == '"' {
            quoted = !quoted;
            word.push(ch);
        } else if ch.is_whitespace() && !quoted {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
        } else {
            word.push(ch);
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// isolcpus takes leading alphabetic flags before the list (`nohz,domain,2-3`); the kernel
/// consumes words while they start with a letter, so do the same.
fn split_isolcpus_flags(value: &str) -> (Vec<String>, &str) {
    let mut flags = Vec::new();
    let mut rest = value;
    while rest.starts_with(|c: char| c.is_ascii_alphabetic()) {
        match rest.split_once(',') {
            Some((flag, tail)) => {
                flags.push(flag.to_string());
                rest = tail;
            }
            None => break, // a trailing word: leave it to the list parser to refuse
        }
    }
    (flags, rest)
}

/// Parses /proc/sys/kernel/randomize_va_space.
pub fn parse_randomize_va_space(text: &str) -> Result<Aslr, KernelError> {
    match text.trim() {
        "0" => Ok(Aslr::Disabled),
        "1" => Ok(Aslr::Conservative),
        "2" => Ok(Aslr::Full),
        other => Err(KernelError::BadAslr {
            text: other.to_string(),
        }),
    }
}

/// The bracketed choice of a sysfs selector such as `always [madvise] never` (THP) or
/// `none [mq-deadline] kyber` (I/O scheduler). `None` if nothing is bracketed.
pub fn bracketed_choice(text: &str) -> Option<String> {
    let start = text.find('[')?;
    let len = text[start + 1..].find(']')?;
    let choice = text[start + 1..start + 1 + len].trim();
    (!choice.is_empty()).then(|| choice.to_string())
}

/// Whether `flags` (a /proc/cpuinfo `flags` line, or the whole file) has the `hypervisor` flag,
/// which x86 CPUs set in guests (CPUID leaf 1, ECX bit 31). Arm has no such flag.
pub fn has_hypervisor_flag(flags: &str) -> bool {
    let line = flags
        .lines()
        .find(|l| l.split(':').next().is_some_and(|k| k.trim() == "flags"))
        .map(|l| l.split_once(':').map_or("", |(_, v)| v))
        .unwrap_or(flags);
    line.split_whitespace().any(|f| f == "hypervisor")
}

/// Whether reading the time through this clocksource is slow enough to distort benchmarks
/// that read the clock often. `hpet` and `acpi_pm` are device registers read by MMIO or port
/// I/O: a microsecond or so on bare metal, a VM exit in a guest, and the vDSO cannot use them,
/// so every `clock_gettime` becomes a system call. `xen` is the Xen PV clock: on the Xen-based
/// EC2 instances it lacks the stable-TSC bit the vDSO needs, so it too falls back to a system
/// call, which is why AWS advises switching those instances to `tsc`.
pub fn is_slow_clocksource(name: &str) -> bool {
    matches!(name.trim(), "xen" | "hpet" | "acpi_pm")
}

/// What a machine shows about its hypervisor: the inputs of [`identify_hypervisor`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct HypervisorEvidence {
    /// /proc/cpuinfo has the `hypervisor` flag.
    pub cpu_flag: bool,
    /// /sys/hypervisor/type (`xen` on Xen guests).
    pub sys_hypervisor_type: Option<String>,
    /// /sys/hypervisor/uuid (starts with `ec2` on Xen-based EC2).
    pub sys_hypervisor_uuid: Option<String>,
    /// DMI `sys_vendor`.
    pub dmi_sys_vendor: Option<String>,
    /// DMI `product_name` (the instance type on Nitro EC2).
    pub dmi_product_name: Option<String>,
    /// DMI `bios_vendor`.
    pub dmi_bios_vendor: Option<String>,
    /// DMI `bios_version` (contains `amazon` on Xen-based EC2).
    pub dmi_bios_version: Option<String>,
    /// DMI `board_asset_tag` (the instance id on Nitro EC2).
    pub dmi_board_asset_tag: Option<String>,
    /// The available clocksources: kvm-clock and xen are only registered under their
    /// hypervisors, so they are evidence too.
    pub clocksources: Vec<String>,
}

impl HypervisorEvidence {
    /// Whether any DMI field contains `needle` (case-insensitive).
    pub fn dmi_mentions(&self, needle: &str) -> bool {
        let needle = needle.to_ascii_lowercase();
        [
            &self.dmi_sys_vendor,
            &self.dmi_product_name,
            &self.dmi_bios_vendor,
            &self.dmi_bios_version,
            &self.dmi_board_asset_tag,
        ]
        .into_iter()
        .flatten()
        .any(|v| v.to_ascii_lowercase().contains(&needle))
    }

    fn has_clocksource(&self, name: &str) -> bool {
        self.clocksources.iter().any(|c| c == name)
    }
}

/// Names the hypervisor from evidence only, with a note of which evidence: `None` when nothing
/// points to one (bare metal, or a guest that hides itself). The CPUID hypervisor vendor
/// string would be more direct but no file exposes it, and guessing from the CPU model or the
/// presence of virtio was rejected: neither proves anything.
pub fn identify_hypervisor(e: &HypervisorEvidence) -> Option<(String, String)> {
    let found = |name: &str, why: &str| Some((name.to_string(), why.to_string()));
    let xen =
        e.sys_hypervisor_type.as_deref().map(str::trim) == Some("xen") || e.has_clocksource("xen");
    let ec2_uuid = e
        .sys_hypervisor_uuid
        .as_deref()
        .is_some_and(|u| u.trim().to_ascii_lowercase().starts_with("ec2"));
    if xen && (ec2_uuid || e.dmi_mentions("amazon")) {
        return found(
            "Amazon EC2 (Xen)",
            "Xen (sys/hypervisor or clocksource) with an EC2 uuid or Amazon DMI",
        );
    }
    if e.dmi_mentions("Amazon EC2") {
        // *.metal instances carry the same DMI but run on no hypervisor. The flag decides on
        // x86; Arm has no flag, so there the instance type in product_name does.
        let metal = e
            .dmi_product_name
            .as_deref()
            .is_some_and(|p| p.trim().ends_with(".metal"));
        if e.cpu_flag || (e.dmi_product_name.is_some() && !metal) {
            return found("Amazon EC2 (Nitro)", "DMI names Amazon EC2");
        }
        return None;
    }
    if xen {
        return found("Xen", "sys/hypervisor/type or the xen clocksource");
    }
    if e.has_clocksource("kvm-clock") {
        return found("KVM", "the kvm-clock clocksource is registered");
    }
    if e.dmi_mentions("QEMU") || e.dmi_product_name.as_deref().map(str::trim) == Some("KVM") {
        return found("KVM", "DMI names QEMU/KVM");
    }
    if e.has_clocksource("hyperv_clocksource_tsc_page") {
        return found("Hyper-V", "the hyperv_clocksource_tsc_page clocksource");
    }
    if e.cpu_flag && e.dmi_mentions("Microsoft Corporation") {
        return found("Hyper-V", "cpuinfo hypervisor flag and Microsoft DMI");
    }
    if e.dmi_mentions("VMware") {
        return found("VMware", "DMI names VMware");
    }
    if e.cpu_flag {
        return found("unknown hypervisor", "cpuinfo hypervisor flag only");
    }
    None
}

const CLOCKSOURCE_DIR: &str = "/sys/devices/system/clocksource/clocksource0";
const DMI_DIRS: [&str; 2] = ["/sys/class/dmi/id", "/sys/devices/virtual/dmi/id"];

/// Reads the hypervisor evidence below `root`. Absent files (no DMI in Firecracker, no
/// /sys/hypervisor outside Xen) are normal and not noted.
pub fn read_hypervisor_evidence(root: &HostRoot, notes: &mut Vec<String>) -> HypervisorEvidence {
    let mut read = |path: &str| read_present(root, path, notes).map(|s| s.trim().to_string());
    let cpu_flag = read("/proc/cpuinfo").is_some_and(|t| has_hypervisor_flag(&t));
    let sys_hypervisor_type = read("/sys/hypervisor/type");
    let sys_hypervisor_uuid = read("/sys/hypervisor/uuid");
    let mut dmi = |name: &str| DMI_DIRS.iter().find_map(|d| read(&format!("{d}/{name}")));
    HypervisorEvidence {
        cpu_flag,
        sys_hypervisor_type,
        sys_hypervisor_uuid,
        dmi_sys_vendor: dmi("sys_vendor"),
        dmi_product_name: dmi("product_name"),
        dmi_bios_vendor: dmi("bios_vendor"),
        dmi_bios_version: dmi("bios_version"),
        dmi_board_asset_tag: dmi("board_asset_tag"),
        clocksources: read_present(
            root,
            &format!("{CLOCKSOURCE_DIR}/available_clocksource"),
            notes,
        )
        .map(|t| t.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default(),
    }
}

/// Reads the kernel settings below `root` for the `online` CPUs. Never fails: the second value
/// has one line per file that could not be read or parsed. Absent files are `None` silently.
pub fn read_kernel_settings(root: &HostRoot, online: &[u32]) -> (KernelSettings, Vec<String>) {
    let mut notes = Vec::new();
    let boot = match root.read("/proc/cmdline") {
        Ok(text) => {
            let (boot, errors) = parse_cmdline(&text);
            notes.extend(errors.iter().map(ToString::to_string));
            boot
        }
        Err(err) => {
            notes.push(err.to_string());
            BootParams::default()
        }
    };
    let aslr =
        read_present(root, "/proc/sys/kernel/randomize_va_space", &mut notes).and_then(|t| {
            match parse_randomize_va_space(&t) {
                Ok(a) => Some(a),
                Err(err) => {
                    notes.push(err.to_string());
                    None
                }
            }
        });
    let mut choice =
        |path: &str| read_present(root, path, &mut notes).and_then(|t| bracketed_choice(&t));
    let thp_enabled = choice("/sys/kernel/mm/transparent_hugepage/enabled");
    let thp_defrag = choice("/sys/kernel/mm/transparent_hugepage/defrag");

    let cpufreq = online
        .iter()
        .map(|&cpu| read_cpufreq(root, cpu, &mut notes))
        .collect();
    let turbo = read_turbo(root, &mut notes);

    let mut text = |path: &str| {
        read_present(root, path, &mut notes)
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
    };
    let cpuidle_governor = text("/sys/devices/system/cpu/cpuidle/current_governor_ro")
        .or_else(|| text("/sys/devices/system/cpu/cpuidle/current_governor"));
    let cpuidle_driver = text("/sys/devices/system/cpu/cpuidle/current_driver");
    let clocksource = text(&format!("{CLOCKSOURCE_DIR}/current_clocksource"));

    let evidence = read_hypervisor_evidence(root, &mut notes);
    let (hypervisor, hypervisor_evidence) = identify_hypervisor(&evidence).unzip();
    let settings = KernelSettings {
        boot,
        aslr,
        thp_enabled,
        thp_defrag,
        cpufreq,
        turbo,
        cpuidle_governor,
        cpuidle_driver,
        clocksource,
        available_clocksources: evidence.clocksources,
        hypervisor,
        hypervisor_evidence,
    };
    (settings, notes)
}

fn read_cpufreq(root: &HostRoot, cpu: u32, notes: &mut Vec<String>) -> CpuFreq {
    let dir = format!("/sys/devices/system/cpu/cpu{cpu}/cpufreq");
    let mut text = |name: &str| {
        read_present(root, &format!("{dir}/{name}"), notes).map(|t| t.trim().to_string())
    };
    let governor = text("scaling_governor");
    let driver = text("scaling_driver");
    let cur_khz = text("scaling_cur_freq").and_then(|t| match t.parse::<u64>() {
        Ok(khz) => Some(khz),
        Err(_) => {
            notes.push(
                KernelError::BadNumber {
                    path: format!("{dir}/scaling_cur_freq"),
                    text: t,
                }
                .to_string(),
            );
            None
        }
    });
    CpuFreq {
        cpu,
        governor,
        driver,
        cur_khz,
    }
}

fn read_turbo(root: &HostRoot, notes: &mut Vec<String>) -> Option<bool> {
    // intel_pstate has its own switch and no cpufreq/boost, so ask it first.
    let sources = [
        ("/sys/devices/system/cpu/intel_pstate/no_turbo", true),
        ("/sys/devices/system/cpu/cpufreq/boost", false),
    ];
    for (path, inverted) in sources {
        if let Some(t) = read_present(root, path, notes) {
            match t.trim() {
                "0" => return Some(inverted),
                "1" => return Some(!inverted),
                other => notes.push(
                    KernelError::BadNumber {
                        path: path.to_string(),
                        text: other.to_string(),
                    }
                    .to_string(),
                ),
            }
        }
    }
    None
}

#[cfg(test)]
mod tests;
