//! `quietbench host`: the machine an agent runs on, readably.

use std::fmt::Write;

use quietbench_host::format_cpu_list;
use quietbench_proto::v1 as pb;
use quietbench_record::record::HostRecord;

use super::remote_text::escape_remote;
use super::table::host_line;

fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

fn or_dash(list: &[u32]) -> String {
    if list.is_empty() {
        "-".into()
    } else {
        format_cpu_list(list)
    }
}

/// `Some(x)` as text, `None` as `missing`.
fn or<T: ToString>(value: Option<T>, missing: &str) -> String {
    value.map_or(missing.into(), |v| v.to_string())
}

/// One line of agent-supplied text, escaped ([`escape_remote`]).
fn push_line(out: &mut String, line: std::fmt::Arguments<'_>) {
    let _ = writeln!(out, "{}", escape_remote(&line.to_string()));
}

/// The full description of a host, as text. Everything in it but the layout is the agent's.
pub fn render(host: &HostRecord) -> String {
    let fp = &host.fingerprint;
    let mut out = String::new();
    let _ = writeln!(out, "{}", host_line(host));
    for (key, value) in SUMMARY {
        if let Some(value) = value(fp) {
            push_line(&mut out, format_args!("  {key:<13} {value}"));
        }
    }
    for (heading, shown_when_empty, lines) in SECTIONS {
        let lines = lines(fp);
        if lines.is_empty() && !shown_when_empty {
            continue;
        }
        // The heading is ours, not the agent's: written as is.
        let _ = writeln!(out, "\n{heading}");
        for line in lines {
            push_line(&mut out, format_args!("{line}"));
        }
    }
    out
}

