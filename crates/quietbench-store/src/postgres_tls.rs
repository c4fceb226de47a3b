//! TLS to a PostgreSQL store, set in its URL as libpq sets it: `sslmode` (`disable`, `prefer`,
//! `require`, `verify-ca`, `verify-full`; libpq's default, `prefer`, when absent) and
//! `sslrootcert` (a PEM file of CA certificates, or `system` for the machine's roots; libpq's
//! `~/.postgresql/root.crt` when absent). As in libpq, `prefer` and `require` encrypt without
//! checking whom they talk to, and `require` with a CA file is `verify-ca`: across a network
//! only `verify-full` stops a man in the middle.
//!
//! rust-postgres knows neither `sslrootcert` nor the verify modes, so they are taken out of the
//! URL here and become the rustls configuration (aws-lc-rs, the binary's one crypto provider);
//! rust-postgres is handed `sslmode=disable`, `prefer` or `require`. Also as in libpq:
//! - on Unix sockets (every host a folder) `sslmode` is ignored: no TLS is tried there;
//! - `sslrootcert=system` means `verify-full`, and refuses weaker modes (PostgreSQL 16's rule:
//!   a public CA signs certificates for any name its customer controls, so only the name check
//!   makes its roots worth anything);
//! - `prefer` (and only `prefer`) goes on in the clear when the TLS handshake fails.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::db_error::DbError;
use super::pg_url::{PgUrl, percent_decoded};

/// How much TLS the URL asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// In the clear.
    Disable,
    /// TLS when the server offers it, unverified.
    Prefer,
    /// TLS, unverified.
    Require,
    /// TLS, with a certificate from a trusted CA, for any name.
    VerifyCa,
    /// TLS, with a certificate from a trusted CA, for the host dialled.
    VerifyFull,
}

/// Where the trusted CA certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Roots {
    /// A PEM file.
    File(PathBuf),
    /// The machine's store (`sslrootcert=system`).
    System,
}

/// The URL's TLS settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TlsSettings {
    /// The mode, with libpq's rule applied: `require` with a CA file named is `verify-ca`.
    pub mode: Mode,
    /// The CA certificates, for the verify modes.
    pub roots: Option<Roots>,
}

/// Splits `url` into the URL rust-postgres is given and the TLS settings taken out of it.
/// `default_root` is libpq's `~/.postgresql/root.crt`, used by the verify modes when the URL
/// names no `sslrootcert` (and by `require` when it exists, as in libpq).
pub(super) fn split(
    url: &str,
    default_root: Option<&Path>,
) -> Result<(String, TlsSettings), String> {
    let parsed = PgUrl::parse(url).ok_or_else(|| format!("not a postgres:// URL: {url:?}"))?;
    let (mut mode, mut root_cert) = (None, None);
    let mut kept = Vec::new();
    for param in parsed.params() {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        match key {
            "sslmode" => mode = Some(parse_mode(&percent_decoded(value)?)?),
            "sslrootcert" => root_cert = Some(percent_decoded(value)?),
            "sslcert" | "sslkey" | "sslcrl" | "sslpassword" => {
                return Err(format!(
                    "{key}: client certificates for the database are not supported; use a \
                     password or peer authentication, over sslmode=verify-full"
                ));
            }
            _ => kept.push(param),
        }
    }
    let root_named = root_cert.is_some();
    let roots = match root_cert.as_deref() {
        Some("") => return Err("sslrootcert is empty: give a PEM file, or system".into()),
        Some("system") => Some(Roots::System),
        Some(file) => Some(Roots::File(PathBuf::from(file))),
        None => default_root
            .filter(|p| p.is_file())
            .map(|p| Roots::File(p.to_path_buf())),
    };
    let mode = if parsed.only_unix_sockets() {
        // libpq: "sslmode is ignored for Unix domain socket communication".
        Mode::Disable
    } else {
        match (mode, &roots) {
            (None | Some(Mode::VerifyFull), Some(Roots::System)) => Mode::VerifyFull,
            (Some(weaker), Some(Roots::System)) => {
                return Err(format!(
                    "sslrootcert=system needs sslmode=verify-full (or no sslmode), not {}: \
                     a public CA signs certificates for names anyone can hold, so only the \
                     name check keeps a man in the middle out",
                    mode_name(weaker)
                ));
            }
            // libpq: "if a root CA file exists, sslmode=require behaves as verify-ca".
            (Some(Mode::Require), Some(_)) => Mode::VerifyCa,
            (Some(verify @ (Mode::VerifyCa | Mode::VerifyFull)), None) => {
                return Err(format!(
                    "sslmode={} needs the CA that signed the server's certificate: \
                     sslrootcert=FILE (PEM), sslrootcert=system, or ~/.postgresql/root.crt",
                    mode_name(verify)
                ));
            }
            (Some(Mode::Disable), _) if root_named => {
                return Err(
                    "sslrootcert is set but sslmode=disable: one of them is a mistake".into(),
                );
            }
            (mode, _) => mode.unwrap_or(Mode::Prefer),
        }
    };
    // What rust-postgres is told: whether to ask for TLS, and whether to insist.
    kept.push(match mode {
        Mode::Disable => "sslmode=disable",
        Mode::Prefer => "sslmode=prefer",
        Mode::Require | Mode::VerifyCa | Mode::VerifyFull => "sslmode=require",
    });
    let roots = if matches!(mode, Mode::VerifyCa | Mode::VerifyFull) {
        roots
    } else {
        None
    };
    Ok((
        parsed.with_query(&kept.join("&")),
        TlsSettings { mode, roots },
    ))
}

