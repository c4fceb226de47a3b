//! The seam to the EC2 API: the controller links no AWS SDK, so the binary's `ec2` feature
//! hands a [`CapsSource`] (quietbench-ec2) to every command's context that answers DescribeInstanceTypes,
//! DescribeVolumes and DescribePlacementGroups. Without it, or without credentials, or with
//! `--no-aws`, a host's caps are a one-line note, never an error: the run measures the same.

use std::future::Future;
use std::pin::Pin;

use quietbench_proto::v1 as pb;

use super::caps::{HostCaps, InstanceCaps};

/// Where and as whom to call AWS (`--region`, `--profile`, `--endpoint-url`); each `None`
/// leaves the default chain's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AwsTarget {
    /// Region.
    pub region: Option<String>,
    /// Profile of ~/.aws/config.
    pub profile: Option<String>,
    /// Another EC2 endpoint (a test server).
    pub endpoint_url: Option<String>,
}

/// A boxed future, as the seam returns them.
pub type Pending<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What to look up for one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapsQuery {
    /// The host's region (its availability zone less the letter), when known.
    pub region: Option<String>,
    /// The instance type.
    pub instance_type: String,
    /// Its placement group, if any.
    pub placement_group: Option<String>,
    /// Its EBS volumes: (volume id, kernel name of the device).
    pub volumes: Vec<(String, String)>,
}

impl CapsQuery {
    /// From an agent's fingerprint; `None` off EC2 (no instance type from IMDS).
    pub fn from_fingerprint(fp: &pb::Fingerprint) -> Option<Self> {
        let instance = fp.instance.as_ref()?;
        let instance_type = instance.instance_type.clone()?;
        let region = instance
            .availability_zone
            .as_deref()
            .map(|az| {
                az.trim_end_matches(|c: char| c.is_ascii_lowercase())
                    .to_string()
            })
            .filter(|r| !r.is_empty());
        Some(Self {
            region,
            instance_type,
            placement_group: instance.placement_group.clone().filter(|g| !g.is_empty()),
            volumes: fp
                .block_devices
                .iter()
                .filter_map(|d| Some((d.ebs_volume_id.clone()?, d.name.clone())))
                .collect(),
        })
    }
}

/// What the EC2 crate provides.
pub trait CapsSource: Send + Sync {
    /// The caps of `types` (DescribeInstanceTypes), with `aws`'s region, profile and endpoint.
    fn instance_types<'a>(
        &'a self,
        aws: &'a AwsTarget,
        types: &'a [String],
    ) -> Pending<'a, anyhow::Result<Vec<InstanceCaps>>>;

    /// One host's caps: its type's, its volumes' and whether its placement group is a cluster.
    fn host_caps<'a>(
        &'a self,
        aws: &'a AwsTarget,
        query: &'a CapsQuery,
    ) -> Pending<'a, anyhow::Result<HostCaps>>;
}

/// The caps of the host `fp` describes, for a run that looks them up with `aws` from `source`
/// (or why there is no source): `None` off EC2 or with `--no-aws` (`aws` is `None`); a
/// [`HostCaps`] with only a note when the lookup cannot be made (no SDK, no credentials).
pub async fn caps_for_run(
    fp: &pb::Fingerprint,
    aws: Option<&AwsTarget>,
    source: Result<&dyn CapsSource, String>,
) -> Option<HostCaps> {
    let query = CapsQuery::from_fingerprint(fp)?;
    let aws = aws?.clone();
    let note = |why: String| HostCaps {
        notes: vec![format!(
            "caps of {} not looked up: {why} (--no-aws silences this)",
            query.instance_type
        )],
        ..Default::default()
    };
    let source = match source {
        Ok(source) => source,
        Err(why) => return Some(note(why)),
    };
    let aws = AwsTarget {
        region: aws.region.or_else(|| query.region.clone()),
        ..aws
    };
    match source.host_caps(&aws, &query).await {
        Ok(caps) => Some(caps),
        Err(err) => Some(note(format!("{err:#}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_comes_from_the_fingerprint_on_ec2_only() {
        let mut fp = pb::Fingerprint {
            block_devices: vec![
                pb::BlockDevice {
                    name: "nvme0n1".into(),
                    ebs_volume_id: Some("vol-0123".into()),
                    ..Default::default()
                },
                pb::BlockDevice {
                    name: "nvme1n1".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        assert_eq!(CapsQuery::from_fingerprint(&fp), None);
        fp.instance = Some(pb::InstanceIdentity {
            instance_type: Some("r6in.8xlarge".into()),
            availability_zone: Some("us-east-1a".into()),
            placement_group: Some(String::new()),
            ..Default::default()
        });
        let q = CapsQuery::from_fingerprint(&fp).unwrap();
        assert_eq!(q.region.as_deref(), Some("us-east-1"));
        assert_eq!(q.placement_group, None);
        assert_eq!(
            q.volumes,
            vec![("vol-0123".to_string(), "nvme0n1".to_string())]
        );
    }
}
