//! The EC2 fleet: launches a run's instances, reaches each one's agent over mutual TLS, keeps
//! the hosts the CPU-model policy wants, renews the lease while the run goes on, and releases
//! everything the run created on every exit path (the session calls `release` after a normal
//! end, an error or Ctrl-C; a SIGKILLed controller's resources expire with their lease).

pub mod address;
mod choose;
pub mod launch;
pub mod lease;
pub mod policy;
pub mod reach;
mod report;
mod resources;
pub mod run_tls;
pub mod userdata;

use std::path::PathBuf;
use std::time::{Instant, SystemTime};

use aws_sdk_ec2::types::{Instance, ResourceType, Tag, TagSpecification};
use quietbench_controller::connection::AgentAccess;
use quietbench_controller::fleet::ec2::{Ec2Spec, Tenancy};
use quietbench_controller::fleet::{Fleet, FleetFuture, Target};
use quietbench_controller::progress::Progress;
use quietbench_controller::record::HostKind;

use crate::client::{Ec2, Ec2Options};
use crate::gc::{Selection, collect_kinds};
use crate::inventory::Kind;
use crate::tags::{EXPIRES_AT, NAME, OWNER, ROLE, RUN, expiry, format_expiry};
use address::Addresses;
use launch::{Pacing, Template, launch};
use run_tls::RunTls;

/// What became of a launched instance.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fate {
    /// Launched, not decided yet.
    Candidate,
    /// Measured on.
    Kept,
    /// Serves the other end of a kept host's network probes, or sends its `http`/`tcp` load.
    Peer,
    /// Terminated by the CPU-model policy (why).
    Rejected(String),
    /// Ended before it served (EC2's reason).
    Lost(String),
}

/// One instance the fleet launched.
#[derive(Debug, Clone)]
struct Launched {
    id: String,
    instance_type: String,
    zone: String,
    placement_group: Option<String>,
    tenancy: String,
    host_id: Option<String>,
    address: Option<String>,
    /// Where the fleet's other instances reach it (its private IP), when known.
    inner_ip: Option<std::net::IpAddr>,
    model: Option<String>,
    rerolls: u32,
    fate: Fate,
    launched: Instant,
    ended: Option<Instant>,
}

impl Launched {
    fn from(instance: &Instance) -> Option<Self> {
        let placement = instance.placement();
        Some(Self {
            id: instance.instance_id()?.to_string(),
            instance_type: instance
                .instance_type()
                .map_or("?".into(), |t| t.as_str().to_string()),
            zone: placement
                .and_then(|p| p.availability_zone())
                .unwrap_or("?")
                .to_string(),
            placement_group: placement
                .and_then(|p| p.group_name())
                .filter(|g| !g.is_empty())
                .map(str::to_string),
            tenancy: placement
                .and_then(|p| p.tenancy())
                .map_or("default".into(), |t| t.as_str().to_string()),
            host_id: placement.and_then(|p| p.host_id()).map(str::to_string),
            address: None,
            inner_ip: None,
            model: None,
            rerolls: 0,
            fate: Fate::Candidate,
            launched: Instant::now(),
            ended: None,
        })
    }

    fn hours(&self, now: Instant) -> f64 {
        self.ended
            .unwrap_or(now)
            .duration_since(self.launched)
            .as_secs_f64()
            / 3600.0
    }

    fn live(&self) -> bool {
        self.ended.is_none()
    }
}

/// An EC2 fleet for one run.
pub struct Ec2Fleet {
    spec: Ec2Spec,
    wants_peer: bool,
    pacing: Pacing,
    run_id: String,
    /// Where the run's TLS folder goes (beside the fleet ledger).
    state_dir: PathBuf,
    ec2: Option<Ec2>,
    deadline: SystemTime,
    tls_dir: Option<PathBuf>,
    /// How the run's agents are reached: with the run's own certificates once they are made.
    access: AgentAccess,
    /// What the run created besides instances and their volumes, for the release.
    placement_group: Option<(String, Option<String>)>,
    hosts: Vec<String>,
    security_group: Option<String>,
    instances: Vec<Launched>,
    next_subnet: usize,
    batches: u32,
    lease: Option<tokio::task::JoinHandle<()>>,
}

