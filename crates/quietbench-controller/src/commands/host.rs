//! The commands on one agent's host: `host` (its fingerprint), `tune` (tuning steps on) and
//! `restore` (every change undone).

use std::process::ExitCode;

use quietbench_proto::v1 as pb;

use crate::connection::AgentConnection;
use crate::context::CommandContext;
use crate::fleet::{Target, local_target};
use crate::local_agent::LocalAgent;
use crate::record::{HostKind, HostRecord};
use crate::report::{json, table};
use crate::session::runtime;

/// `quietbench host`: the fingerprint of this machine (`local`, through an agent started here)
/// or of a running agent's, as text or JSON.
pub fn host(
    context: &CommandContext,
    local: bool,
    agent: Option<String>,
    json_out: bool,
) -> anyhow::Result<ExitCode> {
    let local_agent = if local {
        Some(LocalAgent::start()?)
    } else {
        None
    };
    let target = match (&local_agent, &agent) {
        (Some(agent), _) => local_target(agent, "local agent"),
        (None, Some(address)) => Target {
            address: address.clone(),
            kind: HostKind::Remote,
            label: address.clone(),
            obtained: "--agent".into(),
            instance_id: None,
            access: context.fleet_access(),
            peer: None,
            inner_ip: None,
        },
        (None, None) => anyhow::bail!("give --local or --agent HOST:PORT"),
    };
    let host = runtime()?.block_on(async {
        let mut conn =
            AgentConnection::connect_with(&target.address, target.label.clone(), &target.access)
                .await?;
        conn.get_host().await
    })?;
    let record = HostRecord {
        address: target.address,
        kind: target.kind,
        agent_version: host.agent_version,
        fingerprint: host.fingerprint.unwrap_or_default(),
        tuning: Vec::new(),
        caps: None,
    };
    if json_out {
        let value = serde_json::json!({
            "address": record.address,
            "kind": record.kind.as_str(),
            "agent_version": record.agent_version,
            "fingerprint": json::fingerprint(&record.fingerprint),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print!("{}", crate::report::host::render(&record));
    }
    Ok(ExitCode::SUCCESS)
}

/// `quietbench tune`: applies `request`'s tuning steps on `agent`'s machine.
pub fn tune(
    context: &CommandContext,
    agent: &str,
    request: pb::PrepareRequest,
) -> anyhow::Result<ExitCode> {
    let nothing = pb::PrepareRequest {
        probe_cpus: request.probe_cpus.clone(),
        ..Default::default()
    };
    if request == nothing {
        anyhow::bail!(
            "choose what to tune: --all, or any of --aslr-off --steer-irqs --pause-irqbalance \
             --governor --thp MODE --drop-caches"
        );
    }
    let response = runtime()?.block_on(async {
        let mut conn =
            AgentConnection::connect_with(agent, agent.to_string(), &context.fleet_access())
                .await?;
        conn.prepare(request).await
    })?;
    println!(
        "tuning steps on {} (journal {}):",
        agent, response.journal_path
    );
    print!("{}", table::controls(&response.controls));
    println!("undo with: quietbench restore --agent {}", agent);
    Ok(ExitCode::SUCCESS)
}

/// `quietbench restore`: undoes every host change `agent` made.
pub fn restore(context: &CommandContext, agent: &str) -> anyhow::Result<ExitCode> {
    let response = runtime()?.block_on(async {
        let mut conn =
            AgentConnection::connect_with(agent, agent.to_string(), &context.fleet_access())
                .await?;
        conn.restore().await
    })?;
    if response.controls.is_empty() {
        println!("nothing to restore on {}", agent);
    } else {
        println!("restored on {}:", agent);
        print!("{}", table::controls(&response.controls));
    }
    Ok(ExitCode::SUCCESS)
}
