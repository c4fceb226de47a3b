//! `quietbench host`: the machine an agent runs on, readably.

use std::fmt::Write;

use quietbench_host::format_cpu_list;

use super::remote_text::escape_remote;
use super::table::host_line;
use crate::record::HostRecord;

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

/// One line of agent-supplied text, escaped ([`escape_remote`]).
fn push_line(out: &mut String, line: std::fmt::Arguments<'_>) {
    let _ = writeln!(out, "{}", escape_remote(&line.to_string()));
}

/// The full description of a host, as text. Everything in it but the layout is the agent's.
pub fn render(host: &HostRecord) -> String {
    let fp = &host.fingerprint;
    let mut out = String::new();
    let _ = writeln!(out, "{}", host_line(host));
    let row = |out: &mut String, key: &str, value: String| {
        push_line(out, format_args!("  {key:<13} {value}"));
    };
    row(&mut out, "hostname", fp.hostname.clone());
    if let Some(k) = &fp.kernel {
        row(
            &mut out,
            "hypervisor",
            match (&k.hypervisor, &k.hypervisor_evidence) {
                (Some(h), Some(e)) => format!("{h} ({e})"),
                (Some(h), None) => h.clone(),
                _ => "none detected".into(),
            },
        );
        let slow = if k.slow_clocksource {
            "  SLOW: every timestamp is a system call"
        } else {
            ""
        };
        row(
            &mut out,
            "clocksource",
            format!(
                "{} (available: {}){slow}",
                fp.clocksource,
                k.available_clocksources.join(" ")
            ),
        );
        row(
            &mut out,
            "ASLR",
            k.aslr.map_or("unreadable".into(), |a| {
                format!(
                    "{a} ({})",
                    ["off", "conservative", "full"]
                        .get(a as usize)
                        .unwrap_or(&"?")
                )
            }),
        );
        row(
            &mut out,
            "THP",
            format!("{} (defrag {})", k.thp_enabled, k.thp_defrag),
        );
        row(
            &mut out,
            "cpufreq",
            match (&k.cpufreq_governor, &k.cpufreq_driver) {
                (None, None) => "not exposed (normal on VMs)".into(),
                (g, d) => format!(
                    "governor {}, driver {}, turbo {}",
                    g.as_deref().unwrap_or("?"),
                    d.as_deref().unwrap_or("?"),
                    k.turbo.map_or("?".into(), |t| if t {
                        "on".to_string()
                    } else {
                        "off".to_string()
                    })
                ),
            },
        );
        row(
            &mut out,
            "cpuidle",
            match (&k.cpuidle_governor, &k.cpuidle_driver) {
                (None, None) => "not exposed".into(),
                (g, d) => format!(
                    "governor {}, driver {}",
                    g.as_deref().unwrap_or("?"),
                    d.as_deref().unwrap_or("?")
                ),
            },
        );
        row(
            &mut out,
            "isolation",
            format!(
                "isolcpus {}, nohz_full {}, rcu_nocbs {}",
                or_dash(&k.isolcpus),
                or_dash(&k.nohz_full),
                or_dash(&k.rcu_nocbs)
            ),
        );
    }
    if let Some(t) = &fp.topology {
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
        row(
            &mut out,
            "topology",
            format!(
                "{} socket(s), {} core(s), {} thread(s) per core, {} NUMA node(s)",
                t.sockets,
                t.cores,
                t.threads_per_core,
                t.nodes.len()
            ),
        );
        row(&mut out, "caches", caches.join(", "));
    }
    row(
        &mut out,
        "steal",
        fp.steal_fraction_since_boot
            .map_or("not accounted".into(), |s| {
                format!("{:.3}% of all CPU time since boot", s * 100.0)
            }),
    );
    row(
        &mut out,
        "EC2",
        match &fp.instance {
            Some(i) => format!(
                "{} {} in {} (AMI {}, placement group {})",
                i.instance_id.as_deref().unwrap_or("?"),
                i.instance_type.as_deref().unwrap_or("?"),
                i.availability_zone.as_deref().unwrap_or("?"),
                i.ami_id.as_deref().unwrap_or("?"),
                i.placement_group.as_deref().unwrap_or("none"),
            ),
            None => "not an EC2 instance (no metadata queried)".into(),
        },
    );

    let _ = writeln!(
        out,
        "\n  CPU  role          node  SMT siblings  interrupts/window  NIC queues"
    );
    for r in &fp.cpu_roles {
        let role = if r.housekeeping {
            "housekeeping"
        } else if r.quiet {
            "quiet"
        } else if !r.rss_queues.is_empty() {
            "RSS"
        } else {
            "busy sibling"
        };
        push_line(
            &mut out,
            format_args!(
                "  {:<4} {:<13} {:<5} {:<13} {:<18} {}",
                r.cpu,
                role,
                r.numa_node.map_or("-".into(), |n| n.to_string()),
                or_dash(&r.smt_siblings),
                r.window_interrupts,
                if r.rss_queues.is_empty() {
                    "-".into()
                } else {
                    r.rss_queues.join(", ")
                }
            ),
        );
    }

    if !fp.nics.is_empty() {
        let _ = writeln!(out, "\n  NICs");
        for n in &fp.nics {
            push_line(
                &mut out,
                format_args!(
                    "  {:<8} driver {}, mtu {}, {} rx / {} tx queues, NUMA node {}, IRQs {}",
                    n.name,
                    n.driver.as_deref().unwrap_or("?"),
                    n.mtu.map_or("?".into(), |m| m.to_string()),
                    n.rx_queues.map_or("?".into(), |q| q.to_string()),
                    n.tx_queues.map_or("?".into(), |q| q.to_string()),
                    n.numa_node.map_or("-".into(), |x| x.to_string()),
                    or_dash(&n.irqs),
                ),
            );
        }
    }
    if !fp.nic_queues.is_empty() {
        let _ = writeln!(
            out,
            "\n  NIC queue interrupts (serviced by = CPUs whose count grew while the agent watched)"
        );
        for q in &fp.nic_queues {
            let name = if q.interface.is_empty() {
                q.device.clone()
            } else {
                format!("{} ({})", q.interface, q.device)
            };
            push_line(
                &mut out,
                format_args!(
                    "  IRQ {:<5} {} {} {}: affinity {}, effective {}, serviced by {} ({} in window)",
                    q.irq,
                    name,
                    q.direction,
                    q.queue.map_or("-".into(), |x| x.to_string()),
                    or_dash(&q.affinity_cpus),
                    or_dash(&q.effective_cpus),
                    or_dash(&q.serviced_by),
                    q.window_count
                ),
            );
        }
    }
    if !fp.block_devices.is_empty() {
        let _ = writeln!(out, "\n  block devices");
        for b in &fp.block_devices {
            push_line(
                &mut out,
                format_args!(
                    "  {:<8} {} {}, {}, scheduler {}{}",
                    b.name,
                    b.model.as_deref().unwrap_or("unknown model"),
                    b.size_bytes.map_or("?".into(), bytes),
                    match b.rotational {
                        Some(true) => "rotational",
                        Some(false) => "non-rotational",
                        None => "rotational?",
                    },
                    b.scheduler.as_deref().unwrap_or("?"),
                    b.ebs_volume_id
                        .as_ref()
                        .map_or(String::new(), |v| format!(", EBS {v}")),
                ),
            );
        }
    }
    let _ = writeln!(out, "\n  host controls (quietbench prepare)");
    for c in &fp.controls {
        push_line(
            &mut out,
            format_args!(
                "  {:<13} {:<13} {}",
                c.control,
                if c.available {
                    "available"
                } else {
                    "unavailable"
                },
                c.detail
            ),
        );
    }
    if !fp.monitors.is_empty() {
        let _ = writeln!(out, "\n  EC2 device monitors (noise)");
        for m in &fp.monitors {
            push_line(
                &mut out,
                format_args!(
                    "  {:<15} {:<8} {:<11} {}",
                    m.monitor,
                    m.device,
                    if m.available {
                        "available"
                    } else {
                        "unavailable"
                    },
                    m.detail
                ),
            );
        }
    }
    if !fp.unreadable.is_empty() {
        let _ = writeln!(out, "\n  not readable here");
        for u in &fp.unreadable {
            push_line(&mut out, format_args!("  - {u}"));
        }
    }
    out
}
