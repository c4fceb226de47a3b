//! The caps of instances and volumes from the EC2 API, for the controller's attribution
//! (`quietbench_controller::limits`): DescribeInstanceTypes for the instance type's EBS and
//! network figures, DescribeVolumes for each volume's type, size, provisioned IOPS and
//! throughput and snapshot, DescribeVolumeStatus for its initialization state where EC2 reports
//! one, and DescribePlacementGroups for whether the host is in a cluster group.

use std::collections::HashMap;
use std::sync::Mutex;

use aws_sdk_ec2::types::{InstanceType, InstanceTypeInfo, PlacementStrategy, Volume};
use quietbench_controller::limits::lookup::{AwsTarget, CapsQuery, CapsSource, Pending};
use quietbench_controller::limits::{
    EbsCaps, HostCaps, InstanceCaps, NetworkCaps, NetworkCard, VolumeInfo,
};

use crate::client::{Ec2, Ec2Options, explain};

/// An instance type's caps from its DescribeInstanceTypes entry.
pub fn instance_caps(info: &InstanceTypeInfo) -> Option<InstanceCaps> {
    let instance_type = info.instance_type()?.as_str().to_string();
    let ebs = info
        .ebs_info()
        .and_then(|e| e.ebs_optimized_info())
        .and_then(|o| {
            Some(EbsCaps {
                baseline_mb_per_s: o.baseline_throughput_in_m_bps()?,
                maximum_mb_per_s: o.maximum_throughput_in_m_bps()?,
                baseline_iops: f64::from(o.baseline_iops()?),
                maximum_iops: f64::from(o.maximum_iops()?),
            })
        });
    let net = info.network_info();
    Some(InstanceCaps {
        instance_type,
        ebs,
        network: NetworkCaps {
            performance: net
                .and_then(|n| n.network_performance())
                .map(str::to_string),
            ena_support: net
                .and_then(|n| n.ena_support())
                .map(|e| e.as_str().to_string()),
            cards: net
                .map(|n| n.network_cards())
                .unwrap_or_default()
                .iter()
                .map(|c| NetworkCard {
                    index: c.network_card_index().unwrap_or(0).max(0) as u32,
                    baseline_gbps: c.baseline_bandwidth_in_gbps(),
                    peak_gbps: c.peak_bandwidth_in_gbps(),
                })
                .collect(),
        },
        default_vcpus: info
            .v_cpu_info()
            .and_then(|v| v.default_v_cpus())
            .map(|n| n.max(0) as u32),
        default_cores: info
            .v_cpu_info()
            .and_then(|v| v.default_cores())
            .map(|n| n.max(0) as u32),
    })
}

/// A volume's description; `device` is the host's name for it.
pub fn volume_info(v: &Volume, device: Option<String>) -> Option<VolumeInfo> {
    Some(VolumeInfo {
        volume_id: v.volume_id()?.to_string(),
        volume_type: v.volume_type()?.as_str().to_string(),
        size_gib: v.size()?.max(0) as u64,
        iops: v.iops().map(|n| n.max(0) as u64),
        throughput_mib_per_s: v.throughput().map(|n| n.max(0) as u64),
        snapshot_id: v
            .snapshot_id()
            .filter(|s| !s.is_empty())
            .map(str::to_string),
        multi_attach: v.multi_attach_enabled().unwrap_or(false),
        initialization: None,
        device,
        prewarm: None,
    })
}

impl Ec2 {
    /// DescribeInstanceTypes for `types`; an unknown type is named.
    pub async fn instance_types(&self, types: &[String]) -> anyhow::Result<Vec<InstanceCaps>> {
        let out = self
            .ec2
            .describe_instance_types()
            .set_instance_types(Some(
                types
                    .iter()
                    .map(|t| InstanceType::from(t.as_str()))
                    .collect(),
            ))
            .send()
            .await
            .map_err(|e| explain("DescribeInstanceTypes", e))?;
        let found: Vec<InstanceCaps> = out
            .instance_types()
            .iter()
            .filter_map(instance_caps)
            .collect();
        // In the order asked, each once.
        types
            .iter()
            .map(|t| {
                found
                    .iter()
                    .find(|c| &c.instance_type == t)
                    .cloned()
                    .ok_or_else(|| {
                        anyhow::anyhow!(
                            "instance type {t} is not offered in {} (DescribeInstanceTypes did \
                             not return it)",
                            self.region()
                        )
                    })
            })
            .collect()
    }

