//! `quietbench release`: gives back what killed controllers left, from the fleet ledger.

use std::process::ExitCode;

use crate::fleet::release::{Action, action};
use crate::fleet::{Ledger, Target, local_target};
use crate::local_agent::LocalAgent;
use crate::progress::Progress;
use crate::record::HostKind;
use crate::restore::restore_all;
use crate::session::runtime;

/// Releases every entry whose controller is gone (or only `run`'s). Exit code 1 when a host
/// could not be restored (the entry is kept, so a later `release` retries).
pub fn release(
    context: &crate::context::CommandContext,
    ledger: &Ledger,
    run: Option<&str>,
) -> anyhow::Result<ExitCode> {
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
            Action::Gc => println!(
                "run {}: an EC2 fleet whose controller is gone: `quietbench gc` terminates its \
                 instances and deletes what it made (at once on this machine)",
                entry.run_id
            ),
            Action::RestoreHere => {
                let agent = LocalAgent::start()?;
                let target = local_target(&agent, "local agent");
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
                        access: context.fleet_access(),
                        peer: None,
                        inner_ip: None,
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
