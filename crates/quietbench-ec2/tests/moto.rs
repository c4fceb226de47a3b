//! The EC2 fleet's resources against a real EC2 API server on loopback: moto's server mode
//! (PyPI `moto[server]`, installed by `.ci/run`). Nothing here reaches the internet, and no
//! address moto invents is ever dialled.

mod common;

use std::time::{Duration, SystemTime};

use common::{any_ami, ec2, launch, start_moto};
use quietbench_ec2::gc::{Selection, collect};
use quietbench_ec2::inventory::{Kind, Scope, list};

fn count(inventory: &quietbench_ec2::inventory::Inventory, kind: Kind, run: &str) -> usize {
    inventory
        .resources
        .iter()
        .filter(|r| r.kind == kind && r.ownership.run == run)
        .count()
}

#[tokio::test]
async fn gc_deletes_expired_runs_and_named_runs_and_keeps_the_rest() {
    let moto = start_moto();
    let ec2 = ec2(&moto);
    assert!(ec2.endpoint_is_loopback());
    let ami = any_ami(&ec2).await;
    let now = SystemTime::now();
    let hour = Duration::from_secs(3600);
    let dead = launch(&ec2, &ami, "run-dead", Some(now - hour), 3).await;
    launch(&ec2, &ami, "run-alive", Some(now + hour), 2).await;
    launch(&ec2, &ami, "run-untimed", None, 1).await;
    assert_eq!(dead.len(), 3);

    let before = list(&ec2, &Scope::All).await;
    assert_eq!(count(&before, Kind::Instance, "run-dead"), 3);
    assert_eq!(count(&before, Kind::Instance, "run-alive"), 2);
    assert_eq!(count(&before, Kind::Instance, "run-untimed"), 1);
    assert!(before.resources.iter().any(|r| r.kind == Kind::Instance
        && r.ownership.owner.as_deref() == Some("arn:aws:sts::123456789012:user/moto")));

    // A dry run says what it would delete, and deletes nothing.
    let dry = collect(&ec2, &Selection::Expired(SystemTime::now()), true, &|_| {}).await;
    assert_eq!(
        dry.deleted
            .iter()
            .filter(|l| l.contains("run-dead"))
            .count(),
        dry.deleted.len()
    );
    assert!(dry.deleted.len() >= 3, "{:?}", dry.deleted);
    assert_eq!(
        count(&list(&ec2, &Scope::All).await, Kind::Instance, "run-dead"),
        3
    );

    // gc takes only what expired; the untimed run is kept with how to delete it.
    let done = collect(&ec2, &Selection::Expired(SystemTime::now()), false, &|_| {}).await;
    for id in &dead {
        assert!(
            done.deleted.contains(&format!("terminated instance {id}")),
            "{:?}",
            done.deleted
        );
    }
    assert!(
        done.kept
            .iter()
            .any(|l| l.contains("run-untimed") && l.contains("gc --run run-untimed")),
        "{:?}",
        done.kept
    );
    let after = list(&ec2, &Scope::All).await;
    assert_eq!(count(&after, Kind::Instance, "run-dead"), 0);
    assert_eq!(count(&after, Kind::Volume, "run-dead"), 0);
    assert_eq!(count(&after, Kind::Instance, "run-alive"), 2);

    // gc --run takes one run whatever its expiry.
    let named = collect(&ec2, &Selection::Run("run-untimed".into()), false, &|_| {}).await;
    assert_eq!(
        named
            .deleted
            .iter()
            .filter(|l| l.starts_with("terminated"))
            .count(),
        1
    );
    let last = list(&ec2, &Scope::Run("run-untimed".into())).await;
    assert_eq!(last.resources.len(), 0, "{:?}", last.resources);
    assert_eq!(
        count(&list(&ec2, &Scope::All).await, Kind::Instance, "run-alive"),
        2
    );
    eprintln!("gc errors against moto: {:?}", done.errors);
}

#[tokio::test]
async fn a_lease_renewal_moves_every_resource_of_the_run_and_no_other() {
    let moto = start_moto();
    let ec2 = ec2(&moto);
    let ami = any_ami(&ec2).await;
    let now = SystemTime::now();
    let minute = Duration::from_secs(60);
    launch(&ec2, &ami, "run-renewed", Some(now + minute), 2).await;
    launch(&ec2, &ami, "run-other", Some(now + minute), 1).await;
    let renewed_to = now + 15 * minute;
    let tagged = quietbench_ec2::fleet::lease::set_expiry(&ec2, "run-renewed", &[], renewed_to)
        .await
        .unwrap();
    // Two instances and their two root volumes.
    assert_eq!(tagged, 4);
    let after = list(&ec2, &Scope::All).await;
    let rounded = |t: SystemTime| t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    for r in after
        .resources
        .iter()
        .filter(|r| r.kind != Kind::PlacementGroup)
    {
        let at = rounded(*r.ownership.expires_at.as_ref().unwrap());
        if r.ownership.run == "run-renewed" {
            assert_eq!(at, rounded(renewed_to), "{r:?}");
        } else {
            assert_eq!(at, rounded(now + minute), "{r:?}");
        }
    }
    assert_eq!(count(&after, Kind::Volume, "run-renewed"), 2);
}
