//! Deleting what fleets left behind, in dependency order: instances (and the wait until they
//! are terminated: a placement group or a dedicated host in use cannot be deleted, and a volume
//! is attached until then), then volumes, placement groups, dedicated hosts and security
//! groups.

use std::time::{Duration, Instant, SystemTime};

use crate::client::{Ec2, error_code, explain};
use crate::inventory::{Inventory, Kind, Resource, Scope, list_kinds};

/// What to collect.
#[derive(Debug, Clone)]
pub enum Selection {
    /// Every fleet's resources whose expiry is past at this time.
    Expired(SystemTime),
    /// One run's, whatever their expiry.
    Run(String),
}

/// How long `gc` waits for terminating instances before it gives up on what depends on them.
pub const TERMINATION_WAIT: Duration = Duration::from_secs(600);

/// What a collection did.
#[derive(Debug, Default)]
pub struct GcOutcome {
    /// One line per resource deleted (or, on a dry run, that would be).
    pub deleted: Vec<String>,
    /// One line per resource left, with why (not expired, a failed call, ...).
    pub kept: Vec<String>,
    /// Kinds that could not be listed, or calls that failed.
    pub errors: Vec<String>,
}

/// Deletes the selected resources (or, with `dry_run`, says what it would delete), calling
/// `progress` with a line as each step starts.
pub async fn collect(
    ec2: &Ec2,
    selection: &Selection,
    dry_run: bool,
    progress: &dyn Fn(&str),
) -> GcOutcome {
    collect_kinds(ec2, selection, &Kind::ALL, dry_run, progress).await
}

/// [`collect`], of these kinds only: a fleet releasing its run lists only the kinds it made
/// (an EC2 that cannot list one kind then does not fail a release that never used it).
pub async fn collect_kinds(
    ec2: &Ec2,
    selection: &Selection,
    kinds: &[Kind],
    dry_run: bool,
    progress: &dyn Fn(&str),
) -> GcOutcome {
    let scope = match selection {
        Selection::Expired(_) => Scope::All,
        Selection::Run(run) => Scope::Run(run.clone()),
    };
    let Inventory {
        resources,
        unlisted,
    } = list_kinds(ec2, &scope, kinds).await;
    let mut outcome = GcOutcome {
        errors: unlisted
            .into_iter()
            .map(|e| format!("could not list {e}"))
            .collect(),
        ..GcOutcome::default()
    };
    let (chosen, kept): (Vec<Resource>, Vec<Resource>) =
        resources.into_iter().partition(|r| match selection {
            Selection::Expired(now) => r.ownership.expired(*now),
            Selection::Run(_) => true,
        });
    for r in &kept {
        outcome.kept.push(format!(
            "{} {} (run {}): {}",
            r.kind.name(),
            r.id,
            r.ownership.run,
            match &r.ownership.expires_at {
                Ok(at) => format!("expires at {}", crate::tags::format_expiry(*at)),
                Err(why) => format!(
                    "{why}; `quietbench gc --run {}` deletes it",
                    r.ownership.run
                ),
            }
        ));
    }
    if dry_run {
        outcome.deleted = chosen
            .iter()
            .map(|r| {
                format!(
                    "would delete {} {} (run {})",
                    r.kind.name(),
                    r.id,
                    r.ownership.run
                )
            })
            .collect();
        return outcome;
    }

    let of = |kind: Kind| chosen.iter().filter(move |r| r.kind == kind);
    let instances: Vec<String> = of(Kind::Instance).map(|r| r.id.clone()).collect();
    if !instances.is_empty() {
        progress(&format!("terminating {} instance(s)", instances.len()));
        match terminate_and_wait(ec2, &instances).await {
            Ok(()) => outcome.deleted.extend(
                instances
                    .iter()
                    .map(|id| format!("terminated instance {id}")),
            ),
            Err(e) => {
                outcome.errors.push(format!("{e:#}"));
                // What depends on the instances cannot go yet: say so rather than fail each.
                for r in chosen.iter().filter(|r| r.kind != Kind::Instance) {
                    outcome.kept.push(format!(
                        "{} {}: its instances are not terminated yet; run gc again",
                        r.kind.name(),
                        r.id
                    ));
                }
                return outcome;
            }
        }
    }
    for r in of(Kind::Volume) {
        let result = ec2.ec2.delete_volume().volume_id(&r.id).send().await;
        record(
            &mut outcome,
            r,
            result.map(|_| ()).map_err(|e| {
                if error_code(&e) == Some("InvalidVolume.NotFound") {
                    None // deleted with its instance
                } else {
                    Some(explain("ec2:DeleteVolume", e))
                }
            }),
        );
    }
    for r in of(Kind::PlacementGroup) {
        let result = ec2
            .ec2
            .delete_placement_group()
            .group_name(&r.id)
            .send()
            .await;
        record(
            &mut outcome,
            r,
            result
                .map(|_| ())
                .map_err(|e| Some(explain("ec2:DeletePlacementGroup", e))),
        );
    }
    let hosts: Vec<&Resource> = of(Kind::Host).collect();
    if !hosts.is_empty() {
        let result = ec2
            .ec2
            .release_hosts()
            .set_host_ids(Some(hosts.iter().map(|r| r.id.clone()).collect()))
            .send()
            .await;
        match result {
            Ok(out) => {
                for r in &hosts {
                    if out.successful().iter().any(|id| id == &r.id) {
                        outcome.deleted.push(format!("released host {}", r.id));
                    } else {
                        outcome
                            .errors
                            .push(format!("host {} was not released", r.id));
                    }
                }
            }
            Err(e) => outcome
                .errors
                .push(format!("{:#}", explain("ec2:ReleaseHosts", e))),
        }
    }
    for r in of(Kind::SecurityGroup) {
        let result = ec2.ec2.delete_security_group().group_id(&r.id).send().await;
        record(
            &mut outcome,
            r,
            result.map(|_| ()).map_err(|e| {
                if error_code(&e) == Some("InvalidGroup.NotFound") {
                    None
                } else {
                    Some(explain("ec2:DeleteSecurityGroup", e))
                }
            }),
        );
    }
    outcome
}

fn record(outcome: &mut GcOutcome, r: &Resource, result: Result<(), Option<anyhow::Error>>) {
    match result {
        Ok(()) | Err(None) => outcome
            .deleted
            .push(format!("deleted {} {}", r.kind.name(), r.id)),
        Err(Some(e)) => outcome
            .errors
            .push(format!("{} {}: {e:#}", r.kind.name(), r.id)),
    }
}

/// Terminates `ids` and waits until EC2 says each is terminated.
pub async fn terminate_and_wait(ec2: &Ec2, ids: &[String]) -> anyhow::Result<()> {
    ec2.ec2
        .terminate_instances()
        .set_instance_ids(Some(ids.to_vec()))
        .send()
        .await
        .map_err(|e| explain("ec2:TerminateInstances", e))?;
    let deadline = Instant::now() + TERMINATION_WAIT;
    loop {
        let waiting: Vec<String> = crate::states::describe(ec2, ids)
            .await?
            .into_iter()
            .filter(|i| i.state != "terminated")
            .map(|i| i.id)
            .collect();
        if waiting.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "{} instance(s) not terminated after {} s: {}",
                waiting.len(),
                TERMINATION_WAIT.as_secs(),
                waiting.join(", ")
            );
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}
