//! The EC2 fleet as the controller sees it: what a user asks for (`run --ec2 ...`, a plan's
//! `[fleet] kind = "ec2"`), as plain data, and the seam through which the `quietbench` binary's
//! `ec2` feature supplies the fleet itself. The fleet lives in the quietbench-ec2 crate because
//! aws-sdk-ec2 is the heaviest crate of the tree: the controller library never links it, and a
//! binary built without the feature says how to get one with it.

use std::path::PathBuf;
use std::time::Duration;

use super::Fleet;

/// A placement group strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlacementStrategy {
    /// Instances close together in one AZ: the lowest latency, the most bandwidth between them.
    Cluster,
    /// Each instance on distinct hardware.
    Spread,
    /// Instances in partitions that share no rack; `Some(n)`: that many partitions.
    Partition(Option<u32>),
}

impl PlacementStrategy {
    /// `cluster`, `spread`, `partition` or `partition:N` (N from 1 to 7).
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "cluster" => Ok(Self::Cluster),
            "spread" => Ok(Self::Spread),
            "partition" => Ok(Self::Partition(None)),
            other => match other.strip_prefix("partition:").map(str::parse::<u32>) {
                Some(Ok(n)) if (1..=7).contains(&n) => Ok(Self::Partition(Some(n))),
                Some(_) => Err(format!(
                    "'{other}': a partition placement group has 1 to 7 partitions (partition:N)"
                )),
                None => Err(format!(
                    "'{other}' is not a placement: give cluster, spread, partition or partition:N"
                )),
            },
        }
    }
}

impl std::fmt::Display for PlacementStrategy {
    /// As the flag takes it: `cluster`, `spread`, `partition`, `partition:N`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Cluster => f.write_str("cluster"),
            Self::Spread => f.write_str("spread"),
            Self::Partition(None) => f.write_str("partition"),
            Self::Partition(Some(n)) => write!(f, "partition:{n}"),
        }
    }
}

/// Where instances run: shared hardware, hardware of their own, or a dedicated host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tenancy {
    /// Shared hardware (EC2's default).
    #[default]
    Default,
    /// Dedicated instances: hardware no other account's instances share.
    Dedicated,
    /// Dedicated hosts allocated for the run (AllocateHosts) and released after it.
    Host,
}

impl Tenancy {
    /// `default`, `dedicated` or `host`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "default" => Ok(Self::Default),
            "dedicated" => Ok(Self::Dedicated),
            "host" => Ok(Self::Host),
            other => Err(format!(
                "'{other}' is not a tenancy: give default, dedicated or host"
            )),
        }
    }

    /// As EC2 and the report name it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::Dedicated => "dedicated",
            Self::Host => "host",
        }
    }
}

/// What to do with instances whose CPU model does not match `--cpu-model`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuPolicy {
    /// Launch more than needed, keep the first matching ones, terminate the rest.
    #[default]
    Select,
    /// Stop and start a non-matching instance until it lands on a matching host.
    Reroll,
}

impl CpuPolicy {
    /// `select` or `reroll`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "select" => Ok(Self::Select),
            "reroll" => Ok(Self::Reroll),
            other => Err(format!(
                "'{other}' is not a CPU policy: give select or reroll"
            )),
        }
    }

    /// As the flag takes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Select => "select",
            Self::Reroll => "reroll",
        }
    }
}

/// The most tries `reroll` makes per instance unless told otherwise.
pub const DEFAULT_MAX_REROLLS: u32 = 5;
/// How long instances may live unless told otherwise (`--ttl`).
pub const DEFAULT_TTL: Duration = Duration::from_secs(2 * 3600);
/// How long an instance has to answer as an agent after it runs (`--boot-timeout`).
pub const DEFAULT_BOOT_TIMEOUT: Duration = Duration::from_secs(600);
/// The port agents listen on (deploy/cloud-init/user-data.yaml).
pub const AGENT_PORT: u16 = 7700;

