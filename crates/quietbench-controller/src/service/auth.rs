//! Who may call the service: with mutual TLS every caller's certificate already chains to the
//! CA (the TLS handshake checked it); this checks that it is a client's (`quietbench certs
//! issue --client NAME`), so that a controller's or an agent's certificate, issued by the same
//! CA for another purpose, does not open the service.

use tonic::service::Interceptor;
use tonic::{Request, Status};

use crate::tls::certs::Role;

/// Lets a call through when TLS is off (loopback) or its client certificate has the client role.
#[derive(Debug, Clone)]
pub struct ClientRole {
    /// Mutual TLS is on: every call must show a client certificate.
    pub required: bool,
}

/// The roles (organizational units) a DER certificate's subject names.
pub fn roles_of(der: &[u8]) -> Result<Vec<String>, String> {
    quietbench_proto::roles::units_of(der)
}

impl Interceptor for ClientRole {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        if !self.required {
            return Ok(request);
        }
        let certs = request.peer_certs().ok_or_else(|| {
            Status::unauthenticated("no client certificate: the service needs mutual TLS")
        })?;
        let leaf = certs
            .first()
            .ok_or_else(|| Status::unauthenticated("no client certificate"))?;
        let roles = roles_of(leaf.as_ref()).map_err(Status::unauthenticated)?;
        let want = Role::Client.unit();
        if roles.contains(&want) {
            Ok(request)
        } else {
            Err(Status::permission_denied(format!(
                "this certificate is not a client's (its role: {}): issue one with `quietbench \
                 certs issue --client NAME`",
                if roles.is_empty() {
                    "none".to_string()
                } else {
                    roles.join(", ")
                }
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::certs;

    fn der_of(pem_path: &std::path::Path) -> Vec<u8> {
        let pem = std::fs::read_to_string(pem_path).unwrap();
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, body).unwrap()
    }

    #[test]
    fn each_issued_certificate_names_its_role() {
        let dir = tempfile::tempdir().unwrap();
        let now = time::OffsetDateTime::now_utc();
        certs::init(dir.path(), now).unwrap();
        for (role, want) in [
            (Role::Client, "quietbench client"),
            (Role::Controller, "quietbench controller"),
            (Role::Service, "quietbench service"),
        ] {
            let sans = if role == Role::Service {
                vec!["127.0.0.1".to_string()]
            } else {
                Vec::new()
            };
            let issued = certs::issue(dir.path(), role, "n", &sans, 1, now).unwrap();
            assert_eq!(roles_of(&der_of(&issued.cert)).unwrap(), [want]);
        }
        assert!(roles_of(b"not a certificate").is_err());
        assert_eq!(Role::Client.unit(), quietbench_proto::roles::CLIENT);
    }
}
