//! `quietbench certs`: a certificate authority for one fleet, and the certificates its agents
//! (TLS servers) and controllers (TLS clients) present to each other. Made with rcgen on the
//! same aws-lc-rs provider the TLS stack uses; no openssl shell-outs.
//!
//! A directory holds one CA: `ca.pem` (shared with every agent and controller) and `ca.key`
//! (kept by whoever issues). `issue` writes `agent-NAME.pem`/`.key` or
//! `controller-NAME.pem`/`.key`. Private keys are written 0600, created new (never over an
//! existing file), and never printed.

use std::fs::OpenOptions;
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use time::{Duration, OffsetDateTime};

/// Default validity of issued certificates, days.
pub const DEFAULT_DAYS: u32 = 30;
/// Validity of a CA, days: it outlives the certificates it issues.
pub const CA_DAYS: u32 = 3650;

/// What a certificate is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// An agent: a TLS server (extended key usage serverAuth).
    Agent,
    /// A controller: a TLS client (extended key usage clientAuth).
    Controller,
    /// The controller service, `quietbench serve`: a TLS server, like an agent.
    Service,
    /// A client of the controller service (CI, dashboards, `--controller`): a TLS client the
    /// service tells from a controller by its role ([`ROLE_OU`]).
    Client,
}

/// The subject's organizational unit that names a certificate's role, e.g. "quietbench client":
/// every certificate of one CA chains to it, so the service checks the role, not just the chain.
pub const ROLE_OU: &str = quietbench_proto::roles::UNIT_PREFIX;

impl Role {
    fn prefix(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::Controller => "controller",
            Self::Service => "service",
            Self::Client => "client",
        }
    }

    /// The organizational unit certificates of this role carry.
    pub fn unit(self) -> String {
        format!("{ROLE_OU}{}", self.prefix())
    }

    fn is_server(self) -> bool {
        matches!(self, Self::Agent | Self::Service)
    }
}

/// Making or writing certificates failed.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    /// A file exists where a new one would go.
    #[error(
        "{0} already exists: quietbench certs never overwrites a key or certificate (remove it, or use another --dir)"
    )]
    Exists(PathBuf),
    /// The CA is missing.
    #[error("no CA in {dir}: run `quietbench certs init --dir {dir}` first (missing {missing})")]
    NoCa {
        /// The directory.
        dir: String,
        /// The file not found.
        missing: String,
    },
    /// A name or SAN is not usable.
    #[error("{0}")]
    BadInput(String),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// rcgen refused.
    #[error("cannot make the certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
}

/// The files `issue` wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM, mode 0600).
    pub key: PathBuf,
    /// Names it is valid for.
    pub sans: Vec<String>,
    /// Last day it is valid, RFC 3339.
    pub not_after: String,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CertsError + '_ {
    move |source| CertsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes a new file with `mode`; refuses to replace one.
fn write_new(path: &Path, text: &str, mode: u32) -> Result<(), CertsError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                CertsError::Exists(path.to_path_buf())
            } else {
                CertsError::Io {
                    path: path.to_path_buf(),
                    source: e,
                }
            }
        })?;
    file.write_all(text.as_bytes()).map_err(io(path))?;
    file.sync_all().map_err(io(path))
}

fn validity(params: &mut CertificateParams, from: OffsetDateTime, days: u32) {
    // A minute back: a peer whose clock is a little behind still accepts it.
    params.not_before = from - Duration::minutes(1);
    params.not_after = from + Duration::days(i64::from(days));
}

/// Makes a CA in `dir` (created if needed): `ca.pem` and `ca.key` (0600). Returns the
/// certificate's path.
pub fn init(dir: &Path, now: OffsetDateTime) -> Result<PathBuf, CertsError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let (cert_path, key_path) = (dir.join("ca.pem"), dir.join("ca.key"));
    for p in [&cert_path, &key_path] {
        if p.exists() {
            return Err(CertsError::Exists(p.clone()));
        }
    }
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, "quietbench fleet CA");
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params, now, CA_DAYS);
    let cert = params.self_signed(&key)?;
    write_new(&key_path, &key.serialize_pem(), 0o600)?;
    write_new(&cert_path, &cert.pem(), 0o644)?;
    Ok(cert_path)
}