impl Ec2Fleet {
    /// The fleet `spec` asks for; nothing is called until `acquire`.
    pub fn new(spec: Ec2Spec, wants_peer: bool, state_dir: PathBuf) -> Self {
        Self {
            spec,
            wants_peer,
            pacing: Pacing::default(),
            run_id: String::new(),
            state_dir,
            ec2: None,
            deadline: SystemTime::now(),
            tls_dir: None,
            access: AgentAccess::Fleet(None),
            placement_group: None,
            hosts: Vec::new(),
            security_group: None,
            instances: Vec::new(),
            next_subnet: 0,
            batches: 0,
            lease: None,
        }
    }

    /// The tags every resource of the run gets at creation.
    fn tags(&self, owner: &str) -> Vec<Tag> {
        let tag = |k: &str, v: String| Tag::builder().key(k).value(v).build();
        vec![
            tag(RUN, self.run_id.clone()),
            tag(OWNER, owner.to_string()),
            tag(
                EXPIRES_AT,
                format_expiry(expiry(SystemTime::now(), self.deadline)),
            ),
            tag(NAME, format!("quietbench {}", self.run_id)),
        ]
    }

    fn tag_spec(&self, kind: ResourceType, tags: &[Tag]) -> TagSpecification {
        TagSpecification::builder()
            .resource_type(kind)
            .set_tags(Some(tags.to_vec()))
            .build()
    }

    /// Everything before the first launch: clients, identity, certificates, the resources the
    /// instances need, the launch templates (the hosts', and the peers': no exec, another
    /// role tag), the lease.
    async fn prepare(
        &mut self,
        progress: &Progress,
    ) -> anyhow::Result<(Template, Template, Addresses)> {
        let spec = self.spec.clone();
        // Before anything is made: the id that names (tags) all of it.
        progress.line(&format!(
            "quietbench: run {}: the EC2 resources it makes carry this id; if this controller \
             is killed, `quietbench gc` (here: at once; elsewhere: --run {}) removes them",
            self.run_id, self.run_id
        ));
        progress.status("connecting to EC2".into());
        let ec2 = Ec2::connect(&Ec2Options {
            region: spec.region.clone(),
            profile: spec.profile.clone(),
            endpoint_url: spec.endpoint_url.clone(),
        })
        .await?;
        self.ec2 = Some(ec2.clone());
        let addresses = Addresses::from_env(ec2.endpoint_is_loopback())?;
        let owner = ec2.caller_identity().await?;
        self.deadline = SystemTime::now() + spec.ttl;
        let tls_dir = self.state_dir.join(format!("{}-tls", self.run_id));
        self.tls_dir = Some(tls_dir.clone());
        let ca_dir = run_tls::ca_dir_or_env(spec.ca_dir.as_deref());
        let tls = RunTls::make(&tls_dir, ca_dir.as_deref(), run_tls::days_for(spec.ttl))?;
        self.access = AgentAccess::Fleet(Some(std::sync::Arc::new(tls.for_agents()?)));
        let user_data = |allow_exec| -> anyhow::Result<String> {
            Ok(userdata::encode(&userdata::render(
                &tls.ca_pem,
                &tls.agent_pem,
                &tls.agent_key,
                allow_exec,
            )?))
        };
        // A peer (a network probe's other end, `http`'s or `tcp`'s load) runs no command of
        // the user's: its agent refuses exec and servers whatever the run's probes are.
        let (host_data, peer_data) = (user_data(spec.allow_exec)?, user_data(false)?);
        let tags = self.tags(&owner);
        let mut security_groups = spec.security_groups.clone();
        if !spec.allow_from.is_empty() {
            security_groups.push(self.make_security_group(&ec2, &tags).await?);
        }
        let placement_group = match spec.placement {
            Some(strategy) => Some(self.make_placement_group(&ec2, strategy, &tags).await?),
            None => None,
        };
        let host_zone = match spec.tenancy {
            Tenancy::Host => Some(self.allocate_hosts(&ec2, &tags).await?),
            _ => None,
        };
        let cpu_options = match spec.threads_per_core {
            Some(threads) => Some((
                default_cores(&ec2, &spec.instance_type).await?,
                threads as i32,
            )),
            None => None,
        };
        self.lease = Some(lease::spawn_renewal(
            ec2.clone(),
            self.run_id.clone(),
            self.placement_group
                .iter()
                .filter_map(|(_, id)| id.clone())
                .collect(),
            self.deadline,
        ));
        let role = |value: &str| Tag::builder().key(ROLE).value(value).build();
        let hosts = Template {
            ami: spec.ami.clone(),
            instance_type: spec.instance_type.clone(),
            user_data: host_data,
            key_name: spec.key_name.clone(),
            security_groups,
            placement_group,
            tenancy: spec.tenancy,
            host_zone,
            cpu_options,
            tags: [tags.clone(), vec![role("host")]].concat(),
        };
        let peers = Template {
            user_data: peer_data,
            tags: [tags, vec![role("peer")]].concat(),
            ..hosts.clone()
        };
        Ok((hosts, peers, addresses))
    }

