//! A plan's `[tls]` table: how the controller reaches its agents over TLS, as the flags
//! `--ca --cert --key --token-file` give it (flags win over the plan).
//!
//! ```toml
//! [tls]
//! ca = "fleet/ca.pem"
//! cert = "fleet/controller-ci.pem"   # mutual TLS: cert and key together
//! key = "fleet/controller-ci.key"
//! # token_file = "token"            # token mode, or
//! # token_env = "QUIETBENCH_TOKEN"  # the token from an environment variable
//! ```
//!
//! Paths are relative to the plan's folder.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use super::error::{Location, PlanError};

/// `[tls]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TlsFile {
    ca: Option<String>,
    cert: Option<String>,
    key: Option<String>,
    token_file: Option<String>,
    token_env: Option<String>,
}

/// `[tls]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanTls {
    /// The CA agents' certificates must chain to.
    pub ca: PathBuf,
    /// The controller's certificate and key (mutual TLS).
    pub identity: Option<(PathBuf, PathBuf)>,
    /// Where the token comes from (token mode).
    pub token: Option<TokenSource>,
}

/// Where a plan's token comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// A file holding it.
    File(PathBuf),
    /// An environment variable holding it.
    Env(String),
}

impl PlanTls {
    /// Its paths, relative ones taken from `folder` (the plan's).
    pub fn relative_to(mut self, folder: &Path) -> Self {
        self.ca = folder.join(&self.ca);
        if let Some((cert, key)) = self.identity.take() {
            self.identity = Some((folder.join(cert), folder.join(key)));
        }
        if let Some(TokenSource::File(f)) = &self.token {
            self.token = Some(TokenSource::File(folder.join(f)));
        }
        self
    }
}

/// Checks `[tls]`: a CA, and a certificate with its key, or a token, or both.
pub(super) fn check(table: &Spanned<TlsFile>, at: Location) -> Result<PlanTls, PlanError> {
    let t = table.get_ref();
    let bad = |why: &str| PlanError::Tls {
        why: why.to_string(),
        at,
    };
    let ca = t.ca.as_ref().ok_or_else(|| {
        bad("ca is missing: the CA certificate the agents' certificates chain to")
    })?;
    let identity = match (&t.cert, &t.key) {
        (Some(c), Some(k)) => Some((PathBuf::from(c), PathBuf::from(k))),
        (None, None) => None,
        _ => return Err(bad("give cert and key together (mutual TLS)")),
    };
    let token = match (&t.token_file, &t.token_env) {
        (Some(_), Some(_)) => return Err(bad("give token_file or token_env, not both")),
        (Some(f), None) => Some(TokenSource::File(PathBuf::from(f))),
        (None, Some(v)) => Some(TokenSource::Env(v.clone())),
        (None, None) => None,
    };
    if identity.is_none() && token.is_none() {
        return Err(bad(
            "give cert and key (mutual TLS) or token_file / token_env (token mode)",
        ));
    }
    Ok(PlanTls {
        ca: PathBuf::from(ca),
        identity,
        token,
    })
}
