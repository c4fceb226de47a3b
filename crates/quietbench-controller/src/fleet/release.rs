//! The rule of `quietbench release` (the command is [`crate::commands::release`]): what to do
//! with a ledger entry whose controller may be gone.

use super::LedgerEntry;

/// What `release` does with one ledger entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Its controller still runs: leave it alone.
    Held {
        /// The controller's pid.
        pid: u32,
    },
    /// Restore these tuned hosts, then forget the entry.
    Restore,
    /// A local fleet was tuned: its agent died with the controller (SIGKILL, so it could not
    /// undo its changes) and left its journal; an agent started here restores the journal as
    /// it starts.
    RestoreHere,
    /// Nothing on the hosts to undo (a local fleet's agents ended with their controller; a
    /// static fleet that was not tuned): forget the entry.
    Forget,
    /// An EC2 fleet whose controller is gone: its instances are terminated by `quietbench gc`
    /// (on this machine at once, from this entry; elsewhere when the lease expires), which
    /// forgets the entry when done. Restoring hosts about to be terminated is pointless.
    Gc,
}

/// The rule, pure: a live holder keeps its entry; a dead one's tuned hosts are restored.
pub fn action(entry: &LedgerEntry, holder_gone: bool) -> Action {
    match &entry.holder {
        Some(holder) if !holder_gone => Action::Held { pid: holder.pid },
        // No holder recorded: nothing says it is alive, and only the user's word (`--run`)
        // brings us here for it; see `crate::commands::release::release`.
        _ if entry.kind == "ec2" => Action::Gc,
        _ if entry.tuned && entry.kind == "local" => Action::RestoreHere,
        _ if entry.tuned => Action::Restore,
        _ => Action::Forget,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::holder::Holder;

    fn entry(kind: &str, tuned: bool, holder: bool) -> LedgerEntry {
        LedgerEntry {
            run_id: "r".into(),
            kind: kind.into(),
            holder: holder.then(|| Holder {
                host: "h".into(),
                boot_id: "b".into(),
                pid: 42,
                start_ticks: 7,
            }),
            tuned,
            hosts: Vec::new(),
        }
    }

    #[test]
    fn a_dead_controllers_ec2_fleet_is_left_to_gc() {
        assert_eq!(action(&entry("ec2", true, true), true), Action::Gc);
        assert_eq!(action(&entry("ec2", false, true), true), Action::Gc);
        assert_eq!(
            action(&entry("ec2", false, true), false),
            Action::Held { pid: 42 }
        );
    }

    #[test]
    fn a_live_controller_keeps_its_fleet_and_a_dead_ones_tuned_hosts_are_restored() {
        assert_eq!(
            action(&entry("static", true, true), false),
            Action::Held { pid: 42 }
        );
        assert_eq!(action(&entry("static", true, true), true), Action::Restore);
        assert_eq!(action(&entry("static", false, true), true), Action::Forget);
        // A local agent died with its controller; a new one here restores its journal.
        assert_eq!(
            action(&entry("local", true, true), true),
            Action::RestoreHere
        );
        assert_eq!(action(&entry("local", false, true), true), Action::Forget);
        assert_eq!(action(&entry("static", true, false), true), Action::Restore);
    }
}
