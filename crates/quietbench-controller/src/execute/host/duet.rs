//! Two servers in duet (`duet=true`, `compare --probe http --interleave duet`): builds A and B
//! run at the same time on disjoint CPU sets of the measured host, each on its own port, and
//! one load alternates its requests between them, so that a neighbour's burst during the trial
//! hits both alike (Bulej et al.'s duet method, which the exec probe has for commands).
//!
//! Both are started fresh for every trial. The one started first gets the agent's placement
//! (its quiet CPUs, or the first half of `--cpus`); the other the CPUs left beside it (the last
//! of them, away from CPU 0, where the agent's own runtime usually is; or the second half of
//! `--cpus`). The CPUs are not alike on a small host (on 2 vCPUs one of the two is the
//! housekeeping CPU), so A goes first in odd rounds and B in even ones: each build has each
//! CPU set in half the rounds, and the side a CPU favours cancels over an even number of rounds.
//! The load's sides swap with them (`duet_b_first`): the build started first has the first
//! request of each pair and the load's first thread (whose CPU placement picks first), so no
//! asymmetry of the load generator stays with one build either.
//! Server B runs under a name on the agent, registered with the run's kept servers until it is
//! stopped, so a run that dies mid-trial still stops it.

use quietbench_proto::v1 as pb;

use super::HostTask;
use super::servers::{DuetB, TrialServer, keep_name};
use crate::execute::server::{self, Split};
use crate::schedule::PlannedTrial;

/// The CPUs of the server started second: the last `threads` of those left beside the first.
pub fn second_cpus(free: &[u32], threads: usize) -> Result<Vec<u32>, String> {
    if free.len() < threads {
        return Err(format!(
            "a duet needs two disjoint sets of {threads} CPU(s) for its servers: after the first \
             server's, this host has {} left ({:?}); give fewer server_threads or use a larger \
             host",
            free.len(),
            free
        ));
    }
    Ok(free[free.len() - threads..].to_vec())
}

/// The CPUs of the server started first and of the one started second.
type Halves = (Vec<u32>, Vec<u32>);

/// `--cpus` split between the two servers: the first half for the one started first. None
/// without `--cpus` (placement's then).
pub fn given_halves(cpus: &[u32]) -> Result<Option<Halves>, String> {
    if cpus.is_empty() {
        return Ok(None);
    }
    if cpus.len() < 2 || !cpus.len().is_multiple_of(2) {
        return Err(format!(
            "a duet splits --cpus between its two servers: give an even number of CPUs, at \
             least 2 (got {cpus:?})"
        ));
    }
    let (first, second) = cpus.split_at(cpus.len() / 2);
    Ok(Some((first.to_vec(), second.to_vec())))
}

impl HostTask {
    /// Starts both servers of a duet for one trial, A first in odd rounds and B first in even
    /// ones; the load's CPUs are those neither server has.
    pub(super) async fn start_duet(
        &mut self,
        planned: &PlannedTrial,
        split: &Split,
        b: &pb::StartServerRequest,
    ) -> anyhow::Result<TrialServer> {
        let a_first = planned.round % 2 == 1;
        let name = format!(
            "{}/duet-b",
            keep_name(&self.run_id, self.index, planned.variant)
        );
        let threads = split.start.threads.max(1) as usize;
        let halves = given_halves(&self.settings.cpus).map_err(anyhow::Error::msg)?;
        let local = matches!(
            self.target.access,
            crate::connection::AgentAccess::Local { .. }
        );
        self.kept_servers
            .register(&name, self.index, &self.conn, local);
        let (first, second) = if a_first {
            ((split.start.clone(), ""), (b.clone(), name.as_str()))
        } else {
            ((b.clone(), name.as_str()), (split.start.clone(), ""))
        };
        let first_cpus = halves.as_ref().map(|h| h.0.clone()).unwrap_or_default();
        let first = match self.start_command(first.0, first_cpus, first.1).await {
            Ok(started) => started,
            Err(err) => {
                self.stop_duet_b(&name).await;
                return Err(err);
            }
        };
        let second_cpus = match &halves {
            Some((_, given)) => Ok(given.clone()),
            None => second_cpus(&first.response.free_cpus, threads),
        };
        let started = match second_cpus {
            Ok(cpus) => self.start_command(second.0, cpus, second.1).await,
            Err(why) => Err(anyhow::anyhow!(why)),
        };
        let second = match started {
            Ok(started) => started,
            Err(err) => {
                let _ = self.conn.stop_server("").await;
                self.stop_duet_b(&name).await;
                return Err(err);
            }
        };
        let both: Vec<u32> = [first.response.cpus.clone(), second.response.cpus.clone()].concat();
        let load_cpus = if first.same_machine {
            server::load_cpus_beside(&both, &first.response.free_cpus)
        } else {
            Vec::new()
        };
        let (mut a, b) = if a_first {
            (first, second)
        } else {
            (second, first)
        };
        a.load_cpus = load_cpus;
        let b = DuetB {
            started: b,
            name,
            b_first: !a_first,
        };
        Ok(TrialServer::duet(a, b))
    }

    /// Stops server B of a trial's duet: what it cost. None for a trial without one.
    pub(super) async fn duet_b_after_trial(
        &mut self,
        trial_server: &TrialServer,
    ) -> Option<anyhow::Result<pb::StopServerResponse>> {
        let name = &trial_server.duet_b.as_ref()?.name;
        let stopped = self.conn.stop_server(name).await;
        if stopped.is_ok() {
            self.kept_servers.forget(name);
        }
        Some(stopped.map_err(anyhow::Error::from))
    }

    async fn stop_duet_b(&mut self, name: &str) {
        if self.conn.stop_server(name).await.is_ok() {
            self.kept_servers.forget(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_second_server_takes_the_last_cpus_left() {
        assert_eq!(second_cpus(&[0], 1), Ok(vec![0]));
        assert_eq!(second_cpus(&[0, 2, 3, 5], 2), Ok(vec![3, 5]));
        let why = second_cpus(&[0], 2).unwrap_err();
        assert!(why.contains("two disjoint sets of 2 CPU(s)"), "{why}");
        assert!(why.contains("has 1 left ([0])"), "{why}");
    }

    #[test]
    fn given_cpus_are_halved_between_the_servers() {
        assert_eq!(given_halves(&[]), Ok(None));
        assert_eq!(given_halves(&[2, 3]), Ok(Some((vec![2], vec![3]))));
        assert_eq!(
            given_halves(&[4, 5, 6, 7]),
            Ok(Some((vec![4, 5], vec![6, 7])))
        );
        for odd in [&[1][..], &[1, 2, 3]] {
            let why = given_halves(odd).unwrap_err();
            assert!(why.contains("an even number of CPUs"), "{why}");
        }
    }
}
