//! The controller's seam to this crate: `run --ec2` and `compare --ec2` get their fleet, and
//! `--dry-run` its permission check, through the [`services`] the binary hands every command.

use aws_sdk_ec2::types::Tag;
use quietbench_controller::context::Services;
use quietbench_controller::fleet::Fleet;
use quietbench_controller::fleet::Ledger;
use quietbench_controller::fleet::ec2::{Ec2Launcher, Ec2Spec, Tenancy};

use crate::client::{Ec2, Ec2Options, error_code, explain};
use crate::fleet::launch::Template;
use crate::fleet::run_tls::{self, RunTls};
use crate::fleet::{Ec2Fleet, default_cores, ec2_strategy, policy, userdata};
use crate::tags::{EXPIRES_AT, OWNER, RUN};

struct Launcher;

/// What this crate gives the controller: EC2 fleets for `run --ec2` and `compare --ec2`, and
/// caps looked up in the EC2 API (the binary builds its commands' context with it).
pub fn services() -> Services {
    Services {
        ec2: Some(std::sync::Arc::new(Launcher)),
        caps: Some(crate::caps::source()),
    }
}

impl Ec2Launcher for Launcher {
    fn fleet(
        &self,
        spec: Ec2Spec,
        wants_peer: bool,
        tls_given: bool,
    ) -> anyhow::Result<Box<dyn Fleet>> {
        if tls_given {
            anyhow::bail!(run_tls::GIVEN_TLS);
        }
        Ok(Box::new(Ec2Fleet::new(
            spec,
            wants_peer,
            Ledger::default_location().dir().to_path_buf(),
        )))
    }

    fn dry_run(&self, spec: &Ec2Spec, wants_peer: bool) -> anyhow::Result<()> {
        spec.check().map_err(anyhow::Error::msg)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(dry_run(spec, wants_peer))
    }
}

/// A call's DryRun answer: DryRunOperation means it would have been allowed.
fn allowed<E>(
    op: &str,
    result: Result<
        impl Sized,
        aws_sdk_ec2::error::SdkError<E, aws_sdk_ec2::config::http::HttpResponse>,
    >,
) -> anyhow::Result<String>
where
    E: aws_sdk_ec2::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match result {
        Err(e) if error_code(&e) == Some("DryRunOperation") => Ok(format!("{op}: allowed")),
        Err(e) => Err(explain(op, e)),
        Ok(_) => Ok(format!("{op}: allowed (the endpoint ignored DryRun)")),
    }
}

async fn dry_run(spec: &Ec2Spec, wants_peer: bool) -> anyhow::Result<()> {
    let ec2 = Ec2::connect(&Ec2Options {
        region: spec.region.clone(),
        profile: spec.profile.clone(),
        endpoint_url: spec.endpoint_url.clone(),
    })
    .await?;
    let owner = ec2.caller_identity().await?;
    let per_host = if wants_peer { 2 } else { 1 };
    let selecting = spec.over_provisions();
    let first = if selecting {
        policy::first_batch(spec.count)
    } else {
        spec.count
    };
    println!("launch plan (dry run: nothing is launched)");
    println!("  as {owner} in {}", ec2.region());
    println!(
        "  {} × {} from {}{}",
        first,
        spec.instance_type,
        spec.ami,
        if selecting {
            format!(
                " to keep {} (at most {} batches; docs/ec2.md#cpu-model-policies)",
                spec.count,
                policy::MAX_BATCHES
            )
        } else {
            String::new()
        }
    );
    if per_host == 2 {
        println!(
            "  and {} peer instance(s) for the network, http or tcp probes (no CPU-model policy)",
            spec.count
        );
    }
    println!(
        "  subnets: {}",
        if spec.subnets.is_empty() {
            "EC2's default".to_string()
        } else {
            spec.subnets.join(" then ")
        }
    );
    println!("  tenancy {}", spec.tenancy.name());
    if let Some(p) = spec.placement {
        println!("  placement group quietbench-RUN ({p})");
    }
    if let Some(model) = &spec.cpu_model {
        println!("  CPU model '{model}', policy {}", spec.cpu_policy.name());
    }
    println!(
        "  tagged {RUN}, {OWNER}, {EXPIRES_AT} (lease {} min, --ttl {})",
        crate::tags::LEASE.as_secs() / 60,
        humantime::format_duration(spec.ttl)
    );
    let cpu_options = match spec.threads_per_core {
        Some(t) => {
            let cores = default_cores(&ec2, &spec.instance_type).await?;
            println!("  CpuOptions: {cores} core(s), {t} thread(s) per core");
            Some((cores, t as i32))
        }
        None => None,
    };
    // The user data carries real certificates, as a launch would: the size check is real.
    let scratch = std::env::temp_dir().join(format!("quietbench-dry-run-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let ca_dir = crate::fleet::run_tls::ca_dir_or_env(spec.ca_dir.as_deref());
    let tls = RunTls::make(&scratch, ca_dir.as_deref(), 1);
    let _ = std::fs::remove_dir_all(&scratch);
    let tls = tls?;
    let template = Template {
        ami: spec.ami.clone(),
        instance_type: spec.instance_type.clone(),
        user_data: userdata::encode(&userdata::render(
            &tls.ca_pem,
            &tls.agent_pem,
            &tls.agent_key,
            spec.allow_exec,
        )?),
        key_name: spec.key_name.clone(),
        security_groups: spec.security_groups.clone(),
        placement_group: spec.placement.map(|_| "quietbench-dry-run".to_string()),
        tenancy: spec.tenancy,
        host_zone: None,
        cpu_options,
        tags: vec![Tag::builder().key(RUN).value("dry-run").build()],
    };
    let mut checks = Vec::new();
    if let Some(p) = spec.placement {
        let (strategy, partitions) = ec2_strategy(p);
        checks.push(allowed(
            "ec2:CreatePlacementGroup",
            ec2.ec2
                .create_placement_group()
                .group_name("quietbench-dry-run")
                .strategy(strategy)
                .set_partition_count(partitions)
                .dry_run(true)
                .send()
                .await,
        ));
    }
    if !spec.allow_from.is_empty() {
        checks.push(allowed(
            "ec2:CreateSecurityGroup",
            ec2.ec2
                .create_security_group()
                .group_name("quietbench-dry-run")
                .description("dry run")
                .dry_run(true)
                .send()
                .await,
        ));
    }
    if spec.tenancy == Tenancy::Host {
        println!(
            "  dedicated hosts: {} (AllocateHosts has no DryRun: not checked)",
            spec.count
        );
    }
    let subnet = spec.subnets.first().map(String::as_str);
    checks.push(allowed(
        "ec2:RunInstances",
        template
            .request(&ec2, first, subnet)
            .dry_run(true)
            .send()
            .await,
    ));
    let mut failed = 0;
    for check in checks {
        match check {
            Ok(line) => println!("  {line}"),
            Err(e) => {
                failed += 1;
                println!("  {e:#}");
            }
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} call(s) of the launch would fail (see above)");
    }
    Ok(())
}
