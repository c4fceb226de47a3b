//! What a command's work reaches beyond its own options, made once where the command line (or a
//! plan, or a test) is read and handed down as a value: this controller's TLS identity to fleet
//! agents, how restored volumes are pre-warmed, where and whether instance caps are looked up,
//! and the EC2 services the binary was built with.
//!
//! These were process-wide slots once (set by the flags' parser, read deep in a run), so nothing
//! joined where `--prewarm`, `--no-aws` or a TLS identity was set to where it was read, and a
//! test could not run two configurations in one process.

use std::sync::Arc;

use crate::connection::AgentAccess;
use crate::fleet::ec2::Ec2Launcher;
use crate::limits::lookup::{AwsTarget, CapsSource};
use crate::prewarm::PrewarmPolicy;
use crate::tls::ClientTls;

/// What the binary was built with: the EC2 fleet and the caps lookup (its `ec2` feature), as
/// trait objects so the controller links no AWS SDK.
#[derive(Clone, Default)]
pub struct Services {
    /// Launches `run --ec2` fleets and answers `--dry-run`.
    pub ec2: Option<Arc<dyn Ec2Launcher>>,
    /// Looks up instance, volume and placement-group caps.
    pub caps: Option<Arc<dyn CapsSource>>,
}

/// A command's context (see the module's documentation).
#[derive(Clone)]
pub struct CommandContext {
    /// TLS to fleet agents (`--ca --cert --key`, `--token-file`, a plan's `[tls]`); `None`:
    /// plain connections.
    pub tls: Option<Arc<ClientTls>>,
    /// Which volumes are pre-warmed before disk probes (`--prewarm`, a plan's `prewarm`).
    pub prewarm: PrewarmPolicy,
    /// How runs look caps up; `None` after `--no-aws` (never call AWS).
    pub aws: Option<AwsTarget>,
    pub services: Services,
}

impl Default for CommandContext {
    /// Plain connections, the default pre-warm, caps looked up with the default AWS chain, and
    /// no EC2 services.
    fn default() -> Self {
        Self {
            tls: None,
            prewarm: PrewarmPolicy::default(),
            aws: Some(AwsTarget::default()),
            services: Services::default(),
        }
    }
}

impl std::fmt::Debug for CommandContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandContext")
            .field(
                "tls",
                &self.tls.as_ref().map(|t| t.ca.display().to_string()),
            )
            .field("prewarm", &self.prewarm)
            .field("aws", &self.aws)
            .field("ec2", &self.services.ec2.is_some())
            .field("caps", &self.services.caps.is_some())
            .finish()
    }
}

impl CommandContext {
    /// A context with the binary's services and everything else at its default.
    pub fn with_services(services: Services) -> Self {
        Self {
            services,
            ..Self::default()
        }
    }

    /// How fleet agents are reached: with this context's TLS identity, or plain.
    pub fn fleet_access(&self) -> AgentAccess {
        AgentAccess::Fleet(self.tls.clone())
    }

    /// The EC2 launcher, or what to do to get one.
    pub fn ec2(&self) -> anyhow::Result<&dyn Ec2Launcher> {
        self.services.ec2.as_deref().ok_or_else(|| {
            anyhow::anyhow!(
                "this quietbench was built without EC2 fleets: build it with `cargo build \
                 --release --bin quietbench --features ec2`"
            )
        })
    }

    /// The caps source, or why there is none.
    pub fn caps_source(&self) -> Result<&dyn CapsSource, String> {
        self.services.caps.as_deref().ok_or_else(|| {
            "this quietbench was built without the EC2 API (build with --features ec2)".to_string()
        })
    }
}