/// An EC2 fleet, as asked for (a run request file keeps it: [`crate::request`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ec2Spec {
    /// e.g. c5.large.
    pub instance_type: String,
    /// Hosts to measure on.
    pub count: u32,
    /// An AMI with the agent baked in (deploy/packer).
    pub ami: String,
    /// Subnets to launch in, tried in order when one has no capacity.
    pub subnets: Vec<String>,
    /// Security groups to launch with (they must let the controller reach port 7700).
    pub security_groups: Vec<String>,
    /// Or: a security group made for the run, open on the agent port to these CIDRs.
    pub allow_from: Vec<String>,
    /// An EC2 key pair for SSH, if any.
    pub key_name: Option<String>,
    /// `--region`.
    pub region: Option<String>,
    /// `--profile`.
    pub profile: Option<String>,
    /// `--endpoint-url`.
    pub endpoint_url: Option<String>,
    /// A placement group made for the run.
    pub placement: Option<PlacementStrategy>,
    /// Shared hardware, dedicated instances or dedicated hosts.
    pub tenancy: Tenancy,
    /// CpuOptions ThreadsPerCore (1: SMT off, the cores the type has by default).
    pub threads_per_core: Option<u32>,
    /// Keep only hosts whose CPU model name contains this text (case-insensitive).
    pub cpu_model: Option<String>,
    /// How non-matching hosts are replaced.
    pub cpu_policy: CpuPolicy,
    /// Most stop/start tries per instance under `reroll`.
    pub max_rerolls: u32,
    /// Keep as many hosts of each CPU model that came up, and report per model.
    pub stratify: bool,
    /// The longest the run's resources may live, however often the lease is renewed.
    pub ttl: Duration,
    /// How long an instance has to answer as an agent once running.
    pub boot_timeout: Duration,
    /// Leave the instances running after the run (their expiry becomes the `ttl` deadline).
    pub keep: bool,
    /// Check permissions with EC2's DryRun and print the launch plan; launch nothing.
    pub dry_run: bool,
    /// A CA of the user's (`quietbench certs init`) to issue the run's certificates from;
    /// by default a new CA is made for the run.
    pub ca_dir: Option<PathBuf>,
    /// The agents may run exec probes (the run has some): set by the command, not a flag.
    pub allow_exec: bool,
}

impl Ec2Spec {
    /// A spec with the defaults and the three things that have none.
    pub fn new(instance_type: &str, count: u32, ami: &str) -> Self {
        Self {
            instance_type: instance_type.to_string(),
            count,
            ami: ami.to_string(),
            subnets: Vec::new(),
            security_groups: Vec::new(),
            allow_from: Vec::new(),
            key_name: None,
            region: None,
            profile: None,
            endpoint_url: None,
            placement: None,
            tenancy: Tenancy::Default,
            threads_per_core: None,
            cpu_model: None,
            cpu_policy: CpuPolicy::Select,
            max_rerolls: DEFAULT_MAX_REROLLS,
            stratify: false,
            ttl: DEFAULT_TTL,
            boot_timeout: DEFAULT_BOOT_TIMEOUT,
            keep: false,
            dry_run: false,
            ca_dir: None,
            allow_exec: false,
        }
    }

    /// Whether the fleet launches more instances than it keeps: `select` with a CPU model,
    /// or `--stratify`.
    pub fn over_provisions(&self) -> bool {
        (self.cpu_model.is_some() && self.cpu_policy == CpuPolicy::Select) || self.stratify
    }

    /// The checks that need no AWS call; each error says what to give instead.
    pub fn check(&self) -> Result<(), String> {
        if self.count == 0 {
            return Err("--count must be at least 1".into());
        }
        if self.count > 1000 {
            return Err(format!(
                "--count {} is more instances than one run launches (at most 1000)",
                self.count
            ));
        }
        if !self.ami.starts_with("ami-") {
            return Err(format!(
                "'{}' is not an AMI id (ami-...): give the AMI deploy/packer baked",
                self.ami
            ));
        }
        if self.instance_type.is_empty() || !self.instance_type.contains('.') {
            return Err(format!(
                "'{}' is not an instance type (e.g. c5.large)",
                self.instance_type
            ));
        }
        if !self.security_groups.is_empty() && !self.allow_from.is_empty() {
            return Err(
                "give --security-group (groups of yours) or --allow-from (a group made for the \
                 run), not both"
                    .into(),
            );
        }
        for cidr in &self.allow_from {
            check_cidr(cidr)?;
        }
        if let Some(n) = self.threads_per_core
            && !(1..=2).contains(&n)
        {
            return Err(format!("--threads-per-core {n}: give 1 (SMT off) or 2"));
        }
        if self.cpu_model.as_deref().is_some_and(str::is_empty) {
            return Err("--cpu-model is empty: give part of a model name, e.g. 8275CL".into());
        }
        if self.stratify && self.cpu_model.is_some() {
            return Err(
                "--stratify balances the hosts across the CPU models that come up; --cpu-model \
                 keeps one model: give one of them"
                    .into(),
            );
        }
        if self.max_rerolls == 0 || self.max_rerolls > 50 {
            return Err(format!("--max-rerolls {}: give 1 to 50", self.max_rerolls));
        }
        if self.tenancy == Tenancy::Host && self.placement.is_some() {
            return Err(
                "dedicated hosts (--tenancy host) take no placement group: drop --placement".into(),
            );
        }
        if self.ttl < Duration::from_secs(600) {
            return Err("--ttl must be at least 10m (instances take minutes to boot)".into());
        }
        Ok(())
    }
}

