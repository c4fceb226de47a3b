//! Instances' states as DescribeInstances gives them: what a fleet waits on and what `gc`
//! waits out.

use crate::client::{Ec2, explain};

/// An instance's state as DescribeInstances gives it.
#[derive(Debug, Clone)]
pub struct State {
    /// The instance.
    pub id: String,
    /// "pending", "running", "stopped", "terminated", ...
    pub state: String,
    /// EC2's reason for the last change (e.g. "Server.InsufficientInstanceCapacity: ...").
    pub reason: String,
    /// Its public IP.
    pub public_ip: Option<String>,
    /// Its private IP.
    pub private_ip: Option<String>,
}

/// The states of `ids` (DescribeInstances).
pub async fn describe(ec2: &Ec2, ids: &[String]) -> anyhow::Result<Vec<State>> {
    let out = ec2
        .ec2
        .describe_instances()
        .set_instance_ids(Some(ids.to_vec()))
        .send()
        .await
        .map_err(|e| explain("ec2:DescribeInstances", e))?;
    Ok(out
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter_map(|i| {
            Some(State {
                id: i.instance_id()?.to_string(),
                state: i
                    .state()
                    .and_then(|s| s.name())
                    .map_or("unknown".into(), |n| n.as_str().to_string()),
                reason: match i.state_reason() {
                    Some(r) => format!(
                        "{}: {}",
                        r.code().unwrap_or("-"),
                        r.message().unwrap_or("-")
                    ),
                    None => i.state_transition_reason().unwrap_or("-").to_string(),
                },
                public_ip: i.public_ip_address().map(str::to_string),
                private_ip: i.private_ip_address().map(str::to_string),
            })
        })
        .collect())
}
