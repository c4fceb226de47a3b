//! Which address reaches an instance's agent, and the rule that keeps tests on this machine.
//!
//! Normally the instance's public IP (its private IP when it has none) on the agent port. For
//! tests against a local EC2 API (moto), whose instance addresses are invented and must never
//! be dialled, `QUIETBENCH_EC2_AGENT_MAP` lists agents the test started on loopback, comma
//! separated: each instance boot takes the next one, in launch order (a re-rolled instance's
//! new boot takes a new one, as a real stop/start lands it on another host). With an endpoint
//! on loopback and no map, the fleet refuses to dial anything.

use quietbench_controller::fleet::ec2::AGENT_PORT;

/// The environment variable of the address override.
pub const AGENT_MAP_VAR: &str = "QUIETBENCH_EC2_AGENT_MAP";

/// Hands out agent addresses, one per instance boot.
#[derive(Debug)]
pub struct Addresses {
    map: Option<Vec<String>>,
    taken: usize,
}

impl Addresses {
    /// From the environment; `endpoint_is_loopback`: EC2 is a local test server.
    pub fn from_env(endpoint_is_loopback: bool) -> anyhow::Result<Self> {
        Self::new(
            std::env::var(AGENT_MAP_VAR).ok().as_deref(),
            endpoint_is_loopback,
        )
    }

    /// From a map's text (`None`: no override).
    pub fn new(map: Option<&str>, endpoint_is_loopback: bool) -> anyhow::Result<Self> {
        let map = match map {
            None => None,
            Some(text) => {
                let list: Vec<String> = text
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect();
                for a in &list {
                    if a.rsplit_once(':')
                        .is_none_or(|(_, port)| port.parse::<u16>().is_err())
                    {
                        anyhow::bail!("{AGENT_MAP_VAR}: '{a}' is not HOST:PORT");
                    }
                }
                if list.is_empty() {
                    anyhow::bail!("{AGENT_MAP_VAR} is set but lists no HOST:PORT");
                }
                Some(list)
            }
        };
        if endpoint_is_loopback && map.is_none() {
            anyhow::bail!(
                "the EC2 endpoint is on this machine (a test server): the instance addresses it \
                 invents must not be dialled. Set {AGENT_MAP_VAR} to the agents that stand in \
                 for the instances (HOST:PORT,...), or use a real EC2 endpoint"
            );
        }
        Ok(Self { map, taken: 0 })
    }

    /// Where the fleet's other instances reach an instance (a peer's or load agent's
    /// connections, the server's listening address): its private IP, whatever address the
    /// controller dials (a public IPv4 is the internet gateway's, not on the instance). `None`
    /// with a map: the agents standing in for instances are reached at their map address.
    pub fn inner(&self, private_ip: Option<&str>) -> Option<std::net::IpAddr> {
        if self.map.is_some() {
            return None;
        }
        private_ip.and_then(|ip| ip.parse().ok())
    }

    /// The agent address of an instance's new boot, from its IPs as EC2 reports them.
    pub fn next(
        &mut self,
        instance: &str,
        public_ip: Option<&str>,
        private_ip: Option<&str>,
    ) -> anyhow::Result<String> {
        if let Some(map) = &self.map {
            let Some(address) = map.get(self.taken) else {
                anyhow::bail!(
                    "{AGENT_MAP_VAR} lists {} agent(s); instance {instance} needs one more",
                    map.len()
                );
            };
            self.taken += 1;
            return Ok(address.clone());
        }
        match public_ip.or(private_ip) {
            Some(ip) => Ok(format!("{ip}:{AGENT_PORT}")),
            None => anyhow::bail!("instance {instance} has no IP address yet"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_endpoint_without_a_map_dials_nothing() {
        let err = Addresses::new(None, true).unwrap_err().to_string();
        assert!(err.contains(AGENT_MAP_VAR), "{err}");
    }

    #[test]
    fn the_map_is_taken_in_order_and_runs_out_clearly() {
        let mut a = Addresses::new(Some("127.0.0.1:1, 127.0.0.1:2"), true).unwrap();
        assert_eq!(
            a.next("i-1", Some("54.1.2.3"), Some("10.0.0.1")).unwrap(),
            "127.0.0.1:1"
        );
        assert_eq!(a.next("i-2", None, None).unwrap(), "127.0.0.1:2");
        assert!(
            a.next("i-3", None, None)
                .unwrap_err()
                .to_string()
                .contains("i-3")
        );
        assert!(Addresses::new(Some("nohost"), true).is_err());
        assert!(Addresses::new(Some(" , "), false).is_err());
    }

    #[test]
    fn without_a_map_the_public_ip_wins() {
        let mut a = Addresses::new(None, false).unwrap();
        assert_eq!(
            a.next("i-1", Some("54.1.2.3"), Some("10.0.0.1")).unwrap(),
            "54.1.2.3:7700"
        );
        assert_eq!(
            a.next("i-2", None, Some("10.0.0.2")).unwrap(),
            "10.0.0.2:7700"
        );
        assert!(a.next("i-3", None, None).is_err());
        assert_eq!(a.inner(Some("10.0.0.2")), Some([10, 0, 0, 2].into()));
        assert_eq!(a.inner(None), None);
        let mapped = Addresses::new(Some("127.0.0.1:1"), true).unwrap();
        assert_eq!(
            mapped.inner(Some("10.0.0.2")),
            None,
            "moto's IPs are never used"
        );
    }
}
