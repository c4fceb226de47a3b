//! What the fleets have left on EC2: every instance, volume, placement group and dedicated host
//! that carries a run tag, with its owner, age and expiry (`quietbench fleet ls`, and what
//! `quietbench gc` chooses from).

use std::time::SystemTime;

use aws_sdk_ec2::types::{Filter, Tag};

use crate::client::{Ec2, explain};
use crate::tags::{Ownership, RUN};

/// A kind of resource a fleet creates, in the order `gc` deletes them (instances first: a
/// placement group or a dedicated host cannot go while an instance uses it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// An EC2 instance.
    Instance,
    /// An EBS volume.
    Volume,
    /// A placement group (named, not by id).
    PlacementGroup,
    /// A dedicated host.
    Host,
    /// A security group made for a run (`--allow-from`).
    SecurityGroup,
}

impl Kind {
    /// As `fleet ls` prints it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Instance => "instance",
            Kind::Volume => "volume",
            Kind::PlacementGroup => "placement-group",
            Kind::Host => "host",
            Kind::SecurityGroup => "security-group",
        }
    }

    /// Every kind, in deletion order.
    pub const ALL: [Kind; 5] = [
        Kind::Instance,
        Kind::Volume,
        Kind::PlacementGroup,
        Kind::Host,
        Kind::SecurityGroup,
    ];
}

/// One tagged resource.
#[derive(Debug, Clone)]
pub struct Resource {
    /// What it is.
    pub kind: Kind,
    /// Its id (a placement group's name).
    pub id: String,
    /// Its state as EC2 words it ("running", "available", ...).
    pub state: String,
    /// When it was created, where EC2 says.
    pub created: Option<SystemTime>,
    /// Its tags' say.
    pub ownership: Ownership,
}

/// Which resources to list.
#[derive(Debug, Clone)]
pub enum Scope {
    /// Every fleet's.
    All,
    /// One run's.
    Run(String),
}

impl Scope {
    fn filter(&self) -> Filter {
        match self {
            Scope::All => Filter::builder().name("tag-key").values(RUN).build(),
            Scope::Run(run) => Filter::builder()
                .name(format!("tag:{RUN}"))
                .values(run)
                .build(),
        }
    }
}

/// The listing, and the kinds that could not be listed (a failed call is reported, not taken
/// to mean "none").
#[derive(Debug, Default)]
pub struct Inventory {
    /// Resources found, in deletion order.
    pub resources: Vec<Resource>,
    /// One line per kind that could not be listed.
    pub unlisted: Vec<String>,
}

fn ownership(tags: &[Tag]) -> Option<Ownership> {
    Ownership::from_tags(
        tags.iter()
            .filter_map(|t| Some((t.key()?, t.value().unwrap_or_default()))),
    )
}

fn time(t: Option<&aws_sdk_ec2::primitives::DateTime>) -> Option<SystemTime> {
    t.and_then(|t| SystemTime::try_from(*t).ok())
}

/// Lists the tagged resources of `scope`. Terminated instances are left out: they are gone,
/// whatever DescribeInstances still shows for an hour.
pub async fn list(ec2: &Ec2, scope: &Scope) -> Inventory {
    list_kinds(ec2, scope, &Kind::ALL).await
}

/// [`list`], of these kinds only (a run's release lists the kinds it created).
pub async fn list_kinds(ec2: &Ec2, scope: &Scope, kinds: &[Kind]) -> Inventory {
    let mut inventory = Inventory::default();
    for kind in Kind::ALL.into_iter().filter(|k| kinds.contains(k)) {
        let (found, what) = match kind {
            Kind::Instance => (instances(ec2, scope).await, "instances"),
            Kind::Volume => (volumes(ec2, scope).await, "volumes"),
            Kind::PlacementGroup => (placement_groups(ec2, scope).await, "placement groups"),
            Kind::Host => (hosts(ec2, scope).await, "dedicated hosts"),
            Kind::SecurityGroup => (security_groups(ec2, scope).await, "security groups"),
        };
        match found {
            Ok(found) => inventory.resources.extend(found),
            Err(e) => inventory.unlisted.push(format!("{what}: {e:#}")),
        }
    }
    inventory
        .resources
        .sort_by(|a, b| (a.kind, &a.id).cmp(&(b.kind, &b.id)));
    inventory
}

