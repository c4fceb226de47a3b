//! The commands of the EC2 fleet's resources: `quietbench fleet ls` and `quietbench gc`.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::{Args, Subcommand};

use crate::gc::{Selection, collect};
use crate::inventory::{Scope, list};
use crate::tags::format_expiry;
use crate::{Ec2, Ec2Options};

pub use quietbench_cli::AwsArgs;

fn options(aws: &AwsArgs) -> Ec2Options {
    Ec2Options {
        region: aws.region.clone(),
        profile: aws.profile.clone(),
        endpoint_url: aws.endpoint_url.clone(),
    }
}

/// `quietbench fleet ...`.
#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// List the live resources of EC2 fleets (instances, volumes, placement groups, hosts), with
    /// their run, age and expiry
    Ls(LsArgs),
}

/// `quietbench fleet ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// Only this run's resources
    #[arg(long, value_name = "RUN")]
    pub run: Option<String>,
    #[command(flatten)]
    pub aws: AwsArgs,
}

/// `quietbench gc`.
#[derive(Debug, Args)]
pub struct GcArgs {
    /// Delete this run's resources now, whatever their expiry
    #[arg(long, value_name = "RUN")]
    pub run: Option<String>,
    /// Say what would be deleted, delete nothing
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub aws: AwsArgs,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn age(since: Option<SystemTime>, now: SystemTime) -> String {
    since
        .and_then(|t| now.duration_since(t).ok())
        .map_or("-".into(), |d| {
            humantime::format_duration(Duration::from_secs(d.as_secs() / 60 * 60)).to_string()
        })
}

/// Runs `fleet ls`.
pub fn fleet(command: FleetCommand) -> ExitCode {
    let FleetCommand::Ls(args) = command;
    report(runtime().and_then(|rt| {
        rt.block_on(async {
            let ec2 = Ec2::connect(&options(&args.aws)).await?;
            let scope = args.run.clone().map_or(Scope::All, Scope::Run);
            let inventory = list(&ec2, &scope).await;
            let now = SystemTime::now();
            println!(
                "{:<16} {:<22} {:<36} {:<14} {:>8}  {:<22} owner",
                "kind", "id", "run", "state", "age", "expires"
            );
            for r in &inventory.resources {
                let expires = match &r.ownership.expires_at {
                    Ok(at) if *at <= now => format!("{} (expired)", format_expiry(*at)),
                    Ok(at) => format_expiry(*at),
                    Err(why) => why.clone(),
                };
                println!(
                    "{:<16} {:<22} {:<36} {:<14} {:>8}  {:<22} {}",
                    r.kind.name(),
                    r.id,
                    r.ownership.run,
                    r.state,
                    age(r.created, now),
                    expires,
                    r.ownership.owner.as_deref().unwrap_or("-")
                );
            }
            println!(
                "{} resource(s) in {}",
                inventory.resources.len(),
                ec2.region()
            );
            for e in &inventory.unlisted {
                eprintln!("quietbench: warning: could not list {e}");
            }
            Ok(inventory.unlisted.is_empty())
        })
    }))
}

/// The EC2 runs in this machine's fleet ledger whose controller is gone (killed before it
/// released its fleet): collected at once, without waiting for their lease to expire.
pub fn orphaned_runs(
    entries: &[quietbench_controller::fleet::LedgerEntry],
    gone: impl Fn(&quietbench_controller::fleet::LedgerEntry) -> bool,
) -> Vec<String> {
    entries
        .iter()
        .filter(|e| e.kind == "ec2" && gone(e))
        .map(|e| e.run_id.clone())
        .collect()
}

/// Runs `gc`.
pub fn gc(args: GcArgs) -> ExitCode {
    report(runtime().and_then(|rt| {
        rt.block_on(async {
            let ec2 = Ec2::connect(&options(&args.aws)).await?;
            let selection = match &args.run {
                Some(run) => Selection::Run(run.clone()),
                None => Selection::Expired(SystemTime::now()),
            };
            let ledger = quietbench_controller::fleet::Ledger::default_location();
            let orphans = if args.run.is_none() {
                let entries: Vec<_> = ledger.entries()?.into_iter().flatten().collect();
                orphaned_runs(&entries, |e| e.holder.as_ref().is_none_or(|h| h.is_gone()))
            } else {
                Vec::new()
            };
            let say = |line: &str| eprintln!("quietbench: {line}");
            let mut outcome = collect(&ec2, &selection, args.dry_run, &say).await;
            for run in &orphans {
                say(&format!(
                    "run {run}: its controller on this machine is gone; collecting its \
                     resources now, not when its lease expires"
                ));
                let of_run = collect(&ec2, &Selection::Run(run.clone()), args.dry_run, &say).await;
                if of_run.errors.is_empty() && !args.dry_run {
                    ledger.forget(run)?;
                }
                outcome.deleted.extend(of_run.deleted);
                outcome.kept.extend(of_run.kept);
                outcome.errors.extend(of_run.errors);
            }
            for line in &outcome.deleted {
                println!("{line}");
            }
            for line in &outcome.kept {
                println!("kept {line}");
            }
            for line in &outcome.errors {
                eprintln!("quietbench: error: {line}");
            }
            println!(
                "{} {} resource(s), kept {}, {} error(s)",
                if args.dry_run {
                    "would delete"
                } else {
                    "deleted"
                },
                outcome.deleted.len(),
                outcome.kept.len(),
                outcome.errors.len()
            );
            Ok(outcome.errors.is_empty())
        })
    }))
}

fn report(result: anyhow::Result<bool>) -> ExitCode {
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("quietbench: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod orphan_tests {
    use quietbench_controller::fleet::LedgerEntry;

    use super::orphaned_runs;

    fn entry(run: &str, kind: &str) -> LedgerEntry {
        LedgerEntry {
            run_id: run.into(),
            kind: kind.into(),
            holder: None,
            tuned: false,
            hosts: Vec::new(),
        }
    }

    #[test]
    fn only_ec2_runs_whose_controller_is_gone_are_collected_early() {
        let entries = [
            entry("dead-ec2", "ec2"),
            entry("live-ec2", "ec2"),
            entry("dead-static", "static"),
        ];
        let gone = |e: &LedgerEntry| e.run_id.starts_with("dead");
        assert_eq!(orphaned_runs(&entries, gone), ["dead-ec2"]);
    }
}
