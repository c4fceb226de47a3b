//! The terminal report: the host line, the placement line, one row per probe and metric, and
//! for a multi-host run where its spread comes from.

use std::fmt::Write;

use hdrhistogram::Histogram;
use quietbench_proto::v1 as pb;
use quietbench_record::record::queries::{
    counted, metric_keys, metric_values, placement_matches_plan,
};
use quietbench_record::record::{HostRecord, RunRecord, missing_trials};
use quietbench_record::verdicts::spread::fleet_spread;
use quietbench_stats::summarize;

use super::remote_text::escape_remote;
use super::units::format_value;

/// A host's caps, as looked up: "caps of HOST: r6i.8xlarge: EBS 1250 MB/s, 40000 IOPS; network
/// 12.5 Gigabit; nvme1n1 = vol-… gp3 16000 IOPS 1000 MiB/s", then any note, one per line.
pub fn caps_lines(address: &str, caps: &quietbench_record::limits::HostCaps) -> String {
    let mut parts = Vec::new();
    if let Some(i) = &caps.instance {
        let mut s = i.instance_type.clone();
        if let Some(e) = &i.ebs {
            let burst = |base: f64, max: f64, unit: &str| {
                if max > base {
                    format!("{base} {unit} (burst {max})")
                } else {
                    format!("{base} {unit}")
                }
            };
            let _ = write!(
                s,
                ": EBS {}, {}",
                burst(e.baseline_mb_per_s, e.maximum_mb_per_s, "MB/s"),
                burst(e.baseline_iops, e.maximum_iops, "IOPS")
            );
        }
        if let Some(p) = &i.network.performance {
            let _ = write!(s, "; network {p}");
        }
        parts.push(s);
    }
    for v in &caps.volumes {
        let mut s = format!(
            "{} = {} {} {} GiB",
            v.device.as_deref().unwrap_or("?"),
            v.volume_id,
            v.volume_type,
            v.size_gib
        );
        if let Some(iops) = v.iops {
            let _ = write!(s, " {iops} IOPS");
        }
        if let Some(mib) = v.throughput_mib_per_s {
            let _ = write!(s, " {mib} MiB/s");
        }
        if let Some(snap) = &v.snapshot_id {
            let _ = write!(s, ", restored from {snap}");
            match &v.prewarm {
                Some(p) => {
                    let _ = write!(s, " (pre-warmed: {})", p.summary());
                }
                None if v.needs_prewarm() => s.push_str(" (cold: not pre-warmed)"),
                None => {}
            }
        }
        parts.push(s);
    }
    if caps.cluster_placement_group {
        parts.push("in a cluster placement group".into());
    }
    let mut out = String::new();
    if !parts.is_empty() {
        let _ = write!(out, "caps of {address}: {}", parts.join("; "));
        if !caps.source.is_empty() {
            let _ = write!(out, " ({})", caps.source);
        }
    }
    for note in &caps.notes {
        if !out.is_empty() {
            out.push('\n');
        }
        let _ = write!(out, "caps of {address}: {note}");
    }
    out
}

/// "what binds" lines: each disk and network result against its cap.
pub fn binding_cap_lines(run: &RunRecord) -> String {
    let found = quietbench_record::verdicts::binding::binding_caps(run);
    let mut out = String::new();
    if found.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\nwhat binds (instance and volume caps; docs/caps.md):"
    );
    for b in found {
        let name = if b.variant == b.probe {
            b.probe.clone()
        } else {
            format!("{}: {}", b.variant, b.probe)
        };
        let _ = writeln!(out, "  {name} on {}: {}", b.address, b.attribution.line);
        if let Some(next) = &b.attribution.next {
            let _ = writeln!(out, "    next: {next}");
        }
        for c in &b.attribution.caveats {
            let _ = writeln!(out, "    note: {c}");
        }
    }
    out
}

/// One line describing a host: address, CPU model and the facts that split results. The
/// agent's words are escaped ([`escape_remote`]): a CPU model may hold anything.
pub fn host_line(host: &HostRecord) -> String {
    escape_remote(&host_line_raw(host)).into_owned()
}

fn host_line_raw(host: &HostRecord) -> String {
    let fp = &host.fingerprint;
    let mut line = format!("host {} ({}): ", host.address, host.kind.as_str());
    match &fp.cpu {
        Some(cpu) => {
            line.push_str(if cpu.model_name.is_empty() {
                "unknown CPU model"
            } else {
                &cpu.model_name
            });
            let mut id = cpu.vendor.clone();
            if let Some(f) = cpu.family {
                let _ = write!(id, " family {f}");
            }
            if let Some(m) = cpu.model {
                let _ = write!(id, " model {m}");
            }
            if let Some(s) = cpu.stepping {
                let _ = write!(id, " stepping {s}");
            }
            if let Some(mc) = &cpu.microcode {
                let _ = write!(id, ", microcode {mc}");
            }
            let _ = write!(line, " [{}]", id.trim());
        }
        None => line.push_str("CPU model unreadable"),
    }
    let _ = write!(line, ", {} CPUs", fp.logical_cpus);
    if !fp.kernel_release.is_empty() {
        let _ = write!(line, ", kernel {}", fp.kernel_release);
    }
    if !fp.clocksource.is_empty() {
        let _ = write!(line, ", clocksource {}", fp.clocksource);
    }
    line
}

