//! When a host may start its next round. By default hosts wait for each other at round
//! boundaries, so round r runs on every host at about the same time and a fleet-wide time
//! effect (a noisy hour, a neighbour arriving) hits every host alike instead of the hosts that
//! happened to be ahead. A host that failed no longer holds the others back.

/// Which rounds may start, from what each host has finished. Pure: the run's writer owns one
/// and publishes [`RoundGate::released`] to the hosts after every change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundGate {
    /// Per host: the last round it finished (0 before its first).
    finished: Vec<u32>,
    /// Per host: still measuring (not failed, not done with its whole schedule).
    waiting: Vec<bool>,
    /// False with `--no-round-sync`: every round is released at once.
    sync: bool,
}

impl RoundGate {
    /// A gate for `hosts` hosts, none of which has finished a round.
    pub fn new(hosts: usize, sync: bool) -> Self {
        Self {
            finished: vec![0; hosts],
            waiting: vec![true; hosts],
            sync,
        }
    }

    /// The highest round any host may start: one past the slowest measuring host's last
    /// finished round; every round when nothing holds them (no sync, or no host left).
    pub fn released(&self) -> u32 {
        if !self.sync {
            return u32::MAX;
        }
        self.finished
            .iter()
            .zip(&self.waiting)
            .filter(|(_, waiting)| **waiting)
            .map(|(finished, _)| finished.saturating_add(1))
            .min()
            .unwrap_or(u32::MAX)
    }

    /// `host` finished `round` (rounds finish in order; an older report changes nothing).
    pub fn round_finished(&mut self, host: usize, round: u32) {
        if let Some(finished) = self.finished.get_mut(host) {
            *finished = (*finished).max(round);
        }
    }

    /// `host` will finish no more rounds (it failed, or its schedule is done): it stops
    /// holding the others.
    pub fn host_left(&mut self, host: usize) {
        if let Some(waiting) = self.waiting.get_mut(host) {
            *waiting = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slowest_host_sets_the_round_everyone_may_start() {
        let mut gate = RoundGate::new(3, true);
        assert_eq!(gate.released(), 1);
        gate.round_finished(0, 1);
        gate.round_finished(1, 1);
        assert_eq!(gate.released(), 1, "host 2 is still in round 1");
        gate.round_finished(2, 1);
        assert_eq!(gate.released(), 2);
        gate.round_finished(0, 2);
        assert_eq!(gate.released(), 2);
        // A stale, out-of-order report does not move a host back.
        gate.round_finished(0, 1);
        gate.round_finished(1, 2);
        gate.round_finished(2, 2);
        assert_eq!(gate.released(), 3);
    }

    #[test]
    fn a_failed_host_stops_holding_the_others() {
        let mut gate = RoundGate::new(2, true);
        gate.round_finished(0, 1);
        assert_eq!(gate.released(), 1);
        gate.host_left(1);
        assert_eq!(gate.released(), 2);
        gate.host_left(0);
        assert_eq!(
            gate.released(),
            u32::MAX,
            "no host left: nothing to wait for"
        );
    }

    #[test]
    fn without_sync_every_round_is_released() {
        let gate = RoundGate::new(4, false);
        assert_eq!(gate.released(), u32::MAX);
    }

    #[test]
    fn unknown_hosts_are_ignored() {
        let mut gate = RoundGate::new(1, true);
        gate.round_finished(7, 3);
        gate.host_left(7);
        assert_eq!(gate, RoundGate::new(1, true));
    }
}
