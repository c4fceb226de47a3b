//! The EC2 fleet's options of `run` and `compare` (`--ec2 ...`), and the AWS options every EC2
//! command shares. Parsed here into an [`Ec2Spec`]; the fleet itself comes with the binary's
//! `ec2` feature.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use quietbench_controller::fleet::ec2::{
    CpuPolicy, DEFAULT_MAX_REROLLS, Ec2Spec, PlacementStrategy, Tenancy,
};

/// Where and as whom to call AWS (aws-config's default chain decides what is not given:
/// environment, profiles, SSO, IMDS, ECS).
#[derive(Debug, Clone, Default, Args)]
pub struct AwsArgs {
    /// AWS region [default: from the environment or the profile]
    #[arg(long, value_name = "REGION")]
    pub region: Option<String>,
    /// Profile of ~/.aws/config and ~/.aws/credentials
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Another EC2 endpoint, e.g. a test server (also AWS_ENDPOINT_URL_EC2)
    #[arg(long, value_name = "URL")]
    pub endpoint_url: Option<String>,
}

impl AwsArgs {
    /// The same, as the EC2 seams take it.
    pub fn target(&self) -> quietbench_controller::limits::lookup::AwsTarget {
        quietbench_controller::limits::lookup::AwsTarget {
            region: self.region.clone(),
            profile: self.profile.clone(),
            endpoint_url: self.endpoint_url.clone(),
        }
    }
}

/// `--ec2` and the options of the instances it launches.
#[derive(Debug, Clone, Default, Args)]
pub struct Ec2Args {
    /// Measure on EC2 instances launched for the run from an AMI with the agent baked in
    /// (deploy/), terminated at its end (docs/ec2.md)
    #[arg(long, requires_all = ["instance_type", "ami"], help_heading = "EC2 fleet")]
    pub ec2: bool,
    /// Instance type, e.g. c5.large
    #[arg(
        long,
        value_name = "TYPE",
        requires = "ec2",
        help_heading = "EC2 fleet"
    )]
    pub instance_type: Option<String>,
    /// Instances to measure on
    #[arg(long, value_name = "N", default_value_t = 1, requires = "ec2", help_heading = "EC2 fleet",
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub count: u32,
    /// The AMI to launch (deploy/packer bakes one)
    #[arg(long, value_name = "AMI", requires = "ec2", help_heading = "EC2 fleet")]
    pub ami: Option<String>,
    /// Subnet to launch in; repeat: the next is tried when one's AZ has no capacity
    #[arg(
        long = "subnet",
        value_name = "ID",
        requires = "ec2",
        help_heading = "EC2 fleet"
    )]
    pub subnets: Vec<String>,
    /// Security group to launch with (it must admit the controller on port 7700); repeatable
    #[arg(
        long = "security-group",
        value_name = "ID",
        requires = "ec2",
        help_heading = "EC2 fleet"
    )]
    pub security_groups: Vec<String>,
    /// Or make a security group for the run that admits CIDR on port 7700; repeatable
    #[arg(
        long = "allow-from",
        value_name = "CIDR",
        requires = "ec2",
        help_heading = "EC2 fleet"
    )]
    pub allow_from: Vec<String>,
    /// EC2 key pair for SSH to the instances
    #[arg(
        long,
        value_name = "NAME",
        requires = "ec2",
        help_heading = "EC2 fleet"
    )]
    pub key_name: Option<String>,
    /// A placement group made for the run: cluster, spread, partition or partition:N
    #[arg(long, value_name = "STRATEGY", requires = "ec2", help_heading = "EC2 fleet",
          value_parser = PlacementStrategy::parse)]
    pub placement: Option<PlacementStrategy>,
    /// default (shared hardware), dedicated (instances of yours only) or host (dedicated hosts
    /// allocated for the run)
    #[arg(long, value_name = "TENANCY", default_value = "default", requires = "ec2",
          help_heading = "EC2 fleet", value_parser = Tenancy::parse)]
    pub tenancy: Tenancy,
    /// CpuOptions ThreadsPerCore: 1 turns SMT off (with the type's default core count)
    #[arg(long, value_name = "N", requires = "ec2", help_heading = "EC2 fleet")]
    pub threads_per_core: Option<u32>,
    /// Keep only hosts whose CPU model name contains TEXT (case-insensitive), e.g. 8275CL
    #[arg(
        long,
        value_name = "TEXT",
        requires = "ec2",
        help_heading = "EC2 fleet"
    )]
    pub cpu_model: Option<String>,
    /// How hosts of another model are replaced: select (launch more, keep the first matching)
    /// or reroll (stop and start them until they match)
    #[arg(long, value_name = "POLICY", default_value = "select", requires = "cpu_model",
          help_heading = "EC2 fleet", value_parser = CpuPolicy::parse)]
    pub cpu_policy: CpuPolicy,
    /// With reroll: the most stop/start tries per instance
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_REROLLS, requires = "cpu_model",
          help_heading = "EC2 fleet")]
    pub max_rerolls: u32,
    /// Keep equally many hosts of each CPU model that came up, and report per model
    #[arg(long, requires = "ec2", help_heading = "EC2 fleet")]
    pub stratify: bool,
    /// The longest the run's instances may live: `quietbench gc` deletes them after it even if
    /// the controller still renews their lease
    #[arg(long, value_name = "DURATION", default_value = "2h", requires = "ec2",
          help_heading = "EC2 fleet", value_parser = humantime::parse_duration)]
    pub ttl: Duration,
    /// How long a running instance has to answer as an agent
    #[arg(long, value_name = "DURATION", default_value = "10m", requires = "ec2",
          help_heading = "EC2 fleet", value_parser = humantime::parse_duration)]
    pub boot_timeout: Duration,
    /// Leave the instances running after the run (until the --ttl deadline; `quietbench gc
    /// --run RUN` deletes them sooner)
    #[arg(long, requires = "ec2", help_heading = "EC2 fleet")]
    pub keep: bool,
    /// Check the permissions of every launch call with EC2's DryRun and print the launch
    /// plan; launch nothing
    #[arg(long, requires = "ec2", help_heading = "EC2 fleet")]
    pub dry_run: bool,
    /// Issue the run's certificates from this CA (`quietbench certs init`) instead of a new
    /// one made for the run [default: $QUIETBENCH_EC2_CA_DIR, else a new CA]
    #[arg(long, value_name = "DIR", requires = "ec2", help_heading = "EC2 fleet")]
    pub ca_dir: Option<PathBuf>,
    #[command(flatten, next_help_heading = "EC2 fleet")]
    pub aws: AwsArgs,
    /// Do not look up the instance's and its volumes' caps in the EC2 API (by default they are,
    /// for every host on EC2, so disk and network results are reported against the cap that
    /// binds them)
    #[arg(long, help_heading = "EC2 fleet")]
    pub no_aws: bool,
    /// Before disk probes, read whole the volumes EC2 says were restored from a snapshot (auto),
    /// every EBS volume (always), or none (never): a restored volume's first reads come from S3
    #[arg(long, value_name = "auto|always|never", value_parser = quietbench_controller::prewarm::PrewarmPolicy::parse,
          help_heading = "EC2 fleet")]
    pub prewarm: Option<quietbench_controller::prewarm::PrewarmPolicy>,
}