/// "quiet-first: thread 0 on CPU 1 (read back CPU 1), housekeeping CPU 0", with a warning
/// where the read-back differs from the plan.
pub fn placement_line(p: &pb::Placement) -> String {
    let threads: Vec<String> = p
        .threads
        .iter()
        .map(|t| {
            let affinity: Vec<String> = t.affinity_cpus.iter().map(u32::to_string).collect();
            format!(
                "thread {} on CPU {} (affinity {}, seen on CPU {})",
                t.thread_index,
                t.planned_cpu,
                affinity.join(","),
                t.observed_cpu
            )
        })
        .collect();
    let housekeeping: Vec<String> = p.housekeeping_cpus.iter().map(u32::to_string).collect();
    // The agent's words (policy, notes) escaped; the line breaks are ours.
    let mut line = format!(
        "placement {}: {}; housekeeping CPU {}",
        escape_remote(&p.policy),
        threads.join("; "),
        housekeeping.join(",")
    );
    if p.policy != "unpinned" && !placement_matches_plan(p) {
        line.push_str("  WARNING: read-back placement differs from the plan");
    }
    if !p.peer_flow_cpus.is_empty() {
        let peer: Vec<String> = p
            .peer_flow_cpus
            .iter()
            .map(|f| {
                let s = if f.flows == 1 { "" } else { "s" };
                format!("CPU {} ({} flow{s})", f.cpu, f.flows)
            })
            .collect();
        line.push_str("\n  peer readers, each on its flow's CPU: ");
        line.push_str(&peer.join(", "));
    }
    for note in &p.notes {
        line.push_str("\n  placement note: ");
        line.push_str(&escape_remote(note));
    }
    line
}

/// The tuning steps' reports, one per line: control, target, outcome, detail.
pub fn controls(reports: &[pb::ControlReport]) -> String {
    use pb::control_report::Outcome;
    let mut out = String::new();
    let width = reports
        .iter()
        .map(|r| r.target.chars().count())
        .max()
        .unwrap_or(0);
    for r in reports {
        let outcome = match Outcome::try_from(r.outcome) {
            Ok(Outcome::Applied) => "applied",
            Ok(Outcome::Skipped) => "skipped",
            Ok(Outcome::Failed) => "FAILED",
            _ => "unknown",
        };
        let line = format!(
            "  {:<13} {:<width$}  {:<8} {}",
            r.control, r.target, outcome, r.detail
        );
        let _ = writeln!(out, "{}", escape_remote(&line));
    }
    out
}

/// The table of a run: a header, the hosts, placement, and one row per probe and metric.
pub fn render(run: &RunRecord) -> String {
    let mut out = String::new();
    for line in &run.fleet {
        let _ = writeln!(out, "{line}");
    }
    for host in &run.hosts {
        let _ = writeln!(out, "{}", host_line(host));
        if let Some(caps) = host.caps.as_ref().map(|c| caps_lines(&host.address, c))
            && !caps.is_empty()
        {
            let _ = writeln!(out, "{caps}");
        }
    }
    for (i, host) in run.hosts.iter().enumerate() {
        if let Some(p) = run
            .trials
            .iter()
            .find(|t| t.host == i)
            .and_then(|t| t.placement.as_ref())
        {
            let _ = writeln!(out, "{} {}", host.address, placement_line(p));
        }
    }
    for (i, host) in run.hosts.iter().enumerate() {
        if let Some(line) = noise_line(run, i) {
            let _ = writeln!(out, "{} {line}", host.address);
        }
    }
    let header = [
        "probe", "metric", "unit", "trials", "mean", "median", "CV", "p50", "p99", "p99.9",
    ];
    let mut rows: Vec<[String; 10]> = Vec::new();
    for (variant, probe, metric, unit) in metric_keys(&run.trials) {
        let values = metric_values(&run.trials, &variant, &metric);
        // gRPC calls are counted by status code, sixteen counters: the codes no trial got
        // would be a screen of zeros (the JSON keeps them).
        if quietbench_proto::metrics::GRPC_ERRORS.contains(&metric.as_str())
            && values.iter().all(|v| *v == 0.0)
        {
            continue;
        }
        let Some(s) = summarize(&values) else {
            continue;
        };
        let merged = merged_histogram(run, &variant, &metric);
        let pct = |q: f64| match &merged {
            Some(h) if !h.is_empty() => format_value(h.value_at_quantile(q) as f64, &unit),
            _ => "-".to_string(),
        };
        rows.push([
            if variant == probe {
                probe.clone()
            } else {
                format!("{variant}: {probe}")
            },
            escape_remote(&metric).into_owned(),
            escape_remote(&unit).into_owned(),
            s.n.to_string(),
            format_value(s.mean, &unit),
            format_value(s.median, &unit),
            s.cv.map_or("-".into(), |cv| format!("{:.2}%", cv * 100.0)),
            pct(0.5),
            pct(0.99),
            pct(0.999),
        ]);
    }
    let mut widths = header.map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let _ = writeln!(out);
    let mut write_row = |cells: &[String]| {
        let line: Vec<String> = cells
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(i, (c, w))| {
                let pad = w.saturating_sub(c.chars().count());
                if i < 3 {
                    format!("{c}{}", " ".repeat(pad))
                } else {
                    format!("{}{c}", " ".repeat(pad))
                }
            })
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    };
    write_row(&header.map(String::from));
    for row in &rows {
        write_row(row);
    }
    // The rows above pool every host; where hosts differ, say how and why.
    out.push_str(&binding_cap_lines(run));
    out.push_str(&super::spread::render(&fleet_spread(run)));
    out.push_str(&missing_lines(run));
    out
}