    /// DescribeVolumes (and their initialization state) for `(volume id, device)` pairs.
    pub async fn volumes(&self, volumes: &[(String, String)]) -> anyhow::Result<Vec<VolumeInfo>> {
        if volumes.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = volumes.iter().map(|(id, _)| id.clone()).collect();
        let out = self
            .ec2
            .describe_volumes()
            .set_volume_ids(Some(ids.clone()))
            .send()
            .await
            .map_err(|e| explain("DescribeVolumes", e))?;
        let mut found: Vec<VolumeInfo> = out
            .volumes()
            .iter()
            .filter_map(|v| {
                let device = volumes
                    .iter()
                    .find(|(id, _)| Some(id.as_str()) == v.volume_id())
                    .map(|(_, d)| d.clone());
                volume_info(v, device)
            })
            .collect();
        // The initialization state is newer than most of EC2's API (and absent from test
        // servers): where it cannot be read, the snapshot id alone flags a restored volume.
        if let Ok(status) = self
            .ec2
            .describe_volume_status()
            .set_volume_ids(Some(ids))
            .send()
            .await
        {
            for s in status.volume_statuses() {
                let state = s
                    .volume_status()
                    .map(|i| i.details())
                    .unwrap_or_default()
                    .iter()
                    .find(|d| {
                        d.name()
                            .is_some_and(|n| n.as_str() == "initialization-state")
                    })
                    .and_then(|d| d.status());
                if let (Some(state), Some(v)) = (
                    state,
                    found
                        .iter_mut()
                        .find(|v| Some(v.volume_id.as_str()) == s.volume_id()),
                ) {
                    v.initialization = Some(state.to_string());
                }
            }
        }
        Ok(found)
    }

    /// Whether placement group `name` is a cluster group.
    pub async fn is_cluster_group(&self, name: &str) -> anyhow::Result<bool> {
        let out = self
            .ec2
            .describe_placement_groups()
            .group_names(name)
            .send()
            .await
            .map_err(|e| explain("DescribePlacementGroups", e))?;
        Ok(out
            .placement_groups()
            .iter()
            .any(|g| g.strategy() == Some(&PlacementStrategy::Cluster)))
    }

    /// One host's caps, its instance type's being `instance` (DescribeInstanceTypes).
    pub async fn host_caps(
        &self,
        query: &CapsQuery,
        instance: InstanceCaps,
    ) -> anyhow::Result<HostCaps> {
        let mut notes = Vec::new();
        let volumes = match self.volumes(&query.volumes).await {
            Ok(v) => v,
            Err(e) => {
                notes.push(format!("volumes not described: {e:#}"));
                Vec::new()
            }
        };
        let cluster_placement_group = match &query.placement_group {
            Some(group) => self.is_cluster_group(group).await.unwrap_or_else(|e| {
                notes.push(format!("placement group {group} not described: {e:#}"));
                false
            }),
            None => false,
        };
        Ok(HostCaps {
            instance: Some(instance),
            volumes,
            cluster_placement_group,
            source: format!("DescribeInstanceTypes, DescribeVolumes ({})", self.region()),
            notes,
        })
    }
}

fn options(aws: &AwsTarget) -> Ec2Options {
    Ec2Options {
        region: aws.region.clone(),
        profile: aws.profile.clone(),
        endpoint_url: aws.endpoint_url.clone(),
    }
}

/// The EC2 API as the controller's caps source. A fleet's hosts share a few instance types:
/// each type is described once per region and process, not once per host.
#[derive(Default)]
struct Source {
    types: Mutex<HashMap<String, InstanceCaps>>,
}

impl Source {
    async fn instance_type(&self, ec2: &Ec2, instance_type: &str) -> anyhow::Result<InstanceCaps> {
        let key = format!("{}/{instance_type}", ec2.region());
        if let Some(known) = self.types.lock().ok().and_then(|t| t.get(&key).cloned()) {
            return Ok(known);
        }
        let caps = ec2
            .instance_types(&[instance_type.to_string()])
            .await?
            .pop()
            .ok_or_else(|| anyhow::anyhow!("DescribeInstanceTypes returned no {instance_type}"))?;
        if let Ok(mut types) = self.types.lock() {
            types.insert(key, caps.clone());
        }
        Ok(caps)
    }
}

impl CapsSource for Source {
    fn instance_types<'a>(
        &'a self,
        aws: &'a AwsTarget,
        types: &'a [String],
    ) -> Pending<'a, anyhow::Result<Vec<InstanceCaps>>> {
        Box::pin(async move {
            Ec2::connect(&options(aws))
                .await?
                .instance_types(types)
                .await
        })
    }

    fn host_caps<'a>(
        &'a self,
        aws: &'a AwsTarget,
        query: &'a CapsQuery,
    ) -> Pending<'a, anyhow::Result<HostCaps>> {
        Box::pin(async move {
            let ec2 = Ec2::connect(&options(aws)).await?;
            let instance = self.instance_type(&ec2, &query.instance_type).await?;
            ec2.host_caps(query, instance).await
        })
    }
}

/// The EC2 API as a caps source, for runs and `quietbench caps`.
pub fn source() -> std::sync::Arc<dyn CapsSource> {
    std::sync::Arc::new(Source::default())
}