async fn instances(ec2: &Ec2, scope: &Scope) -> anyhow::Result<Vec<Resource>> {
    let mut pages = ec2
        .ec2
        .describe_instances()
        .filters(scope.filter())
        .into_paginator()
        .send();
    let mut found = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| explain("ec2:DescribeInstances", e))?;
        for instance in page.reservations().iter().flat_map(|r| r.instances()) {
            let state = instance
                .state()
                .and_then(|s| s.name())
                .map_or("unknown", |n| n.as_str())
                .to_string();
            if state == "terminated" {
                continue;
            }
            let (Some(id), Some(ownership)) = (instance.instance_id(), ownership(instance.tags()))
            else {
                continue;
            };
            found.push(Resource {
                kind: Kind::Instance,
                id: id.to_string(),
                state,
                created: time(instance.launch_time()),
                ownership,
            });
        }
    }
    Ok(found)
}

async fn volumes(ec2: &Ec2, scope: &Scope) -> anyhow::Result<Vec<Resource>> {
    let mut pages = ec2
        .ec2
        .describe_volumes()
        .filters(scope.filter())
        .into_paginator()
        .send();
    let mut found = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| explain("ec2:DescribeVolumes", e))?;
        for volume in page.volumes() {
            let (Some(id), Some(ownership)) = (volume.volume_id(), ownership(volume.tags())) else {
                continue;
            };
            found.push(Resource {
                kind: Kind::Volume,
                id: id.to_string(),
                state: volume.state().map_or("unknown", |s| s.as_str()).to_string(),
                created: time(volume.create_time()),
                ownership,
            });
        }
    }
    Ok(found)
}

async fn placement_groups(ec2: &Ec2, scope: &Scope) -> anyhow::Result<Vec<Resource>> {
    let out = ec2
        .ec2
        .describe_placement_groups()
        .filters(scope.filter())
        .send()
        .await
        .map_err(|e| explain("ec2:DescribePlacementGroups", e))?;
    Ok(out
        .placement_groups()
        .iter()
        .filter_map(|g| {
            Some(Resource {
                kind: Kind::PlacementGroup,
                id: g.group_name()?.to_string(),
                state: g.state().map_or("unknown", |s| s.as_str()).to_string(),
                created: None,
                ownership: ownership(g.tags())?,
            })
        })
        .collect())
}

async fn hosts(ec2: &Ec2, scope: &Scope) -> anyhow::Result<Vec<Resource>> {
    let mut pages = ec2
        .ec2
        .describe_hosts()
        .filter(scope.filter())
        .into_paginator()
        .send();
    let mut found = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| explain("ec2:DescribeHosts", e))?;
        for host in page.hosts() {
            let state = host.state().map_or("unknown", |s| s.as_str()).to_string();
            if state == "released" {
                continue;
            }
            let (Some(id), Some(ownership)) = (host.host_id(), ownership(host.tags())) else {
                continue;
            };
            found.push(Resource {
                kind: Kind::Host,
                id: id.to_string(),
                state,
                created: time(host.allocation_time()),
                ownership,
            });
        }
    }
    Ok(found)
}

async fn security_groups(ec2: &Ec2, scope: &Scope) -> anyhow::Result<Vec<Resource>> {
    let mut pages = ec2
        .ec2
        .describe_security_groups()
        .filters(scope.filter())
        .into_paginator()
        .send();
    let mut found = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| explain("ec2:DescribeSecurityGroups", e))?;
        for group in page.security_groups() {
            let (Some(id), Some(ownership)) = (group.group_id(), ownership(group.tags())) else {
                continue;
            };
            found.push(Resource {
                kind: Kind::SecurityGroup,
                id: id.to_string(),
                state: "available".into(),
                created: None,
                ownership,
            });
        }
    }
    Ok(found)
}