    /// Launches `count`, waits for them to run, reaches each agent and reads its CPU model.
    async fn launch_batch(
        &mut self,
        template: &Template,
        addresses: &mut Addresses,
        count: u32,
        progress: &Progress,
    ) -> anyhow::Result<()> {
        let ec2 = self.ec2.clone().expect("prepared");
        self.batches += 1;
        progress.status(format!(
            "launching {count} × {} (batch {})",
            template.instance_type, self.batches
        ));
        let say = |line: &str| progress.line(&format!("quietbench: {line}"));
        let launched = launch(
            &ec2,
            template,
            count,
            &self.spec.subnets,
            &mut self.next_subnet,
            &self.pacing,
            &say,
        )
        .await?;
        let first = self.instances.len();
        self.instances
            .extend(launched.iter().filter_map(Launched::from));
        let ids: Vec<String> = self.instances[first..]
            .iter()
            .map(|i| i.id.clone())
            .collect();
        say(&format!("launched {}", ids.join(", ")));
        self.reach(&ec2, &ids, addresses, progress).await
    }

    /// Waits until `ids` run, gives each an address and reads its agent's fingerprint.
    /// Instances EC2 ended on the way (capacity taken back) are marked lost.
    async fn reach(
        &mut self,
        ec2: &Ec2,
        ids: &[String],
        addresses: &mut Addresses,
        progress: &Progress,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + self.spec.boot_timeout;
        let states =
            reach::wait_for_state(ec2, ids, "running", deadline, &self.pacing, progress).await?;
        let mut to_reach = Vec::new();
        for state in states {
            let Some(i) = self.instances.iter_mut().find(|i| i.id == state.id) else {
                continue;
            };
            if state.state != "running" {
                i.fate = Fate::Lost(state.reason.clone());
                i.ended = Some(Instant::now());
                progress.line(&format!(
                    "quietbench: {} went to {} before it served: {}",
                    i.id, state.state, state.reason
                ));
                continue;
            }
            let address = addresses.next(
                &i.id,
                state.public_ip.as_deref(),
                state.private_ip.as_deref(),
            )?;
            i.address = Some(address.clone());
            i.inner_ip = addresses.inner(state.private_ip.as_deref());
            to_reach.push((i.id.clone(), address));
        }
        progress.status(format!("waiting for {} agent(s) to answer", to_reach.len()));
        let answers = reach::agents(ec2, to_reach, deadline, &self.pacing, &self.access).await;
        for (id, answer) in answers {
            let model = answer?;
            if let Some(i) = self.instances.iter_mut().find(|i| i.id == id) {
                progress.line(&format!(
                    "quietbench: {id} ({}) answers: {model}",
                    i.address.as_deref().unwrap_or("?")
                ));
                i.model = Some(model);
            }
        }
        Ok(())
    }

    fn target(&self, i: &Launched) -> Target {
        let address = i.address.clone().unwrap_or_default();
        Target {
            address: address.clone(),
            kind: HostKind::Remote,
            label: format!("{} ({address})", i.id),
            obtained: format!("launched in {} for run {}", i.zone, self.run_id),
            instance_id: Some(i.id.clone()),
            access: self.access.clone(),
            peer: None,
            inner_ip: i.inner_ip,
        }
    }

