//! Waiting on instances: for a state (DescribeInstances, polled), and for their agents to
//! answer over mutual TLS, all at once, each until the boot deadline. An agent that never
//! answers is reported with its instance's state and the tail of its console output.

use std::time::{Duration, Instant};

use base64::Engine;
use quietbench_controller::connection::{AgentAccess, AgentConnection};
use quietbench_controller::progress::Progress;

use super::launch::Pacing;
use crate::client::{Ec2, explain};
use crate::states::{State, describe};

/// Polls until every one of `ids` is in `wanted` or ended (shutting-down, terminated); returns
/// their last states. Past `deadline`, an error names the instances and their states.
pub async fn wait_for_state(
    ec2: &Ec2,
    ids: &[String],
    wanted: &str,
    deadline: Instant,
    pacing: &Pacing,
    progress: &Progress,
) -> anyhow::Result<Vec<State>> {
    let ended = |s: &str| s == "shutting-down" || s == "terminated";
    loop {
        let states = describe(ec2, ids).await?;
        let waiting: Vec<&State> = states
            .iter()
            .filter(|s| s.state != wanted && !ended(&s.state))
            .collect();
        // An instance not described yet (EC2 is eventually consistent) is waited for too.
        if waiting.is_empty() && states.len() >= ids.len() {
            return Ok(states);
        }
        progress.status(format!(
            "{} of {} instance(s) {wanted}",
            states.iter().filter(|s| s.state == wanted).count(),
            ids.len()
        ));
        if Instant::now() > deadline {
            anyhow::bail!(
                "instances not {wanted} in time: {}",
                waiting
                    .iter()
                    .map(|s| format!("{} is {}", s.id, s.state))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        tokio::time::sleep(pacing.poll).await;
    }
}

/// Asks each (instance, address) for its fingerprint until it answers or `deadline` passes;
/// answers are CPU model names, in the order given.
pub async fn agents(
    ec2: &Ec2,
    instances: Vec<(String, String)>,
    deadline: Instant,
    pacing: &Pacing,
    access: &AgentAccess,
) -> Vec<(String, anyhow::Result<String>)> {
    let mut tasks = tokio::task::JoinSet::new();
    for (n, (id, address)) in instances.iter().cloned().enumerate() {
        let poll = pacing.poll;
        let access = access.clone();
        tasks.spawn(async move {
            let answer = ask(&id, &address, &access, deadline, poll).await;
            (n, id.clone(), answer)
        });
    }
    let mut answers: Vec<(usize, String, Result<String, String>)> = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(answer) => answers.push(answer),
            Err(e) => answers.push((usize::MAX, String::new(), Err(format!("{e}")))),
        }
    }
    answers.sort_by_key(|(n, _, _)| *n);
    let mut out = Vec::new();
    for (_, id, answer) in answers {
        let result = match answer {
            Ok(model) => Ok(model),
            Err(why) => Err(never_answered(ec2, &id, &why).await),
        };
        out.push((id, result));
    }
    out
}

async fn ask(
    id: &str,
    address: &str,
    access: &AgentAccess,
    deadline: Instant,
    poll: Duration,
) -> Result<String, String> {
    let label = format!("{id} ({address})");
    loop {
        let attempt = async {
            let mut agent = AgentConnection::connect_with(address, label.clone(), access).await?;
            agent.get_host().await
        };
        let last = match attempt.await {
            Ok(host) => {
                let cpu = host.fingerprint.and_then(|f| f.cpu).unwrap_or_default();
                return Ok(if cpu.model_name.is_empty() {
                    format!("unknown CPU ({})", cpu.vendor)
                } else {
                    cpu.model_name
                });
            }
            Err(e) => e.to_string(),
        };
        if Instant::now() > deadline {
            return Err(last);
        }
        tokio::time::sleep(poll).await;
    }
}

/// The error of an agent that never answered: its instance's state and console output tail.
async fn never_answered(ec2: &Ec2, id: &str, why: &str) -> anyhow::Error {
    let state = describe(ec2, &[id.to_string()])
        .await
        .ok()
        .and_then(|s| s.into_iter().next())
        .map_or("unknown".into(), |s| s.state);
    let console = match ec2.ec2.get_console_output().instance_id(id).send().await {
        Ok(out) => out
            .output()
            .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
            .map(|bytes| {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                let lines: Vec<&str> = text.lines().collect();
                lines[lines.len().saturating_sub(10)..].join("\n    ")
            })
            .filter(|t| !t.trim().is_empty())
            .unwrap_or_else(|| "(empty)".into()),
        Err(e) => format!("(unreadable: {:#})", explain("ec2:GetConsoleOutput", e)),
    };
    anyhow::anyhow!(
        "instance {id} (state {state}) did not answer as an agent before the boot timeout: \
         {why}\n  its console output ends:\n    {console}"
    )
}