fn check_cidr(cidr: &str) -> Result<(), String> {
    let bad = || format!("--allow-from '{cidr}' is not an IPv4 CIDR such as 203.0.113.7/32");
    let (ip, bits) = cidr.split_once('/').ok_or_else(bad)?;
    ip.parse::<std::net::Ipv4Addr>().map_err(|_| bad())?;
    match bits.parse::<u8>() {
        Ok(b) if b <= 32 => Ok(()),
        _ => Err(bad()),
    }
}

/// What the `ec2` feature supplies: the fleet, and the dry run that launches nothing.
pub trait Ec2Launcher: Send + Sync {
    /// The fleet `spec` asks for; `wants_peer`: network probes need a peer per host;
    /// `tls_given`: the command has a TLS identity of its own (an EC2 fleet makes its own).
    fn fleet(
        &self,
        spec: Ec2Spec,
        wants_peer: bool,
        tls_given: bool,
    ) -> anyhow::Result<Box<dyn Fleet>>;

    /// `--dry-run`: asks EC2 whether each call would be allowed (DryRun) and prints the launch
    /// plan. Launches nothing.
    fn dry_run(&self, spec: &Ec2Spec, wants_peer: bool) -> anyhow::Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placements_tenancies_and_policies_parse_and_bad_ones_are_named() {
        assert_eq!(
            PlacementStrategy::parse("partition:3"),
            Ok(PlacementStrategy::Partition(Some(3)))
        );
        assert_eq!(
            PlacementStrategy::parse("cluster"),
            Ok(PlacementStrategy::Cluster)
        );
        for text in ["cluster", "spread", "partition", "partition:3"] {
            assert_eq!(PlacementStrategy::parse(text).unwrap().to_string(), text);
        }
        assert!(
            PlacementStrategy::parse("partition:9")
                .unwrap_err()
                .contains("1 to 7")
        );
        assert!(
            PlacementStrategy::parse("near")
                .unwrap_err()
                .contains("'near'")
        );
        assert_eq!(Tenancy::parse("host"), Ok(Tenancy::Host));
        assert!(Tenancy::parse("mine").is_err());
        assert_eq!(CpuPolicy::parse("reroll"), Ok(CpuPolicy::Reroll));
        assert_eq!(CpuPolicy::Reroll.name(), "reroll");
        assert!(CpuPolicy::parse("pick").is_err());
    }

    #[test]
    fn a_spec_is_checked_before_any_call() {
        let good = Ec2Spec::new("c5.large", 20, "ami-0123");
        assert_eq!(good.check(), Ok(()));
        let with = |f: &dyn Fn(&mut Ec2Spec)| {
            let mut s = good.clone();
            f(&mut s);
            s.check().unwrap_err()
        };
        assert!(with(&|s| s.count = 0).contains("--count"));
        assert!(with(&|s| s.ami = "image-1".into()).contains("AMI"));
        assert!(with(&|s| s.allow_from = vec!["10.0.0.0/33".into()]).contains("CIDR"));
        assert!(
            with(&|s| {
                s.allow_from = vec!["10.0.0.0/8".into()];
                s.security_groups = vec!["sg-1".into()];
            })
            .contains("not both")
        );
        assert!(
            with(&|s| {
                s.stratify = true;
                s.cpu_model = Some("8275CL".into());
            })
            .contains("--stratify")
        );
        assert!(with(&|s| s.ttl = Duration::from_secs(60)).contains("--ttl"));
        assert!(
            with(&|s| {
                s.tenancy = Tenancy::Host;
                s.placement = Some(PlacementStrategy::Cluster);
            })
            .contains("placement")
        );
    }
}
