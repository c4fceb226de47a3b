//! RunInstances for a fleet: the request (AMI, type, user data, tags at creation, placement,
//! tenancy, CpuOptions), all-or-nothing per call (MinCount = MaxCount, so a half-launched batch
//! never exists), the next subnet when one's AZ has no capacity, and a backoff when EC2
//! throttles. The SDK's own retries are off for this call: it would retry an
//! InsufficientInstanceCapacity (HTTP 500) in the same AZ, where it is least likely to succeed.

use std::time::Duration;

use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::types::{
    CpuOptionsRequest, Instance, InstanceType, Placement, ResourceType, Tag, TagSpecification,
    Tenancy as Ec2Tenancy,
};

use crate::client::{Ec2, error_code, explain};
use quietbench_controller::fleet::ec2::Tenancy;

/// How long to wait between polls and after throttling; tests shorten them.
#[derive(Debug, Clone, Copy)]
pub struct Pacing {
    /// Between two DescribeInstances polls, two agent health tries.
    pub poll: Duration,
    /// The first wait after RequestLimitExceeded; doubled each time, up to [`MAX_BACKOFF`].
    pub backoff: Duration,
    /// Throttled calls retried before giving up.
    pub throttle_retries: u32,
}

/// The longest single wait after throttling.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

impl Default for Pacing {
    fn default() -> Self {
        Self {
            poll: Duration::from_secs(2),
            backoff: Duration::from_secs(1),
            throttle_retries: 6,
        }
    }
}

impl Pacing {
    /// The wait before retry `n` (from 0) of a throttled call.
    pub fn backoff(&self, n: u32) -> Duration {
        self.backoff.saturating_mul(1 << n.min(16)).min(MAX_BACKOFF)
    }
}

/// What a failed launch means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// This AZ has no capacity for the type (or the hosts): try the next subnet.
    Capacity,
    /// Too many calls: wait and retry.
    Throttled,
    /// Anything else: stop.
    Other,
}

/// Classifies an EC2 error code.
pub fn classify(code: Option<&str>) -> Failure {
    match code {
        Some(
            "InsufficientInstanceCapacity"
            | "InsufficientHostCapacity"
            | "InsufficientCapacity"
            | "Server.InsufficientInstanceCapacity",
        ) => Failure::Capacity,
        Some("RequestLimitExceeded" | "Throttling" | "ThrottlingException") => Failure::Throttled,
        _ => Failure::Other,
    }
}

/// Everything of a RunInstances request but the count and the subnet.
#[derive(Debug, Clone)]
pub struct Template {
    /// The AMI.
    pub ami: String,
    /// The instance type.
    pub instance_type: String,
    /// Base64 of the user data.
    pub user_data: String,
    /// SSH key pair.
    pub key_name: Option<String>,
    /// Security groups (ids).
    pub security_groups: Vec<String>,
    /// The run's placement group (name).
    pub placement_group: Option<String>,
    /// Tenancy.
    pub tenancy: Tenancy,
    /// The AZ dedicated hosts were allocated in (tenancy host).
    pub host_zone: Option<String>,
    /// CpuOptions: (core count, threads per core).
    pub cpu_options: Option<(i32, i32)>,
    /// Tags of the instances and their volumes, at creation.
    pub tags: Vec<Tag>,
}

