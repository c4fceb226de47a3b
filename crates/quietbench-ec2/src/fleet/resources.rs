//! What a run's instances need besides themselves, each created with the run's tags: the
//! security group of `--allow-from`, the placement group, dedicated hosts; and the lookups
//! they take (the first subnet, an instance type's default cores).

use aws_sdk_ec2::types::{
    AutoPlacement, InstanceType, IpPermission, IpRange, PlacementStrategy as Ec2Strategy,
    ResourceType, Tag, UserIdGroupPair,
};
use quietbench_controller::fleet::ec2::{AGENT_PORT, PlacementStrategy};

use super::Ec2Fleet;
use crate::client::{Ec2, explain};

impl Ec2Fleet {
    pub(super) async fn make_security_group(
        &mut self,
        ec2: &Ec2,
        tags: &[Tag],
    ) -> anyhow::Result<String> {
        let vpc = first_subnet(ec2, &self.spec.subnets)
            .await?
            .and_then(|s| s.vpc_id().map(str::to_string));
        let out = ec2
            .ec2
            .create_security_group()
            .group_name(format!("quietbench-{}", self.run_id))
            .description("quietbench agents of one run: the agent port, from --allow-from")
            .set_vpc_id(vpc)
            .tag_specifications(self.tag_spec(ResourceType::SecurityGroup, tags))
            .send()
            .await
            .map_err(|e| explain("ec2:CreateSecurityGroup", e))?;
        let id = out
            .group_id()
            .ok_or_else(|| anyhow::anyhow!("ec2:CreateSecurityGroup answered without an id"))?
            .to_string();
        self.security_group = Some(id.clone());
        let ranges = self
            .spec
            .allow_from
            .iter()
            .map(|cidr| {
                IpRange::builder()
                    .cidr_ip(cidr)
                    .description("quietbench controller")
                    .build()
            })
            .collect();
        let mut ingress = ec2
            .ec2
            .authorize_security_group_ingress()
            .group_id(&id)
            .ip_permissions(
                IpPermission::builder()
                    .ip_protocol("tcp")
                    .from_port(i32::from(AGENT_PORT))
                    .to_port(i32::from(AGENT_PORT))
                    .set_ip_ranges(Some(ranges))
                    .build(),
            );
        if self.wants_peer {
            // A host and its peer talk on ports picked per trial (the peer server's, the
            // user's server's): anything from the group's own members, at their private IPs.
            ingress = ingress.ip_permissions(
                IpPermission::builder()
                    .ip_protocol("-1")
                    .user_id_group_pairs(
                        UserIdGroupPair::builder()
                            .group_id(&id)
                            .description("quietbench hosts and their peers (load)")
                            .build(),
                    )
                    .build(),
            );
        }
        ingress
            .send()
            .await
            .map_err(|e| explain("ec2:AuthorizeSecurityGroupIngress", e))?;
        Ok(id)
    }

    pub(super) async fn make_placement_group(
        &mut self,
        ec2: &Ec2,
        strategy: PlacementStrategy,
        tags: &[Tag],
    ) -> anyhow::Result<String> {
        let name = format!("quietbench-{}", self.run_id);
        let (kind, partitions) = ec2_strategy(strategy);
        let out = ec2
            .ec2
            .create_placement_group()
            .group_name(&name)
            .strategy(kind)
            .set_partition_count(partitions)
            .tag_specifications(self.tag_spec(ResourceType::PlacementGroup, tags))
            .send()
            .await
            .map_err(|e| explain("ec2:CreatePlacementGroup", e))?;
        let id = out
            .placement_group()
            .and_then(|g| g.group_id())
            .map(str::to_string);
        self.placement_group = Some((name.clone(), id));
        Ok(name)
    }

    /// Allocates one dedicated host per instance asked for (auto-placement on, so RunInstances
    /// with tenancy host lands on them) in the first subnet's AZ; returns the AZ.
    pub(super) async fn allocate_hosts(
        &mut self,
        ec2: &Ec2,
        tags: &[Tag],
    ) -> anyhow::Result<String> {
        let zone = match first_subnet(ec2, &self.spec.subnets).await? {
            Some(subnet) => subnet.availability_zone().map(str::to_string),
            None => ec2
                .ec2
                .describe_availability_zones()
                .send()
                .await
                .map_err(|e| explain("ec2:DescribeAvailabilityZones", e))?
                .availability_zones()
                .first()
                .and_then(|z| z.zone_name())
                .map(str::to_string),
        }
        .ok_or_else(|| anyhow::anyhow!("no availability zone to allocate dedicated hosts in"))?;
        let out = ec2
            .ec2
            .allocate_hosts()
            .availability_zone(&zone)
            .instance_type(&self.spec.instance_type)
            .quantity(self.spec.count as i32)
            .auto_placement(AutoPlacement::On)
            .tag_specifications(self.tag_spec(ResourceType::DedicatedHost, tags))
            .send()
            .await
            .map_err(|e| explain("ec2:AllocateHosts", e))?;
        self.hosts = out.host_ids().to_vec();
        Ok(zone)
    }
}

/// A placement strategy as EC2 takes it, with its partition count.
pub(crate) fn ec2_strategy(strategy: PlacementStrategy) -> (Ec2Strategy, Option<i32>) {
    match strategy {
        PlacementStrategy::Cluster => (Ec2Strategy::Cluster, None),
        PlacementStrategy::Spread => (Ec2Strategy::Spread, None),
        PlacementStrategy::Partition(n) => (Ec2Strategy::Partition, n.map(|n| n as i32)),
    }
}

/// The first of `--subnet`s, described (its VPC and AZ); `None` when none was given.
async fn first_subnet(
    ec2: &Ec2,
    subnets: &[String],
) -> anyhow::Result<Option<aws_sdk_ec2::types::Subnet>> {
    let Some(subnet) = subnets.first() else {
        return Ok(None);
    };
    let out = ec2
        .ec2
        .describe_subnets()
        .subnet_ids(subnet)
        .send()
        .await
        .map_err(|e| explain("ec2:DescribeSubnets", e))?;
    match out.subnets().first() {
        Some(s) => Ok(Some(s.clone())),
        None => anyhow::bail!("--subnet {subnet}: ec2:DescribeSubnets does not know it"),
    }
}

/// The default core count of an instance type (CpuOptions CoreCount with ThreadsPerCore).
pub(crate) async fn default_cores(ec2: &Ec2, instance_type: &str) -> anyhow::Result<i32> {
    let out = ec2
        .ec2
        .describe_instance_types()
        .instance_types(InstanceType::from(instance_type))
        .send()
        .await
        .map_err(|e| explain("ec2:DescribeInstanceTypes", e))?;
    out.instance_types()
        .first()
        .and_then(|t| t.v_cpu_info())
        .and_then(|v| v.default_cores())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "ec2:DescribeInstanceTypes gives no default core count for {instance_type}: \
                 --threads-per-core needs it"
            )
        })
}
