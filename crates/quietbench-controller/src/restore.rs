//! Restoring tuned hosts: after a `--tune` run, on every exit path, and in `quietbench release`
//! for the hosts a killed controller left tuned.

use crate::connection::AgentConnection;
use crate::fleet::Target;
use crate::progress::Progress;

/// Restores every tuned target, all at once; each failure is reported, none stops the others.
pub async fn restore_all(targets: &[Target], progress: &Progress) -> bool {
    let mut restoring = tokio::task::JoinSet::new();
    for (index, target) in targets.iter().cloned().enumerate() {
        restoring.spawn(async move {
            let restored = async {
                let mut conn = AgentConnection::connect_with(
                    &target.address,
                    target.label.clone(),
                    &target.access,
                )
                .await?;
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