fn parse_mode(value: &str) -> Result<Mode, String> {
    Ok(match value {
        "disable" => Mode::Disable,
        "prefer" => Mode::Prefer,
        "require" => Mode::Require,
        "verify-ca" => Mode::VerifyCa,
        "verify-full" => Mode::VerifyFull,
        "allow" => {
            return Err(
                "sslmode=allow (TLS only when the server insists) is not supported: use prefer, \
                 or disable"
                    .into(),
            );
        }
        other => {
            return Err(format!(
                "sslmode={other:?} is none of disable, prefer, require, verify-ca, verify-full"
            ));
        }
    })
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Disable => "disable",
        Mode::Prefer => "prefer",
        Mode::Require => "require",
        Mode::VerifyCa => "verify-ca",
        Mode::VerifyFull => "verify-full",
    }
}

/// Connects to `url` with the TLS its parameters ask for.
pub(super) fn connect(url: &str) -> Result<postgres::Client, DbError> {
    let default_root = default_root();
    let (url, tls) = split(url, default_root.as_deref()).map_err(DbError::Tls)?;
    let Some(config) = client_config(&tls).map_err(DbError::Tls)? else {
        return Ok(postgres::Client::connect(&url, postgres::NoTls)?);
    };
    match postgres::Client::connect(&url, tokio_postgres_rustls::MakeRustlsConnect::new(config)) {
        // libpq's `prefer`: a handshake that fails (a server rustls cannot agree with, a host
        // given by address alone) is tried again in the clear. rust-postgres does not retry;
        // its TLS failures are the errors of this kind. With NoTls it asks for no TLS at all.
        Err(e) if tls.mode == Mode::Prefer && is_tls_failure(&e) => {
            postgres::Client::connect(&url, postgres::NoTls).map_err(|_| DbError::from(e))
        }
        other => Ok(other?),
    }
}

/// Whether rust-postgres failed in the TLS handshake (its `Kind::Tls`, which it shows only in
/// its message), not in reaching the server or in its answer.
fn is_tls_failure(e: &postgres::Error) -> bool {
    e.as_db_error().is_none() && e.to_string().starts_with("error performing TLS handshake")
}

/// The rustls configuration for `settings`, or `None` for `disable`.
pub(super) fn client_config(
    settings: &TlsSettings,
) -> Result<Option<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier: Arc<dyn ServerCertVerifier> = match settings.mode {
        Mode::Disable => return Ok(None),
        Mode::Prefer | Mode::Require => {
            Arc::new(Unverified(provider.signature_verification_algorithms))
        }
        Mode::VerifyCa | Mode::VerifyFull => {
            let roots = root_store(settings.roots.as_ref())?;
            let webpki =
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| format!("the CA certificates: {e}"))?;
            if settings.mode == Mode::VerifyCa {
                Arc::new(AnyName(webpki))
            } else {
                webpki
            }
        }
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Some(config))
}

fn root_store(roots: Option<&Roots>) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match roots {
        Some(Roots::File(path)) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
            if certs.is_empty() {
                return Err(format!(
                    "sslrootcert {}: no PEM certificate in it",
                    path.display()
                ));
            }
            for cert in certs {
                store
                    .add(cert)
                    .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
            }
        }
        Some(Roots::System) => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
            if store.is_empty() {
                return Err("sslrootcert=system: this machine has no CA certificates".into());
            }
        }
        None => return Err("no CA certificates".into()),
    }
    Ok(store)
}

