//! `quietbench run`'s pieces shared by every command that measures: a new run record, the
//! JSON file written after each trial, the tuning `--tune` applies (its restore is
//! [`crate::restore`]).

use std::path::Path;
use std::time::SystemTime;

use quietbench_proto::v1 as pb;

use crate::record::{RunRecord, RunSettings};
use crate::report::json;

/// True for probes that need a peer agent: the other end of a network probe, or the load agent
/// that sends `http`'s or `tcp`'s requests.
pub fn needs_peer(probe: &str) -> bool {
    probe.starts_with("net.") || runs_server(probe)
}

/// True for probes whose measured host runs the user's server and whose peer sends the load
/// (`http` and `tcp`; the trial's part is `execute::server`).
pub fn runs_server(probe: &str) -> bool {
    matches!(probe, "http" | "tcp")
}

/// A new, empty record for a run with these settings, with the id `run_id` or a new one.
pub fn new_record(settings: RunSettings, run_id: Option<String>) -> RunRecord {
    RunRecord::new(
        run_id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
        SystemTime::now(),
        settings,
    )
}

/// Writes the report atomically (temporary file, then rename), so a reader or a crash never
/// sees half a file.
pub fn write_json(path: &Path, run: &RunRecord) -> anyhow::Result<()> {
    use anyhow::Context;
    let report = json::build(run);
    let text = serde_json::to_string_pretty(&report)?;
    let tmp = path.with_extension("json.partial");
    std::fs::write(&tmp, text + "\n").with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("cannot move {} to {}", tmp.display(), path.display()))
}

/// The controls `run --tune` applies: the quiet ones. System-wide ASLR is a security setting
/// and THP changes what the probe measures, so both stay explicit (`quietbench tune`).
pub fn tune_request(cpus: &[u32]) -> pb::PrepareRequest {
    pb::PrepareRequest {
        steer_irqs: true,
        pause_irqbalance: true,
        performance_governor: true,
        probe_cpus: cpus.to_vec(),
        ..Default::default()
    }
}