impl Template {
    /// The request for `count` instances in `subnet`.
    pub fn request(
        &self,
        ec2: &Ec2,
        count: u32,
        subnet: Option<&str>,
    ) -> aws_sdk_ec2::operation::run_instances::builders::RunInstancesFluentBuilder {
        let count = i32::try_from(count).unwrap_or(i32::MAX);
        let spec = |kind| {
            TagSpecification::builder()
                .resource_type(kind)
                .set_tags(Some(self.tags.clone()))
                .build()
        };
        let mut request = ec2
            .ec2
            .run_instances()
            .image_id(&self.ami)
            .instance_type(InstanceType::from(self.instance_type.as_str()))
            .min_count(count)
            .max_count(count)
            .user_data(&self.user_data)
            .set_key_name(self.key_name.clone())
            .set_subnet_id(subnet.map(str::to_string))
            .tag_specifications(spec(ResourceType::Instance))
            .tag_specifications(spec(ResourceType::Volume));
        if !self.security_groups.is_empty() {
            request = request.set_security_group_ids(Some(self.security_groups.clone()));
        }
        let mut placement = Placement::builder();
        let mut placed = false;
        if let Some(group) = &self.placement_group {
            placement = placement.group_name(group);
            placed = true;
        }
        match self.tenancy {
            Tenancy::Default => {}
            Tenancy::Dedicated => {
                placement = placement.tenancy(Ec2Tenancy::Dedicated);
                placed = true;
            }
            Tenancy::Host => {
                placement = placement
                    .tenancy(Ec2Tenancy::Host)
                    .set_availability_zone(self.host_zone.clone());
                placed = true;
            }
        }
        if placed {
            request = request.placement(placement.build());
        }
        if let Some((cores, threads)) = self.cpu_options {
            request = request.cpu_options(
                CpuOptionsRequest::builder()
                    .core_count(cores)
                    .threads_per_core(threads)
                    .build(),
            );
        }
        request
    }
}

/// Launches `count` instances, all or none, in the first of `subnets` (from `*next_subnet` on)
/// that has capacity; `*next_subnet` stays on the subnet that worked. `None` subnet: EC2's
/// default. `say` reports each fall-back and backoff.
pub async fn launch(
    ec2: &Ec2,
    template: &Template,
    count: u32,
    subnets: &[String],
    next_subnet: &mut usize,
    pacing: &Pacing,
    say: &dyn Fn(&str),
) -> anyhow::Result<Vec<Instance>> {
    let mut refused: Vec<String> = Vec::new();
    let mut throttled = 0;
    loop {
        let subnet = subnets.get(*next_subnet).map(String::as_str);
        if !subnets.is_empty() && subnet.is_none() {
            anyhow::bail!(
                "no capacity for {count} × {} in any subnet given: {} (give another --subnet, \
                 in another AZ, or try later)",
                template.instance_type,
                refused.join("; ")
            );
        }
        let result = template
            .request(ec2, count, subnet)
            .customize()
            .config_override(
                aws_sdk_ec2::config::Config::builder().retry_config(RetryConfig::disabled()),
            )
            .send()
            .await;
        match result {
            Ok(out) => return Ok(out.instances().to_vec()),
            Err(err) => match classify(error_code(&err)) {
                Failure::Throttled if throttled < pacing.throttle_retries => {
                    let wait = pacing.backoff(throttled);
                    throttled += 1;
                    say(&format!(
                        "EC2 throttles RunInstances (RequestLimitExceeded): retrying in {:.1} s",
                        wait.as_secs_f64()
                    ));
                    tokio::time::sleep(wait).await;
                }
                Failure::Capacity => {
                    let where_ = subnet.unwrap_or("the default subnet");
                    refused.push(format!("{where_}: {:#}", explain("ec2:RunInstances", err)));
                    if subnets.is_empty() {
                        anyhow::bail!(
                            "no capacity for {count} × {}: {} (give --subnet IDs in other AZs \
                             to fall back to)",
                            template.instance_type,
                            refused.join("; ")
                        );
                    }
                    *next_subnet += 1;
                    if let Some(next) = subnets.get(*next_subnet) {
                        say(&format!("no capacity in {where_}: trying {next}"));
                    }
                }
                _ => return Err(explain("ec2:RunInstances", err)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_and_throttling_are_told_apart() {
        assert_eq!(
            classify(Some("InsufficientInstanceCapacity")),
            Failure::Capacity
        );
        assert_eq!(
            classify(Some("Server.InsufficientInstanceCapacity")),
            Failure::Capacity
        );
        assert_eq!(classify(Some("RequestLimitExceeded")), Failure::Throttled);
        assert_eq!(classify(Some("UnauthorizedOperation")), Failure::Other);
        assert_eq!(classify(None), Failure::Other);
    }

    #[test]
    fn backoff_doubles_up_to_a_cap() {
        let p = Pacing::default();
        assert_eq!(p.backoff(0), Duration::from_secs(1));
        assert_eq!(p.backoff(3), Duration::from_secs(8));
        assert_eq!(p.backoff(10), MAX_BACKOFF);
        assert_eq!(p.backoff(40), MAX_BACKOFF);
    }
}