/// A summary row: its label, and its value, `None` (no row) where the fingerprint lacks the
/// part the row reads: without kernel settings or a topology, their rows are left out.
type Row = (&'static str, fn(&pb::Fingerprint) -> Option<String>);

/// The summary rows, in the order printed.
const SUMMARY: [Row; 12] = [
    ("hostname", |fp| Some(fp.hostname.clone())),
    ("hypervisor", |fp| fp.kernel.as_ref().map(hypervisor)),
    ("clocksource", |fp| {
        fp.kernel.as_ref().map(|k| clocksource(&fp.clocksource, k))
    }),
    ("ASLR", |fp| fp.kernel.as_ref().map(aslr)),
    ("THP", |fp| {
        let k = fp.kernel.as_ref()?;
        Some(format!("{} (defrag {})", k.thp_enabled, k.thp_defrag))
    }),
    ("cpufreq", |fp| fp.kernel.as_ref().map(cpufreq)),
    ("cpuidle", |fp| fp.kernel.as_ref().map(cpuidle)),
    ("isolation", |fp| fp.kernel.as_ref().map(isolation)),
    ("topology", |fp| fp.topology.as_ref().map(topology)),
    ("caches", |fp| fp.topology.as_ref().map(caches)),
    ("steal", |fp| {
        Some(
            fp.steal_fraction_since_boot
                .map_or("not accounted".into(), |s| {
                    format!("{:.3}% of all CPU time since boot", s * 100.0)
                }),
        )
    }),
    ("EC2", |fp| Some(ec2(fp.instance.as_ref()))),
];

fn hypervisor(k: &pb::KernelSettings) -> String {
    match (&k.hypervisor, &k.hypervisor_evidence) {
        (Some(h), Some(e)) => format!("{h} ({e})"),
        (Some(h), None) => h.clone(),
        _ => "none detected".into(),
    }
}

fn clocksource(current: &str, k: &pb::KernelSettings) -> String {
    let slow = if k.slow_clocksource {
        "  SLOW: every timestamp is a system call"
    } else {
        ""
    };
    format!(
        "{current} (available: {}){slow}",
        k.available_clocksources.join(" ")
    )
}

fn aslr(k: &pb::KernelSettings) -> String {
    k.aslr.map_or("unreadable".into(), |a| {
        let name = ["off", "conservative", "full"].get(a as usize);
        format!("{a} ({})", name.unwrap_or(&"?"))
    })
}

fn cpufreq(k: &pb::KernelSettings) -> String {
    match (&k.cpufreq_governor, &k.cpufreq_driver) {
        (None, None) => "not exposed (normal on VMs)".into(),
        (g, d) => format!(
            "governor {}, driver {}, turbo {}",
            g.as_deref().unwrap_or("?"),
            d.as_deref().unwrap_or("?"),
            or(k.turbo.map(|t| if t { "on" } else { "off" }), "?")
        ),
    }
}

fn cpuidle(k: &pb::KernelSettings) -> String {
    match (&k.cpuidle_governor, &k.cpuidle_driver) {
        (None, None) => "not exposed".into(),
        (g, d) => format!(
            "governor {}, driver {}",
            g.as_deref().unwrap_or("?"),
            d.as_deref().unwrap_or("?")
        ),
    }
}

fn isolation(k: &pb::KernelSettings) -> String {
    format!(
        "isolcpus {}, nohz_full {}, rcu_nocbs {}",
        or_dash(&k.isolcpus),
        or_dash(&k.nohz_full),
        or_dash(&k.rcu_nocbs)
    )
}

fn topology(t: &pb::Topology) -> String {
    format!(
        "{} socket(s), {} core(s), {} thread(s) per core, {} NUMA node(s)",
        t.sockets,
        t.cores,
        t.threads_per_core,
        t.nodes.len()
    )
}

/// "L1d 32.0 KiB x8, L1i 32.0 KiB x8, L2 1.0 MiB x8, …".
fn caches(t: &pb::Topology) -> String {
    let caches: Vec<String> = t
        .caches
        .iter()
        .map(|c| {
            let kind = match c.kind.as_str() {
                "data" => "d",
                "instruction" => "i",
                _ => "",
            };
            let size = c.size_bytes.map_or("?".into(), bytes);
            format!("L{}{kind} {size} x{}", c.level, c.instances)
        })
        .collect();
    caches.join(", ")
}

fn ec2(instance: Option<&pb::InstanceIdentity>) -> String {
    let Some(i) = instance else {
        return "not an EC2 instance (no metadata queried)".into();
    };
    format!(
        "{} {} in {} (AMI {}, placement group {})",
        i.instance_id.as_deref().unwrap_or("?"),
        i.instance_type.as_deref().unwrap_or("?"),
        i.availability_zone.as_deref().unwrap_or("?"),
        i.ami_id.as_deref().unwrap_or("?"),
        i.placement_group.as_deref().unwrap_or("none"),
    )
}

/// A listed section: its heading (ours, printed as is), whether it is printed even with no
/// lines under it (the CPU table and the tuning steps are), and its lines (the agent's, escaped).
type Section = (&'static str, bool, fn(&pb::Fingerprint) -> Vec<String>);

/// The listed sections, in the order printed.
const SECTIONS: [Section; 7] = [
    (
        "  CPU  role          node  SMT siblings  interrupts/window  NIC queues",
        true,
        |fp| fp.cpu_roles.iter().map(cpu_role).collect(),
    ),
    ("  NICs", false, |fp| fp.nics.iter().map(nic).collect()),
    (
        "  NIC queue interrupts (serviced by = CPUs whose count grew while the agent watched)",
        false,
        |fp| fp.nic_queues.iter().map(nic_queue).collect(),
    ),
    ("  block devices", false, |fp| {
        fp.block_devices.iter().map(block_device).collect()
    }),
    ("  tuning steps (quietbench tune)", true, |fp| {
        fp.controls.iter().map(control).collect()
    }),
    ("  EC2 device monitors (noise)", false, |fp| {
        fp.monitors.iter().map(monitor).collect()
    }),
    ("  not readable here", false, |fp| {
        fp.unreadable.iter().map(|u| format!("  - {u}")).collect()
    }),
];

fn available(yes: bool) -> &'static str {
    if yes { "available" } else { "unavailable" }
}

fn cpu_role(r: &pb::CpuRole) -> String {
    let role = if r.housekeeping {
        "housekeeping"
    } else if r.quiet {
        "quiet"
    } else if !r.rss_queues.is_empty() {
        "RSS"
    } else {
        "busy sibling"
    };
    let queues = if r.rss_queues.is_empty() {
        "-".into()
    } else {
        r.rss_queues.join(", ")
    };
    format!(
        "  {:<4} {:<13} {:<5} {:<13} {:<18} {queues}",
        r.cpu,
        role,
        or(r.numa_node, "-"),
        or_dash(&r.smt_siblings),
        r.window_interrupts,
    )
}

fn nic(n: &pb::Nic) -> String {
    format!(
        "  {:<8} driver {}, mtu {}, {} rx / {} tx queues, NUMA node {}, IRQs {}",
        n.name,
        n.driver.as_deref().unwrap_or("?"),
        or(n.mtu, "?"),
        or(n.rx_queues, "?"),
        or(n.tx_queues, "?"),
        or(n.numa_node, "-"),
        or_dash(&n.irqs),
    )
}

fn nic_queue(q: &pb::NicQueue) -> String {
    let name = if q.interface.is_empty() {
        q.device.clone()
    } else {
        format!("{} ({})", q.interface, q.device)
    };
    format!(
        "  IRQ {:<5} {name} {} {}: affinity {}, effective {}, serviced by {} ({} in window)",
        q.irq,
        q.direction,
        or(q.queue, "-"),
        or_dash(&q.affinity_cpus),
        or_dash(&q.effective_cpus),
        or_dash(&q.serviced_by),
        q.window_count
    )
}

fn block_device(b: &pb::BlockDevice) -> String {
    let rotational = match b.rotational {
        Some(true) => "rotational",
        Some(false) => "non-rotational",
        None => "rotational?",
    };
    let ebs = b
        .ebs_volume_id
        .as_ref()
        .map_or(String::new(), |v| format!(", EBS {v}"));
    format!(
        "  {:<8} {} {}, {rotational}, scheduler {}{ebs}",
        b.name,
        b.model.as_deref().unwrap_or("unknown model"),
        b.size_bytes.map_or("?".into(), bytes),
        b.scheduler.as_deref().unwrap_or("?"),
    )
}

fn control(c: &pb::ControlAvailability) -> String {
    format!(
        "  {:<13} {:<13} {}",
        c.control,
        available(c.available),
        c.detail
    )
}

fn monitor(m: &pb::MonitorAvailability) -> String {
    format!(
        "  {:<15} {:<8} {:<11} {}",
        m.monitor,
        m.device,
        available(m.available),
        m.detail
    )
}