/// "missing: 6 trial(s) on 127.0.0.1:7701 (rounds 3-5): lost agent ..." for each host that did
/// not finish its schedule; the summary above uses what finished.
pub fn missing_lines(run: &RunRecord) -> String {
    let mut out = String::new();
    let missing = missing_trials(run);
    if missing.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\nmissing trials (the summary uses what finished; quietbench resume {} runs them):",
        run.run_id
    );
    for m in missing {
        let address = run.hosts.get(m.host).map_or("?", |h| h.address.as_str());
        let first = m.trials.first().map_or(0, |t| t.round);
        let last = m.trials.last().map_or(0, |t| t.round);
        let rounds = if first == last {
            format!("round {first}")
        } else {
            format!("rounds {first}-{last}")
        };
        let _ = writeln!(
            out,
            "  {address}: {} trial(s), {rounds}: {}",
            m.trials.len(),
            escape_remote(&m.reason)
        );
    }
    out
}

/// "noise (median of 3 trials): steal 0.0%, others on probe CPUs 0.1%, 212 interrupts/s, ..."
fn noise_line(run: &RunRecord, host: usize) -> Option<String> {
    let noises: Vec<&pb::NoiseSample> = run
        .trials
        .iter()
        .filter(|t| t.host == host)
        .filter_map(|t| t.noise.as_ref())
        .collect();
    if noises.is_empty() {
        return None;
    }
    let median = |values: Vec<f64>| summarize(&values).map(|s| s.median);
    let mut parts = Vec::new();
    if let Some(steal) = median(noises.iter().filter_map(|n| n.steal_fraction).collect()) {
        parts.push(format!("steal {:.2}%", steal * 100.0));
    }
    let foreign: Vec<f64> = noises
        .iter()
        .filter_map(|n| quietbench_record::warnings::foreign_share(n))
        .map(|(f, _)| f)
        .collect();
    if let Some(f) = median(foreign) {
        parts.push(format!("others on probe CPUs {:.2}%", f * 100.0));
    }
    let per_sec = |count: Option<u64>, n: &pb::NoiseSample| {
        count
            .filter(|_| n.elapsed_ns > 0)
            .map(|c| c as f64 / (n.elapsed_ns as f64 / 1e9))
    };
    if let Some(irq) = median(
        noises
            .iter()
            .filter_map(|n| per_sec(n.interrupts, n))
            .collect(),
    ) {
        parts.push(format!("{irq:.0} interrupts/s"));
    }
    if let Some(sw) = median(
        noises
            .iter()
            .filter_map(|n| per_sec(n.involuntary_switches, n))
            .collect(),
    ) {
        parts.push(format!("{sw:.1} involuntary switches/s"));
    }
    let migrations: Option<u64> = noises.iter().map(|n| n.migrations).sum();
    if let Some(m) = migrations {
        parts.push(format!("{m} migrations"));
    }
    (!parts.is_empty()).then(|| {
        format!(
            "noise (median of {} trials): {}",
            noises.len(),
            parts.join(", ")
        )
    })
}

fn merged_histogram(run: &RunRecord, variant: &str, metric: &str) -> Option<Histogram<u64>> {
    // Auto-resizing, so histograms of any range (other agents, other versions) merge.
    let mut merged = Histogram::<u64>::new(3).ok()?;
    for t in counted(&run.trials, variant) {
        let found = t.metrics.iter().find(|m| m.name == metric);
        if let Some(h) = found.and_then(|m| m.histogram.as_ref()) {
            merged.add(&h.hist).ok()?;
        }
    }
    (!merged.is_empty()).then_some(merged)
}
