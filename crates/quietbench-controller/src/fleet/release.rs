//! `quietbench release`: gives back what killed controllers left, from the fleet ledger.

use std::process::ExitCode;

use super::{Ledger, LedgerEntry, Target};
use crate::execute::Progress;
use crate::record::HostKind;
use crate::run::restore_all;
use crate::session::runtime;

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
}

/// The rule, pure: a live holder keeps its entry; a dead one's tuned hosts are restored.
pub fn action(entry: &LedgerEntry, holder_gone: bool) -> Action {
    match &entry.holder {
        Some(holder) if !holder_gone => Action::Held { pid: holder.pid },
        // No holder recorded: nothing says it is alive, and only the user's word (`--run`)
        // brings us here for it; see `release`.
        _ if entry.tuned && entry.kind == "local" => Action::RestoreHere,
        _ if entry.tuned => Action::Restore,
        _ => Action::Forget,
    }
}

/// Releases every entry whose controller is gone (or only `run`'s). Exit code 1 when a host
/// could not be restored (the entry is kept, so a later `release` retries).
pub fn release(ledger: &Ledger, run: Option<&str>) -> anyhow::Result<ExitCode> {
    let mut entries = Vec::new();
    for entry in ledger.entries()? {
        match entry {
            Ok(entry) => entries.push(entry),
            Err(why) => eprintln!("quietbench: warning: skipping an unreadable ledger file: {why}"),
        }
    }
    if let Some(run) = run {
        entries.retain(|e| e.run_id.starts_with(run));
        if entries.is_empty() {
            anyhow::bail!(
                "no fleet of run {run} is in {}: it was released already, or never recorded",
                ledger.dir().display()
            );
        }
    }
    if entries.is_empty() {
        println!(
            "nothing to release: {} holds no fleet",
            ledger.dir().display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let rt = runtime()?;
    let progress = Progress::new(0);
    let mut all_ok = true;
    for entry in entries {
        let gone = entry.holder.as_ref().is_none_or(|h| h.is_gone());
        match action(&entry, gone) {
            Action::Held { pid } => println!(
                "run {}: its controller (pid {pid}) still runs; left alone",
                entry.run_id
            ),
            Action::Forget => {
                ledger.forget(&entry.run_id)?;
                println!(
                    "run {}: {} fleet of {} host(s) released ({})",
                    entry.run_id,
                    entry.kind,
                    entry.hosts.len(),
                    if entry.kind == "local" {
                        "its local agents ended with their controller; nothing was tuned"
                    } else {
                        "nothing was tuned; the agents keep running"
                    }
                );
            }
            Action::RestoreHere => {
                let agent = crate::local_agent::LocalAgent::start()?;
                let target = super::local_target(&agent, "local agent");
                println!(
                    "run {}: a local agent restored the journal the killed one left",
                    entry.run_id
                );
                if rt.block_on(restore_all(&[target], &progress)) {
                    ledger.forget(&entry.run_id)?;
                    println!("run {}: released", entry.run_id);
                } else {
                    all_ok = false;
                }
            }
            Action::Restore => {
                let targets: Vec<Target> = entry
                    .hosts
                    .iter()
                    .map(|h| Target {
                        address: h.address.clone(),
                        kind: HostKind::Remote,
                        label: h.label.clone(),
                        obtained: h.obtained.clone(),
                        instance_id: h.instance_id.clone(),
                        peer: None,
                    })
                    .collect();
                println!(
                    "run {}: restoring {} tuned host(s) its killed controller left",
                    entry.run_id,
                    targets.len()
                );
                if rt.block_on(restore_all(&targets, &progress)) {
                    ledger.forget(&entry.run_id)?;
                    println!("run {}: released", entry.run_id);
                } else {
                    all_ok = false;
                    println!(
                        "run {}: kept in the ledger: a host could not be restored (see above)",
                        entry.run_id
                    );
                }
            }
        }
    }
    progress.finish();
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
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
