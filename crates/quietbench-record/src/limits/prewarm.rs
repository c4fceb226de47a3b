//! Which volumes a run pre-warms: the policy (`--prewarm`, a plan's `prewarm`) and the volumes
//! it picks from a host's caps. The reading itself, through an agent, is `crate::prewarm`'s.

use super::caps::HostCaps;

/// Which volumes are pre-warmed before disk probes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PrewarmPolicy {
    /// Volumes EC2 says were restored from a snapshot and not yet fully loaded.
    #[default]
    Auto,
    /// Every EBS volume of the host.
    Always,
    /// None.
    Never,
}

impl PrewarmPolicy {
    /// The word `--prewarm` and a plan's `prewarm` take.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Always => "always",
            Self::Never => "never",
        }
    }

    /// From `auto`, `always` or `never`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "auto" => Ok(Self::Auto),
            "always" => Ok(Self::Always),
            "never" => Ok(Self::Never),
            other => Err(format!(
                "prewarm {other:?}: give auto (restored volumes), always or never"
            )),
        }
    }
}

/// The devices (kernel names) to pre-warm on a host, with their volume ids.
pub fn prewarm_targets(caps: &HostCaps, policy: PrewarmPolicy) -> Vec<(String, String)> {
    caps.volumes
        .iter()
        .filter(|v| match policy {
            PrewarmPolicy::Auto => v.needs_prewarm(),
            PrewarmPolicy::Always => v.prewarm.is_none(),
            PrewarmPolicy::Never => false,
        })
        .filter_map(|v| Some((v.device.clone()?, v.volume_id.clone())))
        .collect()
}