/// `verify-ca`: the chain must reach a trusted CA; the name is not checked. rustls checks the
/// chain before the name, so a name mismatch means the chain was good.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` and `require`: encrypted, but any certificate is taken (libpq's meaning). The
/// handshake's signatures are still checked against the certificate presented.
#[derive(Debug)]
struct Unverified(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// libpq's default CA file, `~/.postgresql/root.crt`.
pub(super) fn default_root() -> Option<PathBuf> {
    std::env::home_dir().map(|home| home.join(".postgresql").join("root.crt"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(url: &str) -> (String, TlsSettings) {
        split(url, None).unwrap()
    }

    #[test]
    fn prefer_is_the_default_and_other_parameters_are_kept() {
        let (url, tls) = settings("postgres://qb@db/results?connect_timeout=5");
        assert_eq!(
            url,
            "postgres://qb@db/results?connect_timeout=5&sslmode=prefer"
        );
        assert_eq!(
            tls,
            TlsSettings {
                mode: Mode::Prefer,
                roots: None
            }
        );
    }

    #[test]
    fn verify_modes_take_their_ca_out_of_the_url() {
        let (url, tls) =
            settings("postgres://qb@db/r?sslmode=verify-full&sslrootcert=/etc/ca%20dir/ca.pem");
        assert_eq!(url, "postgres://qb@db/r?sslmode=require");
        assert_eq!(tls.mode, Mode::VerifyFull);
        assert_eq!(tls.roots, Some(Roots::File("/etc/ca dir/ca.pem".into())));
    }

    #[test]
    fn the_machines_roots_mean_verify_full_as_in_libpq_16() {
        for url in [
            "postgres://qb@db/r?sslrootcert=system",
            "postgres://qb@db/r?sslmode=verify-full&sslrootcert=system",
        ] {
            let (_, tls) = settings(url);
            assert_eq!(
                (tls.mode, tls.roots),
                (Mode::VerifyFull, Some(Roots::System))
            );
        }
        for weaker in ["prefer", "require", "verify-ca", "disable"] {
            let err = split(
                &format!("postgres://qb@db/r?sslmode={weaker}&sslrootcert=system"),
                None,
            )
            .unwrap_err();
            assert!(err.contains("needs sslmode=verify-full"), "{weaker}: {err}");
        }
    }

    #[test]
    fn unix_sockets_ignore_sslmode_as_in_libpq() {
        for url in [
            "postgresql:///qb?host=/run/postgresql&sslmode=verify-full",
            "postgresql://%2Frun%2Fpostgresql/qb?sslmode=require&sslrootcert=/ca.pem",
            "postgresql:///qb?host=/run/postgresql",
        ] {
            let (kept, tls) = settings(url);
            assert_eq!(tls.mode, Mode::Disable, "{url}");
            assert!(kept.ends_with("sslmode=disable"), "{kept}");
        }
        // A socket and a network host: the network host gets the TLS asked for.
        let (_, tls) = settings("postgresql:///qb?host=/run/pg,db&sslmode=require");
        assert_eq!(tls.mode, Mode::Require);
    }

    #[test]
    fn a_password_with_slashes_and_question_marks_is_left_alone() {
        let (kept, tls) = settings("postgres://ci:a/b?c@db/r?sslmode=require");
        assert_eq!(kept, "postgres://ci:a/b?c@db/r?sslmode=require");
        assert_eq!(tls.mode, Mode::Require);
    }

    #[test]
    fn require_with_a_ca_is_verify_ca_as_in_libpq() {
        let (_, tls) = settings("postgres://db/r?sslmode=require&sslrootcert=/ca.pem");
        assert_eq!(tls.mode, Mode::VerifyCa);
        let (_, tls) = settings("postgres://db/r?sslmode=require");
        assert_eq!((tls.mode, tls.roots), (Mode::Require, None));
    }

    #[test]
    fn libpqs_default_ca_file_counts_only_where_it_exists() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root.crt");
        let err = split("postgres://db/r?sslmode=verify-full", Some(&root)).unwrap_err();
        assert!(err.contains("sslrootcert=FILE"), "{err}");
        std::fs::write(&root, "").unwrap();
        let (_, tls) = split("postgres://db/r?sslmode=verify-full", Some(&root)).unwrap();
        assert_eq!(tls.roots, Some(Roots::File(root.clone())));
        let (_, tls) = split("postgres://db/r?sslmode=require", Some(&root)).unwrap();
        assert_eq!(tls.mode, Mode::VerifyCa);
        let (_, tls) = split("postgres://db/r", Some(&root)).unwrap();
        assert_eq!((tls.mode, tls.roots), (Mode::Prefer, None));
    }

    #[test]
    fn bad_settings_are_refused_by_name() {
        for (url, words) in [
            ("postgres://db/r?sslmode=verify", "none of disable"),
            ("postgres://db/r?sslmode=allow", "not supported"),
            ("postgres://db/r?sslmode=verify-full", "needs the CA"),
            (
                "postgres://db/r?sslmode=disable&sslrootcert=/ca.pem",
                "one of them",
            ),
            ("postgres://db/r?sslrootcert=", "empty"),
            ("postgres://db/r?sslcert=/c.pem", "client certificates"),
            ("postgres://db/r?sslrootcert=%zz", "bad %-escape"),
        ] {
            let err = split(url, None).unwrap_err();
            assert!(err.contains(words), "{url}: {err}");
        }
    }

    #[test]
    fn a_missing_or_empty_ca_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.pem");
        let tls = TlsSettings {
            mode: Mode::VerifyFull,
            roots: Some(Roots::File(missing.clone())),
        };
        let err = client_config(&tls).unwrap_err();
        assert!(err.contains(&missing.display().to_string()), "{err}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let tls = TlsSettings {
            mode: Mode::VerifyFull,
            roots: Some(Roots::File(empty)),
        };
        assert!(
            client_config(&tls)
                .unwrap_err()
                .contains("no PEM certificate")
        );
        let plain = TlsSettings {
            mode: Mode::Disable,
            roots: None,
        };
        assert!(client_config(&plain).unwrap().is_none());
    }
}
