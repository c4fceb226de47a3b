//! TLS between the controller and its agents: the certificates `quietbench certs` makes
//! ([`certs`]), the controller's client identity (`--ca --cert --key`, or a plan's `[tls]`
//! table), and what a failed handshake means in words.
//!
//! A command has one identity for every fleet agent it talks to: made where the command line
//! or the plan is read, it travels in the command's context (`crate::context::CommandContext`) to
//! every connection; without one, connections are plain (loopback agents, `run --local`).

pub mod certs;

use std::path::{Path, PathBuf};

use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// The controller's TLS settings: the CA its agents' certificates must chain to, and how it
/// proves itself: a certificate (mutual TLS), a token (token mode), or both.
#[derive(Debug, Clone)]
pub struct ClientTls {
    /// The CA certificate (PEM) agents' certificates are checked against.
    pub ca: PathBuf,
    /// The controller's certificate (PEM), for mutual TLS.
    pub cert: Option<PathBuf>,
    /// The token sent with every call (token mode).
    token: Option<String>,
    config: ClientTlsConfig,
}

impl ClientTls {
    /// Reads the CA and, for mutual TLS, the certificate and key; each missing or unreadable
    /// file is named.
    pub fn load(
        ca: &Path,
        identity: Option<(&Path, &Path)>,
        token: Option<String>,
    ) -> anyhow::Result<Self> {
        let read = |what: &str, path: &Path| -> anyhow::Result<String> {
            let text =
                quietbench_host::input::read_text(path, quietbench_host::input::MAX_INPUT_BYTES)
                    .map_err(|e| {
                        anyhow::anyhow!("cannot read the {what} {}: {e}", path.display())
                    })?;
            if !text.contains("-----BEGIN ") {
                anyhow::bail!("{} is not PEM: expected the {what}", path.display());
            }
            Ok(text)
        };
        let mut config = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(read("CA certificate (--ca)", ca)?));
        if let Some((cert, key)) = identity {
            config = config.identity(Identity::from_pem(
                read("controller certificate (--cert)", cert)?,
                read("controller key (--key)", key)?,
            ));
        }
        if identity.is_none() && token.is_none() {
            anyhow::bail!(
                "--ca needs a way to prove who we are: --cert and --key (mutual TLS), or \
                 --token-file / QUIETBENCH_TOKEN (token mode)"
            );
        }
        Ok(Self {
            ca: ca.to_path_buf(),
            cert: identity.map(|(c, _)| c.to_path_buf()),
            token,
            config,
        })
    }

    /// Checks every agent's certificate against `name` instead of the address dialled. An EC2
    /// fleet issues its agents' certificate before EC2 assigns their addresses, so the
    /// certificate names the fleet's agents (`quietbench-agent`), not an IP.
    pub fn with_domain(mut self, name: &str) -> Self {
        self.config = self.config.domain_name(name);
        self
    }

    /// tonic's client configuration.
    pub fn config(&self) -> ClientTlsConfig {
        self.config.clone()
    }

    /// The token mode's token, if any.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }
}

/// Adds `authorization: Bearer TOKEN` to every call when the controller has a token.
#[derive(Debug, Clone, Default)]
pub struct TokenHeader {
    value: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
}

impl TokenHeader {
    /// The header of `tls`'s token, if it has one.
    pub fn of(tls: Option<&ClientTls>) -> Self {
        Self {
            value: tls
                .and_then(ClientTls::token)
                .and_then(|t| format!("Bearer {t}").parse().ok()),
        }
    }

    /// The header of `token` (a local agent's secret).
    pub fn with(token: &str) -> Self {
        Self {
            value: format!("Bearer {token}").parse().ok(),
        }
    }
}

impl tonic::service::Interceptor for TokenHeader {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.value {
            request.metadata_mut().insert("authorization", v.clone());
        }
        Ok(request)
    }
}

/// A token file's token, without surrounding whitespace (`--token-file`, a plan's
/// `token_file`).
pub fn read_token_file(path: &Path) -> anyhow::Result<String> {
    let text = quietbench_host::input::read_text(path, 64 << 10)
        .map_err(|e| anyhow::anyhow!("cannot read the token file {}: {e}", path.display()))?;
    if let Some(warning) = quietbench_host::input::readable_by_others(path) {
        eprintln!("quietbench: warning: {warning}");
    }
    let token = text.trim();
    if token.is_empty() {
        anyhow::bail!("the token file {} is empty", path.display());
    }
    Ok(token.to_string())
}

/// What a failed connection's error chain says about TLS, in words a person can act on, for a
/// connection made with `tls`; `None` when TLS is not what failed.
pub fn explain(
    error: &(dyn std::error::Error + 'static),
    tls: Option<&ClientTls>,
) -> Option<String> {
    use rustls::{AlertDescription, CertificateError, Error};
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        let rustls_error = e.downcast_ref::<Error>().or_else(|| {
            e.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<Error>())
        });
        if let Some(r) = rustls_error {
            let ca = tls.map_or_else(|| "the CA given".into(), |c| c.ca.display().to_string());
            return Some(match r {
                Error::InvalidCertificate(CertificateError::UnknownIssuer)
                | Error::InvalidCertificate(CertificateError::BadSignature) => format!(
                    "the agent's certificate is not signed by the CA in {ca} (--ca): it belongs to another fleet's CA"
                ),
                Error::InvalidCertificate(CertificateError::Expired)
                | Error::InvalidCertificate(CertificateError::ExpiredContext { .. }) => {
                    "the agent's certificate has expired: issue it a new one (quietbench certs issue --agent NAME)".into()
                }
                Error::InvalidCertificate(CertificateError::NotValidForName)
                | Error::InvalidCertificate(CertificateError::NotValidForNameContext { .. }) => {
                    "the agent's certificate does not name the address dialled: issue it one with --san ADDRESS".into()
                }
                Error::AlertReceived(
                    AlertDescription::BadCertificate
                    | AlertDescription::UnknownCA
                    | AlertDescription::CertificateRequired
                    | AlertDescription::CertificateExpired
                    | AlertDescription::CertificateUnknown
                    | AlertDescription::DecryptError,
                ) => format!(
                    "the agent refused our certificate ({}): it must be a controller certificate from the agent's CA, still valid",
                    tls.and_then(|c| c.cert.as_ref())
                        .map_or_else(|| "none given".into(), |c| c.display().to_string())
                ),
                Error::InvalidMessage(_) => {
                    "the agent does not speak TLS: drop --ca/--cert/--key for a plain agent".into()
                }
                other => format!("TLS failed: {other}"),
            });
        }
        cause = e.source();
    }
    None
}
