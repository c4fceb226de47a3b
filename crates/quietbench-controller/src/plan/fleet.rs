//! A plan's `[fleet]` table (or its short form, top-level `hosts` and `peers`): where the
//! hosts come from, read into one choice.

use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

use super::error::PlanError;
use super::values::Hosts;
use super::{PlanFile, ec2, locate};

/// `[fleet]`: where the hosts come from, and how the run treats them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FleetFile {
    kind: Spanned<String>,
    hosts: Option<Spanned<Vec<Spanned<String>>>>,
    hosts_file: Option<Spanned<String>>,
    peers: Option<Spanned<Vec<Spanned<String>>>>,
    round_sync: Option<bool>,
    #[serde(default)]
    fail_fast: bool,
    // The EC2 fleet's fields, inline (serde's flatten would lose deny_unknown_fields).
    instance_type: Option<Spanned<String>>,
    count: Option<Spanned<i64>>,
    ami: Option<Spanned<String>>,
    subnets: Option<Spanned<Vec<String>>>,
    security_groups: Option<Spanned<Vec<String>>>,
    allow_from: Option<Spanned<Vec<String>>>,
    key_name: Option<Spanned<String>>,
    region: Option<Spanned<String>>,
    profile: Option<Spanned<String>>,
    endpoint_url: Option<Spanned<String>>,
    placement: Option<Spanned<String>>,
    tenancy: Option<Spanned<String>>,
    threads_per_core: Option<Spanned<i64>>,
    cpu_model: Option<Spanned<String>>,
    cpu_policy: Option<Spanned<String>>,
    max_rerolls: Option<Spanned<i64>>,
    stratify: Option<Spanned<bool>>,
    ttl: Option<Spanned<String>>,
    boot_timeout: Option<Spanned<String>>,
    keep: Option<Spanned<bool>>,
    ca_dir: Option<Spanned<String>>,
}

impl FleetFile {
    /// The EC2 fields, moved out.
    fn ec2_fields(&self) -> ec2::Ec2Fields {
        ec2::Ec2Fields {
            instance_type: self.instance_type.clone(),
            count: self.count.clone(),
            ami: self.ami.clone(),
            subnets: self.subnets.clone(),
            security_groups: self.security_groups.clone(),
            allow_from: self.allow_from.clone(),
            key_name: self.key_name.clone(),
            region: self.region.clone(),
            profile: self.profile.clone(),
            endpoint_url: self.endpoint_url.clone(),
            placement: self.placement.clone(),
            tenancy: self.tenancy.clone(),
            threads_per_core: self.threads_per_core.clone(),
            cpu_model: self.cpu_model.clone(),
            cpu_policy: self.cpu_policy.clone(),
            max_rerolls: self.max_rerolls.clone(),
            stratify: self.stratify.clone(),
            ttl: self.ttl.clone(),
            boot_timeout: self.boot_timeout.clone(),
            keep: self.keep.clone(),
            ca_dir: self.ca_dir.clone(),
        }
    }
}

/// The hosts a plan names, from `hosts` or `[fleet]`, before the address checks.
pub(super) struct FleetChoice<'a> {
    pub(super) hosts: Option<(Hosts, Range<usize>)>,
    pub(super) hosts_file: Option<String>,
    pub(super) peers: Option<&'a Spanned<Vec<Spanned<String>>>>,
    pub(super) round_sync: bool,
    pub(super) fail_fast: bool,
    pub(super) ec2: Option<crate::fleet::ec2::Ec2Spec>,
}

/// Reads `hosts`/`peers` and `[fleet]` into one choice, refusing a plan that names hosts twice
/// or gives a fleet fields its kind does not have.
pub(super) fn fleet_choice<'a>(
    file: &'a PlanFile,
    text: &str,
) -> Result<FleetChoice<'a>, PlanError> {
    let at = |span: Range<usize>| locate(text, span.start);
    let Some(fleet) = &file.fleet else {
        let Some(hosts) = &file.hosts else {
            return Err(PlanError::NoFleet);
        };
        let list = match hosts.get_ref() {
            Hosts::Local => Hosts::Local,
            Hosts::Agents(list) => Hosts::Agents(list.clone()),
        };
        return Ok(FleetChoice {
            hosts: Some((list, hosts.span())),
            hosts_file: None,
            peers: file.peers.as_ref(),
            round_sync: true,
            fail_fast: false,
            ec2: None,
        });
    };
    let table = fleet.get_ref();
    for (given, field) in [
        (file.hosts.as_ref().map(Spanned::span), "hosts"),
        (file.peers.as_ref().map(Spanned::span), "peers"),
    ] {
        if let Some(span) = given {
            return Err(PlanError::GivenTwice {
                field,
                at: at(span),
            });
        }
    }
    let fields = |kind: &'static str, why: &'static str| PlanError::FleetFields {
        kind,
        why,
        at: at(fleet.span()),
    };
    let ec2_fields = table.ec2_fields();
    if table.kind.get_ref() != "ec2"
        && let Some((field, span)) = ec2_fields.first_given()
    {
        return Err(PlanError::Ec2 {
            why: format!(
                "{field} belongs to an EC2 fleet (kind = \"ec2\"), not to kind = {:?}",
                table.kind.get_ref()
            ),
            at: at(span),
        });
    }
    let mut ec2 = None;
    let hosts = match table.kind.get_ref().as_str() {
        "ec2" => {
            if table.hosts.is_some() || table.hosts_file.is_some() || table.peers.is_some() {
                return Err(fields(
                    "ec2",
                    "an EC2 fleet launches its own hosts: remove hosts, hosts_file and peers",
                ));
            }
            ec2 = Some(ec2::spec(&ec2_fields, at(fleet.span()), &at)?);
            None
        }
        "local" => {
            if table.hosts.is_some() || table.hosts_file.is_some() || table.peers.is_some() {
                return Err(fields(
                    "local",
                    "a local fleet starts its own agent (and peer): remove hosts, hosts_file \
                     and peers",
                ));
            }
            Some((Hosts::Local, table.kind.span()))
        }
        "static" => match (&table.hosts, &table.hosts_file) {
            (Some(_), Some(_)) => {
                return Err(fields("static", "give hosts or hosts_file, not both"));
            }
            (None, None) => {
                return Err(fields(
                    "static",
                    "name the running agents: hosts = [\"HOST:PORT\", ...] or \
                     hosts_file = \"FILE\"",
                ));
            }
            (Some(list), None) => Some((Hosts::Agents(list.get_ref().clone()), list.span())),
            (None, Some(_)) => None,
        },
        other => {
            return Err(PlanError::FleetKind {
                kind: other.to_string(),
                at: at(table.kind.span()),
            });
        }
    };
    Ok(FleetChoice {
        hosts,
        hosts_file: table.hosts_file.as_ref().map(|f| f.get_ref().clone()),
        peers: table.peers.as_ref(),
        round_sync: table.round_sync.unwrap_or(true),
        fail_fast: table.fail_fast,
        ec2,
    })
}