impl Ec2Args {
    /// Sets how the command's run looks hosts' caps up (not at all with `--no-aws`) and
    /// which volumes it pre-warms (`--prewarm`; without it, the plan's or the default).
    pub fn apply_to(&self, context: &mut quietbench_controller::context::CommandContext) {
        context.aws = (!self.no_aws).then(|| self.aws.target());
        if let Some(policy) = self.prewarm {
            context.prewarm = policy;
        }
    }

    /// The fleet asked for, or `None` without `--ec2`.
    pub fn spec(&self) -> Option<Ec2Spec> {
        if !self.ec2 {
            return None;
        }
        let mut spec = Ec2Spec::new(
            self.instance_type.as_deref().unwrap_or_default(),
            self.count,
            self.ami.as_deref().unwrap_or_default(),
        );
        spec.subnets = self.subnets.clone();
        spec.security_groups = self.security_groups.clone();
        spec.allow_from = self.allow_from.clone();
        spec.key_name = self.key_name.clone();
        spec.region = self.aws.region.clone();
        spec.profile = self.aws.profile.clone();
        spec.endpoint_url = self.aws.endpoint_url.clone();
        spec.placement = self.placement;
        spec.tenancy = self.tenancy;
        spec.threads_per_core = self.threads_per_core;
        spec.cpu_model = self.cpu_model.clone();
        spec.cpu_policy = self.cpu_policy;
        spec.max_rerolls = self.max_rerolls;
        spec.stratify = self.stratify;
        spec.ttl = self.ttl;
        spec.boot_timeout = self.boot_timeout;
        spec.keep = self.keep;
        spec.dry_run = self.dry_run;
        spec.ca_dir = self.ca_dir.clone();
        Some(spec)
    }
}
