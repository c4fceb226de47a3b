//! `quietbench run`'s pieces shared by every command that measures: a new run record, the
//! JSON file written after each trial, the tuning `--tune` applies and its restore.

use std::path::Path;
use std::time::SystemTime;

use quietbench_proto::v1 as pb;

use crate::connection::AgentConnection;
use crate::execute::Progress;
use crate::fleet::Target;
use crate::record::{RunRecord, RunSettings};
use crate::report::json;

/// True for probes that need a peer agent.
pub fn needs_peer(probe: &str) -> bool {
    probe.starts_with("net.")
}

/// A new, empty record for a run with these settings.
pub fn new_record(settings: RunSettings) -> RunRecord {
    RunRecord {
        run_id: uuid::Uuid::new_v4().to_string(),
        started_at: SystemTime::now(),
        finished_at: None,
        settings,
        hosts: Vec::new(),
        trials: Vec::new(),
        error: None,
        host_failures: Vec::new(),
        fleet: Vec::new(),
    }
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
/// and THP changes what the probe measures, so both stay explicit (`quietbench prepare`).
pub fn tune_request(cpus: &[u32]) -> pb::PrepareRequest {
    pb::PrepareRequest {
        steer_irqs: true,
        pause_irqbalance: true,
        performance_governor: true,
        probe_cpus: cpus.to_vec(),
        ..Default::default()
    }
}

/// Restores every tuned target, all at once; each failure is reported, none stops the others.
pub async fn restore_all(targets: &[Target], progress: &Progress) -> bool {
    let mut restoring = tokio::task::JoinSet::new();
    for (index, target) in targets.iter().cloned().enumerate() {
        restoring.spawn(async move {
            let restored = async {
                let mut conn =
                    AgentConnection::connect(&target.address, target.label.clone()).await?;
                conn.restore().await
            }
            .await;
            (index, target, restored)
        });
    }
    let mut outcomes = Vec::with_capacity(targets.len());
    while let Some(joined) = restoring.join_next().await {
        match joined {
            Ok(outcome) => outcomes.push(outcome),
            Err(err) => {
                progress.line(&format!("quietbench: error: a restore failed: {err}"));
                return false;
            }
        }
    }
    outcomes.sort_by_key(|(index, _, _)| *index);
    let mut all_ok = true;
    for (_, target, outcome) in outcomes {
        match outcome {
            Ok(response) => progress.line(&format!(
                "restored {}:\n{}",
                target.address,
                crate::report::table::controls(&response.controls).trim_end()
            )),
            Err(err) => {
                all_ok = false;
                progress.line(&format!(
                    "quietbench: error: cannot restore {}: {err}",
                    target.label
                ));
            }
        }
    }
    all_ok
}
