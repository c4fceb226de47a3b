//! Void trials: a probe that measured itself rather than the workload (`http`'s load generator
//! fell behind its schedule) says so with [`quietbench_vocab::VOID`], and the host runs that
//! trial again rather than fail the run or keep a figure of the generator.

use super::HostTask;
use crate::connection::AgentError;
use crate::record::TrialRecord;
use crate::schedule::PlannedTrial;

/// Runs of one trial that may come out void before the host fails: a load generator that
/// falls behind three times running cannot hold the rate on this host.
const VOID_RUNS: u32 = 3;

/// Whether a trial failed as void: the probe's own words start with [`quietbench_vocab::VOID`].
fn is_void(error: &anyhow::Error) -> bool {
    matches!(
        error.downcast_ref::<AgentError>(),
        Some(AgentError::TrialFailed { message, .. })
            if message
                .strip_prefix(quietbench_vocab::PROBE_FAILED)
                .is_some_and(|m| m.starts_with(quietbench_vocab::VOID))
    )
}

impl HostTask {
    /// Runs a trial; one the probe calls void (it measured itself, not the workload: `http`'s
    /// load generator fell behind its schedule) runs again, saying so, up to [`VOID_RUNS`]
    /// times in all, and the last void fails the host. A void trial says nothing about the
    /// server, so running it again favours neither build; failing the run instead threw away
    /// every finished round of a compare for one hiccup of a bursty host.
    pub(super) async fn valid_trial(
        &mut self,
        number: usize,
        planned: &PlannedTrial,
    ) -> anyhow::Result<TrialRecord> {
        let mut runs = 1;
        loop {
            match self.trial(number, planned).await {
                Ok(record) => return Ok(record),
                Err(void) if runs < VOID_RUNS && is_void(&void) => {
                    let variant = self.settings.variants.get(planned.variant);
                    self.progress.say(&format!(
                        "round {} {}: {void:#}; running it again ({runs} of {VOID_RUNS} runs \
                         void)",
                        planned.round,
                        variant.map_or("", |v| v.name.as_str()),
                    ));
                    runs += 1;
                }
                Err(lost) => return self.retry(number, planned, lost).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(message: &str) -> anyhow::Error {
        anyhow::Error::new(AgentError::TrialFailed {
            agent: "127.0.0.1:7700".into(),
            message: message.into(),
        })
    }

    #[test]
    fn only_the_probes_own_void_is_run_again() {
        let void = format!(
            "{}{}the load generator fell behind its schedule by 11.1 ms",
            quietbench_vocab::PROBE_FAILED,
            quietbench_vocab::VOID
        );
        assert!(is_void(&failed(&void)));
        // A command's own stderr that happens to say "void: " is a failure, not a void.
        let exec = format!(
            "{}exit status 1: main.c:3: error: void: no such type",
            quietbench_vocab::PROBE_FAILED
        );
        assert!(!is_void(&failed(&exec)));
        assert!(!is_void(&failed(quietbench_vocab::VOID)));
        assert!(!is_void(&anyhow::anyhow!("{void}")));
    }
}
