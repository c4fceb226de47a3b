//! The run's certificates: a CA (new for the run, or the user's `--ca-dir`), one agent
//! certificate every instance gets in its user data, and the controller's certificate. The
//! agents' certificate names [`AGENT_NAME`] rather than an IP, because it is issued before EC2
//! assigns addresses; the controller checks agents against that name.

use std::path::{Path, PathBuf};

use quietbench_controller::tls::ClientTls;
use quietbench_controller::tls::certs::{self, Role};

/// The name in every EC2 agent's certificate, which the controller checks instead of the
/// address it dials.
pub const AGENT_NAME: &str = "quietbench-agent";

/// The run's TLS material on disk.
#[derive(Debug, Clone)]
pub struct RunTls {
    /// The folder (beside the fleet ledger): kept with `--keep`, removed at release otherwise.
    pub dir: PathBuf,
    /// The CA certificate, PEM text.
    pub ca_pem: String,
    /// The agents' certificate and key, PEM text.
    pub agent_pem: String,
    /// The agents' key.
    pub agent_key: String,
    controller: (PathBuf, PathBuf),
}

/// The environment variable naming the CA when neither `--ca-dir` nor the plan does: how a
/// `quietbench serve` (whose clients may not name its folders) is given one.
pub const CA_DIR_VARIABLE: &str = "QUIETBENCH_EC2_CA_DIR";

/// The CA folder a run issues from: `ca_dir` (`--ca-dir`, or the plan's), else
/// `$QUIETBENCH_EC2_CA_DIR` when set and not empty, else none (a new CA per run).
pub fn ca_dir_or_env(ca_dir: Option<&Path>) -> Option<PathBuf> {
    ca_dir.map(Path::to_path_buf).or_else(|| {
        std::env::var_os(CA_DIR_VARIABLE)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    })
}

impl RunTls {
    /// Makes the run's certificates in `dir` (which must not exist), valid for `days`, from
    /// the CA in `ca_dir`, else from a new CA. (Callers pass [`ca_dir_or_env`]'s answer.)
    pub fn make(dir: &Path, ca_dir: Option<&Path>, days: u32) -> anyhow::Result<Self> {
        if dir.exists() {
            anyhow::bail!("{} exists already", dir.display());
        }
        let now = time::OffsetDateTime::now_utc();
        std::fs::create_dir_all(dir)?;
        match ca_dir {
            None => {
                certs::init(dir, now)?;
            }
            Some(ca) => {
                // Issued here, not in the user's folder: the run's files stay together.
                for file in ["ca.pem", "ca.key"] {
                    let from = ca.join(file);
                    std::fs::copy(&from, dir.join(file)).map_err(|e| {
                        anyhow::anyhow!(
                            "--ca-dir (or ${CA_DIR_VARIABLE}): cannot read {} ({e}): give a \
                             folder made by `quietbench certs init`",
                            from.display()
                        )
                    })?;
                }
            }
        }
        let agent = certs::issue(dir, Role::Agent, AGENT_NAME, &[], days, now)?;
        let controller = certs::issue(dir, Role::Controller, "ec2-controller", &[], days, now)?;
        let read = |p: &Path| {
            std::fs::read_to_string(p)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", p.display()))
        };
        Ok(Self {
            dir: dir.to_path_buf(),
            ca_pem: read(&dir.join("ca.pem"))?,
            agent_pem: read(&agent.cert)?,
            agent_key: read(&agent.key)?,
            controller: (controller.cert, controller.key),
        })
    }

    /// The identity the run's connections use: the run's controller certificate, agents
    /// checked against the run's CA and [`AGENT_NAME`].
    pub fn for_agents(&self) -> anyhow::Result<ClientTls> {
        Ok(ClientTls::load(
            &self.dir.join("ca.pem"),
            Some((&self.controller.0, &self.controller.1)),
            None,
        )?
        .with_domain(AGENT_NAME))
    }
}

/// Why a command with a TLS identity of its own cannot have an EC2 fleet.
pub const GIVEN_TLS: &str = "an EC2 fleet makes its own certificates for the run: drop --ca, \
     --cert, --key and --token-file (or the plan's [tls]); give --ca-dir to issue them from a \
     CA of yours";

/// Days a run's certificates are valid: its `ttl`, rounded up, and one more for clock skew.
pub fn days_for(ttl: std::time::Duration) -> u32 {
    u32::try_from(ttl.as_secs().div_ceil(86_400) + 1).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_gets_a_ca_an_agent_certificate_and_a_controller_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunTls::make(&dir.path().join("run"), None, 2).unwrap();
        assert!(run.ca_pem.contains("BEGIN CERTIFICATE"));
        assert!(run.agent_pem.contains("BEGIN CERTIFICATE"));
        assert!(run.agent_key.contains("PRIVATE KEY"));
        assert!(RunTls::make(&dir.path().join("run"), None, 2).is_err());
        // From a CA of the user's: the run's CA is that one.
        let mine = dir.path().join("mine");
        certs::init(&mine, time::OffsetDateTime::now_utc()).unwrap();
        let run = RunTls::make(&dir.path().join("run2"), Some(&mine), 2).unwrap();
        assert_eq!(
            run.ca_pem,
            std::fs::read_to_string(mine.join("ca.pem")).unwrap()
        );
        let err = RunTls::make(&dir.path().join("run3"), Some(&dir.path().join("none")), 2)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--ca-dir"), "{err}");
        assert_eq!(days_for(std::time::Duration::from_secs(7200)), 2);
    }
}
