//! The lease: while the controller lives, it moves its run's `quietbench:expires-at` a
//! [`LEASE`](crate::tags::LEASE) ahead every [`RENEW_EVERY`] (never
//! past the `--ttl` deadline). A SIGKILLed controller renews nothing, so its resources expire
//! within one lease and `quietbench gc` takes them.

use std::time::SystemTime;

use aws_sdk_ec2::types::Tag;

use crate::client::{Ec2, explain};
use crate::inventory::{Kind, Scope, list_kinds};
use crate::tags::{EXPIRES_AT, RENEW_EVERY, expiry, format_expiry};

/// Sets the run's resources' expiry to `at`: every instance, volume, host and security group
/// tagged with the run, and `extra` ids (a placement group's id, which listing by name cannot
/// give). Returns how many resources were tagged.
pub async fn set_expiry(
    ec2: &Ec2,
    run: &str,
    extra: &[String],
    at: SystemTime,
) -> anyhow::Result<usize> {
    let kinds = [
        Kind::Instance,
        Kind::Volume,
        Kind::Host,
        Kind::SecurityGroup,
    ];
    let inventory = list_kinds(ec2, &Scope::Run(run.to_string()), &kinds).await;
    if let Some(e) = inventory.unlisted.first() {
        anyhow::bail!("could not list the run's resources: {e}");
    }
    let mut ids: Vec<String> = inventory.resources.into_iter().map(|r| r.id).collect();
    ids.extend(extra.iter().cloned());
    if ids.is_empty() {
        return Ok(0);
    }
    // CreateTags takes up to 1000 resources a call.
    for chunk in ids.chunks(1000) {
        ec2.ec2
            .create_tags()
            .set_resources(Some(chunk.to_vec()))
            .tags(
                Tag::builder()
                    .key(EXPIRES_AT)
                    .value(format_expiry(at))
                    .build(),
            )
            .send()
            .await
            .map_err(|e| explain("ec2:CreateTags", e))?;
    }
    Ok(ids.len())
}

/// Renews the lease every [`RENEW_EVERY`] until aborted. A failed renewal is said and retried
/// at the next tick: a lease outlives two renewals (tags.rs asserts it).
pub fn spawn_renewal(
    ec2: Ec2,
    run: String,
    extra: Vec<String>,
    deadline: SystemTime,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(RENEW_EVERY);
        tick.tick().await; // the first tick is now: the tags at creation are fresh
        loop {
            tick.tick().await;
            let at = expiry(SystemTime::now(), deadline);
            if let Err(e) = set_expiry(&ec2, &run, &extra, at).await {
                eprintln!(
                    "quietbench: warning: could not renew the lease of run {run} ({e:#}); \
                     retrying in {} s",
                    RENEW_EVERY.as_secs()
                );
            }
        }
    })
}