/// Issues a certificate for `name` in `role`, signed by the CA in `dir`, valid for `days` from
/// `now`. Agents are valid for `name` and every `sans` entry (a DNS name or an IP address);
/// controllers carry `name` as their common name.
pub fn issue(
    dir: &Path,
    role: Role,
    name: &str,
    sans: &[String],
    days: u32,
    now: OffsetDateTime,
) -> Result<Issued, CertsError> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
    {
        return Err(CertsError::BadInput(format!(
            "'{name}' is not a usable name: use letters, digits, '-', '.' and '_' (it names the files)"
        )));
    }
    if days == 0 {
        return Err(CertsError::BadInput("--days must be at least 1".into()));
    }
    let read = |file: &str| -> Result<String, CertsError> {
        let path = dir.join(file);
        std::fs::read_to_string(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => CertsError::NoCa {
                dir: dir.display().to_string(),
                missing: file.to_string(),
            },
            _ => CertsError::Io { path, source: e },
        })
    };
    let ca_key = KeyPair::from_pem(&read("ca.key")?)?;
    let issuer = Issuer::from_ca_cert_pem(&read("ca.pem")?, ca_key)?;

    let mut names: Vec<String> = Vec::new();
    if role.is_server() {
        names.push(name.to_string());
        for san in sans {
            if san.parse::<IpAddr>().is_err()
                && (san.is_empty() || san.contains(|c: char| c.is_whitespace() || c == '/'))
            {
                return Err(CertsError::BadInput(format!(
                    "--san '{san}' is neither an IP address nor a DNS name"
                )));
            }
            if !names.contains(san) {
                names.push(san.clone());
            }
        }
    } else if !sans.is_empty() {
        return Err(CertsError::BadInput(
            "--san is for agents and services (the names a client dials); a client is known by its name"
                .into(),
        ));
    }
    let mut params = CertificateParams::new(names.clone())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    dn.push(DnType::OrganizationalUnitName, role.unit());
    params.distinguished_name = dn;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![if role.is_server() {
        ExtendedKeyUsagePurpose::ServerAuth
    } else {
        ExtendedKeyUsagePurpose::ClientAuth
    }];
    validity(&mut params, now, days);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    let stem = format!("{}-{name}", role.prefix());
    let (cert_path, key_path) = (
        dir.join(format!("{stem}.pem")),
        dir.join(format!("{stem}.key")),
    );
    for p in [&cert_path, &key_path] {
        if p.exists() {
            return Err(CertsError::Exists(p.clone()));
        }
    }
    write_new(&key_path, &key.serialize_pem(), 0o600)?;
    write_new(&cert_path, &cert.pem(), 0o644)?;
    Ok(Issued {
        cert: cert_path,
        key: key_path,
        sans: params
            .subject_alt_names
            .iter()
            .map(|s| match s {
                SanType::IpAddress(ip) => ip.to_string(),
                SanType::DnsName(n) => n.to_string(),
                other => format!("{other:?}"),
            })
            .collect(),
        not_after: params
            .not_after
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_ca_issues_agents_and_controllers_with_private_keys_kept_private() {
        let dir = tempfile::tempdir().unwrap();
        let now = OffsetDateTime::now_utc();
        let ca = init(dir.path(), now).unwrap();
        assert_eq!(mode(&dir.path().join("ca.key")), 0o600);
        assert!(
            std::fs::read_to_string(&ca)
                .unwrap()
                .contains("BEGIN CERTIFICATE")
        );
        let agent = issue(
            dir.path(),
            Role::Agent,
            "a1",
            &["127.0.0.1".into(), "a1.internal".into()],
            DEFAULT_DAYS,
            now,
        )
        .unwrap();
        assert_eq!(agent.sans, ["a1", "127.0.0.1", "a1.internal"]);
        assert_eq!(mode(&agent.key), 0o600);
        assert!(agent.cert.ends_with("agent-a1.pem"));
        let controller = issue(dir.path(), Role::Controller, "ci", &[], DEFAULT_DAYS, now).unwrap();
        assert!(controller.key.ends_with("controller-ci.key"));
        // Never over an existing file.
        assert!(matches!(init(dir.path(), now), Err(CertsError::Exists(_))));
        assert!(matches!(
            issue(dir.path(), Role::Agent, "a1", &[], 1, now),
            Err(CertsError::Exists(_))
        ));
    }

    #[test]
    fn bad_input_is_refused_with_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        let now = OffsetDateTime::now_utc();
        let e = issue(dir.path(), Role::Agent, "a", &[], 1, now).unwrap_err();
        assert!(e.to_string().contains("certs init"), "{e}");
        init(dir.path(), now).unwrap();
        for (name, sans, days) in [
            ("../x", vec![], 1),
            ("a", vec!["has space".to_string()], 1),
            ("a", vec![], 0),
        ] {
            assert!(matches!(
                issue(dir.path(), Role::Agent, name, &sans, days, now),
                Err(CertsError::BadInput(_))
            ));
        }
        assert!(issue(dir.path(), Role::Controller, "c", &["x".into()], 1, now).is_err());
    }
}