    async fn acquire_inner(&mut self, progress: &Progress) -> anyhow::Result<Vec<Target>> {
        let (template, peer_template, mut addresses) = self.prepare(progress).await?;
        self.choose_hosts(&template, &mut addresses, progress)
            .await?;
        self.terminate_rejected(progress).await?;
        if self.wants_peer {
            // Network probes' other ends, `http`'s and `tcp`'s load: one peer instance per
            // host, launched like the hosts (same placement group, security group, tenancy),
            // with no CPU-model policy; never a measured host.
            let kept = self.spec.count;
            self.launch_batch(&peer_template, &mut addresses, kept, progress)
                .await?;
            let (indexes, _) = self.candidates();
            if indexes.len() < kept as usize {
                anyhow::bail!(
                    "{} of {kept} peer instance(s) came up for the network, http or tcp probes",
                    indexes.len()
                );
            }
            for index in indexes {
                self.instances[index].fate = Fate::Peer;
            }
        }
        let hosts: Vec<&Launched> = self
            .instances
            .iter()
            .filter(|i| i.fate == Fate::Kept)
            .collect();
        let peers: Vec<&Launched> = self
            .instances
            .iter()
            .filter(|i| i.fate == Fate::Peer)
            .collect();
        Ok(hosts
            .iter()
            .enumerate()
            .map(|(n, host)| {
                let mut target = self.target(host);
                target.peer = peers.get(n).map(|p| Box::new(self.target(p)));
                target
            })
            .collect())
    }

    async fn release_inner(&mut self, progress: &Progress) -> anyhow::Result<()> {
        if let Some(lease) = self.lease.take() {
            lease.abort();
        }
        let Some(ec2) = self.ec2.clone() else {
            return Ok(()); // nothing was called, nothing exists
        };
        let say = |line: &str| progress.line(&format!("quietbench: {line}"));
        let extra: Vec<String> = self
            .placement_group
            .iter()
            .filter_map(|(_, id)| id.clone())
            .collect();
        if self.spec.keep {
            let tagged = lease::set_expiry(&ec2, &self.run_id, &extra, self.deadline).await?;
            say(&format!(
                "kept {} resource(s) of run {} until {} (--keep): `quietbench fleet ls --run {0}` \
                 lists them, `quietbench gc --run {0}` deletes them; their certificates are in {}",
                tagged,
                self.run_id,
                format_expiry(self.deadline),
                self.tls_dir
                    .as_ref()
                    .map_or("-".into(), |d| d.display().to_string())
            ));
            return Ok(());
        }
        // Instances first, by id as well as by tag: one launched a moment ago may not be
        // listed by tag yet.
        let live: Vec<String> = self
            .instances
            .iter()
            .filter(|i| i.live())
            .map(|i| i.id.clone())
            .collect();
        if !live.is_empty() {
            say(&format!("terminating {} instance(s)", live.len()));
            if let Err(e) = crate::gc::terminate_and_wait(&ec2, &live).await {
                say(&format!("{e:#}"));
            }
        }
        let now = Instant::now();
        for i in &mut self.instances {
            i.ended.get_or_insert(now);
        }
        let mut kinds = vec![Kind::Instance, Kind::Volume];
        if self.placement_group.is_some() {
            kinds.push(Kind::PlacementGroup);
        }
        if !self.hosts.is_empty() {
            kinds.push(Kind::Host);
        }
        if self.security_group.is_some() {
            kinds.push(Kind::SecurityGroup);
        }
        let outcome = collect_kinds(
            &ec2,
            &Selection::Run(self.run_id.clone()),
            &kinds,
            false,
            &say,
        )
        .await;
        let hours: f64 = self.instances.iter().map(|i| i.hours(now)).sum();
        say(&format!(
            "released run {}: {} instance(s) terminated, {} other resource(s) deleted; {:.2} \
             instance-hours in all",
            self.run_id,
            self.instances.len(),
            outcome
                .deleted
                .iter()
                .filter(|l| !l.starts_with("terminated instance"))
                .count(),
            hours
        ));
        if let Some(dir) = &self.tls_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
        if !outcome.errors.is_empty() {
            anyhow::bail!(
                "{}; `quietbench gc --run {}` retries",
                outcome.errors.join("; "),
                self.run_id
            );
        }
        Ok(())
    }
}

impl Fleet for Ec2Fleet {
    fn kind(&self) -> &'static str {
        "ec2"
    }

    fn bind_run(&mut self, run_id: &str) {
        self.run_id = run_id.to_string();
    }

    fn acquire<'a>(&'a mut self, progress: &'a Progress) -> FleetFuture<'a, Vec<Target>> {
        Box::pin(self.acquire_inner(progress))
    }

    fn release<'a>(&'a mut self, progress: &'a Progress) -> FleetFuture<'a, ()> {
        Box::pin(self.release_inner(progress))
    }

    fn report_lines(&self) -> Vec<String> {
        report::lines(self)
    }
}

pub(crate) use resources::{default_cores, ec2_strategy};
